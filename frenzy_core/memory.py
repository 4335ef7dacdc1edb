"""Peak GPU memory of one training step, per GPU: the Frenzy paper's formula and a detailed, mechanism-level model.

Two methods:

* ``"paper"``: exactly the Frenzy paper (arXiv 2412.14479, Sec. IV-A): ``20W/t`` of model states plus
  ``s B h l (10/d + 24/(d t) + 5 a s/(d h t))`` bytes of activations, ``W = Vh + l(12h^2 + 13h)``, B the global batch.
  It ignores the pipeline degree p, the precision, the micro-batch, the optimizer and any overhead.
* ``"detailed"`` (default): what a PyTorch / Megatron-style step really keeps alive, term by term, on the most loaded
  pipeline stage: weights, gradients and optimizer states (sharded by ZeRO / the distributed optimizer over d), the
  activations autograd saves (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4 / Table 2, corrected for what the
  code actually stores: fp32 residual stream under AMP, flash attention, GQA, SwiGLU, RMSNorm, ...), the logits and
  loss buffers, autocast's cached bf16 weight copies and the optimizer's foreach temporary. The peak is the larger of
  the optimizer-step phase and the start-of-backward phase, never their sum (docs/memory.md, "The peak moves").

Both are calibrated against `frenzy_core.tracer` (real training steps under fake tensors, storages counted like the
CUDA caching allocator): see bench/memory_accuracy.py and docs/memory.md. Everything here is numpy arithmetic on
typed values; `predict_memory_totals` evaluates thousands of splits at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from frenzy_core.errors import SpecError
from frenzy_core.frameworks import get as get_framework
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import FRAMEWORKS, TORCH_CROSS_ENTROPY_BYTES, Recipe, block_recipe, get_recipe, run_recipe
from frenzy_core.training import (
    DEEPSPEED_FIELDS,
    Parallelism,
    PipelineStages,
    PrecisionSetup,
    TrainingSpec,
    check_parallelism,
    expert_tp_array,
    stage_layer_counts,
)

GIB = 1024**3
MIB = 1024**2

METHODS = ("paper", "detailed")

# --- element sizes -------------------------------------------------------------------------------------------------
FP32_BYTES = 4  # fp32 statistics, log-softmax, loss gradients
BF16_BYTES = 2
MASK_BYTES = 1  # torch native_dropout keeps a bool mask: one byte per dropped-or-kept element
FP8_BYTES = 1  # e4m3 / e5m2 elements (Transformer Engine fp8 linears)
INDEX_BYTES = 8  # int64 token ids (the embedding and the loss keep them for backward)
# Megatron MoE routing probabilities: probs.type_as(logits) (moe_utils.py topk_routing_with_score_function), bf16
# or fp32 with --moe-router-dtype fp32; counted at fp32 (the larger)
MEGATRON_PERMUTED_PROB_BYTES = FP32_BYTES
# Transformer Engine (read at d0067d0d): transformer_engine/common/util/multi_stream.cpp get_num_compute_streams
# (4) and pytorch/cpp_extensions/gemm.py get_cublas_workspace_size_bytes (32 MiB + 1 KiB on Hopper and newer,
# 4 MiB before: counted at the Hopper size, as DEFAULT_OVERHEAD's workspaces are)
TE_COMPUTE_STREAMS = 4
TE_CUBLAS_WORKSPACE_BYTES = 32 * MIB + 1024

# --- the paper's constants (arXiv 2412.14479, Sec. IV-A) -----------------------------------------------------------
PAPER_STATE_BYTES_PER_PARAM = 20  # the paper's "20W": mixed-precision weights, gradients and Adam states
PAPER_REPLICATED_COEFF = 10  # sbh terms not split by t (LayerNorm inputs, QKV/MLP inputs, dropout masks) ...
PAPER_SPLIT_COEFF = 24  # ... sbh terms split by t ...
PAPER_SCORES_COEFF = 5  # ... and the 5as^2b attention-score terms (Korthikanti et al. Table 2, no recomputation)

# --- the detailed model's constants --------------------------------------------------------------------------------
# Loss buffers per logit element at the start of backward (traced; docs/memory.md "Logits and loss"):
# cross_entropy runs in fp32 and saves its fp32 log-softmax; LogSoftmaxBackward then holds that saved output, the
# incoming fp32 gradient from nll_loss and the fp32 gradient it produces, all at once.
LOGSOFTMAX_SAVED_BYTES = FP32_BYTES
NLL_GRAD_BYTES = FP32_BYTES
LOGITS_GRAD_BYTES = FP32_BYTES
LOSS_BACKWARD_BYTES_PER_LOGIT = LOGSOFTMAX_SAVED_BYTES + NLL_GRAD_BYTES + LOGITS_GRAD_BYTES  # = 12
# Right after, the LM head's weight gradient is formed in the compute dtype (bf16) and, under AMP, cast back to the
# fp32 parameter's dtype by autocast's ToCopyBackward: both exist together for a moment.
HEAD_GRAD_COMPUTE_BYTES = BF16_BYTES
# Normalisation statistics saved per token: LayerNorm keeps mean and rstd, RMSNorm only rstd (both fp32).
NORM_STATS = {"layernorm": 2, "rmsnorm": 1}


@dataclass(frozen=True)
class OverheadSpec:
    """What a traced peak cannot see, added on top of the allocated peak (docs/memory.md, "CPU vs CUDA").

    >>> DEFAULT_OVERHEAD.cuda_context_bytes == 512 * MIB
    True
    """

    cuda_context_bytes: int  # CUDA context + kernels: about 0.3-0.5 GB on current drivers, up to ~1.3 GB on old ones
    nccl_buffer_bytes: int  # NCCL communicator buffers, only when dp*tp*pp > 1: hundreds of MB to GBs
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


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak bytes on the most loaded GPU, split into the parts that sum to `total_bytes`, and what a GPU reports.

    `allocated_bytes` is what `torch.cuda.max_memory_allocated()` reports on the most loaded rank (tensors plus
    cuBLAS / attention workspaces), `reserved_bytes` adds the caching allocator's fragmentation
    (`max_memory_reserved()`), `total_bytes` adds the CUDA context and NCCL buffers (what nvidia-smi shows).
    `per_stage_allocated_bytes` is the allocated peak of each pipeline stage, first to last.

    Example (gpt2, s=1024, B=b=8, amp, flash, NO_OVERHEAD): MemoryBreakdown(weights_bytes=497759232,
    gradients_bytes=0, optimizer_bytes=995518464, activations_bytes=2762145792, logits_bytes=4940464128,
    transient_bytes=247229952, overhead_bytes=0, total_bytes=9443117568, peak_phase='backward-start', ...).
    """

    weights_bytes: int  # parameters this GPU holds (the paper's whole 20W/t model-state term for method="paper")
    gradients_bytes: int  # gradients alive at the peak (none at the start of backward of the first micro-batch)
    optimizer_bytes: int  # optimizer states + fp32 master weights
    activations_bytes: int  # what autograd saved for backward, for every micro-batch in flight on this stage
    logits_bytes: int  # logits / loss buffers or the LM head's gradient at the start of backward
    transient_bytes: int  # optimizer-step: foreach temporary; backward: autocast's bf16 weight copies, ZeRO-3 gathers
    overhead_bytes: int  # CUDA context, workspaces, NCCL, fragmentation (OverheadSpec), FSDP2's idle stream pools
    total_bytes: int  # = sum of the parts: what nvidia-smi shows for this process
    peak_phase: str  # "optimizer-step", "backward-start", "backward-recompute" (detailed), "static+activations"
    method: str
    allocated_bytes: int = 0  # max_memory_allocated(): tensors + workspaces, most loaded rank
    reserved_bytes: int = 0  # max_memory_reserved(): allocated + fragmentation
    per_stage_allocated_bytes: tuple[int, ...] = ()  # allocated peak per pipeline stage, first to last
    framework: str = "pytorch"  # the recipe (frenzy_core.recipes) the detailed method used

    def components(self) -> dict[str, int]:
        """Component name -> bytes; the values sum to total_bytes."""
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "logits": self.logits_bytes,
            "transient": self.transient_bytes,
            "overhead": self.overhead_bytes,
        }

    def gpu_report(self) -> dict[str, object]:
        """The figures a GPU run reports, by the names of the calls that report them (bytes)."""
        return {
            "allocated_bytes": self.allocated_bytes,
            "reserved_bytes": self.reserved_bytes,
            "total_bytes": self.total_bytes,
            "per_stage_allocated_bytes": list(self.per_stage_allocated_bytes),
        }


_COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "transient")
# `_detailed` evaluates all bounding stages in one pass while (stages x splits) holds at most this many elements, and
# stage by stage above (bench/plans.py's grids: the one pass wins at 4,500 elements, loses at 12,500)
STAGES_AT_ONCE_ELEMENTS = 8192
_PHASES = ("optimizer-step", "backward-start", "backward-recompute")


