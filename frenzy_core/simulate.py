"""Trace-driven discrete-event simulation of one scheduling policy on one cluster.

One run is a pure function of (trace, cluster, policy name, seed, options): inputs and the `SimResult` are plain
picklable values and nothing is global, so the runs of a what-if sweep can be shipped to workers. The event loop is a
heap of (time, kind priority, sequence, kind, job, token) with the sequence counter owned by the run.

Event kinds and their order at equal times (the tie-break rule): completions first (they free GPUs), then
out-of-memory failures (free GPUs too), then arrivals, then policy rounds; within a kind, the order they were pushed.
After all events of one instant, an event-driven policy is asked once (if something arrived or GPUs were released
and the queue is not empty); a round-based policy (`round_s`) only at its rounds, which run while jobs are waiting
or running and restart on the grid at the next arrival.

A job's run time on a plan is `plan.time_to_train_s` (the performance model's, for its token budget) times the share
of tokens left, plus a restart cost when it resumes after a preemption (`restart_cost_s`: a flat
`restart_overhead_s`, or with `restart_model="checkpoint"` a start-up plus saving and loading the model states). A plan whose predicted per-GPU memory
exceeds the GPU's capacity fails with out-of-memory `oom_startup_s` after it starts (a baseline's fate); the job is
resubmitted with twice the GPUs, at most `max_oom_retries` times.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from frenzy_core import metrics
from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.memory import model_state_bytes
from frenzy_core.packing import ClusterIndex, check_placement
from frenzy_core.policies import REGISTRY
from frenzy_core.policies.base import JobStatus, PolicyContext, Preempt, ReadOnlyList, Reject, SchedulerView, Start
from frenzy_core.training import OPTIMIZER_STATE_BYTES, PRECISIONS
from frenzy_core.workload import DefaultEstimator, LLMJob, PlanTable, Workload, job_classes, map_trace

COMPLETE, OOM_FAIL, ARRIVE, ROUND = 0, 1, 2, 3  # heap priority at equal times: lower first
RESTART_MODELS = ("flat", "checkpoint")  # SimOptions.restart_model
GB = 1e9  # checkpoint bandwidth is in decimal GB/s, as storage vendors quote it


@dataclass(frozen=True)
class SimOptions:
    """Knobs of one run; every default is stated here (sample files and pages only override them)."""

    backfill_window: int = 64  # event-driven policies look at the first N queued jobs (bounded backfill)
    frenzy_objective: str = "gpu-hours"  # how MARP ranks a job's plans (plans.rank_plans objective; see docs)
    safety_margin: float = 0.10  # share of GPU memory kept free by the planner (frenzy, sia)
    oom_startup_s: float = 120.0  # a job that does not fit crashes this long after it starts (load, first step)
    max_oom_retries: int = 4  # resubmissions after OOM before the job is given up (guarantees termination)
    restart_overhead_s: float = 30.0  # "flat" restart cost: checkpoint restore when a preempted job starts again
    # How a preempted (moved) job's restart is charged (`restart_cost_s`): "flat" = restart_overhead_s for every
    # model (the historical default); "checkpoint" = restart_startup_s + (save + load) of its model states at
    # checkpoint_gbyte_s, so a 70B job pays far more than gpt2 for the same move.
    restart_model: str = "flat"
    # "checkpoint" start-up (processes, NCCL init, load, first step); None = oom_startup_s, the same start-up the
    # simulator already assumes before an out-of-memory crash shows.
    restart_startup_s: float | None = None
    # "checkpoint": one job's bandwidth to shared storage, GB/s. An assumption, not a measurement: about one 25 Gb/s
    # NIC (3.1 GB/s line rate) at ~65% to a shared file system; per job whatever its node count (pessimistic for
    # multi-node jobs whose ranks write shards in parallel, optimistic when many jobs checkpoint at once).
    checkpoint_gbyte_s: float = 2.0
    sia_round_s: float = 60.0  # Sia's scheduling round
    sia_restart_penalty: float = 0.1  # utility factor lost by an option that moves a running job
    sia_max_jobs: int = 256  # queued jobs the ILP considers per round (queue order), besides the running ones
    sia_max_gpus: int = 64  # largest allocation the ILP offers a job
    sia_time_limit_s: float = 10.0  # HiGHS time limit per solve
    estimator: Any = None  # memory/speed/ranking model; None = DefaultEstimator (memory, perf, plans modules)


@dataclass(frozen=True)
class SimResult:
    """Everything one run produced. Per-job columns are arrays in workload order."""

    policy: str
    seed: int
    cluster: str
    total_gpus: int
    jobs: dict[str, np.ndarray]  # per-job columns (see jobs_frame)
    util_times_s: np.ndarray  # instants where the busy count changed
    util_busy: np.ndarray  # busy GPUs per type from that instant on: len(times) x types
    gpu_types: tuple[str, ...]
    decision_wall_s: np.ndarray  # the policy's wall time of each call
    policy_stats: dict[str, float]
    oom_failures: int
    oom_wasted_gpu_hours: float
    wall_s: float
    workload_fallbacks: int = 0
    workload_oversized: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    # --- views --------------------------------------------------------------------------------------------------
    def jobs_frame(self) -> pd.DataFrame:
        """One row per job (for CSV download): ids, model, times, JCT, queueing delay, allocation, failures."""
        return pd.DataFrame(self.jobs)

    @property
    def completed(self) -> int:
        return int(np.isfinite(self.jobs["finish_s"]).sum())

    @property
    def makespan_s(self) -> float:
        fin = self.jobs["finish_s"]
        fin = fin[np.isfinite(fin)]
        return float(fin.max() - self.jobs["arrival_s"].min()) if fin.size else math.nan

    def gpu_hours_by_type(self) -> dict[str, float]:
        until = max(self.makespan_s, 0.0) if math.isfinite(self.makespan_s) else 0.0
        return {g: metrics.busy_gpu_seconds(self.util_times_s, self.util_busy[:, i], until) / 3600.0
                for i, g in enumerate(self.gpu_types)}

    def utilisation(self) -> pd.DataFrame:
        """Busy GPUs over time (a step function), per type and in total, with the cluster-wide fraction."""
        df = pd.DataFrame(self.util_busy, columns=list(self.gpu_types))
        df.insert(0, "time_s", self.util_times_s)
        df["busy_gpus"] = self.util_busy.sum(axis=1)
        df["utilisation"] = df["busy_gpus"] / self.total_gpus
        return df

    def metrics(self) -> dict[str, Any]:
        """Every metric of the run (a superset of summary_dict)."""
        state = self.jobs["state"]
        out: dict[str, Any] = {"jobs": int(len(self.jobs["job_id"])), "completed": self.completed,
                               "gave_up": int((state == "gave_up").sum()), "rejected": int((state == "rejected").sum())}
        out.update(metrics.jct_stats(self.jobs["jct_s"]))
        q = self.jobs["queue_s"]
        q = q[np.isfinite(q)]
        out["avg_queue_s"] = float(q.mean()) if q.size else math.nan
        out["p99_queue_s"] = float(np.percentile(q, 99)) if q.size else math.nan
        out["makespan_s"] = self.makespan_s
        by_type = self.gpu_hours_by_type()
        out["gpu_hours"] = float(sum(by_type.values()))
        out["gpu_hours_by_type"] = by_type
        until = self.makespan_s if math.isfinite(self.makespan_s) else 0.0
        out["avg_utilisation"] = metrics.average_utilisation(self.util_times_s, self.util_busy.sum(axis=1),
                                                             self.total_gpus, until)
        out["oom_failures"] = self.oom_failures
        out["oom_wasted_gpu_hours"] = self.oom_wasted_gpu_hours
        out["restarts"] = int(self.jobs["restarts"].sum())
        out["model_fallbacks"] = self.workload_fallbacks  # substitutions are counted, never silent
        out["oversized_jobs"] = self.workload_oversized
        d = self.decision_wall_s
        out["decisions"] = int(d.size)
        out["sched_overhead_ms_per_decision"] = float(d.mean() * 1e3) if d.size else 0.0
        out["wall_s"] = self.wall_s
        out.update({f"policy_{k}": v for k, v in self.policy_stats.items()})
        return out

    def summary_dict(self) -> dict[str, Any]:
        """The CLI's `--json` keys: jobs, completed, gave_up, rejected, avg/p99 JCT (completed jobs only), avg queueing, makespan, GPU-hours, OOMs, ..."""
        m = self.metrics()
        return {k: m[k] for k in metrics.SUMMARY_KEYS}


