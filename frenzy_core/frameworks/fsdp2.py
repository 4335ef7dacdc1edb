"""torchtitan-style FSDP2: fully_shard per block with MixedPrecisionPolicy(param bf16, reduce fp32), implicit
prefetch, per-block torch.compile, interleaved pipelines, and torchtitan's expert parallelism.

>>> FRAMEWORK.fully_shards, FRAMEWORK.zero_stages, FRAMEWORK.recipe.precision_setup("amp").name
(True, (0, 3), 'fsdp2-bf16')
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.frameworks import pytorch
from frenzy_core.frameworks.base import BF16_BYTES, Framework
from frenzy_core.precision import PRECISIONS, PrecisionSetup

# torchtitan's own switch: per-block torch.compile (apply_compile)
SWITCHES = ("compile",)
# the refusal of `compile` under a stack that does not compile per block (torchtune shares the switch)
COMPILE_REFUSAL = ("compile models per-block torch.compile (torchtitan's apply_compile, torchtune's compile_model): "
                   "use framework fsdp2 or torchtune, got {framework}")

# torch.distributed.fsdp fully_shard + MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the sharded
# parameters stay fp32 (they are the optimizer's master), grads reduce-scatter to fp32, compute runs on the
# all-gathered bf16 copy (torchtitan parallelize.py apply_fsdp). Every bf16-compute precision but pure bf16 gets it.
FSDP2_BF16 = PrecisionSetup("fsdp2-bf16", 4, 4, 0, 0, BF16_BYTES, BF16_BYTES, "bf16")

# torchtitan: fully_shard per block + MixedPrecisionPolicy(bf16, fp32), loss on pred.float(), `del pred`
RECIPE = replace(
    pytorch.RECIPE,
    name="fsdp2",
    describes="torchtitan-style FSDP2 (fully_shard, MixedPrecisionPolicy param bf16 / reduce fp32)",
    autocast=False,  # compute on the all-gathered bf16 params: no autocast, no weight cache
    residual_in_compute_dtype=True,
    # torchtitan's float8 converter swaps nn.Linear for torchao's Float8Linear (torchtitan/components/quantization/
    # float8.py, torchao.float8 convert_to_float8_training), which saves the bf16 operands: Recipe.fp8_saves_casts
    fp8_saves_casts=False,
    # torchtitan models/llama/model.py Attention: wq, wk, wv and FeedForward w1, w3 are separate nn.Linear (no
    # autocast, so no extra casts): xq and xk die after apply_rotary_emb, xv after repeat_kv
    separate_projections=True,
    # Attention.forward: keys = repeat_kv(xk), values = repeat_kv(xv) (unsqueeze, expand, reshape: copies at
    # n_heads width), then F.scaled_dot_product_attention saves them; the output's transpose(1, 2).contiguous()
    # is a view of flash's (b, s, heads, d) output
    repeat_kv_copies=True,
    # fully_shard: the block computing plus the one prefetched (FSDPParamGroup.pre_forward / pre_backward)
    zero3_gathered_layers=2,
    # torchtitan apply_fsdp: fully_shard(model) last, so tok_embeddings, norm and output form the root unit, which
    # FSDP2 does not reshard after forward (FSDPState._lazy_init: the root's post_forward_mesh_info is None)
    root_unit_unsharded=True,
    # torchtitan train.py train_step: optimizers.zero_grad() (set_to_none) before the forward, so no gradient
    # exists when the loss' backward runs; the blocks the shards lived in stay reserved (side_stream_pools)
    grads_alive_at_peak=False,
    # torchtitan models/norms.py RMSNorm (norm_type "rmsnorm", train_configs/llama3_8b.toml):
    # self._norm(x.float()).type_as(x) * weight, eager: keeps the fp32 copy and the normalised bf16 tensor
    unfused_rmsnorm=True,
    # apply_fsdp: reshard_after_forward = layer_id < n_layers - 1: the last block stays unsharded into backward;
    # the next is prefetched only from a block's pre_backward (FSDPParamGroup._backward_prefetch)
    zero3_layers_at_loss=1,
    # apply_fsdp: `if pp_enabled: reshard_after_forward = False` for every block ("to avoid per-microbatch
    # all-gathers"), and fully_shard(model, reshard_after_forward=not pp_enabled) for each stage's root
    pipeline_keeps_blocks_unsharded=True,
    # fsdp/_fully_shard/_fsdp_collectives.py (torch 2.6): foreach_reduce allocates reduce_output, which becomes
    # the sharded .grad, inside `with stream(reduce_scatter_stream)`; foreach_all_gather allocates the flat
    # all-gather output inside `with stream(all_gather_copy_in_stream)`. The caching allocator reuses a freed
    # block only on the stream that allocated it (CUDACachingAllocator get_free_block compares block->stream)
    side_stream_pools=True,
    precision_overrides=tuple((name, FSDP2_BF16) for name, ps in PRECISIONS.items()
                              if name != "bf16" and ps.compute_dtype == "bf16"),
)


def titan_experts_fit(num_experts: int, shard, t, c, e):
    """Where torchtitan takes expert degree e x t (parallel_dims.py `_validate` at b5bcd76: it keeps experts whole and
    borrows EP ranks from dp_shard x cp x tp): e x t divides the experts and dp_shard x cp x t, i.e. e divides
    dp_shard x cp."""
    return (num_experts % (e * t) == 0) & ((shard * c) % e == 0)


def experts_fit(model, training, d, t, c, e):
    """torchtitan's rule for an expert-parallel split (numpy arrays or ints): its degree e x t must divide the experts
    and dp_shard x cp x t, with dp_shard = d when the parameters are sharded, else 1 (`titan_experts_fit`)."""
    return (e == 1) | titan_experts_fit(model.num_experts, d if training.zero_stage >= 1 else 1, t, c, e)


def dp_overlap_default(training) -> bool:
    """On: FSDP2's implicit prefetch always runs: it all-gathers layer i + 1 during layer i and reduce-scatters layer
    i's gradients during layer i - 1's backward (perf.step_time_totals: behind the whole step's compute, one FSDP
    unit exposed)."""
    return True


def attention_kernel(training, compute_capability: tuple[int, int]) -> str:
    """PyTorch SDPA's flash backend, FlashAttention-2 (base._sdpa_flash): torchtitan's Attention calls
    `F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)` under the default backend order
    (torchtitan/models/llama/model.py, pytorch/torchtitan@3f20451b, 2024-12-26, the code of its end-2024 benchmarks
    benchmarks/llama3_h100_202412_torchtitan.md), and with context parallelism inside
    `sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])` (torchtitan/utils.py
    get_train_context). Later torchtitan asks for cuDNN first (torchtitan/models/common/attention.py
    ScaledDotProductAttention: CUDNN_ATTENTION, FLASH_ATTENTION, MATH, @b5bcd76c): not what this recipe describes."""
    return "flash-attn-2"


def elementwise_fused(training) -> bool:
    """Fused under TrainingSpec.compile: torchtitan's apply_compile wraps each TransformerBlock in
    torch.compile(fullgraph=True) (torchtitan/parallelisms/parallelize_llama.py, pytorch/torchtitan@3f20451b), and
    Inductor generates one kernel per chain of pointwise / reduction ops between the matmuls, which reads its inputs
    once and writes its outputs once (Ansel et al., "PyTorch 2", ASPLOS '24, Sec. 5: loop-level IR, "fusion" of
    pointwise, reduction and scatter nodes into one kernel). Eager otherwise: the block's RMSNorm, SwiGLU, rotary
    and residual adds run aten op by aten op (perf.elementwise_bytes_per_token)."""
    return bool(training.compile)


FRAMEWORK = Framework(
    name="fsdp2",
    describes=RECIPE.describes,
    recipe=RECIPE,
    export_format="torchtitan",
    default_precision="amp",
    supports_cp=True,  # torchtitan context_parallel_degree: ring attention
    supports_vp=True,  # pipeline_parallel_schedule "Interleaved1F1B"
    # torchtitan has its own (lighter first / last stage) knobs but not Megatron's rule: not enumerated
    supports_uneven_stages=False,
    supports_ep=True,
    experts_fit=experts_fit,
    fully_shards=True,
    zero_stages=(0, 3),  # fully_shard is ZeRO-3; 0 means its default
    supports_amp=True,
    supports_chunked_loss=True,
    switches=SWITCHES,
    switches_label="compile",
    dp_overlap_default=dp_overlap_default,
    attention_kernel=attention_kernel,
    elementwise_fused=elementwise_fused,
    # tensor parallel: torchtitan's AsyncTP is opt-in (TrainingSpec.tp_comm_overlap)
    zero_stage_refusal="fsdp2 shards parameters (fully_shard = ZeRO-3): use zero_stage 3 or 0, got {zero_stage}",
    switch_refusal=COMPILE_REFUSAL,
    fsdp_versions=(2,),  # fully_shard (FSDP2): this recipe's terms
    fsdp_default=2,
    fsdp_refusal="fsdp {fsdp}: framework fsdp2 is torchtitan's fully_shard (FSDP2): use fsdp 2 (or 0, its "
                 "default), or framework hf / litgpt for FullyShardedDataParallel (fsdp 1)",
)
