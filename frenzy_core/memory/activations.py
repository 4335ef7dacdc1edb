"""What one transformer layer saves for backward, per token of a micro-batch, term by term.

Korthikanti et al. 2022 (arXiv 2205.05198, Sec. 4 / Table 2) names the groups; the terms follow what the traced
PyTorch step keeps (docs/memory.md): fp32 residual stream under AMP, flash attention, GQA, SwiGLU, RMSNorm, MLA,
MoE routing, LoRA adapters and fp8 linears. `layer_activations` is the sum of the blocks below, in the order the
layer runs them: the attention block (`_attention_block`: flash or eager), the MLP block (`_mlp_block`, with MoE
routing in `_moe_routing`), then LoRA's and fp8's changes, then the norms around each block (`_layer_sum`).
`op_sac_layer_activations` is what a layer keeps under per-op selective recomputation.

>>> from frenzy_core.models import ZOO
>>> layer = layer_activations(ZOO["gpt2"], TrainingSpec(precision="bf16"))
>>> layer.replicated  # per token: 2 LayerNorm inputs (bf16) + their fp32 mean / rstd + the 2 first linears' inputs
6160.0
>>> layer.split  # q, k, v (3h) + flash output (h) + fp32 log-sum-exp (a) + GELU's input and output (2 x 4h), bf16
18480.0
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from frenzy_core.memory.adapters import adapter_input_cast_bytes, lora_layer_terms
from frenzy_core.memory.sizes import FP8_BYTES, FP32_BYTES, INDEX_BYTES, MASK_BYTES
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import Recipe, block_recipe, get_recipe
from frenzy_core.training import TrainingSpec

# Megatron MoE routing probabilities: probs.type_as(logits) (moe_utils.py topk_routing_with_score_function), bf16
# or fp32 with --moe-router-dtype fp32; counted at fp32 (the larger)
MEGATRON_PERMUTED_PROB_BYTES = FP32_BYTES
# Normalisation statistics saved per token: LayerNorm keeps mean and rstd, RMSNorm only rstd (both fp32).
NORM_STATS = {"layernorm": 2, "rmsnorm": 1}


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


@dataclass(frozen=True)
class _LayerContext:
    """What every block of one layer reads: element sizes and the recipe's switches."""

    act: int  # compute-dtype element of the saved activations
    resid: int  # the residual stream's element: the parameters' dtype (fp32 under AMP) unless the recipe casts it
    dropout: bool  # dropout > 0: each dropout keeps a 1-byte mask
    norm_stats: int  # mean/rstd (LayerNorm) or rstd (RMSNorm), fp32 per token
    # under autocast each Linear casts its (fp32 under AMP) input itself: separate Linears keep one copy each
    autocast_inputs: bool
    separate_qkv: bool  # separate q/k/v Linears with RoPE (GPT-2's c_attn is fused)
    norm_extra: float  # transformers LlamaRMSNorm.forward: the fp32 normalised tensor, saved by `weight * (...)`


@dataclass(frozen=True)
class _AttentionTerms:
    """Per-token bytes of the attention block (`replicated` parts, the part split by t, the s^2 part)."""

    norm_input: float  # LayerNorm/RMSNorm keeps its input: the residual stream (K. Table 2: 2sbh at bf16)
    norm_stats: float  # the norm's fp32 statistics (and an unfused norm's fp32 copy)
    qkv_input: float  # the QKV linear keeps its input (K.: 2sbh)
    dropout_mask: float  # residual dropout after the output projection (K.: sbh)
    split: float  # q, k, v and what attention saves inside the tensor-parallel region
    scores: float  # eager attention's s x s terms, per token and per unit of s


@dataclass(frozen=True)
class _Routing:
    """Per-token bytes of the MLP's routing: an MoE layer's router and routed copies; a dense layer has none."""

    inner: int  # the width between the MLP's first and last linear (an expert's for MoE)
    experts_per_token: int  # top-k (1 for a dense MLP)
    router_probs: float  # fp32 router softmax and the top-k indices (split by t)
    dispatched_input: float  # each routed copy of the token's input, kept by the expert's first linear
    expert_output: float  # the expert's output, kept by the multiplication with its routing probability
    routed_metadata: float  # Megatron: per routed copy, the sorted index and the permuted probability
    dispatcher_maps: float  # Megatron's all-gather dispatcher: the local map and the masked probabilities


