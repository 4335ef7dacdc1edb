"""Vega-Lite chart specs for every page: pure functions from what the core computed to a spec dict (no Streamlit
here), so each chart's data can be tested against the core's numbers (tests/test_charts.py; the Simulation and
GPU-mix charts through the pages in tests/test_app.py).

Vega-Lite instead of Plotly: Streamlit's Plotly chunk is 4.7 MB of JavaScript, and the first page of a browser
session that draws one paid ~1.4 s for it on a 2-core machine (bench/app_latency.py, 2026-12-01)."""

from __future__ import annotations

import math

import numpy as np

from frenzy_core.plans import Plan
from frenzy_core.timeline import queue_length
from frenzy_core.whatif import TODAY

PANELS_PER_ROW = 4
FREE_COLOUR = "#eceff1"  # free GPUs on the packing charts
HOUR = 3600.0
POLICY_COLOURS = {"frenzy": "#1565c0", "frenzy-share": "#00838f", "frenzy-eft": "#6a1b9a", "fcfs": "#ef6c00",
                  "sia": "#2e7d32"}


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


def ci_rows(rows: list[dict], low: str, high: str) -> list[dict]:
    """The rows that have an interval (one seed gives none: its bounds are null)."""
    return [r for r in rows if r[low] is not None and r[high] is not None]


def chart_number(x: float) -> float | None:
    """A plain float for a Vega-Lite data row, or None (JSON null) for NaN and infinities, which JSON cannot hold."""
    x = float(x)
    return x if math.isfinite(x) else None


num = chart_number


def colour(policy: str) -> str:
    return POLICY_COLOURS.get(policy, "#5d4037")


def policy_colour(names: list[str], show_legend: bool = True) -> dict:
    """The colour channel: one fixed colour per policy (POLICY_COLOURS), in the order the policies were run."""
    return {"field": "policy", "type": "nominal", "sort": names,
            "scale": {"domain": names, "range": [colour(n) for n in names]},
            "legend": {"orient": "bottom", "title": None} if show_legend else None}


def chart(title: str, height: int, layers: list[dict]) -> dict:
    """A layered Vega-Lite spec with its title at the left; each layer carries its own inline data."""
    return {"title": {"text": title, "anchor": "start"}, "height": height, "layer": layers}


def step_lines_spec(title: str, x_title: str, y_title: str, y_field: str, rows: list[dict], names: list[str],
                    height: int, x_scale: dict | None = None) -> dict:
    """One step line per policy (the value holds from each point to the next), coloured per policy."""
    x = {"field": "hours", "type": "quantitative", "title": x_title}
    if x_scale:
        x["scale"] = x_scale
    return chart(title, height, [{
        "data": {"values": rows},
        "mark": {"type": "line", "interpolate": "step-after", "clip": True},
        "encoding": {"x": x, "y": {"field": y_field, "type": "quantitative", "title": y_title},
                     "color": policy_colour(names),
                     "tooltip": [{"field": "policy"}, {"field": "hours", "title": "hours", "format": ".2f"},
                                 {"field": y_field, "title": y_title, "format": ".3~f"}]}}])


def arrivals_spec(trace) -> dict:
    """A histogram (40 bins) of the trace's arrival times, in hours."""
    rows = [{"arrival_h": j.arrival_s / HOUR} for j in trace.jobs]
    return chart("Arrivals over time", 260, [{
        "data": {"values": rows},
        "mark": {"type": "bar", "color": "#90a4ae"},
        "encoding": {"x": {"field": "arrival_h", "bin": {"maxbins": 40}, "type": "quantitative", "title": "hours"},
                     "y": {"aggregate": "count", "type": "quantitative", "title": "jobs"},
                     "tooltip": [{"field": "arrival_h", "bin": {"maxbins": 40}, "title": "hours"},
                                 {"aggregate": "count", "title": "jobs"}]}}])


def cdf_spec(results: dict) -> dict:
    """The empirical CDF of JCT per policy over all seeds (finished jobs): the i-th shortest of n at i/n."""
    rows = []
    for name, res in results.items():
        jct = np.sort(np.concatenate([r.jobs["jct_s"] for r in res.results]))
        jct = jct[np.isfinite(jct)] / HOUR
        rows += [{"policy": name, "hours": float(h), "fraction": (i + 1) / jct.size} for i, h in enumerate(jct)]
    spec = step_lines_spec("JCT CDF (all seeds)", "job completion time (h, log)", "fraction of jobs", "fraction",
                           rows, list(results), 360, x_scale={"type": "log"})
    spec["layer"][0]["encoding"]["y"]["scale"] = {"domain": [0, 1]}
    return spec


