"""A Sia-like heterogeneity-aware round-based policy (after Jayaram Subramanya et al., SOSP'23), solved as an ILP.

Every `Options.round_s` (60 s) it considers the running jobs and the first `Options.max_jobs` queued ones and
solves, with `scipy.optimize.milp` (HiGHS):

    maximise   sum_j sum_o  u[j, o] x[j, o]
    subject to sum_o x[j, o] <= 1                              for every job j   (at most one allocation)
               sum_j sum_{o of type g} size(o) x[j, o] <= C_g   for every GPU type g (capacity, shared helper)
               x binary

An option o is (GPU type, size) with size a power of two up to the type's capacity and `max_gpus`. u is the
job's normalised throughput, tokens/s of its best fitting split on o (the shared jobs x GPU-types matrix) divided by
its best over all options, so every job weighs the same whatever its model; an option other than a running job's
current one is multiplied by (1 - `restart_penalty`) (Sia's restart factor), so jobs move only for a clear gain.
Options where the job does not fit in memory have u = 0 and are left out. Then running jobs whose option changed
are preempted and new allocations are placed largest first with HAS's node choice on that type. The ILP ignores fragmentation, so a
moved job whose new allocation cannot be placed now is never preempted: it keeps its GPUs and the placement is redone
(`_place`). Rounds are event-driven (the simulator calls it only when the job set or the free GPUs changed, at most
once per `round_s`), and HiGHS runs under a node and gap limit, never a time limit, so a seed gives one result.
Every solve is timed (`stats()`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.optimize import LinearConstraint, milp

from frenzy_core.errors import SpecError
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

COLOUR = "#2e7d32"
NOTE = ("A Sia-like scheduler (SOSP'23) on this planner's performance model. At most once a minute, when jobs have "
        "arrived or finished, it re-solves the whole allocation as an integer program: each running or waiting job "
        "gets at most one (GPU type, GPU count) that fits its memory, chosen to maximise the total of each job's "
        "speed relative to its best, within each type's GPUs. Jobs may grow, shrink or move to another type (a move "
        "costs a little, so jobs move only for a clear gain); it does not know job sizes.")


@dataclass(frozen=True)
class SolverOptions:
    """The knobs of Sia's ILP and rounds that sia, sia-real and frenzy-elastic's event version share."""

    round_s: float = 60.0  # the scheduling round (Sia's 60 s)
    max_jobs: int = 256  # queued jobs the ILP considers per round (queue order), besides the running ones
    max_gpus: int = 64  # largest allocation the ILP offers a job
    # HiGHS limits per solve: a branch-and-bound node limit and a relative gap, never a wall-clock limit, so that
    # the same inputs give the same allocation whatever the machine's load (HiGHS is deterministic otherwise).
    node_limit: int = 1000
    mip_gap: float = 1e-4  # HiGHS's own default relative gap

    legacy_keys: ClassVar[dict[str, str]] = {"sia_round_s": "round_s", "sia_max_jobs": "max_jobs",
                                             "sia_max_gpus": "max_gpus", "sia_node_limit": "node_limit",
                                             "sia_mip_gap": "mip_gap"}

    def __post_init__(self):
        if not self.round_s > 0:
            raise SpecError("round_s", f"must be a positive number of seconds, got {self.round_s}")
        if self.node_limit < 1:
            raise SpecError("node_limit", f"must be >= 1 branch-and-bound node, got {self.node_limit}")


@dataclass(frozen=True)
class Options(SolverOptions):
    """sia's knobs: the shared solver's, and the restart factor of its utilities."""

    restart_penalty: float = 0.1  # utility factor lost by an option that moves a running job

    legacy_keys: ClassVar[dict[str, str]] = {**SolverOptions.legacy_keys, "sia_restart_penalty": "restart_penalty"}


def solve_counts(util: np.ndarray, counts: np.ndarray, options, capacity, *, node_limit: int | None = None,
                 mip_gap: float | None = None) -> np.ndarray:
    """The ILP above over groups of interchangeable jobs: row g stands for counts[g] jobs with the same utilities;
    y[g, o] (integer, 0..counts[g]) of them take option o. Returns y (groups x options, ints).

    Jobs whose utility rows are equal are interchangeable in the objective and the constraints, so this has the
    per-job ILP's optimum with far fewer variables (and none of its symmetry, which is what makes branch and bound
    slow). Options with no value are left out of the model. `node_limit` / `mip_gap` bound HiGHS's branch and bound;
    there is no wall-clock limit, so the answer depends on the inputs alone (HiGHS is deterministic).

    >>> solve_counts(np.array([[0.6, 1.0]]), np.array([2]), [(0, 1), (0, 2)], [3]).tolist()
    [[1, 1]]
    """
    n_groups, n_opt = util.shape
    y = np.zeros((n_groups, n_opt), dtype=np.int64)
    keep = np.flatnonzero(util.ravel() > 0)
    if n_groups == 0 or not keep.size:
        return y
    a_cap, ub_cap = capacity_constraints(options, n_groups, capacity)
    a_one, _ones = one_option_per_job(n_groups, n_opt)
    counts = np.asarray(counts, dtype=float)
    c = -util.ravel()[keep]
    upper = np.repeat(counts, n_opt)[keep]
    opts: dict = {"disp": False}
    if node_limit is not None:
        opts["node_limit"] = int(node_limit)
    if mip_gap is not None:
        opts["mip_rel_gap"] = float(mip_gap)
    res = milp(c, integrality=np.ones_like(c), bounds=(np.zeros_like(c), upper),
               constraints=[LinearConstraint(a_cap[:, keep], -np.inf, ub_cap),
                            LinearConstraint(a_one[:, keep], -np.inf, counts)],
               options=opts)
    if res.x is not None:
        y.ravel()[keep] = np.rint(res.x).astype(np.int64)
    return y


def solve_allocation(util: np.ndarray, options, capacity, **limits) -> np.ndarray:
    """The ILP above, one row per job: the chosen option per job (-1 = none).

    >>> sorted(solve_allocation(np.array([[0.5, 1.0], [0.5, 1.0]]), [(0, 1), (0, 2)], [3]).tolist())
    [0, 1]
    """
    y = solve_counts(util, np.ones(len(util)), options, capacity, **limits)
    return np.where(y.any(axis=1), y.argmax(axis=1), -1)


class SiaPolicy(Policy):
    name = "sia"
    Options = Options
    colour = COLOUR
    note = NOTE
    no_round_engine = ("on the sia-apps job model Sia runs as published (sia-real, goodput from each job's own "
                       "fitted model); this ILP reads the LLM job model's plan table, which that model has not")

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.round_s = float(self.options.round_s)
        self._rows: dict = {}  # class key -> row in self._matrix
        self._matrix: ThroughputMatrix | None = None
        self.solve_times_s: list[float] = []
        self.kept_unplaceable = 0  # moves the ILP chose that could not be placed: those jobs kept their GPUs

    def _ensure_rows(self, keys) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in self._rows]
        if not missing:
            return
        allkeys = list(self._rows) + missing
        self._matrix = throughput_matrix(self.ctx, allkeys, self.options.max_gpus, self.ctx.options.safety_margin)
        self._rows = {k: i for i, k in enumerate(allkeys)}

    def tokens_per_s(self, view: SchedulerView, jobs: list[int]) -> np.ndarray:
        """tokens/s of each job on every option (the shared ThroughputMatrix of MARP's memory-feasible plans); 0
        where nothing fits, or after an out-of-memory crash where the plan is not predicted to need less."""
        keys = [class_key(view.jobs[j].job) for j in jobs]
        self._ensure_rows(keys)
        m = self._matrix
        rows = [self._rows[k] for k in keys]
        x = m.tokens_per_s[rows]
        for r, j in enumerate(jobs):
            limit = view.jobs[j].oom_memory_bytes
            if limit is not None:  # it crashed out of memory: only options predicted to need less remain
                x[r] = [v if p is not None and p.memory_bytes < limit else 0.0
                        for v, p in zip(x[r], m.plans[rows[r]], strict=True)]
        return x

    def utilities(self, view: SchedulerView, jobs: list[int]) -> np.ndarray:
        x = self.tokens_per_s(view, jobs)
        best = x.max(axis=1, keepdims=True)
        util = np.divide(x, best, out=np.zeros_like(x), where=best > 0)
        pen = 1.0 - self.options.restart_penalty
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
        running = list(view.running)
        queued = list(view.queue)[: self.options.max_jobs]
        jobs = running + queued
        if not jobs:
            return []
        util = self.utilities(view, jobs)
        out: list[Decision] = []
        for r in range(len(running), len(jobs)):
            if not util[r].any():  # fits on no option of this cluster: it would wait forever
                out.append(Reject(jobs[r], "no allocation of this cluster fits it in memory"))
        cap = [int(c) for c in self.ctx.index.capacity_by_type()]
        current = [self._current_option(view.jobs[j]) for j in running] + [None] * len(queued)
        t0 = time.perf_counter()
        choice = self._solve(util, current, cap)
        self.solve_times_s.append(time.perf_counter() - t0)
        moved = {j: r for r, j in enumerate(running) if choice[r] != self._current_option(view.jobs[j])}
        starts = self._place(view, jobs, len(running), choice, moved)
        # only a job whose new allocation is placed in this decision is preempted (the ILP ignores fragmentation)
        out.extend(Preempt(j) for j in moved)
        out.extend(starts.values())
        return out

    def _solve(self, util: np.ndarray, current: list, cap: list[int]) -> np.ndarray:
        """Group jobs with equal utility rows and the same current option, solve once per group (`solve_counts`),
        then hand each group's options to its jobs in order (running jobs keep their current option first; then
        the largest allocation goes to the job first in the queue). Returns the option per job (-1 = none)."""
        opts = self.options
        groups: dict = {}
        for r in range(len(util)):
            groups.setdefault((current[r], util[r].tobytes()), []).append(r)
        members = list(groups.values())
        y = solve_counts(util[[m[0] for m in members]], np.array([len(m) for m in members]), self._matrix.options,
                         cap, node_limit=opts.node_limit, mip_gap=opts.mip_gap)
        sizes = [s for _t, s in self._matrix.options]
        choice = np.full(len(util), -1)
        for g, rows in enumerate(members):
            cur = current[rows[0]]
            given = sorted(np.flatnonzero(y[g]).tolist(), key=lambda o: (o != cur, -sizes[o], o))
            slots = [o for o in given for _ in range(int(y[g, o]))]
            for r, o in zip(rows, slots, strict=False):
                choice[r] = o
        return choice

    def _place(self, view: SchedulerView, jobs: list[int], n_running: int, choice, moved: dict) -> dict[int, Start]:
        return self._place_in(view, jobs, n_running, choice, moved)[0]

    def _place_in(self, view: SchedulerView, jobs: list[int], n_running: int, choice, moved: dict,
                  also_free: Sequence[int] = ()) -> tuple[dict[int, Start], np.ndarray]:
        """New allocations, largest first (ties: running, then queue order), placed with HAS's node choice on the
        chosen type, in the free GPUs plus those of the moved jobs. A moved job whose new allocation does not fit
        keeps its GPUs, and the placement is redone without freeing them, until every moved job is placed: at most
        one pass per moved job. A running job the ILP gives nothing is not suspended either (it has no new
        allocation to place; suspending it let two jobs swap places every round, each paying a restart, and never
        train). Shrinks `moved` in place; returns the starts (and, from `_place_in`, the GPUs left free, `also_free`
        jobs' GPUs counted free)."""
        while True:
            work = np.array(view.free)
            for j in (*moved, *also_free):  # also_free: running jobs whose GPUs the new allocations may take
                for node, n in view.jobs[j].placement.nodes:
                    work[node] += n
            new = [(r, j) for r, j in enumerate(jobs) if choice[r] >= 0 and (j in moved or r >= n_running)]
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
            stuck = [j for j in moved if j not in starts]
            if not stuck:
                return starts, work
            self.kept_unplaceable += len(stuck)
            for j in stuck:
                del moved[j]

    def stats(self) -> dict[str, float]:
        s = np.array(self.solve_times_s) if self.solve_times_s else np.zeros(1)
        return {"ilp_solves": float(len(self.solve_times_s)), "ilp_solve_ms_mean": float(s.mean() * 1e3),
                "ilp_solve_ms_max": float(s.max() * 1e3), "moves_kept_unplaceable": float(self.kept_unplaceable)}
