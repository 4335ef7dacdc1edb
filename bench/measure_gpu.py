"""Measure the benchmarked configurations on a real GPU, per framework, next to what each recipe predicts.

    python bench/measure_gpu.py artifacts/memory_gpu.json [--framework pytorch|fsdp2|hf|all] [--only gpt2]
                                                        [--require-cuda]
    python bench/measure_gpu.py artifacts/step_time_gpu.json --mode step-time [--gpu-type H100-80GB] [--only llama]
    python bench/measure_gpu.py artifacts/kernels_gpu.json --mode kernels
    python bench/measure_gpu.py artifacts/profile_gpu.json --mode profile [--only gpt2-7b]

`--mode kernels` measures the GPU itself, the quantities perf.py takes from datasheets and papers: bf16 GEMM TFLOP/s
for the three GEMMs of a linear layer (forward x W, input gradient, weight gradient) over the layer shapes of the
benchmarked models, fp8 GEMM TFLOP/s (`torch._scaled_mm`, per-tensor scales, where the GPU has fp8), fused causal
attention TFLOP/s forward and backward in the FlashAttention papers' setting (head dim 128, 16 heads, batch x seqlen
= 16k tokens, FLOPs counted as perf.py counts them: 4 s^2 d h / 2 forward, x FLASH_BACKWARD_FORWARDS backward) per SDPA
backend, and HBM copy bandwidth (bytes read + written). Each figure is the median of KERNEL_TIMED runs after
KERNEL_WARMUP, between synchronisations.

`--mode step-time` (issue 19) times whole training steps instead: the `pytorch` configurations on one GPU (d = 1,
the tracer's decoder with real CUDA tensors, SDPA flash attention where the row says flash), STEP_WARMUP steps
discarded, then the median of STEP_TIMED steps between `torch.cuda.synchronize()` calls, next to
`frenzy_core.estimate.estimate(...)` for the same split on the catalog type of this GPU (found from the device name and
memory, or `--gpu-type`). Rows report `measured_step_s`, `predicted_step_s`, `err` (predicted / measured - 1) and the
achieved MFU; the last line gives `step_time_median_abs_err` and `step_time_median_signed_err`. Small models on one GPU
are launch-bound, which the model does not describe: rows below STEP_MIN_PARAMETERS are reported apart.

One GPU, one configuration at a time, `torch.cuda.max_memory_allocated()` / `max_memory_reserved()` around two
training steps (the peak of step 2 carries Adam's states), minus what was allocated before the run:
* `pytorch`: frenzy_core.tracer's decoder with real CUDA tensors (bench/memory_accuracy.py's configurations).
* `fsdp2`: the same decoder under `torch.distributed.fsdp.fully_shard` per block and on the root, with
  `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` as torchtitan sets it, fp32 params, foreach AdamW, a
  one-process NCCL group (d = 1: what one GPU of an FSDP2 job holds without the sharding gain).
* `hf`: the transformers models of tests/data/hf_traces.jsonl (frenzy_core.hf_tracer builds them), Trainer's loop
  (`model(input_ids, labels=...).loss.backward()` under CUDA autocast for amp).
Megatron-LM and DeepSpeed need their own launchers and several GPUs: their truth is the real-GPU fixture
(tests/data/real_gpu_peaks.jsonl), not this script. Each row carries the recipe's prediction of the same number
(allocated with workspaces, no context or NCCL) and the signed error. Never imported by the tests. Without CUDA it says
so, prints a JSON line with `"measured": 0` and exits 0 (2 with --require-cuda). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

FRAMEWORKS = ("pytorch", "fsdp2", "hf")
STEP_WARMUP = 2  # steps discarded: cuBLAS heuristics, allocator growth, the optimizer's lazy state
STEP_TIMED = 6  # steps timed; the median is reported
STEP_MIN_PARAMETERS = 500_000_000  # below this a one-GPU step is launch-bound: reported apart
# device-name fragment -> catalog types, told apart by memory (torch.cuda.get_device_name(), mem_get_info total)
DEVICE_TYPES = (("H200", ("H200-141GB",)), ("GB200", ("GB200",)), ("B200", ("B200",)),
                ("H100", ("H100-80GB", "H100-96GB")), ("A100", ("A100-40GB", "A100-80GB")), ("L40S", ("L40S",)),
                ("MI300X", ("MI300X",)), ("A10", ("A10",)), ("4090", ("RTX-4090",)), ("3090", ("RTX-3090",)),
                ("V100", ("V100-16GB", "V100-32GB")), ("T4", ("T4",)))
HF_MAX_PARAMETERS = 2_000_000_000  # larger traced HF models do not fit one GPU's step
KERNEL_WARMUP = 3
KERNEL_TIMED = 10
# (label, K, N) of a linear layer y = x W, x: tokens x K, W: K x N: the benchmarked models' layers (Llama-3.1-8B's
# h = 4096, qkv 6144 (GQA 8 kv heads), fused gate+up 2 x 14336; Llama-2-70B's h = 8192 under TP 8; GPT-2's h = 768;
# GPT-2-XL's h = 1600) and the square 8192 GEMM the datasheet-style benchmarks quote
GEMM_LAYERS = (("llama8b-qkv", 4096, 6144), ("llama8b-o", 4096, 4096), ("llama8b-gate-up", 4096, 28672),
               ("llama8b-down", 14336, 4096), ("llama70b-tp8-qkv", 8192, 1280), ("llama70b-tp8-o", 1024, 8192),
               ("llama70b-tp8-gate-up", 8192, 7168), ("llama70b-tp8-down", 3584, 8192), ("gpt2-qkv", 768, 2304),
               ("gpt2-fc1", 768, 3072), ("gpt2-fc2", 3072, 768), ("gpt2xl-fc1", 1600, 6400),
               ("square-8192", 8192, 8192))
GEMM_TOKENS = (2048, 8192, 32768)  # tokens per micro-batch: b x s
ATTENTION_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)  # perf.ATTENTION_KERNEL_SEQ_LENS
ATTENTION_TOKENS, ATTENTION_HEADS, ATTENTION_HEAD_DIM = 16384, 16, 128


class _Phase:
    """Stands in for the tracer's storage tracker: _run_steps only sets `.phase`."""

    phase = "setup"


