"""Plotly figures for every page: pure functions from what the core computed to a `plotly.graph_objects.Figure`
(no Streamlit here), so each chart's data can be tested against the core's numbers (tests/test_charts.py; the
Simulation and GPU-mix charts also through the pages in tests/test_app.py).

Plotly (issue 23): users asked for zoom and pan (the default modebar) and a PNG download (CONFIG). Each builder
returns None when it has nothing to draw; the page then shows a caption instead of an empty frame. Figures are
built from plain arrays with go.Bar / go.Heatmap / go.Scatter (plotly.express over DataFrames is slower) and the
pages cache them with st.cache_data, so an unchanged chart costs nothing on a rerun (bench/app_latency.py).

Fixed colours: one per memory component (COMPONENT_COLOURS) and one per policy (its module's, from the registry),
the same on every page whatever the model or the order the policies ran in. Numbers: thousands separators, units in
every axis title and hover label, never scientific notation (exponentformat "none")."""

from __future__ import annotations

import math
import zlib

import numpy as np
import plotly.graph_objects as go

from frenzy_core import metrics, policies
from frenzy_core.plans import Plan
from frenzy_core.timeline import queue_length
from frenzy_core.whatif import TODAY

PANELS_PER_ROW = 4
HOUR = 3600.0
FREE_COLOUR = "#cfd8dc"  # free GPUs on the packing charts
USED_COLOUR = "#5c6bc0"
FIT_COLOUR, NO_FIT_COLOUR = "#2e7d32", "#c62828"  # GPU capacity lines: the detailed peak fits / does not
WITHIN_COLOUR, OVER_COLOUR = "#1565c0", "#c62828"  # what-if candidates within / over the budget
CI_COLOUR = "#263238"
# a 95% interval is drawn and printed only from metrics.MIN_CI_SEEDS seeds up (the what-if verdict's rule too); with
# fewer the pages show the mean and say there is no interval
MIN_CI_SEEDS = metrics.MIN_CI_SEEDS
# one colour per memory component (MemoryBreakdown.components' names), the same whatever the model; the order is the
# stacking order (bottom first) and the legend's, also the same whatever the model
COMPONENT_COLOURS = {"weights": "#1565c0", "gradients": "#ef6c00", "optimizer": "#2e7d32", "activations": "#c62828",
                     "logits": "#6a1b9a", "transient": "#8d6e63", "overhead": "#90a4ae"}
# one colour per registered policy, each policy's own (`policies/<name>.py` COLOUR, read through
# frenzy_core.policies.colour), the same on every page; this view is read from the registry, never kept here
POLICY_COLOURS = {name: policies.colour(name) for name in policies.REGISTRY}
# a name outside the dicts still gets one colour, always the same (by a checksum of the name, not by position)
SPARE_COLOURS = ["#00695c", "#f9a825", "#4e342e", "#37474f", "#d84315", "#0277bd", "#558b2f", "#7b1fa2"]
# st.plotly_chart(fig, config=charts.config(name)): the default modebar (zoom, pan, reset) without Plotly's logo,
# and its camera button saves a PNG named after the chart
CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}
FONT = {"family": "sans-serif", "size": 13}


def config(filename: str) -> dict:
    """The st.plotly_chart config for one chart: CONFIG with the PNG download's file name."""
    return {**CONFIG, "toImageButtonOptions": {**CONFIG["toImageButtonOptions"], "filename": filename}}


def _spare(name: str) -> str:
    return SPARE_COLOURS[zlib.crc32(name.encode()) % len(SPARE_COLOURS)]


def component_colour(component: str) -> str:
    return COMPONENT_COLOURS.get(component) or _spare(component)


def colour(policy: str) -> str:
    """The policy's fixed colour: the registry's (`frenzy_core.policies.colour`), else a spare (same per name)."""
    return policies.colour(policy) or _spare(policy)


def component_order(names) -> list[str]:
    """The components in COMPONENT_COLOURS' fixed order (unknown names after, as given), whatever order came in."""
    names = list(dict.fromkeys(names))
    return [n for n in COMPONENT_COLOURS if n in names] + [n for n in names if n not in COMPONENT_COLOURS]


def chart_number(x: float) -> float | None:
    """A plain float, or None (a gap; JSON null) for NaN and infinities, which JSON cannot hold."""
    x = float(x)
    return x if math.isfinite(x) else None


