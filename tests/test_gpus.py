import re

import pytest

from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG, GIB, get_gpu, make_gpu

REQUIRED = ["A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "L40S", "A10", "RTX-3090", "RTX-4090",
            "RTX-2080Ti", "V100-32GB", "T4", "MI300X"]


@pytest.mark.parametrize("name", REQUIRED)
def test_catalog_has_required_type_with_source(name):
    gpu = CATALOG[name]
    assert gpu.source and gpu.price_per_hour_usd > 0 and gpu.bf16_tflops > 0


def test_memory_bytes_from_gib():
    assert CATALOG["A100-80GB"].memory_bytes == 80 * GIB


def test_published_peaks():
    assert CATALOG["A100-40GB"].bf16_tflops == 312 and CATALOG["H100-80GB"].bf16_tflops == 989


def test_unknown_gpu_lists_catalog():
    with pytest.raises(SpecError, match="A100-40GB"):
        get_gpu("B300")


def test_user_gpu_type_validated():
    with pytest.raises(SpecError, match="memory_gib"):
        make_gpu(name="X", memory_gib=-1, bf16_tflops=1, fp32_tflops=1, memory_bandwidth_gbyte_s=1)
    assert get_gpu("X", {"X": make_gpu(name="X", memory_gib=8, bf16_tflops=1, fp32_tflops=1,
                                       memory_bandwidth_gbyte_s=1)}).memory_gib == 8


def test_datasheet_peaks_stay_next_to_the_measured_figures():
    t4 = CATALOG["T4"]
    assert (t4.bf16_tflops, t4.fp32_tflops) == (65, 8.1)  # datasheet
    assert t4.fp32_mfu == 0.569 and t4.step_overhead_s == 0.214  # Sia aws bert fit
    assert "Sia" in t4.calibration_source and "g4dn" in t4.calibration_source


@pytest.mark.parametrize("name", ["A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"])
def test_modern_types_cite_a_published_llm_mfu(name):
    gpu = CATALOG[name]
    assert "llm-foundry@c90b9b31" in gpu.mfu_source and "MFU" in gpu.mfu_source
    # the quoted percentage is the stored fraction, to the rounding
    quoted = float(re.search(r"MFU (\d+\.\d+)", gpu.mfu_source).group(1))
    assert gpu.mfu == pytest.approx(quoted / 100, abs=6e-4)


def test_v100_mfu_is_megatrons_published_fraction():
    for name in ("V100-32GB", "V100-16GB"):
        assert CATALOG[name].mfu == 0.48 and "48% of the theoretical peak" in CATALOG[name].mfu_source


def test_every_type_says_where_its_mfu_comes_from():
    for gpu in CATALOG.values():
        assert gpu.mfu_source and gpu.calibration_source


def test_efficiency_by_compute_dtype():
    a100 = CATALOG["A100-40GB"]
    # the A100-40GB's MFU run recomputed every block: its hardware efficiency comes from the same run's HFU
    assert a100.mfu == 0.509 and a100.efficiency("bf16") == a100.hw_efficiency == 0.6876
    assert a100.efficiency("fp32") == 0.399
    assert a100.achieved_tflops("fp32") == pytest.approx(156 * 0.399)
    h100 = CATALOG["H100-80GB"]
    assert h100.fp32_mfu is None and h100.efficiency("fp32") == h100.hw_efficiency  # no fp32 measurement: falls back


def test_measured_fields_validated():
    base = dict(name="X", memory_gib=8, bf16_tflops=1, fp32_tflops=1, memory_bandwidth_gbyte_s=1)
    with pytest.raises(SpecError, match="intra_link_efficiency"):
        make_gpu(**base, intra_link_efficiency=1.5)
    with pytest.raises(SpecError, match="step_overhead_s"):
        make_gpu(**base, step_overhead_s=-1)
    with pytest.raises(SpecError, match="fp32_mfu"):
        make_gpu(**base, fp32_mfu=0)


FOUNDRY_7B = dict(n_params=6_658_859_008, layers=32, d_model=4096, seq=2048)  # the quoted MPT-7B rows


