"""Model specs: the shape of a decoder-only transformer, its exact parameter count, the zoo, HF config loading.

Exact counts follow the Hugging Face implementations (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, MixtralForCausalLM) so that `parameter_count()` equals `sum(p.numel() for p in model.parameters())`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from frenzy_core.errors import SpecError, from_validation_error, read_text_file
from frenzy_core.limits import MODEL_LIMITS, check_upper_limits, divisors, load_json

MlpKind = Literal["gelu", "swiglu"]
PositionKind = Literal["learned", "rotary"]
NormKind = Literal["layernorm", "rmsnorm"]


class ModelSpec(BaseModel):
    """A decoder-only transformer, described the way its config.json describes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"  # shown in tables and the CLI
    vocab_size: int  # V: rows of the embedding and the LM head; drives the logits term
    hidden_size: int  # h: width of the residual stream
    num_layers: int  # l: transformer blocks; pipeline stages split these
    num_heads: int  # a: query heads; tensor parallelism splits these
    num_kv_heads: int | None = None  # GQA: key/value heads (None = num_heads, plain multi-head attention)
    ffn_size: int | None = None  # MLP inner width (None = 4h, GPT-2's choice)
    mlp_kind: MlpKind = "gelu"  # gelu: 2 matrices; swiglu: 3 matrices (gate, up, down)
    tie_embeddings: bool = True  # GPT-2 shares the LM head with the embedding; Llama-2/3 do not
    position_kind: PositionKind = "learned"  # learned positions add max_positions x h parameters
    max_positions: int = 1024  # rows of the learned position table; the longest sequence it accepts
    norm_kind: NormKind = "layernorm"  # layernorm has weight + bias (2h), rmsnorm only a weight (h)
    bias: bool = True  # biases on every linear layer (GPT-2) or none (Llama)
    qkv_bias: bool | None = None  # Qwen2 keeps biases on q, k, v only (None = follow `bias`)
    num_experts: int = 0  # MoE: experts per layer (0 = dense MLP)
    moe_top_k: int = 2  # MoE: experts each token is routed to
    expert_ffn_size: int | None = None  # MoE: inner width of one expert (None = ffn_size)

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        check_upper_limits(self, MODEL_LIMITS)
        for field in ("vocab_size", "hidden_size", "num_layers", "num_heads", "max_positions"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be a positive integer, got {getattr(self, field)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must divide hidden_size ({self.hidden_size}); "
                f"allowed: {', '.join(str(d) for d in _divisors(self.hidden_size) if d <= 256)}"
            )
        kv = self.kv_heads
        if kv <= 0 or self.num_heads % kv:
            raise ValueError(
                f"num_kv_heads ({kv}) must be a positive divisor of num_heads ({self.num_heads}); "
                f"allowed: {', '.join(str(d) for d in _divisors(self.num_heads))}"
            )
        if self.ffn_size is not None and self.ffn_size <= 0:
            raise ValueError(f"ffn_size must be a positive integer, got {self.ffn_size}")
        if self.num_experts < 0:
            raise ValueError(f"num_experts must be 0 (dense) or positive, got {self.num_experts}")
        if self.num_experts and not 1 <= self.moe_top_k <= self.num_experts:
            raise ValueError(f"moe_top_k must be between 1 and num_experts ({self.num_experts}), got {self.moe_top_k}")
        return self

    # --- derived shape -------------------------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def q_dim(self) -> int:
        """Width of the Q projection and of the attention output: num_heads x head_dim (= h for GPT/Llama)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K (and of the V) projection: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

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
    def is_moe(self) -> bool:
        return self.num_experts > 0

    # --- parameter counts ----------------------------------------------------------------------------------------
    def norm_parameters(self) -> int:
        """One normalisation layer: weight (+ bias for LayerNorm)."""
        return 2 * self.hidden_size if self.norm_kind == "layernorm" else self.hidden_size

    def attention_parameters(self) -> int:
        h, kv = self.hidden_size, self.kv_dim
        qkv = h * (h + 2 * kv) + ((h + 2 * kv) if self.has_qkv_bias else 0)
        out = h * h + (h if self.bias else 0)
        return qkv + out

    def _mlp_parameters(self, inner: int) -> int:
        h = self.hidden_size
        matrices = 3 if self.mlp_kind == "swiglu" else 2
        biases = ((matrices - 1) * inner + h) if self.bias else 0
        return matrices * h * inner + biases

    def mlp_parameters(self) -> int:
        """Dense MLP, or all experts plus the router for MoE."""
        if self.is_moe:
            router = self.hidden_size * self.num_experts
            return self.num_experts * self._mlp_parameters(self.expert_ffn) + router
        return self._mlp_parameters(self.ffn)

    def active_mlp_parameters(self) -> int:
        """MLP parameters one token touches (top-k experts for MoE): what drives FLOPs."""
        if self.is_moe:
            return self.moe_top_k * self._mlp_parameters(self.expert_ffn) + self.hidden_size * self.num_experts
        return self.mlp_parameters()

    def layer_parameters(self) -> int:
        return self.attention_parameters() + self.mlp_parameters() + 2 * self.norm_parameters()

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
        return self.embedding_parameters() + self.num_layers * self.layer_parameters() + self.head_parameters()

    def active_parameter_count(self) -> int:
        """Parameters used per token (differs from parameter_count only for MoE)."""
        dense_layer = self.attention_parameters() + self.active_mlp_parameters() + 2 * self.norm_parameters()
        return self.embedding_parameters() + self.num_layers * dense_layer + self.head_parameters()

    def paper_weights(self) -> int:
        """The Frenzy paper's approximation W = Vh + l(12h^2 + 13h) (arXiv 2412.14479, Sec. IV-A)."""
        h = self.hidden_size
        return self.vocab_size * h + self.num_layers * (12 * h * h + 13 * h)


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
ZOO: dict[str, ModelSpec] = {m.name: m for m in _ZOO_LIST}

# Exact counts published by the model cards / HF `num_parameters()`; the tests check the zoo against these.
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
}


