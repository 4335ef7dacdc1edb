"""Policies: one contract for every registered policy, plus each policy's own rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.packing import ClusterIndex, check_placement
from frenzy_core.policies import REGISTRY, Preempt, Reject, Start
from frenzy_core.policies.base import JobStatus, PolicyContext, ReadOnlyList, SchedulerView
from frenzy_core.policies.sia import solve_allocation
from frenzy_core.simulate import SimOptions, simulate
from frenzy_core.traces import TraceJob
from frenzy_core.training import TrainingSpec
from frenzy_core.workload import AnalyticEstimator, PlanTable, job_classes, map_trace

CLUSTER = parse_cluster_yaml("""
name: mixed
nodes:
  - {name: a, gpu_type: A100-80GB, num_gpus: 4, count: 2}
  - {name: t, gpu_type: T4, num_gpus: 4, count: 2}
""")
JOBS = [TraceJob(f"j{i}", 0.0, n, 900.0 + 100 * i) for i, n in enumerate([1, 2, 4, 1, 8, 2, 1, 4])]
# the engines each registered policy runs on: the event engine (`decide`, the LLM job model) and the round engine
# (`round_allocator`, --job-model sia-apps); the contract tests below run every policy in every engine it has
EVENT_POLICIES = sorted(k for k, v in REGISTRY.items() if v.event_engine)
ROUND_POLICIES = sorted(k for k, v in REGISTRY.items() if v.round_allocator is not None)


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


@pytest.mark.parametrize("name", EVENT_POLICIES)
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


@pytest.mark.parametrize("name", EVENT_POLICIES)
def test_policy_starts_nothing_on_a_full_cluster(name):
    policy, view = _view(name, free=np.zeros(4, dtype=np.int64))
    assert not [d for d in policy.decide(view) if isinstance(d, Start)]


def test_every_policy_runs_in_some_engine_and_round_only_ones_say_so():
    from frenzy_core.errors import SpecError

    assert set(EVENT_POLICIES) | set(ROUND_POLICIES) == set(REGISTRY)
    for name in set(REGISTRY) - set(EVENT_POLICIES):
        with pytest.raises(SpecError, match="round engine"):
            simulate(JOBS[:1], CLUSTER, name, options=SimOptions(estimator=AnalyticEstimator()))


@pytest.mark.parametrize("name", ROUND_POLICIES)
def test_round_policy_contract(name):
    """Every round allocator (--job-model sia-apps): allocations only for active jobs, on GPUs of the cluster's
    types, no node over-committed in any round (checked here and by the engine), every job done, and the same
    result twice (no seed: deterministic)."""
    from pathlib import Path

    from frenzy_core.cluster import load_cluster
    from frenzy_core.rounds import AppJob, layouts_of, simulate_rounds

    sia64 = load_cluster(Path(__file__).resolve().parents[1] / "sample_clusters" / "sia-64.yaml")
    layouts = {lay.suffix: lay for lay in layouts_of(sia64)}
    jobs = [AppJob(f"bert-{i}", 40.0 * i, "bert", 4, 96) for i in range(3)]
    seen = []
    maker = REGISTRY[name].round_allocator

    class Checked:
        def __init__(self, lays):
            self.inner = maker(lays)
            self.round_s, self.tune_batch = self.inner.round_s, self.inner.tune_batch

        def allocate(self, view):
            out = self.inner.allocate(view)
            assert set(out) <= set(view.active)
            used = {}
            for suffix, nodes in out.values():
                assert suffix in layouts
                for node in nodes:
                    used[(suffix, node)] = used.get((suffix, node), 0) + 1
            assert all(n <= layouts[s].gpus_per_node and 0 <= node < layouts[s].num_nodes
                       for (s, node), n in used.items())
            seen.append(len(out))
            return out

        def stats(self):
            return self.inner.stats()

    class Spy:
        round_allocator = Checked

    REGISTRY["_round_contract"] = Spy
    try:
        a = simulate_rounds(jobs, sia64, "_round_contract")
    finally:
        del REGISTRY["_round_contract"]
    assert a.completed == len(jobs) and max(seen) > 0
    b = simulate_rounds(jobs, sia64, name)
    assert np.array_equal(a.jobs["jct_s"], b.jobs["jct_s"])


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


def _view_with_fast_gpus_busy(end_s: float, queued: int = 0, running: int = 4):
    """frenzy-eft's view: job `running` holds all 8 A100s until end_s (predicted), job `queued` waits; T4s free."""
    policy, view = _view("frenzy-eft")
    index = view.index
    jobs = list(view.jobs)
    for st in jobs:
        st.state = "future"
    hog = jobs[running]
    hog.state = "running"
    hog.plan = policy.ctx.table.best(hog.job.spec, hog.job.training, "A100-80GB", 8)
    hog.run_end_s = end_s
    jobs[queued].state = "queued"
    free = np.array([0, 0, 4, 4], dtype=np.int64)  # nodes a0, a1 (A100) full; t0, t1 (T4) free
    free.flags.writeable = False
    view = SchedulerView(now_s=0.0, index=index, free=free,
                         free_by_type=tuple(int(x) for x in index.free_by_type(free)),
                         queue=ReadOnlyList([queued]), running=ReadOnlyList([running]), jobs=ReadOnlyList(jobs),
                         release_epoch=0)
    return policy, view