num = chart_number


def _axis(title: str, **extra) -> dict:
    """An axis with its unit in the title, thousands separators and no scientific notation."""
    return {"title": {"text": title}, "exponentformat": "none", "separatethousands": True, "automargin": True,
            **extra}


def _figure(chart: str, traces: list, title: str | None, height: int, x: dict, y: dict, **layout) -> go.Figure:
    """A figure with the shared look: title at the left, legend below, ',' thousands separators; `chart` names it
    in layout.meta (the tests find a drawn chart by it)."""
    base = {"meta": {"chart": chart}, "height": height, "separators": ".,", "font": FONT, "xaxis": x, "yaxis": y,
            "margin": {"l": 10, "r": 10, "t": 50 if title else 20, "b": 10},
            "legend": {"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0},
            "hoverlabel": {"namelength": -1}}
    if title:
        base["title"] = {"text": title, "x": 0, "xanchor": "left"}
    return go.Figure(data=traces, layout={**base, **layout})


def has_ci(seeds: int, low: float, high: float) -> bool:
    """A 95% interval is shown with at least MIN_CI_SEEDS seeds and finite bounds (one seed gives NaN)."""
    return seeds >= MIN_CI_SEEDS and math.isfinite(low) and math.isfinite(high)


def no_ci_note(seeds: int) -> str | None:
    """Why no interval is shown ("1 seed: no confidence interval"), or None when there are enough seeds."""
    if seeds >= MIN_CI_SEEDS:
        return None
    return f"{seeds} seed{'s' * (seeds != 1)}: no confidence interval (needs {MIN_CI_SEEDS})"


def _drawn(low: float | None, high: float | None) -> bool:
    """An error bar worth drawing: both bounds and a width (every seed equal gives a zero-width bar: none drawn)."""
    return low is not None and high is not None and high > low



# --- Model & memory ------------------------------------------------------------------------------------------------
def memory_chart(result: dict, names: list[str], by_capacity: dict[float, list[str]], log_scale: bool,
                 title: list[str], term_help: dict[str, str]) -> go.Figure | None:
    """A stacked bar per method (detailed, paper): one trace per memory component (GiB, its fixed colour), a dotted
    line per GPU capacity (green: the detailed peak fits), and, on a linear axis, a note for a paper bar far above
    the detailed bar and every GPU line. None when no component has memory."""
    detailed, paper = result["detailed"], result["paper"]
    methods = ["detailed", "paper"]
    traces = []
    for name in component_order(names):
        gib = [result[m][0].get(name, 0.0) for m in methods]
        if max(gib) <= 0:
            continue
        traces.append(go.Bar(
            name=name, x=methods, y=[v if v > 0 else None for v in gib], marker={"color": component_colour(name)},
            customdata=[term_help.get(name, "see docs/memory.md")] * 2,
            hovertemplate=f"<b>{name}</b> (%{{x}})<br>%{{y:,.2f}} GiB per GPU<br>%{{customdata}}<extra></extra>"))
    if not traces:
        return None
    top = max([detailed[1], *by_capacity]) if by_capacity else detailed[1]
    shapes, notes = [], []
    for cap, gpus in sorted(by_capacity.items()):
        fits = detailed[1] <= cap
        line = FIT_COLOUR if fits else NO_FIT_COLOUR
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": cap, "y1": cap,
                       "line": {"color": line, "dash": "dot", "width": 1.5}})
        notes.append({"xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": math.log10(cap) if log_scale
                      else cap, "yanchor": "bottom", "showarrow": False, "font": {"color": line, "size": 11},
                      "text": f"{'✓' if fits else '✗'} {', '.join(gpus)} ({cap:,.4g} GiB)"})
    if log_scale:
        low = min(v for m in methods for v in result[m][0].values() if v > 0)
        y = _axis("GiB per GPU (log)", type="log", dtick=1,  # labels at 1, 10, 100 GiB: digits between crowd
                  range=[math.log10(max(low / 1.6, 1e-3)), math.log10(max(top, paper[1]) * 1.4)])
    else:
        y = _axis("GiB per GPU", range=[0, top * 1.15])
        if paper[1] > top * 1.15:
            notes.append({"x": "paper", "y": top * 1.08, "showarrow": False, "font": {"color": NO_FIT_COLOUR},
                          "text": f"paper: {paper[1]:,.0f} GiB ↑ (turn on log scale)"})
    return _figure("memory", traces, "<br>".join(title), 480, _axis("", type="category"), y, barmode="stack",
                   shapes=shapes, annotations=notes,
                   legend={"title": {"text": "component"}, "traceorder": "reversed"})  # top to bottom, as stacked


