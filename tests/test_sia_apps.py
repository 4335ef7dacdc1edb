"""Sia's application model: every expected value is worked by hand from rows of the shipped profile CSVs
(frenzy_core/data/sia_profiles, copied from siasosp23/artifacts sia-simulator/traces), quoted in each test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from frenzy_core.errors import SpecError
from frenzy_core.rounds import AppJob, AppJobState
from frenzy_core.sia_apps import (
    GoodputModel,
    PerfParams,
    _fit_objective,
    fit_perf_params,
    load_app,
    placement_id,
    split_batch,
)


def test_step_time_of_a_profiled_placement_is_linear_in_the_local_batch():
    # cifar10/placements-aws.csv rows "1,91,0.07591350078582763,0.0005244320034980774" and
    # "1,129,0.10385050773620605,0.0005253599941730499": at local batch 110 the weight of the upper row is 19/38
    st = load_app("cifar10").profiles["aws"].step_time((1,), 110)
    w = (110 - 91) / (129 - 91)
    assert st[0] == pytest.approx(0.07591350078582763 + w * (0.10385050773620605 - 0.07591350078582763), rel=1e-12)
    assert st[1] == pytest.approx(0.0005244320034980774 + w * (0.0005253599941730499 - 0.0005244320034980774))
    # a measured row comes back exactly, and a batch beyond the measured range has no step time
    assert load_app("cifar10").profiles["aws"].step_time((1,), 1024) == pytest.approx((0.7020925283432007,
                                                                                        0.0005468864023685456))
    assert load_app("cifar10").profiles["aws"].step_time((1,), 2048) is None


def test_placements_are_keyed_by_their_smallest_rotation():
    # (2, 1) and (1, 2) are the same two-node placement "12" of placements-aws.csv
    prof = load_app("cifar10").profiles["aws"]
    assert placement_id((2, 1)) == 12
    assert prof.step_time((2, 1), 64) == prof.step_time((1, 2), 64)


def test_unprofiled_placement_interpolates_over_nodes_replicas_and_batch():
    # (1,1,1,1,1,1) is not in cifar10/placements-aws.csv; scalability-aws.csv row
    # "6,6,32,0.14090566635131835,0.09941204528808593" is a vertex of the (nodes, replicas, batch) triangulation
    prof = load_app("cifar10").profiles["aws"]
    assert placement_id((1,) * 6) not in prof.by_placement
    assert prof.step_time((1,) * 6, 32) == pytest.approx((0.14090566635131835, 0.09941204528808593), rel=1e-9)
    # between measured batches the value lies between the neighbouring rows (6,6,32) and (6,6,45)
    mid = prof.step_time((1,) * 6, 38)
    assert 0.1393126964569092 <= mid[0] <= 0.14090566635131835 + 1e-12
    # far outside every measurement (200 replicas) there is nothing to interpolate
    assert prof.step_time((4,) * 50, 32) is None


def test_gradient_statistics_interpolate_between_validated_batch_sizes():
    # cifar10 validation-128.csv row 1: grad_sqr 8.947307535897329, grad_var 5.066593295150894;
    # validation-256.csv row 1: grad_sqr 17.379458169870425, grad_var 13.937760473946334; batch 192 is half way
    app = load_app("cifar10")
    sqr, var = app.grad_stats(192, 0)
    assert sqr == pytest.approx((8.947307535897329 + 17.379458169870425) / 2)
    assert var == pytest.approx((5.066593295150894 + 13.937760473946334) / 2)
    # Pollux's gain at scale 192 / 128 = 1.5: (var + sqr) / (var / 1.5 + sqr); efficiency = gain / scale
    gain = (var + sqr) / (var / 1.5 + sqr)
    assert app.gain(192, 0) == pytest.approx(gain)
    model = GoodputModel(PerfParams(0.01, 0.001, 1e-8, 1e-8, 1e-8, 1e-8, 1.0), sqr, var, 128)
    assert float(model.efficiency(192)) == pytest.approx(gain / 1.5)
    with pytest.raises(SpecError, match="batch_size"):
        app.grad_stats(8192, 0)


def test_epoch_boundaries_are_the_smallest_progress_over_batch_sizes():
    # first rows of cifar10 validation-{128,256,512,1024,2048,4096}.csv: progress 391.0, 390.71438596642224,
    # 392.4631172197553, 391.0900463196891, 392.3360261907065, 395.2210609822137 -> min is the 256 one
    app = load_app("cifar10")
    assert app.progress_at(0) == 0.0
    assert app.progress_at(1) == pytest.approx(390.71438596642224)
    assert app.max_epochs == 100 and load_app("bert").max_epochs == 2 and app.restart_s == 50.0
    assert app.init_batch_size == 128 and app.max_batch_size == 4096


def test_batch_split_accumulates_past_the_per_gpu_limit():
    assert split_batch(300, 128, 2, 128) == (100, 2)  # ceil(300/128) - 1 = 2 accumulation steps of 100
    assert split_batch(128, 1024, 1, 128) == (128, 0)  # the initial batch on one GPU: no accumulation
    assert split_batch(256, 1024, 1, 128) == (128, 1)  # one replica above the initial batch accumulates once


def _state(app: str, batch: int, tune: bool) -> AppJobState:
    return AppJobState(0, AppJob("j", 0.0, app, 1, batch), load_app(app), tune_batch=tune)


def test_a_round_pays_the_restart_then_trains_at_gain_over_iteration_time():
    # cifar10 on one T4 at the initial batch 128 (Sia's first batch), rows 91 and 129 of placements-aws.csv
    st = _state("cifar10", 4096, tune=True)
    st.move("aws", (1,), 0.0)
    assert (st.atomic_bsz, st.accum_steps, st.restart_left_s, st.restarts) == (128, 0, 50.0, 0)
    step = 0.07591350078582763 + (128 - 91) / (129 - 91) * (0.10385050773620605 - 0.07591350078582763)
    goodput = 1.0 / step / 1.8  # gain 1 at the initial batch; SLOWDOWN["cifar10"] = 1.8
    st.advance(0.0, 60.0)
    assert st.restart_left_s == 0 and st.epoch == 0
    assert st.progress == pytest.approx(10.0 * goodput)  # 60 s - 50 s restart
    assert st.attained_gpu_s == 60.0


def test_epoch_progress_and_completion_after_the_applications_epochs():
    # bert at its initial batch 12 on one T4: placements-aws.csv row "1,12,0.9215156733989716,..." (exact),
    # validation-12.csv progress 7387.0 then 14774.0 (the smallest of all batch sizes), 2 epochs, restart 120 s
    st = _state("bert", 12, tune=False)
    st.move("aws", (1,), 0.0)
    goodput = 1.0 / 0.9215156733989716 / 1.2
    epoch_s = round(7387.0 / goodput)
    st.advance(0.0, 120.0 + epoch_s - 1)
    assert st.epoch == 0 and not st.done
    st2 = _state("bert", 12, tune=False)
    st2.move("aws", (1,), 0.0)
    st2.advance(0.0, 1e6)
    assert st2.epoch == 2 and st2.finish_s == pytest.approx(120.0 + 2 * epoch_s)
    assert st2.attained_gpu_s == pytest.approx(st2.finish_s)


def test_pollux_fit_gradient_and_recovery():
    rng = np.random.default_rng(0)
    true = PerfParams(0.02, 0.0005, 0.05, 0.004, 0.01, 0.001, 1.5)
    nodes = np.array([1, 1, 1, 2, 2, 4, 1, 3])
    reps = np.array([1, 2, 4, 8, 4, 16, 8, 12])
    bsz = np.array([32, 64, 128, 64, 32, 128, 256, 64])
    accum = true.accum_time(bsz)
    step = true.step_time(nodes, reps, bsz)
    # the hand-written gradient agrees with finite differences
    extra = np.maximum(reps - 2, 1e-8)
    args = (nodes.astype(float), reps.astype(float), bsz.astype(float), np.log(accum), np.log(step),
            (nodes > 1).astype(float), ((nodes <= 1) & (reps > 1)).astype(float), extra)
    x0 = np.array([0.03, 0.0004, 0.04, 0.003, 0.02, 0.002, 1.3]) * (1 + 0.1 * rng.random(7))
    numeric = approx_fprime(x0, lambda x: _fit_objective(x, *args)[0], 1e-9)
    np.testing.assert_allclose(_fit_objective(x0, *args)[1], numeric, rtol=1e-4)
    fit = fit_perf_params(nodes, reps, bsz, accum, step)
    # compute time is linear in the batch, so it is recovered exactly; the network terms only roughly, because the
    # artifact stops L-BFGS-B at tol=1e-5 ("for speed", Sia's goodput.py fit_perf_params) - we keep that stop
    np.testing.assert_allclose([fit.alpha_c, fit.beta_c], [0.02, 0.0005], rtol=1e-3)
    np.testing.assert_allclose(fit.step_time(nodes, reps, bsz), step, rtol=0.25)
    start = np.array([1e-1, 1e-2] * 3 + [1.0 + 1e-3])
    assert _fit_objective(np.array([getattr(fit, f) for f in PerfParams.__dataclass_fields__]), *args)[0] < \
        _fit_objective(start, *args)[0] / 5


def test_fit_pins_network_terms_it_cannot_observe():
    # one GPU only: no network observations, so the network terms stay at their lower bound (inter >= 1.1 x intra)
    fit = fit_perf_params([1, 1], [1, 1], [32, 64], [0.05, 0.08], [0.051, 0.081])
    assert fit.alpha_r == pytest.approx(1e-8) and fit.alpha_n >= fit.alpha_r * 1.1 - 1e-15
    # so the model predicts near-linear speed-up for 2 GPUs: Pollux's optimism that makes jobs try to double
    assert fit.throughput(1, 2, 64, 0) / fit.throughput(1, 1, 64, 0) == pytest.approx(2.0, rel=1e-3)


def test_goodput_optimum_picks_a_batch_within_the_per_gpu_limits():
    app = load_app("cifar10")
    sqr, var = app.grad_stats(128, 10)
    model = GoodputModel(PerfParams(0.02, 0.0006, 0.05, 1e-8, 0.01, 1e-8, 1.0), sqr, var, 128)
    gp, atomic, accum = model.optimize([1, 1, 2], [1, 4, 8], 4096, (32, 1024))
    assert ((atomic >= 32) & (atomic <= 1024)).all() and (gp > 0).all()
    # a bigger allocation has at least the goodput of a smaller one under this near-free network
    assert gp[1] >= gp[0]
