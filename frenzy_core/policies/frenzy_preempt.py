"""Preemptive, re-planning Frenzy: MARP's plans and HAS, with a priority order that may preempt running jobs.

Beyond the paper (arXiv 2412.14479 keeps a job's first allocation for life). `PreemptiveWalk` is a Frenzy chooser
(`frenzy.Chooser`); the policy's `preemption` order gives the priority: `frenzy-srpt` (predicted remaining service,
shortest first; size knowledge from MARP + the performance model) and `frenzy-las` (least attained service first,
Tiresias-style discretised queues; no size knowledge). At every arrival and release (and at the wake-ups it asks
for, `next_wake_s`) a decision walks the running jobs and the first `backfill_window` queued jobs in priority order
(ties: arrival, then index) over a working copy of the free GPUs:

- a queued job takes the first of its candidate plans HAS can place now (the policy's `candidate_rule`, for both
  frenzy-share's `fair_share`: MARP plans ranked by time, at most its fair share `usable GPUs / active jobs`, never
  below its smallest plan; plans predicted to need no less memory than one that crashed out of memory are dropped). If none fits, it may preempt running
  jobs that (a) rank below it by the order's `outranks` rule (the required gain), (b) have run at least
  `Options.preempt_min_run_s` since their last start (the thrash guard) and (c) are predicted to need longer
  than their own restart to finish; victims are taken lowest priority first until HAS places one of its
  candidates, and victims whose GPUs the placement did not use are kept running.
- a preempted job is re-planned later in the same walk like any queued job (another plan, GPU type or size), on
  what is left; it pays `SimOptions.restart` (the simulator charges it, the same `RestartModel` as every policy).
- a running job that has run `preempt_min_run_s` may be re-planned onto a faster candidate that HAS can place in
  the free GPUs plus its own, only if its predicted remaining time, restart included, drops by at least
  `Options.replan_min_gain` (so a completion can grow the jobs left, as an elastic scheduler does).

Only the simulator changes state: the walk returns Preempt decisions, then Start decisions (the simulator applies
the preemptions first). Progress is the simulator's: a preempted job keeps what it trained up to the preemption
(its checkpoint), minus nothing; a restart cut short by another preemption is lost.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from itertools import islice
from typing import ClassVar

import numpy as np

from frenzy_core.packing import FreeGPUs
from frenzy_core.policies.base import Decision, Preempt, Reject, SchedulerView, Start
from frenzy_core.policies.frenzy import Chooser, FrenzyPolicy
from frenzy_core.workload import scale_plan


@dataclass(frozen=True)
class PreemptOptions:
    """The preemptive walk's knobs (frenzy-srpt's and frenzy-las's `Options`; chosen on bench/jct.py's tuning
    settings only)."""

    # a running job is preempted or re-planned only after it has run this long since its last start (the thrash
    # guard, on top of the restart it must pay) ...
    preempt_min_run_s: float = 600.0
    # ... and re-planned to a larger plan only if its predicted remaining time, restart included, drops by at least
    # this share (frenzy-srpt: a job preempts another only if the victim's remaining service is (1 + this) x its own)
    replan_min_gain: float = 0.25

    legacy_keys: ClassVar[dict[str, str]] = {"preempt_min_run_s": "preempt_min_run_s",
                                             "replan_min_gain": "replan_min_gain"}


class PreemptionOrder(ABC):
    """Who runs first in the preemptive walk, and who may preempt whom: a policy's `preemption` (frenzy_srpt,
    frenzy_las); built once per run with the policy."""

    def __init__(self, policy: FrenzyPolicy):
        self.policy = policy

    @abstractmethod
    def priority(self, view: SchedulerView, st) -> float:
        """Lower runs first."""

    @abstractmethod
    def outranks(self, winner: float, victim: float) -> bool:
        """Whether a job of priority `winner` may preempt one of priority `victim` (the required gain)."""

    def next_wake_s(self, view: SchedulerView, wake: float | None) -> float | None:
        """The walk's wake-up (`wake`: when the first running job becomes preemptible), or an earlier one of the
        order's own (e.g. a demotion)."""
        return wake


