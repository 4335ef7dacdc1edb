"""Round-based simulation of Sia's applications (`--job-model sia-apps`), as Sia's own simulator runs them.

Why rounds and not the event loop of `simulate.py`: a Sia application's goodput changes every epoch (its gradient
statistics and, under Sia, its batch size), so its completion time is not known when it starts, and the reference we
match (siasosp23/artifacts `sia-simulator/cluster.py` Cluster.step) is itself round-based. One round of
`policy.round_s` seconds: every job trains for the round (`AppJobState.advance`: restart delay first, then epoch by
epoch at its goodput), then the policy sees the jobs that have arrived and are not done and returns an allocation per
job, (GPU type, node index of every GPU). A first start, a resume after a suspension, and a move to another GPU type
or placement shape each cost the application's restart time (`sia_apps.RESTART_S`) before training goes on
(Job.reallocate / Job.migrate); the same GPUs on other nodes of the same shape cost nothing, as in the artifact.

The run returns a `simulate.SimResult`, so every metric, table and page that reads one reads this too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.limits import MAX_ROUNDS
from frenzy_core.sia_apps import (
    CATALOG_TO_SIA,
    GoodputModel,
    PerfParams,
    SiaApp,
    fit_perf_params,
    load_app,
    split_batch,
)
from frenzy_core.simulate import SimResult, job_columns

Alloc = tuple[str | None, tuple[int, ...]]  # (Sia GPU-type suffix or None, node index of each GPU)
NO_ALLOC: Alloc = (None, ())


@dataclass(frozen=True)
class AppJob:
    """One job of a Sia workload row: name,time,application,num_replicas,batch_size."""

    job_id: str
    arrival_s: float
    application: str
    num_replicas: int  # the user's GPU count (Gavel runs the job on exactly this many)
    batch_size: int  # the user's total batch (Gavel keeps it; Sia tunes the batch up to it in its policy)


@dataclass(frozen=True)
class TypeLayout:
    """One GPU type of the cluster as Sia sees it: identical nodes."""

    suffix: str  # Sia's name for the type's profiles (aws, dgx-ext, rtx)
    gpu_type: str  # our catalog name
    num_nodes: int
    gpus_per_node: int

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


def layouts_of(cluster: Cluster) -> tuple[TypeLayout, ...]:
    """The cluster's GPU types in first-seen order; each must have Sia profiles and one node size."""
    out = []
    for g in cluster.gpu_types_present():
        nodes = [n for n in cluster.nodes if n.gpu_type == g.name]
        if g.name not in CATALOG_TO_SIA:
            raise SpecError("cluster", f"GPU type {g.name!r} has no Sia profile; the sia-apps job model knows "
                                       f"{', '.join(sorted(CATALOG_TO_SIA))}")
        sizes = {n.num_gpus for n in nodes}
        if len(sizes) != 1:
            raise SpecError("cluster", f"the sia-apps job model needs one node size per GPU type; {g.name} has "
                                       f"{sorted(sizes)}")
        out.append(TypeLayout(CATALOG_TO_SIA[g.name], g.name, len(nodes), sizes.pop()))
    return tuple(out)


def placement_of(node_ids: Sequence[int]) -> tuple[int, ...]:
    """GPUs per node from a node index per GPU, runs of equal indices counted (cluster.py optimize_policy).

    >>> placement_of([3, 3, 0, 0, 0])
    (2, 3)
    """
    out: list[int] = []
    for i, n in enumerate(node_ids):
        if i == 0 or n != node_ids[i - 1]:
            out.append(1)
        else:
            out[-1] += 1
    return tuple(out)


