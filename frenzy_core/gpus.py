"""The GPU catalog: memory, dense peak TFLOP/s, memory bandwidth, intra-node link, price, and where each came from.

Memory is the nominal capacity in GiB as the vendor names the part (an "80GB" H100 reports 81,559 MiB); the CUDA
context and allocator reserve are modelled as overhead in `memory/` (pools.py), not taken off here.
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
from frenzy_core.limits import MAX_GPU_MEMORY_GIB, Name

GIB = 1 << 30
LinkKind = Literal["nvlink", "pcie", "infinity-fabric"]


class GPUType(BaseModel):
    """One kind of accelerator. Units are in the field names."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # NaN passes every `<= 0` check

    name: Name  # catalog key, e.g. "A100-80GB" (limits.check_name: it reaches launch files and node selectors)
    memory_gib: float  # nominal device memory (GiB)
    bf16_tflops: float  # dense tensor-core peak for bf16 (fp16 where bf16 is absent)
    fp32_tflops: float  # peak for fp32 training (TF32 tensor cores where present)
    memory_bandwidth_gbyte_s: float  # HBM/GDDR bandwidth, GB/s
    intra_link: LinkKind = "pcie"  # how GPUs in one node talk
    intra_link_gbyte_s: float = 32.0  # per-GPU unidirectional GPU-to-GPU bandwidth inside a node, GB/s
    price_per_hour_usd: float = 1.0  # typical on-demand price per GPU-hour
    mfu: float = 0.40  # model-FLOPs utilisation of bf16/fp16 training: measured where mfu_source says so
    # The `mfu` run's achieved fraction of peak over the FLOPs perf.py counts as executed (recomputation included,
    # causal attention over s / 2 keys): its publisher's MFU or HFU x (perf.py's FLOPs / the publisher's FLOPs) on
    # that run. perf.py charges every FLOP at it but the attention core's where that kernel has measured TFLOP/s of
    # its own (perf.attention_kernel_tflops; docs/perf.md "Attention kernel"). None = mfu (already in perf.py's count).
    hw_efficiency: float | None = None
    # Dense (no 2:4 sparsity) fp8 tensor-core peak: the rate of Transformer Engine / torchao fp8 linears; None = the
    # part has no fp8 tensor cores (fp8 linears then run at bf16_tflops, as TE falls back to a bf16 GEMM)
    fp8_tflops: float | None = None
    source: str = ""  # where the datasheet figures (memory, peaks, bandwidths, price) come from
    # Measured behaviour, next to the datasheet numbers above (docs/perf.md, bench/step_time_calibration.py):
    fp32_mfu: float | None = None  # achieved fraction of fp32_tflops in fp32 training; None = mfu
    step_overhead_s: float = 0.0  # fixed per-step cost (launches, data loading, Python) on top of the FLOPs
    intra_link_efficiency: float = 1.0  # achieved / nominal bandwidth of a gradient all-reduce inside a node
    network_efficiency: float = 1.0  # achieved / nominal NIC bandwidth of an all-reduce across nodes
    mfu_source: str = "assumed, not measured"  # where mfu comes from
    # GEMM efficiency by shape (frenzy_core/gemm.py): the architecture whose measured curve this type's GEMMs follow
    # (None: none measured, one efficiency whatever the shape) and the calibration run (gemm.REFERENCES) whose
    # linears `hw_efficiency` / `mfu` was measured at
    gemm_arch: str | None = None
    gemm_reference: str | None = None
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
        if self.fp8_tflops is not None and self.fp8_tflops <= 0:
            raise ValueError(f"fp8_tflops must be positive (or None: no fp8 tensor cores), got {self.fp8_tflops}")
        for field in ("mfu", "hw_efficiency", "fp32_mfu", "intra_link_efficiency", "network_efficiency"):
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
        """Dense tensor-core peak for "bf16", "fp32" or "fp8" (fp8 falls back to bf16 on parts without fp8 cores)."""
        if compute_dtype == "fp8":
            return self.bf16_tflops if self.fp8_tflops is None else self.fp8_tflops
        return self.bf16_tflops if compute_dtype == "bf16" else self.fp32_tflops

    def efficiency(self, compute_dtype: str) -> float:
        """Achieved fraction of `peak_tflops(compute_dtype)` over the FLOPs perf.py counts as executed (perf.py
        times the attention core at its kernel's measured rate instead where one is published): for
        bf16/fp16 (and fp8, assumed the same fraction of its own peak: no fp8 calibration run) `hw_efficiency`,
        else `mfu`; `fp32_mfu` (else that) for fp32.

        >>> CATALOG["A100-40GB"].efficiency("bf16"), CATALOG["H100-80GB"].efficiency("fp8")
        (0.6876, 0.4843)
        """
        if compute_dtype == "fp32" and self.fp32_mfu is not None:
            return self.fp32_mfu
        return self.mfu if self.hw_efficiency is None else self.hw_efficiency

    def achieved_tflops(self, compute_dtype: str = "bf16") -> float:
        """Peak x efficiency: the TFLOP/s one GPU of this type delivers to training."""
        return self.peak_tflops(compute_dtype) * self.efficiency(compute_dtype)


