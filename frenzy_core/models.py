"""Model specs: the shape of a decoder-only transformer, its exact parameter count, the zoo, HF config loading.

Exact counts follow the Hugging Face implementations (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, MixtralForCausalLM) so that `parameter_count()` equals `sum(p.numel() for p in model.parameters())`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from frenzy_core.errors import SpecError, from_validation_error
from frenzy_core.limits import (
    MAX_EXPERTS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_SPEC_FILE_BYTES,
    MODEL_LIMITS,
    Name,
    check_upper_limits,
    divisors,
    load_json,
    load_yaml,
    read_user_file,
    slug_name,
)

MlpKind = Literal["gelu", "swiglu"]
PositionKind = Literal["learned", "rotary"]
NormKind = Literal["layernorm", "rmsnorm"]
# Where each layer normalises (HF decoder layers): "pre" = before attention and before the MLP (GPT-2, Llama);
# "post" = on each sublayer's output before the residual add, no input norms (OLMo-2 `Olmo2DecoderLayer`);
# "sandwich" = both (Gemma-2/3 `Gemma2DecoderLayer`: input, post_attention, pre_feedforward, post_feedforward).
NormPlacement = Literal["pre", "post", "sandwich"]
# RMSNorm on queries and keys before RoPE: "head" = over head_dim, one weight shared by all heads (Qwen3, Gemma-3
# `q_norm = RMSNorm(head_dim)`); "projection" = over the whole q (k) projection (OLMo-2 `RMSNorm(heads x head_dim)`).
QkNorm = Literal["none", "head", "projection"]
# HF `hidden_act` names: gelu_new (GPT-2, an unfused tanh formula), gelu_pytorch_tanh (Gemma, one fused op), gelu, silu.
HiddenAct = Literal["gelu_new", "gelu_pytorch_tanh", "gelu", "silu", "relu"]

_POSITIVE_INTS = ("vocab_size", "hidden_size", "num_layers", "num_heads", "max_positions")
_OPTIONAL_POSITIVE_INTS = ("ffn_size", "expert_ffn_size", "head_size", "sliding_window", "q_lora_rank",
                           "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MLA_DIMS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# Upper bounds of the fields added for the newer families, next to limits.MODEL_LIMITS (same rationale).
_NEW_FIELD_LIMITS = {
    **{f: MAX_HIDDEN for f in ("head_size", "q_lora_rank", "kv_lora_rank", *_MLA_DIMS)},
    "sliding_window": MAX_SEQ_LEN, "full_attention_every": MAX_LAYERS, "first_k_dense": MAX_LAYERS,
    "num_shared_experts": MAX_EXPERTS,
}


class ModelSpec(BaseModel):
    """A decoder-only transformer, described the way its config.json describes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name = "custom"  # shown in tables, the CLI and launch files: limits.check_name's alphabet
    vocab_size: int  # V: rows of the embedding and the LM head; drives the logits term
    hidden_size: int  # h: width of the residual stream
    num_layers: int  # l: transformer blocks; pipeline stages split these
    num_heads: int  # a: query heads; tensor parallelism splits these
    num_kv_heads: int | None = None  # GQA: key/value heads (None = num_heads, plain multi-head attention)
    ffn_size: int | None = None  # MLP inner width (None = 4h, GPT-2's choice); MoE models: the dense layers' width
    mlp_kind: MlpKind = "gelu"  # gelu: 2 matrices; swiglu: gated, 3 matrices (gate, up, down; GeGLU for Gemma)
    tie_embeddings: bool = True  # GPT-2 shares the LM head with the embedding; Llama-2/3 do not
    position_kind: PositionKind = "learned"  # learned positions add max_positions x h parameters
    max_positions: int = 1024  # rows of the learned position table; the longest sequence it accepts
    norm_kind: NormKind = "layernorm"  # layernorm has weight + bias (2h), rmsnorm only a weight (h)
    bias: bool = True  # biases on every linear layer (GPT-2) or none (Llama)
    qkv_bias: bool | None = None  # Qwen2 keeps biases on q, k, v only (None = follow `bias`)
    num_experts: int = 0  # MoE: routed experts per MoE layer (0 = dense MLP)
    moe_top_k: int = 2  # MoE: routed experts each token is sent to
    expert_ffn_size: int | None = None  # MoE: inner width of one expert, HF `moe_intermediate_size` (None = ffn_size)
    # --- shapes of the newer families (defaults reproduce GPT-2 / Llama) ---
    head_size: int | None = None  # explicit head_dim (Gemma, Qwen3: not h / a); None = hidden_size / num_heads
    out_bias: bool | None = None  # bias on the attention output projection (None = follow `bias`; Llama's
    #                               attention_bias puts one on q, k, v and o)
    qk_norm: QkNorm = "none"  # RMSNorm on q and k (Qwen3, Gemma-3: per head; OLMo-2: whole projection)
    norm_placement: NormPlacement = "pre"  # pre (2 norms per layer), post (OLMo-2: 2), sandwich (Gemma-2/3: 4)
    hidden_act: HiddenAct | None = None  # None = the MLP kind's own: gelu_new for gelu (GPT-2), silu for swiglu
    fused_qkv: bool = False  # one q|k|v linear (GPT-2 c_attn, Phi-3 qkv_proj): one saved input, one bf16 copy
    fused_gate_up: bool = False  # one gate|up linear (Phi-3 gate_up_proj)
    sliding_window: int | None = None  # tokens a sliding-window layer attends to (None = every layer full)
    full_attention_every: int = 0  # with sliding_window: layers k-1, 2k-1, ... attend fully (Gemma-2: 2, Gemma-3:
    #                                 6); 0 = every layer slides (Mistral-7B-v0.1, Phi-3-mini)
    attn_logit_softcapping: float | None = None  # Gemma-2: scores -> cap x tanh(scores / cap) before the softmax
    final_logit_softcapping: float | None = None  # Gemma-2: logits -> cap x tanh(logits / cap) before the loss
    # Multi-head latent attention (DeepSeek-V2/V3 `DeepseekV3Attention`): kv_lora_rank set turns it on.
    q_lora_rank: int | None = None  # q: h -> q_lora_rank -> RMSNorm -> heads x (nope + rope); None = one q_proj
    kv_lora_rank: int | None = None  # compressed kv latent c_kv, cached and normalised, then expanded to k_nope, v
    qk_nope_head_dim: int | None = None  # per-head q/k width without position information
    qk_rope_head_dim: int | None = None  # per-head q/k width that gets RoPE (k's part is shared by all heads)
    v_head_dim: int | None = None  # per-head value width (attention output = heads x v_head_dim)
    num_shared_experts: int = 0  # DeepSeek: always-on experts, one MLP of width n x expert_ffn_size
    first_k_dense: int = 0  # MoE: the first k layers keep a dense MLP of ffn_size (DeepSeek `first_k_dense_replace`)

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        check_upper_limits(self, MODEL_LIMITS)
        check_upper_limits(self, _NEW_FIELD_LIMITS)
        for field in _POSITIVE_INTS:
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be a positive integer, got {getattr(self, field)}")
        for field in _OPTIONAL_POSITIVE_INTS:
            value = getattr(self, field)
            if value is not None and value <= 0:
                raise ValueError(f"{field} must be a positive integer (or null for the default), got {value}")
        mla_dims = {f: getattr(self, f) for f in _MLA_DIMS}
        if self.kv_lora_rank is not None:
            missing = [f for f, v in mla_dims.items() if v is None]
            if missing:
                raise ValueError(f"{missing[0]} is required with kv_lora_rank (multi-head latent attention)")
            if self.head_size is not None:
                raise ValueError("head_size must be null with kv_lora_rank: MLA's q/k head width is "
                                 "qk_nope_head_dim + qk_rope_head_dim")
        else:
            for field in ("q_lora_rank", *_MLA_DIMS):
                if getattr(self, field) is not None:
                    raise ValueError(f"{field} needs kv_lora_rank (multi-head latent attention); set both or neither")
        if self.head_size is None and self.kv_lora_rank is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must divide hidden_size ({self.hidden_size}); "
                f"allowed: {', '.join(str(d) for d in _divisors(self.hidden_size) if d <= 256)} "
                "(or give head_size explicitly)"
            )
        kv = self.kv_heads
        if kv <= 0 or self.num_heads % kv:
            raise ValueError(
                f"num_kv_heads ({kv}) must be a positive divisor of num_heads ({self.num_heads}); "
                f"allowed: {', '.join(str(d) for d in _divisors(self.num_heads))}"
            )
        if self.num_experts < 0:
            raise ValueError(f"num_experts must be 0 (dense) or positive, got {self.num_experts}")
        if self.num_experts and not 1 <= self.moe_top_k <= self.num_experts:
            raise ValueError(f"moe_top_k must be between 1 and num_experts ({self.num_experts}), got {self.moe_top_k}")
        for field in ("num_shared_experts", "first_k_dense"):
            value = getattr(self, field)
            if value < 0:
                raise ValueError(f"{field} must be 0 or positive, got {value}")
            if value and not self.num_experts:
                raise ValueError(f"{field} applies to MoE models only: set num_experts > 0 or {field} = 0")
        if self.first_k_dense > self.num_layers:
            raise ValueError(f"first_k_dense ({self.first_k_dense}) cannot exceed num_layers ({self.num_layers})")
        if self.full_attention_every < 0:
            raise ValueError(f"full_attention_every must be 0 (all layers slide) or positive, got "
                             f"{self.full_attention_every}")
        if self.full_attention_every and self.sliding_window is None:
            raise ValueError("full_attention_every needs sliding_window (the window of the other layers)")
        for field in ("attn_logit_softcapping", "final_logit_softcapping"):
            value = getattr(self, field)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{field} must be a positive finite number (or null for none), got {value}")
        if self.qk_norm != "none" and self.is_mla:
            raise ValueError("qk_norm must be none with kv_lora_rank: MLA normalises its q/kv latents instead")
        return self

    # --- derived shape -------------------------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank is not None

    @property
    def head_dim(self) -> int:
        """Per-head query/key width: head_size, MLA's nope + rope part, or h / a."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_size if self.head_size is not None else self.hidden_size // self.num_heads

    @property
    def value_head_dim(self) -> int:
        """Per-head value width (MLA's v_head_dim; otherwise head_dim)."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def q_dim(self) -> int:
        """Width of the Q projection: num_heads x head_dim (= h for GPT/Llama; 2h for Qwen3-0.6B)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K projection: kv_heads x head_dim (MLA: after kv_b_proj expands the latent)."""
        return self.kv_heads * self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of the V projection: kv_heads x value_head_dim (= kv_dim except for MLA)."""
        return self.kv_heads * self.value_head_dim

    @property
    def attention_output_dim(self) -> int:
        """Width of the attention context, the output projection's input: num_heads x value_head_dim."""
        return self.num_heads * self.value_head_dim

    @property
    def ffn(self) -> int:
        return self.ffn_size if self.ffn_size is not None else 4 * self.hidden_size

    @property
    def expert_ffn(self) -> int:
        return self.expert_ffn_size if self.expert_ffn_size is not None else self.ffn

    @property
    def has_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def has_out_bias(self) -> bool:
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def activation(self) -> str:
        """The MLP's activation as HF names it (`hidden_act`)."""
        if self.hidden_act is not None:
            return self.hidden_act
        return "gelu_new" if self.mlp_kind == "gelu" else "silu"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def norms_per_layer(self) -> int:
        """Hidden-size norms in one decoder layer: 2 (pre or post), 4 (sandwich)."""
        return 4 if self.norm_placement == "sandwich" else 2

    def is_moe_layer(self, layer: int) -> bool:
        """Layer `layer` (0-based) routes to experts (DeepSeek: layer >= first_k_dense_replace)."""
        return self.is_moe and layer >= self.first_k_dense

    def is_sliding_layer(self, layer: int) -> bool:
        """Layer `layer` (0-based) attends within sliding_window (HF `layer_types[layer] == "sliding_attention"`)."""
        if self.sliding_window is None:
            return False
        return not (self.full_attention_every and (layer + 1) % self.full_attention_every == 0)

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_sliding_layers(self) -> int:
        return sum(self.is_sliding_layer(i) for i in range(self.num_layers))

    # --- parameter counts ----------------------------------------------------------------------------------------
    def norm_parameters(self) -> int:
        """One hidden-size normalisation layer: weight (+ bias for LayerNorm)."""
        return 2 * self.hidden_size if self.norm_kind == "layernorm" else self.hidden_size

    def qk_norm_parameters(self) -> int:
        """The q_norm and k_norm weights of one layer (RMSNorm: a weight only)."""
        if self.qk_norm == "head":
            return 2 * self.head_dim
        if self.qk_norm == "projection":
            return self.q_dim + self.kv_dim
        return 0

    def attention_parameters(self) -> int:
        """One attention sublayer: its projections, q/k (or MLA latent) norms, and, for sandwich-norm layers, its
        post-attention norm, so that attention + MLP + 2 x norm_parameters() is a whole layer."""
        h = self.hidden_size
        if self.is_mla:
            attn = self._mla_parameters()
        else:
            qkv_out = self.q_dim + self.kv_dim + self.v_dim
            qkv = h * qkv_out + (qkv_out if self.has_qkv_bias else 0)
            attn = qkv + self.attention_output_dim * h + (h if self.has_out_bias else 0)
        post_norm = self.norm_parameters() if self.norm_placement == "sandwich" else 0
        return attn + self.qk_norm_parameters() + post_norm

    def _mla_parameters(self) -> int:
        # transformers/models/deepseek_v3/modeling_deepseek_v3.py `DeepseekV3Attention.__init__` (v5.24):
        # q_a_proj (+bias), q_a_layernorm, q_b_proj | q_proj; kv_a_proj_with_mqa (+bias), kv_a_layernorm, kv_b_proj;
        # o_proj (+bias). The biases follow attention_bias (qkv_bias / out_bias here).
        h, a = self.hidden_size, self.num_heads
        in_bias = self.has_qkv_bias
        if self.q_lora_rank is None:
            q = h * self.q_dim
        else:
            r = self.q_lora_rank
            q = h * r + (r if in_bias else 0) + r + r * self.q_dim
        kv_a_out = self.kv_lora_rank + self.qk_rope_head_dim
        kv_a = h * kv_a_out + (kv_a_out if in_bias else 0)
        kv_b = self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
        out = self.attention_output_dim * h + (h if self.has_out_bias else 0)
        return q + kv_a + self.kv_lora_rank + kv_b + out

    def _mlp_parameters(self, inner: int) -> int:
        h = self.hidden_size
        matrices = 3 if self.mlp_kind == "swiglu" else 2
        biases = ((matrices - 1) * inner + h) if self.bias else 0
        return matrices * h * inner + biases

    def _post_ffn_norm(self) -> int:
        return self.norm_parameters() if self.norm_placement == "sandwich" else 0

    def dense_mlp_parameters(self) -> int:
        """A dense MLP block (every layer of a dense model; the first_k_dense layers of an MoE model)."""
        return self._mlp_parameters(self.ffn) + self._post_ffn_norm()

    def _shared_and_router(self) -> int:
        # Router: a bias-free h x E linear (Mixtral `gate`, DeepSeek `DeepseekV3TopkRouter.weight`; V3's
        # e_score_correction_bias is a buffer, not a parameter, in transformers v5.24). Shared experts: one MLP of
        # width num_shared x expert_ffn (`DeepseekV3MoE.shared_experts`).
        shared = self._mlp_parameters(self.num_shared_experts * self.expert_ffn) if self.num_shared_experts else 0
        return shared + self.hidden_size * self.num_experts

    def routed_expert_parameters(self) -> int:
        """The routed experts of one MoE layer (what expert parallelism splits): num_experts x one expert MLP."""
        return self.num_experts * self._mlp_parameters(self.expert_ffn) if self.is_moe else 0

    def moe_mlp_parameters(self) -> int:
        """An MoE block: every routed expert, the shared experts and the router."""
        return self.num_experts * self._mlp_parameters(self.expert_ffn) + self._shared_and_router() + self._post_ffn_norm()

    def active_moe_mlp_parameters(self) -> int:
        """The MoE block's parameters one token touches: top-k routed experts, shared experts, router."""
        return self.moe_top_k * self._mlp_parameters(self.expert_ffn) + self._shared_and_router() + self._post_ffn_norm()

    def _per_layer(self, dense: int, moe: int) -> int | float:
        """The mean over layers of a per-layer count: exact (an int) when every layer is alike, otherwise the
        float total / num_layers, so that num_layers x it is the exact total (what memory/ and perf.py multiply)."""
        if not self.num_moe_layers:
            return dense
        if not self.num_dense_layers:
            return moe
        total = self.num_dense_layers * dense + self.num_moe_layers * moe
        return total // self.num_layers if total % self.num_layers == 0 else total / self.num_layers

    def mlp_parameters(self, layer: int | None = None) -> int | float:
        """MLP block of layer `layer`: dense, or all experts plus the router for MoE. Without `layer`, the mean
        over layers (dense-first MoE models differ per layer; see `_per_layer`)."""
        if layer is not None:
            return self.moe_mlp_parameters() if self.is_moe_layer(self._layer(layer)) else self.dense_mlp_parameters()
        return self._per_layer(self.dense_mlp_parameters(), self.moe_mlp_parameters() if self.is_moe else 0)

    def active_mlp_parameters(self, layer: int | None = None) -> int | float:
        """MLP parameters one token touches (top-k experts for MoE): what drives FLOPs. Mean over layers without
        `layer`."""
        if layer is not None:
            moe = self.is_moe_layer(self._layer(layer))
            return self.active_moe_mlp_parameters() if moe else self.dense_mlp_parameters()
        return self._per_layer(self.dense_mlp_parameters(), self.active_moe_mlp_parameters() if self.is_moe else 0)

    def layer_parameters(self, layer: int | None = None) -> int | float:
        """One decoder layer (`layer`, 0-based); without `layer`, the mean over layers (exact for uniform models)."""
        return self.attention_parameters() + self.mlp_parameters(layer) + 2 * self.norm_parameters()

    def max_layer_parameters(self) -> int:
        """The largest layer (what ZeRO-3 / FSDP must gather at once)."""
        return max(self.layer_parameters(i) for i in {0, self.num_layers - 1})

    def total_layer_parameters(self) -> int:
        """All decoder layers, exactly (dense-first MoE: k dense layers + (l - k) MoE layers)."""
        return self.layers_parameters(0, self.num_layers)

    def layers_parameters(self, start: int, stop: int) -> int:
        """Layers start, ..., stop - 1 exactly: what one pipeline stage holds (DeepSeek's first stage has the
        dense layers)."""
        if not 0 <= start <= stop <= self.num_layers:
            raise SpecError("layer", f"need 0 <= start <= stop <= {self.num_layers}, got {start}..{stop}")
        n = stop - start
        moe_layers = max(0, stop - max(start, self.first_k_dense)) if self.is_moe else 0
        per_layer = self.attention_parameters() + 2 * self.norm_parameters()
        moe = moe_layers * self.moe_mlp_parameters() if moe_layers else 0
        return n * per_layer + (n - moe_layers) * self.dense_mlp_parameters() + moe

    def total_active_layer_parameters(self) -> int:
        """Decoder-layer parameters one token touches, summed over all layers."""
        per_layer = self.attention_parameters() + 2 * self.norm_parameters()
        moe = self.num_moe_layers * self.active_moe_mlp_parameters() if self.is_moe else 0
        return self.num_layers * per_layer + self.num_dense_layers * self.dense_mlp_parameters() + moe

    def _layer(self, layer: int) -> int:
        if not 0 <= layer < self.num_layers:
            raise SpecError("layer", f"must be between 0 and {self.num_layers - 1}, got {layer}")
        return layer

    def embedding_parameters(self) -> int:
        """Token embedding plus learned positions (the first pipeline stage holds these)."""
        pos = self.max_positions * self.hidden_size if self.position_kind == "learned" else 0
        return self.vocab_size * self.hidden_size + pos

    def head_parameters(self) -> int:
        """Final norm plus an untied LM head (the last pipeline stage holds these)."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.hidden_size
        return self.norm_parameters() + head

    def parameter_count(self) -> int:
        """Exact number of parameters, as `sum(p.numel() for p in model.parameters())` counts them.

        >>> ZOO["gpt2"].parameter_count()
        124439808
        """
        return self.embedding_parameters() + self.total_layer_parameters() + self.head_parameters()

    def active_parameter_count(self) -> int:
        """Parameters used per token (differs from parameter_count only for MoE)."""
        return self.embedding_parameters() + self.total_active_layer_parameters() + self.head_parameters()

    def paper_weights(self) -> int:
        """The Frenzy paper's approximation W = Vh + l(12h^2 + 13h) (arXiv 2412.14479, Sec. IV-A)."""
        h = self.hidden_size
        return self.vocab_size * h + self.num_layers * (12 * h * h + 13 * h)


def beyond_trained_positions(model: ModelSpec, seq_len: int) -> str | None:
    """A warning when a rotary-position model is asked for a longer sequence than it was trained on (its config's
    `max_position_embeddings`), else None. The run fits and costs what the planner says, since rotary positions have
    no table, but the model has never seen those distances: quality drops past the trained context unless RoPE is
    rescaled (position interpolation, arXiv 2306.15595; YaRN, arXiv 2309.00071) and the model trained at that
    length. A learned position table cannot run past its rows at all (training.check_sequence refuses it)."""
    if model.position_kind != "rotary" or seq_len <= model.max_positions:
        return None
    return (f"sequence length {seq_len:,} is beyond the {model.max_positions:,} positions {model.name} was trained "
            f"on ({seq_len / model.max_positions:.1f}x): it runs and costs what is shown, but expect worse quality "
            "unless RoPE is rescaled for the longer context (position interpolation or YaRN) and the model is trained "
            "at that length")


def _divisors(n: int) -> list[int]:
    return divisors(n)


def make_model(**fields) -> ModelSpec:
    """Build a ModelSpec from user input; raises SpecError naming the bad field."""
    try:
        return ModelSpec(**fields)
    except ValidationError as err:
        raise from_validation_error(err, fields=ModelSpec.model_fields) from None


# --- the zoo: published configs ------------------------------------------------------------------------------------
def _gpt2(name: str, h: int, layers: int, heads: int) -> ModelSpec:
    # openai-community/gpt2* config.json: vocab 50257, n_positions 1024, GELU MLP 4h, tied LM head, LayerNorm.
    # (GPT2Attention.c_attn is one fused q|k|v linear; fused_qkv stays False here because tests/data/hf_traces.jsonl
    # stores these specs as the bench wrote them: set it when that fixture is regenerated.)
    return ModelSpec(name=name, vocab_size=50257, hidden_size=h, num_layers=layers, num_heads=heads)


def _llama(name: str, vocab: int, h: int, layers: int, heads: int, kv: int, ffn: int, ctx: int, **kw) -> ModelSpec:
    return ModelSpec(
        name=name, vocab_size=vocab, hidden_size=h, num_layers=layers, num_heads=heads, num_kv_heads=kv,
        ffn_size=ffn, mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=ctx,
        norm_kind="rmsnorm", bias=False, **kw,
    )


_ZOO_LIST = [
    _gpt2("gpt2", 768, 12, 12),  # 124,439,808
    _gpt2("gpt2-medium", 1024, 24, 16),  # 354,823,168
    _gpt2("gpt2-large", 1280, 36, 20),  # 774,030,080
    _gpt2("gpt2-xl", 1600, 48, 25),  # 1,557,611,200
    # The paper's "GPT2-7B": a GPT-2-style model at the GPT-3 6.7B shape (Brown et al. 2020, Table 2.1: h=4096,
    # l=32, a=32, context 2048), keeping GPT-2's vocabulary. The paper gives no exact shape; this is our assumption.
    ModelSpec(name="gpt2-7b-paper", vocab_size=50257, hidden_size=4096, num_layers=32, num_heads=32,
              max_positions=2048),
    _llama("llama-2-7b", 32000, 4096, 32, 32, 32, 11008, 4096),  # 6,738,415,616
    _llama("llama-2-13b", 32000, 5120, 40, 40, 40, 13824, 4096),  # 13,015,864,320
    _llama("llama-2-70b", 32000, 8192, 80, 64, 8, 28672, 4096),  # 68,976,648,192
    _llama("llama-3.1-8b", 128256, 4096, 32, 32, 8, 14336, 131072),  # 8,030,261,248
    _llama("llama-3.1-70b", 128256, 8192, 80, 64, 8, 28672, 131072),  # 70,553,706,496
    _llama("mistral-7b", 32000, 4096, 32, 32, 8, 14336, 32768),  # Mistral-7B-v0.1: 7,241,732,096
    _llama("mixtral-8x7b", 32000, 4096, 32, 32, 8, 14336, 32768, num_experts=8, moe_top_k=2),  # 46,702,792,704
    _llama("qwen2.5-7b", 152064, 3584, 28, 28, 4, 18944, 131072, qkv_bias=True),  # 7,615,616,512
    _llama("qwen2.5-72b", 152064, 8192, 80, 64, 8, 29568, 131072, qkv_bias=True),  # 72,706,203,648
]

# Exact counts published by the model cards / HF `num_parameters()` (for the families below `HF_ZOO_CONFIGS`: the
# safetensors totals on the model pages, which equal `sum(p.numel())` of the real transformers class built on the
# meta device; DeepSeek publishes rounded figures only, so its entries are that meta-device count, transformers
# v5.24). The tests check the zoo against these, and the new families against transformers itself.
PUBLISHED_PARAMETER_COUNTS: dict[str, int] = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "gemma-2-27b": 27_227_128_320,
    "gemma-3-1b": 999_885_952,
    "phi-3-mini-4k": 3_821_079_552,
    "phi-4": 14_659_507_200,
    "qwen3-0.6b": 596_049_920,
    "qwen3-8b": 8_190_735_360,
    "qwen3-32b": 32_762_123_264,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
    "deepseek-v2-lite": 15_706_484_224,  # "15.7B" on the model card; meta-device count
    "deepseek-v2": 235_741_434_880,  # "236B"; meta-device count
    "deepseek-v3": 671_026_404_352,  # "671B" (+14B MTP module, not built by transformers); meta-device count
    "olmo-2-7b": 7_298_617_344,
    "olmo-2-13b": 13_716_198_400,
}


