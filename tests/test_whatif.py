"""What-if helpers: adding GPUs conserves the old nodes and adds exactly the GPUs asked for; cost is GPUs x price;
candidate rows build one cluster per label, and a bad row is refused naming it and its column."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG
from frenzy_core.whatif import (
    DEFAULT_CANDIDATES,
    TODAY,
    add_gpus,
    added_cost_per_hour,
    build_candidates,
    cluster_cost_per_hour,
    pareto_front,
)


def test_add_gpus_adds_exactly_the_count_in_full_nodes_then_a_remainder(tiny_cluster):
    bigger = add_gpus(tiny_cluster, "H100-80GB", 20)
    assert bigger.total_gpus == tiny_cluster.total_gpus + 20
    added = bigger.nodes[len(tiny_cluster.nodes):]
    assert [n.num_gpus for n in added] == [8, 8, 4]
    assert all(n.gpu_type == "H100-80GB" for n in added)


def test_add_gpus_keeps_existing_nodes_and_does_not_mutate_the_input(tiny_cluster):
    before = tiny_cluster.model_dump()
    bigger = add_gpus(tiny_cluster, "A100-80GB", 4, gpus_per_node=4)
    assert tiny_cluster.model_dump() == before
    assert bigger.nodes[: len(tiny_cluster.nodes)] == tiny_cluster.nodes


def test_add_gpus_names_are_unique_when_applied_twice(tiny_cluster):
    twice = add_gpus(add_gpus(tiny_cluster, "L40S", 8), "L40S", 8)
    names = [n.name for n in twice.nodes]
    assert len(names) == len(set(names))


def test_add_gpus_copies_the_network_of_existing_nodes_of_that_type():
    from frenzy_core.cluster import parse_cluster_yaml

    c = parse_cluster_yaml("nodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, network_gbit_s: 400}]")
    assert add_gpus(c, "H100-80GB", 8).nodes[-1].network_gbit_s == 400


def test_add_zero_gpus_returns_the_same_cluster(tiny_cluster):
    assert add_gpus(tiny_cluster, "T4", 0) == tiny_cluster


@pytest.mark.parametrize(("gpu_type", "count", "field"), [("NoSuchGPU", 8, "gpu_type"), ("T4", -1, "count"),
                                                           ("T4", 2.5, "count")])
def test_add_gpus_rejects_bad_input_naming_the_field(tiny_cluster, gpu_type, count, field):
    with pytest.raises(SpecError) as err:
        add_gpus(tiny_cluster, gpu_type, count)
    assert err.value.field == field


def test_cluster_cost_is_gpus_times_catalog_price(tiny_cluster):
    expected = 8 * CATALOG["A100-80GB"].price_per_hour_usd + 2 * CATALOG["T4"].price_per_hour_usd
    assert cluster_cost_per_hour(tiny_cluster) == pytest.approx(expected)


def test_adding_gpus_raises_cost_by_their_price(tiny_cluster):
    bigger = add_gpus(tiny_cluster, "H100-80GB", 16)
    delta = cluster_cost_per_hour(bigger) - cluster_cost_per_hour(tiny_cluster)
    assert delta == pytest.approx(added_cost_per_hour(tiny_cluster, "H100-80GB", 16))
    assert delta == pytest.approx(16 * CATALOG["H100-80GB"].price_per_hour_usd)


def test_pareto_front_drops_dominated_points_and_keeps_ties():
    assert pareto_front([1, 2, 3], [3.0, 2.0, 1.0]) == [True, True, True]
    assert pareto_front([1, 1, 2], [2.0, 2.0, 3.0]) == [True, True, False]
    assert pareto_front([], []) == []


def test_build_candidates_puts_today_first_then_one_cluster_per_default_candidate(tiny_cluster):
    out = build_candidates(tiny_cluster, [asdict(c) for c in DEFAULT_CANDIDATES])
    assert list(out) == [TODAY] + [c.candidate for c in DEFAULT_CANDIDATES]
    assert out[TODAY] is tiny_cluster
    for c in DEFAULT_CANDIDATES:
        assert out[c.candidate].total_gpus == tiny_cluster.total_gpus + c.count
        assert out[c.candidate].gpus_by_type()[c.gpu_type] == tiny_cluster.gpus_by_type().get(c.gpu_type, 0) + c.count


def test_default_candidates_use_catalog_gpu_types():
    assert DEFAULT_CANDIDATES and all(c.gpu_type in CATALOG and c.count > 0 for c in DEFAULT_CANDIDATES)


def test_build_candidates_adds_up_rows_with_the_same_label(tiny_cluster):
    rows = [{"candidate": "mix", "gpu_type": "L40S", "count": 8, "gpus_per_node": 8},
            {"candidate": "mix", "gpu_type": "H100-80GB", "count": 4.0, "gpus_per_node": None}]
    mix = build_candidates(tiny_cluster, rows)["mix"]
    assert mix.total_gpus == tiny_cluster.total_gpus + 12
    assert mix.gpus_by_type()["L40S"] == 8 and mix.gpus_by_type()["H100-80GB"] == 4


def test_build_candidates_skips_the_empty_row_the_editor_keeps(tiny_cluster):
    rows = [{"candidate": None, "gpu_type": float("nan"), "count": None, "gpus_per_node": None}]
    assert list(build_candidates(tiny_cluster, rows)) == [TODAY]


@pytest.mark.parametrize(("row", "field"), [
    ({"candidate": "", "gpu_type": "L40S", "count": 8}, "row 1.candidate"),
    ({"candidate": TODAY, "gpu_type": "L40S", "count": 8}, "row 1.candidate"),
    ({"candidate": "x", "gpu_type": None, "count": 8}, "x.gpu_type"),
    ({"candidate": "x", "gpu_type": "NoSuchGPU", "count": 8}, "x.gpu_type"),
    ({"candidate": "x", "gpu_type": "L40S", "count": float("nan")}, "x.count"),
    ({"candidate": "x", "gpu_type": "L40S", "count": 2.5}, "x.count"),
    ({"candidate": "x", "gpu_type": "L40S", "count": "many"}, "x.count"),
    ({"candidate": "x", "gpu_type": "L40S", "count": -1}, "x.count"),
    ({"candidate": "x", "gpu_type": "L40S", "count": 8, "gpus_per_node": 0}, "x.gpus_per_node"),
    ({"candidate": "x", "gpu_type": "L40S", "count": 8, "gpus_per_node": 1.5}, "x.gpus_per_node"),
])
def test_build_candidates_rejects_a_bad_row_naming_it_and_the_column(tiny_cluster, row, field):
    with pytest.raises(SpecError) as err:
        build_candidates(tiny_cluster, [row])
    assert err.value.field == field


def test_candidates_run_the_same_jobs_when_mapped_on_todays_cluster():
    """Regression: the mapping calibrates tokens on the cluster's reference GPU type; adding H100s must not change
    the workload being compared (it once made '+16 H100' look slower by giving every job 2.8x more tokens)."""
    from pathlib import Path

    from frenzy_core.cluster import load_cluster
    from frenzy_core.simulate import simulate_seeds
    from frenzy_core.traces import bundled_traces, load_trace
    from frenzy_core.whatif import add_gpus

    repo = Path(__file__).resolve().parents[1]
    base = load_cluster(repo / "sample_clusters" / "modern-mixed.yaml")
    bigger = add_gpus(base, "H100-80GB", 16)
    path, fmt = bundled_traces()["philly-2000"]
    trace = load_trace(path, fmt).head(30)
    a = simulate_seeds(trace, base, "fcfs", seeds=[0], workload_cluster=base).results[0].jobs_frame()
    b = simulate_seeds(trace, bigger, "fcfs", seeds=[0], workload_cluster=base).results[0].jobs_frame()
    assert list(a["tokens"]) == list(b["tokens"]) and list(a["model"]) == list(b["model"])


def test_add_gpus_counts_the_new_gpus_even_after_todays_totals_were_read(tiny_cluster):
    """Regression (issue 11, page 1.23 h vs core 1.87 h): the copy must not inherit the input's cached per-type
    totals; the page reads today's totals (its caption) before it builds the candidates."""
    assert tiny_cluster.gpus_by_type() == {"A100-80GB": 8, "T4": 2}  # fills the input's cache first
    bigger = add_gpus(tiny_cluster, "A100-80GB", 24)
    assert bigger.gpus_by_type() == {"A100-80GB": 32, "T4": 2}
    assert bigger.type_summary["A100-80GB"].node_sizes == ((4, 2), (8, 3))
