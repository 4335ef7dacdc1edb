"""How close are the memory predictions to a real training step? Traced peaks vs the detailed and paper methods.

    python bench/memory_accuracy.py            # read the cached traces (bench/data/memory_traced.json)
    python bench/memory_accuracy.py --retrace  # re-run every trace (needs torch; a minute or two on 2 CPU cores)

The traces come from frenzy_core.tracer: two real training steps per configuration under fake tensors, live storages
counted in 512-byte blocks, i.e. what torch.cuda.max_memory_allocated() would report on one GPU. The tracer cannot
see the CUDA context, workspaces, NCCL buffers or fragmentation, so predictions are made with NO_OVERHEAD here.
The last line printed is one JSON object (configs, detailed_median_abs_err, detailed_worst_under, ...).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from frenzy_core.memory import NO_OVERHEAD, predict_memory  # noqa: E402
from frenzy_core.models import ZOO, ModelSpec  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "data" / "memory_traced.json"
TARGET_MEDIAN_ABS_ERR = 0.03
TARGET_WORST_UNDER = -0.05

# A Llama-3-style model scaled down (GQA 16:4, SwiGLU, RMSNorm, RoPE, untied head) so b=8, s=2048 stays quick.
LLAMA_MINI = ModelSpec(
    name="llama-mini", vocab_size=32000, hidden_size=2048, num_layers=8, num_heads=16, num_kv_heads=4,
    ffn_size=5632, mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=8192,
    norm_kind="rmsnorm", bias=False,
)


def _cfg(model: ModelSpec, precision: str, attention: str, b: int, s: int, accumulation: int = 1, **kw) -> dict:
    training = TrainingSpec(
        seq_len=s, global_batch=b * accumulation, micro_batch=b, precision=precision, attention=attention, **kw
    )
    extras = "".join(f" {k}={v}" for k, v in kw.items())
    name = f"{model.name} {precision} {attention} b={b} s={s} m={accumulation}{extras}"
    return {"name": name, "model": model, "training": training}


def configs() -> list[dict]:
    """The traced configurations: GPT-2 124M to a 7B GPT, two Llama shapes, b 1..8, s 512..2048, both recipes."""
    g, m, lg, xl, g7 = (ZOO[n] for n in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt2-7b-paper"))
    l8 = ZOO["llama-3.1-8b"]
    return [
        _cfg(g, "amp", "eager", 1, 512),
        _cfg(g, "amp", "flash", 1, 512),
        _cfg(g, "amp", "eager", 8, 1024),
        _cfg(g, "amp", "flash", 8, 1024),
        _cfg(g, "bf16-master", "eager", 4, 1024),
        _cfg(g, "bf16-master", "flash", 4, 1024),
        _cfg(g, "amp", "eager", 2, 512, accumulation=2, dropout=0.1),
        _cfg(g, "amp", "flash", 2, 1024, accumulation=2, optimizer="adamw-fused"),
        _cfg(m, "amp", "flash", 4, 1024),
        _cfg(m, "bf16-master", "eager", 2, 1024),
        _cfg(lg, "amp", "eager", 2, 1024),
        _cfg(lg, "bf16-master", "flash", 8, 1024),
        _cfg(xl, "amp", "flash", 1, 1024),
        _cfg(xl, "bf16-master", "eager", 4, 1024),
        _cfg(xl, "amp", "flash", 2, 1024, accumulation=2),
        _cfg(g7, "amp", "flash", 1, 2048),
        _cfg(g7, "bf16-master", "flash", 2, 2048),
        _cfg(g7, "amp", "eager", 1, 2048),
        _cfg(g7, "bf16-master", "eager", 4, 1024),
        _cfg(g7, "bf16-master", "flash", 8, 512, dropout=0.1),
        _cfg(l8, "bf16-master", "flash", 1, 2048),
        _cfg(l8, "amp", "flash", 2, 1024),
        _cfg(l8, "bf16-master", "eager", 1, 2048),
        _cfg(LLAMA_MINI, "amp", "flash", 8, 2048),
        _cfg(LLAMA_MINI, "amp", "eager", 4, 1024),
        _cfg(LLAMA_MINI, "bf16-master", "flash", 4, 2048, dropout=0.1),
        _cfg(LLAMA_MINI, "bf16-master", "eager", 8, 512),
        _cfg(LLAMA_MINI, "amp", "flash", 2, 2048, accumulation=4, optimizer="adamw-fused"),
        _cfg(ZOO["mistral-7b"], "bf16-master", "flash", 2, 2048),
        _cfg(ZOO["qwen2.5-7b"], "bf16-master", "flash", 1, 1024),
    ]


def retrace(path: Path = FIXTURE) -> dict:
    """Trace every configuration and write the fixture (model and training specs, peak, phase, torch version)."""
    from frenzy_core.tracer import trace_peak

    entries, version = [], None
    for cfg in configs():
        start = time.perf_counter()
        result = trace_peak(cfg["model"], cfg["training"])
        version = result.torch_version
        entries.append({
            "name": cfg["name"],
            "model": cfg["model"].model_dump(),
            "training": cfg["training"].model_dump(),
            "peak_bytes": result.peak_bytes,
            "peak_phase": result.peak_phase,
            "trace_s": round(time.perf_counter() - start, 2),
        })
        print(f"traced {cfg['name']}: {result.peak_bytes / 1e9:.3f} GB ({entries[-1]['trace_s']} s)", file=sys.stderr)
    fixture = {
        "torch_version": version,
        "tracer": "frenzy_core.tracer.trace_peak: 2 training steps, FakeTensorMode on cpu, 512-byte blocks",
        "configs": entries,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fixture, indent=1) + "\n")
    return fixture


def load_fixture(path: Path = FIXTURE) -> dict:
    return json.loads(path.read_text())


def compare(fixture: dict) -> list[dict]:
    """Signed relative errors (predicted / traced - 1) of both methods for each traced configuration."""
    rows = []
    for entry in fixture["configs"]:
        model, training = ModelSpec(**entry["model"]), TrainingSpec(**entry["training"])
        traced = entry["peak_bytes"]
        detailed = predict_memory(model, training, method="detailed", overhead=NO_OVERHEAD)
        paper = predict_memory(model, training, method="paper", overhead=NO_OVERHEAD)
        rows.append({
            "name": entry["name"],
            "traced": traced,
            "traced_phase": entry["peak_phase"],
            "detailed": detailed.total_bytes,
            "detailed_phase": detailed.peak_phase,
            "paper": paper.total_bytes,
            "detailed_err": detailed.total_bytes / traced - 1,
            "paper_err": paper.total_bytes / traced - 1,
        })
    return rows


def summary(rows: list[dict]) -> dict:
    return {
        "configs": len(rows),
        "detailed_median_abs_err": round(statistics.median(abs(r["detailed_err"]) for r in rows), 5),
        "detailed_worst_under": round(min(r["detailed_err"] for r in rows), 5),
        "detailed_worst_abs_err": round(max(abs(r["detailed_err"]) for r in rows), 5),
        "paper_median_abs_err": round(statistics.median(abs(r["paper_err"]) for r in rows), 5),
        "paper_worst_abs_err": round(max(abs(r["paper_err"]) for r in rows), 5),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retrace", action="store_true", help="re-run the traces (needs torch) and rewrite the fixture")
    parser.add_argument("--fixture", type=Path, default=FIXTURE, help=f"cached traces (default {FIXTURE})")
    args = parser.parse_args(argv)
    if args.retrace or not args.fixture.exists():
        fixture = retrace(args.fixture)
    else:
        fixture = load_fixture(args.fixture)
    rows = compare(fixture)
    print(f"traced with torch {fixture['torch_version']}; predictions with NO_OVERHEAD (a trace sees no CUDA context)")
    header = f"{'config':58s} {'traced GB':>9s} {'detailed':>9s} {'err':>7s} {'paper':>9s} {'err':>8s}  traced phase"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['name']:58s} {r['traced'] / 1e9:9.3f} {r['detailed'] / 1e9:9.3f} {r['detailed_err']:+7.2%} "
            f"{r['paper'] / 1e9:9.3f} {r['paper_err']:+8.1%}  {r['traced_phase']} / {r['detailed_phase']}"
        )
    result = summary(rows)
    print(
        f"detailed: median |err| {result['detailed_median_abs_err']:.2%}, worst under {result['detailed_worst_under']:+.2%}"
        f" (targets <= {TARGET_MEDIAN_ABS_ERR:.0%}, >= {TARGET_WORST_UNDER:+.0%}); "
        f"paper: median |err| {result['paper_median_abs_err']:.1%}, worst |err| {result['paper_worst_abs_err']:.1%}"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
