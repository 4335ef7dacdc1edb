"""What one training stack is to the planner: its memory recipe, its speed terms, what it can run, its refusals.

A `Framework` is a frozen value; each stack's module (pytorch, hf, megatron, fsdp2, deepspeed, and unknown, the band
over them) builds one, and frenzy_core.frameworks registers them. Code outside this package asks the value
(`fw.supports_cp`, `fw.dp_overlap_default(training)`, `fw.recipe`), never the name.

A `Recipe` is the memory half: the terms where a stack keeps a tensor alive that the plain-PyTorch model counts
differently (docs/memory.md, "Framework recipes"). Everything the stacks share (weights, Adam states, saved linear
inputs, flash attention, the 1F1B schedule) lives once in frenzy_core.memory. No term is fitted to a measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from frenzy_core.errors import SpecError
from frenzy_core.limits import DEFAULT_TOKENS
from frenzy_core.precision import PRECISIONS, PrecisionSetup, with_run_switches

FP32_BYTES, BF16_BYTES, MASK_BYTES = 4, 2, 1


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
    # SwiGLU as one autograd function that saves only its input, fc1's 2 x inner output (Megatron bias_swiglu_impl):
    # no SiLU output kept beside it; the product is what the down projection keeps
    fused_swiglu: bool = False
    # DeepSpeed ZeRO's step flattens this rank's gradient partition (a param-dtype copy) and casts it to fp32 for the
    # optimizer (stage_1_and_2.py step(); stage3.py _prepare_fp32_grad_for_sub_group)
    zero_fp32_grad_partition: bool = False
    zero12_grads_freed_in_step: bool = False  # ZeRO-1/2 free every gradient in step(): a new step starts with none
    zero3_persistent_bucket: bool = False  # ZeRO-3 allocates its gradient bucket once, alive through the step too
    sub_group_elements: int = 0  # ZeRO-3 casts and steps this many elements of the partition at a time (0: all)
    zero3_no_gather_unsharded: bool = False  # ZeRO-3 over one rank: the partition is the parameter, nothing gathered
    # (TrainingSpec.precision, setup) pairs where this stack holds other bytes per parameter than PRECISIONS says
    # (FSDP2's fp32 shards, DeepSpeed's bf16 gradients); each stack's module cites the code
    precision_overrides: tuple[tuple[str, PrecisionSetup], ...] = field(default=(), repr=False)
    # torchtune with loss_chunks > 1: the LM head runs chunk by chunk (TransformerDecoder.chunked_output), the recipe
    # holds the logit chunks until the loss has run, and the head's weight gradient is summed chunk by chunk
    # (memory.loss held_logit_chunks_bytes_per_logit, chunked_head_gradient_bytes)
    chunked_output_head: bool = False
    # torchtune with compile: the recipes compile the loss apart (training/_compile.py compile_loss): a chunked loss's
    # compute_cross_entropy in place (both single-device recipes), a plain loss only where the recipe keeps the
    # compiled module (the LoRA recipe; the full one discards compile_loss's return value). memory.loss
    # compiled_cross_entropy says when, loss_bytes_per_logit what Inductor's cross-entropy keeps
    compiles_loss: bool = False
    # LitGPT (lit_gpt/lora.py, lit_gpt/model.py, lit_gpt/rmsnorm.py, finetune/lora.py at 8641822b; frameworks/litgpt.py):
    lora_qkv_zero_pad: bool = False  # LoRAQKVLinear.zero_pad's index_copy keeps its source (some of q/k/v adapted)
    gqa_reshape_copies: bool = False  # with 1 < kv groups < heads, q/k/v reshapes copy and k, v widen to every head
    separate_mlp_linears: bool = False  # gate and up are separate LoRA linears (one dropout each), the QKV stays fused
    rmsnorm_weight_keeps_normed: bool = False  # RMSNorm's `weight * x_normed` in bf16 keeps x_normed if weight trains
    logits_held_through_backward: bool = False  # the training loop holds the logits (chunks) through all of backward
    # packed sequences (TrainingSpec.packed) build a (micro-batch, 1, s, s) bool document mask that SDPA keeps
    # (transformers masking_utils; memory.pipeline.packed_mask_bytes); False: cu_seqlens or a block mask, no s x s
    packed_mask_materialised: bool = False
    # FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel, TrainingSpec.fsdp 1): each wrapped unit's parameters are
    # one FlatParameter, whose gradient spans every parameter in it, frozen ones too (use_orig_params); no_sync keeps
    # the unsharded flat gradients through gradient accumulation (docs/memory.md, "FSDP1"; frenzy_core/frameworks/fsdp1.py)
    fsdp1_flat_parameters: bool = False
    # a tied embedding / head matrix receives two gradients, the head's early in backward and the lookup's last; the
    # engine sums them in the AccumulateGrad node's InputBuffer before `.grad` exists (plain `.grad` stacks: True;
    # memory.states.tied_embedding_gradient_bytes)
    tied_gradients_meet_in_input_buffer: bool = False
    # LoRA adapters in fp32 on a 16-bit base (PEFT's autocast_adapter_dtype=True): their states are fp32 and each
    # casts its input (memory.adapters.adapter_input_cast_bytes)
    fp32_lora_adapters: bool = False
    # fp8 linears (TrainingSpec.fp8_linears) as Transformer Engine runs them: each linear keeps the fp8 cast of its
    # input for the weight gradient and the step caches every weight's fp8 cast and transpose across micro-batches
    # (memory.activations._with_fp8_linears, memory.copies.fp8_weight_cache_bytes). False: torchao's Float8Linear,
    # whose autograd function saves its bf16 operands and casts them again in backward (torchao/float8/
    # float8_linear.py matmul_with_hp_or_float8_args.forward: `ctx.save_for_backward(input_hp, weight_hp_t)`): fp8
    # changes no saved tensor and caches no weight; its casts live only while one linear's GEMM runs
    fp8_saves_casts: bool = True

    def precision_setup(self, precision: str, training: Any = None) -> PrecisionSetup:
        """The bytes per parameter this framework holds for a `TrainingSpec.precision` (and, given the run's
        TrainingSpec, what its Megatron switches change: `precision.with_run_switches`)."""
        ps = PRECISIONS[precision]
        for name, setup in self.precision_overrides:
            if name == precision:
                ps = setup
                break
        return with_run_switches(ps, training)


def _never(training: Any) -> bool:
    return False


def _never_p2p(training: Any, vp: Any) -> Any:
    return vp < 0  # False, broadcast over a vp array


def _zero3_prefetch(training: Any) -> bool:
    """ZeRO-3 prefetches the next layer's parameters and reduce-scatters behind compute (FSDP1's backward prefetch;
    DeepSpeed's overlap_comm defaults to stage == 3, deepspeed/runtime/zero/config.py overlap_comm_valid)."""
    return training.zero_stage == 3


