"""Simulator throughput: the whole 82k-job Philly trace on the 1,248-GPU alibaba-1k cluster, frenzy and fcfs.

Target: under 20 s per policy on a 2-core machine. Prints a line per policy, then a JSON last line with `jobs`,
`frenzy_wall_s`, `fcfs_wall_s` (wall time of `simulate`, mapping included; trace loading excluded).
Run: .venv/bin/python bench/sim_throughput.py [--limit N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.cluster import load_cluster  # noqa: E402
from frenzy_core.simulate import simulate  # noqa: E402
from frenzy_core.traces import load_trace  # noqa: E402

PHILLY = REPO.parent / "shared" / "traces" / "sia-sosp23" / "traces" / "philly.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None)
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
    print(json.dumps(out))


if __name__ == "__main__":
    main()
