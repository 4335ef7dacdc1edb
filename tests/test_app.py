"""Every app page through the entry point (AppTest.from_file("app.py") then switch_page), with the inputs a user gets
wrong: a config.json that is not a model, a broken cluster YAML, a batch that does not divide, a trace with bad rows.

AppTest cannot upload files, so each upload has a paste alternative (a text area and a button) that goes through the
same handler; these tests drive that.
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from frenzy_core.models import ZOO  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
TIMEOUT = 30
PAGES = ["pages/overview.py", "pages/model_memory.py", "pages/plans.py", "pages/cluster_packing.py",
         "pages/simulation.py", "pages/gpu_mix.py"]
CRASH = "Something went wrong"  # app.py's last-resort message: must never show


def no_failure(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error if CRASH in e.value]


def shown(markdown: str) -> str:
    """A message as the user reads it: the app escapes user text before markdown (pages.common.md_escape)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def errors(at: AppTest) -> list[str]:
    return [shown(e.value) for e in at.error]


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture
def app(monkeypatch) -> AppTest:
    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    no_failure(at)
    return at


def open_page(at: AppTest, page: str) -> AppTest:
    at.switch_page(page).run()
    no_failure(at)
    return at


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_exception(app, page):
    open_page(app, page)
    assert app.title, f"{page} has no title"
    assert not errors(app), errors(app)


def test_sidebar_names_the_current_model_and_cluster(app):
    text = " ".join(c.value for c in app.sidebar.caption)
    assert "llama-2-7b" in text and "modern-mixed" in text


def test_default_cluster_comes_from_frenzy_cluster_env(monkeypatch):
    monkeypatch.setenv("FRENZY_CLUSTER", str(REPO / "sample_clusters" / "sia-64.yaml"))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    no_failure(at)
    assert at.session_state.cluster.name == "sia-64"


def test_bad_frenzy_cluster_env_warns_and_falls_back(monkeypatch, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [{name: x, gpu_type: NoSuchGPU, num_gpus: 8}]")
    monkeypatch.setenv("FRENZY_CLUSTER", str(bad))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    no_failure(at)
    assert at.session_state.cluster.name == "modern-mixed"
    assert any("FRENZY_CLUSTER" in shown(w.value) for w in at.warning)


# --- Model & memory ---------------------------------------------------------------------------------------------
def test_changing_a_model_value_changes_the_memory_figure(app):
    open_page(app, "pages/model_memory.py")
    before = metric(app, "Peak per GPU")
    app.number_input(key="hp_num_layers").set_value(16).run()
    no_failure(app)
    assert metric(app, "Peak per GPU") != before
    assert app.session_state.model.num_layers == 16
    assert app.session_state.model.name.endswith("-edited")


def test_picking_a_zoo_model_resets_the_hyperparameters(app):
    open_page(app, "pages/model_memory.py")
    app.selectbox(key="zoo_pick").set_value("mistral-7b").run()
    no_failure(app)
    assert app.number_input(key="hp_num_kv_heads").value == 8
    assert app.session_state.model.name == "mistral-7b"


def test_bad_hyperparameter_shows_error_and_keeps_the_last_good_model(app):
    open_page(app, "pages/model_memory.py")
    good = app.session_state.model
    app.number_input(key="hp_num_heads").set_value(7).run()
    no_failure(app)
    assert any("num_heads" in e for e in errors(app))
    assert app.session_state.model == good


def test_batch_that_does_not_divide_names_global_batch(app):
    open_page(app, "pages/model_memory.py")
    good = app.session_state.training
    app.number_input(key="tr_global_batch").set_value(63).run()
    no_failure(app)
    assert any("global_batch" in e for e in errors(app))
    assert app.session_state.training == good


@pytest.mark.parametrize(("text", "field"), [
    ('{"model_type": "bert", "hidden_size": 768}', "model_type"),
    ("{not json", "config.json"),
    ('{"model_type": "llama", "hidden_size": 4096}', "num_attention_heads"),
])
def test_invalid_config_json_shows_error_and_keeps_the_model(app, text, field):
    open_page(app, "pages/model_memory.py")
    good = app.session_state.model
    app.text_area(key="hf_text").input(text)
    app.button(key="hf_apply").click().run()
    no_failure(app)
    assert any(field in e for e in errors(app)), errors(app)
    assert app.session_state.model == good


def test_pasted_config_json_becomes_the_model(app):
    config = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 256, "n_layer": 4, "n_head": 4}
    open_page(app, "pages/model_memory.py")
    app.text_input(key="hf_name").input("tiny-gpt2")
    app.text_area(key="hf_text").input(json.dumps(config))
    app.button(key="hf_apply").click().run()
    no_failure(app)
    assert app.session_state.model.hidden_size == 256
    assert app.session_state.model.name == "tiny-gpt2"


# --- Plans ------------------------------------------------------------------------------------------------------
def test_plans_page_explains_the_top_plan_and_lists_plans(app):
    open_page(app, "pages/plans.py")
    assert any("d=" in s.value for s in app.success)
    assert len(app.dataframe[0].value) > 0


def test_plans_page_explains_when_nothing_fits(app):
    app.session_state.model = app.session_state.model.model_copy(update={"name": "huge"})
    open_page(app, "pages/cluster_packing.py")
    app.text_area(key="cl_yaml_text").input("name: tiny\nnodes: [{name: t, gpu_type: T4, num_gpus: 1}]")
    app.button(key="cl_yaml_apply").click().run()
    open_page(app, "pages/plans.py")
    assert any("No plan fits" in e for e in errors(app))


# --- Cluster & packing ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("yaml_text", "field"), [
    ("nodes: [{name: x, gpu_type: NoSuchGPU, num_gpus: 8}]", "gpu_type"),
    ("nodes: [{name: x, gpu_type: T4, num_gpus: -2}]", "num_gpus"),
    ("nodes: [{name: x, gpu_type: T4, num_gpus: 2}", "line"),
    ("name: no-nodes", "nodes"),
])
def test_broken_yaml_shows_error_and_keeps_the_cluster(app, yaml_text, field):
    open_page(app, "pages/cluster_packing.py")
    good = app.session_state.cluster
    app.text_area(key="cl_yaml_text").input(yaml_text)
    app.button(key="cl_yaml_apply").click().run()
    no_failure(app)
    assert any(field in e for e in errors(app)), errors(app)
    assert app.session_state.cluster == good