class PreemptiveWalk(Chooser):
    """The shared walk (module docstring) in the order of the policy's `preemption`."""

    preemptive = True  # the simulator also calls it after a release with nothing queued (a running job may grow)

    def __init__(self, policy: FrenzyPolicy):
        super().__init__(policy)
        self.ctx = policy.ctx
        self.order: PreemptionOrder = policy.preemption(policy)

    # --- what the walk needs to know about a job ---------------------------------------------------------------
    def _candidates(self, st, n_active: int):
        policy = self.policy
        plans, _mins = policy.ranked(st)
        return policy.learned(st, policy.candidate_rule(policy, st, plans, n_active))

    def _preemptible(self, view: SchedulerView, st) -> bool:
        """The thrash guard: it has run long enough since its last start, and finishing is not nearer than a
        restart would take."""
        now = view.now_s
        if now - st.run_start_s < self.policy.options.preempt_min_run_s:
            return False
        return st.believed_end_s() - now > self.ctx.options.restart.cost_s(st.job)

    # --- the decision --------------------------------------------------------------------------------------------
    def decide(self, view: SchedulerView) -> list[Decision]:
        jobs, index = view.jobs, view.index
        queued = list(islice(view.queue, self.ctx.options.backfill_window))
        running = list(view.running)
        n_active = len(view.running) + len(view.queue)
        prio = {j: self.order.priority(view, jobs[j]) for j in running + queued}
        order = sorted(prio, key=lambda j: (prio[j], jobs[j].job.arrival_s, j))
        work = np.array(view.free, dtype=np.int64)
        free: FreeGPUs | None = None
        holding = {j: jobs[j].placement for j in running}  # running jobs that still hold their GPUs
        preempted: list[int] = []
        starts: list[Decision] = []  # starts and rejects, in walk order
        for j in order:
            st = jobs[j]
            if j in holding:
                got = self._grow(view, st, holding[j], work, n_active)
                if got is not None:
                    plan, pl = got
                    for node, n in holding.pop(j).nodes:
                        work[node] += n
                    for node, n in pl.nodes:
                        work[node] -= n
                    free = None
                    preempted.append(j)
                    starts.append(Start(j, scale_plan(plan, st.job.tokens), pl))
                continue
            plans, _ = self.policy.ranked(st)
            if not plans:
                starts.append(Reject(j, "no plan fits this cluster's GPUs"))
                continue
            cands = self._candidates(st, n_active)
            if not cands:
                starts.append(Reject(j, "every plan predicted to fit ran out of memory"))
                continue
            if free is None:
                free = FreeGPUs(index, work)
            got = free.first_plan(cands)
            victims: list[int] = []
            if got is None:
                got, victims = self._by_preemption(view, j, prio, cands, holding, work)
                if got is None:
                    continue
                for v in victims:
                    for node, n in holding.pop(v).nodes:
                        work[node] += n
                preempted.extend(victims)
            plan, pl = got
            for node, n in pl.nodes:
                work[node] -= n
            if victims:
                free = None
            else:
                free.take(pl)
            starts.append(Start(j, scale_plan(plan, st.job.tokens), pl))
        return [Preempt(j) for j in preempted] + starts

    def _by_preemption(self, view: SchedulerView, j: int, prio: dict, cands, holding: dict, work: np.ndarray):
        """Victims lowest priority first until HAS places one of j's candidates; those it did not need stay."""
        jobs = view.jobs
        types = {view.index.type_names[c[0]] for c in cands}
        pool = [v for v in holding if jobs[v].plan.gpu_type in types and self.order.outranks(prio[j], prio[v])
                and self._preemptible(view, jobs[v])]
        if not pool:
            return None, []
        pool.sort(key=lambda v: (prio[v], jobs[v].job.arrival_s, v), reverse=True)
        trial = work.copy()
        taken: list[int] = []
        for v in pool:
            for node, n in holding[v].nodes:
                trial[node] += n
            taken.append(v)
            got = FreeGPUs(view.index, trial).first_plan(cands)
            if got is not None:
                used = {node for node, _n in got[1].nodes}
                return got, [u for u in taken if any(node in used for node, _n in holding[u].nodes)]
        return None, []

    def _grow(self, view: SchedulerView, st, placement, work: np.ndarray, n_active: int):
        """A faster plan for a running job in the free GPUs plus its own, if it pays for its restart by the gain."""
        opts = self.policy.options
        now = view.now_s
        if now - st.run_start_s < opts.preempt_min_run_s:
            return None
        left = st.believed_left_share(st.done_share_at(view.now_s))
        current = st.believed_end_s() - now
        restart = self.ctx.options.restart.cost_s(st.job)
        bar = (1.0 - opts.replan_min_gain) * current
        own_t = view.index.type_pos(st.plan.gpu_type)
        by_type = None
        trial = None
        for c in self._candidates(st, n_active):
            t, n, _tp, plan = c
            new = restart + left * st.job.tokens / plan.tokens_per_s
            if new >= bar:
                return None  # candidates are ranked by time: no later one is faster
            if (t, n, plan.tp) == (own_t, st.plan.num_gpus, st.plan.tp):
                return None  # its own shape is the fastest that could pay
            if by_type is None:
                by_type = view.index.free_by_type(work)
            if by_type[t] + (st.plan.num_gpus if t == own_t else 0) < n:
                continue
            if trial is None:
                trial = work.copy()
                for node, k in placement.nodes:
                    trial[node] += k
                trial = FreeGPUs(view.index, trial)
            got = trial.first_plan((c,))
            if got is not None:
                return got
        return None

    def next_wake_s(self, view: SchedulerView) -> float | None:
        """When the first running job becomes preemptible (a waiting job may then take its GPUs), or the order's
        own earlier wake-up."""
        now, guard = view.now_s, self.policy.options.preempt_min_run_s
        later = [view.jobs[j].run_start_s + guard for j in view.running if view.jobs[j].run_start_s + guard > now]
        return self.order.next_wake_s(view, min(later) if later else None)