def predict_memory(
    model: ModelSpec,
    training: TrainingSpec,
    par: Parallelism | None = None,
    method: str = "detailed",
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
) -> MemoryBreakdown:
    """Peak memory per GPU of one training step of `model` under `training`, split as `par` says.

    `training.framework` picks the recipe (frenzy_core.recipes) of the detailed method; "unknown" answers with the
    highest recipe (see `predict_memory_band` for both ends). Uneven pipeline stages (`par.first_stage_layers`,
    `par.last_stage_layers`) give each stage its own layers; `per_stage_allocated_bytes` lists every stage and the
    peak is the most loaded one's.

    >>> from frenzy_core.models import ZOO
    >>> predict_memory(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8), method="paper",
    ...                overhead=NO_OVERHEAD).total_bytes
    11079748608
    """
    par = par or Parallelism()
    _check_method(method)
    check_parallelism(model, training, par)
    check_sizes(model, training)
    if get_framework(training.framework).is_band and method == "detailed":
        return predict_memory_band(model, training, par, overhead)[1]
    dp, tp, pp, b = (np.asarray(v, dtype=np.int64) for v in (par.dp, par.tp, par.pp, training.micro_batch))
    parts, phase = _evaluate(model, training, dp, tp, pp, b, method, overhead, par.cp, par.vp, par.ep, par.etp,
                             par.first_stage_layers, par.last_stage_layers)
    values = {k: int(v) for k, v in parts.items()}
    phase_name = "static+activations" if method == "paper" else _PHASES[int(phase)]
    if method == "paper":
        per_stage = (values["allocated"],) * par.pp
    else:
        per_stage = tuple(
            int(v) for v in _stage_allocated(model, training, par, np.arange(par.pp), overhead)
        )
    return MemoryBreakdown(
        weights_bytes=values["weights"],
        gradients_bytes=values["gradients"],
        optimizer_bytes=values["optimizer"],
        activations_bytes=values["activations"],
        logits_bytes=values["logits"],
        transient_bytes=values["transient"],
        overhead_bytes=values["overhead"],
        total_bytes=values["total"],
        peak_phase=phase_name,
        method=method,
        allocated_bytes=values["allocated"],
        reserved_bytes=values["reserved"],
        per_stage_allocated_bytes=per_stage,
        framework=training.framework,
    )


def predict_memory_band(
    model: ModelSpec, training: TrainingSpec, par: Parallelism | None = None, overhead: OverheadSpec = DEFAULT_OVERHEAD
) -> tuple[MemoryBreakdown, MemoryBreakdown]:
    """(lowest, highest) detailed prediction over every framework recipe: the answer when the stack is unknown.

    >>> from frenzy_core.models import ZOO
    >>> low, high = predict_memory_band(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8))
    >>> low.total_bytes <= high.total_bytes
    True
    """
    par = par or Parallelism()
    results = [predict_memory(model, spec, par, "detailed", overhead) for spec in _known_frameworks(training)]
    return min(results, key=lambda r: r.total_bytes), max(results, key=lambda r: r.total_bytes)


def predict_memory_totals(
    model: ModelSpec,
    training: TrainingSpec,
    dp,
    tp,
    pp,
    micro_batch,
    method: str = "detailed",
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
    cp=1,
    vp=1,
    ep=1,
    etp=0,
    first_stage_layers=0,
    last_stage_layers=0,
) -> np.ndarray:
    """Vectorised `predict_memory(...).total_bytes` over broadcast int arrays dp, tp, pp, micro_batch (int64 bytes);
    cp, vp, ep, etp and the uneven stages' `first_stage_layers` / `last_stage_layers` (0: even) broadcast too.

    No validation of the splits: the caller guarantees they divide the model and the batch (plans.py enumerates only
    those; `training.uneven_stage_options` lists the valid uneven stages). The framework comes from
    `training.framework` ("unknown": the highest recipe, element by element).

    >>> from frenzy_core.models import ZOO
    >>> predict_memory_totals(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8), np.array([1, 2]), 1, 1, 1,
    ...                       method="paper", overhead=NO_OVERHEAD).tolist()
    [11079748608, 6776392704]
    """
    _check_method(method)
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in (dp, tp, pp, micro_batch)))
    check_sizes(model, training, micro_batch=int(np.max(arrays[3])) if arrays[3].size else None)
    if get_framework(training.framework).is_band and method == "detailed":
        return np.max(
            [
                predict_memory_totals(model, spec, *arrays, method, overhead, cp, vp, ep, etp, first_stage_layers,
                                      last_stage_layers)
                for spec in _known_frameworks(training)
            ],
            axis=0,
        )
    parts, _ = _evaluate(model, training, *arrays, method, overhead, cp, vp, ep, etp, first_stage_layers,
                         last_stage_layers)
    return parts["total"]


def _known_frameworks(training: TrainingSpec) -> list[TrainingSpec]:
    """`training` under every framework that can run it (Megatron has no autocast mode, FSDP2 no ZeRO-1/2)."""
    specs = []
    for name in FRAMEWORKS:
        fields = {**training.model_dump(), "framework": name}
        # DeepSpeed's own buffer sizes mean nothing to the other stacks
        fields.update(dict.fromkeys((f for f in DEEPSPEED_FIELDS if f not in get_framework(name).switches), 0))
        try:
            specs.append(TrainingSpec(**fields))
        except ValidationError:
            continue
    return specs


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise SpecError("method", f"unknown memory method {method!r}; choose one of: {', '.join(METHODS)}")


# --- sizes the int64 arithmetic can hold -----------------------------------------------------------------------------
# Every byte count is an int64; 2**62 bytes (4 EiB) leaves headroom for the sums. A model or batch whose weights or
# logits alone exceed it is not a training job any GPU can hold: say so instead of overflowing.
MAX_BYTES = 2**62
MAX_BYTES_PER_ELEMENT = 64  # the largest bytes-per-element any term multiplies a parameter or a logit by


def check_sizes(model: ModelSpec, training: TrainingSpec, micro_batch: int | None = None) -> None:
    """Reject shapes whose byte counts overflow int64, naming the field and the limit (SpecError).

    >>> from frenzy_core.models import ZOO
    >>> check_sizes(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8)) is None
    True
    """
    limit = MAX_BYTES // MAX_BYTES_PER_ELEMENT
    b = int(micro_batch if micro_batch is not None else training.micro_batch)
    s = training.seq_len
    # (field named in the error, what it multiplies, elements)
    sizes = (
        ("parameters", "the model's parameters", model.parameter_count()),
        ("vocab_size", "logits = seq_len x micro_batch x vocab_size", s * b * model.vocab_size),
        ("hidden_size", "activations = seq_len x micro_batch x hidden_size x num_layers",
         s * b * model.hidden_size * model.num_layers * max(1, model.moe_top_k if model.is_moe else 1)),
        ("seq_len", "attention scores = seq_len^2 x micro_batch x num_heads x num_layers",
         s * s * b * model.num_heads * model.num_layers),
        ("global_batch", "tokens per step = global_batch x seq_len", training.global_batch * s),
    )
    for field, what, value in sizes:
        if value > limit:
            raise SpecError(
                field,
                f"{what} = {value:.3g} exceeds the {limit:.3g} elements whose bytes fit in 64-bit arithmetic "
                f"({MAX_BYTES_PER_ELEMENT} bytes each, {MAX_BYTES:.3g} bytes); no GPU cluster holds this: "
                f"use a smaller model or batch",
            )


def _evaluate(model, training, dp, tp, pp, b, method, overhead, cp=1, vp=1, ep=1, etp=0, first=0, last=0):
    """Components (int64 arrays, rounded one by one so they sum to the total), GPU-report totals, peak phase index."""
    if method == "paper":
        parts, phase = _paper(model, training, dp, tp), np.zeros(np.shape(dp), dtype=np.int64)
    else:
        parts, phase = _detailed(model, training, dp, tp, pp, b, cp=cp, vp=vp, ep=ep, etp=etp, first=first, last=last)
    rounded = {k: np.rint(parts[k]).astype(np.int64) for k in _COMPONENTS}
    tensors = sum(rounded.values())
    pools = np.rint(parts.get("stream_pools", 0.0)).astype(np.int64)
    allocated, reserved, total = _gpu_reports(overhead, dp * tp * pp * cp, tensors, method, pools)
    rounded["allocated"], rounded["reserved"], rounded["total"] = allocated, reserved, total
    rounded["overhead"] = total - tensors
    return rounded, phase


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


def _stage_allocated(model, training, par, stages, overhead):
    """Allocated peak (tensors + workspaces) of each pipeline stage in `stages`, for one split: one evaluation with
    the stages as an array (each element is that stage's own peak over the phases)."""
    split = (np.int64(par.dp), np.int64(par.tp), np.int64(par.pp), np.int64(training.micro_batch))
    parts, _ = _detailed(
        model, training, *split, stages=(np.asarray(stages, dtype=np.float64),), cp=par.cp, vp=par.vp, ep=par.ep,
        etp=par.etp, first=par.first_stage_layers, last=par.last_stage_layers,
    )
    rounded = [np.broadcast_to(np.rint(parts[k]), np.shape(stages)).tolist() for k in _COMPONENTS]
    return [sum(int(v) for v in stage) + overhead.workspace_bytes for stage in zip(*rounded, strict=True)]


