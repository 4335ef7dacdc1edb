"""HAS placement: preference order, >= memory, TP groups per node, termination, purity."""

from __future__ import annotations

import numpy as np
import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.gpus import GIB
from frenzy_core.packing import ClusterIndex, FreeGPUs, Placement, check_placement, compile_plans, has_place, place
from frenzy_core.plans import Plan


def _index(yaml_nodes: str, gpu_types: str = "") -> ClusterIndex:
    return ClusterIndex.from_cluster(parse_cluster_yaml(f"name: t\n{gpu_types}nodes:\n{yaml_nodes}"))


def _plan(gpu_type: str, n: int, tp: int = 1, mem_gib: float = 1.0) -> Plan:
    return Plan(gpu_type=gpu_type, dp=n // tp, tp=tp, pp=1, num_gpus=n, micro_batch=1, grad_accum=1,
                memory_bytes=int(mem_gib * GIB), headroom_bytes=0, gpu_memory_bytes=80 * GIB, step_time_s=1.0,
                tokens_per_s=1.0, time_to_train_s=1.0, gpu_hours=1.0, cost_usd=1.0)


TWO_A100 = "  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 3}\n"


def test_single_node_best_fit_leaves_fewest_free_gpus():
    ix = _index(TWO_A100)
    assert place(ix, np.array([8, 5, 3]), 3) == Placement("A100-80GB", ((2, 3),))
    assert place(ix, np.array([8, 5, 3]), 4) == Placement("A100-80GB", ((1, 4),))


def test_ties_go_to_the_lowest_node_index():
    ix = _index(TWO_A100)
    assert place(ix, np.array([4, 4, 4]), 2).nodes == ((0, 2),)


def test_single_node_preferred_over_a_tighter_multi_node_split():
    ix = _index(TWO_A100)
    # 2 + 2 would fill two nodes exactly, but one node that holds all 4 wins
    assert place(ix, np.array([2, 2, 8]), 4).nodes == ((2, 4),)


def test_multi_node_uses_fewest_nodes_then_tightest_last_node():
    ix = _index("  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 4}\n")
    got = place(ix, np.array([6, 3, 5, 2]), 9)
    # largest first: 6, then the remainder 3 goes to the tightest node that holds it (node 1 has exactly 3)
    assert got.nodes == ((0, 6), (1, 3))
    assert got.num_gpus == 9


def test_tensor_parallel_groups_stay_inside_nodes():
    ix = _index(TWO_A100)
    # 3 free GPUs per node hold only one group of 2 each: 4 GPUs need two nodes with 2 each
    got = place(ix, np.array([3, 3, 3]), 4, tp=2)
    assert got is not None and all(n % 2 == 0 for _, n in got.nodes) and got.num_gpus == 4
    assert place(ix, np.array([3, 1, 1]), 4, tp=2) is None  # 5 free GPUs but only 2 usable in pairs


def test_memory_is_at_least_not_strictly_more():
    types = "gpu_types:\n  - {name: G40, memory_gib: 40, bf16_tflops: 100, fp32_tflops: 50, memory_bandwidth_gbyte_s: 1000}\n"
    ix = _index("  - {name: g, gpu_type: G40, num_gpus: 4}\n", types)
    assert place(ix, np.array([4]), 1, memory_bytes=40 * GIB) is not None  # exactly the capacity: fits (>=)
    assert place(ix, np.array([4]), 1, memory_bytes=40 * GIB + 1) is None


def test_tightest_memory_type_wins_among_types_that_fit():
    ix = _index("  - {name: big, gpu_type: A100-80GB, num_gpus: 8}\n  - {name: small, gpu_type: A100-40GB, num_gpus: 8}\n")
    assert place(ix, np.array([8, 8]), 2, memory_bytes=30 * GIB).gpu_type == "A100-40GB"
    assert place(ix, np.array([8, 8]), 2, memory_bytes=50 * GIB).gpu_type == "A100-80GB"


def test_place_never_writes_the_free_array():
    ix = _index(TWO_A100)
    free = np.array([8, 5, 3])
    free.flags.writeable = False  # would raise if place wrote to it
    place(ix, free, 12)
    assert free.tolist() == [8, 5, 3]


