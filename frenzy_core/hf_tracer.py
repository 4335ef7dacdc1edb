"""Trace the peak memory of the real Hugging Face `transformers` models, the way frenzy_core.tracer traces ours.

`trace_hf_peak(config, training)` builds the transformers class of `HF_ARCHITECTURES` (GPT-2, Llama, Qwen2/3,
Mistral, Gemma-2/3, Phi-3, OLMo-2; Mixtral, Qwen3-MoE and DeepSeek-V2/V3 on real tensors) from a config.json dict
(no weights), and runs the same two training steps as
`frenzy_core.tracer.trace_peak` (loss via `labels=`, AdamW, `zero_grad(set_to_none=True)`) under `FakeTensorMode`
on device "cpu", counting live storages with the tracer's own tracker and optimizers. What the CPU build does
differently from CUDA is neutralised so that the count is what a GPU would allocate (docs/memory.md, "Tracing the
Hugging Face models"):

1. dropout: CUDA's `F.dropout` runs the fused `native_dropout` (1-byte mask); CPU multiplies by a noise tensor;
2. autocast: CUDA runs softmax, log_softmax, pow, exp, rsqrt, layer_norm, sum, ... in fp32 (aten/src/ATen/
   autocast_mode.h, AT_FORALL_FP32 / AT_FORALL_FP32_SET_OPT_DTYPE), CPU autocast keeps them in bf16;
3. SDPA: CUDA flash keeps its dropout mask as a Philox seed; CPU SDPA with dropout falls back to the math path;
4. HF's mask decision: with fake tensors `find_packed_sequence_indices` cannot read the position ids and assumes
   packed sequences, so the causal mask is materialised where real tensors pass `is_causal=True`.

torch and transformers are optional: this module imports without them.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING

from frenzy_core import tracer
from frenzy_core.errors import SpecError
from frenzy_core.models import ModelSpec, model_from_hf_config

if TYPE_CHECKING:  # pragma: no cover
    from frenzy_core.training import TrainingSpec

# model_type -> the transformers class the trace builds (AutoModelForCausalLM resolves the same ones)
HF_ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
}
# MoE models are traced on real CPU tensors: their experts run torch._grouped_mm (transformers
# integrations/moe.py grouped_mm_experts_forward), whose fake-tensor kernel checks the dtypes a CUDA kernel needs.
# The routing does not move the peak (tokens x top-k rows are sorted and multiplied whatever the experts chosen:
# seeds 0-2 give the same bytes), so real tensors are deterministic here; this many parameters at most.
REAL_TENSOR_MAX_PARAMETERS = 400_000_000
MLA_TYPES = ("deepseek_v2", "deepseek_v3")
# The config fields that carry dropout probabilities in each family (GPT-2: embeddings, residual, attention;
# Llama/Qwen2/Mistral: attention only, they have no other dropout).
DROPOUT_FIELDS = {
    "gpt2": ("embd_pdrop", "resid_pdrop", "attn_pdrop"),
    "llama": ("attention_dropout",),
    "qwen2": ("attention_dropout",),
    "mistral": ("attention_dropout",),
    "qwen3": ("attention_dropout",),
    "gemma2": ("attention_dropout",),
    "gemma3_text": ("attention_dropout",),
    "phi3": ("attention_dropout", "resid_pdrop", "embd_pdrop"),
    "olmo2": ("attention_dropout",),
    "mixtral": ("attention_dropout",),
    "qwen3_moe": ("attention_dropout",),
    "deepseek_v2": ("attention_dropout",),
    "deepseek_v3": ("attention_dropout",),
}
ATTENTION_IMPLEMENTATION = {"eager": "eager", "flash": "sdpa"}
# The CPU/CUDA differences cuda_semantics() neutralises (module docstring, items 1-4); all of them by default.
NEUTRALISATIONS = frozenset({"dropout", "autocast", "sdpa", "mask"})

# CUDA autocast policies for ops that CPU autocast leaves alone, read from aten/src/ATen/autocast_mode.h
# (AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE, AT_FORALL_LOWER_PRECISION_FP) and
# autocast_mode.cpp (TORCH_LIBRARY_IMPL(aten, Autocast, m)); ops CPU autocast already handles are skipped at
# registration time.
CUDA_AUTOCAST_FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm", "native_layer_norm",
    "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
    "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp",
)
CUDA_AUTOCAST_FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList",
)
CUDA_AUTOCAST_PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "tensordot", "scatter_add",
)
# bf16 on CUDA but not on CPU: a traced model must not call them (the trace would keep them fp32), so they raise.
CUDA_AUTOCAST_LOWER_ONLY = ("addmv", "addr", "einsum", "mv", "chain_matmul", "linalg_multi_dot")
# CPU autocast policies CUDA does not have (autocast_mode.cpp, TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)): cat, stack
# and index_copy "promote" by copying inputs; cross_entropy_loss casts its input to fp32 (a copy), where CUDA
# decomposes it into log_softmax(dtype=float32) + nll_loss. These fall through, as on CUDA.
CPU_ONLY_AUTOCAST = ("cat", "stack", "index_copy", "index_copy.dimname", "cross_entropy_loss")


def trace_hf_peak(
    config: dict, training: TrainingSpec, fake: bool = True, neutralise: frozenset[str] = NEUTRALISATIONS
) -> tracer.TraceResult:
    """Peak bytes of `tracer.TRAINING_STEPS` training steps of the transformers model that `config` describes.

    `config` is a config.json dict (a model_type of HF_ARCHITECTURES; MoE ones need fake=False); `training` gives the batch, the
    precision (amp: fp32 params + bf16 autocast; bf16-master: Megatron-style masters, as in frenzy_core.tracer),
    the optimizer, eager or flash (SDPA) attention and the dropout probability set on every dropout of the model.
    `fake=False` runs real CPU tensors (tiny models only); `neutralise` names the CPU/CUDA differences to remove
    (a subset of NEUTRALISATIONS: less only to measure what each one changes). Example: TraceResult(peak_bytes=..., peak_phase=
    "step2:backward", torch_version="2.13.0+cpu", steps=2).
    """
    torch = tracer._import_torch()
    transformers = _import_transformers()
    _check(config, training, fake)
    b = training.micro_batch
    accumulation = training.global_batch // b

    from torch._subclasses.fake_tensor import FakeTensorMode

    tracker = tracer._make_tracker(torch)()
    fake_mode = FakeTensorMode() if fake else None
    with contextlib.ExitStack() as stack:
        if fake_mode is not None:
            stack.enter_context(fake_mode)
        stack.enter_context(cuda_semantics(torch, transformers, neutralise))
        stack.enter_context(tracker)
        _run_hf_steps(torch, transformers, tracker, config, training, b, accumulation)
    return tracer.TraceResult(tracker.peak, tracker.peak_phase, torch.__version__, tracer.TRAINING_STEPS)


def model_spec_of(config: dict) -> ModelSpec:
    """The ModelSpec our predictor reads for this config (frenzy_core.models.model_from_hf_config)."""
    return model_from_hf_config(config, name=config.get("_name_or_path"))


def build_hf_config(torch, transformers, config: dict, training: TrainingSpec):
    """The transformers config object: `config` plus the training's dropout, attention kind and no KV cache."""
    mtype = config["model_type"]
    fields = {k: v for k, v in config.items() if k not in ("model_type", "_name_or_path")}
    for field in DROPOUT_FIELDS[mtype]:
        fields[field] = training.dropout
    fields["use_cache"] = False  # training: no KV cache (what Trainer and gradient checkpointing set)
    hf_config = transformers.AutoConfig.for_model(mtype, **fields)
    hf_config._attn_implementation = ATTENTION_IMPLEMENTATION[training.attention]
    return hf_config