# --- method="paper" ------------------------------------------------------------------------------------------------
def _paper(model: ModelSpec, training: TrainingSpec, dp, tp):
    """Frenzy Sec. IV-A verbatim: static = 20W/t; activations = s B h l (10/d + 24/(d t) + 5as/(d h t))."""
    d, t = dp.astype(np.float64), tp.astype(np.float64)
    s, B = training.seq_len, training.global_batch
    h, layers, a = model.hidden_size, model.num_layers, model.num_heads
    W = model.paper_weights()
    static = PAPER_STATE_BYTES_PER_PARAM * W / t
    activations = s * B * h * layers * (
        PAPER_REPLICATED_COEFF / d + PAPER_SPLIT_COEFF / (d * t) + PAPER_SCORES_COEFF * a * s / (d * h * t)
    )
    zero = np.zeros(np.shape(static))
    return {
        "weights": static,  # the paper does not split its 20W/t: reported whole as "weights"
        "gradients": zero,
        "optimizer": zero,
        "activations": activations,
        "logits": zero,
        "transient": zero,
    }


# --- method="detailed" ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _LayerActivations:
    """Bytes saved for backward per token of one micro-batch, in one transformer layer, by how t splits them.

    Korthikanti et al. 2022 (arXiv 2205.05198) Sec. 4.1 / Table 2 groups the terms the same way: `replicated`
    (norm inputs, the inputs of the first linear of each block, residual dropout masks: split by t only under
    sequence parallelism), `split` (inside the tensor-parallel region: / t) and `scores` (x s, / t: the s x s terms).
    """

    replicated: float
    split: float
    scores: float  # multiplied by the sequence length s
    routed: float = 0.0  # MoE: routed copies of tokens, gathered over the etp x ep group: x etp / t, never / t alone


def unfused_norm_extra(model: ModelSpec, recipe: Recipe, width: int, input_bytes: int) -> float:
    """Bytes per token an unfused RMSNorm of `width` saves beyond a fused kernel (which keeps its input and rstd).

    transformers LlamaRMSNorm.forward (Qwen3, OLMo-2, DeepSeek alike): x.to(float32), then
    `weight * (x * rsqrt(...)).to(input_dtype)`: the fp32 copy (the input itself when it is fp32) and the normalised
    tensor in the input's dtype: FP32 x width more than input + rstd. Gemma2RMSNorm / Gemma3RMSNorm.forward:
    `self._norm(x.float()) * (1.0 + self.weight.float())`: the fp32 copy and the fp32 normalised tensor, while the
    input itself is not kept: (2 FP32 - input) x width. Gemma-2/3 are the sandwich-norm families.
    """
    if not (recipe.unfused_rmsnorm and model.norm_kind == "rmsnorm"):
        return 0.0
    if model.norm_placement == "sandwich":  # Gemma's (1 + weight) norm, computed in fp32
        return (2 * FP32_BYTES - input_bytes) * width
    return FP32_BYTES * width


def _mla_attention(model: ModelSpec, recipe: Recipe, act: int, autocast_inputs: bool, flash: bool):
    """(replicated, split) bytes per token that multi-head latent attention saves, before the s^2 score terms.

    transformers/models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3Attention.forward / expand_kv (v5.24):
    q_a_proj (or q_proj) and kv_a_proj_with_mqa each keep the layer input (each its own autocast cast); the q latent
    (q_a output) is kept by q_a_layernorm and its normalised copy by q_b_proj; the kv_a output (kv latent + the
    shared rope key) by kv_a_layernorm (an unfused norm keeps its fp32 copy instead, freeing the rope slice) and the
    normalised latent by kv_b_proj. The latents are replicated across tensor-parallel ranks (Megatron MLA's down
    projections are not split). Per head (split by t): kv_b's output a x (nope + v) (v is a view of it), the
    concatenated query and the key built by new_empty + copy_ (a x (nope + rope) each; the rotated parts are only
    copied, not saved), the attention output a x v (flash) or its contiguous copy (eager).
    """
    h, a = model.hidden_size, model.num_heads
    r_kv, rope, nope, v = model.kv_lora_rank, model.qk_rope_head_dim, model.qk_nope_head_dim, model.v_head_dim
    rstd = FP32_BYTES  # one fp32 rstd per token per latent norm
    down_inputs = act * h * (2 if autocast_inputs else 1)
    replicated = down_inputs
    if model.q_lora_rank is not None:
        r_q = model.q_lora_rank
        replicated += act * r_q + rstd + unfused_norm_extra(model, recipe, r_q, act) + act * r_q
    unfused = recipe.unfused_rmsnorm
    kv_a_output = act * (r_kv + (0 if unfused else rope))
    replicated += kv_a_output + rstd + unfused_norm_extra(model, recipe, r_kv, act) + act * r_kv
    kv_b_output = act * a * (nope + v)
    query_key = act * (model.q_dim + model.kv_dim)
    output = act * model.attention_output_dim  # flash output, or eager's contiguous context copy
    lse = FP32_BYTES * a if flash else 0
    return replicated, kv_b_output + query_key + output + lse


def _qk_norm_bytes(model: ModelSpec, recipe: Recipe, act: int) -> float:
    """Bytes per token q_norm and k_norm save (split by t): the fp32 rstd per normalised row (per head: Qwen3,
    Gemma-3 `q_norm = RMSNorm(head_dim)`; per token: OLMo-2's whole-projection norm). A fused norm's input is a
    view of the fused QKV output and its output is consumed by RoPE (which saves only cos / sin), so nothing else;
    an unfused one (HF Qwen3RMSNorm, Olmo2RMSNorm, Gemma3RMSNorm) keeps its fp32 copy and normalised tensor
    (`unfused_norm_extra` beyond a fused kernel's input, which separate q_proj / k_proj outputs do not otherwise
    keep)."""
    if model.qk_norm == "none":
        return 0.0
    rows = model.num_heads + model.kv_heads if model.qk_norm == "head" else 2
    width = model.q_dim + model.kv_dim
    extra = unfused_norm_extra(model, recipe, width, act)
    if extra and recipe.separate_projections:
        extra += act * width  # the fused kernel's input, which unfused_norm_extra counts as already kept
    return FP32_BYTES * rows + extra


def _mlp_inner_bytes(model: ModelSpec, recipe: Recipe, act: int, inner: int, autocast_inputs: bool) -> float:
    """Bytes per token an MLP of inner width `inner` saves between its first and its last linear."""
    if model.mlp_kind == "swiglu":
        fused_gate_up = act * 2 * inner  # kept by SiLU (gate half) and by the product (up half)
        silu_output = act * inner
        product = act * inner  # input of the down projection
        return fused_gate_up + silu_output + product
    if recipe.unfused_gelu_tanh and model.position_kind == "learned":
        # transformers activations.py NewGELUActivation (GPT-2's gelu_new): pow (fp32 under CUDA autocast) saves
        # its input cast, tanh saves its output, the final mul saves 0.5*x and (1 + tanh); c_proj keeps its input
        upcast = FP32_BYTES if autocast_inputs else act
        return 3 * upcast * inner + 2 * act * inner
    fc1_output = act * inner  # GELU input (K.: 8sbh for 4h)
    gelu_output = act * inner  # fc2 input (K.: 8sbh)
    return fc1_output + gelu_output


def megatron_expert_inner_bytes(model: ModelSpec, act: int, inner: int) -> float:
    """Bytes per routed token a Megatron expert saves between its fc1 and its fc2 (inner = this GPU's width).

    The experts scale their activation by the routing probability (megatron/core/transformer/moe/experts.py
    TEGroupedMLP.forward `bias_act_func`; SequentialMLP's experts: transformer/mlp.py MLP.forward with
    per_token_scale; read at d98e8a64). GELU experts run unfused (bias_activation_fusion with probs raises for
    GELU): F.gelu keeps fc1's output, `intermediate * permuted_probs` keeps the GELU output, and the product, cast
    back to bf16, is what fc2 keeps. SwiGLU: weighted_bias_swiglu_impl (fusions/fused_bias_swiglu.py
    WeightedSwiGLUFunction.forward saves its input and the probs) or TE's op-fuser ScaledSwiGLU keep fc1's 2 x inner
    output, and fc2 keeps the weighted output.

    >>> from frenzy_core.models import ModelSpec
    >>> gelu = ModelSpec(name="m", vocab_size=8, hidden_size=4, num_layers=1, num_heads=1, ffn_size=16)
    >>> megatron_expert_inner_bytes(gelu, 2, 16)  # fc1 output + GELU output + weighted copy, bf16
    96
    """
    if model.mlp_kind == "swiglu":
        fc1_output = act * 2 * inner  # gate and up halves, saved by the weighted SwiGLU
        weighted_output = act * inner  # fc2's input
        return fc1_output + weighted_output
    fc1_output = act * inner  # F.gelu's input
    gelu_output = act * inner  # saved by the multiplication with the routing probability
    weighted_copy = act * inner  # the product cast to bf16: fc2's input
    return fc1_output + gelu_output + weighted_copy


