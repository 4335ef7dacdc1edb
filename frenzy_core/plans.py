"""MARP's resource plans: every feasible (GPU type, d, t, p) for a job, ranked by an explicit objective."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Plan:
    """One way to run a job: a GPU type and a split, with what it costs in memory, time and money."""

    gpu_type: str  # catalog name of the GPU every worker of the plan runs on
    dp: int  # d: data-parallel replicas
    tp: int  # t: tensor-parallel shards (inside one node)
    pp: int  # p: pipeline stages
    num_gpus: int  # d x t x p
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

    def as_dict(self) -> dict:
        return asdict(self)
