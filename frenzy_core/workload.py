"""From trace jobs to LLM training jobs, and the per-(job, GPU type, GPU count) table that the policies share.

Traces (Philly, Helios, Sia workloads) give arrival, GPU count and duration but no model. `map_trace` gives each job
a zoo model and a token budget such that, on its original allocation (the trace's GPU count on the trace's GPU type,
or the cluster's reference type when the trace has none), the performance model says it runs for exactly the trace's
duration. The mapping (docs/simulation.md):

- model by the trace's GPU count, drawn per job by seed from a bucket (`MODEL_BUCKETS`): 1 GPU -> gpt2 or
  gpt2-medium; 2-4 -> gpt2-large or gpt2-xl; 5-16 -> llama-2-7b or mistral-7b; 17-63 -> llama-2-13b or
  llama-3.1-8b; 64+ -> llama-2-70b or llama-2-13b;
- the model must fit the original allocation in memory on the original type (its best split of that GPU count, no
  safety margin), and also min(count, GPUs of that type in the cluster), so every job is runnable as the user ran it
  and a baseline only runs out of memory when it puts the job on a smaller GPU. Where a *drawn* model does not fit,
  the next smaller model in `FALLBACK_ORDER` that does is taken and listed in `Workload.substitutions` (counted in
  `Workload.fallbacks`, the simulator's `model_fallbacks`); the drawn model is the mapping's guess, not the user's.
  A model the trace *names* is never replaced: a job whose named model does not fit, or where no zoo model fits at
  all, is left out and listed in `Workload.rejected_no_fit` with its reason. A trace where no job fits is an error;
- one training setup per model (`default_training`): bf16 with fp32 master weights, AdamW, flash attention,
  sequence length min(2048, the model's context), micro-batch 1, global batch lcm(384, GPU count) (384 is divisible
  by every power-of-two d up to 128 and by 3; the lcm makes any count, e.g. Sia's 10 or 14 replicas, splittable);
- tokens = duration_s x tokens/s of the fastest split of the original count that fits; a trace that names its own
  model and tokens (native traces) keeps them.

Step times are cached per (model, GPU type, split) inside one call, so the 82k-job Philly trace maps in well under a
second. The seed only changes the model drawn inside a bucket.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache

import numpy as np

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.gpus import GPUType
from frenzy_core.limits import MAX_SIZE_NOISE_SIGMA, divisors, short_repr
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.plans import (
    SPEED_RTOL,
    VP_TOLERANCE,
    Plan,
    context_parallel_sizes,
    ep_allowed,
    expert_parallel_sizes,
    interleaving_allowed,
    pipeline_layouts,
)
from frenzy_core.training import Parallelism, TrainingSpec

# (lowest GPU count of the bucket, candidate models); a job takes the last bucket whose lower bound it reaches.
MODEL_BUCKETS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, ("gpt2", "gpt2-medium")),
    (2, ("gpt2-large", "gpt2-xl")),
    (5, ("llama-2-7b", "mistral-7b")),
    (17, ("llama-2-13b", "llama-3.1-8b")),
    (64, ("llama-2-70b", "llama-2-13b")),
)
# Largest first: where a drawn model does not fit its original allocation, walk down this list.
FALLBACK_ORDER: tuple[str, ...] = ("llama-2-70b", "llama-2-13b", "llama-3.1-8b", "mistral-7b", "llama-2-7b",
                                   "gpt2-xl", "gpt2-large", "gpt2-medium", "gpt2")
GLOBAL_BATCH = 384  # samples per step: 2^7 x 3, so d = 1..128 and 3, 6, 12, 24, 48, 96 all divide it
MAX_SEQ_LEN = 2048


def default_training(model: ModelSpec, num_gpus: int = 1) -> TrainingSpec:
    """The training setup the mapping gives a job of this model and trace GPU count (see the module docstring).

    >>> default_training(ZOO["gpt2"], 10).global_batch, default_training(ZOO["gpt2"], 8).global_batch
    (1920, 384)
    """
    return TrainingSpec(seq_len=min(MAX_SEQ_LEN, model.max_positions), global_batch=math.lcm(GLOBAL_BATCH, num_gpus),
                        micro_batch=1, precision="bf16-master", optimizer="adamw", attention="flash")


@dataclass(frozen=True)
class LLMJob:
    """One trace job as an LLM training job: what to train, how much, and what the trace asked for."""

    job_id: str
    arrival_s: float  # from the trace
    model: str  # zoo name
    training: TrainingSpec  # shapes of one step; the same for every job of a model
    tokens: float  # training tokens: the job is done when it has processed these
    trace_gpus: int  # the user's GPU count (fcfs and sia start from it; frenzy ignores it)
    trace_duration_s: float  # the trace's run time on the original allocation
    original_gpu_type: str  # the type the token budget was calibrated on
    # the token budget a size-aware policy believes (frenzy-srpt, frenzy-eft, re-planning); None = the true one.
    # Only `with_size_noise` sets it: the run itself always trains `tokens`
    believed_tokens: float | None = None

    @property
    def spec(self) -> ModelSpec:
        return ZOO[self.model]

    @property
    def known_tokens(self) -> float:
        """The job size the policies may use: the believed budget when one was drawn, else the true one."""
        return self.tokens if self.believed_tokens is None else self.believed_tokens


@dataclass(frozen=True)
class Substitution:
    """A drawn model that did not fit its job's allocation, and the smaller model the mapping took instead."""

    job_id: str
    drawn: str  # drawn from the job's bucket (MODEL_BUCKETS): the mapping's guess, never the user's choice
    used: str  # the largest smaller model of FALLBACK_ORDER that fits
    reason: str  # e.g. "llama-2-7b does not fit 5 x T4; took gpt2-xl, the largest smaller model that fits"