def layer_activations(
    model: ModelSpec, training: TrainingSpec, recipe: Recipe | None = None, moe_layer: bool | None = None
) -> _LayerActivations:
    """Per-token activation bytes of one layer (before dividing by t), named term by term.

    Korthikanti Table 2 for GPT-style layers assumes bf16 everywhere and GELU 4h: 34 sbh + 5 a s^2 b. The terms
    here follow what the traced PyTorch step keeps (docs/memory.md): the residual stream has the parameters' dtype
    (fp32 under AMP), each block's first linear saves a compute-dtype copy of the norm output, flash attention saves
    q, k, v, its output and an fp32 log-sum-exp, eager attention saves fp32 softmax probabilities plus their bf16 copy.
    The recipe changes the terms its framework's code changes (frenzy_core.recipes). `moe_layer` picks a dense or
    an MoE layer of an MoE model (default: MoE for MoE models).
    """
    recipe = recipe or block_recipe(get_recipe(training.framework), training)
    moe_layer = model.is_moe if moe_layer is None else moe_layer and model.is_moe
    ps = recipe.precision_setup(training.precision)
    h, a, q, kv, ffn = model.hidden_size, model.num_heads, model.q_dim, model.kv_dim, model.ffn
    vd, o = model.v_dim, model.attention_output_dim  # value width; context width (the output projection's input)
    act = ps.activation_bytes
    resid = act if recipe.residual_in_compute_dtype else ps.residual_bytes
    dropout = training.dropout > 0
    norm_stats = NORM_STATS[model.norm_kind] * FP32_BYTES
    # under autocast each Linear casts its (fp32 under AMP) input itself: separate Linears keep one copy each
    autocast_inputs = recipe.autocast and ps.compute_copy_bytes > 0
    separate_qkv = recipe.separate_projections and model.position_kind == "rotary"  # GPT-2's c_attn is fused
    # transformers LlamaRMSNorm.forward: the fp32 normalised tensor, saved by `weight * (...)`
    norm_extra = unfused_norm_extra(model, recipe, h, resid)

    # -- attention block --
    attn_norm_input = resid * h  # LayerNorm/RMSNorm keeps its input: the residual stream (K. Table 2: 2sbh at bf16)
    attn_norm_stats = norm_stats + norm_extra  # mean/rstd (LayerNorm) or rstd (RMSNorm), fp32 per token
    qkv_input = act * h * (3 if separate_qkv and autocast_inputs else 1)  # the QKV linear keeps its input (K.: 2sbh)
    proj_dropout_mask = MASK_BYTES * h if dropout else 0  # residual dropout after the output projection (K.: sbh)
    if model.is_mla:
        qkv_input, mla_split = _mla_attention(model, recipe, act, autocast_inputs, training.attention == "flash")
    if training.attention == "flash":
        rotary = model.position_kind == "rotary"
        # q, k, v saved by flash attention; fused QKV: views of its output, which stays whole. Separate q/k/v with
        # RoPE: only v survives (q and k are replaced by their rotated copies, modeling_llama apply_rotary_pos_emb)
        qkv_output = act * vd if separate_qkv and rotary else act * (q + kv + vd)
        rope_copies = act * (q + kv) if rotary else 0  # rotated q and k are new tensors
        flash_output = act * o  # flash output; the output projection keeps the same storage as its input
        flash_lse = FP32_BYTES * a  # log-sum-exp, a*s*b fp32 (FlashAttention-2, Dao 2023)
        if recipe.repeat_kv_copies and rotary:
            # torchtitan Attention.forward: SDPA saves the rotated q, and k and v widened to every head by repeat_kv;
            # the narrow rotated k and the projections' outputs die
            qkv_output, rope_copies = act * o, act * 2 * q
        attention_split = qkv_output + rope_copies + flash_output + flash_lse
        attention_scores = 0.0
        if model.is_mla:
            attention_split = mla_split
    else:
        # Batched matmuls on head-major tensors: q, k, v are copied out of the fused QKV (or rotated, or widened by
        # GQA's repeat_kv): three full-width tensors (K.: Q, K 4sbh + V 2sbh).
        # GQA's repeat_kv widens k to num_heads x head_dim (= q_dim) and v to num_heads x value_head_dim (= o).
        qk_v_copies = act * (2 * q + o)
        context_copy = act * o  # (b, a, s, d_v) -> (b, s, a d_v) copy kept by the output projection (K.: 2sbh)
        attention_split = mla_split if model.is_mla else qk_v_copies + context_copy
        gpt2_bf16_softmax = (
            recipe.gpt2_softmax_in_input_dtype and model.position_kind == "learned" and not autocast_inputs
        )
        if recipe.fused_softmax or gpt2_bf16_softmax:
            # megatron/core/fusions/fused_softmax.py FusedScaleMaskSoftmax.forward_fused_softmax: bf16 probs, saved
            # by the kernel's backward and (without dropout) by the PV matmul: one tensor (K.: 2as^2b)
            softmax_probs = act * a
            probs_compute = act * a if dropout else 0  # dropout's output, kept by the PV matmul
        else:
            softmax_probs = FP32_BYTES * a  # softmax output, fp32 as CUDA autocast computes it (K.: 2as^2b at bf16)
            probs_compute = act * a  # its compute-dtype copy (or dropout output) that the PV matmul keeps
        probs_dropout_mask = MASK_BYTES * a if dropout else 0  # K.: as^2b
        # Gemma-2 eager_attention_forward: scores / cap, tanh, * cap before the mask: tanh saves its output
        softcap_tanh = act * a if model.attn_logit_softcapping is not None else 0
        attention_scores = softmax_probs + probs_compute + probs_dropout_mask + softcap_tanh
        if training.recompute == "selective":  # Korthikanti Sec. 5: recompute the attention core, drop the s^2 terms
            attention_scores = 0.0
    attention_split += _qk_norm_bytes(model, recipe, act)
    # -- MLP block --
    mlp_norm_input = resid * h
    mlp_norm_stats = norm_stats + norm_extra
    fc1_input = act * h  # K.: 2sbh
    mlp_dropout_mask = MASK_BYTES * h if dropout else 0  # K.: sbh
    if moe_layer:
        inner, experts_per_token = model.expert_ffn, model.moe_top_k
        router_probs = FP32_BYTES * model.num_experts  # fp32 router softmax (Megatron / HF Mixtral)
        # each routed copy of the token's input, kept by the expert's first linear, and the expert's output, kept by
        # the multiplication with its routing probability (Megatron moe_utils.unpermute with probs, HF Mixtral's
        # `expert_layer(x) * routing_weights`); the dispatcher gathers the tp group's tokens first
        # (MoEAllGatherTokenDispatcher / alltoall over tp x ep), so t does not divide them
        dispatched_input = act * h
        expert_output = act * h
        router_probs += INDEX_BYTES * model.moe_top_k  # topk (gather) saves the chosen experts' int64 indices
        routed_metadata = dispatcher_maps = 0
        if recipe.moe_probs_in_experts:
            # Megatron: the experts multiply by the probs, unpermute scatters without them (moe_utils.py unpermute:
            # index_add_ / scatter_add_ keep only the indices), so the expert output is not saved; per routed copy
            # permute's index_select and unpermute keep the int64 sorted_indices, the expert's mul the permuted prob
            expert_output = 0
            routed_metadata = INDEX_BYTES + MEGATRON_PERMUTED_PROB_BYTES
        if recipe.moe_allgather_dispatcher:
            # token_dispatcher.py MoEAllGatherTokenDispatcher.dispatch_postprocess: self.local_map (bool, gathered
            # tokens x local experts) stays on the layer, and local_probs.T.contiguous().masked_select(mask) saves
            # its input and its own mask copy: over the etp x ep group's tokens, E / ep experts each
            dispatcher_maps = model.num_experts * (2 * MASK_BYTES + MEGATRON_PERMUTED_PROB_BYTES)
        if recipe.fp32_router_input and model.is_mla and not autocast_inputs:
            # DeepseekV2/V3 router: F.linear(hidden_states.type(torch.float32), ...): without autocast the fp32 copy
            # of the compute-dtype input is what the linear saves (under AMP the input already is fp32)
            router_probs += FP32_BYTES * h
    else:
        inner, experts_per_token = ffn, 1
        router_probs = dispatched_input = expert_output = routed_metadata = dispatcher_maps = 0
    if model.mlp_kind == "swiglu" and recipe.separate_projections and autocast_inputs:
        fc1_input = 2 * act * h  # gate_proj and up_proj each keep their own bf16 cast of the input
    if moe_layer and recipe.moe_probs_in_experts:
        mlp_inner = megatron_expert_inner_bytes(model, act, inner)
    else:
        mlp_inner = _mlp_inner_bytes(model, recipe, act, inner, autocast_inputs)
    shared_experts = 0.0
    if moe_layer and model.num_shared_experts:
        # DeepseekV3MoE.shared_experts: a dense MLP of n_shared x moe_intermediate_size on every token; under
        # autocast its gate/up linears cast the norm output again (one cast fused, two separate)
        shared_inner = model.num_shared_experts * model.expert_ffn
        casts = (2 if recipe.separate_projections and model.mlp_kind == "swiglu" else 1) if autocast_inputs else 0
        shared_experts = act * h * casts + _mlp_inner_bytes(model, recipe, act, shared_inner, autocast_inputs)
    if training.lora_rank:
        lora = lora_layer_terms(model, training, act, inner, autocast_inputs, separate_qkv, recipe.separate_projections)
        qkv_input = qkv_input if lora.qkv_input is None else lora.qkv_input
        fc1_input = fc1_input if lora.fc1_input is None else lora.fc1_input
        attention_split += lora.attention_extra
        mlp_inner += lora.mlp_extra
        if training.attention == "eager" and not model.is_mla and not lora.o_input_kept:
            attention_split -= act * o  # the context copy only the output projection kept
    if training.fp8_linears:
        # Transformer Engine fp8 (transformer_engine/pytorch/module/layernorm_linear.py, linear.py, _Linear.forward):
        # the input each linear keeps for its weight gradient is its fp8 cast (1 B): the norm outputs of QKV and
        # fc1, the fc2 / down input; the output projection keeps an fp8 copy beside the attention's bf16 output
        qkv_input = FP8_BYTES * h
        fc1_input = FP8_BYTES * h
        mlp_inner = mlp_inner - (act - FP8_BYTES) * inner
        attention_split += FP8_BYTES * o
    mlp_split = experts_per_token * mlp_inner + router_probs + shared_experts
    routed = experts_per_token * (dispatched_input + expert_output + routed_metadata) + dispatcher_maps

    # Norms on the sublayers' outputs (compute dtype): Gemma-2/3 post_attention_layernorm and
    # post_feedforward_layernorm on top of the input norms (Gemma2DecoderLayer.forward); OLMo-2 has only these two
    # (Olmo2DecoderLayer.forward), so its residual stream is kept only as the q/k/v linears' input.
    post_norm = act * h + norm_stats + unfused_norm_extra(model, recipe, h, act)
    if model.norm_placement == "post":
        attn_norm_input = mlp_norm_input = 0
        attn_norm_stats = mlp_norm_stats = post_norm
    elif model.norm_placement == "sandwich":
        attn_norm_stats, mlp_norm_stats = attn_norm_stats + post_norm, mlp_norm_stats + post_norm
    replicated = attn_norm_input + attn_norm_stats + qkv_input + proj_dropout_mask
    replicated += mlp_norm_input + mlp_norm_stats + fc1_input + mlp_dropout_mask
    return _LayerActivations(
        replicated=replicated, split=attention_split + mlp_split, scores=attention_scores, routed=routed
    )


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