def _sdpa_flash(training: Any, compute_capability: tuple[int, int]) -> str:
    """PyTorch's F.scaled_dot_product_attention, whose flash backend is FlashAttention-2's sm80 kernels, on A100
    and H100 alike (aten/src/ATen/native/transformers/cuda/flash_attn/kernels/flash_fwd_hdim128_bf16_causal_sm80.cu
    and its siblings, vendored from Dao-AILab/flash-attention v2), and comes first in the default priority: cuDNN attention, first on H100 in torch 2.5.0, was made opt-in for 2.5.1 (pytorch/pytorch#138522,
    "Make CuDNN Attention Opt in"), and returns first only where the bundled cuDNN is newer than 9.15
    (sdp_utils.cpp check_prefer_cudnn_attention, pytorch/pytorch@001f694a, sm90 / sm100): torch 2.5.1 to the 2.10
    wheels, the torch of the published runs perf.py is checked against, run FlashAttention-2."""
    return "flash-attn-2"


def torch_optimizer_kernel(training: Any) -> str:
    """torch.optim as a script builds it with its defaults on CUDA: AdamW and SGD run their foreach kernels
    (torch/optim/optimizer.py _default_to_fused_or_foreach: `fused` stays off unless asked for, `foreach` is on when
    every parameter is a CUDA tensor); `adamw-fused` asks for fused=True; bitsandbytes' 8-bit AdamW is one kernel."""
    return "foreach" if training.optimizer in ("adamw", "sgd") else "fused"