def paste_cluster(app: AppTest, text: str) -> None:
    open_page(app, "pages/cluster_packing.py")
    app.text_area(key="cl_yaml_text").input(text)
    app.button(key="cl_yaml_apply").click().run()
    no_failure(app)


def test_pasted_yaml_replaces_the_cluster(app):
    paste_cluster(app, "name: pasted\nnodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8, count: 2}]")
    assert app.session_state.cluster.name == "pasted"
    assert app.session_state.cluster.total_gpus == 16


def test_loading_a_sample_cluster(app):
    open_page(app, "pages/cluster_packing.py")
    app.selectbox(key="cl_sample").set_value("sia-64")
    app.button(key="cl_load_sample").click().run()
    no_failure(app)
    assert app.session_state.cluster.name == "sia-64"


def test_submitting_by_model_places_then_release_frees(app):
    open_page(app, "pages/cluster_packing.py")
    app.selectbox(key="pack_model").set_value("gpt2-xl")
    app.button(key="pack_submit").click().run()
    no_failure(app)
    alloc = app.session_state.allocation
    assert len(alloc.jobs) == 1 and "placed" in app.success[0].value
    assert int(alloc.free_per_node().sum()) == app.session_state.cluster.total_gpus - alloc.jobs[0].plan.num_gpus
    app.button(key="pack_release_btn").click().run()
    no_failure(app)
    assert not app.session_state.allocation.jobs


@pytest.mark.parametrize(("objective", "floor"), [("gpus", 0.5), ("time", 0.0), ("time", 0.9)])
def test_packing_walks_the_plans_in_the_chosen_objective_above_the_chosen_floor(app, objective, floor):
    """The page places what the core places for the same objective and floor: rank_plans(objective), then HAS over
    the plans that pass the floor, on an empty allocation."""
    from frenzy_core.allocation import empty_allocation, submit
    from frenzy_core.plans import rank_plans
    from frenzy_core.workload import default_training

    open_page(app, "pages/cluster_packing.py")
    app.selectbox(key="pack_model").set_value("gpt2-xl")
    app.session_state["pack_objective"] = objective
    app.slider(key="pack_floor").set_value(floor)
    app.button(key="pack_submit").click().run()
    no_failure(app)
    cluster, model = app.session_state.cluster, ZOO["gpt2-xl"]
    want = submit(cluster, empty_allocation(cluster), "job-1", "gpt2-xl",
                  rank_plans(model, default_training(model), cluster, objective=objective).plans,
                  scaling_floor=floor)[1]
    got = app.session_state.allocation.jobs[0]
    assert got.plan == want.plan and got.placement == want.placement


def test_packing_takes_the_model_page_model_with_its_setup(app):
    from frenzy_core.allocation import empty_allocation, submit
    from frenzy_core.plans import rank_plans

    open_page(app, "pages/cluster_packing.py")
    app.selectbox(key="pack_model").select_index(0)  # the first entry: the Model & memory page's model
    app.button(key="pack_submit").click().run()
    no_failure(app)
    ss = app.session_state
    job = ss.allocation.jobs[0]
    assert job.model == ss.model.name
    want = submit(ss.cluster, empty_allocation(ss.cluster), "job-1", ss.model.name,
                  rank_plans(ss.model, ss.training, ss.cluster).plans)[1]
    assert job.plan == want.plan


# --- Simulation -------------------------------------------------------------------------------------------------
def test_small_simulation_runs_and_its_table_appears(sim):
    app = sim
    results = app.session_state.sim_results
    assert set(results) == {"frenzy", "frenzy-eft", "fcfs"}
    summary = next(d.value for d in app.dataframe if "policy" in d.value.columns and "avg JCT h" in d.value.columns)
    assert list(summary["policy"]) == ["frenzy", "frenzy-eft", "fcfs"]
    assert any(b.label.startswith("Download per-job") for b in app.get("download_button"))


def test_the_simulation_page_says_why_the_averages_differ(sim):
    """The 'why' block shows frenzy_core.comparison's sentences, each policy against the lowest average JCT."""
    from frenzy_core.comparison import explain_results
    from pages.common import md_escape

    want = explain_results(sim.session_state.sim_results)
    assert len(want) == 2  # three policies: two compared with the best
    assert any(e.label == "Why the averages differ" for e in sim.expander)
    shown = " ".join(m.value for m in sim.markdown)
    for lines in want.values():  # every sentence, as the page escapes it (job ids come from the trace)
        for line in lines:
            assert md_escape(line) in shown


# --- the Plotly charts carry the core's numbers (issue 23: Plotly, for zoom and pan) ------------------------------
HOUR = 3600.0
POLICY_COLOURS = {"frenzy": "#1565c0", "frenzy-eft": "#6a1b9a", "fcfs": "#ef6c00"}  # pages/charts.py, fixed


def charts(at: AppTest) -> dict[str, dict]:
    """Each Plotly chart on the page by the name pages/charts.py gives it in layout.meta: the figure as sent to the
    browser (NaN or Infinity in it fails, as JSON.parse would; numpy arrays come base64-encoded and are decoded)."""
    def no_nan(token: str):
        raise AssertionError(f"{token} in a chart's figure")

    figs = [json.loads(c.proto.spec, parse_constant=no_nan) for c in at.get("plotly_chart")]
    assert all(json.loads(c.proto.config)["displaylogo"] is False for c in at.get("plotly_chart"))
    return {f["layout"]["meta"]["chart"]: f for f in figs}


