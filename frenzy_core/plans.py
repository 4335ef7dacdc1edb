"""MARP's resource plans: every feasible (GPU type, d, t, p) for a job, ranked by an explicit objective.

The Frenzy paper (arXiv 2412.14479, Sec. IV-A) lists feasible plans "with priorities" but never says how it ranks
them. We rank by a named objective (docs/ranking.md):

- `time` (default): shortest time to train the token budget; ties -> fewer GPUs, then lower cost.
- `gpu-hours`: least GPU-hours (GPUs x time); ties -> shorter time.
- `cost`: lowest cost (GPU-hours x the catalog price of the GPU type); ties -> shorter time.
- `gpus`: fewest GPUs; ties -> shorter time.

Values within a relative SPEED_RTOL (1e-9) of each other tie. Every objective ends with the same tie-break: the
smaller per-GPU memory (more headroom), then GPU type name, then t, then p, then d, then cp (ascending).

Enumeration (per GPU type present in the cluster): t divides the query heads and the KV heads and t <= the largest
node of that type (tensor parallelism stays inside a node); the pipeline layouts (p, vp, first, last) are
`pipeline_layouts`'s: p divides the layers, or, under Megatron (framework megatron or unknown), uneven first / last
stages (`training.uneven_stage_options`) hold them; d x micro-batch x accumulation = global batch; cp (ring
attention) leaves each rank at least MIN_CP_TOKENS tokens (`context_parallel_sizes`); d x t x p x cp <= the GPUs of
that type; for an MoE model, ep divides the experts and d x cp (`hf`: ep = 1). vp (interleaved 1F1B) needs p > 1
and m a multiple of p (`virtual_pipeline_sizes`). Per split that fits, the planner keeps the fewest chunks and the
evenest stages within VP_TOLERANCE of its fastest layout; for each (type, d, t, p, cp) it then keeps the micro-batch
and ep with the shortest step (ties -> the smaller memory, then the smaller ep, vp, the evener layout, the smaller
micro-batch), and the plan is feasible when its per-GPU memory fits the GPU's capacity less a safety margin. Memory
and step time are evaluated on numpy arrays: memory once for the grid, step time once per GPU type, for the rows
that fit it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.frameworks import get as get_framework
from frenzy_core.limits import DEFAULT_SAFETY_MARGIN, DEFAULT_TOKENS, divisors
from frenzy_core.memory import DEFAULT_OVERHEAD, OverheadSpec, predict_memory_totals
from frenzy_core.models import ModelSpec
from frenzy_core.perf import SharedTerms, step_time_totals
from frenzy_core.training import (
    UNEVEN_LIGHTER_LAYERS,
    Parallelism,
    TrainingSpec,
    check_sequence,
    stage_layer_counts,
    uneven_stage_options,
)

OBJECTIVES = ("time", "gpu-hours", "cost", "gpus")
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
    # uneven pipeline stages (Megatron --decoder-first/last-pipeline-num-layers): the first / last stage's layers,
    # 0 = a middle stage's share (both 0: the even split num_layers / p)
    first_stage_layers: int = 0
    last_stage_layers: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def parallelism(self) -> Parallelism:
        return Parallelism(dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, vp=self.vp, ep=self.ep,
                           first_stage_layers=self.first_stage_layers, last_stage_layers=self.last_stage_layers)

    @property
    def uneven(self) -> bool:
        """Whether the first or the last pipeline stage holds its own number of layers."""
        return bool(self.first_stage_layers or self.last_stage_layers)

    def label(self) -> str:
        """'H100-80GB d=8 t=8 p=16 first=7 last=7 (1024 GPUs)': the split as `Parallelism.label` writes it."""
        return f"{self.gpu_type} {self.parallelism.label()} ({self.num_gpus} GPU{'s' * (self.num_gpus != 1)})"


_PLAN_FIELDS = [f for f in Plan.__dataclass_fields__]
_INT_FIELDS = {"dp", "tp", "pp", "ep", "cp", "vp", "num_gpus", "micro_batch", "grad_accum", "memory_bytes", "headroom_bytes",
               "gpu_memory_bytes", "first_stage_layers", "last_stage_layers"}


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
        """Every (gpu_type, d, t, p, cp) enumerated, feasible or not, with memory and headroom (for heatmaps); a
        feasible cell shows its plan's split, an infeasible one its smallest-memory split, with step_time_s NaN (it
        would run out of memory)."""
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

    @property
    def dropped_by_type(self) -> dict[str, dict[str, int]]:
        """`dropped` per GPU type, for every GPU type with a memory-feasible plan, e.g.
        {"H100-80GB": {"scaling_floor": 2, "max_gpus": 0, ...}, "A100-80GB": {"scaling_floor": 0, "max_gpus": 12, ...}}."""
        return {g: dict(n) for g, n in self.extra.get("dropped_by_type", {}).items()}

    @property
    def fit_by_type(self) -> dict[str, int]:
        """How many plans of each GPU type fit in memory (before the constraints), e.g. {"H100-80GB": 17, ...}."""
        kept = pd.Series(self.columns["gpu_type"], dtype=object).value_counts()
        return {g: int(kept.get(g, 0)) + sum(n.values()) for g, n in self.dropped_by_type.items()}

    @property
    def dropped_types(self) -> dict[str, str]:
        """For each GPU type with plans that fit in memory but none that passes the constraints, one sentence on
        which constraint dropped how many, e.g. {"A100-80GB": "A100-80GB: 12 fit in memory; 12 dropped by the GPU
        limit (8 GPUs)"}."""
        limits = self.extra.get("constraints", {})
        fit = self.fit_by_type
        out = {}
        for g, counts in self.dropped_by_type.items():
            if not fit[g] or sum(counts.values()) < fit[g]:
                continue
            why = [f"{n} {'dropped ' if not i else ''}by {_CONSTRAINT_WORDS[k](limits.get(k))}"
                   for i, (k, n) in enumerate((k, n) for k, n in counts.items() if n)]
            out[g] = f"{g}: {fit[g]} fit in memory; {', '.join(why)}"
        return out

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
            f"Ranked by {keys}, then per-GPU memory (less first), then GPU type name, t, p, d, cp "
            f"(objective: {self.objective}; values within a relative {SPEED_RTOL:g} tie).")

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
            if not np.isclose(b_val, r_val, rtol=SPEED_RTOL, atol=0):
                words, fmt, _ = _KEY_WORDS[key]
                b_txt, r_txt = fmt(b_val), fmt(r_val)
                if b_txt == r_txt:  # close values: show enough digits to see the difference
                    precise = (lambda v: f"{v / 3600:,.2f} h") if key == "time_to_train_s" else (lambda v: f"{v:.6g}")
                    b_txt, r_txt = precise(b_val), precise(r_val)
                phrase = f"{words} ({b_txt} vs {r_txt})"
                lead = "wins on" if i == 0 else f"ties with the runner-up on {_KEY_WORDS[keys[0]][2]} and wins on"
                return f"{best.label()} {lead} {phrase} over {runner.label()}; {tail}."
        if best.memory_bytes != runner.memory_bytes:
            return (f"{best.label()} ties with {runner.label()} on every objective key and wins on memory headroom "
                    f"({best.memory_bytes / GIB:.2f} vs {runner.memory_bytes / GIB:.2f} GiB per GPU); {tail}.")
        return (f"{best.label()} ties with {runner.label()} on every objective key and on memory, and wins on the "
                f"deterministic tie-break (GPU type name, then t, p, d, cp); {tail}.")


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


