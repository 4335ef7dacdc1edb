"""torchtune (pytorch/torchtune): its own Llama model code (torchtune/modules, torchtune/models/llama3*) trained by
its recipes: full_finetune_single_device / lora_finetune_single_device on one GPU, the *_distributed ones with
FSDP2 fully_shard per layer. Parameters are created in the training dtype (bf16), no autocast.

Every term below was read at pytorch/torchtune@1814feb17a9038e1a8053ce93111bd26774a8db6 (2024-11-18), the commit of
the README "Optimization flags" table that bench/data/published_finetune_peaks.jsonl quotes.

>>> FRAMEWORK.default_precision, FRAMEWORK.supports_amp, FRAMEWORK.recipe.repeat_kv_copies
('bf16', False, True)
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.frameworks import fsdp2, pytorch
from frenzy_core.frameworks.base import Framework

RECIPE = replace(
    pytorch.RECIPE,
    name="torchtune",
    describes="torchtune: its own Llama code in bf16 (no autocast), torch cross-entropy or CEWithChunkedOutputLoss, "
              "FSDP2 fully_shard per layer in the distributed recipes",
    # recipes/full_finetune_single_device.py _setup_model: `with training.set_default_dtype(self._dtype)` builds the
    # model in cfg.dtype (bf16), `training.validate_expected_param_dtype`; no recipe enters torch.autocast
    # (torchtune/training/precision.py get_dtype: fp32 / bf16 only, fp16 refused): no weight cache, and the residual
    # stream is bf16
    autocast=False,
    residual_in_compute_dtype=True,
    # torchtune/modules/attention.py MultiHeadAttention.forward: q_proj, k_proj, v_proj are separate nn.Linear
    # (llama3_2/_component_builders.py llama3_2), as are FeedForward's w1 (gate) and w3 (up)
    # (torchtune/modules/feed_forward.py FeedForward.forward: w2(silu(w1(x)) * w3(x))): without autocast w1 and w3
    # share the one saved x; silu keeps w1's output, the product w3's and silu's, w2 the product (= 4 x ffn bf16)
    separate_projections=True,
    # MultiHeadAttention.forward: `k = k.unsqueeze(2).expand(expand_shape).flatten(1, 2)` and the same for v:
    # flatten of an expanded (non-viewable) tensor copies, so SDPA / flex attention saves k and v at num_heads
    # width; the rotated q, the widened k and v and the attention output are what the attention core keeps
    # (torchtune/modules/position_embeddings.py RotaryPositionalEmbeddings.forward: `x.float()`, the products with
    # the fp32 rope cache and torch.stack save only the cache (a buffer, no grad): the fp32 upcast and x_out are
    # temporaries, and `x_out.type_as(x)` is the bf16 rotated tensor); the narrow rotated k and v_proj's output die
    repeat_kv_copies=True,
    # torchtune/modules/rms_norm.py RMSNorm.forward: `x_fp32 = x.float()`; `x_fp32.pow(2)` and the product with
    # rsqrt(...) save x_fp32 (4 B) and the fp32 rstd; `(...).type_as(x) * self.scale` saves the bf16 normalised
    # tensor (2 B): 4 + 2 B per element, the input itself not kept, the same total as transformers' LlamaRMSNorm
    unfused_rmsnorm=True,
    # the loss: torchtune/modules/transformer.py TransformerDecoder.forward `output = self.output(h).float()` (the
    # bf16 logits die at once) then torch.nn.CrossEntropyLoss, and recipe _loss_step `del logits`: the plain torch
    # cross-entropy's 12 B per logit in backward (pytorch.TORCH_CROSS_ENTROPY_BYTES). With
    # CEWithChunkedOutputLoss (loss_chunks 8, torchtune/modules/loss/ce_chunked_output_loss.py
    # compute_cross_entropy: F.cross_entropy(logits.float(), ...) per chunk), TransformerDecoder.chunked_output
    # returns the bf16 logit chunks and _loss_step holds them (`logits`) until the loss has run; the head's backward
    # then runs once per chunk (memory.loss held_logit_chunks_bytes_per_logit, chunked_head_gradient_bytes)
    chunked_output_head=True,
    # compile=True: recipes/lora_finetune_single_device.py `self._loss_fn = training.compile_loss(self._loss_fn)`,
    # recipes/full_finetune_single_device.py `training.compile_loss(self._loss_fn)` (return value dropped: a plain
    # CrossEntropyLoss stays eager there; CEWithChunkedOutputLoss.compute_cross_entropy is replaced in place)
    compiles_loss=True,
    # distributed recipes (full_finetune_distributed.py, lora_finetune_distributed.py): training/_distributed.py
    # shard_model calls fully_shard on each TransformerSelfAttentionLayer, then fully_shard(model): the same FSDP2
    # collectives as torchtitan (fsdp2.RECIPE): the layer computing and the one prefetched; the root unit
    # (tok_embeddings, norm; the tied head is the embedding) is not resharded after forward; the sharded grads and
    # all-gather buffers live in the side streams' pools; optimizer.zero_grad(set_to_none=True) after each step
    zero3_gathered_layers=fsdp2.RECIPE.zero3_gathered_layers,
    root_unit_unsharded=True,
    grads_alive_at_peak=False,
    side_stream_pools=True,
    # reshard_after_forward=cfg.get("fsdp_reshard_after_forward", True) for every layer, the last one included; the
    # root's pre_backward (FSDPParamGroup.pre_backward -> _backward_prefetch) gathers the last layer once the logits'
    # gradient exists: one layer, counted through the loss' backward (an upper bound by that one layer)
    zero3_layers_at_loss=1,
)


def attention_kernel(training, compute_capability: tuple[int, int]) -> str:
    """PyTorch SDPA's flash backend, FlashAttention-2 (base._sdpa_flash): torchtune/modules/attention_utils.py
    _sdpa_or_flex_attention calls `nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None,
    is_causal=True)` on unpacked batches. Packed batches (a BlockMask) run flex_attention instead, whose compiled
    Triton kernel is not among perf's kernels: counted as FlashAttention-2."""
    return "flash-attn-2"


