"""frenzy-share: Frenzy ranked by time, each job capped at an equal share of the GPUs it can use. Beyond the paper.

Why: jobs here are not elastic (a job keeps the allocation it starts with), and the performance model scales LLM
jobs almost linearly, so ranking by time makes the first job on an idle cluster take every GPU of the fastest type
it fits, and the next arrivals queue behind it (docs/results.md: objective "time" queues badly on modern-mixed);
ranking by GPU-hours takes the fewest GPUs and leaves an idle cluster idle. frenzy-share keeps MARP and HAS as in
the paper and changes only which ranked plans HAS may take for a job at this decision:

    cap = capacity of the GPU types the job has a plan on / (running jobs + waiting jobs)

(the waiting jobs include this one; a job's share is its equal share of the GPUs it can use, the processor-sharing
split at the moment it starts), never below the job's smallest plan, so a job is never held back by its cap. Plans of
more than `cap` GPUs are skipped; among the rest HAS takes the first, by time, that fits now. So on an idle cluster a
lone job still gets the whole fast type, and under load each start leaves room for the jobs already known.

Composed (`frenzy.FrenzyPolicy`): ranking "time", candidate rule `frenzy.fair_share`, the paper's `FirstFit` chooser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from frenzy_core.policies.frenzy import FrenzyPolicy, fair_share
from frenzy_core.policies.frenzy_apps import FrenzyShareAppsRounds

COLOUR = "#00838f"
NOTE = ("Frenzy that shares. Plans are ranked by training time, but a job may take at most its equal share of the GPUs "
        "it can use (their number over the jobs running and waiting, never less than its smallest plan), so a lone "
        "job still gets the fastest GPUs and, when many wait, each start leaves room for the others. A job keeps "
        "its first allocation to the end.")


@dataclass(frozen=True)
class Options:
    """frenzy-share has no knobs of its own: the cap is the fair share, the ranking is by time."""

    legacy_keys: ClassVar[dict[str, str]] = {}


class FrenzySharePolicy(FrenzyPolicy):
    """HAS over plans ranked by time, skipping plans larger than the job's fair share (see the module docstring)."""

    name = "frenzy-share"
    Options = Options
    colour = COLOUR
    note = NOTE
    round_allocator = FrenzyShareAppsRounds  # the same policy on the sia-apps job model
    ranking = "time"
    candidate_rule = staticmethod(fair_share)
