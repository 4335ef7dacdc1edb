"""Model states: weights, gradients and optimizer states per GPU, sharded by ZeRO / FSDP / the distributed optimizer,
on each pipeline stage; the optimizer step's own temporaries (foreach AdamW, DeepSpeed ZeRO's flatten-and-cast).

ZeRO (Rajbhandari et al., arXiv 1910.02054) Sec. 5.1-5.3 shards the optimizer states (stage 1), the gradients
(stage 2) and the parameters (stage 3) over the data-parallel ranks (`model_state_bytes`). A stage's parameters
come from its layers (`_stage_layers`, `_layer_weights`, `_stage_parameters`); `stage_model_states` turns them into
bytes, LoRA, offload and optimizer-in-backward included.

>>> from frenzy_core.training import PRECISIONS
>>> [float(x) for x in model_state_bytes(1.0, PRECISIONS["amp"], 8, 0, 1)]  # 4 + 4 + (0 + 8) bytes per parameter
[4.0, 4.0, 8.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from frenzy_core.errors import SpecError
from frenzy_core.frameworks import get as get_framework
from frenzy_core.memory.adapters import frozen_weight_bytes, lora_head_parameters, lora_parameters
from frenzy_core.memory.loss import head_runs_per_chunk
from frenzy_core.memory.sizes import FP8_BYTES, FP32_BYTES
from frenzy_core.models import ModelSpec
from frenzy_core.precision import PRECISIONS
from frenzy_core.recipes import Recipe, run_recipe
from frenzy_core.training import PipelineStages, PrecisionSetup, TrainingSpec

if TYPE_CHECKING:  # the step context imports this module
    from frenzy_core.memory.step import Step


def model_state_bytes(
    num_params: float, precision: PrecisionSetup, optimizer_state_bytes: int, zero_stage: int, dp
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU for `num_params` parameters, ZeRO-sharded over `dp`.

    ZeRO (Rajbhandari et al., arXiv 1910.02054) Sec. 5.1-5.3 / Figure 1: stage 1 (P_os) shards the optimizer states
    (with the fp32 master weights, ZeRO's K) over N_d, stage 2 (P_os+g) also the gradients, stage 3 (P_os+g+p) also
    the parameters. With (2 + 2 + K) Psi, K = 12, Psi = 7.5B, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
    """
    d = np.asarray(dp, dtype=np.float64)
    optimizer = num_params * (precision.master_bytes + optimizer_state_bytes)
    gradients = num_params * precision.grad_bytes
    weights = num_params * precision.param_bytes
    optimizer = optimizer / d if zero_stage >= 1 else optimizer + 0 * d
    gradients = gradients / d if zero_stage >= 2 else gradients + 0 * d
    weights = weights / d if zero_stage >= 3 else weights + 0 * d
    return weights, gradients, optimizer


def effective_zero_stage(training: TrainingSpec) -> int:
    """The ZeRO stage a framework runs: FSDP2's fully_shard is ZeRO-3 (zero_stage 0 means its default)."""
    if get_framework(training.framework).fully_shards and training.zero_stage == 0:
        return 3
    return training.zero_stage


# --- parameters on a pipeline stage ----------------------------------------------------------------------------------
def _stage_layers(model: ModelSpec, p, stage, first=0, last=0, vp=1, n=None, pipeline: PipelineStages | None = None):
    """(dense layers, MoE layers) on pipeline stage `stage` of p: its `training.stage_layer_counts` share (the
    uneven first / last stages' own counts, else num_layers / p), in Megatron's order (`stage_leading_layers`:
    without interleaving stage s holds consecutive layers, as `ModelSpec.layers_parameters(start, stop)` splits
    them; DeepSeek's first_k_dense layers sit on stage 0). `n` (that share) and `pipeline` (the layout's
    `PipelineStages`): what the caller has already."""
    pipeline = PipelineStages(model.num_layers, p, first, last, vp) if pipeline is None else pipeline
    n = pipeline.counts(stage) if n is None else n
    if not model.is_moe:
        return n, 0.0 * n
    dense = pipeline.leading(model.first_k_dense, stage)
    return dense, n - dense


