"""Policies: one contract for every registered policy, plus each policy's own rule."""

from __future__ import annotations

import numpy as np
import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.packing import ClusterIndex, check_placement
from frenzy_core.policies import REGISTRY, Preempt, Reject, Start
from frenzy_core.policies.base import JobStatus, PolicyContext, ReadOnlyList, SchedulerView
from frenzy_core.policies.sia import solve_allocation
from frenzy_core.simulate import SimOptions, simulate
from frenzy_core.traces import TraceJob
from frenzy_core.workload import AnalyticEstimator, PlanTable, job_classes, map_trace

CLUSTER = parse_cluster_yaml("""
name: mixed
nodes:
  - {name: a, gpu_type: A100-80GB, num_gpus: 4, count: 2}
  - {name: t, gpu_type: T4, num_gpus: 4, count: 2}
""")
JOBS = [TraceJob(f"j{i}", 0.0, n, 900.0 + 100 * i) for i, n in enumerate([1, 2, 4, 1, 8, 2, 1, 4])]


def _view(policy_name: str, free=None):
    est = AnalyticEstimator()
    w = map_trace(JOBS, CLUSTER, seed=0, estimator=est)
    index = ClusterIndex.from_cluster(CLUSTER)
    ctx = PolicyContext(cluster=CLUSTER, index=index, workload=w, table=PlanTable(est, CLUSTER), estimator=est,
                        options=SimOptions(estimator=est))
    classes = job_classes(w.jobs)
    jobs = [JobStatus(i, j, classes[(j.model, j.training)]) for i, j in enumerate(w.jobs)]
    for st in jobs:
        st.state = "queued"
    free = index.node_gpus.copy() if free is None else np.asarray(free)
    free.flags.writeable = False
    view = SchedulerView(now_s=0.0, index=index, free=free, free_by_type=tuple(int(x) for x in index.free_by_type(free)),
                         queue=ReadOnlyList(list(range(len(jobs)))), running=ReadOnlyList([]), jobs=ReadOnlyList(jobs),
                         release_epoch=0)
    return REGISTRY[policy_name](ctx), view


def _snapshot(view):
    return [(s.state, s.requested_gpus, s.done_fraction, s.plan, s.placement) for s in view.jobs], view.free.copy()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_policy_contract(name):
    """Every policy: reads the view without changing it; returns Start/Preempt/Reject for jobs it may touch;
    its starts together never take more GPUs than are free on any node; each placement matches its plan."""
    policy, view = _view(name)
    before = _snapshot(view)
    decisions = policy.decide(view)
    after = _snapshot(view)
    assert before[0] == after[0] and (before[1] == after[1]).all()
    assert decisions, "an empty cluster with a queue must start something"
    free = view.free.copy()
    started = set()
    for d in decisions:
        assert isinstance(d, Start | Preempt | Reject)
        if isinstance(d, Start):
            assert d.job in set(view.queue) and d.job not in started
            started.add(d.job)
            assert check_placement(view.index, free, d.plan, d.placement) is None
            for node, n in d.placement.nodes:
                free[node] -= n
            job = view.jobs[d.job].job
            assert d.plan.time_to_train_s == pytest.approx(job.tokens / d.plan.tokens_per_s)
    assert (free >= 0).all()
    # and a whole run under it ends with every job done
    r = simulate(JOBS, CLUSTER, name, options=SimOptions(estimator=AnalyticEstimator()))
    assert r.completed == len(JOBS)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_policy_starts_nothing_on_a_full_cluster(name):
    policy, view = _view(name, free=np.zeros(4, dtype=np.int64))
    assert not [d for d in policy.decide(view) if isinstance(d, Start)]


def test_fcfs_uses_the_users_count_first_fit_by_type():
    policy, view = _view("fcfs")
    starts = [d for d in policy.decide(view) if isinstance(d, Start)]
    for d in starts:
        assert d.plan.num_gpus == view.jobs[d.job].job.trace_gpus
    # A100 comes first in the cluster: j0 (1 GPU) lands on the first A100 node's first GPU
    assert starts[0].job == 0 and starts[0].placement.gpu_type == "A100-80GB" and starts[0].placement.nodes == ((0, 1),)


def test_frenzy_ignores_the_users_count_and_never_plans_out_of_memory():
    policy, view = _view("frenzy")
    starts = [d for d in policy.decide(view) if isinstance(d, Start)]
    assert all(d.plan.memory_bytes <= d.plan.gpu_memory_bytes * 0.9 for d in starts)
    assert any(d.plan.num_gpus != view.jobs[d.job].job.trace_gpus for d in starts)


def test_sia_ilp_maximises_total_normalised_throughput_under_capacity():
    # two jobs, one type with 3 GPUs; options 1 GPU (u=0.6) or 2 GPUs (u=1): best total is 1 + 0.6 = 1.6
    choice = solve_allocation(np.array([[0.6, 1.0], [0.6, 1.0]]), [(0, 1), (0, 2)], [3])
    assert sorted(choice.tolist()) == [0, 1]
    # an option with zero utility (does not fit) is never chosen even with spare capacity
    assert solve_allocation(np.array([[0.0, 0.0]]), [(0, 1), (0, 2)], [8]).tolist() == [-1]
    # capacity per type is respected
    choice = solve_allocation(np.ones((5, 2)), [(0, 1), (1, 1)], [2, 1])
    assert (choice == 0).sum() <= 2 and (choice == 1).sum() <= 1 and (choice >= 0).sum() == 3


def test_sia_times_every_solve():
    r = simulate(JOBS, CLUSTER, "sia", options=SimOptions(estimator=AnalyticEstimator()))
    assert r.policy_stats["ilp_solves"] >= 1 and r.policy_stats["ilp_solve_ms_mean"] > 0


def test_frenzy_share_caps_each_job_at_its_fair_share_never_below_its_smallest_plan():
    policy, view = _view("frenzy-share")
    starts = [d for d in policy.decide(view) if isinstance(d, Start)]
    assert starts
    cap_by_type = dict(zip(view.index.type_names, view.index.capacity_by_type().tolist(), strict=True))
    active = len(view.running) + len(view.queue)
    for d in starts:
        plans, mins = policy.ranked(view.jobs[d.job])
        usable = sum(cap_by_type[t] for t, m in zip(view.index.type_names, mins, strict=True) if m < 1 << 60)
        assert d.plan.num_gpus <= max(usable / active, min(mins))
    # alone on an empty cluster, a job takes the fastest plan (the time ranking, no cap binds)
    policy, view = _view("frenzy-share")
    one = SchedulerView(now_s=0.0, index=view.index, free=view.free, free_by_type=view.free_by_type,
                        queue=ReadOnlyList([4]), running=ReadOnlyList([]), jobs=view.jobs, release_epoch=0)
    (d,) = policy.decide(one)
    fastest = min(p.time_to_train_s for _, _, _, p in policy.ranked(view.jobs[4])[0])  # for 1e9 tokens
    assert d.plan.time_to_train_s == pytest.approx(fastest * view.jobs[4].job.tokens / 1e9)
