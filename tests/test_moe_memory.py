"""Megatron-Core MoE terms (frenzy_core.memory, recipe "megatron"), each worked by hand on a tiny MoE config.

Tiny model: h = 16, 2 layers, 4 experts of GELU width 64 (no biases), top-2, bf16 (2 B activations). The terms come
from megatron/core/transformer/moe at d98e8a64 (docs/memory.md, "MoE (Megatron)").
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from frenzy_core.cli import main
from frenzy_core.errors import SpecError
from frenzy_core.memory import NO_OVERHEAD, layer_activations, megatron_expert_inner_bytes, predict_memory
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import RECIPES
from frenzy_core.training import Parallelism, TrainingSpec, check_parallelism

TINY_MOE = ModelSpec(name="tiny-moe", vocab_size=128, hidden_size=16, num_layers=2, num_heads=2, ffn_size=64,
                     num_experts=4, moe_top_k=2, bias=False, max_positions=64)
H, FFN, E, K = 16, 64, 4, 2
MEGATRON = RECIPES["megatron"]
# the megatron recipe as it was before these terms: the expert output kept by a probs multiplication, no maps
PLAIN_MOE = replace(MEGATRON, moe_probs_in_experts=False, moe_allgather_dispatcher=False)


def _spec(**kw):
    base = dict(seq_len=64, global_batch=8, micro_batch=2, precision="bf16-master", attention="flash",
                framework="megatron", sequence_parallel=True)
    return TrainingSpec(**{**base, **kw})


def _states(r):
    return r.weights_bytes + r.gradients_bytes + r.optimizer_bytes


def test_gelu_expert_keeps_fc1_output_gelu_output_and_its_weighted_copy():
    # experts.py TEGroupedMLP bias_act_func (unfused GELU): F.gelu keeps fc1's output (2 x 64), the probs mul keeps
    # the GELU output (2 x 64), fc2 keeps the weighted bf16 copy (2 x 64): 384 B per routed token
    assert megatron_expert_inner_bytes(TINY_MOE, 2, FFN) == 3 * 2 * 64 == 384
    swiglu = TINY_MOE.model_copy(update={"mlp_kind": "swiglu"})
    # WeightedSwiGLUFunction saves fc1's 2 x 64 output; fc2 keeps the weighted 64-wide output: 3 x 2 x 64
    assert megatron_expert_inner_bytes(swiglu, 2, FFN) == 2 * 2 * 64 + 2 * 64 == 384


def test_megatron_moe_layer_saves_the_weighted_copy_and_not_the_expert_output():
    training = _spec()
    got = layer_activations(TINY_MOE, training, MEGATRON, moe_layer=True)
    plain = layer_activations(TINY_MOE, training, PLAIN_MOE, moe_layer=True)
    # split (x 1/t): per routed copy one more 64-wide bf16 tensor (the probs-weighted fc2 input): 2 x 2 x 64
    assert got.split - plain.split == K * 2 * FFN == 256
    # routed (gathered, never / t): per copy the dispatched input (2 x 16), the int64 sorted index and the fp32
    # permuted prob; no expert output; per token the all-gather dispatcher's maps over the 4 experts
    # (local_map + masked_select's mask, 1 B each, and its saved probs, 4 B)
    assert got.routed == K * (2 * H + 8 + 4) + E * (1 + 1 + 4) == 112
    assert plain.routed == K * (2 * H + 2 * H) == 128
    assert got.replicated == plain.replicated and got.scores == plain.scores


def test_dense_layers_and_other_recipes_are_unchanged():
    for name in ("pytorch", "hf", "deepspeed"):
        recipe = RECIPES[name]
        assert not recipe.moe_probs_in_experts and not recipe.moe_allgather_dispatcher
    dense = TINY_MOE.model_copy(update={"num_experts": 0})
    assert layer_activations(dense, _spec(), MEGATRON) == layer_activations(dense, _spec(), PLAIN_MOE)


def test_all_gather_dispatcher_keeps_its_global_buffer(monkeypatch):
    # token_dispatcher.py MoEAllGatherTokenDispatcher.token_dispatch: the tp x ep group's tokens in
    # GlobalMemoryBuffer "mpu": s b / t = 64 x 2 / 2 = 64 tokens per GPU, x etp (2) x ep (2) = 256 tokens x 16 x 2 B
    training, par = _spec(), Parallelism(dp=2, tp=2, ep=2)
    got = predict_memory(TINY_MOE, training, par, overhead=NO_OVERHEAD)
    monkeypatch.setitem(RECIPES, "megatron", replace(MEGATRON, moe_allgather_dispatcher=False))
    without = predict_memory(TINY_MOE, training, par, overhead=NO_OVERHEAD)
    assert got.transient_bytes - without.transient_bytes == 256 * H * 2 == 8192
    # and the maps: 2 layers x 128 tokens x (etp / t = 1) x 4 experts x 6 B
    assert got.activations_bytes - without.activations_bytes == 2 * 128 * E * 6 == 6144


def test_a_group_of_one_gathers_nothing():
    training = _spec(sequence_parallel=False)
    got = predict_memory(TINY_MOE, training, Parallelism(dp=4), overhead=NO_OVERHEAD)
    assert got.transient_bytes == 0  # tp = ep = 1: gather_from_sequence_parallel_region returns its input


def test_grouped_gemm_adds_te_multi_stream_cublas_workspaces():
    # TE general_grouped_gemm: 4 compute streams x (32 MiB + 1 KiB) cuBLAS workspaces, cached for the run
    par = Parallelism(dp=2, tp=2, ep=2)
    plain = predict_memory(TINY_MOE, _spec(), par, overhead=NO_OVERHEAD)
    grouped = predict_memory(TINY_MOE, _spec(moe_grouped_gemm=True), par, overhead=NO_OVERHEAD)
    assert grouped.transient_bytes - plain.transient_bytes == 4 * (32 * 2**20 + 1024) == 134_221_824
    # they are there in the optimizer step too (the per-stage peaks move together)
    assert grouped.per_stage_allocated_bytes[0] - plain.per_stage_allocated_bytes[0] == 134_221_824


def test_grouped_gemm_is_megatrons_option():
    with pytest.raises(ValueError, match="moe_grouped_gemm"):
        TrainingSpec(moe_grouped_gemm=True, framework="pytorch")
    assert TrainingSpec(moe_grouped_gemm=True, framework="unknown").moe_grouped_gemm
    with pytest.raises(ValueError, match="autocast"):  # "unknown" would leave no recipe to run it
        TrainingSpec(moe_grouped_gemm=True, framework="unknown", precision="amp")
    # with the stack unknown, only Megatron runs a grouped-GEMM job: the band is its recipe
    got = predict_memory(TINY_MOE, _spec(framework="unknown", moe_grouped_gemm=True), Parallelism(dp=2, tp=2, ep=2))
    assert got == predict_memory(TINY_MOE, _spec(moe_grouped_gemm=True), Parallelism(dp=2, tp=2, ep=2))


def test_expert_tensor_parallelism_splits_experts_by_etp_not_tp():
    # 2 layers x 4 experts x 2 x 16 x 64 = 16,384 expert parameters. tp = 2, ep = 2: etp = tp holds 16,384 / 4 =
    # 4,096, etp = 1 holds 16,384 / 2 = 8,192 (2 B weights + 4 B main grads + 12 B master/Adam unsharded).
    training = _spec()
    as_tp = predict_memory(TINY_MOE, training, Parallelism(dp=2, tp=2, ep=2), overhead=NO_OVERHEAD)
    etp1 = predict_memory(TINY_MOE, training, Parallelism(dp=2, tp=2, ep=2, etp=1), overhead=NO_OVERHEAD)
    assert _states(etp1) - _states(as_tp) == (8192 - 4096) * 18
    # etp = 0 means tp: the same prediction as an explicit etp = 2
    explicit = predict_memory(TINY_MOE, training, Parallelism(dp=2, tp=2, ep=2, etp=2), overhead=NO_OVERHEAD)
    assert explicit == as_tp
    # routed copies: each GPU's 64 tokens gathered over etp x ep = 2 ranks (not 4), half to its experts, top-2:
    # 128 copies instead of 256, so the 112 B of routed terms per token (above) halve: 2 layers x 128 x 112 / 2;
    # the inner-width terms do not change (half the copies, twice the width)
    assert as_tp.activations_bytes - etp1.activations_bytes == 2 * 128 * 112 // 2 == 14_336
    # and the gather buffer covers 2 ranks' tokens, not 4: 128 fewer tokens x 16 x 2 B
    assert as_tp.transient_bytes - etp1.transient_bytes == 128 * H * 2


def test_distributed_optimizer_shards_expert_states_over_the_expert_data_parallel_group():
    # expert-dp = tp x dp x cp / (etp x ep) with tp = 2, dp = 2, ep = 2: etp = 2 -> 1 rank, etp = 1 -> 2 ranks.
    # Experts on a GPU: 4,096 (etp 2) or 8,192 (etp 1), x 12 B (fp32 master + Adam) / expert-dp = 49,152 B either way.
    # Dense on a GPU: per layer (attention 4 x 16 x 16 + router 4 x 16) / t + two LayerNorms 2 x 32 = 608, x 2
    # layers; embedding 128 x 16 / t = 1,024; positions 64 x 16 = 1,024; final norm 32: 3,296 params x 12 / dp.
    # (memory.py splits the router by t with the other MoE-block weights; Megatron replicates it: 64 params off.)
    training = _spec(distributed_optimizer=True)
    for etp in (2, 1):
        got = predict_memory(TINY_MOE, training, Parallelism(dp=2, tp=2, ep=2, etp=etp), overhead=NO_OVERHEAD)
        assert got.optimizer_bytes == 3296 * 12 / 2 + 49_152 == 68_928


def test_etp_validation_names_the_field():
    training = _spec()
    dense = TINY_MOE.model_copy(update={"num_experts": 0})
    cases = [
        (dense, Parallelism(dp=2, tp=2, etp=1)),  # no experts to split
        (TINY_MOE, Parallelism(dp=1, tp=2, ep=2, etp=4)),  # etp x ep = 8 does not divide tp x dp = 2
        (TINY_MOE, Parallelism(dp=2, tp=2, etp=-1)),  # negative
        (TINY_MOE.model_copy(update={"expert_ffn_size": 63}), Parallelism(dp=2, tp=1, etp=2)),  # 63 % 2
    ]
    for model, par in cases:
        with pytest.raises(SpecError) as err:
            check_parallelism(model, training, par)
        assert err.value.field == "etp"


def test_etp_lets_ep_tile_tensor_parallel_ranks():
    # Megatron CI gpt3_mcore_tp2_pp2_ep2_etp2: tp 4, dp 1, ep 2, etp 2: the expert grid re-tiles the 4 tp ranks
    training = _spec(global_batch=2)
    check_parallelism(TINY_MOE, training, Parallelism(dp=1, tp=2, ep=2, etp=1))
    with pytest.raises(SpecError) as err:
        check_parallelism(TINY_MOE, training, Parallelism(dp=1, tp=2, ep=2))  # etp = tp = 2: 2 x 2 > 2 ranks
    assert err.value.field == "ep"


def test_more_experts_per_token_never_lowers_megatron_memory():
    training, par = _spec(), Parallelism(dp=2, tp=2, ep=2)
    totals = [predict_memory(TINY_MOE.model_copy(update={"moe_top_k": k}), training, par).total_bytes
              for k in (1, 2, 3, 4)]
    assert totals == sorted(totals) and totals[0] < totals[-1]


def test_expert_parallelism_splits_expert_states():
    training = _spec(sequence_parallel=False, global_batch=16)
    states = [_states(predict_memory(TINY_MOE, training, Parallelism(dp=4, ep=ep), overhead=NO_OVERHEAD))
              for ep in (1, 2, 4)]
    experts = 2 * E * 2 * H * FFN  # 16,384 expert parameters, 18 B each without ZeRO
    assert states[0] - states[1] == experts // 2 * 18
    assert states[1] - states[2] == experts // 4 * 18


def test_megatron_moe_meets_the_real_gpu_targets_in_both_splits():
    from tests.test_memory import _bench

    bench = _bench()
    summary = bench.framework_summary(bench.compare_real_gpu(bench._read_jsonl(bench.REAL_GPU_FIXTURE)))
    if "megatron-moe" not in summary:
        pytest.skip(f"{bench.REAL_GPU_FIXTURE} not in this checkout")
    splits = [summary["megatron-moe"][split] for split in ("calibration", "heldout")]  # modelled features only
    assert min(st["rows"] for st in splits) >= 5
    assert max(st["median_abs_err"] for st in splits) <= bench.TARGET_REAL_MEDIAN_ABS_ERR
    assert min(st["worst_under"] for st in splits) >= bench.TARGET_REAL_WORST_UNDER


def test_cli_takes_etp_and_grouped_gemm(capsys):
    args = ["memory", "--model", "qwen3-30b-a3b", "--framework", "megatron", "--precision", "bf16-master",
            "--dp", "8", "--tp", "2", "--ep", "4", "--sequence-parallel", "--seq-len", "1024", "--json"]
    outs = []
    for extra in ([], ["--moe-grouped-gemm"], ["--etp", "1"]):
        assert main(args + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[1]["allocated_bytes"] - outs[0]["allocated_bytes"] == 4 * (32 * 2**20 + 1024)
    assert outs[2]["allocated_bytes"] > outs[0]["allocated_bytes"]  # each GPU holds whole experts
    assert main(args + ["--etp", "3"]) == 2
    assert "etp" in capsys.readouterr().err


def test_megatrons_recompute_modules_drop_the_moe_layers_norm_output_and_fc2_input_by_hand():
    # A SwiGLU MoE layer of h = 64, expert_ffn 32, top-2 under megatron at bf16 (act 2 B). "layernorm": the pre-MLP
    # TENorm (a module of its own in an MoE layer) keeps neither its output, read by the router (2 x 64 B per
    # token), nor its fp32 rstd (4 B); "moe_act": each routed copy keeps fc1's 2 x 32 output but not fc2's 32-wide
    # input: 2 copies x 2 B x 32 fewer. The dense layers of the same model (norms fused into LayerNormLinear) and
    # the attention block do not change.
    from frenzy_core.training import TrainingSpec

    moe = ModelSpec(name="m", vocab_size=128, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                    mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", num_experts=4, moe_top_k=2,
                    expert_ffn_size=32, first_k_dense=1, max_positions=64)
    base = dict(framework="megatron", seq_len=64, global_batch=1, precision="bf16-master")
    plain = layer_activations(moe, TrainingSpec(**base))
    norm = layer_activations(moe, TrainingSpec(**base, recompute_modules=("layernorm",)))
    act = layer_activations(moe, TrainingSpec(**base, recompute_modules=("moe_act",)))
    assert plain.replicated - norm.replicated == 2 * 64 + 4 and norm.split == plain.split
    assert plain.split - act.split == 2 * 2 * 32 and act.replicated == plain.replicated
    assert act.routed == norm.routed == plain.routed
    both = TrainingSpec(**base, recompute_modules=("layernorm", "moe_act"))
    assert layer_activations(moe, both, moe_layer=False) == layer_activations(moe, TrainingSpec(**base), moe_layer=False)


def test_recompute_modules_are_megatrons_and_add_to_none_or_selective_only():
    from frenzy_core.training import make_training

    base = dict(seq_len=64, global_batch=1, precision="bf16-master")
    assert make_training(framework="megatron", recompute="selective", recompute_modules=("moe_act",), **base)
    for kw, field, words in ((dict(framework="fsdp2", precision_="amp"), "recompute_modules", "use framework megatron"),
                             (dict(framework="megatron", recompute="full"), "recompute_modules", "already replays"),
                             (dict(framework="megatron", modules=("moe_act", "moe_act")), "recompute_modules", "twice"),
                             (dict(framework="megatron", modules=("mlp",)), "recompute_modules", "layernorm")):
        fields = {**base, "recompute_modules": kw.pop("modules", ("moe_act",))}
        if "precision_" in kw:
            fields["precision"] = kw.pop("precision_")
        with pytest.raises(SpecError) as err:
            make_training(**fields, **kw)
        assert err.value.field.startswith(field) and words in str(err.value), kw


def test_a_pipeline_stage_of_dense_layers_only_keeps_no_moe_run_buffers():
    # DeepSeek-style first_k_dense = 2 of 4 layers over pp = 2: stage 0 holds only the dense layers, so none of TE's
    # grouped-GEMM stream workspaces (allocated on the first MoE GEMM, cached for the run); stage 1 holds all of them
    from frenzy_core.memory import stage_terms
    from frenzy_core.memory.pools import TE_COMPUTE_STREAMS, TE_CUBLAS_WORKSPACE_BYTES
    from frenzy_core.models import ModelSpec
    from frenzy_core.training import Parallelism, TrainingSpec

    model = ModelSpec(name="tiny-moe", vocab_size=1024, hidden_size=128, num_layers=4, num_heads=4, ffn_size=256,
                      mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", bias=False,
                      tie_embeddings=False, max_positions=512, num_experts=8, moe_top_k=2, expert_ffn_size=128,
                      first_k_dense=2)
    training = TrainingSpec(seq_len=256, global_batch=4, micro_batch=1, precision="bf16-master", framework="megatron",
                            distributed_optimizer=True, moe_grouped_gemm=True)
    par = Parallelism(dp=1, pp=2)
    assert stage_terms(model, training, par, stage=0)["moe_run_buffers"] == 0
    assert stage_terms(model, training, par, stage=1)["moe_run_buffers"] == TE_COMPUTE_STREAMS * TE_CUBLAS_WORKSPACE_BYTES