# --- Plans ---------------------------------------------------------------------------------------------------------
def headroom_heatmaps(grid, types: list[str], p: int, lim: float, best: Plan | None) -> go.Figure | None:
    """One heatmap per GPU type (at most PANELS_PER_ROW per row): d (rows) x t (columns) coloured by headroom GiB on
    one shared scale (-lim..lim, deeper deficits saturate red); feasible cells carry a tick, infeasible ones a
    cross, the winning plan a star. z is the grid's headroom_gib (None where the grid has no such split). None when
    the grid has no split at this p."""
    at_p = grid[(grid["pp"] == p) & grid["headroom_gib"].notna()]
    if at_p.empty:
        return None
    winner = (best.gpu_type, best.dp, best.tp) if best is not None and best.pp == p else None
    d_all = sorted(int(v) for v in at_p["dp"].unique())
    t_all = sorted(int(v) for v in at_p["tp"].unique())
    shown = [g for g in types if (at_p["gpu_type"] == g).any()]
    cols = min(PANELS_PER_ROW, len(shown))
    rows = math.ceil(len(shown) / cols)
    gap_x, gap_y = 0.04, 0.12 / max(rows, 1)
    width, height = (1 - gap_x * (cols - 1)) / cols, (1 - gap_y * (rows - 1)) / rows
    d_index, t_index = {d: i for i, d in enumerate(d_all)}, {t: i for i, t in enumerate(t_all)}
    traces, layout, notes = [], {}, []
    for k, gpu_type in enumerate(shown):
        cells = at_p[at_p["gpu_type"] == gpu_type]
        z = [[None] * len(t_all) for _ in d_all]
        marks = [[""] * len(t_all) for _ in d_all]
        for d, t, h, ok in zip(cells["dp"], cells["tp"], cells["headroom_gib"], cells["feasible"], strict=True):
            i, j = d_index[int(d)], t_index[int(t)]
            z[i][j] = round(float(h), 2)
            marks[i][j] = "★" if winner == (gpu_type, int(d), int(t)) else "✓" if ok else "✗"
        r, c = divmod(k, cols)
        suffix = "" if k == 0 else str(k + 1)
        x0, y1 = c * (width + gap_x), 1 - r * (height + gap_y)
        layout[f"xaxis{suffix}"] = _axis("t (tensor-parallel)", type="category", domain=[x0, x0 + width],
                                         anchor=f"y{suffix}", showgrid=False)
        layout[f"yaxis{suffix}"] = _axis("d (data-parallel)" if c == 0 else "", type="category",
                                         domain=[y1 - height, y1], anchor=f"x{suffix}", showgrid=False)
        notes.append({"text": f"<b>{gpu_type}</b>", "xref": "paper", "yref": "paper", "x": x0 + width / 2,
                      "y": y1, "xanchor": "center", "yanchor": "bottom", "showarrow": False})
        traces.append(go.Heatmap(
            name=gpu_type, x=[str(t) for t in t_all], y=[str(d) for d in d_all], z=z, text=marks,
            texttemplate="%{text}", textfont={"size": 14}, coloraxis="coloraxis", xgap=2, ygap=2,
            xaxis=f"x{suffix}", yaxis=f"y{suffix}", hoverongaps=False,
            hovertemplate=f"<b>{gpu_type}</b><br>d=%{{y}}, t=%{{x}}, p={p}<br>headroom %{{z:,.1f}} GiB"
                          "<extra></extra>"))
    title = f"Memory headroom at p={p}" + (" (the best plan's p; ★ = best plan)" if winner else "")
    cell = 44
    fig_height = 80 + rows * (len(d_all) * cell + 90)
    fig = _figure("headroom", traces, title, fig_height, layout.pop("xaxis"), layout.pop("yaxis"),
                  coloraxis={"colorscale": "RdYlGn", "cmin": -lim, "cmax": lim, "cmid": 0,
                             "colorbar": {"title": {"text": "headroom GiB"}, "exponentformat": "none",
                                          "separatethousands": True}},
                  annotations=notes, width=min(1400, 160 + cols * max(len(t_all) * cell + 90, 200)), **layout)
    fig.update_layout(margin={"t": 80})
    return fig


