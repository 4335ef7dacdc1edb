"""The litgpt stack (frenzy_core/frameworks/litgpt.py, read at Lightning-AI/litgpt@8641822b): each of its terms
worked by hand from the tensor shapes of lit_gpt/model.py, lit_gpt/lora.py, lit_gpt/rmsnorm.py and finetune/lora.py,
and the registry / CLI path."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from frenzy_core.cli import main
from frenzy_core.frameworks import FRAMEWORKS, KNOWN, get, litgpt, pytorch
from frenzy_core.memory import layer_activations, lora_zero_pad_source_bytes
from frenzy_core.memory.phases import stage_terms
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import RECIPES
from frenzy_core.training import TrainingSpec

# A Llama-shaped model small enough to count by hand: h = 64, 4 heads of 16, ffn 128, V = 1,000, untied head
TINY = ModelSpec(name="tiny-llama", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                 mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=512,
                 norm_kind="rmsnorm", bias=False)
TINY_GQA = TINY.model_copy(update={"name": "tiny-gqa", "num_kv_heads": 2})  # 2 query groups: k and v are 2 x 16 = 32 wide
S = 32  # tokens of one micro-batch
# finetune/lora.py at 8641822b: r = 8 (4 here), lora_query + lora_value, lora_dropout 0.05, bf16-true
LORA = dict(seq_len=S, global_batch=1, micro_batch=1, precision="bf16", framework="litgpt", lora_rank=4,
            lora_targets="q,v", lora_dropout=0.05)


def _per_token(model, recipe, **fields) -> float:
    la = layer_activations(model, TrainingSpec(**{**LORA, **fields}), recipe)
    return la.replicated + la.split


# --- LoRAQKVLinear.zero_pad ------------------------------------------------------------------------------------------
def test_zero_pad_source_is_the_adapted_q_and_v_width_in_bf16():
    # after_B is (tokens, sum(qkv_shapes)) = (tokens, n_embd + kv_embd_size) = 64 + 64 wide; index_copy keeps it
    # as its source: 2 B x 128 = 256 B per token
    assert lora_zero_pad_source_bytes(TINY, TrainingSpec(**LORA), 2) == 256
    # GQA: kv_embd_size = in_features // (n_head // n_query_groups) = 64 // 2 = 32: 2 B x (64 + 32) = 192
    assert lora_zero_pad_source_bytes(TINY_GQA, TrainingSpec(**LORA), 2) == 192
    # only q adapted: 2 B x 64 = 128
    assert lora_zero_pad_source_bytes(TINY, TrainingSpec(**{**LORA, "lora_targets": "q"}), 2) == 128


def test_zero_pad_keeps_nothing_when_q_k_and_v_are_all_adapted_or_none_is():
    # `if all(self.enable_lora): return x`: no index_copy; no adapter on the fused linear: no zero_pad at all
    assert lora_zero_pad_source_bytes(TINY, TrainingSpec(**{**LORA, "lora_targets": "q,k,v"}), 2) == 0
    assert lora_zero_pad_source_bytes(TINY, TrainingSpec(**{**LORA, "lora_targets": "o"}), 2) == 0


def test_zero_pad_term_is_what_the_litgpt_layer_adds_over_the_same_recipe_without_it():
    without = replace(litgpt.RECIPE, lora_qkv_zero_pad=False)
    assert _per_token(TINY, litgpt.RECIPE) - _per_token(TINY, without) == 256


def test_litgpt_lora_layer_by_hand():
    # One block of lit_gpt/lora.py's GPT under LoRA on q and v (dropout 0.05), bf16-true, per token:
    #   norm_1: x (2 x 64 = 128) + rstd (4)                                              132
    #   LoRAQKVLinear: dropout mask (1 x 64) + dropped copy (2 x 64) kept by lora_A       192
    #     after_A, conv1d's input (2 x 2r = 2 x 8 = 16); zero_pad's source (256)           272
    #   SDPA: v is a view of the fused qkv output, kept whole (2 x 192 = 384); the rotated
    #     q and k, new tensors from torch.cat (2 x 64 each = 256); output (128); fp32
    #     log-sum-exp (4 x 4 heads = 16)                                                  784
    #   norm_2: x (128) + rstd (4)                                                        132
    #   LLaMAMLP: silu's input x_fc_1 (2 x 128), its output (256), x_fc_2 (256); the
    #     frozen proj keeps nothing                                                       768
    assert _per_token(TINY, litgpt.RECIPE) == 132 + 192 + 272 + 784 + 132 + 768  # = 2,280


# --- CausalSelfAttention: GQA copies ---------------------------------------------------------------------------------
def test_gqa_reshapes_copy_and_widen_k_and_v_while_mha_reshapes_are_views():
    recipe = replace(pytorch.RECIPE, gqa_reshape_copies=True)
    full = dict(lora_rank=0, lora_targets="all-linear", lora_dropout=0.0)
    # GQA (4 heads, 2 groups, hs 16): fused output (64 + 32 + 32 = 128 wide) kept whole by v's view and the rotated
    # q (64) and k (32): 2 x (128 + 96) = 448 B. LitGPT: k and v expanded to 4 heads and copied, the rotated q
    # (64) and k (64) and the widened v (64): 2 x 192 = 384 B, 64 B fewer
    assert _per_token(TINY_GQA, pytorch.RECIPE, **full) - _per_token(TINY_GQA, recipe, **full) == 64
    # MHA: `qkv.view(...).permute(...)`, split and reshape are views: nothing changes
    assert _per_token(TINY, pytorch.RECIPE, **full) == _per_token(TINY, recipe, **full)


# --- LLaMAMLP: fc_1 and fc_2 are separate LoRALinear modules ---------------------------------------------------------
def test_separate_fc_1_and_fc_2_adapters_each_keep_their_own_dropped_copy():
    mlp = dict(lora_targets="gate,up", lora_dropout=0.1)
    # each LoRALinear's nn.Dropout keeps a 1-byte mask and lora_A keeps the 2-byte dropped copy of x (64 wide):
    # 3 x 64 = 192 B per adapter; one fused gate|up adapter would keep one, the two separate ones keep two
    fused = _per_token(TINY, pytorch.RECIPE, **mlp)
    separate = _per_token(TINY, replace(pytorch.RECIPE, separate_mlp_linears=True), **mlp)
    assert separate - fused == 192


# --- RMSNorm: `self.weight * x_normed` in bf16 -----------------------------------------------------------------------
def test_rmsnorm_weight_product_keeps_x_normed_only_when_the_weight_trains():
    recipe = replace(pytorch.RECIPE, rmsnorm_weight_keeps_normed=True)
    full = dict(lora_rank=0, lora_targets="all-linear", lora_dropout=0.0)
    # full fine-tuning: each of the block's 2 norms keeps x_normed, bf16, 64 wide: 2 x 2 x 64 = 256 B per token
    assert _per_token(TINY, recipe, **full) - _per_token(TINY, pytorch.RECIPE, **full) == 256
    # LoRA: mark_only_lora_as_trainable freezes the weight: MulBackward keeps only the weight
    assert _per_token(TINY, recipe) == _per_token(TINY, pytorch.RECIPE)


# --- finetune/lora.py: the logits list held through backward ---------------------------------------------------------
def test_held_logits_are_fp32_chunks_of_every_token(monkeypatch):
    training = TrainingSpec(**LORA)
    held = stage_terms(TINY, training)["head_activations"]
    monkeypatch.setitem(RECIPES, "litgpt", replace(litgpt.RECIPE, logits_held_through_backward=False))
    dropped = stage_terms(TINY, training)["head_activations"]
    # Fabric's convert_output casts the head's bf16 chunks to fp32: 32 tokens x 1,000 logits x 4 B = 128,000 B
    assert held - dropped == S * 1000 * 4


# --- registry and CLI ------------------------------------------------------------------------------------------------
def test_litgpt_is_registered_as_a_known_stack_with_bf16_true_by_default():
    fw = get("litgpt")
    assert fw is FRAMEWORKS["litgpt"] and "litgpt" in KNOWN and RECIPES["litgpt"] is litgpt.RECIPE
    assert fw.default_precision == "bf16"  # Fabric "bf16-true"
    assert (fw.supports_cp, fw.supports_vp, fw.supports_ep, fw.zero_stages) == (False, False, False, (0, 3))


def test_litgpt_refuses_zero_stage_1():
    with pytest.raises(ValueError, match="litgpt"):
        TrainingSpec(seq_len=S, global_batch=1, micro_batch=1, framework="litgpt", zero_stage=1)


def test_cli_memory_framework_litgpt_uses_bf16_params(capsys):
    assert main(["memory", "--model", "gpt2", "--seq-len", "128", "--framework", "litgpt", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["framework"] == "litgpt"
    # bf16-true: the weights are 2 B per parameter
    assert out["breakdown"]["weights"] == 2 * out["parameters"]
