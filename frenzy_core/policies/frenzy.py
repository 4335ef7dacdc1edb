"""Frenzy: MARP's ranked plans + HAS placement. The user gives no GPU count; memory decides what can run where.

Each job class (model, training) is ranked once per run with the estimator (`plans.rank_plans` by default) under
`Options.objective` (see docs/results.md for why the default is what it is). Plans that differ only in what HAS
cannot see (micro-batch, d/p for the same t) are collapsed to the best of them. Each decision point walks the first
`backfill_window` queued jobs in order and starts each that HAS can place now (FCFS with bounded backfill): the
first ranked plan the cluster can satisfy now, as in the paper (arXiv 2412.14479, Algorithm 1).

The per-class ranking is the only thing cached across decisions (it depends on the class alone). Each decision
builds a fresh `packing.FreeGPUs` from the view, so a placement costs O(GPUs per node) rather than O(nodes).

Every Frenzy variant is this class composed of three parts, each a class attribute, rather than a chain of
subclasses (a variant is one direct subclass that sets them):

- `ranking`: the objective MARP ranks by (None: `Options.objective`; the variants below "time");
- `candidate_rule`: which ranked plans the chooser may take for a job now (`all_plans`, the paper's, or
  `fair_share`, frenzy-share's cap);
- `chooser`: how candidates become decisions (`FirstFit`, the paper's HAS walk, here; `frenzy_eft.EarliestFinish`;
  `frenzy_preempt.PreemptiveWalk`, which takes a `preemption` order from frenzy_srpt / frenzy_las).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from itertools import islice
from typing import Any, ClassVar

from frenzy_core.errors import SpecError
from frenzy_core.models import ZOO
from frenzy_core.packing import FreeGPUs, compile_plans
from frenzy_core.plans import OBJECTIVES, Plan
from frenzy_core.policies.base import Decision, Policy, Reject, SchedulerView, Start
from frenzy_core.policies.frenzy_apps import FrenzyAppsRounds
from frenzy_core.workload import scale_plan

_NONE = 1 << 60  # "no plan of this type": larger than any GPU count
COLOUR = "#1565c0"
NOTE = ("The paper's Frenzy. The user gives no GPU count: for each job it lists every way to split the model over "
        "each GPU type and count that fits in memory (with the safety margin), ranks them by GPU-hours, and starts "
        "the first one whose GPUs are free now, placed to leave the fewest gaps. Jobs are looked at in arrival "
        "order; a job keeps its first allocation to the end.")


@dataclass(frozen=True)
class Options:
    """frenzy's knobs."""

    # how MARP ranks a job's plans (`plans.rank_plans` objective: time, gpu-hours, cost, gpus); gpu-hours takes the
    # fewest GPUs that train efficiently, the paper's (docs/results.md: "time" queues badly on modern-mixed)
    objective: str = "gpu-hours"

    legacy_keys: ClassVar[dict[str, str]] = {"frenzy_objective": "objective"}

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise SpecError("objective", f"unknown objective {self.objective!r}; choose one of: "
                                         f"{', '.join(OBJECTIVES)}")


# --- candidate rules: (policy, job status, its ranked compiled plans, active jobs) -> the plans it may take now ----
def all_plans(policy: FrenzyPolicy, st, plans, n_active: int):
    """The paper's: every ranked plan, in ranked order."""
    return plans


def fair_share(policy: FrenzyPolicy, st, plans, n_active: int):
    """frenzy-share's cap: plans of at most `usable GPUs / active jobs` GPUs, never below the job's smallest plan
    (usable: the capacity of the GPU types the job has a plan on; active: running + waiting jobs, this one included).
    """
    usable, smallest = policy.usable(st)
    cap = max(usable / max(n_active, 1), smallest)
    return [p for p in plans if p[1] <= cap]


class Chooser(ABC):
    """How a Frenzy variant turns each job's candidates into decisions (its `decide`); built once per run."""

    preemptive: ClassVar[bool] = False  # the simulator also calls it after a release with nothing queued

    def __init__(self, policy: FrenzyPolicy):
        self.policy = policy

    @abstractmethod
    def decide(self, view: SchedulerView) -> list[Decision]:
        """The decisions of one scheduling event."""

    def next_wake_s(self, view: SchedulerView) -> float | None:
        return None