def values(v) -> list:
    """A trace's array as a list: Plotly sends numpy arrays as {"dtype", "bdata"} (base64 of the raw bytes)."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        assert np.isfinite(a).all(), "NaN or infinity in a chart's array"
        return a.reshape(v["shape"]).tolist() if "shape" in v else a.tolist()
    return list(v)


def trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t.get("name") == name)


def error_bar(t: dict) -> tuple[list, list] | None:
    """(low, high) bounds of a trace's error bars, from Plotly's distances below and above the point."""
    if "error_y" not in t:
        return None
    y = values(t["y"])
    return ([m - d for m, d in zip(y, values(t["error_y"]["arrayminus"]), strict=True)],
            [m + d for m, d in zip(y, values(t["error_y"]["array"]), strict=True)])


def t_interval(values) -> tuple[float, float, float]:
    """(mean, low, high): the 95% Student-t interval, low clipped at 0, worked out here from the per-seed values."""
    x = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), max(float(x.mean() - half), 0.0), float(x.mean() + half)


def finite_jct_s(r) -> np.ndarray:
    jct = np.asarray(r.jobs["jct_s"], dtype=float)
    return jct[np.isfinite(jct)]


@pytest.fixture
def sim(app) -> AppTest:
    """The Simulation page after a 40-job, 3-seed run (3: the fewest seeds the charts draw a CI with; the result
    store makes reruns of it instant)."""
    open_page(app, "pages/simulation.py")
    app.number_input(key="sim_limit").set_value(40)
    app.number_input(key="sim_seeds").set_value(3)
    app.button(key="sim_run").click().run()
    no_failure(app)
    return app


def test_every_chart_page_draws_plotly_figures_and_no_vega_lite(app):
    want = {"pages/model_memory.py": {"memory"}, "pages/plans.py": {"headroom"},
            "pages/cluster_packing.py": {"node_grid", "capacity"}, "pages/simulation.py": {"arrivals"}}
    for page, names in want.items():
        open_page(app, page)
        assert set(charts(app)) == names, page
        assert not app.get("vega_lite_chart"), page


def test_arrivals_histogram_holds_every_trace_arrival_in_hours(app):
    open_page(app, "pages/simulation.py")
    hist = charts(app)["arrivals"]["data"][0]
    arrivals = sorted(j.arrival_s / HOUR for j in app.session_state.sim_trace.jobs)
    assert sorted(values(hist["x"])) == pytest.approx(arrivals) and len(arrivals) == 200
    assert hist["type"] == "histogram" and hist["nbinsx"] == 40 and " h" in hist["hovertemplate"]


def test_cdf_points_are_the_sorted_jcts_of_all_seeds(sim):
    fig = charts(sim)["cdf"]
    assert fig["layout"]["xaxis"]["type"] == "log"
    for name, res in sim.session_state.sim_results.items():
        jct_h = np.sort(np.concatenate([finite_jct_s(r) for r in res.results])) / HOUR
        line = trace(fig, name)
        assert values(line["x"]) == pytest.approx(list(jct_h))
        assert values(line["y"]) == pytest.approx([(i + 1) / jct_h.size for i in range(jct_h.size)])
        assert line["line"]["color"] == POLICY_COLOURS[name] and line["line"]["shape"] == "hv"
    assert [t["name"] for t in fig["data"]] == ["frenzy", "frenzy-eft", "fcfs"]


def test_jct_bars_are_the_seed_means_with_their_t_intervals(sim):
    fig = charts(sim)["jct_bars"]
    for name, res in sim.session_state.sim_results.items():
        bars = trace(fig, name)
        assert bars["x"] == ["average", "p99"] and bars["marker"]["color"] == POLICY_COLOURS[name]
        low, high = error_bar(bars)
        per_seed = {"average": [finite_jct_s(r).mean() for r in res.results],
                    "p99": [np.percentile(finite_jct_s(r), 99) for r in res.results]}
        for i, seeds in enumerate(per_seed.values()):
            mean, lo, hi = (v / HOUR for v in t_interval(seeds))
            assert (values(bars["y"])[i], low[i], high[i]) == pytest.approx((mean, lo, hi))
        assert " h" in bars["hovertemplate"] and "95% CI" in bars["hovertemplate"]
    assert sum(len(t["x"]) for t in fig["data"]) == 6


def test_queue_lines_count_jobs_arrived_and_not_started_on_seed_0(sim):
    fig = charts(sim)["queue"]
    for name, res in sim.session_state.sim_results.items():
        r = res.results[0]
        arrival, start = np.asarray(r.jobs["arrival_s"], float), np.asarray(r.jobs["start_s"], float)
        line = trace(fig, name)
        hours, jobs = values(line["x"]), values(line["y"])
        assert hours and hours[0] == pytest.approx(arrival.min() / HOUR)
        for h, n in zip(hours, jobs, strict=True):  # the level after every event at that instant
            t = h * HOUR
            assert n == int((arrival <= t + 1e-6).sum() - (start <= t + 1e-6).sum())


def test_utilisation_lines_are_busy_gpus_over_the_cluster_on_seed_0(sim):
    fig = charts(sim)["utilisation"]
    total = sim.session_state.cluster.total_gpus
    for name, res in sim.session_state.sim_results.items():
        r = res.results[0]
        line = trace(fig, name)
        assert values(line["x"]) == pytest.approx(list(np.asarray(r.util_times_s) / HOUR))
        busy = values(line["y"])
        assert busy == pytest.approx(list(100 * r.util_busy.sum(axis=1) / total))
        assert all(0 <= b <= 100 for b in busy)


def test_gpu_hours_bars_add_up_to_the_gpu_hours_the_jobs_used(sim):
    fig = charts(sim)["gpu_hours"]
    types = {n.gpu_type for n in sim.session_state.cluster.nodes}
    for name, res in sim.session_state.sim_results.items():
        bars = trace(fig, name)
        mine = dict(zip(bars["x"], values(bars["y"]), strict=True))
        assert sorted(mine) == sorted(types)
        by_jobs = np.mean([np.nansum(r.jobs["gpu_hours"]) for r in res.results])  # per-job accounting
        assert sum(mine.values()) == pytest.approx(by_jobs, rel=1e-6)
        assert "GPU-hours" in bars["hovertemplate"]


def test_oom_bars_are_the_mean_failures_per_run(sim):
    results = sim.session_state.sim_results
    if all(r.oom_failures == 0 for res in results.values() for r in res.results):
        assert "oom" not in charts(sim)  # nothing to draw: a sentence instead (the test below)
        return
    fig = charts(sim)["oom"]
    for name, res in results.items():
        bar = trace(fig, name)
        per_seed = [r.oom_failures for r in res.results]
        assert values(bar["y"]) == [pytest.approx(np.mean(per_seed))]
        (low,), (high,) = error_bar(bar)
        if np.std(per_seed) == 0:
            assert low == high == pytest.approx(per_seed[0])
        else:
            assert (low, high) == pytest.approx(t_interval(per_seed)[1:])


def test_one_seed_draws_no_error_bars_and_no_nan(app):
    run_simulation_page(app, seeds=1)
    figs = charts(app)  # parsing refuses NaN
    assert {"cdf", "jct_bars", "utilisation", "gpu_hours"} <= set(figs)
    assert not [t for name in ("jct_bars", "oom") if name in figs for t in figs[name]["data"] if error_bar(t)]
    assert all("95% CI" not in t["hovertemplate"] for t in figs["jct_bars"]["data"])


def test_trace_with_broken_rows_warns_and_still_loads(app):
    open_page(app, "pages/simulation.py")
    app.radio(key="sim_kind").set_value("upload or paste").run()
    app.selectbox(key="sim_fmt").set_value("philly")
    app.text_area(key="sim_paste").input(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 00:01:56,66.0,1,66.0,a\n"
        "2017-10-09 00:02:56,oops,1,66.0,a\n"
        "2017-10-09 00:03:56,120.0,2,240.0,a\n").run()
    no_failure(app)
    assert any("row 2" in shown(w.value) for w in app.warning), [w.value for w in app.warning]
    assert len(app.session_state.sim_trace.jobs) == 2


def test_trace_in_the_wrong_format_shows_error(app):
    open_page(app, "pages/simulation.py")
    app.radio(key="sim_kind").set_value("upload or paste").run()
    app.selectbox(key="sim_fmt").set_value("philly")
    app.text_area(key="sim_paste").input("a,b\n1,2\n").run()
    no_failure(app)
    assert errors(app)


# --- GPU mix what-if ----------------------------------------------------------------------------------------------
def run_simulation_page(app: AppTest, seeds: int, jobs: int = 30) -> AppTest:
    """The Simulation page after a run of its default policies on the first `jobs` jobs."""
    open_page(app, "pages/simulation.py")
    app.number_input(key="sim_limit").set_value(jobs)
    app.number_input(key="sim_seeds").set_value(seeds)
    app.button(key="sim_run").click().run()
    no_failure(app)
    return app


def run_whatif_page(app: AppTest, seeds: int) -> AppTest:
    """The GPU mix page after a what-if of the default candidates on 40 jobs."""
    open_page(app, "pages/gpu_mix.py")
    app.number_input(key="wi_limit").set_value(40)
    app.number_input(key="wi_seeds").set_value(seeds)
    app.button(key="wi_run").click().run()
    no_failure(app)
    return app


def frontier_points(fig: dict) -> list[dict]:
    """The candidates' points from the two marker traces (within / over budget), in the result's order."""
    out = []
    for t in fig["data"]:
        if t["name"] in ("within budget", "over budget"):
            bounds = error_bar(t)
            for i, (name, cost, jct) in enumerate(zip(t["text"], values(t["x"]), values(t["y"]), strict=True)):
                out.append({"candidate": name, "cost": cost, "jct_h": jct, "budget": t["name"],
                            "ci": None if bounds is None else (bounds[0][i], bounds[1][i])})
    return out


def test_whatif_simulates_every_candidate_and_marks_the_frontier(app):
    run_whatif_page(app, seeds=1)
    table = app.session_state.wi_results
    assert list(table["candidate"]) == ["today", "+16 H100", "+32 L40S", "+24 A100-80GB"]
    assert table["on frontier"].any()
    points = frontier_points(charts(app)["frontier"])  # one seed: parsing refuses NaN, and no CI is drawn
    assert sorted(p["candidate"] for p in points) == sorted(table["candidate"])
    assert all(p["ci"] is None for p in points)


def test_frontier_chart_holds_each_candidate_its_ci_the_frontier_and_the_budget(app):
    run_whatif_page(app, seeds=3)  # 3: the fewest seeds the chart draws a CI with
    result = app.session_state.wi_whatif
    fig = charts(app)["frontier"]
    points = {p["candidate"]: p for p in frontier_points(fig)}
    assert sorted(points) == sorted(["today", "+16 H100", "+32 L40S", "+24 A100-80GB"])
    for c in result.candidates:
        p = points[c.candidate]
        mean, lo, hi = (v / HOUR for v in t_interval(c.samples_s))
        assert (p["cost"], p["jct_h"], *p["ci"]) == pytest.approx((c.cost_per_hour, mean, lo, hi))
        assert p["budget"] == ("within budget" if c.added_cost_per_hour <= result.budget_per_hour + 1e-9
                               else "over budget")
    line = trace(fig, "frontier")
    # the frontier: no other candidate is as cheap and faster (worked out here from the points)
    pareto = sorted((p for p in points.values() if not any(q["cost"] <= p["cost"] and q["jct_h"] < p["jct_h"]
                                                           for q in points.values() if q is not p)),
                    key=lambda p: p["cost"])
    assert values(line["x"]) == pytest.approx([p["cost"] for p in pareto])
    assert values(line["y"]) == pytest.approx([p["jct_h"] for p in pareto])
    (rule,) = fig["layout"]["shapes"]
    assert rule["x0"] == rule["x1"] == pytest.approx(result.row("today").cost_per_hour + result.budget_per_hour)
    assert "$" in trace(fig, "within budget")["hovertemplate"]


def test_picking_a_learned_position_model_pulls_the_sequence_down_to_its_table(app):
    at = app
    open_page(at, "pages/model_memory.py")
    at.number_input(key="tr_seq_len").set_value(2048).run()
    at.selectbox(key="zoo_pick").set_value("gpt2").run()
    no_failure(at)
    assert at.session_state.model.name == "gpt2" and at.session_state.training.seq_len == 1024
    assert not at.error


# --- Scenario, share link, state across pages (issue 11) --------------------------------------------------------
def _sample_code(name: str) -> str:
    from frenzy_core.scenario import encode_share, load_scenario

    return encode_share(load_scenario(REPO / "sample_scenarios" / f"{name}.yaml"))


def test_share_link_restores_the_scenario_on_a_fresh_session(monkeypatch):
    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["s"] = _sample_code("ml-engineer")
    at.run()
    no_failure(at)
    assert at.session_state.model.name == "llama-3.1-8b" and at.session_state.training.global_batch == 256
    open_page(at, "pages/plans.py")
    assert at.number_input(key="plans_max_gpus").value == 32 and at.number_input(key="plans_deadline_h").value == 72
    assert at.session_state.plans_objective == "time"
    plans = at.dataframe[-1].value  # the ranked table
    assert (plans["GPUs"] <= 32).all() and (plans["time to train (h)"] <= 72).all()


def test_a_share_link_carries_the_export_format_to_the_plans_page(monkeypatch):
    from frenzy_core.scenario import encode_share, load_scenario

    s = load_scenario(REPO / "sample_scenarios" / "ml-engineer.yaml")
    s = s.model_copy(update={"plans": s.plans.model_copy(update={"export_format": "slurm"})})
    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["s"] = encode_share(s)
    at.run()
    no_failure(at)
    open_page(at, "pages/plans.py")
    assert at.session_state.plans_export_format == "slurm"


def test_a_damaged_share_link_shows_an_error_and_keeps_the_defaults(monkeypatch):
    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["s"] = "eNq-not-a-real-code"
    at.run()
    no_failure(at)
    assert any("share link" in e for e in errors(at)) and at.session_state.model.name == "llama-2-7b"


def test_loading_a_sample_scenario_sets_every_page(app):
    open_page(app, "pages/overview.py")
    app.selectbox(key="scn_sample").set_value("procurement")
    app.button(key="scn_load").click().run()
    no_failure(app)
    assert app.session_state.cluster.name == "modern-mixed" and app.session_state.plans_objective == "cost"
    open_page(app, "pages/gpu_mix.py")
    assert app.number_input(key="wi_budget").value == 150 and app.number_input(key="wi_seeds").value == 5
    open_page(app, "pages/simulation.py")
    assert app.multiselect(key="sim_policies").value == ["frenzy-eft", "fcfs"]


def test_settings_survive_a_visit_to_another_page(app):
    open_page(app, "pages/plans.py")
    app.number_input(key="plans_tokens").set_value(2e11).run()
    app.number_input(key="plans_max_gpus").set_value(8).run()
    open_page(app, "pages/gpu_mix.py")
    app.number_input(key="wi_budget").set_value(250.0).run()
    open_page(app, "pages/simulation.py")
    open_page(app, "pages/plans.py")
    assert app.number_input(key="plans_tokens").value == 2e11 and app.number_input(key="plans_max_gpus").value == 8
    open_page(app, "pages/gpu_mix.py")
    assert app.number_input(key="wi_budget").value == 250.0


def test_plans_constraints_filter_the_table_and_name_themselves_when_nothing_is_left(app):
    open_page(app, "pages/plans.py")
    app.number_input(key="plans_max_gpus").set_value(8).run()
    no_failure(app)
    assert (app.dataframe[-1].value["GPUs"] <= 8).all()
    app.number_input(key="plans_deadline_h").set_value(0.01).run()
    no_failure(app)
    assert any("deadline" in e for e in errors(app)), errors(app)


def test_plans_heatmap_opens_on_the_winners_p_and_lists_the_best_per_type(app):
    from frenzy_core.plans import rank_plans

    open_page(app, "pages/plans.py")
    s = app.session_state
    best = rank_plans(s.model, s.training, s.cluster, scaling_floor=0.5).plans[0]
    assert s.plans_p == best.pp
    per_type = next(d.value for d in app.dataframe if len(d.value) == len({p.gpu_type for p in
                                                                         rank_plans(s.model, s.training, s.cluster,
                                                                                    scaling_floor=0.5).plans}))
    assert per_type["GPU type"].is_unique


def test_launch_panel_shows_the_chosen_plans_file(app):
    open_page(app, "pages/plans.py")
    text = app.code[0].value
    assert "--tensor-model-parallel-size" in text
    app.session_state.plans_export_format = "deepspeed"
    app.run()
    no_failure(app)
    cfg = json.loads(app.code[0].value)
    assert cfg["train_batch_size"] == app.session_state.training.global_batch


def test_model_page_log_scale_and_term_formulas(app):
    open_page(app, "pages/model_memory.py")
    app.toggle(key="mem_log_scale").set_value(True).run()
    no_failure(app)
    table = next(m.value for m in app.markdown if "what it is" in m.value)
    assert "| optimizer |" in table and "fp32 master copy" in table


def test_a_stale_config_error_goes_once_a_zoo_model_is_picked(app):
    open_page(app, "pages/model_memory.py")
    app.text_area(key="hf_text").input("{not json")
    app.button(key="hf_apply").click().run()
    assert any("config.json" in e for e in errors(app))
    app.selectbox(key="zoo_pick").set_value("gpt2").run()
    no_failure(app)
    assert not any("config.json" in e for e in errors(app)), errors(app)


def test_a_1000_node_cluster_is_shown_as_node_groups(app):
    paste_cluster(app, "name: big\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 900}, "
                       "{name: a, gpu_type: A100-80GB, num_gpus: 8, count: 100}]")
    assert len(app.session_state.cluster.nodes) == 1000
    app.button(key="pack_submit").click().run()
    no_failure(app)
    assert any("placed" in s.value for s in app.success)
    assert any("groups of identical nodes" in c.value for c in app.caption)


def test_a_repeated_simulation_comes_from_the_cache(app):
    open_page(app, "pages/simulation.py")
    app.number_input(key="sim_limit").set_value(30)
    app.number_input(key="sim_seeds").set_value(1)
    app.button(key="sim_run").click().run()
    first = app.session_state.sim_results
    app.button(key="sim_run").click().run()
    no_failure(app)
    assert "from the cache" in app.session_state.sim_meta
    assert app.session_state.sim_results["frenzy"] is first["frenzy"]


def test_the_framework_picks_the_memory_recipe_and_unknown_shows_the_band(app):
    from frenzy_core.memory import GIB, predict_memory, predict_memory_band

    open_page(app, "pages/model_memory.py")
    app.selectbox(key="tr_framework").set_value("megatron").run()
    no_failure(app)
    m, t, p = app.session_state.model, app.session_state.training, app.session_state.par
    assert t.framework == "megatron"
    want = predict_memory(m, t, p).total_bytes / GIB  # the core's number for the recipe the page now uses
    assert metric(app, "Peak per GPU") == f"{want:.3g} GiB"
    app.selectbox(key="tr_framework").set_value("unknown").run()
    no_failure(app)
    low, high = predict_memory_band(app.session_state.model, app.session_state.training, app.session_state.par)
    warning = " ".join(shown(w.value) for w in app.warning)
    assert f"{low.total_bytes / GIB:.2f}-{high.total_bytes / GIB:.2f} GiB" in warning


def test_gpu_mix_edited_tables_survive_a_visit_to_another_page(app):
    # an edit in the candidates editor (as the frontend reports it: the widget's delta state), then another page
    open_page(app, "pages/gpu_mix.py")
    # (deleting row 0 tells a kept table from an edit applied twice on return, which would delete two rows)
    app.session_state["wi_candidates"] = {"edited_rows": {"1": {"count": 40}}, "added_rows": [],
                                          "deleted_rows": [0]}
    app.run()
    no_failure(app)
    kept = app.session_state.kept_wi_table
    assert list(kept["candidate"]) == ["+32 L40S", "+24 A100-80GB"] and list(kept["count"]) == [40, 24]
    open_page(app, "pages/plans.py")
    open_page(app, "pages/gpu_mix.py")  # the editor's widget state is gone: the kept table is its base
    assert list(app.session_state.wi_table["candidate"]) == ["+32 L40S", "+24 A100-80GB"]
    assert list(app.session_state.wi_table["count"]) == [40, 24]
    app.number_input(key="wi_limit").set_value(40)
    app.number_input(key="wi_seeds").set_value(1)
    app.button(key="wi_run").click().run()
    no_failure(app)
    assert list(app.session_state.wi_results["candidate"]) == ["today", "+32 L40S", "+24 A100-80GB"]


def test_more_training_options_and_the_context_split_reach_the_core(app):
    """LoRA, a chunked loss and cp=2 set on the page give exactly the core's figure for those specs."""
    from frenzy_core.memory import GIB, predict_memory

    open_page(app, "pages/model_memory.py")
    before = metric(app, "Peak per GPU")
    app.number_input(key="tr_lora_rank").set_value(16)
    app.number_input(key="tr_loss_chunks").set_value(8)
    app.number_input(key="par_cp").set_value(2).run()
    no_failure(app)
    m, t, p = app.session_state.model, app.session_state.training, app.session_state.par
    assert (t.lora_rank, t.loss_chunks, p.cp) == (16, 8, 2)
    want = predict_memory(m, t, p).total_bytes / GIB
    assert metric(app, "Peak per GPU") == f"{want:.3g} GiB" != before
    # LoRA freezes the base: with an adapter of rank 16 the peak is far under full training's
    assert want < predict_memory(m, t.model_copy(update={"lora_rank": 0}), p).total_bytes / GIB / 2
    app.number_input(key="par_vp").set_value(2).run()  # interleaving needs p > 1: an error naming vp
    assert any("vp" in e for e in errors(app)) and app.session_state.par.vp == 1


