import functools
import json

import pytest
from pydantic import ValidationError

from frenzy_core.errors import SpecError
from frenzy_core.models import (
    HF_ZOO_CONFIGS,
    PUBLISHED_PARAMETER_COUNTS,
    ZOO,
    ModelSpec,
    get_model,
    load_hf_config,
    load_model_spec,
    make_model,
    model_from_hf_config,
)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETER_COUNTS))
def test_zoo_parameter_count_matches_published(name):
    assert ZOO[name].parameter_count() == PUBLISHED_PARAMETER_COUNTS[name]


def test_every_published_zoo_model_is_checked():
    # the paper's GPT2-7B is the only zoo entry without a public exact count
    assert set(ZOO) - set(PUBLISHED_PARAMETER_COUNTS) == {"gpt2-7b-paper"}


def test_gpt2_count_by_hand():
    # wte 50257*768 + wpe 1024*768 + 12 * (ln1 2*768 + c_attn 768*2304+2304 + c_proj 768*768+768 + ln2 2*768
    #   + c_fc 768*3072+3072 + c_proj 3072*768+768) + ln_f 2*768
    per_layer = 2 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768 + 2 * 768 + 768 * 3072 + 3072 + 3072 * 768 + 768
    expected = 50257 * 768 + 1024 * 768 + 12 * per_layer + 2 * 768
    assert ZOO["gpt2"].parameter_count() == expected == 124_439_808


def test_paper_weights_formula():
    m = ZOO["gpt2"]
    assert m.paper_weights() == 50257 * 768 + 12 * (12 * 768**2 + 13 * 768)


def test_moe_active_parameters_smaller_than_total():
    m = ZOO["mixtral-8x7b"]
    assert m.active_parameter_count() < m.parameter_count()
    # Mistral AI's model card: about 12.9B active parameters per token
    assert 12.5e9 < m.active_parameter_count() < 13.1e9


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(hidden_size=100, num_heads=3), "num_heads"),
        (dict(num_kv_heads=5), "num_kv_heads"),
        (dict(vocab_size=-1), "vocab_size"),
        (dict(num_layers=0), "num_layers"),
    ],
)
def test_invalid_model_names_the_field(fields, field):
    base = dict(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4)
    with pytest.raises(SpecError) as err:
        make_model(**{**base, **fields})
    assert field in str(err.value)


def test_unknown_zoo_model_lists_choices():
    with pytest.raises(SpecError, match="gpt2"):
        get_model("gpt5")


def _llama_cfg(**kw):
    return {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
            "max_position_embeddings": 4096, "tie_word_embeddings": False, **kw}


def test_hf_llama_config_matches_zoo():
    assert model_from_hf_config(_llama_cfg()).parameter_count() == 6_738_415_616


def test_hf_qwen2_config_has_qkv_bias():
    cfg = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
           "tie_word_embeddings": False}
    assert model_from_hf_config(cfg).parameter_count() == 7_615_616_512


def test_hf_gpt2_and_mixtral_configs():
    gpt2 = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024}
    assert model_from_hf_config(gpt2).parameter_count() == 124_439_808
    mixtral = _llama_cfg(model_type="mixtral", num_key_value_heads=8, intermediate_size=14336,
                         num_local_experts=8, num_experts_per_tok=2)
    assert model_from_hf_config(mixtral).parameter_count() == 46_702_792_704


def test_hf_unknown_model_type_lists_supported():
    with pytest.raises(SpecError) as err:
        model_from_hf_config({"model_type": "bert"})
    assert err.value.field == "model_type" and "mixtral" in str(err.value)


def test_hf_missing_field_named():
    cfg = _llama_cfg()
    del cfg["intermediate_size"]
    with pytest.raises(SpecError, match="intermediate_size"):
        model_from_hf_config(cfg)


def test_load_hf_config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_llama_cfg()))
    assert load_hf_config(path).num_layers == 32
    path.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_hf_config(path)


def test_modelspec_is_frozen():
    m = ModelSpec(vocab_size=10, hidden_size=8, num_layers=1, num_heads=2)
    with pytest.raises(ValidationError):
        m.hidden_size = 16


@pytest.mark.parametrize("fields, field", [({"num_key_value_heads": 0}, "num_kv_heads"),
                                           ({"intermediate_size": None}, "intermediate_size")])
