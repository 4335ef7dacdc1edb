"""Megatron-Core with Transformer Engine: bf16 params, fp32 main grads, the vocab-parallel loss, DDP with overlapped
buckets, TE's tensor-parallel communication overlap, interleaved and uneven pipelines.

>>> FRAMEWORK.recipe.loss_bytes_per_logit, FRAMEWORK.supports_amp, FRAMEWORK.supports_uneven_stages
(6, False, True)
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.frameworks import pytorch
from frenzy_core.frameworks.base import BF16_BYTES, FP32_BYTES, Framework, fused_optimizer_kernel

# megatron/core/tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy: logits.float() once, then max-subtract,
# exp and divide in place; save_for_backward(exp_logits) keeps that one fp32 softmax; backward turns it into the
# gradient in place (grad_input = softmax; grad_input.mul_), and autograd casts it to the bf16 logits' dtype.
MEGATRON_VOCAB_PARALLEL_CE_BYTES = FP32_BYTES + BF16_BYTES  # = 6

# Megatron-Core's own switches: --moe-grouped-gemm (TE GroupedLinear experts, multi-stream workspaces),
# --fp8-param-gather (fp8 weights), --grad-reduce-in-bf16 (bf16 main grads), --use-precision-aware-optimizer
# (16-bit master remainders; NeMo's Apex distributed_fused_adam keeps them too), --recompute-modules layernorm /
# moe_act (TrainingSpec.recompute_modules: output-discarding recomputation, memory.activations
# recompute_module_terms)
SWITCHES = ("moe_grouped_gemm", "fp8_params", "bf16_grad_reduce", "param_remainders", "recompute_modules")

# megatron/core (transformer_impl=transformer_engine): bf16 params, fp32 main grads, vocab-parallel loss
RECIPE = replace(
    pytorch.RECIPE,
    name="megatron",
    describes="Megatron-Core with Transformer Engine (or its local layers where they agree)",
    loss_bytes_per_logit=MEGATRON_VOCAB_PARALLEL_CE_BYTES,
    # megatron/core/fusions/fused_softmax.py FusedScaleMaskSoftmax (TE: attention/softmax.py): the fused
    # scaled_upper_triang_masked_softmax kernel returns bf16 probs and saves only them
    fused_softmax=True,
    autocast=False,  # --bf16 casts the model itself (Float16Module); no autocast
    residual_in_compute_dtype=True,
    # moe/experts.py TEGroupedMLP.forward (bias_act_func) and transformer/mlp.py MLP.forward(per_token_scale):
    # `intermediate * permuted_probs` inside the expert; token_dispatcher.py calls unpermute without probs
    moe_probs_in_experts=True,
    # transformer_config.py: moe_token_dispatcher_type = "allgather" by default
    moe_allgather_dispatcher=True,
    # transformer/mlp.py MLP.forward with bias_activation_fusion (Megatron-LM --swiglu: bias_swiglu_fusion on unless
    # --no-bias-swiglu-fusion; the NeMo / Megatron-Bridge Llama and Qwen providers set it): bias_swiglu_impl ->
    # fusions/fused_bias_swiglu.py SwiGLUFunction.forward `ctx.save_for_backward(input_for_backward)`, fc1's
    # output only; its backward recomputes SiLU (swiglu_back). Read at NVIDIA/Megatron-LM@00caa53a.
    fused_swiglu=True,
    # a tied weight's two bf16 contributions also meet in autograd's InputBuffer, but the grad-accumulation hook
    # (distributed_data_parallel.py _make_backward_post_hook) moves them into the fp32 main_grad buffer: not the
    # plain-`.grad` moment memory.states.tied_embedding_gradient_bytes counts (left out, unmeasured)
    tied_gradients_meet_in_input_buffer=False,
)


def dp_overlap_default(training) -> bool:
    """On: Megatron-Bridge / NeMo recipes set ddp overlap_grad_reduce and overlap_param_gather (--overlap-grad-reduce,
    --overlap-param-gather with the distributed optimizer). perf.step_time_totals hides the gradient reduce-scatter
    (the whole all-reduce without the distributed optimizer) behind the last micro-batch's backward and the parameter
    all-gather behind the first one's forward; one bucket (perf.MEGATRON_BUCKET_*) of each cannot hide."""
    return True


def tp_overlap_default(training) -> bool:
    """On with sequence parallelism: the recipes' tp_comm_overlap (--tp-comm-overlap; Transformer Engine's
    userbuffers, transformer_engine/pytorch/module/base.py initialize_ub, need sequence parallelism) splits each
    all-gather / reduce-scatter into chunks pipelined with the GEMM that consumes / produces them."""
    return training.sequence_parallel


