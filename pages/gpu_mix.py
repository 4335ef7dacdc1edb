"""GPU mix what-if: candidate purchases on top of today's cluster, each simulated on the same workload; average JCT
against cost per hour, the frontier, the budget, and a table to export."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG
from frenzy_core.policies import REGISTRY
from frenzy_core.simulate import SimOptions, simulate_seeds
from frenzy_core.whatif import DEFAULT_CANDIDATES, TODAY, build_candidates, cluster_cost_per_hour, pareto_front
from pages import common

common.page_setup()

ss = st.session_state
HOUR = 3600.0
DEFAULT_TABLE = pd.DataFrame([asdict(c) for c in DEFAULT_CANDIDATES])  # the editor's starting rows

st.title("GPU mix what-if")
base = common.cluster()
base_cost = cluster_cost_per_hour(base)
st.caption(f"Today: **{base.name}**, {base.total_gpus} GPUs "
           f"({', '.join(f'{n} × {g}' for g, n in base.gpus_by_type().items())}), ${base_cost:,.2f}/h at catalog "
           "prices. Each candidate adds GPUs in new nodes; every option runs the same workload and policy.")

left, right = st.columns([1.3, 1], gap="large")
with left:
    st.markdown("**Candidates** (rows with the same name add up)")
    frame = st.data_editor(DEFAULT_TABLE, key="wi_candidates", num_rows="dynamic", hide_index=True,
                           width="stretch", column_config={
                               "candidate": st.column_config.TextColumn("candidate", required=True),
                               "gpu_type": st.column_config.SelectboxColumn("GPU type", options=list(CATALOG),
                                                                            required=True),
                               "count": st.column_config.NumberColumn("GPUs to add", min_value=0, step=1,
                                                                      required=True),
                               "gpus_per_node": st.column_config.NumberColumn("GPUs per node", min_value=1,
                                                                              max_value=64, step=1, default=8),
                           })
    budget = st.number_input("Budget for the additions ($ per hour, catalog prices)", min_value=0.0, value=100.0,
                             step=10.0, key="wi_budget")
with right:
    st.markdown("**Workload**")
    trace = common.trace_picker("wi")
    c1, c2 = st.columns(2)
    policy = c1.selectbox("Policy", list(REGISTRY), key="wi_policy",
                          index=list(REGISTRY).index("frenzy-eft") if "frenzy-eft" in REGISTRY else 0)
    seeds = c2.number_input("seeds", min_value=1, max_value=10, value=2, step=1, key="wi_seeds")

try:
    candidates = build_candidates(base, frame.to_dict("records"))
except SpecError as err:
    common.show_error(err, "candidates")
    candidates = ss.get("wi_last_candidates") or {TODAY: base}
    st.caption("Using the last valid candidate list until the table is fixed.")
else:
    ss.wi_last_candidates = candidates

preview = pd.DataFrame([{
    "candidate": label, "GPUs": c.total_gpus, "added GPUs": c.total_gpus - base.total_gpus,
    "cost $/h": cluster_cost_per_hour(c), "added $/h": cluster_cost_per_hour(c) - base_cost,
    "within budget": cluster_cost_per_hour(c) - base_cost <= budget + 1e-9,
} for label, c in candidates.items()])
st.dataframe(preview, hide_index=True, width="stretch", key="wi_preview", column_config={
    "cost $/h": st.column_config.NumberColumn(format="$%.2f"),
    "added $/h": st.column_config.NumberColumn(format="$%.2f")})

run = st.button(f"Simulate {len(candidates)} options", type="primary", key="wi_run", disabled=trace is None)
if run and trace is not None:
    bar = st.progress(0, text="Starting…")
    rows = []
    try:
        n = len(candidates)
        for i, (label, cl) in enumerate(candidates.items()):
            def progress(f: float, i=i, label=label) -> None:
                bar.progress(min(100, int(100 * (i + f) / n)), text=f"Simulating {label} ({i + 1}/{n})")
            res = simulate_seeds(trace, cl, policy, seeds=range(int(seeds)), options=SimOptions(), progress=progress,
                                 workload_cluster=base)  # every candidate runs the same LLM jobs
            avg, lo, hi = res.ci("avg_jct_s")
            m = res.summary_dict()
            cost = cluster_cost_per_hour(cl)
            rows.append({"candidate": label, "GPUs": cl.total_gpus, "cost $/h": cost, "added $/h": cost - base_cost,
                         "avg JCT h": avg / HOUR, "CI low h": lo / HOUR, "CI high h": hi / HOUR,
                         "p99 JCT h": m["p99_jct_s"] / HOUR, "avg queue h": m["avg_queue_s"] / HOUR,
                         "utilisation": res.ci("avg_utilisation")[0], "OOM failures": m["oom_failures"],
                         "completed": m["completed"], "jobs": m["jobs"]})
    except SpecError as err:
        common.show_error(err, "simulation")
    else:
        table = pd.DataFrame(rows)
        table["within budget"] = table["added $/h"] <= budget + 1e-9
        table["on frontier"] = pareto_front(table["cost $/h"].tolist(), table["avg JCT h"].tolist())
        ss.wi_results = table
        no_ci = " (no 95% interval with one seed: CI columns n/a)" if int(seeds) < 2 else ""
        ss.wi_meta = (f"{policy} on {ss.get('wi_trace_label') or trace.source} ({len(trace.jobs)} jobs), "
                      f"{int(seeds)} seed(s){no_ci}; budget ${budget:,.0f}/h for additions")
    bar.empty()

table = ss.get("wi_results")
if table is None:
    st.info("Edit the candidates, budget and workload, then **Simulate**. Today's cluster is always included.")
else:
    st.subheader("Average JCT against cost", anchor=False)
    st.caption(ss.get("wi_meta", ""))
    fig = go.Figure()
    front = table[table["on frontier"]].sort_values("cost $/h")
    fig.add_scatter(x=front["cost $/h"], y=front["avg JCT h"], mode="lines", name="frontier",
                    line=dict(color="#90a4ae", dash="dash"))
    for ok, name, symbol in ((True, "within budget", "circle"), (False, "over budget", "x")):
        part = table[table["within budget"] == ok]
        if part.empty:
            continue
        fig.add_scatter(
            x=part["cost $/h"], y=part["avg JCT h"], mode="markers+text", name=name, text=part["candidate"],
            textposition="top center", marker=dict(size=13, symbol=symbol, color="#1565c0" if ok else "#c62828"),
            error_y=dict(type="data", array=part["CI high h"] - part["avg JCT h"],
                         arrayminus=part["avg JCT h"] - part["CI low h"]))
    limit = base_cost + (ss.get("wi_budget") or 0.0)
    fig.add_vline(x=limit, line_dash="dot", line_color="#c62828", annotation_text="budget")
    fig.update_layout(xaxis_title="cluster cost ($/h, catalog prices)", yaxis_title="average JCT (h), 95% CI",
                      height=420, margin=dict(l=10, r=10, t=30, b=10))
    st.plotly_chart(fig, key="wi_frontier", width="stretch")
    best = table[table["within budget"]].sort_values(["avg JCT h", "cost $/h"]).head(1)
    if not best.empty:
        b = best.iloc[0]
        st.success(f"Within budget, **{b['candidate']}** gives the lowest average JCT: {b['avg JCT h']:.2f} h at "
                   f"${b['cost $/h']:,.2f}/h ({b['added $/h']:+,.2f}/h).")
    st.dataframe(table, hide_index=True, width="stretch", key="wi_table", column_config={
        k: st.column_config.NumberColumn(format="%.2f") for k in
        ("cost $/h", "added $/h", "avg JCT h", "CI low h", "CI high h", "p99 JCT h", "avg queue h", "utilisation")})
    st.download_button("Download table (CSV)", table.to_csv(index=False), file_name="gpu_mix_whatif.csv",
                       mime="text/csv", key="wi_csv", icon=":material/download:")