def _peaks(torch, run) -> dict:
    """Run `run()` between a reset and a read of the allocator's peaks (bytes above what was allocated before)."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base_allocated = torch.cuda.memory_allocated()
    try:
        run()
        torch.cuda.synchronize()
        return {
            "max_memory_allocated": torch.cuda.max_memory_allocated() - base_allocated,
            "max_memory_reserved": torch.cuda.max_memory_reserved(),
        }
    except torch.cuda.OutOfMemoryError:
        return {"oom": True}
    finally:
        torch.cuda.empty_cache()


def measure_pytorch(torch, cfg: dict) -> dict:
    from frenzy_core import tracer

    training = cfg["training"]
    accumulation = training.global_batch // training.micro_batch
    return _peaks(torch, lambda: tracer._run_steps(
        torch, _Phase(), cfg["model"], training, training.micro_batch, accumulation, device="cuda"))


def measure_fsdp2(torch, cfg: dict) -> dict:
    """Two steps of the tracer's decoder under fully_shard + MixedPrecisionPolicy(bf16, fp32) on one GPU."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from frenzy_core import tracer

    training, spec = cfg["training"], cfg["model"]

    def run():
        with torch.device("cuda"):
            net = tracer._build_model(torch, spec, training, torch.float32)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in net.blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(net, mp_policy=policy)
        optimizer = torch.optim.AdamW(net.parameters(), foreach=training.optimizer == "adamw",
                                      fused=training.optimizer == "adamw-fused" or None)
        b, s = training.micro_batch, training.seq_len
        for _ in range(2):
            for _ in range(training.global_batch // b):
                tokens = torch.randint(0, spec.vocab_size, (b, s + 1), device="cuda")
                net(tokens[:, :-1], tokens[:, 1:]).backward()
                del tokens
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return _peaks(torch, run)


def measure_hf(torch, row: dict) -> dict:
    from frenzy_core import hf_tracer  # merged from the `truth` branch; absent before that
    from frenzy_core.training import TrainingSpec

    training = TrainingSpec(**row["training"])
    transformers = hf_tracer._import_transformers()

    def run():
        from frenzy_core import tracer

        with torch.device("cuda"):
            model = hf_tracer.build_hf_model(torch, transformers, row["hf_config"], training)
        amp = training.precision == "amp"
        optimizer = tracer._make_optimizer(torch, model, training, amp)
        b, s = training.micro_batch, training.seq_len
        for _ in range(2):
            for _ in range(training.global_batch // b):
                tokens = torch.randint(0, row["hf_config"]["vocab_size"], (b, s), device="cuda")
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                    loss = model(input_ids=tokens, labels=tokens).loss
                loss.backward()
                del loss, tokens
            optimizer.step()
            optimizer.zero_grad()

    return _peaks(torch, run)


def catalog_type(device_name: str, total_bytes: int) -> str | None:
    """The catalog GPU type of this device: the name fragment, then the type whose memory is nearest."""
    from frenzy_core.gpus import CATALOG

    for fragment, names in DEVICE_TYPES:
        if fragment in device_name:
            return min(names, key=lambda n: abs(CATALOG[n].memory_bytes - total_bytes))
    return None


def measure_step_time(torch, cfg: dict) -> dict:
    """Median wall time of one optimizer step of the tracer's decoder on this GPU (d = 1), in seconds."""
    import time

    from frenzy_core import tracer

    training, spec = cfg["training"], cfg["model"]
    b, s = training.micro_batch, training.seq_len
    accumulation = training.global_batch // b
    amp = training.precision == "amp"
    try:
        with torch.device("cuda"):
            net = tracer._build_model(torch, spec, training, torch.float32 if amp else torch.bfloat16)
        optimizer = tracer._make_optimizer(torch, net, training, amp)
        times = []
        for step in range(STEP_WARMUP + STEP_TIMED):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(accumulation):
                tokens = torch.randint(0, spec.vocab_size, (b, s + 1), device="cuda")
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                    loss = net(tokens[:, :-1], tokens[:, 1:])
                (loss / accumulation).backward()
                del loss, tokens
            optimizer.step()
            optimizer.zero_grad()
            torch.cuda.synchronize()
            if step >= STEP_WARMUP:
                times.append(time.perf_counter() - t0)
        return {"measured_step_s": statistics.median(times), "step_s_min": min(times), "step_s_max": max(times)}
    except torch.cuda.OutOfMemoryError:
        return {"oom": True}
    finally:
        net = optimizer = None
        torch.cuda.empty_cache()


def _predicted_step(cfg: dict, gpu_type: str) -> dict:
    from frenzy_core.estimate import estimate
    from frenzy_core.gpus import CATALOG
    from frenzy_core.training import Parallelism

    e = estimate(cfg["model"], cfg["training"], Parallelism(), CATALOG[gpu_type], num_gpus=1)
    return {"predicted_step_s": e.step_time_s, "predicted_mfu": e.mfu,
            "flops_per_step": e.model_tflops_per_gpu * 1e12 * e.step_time_s}


def main_step_time(torch, args) -> int:
    """--mode step-time: measured vs predicted step time of every pytorch configuration on this GPU."""
    from memory_accuracy import configs

    free, total = torch.cuda.mem_get_info()
    device = torch.cuda.get_device_name()
    gpu_type = args.gpu_type or catalog_type(device, total)
    if gpu_type is None:
        print(f"measure_gpu: {device!r} is not a catalog GPU type; give --gpu-type", file=sys.stderr)
        print(json.dumps({"measured": 0, "reason": f"unknown device {device}"}))
        return 2
    results = []
    for cfg in configs():
        if args.only not in cfg["name"]:
            continue
        row = {"name": cfg["name"], "gpu_type": gpu_type, "parameters": cfg["model"].parameter_count(),
               **measure_step_time(torch, cfg)}
        if "measured_step_s" in row:
            row.update(_predicted_step(cfg, gpu_type))
            row["err"] = round(row["predicted_step_s"] / row["measured_step_s"] - 1, 5)
            row["measured_mfu"] = row["predicted_mfu"] * row["predicted_step_s"] / row["measured_step_s"]
        results.append(row)
        print(json.dumps(row), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"torch_version": torch.__version__, "device": device, "gpu_type": gpu_type,
                                       "configs": results}, indent=1) + "\n")
    print(f"wrote {args.output}")
    big = [r["err"] for r in results if "err" in r and r["parameters"] >= STEP_MIN_PARAMETERS]
    small = [r["err"] for r in results if "err" in r and r["parameters"] < STEP_MIN_PARAMETERS]
    headline = {"measured": len(big) + len(small), "device": device, "gpu_type": gpu_type}
    for label, errs in (("", big), ("small_models_", small)):
        if errs:
            headline[f"{label}step_time_median_abs_err"] = round(statistics.median(abs(e) for e in errs), 5)
            headline[f"{label}step_time_median_signed_err"] = round(statistics.median(errs), 5)
    print(json.dumps(headline))
    return 0