def get_model(name: str) -> ModelSpec:
    """Look up a zoo model by name; the error lists what exists."""
    try:
        return ZOO[name]
    except KeyError:
        raise SpecError("model", f"unknown model {name!r}; choose one of: {', '.join(ZOO)}") from None


# --- Hugging Face config.json -------------------------------------------------------------------------------------
SUPPORTED_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "mixtral")


def model_from_hf_config(config: dict, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed Hugging Face config.json (GPT-2, Llama, Mistral, Qwen2, Mixtral families)."""
    if not isinstance(config, dict):
        raise SpecError("config.json", "must be a JSON object with the model's hyperparameters")
    mtype = config.get("model_type")
    if mtype not in SUPPORTED_MODEL_TYPES:
        raise SpecError(
            "model_type", f"unsupported model_type {mtype!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    label = name or config.get("_name_or_path") or mtype

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
        fields = dict(
            name=label, vocab_size=need("vocab_size"), hidden_size=need("hidden_size"),
            num_layers=need("num_hidden_layers"), num_heads=heads,
            num_kv_heads=heads if config.get("num_key_value_heads") is None else config["num_key_value_heads"],
            ffn_size=need("intermediate_size"),
            mlp_kind="swiglu", tie_embeddings=bool(config.get("tie_word_embeddings", False)), position_kind="rotary",
            max_positions=config.get("max_position_embeddings", 4096), norm_kind="rmsnorm",
            bias=bool(config.get("mlp_bias", False)),
        )
        if mtype == "llama" and config.get("attention_bias"):
            fields["qkv_bias"] = True
            fields["bias"] = bool(config.get("mlp_bias", False))
        if mtype == "qwen2":
            fields["qkv_bias"] = True
        if mtype == "mixtral":
            fields["num_experts"] = need("num_local_experts")
            fields["moe_top_k"] = config.get("num_experts_per_tok", 2)
        return ModelSpec(**fields)
    except ValidationError as err:
        raise from_validation_error(err, source="config.json", fields=ModelSpec.model_fields) from None


def parse_hf_config_text(text: str, name: str | None = None) -> ModelSpec:
    """A config.json's text (pasted, uploaded or read from disk) -> ModelSpec; bad JSON names its line."""
    config = load_json(text, "config.json")
    return model_from_hf_config(config, name=name)


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a local config.json (no network) and build its ModelSpec."""
    p = Path(path)
    text = read_text_file(p, "config", "a Hugging Face config.json")
    return parse_hf_config_text(text, name=p.parent.name if p.name == "config.json" else p.stem)
