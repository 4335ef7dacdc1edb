"""The GPU catalog: memory, dense peak TFLOP/s, memory bandwidth, intra-node link, price, and where each came from.

Memory is the nominal capacity in GiB as the vendor names the part (an "80GB" H100 reports 81,559 MiB); the CUDA
context and allocator reserve are modelled as overhead in `memory.py`, not taken off here.
Peak TFLOP/s are dense (no 2:4 sparsity) tensor-core figures for bf16, or fp16 on parts without bf16 (T4, V100,
RTX 2080 Ti, P100), with fp32 accumulation where the vendor distinguishes (GeForce cards).
Prices are typical on-demand US$ per GPU-hour in 2024-2025 from public price lists; they are planning defaults,
meant to be overridden with the user's own rates.
Next to these datasheet figures each type carries measured ones (`mfu`, `fp32_mfu`, `step_overhead_s`, link
efficiencies), each with its source: published LLM training MFU for the modern types, Sia's profiles for the types
Sia measured; "assumed, not measured" where neither exists (docs/perf.md, "Calibration").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from frenzy_core.errors import SpecError, from_validation_error

GIB = 1 << 30
LinkKind = Literal["nvlink", "pcie", "infinity-fabric"]


MAX_GPU_MEMORY_GIB = 1_048_576  # 1 PiB per GPU: 5,000x the largest today; keeps byte counts far inside int64


class GPUType(BaseModel):
    """One kind of accelerator. Units are in the field names."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # NaN passes every `<= 0` check

    name: str  # catalog key, e.g. "A100-80GB"
    memory_gib: float  # nominal device memory (GiB)
    bf16_tflops: float  # dense tensor-core peak for bf16 (fp16 where bf16 is absent)
    fp32_tflops: float  # peak for fp32 training (TF32 tensor cores where present)
    memory_bandwidth_gbyte_s: float  # HBM/GDDR bandwidth, GB/s
    intra_link: LinkKind = "pcie"  # how GPUs in one node talk
    intra_link_gbyte_s: float = 32.0  # per-GPU unidirectional GPU-to-GPU bandwidth inside a node, GB/s
    price_per_hour_usd: float = 1.0  # typical on-demand price per GPU-hour
    mfu: float = 0.40  # model-FLOPs utilisation of bf16/fp16 training: measured where mfu_source says so
    source: str = ""  # where the datasheet figures (memory, peaks, bandwidths, price) come from
    # Measured behaviour, next to the datasheet numbers above (docs/perf.md, bench/step_time_calibration.py):
    fp32_mfu: float | None = None  # achieved fraction of fp32_tflops in fp32 training; None = mfu
    step_overhead_s: float = 0.0  # fixed per-step cost (launches, data loading, Python) on top of the FLOPs
    intra_link_efficiency: float = 1.0  # achieved / nominal bandwidth of a gradient all-reduce inside a node
    network_efficiency: float = 1.0  # achieved / nominal NIC bandwidth of an all-reduce across nodes
    mfu_source: str = "assumed, not measured"  # where mfu comes from
    calibration_source: str = "not measured: nominal links, no overhead"  # where the four fields above come from

    @model_validator(mode="after")
    def _check(self) -> GPUType:
        for field in ("memory_gib", "bf16_tflops", "fp32_tflops", "memory_bandwidth_gbyte_s", "intra_link_gbyte_s"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive, got {getattr(self, field)}")
        if self.memory_gib > MAX_GPU_MEMORY_GIB:
            raise ValueError(f"memory_gib must be at most {MAX_GPU_MEMORY_GIB:,} (GiB per GPU), got {self.memory_gib}")
        if self.price_per_hour_usd < 0:
            raise ValueError(f"price_per_hour_usd must be >= 0, got {self.price_per_hour_usd}")
        for field in ("mfu", "fp32_mfu", "intra_link_efficiency", "network_efficiency"):
            value = getattr(self, field)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{field} must be in (0, 1], got {value}")
        if self.step_overhead_s < 0:
            raise ValueError(f"step_overhead_s must be >= 0, got {self.step_overhead_s}")
        return self

    @property
    def memory_bytes(self) -> int:  # bounded by MAX_GPU_MEMORY_GIB: fits int64 with room
        return int(self.memory_gib * GIB)

    def peak_tflops(self, compute_dtype: str) -> float:
        return self.bf16_tflops if compute_dtype == "bf16" else self.fp32_tflops

    def efficiency(self, compute_dtype: str) -> float:
        """Achieved fraction of `peak_tflops(compute_dtype)`: `mfu` for bf16/fp16, `fp32_mfu` (else `mfu`) for fp32."""
        if compute_dtype == "bf16" or self.fp32_mfu is None:
            return self.mfu
        return self.fp32_mfu

    def achieved_tflops(self, compute_dtype: str = "bf16") -> float:
        """Peak x efficiency: the TFLOP/s one GPU of this type delivers to training."""
        return self.peak_tflops(compute_dtype) * self.efficiency(compute_dtype)


_NV_A100 = "NVIDIA A100 datasheet (2021): 312 TF bf16 dense, 156 TF TF32, NVLink3 600 GB/s bidirectional"
_NV_H100 = "NVIDIA H100 datasheet (SXM5): 989 TF bf16 dense, 3.35 TB/s, NVLink4 900 GB/s bidirectional"
_LAMBDA = "price: Lambda Cloud on-demand list, 2024"
# Measured figures (docs/perf.md "Calibration"). LLM MFU: mosaicml/llm-foundry @ c90b9b312c644dbde5c9e6eef75c6f1c117d8782,
# scripts/train/benchmarking/README.md, the row "7b | 2048 | 8 GPUs" of each GPU's table (MFU column, FSDP, bf16,
# end-to-end, same 6N + 12lhs FLOPs as ours). Sia: siasosp23/artifacts @ aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70,
# sia-simulator/traces/bert (fp32 BERT-base SQuAD) and gpt_pmp profiles, fitted on the calibration half by
# bench/step_time_calibration.py (2026-12-01): fp32_mfu and step_overhead_s from one-GPU rows (slope and intercept),
# link efficiencies = median nominal ring time / measured sync_time (single-node resp. multi-node rows).
_FOUNDRY = "mosaicml/llm-foundry@c90b9b31 scripts/train/benchmarking/README.md"
_SIA = "Sia SOSP'23 profiles (siasosp23/artifacts@aaf7a0de sia-simulator/traces), bench/step_time_calibration.py"
_NOMINAL = "links nominal: the LLM MFU is end-to-end, its all-reduce included"
_MEGATRON_V1 = ("nv-adlr/nv-adlr.github.io@1576088d _projects/megatron-lm-v1.md: GPT-2 1.2B on one V100 of a DGX-2H "
                "'62.4 teraFLOPs ... 48% of the theoretical peak'")
_TITAN = ("cross-check pytorch/torchtitan@eaea6f6a docs/performance.md: Llama 3.1 8B FSDP on 8 H100 (500 W) "
          "'33% to 39% MFU'")

_CATALOG_LIST = [
    GPUType(name="A100-40GB", memory_gib=40, bf16_tflops=312, fp32_tflops=156, memory_bandwidth_gbyte_s=1555,
            intra_link="nvlink", intra_link_gbyte_s=300, price_per_hour_usd=1.29, mfu=0.509,
            source=f"{_NV_A100}; 1.555 TB/s HBM2; {_LAMBDA}",
            fp32_mfu=0.399, step_overhead_s=0.121,
            mfu_source=f"{_FOUNDRY}: a100_40gb 7b seq 2048 8 GPUs MFU 50.92 (datasheet-era assumption was 0.45)",
            calibration_source=f"{_SIA}: dgx/dgx-ext bert one-GPU fit (TF32); {_NOMINAL}"),
    GPUType(name="A100-80GB", memory_gib=80, bf16_tflops=312, fp32_tflops=156, memory_bandwidth_gbyte_s=2039,
            intra_link="nvlink", intra_link_gbyte_s=300, price_per_hour_usd=1.79, mfu=0.642,
            source=f"{_NV_A100}; 2.039 TB/s HBM2e; {_LAMBDA}",
            fp32_mfu=0.399, step_overhead_s=0.121,
            mfu_source=f"{_FOUNDRY}: a100_80gb 7b seq 2048 8 GPUs MFU 64.23",
            calibration_source=f"{_SIA}: the A100-40GB fit (same GA100 chip); {_NOMINAL}"),
    GPUType(name="H100-80GB", memory_gib=80, bf16_tflops=989, fp32_tflops=494, memory_bandwidth_gbyte_s=3350,
            intra_link="nvlink", intra_link_gbyte_s=450, price_per_hour_usd=2.99, mfu=0.464,
            source=f"{_NV_H100}; {_LAMBDA}",
            mfu_source=f"{_FOUNDRY}: h100_80gb 7b seq 2048 8 GPUs MFU 46.44; {_TITAN}",
            calibration_source=f"not measured: no overhead; {_NOMINAL}"),
    GPUType(name="H200-141GB", memory_gib=141, bf16_tflops=989, fp32_tflops=494, memory_bandwidth_gbyte_s=4800,
            intra_link="nvlink", intra_link_gbyte_s=450, price_per_hour_usd=3.79, mfu=0.464,
            source="NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s, same compute as H100 SXM; price: public cloud lists 2025",
            mfu_source=f"{_FOUNDRY}: the H100 figure, 7b seq 2048 8 GPUs MFU 46.44 (same GH100 compute; no H200 table found)",
            calibration_source=f"not measured: no overhead; {_NOMINAL}"),
    GPUType(name="MI300X", memory_gib=192, bf16_tflops=1307, fp32_tflops=654, memory_bandwidth_gbyte_s=5300,
            intra_link="infinity-fabric", intra_link_gbyte_s=448, price_per_hour_usd=3.49, mfu=0.30,
            source="AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, 1307 TF bf16 dense, 7 x 64 GB/s IF links; price: public cloud lists 2025"),
    GPUType(name="L40S", memory_gib=48, bf16_tflops=362, fp32_tflops=183, memory_bandwidth_gbyte_s=864,
            intra_link="pcie", intra_link_gbyte_s=32, price_per_hour_usd=1.00, mfu=0.35,
            source="NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, 362 TF bf16 dense (733 sparse), PCIe Gen4 x16; price: public cloud lists 2025"),
    GPUType(name="A10", memory_gib=24, bf16_tflops=125, fp32_tflops=62.5, memory_bandwidth_gbyte_s=600,
            intra_link="pcie", intra_link_gbyte_s=32, price_per_hour_usd=0.75, mfu=0.35,
            source="NVIDIA A10 datasheet: 24 GB GDDR6, 600 GB/s, 125 TF bf16 dense, PCIe Gen4; price: Lambda Cloud 2024"),
    GPUType(name="RTX-3090", memory_gib=24, bf16_tflops=71, fp32_tflops=35.6, memory_bandwidth_gbyte_s=936,
            intra_link="pcie", intra_link_gbyte_s=16, price_per_hour_usd=0.22, mfu=0.35,
            source="NVIDIA Ampere GA102 whitepaper: 71 TF fp16/bf16 with fp32 accumulate, 936 GB/s; price: community clouds 2024"),
    GPUType(name="RTX-4090", memory_gib=24, bf16_tflops=165, fp32_tflops=82.6, memory_bandwidth_gbyte_s=1008,
            intra_link="pcie", intra_link_gbyte_s=16, price_per_hour_usd=0.40, mfu=0.35,
            source="NVIDIA Ada AD102 whitepaper: 165 TF fp16/bf16 with fp32 accumulate, 1008 GB/s, no P2P; price: community clouds 2024"),
    GPUType(name="RTX-2080Ti", memory_gib=11, bf16_tflops=56.9, fp32_tflops=13.4, memory_bandwidth_gbyte_s=616,
            intra_link="pcie", intra_link_gbyte_s=8, price_per_hour_usd=0.15, mfu=0.277,
            source="NVIDIA Turing TU102 whitepaper: 56.9 TF fp16 with fp32 accumulate (no bf16), 616 GB/s, PCIe Gen3; price: community clouds 2024",
            fp32_mfu=0.858, step_overhead_s=0.163, intra_link_efficiency=0.265, network_efficiency=0.298,
            mfu_source=f"{_SIA}: rtx gpt_pmp single-node fit (GPT-3 2.7B shape and amp assumed: the artifact does not name them)",
            calibration_source=f"{_SIA}: rtx bert"),
    GPUType(name="V100-32GB", memory_gib=32, bf16_tflops=125, fp32_tflops=15.7, memory_bandwidth_gbyte_s=900,
            intra_link="nvlink", intra_link_gbyte_s=150, price_per_hour_usd=0.80, mfu=0.48,
            source="NVIDIA V100 SXM2 datasheet: 125 TF fp16 tensor (no bf16), 900 GB/s, NVLink2 300 GB/s bidirectional; price: public cloud lists 2024",
            fp32_mfu=0.839, step_overhead_s=0.107, intra_link_efficiency=0.0173, network_efficiency=0.174,
            mfu_source=_MEGATRON_V1,
            calibration_source=f"{_SIA}: azure (ND40rs_v2) bert"),
    GPUType(name="V100-16GB", memory_gib=16, bf16_tflops=125, fp32_tflops=15.7, memory_bandwidth_gbyte_s=900,
            intra_link="nvlink", intra_link_gbyte_s=150, price_per_hour_usd=0.70, mfu=0.48,
            source="NVIDIA V100 SXM2 datasheet (16 GB part); price: public cloud lists 2024",
            fp32_mfu=0.839, step_overhead_s=0.107, intra_link_efficiency=0.0173, network_efficiency=0.174,
            mfu_source=_MEGATRON_V1,
            calibration_source=f"{_SIA}: the V100-32GB fit (same GV100 chip)"),
    GPUType(name="P100-16GB", memory_gib=16, bf16_tflops=18.7, fp32_tflops=9.3, memory_bandwidth_gbyte_s=732,
            intra_link="pcie", intra_link_gbyte_s=16, price_per_hour_usd=0.45, mfu=0.35,
            source="NVIDIA P100 datasheet: 18.7 TF fp16 (no tensor cores), 732 GB/s; price: public cloud lists 2024"),
    GPUType(name="T4", memory_gib=16, bf16_tflops=65, fp32_tflops=8.1, memory_bandwidth_gbyte_s=320,
            intra_link="pcie", intra_link_gbyte_s=8, price_per_hour_usd=0.35, mfu=0.148,
            source="NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s, 65 TF fp16 tensor (no bf16), PCIe Gen3; price: GCP on-demand 2024",
            fp32_mfu=0.569, step_overhead_s=0.214, intra_link_efficiency=0.926, network_efficiency=0.128,
            mfu_source=f"{_SIA}: the 2080 Ti's achieved fp16 TFLOP/s x the median one-GPU T4/2080 Ti speed of the amp apps"
                       " (imagenet, yolov3, deepspeech2; both Turing)",
            calibration_source=f"{_SIA}: aws (g4dn.12xlarge) bert"),
]

CATALOG: dict[str, GPUType] = {g.name: g for g in _CATALOG_LIST}


def get_gpu(name: str, extra: dict[str, GPUType] | None = None) -> GPUType:
    """Look up a GPU type in the catalog (and in user-defined types); the error lists what exists."""
    table = {**CATALOG, **(extra or {})}
    try:
        return table[name]
    except KeyError:
        raise SpecError("gpu_type", f"unknown GPU type {name!r}; choose one of: {', '.join(table)} "
                        "or define it under gpu_types") from None


def make_gpu(**fields) -> GPUType:
    """A user-defined GPU type; raises SpecError naming the bad field."""
    try:
        return GPUType(**fields)
    except ValidationError as err:
        raise from_validation_error(err, fields=GPUType.model_fields) from None