def test_hf_present_but_invalid_values_are_errors_not_defaults(fields, field):
    with pytest.raises(SpecError) as err:
        model_from_hf_config(_llama_cfg(**fields))
    assert err.value.field == field


def test_model_level_errors_name_the_field():
    with pytest.raises(SpecError) as err:
        make_model(vocab_size=10, hidden_size=10, num_layers=1, num_heads=3)
    assert err.value.field == "num_heads"


def test_load_hf_config_folder_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError, match="folder"):
        load_hf_config(tmp_path)


# --- the newer families: checked against the real transformers classes and the model cards ------------------------
def _transformers():
    return pytest.importorskip("transformers", reason="transformers is not installed: the HF cross-checks need it")


@functools.cache
def _hf_zoo_model(name: str):
    return _hf_model(HF_ZOO_CONFIGS[name])


def _hf_model(config: dict):
    """The real transformers model for a config.json dict, built on the meta device (no memory, no download)."""
    transformers = _transformers()
    import torch

    kw = dict(config)
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", sorted(HF_ZOO_CONFIGS))
def test_new_family_counts_equal_the_real_transformers_model(name):
    hf = _numel(_hf_zoo_model(name))
    assert ZOO[name].parameter_count() == hf == PUBLISHED_PARAMETER_COUNTS[name]


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-3-1b", "phi-4", "qwen3-0.6b", "qwen3-30b-a3b",
                                  "deepseek-v2-lite", "deepseek-v3", "olmo-2-7b"])
def test_per_layer_counts_and_shapes_match_transformers(name):
    spec, hf = ZOO[name], _hf_zoo_model(name)
    layers = hf.model.layers
    for i in sorted({0, spec.first_k_dense, spec.num_layers - 1} & set(range(spec.num_layers))):
        assert spec.layer_parameters(i) == _numel(layers[i])
        assert spec.mlp_parameters(i) + spec.attention_parameters() + 2 * spec.norm_parameters() == _numel(layers[i])
    assert spec.embedding_parameters() == _numel(hf.model.embed_tokens)
    attn = layers[0].self_attn
    if spec.is_mla:
        assert attn.kv_a_proj_with_mqa.out_features == spec.kv_lora_rank + spec.qk_rope_head_dim
        assert attn.kv_b_proj.out_features == spec.num_heads * (spec.qk_nope_head_dim + spec.v_head_dim)
        assert attn.o_proj.in_features == spec.attention_output_dim == spec.num_heads * spec.v_head_dim
        q = attn.q_b_proj if spec.q_lora_rank else attn.q_proj
        assert q.out_features == spec.q_dim == spec.num_heads * 192
    elif spec.fused_qkv:
        assert attn.qkv_proj.out_features == spec.q_dim + spec.kv_dim + spec.v_dim
    else:
        assert (attn.q_proj.out_features, attn.k_proj.out_features) == (spec.q_dim, spec.kv_dim)
        assert attn.o_proj.in_features == spec.attention_output_dim
    assert spec.head_dim == (attn.qk_head_dim if spec.is_mla else attn.head_dim)


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-3-1b", "phi-3-mini-4k", "qwen3-8b"])
def test_sliding_layers_follow_the_hf_layer_types(name):
    spec, cfg = ZOO[name], _hf_zoo_model(name).config
    layer_types = getattr(cfg, "layer_types", None) or ["full_attention"] * spec.num_layers
    if getattr(cfg, "sliding_window", None) and name.startswith("phi"):  # Phi-3: every layer gets the window
        layer_types = ["sliding_attention"] * spec.num_layers
    assert [spec.is_sliding_layer(i) for i in range(spec.num_layers)] == [t == "sliding_attention" for t in layer_types]


def test_gemma2_count_by_hand():
    # google/gemma-2-9b: head_dim 256 != 3584 / 16; q 3584x4096, k, v 3584x2048, o 4096x3584; GeGLU 3 x 3584 x 14336;
    # four RMSNorms per layer (input, post_attention, pre_feedforward, post_feedforward); tied embedding.
    per_layer = 3584 * 4096 + 2 * 3584 * 2048 + 4096 * 3584 + 3 * 3584 * 14336 + 4 * 3584
    assert ZOO["gemma-2-9b"].parameter_count() == 256000 * 3584 + 42 * per_layer + 3584 == 9_241_705_984


