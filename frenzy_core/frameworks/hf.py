"""Hugging Face transformers model code trained by Trainer / accelerate (autocast on fp32 params).

>>> FRAMEWORK.recipe.separate_projections, FRAMEWORK.supports_ep, FRAMEWORK.export_format
(True, False, 'accelerate')
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.frameworks import pytorch
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
)

def attention_kernel(training, compute_capability: tuple[int, int]) -> str:
    """PyTorch SDPA's flash backend, FlashAttention-2 (base._sdpa_flash): TrainingSpec attention "flash" is
    transformers' default attn_implementation, PreTrainedModel.get_correct_attn_implementation
    `applicable_attention = "sdpa" if requested_attention is None else requested_attention`
    (src/transformers/modeling_utils.py), whose sdpa_attention_forward calls F.scaled_dot_product_attention;
    attn_implementation="flash_attention_2" runs the same FlashAttention-2 kernels from flash-attn."""
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
)