@dataclass(frozen=True)
class _MlpTerms:
    """Per-token bytes of the MLP block."""

    norm_input: float  # the pre-MLP norm's input: the residual stream
    norm_stats: float
    fc1_input: float  # K.: 2sbh
    dropout_mask: float  # K.: sbh
    inner_bytes: float  # between the first and the last linear, per expert
    shared_experts: float  # DeepSeek's shared experts: a dense MLP on every token
    routing: _Routing


def unfused_norm_extra(model: ModelSpec, recipe: Recipe, width: int, input_bytes: int) -> float:
    """Bytes per token an unfused RMSNorm of `width` saves beyond a fused kernel (which keeps its input and rstd).

    transformers LlamaRMSNorm.forward (Qwen3, OLMo-2, DeepSeek alike): x.to(float32), then
    `weight * (x * rsqrt(...)).to(input_dtype)`: the fp32 copy (the input itself when it is fp32) and the normalised
    tensor in the input's dtype: FP32 x width more than input + rstd. Gemma2RMSNorm / Gemma3RMSNorm.forward:
    `self._norm(x.float()) * (1.0 + self.weight.float())`: the fp32 copy and the fp32 normalised tensor, while the
    input itself is not kept: (2 FP32 - input) x width. Gemma-2/3 are the sandwich-norm families. Olmo2RMSNorm.forward
    (transformers 5.24 models/olmo2/modeling_olmo2.py) casts after the weight, `(self.weight * hidden_states)
    .to(input_dtype)`: the product is fp32 and MulBackward keeps the fp32 normalised tensor for the weight's
    gradient, the same (2 FP32 - input) x width; OLMo-2 is the post-norm family.
    """
    if not (recipe.unfused_rmsnorm and model.norm_kind == "rmsnorm"):
        return 0.0
    if model.norm_placement in ("sandwich", "post"):  # the weight multiplies in fp32 (Gemma's 1 + weight, OLMo-2's)
        return (2 * FP32_BYTES - input_bytes) * width
    return FP32_BYTES * width


def frozen_norm_keeps_no_output(model: ModelSpec, recipe: Recipe, training: TrainingSpec) -> bool:
    """Whether a pre-norm RMSNorm of the unfused kind keeps nothing for its (frozen) weight under LoRA.

    transformers LlamaRMSNorm.forward (Qwen2/3, Mistral, Phi-3, DeepSeek alike) `self.weight *
    hidden_states.to(input_dtype)`, torchtune RMSNorm `x_normed * self.scale`: MulBackward keeps the normalised
    tensor only for the weight's gradient (autograd saves an operand only when the other input's gradient needs
    it), and LoRA freezes the norms: of the norm, only the fp32 copy and rstd remain (the `norm_input` slot goes).
    Not Gemma's or OLMo-2's fp32 products (`unfused_norm_extra` counts those otherwise), nor LitGPT's
    (`weight_kept_normed_bytes`), nor fused norms (which keep their input for the input's own gradient)."""
    return bool(training.lora_rank) and recipe.unfused_rmsnorm and model.norm_kind == "rmsnorm" \
        and model.norm_placement == "pre" and not recipe.rmsnorm_weight_keeps_normed