def _layer_weights(model: ModelSpec, t, ep=1, etp=None):
    """(dense layer, MoE layer) parameters per GPU: linears split by t, routed experts by ep x etp (etp = t unless
    given), the two hidden-size norms replicated. With t = ep = 1 these are `layer_parameters` of a dense and of an
    MoE layer."""
    etp = t if etp is None else etp
    norms = 2 * model.norm_parameters()
    dense = (model.attention_parameters() + model.dense_mlp_parameters()) / t + norms
    if not model.is_moe:
        return dense, dense
    routed = model.routed_expert_parameters()
    moe = (model.attention_parameters() + model.moe_mlp_parameters() - routed) / t + routed / (ep * etp) + norms
    return dense, moe


def _stage_parameters(model: ModelSpec, t, p, stage, ep=1, etp=None, layout=(0, 0, 1), stage_layers=None,
                      layer_weights=None):
    """(dense parameters, expert parameters, autocast-castable parameters) on pipeline stage `stage` of p.

    Megatron splits each layer's linears and the (vocab-parallel) embedding and LM head by t; norms and learned
    positions are replicated. The first stage holds the embedding, the last the final norm and the LM head; with
    tied embeddings and p > 1 the last stage keeps its own copy of the word embedding (Megatron
    `setup_embeddings_and_output_layer`). Biases of row-parallel linears are replicated in Megatron; counting them
    split by t is off by h per layer (negligible). MoE experts are split over ep x etp (Megatron's expert parallelism,
    expert_tensor_parallel_size defaulting to t: megatron/core/transformer/moe/experts.py), the router and shared
    experts by t. Each stage counts its own layers (`_stage_layers`, `layout` = (first, last, vp)): dense-first MoE
    models and uneven pipeline stages differ per stage. `stage_layers` (`_stage_layers`' answer) and `layer_weights`
    (`_layer_weights(model, t)`'s) spare the caller's loop over stages recomputing them.
    """
    h, V = model.hidden_size, model.vocab_size
    n_dense, n_moe = _stage_layers(model, p, stage, *layout) if stage_layers is None else stage_layers
    routed = model.routed_expert_parameters() if model.is_moe else 0
    # ep = 1: the routed experts are added below, split by ep
    dense_layer, moe_layer = _layer_weights(model, t) if layer_weights is None else layer_weights
    moe_layer_no_experts = moe_layer - routed / t
    layer_replicated = 2 * model.norm_parameters()
    word_embedding = V * h
    positions = model.embedding_parameters() - word_embedding
    final_norm = model.norm_parameters()
    first, last, single = stage == 0, stage == p - 1, p == 1
    layers = n_dense * dense_layer + n_moe * moe_layer_no_experts
    embedding_share = word_embedding / t  # the vocab-parallel embedding's (or LM head's) rows on this GPU
    # the LM head: an untied one, or the last stage's copy of a tied one (p == 1: the embedding itself)
    own_head = np.where(model.tie_embeddings & single, 0.0, embedding_share)
    params = layers + np.where(first, embedding_share + positions, 0.0) + np.where(last, final_norm + own_head, 0.0)
    # autocast casts the linears and the LM head's weight (tied: the embedding matrix, used by F.linear)
    expert_params = n_moe * routed / (ep * (t if etp is None else etp))
    castable = (
        n_dense * (dense_layer - layer_replicated) + n_moe * (moe_layer_no_experts - layer_replicated)
        + expert_params + np.where(last, embedding_share, 0.0)
    )
    return params, expert_params, castable


def _root_embedding(model: ModelSpec, t, stage, last):
    """The root unit's embedding matrix on `stage` (untied: a matrix of its own; tied and p == 1: it is the head)."""
    embedding = model.vocab_size * model.hidden_size / t
    return np.where((stage == 0) & (~last | (not model.tie_embeddings)), embedding, 0.0)


# --- the bytes on a stage --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StageStates:
    """Model-state bytes on one pipeline stage and the parameters its optimizer trains (arrays over the stages x
    splits, or floats)."""

    weights: object  # parameters this GPU holds (LoRA: the frozen base, quantised or not, and the adapters)
    gradients: object  # every gradient of the step (ZeRO-2/3: this rank's shard; optimizer_in_backward: one tensor)
    optimizer: object  # optimizer states + fp32 master weights (ZeRO-1 / the distributed optimizer: sharded)
    trained: object  # trained parameters outside the routed experts (LoRA: the adapters)
    trained_experts: object  # trained routed-expert parameters
    step_temporary: float  # bytes per updated parameter inside optimizer.step() (foreach AdamW; 0 when offloaded)
    # FSDP1 (fsdp1_gradient_terms): the unsharded flat gradients no_sync keeps through gradient accumulation (None:
    # the stack keeps `gradients` then too), and the two unit gradients of one FlatParameter's backward
    accumulated_gradients: object = None
    unit_gradient: object = 0.0