def test_stack_switches_show_only_under_their_framework_and_never_strand_an_error(app):
    open_page(app, "pages/model_memory.py")
    def widgets():
        return {w.key for w in app.number_input} | {w.key for w in app.checkbox}

    assert not {"tr_reduce_bucket_size", "tr_compile", "tr_moe_grouped_gemm"} & widgets()
    app.selectbox(key="tr_framework").set_value("deepspeed").run()
    app.selectbox(key="tr_zero_stage").set_value(3).run()
    app.number_input(key="tr_reduce_bucket_size").set_value(50_000_000)
    app.number_input(key="tr_stage3_max_live_parameters").set_value(2_000_000_000).run()
    no_failure(app)
    t = app.session_state.training
    assert (t.framework, t.reduce_bucket_size, t.stage3_max_live_parameters) == ("deepspeed", 50_000_000, 2 * 10**9)
    # under another stack the DeepSpeed sizes have no widget and count as 0: no error the user cannot reach
    app.selectbox(key="tr_framework").set_value("pytorch").run()
    no_failure(app)
    assert not errors(app) and app.session_state.training.reduce_bucket_size == 0
    assert "tr_reduce_bucket_size" not in widgets()
    app.selectbox(key="tr_framework").set_value("fsdp2").run()
    app.checkbox(key="tr_compile").check().run()
    no_failure(app)
    assert app.session_state.training.compile and not errors(app)