def memory_caveat(training, par) -> str | None:
    """torchtune has no DDP: over several GPUs its distributed recipes always shard with FSDP2."""
    if par.dp > 1 and training.zero_stage == 0:
        return ("torchtune's distributed recipes always shard the model with FSDP2 (training.shard_model): "
                "use zero_stage 3 for its figure over several GPUs")
    return None


FRAMEWORK = Framework(
    name="torchtune",
    describes=RECIPE.describes,
    recipe=RECIPE,
    export_format=None,  # no torchtune config export
    default_precision="bf16",  # configs set `dtype: bf16`: bf16 params, grads and AdamW states
    supports_cp=False,  # no context parallelism in the recipes at 1814feb1
    supports_vp=False,  # no pipeline schedule
    supports_uneven_stages=False,
    supports_ep=False,  # no expert parallelism
    experts_fit=None,
    fully_shards=False,  # zero_stage 0: the single-device recipes; 3: the distributed ones (fully_shard)
    zero_stages=(0, 3),
    supports_amp=False,
    supports_chunked_loss=True,  # CEWithChunkedOutputLoss
    # compile=True: training/_compile.py compile_model compiles each TransformerSelfAttentionLayer on its own
    # (`m.compile(backend=backend)`), as torchtitan's apply_compile does per block: the same fused norms and SwiGLU
    # (recipes.block_recipe) and Inductor's fused element-wise ops (fsdp2.elementwise_fused); the loss is compiled
    # apart (compile_loss: RECIPE.compiles_loss, memory.loss.compiled_cross_entropy)
    switches=fsdp2.SWITCHES,
    switches_label="compile",
    switch_refusal=fsdp2.COMPILE_REFUSAL,
    elementwise_fused=fsdp2.elementwise_fused,
    dp_overlap_default=fsdp2.dp_overlap_default,  # FSDP2's implicit prefetch
    attention_kernel=attention_kernel,
    amp_refusal="torchtune has no autocast mode (training.get_dtype: dtype fp32 or bf16): use precision bf16 or fp32",
    zero_stage_refusal="torchtune runs one GPU unsharded or FSDP2 fully_shard (ZeRO-3): use zero_stage 0 or 3, got "
                       "{zero_stage}",
    memory_caveat=memory_caveat,
    # the distributed recipes: training/_distributed.py shard_model -> fully_shard (FSDP2) per layer
    fsdp_versions=(2,),
    fsdp_default=2,
    fsdp_refusal="fsdp {fsdp}: torchtune's distributed recipes shard with fully_shard (FSDP2, "
                 "training.shard_model): use fsdp 2 (or 0, its default)",
)
