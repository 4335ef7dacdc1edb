"""FCFS, the paper's opportunistic baseline: the user's GPU count, first come first served, first fit by GPU type.

A job asks for the trace's GPU count (capped at the largest GPU type's total, as a user would on this cluster). The
first GPU type (cluster order) with that many free GPUs gets it, nodes filled first fit in node order, whole
tensor-parallel groups per node. The job runs the fastest split of that count that fits the GPU's memory (no
safety margin: a real run OOMs only past the capacity). When no split fits, it runs pure data parallel and the
simulator fails it with out-of-memory after `SimOptions.oom_startup_s`; it is resubmitted with twice the GPUs.
Queue order with a bounded backfill: only the first `backfill_window` queued jobs are looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import ClassVar

import numpy as np

from frenzy_core.packing import ClusterIndex, Placement
from frenzy_core.policies.base import Decision, Policy, Reject, SchedulerView, Start
from frenzy_core.workload import scale_plan

COLOUR = "#ef6c00"
NOTE = ("First come, first served, the way users run jobs by hand: each job gets the GPU count its user asked for, on "
        "the first GPU type with that many free, in arrival order (a later job may start first when an earlier one "
        "does not fit yet). The model is split over those GPUs so that it fits in memory if any split does; when "
        "none does, the job crashes out of memory after start-up and is resubmitted with twice the GPUs.")


@dataclass(frozen=True)
class Options:
    """fcfs has no knobs of its own: it reads the simulator's backfill window (`SimOptions.backfill_window`)."""

    legacy_keys: ClassVar[dict[str, str]] = {}


def first_fit(index: ClusterIndex, free: np.ndarray, t: int, num_gpus: int, tp: int) -> Placement | None:
    """Fill nodes of type t in index order, tp-groups per node, until num_gpus are taken; None if they run out."""
    if num_gpus <= 0:
        return None
    ix = index.nodes_by_type[t]
    # one walk in Python over the type's nodes, stopping once the job is placed: cheaper than numpy's calls on a
    # type of a few hundred nodes, where the first nodes with room usually hold the job
    need, nodes = num_gpus, []
    for node, f in zip(ix.tolist(), free[ix].tolist(), strict=True):
        usable = f - f % tp  # whole tp-groups on this node
        if usable <= 0:
            continue
        take = min(usable, need)
        nodes.append((node, take))
        need -= take
        if need == 0:
            return Placement(gpu_type=index.type_names[t], nodes=tuple(nodes))
    return None


class FcfsPolicy(Policy):
    name = "fcfs"
    Options = Options
    colour = COLOUR
    note = NOTE
    no_round_engine = ("not written: on the sia-apps job model the user-count baseline is gavel (the Sia artifact's "
                       "baseline, which also runs each job on the GPUs it asked for)")

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self._cap = [int(c) for c in ctx.index.capacity_by_type()]
        self._max_cap = max(self._cap)
        self._plan_cache: dict = {}
        self._runnable: dict = {}  # (class, count) -> whether some GPU type has a split of that many GPUs
        self._failed_epoch: dict[int, int] = {}

    def user_count(self, st) -> int:
        return min(st.requested_gpus, self._max_cap)

    def plan_for(self, st, t: int, count: int):
        """The fastest split of `count` GPUs of type t that fits; else the pure-data-parallel one (it will OOM)."""
        key = (st.cls, t, count)
        got = self._plan_cache.get(key)
        if got is None:
            job, name = st.job, self.ctx.index.type_names[t]
            got = self.ctx.table.best(job.spec, job.training, name, count) or \
                self.ctx.table.pure_dp(job.spec, job.training, name, count)
            self._plan_cache[key] = got
        return got

    def decide(self, view: SchedulerView) -> list[Decision]:
        free = None
        fbt = list(view.free_by_type)
        out: list[Decision] = []
        for j in islice(view.queue, self.ctx.options.backfill_window):
            if self._failed_epoch.get(j) == view.release_epoch:
                continue
            st = view.jobs[j]
            n = self.user_count(st)
            runnable = self._runnable.get((st.cls, n))
            if runnable is None:
                runnable = self._runnable[(st.cls, n)] = any(
                    self.plan_for(st, t, n) is not None for t, c in enumerate(self._cap) if c >= n)
            if not runnable:
                out.append(Reject(j, f"no split of {n} GPUs exists for {st.job.model}"))
                continue
            started = False
            for t, f in enumerate(fbt):
                if f < n:
                    continue
                plan = self.plan_for(st, t, n)
                if plan is None:
                    continue
                if free is None:
                    free = np.array(view.free)
                placement = first_fit(view.index, free, t, n, plan.tp)
                if placement is None:
                    continue
                for node, k in placement.nodes:
                    free[node] -= k
                fbt[t] -= n
                out.append(Start(j, scale_plan(plan, st.job.tokens), placement))
                started = True
                break
            if not started:
                self._failed_epoch[j] = view.release_epoch
        return out