@dataclass(frozen=True)
class MultiSeedResult:
    """Runs of one policy over several seeds; numbers are means with 95% t-intervals over seeds."""

    results: tuple[SimResult, ...]

    def ci(self, key: str, confidence: float = 0.95) -> tuple[float, float, float]:
        """(mean, low, high) of one metric over seeds; NaN bounds with one seed, low clipped at 0 when the metric
        cannot be negative (`metrics.NONNEGATIVE_KEYS`)."""
        return metrics.mean_ci([r.metrics()[key] for r in self.results], confidence,
                               nonnegative=key in metrics.NONNEGATIVE_KEYS)

    def summary_dict(self) -> dict[str, Any]:
        """Means over seeds of SimResult.summary_dict; `wall_s` is the total. Counts (jobs, completed, gave_up,
        rejected, oom_failures) stay ints when their mean is a whole number (e.g. every seed agrees), e.g.
        ``{"jobs": 30, "completed": 30, "gave_up": 0, ..., "oom_failures": 1.5, ..., "seeds": 2}``."""
        per = [r.summary_dict() for r in self.results]
        out: dict[str, Any] = {}
        for k in metrics.SUMMARY_KEYS:
            vals = [p[k] for p in per]
            if k == "wall_s":
                out[k] = float(sum(vals))
            elif k in metrics.COUNT_KEYS:
                out[k] = metrics.integral_mean(vals)
            else:
                out[k] = float(np.mean(vals))
        out["seeds"] = len(per)
        return out

    def summary_table(self) -> pd.DataFrame:
        """metric, mean, ci_low, ci_high over seeds."""
        keys = ("avg_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "gpu_hours",
                "avg_utilisation", "oom_failures", "sched_overhead_ms_per_decision")
        rows = [(k, *self.ci(k)) for k in keys]
        return pd.DataFrame(rows, columns=["metric", "mean", "ci_low", "ci_high"])

    def jobs_frame(self) -> pd.DataFrame:
        return pd.concat([r.jobs_frame().assign(seed=r.seed) for r in self.results], ignore_index=True)


