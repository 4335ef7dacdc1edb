"""`gavel`: Gavel's heterogeneity-aware max-sum-throughput policy with its round-robin mechanism (Narayanan et al.,
OSDI'20), as the Sia artifact runs it as its baseline (siasosp23/artifacts commit
aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70, `sia-simulator/gavel.py` GavelPolicy and
`policies/max_sum_throughput.py` ThroughputSumWithPerf; `run_experiment.sh`: --policy=gavel --interval=360).

Each job runs on exactly the GPUs it asked for (its scale factor s_j) at the user's batch size, on one type.
Every 360 s round Gavel solves the LP

    maximise   sum_jt  X[j, t] * T[j, t]
    subject to sum_t X[j, t] <= 1;   sum_j s_j X[j, t] <= C_t;   X >= 0

where T[j, t] is the job's iterations per second on type t at s_j GPUs (from the measured profiles, the artifact's
`predict_throughput`; 0.1 where the type has fewer than s_j GPUs), X the share of time the job should spend there.
The mechanism then turns shares into one round's assignment: priority[j, t] = X[j, t] / (time j got on t / time
handed out on t), every job starting with half a round on each type; (job, type) pairs are taken in decreasing
priority and a job is scheduled where its s_j GPUs are still free; a job keeps its previous GPUs when it can,
others take free GPUs server by server. The LP is solved with HiGHS; jobs with identical rows (same application,
GPUs and batch) get equal shares, the symmetric optimum the artifact's interior-point solver (ECOS) returns.

On the LLM job model (`decide`), T is the plan table's tokens/s at the user's GPU count, and the same mechanism
preempts and starts jobs every round.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.optimize import linprog

from frenzy_core.errors import SpecError
from frenzy_core.models import ZOO
from frenzy_core.packing import place
from frenzy_core.policies.base import Decision, Policy, Preempt, Reject, SchedulerView, Start
from frenzy_core.policies.sia_real import solve_stats
from frenzy_core.sia_apps import EPS, SiaApp
from frenzy_core.workload import scale_plan

ROUND_S = 360.0  # run_experiment.sh --interval=360
TOO_BIG_THROUGHPUT = 1e-1  # gavel.py predict_throughput: a type with fewer GPUs than the job needs
COLOUR = "#5d4037"
NOTE = ("Gavel (OSDI'20) as the Sia artifact runs it. Each job runs on exactly the GPUs its user asked for; every 6 "
        "minutes a linear program decides what share of time each job should spend on each GPU type to maximise the "
        "cluster's total throughput, and a round-robin hands out the next round's GPUs by who is furthest behind "
        "its share, preempting and restarting jobs as the shares say.")


@dataclass(frozen=True)
class Options:
    """gavel's knobs on the LLM job model."""

    round_s: float = ROUND_S  # the round, 360 s as in the artifact's run_experiment.sh

    legacy_keys: ClassVar[dict[str, str]] = {}

    def __post_init__(self):
        if not self.round_s > 0:
            raise SpecError("round_s", f"must be a positive number of seconds, got {self.round_s}")


def app_throughput(app: SiaApp, suffix: str, gpus_per_node: int, total_gpus: int, num_replicas: int,
                   batch_size: int) -> float:
    """Iterations per second of the job on this type at its own GPU count and batch (predict_throughput)."""
    if num_replicas > total_gpus:
        return TOO_BIG_THROUGHPUT
    placement: tuple[int, ...] = ()
    while sum(placement) < num_replicas:
        placement = (*placement, min(num_replicas - sum(placement), gpus_per_node))
    prof = app.profiles[suffix]
    local = math.ceil(batch_size / num_replicas - EPS)
    accum = math.ceil(local / prof.max_local_bsz_for(placement) - EPS) - 1
    if num_replicas == 1:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - EPS)
    atomic = min(atomic, int(app.max_batch_size / (num_replicas * (accum + 1))))
    st = prof.step_time(placement, atomic)
    if st is None:
        return TOO_BIG_THROUGHPUT
    step_s, sync_s = st
    return 1.0 / (step_s + (step_s - sync_s) * accum) / app.slowdown


