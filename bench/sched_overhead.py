"""Scheduling overhead per decision: HAS (frenzy) vs the Sia-like ILP, on 64 to 2,048 GPUs, 50 to 1,000 queued jobs.

One decision = one policy call that considers the whole queue on an empty cluster: frenzy walks every queued job
(backfill window = queue length) and places what fits with HAS; sia builds and solves its ILP over every queued job
(sia_max_jobs = queue length) and places the result. Each policy is called once to warm its per-run caches (plan
ranking, throughput matrix; both are per-class precomputation, not per-decision work), then timed over `--reps`
calls. Clusters are 8-GPU nodes in a fixed A100-80GB / A100-40GB / V100-32GB / T4 mix; queues are Philly-like
synthetic traces. Sizes sampled: 64 GPUs x 50 jobs, 256 x 200, 1,024 x 1,000, 2,048 x 1,000 (the ILP grows with
jobs x options; HiGHS time limit 20 s per solve, so the largest cases are capped, never longer).
Last line: JSON with `ratio_ilp_over_has` per cluster size (target: >= 100 everywhere).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from frenzy_core.cluster import parse_cluster_yaml  # noqa: E402
from frenzy_core.packing import ClusterIndex  # noqa: E402
from frenzy_core.policies import REGISTRY  # noqa: E402
from frenzy_core.policies.base import JobStatus, PolicyContext, ReadOnlyList, SchedulerView  # noqa: E402
from frenzy_core.simulate import SimOptions  # noqa: E402
from frenzy_core.traces import synthetic_trace  # noqa: E402
from frenzy_core.workload import DefaultEstimator, PlanTable, job_classes, map_trace  # noqa: E402

CASES = ((64, 50), (256, 200), (1024, 1000), (2048, 1000))
MIX = (("A100-80GB", 0.25), ("A100-40GB", 0.25), ("V100-32GB", 0.25), ("T4", 0.25))


def cluster_of(gpus: int):
    nodes = gpus // 8
    lines = [f"  - {{name: {t.lower()}, gpu_type: {t}, num_gpus: 8, count: {max(1, round(nodes * share))}}}"
             for t, share in MIX]
    return parse_cluster_yaml(f"name: bench-{gpus}\nnodes:\n" + "\n".join(lines))


def view_and_policy(name: str, cluster, workload, est, queue: int, epoch: int):
    opts = SimOptions(backfill_window=queue, sia_max_jobs=queue, sia_time_limit_s=20.0, estimator=est)
    index = ClusterIndex.from_cluster(cluster)
    ctx = PolicyContext(cluster=cluster, index=index, workload=workload, table=PlanTable(est, cluster),
                        estimator=est, options=opts)
    classes = job_classes(workload.jobs)
    jobs = [JobStatus(i, j, classes[(j.model, j.training)]) for i, j in enumerate(workload.jobs)]
    for s in jobs:
        s.state = "queued"
    free = index.node_gpus.copy()
    free.flags.writeable = False

    def make_view(e):
        return SchedulerView(now_s=0.0, index=index, free=free,
                             free_by_type=tuple(int(x) for x in index.free_by_type(free)),
                             queue=ReadOnlyList(list(range(len(jobs)))), running=ReadOnlyList([]),
                             jobs=ReadOnlyList(jobs), release_epoch=e)
    return REGISTRY[name](ctx), make_view


def time_decision(name, cluster, workload, est, queue, reps):
    policy, make_view = view_and_policy(name, cluster, workload, est, queue, 0)
    policy.decide(make_view(0))  # warm the per-class caches
    times = []
    for r in range(reps):
        t0 = time.perf_counter()
        policy.decide(make_view(r + 1))  # a new release epoch: frenzy re-examines every job
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    est = DefaultEstimator()
    ratios, rows = {}, []
    for gpus, queue in CASES:
        cluster = cluster_of(gpus)
        trace = synthetic_trace(queue, 1.0, gpus, seed=gpus)
        workload = map_trace(trace, cluster, seed=0, estimator=est)
        has = time_decision("frenzy", cluster, workload, est, queue, reps=5)
        ilp = time_decision("sia", cluster, workload, est, queue, reps=1 if queue >= 1000 else 3)
        ratios[str(gpus)] = round(ilp / has, 1)
        rows.append({"gpus": gpus, "queued_jobs": queue, "has_ms": round(has * 1e3, 3), "ilp_ms": round(ilp * 1e3, 1)})
        print(f"{gpus:>5} GPUs, {queue:>5} queued: HAS {has * 1e3:8.3f} ms, ILP {ilp * 1e3:9.1f} ms, "
              f"ratio {ilp / has:8.1f}", file=sys.stderr)
    print(json.dumps({"cases": rows, "ratio_ilp_over_has": ratios}))


if __name__ == "__main__":
    main()