def _candidate_stages(model: ModelSpec, pipeline: PipelineStages):
    """Stages that bound every stage's peak (`training.bounding_stages`): the first (most micro-batches in flight),
    the first middle one when the first stage has its own layer count, for dense-first MoE models the stage holding
    layer first_k_dense and the next (the first stages with MoE layers), and the last (LM head)."""
    return pipeline.bounding(model.first_k_dense if model.is_moe else 0)


def _detailed(model: ModelSpec, training: TrainingSpec, dp, tp, pp, b, stages=None, cp=1, vp=1, ep=1, etp=0, first=0,
              last=0):
    """Components of the peak and its phase index, on the most loaded stage (or on each of `stages`); `first` and
    `last` are the uneven first / last stages' layers (0: a middle stage's share)."""
    recipe = run_recipe(training)  # with the run's own DeepSpeed bucket and live-parameter sizes
    blocks = block_recipe(recipe, training)  # what runs inside the transformer blocks (compiled or eager)
    ps = recipe.precision_setup(training.precision)
    d, t, p, b, c, v, e = (np.asarray(x).astype(np.float64) for x in (dp, tp, pp, b, cp, vp, ep))
    et = expert_tp_array(etp, t)  # expert tensor parallelism (0: t)
    s, V, h = training.seq_len, model.vocab_size, model.hidden_size
    act = ps.activation_bytes
    resid = act if recipe.residual_in_compute_dtype else ps.residual_bytes
    tokens = s * b / c  # tokens of one micro-batch on this GPU (context parallelism splits the sequence)
    micro_batches = training.global_batch / (d * b)  # m: micro-batches per replica per step
    # Megatron's distributed optimizer and FSDP shard over the data-parallel x context-parallel ranks
    # (parallel_state get_data_parallel_group(with_context_parallel=True); torchtitan's "dp_shard_cp" mesh)
    shard = d * c
    sp_divisor = t if training.sequence_parallel else 1.0  # sequence parallelism splits the replicated terms too
    zero = effective_zero_stage(training)
    shard_optimizer = 1 if (training.distributed_optimizer and zero == 0) else zero  # Megatron's = ZeRO-1
    opt_state, opt_temp = training.optimizer_bytes(ps)
    if training.paged_optimizer:
        # bitsandbytes optim/optimizer.py get_state_buffer (at 95f9af30): a state of >= 1e5 elements is
        # F.get_paged (cudaMallocManaged), outside PyTorch's allocator, paged to the host under pressure; smaller
        # ones are torch.zeros_like on the GPU. Its kernels step in place: no foreach temporary.
        opt_state, opt_temp = opt_state * (1 - paged_state_fraction(model, training)), 0.0
    offload = training.offload

    # -- activations per micro-batch --
    full_recompute = training.recompute in ("full", "op-sac")  # layers recomputed in backward, one at a time

    def layer_terms(moe_layer: bool):
        """(all activations of one layer, what it keeps until its backward), bytes per micro-batch."""
        layer = layer_activations(model, training, blocks, moe_layer)
        full = tokens * (layer.replicated / sp_divisor + layer.split / t + layer.scores * s / t + layer.routed)
        # MoE routed copies: each GPU's tokens / t gathered over etp x ep ranks, k / ep of them to its experts: the
        # `routed` bytes per token count etp / t times (once with etp = t, Megatron's default)
        full = full + tokens * layer.routed * (et / t - 1)
        if training.recompute == "full":
            # Korthikanti Sec. 5 (full recomputation): each layer keeps only its input (the residual stream); the
            # layer being recomputed in backward holds its full set once (phase "backward-recompute").
            kept = tokens * resid * h / sp_divisor
        elif training.recompute == "op-sac":
            sac = op_sac_layer_activations(model, training, blocks, moe_layer)
            kept = tokens * (sac.replicated / sp_divisor + sac.split / t)
        else:
            kept = full
        if full_recompute and training.recompute_every > 1:
            # only every k-th layer is checkpointed (torchtitan ac_freq, apply_ac); the others keep their full set
            k = training.recompute_every
            kept = kept / k + full * (1 - 1 / k)
        return full, kept

    moe_terms = layer_terms(True) if model.is_moe else None
    dense_terms = layer_terms(False) if model.num_dense_layers else moe_terms
    moe_terms = moe_terms or dense_terms
    token_ids = tokens * INDEX_BYTES  # the micro-batch's int64 token ids, kept by the embedding's backward
    embedding_dropout_mask = tokens * MASK_BYTES * h / sp_divisor if training.dropout > 0 else 0.0
    per_micro_batch_fixed = token_ids + embedding_dropout_mask
    # Built once per forward and shared by every layer. With p > 1 we count them once per stage, as Megatron caches
    # its rotary table and fuses the causal mask (with one micro-batch in flight, as traced, this is exact).
    causal_mask = s * s / c * MASK_BYTES if training.attention == "eager" else 0.0  # one bool s x s (this GPU's rows)
    rope_tables = 2 * s * model.head_dim * BF16_BYTES if model.position_kind == "rotary" else 0.0  # cos and sin
    # HF builds the sliding-window mask beside the causal one (masking_utils create_sliding_window_causal_mask,
    # Gemma2Model.forward's mask mapping); eager computes the full s x s scores and masks them
    sliding_mask = causal_mask if model.num_sliding_layers else 0.0
    per_stage_fixed = causal_mask + sliding_mask + rope_tables
    # megatron/core/transformer/moe/token_dispatcher.py MoEAllGatherTokenDispatcher.token_dispatch:
    # gather_from_sequence_parallel_region(hidden_states, group=tp_ep_group, use_global_buffer=True) writes the
    # etp x ep group's tokens (each GPU's tokens / t) into GlobalMemoryBuffer "mpu" (megatron/core/utils.py
    # get_tensor: allocated once, kept for the run); a stage with MoE layers holds it, the group of one skips it
    gathered_tokens = tokens / t * et * e
    moe_gather_buffer = np.where(
        (et * e > 1) & recipe.moe_allgather_dispatcher & model.is_moe, gathered_tokens * h * act, 0.0
    )
    # Megatron --moe-grouped-gemm (TEGroupedMLP): TE's general_grouped_gemm spreads the experts' GEMMs over its
    # compute streams, each with its own cuBLAS workspace, allocated on first use and cached (lru_cache)
    grouped_gemm_workspaces = (
        TE_COMPUTE_STREAMS * TE_CUBLAS_WORKSPACE_BYTES if training.moe_grouped_gemm and model.is_moe else 0.0
    )
    norm_extra = unfused_norm_extra(model, recipe, h, resid)
    final_norm_input = tokens * (resid * h + NORM_STATS[model.norm_kind] * FP32_BYTES + norm_extra) / sp_divisor
    head_input = tokens * act * h / sp_divisor  # the LM head's linear keeps its input
    target_ids = tokens * INDEX_BYTES  # the loss keeps a contiguous copy of the shifted targets
    head_activations = final_norm_input + head_input + target_ids
    head_activations = head_activations + tokens * lora_head_bytes_per_token(model, training, act) / sp_divisor

    # -- loss / LM-head buffers at the start of backward (last stage) --
    loss_buffers = tokens * V / t * loss_bytes_per_logit(recipe, training.loss_chunks, training.loss_dtype)
    if model.final_logit_softcapping is not None:
        # Gemma2ForCausalLM.forward: logits / cap, tanh, * cap before the loss: tanh's saved output (compute dtype)
        # is alive through the loss' backward
        loss_buffers = loss_buffers + tokens * V / t * act
    head_grad_params = V * h / t
    head_grad = head_grad_params * HEAD_GRAD_COMPUTE_BYTES  # bf16 weight gradient from the head's matmul ...
    if ps.param_bytes != HEAD_GRAD_COMPUTE_BYTES:
        head_grad = head_grad + head_grad_params * ps.param_bytes  # ... and its cast to the parameter dtype (AMP)
    if training.lora_rank:  # a frozen LM head forms no weight gradient
        head_grad = 0.0
    head_grad = head_grad + tokens * act * h / t  # the gradient w.r.t. the head's input

    first_layers, last_layers = (np.asarray(x).astype(np.float64) for x in (first, last))
    layout = (first_layers, last_layers, v)  # the uneven first / last stages' layers, and vp for the layers' order
    pipeline = PipelineStages(model.num_layers, p, *layout)
    if stages is None:  # these stages bound every stage (a middle one has fewer of both)
        stages = _candidate_stages(model, pipeline)
    # the same for every stage: each layer's parameters per GPU (with ep = 1, and split over ep x etp), and the
    # experts' shard
    weights_t, weights_ep = _layer_weights(model, t), _layer_weights(model, t, e, et)
    expert_shard = shard * t / (e * et)
    shape = np.broadcast_shapes(np.shape(d), *(np.shape(st) for st in stages))
    stage_all = np.stack([np.broadcast_to(np.asarray(st, dtype=np.float64), shape) for st in stages])
    # Every bounding stage at once (a leading axis of stages in front of the splits' shape: one array operation per
    # term for all of them) while that stays small; one stage at a time on larger grids, where the operations
    # between (stages x splits) and (splits) arrays cost more than the calls they save. Element by element the
    # arithmetic is the same either way.
    at_once = stage_all.size <= STAGES_AT_ONCE_ELEMENTS
    by_group = []
    for stage in [stage_all] if at_once else list(stage_all):
        last = stage == p - 1
        in_flight = np.minimum(p - stage, micro_batches)  # 1F1B: stage i holds min(p - i, m) (Narayanan 2021)
        stage_count = pipeline.counts(stage)
        layers_in_flight = in_flight_layers(model.num_layers, p, v, micro_batches, stage, first_layers, last_layers,
                                            stage_count)
        # the stage's mix of dense and MoE layers (DeepSeek: first_k_dense dense layers on the first stages)
        stage_split = n_dense, n_moe = _stage_layers(model, p, stage, n=stage_count, pipeline=pipeline)
        moe_share = n_moe / (n_dense + n_moe)
        layer_bytes = np.where(n_moe > 0, np.maximum(dense_terms[0], moe_terms[0]), dense_terms[0])  # recomputed
        kept_layer = (1 - moe_share) * dense_terms[1] + moe_share * moe_terms[1]
        params, expert_params, castable = _stage_parameters(model, t, p, stage, e, et, layout, stage_split, weights_t)
        if training.activation_offload:
            # torchtune training/_activation_offloading.py OffloadActivations (at bd2a0fc7): every saved tensor of
            # >= 1 KiB that is not a parameter goes to the host in forward and is brought back for its backward;
            # the output head runs under NoOpManager (kept). One layer's set is on the GPU at a time (the stash of
            # the layer being copied, or the one being brought back for its backward).
            layers_in_flight = np.minimum(layers_in_flight, 1.0)
        acts = layers_in_flight * kept_layer + in_flight * per_micro_batch_fixed + per_stage_fixed
        moe_buffers = np.where(n_moe > 0, moe_gather_buffer + grouped_gemm_workspaces, 0.0)  # kept for the run
        acts = acts + np.where(last, head_activations, 0)
        logits = np.where(last, np.maximum(loss_buffers, head_grad), 0.0)

        # experts' states shard over the expert-data-parallel group: tp x dp x cp / (etp x ep) ranks, dp x cp / ep
        # with etp = t (parallel_state initialize_model_parallel, get_expert_data_parallel_group): expert_shard
        dense_states = model_state_bytes(params, ps, opt_state, shard_optimizer, shard)
        expert_states = model_state_bytes(expert_params, ps, opt_state, shard_optimizer, expert_shard)
        weights, grads, optimizer = (a + x for a, x in zip(dense_states, expert_states, strict=True))
        if training.lora_rank:  # only the adapters train; the frozen base keeps its weights
            lora = (n_dense + n_moe) * lora_parameters(model, training.lora_rank, training.lora_targets,
                                                       training.lora_variant) / t
            lora = lora + np.where(last, lora_head_parameters(model, training) / t, 0.0)
            frozen = frozen_weight_bytes(model, ps, training.base_quant, params + expert_params, castable, last, t,
                                         training.quant_head)
            weights, grads, optimizer = model_state_bytes(lora, ps, opt_state, shard_optimizer, shard)
            weights = weights + frozen / (shard if zero >= 3 else 1.0)
            params, expert_params = lora, 0.0
        if offload != "none":  # ZeRO-Offload: master, Adam states, gradients and the step itself live on the CPU
            grads, optimizer, opt_step_temp = 0.0 * grads, 0.0 * optimizer, 0.0
        else:
            opt_step_temp = opt_temp
        if training.optimizer_in_backward:
            # torchtune _setup_optimizer(optimizer_in_bwd=True): training.register_optim_in_bwd_hooks steps each
            # parameter in its post-accumulate-grad hook and sets its .grad to None: one gradient at a time
            one = largest_trained_parameter(model, training, t)
            grads = np.minimum(grads, one * ps.grad_bytes)
            params, expert_params = np.minimum(params + expert_params, one), 0.0
        if offload == "params":  # ZeRO-Infinity / FSDP2 CPUOffloadPolicy: only gathered layers are on the GPU
            weights = 0.0 * weights
        # FSDP2's reduce-scatter and all-gather streams keep their own cached blocks (side_stream_pool_bytes)
        reduce_scatter_pool, all_gather_pool = side_stream_pool_bytes(model, recipe, ps, grads, t, p, stage, shard, e)

        # the params this GPU's optimizer updates
        updated_params = params / shard + expert_params / expert_shard if shard_optimizer >= 1 else params + expert_params
        # DeepSpeed's contiguous gradient bucket, allocated in backward() (stage_1_and_2.py / stage3.py)
        buckets = recipe.reduce_bucket_elements * ps.param_bytes if zero >= 1 else 0.0
        step_grads, step_transient = grads, updated_params * opt_step_temp  # foreach AdamW: one temporary per param
        if recipe.zero_fp32_grad_partition and zero >= 1 and offload == "none":
            step_grads, step_transient = zero_step_terms(recipe, ps, zero, grads, updated_params, opt_step_temp,
                                                         buckets)
        # Optimizer step (docs/memory.md "The peak moves"): all gradients, all states, the foreach temporary.
        optimizer_step = {
            "weights": weights,
            "gradients": step_grads,
            "optimizer": optimizer,
            "activations": 0.0,
            "logits": 0.0,
            "transient": step_transient,
            "stream_pools": _idle_pools(reduce_scatter_pool, all_gather_pool, step_grads),
        }
        # Start of backward, step >= 2: Adam states exist; gradients exist if they persist (Megatron's fp32
        # main-grad buffer, i.e. a master copy), if an earlier micro-batch of this step already produced them, or if
        # the recipe says so (grads_alive_at_peak; FSDP2's shards are freed by zero_grad, their blocks stay reserved).
        grads_persist = ps.master_bytes > 0 or recipe.grads_alive_at_peak
        if recipe.zero12_grads_freed_in_step and zero in (1, 2):
            grads_persist = False  # DeepSpeed ZeRO-1/2: step() freed them; only earlier micro-batches' remain
        grads_alive = grads if grads_persist else np.where(micro_batches > 1, grads, 0.0)
        copies_at_loss, one_layer_copies = _compute_copies(
            model, recipe, ps, zero, t, p, castable, last, full_recompute, e, stage, et, shard, offload == "params",
            layout, stage_split, weights_ep,
        )
        if training.base_quant != "none":
            # bitsandbytes MatMul4Bit dequantizes one NF4 weight at a time (again in backward): no cached copies;
            # MatMul8bitLt.backward `state.CB.to(ctx.dtype_A, copy=True)`, torchao LinearNF4.backward
            # `weight.to(grad_output.dtype)` alike. A quantised head is dequantized for the loss' backward.
            inner = model.expert_ffn if model.is_moe else model.ffn
            largest_linear = max(h * model.q_dim, h * inner) / t
            if training.quant_head:
                largest_linear = np.where(last, np.maximum(largest_linear, V * h / t), largest_linear)
            copies_at_loss = largest_linear * ps.activation_bytes
            one_layer_copies = 0.0
        if training.fp8_linears:
            # TE caches each linear weight's fp8 cast and its transpose across the micro-batches of a step
            # (is_first_microbatch, Megatron passes it): 2 B per linear parameter on the stage
            linears = castable - np.where(last, V * h / t, 0.0)
            copies_at_loss = copies_at_loss + linears * 2 * FP8_BYTES
        backward_start = {
            "weights": weights,
            "gradients": grads_alive,
            "optimizer": optimizer,
            "activations": acts,
            "logits": logits,
            "transient": copies_at_loss + buckets,
            "stream_pools": _idle_pools(reduce_scatter_pool, all_gather_pool, grads_alive),
        }
        # Recomputing a checkpointed layer in backward: its full activations once, the output gradient, its copies.
        recompute = dict.fromkeys(backward_start, 0.0)  # no layer is recomputed: never the peak
        if full_recompute:
            recompute = {
                "weights": weights,
                "gradients": grads_alive,
                "optimizer": optimizer,
                "activations": acts + (layer_bytes - kept_layer),
                "logits": np.where(last, tokens * act * h / sp_divisor, 0.0),
                "transient": copies_at_loss + one_layer_copies + buckets,
                "stream_pools": _idle_pools(reduce_scatter_pool, all_gather_pool, grads_alive),
            }
        for phase in (optimizer_step, backward_start, recompute) if full_recompute else (optimizer_step, backward_start):
            phase["transient"] = phase["transient"] + moe_buffers  # allocated once, alive in every phase
        by_group.append((optimizer_step, backward_start, recompute))
    # the candidates stage by stage, each stage's phases in _PHASES order: (phase, stage row of the one pass or None)
    if at_once:
        candidates = [(phase, i) for i in range(len(stages)) for phase in by_group[0]]
        sums = [np.broadcast_to(sum(phase.values()), stage_all.shape) for phase in by_group[0]]
        totals = [sums[j][i] for i in range(len(stages)) for j in range(len(_PHASES))]
    else:
        candidates = [(phase, None) for group in by_group for phase in group]
        totals = [np.broadcast_to(sum(phase.values()), shape) for phase in (c for c, _ in candidates)]
    # each candidate's sum broadcasts by itself (the same additions, in the same order, as on broadcast copies);
    # candidates along the last axis: a contiguous argmax
    best = np.argmax(np.stack(totals, axis=-1), axis=-1)

    def component(i: int, k: str) -> np.ndarray:
        """Component k of candidate i, over the splits' shape."""
        phase, row = candidates[i]
        value = np.asarray(phase[k], dtype=np.float64)
        return np.broadcast_to(value, shape) if row is None else np.broadcast_to(value, stage_all.shape)[row]

    # the parts of the candidate that is the peak, element by element, among those that are the peak somewhere (a
    # few of the stages x phases)
    chosen = np.flatnonzero(np.bincount(best.ravel(), minlength=len(candidates))) if best.size else [0]
    masks = [best == i for i in chosen[:-1]]
    parts = {}
    for k in (*_COMPONENTS, "stream_pools"):
        part = component(chosen[-1], k)
        for i, mask in zip(chosen[:-1], masks, strict=True):
            part = np.where(mask, component(i, k), part)
        parts[k] = part
    return parts, best % len(_PHASES)


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
    ps = recipe.precision_setup(training.precision)
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
    ps = recipe.precision_setup(training.precision)
    p = float(par.pp)
    at_loss, _ = _compute_copies(model, recipe, ps, 3, float(par.tp), p, 0.0, np.asarray(True),
                                 training.recompute == "full", float(par.ep), p - 1, float(par.expert_tp),
                                 float(par.dp * par.cp), training.offload == "params",
                                 (par.first_stage_layers, par.last_stage_layers, par.vp))
    return float(at_loss) / ps.activation_bytes


