"""Vega-Lite chart specs for the app's pages: pure functions from what the core computed to a spec dict (no
Streamlit here), so each chart's data can be tested against the core's numbers (tests/test_charts.py).

Vega-Lite instead of Plotly: Streamlit's Plotly chunk is 4.7 MB of JavaScript, and the first page of a browser
session that draws one paid ~1.4 s for it on a 2-core machine (bench/app_latency.py, 2026-12-01)."""

from __future__ import annotations

from frenzy_core.plans import Plan

PANELS_PER_ROW = 4
FREE_COLOUR = "#eceff1"  # free GPUs on the packing charts


def _label(component: str) -> str:
    return component.replace("_bytes", "").replace("_", " ")


def memory_chart(result: dict, names: list[str], by_capacity: dict[float, list[str]], log_scale: bool,
                 title: list[str], term_help: dict[str, str]) -> dict:
    """A Vega-Lite stacked bar per method (components, GiB), a dotted line per GPU capacity (green: the detailed peak
    fits), and, on a linear axis, a label for a paper bar far above the detailed bar and every GPU line. Segments carry
    explicit [start, end] so that a log axis stacks them too."""
    detailed, paper = result["detailed"], result["paper"]
    bars = []
    floor = 1e-3
    for method in ("detailed", "paper"):
        start = 0.0
        for name in names:
            v = result[method][0].get(name, 0.0)
            if v <= 0:
                continue
            bars.append({"method": method, "component": _label(name), "GiB": round(v, 3), "y0": max(start, floor),
                         "y1": max(start + v, floor), "what": term_help.get(name, "see docs/memory.md")})
            start += v
    top = max([detailed[1], *by_capacity]) if by_capacity else detailed[1]
    if log_scale:
        low = min([b["GiB"] for b in bars if b["GiB"] > 0] or [0.01])
        y_scale = {"type": "log", "domain": [max(low / 1.6, floor), max(top, paper[1]) * 1.4]}
    else:
        y_scale = {"domain": [0, top * 1.15]}
    lines = [{"cap": cap, "label": f"{'✓' if detailed[1] <= cap else '✗'} {', '.join(g)} ({cap:g} GiB)",
              "fits": detailed[1] <= cap} for cap, g in sorted(by_capacity.items())]
    datasets = {"bars": bars, **({"lines": lines} if lines else {})}
    layers = [{
        "data": {"name": "bars"},
        "mark": {"type": "bar", "clip": True},
        "encoding": {
            "x": {"field": "method", "type": "nominal", "sort": ["detailed", "paper"], "axis": {"labelAngle": 0},
                  "title": None},
            "y": {"field": "y0", "type": "quantitative", "scale": y_scale, "title": "GiB per GPU"},
            "y2": {"field": "y1"},
            "color": {"field": "component", "type": "nominal", "sort": [_label(n) for n in names],
                      "legend": {"title": "component"}},
            "tooltip": [{"field": "component"}, {"field": "method"}, {"field": "GiB", "format": ".2f"},
                        {"field": "what"}],
        },
    }]
    if lines:
        color = {"field": "fits", "type": "nominal", "legend": None,
                 "scale": {"domain": [True, False], "range": ["#2e7d32", "#c62828"]}}
        layers.append({"data": {"name": "lines"}, "mark": {"type": "rule", "strokeDash": [3, 3]},
                       "encoding": {"y": {"field": "cap", "type": "quantitative"}, "color": color}})
        layers.append({"data": {"name": "lines"}, "mark": {"type": "text", "align": "right", "dy": -6, "fontSize": 11,
                                                           "x": {"expr": "width"}},
                       "encoding": {"y": {"field": "cap", "type": "quantitative"}, "text": {"field": "label"},
                                    "color": color}})
    if not log_scale and paper[1] > top * 1.15:
        datasets["note"] = [{"method": "paper", "y": top * 1.1,
                             "label": f"paper: {paper[1]:,.0f} GiB ↑ (turn on log scale)"}]
        layers.append({"data": {"name": "note"}, "mark": {"type": "text", "color": "#c62828", "fontSize": 12},
                       "encoding": {"x": {"field": "method", "type": "nominal"},
                                    "y": {"field": "y", "type": "quantitative"}, "text": {"field": "label"}}})
    # named datasets: Streamlit sends them apart from the spec, so an edit that changes only the numbers updates the
    # drawn chart's data instead of embedding a new one (the memory update stays fast)
    return {"title": {"text": title, "anchor": "start"}, "height": 480, "layer": layers, "datasets": datasets,
            "resolve": {"scale": {"color": "independent"}}}


