"""Why the classroom demo's policies win or lose (issue 22, item 4): the teacher scenario's own simulation
(sample_scenarios/teacher.yaml: the bundled philly-2000 trace, its first 60 jobs, on the paper testbed), explained
by frenzy_core.comparison exactly as the Simulation page shows it.

    python bench/demo_why.py [--seeds N] [--policies a,b,...]

Defaults: the scenario's seeds (2) and policies (frenzy, fcfs), plus sia and frenzy-srpt for context. Prints the
per-policy averages, each policy's explanation against the lowest average JCT, per-seed paired differences of
frenzy against fcfs, and one JSON object on the last line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.comparison import explain_results, jct_gap  # noqa: E402
from frenzy_core.metrics import paired_comparison  # noqa: E402
from frenzy_core.scenario import load_scenario  # noqa: E402
from frenzy_core.simulate import SimOptions, simulate_seeds  # noqa: E402
from frenzy_core.traces import bundled_traces, load_trace  # noqa: E402

HOUR = 3600.0


def _arg(name: str, default: str) -> str:
    if name in sys.argv:
        i = sys.argv.index(name)
        if i + 1 >= len(sys.argv):
            raise SystemExit(f"{name} needs a value")
        return sys.argv[i + 1]
    return default


def main() -> None:
    s = load_scenario(REPO / "sample_scenarios" / "teacher.yaml")
    seeds = int(_arg("--seeds", str(s.simulation.seeds)))
    policies = _arg("--policies", ",".join([*s.simulation.policies, "frenzy-srpt", "sia"])).split(",")
    path, fmt = bundled_traces()[s.simulation.trace]
    trace = load_trace(path, fmt, limit=s.simulation.limit_jobs)
    t0 = time.perf_counter()
    results = {p: simulate_seeds(trace, s.cluster, p, seeds=range(seeds), options=SimOptions()) for p in policies}
    wall = time.perf_counter() - t0
    print(f"{s.name}: trace {s.simulation.trace} ({len(trace.jobs)} jobs) on {s.cluster.name} "
          f"({s.cluster.total_gpus} GPUs), seeds {seeds}, {wall:.1f} s\n")
    print(f"{'policy':<14}{'avg JCT h':>10}{'p99 JCT h':>10}{'queue h':>9}{'GPU-h':>9}")
    for p, r in results.items():
        m = r.summary_dict()
        print(f"{p:<14}{m['avg_jct_s'] / HOUR:>10.2f}{m['p99_jct_s'] / HOUR:>10.2f}{m['avg_queue_s'] / HOUR:>9.2f}"
              f"{m['gpu_hours']:>9.1f}")
    print()
    for lines in explain_results(results).values():
        print("\n".join(lines), end="\n\n")
    out = {"seeds": seeds, "jobs": len(trace.jobs), "wall_s": round(wall, 2)}
    out.update({f"{p}_avg_jct_h": round(r.summary_dict()["avg_jct_s"] / HOUR, 3) for p, r in results.items()})
    out.update({f"{p}_p99_jct_h": round(r.summary_dict()["p99_jct_s"] / HOUR, 3) for p, r in results.items()})
    if "frenzy" in results and "fcfs" in results:
        g = jct_gap("frenzy", results["frenzy"], "fcfs", results["fcfs"])
        pc = paired_comparison([x.metrics()["avg_jct_s"] / HOUR for x in results["frenzy"].results],
                               [x.metrics()["avg_jct_s"] / HOUR for x in results["fcfs"].results])
        print(f"frenzy - fcfs per seed: mean {pc.mean_diff:+.3f} h [{pc.ci_low:+.3f}, {pc.ci_high:+.3f}], "
              f"frenzy lower on {pc.wins}/{pc.n} seeds")
        out.update({"frenzy_vs_fcfs_jct_diff_h": round(g.jct_diff_s / HOUR, 3),
                    "frenzy_vs_fcfs_queue_diff_h": round(g.queue_diff_s / HOUR, 3),
                    "frenzy_vs_fcfs_run_diff_h": round(g.run_diff_s / HOUR, 3),
                    "frenzy_running_gpus": round(g.running_gpus, 3), "fcfs_running_gpus": round(g.ref_running_gpus, 3),
                    "frenzy_gpu_hours_per_job": round(g.avg_gpu_hours, 3),
                    "fcfs_gpu_hours_per_job": round(g.ref_avg_gpu_hours, 3),
                    "frenzy_vs_fcfs_seed_wins": pc.wins, "cause": g.cause})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