def weight_kept_normed_bytes(model: ModelSpec, recipe: Recipe, training: TrainingSpec, width: int,
                             input_bytes: int) -> float:
    """Bytes per token an RMSNorm written `weight * x_normed` in the input's dtype saves beyond its input and rstd.

    Lightning-AI/litgpt lit_gpt/rmsnorm.py at 8641822b, RMSNorm.forward: `x_normed = x * torch.rsqrt(norm_x +
    eps)`; `return self.weight * x_normed`. MulBackward keeps the operand the other one's gradient needs: x_normed
    only while the weight trains (full fine-tuning), in the input's dtype; LoRA freezes it
    (lit_gpt/lora.py mark_only_lora_as_trainable), and then nothing beyond x and the (tokens, 1) rsqrt is kept.

    >>> from frenzy_core.models import ZOO
    >>> from frenzy_core.frameworks.litgpt import RECIPE
    >>> weight_kept_normed_bytes(ZOO["llama-2-7b"], RECIPE, TrainingSpec(precision="bf16"), 4096, 2)
    8192
    >>> weight_kept_normed_bytes(ZOO["llama-2-7b"], RECIPE, TrainingSpec(precision="bf16", lora_rank=8), 4096, 2)
    0
    """
    if not (recipe.rmsnorm_weight_keeps_normed and model.norm_kind == "rmsnorm") or training.lora_rank:
        return 0
    return input_bytes * width


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
    cx = _layer_context(model, training, recipe)
    attention = _attention_block(model, training, recipe, cx)
    mlp = _mlp_block(model, recipe, cx, moe_layer)
    if training.lora_rank:
        attention, mlp = _with_lora(model, training, recipe, cx, attention, mlp)
    if training.fp8_linears and recipe.fp8_saves_casts:
        attention, mlp = _with_fp8_linears(model, cx, attention, mlp)
    if training.recompute_modules and moe_layer:
        mlp = _with_recompute_modules(model, training, cx, mlp)
    return _layer_sum(model, recipe, cx, attention, mlp)


def _layer_context(model: ModelSpec, training: TrainingSpec, recipe: Recipe) -> _LayerContext:
    ps = recipe.precision_setup(training.precision, training)
    act = ps.activation_bytes
    resid = act if recipe.residual_in_compute_dtype else ps.residual_bytes
    return _LayerContext(
        act=act,
        resid=resid,
        dropout=training.dropout > 0,
        norm_stats=NORM_STATS[model.norm_kind] * FP32_BYTES,
        autocast_inputs=recipe.autocast and ps.compute_copy_bytes > 0,
        separate_qkv=recipe.separate_projections and model.position_kind == "rotary",
        norm_extra=unfused_norm_extra(model, recipe, model.hidden_size, resid)
        + weight_kept_normed_bytes(model, recipe, training, model.hidden_size, resid),
    )


# --- attention block -------------------------------------------------------------------------------------------------
def _attention_block(model: ModelSpec, training: TrainingSpec, recipe: Recipe, cx: _LayerContext) -> _AttentionTerms:
    """The attention block's terms: its norm, the QKV input, flash or eager attention (MLA: `_mla_attention`), the
    q/k norms."""
    h, act = model.hidden_size, cx.act
    qkv_input = act * h * (3 if cx.separate_qkv and cx.autocast_inputs else 1)
    mla_split = None
    if model.is_mla:
        qkv_input, mla_split = _mla_attention(model, recipe, act, cx.autocast_inputs, training.attention == "flash")
    if training.attention == "flash":
        split, scores = _flash_attention(model, recipe, cx), 0.0
    else:
        split, scores = _eager_attention(model, training, recipe, cx)
    if model.is_mla:
        split = mla_split
    split += _qk_norm_bytes(model, recipe, act)
    return _AttentionTerms(
        norm_input=cx.resid * h,
        norm_stats=cx.norm_stats + cx.norm_extra,
        qkv_input=qkv_input,
        dropout_mask=MASK_BYTES * h if cx.dropout else 0,
        split=split,
        scores=scores,
    )


def _flash_attention(model: ModelSpec, recipe: Recipe, cx: _LayerContext) -> float:
    """Bytes per token flash attention's block saves inside the tensor-parallel region (no s^2 terms)."""
    act, q, kv = cx.act, model.q_dim, model.kv_dim
    vd, o = model.v_dim, model.attention_output_dim  # value width; context width (the output projection's input)
    rotary = model.position_kind == "rotary"
    # q, k, v saved by flash attention; fused QKV: views of its output, which stays whole. Separate q/k/v with
    # RoPE: only v survives (q and k are replaced by their rotated copies, modeling_llama apply_rotary_pos_emb)
    qkv_output = act * vd if cx.separate_qkv and rotary else act * (q + kv + vd)
    rope_copies = act * (q + kv) if rotary else 0  # rotated q and k are new tensors
    flash_output = act * o  # flash output; the output projection keeps the same storage as its input
    flash_lse = FP32_BYTES * model.num_heads  # log-sum-exp, a*s*b fp32 (FlashAttention-2, Dao 2023)
    # LitGPT (gqa_reshape_copies): the same copies, but only with 1 < kv heads < heads; with MHA / MQA its
    # reshapes of the permuted fused output are views (lit_gpt/model.py CausalSelfAttention.forward)
    gqa_copies = recipe.gqa_reshape_copies and 1 < model.kv_heads < model.num_heads
    if (recipe.repeat_kv_copies or gqa_copies) and rotary:
        # torchtitan Attention.forward: SDPA saves the rotated q, and k and v widened to every head by repeat_kv;
        # the narrow rotated k and the projections' outputs die
        qkv_output, rope_copies = act * o, act * 2 * q
    return qkv_output + rope_copies + flash_output + flash_lse


