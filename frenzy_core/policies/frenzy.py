"""Frenzy: MARP's ranked plans + HAS placement. The user gives no GPU count; memory decides what can run where.

Each job class (model, training) is ranked once per run with the estimator (`plans.rank_plans` by default) under
`SimOptions.frenzy_objective` (see docs/results.md for why the default is what it is). Plans that differ only in
what HAS cannot see (micro-batch, d/p for the same t) are collapsed to the best of them. Each decision point walks
the first `backfill_window` queued jobs in order and starts each that HAS can place now (FCFS with bounded
backfill): the first ranked plan the cluster can satisfy now, as in the paper (arXiv 2412.14479, Algorithm 1).

The per-class ranking is the only thing cached across decisions (it depends on the class alone). Each decision
builds a fresh `packing.FreeGPUs` from the view, so a placement costs O(GPUs per node) rather than O(nodes).
"""

from __future__ import annotations

from itertools import islice

from frenzy_core.models import ZOO
from frenzy_core.packing import FreeGPUs, compile_plans
from frenzy_core.plans import Plan
from frenzy_core.policies.base import Decision, Policy, Reject, SchedulerView, Start
from frenzy_core.policies.frenzy_apps import FrenzyAppsRounds
from frenzy_core.workload import scale_plan

_NONE = 1 << 60  # "no plan of this type": larger than any GPU count


class FrenzyPolicy(Policy):
    """The paper's Frenzy: HAS over MARP's plans ranked by `SimOptions.frenzy_objective`."""

    name = "frenzy"
    round_allocator = FrenzyAppsRounds  # the same policy on the sia-apps job model

    def __init__(self, ctx):
        super().__init__(ctx)
        # class row -> (compiled ranked plans, min GPUs of any plan per type position)
        self._plans: dict[int, tuple[tuple[tuple[int, int, int, Plan], ...], tuple[int, ...]]] = {}
        self._failed_epoch: dict[int, int] = {}  # job -> release epoch at which HAS last found nothing

    def objective(self) -> str:
        return self.ctx.options.frenzy_objective

    def rank(self, model_name: str, training) -> list[Plan]:
        """The job class's plans in HAS order, collapsed by (type, GPUs, tp) (what HAS can tell apart)."""
        opts = self.ctx.options
        raw = self.ctx.estimator.rank(ZOO[model_name], training, self.ctx.cluster, self.objective(),
                                      opts.safety_margin)
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

    def candidates(self, view: SchedulerView, st, plans):
        """The plans HAS walks for this job now: in the paper, all of them in ranked order (variants filter)."""
        return plans

    @staticmethod
    def learned(st, plans):
        """Plans predicted to need less memory per GPU than any plan of this job that crashed out of memory."""
        limit = st.oom_memory_bytes
        return plans if limit is None else [c for c in plans if c[3].memory_bytes < limit]

    def decide(self, view: SchedulerView) -> list[Decision]:
        free: FreeGPUs | None = None
        fbt = view.free_by_type
        out: list[Decision] = []
        failed, epoch, jobs = self._failed_epoch, view.release_epoch, view.jobs
        window = self.ctx.options.backfill_window
        for j in islice(view.queue, window):
            if failed.get(j) == epoch:
                continue  # nothing was released since it last failed to fit, and starts only take GPUs away
            st = jobs[j]
            plans, mins = self.ranked(st)
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
            cands = self.learned(st, self.candidates(view, st, plans))
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