def test_a_shared_moe_split_reaches_the_memory_page_and_survives_other_pages(monkeypatch):
    """A share link with cp, ep and Megatron's grouped GEMM: the page shows them, computes with them, keeps them."""
    from frenzy_core.memory import GIB, predict_memory
    from frenzy_core.scenario import Scenario, SplitSpec, encode_share, load_scenario
    from frenzy_core.training import TrainingSpec

    cluster = load_scenario(REPO / "sample_scenarios" / "ml-engineer.yaml").cluster
    s = Scenario(model="mixtral-8x7b", cluster=cluster, split=SplitSpec(dp=4, tp=2, pp=1, cp=2, ep=4),
                 training=TrainingSpec(seq_len=4096, global_batch=64, framework="megatron", moe_grouped_gemm=True,
                                       distributed_optimizer=True, recompute="full"))
    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["s"] = encode_share(s)
    at.run()
    no_failure(at)
    open_page(at, "pages/model_memory.py")
    assert (at.number_input(key="par_cp").value, at.number_input(key="par_ep").value) == (2, 4)
    assert at.checkbox(key="tr_moe_grouped_gemm").value
    want = predict_memory(s.model_spec, s.training, s.split.parallelism()).total_bytes / GIB
    assert metric(at, "Peak per GPU") == f"{want:.3g} GiB"
    open_page(at, "pages/plans.py")
    open_page(at, "pages/model_memory.py")
    open_page(at, "pages/overview.py")
    assert at.session_state.par == s.split.parallelism() and at.session_state.training == s.training
    assert at.session_state.scenario_last.split == s.split  # and the next share link carries it