def _eager_attention(model: ModelSpec, training: TrainingSpec, recipe: Recipe, cx: _LayerContext):
    """(split, scores) bytes per token of eager attention: the head-major q, k, v copies and the context copy; the
    softmax probabilities, their compute-dtype copy, dropout mask and softcap (per unit of s)."""
    act, a, q = cx.act, model.num_heads, model.q_dim
    o = model.attention_output_dim  # context width (the output projection's input)
    # Batched matmuls on head-major tensors: q, k, v are copied out of the fused QKV (or rotated, or widened by
    # GQA's repeat_kv): three full-width tensors (K.: Q, K 4sbh + V 2sbh).
    # GQA's repeat_kv widens k to num_heads x head_dim (= q_dim) and v to num_heads x value_head_dim (= o).
    qk_v_copies = act * (2 * q + o)
    context_copy = act * o  # (b, a, s, d_v) -> (b, s, a d_v) copy kept by the output projection (K.: 2sbh)
    gpt2_bf16_softmax = (
        recipe.gpt2_softmax_in_input_dtype and model.position_kind == "learned" and not cx.autocast_inputs
    )
    if recipe.fused_softmax or gpt2_bf16_softmax:
        # megatron/core/fusions/fused_softmax.py FusedScaleMaskSoftmax.forward_fused_softmax: bf16 probs, saved
        # by the kernel's backward and (without dropout) by the PV matmul: one tensor (K.: 2as^2b)
        softmax_probs = act * a
        probs_compute = act * a if cx.dropout else 0  # dropout's output, kept by the PV matmul
    else:
        softmax_probs = FP32_BYTES * a  # softmax output, fp32 as CUDA autocast computes it (K.: 2as^2b at bf16)
        probs_compute = act * a  # its compute-dtype copy (or dropout output) that the PV matmul keeps
    probs_dropout_mask = MASK_BYTES * a if cx.dropout else 0  # K.: as^2b
    # Gemma-2 eager_attention_forward: scores / cap, tanh, * cap before the mask: tanh saves its output
    softcap_tanh = act * a if model.attn_logit_softcapping is not None else 0
    attention_scores = softmax_probs + probs_compute + probs_dropout_mask + softcap_tanh
    if training.recompute == "selective":  # Korthikanti Sec. 5: recompute the attention core, drop the s^2 terms
        attention_scores = 0.0
    return qk_v_copies + context_copy, attention_scores


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


# --- MLP block -------------------------------------------------------------------------------------------------------
def _mlp_block(model: ModelSpec, recipe: Recipe, cx: _LayerContext, moe_layer: bool) -> _MlpTerms:
    """The MLP block's terms: its norm, the first linear's input, the inner activations (dense, Megatron experts'
    or HF experts'), an MoE layer's routing and shared experts."""
    h, act = model.hidden_size, cx.act
    routing = _moe_routing(model, recipe, cx) if moe_layer else _Routing(model.ffn, 1, 0, 0, 0, 0, 0)
    fc1_input = act * h  # K.: 2sbh
    separate_gate_up = recipe.separate_projections or recipe.separate_mlp_linears
    if model.mlp_kind == "swiglu" and separate_gate_up and cx.autocast_inputs:
        fc1_input = 2 * act * h  # gate_proj and up_proj each keep their own bf16 cast of the input
    if moe_layer and recipe.moe_probs_in_experts:
        inner_bytes = megatron_expert_inner_bytes(model, act, routing.inner)
    else:
        inner_bytes = _mlp_inner_bytes(model, recipe, act, routing.inner, cx.autocast_inputs)
    shared_experts = 0.0
    if moe_layer and model.num_shared_experts:
        # DeepseekV3MoE.shared_experts: a dense MLP of n_shared x moe_intermediate_size on every token; under
        # autocast its gate/up linears cast the norm output again (one cast fused, two separate)
        shared_inner = model.num_shared_experts * model.expert_ffn
        casts = (2 if recipe.separate_projections and model.mlp_kind == "swiglu" else 1) if cx.autocast_inputs else 0
        shared_experts = act * h * casts + _mlp_inner_bytes(model, recipe, act, shared_inner, cx.autocast_inputs)
    return _MlpTerms(
        norm_input=cx.resid * h,
        norm_stats=cx.norm_stats + cx.norm_extra,
        fc1_input=fc1_input,
        dropout_mask=MASK_BYTES * h if cx.dropout else 0,
        inner_bytes=inner_bytes,
        shared_experts=shared_experts,
        routing=routing,
    )


