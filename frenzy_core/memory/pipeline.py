"""The activations a pipeline stage holds at once: the layers and micro-batches in flight under 1F1B (Narayanan et
al. 2021, arXiv 2104.04473), what each layer keeps under recomputation (Korthikanti et al. 2022, Sec. 5), the
micro-batch's token ids and masks, and the tables built once per forward.

>>> [float(in_flight_layers(12, 4, 1, 8, rank)) for rank in range(4)]  # 4, 3, 2, 1 micro-batches of 3 layers
[12.0, 9.0, 6.0, 3.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from frenzy_core.memory.activations import layer_activations, op_sac_layer_activations
from frenzy_core.memory.sizes import BF16_BYTES, INDEX_BYTES, MASK_BYTES
from frenzy_core.models import ModelSpec
from frenzy_core.training import PipelineStages, TrainingSpec, stage_layer_counts

if TYPE_CHECKING:
    from frenzy_core.memory.step import Step


def in_flight_layers(num_layers: int, p, vp, micro_batches, stage, first=0, last=0, layers=None):
    """Layers whose activations pipeline rank `stage` holds at once (the micro-batches it has in flight x layers).

    1F1B (Narayanan et al. 2021, arXiv 2104.04473 Sec. 2.2): rank i runs p - i forwards before its first
    backward: min(p - i, m) micro-batches of its n_i layers (num_layers / p, or the uneven first / last stage's own
    count: `training.stage_layer_counts`). Interleaved 1F1B with vp chunks per rank
    (megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving):
    num_warmup = (p - i - 1) x 2 + (vp - 1) x p chunk-forwards (capped by m x vp), plus the one in progress, each of
    n_i / vp layers; on rank 0 of an even split that is num_layers x (1 + (p - 1) / (p vp)), Megatron's
    theoretical_memory_usage.py interleaved_schedule_memory_penalty. `layers`: the stage's
    `training.stage_layer_counts`, when the caller has it already.

    >>> [float(in_flight_layers(12, 4, vp, 8, rank)) for vp, rank in ((1, 0), (3, 0), (3, 3))]
    [12.0, 15.0, 9.0]
    >>> float(in_flight_layers(126, 16, 1, 64, 0, 7, 7))  # 16 micro-batches of the first stage's 7 layers
    112.0

    An end stage one layer short of whole chunks (`training.lighter_chunk_layout`: Megatron's account-for-embedding /
    loss layout) has its first chunk (stage 0) or its last (stage p - 1) a layer lighter: the chunk-forwards in
    flight on it count one layer less each. Chunk-forward k runs chunk (k // p) mod vp (schedules.py, micro-batch
    groups of p per chunk). Llama-3.1-405B over PP8 x VP8 (2 layers a chunk, 1 in the first stage's first):
    rank 0 has 14 + 56 + 1 = 71 chunk-forwards in flight, 15 of them on chunk 0: 71 x 2 - 15 = 127 layers.

    >>> float(in_flight_layers(126, 8, 8, 192, 0, 15, 15)), float(in_flight_layers(126, 8, 8, 192, 7, 15, 15))
    (127.0, 113.0)
    """
    p, vp, m, stage = (np.asarray(x, dtype=np.float64) for x in (p, vp, micro_batches, stage))
    layers = stage_layer_counts(num_layers, p, stage, first, last) if layers is None else layers
    plain = np.minimum(p - stage, m) * layers
    if not (vp > 1).any():
        return plain
    warmup = (p - stage - 1) * 2 + (vp - 1) * p
    forwards = np.minimum(warmup + 1, m * vp)
    first, last = np.asarray(first, dtype=np.float64), np.asarray(last, dtype=np.float64)
    lighter = (((stage == 0) & (first > 0) & (np.mod(first, vp) > 0))
               | ((stage == p - 1) & (last > 0) & (np.mod(last, vp) > 0)))
    chunk = np.ceil(layers / vp)  # the stage's whole chunks (one of them a layer lighter where `lighter`)
    light_chunk = np.where(stage == 0, 0.0, vp - 1)
    group = p * vp  # chunk-forwards before the schedule returns to chunk 0
    on_light = forwards // group * p + np.clip(forwards % group - light_chunk * p, 0.0, p)
    interleaved = np.where(lighter, forwards * chunk - on_light, forwards * layers / vp)
    return np.where(vp > 1, interleaved, plain)


def _candidate_stages(model: ModelSpec, pipeline: PipelineStages):
    """Stages that bound every stage's peak (`training.bounding_stages`): the first (most micro-batches in flight),
    the first middle one when the first stage has its own layer count, for dense-first MoE models the stage holding
    layer first_k_dense and the next (the first stages with MoE layers), and the last (LM head)."""
    return pipeline.bounding(model.first_k_dense if model.is_moe else 0)


# --- one layer, per micro-batch ---------------------------------------------------------------------------------------
def layer_footprint(step: Step, model: ModelSpec, training: TrainingSpec, moe_layer: bool):
    """(all activations of one layer, what it keeps until its backward), bytes per micro-batch."""
    s, h, t, tokens, sp_divisor = training.seq_len, model.hidden_size, step.t, step.tokens, step.sp_divisor
    layer = layer_activations(model, training, step.blocks, moe_layer)
    full = tokens * (layer.replicated / sp_divisor + layer.split / t + layer.scores * s / t + layer.routed)
    # MoE routed copies: each GPU's tokens / t gathered over etp x ep ranks, k / ep of them to its experts: the
    # `routed` bytes per token count etp / t times (once with etp = t, Megatron's default)
    full = full + tokens * layer.routed * (step.et / t - 1)
    if training.recompute == "full":
        # Korthikanti Sec. 5 (full recomputation): each layer keeps only its input (the residual stream); the
        # layer being recomputed in backward holds its full set once (phase "backward-recompute").
        kept = tokens * step.resid * h / sp_divisor
    elif training.recompute == "op-sac":
        sac = op_sac_layer_activations(model, training, step.blocks, moe_layer)
        kept = tokens * (sac.replicated / sp_divisor + sac.split / t)
    else:
        kept = full
    if step.full_recompute and training.recompute_every > 1:
        # only every k-th layer is checkpointed (torchtitan ac_freq, apply_ac); the others keep their full set
        k = training.recompute_every
        kept = kept / k + full * (1 - 1 / k)
    return full, kept


def layer_footprints(step: Step, model: ModelSpec, training: TrainingSpec):
    """(`layer_footprint` of a dense layer, of an MoE layer): the same layer twice for a model of one kind."""
    moe_terms = layer_footprint(step, model, training, True) if model.is_moe else None
    dense_terms = layer_footprint(step, model, training, False) if model.num_dense_layers else moe_terms
    return dense_terms, moe_terms or dense_terms


# --- outside the layers -----------------------------------------------------------------------------------------------
def micro_batch_input_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """What each micro-batch in flight keeps outside its layers: its int64 token ids (kept by the embedding's
    backward) and the embedding dropout's mask."""
    token_ids = step.tokens * INDEX_BYTES
    embedding_dropout_mask = (step.tokens * MASK_BYTES * model.hidden_size / step.sp_divisor
                              if training.dropout > 0 else 0.0)
    return token_ids + embedding_dropout_mask


def stage_table_bytes(step: Step, model: ModelSpec, training: TrainingSpec) -> float:
    """Tables built once per forward and shared by every layer. With p > 1 we count them once per stage, as
    Megatron caches its rotary table and fuses the causal mask (with one micro-batch in flight, as traced, this is
    exact)."""
    s = training.seq_len
    # one bool s x s (this GPU's rows)
    causal_mask = s * s / step.c * MASK_BYTES if training.attention == "eager" else 0.0
    rope_tables = 2 * s * model.head_dim * BF16_BYTES if model.position_kind == "rotary" else 0.0  # cos and sin
    # HF builds the sliding-window mask beside the causal one (masking_utils create_sliding_window_causal_mask,
    # Gemma2Model.forward's mask mapping); eager computes the full s x s scores and masks them
    sliding_mask = causal_mask if model.num_sliding_layers else 0.0
    return causal_mask + sliding_mask + rope_tables + packed_mask_bytes(step, training)


def packed_mask_bytes(step: Step, training: TrainingSpec):
    """The document mask of packed rows (TrainingSpec.packed), where the stack materialises it (Recipe
    packed_mask_materialised: Hugging Face's SDPA path): one bool per (sample, query, key) of the micro-batch, this
    GPU's queries against every key, built once per forward and passed to every layer's SDPA, which keeps it for
    backward (transformers 5.24.0 masking_utils.sdpa_mask: `mask_function(*_non_vmap_expansion_sdpa(...))` gives
    (batch, 1, q, kv), `packed_sequence_mask[batch_idx, q_idx] == packed_sequence_mask[batch_idx, kv_idx]`).
    Stacks that pass cu_seqlens (flash-attn varlen, Transformer Engine THD) or a flex-attention BlockMask (torchtune
    with torch >= 2.5: int32 block tables, (s / 128)^2 per sample) hold no s x s tensor: 0 here. Eager attention
    already counts its mask (`stage_table_bytes`).

    >>> from frenzy_core.models import ZOO
    >>> from frenzy_core.memory.step import step_context
    >>> tr = TrainingSpec(seq_len=1024, global_batch=2, micro_batch=2, framework="hf", packed=True)
    >>> float(packed_mask_bytes(step_context(ZOO["gpt2"], tr, 1, 1, 1, 2), tr))  # 2 x 1024 x 1024 x 1 B
    2097152.0
    """
    if not (training.packed and step.recipe.packed_mask_materialised) or training.attention == "eager":
        return 0.0
    return step.b * training.seq_len * training.seq_len / step.c * MASK_BYTES


# --- on a stage -------------------------------------------------------------------------------------------------------
def stage_activation_terms(step: Step, model: ModelSpec, training: TrainingSpec, stage, stage_count, stage_layers,
                           footprints, micro_batch_inputs) -> dict[str, object]:
    """The stage's activation terms of the phase table: its layers in flight (each keeping `layer_footprint`'s
    kept set), the micro-batches' inputs, and what recomputing one layer adds. `stage_count` / `stage_layers`:
    the stage's layers (`PipelineStages.counts`, `states._stage_layers`); `footprints`: `layer_footprints`."""
    n_dense, n_moe = stage_layers
    (dense_all, dense_kept), (moe_all, moe_kept) = footprints
    in_flight = np.minimum(step.p - stage, step.micro_batches)  # 1F1B: stage i holds min(p - i, m) (Narayanan 2021)
    layers_in_flight = in_flight_layers(model.num_layers, step.p, step.v, step.micro_batches, stage,
                                        step.first_layers, step.last_layers, stage_count)
    # the stage's mix of dense and MoE layers (DeepSeek: first_k_dense dense layers on the first stages)
    moe_share = n_moe / (n_dense + n_moe)
    layer_bytes = np.where(n_moe > 0, np.maximum(dense_all, moe_all), dense_all)  # recomputed
    kept_layer = (1 - moe_share) * dense_kept + moe_share * moe_kept
    if training.activation_offload:
        # torchtune training/_activation_offloading.py OffloadActivations (at bd2a0fc7): every saved tensor of
        # >= 1 KiB that is not a parameter goes to the host in forward and is brought back for its backward;
        # the output head runs under NoOpManager (kept). One layer's set is on the GPU at a time (the stash of
        # the layer being copied, or the one being brought back for its backward).
        layers_in_flight = np.minimum(layers_in_flight, 1.0)
    return {
        "layer_activations": layers_in_flight * kept_layer,
        "micro_batch_inputs": in_flight * micro_batch_inputs,
        "recomputed_layer": layer_bytes - kept_layer,  # its full set once, beside what it kept
    }
