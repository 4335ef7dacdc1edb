"""sia-real and gavel on the sia-apps job model (frenzy_core/rounds.py): each rule of the artifact's policies, and
the published average JCTs of the real Gavel (sia-sosp23 README) as an end-to-end check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from frenzy_core.cluster import load_cluster
from frenzy_core.errors import SpecError
from frenzy_core.policies.gavel import RoundRobin, app_throughput, assign_workers, max_sum_throughput
from frenzy_core.policies.sia_real import (
    LAMBDA_N,
    SiaRealRounds,
    place_fast,
    restart_factor,
    sia_costs,
    solve_sia,
)
from frenzy_core.rounds import AppJob, AppJobState, layouts_of, placement_of, simulate_rounds
from frenzy_core.sia_apps import load_app

ROOT = Path(__file__).resolve().parents[1]
SIA64 = load_cluster(ROOT / "sample_clusters" / "sia-64.yaml")
SHARED = ROOT.parent / "shared" / "traces" / "sia-sosp23" / "workloads"


def test_sia_offers_19_configurations_on_the_64_gpu_cluster():
    pol = SiaRealRounds(layouts_of(SIA64))
    assert len(pol.configs) == 19
    # T4 nodes hold 4: 1, 2, 4 GPUs then 2..6 whole nodes; A100 and RTX nodes hold 8: 1, 2, 4, 8, then whole nodes
    assert [c[3] for c in pol.configs if c[1] == "aws"] == [1, 2, 4, 8, 12, 16, 20, 24]
    assert [c[3] for c in pol.configs if c[1] == "dgx-ext"] == [1, 2, 4, 8, 16]
    assert [c[3] for c in pol.configs if c[1] == "rtx"] == [1, 2, 4, 8, 16, 24]


def test_restart_factor_is_the_age_share_not_lost_to_restarts():
    assert restart_factor(20.0, 0, 30.0) == 1.0  # younger than one restart: not penalised
    assert restart_factor(600.0, 3, 50.0) == pytest.approx((600 - 150) / (600 + 50))
    assert restart_factor(100.0, 5, 50.0) == 0.0


def test_costs_power_the_goodput_and_spare_the_current_configuration():
    g = np.array([[1.0, 4.0, 16.0]])
    # current configuration 1 keeps 4 -> 4^-0.5 = 0.5; the others are scaled by 0.64 first: (0.64)^-0.5 = 1.25
    # and (16 x 0.64)^-0.5 = 0.3125 -> rounded to 2 decimals as Sia does
    assert sia_costs(g, [1], [0.64]).tolist() == [[1.25, 0.5, 0.31]]


def test_mip_gives_everyone_gpus_when_it_can_and_honours_fixed_jobs():
    # one type, 4 GPUs, configs of 1 and 4 GPUs; two jobs: cost 1 on 1 GPU, 0.5 on 4 GPUs
    costs = np.array([[1.0, 0.5], [1.0, 0.5]])
    choice = solve_sia(costs, [0, 0], [1, 4], [4], [None, None])
    # one job alone on 4 GPUs gains 1.1 - 0.5 = 0.6, more than both on one GPU each (2 x (1.1 - 1.0) = 0.2)
    assert sorted(choice.tolist()) == [-1, 1]
    # when 4 GPUs are worth little more than one (cost 1.05), giving both jobs one GPU gains more (0.2 > 0.05)
    choice = solve_sia(np.array([[1.0, 1.05], [1.0, 1.05]]), [0, 0], [1, 4], [4], [None, None])
    assert choice.tolist() == [0, 0]
    # a job paying its restart keeps its configuration even when that is worse for the objective
    choice = solve_sia(costs, [0, 0], [1, 4], [4], [0, None])
    assert choice[0] == 0 and choice[1] == 0
    assert LAMBDA_N == 1.1


def test_fast_placement_takes_whole_nodes_first_then_goes_round_robin():
    out = place_fast(4, 3, [(1, 2), (2, 8), (3, 2)])
    assert out[2] == (0, 0, 0, 0, 1, 1, 1, 1)  # largest first, two whole nodes
    assert out[1] == (2, 2) and out[3] == (2, 2)
    assert placement_of(out[2]) == (4, 4)


def _job(app="cifar10", replicas=4, batch=2048):
    return AppJobState(0, AppJob("j", 0.0, app, replicas, batch), load_app(app), tune_batch=True)


def test_a_new_job_is_offered_one_gpu_of_each_type_only():
    pol = SiaRealRounds(layouts_of(SIA64))
    row = pol._goodput_row(_job())
    ones = [k for k, c in enumerate(pol.configs) if c[3] == 1]
    assert (row[ones] == 1.0).all()
    assert (np.delete(row, ones) <= 1e-4).all()


def test_a_job_may_at_most_double_what_it_has_run_on():
    pol = SiaRealRounds(layouts_of(SIA64))
    st = _job()
    st.move("aws", (1,), 0.0)
    st.advance(0.0, 120.0)  # observes one 1-GPU step profile on T4
    row = pol._goodput_row(st)
    offered = {pol.configs[k][3] for k in np.flatnonzero(row > 1e-4)}
    assert offered == {1, 2}
    # types it never ran on are projected from T4 (offered too), so it may move
    assert {pol.configs[k][1] for k in np.flatnonzero(row > 1e-4)} == {"aws", "dgx-ext", "rtx"}
    # normalised: the smallest offered goodput is 1
    assert row[row > 1e-4].min() == pytest.approx(1.0)


def test_gavel_throughput_from_a_profile_row():
    # bert, 1 GPU, batch 12 on T4: local 12 = the largest measured for placement 1, one replica accumulates at
    # least once -> atomic 6: placements-aws.csv row "1,6,0.5693899691104889,0.013729131996631623"
    it_s = app_throughput(load_app("bert"), "aws", 4, 24, 1, 12)
    assert it_s == pytest.approx(1 / (0.5693899691104889 + (0.5693899691104889 - 0.013729131996631623)) / 1.2)
    assert app_throughput(load_app("bert"), "dgx-ext", 8, 16, 24, 384) == 0.1  # more GPUs than the type has


def test_max_sum_throughput_splits_ties_equally_and_respects_capacity():
    x = max_sum_throughput(np.array([[2.0, 1.0], [2.0, 1.0], [2.0, 1.0]]), [2, 2, 2], [2, 4])
    assert np.allclose(x[:, 0], 1 / 3) and np.allclose(x[:, 1], 2 / 3)
    assert (np.array([2, 2, 2]) @ x <= np.array([2, 4]) + 1e-4).all()  # shares are rounded to 5 decimals


def test_round_robin_alternates_identical_jobs():
    rr = RoundRobin(1, 360.0)
    jobs = [0, 1]
    x = np.array([[0.5], [0.5]])
    seen = []
    for _ in range(4):
        rr.admit(jobs)
        chosen = rr.pick(jobs, x, [4, 4], [4])
        rr.charge({jobs[r]: t for r, t in chosen.items()})
        seen.append(sorted(chosen))
    assert seen == [[0], [1], [0], [1]]


def test_gavel_keeps_a_job_on_its_previous_workers():
    out = assign_workers(4, 2, [(5, 2), (6, 2)], {6: (0, 1)})
    assert out[6] == (0, 1) and out[5] == (2, 3)


def test_small_runs_finish_every_job_deterministically():
    # bert: 2 epochs, so few refits of the throughput model (each costs an L-BFGS-B fit) and a fast test
    jobs = [AppJob(f"bert-{i}", 30.0 * i, "bert", 4, 96) for i in range(3)]
    for name in ("sia-real", "gavel"):
        a, b = simulate_rounds(jobs, SIA64, name), simulate_rounds(jobs, SIA64, name)
        assert a.completed == len(jobs)
        assert np.array_equal(a.jobs["jct_s"], b.jobs["jct_s"])
        assert (a.jobs["jct_s"] > 0).all()


def test_a_policy_without_a_sia_apps_version_is_a_clear_error():
    with pytest.raises(SpecError, match="sia-apps"):
        simulate_rounds([AppJob("j", 0.0, "cifar10", 1, 128)], SIA64, "fcfs")


@pytest.mark.skipif(not (SHARED / "saturn" / "workload-1.csv").exists(), reason="needs ../shared Sia workloads")
@pytest.mark.parametrize(("trace", "reference_h"), [("saturn", 1.798), ("philly", 1.671)])
def test_gavel_matches_the_real_gavel_within_20_percent(trace, reference_h):
    """Reference: the real Gavel in the Sia artifact's simulator on workload-1 (sia-sosp23 README)."""
    from frenzy_core.rounds import app_jobs
    from frenzy_core.traces import load_trace

    r = simulate_rounds(app_jobs(load_trace(SHARED / trace / "workload-1.csv", "sia")), SIA64, "gavel")
    assert r.completed == 160
    assert abs(r.metrics()["avg_jct_s"] / 3600 - reference_h) / reference_h < 0.20


def test_cli_runs_the_sia_apps_job_model(tmp_path, capsys):
    import json

    from frenzy_core.cli import main

    f = tmp_path / "w.csv"
    f.write_text("name,time,application,num_replicas,batch_size\nbert-0,0,bert,4,96\nbert-1,30,bert,2,48\n")
    args = ["simulate", "--trace", str(f), "--trace-format", "sia", "--cluster", str(ROOT / "sample_clusters" /
            "sia-64.yaml"), "--policy", "gavel", "--job-model", "sia-apps", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["jobs"] == 2 and out["completed"] == 2 and out["avg_jct_s"] > 0
    f.write_text("name,time,application,num_replicas,batch_size\nbert-0,0,bert,4,-96\n")
    assert main(args) == 2
    assert "batch_size" in capsys.readouterr().err


def test_sia_real_refuses_node_sizes_it_has_no_configurations_for():
    from frenzy_core.cluster import parse_cluster_yaml

    odd = parse_cluster_yaml("name: odd\nnodes:\n  - {name: t, gpu_type: T4, num_gpus: 2, count: 3}\n")
    with pytest.raises(SpecError, match="4 or 8 GPUs"):
        simulate_rounds([AppJob("j", 0.0, "bert", 1, 12)], odd, "sia-real")