def _idle_pools(reduce_scatter_pool, all_gather_pool, alive_grads):
    """Side-stream bytes reserved but not allocated while `alive_grads` bytes of the gradient shards exist."""
    return np.maximum(reduce_scatter_pool - alive_grads, 0.0) + all_gather_pool


def _root_embedding(model: ModelSpec, t, stage, last):
    """The root unit's embedding matrix on `stage` (untied: a matrix of its own; tied and p == 1: it is the head)."""
    embedding = model.vocab_size * model.hidden_size / t
    return np.where((stage == 0) & (~last | (not model.tie_embeddings)), embedding, 0.0)


def side_stream_pool_bytes(model: ModelSpec, recipe: Recipe, ps: PrecisionSetup, grads, t, p, stage, shard, ep=1):
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
    so these bytes stay reserved when the default stream peaks. Zero for recipes without side-stream pools.
    """
    if not recipe.side_stream_pools:
        return 0.0 * grads, 0.0 * grads
    last = stage == p - 1
    # the root unit: every parameter outside the blocks (torchtitan fully_shard(model) last): the word embedding
    # and learned positions on the first stage, the final norm and the head (a tied one: the same matrix) on the last
    positions = model.embedding_parameters() - model.vocab_size * model.hidden_size
    root = np.where(last, model.vocab_size * model.hidden_size / t + model.norm_parameters(), 0.0)
    root = root + _root_embedding(model, t, stage, last) + np.where(stage == 0, positions, 0.0)
    dense_layer, moe_layer = _layer_weights(model, t, ep)
    layer = np.maximum(dense_layer, moe_layer) if model.is_moe else dense_layer
    all_gather = (np.maximum(root, layer) + layer + layer / shard) * ps.activation_bytes
    return grads, all_gather


def lora_parameters(model: ModelSpec, rank: int, targets: str, variant: str = "lora") -> int:
    """Adapter parameters of one layer: r x (in + out) per targeted linear (peft LoraLayer.update_layer: lora_A is
    in x r, lora_B r x out), DoRA's magnitude vector (out) too (peft dora.py DoraLinearLayer.update_layer:
    `nn.Parameter(weight_norm)`, one per output row). The head's adapter is `lora_head_parameters`.

    >>> from frenzy_core.models import ZOO
    >>> lora_parameters(ZOO["llama-3.1-8b"], 16, "attention")  # 16 x (8,192 + 5,120 + 5,120 + 8,192)
    425984
    >>> lora_parameters(ZOO["llama-3.1-8b"], 8, "q,v")  # 8 x (8,192 + 5,120)
    106496
    """
    from frenzy_core.training import lora_targets_set

    h, q, kv, ffn = model.hidden_size, model.q_dim, model.kv_dim, model.ffn
    chosen = lora_targets_set(targets)
    shapes = {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h)}
    shapes.update({"gate": (h, ffn), "up": (h, ffn), "down": (ffn, h)} if model.mlp_kind == "swiglu"
                  else {"up": (h, ffn), "down": (ffn, h)})
    picked = [shapes[n] for n in shapes if n in chosen]
    magnitude = sum(o for _, o in picked) if variant == "dora" else 0
    return rank * sum(i + o for i, o in picked) + magnitude


def lora_head_parameters(model: ModelSpec, training: TrainingSpec) -> int:
    """The LM head's adapter (lora_targets includes head): r x (h + V), DoRA + V."""
    if "head" not in training.lora_target_set:
        return 0
    dora = model.vocab_size if training.lora_variant == "dora" else 0
    return training.lora_rank * (model.hidden_size + model.vocab_size) + dora