def context_parallel_sizes(training: TrainingSpec, max_gpus: int) -> np.ndarray:
    """The cp the planner tries: 1, and every cp <= max_gpus with seq_len a multiple of 2 cp (load-balanced chunks)
    and at least MIN_CP_TOKENS tokens per rank, under a framework with ring attention (`Framework.supports_cp`)."""
    s = training.seq_len
    if not get_framework(training.framework).supports_cp:
        return np.array([1], dtype=np.int64)
    return np.array([c for c in divisors(s // 2) if c == 1 or (s // c >= MIN_CP_TOKENS and c <= max_gpus)]
                    if s % 2 == 0 else [1], dtype=np.int64)


def interleaving_allowed(num_layers: int, p, v, m):
    """Where vp = v chunks per rank can run (numpy arrays or ints): v = 1, or p > 1 with p x v dividing the layers and
    the m micro-batches per replica a multiple of p (Megatron's interleaved schedule, schedules.py:
    microbatch_group_size_per_vp_stage = p). m = 0 checks the layers only."""
    return (v == 1) | ((p > 1) & (num_layers % (p * v) == 0) & (m % p == 0))


def virtual_pipeline_sizes(model: ModelSpec, training: TrainingSpec) -> np.ndarray:
    """The vp the planner tries: 1, and under an interleaving stack (`Framework.supports_vp`) every divisor of num_layers (rank_plans keeps
    vp > 1 only where p > 1, the stages hold whole chunks of vp (p x vp dividing the layers, or Megatron's uneven
    rule: `training.pipeline_layout_problem`) and the micro-batches m are a multiple of p, as Megatron's interleaved
    schedule requires: schedules.py, microbatch_group_size_per_vp_stage = p). Under a stack with uneven stages also
    the divisors of num_layers + 1 and + 2: the chunk counts of Megatron's account-for-embedding / loss layouts
    (`training.lighter_chunk_layout`), e.g. Llama-3.1-405B's PP8 x VP8 (126 + 2 = 8 x 8 x 2).

    >>> from frenzy_core.models import ZOO
    >>> qwen = ZOO["qwen3-235b-a22b"]  # 94 layers: PP8 x VP4 holds 94 + 2 in chunks of 3
    >>> [int(v) for v in virtual_pipeline_sizes(qwen, TrainingSpec(framework="megatron")) if v <= 8]
    [1, 2, 3, 4, 5, 6, 8]
    >>> [int(v) for v in virtual_pipeline_sizes(qwen, TrainingSpec(framework="fsdp2")) if v <= 8]  # divisors of 94
    [1, 2]
    """
    fw = get_framework(training.framework)
    if not fw.supports_vp:
        return np.array([1], dtype=np.int64)
    if not fw.supports_uneven_stages:
        return _divisors(model.num_layers)
    extra = (_divisors(model.num_layers + 1), _divisors(model.num_layers + 2))
    return np.unique(np.concatenate((_divisors(model.num_layers), *extra)))


# Step times closer than this are one answer to the step-time model (its errors are several percent, docs/perf.md):
# among a split's pipeline layouts (interleavings vp, uneven first / last stages) the planner keeps the fewest chunks
# and the evenest stages within it of the fastest. Without it, vp = l / p (one-layer chunks) wins by a fraction of a
# percent, since per-chunk costs beyond the sends are not modelled.
VP_TOLERANCE = 0.01
# Values closer than this (relative) are equal to the ranking: float noise must not decide between two plans that the
# models price the same (issue 19: gpt2-xl's micro-batches 1 to 12 all take 2.668 s on one A100); where speeds tie,
# the plan with the smaller per-GPU memory (more headroom) wins, here and in the final ranking.
SPEED_RTOL = 1e-9


def pipeline_layouts(model: ModelSpec, training: TrainingSpec, max_stages: int) -> np.ndarray:
    """The (p, vp, first, last, rank) rows the planner tries, int64, p <= max_stages: p dividing the layers with the
    even split (0, 0), and under Megatron (`Framework.supports_uneven_stages`) every (first, last) of `uneven_stage_options(l, p, vp)`
    (first / last stages up to UNEVEN_LIGHTER_LAYERS lighter than the middle ones, so p divides one of l .. l + 4).
    `rank` orders a (p, vp)'s layouts evenest first (the order uneven_stage_options gives); layouts that put the same
    layers on the first and last stage as one listed before are left out.

    >>> from frenzy_core.models import ZOO
    >>> mcore = TrainingSpec(framework="megatron")
    >>> [r.tolist() for r in pipeline_layouts(ZOO["gpt2"], mcore, 4) if r[0] == 4]  # 12 layers on 4 stages
    [[4, 1, 0, 0, 0], [4, 1, 2, 2, 1], [4, 2, 2, 2, 0], [4, 3, 0, 0, 0]]
    >>> sorted({int(r[0]) for r in pipeline_layouts(ZOO["gpt2"], TrainingSpec(), 64)})  # pytorch: divisors only
    [1, 2, 3, 4, 6, 12]
    """
    rows = _layouts(model.num_layers, tuple(int(v) for v in virtual_pipeline_sizes(model, training)),
                    get_framework(training.framework).supports_uneven_stages, min(model.num_layers, max_stages))
    return np.array(rows, dtype=np.int64).reshape(-1, 5)


@functools.lru_cache(maxsize=256)
def _layouts(num_layers: int, v_all: tuple[int, ...], uneven: bool, top: int) -> tuple[tuple[int, ...], ...]:
    """`pipeline_layouts`' rows as tuples: a pure function of its arguments, cached because the planner asks for the
    same few models' layouts on every call (about 1 ms each for 60-130 layers)."""
    spread = 2 * UNEVEN_LIGHTER_LAYERS if uneven else 0  # layers the first and last stage may give up together
    stages = sorted({p for extra in range(spread + 1) for p in divisors(num_layers + extra) if p <= top})
    rows = []
    for p in stages:
        for v in v_all:
            if v > 1 and (p == 1 or p * v > num_layers):  # each chunk holds at least one layer
                continue
            if uneven:
                options = uneven_stage_options(num_layers, p, v)
            else:
                options = ((0, 0),) if interleaving_allowed(num_layers, p, v, 0) else ()
            seen: set[tuple[float, float]] = set()
            for first, last in options:
                # the layers the first and last stage really hold: (0, 30) and (31, 30) are one split of 61 layers
                # over 2 stages, and (4, 4) of 8 is the even split; keep the first uneven_stage_options lists
                ends = tuple(float(n) for n in stage_layer_counts(num_layers, p, np.array([0, p - 1]), first, last))
                if ends not in seen:
                    seen.add(ends)
                    rows.append((p, v, first, last, len(seen) - 1))
    return tuple(rows)


def _plan_per_cell(cell: np.ndarray, split: np.ndarray | None, step: np.ndarray, tie: np.ndarray,
                   simple: np.ndarray | None) -> np.ndarray:
    """Positions of the plan rows, one per cell, in the order the cells come: rows grouped by cell (ascending) and
    inside a cell by split (rows equal but for the pipeline layout), each cell and each split one contiguous run.
    Per split the simplest layout (smallest `simple`, which no two rows of a split share: fewest chunks, then the
    evenest stages) within VP_TOLERANCE of the split's fastest; then per (d, t, p, cp) cell the fastest of those,
    steps within SPEED_RTOL tying, won by the smallest `tie` (a rank, no two rows equal: memory, ep, vp, layout,
    micro-batch). `split` and `simple` None: one layout per split. No sort: the caller's grouping is reused.

    >>> cell, split = np.array([0, 0, 0, 1]), np.array([0, 0, 1, 2])
    >>> step, tie, simple = np.array([1.0, 1.005, 1.005, 3.0]), np.array([3, 2, 1, 0]), np.array([1, 0, 0, 0])
    >>> _plan_per_cell(cell, split, step, tie, simple).tolist()  # split 0 takes row 1; it ties row 2: tie 1 wins
    [2, 3]
    """
    n = len(cell)
    if not n:
        return np.zeros(0, dtype=np.int64)
    pos = None  # the rows of the cell stage: every row, or each split's pick
    if simple is not None:  # per split: the smallest `simple` among the rows near its fastest (NaN steps last)
        start, group = _runs(split)
        fastest = np.fmin.reduceat(step, start)[group]
        key = np.where(step <= fastest + VP_TOLERANCE * np.abs(fastest), simple * n + np.arange(n),
                       np.iinfo(np.int64).max)
        pos = np.minimum.reduceat(key, start) % n
        cell, step, tie = cell[pos], step[pos], tie[pos]
    m = len(cell)
    start, group = _runs(cell)
    fastest = np.minimum.reduceat(step, start)[group]
    key = np.where(step <= fastest + SPEED_RTOL * np.abs(fastest), tie * m + np.arange(m), np.iinfo(np.int64).max)
    best = np.minimum.reduceat(key, start) % m
    return best if pos is None else pos[best]


def _runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start of each run of equal ids, the run each element is in) for a non-empty array.

    >>> [x.tolist() for x in _runs(np.array([4, 4, 2, 2, 2, 4]))]
    [[0, 2, 5], [0, 0, 1, 1, 1, 2]]
    """
    new = np.empty(len(ids), dtype=bool)
    new[0] = True
    np.not_equal(ids[1:], ids[:-1], out=new[1:])
    return np.flatnonzero(new), np.cumsum(new) - 1


def _tie_ranks(values: np.ndarray, rtol: float = SPEED_RTOL) -> np.ndarray:
    """Dense ranks of `values` (int64) in which a value within rtol (relative) of the next smaller one shares its rank:
    the sort key that makes float noise a tie.

    >>> _tie_ranks(np.array([2.0, 1.0, 1.0 + 1e-12, 3.0])).tolist()
    [2, 1, 1, 3]
    """
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    new = np.r_[True, (xs[1:] - xs[:-1]) > rtol * np.abs(xs[:-1])] if len(xs) else np.zeros(0, dtype=bool)
    ranks = np.empty(len(x), dtype=np.int64)
    ranks[order] = np.cumsum(new)
    return ranks


def ep_allowed(model: ModelSpec, training: TrainingSpec, d, t, c, e):
    """Where expert parallelism e fits the split (numpy arrays or ints): carved out of d x cp (Megatron, etp = t:
    etp x ep divides tp x dp x cp), and the stack's own rule where it has one (`Framework.experts_fit`: torchtitan
    keeps experts whole and takes its EP ranks from dp_shard x cp x tp, frameworks/fsdp2.py)."""
    ok = (d * c) % e == 0
    experts_fit = get_framework(training.framework).experts_fit
    if experts_fit is not None:
        ok = ok & experts_fit(model, training, d, t, c, e)
    return ok


def expert_parallel_sizes(model: ModelSpec, training: TrainingSpec) -> np.ndarray:
    """The ep the planner tries: every divisor of num_experts for an MoE model under a stack with expert
    parallelism (`Framework.supports_ep`; Hugging Face accelerate has none: each rank holds every expert), else 1."""
    if not model.is_moe or not get_framework(training.framework).supports_ep:
        return np.array([1], dtype=np.int64)
    return _divisors(model.num_experts)


UINT16_MAX = int(np.iinfo(np.uint16).max)


def _stable_argsort_ids(ids: np.ndarray) -> np.ndarray:
    """np.argsort(ids, kind="stable") of non-negative int ids: as uint16 where every id fits one (numpy's stable
    sort of 16-bit ints is a radix sort), else as they are.

    >>> _stable_argsort_ids(np.array([70000, 1, 70000, 0])).tolist()
    [3, 1, 0, 2]
    """
    fits = len(ids) and int(ids.max()) <= UINT16_MAX
    return np.argsort(ids.astype(np.uint16) if fits else ids, kind="stable")


def _first_of_each(groups: np.ndarray, n_groups: int) -> np.ndarray:
    """For ids 0 .. n_groups - 1 (each present), the position of each one's first occurrence in `groups`.

    >>> _first_of_each(np.array([2, 0, 2, 1, 0]), 3).tolist()
    [1, 3, 0]
    """
    if not len(groups):
        return np.zeros(0, dtype=np.int64)
    order = _stable_argsort_ids(groups)
    sorted_groups = groups[order]
    return order[np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])]


def _mixed_radix(*digits: tuple[np.ndarray, int]) -> np.ndarray:
    """One int64 id per row from (digit column, radix) pairs, most significant first, each digit in range(radix):
    the row's digits read as a mixed-radix number, so two rows share an id only if they share every digit.

    >>> _mixed_radix((np.array([0, 1, 1]), 2), (np.array([2, 0, 2]), 3)).tolist()  # 0*3+2, 1*3+0, 1*3+2
    [2, 3, 5]
    """
    ids = np.zeros(len(digits[0][0]), dtype=np.int64)
    for digit, radix in digits:
        ids = ids * radix + digit
    return ids


def _dense_ids(ids: np.ndarray) -> np.ndarray:
    """`np.unique(ids, return_inverse=True)[1]` for non-negative int ids: 0, 1, ... in ascending id order, through a
    lookup table where the ids are small (no sort).

    >>> _dense_ids(np.array([7, 3, 7, 10])).tolist()
    [1, 0, 1, 2]
    """
    ids = np.asarray(ids, dtype=np.int64)
    if not len(ids) or ids.min() < 0 or ids.max() > 4 * len(ids) + (1 << 20):
        return np.unique(ids, return_inverse=True)[1].ravel()
    present = np.zeros(int(ids.max()) + 1, dtype=bool)
    present[ids] = True
    return (np.cumsum(present) - 1)[ids]


def _divisors(n: int) -> np.ndarray:
    return np.array(divisors(n), dtype=np.int64)  # O(sqrt n): B = 10^9 must not hang the planner


def _sort_keys(objective: str, cols: dict[str, np.ndarray]) -> list[np.ndarray]:
    """np.lexsort keys, least significant first; the last key is the primary one. Float keys within SPEED_RTOL tie
    (`_tie_ranks`); after the objective's keys the smaller per-GPU memory wins, then the deterministic tie-break."""
    tie = _combined_key([cols["cp"], cols["dp"], cols["pp"], cols["tp"], cols["type_rank"]])
    keys = [cols[k] if k == "num_gpus" else _tie_ranks(cols[k]) for k in reversed(_OBJECTIVE_KEYS[objective])]
    return [*tie, cols["memory_bytes"], *_combined_key(keys)]


