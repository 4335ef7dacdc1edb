"""Fit the GEMM shape curve (frenzy_core/gemm.py) to one GPU's measured GEMMs, and show how well it holds.

    python bench/gemm_fit.py                       # the H200 measurements in the repository
    python bench/gemm_fit.py --kernels PATH.json   # another `bench/measure_gpu.py --mode kernels` output

For each GEMM dtype (bf16: forward, dgrad and wgrad of every measured shape; fp8: the forward) and each candidate
output tile (128x128, 128x256, 256x128), least squares in log time over every measured GEMM fits the three free
constants of gemm.GemmCurve (e_max, the K loop's fill K0, the fixed latency); the tile with the smallest residual
wins. The SM count is the datasheet's (132 on GH100). Printed: the constants, the residual of each shape, and, for
comparison, the residual of one efficiency for every shape (what perf.py had before). These are kernel timings,
not training steps: the step-time benches (bench/gpu_accuracy.py, bench/step_time_accuracy.py) are what the curve is
judged on, and none of their rows enters this fit.

The LAST LINE printed is one JSON object; units are in the key names.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core import gemm  # noqa: E402

DEFAULT_KERNELS = REPO / "bench" / "data" / "gpu_h200_2026-12-04" / "kernels_gpu.json"
TILES = ((128, 128), (128, 256), (256, 128))
PEAK_TFLOPS = {"bf16": 989.0, "fp8": 1979.0}  # H100 / H200 SXM dense datasheet peaks (gpus.py)
SMS = 132


def measured_gemms(kernels: dict) -> dict[str, list[tuple]]:
    """(label, M, N, K, TFLOP/s) per dtype: a forward M x K by K x N, its dgrad M x N by N x K, its wgrad K x M by
    M x N (gemm.linear_seconds_per_flop's layouts)."""
    out = {"bf16": [], "fp8": []}
    for g in kernels["gemm"]:
        m, k, n = g["tokens"], g["k"], g["n"]
        out["bf16"] += [(f"{g['layer']} fwd", m, n, k, g["bf16_fwd_tflops"]),
                        (f"{g['layer']} dgrad", m, k, n, g["bf16_dgrad_tflops"]),
                        (f"{g['layer']} wgrad", k, n, m, g["bf16_wgrad_tflops"])]
        if g.get("fp8_fwd_tflops"):
            out["fp8"].append((f"{g['layer']} fwd", m, n, k, g["fp8_fwd_tflops"]))
    return out


def log_residuals(curve: gemm.GemmCurve, rows, peak_flops_s: float) -> np.ndarray:
    m, n, k, tflops = (np.array([r[i] for r in rows], dtype=float) for i in (1, 2, 3, 4))
    return np.log(curve.efficiency(m, n, k, peak_flops_s) * peak_flops_s / (tflops * 1e12))


def fit(rows, peak_flops_s: float) -> tuple[gemm.GemmCurve, np.ndarray]:
    best = None
    for tm, tn in TILES:
        def residuals(x, tm=tm, tn=tn):
            curve = gemm.GemmCurve(arch="fit", sms=SMS, tile_m=tm, tile_n=tn, k_fill=x[1], e_max=x[0],
                                   latency_s=x[2] * 1e-6, source="fit")
            return log_residuals(curve, rows, peak_flops_s)
        res = least_squares(residuals, [0.8, 300.0, 5.0], bounds=([0.1, 0.0, 0.0], [1.0, 5000.0, 100.0]))
        rms = float(np.sqrt(np.mean(res.fun ** 2)))
        if best is None or rms < best[0]:
            best = (rms, gemm.GemmCurve(arch="fit", sms=SMS, tile_m=tm, tile_n=tn, k_fill=float(res.x[1]),
                                        e_max=float(res.x[0]), latency_s=float(res.x[2]) * 1e-6, source="fit"),
                    res.fun)
    return best[1], best[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=Path, default=DEFAULT_KERNELS)
    args = ap.parse_args()
    kernels = json.loads(args.kernels.read_text())
    print(f"GEMM curve fit on {args.kernels.relative_to(REPO) if args.kernels.is_relative_to(REPO) else args.kernels}"
          f" ({kernels.get('device')}, torch {kernels.get('torch_version')})\n")
    summary = {}
    for dtype, rows in measured_gemms(kernels).items():
        peak = PEAK_TFLOPS[dtype] * 1e12
        curve, res = fit(rows, peak)
        shipped = gemm.curve_for("sm90", dtype)
        shipped_res = log_residuals(shipped, rows, peak)
        effs = np.array([r[4] * 1e12 / peak for r in rows])
        const_res = np.log(np.exp(np.mean(np.log(effs))) / effs)
        print(f"{dtype}: {len(rows)} GEMMs; best tile {curve.tile_m}x{curve.tile_n}, e_max {curve.e_max:.3f}, "
              f"K0 {curve.k_fill:.0f}, latency {curve.latency_s * 1e6:.1f} us; log-time residual rms "
              f"{np.sqrt(np.mean(res ** 2)):.3f}, median |.| {np.median(np.abs(res)):.3f}")
        print(f"  shipped gemm.py curve: rms {np.sqrt(np.mean(shipped_res ** 2)):.3f}, median |.| "
              f"{np.median(np.abs(shipped_res)):.3f}; one efficiency for every shape: rms "
              f"{np.sqrt(np.mean(const_res ** 2)):.3f}, median |.| {np.median(np.abs(const_res)):.3f}")
        for (label, m, n, k, tflops), r in zip(rows, shipped_res, strict=True):
            print(f"    {label:<28} M {m:>6} N {n:>6} K {k:>6}  measured {tflops:7.1f} TFLOP/s  "
                  f"curve {tflops * np.exp(r):7.1f}  ({np.expm1(r):+.1%})")
        print()
        summary.update({
            f"{dtype}_gemms": len(rows), f"{dtype}_tile": f"{curve.tile_m}x{curve.tile_n}",
            f"{dtype}_e_max": round(curve.e_max, 3), f"{dtype}_k_fill_elements": round(curve.k_fill, 1),
            f"{dtype}_latency_us": round(curve.latency_s * 1e6, 2),
            f"{dtype}_fit_log_rms": round(float(np.sqrt(np.mean(res ** 2))), 4),
            f"{dtype}_shipped_log_rms": round(float(np.sqrt(np.mean(shipped_res ** 2))), 4),
            f"{dtype}_constant_log_rms": round(float(np.sqrt(np.mean(const_res ** 2))), 4),
        })
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
