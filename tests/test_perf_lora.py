"""LoRA's frozen base in the step-time model (perf.token_flops, perf.step_time): no weight-gradient GEMMs for frozen
linears, the adapters' own FLOPs at their roofline, only the adapters' gradients all-reduced and stepped, and under
ZeRO-3 the frozen base still all-gathered. Every figure worked by hand on a small Llama-shaped model."""

from __future__ import annotations

import pytest

from frenzy_core.gpus import CATALOG
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.perf import expert_gemm_roofline_fraction, model_flops_per_step, step_time, token_flops
from frenzy_core.training import Parallelism, TrainingSpec

A100 = CATALOG["A100-80GB"]  # 312 TF bf16, 2,039 GB/s HBM, NVLink 300 GB/s (efficiency 1: nominal)
# h 1024, 8 heads of 128, 2 KV heads (kv 256), SwiGLU ffn 2816, no biases, RMSNorm, untied head, V 1000, 2 layers
TL = ModelSpec(name="tiny-llama", vocab_size=1000, hidden_size=1024, num_layers=2, num_heads=8, num_kv_heads=2,
               ffn_size=2816, mlp_kind="swiglu", bias=False, norm_kind="rmsnorm", position_kind="rotary",
               tie_embeddings=False, hidden_act="silu", max_positions=4096)
S = 2048
# one layer's linears: q 1024 x 1024, k and v 1024 x 256, o 1024 x 1024, gate / up / down 3 x 1024 x 2816
LINEAR = 2 * 1024 * 1024 + 2 * 1024 * 256 + 3 * 1024 * 2816  # 11,272,192
NORMS = 2 * 1024  # two RMSNorm weights, counted as weights
# lora_targets q,v at r = 8: lora_A in x r + lora_B r x out per adapter: 8 x (1024 + 1024) + 8 x (1024 + 256)
ADAPTER = 8 * (1024 + 1024) + 8 * (1024 + 256)  # 26,624 weights per layer
ATTENTION = 3 * 4 * 1024 * S // 2  # QK^T + AV over s / 2 keys, forward + eq. 3's 2x backward: 12,582,912 per layer


def lora(**kw) -> TrainingSpec:
    return TrainingSpec(**{"seq_len": S, "global_batch": 2, "micro_batch": 1, "precision": "bf16-master",
                           "lora_rank": 8, "lora_targets": "q,v", **kw})


def test_the_frozen_base_runs_4_flops_per_weight_and_the_adapters_6_by_hand():
    assert LINEAR == 11_272_192 and ADAPTER == 26_624
    full = token_flops(TL, lora().model_copy(update={"lora_rank": 0}))
    got = token_flops(TL, lora())
    assert full.dense_linear == 6 * LINEAR
    assert got.dense_linear == 4 * LINEAR  # forward 2 + input gradient 2, no weight gradient
    assert got.adapter == 6 * ADAPTER == 159_744
    assert got.dense_layer == 4 * (LINEAR + NORMS) + ATTENTION + 6 * ADAPTER == 57_839_616
    assert got.head == 4 * 1000 * 1024  # the frozen head still passes its input gradient down
    assert got.attention == full.attention == ATTENTION  # no weights in the attention core: unchanged


def test_full_recompute_replays_the_frozen_and_the_adapter_forwards_by_hand():
    got = token_flops(TL, lora(recompute="full"))
    assert got.dense_linear == (4 + 2) * LINEAR
    assert got.adapter == (6 + 2) * ADAPTER


def test_an_adapter_on_the_head_adds_its_own_6_r_h_plus_v_by_hand():
    got = token_flops(TL, lora(lora_targets="q,v,head"))
    assert got.head == 4 * 1000 * 1024 + 6 * 8 * (1024 + 1000)


def test_mfu_counts_what_the_frozen_base_runs():
    """NeMo's published LoRA TFLOP/s count the frozen base at 4 of 6 (Llama 2 7B: 26.7 GFLOP per token against 39.8
    for SFT): model_flops_per_step is the executed count without recomputation, here 2 x 2048 tokens."""
    tokens = 2 * S
    per_token = 2 * (4 * (LINEAR + NORMS) + ATTENTION + 6 * ADAPTER) + 4 * 1000 * 1024
    assert model_flops_per_step(TL, lora()) == pytest.approx(tokens * per_token, rel=1e-12)
    assert model_flops_per_step(TL, lora(recompute="full")) == pytest.approx(tokens * per_token, rel=1e-12)


