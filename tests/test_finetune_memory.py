"""Fine-tuning terms of frenzy_core.memory (issue 21), each worked by hand from the library code it cites:
LoRA targets / dropout / DoRA (peft), quantised bases and their backends (bitsandbytes, torchao), the loss dtype,
the optimizer-state dtype, paged optimizers, optimizer-in-backward and activation offloading (torchtune)."""

from __future__ import annotations

import json

import pytest

from frenzy_core.cli import main
from frenzy_core.errors import SpecError
from frenzy_core.memory import (
    NF4_BYTES,
    NO_OVERHEAD,
    layer_activations,
    lora_parameters,
    paged_state_fraction,
    predict_memory,
)
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.training import Parallelism, TrainingSpec, make_training

# A Llama-shaped model small enough to count by hand: h = 64, ffn = 128, V = 1,000, 2 layers, untied head
TINY = ModelSpec(name="tiny-llama", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                 mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=512,
                 norm_kind="rmsnorm", bias=False)
H, FFN, V, L, S = 64, 128, 1000, 2, 32  # S tokens of one micro-batch
BF16 = 2
BASE = dict(seq_len=S, global_batch=1, micro_batch=1, precision="bf16", framework="pytorch", lora_rank=4)


def _mem(**fields):
    return predict_memory(TINY, TrainingSpec(**{**BASE, **fields}), overhead=NO_OVERHEAD)


def _layer_bytes(**fields) -> float:
    """Per-token bytes one layer saves (t = 1): replicated + split."""
    la = layer_activations(TINY, TrainingSpec(**{**BASE, **fields}))
    return la.replicated + la.split


# --- LoRA targets --------------------------------------------------------------------------------------------------
def test_the_presets_are_their_comma_lists():
    for preset, names in (("attention", "q,k,v,o"), ("all-linear", "q,k,v,o,gate,up,down")):
        for framework in ("pytorch", "hf"):
            a = _mem(lora_targets=preset, framework=framework, precision="amp")
            b = _mem(lora_targets=names, framework=framework, precision="amp")
            assert a == b


def test_litgpt_query_value_adapters_match_its_published_trainable_counts():
    # LitGPT tutorials/resource-tables.md: r = 8 on query and value, "Trainable parameters" 4,194,304 (Llama 2 7B:
    # 32 x 8 x (4,096 + 4,096) x 2) and 6,553,600 (13B: 40 x 8 x (5,120 + 5,120) x 2)
    assert 32 * lora_parameters(ZOO["llama-2-7b"], 8, "q,v") == 4_194_304
    assert 40 * lora_parameters(ZOO["llama-2-13b"], 8, "q,v") == 6_553_600


def test_a_head_adapter_trains_r_times_h_plus_vocab_more_parameters():
    # peft lora_A (h x r) + lora_B (r x V) on lm_head, on the last stage; each trained parameter here (bf16) keeps
    # a 2-byte weight and 2-byte gradient
    a, b = _mem(lora_targets="q,v"), _mem(lora_targets="q,v,head")
    assert b.weights_bytes - a.weights_bytes == 4 * (H + V) * BF16


def test_targets_outside_the_list_are_refused_naming_the_field():
    with pytest.raises(SpecError, match="lora_targets"):
        make_training(lora_rank=8, lora_targets="q,x")
    with pytest.raises(SpecError, match="lora_targets"):
        make_training(lora_rank=8, lora_targets="q,,v")  # an empty name between commas


def test_a_target_list_is_bounded_and_the_message_stays_short():
    assert make_training(lora_rank=8, lora_targets="q,k,v,o,gate,up,down,head").lora_target_set  # 25 chars: fine
    with pytest.raises(SpecError, match="at most 64 characters") as err:
        make_training(lora_rank=8, lora_targets="q," * 100_000 + "v")
    assert len(str(err.value)) < 300