@dataclass(frozen=True)
class Rejection:
    """A trace job left out of the workload because no model it may have fits its GPUs."""

    job_id: str
    source_row: int  # the job's row in its trace file (0 when it came from no file)
    model: str | None  # the model the trace named; None when it named none and no zoo model fits
    gpu_type: str  # the type it was mapped on (its trace type, or the cluster's reference type)
    num_gpus: int  # the trace's GPU count
    reason: str  # "<kind>: <detail>; <fix>", the kind being one of REJECTION_KINDS


REJECTION_KINDS = ("model named by the trace does not fit", "no zoo model fits")


@dataclass(frozen=True)
class Workload:
    """A mapped trace: LLM jobs sorted by arrival, with how they were mapped."""

    jobs: tuple[LLMJob, ...]
    source: str
    seed: int
    reference_gpu: str
    # jobs whose *drawn* model did not fit and took a smaller one (= len(substitutions)); the simulator reports it
    # as `model_fallbacks`. A model the trace names is never replaced: such a job is in rejected_no_fit instead.
    fallbacks: int = 0
    oversized: int = 0  # jobs in `jobs` asking for more GPUs of their type than the cluster has: baselines cap them
    substitutions: tuple[Substitution, ...] = ()  # each drawn model replaced, and why
    rejected_no_fit: tuple[Rejection, ...] = ()  # trace jobs left out: no model they may have fits; each with why

    def rejected_reasons(self) -> dict[str, int]:
        """How many jobs were rejected for each kind of reason (`REJECTION_KINDS`).

        >>> Workload((), "t", 0, "T4", rejected_no_fit=(Rejection("a", 3, "llama-2-70b", "T4", 4,
        ...          "model named by the trace does not fit: ..."),)).rejected_reasons()
        {'model named by the trace does not fit': 1}
        """
        return dict(Counter(r.reason.split(":")[0] for r in self.rejected_no_fit))


# --- estimating memory and speed ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeShape:
    """What the performance model needs to know about the nodes of one GPU type."""

    gpus_per_node: int
    intra_link_gbyte_s: float
    network_gbit_s: float


def node_shape(cluster: Cluster, gpu_type: str) -> NodeShape:
    """The node rule `plans.rank_plans` uses, from the cluster's per-type summary (one place for it): the largest node
    of the type bounds tensor parallelism, its slowest intra-node link and network price the communication."""
    s = cluster.type_summary.get(gpu_type)
    if s is None:
        g = cluster.gpu(gpu_type)
        return NodeShape(8, g.intra_link_gbyte_s, 100.0)
    return NodeShape(s.max_gpus_per_node, s.min_intra_link_gbyte_s, s.min_network_gbit_s)


# The simulators ask the same (model, training, split) again and again: per run (each PlanTable caches), but also
# across runs (seeds, policies, sweeps, what-if candidates), so the two scalar predictors are memoised for the
# process. Both are pure functions of frozen, hashable values; the bound keeps the memo to a few tens of MB.
ESTIMATE_MEMO_ENTRIES = 1 << 15


