"""GPU mix what-if: candidate purchases on top of today's cluster, each simulated on the same workload over several
seeds by `frenzy_core.whatif.run_whatif` (through `frenzy_core.sweep`, local backend); this page only edits the
inputs and draws the answer: average JCT with its 95% CI against cost, the frontier, the budget verdict and whether
it is significant."""

from __future__ import annotations

import math
import time
from dataclasses import asdict

import pandas as pd
import streamlit as st

from frenzy_core.errors import SpecError
from frenzy_core.limits import MAX_SCENARIO_SEEDS
from frenzy_core.models import ZOO
from frenzy_core.policies import EVENT_POLICIES
from frenzy_core.policies import note as policy_note
from frenzy_core.sweep import default_workers
from frenzy_core.tco import (
    DEFAULT_LIFE_YEARS,
    DEFAULT_PUE,
    DEFAULT_USD_PER_KWH,
    KWH_SOURCE,
    LIFE_SOURCE,
    PRICING,
    PUE_SOURCE,
    CostModel,
)
from frenzy_core.whatif import (
    DEFAULT_BUDGET_PER_HOUR,
    DEFAULT_CANDIDATES,
    DEFAULT_POLICY,
    DEFAULT_SEEDS,
    TODAY,
    WeeklyJob,
    WeeklyJobs,
    build_candidates,
    run_whatif,
    search_mixes,
)
from pages import charts, common
from pages.charts import HOUR

common.page_setup()

ss = st.session_state
DEFAULT_JOBS = pd.DataFrame([{"model": "llama-2-7b", "runs_per_week": 3.0, "gpus": 16, "hours": 12.0,
                              "gpu_type": "A100-80GB"},
                             {"model": "gpt2-xl", "runs_per_week": 20.0, "gpus": 4, "hours": 3.0,
                              "gpu_type": "A100-80GB"}])

# Streamlit drops a widget's value when its page is left; these settings are kept in plain keys (kept_<key>) and
# re-seed their widgets on return, so the widgets take their values from session state only (no value= argument).
# The data editors keep their base tables (wi_table, the defaults).
SETTINGS = {"wi_pricing": "rental", "wi_budget": DEFAULT_BUDGET_PER_HOUR, "wi_life": DEFAULT_LIFE_YEARS,
            "wi_pue": DEFAULT_PUE, "wi_kwh": DEFAULT_USD_PER_KWH, "wi_source": "a trace", "wi_weeks": 4.0,
            "wi_policy": DEFAULT_POLICY if DEFAULT_POLICY in EVENT_POLICIES else EVENT_POLICIES[0],
            "wi_seeds": DEFAULT_SEEDS, "wi_workers": default_workers(), "wi_search_types": ["H100-80GB", "L40S"],
            "wi_search_step": 8, "wi_search_keep": 6}
for _key, _default in SETTINGS.items():
    if _key not in ss:
        ss[_key] = ss.get(f"kept_{_key}", _default)

st.title("GPU mix what-if")
base = common.cluster()
types = list(base.type_table)
if "wi_table" not in ss:  # the candidate rows the editor starts from (a mix search replaces them)
    ss.wi_table = pd.DataFrame([asdict(c) for c in DEFAULT_CANDIDATES])
    ss.wi_table_version = 0


def editor_base(name: str, widget_key: str, default: pd.DataFrame, same_first_column: bool = False) -> pd.DataFrame:
    """The table a data editor starts from. Streamlit drops an editor's edits (its widget state) when the page is
    left; the edited table is kept under kept_<name> and becomes the base on return, when the widget state is gone
    (so no edit is applied twice). A kept table whose columns, or with `same_first_column` whose first column (the
    cluster's GPU types), no longer match the default is dropped."""
    kept = ss.get(f"kept_{name}")
    if widget_key not in ss and kept is not None and list(kept.columns) == list(default.columns) and (
            not same_first_column or list(kept.iloc[:, 0]) == list(default.iloc[:, 0])):
        ss[name] = kept
    if name not in ss or (same_first_column and list(ss[name].iloc[:, 0]) != list(default.iloc[:, 0])):
        ss[name] = default
    return ss[name]