def build_hf_model(torch, transformers, config: dict, training: TrainingSpec):
    """The model, in fp32 (amp) or bf16 (bf16-master) parameters, in training mode."""
    hf_config = build_hf_config(torch, transformers, config, training)
    dtype = torch.float32 if training.precision == "amp" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config, dtype=dtype, attn_implementation=hf_config._attn_implementation
    )
    model.train()
    return model


def _import_transformers():
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("frenzy_core.hf_tracer needs transformers: pip install 'frenzy-planner[hf]'") from err
    return transformers


def _check(config: dict, training: TrainingSpec, fake: bool = True) -> None:
    if not isinstance(config, dict) or config.get("model_type") not in HF_ARCHITECTURES:
        got = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise SpecError("model_type", f"the HF tracer builds {', '.join(HF_ARCHITECTURES)}; got {got!r}")
    model = model_spec_of(config)  # validates the shape, names the bad field
    if model.is_moe and fake:
        raise SpecError("fake", "an MoE model's experts run torch._grouped_mm, whose fake-tensor kernel refuses "
                                "CPU dtypes: trace it with fake=False (real CPU tensors, small models)")
    if model.is_moe and training.precision != "bf16-master":
        # torch 2.13 registers no autocast kernel for _grouped_mm (CUDA or CPU): under amp the CPU build
        # multiplies fp32 experts where CUDA's bf16-only kernel would refuse them, so the trace would not be a GPU's
        raise SpecError("precision", "MoE models are traced with bf16 parameters only (precision bf16-master): "
                                     "_grouped_mm has no autocast policy")
    if not fake and (parameters := model.parameter_count()) > REAL_TENSOR_MAX_PARAMETERS:
        raise SpecError("model", f"{parameters:,} parameters on real CPU tensors; at most "
                                 f"{REAL_TENSOR_MAX_PARAMETERS:,} (narrow the model: fewer layers, experts or vocab)")
    if config["model_type"] in MLA_TYPES and training.attention == "flash":
        # MLA's q/k head dim (nope + rope) is not v's: CUDA SDPA cannot run flash and takes the memory-efficient
        # kernel, the CPU build its math fallback with s x s scores; the trace would not be a GPU's
        raise SpecError("attention", "DeepSeek's MLA (q/k head dim != v head dim) runs a different SDPA kernel on "
                                     "CPU than on CUDA: trace it with eager")
    if model.position_kind == "learned" and training.seq_len > model.max_positions:
        raise SpecError("seq_len", f"{training.seq_len} exceeds the model's max_positions ({model.max_positions})")
    if training.global_batch % training.micro_batch:
        raise SpecError("global_batch", f"{training.global_batch} is not divisible by micro_batch {training.micro_batch}")
    if training.zero_stage or training.distributed_optimizer or training.recompute != "none" or training.sequence_parallel:
        raise SpecError("training", "the HF tracer runs one unsharded GPU without recomputation (zero_stage=0)")
    if config["model_type"] == "gemma2" and training.attention == "flash":
        # modeling_gemma2.py Gemma2PreTrainedModel: _supports_sdpa = False (SDPA cannot soft-cap the scores)
        raise SpecError("attention", "transformers' Gemma2 has no SDPA path (soft-capping); trace it with eager")
    if training.lora_rank:
        _check_lora(config, training, fake)
    elif training.precision not in ("amp", "bf16-master"):
        raise SpecError("precision", f"the HF tracer supports amp and bf16-master, got {training.precision!r}")
    if training.optimizer not in ("adamw", "adamw-fused"):
        raise SpecError("optimizer", f"the HF tracer supports adamw and adamw-fused, got {training.optimizer!r}")


