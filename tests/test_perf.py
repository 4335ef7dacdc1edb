"""Step-time model: hand-worked numbers, Narayanan 2021's FLOPs formula, monotonicity, vectorised == scalar."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import numpy as np
import pytest

from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.perf import StepTime, attended_keys, step_time, step_time_totals, training_flops_per_step
from frenzy_core.training import Parallelism, TrainingSpec

A100 = CATALOG["A100-40GB"]  # 312 TF bf16, 1555 GB/s, NVLink 300 GB/s
GPT2 = ZOO["gpt2"]  # h 768, l 12, V 50257, 124,439,808 parameters
GPT2_PARAMS = 124_439_808

# GPT-2 small by hand: a layer is 12 h^2 + 13 h weights (qkv 3h^2 + 3h, proj h^2 + h, MLP 8h^2 + 5h, 2 norms 4h).
H, L, V, S = 768, 12, 50257, 1024
LAYER_WEIGHTS = 12 * H * H + 13 * H  # 7,087,872
# Attention scores and context over the keys a causal flash kernel computes: s / 2 per query (perf.CAUSAL_KEYS_FRACTION)
KEYS = S // 2
PER_TOKEN_FLOPS = 6 * (L * LAYER_WEIGHTS + V * H) + 12 * L * H * KEYS  # weights fwd+bwd + attention scores/context
# What the step spends time on: flash attention's backward recomputes QK^T, 2.5 forwards instead of eq. 3's 2
# (perf.FLASH_BACKWARD_FORWARDS): half a forward more of the attention core, 0.5 x 4 h keys per layer and token
FLASH_EXTRA_PER_LAYER = 2 * H * KEYS
PER_TOKEN_TIME_FLOPS = PER_TOKEN_FLOPS + L * FLASH_EXTRA_PER_LAYER


def amp(global_batch: int, micro_batch: int, **kw) -> TrainingSpec:
    return TrainingSpec(seq_len=S, global_batch=global_batch, micro_batch=micro_batch, precision="amp", **kw)


# --- FLOPs ----------------------------------------------------------------------------------------------------------
def test_flops_gpt2_by_hand():
    assert LAYER_WEIGHTS == 7_087_872
    assert training_flops_per_step(GPT2, amp(8, 8)) == pytest.approx(8 * S * PER_TOKEN_FLOPS, rel=1e-12)
    assert 8 * S * PER_TOKEN_FLOPS == pytest.approx(6.5416e12, rel=1e-4)
    # eager attention computes (and masks) all s x s scores: Narayanan's 12 l h s
    eager = training_flops_per_step(GPT2, amp(8, 8, attention="eager"))
    assert eager - 8 * S * PER_TOKEN_FLOPS == pytest.approx(8 * S * 12 * L * H * (S - KEYS), rel=1e-12)


def test_flops_recompute_adds_a_forward_of_layers_not_of_the_head():
    base = training_flops_per_step(GPT2, amp(8, 8))
    tokens = 8 * S
    full = training_flops_per_step(GPT2, amp(8, 8, recompute="full"))
    selective = training_flops_per_step(GPT2, amp(8, 8, recompute="selective"))
    assert full - base == pytest.approx(tokens * (2 * L * LAYER_WEIGHTS + 4 * L * H * KEYS), rel=1e-12)
    assert selective - base == pytest.approx(tokens * 4 * L * H * KEYS, rel=1e-12)


GPT3 = ModelSpec(name="gpt3-175b", vocab_size=51200, hidden_size=12288, num_layers=96, num_heads=96, max_positions=2048)


def test_flops_match_narayanan_eq3_for_gpt3_175b():
    """Narayanan et al. 2021 eq. 3 (full recomputation): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    b, s, h, n_layers, v = 1536, 2048, 12288, 96, 51200
    eq3 = 96 * b * s * n_layers * h**2 * (1 + s / (6 * h) + v / (16 * n_layers * h))
    # Narayanan counts all s keys per query: eager attention (flash's causal kernel halves it, attended_keys)
    full = training_flops_per_step(GPT3, TrainingSpec(seq_len=s, global_batch=b, recompute="full", attention="eager"))
    assert full == pytest.approx(eq3, rel=2e-4)  # our layers carry 13h of biases/norms beyond 12 h^2
    # Without recomputation layers and attention take 3 of the 4 passes; the LM head (6 B s h V) is never recomputed,
    # so the ratio is a little under 4/3.
    none = training_flops_per_step(GPT3, TrainingSpec(seq_len=s, global_batch=b, attention="eager"))
    no_recompute = 72 * b * s * n_layers * h**2 * (1 + s / (6 * h)) + 6 * b * s * h * v
    assert none == pytest.approx(no_recompute, rel=2e-4)
    assert 1.32 < full / none < 4 / 3


def test_flops_reproduce_narayanan_34_days_for_gpt3():
    """Narayanan 2021 Sec. 5.1: GPT-3 175B on 300B tokens, 1024 A100 at 140 TFLOP/s each, takes about 34 days."""
    per_token = training_flops_per_step(GPT3, TrainingSpec(seq_len=2048, global_batch=1, recompute="full",
                                                           attention="eager")) / 2048
    days = 300e9 * per_token / (1024 * 140e12) / 86400
    assert days == pytest.approx(34, rel=0.05)


def test_moe_flops_use_active_experts_only():
    mix = ZOO["mixtral-8x7b"]
    dense_twin = mix.model_copy(update={"num_experts": 0})
    tr = TrainingSpec(seq_len=4096, global_batch=1)
    moe, dense = training_flops_per_step(mix, tr), training_flops_per_step(dense_twin, tr)
    # top-2 of 8 experts: one more SwiGLU expert (3 x 4096 x 14336) and the router (4096 x 8) per layer per token.
    assert moe - dense == pytest.approx(4096 * 6 * 32 * (3 * 4096 * 14336 + 4096 * 8), rel=1e-12)


# --- hand-worked step times -----------------------------------------------------------------------------------------
# amp AdamW under plain PyTorch: torch.optim's foreach ops, each a pass (torch/optim/adam.py _multi_tensor_adam):
# mul_(p) r p w p; lerp_(m, g) r m g w m; mul_(v) r v w v; addcmul_(v, g, g) r v g g w v; sqrt(v) r v w q;
# div_(q) r q w q; add_(q) r q w q; addcdiv_(p, m, q) r p m q w p = 4 p + 3 g + 3 m + 5 v + 6 q accesses, 4 B each
OPT_BYTES = (4 + 3 + 3 + 5 + 6) * 4  # = 84 (a fused kernel: read param, grad, states, write param, states = 28)


def test_single_a100_by_hand():
    st = step_time(GPT2, amp(8, 8), Parallelism(), A100, mfu=0.5)
    compute = 8 * S * PER_TOKEN_TIME_FLOPS / (312e12 * 0.5)
    optimizer = GPT2_PARAMS * OPT_BYTES / 1555e9
    assert isinstance(st, StepTime)
    assert st.compute_s == pytest.approx(compute, rel=1e-12)
    assert st.compute_s == pytest.approx(0.042429, rel=1e-4)
    assert st.optimizer_s == pytest.approx(optimizer, rel=1e-12)
    assert st.tp_comm_s == st.dp_comm_s == st.pp_bubble_s == st.pp_p2p_s == 0.0
    # The A100's measured fixed per-step cost (0.121 s, Sia bert one-GPU intercept) is charged by default.
    assert st.overhead_s == 0.121
    assert st.step_time_s == pytest.approx(compute + optimizer + 0.121, rel=1e-12)
    assert st.achieved_tflops_per_gpu < 0.5 * 312
    no_overhead = step_time(GPT2, amp(8, 8), Parallelism(), A100, mfu=0.5, overhead_s=0.0)
    assert no_overhead.step_time_s == pytest.approx(compute + optimizer, rel=1e-12)


