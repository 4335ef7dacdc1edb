"""frenzy-las: preemptive Frenzy, least attained GPU-service first, with no knowledge of job sizes.

Tiresias's Discretized 2D-LAS (Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning",
NSDI'19, Sec. 3.2): a job's attained service is the GPU-time it has received (GPUs x time, summed over its runs);
jobs sit in priority queues by attained service (`QUEUE_THRESHOLDS_GPU_H`, chosen before any run: one decade
apart, from 1 GPU-hour), a new job enters the top queue, a running job is demoted when it crosses a threshold, and
within a queue jobs are served first-come first-served (by arrival). A job preempts running jobs of lower queues
only (strictly: no preemption inside a queue, which is what keeps the discretised version from thrashing).
This is the fair comparison with Sia: neither knows how long a job is. Not taken from Tiresias: its starvation
promotion (a job waiting long in a low queue moves up) and its placement consolidation; placement is HAS's.
The walk, the thrash guard and re-planning are `frenzy_preempt.PreemptiveWalk`'s; this module gives its order.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from frenzy_core.policies.base import SchedulerView
from frenzy_core.policies.frenzy import FrenzyPolicy, fair_share
from frenzy_core.policies.frenzy_apps import FrenzyShareAppsRounds
from frenzy_core.policies.frenzy_preempt import PreemptionOrder, PreemptiveWalk, PreemptOptions

QUEUE_THRESHOLDS_GPU_H = (1.0, 10.0, 100.0)  # attained GPU-hours at which a job moves one queue down
_THRESHOLDS_GPU_S = tuple(h * 3600.0 for h in QUEUE_THRESHOLDS_GPU_H)
COLOUR = "#283593"
NOTE = ("Frenzy that preempts, without knowing job sizes (like Tiresias). Jobs that have had the least GPU-time so "
        "far run first: every job starts in the top queue and moves down one at 1, 10 and 100 GPU-hours; a job may "
        "stop running jobs of lower queues only (they resume later from their checkpoint, paying a restart). A job "
        "that started less than 10 minutes ago is never stopped.")


@dataclass(frozen=True)
class Options(PreemptOptions):
    """frenzy-las's knobs: the preemptive walk's guard and re-planning gain (`frenzy_preempt.PreemptOptions`); the
    queue thresholds are fixed (`QUEUE_THRESHOLDS_GPU_H`)."""


class LasOrder(PreemptionOrder):
    """Discretised least attained service: a job's queue by attained GPU-hours; preemption across queues only."""

    def priority(self, view: SchedulerView, st) -> float:
        """The job's queue: 0 (top) for less than 1 GPU-hour attained, then one per threshold crossed."""
        return float(bisect_right(_THRESHOLDS_GPU_S, st.attained_gpu_s(view.now_s)))

    def outranks(self, winner: float, victim: float) -> bool:
        return victim > winner

    def next_wake_s(self, view: SchedulerView, wake: float | None) -> float | None:
        """The next demotion of a running job, or the walk's wake-up, whichever is first."""
        now = view.now_s
        for j in view.running:
            st = view.jobs[j]
            got = st.attained_gpu_s(now)
            k = bisect_right(_THRESHOLDS_GPU_S, got)
            if k < len(_THRESHOLDS_GPU_S):
                t = now + (_THRESHOLDS_GPU_S[k] - got) / st.plan.num_gpus
                wake = t if wake is None else min(wake, t)
        return wake


class FrenzyLasPolicy(FrenzyPolicy):
    """MARP + HAS, fair-share candidates, the preemptive walk in least-attained-service order."""

    name = "frenzy-las"
    Options = Options
    colour = COLOUR
    note = NOTE
    # on the sia-apps job model it runs frenzy-share's allocator: no preemption there (an application's remaining
    # time is not known from its size; its goodput changes every epoch). Kept as it always was, by inheritance until
    # the composition made it explicit; the preemptive elastic scheduler on that model is frenzy-elastic
    round_allocator = FrenzyShareAppsRounds
    ranking = "time"
    candidate_rule = staticmethod(fair_share)
    chooser = PreemptiveWalk
    preemption = LasOrder
