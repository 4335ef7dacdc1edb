"""Hugging Face transformers model code trained by Trainer / accelerate (autocast on fp32 params).

>>> FRAMEWORK.recipe.separate_projections, FRAMEWORK.supports_ep, FRAMEWORK.export_format
(True, False, 'accelerate')
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.frameworks import fsdp1, pytorch
from frenzy_core.frameworks.base import Framework

# transformers modeling_llama.py / modeling_gpt2.py + Trainer (accelerate autocast on fp32 params)
RECIPE = replace(
    pytorch.RECIPE,
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
    # packed rows (position ids restarting per document, no attention_mask): masking_utils create_causal_mask
    # finds them (find_packed_sequence_indices), sets allow_is_causal_skip = False and and-s the causal mask with
    # packed_sequence_mask_function; sdpa_mask then broadcasts it to a (batch, 1, q, kv) bool tensor that every
    # layer's F.scaled_dot_product_attention receives as attn_mask (transformers 5.24.0 src/transformers/
    # masking_utils.py create_causal_mask, sdpa_mask, _non_vmap_expansion_sdpa)
    packed_mask_materialised=True,
    # peft 0.21.2 get_peft_model(autocast_adapter_dtype=True, the default): a bf16 base gets fp32 adapters, and
    # LoRA's Linear.forward casts x to them (memory.adapters.adapter_input_cast_bytes)
    fp32_lora_adapters=True,
)

def attention_kernel(training, compute_capability: tuple[int, int]) -> str:
    """PyTorch SDPA's flash backend, FlashAttention-2 (base._sdpa_flash): TrainingSpec attention "flash" is
    transformers' default attn_implementation, PreTrainedModel.get_correct_attn_implementation
    `applicable_attention = "sdpa" if requested_attention is None else requested_attention`
    (src/transformers/modeling_utils.py), whose sdpa_attention_forward calls F.scaled_dot_product_attention;
    attn_implementation="flash_attention_2" runs the same FlashAttention-2 kernels from flash-attn. Packed rows pass a
    bool attn_mask (RECIPE.packed_mask_materialised), which SDPA's flash backend does not take
    (aten/src/ATen/native/transformers/sdp_utils_cpp.h / cuda/sdp_utils.cpp check_for_attn_mask in the flash
    constraints): the memory-efficient backend runs it, a kernel with no published figure here (perf: GEMM rate)."""
    if training.packed:
        return "mem-efficient"
    return "flash-attn-2"


FRAMEWORK = Framework(
    name="hf",
    describes=RECIPE.describes,
    recipe=RECIPE,
    export_format="accelerate",
    default_precision="amp",
    supports_cp=False,  # Hugging Face Trainer has no context parallelism
    supports_vp=False,  # no interleaved pipeline schedule
    supports_uneven_stages=False,
    # accelerate has no expert parallelism: each rank holds every expert, so the planner keeps ep = 1
    supports_ep=False,
    experts_fit=None,
    fully_shards=False,
    zero_stages=(0, 1, 2, 3),
    supports_amp=True,
    supports_chunked_loss=True,
    switches=(),
    switches_label="",
    attention_kernel=attention_kernel,
    # accelerate's FullyShardedDataParallelPlugin wraps torch FullyShardedDataParallel (FSDP1) around each decoder
    # layer: opt in with fsdp 1. fsdp 0 keeps this stack's generic ZeRO-3 terms, as its accelerate export writes
    # DeepSpeed ZeRO for zero_stage > 0 (frenzy_core/export.py _accelerate_config)
    fsdp_versions=(fsdp1.VERSION,),
    fsdp_default=0,
    fsdp_refusal="fsdp {fsdp}: hf's FSDP here is accelerate's FullyShardedDataParallelPlugin, torch "
                 "FullyShardedDataParallel (fsdp 1); accelerate's fully_shard (fsdp_version 2) is not modelled under "
                 "hf: use fsdp 1, or framework fsdp2 for fully_shard",
    tune_recipe=fsdp1.tune_recipe,
)