class AppJobState:
    """The simulator's record of one application job (Sia's job.py Job). Policies read it; only the run writes it."""

    def __init__(self, idx: int, job: AppJob, app: SiaApp, tune_batch: bool):
        self.idx = idx
        self.job = job
        self.app = app
        self.tune_batch = tune_batch  # Sia re-picks the batch for goodput; Gavel keeps the user's
        self.epoch = 0
        self.progress = 0.0
        self.suffix: str | None = None  # GPU type it runs on (kept while suspended, like Sia's current_cluster)
        self.placement: tuple[int, ...] = ()
        self.atomic_bsz = 0
        self.accum_steps = 0
        self.restart_left_s = 0.0  # restart delay still to pay before training resumes
        self.restarts: int | None = None  # None until the first start
        self.attained_gpu_s = 0.0
        self.gpu_s_by_type: dict[str, float] = {}
        self.first_start_s: float | None = None
        self.finish_s: float | None = None
        self.grad: tuple[float, float] | None = None  # last measured (grad_sqr, grad_var)
        self.observed: dict[str, dict[tuple[int, int, int], tuple[float, float]]] = {}  # per type: step profile
        self._perf: dict[str, tuple[int, PerfParams]] = {}

    # --- what a policy may ask ------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.finish_s is not None

    def max_observed_replicas(self, suffix: str) -> int:
        return max((k[1] for k in self.observed.get(suffix, {})), default=0)

    def perf_params(self, suffix: str) -> PerfParams | None:
        """Pollux's throughput model fitted to the steps observed on this type (None before any)."""
        obs = self.observed.get(suffix)
        if not obs:
            return None
        cached = self._perf.get(suffix)
        if cached is None or cached[0] != len(obs):  # refit when a new configuration was observed (update_params)
            keys = list(obs)
            vals = np.array([obs[k] for k in keys])
            k = np.array(keys, dtype=float)
            cached = (len(obs), fit_perf_params(k[:, 0], k[:, 1], k[:, 2], vals[:, 0] - vals[:, 1], vals[:, 0]))
            self._perf[suffix] = cached
        return cached[1]

    def goodput_model(self, suffix: str) -> GoodputModel | None:
        perf = self.perf_params(suffix) if self.grad is not None else None
        if perf is None:
            return None
        return GoodputModel(perf, self.grad[0], self.grad[1], self.app.init_batch_size)

    # --- what the run does ----------------------------------------------------------------------------------------
    def _pick_batch(self) -> None:
        """Atomic batch and accumulation steps for the current placement (job.py update_local_bsz)."""
        app, prof = self.app, self.app.profiles[self.suffix]
        nodes, reps = len(self.placement), sum(self.placement)
        max_local = prof.max_local_bsz_for(self.placement)
        model = self.goodput_model(self.suffix) if self.tune_batch else None
        if model is not None:
            _, a, c = model.optimize(nodes, reps, app.max_batch_size, (prof.min_local_bsz, max_local))
            atomic, accum = int(a[0]), int(c[0])
        else:
            batch = max(app.init_batch_size, prof.min_local_bsz * reps) if self.tune_batch else self.job.batch_size
            atomic, accum = split_batch(math.ceil(batch / reps - 1e-8), max_local, reps, app.init_batch_size)
        if reps in prof.max_local_bsz_by_replicas:  # memory: never above the largest profiled at this replica count
            atomic = min(atomic, prof.max_local_bsz_by_replicas[reps])
        atomic = min(atomic, int(app.max_batch_size / (reps * (accum + 1))))
        self.atomic_bsz, self.accum_steps = atomic, accum

    def move(self, suffix: str | None, placement: tuple[int, ...], now_s: float) -> None:
        """Apply a new allocation: a new type or a new placement shape is a (re)start (Job.migrate/reallocate)."""
        if not placement:
            self.placement, self.atomic_bsz = (), 0
            if suffix is not None:
                self.suffix = suffix
            return
        if suffix == self.suffix and placement == self.placement:
            return
        self.suffix, self.placement = suffix, placement
        self._pick_batch()
        self.restart_left_s = self.app.restart_s
        self.restarts = 0 if self.restarts is None else self.restarts + 1
        if self.first_start_s is None:
            self.first_start_s = now_s

    def advance(self, start_s: float, seconds: float) -> None:
        """Train for one round from start_s (Job.step): the restart delay, then epochs at their goodput."""
        if self.done or not self.placement:
            return
        app, gpus = self.app, sum(self.placement)
        t = start_s
        delay = min(self.restart_left_s, seconds)
        self.restart_left_s -= delay
        self._charge(delay, gpus)
        t += delay
        seconds -= delay
        while seconds > 0 and not self.done:
            nodes, reps = len(self.placement), gpus
            batch = reps * self.atomic_bsz * (self.accum_steps + 1)
            sqr, var = app.grad_stats(batch, self.epoch)
            gain = (var + sqr) / (var / (batch / app.init_batch_size) + sqr)
            st = app.profiles[self.suffix].step_time(self.placement, self.atomic_bsz)
            if st is None:
                raise SpecError("profile", f"{app.name} on {self.suffix} {self.placement} at local batch "
                                           f"{self.atomic_bsz}: outside the measured profile")
            step_s, sync_s = st
            self.grad = (sqr, var)
            self.observed.setdefault(self.suffix, {}).setdefault((nodes, reps, self.atomic_bsz), (step_s, sync_s))
            iter_s = step_s + (step_s - sync_s) * self.accum_steps
            goodput = gain / iter_s / app.slowdown  # progress per second
            target = app.progress_at(self.epoch + 1)
            if self.progress + goodput * seconds < target:
                self.progress += goodput * seconds
                self._charge(seconds, gpus)
                t += seconds
                seconds = 0
            else:
                delta = min(float(round((target - self.progress) / goodput)), seconds)
                self.epoch += 1
                self.progress = target
                self._charge(delta, gpus)
                t += delta
                seconds -= delta
                if self.epoch >= app.max_epochs:
                    self.finish_s = t
                    return
            self._pick_batch()

    def _charge(self, seconds: float, gpus: int) -> None:
        self.attained_gpu_s += seconds * gpus
        gt = self.suffix or ""
        self.gpu_s_by_type[gt] = self.gpu_s_by_type.get(gt, 0.0) + seconds * gpus