def get_model(name: str) -> ModelSpec:
    """Look up a zoo model by name; the error lists what exists."""
    try:
        return ZOO[name]
    except KeyError:
        raise SpecError("model", f"unknown model {name!r}; choose one of: {', '.join(ZOO)}") from None


# --- Hugging Face config.json -------------------------------------------------------------------------------------
SUPPORTED_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "mixtral", "gemma2", "gemma3_text", "gemma3", "phi3",
                         "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3", "olmo2")

# Gemma3TextConfig defaults (transformers/models/gemma3/configuration_gemma3.py, v5.24): the multimodal Gemma-3
# config.json (4B/12B/27B, model_type "gemma3") lists only the text_config keys that differ from these.
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072, "tie_word_embeddings": True, "attention_bias": False,
    "sliding_window": 4096, "sliding_window_pattern": 6, "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
}


def _full_attention_every(config: dict, default_pattern: int, need) -> int:
    """HF `layer_types` (or the older `sliding_window_pattern`) -> the k of `ModelSpec.full_attention_every`."""
    layer_types = config.get("layer_types")
    if layer_types is None:
        return int(config.get("sliding_window_pattern") or default_pattern)
    n = need("num_hidden_layers")
    if not isinstance(layer_types, list) or len(layer_types) != n:
        raise SpecError("layer_types", f"must list one attention type per layer ({n})")
    for k in (0, *range(1, n + 1)):
        probe = ModelSpec(vocab_size=1, hidden_size=1, num_layers=n, num_heads=1, sliding_window=1,
                          full_attention_every=k)
        expected = ["sliding_attention" if probe.is_sliding_layer(i) else "full_attention" for i in range(n)]
        if layer_types == expected:
            return k
    raise SpecError("layer_types", "only 'every k-th layer is full_attention, the rest sliding_attention' patterns "
                    "are supported; give the model as a --spec file")