def test_under_autocast_each_separate_targeted_linear_keeps_its_own_cast_of_the_input():
    # gate_proj and up_proj are separate nn.Linear modules: under autocast each casts the norm output itself and
    # lora_A keeps that cast (peft Linear.forward: lora_A(dropout(x)), no dropout here): two bf16 copies of x for
    # adapters on both, one for an adapter on up alone, one when the two linears are fused into one
    from frenzy_core.memory.adapters import lora_layer_terms

    def fc1(targets: str, separate: bool) -> float:
        training = TrainingSpec(**{**BASE, "precision": "amp", "lora_targets": targets})
        return lora_layer_terms(TINY, training, BF16, FFN, True, True, separate).fc1_input

    assert fc1("gate,up", True) == 2 * BF16 * H
    assert fc1("up", True) == BF16 * H
    assert fc1("gate,up", False) == BF16 * H


# --- dropout and DoRA (peft/tuners/lora/layer.py Linear.forward, dora.py) ----------------------------------------
def test_dropout_on_separate_q_and_v_keeps_a_mask_and_a_copy_per_adapter():
    # hf: separate q_proj / v_proj, each adapter its own nn.Dropout, and PEFT's fp32 adapters on the bf16 base:
    # each casts x to fp32 first. Without dropout each lora_A keeps its fp32 cast (4h, two of them: 8h); with it
    # each keeps its fp32 dropped copy (4h) and a bool mask (h): 2 x 5h - 8h = 2h per token
    plain = _layer_bytes(framework="hf", lora_targets="q,v")
    dropped = _layer_bytes(framework="hf", lora_targets="q,v", lora_dropout=0.05)
    assert dropped - plain == 2 * H
    # the same casts by hand: q and v's two fp32 copies of x stand where one bf16 x would (the base keeps none)
    from frenzy_core.memory.adapters import lora_layer_terms

    training = TrainingSpec(**{**BASE, "lora_targets": "q,v"})
    assert lora_layer_terms(TINY, training, BF16, FFN, False, True, True, cast_bytes=4).qkv_input == 2 * 4 * H
    assert lora_layer_terms(TINY, training, BF16, FFN, False, True, True).qkv_input == BF16 * H


def test_dropout_on_a_fused_qkv_is_one_copy():
    # pytorch recipe (fused QKV, LitGPT's LoRAQKVLinear: `self.lora_dropout(x)` once): x (2h) -> copy + mask (3h)
    plain = _layer_bytes(lora_targets="q,v")
    dropped = _layer_bytes(lora_targets="q,v", lora_dropout=0.05)
    assert dropped - plain == 1 * H


def test_dora_keeps_the_base_and_lora_outputs_of_every_targeted_linear():
    # dora.py: `(mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling`: two out-wide bf16
    # tensors per linear; q and v are 64 and 64 wide here (4 heads x 16); the magnitude vectors add q_dim + kv_dim
    lora = _layer_bytes(lora_targets="q,v")
    dora = _layer_bytes(lora_targets="q,v", lora_variant="dora")
    assert dora - lora == 2 * BF16 * (64 + 64)
    assert lora_parameters(TINY, 4, "q,v", "dora") - lora_parameters(TINY, 4, "q,v") == 64 + 64


# --- quantised bases and their backends ----------------------------------------------------------------------------
def test_legacy_bitsandbytes_keeps_the_inputs_of_frozen_linears():
    # bitsandbytes < 0.43.2 MatMul4Bit.forward `ctx.tensors = (A, B)`: with adapters on q, v only, the MLP's input
    # (h, one fused gate|up in the pytorch recipe) and the down projection's input (ffn) come back; q/k/v's input is
    # the adapters' anyway, o's is the flash output
    new = _layer_bytes(lora_targets="q,v", base_quant="nf4")
    legacy = _layer_bytes(lora_targets="q,v", base_quant="nf4", quant_backend="bitsandbytes-legacy")
    assert legacy - new == BF16 * (H + FFN)
    a = _mem(lora_targets="q,v", base_quant="nf4")
    b = _mem(lora_targets="q,v", base_quant="nf4", quant_backend="bitsandbytes-legacy")
    assert b.peak_phase == "backward-start"
    assert b.activations_bytes - a.activations_bytes == S * L * BF16 * (H + FFN)