def test_plans_of_an_moe_model_show_their_expert_parallel_size(app):
    open_page(app, "pages/model_memory.py")
    app.selectbox(key="zoo_pick").set_value("mixtral-8x7b").run()
    app.selectbox(key="tr_framework").set_value("megatron").run()
    no_failure(app)
    open_page(app, "pages/plans.py")
    table = app.dataframe[-1].value  # the ranked plans
    assert "ep (experts)" in table.columns and (table["ep (experts)"] > 1).any()
    assert (table["d (data)"] % table["ep (experts)"] == 0).all() and (8 % table["ep (experts)"] == 0).all()


def test_a_rotary_model_past_its_trained_context_is_warned_on_the_memory_and_plans_pages(app):
    open_page(app, "pages/model_memory.py")
    app.selectbox(key="zoo_pick").set_value("llama-2-7b").run()
    assert not any("positions" in w.value for w in app.warning)
    app.number_input(key="tr_seq_len").set_value(65536).run()
    no_failure(app)
    shown = [w.value.replace("\\", "") for w in app.warning]  # markdown-escaped on the page: unescape to read
    assert any("beyond the 4,096 positions llama-2-7b was trained on" in w for w in shown), shown
    open_page(app, "pages/plans.py")
    assert any("beyond the 4,096 positions" in w.value.replace("\\", "") for w in app.warning)