left, right = st.columns([1.3, 1], gap="large")
with left:
    st.markdown("**Candidates** (rows with the same name add up; today's cluster is always included)")
    version = ss.wi_table_version
    candidates_key = "wi_candidates" if version == 0 else f"wi_candidates_{version}"
    frame = st.data_editor(editor_base("wi_table", candidates_key, ss.wi_table), key=candidates_key,
                           num_rows="dynamic", hide_index=True, width="stretch",
                           # the count next to the name: below 1,150 px the last column scrolls out of view
                           column_order=("candidate", "count", "gpu_type", "gpus_per_node"), column_config={
                               # widths that fit the left column at 1,280 px (no sideways scrolling)
                               "candidate": st.column_config.TextColumn("candidate", required=True, width=105),
                               "gpu_type": st.column_config.SelectboxColumn("GPU type", options=types, required=True,
                                                                            width=100),
                               "count": st.column_config.NumberColumn("GPUs to add", min_value=0, step=1,
                                                                      required=True, width=95),
                               "gpus_per_node": st.column_config.NumberColumn("per node", min_value=1, max_value=64,
                                                                              step=1, default=8, width=75,
                                                                              help="GPUs per node"),
                           })
    ss.kept_wi_table = frame
    c1, c2 = st.columns(2)
    pricing = c1.radio("Cost per hour as", PRICING, horizontal=True, key="wi_pricing",
                       help="rental: $/GPU-hour prices; owned: purchase amortised over the life + power")
    # a one-line label (the detail in the tooltip): a two-line one sits the box below the radio next to it
    budget = c2.number_input("Budget ($/h added)", min_value=0.0, max_value=1e7, step=10.0, key="wi_budget",
                             help="the most the added GPUs may cost per hour, on top of today's cluster")
    with st.expander("Costs: purchase, power, rental (editable; defaults with sources)"):
        k1, k2, k3 = st.columns(3)
        life = k1.number_input("life (years)", min_value=0.5, max_value=20.0, step=0.5, key="wi_life",
                               help=LIFE_SOURCE)
        pue = k2.number_input("PUE", min_value=1.0, max_value=3.0, step=0.05, key="wi_pue", help=PUE_SOURCE)
        kwh = k3.number_input("$ per kWh", min_value=0.0, max_value=2.0, step=0.01, format="%.3f", key="wi_kwh",
                              help=KWH_SOURCE)
        defaults = CostModel()
        cost_rows = [{"GPU type": t, "purchase $": defaults.cost(t).purchase_usd if defaults.has(t) else None,
                      "TDP W": defaults.cost(t).tdp_w if defaults.has(t) else None,
                      "rental $/h": base.gpu(t).price_per_hour_usd,
                      "sources": (f"{defaults.cost(t).purchase_source}; {defaults.cost(t).tdp_source}"
                                  if defaults.has(t) else "cluster-defined type: enter a price and TDP")}
                     for t in types]
        costs_frame = st.data_editor(editor_base("wi_costs_base", "wi_costs", pd.DataFrame(cost_rows),
                                                 same_first_column=True), key="wi_costs", hide_index=True,
                                     width="stretch",
                                     disabled=["GPU type", "sources"], column_config={
                                         "purchase $": st.column_config.NumberColumn(min_value=0.0, format="$%,.0f"),
                                         "TDP W": st.column_config.NumberColumn(min_value=0.0, format="%.0f"),
                                         "rental $/h": st.column_config.NumberColumn(min_value=0.0, format="$%.2f")})
        ss.kept_wi_costs_base = costs_frame
    with st.expander("Search mixes under the budget"):
        ss.wi_search_types = [t for t in ss.wi_search_types if t in types]  # the cluster may have changed
        search_types = st.multiselect("GPU types to mix", types, key="wi_search_types")
        s1, s2 = st.columns(2)
        step = s1.number_input("GPUs per step (a server)", min_value=1, max_value=64, key="wi_search_step")
        keep = s2.number_input("mixes to keep", min_value=1, max_value=24, key="wi_search_keep")
        search = st.button("Replace the candidates with these mixes", key="wi_search")