def pp_overlap(training, vp):
    """On with the interleaved schedule (vp > 1), off without it: Megatron-LM's --no-overlap-p2p-communication
    defaults overlap_p2p_comm on and validate_args turns it off "if not using the interleaved schedule"
    (megatron/training/arguments.py); Megatron-Bridge's and NeMo 2's recipes set overlap_p2p_comm = True with
    batch_p2p_comm = False when vp > 1, batch_p2p_comm (blocking) otherwise
    (src/megatron/bridge/training/comm_overlap.py, nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py). The
    interleaved schedule then posts each chunk's send / receive asynchronously and waits for it only before the
    chunk that needs it (megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving),
    so the transfer runs under the other chunks' compute."""
    return vp > 1


def attention_kernel(training, compute_capability: tuple[int, int]) -> str:
    """cuDNN's fused attention on Hopper and newer, FlashAttention-2 before. Megatron-Core's TE layer spec builds
    core attention as TEDotProductAttention (megatron/core/extensions/transformer_engine_spec_provider.py
    core_attention, NVIDIA/Megatron-LM@d98e8a64), a te.pytorch.DotProductAttention, whose get_attention_backend
    drops FlashAttention when FusedAttention can run too, "to give FusedAttention preference on Hopper+ for
    performance reasons", `if use_flash_attention and use_fused_attention and device_compute_capability >= (9, 0)`
    (transformer_engine/pytorch/attention/dot_product_attention/utils.py, NVIDIA/TransformerEngine@d0067d0d; the
    same rule since @43569381, 2024-06-13, before NeMo 24.07); below sm90 it keeps flash-attn's FlashAttention-2."""
    return "cudnn" if compute_capability >= (9, 0) else "flash-attn-2"


def elementwise_fused(training) -> bool:
    """Fused: Megatron-Core's TE layer spec runs the pre-attention and pre-MLP norms inside TE's LayerNormLinear
    (megatron/core/extensions/transformer_engine_spec_provider.py, te.pytorch.LayerNormLinear: one layernorm /
    rmsnorm kernel, transformer_engine/common/normalization), the residual adds as the jit-fused
    bias_dropout_add (megatron/core/fusions/fused_bias_dropout.py), SwiGLU / GeLU as bias_swiglu_impl /
    bias_gelu_impl (megatron/core/fusions/fused_bias_swiglu.py, fused_bias_gelu.py) and RoPE with TE's fused kernel
    (--apply-rope-fusion: assumed on, as the NeMo / Megatron-Bridge recipes are taken to set it; not checked here):
    each reads its inputs once and writes its outputs once."""
    return True


FRAMEWORK = Framework(
    name="megatron",
    describes=RECIPE.describes,
    recipe=RECIPE,
    export_format="megatron",
    default_precision="bf16-master",  # it has no autocast mode: Megatron --bf16
    supports_cp=True,  # --context-parallel-size: ring attention
    supports_vp=True,  # --num-layers-per-virtual-pipeline-stage: interleaved 1F1B
    # --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers (training.pipeline_layout_problem)
    supports_uneven_stages=True,
    # expert parallelism carved out of d x cp (etp = t: etp x ep divides tp x dp x cp, training.check_parallelism)
    supports_ep=True,
    experts_fit=None,
    # the optimizer: Transformer Engine's FusedAdam / FusedSGD, else apex's (megatron-core 0.16.1
    # megatron/core/optimizer/__init__.py: `from transformer_engine.pytorch.optimizers import FusedAdam as Adam`,
    # then `from apex.optimizers import FusedAdam as Adam`; torch's only with neither installed, which it warns of)
    optimizer_kernel=fused_optimizer_kernel,
    fully_shards=False,
    zero_stages=(0, 1, 2, 3),
    supports_amp=False,
    supports_chunked_loss=False,
    switches=SWITCHES,
    switches_label="grouped GEMM, fp8 weights, bf16 grads, master remainders, per-module recompute",
    dp_overlap_default=dp_overlap_default,
    tp_overlap_default=tp_overlap_default,
    pp_overlap=pp_overlap,
    attention_kernel=attention_kernel,
    elementwise_fused=elementwise_fused,
    amp_refusal="megatron has no autocast mode: use precision bf16-master (Megatron --bf16) or fp32",
    chunked_loss_refusal="megatron's vocab-parallel loss is not chunked: use loss_chunks 1",
    switch_refusal="{field} is Megatron-Core's switch (--moe-grouped-gemm, --fp8-param-gather, --grad-reduce-in-bf16, "
                   "--use-precision-aware-optimizer, --recompute-modules): "
                   "use framework megatron, got {framework}",
)
