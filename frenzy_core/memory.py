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

from frenzy_core.errors import SpecError
from frenzy_core.models import ModelSpec
from frenzy_core.training import (
    OPTIMIZER_STATE_BYTES,
    OPTIMIZER_TRANSIENT_BYTES,
    Parallelism,
    PrecisionSetup,
    TrainingSpec,
    check_parallelism,
)

GIB = 1024**3
MIB = 1024**2

METHODS = ("paper", "detailed")

# --- element sizes -------------------------------------------------------------------------------------------------
FP32_BYTES = 4  # fp32 statistics, log-softmax, loss gradients
BF16_BYTES = 2
MASK_BYTES = 1  # torch native_dropout keeps a bool mask: one byte per dropped-or-kept element
INDEX_BYTES = 8  # int64 token ids (the embedding and the loss keep them for backward)

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
# ZeRO-3 gathers each layer's full parameters just before use and keeps the next one prefetched (DeepSpeed
# stage3_prefetch_bucket_size, FSDP forward/backward prefetch): two layers of unsharded parameters in flight.
ZERO3_GATHERED_LAYERS = 2


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
    """Peak bytes on the most loaded GPU, split into the parts that sum to `total_bytes`.

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
    overhead_bytes: int  # CUDA context, workspaces, NCCL, fragmentation (OverheadSpec)
    total_bytes: int
    peak_phase: str  # "optimizer-step", "backward-start" (detailed) or "static+activations" (paper)
    method: str

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


_COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "transient")


def predict_memory(
    model: ModelSpec,
    training: TrainingSpec,
    par: Parallelism | None = None,
    method: str = "detailed",
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
) -> MemoryBreakdown:
    """Peak memory per GPU of one training step of `model` under `training`, split as `par` says.

    >>> from frenzy_core.models import ZOO
    >>> predict_memory(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8), method="paper",
    ...                overhead=NO_OVERHEAD).total_bytes
    11079748608
    """
    par = par or Parallelism()
    _check_method(method)
    check_parallelism(model, training, par)
    dp, tp, pp, b = (np.asarray(v, dtype=np.int64) for v in (par.dp, par.tp, par.pp, training.micro_batch))
    parts, phase = _evaluate(model, training, dp, tp, pp, b, method, overhead)
    values = {k: int(v) for k, v in parts.items()}
    if method == "paper":
        phase_name = "static+activations"
    else:
        phase_name = "optimizer-step" if int(phase) == _PHASE_OPTIMIZER else "backward-start"
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
    )


def predict_memory_totals(
    model: ModelSpec,
    training: TrainingSpec,
    dp,
    tp,
    pp,
    micro_batch,
    method: str = "detailed",
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
) -> np.ndarray:
    """Vectorised `predict_memory(...).total_bytes` over broadcast int arrays dp, tp, pp, micro_batch (int64 bytes).

    No validation: the caller guarantees the splits divide the model and the batch (plans.py enumerates only those).

    >>> from frenzy_core.models import ZOO
    >>> predict_memory_totals(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8), np.array([1, 2]), 1, 1, 1,
    ...                       method="paper", overhead=NO_OVERHEAD).tolist()
    [11079748608, 6776392704]
    """
    _check_method(method)
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in (dp, tp, pp, micro_batch)))
    parts, _ = _evaluate(model, training, *arrays, method, overhead)
    return parts["total"]


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise SpecError("method", f"unknown memory method {method!r}; choose one of: {', '.join(METHODS)}")


def _evaluate(model, training, dp, tp, pp, b, method, overhead):
    """Components (int64 arrays, rounded one by one so they sum to the total) and the phase index of the peak."""
    if method == "paper":
        parts, phase = _paper(model, training, dp, tp), np.zeros(np.shape(dp), dtype=np.int64)
    else:
        parts, phase = _detailed(model, training, dp, tp, pp, b)
    rounded = {k: np.rint(parts[k]).astype(np.int64) for k in _COMPONENTS}
    allocated = sum(rounded.values())
    rounded["overhead"] = np.rint(_overhead(overhead, dp * tp * pp, allocated, method)).astype(np.int64)
    rounded["total"] = allocated + rounded["overhead"]
    return rounded, phase


def _overhead(spec: OverheadSpec, num_gpus, allocated, method):
    if method == "paper":  # the paper adds nothing beyond its two terms
        return np.zeros(np.shape(allocated))
    nccl = np.where(num_gpus > 1, spec.nccl_buffer_bytes, 0)
    return spec.cuda_context_bytes + spec.workspace_bytes + nccl + spec.fragmentation_fraction * allocated


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
_PHASE_OPTIMIZER, _PHASE_BACKWARD = 0, 1


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


def layer_activations(model: ModelSpec, training: TrainingSpec) -> _LayerActivations:
    """Per-token activation bytes of one layer (before dividing by t), named term by term.

    Korthikanti Table 2 for GPT-style layers assumes bf16 everywhere and GELU 4h: 34 sbh + 5 a s^2 b. The terms
    here follow what the traced PyTorch step keeps (docs/memory.md): the residual stream has the parameters' dtype
    (fp32 under AMP), each block's first linear saves a compute-dtype copy of the norm output, flash attention saves
    q, k, v, its output and an fp32 log-sum-exp, eager attention saves fp32 softmax probabilities plus their bf16 copy.
    """
    ps = training.precision_setup
    h, a, kv, ffn = model.hidden_size, model.num_heads, model.kv_dim, model.ffn
    act, resid = ps.activation_bytes, ps.residual_bytes
    dropout = training.dropout > 0
    norm_stats = NORM_STATS[model.norm_kind] * FP32_BYTES

    # -- attention block --
    attn_norm_input = resid * h  # LayerNorm/RMSNorm keeps its input: the residual stream (K. Table 2: 2sbh at bf16)
    attn_norm_stats = norm_stats  # mean/rstd (LayerNorm) or rstd (RMSNorm), fp32 per token
    qkv_input = act * h  # the QKV linear keeps its (compute-dtype) input (K.: 2sbh)
    proj_dropout_mask = MASK_BYTES * h if dropout else 0  # residual dropout after the output projection (K.: sbh)
    if training.attention == "flash":
        qkv_output = act * (h + 2 * kv)  # q, k, v saved by flash attention (views of the fused QKV output)
        rope_copies = act * (h + kv) if model.position_kind == "rotary" else 0  # rotated q and k are new tensors
        flash_output = act * h  # flash output; the output projection keeps the same storage as its input
        flash_lse = FP32_BYTES * a  # log-sum-exp, a*s*b fp32 (FlashAttention-2, Dao 2023)
        attention_split = qkv_output + rope_copies + flash_output + flash_lse
        attention_scores = 0.0
    else:
        # Batched matmuls on head-major tensors: q, k, v are copied out of the fused QKV (or rotated, or widened by
        # GQA's repeat_kv): three full-width tensors (K.: Q, K 4sbh + V 2sbh).
        qk_v_copies = 3 * act * h
        context_copy = act * h  # (b, a, s, d) -> (b, s, h) copy kept by the output projection (K.: 2sbh)
        attention_split = qk_v_copies + context_copy
        softmax_fp32 = FP32_BYTES * a  # softmax output x s, fp32 as CUDA autocast computes it (K.: 2as^2b at bf16)
        probs_compute = act * a  # its compute-dtype copy (or dropout output) that the PV matmul keeps (K.: 2as^2b)
        probs_dropout_mask = MASK_BYTES * a if dropout else 0  # K.: as^2b
        attention_scores = softmax_fp32 + probs_compute + probs_dropout_mask
        if training.recompute == "selective":  # Korthikanti Sec. 5: recompute the attention core, drop the s^2 terms
            attention_scores = 0.0
    # -- MLP block --
    mlp_norm_input = resid * h
    mlp_norm_stats = norm_stats
    fc1_input = act * h  # K.: 2sbh
    mlp_dropout_mask = MASK_BYTES * h if dropout else 0  # K.: sbh
    if model.is_moe:
        inner, experts_per_token = model.expert_ffn, model.moe_top_k
        router_probs = FP32_BYTES * model.num_experts  # fp32 router softmax (Megatron / HF Mixtral)
        dispatched_input = act * h  # each routed copy of the token's input, kept by the expert's first linear
    else:
        inner, experts_per_token = ffn, 1
        router_probs = dispatched_input = 0
    if model.mlp_kind == "swiglu":
        fused_gate_up = act * 2 * inner  # kept by SiLU (gate half) and by the product (up half)
        silu_output = act * inner
        product = act * inner  # input of the down projection
        mlp_inner = fused_gate_up + silu_output + product
    else:
        fc1_output = act * inner  # GELU input (K.: 8sbh for 4h)
        gelu_output = act * inner  # fc2 input (K.: 8sbh)
        mlp_inner = fc1_output + gelu_output
    mlp_split = experts_per_token * (mlp_inner + (dispatched_input if model.is_moe else 0)) + router_probs

    replicated = attn_norm_input + attn_norm_stats + qkv_input + proj_dropout_mask
    replicated += mlp_norm_input + mlp_norm_stats + fc1_input + mlp_dropout_mask
    return _LayerActivations(replicated=replicated, split=attention_split + mlp_split, scores=attention_scores)


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


def _stage_parameters(model: ModelSpec, t, p):
    """Parameters on the first and on the last pipeline stage, for tensor-parallel degree t and p stages.

    Megatron splits each layer's linears and the (vocab-parallel) embedding and LM head by t; norms and learned
    positions are replicated. The first stage holds the embedding, the last the final norm and the LM head; with
    tied embeddings and p > 1 the last stage keeps its own copy of the word embedding (Megatron
    `setup_embeddings_and_output_layer`). Biases of row-parallel linears are replicated in Megatron; counting them
    split by t is off by h per layer (negligible).
    """
    h, V, num_layers = model.hidden_size, model.vocab_size, model.num_layers
    layer_split = model.attention_parameters() + model.mlp_parameters()
    layer_replicated = 2 * model.norm_parameters()
    word_embedding = V * h
    positions = model.embedding_parameters() - word_embedding
    head = word_embedding  # an untied LM head, or the last stage's copy of a tied one
    final_norm = model.norm_parameters()
    layers = (num_layers / p) * (layer_split / t + layer_replicated)
    single = p == 1
    untied_head = 0 if model.tie_embeddings else head / t
    first = word_embedding / t + positions + layers + np.where(single, final_norm + untied_head, 0.0)
    last = np.where(single, first, layers + final_norm + head / t)
    castable_layers = (num_layers / p) * layer_split / t  # the linears autocast casts to bf16
    # the LM head's weight is cast too (tied: the embedding matrix, used by F.linear); it runs on the last stage
    castable_first = castable_layers + np.where(single, word_embedding / t, 0.0)
    castable_last = castable_layers + word_embedding / t
    return first, last, castable_first, castable_last


def _detailed(model: ModelSpec, training: TrainingSpec, dp, tp, pp, b):
    ps = training.precision_setup
    d, t, p, b = (x.astype(np.float64) for x in (dp, tp, pp, b))
    s, V, h = training.seq_len, model.vocab_size, model.hidden_size
    tokens = s * b  # tokens of one micro-batch
    micro_batches = training.global_batch / (d * b)  # m: micro-batches per replica per step
    in_flight = np.minimum(p, micro_batches)  # 1F1B: the first stage holds min(p, m) micro-batches (Narayanan 2021)
    sp_divisor = t if training.sequence_parallel else 1.0  # sequence parallelism splits the replicated terms too
    zero = training.zero_stage
    shard_optimizer = 1 if (training.distributed_optimizer and zero == 0) else zero  # Megatron's = ZeRO-1

    # -- model states, per stage --
    first_params, last_params, castable_first, castable_last = _stage_parameters(model, t, p)
    opt_state = OPTIMIZER_STATE_BYTES[training.optimizer]
    opt_temp = OPTIMIZER_TRANSIENT_BYTES[training.optimizer]

    # -- activations per micro-batch --
    layer = layer_activations(model, training)
    layer_bytes = tokens * (layer.replicated / sp_divisor + layer.split / t + layer.scores * s / t)
    layers_per_stage = model.num_layers / p
    if training.recompute == "full":
        # Korthikanti Sec. 5 (full recomputation): each layer keeps only its input (the residual stream); the layer
        # being recomputed in backward holds its full set once.
        checkpoint = tokens * ps.residual_bytes * h / sp_divisor
        stage_layers = layers_per_stage * checkpoint
        recompute_layer = layer_bytes
    else:
        stage_layers = layers_per_stage * layer_bytes
        recompute_layer = 0.0
    token_ids = tokens * INDEX_BYTES  # the micro-batch's int64 token ids, kept by the embedding's backward
    embedding_dropout_mask = tokens * MASK_BYTES * h / sp_divisor if training.dropout > 0 else 0.0
    per_micro_batch_fixed = token_ids + embedding_dropout_mask
    # Built once per forward and shared by every layer. With p > 1 we count them once per stage, as Megatron caches
    # its rotary table and fuses the causal mask (with one micro-batch in flight, as traced, this is exact).
    causal_mask = float(s * s * MASK_BYTES) if training.attention == "eager" else 0.0  # one bool s x s
    rope_tables = 2 * s * model.head_dim * BF16_BYTES if model.position_kind == "rotary" else 0.0  # cos and sin
    per_stage_fixed = causal_mask + rope_tables
    final_norm_input = tokens * (ps.residual_bytes * h + NORM_STATS[model.norm_kind] * FP32_BYTES) / sp_divisor
    head_input = tokens * ps.activation_bytes * h / sp_divisor  # the LM head's linear keeps its input
    target_ids = tokens * INDEX_BYTES  # the loss keeps a contiguous copy of the shifted targets
    head_activations = final_norm_input + head_input + target_ids

    first_acts = in_flight * (stage_layers + per_micro_batch_fixed) + per_stage_fixed + recompute_layer
    last_acts = stage_layers + per_micro_batch_fixed + per_stage_fixed + head_activations + recompute_layer
    first_acts = np.where(p == 1, first_acts + head_activations, first_acts)
    last_acts = np.where(p == 1, first_acts, last_acts)

    # -- loss / LM-head buffers at the start of backward (last stage) --
    loss_buffers = tokens * V / t * LOSS_BACKWARD_BYTES_PER_LOGIT  # fp32 log-softmax + its two fp32 gradients
    head_grad_params = V * h / t
    head_grad = head_grad_params * HEAD_GRAD_COMPUTE_BYTES  # bf16 weight gradient from the head's matmul ...
    if ps.param_bytes != HEAD_GRAD_COMPUTE_BYTES:
        head_grad = head_grad + head_grad_params * ps.param_bytes  # ... and its cast to the parameter dtype (AMP)
    head_grad = head_grad + tokens * ps.activation_bytes * h / t  # the gradient w.r.t. the head's input
    last_logits = np.maximum(loss_buffers, head_grad)
    first_logits = np.where(p == 1, last_logits, 0.0)

    candidates = []
    for params, castable, acts, logits in (
        (first_params, castable_first, first_acts, first_logits),
        (last_params, castable_last, last_acts, last_logits),
    ):
        weights, grads, optimizer = model_state_bytes(params, ps, opt_state, shard_optimizer, d)
        updated_params = params / d if shard_optimizer >= 1 else params  # the params this GPU's optimizer updates
        # Optimizer step (docs/memory.md "The peak moves"): all gradients, all states, the foreach temporary.
        optimizer_step = {
            "weights": weights,
            "gradients": grads,
            "optimizer": optimizer,
            "activations": 0.0 * acts,
            "logits": 0.0 * acts,
            "transient": updated_params * opt_temp,  # foreach AdamW: one fp32 temporary per updated (fp32) param
        }
        # Start of backward, step >= 2: Adam states exist; gradients exist if they persist (Megatron's fp32
        # main-grad buffer, i.e. a master copy) or if an earlier micro-batch of this step already produced them.
        grads_persist = ps.master_bytes > 0
        grads_alive = grads if grads_persist else np.where(micro_batches > 1, grads, 0.0)
        compute_copies = castable * ps.compute_copy_bytes  # autocast's cached bf16 weights, held by autograd
        gathered = 0.0
        if zero >= 3:  # ZeRO-3 all-gathers the layers it is computing (unsharded, param dtype)
            gathered = ZERO3_GATHERED_LAYERS * (model.layer_parameters() / t) * ps.param_bytes
        backward_start = {
            "weights": weights,
            "gradients": grads_alive,
            "optimizer": optimizer,
            "activations": acts,
            "logits": logits,
            "transient": compute_copies + gathered,
        }
        candidates += [optimizer_step, backward_start]

    totals = np.stack([sum(np.broadcast_to(v, np.shape(d)) for v in c.values()) for c in candidates])
    best = np.argmax(totals, axis=0)
    parts = {
        k: np.choose(best, [np.broadcast_to(np.asarray(c[k], dtype=np.float64), np.shape(d)) for c in candidates])
        for k in _COMPONENTS
    }
    return parts, best % 2
