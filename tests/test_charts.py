"""pages/charts.py: each Vega-Lite spec carries the numbers the core computed, checked against the core's own outputs
(predict_memory's totals, rank_plans' grid, HAS's placements) and hand-counted invariants, not against the spec."""

from __future__ import annotations

import pytest

from frenzy_core.allocation import empty_allocation, free_by_type, submit
from frenzy_core.cluster import load_cluster, parse_cluster_yaml
from frenzy_core.memory import GIB, predict_memory
from frenzy_core.models import ZOO
from frenzy_core.plans import rank_plans
from frenzy_core.training import Parallelism, make_training
from frenzy_core.workload import default_training
from pages import charts

REPO_CLUSTER = "sample_clusters/modern-mixed.yaml"


def _data(spec: dict, layer: dict) -> list[dict]:
    """A layer's rows: inline values, or the named dataset Streamlit sends apart from the spec."""
    return spec["datasets"][layer["data"]["name"]] if "name" in layer["data"] else layer["data"]["values"]


def _layer(spec: dict, mark: str) -> list[dict]:
    return [layer for layer in spec["layer"] if (layer["mark"] if isinstance(layer["mark"], str)
                                                  else layer["mark"]["type"]) == mark]


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


def test_memory_chart_segments_stack_to_each_methods_total(memory_result):
    names = list(dict.fromkeys([*memory_result["detailed"][0], *memory_result["paper"][0]]))
    spec = charts.memory_chart(memory_result, names, {80.0: ["H100-80GB"], 24.0: ["L4"]}, False, ["t"], {})
    bars = _data(spec, _layer(spec, "bar")[0])
    for method in ("detailed", "paper"):
        segs = [b for b in bars if b["method"] == method]
        assert segs[0]["y0"] == pytest.approx(0.0, abs=1e-3)
        for a, b in zip(segs, segs[1:], strict=False):  # contiguous: each segment starts where the last ended
            assert b["y0"] == pytest.approx(a["y1"])
        assert segs[-1]["y1"] == pytest.approx(memory_result[method][1], rel=1e-6)  # = predict_memory's total
        assert sum(s["GiB"] for s in segs) == pytest.approx(memory_result[method][1], abs=0.01)


def test_memory_chart_lines_mark_which_gpus_fit_and_the_paper_bar_above_the_axis(memory_result):
    total = memory_result["detailed"][1]  # 37.3 GiB for this setup: fits 80 and 48 GiB, not 24
    assert 24 < total < 48
    names = list(memory_result["detailed"][0])
    spec = charts.memory_chart(memory_result, names, {80.0: ["H100-80GB", "A100-80GB"], 48.0: ["L40S"],
                                                      24.0: ["L4"]}, False, ["t"], {})
    lines = _data(spec, _layer(spec, "rule")[0])
    assert [(x["cap"], x["fits"]) for x in lines] == [(24.0, False), (48.0, True), (80.0, True)]
    assert lines[2]["label"].startswith("✓ H100-80GB, A100-80GB")
    assert spec["layer"][0]["encoding"]["y"]["scale"]["domain"] == [0, pytest.approx(80 * 1.15)]
    # the paper's 319 GiB is far above the 92 GiB axis: a label says so; on a log axis it fits and no label is drawn
    assert any("paper: 319 GiB" in _data(spec, t)[0].get("label", "") for t in _layer(spec, "text")[1:])
    log = charts.memory_chart(memory_result, names, {80.0: ["H100-80GB"]}, True, ["t"], {})
    lo, hi = log["layer"][0]["encoding"]["y"]["scale"]["domain"]
    assert log["layer"][0]["encoding"]["y"]["scale"]["type"] == "log" and hi > memory_result["paper"][1] and lo > 0
    assert not [t for t in _layer(log, "text") if "paper:" in str(_data(log, t)[0].get("label", ""))]


