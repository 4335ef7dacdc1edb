"""frenzy-las: preemptive Frenzy, least attained GPU-service first, with no knowledge of job sizes.

Tiresias's Discretized 2D-LAS (Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning",
NSDI'19, Sec. 3.2): a job's attained service is the GPU-time it has received (GPUs x time, summed over its runs);
jobs sit in priority queues by attained service (`QUEUE_THRESHOLDS_GPU_H`, chosen before any run: one decade
apart, from 1 GPU-hour), a new job enters the top queue, a running job is demoted when it crosses a threshold, and
within a queue jobs are served first-come first-served (by arrival). A job preempts running jobs of lower queues
only (strictly: no preemption inside a queue, which is what keeps the discretised version from thrashing).
This is the fair comparison with Sia: neither knows how long a job is. Not taken from Tiresias: its starvation
promotion (a job waiting long in a low queue moves up) and its placement consolidation; placement is HAS's.
The walk, the thrash guard and re-planning are `frenzy_preempt.PreemptiveFrenzy`'s.
"""

from __future__ import annotations

from bisect import bisect_right

from frenzy_core.policies.base import SchedulerView
from frenzy_core.policies.frenzy_preempt import PreemptiveFrenzy

QUEUE_THRESHOLDS_GPU_H = (1.0, 10.0, 100.0)  # attained GPU-hours at which a job moves one queue down
_THRESHOLDS_GPU_S = tuple(h * 3600.0 for h in QUEUE_THRESHOLDS_GPU_H)


class FrenzyLasPolicy(PreemptiveFrenzy):
    name = "frenzy-las"

    def priority(self, view: SchedulerView, st) -> float:
        """The job's queue: 0 (top) for less than 1 GPU-hour attained, then one per threshold crossed."""
        return float(bisect_right(_THRESHOLDS_GPU_S, st.attained_gpu_s(view.now_s)))

    def outranks(self, winner: float, victim: float) -> bool:
        return victim > winner

    def next_wake_s(self, view: SchedulerView) -> float | None:
        """The next demotion of a running job, or the next time one becomes preemptible, whichever is first."""
        now = view.now_s
        wake = super().next_wake_s(view)
        for j in view.running:
            st = view.jobs[j]
            got = st.attained_gpu_s(now)
            k = bisect_right(_THRESHOLDS_GPU_S, got)
            if k < len(_THRESHOLDS_GPU_S):
                t = now + (_THRESHOLDS_GPU_S[k] - got) / st.plan.num_gpus
                wake = t if wake is None else min(wake, t)
        return wake