with right:
    st.markdown("**Workload**")
    source = st.radio("Jobs from", ["a trace", "my jobs"], horizontal=True, key="wi_source")
    if source == "a trace":
        trace = common.trace_picker("wi")
        workload, workload_label = trace, ss.get("wi_trace_label") or (trace.source if trace else "")
    else:
        st.caption("Each row: runs per week of a model, each `hours` long on `gpus` GPUs of that type (Poisson "
                   "arrivals, drawn per seed).")
        jobs_frame = st.data_editor(editor_base("wi_jobs_base", "wi_jobs", DEFAULT_JOBS), key="wi_jobs",
                                    num_rows="dynamic", hide_index=True,
                                    width="stretch", column_config={
                                        "model": st.column_config.SelectboxColumn(options=list(ZOO), required=True),
                                        "runs_per_week": st.column_config.NumberColumn("runs / week", min_value=0.0),
                                        "gpus": st.column_config.NumberColumn("GPUs", min_value=1, step=1),
                                        "hours": st.column_config.NumberColumn("hours per run", min_value=0.0),
                                        "gpu_type": st.column_config.SelectboxColumn("on GPU type", options=types)})
        ss.kept_wi_jobs_base = jobs_frame
        weeks = st.number_input("weeks to simulate", min_value=0.5, max_value=52.0, step=0.5, key="wi_weeks")
        try:
            workload = WeeklyJobs(tuple(
                WeeklyJob(str(r["model"]), float(r["runs_per_week"]), int(r["gpus"]), float(r["hours"]),
                          r["gpu_type"] if isinstance(r["gpu_type"], str) and r["gpu_type"] else None)
                for r in jobs_frame.to_dict("records") if isinstance(r.get("model"), str)), weeks=float(weeks))
        except (SpecError, TypeError, ValueError) as err:
            common.show_error(err if isinstance(err, SpecError) else SpecError("jobs", f"fill every column ({err})"),
                              "my jobs")
            workload = None
        workload_label = "my jobs"
    policy = st.selectbox("Policy", list(EVENT_POLICIES), key="wi_policy")  # own row: a third of it clips the names
    st.caption(policy_note(policy))  # the policy's own note (its module's NOTE, through the registry)
    c2, c3 = st.columns(2)
    seeds = c2.number_input("seeds", min_value=1, max_value=MAX_SCENARIO_SEEDS, step=1, key="wi_seeds",
                            help="5 by default: with 2 seeds a 95% interval is mean ± 12.7 standard errors")
    workers = c3.number_input("worker processes", min_value=1, max_value=64, step=1, key="wi_workers",
                              help="1 runs in this server process; more start a process pool")



def _column(records: list[dict], name: str) -> dict[str, float]:
    """GPU type -> the cell of one cost column, for the cells the user has filled."""
    return {r["GPU type"]: float(r[name]) for r in records
            if r[name] is not None and not (isinstance(r[name], float) and math.isnan(r[name]))}


try:
    cost_records = costs_frame.to_dict("records")
    costs = CostModel().with_overrides(
        purchase_usd=_column(cost_records, "purchase $"), tdp_w=_column(cost_records, "TDP W"),
        rental_usd_per_hour=_column(cost_records, "rental $/h"), life_years=float(life), pue=float(pue),
        usd_per_kwh=float(kwh))
except SpecError as err:
    common.show_error(err, "costs")
    costs = CostModel()

if search:
    try:
        rows = search_mixes(base, search_types, float(budget), costs, pricing, step=int(step),
                            max_candidates=int(keep))
    except SpecError as err:
        common.show_error(err, "mix search")
    else:
        if rows:
            ss.wi_table = pd.DataFrame(rows)
            ss.pop("kept_wi_table", None)  # the search result replaces the edited candidates
            ss.wi_table_version += 1
            st.rerun()
        st.warning("No mix of those types fits the budget; raise it or pick cheaper types.")

try:
    candidates = build_candidates(base, frame.to_dict("records"))
except SpecError as err:
    common.show_error(err, "candidates")
    candidates = ss.get("wi_last_candidates") or {TODAY: base}
    st.caption("Using the last valid candidate list until the table is fixed.")
else:
    ss.wi_last_candidates = candidates

n_runs = len(candidates) * int(seeds)
b1, b2 = st.columns([3, 1])
run = b1.button(f"Simulate {len(candidates)} options x {int(seeds)} seeds ({n_runs} runs)", type="primary",
                key="wi_run", disabled=workload is None)
b2.button("Cancel", key="wi_cancel", help="stops a running what-if (the pool's runs are stopped)")
if ss.get("wi_cancel") and not run:
    st.info("Cancelled; the last finished what-if is shown below.")