class FirstFit(Chooser):
    """The paper's walk: the first `backfill_window` queued jobs in order, each started on the first candidate HAS
    can place now (Algorithm 1)."""

    def __init__(self, policy: FrenzyPolicy):
        super().__init__(policy)
        self._failed_epoch: dict[int, int] = {}  # job -> release epoch at which HAS last found nothing

    def decide(self, view: SchedulerView) -> list[Decision]:
        policy = self.policy
        free: FreeGPUs | None = None
        fbt = view.free_by_type
        out: list[Decision] = []
        failed, epoch, jobs = self._failed_epoch, view.release_epoch, view.jobs
        window = policy.ctx.options.backfill_window
        for j in islice(view.queue, window):
            if failed.get(j) == epoch:
                continue  # nothing was released since it last failed to fit, and starts only take GPUs away
            st = jobs[j]
            plans, mins = policy.ranked(st)
            if not plans:
                out.append(Reject(j, "no plan fits this cluster's GPUs"))
                continue
            if free is not None:
                fbt = free.by_type
            for f, m in zip(fbt, mins, strict=True):
                if f >= m:
                    break
            else:  # no type has as many free GPUs as this job's smallest plan there
                failed[j] = epoch
                continue
            if free is None:
                free = FreeGPUs(view.index, view.free, view.free_by_type)
            cands = policy.learned(st, policy.candidates(view, st, plans))
            if not cands and st.oom_memory_bytes is not None:
                out.append(Reject(j, "every plan predicted to fit ran out of memory"))
                continue
            got = free.first_plan(cands)
            if got is None:
                failed[j] = epoch
                continue
            plan, placement = got
            free.take(placement)
            failed.pop(j, None)
            out.append(Start(j, scale_plan(plan, st.job.tokens), placement))
        return out


class FrenzyPolicy(Policy):
    """The paper's Frenzy: HAS over MARP's plans ranked by `Options.objective`; the base every variant composes."""

    name = "frenzy"
    Options = Options
    colour = COLOUR
    note = NOTE
    round_allocator = FrenzyAppsRounds  # the same policy on the sia-apps job model
    ranking: ClassVar[str | None] = None  # the objective MARP ranks by; None: Options.objective
    candidate_rule: ClassVar[Any] = staticmethod(all_plans)
    chooser: ClassVar[type[Chooser]] = FirstFit
    preemption: ClassVar[type | None] = None  # the order of a preemptive chooser (`frenzy_preempt.PreemptionOrder`)

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        # class row -> (compiled ranked plans, min GPUs of any plan per type position)
        self._plans: dict[int, tuple[tuple[tuple[int, int, int, Plan], ...], tuple[int, ...]]] = {}
        self._capacity = [int(c) for c in ctx.index.capacity_by_type()]
        self._usable: dict[int, tuple[int, int]] = {}  # class row -> (GPUs of the types it has plans on, min GPUs)
        self._chooser = self.chooser(self)

    @property
    def preemptive(self) -> bool:
        return self._chooser.preemptive

    def objective(self) -> str:
        return self.ranking or self.options.objective

    def rank(self, model_name: str, training) -> list[Plan]:
        """The job class's plans in HAS order, collapsed by (type, GPUs, tp) (what HAS can tell apart)."""
        raw = self.ctx.estimator.rank(ZOO[model_name], training, self.ctx.cluster, self.objective(),
                                      self.ctx.options.safety_margin)
        seen, plans = set(), []
        for p in raw:
            shape = (p.gpu_type, p.num_gpus, p.tp)
            if shape not in seen:
                seen.add(shape)
                plans.append(p)
        return plans

    def ranked(self, st) -> tuple[tuple[tuple[int, int, int, Plan], ...], tuple[int, ...]]:
        got = self._plans.get(st.cls)
        if got is None:
            compiled = compile_plans(self.ctx.index, self.rank(st.job.model, st.job.training))
            n_types = len(self.ctx.index.type_names)
            mins = [_NONE] * n_types
            for t, n, _tp, _p in compiled:
                mins[t] = min(mins[t], n)
            got = (compiled, tuple(mins))
            self._plans[st.cls] = got
        return got

    def usable(self, st) -> tuple[int, int]:
        """(GPUs of the types the job's class has a plan on, the fewest GPUs of any of its plans)."""
        got = self._usable.get(st.cls)
        if got is None:
            mins = self.ranked(st)[1]
            got = (sum(c for c, m in zip(self._capacity, mins, strict=True) if m < _NONE), min(mins))
            self._usable[st.cls] = got
        return got

    def candidates(self, view: SchedulerView, st, plans):
        """The plans the chooser may take for this job now (`candidate_rule` over the running + waiting jobs)."""
        return self.candidate_rule(self, st, plans, len(view.running) + len(view.queue))

    @staticmethod
    def learned(st, plans):
        """Plans predicted to need less memory per GPU than any plan of this job that crashed out of memory."""
        limit = st.oom_memory_bytes
        return plans if limit is None else [c for c in plans if c[3].memory_bytes < limit]

    def decide(self, view: SchedulerView) -> list[Decision]:
        return self._chooser.decide(view)

    def next_wake_s(self, view: SchedulerView) -> float | None:
        return self._chooser.next_wake_s(view)
