"""GEMM efficiency by shape (frenzy_core/gemm.py): tiles and waves by hand, the measured H200 GEMMs, the
calibration run left unchanged, and the step-time consequences perf.py draws from it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from frenzy_core import gemm
from frenzy_core.gpus import CATALOG
from frenzy_core.models import ZOO, make_model
from frenzy_core.perf import step_time
from frenzy_core.training import Parallelism, TrainingSpec

KERNELS = Path(__file__).resolve().parents[1] / "bench" / "data" / "gpu_h200_2026-12-04" / "kernels_gpu.json"
PEAK = 989e12


def toy(latency_s=0.0, k_fill=0.0, e_max=1.0) -> gemm.GemmCurve:
    return gemm.GemmCurve(arch="toy", sms=4, tile_m=2, tile_n=2, k_fill=k_fill, e_max=e_max, latency_s=latency_s,
                          source="test")


def test_one_full_wave_runs_at_e_max_and_a_tile_more_halves_it():
    """4 SMs of 2 x 2 tiles: M = 4, N = 4 is 4 tiles, one full wave (efficiency e_max); M = 4, N = 6 is 6 tiles,
    two waves of which the second runs 2 of 4 SMs: 6 / 8 of e_max; M = 3 pads a tile row: 3 / 4."""
    c = toy(e_max=0.8)
    assert float(c.efficiency(4, 4, 64, PEAK)) == pytest.approx(0.8, rel=1e-12)
    assert float(c.efficiency(4, 6, 64, PEAK)) == pytest.approx(0.8 * 6 / 8, rel=1e-12)
    assert float(c.efficiency(3, 4, 64, PEAK)) == pytest.approx(0.8 * 3 / 4, rel=1e-12)


def test_the_k_fill_and_the_latency_by_hand():
    """K0 = 64 at K = 64: half the K loop is fill, efficiency halves; a latency equal to the full-wave time halves it
    again. One wave of 4 tiles x 2 x 2 outputs x 2 x (64 + 64) FLOP-steps at peak = 4096 / peak seconds."""
    assert float(toy(k_fill=64).efficiency(4, 4, 64, PEAK)) == pytest.approx(0.5, rel=1e-12)
    wave_s = 4 * 2 * 2 * 2 * (64 + 64) / PEAK
    assert float(toy(k_fill=64, latency_s=wave_s).efficiency(4, 4, 64, PEAK)) == pytest.approx(0.25, rel=1e-12)


def test_the_shipped_hopper_curve_reproduces_the_measured_h200_gemms():
    """Every GEMM bench/measure_gpu.py timed on the H200 (forward, dgrad and wgrad of 39 shapes, bf16; the fp8
    forwards): the curve's log-time residual against the measurement (rms, median) and, as the comparison the curve
    must beat, one efficiency for every shape (the geometric mean)."""
    kernels = json.loads(KERNELS.read_text())["gemm"]
    rows = {"bf16": [], "fp8": []}
    for g in kernels:
        m, k, n = g["tokens"], g["k"], g["n"]
        rows["bf16"] += [(m, n, k, g["bf16_fwd_tflops"]), (m, k, n, g["bf16_dgrad_tflops"]),
                         (k, n, m, g["bf16_wgrad_tflops"])]
        rows["fp8"].append((m, n, k, g["fp8_fwd_tflops"]))
    for dtype, peak, rms_max in (("bf16", 989e12, 0.14), ("fp8", 1979e12, 0.10)):
        m, n, k, tflops = (np.array([r[i] for r in rows[dtype]], dtype=float) for i in range(4))
        measured = tflops * 1e12 / peak
        res = np.log(gemm.curve_for("sm90", dtype).efficiency(m, n, k, peak) / measured)
        const = np.log(np.exp(np.mean(np.log(measured))) / measured)
        assert np.sqrt(np.mean(res ** 2)) <= rms_max
        assert np.median(np.abs(res)) <= 0.07
        assert np.sqrt(np.mean(res ** 2)) < 0.5 * np.sqrt(np.mean(const ** 2))


def test_curves_by_architecture_and_dtype():
    assert gemm.curve_for("sm90", "bf16") is gemm.HOPPER_BF16 and gemm.curve_for("sm90", "fp16") is gemm.HOPPER_BF16
    assert gemm.curve_for("sm90", "fp8") is gemm.HOPPER_FP8
    assert gemm.curve_for(None, "bf16") is None and gemm.curve_for("sm80", "bf16") is None
    for name in ("H100-80GB", "H200-141GB", "H100-96GB"):
        assert CATALOG[name].gemm_arch == "sm90" and CATALOG[name].gemm_reference in gemm.REFERENCES
    assert CATALOG["A100-80GB"].gemm_arch is None


def test_the_reference_run_itself_runs_at_the_calibrated_efficiency():
    """linear_time_factors at the calibration run's own shapes: the FLOP-weighted factor over its attention and MLP
    linears is exactly 1 (the run's efficiency is what gpus.py measured)."""
    ref = gemm.REFERENCES["foundry-mpt7b-2k"]
    mpt7b = make_model(name="mpt-7b", vocab_size=50432, hidden_size=4096, num_layers=32, num_heads=32,
                       ffn_size=16384, mlp_kind="gelu", position_kind="rotary", bias=False,
                       tie_embeddings=True)
    f_attn, f_mlp = gemm.linear_time_factors(gemm.HOPPER_BF16, "foundry-mpt7b-2k", mpt7b, ref.tokens, 1, PEAK)
    attn_flops = 4096 * 3 * 4096 + 4096 * 4096
    mlp_flops = 2 * 4096 * 16384
    assert (attn_flops * f_attn + mlp_flops * f_mlp) / (attn_flops + mlp_flops) == pytest.approx(1.0, rel=1e-12)


def test_tensor_parallelism_narrows_the_gemms_and_costs_time():
    """Llama-2-70B at 8,192 tokens per GEMM: splitting q|k|v and the MLP t ways narrows N or K; the measured curve
    charges t = 8 more per FLOP than t = 4, t = 4 more than t = 1 (the attention projections most: q|k|v is 10,240
    wide, 1,280 at t = 8)."""
    model = ZOO["llama-2-70b"]
    f = {t: gemm.linear_time_factors(gemm.HOPPER_BF16, "foundry-mpt7b-2k", model, 8192, t, PEAK) for t in (1, 4, 8)}
    assert f[1][0] < f[4][0] < f[8][0] and f[1][1] <= f[4][1] < f[8][1]
    assert f[8][0] - f[1][0] > f[8][1] - f[1][1]


def test_no_curve_no_change():
    assert gemm.linear_time_factors(None, "foundry-mpt7b-2k", ZOO["gpt2"], 1024, 1, PEAK) == (1.0, 1.0)
    assert gemm.linear_time_factors(gemm.HOPPER_BF16, None, ZOO["gpt2"], 1024, 1, PEAK) == (1.0, 1.0)


def test_step_time_on_an_a100_does_not_see_the_curve_and_on_an_h100_does():
    """The A100 has no measured curve: its step is the same with gemm_arch set to None. On the H100 a short
    micro-batch (the small GEMMs) is charged more per token than with the curve switched off."""
    model = ZOO["llama-2-7b"]
    tr = TrainingSpec(seq_len=512, global_batch=8, micro_batch=1, precision="bf16-master", attention="flash")
    a100 = CATALOG["A100-80GB"]
    assert step_time(model, tr, Parallelism(), a100).step_time_s == step_time(
        model, tr, Parallelism(), a100.model_copy(update={"gemm_arch": None})).step_time_s
    h100 = CATALOG["H100-80GB"]
    with_curve = step_time(model, tr, Parallelism(), h100)
    without = step_time(model, tr, Parallelism(), h100.model_copy(update={"gemm_arch": None}))
    assert with_curve.compute_s > without.compute_s
    # the whole difference is in the linears
    assert with_curve.compute_attention_s == pytest.approx(without.compute_attention_s, rel=1e-12)


def test_lora_drops_the_weight_gradient_gemm():
    """A frozen base has no wgrad GEMM: with it the seconds per FLOP are the forward's and dgrad's only."""
    shapes = [(2048, 4096, 4096, 1.0)]
    c = gemm.HOPPER_BF16
    by_hand = (1 / c.efficiency(2048, 4096, 4096, PEAK) + 1 / c.efficiency(2048, 4096, 4096, PEAK)) / 2
    assert float(gemm.linear_seconds_per_flop(c, shapes, PEAK, wgrad=False)) == pytest.approx(float(by_hand), rel=1e-12)
    with_wgrad = (2 / c.efficiency(2048, 4096, 4096, PEAK) + 1 / c.efficiency(4096, 4096, 2048, PEAK)) / 3
    assert float(gemm.linear_seconds_per_flop(c, shapes, PEAK)) == pytest.approx(float(with_wgrad), rel=1e-12)
