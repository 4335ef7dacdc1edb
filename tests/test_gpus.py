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
    assert a100.efficiency("bf16") == a100.mfu == 0.509
    assert a100.efficiency("fp32") == 0.399
    assert a100.achieved_tflops("fp32") == pytest.approx(156 * 0.399)
    h100 = CATALOG["H100-80GB"]
    assert h100.fp32_mfu is None and h100.efficiency("fp32") == h100.mfu  # no fp32 measurement: falls back


def test_measured_fields_validated():
    base = dict(name="X", memory_gib=8, bf16_tflops=1, fp32_tflops=1, memory_bandwidth_gbyte_s=1)
    with pytest.raises(SpecError, match="intra_link_efficiency"):
        make_gpu(**base, intra_link_efficiency=1.5)
    with pytest.raises(SpecError, match="step_overhead_s"):
        make_gpu(**base, step_overhead_s=-1)
    with pytest.raises(SpecError, match="fp32_mfu"):
        make_gpu(**base, fp32_mfu=0)