# --- Cluster & packing ---------------------------------------------------------------------------------------------
def job_name(job) -> str:
    return f"{job.job_id}: {job.model} ({job.plan.num_gpus} GPUs)"


def group_chart(cluster, alloc, colour: dict[str, str], spans: list[tuple[str, int, int]]) -> go.Figure | None:
    """One horizontal stacked bar per node group: a trace per placed job (its colour) with the GPUs it holds in
    each group, then the free GPUs in grey (fast at 10,000 nodes: one bar per group)."""
    if not spans:
        return None
    free = alloc.free_per_node()
    groups = [s[0] for s in spans]
    traces = []
    for job in alloc.jobs:
        held = [sum(k for node, k in job.placement.nodes if a <= node < b) for _, a, b in spans]
        traces.append(go.Bar(name=job_name(job), y=groups, x=held, orientation="h",
                             marker={"color": colour[job.job_id]},
                             hovertemplate=f"<b>{job_name(job)}</b><br>%{{y}}: %{{x:,}} GPUs<extra></extra>"))
    traces.append(go.Bar(name="free", y=groups, x=[int(free[a:b].sum()) for _, a, b in spans], orientation="h",
                         marker={"color": FREE_COLOUR},
                         hovertemplate="<b>free</b><br>%{y}: %{x:,} GPUs<extra></extra>"))
    # the legend at the right: below, its job names would overlap a chart only a few bars high
    return _figure("node_groups", traces, "Node groups × GPUs (colour = job, grey = free)",
                   max(240, 140 + 34 * len(spans), 80 + 22 * len(traces)), _axis("GPUs"),
                   _axis("", type="category", autorange="reversed"), barmode="stack",
                   legend={"orientation": "v", "x": 1.02, "y": 1, "yanchor": "top", "traceorder": "normal"})


def node_grid(cluster, alloc, colour: dict[str, str]) -> go.Figure | None:
    """Nodes (rows) x GPU slots (columns): each GPU a cell coloured by the job holding it (grey = free), labelled
    with the job number. One trace per job (and one for the free GPUs): a bar of width 1 per GPU it holds, based at
    the GPU's slot."""
    if not cluster.nodes:
        return None
    names = [n.name for n in cluster.nodes]
    by_id = {j.job_id: j for j in alloc.jobs}
    cells: dict[str | None, tuple[list, list, list]] = {j.job_id: ([], [], []) for j in alloc.jobs}
    cells[None] = ([], [], [])
    for ni, node in enumerate(cluster.nodes):
        for k in range(node.num_gpus):
            owner = alloc.owner[ni][k]
            node_names, slots, types = cells[owner if owner in by_id else None]
            node_names.append(node.name)
            slots.append(k)
            types.append(node.gpu_type)
    traces = []
    for owner, (node_names, slots, types) in cells.items():
        if not node_names:
            continue
        job = by_id.get(owner)
        name = job_name(job) if job else "free"
        plan = job.plan.label() if job else ""
        traces.append(go.Bar(
            name=name, y=node_names, x=[1] * len(slots), base=slots, orientation="h", width=0.85,
            marker={"color": colour[owner] if job else FREE_COLOUR, "line": {"color": "white", "width": 2}},
            text=[owner.replace("job-", "")] * len(slots) if job else None, textposition="inside",
            insidetextanchor="middle", textfont={"color": "white"}, customdata=types,
            hovertemplate=f"<b>{name}</b><br>%{{y}}, GPU %{{base}} (%{{customdata}})"
                          + (f"<br>plan {plan}" if plan else "") + "<extra></extra>"))
    most = max(n.num_gpus for n in cluster.nodes)
    return _figure("node_grid", traces, "Nodes × GPUs (colour = job, grey = free)", 140 + 30 * len(names),
                   _axis("GPU slot", range=[0, most], tickvals=[k + 0.5 for k in range(most)],  # cell centres
                         ticktext=[str(k) for k in range(most)], showgrid=False),
                   _axis("", type="category", categoryorder="array", categoryarray=names, autorange="reversed"),
                   barmode="overlay", bargap=0.1)