def test_headroom_heatmaps_carry_the_grids_cells_and_one_star_on_the_best_plan():
    cluster = load_cluster(REPO_CLUSTER)
    model = ZOO["llama-2-7b"]
    result = rank_plans(model, default_training(model), cluster)
    grid = result.grid.assign(headroom_gib=result.grid["headroom_bytes"] / GIB)
    best = result.plan(0)
    types = list(dict.fromkeys(grid["gpu_type"]))
    spec = charts.headroom_heatmaps(grid, types, best.pp, 50.0, best)
    cells = spec["data"]["values"]
    at_p = grid[grid["pp"] == best.pp]
    assert len(cells) == len(at_p)
    want = {(r.gpu_type, r.dp, r.tp): (round(r.headroom_gib, 2), bool(r.feasible)) for r in at_p.itertuples()}
    for c in cells:
        headroom, feasible = want[(c["GPU type"], c["d"], c["t"])]
        assert c["headroom GiB"] == headroom
        assert c["mark"] in (("✓", "★") if feasible else ("✗",))
    stars = [c for c in cells if c["mark"] == "★"]
    assert [(s["GPU type"], s["d"], s["t"]) for s in stars] == [(best.gpu_type, best.dp, best.tp)]
    other_p = next(int(v) for v in grid["pp"].unique() if v != best.pp)
    assert not [c for c in charts.headroom_heatmaps(grid, types, other_p, 50.0, best)["data"]["values"]
                if c["mark"] == "★"]


def test_packing_charts_count_every_gpu_once():
    cluster = load_cluster(REPO_CLUSTER)
    alloc = empty_allocation(cluster)
    for i, name in enumerate(["llama-2-7b", "gpt2-xl"]):
        model = ZOO[name]
        alloc, job = submit(cluster, alloc, f"job-{i + 1}", name, rank_plans(model, default_training(model),
                                                                               cluster).plans)
        assert job is not None
    colour = {j.job_id: c for j, c in zip(alloc.jobs, ["#111111", "#222222"], strict=True)}
    grid = charts.node_grid(cluster, alloc, colour)["data"]["values"]
    assert len(grid) == cluster.total_gpus
    for job in alloc.jobs:
        assert sum(c["job"].startswith(job.job_id + ":") for c in grid) == job.plan.num_gpus
    assert sum(c["job"] == "free" for c in grid) == cluster.total_gpus - sum(j.plan.num_gpus for j in alloc.jobs)
    caps = free_by_type(cluster, alloc)
    bars = charts.capacity_chart(caps)["data"]["values"]
    for gpu_type, (free, total) in caps.items():
        assert sum(b["GPUs"] for b in bars if b["GPU type"] == gpu_type) == total
        assert next(b["GPUs"] for b in bars if b["GPU type"] == gpu_type and b["state"] == "free") == free


def test_group_chart_sums_each_jobs_gpus_over_the_groups():
    cluster = parse_cluster_yaml("name: big\nnodes:\n  - {name: h, gpu_type: H100-80GB, num_gpus: 8, count: 100}\n"
                                 "  - {name: a, gpu_type: A100-80GB, num_gpus: 8, count: 50}\n")
    alloc = empty_allocation(cluster)
    model = ZOO["llama-2-7b"]
    alloc, job = submit(cluster, alloc, "job-1", "llama-2-7b", rank_plans(model, default_training(model),
                                                                          cluster).plans)
    spans = [("h × 100", 0, 100), ("a × 50", 100, 150)]
    rows = charts.group_chart(cluster, alloc, {"job-1": "#111111"}, spans)["data"]["values"]
    assert sum(r["GPUs"] for r in rows if r["job"].startswith("job-1:")) == job.plan.num_gpus
    assert sum(r["GPUs"] for r in rows) == cluster.total_gpus == 1200
    assert {r["group"] for r in rows if r["job"] == "free"} == {"h × 100", "a × 50"}
