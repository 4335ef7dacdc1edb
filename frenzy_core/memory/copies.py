"""Weight copies alive beside the parameters: autocast's cached compute-dtype copies, the layers ZeRO-3 / FSDP
gather, the one weight a quantised base dequantizes, Transformer Engine's cached fp8 weights.

>>> from frenzy_core.models import ZOO
>>> zero3_gathered_elements(ZOO["gpt2"], TrainingSpec(framework="fsdp2", global_batch=8), Parallelism(dp=8)) > 0
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from frenzy_core.memory.sizes import FP8_BYTES
from frenzy_core.memory.states import _layer_weights, _root_embedding, _stage_layers, fp8_linear_parameters
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import Recipe, run_recipe
from frenzy_core.training import Parallelism, PrecisionSetup, TrainingSpec

if TYPE_CHECKING:
    from frenzy_core.memory.step import Step


def _autocast_copy_bytes(recipe: Recipe, ps: PrecisionSetup) -> int:
    return ps.compute_copy_bytes if recipe.autocast else 0


def _compute_copies(model, recipe, ps, zero, t, p, castable, last, full_recompute, ep, stage, etp=None, shard=2.0,
                    params_offloaded=False, layout=(0, 0, 1), stage_layers=None, layer_weights=None):
    """(weight copies in the compute dtype at backward start, copies of the one layer being recomputed).

    Without ZeRO-3: autocast's cached bf16 copy of every castable weight on the stage, held by autograd; under full
    recomputation (torch.utils.checkpoint, Megatron CheckpointFunction) a checkpointed layer's copies are made again
    when it is recomputed, so at backward start only the LM head outside the checkpoints holds one.
    ZeRO-3 / FSDP: a full weight exists only while its layer is gathered; the gather is in the compute dtype
    (FSDP2 MixedPrecisionPolicy.param_dtype, DeepSpeed's bf16 params), so it is the copy, and the sharded
    parameters have no autocast cache. Gathered: the layer computing plus the one prefetched (FSDP2), or up to
    stage3_max_live_parameters elements (DeepSpeed); on the last stage the LM head's unit too. The second value is
    what a recomputed layer adds: its autocast copies, or (FSDP2) the prefetched block not yet gathered at the loss.
    DeepSpeed over `shard` = 1 rank gathers nothing (the partition is the whole parameter) unless the partition is
    offloaded to the CPU (NoGatherHandle copies it to the GPU). `stage_layers` / `layer_weights`: `_stage_layers`'
    and `_layer_weights(model, t, ep, etp)`'s answers, when the caller has them already.
    """
    copy_bytes = _autocast_copy_bytes(recipe, ps)
    head = np.where(last, model.vocab_size * model.hidden_size / t, 0.0)
    n_dense, n_moe = _stage_layers(model, p, stage, *layout) if stage_layers is None else stage_layers
    dense_layer, moe_layer = _layer_weights(model, t, ep, etp) if layer_weights is None else layer_weights
    largest = np.where(n_moe > 0, np.maximum(dense_layer, moe_layer), dense_layer)  # the stage's largest layer
    layer_castable = largest - 2 * model.norm_parameters()
    if zero < 3:
        at_backward_start = (head if full_recompute else castable) * copy_bytes
        return at_backward_start, layer_castable * copy_bytes
    # ZeRO-3 / FSDP gather whole layers: the largest one (ModelSpec.max_layer_parameters at t = ep = 1)
    stage_layer_weights = n_dense * dense_layer + n_moe * moe_layer
    gathered = np.minimum(recipe.zero3_gathered_layers * largest, stage_layer_weights)
    if recipe.max_live_parameters:
        # DeepSpeed (partitioned_param_coordinator.py): the forward's last max(max_live, max_reuse / 2) elements, LM
        # head and, once the whole model fits, the embedding among them (real DeepSpeed: bench/deepspeed_zero3_cpu.py)
        # DeepSpeed keeps whole modules: at least the forward's last one, the LM head
        window = np.maximum(np.maximum(recipe.max_live_parameters, recipe.max_reuse_distance / 2), head)
        gathered = np.minimum(window, stage_layer_weights + head + _root_embedding(model, t, stage, last))
        head = 0.0 * head
    # torchtitan apply_fsdp keeps the last block unsharded after forward; the next block is prefetched only from a
    # block's pre_backward, so while the loss' backward runs fewer layers are gathered than in a block's backward
    at_loss = gathered
    if recipe.zero3_layers_at_loss:
        at_loss = np.minimum(recipe.zero3_layers_at_loss * largest, gathered)
    if recipe.pipeline_keeps_blocks_unsharded:  # torchtitan with PP: no block reshards between micro-batches
        gathered = np.where(p > 1, stage_layer_weights, gathered)
        at_loss = np.where(p > 1, stage_layer_weights, at_loss)
    if recipe.root_unit_unsharded:  # the root unit's embedding (untied: a matrix of its own) stays unsharded too
        head = head + _root_embedding(model, t, stage, last)
    if recipe.zero3_no_gather_unsharded and not params_offloaded:
        # partition_parameters.py _no_gather_coalesced -> NoGatherHandle: param.data = ds_tensor.data.to(device), the
        # same tensor when the partition is already on the GPU
        one_rank = np.asarray(shard) == 1
        gathered, at_loss, head = (np.where(one_rank, 0.0, x) for x in (gathered, at_loss, head))
    return (at_loss + head) * ps.activation_bytes, (gathered - at_loss) * ps.activation_bytes


def zero3_gathered_elements(model: ModelSpec, training: TrainingSpec, par: Parallelism | None = None) -> float:
    """Parameter elements the detailed method counts as gathered (unsharded) at the start of backward on the last
    pipeline stage under ZeRO-3 / FSDP, LM head included: the `transient` term beside DeepSpeed's bucket.

    >>> from frenzy_core.models import ZOO
    >>> ds = TrainingSpec(framework="deepspeed", zero_stage=3, global_batch=8)
    >>> ZOO["gpt2"].parameter_count() - zero3_gathered_elements(ZOO["gpt2"], ds, Parallelism(dp=8))  # all but wpe, ln_f
    787968.0
    >>> zero3_gathered_elements(ZOO["gpt2"], ds, Parallelism(dp=1))  # one rank: the partition is the parameter
    0.0
    """
    par = par or Parallelism()
    recipe = run_recipe(training)
    ps = recipe.precision_setup(training.precision, training)
    p = float(par.pp)
    at_loss, _ = _compute_copies(model, recipe, ps, 3, float(par.tp), p, 0.0, np.asarray(True),
                                 training.recompute == "full", float(par.ep), p - 1, float(par.expert_tp),
                                 float(par.dp * par.cp), training.offload == "params",
                                 (par.first_stage_layers, par.last_stage_layers, par.vp))
    return float(at_loss) / ps.activation_bytes


def stage_weight_copies(step: Step, model: ModelSpec, training: TrainingSpec, stage, last, castable, stage_layers,
                        layer_weights):
    """(weight copies alive while the loss' backward runs, what recomputing a layer adds) on a stage: autocast's
    copies or ZeRO-3's gathered layers (`_compute_copies`), or under a quantised base the one dequantised weight.
    `stage_layers` / `layer_weights`: `_stage_layers`' and `_layer_weights(model, t, ep, etp)`'s answers."""
    if training.base_quant != "none":
        return dequantised_weight_bytes(step, model, training, last), 0.0
    return _compute_copies(
        model, step.recipe, step.ps, step.zero, step.t, step.p, castable, last, step.full_recompute, step.e, stage,
        step.et, step.shard, training.offload == "params", step.layout, stage_layers, layer_weights,
    )


def dequantised_weight_bytes(step: Step, model: ModelSpec, training: TrainingSpec, last):
    """bitsandbytes MatMul4Bit dequantizes one NF4 weight at a time (again in backward): no cached copies;
    MatMul8bitLt.backward `state.CB.to(ctx.dtype_A, copy=True)`, torchao LinearNF4.backward
    `weight.to(grad_output.dtype)` alike. A quantised head is dequantized for the loss' backward."""
    h, V = model.hidden_size, model.vocab_size
    inner = model.expert_ffn if model.is_moe else model.ffn
    largest_linear = max(h * model.q_dim, h * inner) / step.t
    if training.quant_head:
        largest_linear = np.where(last, np.maximum(largest_linear, V * h / step.t), largest_linear)
    return largest_linear * step.ps.activation_bytes


def fp8_weight_cache_bytes(step: Step, model: ModelSpec, training: TrainingSpec, last, castable):
    """TE caches each linear weight's fp8 cast and its transpose across the micro-batches of a step
    (is_first_microbatch, Megatron passes it): 2 B per linear parameter on the stage; 0 without fp8 linears. With
    fp8 weights (`fp8_params`, TE fp8_model_init) the weight already is its fp8 cast: only the transpose is
    cached, 1 B (Float8Tensor keeps its transpose beside its data for the dgrad GEMM); the weights term
    (`states.stage_model_states`) holds the 1 B data."""
    if not (training.fp8_linears and step.recipe.fp8_saves_casts):  # torchao: no cache (Recipe.fp8_saves_casts)
        return 0.0
    copies = 1 if training.fp8_params else 2
    return fp8_linear_parameters(step, model, last, castable) * copies * FP8_BYTES