def test_plans_of_a_long_sequence_show_cp_and_a_heatmap_per_cp(app):
    open_page(app, "pages/model_memory.py")
    app.selectbox(key="zoo_pick").set_value("llama-3.1-8b").run()
    app.number_input(key="tr_seq_len").set_value(65536)
    app.number_input(key="tr_global_batch").set_value(16).run()
    no_failure(app)
    open_page(app, "pages/plans.py")
    table = app.dataframe[-1].value
    assert "cp (context)" in table.columns and (table["cp (context)"] > 1).any()
    assert (table["GPUs"] == table["d (data)"] * table["t (tensor)"] * table["p (pipeline)"]
            * table["cp (context)"]).all()
    best_cp = int(table["cp (context)"].iloc[0])
    assert int(app.select_slider(key="plans_cp").value) == best_cp  # opens on the best plan's cp
    slider = app.select_slider(key="plans_cp")
    slider.set_value(max(slider.options, key=int)).run()
    no_failure(app)
    open_page(app, "pages/overview.py")
    open_page(app, "pages/plans.py")  # Streamlit dropped the slider's state: it comes back on the best plan's cp
    assert int(app.select_slider(key="plans_cp").value) == best_cp


def test_deepspeed_zero3_warns_that_its_recipe_under_predicts_the_held_out_gpu_peak(app):
    open_page(app, "pages/model_memory.py")
    assert not [w for w in app.warning if "DeepSpeed ZeRO-3" in w.value]
    app.selectbox(key="tr_framework").set_value("deepspeed").run()
    app.selectbox(key="tr_zero_stage").set_value(3).run()
    no_failure(app)
    assert any("23.8% low" in w.value for w in app.warning)


@pytest.mark.parametrize(("value", "text"), [(3615.2, "3,615"), (362.4, "362"), (36.24, "36.2"), (7.054, "7.05"),
                                            (0.1234, "0.123"), (99.96, "100"), (0.0, "0"), (float("nan"), "n/a"),
                                            (1e12, "1,000,000,000,000")])
def test_one_number_format_never_scientific_with_thousands_separators(value, text):
    from pages.common import fmt_num

    assert fmt_num(value) == text


def test_counts_are_integers_unless_a_mean_over_seeds_is_not():
    from pages.common import fmt_count

    assert (fmt_count(60.0), fmt_count(86.6), fmt_count(1234)) == ("60", "86.6", "1,234")


def test_the_memory_page_names_the_smallest_split_that_fits_on_each_gpu_type(app):
    """llama-2-7b (bf16 weights alone 12.6 GiB, 16 bytes a parameter of model states: ~100 GiB): one GPU holds it on
    none of the sample cluster's types; the page's split is rank_plans' fewest-GPU plan on that type alone and fits
    within the 10% margin."""
    from frenzy_core.cluster import Cluster, Node
    from frenzy_core.plans import rank_plans

    open_page(app, "pages/model_memory.py")
    app.selectbox(key="zoo_pick").set_value("llama-2-7b").run()
    no_failure(app)
    table = app.table[0].value
    ss = app.session_state
    for _, row in table.iterrows():
        g = ss.cluster.gpu(row["GPU"])
        one = Cluster(name="one", gpu_types=(g,), nodes=tuple(Node(name=f"n{i}", gpu_type=g.name, num_gpus=8)
                                                              for i in range(128)))
        best = rank_plans(ss.model, ss.training, one, objective="gpus").plans[0]
        assert row["smallest split that fits"].startswith(best.label().removeprefix(g.name + " "))
        assert best.num_gpus > 1 and best.memory_bytes <= 0.9 * g.memory_bytes


# --- issue 23, reading the page: counts per GPU type, CIs only with enough seeds, no empty charts, the sidebar ----
def sidebar_scenario(at: AppTest) -> str:
    return next((shown(m.value) for m in at.sidebar.markdown if m.value.startswith("**Scenario:**")), "")