def _fastest_capped(policy, view, j, gpu_type):
    """Run time of job j's fastest plan of this type within its fair-share cap (2 jobs, 16 GPUs: cap 8)."""
    st = view.jobs[j]
    plans = policy.candidates(view, st, policy.ranked(st)[0])
    return min(st.job.tokens / p.tokens_per_s for _, _, _, p in plans if p.gpu_type == gpu_type)


def test_frenzy_eft_waits_for_fast_gpus_when_that_finishes_earlier():
    """The g03 case: the A100s free up soon, so waiting for them beats starting now on slow T4s."""
    policy, view = _view_with_fast_gpus_busy(end_s=720.0)
    fast, slow = _fastest_capped(policy, view, 0, "A100-80GB"), _fastest_capped(policy, view, 0, "T4")
    assert 720.0 + fast < slow  # the premise: waiting 12 min for the A100s finishes first
    assert policy.decide(view) == []  # waits (frenzy-share would start on the T4s now)
    assert [d.placement.gpu_type for d in REGISTRY["frenzy-share"](policy.ctx).decide(view)] == ["T4"]


def test_frenzy_eft_starts_now_on_slow_gpus_when_waiting_would_finish_later():
    policy, view = _view_with_fast_gpus_busy(end_s=1e7)
    assert _fastest_capped(policy, view, 0, "T4") < 1e7
    (d,) = policy.decide(view)
    assert isinstance(d, Start) and d.job == 0 and d.placement.gpu_type == "T4"
    assert d.plan.time_to_train_s == pytest.approx(_fastest_capped(policy, view, 0, "T4"))