def checkpoint_bytes(job: LLMJob) -> float:
    """Bytes of one full checkpoint of the job's training state: every rank writes its shard, so the whole model.

    = weights + optimizer states (fp32 master copy + AdamW's two moments) from `memory.model_state_bytes` with no
    sharding; gradients are left out because a checkpoint does not keep them (they are recomputed by the next step).
    bf16-master + AdamW: 2 + 4 + 4 + 4 = 14 bytes per parameter, e.g. llama-2-7b (6.74e9 params) -> 94.3 GB.
    """
    tr = job.training
    weights, _gradients, optimizer = model_state_bytes(float(job.spec.parameter_count()), PRECISIONS[tr.precision],
                                                       OPTIMIZER_STATE_BYTES[tr.optimizer], 0, 1)
    return float(weights + optimizer)


def restart_cost_s(job: LLMJob, options: SimOptions) -> float:
    """Seconds a preempted job spends before it trains again on its new allocation (charged on that allocation).

    "flat": `restart_overhead_s`. "checkpoint": start-up + 2 x checkpoint_bytes / bandwidth (save, then load; both
    charged at the restart, a simplification: the old GPUs are released at once), e.g. llama-2-7b with the
    defaults: 120 + 2 x 94.3 GB / 2 GB/s = 214 s.
    """
    if options.restart_model == "flat":
        return float(options.restart_overhead_s)
    startup = options.oom_startup_s if options.restart_startup_s is None else options.restart_startup_s
    return float(startup + 2.0 * checkpoint_bytes(job) / (options.checkpoint_gbyte_s * GB))