def test_catalog_defaults_on_one_t4_by_hand():
    """No mfu given: the T4's catalog figures. amp computes on tensor cores (65 TF x mfu 0.148); fp32 on 8.1 TF x 0.569."""
    t4 = CATALOG["T4"]
    st = step_time(GPT2, amp(8, 8), Parallelism(), t4)
    compute = 8 * S * PER_TOKEN_TIME_FLOPS / (65e12 * 0.148)
    # + the element-wise ops at HBM bandwidth (perf.elementwise_bytes_per_token; no explicit mfu): per layer and
    # token two LayerNorms (one kernel each: 4 + 6 bytes per element), GeLU over 4h (4 + 6), two residual adds
    # (6 + 6): 2 x 768 x 10 + 3072 x 10 + 2 x 768 x 12 = 64,512 bytes, 12 layers, at the T4's 320 GB/s
    elementwise = 8 * S * 12 * (2 * 768 * 10 + 3072 * 10 + 2 * 768 * 12) / 320e9
    optimizer = GPT2_PARAMS * OPT_BYTES / 320e9
    assert st.step_time_s == pytest.approx(compute + elementwise + optimizer + 0.214, rel=1e-12)
    fp32 = step_time(GPT2, TrainingSpec(seq_len=S, global_batch=8, micro_batch=8, precision="fp32"), Parallelism(), t4)
    assert fp32.compute_s == pytest.approx(8 * S * PER_TOKEN_TIME_FLOPS / (8.1e12 * 0.569), rel=1e-12)


def test_measured_link_efficiency_slows_the_all_reduce_by_hand():
    """2 T4 in one node: ring all-reduce of fp32 grads over PCIe at 8 GB/s x the measured 0.926."""
    st = step_time(GPT2, amp(8, 4), Parallelism(dp=2), CATALOG["T4"], mfu=0.5)
    assert st.dp_comm_s == pytest.approx(2 * (2 - 1) / 2 * GPT2_PARAMS * 4 / (8e9 * 0.926), rel=1e-12)


def test_data_parallel_inside_a_node_by_hand():
    st = step_time(GPT2, amp(8, 4), Parallelism(dp=2), A100, mfu=0.5)
    allreduce = 2 * (2 - 1) / 2 * GPT2_PARAMS * 4 / 300e9  # ring, fp32 grads, NVLink
    assert st.dp_comm_s == pytest.approx(allreduce, rel=1e-12)
    assert st.dp_comm_s == pytest.approx(1.6592e-3, rel=1e-4)
    assert st.compute_s == pytest.approx(8 * S * PER_TOKEN_TIME_FLOPS / (2 * 312e12 * 0.5), rel=1e-12)


def test_data_parallel_across_nodes_uses_the_nic():
    st = step_time(GPT2, amp(16, 1), Parallelism(dp=16), A100, mfu=0.5, network_gbit_s=100, gpus_per_node=8)
    # One ring (t x p = 1) leaves each node: the full 12.5 GB/s NIC.
    assert st.dp_comm_s == pytest.approx(2 * 15 / 16 * GPT2_PARAMS * 4 / 12.5e9, rel=1e-12)


# GPT-2 on two stages of 6 layers: the last also runs the LM head (6 V h per token), so it paces the pipeline.
LAST_OF_TWO_STAGE_FLOPS = 6 * (6 * LAYER_WEIGHTS + V * H) + 6 * (12 * H * KEYS + FLASH_EXTRA_PER_LAYER)  # per token


def test_pipeline_bubble_and_sends_by_hand():
    st = step_time(GPT2, amp(8, 1), Parallelism(pp=2), A100, mfu=0.5)
    m = 8  # global 8 / (d 1 x micro 1)
    assert LAST_OF_TWO_STAGE_FLOPS == 519_777_792  # 515,059,200 of eq. 3 + 6 layers x 2 h keys
    compute = 8 * S * LAST_OF_TWO_STAGE_FLOPS / (1 * 312e12 * 0.5)  # the last stage's work on its d x t = 1 GPU
    assert st.slowest_stage == 1
    assert st.compute_s == pytest.approx(compute, rel=1e-12)
    assert st.micro_batches == m
    assert st.pp_bubble_s == pytest.approx((2 - 1) / m * compute, rel=1e-12)
    assert st.pp_p2p_s == pytest.approx(2 * m * 1 * S * H * 2 / 300e9, rel=1e-12)  # bf16 activations, NVLink
    assert st.dp_comm_s == 0.0


def test_tensor_parallel_allreduces_by_hand():
    st = step_time(GPT2, amp(8, 2), Parallelism(tp=2), A100, mfu=0.5)
    m = 4
    per_allreduce = 2 * (2 - 1) / 2 * 2 * S * H * 2 / 300e9  # ring share of b x s x h bf16
    assert st.tp_comm_s == pytest.approx(4 * L * m * per_allreduce, rel=1e-12)
    full = step_time(GPT2, amp(8, 2, recompute="full"), Parallelism(tp=2), A100, mfu=0.5)
    assert full.tp_comm_s == pytest.approx(6 * L * m * per_allreduce, rel=1e-12)


def test_bad_split_is_rejected():
    with pytest.raises(SpecError):
        step_time(GPT2, amp(8, 1), Parallelism(pp=5), A100)


# --- properties -----------------------------------------------------------------------------------------------------
def test_more_gpus_less_compute():
    tr = amp(64, 1)
    compute = [step_time(GPT2, tr, Parallelism(dp=d), A100).compute_s for d in (1, 2, 4, 8, 16, 32)]
    assert all(a > b for a, b in zip(compute, compute[1:], strict=False))


def test_slower_network_slower_multi_node_step():
    tr = amp(64, 1)
    par = Parallelism(dp=16)
    times = [step_time(GPT2, tr, par, A100, network_gbit_s=g).step_time_s for g in (400, 100, 25, 10)]
    assert all(a < b for a, b in zip(times, times[1:], strict=False))
    inside = [step_time(GPT2, tr, Parallelism(dp=8), A100, network_gbit_s=g).step_time_s for g in (400, 10)]
    assert inside[0] == inside[1]  # one node: the network does not matter


def test_lower_link_efficiency_never_faster():
    tr = amp(64, 1)
    times = [
        step_time(GPT2, tr, Parallelism(dp=16), A100.model_copy(update={"intra_link_efficiency": e,
                                                                      "network_efficiency": e})).step_time_s
        for e in (1.0, 0.5, 0.1)
    ]
    assert times[0] < times[1] < times[2]


def test_more_gpus_never_slower_per_step_compute_on_every_catalog_type():
    tr = amp(64, 1)
    for gpu in CATALOG.values():
        compute = [step_time(GPT2, tr, Parallelism(dp=d), gpu).compute_s for d in (1, 2, 4, 8)]
        assert all(a > b for a, b in zip(compute, compute[1:], strict=False)), gpu.name


def test_lower_mfu_slower_step():
    tr = amp(64, 1)
    assert (
        step_time(GPT2, tr, Parallelism(), A100, mfu=0.2).step_time_s
        > step_time(GPT2, tr, Parallelism(), A100).step_time_s
    )


# --- vectorised -----------------------------------------------------------------------------------------------------
def test_vectorised_equals_scalar():
    model = ZOO["llama-2-7b"]  # 32 heads, 32 layers
    gpu = CATALOG["H100-80GB"]
    for recompute, zero in (("none", 0), ("full", 1), ("selective", 3)):
        tr = TrainingSpec(seq_len=4096, global_batch=64, micro_batch=1, recompute=recompute, zero_stage=zero)
        combos = [
            c
            for c in itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4))
            if tr.global_batch % (c[0] * c[3]) == 0
        ]
        d, t, p, b = (np.array(x) for x in zip(*combos, strict=True))
        kw = dict(intra_link_gbyte_s=400.0, network_gbit_s=200.0, gpus_per_node=8, mfu=0.35)
        vec = step_time_totals(model, tr, gpu, d, t, p, b, **kw)
        scalar = [
            step_time(
                model, tr.model_copy(update={"micro_batch": int(bi)}), Parallelism(int(di), int(ti), int(pi)), gpu, **kw
            ).step_time_s
            for di, ti, pi, bi in combos
        ]
        np.testing.assert_allclose(vec, scalar, rtol=1e-12)
        assert len(set(np.round(vec, 9))) > len(vec) // 4  # the grid really varies


