"""The torchtune stack (frenzy_core/frameworks/torchtune.py): each of its terms worked by hand from the shapes of
pytorch/torchtune@1814feb1's code, and its path through the registry and the CLI."""

from __future__ import annotations

import json

import pytest

from frenzy_core.cli import main
from frenzy_core.errors import SpecError
from frenzy_core.frameworks import FRAMEWORKS, KNOWN, get
from frenzy_core.memory import (
    NO_OVERHEAD,
    layer_activations,
    loss_bytes_per_logit,
    predict_memory,
    predict_memory_band,
    stage_terms,
    zero3_gathered_elements,
)
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import RECIPES
from frenzy_core.training import Parallelism, TrainingSpec, make_training

# A Llama-3-shaped GQA model small enough to count by hand: h = 64, 4 heads of 16 over 2 kv heads, ffn 128, V 1,000
TINY = ModelSpec(name="tiny-llama3", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 ffn_size=128, mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=512,
                 norm_kind="rmsnorm", bias=False)
S, V, H = 32, 1000, 64
BASE = dict(seq_len=S, global_batch=1, micro_batch=1, precision="bf16", framework="torchtune")


def _spec(**fields) -> TrainingSpec:
    return TrainingSpec(**{**BASE, **fields})


# --- the layer -------------------------------------------------------------------------------------------------------
def test_a_layer_saves_what_torchtunes_llama_code_saves():
    # per token, bf16 (2 B), h = 64, q = o = 4 x 16 = 64, kv = 2 x 16 = 32, ffn = 128:
    # RMSNorm: x.float() (4 x 64) + fp32 rstd (4) + type_as(x) normalised (2 x 64)           = 388, twice   -> 776
    # q_proj / k_proj / v_proj share the norm's output x (no autocast: one tensor)           = 2 x 64       -> 128
    # SDPA saves the rotated q (2 x 64), k and v widened by expand + flatten (2 x 64 each),
    #   its output (2 x 64) and the fp32 log-sum-exp (4 x 4 heads)                            = 512 + 16     -> 528
    # w1 / w3 share the MLP norm's output x                                                  = 2 x 64       -> 128
    # SiLU's input (w1 out), w3's out, SiLU's out, the product (w2's input): 4 x 2 x 128                     -> 1024
    layer = layer_activations(TINY, _spec())
    assert layer.replicated + layer.split == 776 + 128 + 528 + 128 + 1024 == 2584
    assert layer.scores == 0.0


def test_expand_and_flatten_widen_k_and_v_beyond_transformers_layer():
    # hf: SDPA's narrow v (2 x 32) and the rotated q (2 x 64) and k (2 x 32) = 256; torchtune: q, k, v at 2 x 64 = 384
    tt = layer_activations(TINY, _spec())
    hf = layer_activations(TINY, _spec(framework="hf"))
    assert (tt.replicated + tt.split) - (hf.replicated + hf.split) == 384 - 256


# --- the loss and the chunked head ----------------------------------------------------------------------------------
def test_torch_cross_entropy_on_float_logits_is_twelve_bytes_per_logit():
    # TransformerDecoder.forward `self.output(h).float()`, then CE: saved fp32 log-softmax + nll's grad + its own
    assert loss_bytes_per_logit(RECIPES["torchtune"]) == 12.0


def test_held_logit_chunks_make_the_end_of_the_chunked_loss_forward_the_larger_moment():
    # 8 chunks: backward 4 (every saved log-softmax) + 8 / 8 (one chunk's two fp32 grads) = 5 B; end of the loss'
    # forward: 4 (saved) + 2 (the bf16 chunks _loss_step holds) + 4 / 8 (the last chunk's .float()) = 6.5 B
    assert loss_bytes_per_logit(RECIPES["pytorch"], 8) == 5.0
    assert loss_bytes_per_logit(RECIPES["torchtune"], 8) == 6.5
    # fp32 logits: .float() is the tensor itself, so 4 + 4 + 0 = 8 B
    assert loss_bytes_per_logit(RECIPES["torchtune"], 8, "fp32", 4) == 8.0
    # the compiled loss (loss_dtype bf16) saves the held bf16 chunk itself: 2 + 4 / 8 as for any stack
    assert loss_bytes_per_logit(RECIPES["torchtune"], 8, "bf16") == 2.5