def test_frenzy_eft_reservation_keeps_later_jobs_off_the_gpus_a_waiting_job_needs():
    """With Options(reserve=True), a later job may not take the T4s an earlier one waits for unless it finishes
    before."""
    # the A100s are held for good (a 1e12 s hog), 4 T4s are free and job 5 frees the other 4 at 3600 s; no share
    # cap. Job 1 (8 x T4: 5701 s, 4 x T4: 10907 s) waits for all 8 T4s; job 0 (4 x T4: 5153 s, 8 x T4: 2694 s)
    # would start now (5153 < 3600 + 2694).
    from frenzy_core.policies.frenzy_eft import Options

    policy, view = _view_with_fast_gpus_busy(end_s=1e12)
    policy = type(policy)(policy.ctx, Options(share_cap=False))
    jobs = list(view.jobs)
    t4_hog = jobs[5]
    t4_hog.state, t4_hog.run_end_s = "running", 3600.0
    t4_hog.plan = policy.ctx.table.best(t4_hog.job.spec, t4_hog.job.training, "T4", 4)
    for j in (0, 1):
        jobs[j].state = "queued"
    free = np.array([0, 0, 0, 4], dtype=np.int64)  # t0 held by job 5 until 3600 s
    free.flags.writeable = False
    index = view.index
    view = SchedulerView(now_s=0.0, index=index, free=free,
                         free_by_type=tuple(int(x) for x in index.free_by_type(free)),
                         queue=ReadOnlyList([1, 0]), running=ReadOnlyList([4, 5]), jobs=ReadOnlyList(jobs),
                         release_epoch=0)
    plain = {d.job: d for d in policy.decide(view)}
    reserving = type(policy)(policy.ctx, Options(share_cap=False, reserve=True))
    held = {d.job: d for d in reserving.decide(view)}
    assert 1 not in plain and 1 not in held  # job 1 waits for all 8 T4s (3600 + 5701 < 10907 s) in both modes
    assert plain[0].placement.gpu_type == "T4"  # without a reservation job 0 takes the free T4s now ...
    assert not held  # ... with one it may not: it would hold them past 3600 s, and no T4 is spare then


# --- sia: no unplaceable preemption, event-driven rounds, a deterministic solver --------------------------------------
def _busy_trace(n: int = 40, seed: int = 3) -> list[TraceJob]:
    """Jobs of 1-8 GPUs arriving faster than they finish on CLUSTER, so Sia's ILP keeps moving some of them."""
    rng = np.random.default_rng(seed)
    return [TraceJob(f"b{i}", float(60 * i + rng.integers(0, 50)), int(rng.choice([1, 2, 4, 8])),
                     float(rng.integers(600, 7200))) for i in range(n)]


def test_sia_preempts_only_jobs_whose_new_allocation_is_started_in_the_same_decision(monkeypatch):
    """The ILP ignores fragmentation, so some of its moves cannot be placed; those jobs must keep running."""
    from frenzy_core.policies.sia import SiaPolicy

    seen = {"preempts": 0}
    decide = SiaPolicy.decide

    def checked(self, view):
        out = decide(self, view)
        starts = {d.job for d in out if isinstance(d, Start)}
        for d in out:
            if isinstance(d, Preempt):
                seen["preempts"] += 1
                assert d.job in starts, f"job {d.job} preempted without a placed new allocation"
        return out

    monkeypatch.setattr(SiaPolicy, "decide", checked)
    r = simulate(_busy_trace(), CLUSTER, "sia", options=SimOptions(estimator=AnalyticEstimator()))
    assert seen["preempts"] > 0 and r.completed == 40
    assert r.policy_stats["moves_kept_unplaceable"] > 0  # the rule was exercised: some moves were refused
    assert r.metrics()["restarts"] == seen["preempts"]  # every preemption was followed by a start


def test_sia_event_driven_rounds_give_the_every_round_result_with_fewer_solves():
    """Sia's decision is a function of the job set, the allocations and the free GPUs; when none changed since
    the last round, solving again gives the same answer, so skipping those rounds cannot change the schedule."""
    est = AnalyticEstimator()
    every = simulate(_busy_trace(30), CLUSTER, "sia",
                     options=SimOptions(estimator=est, sia_every_round=True, sia_round_s=240.0))
    event = simulate(_busy_trace(30), CLUSTER, "sia", options=SimOptions(estimator=est, sia_round_s=240.0))
    assert event.metrics()["restarts"] > 0
    pd.testing.assert_frame_equal(every.jobs_frame(), event.jobs_frame())
    assert event.policy_stats["ilp_solves"] < every.policy_stats["ilp_solves"] / 2


