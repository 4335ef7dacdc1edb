"""Sweep backends side by side: the same 64 runs (4 candidates x 2 policies x 8 seeds, the first 600 jobs of the
bundled philly-2000 trace on modern-mixed) in one process (local, 1 worker), on a 2-process pool (local, 2 workers)
and on a local 2-CPU Ray cluster; checks the tables are identical and prints the speed-up over one process and each
backend's overhead per run.

Overhead per run = (wall x workers - sum of the runs' own simulation time) / runs: the time a worker slot spends on
anything but simulating (process start and imports, pickling, scheduling, idle at the end). Ray's cluster start
(`ray.init`) is timed apart and left out of its wall time (a long-lived cluster pays it once); the pool's start is
in its wall time (it starts per sweep).

Run: `flock /tmp/frenzy-heavy.lock python bench/sweep.py` (last line: one JSON object).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.cluster import load_cluster  # noqa: E402
from frenzy_core.sweep import Grid, ray_available, run_sweep  # noqa: E402
from frenzy_core.traces import bundled_traces, load_trace  # noqa: E402
from frenzy_core.whatif import DEFAULT_CANDIDATES, build_candidates  # noqa: E402

JOBS = 600
SEEDS = 8
POLICIES = ("frenzy-eft", "fcfs")


def grid() -> Grid:
    base = load_cluster(REPO / "sample_clusters" / "modern-mixed.yaml")
    path, fmt = bundled_traces()["philly-2000"]
    trace = load_trace(str(path), fmt, limit=JOBS)
    rows = [{"candidate": c.candidate, "gpu_type": c.gpu_type, "count": c.count} for c in DEFAULT_CANDIDATES]
    return Grid.make(base, build_candidates(base, rows), POLICIES, range(SEEDS), {"philly-2000": trace})


def measure(g: Grid, backend: str, workers: int) -> dict:
    table = run_sweep(g, backend, workers=workers)
    sim_s = sum(r["wall_s"] for r in table.rows)
    runs = len(table.rows)
    return {"table": table, "wall_s": table.wall_s, "sim_s": sim_s,
            "overhead_ms_per_run": 1e3 * (table.wall_s * workers - sim_s) / runs}


def main() -> None:
    g = grid()
    runs = len(g.runs())
    assert runs == 64, runs
    # The load average says how busy the machine was (other processes slow every backend's runs alike).
    out: dict = {"date": time.strftime("%Y-%m-%d"), "runs": runs, "cpus": os.cpu_count(),
                 "load_avg_1min_before": round(os.getloadavg()[0], 2)}
    results = {"local_1": measure(g, "local", 1), "local_2": measure(g, "local", 2)}
    why = ray_available()
    if why is None:
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        out["ray_init_s"] = round(time.perf_counter() - t0, 2)
        try:
            results["ray_2"] = measure(g, "ray", 2)
        finally:
            ray.shutdown()
    else:
        print(f"ray skipped: {why}", file=sys.stderr)
    ref = results["local_1"]["table"].deterministic_rows()
    out["identical_tables"] = all(r["table"].deterministic_rows() == ref for r in results.values())
    base_wall = results["local_1"]["wall_s"]
    print(f"{'backend':10} {'wall s':>8} {'sim s':>8} {'speed-up':>9} {'overhead ms/run':>16}")
    for name, r in results.items():
        speedup = base_wall / r["wall_s"]
        print(f"{name:10} {r['wall_s']:>8.2f} {r['sim_s']:>8.2f} {speedup:>9.2f} {r['overhead_ms_per_run']:>16.1f}")
        out[f"{name}_wall_s"] = round(r["wall_s"], 3)
        out[f"{name}_speedup_x"] = round(speedup, 3)
        out[f"{name}_overhead_ms_per_run"] = round(r["overhead_ms_per_run"], 2)
    out["sim_s_per_run_mean"] = round(results["local_1"]["sim_s"] / runs, 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
