"""Simulator throughput: the whole 82k-job Philly trace on the 1,248-GPU alibaba-1k cluster, frenzy and fcfs;
and sia on the bundled 2,000-job Philly sample on sia-64 (3 seeds), beside sia with the every-round solver (seed 0).

Targets: under 20 s per policy for the 82k jobs, under 60 s per seed for sia's 2,000 (issue 9), on a 2-core machine.
The every-round run is timed in the same process right after, so `sia_every_round_over_event` is a ratio measured
side by side; `sia_every_round_equal` says whether its per-job JCTs are identical to the event-driven run's.
Prints a line per run, then a JSON last line with `jobs`, `frenzy_wall_s`, `fcfs_wall_s` (wall time of `simulate`,
mapping included; trace loading excluded), `sia_2000_wall_s` (per seed) and the sia comparison.
Run: .venv/bin/python bench/sim_throughput.py [--limit N] [--skip-sia]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from frenzy_core.cluster import load_cluster  # noqa: E402
from frenzy_core.simulate import SimOptions, simulate  # noqa: E402
from frenzy_core.traces import bundled_traces, load_trace  # noqa: E402

PHILLY = REPO.parent / "shared" / "traces" / "sia-sosp23" / "traces" / "philly.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--skip-sia", action="store_true")
    args = ap.parse_args()
    trace = load_trace(PHILLY, "philly", limit=args.limit)
    cluster = load_cluster(REPO / "sample_clusters" / "alibaba-1k.yaml")
    out = {"jobs": trace.kept, "cluster_gpus": cluster.total_gpus}
    for policy in ("frenzy", "fcfs"):
        t0 = time.perf_counter()
        r = simulate(trace, cluster, policy, seed=0)
        wall = time.perf_counter() - t0
        s = r.summary_dict()
        print(f"{policy}: {wall:.1f} s wall, {s['completed']}/{s['jobs']} done, avg JCT {s['avg_jct_s']:.0f} s, "
              f"OOM {s['oom_failures']}, {s['sched_overhead_ms_per_decision']:.3f} ms/decision", file=sys.stderr)
        out[f"{policy}_wall_s"] = round(wall, 2)
        out[f"{policy}_completed"] = s["completed"]
        out[f"{policy}_avg_jct_s"] = round(s["avg_jct_s"], 1)
    if not args.skip_sia:
        out.update(sia_2000())
    print(json.dumps(out))


def sia_2000() -> dict:
    """sia on 2,000 Philly jobs on sia-64: 3 seeds event-driven, then seed 0 with the every-round solver."""
    path, fmt = bundled_traces()["philly-2000"]
    trace = load_trace(path, fmt)
    cluster = load_cluster(REPO / "sample_clusters" / "sia-64.yaml")
    walls, runs = [], []
    for seed in range(3):
        t0 = time.perf_counter()
        runs.append(simulate(trace, cluster, "sia", seed=seed))
        walls.append(time.perf_counter() - t0)
        print(f"sia 2,000 Philly jobs seed {seed}: {walls[-1]:.1f} s, {runs[-1].policy_stats['ilp_solves']:.0f} "
              f"solves", file=sys.stderr)
    t0 = time.perf_counter()
    every = simulate(trace, cluster, "sia", seed=0, options=SimOptions(sia_every_round=True))
    wall_every = time.perf_counter() - t0
    equal = bool(np.array_equal(runs[0].jobs["jct_s"], every.jobs["jct_s"], equal_nan=True))
    print(f"sia every-round seed 0: {wall_every:.1f} s, {every.policy_stats['ilp_solves']:.0f} solves, "
          f"same JCTs: {equal}", file=sys.stderr)
    return {"sia_2000_wall_s": [round(w, 1) for w in walls], "sia_2000_target_60s_met": max(walls) < 60.0,
            "sia_2000_ilp_solves": [r.policy_stats["ilp_solves"] for r in runs],
            "sia_every_round_wall_s": round(wall_every, 1), "sia_every_round_ilp_solves": every.policy_stats["ilp_solves"],
            "sia_every_round_over_event": round(wall_every / walls[0], 2), "sia_every_round_equal": equal}


if __name__ == "__main__":
    main()