def test_hw_efficiency_is_the_published_figure_in_perfs_flop_count():
    """llm-foundry's MFU counts 3 (2N + 4 l h s^2 / s) FLOPs per token over all s keys, its HFU 4 x that with
    activation checkpointing; perf.py counts the same run's executed FLOPs (causal: s / 2 keys, recompute replayed).
    The run spent T = counted / (published x peak) per token; its FlashAttention-2 attention core took its kernel
    time at the published kernel rates (seq 2048, head dim 128, causal): H100 forward 298 TFLOP/s (FA3 paper arXiv
    2407.08608 Fig. 5(d)), backward 291 x 298 / 362 (Fig. 6(b) unmasked, scaled by the forward's causal / unmasked
    ratio, Fig. 5(c)); A100 155 forward and backward (FA2 paper arXiv 2307.08691 Fig. 4(d), fwd + bwd). A forward
    of the core is 4 s h / 2 FLOPs per token per layer; flash's backward 2.5 forwards; full recompute replays the
    forward. hw_efficiency = the rest of perf.py's FLOPs / (peak x (T - the kernel's time))."""
    from frenzy_core.models import ModelSpec
    from frenzy_core.perf import training_flops_per_step
    from frenzy_core.training import TrainingSpec

    n, layers, h, s = FOUNDRY_7B.values()
    # MPT-7B as bench/data/published_throughput.jsonl's rows give it (GeLU MLP of 4h, LayerNorm, tied head)
    mpt7b = ModelSpec(name="mpt-7b", vocab_size=50368, hidden_size=h, num_layers=layers, num_heads=32,
                      max_positions=s)
    theirs = 3 * (2 * n + 4 * layers * h * s)
    fwd = 4 * s * h / 2  # one forward of the causal attention core, per token and layer
    for name, published, recompute, f_fwd, f_bwd in (
            ("H100-80GB", 0.4644, "none", 298e12, 291e12 * 298 / 362),
            ("A100-80GB", 0.6423, "none", 155e12, 155e12), ("A100-40GB", 0.6789, "full", 155e12, 155e12)):
        tr = TrainingSpec(seq_len=s, global_batch=1, recompute=recompute)
        ours = training_flops_per_step(mpt7b, tr) / s
        counted = theirs * (4 / 3 if recompute == "full" else 1)  # HFU: 4 passes
        peak = CATALOG[name].bf16_tflops * 1e12
        forwards = 2 if recompute == "full" else 1
        kernel_s = layers * (forwards * fwd / f_fwd + 2.5 * fwd / f_bwd)
        rest = ours - layers * (forwards + 2) * fwd  # perf's count: the core as forwards + a 2x backward
        # MPT's element-wise ops, one eager kernel each (LPLayerNorm = F.layer_norm, nn.GELU, residual adds), bytes
        # per element forward (x forwards) + backward at bf16: 2 LayerNorms 4 + 6, GeLU over 4h 4 + 6, 2 adds 6 + 6
        elementwise = 2 * h * (4 * forwards + 6) + 4 * h * (4 * forwards + 6) + 2 * h * (6 * forwards + 6)
        elementwise_s = layers * elementwise / (CATALOG[name].memory_bandwidth_gbyte_s * 1e9)
        want = rest / (peak * (counted / (published * peak) - kernel_s - elementwise_s))
        assert CATALOG[name].hw_efficiency == pytest.approx(want, abs=6e-4), name
    # the Hopper / Blackwell types without a run of their own take the H100's
    for name in ("H200-141GB", "B200", "GB200"):
        assert CATALOG[name].hw_efficiency == CATALOG["H100-80GB"].hw_efficiency
        assert "assumed" in CATALOG[name].mfu_source


@pytest.mark.parametrize("name, fp8, bf16", [("H100-80GB", 1979, 989), ("H200-141GB", 1979, 989),
                                             ("H100-96GB", 1979, 989), ("B200", 4500, 2250), ("GB200", 5000, 2500)])
def test_fp8_peaks_are_the_datasheets_dense_figures_twice_bf16(name, fp8, bf16):
    gpu = CATALOG[name]
    assert (gpu.fp8_tflops, gpu.bf16_tflops) == (fp8, bf16) and gpu.peak_tflops("fp8") == fp8
    assert "fp8" in gpu.source


def test_parts_without_fp8_tensor_cores_run_fp8_linears_at_the_bf16_peak():
    assert CATALOG["A100-80GB"].fp8_tflops is None and CATALOG["A100-80GB"].peak_tflops("fp8") == 312
    with pytest.raises(SpecError, match="fp8_tflops"):
        make_gpu(name="X", memory_gib=8, bf16_tflops=1, fp32_tflops=1, memory_bandwidth_gbyte_s=1, fp8_tflops=0)


def test_blackwell_memory_is_the_systems_total_over_its_gpus():
    assert CATALOG["B200"].memory_gib == 1440 / 8 and "1,440 GB" in CATALOG["B200"].source  # DGX B200
    assert CATALOG["GB200"].memory_gib == pytest.approx(13_400 / 72, abs=0.2)  # NVL72: 13.4 TB over 72 GPUs
    assert CATALOG["B200"].intra_link_gbyte_s == CATALOG["GB200"].intra_link_gbyte_s == 1800 / 2  # NVLink5


def test_h100_96gb_efficiency_comes_from_a_bench_row_that_is_not_held_out():
    import json
    from pathlib import Path

    gpu = CATALOG["H100-96GB"]
    row_id = "titan-llama31-8b-h10096-fsdp-compile-8gpu"
    assert row_id in gpu.mfu_source and gpu.mfu == 0.460
    rows = Path(__file__).resolve().parents[1] / "bench" / "data" / "published_throughput.jsonl"
    row = next(json.loads(line) for line in rows.read_text().splitlines() if row_id in line)
    assert row["held_out"] is False and row["gpu_type"] == "H100-96GB"
