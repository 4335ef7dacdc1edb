"""What-if: adding GPUs conserves the old nodes and adds exactly the GPUs asked for; cost is GPUs x price; candidate
rows build one cluster per label, and a bad row is refused naming it and its column; run_whatif reports what a
direct simulate_seeds call gives; TCO, the mix search and the user's weekly jobs by hand; the verdict and its
significance on hand-made tables (Welch's test written out); the page, the core and the CLI agree on the same inputs."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from frenzy_core.cli import main
from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG
from frenzy_core.limits import (
    MAX_ADDED_GPUS,
    MAX_CANDIDATES,
    MAX_GPUS_PER_ADDITION,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_SCENARIO_SEEDS,
    MAX_SEARCH_MIXES,
    MAX_SEEDS,
)
from frenzy_core.sweep import SweepTable
from frenzy_core.tco import DEFAULT_GPU_COSTS, HOURS_PER_YEAR, CostModel, tco
from frenzy_core.whatif import (
    DEFAULT_CANDIDATES,
    DEFAULT_SEEDS,
    TODAY,
    WeeklyJob,
    WeeklyJobs,
    add_gpus,
    added_cost_per_hour,
    build_candidates,
    cluster_cost_per_hour,
    compare,
    pareto_front,
    parse_addition,
    parse_weekly_job,
    run_whatif,
    search_mixes,
    verdict,
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


# --- the what-if in the core: run_whatif, TCO, the verdict, the page and the CLI ----------------------------------
def _repo() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mixed():
    from frenzy_core.cluster import load_cluster

    return load_cluster(_repo() / "sample_clusters" / "modern-mixed.yaml")


@pytest.fixture(scope="module")
def philly30():
    from frenzy_core.traces import bundled_traces, load_trace

    path, fmt = bundled_traces()["philly-2000"]
    return load_trace(str(path), fmt, limit=30)


def test_at_least_five_seeds_by_default():
    assert DEFAULT_SEEDS >= 5


def test_run_whatif_reports_each_candidate_as_a_direct_simulate_seeds_call(mixed, philly30):
    from frenzy_core.simulate import simulate_seeds

    mixed.gpus_by_type()  # today's totals read first, as the page does
    cands = build_candidates(mixed, [asdict(c) for c in DEFAULT_CANDIDATES])
    got = run_whatif(mixed, cands, philly30, policy="frenzy-eft", seeds=range(3))
    assert [c.candidate for c in got.candidates] == list(cands)
    for label, cl in cands.items():
        fresh = cl.model_validate(cl.model_dump())  # rebuilt from its fields: no cached state carried over
        ms = simulate_seeds(philly30, fresh, "frenzy-eft", seeds=range(3), workload_cluster=mixed)
        row = got.row(label)
        assert (row.avg_jct_s, row.ci_low_s, row.ci_high_s) == ms.ci("avg_jct_s"), label
        assert row.gpus == fresh.total_gpus


# --- TCO: hand-worked ----------------------------------------------------------------------------------------------
def test_owned_cost_of_an_h100_by_hand():
    m = CostModel(life_years=5.0, pue=1.58, usd_per_kwh=0.127)
    price = m.cost("H100-80GB").purchase_usd
    assert m.amortised_usd_per_hour("H100-80GB") == pytest.approx(price / (5 * 365 * 24))
    assert m.power_usd_per_hour("H100-80GB") == pytest.approx(0.700 * 1.58 * 0.127)  # 700 W TDP
    assert m.owned_usd_per_hour("H100-80GB") == pytest.approx(price / 43_800 + 0.140462, rel=1e-6)


def test_tco_of_sixteen_gpus_adds_purchase_and_power_over_the_life(tiny_cluster):
    m = CostModel(life_years=4.0, pue=1.2, usd_per_kwh=0.10).with_overrides(purchase_usd={"L40S": 8000.0})
    t = tco({"L40S": 16}, tiny_cluster, m)
    power_per_hour = 16 * 0.350 * 1.2 * 0.10  # 350 W each
    assert t.purchase_usd == 128_000
    assert t.power_usd_per_hour == pytest.approx(power_per_hour)
    assert t.tco_usd == pytest.approx(128_000 + power_per_hour * 4 * 8760)
    assert t.owned_usd_per_hour * 4 * HOURS_PER_YEAR == pytest.approx(t.tco_usd)
    assert t.rental_usd_per_hour == pytest.approx(16 * CATALOG["L40S"].price_per_hour_usd)


def test_rental_pricing_equals_the_clusters_catalog_cost(tiny_cluster):
    assert tco(tiny_cluster.gpus_by_type(), tiny_cluster).per_hour("rental") == \
        pytest.approx(cluster_cost_per_hour(tiny_cluster))


def test_every_catalog_gpu_has_a_sourced_price_and_its_datasheet_tdp():
    by_type = {g.gpu_type: g for g in DEFAULT_GPU_COSTS}
    assert set(by_type) == set(CATALOG)
    assert all(g.purchase_source and g.tdp_source and g.purchase_usd > 0 for g in DEFAULT_GPU_COSTS)
    # Vendor datasheets: H100 SXM 700 W, A100 SXM 400 W, L40S 350 W, MI300X 750 W, T4 70 W.
    assert {t: by_type[t].tdp_w for t in ("H100-80GB", "A100-80GB", "L40S", "MI300X", "T4")} == \
        {"H100-80GB": 700, "A100-80GB": 400, "L40S": 350, "MI300X": 750, "T4": 70}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"pue": 0.9}, "pue"), ({"life_years": 0.0}, "life_years"), ({"usd_per_kwh": float("nan")}, "usd_per_kwh"),
    ({"purchase_usd": {"T4": -1.0}}, "T4.purchase_usd"), ({"tdp_w": {"NewGPU": 300.0}}, "NewGPU.purchase_usd"),
])
def test_bad_cost_inputs_name_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        CostModel().with_overrides(**kwargs)
    assert err.value.field == field


# --- search over mixes -------------------------------------------------------------------------------------------
def test_mix_search_by_hand():
    """L40S $1.00/h and H100 $2.99/h (catalog), steps of 8, $30/h: 3 L40S servers ($24) or 1 H100 server ($23.92)
    fill the budget (one more server of either type would exceed it); 1 or 2 L40S servers leave room."""
    from frenzy_core.cluster import parse_cluster_yaml

    c = parse_cluster_yaml("nodes: [{name: a, gpu_type: L40S, num_gpus: 8}]")
    rows = search_mixes(c, ["H100-80GB", "L40S"], 30.0)
    assert [(r["candidate"], r["gpu_type"], r["count"]) for r in rows] == \
        [("+24 L40S", "L40S", 24), ("+8 H100-80GB", "H100-80GB", 8)]


def test_every_searched_mix_fits_the_budget_and_leaves_no_room_for_one_more_server(mixed):
    budget, m = 100.0, CostModel()
    rows = search_mixes(mixed, ["H100-80GB", "L40S", "A100-80GB"], budget, m, "owned", max_candidates=50)
    mixes = build_candidates(mixed, rows)
    assert len(mixes) > 2
    for label, cl in mixes.items():
        if label == TODAY:
            continue
        spent = tco({t: n - mixed.gpus_by_type().get(t, 0) for t, n in cl.gpus_by_type().items()}, mixed,
                    m).owned_usd_per_hour
        assert spent <= budget + 1e-9
        assert all(spent + 8 * m.owned_usd_per_hour(t) > budget for t in ("H100-80GB", "L40S", "A100-80GB"))


# --- the user's own jobs -----------------------------------------------------------------------------------------
def test_weekly_jobs_arrive_at_the_asked_rate_and_keep_their_model():
    mine = WeeklyJobs((WeeklyJob("llama-2-7b", 10.0, 16, 12.0, "A100-80GB"),), weeks=100.0)
    trace = mine.trace_for(3)
    n = len(trace.jobs)  # Poisson with mean 1000: 5 standard deviations is +-158
    assert abs(n - 1000) < 158
    assert trace == mine.trace_for(3) and trace != mine.trace_for(4)
    assert {(j.model, j.num_gpus, j.duration_s, j.gpu_type) for j in trace.jobs} == \
        {("llama-2-7b", 16, 12 * 3600.0, "A100-80GB")}
    arrivals = [j.arrival_s for j in trace.jobs]
    assert arrivals == sorted(arrivals) and arrivals[-1] < 100 * 7 * 86400


def test_weekly_jobs_are_trained_as_asked_after_mapping(mixed):
    from frenzy_core.workload import map_trace

    mine = WeeklyJobs((WeeklyJob("llama-2-7b", 5.0, 16, 12.0, "A100-80GB"),), weeks=2.0)
    w = map_trace(mine.trace_for(0), mixed, 0)
    assert {j.model for j in w.jobs} == {"llama-2-7b"} and w.fallbacks == 0
    assert all(j.trace_duration_s == 12 * 3600.0 and j.original_gpu_type == "A100-80GB" for j in w.jobs)


@pytest.mark.parametrize(("text", "field"), [
    ("llama-2-7b:3:16", "job"), ("llama-2-7b:x:16:12", "job"), ("nope:3:16:12", "job 1.model"),
    ("gpt2:0:1:1", "job 1.runs_per_week"), ("gpt2:1:0:1", "job 1.gpus"), ("gpt2:1:1:-3", "job 1.hours"),
])
def test_bad_weekly_jobs_name_the_field(text, field):
    with pytest.raises(SpecError) as err:
        WeeklyJobs((parse_weekly_job(text),))
    assert err.value.field == field


@pytest.mark.parametrize("text", ["L40S", "L40S:many", "x=:8"])
def test_bad_additions_name_the_add_flag(text):
    with pytest.raises(SpecError) as err:
        parse_addition(text)
    assert err.value.field == "add"


# --- the verdict on a hand-made table ------------------------------------------------------------------------------
def _table(samples: dict[str, list[float]], queue_s: dict[str, float] | None = None,
           utilisation: float = 0.5) -> SweepTable:
    rows = []
    for c, vals in samples.items():
        for s, v in enumerate(vals):
            rows.append({"workload": "w", "candidate": c, "policy": "fcfs", "seed": s, "avg_jct_s": v,
                         "p99_jct_s": v, "avg_queue_s": (queue_s or {}).get(c, 0.0),
                         "avg_utilisation": utilisation, "completed": 10, "jobs": 10,
                         "oom_failures": 0, "workload_fallbacks": 0})
    return SweepTable(tuple(rows), 1.0, "local", 1)


def _welch_p(a, b):
    """Welch's t-test written out: t = (m1 - m2) / sqrt(s1^2/n1 + s2^2/n2), Welch-Satterthwaite degrees of freedom."""
    a, b = np.asarray(a), np.asarray(b)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    return 2 * stats.t.sf(abs(t), df)