# PEFT LoRA (training.lora_rank): the module names of LORA_LINEARS in the Llama-style families
PEFT_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
                "down": "down_proj", "head": "lm_head"}
PEFT_MODEL_TYPES = ("llama", "qwen2", "mistral", "qwen3")


def _check_lora(config: dict, training: TrainingSpec, fake: bool) -> None:
    """What the PEFT trace supports: a bf16 base without autocast (get_peft_model's default fp32 adapters), real
    tensors (PEFT moves each new adapter to its base layer's device with Module.to, which fake tensors cannot swap),
    Llama-style module names, plain LoRA without a quantised base."""
    if config["model_type"] not in PEFT_MODEL_TYPES:
        raise SpecError("model_type", f"the PEFT trace names Llama-style linears; use one of {PEFT_MODEL_TYPES}")
    if training.precision != "bf16":
        raise SpecError("precision", "the PEFT trace runs a bf16 base without autocast: precision bf16")
    if fake:
        raise SpecError("fake", "PEFT's adapter placement cannot run on fake tensors: trace LoRA with fake=False")
    if training.base_quant != "none" or training.lora_variant != "lora":
        raise SpecError("base_quant", "the PEFT trace runs plain LoRA on an unquantised base")


def _peft_model(torch, model, training: TrainingSpec):
    """peft.get_peft_model with the training's rank, targets and dropout (lora_alpha 2r: it scales, it stores
    nothing), autocast_adapter_dtype left at its default (True: fp32 adapters on the bf16 base)."""
    try:
        import peft
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("tracing LoRA needs peft: pip install peft") from err
    targets = sorted(PEFT_MODULES[n] for n in training.lora_target_set)
    config = peft.LoraConfig(r=training.lora_rank, lora_alpha=2 * training.lora_rank, target_modules=targets,
                             lora_dropout=training.lora_dropout, bias="none", task_type="CAUSAL_LM")
    return peft.get_peft_model(model, config)