def _adapter_states(step: Step, training: TrainingSpec) -> tuple[PrecisionSetup, float]:
    """(precision, optimizer-state bytes per parameter) of the LoRA adapters: the run's, or fp32 where the stack
    keeps fp32 adapters on a 16-bit base (PEFT, `Recipe.fp32_lora_adapters`: fp32 weights, gradients and AdamW
    moments, which torch.optim creates in the parameter's dtype)."""
    ps = step.ps
    if not (step.recipe.fp32_lora_adapters and ps.param_bytes < FP32_BYTES):
        return ps, step.opt_state
    fp32 = PRECISIONS["fp32"]
    scale = training.optimizer_bytes(fp32)[0] / training.optimizer_bytes(ps)[0] if step.opt_state else 0.0
    return fp32, step.opt_state * scale


def fp8_linear_parameters(step: Step, model: ModelSpec, last, castable):
    """The parameters of the stage's fp8 linears: every castable weight but the LM head (which TE leaves bf16)."""
    return castable - np.where(last, model.vocab_size * model.hidden_size / step.t, 0.0)


def stage_model_states(step: Step, model: ModelSpec, training: TrainingSpec, last, stage_layers,
                       parameters) -> StageStates:
    """Weights, gradients and optimizer states on a stage: `parameters` is `_stage_parameters`' answer and
    `stage_layers` `_stage_layers`'. Experts' states shard over the expert-data-parallel group: tp x dp x cp /
    (etp x ep) ranks, dp x cp / ep with etp = t (parallel_state initialize_model_parallel,
    get_expert_data_parallel_group): `step.expert_shard`."""
    params, expert_params, castable = parameters
    ps, t = step.ps, step.t
    dense_states = model_state_bytes(params, ps, step.opt_state, step.shard_optimizer, step.shard)
    expert_states = model_state_bytes(expert_params, ps, step.opt_state, step.shard_optimizer, step.expert_shard)
    weights, grads, optimizer = (a + x for a, x in zip(dense_states, expert_states, strict=True))
    if training.lora_rank:  # only the adapters train; the frozen base keeps its weights
        n_dense, n_moe = stage_layers
        lora = (n_dense + n_moe) * lora_parameters(model, training.lora_rank, training.lora_targets,
                                                   training.lora_variant) / t
        lora = lora + np.where(last, lora_head_parameters(model, training) / t, 0.0)
        frozen = frozen_weight_bytes(model, ps, training.base_quant, params + expert_params, castable, last, t,
                                     training.quant_head)
        weights, grads, optimizer = model_state_bytes(lora, *_adapter_states(step, training), step.shard_optimizer,
                                                      step.shard)
        weights = weights + frozen / (step.shard if step.zero >= 3 else 1.0)
        params, expert_params = lora, 0.0
    if training.fp8_params:
        # Megatron --fp8-param-gather builds the TE linears under fp8_model_init: their weights are fp8 (1 B), the
        # embedding, norms and LM head stay bf16 (ZeRO-3 / Megatron-FSDP: this rank's shard of them)
        fp8_weights = fp8_linear_parameters(step, model, last, castable)
        weights = weights - fp8_weights * (ps.param_bytes - FP8_BYTES) / (step.shard if step.zero >= 3 else 1.0)
    if training.offload != "none":  # ZeRO-Offload: master, Adam states, gradients and the step itself live on the CPU
        grads, optimizer, step_temporary = 0.0 * grads, 0.0 * optimizer, 0.0
    else:
        step_temporary = step.opt_temp
    if training.optimizer_in_backward:
        # torchtune _setup_optimizer(optimizer_in_bwd=True): training.register_optim_in_bwd_hooks steps each
        # parameter in its post-accumulate-grad hook and sets its .grad to None: one gradient at a time
        one = largest_trained_parameter(model, training, t)
        grads = np.minimum(grads, one * ps.grad_bytes)
        params, expert_params = np.minimum(params + expert_params, one), 0.0
    if training.offload == "params":  # ZeRO-Infinity / FSDP2 CPUOffloadPolicy: only gathered layers are on the GPU
        weights = 0.0 * weights
    accumulated, unit_gradient = None, 0.0
    if step.recipe.fsdp1_flat_parameters:
        grads, accumulated, unit_gradient = fsdp1_gradient_terms(step, model, training, last, stage_layers,
                                                                 parameters)
    return StageStates(weights, grads, optimizer, params, expert_params, step_temporary, accumulated, unit_gradient)