def test_verdict_picks_the_fastest_within_budget_and_says_when_it_is_not_significant(tiny_cluster):
    h100 = add_gpus(tiny_cluster, "H100-80GB", 8)  # 8 x $2.99 = $23.92/h
    t4 = add_gpus(tiny_cluster, "T4", 8)  # 8 x $0.35 = $2.80/h
    cands = {TODAY: tiny_cluster, "h100": h100, "t4": t4}
    samples = {TODAY: [10.0, 11.0, 12.0, 10.5, 11.5], "h100": [2.0, 2.1, 1.9, 2.0, 2.05],
               "t4": [9.0, 12.0, 10.0, 8.0, 11.5]}
    w = verdict(_table(samples), tiny_cluster, cands, budget_per_hour=10.0)
    assert [c.within_budget for c in w.candidates] == [True, False, True]  # h100 is fastest but over budget
    assert w.best_within_budget == "t4"
    comp = next(c for c in w.comparisons if c.other == TODAY)
    assert comp.p_value == pytest.approx(_welch_p(samples["t4"], samples[TODAY]))
    assert not comp.significant and comp.ci_overlap and not w.significant
    assert "Not significant" in w.message and TODAY in w.message


def test_verdict_says_significant_when_the_lead_is_clear(tiny_cluster):
    cands = {TODAY: tiny_cluster, "h100": add_gpus(tiny_cluster, "H100-80GB", 8)}
    samples = {TODAY: [10.0, 11.0, 12.0, 10.5, 11.5], "h100": [2.0, 2.1, 1.9, 2.0, 2.05]}
    w = verdict(_table(samples), tiny_cluster, cands, budget_per_hour=100.0)
    assert w.best_within_budget == "h100" and w.significant
    assert w.comparisons[0].p_value == pytest.approx(_welch_p(samples["h100"], samples[TODAY]))
    assert "significant" in w.message and "Not significant" not in w.message
    assert w.row("h100").on_frontier and w.row(TODAY).on_frontier  # cheaper or faster: neither dominates