def _lexsort(keys) -> np.ndarray:
    """`np.lexsort(keys)` (the last key primary, stable), sorting by the other keys only the runs the primary key
    leaves tied: one sort where the primary key alone decides (a ranking's time or cost nearly always does).

    >>> keys = (np.array([3, 1, 2, 0]), np.array([1.0, 0.0, 1.0, 2.0]))
    >>> _lexsort(keys).tolist(), np.lexsort(keys).tolist()
    ([1, 2, 0, 3], [1, 2, 0, 3])
    """
    primary = keys[-1]
    order = np.argsort(primary, kind="stable")
    if len(keys) == 1 or len(order) < 2:
        return order
    ranked = primary[order]
    same = ranked[1:] == ranked[:-1]
    tied = np.zeros(len(order), dtype=bool)  # in a run of equal primary keys
    tied[1:] |= same
    tied[:-1] |= same
    if tied.any():
        rows = order[tied]  # run by run, each in its original order
        order[tied] = rows[np.lexsort((*(k[rows] for k in keys[:-1]), primary[rows]))]
    return order


def _combined_key(keys: list[np.ndarray]) -> list[np.ndarray]:
    """np.lexsort keys (least significant first) of non-negative ints as one int64 key that sorts the same (fewer
    keys, a faster sort), where their ranges multiply below 2**62; else the keys as they are.

    >>> keys = [np.array([1, 0, 1, 0]), np.array([2, 2, 0, 0])]
    >>> _combined_key(keys)[0].tolist(), np.lexsort(keys).tolist()
    ([5, 4, 1, 0], [3, 2, 1, 0])
    """
    total, scale = np.zeros(len(keys[0]), dtype=np.int64), 1
    for key in keys:
        key = np.asarray(key)
        if key.dtype.kind not in "iu" or (len(key) and key.min() < 0):
            return keys
        top = int(key.max()) + 1 if len(key) else 1
        if scale * top >= 1 << 62:
            return keys
        total += key.astype(np.int64) * scale
        scale *= top
    return [total]