# --- FSDP1's FlatParameter gradients (frenzy_core/frameworks/fsdp1.py) ------------------------------------------------
def fsdp1_trained_unit_elements(model: ModelSpec, training: TrainingSpec, t, last, stage_layers, parameters):
    """(elements, largest unit's elements) of the FSDP1 FlatParameters on a stage that hold a trained parameter.

    The units: one per transformer block (LitGPT auto_wrap_policy={Block}; accelerate's TRANSFORMER_BASED_WRAP of the
    decoder layers) and the root, what no block holds (embedding, final norm, head). Under use_orig_params a unit with
    any trainable parameter gets a gradient over all of it, frozen base included (FullyShardedDataParallel docstring:
    "equivalent to not freezing those parameters"): full training, every unit; LoRA, the blocks when an adapter sits
    in them and the root only with an adapter on the head. `parameters` is `_stage_parameters`' answer (t-split, ep
    = 1), `stage_layers` `_stage_layers`'.

    >>> from frenzy_core.models import ZOO
    >>> m = ZOO["gpt2"]; lora = TrainingSpec(framework="litgpt", precision="bf16", lora_rank=8, lora_targets="q,v")
    >>> n, u = fsdp1_trained_unit_elements(m, lora, 1.0, True, _stage_layers(m, 1, 0), _stage_parameters(m, 1, 1, 0))
    >>> float(u) == m.layer_parameters() + 8 * (768 + 768) * 2  # one block and its q, v adapters (A and B each)
    True
    """
    params, expert_params, _ = parameters
    n_dense, n_moe = stage_layers
    dense_layer, moe_layer = _layer_weights(model, t)
    routed = model.routed_expert_parameters() if model.is_moe else 0
    blocks = n_dense * dense_layer + n_moe * (moe_layer - routed / t) + expert_params
    root = params + expert_params - blocks  # the embedding, positions, final norm and head on this stage
    largest_block = np.where(n_moe > 0, np.maximum(dense_layer, moe_layer), dense_layer)
    block_adapters, head_adapters, blocks_train, root_trains = 0.0, 0.0, True, True
    if training.lora_rank:
        block_adapters = lora_parameters(model, training.lora_rank, training.lora_targets, training.lora_variant) / t
        head_adapters = np.where(last, lora_head_parameters(model, training) / t, 0.0)
        blocks_train, root_trains = bool(block_adapters), bool(lora_head_parameters(model, training))
    block_units = blocks + (n_dense + n_moe) * block_adapters if blocks_train else 0.0 * blocks
    root_unit = root + head_adapters if root_trains else 0.0 * root
    one_block = np.where(n_dense + n_moe > 0, largest_block + block_adapters, 0.0) if blocks_train else 0.0
    return block_units + root_unit, np.maximum(one_block, root_unit)


# the flat gradients one FlatParameter's backward holds at its end: the views' gradients and their concatenation
FSDP1_UNIT_GRADIENT_COPIES = 2


def fsdp1_gradient_terms(step: Step, model: ModelSpec, training: TrainingSpec, last, stage_layers, parameters):
    """(sharded gradients, unsharded gradients under accumulation, one unit's backward) bytes on a stage under FSDP1
    (frenzy_core/frameworks/fsdp1.py), over the FlatParameters holding a trained parameter
    (`fsdp1_trained_unit_elements`: n elements, the largest unit u):

    * sharded: _post_backward_hook's reduce-scatter leaves 1 / d of each flat gradient, cast to the parameters'
      dtype (`_cast_grad_to_param_dtype`): n / d x grad bytes, what the optimizer step holds;
    * accumulated: inside FullyShardedDataParallel.no_sync (LitGPT's `fabric.no_backward_sync`, accelerate's
      `accumulate`) _post_backward_hook returns before reducing, so every unit keeps its unsharded flat gradient in
      the compute dtype from the step's first micro-batch to the syncing one: n x compute bytes;
    * one unit's backward: its views' gradients wait in the input buffer of the split's backward
      (SplitWithSizesBackward, one per FlatParameter), which concatenates them into the new flat gradient:
      FSDP1_UNIT_GRADIENT_COPIES x u x compute bytes.
    """
    n, u = fsdp1_trained_unit_elements(model, training, step.t, last, stage_layers, parameters)
    ps = step.ps
    return n / step.shard * ps.grad_bytes, n * ps.activation_bytes, FSDP1_UNIT_GRADIENT_COPIES * u * ps.activation_bytes


