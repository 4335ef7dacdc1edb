"""Property tests (hypothesis): what must hold for every input, not just the hand-picked ones.

Packing never over-commits a node and gives exactly what was asked, in whole tensor-parallel groups, on one GPU
type with enough memory, and finds a placement whenever a brute force does; every ranked plan is a valid split that
fits its GPU; the simulator conserves jobs and GPUs and is deterministic for every registered policy.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is a dev dependency (requirements-dev.txt)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from frenzy_core.cluster import parse_cluster_yaml  # noqa: E402
from frenzy_core.models import ModelSpec  # noqa: E402
from frenzy_core.packing import ClusterIndex, place  # noqa: E402
from frenzy_core.plans import rank_plans  # noqa: E402
from frenzy_core.policies import EVENT_POLICIES  # noqa: E402
from frenzy_core.simulate import simulate  # noqa: E402
from frenzy_core.traces import load_native  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TYPES = ("A100-80GB", "T4", "V100-32GB")


@st.composite
def clusters(draw, max_nodes: int = 6):
    nodes = draw(st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from((1, 2, 4, 8))), min_size=1,
                          max_size=max_nodes))
    yaml = "nodes:\n" + "".join(f"  - {{name: n{i}, gpu_type: {t}, num_gpus: {g}}}\n" for i, (t, g) in
                                enumerate(nodes))
    return parse_cluster_yaml(yaml)


@st.composite
def packing_case(draw):
    cluster = draw(clusters())
    index = ClusterIndex.from_cluster(cluster)
    free = np.array([draw(st.integers(0, int(g))) for g in index.node_gpus], dtype=np.int64)
    tp = draw(st.sampled_from((1, 2, 4)))
    num = tp * draw(st.integers(1, 8))
    mem = draw(st.sampled_from((0, 16 * 2**30, 40 * 2**30)))
    return cluster, index, free, num, tp, mem


def _brute_force_possible(index, free, num, tp, mem) -> bool:
    """Some single GPU type, with enough memory, has at least num GPUs in whole tp-groups free."""
    for t, ix in enumerate(index.nodes_by_type):
        if index.type_memory_bytes[t] < mem:
            continue
        if int(sum(f - f % tp for f in free[ix])) >= num:
            return True
    return False


@FAST
@given(packing_case())
def test_placement_is_exact_whole_groups_within_free_gpus(case):
    cluster, index, free, num, tp, mem = case
    before = free.copy()
    got = place(index, free, num, tp=tp, memory_bytes=mem)
    assert np.array_equal(free, before), "place() must not write the free array"
    if got is None:
        assert not _brute_force_possible(index, free, num, tp, mem)
        return
    assert got.num_gpus == num
    assert cluster.gpu(got.gpu_type).memory_bytes >= mem
    for node, taken in got.nodes:
        assert cluster.nodes[node].gpu_type == got.gpu_type
        assert 0 < taken <= free[node] and taken % tp == 0
    assert len({n for n, _ in got.nodes}) == len(got.nodes)


@FAST
@given(packing_case())
def test_a_single_node_is_used_whenever_one_can_hold_the_job(case):
    cluster, index, free, num, tp, mem = case
    got = place(index, free, num, tp=tp, memory_bytes=mem)
    one_node = any(index.type_memory_bytes[index.node_type[n]] >= mem and free[n] - free[n] % tp >= num
                   for n in range(len(free)))
    if one_node:
        assert got is not None and len(got.nodes) == 1


TINY = ModelSpec(name="tiny", vocab_size=1000, hidden_size=64, num_layers=4, num_heads=4, max_positions=256)


@FAST
@given(clusters(), st.sampled_from((8, 16, 24, 64)), st.sampled_from((64, 128, 256)))
def test_every_ranked_plan_is_a_valid_split_that_fits(cluster, global_batch, seq_len):
    training = TrainingSpec(seq_len=seq_len, global_batch=global_batch, micro_batch=1)
    result = rank_plans(TINY, training, cluster, tokens=1e8, safety_margin=0.1)
    sizes = cluster.type_summary
    for plan in result.plans:
        assert plan.dp * plan.tp * plan.pp == plan.num_gpus
        assert TINY.num_heads % plan.tp == 0 and TINY.num_layers % plan.pp == 0
        assert global_batch == plan.dp * plan.micro_batch * plan.grad_accum
        assert plan.memory_bytes <= cluster.gpu(plan.gpu_type).memory_bytes * 0.9
        assert plan.tp <= sizes[plan.gpu_type].max_gpus_per_node
        assert plan.num_gpus <= sizes[plan.gpu_type].capacity_for_tp(plan.tp)
    times = [p.time_to_train_s for p in result.plans]
    assert times == sorted(times), "objective 'time' ranks by time to train"


# --- the simulator, over every registered policy -------------------------------------------------------------------
SIM_CLUSTER = parse_cluster_yaml("""
nodes:
  - {name: a, gpu_type: A100-80GB, num_gpus: 8}
  - {name: v, gpu_type: V100-32GB, num_gpus: 4, count: 2}
""")


@st.composite
def small_traces(draw):
    n = draw(st.integers(1, 8))
    rows = []
    t = 0
    for i in range(n):
        t += draw(st.integers(0, 3600))
        gpus = draw(st.sampled_from((1, 2, 4, 8)))
        dur = draw(st.integers(60, 4 * 3600))
        rows.append(f"j{i},{t},{gpus},{dur}")
    return load_native("job_id,arrival_s,num_gpus,duration_s\n" + "\n".join(rows) + "\n")


@SLOW
@given(small_traces(), st.integers(0, 3))
@pytest.mark.parametrize("policy", sorted(EVENT_POLICIES))
def test_simulation_conserves_jobs_and_is_deterministic(policy, trace, seed):
    a = simulate(trace, SIM_CLUSTER, policy, seed=seed)
    b = simulate(trace, SIM_CLUSTER, policy, seed=seed)
    ja, jb = a.jobs_frame(), b.jobs_frame()
    cols = [c for c in ja.columns if c not in ("wall_s",)]
    assert ja[cols].equals(jb[cols]), f"{policy}: same seed, different result"
    m = a.metrics()
    assert m["jobs"] == len(trace.jobs)
    assert m["completed"] + m["gave_up"] + m["rejected"] == m["jobs"], "every job ends in exactly one state"
    capacity = np.array([SIM_CLUSTER.gpus_by_type()[t] for t in a.gpu_types])
    assert (a.util_busy >= 0).all() and (a.util_busy <= capacity).all(), "no GPU type is ever over-committed"
    done = ja[ja["state"] == "completed"]
    assert (done["jct_s"] >= done["queue_s"] - 1e-6).all()
    assert (done["jct_s"] > 0).all()


def test_placement_matches_brute_force_on_every_tiny_state():
    """Exhaustive on a 3-node cluster: place() finds a placement exactly when one exists."""
    cluster = parse_cluster_yaml("nodes:\n  - {name: a, gpu_type: A100-80GB, num_gpus: 4, count: 2}\n"
                                 "  - {name: t, gpu_type: T4, num_gpus: 2}\n")
    index = ClusterIndex.from_cluster(cluster)
    for free in itertools.product(range(5), range(5), range(3)):
        f = np.array(free, dtype=np.int64)
        for tp, num in itertools.product((1, 2), range(1, 11)):
            if num % tp:
                continue
            got = place(index, f, num, tp=tp)
            assert (got is not None) == _brute_force_possible(index, f, num, tp, 0), (free, tp, num)
