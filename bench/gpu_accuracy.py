"""The measurements of a real GPU (bench/measure_gpu.py on a lent machine) against what the code predicts today.

    python bench/gpu_accuracy.py [bench/data/gpu_h200_2026-12-04]

Reads the stored JSON of one device session (no GPU needed) and recomputes every prediction with the current code:
* memory: each recipe's allocated bytes against `torch.cuda.max_memory_allocated()` of two real training steps
  (pytorch: frenzy_core.tracer's decoder; fsdp2: the same under fully_shard; hf: the transformers models);
  configurations the GPU could not hold are checked to be predicted not to fit either. Rows below SMALL_BYTES are
  reported apart: the recipe counts cuBLAS's workspace (`DEFAULT_OVERHEAD.workspace_bytes`), which a process
  allocates once, before any but its first configuration's baseline, so it is not in their measured peaks.
* step time: perf.py's seconds per optimizer step against the median measured step (d = 1), models of at least
  measure_gpu.STEP_MIN_PARAMETERS apart from the launch-bound small ones. None of these rows was used to set any
  constant: every row is held out.
* the optimizer step: `perf.optimizer_sweep_bytes` at the datasheet bandwidth against the timed AdamW step
  (foreach and fused, 2^30 fp32 parameters) and against each profiled configuration's optimizer phase.
* kernels: the measured causal attention rates against the catalog's (FlashAttention papers' H100 figures), and
  the measured bf16 GEMM rates against the catalog's single `hw_efficiency`.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

DEFAULT_DIR = HERE / "data" / "gpu_h200_2026-12-04"
SMALL_BYTES = 1 << 30  # measured peaks below 1 GiB are dominated by the once-per-process workspace


def _load(folder: Path, name: str) -> dict | None:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else None


def memory_section(folder: Path) -> dict:
    from measure_gpu import _jobs, _predicted_allocated

    from frenzy_core.gpus import CATALOG

    out = {}
    for fw in ("pytorch", "fsdp2", "hf"):
        data = _load(folder, f"memory_gpu_{fw}.json")
        if data is None:
            continue
        jobs = {name: job for f, name, job in _jobs([fw], "") if f == fw}
        capacity = data["device_total_bytes"] - data["in_use_after_context_bytes"]
        rows, small, oom_checked, after_oom = [], [], [], False
        for r in data["configs"]:
            job = jobs.get(r["name"])
            if job is None:
                continue
            predicted = _predicted_allocated(fw, job)
            if r.get("oom"):
                oom_checked.append({"name": r["name"], "predicted_gib": round(predicted / 2**30, 1),
                                    "capacity_gib": round(capacity / 2**30, 1),
                                    "predicted_not_to_fit": predicted > capacity})
                after_oom = True  # fsdp2: what the failed step held stays referenced (see docs/testing.md)
                continue
            if "max_memory_allocated" not in r:
                continue
            err = predicted / r["max_memory_allocated"] - 1
            row = {"name": r["name"], "measured": r["max_memory_allocated"], "predicted": predicted,
                   "err": round(err, 5)}
            if r["max_memory_allocated"] < SMALL_BYTES:
                small.append(row)
            elif not (fw == "fsdp2" and after_oom):
                rows.append(row)
        errs = [r["err"] for r in rows]
        out[fw] = {"rows": len(rows), "median_abs_err": round(statistics.median(abs(e) for e in errs), 5),
                   "worst_under": round(min(errs), 5), "worst_over": round(max(errs), 5),
                   "small_rows": len(small),
                   "small_median_abs_err": round(statistics.median(abs(r["err"]) for r in small), 5) if small else None,
                   "oom_rows": len(oom_checked),
                   "oom_predicted_not_to_fit": sum(r["predicted_not_to_fit"] for r in oom_checked),
                   "detail": rows, "small": small, "oom": oom_checked}
    out["capacity_type"] = CATALOG["H200-141GB"].name
    return out


def step_section(folder: Path) -> dict:
    from measure_gpu import STEP_MIN_PARAMETERS, _predicted_step
    from memory_accuracy import configs

    data = _load(folder, "step_time_gpu.json")
    if data is None:
        return {}
    cfgs = {c["name"]: c for c in configs()}
    big, small = [], []
    for r in data["configs"]:
        if "measured_step_s" not in r or r["name"] not in cfgs:
            continue
        now = _predicted_step(cfgs[r["name"]], data["gpu_type"])["predicted_step_s"]
        row = {"name": r["name"], "parameters": r["parameters"], "measured_s": r["measured_step_s"],
               "predicted_s": round(now, 5), "err": round(now / r["measured_step_s"] - 1, 4),
               "err_at_measurement": r.get("err")}
        (big if r["parameters"] >= STEP_MIN_PARAMETERS else small).append(row)

    def summary(rows):
        errs = [r["err"] for r in rows]
        before = [r["err_at_measurement"] for r in rows if r["err_at_measurement"] is not None]
        return {"rows": len(rows), "median_abs_err": round(statistics.median(abs(e) for e in errs), 4),
                "median_signed_err": round(statistics.median(errs), 4),
                "median_abs_err_at_measurement": round(statistics.median(abs(e) for e in before), 4)}

    return {"gpu_type": data["gpu_type"], "large": summary(big), "small": summary(small), "detail": big + small}


def optimizer_section(folder: Path) -> dict:
    from frenzy_core.gpus import CATALOG
    from frenzy_core.perf import optimizer_sweep_bytes, step_time
    from frenzy_core.precision import PRECISIONS
    from frenzy_core.training import Parallelism, TrainingSpec

    data = _load(folder, "profile_gpu.json")
    if data is None:
        return {}
    gpu = CATALOG["H200-141GB"]
    bandwidth = gpu.memory_bandwidth_gbyte_s * 1e9
    micro = []
    for r in data["optimizer"]:
        training = TrainingSpec(optimizer="adamw-fused" if r["optimizer"].endswith("fused") else "adamw")
        predicted = r["params"] * optimizer_sweep_bytes(PRECISIONS["amp"], training) / bandwidth
        micro.append({"optimizer": r["optimizer"], "measured_s": r["step_s"], "predicted_s": round(predicted, 5),
                      "err": round(predicted / r["step_s"] - 1, 4),
                      "bytes_per_param_counted": optimizer_sweep_bytes(PRECISIONS["amp"], training),
                      "bytes_per_param_at_measured_copy_bw": r["bytes_per_param_at_copy_bw"]})
    from memory_accuracy import configs

    cfgs = {c["name"]: c for c in configs()}
    phases = []
    for r in data["configs"]:
        c = cfgs.get(r["name"])
        if c is None or "optimizer_s" not in r:
            continue
        st = step_time(c["model"], c["training"], Parallelism(), gpu)  # zero_grad was timed apart: not in the phase
        phases.append({"name": r["name"], "measured_s": round(r["optimizer_s"], 5),
                       "predicted_s": round(st.optimizer_s, 5), "err": round(st.optimizer_s / r["optimizer_s"] - 1, 4)})
    return {"microbenchmark": micro, "profiled_phases": phases,
            "launch_us": round(data["launch"]["launch_s"] * 1e6, 2)}


def kernels_section(folder: Path) -> dict:
    from frenzy_core.gpus import CATALOG
    from frenzy_core.perf import ATTENTION_KERNEL_SEQ_LENS, ATTENTION_KERNEL_TFLOPS

    data = _load(folder, "kernels_gpu.json")
    if data is None:
        return {}
    gpu = CATALOG["H200-141GB"]
    fwd, bwd = ATTENTION_KERNEL_TFLOPS[("flash-attn-2", (9, 0))]
    cfwd, cbwd = ATTENTION_KERNEL_TFLOPS[("cudnn", (9, 0))]
    attention = []
    for r in data["attention"]:
        if r["seq_len"] not in ATTENTION_KERNEL_SEQ_LENS:
            continue
        i = ATTENTION_KERNEL_SEQ_LENS.index(r["seq_len"])
        attention.append({"seq_len": r["seq_len"],
                          "flash_fwd_measured_over_catalog": round(r["flash_fwd_tflops"] / fwd[i], 3),
                          "flash_bwd_measured_over_catalog": round(r["flash_bwd_tflops"] / bwd[i], 3),
                          "cudnn_fwd_measured_over_catalog": round(r["cudnn_fwd_tflops"] / cfwd[i], 3),
                          "cudnn_bwd_measured_over_catalog": round(r["cudnn_bwd_tflops"] / cbwd[i], 3)})
    peak = gpu.peak_tflops("bf16")
    gemm_eff = [min(r[f"bf16_{g}_tflops"] for g in ("fwd", "dgrad", "wgrad")) / peak for r in data["gemm"]]
    fp8 = [r["fp8_fwd_tflops"] / r["bf16_fwd_tflops"] for r in data["gemm"] if isinstance(r.get("fp8_fwd_tflops"), float)]
    return {"hbm_copy_over_datasheet": round(data["hbm_copy_gbyte_s"] / gpu.memory_bandwidth_gbyte_s, 3),
            "attention": attention,
            "gemm_efficiency_min": round(min(gemm_eff), 3), "gemm_efficiency_median": round(statistics.median(gemm_eff), 3),
            "gemm_efficiency_max": round(max(gemm_eff), 3), "catalog_hw_efficiency": gpu.hw_efficiency,
            "fp8_over_bf16_median": round(statistics.median(fp8), 3) if fp8 else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT_DIR, help="one device session's JSON files")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"gpu_accuracy: {args.folder} is not a folder of measure_gpu.py results", file=sys.stderr)
        return 2
    memory, step, optimizer, kernels = (memory_section(args.folder), step_section(args.folder),
                                        optimizer_section(args.folder), kernels_section(args.folder))
    for fw in ("pytorch", "fsdp2", "hf"):
        if fw in memory:
            m = memory[fw]
            print(f"memory {fw:8s} rows {m['rows']:3d}  median |err| {m['median_abs_err']:.2%}  worst under "
                  f"{m['worst_under']:+.2%}  worst over {m['worst_over']:+.2%}  (< 1 GiB apart: {m['small_rows']}; "
                  f"OOM rows predicted not to fit: {m['oom_predicted_not_to_fit']}/{m['oom_rows']})")
    if step:
        for row in step["detail"]:
            print(f"step  {row['name'][:58]:58s} measured {row['measured_s']:.4f} s  predicted {row['predicted_s']:.4f}"
                  f"  err {row['err']:+.1%} (at measurement {row['err_at_measurement']:+.1%})")
        print(f"step time >= 500M params: median |err| {step['large']['median_abs_err']:.1%}, signed "
              f"{step['large']['median_signed_err']:+.1%} (at measurement {step['large']['median_abs_err_at_measurement']:.1%});"
              f" small models {step['small']['median_abs_err']:.1%}")
    for row in optimizer.get("microbenchmark", []):
        print(f"optimizer {row['optimizer']:14s} measured {row['measured_s'] * 1e3:.1f} ms  predicted "
              f"{row['predicted_s'] * 1e3:.1f} ms  err {row['err']:+.1%}  ({row['bytes_per_param_counted']:.0f} B/param "
              f"counted, {row['bytes_per_param_at_measured_copy_bw']:.0f} at the measured copy bandwidth)")
    for row in optimizer.get("profiled_phases", []):
        print(f"optimizer phase {row['name'][:50]:50s} measured {row['measured_s'] * 1e3:.1f} ms  predicted "
              f"{row['predicted_s'] * 1e3:.1f} ms  err {row['err']:+.1%}")
    if kernels:
        print(f"HBM copy / datasheet {kernels['hbm_copy_over_datasheet']}; GEMM efficiency {kernels['gemm_efficiency_min']}"
              f"-{kernels['gemm_efficiency_max']} (median {kernels['gemm_efficiency_median']}) vs catalog "
              f"hw_efficiency {kernels['catalog_hw_efficiency']}; fp8/bf16 median {kernels['fp8_over_bf16_median']}")
        for row in kernels["attention"]:
            print(f"attention s={row['seq_len']:6d} measured/catalog flash fwd {row['flash_fwd_measured_over_catalog']}"
                  f" bwd {row['flash_bwd_measured_over_catalog']}, cudnn fwd {row['cudnn_fwd_measured_over_catalog']}"
                  f" bwd {row['cudnn_bwd_measured_over_catalog']}")
    headline = {"folder": args.folder.name}
    for fw in ("pytorch", "fsdp2", "hf"):
        if fw in memory:
            headline[f"memory_{fw}_median_abs_err"] = memory[fw]["median_abs_err"]
            headline[f"memory_{fw}_worst_under"] = memory[fw]["worst_under"]
            headline[f"memory_{fw}_oom_predicted_not_to_fit"] = (f"{memory[fw]['oom_predicted_not_to_fit']}/"
                                                                  f"{memory[fw]['oom_rows']}")
    if step:
        headline["step_time_large_median_abs_err"] = step["large"]["median_abs_err"]
        headline["step_time_large_median_signed_err"] = step["large"]["median_signed_err"]
        headline["step_time_large_median_abs_err_at_measurement"] = step["large"]["median_abs_err_at_measurement"]
        headline["step_time_small_median_abs_err"] = step["small"]["median_abs_err"]
    for row in optimizer.get("microbenchmark", []):
        headline[f"optimizer_{row['optimizer']}_err"] = row["err"]
    if kernels:
        headline["gemm_efficiency_median"] = kernels["gemm_efficiency_median"]
        headline["hbm_copy_over_datasheet"] = kernels["hbm_copy_over_datasheet"]
    print(json.dumps(headline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
