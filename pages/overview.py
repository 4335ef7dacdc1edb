"""Overview: what the tool does, the current scenario (load a sample, upload or paste YAML, download, share link),
the current model and cluster, and a link to every page."""

import streamlit as st

from frenzy_core.errors import SpecError
from frenzy_core.scenario import load_scenario, parse_scenario_yaml, scenario_to_yaml
from pages import common

common.page_setup()
ss = st.session_state
USER_LABELS = {"ml-engineer": "ML engineer", "procurement": "procurement planner", "teacher": "teacher",
               "custom": "custom"}


def _apply(scenario, source: str) -> None:
    common.apply_scenario(scenario, source)
    ss.scenario_msg = ("success", f"Loaded **{scenario.name}** ({USER_LABELS[scenario.user]}). Every page now uses "
                                  "it; the address bar holds its share link.")


def on_load_sample() -> None:
    path = common.sample_scenarios()[ss.scn_sample]
    try:
        _apply(load_scenario(path), f"scenario {path.name}")
    except SpecError as err:
        ss.scenario_msg = ("error", common.md_escape(err))


def on_paste_scenario() -> None:
    try:
        _apply(parse_scenario_yaml(ss.get("scn_text", ""), source="pasted scenario"), "pasted scenario")
    except SpecError as err:
        ss.scenario_msg = ("error", common.md_escape(err))


def on_upload_scenario() -> None:
    up = ss.get("scn_upload")
    if up is None:
        return
    try:
        _apply(parse_scenario_yaml(up.getvalue().decode("utf-8", errors="replace"), source=up.name), up.name)
    except SpecError as err:
        ss.scenario_msg = ("error", common.md_escape(err))

st.title("Frenzy Planner")
st.markdown(
    "Capacity planning for LLM training on heterogeneous GPU clusters, after the Frenzy paper "
    "(Chang et al., arXiv 2412.14479). Describe a **model and a training setup, never a GPU count**: "
    "Frenzy Planner predicts the per-GPU memory, lists every (GPU type, data × tensor × pipeline) plan that fits "
    "and ranks them (MARP), places jobs on your nodes (HAS), and simulates what a scheduling policy or a new GPU "
    "purchase does to everyone's job completion times."
)

m, t, p, c = common.model(), common.training(), common.par(), common.cluster()
left, right = st.columns(2)
with left, st.container(border=True):
    st.subheader(f"Model: {m.name}", anchor=False)
    a, b = st.columns(2)
    a.metric("Parameters", common.fmt_params(m.parameter_count()), help=f"{m.parameter_count():,} exactly")
    cp = f" × {p.cp}" if p.cp > 1 else ""
    b.metric("Split d × t × p" + (" × cp" if cp else ""), f"{p.dp} × {p.tp} × {p.pp}{cp}",
             help=f"{p.label()}: {p.num_gpus} GPUs")
    st.caption(f"h={m.hidden_size}, layers={m.num_layers}, heads={m.num_heads} (kv {m.kv_heads}), "
               f"vocab={m.vocab_size}; seq {t.seq_len}, global batch {t.global_batch}, micro-batch "
               f"{t.micro_batch}, {t.precision}, ZeRO-{t.zero_stage}, recompute {t.recompute}, {t.attention} attention, "
               f"{t.framework}; split {p.label()}")
with right, st.container(border=True):
    st.subheader(f"Cluster: {c.name}", anchor=False)
    a, b = st.columns(2)
    a.metric("Nodes", len(c.nodes))
    b.metric("GPUs", c.total_gpus)
    st.caption(" · ".join(f"{n} × {g}" for g, n in c.gpus_by_type().items()) + f" — from {st.session_state.cluster_source}")

with st.container(border=True):
    st.subheader("Scenario", anchor=False)
    st.caption("One scenario holds every input of every page (model, training, split, cluster, plan objective and "
               "constraints, trace, policies, seeds, GPU-mix budget). It follows you across pages, and the address "
               "bar always carries it as a share link: copy the URL, or reload, and you get the same state.")
    samples = common.sample_scenarios()
    c1, c2, c3 = st.columns([2, 2, 1.3], vertical_alignment="bottom")
    with c1:
        st.selectbox("Sample scenario", list(samples), key="scn_sample",
                     format_func=lambda n: f"{n} ({USER_LABELS.get(n, n)})")
        st.button("Load scenario", key="scn_load", on_click=on_load_sample, type="primary")
    with c2:
        st.file_uploader("Upload a scenario YAML", type=["yaml", "yml"], key="scn_upload",
                         on_change=on_upload_scenario)
    current = common.scenario_from_state()
    with c3:
        if current is not None:
            st.download_button("Download scenario YAML", scenario_to_yaml(current), file_name="scenario.yaml",
                               mime="application/x-yaml", key="scn_download", icon=":material/download:")
    with st.expander("Paste a scenario YAML"):
        st.text_area("YAML", key="scn_text", height=160, placeholder="name: my run\nmodel: llama-2-7b\n"
                     "cluster: {name: lab, nodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 2}]}")
        st.button("Apply scenario", key="scn_apply", on_click=on_paste_scenario)
    msg = ss.get("scenario_msg")
    if msg:
        getattr(st, msg[0])(msg[1])
    if current is not None:
        st.caption(f"Current: **{current.name}** · {USER_LABELS[current.user]} · objective {current.plans.objective}, "
                   f"{common.fmt_params(int(current.plans.tokens))} tokens · trace {current.simulation.trace} "
                   f"({current.simulation.limit_jobs} jobs), seeds {current.simulation.seeds}")
    code = common.share_code()
    if code:
        st.markdown("**Share link** (this page's address already ends with it)")
        st.code(f"?{common.SHARE_PARAM}={code}", language="text", wrap_lines=True)
    elif ss.get("share_error"):
        st.warning(common.md_escape(ss.share_error))

st.subheader("Pages", anchor=False)
blurbs = {
    "model": "Pick or edit a model, or paste a Hugging Face config.json; see per-GPU memory by component against "
             "every GPU type's capacity.",
    "plans": "Every (GPU type, d, t, p) plan for the current model on the current cluster: headroom heatmaps and "
             "the ranked table by time, GPU-hours, cost or GPU count.",
    "cluster": "Edit the cluster as a table or YAML, submit jobs by model only and watch HAS place them on the nodes.",
    "simulation": "Replay a job trace under Frenzy, FCFS and Sia: JCT distributions with confidence intervals, "
                  "queue, utilisation, GPU-hours and OOM failures.",
    "whatif": "Compare candidate GPU purchases on top of today's cluster: average JCT against cost, with a budget.",
}
for key, text in blurbs.items():
    path, title, icon = common.PAGES[key]
    col_link, col_text = st.columns([1, 3])
    col_link.page_link(path, label=title, icon=icon)
    col_text.write(text)