def max_sum_throughput(thr: np.ndarray, scale: Sequence[int], capacity: Sequence[int]) -> np.ndarray:
    """The LP above; identical (row, scale) jobs share their group's optimum equally. Returns X (jobs x types).

    >>> max_sum_throughput(np.array([[2.0, 1.0], [2.0, 1.0]]), [1, 1], [1, 1]).tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    n, m = thr.shape
    if n == 0:
        return np.zeros((0, m))
    keys = [(tuple(np.round(thr[j], 12)), int(scale[j])) for j in range(n)]
    groups = list(dict.fromkeys(keys))
    gid = np.array([groups.index(k) for k in keys])
    count = np.bincount(gid, minlength=len(groups)).astype(float)
    g_thr = np.array([k[0] for k in groups])
    g_scale = np.array([k[1] for k in groups], dtype=float)
    ng = len(groups)
    a_job = np.kron(np.eye(ng), np.ones((1, m)))  # sum_t y[g, t] <= count_g
    a_cap = np.zeros((m, ng * m))
    for g in range(ng):
        a_cap[:, g * m:(g + 1) * m] = np.eye(m) * g_scale[g]
    res = linprog(-g_thr.ravel(), A_ub=np.vstack([a_job, a_cap]),
                  b_ub=np.concatenate([count, np.asarray(capacity, dtype=float)]), bounds=(0, None), method="highs")
    y = res.x.reshape(ng, m) if res.x is not None else np.zeros((ng, m))
    x = y[gid] / count[gid, None]
    return np.clip(np.round(x, 5), 0.0, 1.0)


class RoundRobin:
    """Gavel's mechanism state: time received per (job, type) and handed out per type; the last assignment."""

    def __init__(self, num_types: int, round_s: float):
        self.round_s = round_s
        self.job_time: dict[int, np.ndarray] = {}
        self.type_time = np.zeros(num_types)

    def admit(self, jobs: Sequence[int]) -> None:
        for j in jobs:
            if j not in self.job_time:
                self.job_time[j] = np.full(len(self.type_time), self.round_s / 2)
                self.type_time += self.round_s / 2

    def pick(self, jobs: Sequence[int], x: np.ndarray, scale: Sequence[int], capacity: Sequence[int]):
        """(job, type) in decreasing priority X / fraction received, greedily where the job's GPUs are free."""
        entries = []
        for t in range(x.shape[1]):
            for r, j in enumerate(jobs):
                frac = self.job_time[j][t] / self.type_time[t] if self.type_time[t] > 0 else 0.0
                prio = x[r, t] * 1e9 if frac == 0 else x[r, t] / frac
                entries.append((-prio, -x[r, t], r, t))
        entries.sort(key=lambda e: (e[0], e[1]))  # stable: ties keep type-major, job order
        left = list(capacity)
        chosen: dict[int, int] = {}
        for _, _, r, t in entries:
            if left[t] == 0 or r in chosen or scale[r] > left[t]:
                continue
            left[t] -= scale[r]
            chosen[r] = t
        return chosen

    def charge(self, scheduled: dict[int, int]) -> None:
        for j, t in scheduled.items():
            self.job_time[j][t] += self.round_s
            self.type_time[t] += self.round_s


