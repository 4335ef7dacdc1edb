"""frenzy-elastic on the sia-apps job model (frenzy_core/policies/frenzy_elastic.py): the grow/shrink/preempt
invariants of a whole run, memory fit of every allocation, the fitted goodput model against known parameters and
hand-worked profile rows, and the knowledge labels."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from frenzy_core.cluster import load_cluster, parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.policies import REGISTRY
from frenzy_core.policies.frenzy_elastic import (
    FrenzyElasticOptions,
    FrenzyElasticRounds,
    configs_of,
    fits_in_memory,
    place_packed,
)
from frenzy_core.rounds import AppJob, AppJobState, layouts_of, simulate_rounds
from frenzy_core.sia_apps import GoodputModel, PerfParams, fit_perf_params, load_app

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


def test_the_event_engine_refuses_it_clearly():
    from frenzy_core.simulate import simulate
    from frenzy_core.traces import TraceJob

    with pytest.raises(SpecError, match="round engine"):
        simulate([TraceJob("j", 0.0, 1, 600.0)], SIA64, "frenzy-elastic")