def capacity_chart(caps: dict[str, tuple[int, int]]) -> go.Figure | None:
    """Used and free GPUs per GPU type, stacked (caps: type -> (free, total), frenzy_core.allocation.free_by_type)."""
    if not caps:
        return None
    types = list(caps)
    used = go.Bar(name="used", x=types, y=[int(t - f) for f, t in caps.values()], marker={"color": USED_COLOUR},
                  hovertemplate="<b>used</b><br>%{x}: %{y:,} GPUs<extra></extra>")
    free = go.Bar(name="free", x=types, y=[int(f) for f, _ in caps.values()], marker={"color": FREE_COLOUR},
                  hovertemplate="<b>free</b><br>%{x}: %{y:,} GPUs<extra></extra>")
    return _figure("capacity", [used, free], "GPUs per type", 300, _axis("", type="category"),
                   _axis("GPUs", rangemode="tozero"), barmode="stack")


# --- Simulation ----------------------------------------------------------------------------------------------------
def _lines(series: dict[str, tuple[np.ndarray, np.ndarray]], y_unit: str, y_format: str) -> list[go.Scatter]:
    """One step line per policy (the value holds from each point to the next) in its fixed colour."""
    return [go.Scatter(name=name, x=x, y=y, mode="lines", line={"shape": "hv", "color": colour(name), "width": 2},
                       hovertemplate=f"<b>{name}</b><br>%{{x:,.2f}} h<br>%{{y:{y_format}}} {y_unit}<extra></extra>")
            for name, (x, y) in series.items() if len(x)]


def arrivals_spec(trace) -> go.Figure | None:
    """A histogram (at most 40 bins) of the trace's arrival times, in hours. None for a trace without jobs."""
    hours = np.array([j.arrival_s for j in trace.jobs], dtype=float) / HOUR
    if not hours.size:
        return None
    bars = go.Histogram(name="arrivals", x=hours, nbinsx=40, marker={"color": "#90a4ae"},
                        hovertemplate="%{x} h<br>%{y:,} jobs<extra></extra>")
    return _figure("arrivals", [bars], "Arrivals over time", 260, _axis("hours"), _axis("jobs"), showlegend=False)