@dataclass(frozen=True)
class RoundView:
    """What a round policy may read at one round."""

    now_s: float
    layouts: tuple[TypeLayout, ...]
    jobs: Sequence[AppJobState]  # every job's record (read only)
    active: tuple[int, ...]  # arrived and not done, in workload order
    current: Mapping[int, Alloc]  # the allocation each active job holds now


def simulate_rounds(jobs: Sequence[AppJob], cluster: Cluster, policy_name: str,
                    policy_options: Mapping[str, object] | None = None) -> SimResult:
    """Run one policy over a Sia workload with Sia's applications; deterministic (no seed).

    The policy (REGISTRY[policy_name].round_allocator; None for the policies that have no round version, whose
    `no_round_engine` says why) is built with the cluster's layouts (and `policy_options` as keyword arguments, for
    allocators that take options, e.g. {"efficiency_floor": 0.2} for frenzy-elastic's `FrenzyElasticOptions`) and
    called every round_s seconds; the run ends when every job has finished its epochs.
    """
    from frenzy_core.policies import REGISTRY

    if policy_name not in REGISTRY:
        raise SpecError("policy", f"unknown policy {policy_name!r}; choose one of: {', '.join(REGISTRY)}")
    cls = REGISTRY[policy_name]
    maker = getattr(cls, "round_allocator", None)
    if maker is None:
        have = [k for k, v in REGISTRY.items() if getattr(v, "round_allocator", None)]
        why = getattr(cls, "no_round_engine", "")
        raise SpecError("policy", f"{policy_name!r} has no sia-apps version{f' ({why})' if why else ''}; with "
                                  f"--job-model sia-apps choose one of: {', '.join(have)}")
    if not jobs:
        raise SpecError("trace", "no jobs to simulate")
    t_wall = time.perf_counter()
    layouts = layouts_of(cluster)
    policy = maker(layouts, **policy_options) if policy_options else maker(layouts)
    round_s = float(policy.round_s)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival_s, i))
    states = [AppJobState(i, jobs[i], load_app(jobs[i].application), policy.tune_batch) for i in range(len(jobs))]
    current: dict[int, Alloc] = {}
    now = 0.0
    busy_t, busy = [], []
    decisions = []
    for _ in range(MAX_ROUNDS):
        for s in states:
            s.advance(now, round_s)
        now += round_s
        active = tuple(i for i in order if states[i].job.arrival_s <= now and not states[i].done)
        if all(s.done for s in states):
            break
        current = {i: current.get(i, NO_ALLOC) for i in active}
        view = RoundView(now_s=now, layouts=layouts, jobs=tuple(states), active=active, current=dict(current))
        t0 = time.perf_counter()
        new = policy.allocate(view) if active else {}
        decisions.append(time.perf_counter() - t0)
        _check_capacity(new, layouts)
        for i in active:
            alloc = new.get(i, NO_ALLOC)
            if alloc != current[i]:
                states[i].move(alloc[0], placement_of(alloc[1]), now)
            current[i] = alloc
        busy_t.append(now)
        busy.append([sum(len(a[1]) for i, a in current.items() if a[0] == lay.suffix) for lay in layouts])
    else:
        raise SpecError("trace", f"jobs still running after {MAX_ROUNDS} rounds")
    return _result(policy_name, cluster, layouts, states, busy_t, busy, decisions, policy,
                   time.perf_counter() - t_wall)


