"""frenzy-srpt: preemptive Frenzy, shortest predicted remaining service first (SRPT with MARP's size knowledge).

Priority = the job's predicted remaining service: tokens left x GPU-seconds per token of its MARP plan with the
fewest GPU-hours (`plans.rank_plans`, objective "gpu-hours", with the performance model's step times), i.e. the
GPU-time it still needs at its most efficient. Shortest first is SRPT (Schrage 1968; optimal for mean response
time on one server); in GPU-time rather than wall time it is Tiresias's clairvoyant SRSF baseline (Gu et al.,
NSDI'19, Sec. 2), which weighs a job by its GPUs as well as its length. Known to this policy: the token budget
(given by the user) and the predicted speeds, not the true run time. A job preempts a running one only if the
victim's remaining service is more than (1 + `Options.replan_min_gain`) times its own (the required gain).
The walk, the thrash guard and re-planning are `frenzy_preempt.PreemptiveWalk`'s; this module gives its order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from frenzy_core.models import ZOO
from frenzy_core.policies.base import SchedulerView
from frenzy_core.policies.frenzy import FrenzyPolicy, fair_share
from frenzy_core.policies.frenzy_apps import FrenzyShareAppsRounds
from frenzy_core.policies.frenzy_preempt import PreemptionOrder, PreemptiveWalk, PreemptOptions

COLOUR = "#ad1457"
NOTE = ("Frenzy that preempts, shortest job first. It knows each job's size (its token budget) and how fast each plan "
        "trains, so it runs first the jobs with the least GPU-time left; a short job may stop a much longer running "
        "one (which resumes later from its checkpoint, paying a restart), and a running job may move to a faster "
        "plan when GPUs free up. A job that started less than 10 minutes ago is never stopped.")


@dataclass(frozen=True)
class Options(PreemptOptions):
    """frenzy-srpt's knobs: the preemptive walk's guard and required gain (`frenzy_preempt.PreemptOptions`)."""


class SrptOrder(PreemptionOrder):
    """Shortest predicted remaining service first; a job preempts one whose is (1 + replan_min_gain) x its own."""

    def __init__(self, policy):
        super().__init__(policy)
        self._gpu_s_per_token: dict[int, float] = {}  # class row -> GPU-seconds per token of its leanest plan

    def gpu_s_per_token(self, st) -> float:
        got = self._gpu_s_per_token.get(st.cls)
        if got is None:
            ctx = self.policy.ctx
            plans = ctx.estimator.rank(ZOO[st.job.model], st.job.training, ctx.cluster, "gpu-hours",
                                       ctx.options.safety_margin)
            got = plans[0].num_gpus / plans[0].tokens_per_s if plans else math.inf
            self._gpu_s_per_token[st.cls] = got
        return got

    def priority(self, view: SchedulerView, st) -> float:
        """Predicted remaining GPU-seconds at the job's most efficient plan."""
        return st.believed_left_share(st.done_share_at(view.now_s)) * st.job.tokens * self.gpu_s_per_token(st)

    def outranks(self, winner: float, victim: float) -> bool:
        return victim > winner * (1.0 + self.policy.options.replan_min_gain)


class FrenzySrptPolicy(FrenzyPolicy):
    """MARP + HAS, fair-share candidates, the preemptive walk in SRPT order."""

    name = "frenzy-srpt"
    Options = Options
    colour = COLOUR
    note = NOTE
    # on the sia-apps job model it runs frenzy-share's allocator: no preemption there (an application's remaining
    # time is not known from its size; its goodput changes every epoch). Kept as it always was, by inheritance until
    # the composition made it explicit; the preemptive elastic scheduler on that model is frenzy-elastic-srpt
    round_allocator = FrenzyShareAppsRounds
    ranking = "time"
    candidate_rule = staticmethod(fair_share)
    chooser = PreemptiveWalk
    preemption = SrptOrder