def jct_bars_spec(results: dict) -> dict:
    """Average and p99 JCT per policy (means over seeds, hours) side by side, each with its 95% CI as an error bar
    (none with one seed: there is no interval)."""
    rows = []
    for metric, label in (("avg_jct_s", "average"), ("p99_jct_s", "p99")):
        for name, res in results.items():
            mean, lo, hi = res.ci(metric)
            rows.append({"policy": name, "JCT": label, "hours": num(mean / HOUR), "ci_low_h": num(lo / HOUR),
                         "ci_high_h": num(hi / HOUR)})
    names = list(results)
    x = {"field": "policy", "type": "nominal", "sort": names, "title": None, "axis": {"labelAngle": 0}}
    offset = {"field": "JCT", "type": "nominal", "sort": ["average", "p99"]}
    tooltip = [{"field": "policy"}, {"field": "JCT"}, {"field": "hours", "format": ".2f"},
               {"field": "ci_low_h", "title": "95% CI low (h)", "format": ".2f"},
               {"field": "ci_high_h", "title": "95% CI high (h)", "format": ".2f"}]
    return chart("Average and p99 JCT, 95% CI", 360, [
        {"data": {"values": rows}, "mark": {"type": "bar"},
         "encoding": {"x": x, "xOffset": offset, "y": {"field": "hours", "type": "quantitative", "title": "hours"},
                      "color": policy_colour(names, show_legend=False),  # the x axis names the policies
                      "opacity": {"field": "JCT", "type": "nominal", "sort": ["average", "p99"],
                                  "scale": {"domain": ["average", "p99"], "range": [1.0, 0.5]},
                                  "legend": {"orient": "bottom", "title": None}},
                      "tooltip": tooltip}},
        {"data": {"values": ci_rows(rows, "ci_low_h", "ci_high_h")},
         "mark": {"type": "rule", "color": "#263238", "strokeWidth": 1.5},
         "encoding": {"x": x, "xOffset": offset, "y": {"field": "ci_low_h", "type": "quantitative"},
                      "y2": {"field": "ci_high_h"}, "tooltip": tooltip}},
    ])


def queue_spec(results: dict) -> dict:
    """Jobs arrived but not started over time, per policy, on seed 0 (frenzy_core.timeline.queue_length)."""
    rows = []
    for name, res in results.items():
        r = res.results[0]
        t, q = queue_length(r.jobs["arrival_s"], r.jobs["start_s"])
        rows += [{"policy": name, "hours": float(a) / HOUR, "jobs": int(b)} for a, b in zip(t, q, strict=True)]
    return step_lines_spec("Queued jobs over time (seed 0)", "hours", "jobs waiting", "jobs", rows, list(results),
                           320)


def util_spec(results: dict) -> dict:
    """The share of the cluster's GPUs busy over time, per policy, on seed 0 (SimResult.utilisation)."""
    rows = []
    for name, res in results.items():
        u = res.results[0].utilisation()
        rows += [{"policy": name, "hours": float(a) / HOUR, "busy_pct": 100.0 * float(b)}
                 for a, b in zip(u["time_s"], u["utilisation"], strict=True)]
    return step_lines_spec("GPU utilisation over time (seed 0)", "hours", "% GPUs busy", "busy_pct", rows,
                           list(results), 320)


def gpu_hours_spec(results: dict) -> dict:
    """GPU-hours per GPU type (mean over seeds of SimResult.gpu_hours_by_type), one bar per policy in each group."""
    rows = []
    for name, res in results.items():
        per = [r.gpu_hours_by_type() for r in res.results]
        rows += [{"policy": name, "gpu_type": t, "gpu_hours": float(np.mean([p.get(t, 0.0) for p in per]))}
                 for t in per[0]]
    names = list(results)
    return chart("GPU-hours per GPU type (mean over seeds)", 320, [{
        "data": {"values": rows}, "mark": {"type": "bar"},
        "encoding": {"x": {"field": "gpu_type", "type": "nominal", "sort": None, "title": None,
                           "axis": {"labelAngle": 0}},
                     "xOffset": {"field": "policy", "type": "nominal", "sort": names},
                     "y": {"field": "gpu_hours", "type": "quantitative", "title": "GPU-hours"},
                     "color": policy_colour(names),
                     "tooltip": [{"field": "policy"}, {"field": "gpu_type", "title": "GPU type"},
                                 {"field": "gpu_hours", "title": "GPU-hours", "format": ",.1f"}]}}])


def oom_spec(results: dict) -> dict:
    """Out-of-memory failures per run (mean over seeds) per policy, with the 95% CI as an error bar."""
    rows = []
    for name, res in results.items():
        mean, lo, hi = res.ci("oom_failures")
        rows.append({"policy": name, "failures": num(mean), "ci_low": num(lo), "ci_high": num(hi)})
    names = list(results)
    top = max([1.0, *(r["ci_high"] or r["failures"] or 0.0 for r in rows)])  # an axis up to 1 when none failed
    x = {"field": "policy", "type": "nominal", "sort": names, "title": None, "axis": {"labelAngle": 0}}
    tooltip = [{"field": "policy"}, {"field": "failures", "format": ".2f"},
               {"field": "ci_low", "title": "95% CI low", "format": ".2f"},
               {"field": "ci_high", "title": "95% CI high", "format": ".2f"}]
    return chart("Out-of-memory failures per run", 320, [
        {"data": {"values": rows}, "mark": {"type": "bar"},
         "encoding": {"x": x, "y": {"field": "failures", "type": "quantitative", "title": "failures",
                                    "axis": {"format": "~g", "tickMinStep": 1}, "scale": {"domainMin": 0, "domainMax": top}},
                      "color": policy_colour(names, show_legend=False), "tooltip": tooltip}},
        {"data": {"values": ci_rows(rows, "ci_low", "ci_high")},
         "mark": {"type": "rule", "color": "#263238", "strokeWidth": 1.5},
         "encoding": {"x": x, "y": {"field": "ci_low", "type": "quantitative"}, "y2": {"field": "ci_high"},
                      "tooltip": tooltip}},
    ])


