"""Simulation: replay a job trace on the current cluster under one or more policies and seeds; JCT distributions
with 95% confidence intervals, queue and utilisation over time, GPU-hours per GPU type, OOM failures, per-job CSV.

A run shows its progress with an ETA and a Cancel button (clicking it stops the script at the next progress
update); each (trace, cluster, policy, seeds) result is cached, so running the same setup again is instant."""

from __future__ import annotations

import hashlib
import time

import pandas as pd
import streamlit as st

from frenzy_core.comparison import explain_results
from frenzy_core.errors import SpecError
from frenzy_core.limits import MAX_SCENARIO_SEEDS
from frenzy_core.policies import EVENT_POLICIES
from frenzy_core.policies import note as policy_note
from frenzy_core.simulate import SimOptions, simulate_seeds
from pages import charts, common
from pages.charts import HOUR

common.page_setup()

ss = st.session_state
SLOW_POLICIES = {"sia": "Sia solves an ILP every 60 s round: tens of seconds for 200 jobs"}


def trace_key(trace) -> str:
    """A digest of the trace's jobs: equal traces (bundled or uploaded) share cached results."""
    return hashlib.sha1(repr(trace.jobs).encode()).hexdigest()


CACHE_ENTRIES = 32


@st.cache_resource(show_spinner=False)
def result_store() -> dict:
    """Finished runs shared by every session of this server: (trace digest, cluster digest, policy, seeds) ->
    MultiSeedResult. A plain dict, not st.cache_data, because a run draws its progress bar while it computes."""
    return {}


def simulate_cached(key: str, cluster, policy: str, seeds: int, trace, progress) -> tuple[object, bool]:
    """frenzy_core.simulate.simulate_seeds, or the stored result of the same inputs; (result, came from cache)."""
    store = result_store()
    k = (key, hashlib.sha1(cluster.model_dump_json().encode()).hexdigest(), policy, seeds)
    if k in store:
        return store[k], True
    result = simulate_seeds(trace, cluster, policy, seeds=range(seeds), options=SimOptions(), progress=progress)
    store[k] = result
    while len(store) > CACHE_ENTRIES:  # oldest first (dicts keep insertion order)
        store.pop(next(iter(store)))
    return result, False


def run_simulation(trace, cluster, policies: list[str], seeds: int, bar) -> tuple[dict, int]:
    """Every policy over `seeds` seeds; the bar advances over all of them with an ETA. Returns
    (policy -> MultiSeedResult, how many came from the cache)."""
    results = {}
    last = [-1]
    key = trace_key(trace)
    t0 = time.perf_counter()
    cached = 0
    for i, name in enumerate(policies):
        def progress(f: float, i=i, name=name) -> None:
            frac = (i + f) / len(policies)
            pct = int(100 * frac)
            if pct != last[0]:
                last[0] = pct
                bar.progress(min(pct, 100), text=f"Simulating {name} ({i + 1}/{len(policies)}): {pct}% · "
                                                 f"{common.eta_text(time.perf_counter() - t0, frac)}")
        results[name], hit = simulate_cached(key, cluster, name, seeds, trace, progress)
        cached += hit
    bar.progress(100, text="Done")
    return results, cached


def ci_text(seeds: int, lo: float, hi: float) -> str:
    """'low – high' in hours, or 'none (1 seed)': an interval is printed only from charts.MIN_CI_SEEDS seeds up, as
    the charts draw it."""
    if not charts.has_ci(seeds, lo, hi):  # the caption above the table says why (charts.no_ci_note)
        return f"none ({seeds} seed{'s' * (seeds != 1)})" if seeds < charts.MIN_CI_SEEDS else "n/a"
    return f"{lo / HOUR:.2f} – {hi / HOUR:.2f} h"


@st.cache_resource(max_entries=64, show_spinner=False)
def figure(builder: str, value):
    """charts.<builder>(value), cached on the value's contents (a trace or the results of a run); the figure is
    only read, so cache_resource: cache_data's pickled copy would re-validate it."""
    return getattr(charts, builder)(value)


# what a chart that has nothing to draw says instead, under its title (an empty frame says nothing)
TITLES = {"sim_oom": "Out-of-memory failures per run", "sim_queue": "Queued jobs over time (seed 0)"}
EMPTY = {"sim_oom": "No out-of-memory failures: every policy ran every job without one, in every seed.",
         "sim_queue": "No job waited in the queue under any policy (seed 0): every job started when it arrived."}


def draw(container, builder, value, key: str) -> None:
    """The chart across its container, or one sentence when it has nothing to draw."""
    fig = figure(builder.__name__, value)
    if fig is None:
        with container.container(key=f"{key}_empty"):
            if key in TITLES:
                st.markdown(f"**{TITLES[key]}**")
            st.caption(EMPTY.get(key, f"Nothing to chart for {key.removeprefix('sim_').replace('_', ' ')}."))
    else:
        container.plotly_chart(fig, key=key, width="stretch", config=charts.config(key))


st.title("Simulation")
cluster = common.cluster()
st.caption(f"Trace-driven simulation on **{cluster.name}** ({cluster.total_gpus} GPUs). Each trace job gets an LLM "
           "model sized to its GPU count and a token budget that reproduces its duration on its original allocation; "
           "the seed changes which model each job draws.")