def test_has_place_takes_the_first_plan_that_fits_and_none_when_nothing_does():
    ix = _index(TWO_A100)
    plans = [_plan("A100-80GB", 32), _plan("H100-80GB", 1), _plan("A100-80GB", 8, tp=4), _plan("A100-80GB", 1)]
    # every synthetic plan takes the same time, so the scaling floor would keep only the 1-GPU ones: turn it off
    plan, pl = has_place(plans, ix, np.array([4, 4, 4]), scaling_floor=0)
    assert plan is plans[2] and pl.nodes == ((0, 4), (1, 4))
    assert has_place(plans, ix, np.array([0, 0, 0]), scaling_floor=0) is None
    assert has_place([], ix, np.array([8, 8, 8])) is None


@pytest.mark.parametrize("seed", range(5))
def test_random_placements_are_valid_and_none_only_when_impossible(seed):
    rng = np.random.default_rng(seed)
    ix = _index("  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 5}\n  - {name: t, gpu_type: T4, num_gpus: 4, count: 3}\n")
    for _ in range(200):
        free = rng.integers(0, ix.node_gpus + 1)
        tp = int(rng.choice([1, 2, 4]))
        n = tp * int(rng.integers(1, 12))
        gpu_type = str(rng.choice(ix.type_names))
        got = place(ix, free, n, tp=tp, gpu_types=(gpu_type,))
        nodes = ix.nodes_by_type[ix.type_pos(gpu_type)]
        usable = free[nodes] - free[nodes] % tp
        if got is None:
            assert usable.sum() < n
            continue
        assert check_placement(ix, free, _plan(gpu_type, n, tp), got) is None
        if (usable >= n).any():
            assert len(got.nodes) == 1  # a single node was possible, so it must be used
        # fewest nodes: no smaller set of nodes has enough usable GPUs
        assert len(got.nodes) == int(np.searchsorted(np.cumsum(np.sort(usable)[::-1]), n)) + 1


def test_check_placement_rejects_overcommit_and_wrong_type():
    ix = _index("  - {name: a, gpu_type: A100-80GB, num_gpus: 8}\n  - {name: t, gpu_type: T4, num_gpus: 4}\n")
    free = np.array([2, 4])
    assert "free GPUs" in check_placement(ix, free, _plan("A100-80GB", 4), Placement("A100-80GB", ((0, 4),)))
    assert "not a" in check_placement(ix, free, _plan("A100-80GB", 2), Placement("A100-80GB", ((1, 2),)))
    assert "needs" in check_placement(ix, free, _plan("A100-80GB", 2), Placement("A100-80GB", ((0, 1),)))


@pytest.mark.parametrize("seed", range(5))
def test_free_gpus_places_exactly_like_place_and_tracks_what_it_takes(seed):
    """The working copy used by the frenzy policy gives the same placement as the reference `place`, and after each
    `take` its free counts and per-type totals match a recomputation; its best single node is the brute-force one."""
    rng = np.random.default_rng(seed)
    ix = _index("  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 6}\n  - {name: t, gpu_type: T4, num_gpus: 4, count: 4}\n")
    for _ in range(40):
        free = rng.integers(0, ix.node_gpus + 1)
        orig = free.copy()
        fg = FreeGPUs(ix, free)
        for _ in range(8):
            tp = int(rng.choice([1, 2, 4]))
            n = tp * int(rng.integers(1, 8))
            t = int(rng.integers(0, len(ix.type_names)))
            want = place(ix, fg.free, n, tp=tp, gpu_types=(ix.type_names[t],))
            assert fg.place_on(t, n, tp) == want
            plans = compile_plans(ix, [_plan(ix.type_names[t], n, tp)])
            got = fg.first_plan(plans)
            assert (got[1] if got else None) == want
            if want is not None:
                fg.take(want)
            for u, nodes in enumerate(ix.nodes_by_type):
                assert fg.by_type[u] == int(fg.free[nodes].sum())
                fits = [(int(fg.free[x]), int(x)) for x in nodes if fg.free[x] >= n]
                assert fg.best_node(u, n) == (min(fits)[1] if fits else None)  # fewest left, then lowest index
        assert (free == orig).all()  # the input array is never written


def test_has_place_skips_a_plan_whose_extra_gpus_buy_three_percent():
    # the issue: one 7B job takes all 16 H100 for a few per cent; with the floor the 8-GPU plan is placed
    ix = _index("  - {name: h, gpu_type: H100-80GB, num_gpus: 8, count: 2}\n")
    wide = _plan("H100-80GB", 16)
    wide = Plan(**{**wide.as_dict(), "time_to_train_s": 0.97})
    narrow = _plan("H100-80GB", 8)
    assert has_place([wide, narrow], ix, np.array([8, 8]), scaling_floor=0)[0] is wide
    assert has_place([wide, narrow], ix, np.array([8, 8]))[0] is narrow


