"""pages/charts.py: each Plotly figure carries the numbers the core computed, checked against the core's own outputs
(predict_memory's components and totals, rank_plans' grid, HAS's placements) and hand-counted invariants, not
against the figure. The Simulation and GPU-mix figures are checked through their pages in tests/test_app.py."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest

from frenzy_core.allocation import empty_allocation, free_by_type, submit
from frenzy_core.cluster import load_cluster, parse_cluster_yaml
from frenzy_core.memory import GIB, predict_memory
from frenzy_core.models import ZOO
from frenzy_core.plans import rank_plans
from frenzy_core.policies import REGISTRY
from frenzy_core.training import Parallelism, make_training
from frenzy_core.workload import default_training
from pages import charts

REPO_CLUSTER = "sample_clusters/modern-mixed.yaml"


def breakdowns(model_name: str, par: Parallelism) -> dict:
    """What the Model & memory page passes the chart: {method: (components GiB, total GiB, peak phase)}."""
    model = ZOO[model_name]
    training = make_training(seq_len=1024, global_batch=64, micro_batch=1, precision="bf16-master")
    out = {}
    for method in ("detailed", "paper"):
        mem = predict_memory(model, training, par, method=method)
        out[method] = ({k: v / GIB for k, v in mem.components().items()}, mem.total_bytes / GIB, mem.peak_phase)
    return out


def names_of(result: dict) -> list[str]:
    return list(dict.fromkeys([*result["detailed"][0], *result["paper"][0]]))


def axes(fig: go.Figure) -> list:
    return [fig.layout[k] for k in fig.layout if k.startswith(("xaxis", "yaxis"))]


@pytest.fixture(scope="module")
def memory_result():
    model = ZOO["llama-2-7b"]
    training = make_training(seq_len=2048, global_batch=64, micro_batch=1, precision="bf16-master")
    par = Parallelism(dp=2, tp=4, pp=1)
    out = {}
    for method in ("detailed", "paper"):
        mem = predict_memory(model, training, par, method=method)
        out[method] = ({k: v / GIB for k, v in mem.components().items()}, mem.total_bytes / GIB, mem.peak_phase)
    return out


@pytest.fixture(scope="module")
def placed():
    """modern-mixed with two jobs placed by HAS."""
    cluster = load_cluster(REPO_CLUSTER)
    alloc = empty_allocation(cluster)
    for i, name in enumerate(["llama-2-7b", "gpt2-xl"]):
        model = ZOO[name]
        alloc, job = submit(cluster, alloc, f"job-{i + 1}", name, rank_plans(model, default_training(model),
                                                                               cluster).plans)
        assert job is not None
    colour = {j.job_id: c for j, c in zip(alloc.jobs, ["#111111", "#222222"], strict=True)}
    return cluster, alloc, colour


# --- memory --------------------------------------------------------------------------------------------------------
def test_memory_bars_are_the_components_in_gib_and_stack_to_each_methods_total(memory_result):
    fig = charts.memory_chart(memory_result, names_of(memory_result), {80.0: ["H100-80GB"]}, False, ["t"], {})
    assert fig.layout.barmode == "stack"
    bars = {b.name: b for b in fig.data if b.type == "bar"}
    for i, method in enumerate(("detailed", "paper")):
        components = memory_result[method][0]
        for name, gib in components.items():
            if gib > 0:
                assert bars[name].x[i] == method and bars[name].y[i] == pytest.approx(gib)  # predict_memory's GiB
        stacked = sum(b.y[i] or 0.0 for b in bars.values())
        assert stacked == pytest.approx(memory_result[method][1], rel=1e-9)  # = predict_memory's total


def test_each_memory_component_has_one_colour_whatever_the_model():
    small = breakdowns("gpt2", Parallelism(dp=1, tp=1, pp=1))
    big = breakdowns("llama-2-13b", Parallelism(dp=2, tp=4, pp=2))
    colours = []
    for result in (small, big):
        fig = charts.memory_chart(result, names_of(result), {}, False, ["t"], {})
        colours.append({b.name: b.marker.color for b in fig.data})
    for name in set(colours[0]) & set(colours[1]):
        assert colours[0][name] == colours[1][name] == charts.COMPONENT_COLOURS[name]
    assert len(set(charts.COMPONENT_COLOURS.values())) == len(charts.COMPONENT_COLOURS)  # no two alike


def test_memory_lines_mark_which_gpus_fit_and_the_paper_bar_above_the_axis(memory_result):
    total = memory_result["detailed"][1]  # 37.3 GiB for this setup: fits 80 and 48 GiB, not 24
    assert 24 < total < 48
    names = names_of(memory_result)
    fig = charts.memory_chart(memory_result, names, {80.0: ["H100-80GB", "A100-80GB"], 48.0: ["L40S"],
                                                     24.0: ["L4"]}, False, ["t"], {})
    lines = [(s.y0, s.line.color) for s in fig.layout.shapes]
    assert lines == [(24.0, charts.NO_FIT_COLOUR), (48.0, charts.FIT_COLOUR), (80.0, charts.FIT_COLOUR)]
    labels = [a.text for a in fig.layout.annotations]
    assert labels[2].startswith("✓ H100-80GB, A100-80GB") and labels[0].startswith("✗ L4")
    assert list(fig.layout.yaxis.range) == [0, pytest.approx(80 * 1.15)]
    # the paper's 319 GiB is far above the 92 GiB axis: a note says so; on a log axis it fits and no note is drawn
    assert any("paper: 319 GiB" in t for t in labels)
    log = charts.memory_chart(memory_result, names, {80.0: ["H100-80GB"]}, True, ["t"], {})
    lo, hi = log.layout.yaxis.range  # log10 units
    assert log.layout.yaxis.type == "log" and 10 ** hi > memory_result["paper"][1] and 10 ** lo > 0
    assert not [a for a in log.layout.annotations if "paper:" in a.text]


def test_memory_hover_names_the_term_and_gib(memory_result):
    help_ = {"weights": "the model's parameters"}
    fig = charts.memory_chart(memory_result, names_of(memory_result), {}, False, ["t"], help_)
    weights = next(b for b in fig.data if b.name == "weights")
    assert "GiB" in weights.hovertemplate and weights.customdata[0] == "the model's parameters"


def test_a_breakdown_without_memory_draws_no_chart():
    empty = {"detailed": ({"weights": 0.0}, 0.0, "x"), "paper": ({"weights": 0.0}, 0.0, "x")}
    assert charts.memory_chart(empty, ["weights"], {80.0: ["H100-80GB"]}, False, ["t"], {}) is None


# --- plans ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranked():
    cluster = load_cluster(REPO_CLUSTER)
    model = ZOO["llama-2-7b"]
    result = rank_plans(model, default_training(model), cluster)
    grid = result.grid.assign(headroom_gib=result.grid["headroom_bytes"] / GIB)
    return grid, result.plan(0)


def test_headroom_heatmap_z_is_the_grids_headroom_with_one_star_on_the_best_plan(ranked):
    grid, best = ranked
    types = list(dict.fromkeys(grid["gpu_type"]))
    fig = charts.headroom_heatmaps(grid, types, best.pp, 50.0, best)
    at_p = grid[grid["pp"] == best.pp]
    assert [h.name for h in fig.data] == [t for t in types if (at_p["gpu_type"] == t).any()]
    cells = 0
    for heat in fig.data:
        for r in at_p[at_p["gpu_type"] == heat.name].itertuples():
            i, j = list(heat.y).index(str(r.dp)), list(heat.x).index(str(r.tp))
            assert heat.z[i][j] == pytest.approx(r.headroom_gib, abs=0.005)  # rank_plans' headroom, GiB
            assert heat.text[i][j] in (("✓", "★") if r.feasible else ("✗",))
            cells += 1
        assert "GiB" in heat.hovertemplate
    assert cells == len(at_p)
    stars = [(h.name, h.y[i], h.x[j]) for h in fig.data for i, row in enumerate(h.text) for j, m in enumerate(row)
             if m == "★"]
    assert stars == [(best.gpu_type, str(best.dp), str(best.tp))]
    scale = fig.layout.coloraxis
    assert (scale.cmin, scale.cmid, scale.cmax) == (-50.0, 0, 50.0)  # one scale for every GPU type
    other_p = next(int(v) for v in grid["pp"].unique() if v != best.pp)
    other = charts.headroom_heatmaps(grid, types, other_p, 50.0, best)
    assert not [m for h in other.data for row in h.text for m in row if m == "★"]


def test_a_pipeline_depth_without_splits_draws_no_heatmap(ranked):
    grid, best = ranked
    assert charts.headroom_heatmaps(grid, list(grid["gpu_type"].unique()), 10_000, 50.0, best) is None


# --- packing -------------------------------------------------------------------------------------------------------
def test_node_grid_draws_every_gpu_once_in_its_jobs_colour(placed):
    cluster, alloc, colour = placed
    fig = charts.node_grid(cluster, alloc, colour)
    cells = [(node, slot) for t in fig.data for node, slot in zip(t.y, t.base, strict=True)]
    assert len(cells) == len(set(cells)) == cluster.total_gpus
    by_name = {t.name: t for t in fig.data}
    for job in alloc.jobs:
        trace = by_name[charts.job_name(job)]
        assert len(trace.y) == job.plan.num_gpus and trace.marker.color == colour[job.job_id]
        held = {(cluster.nodes[ni].name, k) for ni, o in enumerate(alloc.owner) for k, x in enumerate(o)
                if x == job.job_id}
        assert set(zip(trace.y, trace.base, strict=True)) == held  # HAS's placement, slot by slot
    assert len(by_name["free"].y) == cluster.total_gpus - sum(j.plan.num_gpus for j in alloc.jobs)


def test_capacity_bars_are_the_free_and_used_gpus_per_type(placed):
    cluster, alloc, _ = placed
    caps = free_by_type(cluster, alloc)
    fig = charts.capacity_chart(caps)
    used, free = (next(t for t in fig.data if t.name == n) for n in ("used", "free"))
    for i, (gpu_type, (n_free, total)) in enumerate(caps.items()):
        assert used.x[i] == free.x[i] == gpu_type
        assert (free.y[i], used.y[i] + free.y[i]) == (n_free, total)
    assert "GPUs" in used.hovertemplate
    assert charts.capacity_chart({}) is None


def test_group_chart_sums_each_jobs_gpus_over_the_groups():
    cluster = parse_cluster_yaml("name: big\nnodes:\n  - {name: h, gpu_type: H100-80GB, num_gpus: 8, count: 100}\n"
                                 "  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 50}\n")
    alloc = empty_allocation(cluster)
    model = ZOO["llama-2-7b"]
    alloc, job = submit(cluster, alloc, "job-1", "llama-2-7b", rank_plans(model, default_training(model),
                                                                          cluster).plans)
    spans = [("h × 100", 0, 100), ("a × 50", 100, 150)]
    fig = charts.group_chart(cluster, alloc, {"job-1": "#111111"}, spans)
    bars = {t.name: t for t in fig.data}
    assert sum(bars[charts.job_name(job)].x) == job.plan.num_gpus
    assert sum(sum(t.x) for t in fig.data) == cluster.total_gpus == 1200
    assert list(bars["free"].y) == ["h × 100", "a × 50"]


# --- what every figure shares --------------------------------------------------------------------------------------
def test_every_policy_has_its_own_fixed_colour():
    assert set(REGISTRY) <= set(charts.POLICY_COLOURS)
    assert len(set(charts.POLICY_COLOURS.values())) == len(charts.POLICY_COLOURS)
    assert charts.colour("not-registered") == charts.colour("not-registered")  # a spare, always the same one


def test_config_keeps_the_modebar_and_saves_a_png():
    cfg = charts.config("memory")
    assert cfg["displaylogo"] is False and "displayModeBar" not in cfg  # zoom, pan, reset: Plotly's default
    assert cfg["toImageButtonOptions"] == {"format": "png", "scale": 2, "filename": "memory"}


def test_axes_use_thousands_separators_and_no_scientific_notation(memory_result, ranked, placed):
    cluster, alloc, colour = placed
    grid, best = ranked
    figs = [charts.memory_chart(memory_result, names_of(memory_result), {80.0: ["H100-80GB"]}, log, ["t"], {})
            for log in (False, True)]
    figs += [charts.headroom_heatmaps(grid, list(dict.fromkeys(grid["gpu_type"])), best.pp, 50.0, best),
             charts.node_grid(cluster, alloc, colour), charts.capacity_chart(free_by_type(cluster, alloc))]
    for fig in figs:
        assert fig.layout.separators == ".,"
        for axis in axes(fig):
            assert axis.exponentformat == "none" and axis.separatethousands is True


def test_chart_number_turns_nan_and_infinity_into_gaps():
    assert charts.chart_number(1.5) == 1.5
    assert charts.chart_number(math.nan) is None and charts.chart_number(math.inf) is None


# --- issue 23, reading the page: one colour and order per component and policy, CIs from 3 seeds, no empty charts --
def test_two_models_stack_the_same_component_in_the_same_colour_and_order():
    small = breakdowns("gpt2", Parallelism(dp=1, tp=1, pp=1))
    big = breakdowns("llama-2-13b", Parallelism(dp=2, tp=4, pp=2))
    drawn = []
    for result, names in ((small, names_of(small)), (big, names_of(big)[::-1])):  # the page's order is not the order
        fig = charts.memory_chart(result, names, {}, False, ["t"], {})
        drawn.append([(b.name, b.marker.color) for b in fig.data])
    for bars in drawn:
        names = [n for n, _ in bars]
        assert names == [n for n in charts.COMPONENT_COLOURS if n in names]  # the fixed order, bottom first
        assert all(c == charts.COMPONENT_COLOURS[n] for n, c in bars)
    assert dict(drawn[0])["weights"] == dict(drawn[1])["weights"] == charts.COMPONENT_COLOURS["weights"]


def test_a_policy_class_with_its_own_color_keeps_it_on_every_chart(monkeypatch):
    class Tinted:
        color = "#123456"

    monkeypatch.setitem(REGISTRY, "tinted", Tinted)
    assert charts.colour("tinted") == "#123456"
    assert charts.colour("fcfs") == charts.POLICY_COLOURS["fcfs"]  # no attribute: the fixed table


class _Run:
    def __init__(self, oom: int, arrival: list[float], start: list[float]):
        self.oom_failures = oom
        self.jobs = {"arrival_s": np.array(arrival), "start_s": np.array(start)}


class _Runs:
    """The two things oom_spec and queue_spec read of a MultiSeedResult: the runs and `ci` of a metric."""

    def __init__(self, runs: list[_Run]):
        self.results = runs

    def ci(self, metric: str):
        x = np.array([getattr(r, metric) for r in self.results], dtype=float)
        return float(x.mean()), float(x.min()), float(x.max())


def test_a_ci_is_shown_only_from_three_seeds():
    assert charts.MIN_CI_SEEDS == 3
    assert not charts.has_ci(2, 1.0, 2.0) and charts.has_ci(3, 1.0, 2.0)
    assert not charts.has_ci(3, float("nan"), float("nan"))
    assert charts.no_ci_note(1) == "1 seed: no confidence interval (needs 3)"
    assert charts.no_ci_note(2).startswith("2 seeds: no confidence interval") and charts.no_ci_note(3) is None


def test_no_oom_failure_anywhere_draws_no_chart_and_one_failure_does():
    clean = {"fcfs": _Runs([_Run(0, [0.0], [0.0])] * 3), "frenzy": _Runs([_Run(0, [0.0], [0.0])] * 3)}
    assert charts.oom_spec(clean) is None
    one = {**clean, "frenzy": _Runs([_Run(0, [0.0], [0.0]), _Run(0, [0.0], [0.0]), _Run(3, [0.0], [0.0])])}
    fig = charts.oom_spec(one)
    assert fig is not None and [b.y[0] for b in fig.data] == [0.0, 1.0]
    assert fig.data[0].error_y.array is None  # fcfs: 0 in every seed, a zero-width interval is not drawn


def test_a_queue_where_no_job_ever_waited_draws_no_chart():
    idle = {"fcfs": _Runs([_Run(0, [0.0, 10.0], [0.0, 10.0])])}
    assert charts.queue_spec(idle) is None
    waited = {"fcfs": _Runs([_Run(0, [0.0, 10.0], [0.0, 3600.0])])}
    assert charts.queue_spec(waited) is not None
