"""Do the published training runs fit, and does the planner find them? (issue 19 item 5)

    python bench/published_configs.py

Truth: bench/data/published_throughput.jsonl (README: bench/data/published_throughput.md): runs that NVIDIA/NeMo,
Megatron-Bridge, Megatron-LM, torchtitan and llm-foundry measured on real GPUs, with their exact configs. Every one
of them ran, so at its own config it fits its GPU. For each row the memory model and the step-time model can
express (the row -> spec builders are bench/step_time_accuracy.py's, imported, not copied):

1. **fit**: `memory.predict_memory` at the row's exact TrainingSpec / Parallelism (its micro-batch, recompute, fp8,
   distributed optimizer, sequence parallelism) against the GPU's memory less the planner's default safety margin
   (`limits.DEFAULT_SAFETY_MARGIN`): does it fit there, and (`fits_capacity`, since 2026-12-03) does the prediction
   fit the whole GPU? A published run over the whole GPU is a memory-model error (or a feature the planner cannot
   express, named in the row's notes); one only over the margin is the margin's choice.
2. **found**: `plans.rank_plans` for that model and training on a cluster of exactly that many GPUs of that type
   (nodes of the row's gpus_per_node and network), objective time: is the published split (d, t, p, cp, ep, vp) among
   the top three, or is one of the top three predicted within `CLOSE_FRACTION` of the row's measured tokens/s/GPU?

Uneven pipelines are passed through (the row's first / last stage layers) where the memory model takes them; rows
whose micro-batch / vp are unpublished and hybrid Mamba rows are listed as not expressible. Nothing here is fitted; the held-out flag is printed per row, the summary splits by it.
The LAST LINE printed is one JSON object; units are in the key names.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from step_time_accuracy import (  # noqa: E402
    DATA,
    DEFAULT_NETWORK_GBIT_S,
    GPU_NOT_IN_CATALOG,
    build_model,
    build_parallelism,
    build_training,
    split_of,
)

from frenzy_core.cluster import Cluster, Node  # noqa: E402
from frenzy_core.errors import SpecError  # noqa: E402
from frenzy_core.gpus import CATALOG  # noqa: E402
from frenzy_core.limits import DEFAULT_SAFETY_MARGIN  # noqa: E402
from frenzy_core.memory import GIB, predict_memory  # noqa: E402
from frenzy_core.plans import rank_plans  # noqa: E402
from frenzy_core.training import Parallelism  # noqa: E402

TOP = 3  # plans looked at
CLOSE_FRACTION = 0.05  # a top plan predicted within 5% of the published tokens/s/GPU counts as "found"
# reasons in the data the memory model does not care about (it has no FLOPs term): scored here when the split builds
MEMORY_EXPRESSIBLE_REASONS = (GPU_NOT_IN_CATALOG, "uneven pipeline")


def split_key(par: Parallelism) -> tuple[int, ...]:
    return (par.dp, par.tp, par.pp, par.cp, par.ep, par.vp)


def row_parallelism(row: dict) -> Parallelism:
    return build_parallelism(row)  # with the row's uneven first / last stages


def row_cluster(row: dict) -> Cluster:
    per_node = row["gpus_per_node"]
    net = row["network_gbit_s_per_node"] or DEFAULT_NETWORK_GBIT_S
    nodes = tuple(Node(name=f"n{i}", gpu_type=row["gpu_type"], num_gpus=min(per_node, row["num_gpus"] - i * per_node),
                       network_gbit_s=net) for i in range(-(-row["num_gpus"] // per_node)))
    return Cluster(name=f"published-{row['id']}", nodes=nodes)


def evaluate(row: dict, margin: float = DEFAULT_SAFETY_MARGIN) -> dict:
    out = {"id": row["id"], "row": row}
    reason = row["not_expressible_reason"] or ""
    if not row["expressible"] and not reason.startswith(MEMORY_EXPRESSIBLE_REASONS):
        return {**out, "reason": reason}
    if row["gpu_type"] not in CATALOG:
        return {**out, "reason": GPU_NOT_IN_CATALOG}
    gpu = CATALOG[row["gpu_type"]]
    try:
        model = build_model(row)
        training, _ = build_training(row, model)
        par = row_parallelism(row)
        mem = predict_memory(model, training, par)
    except (SpecError, ValueError) as err:
        return {**out, "reason": f"not expressible: {str(err).splitlines()[0]}"}
    usable = gpu.memory_bytes * (1.0 - margin)
    # fits: at the planner's default safety margin; fits_capacity: the model's own verdict, the prediction against
    # the whole GPU (the run did fit in reality: a row over capacity is a model error, one over usable a margin)
    out.update(memory_gib=mem.total_bytes / GIB, usable_gib=usable / GIB, fits=mem.total_bytes <= usable,
               fits_capacity=mem.total_bytes <= gpu.memory_bytes,
               breakdown={k: v / GIB for k, v in mem.components().items()}, phase=mem.peak_phase)
    # the planner on exactly this cluster
    measured = row["tokens_per_s_per_gpu"]
    try:
        plans = rank_plans(model, training, row_cluster(row), objective="time").plans
    except SpecError as err:
        plans, out["plans_error"] = [], str(err).splitlines()[0]
    top = plans[:TOP]
    published = split_key(par)
    out["top"] = [(split_key(p.parallelism), p.micro_batch, p.tokens_per_s / p.num_gpus) for p in top]
    out["published_in_top"] = any(split_key(p.parallelism) == published for p in top)
    out["close_in_top"] = any(abs(p.tokens_per_s / p.num_gpus / measured - 1.0) <= CLOSE_FRACTION for p in top)
    out["found"] = out["published_in_top"] or out["close_in_top"]
    out["feasible_plans"] = len(plans)
    return out


def pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def main() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    results = [evaluate(r) for r in rows]
    scored = [r for r in results if "fits" in r]
    skipped = [r for r in results if "fits" not in r]
    print(f"Published configs vs memory.predict_memory and plans.rank_plans: {len(rows)} rows, {len(scored)} "
          f"expressible, safety margin {DEFAULT_SAFETY_MARGIN:.0%}\n")
    print(f"{'row':<46} {'split':<11} {'gpu':<10} {'GiB':>6} {'usable':>6} fit  top-3 (d,t,p,cp,ep,vp) tok/s/GPU"
          f"   measured")
    for r in scored:
        top = "; ".join(f"{k} {v:.0f}" for k, _, v in r["top"]) or f"no feasible plan ({r.get('plans_error', '')})"
        mark = ("=" if r["published_in_top"] else "") + ("~" if r["close_in_top"] else "")
        print(f"{r['id']:<46} {split_of(r['row']):<11} {r['row']['gpu_type']:<10} {r['memory_gib']:>6.1f} "
              f"{r['usable_gib']:>6.1f} {'yes' if r['fits'] else 'NO ':<4} {mark:<2} {top}   "
              f"{r['row']['tokens_per_s_per_gpu']:.0f}")
    print("\n(= the published split is in the top 3; ~ a top-3 plan is within 5% of the measured tokens/s/GPU)")
    print("\nOver-predicted published configs (memory > usable):")
    for r in scored:
        if not r["fits"]:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in r["breakdown"].items() if v >= 0.05)
            print(f"  {r['id']:<44} {r['memory_gib']:.1f} GiB > {r['usable_gib']:.1f} ({r['phase']}): {parts}")

    print("\nSummary:")
    for name in ("held_out", "fit", "calibration", None):
        part = [r for r in scored if name is None or split_of(r["row"]) == name]
        if not part:
            continue
        fits = sum(r["fits"] for r in part)
        cap = sum(r["fits_capacity"] for r in part)
        found = sum(r["found"] for r in part)
        print(f"  {name or 'all':<12} n={len(part):>2}  fit {fits:>2} ({pct(fits, len(part))}%), at capacity "
              f"{cap:>2} ({pct(cap, len(part))}%)  "
              f"found in top 3 {found:>2} ({pct(found, len(part))}%)  "
              f"published split in top 3 {sum(r['published_in_top'] for r in part)}")
    print("\nOver the whole GPU (the model says a run that ran does not fit at all):")
    for r in scored:
        if not r["fits_capacity"]:
            print(f"  {r['id']:<44} {r['memory_gib']:.1f} GiB > {CATALOG[r['row']['gpu_type']].memory_gib} GiB")
    ratios = [r["memory_gib"] / r["usable_gib"] for r in scored]
    print(f"\nNot expressible ({len(skipped)}):")
    for r in skipped:
        print(f"  {r['id']:<46} {r['reason'][:110]}")
    n = len(scored)
    print(json.dumps({
        "rows": len(rows), "expressible_rows": n, "safety_margin_fraction": DEFAULT_SAFETY_MARGIN,
        "fits_rows": sum(r["fits"] for r in scored), "fits_pct": pct(sum(r["fits"] for r in scored), n),
        "fits_at_capacity_rows": sum(r["fits_capacity"] for r in scored),
        "fits_at_capacity_pct": pct(sum(r["fits_capacity"] for r in scored), n),
        "top3_rows": sum(r["found"] for r in scored), "top3_pct": pct(sum(r["found"] for r in scored), n),
        "published_split_in_top3_rows": sum(r["published_in_top"] for r in scored),
        "no_feasible_plan_rows": sum(r["feasible_plans"] == 0 for r in scored),
        "median_memory_over_usable_ratio": round(statistics.median(ratios), 3) if ratios else None,
        "max_memory_over_usable_ratio": round(max(ratios), 3) if ratios else None,
        "held_out_fits_pct": pct(sum(r["fits"] for r in scored if r["row"]["held_out"]),
                                 sum(bool(r["row"]["held_out"]) for r in scored)),
    }))


if __name__ == "__main__":
    main()