def test_routed_experts_are_frozen_too():
    qwen = ZOO["qwen3-30b-a3b"]
    tr = TrainingSpec(seq_len=1024, global_batch=1, precision="bf16-master")
    full, frozen = token_flops(qwen, tr), token_flops(qwen, tr.model_copy(update={"lora_rank": 16}))
    assert frozen.moe_linear == pytest.approx(full.moe_linear * 4 / 6, rel=1e-12)


def test_the_adapters_run_at_their_roofline_share_of_the_peak_by_hand():
    """lora_A of b s = 2048 tokens x h 1024 x r 8 in bf16: 2 M K N FLOPs over 2 (MK + KN + MN) bytes = 7.907 FLOPs
    per byte, x 2,039 GB/s = 16.1 TFLOP/s of the 312 peak (5.2%): each adapter FLOP takes 1 / 0.0517 of a GEMM one."""
    m, k, n = S, 1024, 8
    intensity = 2 * m * k * n / (2 * (m * k + k * n + m * n))
    assert intensity == pytest.approx(7.9073, rel=1e-4)
    fraction = intensity * 2039e9 / 312e12
    assert expert_gemm_roofline_fraction(m, k, n, 2, 312e12, 2039e9) == pytest.approx(fraction, rel=1e-12)
    st = step_time(TL, lora(), Parallelism(), A100, mfu=0.5)
    tokens = 2 * S
    linears_and_head = tokens * (2 * 4 * LINEAR + 4 * 1000 * 1024) / (312e12 * 0.5)
    adapters = tokens * 2 * 6 * ADAPTER / fraction / (312e12 * 0.5)
    assert st.compute_linear_s == pytest.approx(linears_and_head + adapters, rel=1e-12)


def test_only_the_adapters_are_all_reduced_and_stepped_by_hand():
    """d = 2 on one node, no overlap (plain DDP): the ring moves 2 (d - 1) / d x 2 layers x 26,624 adapters x 4-byte
    fp32 main grads over NVLink's 300 GB/s; the optimizer sweeps the same 53,248 weights with torch's foreach AdamW
    on the fp32 masters: 4 master + 3 grad + (3 + 5 + 6) moment-sized accesses of 4 bytes, then the bf16 copy back
    (read 4, write 2): 90 bytes each, over 2,039 GB/s HBM."""
    trainable = 2 * ADAPTER
    st = step_time(TL, lora(), Parallelism(dp=2), A100)
    assert st.dp_comm_s == pytest.approx(2 * (2 - 1) / 2 * trainable * 4 / 300e9, rel=1e-12)
    assert st.optimizer_s == pytest.approx(trainable * ((4 + 3 + 3 + 5 + 6) * 4 + 4 + 2) / 2039e9, rel=1e-12)
    full = step_time(TL, lora().model_copy(update={"lora_rank": 0}), Parallelism(dp=2), A100)
    assert full.dp_comm_s > 400 * st.dp_comm_s  # 24.6 M base weights against 53 k adapters


def test_zero3_still_all_gathers_the_frozen_base_twice_by_hand():
    """ZeRO-3 over d = 2: the adapters' gradients at ZeRO-3's 1.5 x the all-reduce volume, plus the frozen base
    (2 layers x 11,274,240 + the 1,024,000 embedding + the 1,025,024 head and final norm) all-gathered for the
    forward and again for the backward, 2 (d - 1) / d of it in the 2-byte compute dtype, never reduce-scattered."""
    base = 2 * (LINEAR + NORMS) + 1_024_000 + 1_025_024
    assert base == 24_597_504
    st = step_time(TL, lora(zero_stage=3), Parallelism(dp=2), A100)
    traffic = 1.5 * 2 * (2 - 1) / 2 * 2 * ADAPTER * 4 + 2 * (2 - 1) / 2 * base * 2
    assert st.dp_comm_s + st.dp_comm_overlapped_s == pytest.approx(traffic / 300e9, rel=1e-12)