def test_sia_solver_has_a_node_and_gap_limit_and_no_time_limit(monkeypatch):
    import frenzy_core.policies.sia as sia

    got = {}
    real = sia.milp

    def spy(*a, options=None, **k):
        got.update(options)
        return real(*a, options=options, **k)

    monkeypatch.setattr(sia, "milp", spy)
    simulate(JOBS, CLUSTER, "sia", options=SimOptions(estimator=AnalyticEstimator(), sia_node_limit=77))
    assert "time_limit" not in got and got["node_limit"] == 77 and got["mip_rel_gap"] == SimOptions().options_for("sia").mip_gap


@pytest.mark.parametrize("name", EVENT_POLICIES)
def test_every_policy_gives_identical_results_for_the_same_seed(name):
    opts = SimOptions(estimator=AnalyticEstimator())
    # 16 jobs: busy enough that every preempting policy preempts (13-56 restarts), at a fifth of the time at 24
    a = simulate(_busy_trace(16), CLUSTER, name, seed=5, options=opts)
    b = simulate(_busy_trace(16), CLUSTER, name, seed=5, options=opts)
    pd.testing.assert_frame_equal(a.jobs_frame(), b.jobs_frame())
    assert a.policy_stats.keys() == b.policy_stats.keys()


def test_sia_grouped_ilp_has_the_per_job_ilps_optimum():
    """Jobs with equal utility rows are interchangeable: solving once per group (integer counts) must reach the
    same objective as one binary row per job, on random instances with many duplicate rows."""
    from frenzy_core.policies.sia import solve_counts

    rng = np.random.default_rng(0)
    options = [(0, 1), (0, 2), (0, 4), (1, 1), (1, 2), (1, 4), (1, 8)]
    for _ in range(8):
        base = rng.random((4, 7)) * (rng.random((4, 7)) > 0.3)
        util = base[rng.integers(0, 4, size=20)]
        per_job = solve_allocation(util, options, [6, 10])
        want = sum(util[i, o] for i, o in enumerate(per_job) if o >= 0)
        uniq, inv = np.unique(util, axis=0, return_inverse=True)
        y = solve_counts(uniq, np.bincount(inv.ravel()), options, [6, 10])
        assert (uniq * y).sum() == pytest.approx(want, rel=1e-9)
        assert (y.sum(axis=1) <= np.bincount(inv.ravel())).all()
        assert sum(y[:, o].sum() * s for o, (t, s) in enumerate(options) if t == 1) <= 10


# --- frenzy-srpt / frenzy-las: who preempts whom, and when -----------------------------------------------------------
ONE_NODE = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 4}]")


def _long_then_short(short_arrival_s: float, policy: str):
    """L (4 GPUs, 10 h on them) arrives alone at 0 and takes the node; S (1 GPU, 10 min) arrives later."""
    jobs = [TraceJob("L", 0.0, 4, 36000.0), TraceJob("S", short_arrival_s, 1, 600.0)]
    r = simulate(jobs, ONE_NODE, policy, options=SimOptions(estimator=AnalyticEstimator()))
    assert r.completed == 2
    return {k: r.jobs[k] for k in ("start_s", "restarts", "finish_s")}


def test_frenzy_srpt_preempts_a_long_job_for_a_short_one_once_its_guard_has_passed():
    got = _long_then_short(1000.0, "frenzy-srpt")  # L has run 1000 s >= the 600 s guard: S starts at once
    assert got["start_s"][1] == 1000.0 and list(got["restarts"]) == [1, 0]
    got = _long_then_short(300.0, "frenzy-srpt")  # L has run 300 s: S waits for the guard (a wake-up at 600 s)
    assert got["start_s"][1] == 600.0 and list(got["restarts"]) == [1, 0]
    assert got["finish_s"][1] < got["finish_s"][0]


