"""frenzy_core.comparison: why one policy's average JCT differs from another's, on hand-worked runs and on a real
simulation's invariants."""

import math

import numpy as np
import pytest

from frenzy_core.cluster import Cluster, Node
from frenzy_core.comparison import explain_gap, explain_results, free_wait_seconds, jct_gap
from frenzy_core.simulate import JOB_COLUMNS, MultiSeedResult, SimOptions, SimResult, job_columns, simulate_seeds
from frenzy_core.traces import bundled_traces, load_trace

H = 3600.0


def run(policy, jobs, util_times_h, util_busy, total_gpus=4, seed=0):
    """A SimResult of hand-written jobs: (id, arrival h, start h, finish h or None, GPUs, GPU-hours)."""
    ids, arr, start, fin, gpus, gpuh = zip(*jobs, strict=True)
    cols = job_columns(
        arrival_s=[a * H for a in arr], start_s=[s * H for s in start],
        finish_s=[None if f is None else f * H for f in fin],
        job_id=list(ids), model=["m"] * len(ids), tokens=[1] * len(ids), trace_gpus=list(gpus),
        trace_duration_s=[1.0] * len(ids), gpu_type=["A100-80GB"] * len(ids), num_gpus=list(gpus),
        dp=list(gpus), tp=[1] * len(ids), pp=[1] * len(ids), gpu_hours=list(gpuh), oom_failures=[0] * len(ids),
        restarts=[0] * len(ids), state=["done" if f is not None else "running" for f in fin])
    assert set(cols) == set(JOB_COLUMNS)
    return SimResult(policy=policy, seed=seed, cluster="c", total_gpus=total_gpus, jobs=cols,
                     util_times_s=np.array(util_times_h, dtype=float) * H,
                     util_busy=np.array(util_busy, dtype=float).reshape(-1, 1), gpu_types=("A100-80GB",),
                     decision_wall_s=np.zeros(1), policy_stats={}, oom_failures=0, oom_wasted_gpu_hours=0.0,
                     wall_s=0.0)


# Policy a: x on 1 GPU for 8 h from t=0; y waits 2 h with 3 of 4 GPUs free (queue order), then 2 GPUs for 2 h.
# Policy b: x on 2 GPUs for 4 h; y waits 4 h for all 4 GPUs (the cluster has only 2 free), then runs 1 h.
A = MultiSeedResult((run("a", [("x", 0, 0, 8, 1, 8.0), ("y", 0, 2, 4, 2, 4.0)], [0, 2, 4, 8], [1, 3, 1, 0]),))
B = MultiSeedResult((run("b", [("x", 0, 0, 4, 2, 8.0), ("y", 0, 4, 5, 4, 4.0)], [0, 4, 5], [2, 4, 0]),))


def test_the_gap_splits_into_queueing_and_running_as_worked_by_hand():
    g = jct_gap("a", A, "b", B)
    # JCT a: (8 + 4) / 2 = 6 h, b: (4 + 5) / 2 = 4.5 h; queue a (0 + 2) / 2 = 1, b (0 + 4) / 2 = 2;
    # run a (8 + 2) / 2 = 5, b (4 + 1) / 2 = 2.5
    assert (g.avg_jct_s / H, g.ref_avg_jct_s / H) == (6.0, 4.5)
    assert (g.queue_diff_s / H, g.run_diff_s / H, g.jct_diff_s / H) == (-1.0, 2.5, 1.5)
    # GPU-hours per running hour: a 12 / 10, b 12 / 5; a run is its GPU-hours over them: 6 / 1.2 = 5, 6 / 2.4 = 2.5
    assert g.running_gpus == pytest.approx(1.2) and g.ref_running_gpus == pytest.approx(2.4)
    assert g.avg_gpu_hours == g.ref_avg_gpu_hours == 6.0
    # y waited 2 h under a with 3 GPUs free (>= its 2): all of a's waiting; under b 2 free < its 4: none
    assert g.free_wait_share == pytest.approx(1.0) and g.ref_free_wait_share == 0.0
    assert g.cause == "running"
    assert [j.job_id for j in g.largest] == ["x", "y"]  # |8 - 4| before |4 - 5|
    assert (g.jobs, g.unpaired) == (2, 0)