def test_torchao_nf4_keeps_only_the_weight():
    # torchao LinearNF4.forward: ctx.save_for_backward(weight): the same saved set as current bitsandbytes
    a = _mem(lora_targets="q,v", base_quant="nf4-dq")
    b = _mem(lora_targets="q,v", base_quant="nf4-dq", quant_backend="torchao")
    assert a == b


def test_int8_stores_one_byte_and_a_row_scale_and_keeps_its_input():
    # LLM.int8 (Int8Params): int8 weight + fp32 SCB per output row; MatMul8bitLt saves (CAt, subA, A)
    linears = L * (H * 64 * 3 + 64 * H + 3 * H * FFN)  # q, k, v, o + gate, up, down
    bf16 = _mem(lora_targets="q,v")
    int8 = _mem(lora_targets="q,v", base_quant="int8")
    assert bf16.weights_bytes - int8.weights_bytes == round(linears * (BF16 - (1 + 4 / H)))
    assert _layer_bytes(lora_targets="q,v", base_quant="int8") - _layer_bytes(lora_targets="q,v") == BF16 * (H + FFN)


def test_a_quantised_head_is_stored_as_nf4():
    a = _mem(lora_targets="q,v", base_quant="nf4")
    b = _mem(lora_targets="q,v", base_quant="nf4", quant_head=True)
    assert a.weights_bytes - b.weights_bytes == round(V * H * (BF16 - NF4_BYTES["nf4"]))


@pytest.mark.parametrize("fields,field", [
    (dict(quant_backend="torchao", base_quant="nf4"), "nf4-dq"),
    (dict(quant_backend="torchao", base_quant="int8"), "nf4-dq"),
    (dict(quant_head=True), "base_quant"),
    (dict(lora_dropout=1.0), "lora_dropout"),
])
def test_quantisation_and_dropout_switches_are_validated(fields, field):
    with pytest.raises(SpecError, match=field):
        make_training(lora_rank=8, **fields)


def test_lora_switches_need_a_rank():
    for fields in (dict(lora_dropout=0.1), dict(lora_variant="dora")):
        with pytest.raises(SpecError, match="lora_rank"):
            make_training(**fields)


# --- the loss ------------------------------------------------------------------------------------------------------
def test_a_bf16_loss_keeps_half_the_fp32_bytes_per_logit():
    # fp32: saved log-softmax + two gradients = 12 B per logit; bf16: 6 B; 8 chunks: 2 + 4 / 8
    fp32 = _mem(lora_targets="q,v")
    bf16 = _mem(lora_targets="q,v", loss_dtype="bf16")
    chunked = _mem(lora_targets="q,v", loss_dtype="bf16", loss_chunks=8)
    assert (fp32.logits_bytes, bf16.logits_bytes, chunked.logits_bytes) == (S * V * 12, S * V * 6, S * V * 2.5)


def test_megatron_refuses_a_bf16_loss():
    with pytest.raises(SpecError, match="loss_dtype"):
        make_training(framework="megatron", precision="bf16-master", loss_dtype="bf16")


# --- the optimizer -------------------------------------------------------------------------------------------------
def test_optimizer_dtype_overrides_the_precisions_state_bytes():
    assert TrainingSpec(precision="amp", optimizer_dtype="bf16").optimizer_bytes() == (4.0, 2.0)
    assert TrainingSpec(precision="bf16", optimizer_dtype="fp32").optimizer_bytes() == (8.0, 4.0)
    with pytest.raises(SpecError, match="optimizer_dtype"):
        make_training(optimizer="adamw-8bit", optimizer_dtype="bf16")