if run and workload is not None:
    bar = st.progress(0, text="Starting…")
    t0 = time.perf_counter()

    def progress(done: float, total: int) -> None:
        frac = done / max(total, 1)
        bar.progress(min(100, int(100 * frac)), text=f"{done:.1f} of {total} runs · "
                                                     f"{common.eta_text(time.perf_counter() - t0, frac)}")

    try:
        ss.wi_whatif = run_whatif(base, candidates, workload, workload_label=workload_label, policy=policy,
                                  seeds=range(int(seeds)), budget_per_hour=float(budget), pricing=pricing,
                                  costs=costs, backend="local", workers=int(workers), progress=progress)
    except SpecError as err:
        common.show_error(err, "simulation")
    bar.empty()

result = ss.get("wi_whatif")
if result is None:
    st.info("Edit the candidates, budget and workload, then **Simulate**. Today's cluster is always included.")
else:
    n_seeds = len(result.seeds)

    def ci_h(c, bound: float) -> float | None:
        """A CI bound in hours, only where the charts draw the interval (charts.MIN_CI_SEEDS seeds and up)."""
        return bound / HOUR if charts.has_ci(n_seeds, c.ci_low_s, c.ci_high_s) else None

    # the deciding columns (average JCT, cost, within budget) first: in view at 1,280 px without scrolling sideways
    # (tests/test_browser.py checks their right edge); the detail after them
    table = pd.DataFrame([{
        "candidate": c.candidate, "avg JCT h": c.avg_jct_s / HOUR, "cost $/h": c.cost_per_hour,
        "added $/h": c.added_cost_per_hour, "within budget": c.within_budget, "GPUs": c.gpus,
        "CI low h": ci_h(c, c.ci_low_s), "CI high h": ci_h(c, c.ci_high_s), "p99 JCT h": c.p99_jct_s / HOUR,
        "avg queue h": c.avg_queue_s / HOUR, "utilisation": c.avg_utilisation, "OOM failures": c.oom_failures,
        "completed": common.fmt_count(c.completed), "jobs": common.fmt_count(c.jobs), "on frontier": c.on_frontier,
        "purchase $": c.tco.purchase_usd, "TCO over life $": c.tco.tco_usd, "why": c.why}
        for c in result.candidates])
    ss.wi_results = table
    st.subheader("Average JCT against cost", anchor=False)
    no_ci = f"; {note}" if (note := charts.no_ci_note(n_seeds)) else ""
    st.caption(f"{result.policy} on {result.workload}, {len(result.seeds)} seed(s){no_ci}; budget "
               f"${result.budget_per_hour:,.2f}/h for additions at {result.pricing} prices; {result.wall_s:.1f} s")
    fig = charts.frontier_spec(result)
    if fig is None:
        st.caption("No candidate has a finite cost and JCT to chart.")
    else:
        st.plotly_chart(fig, key="wi_frontier", width="stretch", config=charts.config("gpu_mix_frontier"))
    if result.best_within_budget is None:
        st.warning(common.md_escape(result.message), icon=":material/warning:")
    elif result.significant:
        st.success(common.md_escape(result.message))
    else:
        st.warning(common.md_escape(result.message), icon=":material/balance:")
    for note in result.notes:
        st.caption(f"Note: {common.md_escape(note)}")
    st.markdown("\n".join(f"- **{common.md_escape(c.candidate)}**: {common.md_escape(c.why)}" for c in result.candidates if c.why))
    with st.container(key="wi_results_box"):  # a keyed box: tests/test_browser.py measures the columns in view
        st.dataframe(table, hide_index=True, width="stretch", key="wi_results_table", column_config={
            **{k: st.column_config.NumberColumn(format="%.2f") for k in
               ("cost $/h", "added $/h", "avg JCT h", "CI low h", "CI high h", "p99 JCT h", "avg queue h", "utilisation")},
            **{k: st.column_config.NumberColumn(format="$%,.0f") for k in ("purchase $", "TCO over life $")}})
    st.download_button("Download table (CSV)", table.to_csv(index=False), file_name="gpu_mix_whatif.csv",
                       mime="text/csv", key="wi_csv", icon=":material/download:")

for _key in SETTINGS:
    ss[f"kept_{_key}"] = ss[_key]
