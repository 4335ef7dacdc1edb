"""GEMM efficiency as a function of shape: tiles, waves and the K loop (issue 19 item 2).

One GEMM of an M x K by K x N product runs as ceil(M / TM) x ceil(N / TN) output tiles, each an SM's K loop; the
tiles go to the SMs in waves of `sms` at a time, so a product whose tile count does not fill its last wave leaves
SMs idle ("wave quantization"), a dimension not a multiple of the tile computes padding ("tile quantization"), and
every tile pays its pipeline's fill and drain, about K0 steps of the K loop, whatever its K (NVIDIA, "Matrix
Multiplication Background User's Guide", docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication,
sections "Tile Quantization" and "Wave Quantization"). A kernel also costs a fixed launch-to-finish latency:

    time(M, N, K) = waves x sms x TM x TN x 2 (K + K0) / (peak x e_max) + latency,   waves = ceil(tiles / sms)
    efficiency    = 2 M N K / (time x peak)

The constants (tile, K0, e_max, latency) are those that best reproduce one GPU's measured GEMMs (least squares in log
time over every measured shape, forward, dgrad and wgrad): `bench/measure_gpu.py --mode kernels` on an H200
(bench/data/gpu_h200_2026-12-04/kernels_gpu.json, torch 2.11 cuBLAS, 39 shapes x 3 GEMMs bf16 and 39 fp8);
`bench/gemm_fit.py` refits them and prints the residuals. They hold for every GPU of that architecture (the H100 SXM
and H200 are one GH100 die, 132 SMs; the H100 96 GB too); other types have no measured curve, so their GEMMs keep one
efficiency whatever the shape (`curve_for` returns None).

perf.py keeps its calibrated end-to-end efficiency (`GPUType.efficiency`, from a published run) and takes only the
shape's *relative* speed from here: a layer's linears run at efficiency x S(shapes) / S(the calibration run's shapes)
(`linear_time_factor`), so the calibration run itself is reproduced exactly, and a tensor-parallel split that narrows
the GEMMs, or a micro-batch that shortens them, is charged what the measured curve says it costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from frenzy_core.models import ModelSpec


@dataclass(frozen=True)
class GemmCurve:
    """One architecture's measured GEMM curve (module docstring): output tile TM x TN, pipeline fill K0 (in K
    elements), the best fraction of peak a full wave reaches, and the fixed latency of one kernel."""

    arch: str
    sms: int
    tile_m: int
    tile_n: int
    k_fill: float
    e_max: float
    latency_s: float
    source: str

    def efficiency(self, m, n, k, peak_flops_s: float):
        """Fraction of `peak_flops_s` one M x K by K x N GEMM reaches (broadcasts over numpy arrays).

        >>> c = HOPPER_BF16
        >>> # 64 x 64 = 4,096 tiles: 31.03 waves of 132 run as 32; 2 x 8192^3 FLOPs over 32 x 132 x 128^2 x 2 x (8192 + 223)
        >>> # / (989e12 x 0.772) + 16.5 us = 1.5420 ms
        >>> round(float(c.efficiency(8192, 8192, 8192, 989e12)), 3)
        0.721
        """
        m, n, k = (np.asarray(x, dtype=np.float64) for x in (m, n, k))
        tiles = np.ceil(m / self.tile_m) * np.ceil(n / self.tile_n)
        waves = np.ceil(tiles / self.sms)
        seconds = (waves * self.sms * self.tile_m * self.tile_n * 2.0 * (k + self.k_fill) / (peak_flops_s * self.e_max)
                   + self.latency_s)
        return 2.0 * m * n * k / (seconds * peak_flops_s)


_KERNELS = "bench/data/gpu_h200_2026-12-04/kernels_gpu.json (bench/measure_gpu.py --mode kernels, NVIDIA H200, torch 2.11)"
# fitted by bench/gemm_fit.py on every measured GEMM of _KERNELS (tile chosen among 128x128, 128x256, 256x128 by the
# same least squares); log-time residuals: bf16 rms 0.132, median 0.064; fp8 rms 0.088, median 0.043
HOPPER_BF16 = GemmCurve(arch="sm90", sms=132, tile_m=128, tile_n=128, k_fill=223.0, e_max=0.772, latency_s=16.5e-6,
                        source=_KERNELS)
HOPPER_FP8 = GemmCurve(arch="sm90", sms=132, tile_m=128, tile_n=128, k_fill=322.0, e_max=0.714, latency_s=23.4e-6,
                       source=_KERNELS)
CURVES = {("sm90", "bf16"): HOPPER_BF16, ("sm90", "fp8"): HOPPER_FP8}


def curve_for(arch: str | None, dtype: str) -> GemmCurve | None:
    """The measured curve of an architecture and GEMM dtype (bf16 / fp16 share bf16's), or None (none measured)."""
    if arch is None:
        return None
    return CURVES.get((arch, "bf16" if dtype in ("bf16", "fp16") else dtype))


@dataclass(frozen=True)
class LinearShapes:
    """The dimensions of one dense decoder layer's linears that set their GEMM shapes: the tokens one GEMM sees,
    the residual width, the q|k|v and attention-output widths, the MLP's inner width and its input matrices."""

    tokens: float
    hidden: float
    qkv_width: float
    attention_out: float
    ffn: float
    mlp_in_matrices: float  # 2 for a gated MLP (gate and up), 1 for fc1

    @classmethod
    def of(cls, model: ModelSpec, tokens) -> LinearShapes:
        return cls(tokens=tokens, hidden=model.hidden_size, qkv_width=model.q_dim + model.kv_dim + model.v_dim,
                   attention_out=model.attention_output_dim, ffn=model.ffn,
                   mlp_in_matrices=2.0 if model.mlp_kind == "swiglu" else 1.0)

    def attention_gemms(self, t) -> list[tuple]:
        """Forward GEMMs (M, K, N, matrices) of the attention projections on one tensor-parallel rank: the
        column-parallel q|k|v splits N by t, the row-parallel output projection K (Megatron-Core
        tensor_parallel/layers.py ColumnParallelLinear / RowParallelLinear; torchtitan's ColwiseParallel /
        RowwiseParallel). M = micro-batch x sequence / cp: sequence parallelism all-gathers the sequence before a
        column-parallel linear, so the GEMM sees all of it."""
        return [(self.tokens, self.hidden, self.qkv_width / t, 1.0), (self.tokens, self.attention_out / t, self.hidden, 1.0)]

    def mlp_gemms(self, t) -> list[tuple]:
        """The dense MLP's: up (and gate) column-parallel, down row-parallel."""
        return [(self.tokens, self.hidden, self.ffn / t, self.mlp_in_matrices), (self.tokens, self.ffn / t, self.hidden, 1.0)]


# The calibration runs whose end-to-end efficiency the catalog carries (gpus.py `gemm_reference`), as the shapes
# their linears ran at (bench/data/published_throughput.jsonl, tp 1 both):
REFERENCES = {
    # mosaicml/llm-foundry@c90b9b31 scripts/train/benchmarking/README.md "7b | 2048 | 8 GPUs" (MPT-7B: d_model 4096,
    # expansion 4, fused Wqkv, GeLU MLP), micro-batch 6 x 2,048 tokens
    "foundry-mpt7b-2k": LinearShapes(tokens=6 * 2048, hidden=4096, qkv_width=3 * 4096, attention_out=4096,
                                     ffn=16384, mlp_in_matrices=1.0),
    # pytorch/torchtitan@b5bcd76c benchmarks/llama3_h100_202412_torchtitan.md, Llama 3.1 8B FSDP + compile, local
    # batch 2 x 8,192 tokens (GQA 32 / 8 heads of 128, SwiGLU 14336)
    "titan-llama31-8b-8k": LinearShapes(tokens=2 * 8192, hidden=4096, qkv_width=4096 + 2 * 1024,
                                        attention_out=4096, ffn=14336, mlp_in_matrices=2.0),
}


def linear_seconds_per_flop(curve: GemmCurve, gemms, peak_flops_s: float, wgrad: bool = True):
    """Seconds per FLOP (x peak) of a set of linears' forward, dgrad and wgrad GEMMs, FLOP-weighted: the harmonic
    mean of their efficiencies. The dgrad of an M x K by K x N forward is M x N by N x K, its wgrad K x M by M x N
    (torch.nn.functional.linear's autograd; TE's general_gemm layouts); a frozen weight (LoRA's base) has no wgrad.

    >>> square = [(8192, 8192, 8192, 1.0)]  # its dgrad and wgrad have the forward's shape: 1 / that efficiency
    >>> round(float(linear_seconds_per_flop(HOPPER_BF16, square, 989e12) * HOPPER_BF16.efficiency(8192, 8192, 8192, 989e12)), 9)
    1.0
    """
    flops = time = 0.0
    for m, k, n, matrices in gemms:
        f = 2.0 * m * n * k * matrices
        for gm, gn, gk in ((m, n, k), (m, k, n), (k, n, m))[: 3 if wgrad else 2]:
            flops = flops + f
            time = time + f / curve.efficiency(gm, gn, gk, peak_flops_s)
    return time / flops


def linear_time_factors(curve: GemmCurve | None, reference: str | None, model: ModelSpec, tokens, t,
                        peak_flops_s: float, wgrad: bool = True):
    """(attention projections, dense MLP): how much longer (> 1) or shorter each set of linears takes than the
    calibration run's linears (`REFERENCES[reference]`, all of them) at the same efficiency, S(these) / S(ref).
    (1.0, 1.0) where the type has no measured curve or no reference run."""
    if curve is None or reference is None:
        return 1.0, 1.0
    base = _reference_seconds_per_flop(curve, reference, peak_flops_s)
    shapes = LinearShapes.of(model, tokens)
    return (linear_seconds_per_flop(curve, shapes.attention_gemms(t), peak_flops_s, wgrad) / base,
            linear_seconds_per_flop(curve, shapes.mlp_gemms(t), peak_flops_s, wgrad) / base)


@lru_cache(maxsize=64)
def _reference_seconds_per_flop(curve: GemmCurve, reference: str, peak_flops_s: float) -> float:
    ref = REFERENCES[reference]
    return float(linear_seconds_per_flop(curve, ref.attention_gemms(1) + ref.mlp_gemms(1), peak_flops_s))