def test_qwen3_head_dim_is_independent_of_hidden_size():
    m = ZOO["qwen3-0.6b"]  # h 1024, 16 heads of 128: q is 2048 wide, twice the residual stream
    assert (m.head_dim, m.q_dim, m.kv_dim) == (128, 2048, 1024)
    per_layer = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024
    assert m.parameter_count() == 151936 * 1024 + 28 * per_layer + 1024 == 596_049_920


def test_mla_attention_by_hand():
    m = ZOO["deepseek-v3"]  # q 7168 -> 1536 -> 128 x 192; kv 7168 -> 512 + 64 -> 128 x (128 + 128); o 16384 -> 7168
    q = 7168 * 1536 + 1536 + 1536 * 128 * 192
    kv = 7168 * (512 + 64) + 512 + 512 * 128 * 256
    assert m.attention_parameters() == q + kv + 128 * 128 * 7168
    lite = ZOO["deepseek-v2-lite"]  # q_lora_rank null: one q_proj 2048 -> 16 x 192
    assert lite.attention_parameters() == 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048


def test_dense_first_layers_differ_and_the_mean_keeps_totals_exact():
    m = ZOO["deepseek-v3"]  # layers 0-2 dense (18432 wide), 3-60 MoE: 256 routed + 1 shared expert of 2048
    dense = 3 * 7168 * 18432
    moe = 256 * 3 * 7168 * 2048 + 3 * 7168 * 2048 + 7168 * 256
    assert (m.mlp_parameters(0), m.mlp_parameters(3)) == (dense, moe)
    assert (m.num_dense_layers, m.num_moe_layers) == (3, 58)
    assert m.total_layer_parameters() == 61 * (m.attention_parameters() + 2 * 7168) + 3 * dense + 58 * moe
    # memory.py and perf.py multiply the per-layer figure by num_layers: the mean makes that the exact total
    assert m.num_layers * m.layer_parameters() == pytest.approx(m.total_layer_parameters(), rel=1e-15)
    assert m.max_layer_parameters() == m.layer_parameters(60)
    # a pipeline stage's layers, summed one by one: the first of 4 stages of 15/16 layers holds the 3 dense ones
    for start, stop in ((0, 15), (2, 5), (15, 30), (45, 61), (7, 7)):
        assert m.layers_parameters(start, stop) == sum(m.layer_parameters(i) for i in range(start, stop))
    with pytest.raises(SpecError, match="layer"):
        m.layer_parameters(61)


@pytest.mark.parametrize("name", sorted(HF_ZOO_CONFIGS))
def test_memory_model_sees_the_exact_parameter_count(name):
    from frenzy_core.memory import NO_OVERHEAD, predict_memory
    from frenzy_core.training import TrainingSpec

    got = predict_memory(ZOO[name], TrainingSpec(seq_len=512, global_batch=1, precision="amp"), overhead=NO_OVERHEAD)
    assert got.weights_bytes == pytest.approx(4 * ZOO[name].parameter_count(), rel=1e-15)


@pytest.mark.parametrize("name, low, high", [
    ("qwen3-30b-a3b", 3.25e9, 3.4e9),  # Qwen3 model card: 3.3B activated
    ("qwen3-235b-a22b", 21.5e9, 22.5e9),  # 22B activated
    ("deepseek-v2", 20.5e9, 21.5e9),  # DeepSeek-V2 card: 21B activated
    ("deepseek-v3", 36.5e9, 38e9),  # DeepSeek-V3 card: 37B activated
])
def test_moe_active_parameters_match_the_model_cards(name, low, high):
    assert low < ZOO[name].active_parameter_count() < high


@pytest.mark.parametrize("name, non_embedding", [("qwen3-0.6b", 0.44e9), ("qwen3-8b", 6.95e9),
                                                 ("qwen3-30b-a3b", 29.9e9)])
def test_qwen3_non_embedding_counts_match_the_model_cards(name, non_embedding):
    m = ZOO[name]  # the cards give three significant digits
    assert float(f"{m.total_layer_parameters() + m.norm_parameters():.3g}") == non_embedding