def test_a_paged_optimizer_leaves_only_states_of_small_tensors_on_the_gpu():
    # bitsandbytes get_state_buffer: numel < 1e5 -> a GPU tensor, else managed memory. Full training of Llama-2-7B:
    # only the 65 RMSNorm weights (2 per layer + the final one, 4,096 each) keep their states (8 B fp32 AdamW)
    model, full = ZOO["llama-2-7b"], dict(seq_len=128, global_batch=1, precision="bf16", optimizer="adamw-fused")
    norms = 65 * 4096
    paged = predict_memory(model, TrainingSpec(**full, optimizer_dtype="fp32", paged_optimizer=True),
                           overhead=NO_OVERHEAD)
    assert paged.optimizer_bytes == pytest.approx(norms * 8, rel=1e-6)
    # LoRA r = 8 on 4,096-wide linears: every matrix is 32,768 elements, none paged
    assert paged_state_fraction(model, TrainingSpec(lora_rank=8, lora_targets="q,v")) == 0.0
    with pytest.raises(SpecError, match="paged_optimizer"):
        make_training(paged_optimizer=True, optimizer="sgd")


def test_optimizer_in_backward_holds_one_gradient():
    # torchtune optimizer_in_bwd: each parameter steps in its gradient hook; the largest is the 1,000 x 64 head
    # (bf16 gradient); the optimizer-step phase never holds all the gradients
    spec = TrainingSpec(seq_len=S, global_batch=1, precision="bf16")
    plain = predict_memory(TINY, spec, overhead=NO_OVERHEAD)
    got = predict_memory(TINY, spec.model_copy(update={"optimizer_in_backward": True}), overhead=NO_OVERHEAD)
    P = TINY.parameter_count()
    assert (plain.peak_phase, plain.gradients_bytes) == ("optimizer-step", P * BF16)  # every bf16 gradient
    assert (got.peak_phase, got.gradients_bytes) == ("backward-start", 0)  # none before the first hook fires
    # its step phase: one head gradient + its foreach temporary (2 B bf16) beside the weights and states
    assert plain.total_bytes - got.total_bytes > (P - V * H) * BF16
    with pytest.raises(SpecError, match="optimizer_in_backward"):
        predict_memory(TINY, TrainingSpec(seq_len=S, global_batch=2, precision="bf16", optimizer_in_backward=True))


def test_activation_offload_keeps_one_layer_on_the_gpu():
    # torchtune OffloadActivations: every saved tensor of >= 1 KiB goes to the host; one layer's set is on the GPU
    fields = dict(lora_targets="q,v")
    a, b = _mem(**fields), _mem(**fields, activation_offload=True)
    assert a.activations_bytes - b.activations_bytes == pytest.approx((L - 1) * S * _layer_bytes(**fields), abs=2)