def gradient_bucket_bytes(step: Step) -> float:
    """DeepSpeed's contiguous gradient bucket, allocated in backward() (stage_1_and_2.py / stage3.py); 0 for the
    stacks without one (`Recipe.reduce_bucket_elements`) and without ZeRO."""
    return step.recipe.reduce_bucket_elements * step.ps.param_bytes if step.zero >= 1 else 0.0


def optimizer_step_terms(step: Step, training: TrainingSpec, states: StageStates):
    """(gradients, temporary) bytes alive in optimizer.step(): every gradient and, per parameter this GPU's optimizer
    updates, the foreach temporary; DeepSpeed ZeRO's largest moment instead (`zero_step_terms`)."""
    # the params this GPU's optimizer updates
    updated_params = (states.trained / step.shard + states.trained_experts / step.expert_shard
                      if step.shard_optimizer >= 1 else states.trained + states.trained_experts)
    # foreach AdamW: one temporary per param
    grads, temporary = states.gradients, updated_params * states.step_temporary
    if step.recipe.zero_fp32_grad_partition and step.zero >= 1 and training.offload == "none":
        grads, temporary = zero_step_terms(step.recipe, step.ps, step.zero, grads, updated_params,
                                           states.step_temporary, gradient_bucket_bytes(step))
    return grads, temporary


def backward_gradients(step: Step, gradients, accumulated=None):
    """Gradients alive at the start of backward, step >= 2: they exist if they persist (Megatron's fp32 main-grad
    buffer, i.e. a master copy), if an earlier micro-batch of this step already produced them, or if the recipe
    says so (grads_alive_at_peak; FSDP2's shards are freed by zero_grad, their blocks stay reserved). `accumulated`:
    what an earlier micro-batch left where it is not `gradients` (FSDP1's unsharded flat gradients under no_sync)."""
    if accumulated is not None:  # zero_grad(set_to_none) freed the last step's: only this step's micro-batches'
        return np.where(step.micro_batches > 1, accumulated, 0.0)
    grads_persist = step.ps.master_bytes > 0 or step.recipe.grads_alive_at_peak
    if step.recipe.zero12_grads_freed_in_step and step.zero in (1, 2):
        grads_persist = False  # DeepSpeed ZeRO-1/2: step() freed them; only earlier micro-batches' remain
    return gradients if grads_persist else np.where(step.micro_batches > 1, gradients, 0.0)


def tied_embedding_gradient_bytes(step: Step, model: ModelSpec, training: TrainingSpec, last):
    """Bytes beyond `gradients_at_step` when a tied embedding / head matrix gets its last gradient, at the end of
    backward, beside every other gradient.

    The matrix feeds two ops, so its AccumulateGrad node gets two gradients, summed in that node's InputBuffer
    (torch/csrc/autograd/input_buffer.cpp `accumulate`) before `.grad` exists. The head's arrives early as a
    transposed view (F.linear's weight gradient: TBackward of mm's [h, V] result), and waits through the whole
    backward; the lookup's backward, the last op (aten `embedding_dense_backward`: a dense V x h matrix in the
    weight's dtype), makes the second. The view shares its storage with its base, so `can_accumulate_inplace`
    refuses it and the sum is out of place: three V x h / t matrices at once (measured on real CPU tensors: one
    `aten::add` of V x h in the backward, tests/test_memory_phases.py). A head run per logit chunk (torchtune's
    chunked output) has summed its own views into a fresh tensor by then, and the lookup's gradient is added in
    place: two matrices (memory.loss.chunked_head_gradient_bytes). The sum becomes `.grad` (plain stacks: it is
    the matrix's own share of `gradients_at_step`) or is folded into a persistent fp32 main grad (a master copy:
    all three are extra). Zero untied (the lookup's gradient is the embedding's own `.grad`), with a frozen
    embedding (LoRA), with the embedding and the head on different stages (p > 1: each stage has its own copy),
    under ZeRO / FSDP (gradients leave per bucket or unit), and for stacks whose hooks take each gradient away
    (`Recipe.tied_gradients_meet_in_input_buffer`)."""
    if not (step.recipe.tied_gradients_meet_in_input_buffer and model.tie_embeddings) or training.lora_rank \
            or step.zero >= 1:
        return 0.0 * step.p
    matrix = model.vocab_size * model.hidden_size / step.t
    # the two gradients (and their out-of-place sum when the head's is a view)
    alive = 2 if head_runs_per_chunk(step.recipe, training) else 3
    stolen = 0.0 if step.ps.master_bytes > 0 else matrix * step.ps.grad_bytes  # the sum is the matrix's `.grad`
    return np.where((step.p == 1) & last, alive * matrix * step.ps.param_bytes - stolen, 0.0)