def test_two_seeds_are_not_called_significant_however_clear_the_lead(tiny_cluster):
    """With 2 seeds a t-test can pass (p ~ 0.003 here) but the 95% interval is mean +- 12.7 standard errors: the
    verdict, like the pages (pages/charts.MIN_CI_SEEDS), needs metrics.MIN_CI_SEEDS = 3 seeds."""
    from frenzy_core.metrics import MIN_CI_SEEDS

    cands = {TODAY: tiny_cluster, "h100": add_gpus(tiny_cluster, "H100-80GB", 8)}
    two = {TODAY: [10.0, 11.0], "h100": [2.0, 2.1]}
    assert _welch_p(two["h100"], two[TODAY]) < 0.05
    w = verdict(_table(two), tiny_cluster, cands, budget_per_hour=100.0)
    assert MIN_CI_SEEDS == 3 and w.best_within_budget == "h100" and not w.significant
    assert "Not significant: 2 seeds give no interval; run at least 3" in w.message
    three = {TODAY: [10.0, 11.0, 12.0], "h100": [2.0, 2.1, 1.9]}
    assert verdict(_table(three), tiny_cluster, cands, budget_per_hour=100.0).significant


def test_each_candidate_says_whether_queueing_or_running_made_it_faster_than_buying_nothing(tiny_cluster):
    """Today: JCT 10 h of which 6 h queueing (4 h running). 'more' cuts the queue to 1 h at the same 4 h running
    (5 h faster, all queueing); 'fast' keeps the 6 h queue and runs in 2 h (2 h faster, all running)."""
    h = 3600.0
    cands = {TODAY: tiny_cluster, "more": add_gpus(tiny_cluster, "T4", 8), "fast": add_gpus(tiny_cluster, "H100-80GB", 8)}
    table = _table({TODAY: [10 * h] * 3, "more": [5 * h] * 3, "fast": [8 * h] * 3},
                   queue_s={TODAY: 6 * h, "more": 1 * h, "fast": 6 * h})
    w = verdict(table, tiny_cluster, cands, budget_per_hour=100.0)
    assert w.row("more").avg_run_s == pytest.approx(4 * h) and w.row("fast").avg_run_s == pytest.approx(2 * h)
    more, fast = w.row("more").why, w.row("fast").why
    assert "5.00 h faster" in more and "queueing -5.00 h" in more and "running +0.00 h" in more
    assert more.endswith("mostly queueing")
    assert "2.00 h faster" in fast and "queueing +0.00 h" in fast and "running -2.00 h" in fast
    assert fast.endswith("mostly running")
    assert w.row(TODAY).why.startswith("buy nothing")
    assert w.best_within_budget == "more" and f"Why: {more}." in w.message