def _check_options(opts: SimOptions) -> None:
    if opts.restart_model not in RESTART_MODELS:
        raise SpecError("restart_model", f"unknown restart model {opts.restart_model!r}; choose one of: "
                        f"{', '.join(RESTART_MODELS)}")
    if opts.restart_model == "checkpoint" and not opts.checkpoint_gbyte_s > 0:
        raise SpecError("checkpoint_gbyte_s", f"must be > 0 GB/s, got {opts.checkpoint_gbyte_s}")


class SimulationError(RuntimeError):
    """A policy returned an impossible decision (an invariant of the simulator would break)."""


def make_context(workload: Workload, cluster: Cluster, options: SimOptions) -> PolicyContext:
    est = options.estimator if options.estimator is not None else DefaultEstimator()
    return PolicyContext(cluster=cluster, index=ClusterIndex.from_cluster(cluster), workload=workload,
                         table=PlanTable(est, cluster), estimator=est, options=options)


def simulate(trace, cluster: Cluster, policy_name: str, seed: int = 0, options: SimOptions | None = None,
             progress: Callable[[float], None] | None = None) -> SimResult:
    """Run one policy over a trace (a `traces.Trace`, or a `workload.Workload` already mapped) on a cluster.

    The seed picks the models of the mapping (`workload.map_trace`); the rest is deterministic. `progress`, if
    given, is called with the share of jobs finished (0..1), about every 1%, and with 1.0 at the end. A trace or
    workload with no jobs (e.g. every row malformed) raises SpecError("trace", ...) naming the skipped rows' reasons.
    """
    opts = options or SimOptions()
    if policy_name not in REGISTRY:
        raise SpecError("policy", f"unknown policy {policy_name!r}; choose one of: {', '.join(REGISTRY)}")
    _check_options(opts)
    _require_jobs(trace)
    t_wall = time.perf_counter()
    est = opts.estimator if opts.estimator is not None else DefaultEstimator()
    table = PlanTable(est, cluster)
    workload = trace if isinstance(trace, Workload) else map_trace(trace, cluster, seed, estimator=est, table=table)
    index = ClusterIndex.from_cluster(cluster)
    ctx = PolicyContext(cluster=cluster, index=index, workload=workload, table=table, estimator=est, options=opts)
    policy = REGISTRY[policy_name](ctx)
    run = _Run(ctx, policy, progress)
    run.loop()
    return run.result(policy_name, seed, time.perf_counter() - t_wall)


def simulate_seeds(trace, cluster: Cluster, policy_name: str, seeds: Iterable[int] = (0,),
                   options: SimOptions | None = None, progress: Callable[[float], None] | None = None,
                   workload_cluster: Cluster | None = None) -> MultiSeedResult:
    """`simulate` once per seed (each seed maps the trace anew); progress spans all seeds.

    `workload_cluster`: map the trace's jobs to LLM jobs on this cluster instead of the simulated one. A what-if
    that compares candidate clusters must pass today's cluster here, so that every candidate runs the *same* jobs
    (the mapping calibrates token budgets on a reference GPU type of the cluster it is given).
    """
    seeds = list(seeds)
    if not seeds:
        raise SpecError("seeds", "give at least one seed (e.g. seeds=range(3))")
    _require_jobs(trace)
    opts = options or SimOptions()
    results = []
    for k, s in enumerate(seeds):
        sub = None if progress is None else (lambda f, k=k: progress((k + f) / len(seeds)))
        jobs = trace
        if workload_cluster is not None and not isinstance(trace, Workload):
            est = opts.estimator if opts.estimator is not None else DefaultEstimator()
            jobs = map_trace(trace, workload_cluster, s, estimator=est)
        results.append(simulate(jobs, cluster, policy_name, seed=s, options=opts, progress=sub))
    return MultiSeedResult(tuple(results))


