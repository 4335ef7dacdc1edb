"""Step-time model: hand-worked numbers, Narayanan 2021's FLOPs formula, monotonicity, vectorised == scalar."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.perf import StepTime, step_time, step_time_totals, training_flops_per_step
from frenzy_core.training import Parallelism, TrainingSpec

A100 = CATALOG["A100-40GB"]  # 312 TF bf16, 1555 GB/s, NVLink 300 GB/s
GPT2 = ZOO["gpt2"]  # h 768, l 12, V 50257, 124,439,808 parameters
GPT2_PARAMS = 124_439_808

# GPT-2 small by hand: a layer is 12 h^2 + 13 h weights (qkv 3h^2 + 3h, proj h^2 + h, MLP 8h^2 + 5h, 2 norms 4h).
H, L, V, S = 768, 12, 50257, 1024
LAYER_WEIGHTS = 12 * H * H + 13 * H  # 7,087,872
PER_TOKEN_FLOPS = 6 * (L * LAYER_WEIGHTS + V * H) + 12 * L * H * S  # weights fwd+bwd + attention scores/context


def amp(global_batch: int, micro_batch: int, **kw) -> TrainingSpec:
    return TrainingSpec(seq_len=S, global_batch=global_batch, micro_batch=micro_batch, precision="amp", **kw)


# --- FLOPs ----------------------------------------------------------------------------------------------------------
def test_flops_gpt2_by_hand():
    assert LAYER_WEIGHTS == 7_087_872
    assert training_flops_per_step(GPT2, amp(8, 8)) == pytest.approx(8 * S * PER_TOKEN_FLOPS, rel=1e-12)
    assert 8 * S * PER_TOKEN_FLOPS == pytest.approx(7.0054e12, rel=1e-4)


def test_flops_recompute_adds_a_forward_of_layers_not_of_the_head():
    base = training_flops_per_step(GPT2, amp(8, 8))
    tokens = 8 * S
    full = training_flops_per_step(GPT2, amp(8, 8, recompute="full"))
    selective = training_flops_per_step(GPT2, amp(8, 8, recompute="selective"))
    assert full - base == pytest.approx(tokens * (2 * L * LAYER_WEIGHTS + 4 * L * H * S), rel=1e-12)
    assert selective - base == pytest.approx(tokens * 4 * L * H * S, rel=1e-12)


GPT3 = ModelSpec(name="gpt3-175b", vocab_size=51200, hidden_size=12288, num_layers=96, num_heads=96, max_positions=2048)


def test_flops_match_narayanan_eq3_for_gpt3_175b():
    """Narayanan et al. 2021 eq. 3 (full recomputation): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    b, s, h, n_layers, v = 1536, 2048, 12288, 96, 51200
    eq3 = 96 * b * s * n_layers * h**2 * (1 + s / (6 * h) + v / (16 * n_layers * h))
    full = training_flops_per_step(GPT3, TrainingSpec(seq_len=s, global_batch=b, recompute="full"))
    assert full == pytest.approx(eq3, rel=2e-4)  # our layers carry 13h of biases/norms beyond 12 h^2
    # Without recomputation layers and attention take 3 of the 4 passes; the LM head (6 B s h V) is never recomputed,
    # so the ratio is a little under 4/3.
    none = training_flops_per_step(GPT3, TrainingSpec(seq_len=s, global_batch=b))
    no_recompute = 72 * b * s * n_layers * h**2 * (1 + s / (6 * h)) + 6 * b * s * h * v
    assert none == pytest.approx(no_recompute, rel=2e-4)
    assert 1.32 < full / none < 4 / 3


def test_flops_reproduce_narayanan_34_days_for_gpt3():
    """Narayanan 2021 Sec. 5.1: GPT-3 175B on 300B tokens, 1024 A100 at 140 TFLOP/s each, takes about 34 days."""
    per_token = training_flops_per_step(GPT3, TrainingSpec(seq_len=2048, global_batch=1, recompute="full")) / 2048
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
OPT_BYTES = (4 + 4 + 0 + 8) + (4 + 0 + 8)  # amp AdamW sweep: read param, grad, states; write param, states = 28


def test_single_a100_by_hand():
    st = step_time(GPT2, amp(8, 8), Parallelism(), A100, mfu=0.5)
    compute = 8 * S * PER_TOKEN_FLOPS / (312e12 * 0.5)
    optimizer = GPT2_PARAMS * OPT_BYTES / 1555e9
    assert isinstance(st, StepTime)
    assert st.compute_s == pytest.approx(compute, rel=1e-12)
    assert st.compute_s == pytest.approx(0.044907, rel=1e-4)
    assert st.optimizer_s == pytest.approx(optimizer, rel=1e-12)
    assert st.tp_comm_s == st.dp_comm_s == st.pp_bubble_s == st.pp_p2p_s == 0.0
    assert st.step_time_s == pytest.approx(compute + optimizer, rel=1e-12)
    assert st.achieved_tflops_per_gpu < 0.5 * 312


def test_data_parallel_inside_a_node_by_hand():
    st = step_time(GPT2, amp(8, 4), Parallelism(dp=2), A100, mfu=0.5)
    allreduce = 2 * (2 - 1) / 2 * GPT2_PARAMS * 4 / 300e9  # ring, fp32 grads, NVLink
    assert st.dp_comm_s == pytest.approx(allreduce, rel=1e-12)
    assert st.dp_comm_s == pytest.approx(1.6592e-3, rel=1e-4)
    assert st.compute_s == pytest.approx(8 * S * PER_TOKEN_FLOPS / (2 * 312e12 * 0.5), rel=1e-12)


def test_data_parallel_across_nodes_uses_the_nic():
    st = step_time(GPT2, amp(16, 1), Parallelism(dp=16), A100, mfu=0.5, network_gbit_s=100, gpus_per_node=8)
    # One ring (t x p = 1) leaves each node: the full 12.5 GB/s NIC.
    assert st.dp_comm_s == pytest.approx(2 * 15 / 16 * GPT2_PARAMS * 4 / 12.5e9, rel=1e-12)


def test_pipeline_bubble_and_sends_by_hand():
    st = step_time(GPT2, amp(8, 1), Parallelism(pp=2), A100, mfu=0.5)
    m = 8  # global 8 / (d 1 x micro 1)
    compute = 8 * S * PER_TOKEN_FLOPS / (2 * 312e12 * 0.5)
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
