"""Step-time model: FLOPs per optimizer step, then compute, tensor/data/pipeline communication and bubble time.

The FLOPs count follows Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", arXiv 2104.04473, Sec. 5.1 eq. 3). Their eq. 3 is, for B samples of s tokens, l layers, width h and
vocabulary V, with full activation recomputation:

    F = 96 B s l h^2 (1 + s / (6h) + V / (16 l h))
      = 96 B s l h^2          (layer matmuls, 4 passes: forward + recomputed forward + backward = 2x forward)
      + 16 B s^2 l h          (attention scores QK^T and context AV, 4 passes)
      + 6 B s h V             (LM-head logits: forward + backward only, never recomputed)

Without recomputation the layer and attention terms take 3 passes (x 3/4), so F = 72 B s l h^2 (1 + s/(6h)) + 6 B s h V,
which is the familiar 6 x parameters x tokens plus the attention term 12 l h s per token. We use the model's exact
per-layer parameter count (biases, norms, GQA, SwiGLU, top-k MoE experts) in place of 12 h^2. Eq. 3 counts all s keys
per query (eager attention); flash attention's causal kernel computes half (`attended_keys`, CAUSAL_KEYS_FRACTION, as
Megatron's num_floating_point_operations counts), and full recomputation with recompute_every = k replays only the
checkpointed ceil(l / k) layers; torchtitan's per-op SAC replays every second matmul (OP_SAC_RECOMPUTED_MM_FRACTION).
Under LoRA / QLoRA (lora_rank > 0) the base is frozen: its linears (and the LM head) run forward and input gradient,
4 FLOPs per weight, not the weight gradient (WEIGHT_GRAD_FLOPS_PER_PARAM_TOKEN); the adapters add 6 x r x (in + out)
per targeted linear (Hu et al. 2021, arXiv 2106.09685). MFU's model FLOPs keep that executed count (NeMo's convention).

Time per step on N = d x t x p x cp GPUs of one type (all terms per GPU, on the critical path; communication the
framework overlaps with compute is split into exposed and overlapped seconds, `comm_overlaps`).
The pipeline runs at the pace of its slowest stage: the per-stage terms are those of the stage whose layers (the
uneven first / last stages' own counts, `Parallelism.first_stage_layers`; the LM head on the last) take longest:

    compute_s   = linear GEMMs / (d t cp x peak(fp8 under fp8_linears, else bf16) x eff)
                + (norms + LM head) / (d t cp x bf16 peak x eff)
                + attention core / d t cp, as its fused kernel runs it (`attention_kernel_tflops`): the forward passes
                  at the kernel's measured forward TFLOP/s, the backward (2.5 forwards: FLASH_BACKWARD_FORWARDS) at
                  its backward TFLOP/s, both at seq_len / cp, for the stack's kernel on that GPU
                  (`Framework.attention_kernel`: FlashAttention-2 under PyTorch SDPA, cuDNN fused attention under
                  Megatron / Transformer Engine on Hopper; FA2 arXiv 2307.08691 Fig. 4, FA3 arXiv 2407.08608
                  Figs. 5-6); at bf16 peak x eff where no figure is published (ATTENTION_KERNEL_COMPUTE_CAPABILITY:
                  Blackwell, Ada, Volta, AMD ...), for eager or fp32 attention, or when the caller gives `mfu`
                + LoRA's adapters: rank-r GEMMs at their roofline share (`expert_gemm_roofline_fraction`)
                + fp8 quantisation of the linears' activations and output gradients, memory-bound
                  (FP8_CAST_BYTES_PER_ELEMENT x `fp8_cast_elements_per_token` / HBM bandwidth)
                  eff: the type's measured hardware efficiency (`GPUType.efficiency`: HFU, recompute included)
                + MoE layers: the routed experts' GEMMs at their roofline share min(1, intensity x HBM bandwidth /
                  peak) of tokens per expert = ep etp b s k / (cp t E) (`expert_gemm_roofline_fraction`), and the
                  token permute / unpermute as HBM traffic (`_moe_extra_time_flops`, Megatron-Core moe_utils.py)
    tp_comm_s   = Megatron's all-reduces of b x s x h activations over the intra-node link (Shoeybi et al. 2019);
                  with tp comm overlap only what exceeds the layers' linear GEMMs is exposed
    pp_bubble_s = (p - 1) / (m vp) x (the slowest stage's compute + tp, ep and cp communication), m = micro-batches
                  per replica (Narayanan 2021 Sec. 2.2.1; vp interleaved chunks per rank divide it, Sec. 2.2.2)
    pp_p2p_s    = activation sends between stages (scatter/gather: 1/t of b x s x h each, Narayanan 2021 Sec. 4.1)
    ep_comm_s   = MoE token all-to-alls (dispatch + combine) over the expert-parallel group, per MoE layer: the
                  peers on the GPU's node over NVLink, the rest over the node's NIC, the slower of the two
                  (unoverlapped: Megatron's --overlap-moe-expert-parallel-comm and DeepEP are not modelled)
    cp_comm_s   = context parallelism's ring: each layer passes K and V chunks (and dK, dV in backward) cp - 1 hops
    dp_comm_s   = ring all-reduce of one shard's gradients over the slowest link the plan spans (routed experts
                  over the d / ep ranks that hold the same experts), on the stage with the most parameters (LoRA:
                  the adapters' only; under ZeRO-3 / FSDP + the frozen base's forward and backward all-gathers);
                  overlapped: exposed = unhideable + max(0, traffic - unhideable - window) (Megatron: one bucket,
                  the last micro-batch's backward / first forward; FSDP / ZeRO-3: one layer, the whole step)
    optimizer_s = the optimizer's memory-bound sweep over that stage's shard of trainable parameters, gradients and
                  states

    overhead_s  = the type's measured fixed per-step cost (`step_overhead_s`)

Links run at nominal bandwidth x the type's measured all-reduce efficiency (`intra_link_efficiency` inside a node,
`network_efficiency` across nodes); the efficiencies and MFUs come from measurements (gpus.py, docs/perf.md).
`step_time_totals` is the same model over numpy arrays of the split and micro-batch, for ranking thousands of plans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from frenzy_core import gemm
from frenzy_core.frameworks import get as get_framework
from frenzy_core.gpus import GPUType
from frenzy_core.memory import lora_head_parameters, lora_parameters
from frenzy_core.models import ModelSpec
from frenzy_core.training import (
    Parallelism,
    PipelineStages,
    TrainingSpec,
    check_parallelism,
    expert_tp_array,
)

# --- named constants ------------------------------------------------------------------------------------------------
# Matmul FLOPs per parameter per token: 2 forward (multiply + add) + 4 backward (input and weight gradients).
FLOPS_PER_PARAM_TOKEN = 6
# Attention core per layer per token, forward only: QK^T (2 s h) + scores x V (2 s h) = 4 s h. Times 3 for fwd+bwd
# gives Narayanan's 12 l h s per token (the s/(6h) term of eq. 3).
ATTENTION_FWD_FLOPS_PER_LAYER_TOKEN_PER_SH = 4
# Megatron tensor parallelism: 2 all-reduces in forward (after attention, after MLP) and 2 in backward (their
# conjugates) per layer per micro-batch (Shoeybi et al. 2019, arXiv 1909.08053, Fig. 4). Full recomputation repeats
# the 2 forward ones (Narayanan 2021 Sec. 3.5 counts the recomputed forward as a third pass).
TP_ALLREDUCES_PER_LAYER = 4
TP_ALLREDUCES_PER_LAYER_RECOMPUTE = 2
# Expert parallelism: Megatron-Core's alltoall token dispatcher (megatron/core/transformer/moe/token_dispatcher.py,
# MoEAlltoAllTokenDispatcher: token_permutation and token_unpermutation) runs one all-to-all to send each token's
# top-k copies to the experts' ranks and one to bring them back, in forward, and their conjugates in backward; full
# recomputation repeats the forward pair.
EP_ALLTOALLS_PER_MOE_LAYER = 4
EP_ALLTOALLS_PER_MOE_LAYER_RECOMPUTE = 2
# Context parallelism (ring attention, Transformer Engine's AttnFuncWithCPAndKVP2P in
# transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py): forward sends each rank's K and V
# chunk cp - 1 hops round the ring; backward sends K, V and their gradients dK, dV: twice the forward bytes; full
# recomputation repeats the forward.
CP_KV_PASSES = 3
CP_KV_PASSES_RECOMPUTE = 1
# Causal attention: query i scores i + 1 keys, and flash attention's causal kernels skip the key blocks above the
# diagonal (Dao 2023, FlashAttention-2, arXiv 2307.08691 Sec. 3.1.1 "Causal masking"): half the s x s work.
# Megatron-LM counts it so: megatron/training/training.py num_floating_point_operations, core attention
# `query_projection_size * seq_length / 2  # causal mask (only half of the mask is non-zero)` (NVIDIA/Megatron-LM
# @60e03962); flash_attn's benchmarks/benchmark_flash_attention.py flops() divides by 2 `if causal` likewise.
CAUSAL_KEYS_FRACTION = 0.5
# Flash attention's backward kernel recomputes the scores S = Q K^T from the saved log-sum-exp (it never stores the
# s x s probabilities), then runs dP = dO V^T, dV = P^T dO, dQ = dS K and dK = dS^T Q: 5 matmuls against the
# forward's 2, i.e. 2.5x the forward FLOPs, not the 2x of eq. 3 (Dao 2023, FlashAttention-2, arXiv 2307.08691
# Algorithm 2; Dao-AILab/flash-attention@c082294e benchmarks/benchmark_flash_attention.py `flops`:
# `2.5 * f if mode == "bwd"`). The extra half-forward is executed time, not model FLOPs (MFU keeps eq. 3's count);
# eager attention saves the probabilities and its backward is the plain 2x.
FLASH_BACKWARD_FORWARDS = 2.5
# Megatron's gradient buckets: DistributedDataParallel.__init__ (megatron/core/distributed/
# distributed_data_parallel.py) sets bucket_size = max(40000000, 1000000 x data-parallel size) parameters when
# overlap_grad_reduce is on. The last bucket's reduce-scatter starts only after the last backward op (and the first
# bucket's all-gather must end before the first forward op): one bucket's share of the traffic cannot hide.
MEGATRON_BUCKET_MIN_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_DP_RANK = 1_000_000
# Share of a micro-batch's compute that is backward (input + weight gradients: 4 of the 6 FLOPs per weight): the
# window Megatron's overlap_grad_reduce hides the reduce-scatter in (only the last micro-batch's backward produces
# the final gradients: finalize_model_grads waits on it); the forward third hides overlap_param_gather's all-gather.
BACKWARD_SHARE = 2 / 3
FORWARD_SHARE = 1 / 3
# ZeRO-3 (parameter sharding) adds a parameter all-gather in forward and in backward: 1.5x the all-reduce volume
# of plain data parallelism (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 7.2.2). ZeRO-1/2 and Megatron's
# distributed optimizer replace the all-reduce by reduce-scatter + all-gather: the same volume (1x).
ZERO3_DP_VOLUME_FACTOR = 1.5
BITS_PER_BYTE = 8
# torchtitan per-op selective AC (selective_ac_option "op"): torchtitan/models/llama3/infra/parallelize.py
# `_apply_ac_to_transformer_block` saves the outputs of `_save_list` ops except every second aten.mm, counted per
# block in forward order (the policy memory.op_sac_layer_activations reads): the other half of the linear GEMMs run
# again in backward, one more forward of half the layer's linear weights.
OP_SAC_RECOMPUTED_MM_FRACTION = 0.5
# MoE token permutation (Megatron-Core megatron/core/transformer/moe/moe_utils.py permute / unpermute, called by
# MoEAlltoAllTokenDispatcher.token_permutation / token_unpermutation; --moe-permute-fusion swaps in Transformer
# Engine's fused kernels, the same bytes): forward, permute reads each token once (h) and writes its top-k copies
# (k h); unpermute reads the k copies and writes the combined token; backward moves the same bytes back.
# Memory-bound: bytes / HBM bandwidth. Passes over the (1 + k) h elements: permute + unpermute, x 2 for backward.
MOE_PERMUTE_PASSES = 4
MOE_PERMUTE_PASSES_RECOMPUTE = 2  # full recomputation re-runs the forward pair
# Element bytes of an fp8 GEMM operand (e4m3 / e5m2), for the expert GEMMs' arithmetic intensity
FP8_OPERAND_BYTES = 1
# fp8 linears quantise their bf16 operands on the fly: Transformer Engine's _Linear.forward casts the input and
# _Linear.backward the output gradient (transformer_engine/pytorch/module/linear.py, NVIDIA/TransformerEngine
# @0004dbd0: `fp8_cast_transpose_fused(inputmat, ...)` in forward, `grad_output_preprocess` in backward; newer
# releases do the same through `input_quantizer` / `grad_output_quantizer`), each with a fused cast + transpose
# (transformer_engine/common/transpose/cast_transpose.cu): Hopper's fp8 tensor cores take only the TN layout, so
# the weight-gradient GEMM needs X^T and dY^T in fp8 too; torchao's Float8Linear (tensorwise, torchtitan) casts the
# same tensors. Per element: read the bf16 value (2 bytes), write the fp8 row-wise copy (1) and the transposed one
# (1). The inputs of the linears that follow a norm (QKV, the MLP's first GEMM) come out of TE's fused
# LayerNormLinear already in fp8 (the norm writes fp8 in place of bf16: no extra pass); the attention output
# projection's and the MLP's second GEMM's inputs, and every linear's output gradient, are cast by a kernel of
# their own. Weights are cast once per step (TE caches them across micro-batches, `is_first_microbatch`): left out.
FP8_CAST_BYTES_PER_ELEMENT = 2 + 1 + 1
# torchao's Float8Linear (torchtitan's float8 converter; Recipe.fp8_saves_casts False) caches no weight: its autograd
# function saves the bf16 weight and casts it in forward (for x W^T) and again in backward (for the input gradient,
# the other layout), every micro-batch (torchao/float8/float8_linear.py matmul_with_hp_or_float8_args), and once
# more in the replayed forward of full recomputation. Per cast: read the bf16 weight (2), write its fp8 copy (1).
FP8_WEIGHT_CASTS_PER_MICROBATCH = 2
FP8_WEIGHT_CAST_BYTES = 2 + 1

# --- memory-bound element-wise work: HBM bytes per element, forward and backward ----------------------------------
# A layer's norms, activation / GLU, residual adds and rotary embedding do a few FLOPs per byte: their time is the
# HBM traffic / bandwidth. How many bytes depends on whether each aten op runs as its own kernel (eager PyTorch:
# reads its inputs, writes its output) or each chain between two GEMMs runs as one kernel reading its inputs once
# and writing its outputs once (torch.compile's Inductor: Ansel et al., "PyTorch 2", ASPLOS '24, Sec. 5; Transformer
# Engine's fused modules): `Framework.elementwise_fused`. Counts are per element of the op's width (h, ffn, q + k),
# as (activation, fp32) byte multiples: A bytes per activation element (2 for bf16) and F = 4 per fp32 intermediate; operands broadcast over tokens (the norm
# weight, the rotary table) are left out, as are the per-token scalars (mean, rsqrt). Full recomputation and op-sac
# replay the forward's element-wise ops (torchtitan's _save_list keeps only mm / SDPA / reduce-scatter outputs).
# Eager RMSNorm: torchtitan/models/norms.py RMSNorm.forward (pytorch/torchtitan@3f20451b; HF LlamaRMSNorm runs the
# same ops): `self._norm(x.float()).type_as(x) * self.weight`, _norm = `x * torch.rsqrt(x.pow(2).mean(-1, True) + eps)`
#   forward:  x.float() A + F, pow(2) 2F, mean(-1) F, x * rsqrt 2F, type_as F + A, * weight 2A     = 4A + 7F (36 at bf16)
#   backward: * weight: grad * w 2A, grad * out 3A + its sum over tokens A; type_as A + F; x * rsqrt: grad * r 2F,
#             grad * x 3F + sum(-1) F; mean: expand / h F; pow: pow_backward `grad * (2 * x.pow(1))`
#             (torch/csrc/autograd/FunctionsManual.cpp pow_backward) 2F + 2F + 3F; x's two gradients summed 3F;
#             x.float() F + A                                                                        = 8A + 19F (92 at bf16)
EAGER_RMSNORM_BYTES = ((4, 7), (8, 19))  # ((forward A, F), (backward A, F)), as every count below
# One-kernel norm: a fused / Inductor RMSNorm, TE's LayerNormLinear norm, and eager F.layer_norm (native_layer_norm
# is one aten kernel each way: llm-foundry's LPLayerNorm, nn.LayerNorm): forward reads x, writes y (2A); backward
# reads dy and x, writes dx (3A; the weight gradient's per-column sums are reduced in the same pass)
FUSED_NORM_BYTES = ((2, 0), (3, 0))
# Eager SwiGLU, per ffn element: torchtitan/models/llama/model.py FeedForward.forward (@3f20451b)
# `self.w2(F.silu(self.w1(x)) * self.w3(x))`: forward silu 2A, mul 3A; backward mul's two gradients (grad x other)
# 3A + 3A, silu_backward (reads grad and input) 3A                                             = 5A (10), 9A (18)
EAGER_SWIGLU_BYTES = ((5, 0), (9, 0))
# Fused SwiGLU (Megatron's bias_swiglu_impl, Inductor): forward reads gate and up, writes their product (3A);
# backward reads the gradient, gate and up, writes both gradients (5A)
FUSED_SWIGLU_BYTES = ((3, 0), (5, 0))
# GeLU (nn.GELU: one aten kernel, eager or not; llm-foundry MPT's MLP `down_proj(act(up_proj(x)))`, Megatron's
# bias_gelu_impl): forward 2A, backward gelu_backward reads grad and input, writes one (3A)
GELU_BYTES = ((2, 0), (3, 0))
# Eager rotary, per q and k element: torchtitan/models/llama/model.py apply_rotary_emb (@3f20451b):
# `view_as_complex(xq.float().reshape(...))`, `view_as_real(xq_ * freqs_cis).flatten(3)`, `.type_as(xq)` (reshape,
# view_as_* and flatten are views): forward float() A + F, complex mul 2F, type_as F + A; backward the same three
# ops in reverse (grad x conj(freqs))                                                          = 2A + 4F (20) each way
EAGER_ROTARY_BYTES = ((2, 4), (2, 4))
# Fused rotary (TE fused_rope, Inductor): reads q / k, writes the rotated copy, each way
FUSED_ROTARY_BYTES = ((2, 0), (2, 0))
# Residual add, per h element, 2 per layer (torchtitan TransformerBlock.forward `h = x + self.attention(...)`,
# `out = h + self.feed_forward(...)`; Megatron's bias_dropout_add, dropout 0): forward reads both, writes one (3A);
# backward passes the gradient through, and the residual stream's two gradients are summed (3A). One kernel
# either way (Inductor may fold the add into the next norm's kernel, saving a read: not counted)
RESIDUAL_ADD_BYTES = ((3, 0), (3, 0))
RESIDUAL_ADDS_PER_LAYER = 2
# torchtitan's repeat_kv (Attention.forward, @3f20451b): unsqueeze / expand / reshape copies k and v to every head
# before SDPA (n_rep > 1): reads the kv width, writes the heads' width (A each); its backward sums them back. Fused
# or not (Inductor cannot fold a copy into the attention kernel): Recipe.repeat_kv_copies says which stacks do it.
REPEAT_KV_BYTES = ((1, 0), (1, 0))  # per element read (kv width) and per element written (heads' width), each way
# Eager attention (TrainingSpec.attention "eager"): the s x s scores of each head are tensors in HBM, every query
# against every key (no causal skipping), each op a pass. frenzy_core/tracer.py (HF's eager_attention_forward runs
# the same ops with an additive mask): scores = q @ k^T (written), * scale, masked_fill, .float(), softmax,
# .to(bf16), read by probs @ v = forward 8 A + 4 F per score; backward: d(probs) written by dout @ v^T, its cast to
# fp32 (A + F), softmax_backward_data (reads grad and output, writes: 3 F), the cast back (F + A), masked_fill's
# and the scale's backward (2 A each), read by the dq and dk GEMMs (2 A) = 9 A + 5 F. A fused scale-mask-softmax
# (Recipe.fused_softmax, Megatron's FusedScaleMaskSoftmax): scores written and read by it, probs written and read by
# the GEMM, 4 A; backward: d(probs) written, the fused backward reads it and the probs and writes, the two GEMMs
# read, 6 A. Dropout on the probabilities: a pass each way (2 A) and its 1-byte mask written and read.
EAGER_SCORES_BYTES = ((8, 4), (9, 5))
FUSED_SOFTMAX_SCORES_BYTES = ((4, 0), (6, 0))
DROPOUT_MASK_BYTES = 1
FP32_BYTES = 4


# --- the attention kernel's own throughput ---------------------------------------------------------------------------
# Flash attention's fused kernel does not reach the GEMMs' fraction of peak, and how far it gets depends on whose
# kernel runs on which GPU: FlashAttention-2 "achiev[es] only 35% utilization on the H100" against "80-90%" for
# GEMMs, cuDNN's and FlashAttention-3's Hopper kernels far more (Shah et al. 2024, FlashAttention-3, arXiv
# 2407.08608v2, abstract and Sec. 1). So the attention core is timed at the kernel's measured TFLOP/s, forward and
# backward apart, by sequence length. Every figure: bf16/fp16, head dim 128, causal, batch x seqlen = 16k tokens,
# hidden 2048 (16 heads), TFLOP/s counted as 4 seqlen^2 x head dim x heads / 2 forward, x 2.5 backward (FA3 Sec.
# 4.1 "Benchmark settings"; FA2 arXiv 2307.08691 Sec. 4.1 the same) -- the FLOPs perf.py counts
# (CAUSAL_KEYS_FRACTION, FLASH_BACKWARD_FORWARDS). Lengths between the benchmarked ones are interpolated in
# log2(seqlen), lengths outside them take the nearest measured figure.
ATTENTION_KERNEL_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
# H100 80GB SXM5, FlashAttention-3 paper arXiv 2407.08608v2, the bar labels of Fig. 5(c) "Forward, without causal
# mask, head dim 128", Fig. 5(d) "Forward, with causal mask, head dim 128" (Fig. 5 is Dao-AILab/flash-attention
# @0251105a assets/flash3_fp16_fwd.png) and Fig. 6(b) "Backward, without causal mask, head dim 128", TFLOP/s:
H100_FWD_NONCAUSAL_TFLOPS = {"flash-attn-2": (309, 350, 362, 368, 370, 370), "cudnn": (497, 574, 617, 609, 600, 595)}
H100_FWD_CAUSAL_TFLOPS = {"flash-attn-2": (191, 260, 298, 319, 333, 335), "cudnn": (315, 410, 484, 518, 529, 539)}
H100_BWD_NONCAUSAL_TFLOPS = {"flash-attn-2": (214, 260, 291, 310, 318, 322), "cudnn": (305, 408, 465, 499, 518, 516)}
# A100 80GB SXM4, FlashAttention-2 paper arXiv 2307.08691 Fig. 4(d) "With causal mask, head dimension 128",
# forward + backward together (3.5 forwards of FLOPs), FlashAttention-2's bars (Dao-AILab/flash-attention@0251105a
# assets/flash2_a100_fwd_bwd_benchmark.png, panel (d)); its separate forward / backward figures (Figs. 5, 6) were not
# legible in any copy found, so both passes take the combined rate.
A100_FWD_BWD_CAUSAL_TFLOPS = {"flash-attn-2": (99, 133, 155, 173, 182, 189)}


def causal_backward_tflops(kernel: str) -> tuple[float, ...]:
    """The causal backward's TFLOP/s on H100 for `kernel`: FA3's Fig. 6 measures the backward without the mask only,
    so it is scaled by what the mask costs the same kernel's forward at the same length (Fig. 5(d) / Fig. 5(c)), an
    assumption: the backward loses the forward's share. tests/test_perf_attention.py checks FlashAttention-2's
    result against the FA2 paper's own measured causal forward + backward on H100.

    >>> [round(x) for x in causal_backward_tflops("flash-attn-2")]  # 214 x 191 / 309, ...
    [132, 193, 240, 269, 286, 292]
    """
    return tuple(b * c / n for b, c, n in zip(H100_BWD_NONCAUSAL_TFLOPS[kernel], H100_FWD_CAUSAL_TFLOPS[kernel],
                                              H100_FWD_NONCAUSAL_TFLOPS[kernel], strict=True))


# (kernel, compute capability) -> (forward, backward) TFLOP/s at ATTENTION_KERNEL_SEQ_LENS. Which kernel a stack runs
# on an architecture is the stack's (Framework.attention_kernel, each cited in its module of frenzy_core.frameworks).
ATTENTION_KERNEL_TFLOPS: dict[tuple[str, tuple[int, int]], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("flash-attn-2", (8, 0)): (A100_FWD_BWD_CAUSAL_TFLOPS["flash-attn-2"], A100_FWD_BWD_CAUSAL_TFLOPS["flash-attn-2"]),
    ("flash-attn-2", (9, 0)): (H100_FWD_CAUSAL_TFLOPS["flash-attn-2"], causal_backward_tflops("flash-attn-2")),
    ("cudnn", (9, 0)): (H100_FWD_CAUSAL_TFLOPS["cudnn"], causal_backward_tflops("cudnn")),
}
# Measured on a catalog type itself, which then takes these instead of its architecture's paper figures: NVIDIA H200
# SXM (141 GB HBM3e, 700 W), bench/measure_gpu.py --mode kernels, 2026-12-04, torch 2.11.0+cu130 (stored in
# bench/data/gpu_h200_2026-12-04/kernels_gpu.json): F.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION)
# (FlashAttention-2's kernels) and sdpa_kernel(CUDNN_ATTENTION), causal, the papers' setting above (head dim 128, 16
# heads, batch x seqlen = 16k tokens), FLOPs as perf.py counts them; the median of 10 timed calls, the backward as
# (forward + backward) - forward. (forward, backward) TFLOP/s at ATTENTION_KERNEL_SEQ_LENS:
ATTENTION_KERNEL_TFLOPS_BY_TYPE: dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("flash-attn-2", "H200-141GB"): ((168.81, 226.97, 259.5, 299.51, 313.39, 321.4),
                                     (114.24, 154.15, 212.21, 254.82, 280.89, 309.23)),
    ("cudnn", "H200-141GB"): ((268.5, 339.23, 491.96, 550.76, 603.91, 631.55),
                              (163.14, 241.16, 349.62, 481.38, 535.78, 540.4)),
}
# The catalog types the benchmarked parts stand for, by compute capability (the kernels' code path): A100-40GB /
# 80GB are the benchmarked GA100 (sm80); H200 is the GH100 die at the benchmarked H100 SXM5's 700 W; H100-96GB
# (torchtitan's Grand Teton part) is GH100 capped at 500 W: the 700 W figures are assumed for it, which overstates
# its attention speed by what the cap costs. Every other type (Blackwell, Ada, Turing, Volta, AMD, user-defined) has
# no figure in these papers: its attention core runs at the GEMMs' efficiency, as before the kernel figures.
ATTENTION_KERNEL_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "A100-40GB": (8, 0), "A100-80GB": (8, 0), "H100-80GB": (9, 0), "H200-141GB": (9, 0), "H100-96GB": (9, 0)}

# LoRA / QLoRA (TrainingSpec.lora_rank > 0): the base is frozen. A frozen linear still runs its forward (2 FLOPs per
# weight) and its input gradient (2: the gradient must reach the adapters of the layers below), but not its weight
# gradient: Transformer Engine's _Linear sets `bwd_args.requires_wgrad = fwd_args.weight_requires_grad` and runs the
# wgrad GEMM only `if bwd_args.requires_wgrad` (transformer_engine/pytorch/module/linear.py, NVIDIA/TransformerEngine
# @d0067d0d); PyTorch autograd computes no gradient for a tensor that does not require one (nn.Linear under HF
# peft, which freezes the base: peft/tuners/tuners_utils.py BaseTuner._mark_only_adapters_as_trainable,
# `if self.prefix not in n: p.requires_grad = False`). The adapters (lora_A:
# in x r, lora_B: r x out, memory.lora_parameters) train: 6 FLOPs per adapter weight per token.
WEIGHT_GRAD_FLOPS_PER_PARAM_TOKEN = 2


# --- FLOPs ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenFlops:
    """Model FLOPs per token of one optimizer step (forward + backward, plus recomputation), by where they run.

    A layer's FLOPs = its linear GEMMs (`dense_linear` / `moe_linear`: fp8 under fp8_linears) + `attention` (the
    QK^T and AV core: bf16 flash attention) + LoRA's `adapter` GEMMs + its norms (the rest, element-wise)."""

    dense_layer: float  # one decoder layer with a dense MLP (every layer of a dense model)
    moe_layer: float  # one decoder layer with routed experts (top-k of them active per token)
    head: float  # the LM head's logits, forward + backward (never recomputed); the last pipeline stage runs it
    dense_linear: float = 0.0  # the linear-layer GEMMs of a dense layer (projections and MLP), recompute included
    moe_linear: float = 0.0  # the same for a routed-expert layer (attention projections + top-k experts + shared)
    attention: float = 0.0  # the attention core of one layer (either kind), recompute included
    # executed by flash attention's backward beyond eq. 3's count (FLASH_BACKWARD_FORWARDS): time, not model FLOPs
    attention_kernel_extra: float = 0.0
    # of `attention`: its forward passes (the first + recomputed ones); the rest + attention_kernel_extra is backward
    attention_forward: float = 0.0
    # LoRA's adapters of one layer (6 per adapter weight, + 2 per replayed forward): bf16 rank-r GEMMs, in the layer
    adapter: float = 0.0