def assign_workers(gpus_per_node: int, num_nodes: int, jobs: Sequence[tuple[int, int]],
                   previous: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """Worker (GPU) indices on one type for (job, GPUs), largest first; a job keeps its previous workers when none
    is taken yet, the others take free workers server by server (gavel.py schedule_jobs_on_workers).

    >>> assign_workers(4, 2, [(1, 2), (2, 4)], {})
    {2: (0, 1, 2, 3), 1: (4, 5)}
    """
    servers = [list(range(n * gpus_per_node, (n + 1) * gpus_per_node)) for n in range(num_nodes)]
    taken: set[int] = set()
    ptr = 0
    out: dict[int, tuple[int, ...]] = {}
    order = sorted(jobs, key=lambda js: -js[1])
    for size in sorted({s for _, s in order}, reverse=True):
        group = [j for j, s in order if s == size]
        for j in group:
            prev = previous.get(j)
            if prev is not None and not taken.intersection(prev):
                out[j] = prev
                taken.update(prev)
        for j in group:
            got = list(out.get(j, ()))
            while len(got) < size and ptr < len(servers):
                if not servers[ptr]:
                    ptr += 1
                    continue
                w = servers[ptr].pop(0)
                if w not in taken:
                    got.append(w)
                    taken.add(w)
            if len(got) != size:
                raise RuntimeError(f"gavel: could not assign {size} workers to job {j}")
            out[j] = tuple(got)
    return out


class GavelRounds:
    """Gavel on the sia-apps job model (`rounds.simulate_rounds`)."""

    round_s = ROUND_S
    tune_batch = False  # Gavel runs the user's batch size on the user's GPU count

    def __init__(self, layouts):
        self.layouts = tuple(layouts)
        self.rr = RoundRobin(len(self.layouts), ROUND_S)
        self.workers: dict[int, tuple[int, tuple[int, ...]]] = {}  # job -> (type, worker indices) last round
        self._thr: dict[tuple[str, int, int], np.ndarray] = {}
        self.solve_s: list[float] = []

    def _row(self, st) -> np.ndarray:
        key = (st.app.name, st.job.num_replicas, st.job.batch_size)
        if key not in self._thr:
            self._thr[key] = np.array([app_throughput(st.app, lay.suffix, lay.gpus_per_node, lay.total_gpus,
                                                      st.job.num_replicas, st.job.batch_size) for lay in self.layouts])
        return self._thr[key]

    def allocate(self, view) -> dict:
        jobs = list(view.active)
        self.rr.admit(jobs)
        scale = [view.jobs[j].job.num_replicas for j in jobs]
        cap = [lay.total_gpus for lay in self.layouts]
        t0 = time.perf_counter()
        x = max_sum_throughput(np.array([self._row(view.jobs[j]) for j in jobs]), scale, cap)
        self.solve_s.append(time.perf_counter() - t0)
        chosen = self.rr.pick(jobs, x, scale, cap)
        out, workers = {}, {}
        for t, lay in enumerate(self.layouts):
            mine = [(jobs[r], scale[r]) for r, tt in chosen.items() if tt == t]  # in priority order
            prev = {j: w for j, (tt, w) in self.workers.items() if tt == t}
            for j, w in assign_workers(lay.gpus_per_node, lay.num_nodes, mine, prev).items():
                workers[j] = (t, w)
                out[j] = (lay.suffix, tuple(i // lay.gpus_per_node for i in w))
        self.workers = workers
        self.rr.charge({jobs[r]: t for r, t in chosen.items()})
        return out

    def stats(self) -> dict[str, float]:
        return solve_stats("lp", self.solve_s)


class GavelPolicy(Policy):
    """Gavel on the LLM job model: the user's GPU count, the plan table's tokens/s, 360 s rounds."""

    name = "gavel"
    Options = Options
    colour = COLOUR
    note = NOTE
    round_allocator = GavelRounds

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.round_s = float(self.options.round_s)
        self.rr = RoundRobin(len(ctx.index.type_names), self.round_s)
        self.solve_s: list[float] = []

    def _plan(self, st, t: int):
        job = st.job
        return self.ctx.table.best(ZOO[job.model], job.training, self.ctx.index.type_names[t], st.requested_gpus,
                                   safety_margin=self.ctx.options.safety_margin, tune_micro_batch=True)

    def decide(self, view: SchedulerView) -> list[Decision]:
        jobs = list(view.running) + list(view.queue)
        if not jobs:
            return []
        types = range(len(view.index.type_names))
        plans = [[self._plan(view.jobs[j], t) for t in types] for j in jobs]
        out: list[Decision] = []
        keep = []
        for r, j in enumerate(jobs):
            if any(p is not None for p in plans[r]) or view.jobs[j].state == "running":
                keep.append(r)
            else:
                out.append(Reject(j, "no allocation of this cluster fits it in memory at its GPU count"))
        jobs = [jobs[r] for r in keep]
        plans = [plans[r] for r in keep]
        thr = np.array([[p.tokens_per_s if p is not None else 0.0 for p in row] for row in plans]).reshape(-1, len(types))
        scale = [view.jobs[j].requested_gpus for j in jobs]
        cap = [int(c) for c in view.index.capacity_by_type()]
        self.rr.admit(jobs)
        t0 = time.perf_counter()
        x = max_sum_throughput(thr, scale, cap)
        self.solve_s.append(time.perf_counter() - t0)
        x[thr <= 0] = 0.0
        chosen = {r: t for r, t in self.rr.pick(jobs, x, scale, cap).items() if x[r, t] > 0}
        work = np.array(view.free)
        for r, j in enumerate(jobs):  # running jobs not kept on their type give their GPUs back
            st = view.jobs[j]
            if st.state == "running" and chosen.get(r) != view.index.type_pos(st.plan.gpu_type):
                out.append(Preempt(j))
                for node, n in st.placement.nodes:
                    work[node] += n
        scheduled = {}
        for r in sorted(chosen, key=lambda r: -scale[r]):
            j, t = jobs[r], chosen[r]
            st = view.jobs[j]
            if st.state == "running" and view.index.type_pos(st.plan.gpu_type) == t:
                scheduled[j] = t
                continue
            plan = plans[r][t]
            pl = place(view.index, work, plan.num_gpus, tp=plan.tp, gpu_types=(view.index.type_names[t],))
            if pl is None:
                continue
            for node, n in pl.nodes:
                work[node] -= n
            out.append(Start(j, scale_plan(plan, st.job.tokens), pl))
            scheduled[j] = t
        self.rr.charge(scheduled)
        return out

    def stats(self) -> dict[str, float]:
        return solve_stats("lp", self.solve_s)