@lru_cache(maxsize=ESTIMATE_MEMO_ENTRIES)
def _memory_bytes(model: ModelSpec, training: TrainingSpec, par: Parallelism, method: str) -> int:
    from frenzy_core.memory import predict_memory

    return int(predict_memory(model, training, par, method=method).total_bytes)


@lru_cache(maxsize=ESTIMATE_MEMO_ENTRIES)
def _step_time_s(model: ModelSpec, training: TrainingSpec, par: Parallelism, gpu: GPUType, shape: NodeShape) -> float:
    from frenzy_core.perf import step_time

    return step_time(model, training, par, gpu, intra_link_gbyte_s=shape.intra_link_gbyte_s,
                     network_gbit_s=shape.network_gbit_s, gpus_per_node=shape.gpus_per_node).step_time_s


class DefaultEstimator:
    """Memory from `memory.predict_memory`, speed from `perf.step_time` (both memoised for the process:
    `_memory_bytes`, `_step_time_s`), ranked plans from `plans.rank_plans`."""

    def __init__(self, method: str = "detailed"):
        self.method = method

    def memory_bytes(self, model: ModelSpec, training: TrainingSpec, par: Parallelism) -> int:
        return _memory_bytes(model, training, par, self.method)

    def step_time_s(self, model: ModelSpec, training: TrainingSpec, par: Parallelism, gpu: GPUType,
                    shape: NodeShape) -> float:
        return _step_time_s(model, training, par, gpu, shape)

    def rank(self, model: ModelSpec, training: TrainingSpec, cluster: Cluster, objective: str,
             safety_margin: float) -> tuple[Plan, ...]:
        from frenzy_core.plans import rank_plans

        return tuple(rank_plans(model, training, cluster, objective=objective, tokens=1e9, method=self.method,
                                safety_margin=safety_margin).plans)


class AnalyticEstimator:
    """A closed-form stand-in for tests and quick what-ifs (not the planner's model).

    memory = 18 bytes/param x params / (t x p) + 34 x s x h x layers / (t x p) bytes of activations (Korthikanti et
    al. 2022, Table 2, micro-batch 1, no recomputation); step = 6 x params x tokens / (N x peak x MFU), plus a
    5% slowdown per doubling of N for communication.
    """

    def memory_bytes(self, model: ModelSpec, training: TrainingSpec, par: Parallelism) -> int:
        shard = par.tp * par.pp
        states = 18 * model.parameter_count() / shard
        acts = 34 * training.seq_len * model.hidden_size * model.num_layers * training.micro_batch / shard
        return int(states + acts)

    def step_time_s(self, model: ModelSpec, training: TrainingSpec, par: Parallelism, gpu: GPUType,
                    shape: NodeShape) -> float:
        n = par.num_gpus
        flops = 6 * model.parameter_count() * training.tokens_per_step()
        return flops / (n * gpu.bf16_tflops * 1e12 * gpu.mfu) * (1 + 0.05 * math.log2(n))

    def rank(self, model: ModelSpec, training: TrainingSpec, cluster: Cluster, objective: str,
             safety_margin: float) -> tuple[Plan, ...]:
        table = PlanTable(self, cluster)
        plans = []
        for g in cluster.gpu_types_present():
            cap = cluster.gpus_by_type()[g.name]
            n = 1
            while n <= cap:
                p = table.best(model, training, g.name, n, safety_margin=safety_margin)
                if p is not None:
                    plans.append(p)
                n *= 2
        return tuple(sorted(plans, key=lambda p: _objective_key(p, objective)))


def _objective_key(p: Plan, objective: str):
    if objective == "time":
        return (p.time_to_train_s, p.gpu_hours, p.gpu_type)
    if objective == "cost":
        return (p.cost_usd, p.time_to_train_s, p.gpu_type)
    if objective == "gpus":
        return (p.num_gpus, p.time_to_train_s, p.gpu_type)
    return (p.gpu_hours, p.time_to_train_s, p.gpu_type)  # gpu-hours