def frontier_spec(result) -> dict:
    """Vega-Lite: each candidate's average JCT (h) with its 95% CI against the cluster's cost ($/h); blue circles within
    the budget, red crosses over it, each named; the frontier (frenzy_core.whatif's on_frontier) as a dashed line by
    cost; a dotted red rule at today's cost plus the budget."""
    num = chart_number
    rows = [{"candidate": c.candidate, "cost": num(c.cost_per_hour), "jct_h": num(c.avg_jct_s / HOUR),
             "ci_low_h": num(c.ci_low_s / HOUR), "ci_high_h": num(c.ci_high_s / HOUR),
             "added_cost": num(c.added_cost_per_hour), "GPUs": c.gpus,
             "budget": "within budget" if c.within_budget else "over budget", "on_frontier": c.on_frontier}
            for c in result.candidates]
    rows = [r for r in rows if r["cost"] is not None and r["jct_h"] is not None]
    front = sorted((r for r in rows if r["on_frontier"]), key=lambda r: r["cost"])
    budget_x = result.row(TODAY).cost_per_hour + result.budget_per_hour
    x = {"field": "cost", "type": "quantitative", "title": f"cluster cost ($/h, {result.pricing})",
         "scale": {"zero": False, "nice": True, "padding": 30}}  # room for the names at the edges
    y = {"field": "jct_h", "type": "quantitative", "title": "average JCT (h), 95% CI",
         "scale": {"zero": False, "padding": 20}}
    tooltip = [{"field": "candidate"}, {"field": "GPUs"}, {"field": "cost", "title": "cost $/h", "format": ",.2f"},
               {"field": "added_cost", "title": "added $/h", "format": ",.2f"},
               {"field": "jct_h", "title": "avg JCT h", "format": ".2f"},
               {"field": "ci_low_h", "title": "95% CI low h", "format": ".2f"},
               {"field": "ci_high_h", "title": "95% CI high h", "format": ".2f"}, {"field": "budget"},
               {"field": "on_frontier", "title": "on frontier"}]
    kinds = {"field": "budget", "type": "nominal", "title": None, "legend": {"orient": "bottom"},
             "scale": {"domain": ["within budget", "over budget"], "range": ["#1565c0", "#c62828"]}}
    shapes = {**kinds, "scale": {"domain": ["within budget", "over budget"], "range": ["circle", "cross"]}}
    label = {"x": x, "y": y, "text": {"field": "candidate"}}
    return {"height": 420, "layer": [
        {"data": {"values": [{"cost": budget_x}]}, "mark": {"type": "rule", "strokeDash": [2, 3], "color": "#c62828"},
         "encoding": {"x": {"field": "cost", "type": "quantitative"}}},
        {"data": {"values": [{"cost": budget_x}]},
         "mark": {"type": "text", "text": "budget", "color": "#c62828", "align": "right", "dx": -4, "baseline": "top",
                  "y": 4},
         "encoding": {"x": {"field": "cost", "type": "quantitative"}}},
        {"data": {"values": front}, "mark": {"type": "line", "color": "#90a4ae"},
         "encoding": {"x": x, "y": y, "order": {"field": "cost"},
                      "strokeDash": {"datum": "frontier", "type": "nominal", "title": None,
                                     "scale": {"domain": ["frontier"], "range": [[6, 4]]},
                                     "legend": {"orient": "bottom", "symbolType": "stroke", "symbolSize": 400,
                                                "symbolStrokeWidth": 2}}}},
        # the name above each point, over a white halo that hides grid and frontier lines (the CIs and points
        # are drawn after it, on top)
        {"data": {"values": rows}, "mark": {"type": "text", "dy": -14, "fontSize": 12, "stroke": "white",
                                            "strokeWidth": 4, "strokeOpacity": 0.9}, "encoding": label},
        {"data": {"values": rows}, "mark": {"type": "text", "dy": -14, "fontSize": 12},
         "encoding": {**label, "color": kinds}},  # the same legend as the points (Vega-Lite merges them)
        {"data": {"values": ci_rows(rows, "ci_low_h", "ci_high_h")},
         "mark": {"type": "rule", "strokeWidth": 1.5},
         "encoding": {"x": x, "y": {"field": "ci_low_h", "type": "quantitative"}, "y2": {"field": "ci_high_h"},
                      "color": kinds, "tooltip": tooltip}},
        {"data": {"values": rows}, "mark": {"type": "point", "filled": True, "size": 140},
         "encoding": {"x": x, "y": y, "color": kinds, "shape": shapes, "tooltip": tooltip}},
    ]}