def test_the_chunked_heads_gradient_is_summed_while_unreached_chunks_keep_their_loss():
    # k = 4 chunks, 32 tokens, V = 1,000, h = 64, bf16 params; the second chunk's head backward:
    # chunks 3 and 4 keep their fp32 log-softmax: 2 / 4 x 32 x 1,000 x 4           = 64,000
    # chunk 1's and chunk 2's weight-gradient views and their out-of-place sum (the one aten::add of
    # tests/test_memory_phases.py::test_a_weights_gradient_views_are_summed_out_of_place_once):
    #   3 x 1,000 x 64 x 2                                                           = 384,000
    # chunk 2's logit gradient and input gradient: 8 tokens x 2 x (1,000 + 64)       = 17,024
    terms = stage_terms(TINY, _spec(loss_chunks=4))
    assert terms["loss_or_head_gradient"] == 64_000 + 384_000 + 17_024
    # the same run under plain PyTorch: the loss' 32 x 1,000 x (4 + 8 / 4) = 192,000
    assert stage_terms(TINY, _spec(loss_chunks=4, framework="pytorch"))["loss_or_head_gradient"] == 192_000


def test_a_frozen_head_forms_no_chunked_gradient():
    # LoRA: the head is frozen; the loss' end of forward, 32 x 1,000 x (4 + 2 + 4 / 4) = 224,000, is the larger
    terms = stage_terms(TINY, _spec(loss_chunks=4, lora_rank=4))
    assert terms["loss_or_head_gradient"] == 224_000


# --- FSDP2 in the distributed recipes -------------------------------------------------------------------------------
def test_fully_shard_gathers_one_layer_and_keeps_the_root_unit_at_the_loss():
    # a layer: q 64 x 64, k and v 64 x 32, o 64 x 64 (12,288), w1 / w3 / w2 3 x 64 x 128 (24,576), 2 norms (128)
    # = 36,992, one of them at the loss; the root unit, not resharded after forward: the untied embedding and
    # head, 1,000 x 64 each = 128,000 (zero3_gathered_elements counts the matrices, not the final norm's 64)
    got = zero3_gathered_elements(TINY, _spec(zero_stage=3, global_batch=8), Parallelism(dp=8))
    assert got == 36_992 + 128_000


# --- the registry, the spec and the CLI -------------------------------------------------------------------------------
def test_torchtune_is_a_known_stack_with_its_own_recipe():
    fw = get("torchtune")
    assert "torchtune" in KNOWN and fw is FRAMEWORKS["torchtune"] and fw.recipe is RECIPES["torchtune"]
    assert (fw.default_precision, fw.supports_amp, fw.zero_stages, fw.fully_shards) == ("bf16", False, (0, 3), False)


def test_torchtune_refuses_autocast_and_zero_1_and_2():
    with pytest.raises(SpecError, match="autocast"):
        make_training(framework="torchtune", precision="amp")
    for zero in (1, 2):
        with pytest.raises(SpecError, match="zero_stage 0 or 3"):
            make_training(framework="torchtune", precision="bf16", zero_stage=zero)


def test_several_gpus_without_sharding_get_a_caveat():
    caveat = get("torchtune").memory_caveat
    assert "FSDP2" in caveat(_spec(global_batch=2), Parallelism(dp=2))
    assert caveat(_spec(), Parallelism(dp=1)) is None
    assert caveat(_spec(zero_stage=3, global_batch=2), Parallelism(dp=2)) is None


def test_the_cli_runs_the_torchtune_stack_at_its_default_precision(capsys):
    assert main(["memory", "--model", "llama-3.1-8b", "--seq-len", "2048", "--framework", "torchtune",
                 "--loss-chunks", "8", "--recompute", "full", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["framework"] == "torchtune"
    from frenzy_core.models import ZOO

    want = predict_memory(ZOO["llama-3.1-8b"], TrainingSpec(seq_len=2048, global_batch=1, precision="bf16",
                                                            framework="torchtune", loss_chunks=8, recompute="full"))
    assert out["total_bytes"] == want.total_bytes
    assert main(["memory", "--model", "gpt2", "--framework", "torchtune", "--precision", "amp"]) == 2
    assert "precision" in capsys.readouterr().err


def test_the_unknown_band_covers_torchtune():
    spec = _spec(loss_chunks=4)
    low, high = predict_memory_band(TINY, spec.model_copy(update={"framework": "unknown"}), overhead=NO_OVERHEAD)
    tt = predict_memory(TINY, spec, overhead=NO_OVERHEAD)
    assert low.total_bytes <= tt.total_bytes <= high.total_bytes


def test_the_published_torchtune_rows_are_predicted_with_the_torchtune_stack():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "data" / "published_finetune_peaks.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tt = [r for r in rows if r["stack"] == "torchtune"]
    # 9 README "Optimization flags" rows (Llama 3.2 3B) and 5 Llama-2-7B tutorial rows
    assert len(tt) == 14 and all(r["training"]["framework"] == "torchtune" for r in tt)
