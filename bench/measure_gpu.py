"""Measure the traced configurations on a real GPU: torch.cuda.max_memory_allocated() / max_memory_reserved().

    python bench/measure_gpu.py artifacts/memory_gpu.json [--only gpt2] [--require-cuda]

Runs the same model code and training steps as frenzy_core.tracer (bench/memory_accuracy.py's configurations) with
real CUDA tensors, one configuration at a time, and writes one JSON file: per configuration the allocated and reserved
peaks, the memory in use after the CUDA context came up (the context itself is not counted by the allocator), the
tracer's fixture peak for comparison, or "oom". Never imported by the tests. Without CUDA it says so and exits 0 (so
`make bench` passes on CPU machines); --require-cuda makes that exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


class _Phase:
    """Stands in for the tracer's storage tracker: _run_steps only sets `.phase`."""

    phase = "setup"


def measure(torch, cfg: dict) -> dict:
    from frenzy_core import tracer

    training = cfg["training"]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base_allocated = torch.cuda.memory_allocated()
    try:
        tracer._run_steps(
            torch, _Phase(), cfg["model"], training, training.micro_batch,
            training.global_batch // training.micro_batch, device="cuda",
        )
        torch.cuda.synchronize()
        return {
            "max_memory_allocated": torch.cuda.max_memory_allocated() - base_allocated,
            "max_memory_reserved": torch.cuda.max_memory_reserved(),
        }
    except torch.cuda.OutOfMemoryError:
        return {"oom": True}
    finally:
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", type=Path, default=Path("artifacts/memory_gpu.json"),
                        help="where to write the JSON results (default artifacts/memory_gpu.json)")
    parser.add_argument("--only", default="", help="run only configurations whose name contains this text")
    parser.add_argument("--require-cuda", action="store_true", help="exit 2 instead of 0 when no CUDA device exists")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("measure_gpu: torch is not installed; nothing measured", file=sys.stderr)
        return 2 if args.require_cuda else 0
    if not torch.cuda.is_available():
        print(f"measure_gpu: no CUDA device (torch {torch.__version__}); nothing measured", file=sys.stderr)
        return 2 if args.require_cuda else 0

    from memory_accuracy import FIXTURE, configs

    traced = {}
    if FIXTURE.exists():
        traced = {e["name"]: e["peak_bytes"] for e in json.loads(FIXTURE.read_text())["configs"]}
    torch.ones(1, device="cuda")  # bring the context up before measuring
    free, total = torch.cuda.mem_get_info()
    results = []
    for cfg in configs():
        if args.only not in cfg["name"]:
            continue
        row = {"name": cfg["name"], "traced_peak_bytes": traced.get(cfg["name"]), **measure(torch, cfg)}
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