def _median_seconds(torch, fn, device: str) -> float:
    """Median wall seconds of `fn()` over KERNEL_TIMED runs after KERNEL_WARMUP, synchronising around each."""
    import time

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for i in range(KERNEL_WARMUP + KERNEL_TIMED):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        if i >= KERNEL_WARMUP:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_rows(torch, device: str = "cuda", layers=GEMM_LAYERS, tokens=GEMM_TOKENS, fp8: bool = True) -> list[dict]:
    """bf16 (and fp8) TFLOP/s of each linear layer's forward, input-gradient and weight-gradient GEMMs."""
    rows = []
    for label, k, n in layers:
        for m in tokens:
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            w = torch.randn(k, n, device=device, dtype=torch.bfloat16)
            dy = torch.randn(m, n, device=device, dtype=torch.bfloat16)
            flops = 2.0 * m * k * n
            row = {"layer": label, "tokens": m, "k": k, "n": n}
            gemms = (("fwd", lambda x=x, w=w: x @ w), ("dgrad", lambda dy=dy, w=w: dy @ w.t()),
                     ("wgrad", lambda x=x, dy=dy: x.t() @ dy))
            for gemm, fn in gemms:
                row[f"bf16_{gemm}_tflops"] = round(flops / _median_seconds(torch, fn, device) / 1e12, 2)
            if fp8 and device == "cuda":
                row["fp8_fwd_tflops"] = _fp8_tflops(torch, x, w, flops)
            rows.append(row)
            del x, w, dy
    return rows