# --- the trained tensors (paged optimizers, optimizer in backward) -------------------------------------------------
BNB_PAGED_MIN_ELEMENTS = 100_000  # bitsandbytes get_state_buffer: `p.numel() < 1e5` stays a plain GPU tensor


def _trained_matrices(model: ModelSpec, training: TrainingSpec) -> list[tuple[int, int]]:
    """(elements, count) of the trained tensors: each adapter matrix (LoRA), else each full-training parameter
    group of the model (linears, embedding / head, norms)."""
    h, V, L = model.hidden_size, model.vocab_size, model.num_layers
    if training.lora_rank:
        r = training.lora_rank
        inner = model.ffn
        widths = {"q": (h, model.q_dim), "k": (h, model.kv_dim), "v": (h, model.kv_dim), "o": (model.q_dim, h),
                  "gate": (h, inner), "up": (h, inner), "down": (inner, h), "head": (h, V)}
        if model.mlp_kind != "swiglu":
            widths.pop("gate")
        out = []
        for name in training.lora_target_set & set(widths):
            i, o = widths[name]
            n = 1 if name == "head" else L
            out += [(r * i, n), (r * o, n)]
            if training.lora_variant == "dora":
                out.append((o, n))
        return out
    linears = model.parameter_count() - model.embedding_parameters() - (L * 2 + 1) * model.norm_parameters()
    return [(h * model.ffn, linears / (h * model.ffn)), (V * h, model.embedding_parameters() / (V * h)),
            (model.norm_parameters(), L * 2 + 1)]


def paged_state_fraction(model: ModelSpec, training: TrainingSpec) -> float:
    """Share of the trained elements whose optimizer states a paged bitsandbytes optimizer keeps in managed memory
    (tensors of >= 1e5 elements). LoRA r = 8 on 4,096-wide linears: 32,768-element matrices, none paged.

    >>> from frenzy_core.models import ZOO
    >>> paged_state_fraction(ZOO["llama-2-7b"], TrainingSpec(lora_rank=8, lora_targets="q,v"))
    0.0
    """
    groups = _trained_matrices(model, training)
    total = sum(n * c for n, c in groups)
    paged = sum(n * c for n, c in groups if n >= BNB_PAGED_MIN_ELEMENTS)
    return float(paged / total) if total else 0.0


def largest_trained_parameter(model: ModelSpec, training: TrainingSpec, t) -> float:
    """Elements of the largest trained tensor on a GPU (split by t): the one gradient optimizer_in_backward holds."""
    return max(n for n, _ in _trained_matrices(model, training)) / t