def _check_capacity(alloc: Mapping[int, Alloc], layouts: Sequence[TypeLayout]) -> None:
    by = {lay.suffix: lay for lay in layouts}
    for suffix, lay in by.items():
        used = np.zeros(lay.num_nodes, dtype=int)
        for s, nodes in alloc.values():
            if s == suffix:
                np.add.at(used, np.asarray(nodes, dtype=int), 1)
        if (used > lay.gpus_per_node).any():
            raise SpecError("policy", f"allocated more GPUs than a {lay.gpu_type} node has")


def _result(policy_name, cluster, layouts, states, busy_t, busy, decisions, policy, wall_s) -> SimResult:
    name = {lay.suffix: lay.gpu_type for lay in layouts}
    n = len(states)
    cols = job_columns(
        job_id=[s.job.job_id for s in states], model=[s.job.application for s in states], tokens=np.zeros(n),
        trace_gpus=[s.job.num_replicas for s in states], trace_duration_s=np.full(n, math.nan),
        arrival_s=[s.job.arrival_s for s in states], start_s=[s.first_start_s for s in states],
        finish_s=[s.finish_s for s in states], gpu_type=[name.get(s.suffix, "") for s in states],
        num_gpus=[sum(s.placement) for s in states], dp=np.zeros(n, dtype=int), tp=np.ones(n, dtype=int),
        pp=np.ones(n, dtype=int), gpu_hours=[s.attained_gpu_s / 3600.0 for s in states],
        oom_failures=np.zeros(n, dtype=int), restarts=[s.restarts or 0 for s in states],
        state=["done" if s.done else "running" for s in states])
    # busy GPUs per type from each round on; the run charges whole rounds, jobs charge what they used
    t = np.array([0.0, *busy_t])
    b = np.array([[0] * len(layouts), *busy], dtype=np.int64)
    return SimResult(policy=policy_name, seed=0, cluster=cluster.name, total_gpus=sum(x.total_gpus for x in layouts),
                     jobs=cols, util_times_s=t, util_busy=b, gpu_types=tuple(x.gpu_type for x in layouts),
                     decision_wall_s=np.array(decisions), policy_stats=dict(policy.stats()), oom_failures=0,
                     oom_wasted_gpu_hours=0.0, wall_s=wall_s,
                     notes=("job model: sia-apps", *((policy.note,) if hasattr(policy, "note") else ())))


def app_jobs(trace) -> list[AppJob]:
    """The sia-apps jobs of a `sia`-format trace (application, num_replicas and batch_size per row)."""
    out = []
    for tj in trace.jobs:
        if tj.job_type is None or tj.batch_size is None:
            raise SpecError("trace", f"job {tj.job_id} (row {tj.source_row}): the sia-apps job model needs the "
                                     f"application and a positive whole batch_size (use --trace-format sia)")
        load_app(tj.job_type)
        out.append(AppJob(tj.job_id, tj.arrival_s, tj.job_type, int(tj.num_gpus), int(tj.batch_size)))
    return out
