"""MARP's resource plans: every feasible (GPU type, d, t, p) for a job, ranked by an explicit objective.

The Frenzy paper (arXiv 2412.14479, Sec. IV-A) lists feasible plans "with priorities" but never says how it ranks
them. We rank by a named objective (docs/ranking.md):

- `time` (default): shortest time to train the token budget; ties -> fewer GPUs, then lower cost.
- `gpu-hours`: least GPU-hours (GPUs x time); ties -> shorter time.
- `cost`: lowest cost (GPU-hours x the catalog price of the GPU type); ties -> shorter time.
- `gpus`: fewest GPUs; ties -> shorter time.

Every objective ends with the same deterministic tie-break: GPU type name, then t, then p, then d, then cp
(ascending).

Enumeration (per GPU type present in the cluster): t divides the query heads and the KV heads and t <= the largest
node of that type (tensor parallelism stays inside a node); p divides the layers; d x micro-batch x accumulation =
global batch; cp (ring attention) leaves each rank at least MIN_CP_TOKENS tokens (`context_parallel_sizes`);
d x t x p x cp <= the GPUs of that type; for an MoE model, ep divides the experts and d x cp (`hf`: ep = 1).
vp (interleaved 1F1B) needs p > 1, p x vp dividing the layers and m a multiple of p (`virtual_pipeline_sizes`).
For each (type, d, t, p, cp) we keep the micro-batch, ep and vp with the shortest step (ties -> the larger
micro-batch, then the smaller ep, then the smaller vp), and the plan is feasible when its per-GPU memory fits the
GPU's capacity less a safety margin. Memory and step time are evaluated on numpy arrays, one call per GPU type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.limits import divisors
from frenzy_core.memory import DEFAULT_OVERHEAD, OverheadSpec, predict_memory_totals
from frenzy_core.models import ModelSpec
from frenzy_core.perf import step_time_totals
from frenzy_core.training import Parallelism, TrainingSpec, check_sequence

OBJECTIVES = ("time", "gpu-hours", "cost", "gpus")
DEFAULT_SAFETY_MARGIN = 0.10  # keep 10% of each GPU free: allocator fragmentation beyond the modelled overhead
# The added GPUs of a plan must deliver at least half of their linear share of speed-up over any smaller plan of the
# same GPU type: doubling the GPUs must make it at least 1.5x faster (docs/ranking.md, "Constraints").
DEFAULT_SCALING_FLOOR = 0.5
SECONDS_PER_HOUR = 3600.0
GIB = float(1 << 30)


@dataclass(frozen=True)
class Plan:
    """One way to run a job: a GPU type and a split, with what it costs in memory, time and money."""

    gpu_type: str  # catalog name of the GPU every worker of the plan runs on
    dp: int  # d: data-parallel replicas
    tp: int  # t: tensor-parallel shards (inside one node)
    pp: int  # p: pipeline stages
    num_gpus: int  # d x t x p x cp
    micro_batch: int  # samples per forward/backward on one replica
    grad_accum: int  # micro-batches per optimizer step and replica: global_batch / (micro_batch x d)
    memory_bytes: int  # predicted peak per-GPU memory
    headroom_bytes: int  # GPU capacity x (1 - safety margin) - memory_bytes (>= 0 for a feasible plan)
    gpu_memory_bytes: int  # the GPU's capacity, for packing (HAS places on GPUs with at least this much need)
    step_time_s: float  # predicted seconds per optimizer step
    tokens_per_s: float  # global_batch x seq_len / step_time_s
    time_to_train_s: float  # token budget / tokens_per_s
    gpu_hours: float  # num_gpus x time_to_train_s / 3600
    cost_usd: float  # gpu_hours x the GPU type's price per hour
    ep: int = 1  # expert-parallel ranks (MoE), carved out of d x cp: each holds num_experts / ep experts
    cp: int = 1  # context-parallel ranks: each holds seq_len / cp tokens of every sample (ring attention)
    vp: int = 1  # interleaved 1F1B: layer chunks per pipeline rank (1 = plain 1F1B)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def parallelism(self) -> Parallelism:
        return Parallelism(dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, vp=self.vp, ep=self.ep)

    def label(self) -> str:
        return f"{self.gpu_type} {self.parallelism.label()} ({self.num_gpus} GPU{'s' * (self.num_gpus != 1)})"


_PLAN_FIELDS = [f for f in Plan.__dataclass_fields__]
_INT_FIELDS = {"dp", "tp", "pp", "ep", "cp", "vp", "num_gpus", "micro_batch", "grad_accum", "memory_bytes", "headroom_bytes",
               "gpu_memory_bytes"}


@dataclass(frozen=True, eq=False)
class PlanSet:
    """The ranked feasible plans of one job on one cluster, plus the whole grid for heatmaps.

    `plans` is best first. When it is empty, `explanation` says why (the smallest per-GPU memory any split reaches
    against the largest GPU in the cluster).
    """

    objective: str
    columns: dict[str, np.ndarray]  # feasible plans, ranked, one array per Plan field
    grid_columns: dict[str, np.ndarray]  # every (gpu_type, d, t, p) enumerated, feasible or not (see `grid`)
    explanation: str | None = None  # why there is no plan (None when there are plans)
    min_memory_bytes: int = 0  # smallest per-GPU memory of any enumerated split
    largest_gpu: str = ""  # the GPU type with the most memory in the cluster
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.columns["dp"])

    def plan(self, i: int) -> Plan:
        return Plan(**{k: (int(v[i]) if k in _INT_FIELDS else (str(v[i]) if k == "gpu_type" else float(v[i])))
                       for k, v in self.columns.items()})

    def top(self, k: int) -> list[Plan]:
        return [self.plan(i) for i in range(min(k, len(self)))]

    @cached_property
    def grid(self) -> pd.DataFrame:
        """Every (gpu_type, d, t, p) enumerated, feasible or not, with memory and headroom (for heatmaps)."""
        return pd.DataFrame(self.grid_columns)

    @cached_property
    def plans(self) -> tuple[Plan, ...]:
        return tuple(self.plan(i) for i in range(len(self)))

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns)

    @property
    def dropped(self) -> dict[str, int]:
        """How many memory-feasible plans each constraint removed, e.g. {"scaling_floor": 12, "max_gpus": 0, ...}."""
        return dict(self.extra.get("dropped", {}))

    def best_per_type(self) -> list[Plan]:
        """The best plan of each GPU type under the objective, best type first."""
        seen: dict[str, int] = {}
        for i, name in enumerate(self.columns["gpu_type"].tolist()):
            seen.setdefault(name, i)
        return [self.plan(i) for i in seen.values()]

    @property
    def ranking_text(self) -> str:
        """How the plans were filtered and ordered, in words (for the UI and `frenzy plans`)."""
        keys = ", then ".join(_KEY_WORDS[k][2] for k in _OBJECTIVE_KEYS[self.objective])
        limits = self.extra.get("constraints", {})
        parts = [f"{n} dropped by {_CONSTRAINT_WORDS[k](limits[k])}" for k, n in self.dropped.items()
                 if limits.get(k) not in (None, 0, 0.0)]
        kept = f"{len(self)} plans fit in memory" + (" and pass the constraints" if parts else "")
        return (f"{kept} ({'; '.join(parts)}). " if parts else f"{kept}. ") + (
            f"Ranked by {keys}, then GPU type name, t, p, d, cp (objective: {self.objective}).")

    @property
    def why_top(self) -> str | None:
        """One sentence on why the first plan wins under the objective: the first ranking key that separates it from
        the runner-up, with both values."""
        if not len(self):
            return None
        best = self.plan(0)
        tail = (f"{best.memory_bytes / GIB:.1f} GiB per GPU of {best.gpu_memory_bytes / GIB:.0f} GiB, "
                f"{_duration(best.time_to_train_s)} to train, {best.gpu_hours:,.1f} GPU-hours, ${best.cost_usd:,.2f}")
        if len(self) == 1:
            return f"{best.label()} is the only feasible plan: {tail}."
        runner = self.plan(1)
        keys = _OBJECTIVE_KEYS[self.objective]
        for i, key in enumerate(keys):
            b_val, r_val = getattr(best, key), getattr(runner, key)
            if not np.isclose(b_val, r_val, rtol=1e-9, atol=0):
                words, fmt, _ = _KEY_WORDS[key]
                b_txt, r_txt = fmt(b_val), fmt(r_val)
                if b_txt == r_txt:  # close values: show enough digits to see the difference
                    precise = (lambda v: f"{v / 3600:,.2f} h") if key == "time_to_train_s" else (lambda v: f"{v:.6g}")
                    b_txt, r_txt = precise(b_val), precise(r_val)
                phrase = f"{words} ({b_txt} vs {r_txt})"
                lead = "wins on" if i == 0 else f"ties with the runner-up on {_KEY_WORDS[keys[0]][2]} and wins on"
                return f"{best.label()} {lead} {phrase} over {runner.label()}; {tail}."
        return (f"{best.label()} ties with {runner.label()} on every objective key and wins on the deterministic "
                f"tie-break (GPU type name, then t, p, d, cp); {tail}.")


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# Ranking keys per objective, most significant first (the deterministic tie-break follows them).
_OBJECTIVE_KEYS: dict[str, tuple[str, ...]] = {
    "time": ("time_to_train_s", "num_gpus", "cost_usd"),
    "gpu-hours": ("gpu_hours", "time_to_train_s", "num_gpus"),
    "cost": ("cost_usd", "time_to_train_s", "num_gpus"),
    "gpus": ("num_gpus", "time_to_train_s", "cost_usd"),
}
_KEY_WORDS = {
    "time_to_train_s": ("the shortest time to train", _duration, "time to train"),
    "num_gpus": ("fewer GPUs", lambda v: f"{int(v)}", "GPU count"),
    "cost_usd": ("the lowest cost", lambda v: f"${v:,.2f}", "cost"),
    "gpu_hours": ("the fewest GPU-hours", lambda v: f"{v:,.2f}", "GPU-hours"),
}


def scaling_keep(gpu_type: np.ndarray, num_gpus: np.ndarray, time_s: np.ndarray, floor: float) -> np.ndarray:
    """Mask of the plans that pass the scaling-efficiency floor.

    For a plan P (n GPUs, time T) and every smaller GPU count m of the same type, with T_m the shortest time any plan
    of m GPUs reaches, the marginal scaling efficiency is e = (T_m / T - 1) / (n / m - 1): 1 when the extra GPUs
    speed the run up linearly, 0 when they buy nothing. P is kept when e >= floor for every smaller m (plans of the
    smallest count of their type always are). Applying it twice keeps the same plans.

    >>> scaling_keep(np.array(["H100"] * 3), np.array([8, 16, 32]), np.array([10.0, 6.0, 5.8]), 0.5).tolist()
    [True, True, False]
    """
    keep = np.ones(len(num_gpus), dtype=bool)
    if floor <= 0 or not len(num_gpus):
        return keep
    n_all = np.asarray(num_gpus, dtype=np.float64)
    t_all = np.asarray(time_s, dtype=np.float64)
    types = np.asarray(gpu_type, dtype=object)
    for name in dict.fromkeys(types.tolist()):
        ix = np.flatnonzero(types == name)
        n, t = n_all[ix], t_all[ix]
        counts = np.unique(n)
        best = np.array([t[n == m].min() for m in counts])  # T_m: the fastest plan of each GPU count
        # allowed time against each smaller count m: T <= T_m / (1 + floor x (n / m - 1))
        ratio = n[:, None] / counts[None, :]
        allowed = np.where(ratio > 1, best[None, :] / (1.0 + floor * (ratio - 1.0)), np.inf)
        keep[ix] = t <= allowed.min(axis=1) * (1 + 1e-12)
    return keep


def within_scaling_floor(plans: Sequence[Plan], floor: float = DEFAULT_SCALING_FLOOR) -> tuple[Plan, ...]:
    """The plans (order kept) that pass `scaling_keep` among themselves; HAS packing walks only these."""
    if floor <= 0 or not plans:
        return tuple(plans)
    keep = scaling_keep(np.array([p.gpu_type for p in plans], dtype=object), np.array([p.num_gpus for p in plans]),
                        np.array([p.time_to_train_s for p in plans]), floor)
    return tuple(p for p, k in zip(plans, keep, strict=True) if k)


# Context parallelism is tried while each rank keeps at least this many tokens of a sample: ring attention hides its
# K/V passes behind the attention compute only for long chunks (torchtitan's and Megatron's published CP runs hold
# 8k-32k tokens per rank), and it keeps the grid small for ordinary sequences (2,048-4,096 tokens: cp = 1 only).
MIN_CP_TOKENS = 4096
# Stacks whose context parallelism is ring attention (what memory.py and perf.py model): Megatron-Core
# (--context-parallel-size), torchtitan (context_parallel_degree), and our own decoder. DeepSpeed's Ulysses sequence
# parallelism is a different all-to-all scheme; Hugging Face Trainer has none.
CP_FRAMEWORKS = ("pytorch", "megatron", "fsdp2", "unknown")


def context_parallel_sizes(training: TrainingSpec, max_gpus: int) -> np.ndarray:
    """The cp the planner tries: 1, and every cp <= max_gpus with seq_len a multiple of 2 cp (load-balanced chunks)
    and at least MIN_CP_TOKENS tokens per rank, under a framework with ring attention."""
    s = training.seq_len
    if training.framework not in CP_FRAMEWORKS:
        return np.array([1], dtype=np.int64)
    return np.array([c for c in divisors(s // 2) if c == 1 or (s // c >= MIN_CP_TOKENS and c <= max_gpus)]
                    if s % 2 == 0 else [1], dtype=np.int64)


# Stacks with an interleaved pipeline schedule the exports can launch: Megatron-Core
# (--num-layers-per-virtual-pipeline-stage) and torchtitan (pipeline_parallel_schedule "Interleaved1F1B"); unknown
# covers them. DeepSpeed's pipeline engine and Hugging Face have none, and plain PyTorch (`pytorch`) gets no
# schedule from us to launch it with.
VP_FRAMEWORKS = ("megatron", "fsdp2", "unknown")


def interleaving_allowed(num_layers: int, p, v, m):
    """Where vp = v chunks per rank can run (numpy arrays or ints): v = 1, or p > 1 with p x v dividing the layers and
    the m micro-batches per replica a multiple of p (Megatron's interleaved schedule, schedules.py:
    microbatch_group_size_per_vp_stage = p). m = 0 checks the layers only."""
    return (v == 1) | ((p > 1) & (num_layers % (p * v) == 0) & (m % p == 0))


def titan_experts_fit(num_experts: int, shard, t, c, e):
    """Where torchtitan takes expert degree e x t (parallel_dims.py `_validate` at b5bcd76: it keeps experts whole and
    borrows EP ranks from dp_shard x cp x tp): e x t divides the experts and dp_shard x cp x t, i.e. e divides
    dp_shard x cp."""
    return (num_experts % (e * t) == 0) & ((shard * c) % e == 0)


def virtual_pipeline_sizes(model: ModelSpec, training: TrainingSpec) -> np.ndarray:
    """The vp the planner tries: 1, and under an interleaving stack every divisor of num_layers (rank_plans keeps
    vp > 1 only where p > 1, p x vp divides the layers and the micro-batches m are a multiple of p, as Megatron's
    interleaved schedule requires: schedules.py, microbatch_group_size_per_vp_stage = p)."""
    if training.framework not in VP_FRAMEWORKS:
        return np.array([1], dtype=np.int64)
    return _divisors(model.num_layers)


# Step times closer than this are one answer to the step-time model (its errors are several percent, docs/perf.md):
# among a split's interleavings the planner keeps the fewest chunks within it of the fastest. Without it, vp = l / p
# (one-layer chunks) wins by a fraction of a percent, since per-chunk costs beyond the sends are not modelled.
VP_TOLERANCE = 0.01


def _fewest_chunks_within_tolerance(split: np.ndarray, v: np.ndarray, step: np.ndarray, fits: np.ndarray):
    """A row mask: for each split (rows with the same `split` id: equal but for vp) that fits somewhere, only the
    smallest vp whose step is within VP_TOLERANCE of that split's fastest fitting vp; splits that never fit keep
    every row."""
    order = np.lexsort((v, split))
    key = split[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = key[1:] != key[:-1]
    gid = np.cumsum(start) - 1
    fit_step = np.where(fits, step, np.inf)[order]
    best = np.minimum.reduceat(fit_step, np.flatnonzero(start)) if len(order) else fit_step
    near = np.isfinite(fit_step) & (fit_step <= best[gid] * (1.0 + VP_TOLERANCE))
    rows = np.flatnonzero(near)
    chosen = np.zeros(len(order), dtype=bool)
    if len(rows):  # rows are sorted by split, then vp: the first near row of each split has the smallest vp
        chosen[rows[np.r_[True, gid[rows][1:] != gid[rows][:-1]]]] = True
    keep_sorted = chosen | ~np.isfinite(best)[gid]
    keep = np.empty(len(order), dtype=bool)
    keep[order] = keep_sorted
    return keep


def ep_allowed(model: ModelSpec, training: TrainingSpec, d, t, c, e):
    """Where expert parallelism e fits the split (numpy arrays or ints): carved out of d x cp (Megatron, etp = t:
    etp x ep divides tp x dp x cp). torchtitan (fsdp2) keeps experts whole and takes its EP ranks from
    dp_shard x cp x tp (parallel_dims.py `_validate` at b5bcd76): its degree ep x t must divide the experts and
    dp_shard x cp x t, with dp_shard = d when the parameters are sharded, else 1."""
    ok = (d * c) % e == 0
    if training.framework == "fsdp2":
        ok = ok & ((e == 1) | titan_experts_fit(model.num_experts, d if training.zero_stage >= 1 else 1, t, c, e))
    return ok


def expert_parallel_sizes(model: ModelSpec, training: TrainingSpec) -> np.ndarray:
    """The ep the planner tries: every divisor of num_experts for an MoE model, else 1. Hugging Face Trainer /
    accelerate has no expert parallelism (each rank holds every expert), so framework hf keeps ep = 1."""
    if not model.is_moe or training.framework == "hf":
        return np.array([1], dtype=np.int64)
    return _divisors(model.num_experts)


def _divisors(n: int) -> np.ndarray:
    return np.array(divisors(n), dtype=np.int64)  # O(sqrt n): B = 10^9 must not hang the planner


def _sort_keys(objective: str, cols: dict[str, np.ndarray]) -> list[np.ndarray]:
    """np.lexsort keys, least significant first; the last key is the primary one."""
    tie = [cols["cp"], cols["dp"], cols["pp"], cols["tp"], cols["type_rank"]]
    return tie + [cols[k] for k in reversed(_OBJECTIVE_KEYS[objective])]


def rank_plans(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: Cluster,
    *,
    objective: str = "time",
    tokens: float = 1e10,
    method: str = "detailed",
    safety_margin: float = DEFAULT_SAFETY_MARGIN,
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
    gpu_types: list[str] | None = None,
    micro_batch: int | None = None,
    scaling_floor: float = 0.0,
    max_gpus: int | None = None,
    deadline_s: float | None = None,
    budget_usd: float | None = None,
) -> PlanSet:
    """Enumerate every (GPU type, d, t, p) of `cluster` for this job, keep those that fit, rank by `objective`.

    The planner chooses each plan's micro-batch (`training.micro_batch` is not used); pass `micro_batch` to fix it.
    `scaling_floor` (0 = off), `max_gpus`, `deadline_s` and `budget_usd` drop plans after the memory fit; how many
    each dropped is in `PlanSet.dropped`.

    >>> from frenzy_core.models import ZOO; from frenzy_core.training import TrainingSpec, check_sequence
    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> c = parse_cluster_yaml("nodes: [{name: n, gpu_type: A100-80GB, num_gpus: 8}]")
    >>> best = rank_plans(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=64, micro_batch=8), c).plans[0]
    >>> (best.gpu_type, best.num_gpus <= 8)
    ('A100-80GB', True)
    """
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"unknown objective {objective!r}; choose one of: {', '.join(OBJECTIVES)}")
    if not 0.0 <= safety_margin < 1.0:
        raise SpecError("safety_margin", f"must be in [0, 1), got {safety_margin}")
    if not (tokens > 0 and np.isfinite(tokens)):
        raise SpecError("tokens", f"the token budget must be a positive, finite number, got {tokens}")
    check_sequence(model, training)
    _check_constraints(scaling_floor, max_gpus, deadline_s, budget_usd)
    if micro_batch is not None and (micro_batch <= 0 or training.global_batch % micro_batch):
        raise SpecError("micro_batch", f"{micro_batch} must be a positive divisor of global_batch "
                        f"({training.global_batch}), or None to let the planner choose")

    table = cluster.type_table
    summary = cluster.type_summary
    names = [n for n in summary if gpu_types is None or n in gpu_types]
    if not names:
        raise SpecError("gpu_types", f"none of {gpu_types} is in cluster {cluster.name!r}; it has {', '.join(summary)}")
    by_type = {n: summary[n].total_gpus for n in names}

    B = training.global_batch
    heads_gcd = int(np.gcd(model.num_heads, model.kv_heads))
    max_total = max(by_type[n] for n in names)
    max_node = max(summary[n].max_gpus_per_node for n in names)

    # The candidate grid shared by every GPU type: (d, b) with d x b dividing B, t dividing the heads, p the layers.
    d_all = _divisors(B)
    pairs = [(d, b) for d in d_all if d <= max_total for b in _divisors(B // int(d))
             if micro_batch is None or b == micro_batch]
    t_all = _divisors(heads_gcd)
    t_all = t_all[t_all <= max_node]
    p_all = _divisors(model.num_layers)
    p_all = p_all[p_all <= max_total]
    e_all = expert_parallel_sizes(model, training)
    c_all = context_parallel_sizes(training, max_total)
    v_all = virtual_pipeline_sizes(model, training)
    db = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    # (p, vp) pairs first: an interleaving needs p > 1 and p x vp dividing the layers
    pv = np.array([(pi, vi) for pi in p_all for vi in v_all if interleaving_allowed(model.num_layers, pi, vi, 0)],
                  dtype=np.int64).reshape(-1, 2)
    T, J, K, E, C = np.meshgrid(t_all, np.arange(len(pv)), np.arange(len(db)), e_all, c_all, indexing="ij")
    t_g, e_g, c_g = T.ravel(), E.ravel(), C.ravel()
    p_g, v_g = pv[J.ravel(), 0], pv[J.ravel(), 1]
    d_g, b_g = db[K.ravel(), 0], db[K.ravel(), 1]
    n_g = d_g * t_g * p_g * c_g
    keep = (n_g <= max_total) & ep_allowed(model, training, d_g, t_g, c_g, e_g)
    keep &= interleaving_allowed(model.num_layers, p_g, v_g, B // (d_g * b_g))
    t_g, p_g, d_g, b_g, n_g, e_g, c_g, v_g = (x[keep] for x in (t_g, p_g, d_g, b_g, n_g, e_g, c_g, v_g))
    # one id per split up to vp (rows that differ only in vp share it), for the interleaving rule below
    split_g = np.zeros(len(d_g), dtype=np.int64)
    if len(v_all) > 1:  # mixed radix over each column's distinct values
        for col in (d_g, t_g, p_g, c_g, b_g, e_g):
            values = np.unique(col)
            split_g = split_g * len(values) + np.searchsorted(values, col)

    # Memory does not depend on the GPU type: one vectorised call for the whole grid.
    mem_g = np.asarray(predict_memory_totals(model, training, d_g, t_g, p_g, b_g, method=method, overhead=overhead,
                                             ep=e_g, cp=c_g, vp=v_g), dtype=np.float64)
    min_memory = float(mem_g.min()) if len(mem_g) else 0.0

    cols: dict[str, list[np.ndarray]] = {k: [] for k in (*_PLAN_FIELDS, "type_rank")}
    grid_parts: list[dict[str, np.ndarray]] = []
    tokens_per_step = float(training.tokens_per_step())
    for rank, name in enumerate(sorted(names)):
        gpu = table[name]
        per_node = summary[name].max_gpus_per_node
        intra_gbyte_s, network_gbit_s = summary[name].min_intra_link_gbyte_s, summary[name].min_network_gbit_s
        # a plan's t-groups each sit inside one node: only whole groups of t per node count
        cap_by_t = {int(tv): summary[name].capacity_for_tp(int(tv)) for tv in t_all}
        cap = np.array([cap_by_t[int(tv)] for tv in t_all], dtype=np.int64)[np.searchsorted(t_all, t_g)]
        sel = (n_g <= cap) & (t_g <= per_node)
        if not sel.any():
            continue
        d, t, p, b, n, mem, e, c, v, split = (x[sel] for x in (d_g, t_g, p_g, b_g, n_g, mem_g, e_g, c_g, v_g, split_g))
        step = np.asarray(step_time_totals(
            model, training, gpu, d, t, p, b,
            intra_link_gbyte_s=intra_gbyte_s,
            network_gbit_s=network_gbit_s,
            gpus_per_node=per_node,
            ep=e,
            cp=c,
            vp=v,
        ), dtype=np.float64)
        usable = gpu.memory_bytes * (1.0 - safety_margin)
        fits = mem <= usable
        if len(v_all) > 1:
            keep_vp = _fewest_chunks_within_tolerance(split, v, step, fits)
            d, t, p, b, n, mem, e, c, v, step, fits = (x[keep_vp] for x in (d, t, p, b, n, mem, e, c, v, step, fits))
        # One row per (d, t, p, cp): the fitting micro-batch (with its ep and vp) with the shortest step (ties ->
        # larger micro-batch, then smaller ep, then smaller vp); when none fits, the smallest-memory one (heatmap).
        order = np.lexsort((v, e, -b, np.where(fits, step, mem), ~fits, c, p, t, d))
        first = np.ones(len(order), dtype=bool)
        key = np.stack([d[order], t[order], p[order], c[order]], axis=1)
        first[1:] = np.any(key[1:] != key[:-1], axis=1)
        pick = order[first]
        grid_parts.append({
            "gpu_type": np.full(len(pick), name, dtype=object), "dp": d[pick], "tp": t[pick], "pp": p[pick],
            "ep": e[pick], "cp": c[pick], "vp": v[pick], "num_gpus": n[pick], "micro_batch": b[pick], "memory_bytes": mem[pick],
            "usable_bytes": np.full(len(pick), usable), "headroom_bytes": usable - mem[pick],
            "feasible": fits[pick], "step_time_s": step[pick],
        })
        ok = pick[fits[pick]]
        if not len(ok):
            continue
        st = step[ok]
        tps = tokens_per_step / st
        ttt = tokens / tps
        gh = n[ok] * ttt / SECONDS_PER_HOUR
        m = len(ok)
        for k, column in {
            "gpu_type": np.full(m, name, dtype=object), "dp": d[ok], "tp": t[ok], "pp": p[ok], "num_gpus": n[ok],
            "micro_batch": b[ok], "grad_accum": B // (b[ok] * d[ok]), "memory_bytes": np.ceil(mem[ok]),
            "headroom_bytes": np.floor(usable - mem[ok]), "gpu_memory_bytes": np.full(m, gpu.memory_bytes),
            "step_time_s": st, "tokens_per_s": tps, "time_to_train_s": ttt, "gpu_hours": gh,
            "cost_usd": gh * gpu.price_per_hour_usd, "ep": e[ok], "cp": c[ok], "vp": v[ok],
            "type_rank": np.full(m, rank),
        }.items():
            cols[k].append(column)

    largest = max(names, key=lambda x: (table[x].memory_bytes, x))
    grid = ({k: np.concatenate([g[k] for g in grid_parts]) for k in grid_parts[0]} if grid_parts else {})
    if not cols["dp"]:
        gpu = table[largest]
        usable = gpu.memory_bytes * (1.0 - safety_margin)
        explanation = (
            f"No plan fits: the smallest per-GPU memory any split of {model.name} reaches on this cluster is "
            f"{min_memory / GIB:.1f} GiB, but the largest GPU, {largest}, offers {gpu.memory_bytes / GIB:.0f} GiB "
            f"({usable / GIB:.1f} GiB after the {safety_margin:.0%} safety margin). Add larger or more GPUs, "
            f"shorten the sequence, lower the micro-batch, or enable recomputation / ZeRO."
        )
        empty = {k: np.array([], dtype=object if k == "gpu_type" else float) for k in _PLAN_FIELDS}
        return PlanSet(objective, empty, grid, explanation, int(min_memory), largest)

    merged = {k: np.concatenate(v) for k, v in cols.items()}
    merged, dropped = _apply_constraints(merged, scaling_floor, max_gpus, deadline_s, budget_usd)
    extra = {"dropped": dropped, "constraints": {"scaling_floor": scaling_floor, "max_gpus": max_gpus,
                                                 "deadline_s": deadline_s, "budget_usd": budget_usd}}
    if not len(merged["dp"]):
        fit = sum(dropped.values())
        why = "; ".join(f"{n} by {_CONSTRAINT_WORDS[k](extra['constraints'][k])}" for k, n in dropped.items() if n)
        explanation = (f"No plan meets the constraints: {fit} plan{'s' * (fit != 1)} fit in memory, dropped {why}. "
                       "Relax the deadline, the GPU limit or the budget, or lower the scaling floor.")
        empty = {k: np.array([], dtype=object if k == "gpu_type" else float) for k in _PLAN_FIELDS}
        return PlanSet(objective, empty, grid, explanation, int(min_memory), largest, extra)
    order = np.lexsort(_sort_keys(objective, merged))
    ranked = {k: merged[k][order] for k in _PLAN_FIELDS}
    return PlanSet(objective, ranked, grid, None, int(min_memory), largest, extra)


_CONSTRAINT_WORDS = {
    "scaling_floor": lambda v: f"the scaling floor ({v:.0%} of linear speed-up for added GPUs)",
    "max_gpus": lambda v: f"the GPU limit ({v} GPUs)",
    "deadline_s": lambda v: f"the deadline ({_duration(v)})",
    "budget_usd": lambda v: f"the budget (${v:,.0f})",
}


def _check_constraints(scaling_floor, max_gpus, deadline_s, budget_usd) -> None:
    if not (np.isfinite(scaling_floor) and 0.0 <= scaling_floor <= 1.0):
        raise SpecError("scaling_floor", f"must be in [0, 1] (0 = off, 0.5 = half of linear), got {scaling_floor}")
    if max_gpus is not None and (not isinstance(max_gpus, int | np.integer) or max_gpus < 1):
        raise SpecError("max_gpus", f"must be a positive integer or unset, got {max_gpus}")
    for name, value in (("deadline_s", deadline_s), ("budget_usd", budget_usd)):
        if value is not None and not (np.isfinite(value) and value > 0):
            raise SpecError(name, f"must be a positive, finite number or unset, got {value}")


def _apply_constraints(cols: dict[str, np.ndarray], scaling_floor: float, max_gpus: int | None,
                       deadline_s: float | None, budget_usd: float | None) -> tuple[dict[str, np.ndarray], dict]:
    """The memory-feasible plans that pass every constraint, and how many each constraint dropped (in this order:
    the floor first, judged against every feasible plan, then the GPU limit, the deadline and the budget)."""
    dropped = dict.fromkeys(_CONSTRAINT_WORDS, 0)
    keep = scaling_keep(cols["gpu_type"], cols["num_gpus"], cols["time_to_train_s"], scaling_floor)
    dropped["scaling_floor"] = int((~keep).sum())
    for name, limit, column in (("max_gpus", max_gpus, "num_gpus"), ("deadline_s", deadline_s, "time_to_train_s"),
                                ("budget_usd", budget_usd, "cost_usd")):
        if limit is not None:
            over = keep & (cols[column] > limit)
            dropped[name] = int(over.sum())
            keep &= ~over
    return {k: v[keep] for k, v in cols.items()}, dropped