def _run_hf_steps(torch, transformers, tracker, config: dict, training: TrainingSpec, b: int, accumulation: int) -> None:
    """Trainer's loop, minimal: `loss = model(input_ids, labels=input_ids).loss` (HF shifts the labels inside
    ForCausalLMLoss), the output object dropped before backward as `Trainer.compute_loss` does."""
    s, amp = training.seq_len, training.precision == "amp"
    vocab = config["vocab_size"]
    with torch.device("cpu"):
        model = build_hf_model(torch, transformers, config, training)
        if training.lora_rank:
            model = _peft_model(torch, model, training)
    optimizer = tracer._make_optimizer(torch, model, training, amp)
    for step in range(1, tracer.TRAINING_STEPS + 1):
        for _ in range(accumulation):
            tracker.phase = f"step{step}:forward"
            tokens = torch.randint(0, vocab, (b, s))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=tokens, labels=tokens).loss
            tracker.phase = f"step{step}:backward"
            (loss / accumulation).backward()
            del loss, tokens
        tracker.phase = f"step{step}:optimizer-step"
        optimizer.step()
        tracker.phase = f"step{step}:zero-grad"
        optimizer.zero_grad()


# --- making the CPU build allocate what CUDA allocates ----------------------------------------------------------
@contextlib.contextmanager
def cuda_semantics(torch, transformers, neutralise: frozenset[str] = NEUTRALISATIONS):
    """Within this block, CPU runs dropout, autocast, SDPA and HF's mask decision the way CUDA runs them."""
    from torch.overrides import TorchFunctionMode

    unknown = set(neutralise) - NEUTRALISATIONS
    if unknown:
        raise SpecError("neutralise", f"unknown {sorted(unknown)}; choose from {sorted(NEUTRALISATIONS)}")

    F = torch.nn.functional

    class CudaKernels(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is F.dropout and "dropout" in neutralise:
                return _fused_dropout(torch, func, *args, **kwargs)
            if func is F.scaled_dot_product_attention and "sdpa" in neutralise:
                # CUDA flash regenerates its dropout mask from a Philox seed: dropout costs no memory there, while
                # CPU SDPA with dropout_p > 0 falls back to the math path (stores the s x s scores).
                if len(args) > 4:
                    args = (*args[:4], 0.0, *args[5:])
                kwargs["dropout_p"] = 0.0
            return func(*args, **kwargs)

    with contextlib.ExitStack() as stack:
        if "autocast" in neutralise:
            stack.enter_context(_cuda_autocast_policies(torch))
        if "mask" in neutralise:
            stack.enter_context(_real_tensor_mask_decision(transformers))
        stack.enter_context(CudaKernels())
        yield


def _fused_dropout(torch, func, input, p=0.5, training=True, inplace=False):
    """aten/src/ATen/native/Dropout.cpp `dropout`: on CUDA, 0 < p < 1 in training runs `native_dropout` (output +
    1-byte bool mask); otherwise the plain path (identity for p = 0 or eval)."""
    if training and 0.0 < p < 1.0 and input.numel() > 0 and not inplace:
        return torch.native_dropout(input, p, True)[0]
    return func(input, p, training, inplace)


@contextlib.contextmanager
def _cuda_autocast_policies(torch):
    """Register CUDA's autocast casts as AutocastCPU kernels for the ops CPU autocast does not cover."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        for name in CUDA_AUTOCAST_FP32:
            _register(torch, lib, name, _fp32_kernel)
        for name in CUDA_AUTOCAST_FP32_SET_OPT_DTYPE:
            _register(torch, lib, name, _fp32_set_opt_dtype_kernel)
        for name in CUDA_AUTOCAST_PROMOTE:
            _register(torch, lib, name, _promote_kernel)
        for name in CUDA_AUTOCAST_LOWER_ONLY:
            _register(torch, lib, name, _unsupported_kernel)
        with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point here
            warnings.simplefilter("ignore", UserWarning)
            for name in CPU_ONLY_AUTOCAST:
                lib.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")
        yield
    finally:
        lib._destroy()


def _register(torch, lib, name: str, make_kernel) -> None:
    qualified = "aten::" + name
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "AutocastCPU"):
        return  # CPU autocast has its own policy for this op (the same fp32 cast, or a lower-precision one)
    op_name, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, op_name), overload or "default")
    lib.impl(name, make_kernel(torch, op), "AutocastCPU")


def _no_autocast(torch):
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU))


def _eligible(torch, x) -> bool:
    # autocast_mode.h is_eligible: a floating-point tensor that is not double
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64


def _cast(torch, x, dtype):
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(torch, v, dtype) for v in x)
    return x.to(dtype) if _eligible(torch, x) and x.dtype != dtype else x


def _fp32_kernel(torch, op):
    def kernel(*args, **kwargs):  # CastPolicy::fp32: every eligible input cast to fp32
        with _no_autocast(torch):
            return op(*_cast(torch, args, torch.float32), **{k: _cast(torch, v, torch.float32) for k, v in kwargs.items()})

    return kernel


def _fp32_set_opt_dtype_kernel(torch, op):
    position = [a.name for a in op._schema.arguments].index("dtype")

    def kernel(*args, **kwargs):  # CastPolicy::fp32_set_opt_dtype: dtype=float32 unless given (no input copy)
        with _no_autocast(torch):
            if args and _eligible(torch, args[0]):
                if len(args) > position:
                    if args[position] is None:
                        args = (*args[:position], torch.float32, *args[position + 1 :])
                elif kwargs.get("dtype") is None:
                    kwargs["dtype"] = torch.float32
            return op(*args, **kwargs)

    return kernel


def _promote_kernel(torch, op):
    def kernel(*args, **kwargs):  # CastPolicy::promote: every eligible input cast to the widest floating type
        floats = [a for a in (*args, *kwargs.values()) if _eligible(torch, a)]
        widest = max((a.dtype for a in floats), key=lambda d: torch.finfo(d).bits, default=None)
        with _no_autocast(torch):
            if widest is None:
                return op(*args, **kwargs)
            return op(*_cast(torch, args, widest), **{k: _cast(torch, v, widest) for k, v in kwargs.items()})

    return kernel


def _unsupported_kernel(torch, op):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"{op} runs in bf16 under CUDA autocast but not under CPU autocast; "
                           "frenzy_core.hf_tracer refuses to trace it rather than count it in the wrong dtype")

    return kernel


@contextlib.contextmanager
def _real_tensor_mask_decision(transformers):
    """transformers.masking_utils.find_packed_sequence_indices reads the position ids to detect packed sequences;
    it cannot read fake tensors and then assumes packing, which materialises a (b, 1, s, s) mask. Every row the
    tracer feeds is one sequence at positions 0..s-1, for which the real-tensor answer is None (no packing): give
    that answer for the duration of the trace, then restore the function."""
    masking = transformers.masking_utils
    original = masking.find_packed_sequence_indices
    masking.find_packed_sequence_indices = _one_sequence_per_row
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = original


def _one_sequence_per_row(position_ids):
    return None
