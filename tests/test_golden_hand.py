"""Golden JCTs worked out by hand (not regenerated from the code under test).

On one 8 x A100-80GB node, FCFS runs each job on exactly the GPUs its trace row asks for, on the trace's own GPU
type, so it runs for exactly its trace duration (the mapping sizes each job's tokens so). By hand:

    a: arrives    0, 8 GPUs, 1000 s -> runs    0-1000, JCT 1000
    b: arrives   10, 8 GPUs,  500 s -> waits for a: 1000-1500, JCT 1490
    c: arrives   20, 4 GPUs,  300 s -> waits for b: 1500-1800, JCT 1780
    d: arrives   30, 4 GPUs,  200 s -> beside c:    1500-1700, JCT 1670
    e: arrives 5000, 2 GPUs,  100 s -> idle cluster: 5000-5100, JCT  100

Average JCT = (1000 + 1490 + 1780 + 1670 + 100) / 5 = 1208 s; makespan 5100 s; GPU-hours =
(8 x 1000 + 8 x 500 + 4 x 300 + 4 x 200 + 2 x 100) / 3600 = 14,200 / 3600 = 3.944 h.
"""

from __future__ import annotations

import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.simulate import simulate
from frenzy_core.traces import load_native

TRACE = """job_id,arrival_s,num_gpus,duration_s
a,0,8,1000
b,10,8,500
c,20,4,300
d,30,4,200
e,5000,2,100
"""
HAND_JCT_S = {"a": 1000.0, "b": 1490.0, "c": 1780.0, "d": 1670.0, "e": 100.0}


@pytest.fixture
def one_node():
    return parse_cluster_yaml("nodes:\n  - {name: a, gpu_type: A100-80GB, num_gpus: 8}\n")


def test_fcfs_jcts_equal_the_hand_worked_table(one_node):
    result = simulate(load_native(TRACE), one_node, "fcfs", seed=0)
    got = dict(zip(result.jobs_frame()["job_id"], result.jobs_frame()["jct_s"], strict=True))
    assert got == pytest.approx(HAND_JCT_S, abs=1e-6)
    m = result.metrics()
    assert m["avg_jct_s"] == pytest.approx(1208.0)
    assert m["makespan_s"] == pytest.approx(5100.0)
    assert m["gpu_hours"] == pytest.approx(14_200 / 3600)


def test_fcfs_queueing_is_start_minus_arrival(one_node):
    frame = simulate(load_native(TRACE), one_node, "fcfs", seed=0).jobs_frame().set_index("job_id")
    assert frame["queue_s"].to_dict() == pytest.approx({"a": 0.0, "b": 990.0, "c": 1480.0, "d": 1470.0, "e": 0.0},
                                                       abs=1e-6)