def test_an_idle_cluster_is_named_as_the_reason_only_speed_can_help(tiny_cluster):
    """Today 3% used and a 43 s average wait (the issue's 0.012 h): buying GPUs can only run jobs faster."""
    cands = {TODAY: tiny_cluster, "h100": add_gpus(tiny_cluster, "H100-80GB", 8)}
    w = verdict(_table({TODAY: [7200.0] * 2, "h100": [6000.0] * 2}, queue_s={TODAY: 43.0, "h100": 40.0},
                       utilisation=0.03), tiny_cluster, cands, budget_per_hour=100.0)
    assert "3% of its GPUs are in use" in w.row(TODAY).why and "running jobs faster" in w.row(TODAY).why
    assert w.row("h100").why.endswith("mostly running")
    busy = verdict(_table({TODAY: [7200.0] * 2, "h100": [6000.0] * 2}, queue_s={TODAY: 43.0, "h100": 40.0},
                          utilisation=0.9), tiny_cluster, cands, budget_per_hour=100.0)
    assert "in use" not in busy.row(TODAY).why


def test_one_seed_is_never_called_significant():
    c = compare("a", [1.0], "b", [9.0], (math.nan, math.nan), (math.nan, math.nan))
    assert math.isnan(c.p_value) and not c.significant and c.ci_overlap