# --- the command line ----------------------------------------------------------------------------------------------
def test_the_cli_takes_every_fine_tuning_flag(capsys):
    assert main(["memory", "--model", "llama-2-7b", "--seq-len", "1304", "--precision", "bf16", "--lora-rank", "8",
                 "--lora-targets", "q,v", "--lora-dropout", "0.05", "--base-quant", "nf4", "--quant-backend",
                 "bitsandbytes-legacy", "--quant-head", "--loss-dtype", "bf16", "--loss-chunks", "11",
                 "--optimizer-dtype", "fp32", "--paged-optimizer", "--optimizer", "adamw-fused", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out


def test_the_cli_names_a_bad_target(capsys):
    assert main(["memory", "--model", "gpt2", "--lora-rank", "8", "--lora-targets", "q,x"]) == 2
    assert "lora_targets" in capsys.readouterr().err


def test_the_split_is_unchanged_by_the_defaults():
    # every new field at its default is the TrainingSpec the planner had: same prediction, field by field
    spec = TrainingSpec(seq_len=S, global_batch=2, micro_batch=1, lora_rank=4)
    explicit = TrainingSpec(seq_len=S, global_batch=2, micro_batch=1, lora_rank=4, lora_dropout=0.0,
                            lora_variant="lora", quant_backend="bitsandbytes", quant_head=False, loss_dtype="fp32",
                            optimizer_dtype="auto", paged_optimizer=False, optimizer_in_backward=False,
                            activation_offload=False)
    assert predict_memory(TINY, spec, Parallelism(dp=2)) == predict_memory(TINY, explicit, Parallelism(dp=2))


# --- the published truth (bench/data/published_finetune_peaks.jsonl) ------------------------------------------------
def test_every_published_row_cites_its_source_and_builds_a_training_spec():
    from bench_support import load_bench

    bench = load_bench("finetune_accuracy")
    held_out, load_rows, model_of = bench.held_out, bench.load_rows, bench.model_of

    rows = load_rows()
    # 26 single-GPU, 10 LitGPT FSDP1 multi-GPU, 5 torchtune Llama-2-7B tutorial rows (max_memory_reserved)
    assert len({r["id"] for r in rows}) == len(rows) == 41
    assert {r["truth_metric"] for r in rows} == {"allocated", "reserved"}
    for row in rows:
        assert all(row["source"][k] for k in ("repo", "path", "commit")) and len(row["source"]["commit"]) == 40
        assert row["quote"] and row["truth_bytes"] > 0 and row["method"] in ("full", "lora", "qlora")
        make_training(**row["training"])
        model_of(row)
    # the rule is sha256(id) % 3 == 0, fixed in the fixture's .md before any comparison
    assert sum(held_out(r["id"]) for r in rows) == 12


def test_lora_adapters_split_over_tensor_parallel_ranks():
    # q,k,v,o adapters of rank 4 on h = 64 (4 heads, kv = h): 4 x (64 + 64) x 4 = 2,048 per layer, 4,096 over 2
    # layers; under Megatron's bf16-master the trained parameters keep fp32 main gradients (4 bytes) and Adam's
    # master + 2 states (12 bytes); tensor parallelism splits each adapter with its linear: 1 / t of them per rank
    assert 2 * lora_parameters(TINY, 4, "q,k,v,o") == 4096
    for t in (1, 2):
        tr = TrainingSpec(**{**BASE, "framework": "megatron", "precision": "bf16-master", "lora_targets": "q,k,v,o"})
        m = predict_memory(TINY, tr, Parallelism(tp=t), overhead=NO_OVERHEAD)
        assert m.gradients_bytes == 4096 * 4 / t and m.optimizer_bytes == 4096 * 12 / t, t


def test_fsdp_shards_the_frozen_base_with_the_adapters():
    # fully_shard (ZeRO-3) shards every parameter, frozen or not, over the data-parallel ranks: the 210,240 base
    # weights and the all-linear adapters of rank 4 (q, k, v, o: 4 x 128 each; gate, up: 4 x (64 + 128); down the
    # same: 4,352 per layer, 2 layers) in bf16, over d ranks
    assert TINY.parameter_count() == 210_240 and lora_parameters(TINY, 4, "all-linear") == 4352
    one = (210_240 + 2 * 4352) * BF16
    for d in (1, 2, 4):
        tr = TrainingSpec(**{**BASE, "framework": "fsdp2", "zero_stage": 3, "global_batch": 4})
        assert predict_memory(TINY, tr, Parallelism(dp=d), overhead=NO_OVERHEAD).weights_bytes == one / d, d


def test_a_gate_adapter_exists_only_on_a_gated_mlp():
    # r = 64. GPT-2's GELU MLP has no gate: "q,gate" adapts q only, A and B 64 x 768 = 49,152 elements each, under the
    # 1e5 paging threshold: nothing paged. Llama-2-7B's SwiGLU gate: A 64 x 4,096 = 262,144, B 64 x 11,008 = 704,512,
    # both paged: everything paged. (kills the mutation-seed-1 survivor `mlp_kind != 'swiglu'` -> `==` in
    # states._trained_matrices, 2026-12-03)
    from frenzy_core.memory import paged_state_fraction

    assert paged_state_fraction(ZOO["gpt2"], TrainingSpec(lora_rank=64, lora_targets="q,gate")) == 0.0
    assert paged_state_fraction(ZOO["llama-2-7b"], TrainingSpec(lora_rank=64, lora_targets="gate")) == 1.0


def test_paged_share_counts_one_head_adapter_but_one_adapter_per_layer_for_q_and_v():
    # llama-2-7b, r = 8 on q, v and the head: per layer q and v each have A (8 x 4,096) and B (4,096 x 8), 32,768
    # elements each, under bitsandbytes' 1e5 paging threshold: 4 x 32,768 x 32 layers = 4,194,304 unpaged; the
    # head (once, not per layer) has A 8 x 4,096 = 32,768 (unpaged) and B 32,000 x 8 = 256,000 (paged)
    # (kills the mutation-seed-1 survivor `1 if name == 'head' else L` -> `2 if ...` in states._trained_matrices)
    from frenzy_core.memory import paged_state_fraction

    training = TrainingSpec(lora_rank=8, lora_targets="q,v,head")
    assert paged_state_fraction(ZOO["llama-2-7b"], training) == pytest.approx(256_000 / (4_194_304 + 32_768 + 256_000))


def test_a_head_adapter_with_dropout_keeps_its_mask_and_dropped_copy_by_hand():
    # LoRA on the LM head (h = 64, V = 1000, r = 8) at bf16: lora_B keeps its r-wide input (2 x 8 B per token); with
    # dropout the adapter's nn.Dropout keeps its 1-byte mask and the dropped bf16 copy of the h-wide input
    # (2 x 64 + 64 B); DoRA adds two bf16 V-wide products (2 x 2 x 1000 B)
    from frenzy_core.memory import lora_head_bytes_per_token

    base = dict(seq_len=64, global_batch=1, precision="bf16", lora_rank=8, lora_targets="q,v,head")
    assert lora_head_bytes_per_token(TINY, TrainingSpec(**base), 2) == 16
    assert lora_head_bytes_per_token(TINY, TrainingSpec(**base, lora_dropout=0.1), 2) == 16 + (2 + 1) * 64
    dora = TrainingSpec(**base, lora_dropout=0.1, lora_variant="dora")
    assert lora_head_bytes_per_token(TINY, dora, 2) == 16 + 3 * 64 + 2 * 2 * 1000
    assert lora_head_bytes_per_token(TINY, TrainingSpec(**{**base, "lora_targets": "q,v"}), 2) == 0


def test_a_head_adapter_counts_r_x_h_plus_v_and_dora_adds_one_magnitude_per_output_row():
    # lora_A: r x h, lora_B: V x r (r = 8, h = 64, V = 1000): 8 x 1064 = 8,512; DoRA's magnitude vector has one
    # entry per output row of the head: + 1,000 (peft/tuners/lora/dora.py DoraLinearLayer.weight: out_features)
    from frenzy_core.memory import lora_head_parameters

    base = dict(seq_len=64, global_batch=1, precision="bf16", lora_rank=8, lora_targets="q,v,head")
    assert lora_head_parameters(TINY, TrainingSpec(**base)) == 8_512
    assert lora_head_parameters(TINY, TrainingSpec(**base, lora_variant="dora")) == 8_512 + 1_000
    assert lora_head_parameters(TINY, TrainingSpec(**{**base, "lora_targets": "q,v"})) == 0


@pytest.mark.parametrize("act, autocast, cast", [(2, False, 4), (4, False, 0), (2, True, 0)])
def test_peft_copies_an_adapter_input_to_fp32_only_from_a_16_bit_base_without_autocast(act, autocast, cast):
    # peft's fp32 adapters (autocast_adapter_dtype=True) make LoRA's Linear.forward cast x to fp32: a 4-byte copy
    # from a bf16 / fp16 base; an fp32 base (act = 4) is already the adapters' dtype, and autocast casts nothing
    from frenzy_core.memory.adapters import adapter_input_cast_bytes
    from frenzy_core.recipes import get_recipe

    assert adapter_input_cast_bytes(get_recipe("hf"), act, autocast) == cast
    assert adapter_input_cast_bytes(get_recipe("torchtune"), act, autocast) == 0  # its adapters stay in bf16


def test_eager_attention_keeps_the_context_only_for_an_adapter_on_o():
    """Eager attention's output projection input (the context, h wide): a frozen bf16 o_proj keeps none, so a run
    with adapters on q, v alone does not hold it; an adapter on o keeps it as lora_A's input, with lora_B's r-wide
    input beside it (no dropout, bf16 base: nothing else changes)."""
    without = _layer_bytes(lora_targets="q,v", attention="eager")
    with_o = _layer_bytes(lora_targets="q,v,o", attention="eager")
    assert with_o - without == BF16 * H + BF16 * 4