def _moe_routing(model: ModelSpec, recipe: Recipe, cx: _LayerContext) -> _Routing:
    """An MoE layer's router and routed copies, per token."""
    h, act = model.hidden_size, cx.act
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
    if recipe.fp32_router_input and model.is_mla and not cx.autocast_inputs:
        # DeepseekV2/V3 router: F.linear(hidden_states.type(torch.float32), ...): without autocast the fp32 copy
        # of the compute-dtype input is what the linear saves (under AMP the input already is fp32)
        router_probs += FP32_BYTES * h
    return _Routing(model.expert_ffn, model.moe_top_k, router_probs, dispatched_input, expert_output,
                    routed_metadata, dispatcher_maps)


def _mlp_inner_bytes(model: ModelSpec, recipe: Recipe, act: int, inner: int, autocast_inputs: bool) -> float:
    """Bytes per token an MLP of inner width `inner` saves between its first and its last linear."""
    if model.mlp_kind == "swiglu":
        fused_gate_up = act * 2 * inner  # kept by SiLU (gate half) and by the product (up half)
        silu_output = 0 if recipe.fused_swiglu else act * inner  # a fused SwiGLU recomputes it in backward
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


# --- what LoRA and fp8 linears change, and the sum -----------------------------------------------------------------
def _with_lora(model: ModelSpec, training: TrainingSpec, recipe: Recipe, cx: _LayerContext,
               attention: _AttentionTerms, mlp: _MlpTerms) -> tuple[_AttentionTerms, _MlpTerms]:
    """The blocks with LoRA's adapters (`lora_layer_terms`): the linears' kept inputs and the adapters' tensors."""
    lora = lora_layer_terms(model, training, cx.act, mlp.routing.inner, cx.autocast_inputs, cx.separate_qkv,
                            recipe.separate_projections or recipe.separate_mlp_linears,
                            zero_pad=recipe.lora_qkv_zero_pad,
                            cast_bytes=adapter_input_cast_bytes(recipe, cx.act, cx.autocast_inputs))
    split = attention.split + lora.attention_extra
    if training.attention == "eager" and not model.is_mla and not lora.o_input_kept:
        split -= cx.act * model.attention_output_dim  # the context copy only the output projection kept
    attention = replace(attention, split=split,
                        qkv_input=attention.qkv_input if lora.qkv_input is None else lora.qkv_input)
    mlp = replace(mlp, inner_bytes=mlp.inner_bytes + lora.mlp_extra,
                  fc1_input=mlp.fc1_input if lora.fc1_input is None else lora.fc1_input)
    if frozen_norm_keeps_no_output(model, recipe, training):
        attention, mlp = replace(attention, norm_input=0.0), replace(mlp, norm_input=0.0)
    return attention, mlp