def test_the_sentences_name_fewer_gpus_for_the_same_work_and_the_free_wait():
    lines = explain_gap(jct_gap("a", A, "b", B))
    text = " ".join(lines)
    assert "6.00 h against b's 4.50 h (1.50 h, 33% higher)" in text
    assert "queueing -1.00 h, running +2.50 h per job; mostly running" in text
    assert "1.2 GPUs against 2.4 (0.50x" in text and "spread over fewer GPUs and runs longer" in text
    assert "100% of a's waiting is with enough GPUs free, 0% of b's" in text
    assert lines[-1].startswith("Largest differences: x (m, seed 0) 8.0 h on 1 x A100-80GB against 4.0 h on 2 x")


def test_explain_results_compares_each_policy_with_the_lowest_average_jct():
    out = explain_results({"a": A, "b": B})
    assert list(out) == ["a"] and "against b's" in out["a"][0]
    assert explain_results({"a": A}) == {}


def test_a_job_done_by_only_one_policy_is_left_out_and_counted():
    a = MultiSeedResult((run("a", [("x", 0, 0, 8, 1, 8.0), ("z", 0, 0, 1, 1, 1.0)], [0, 1, 8], [2, 1, 0]),))
    b = MultiSeedResult((run("b", [("x", 0, 0, 4, 2, 8.0), ("z", 0, 0, None, 1, 1.0)], [0, 4], [3, 0]),))
    g = jct_gap("a", a, "b", b)
    assert (g.jobs, g.unpaired) == (1, 1) and g.avg_jct_s == 8 * H
    assert "1 completed by only one are left out" in explain_gap(g)[0]


def test_free_wait_counts_the_time_before_the_first_change_and_after_the_last():
    # 8 GPUs: all free before t=10, all busy [10, 20), all free from 20; a 1-GPU job waiting [0, 30): 10 + 10 s
    got = free_wait_seconds([0.0, 12.0], [30.0, 18.0], [1, 1], np.array([10.0, 20.0]), np.array([8, 0]), 8)
    assert got.tolist() == [20.0, 0.0]
    # a job larger than the cluster never counts as waiting with enough GPUs free
    assert free_wait_seconds([0.0], [5.0], [16], np.array([]), np.array([]), 8).tolist() == [0.0]


@pytest.fixture(scope="module")
def demo_runs():
    path, fmt = bundled_traces()["philly-2000"]
    trace = load_trace(path, fmt, limit=25)
    cluster = Cluster(name="t", nodes=[Node(name="a", gpu_type="A100-80GB", num_gpus=8),
                                       Node(name="r", gpu_type="RTX-3090", num_gpus=4)])
    return {p: simulate_seeds(trace, cluster, p, seeds=range(2), options=SimOptions()) for p in ("frenzy", "fcfs")}


def test_on_a_real_simulation_the_terms_add_up_and_match_the_summary(demo_runs):
    g = jct_gap("frenzy", demo_runs["frenzy"], "fcfs", demo_runs["fcfs"])
    assert g.jct_diff_s == pytest.approx(g.queue_diff_s + g.run_diff_s, abs=1e-6)
    if g.unpaired == 0:  # the same jobs on every seed: the pooled mean is the mean of the per-seed means
        assert g.avg_jct_s == pytest.approx(demo_runs["frenzy"].ci("avg_jct_s")[0], rel=1e-9)
        assert g.ref_avg_jct_s == pytest.approx(demo_runs["fcfs"].ci("avg_jct_s")[0], rel=1e-9)
    # neither policy pauses a job: its run is its GPU-hours over its GPUs, so the mean run is exact
    assert g.avg_run_s == pytest.approx(g.avg_gpu_hours * H / g.running_gpus, rel=1e-9)
    assert 0.0 <= g.free_wait_share <= 1.0 or math.isnan(g.free_wait_share)