def test_two_llama_7b_jobs_share_16_h100_with_the_floor():
    from frenzy_core.allocation import empty_allocation, submit
    from frenzy_core.models import ZOO
    from frenzy_core.plans import rank_plans
    from frenzy_core.training import TrainingSpec

    c = parse_cluster_yaml("name: h\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 2}]")
    plans = rank_plans(ZOO["llama-2-7b"], TrainingSpec(seq_len=2048, global_batch=64, micro_batch=1), c).plans
    assert plans[0].num_gpus == 16  # ranked by time alone, the first job would take every H100
    alloc, first = submit(c, empty_allocation(c), "a", "llama-2-7b", plans)
    alloc, second = submit(c, alloc, "b", "llama-2-7b", plans)
    assert first.plan.num_gpus <= 8 and second is not None


# --- mutation gaps (issue 13): each test pins one behaviour that a one-line change of packing.py would break -------
def test_place_refuses_zero_gpus_and_counts_that_are_not_whole_tp_groups():
    ix = _index(TWO_A100)
    free = np.array([8, 8, 8])
    assert place(ix, free, 0) is None
    assert place(ix, free, 3, tp=2) is None  # 3 GPUs cannot be split into groups of 2


def test_single_node_on_a_larger_gpu_beats_a_split_over_two_tighter_nodes():
    # the A100-40GB type is the tightest memory fit, but 4 GPUs need both of its nodes (2 + 2 free); one A100-80GB
    # node holds all 4, and a single node comes first in the preference order
    ix = _index("  - {name: s, gpu_type: A100-40GB, num_gpus: 4, count: 2}\n"
                "  - {name: b, gpu_type: A100-80GB, num_gpus: 8}\n")
    assert place(ix, np.array([2, 2, 8]), 4, memory_bytes=30 * GIB) == Placement("A100-80GB", ((2, 4),))


def test_best_fit_decides_between_two_types_of_equal_memory():
    # A100-80GB and H100-80GB have the same 80 GiB: the node left with fewer free GPUs wins (H100 node: 3 - 2 = 1)
    ix = _index("  - {name: a, gpu_type: A100-80GB, num_gpus: 8}\n  - {name: h, gpu_type: H100-80GB, num_gpus: 8}\n")
    assert place(ix, np.array([8, 3]), 2) == Placement("H100-80GB", ((1, 2),))


def test_a_full_tie_between_types_goes_to_the_lowest_node_index():
    ix = _index("  - {name: a, gpu_type: A100-80GB, num_gpus: 8}\n  - {name: h, gpu_type: H100-80GB, num_gpus: 8}\n")
    assert place(ix, np.array([4, 4]), 2) == Placement("A100-80GB", ((0, 2),))


def test_check_placement_rejects_a_partial_tp_group_and_an_empty_node_entry():
    ix = _index(TWO_A100)
    free = np.array([8, 8, 8])
    assert "multiple of tp" in check_placement(ix, free, _plan("A100-80GB", 4, tp=2),
                                               Placement("A100-80GB", ((0, 3), (1, 1))))
    assert "multiple of tp" in check_placement(ix, free, _plan("A100-80GB", 2),
                                               Placement("A100-80GB", ((0, 2), (1, 0))))


def test_free_gpus_places_a_request_equal_to_the_type_total():
    # 2 + 3 = 5 free A100s in all: a 5-GPU request needs both nodes and must be placed, not skipped by the early exit
    ix = _index("  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 2}\n")
    fg = FreeGPUs(ix, np.array([2, 3]))
    assert fg.place_on(0, 5) == Placement("A100-80GB", ((0, 2), (1, 3)))
    assert fg.first_plan(compile_plans(ix, [_plan("A100-80GB", 5)]))[1] == Placement("A100-80GB", ((0, 2), (1, 3)))


def test_free_gpus_refuses_zero_gpus_and_counts_that_are_not_whole_tp_groups():
    ix = _index(TWO_A100)
    fg = FreeGPUs(ix, np.array([8, 8, 8]))
    assert fg.place_on(0, 0) is None
    assert fg.place_on(0, 3, tp=2) is None


def test_has_place_places_a_plan_equal_to_the_free_total_of_its_type():
    ix = _index(TWO_A100)
    free = np.array([4, 0, 0])
    plan, pl = has_place([_plan("A100-80GB", 4)], ix, free, free_by_type=[4], scaling_floor=0)
    assert pl == Placement("A100-80GB", ((0, 4),))