# --- against Sia's measured profiles (held-out rows of bench/step_time_calibration.py's split) --------------------------
SIA_BERT = Path(__file__).resolve().parents[2] / "shared" / "traces" / "sia-sosp23" / "traces" / "bert"
needs_sia = pytest.mark.skipif(not SIA_BERT.is_dir(), reason=f"Sia profiles not found at {SIA_BERT}")
# BERT-base SQuAD fine-tuning as Sia profiled it: fp32, sequence 384, one micro-batch of local_bsz per replica.
BERT = ModelSpec(name="bert-base", vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12, max_positions=512)


def _measured(cluster: str, placement: str, local_bsz: int) -> float:
    with open(SIA_BERT / f"placements-{cluster}.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["placement"] == placement and int(r["local_bsz"]) == local_bsz]
    assert len(rows) == 1
    return float(rows[0]["step_time"])


def _bert_step(gpu: str, d: int, local_bsz: int) -> float:
    tr = TrainingSpec(seq_len=384, global_batch=d * local_bsz, micro_batch=local_bsz, precision="fp32")
    return step_time(BERT, tr, Parallelism(dp=d), CATALOG[gpu]).step_time_s


@needs_sia
def test_a100_over_t4_matches_a_held_out_profile_row():
    """One GPU, local batch 8 (held out): measured 0.7033 s on a T4 / 0.1564 s on an A100 = 4.5x, not 7-27x."""
    measured = _measured("aws", "1", 8) / _measured("dgx-ext", "1", 8)
    assert measured == pytest.approx(4.50, abs=0.01)
    predicted = _bert_step("T4", 1, 8) / _bert_step("A100-40GB", 1, 8)
    assert predicted == pytest.approx(measured, rel=0.10)


@needs_sia
def test_2080ti_over_t4_matches_a_held_out_profile_row():
    measured = _measured("aws", "1", 8) / _measured("rtx", "1", 8)  # 0.7033 / 0.3678 = 1.91
    assert measured == pytest.approx(1.91, abs=0.01)
    predicted = _bert_step("T4", 1, 8) / _bert_step("RTX-2080Ti", 1, 8)
    assert predicted == pytest.approx(measured, rel=0.10)


@needs_sia
def test_eight_v100_scaling_matches_a_held_out_profile_row():
    """8 V100 in one node at local batch 16 (held out): 8 x 0.439 / 1.046 = 3.4x measured; datasheet links gave 7.9x."""
    measured = 8 * _measured("azure", "1", 16) / _measured("azure", "8", 16)
    assert measured == pytest.approx(3.36, abs=0.01)
    predicted = 8 * _bert_step("V100-32GB", 1, 16) / _bert_step("V100-32GB", 8, 16)
    assert predicted == pytest.approx(measured, rel=0.5)
    assert predicted < 6.5


# --- attention FLOPs follow the families' shapes ------------------------------------------------------------------
TINY_MLA = ModelSpec(name="tiny-mla", vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, ffn_size=96,
                     mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", norm_kind="rmsnorm", bias=False,
                     q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)


def test_mla_attention_flops_use_qk_and_v_head_widths_by_hand():
    training = TrainingSpec(seq_len=64, global_batch=2)
    weights = 2 * TINY_MLA.layer_parameters() + 512 * 64
    # QK^T over 4 heads x (16 + 8), scores x V over 4 heads x 16: 2 FLOPs per multiply-add, x 3 for fwd + bwd, over
    # the 64 / 2 keys a causal flash kernel computes per query, in 2 layers
    attention = 3 * 2 * 4 * (24 + 16) * 2 * (64 // 2)
    assert training_flops_per_step(TINY_MLA, training) == 2 * 64 * (6 * weights + attention)


def test_sliding_window_layers_attend_to_their_window_only_under_flash():
    gemma_like = ModelSpec(name="sliding", vocab_size=512, hidden_size=64, num_layers=4, num_heads=4, ffn_size=96,
                           mlp_kind="swiglu", position_kind="rotary", norm_kind="rmsnorm", bias=False,
                           sliding_window=16, full_attention_every=2)  # layers 0, 2 slide; 1, 3 attend fully
    flash = TrainingSpec(seq_len=64, global_batch=2, attention="flash")
    # causal: a full layer 64 / 2 keys per query on average; a window of 16 the mean of min(i + 1, 16),
    # 16 - 16^2 / (2 x 64) = 14
    assert attended_keys(gemma_like, flash) == 2 * 14 + 2 * 32
    assert attended_keys(gemma_like, flash.model_copy(update={"attention": "eager"})) == 4 * 64  # masked, not skipped
    full = ModelSpec(**{**gemma_like.model_dump(), "sliding_window": None, "full_attention_every": 0})
    per_key = 3 * 2 * 4 * (16 + 16) * 2 * 64  # fwd + bwd FLOPs per attended key per layer, whole step
    assert training_flops_per_step(full, flash) - training_flops_per_step(gemma_like, flash) == per_key * 2 * (32 - 14)


# --- expert parallelism (MoE) ----------------------------------------------------------------------------------------
MIXTRAL = ZOO["mixtral-8x7b"]  # h 4096, 32 MoE layers, 8 experts, top-2, SwiGLU experts of width 14336, no biases
ROUTED = 32 * 8 * 3 * 4096 * 14336  # every routed expert of every layer: 45,097,156,608 parameters
MIXTRAL_DENSE = 46_702_792_704 - ROUTED  # attention, norms, routers, embeddings, head


def bf16(global_batch: int, **kw) -> TrainingSpec:
    return TrainingSpec(seq_len=1024, global_batch=global_batch, micro_batch=1, precision="bf16-master", **kw)


def test_expert_all_to_alls_by_hand():
    """dp 8 = ep 8 in one node: per MoE layer and micro-batch 4 all-to-alls (dispatch, combine; fwd and bwd) of each
    GPU's 1 x 1024 tokens x top-2 copies x 4096 x 2 bytes, 7/8 of them to other GPUs, over NVLink."""
    assert MIXTRAL.routed_expert_parameters() * MIXTRAL.num_moe_layers == ROUTED
    st = step_time(MIXTRAL, bf16(8), Parallelism(dp=8, ep=8), A100, mfu=0.5)
    per_alltoall = 1024 * 2 * 4096 * 2 * 7 / 8 / 300e9
    assert st.ep_comm_s == pytest.approx(4 * 32 * 1 * per_alltoall, rel=1e-12)
    full = step_time(MIXTRAL, bf16(8, recompute="full"), Parallelism(dp=8, ep=8), A100, mfu=0.5)
    assert full.ep_comm_s == pytest.approx(6 * 32 * 1 * per_alltoall, rel=1e-12)  # the recomputed forward pair
    assert step_time(MIXTRAL, bf16(8), Parallelism(dp=8), A100, mfu=0.5).ep_comm_s == 0.0
    # t 2 x ep 8 = 16 ranks over two nodes: each GPU sends its 1024 / 2 tokens (sequence parallel); 4 of its 8
    # expert-parallel peers (itself included) share its node (8 GPUs / etp 2): 3/8 of the copies ride NVLink, 4/8
    # cross the 100 Gbit/s NIC that every GPU of the node shares, and the NIC half paces the all-to-all
    far = step_time(MIXTRAL, bf16(8), Parallelism(dp=8, tp=2, ep=8), A100, mfu=0.5, network_gbit_s=100,
                    gpus_per_node=8)
    copies = 512 * 2 * 4096 * 2
    assert far.ep_comm_s == pytest.approx(4 * 32 * 1 * max(3 / 8 * copies / 300e9, 4 / 8 * copies / (12.5e9 / 8)),
                                          rel=1e-12)


def test_experts_all_reduce_over_the_ranks_that_hold_them():
    """ep = d: each expert lives on one rank, so only the dense parameters' fp32 gradients cross the ring."""
    st = step_time(MIXTRAL, bf16(8), Parallelism(dp=8, ep=8), A100, mfu=0.5)
    assert st.dp_comm_s == pytest.approx(2 * 7 / 8 * MIXTRAL_DENSE * 4 / 300e9, rel=1e-12)
    # ep 2: the experts are halved and all-reduced over the 4 ranks holding each half
    st2 = step_time(MIXTRAL, bf16(8), Parallelism(dp=8, ep=2), A100, mfu=0.5)
    want = (2 * 7 / 8 * MIXTRAL_DENSE + 2 * 3 / 4 * ROUTED / 2) * 4 / 300e9
    assert st2.dp_comm_s == pytest.approx(want, rel=1e-12)
    # without a sharded optimizer every rank sweeps its own experts only: dense + routed / ep parameters
    plain, sharded = (step_time(MIXTRAL, bf16(8, distributed_optimizer=dist), Parallelism(dp=8, ep=8), A100, mfu=0.5)
                      for dist in (False, True))
    # torch's foreach AdamW (the pytorch stack) on the fp32 masters, 4 B per access (OPT_BYTES' passes), then the bf16
    # copy back: read the master, write the weight
    rw = (4 + 3 + 3 + 5 + 6) * 4 + 4 + 2
    assert plain.optimizer_s == pytest.approx((MIXTRAL_DENSE + ROUTED / 8) * rw / (A100.memory_bandwidth_gbyte_s * 1e9))
    assert sharded.optimizer_s == pytest.approx((MIXTRAL_DENSE + ROUTED) / 8 * rw / (A100.memory_bandwidth_gbyte_s * 1e9))


def test_vectorised_equals_scalar_over_ep():
    tr = bf16(64, distributed_optimizer=True)
    grid = [(d, t, p, e) for d, t, p, e in itertools.product((2, 4, 8), (1, 2, 4), (1, 2), (1, 2, 4, 8)) if d % e == 0]
    d, t, p, e = (np.array(x) for x in zip(*grid, strict=True))
    got = step_time_totals(MIXTRAL, tr, A100, d, t, p, 1, ep=e, gpus_per_node=8)
    want = [step_time(MIXTRAL, tr, Parallelism(dp=a, tp=b, pp=c, ep=x), A100).step_time_s for a, b, c, x in grid]
    assert got == pytest.approx(want, rel=1e-12)


# --- context parallelism ---------------------------------------------------------------------------------------------
LLAMA8 = ZOO["llama-3.1-8b"]  # 32 layers, 8 KV heads x 128: K and V are 1024 wide each; 8,030,261,248 parameters


def test_context_parallel_ring_by_hand():
    """cp 8 in one A100 node: per layer and micro-batch each GPU's K and V chunk (4096 tokens x 2048 x 2 bytes) goes
    7 hops, 3 times (forward K,V; backward K,V and dK,dV), over NVLink; every other term sees 32768 / 8 tokens."""
    tr = TrainingSpec(seq_len=32768, global_batch=2, micro_batch=1, precision="bf16-master")
    st = step_time(LLAMA8, tr, Parallelism(cp=8), A100, mfu=0.5)
    chunk = 1 * 4096 * (1024 + 1024) * 2
    m = 2  # global 2 / (d 1 x micro 1)
    assert st.cp_comm_s == pytest.approx(3 * 32 * m * 7 * chunk / 300e9, rel=1e-12)
    full = step_time(LLAMA8, tr.model_copy(update={"recompute": "full"}), Parallelism(cp=8), A100, mfu=0.5)
    assert full.cp_comm_s == pytest.approx(4 * 32 * m * 7 * chunk / 300e9, rel=1e-12)
    # the 8 cp ranks hold the same parameters: their fp32 gradients are all-reduced over d x cp = 8 ranks
    assert st.dp_comm_s == pytest.approx(2 * 7 / 8 * LLAMA8.parameter_count() * 4 / 300e9, rel=1e-12)
    assert st.num_gpus == 8
    # compute: eq. 3's FLOPs plus flash attention's recomputed scores in backward (half a forward of the core)
    flash_extra = 2 * 32768 * LLAMA8.num_layers * 2 * LLAMA8.hidden_size * 32768 / 2
    assert st.compute_s == pytest.approx((training_flops_per_step(LLAMA8, tr) + flash_extra) / (8 * 312e12 * 0.5),
                                         rel=1e-12)
    # t 2 x cp 8 spans two nodes: the hop out of a node shares the 100 Gbit/s NIC with the node's other t ring
    far = step_time(LLAMA8, tr, Parallelism(tp=2, cp=8), A100, mfu=0.5, network_gbit_s=100, gpus_per_node=8)
    assert far.cp_comm_s == pytest.approx(3 * 32 * m * 7 * (chunk / 2) / (12.5e9 / 2), rel=1e-12)
    # the TP all-reduces carry the 4096 tokens each GPU holds, not the whole sample
    assert far.tp_comm_s == pytest.approx(4 * 32 * m * 2 * 1 / 2 * 4096 * 4096 * 2 / 300e9, rel=1e-12)
    assert step_time(LLAMA8, tr, Parallelism(dp=2), A100, mfu=0.5).cp_comm_s == 0.0


def test_vectorised_equals_scalar_over_cp():
    tr = TrainingSpec(seq_len=32768, global_batch=8, micro_batch=1, precision="bf16-master", recompute="full")
    grid = list(itertools.product((1, 2, 4), (1, 2, 8), (1, 2), (1, 2, 4, 8)))
    d, t, p, c = (np.array(x) for x in zip(*grid, strict=True))
    got = step_time_totals(LLAMA8, tr, A100, d, t, p, 1, cp=c, gpus_per_node=8)
    want = [step_time(LLAMA8, tr, Parallelism(dp=a, tp=b, pp=q, cp=x), A100).step_time_s for a, b, q, x in grid]
    assert got == pytest.approx(want, rel=1e-12)


def test_interleaving_shrinks_the_bubble_and_multiplies_the_sends_by_vp():
    """Narayanan 2021 Sec. 2.2.2: vp chunks per rank cut the bubble to (p - 1) / (m vp) and send vp times as often."""
    tr = amp(8, 1)
    plain = step_time(GPT2, tr, Parallelism(pp=2), A100, mfu=0.5)
    inter = step_time(GPT2, tr, Parallelism(pp=2, vp=3), A100, mfu=0.5)  # 12 layers = 2 stages x 3 chunks x 2
    compute = 8 * S * LAST_OF_TWO_STAGE_FLOPS / (312e12 * 0.5)  # the slowest stage: the last, with the LM head
    assert inter.pp_bubble_s == pytest.approx((2 - 1) / (8 * 3) * compute, rel=1e-12)
    assert inter.pp_bubble_s == pytest.approx(plain.pp_bubble_s / 3, rel=1e-12)
    assert inter.pp_p2p_s == pytest.approx(3 * plain.pp_p2p_s, rel=1e-12)
    assert inter.compute_s == plain.compute_s and inter.dp_comm_s == plain.dp_comm_s


def test_expert_tensor_parallelism_sets_the_expert_shard_and_its_ring():
    """etp 1 with ep 8 on t 8 (Megatron --expert-tensor-parallel-size 1): each GPU holds one whole expert of each
    layer; the 8 GPUs are one expert grid with no expert-data-parallel copy, so no expert gradient crosses a ring."""
    tr = bf16(8)
    st = step_time(MIXTRAL, tr, Parallelism(tp=8, ep=8, etp=1), A100, mfu=0.5)
    assert st.dp_comm_s == 0.0  # d = 1 and the expert-dp group has 1 rank (it went negative before)
    # d 2: the dense ring over 2 ranks, the experts over 2 copies, each GPU's expert shard routed / (etp 1 x ep 8);
    # 16 GPUs span two nodes: each of the node's 8 shards' rings gets 1/8 of the 100 Gbit/s NIC
    st2 = step_time(MIXTRAL, bf16(8), Parallelism(dp=2, tp=8, ep=8, etp=1), A100, mfu=0.5)
    want = (2 * 1 / 2 * MIXTRAL_DENSE / 8 + 2 * 1 / 2 * ROUTED / 8) * 4 / (12.5e9 / 8)
    assert st2.dp_comm_s == pytest.approx(want, rel=1e-12)
    # etp 0 means t: the same as writing etp = t
    a = step_time(MIXTRAL, tr, Parallelism(dp=8, tp=2, ep=4), A100, mfu=0.5)
    b = step_time(MIXTRAL, tr, Parallelism(dp=8, tp=2, ep=4, etp=2), A100, mfu=0.5)
    assert a == b


# --- uneven pipeline stages: the slowest stage paces the pipeline ---------------------------------------------------
# 8 GPT-2-small layers with a 16-token vocabulary (its head, 6 x 16 x 768 FLOPs per token, is all but free)
EIGHT = ModelSpec(name="eight", vocab_size=16, hidden_size=H, num_layers=8, num_heads=12, max_positions=S)
LAYER_TOKEN_FLOPS = 6 * LAYER_WEIGHTS + 12 * H * KEYS + FLASH_EXTRA_PER_LAYER  # one layer's time, fwd + bwd
SMALL_HEAD_TOKEN_FLOPS = 6 * 16 * H


@pytest.mark.parametrize("first, last, slowest", [(3, 5, 1), (5, 3, 0)])
def test_two_stages_of_3_and_5_layers_are_paced_by_the_5(first, last, slowest):
    st = step_time(EIGHT, amp(8, 1), Parallelism(pp=2, first_stage_layers=first, last_stage_layers=last), A100,
                   mfu=0.5)
    m = 8
    stage_flops = 8 * S * (5 * LAYER_TOKEN_FLOPS + (SMALL_HEAD_TOKEN_FLOPS if slowest == 1 else 0))
    assert LAYER_TOKEN_FLOPS == 48_032_256  # 47,245,824 of eq. 3 + 2 h keys
    assert st.slowest_stage == slowest
    assert st.compute_s == pytest.approx(stage_flops / (312e12 * 0.5), rel=1e-12)
    assert st.pp_bubble_s == pytest.approx((2 - 1) / m * st.compute_s, rel=1e-12)  # t = 1: no tp/ep/cp time
    even = step_time(EIGHT, amp(8, 1), Parallelism(pp=2), A100, mfu=0.5)  # 4 / 4
    assert even.compute_s == pytest.approx(8 * S * (4 * LAYER_TOKEN_FLOPS + SMALL_HEAD_TOKEN_FLOPS) / 156e12, rel=1e-12)
    assert even.step_time_s < st.step_time_s


def test_a_big_head_makes_the_lighter_last_stage_the_slowest():
    # GPT-2's vocabulary: the head (6 x 50,257 x 768 = 231.6 MFLOP per token) outweighs two layers (103.9 MFLOP)
    model = EIGHT.model_copy(update={"vocab_size": V})
    st = step_time(model, amp(8, 1), Parallelism(pp=2, first_stage_layers=5, last_stage_layers=3), A100, mfu=0.5)
    assert st.slowest_stage == 1
    assert st.compute_s == pytest.approx(8 * S * (3 * LAYER_TOKEN_FLOPS + 6 * V * H) / 156e12, rel=1e-12)


def test_data_parallel_ring_and_optimizer_follow_the_stage_with_most_parameters_by_hand():
    # GPT-2 on 2 stages of 6 layers: stage 0 adds wte + wpe (81,911,040), stage 1 the final LayerNorm and its own copy
    # of the tied head (81,126,144): stage 0's gradients are the last to be all-reduced
    st = step_time(GPT2, amp(8, 2), Parallelism(dp=2, pp=2), A100, mfu=0.5)
    stage0 = 6 * LAYER_WEIGHTS + V * H + S * H
    assert stage0 == 81_911_040 > 6 * LAYER_WEIGHTS + 2 * H + V * H
    assert st.dp_comm_s == pytest.approx(2 * (2 - 1) / 2 * stage0 * 4 / 300e9, rel=1e-12)  # fp32 grads, NVLink
    assert st.optimizer_s == pytest.approx(stage0 * OPT_BYTES / 1555e9, rel=1e-12)


def test_parts_sum_to_the_step_and_nothing_overlaps_yet():
    st = step_time(GPT2, amp(8, 2), Parallelism(dp=2, pp=2), A100, mfu=0.5)
    parts = st.parts()
    assert [p.name for p in parts] == ["compute", "tp_comm", "ep_comm", "cp_comm", "pp_bubble", "pp_p2p", "dp_comm",
                                       "optimizer", "overhead"]
    assert sum(p.exposed_s for p in parts) == pytest.approx(st.step_time_s, rel=1e-12)
    assert all(p.overlapped_s == 0.0 for p in parts)  # plain PyTorch DDP: no overlap by default (comm_overlaps)


def test_model_flops_leave_recomputation_out():
    full = step_time(GPT2, amp(8, 8, recompute="full"), Parallelism(), A100, mfu=0.5)
    assert full.model_flops_per_step == training_flops_per_step(GPT2, amp(8, 8)) < full.flops_per_step
    assert full.model_tflops_per_gpu < full.achieved_tflops_per_gpu


def test_vectorised_equals_scalar_for_uneven_stages():
    gpu = CATALOG["H100-80GB"]
    kw = dict(intra_link_gbyte_s=400.0, network_gbit_s=200.0, gpus_per_node=8, mfu=0.35)
    cases = [
        (ZOO["deepseek-v3"], Parallelism(dp=8, tp=8, pp=8, ep=8, first_stage_layers=7, last_stage_layers=6)),
        (ZOO["deepseek-v3"], Parallelism(dp=8, tp=8, pp=8, ep=8, first_stage_layers=6, last_stage_layers=7)),
        (ZOO["deepseek-v2-lite"], Parallelism(dp=2, pp=4, first_stage_layers=6)),
        (ZOO["qwen3-235b-a22b"], Parallelism(dp=4, tp=4, pp=8, vp=2, ep=4, first_stage_layers=10)),
        (ZOO["llama-3.1-8b"], Parallelism(dp=2, tp=2, pp=5, first_stage_layers=5, last_stage_layers=3)),
        (ZOO["llama-3.1-8b"], Parallelism(dp=2, tp=2, pp=4)),
    ]
    for recompute in ("none", "full"):
        tr = TrainingSpec(seq_len=4096, global_batch=64, micro_batch=1, recompute=recompute, precision="bf16-master")
        for model, par in cases:
            scalar = step_time(model, tr, par, gpu, **kw).step_time_s
            vec = step_time_totals(model, tr, gpu, [par.dp] * 2, par.tp, par.pp, 1, ep=par.ep, vp=par.vp,
                                   first_stage_layers=par.first_stage_layers, last_stage_layers=par.last_stage_layers,
                                   **kw)
            np.testing.assert_allclose(vec, [scalar, scalar], rtol=1e-12)


@pytest.mark.parametrize("name, pp, middle", [("gpt2", 2, 6), ("llama-3.1-8b", 4, 8), ("mixtral-8x7b", 4, 8),
                                              ("deepseek-v2-lite", 3, 9)])
def test_naming_the_even_count_for_an_end_stage_changes_nothing(name, pp, middle):
    # Megatron accepts a first / last stage of the middle count: the same layout as the even split, whichever way
    # perf reaches it (the even split's closed form, or the per-stage comparison of uneven splits)
    model, tr = ZOO[name], TrainingSpec(seq_len=1024, global_batch=16, micro_batch=1, precision="bf16-master")
    even = step_time(model, tr, Parallelism(dp=2, pp=pp), A100, mfu=0.5)
    for first, last in ((middle, 0), (0, middle), (middle, middle)):
        named = step_time(model, tr, Parallelism(dp=2, pp=pp, first_stage_layers=first, last_stage_layers=last), A100,
                          mfu=0.5)
        assert named.step_time_s == pytest.approx(even.step_time_s, rel=1e-12)
        assert named.slowest_stage == even.slowest_stage == pp - 1
        assert named.dp_comm_s == pytest.approx(even.dp_comm_s, rel=1e-12)


@pytest.mark.parametrize("name, par", [
    ("deepseek-v3", Parallelism(dp=2, pp=8, first_stage_layers=7, last_stage_layers=6)),
    ("deepseek-v3", Parallelism(dp=2, pp=16, first_stage_layers=3, last_stage_layers=2)),  # 3 + 14 x 4 + 2
    ("deepseek-v2-lite", Parallelism(dp=2, pp=3, vp=3)),  # 27 layers: 9 per stage in 3 chunks of 3
    ("deepseek-v2-lite", Parallelism(dp=2, pp=4, first_stage_layers=6, last_stage_layers=0)),
])
def test_the_slowest_stage_is_the_slowest_of_all_stages(name, par):
    """Brute force over every stage: its dense and MoE layers (Megatron's order) and the head on the last."""
    from frenzy_core.perf import _moe_extra_time_flops, token_flops
    from frenzy_core.training import stage_leading_layers

    model = ZOO[name]
    tr = TrainingSpec(seq_len=1024, global_batch=16, micro_batch=1, precision="bf16-master")
    per_token = token_flops(model, tr)
    # an MoE layer's expert-GEMM roofline and permutation time, as FLOPs at the stage's rate (b = t = cp = ep = 1)
    moe_layer = per_token.moe_layer + float(_moe_extra_time_flops(model, tr, A100, 1.0, 1.0, 1.0, 1.0, 1.0, False,
                                                                  312e12, 0.5))
    # every layer's attention core as flash attention runs it (perf.FLASH_BACKWARD_FORWARDS)
    moe_layer += per_token.attention_kernel_extra
    per_token = per_token.__class__(**{**per_token.__dict__,
                                       "dense_layer": per_token.dense_layer + per_token.attention_kernel_extra})
    layers = par.stage_layers(model.num_layers)
    dense = stage_leading_layers(model.num_layers, model.first_k_dense, par.pp, np.arange(par.pp),
                                 par.first_stage_layers, par.last_stage_layers, par.vp)
    flops = [16 * 1024 * (dn * per_token.dense_layer + (n - dn) * moe_layer
                          + (per_token.head if s == par.pp - 1 else 0.0))
             for s, (n, dn) in enumerate(zip(layers, dense, strict=True))]
    st = step_time(model, tr, par, A100, mfu=0.5)
    assert st.compute_s == pytest.approx(max(flops) / (par.dp * 312e12 * 0.5), rel=1e-12)
    assert st.slowest_stage == int(np.argmax(flops))


# --- fp8 linears, overlap, recompute, causal attention ---------------------------------------------------------------
H100 = CATALOG["H100-80GB"]  # 989 TF bf16, 1,979 TF fp8 dense
LINEAR_WEIGHTS = 12 * H * H + 9 * H  # a GPT-2 layer's projection and MLP weights (its 2 LayerNorms hold the other 4h)


# GPT-2 elements quantised to fp8 per layer and token: forward the output projection's input (h) and the MLP's second
# GEMM's input (4h; QKV and fc1 take theirs from TE's fused LayerNormLinear); backward every linear's output gradient,
# QKV 3h + projection h + fc1 4h + fc2 h: 768 + 3072 + 2304 + 768 + 3072 + 768 = 10,752
FP8_CAST_ELEMENTS_GPT2 = H + 4 * H + 3 * H + H + 4 * H + H


def test_fp8_quantisation_reads_bf16_and_writes_fp8_and_its_transpose_by_hand():
    from frenzy_core.perf import FP8_CAST_BYTES_PER_ELEMENT, fp8_cast_elements_per_token

    tr = TrainingSpec(seq_len=S, global_batch=8, micro_batch=8, precision="bf16-master", fp8_linears=True)
    assert FP8_CAST_BYTES_PER_ELEMENT == 2 + 1 + 1
    assert fp8_cast_elements_per_token(GPT2, tr) == (FP8_CAST_ELEMENTS_GPT2, FP8_CAST_ELEMENTS_GPT2)
    # full recomputation replays the forward casts (h + 4h), once per checkpointed layer
    full = fp8_cast_elements_per_token(GPT2, tr.model_copy(update={"recompute": "full"}))
    assert full[0] == FP8_CAST_ELEMENTS_GPT2 + 5 * H
    # MoE: the experts' casts are per routed copy (top-k), qwen3-30b-a3b: k 8, expert ffn 768, SwiGLU
    qwen = ZOO["qwen3-30b-a3b"]
    _, moe = fp8_cast_elements_per_token(qwen, tr)
    attn = qwen.attention_output_dim + qwen.q_dim + qwen.kv_dim + qwen.v_dim + qwen.hidden_size
    assert moe == attn + 8 * 768 + 8 * (2 * 768 + qwen.hidden_size)
    # on one H100 the passes cost bytes / HBM bandwidth, in the step's compute; none without fp8 linears
    on = step_time(GPT2, tr, Parallelism(), H100, mfu=0.5, overhead_s=0.0)
    off = step_time(GPT2, tr.model_copy(update={"fp8_linears": False}), Parallelism(), H100, mfu=0.5, overhead_s=0.0)
    assert on.compute_other_s - off.compute_other_s == pytest.approx(8 * S * L * 10_752 * 4 / 3350e9, rel=1e-9)


def test_flash_backward_runs_two_and_a_half_forwards_of_the_attention_core_by_hand():
    """4 h keys FLOPs per layer and token forward; eq. 3 charges backward 2x that (model FLOPs), flash attention's
    kernel 2.5x (it recomputes Q K^T): time for 3.5 forwards; eager attention keeps the probabilities: 3."""
    tr = amp(8, 8)
    flash = step_time(GPT2, tr, Parallelism(), A100, mfu=0.5)
    assert flash.compute_attention_s == pytest.approx(8 * S * L * 3.5 * 4 * H * KEYS / (312e12 * 0.5), rel=1e-12)
    assert flash.flops_per_step == training_flops_per_step(GPT2, tr)  # model FLOPs unchanged: eq. 3
    eager = step_time(GPT2, tr.model_copy(update={"attention": "eager"}), Parallelism(), A100, mfu=0.5)
    assert eager.compute_attention_s == pytest.approx(8 * S * L * 3 * 4 * H * S / (312e12 * 0.5), rel=1e-12)


def test_fp8_linears_run_at_the_fp8_peak_and_attention_norms_and_head_at_bf16_by_hand():
    tr = TrainingSpec(seq_len=S, global_batch=8, micro_batch=8, precision="bf16-master")
    bf16 = step_time(GPT2, tr, Parallelism(), H100, mfu=0.5, overhead_s=0.0)
    fp8 = step_time(GPT2, tr.model_copy(update={"fp8_linears": True}), Parallelism(), H100, mfu=0.5, overhead_s=0.0)
    tokens = 8 * S
    linear = tokens * L * 6 * LINEAR_WEIGHTS / (1979e12 * 0.5)  # the layers' GEMMs at the fp8 peak
    head = tokens * 6 * V * H / (989e12 * 0.5)  # the output layer stays bf16 (TE / torchtitan keep it out of fp8)
    attention = tokens * L * (12 * H * KEYS + FLASH_EXTRA_PER_LAYER) / (989e12 * 0.5)  # flash attention, bf16
    norms = tokens * L * 6 * 4 * H / (989e12 * 0.5)
    casts = tokens * L * FP8_CAST_ELEMENTS_GPT2 * 4 / 3350e9  # fp8 quantisation passes, HBM-bound (below)
    assert fp8.compute_linear_s == pytest.approx(linear + head, rel=1e-12)
    assert fp8.compute_attention_s == pytest.approx(attention, rel=1e-12)
    assert fp8.compute_other_s == pytest.approx(norms + casts, rel=1e-9)
    assert fp8.compute_s == pytest.approx(linear + head + attention + norms + casts, rel=1e-12)
    assert fp8.compute_attention_s == bf16.compute_attention_s and fp8.compute_s < bf16.compute_s
    assert fp8.flops_per_step == bf16.flops_per_step  # the same FLOPs, run faster


def test_fp8_linears_on_a_part_without_fp8_cores_cost_what_bf16_costs():
    tr = TrainingSpec(seq_len=S, global_batch=8, micro_batch=8, precision="bf16-master")
    a = step_time(GPT2, tr, Parallelism(), A100, mfu=0.5)
    b = step_time(GPT2, tr.model_copy(update={"fp8_linears": True}), Parallelism(), A100, mfu=0.5)
    assert a.compute_s == pytest.approx(b.compute_s, rel=1e-12)


def test_flash_attention_computes_half_the_causal_scores_eager_all_of_them():
    tr = amp(8, 8)
    assert attended_keys(GPT2, tr) == L * S / 2
    assert attended_keys(GPT2, tr.model_copy(update={"attention": "eager"})) == L * S


def test_recompute_every_k_replays_only_the_checkpointed_layers_by_hand():
    # 12 layers, every 5th checkpointed (torchtitan ac_freq): layers 0, 5, 10 replay their forward
    base = training_flops_per_step(GPT2, amp(8, 8))
    part = training_flops_per_step(GPT2, amp(8, 8, recompute="full", recompute_every=5))
    assert part - base == pytest.approx(8 * S * 3 * (2 * LAYER_WEIGHTS + 4 * H * KEYS), rel=1e-12)


def test_megatron_hides_the_reduce_scatter_behind_the_last_backward_and_the_gather_behind_the_first_forward():
    """d 2 on one node, distributed optimizer, 2 micro-batches: each half of the all-reduce volume (reduce-scatter,
    all-gather) hides behind its window of one micro-batch's compute (2/3 backward, 1/3 forward); one Megatron
    bucket (40M of GPT-2's 124M parameters: max(40M, 1M x d)) cannot hide."""
    tr = TrainingSpec(seq_len=S, global_batch=8, micro_batch=2, precision="bf16-master", framework="megatron",
                      distributed_optimizer=True)
    kw = dict(mfu=0.5, overhead_s=0.0, intra_link_gbyte_s=20.0)  # a slow link, so that some traffic stays exposed
    off = step_time(GPT2, tr.model_copy(update={"overlap_dp_comm": False}), Parallelism(dp=2), A100, **kw)
    on = step_time(GPT2, tr, Parallelism(dp=2), A100, **kw)
    raw = 2 * (2 - 1) / 2 * GPT2_PARAMS * 4 / 20e9  # fp32 main grads
    assert off.dp_comm_s == pytest.approx(raw, rel=1e-12) and off.dp_comm_overlapped_s == 0.0
    bucket = 40e6 / GPT2_PARAMS
    per_mb = on.compute_s / 2  # m = 8 / (2 x 2)
    want = bucket * raw + max(0, (1 - bucket) * raw / 2 - per_mb * 2 / 3) + max(0, (1 - bucket) * raw / 2 - per_mb / 3)
    assert on.dp_comm_s == pytest.approx(want, rel=1e-12)
    assert on.dp_comm_s + on.dp_comm_overlapped_s == pytest.approx(raw, rel=1e-12)
    assert dict((p.name, p.overlapped_s) for p in on.parts())["dp_comm"] == on.dp_comm_overlapped_s > 0


def test_staggered_exposure_equals_the_sum_over_chunks():
    """The closed form against the plain sum over chunks j of max(0, traffic / v - first - j x step), on random
    values (and arrays)."""
    from frenzy_core.perf import staggered_exposed_s

    rng = np.random.default_rng(7)
    for _ in range(300):
        traffic, first, step = rng.uniform(0, 2, 3) * rng.choice([0.0, 1.0], 3, p=[0.1, 0.9])
        v = int(rng.integers(1, 25))
        by_hand = sum(max(0.0, traffic / v - first - j * step) for j in range(v))
        assert float(staggered_exposed_s(traffic, first, step, v)) == pytest.approx(by_hand, rel=1e-9, abs=1e-12)
    got = staggered_exposed_s(np.array([1.2, 1.2]), 0.1, 0.2, np.array([1, 3]))
    np.testing.assert_allclose(got, [1.1, 0.4], rtol=1e-12)


def test_interleaved_chunks_sync_their_gradients_one_group_apart_by_hand():
    """Megatron, pp 2 x vp 2, d 2 on one node, distributed optimizer, a slow link: m = 4 micro-batches in groups of
    p = 2 per chunk. Chunk j's reduce-scatter (a quarter of the traffic: half the volume, half the chunks) hides
    behind its own last micro-batch backward (2/3 x compute / (m vp)) plus j groups of p such passes; the gathers
    the same with the forward third. vp 1 keeps the one-window rule."""
    tr = TrainingSpec(seq_len=S, global_batch=16, micro_batch=2, precision="bf16-master", framework="megatron",
                      distributed_optimizer=True)
    kw = dict(mfu=0.5, overhead_s=0.0, intra_link_gbyte_s=2.0)
    st = step_time(GPT2, tr, Parallelism(dp=2, pp=2, vp=2), A100, **kw)
    raw = st.dp_comm_s + st.dp_comm_overlapped_s
    stage_params = 6 * (12 * H * H + 13 * H) + (50257 * H + 1024 * H)  # the heavier end: the embedding's stage
    bucket = min(1.0, 40e6 / stage_params)
    per_pass = st.compute_s / 4 / 2  # one micro-batch of one chunk
    want = bucket * raw
    for share in (2 / 3, 1 / 3):
        want += sum(max(0.0, (1 - bucket) * raw / 2 / 2 - share * per_pass - j * 2 * share * per_pass) for j in range(2))
    assert st.dp_comm_s == pytest.approx(want, rel=1e-9)
    flat = step_time(GPT2, tr, Parallelism(dp=2, pp=2), A100, **kw)
    per_mb = flat.compute_s / 4
    raw1 = flat.dp_comm_s + flat.dp_comm_overlapped_s
    want1 = bucket * raw1 + sum(max(0.0, (1 - bucket) * raw1 / 2 - share * per_mb) for share in (2 / 3, 1 / 3))
    assert flat.dp_comm_s == pytest.approx(want1, rel=1e-9)


def test_megatron_interleaved_schedule_hides_the_pipeline_sends():
    """overlap_p2p_comm (Megatron's default with vp > 1): the 2 m vp sends of b x s x h bf16 run under the other
    chunks' compute, only what exceeds the stage's compute is exposed; without interleaving (vp 1) and under other
    stacks they stay in series."""
    tr = TrainingSpec(seq_len=S, global_batch=8, micro_batch=1, precision="bf16-master", framework="megatron")
    for link, v in ((300.0, 2), (0.05, 2), (300.0, 1)):
        st = step_time(GPT2, tr, Parallelism(pp=2, vp=v), A100, mfu=0.5, intra_link_gbyte_s=link)
        raw = 2 * 8 * v * S * H * 2 / (link * 1e9)
        assert st.pp_p2p_s + st.pp_p2p_overlapped_s == pytest.approx(raw, rel=1e-12)
        exposed = max(0.0, raw - st.compute_s) if v > 1 else raw
        assert st.pp_p2p_s == pytest.approx(exposed, rel=1e-12, abs=1e-15)
        assert dict((p.name, p.overlapped_s) for p in st.parts())["pp_p2p"] == st.pp_p2p_overlapped_s
    fsdp = step_time(GPT2, amp(8, 1), Parallelism(pp=2, vp=2), A100, mfu=0.5)
    assert fsdp.pp_p2p_overlapped_s == 0.0 and fsdp.pp_p2p_s > 0


def test_fsdp2_prefetch_hides_all_but_one_layers_share_behind_the_step():
    tr = TrainingSpec(seq_len=S, global_batch=8, micro_batch=4, precision="amp", framework="fsdp2", zero_stage=3)
    st = step_time(GPT2, tr, Parallelism(dp=2), A100, mfu=0.5, overhead_s=0.0)
    raw = 1.5 * 2 * (2 - 1) / 2 * GPT2_PARAMS * 4 / 300e9  # ZeRO-3 volume over NVLink
    assert raw < st.compute_s  # everything but the first gather / last reduce of one block hides
    assert st.dp_comm_s == pytest.approx(raw / 12, rel=1e-12)
    assert st.dp_comm_overlapped_s == pytest.approx(raw * 11 / 12, rel=1e-12)


def test_tp_comm_overlap_hides_the_all_reduces_behind_the_linear_gemms():
    tr = TrainingSpec(seq_len=S, global_batch=8, micro_batch=2, precision="bf16-master", framework="megatron",
                      sequence_parallel=True)
    off = step_time(GPT2, tr.model_copy(update={"tp_comm_overlap": False}), Parallelism(tp=2), A100, mfu=0.5)
    on = step_time(GPT2, tr, Parallelism(tp=2), A100, mfu=0.5)
    layer_gemms_s = 8 * S * L * 6 * LINEAR_WEIGHTS / (2 * 312e12 * 0.5)
    assert on.tp_comm_s == pytest.approx(max(0.0, off.tp_comm_s - layer_gemms_s), rel=1e-12)
    assert on.tp_comm_s + on.tp_comm_overlapped_s == pytest.approx(off.tp_comm_s, rel=1e-12)
    assert on.step_time_s < off.step_time_s


def test_vectorised_equals_scalar_with_fp8_and_overlap():
    tr = TrainingSpec(seq_len=4096, global_batch=64, micro_batch=1, precision="bf16-master", framework="megatron",
                      distributed_optimizer=True, sequence_parallel=True, fp8_linears=True)
    model, kw = ZOO["llama-3.1-8b"], dict(network_gbit_s=400.0, gpus_per_node=8)
    for par in (Parallelism(dp=8), Parallelism(dp=4, tp=2), Parallelism(dp=2, tp=2, pp=4), Parallelism(dp=16, tp=2)):
        scalar = step_time(model, tr, par, H100, **kw).step_time_s
        vec = step_time_totals(model, tr, H100, [par.dp] * 2, par.tp, par.pp, 1, **kw)
        np.testing.assert_allclose(vec, [scalar, scalar], rtol=1e-12)


# --- MoE expert GEMMs, permutation, all-to-all placement; torchtitan per-op SAC (issue 19 item 2) ----------------
def test_expert_gemm_roofline_is_min_of_peak_and_intensity_times_bandwidth():
    from frenzy_core.perf import expert_gemm_roofline_fraction

    # M=512, K=2048, N=768 in bf16: 2MKN = 1.611e9 FLOPs over 2 (MK + KN + MN) = 6.029e6 B: 267.2 FLOP/B; H100's
    # ridge 989e12 / 3350e9 = 295.2 FLOP/B, so 267.2 / 295.2 = 0.905 of the peak
    intensity = 2 * 512 * 2048 * 768 / (2 * (512 * 2048 + 2048 * 768 + 512 * 768))
    assert float(expert_gemm_roofline_fraction(512, 2048, 768, 2, 989e12, 3350e9)) == pytest.approx(
        intensity * 3350e9 / 989e12)
    assert float(expert_gemm_roofline_fraction(65536, 2048, 768, 2, 989e12, 3350e9)) == 1.0  # compute-bound


MOE = ModelSpec(name="moe-t", vocab_size=1000, hidden_size=1024, num_layers=4, num_heads=8, ffn_size=4096,
                mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", max_positions=4096, num_experts=64,
                moe_top_k=4, expert_ffn_size=512)


def test_moe_permutation_adds_its_hbm_bytes_over_bandwidth():
    """With experts GEMMs compute-bound (many tokens per expert), an MoE layer costs its FLOPs plus the permute /
    unpermute bytes 4 (1 + k) h x 2 B per token over the HBM bandwidth (perf.MOE_PERMUTE_PASSES)."""
    from frenzy_core.perf import _moe_extra_time_flops

    tr = TrainingSpec(seq_len=4096, global_batch=64, micro_batch=64, framework="megatron")
    gpu = CATALOG["H100-80GB"]
    extra = float(_moe_extra_time_flops(MOE, tr, gpu, 64.0, 1.0, 1.0, 1.0, 1.0, False, 989e12, 0.5))
    # 64 x 4096 x 4 / 64 = 16,384 tokens per expert: K=1024, N=1024 / 512 GEMMs are compute-bound
    permute_s_per_token = 4 * (1 + 4) * 1024 * 2 / 3350e9
    assert extra == pytest.approx(permute_s_per_token * 989e12 * 0.5)


def test_all_to_all_inside_a_node_then_over_the_nic():
    """ep 16 over two 8-GPU nodes: half the copies cross the NIC, 7/16 ride NVLink; the NIC half paces it, so the
    all-to-all takes (8/16) / (7/15 ... ) of the old model where every byte went at the NIC share."""
    tr = TrainingSpec(seq_len=4096, global_batch=16, micro_batch=1, framework="megatron", distributed_optimizer=True)
    gpu = CATALOG["H100-80GB"]
    st = step_time(MOE, tr, Parallelism(dp=16, ep=16), gpu, network_gbit_s=3200.0)
    nic = 3200e9 / 8 * gpu.network_efficiency / 8
    a2a_bytes = 4096 * 4 * 1024 * 2
    expected = 4 * 1 * 8 / 16 * a2a_bytes / nic * MOE.num_moe_layers  # m = 1 micro-batch per replica
    assert st.ep_comm_s == pytest.approx(expected)


def test_op_sac_replays_every_second_matmul():
    """torchtitan per-op SAC recomputes half the mm's: 7 FLOPs per linear weight per token instead of 6."""
    from frenzy_core.perf import token_flops

    base = TrainingSpec(seq_len=1024, global_batch=8, framework="fsdp2")
    sac = base.model_copy(update={"recompute": "op-sac"})
    none, op = token_flops(GPT2, base), token_flops(GPT2, sac)
    assert op.dense_linear / none.dense_linear == pytest.approx(7 / 6)
    assert op.attention == none.attention  # SDPA's output is saved: the attention core is not replayed


def test_torchao_fp8_casts_every_weight_each_micro_batch_by_hand():
    """torchtitan's torchao Float8Linear caches no weight: each micro-batch casts every linear weight twice (forward
    and the input gradient's layout), 2 B read + 1 B written each. On one H100 with the global batch fixed, four
    micro-batches instead of two add 2 x 2 casts x 3 B per linear weight of the layers over HBM; nothing else in
    the step depends on the micro-batch size. Megatron (Transformer Engine) caches the casts: no difference."""
    from frenzy_core.models import ZOO

    # the GEMMs' shape efficiency (gemm.py, tested in test_gemm.py) also changes with the micro-batch: off here
    model, h100 = ZOO["llama-3.1-8b"], CATALOG["H100-80GB"].model_copy(update={"gemm_arch": None})
    layer_linears = model.attention_parameters() + model.dense_mlp_parameters()

    def compute(framework, b):
        tr = TrainingSpec(framework=framework, seq_len=2048, global_batch=4, micro_batch=b, precision="bf16-master",
                          fp8_linears=True, attention="flash")
        return step_time(model, tr, Parallelism(), h100).compute_s

    extra = (4 - 2) * 2 * model.num_layers * layer_linears * 3 / (h100.memory_bandwidth_gbyte_s * 1e9)
    assert compute("fsdp2", 1) - compute("fsdp2", 2) == pytest.approx(extra, rel=1e-9)
    assert compute("megatron", 1) == pytest.approx(compute("megatron", 2), rel=1e-12)