def fused_optimizer_kernel(training: Any) -> str:
    """A stack that steps with one fused kernel per chunk of parameters, whatever the optimizer's name."""
    return "fused"


def _eager(training: Any) -> bool:
    """Eager PyTorch: each aten op of a norm, activation, residual add or rotary runs as its own kernel, reading its
    inputs from HBM and writing its output back (perf.elementwise_bytes_per_token's eager counts)."""
    return False


def _no_caveat(training: Any, par: Any) -> str | None:
    return None


def _as_is(recipe: Recipe, training: Any) -> Recipe:
    return recipe


@dataclass(frozen=True)
class Framework:
    """One training stack: what `TrainingSpec.framework` names.

    >>> from frenzy_core.frameworks import get
    >>> fw = get("megatron"); fw.supports_cp, fw.supports_uneven_stages, fw.export_format, fw.recipe.name
    (True, True, 'megatron', 'megatron')
    """

    name: str  # the TrainingSpec.framework value
    describes: str  # the stack, in words
    recipe: Recipe | None  # its memory terms; None: unknown, whose memory is the band over every stack's recipe
    export_format: str | None  # the export.FORMATS entry its users reach for first (None: no default)
    default_precision: str  # the CLI's --precision default for this stack
    # --- capabilities: what the planner enumerates and TrainingSpec accepts under this stack ---------------------
    supports_cp: bool  # context parallelism as ring attention (what memory/ and perf.py model)
    supports_vp: bool  # an interleaved 1F1B schedule the exports can launch (vp > 1)
    supports_uneven_stages: bool  # Megatron's uneven first / last pipeline stages
    supports_ep: bool  # expert parallelism (ep > 1) for MoE models
    # extra rule an expert-parallel split must meet under this stack, (model, training, d, t, c, e) -> bool array;
    # None: only the common one (e divides d x cp)
    experts_fit: Callable | None
    fully_shards: bool  # parameters always sharded (FSDP2 fully_shard = ZeRO-3): zero_stage 0 means 3
    zero_stages: tuple[int, ...]  # the TrainingSpec.zero_stage values it accepts
    supports_amp: bool  # has an autocast mode (TrainingSpec precision "amp")
    supports_chunked_loss: bool  # the loss can run over chunks of the logits (loss_chunks > 1)
    switches: tuple[str, ...]  # TrainingSpec fields only this stack reads (refused under the others)
    switches_label: str  # how the Model memory page names those switches ("" when there are none)
    # the FSDP implementations (TrainingSpec.fsdp: 1 FullyShardedDataParallel, 2 fully_shard) this stack shards
    # with at zero_stage 3, and the one TrainingSpec.fsdp 0 means there (0: neither, the generic ZeRO-3 terms)
    fsdp_versions: tuple[int, ...] = ()
    fsdp_default: int = 0
    # --- speed terms (frenzy_core.perf) -------------------------------------------------------------------------
    # data-parallel communication hidden behind compute when TrainingSpec.overlap_dp_comm is None
    dp_overlap_default: Callable[[Any], bool] = _zero3_prefetch
    # tensor-parallel communication hidden behind the GEMMs when TrainingSpec.tp_comm_overlap is None
    tp_overlap_default: Callable[[Any], bool] = _never
    # pipeline point-to-point sends hidden behind the other chunks' compute, (training, vp array) -> bool array;
    # default off: the sends run in series with the stage's compute
    pp_overlap: Callable[[Any, Any], Any] = _never_p2p
    # the fused attention kernel flash attention runs on a GPU of this compute capability, (training, (major,
    # minor)) -> a perf.ATTENTION_KERNEL_TFLOPS kernel name ("flash-attn-2", "cudnn"); default: PyTorch SDPA's
    attention_kernel: Callable[[Any, tuple[int, int]], str] = _sdpa_flash
    # whether each chain of element-wise ops between two GEMMs (norm, activation / GLU, residual add, rotary) runs
    # as one fused kernel that reads its inputs once and writes its outputs once (Transformer Engine's fused
    # modules, torch.compile's Inductor), training -> bool; default: eager PyTorch, one kernel per aten op
    # (perf.elementwise_bytes_per_token)
    elementwise_fused: Callable[[Any], bool] = _eager
    # the optimizer step's kernel, training -> "foreach" (torch.optim's default multi-tensor ops, one pass over the
    # states per op) or "fused" (one pass reading and writing each tensor once): perf.optimizer_sweep_bytes
    optimizer_kernel: Callable[[Any], str] = torch_optimizer_kernel
    # --- validation messages (TrainingSpec raises them) ---------------------------------------------------------
    amp_refusal: str = ""  # precision amp under a stack without autocast
    chunked_loss_refusal: str = ""  # loss_chunks > 1 under a stack whose loss is not chunked
    zero_stage_refusal: str = ""  # a zero_stage outside zero_stages; {zero_stage} is filled in
    switch_refusal: str = ""  # one of `switches` under another stack; {field} and {framework} are filled in
    fsdp_refusal: str = ""  # a TrainingSpec.fsdp outside fsdp_versions; {fsdp} is filled in
    # a warning the Model memory page shows with this stack's figure, (training, par) -> text or None
    memory_caveat: Callable[[Any, Any], str | None] = _no_caveat
    # the recipe with the run's own settings (DeepSpeed's zero_optimization sizes), (recipe, training) -> Recipe
    tune_recipe: Callable[[Recipe, Any], Recipe] = _as_is

    @property
    def is_band(self) -> bool:
        """No recipe of its own: memory is the band over every known stack's recipe (framework unknown)."""
        return self.recipe is None

    def fsdp_version(self, training: Any) -> int:
        """The FSDP implementation a run shards with: 1 (FullyShardedDataParallel, FlatParameter), 2 (fully_shard),
        or 0 (not FSDP: unsharded, ZeRO-1/2, or this stack's generic ZeRO-3). `TrainingSpec.fsdp` where given, else
        `fsdp_default` when the parameters are sharded.

        >>> from frenzy_core.frameworks import get
        >>> from frenzy_core.training import TrainingSpec
        >>> get("litgpt").fsdp_version(TrainingSpec(framework="litgpt", precision="bf16", zero_stage=3))
        1
        >>> get("hf").fsdp_version(TrainingSpec(framework="hf", precision="amp", zero_stage=3))  # opt in: fsdp 1
        0
        """
        if not (training.zero_stage == 3 or self.fully_shards):
            return 0
        return getattr(training, "fsdp", 0) or self.fsdp_default

    def gathers_each_layer(self, training: Any) -> bool:
        """Whether parameters are gathered layer by layer (ZeRO-3 / FSDP): data-parallel traffic then hides behind
        the whole step's compute (perf.step_time_totals), not behind one micro-batch as Megatron's buckets do."""
        return training.zero_stage == 3 or self.fully_shards

    def export(self, model, training, plan, cluster, tokens: float = DEFAULT_TOKENS) -> str:
        """The launch file of `export_format` for `plan` (frenzy_core.export.export_plan)."""
        if self.export_format is None:
            raise SpecError("export", f"framework {self.name} has no default export; pick a format")
        from frenzy_core.export import export_plan  # imported here: export imports the planner, which imports us

        return export_plan(self.export_format, model, training, plan, cluster, tokens)