# --- DeepSpeed ZeRO's optimizer step ---------------------------------------------------------------------------------
def zero_step_terms(recipe: Recipe, ps: PrecisionSetup, zero: int, grads, updated_params, opt_temp, bucket=0.0):
    """(gradients, transient) bytes from the end of DeepSpeed ZeRO's backward through its optimizer step: the
    largest of its moments (`bucket`: the reduce bucket's bytes).

    End of backward (stage_1_and_2.py `independent_gradient_partition_epilogue`): every gradient the stage keeps
    (ZeRO-1: all of them, bf16) and the reduce bucket are alive; the epilogue releases the bucket
    (`_release_ipg_buffers`) and the gradients outside this rank's partition (`_clear_param_grad_only`; `step()`'s
    `free_grad_in_param_list(params_not_in_partition)` again). `step()`, per param group: `flat_grad_partition =
    self.flatten(averaged_gradients[i])` (a param-dtype copy of the partition) and `.to(fp32)`, both alive at the
    cast; `del flat_grad_partition`; free the partition's gradients; the optimizer steps on the fp32 gradient (plus
    its own temporary); `.grad = None`. stage3.py `step()`: the same per sub-group of `sub_group_size` elements
    (`_prepare_fp32_grad_for_sub_group`, `_release_sub_group`), while `grad_partitions_flat_buffer` (the partition,
    param dtype) and the bucket (`_setup_for_real_optimizer`) stay allocated.

    >>> from frenzy_core.recipes import get_recipe
    >>> ds = get_recipe("deepspeed"); ps = ds.precision_setup("bf16-master")
    >>> [float(x) for x in zero_step_terms(ds, ps, 2, 200.0, 100.0, 0)]  # ZeRO-2: 2 B + (2 + 4) B per element
    [200.0, 600.0]
    """
    chunk = np.minimum(updated_params, recipe.sub_group_elements) if zero >= 3 and recipe.sub_group_elements else (
        updated_params)
    flatten_and_cast = chunk * (ps.grad_bytes + FP32_BYTES)  # the torch.cat copy and its fp32 cast
    in_optimizer = chunk * (FP32_BYTES + opt_temp)  # the fp32 gradient while the optimizer runs
    if zero >= 3:
        persistent = bucket if recipe.zero3_persistent_bucket else 0.0
        return grads, np.maximum(flatten_and_cast, in_optimizer) + persistent
    partition = updated_params * ps.grad_bytes  # what is left of the gradients after the epilogue
    end_of_backward = grads - partition + bucket
    return partition, np.maximum(np.maximum(end_of_backward, flatten_and_cast), in_optimizer - partition)


def zero_model_states_at_step(model: ModelSpec, training: TrainingSpec, dp: int) -> dict[str, float]:
    """Per-GPU bytes of the model states at DeepSpeed ZeRO's optimizer step (t = p = 1), term by term, in the
    categories of DeepSpeed's estimators (bench/deepspeed_truth.py), at the moment of the fp32 cast in
    `zero_step_terms` (ZeRO-1's step starts earlier with every gradient, which that function also weighs).

    >>> from frenzy_core.models import ZOO
    >>> got = zero_model_states_at_step(ZOO["gpt2"], TrainingSpec(framework="deepspeed", zero_stage=2), 1)
    >>> {k: v / ZOO["gpt2"].parameter_count() for k, v in got.items()}  # 2 + 18 B/param and torch.cat's copy
    {'params': 2.0, 'grads': 2.0, 'master_and_states': 12.0, 'fp32_grads': 4.0, 'flatten_copy': 2.0}
    """
    recipe = run_recipe(training)
    zero = effective_zero_stage(training)
    if not (recipe.zero_fp32_grad_partition and zero >= 1):
        raise SpecError("zero_stage", f"DeepSpeed ZeRO's step terms need framework deepspeed and zero_stage 1, 2 or 3, "
                                      f"got {training.framework} with zero_stage {training.zero_stage}")
    ps = recipe.precision_setup(training.precision, training)
    opt_state, _ = training.optimizer_bytes(ps)
    n = float(model.parameter_count())
    weights, grads, optimizer = model_state_bytes(n, ps, opt_state, zero, dp)
    if training.offload != "none":  # master, states and gradients on the CPU; "params": the partition too
        return {"params": 0.0 if training.offload == "params" else float(weights), "grads": 0.0,
                "master_and_states": 0.0, "fp32_grads": 0.0, "flatten_copy": 0.0}
    updated = n / dp if zero >= 1 else n
    chunk = min(updated, recipe.sub_group_elements) if zero >= 3 and recipe.sub_group_elements else updated
    # the rank's gradient partition: ZeRO-2/3 keep only it, ZeRO-1 has freed the other gradients by the step
    partition = updated * ps.grad_bytes
    return {"params": float(weights), "grads": float(partition), "master_and_states": float(optimizer),
            "fp32_grads": float(chunk * FP32_BYTES), "flatten_copy": float(chunk * ps.grad_bytes)}
