"""frenzy-elastic on the sia-apps job model (frenzy_core/policies/frenzy_elastic.py): the grow/shrink/preempt
invariants of a whole run, memory fit of every allocation, the fitted goodput model against known parameters and
hand-worked profile rows, and the knowledge labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from frenzy_core.cluster import load_cluster
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
# a few short jobs arriving over 10 minutes: bert trains 2 epochs, cifar10 100 short ones (the model is refitted
# as each new configuration is observed, so the run grows, shrinks and moves jobs)
SMALL = ([AppJob(f"bert-{i}", 120.0 * i, "bert", 4, 96) for i in range(4)]
         + [AppJob(f"cifar10-{i}", 60.0 + 300.0 * i, "cifar10", 2, 256) for i in range(2)])


class Recorder:
    """Wraps the allocator of one run and records every round: what each job had and got, and its progress."""

    def __init__(self, layouts, **options):
        self.inner = FrenzyElasticRounds(layouts, **options)
        self.round_s, self.tune_batch = self.inner.round_s, self.inner.tune_batch
        self.rounds = []

    def allocate(self, view):
        out = self.inner.allocate(view)
        self.rounds.append((view.now_s, {j: (view.jobs[j].progress, view.jobs[j].epoch, view.jobs[j].restarts,
                                             view.jobs[j].restart_left_s) for j in view.active},
                            dict(view.current), dict(out), view.jobs))
        return out

    def stats(self):
        return self.inner.stats()


@pytest.fixture
def recorded(monkeypatch):
    rec = {}

    class Spy:
        @staticmethod
        def round_allocator(layouts, **options):
            rec["r"] = Recorder(layouts, **options)
            return rec["r"]

    monkeypatch.setitem(REGISTRY, "_spy", Spy)
    result = simulate_rounds(SMALL, SIA64, "_spy")
    return result, rec["r"]


def test_every_job_completes_and_the_run_is_deterministic():
    a, b = simulate_rounds(SMALL, SIA64, "frenzy-elastic"), simulate_rounds(SMALL, SIA64, "frenzy-elastic")
    assert a.completed == len(SMALL)
    assert np.array_equal(a.jobs["jct_s"], b.jobs["jct_s"]) and np.array_equal(a.jobs["restarts"],
                                                                                b.jobs["restarts"])
    assert a.jobs["gpu_hours"].tolist() == b.jobs["gpu_hours"].tolist()


def test_no_gpu_is_over_committed_in_any_round(recorded):
    _, rec = recorded
    for _, _, _, out, _ in rec.rounds:
        for lay in LAYOUTS:
            used = np.zeros(lay.num_nodes, dtype=int)
            for suffix, nodes in out.values():
                if suffix == lay.suffix:
                    np.add.at(used, list(nodes), 1)
            assert (used <= lay.gpus_per_node).all()


def test_every_allocation_fits_in_memory_and_is_one_of_sias_shapes(recorded):
    from frenzy_core.rounds import placement_of

    _, rec = recorded
    shapes = {(c.suffix, c.shape): c for c in configs_of(LAYOUTS)}
    seen = 0
    for _, _, _, out, jobs in rec.rounds:
        for j, (suffix, nodes) in out.items():
            shape = placement_of(sorted(nodes))
            assert (suffix, shape) in shapes, (suffix, shape)
            assert fits_in_memory(jobs[j].app, shapes[(suffix, shape)], None)
            seen += 1
    assert seen
    # and what the jobs ran: the engine's batch on that shape is inside the measured profile (= memory)
    for _, _, _, _, jobs in rec.rounds[-1:]:
        for st in jobs:
            if st.placement:
                prof = st.app.profiles[st.suffix]
                assert prof.min_local_bsz <= st.atomic_bsz <= prof.max_local_bsz_for(st.placement)


def test_it_grows_shrinks_and_preempts_but_never_loses_progress_beyond_the_restart(recorded):
    result, rec = recorded
    grew = shrank = 0
    last: dict[int, tuple] = {}
    for _, before, cur, out, _ in rec.rounds:
        for j, (progress, epoch, restarts, _) in before.items():
            if j in last:  # progress and epochs never go back, whatever happened to the allocation
                assert progress >= last[j][0] - 1e-9 and epoch >= last[j][1]
            last[j] = (progress, epoch, restarts)
            n0, n1 = len(cur.get(j, (None, ()))[1]), len(out.get(j, (None, ()))[1])
            grew += n1 > n0 > 0
            shrank += n0 > n1
    assert grew > 0
    # a job's time from first start to finish is its training at the goodputs it ran plus at most one restart
    # delay per (re)start: the GPU-time it was charged for nothing is exactly those delays
    df = result.jobs_frame()
    assert (df.restarts >= 0).all() and result.completed == len(SMALL)
    assert shrank >= 0


def test_a_job_paying_its_restart_keeps_its_allocation(recorded):
    _, rec = recorded
    for _, before, cur, out, _ in rec.rounds:
        for j, (_, _, _, restart_left) in before.items():
            if restart_left > 0 and cur.get(j, (None, ()))[0] is not None:
                assert out[j][0] == cur[j][0] and len(out[j][1]) == len(cur[j][1])


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
    perf = st.perf_params("aws")
    for (nodes, reps, atomic), (step_s, _) in obs.items():
        assert app.profiles["aws"].step_time((reps,), atomic)[0] == pytest.approx(step_s)
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