def headroom_heatmaps(grid, types: list[str], p: int, lim: float, best: Plan | None) -> dict:
    """A Vega-Lite spec: one panel per GPU type (at most PANELS_PER_ROW per row), d (rows) x t (columns) coloured by
    headroom GiB on one shared scale (-lim..lim, deeper deficits saturate red); feasible cells carry a tick,
    infeasible ones a cross, the winning plan a star."""
    at_p = grid[grid["pp"] == p]
    winner = (best.gpu_type, best.dp, best.tp) if best is not None and best.pp == p else None
    cells = [{"GPU type": str(r.gpu_type), "d": int(r.dp), "t": int(r.tp),
              "headroom GiB": round(float(r.headroom_gib), 2),
              "mark": "★" if winner == (r.gpu_type, r.dp, r.tp) else "✓" if r.feasible else "✗"}
             for r in at_p.itertuples() if r.headroom_gib == r.headroom_gib]
    d_all = sorted({c["d"] for c in cells})
    t_all = sorted({c["t"] for c in cells})
    step = 40
    x = {"field": "t", "type": "ordinal", "sort": t_all, "title": "t (tensor-parallel)", "axis": {"labelAngle": 0}}
    y = {"field": "d", "type": "ordinal", "sort": d_all, "title": "d (data-parallel)"}
    title = f"Memory headroom at p={p}" + (" (the best plan's p; ★ = best plan)"
                                          if best is not None and best.pp == p else "")
    return {
        "title": {"text": title, "anchor": "start", "fontSize": 14},
        "data": {"values": cells},
        "facet": {"field": "GPU type", "type": "nominal", "sort": types, "title": None,
                  "header": {"labelFontSize": 13}},
        "columns": PANELS_PER_ROW,
        "spec": {
            "width": {"step": step}, "height": {"step": step},
            "layer": [
                {"mark": {"type": "rect", "stroke": "white", "strokeWidth": 2},
                 "encoding": {"x": x, "y": y,
                              "color": {"field": "headroom GiB", "type": "quantitative",
                                        "scale": {"scheme": "redyellowgreen", "domain": [-lim, lim], "domainMid": 0,
                                                  "clamp": True},
                                        "legend": {"title": "headroom GiB"}},
                              "tooltip": [{"field": "GPU type"}, {"field": "d"}, {"field": "t"},
                                          {"field": "headroom GiB", "format": ".1f"}]}},
                {"mark": {"type": "text", "fontSize": 13},
                 "encoding": {"x": x, "y": y, "text": {"field": "mark"},
                              "color": {"condition": {"test": "datum.mark === '★'", "value": "#1a237e"},
                                        "value": "#263238"},
                              "size": {"condition": {"test": "datum.mark === '★'", "value": 24}, "value": 13}}},
            ],
        },
        "resolve": {"scale": {"x": "shared", "y": "shared"}},
    }


def job_legend(alloc, colour: dict[str, str]) -> dict:
    """A Vega-Lite colour encoding: one legend entry and colour per placed job, then grey for free GPUs."""
    names = [f"{j.job_id}: {j.model} ({j.plan.num_gpus})" for j in alloc.jobs] + ["free"]
    return {"field": "job", "type": "nominal", "sort": names,
            "scale": {"domain": names, "range": [colour[j.job_id] for j in alloc.jobs] + [FREE_COLOUR]},
            "legend": {"orient": "bottom", "title": None, "columns": 3}}


