"""Plain PyTorch (our own decoder under torch.autocast, DDP / FSDP / ZeRO): the reference stack.

Its recipe is the mechanism-level model of frenzy_core.memory, exact against frenzy_core.tracer (a plain PyTorch
decoder under CUDA autocast); every other recipe is this one with the terms its stack's code changes.

>>> FRAMEWORK.recipe.loss_bytes_per_logit, FRAMEWORK.supports_vp, FRAMEWORK.export_format
(12, False, 'slurm')
"""

from __future__ import annotations

from frenzy_core.frameworks.base import FP32_BYTES, Framework, Recipe

# --- the loss, bytes per logit element alive while its backward runs -----------------------------------------------
# torch.nn.functional.cross_entropy in fp32 (CUDA autocast / an explicit .float()): log_softmax saves its fp32 output;
# LogSoftmaxBackward holds that output, the fp32 gradient from nll_loss and the fp32 gradient it produces.
TORCH_CROSS_ENTROPY_BYTES = FP32_BYTES + FP32_BYTES + FP32_BYTES  # = 12

RECIPE = Recipe(
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
    tied_gradients_meet_in_input_buffer=True,
)

FRAMEWORK = Framework(
    name="pytorch",
    describes=RECIPE.describes,
    recipe=RECIPE,
    export_format="slurm",  # a torchrun batch script: our decoder has no launcher config of its own
    default_precision="amp",
    # our own decoder runs ring attention over cp ranks, as memory/ and perf.py model it
    supports_cp=True,
    # no interleaved schedule we can launch it with (the exports give plain PyTorch none)
    supports_vp=False,
    supports_uneven_stages=False,  # Megatron's rule only
    supports_ep=True,
    experts_fit=None,
    fully_shards=False,
    zero_stages=(0, 1, 2, 3),
    supports_amp=True,
    supports_chunked_loss=True,
    switches=(),
    switches_label="",
    # flash attention: our decoder calls F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # (frenzy_core/tracer.py), SDPA's flash backend, FlashAttention-2 (base._sdpa_flash, the default)
    # data parallel: plain DDP, whose measured link efficiencies (Sia's sync_time, gpus.py) already are exposed time;
    # ZeRO-3 / FSDP1 prefetch hides it (base._zero3_prefetch). Tensor parallel: no overlap.
)