def _require_jobs(trace) -> None:
    """Refuse an empty trace or workload: a run over zero jobs would report NaN averages as if it had succeeded."""
    jobs = trace.jobs if hasattr(trace, "jobs") else tuple(trace)
    if len(jobs):
        return
    source = getattr(trace, "source", "the trace")
    skipped = getattr(trace, "skipped", ())
    detail = f"{source} has no jobs"
    if skipped:
        reasons = trace.skip_reasons() if hasattr(trace, "skip_reasons") else {}
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
        detail += f" (skipped {len(skipped)} rows: " + "; ".join(f"{n} {r}" for r, n in top) + ")"
    raise SpecError("trace", f"no valid jobs to simulate: {detail}; check that the format matches the file")


class _Run:
    """The mutable state of one run (never shared, never global)."""

    def __init__(self, ctx: PolicyContext, policy, progress):
        self.ctx, self.policy, self.progress = ctx, policy, progress
        self.opts: SimOptions = ctx.options
        idx = ctx.index
        self.free = idx.node_gpus.copy()
        self._free_ro = self.free.view()
        self._free_ro.flags.writeable = False
        self.fbt = [int(c) for c in idx.capacity_by_type()]
        self.type_pos = {t: i for i, t in enumerate(idx.type_names)}
        classes = job_classes(ctx.workload.jobs)
        self.jobs = [JobStatus(i, j, classes[(j.model, j.training)]) for i, j in enumerate(ctx.workload.jobs)]
        self.queue: dict[int, None] = {}
        self.running: dict[int, None] = {}
        self.heap: list = []
        self.seq = 0
        self.release_epoch = 0
        self.done = 0
        self.oom_failures = 0
        self.oom_wasted_gpu_s = 0.0
        self.decision_wall: list[float] = []
        self.util_t: list[float] = []
        self.util_busy: list[tuple[int, ...]] = []
        self.capacity = tuple(self.fbt)
        self.round_pending = False
        self._restart_s: dict = {}  # (model, training) -> restart cost, a function of the job class alone
        self.notes: list[str] = []
        self._next_progress = 0.01

    def push(self, t: float, kind: int, job: int, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, job, token))

    # --- state changes (only here) ------------------------------------------------------------------------------
    def _release(self, st: JobStatus, now: float) -> None:
        n = st.plan.num_gpus
        for node, k in st.placement.nodes:
            self.free[node] += k
        self.fbt[self.type_pos[st.plan.gpu_type]] += n
        st.gpu_seconds[st.plan.gpu_type] = st.gpu_seconds.get(st.plan.gpu_type, 0.0) + n * (now - st.run_start_s)
        del self.running[st.idx]
        self.release_epoch += 1

    def _start(self, d: Start, now: float) -> None:
        st = self.jobs[d.job]
        if st.state != "queued":
            raise SimulationError(f"{self.policy.name}: started job {st.job.job_id} which is {st.state}")
        why = check_placement(self.ctx.index, self.free, d.plan, d.placement)
        if why:
            raise SimulationError(f"{self.policy.name}: job {st.job.job_id}: {why}")
        for node, k in d.placement.nodes:
            self.free[node] -= k
        self.fbt[self.type_pos[d.plan.gpu_type]] -= d.plan.num_gpus
        del self.queue[d.job]
        self.running[d.job] = None
        st.state, st.plan, st.placement = "running", d.plan, d.placement
        st.token += 1
        st.run_start_s = now
        if st.first_start_s is None:
            st.first_start_s = now
        st.startup_s = self._restart_cost(st.job) if st.done_fraction > 0 else 0.0
        if d.plan.memory_bytes > d.plan.gpu_memory_bytes:
            st.run_end_s = now + self.opts.oom_startup_s
            self.push(st.run_end_s, OOM_FAIL, d.job, st.token)
        else:
            st.run_end_s = now + st.startup_s + (1.0 - st.done_fraction) * d.plan.time_to_train_s
            self.push(st.run_end_s, COMPLETE, d.job, st.token)

    def _restart_cost(self, job: LLMJob) -> float:
        key = (job.model, job.training)
        if key not in self._restart_s:
            self._restart_s[key] = restart_cost_s(job, self.opts)
        return self._restart_s[key]

    def _preempt(self, d: Preempt, now: float) -> None:
        st = self.jobs[d.job]
        if st.state != "running":
            raise SimulationError(f"{self.policy.name}: preempted job {st.job.job_id} which is {st.state}")
        worked = max(0.0, now - st.run_start_s - st.startup_s)
        st.done_fraction = min(st.done_fraction + worked / st.plan.time_to_train_s, 1.0 - 1e-12)
        self._release(st, now)
        st.restarts += 1
        st.token += 1
        st.state = "queued"
        self.queue[d.job] = None

    def _reject(self, d: Reject) -> None:
        st = self.jobs[d.job]
        if st.state != "queued":
            raise SimulationError(f"{self.policy.name}: rejected job {st.job.job_id} which is {st.state}")
        del self.queue[d.job]
        st.state = "rejected"
        self.notes.append(f"job {st.job.job_id} rejected: {d.reason}")
        self._job_done()

    def _job_done(self) -> None:
        self.done += 1
        if self.progress is not None:
            f = self.done / max(len(self.jobs), 1)
            if f >= self._next_progress:
                self._next_progress = math.floor(f * 100 + 1) / 100
                self.progress(min(f, 1.0))

    def _event(self, kind: int, j: int, token: int, now: float) -> tuple[bool, bool]:
        """Apply one event; returns (arrived, released)."""
        st = self.jobs[j]
        if kind == ARRIVE:
            st.state = "queued"
            self.queue[j] = None
            return True, False
        if kind == ROUND:
            return False, False
        if token != st.token or st.state != "running":
            return False, False  # a completion or failure of a run that was preempted
        self._release(st, now)
        if kind == COMPLETE:
            st.done_fraction = 1.0
            st.state = "done"
            st.finish_s = now
            self._job_done()
            return False, True
        # out of memory: count it, waste its GPU time, resubmit with twice the GPUs
        self.oom_failures += 1
        st.oom_failures += 1
        self.oom_wasted_gpu_s += st.plan.num_gpus * (now - st.run_start_s)
        st.wasted_gpu_seconds += st.plan.num_gpus * (now - st.run_start_s)
        if st.oom_failures > self.opts.max_oom_retries:
            st.state = "gave_up"
            self.notes.append(f"job {st.job.job_id} gave up after {st.oom_failures} out-of-memory failures")
            self._job_done()
        else:
            st.requested_gpus *= 2
            st.state = "queued"
            self.queue[j] = None
        return False, True

    def _decide(self, now: float) -> int:
        view = SchedulerView(now_s=now, index=self.ctx.index, free=self._free_ro, free_by_type=tuple(self.fbt),
                             queue=ReadOnlyList(self.queue), running=ReadOnlyList(self.running),
                             jobs=ReadOnlyList(self.jobs), release_epoch=self.release_epoch)
        t0 = time.perf_counter()
        decisions = self.policy.decide(view)
        self.decision_wall.append(time.perf_counter() - t0)
        for d in decisions:  # preemptions first, so their GPUs are free for the starts
            if isinstance(d, Preempt):
                self._preempt(d, now)
        for d in decisions:
            if isinstance(d, Start):
                self._start(d, now)
            elif isinstance(d, Reject):
                self._reject(d)
            elif not isinstance(d, Preempt):
                raise SimulationError(f"{self.policy.name}: unknown decision {d!r}")
        return len(decisions)

    def _schedule_round(self, now: float) -> None:
        r = self.policy.round_s
        self.push(math.ceil(now / r) * r, ROUND, -1)
        self.round_pending = True

    def loop(self) -> None:
        for i, j in enumerate(self.ctx.workload.jobs):
            self.push(j.arrival_s, ARRIVE, i)
        round_based = self.policy.round_s is not None
        heap = self.heap
        last_busy = None
        while heap:
            now = heap[0][0]
            arrived = released = is_round = False
            while heap and heap[0][0] == now:
                _, kind, _, j, token = heapq.heappop(heap)
                if kind == ROUND:
                    is_round = True
                    self.round_pending = False
                    continue
                a, r = self._event(kind, j, token, now)
                arrived |= a
                released |= r
            if round_based:
                if is_round:
                    n = self._decide(now) if (self.queue or self.running) else 0
                    if self.queue or self.running:
                        stalled = n == 0 and not self.running and not any(k == ARRIVE for _, k, *_ in heap)
                        if stalled:
                            break
                        self.push(now + self.policy.round_s, ROUND, -1)
                        self.round_pending = True
                elif arrived and not self.round_pending:
                    self._schedule_round(now)
            elif (arrived or released) and self.queue:
                self._decide(now)
            busy = tuple(c - f for c, f in zip(self.capacity, self.fbt, strict=True))
            if busy != last_busy:
                if self.util_t and self.util_t[-1] == now:
                    self.util_busy[-1] = busy
                else:
                    self.util_t.append(now)
                    self.util_busy.append(busy)
                last_busy = busy
        for j in self.queue:  # left waiting: nothing could ever place them
            self.notes.append(f"job {self.jobs[j].job.job_id} never started")
        if self.progress is not None:
            self.progress(1.0)

    def result(self, policy_name: str, seed: int, wall_s: float) -> SimResult:
        js = self.jobs
        nan = math.nan
        arrival = np.array([s.job.arrival_s for s in js])
        finish = np.array([s.finish_s if s.finish_s is not None else nan for s in js])
        first = np.array([s.first_start_s if s.first_start_s is not None else nan for s in js])
        cols = {
            "job_id": np.array([s.job.job_id for s in js], dtype=object),
            "model": np.array([s.job.model for s in js], dtype=object),
            "tokens": np.array([s.job.tokens for s in js]),
            "trace_gpus": np.array([s.job.trace_gpus for s in js]),
            "trace_duration_s": np.array([s.job.trace_duration_s for s in js]),
            "arrival_s": arrival,
            "start_s": first,
            "finish_s": finish,
            "jct_s": finish - arrival,
            "queue_s": first - arrival,
            "gpu_type": np.array([s.plan.gpu_type if s.plan else "" for s in js], dtype=object),
            "num_gpus": np.array([s.plan.num_gpus if s.plan else 0 for s in js]),
            "dp": np.array([s.plan.dp if s.plan else 0 for s in js]),
            "tp": np.array([s.plan.tp if s.plan else 0 for s in js]),
            "pp": np.array([s.plan.pp if s.plan else 0 for s in js]),
            "gpu_hours": np.array([sum(s.gpu_seconds.values()) / 3600.0 for s in js]),
            "oom_failures": np.array([s.oom_failures for s in js]),
            "restarts": np.array([s.restarts for s in js]),
            "state": np.array([s.state for s in js], dtype=object),
        }
        busy = np.array(self.util_busy, dtype=np.int64).reshape(len(self.util_t), len(self.capacity))
        return SimResult(
            policy=policy_name, seed=seed, cluster=self.ctx.cluster.name, total_gpus=int(sum(self.capacity)),
            jobs=cols, util_times_s=np.array(self.util_t), util_busy=busy, gpu_types=self.ctx.index.type_names,
            decision_wall_s=np.array(self.decision_wall), policy_stats=dict(self.policy.stats()),
            oom_failures=self.oom_failures, oom_wasted_gpu_hours=self.oom_wasted_gpu_s / 3600.0, wall_s=wall_s,
            workload_fallbacks=self.ctx.workload.fallbacks, workload_oversized=self.ctx.workload.oversized,
            notes=tuple(self.notes),
        )
