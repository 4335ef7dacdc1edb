"""LitGPT (Lightning-AI/litgpt): its own decoder code (lit_gpt/model.py), Lightning Fabric's "bf16-true" precision
(bf16 parameters, no autocast) and its LoRA / QLoRA fine-tuning recipes (lit_gpt/lora.py, finetune/lora.py).

Read at Lightning-AI/litgpt@8641822b3249bb94f068c254aa5d13decbc9f0a0, the commit of its published "Finetuning with
LoRA on 1 GPU" table (bench/data/published_finetune_peaks.md). Every term below names the function it comes from.
What LitGPT shares with the plain-PyTorch model, and is therefore not a term of its own:

* CausalSelfAttention.attn is one fused nn.Linear for q | k | v (the pytorch recipe's fused QKV). With multi-head
  attention (n_query_groups == n_head) and MQA, `qkv.view(...).permute(0, 2, 3, 1, 4)`, `split` and `reshape`
  are views, so SDPA's v keeps the whole fused output alive and the rotated q and k are new tensors (memory
  activations._flash_attention's fused-QKV terms); GQA copies (`gqa_reshape_copies` below).
* apply_rope: `roped = (x * cos) + (rotated * sin)` then `.type_as(x)`. The rope cache is rebuilt in fp32 by
  `model.max_seq_length = longest_seq_length` (finetune/lora.py train(), outside Fabric's dtype contexts), so the
  products are fp32 temporaries, but MulBackward keeps only the operand that does not require grad (cos, sin: the
  buffers) and `cat` / `type_as` keep nothing: no saved tensor beyond the rotated q and k that SDPA keeps.
* CausalSelfAttention.scaled_dot_product_attention: flash_attn_func when flash-attn >= 2 is installed, else
  F.scaled_dot_product_attention(..., is_causal=mask is None) with mask None in training: FlashAttention-2 either way
  (q, k, v, output, fp32 log-sum-exp saved).
* torch.nn.LayerNorm (phi-1.5, StableLM: config `_norm_class="LayerNorm"`) is the fused kernel; GptNeoxMLP
  (fc, F.gelu, proj) and LLaMAMLP (fc_1, fc_2, silu(x_fc_1) * x_fc_2, proj) save what the pytorch model counts.
* utils.py chunked_cross_entropy on the logit chunks of `model(input_ids, lm_head_chunk_size=128)`
  (loss_chunks = ceil(seq_len / 128)). The head computes them in bf16, but Fabric's wrapper returns
  `precision.convert_output(output)`, which casts every floating output to torch.get_default_dtype(), fp32
  (Lightning-AI/lightning@71aed751 src/lightning/fabric/wrappers.py _FabricModule.forward,
  plugins/precision/half.py HalfPrecision.convert_output): F.cross_entropy runs on fp32 chunks and saves an fp32
  log-softmax, TrainingSpec loss_dtype "fp32" (the default), whatever the precision.

>>> FRAMEWORK.default_precision, FRAMEWORK.recipe.lora_qkv_zero_pad, FRAMEWORK.supports_cp
('bf16', True, False)
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.frameworks import fsdp1, pytorch
from frenzy_core.frameworks.base import Framework

LITGPT_REPO = "Lightning-AI/litgpt"
LITGPT_COMMIT = "8641822b3249bb94f068c254aa5d13decbc9f0a0"
# finetune/lora.py train(): `logits = model(input_ids, lm_head_chunk_size=128)`: the head runs in 128-token chunks
LM_HEAD_CHUNK_TOKENS = 128

RECIPE = replace(
    pytorch.RECIPE,
    name="litgpt",
    describes="LitGPT: its own fused-QKV decoder, Fabric bf16-true (bf16 params, no autocast), its LoRA/QLoRA",
    # lit_gpt/lora.py LoRAQKVLinear.zero_pad: with only some of q, k, v adapted (finetune/lora.py: lora_query and
    # lora_value, not lora_key), the adapters' (tokens, q + v) update is scattered into a zero (tokens, q + k + v)
    # tensor by `result.index_copy(1, lora_ind, x.reshape(-1, sum(self.qkv_shapes)))`; IndexCopyBackward keeps its
    # `source` (tools/autograd/derivatives.yaml index_copy: `source: grad.index_select(dim, index).expand_as(source)`)
    # for every layer until backward reaches it (memory.adapters.lora_zero_pad_source_bytes)
    lora_qkv_zero_pad=True,
    # lit_gpt/model.py CausalSelfAttention.forward: with 1 < n_query_groups < n_head, k and v are expanded to
    # (B, groups, q_per_kv, T, hs) and every `reshape(B, -1, T, hs)` of the permuted fused output copies: SDPA keeps
    # the rotated q, k and v widened to every head, and the fused output dies (repeat_kv_copies' terms)
    gqa_reshape_copies=True,
    # lit_gpt/lora.py LLaMAMLP: fc_1 and fc_2 are separate LoRALinear modules, each with its own nn.Dropout
    separate_mlp_linears=True,
    # lit_gpt/rmsnorm.py RMSNorm.forward: `norm_x = torch.mean(x * x, ...)`, `x_normed = x * torch.rsqrt(norm_x +
    # eps)`, `return self.weight * x_normed`, all in the input dtype (bf16 under bf16-true, no fp32 upcast): x and the
    # (tokens, 1) rsqrt are saved; the weight's product keeps x_normed only when the weight trains (full fine-tuning;
    # frozen under LoRA, mark_only_lora_as_trainable)
    rmsnorm_weight_keeps_normed=True,
    # finetune/lora.py train(): `logits = model(...)`, `loss = chunked_cross_entropy(logits, ...)`,
    # `fabric.backward(loss / gradient_accumulation_iters)`: the list of (fp32, Fabric's convert_output) logit
    # chunks stays referenced by `logits` through the whole backward, beside each chunk's saved log-softmax
    # (memory.loss.held_logits_bytes)
    logits_held_through_backward=True,
)


def attention_kernel(training, compute_capability: tuple[int, int]) -> str:
    """FlashAttention-2: lit_gpt/model.py CausalSelfAttention.scaled_dot_product_attention calls flash-attn's
    flash_attn_func(q, k, v, causal=True) when `FlashAttention2Available` (flash-attn >= 2.0.0.post1), otherwise
    F.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=True), SDPA's flash backend (base._sdpa_flash):
    the same FlashAttention-2 kernels."""
    return "flash-attn-2"


def memory_caveat(training, par) -> str | None:
    """LitGPT at 8641822 splits a run only by data parallelism (Fabric DDP / FSDPStrategy): no tensor or pipeline
    parallelism of its own."""
    if getattr(par, "tp", 1) > 1 or getattr(par, "pp", 1) > 1:
        return "LitGPT has no tensor or pipeline parallelism (Fabric DDP / FSDP only): this split is not one it runs"
    return None


FRAMEWORK = Framework(
    name="litgpt",
    describes=RECIPE.describes,
    recipe=RECIPE,
    export_format=None,  # LitGPT's launcher is its own CLI (finetune/lora.py); no export of ours writes it
    # finetune/lora.py setup(): `precision or get_default_supported_precision(training=True)`, "bf16-true" on a
    # bf16-capable GPU (lit_gpt/utils.py): bf16 parameters, and torch AdamW states like its (bf16) parameters
    default_precision="bf16",
    supports_cp=False,  # no context parallelism
    supports_vp=False,  # no pipeline schedule at all
    supports_uneven_stages=False,
    supports_ep=False,  # no MoE / expert parallelism at 8641822
    experts_fit=None,
    fully_shards=False,
    # single GPU, Fabric DDP, or finetune/lora.py's FSDPStrategy (torch FSDP FULL_SHARD, ZeRO-3)
    zero_stages=(0, 3),
    # Fabric precision "bf16-mixed": torch.autocast on fp32 parameters (TrainingSpec precision amp)
    supports_amp=True,
    supports_chunked_loss=True,  # utils.py chunked_cross_entropy
    switches=(),
    switches_label="",
    attention_kernel=attention_kernel,
    memory_caveat=memory_caveat,
    zero_stage_refusal="litgpt runs one GPU, Fabric DDP (zero_stage 0) or FSDP FULL_SHARD (zero_stage 3), got "
                       "{zero_stage}",
    # finetune/lora.py setup(): devices > 1 -> FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy=
    # {Block}, state_dict_type="full", limit_all_gathers=True, cpu_offload=False): torch FullyShardedDataParallel
    # (FSDP1) over lit_gpt Blocks, its only sharding at 8641822 (frameworks/fsdp1.py)
    fsdp_versions=(fsdp1.VERSION,),
    fsdp_default=fsdp1.VERSION,
    fsdp_refusal="fsdp {fsdp}: litgpt at 8641822 shards with Fabric's FSDPStrategy, torch "
                 "FullyShardedDataParallel (FSDP1): use fsdp 1 (or 0, its default)",
    tune_recipe=fsdp1.tune_recipe,
)