def test_frenzy_las_preempts_only_across_queues():
    """L attains 1 GPU-hour (4 GPUs x 900 s) at 900 s. S arriving at 700 s is in the same (top) queue as L, so it
    waits for L's demotion at 900 s; arriving at 1000 s it preempts L at once. No size knowledge is used."""
    got = _long_then_short(700.0, "frenzy-las")
    assert got["start_s"][1] == pytest.approx(900.0) and list(got["restarts"]) == [1, 0]
    got = _long_then_short(1000.0, "frenzy-las")
    assert got["start_s"][1] == 1000.0 and list(got["restarts"]) == [1, 0]


def test_preemptive_frenzy_grows_a_job_when_the_others_finish():
    """Two jobs share the node (2 + 2 GPUs under the fair-share cap); when the short one ends, the long one, past its
    guard, is re-planned onto all 4 GPUs (one restart) because that shortens its remaining time by > 25%."""
    jobs = [TraceJob("A", 0.0, 2, 20000.0), TraceJob("B", 0.0, 2, 1200.0)]
    for policy in ("frenzy-srpt", "frenzy-las"):
        r = simulate(jobs, ONE_NODE, policy, options=SimOptions(estimator=AnalyticEstimator()))
        assert list(r.jobs["restarts"]) == [1, 0] and r.jobs["num_gpus"][0] == 4, policy


def test_frenzy_srpt_decides_on_the_believed_size_not_the_true_one():
    """The same L-then-S case as above, but S is believed 1000x longer than it is (a size error): S's believed
    remaining service (1000 x 10 min on 1 GPU = 167 GPU-h) now exceeds L's (10 h on 4 GPUs less 1000 s = 38.9 GPU-h),
    so S no longer preempts L and waits for it; the run still trains S's true budget."""
    from dataclasses import replace

    jobs = [TraceJob("L", 0.0, 4, 36000.0), TraceJob("S", 1000.0, 1, 600.0)]
    opts = SimOptions(estimator=AnalyticEstimator())
    w = map_trace(jobs, ONE_NODE, 0, estimator=opts.estimator)
    s = w.jobs[1]
    believed = replace(w, jobs=(w.jobs[0], replace(s, believed_tokens=1000.0 * s.tokens)))
    exact = simulate(w, ONE_NODE, "frenzy-srpt", options=opts)
    noisy = simulate(believed, ONE_NODE, "frenzy-srpt", options=opts)
    assert exact.jobs["start_s"][1] == 1000.0 and list(exact.jobs["restarts"]) == [1, 0]
    assert list(noisy.jobs["restarts"]) == [0, 0]
    assert noisy.jobs["start_s"][1] == pytest.approx(noisy.jobs["finish_s"][0])  # S waited for L to end
    assert noisy.jobs["tokens"][1] == s.tokens  # trained the true budget


def test_believed_end_of_a_run_scales_its_training_time_by_believed_over_true_tokens_left():
    from frenzy_core.workload import LLMJob

    job = LLMJob("x", 0.0, "gpt2", TrainingSpec(), 1000.0, 1, 60.0, "T4", believed_tokens=1500.0)
    st = JobStatus(0, job, 0)
    st.done_fraction, st.run_start_s, st.startup_s, st.run_end_s = 0.5, 100.0, 20.0, 620.0
    # 500 s of training for the true 500 tokens left; believed left 1500 - 500 = 1000 tokens: 1000 s, ends at 1120 s
    assert st.believed_left_share(0.5) == pytest.approx(1.0)
    assert st.believed_end_s() == pytest.approx(100.0 + 20.0 + 1000.0)
    # an under-estimate: believed 400 tokens, 500 already trained -> nothing believed left, the run "ends" now
    st.job = LLMJob("x", 0.0, "gpt2", TrainingSpec(), 1000.0, 1, 60.0, "T4", believed_tokens=400.0)
    assert st.believed_left_share(0.5) == 0.0 and st.believed_end_s() == pytest.approx(120.0)
    # no size noise: exactly the simulator's own end
    st.job = LLMJob("x", 0.0, "gpt2", TrainingSpec(), 1000.0, 1, 60.0, "T4")
    assert st.believed_end_s() == 620.0 and st.believed_left_share(0.25) == 0.75
