"""Fine-tuning terms: LoRA / DoRA adapters (their parameters and what they keep for backward) and the quantised
frozen base of QLoRA / LLM.int8 (its bytes per weight). `states.stage_model_states` trains only the adapters and
keeps the frozen base; `activations.layer_activations` adds the adapters' saved tensors to each layer.

>>> NF4_BYTES["nf4"]  # 4 bits + an fp32 absmax per 64 weights
0.5625
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from frenzy_core.memory.sizes import FP32_BYTES, MASK_BYTES
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import Recipe
from frenzy_core.training import PrecisionSetup, TrainingSpec


# --- adapters (peft LoRA / DoRA) -------------------------------------------------------------------------------------
def lora_parameters(model: ModelSpec, rank: int, targets: str, variant: str = "lora") -> int:
    """Adapter parameters of one layer: r x (in + out) per targeted linear (peft LoraLayer.update_layer: lora_A is
    in x r, lora_B r x out), DoRA's magnitude vector (out) too (peft dora.py DoraLinearLayer.update_layer:
    `nn.Parameter(weight_norm)`, one per output row). The head's adapter is `lora_head_parameters`.

    >>> from frenzy_core.models import ZOO
    >>> lora_parameters(ZOO["llama-3.1-8b"], 16, "attention")  # 16 x (8,192 + 5,120 + 5,120 + 8,192)
    425984
    >>> lora_parameters(ZOO["llama-3.1-8b"], 8, "q,v")  # 8 x (8,192 + 5,120)
    106496
    """
    from frenzy_core.training import lora_targets_set

    h, q, kv, ffn = model.hidden_size, model.q_dim, model.kv_dim, model.ffn
    chosen = lora_targets_set(targets)
    shapes = {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h)}
    shapes.update({"gate": (h, ffn), "up": (h, ffn), "down": (ffn, h)} if model.mlp_kind == "swiglu"
                  else {"up": (h, ffn), "down": (ffn, h)})
    picked = [shapes[n] for n in shapes if n in chosen]
    magnitude = sum(o for _, o in picked) if variant == "dora" else 0
    return rank * sum(i + o for i, o in picked) + magnitude


def lora_head_parameters(model: ModelSpec, training: TrainingSpec) -> int:
    """The LM head's adapter (lora_targets includes head): r x (h + V), DoRA + V."""
    if "head" not in training.lora_target_set:
        return 0
    dora = model.vocab_size if training.lora_variant == "dora" else 0
    return training.lora_rank * (model.hidden_size + model.vocab_size) + dora


@dataclass(frozen=True)
class _LoraLayerTerms:
    """Per-token bytes of one layer that LoRA changes: the linears' kept inputs (None: as full training) and what
    the adapters add in the attention block and in the MLP (`layer_activations` adds them to its groups)."""

    qkv_input: float | None
    fc1_input: float | None
    attention_extra: float
    mlp_extra: float
    o_input_kept: bool


def base_keeps_inputs(training: TrainingSpec) -> bool:
    """Whether a frozen quantised linear saves its input for backward (bitsandbytes/autograd/_functions.py at
    95f9af30: MatMul8bitLt.forward `ctx.tensors = (CAt, subA, A)`, A a view of the input; MatMul4Bit.forward
    `ctx.tensors = (None, B)`, but `(A, B)` before 0.43.2, commit 9e753741; torchao nf4_tensor.py at 36027d82
    LinearNF4.forward `ctx.save_for_backward(weight)` only). A frozen bf16 nn.Linear saves no input: autograd keeps
    mm's `self` only for a weight gradient."""
    return training.base_quant == "int8" or (training.base_quant in ("nf4", "nf4-dq")
                                              and training.quant_backend == "bitsandbytes-legacy")


