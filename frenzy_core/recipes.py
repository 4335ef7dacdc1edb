"""Framework recipes: where each training stack keeps a tensor alive that the plain-PyTorch model counts differently.

A `Recipe` is a small set of named terms. `pytorch` is the mechanism-level model of frenzy_core.memory, exact against
frenzy_core.tracer (a plain PyTorch decoder under CUDA autocast). The other recipes change only the terms their
framework's code changes; everything they share (weights, Adam states, saved linear inputs, flash attention, the
1F1B schedule) lives once in frenzy_core.memory. Each field cites the file and function it comes from, read at the
commits listed in docs/memory.md ("Framework recipes"). No term is fitted to a measurement.

>>> RECIPES["megatron"].loss_bytes_per_logit, RECIPES["pytorch"].loss_bytes_per_logit
(6, 12)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from frenzy_core.errors import SpecError
from frenzy_core.training import PRECISIONS, PrecisionSetup

FP32_BYTES, BF16_BYTES, MASK_BYTES = 4, 2, 1

# --- the loss, bytes per logit element alive while its backward runs -----------------------------------------------
# torch.nn.functional.cross_entropy in fp32 (CUDA autocast / an explicit .float()): log_softmax saves its fp32 output;
# LogSoftmaxBackward holds that output, the fp32 gradient from nll_loss and the fp32 gradient it produces.
TORCH_CROSS_ENTROPY_BYTES = FP32_BYTES + FP32_BYTES + FP32_BYTES  # = 12
# megatron/core/tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy: logits.float() once, then max-subtract,
# exp and divide in place; save_for_backward(exp_logits) keeps that one fp32 softmax; backward turns it into the
# gradient in place (grad_input = softmax; grad_input.mul_), and autograd casts it to the bf16 logits' dtype.
MEGATRON_VOCAB_PARALLEL_CE_BYTES = FP32_BYTES + BF16_BYTES  # = 6

# --- DeepSpeed ZeRO defaults (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig) -------------------------------
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000  # reduce_bucket_size = 5e8
DEEPSPEED_STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000  # stage3_max_live_parameters = 1e9
DEEPSPEED_STAGE3_MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance = 1e9
DEEPSPEED_SUB_GROUP_ELEMENTS = 1_000_000_000  # sub_group_size = 1e9: ZeRO-3 steps the optimizer one sub-group at a time
# The deepspeed recipe's error on the one published real-GPU ZeRO-3 peak held out from calibration (DeepSpeedExamples
# bf16_master_weight, 6.86B on 4 GPUs, tests/data/real_gpu_peaks.jsonl; bench/memory_accuracy.py, 2026-12-01): the
# app warns with it. tests/test_deepspeed_recipe.py recomputes it from the fixture, so it follows the recipe.
DEEPSPEED_ZERO3_HELD_OUT_ERROR = -0.238


@dataclass(frozen=True)
class Recipe:
    """The terms of one framework that differ from the plain-PyTorch model (docs/memory.md, "Framework recipes")."""

    name: str
    describes: str  # the stack, in words
    loss_bytes_per_logit: int  # alive while the loss' backward runs, per logit element of the micro-batch
    fused_softmax: bool  # eager attention saves compute-dtype probabilities (fused scale-mask-softmax), no fp32 copy
    autocast: bool  # autocast caches a compute-dtype copy of each weight (False: the params are the compute dtype)
    residual_in_compute_dtype: bool  # the residual stream is in the compute dtype (params cast before forward)
    separate_projections: bool  # q/k/v and gate/up are separate Linears: under autocast each casts its input
    unfused_rmsnorm: bool  # RMSNorm written as x * rsqrt(mean(x^2)) then * weight: saves an fp32 normalised copy
    unfused_gelu_tanh: bool  # GPT-2's gelu_new as a Python formula: pow, tanh, mul each save a tensor
    gpt2_softmax_in_input_dtype: bool  # GPT-2 eager attention: softmax(dim=-1) without dtype: bf16 without autocast
    zero3_gathered_layers: int  # layers whose unsharded parameters exist at once under ZeRO-3 / FSDP
    root_unit_unsharded: bool  # FSDP2's root unit (embedding, final norm, head) stays unsharded through backward
    grads_alive_at_peak: bool  # the (sharded) gradients of the previous step or micro-batch are counted at the peak
    reduce_bucket_elements: int  # DeepSpeed's contiguous gradient bucket (param dtype), 0 for the others
    max_live_parameters: int  # DeepSpeed ZeRO-3 caps gathered parameters at this many elements (0: no cap)
    max_reuse_distance: int = 0  # DeepSpeed ZeRO-3: parameters reused within this many elements stay gathered
    fp32_router_input: bool = False  # the MoE router casts its input to fp32 first (HF DeepSeek-V2/V3 routers)
    zero3_layers_at_loss: int = 0  # layers unsharded while the loss' backward runs (0: zero3_gathered_layers)
    side_stream_pools: bool = False  # FSDP2: sharded grads and all-gather buffers live in side-stream pools
    repeat_kv_copies: bool = False  # k and v widened to every head (expand + reshape copies) before SDPA saves them
    pipeline_keeps_blocks_unsharded: bool = False  # with p > 1 every block of the stage stays gathered all step
    # Megatron-Core MoE (megatron/core/transformer/moe at d98e8a64; docs/memory.md "MoE (Megatron)"):
    moe_probs_in_experts: bool = False  # experts scale their activation by the routing prob; unpermute gets no probs
    moe_allgather_dispatcher: bool = False  # MoEAllGatherTokenDispatcher: global gather buffer, per-layer local maps
    # DeepSpeed ZeRO's step flattens this rank's gradient partition (a param-dtype copy) and casts it to fp32 for the
    # optimizer (stage_1_and_2.py step(); stage3.py _prepare_fp32_grad_for_sub_group)
    zero_fp32_grad_partition: bool = False
    zero12_grads_freed_in_step: bool = False  # ZeRO-1/2 free every gradient in step(): a new step starts with none
    zero3_persistent_bucket: bool = False  # ZeRO-3 allocates its gradient bucket once, alive through the step too
    sub_group_elements: int = 0  # ZeRO-3 casts and steps this many elements of the partition at a time (0: all)
    zero3_no_gather_unsharded: bool = False  # ZeRO-3 over one rank: the partition is the parameter, nothing gathered

    def precision_setup(self, precision: str) -> PrecisionSetup:
        """The bytes per parameter this framework holds for a `TrainingSpec.precision`."""
        ps = PRECISIONS[precision]
        if self.name == "fsdp2" and precision != "bf16":
            # torch.distributed.fsdp fully_shard + MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the
            # sharded parameters stay fp32 (they are the optimizer's master), grads reduce-scatter to fp32, compute
            # runs on the all-gathered bf16 copy (torchtitan parallelize.py apply_fsdp).
            if ps.compute_dtype == "bf16":
                return PrecisionSetup("fsdp2-bf16", 4, 4, 0, 0, BF16_BYTES, BF16_BYTES, "bf16")
            return ps
        if self.name == "deepspeed" and precision == "bf16-master":
            # deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer: bf16 params and bf16 gradients
            # (averaged_gradients / ipg buckets in the param dtype), fp32 master partition + Adam states.
            return PrecisionSetup("deepspeed-bf16", BF16_BYTES, BF16_BYTES, FP32_BYTES, 0, BF16_BYTES, BF16_BYTES, "bf16")
        return ps


PYTORCH = Recipe(
    name="pytorch",
    describes="plain PyTorch: torch.autocast(bf16) or bf16 params, fused QKV and gate/up, torch cross_entropy",
    loss_bytes_per_logit=TORCH_CROSS_ENTROPY_BYTES,
    fused_softmax=False,
    autocast=True,
    residual_in_compute_dtype=False,
    separate_projections=False,
    unfused_rmsnorm=False,
    unfused_gelu_tanh=False,
    gpt2_softmax_in_input_dtype=False,
    zero3_gathered_layers=2,  # FSDP forward/backward prefetch: the layer computing and the next one
    root_unit_unsharded=False,
    grads_alive_at_peak=False,
    reduce_bucket_elements=0,
    max_live_parameters=0,
)

RECIPES: dict[str, Recipe] = {
    "pytorch": PYTORCH,
    # transformers modeling_llama.py / modeling_gpt2.py + Trainer (accelerate autocast on fp32 params)
    "hf": replace(
        PYTORCH,
        name="hf",
        describes="Hugging Face transformers model code + Trainer/accelerate autocast",
        # LlamaAttention: q_proj, k_proj, v_proj; LlamaMLP: gate_proj, up_proj (separate nn.Linear)
        separate_projections=True,
        # LlamaRMSNorm.forward: hidden_states.to(float32) * rsqrt(variance + eps), then weight * (...).to(dtype)
        unfused_rmsnorm=True,
        # activations.py NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))
        unfused_gelu_tanh=True,
        # modeling_gpt2.py eager_attention_forward: nn.functional.softmax(attn_weights, dim=-1), then
        # .type(value.dtype): fp32 + a bf16 copy under autocast, one bf16 tensor with bf16 params
        gpt2_softmax_in_input_dtype=True,
        # deepseek_v3/modeling_deepseek_v3.py DeepseekV3TopkRouter.forward (deepseek_v2: DeepseekV2Moe's gate alike):
        # F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        fp32_router_input=True,
    ),
    # megatron/core (transformer_impl=transformer_engine): bf16 params, fp32 main grads, vocab-parallel loss
    "megatron": replace(
        PYTORCH,
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
    ),
    # torchtitan: fully_shard per block + MixedPrecisionPolicy(bf16, fp32), loss on pred.float(), `del pred`
    "fsdp2": replace(
        PYTORCH,
        name="fsdp2",
        describes="torchtitan-style FSDP2 (fully_shard, MixedPrecisionPolicy param bf16 / reduce fp32)",
        autocast=False,  # compute on the all-gathered bf16 params: no autocast, no weight cache
        residual_in_compute_dtype=True,
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
    ),
    # DeepSpeed ZeRO 1/2/3, bf16 engine
    "deepspeed": replace(
        PYTORCH,
        name="deepspeed",
        describes="DeepSpeed ZeRO 1/2/3 with bf16 enabled and the default bucket sizes",
        autocast=False,  # bf16: the engine casts the module (engine.py _configure_distributed_model: module.bfloat16())
        residual_in_compute_dtype=True,
        # stage_1_and_2.py backward(): ipg_buffer = torch.empty(reduce_bucket_size, dtype=param dtype)
        reduce_bucket_elements=DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
        # partitioned_param_coordinator.py fetch_sub_module: prefetch stops at stage3_max_live_parameters available
        # elements, and a parameter the prefetch scan met AVAILABLE further on in the trace is not released
        # (__params_to_release); at backward start the last ~max_live elements of the forward are still gathered
        # (real DeepSpeed 0.19.8 on 2 CPU ranks: bench/deepspeed_zero3_cpu.py, tests/data/deepspeed_zero3_cpu.jsonl)
        max_live_parameters=DEEPSPEED_STAGE3_MAX_LIVE_PARAMETERS,
        # partitioned_param_coordinator.py __params_to_release: a parameter met again within max_reuse_distance
        # elements of the trace is kept; the forward's last layers are met again in backward at twice their size
        max_reuse_distance=DEEPSPEED_STAGE3_MAX_REUSE_DISTANCE,
        # stage_1_and_2.py step(): flat_grad_partition = self.flatten(averaged_gradients[i]) (param dtype), then
        # single_grad_partition = flat_grad_partition.to(fp32), `del flat_grad_partition`, optimizer step, `.grad = None`;
        # stage3.py _prepare_fp32_grad_for_sub_group: the same per sub-group (the estimators' "4_grads_32bit")
        zero_fp32_grad_partition=True,
        # stage_1_and_2.py step(): free_grad_in_param_list(params_not_in_partition / params_in_partition) and
        # averaged_gradients[i] = None; independent_gradient_partition_epilogue -> _release_ipg_buffers drops
        # grads_in_partition. stage3.py keeps grad_partitions_flat_buffer (param dtype, allocated once) instead.
        zero12_grads_freed_in_step=True,
        # stage3.py _setup_for_real_optimizer: bucket.buffer = torch.empty(reduce_bucket_size, dtype) once; ZeRO-1/2
        # allocate theirs per backward (setup_buckets) and release it at the end of backward (_release_ipg_buffers)
        zero3_persistent_bucket=True,
        # stage3.py step(): for each sub_group: _prepare_sub_group (fp32 grad), _optimizer_step, _release_sub_group
        sub_group_elements=DEEPSPEED_SUB_GROUP_ELEMENTS,
        # partition_parameters.py Init._convert_to_deepspeed_param all_gather_coalesced: when every parameter's
        # partition world size is 1 it returns _no_gather_coalesced(params), which only flips ds_status: no buffer
        zero3_no_gather_unsharded=True,
    ),
}

FRAMEWORKS = tuple(RECIPES)


def block_recipe(recipe: Recipe, training) -> Recipe:
    """The recipe inside the transformer blocks of a `TrainingSpec`: with `compile`, torchtitan's apply_compile
    (parallelize_llama.py at 9dec370) wraps each TransformerBlock in torch.compile(fullgraph=True), and Inductor
    fuses its RMSNorms (no fp32 copy saved); the final norm, the head and the loss stay eager.

    >>> block_recipe(RECIPES["fsdp2"], type("T", (), {"compile": True})()).unfused_rmsnorm
    False
    """
    if getattr(training, "compile", False):
        return replace(recipe, unfused_rmsnorm=False)
    return recipe


def run_recipe(training) -> Recipe:
    """The recipe of `training.framework` with the run's own DeepSpeed zero_optimization values
    (`TrainingSpec.reduce_bucket_size`, `stage3_max_live_parameters`, `stage3_max_reuse_distance`; 0 keeps
    DeepSpeed's defaults).

    >>> run_recipe(type("T", (), {"framework": "deepspeed", "reduce_bucket_size": 50_000_000,
    ...                           "stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0})()).reduce_bucket_elements
    50000000
    """
    recipe = get_recipe(training.framework)
    if recipe.name != "deepspeed":
        return recipe
    bucket = getattr(training, "reduce_bucket_size", 0) or recipe.reduce_bucket_elements
    live = getattr(training, "stage3_max_live_parameters", 0) or recipe.max_live_parameters
    reuse = getattr(training, "stage3_max_reuse_distance", 0) or recipe.max_reuse_distance
    return replace(recipe, reduce_bucket_elements=bucket, max_live_parameters=live, max_reuse_distance=reuse)


def get_recipe(framework: str) -> Recipe:
    """The recipe for a `TrainingSpec.framework` name; a SpecError naming `framework` otherwise."""
    try:
        return RECIPES[framework]
    except KeyError:
        raise SpecError("framework", f"unknown framework {framework!r}; choose one of: {', '.join(FRAMEWORKS)}") from None
