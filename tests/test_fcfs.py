"""FCFS's first fit (frenzy_core/policies/fcfs.py) against the node-by-node loop it replaces."""

import numpy as np
import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.packing import ClusterIndex, Placement
from frenzy_core.policies.fcfs import first_fit


def _loop(index, free, t, num_gpus, tp):
    """The reference: fill nodes of type t in index order, whole tp-groups per node, until num_gpus are taken."""
    need, nodes = num_gpus, []
    for node in index.nodes_by_type[t]:
        f = int(free[node])
        take = min(f - f % tp, need)
        if take > 0:
            nodes.append((int(node), take))
            need -= take
            if need == 0:
                return Placement(index.type_names[t], tuple(nodes))
    return None


def test_first_fit_hand_worked():
    ix = ClusterIndex.from_cluster(parse_cluster_yaml(
        "name: t\nnodes:\n  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 3}\n"))
    free = np.array([3, 0, 8])
    # tp 2: node 0 gives 2 (3 - 3 % 2), node 1 nothing, node 2 the remaining 4
    assert first_fit(ix, free, 0, 6, 2) == Placement("A100-80GB", ((0, 2), (2, 4)))
    assert first_fit(ix, free, 0, 11, 1) == Placement("A100-80GB", ((0, 3), (2, 8)))
    assert first_fit(ix, free, 0, 12, 1) is None  # 11 free in all
    assert first_fit(ix, free, 0, 10, 2) == Placement("A100-80GB", ((0, 2), (2, 8)))
    assert first_fit(ix, free, 0, 12, 2) is None  # 10 usable in tp-2 groups


@pytest.mark.parametrize("seed", range(4))
def test_first_fit_equals_the_loop(seed):
    rng = np.random.default_rng(seed)
    ix = ClusterIndex.from_cluster(parse_cluster_yaml(
        "name: t\nnodes:\n  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 7}\n"
        "  - {name: b, gpu_type: T4, num_gpus: 4, count: 5}\n"))
    for _ in range(300):
        free = rng.integers(0, ix.node_gpus + 1)
        t = int(rng.integers(0, 2))
        tp = int(rng.choice([1, 2, 4]))
        n = tp * int(rng.integers(1, 16))
        assert first_fit(ix, free, t, n, tp) == _loop(ix, free, t, n, tp)
