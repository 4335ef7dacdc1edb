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
"""

from __future__ import annotations

from frenzy_core.policies.base import SchedulerView
from frenzy_core.policies.frenzy import _NONE, FrenzyPolicy
from frenzy_core.policies.frenzy_apps import FrenzyShareAppsRounds


class FrenzySharePolicy(FrenzyPolicy):
    """HAS over plans ranked by time, skipping plans larger than the job's fair share (see the module docstring)."""

    name = "frenzy-share"
    round_allocator = FrenzyShareAppsRounds  # the same policy on the sia-apps job model

    def __init__(self, ctx):
        super().__init__(ctx)
        self._capacity = [int(c) for c in ctx.index.capacity_by_type()]
        self._usable: dict[int, tuple[int, int]] = {}  # class row -> (GPUs of the types it has plans on, min GPUs)

    def objective(self) -> str:
        return "time"

    def candidates(self, view: SchedulerView, st, plans):
        got = self._usable.get(st.cls)
        if got is None:
            mins = self.ranked(st)[1]
            got = (sum(c for c, m in zip(self._capacity, mins, strict=True) if m < _NONE), min(mins))
            self._usable[st.cls] = got
        usable, smallest = got
        cap = max(usable / (len(view.running) + len(view.queue)), smallest)
        return [p for p in plans if p[1] <= cap]
