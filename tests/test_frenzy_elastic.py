"""frenzy-elastic (frenzy_core/policies/frenzy_elastic.py) on both engines. On the sia-apps job model: the
grow/shrink/preempt invariants of a whole run, memory fit of every allocation, the fitted goodput model against known
parameters and hand-worked profile rows, and the knowledge labels. On the event engine (the LLM job model): a small
run's invariants (every job done, no type over-committed, GPU-seconds within the cluster's, every start fits in
memory with the safety margin), growth when the cluster empties, shrink/preemption when a job arrives, the thrash
guard, the floor, and determinism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frenzy_core.cluster import load_cluster, parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.policies import REGISTRY, Preempt, Start
from frenzy_core.policies.frenzy_elastic import (
    FrenzyElasticOptions,
    FrenzyElasticRounds,
    configs_of,
    fits_in_memory,
    place_packed,
)
from frenzy_core.rounds import AppJob, AppJobState, layouts_of, simulate_rounds
from frenzy_core.sia_apps import GoodputModel, PerfParams, fit_perf_params, load_app
from frenzy_core.simulate import SimOptions, simulate
from frenzy_core.traces import TraceJob
from frenzy_core.workload import AnalyticEstimator

ROOT = Path(__file__).resolve().parents[1]
SIA64 = load_cluster(ROOT / "sample_clusters" / "sia-64.yaml")
LAYOUTS = layouts_of(SIA64)
# two GPU types, 16 GPUs: small enough that SMALL's jobs compete for GPUs (they grow into each other, get shrunk,
# preempted and moved)
SMALL_CLUSTER = parse_cluster_yaml("""
name: sia-16
nodes:
  - {name: aws, gpu_type: T4, num_gpus: 4, count: 2}
  - {name: dgx, gpu_type: A100-40GB, num_gpus: 8, count: 1}