def cdf_series(results: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per policy, the empirical CDF of JCT over all seeds (finished jobs): the i-th shortest of n (hours) at i/n."""
    out = {}
    for name, res in results.items():
        jct = np.sort(np.concatenate([np.asarray(r.jobs["jct_s"], dtype=float) for r in res.results]))
        jct = jct[np.isfinite(jct)] / HOUR
        out[name] = (jct, np.arange(1, jct.size + 1) / max(jct.size, 1))
    return out


def cdf_spec(results: dict) -> go.Figure | None:
    """The JCT CDF per policy (cdf_series) on a log time axis. None when no job finished."""
    traces = _lines(cdf_series(results), "of jobs", ".1%")
    if not traces:
        return None
    return _figure("cdf", traces, "JCT CDF (all seeds)", 360, _axis("job completion time (h, log)", type="log"),
                   _axis("fraction of jobs", range=[0, 1.02], tickformat=".0%"))


def _error_bars(mean: list[float | None], low: list[float | None], high: list[float | None]) -> dict | None:
    """Plotly's asymmetric error bar from CI bounds (None: no bar at that point, nor where the bar has no width)."""
    keep = [_drawn(lo, hi) for lo, hi in zip(low, high, strict=True)]
    if not any(keep):
        return None
    low = [lo if k else None for lo, k in zip(low, keep, strict=True)]
    high = [hi if k else None for hi, k in zip(high, keep, strict=True)]
    up = [None if h is None or m is None else h - m for m, h in zip(mean, high, strict=True)]
    down = [None if lo is None or m is None else m - lo for m, lo in zip(mean, low, strict=True)]
    return {"type": "data", "symmetric": False, "array": up, "arrayminus": down, "color": CI_COLOUR,
            "thickness": 1.5, "width": 6}


def jct_bars_spec(results: dict) -> go.Figure | None:
    """Average and p99 JCT (means over seeds, hours): one bar per policy in each group, in the policy's colour,
    with the 95% CI (MultiSeedResult.ci) as an error bar from MIN_CI_SEEDS seeds up (the title says when not)."""
    traces = []
    for name, res in results.items():
        mean, low, high = [], [], []
        for metric in ("avg_jct_s", "p99_jct_s"):
            m, lo, hi = res.ci(metric)
            ci = has_ci(len(res.results), lo, hi)
            mean.append(num(m / HOUR))
            low.append(num(lo / HOUR) if ci else None)
            high.append(num(hi / HOUR) if ci else None)
        ci_text = "<br>95% CI %{customdata[0]:,.2f} – %{customdata[1]:,.2f} h" if low[0] is not None else ""
        traces.append(go.Bar(name=name, x=["average", "p99"], y=mean, marker={"color": colour(name)},
                             error_y=_error_bars(mean, low, high), customdata=list(zip(low, high, strict=True)),
                             hovertemplate=f"<b>{name}</b> %{{x}} JCT<br>%{{y:,.2f}} h{ci_text}<extra></extra>"))
    if not any(v is not None for t in traces for v in t.y):
        return None
    few = min(len(res.results) for res in results.values())
    title = "Average and p99 JCT, 95% CI" if few >= MIN_CI_SEEDS else \
        f"Average and p99 JCT (mean of {few} seed{'s' * (few != 1)}, no CI)"
    return _figure("jct_bars", traces, title, 360, _axis("", type="category"),
                   _axis("hours", rangemode="tozero"), barmode="group")


def queue_series(results: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per policy, jobs arrived but not started over time on seed 0 (frenzy_core.timeline.queue_length), hours."""
    out = {}
    for name, res in results.items():
        r = res.results[0]
        t, q = queue_length(r.jobs["arrival_s"], r.jobs["start_s"])
        out[name] = (np.asarray(t, dtype=float) / HOUR, np.asarray(q))
    return out


def queue_spec(results: dict) -> go.Figure | None:
    """Queued jobs over time per policy (queue_series). None when no job ever waited under any policy: a chart of
    flat zero lines says less than the page's one sentence."""
    series = queue_series(results)
    traces = _lines(series, "jobs waiting", ",d")
    if not traces or not any(np.any(q > 0) for _, q in series.values()):
        return None
    return _figure("queue", traces, "Queued jobs over time (seed 0)", 320, _axis("hours"),
                   _axis("jobs waiting", rangemode="tozero"))


def util_series(results: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per policy, the share of the cluster's GPUs busy over time on seed 0 (SimResult.utilisation), in %."""
    out = {}
    for name, res in results.items():
        u = res.results[0].utilisation()
        out[name] = (np.asarray(u["time_s"], dtype=float) / HOUR, 100.0 * np.asarray(u["utilisation"], dtype=float))
    return out


def util_spec(results: dict) -> go.Figure | None:
    traces = _lines(util_series(results), "% GPUs busy", ",.1f")
    if not traces:
        return None
    return _figure("utilisation", traces, "GPU utilisation over time (seed 0)", 320, _axis("hours"),
                   _axis("% GPUs busy", range=[0, 102]))


def gpu_hours_spec(results: dict) -> go.Figure | None:
    """GPU-hours per GPU type (mean over seeds of SimResult.gpu_hours_by_type), one bar per policy in each group."""
    traces = []
    for name, res in results.items():
        per = [r.gpu_hours_by_type() for r in res.results]
        types = list(per[0])
        traces.append(go.Bar(name=name, x=types, y=[float(np.mean([p.get(t, 0.0) for p in per])) for t in types],
                             marker={"color": colour(name)},
                             hovertemplate=f"<b>{name}</b><br>%{{x}}: %{{y:,.1f}} GPU-hours<extra></extra>"))
    if not any(len(t.x) for t in traces):
        return None
    return _figure("gpu_hours", traces, "GPU-hours per GPU type (mean over seeds)", 320, _axis("", type="category"),
                   _axis("GPU-hours", rangemode="tozero"), barmode="group")


def oom_spec(results: dict) -> go.Figure | None:
    """Out-of-memory failures per run (mean over seeds), one bar per policy in its colour, with the 95% CI as an
    error bar from MIN_CI_SEEDS seeds up; the axis reaches at least 1 so that zero failures reads as zero. None when
    no policy had a failure in any run (the page says so in one sentence instead of an empty chart)."""
    if not any((num(res.ci("oom_failures")[0]) or 0.0) > 0 for res in results.values()):
        return None
    traces, top = [], 1.0
    for name, res in results.items():
        mean, lo, hi = res.ci("oom_failures")
        ci = has_ci(len(res.results), lo, hi)
        low, high = (num(lo), num(hi)) if ci else (None, None)
        top = max(top, high or 0.0, num(mean) or 0.0)
        ci_text = f"<br>95% CI {low:,.2f} – {high:,.2f}" if ci and _drawn(low, high) else ""
        traces.append(go.Bar(name=name, x=[name], y=[num(mean)], marker={"color": colour(name)},
                             error_y=_error_bars([num(mean)], [low], [high]), showlegend=False,
                             hovertemplate=f"<b>{name}</b><br>%{{y:,.2f}} failures per run{ci_text}<extra></extra>"))
    if not traces:
        return None
    return _figure("oom", traces, "Out-of-memory failures per run", 320, _axis("", type="category"),
                   _axis("failures per run", range=[0, top * 1.1], rangemode="tozero"), barmode="overlay")


# --- GPU mix what-if -----------------------------------------------------------------------------------------------
def frontier_spec(result) -> go.Figure | None:
    """Each candidate's average JCT (h) against the cluster's cost ($/h), named; blue circles within the budget, red
    crosses over it, with the 95% CI as an error bar from MIN_CI_SEEDS seeds up; the frontier
    (frenzy_core.whatif's on_frontier) as a dashed line by cost; a dotted red line at today's cost plus the budget.
    None when no candidate has a finite cost and JCT."""
    seeds = len(result.seeds)
    rows = [c for c in result.candidates if num(c.cost_per_hour) is not None and num(c.avg_jct_s) is not None]
    if not rows:
        return None
    front = sorted((c for c in rows if c.on_frontier), key=lambda c: c.cost_per_hour)
    traces = [go.Scatter(name="frontier", x=[c.cost_per_hour for c in front], y=[c.avg_jct_s / HOUR for c in front],
                         mode="lines", line={"color": "#90a4ae", "dash": "dash", "width": 2}, hoverinfo="skip")]
    for label, within, mark, tint in (("within budget", True, "circle", WITHIN_COLOUR),
                                      ("over budget", False, "x", OVER_COLOUR)):
        group = [c for c in rows if bool(c.within_budget) == within]
        if not group:
            continue
        mean = [c.avg_jct_s / HOUR for c in group]
        ci = [has_ci(seeds, c.ci_low_s, c.ci_high_s) for c in group]
        low = [num(c.ci_low_s / HOUR) if ok else None for c, ok in zip(group, ci, strict=True)]
        high = [num(c.ci_high_s / HOUR) if ok else None for c, ok in zip(group, ci, strict=True)]
        ci_text = "<br>95% CI %{customdata[2]:,.2f} – %{customdata[3]:,.2f} h" if any(ci) else ""
        traces.append(go.Scatter(
            name=label, x=[c.cost_per_hour for c in group], y=mean, mode="markers+text",
            text=[c.candidate for c in group], textposition="top center", textfont={"color": tint},
            marker={"color": tint, "symbol": mark, "size": 12}, error_y=_error_bars(mean, low, high),
            customdata=[[c.gpus, c.added_cost_per_hour, lo, hi] for c, lo, hi in zip(group, low, high, strict=True)],
            hovertemplate="<b>%{text}</b> (%{customdata[0]:,} GPUs)<br>cost $%{x:,.2f}/h (added "
                          "$%{customdata[1]:,.2f}/h)<br>average JCT %{y:,.2f} h" + ci_text + "<extra></extra>"))
    budget_x = result.row(TODAY).cost_per_hour + result.budget_per_hour
    shapes = [{"type": "line", "xref": "x", "x0": budget_x, "x1": budget_x, "yref": "paper", "y0": 0, "y1": 1,
               "line": {"color": OVER_COLOUR, "dash": "dot", "width": 1.5}}]
    notes = [{"x": budget_x, "xref": "x", "y": 1, "yref": "paper", "xanchor": "right", "yanchor": "top",
              "showarrow": False, "text": f"budget ${budget_x:,.2f}/h", "font": {"color": OVER_COLOUR}}]
    return _figure("frontier", traces, None, 440, _axis(f"cluster cost ($/h, {result.pricing})", tickprefix="$"),
                   _axis("average JCT (h), 95% CI" if seeds >= MIN_CI_SEEDS else "average JCT (h)"),
                   shapes=shapes, annotations=notes)