_NV_A100 = "NVIDIA A100 datasheet (2021): 312 TF bf16 dense, 156 TF TF32, NVLink3 600 GB/s bidirectional"
_NV_H100 = ("NVIDIA H100 datasheet (SXM5): 989 TF bf16 dense, 3,958 TF fp8 with sparsity = 1,979 dense, 3.35 TB/s, "
            "NVLink4 900 GB/s bidirectional")
_NV_B200 = ("NVIDIA DGX B200 datasheet (2024): 8 GPUs, 1,440 GB HBM3e (180 GB each), 64 TB/s (8 TB/s each), 72 PFLOPS "
            "fp8 training with sparsity (9 PF each = 4.5 PF dense; bf16 half of fp8, TF32 a quarter), NVLink5 "
            "14.4 TB/s aggregate (1.8 TB/s bidirectional each)")
_NV_GB200 = ("NVIDIA GB200 NVL72 datasheet (2024): 72 Blackwell GPUs in one NVLink domain, up to 13.4 TB HBM3e "
             "(186 GB each), 576 TB/s (8 TB/s each), fp8 720 PF / bf16 360 PF / TF32 180 PF with sparsity "
             "(dense per GPU: 5,000 / 2,500 / 1,250 TF), NVLink5 130 TB/s (1.8 TB/s bidirectional each)")
_TITAN_H100_96 = ("pytorch/torchtitan@b5bcd76c benchmarks/llama3_h100_202412_torchtitan.md: 'Each H100 GPU is "
                  "equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth', 500 W power limit (Grand "
                  "Teton); peaks the GH100 SXM's, 989 TF bf16 / 1,979 TF fp8 dense (torchtitan's own MFU uses 989 TF for it)")
_LAMBDA = "price: Lambda Cloud on-demand list, 2024"
# Measured figures (docs/perf.md "Calibration"). LLM MFU: mosaicml/llm-foundry @ c90b9b312c644dbde5c9e6eef75c6f1c117d8782,
# scripts/train/benchmarking/README.md, the row "7b | 2048 | 8 GPUs" of each GPU's table (MFU column, FSDP, bf16,
# end-to-end, same 6N + 12lhs FLOPs as ours). Sia: siasosp23/artifacts @ aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70,
# sia-simulator/traces/bert (fp32 BERT-base SQuAD) and gpt_pmp profiles, fitted on the calibration half by
# bench/step_time_calibration.py (2026-12-01): fp32_mfu and step_overhead_s from one-GPU rows (slope and intercept),
# link efficiencies = median nominal ring time / measured sync_time (single-node resp. multi-node rows).
_FOUNDRY = "mosaicml/llm-foundry@c90b9b31 scripts/train/benchmarking/README.md"
# llm-foundry's MFU counts 3 x (2 N + 4 l h s) FLOPs per token (all s keys: "attn_flops_per_seq = n_layers * 2 * 2 *
# (d_model * (seq_len**2))"), its HFU 4 x that with activation checkpointing; perf.py counts MPT-7B at seq 2048 as
# 41.51 GFLOP per token (causal s / 2 keys) against their 43.17 (x 0.9615), with full recompute 54.94 against 57.57
# (x 0.9544). The runs ran FlashAttention-2, whose attention perf.py times at its own kernel rate
# (perf.attention_kernel_tflops), and the layers' element-wise ops (LPLayerNorm, GeLU, residual adds: one eager
# kernel each) at HBM bandwidth (perf.elementwise_bytes_per_token): hw_efficiency is what the rest of perf.py's
# FLOPs must run at for the run's time, perf.gemm_efficiency_of_run(published figure) (tests/test_gpus.py recomputes
# it). History: the published figure x the FLOPs ratio alone, H100-80GB .4465, A100-80GB .6176, A100-40GB .6479;
# with the attention kernel time (2026-12-02) .4659, .6290, .6605; with the element-wise time (2026-12-03) below.
_TO_PERF_FLOPS = ("re-derived in perf.py's count with its attention kernel and element-wise times "
                  "(perf.gemm_efficiency_of_run)")
