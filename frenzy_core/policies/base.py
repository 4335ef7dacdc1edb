"""What every policy shares: the read-only view it gets, the decisions it returns, and the jobs x GPU-types matrix.

A policy is a class with one method, `decide(view) -> list[Decision]`, built once per run from a `PolicyContext`
(the cluster, the mapped workload, the plan table, the simulator's options) and its own `Options`. It reads the
view and returns decisions; only the simulator changes state (blox's accept -> schedule -> place round). `round_s`
is None for event-driven policies (called after every batch of arrivals/completions) or the period of its rounds
(Sia: 60 s).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import sparse

from frenzy_core.cluster import Cluster
from frenzy_core.packing import ClusterIndex, Placement
from frenzy_core.plans import Plan
from frenzy_core.workload import LLMJob, PlanTable, Workload, job_classes


@dataclass(frozen=True)
class Start:
    """Start (or restart) a queued job with this plan on this placement. plan.time_to_train_s is for the whole job."""

    job: int  # index into the workload's jobs
    plan: Plan
    placement: Placement


@dataclass(frozen=True)
class Preempt:
    """Stop a running job and put it back in the queue; its progress is kept (checkpoint/restart)."""

    job: int


@dataclass(frozen=True)
class Reject:
    """The job can never run on this cluster (no plan fits anywhere); the simulator marks it failed."""

    job: int
    reason: str


Decision = Start | Preempt | Reject


@dataclass(frozen=True)
class NoOptions:
    """The knobs of a policy that has none of its own (it reads only the simulator's, `SimOptions`)."""

    # old flat `SimOptions` names this policy's knobs answer to (old name -> field); see simulate.SimOptions
    legacy_keys: ClassVar[dict[str, str]] = {}


class JobStatus:
    """The simulator's record of one job. Policies read it; only the simulator writes it."""

    __slots__ = ("idx", "job", "cls", "requested_gpus", "done_fraction", "oom_failures", "restarts", "plan",
                 "placement", "run_start_s", "run_end_s", "first_start_s", "finish_s", "state", "token",
                 "gpu_seconds", "wasted_gpu_seconds", "startup_s", "oom_memory_bytes")

    def __init__(self, idx: int, job: LLMJob, cls: int):
        self.idx = idx
        self.job = job
        self.cls = cls  # row of the jobs x GPU-types matrix: the job's (model, training) class
        self.requested_gpus = job.trace_gpus  # the user's count; doubled after each out-of-memory failure
        self.done_fraction = 0.0  # share of the token budget already trained
        self.oom_failures = 0
        self.restarts = 0  # preemptions that were followed by a new start
        self.plan: Plan | None = None  # current plan while running
        self.placement: Placement | None = None
        self.run_start_s = 0.0
        # predicted end of the current run (performance model; what a real scheduler knows of a running job)
        self.run_end_s = 0.0
        self.first_start_s: float | None = None
        self.finish_s: float | None = None
        self.state = "future"  # future -> queued -> running -> (queued ->) done | gave_up (OOM retries) | rejected
        self.token = 0  # bumped on each start, so stale completion events are ignored
        self.gpu_seconds: dict[str, float] = {}
        self.wasted_gpu_seconds = 0.0  # GPU time of runs that ended in out-of-memory
        self.startup_s = 0.0  # start-up / restore time of the current run
        # smallest predicted per-GPU memory of a plan that crashed out of memory (None: none did); planners only
        # try plans predicted to need less (SimOptions.oom_truth)
        self.oom_memory_bytes: int | None = None

    def done_share_at(self, now_s: float) -> float:
        """Share of the true token budget trained by now_s: the checkpointed share, plus a running job's training
        since its restart ended (what a scheduler reads off the job's step counter)."""
        if self.state != "running":
            return self.done_fraction
        worked = max(0.0, now_s - self.run_start_s - self.startup_s)
        return min(self.done_fraction + worked / self.plan.time_to_train_s, 1.0)

    def believed_left_share(self, done_fraction: float) -> float:
        """Share of the true token budget a size-aware policy believes is left once `done_fraction` of it is
        trained: 1 - done_fraction, or with size noise (`workload.with_size_noise`) believed / true tokens less what
        was trained, never below 0 (an under-estimated job looks done)."""
        if self.job.believed_tokens is None:
            return 1.0 - done_fraction
        return max(self.job.believed_tokens / self.job.tokens - done_fraction, 0.0)

    def believed_end_s(self) -> float:
        """The current run's end as a size-aware policy predicts it: `run_end_s`, or with size noise its training
        time (less the start-up) scaled by the believed over the true share left at its start."""
        if self.job.believed_tokens is None:
            return self.run_end_s
        train_s = self.run_end_s - self.run_start_s - self.startup_s
        true_left = 1.0 - self.done_fraction
        scale = self.believed_left_share(self.done_fraction) / true_left if true_left > 0 else 0.0
        return self.run_start_s + self.startup_s + train_s * scale

    def attained_gpu_s(self, now_s: float) -> float:
        """GPU-seconds of service received so far (Tiresias's attained service), the current run included."""
        done = sum(self.gpu_seconds.values())
        if self.state == "running":
            done += self.plan.num_gpus * (now_s - self.run_start_s)
        return done


@dataclass(frozen=True)
class SchedulerView:
    """What a policy may read at one decision point."""

    now_s: float
    index: ClusterIndex
    free: np.ndarray  # free GPUs per node (read-only array)
    free_by_type: tuple[int, ...]  # free GPUs per type, in index.type_names order
    queue: Sequence[int]  # waiting jobs, in queue order (arrival, or resubmission for failed/preempted jobs)
    running: Sequence[int]  # running jobs (jobs[j].run_end_s: their predicted end, from the performance model)
    jobs: Sequence[JobStatus]  # every job's record (read only)
    release_epoch: int  # bumped whenever GPUs are released: a job that did not fit cannot fit until it changes


@dataclass(frozen=True)
class PolicyContext:
    """Everything a policy may precompute from, fixed for one run."""

    cluster: Cluster
    index: ClusterIndex
    workload: Workload
    table: PlanTable  # the jobs x GPU-types matrix (best split per (class, type, count))
    estimator: Any
    options: Any  # simulate.SimOptions: the simulator's knobs (each policy's own: SimOptions.options_for)

    @property
    def classes(self) -> dict:
        return job_classes(self.workload.jobs)


class Policy(ABC):
    """Base class. A policy is one module (`policies/<name>.py`): the class sets `name`, its `Options` (a frozen
    dataclass of its own knobs, defaults documented there), `colour` and `note` (what the pages show), its round
    engine version `round_allocator` (or None and `no_round_engine`, saying why), maybe `round_s`, and implements
    `decide`. The simulator's own knobs (`simulate.SimOptions`: backfill window, restart and OOM models, safety
    margin, estimator) are read from `ctx.options`; the policy's own from `self.options`."""

    name: ClassVar[str] = "base"
    Options: ClassVar[type] = NoOptions  # the policy's knobs: a frozen dataclass, every field with its default
    colour: ClassVar[str | None] = None  # its fixed colour on every chart (`policies.colour`)
    note: ClassVar[str] = ""  # one plain-language paragraph: what it does, what it knows (`policies.note`)
    # the sia-apps job model's version (`rounds.simulate_rounds`): a callable (layouts, **options) -> allocator;
    # None: there is none, and `no_round_engine` says why
    round_allocator: ClassVar[Any] = None
    no_round_engine: ClassVar[str] = ""
    round_s: float | None = None
    event_engine: ClassVar[bool] = True  # False: the policy runs on the round engine only (its round_allocator)

    def __init__(self, ctx: PolicyContext, options: Any = None):
        """`options`: this policy's `Options`; None = `ctx.options.options_for(...)` (its defaults, with the
        overrides `SimOptions.policy_options` gives for its name)."""
        self.ctx = ctx
        self.options = options if options is not None else ctx.options.options_for(type(self))

    @classmethod
    def default_options(cls) -> Any:
        """The policy's knobs when nothing overrides them: `cls.Options()` (a policy may derive them otherwise)."""
        return cls.Options()

    @abstractmethod
    def decide(self, view: SchedulerView) -> list[Decision]:
        """Read the view, return decisions; never mutate anything."""

    def stats(self) -> dict[str, float]:
        """Policy-specific figures for the result (e.g. ILP solve times)."""
        return {}

    def next_wake_s(self, view: SchedulerView) -> float | None:
        """An event-driven policy may ask to be called again at this time even if nothing arrives or ends (e.g.
        when a running job's priority will change); None = only at arrivals and releases. Read-only, like decide."""
        return None


class ReadOnlyList(Sequence):
    """A list seen through a read-only window (no copy)."""

    __slots__ = ("_data",)

    def __init__(self, data):
        self._data = data

    def __getitem__(self, i):
        return self._data[i]

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):
        return iter(self._data)