def test_plans_page_names_each_gpu_type_the_constraints_emptied_with_the_counts(app):
    from frenzy_core.plans import rank_plans

    open_page(app, "pages/plans.py")
    app.number_input(key="plans_deadline_h").set_value(40.0).run()
    no_failure(app)
    s = app.session_state
    core = rank_plans(s.model, s.training, s.cluster, tokens=s.plans_tokens, scaling_floor=s.plans_floor,
                      deadline_s=40 * 3600.0)
    assert core.dropped_types, "the example must empty at least one GPU type (L40S: none within 40 h)"
    note = next(shown(i.value) for i in app.info if "No plan left on" in i.value)
    for gpu_type, sentence in core.dropped_types.items():
        assert sentence in note and "fit in memory;" in sentence and "by the deadline (40.0 h)" in sentence
        assert gpu_type not in set(app.dataframe[-1].value["GPU type"])  # ... and it is not in the ranked table
    app.number_input(key="plans_deadline_h").set_value(0.0).run()  # no constraint empties a type: no note
    assert not [i for i in app.info if "No plan left on" in i.value]


def test_two_seeds_draw_and_print_no_confidence_interval_and_say_so(app):
    run_simulation_page(app, seeds=2)
    figs = charts(app)
    assert not [t for t in figs["jct_bars"]["data"] if error_bar(t)]
    assert "mean of 2 seeds, no CI" in figs["jct_bars"]["layout"]["title"]["text"]
    summary = next(d.value for d in app.dataframe if "avg JCT 95% CI" in d.value.columns)
    assert set(summary["avg JCT 95% CI"]) == set(summary["p99 JCT 95% CI"]) == {"none (2 seeds)"}
    assert any("2 seeds: no confidence interval (needs 3)" in c.value for c in app.caption)


def test_three_seeds_print_the_interval_the_chart_draws(sim):
    figs = charts(sim)
    summary = next(d.value for d in sim.dataframe if "avg JCT 95% CI" in d.value.columns)
    for name, res in sim.session_state.sim_results.items():
        _, lo, hi = res.ci("avg_jct_s")
        low, high = error_bar(trace(figs["jct_bars"], name))
        assert (low[0], high[0]) == pytest.approx((lo / HOUR, hi / HOUR))
        row = summary[summary["policy"] == name].iloc[0]
        assert row["avg JCT 95% CI"] == f"{lo / HOUR:.2f} – {hi / HOUR:.2f} h"


def test_one_seed_what_if_prints_no_interval_in_its_table(app):
    run_whatif_page(app, seeds=1)
    table = app.session_state.wi_results
    assert table["CI low h"].isna().all() and table["CI high h"].isna().all()
    assert any("1 seed: no confidence interval" in c.value for c in app.caption)


def test_no_oom_failure_anywhere_shows_a_sentence_not_an_empty_chart(app):
    run_simulation_page(app, seeds=1)
    results = app.session_state.sim_results
    assert all(r.oom_failures == 0 for res in results.values() for r in res.results), "the example has no OOM"
    assert "oom" not in charts(app)
    assert any("No out-of-memory failures" in c.value for c in app.caption)


def _sidebar_label_script():
    """pages.common.scenario_label, what fill_sidebar shows, in a script of its own: AppTest drops the sidebar's
    elements on every run after the first (tests/test_browser.py checks the sidebar itself)."""
    import streamlit as st

    from frenzy_core.scenario import load_scenario
    from pages import common

    common.init_state()
    if st.session_state.get("load") and not st.session_state.get("loaded_once"):
        st.session_state.loaded_once = True
        common.apply_scenario(load_scenario(common.sample_scenarios()["procurement"]), "test")
    st.markdown(f"label: {common.scenario_label()}")


def test_the_sidebar_names_a_loaded_scenario_until_a_field_changes(monkeypatch):
    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    at = AppTest.from_function(_sidebar_label_script, default_timeout=TIMEOUT)
    at.run()
    assert at.markdown[0].value == "label: None"  # nothing loaded: no scenario name
    at.session_state.load = True
    at.run()
    name = "procurement-150-usd-per-hour"
    assert at.markdown[0].value == f"label: {name}"
    at.session_state.model = ZOO["mistral-7b"]  # what the Model & memory page does when another model is picked
    at.run()
    assert at.markdown[0].value == f"label: unsaved changes (from {name})"
    at.session_state.model = ZOO["llama-2-7b"]  # the scenario's model again: its name again
    at.run()
    assert at.markdown[0].value == f"label: {name}"
    at.session_state.training = at.session_state.training.model_copy(update={"seq_len": 1024})
    at.run()
    assert at.markdown[0].value == f"label: unsaved changes (from {name})"


def test_eta_text_extrapolates_the_time_so_far_on_both_pages():
    """Hand-worked: 30 s for 25% done leaves 90 s; 300 s for 50% leaves 5.0 min; under 2% done it only estimates.
    The GPU-mix and Simulation pages both show this text beside their progress bars."""
    from pages import common

    assert common.eta_text(30.0, 0.25) == "about 90 s left"
    assert common.eta_text(300.0, 0.5) == "about 5.0 min left"
    assert common.eta_text(5.0, 0.01) == "estimating time left…"
    for page in ("pages/gpu_mix.py", "pages/simulation.py"):
        assert "common.eta_text(" in (Path(__file__).resolve().parents[1] / page).read_text()


def test_a_page_that_ends_on_its_error_still_gets_the_sidebar_and_the_link(monkeypatch):
    """Plans ends its run at a SpecError from the ranking (common.end_page); the router (app.py) must still fill the
    sidebar, draw the run's number and write the share link, as `st.stop()` did not. AppTest's switch_page runs a
    page file on its own, so the plans page is made the router's default page here, and the ranking made to fail."""
    from frenzy_core.errors import SpecError
    from pages import common

    def failing(*args, **kwargs):
        raise SpecError("tokens", "must be > 0, got -1")

    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    monkeypatch.setitem(common.PAGES, "overview", common.PAGES["plans"])
    monkeypatch.delitem(common.PAGES, "plans")
    monkeypatch.setattr(common, "ranked_plans", failing)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert at.title[0].value == "Plans" and any("tokens" in e for e in errors(at)), errors(at)
    assert not at.exception
    assert "llama-2-7b" in " ".join(c.value for c in at.sidebar.caption)
    assert at.session_state["frenzy_runs"] == 1 and "s" in at.query_params
