"""Plans: every (GPU type, d, t, p) for the current model on the current cluster, as headroom heatmaps and a ranked
table under a chosen objective, with one sentence on why the top plan wins."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from frenzy_core.errors import SpecError
from pages import common

common.page_setup()

OBJECTIVE_LABELS = {"time": "time to train", "gpu-hours": "GPU-hours", "cost": "cost", "gpus": "fewest GPUs"}


def heatmaps(grid, types: list[str], p: int, lim: float) -> go.Figure:
    """One panel per GPU type: d (rows) x t (columns) coloured by headroom GiB; infeasible cells carry a cross.
    One figure with shared axes and one colour bar (cheaper to draw than a figure per type)."""
    fig = make_subplots(rows=1, cols=len(types), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[f"{g} · p={p}" for g in types])
    d_all = sorted(int(v) for v in grid["dp"].unique())
    t_all = sorted(int(v) for v in grid["tp"].unique())
    for i, gpu_type in enumerate(types, start=1):
        cells = grid[(grid["gpu_type"] == gpu_type) & (grid["pp"] == p)]
        table = cells.pivot_table(index="dp", columns="tp", values="headroom_gib", aggfunc="first")
        table = table.reindex(index=d_all, columns=t_all)
        feasible = cells.pivot_table(index="dp", columns="tp", values="feasible", aggfunc="first")
        feasible = feasible.reindex(index=d_all, columns=t_all)
        text = [["" if v != v else ("✓" if f else "✗") for v, f in zip(row, frow, strict=True)]
                for row, frow in zip(table.values, feasible.values, strict=True)]
        fig.add_trace(go.Heatmap(
            z=table.values, x=[f"t={t}" for t in t_all], y=[f"d={d}" for d in d_all], text=text,
            texttemplate="%{text}", colorscale="RdYlGn", zmid=0, zmin=-lim, zmax=lim, xgap=2, ygap=2,
            showscale=(i == len(types)), colorbar=dict(title="headroom GiB", thickness=12),
            hovertemplate="%{y} %{x} p=" + str(p) + "<br>headroom %{z:.1f} GiB<extra>" + gpu_type + "</extra>",
        ), row=1, col=i)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=40, b=10))
    return fig


st.title("Plans")
m, t, c = common.model(), common.training(), common.cluster()
st.caption(f"{m.name} · seq {t.seq_len} · global batch {t.global_batch} · {t.precision} · ZeRO-{t.zero_stage} · "
           f"recompute {t.recompute} on **{c.name}** ({c.total_gpus} GPUs). Change them on the Model & memory and "
           "Cluster pages.")

c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
objective = c1.segmented_control("Rank by", list(OBJECTIVE_LABELS), format_func=OBJECTIVE_LABELS.get,
                                 default="time", key="plans_objective") or "time"
tokens = c2.number_input("token budget", min_value=1e6, value=1e10, step=1e9, format="%.3g", key="plans_tokens")
method = c3.selectbox("memory method", ["detailed", "paper"], key="plans_method")
margin = c4.slider("safety margin", 0.0, 0.5, 0.10, 0.01, key="plans_margin",
                   help="fraction of each GPU's memory kept free")

try:
    with st.spinner("Ranking plans…"):
        result = common.ranked_plans(m.model_dump_json(), t.model_dump_json(), c.model_dump_json(), objective, float(tokens),
                        method, float(margin))
except SpecError as err:
    common.show_error(err)
    st.stop()

grid = result.grid
if len(result.plans):
    st.success(result.why_top, icon=":material/emoji_events:")
else:
    st.error(result.explanation, icon=":material/block:")

st.subheader("Memory headroom per split", anchor=False)
if grid.empty:
    st.info("No split could be enumerated for this batch on this cluster.")
else:
    grid = grid.assign(headroom_gib=grid["headroom_bytes"] / common.GIB_FLOAT)
    p_values = sorted(int(v) for v in grid["pp"].unique())
    p = st.select_slider("pipeline stages p", p_values, value=p_values[0], key="plans_p") if len(p_values) > 1 \
        else p_values[0]
    types = list(dict.fromkeys(grid["gpu_type"]))
    # one colour scale for every GPU type, spanning the feasible headroom (deeper deficits saturate red)
    fit = grid.loc[grid["feasible"], "headroom_gib"]
    lim = max(1.0, float(fit.max()) if len(fit) else float(grid["headroom_gib"].abs().max()))
    st.plotly_chart(heatmaps(grid, types, p, lim), key="plans_heatmaps", width="stretch")
    st.caption("Green: fits with that much memory to spare (after the safety margin); red ✗: does not fit. "
               "Each cell uses the micro-batch with the fastest step that fits.")

st.subheader(f"Ranked plans ({len(result.plans)} feasible)", anchor=False)
if len(result.plans):
    frame = result.to_frame()
    table = frame.assign(
        memory_gib=frame["memory_bytes"] / common.GIB_FLOAT, headroom_gib=frame["headroom_bytes"] / common.GIB_FLOAT,
        days=frame["time_to_train_s"] / 86400.0,
    )[["gpu_type", "dp", "tp", "pp", "num_gpus", "micro_batch", "grad_accum", "memory_gib", "headroom_gib",
       "step_time_s", "tokens_per_s", "days", "gpu_hours", "cost_usd"]]
    table.index = range(1, len(table) + 1)
    st.dataframe(table.head(200), width="stretch", height=380, column_config={
        "memory_gib": st.column_config.NumberColumn("GiB/GPU", format="%.1f"),
        "headroom_gib": st.column_config.NumberColumn("headroom GiB", format="%.1f"),
        "step_time_s": st.column_config.NumberColumn("step s", format="%.3f"),
        "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
        "days": st.column_config.NumberColumn("days", format="%.2f"),
        "gpu_hours": st.column_config.NumberColumn("GPU-hours", format="%.0f"),
        "cost_usd": st.column_config.NumberColumn("cost $", format="%.0f"),
    }, key="plans_table")
    st.download_button("Download all plans (CSV)", table.to_csv(index_label="rank"), file_name="plans.csv",
                       mime="text/csv", key="plans_csv")