with st.container(border=True):
    trace = common.trace_picker("sim")
    c1, c2, c3 = st.columns([3, 1, 1], vertical_alignment="bottom")
    policies = c1.multiselect("Policies", list(EVENT_POLICIES), default=[p for p in ("frenzy", "frenzy-eft", "fcfs") if p in EVENT_POLICIES],
                              key="sim_policies")
    seeds = c2.number_input("seeds", min_value=1, max_value=MAX_SCENARIO_SEEDS, value=3, step=1, key="sim_seeds",
                            help="independent mappings of the trace; confidence intervals are over seeds")
    run = c3.button("Run simulation", type="primary", key="sim_run", disabled=trace is None or not policies)
    for p in policies:
        if p in SLOW_POLICIES:
            st.caption(f"Note: {SLOW_POLICIES[p]}.")
    if policies:
        with st.expander("What these policies do"):
            for p in policies:  # each policy's own note (its module's NOTE, through the registry)
                st.markdown(f"**{p}**: {policy_note(p)}")

if ss.get("sim_cancel"):
    st.warning("Simulation cancelled. The previous results, if any, are still shown; a rerun of a setup that "
               "already finished comes from the cache.", icon=":material/cancel:")
if run and trace is not None:
    bar = st.progress(0, text="Starting…")
    st.button("Cancel", key="sim_cancel", icon=":material/cancel:",
              help="stops the simulation at its next progress update")
    try:
        results, cached = run_simulation(trace, cluster, policies, int(seeds), bar)
    except SpecError as err:
        common.show_error(err, "simulation")
    else:
        ss.sim_results = results
        note = f"; {cached} of {len(policies)} from the cache" if cached else ""
        ss.sim_meta = f"{ss.get('sim_trace_label') or trace.source} ({len(trace.jobs)} jobs) on {cluster.name}, " \
                      f"{int(seeds)} seed(s){note}"
    bar.empty()

if trace is not None and not ss.get("sim_results"):
    # Useful before the first run: what the trace asks for.
    jobs = pd.DataFrame({"arrival_h": [j.arrival_s / HOUR for j in trace.jobs],
                         "num_gpus": [j.num_gpus for j in trace.jobs],
                         "duration_h": [j.duration_s / HOUR for j in trace.jobs]})
    a, b, c = st.columns(3)
    a.metric("Jobs", len(jobs))
    b.metric("GPU-hours requested", f"{(jobs.num_gpus * jobs.duration_h).sum():,.0f}")
    c.metric("Span of arrivals", f"{jobs.arrival_h.max():.1f} h")
    draw(st, charts.arrivals_spec, trace, "sim_arrivals")
    st.info("Choose policies and seeds, then **Run simulation**.")

results = ss.get("sim_results")
if results:
    st.subheader("Results", anchor=False)
    n_seeds = len(next(iter(results.values())).results)
    no_ci = charts.no_ci_note(n_seeds)
    st.caption(f"{ss.get('sim_meta', '')}. Means over seeds" + (f"; {no_ci}." if no_ci else " with 95% t-intervals."))

    rows = []
    for name, res in results.items():
        avg, avg_lo, avg_hi = res.ci("avg_jct_s")
        p99, p99_lo, p99_hi = res.ci("p99_jct_s")
        m = res.summary_dict()
        rows.append({
            "policy": name, "completed": common.fmt_count(m["completed"]), "jobs": common.fmt_count(m["jobs"]),
            "avg JCT h": avg / HOUR, "avg JCT 95% CI": ci_text(len(res.results), avg_lo, avg_hi),
            "p99 JCT h": p99 / HOUR, "p99 JCT 95% CI": ci_text(len(res.results), p99_lo, p99_hi),
            "avg queue h": m["avg_queue_s"] / HOUR, "makespan h": m["makespan_s"] / HOUR,
            "GPU-hours": m["gpu_hours"], "utilisation": res.ci("avg_utilisation")[0],
            "OOM failures": m["oom_failures"], "sched ms/decision": m["sched_overhead_ms_per_decision"],
        })
    summary = pd.DataFrame(rows)
    cols = st.columns(len(rows))
    for col, row in zip(cols, rows, strict=True):
        ci = row["avg JCT 95% CI"]
        col.metric(f"{row['policy']}: avg JCT", f"{row['avg JCT h']:.2f} h",
                   help=no_ci or f"95% CI: {ci}")
        col.caption(f"p99 {row['p99 JCT h']:.2f} h · OOM failures {common.fmt_count(row['OOM failures'])}")
    st.dataframe(summary, hide_index=True, width="stretch", key="sim_summary", column_config={
        k: st.column_config.NumberColumn(format="%.2f") for k in
        ("avg JCT h", "p99 JCT h", "avg queue h", "makespan h", "utilisation", "sched ms/decision", "OOM failures")}
        | {"GPU-hours": st.column_config.NumberColumn(format="%,.0f")})

    why = explain_results(results)
    if why:
        with st.expander("Why the averages differ", expanded=True):
            st.caption("Each policy against the one with the lowest average JCT, over the jobs both completed "
                       "(frenzy_core.comparison): JCT = queueing (arrival to first start) + running (first start "
                       "to finish), and what moved each.")
            for lines in why.values():
                st.markdown("\n\n".join(common.md_escape(line) for line in lines))

    for left_spec, left_key, right_spec, right_key in (
            (charts.cdf_spec, "sim_cdf", charts.jct_bars_spec, "sim_jct_bars"),
            (charts.queue_spec, "sim_queue", charts.util_spec, "sim_util"),
            (charts.gpu_hours_spec, "sim_gpu_hours", charts.oom_spec, "sim_oom")):
        left, right = st.columns(2)
        draw(left, left_spec, results, left_key)
        draw(right, right_spec, results, right_key)

    jobs = pd.concat([res.jobs_frame().assign(policy=name) for name, res in results.items()], ignore_index=True)
    st.download_button("Download per-job results (CSV)", jobs.to_csv(index=False), file_name="simulation_jobs.csv",
                       mime="text/csv", key="sim_csv", icon=":material/download:")
    with st.expander("Per-job results"):
        st.dataframe(jobs, hide_index=True, width="stretch", key="sim_jobs")