def rank_plans(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: Cluster,
    *,
    objective: str = "time",
    tokens: float = DEFAULT_TOKENS,
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

    # The candidate grid shared by every GPU type: (d, b) with d x b dividing B, t dividing the heads, the pipeline
    # layouts (p, vp, first, last) of `pipeline_layouts`, ep and cp. Rows are built from index grids, so the group
    # ids below (one per split, one per (d, t, p, cp)) are integer arithmetic.
    d_all = _divisors(B)
    d_all = d_all[d_all <= max_total]
    pairs = [(i, b) for i, d in enumerate(d_all.tolist()) for b in _divisors(B // d).tolist()
             if micro_batch is None or b == micro_batch]
    db = np.array(pairs, dtype=np.int64).reshape(-1, 2)  # (index into d_all, micro-batch)
    t_all = _divisors(heads_gcd)
    t_all = t_all[t_all <= max_node]
    e_all = expert_parallel_sizes(model, training)
    c_all = context_parallel_sizes(training, max_total)
    layouts = pipeline_layouts(model, training, max_total)
    p_all, p_index = np.unique(layouts[:, 0], return_inverse=True)
    # (t, layout, d x b) first, cut to the splits that fit the GPU count and the interleaving rule, then x (ep, cp)
    T, J, K = (x.ravel() for x in np.meshgrid(np.arange(len(t_all)), np.arange(len(layouts)), np.arange(len(db)),
                                              indexing="ij"))
    p_base = layouts[J, 0]
    d_base = d_all[db[K, 0]]
    base = np.flatnonzero((d_base * t_all[T] * p_base * c_all[0] <= max_total) & (
        # Megatron's interleaved schedule: the m micro-batches per replica a multiple of p (schedules.py:
        # microbatch_group_size_per_vp_stage = p); the layers of every layout already fit (pipeline_layouts)
        (layouts[J, 1] == 1) | ((B // (d_base * db[K, 1])) % p_base == 0)))
    # each base row x each (ep, cp), cp fastest: a (base, ep x cp) mask, whose row-major nonzeros keep that order
    e_ec, c_ec = np.repeat(e_all, len(c_all)), np.tile(c_all, len(e_all))
    ec = len(e_ec)
    tb, jb, kb = T[base], J[base], K[base]
    d_b, t_b = d_all[db[kb, 0]], t_all[tb]
    # the expert-parallel rule reads d, t, ep and cp only: once per (d, t), then looked up per base row
    allowed = np.broadcast_to(ep_allowed(model, training, d_all[:, None, None], t_all[None, :, None], c_ec, e_ec),
                              (len(d_all), len(t_all), ec))
    fits = ((d_b * t_b * layouts[jb, 0])[:, None] * c_ec <= max_total) & allowed[db[kb, 0], tb]
    bi, eci = np.nonzero(fits)
    ti, ji, ki = tb[bi], jb[bi], kb[bi]
    ei, ci = eci // len(c_all), eci % len(c_all)
    di = db[ki, 0]
    # one id per chain of micro-batches (rows equal but for b; the grid holds each chain's rows in ascending b)
    chain_g = _mixed_radix((di, len(d_all)), (ti, len(t_all)), (ji, len(layouts)), (ei, len(e_all)), (ci, len(c_all)))
    several_layouts = len(layouts) > len(p_all)  # some p has more than one (vp, first, last) to choose from

    def split_columns(rows):
        """(t, p, d, b, e, c, vp, first, last) of the grid's `rows`: what the memory and step models read."""
        j = ji[rows]
        return (t_all[ti[rows]], layouts[j, 0], d_all[di[rows]], db[ki[rows], 1], e_all[ei[rows]], c_all[ci[rows]],
                *(layouts[j, k] for k in range(1, 4)))

    # Memory does not depend on the GPU type: vectorised calls for the whole grid. It never falls as the micro-batch
    # grows (the activations, the in-flight micro-batches min(p - stage, m) x b with m = B / (d b), and the
    # temporaries grow with b; the rest does not depend on it: tests/test_plans.py checks it over the zoo and every
    # known framework; framework unknown's band, a max over recipes, is evaluated whole), so a chain whose
    # smallest micro-batch fits no GPU of the cluster has no row that fits, and its
    # other rows are never evaluated (7 in 10 of DeepSeek-V3's under Megatron on 1,024 GPUs of each type).
    def memory(rows):
        t, p, d, b, e, c, v, f, last = split_columns(rows)
        return np.asarray(predict_memory_totals(model, training, d, t, p, b, method=method, overhead=overhead, ep=e,
                                                cp=c, vp=v, first_stage_layers=f, last_stage_layers=last),
                          dtype=np.float64)

    # Each chain's rows in ascending b are evaluated in rounds of 1, 1, 2, 4, ... rows, while the chain's last row
    # fits the largest GPU; once most chains of a round still fit, their remaining rows go in one last call.
    chain = _dense_ids(chain_g)
    by_chain = _stable_argsort_ids(chain)
    starts = np.flatnonzero(np.r_[True, chain[by_chain][1:] != chain[by_chain][:-1]])
    position = np.empty(len(chain), dtype=np.int64)
    position[by_chain] = np.arange(len(chain)) - np.repeat(starts, np.diff(np.r_[starts, len(chain)]))
    largest_usable = max(table[n].memory_bytes for n in names) * (1.0 - safety_margin)
    alive = np.ones(len(starts), dtype=bool)
    mem_all = np.full(len(chain), np.nan)
    low, high = 0, (len(chain) + 1 if get_framework(training.framework).is_band else 1)  # unknown: all rows at once
    while True:
        batch = np.flatnonzero((position >= low) & (position < high) & alive[chain])
        if not len(batch):
            break
        mem_all[batch] = memory(batch)
        evaluated = np.zeros(len(alive), dtype=bool)
        evaluated[chain[batch]] = True
        alive[chain[batch][mem_all[batch] > largest_usable]] = False
        low, high = high, (2 * high if alive[evaluated].mean() < 0.5 else len(chain))
    rows = np.flatnonzero(~np.isnan(mem_all))
    mem_g = mem_all[rows]
    # the evaluated rows' columns (the rest of the grid is never read again)
    t_g, p_g, d_g, b_g, e_g, c_g, v_g, f_g, l_g = split_columns(rows)
    n_g = d_g * t_g * p_g * c_g
    o_g = layouts[ji[rows], 4]
    # one id per (d, t, p, cp): a heatmap cell and a plan; one per split up to the layout (vp, first, last)
    t_i, k_i, e_i, c_i, p_i = ti[rows], ki[rows], ei[rows], ci[rows], p_index[ji[rows]]
    cell_g = _mixed_radix((di[rows], len(d_all)), (t_i, len(t_all)), (p_i, len(p_all)), (c_i, len(c_all)))
    split_g = _mixed_radix((k_i, len(db)), (t_i, len(t_all)), (p_i, len(p_all)), (c_i, len(c_all)), (e_i, len(e_all)))
    min_memory = float(mem_g.min()) if len(mem_g) else 0.0
    # Per (d, t, p, cp) cell, type-independent: its GPUs and t, and its smallest-memory row (the heatmap shows it
    # where nothing fits). The tie-breaks are type-independent too, each one rank over the grid: (memory, ep, vp,
    # layout, micro-batch) and (vp, layout).
    cell_of = _dense_ids(cell_g)
    n_cells, n_splits = (int(x.max()) + 1 if len(x) else 0 for x in (cell_of, split_g))
    first_row = np.zeros(n_cells, dtype=np.int64)
    first_row[cell_of] = np.arange(len(cell_of))  # a row of each cell (any: they share d, t, p and cp)
    cell_n, cell_t = n_g[first_row], t_g[first_row]
    cell_ti = np.searchsorted(t_all, cell_t)
    by_tie = _lexsort((*_combined_key([b_g, o_g, v_g, e_g]), mem_g))
    tie_g = np.empty(len(mem_g), dtype=np.int64)
    tie_g[by_tie] = np.arange(len(mem_g))
    simple_g = v_g * (int(o_g.max()) + 1 if len(o_g) else 1) + o_g  # fewest chunks, then the evenest stages
    # each cell's smallest-memory row (ties: the smallest tie rank): its first row in tie order
    cell_low = by_tie[_first_of_each(cell_of[by_tie], n_cells)]
    cell_low_mem = mem_g[cell_low]
    # The rows grouped by cell, then by split, once for every type: a type's fitting rows, taken in this order, come
    # in runs of one cell and of one split each, which `_plan_per_cell` reads without sorting again.
    grouped = np.lexsort(_combined_key([split_g, cell_of]))
    grouped_mem, grouped_cell = mem_g[grouped], cell_of[grouped]
    step_cols = [x[grouped] for x in (d_g, t_g, p_g, b_g, e_g, c_g, v_g, f_g, l_g)]  # what the step model reads
    # the step model's terms that no GPU type changes (per-token FLOPs, each bounding stage's layers and parameters)
    shared = SharedTerms(step_cols[2], step_cols[6], step_cols[7], step_cols[8])

    fit_rows_by_type, fit_steps, fit_types, other_rows, other_types = [], [], [], [], []
    ordered = sorted(names)
    usable_by_type = [table[n].memory_bytes * (1.0 - safety_margin) for n in ordered]
    for rank, name in enumerate(ordered):
        gpu = table[name]
        per_node = summary[name].max_gpus_per_node
        # a plan's t-groups each sit inside one node: only whole groups of t per node count
        cap = np.array([summary[name].capacity_for_tp(int(tv)) for tv in t_all], dtype=np.int64)
        cell_ok = (cell_n <= cap[cell_ti]) & (cell_t <= per_node)
        if not cell_ok.any():
            continue
        usable = usable_by_type[rank]
        fits = (grouped_mem <= usable) & cell_ok[grouped_cell]
        fit = grouped[fits]  # the rows that fit, grouped by cell and split (only these have a step)
        other = cell_low[cell_ok & (cell_low_mem > usable)]  # cells where nothing fits: their smallest-memory row
        step = np.zeros(0)
        if len(fit):
            d, t, p, b, e, c, v, f, last = (x[fits] for x in step_cols)
            step = np.asarray(step_time_totals(
                model, training, gpu, d, t, p, b,
                intra_link_gbyte_s=summary[name].min_intra_link_gbyte_s,
                network_gbit_s=summary[name].min_network_gbit_s,
                gpus_per_node=per_node,
                ep=e,
                cp=c,
                vp=v,
                first_stage_layers=f,
                last_stage_layers=last,
                shared=shared,
                rows=fits,
            ), dtype=np.float64)
        fit_rows_by_type.append(fit), fit_steps.append(step), fit_types.append(np.full(len(fit), rank))
        other_rows.append(other), other_types.append(np.full(len(other), rank))

    # Every type's plans at once (cells and splits of different types are different groups): by type, then in
    # (d, t, p, cp) order
    fit_all = np.concatenate([np.zeros(0, dtype=np.int64), *fit_rows_by_type])
    fit_type = np.concatenate([np.zeros(0, dtype=np.int64), *fit_types])
    fit_step = np.concatenate([np.zeros(0), *fit_steps])
    pos = _plan_per_cell(fit_type * n_cells + cell_of[fit_all],
                         fit_type * n_splits + split_g[fit_all] if several_layouts else None, fit_step,
                         tie_g[fit_all], simple_g[fit_all] if several_layouts else None)
    ok, ok_types, ok_steps = fit_all[pos], fit_type[pos], fit_step[pos]

    largest = max(names, key=lambda x: (table[x].memory_bytes, x))
    grid = {}
    if fit_rows_by_type:
        # the grid: by type, then in (d, t, p, cp) order, a type's plans and its cells where nothing fits (no step)
        g = np.concatenate([ok, *other_rows])
        kind = np.concatenate([ok_types, *other_types])
        order = np.argsort(kind * n_cells + cell_of[g], kind="stable")
        g, kind = g[order], kind[order]
        grid_steps = np.concatenate([ok_steps, np.full(len(g) - len(ok), np.nan)])[order]
        usable_g = np.array(usable_by_type)[kind]
        grid = {"gpu_type": np.array(ordered, dtype=object)[kind], "dp": d_g[g], "tp": t_g[g], "pp": p_g[g],
                "ep": e_g[g], "cp": c_g[g], "vp": v_g[g], "first_stage_layers": f_g[g], "last_stage_layers": l_g[g],
                "num_gpus": n_g[g], "micro_batch": b_g[g], "memory_bytes": mem_g[g], "usable_bytes": usable_g,
                "headroom_bytes": usable_g - mem_g[g], "feasible": mem_g[g] <= usable_g,
                "step_time_s": grid_steps}
    if not len(ok):
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

    kind, st = ok_types, ok_steps
    gpus = [table[n] for n in ordered]
    tps = float(training.tokens_per_step()) / st
    ttt = tokens / tps
    gh = n_g[ok] * ttt / SECONDS_PER_HOUR
    usable = np.array(usable_by_type)[kind]
    merged = {
        "gpu_type": np.array(ordered, dtype=object)[kind], "dp": d_g[ok], "tp": t_g[ok], "pp": p_g[ok],
        "num_gpus": n_g[ok], "micro_batch": b_g[ok], "grad_accum": B // (b_g[ok] * d_g[ok]),
        "memory_bytes": np.ceil(mem_g[ok]), "headroom_bytes": np.floor(usable - mem_g[ok]),
        "gpu_memory_bytes": np.array([g.memory_bytes for g in gpus])[kind], "step_time_s": st, "tokens_per_s": tps,
        "time_to_train_s": ttt, "gpu_hours": gh,
        "cost_usd": gh * np.array([g.price_per_hour_usd for g in gpus], dtype=np.float64)[kind], "ep": e_g[ok],
        "cp": c_g[ok], "vp": v_g[ok], "first_stage_layers": f_g[ok], "last_stage_layers": l_g[ok],
        "type_rank": kind,
    }
    merged, dropped, dropped_by_type = _apply_constraints(merged, scaling_floor, max_gpus, deadline_s, budget_usd)
    extra = {"dropped": dropped, "dropped_by_type": dropped_by_type,
             "constraints": {"scaling_floor": scaling_floor, "max_gpus": max_gpus, "deadline_s": deadline_s,
                             "budget_usd": budget_usd}}
    if not len(merged["dp"]):
        fit = sum(dropped.values())
        why = "; ".join(f"{n} by {_CONSTRAINT_WORDS[k](extra['constraints'][k])}" for k, n in dropped.items() if n)
        explanation = (f"No plan meets the constraints: {fit} plan{'s' * (fit != 1)} fit in memory, dropped {why}. "
                       "Relax the deadline, the GPU limit or the budget, or lower the scaling floor.")
        empty = {k: np.array([], dtype=object if k == "gpu_type" else float) for k in _PLAN_FIELDS}
        return PlanSet(objective, empty, grid, explanation, int(min_memory), largest, extra)
    order = _lexsort(_sort_keys(objective, merged))
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
                       deadline_s: float | None, budget_usd: float | None) -> tuple[dict[str, np.ndarray], dict, dict]:
    """The memory-feasible plans that pass every constraint, how many each constraint dropped (in this order: the
    floor first, judged against every feasible plan, then the GPU limit, the deadline and the budget), and the same
    counts per GPU type (every type with a memory-feasible plan, in the cluster's type order)."""
    dropped = dict.fromkeys(_CONSTRAINT_WORDS, 0)
    gpu_type = cols["gpu_type"]
    # one name per type rank, in rank order; counts per type are bincounts over the ranks
    ranks, first = np.unique(np.asarray(cols["type_rank"], dtype=np.int64), return_index=True)
    types = [str(g) for g in gpu_type[first].tolist()]
    by_type = {g: dict.fromkeys(_CONSTRAINT_WORDS, 0) for g in types}
    rank = np.searchsorted(ranks, cols["type_rank"])

    def count(name: str, out: np.ndarray) -> None:
        dropped[name] = int(out.sum())
        per_type = np.bincount(rank[out], minlength=len(types))
        for g, n in zip(types, per_type.tolist(), strict=True):
            by_type[g][name] = int(n)

    keep = scaling_keep(cols["gpu_type"], cols["num_gpus"], cols["time_to_train_s"], scaling_floor)
    count("scaling_floor", ~keep)
    for name, limit, column in (("max_gpus", max_gpus, "num_gpus"), ("deadline_s", deadline_s, "time_to_train_s"),
                                ("budget_usd", budget_usd, "cost_usd")):
        if limit is not None:
            over = keep & (cols[column] > limit)
            count(name, over)
            keep &= ~over
    return ({k: v[keep] for k, v in cols.items()} if not keep.all() else dict(cols)), dropped, by_type
