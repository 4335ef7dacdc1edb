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