@pytest.mark.parametrize(("kwargs", "field"), [({"budget_per_hour": -1.0}, "budget"),
                                               ({"budget_per_hour": float("nan")}, "budget"),
                                               ({"pricing": "lease"}, "pricing")])
def test_bad_verdict_inputs_name_the_field(tiny_cluster, kwargs, field):
    with pytest.raises(SpecError) as err:
        verdict(_table({TODAY: [1.0, 2.0]}), tiny_cluster, {TODAY: tiny_cluster}, **{"budget_per_hour": 1.0,
                                                                                         **kwargs})
    assert err.value.field == field


# --- page = core = CLI on the same inputs (issue 11: the page said 1.23 h where the core said 1.87 h) ---------------
def test_the_page_the_core_and_the_cli_give_the_same_numbers(monkeypatch, capsys, mixed):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from frenzy_core.traces import bundled_traces, load_trace

    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_file(str(_repo() / "app.py"), default_timeout=60).run()
    at.switch_page("pages/gpu_mix.py").run()
    at.number_input(key="wi_limit").set_value(30)
    at.number_input(key="wi_seeds").set_value(3)
    at.number_input(key="wi_workers").set_value(1)
    at.button(key="wi_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    page = at.session_state.wi_whatif

    path, fmt = bundled_traces()["philly-2000"]
    trace = load_trace(str(path), fmt, limit=30)
    core = run_whatif(mixed, build_candidates(mixed, [asdict(c) for c in DEFAULT_CANDIDATES]), trace,
                      policy="frenzy-eft", seeds=range(3), budget_per_hour=100.0)
    argv = ["whatif", "--cluster", str(_repo() / "sample_clusters" / "modern-mixed.yaml"), "--trace", str(path),
            "--trace-format", fmt, "--limit-jobs", "30", "--policy", "frenzy-eft", "--seeds", "3", "--budget", "100",
            "--workers", "1", "--json"]
    for c in DEFAULT_CANDIDATES:
        argv += ["--add", f"{c.candidate}={c.gpu_type}:{c.count}"]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)

    keys = ("candidate", "avg_jct_s", "ci_low_s", "ci_high_s", "cost_per_hour")
    want = [tuple(getattr(c, k) for k in keys) for c in core.candidates]
    assert [tuple(getattr(c, k) for k in keys) for c in page.candidates] == want
    assert [tuple(c[k] for k in keys) for c in cli["candidates"]] == want
    assert [c["tco"] for c in cli["candidates"]] == [c.tco.as_dict() for c in core.candidates]
    assert page.best_within_budget == core.best_within_budget == cli["best_within_budget"]
    shown = at.session_state.wi_results  # and the table the page draws is those numbers in hours
    assert list(shown["avg JCT h"]) == [c.avg_jct_s / 3600 for c in core.candidates]


def test_cli_whatif_with_my_jobs_and_a_mix_search_prints_the_documented_keys(capsys):
    argv = ["whatif", "--cluster", str(_repo() / "sample_clusters" / "modern-mixed.yaml"), "--job",
            "gpt2-xl:20:4:2", "--weeks", "1", "--search", "H100-80GB,L40S", "--budget", "30", "--pricing", "owned",
            "--max-candidates", "2", "--seeds", "2", "--policy", "fcfs", "--workers", "1", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"candidates", "best_within_budget", "message", "significant"} <= set(out)
    assert len(out["candidates"]) == 3 and out["candidates"][0]["candidate"] == TODAY
    for c in out["candidates"]:
        assert {"candidate", "avg_jct_s", "ci_low_s", "ci_high_s", "cost_per_hour", "tco"} <= set(c)
        assert c["added_cost_per_hour"] <= 30 + 1e-9