def scale_plan(plan: Plan, tokens: float) -> Plan:
    """The same plan for a different token budget: time, GPU-hours and cost scale with tokens."""
    t = tokens / plan.tokens_per_s
    gh = plan.num_gpus * t / 3600.0
    price = plan.cost_usd / plan.gpu_hours if plan.gpu_hours > 0 else 0.0
    # What dataclasses.replace does, without re-running the frozen __init__ field by field: this runs once per
    # started job, inside the scheduler's decision, and replace() was a quarter of a HAS decision's time.
    out = object.__new__(Plan)
    out.__dict__.update(plan.__dict__, time_to_train_s=t, gpu_hours=gh, cost_usd=gh * price)
    return out


@cache
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(divisors(n))


def splits(model: ModelSpec, training: TrainingSpec, count: int, gpus_per_node: int) -> list[Parallelism]:
    """Every valid d x t x p x cp = count: t divides the heads and fits a node, d x b divides B, cp is one of
    `plans.context_parallel_sizes`; the pipeline layouts (p, vp, first, last) are `plans.pipeline_layouts`' (p
    dividing the layers, or Megatron's uneven first/last stages); for an MoE model each ep of
    `plans.expert_parallel_sizes` that divides d x cp; as rank_plans enumerates them. Within one (d, t, p, cp, ep)
    the layouts come evenest first, vp ascending (the order the tie-break prefers)."""
    eps = [int(e) for e in expert_parallel_sizes(model, training)]
    cps = [int(c) for c in context_parallel_sizes(training, count)]
    layouts = [tuple(int(x) for x in row[:4]) for row in pipeline_layouts(model, training, count)]
    out = []
    for cp in (c for c in cps if count % c == 0):
        for tp in _divisors(count // cp):
            if tp > gpus_per_node or model.num_heads % tp or model.kv_heads % tp:
                continue
            rest = count // cp // tp
            for pp, vp, first, last in layouts:
                if rest % pp or training.global_batch % (training.micro_batch * (rest // pp)):
                    continue
                dp = rest // pp
                m = training.global_batch // (training.micro_batch * dp)
                if first or last:  # uneven rows satisfy the layer rule already; interleaving still needs m % p
                    allowed = vp == 1 or m % pp == 0
                else:
                    allowed = interleaving_allowed(model.num_layers, pp, vp, m)
                if not allowed:
                    continue
                out += [Parallelism(dp=dp, tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, first_stage_layers=first,
                                    last_stage_layers=last)
                        for ep in eps if ep_allowed(model, training, dp, tp, cp, ep)]
    return out


def _faster_or_lighter(p: Plan, best: Plan) -> bool:
    """rank_plans' tie-break (plans.SPEED_RTOL): faster wins; within a relative SPEED_RTOL of each other the step
    times tie and the plan with more memory headroom (the smaller memory) wins, then the smaller micro-batch."""
    if p.step_time_s < best.step_time_s * (1.0 - SPEED_RTOL):
        return True
    if p.step_time_s > best.step_time_s * (1.0 + SPEED_RTOL):
        return False
    return (p.memory_bytes, p.micro_batch) < (best.memory_bytes, best.micro_batch)


@dataclass
class PlanTable:
    """The jobs x GPU-types matrix, lazily: best split of (model, training) on `count` GPUs of a type.

    One table per call or per simulation run (it caches, but its answers depend only on its inputs). `best` gives
    the fastest split that fits `capacity x (1 - safety_margin)`; `pure_dp` the d = count split whatever its memory
    (what a baseline runs when nothing fits, to out-of-memory). Plans are for 1e9 tokens; rescale with scale_plan.
    """

    estimator: object
    cluster: Cluster
    _eval: dict = field(default_factory=dict)
    _best: dict = field(default_factory=dict)
    _shapes: dict = field(default_factory=dict)

    def shape(self, gpu_type: str) -> NodeShape:
        if gpu_type not in self._shapes:
            self._shapes[gpu_type] = node_shape(self.cluster, gpu_type)
        return self._shapes[gpu_type]

    def evaluate(self, model: ModelSpec, training: TrainingSpec, gpu_type: str, par: Parallelism) -> Plan:
        key = (model.name, training, gpu_type, par)
        got = self._eval.get(key)
        if got is None:
            gpu = self.cluster.gpu(gpu_type)
            mem = self.estimator.memory_bytes(model, training, par)
            step = self.estimator.step_time_s(model, training, par, gpu, self.shape(gpu_type))
            tokens_per_s = training.tokens_per_step() / step
            t = 1e9 / tokens_per_s
            gh = par.num_gpus * t / 3600.0
            got = Plan(gpu_type=gpu_type, dp=par.dp, tp=par.tp, pp=par.pp, ep=par.ep, cp=par.cp, vp=par.vp,
                       first_stage_layers=par.first_stage_layers, last_stage_layers=par.last_stage_layers,
                       num_gpus=par.num_gpus,
                       micro_batch=training.micro_batch,
                       grad_accum=training.global_batch // (training.micro_batch * par.dp), memory_bytes=mem,
                       headroom_bytes=gpu.memory_bytes - mem, gpu_memory_bytes=gpu.memory_bytes, step_time_s=step,
                       tokens_per_s=tokens_per_s, time_to_train_s=t, gpu_hours=gh,
                       cost_usd=gh * gpu.price_per_hour_usd)
            self._eval[key] = got
        return got

    def best(self, model: ModelSpec, training: TrainingSpec, gpu_type: str, count: int, *,
             safety_margin: float = 0.0, tune_micro_batch: bool = False, placeable: bool = True) -> Plan | None:
        """Fastest fitting split of exactly `count` GPUs; tune_micro_batch also tries micro-batches 2, 4, ... 64.

        The splits, the tensor-parallel rule and the links are `plans.rank_plans`'s (tested against it).
        placeable=False drops the rule that each t-group sits in one node of this cluster: for a count the trace's
        own cluster ran, which may exceed this one (`map_trace`)."""
        key = (model.name, training, gpu_type, count, safety_margin, tune_micro_batch, placeable)
        if key in self._best:
            return self._best[key]
        cap = self.cluster.gpu(gpu_type).memory_bytes * (1.0 - safety_margin)
        summary = self.cluster.type_summary.get(gpu_type)
        best = None
        micro = [training.micro_batch]
        if tune_micro_batch:
            micro += [b for b in (2, 4, 8, 16, 32, 64) if b > training.micro_batch and training.global_batch % b == 0]
        for b in micro:
            tr = training if b == training.micro_batch else training.model_copy(update={"micro_batch": b})
            fitting: dict[tuple, list[Plan]] = {}  # by split without vp
            for par in splits(model, tr, count, self.shape(gpu_type).gpus_per_node):
                if placeable and summary is not None and count > summary.capacity_for_tp(par.tp):
                    continue  # as in rank_plans: each tensor-parallel group inside one node
                p = self.evaluate(model, tr, gpu_type, par)
                if p.memory_bytes <= cap:
                    fitting.setdefault((p.dp, p.tp, p.pp, p.cp, p.ep), []).append(p)
            if not fitting:
                break  # a larger micro-batch only needs more memory
            for group in fitting.values():
                # as in rank_plans (plans.VP_TOLERANCE): the fewest interleaved chunks within it of the fastest
                # and of those the evenest layout (splits lists them evenest first; min keeps the first of equals)
                fastest = min(q.step_time_s for q in group)
                p = min((q for q in group if q.step_time_s <= fastest * (1.0 + VP_TOLERANCE)), key=lambda q: q.vp)
                if best is None or _faster_or_lighter(p, best):
                    best = p
        self._best[key] = best
        return best

    def pure_dp(self, model: ModelSpec, training: TrainingSpec, gpu_type: str, count: int) -> Plan | None:
        """d = count (or the largest d <= count that divides the batch, the rest as pipeline stages if valid)."""
        for par in splits(model, training, count, self.shape(gpu_type).gpus_per_node):
            if par.tp == 1 and par.pp == 1:
                return self.evaluate(model, training, gpu_type, par)
        cands = splits(model, training, count, self.shape(gpu_type).gpus_per_node)
        if not cands:
            return None
        return self.evaluate(model, training, gpu_type, max(cands, key=lambda q: (q.dp, -q.tp)))


# --- the mapping ----------------------------------------------------------------------------------------------------
def reference_gpu(cluster: Cluster) -> str:
    """The cluster type with the most GPUs (ties: more memory, then first seen): where traces are calibrated.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> reference_gpu(parse_cluster_yaml("nodes: [{gpu_type: T4, num_gpus: 4}, {gpu_type: A10, num_gpus: 4}]"))
    'A10'
    """
    counts = cluster.gpus_by_type()
    types = cluster.gpu_types_present()
    return max(types, key=lambda g: (counts[g.name], g.memory_bytes, -types.index(g))).name


@lru_cache(maxsize=4096)
def model_candidates(num_gpus: int) -> tuple[str, ...]:
    """The bucket of models a job of this GPU count draws from.

    >>> model_candidates(1), model_candidates(8)
    (('gpt2', 'gpt2-medium'), ('llama-2-7b', 'mistral-7b'))
    """
    chosen = MODEL_BUCKETS[0][1]
    for low, models in MODEL_BUCKETS:
        if num_gpus >= low:
            chosen = models
    return chosen


def _resolve(order, gpu_type: str, count: int, runnable: int, fit) -> tuple[str | None, Plan | None]:
    """The first model of `order` that has a plan on the trace's `count` GPUs and on the `runnable` ones there."""
    for m in order:
        p = fit(m, gpu_type, count, count)
        if p is not None and fit(m, gpu_type, runnable, count) is not None:
            return m, p
    return None, None


def _where(count_does_not_fit: bool, gpu_type: str, count: int, runnable: int) -> str:
    return (f"{count} x {gpu_type} (the trace's allocation)" if count_does_not_fit
            else f"{runnable} x {gpu_type} (all this cluster has of the {count} GPUs the trace asked for)")


def map_trace(trace, cluster: Cluster, seed: int = 0, *, estimator=None, reference: str | None = None,
              table: PlanTable | None = None) -> Workload:
    """Map a `traces.Trace` (or any sequence of TraceJob) to LLM jobs; same inputs and seed, same workload.

    A job whose model cannot fit (a named one, or every zoo model for a drawn one) is left out and listed in
    `Workload.rejected_no_fit`; a drawn model replaced by a smaller one is listed in `Workload.substitutions`.
    Raises SpecError when the trace names a model outside the zoo, or when no job at all fits the cluster.
    """
    est = estimator if estimator is not None else DefaultEstimator()
    table = table if table is not None else PlanTable(est, cluster)
    jobs_in: Sequence = trace.jobs if hasattr(trace, "jobs") else tuple(trace)
    ref = reference or reference_gpu(cluster)
    capacity = cluster.gpus_by_type()
    rng = np.random.default_rng(seed)
    draws = rng.random(len(jobs_in))
    fit_cache: dict[tuple[str, str, int], Plan | None] = {}
    spec_cache: dict[tuple[str, int], TrainingSpec] = {}  # one validated (frozen) TrainingSpec per model and count
    resolved: dict[tuple, tuple[str | None, Plan | None]] = {}  # (named, drawn, type, count) -> (model, plan)

    def training_of(m: str, count: int) -> TrainingSpec:
        if (m, count) not in spec_cache:
            spec_cache[m, count] = default_training(ZOO[m], count)
        return spec_cache[m, count]

    def fit(m: str, gpu_type: str, n: int, count: int) -> Plan | None:
        """Best plan of model `m` on `n` GPUs of the type (`count` = the trace's, which sets the batch)."""
        key = (m, gpu_type, n) if n == count else (m, gpu_type, n, count)
        if key not in fit_cache:
            model = ZOO[m]
            fit_cache[key] = table.best(model, training_of(m, count), gpu_type, n, placeable=n != count)
        return fit_cache[key]

    out: list[LLMJob] = []
    substitutions: list[Substitution] = []
    rejected: list[Rejection] = []
    oversized = 0
    for tj, u in zip(jobs_in, draws, strict=True):
        gpu_type = tj.gpu_type if tj.gpu_type in capacity else ref
        count = int(tj.num_gpus)
        runnable = min(count, capacity[gpu_type])  # what a baseline can give it here (requests are capped)
        named = getattr(tj, "model", None)
        if named is not None and named not in ZOO:  # a named model is never silently replaced by a drawn one
            raise SpecError("model", f"job {short_repr(tj.job_id)} (row {tj.source_row}) names {short_repr(named)}, "
                            f"which is not in the model zoo; use one of {', '.join(ZOO)} or leave it empty")
        if named is not None:
            first = named  # the user's model: it fits as named or the job is rejected
        else:
            cands = model_candidates(count)
            first = cands[min(int(u * len(cands)), len(cands) - 1)]
        key = (named, first, gpu_type, count)
        if key not in resolved:  # every job of a (model, type, count) class resolves alike: once per class
            order = (first,) if named is not None else (first,) + (
                FALLBACK_ORDER[FALLBACK_ORDER.index(first) + 1:] if first in FALLBACK_ORDER else FALLBACK_ORDER)
            resolved[key] = _resolve(order, gpu_type, count, runnable, fit)
        name, plan = resolved[key]
        if name is None:
            where = _where(fit(first, gpu_type, count, count) is None, gpu_type, count, runnable)
            kind, fix = (REJECTION_KINDS[0], "name a smaller model, or give the cluster larger GPUs") if named \
                else (REJECTION_KINDS[1], "add GPUs with more memory")
            what = f"{short_repr(named)} needs more memory than" if named else \
                f"not even {FALLBACK_ORDER[-1]} (drawn: {first}) fits the memory of"
            rejected.append(Rejection(str(tj.job_id), int(getattr(tj, "source_row", 0) or 0), named, gpu_type, count,
                                      f"{kind}: {what} {where}; {fix}"))
            continue
        if name != first:
            where = _where(fit(first, gpu_type, count, count) is None, gpu_type, count, runnable)
            substitutions.append(Substitution(str(tj.job_id), first, name, f"{first} does not fit {where}; took "
                                              f"{name}, the largest smaller model that fits"))
        oversized += count > capacity[gpu_type]
        tokens = getattr(tj, "tokens", None) or max(tj.duration_s, 1.0) * plan.tokens_per_s
        out.append(LLMJob(job_id=str(tj.job_id), arrival_s=float(tj.arrival_s), model=name,
                          training=training_of(name, count), tokens=float(tokens), trace_gpus=count,
                          trace_duration_s=float(tj.duration_s), original_gpu_type=gpu_type))
    if rejected and not out:
        shown = "; ".join(f"job {short_repr(r.job_id)} (row {r.source_row}): {r.reason}" for r in rejected[:3])
        raise SpecError("cluster", f"no job of the trace fits this cluster ({len(rejected)} rejected: {shown})")
    out.sort(key=lambda j: j.arrival_s)
    return Workload(jobs=tuple(out), source=getattr(trace, "source", "jobs"), seed=seed, reference_gpu=ref,
                    fallbacks=len(substitutions), oversized=oversized, substitutions=tuple(substitutions),
                    rejected_no_fit=tuple(rejected))


def job_classes(jobs: Iterable[LLMJob]) -> dict[tuple[str, TrainingSpec], int]:
    """Distinct (model, training) pairs, numbered in first-seen order: the rows of the jobs x GPU-types matrix."""
    out: dict[tuple[str, TrainingSpec], int] = {}
    for j in jobs:
        out.setdefault((j.model, j.training), len(out))
    return out


# Size-noise draws come from their own stream: a seed's model mapping is the same with and without noise
SIZE_NOISE_STREAM = 0x51_2E


def with_size_noise(workload: Workload, sigma: float, seed: int) -> Workload:
    """The same workload, with each job's size as a size-aware policy would believe it: believed tokens = tokens x
    exp(sigma x z), z ~ N(0, 1) drawn per job in job order from (seed, SIZE_NOISE_STREAM). A lognormal error with
    median 1, so a job is as likely to be believed twice as long as half as long (user-given run-time estimates are
    off by such factors: Tsafrir et al. 2007, "Backfilling using system-generated predictions rather than user
    runtime estimates", IEEE TPDS 18(6)). sigma = 0 returns the workload unchanged; the runs still train the true
    tokens, so only the decisions change.

    >>> w = Workload(jobs=(LLMJob("a", 0.0, "gpt2", TrainingSpec(), 1e9, 1, 60.0, "T4"),), source="x", seed=0,
    ...              reference_gpu="T4")
    >>> with_size_noise(w, 0.0, 0) is w, with_size_noise(w, 0.5, 0).jobs[0].tokens
    (True, 1000000000.0)
    """
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and 0.0 <= sigma <= MAX_SIZE_NOISE_SIGMA):
        raise SpecError("size_noise", f"must be a number in [0, {MAX_SIZE_NOISE_SIGMA:g}] (the lognormal sigma of "
                                      f"the size error; 0 = exact sizes), got {short_repr(sigma)}")
    if sigma == 0.0:
        return workload
    z = np.random.default_rng([int(seed), SIZE_NOISE_STREAM]).standard_normal(len(workload.jobs))
    jobs = tuple(replace(j, believed_tokens=float(j.tokens * math.exp(sigma * zi)))
                 for j, zi in zip(workload.jobs, z, strict=True))
    return replace(workload, jobs=jobs)