@dataclass(frozen=True)
class _LoraLayerTerms:
    """Per-token bytes of one layer that LoRA changes: the linears' kept inputs (None: as full training) and what
    the adapters add in the attention block and in the MLP (`layer_activations` adds them to its groups)."""

    qkv_input: float | None
    fc1_input: float | None
    attention_extra: float
    mlp_extra: float
    o_input_kept: bool


def base_keeps_inputs(training: TrainingSpec) -> bool:
    """Whether a frozen quantised linear saves its input for backward (bitsandbytes/autograd/_functions.py at
    95f9af30: MatMul8bitLt.forward `ctx.tensors = (CAt, subA, A)`, A a view of the input; MatMul4Bit.forward
    `ctx.tensors = (None, B)`, but `(A, B)` before 0.43.2, commit 9e753741; torchao nf4_tensor.py at 36027d82
    LinearNF4.forward `ctx.save_for_backward(weight)` only). A frozen bf16 nn.Linear saves no input: autograd keeps
    mm's `self` only for a weight gradient."""
    return training.base_quant == "int8" or (training.base_quant in ("nf4", "nf4-dq")
                                              and training.quant_backend == "bitsandbytes-legacy")


def lora_layer_terms(model: ModelSpec, training: TrainingSpec, act: int, inner: int, autocast_inputs: bool,
                     separate_qkv: bool, separate_mlp: bool) -> _LoraLayerTerms:
    """What a LoRA layer keeps for backward, per token, by group of linears sharing an input.

    peft/tuners/lora/layer.py Linear.forward (huggingface/peft at 5d602fdb): `result = base_layer(x)` then
    `result + lora_B(lora_A(dropout(x))) * scaling`: lora_A keeps its input (x, or with lora_dropout > 0 the
    dropped copy, and nn.Dropout its 1-byte mask: one of each per adapter, every adapter has its own dropout), lora_B
    the r-wide lora_A output. The frozen base keeps x only when `base_keeps_inputs`. DoRA (peft/tuners/lora/dora.py
    DoraLinearLayer.forward): `(mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling`: the two
    products keep the base output and the LoRA output, out-wide each (the weight norm is detached: no saved tensor).
    Under autocast with separate projections each targeted linear keeps its own cast of x; a fused q|k|v (or
    gate|up) linear is one adapter with one dropout (Lightning-AI/litgpt lit_gpt/lora.py LoRAQKVLinear.forward at
    8641822b: `self.lora_dropout(x)` once, then a grouped conv1d for q, k and v).
    """
    targets = training.lora_target_set
    swiglu = model.mlp_kind == "swiglu"
    r, keeps, p = training.lora_rank, base_keeps_inputs(training), training.lora_dropout
    dropped_copy = (act + MASK_BYTES) if p > 0 else 0  # per element of one adapter's input: dropout output + mask
    widths = {"q": (model.hidden_size, model.q_dim), "k": (model.hidden_size, model.kv_dim),
              "v": (model.hidden_size, model.kv_dim), "o": (model.attention_output_dim, model.hidden_size),
              "gate": (model.hidden_size, inner), "up": (model.hidden_size, inner), "down": (inner, model.hidden_size)}
    mlp_names = ("gate", "up", "down") if swiglu else ("up", "down")
    h = model.hidden_size

    def group_input(names, separate: bool) -> float:
        """Bytes per token kept of the input x shared by `names` (the adapters' own x, or the base's)."""
        hit = [n for n in names if n in targets]
        copies = len(hit) if (separate and autocast_inputs and len(names) > 1) else 1
        if keeps:
            copies = max(copies, 1)
        elif not hit or p > 0:
            copies = 0
        # one fused linear (GPT-2 c_attn, LitGPT's LoRAQKVLinear: `self.lora_dropout(x)` once) has one dropout
        adapters_with_dropout = len(hit) if separate else min(len(hit), 1)
        return act * h * copies + dropped_copy * h * adapters_with_dropout

    def adapters(names) -> float:
        extra = 0.0
        for n in names:
            if n in targets:
                w_in, w_out = widths[n]
                extra += act * r  # lora_B's input
                if training.lora_variant == "dora":
                    extra += 2 * act * w_out  # base_result and lora_result, kept by the DoRA products
        return extra

    attention_extra = adapters(("q", "k", "v", "o"))
    o_kept = ("o" in targets and p == 0) or keeps
    if "o" in targets and p > 0:
        attention_extra += dropped_copy * model.attention_output_dim
    mlp_extra = adapters(mlp_names)
    down_kept = ("down" in targets and p == 0) or keeps
    if "down" in targets and p > 0:
        mlp_extra += dropped_copy * inner
    if not down_kept:
        mlp_extra -= act * inner  # the down projection's input (GELU output, SwiGLU product), no longer kept
    fc1_names = ("gate", "up") if swiglu else ("up",)
    return _LoraLayerTerms(qkv_input=None if model.is_mla else group_input(("q", "k", "v"), separate_qkv),
                           fc1_input=group_input(fc1_names, separate_mlp and swiglu), attention_extra=attention_extra, mlp_extra=mlp_extra,
                           o_input_kept=o_kept)