""")
SMALL_LAYOUTS = layouts_of(SMALL_CLUSTER)
# a few short jobs arriving over 10 minutes: bert trains 2 epochs, cifar10 100 short ones (the model is refitted
# as each new configuration is observed, so the run grows, shrinks and moves jobs)
SMALL = ([AppJob(f"bert-{i}", 120.0 * i, "bert", 4, 96) for i in range(4)]
         + [AppJob(f"cifar10-{i}", 60.0 + 300.0 * i, "cifar10", 2, 256) for i in range(2)])


class Recorder:
    """Wraps the allocator of one run and records every round, as copies (the job records change as the run goes):
    per active job (progress, epoch, restarts, restart delay left, GPU-seconds charged), the allocation held and the
    one returned."""

    def __init__(self, layouts, **options):
        self.inner = FrenzyElasticRounds(layouts, **options)
        self.round_s, self.tune_batch = self.inner.round_s, self.inner.tune_batch
        self.rounds = []

    def allocate(self, view):
        out = self.inner.allocate(view)
        self.rounds.append((view.now_s, {j: (view.jobs[j].progress, view.jobs[j].epoch, view.jobs[j].restarts,
                                             view.jobs[j].restart_left_s, view.jobs[j].attained_gpu_s)
                                         for j in view.active},
                            dict(view.current), dict(out)))
        return out

    def stats(self):
        return self.inner.stats()


@pytest.fixture(scope="module")
def recorded():
    """One run of SMALL on SMALL_CLUSTER (floor 0: jobs take every GPU that helps) through a recording
    allocator, with every batch the engine picked (type, placement, atomic batch, accumulation steps) recorded as it
    was picked."""
    rec, picks = {}, []

    class Spy:
        @staticmethod
        def round_allocator(layouts, **options):
            rec["r"] = Recorder(layouts, **options)
            return rec["r"]

    mp = pytest.MonkeyPatch()
    pick = AppJobState._pick_batch

    def recording_pick(self):
        pick(self)
        picks.append((self.app.name, self.suffix, self.placement, self.atomic_bsz, self.accum_steps))

    mp.setitem(REGISTRY, "_spy", Spy)
    mp.setattr(AppJobState, "_pick_batch", recording_pick)
    try:
        result = simulate_rounds(SMALL, SMALL_CLUSTER, "_spy", {"efficiency_floor": 0.0})
    finally:
        mp.undo()
    return result, rec["r"], picks


def test_every_job_completes_and_the_run_is_deterministic():
    a, b = simulate_rounds(SMALL, SIA64, "frenzy-elastic"), simulate_rounds(SMALL, SIA64, "frenzy-elastic")
    assert a.completed == len(SMALL)
    assert np.array_equal(a.jobs["jct_s"], b.jobs["jct_s"]) and np.array_equal(a.jobs["restarts"],
                                                                                b.jobs["restarts"])
    assert a.jobs["gpu_hours"].tolist() == b.jobs["gpu_hours"].tolist()


def test_no_gpu_is_over_committed_in_any_round(recorded):
    _, rec, _ = recorded
    for _, _, _, out in rec.rounds:
        for lay in SMALL_LAYOUTS:
            used = np.zeros(lay.num_nodes, dtype=int)
            for suffix, nodes in out.values():
                if suffix == lay.suffix:
                    np.add.at(used, list(nodes), 1)
            assert (used <= lay.gpus_per_node).all()


def test_every_allocation_is_one_of_sias_shapes_and_fits_in_memory(recorded):
    from frenzy_core.rounds import placement_of

    _, rec, _ = recorded
    shapes = {(c.suffix, c.shape): c for c in configs_of(SMALL_LAYOUTS)}
    seen = 0
    for _, _, _, out in rec.rounds:
        for j, (suffix, nodes) in out.items():
            shape = placement_of(sorted(nodes))
            assert (suffix, shape) in shapes, (suffix, shape)
            assert fits_in_memory(load_app(SMALL[j].application), shapes[(suffix, shape)], None)
            seen += 1
    assert seen


def test_every_batch_the_jobs_ran_is_inside_the_measured_profile(recorded):
    """Memory fit of what actually ran: each per-GPU batch the engine picked is within the largest batch measured
    for that placement and for that replica count (the profiles stop where GPU memory does), the total batch within
    the validated range, and the profile has a step time there."""
    _, _, picks = recorded
    assert picks
    for name, suffix, placement, atomic, accum in picks:
        app = load_app(name)
        prof = app.profiles[suffix]
        reps = sum(placement)
        assert prof.min_local_bsz <= atomic <= prof.max_local_bsz_for(placement)
        assert atomic <= prof.max_local_bsz_by_replicas.get(reps, atomic)
        assert reps * atomic * (accum + 1) <= app.max_batch_size
        assert prof.step_time(placement, atomic) is not None


def test_it_grows_and_shrinks_preempts_or_moves_jobs(recorded):
    _, rec, _ = recorded
    grew = other = 0
    for _, _, cur, out in rec.rounds:
        for j, (s0, n0) in cur.items():
            s1, n1 = out.get(j, (None, ()))
            grew += len(n1) > len(n0) > 0 and s1 == s0
            other += s0 is not None and (s1 != s0 or len(n1) < len(n0))  # shrunk, preempted or moved to a type
    assert grew > 0 and other > 0


def test_preemption_and_moves_never_lose_progress_beyond_the_restart(recorded):
    """Progress and epochs never go back; a job holding no GPUs for a whole round keeps exactly what it had; and a
    job holding GPUs for a whole round without progressing only happens while it pays a restart: at most
    ceil(restart_s / round_s) such rounds per (re)start, and each such round charges it GPU-time."""
    result, rec, _ = recorded
    round_s = rec.round_s
    idle = {}
    for (_, before, _, out), (_, after, _, _) in zip(rec.rounds, rec.rounds[1:], strict=False):
        for j, (progress, epoch, _, _, gpu_s) in before.items():
            if j not in after:  # finished during the round
                continue
            p1, e1, _, _, gpu_s1 = after[j]
            assert p1 >= progress - 1e-9 and e1 >= epoch
            if j not in out:
                assert (p1, e1, gpu_s1) == (progress, epoch, gpu_s)
            elif p1 == progress:
                assert gpu_s1 > gpu_s
                idle[j] = idle.get(j, 0) + 1
    df = result.jobs_frame()
    for j, n in idle.items():
        app = load_app(SMALL[j].application)
        assert n <= (df.restarts[j] + 1) * math.ceil(app.restart_s / round_s)
    assert result.completed == len(SMALL)


def test_a_job_paying_its_restart_keeps_its_allocation(recorded):
    _, rec, _ = recorded
    for _, before, cur, out in rec.rounds:
        for j, (_, _, _, restart_left, _) in before.items():
            if restart_left > 0 and cur.get(j, (None, ()))[0] is not None:
                assert out[j][0] == cur[j][0] and len(out[j][1]) == len(cur[j][1])


def test_a_higher_floor_spends_fewer_gpu_hours():
    lo = simulate_rounds(SMALL, SIA64, "frenzy-elastic", {"efficiency_floor": 0.0})
    hi = simulate_rounds(SMALL, SIA64, "frenzy-elastic", {"efficiency_floor": 0.5})
    assert hi.completed == lo.completed == len(SMALL)
    assert hi.jobs["gpu_hours"].sum() < lo.jobs["gpu_hours"].sum()


def test_fit_recovers_known_parameters_from_three_points():
    """Three single-node points generated from known Pollux parameters (gamma 1: compute and all-reduce add up):
    accumulation time alpha_c + beta_c b at b = 32, 64, 128, no all-reduce on one replica, alpha_r on two, alpha_r
    + 2 beta_r on four. The compute parameters are recovered exactly; the two network points cannot separate
    alpha_r, beta_r and the overlap gamma (three unknowns), so the fit recovers their effect: the step times of the
    three points, and the throughput on 8 GPUs it never saw within 6%."""
    true = PerfParams(alpha_c=0.02, beta_c=0.001, alpha_n=1e-8, beta_n=1e-8, alpha_r=0.05, beta_r=0.01, gamma=1.0)
    nodes, reps, bsz = np.array([1, 1, 1]), np.array([1, 2, 4]), np.array([32, 64, 128])
    accum = true.accum_time(bsz)  # 0.052, 0.084, 0.148 s
    step = true.step_time(nodes, reps, bsz)  # 0.052, 0.134, 0.218 s (one replica: no all-reduce)
    assert step.tolist() == pytest.approx([0.052, 0.134, 0.218], abs=1e-6)
    fit = fit_perf_params(nodes, reps, bsz, accum, step)
    assert fit.alpha_c == pytest.approx(0.02, rel=1e-3) and fit.beta_c == pytest.approx(0.001, rel=1e-3)
    assert fit.step_time(nodes, reps, bsz).tolist() == pytest.approx(step.tolist(), rel=0.01)
    assert fit.alpha_n >= 1.1 * fit.alpha_r * (1 - 1e-9)  # Pollux's prior with no multi-node point
    want = 8 * 64 * 2 / (0.084 + (0.084 + 0.05 + 6 * 0.01))  # one accumulation step + the 8-GPU optimizer step
    assert float(true.throughput(1, 8, 64, 1)) == pytest.approx(want)
    assert float(fit.throughput(1, 8, 64, 1)) == pytest.approx(want, rel=0.06)


def test_a_jobs_fitted_model_reproduces_the_profile_rows_it_ran():
    """cifar10 run for a round each on 1, 2 and 4 T4s: the model fitted to those three observed steps gives back
    their step times (placements-aws.csv rows, read through the profile) within 10% (an RMSLE fit of 7
    parameters, two pinned, to a handful of points)."""
    app = load_app("cifar10")
    st = AppJobState(0, AppJob("c", 0.0, "cifar10", 4, 512), app, tune_batch=True)
    for n in (1, 2, 4):
        st.move("aws", (n,), 60.0 * n)
        st.advance(60.0 * n, 120.0)
    obs = st.observed["aws"]
    assert len(obs) >= 3
    # rows of frenzy_core/data/sia_profiles/cifar10/placements-aws.csv (placement,local_bsz,step_time), by hand:
    # 1 GPU at 128 lies between rows (1, 91, 0.0759135) and (1, 129, 0.1038505); 2 GPUs at 64 is row (2, 64,
    # 0.0654734); 4 GPUs at 49 lies between (4, 45, 0.0626768) and (4, 64, 0.0684148)
    by_hand = {(1, 1, 128): 0.07591350078582763 + 37 / 38 * (0.10385050773620605 - 0.07591350078582763),
               (1, 2, 64): 0.06547343730926514,
               (1, 4, 49): 0.06267681121826171 + 4 / 19 * (0.06841483116149902 - 0.06267681121826171)}
    assert set(by_hand) <= set(obs)
    for key, step_s in by_hand.items():
        assert obs[key][0] == pytest.approx(step_s, rel=1e-9)
    perf = st.perf_params("aws")
    for (nodes, reps, atomic), (step_s, _) in obs.items():
        assert float(perf.step_time(nodes, reps, atomic)) == pytest.approx(step_s, rel=0.10)
    # the goodput model is that throughput x Pollux's efficiency at the gradient noise last measured
    model = st.goodput_model("aws")
    sqr, var = st.grad
    scale = 1024 / app.init_batch_size
    assert float(model.efficiency(1024)) == pytest.approx((var + sqr) / (var / scale + sqr) / scale)


def test_goodput_model_efficiency_by_hand():
    # grad_sqr 1, grad_var 3, batch twice the initial one: gain (3 + 1) / (3 / 2 + 1) = 1.6, efficiency 0.8
    m = GoodputModel(PerfParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.0), 1.0, 3.0, 128)
    assert float(m.efficiency(256)) == pytest.approx(0.8)


def test_a_job_never_run_is_offered_one_gpu_and_an_unfit_configuration_never():
    pol = FrenzyElasticRounds(LAYOUTS)
    st = AppJobState(0, AppJob("b", 0.0, "bert", 4, 96), load_app("bert"), tune_batch=True)
    g = pol.goodputs(st)
    assert {pol.configs[k].gpus for k in np.flatnonzero(g > 0)} == {1}
    # deepspeech2 at the user's batch 20 on 24 GPUs would be under one sample per GPU: not offered without
    # batch adaptation
    ds = load_app("deepspeech2")
    big = next(c for c in pol.configs if c.gpus == 24)
    assert not fits_in_memory(ds, big, 20)


def test_packing_keeps_powers_of_two_whole_on_a_node():
    assert place_packed(4, 2, [(7, 1), (8, 4), (9, 2)]) == {8: (0, 0, 0, 0), 9: (1, 1), 7: (1,)}
    assert place_packed(8, 2, [(1, 2), (2, 4), (3, 2), (4, 8)]) == {4: (0,) * 8, 2: (1,) * 4, 1: (1, 1),
                                                                    3: (1, 1)}
    assert place_packed(4, 1, [(1, 4), (2, 1)]) is None


def test_the_oracle_is_labelled_and_the_default_is_not():
    assert "oracle" not in FrenzyElasticRounds(LAYOUTS).note
    assert "fitted" in FrenzyElasticRounds(LAYOUTS).note
    assert "(oracle)" in FrenzyElasticRounds(LAYOUTS, oracle=True).note
    r = simulate_rounds(SMALL[:1], SIA64, "frenzy-elastic", {"oracle": True})
    assert any("(oracle)" in n for n in r.notes) and r.completed == 1


def test_options_are_checked_and_reach_the_allocator():
    with pytest.raises(SpecError, match="efficiency_floor"):
        FrenzyElasticOptions(efficiency_floor=1.5)
    assert REGISTRY["frenzy-elastic-srpt"].round_allocator(LAYOUTS).options.srpt
    assert not REGISTRY["frenzy-elastic"].round_allocator(LAYOUTS, efficiency_floor=0.2).options.srpt
    off = REGISTRY["frenzy-elastic"].round_allocator(LAYOUTS, adapt_batch=False)
    assert off.tune_batch is False


def test_without_batch_adaptation_jobs_run_the_users_batch():
    jobs = [AppJob("bert-0", 0.0, "bert", 4, 96)]
    r = simulate_rounds(jobs, SIA64, "frenzy-elastic", {"adapt_batch": False})
    assert r.completed == 1


# --- the event engine (the LLM job model, `simulate.simulate`) --------------------------------------------------------
MIXED = parse_cluster_yaml("""
name: mixed
nodes:
  - {name: a, gpu_type: A100-80GB, num_gpus: 4, count: 2}
  - {name: t, gpu_type: T4, num_gpus: 4, count: 2}