def test_gemma3_multimodal_config_gives_its_language_model():
    # google/gemma-3-4b-it config.json lists only the text_config keys that differ from Gemma3TextConfig's defaults
    text = {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
            "sliding_window": 1024}
    spec = model_from_hf_config({"model_type": "gemma3", "text_config": text})
    transformers = _transformers()
    import torch

    with torch.device("meta"):
        hf = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**text))
    assert spec.parameter_count() == _numel(hf)
    assert spec.num_sliding_layers == sum(t == "sliding_attention" for t in hf.config.layer_types)


def test_llama_attention_bias_puts_a_bias_on_the_output_projection_too():
    cfg = _llama_cfg(num_hidden_layers=2, attention_bias=True)
    assert model_from_hf_config(cfg).parameter_count() == _numel(_hf_model(cfg))


@pytest.mark.parametrize("cfg, field", [
    ({**HF_ZOO_CONFIGS["qwen3-30b-a3b"], "mlp_only_layers": [0, 5]}, "mlp_only_layers"),
    ({**HF_ZOO_CONFIGS["qwen3-30b-a3b"], "decoder_sparse_step": 2}, "decoder_sparse_step"),
    ({**HF_ZOO_CONFIGS["qwen3-8b"], "use_sliding_window": True}, "use_sliding_window"),
    ({k: v for k, v in HF_ZOO_CONFIGS["deepseek-v3"].items() if k != "q_lora_rank"}, "q_lora_rank"),
    ({**HF_ZOO_CONFIGS["deepseek-v3"], "moe_layer_freq": 2}, "moe_layer_freq"),
    ({**HF_ZOO_CONFIGS["gemma-2-2b"], "head_dim": None}, "head_dim"),
    ({**HF_ZOO_CONFIGS["gemma-2-2b"], "layer_types": ["full_attention"] * 25 + ["sliding_attention"]}, "layer_types"),
    ({"model_type": "gemma3"}, "text_config"),
])
def test_hf_configs_we_cannot_express_are_named_errors(cfg, field):
    with pytest.raises(SpecError) as err:
        model_from_hf_config(cfg)
    assert err.value.field == field


def test_hf_layer_types_list_gives_the_pattern():
    cfg = {**HF_ZOO_CONFIGS["gemma-2-2b"], "layer_types": ["sliding_attention", "full_attention"] * 13}
    assert model_from_hf_config(cfg).full_attention_every == 2


_BASE = dict(vocab_size=1000, hidden_size=64, num_layers=4, num_heads=4)


@pytest.mark.parametrize("fields, field", [
    (dict(head_size=0), "head_size"),
    (dict(hidden_size=2**21), "hidden_size"),
    (dict(num_layers=10**6), "num_layers"),
    (dict(kv_lora_rank=32, qk_nope_head_dim=16, v_head_dim=16), "qk_rope_head_dim"),
    (dict(q_lora_rank=32), "q_lora_rank"),
    (dict(first_k_dense=1), "first_k_dense"),
    (dict(num_shared_experts=1), "num_shared_experts"),
    (dict(num_experts=4, first_k_dense=5), "first_k_dense"),
    (dict(full_attention_every=2), "full_attention_every"),
    (dict(final_logit_softcapping=float("nan")), "final_logit_softcapping"),
    (dict(attn_logit_softcapping=-1.0), "attn_logit_softcapping"),
    (dict(qk_norm="both"), "qk_norm"),
    (dict(norm_placement="middle"), "norm_placement"),
])
def test_new_fields_are_validated_by_name(fields, field):
    with pytest.raises(SpecError) as err:
        make_model(**{**_BASE, **fields})
    assert err.value.field == field


def test_explicit_head_size_lifts_the_divisibility_rule():
    m = make_model(**{**_BASE, "num_heads": 3, "head_size": 32})  # 64 / 3 is not an integer; 3 x 32 = 96
    assert (m.q_dim, m.attention_output_dim) == (96, 96)


# --- --spec FILE ---------------------------------------------------------------------------------------------------
GELU_GQA_YAML = """\
# GELU MLP with grouped-query attention, RoPE and no biases: no config.json model_type describes this
vocab_size: 32000
hidden_size: 2048
num_layers: 16
num_heads: 16
num_kv_heads: 4
mlp_kind: gelu
position_kind: rotary
bias: false
"""


