"""Overview: what the tool does, the current model and cluster, and a link to every page."""

import streamlit as st

from pages import common

common.page_setup()

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
    b.metric("Split d × t × p", f"{p.dp} × {p.tp} × {p.pp}")
    st.caption(f"h={m.hidden_size}, layers={m.num_layers}, heads={m.num_heads} (kv {m.kv_heads}), "
               f"vocab={m.vocab_size}; seq {t.seq_len}, global batch {t.global_batch}, micro-batch "
               f"{t.micro_batch}, {t.precision}, ZeRO-{t.zero_stage}, recompute {t.recompute}, {t.attention} attention")
with right, st.container(border=True):
    st.subheader(f"Cluster: {c.name}", anchor=False)
    a, b = st.columns(2)
    a.metric("Nodes", len(c.nodes))
    b.metric("GPUs", c.total_gpus)
    st.caption(" · ".join(f"{n} × {g}" for g, n in c.gpus_by_type().items()) + f" — from {st.session_state.cluster_source}")

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