""")
ONE_NODE = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 4}]")


def _busy(n: int = 16, seed: int = 3) -> list[TraceJob]:
    """Jobs of 1-8 GPUs arriving faster than they finish on MIXED, so jobs wait, grow, shrink and are preempted."""
    rng = np.random.default_rng(seed)
    return [TraceJob(f"b{i}", float(90 * i + rng.integers(0, 50)), int(rng.choice([1, 2, 4, 8])),
                     float(rng.integers(600, 5400))) for i in range(n)]


def _recorded_event_run(policy: str, jobs, cluster, opts=None):
    """One event-engine run of `policy` through a subclass that records every decision as (time, decisions)."""
    log = []
    base = REGISTRY[policy]

    class Recording(base):
        def decide(self, view):
            out = super().decide(view)
            log.append((view.now_s, out))
            return out

    opts = opts or SimOptions(estimator=AnalyticEstimator())
    mp = pytest.MonkeyPatch()
    mp.setitem(REGISTRY, "_recording", Recording)
    try:
        result = simulate(jobs, cluster, "_recording", options=opts)
    finally:
        mp.undo()
    return result, log


@pytest.fixture(scope="module", params=["frenzy-elastic", "frenzy-elastic-srpt"])
def event_run(request):
    return (request.param, *_recorded_event_run(request.param, _busy(), MIXED))


def test_both_run_on_the_event_engine_and_the_registry_contract_covers_them():
    from frenzy_core.policies import EVENT_POLICIES

    assert {"frenzy-elastic", "frenzy-elastic-srpt"} <= set(EVENT_POLICIES)
    assert REGISTRY["frenzy-elastic"].event_engine and REGISTRY["frenzy-elastic-srpt"].event_engine
    import tests.test_policies as contract

    assert {"frenzy-elastic", "frenzy-elastic-srpt"} <= set(contract.EVENT_POLICIES)
    assert {"frenzy-elastic", "frenzy-elastic-srpt"} <= set(contract.ROUND_POLICIES)  # the round engine's stays


def test_event_run_completes_every_job_and_never_over_commits_the_cluster(event_run):
    """The simulator refuses any start on GPUs that are not free; on the result: every job done, busy GPUs per type
    within the type's capacity at every instant, and GPU-seconds charged at most the cluster's GPUs x makespan."""
    _, result, log = event_run
    assert result.completed == len(_busy()) and (result.jobs["state"] == "done").all()
    cap = np.array([8, 8])  # A100-80GB, T4, in the cluster's type order
    assert (result.util_busy <= cap).all() and (result.util_busy >= 0).all()
    assert result.jobs["gpu_hours"].sum() * 3600.0 <= MIXED.total_gpus * result.makespan_s * (1 + 1e-9)
    assert result.metrics()["restarts"] > 0  # it did move or preempt jobs


def test_event_run_only_starts_plans_that_fit_in_memory_with_the_safety_margin(event_run):
    _, _, log = event_run
    margin = SimOptions().safety_margin
    starts = [d for _, out in log for d in out if isinstance(d, Start)]
    assert starts
    for d in starts:
        assert d.plan.memory_bytes <= d.plan.gpu_memory_bytes * (1.0 - margin)
        assert d.plan.num_gpus in (1, 2, 4, 8) and d.placement.gpu_type == d.plan.gpu_type


def test_event_run_is_deterministic_per_seed():
    opts = SimOptions(estimator=AnalyticEstimator())
    for name in ("frenzy-elastic", "frenzy-elastic-srpt"):
        a = simulate(_busy(), MIXED, name, seed=2, options=opts)
        b = simulate(_busy(), MIXED, name, seed=2, options=opts)
        pd.testing.assert_frame_equal(a.jobs_frame(), b.jobs_frame())
        assert a.policy_stats.keys() == b.policy_stats.keys()
        assert a.policy_stats["elastic_moves"] == b.policy_stats["elastic_moves"]


def _gpus_over_time(log, job: int) -> list[tuple[float, int]]:
    """(time, GPUs) of each of the job's starts, and (time, 0) at each of its preemptions."""
    out = []
    for t, decisions in log:
        for d in decisions:
            if d.job == job and isinstance(d, Start):
                out.append((t, d.plan.num_gpus))
            elif d.job == job and isinstance(d, Preempt):
                out.append((t, 0))
    return out