# transformers/models/gemma2/configuration_gemma2.py Gemma2Config (v5.24): attn_logit_softcapping=50.0,
# final_logit_softcapping=30.0
_GEMMA2_SOFTCAPS = (50.0, 30.0)


def model_from_hf_config(config: dict, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed Hugging Face config.json (see SUPPORTED_MODEL_TYPES).

    For the multimodal Gemma-3 config (model_type "gemma3") this is the language model only: the vision tower
    and projector (about 0.4B parameters) are not counted.
    """
    if not isinstance(config, dict):
        raise SpecError("config.json", "must be a JSON object with the model's hyperparameters")
    mtype = config.get("model_type")
    if mtype not in SUPPORTED_MODEL_TYPES:
        raise SpecError(
            "model_type", f"unsupported model_type {mtype!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    label = slug_name(name or str(config.get("_name_or_path") or mtype), fallback=mtype)
    if mtype == "gemma3":
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise SpecError("text_config", "missing in the gemma3 config.json (an object with the language model)")
        config = {**_GEMMA3_TEXT_DEFAULTS, **text}
        mtype, label = "gemma3_text", slug_name(f"{label}-text")

    def need(*keys: str):
        for k in keys:
            if config.get(k) is not None:
                return config[k]
        raise SpecError(keys[0], f"missing (or null) in the {mtype} config.json; add it (an integer)")

    try:
        if mtype == "gpt2":
            h = need("n_embd", "hidden_size")
            return ModelSpec(
                name=label, vocab_size=need("vocab_size"), hidden_size=h, num_layers=need("n_layer", "num_hidden_layers"),
                num_heads=need("n_head", "num_attention_heads"), ffn_size=config.get("n_inner") or None,
                max_positions=config.get("n_positions", 1024), tie_embeddings=config.get("tie_word_embeddings", True),
            )
        heads = need("num_attention_heads")
        tie_default = mtype in ("gemma2", "gemma3_text")  # Gemma2Config / Gemma3TextConfig tie_word_embeddings=True
        fields = dict(
            name=label, vocab_size=need("vocab_size"), hidden_size=need("hidden_size"),
            num_layers=need("num_hidden_layers"), num_heads=heads,
            num_kv_heads=heads if config.get("num_key_value_heads") is None else config["num_key_value_heads"],
            ffn_size=need("intermediate_size"),
            mlp_kind="swiglu", tie_embeddings=bool(config.get("tie_word_embeddings", tie_default)),
            position_kind="rotary", max_positions=config.get("max_position_embeddings", 4096), norm_kind="rmsnorm",
            bias=bool(config.get("mlp_bias", False)),
        )
        act = config.get("hidden_activation") or config.get("hidden_act")
        if act in HiddenAct.__args__:
            fields["hidden_act"] = act
        if config.get("attention_bias"):  # HF Llama-style attention_bias: q, k, v and o all get a bias
            fields["qkv_bias"] = fields["out_bias"] = True
        if mtype == "qwen2":
            fields["qkv_bias"] = True
        # Mistral-7B-v0.1's sliding_window (4096, every layer) is not read yet, for the same fixture reason as
        # GPT-2's fused_qkv (see _gpt2).
        if mtype in ("qwen2", "qwen3", "qwen3_moe") and config.get("use_sliding_window"):
            raise SpecError("use_sliding_window", "Qwen's max_window_layers sliding pattern is not supported; set it "
                            "false or give the model as a --spec file")
        if mtype == "mixtral":
            fields["num_experts"] = need("num_local_experts")
            fields["moe_top_k"] = config.get("num_experts_per_tok", 2)
        if mtype in ("gemma2", "gemma3_text"):
            # Gemma2Attention / Gemma3Attention: head_dim from the config, not h / a; four norms per layer.
            # A config.json without the soft-capping keys gets the config class' defaults, as transformers builds
            # it (Gemma2Config: 50.0 and 30.0; Gemma3TextConfig: None and None); an explicit null turns it off.
            caps = _GEMMA2_SOFTCAPS if mtype == "gemma2" else (None, None)
            fields.update(head_size=need("head_dim"), norm_placement="sandwich",
                          attn_logit_softcapping=config.get("attn_logit_softcapping", caps[0]),
                          final_logit_softcapping=config.get("final_logit_softcapping", caps[1]))
            if config.get("sliding_window") is not None:
                fields["sliding_window"] = config["sliding_window"]
                fields["full_attention_every"] = _full_attention_every(config, 2 if mtype == "gemma2" else 6, need)
            if mtype == "gemma3_text":
                fields["qk_norm"] = "head"
        if mtype == "phi3":
            # Phi3Attention.qkv_proj and Phi3MLP.gate_up_proj are single fused linears.
            fields.update(fused_qkv=True, fused_gate_up=True, head_size=config.get("head_dim"))
            if config.get("sliding_window") is not None:
                fields["sliding_window"] = config["sliding_window"]  # Phi-3-mini-4k: 2047, every layer
        if mtype in ("qwen3", "qwen3_moe"):
            fields.update(head_size=config.get("head_dim"), qk_norm="head")  # Qwen3Attention q_norm/k_norm(head_dim)
        if mtype == "qwen3_moe":
            if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
                field = "mlp_only_layers" if config.get("mlp_only_layers") else "decoder_sparse_step"
                raise SpecError(field, "only every-layer MoE is supported (mlp_only_layers [] and "
                                "decoder_sparse_step 1); give the model as a --spec file")
            # transformers 5 writes Qwen3MoeConfig's expert count as num_local_experts (4.x and the Hub's files:
            # num_experts); either is read
            fields.update(num_experts=need("num_experts", "num_local_experts"), moe_top_k=need("num_experts_per_tok"),
                          expert_ffn_size=need("moe_intermediate_size"))
        if mtype in ("deepseek_v2", "deepseek_v3"):
            if "q_lora_rank" not in config:
                raise SpecError("q_lora_rank", f"missing in the {mtype} config.json; give an integer or null "
                                "(DeepSeek-V2-Lite: one q_proj)")
            if config.get("moe_layer_freq", 1) != 1:
                raise SpecError("moe_layer_freq", "only 1 (every layer after first_k_dense_replace is MoE) is "
                                "supported; give the model as a --spec file")
            experts = need("n_routed_experts", "num_local_experts")
            fields.update(
                num_kv_heads=None, q_lora_rank=config["q_lora_rank"], kv_lora_rank=need("kv_lora_rank"),
                qk_nope_head_dim=need("qk_nope_head_dim"), qk_rope_head_dim=need("qk_rope_head_dim"),
                v_head_dim=need("v_head_dim"), num_experts=experts, moe_top_k=need("num_experts_per_tok"),
                expert_ffn_size=need("moe_intermediate_size"), num_shared_experts=config.get("n_shared_experts") or 0,
                first_k_dense=min(config.get("first_k_dense_replace") or 0, fields["num_layers"]),
            )
            if not experts:
                fields.update(num_shared_experts=0, first_k_dense=0)
        if mtype == "olmo2":
            # Olmo2DecoderLayer: post_attention / post_feedforward norms only; Olmo2Attention q_norm over heads x d.
            fields.update(norm_placement="post", qk_norm="projection")
        return ModelSpec(**fields)
    except ValidationError as err:
        raise from_validation_error(err, source="config.json", fields=ModelSpec.model_fields) from None


# --- the zoo, part 2: the newer families, as the shape keys of their config.json ----------------------------------
# Copied from each repository's config.json on huggingface.co (the keys that decide shapes; everything else keeps
# its transformers default). Built through `model_from_hf_config`, so the zoo and the loader cannot disagree.
_GEMMA2 = {"model_type": "gemma2", "vocab_size": 256000, "head_dim": 256, "max_position_embeddings": 8192,
           "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
           "hidden_activation": "gelu_pytorch_tanh"}
_QWEN3 = {"model_type": "qwen3", "vocab_size": 151936, "head_dim": 128, "max_position_embeddings": 40960,
          "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False}
_DEEPSEEK = {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512,
             "moe_layer_freq": 1, "tie_word_embeddings": False, "hidden_act": "silu"}
_OLMO2 = {"model_type": "olmo2", "vocab_size": 100352, "max_position_embeddings": 4096, "tie_word_embeddings": False,
          "attention_bias": False}


HF_ZOO_CONFIGS: dict[str, dict] = {
    "gemma-2-2b": {**_GEMMA2, **dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                                       num_attention_heads=8, num_key_value_heads=4)},  # google/gemma-2-2b
    "gemma-2-9b": {**_GEMMA2, **dict(hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                                       num_attention_heads=16, num_key_value_heads=8)},  # google/gemma-2-9b
    "gemma-2-27b": {**_GEMMA2, **dict(hidden_size=4608, intermediate_size=36864, num_hidden_layers=46,
                                        num_attention_heads=32, num_key_value_heads=16, head_dim=128)},
    "gemma-3-1b": {"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 1152, "intermediate_size": 6912,
                   "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                   "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6,
                   "attn_logit_softcapping": None, "final_logit_softcapping": None,
                   "hidden_activation": "gelu_pytorch_tanh"},  # google/gemma-3-1b-pt
    "phi-3-mini-4k": {"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
                      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                      "max_position_embeddings": 4096, "sliding_window": 2047, "tie_word_embeddings": False,
                      "hidden_act": "silu"},  # microsoft/Phi-3-mini-4k-instruct
    "phi-4": {"model_type": "phi3", "vocab_size": 100352, "hidden_size": 5120, "intermediate_size": 17920,
              "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 10,
              "max_position_embeddings": 16384, "sliding_window": None, "tie_word_embeddings": False,
              "hidden_act": "silu"},  # microsoft/phi-4
    "qwen3-0.6b": {**_QWEN3, **dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                      num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True)},
    "qwen3-8b": {**_QWEN3, **dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                                    num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)},
    "qwen3-32b": {**_QWEN3, **dict(hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                                     num_attention_heads=64, num_key_value_heads=8, tie_word_embeddings=False)},
    "qwen3-30b-a3b": {**_QWEN3, **dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144,
                                         moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
                                         num_key_value_heads=4, num_experts=128, num_experts_per_tok=8,
                                         decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)},
    "qwen3-235b-a22b": {**_QWEN3, **dict(model_type="qwen3_moe", hidden_size=4096, intermediate_size=12288,
                                           moe_intermediate_size=1536, num_hidden_layers=94, num_attention_heads=64,
                                           num_key_value_heads=4, num_experts=128, num_experts_per_tok=8,
                                           decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)},
    "deepseek-v2-lite": {**_DEEPSEEK, **dict(
        model_type="deepseek_v2", vocab_size=102400, hidden_size=2048, intermediate_size=10944,
        moe_intermediate_size=1408, num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
        n_shared_experts=2, n_routed_experts=64, num_experts_per_tok=6, q_lora_rank=None, first_k_dense_replace=1,
        max_position_embeddings=163840)},  # deepseek-ai/DeepSeek-V2-Lite
    "deepseek-v2": {**_DEEPSEEK, **dict(
        model_type="deepseek_v2", vocab_size=102400, hidden_size=5120, intermediate_size=12288,
        moe_intermediate_size=1536, num_hidden_layers=60, num_attention_heads=128, num_key_value_heads=128,
        n_shared_experts=2, n_routed_experts=160, num_experts_per_tok=6, q_lora_rank=1536, first_k_dense_replace=1,
        max_position_embeddings=163840)},  # deepseek-ai/DeepSeek-V2
    "deepseek-v3": {**_DEEPSEEK, **dict(
        model_type="deepseek_v3", vocab_size=129280, hidden_size=7168, intermediate_size=18432,
        moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
        n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8, q_lora_rank=1536, first_k_dense_replace=3,
        n_group=8, topk_group=4, max_position_embeddings=163840)},  # deepseek-ai/DeepSeek-V3
    "olmo-2-7b": {**_OLMO2, **dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                     num_attention_heads=32, num_key_value_heads=32)},  # allenai/OLMo-2-1124-7B
    "olmo-2-13b": {**_OLMO2, **dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                      num_attention_heads=40, num_key_value_heads=40)},  # allenai/OLMo-2-1124-13B
}
ZOO: dict[str, ModelSpec] = {
    m.name: m for m in [*_ZOO_LIST, *(model_from_hf_config(c, name=n) for n, c in HF_ZOO_CONFIGS.items())]
}


def load_model_spec(path: str | Path) -> ModelSpec:
    """Read a model given as a JSON or YAML file of ModelSpec fields (`frenzy memory --spec FILE`).

    For shapes a config.json cannot express (GELU with GQA, SwiGLU with LayerNorm, no biases). Every value must be
    a scalar of the field's type (validated strictly: no "4096" strings, no YAML aliases); `name` defaults to the
    file's stem. Errors name the file and the field.

    >>> load_model_spec("/nonexistent.yaml")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: spec: file not found: /nonexistent.yaml
    """
    p = Path(path)
    text = read_user_file(p, "spec", "a JSON or YAML file of ModelSpec fields")
    data = _parse_spec_text(text, p.name, as_json=p.suffix.lower() == ".json")
    if not isinstance(data, dict):
        raise SpecError("spec", f"must be a mapping of ModelSpec fields (e.g. hidden_size: 4096), got "
                        f"{type(data).__name__}", source=p.name)
    for key, value in data.items():
        if not isinstance(key, str):
            raise SpecError("spec", f"field names must be strings, got {key!r}", source=p.name)
        if key not in ModelSpec.model_fields:
            raise SpecError(key, f"not a ModelSpec field; known fields: {', '.join(ModelSpec.model_fields)}",
                            source=p.name)
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise SpecError(key, f"must be a single value (number, text, true/false or null), got "
                            f"{type(value).__name__}", source=p.name)
    data.setdefault("name", slug_name(p.stem))
    try:
        return ModelSpec.model_validate(data, strict=True)
    except ValidationError as err:
        raise from_validation_error(err, source=p.name, fields=ModelSpec.model_fields) from None


def _parse_spec_text(text: str, source: str, as_json: bool):
    # limits.load_yaml refuses aliases (a small file must not expand into a huge object graph) and bounds events
    loader = load_json if as_json else load_yaml
    return loader(text, "spec", source=source, limit=MAX_SPEC_FILE_BYTES)


def parse_hf_config_text(text: str, name: str | None = None) -> ModelSpec:
    """A config.json's text (pasted, uploaded or read from disk) -> ModelSpec; bad JSON names its line."""
    config = load_json(text, "config.json")
    return model_from_hf_config(config, name=name)


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a local config.json (no network) and build its ModelSpec."""
    p = Path(path)
    text = read_user_file(p, "config", "a Hugging Face config.json")
    return parse_hf_config_text(text, name=slug_name(p.parent.name if p.name == "config.json" else p.stem))