_SIA = "Sia SOSP'23 profiles (siasosp23/artifacts@aaf7a0de sia-simulator/traces), bench/step_time_calibration.py"
_NOMINAL = "links nominal: the LLM MFU is end-to-end, its all-reduce included"
_MEGATRON_V1 = ("nv-adlr/nv-adlr.github.io@1576088d _projects/megatron-lm-v1.md: GPT-2 1.2B on one V100 of a DGX-2H "
                "'62.4 teraFLOPs ... 48% of the theoretical peak'")
_TITAN = ("cross-check pytorch/torchtitan@eaea6f6a docs/performance.md: Llama 3.1 8B FSDP on 8 H100 (500 W) "
          "'33% to 39% MFU'")

_CATALOG_LIST = [
    GPUType(name="A100-40GB", memory_gib=40, bf16_tflops=312, fp32_tflops=156, memory_bandwidth_gbyte_s=1555,
            intra_link="nvlink", intra_link_gbyte_s=300, price_per_hour_usd=1.29, mfu=0.509, hw_efficiency=0.6876,
            source=f"{_NV_A100}; 1.555 TB/s HBM2; {_LAMBDA}",
            fp32_mfu=0.399, step_overhead_s=0.121,
            mfu_source=f"{_FOUNDRY}: a100_40gb 7b seq 2048 8 GPUs MFU 50.92, HFU 67.89 (the run recomputes every "
                       "block: 8N FLOPs per token executed, 6N counted; datasheet-era assumption was 0.45); hw_efficiency = "
                       f"HFU 0.6789 {_TO_PERF_FLOPS}",
            calibration_source=f"{_SIA}: dgx/dgx-ext bert one-GPU fit (TF32); {_NOMINAL}"),
    GPUType(name="A100-80GB", memory_gib=80, bf16_tflops=312, fp32_tflops=156, memory_bandwidth_gbyte_s=2039,
            intra_link="nvlink", intra_link_gbyte_s=300, price_per_hour_usd=1.79, mfu=0.642, hw_efficiency=0.6462,
            source=f"{_NV_A100}; 2.039 TB/s HBM2e; {_LAMBDA}",
            fp32_mfu=0.399, step_overhead_s=0.121,
            mfu_source=f"{_FOUNDRY}: a100_80gb 7b seq 2048 8 GPUs MFU 64.23; hw_efficiency = MFU {_TO_PERF_FLOPS} "
                       "(no recompute, MFU = HFU)",
            calibration_source=f"{_SIA}: the A100-40GB fit (same GA100 chip); {_NOMINAL}"),
    GPUType(name="H100-80GB", memory_gib=80, bf16_tflops=989, fp32_tflops=494, memory_bandwidth_gbyte_s=3350,
            intra_link="nvlink", intra_link_gbyte_s=450, price_per_hour_usd=2.99, mfu=0.464, fp8_tflops=1979,
            hw_efficiency=0.4843, source=f"{_NV_H100}; {_LAMBDA}", gemm_arch="sm90", gemm_reference="foundry-mpt7b-2k",
            mfu_source=f"{_FOUNDRY}: h100_80gb 7b seq 2048 8 GPUs MFU 46.44; {_TITAN}; hw_efficiency = MFU "
                       f"{_TO_PERF_FLOPS} (no recompute, MFU = HFU)",
            calibration_source=f"not measured: no overhead; {_NOMINAL}"),
    GPUType(name="H200-141GB", memory_gib=141, bf16_tflops=989, fp32_tflops=494, memory_bandwidth_gbyte_s=4800,
            intra_link="nvlink", intra_link_gbyte_s=450, price_per_hour_usd=3.79, mfu=0.464, fp8_tflops=1979,
            hw_efficiency=0.4843, gemm_arch="sm90", gemm_reference="foundry-mpt7b-2k",
            source="NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s, same compute as H100 SXM (1,979 TF fp8 dense); "
                   "price: public cloud lists 2025",
            mfu_source=f"{_FOUNDRY}: the H100 figure, 7b seq 2048 8 GPUs MFU 46.44 and hw_efficiency 0.4843 "
                       "(assumed: same GH100 compute; no llm-foundry H200 table, and the accuracy bench's H200 rows "
                       "are all held out); its attention kernels' rates are its own, measured on an H200 "
                       "(perf.ATTENTION_KERNEL_TFLOPS_BY_TYPE, bench/data/gpu_h200_2026-12-04), where its GEMMs "
                       "reached 0.21-0.76 of peak by shape, median 0.62 (docs/perf.md 'Measuring on a GPU')",
            calibration_source=f"not measured: no overhead; {_NOMINAL}"),
    # torchtitan's H100 rows run on this part (bench/data/published_throughput.md): a 500 W cap on GH100 silicon,
    # so its efficiency is its own, fitted on the one bf16 row of the accuracy bench that is not held out
    GPUType(name="H100-96GB", memory_gib=96, bf16_tflops=989, fp32_tflops=494, memory_bandwidth_gbyte_s=2400,
            intra_link="nvlink", intra_link_gbyte_s=450, price_per_hour_usd=2.99, mfu=0.460, fp8_tflops=1979,
            gemm_arch="sm90", gemm_reference="titan-llama31-8b-8k",
            source=f"{_TITAN_H100_96}; price: the H100-80GB's (not on public price lists)",
            mfu_source="fit (2026-12-01, refitted 2026-12-02, 2026-12-03): bench/data/published_throughput.jsonl row titan-llama31-8b-h10096-fsdp-"
                       "compile-8gpu (held_out false; torchtitan@b5bcd76c benchmarks/llama3_h100_202412_torchtitan.md "
                       "'FSDP + torch.compile' 6,667 tokens/s/GPU, Llama 3.1 8B, seq 8192, bf16): the efficiency "
                       "perf.step_time needs to reproduce it, 0.460 (bisection, refitted 2026-12-03 with the element-wise "
                       "HBM term, compiled: fused kernels; 0.425 on 2026-12-02, 0.349 before the "
                       "op-sac replay, flash's 2.5x backward and the attention kernel term joined), over the FLOPs "
                       "perf.py counts as executed (replays included), so above the model-FLOPs MFU torchtitan "
                       f"quotes: {_TITAN}",
            calibration_source=f"not measured: no overhead; {_NOMINAL}"),
    GPUType(name="B200", memory_gib=180, bf16_tflops=2250, fp32_tflops=1125, memory_bandwidth_gbyte_s=8000,
            intra_link="nvlink", intra_link_gbyte_s=900, price_per_hour_usd=5.99, mfu=0.464, fp8_tflops=4500,
            hw_efficiency=0.4843,
            source=f"{_NV_B200}; price: public cloud lists 2025 (planning default)",
            mfu_source=f"{_FOUNDRY}: the H100-80GB figure, h100_80gb 7b seq 2048 8 GPUs MFU 46.44 (assumed: no "
                       "published B200 run outside the accuracy bench's held-out and fit rows); hw_efficiency the H100's 0.4843",
            calibration_source=f"not measured: no overhead; {_NOMINAL}"),
    # One NVL72 rack is one NVLink domain: model it as a 72-GPU node (cluster gpus_per_node 72)
    GPUType(name="GB200", memory_gib=186, bf16_tflops=2500, fp32_tflops=1250, memory_bandwidth_gbyte_s=8000,
            intra_link="nvlink", intra_link_gbyte_s=900, price_per_hour_usd=6.99, mfu=0.464, fp8_tflops=5000,
            hw_efficiency=0.4843,
            source=f"{_NV_GB200}; price: public cloud lists 2025 (planning default)",
            mfu_source=f"{_FOUNDRY}: the H100-80GB figure, h100_80gb 7b seq 2048 8 GPUs MFU 46.44 (assumed: no "
                       "published GB200 run outside the accuracy bench's fit rows); hw_efficiency the H100's 0.4843",
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