def _fp8_tflops(torch, x, w, flops: float) -> float | str:
    """`torch._scaled_mm` e4m3 x e4m3 -> bf16 with per-tensor scales (the second operand column-major)."""
    try:
        a = x.to(torch.float8_e4m3fn)
        b = w.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=x.device, dtype=torch.float32)

        def fn():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return round(flops / _median_seconds(torch, fn, "cuda") / 1e12, 2)
    except Exception as err:  # noqa: BLE001 - no fp8 on this GPU / build: say why
        return f"unavailable: {type(err).__name__}: {str(err)[:120]}"


def attention_rows(torch, device: str = "cuda", seq_lens=ATTENTION_SEQ_LENS, tokens: int = ATTENTION_TOKENS,
                   heads: int = ATTENTION_HEADS, head_dim: int = ATTENTION_HEAD_DIM) -> list[dict]:
    """Causal SDPA TFLOP/s per backend, forward and backward, counted as perf.py counts the FLOPs."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from frenzy_core.perf import CAUSAL_KEYS_FRACTION, FLASH_BACKWARD_FORWARDS

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION} if device == "cuda" else {"math": SDPBackend.MATH}
    rows = []
    for s in seq_lens:
        b = max(1, tokens // s)
        fwd_flops = 4.0 * s * s * head_dim * heads * b * CAUSAL_KEYS_FRACTION
        row = {"seq_len": s, "batch": b}
        for name, backend in backends.items():
            try:
                q, k, v = (torch.randn(b, heads, s, head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    grad = torch.randn_like(out)
                    t_fwd = _median_seconds(
                        torch, lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True), device)

                    def fwd_bwd(q=q, k=k, v=v, grad=grad):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        torch.autograd.grad(o, (q, k, v), grad)

                    t_both = _median_seconds(torch, fwd_bwd, device)
                row[f"{name}_fwd_tflops"] = round(fwd_flops / t_fwd / 1e12, 2)
                row[f"{name}_bwd_tflops"] = round(fwd_flops * FLASH_BACKWARD_FORWARDS / max(t_both - t_fwd, 1e-9)
                                                  / 1e12, 2)
                del q, k, v, out, grad
            except Exception as err:  # noqa: BLE001 - a backend this GPU / shape does not run
                row[f"{name}_fwd_tflops"] = f"unavailable: {type(err).__name__}: {str(err)[:120]}"
        rows.append(row)
    return rows


def hbm_copy_gbyte_s(torch, device: str = "cuda", nbytes: int = 4 << 30) -> float:
    """Device-to-device copy bandwidth, bytes read plus bytes written per second, in GB/s."""
    src = torch.empty(nbytes // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = _median_seconds(torch, lambda: dst.copy_(src), device)
    return round(2 * nbytes / t / 1e9, 1)


def main_kernels(torch, args) -> int:
    """--mode kernels: GEMM, fp8 GEMM, attention and HBM figures of this GPU."""
    device = torch.cuda.get_device_name()
    out = {"torch_version": torch.__version__, "device": device,
           "capability": list(torch.cuda.get_device_capability()), "hbm_copy_gbyte_s": hbm_copy_gbyte_s(torch)}
    print(json.dumps({"hbm_copy_gbyte_s": out["hbm_copy_gbyte_s"]}), flush=True)
    out["attention"] = attention_rows(torch)
    for row in out["attention"]:
        print(json.dumps(row), flush=True)
    out["gemm"] = []
    for row in gemm_rows(torch):
        out["gemm"].append(row)
        print(json.dumps(row), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.output}")
    fwd = [r["bf16_fwd_tflops"] for r in out["gemm"]]
    fp8 = [r["fp8_fwd_tflops"] for r in out["gemm"] if isinstance(r.get("fp8_fwd_tflops"), float)]
    headline = {"device": device, "hbm_copy_gbyte_s": out["hbm_copy_gbyte_s"],
                "gemm_bf16_fwd_median_tflops": round(statistics.median(fwd), 1),
                "gemm_bf16_fwd_max_tflops": max(fwd),
                "gemm_fp8_fwd_median_tflops": round(statistics.median(fp8), 1) if fp8 else None,
                "flash_fwd_tflops_at_8192": next((r.get("flash_fwd_tflops") for r in out["attention"]
                                                  if r["seq_len"] == 8192), None)}
    print(json.dumps(headline))
    return 0


PROFILE_CONFIGS = ("gpt2-7b-paper amp flash b=1 s=2048 m=1", "gpt2-7b-paper bf16-master flash b=2 s=2048 m=1",
                   "llama-mini amp flash b=2 s=2048 m=4 optimizer=adamw-fused", "gpt2-xl amp flash b=1 s=1024 m=1",
                   "gpt2 amp flash b=8 s=1024 m=1", "gpt2 amp eager b=1 s=512 m=1")
OPTIMIZER_PARAMS = 1 << 30  # parameters in the optimizer benchmark (64 tensors of 16M)


def _kernel_category(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_", "sm80_")):
        return "gemm"
    if any(k in n for k in ("flash", "fmha", "attention", "cudnn")):
        return "attention"
    if "multi_tensor" in n or "fused_adam" in n or "adam" in n:
        return "optimizer"
    if "copy" in n or "cast" in n:
        return "copy"
    return "other"


def optimizer_rows(torch, device: str = "cuda", params: int = OPTIMIZER_PARAMS, tensors: int = 64) -> list[dict]:
    """Seconds of one AdamW step (foreach, fused) over `params` fp32 parameters, and the bytes per parameter that
    time moves at the measured copy bandwidth."""
    rows = []
    bw = hbm_copy_gbyte_s(torch, device, 1 << 30) * 1e9
    for impl in ("foreach", "fused"):
        ps = [torch.zeros(params // tensors, device=device, requires_grad=True) for _ in range(tensors)]
        for q in ps:
            q.grad = torch.randn_like(q)
        opt = torch.optim.AdamW(ps, **{impl: True})
        t = _median_seconds(torch, opt.step, device)
        rows.append({"optimizer": f"adamw-{impl}", "params": params, "step_s": t,
                     "bytes_per_param_at_copy_bw": round(t * bw / params, 2)})
        del ps, opt
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def launch_rows(torch, device: str = "cuda") -> dict:
    """Host seconds per kernel launch (tiny in-place add) and per autograd op (tiny linear forward + backward)."""
    x = torch.zeros(16, device=device)
    n = 2000

    def adds():
        for _ in range(n):
            x.add_(1.0)

    w = torch.zeros(16, 16, device=device, requires_grad=True)
    inp = torch.zeros(4, 16, device=device)

    def chain():
        h = inp
        for _ in range(100):
            h = torch.nn.functional.linear(h, w)
        h.sum().backward()

    return {"launch_s": _median_seconds(torch, adds, device) / n,
            "linear_fwd_bwd_s_per_layer": _median_seconds(torch, chain, device) / 100}


def profile_row(torch, cfg: dict) -> dict:
    """One config's step: GPU time per phase (CUDA events, no synchronisation inside the step), wall time, and the
    kernels' busy time by category (torch.profiler)."""
    import time

    from torch.profiler import ProfilerActivity, profile

    from frenzy_core import tracer

    training, spec = cfg["training"], cfg["model"]
    b, s = training.micro_batch, training.seq_len
    accumulation = training.global_batch // b
    amp = training.precision == "amp"
    with torch.device("cuda"):
        net = tracer._build_model(torch, spec, training, torch.float32 if amp else torch.bfloat16)
    optimizer = tracer._make_optimizer(torch, net, training, amp)

    def step(events=None):
        mark = (lambda i: events[i].record()) if events else (lambda i: None)
        mark(0)
        for _ in range(accumulation):
            tokens = torch.randint(0, spec.vocab_size, (b, s + 1), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = net(tokens[:, :-1], tokens[:, 1:])
            mark(1)
            (loss / accumulation).backward()
            mark(2)
        optimizer.step()
        mark(3)
        optimizer.zero_grad()
        mark(4)

    try:
        for _ in range(STEP_WARMUP):
            step()
        torch.cuda.synchronize()
        phases = {"forward_s": [], "backward_s": [], "optimizer_s": [], "zero_grad_s": [], "wall_s": []}
        for _ in range(3):
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
            t0 = time.perf_counter()
            step(ev)
            torch.cuda.synchronize()
            phases["wall_s"].append(time.perf_counter() - t0)
            for key, (i, j) in zip(("forward_s", "backward_s", "optimizer_s", "zero_grad_s"),
                                   ((0, 1), (1, 2), (2, 3), (3, 4)), strict=True):
                phases[key].append(ev[i].elapsed_time(ev[j]) / 1e3)
        row = {k: statistics.median(v) for k, v in phases.items()}
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        busy: dict[str, float] = {}
        kernels = 0
        for evt in prof.events():
            if str(evt.device_type).endswith("CUDA"):
                cat = _kernel_category(evt.name)
                busy[cat] = busy.get(cat, 0.0) + evt.time_range.elapsed_us() / 1e6
                kernels += 1
        row.update({f"busy_{k}_s": v for k, v in busy.items()})
        row["busy_total_s"] = sum(busy.values())
        row["kernels"] = kernels
        return row
    except torch.cuda.OutOfMemoryError:
        return {"oom": True}
    finally:
        net = optimizer = None
        torch.cuda.empty_cache()


def main_profile(torch, args) -> int:
    """--mode profile: where the step time of a few configurations goes, and the optimizer / launch costs."""
    from memory_accuracy import configs

    out = {"torch_version": torch.__version__, "device": torch.cuda.get_device_name()}
    out["launch"] = launch_rows(torch)
    print(json.dumps(out["launch"]), flush=True)
    out["optimizer"] = optimizer_rows(torch)
    for row in out["optimizer"]:
        print(json.dumps(row), flush=True)
    out["configs"] = []
    for cfg in configs():
        if (args.only and args.only in cfg["name"]) or (not args.only and cfg["name"] in PROFILE_CONFIGS):
            row = {"name": cfg["name"], **profile_row(torch, cfg)}
            out["configs"].append(row)
            print(json.dumps(row), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.output}")
    print(json.dumps({"device": out["device"], "launch_us": round(out["launch"]["launch_s"] * 1e6, 2),
                      **{f"{r['optimizer']}_bytes_per_param": r["bytes_per_param_at_copy_bw"] for r in out["optimizer"]},
                      "profiled": len(out["configs"])}))
    return 0


def _jobs(frameworks: list[str], only: str) -> list[tuple[str, str, object]]:
    """(framework, name, config-or-row) for every configuration to measure."""
    from memory_accuracy import HF_FIXTURE, _read_jsonl, configs

    jobs = []
    for fw in frameworks:
        if fw in ("pytorch", "fsdp2"):
            jobs += [(fw, cfg["name"], cfg) for cfg in configs()
                     if fw == "pytorch" or cfg["training"].precision == "amp"]
        elif fw == "hf":
            jobs += [("hf", row["id"], row) for row in _read_jsonl(HF_FIXTURE)
                     if row.get("parameter_count", 0) <= HF_MAX_PARAMETERS]
    return [j for j in jobs if only in j[1]]


def _predicted_allocated(framework: str, job) -> int:
    from frenzy_core.memory import DEFAULT_OVERHEAD, OverheadSpec, predict_memory
    from frenzy_core.models import ModelSpec
    from frenzy_core.training import TrainingSpec

    if framework == "hf":
        model, training = ModelSpec(**job["model_spec"]), TrainingSpec(**job["training"])
    else:
        model, training = job["model"], job["training"].model_copy(update={"framework": framework})
    workspaces = OverheadSpec(0, 0, DEFAULT_OVERHEAD.workspace_bytes, 0.0)  # allocated: tensors + workspaces
    return predict_memory(model, training, overhead=workspaces).allocated_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", type=Path, default=Path("artifacts/memory_gpu.json"),
                        help="where to write the JSON results (default artifacts/memory_gpu.json)")
    parser.add_argument("--framework", default="all", choices=[*FRAMEWORKS, "all"], help="which recipe's stack")
    parser.add_argument("--only", default="", help="run only configurations whose name contains this text")
    parser.add_argument("--require-cuda", action="store_true", help="exit 2 instead of 0 when no CUDA device exists")
    parser.add_argument("--mode", default="memory", choices=["memory", "step-time", "kernels", "profile"],
                        help="memory: peak bytes per framework (default); step-time: seconds per step vs perf.py; "
                             "kernels: GEMM / attention / HBM rates of this GPU; profile: where a step's time goes")
    parser.add_argument("--gpu-type", default=None, help="step-time: the catalog type of this GPU (default: detected)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("measure_gpu: torch is not installed; nothing measured", file=sys.stderr)
        print(json.dumps({"measured": 0, "reason": "torch not installed"}))
        return 2 if args.require_cuda else 0
    if not torch.cuda.is_available():
        print(f"measure_gpu: no CUDA device (torch {torch.__version__}); nothing measured. Run it on a GPU machine: "
              f"python bench/measure_gpu.py artifacts/memory_gpu.json", file=sys.stderr)
        print(json.dumps({"measured": 0, "reason": "no CUDA device"}))
        return 2 if args.require_cuda else 0

    if args.mode == "step-time":
        return main_step_time(torch, args)
    if args.mode == "kernels":
        return main_kernels(torch, args)
    if args.mode == "profile":
        return main_profile(torch, args)
    frameworks = list(FRAMEWORKS) if args.framework == "all" else [args.framework]
    if "fsdp2" in frameworks:  # a one-process NCCL group for fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    measure = {"pytorch": measure_pytorch, "fsdp2": measure_fsdp2, "hf": measure_hf}
    torch.ones(1, device="cuda")  # bring the context up before measuring
    free, total = torch.cuda.mem_get_info()
    results = []
    for fw, name, job in _jobs(frameworks, args.only):
        try:
            row = {"framework": fw, "name": name, **measure[fw](torch, job)}
        except ImportError as err:  # e.g. hf without frenzy_core.hf_tracer or transformers
            row = {"framework": fw, "name": name, "skipped": str(err)}
        if "max_memory_allocated" in row:
            row["predicted_allocated"] = _predicted_allocated(fw, job)
            row["err"] = round(row["predicted_allocated"] / row["max_memory_allocated"] - 1, 5)
        results.append(row)
        print(json.dumps(row), flush=True)
    out = {
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "device_total_bytes": total,
        "in_use_after_context_bytes": total - free,  # CUDA context + anything else on the device
        "configs": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.output}")
    headline = {"measured": sum("err" in r for r in results), "device": out["device"],
                "context_bytes": out["in_use_after_context_bytes"]}
    for fw in frameworks:
        errs = [r["err"] for r in results if r["framework"] == fw and "err" in r]
        if errs:
            headline[f"{fw}_median_abs_err"] = round(statistics.median(abs(e) for e in errs), 5)
            headline[f"{fw}_worst_under"] = round(min(errs), 5)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    print(json.dumps(headline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