def test_load_model_spec_yaml_gelu_with_gqa(tmp_path):
    path = tmp_path / "gelu-gqa.yaml"
    path.write_text(GELU_GQA_YAML)
    m = load_model_spec(path)
    # q 2048^2, k and v 2048 x 512, o 2048^2; fc 2048 x 8192 twice; two LayerNorms (2 x 2h); untied? no: tied
    per_layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 2 * 2048 * 8192 + 2 * 2 * 2048
    assert m.name == "gelu-gqa" and m.parameter_count() == 32000 * 2048 + 16 * per_layer + 2 * 2048


def test_load_model_spec_json_swiglu_with_layernorm(tmp_path):
    path = tmp_path / "swiglu-ln.json"
    path.write_text(json.dumps({"name": "swiglu-ln", **_BASE, "mlp_kind": "swiglu", "norm_kind": "layernorm",
                                "ffn_size": 128, "bias": False, "tie_embeddings": False}))
    m = load_model_spec(path)
    assert m.parameter_count() == 2 * 1000 * 64 + 1024 * 64 + 4 * (4 * 64 * 64 + 3 * 64 * 128 + 4 * 64) + 2 * 64


@pytest.mark.parametrize("text, suffix, field, words", [
    ("a: &x 1\nb: *x\n", ".yaml", "spec", "aliases"),
    ("- 1\n- 2\n", ".yaml", "spec", "mapping"),
    ("hidden_size: [1, 2]\n", ".yaml", "hidden_size", "single value"),
    ("hidden_sise: 64\n", ".yaml", "hidden_sise", "not a ModelSpec field"),
    ('{"vocab_size": 10, "hidden_size": "64", "num_layers": 1, "num_heads": 2}', ".json", "hidden_size", "integer"),
    ('{"vocab_size": 10, "hidden_size": true, "num_layers": 1, "num_heads": 2}', ".json", "hidden_size", "integer"),
    ("{not json", ".json", "spec", "not valid JSON"),
    ("a: [1\n", ".yaml", "spec", "not valid YAML"),
    ("vocab_size: 10\nhidden_size: 64\nnum_layers: 1\nnum_heads: 3\n", ".yml", "num_heads", "divide"),
])
def test_load_model_spec_errors_name_the_file_and_field(tmp_path, text, suffix, field, words):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_model_spec(path)
    assert err.value.field == field and err.value.source == path.name and words in str(err.value)


def test_load_model_spec_rejects_files_over_1_mib(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(GELU_GQA_YAML + "#" * (1 << 20))
    with pytest.raises(SpecError, match="1,048,576-byte limit"):
        load_model_spec(path)
    with pytest.raises(SpecError, match="not found"):
        load_model_spec(tmp_path / "missing.yaml")


def test_a_rotary_model_past_its_trained_context_gets_a_warning_naming_both_lengths():
    from frenzy_core.models import beyond_trained_positions

    note = beyond_trained_positions(ZOO["llama-2-7b"], 65536)  # trained at 4,096 (config max_position_embeddings)
    assert note is not None and "65,536" in note and "4,096" in note and "16.0x" in note and "RoPE" in note
    assert beyond_trained_positions(ZOO["llama-2-7b"], 4096) is None  # exactly the trained length: fine
    assert beyond_trained_positions(ZOO["llama-3.1-8b"], 65536) is None  # trained to 131,072
    assert beyond_trained_positions(ZOO["gpt2"], 4096) is None  # learned table: refused elsewhere, not warned


def test_a_qwen3_moe_config_json_as_transformers_5_writes_it_is_read():
    """transformers 5's Qwen3MoeConfig.to_dict() names the expert count num_local_experts (4.x: num_experts); the
    config.json it writes must give the same model as the Hub's file."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3MoeConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                                      num_experts_per_tok=2, vocab_size=1000).to_dict()
    spec = model_from_hf_config(cfg, name="tiny-qwen3-moe")
    assert (spec.num_experts, spec.moe_top_k, spec.expert_ffn) == (8, 2, 32)
    hub = {k: v for k, v in cfg.items() if k != "num_local_experts"} | {"num_experts": 8}
    assert model_from_hf_config(hub, name="tiny-qwen3-moe") == spec