def lora_head_bytes_per_token(model: ModelSpec, training: TrainingSpec, act: int) -> float:
    """Bytes per token an adapter on the LM head adds (its input is already kept, `head_input`): lora_B's r-wide
    input; with dropout the dropped copy and mask (h wide); DoRA's two vocab-wide products."""
    if "head" not in training.lora_target_set:
        return 0.0
    extra = act * training.lora_rank
    if training.lora_dropout > 0:
        extra += (act + MASK_BYTES) * model.hidden_size
    if training.lora_variant == "dora":
        extra += 2 * act * model.vocab_size
    return float(extra)


# bitsandbytes 4-bit (functional.quantize_4bit, blocksize 64): 4 bits per weight + an fp32 absmax per 64; with
# double quantisation (compress_statistics) the absmax is 8-bit with an fp32 absmax per 256 blocks (torchao
# to_nf4(block_size=64, scaler_block_size=256) stores the same: int8 scalers + one factor per 256 of them)
NF4_BYTES = {"nf4": 0.5 + 4 / 64, "nf4-dq": 0.5 + 1 / 64 + 4 / (64 * 256)}
# bitsandbytes LLM.int8 (nn/modules.py Int8Params: int8_vectorwise_quant): one int8 per weight and an fp32 scale
# (SCB) per output row; counted per weight as 4 / hidden_size (exact for the linears reading the residual width)
INT8_WEIGHT_BYTES = 1
INT8_ROW_SCALE_BYTES = 4


def quantised_bytes_per_weight(model: ModelSpec, base_quant: str) -> float:
    """Bytes per frozen linear weight under `base_quant` (NF4 / NF4-dq / int8 + its row scales)."""
    if base_quant == "int8":
        return INT8_WEIGHT_BYTES + INT8_ROW_SCALE_BYTES / model.hidden_size
    return NF4_BYTES[base_quant]


def frozen_weight_bytes(model: ModelSpec, ps: PrecisionSetup, base_quant: str, params, castable, last, t,
                        quant_head: bool = False):
    """Bytes of the frozen base on a stage: linears quantised (lm_head stays in the param dtype, transformers
    BitsAndBytesConfig llm_int8_skip_modules, unless `quant_head`: LitGPT's BitsandbytesPrecision converts every
    nn.Linear), everything else in the parameter dtype."""
    if base_quant == "none":
        return params * ps.param_bytes
    head = 0.0 if quant_head else np.where(last, model.vocab_size * model.hidden_size / t, 0.0)
    linears = castable - head
    return (params - linears) * ps.param_bytes + linears * quantised_bytes_per_weight(model, base_quant)


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


def loss_bytes_per_logit(recipe: Recipe, chunks: int = 1, loss_dtype: str = "fp32") -> float:
    """Loss bytes per logit element alive in its backward; with k chunks (torchtune CEWithChunkedOutputLoss) every
    chunk's fp32 log-softmax stays saved (4 B) but only one chunk at a time holds the two fp32 gradients.

    loss_dtype bf16: F.cross_entropy on bf16 logits keeps a bf16 log-softmax, and its gradients are bf16 (LitGPT
    utils.py chunked_cross_entropy on the bf16-true model's logit chunks; torchtune's compiled
    CEWithChunkedOutputLoss, whose partitioner saves the bf16 logits of each chunk instead of the fp32 log-softmax).

    >>> loss_bytes_per_logit(get_recipe("pytorch")), loss_bytes_per_logit(get_recipe("pytorch"), 8)
    (12.0, 5.0)
    >>> loss_bytes_per_logit(get_recipe("pytorch"), 1, "bf16"), loss_bytes_per_logit(get_recipe("pytorch"), 8, "bf16")
    (6.0, 2.5)
    """
    if recipe.loss_bytes_per_logit != TORCH_CROSS_ENTROPY_BYTES:
        return float(recipe.loss_bytes_per_logit)
    element = BF16_BYTES if loss_dtype == "bf16" else FP32_BYTES
    per_logit = recipe.loss_bytes_per_logit * element / FP32_BYTES  # saved log-softmax + two gradients
    if chunks == 1:
        return float(per_logit)
    saved = element  # each chunk's log-softmax output
    return saved + (per_logit - saved) / chunks


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
    """
    p, vp, m, stage = (np.asarray(x, dtype=np.float64) for x in (p, vp, micro_batches, stage))
    layers = stage_layer_counts(num_layers, p, stage, first, last) if layers is None else layers
    plain = np.minimum(p - stage, m) * layers
    if not (vp > 1).any():
        return plain
    warmup = (p - stage - 1) * 2 + (vp - 1) * p
    interleaved = np.minimum(warmup + 1, m * vp) * layers / vp
    return np.where(vp > 1, interleaved, plain)


def op_sac_layer_activations(
    model: ModelSpec, training: TrainingSpec, recipe: Recipe, moe_layer: bool | None = None
) -> _LayerActivations:
    """Per-token bytes one layer keeps under per-op selective AC (torchtitan selective_ac_option="op").

    torchtitan/models/llama3/infra/parallelize.py `_apply_ac_to_transformer_block`: the policy saves the outputs of
    the ops in `_save_list` (aten.mm, the SDPA flash / efficient / cuDNN kernels, reduce_scatter, max) except every
    second mm, counted per block in forward order; the block's input is kept by the checkpoint; all else is
    recomputed. Llama's mm order is wq, wk, wv, wo, w1, w3, w2 (GELU MLP: fc1, fc2), so wq, wv, w1 and w2 are kept.
    Eager SAC caches every MUST_SAVE output (torch/utils/checkpoint.py _CachingTorchDispatchMode); under
    `training.compile` the partitioner saves a MUST_SAVE node only if the backward graph needs it
    (torch/_functorch/partitioners.py: must_recompute for PREFER_RECOMPUTE, should_ban_recomputation for
    MUST_SAVE), and the last mm's output, which only the residual add consumes, is not needed: it is dropped.
    """
    ps = recipe.precision_setup(training.precision)
    act = ps.activation_bytes
    resid = act if recipe.residual_in_compute_dtype else ps.residual_bytes
    h, q, kv, a = model.hidden_size, model.q_dim, model.kv_dim, model.num_heads
    moe_layer = model.is_moe if moe_layer is None else moe_layer and model.is_moe
    inner = model.expert_ffn * model.moe_top_k if moe_layer else model.ffn
    mlp_widths = [inner, inner, h] if model.mlp_kind == "swiglu" else [inner, h]
    widths = [q, kv, model.v_dim, h, *mlp_widths]  # mm outputs in forward order
    kept = widths[0::2]  # the 1st, 3rd, 5th, ... mm of the block
    block_input = resid * h
    attention_output = act * model.attention_output_dim + FP32_BYTES * a  # SDPA output and log-sum-exp
    last_is_h = 1 if kept[-1] == h and len(widths) % 2 == 1 else 0  # w2's output: replicated, like the input
    split = act * (sum(kept) - last_is_h * h) + attention_output
    block_output_addend = 0 if training.compile else act * h * last_is_h  # eager caches it, compile does not save it
    return _LayerActivations(replicated=block_input + block_output_addend, split=split, scores=0.0)


def effective_zero_stage(training: TrainingSpec) -> int:
    """The ZeRO stage a framework runs: FSDP2's fully_shard is ZeRO-3 (zero_stage 0 means its default)."""
    if get_framework(training.framework).fully_shards and training.zero_stage == 0:
        return 3
    return training.zero_stage