@pytest.mark.parametrize("name", ["frenzy-elastic", "frenzy-elastic-srpt"])
def test_a_job_grows_when_the_cluster_empties(name):
    """A (long) and B (short) arrive together on one 4-GPU node and share it, 2 + 2; when B ends, A is re-planned
    onto all 4 GPUs (one restart)."""
    jobs = [TraceJob("A", 0.0, 2, 20000.0), TraceJob("B", 0.0, 2, 1200.0)]
    r, log = _recorded_event_run(name, jobs, ONE_NODE)
    assert r.completed == 2
    a = _gpus_over_time(log, 0)
    if name == "frenzy-elastic":  # no size knowledge: both start at once, 2 GPUs each
        assert a[0] == (0.0, 2) and _gpus_over_time(log, 1) == [(0.0, 2)]
        b_end = r.jobs["finish_s"][1]
        assert (b_end, 0) in a and (b_end, 4) in a  # preempted and restarted larger when B ended
        assert list(r.jobs["restarts"]) == [1, 0]
    assert max(n for _, n in a) == 4 and r.jobs["num_gpus"][0] == 4


@pytest.mark.parametrize("name", ["frenzy-elastic", "frenzy-elastic-srpt"])
def test_a_running_job_shrinks_or_is_preempted_when_a_new_job_arrives(name):
    """A takes the whole node alone; B arrives at 3000 s (A past its guard) and starts at once on GPUs A held: A is
    shrunk or preempted, and is back on the whole node once B is done."""
    jobs = [TraceJob("A", 0.0, 4, 36000.0), TraceJob("B", 3000.0, 1, 1800.0)]
    r, log = _recorded_event_run(name, jobs, ONE_NODE)
    assert r.completed == 2
    a = _gpus_over_time(log, 0)
    assert a[0] == (0.0, 4)
    assert r.jobs["start_s"][1] == 3000.0
    at_arrival = [n for t, n in a if t == 3000.0]
    assert at_arrival and min(at_arrival) < 4  # shrunk (a smaller restart) or preempted (0)
    assert r.jobs["num_gpus"][0] == 4 and r.jobs["restarts"][0] >= 1
    assert r.jobs["finish_s"][1] < r.jobs["finish_s"][0]


