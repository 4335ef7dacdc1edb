"""Trace-driven discrete-event simulation of one scheduling policy on one cluster.

One run is a pure function of (trace, cluster, policy name, seed, options): inputs and the `SimResult` are plain
picklable values and nothing is global, so the runs of a what-if sweep can be shipped to workers. The event loop is a
heap of (time, kind, sequence, job, token) with the sequence counter owned by the run (the kind is its priority).

Event kinds and their order at equal times (the tie-break rule): completions first (they free GPUs), then
out-of-memory failures (free GPUs too), then arrivals, then policy rounds; within a kind, the order they were pushed.
After all events of one instant, an event-driven policy is asked once (if something arrived or GPUs were released
and the queue is not empty); a round-based policy (`round_s`) only at its rounds, which run while jobs are waiting
or running and restart on the grid at the next arrival.

A job's run time on a plan is `plan.time_to_train_s` (the performance model's, for its token budget) times the share
of tokens left, plus, when it resumes after a preemption, `SimOptions.restart.cost_s(job)` (one `RestartModel` for
every policy: start-up + checkpoint save + load). A run whose true per-GPU memory (the plan's prediction, or
`SimOptions.oom_truth`'s) exceeds the GPU's capacity fails with out-of-memory `oom_startup_s` after it starts; the job is
resubmitted with twice the GPUs, at most `max_oom_retries` times.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import numbers
import operator
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from frenzy_core import metrics, policies
from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.limits import DEFAULT_SAFETY_MARGIN
from frenzy_core.memory import model_state_bytes, predict_memory
from frenzy_core.packing import ClusterIndex, check_placement
from frenzy_core.policies import REGISTRY
from frenzy_core.policies.base import JobStatus, PolicyContext, Preempt, ReadOnlyList, Reject, SchedulerView, Start
from frenzy_core.training import OPTIMIZER_STATE_BYTES, PRECISIONS
from frenzy_core.workload import DefaultEstimator, LLMJob, PlanTable, Workload, job_classes, map_trace

COMPLETE, OOM_FAIL, ARRIVE, ROUND, WAKE = 0, 1, 2, 3, 4  # heap priority at equal times: lower first
RESTART_KINDS = ("checkpoint", "flat")  # RestartModel.kind
GB = 1e9  # checkpoint bandwidth is in decimal GB/s, as storage vendors quote it


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


@dataclass(frozen=True)
class RestartModel:
    """What one preemption costs a job, charged by the simulator the same way whatever policy preempted it.

    A preempted job saves a checkpoint of its state (`checkpoint_bytes`), its GPUs are released, and when it starts
    again (on any plan, type or size) it pays `cost_s` before it trains: start-up (processes, NCCL init, first step)
    + save + load at `checkpoint_gbyte_s`. Its progress is that of the checkpoint, taken at the preemption: work
    done before it is kept, nothing after it exists. kind="flat" charges `flat_s` for every model instead (the
    historical 30 s, for the sensitivity study). With the defaults: gpt2 122 s, llama-2-7b 214 s, llama-2-70b 1,086 s.
    """

    kind: str = "checkpoint"  # "checkpoint" (model-aware) or "flat"
    # processes, NCCL init, loading the code, the first step: the same 120 s the simulator assumes before an
    # out-of-memory crash shows (SimOptions.oom_startup_s)
    startup_s: float = 120.0
    # one job's bandwidth to shared storage, GB/s. An assumption, not a measurement: about one 25 Gb/s NIC (3.1 GB/s
    # line rate) at ~65% to a shared file system; per job whatever its node count (pessimistic for multi-node jobs
    # whose ranks write shards in parallel, optimistic when many jobs checkpoint at once).
    checkpoint_gbyte_s: float = 2.0
    flat_s: float = 30.0  # kind="flat": seconds per restart for every model

    def save_s(self, job: LLMJob) -> float:
        """Seconds to write the checkpoint (charged at the restart, see docs/simulation.md)."""
        return checkpoint_bytes(job) / (self.checkpoint_gbyte_s * GB)

    def load_s(self, job: LLMJob) -> float:
        return checkpoint_bytes(job) / (self.checkpoint_gbyte_s * GB)

    def cost_s(self, job: LLMJob) -> float:
        """Seconds a preempted job spends on its new allocation before it trains again.

        e.g. llama-2-7b with the defaults: 120 + 94.3 GB / 2 GB/s (save) + 94.3 GB / 2 GB/s (load) = 214 s.
        """
        if self.kind == "flat":
            return float(self.flat_s)
        return float(self.startup_s + self.save_s(job) + self.load_s(job))

    def check(self) -> None:
        """SpecError naming the field when a value is out of range."""
        if self.kind not in RESTART_KINDS:
            raise SpecError("restart.kind", f"unknown restart model {self.kind!r}; choose one of: "
                            f"{', '.join(RESTART_KINDS)}")
        for name in ("startup_s", "flat_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise SpecError(f"restart.{name}", f"must be a finite number of seconds >= 0, got {v}")
        if not (math.isfinite(self.checkpoint_gbyte_s) and self.checkpoint_gbyte_s > 0):
            raise SpecError("restart.checkpoint_gbyte_s", f"must be > 0 GB/s, got {self.checkpoint_gbyte_s}")


@dataclass(frozen=True)
class OomTruth:
    """Where the simulator's out-of-memory truth comes from when it is not the planner's own prediction.

    true memory = (memory by `method`, or the plan's predicted memory when None) x (1 + u), u drawn uniformly in
    [-noise, +noise] per (seed, job, split), reproducibly. A run whose true memory exceeds the GPU's capacity fails
    with out-of-memory `oom_startup_s` after it starts, whatever the policy.
    """

    method: str | None = None  # a `memory.predict_memory` method other than the planner's (e.g. "paper"), or None
    noise: float = 0.0  # half-width of the relative noise band (0.2 = +-20%)


# Old names of SimOptions' own knobs (still accepted, and read, under them)
RENAMED_KNOBS = {"sia_every_round": "every_round"}


@dataclass(frozen=True, init=False)
class SimOptions:
    """The simulator's knobs for one run, and the run's overrides of the policies' own knobs; every default is
    stated here or in the policy's module (`policies/<name>.py` `Options`); sample files and pages only override them.

    Keyword arguments only. `policy_options` maps a registered policy's name to a dict of the fields of its `Options`
    to change (``{"sia": {"round_s": 120.0}}``) or to an `Options` (``{"sia": sia.Options(round_s=120.0)}``, which
    stands for the fields it sets away from `Options()`' defaults); it is kept as a tuple of (name, ((field, value),
    ...)) so the options stay hashable, and read with `options_for` (the policy's defaults with those fields changed).

    The knobs that used to be flat here still work as keywords (`SimOptions(sia_round_s=120.0)`, also through
    `dataclasses.replace`): each sets that field on every registered policy whose `Options.legacy_keys` names it
    (`legacy_key_owners()`: sia_round_s -> sia, sia-real, frenzy-elastic, frenzy-elastic-srpt), over what
    `policy_options` says; sia_every_round is `every_round`. Any other keyword is a SpecError naming it.

    The safety margin stays here, not in the policies' options: like the estimator and the restart model it is part
    of the planner every memory-aware policy plans with (frenzy*, sia*, gavel), so policies compared in one run plan
    against the same usable memory.
    """

    backfill_window: int = 64  # event-driven policies look at the first N queued jobs (bounded backfill)
    safety_margin: float = DEFAULT_SAFETY_MARGIN  # share of GPU memory kept free by the planner (frenzy, sia, gavel)
    oom_startup_s: float = 120.0  # a job that does not fit crashes this long after it starts (load, first step)
    max_oom_retries: int = 4  # resubmissions after OOM before the job is given up (guarantees termination)
    # What a preemption costs (save a checkpoint, start up, load it), the same model for every policy.
    restart: RestartModel = RestartModel()
    # How the engine runs a round-based policy (`round_s`: sia, sia-real, gavel). False (default): a round only when
    # the job set or the free GPUs changed since the last one (at most once per round); True: every round while jobs
    # wait or run (the historical loop, for the equality check). Was `sia_every_round`.
    every_round: bool = False
    # Out-of-memory truth: None = the planner's prediction is the truth (a plan fits iff predicted to fit);
    # an OomTruth makes the true per-GPU memory differ from the prediction, so the cost of prediction error shows.
    oom_truth: OomTruth | None = None
    estimator: Any = None  # memory/speed/ranking model; None = DefaultEstimator (memory, perf, plans modules)
    # per-policy overrides of their own knobs: ((policy name, ((field, value), ...)), ...), see the docstring
    policy_options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    def __init__(self, **knobs: Any) -> None:
        own = {f.name for f in dataclasses.fields(SimOptions)}
        for old, new in RENAMED_KNOBS.items():
            if old in knobs:
                knobs[new] = knobs.pop(old)
        legacy = {k: knobs.pop(k) for k in [k for k in knobs if k not in own]}
        overrides = _policy_overrides(knobs.pop("policy_options", ()))
        owners = legacy_key_owners() if legacy else {}
        for key, value in legacy.items():
            if key not in owners:
                flat = ", ".join(sorted([*owners, *RENAMED_KNOBS]))
                raise SpecError(key, f"not a SimOptions knob; the simulator's: {', '.join(sorted(own))}; the old "
                                f"flat policy knobs: {flat}; a policy's own knobs go in policy_options, e.g. "
                                f"policy_options={{'sia': {{'round_s': 120.0}}}}")
            for name, fld in owners[key]:
                overrides.setdefault(name, {})[fld] = value
        for name, fields in overrides.items():  # validated once here (each Options' __post_init__)
            try:
                dataclasses.replace(policies.policy_class(name).default_options(), **fields)
            except SpecError as err:
                key = next((k for k in legacy if dict(owners[k]).get(name) == err.field), None)  # named as given
                raise SpecError(key or f"policy_options.{name}.{err.field}", err.reason) from None
        for f in dataclasses.fields(SimOptions):
            if f.name in knobs:
                value = knobs[f.name]
            elif f.default is not dataclasses.MISSING:
                value = f.default
            else:
                value = f.default_factory()
            object.__setattr__(self, f.name, value)
        object.__setattr__(self, "policy_options",
                           tuple((n, tuple(overrides[n].items())) for n in sorted(overrides) if overrides[n]))

    def __getattr__(self, name: str) -> Any:
        """The old names: `sia_every_round` reads `every_round`; a policy knob that moved says where it went."""
        if name.startswith("__"):
            raise AttributeError(name)
        if name in RENAMED_KNOBS:
            return getattr(self, RENAMED_KNOBS[name])
        owners = legacy_key_owners().get(name)
        if owners:
            where = ", ".join(f"{p} (Options.{f})" for p, f in owners)
            raise AttributeError(f"SimOptions.{name} is a policy knob now: {where}; read it with "
                                 f"options.options_for({owners[0][0]!r}).{owners[0][1]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def options_for(self, policy) -> Any:
        """The `Options` a policy runs with in this run: its defaults (`default_options()`) with this run's overrides
        for its name. `policy`: a registered name, or a policy class (its `name` is the key), e.g.
        ``SimOptions(sia_round_s=120.0).options_for("sia").round_s == 120.0``."""
        cls = policies.policy_class(policy) if isinstance(policy, str) else policy
        fields = dict(self.policy_options).get(cls.name)
        base = cls.default_options()
        return dataclasses.replace(base, **dict(fields)) if fields else base


def legacy_key_owners() -> dict[str, list[tuple[str, str]]]:
    """Old flat SimOptions name -> [(policy, its Options field)] over the registry (each `Options.legacy_keys`), e.g.
    {"frenzy_objective": [("frenzy", "objective")], "sia_round_s": [("sia", "round_s"), ...], ...}."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, cls in REGISTRY.items():
        for old, fld in getattr(getattr(cls, "Options", None), "legacy_keys", {}).items():
            out.setdefault(old, []).append((name, fld))
    return out


def _policy_overrides(given) -> dict[str, dict[str, Any]]:
    """policy name -> {field: value} from a mapping of name -> Options or dict, or the stored tuple form."""
    items = given.items() if isinstance(given, Mapping) else given
    out: dict[str, dict[str, Any]] = {}
    for name, value in items:
        cls = REGISTRY.get(name)
        if cls is None:
            raise SpecError("policy_options", f"unknown policy {name!r}; choose one of: {', '.join(REGISTRY)}")
        known = [f.name for f in dataclasses.fields(cls.Options)]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            if not isinstance(value, cls.Options):
                raise SpecError(f"policy_options.{name}", f"give {name}'s own Options "
                                f"({cls.Options.__module__}.Options), not {type(value).__name__}")
            # the fields it sets away from Options()' defaults: what a dict of fields would say (a variant's own
            # defaults, e.g. frenzy-elastic-srpt's srpt=True, are not undone by an instance that leaves them)
            plain = cls.Options()
            fields = {k: getattr(value, k) for k in known if getattr(value, k) != getattr(plain, k)}
        else:
            fields = dict(value.items() if isinstance(value, Mapping) else value)
        unknown = [k for k in fields if k not in known]
        if unknown:
            raise SpecError(f"policy_options.{name}.{unknown[0]}", f"not a knob of {name}; its knobs: "
                            f"{', '.join(known) or '(none)'}")
        out.setdefault(name, {}).update(fields)
    return out


JOB_COLUMNS = ("job_id", "model", "tokens", "trace_gpus", "trace_duration_s", "arrival_s", "start_s", "finish_s",
               "jct_s", "queue_s", "gpu_type", "num_gpus", "dp", "tp", "pp", "gpu_hours", "oom_failures", "restarts",
               "state")
_OBJECT_COLUMNS = frozenset({"job_id", "model", "gpu_type", "state"})


def job_columns(*, arrival_s, start_s, finish_s, **columns) -> dict[str, np.ndarray]:
    """The per-job columns of a SimResult, built the same way by both engines (the event loop here and the round
    engine in rounds.py): None times become NaN, JCT = finish - arrival and queue = first start - arrival are derived
    here, never stored twice. Every name of JOB_COLUMNS but the derived ones must be given.

    >>> c = job_columns(arrival_s=[0.0, 5.0], start_s=[1.0, None], finish_s=[4.0, None], **{k: [0, 0] for k in
    ...     JOB_COLUMNS if k not in ("arrival_s", "start_s", "finish_s", "jct_s", "queue_s")})
    >>> c["jct_s"].tolist(), c["queue_s"].tolist()
    ([4.0, nan], [1.0, nan])
    """
    def times(values):
        return np.array([math.nan if v is None else v for v in values], dtype=float)

    arrival, start, finish = times(arrival_s), times(start_s), times(finish_s)
    given = {**columns, "arrival_s": arrival, "start_s": start, "finish_s": finish, "jct_s": finish - arrival,
             "queue_s": start - arrival}
    missing = set(JOB_COLUMNS) - set(given)
    if missing:
        raise TypeError(f"job_columns: missing {sorted(missing)}")
    return {k: np.array(given[k], dtype=object) if k in _OBJECT_COLUMNS else np.asarray(given[k])
            for k in JOB_COLUMNS}


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
    workload_rejected_no_fit: int = 0  # trace jobs whose (named) model fits nowhere: rejected at mapping, not shrunk
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
        # a run ends with every GPU free (a running job always has an end event), so the last step adds nothing
        return {g: metrics.busy_gpu_seconds(self.util_times_s, self.util_busy[:, i]) / 3600.0
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
        q = self.jobs["queue_s"][state == "done"]  # queueing over completed jobs only, like JCT (metrics.py)
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
        out["rejected_no_fit"] = self.workload_rejected_no_fit
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


def _check_options(opts: SimOptions) -> None:
    opts.restart.check()
    if not (math.isfinite(opts.oom_startup_s) and opts.oom_startup_s >= 0):
        raise SpecError("oom_startup_s", f"must be a finite number of seconds >= 0, got {opts.oom_startup_s}")
    if not (math.isfinite(opts.safety_margin) and 0 <= opts.safety_margin < 1):
        raise SpecError("safety_margin", f"must be in [0, 1) (0.10 keeps 10% of each GPU free), got {opts.safety_margin}")
    for name, least in (("backfill_window", 1), ("max_oom_retries", 0)):
        v = getattr(opts, name)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < least:
            raise SpecError(name, f"must be a whole number >= {least}, got {v!r}")
    if opts.oom_truth is not None:
        from frenzy_core.memory import METHODS

        ot = opts.oom_truth
        if ot.method is not None and ot.method not in METHODS:
            raise SpecError("oom_truth.method", f"unknown memory method {ot.method!r}; choose one of: "
                            f"{', '.join(METHODS)}, or None for the planner's prediction")
        if not (math.isfinite(ot.noise) and 0 <= ot.noise < 1):
            raise SpecError("oom_truth.noise", f"must be in [0, 1), got {ot.noise}")


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
    if not REGISTRY[policy_name].event_engine:
        raise SpecError("policy", f"{policy_name!r} runs on the round engine only (--job-model sia-apps)")
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
        self.round_k = 0  # index of the last round pushed (rounds run at k x round_s)
        self.rounds_done = False
        self.wake_token = 0  # only the latest wake-up request counts
        self._restart_s: dict = {}  # (model, training) -> restart cost, a function of the job class alone
        self._true_mem: dict = {}  # (class, split, micro-batch) -> true memory before noise (oom_truth)
        self._doomed: set[int] = set()  # jobs whose current run will fail with out-of-memory (it never trains)
        self.wake_s = math.inf  # the time the policy asked to be called again at (Policy.next_wake_s)
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
        if self._true_memory(st, d.plan) > d.plan.gpu_memory_bytes:
            self._doomed.add(d.job)
            st.run_end_s = now + self.opts.oom_startup_s
            self.push(st.run_end_s, OOM_FAIL, d.job, st.token)
        else:
            self._doomed.discard(d.job)
            st.run_end_s = now + st.startup_s + (1.0 - st.done_fraction) * d.plan.time_to_train_s
            self.push(st.run_end_s, COMPLETE, d.job, st.token)

    def _restart_cost(self, job: LLMJob) -> float:
        key = (job.model, job.training)
        if key not in self._restart_s:
            self._restart_s[key] = self.opts.restart.cost_s(job)
        return self._restart_s[key]

    def _true_memory(self, st: JobStatus, plan) -> float:
        """Per-GPU memory the run really needs: the plan's prediction, or SimOptions.oom_truth's."""
        truth = self.opts.oom_truth
        if truth is None:
            return plan.memory_bytes
        key = (st.cls, plan.dp, plan.tp, plan.pp, plan.ep, plan.cp, plan.vp, plan.micro_batch)
        base = self._true_mem.get(key)
        if base is None:
            base = float(plan.memory_bytes)
            if truth.method is not None:
                job = st.job
                tr = job.training if plan.micro_batch == job.training.micro_batch else \
                    job.training.model_copy(update={"micro_batch": plan.micro_batch})
                base = float(predict_memory(job.spec, tr, plan.parallelism,
                                            method=truth.method).total_bytes)
            self._true_mem[key] = base
        if truth.noise <= 0:
            return base
        rng = np.random.default_rng([self.ctx.workload.seed, st.idx, plan.dp, plan.tp, plan.pp, plan.micro_batch,
                                     *((plan.ep, plan.cp, plan.vp) if (plan.ep, plan.cp, plan.vp) != (1, 1, 1) else ())])
        return base * (1.0 + rng.uniform(-truth.noise, truth.noise))

    def _preempt(self, d: Preempt, now: float) -> None:
        st = self.jobs[d.job]
        if st.state != "running":
            raise SimulationError(f"{self.policy.name}: preempted job {st.job.job_id} which is {st.state}")
        # the checkpoint is taken now: what was trained since the restart ended is kept, a restart cut short is lost;
        # a run that was going to fail with out-of-memory crashes in its start-up and never trained
        worked = 0.0 if st.idx in self._doomed else max(0.0, now - st.run_start_s - st.startup_s)
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
        # what a planner learns from the crash: this job needs less than this plan's predicted memory per GPU
        st.oom_memory_bytes = min(st.oom_memory_bytes or st.plan.memory_bytes, st.plan.memory_bytes)
        if st.oom_failures > self.opts.max_oom_retries:
            st.state = "gave_up"
            self.notes.append(f"job {st.job.job_id} gave up after {st.oom_failures} out-of-memory failures")
            self._job_done()
        else:
            # a resubmission asks for twice the GPUs, but never more than the largest GPU type has (docs/simulation.md):
            # past that no placement exists and the request would only grow
            st.requested_gpus = min(2 * st.requested_gpus, max(self.capacity))
            st.state = "queued"
            self.queue[j] = None
        return False, True

    def _view(self, now: float) -> SchedulerView:
        return SchedulerView(now_s=now, index=self.ctx.index, free=self._free_ro, free_by_type=tuple(self.fbt),
                             queue=ReadOnlyList(self.queue), running=ReadOnlyList(self.running),
                             jobs=ReadOnlyList(self.jobs), release_epoch=self.release_epoch)

    def _decide(self, now: float) -> int:
        view = self._view(now)
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

    def _push_round(self, k: int) -> None:
        """Round k runs at k x round_s (an integer grid, so both round modes meet the same instants)."""
        self.round_k = k
        self.push(k * self.policy.round_s, ROUND, -1)
        self.round_pending = True

    def loop(self) -> None:
        for i, j in enumerate(self.ctx.workload.jobs):
            self.push(j.arrival_s, ARRIVE, i)
        round_based = self.policy.round_s is not None
        every_round = self.opts.every_round
        preemptive = getattr(self.policy, "preemptive", False)
        heap = self.heap
        last_busy = None
        while heap:
            now = heap[0][0]
            arrived = released = is_round = woken = False
            while heap and heap[0][0] == now:
                _, kind, _, j, token = heapq.heappop(heap)
                if kind == ROUND:
                    is_round = True
                    self.round_pending = False
                    continue
                if kind == WAKE:
                    woken |= token == self.wake_token
                    continue
                a, r = self._event(kind, j, token, now)
                arrived |= a
                released |= r
            if round_based:
                r_s = self.policy.round_s
                changed = arrived or released
                if is_round:
                    n = self._decide(now) if (self.queue or self.running) else 0
                    if every_round and (self.queue or self.running):
                        stalled = n == 0 and not self.running and not any(k == ARRIVE for _, k, *_ in heap)
                        if stalled:
                            break
                        self._push_round(self.round_k + 1)
                    elif n and (self.queue or self.running):
                        self._push_round(self.round_k + 1)  # its own decisions changed the state: look again
                elif changed and not self.round_pending and (self.queue or self.running):
                    # the next grid point, never earlier than one round after the last one
                    self._push_round(max(math.ceil(now / r_s), self.round_k + 1 if self.rounds_done else 0))
                if is_round:
                    self.rounds_done = True
            elif ((arrived or released or woken) and self.queue) or (released and preemptive and self.running):
                self._decide(now)
                wake = self.policy.next_wake_s(self._view(now)) if self.queue and self.running else None
                if wake is not None and wake > now and math.isfinite(wake):
                    self.wake_token += 1
                    self.push(wake, WAKE, -1, self.wake_token)
            busy = tuple(map(operator.sub, self.capacity, self.fbt))
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
        cols = job_columns(
            job_id=[s.job.job_id for s in js], model=[s.job.model for s in js], tokens=[s.job.tokens for s in js],
            trace_gpus=[s.job.trace_gpus for s in js], trace_duration_s=[s.job.trace_duration_s for s in js],
            arrival_s=[s.job.arrival_s for s in js], start_s=[s.first_start_s for s in js],
            finish_s=[s.finish_s for s in js],
            gpu_type=[s.plan.gpu_type if s.plan else "" for s in js],
            num_gpus=[s.plan.num_gpus if s.plan else 0 for s in js], dp=[s.plan.dp if s.plan else 0 for s in js],
            tp=[s.plan.tp if s.plan else 0 for s in js], pp=[s.plan.pp if s.plan else 0 for s in js],
            gpu_hours=[sum(s.gpu_seconds.values()) / 3600.0 for s in js], oom_failures=[s.oom_failures for s in js],
            restarts=[s.restarts for s in js], state=[s.state for s in js])
        busy = np.array(self.util_busy, dtype=np.int64).reshape(len(self.util_t), len(self.capacity))
        return SimResult(
            policy=policy_name, seed=seed, cluster=self.ctx.cluster.name, total_gpus=int(sum(self.capacity)),
            jobs=cols, util_times_s=np.array(self.util_t), util_busy=busy, gpu_types=self.ctx.index.type_names,
            decision_wall_s=np.array(self.decision_wall), policy_stats=dict(self.policy.stats()),
            oom_failures=self.oom_failures, oom_wasted_gpu_hours=self.oom_wasted_gpu_s / 3600.0, wall_s=wall_s,
            workload_fallbacks=self.ctx.workload.fallbacks, workload_oversized=self.ctx.workload.oversized,
            workload_rejected_no_fit=len(self.ctx.workload.rejected_no_fit),
            notes=tuple(self.notes),
        )
