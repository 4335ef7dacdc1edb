import json

import pytest
from pydantic import ValidationError

from frenzy_core.errors import SpecError
from frenzy_core.models import (
    PUBLISHED_PARAMETER_COUNTS,
    ZOO,
    ModelSpec,
    get_model,
    load_hf_config,
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