def test_a_job_within_its_thrash_guard_keeps_its_gpus_until_the_guard_ends():
    """B arrives at 300 s, while A (started at 0) is inside `SimOptions.preempt_min_run_s` (600 s): B waits, and the
    policy's wake-up at the guard's end (on the 60 s grid) gives it GPUs then."""
    jobs = [TraceJob("A", 0.0, 4, 36000.0), TraceJob("B", 300.0, 1, 1800.0)]
    r, log = _recorded_event_run("frenzy-elastic", jobs, ONE_NODE)
    assert r.jobs["start_s"][1] == 600.0
    assert all(not isinstance(d, Preempt) for t, out in log if t < 600.0 for d in out)


def test_event_options_default_to_the_tuned_floor_and_srpt_comes_from_the_class():
    from frenzy_core.policies.frenzy_elastic import EVENT_EFFICIENCY_FLOOR, FrenzyElasticPolicy

    assert FrenzyElasticPolicy.event_options.efficiency_floor == EVENT_EFFICIENCY_FLOOR
    assert FrenzyElasticPolicy.event_options.srpt is False and REGISTRY["frenzy-elastic-srpt"].srpt is True


def test_a_higher_event_floor_spends_fewer_gpu_hours():
    from frenzy_core.policies.frenzy_elastic import FrenzyElasticPolicy

    class Lean(FrenzyElasticPolicy):
        event_options = FrenzyElasticOptions(efficiency_floor=0.5)

    class Greedy(FrenzyElasticPolicy):
        event_options = FrenzyElasticOptions(efficiency_floor=0.0)

    opts = SimOptions(estimator=AnalyticEstimator())
    mp = pytest.MonkeyPatch()
    mp.setitem(REGISTRY, "_lean", Lean)
    mp.setitem(REGISTRY, "_greedy", Greedy)
    try:
        lean, greedy = (simulate(_busy(), MIXED, n, options=opts) for n in ("_lean", "_greedy"))
    finally:
        mp.undo()
    assert lean.completed == greedy.completed == len(_busy())
    assert lean.jobs["gpu_hours"].sum() < greedy.jobs["gpu_hours"].sum()
