"""A Sia-like heterogeneity-aware round-based policy (after Jayaram Subramanya et al., SOSP'23), solved as an ILP.

Every `SimOptions.sia_round_s` (60 s) it considers the running jobs and the first `sia_max_jobs` queued ones and
solves, with `scipy.optimize.milp` (HiGHS):

    maximise   sum_j sum_o  u[j, o] x[j, o]
    subject to sum_o x[j, o] <= 1                              for every job j   (at most one allocation)
               sum_j sum_{o of type g} size(o) x[j, o] <= C_g   for every GPU type g (capacity, shared helper)
               x binary

An option o is (GPU type, size) with size a power of two up to the type's capacity and `sia_max_gpus`. u is the
job's normalised throughput, tokens/s of its best fitting split on o (the shared jobs x GPU-types matrix) divided by
its best over all options, so every job weighs the same whatever its model; an option other than a running job's
current one is multiplied by (1 - `sia_restart_penalty`) (Sia's restart factor), so jobs move only for a clear gain.
Options where the job does not fit in memory have u = 0 and are left out. Then running jobs whose option changed
are preempted and new allocations are placed largest first with HAS's node choice on that type; a moved job whose
new allocation cannot be placed (fragmentation) keeps its old GPUs when they are still free.
Every solve is timed (`stats()`).
"""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import LinearConstraint, milp

from frenzy_core.packing import place
from frenzy_core.policies.base import (
    Decision,
    Policy,
    Preempt,
    Reject,
    SchedulerView,
    Start,
    ThroughputMatrix,
    capacity_constraints,
    class_key,
    one_option_per_job,
    throughput_matrix,
)
from frenzy_core.workload import scale_plan


def solve_allocation(util: np.ndarray, options, capacity, *, time_limit_s: float | None = None):
    """The ILP above: util is jobs x options (0 = not allowed). Returns the chosen option per job (-1 = none).

    >>> sorted(solve_allocation(np.array([[0.5, 1.0], [0.5, 1.0]]), [(0, 1), (0, 2)], [3]).tolist())
    [0, 1]
    """
    n_jobs, n_opt = util.shape
    if n_jobs == 0:
        return np.zeros(0, dtype=int)
    a_cap, ub_cap = capacity_constraints(options, n_jobs, capacity)
    a_one, ub_one = one_option_per_job(n_jobs, n_opt)
    c = -util.ravel()
    upper = (util.ravel() > 0).astype(float)  # options with no value are fixed to 0
    opts = {"disp": False}
    if time_limit_s:
        opts["time_limit"] = float(time_limit_s)
    res = milp(c, integrality=np.ones_like(c), bounds=(np.zeros_like(c), upper),
               constraints=[LinearConstraint(a_cap, -np.inf, ub_cap), LinearConstraint(a_one, -np.inf, ub_one)],
               options=opts)
    if res.x is None:
        return np.full(n_jobs, -1)
    x = res.x.reshape(n_jobs, n_opt) > 0.5
    return np.where(x.any(axis=1), x.argmax(axis=1), -1)


class SiaPolicy(Policy):
    name = "sia"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.round_s = float(ctx.options.sia_round_s)
        self._rows: dict = {}  # class key -> row in self._matrix
        self._matrix: ThroughputMatrix | None = None
        self.solve_times_s: list[float] = []

    def _ensure_rows(self, keys) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in self._rows]
        if not missing:
            return
        opts = self.ctx.options
        allkeys = list(self._rows) + missing
        self._matrix = throughput_matrix(self.ctx, allkeys, opts.sia_max_gpus, opts.safety_margin)
        self._rows = {k: i for i, k in enumerate(allkeys)}

    def utilities(self, view: SchedulerView, jobs: list[int]) -> np.ndarray:
        keys = [class_key(view.jobs[j].job) for j in jobs]
        self._ensure_rows(keys)
        m = self._matrix
        x = m.tokens_per_s[[self._rows[k] for k in keys]]
        best = x.max(axis=1, keepdims=True)
        util = np.divide(x, best, out=np.zeros_like(x), where=best > 0)
        pen = 1.0 - self.ctx.options.sia_restart_penalty
        for r, j in enumerate(jobs):
            st = view.jobs[j]
            if st.state == "running":
                cur = self._current_option(st)
                keep = util[r, cur] if cur is not None else 0.0
                util[r] *= pen
                if cur is not None:
                    util[r, cur] = keep
        return util

    def _current_option(self, st):
        t = self.ctx.index.type_pos(st.plan.gpu_type)
        try:
            return self._matrix.options.index((t, st.plan.num_gpus))
        except ValueError:
            return None

    def decide(self, view: SchedulerView) -> list[Decision]:
        opts = self.ctx.options
        running = list(view.running)
        queued = list(view.queue)[: opts.sia_max_jobs]
        jobs = running + queued
        if not jobs:
            return []
        util = self.utilities(view, jobs)
        out: list[Decision] = []
        for r in range(len(running), len(jobs)):
            if not util[r].any():  # fits on no option of this cluster: it would wait forever
                out.append(Reject(jobs[r], "no allocation of this cluster fits it in memory"))
        cap = [int(c) for c in self.ctx.index.capacity_by_type()]
        t0 = time.perf_counter()
        choice = solve_allocation(util, self._matrix.options, cap, time_limit_s=opts.sia_time_limit_s)
        self.solve_times_s.append(time.perf_counter() - t0)

        work = np.array(view.free)
        moved: dict[int, object] = {}
        for r, j in enumerate(running):
            st = view.jobs[j]
            if choice[r] != self._current_option(st):
                moved[j] = st.placement
                for node, n in st.placement.nodes:
                    work[node] += n
        # new allocations, largest first (ties: queue order), placed with HAS's node choice on the chosen type
        new = [(r, j) for r, j in enumerate(jobs) if choice[r] >= 0 and (j in moved or r >= len(running))]
        new.sort(key=lambda rj: -self._matrix.options[choice[rj[0]]][1])
        starts: dict[int, Start] = {}
        for r, j in new:
            t, size = self._matrix.options[choice[r]]
            plan = self._matrix.plans[self._rows[class_key(view.jobs[j].job)]][choice[r]]
            pl = place(view.index, work, size, tp=plan.tp, gpu_types=(view.index.type_names[t],))
            if pl is None:
                continue
            for node, n in pl.nodes:
                work[node] -= n
            starts[j] = Start(j, scale_plan(plan, view.jobs[j].job.tokens), pl)
        for j, old in moved.items():
            if j not in starts and all(work[node] >= n for node, n in old.nodes):
                for node, n in old.nodes:  # could not move it: it keeps its GPUs and runs on
                    work[node] -= n
                continue
            out.append(Preempt(j))
        out.extend(starts.values())
        return out

    def stats(self) -> dict[str, float]:
        s = np.array(self.solve_times_s) if self.solve_times_s else np.zeros(1)
        return {"ilp_solves": float(len(self.solve_times_s)), "ilp_solve_ms_mean": float(s.mean() * 1e3),
                "ilp_solve_ms_max": float(s.max() * 1e3)}
