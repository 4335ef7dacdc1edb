"""frenzy-srpt: preemptive Frenzy, shortest predicted remaining service first (SRPT with MARP's size knowledge).

Priority = the job's predicted remaining service: tokens left x GPU-seconds per token of its MARP plan with the
fewest GPU-hours (`plans.rank_plans`, objective "gpu-hours", with the performance model's step times), i.e. the
GPU-time it still needs at its most efficient. Shortest first is SRPT (Schrage 1968; optimal for mean response
time on one server); in GPU-time rather than wall time it is Tiresias's clairvoyant SRSF baseline (Gu et al.,
NSDI'19, Sec. 2), which weighs a job by its GPUs as well as its length. Known to this policy: the token budget
(given by the user) and the predicted speeds, not the true run time. A job preempts a running one only if the
victim's remaining service is more than (1 + `SimOptions.replan_min_gain`) times its own (the required gain).
The walk, the thrash guard and re-planning are `frenzy_preempt.PreemptiveFrenzy`'s.
"""

from __future__ import annotations

import math

from frenzy_core.models import ZOO
from frenzy_core.policies.base import SchedulerView
from frenzy_core.policies.frenzy_preempt import PreemptiveFrenzy


class FrenzySrptPolicy(PreemptiveFrenzy):
    name = "frenzy-srpt"

    def __init__(self, ctx):
        super().__init__(ctx)
        self._gpu_s_per_token: dict[int, float] = {}  # class row -> GPU-seconds per token of its leanest plan

    def gpu_s_per_token(self, st) -> float:
        got = self._gpu_s_per_token.get(st.cls)
        if got is None:
            opts = self.ctx.options
            plans = self.ctx.estimator.rank(ZOO[st.job.model], st.job.training, self.ctx.cluster, "gpu-hours",
                                            opts.safety_margin)
            got = plans[0].num_gpus / plans[0].tokens_per_s if plans else math.inf
            self._gpu_s_per_token[st.cls] = got
        return got

    def priority(self, view: SchedulerView, st) -> float:
        """Predicted remaining GPU-seconds at the job's most efficient plan."""
        return st.believed_left_share(self.done_now(view, st)) * st.job.tokens * self.gpu_s_per_token(st)

    def outranks(self, winner: float, victim: float) -> bool:
        return victim > winner * (1.0 + self.ctx.options.replan_min_gain)
