"""Measure the benchmarked configurations on a real GPU, per framework, next to what each recipe predicts.

    python bench/measure_gpu.py artifacts/memory_gpu.json [--framework pytorch|fsdp2|hf|all] [--only gpt2]
                                                        [--require-cuda]
    python bench/measure_gpu.py artifacts/step_time_gpu.json --mode step-time [--gpu-type H100-80GB] [--only llama]

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
    parser.add_argument("--mode", default="memory", choices=["memory", "step-time"],
                        help="memory: peak bytes per framework (default); step-time: seconds per step vs perf.py")
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