# --- the jobs x GPU-types matrix ------------------------------------------------------------------------------------
def allowed_sizes(capacity: int, max_gpus: int) -> list[int]:
    """Allocation sizes a round-based policy chooses from: powers of two up to the type's capacity and max_gpus.

    >>> allowed_sizes(64, 32)
    [1, 2, 4, 8, 16, 32]
    """
    out, n = [], 1
    while n <= min(capacity, max_gpus):
        out.append(n)
        n *= 2
    return out


@dataclass(frozen=True)
class ThroughputMatrix:
    """tokens/s of each job class on each (GPU type, size) option; 0 where nothing fits. Shape: classes x options."""

    options: tuple[tuple[int, int], ...]  # (type position, GPU count)
    tokens_per_s: np.ndarray  # float, classes x options
    plans: tuple[tuple[Plan | None, ...], ...]  # the best plan behind each cell (None where 0)


def throughput_matrix(ctx: PolicyContext, class_keys: Sequence[tuple[str, Any]], max_gpus: int,
                      safety_margin: float) -> ThroughputMatrix:
    """Build the matrix rows for these (model, training) classes from the shared plan table."""
    from frenzy_core.models import ZOO

    cap = ctx.index.capacity_by_type()
    options: list[tuple[int, int]] = []
    for t in range(len(ctx.index.type_names)):
        options += [(t, s) for s in allowed_sizes(int(cap[t]), max_gpus)]
    x = np.zeros((len(class_keys), len(options)))
    plans = []
    for r, (model_name, training) in enumerate(class_keys):
        row = []
        for c, (t, s) in enumerate(options):
            p = ctx.table.best(ZOO[model_name], training, ctx.index.type_names[t], s, safety_margin=safety_margin,
                               tune_micro_batch=True)
            row.append(p)
            x[r, c] = p.tokens_per_s if p is not None else 0.0
        plans.append(tuple(row))
    return ThroughputMatrix(options=tuple(options), tokens_per_s=x, plans=tuple(plans))


def capacity_constraints(options: Sequence[tuple[int, int]], n_jobs: int, capacity: Sequence[int]):
    """Rows "sum of GPUs given out of type g <= capacity[g]" over x[job, option] flattened job-major.

    Returns (A, upper) for scipy.optimize.LinearConstraint; the one helper every matrix-based policy shares.
    """
    n_opt = len(options)
    rows, cols, vals = [], [], []
    for j in range(n_jobs):
        for o, (t, s) in enumerate(options):
            rows.append(t)
            cols.append(j * n_opt + o)
            vals.append(s)
    a = sparse.csr_array((vals, (rows, cols)), shape=(len(capacity), n_jobs * n_opt))
    return a, np.asarray(capacity, dtype=float)


def one_option_per_job(n_jobs: int, n_opt: int):
    """Rows "each job takes at most one option" over the same flattened x."""
    rows = np.repeat(np.arange(n_jobs), n_opt)
    cols = np.arange(n_jobs * n_opt)
    return sparse.csr_array((np.ones(n_jobs * n_opt), (rows, cols)), shape=(n_jobs, n_jobs * n_opt)), np.ones(n_jobs)


def class_key(job: LLMJob) -> tuple[str, Any]:
    return (job.model, job.training)