@pytest.mark.parametrize(("extra", "field"), [
    ([], "trace"), (["--job", "gpt2:1:1"], "job"), (["--job", "gpt2:1:1:1", "--seeds", "0"], "seeds"),
    (["--job", "gpt2:1:1:1", "--pue", "0.5"], "pue"), (["--job", "gpt2:1:1:1", "--purchase", "T4"], "purchase"),
    (["--job", "gpt2:1:1:1", "--add", "NoGPU:8"], "gpu_type"),
])
def test_cli_whatif_bad_input_exits_2_naming_the_field(capsys, extra, field):
    code = main(["whatif", "--cluster", str(_repo() / "sample_clusters" / "modern-mixed.yaml"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.browser
def test_cancel_on_the_page_stops_the_pool_in_a_real_browser():
    """Real Chromium against `streamlit run app.py`: a long what-if on a 2-process pool, then Cancel: the page says so,
    shows no exception, and the server has no pool worker left."""
    import subprocess
    import time

    from browser_support import CHROMIUM, CHROMIUM_ARGS, streamlit_server

    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
    from test_browser import IDLE, set_number, wait_drawn

    def workers_of(port: int) -> list[str]:
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,pgid,args"], capture_output=True, text=True).stdout.splitlines()
        server = [line.split() for line in ps if f"--server.port {port}" in line and "streamlit" in line]
        pgid = server[0][1]
        return [line for line in ps if line.split()[1] == pgid and "spawn_main" in line]

    with streamlit_server() as url, sync_api.sync_playwright() as pw:
        port = int(url.rsplit(":", 1)[1])
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/gpu_mix")
            wait_drawn(page, "GPU mix what-if")
            for key, value in (("wi_limit", 2000), ("wi_seeds", MAX_SCENARIO_SEEDS), ("wi_workers", 2)):
                set_number(page, key, value)
            page.locator(".st-key-wi_run button").click()
            deadline = time.monotonic() + 60
            while not workers_of(port) and time.monotonic() < deadline:  # the pool is up
                time.sleep(0.2)
            assert workers_of(port), "the what-if never started its pool"
            page.locator(".st-key-wi_cancel button").first.click()
            page.wait_for_selector('[data-testid="stAlert"]:has-text("Cancelled")', timeout=30_000)
            page.wait_for_selector(IDLE, timeout=30_000)
            assert page.locator('[data-testid="stException"]').count() == 0
            assert page.locator('[data-testid="stAlert"]:has-text("Something went wrong")').count() == 0
            deadline = time.monotonic() + 15
            while workers_of(port) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not workers_of(port), workers_of(port)
        finally:
            browser.close()


def test_the_page_keeps_its_settings_when_you_leave_and_come_back(monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_file(str(_repo() / "app.py"), default_timeout=60).run()
    at.switch_page("pages/gpu_mix.py").run()
    assert at.number_input(key="wi_seeds").value == DEFAULT_SEEDS
    at.number_input(key="wi_budget").set_value(42.0).run()
    at.radio(key="wi_pricing").set_value("owned").run()
    at.switch_page("pages/plans.py").run()
    at.switch_page("pages/gpu_mix.py").run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    assert at.number_input(key="wi_budget").value == 42.0
    assert at.radio(key="wi_pricing").value == "owned"


# --- bounded work: every input that sizes the what-if has a limit, named with its flag and its fix -----------------
def test_build_candidates_gives_the_clusters_add_gpus_gives_row_after_row(tiny_cluster):
    """Each label's cluster is built once from all its rows; the nodes (names, shapes, links) are exactly those of
    add_gpus applied row after row, as before."""
    rows = [{"candidate": "mix", "gpu_type": "L40S", "count": 12, "gpus_per_node": 8},
            {"candidate": "other", "gpu_type": "T4", "count": 3, "gpus_per_node": 2},
            {"candidate": "mix", "gpu_type": "A100-80GB", "count": 6, "gpus_per_node": 4},
            {"candidate": "mix", "gpu_type": "L40S", "count": 12, "gpus_per_node": 8},
            {"candidate": "mix", "gpu_type": "T4", "count": 0, "gpus_per_node": 8}]
    want = tiny_cluster
    for r in rows:
        if r["candidate"] == "mix":
            want = add_gpus(want, r["gpu_type"], r["count"], r["gpus_per_node"])
    got = build_candidates(tiny_cluster, rows)
    assert list(got) == [TODAY, "mix", "other"]
    assert got["mix"].nodes == want.nodes
    assert got["other"].nodes == add_gpus(tiny_cluster, "T4", 3, 2).nodes


def test_add_gpus_refuses_more_than_the_per_addition_limit(tiny_cluster):
    assert add_gpus(tiny_cluster, "L40S", MAX_GPUS_PER_ADDITION).total_gpus == \
        tiny_cluster.total_gpus + MAX_GPUS_PER_ADDITION
    with pytest.raises(SpecError) as err:
        add_gpus(tiny_cluster, "L40S", MAX_GPUS_PER_ADDITION + 1)
    assert err.value.field == "count" and f"{MAX_GPUS_PER_ADDITION:,}" in err.value.reason


@pytest.mark.parametrize("count", ["1e20", "100000000000000000000", "9" * 5000, str(MAX_GPUS_PER_ADDITION + 1)])
def test_an_add_entry_over_the_gpu_limit_names_add_the_limit_and_the_fix(count):
    with pytest.raises(SpecError) as err:
        parse_addition(f"A100-80GB:{count}")
    assert err.value.field == "add"
    assert f"{MAX_GPUS_PER_ADDITION:,} per --add entry" in err.value.reason and "add fewer" in err.value.reason
    assert len(str(err.value)) < 300  # the message never grows with the input


def test_an_add_entry_may_write_its_count_in_scientific_notation():
    assert [r["count"] for r in parse_addition("L40S:1e3")] == [1000]
    with pytest.raises(SpecError):
        parse_addition("L40S:1.5e0")


def test_build_candidates_caps_the_gpus_added_over_all_candidates(tiny_cluster):
    rows = [{"candidate": f"c{i}", "gpu_type": "L40S", "count": MAX_GPUS_PER_ADDITION, "gpus_per_node": 1024}
            for i in range(MAX_ADDED_GPUS // MAX_GPUS_PER_ADDITION + 1)]
    with pytest.raises(SpecError) as err:
        build_candidates(tiny_cluster, rows)
    assert err.value.field.endswith(".count") and f"{MAX_ADDED_GPUS:,}" in err.value.reason
    assert "--add" in err.value.reason


def test_build_candidates_caps_the_number_of_candidates_today_included(tiny_cluster):
    rows = [{"candidate": f"c{i}", "gpu_type": "T4", "count": 0} for i in range(MAX_CANDIDATES)]
    assert len(build_candidates(tiny_cluster, rows[:-1])) == MAX_CANDIDATES
    with pytest.raises(SpecError) as err:
        build_candidates(tiny_cluster, rows)
    assert err.value.field == f"c{MAX_CANDIDATES - 1}.candidate" and f"{MAX_CANDIDATES:,}" in err.value.reason


def test_a_candidate_over_the_node_limit_is_a_spec_error_before_its_nodes_are_made(tiny_cluster):
    """One GPU per node: 100,000 GPUs are 100,000 new nodes, over MAX_NODES with today's three (a pydantic
    traceback before)."""
    rows = [{"candidate": "x", "gpu_type": "T4", "count": MAX_GPUS_PER_ADDITION, "gpus_per_node": 1}]
    with pytest.raises(SpecError) as err:
        build_candidates(tiny_cluster, rows)
    assert err.value.field == "x.count" and f"{MAX_NODES:,}" in err.value.reason


@pytest.mark.parametrize(("kwargs", "field", "limit"), [
    ({"budget_per_hour": 8.0 * 2 * MAX_SEARCH_MIXES}, "search", MAX_SEARCH_MIXES),  # L40S $1/h: 8 $/h a server
    ({"budget_per_hour": 20.0, "step": MAX_GPUS_PER_NODE + 1}, "step", MAX_GPUS_PER_NODE),
    ({"budget_per_hour": 20.0, "max_candidates": MAX_CANDIDATES + 1}, "max_candidates", MAX_CANDIDATES),
])
def test_mix_search_limits_name_the_field_and_the_limit(kwargs, field, limit):
    from frenzy_core.cluster import parse_cluster_yaml

    c = parse_cluster_yaml("nodes: [{name: a, gpu_type: L40S, num_gpus: 8}]")
    with pytest.raises(SpecError) as err:
        search_mixes(c, ["L40S"], **kwargs)
    assert err.value.field == field and f"{limit:,}" in err.value.reason


@pytest.mark.parametrize(("extra", "field", "limit"), [
    (["--add", "A100-80GB:1e20"], "add", MAX_GPUS_PER_ADDITION),
    (["--add", "A100-80GB:10000000"], "add", MAX_GPUS_PER_ADDITION),  # a pydantic traceback before
    ([f"--add=c{i}=L40S:{MAX_GPUS_PER_ADDITION}" for i in range(MAX_ADDED_GPUS // MAX_GPUS_PER_ADDITION + 1)],
     "count", MAX_ADDED_GPUS),
    (["--seeds", str(MAX_SEEDS + 1)], "seeds", MAX_SEEDS),
    (["--search", "L40S", "--budget", str(8.0 * 2 * MAX_SEARCH_MIXES)], "search", MAX_SEARCH_MIXES),
    (["--search", "L40S", "--step", str(MAX_GPUS_PER_NODE + 1)], "step", MAX_GPUS_PER_NODE),
    (["--search", "L40S", "--max-candidates", str(MAX_CANDIDATES + 1)], "max_candidates", MAX_CANDIDATES),
])
def test_cli_whatif_over_a_limit_exits_2_with_one_line_naming_the_flag_and_the_limit(capsys, extra, field, limit):
    code = main(["whatif", "--cluster", str(_repo() / "sample_clusters" / "modern-mixed.yaml"), "--job",
                 "gpt2:1:1:1", "--policy", "fcfs", "--workers", "1", *extra])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert field in err and f"{limit:,}" in err and "; " in err, err  # the field, the limit, then the fix


# --- systems as candidates (frenzy_core.systems) ---------------------------------------------------------------------
def test_a_system_candidate_buys_whole_nodes_with_the_systems_network(tiny_cluster):
    # dgx-h100:2 = 2 nodes of 8 H100-80GB, 8 x 400 Gb/s each; gb200-nvl72:1 = one 72-GPU NVLink domain
    rows = parse_addition("dgx-h100:2") + parse_addition("rack=gb200-nvl72:1")
    out = build_candidates(tiny_cluster, rows)
    assert list(out) == [TODAY, "+2 dgx-h100", "rack"]
    dgx = out["+2 dgx-h100"].nodes[len(tiny_cluster.nodes):]
    assert [(n.gpu_type, n.num_gpus, n.network_gbit_s) for n in dgx] == [("H100-80GB", 8, 3200.0)] * 2
    rack = out["rack"].nodes[len(tiny_cluster.nodes):]
    assert [(n.gpu_type, n.num_gpus, n.network_gbit_s) for n in rack] == [("GB200", 72, 28800.0)]
    # a plain type copies the network of the cluster's nodes of that type (here none: the 100 Gbit/s default)
    plain = build_candidates(tiny_cluster, parse_addition("H100-80GB:16"))["+16 H100-80GB"]
    assert {n.network_gbit_s for n in plain.nodes[len(tiny_cluster.nodes):]} == {100.0}


@pytest.mark.parametrize("network", [0, -5.0, float("inf"), "fast", True])
def test_a_bad_candidate_network_names_the_row_and_the_column(tiny_cluster, network):
    rows = [{"candidate": "x", "gpu_type": "L40S", "count": 8, "gpus_per_node": 8, "network_gbit_s": network}]
    with pytest.raises(SpecError) as err:
        build_candidates(tiny_cluster, rows)
    assert err.value.field == "x.network_gbit_s"


def test_too_many_systems_in_one_addition_are_refused_naming_add():
    with pytest.raises(SpecError) as err:
        parse_addition(f"gb200-nvl72:{MAX_GPUS_PER_ADDITION // 72 + 1}")
    assert err.value.field == "add" and "gb200-nvl72" in str(err.value)