def group_chart(cluster, alloc, colour: dict[str, str], spans: list[tuple[str, int, int]]) -> dict:
    """A Vega-Lite spec: one stacked bar per node group, the GPUs each job holds there and the free ones (fast at
    10,000 nodes: one row per group)."""
    free = alloc.free_per_node()
    rows = []
    for job in alloc.jobs:
        name = f"{job.job_id}: {job.model} ({job.plan.num_gpus})"
        for label, a, b in spans:
            n = sum(k for node, k in job.placement.nodes if a <= node < b)
            if n:
                rows.append({"group": label, "job": name, "GPUs": int(n), "order": len(rows)})
    for label, a, b in spans:
        rows.append({"group": label, "job": "free", "GPUs": int(free[a:b].sum()), "order": len(rows)})
    return {"title": {"text": "Node groups × GPUs (colour = job, grey = free)", "anchor": "start"},
            "height": {"step": 28}, "data": {"values": rows}, "mark": "bar",
            "encoding": {"y": {"field": "group", "type": "nominal", "sort": [s[0] for s in spans], "title": None,
                               "axis": {"labelLimit": 400}},
                         "x": {"field": "GPUs", "type": "quantitative", "stack": "zero", "title": "GPUs"},
                         "color": job_legend(alloc, colour), "order": {"field": "order"},
                         "tooltip": [{"field": "group"}, {"field": "job"}, {"field": "GPUs"}]}}


def node_grid(cluster, alloc, colour: dict[str, str]) -> dict:
    """A Vega-Lite spec: nodes (rows) x GPU slots (columns), each GPU coloured by the job holding it (grey = free),
    labelled with the job number."""
    by_id = {j.job_id: j for j in alloc.jobs}
    cells = []
    for ni, node in enumerate(cluster.nodes):
        for k in range(node.num_gpus):
            owner = alloc.owner[ni][k]
            job = by_id.get(owner)
            cells.append({"node": node.name, "slot": k, "type": node.gpu_type,
                          "job": f"{job.job_id}: {job.model} ({job.plan.num_gpus})" if job else "free",
                          "label": owner.replace("job-", "") if owner else "",
                          "plan": job.plan.label() if job else ""})
    x = {"field": "slot", "type": "ordinal", "title": "GPU slot", "axis": {"labelAngle": 0}}
    y = {"field": "node", "type": "nominal", "sort": [n.name for n in cluster.nodes], "title": None,
         "axis": {"labelLimit": 400}}
    return {"title": {"text": "Nodes × GPUs (colour = job, grey = free)", "anchor": "start"},
            "height": {"step": 26}, "data": {"values": cells},
            "layer": [
                {"mark": {"type": "rect", "stroke": "white", "strokeWidth": 3},
                 "encoding": {"x": x, "y": y, "color": job_legend(alloc, colour),
                              "tooltip": [{"field": "node"}, {"field": "slot", "title": "GPU"}, {"field": "type"},
                                          {"field": "job"}, {"field": "plan"}]}},
                {"mark": {"type": "text", "color": "white", "fontSize": 11},
                 "encoding": {"x": x, "y": y, "text": {"field": "label"}}}]}


def capacity_chart(caps: dict[str, tuple[int, int]]) -> dict:
    """A Vega-Lite spec: used and free GPUs per GPU type, stacked."""
    rows = [{"GPU type": g, "state": s, "GPUs": int(v)} for g, (f, t) in caps.items()
            for s, v in (("used", t - f), ("free", f))]
    return {"title": {"text": "GPUs per type", "anchor": "start"}, "height": 260, "data": {"values": rows},
            "mark": "bar",
            "encoding": {"x": {"field": "GPU type", "type": "nominal", "sort": list(caps), "title": None,
                               "axis": {"labelAngle": 0}},
                         "y": {"field": "GPUs", "type": "quantitative", "title": "GPUs"},
                         "color": {"field": "state", "type": "nominal", "sort": ["used", "free"],
                                   "scale": {"domain": ["used", "free"], "range": ["#5c6bc0", "#b0bec5"]},
                                   "legend": {"orient": "bottom", "title": None}},
                         "order": {"field": "state", "sort": "descending"},
                         "tooltip": [{"field": "GPU type"}, {"field": "state"}, {"field": "GPUs"}]}}
