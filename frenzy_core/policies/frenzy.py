"""Frenzy: MARP's ranked plans + HAS placement. The user gives no GPU count; memory decides what can run where.

Each job class (model, training) is ranked once per run with the estimator (`plans.rank_plans` by default) under
`SimOptions.frenzy_objective` (default "gpu-hours": the plan that trains the job in the fewest GPU-hours first, so
fast types are tried first and a job takes no more GPUs than scale efficiently; "time" takes the fastest plan free
now, i.e. the largest fast allocation, which helps on an idle cluster and queues badly on a busy one -- see
docs/results.md). Plans that differ only in what
HAS cannot see (micro-batch, d/p for the same t) are collapsed to the best of them. Each decision point walks the
first `backfill_window` queued jobs in order and starts each that HAS can place now (FCFS with bounded backfill).
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from frenzy_core.models import ZOO
from frenzy_core.packing import has_place
from frenzy_core.plans import Plan
from frenzy_core.policies.base import Decision, Policy, Reject, SchedulerView, Start, class_key
from frenzy_core.workload import scale_plan


class FrenzyPolicy(Policy):
    name = "frenzy"

    def __init__(self, ctx):
        super().__init__(ctx)
        self._plans: dict = {}  # class key -> (ranked plans, min GPUs per type position)
        self._failed_epoch: dict[int, int] = {}  # job -> release epoch at which HAS last found nothing

    def ranked(self, key) -> tuple[tuple[Plan, ...], tuple[int, ...]]:
        got = self._plans.get(key)
        if got is None:
            opts = self.ctx.options
            model_name, training = key
            raw = self.ctx.estimator.rank(ZOO[model_name], training, self.ctx.cluster, opts.frenzy_objective,
                                          opts.safety_margin)
            seen, plans = set(), []
            for p in raw:
                shape = (p.gpu_type, p.num_gpus, p.tp)
                if shape not in seen:
                    seen.add(shape)
                    plans.append(p)
            names = self.ctx.index.type_names
            big = 1 << 60
            mins = [min((p.num_gpus for p in plans if p.gpu_type == t), default=big) for t in names]
            got = (tuple(plans), tuple(mins))
            self._plans[key] = got
        return got

    def decide(self, view: SchedulerView) -> list[Decision]:
        free = None
        fbt = list(view.free_by_type)
        out: list[Decision] = []
        window = self.ctx.options.backfill_window
        for j in islice(view.queue, window):
            if self._failed_epoch.get(j) == view.release_epoch:
                continue  # nothing was released since it last failed to fit, and starts only take GPUs away
            st = view.jobs[j]
            plans, mins = self.ranked(class_key(st.job))
            if not plans:
                out.append(Reject(j, "no plan fits this cluster's GPUs"))
                continue
            if not any(f >= m for f, m in zip(fbt, mins, strict=True)):
                self._failed_epoch[j] = view.release_epoch
                continue
            if free is None:
                free = np.array(view.free)
            got = has_place(plans, view.index, free, free_by_type=fbt)
            if got is None:
                self._failed_epoch[j] = view.release_epoch
                continue
            plan, placement = got
            for node, n in placement.nodes:
                free[node] -= n
            fbt[view.index.type_pos(plan.gpu_type)] -= plan.num_gpus
            self._failed_epoch.pop(j, None)
            out.append(Start(j, scale_plan(plan, st.job.tokens), placement))
        return out
