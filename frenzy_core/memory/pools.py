"""Memory outside the tensors' own bytes: the allocator's and the driver's overheads (what a traced peak cannot see),
FSDP2's side-stream pools, and the buffers an MoE stage allocates once and keeps for the run.

>>> DEFAULT_OVERHEAD.workspace_bytes == 64 * MIB
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from frenzy_core.memory.sizes import MIB
from frenzy_core.memory.states import _layer_weights, _root_embedding
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import Recipe
from frenzy_core.training import PrecisionSetup, TrainingSpec

if TYPE_CHECKING:
    from frenzy_core.memory.step import Step

# Transformer Engine (read at d0067d0d): transformer_engine/common/util/multi_stream.cpp get_num_compute_streams
# (4) and pytorch/cpp_extensions/gemm.py get_cublas_workspace_size_bytes (32 MiB + 1 KiB on Hopper and newer,
# 4 MiB before: counted at the Hopper size, as DEFAULT_OVERHEAD's workspaces are)
TE_COMPUTE_STREAMS = 4
TE_CUBLAS_WORKSPACE_BYTES = 32 * MIB + 1024


# --- the allocator and the driver ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class OverheadSpec:
    """What a traced peak cannot see, added on top of the allocated peak (docs/memory.md, "CPU vs CUDA").

    >>> DEFAULT_OVERHEAD.cuda_context_bytes == 512 * MIB
    True
    """

    cuda_context_bytes: int  # CUDA context + kernels: about 0.3-0.5 GB on current drivers, up to ~1.3 GB on old ones
    nccl_buffer_bytes: int  # NCCL communicator buffers, only when dp*tp*pp*cp > 1: hundreds of MB to GBs
    workspace_bytes: int  # cuBLAS workspaces (32 MiB per handle on Hopper) + flash-attention backward scratch
    fragmentation_fraction: float  # caching allocator: reserved exceeds allocated by a few % (up to 2x without
    # expandable_segments); applied to the allocated peak


NO_OVERHEAD = OverheadSpec(0, 0, 0, 0.0)
# Defaults sit inside the ranges in docs/memory.md ("CPU vs CUDA"): 0.5 GiB context, 0.5 GiB of NCCL buffers
# (one data-parallel and one tensor-parallel communicator at NCCL_BUFFSIZE=4 MiB x channels x peers), 64 MiB of
# workspaces, 5% fragmentation (PyTorch >= 2.1 with typical training allocation patterns).
DEFAULT_OVERHEAD = OverheadSpec(
    cuda_context_bytes=512 * MIB, nccl_buffer_bytes=512 * MIB, workspace_bytes=64 * MIB, fragmentation_fraction=0.05
)


def _gpu_reports(spec: OverheadSpec, num_gpus, tensors, method, stream_pools=0):
    """(allocated, reserved, total) int64 bytes from the tensors' peak: what the allocator / nvidia-smi report.

    `stream_pools`: blocks cached by other streams' pools and idle at the peak (FSDP2, `side_stream_pool_bytes`):
    reserved, not allocated, and not reusable by the default stream."""
    if method == "paper":  # the paper adds nothing beyond its two terms
        return tensors, tensors, tensors
    allocated = tensors + spec.workspace_bytes  # cuBLAS workspaces live inside the caching allocator
    reserved = allocated + np.rint(spec.fragmentation_fraction * tensors).astype(np.int64) + stream_pools
    nccl = np.where(num_gpus > 1, spec.nccl_buffer_bytes, 0)
    total = reserved + spec.cuda_context_bytes + nccl
    return allocated, reserved, total.astype(np.int64)


# --- side-stream pools (FSDP2) ---------------------------------------------------------------------------------------
def side_stream_pool_bytes(model: ModelSpec, recipe: Recipe, ps: PrecisionSetup, grads, t, p, stage, shard, ep=1,
                           zero: int = 3):
    """(reduce-scatter pool, all-gather copy-in pool) bytes FSDP2 keeps reserved on its side streams.

    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (torch 2.6, the torchtitan tables' era):
    `foreach_reduce` allocates `reduce_output` inside `with stream(reduce_scatter_stream)`, and that buffer becomes
    the sharded `.grad` (`torch.as_strided(reduce_output, ...)`): every sharded gradient lives in the reduce-scatter
    stream's pool, which keeps the blocks after `zero_grad(set_to_none=True)` frees them. `foreach_all_gather`
    allocates the flat bf16 all-gather output (and the bf16 copy of the local shards) inside
    `with stream(all_gather_copy_in_stream)`; in forward `wait_for_unshard` holds the previous group's output in
    `all_gather_state` until the next copy-out, so the pool peaks at the root unit's output (embedding, final norm
    and head, gathered first) beside the first block's output and input shard. The caching allocator hands a freed
    block only to the stream that allocated it (c10/cuda/CUDACachingAllocator.cpp get_free_block: block->stream),
    so these bytes stay reserved when the default stream peaks. Zero for recipes without side-stream pools, and where
    fully_shard never runs: below ZeRO-3 (`zero`), or with nothing to shard over (`shard` 1: torchtitan applies it
    only when dp_shard x cp > 1, parallelize_llama `if parallel_dims.fsdp_enabled`; torchtune's single-device
    recipes never call it).
    """
    if not recipe.side_stream_pools:
        return 0.0 * grads, 0.0 * grads
    sharded = (zero >= 3) & (np.asarray(shard) > 1)
    last = stage == p - 1
    # the root unit: every parameter outside the blocks (torchtitan fully_shard(model) last): the word embedding
    # and learned positions on the first stage, the final norm and the head (a tied one: the same matrix) on the last
    positions = model.embedding_parameters() - model.vocab_size * model.hidden_size
    root = np.where(last, model.vocab_size * model.hidden_size / t + model.norm_parameters(), 0.0)
    root = root + _root_embedding(model, t, stage, last) + np.where(stage == 0, positions, 0.0)
    dense_layer, moe_layer = _layer_weights(model, t, ep)
    layer = np.maximum(dense_layer, moe_layer) if model.is_moe else dense_layer
    all_gather = (np.maximum(root, layer) + layer + layer / shard) * ps.activation_bytes
    return np.where(sharded, grads, 0.0), np.where(sharded, all_gather, 0.0)


def _idle_pools(reduce_scatter_pool, all_gather_pool, alive_grads):
    """Side-stream bytes reserved but not allocated while `alive_grads` bytes of the gradient shards exist."""
    return np.maximum(reduce_scatter_pool - alive_grads, 0.0) + all_gather_pool


# --- MoE buffers kept for the run ------------------------------------------------------------------------------------
def moe_run_buffer_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """Buffers a stage with MoE layers allocates once and keeps for the run (alive in every phase)."""
    # megatron/core/transformer/moe/token_dispatcher.py MoEAllGatherTokenDispatcher.token_dispatch:
    # gather_from_sequence_parallel_region(hidden_states, group=tp_ep_group, use_global_buffer=True) writes the
    # etp x ep group's tokens (each GPU's tokens / t) into GlobalMemoryBuffer "mpu" (megatron/core/utils.py
    # get_tensor: allocated once, kept for the run); a stage with MoE layers holds it, the group of one skips it
    gathered_tokens = step.tokens / step.t * step.et * step.e
    moe_gather_buffer = np.where(
        (step.et * step.e > 1) & step.recipe.moe_allgather_dispatcher & model.is_moe,
        gathered_tokens * model.hidden_size * step.act, 0.0,
    )
    # Megatron --moe-grouped-gemm (TEGroupedMLP): TE's general_grouped_gemm spreads the experts' GEMMs over its
    # compute streams, each with its own cuBLAS workspace, allocated on first use and cached (lru_cache)
    grouped_gemm_workspaces = (
        TE_COMPUTE_STREAMS * TE_CUBLAS_WORKSPACE_BYTES if training.moe_grouped_gemm and model.is_moe else 0.0
    )
    return moe_gather_buffer + grouped_gemm_workspaces