def token_flops(model: ModelSpec, training: TrainingSpec) -> TokenFlops:
    """Per-token FLOPs of one layer of each kind and of the LM head (Narayanan 2021 eq. 3, term by term).

    per layer:  6 x its active weights                   2 forward + 4 backward FLOPs each
              + 6 x a (d_qk + d_v) x keys / l            attention scores and context, forward + backward
                                                         (= 12 h s per layer for d_qk = d_v = h / a; keys summed
                                                         over layers by `attended_keys`, spread evenly over them)
    recompute:  full      + r x (2 x its weights + 2 a (d_qk + d_v) keys / l)   (one more forward of the share r
                          = ceil(l / k) / l of layers that recompute_every = k checkpoints; r = 1 at k = 1)
                selective + 2 a (d_qk + d_v) keys / l     (the attention core only: Megatron
                          --recompute-granularity selective, Korthikanti et al. 2022 Sec. 4.2)
    head:       6 x V h                                   (the embedding is a lookup: no matmul FLOPs)
    LoRA:       the frozen base's weights (layers and head) 4 in place of 6 (no weight gradient,
                WEIGHT_GRAD_FLOPS_PER_PARAM_TOKEN); + 6 x r (in + out) per adapter (`adapter`; + 2 per replayed
                forward), the head's too when lora_targets names it

    >>> from frenzy_core.models import ZOO
    >>> full = token_flops(ZOO["gpt2"], TrainingSpec(seq_len=1024))
    >>> lora = token_flops(ZOO["gpt2"], TrainingSpec(seq_len=1024, lora_rank=8, lora_targets="q,v"))
    >>> full.dense_linear / lora.dense_linear, lora.adapter  # 6 / 4; 6 x 8 x (768 + 768) x 2 adapters
    (1.5, 147456.0)
    """
    norms = 2 * model.norm_parameters()
    per_layer = model.attention_parameters() + norms
    dense_weights = per_layer + model.dense_mlp_parameters()
    moe_weights = per_layer + model.active_moe_mlp_parameters() if model.is_moe else dense_weights
    # Attention core: QK^T over query heads x q/k head width, scores x V over heads x value width (GQA shrinks K/V
    # projections, not these matmuls; MLA: qk_nope + qk_rope, then v_head_dim). 2 FLOPs per multiply-add each, i.e.
    # 4 s h per layer and token when both widths are h / a (Narayanan's term).
    score_context_width = model.num_heads * (model.head_dim + model.value_head_dim)
    attn_fwd = ATTENTION_FWD_FLOPS_PER_LAYER_TOKEN_PER_SH / 2 * score_context_width * attended_keys(
        model, training
    ) / model.num_layers

    # torchtitan ac_freq / recompute_every k: layers 0, k, 2k, ... are checkpointed (ceil(l / k) of l)
    share = -(-model.num_layers // training.recompute_every) / model.num_layers
    # forwards of the weights replayed (op-sac: every second mm, OP_SAC_RECOMPUTED_MM_FRACTION)
    replay = {"full": share, "selective": 0.0, "op-sac": OP_SAC_RECOMPUTED_MM_FRACTION}.get(training.recompute, 0.0)
    attn_replay = {"full": share, "selective": 1.0}.get(training.recompute, 0.0)  # of the attention core
    # FLOPs per weight per token: 2 forward + 2 input gradient + 2 weight gradient (none for LoRA's frozen base)
    per_weight = FLOPS_PER_PARAM_TOKEN - (WEIGHT_GRAD_FLOPS_PER_PARAM_TOKEN if training.lora_rank else 0)
    passes = per_weight + 2 * replay
    attention = (3 + attn_replay) * attn_fwd
    # LoRA's adapters train (6 per weight); r x (in + out) per targeted linear, without DoRA's magnitude vector
    adapter_weights = lora_parameters(model, training.lora_rank, training.lora_targets) if training.lora_rank else 0
    adapter = (FLOPS_PER_PARAM_TOKEN + 2 * replay) * adapter_weights
    head_adapter = FLOPS_PER_PARAM_TOKEN * training.lora_rank * (model.hidden_size + model.vocab_size) if (
        "head" in training.lora_target_set) else 0

    def layer(weights: float) -> float:
        return passes * weights + attention + adapter

    kernel_extra = (FLASH_BACKWARD_FORWARDS - 2) * attn_fwd if training.attention == "flash" else 0.0
    return TokenFlops(dense_layer=layer(dense_weights), moe_layer=layer(moe_weights),
                      head=per_weight * model.vocab_size * model.hidden_size + head_adapter,
                      dense_linear=passes * (dense_weights - norms), moe_linear=passes * (moe_weights - norms),
                      attention=attention, attention_kernel_extra=kernel_extra,
                      attention_forward=(1 + attn_replay) * attn_fwd, adapter=adapter)


def training_flops_per_step(model: ModelSpec, training: TrainingSpec) -> float:
    """Model FLOPs of one optimizer step (forward + backward, plus recomputation), after Narayanan 2021 eq. 3:
    the `token_flops` of every layer and of the LM head, times the step's tokens.

    per token:  6 x (layer weights + LM head)            weights: 2 forward + 4 backward FLOPs each
              + 6 x a (d_qk + d_v) x keys                attention scores and context, forward + backward
                                                         (= 12 l h s for d_qk = d_v = h / a; keys: attended_keys)
    recompute:  full      + 2 x layer weights + 2 a (d_qk + d_v) keys   (one more forward; LM head not recomputed)
                selective + 2 a (d_qk + d_v) keys         (the attention core only, Korthikanti et al. 2022)

    >>> from frenzy_core.models import ZOO
    >>> f"{training_flops_per_step(ZOO['gpt2'], TrainingSpec(seq_len=1024, global_batch=8)):.4g}"
    '6.542e+12'
    """
    return _step_flops(model, training, token_flops(model, training))


def _step_flops(model: ModelSpec, training: TrainingSpec, per_token: TokenFlops) -> float:
    layers = model.num_dense_layers * per_token.dense_layer + model.num_moe_layers * per_token.moe_layer
    return float(training.tokens_per_step()) * (layers + per_token.head)


def model_flops_per_step(model: ModelSpec, training: TrainingSpec) -> float:
    """The step's FLOPs without recomputation: the model FLOPs of MFU (Chowdhery et al. 2022, PaLM App. B, count
    what the model needs, not what a recomputing schedule spends). Under LoRA what the frozen base runs: 4 FLOPs
    per frozen weight (no weight gradient) + 6 per adapter weight, as NeMo counts its published LoRA TFLOP/s
    (performance_summary.md @8e3d65dc: Llama 2 7B LoRA 663 TFLOP/s at 24,824 tokens/s = 26.7 GFLOP per token, its
    SFT row 673 at 16,891 = 39.8: two thirds)."""
    if training.recompute == "none":
        return training_flops_per_step(model, training)
    return training_flops_per_step(model, training.model_copy(update={"recompute": "none"}))


def gemm_efficiency_of_run(model: ModelSpec, training: TrainingSpec, gpu: GPUType, published_flops_per_token: float,
                           published_fraction: float) -> float:
    """The efficiency perf.py must charge its FLOPs at to reproduce a published run that reached
    `published_fraction` of `gpu`'s bf16 peak (its MFU, or its HFU with `published_flops_per_token` counting the
    recomputation) on its publisher's FLOPs count: the run spends T = published FLOPs / (fraction x peak) seconds
    per token per GPU, of which the attention kernel takes T_attn (`attention_kernel_tflops`, forward and backward
    at their own rates) and the layers' element-wise ops T_ew (`elementwise_time_flops`, at HBM bandwidth); the rest
    of perf.py's FLOPs (linears, norms, head) fill T - T_attn - T_ew. Where no kernel figure applies, every FLOP
    shares T - T_ew (fraction x perf.py's FLOPs / the publisher's when T_ew = 0), GPUType.hw_efficiency's derivation.
    The catalog's llm-foundry types are derived here (their runs ran FlashAttention-2): H100-80GB 0.4843, A100-80GB
    0.6462, A100-40GB 0.6876 (0.4659, 0.6290, 0.6605 before the element-wise term; 0.4465, 0.6176, 0.6479 by the
    FLOPs ratio alone, before the kernel term).

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ModelSpec
    >>> mpt7b = ModelSpec(name="mpt-7b", vocab_size=50368, hidden_size=4096, num_layers=32, num_heads=32)
    >>> theirs = 3 * (2 * 6_658_859_008 + 4 * 32 * 4096 * 2048)  # llm-foundry's MFU FLOPs per token
    >>> round(gemm_efficiency_of_run(mpt7b, TrainingSpec(seq_len=2048), CATALOG["H100-80GB"], theirs, 0.4644), 4)
    0.4843
    """
    per_token = token_flops(model, training)
    layers = model.num_layers
    ours = training_flops_per_step(model, training) / training.tokens_per_step()
    peak_flops_s = gpu.peak_tflops("bf16") * 1e12
    run_s = published_flops_per_token / (published_fraction * peak_flops_s)
    # the layers' element-wise ops at HBM bandwidth, as `_components` charges them (elementwise_time_flops at
    # eff = 1 is their seconds x peak)
    dense_ew, moe_ew = elementwise_time_flops(model, training, gpu, 1.0)
    elementwise_s = (model.num_dense_layers * dense_ew + model.num_moe_layers * moe_ew) / peak_flops_s
    kernel = attention_kernel_tflops(training, gpu, training.seq_len)
    if kernel is None:
        return ours / (peak_flops_s * (run_s - elementwise_s))
    backward = per_token.attention + per_token.attention_kernel_extra - per_token.attention_forward
    attention_s = layers * (per_token.attention_forward / (float(kernel[0]) * 1e12)
                            + backward / (float(kernel[1]) * 1e12))
    return (ours - layers * per_token.attention) / (peak_flops_s * (run_s - attention_s - elementwise_s))


def attention_span(training: TrainingSpec) -> float:
    """Tokens one causal attention runs over: the row (seq_len), or with packed rows of `packed_doc_tokens`-long
    documents that document, where the stack's kernel skips the other documents' blocks: Transformer Engine's THD
    and flash-attn's varlen kernels take cu_seqlens, torchtune's flex attention a block mask
    (`Recipe.packed_mask_materialised` False). A materialised s x s mask (Hugging Face's SDPA path) masks scores
    that are still computed: the row. The band over stacks (unknown) counts the row.

    >>> attention_span(TrainingSpec(seq_len=4096, global_batch=8, packed=True, packed_doc_tokens=256))
    256.0
    >>> attention_span(TrainingSpec(seq_len=4096, global_batch=8, packed=True, packed_doc_tokens=256, framework="hf"))
    4096.0
    """
    s = float(training.seq_len)
    if not (training.packed and training.packed_doc_tokens):
        return s
    recipe = get_framework(training.framework).recipe
    if recipe is None or recipe.packed_mask_materialised:
        return s
    return float(min(s, training.packed_doc_tokens))


def attended_keys(model: ModelSpec, training: TrainingSpec) -> float:
    """Keys each query's score and context matmuls run over, on average, summed over layers. Eager attention
    computes all s x s scores and masks them (HF causal and sliding-window masks): s per layer. Flash attention
    skips the masked blocks: a causal layer costs s / 2 (CAUSAL_KEYS_FRACTION: Megatron's count), a sliding-window
    layer of window w the mean of min(i + 1, w) over the queries i, w - w^2 / (2 s) (= s / 2 at w = s); s is
    `attention_span` (a packed row's document where the kernel skips the others).

    >>> from frenzy_core.models import ZOO
    >>> attended_keys(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8))  # 12 layers x 1024 / 2
    6144.0
    >>> attended_keys(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, packed=True, packed_doc_tokens=256))
    1536.0
    """
    if training.attention != "flash":
        return float(model.num_layers * training.seq_len)
    s = attention_span(training)
    sliding = model.num_sliding_layers
    window = min(s, model.sliding_window or s)
    return (model.num_layers - sliding) * CAUSAL_KEYS_FRACTION * s + sliding * (window - window**2 / (2 * s))


def attention_kernel_tflops(training: TrainingSpec, gpu: GPUType, seq_per_rank) -> tuple[np.ndarray, np.ndarray] | None:
    """(forward, backward) TFLOP/s of the fused attention kernel `training`'s stack runs on `gpu`
    (`Framework.attention_kernel`, ATTENTION_KERNEL_TFLOPS), at `seq_per_rank` keys per query (seq_len / cp: ring
    attention runs one seq_len / cp block against another per step), interpolated in log2(seqlen) between the
    benchmarked lengths and held at the end ones outside them. None where no published figure applies: eager
    attention, fp32 compute (flash kernels run fp16 / bf16), a type not in ATTENTION_KERNEL_COMPUTE_CAPABILITY or
    a kernel not benchmarked on its architecture; the attention core then runs at the GEMMs' efficiency.

    >>> from frenzy_core.gpus import CATALOG
    >>> tr = TrainingSpec(framework="megatron", precision="bf16-master")
    >>> [round(float(x), 1) for x in attention_kernel_tflops(tr, CATALOG["H100-80GB"], 2048)]  # 484; 465 x 484 / 617
    [484.0, 364.8]
    >>> [round(float(x)) for x in attention_kernel_tflops(TrainingSpec(), CATALOG["A100-80GB"], 3072)]  # 2k 155, 4k 173
    [166, 166]
    >>> attention_kernel_tflops(TrainingSpec(), CATALOG["B200"], 4096) is None  # no published figure: GEMM rate
    True
    """
    if training.attention != "flash" or training.precision_setup.compute_dtype != "bf16":
        return None
    capability = ATTENTION_KERNEL_COMPUTE_CAPABILITY.get(gpu.name)
    if capability is None:
        return None
    kernel = get_framework(training.framework).attention_kernel(training, capability)
    rates = ATTENTION_KERNEL_TFLOPS_BY_TYPE.get((kernel, gpu.name)) or ATTENTION_KERNEL_TFLOPS.get((kernel, capability))
    if rates is None:
        return None
    at = np.log2(np.asarray(seq_per_rank, dtype=np.float64))
    lengths = np.log2(ATTENTION_KERNEL_SEQ_LENS)
    return np.interp(at, lengths, rates[0]), np.interp(at, lengths, rates[1])


# --- element-wise work ----------------------------------------------------------------------------------------------
def elementwise_bytes_per_token(model: ModelSpec, training: TrainingSpec) -> tuple[float, float]:
    """HBM bytes per token one dense layer and one routed-expert layer's element-wise ops move, forward + backward
    (+ the replayed forward under full recomputation and op-sac), over all t ranks together, as `training`'s stack
    runs them (`Framework.elementwise_fused`: one fused kernel per chain, else one kernel per aten op):

    norms     norms_per_layer x h (+ q + k widths under qk_norm): EAGER_RMSNORM_BYTES where the stack's RMSNorm is
              the aten formula (Recipe.unfused_rmsnorm, eager), else FUSED_NORM_BYTES (one kernel: fused, or
              F.layer_norm)
    MLP       ffn (MoE: top-k + shared experts' widths) x EAGER_SWIGLU_BYTES / FUSED_SWIGLU_BYTES; GELU_BYTES
    rotary    (q + k widths) x EAGER_ROTARY_BYTES / FUSED_ROTARY_BYTES (position_kind rotary)
    residual  RESIDUAL_ADDS_PER_LAYER x h x RESIDUAL_ADD_BYTES
    repeat_kv k and v widened to every head (Recipe.repeat_kv_copies, GQA): read kv + write heads' width, each way

    >>> from frenzy_core.models import ModelSpec
    >>> tiny = ModelSpec(name="tiny", vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
    ...                  mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", max_positions=64)
    >>> eager = TrainingSpec(framework="fsdp2", seq_len=64, global_batch=1)
    >>> elementwise_bytes_per_token(tiny, eager)  # norms 2x64x128, SwiGLU 128x28, rotary 128x40, adds 2x64x12
    (26624.0, 26624.0)
    >>> elementwise_bytes_per_token(tiny, eager.model_copy(update={"compile": True}))  # 2x64x10, 128x16, 128x8, 1536
    (5888.0, 5888.0)
    """
    fw = get_framework(training.framework)
    fused = bool(fw.elementwise_fused(training))
    recipe = fw.recipe
    a = training.precision_setup.activation_bytes

    def per_element(counts) -> float:  # forward (+ replays) + backward bytes per element
        (fa, ff), (ba, bf) = counts
        return (fa * a + ff * FP32_BYTES) * (1 + replay) + ba * a + bf * FP32_BYTES

    share = -(-model.num_layers // training.recompute_every) / model.num_layers
    replay = {"full": share, "op-sac": 1.0}.get(training.recompute, 0.0)
    h = model.hidden_size
    formula_norm = (not fused and recipe is not None and recipe.unfused_rmsnorm and model.norm_kind == "rmsnorm")
    norm = per_element(EAGER_RMSNORM_BYTES if formula_norm else FUSED_NORM_BYTES)
    qk = model.q_dim + model.kv_dim
    norms = norm * (model.norms_per_layer * h + (qk if model.qk_norm != "none" else 0))
    rotary = per_element(FUSED_ROTARY_BYTES if fused else EAGER_ROTARY_BYTES) * qk if (
        model.position_kind == "rotary") else 0.0
    residual = RESIDUAL_ADDS_PER_LAYER * h * per_element(RESIDUAL_ADD_BYTES)
    repeat = 0.0
    if recipe is not None and recipe.repeat_kv_copies and model.kv_dim < model.q_dim:
        widened = model.num_heads * (model.head_dim + model.value_head_dim)
        repeat = per_element(REPEAT_KV_BYTES) * (model.kv_dim + model.v_dim + widened)
    glu = model.mlp_kind == "swiglu"
    act = per_element((FUSED_SWIGLU_BYTES if fused else EAGER_SWIGLU_BYTES) if glu else GELU_BYTES)
    common = norms + rotary + residual + repeat + eager_scores_bytes_per_token(model, training, recipe, per_element)
    dense = common + act * model.ffn
    if not model.is_moe:
        return float(dense), float(dense)
    moe_width = (model.moe_top_k + model.num_shared_experts) * model.expert_ffn
    # Megatron's output-discarding recomputation (TrainingSpec.recompute_modules, memory.activations
    # _with_recompute_modules): backward runs the MoE layer's pre-MLP norm (h) and the routed experts' activation
    # (top-k x expert_ffn) forward once more
    replays = 0.0
    if "layernorm" in training.recompute_modules:
        replays += h * _forward_bytes(EAGER_RMSNORM_BYTES if formula_norm else FUSED_NORM_BYTES, a)
    if "moe_act" in training.recompute_modules:
        glu_bytes = (FUSED_SWIGLU_BYTES if fused else EAGER_SWIGLU_BYTES) if glu else GELU_BYTES
        replays += model.moe_top_k * model.expert_ffn * _forward_bytes(glu_bytes, a)
    return float(dense), float(common + act * moe_width + replays)


def eager_scores_bytes_per_token(model: ModelSpec, training: TrainingSpec, recipe, per_element) -> float:
    """HBM bytes per token of eager attention's s x s score tensors (0 under flash attention): heads x seq_len
    scores per token, EAGER_SCORES_BYTES each (FUSED_SOFTMAX_SCORES_BYTES for a fused scale-mask-softmax), plus
    dropout's passes and mask. `recipe`: the stack's (None: unknown); `per_element` turns (forward, backward)
    counts into bytes with the replays.

    >>> from frenzy_core.models import ZOO
    >>> tr = TrainingSpec(seq_len=1024, attention="eager")
    >>> bytes_of = lambda c: c[0][0] * 2 + c[0][1] * 4 + c[1][0] * 2 + c[1][1] * 4  # bf16 A, fp32 F, no replay
    >>> eager_scores_bytes_per_token(ZOO["gpt2"], tr, None, bytes_of)  # 12 heads x 1024 x (32 + 38)
    860160.0
    """
    if training.attention != "eager":
        return 0.0
    fused_softmax = recipe is not None and recipe.fused_softmax
    per_score = per_element(FUSED_SOFTMAX_SCORES_BYTES if fused_softmax else EAGER_SCORES_BYTES)
    if training.dropout > 0:
        per_score += per_element(((2, 0), (2, 0))) + 2 * DROPOUT_MASK_BYTES
    return float(model.num_heads * training.seq_len * per_score)


def _forward_bytes(counts, activation_bytes: int) -> float:
    """HBM bytes per element of one forward pass of an element-wise op (`counts` as EAGER_RMSNORM_BYTES)."""
    (fa, ff), _ = counts
    return fa * activation_bytes + ff * FP32_BYTES


def elementwise_time_flops(model: ModelSpec, training: TrainingSpec, gpu: GPUType, eff: float,
                           bytes_per_token: tuple[float, float] | None = None) -> tuple[float, float]:
    """`elementwise_bytes_per_token` as seconds at the type's HBM bandwidth, expressed as the bf16-rate FLOPs that
    take as long (x peak x eff, as the fp8 casts): what `_components` adds to each layer's time FLOPs. Only for
    bf16 compute: the fp32 efficiencies (Sia's fits) were measured with the element-wise time inside them.
    `bytes_per_token`: `elementwise_bytes_per_token`'s answer where the caller has it already.

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ZOO
    >>> dense, _ = elementwise_time_flops(ZOO["gpt2"], TrainingSpec(seq_len=1024), CATALOG["H100-80GB"], 0.5)
    >>> round(dense / (989e12 * 0.5) * 1e9, 3)  # ns per token: (2 x 768 x 10 + 3072 x 10 + 2 x 768 x 12) B / 3.35 TB/s
    19.257
    """
    if training.precision_setup.compute_dtype != "bf16":
        return 0.0, 0.0
    to_flops = gpu.peak_tflops("bf16") * 1e12 * eff / (gpu.memory_bandwidth_gbyte_s * 1e9)
    dense, moe = elementwise_bytes_per_token(model, training) if bytes_per_token is None else bytes_per_token
    return dense * to_flops, moe * to_flops


# --- the optimizer step ---------------------------------------------------------------------------------------------
# The step is memory-bound: its time is the bytes it moves at HBM bandwidth, and how many it moves depends on the
# kernel (Framework.optimizer_kernel). A fused kernel (torch's fused=True, apex / Transformer Engine / DeepSpeed
# FusedAdam, bitsandbytes' 8-bit step) reads weights, grads, master copy and states once and writes weights,
# master and states once. torch.optim's default foreach kernels run one multi-tensor op after another, each a full
# pass. Element accesses per updated parameter, read (r) and written (w), of o the updated parameter (the fp32
# master where the recipe keeps one), g its gradient, m exp_avg, v exp_avg_sq and q the exp_avg_sq_sqrt temporary
# (v's dtype), in torch/optim/adam.py _multi_tensor_adam (torch 2.13; AdamW: decoupled weight decay, not capturable):
#   _foreach_mul_(params, 1 - lr wd)                                   r o,       w o
#   _foreach_lerp_(exp_avgs, grads, 1 - beta1)                         r m g,     w m
#   _foreach_mul_(exp_avg_sqs, beta2)                                  r v,       w v
#   _foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)            r v g g,   w v
#   exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs)                       r v,       w q
#   _foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)              r q,       w q
#   _foreach_add_(exp_avg_sq_sqrt, eps)                                r q,       w q
#   _foreach_addcdiv_(params, exp_avgs, exp_avg_sq_sqrt, step_size)    r o m q,   w o
FOREACH_ADAMW_ACCESSES = {"param": 4, "grad": 3, "exp_avg": 3, "exp_avg_sq": 5, "temporary": 6}
# torch/optim/sgd.py _multi_tensor_sgd, momentum, no weight decay, no Nesterov (b the momentum buffer):
#   _foreach_mul_(bufs, momentum) r b, w b; _foreach_add_(bufs, grads, 1 - dampening) r b g, w b;
#   _foreach_add_(params, bufs, alpha=-lr) r o b, w o
FOREACH_SGD_ACCESSES = {"param": 2, "grad": 1, "momentum": 5}


def optimizer_sweep_bytes(setup, training: TrainingSpec) -> float:
    """HBM bytes one optimizer step moves per parameter it updates, under `training`'s stack's kernel. A recipe with
    fp32 masters steps them and then writes the model's copy (read the master, write the parameter).

    >>> from frenzy_core.precision import PRECISIONS
    >>> amp = PRECISIONS["amp"]  # fp32 params and grads, no master, AdamW's two fp32 moments
    >>> optimizer_sweep_bytes(amp, TrainingSpec(optimizer="adamw-fused"))  # r 4 + 4 + 8, w 4 + 8
    28.0
    >>> optimizer_sweep_bytes(amp, TrainingSpec(optimizer="adamw"))  # (4 + 3 + 3 + 5 + 6) accesses x 4 B
    84.0
    >>> optimizer_sweep_bytes(amp, TrainingSpec(framework="megatron", optimizer="adamw"))  # FusedAdam
    28.0
    """
    state_bytes = training.optimizer_bytes(setup)[0]  # the states in their own dtype (bf16 under pure bf16)
    if get_framework(training.framework).optimizer_kernel(training) == "fused":
        return float(setup.param_bytes + setup.grad_bytes + setup.master_bytes + state_bytes
                     + setup.param_bytes + setup.master_bytes + state_bytes)
    updated = setup.master_bytes or setup.param_bytes
    copy_back = setup.master_bytes + setup.param_bytes if setup.master_bytes else 0.0
    if training.optimizer == "sgd":
        a = FOREACH_SGD_ACCESSES
        return float(a["param"] * updated + a["grad"] * setup.grad_bytes + a["momentum"] * state_bytes + copy_back)
    a, moment = FOREACH_ADAMW_ACCESSES, state_bytes / 2
    return float(a["param"] * updated + a["grad"] * setup.grad_bytes
                 + (a["exp_avg"] + a["exp_avg_sq"] + a["temporary"]) * moment + copy_back)


# --- step time ------------------------------------------------------------------------------------------------------
def comm_overlaps(training: TrainingSpec) -> tuple[bool, bool]:
    """(data-parallel, tensor-parallel) communication overlapped with compute: the TrainingSpec switches, else the
    stack's default (`Framework.dp_overlap_default` / `tp_overlap_default`, each cited in its module of
    frenzy_core.frameworks).

    data parallel:   megatron on (ddp overlap_grad_reduce / overlap_param_gather); fsdp2 on (implicit prefetch);
                     ZeRO-3 on (FSDP1's backward prefetch, DeepSpeed's overlap_comm); otherwise off: DeepSpeed
                     ZeRO-1/2's default, and plain DDP, whose measured link efficiencies (Sia's sync_time, gpus.py)
                     already are exposed time.
    tensor parallel: megatron with sequence parallelism on (TE userbuffers); otherwise off (AsyncTP is opt-in).

    >>> comm_overlaps(TrainingSpec(framework="megatron", sequence_parallel=True)), comm_overlaps(TrainingSpec())
    ((True, True), (False, False))
    """
    fw = get_framework(training.framework)
    dp, tp = training.overlap_dp_comm, training.tp_comm_overlap
    if dp is None:
        dp = fw.dp_overlap_default(training)
    if tp is None:
        tp = fw.tp_overlap_default(training)
    return bool(dp), bool(tp)


def pp_overlaps(training: TrainingSpec, vp):
    """Whether the pipeline sends of a plan with `vp` chunks per rank overlap the other chunks' compute: only the
    interleaved schedule can (vp > 1, Megatron's validate_args), and there `TrainingSpec.overlap_pp_comm`, else the
    stack's default (`Framework.pp_overlap`: megatron's overlap_p2p_comm).

    >>> pp_overlaps(TrainingSpec(framework="megatron"), np.array([1, 2])).tolist()
    [False, True]
    >>> bool(pp_overlaps(TrainingSpec(framework="megatron", overlap_pp_comm=False), 2)), bool(pp_overlaps(TrainingSpec(), 2))
    (False, False)
    """
    v = np.asarray(vp)
    if training.overlap_pp_comm is None:
        return get_framework(training.framework).pp_overlap(training, v)
    return (v > 1) & bool(training.overlap_pp_comm)


@dataclass(frozen=True)
class TimePart:
    """One term of the step: the seconds it adds to the critical path and the seconds hidden behind compute."""

    name: str  # the StepTime field without "_s": compute, tp_comm, ..., overhead
    exposed_s: float  # on the critical path: the parts' exposed seconds sum to step_time_s
    overlapped_s: float  # hidden behind compute (dp_comm, tp_comm: the overlap model, `comm_overlaps`)

    def as_dict(self) -> dict:
        return {"name": self.name, "exposed_s": self.exposed_s, "overlapped_s": self.overlapped_s}


PART_NAMES = ("compute", "tp_comm", "ep_comm", "cp_comm", "pp_bubble", "pp_p2p", "dp_comm", "optimizer", "overhead")


@dataclass(frozen=True)
class StepTime:
    """Where one optimizer step's time goes, per GPU on the critical path. Seconds unless named otherwise.

    The pipeline runs at the pace of its slowest stage: compute_s, tp_comm_s, ep_comm_s and cp_comm_s are that
    stage's (`slowest_stage`), the bubble is (p - 1) / (m vp) of its time, and dp_comm_s and optimizer_s are those of
    the stage with the most parameters (every stage's all-reduce and step must end before the next step).
    """

    flops_per_step: float  # model FLOPs of the whole step over all GPUs (recomputation included)
    micro_batches: float  # m: micro-batches per replica per step = global_batch / (d x micro_batch)
    compute_s: float  # the slowest stage's FLOPs (its layers, + the LM head on the last) / (d t cp x peak x MFU)
    tp_comm_s: float  # tensor-parallel activation all-reduces (intra-node link), the exposed part
    ep_comm_s: float  # expert-parallel token all-to-alls (MoE; 0 at ep = 1)
    cp_comm_s: float  # context-parallel K/V ring passes (0 at cp = 1)
    pp_bubble_s: float  # pipeline fill/drain: (p - 1) / (m vp) x the slowest stage's compute + communication
    pp_p2p_s: float  # activations / gradients sent between pipeline stages
    dp_comm_s: float  # gradient all-reduce / reduce-scatter + all-gather across replicas, the exposed part
    optimizer_s: float  # optimizer sweep over the local shard of weights, grads and states (memory-bound)
    overhead_s: float  # fixed per-step framework cost (launches, data loading, Python): the type's measured figure
    step_time_s: float  # the sum of the above: seconds per optimizer step
    tokens_per_step: int  # global_batch x seq_len
    num_gpus: int  # N = d x t x p x cp
    model_flops_per_step: float = 0.0  # FLOPs without recomputation: the MFU numerator (PaLM App. B)
    slowest_stage: int = 0  # the pipeline stage whose compute + communication paces the pipeline
    dp_comm_overlapped_s: float = 0.0  # the data-parallel traffic's seconds hidden behind compute
    tp_comm_overlapped_s: float = 0.0  # the tensor-parallel traffic's seconds hidden behind the linear GEMMs
    pp_p2p_overlapped_s: float = 0.0  # the pipeline sends' seconds hidden behind other chunks (Framework.pp_overlap)
    compute_linear_s: float = 0.0  # of compute_s: the linear GEMMs (fp8 peak under fp8_linears), LM head, adapters
    compute_attention_s: float = 0.0  # of compute_s: the attention core (QK^T, AV; its kernel's measured rate)
    compute_other_s: float = 0.0  # of compute_s: the norms (6 FLOPs per weight) and fp8 quantisation passes

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def achieved_tflops_per_gpu(self) -> float:
        """TFLOP/s each GPU delivers over the whole step, recomputation included (hardware FLOPs utilisation's
        numerator; `model_tflops_per_gpu` leaves recomputation out)."""
        return self.flops_per_step / self.step_time_s / self.num_gpus / 1e12

    @property
    def model_tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU over the whole step: the MFU numerator (Chowdhery et al. 2022, App. B)."""
        return self.model_flops_per_step / self.step_time_s / self.num_gpus / 1e12

    def parts(self) -> tuple[TimePart, ...]:
        """Each term as (name, exposed, overlapped) seconds, in PART_NAMES order; exposed sums to step_time_s."""
        overlapped = {"dp_comm": self.dp_comm_overlapped_s, "tp_comm": self.tp_comm_overlapped_s,
                      "pp_p2p": self.pp_p2p_overlapped_s}
        return tuple(TimePart(n, getattr(self, f"{n}_s"), overlapped.get(n, 0.0)) for n in PART_NAMES)


def _components(
    model: ModelSpec,
    training: TrainingSpec,
    gpu: GPUType,
    dp,
    tp,
    pp,
    micro_batch,
    *,
    intra_link_gbyte_s: float | None,
    network_gbit_s: float,
    gpus_per_node: int,
    mfu: float | None,
    overhead_s: float | None,
    ep=1,
    cp=1,
    vp=1,
    etp=0,
    first_stage_layers=0,
    last_stage_layers=0,
    shared: SharedTerms | None = None,
    rows=None,
) -> dict[str, np.ndarray]:
    """The whole model over broadcast numpy arrays; `step_time` and `step_time_totals` both call this. With
    `shared` (built from 1-D split arrays) the split arrays are `shared`'s at `rows`: its type-independent terms are
    computed once and read here."""
    memo = shared.memo if shared is not None else {}
    d, t, p, b, e, c, v = (np.asarray(x, dtype=np.float64) for x in (dp, tp, pp, micro_batch, ep, cp, vp))
    first, last = (np.asarray(x, dtype=np.float64) for x in (first_stage_layers, last_stage_layers))
    et = expert_tp_array(etp, t)  # expert tensor parallel; 0 = t
    setup = training.precision_setup
    eff = gpu.efficiency(setup.compute_dtype) if mfu is None else mfu
    overhead_s = gpu.step_overhead_s if overhead_s is None else overhead_s
    # Achieved, not nominal, bandwidth: nominal link x the all-reduce efficiency measured for this type (gpus.py).
    nominal_intra = gpu.intra_link_gbyte_s if intra_link_gbyte_s is None else intra_link_gbyte_s
    intra_bytes_s = nominal_intra * 1e9 * gpu.intra_link_efficiency
    node_nic_bytes_s = network_gbit_s * 1e9 / BITS_PER_BYTE * gpu.network_efficiency
    n_gpus = d * t * p * c
    s, h = training.seq_len / c, model.hidden_size  # s: the tokens of each sample one GPU holds (seq_len / cp)

    if "flops" not in memo:
        per_token = token_flops(model, training)
        memo["flops"] = per_token, _step_flops(model, training, per_token)
    per_token, flops = memo["flops"]
    peak_flops_s = gpu.peak_tflops(setup.compute_dtype) * 1e12
    # fp8 linears (Transformer Engine te.Linear / LayerNormLinear under fp8_autocast, torchao Float8Linear): the
    # projection and MLP GEMMs run at the fp8 peak; the attention core (flash attention: bf16), the norms and the
    # LM head stay bf16 (TE leaves the output layer out of fp8: Megatron builds it as a plain ColumnParallelLinear,
    # megatron/core/models/gpt/gpt_model.py output_layer, outside the TE fp8 layers; torchtitan's float8 converter
    # skips "output", torchtitan/components/quantization/float8.py filter_fqns). Every GEMM is charged at the same
    # hardware efficiency `eff` of its own peak (assumed for fp8: no fp8 calibration run, docs/perf.md).
    fp8 = training.fp8_linears and setup.compute_dtype == "bf16"
    linear_time_share = peak_flops_s / (gpu.peak_tflops("fp8") * 1e12) if fp8 else 1.0
    # The attention core as its fused kernel runs it (`attention_kernel_tflops`, the stack's kernel on this GPU):
    # its forward passes at the kernel's forward TFLOP/s, its backward (FLASH_BACKWARD_FORWARDS: Q K^T recomputed)
    # at the backward's, as the bf16-rate FLOPs that take as long on the stage (x peak x eff). Where no kernel
    # figure applies, or the caller fixes one efficiency for every FLOP (`mfu`), at the GEMMs' efficiency.
    kernel = attention_kernel_tflops(training, gpu, np.minimum(s, attention_span(training))) if mfu is None else None
    attention_time_flops = per_token.attention + per_token.attention_kernel_extra
    if kernel is not None:
        forward_tflops, backward_tflops = kernel
        backward_flops = attention_time_flops - per_token.attention_forward
        attention_time_flops = (per_token.attention_forward / (forward_tflops * 1e12)
                                + backward_flops / (backward_tflops * 1e12)) * peak_flops_s * eff
    # LoRA's adapters: rank-r GEMMs far below the ridge point, at their roofline share of the peak
    # (`expert_gemm_roofline_fraction` of lora_A's b s / cp x h x r GEMM: intensity ~ r FLOPs per operand byte;
    # lora_B's r x out moves as many bytes per FLOP); bf16 (NeMo's ParallelLinearAdapter is megatron.core's
    # ColumnParallelLinear / RowParallelLinear, peft's lora_A / lora_B nn.Linear: outside the fp8 TE linears)
    adapter_time_flops = 0.0
    if per_token.adapter:
        adapter_time_flops = per_token.adapter / expert_gemm_roofline_fraction(
            b * s, h, training.lora_rank, setup.activation_bytes, peak_flops_s, gpu.memory_bandwidth_gbyte_s * 1e9)
    # per-token FLOPs at the bf16 rate that take the same time (the linears' scaled by bf16 peak / fp8 peak)
    dense_time_flops = (per_token.dense_layer - (1.0 - linear_time_share) * per_token.dense_linear
                        - per_token.attention - per_token.adapter + attention_time_flops + adapter_time_flops)
    moe_time_flops = (per_token.moe_layer - (1.0 - linear_time_share) * per_token.moe_linear
                      - per_token.attention - per_token.adapter + attention_time_flops + adapter_time_flops)
    if fp8 and gpu.fp8_tflops is not None:
        # the fp8 quantisation passes (FP8_CAST_BYTES_PER_ELEMENT), memory-bound: bytes / HBM bandwidth, as the
        # bf16-rate FLOPs that take as long on the stage (x peak x eff, as _moe_extra_time_flops)
        if "fp8_cast" not in memo:
            memo["fp8_cast"] = fp8_cast_elements_per_token(model, training)
        dense_cast, moe_cast = memo["fp8_cast"]
        flops_per_byte = peak_flops_s * eff / (gpu.memory_bandwidth_gbyte_s * 1e9)
        dense_time_flops = dense_time_flops + dense_cast * FP8_CAST_BYTES_PER_ELEMENT * flops_per_byte
        moe_time_flops = moe_time_flops + moe_cast * FP8_CAST_BYTES_PER_ELEMENT * flops_per_byte
        if not get_framework(training.framework).recipe.fp8_saves_casts:
            # torchao: each micro-batch casts every linear weight again (FP8_WEIGHT_CASTS_PER_MICROBATCH), per token
            # of the micro-batch (b x s on each rank); the dense layer's weights only (MoE experts under torchao's
            # grouped fp8 GEMMs are not modelled)
            replay = 1.0 if training.recompute == "full" else 0.0
            casts = (FP8_WEIGHT_CASTS_PER_MICROBATCH + replay) * (model.attention_parameters()
                                                                   + model.dense_mlp_parameters()) / (b * s)
            dense_time_flops = dense_time_flops + casts * FP8_WEIGHT_CAST_BYTES * flops_per_byte
    if mfu is None:
        # the layers' memory-bound element-wise ops (norms, activation, rotary, residual adds) as HBM traffic /
        # bandwidth, eager or fused as the stack runs them (`elementwise_bytes_per_token`); an explicit `mfu`
        # charges every FLOP at it, as for the attention kernel
        if "elementwise" not in memo:
            memo["elementwise"] = elementwise_bytes_per_token(model, training)
        dense_ew, moe_ew = elementwise_time_flops(model, training, gpu, eff, memo["elementwise"])
        dense_time_flops = dense_time_flops + dense_ew
        moe_time_flops = moe_time_flops + moe_ew
    if mfu is None:
        # the linears' GEMMs at their shapes' measured speed relative to the calibration run's (gemm.py: tiles,
        # waves, the K loop's fill): a tensor-parallel split that narrows them or a short micro-batch costs more
        dense_shape, moe_shape = linear_shape_time_flops(model, training, gpu, b * s, t, fp8, per_token)
        dense_time_flops = dense_time_flops + linear_time_share * dense_shape
        moe_time_flops = moe_time_flops + linear_time_share * moe_shape
    if model.is_moe:
        moe_time_flops = moe_time_flops + _moe_extra_time_flops(model, training, gpu, b, t, c, e, et, fp8,
                                                                peak_flops_s * linear_time_share, eff)
    # Micro-batches per replica; the pipeline is filled m times per step.
    m = training.global_batch / (d * b)

    # Per-message sizes and links (each stage's terms below multiply them by its layers).
    # Tensor parallel: per layer and micro-batch, 4 ring all-reduces of b x s x h activations (+2 with full
    # recomputation); a ring moves 2 (t - 1) / t of the buffer through each GPU's link. TP stays inside a node;
    # a t larger than a node would cross the network, so it then gets a node's NIC shared by its t GPUs.
    activation_msg_bytes = b * s * h * setup.activation_bytes
    allreduces = TP_ALLREDUCES_PER_LAYER + (TP_ALLREDUCES_PER_LAYER_RECOMPUTE if training.recompute == "full" else 0)
    tp_link = np.where(t <= gpus_per_node, intra_bytes_s, node_nic_bytes_s / np.minimum(t, gpus_per_node))
    tp_per_layer_s = allreduces * m * 2 * (t - 1) / t * activation_msg_bytes / tp_link
    # Expert parallel (MoE): per MoE layer and micro-batch, each GPU sends the top-k copies of its tokens (b x s / t:
    # Megatron needs sequence parallelism for MoE with t > 1) to the ep ranks holding their experts, (ep - 1) / ep
    # of them off the GPU. Megatron lays ranks out t, cp, ep, d (parallel_state.py): the expert group is etp x ep
    # consecutive ranks, inside a node while etp x ep <= the node, else every GPU of the node shares its NIC.
    a2a_bytes = b * s / t * model.moe_top_k * h * setup.activation_bytes
    alltoalls = EP_ALLTOALLS_PER_MOE_LAYER + (EP_ALLTOALLS_PER_MOE_LAYER_RECOMPUTE if training.recompute == "full" else 0)
    # A GPU's copies go evenly to the e ranks of its expert-parallel group (balanced routing): those on its node
    # (min(e, node / etp) of them, itself included) over NVLink, the rest over the node's NIC shared by its GPUs;
    # the two run concurrently (NCCL's all-to-all posts every peer's send at once): the slower one paces it.
    ep_on_node = np.minimum(e, np.maximum(1.0, gpus_per_node / et))
    intra_a2a_s = (ep_on_node - 1) / e * a2a_bytes / intra_bytes_s
    inter_a2a_s = (e - ep_on_node) / e * a2a_bytes / np.minimum(intra_bytes_s, node_nic_bytes_s / gpus_per_node)
    ep_per_moe_layer_s = alltoalls * m * np.maximum(intra_a2a_s, inter_a2a_s)
    # Context parallel: per layer and micro-batch each GPU's K and V chunks (b x seq_len / cp tokens x the K and V
    # widths / t: heads split over t) travel cp - 1 hops. Megatron's rank order is t, cp, ...: the ring stays in a
    # node while t x cp fits it; else every hop out of the node shares the NIC with the node's other t rings.
    kv_chunk_bytes = b * s * (model.kv_dim + model.v_dim) / t * setup.activation_bytes
    # selective recomputation re-runs core attention, and with it the ring (op-sac saves attention's outputs)
    passes = CP_KV_PASSES + (CP_KV_PASSES_RECOMPUTE if training.recompute in ("full", "selective") else 0)
    cp_link = np.where(t * c <= gpus_per_node, intra_bytes_s,
                       np.minimum(intra_bytes_s, node_nic_bytes_s / np.minimum(t, gpus_per_node)))
    cp_per_layer_s = passes * m * (c - 1) * kv_chunk_bytes / cp_link

    # Placement model: ranks are laid out t fastest, then p, then d, filling nodes of `gpus_per_node` in order
    # (Narayanan 2021 Sec. 3.3: tensor inside a node, pipeline and data across). A replica spans t x p GPUs.
    spans_nodes = n_gpus > gpus_per_node
    replica_spans_nodes = t * p * c > gpus_per_node
    # One node's NIC is shared by every ring that leaves the node: one per distinct shard on it (min(t x p, node)).
    rings_per_nic = np.minimum(t * p, gpus_per_node)
    net_per_ring = node_nic_bytes_s / rings_per_nic

    # Data parallel: ring all-reduce of one stage's gradient shard (its parameters / t) x grad bytes, moving
    # 2 (d - 1) / d of it through the slowest link the ring uses (the NIC share once the plan spans nodes). The cp
    # ranks of a replica hold the same parameters: the ring runs over d x cp ranks (Megatron's data-parallel group
    # with context parallelism; torchtitan's dp_shard_cp mesh). Routed experts are split ep ways more and
    # all-reduced over the t x d x cp / (etp x ep) ranks that hold the same expert shard (Megatron's
    # expert-data-parallel group; d x cp / ep at etp = t).
    d_grad = d * c
    d_expert = t * d_grad / (et * e)  # the expert grid etp x ep x expert-dp re-tiles the t x d x cp ranks
    volume = ZERO3_DP_VOLUME_FACTOR if training.zero_stage == 3 else 1.0
    dp_link = np.where(spans_nodes, np.minimum(net_per_ring, intra_bytes_s), intra_bytes_s)
    # Optimizer: the bytes its kernel moves per updated parameter (optimizer_sweep_bytes), over the local shard
    # (sharded further by d under ZeRO >= 1 or the distributed optimizer). Memory-bound.
    sweep_bytes = optimizer_sweep_bytes(setup, training)
    sharded = training.zero_stage >= 1 or training.distributed_optimizer
    if "weights" not in memo:
        memo["weights"] = _parameter_counts(model, training)
    weights, base = _stage_weights(memo["weights"], p, training.lora_rank)
    dense_layer_params, moe_layer_params, routed_per_layer, embedding, head = weights
    gathers_base = bool(training.lora_rank) and get_framework(training.framework).gathers_each_layer(training)
    base_gather_s = 2 * (d_grad - 1) / d_grad * setup.activation_bytes / dp_link if gathers_base else 0.0 * d_grad
    base_expert_gather_s = (2 * (d_expert - 1) / d_expert * setup.activation_bytes / dp_link if gathers_base
                            else 0.0 * d_expert)

    # Each stage that bounds the others: its layers (the uneven first / last stages' own counts, DeepSeek's dense
    # layers on the first), their compute and communication; the LM head on the last.
    # Seconds per step one dense layer adds to a stage (a stage's d x t x cp GPUs share its work), what a routed-expert
    # layer adds beyond a dense one, and what the LM head adds to the last stage:
    tokens = training.tokens_per_step()
    stage_flops_s = d * t * c * peak_flops_s * eff
    dense_layer_s = tokens * dense_time_flops / stage_flops_s + tp_per_layer_s + cp_per_layer_s
    moe_extra_s = tokens * (moe_time_flops - dense_time_flops) / stage_flops_s + ep_per_moe_layer_s
    head_s = tokens * per_token.head / stage_flops_s
    # Seconds one parameter of a stage adds to its all-reduce and optimizer step: dense parts split by t, routed
    # experts by etp x ep
    opt_bytes_per_s = sweep_bytes / (gpu.memory_bandwidth_gbyte_s * 1e9)
    dense_param_s = (volume * 2 * (d_grad - 1) / d_grad * setup.grad_bytes / dp_link
                     + opt_bytes_per_s / (d_grad if sharded else 1.0)) / t
    expert_param_s = (volume * 2 * (d_expert - 1) / d_expert * setup.grad_bytes / dp_link
                      + opt_bytes_per_s / (d_expert if sharded else 1.0)) / (et * e)
    leading = model.first_k_dense if model.is_moe else 0
    if not (leading or np.any(first) or np.any(last)):
        # the even split of a uniform model: every stage holds l / p alike layers, so the last (the LM head) is the
        # slowest and the heavier end (embedding or head) holds the most parameters
        layers = model.num_layers / p
        moe = layers if model.is_moe else 0.0
        slowest, is_last = p - 1, True
        params = layers * (moe_layer_params if model.is_moe else dense_layer_params) + np.where(
            p > 1, np.maximum(embedding, head), embedding + head)
        experts = moe * routed_per_layer
        base_params = layers * (base[1] if model.is_moe else base[0]) + np.where(
            p > 1, np.maximum(base[3], base[4]), base[3] + base[4])
        base_experts = moe * base[2]
        stages = ()
    else:
        # the stages that can bound the others (`_bounding_stage_terms`); none of it depends on the GPU: `shared`
        # keeps them for every type
        even = not (np.any(first) or np.any(last))
        consecutive = even and not np.any(v != 1)
        if shared is None:
            stages = _bounding_stage_terms(model, PipelineStages(model.num_layers, p, first, last, v), leading,
                                           weights, base)
        else:
            stages = shared.stage_terms(model, training, even, consecutive, rows)
    # (busy, stage, layers, MoE layers, is last) and (tail, trainable parameters, trainable expert parameters, base
    # parameters, base expert parameters)
    best = heaviest = None
    for stage, layers, moe, is_last, params, experts, base_params, base_experts in stages:
        busy = layers * dense_layer_s + moe * moe_extra_s + np.where(is_last, head_s, 0.0)
        tail = (params * dense_param_s + experts * expert_param_s
                + base_params / t * base_gather_s + base_experts / (et * e) * base_expert_gather_s)
        heavy = (tail, params, experts, base_params, base_experts)
        if best is None:
            best, heaviest = (busy, stage, layers, moe, is_last), heavy
            continue
        more = busy > best[0]  # the first stage of the largest wins ties
        best = tuple(np.where(more, new, old) for new, old in zip((busy, stage, layers, moe, is_last), best,
                                                                  strict=True))
        more = tail > heaviest[0]
        heaviest = tuple(np.where(more, new, old) for new, old in zip(heavy, heaviest, strict=True))
    if stages:
        _, slowest, layers, moe, is_last = best
        _, params, experts, base_params, base_experts = heaviest
    # the pipeline's pace: the slowest stage's compute and communication per step
    head_flops = np.where(is_last, per_token.head, 0.0)
    compute_s = tokens * ((layers - moe) * dense_time_flops + moe * moe_time_flops + head_flops) / stage_flops_s
    # of which: linear GEMMs (the layers' at the fp8 rate under fp8, the LM head's at bf16), attention core, norms
    layer_linear_s = tokens * linear_time_share * ((layers - moe) * per_token.dense_linear
                                                   + moe * per_token.moe_linear) / stage_flops_s
    compute_linear_s = layer_linear_s + tokens * (head_flops + layers * adapter_time_flops) / stage_flops_s
    compute_attention_s = tokens * layers * attention_time_flops / stage_flops_s
    compute_other_s = compute_s - compute_linear_s - compute_attention_s
    overlap_dp, overlap_tp = comm_overlaps(training)
    # Tensor-parallel comm overlap (Megatron --tp-comm-overlap: Transformer Engine's userbuffers split each
    # sequence-parallel all-gather / reduce-scatter into chunks pipelined with the GEMM that consumes / produces
    # them, transformer_engine/pytorch/module/base.py initialize_ub; torchtitan AsyncTP: torch micro-pipelined
    # collective matmuls): the traffic hides behind the layers' linear GEMMs, what exceeds them stays exposed.
    tp_raw_s = layers * tp_per_layer_s
    tp_comm_s = np.maximum(0.0, tp_raw_s - layer_linear_s) if overlap_tp else tp_raw_s
    ep_comm_s = moe * ep_per_moe_layer_s
    cp_comm_s = layers * cp_per_layer_s
    # the step ends when the stage with the most parameters has all-reduced its gradients and stepped
    dense_shard = params / t
    expert_shard = experts / (et * e)  # each expert's linears split etp ways, the experts ep ways
    ring_bytes = (2 * (d_grad - 1) / d_grad * dense_shard + 2 * (d_expert - 1) / d_expert * expert_shard) \
        * setup.grad_bytes
    dp_raw_s = (volume * ring_bytes / dp_link
                + base_params / t * base_gather_s + base_experts / (et * e) * base_expert_gather_s)
    opt_params = dense_shard / d_grad + expert_shard / d_expert if sharded else dense_shard + expert_shard
    optimizer_s = opt_params * opt_bytes_per_s
    # Data-parallel overlap: exposed = the part that cannot hide + what exceeds the compute it hides behind.
    #   ZeRO-3 / FSDP (FSDP2 prefetches layer i + 1's all-gather during layer i and reduce-scatters layer i's
    #   gradients during layer i - 1's backward; DeepSpeed ZeRO-3 overlap_comm): hides behind the whole step's
    #   compute; one FSDP unit (a layer's share) gathers before anything can run and reduces after the last op.
    #   Megatron DDP (--overlap-grad-reduce, --overlap-param-gather with the distributed optimizer): the gradient
    #   reduce-scatter (the whole all-reduce without it) hides behind the last micro-batch's backward (the only one
    #   whose gradients are final), the parameter all-gather behind the first one's forward; one bucket
    #   (MEGATRON_BUCKET_*) of each cannot hide.
    if not overlap_dp:
        dp_comm_s = dp_raw_s
    elif get_framework(training.framework).gathers_each_layer(training):
        unhideable_s = dp_raw_s / np.maximum(layers, 1.0)
        dp_comm_s = unhideable_s + np.maximum(0.0, dp_raw_s - unhideable_s - compute_s)
    else:
        per_micro_batch_s = compute_s / m
        bucket = np.maximum(MEGATRON_BUCKET_MIN_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP_RANK * d_grad)
        unhideable_share = np.minimum(1.0, bucket / np.maximum(dense_shard + expert_shard, 1.0))
        # (share of the traffic, the compute it hides behind): the distributed optimizer's reduce-scatter and
        # all-gather are half the all-reduce's volume each; plain DDP all-reduces in backward
        halves = ((0.5, BACKWARD_SHARE), (0.5, FORWARD_SHARE)) if sharded else ((1.0, BACKWARD_SHARE),)
        # with vp chunks (the interleaved schedule) each chunk syncs its own gradients after its own last backward
        # and gathers its parameters before its own first forward (`staggered_exposed_s`)
        group = np.minimum(p, m)
        dp_comm_s = unhideable_share * dp_raw_s + sum(
            staggered_exposed_s((1.0 - unhideable_share) * share * dp_raw_s, window * per_micro_batch_s / v,
                                group * window * per_micro_batch_s / v, v)
            for share, window in halves)

    # Pipeline bubble (GPipe / 1F1B): (p - 1) idle micro-batch slots out of m (Narayanan 2021 Sec. 2.2.1) of the
    # slowest stage's time, which paces every stage; the interleaved schedule with vp chunks per rank shrinks it
    # vp-fold (Sec. 2.2.2: (p - 1) / (m vp)).
    pp_bubble_s = (p - 1) / (m * v) * (compute_s + tp_comm_s + ep_comm_s + cp_comm_s)

    # Pipeline point-to-point: each stage sends m activations forward and m gradients backward, each b x s x h,
    # split 1/t by Megatron's scatter/gather (Narayanan 2021 Sec. 4.1); the network when stages cross nodes. With
    # vp chunks per rank every micro-batch crosses each rank vp times: vp times the sends (Sec. 2.2.2).
    p2p_link = np.where(replica_spans_nodes, np.minimum(net_per_ring, intra_bytes_s), intra_bytes_s)
    pp_p2p_raw_s = np.where(p > 1, 2 * m * v * activation_msg_bytes / t / p2p_link, 0.0)
    # Overlapped (the stack's `pp_overlap`: Megatron's interleaved schedule with overlap_p2p_comm) each transfer
    # runs under another chunk's compute: only what exceeds the stage's compute stays exposed
    pp_p2p_s = np.where(pp_overlaps(training, v), np.maximum(0.0, pp_p2p_raw_s - compute_s), pp_p2p_raw_s)

    total = compute_s + tp_comm_s + ep_comm_s + cp_comm_s + pp_bubble_s + pp_p2p_s + dp_comm_s + optimizer_s \
        + overhead_s
    return {
        "flops": np.asarray(flops),
        "m": m,
        "compute_s": compute_s,
        "tp_comm_s": tp_comm_s,
        "ep_comm_s": ep_comm_s,
        "cp_comm_s": cp_comm_s,
        "pp_bubble_s": pp_bubble_s,
        "pp_p2p_s": pp_p2p_s,
        "dp_comm_s": dp_comm_s,
        "dp_comm_overlapped_s": dp_raw_s - dp_comm_s,
        "tp_comm_overlapped_s": tp_raw_s - tp_comm_s,
        "pp_p2p_overlapped_s": pp_p2p_raw_s - pp_p2p_s,
        "compute_linear_s": compute_linear_s,
        "compute_attention_s": compute_attention_s,
        "compute_other_s": compute_other_s,
        "optimizer_s": optimizer_s,
        "total": total,
        "n_gpus": n_gpus,
        "slowest_stage": slowest,
    }


def _parameter_counts(model: ModelSpec, training: TrainingSpec) -> tuple[tuple, tuple, float]:
    """(trainable, base) parameters of (a dense layer, a MoE layer beyond its routed experts, the routed experts of a
    MoE layer, the embedding, the head without Megatron's tied copy) and that copy's size."""
    routed_per_layer = float(model.routed_expert_parameters())
    layer_common = model.attention_parameters() + 2 * model.norm_parameters()
    dense_layer_params = layer_common + model.dense_mlp_parameters()
    moe_layer_params = layer_common + model.moe_mlp_parameters() - routed_per_layer if model.is_moe else 0.0
    tied_copy = model.vocab_size * model.hidden_size if model.tie_embeddings else 0
    base = (dense_layer_params, moe_layer_params, routed_per_layer, model.embedding_parameters(),
            model.head_parameters())
    # LoRA: only the adapters have gradients and optimizer states (memory.lora_parameters: r x (in + out) per
    # targeted linear, DoRA's magnitude vector too; the head's adapter when lora_targets names it); the routed experts
    # and the embedding stay frozen. Under ZeRO-3 / FSDP the frozen base is still sharded: it is all-gathered for
    # the forward and again for the backward (2 (d - 1) / d of each shard in the compute dtype, the copy the layers
    # run on: FSDP2 MixedPrecisionPolicy param_dtype, DeepSpeed's bf16 engine), but never reduce-scattered.
    trainable = base  # the head's entry is replaced by the caller (it adds the tied copy where p > 1)
    if training.lora_rank:
        adapters = float(lora_parameters(model, training.lora_rank, training.lora_targets, training.lora_variant))
        trainable = (adapters, adapters, 0.0, 0.0, float(lora_head_parameters(model, training)))
    return trainable, base, tied_copy


def _stage_weights(counts: tuple[tuple, tuple, float], p, lora_rank) -> tuple[tuple, tuple]:
    """(trainable, base) per-part parameters of `_parameter_counts` with Megatron's tied head copy on the last stage
    where p > 1 (setup_embeddings_and_output_layer); without LoRA everything trains, so trainable is base."""
    trainable, base, tied_copy = counts
    base = (*base[:4], base[4] + np.where(p > 1, tied_copy, 0.0))
    return (trainable if lora_rank else base), base


def _stage_parameters(layers, moe, first_stage, last_stage, weights):
    """(dense-sharded, routed-expert) parameters of a stage with `layers` layers, `moe` of them routed-expert
    ones, from `weights` = (dense layer, MoE layer, routed experts per MoE layer, embedding, head)."""
    dense_layer, moe_layer, routed, embed, out = weights
    return ((layers - moe) * dense_layer + moe * moe_layer + np.where(first_stage, embed, 0.0)
            + np.where(last_stage, out, 0.0)), moe * routed


def _bounding_stage_terms(model: ModelSpec, pipe: PipelineStages, leading: int, weights, base) -> list[tuple]:
    """(stage, layers, MoE layers, is last, trainable parameters, trainable expert parameters, base parameters, base
    expert parameters) of each stage that can bound the others (`_components`), none of it GPU-dependent.

    A stage's time and parameters are linear in its dense-layer count, which never grows from one stage to the next
    (the dense layers lead, in every round of chunks): among stages of equal layer counts the first and the last
    bound the rest. So the ends, and where they have their own counts the first and last middle ones."""
    p = pipe.p
    p_last = p - 1
    stages = (0.0 * p, p_last) if pipe.even else (0.0 * p, np.minimum(1.0, p_last), np.maximum(p_last - 1, 0.0),
                                                  p_last)
    terms = []
    for stage in stages:
        layers = pipe.counts(stage)
        moe = layers - pipe.leading(leading, stage) if leading else (layers if model.is_moe else 0.0)
        is_last = stage == p - 1
        params, experts = _stage_parameters(layers, moe, stage == 0, is_last, weights)
        base_params, base_experts = _stage_parameters(layers, moe, stage == 0, is_last, base)
        terms.append((stage, layers, moe, is_last, params, experts, base_params, base_experts))
    return terms


class SharedTerms:
    """What `step_time_totals` reads that does not depend on the GPU type, for one model, training and 1-D arrays of
    pipeline layouts (p, vp, first and last stage layers): `plans.rank_plans` ranks a subset of the same rows on
    every type and builds one, so each type's call reads them instead of computing them again. Only a speed-up:
    the answers are those of the call without it (the row-wise terms are computed on every row, then taken).
    """

    def __init__(self, pp, vp, first_stage_layers, last_stage_layers):
        self.p, self.vp, self.first, self.last = (np.asarray(x, dtype=np.float64)
                                                  for x in (pp, vp, first_stage_layers, last_stage_layers))
        self.memo: dict = {}  # _components' model-level terms (FLOPs per token, parameter counts, ...)
        self._stages: dict = {}

    def stage_terms(self, model: ModelSpec, training: TrainingSpec, even: bool, consecutive: bool, rows) -> list:
        """`_bounding_stage_terms` at `rows`, laid out as a PipelineStages of those rows alone would (`even`,
        `consecutive`: whether they are; its answers for a row depend on those and the row only)."""
        key = even, consecutive
        if key not in self._stages:
            pipe = PipelineStages(model.num_layers, self.p, self.first, self.last, self.vp)
            pipe.even, pipe.consecutive = even, consecutive
            weights, base = _stage_weights(self.memo["weights"], self.p, training.lora_rank)
            leading = model.first_k_dense if model.is_moe else 0
            self._stages[key] = _bounding_stage_terms(model, pipe, leading, weights, base)
        return [tuple(x[rows] if np.ndim(x) else x for x in terms) for terms in self._stages[key]]


def expert_gemm_roofline_fraction(tokens_per_expert, k_dim, n_dim, operand_bytes, peak_flops_s, bandwidth_bytes_s):
    """Share of the GEMM peak one expert GEMM of M = tokens_per_expert rows, K x N weights can reach: the roofline
    min(peak, intensity x bandwidth) / peak (Williams et al. 2009, "Roofline", CACM 52(4)), with the arithmetic
    intensity of Y[M, N] = X[M, K] W[K, N]: 2 M K N FLOPs over the operand bytes of X, W and Y (its dgrad and wgrad
    GEMMs move the same three matrices). Megatron-Core's grouped experts (moe/experts.py TEGroupedMLP: TE
    GroupedLinear, one GEMM per local expert; GroupedMLP: grouped_gemm) each see the tokens routed to them.

    >>> round(float(expert_gemm_roofline_fraction(512, 2048, 768, 2, 989e12, 3350e9)), 3)  # intensity 267 < 295
    0.905
    """
    m = np.asarray(tokens_per_expert, dtype=np.float64)
    intensity = 2 * m * k_dim * n_dim / (operand_bytes * (m * k_dim + k_dim * n_dim + m * n_dim))
    return np.minimum(1.0, intensity * bandwidth_bytes_s / peak_flops_s)


def fp8_cast_elements_per_token(model: ModelSpec, training: TrainingSpec) -> tuple[float, float]:
    """Elements per token one dense layer and one routed-expert layer quantise to fp8 (FP8_CAST_BYTES_PER_ELEMENT
    each), forward + backward (+ the replayed forward's under full recomputation); over all t ranks together.

    forward   attention output projection input (heads x v_head_dim) + the MLP's second GEMM's input (ffn; MoE:
              top-k x expert ffn, the permuted copies)
    backward  each linear's output gradient: QKV (q + k + v widths), output projection (h), first MLP GEMM
              (2 ffn SwiGLU, ffn GeLU), second (h); the experts' per routed copy (top-k of them)

    >>> from frenzy_core.models import ZOO
    >>> fp8_cast_elements_per_token(ZOO["gpt2"], TrainingSpec())  # 768 + 3072 forward, 2304 + 768 + 3072 + 768
    (10752.0, 10752.0)
    """
    h = model.hidden_size
    glu = 2 if model.mlp_kind == "swiglu" else 1
    attn_fwd = model.attention_output_dim
    attn_bwd = model.q_dim + model.kv_dim + model.v_dim + h
    dense_fwd, dense_bwd = attn_fwd + model.ffn, attn_bwd + glu * model.ffn + h
    k, e_ffn = model.moe_top_k, model.expert_ffn
    shared = model.num_shared_experts * e_ffn if model.is_moe else 0
    moe_fwd = attn_fwd + k * e_ffn + shared
    moe_bwd = attn_bwd + k * (glu * e_ffn + h) + (glu * shared + h if shared else 0)
    share = -(-model.num_layers // training.recompute_every) / model.num_layers
    replay = share if training.recompute == "full" else 0.0
    dense = (1 + replay) * dense_fwd + dense_bwd
    moe = (1 + replay) * moe_fwd + moe_bwd if model.is_moe else dense
    return float(dense), float(moe)


def staggered_exposed_s(traffic_s, first_window_s, step_window_s, chunks):
    """Exposed seconds of data-parallel traffic split evenly over `chunks` model chunks, chunk j (in the order the
    schedule reaches them) hiding behind first_window + j x step_window of compute:

        sum over j = 0 .. v - 1 of max(0, traffic / v - first - j x step)
          = k A - step k (k - 1) / 2,   A = traffic / v - first,  k = min(v, ceil(A / step))  (0 when A <= 0)

    Megatron's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_with_interleaving) launches each model chunk's gradient sync (config.grad_sync_func)
    once that chunk's last micro-batch has run backward, and its parameter all-gather (config.param_sync_func) ahead
    of its first forward; micro-batches run in groups of microbatch_group_size_per_vp_stage (default: the pipeline
    size, megatron/core/model_parallel_config.py) per chunk, so the chunks reach their last backward (first forward)
    one group of backward (forward) passes apart: first = the chunk's own micro-batch pass, step = p of them.
    One chunk (vp = 1): max(0, traffic - first), the last micro-batch's pass.

    >>> float(staggered_exposed_s(1.0, 0.25, 0.0, 1))  # one chunk: what exceeds its own window
    0.75
    >>> round(float(staggered_exposed_s(1.2, 0.1, 0.2, 3)), 12)  # 0.4 per chunk: 0.3 + 0.1 + 0 exposed
    0.4
    """
    traffic, first, step, v = (np.asarray(x, dtype=np.float64) for x in (traffic_s, first_window_s, step_window_s,
                                                                         chunks))
    a = traffic / v - first
    k = np.where(step > 0, np.minimum(v, np.ceil(np.maximum(a, 0.0) / np.where(step > 0, step, 1.0))), v)
    return np.where(a > 0, k * a - step * k * (k - 1) / 2, 0.0)


def linear_shape_time_flops(model: ModelSpec, training: TrainingSpec, gpu: GPUType, tokens, t, fp8: bool,
                            per_token: TokenFlops):
    """What the layers' linear GEMMs take beyond (or short of) their FLOPs at the type's calibrated efficiency, per
    token, as FLOPs at the GEMMs' own rate, for (a dense layer, a routed-expert layer):

        dense  linear FLOPs x (share_attn (F_attn - 1) + share_mlp (F_mlp - 1))
        MoE    the attention projections' share alone (the experts' GEMMs have their own roofline term)

    F = gemm.linear_time_factors: the shapes' measured seconds per FLOP over the calibration run's (1 where the type
    has no measured curve). share_attn = attention weights / (attention + dense MLP weights) of the linear FLOPs.

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ZOO
    >>> tr = TrainingSpec(seq_len=2048)
    >>> linear_shape_time_flops(ZOO["llama-2-7b"], tr, CATALOG["A100-80GB"], 2048, 1, False,
    ...                         token_flops(ZOO["llama-2-7b"], tr))  # no measured curve for the A100
    (0.0, 0.0)
    """
    curve = gemm.curve_for(gpu.gemm_arch, "fp8" if fp8 else "bf16")
    if curve is None or gpu.gemm_reference is None:
        return 0.0, 0.0
    peak = gpu.peak_tflops("fp8" if fp8 else training.precision_setup.compute_dtype) * 1e12
    # a plan grid holds few distinct (tokens, t): evaluate those once
    tokens, t = np.broadcast_arrays(np.asarray(tokens, dtype=np.float64), np.asarray(t, dtype=np.float64))
    keys, first, back = np.unique(tokens.ravel() * 65536.0 + t.ravel(), return_index=True, return_inverse=True)
    f_attn, f_mlp = gemm.linear_time_factors(curve, gpu.gemm_reference, model, tokens.ravel()[first],
                                             t.ravel()[first], peak, wgrad=not training.lora_rank)
    f_attn, f_mlp = (np.asarray(f)[back.ravel()].reshape(tokens.shape) for f in (f_attn, f_mlp))
    attn_w, mlp_w = model.attention_parameters(), model.dense_mlp_parameters()
    attn_flops = per_token.dense_linear * attn_w / (attn_w + mlp_w)
    dense = attn_flops * (f_attn - 1.0) + (per_token.dense_linear - attn_flops) * (f_mlp - 1.0)
    return dense, attn_flops * (f_attn - 1.0)


def _moe_extra_time_flops(model, training, gpu, b, t, c, e, et, fp8, gemm_peak_flops_s, eff):
    """What a routed-expert layer costs beyond its FLOPs at the type's efficiency, per token, as bf16-rate FLOPs
    that take the same time on the stage (`_components` divides by d t cp x bf16 peak x eff):

    expert GEMMs  routed FLOPs x (1 / roofline - 1): each local expert runs on its tokens per expert =
                  ep x etp x (b s / (cp t)) x top-k / num_experts (balanced routing; MoEAlltoAllTokenDispatcher
                  gathers the top-k copies of the ep x etp group's tokens for its num_local_experts), at
                  min(peak, intensity x bandwidth) x eff (`expert_gemm_roofline_fraction`)
    permutation   MOE_PERMUTE_PASSES x (1 + top-k) x h elements per token moved through HBM (moe_utils.permute /
                  unpermute): bytes / bandwidth, in time; each rank holds b s / (cp t) tokens (sequence parallel)
    """
    h, k, ffn = model.hidden_size, model.moe_top_k, model.expert_ffn
    ps = training.precision_setup
    bandwidth = gpu.memory_bandwidth_gbyte_s * 1e9
    share = -(-model.num_layers // training.recompute_every) / model.num_layers
    replay = {"full": share, "op-sac": OP_SAC_RECOMPUTED_MM_FRACTION}.get(training.recompute, 0.0)
    tokens_per_expert = e * et * b * training.seq_len / (c * t) * k / model.num_experts
    fc1_n = (2 if model.mlp_kind == "swiglu" else 1) * ffn / et
    operand = FP8_OPERAND_BYTES if fp8 else ps.activation_bytes
    fc1 = expert_gemm_roofline_fraction(tokens_per_expert, h, fc1_n, operand, gemm_peak_flops_s, bandwidth)
    fc2 = expert_gemm_roofline_fraction(tokens_per_expert, ffn / et, h, operand, gemm_peak_flops_s, bandwidth)
    # per token: the top-k experts' GEMMs, 6 FLOPs per weight (4 frozen under LoRA; + 2 per replayed forward), at the
    # GEMM's own peak
    per_weight = FLOPS_PER_PARAM_TOKEN - (WEIGHT_GRAD_FLOPS_PER_PARAM_TOKEN if training.lora_rank else 0)
    weight_flops = (per_weight + 2 * replay) * k * h * ffn
    fc1_flops, fc2_flops = weight_flops * fc1_n * et / ffn, weight_flops
    time_share = gemm_peak_flops_s / (gpu.peak_tflops(ps.compute_dtype) * 1e12)  # fp8: bf16 peak / fp8 peak
    gemm_extra = time_share * (fc1_flops * (1.0 / fc1 - 1.0) + fc2_flops * (1.0 / fc2 - 1.0))
    passes = MOE_PERMUTE_PASSES + (MOE_PERMUTE_PASSES_RECOMPUTE if training.recompute == "full" else 0)
    permute_bytes = passes * (1 + k) * h * ps.activation_bytes
    # seconds per token on one GPU x the bf16 rate x eff = the FLOPs that take as long on the stage
    permute_flops = permute_bytes / bandwidth * gpu.peak_tflops(ps.compute_dtype) * 1e12 * eff
    return gemm_extra + permute_flops


def step_time(
    model: ModelSpec,
    training: TrainingSpec,
    par: Parallelism,
    gpu: GPUType,
    *,
    intra_link_gbyte_s: float | None = None,
    network_gbit_s: float = 100.0,
    gpus_per_node: int = 8,
    mfu: float | None = None,
    overhead_s: float | None = None,
) -> StepTime:
    """Predicted seconds per optimizer step of `training` on d x t x p x cp GPUs of one type, with its breakdown.

    `intra_link_gbyte_s` defaults to the GPU type's nominal link, `mfu` to its measured MFU for the compute dtype
    with the attention core at its kernel's measured rate (`attention_kernel_tflops`; an explicit `mfu` charges
    every FLOP at it), `overhead_s` to its measured per-step cost; `network_gbit_s` is one node's nominal NIC. Raises SpecError when
    the split does not fit the model or batch (see `check_parallelism`).

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ZOO
    >>> st = step_time(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8, precision="amp"),
    ...                Parallelism(), CATALOG["A100-40GB"], mfu=0.5)
    >>> round(st.compute_s, 4), round(st.step_time_s, 4), st.dp_comm_s
    (0.0424, 0.1702, 0.0)
    """
    check_parallelism(model, training, par)
    c = _components(
        model,
        training,
        gpu,
        par.dp,
        par.tp,
        par.pp,
        training.micro_batch,
        intra_link_gbyte_s=intra_link_gbyte_s,
        network_gbit_s=network_gbit_s,
        gpus_per_node=gpus_per_node,
        mfu=mfu,
        overhead_s=overhead_s,
        ep=par.ep,
        cp=par.cp,
        vp=par.vp,
        etp=par.etp,
        first_stage_layers=par.first_stage_layers,
        last_stage_layers=par.last_stage_layers,
    )
    return StepTime(
        flops_per_step=float(c["flops"]),
        micro_batches=float(c["m"]),
        compute_s=float(c["compute_s"]),
        tp_comm_s=float(c["tp_comm_s"]),
        ep_comm_s=float(c["ep_comm_s"]),
        cp_comm_s=float(c["cp_comm_s"]),
        pp_bubble_s=float(c["pp_bubble_s"]),
        pp_p2p_s=float(c["pp_p2p_s"]),
        dp_comm_s=float(c["dp_comm_s"]),
        optimizer_s=float(c["optimizer_s"]),
        overhead_s=float(gpu.step_overhead_s if overhead_s is None else overhead_s),
        step_time_s=float(c["total"]),
        tokens_per_step=training.tokens_per_step(),
        num_gpus=par.num_gpus,
        model_flops_per_step=model_flops_per_step(model, training),
        slowest_stage=int(c["slowest_stage"]),
        dp_comm_overlapped_s=float(c["dp_comm_overlapped_s"]),
        tp_comm_overlapped_s=float(c["tp_comm_overlapped_s"]),
        pp_p2p_overlapped_s=float(c["pp_p2p_overlapped_s"]),
        compute_linear_s=float(c["compute_linear_s"]),
        compute_attention_s=float(c["compute_attention_s"]),
        compute_other_s=float(c["compute_other_s"]),
    )


def step_time_totals(
    model: ModelSpec,
    training: TrainingSpec,
    gpu: GPUType,
    dp,
    tp,
    pp,
    micro_batch,
    *,
    intra_link_gbyte_s: float | None = None,
    network_gbit_s: float = 100.0,
    gpus_per_node: int = 8,
    mfu: float | None = None,
    overhead_s: float | None = None,
    ep=1,
    cp=1,
    vp=1,
    etp=0,
    first_stage_layers=0,
    last_stage_layers=0,
    shared: SharedTerms | None = None,
    rows=None,
) -> np.ndarray:
    """`step_time(...).step_time_s` for arrays of d, t, p, micro-batch, ep, cp, vp, etp and the uneven stages'
    first_stage_layers / last_stage_layers (0: even; see `training.uneven_stage_options`), broadcast together, no
    loop.

    `micro_batch` replaces `training.micro_batch`; splits are not validated here (filter them before ranking).
    Calls for several GPU types over rows of the same 1-D layout arrays may pass `shared` (a `SharedTerms` of those
    arrays, for this model and training) and `rows` (the index or mask of the rows the split arrays are): same
    answers, less work.

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ZOO
    >>> tr = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8, precision="amp")
    >>> step_time_totals(ZOO["gpt2"], tr, CATALOG["A100-40GB"], [1, 2], 1, 1, [8, 4], mfu=0.5).round(4)
    array([0.1702, 0.1506])
    """
    c = _components(
        model,
        training,
        gpu,
        dp,
        tp,
        pp,
        micro_batch,
        intra_link_gbyte_s=intra_link_gbyte_s,
        network_gbit_s=network_gbit_s,
        gpus_per_node=gpus_per_node,
        mfu=mfu,
        overhead_s=overhead_s,
        ep=ep,
        cp=cp,
        vp=vp,
        etp=etp,
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
        shared=shared,
        rows=rows,
    )
    return np.asarray(c["total"], dtype=np.float64)