def lora_layer_terms(model: ModelSpec, training: TrainingSpec, act: int, inner: int, autocast_inputs: bool,
                     separate_qkv: bool, separate_mlp: bool, zero_pad: bool = False,
                     cast_bytes: int = 0) -> _LoraLayerTerms:
    """What a LoRA layer keeps for backward, per token, by group of linears sharing an input.

    peft/tuners/lora/layer.py Linear.forward (huggingface/peft at 5d602fdb): `result = base_layer(x)` then
    `result + lora_B(lora_A(dropout(x))) * scaling`: lora_A keeps its input (x, or with lora_dropout > 0 the
    dropped copy, and nn.Dropout its 1-byte mask: one of each per adapter, every adapter has its own dropout), lora_B
    the r-wide lora_A output. The frozen base keeps x only when `base_keeps_inputs`. DoRA (peft/tuners/lora/dora.py
    DoraLinearLayer.forward): `(mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling`: the two
    products keep the base output and the LoRA output, out-wide each (the weight norm is detached: no saved tensor).
    Under autocast with separate projections each targeted linear keeps its own cast of x; a fused q|k|v (or
    gate|up) linear is one adapter with one dropout (Lightning-AI/litgpt lit_gpt/lora.py LoRAQKVLinear.forward at
    8641822b: `self.lora_dropout(x)` once, then a grouped conv1d for q, k and v). `zero_pad`: LitGPT's fused adapter
    also keeps its zero-padding source (`lora_zero_pad_source_bytes`). `cast_bytes`: PEFT's fp32 adapters cast x
    first (`adapter_input_cast_bytes`): each keeps its own copy, none the base's x, and lora_B's input is fp32.
    """
    targets = training.lora_target_set
    r, keeps, p = training.lora_rank, base_keeps_inputs(training), training.lora_dropout
    own = cast_bytes or act  # the element of what an adapter keeps of its own input and of lora_A's output
    dropped_copy = (own + MASK_BYTES) if p > 0 else 0  # per element of one adapter's input: dropout output + mask
    kept_copy = dropped_copy or cast_bytes  # an adapter's own copy of its input, per element
    widths = {"q": model.q_dim, "k": model.kv_dim, "v": model.kv_dim, "o": model.hidden_size, "gate": inner,
              "up": inner, "down": model.hidden_size}
    mlp_names = ("gate", "up", "down") if model.mlp_kind == "swiglu" else ("up", "down")
    h = model.hidden_size

    def group_input(names, separate: bool) -> float:
        """Bytes per token kept of the input x shared by `names` (the adapters' own x, or the base's)."""
        hit = [n for n in names if n in targets]
        copies = len(hit) if (separate and autocast_inputs and len(names) > 1) else 1
        if keeps:
            copies = max(copies, 1)
        elif not hit or kept_copy:
            copies = 0
        # one fused linear (GPT-2 c_attn, LitGPT's LoRAQKVLinear: `self.lora_dropout(x)` once) has one dropout
        own_copies = len(hit) if separate else min(len(hit), 1)
        return act * h * copies + kept_copy * h * own_copies

    def adapters(names) -> float:
        """Per targeted linear: lora_B's r-wide input; DoRA's products keep base_result and lora_result (out-wide)."""
        dora = training.lora_variant == "dora"
        return float(sum(own * r + (2 * act * widths[n] if dora else 0) for n in names if n in targets))

    attention_extra = adapters(("q", "k", "v", "o"))
    if zero_pad and not model.is_mla:
        attention_extra += lora_zero_pad_source_bytes(model, training, act)
    o_kept = ("o" in targets and not kept_copy) or keeps
    if "o" in targets and kept_copy:
        attention_extra += kept_copy * model.attention_output_dim
    mlp_extra = adapters(mlp_names)
    down_kept = ("down" in targets and not kept_copy) or keeps
    if "down" in targets and kept_copy:
        mlp_extra += kept_copy * inner
    if not down_kept:
        mlp_extra -= act * inner  # the down projection's input (GELU output, SwiGLU product), no longer kept
    fc1_names = ("gate", "up") if model.mlp_kind == "swiglu" else ("up",)
    return _LoraLayerTerms(qkv_input=None if model.is_mla else group_input(("q", "k", "v"), separate_qkv),
                           fc1_input=group_input(fc1_names, separate_mlp and model.mlp_kind == "swiglu"),
                           attention_extra=attention_extra, mlp_extra=mlp_extra, o_input_kept=o_kept)


def adapter_input_cast_bytes(recipe: Recipe, act: int, autocast_inputs: bool) -> int:
    """The element of the copy each LoRA adapter makes of its input, 0 where it takes x as it is.

    PEFT (`Recipe.fp32_lora_adapters`): peft 0.21.2 get_peft_model(..., autocast_adapter_dtype=True), the default,
    upcasts the adapters of a bf16 / fp16 base to fp32 (tuners_utils.py `_cast_adapter_dtype`), and LoRA's
    Linear.forward casts x to the adapter's dtype: a 4-byte copy per adapter when the base runs in bf16 without
    autocast. Under autocast (amp: fp32 params, fp32 x) nothing is cast by PEFT (autocast's casts are
    `autocast_inputs`)."""
    if recipe.fp32_lora_adapters and not autocast_inputs and act < FP32_BYTES:
        return FP32_BYTES
    return 0