def _with_fp8_linears(model: ModelSpec, cx: _LayerContext, attention: _AttentionTerms,
                      mlp: _MlpTerms) -> tuple[_AttentionTerms, _MlpTerms]:
    """Transformer Engine fp8 (transformer_engine/pytorch/module/layernorm_linear.py, linear.py, _Linear.forward):
    the input each linear keeps for its weight gradient is its fp8 cast (1 B): the norm outputs of QKV and fc1, the
    fc2 / down input; the output projection keeps an fp8 copy beside the attention's bf16 output."""
    h, o = model.hidden_size, model.attention_output_dim
    attention = replace(attention, qkv_input=FP8_BYTES * h, split=attention.split + FP8_BYTES * o)
    mlp = replace(mlp, fc1_input=FP8_BYTES * h, inner_bytes=mlp.inner_bytes - (cx.act - FP8_BYTES) * mlp.routing.inner)
    return attention, mlp


def _with_recompute_modules(model: ModelSpec, training: TrainingSpec, cx: _LayerContext, mlp: _MlpTerms) -> _MlpTerms:
    """An MoE layer under Megatron's output-discarding recomputation (TrainingSpec.recompute_modules; Megatron-LM
    @d98e8a64). Each checkpointed module runs without saving its internals, keeps its input and frees its output
    once the next op has read it, and runs again in backward:

    layernorm  transformer_layer.py TransformerLayer.__init__ sets recompute_pre_mlp_layernorm where
               pre_mlp_layernorm is a module of its own: a Transformer Engine MoE layer's TENorm (a dense layer's
               norm is fused into linear_fc1's LayerNormLinear, and the attention's into linear_qkv's: IdentityOp, not
               recomputed). The norm's output, which the router's linear and the dispatcher read, and its fp32
               statistics are not kept; its input, the residual stream, is (the checkpoint's input).
    moe_act    moe/experts.py `activation_recompute` (with fp8 `set_save_original_input(self.linear_fc2)`, so fc2
               keeps no fp8 copy either): the activation keeps fc1's output (2 x inner for SwiGLU, inner for GELU) and
               fc2's input is not kept.
    """
    if "layernorm" in training.recompute_modules:  # neither its output nor its statistics (run without grad)
        mlp = replace(mlp, fc1_input=0.0, norm_stats=0.0)
    if "moe_act" in training.recompute_modules:
        fc1_output = cx.act * (2 if model.mlp_kind == "swiglu" else 1) * mlp.routing.inner
        mlp = replace(mlp, inner_bytes=fc1_output)
    return mlp


def _layer_sum(model: ModelSpec, recipe: Recipe, cx: _LayerContext, attention: _AttentionTerms,
               mlp: _MlpTerms) -> _LayerActivations:
    """The layer's groups: the norms and first-linear inputs (replicated), the rest (split by t), the scores, the
    routed copies."""
    h, act, routing = model.hidden_size, cx.act, mlp.routing
    mlp_split = routing.experts_per_token * mlp.inner_bytes + routing.router_probs + mlp.shared_experts
    routed = routing.experts_per_token * (routing.dispatched_input + routing.expert_output + routing.routed_metadata)
    routed += routing.dispatcher_maps
    # Norms on the sublayers' outputs (compute dtype): Gemma-2/3 post_attention_layernorm and
    # post_feedforward_layernorm on top of the input norms (Gemma2DecoderLayer.forward); OLMo-2 has only these two
    # (Olmo2DecoderLayer.forward), so its residual stream is kept only as the q/k/v linears' input.
    post_norm = act * h + cx.norm_stats + unfused_norm_extra(model, recipe, h, act)
    attn_norm_input, attn_norm_stats = attention.norm_input, attention.norm_stats
    mlp_norm_input, mlp_norm_stats = mlp.norm_input, mlp.norm_stats
    if model.norm_placement == "post":
        attn_norm_input = mlp_norm_input = 0
        attn_norm_stats = mlp_norm_stats = post_norm
    elif model.norm_placement == "sandwich":
        attn_norm_stats, mlp_norm_stats = attn_norm_stats + post_norm, mlp_norm_stats + post_norm
    replicated = attn_norm_input + attn_norm_stats + attention.qkv_input + attention.dropout_mask
    replicated += mlp_norm_input + mlp_norm_stats + mlp.fc1_input + mlp.dropout_mask
    return _LayerActivations(
        replicated=replicated, split=attention.split + mlp_split, scores=attention.scores, routed=routed
    )


# --- per-op selective recomputation -----------------------------------------------------------------------------------
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
    ps = recipe.precision_setup(training.precision, training)
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