def lora_zero_pad_source_bytes(model: ModelSpec, training: TrainingSpec, act: int) -> float:
    """Bytes per token LitGPT's fused q|k|v adapter keeps for its zero padding, in one layer.

    Lightning-AI/litgpt lit_gpt/lora.py at 8641822b, LoRAQKVLinear.forward: `after_B = self.conv1d(...)` is the
    (tokens, sum(qkv_shapes)) update of the adapted projections only (q: n_embd wide, k and v: kv_embd_size each);
    `zero_pad` returns it unchanged when q, k and v are all adapted, and otherwise scatters it into zeros with
    `result.index_copy(1, lora_ind, x.reshape(-1, sum(self.qkv_shapes)))`. IndexCopyBackward keeps that `source`
    (tools/autograd/derivatives.yaml, index_copy: `source: grad.index_select(dim, index).expand_as(source)`), in the
    compute dtype, until backward reaches the layer. finetune/lora.py adapts query and value: q_dim + kv_dim wide.

    >>> from frenzy_core.models import ZOO
    >>> lora_zero_pad_source_bytes(ZOO["llama-2-7b"], TrainingSpec(lora_rank=8, lora_targets="q,v"), 2)
    16384.0
    """
    adapted = [n for n in ("q", "k", "v") if n in training.lora_target_set]
    if not adapted or len(adapted) == 3:
        return 0.0  # nothing to pad: no adapter on the fused linear, or every part of it adapted
    widths = {"q": model.q_dim, "k": model.kv_dim, "v": model.kv_dim}
    return float(act * sum(widths[n] for n in adapted))


def lora_head_bytes_per_token(model: ModelSpec, training: TrainingSpec, act: int) -> float:
    """Bytes per token an adapter on the LM head adds (its input is already kept, `head_input`): lora_B's r-wide
    input; with dropout the dropped copy and mask (h wide); DoRA's two vocab-wide products."""
    if "head" not in training.lora_target_set:
        return 0.0
    extra = act * training.lora_rank
    if training.lora_dropout > 0:
        extra += (act + MASK_BYTES) * model.hidden_size
    if training.lora_variant == "dora":
        extra += 2 * act * model.vocab_size
    return float(extra)


# --- the quantised frozen base (QLoRA NF4, LLM.int8) ------------------------------------------------------------------
# bitsandbytes 4-bit (functional.quantize_4bit, blocksize 64): 4 bits per weight + an fp32 absmax per 64; with
# double quantisation (compress_statistics) the absmax is 8-bit with an fp32 absmax per 256 blocks (torchao
# to_nf4(block_size=64, scaler_block_size=256) stores the same: int8 scalers + one factor per 256 of them)
NF4_BYTES = {"nf4": 0.5 + 4 / 64, "nf4-dq": 0.5 + 1 / 64 + 4 / (64 * 256)}
# bitsandbytes LLM.int8 (nn/modules.py Int8Params: int8_vectorwise_quant): one int8 per weight and an fp32 scale
# (SCB) per output row; counted per weight as 4 / hidden_size (exact for the linears reading the residual width)
INT8_WEIGHT_BYTES = 1
INT8_ROW_SCALE_BYTES = 4


def quantised_bytes_per_weight(model: ModelSpec, base_quant: str) -> float:
    """Bytes per frozen linear weight under `base_quant` (NF4 / NF4-dq / int8 + its row scales)."""
    if base_quant == "int8":
        return INT8_WEIGHT_BYTES + INT8_ROW_SCALE_BYTES / model.hidden_size
    return NF4_BYTES[base_quant]


def frozen_weight_bytes(model: ModelSpec, ps: PrecisionSetup, base_quant: str, params, castable, last, t,
                        quant_head: bool = False):
    """Bytes of the frozen base on a stage: linears quantised (lm_head stays in the param dtype, transformers
    BitsAndBytesConfig llm_int8_skip_modules, unless `quant_head`: LitGPT's BitsandbytesPrecision converts every
    nn.Linear), everything else in the parameter dtype."""
    if base_quant == "none":
        return params * ps.param_bytes
    head = 0.0 if quant_head else np.where(last, model.vocab_size * model.hidden_size / t, 0.0)
    linears = castable - head
    return (params - linears) * ps.param_bytes + linears * quantised_bytes_per_weight(model, base_quant)
