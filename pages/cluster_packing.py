"""Cluster & packing: edit the cluster as a table or YAML, then submit jobs by model only and watch HAS place them on
a node x GPU grid; release jobs; see free capacity per GPU type."""

from __future__ import annotations

import hashlib
import math

import pandas as pd
import streamlit as st
import yaml

from frenzy_core.allocation import empty_allocation, free_by_type, release, submit
from frenzy_core.cluster import cluster_from_dict, load_cluster, parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG
from frenzy_core.limits import MAX_GPUS_PER_NODE, MAX_NODES
from frenzy_core.models import ZOO
from frenzy_core.plans import DEFAULT_SCALING_FLOOR
from frenzy_core.scenario import grouped_cluster_data
from frenzy_core.workload import default_training
from pages import charts, common

common.page_setup()

ss = st.session_state
NODE_COLUMNS = ["name", "gpu_type", "num_gpus", "intra_link", "intra_link_gbyte_s", "network_gbit_s"]
GROUP_COLUMNS = ["name", "gpu_type", "num_gpus", "count", "intra_link", "intra_link_gbyte_s", "network_gbit_s"]
GROUP_ABOVE_NODES = 64  # above this many nodes, the table and the grid show node groups, not one row per node
CURRENT_MODEL = "(the Model & memory page's model)"  # the packing select's first entry: any model that page accepts
JOB_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
               "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94"]


def grouped(cluster) -> bool:
    return len(cluster.nodes) > GROUP_ABOVE_NODES


def nodes_frame(cluster) -> pd.DataFrame:
    if grouped(cluster):  # one row per run of identical nodes, with its count
        rows = [{"count": 1, **g} for g in grouped_cluster_data(cluster)["nodes"]]
        return pd.DataFrame(rows, columns=GROUP_COLUMNS)
    rows = [{k: getattr(n, k) for k in NODE_COLUMNS} for n in cluster.nodes]
    return pd.DataFrame(rows, columns=NODE_COLUMNS)


def group_spans(cluster) -> list[tuple[str, int, int]]:
    """(label, first node index, last node index + 1) of each node group, in node order."""
    spans, start = [], 0
    for g in grouped_cluster_data(cluster)["nodes"]:
        n = int(g.get("count", 1))
        spans.append((f"{g['name']} × {n} ({g['gpu_type']}, {g['num_gpus']} GPUs each)" if n > 1 else g["name"],
                      start, start + n))
        start += n
    return spans


def rows_from_frame(frame: pd.DataFrame) -> list[dict]:
    """Editor rows -> node mappings: empty cells dropped (so defaults apply), whole floats back to ints."""
    rows = []
    for rec in frame.to_dict("records"):
        row = {}
        for k, v in rec.items():
            if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()):
                continue
            if k in ("num_gpus", "count") and isinstance(v, float) and v.is_integer():
                v = int(v)
            row[k] = v
        if row:
            rows.append(row)
    return rows


def load_text(text: str, source: str) -> None:
    """A pasted or uploaded YAML becomes the cluster, or ss.cluster_error says which field to fix."""
    try:
        cluster = parse_cluster_yaml(text, source=source)
    except SpecError as err:
        ss.cluster_error = err
        return
    ss.cluster_error = None
    common.set_cluster(cluster, source)


def on_sample() -> None:
    path = common.sample_clusters()[ss.cl_sample]
    try:
        common.set_cluster(load_cluster(path), str(path.relative_to(common.ROOT)))
        ss.cluster_error = None
    except SpecError as err:
        ss.cluster_error = err


def on_upload() -> None:
    up = ss.get("cl_upload")
    if up is not None:
        load_text(up.getvalue().decode("utf-8", errors="replace"), up.name)


def on_paste() -> None:
    load_text(ss.get("cl_yaml_text", ""), "pasted YAML")


def job_model():
    """The model and training setup of the next job: a zoo model with the simulator's setup, or the Model & memory
    page's model (zoo, config.json or spec) with that page's setup."""
    if ss.pack_model == CURRENT_MODEL:
        return common.model(), common.training()
    model = ZOO[ss.pack_model]
    return model, default_training(model)


def on_submit() -> None:
    cluster = common.cluster()
    model, training = job_model()
    name = model.name
    objective = ss.get("pack_objective") or "time"
    floor = float(ss.get("pack_floor", DEFAULT_SCALING_FLOOR))
    n = ss.get("pack_counter", 0) + 1
    job_id = f"job-{n}"
    try:
        plans = common.ranked_plans(model.model_dump_json(), training.model_dump_json(), cluster.model_dump_json(),
                                    objective=objective)
        alloc, job = submit(cluster, ss.allocation, job_id, name, plans.plans, scaling_floor=floor)
    except SpecError as err:
        ss.pack_msg = ("error", str(err))
        return
    ss.pack_counter = n
    if job is not None:
        ss.allocation = alloc
        names = [f"{cluster.nodes[i].name} ({k})" for i, k in job.placement.nodes]
        nodes = ", ".join(names[:6]) + (f" and {len(names) - 6} more nodes" if len(names) > 6 else "")
        ss.pack_msg = ("success", f"{job_id} ({name}) placed: {job.plan.label()} on {nodes}, the first plan by "
                                  f"{common.OBJECTIVE_LABELS[objective]} that passes the scaling floor ({floor:.0%}) and "
                                  "fits the free GPUs now.")
    elif not len(plans.plans):
        ss.pack_msg = ("error", f"{job_id} ({name}) cannot run on this cluster: {plans.explanation}")
    else:
        ss.pack_msg = ("warning", f"{job_id} ({name}) waits: none of its {len(plans.plans)} feasible plans that "
                                  f"pass the scaling floor ({floor:.0%}) fits the free GPUs now. Release a job, add "
                                  "nodes or lower the floor.")


def on_release(key: str) -> None:
    job_id = ss.get(key)
    if job_id:
        ss.allocation = release(ss.allocation, job_id)
        ss.pack_msg = ("info", f"{job_id} released.")


def on_release_all() -> None:
    ss.allocation = empty_allocation(common.cluster())
    ss.pack_msg = ("info", "All jobs released.")


st.title("Cluster & packing")
cluster = common.cluster()

# --- load / save ----------------------------------------------------------------------------------------------------
c1, c2, c3 = st.columns([2, 2, 1.2], vertical_alignment="bottom")
samples = common.sample_clusters()
with c1:
    st.selectbox("Sample cluster", list(samples), key="cl_sample",
                 index=list(samples).index(cluster.name) if cluster.name in samples else 0)
    st.button("Load sample", key="cl_load_sample", on_click=on_sample)
with c2:
    st.file_uploader("Upload cluster YAML", type=["yaml", "yml"], key="cl_upload", on_change=on_upload)
with c3:
    # identical nodes folded into `count` (parse_cluster_yaml expands them back): small and fast at 10,000 nodes
    st.download_button("Download YAML", yaml.safe_dump(grouped_cluster_data(cluster), sort_keys=False),
                       file_name=f"{cluster.name}.yaml",
                       mime="application/x-yaml", key="cl_download", icon=":material/download:")
with st.expander("Paste cluster YAML"):
    st.text_area("YAML", key="cl_yaml_text", height=160, placeholder="name: my-cluster\nnodes:\n  - {name: a100, "
                 "gpu_type: A100-80GB, num_gpus: 8, count: 2}")
    st.button("Apply YAML", key="cl_yaml_apply", on_click=on_paste)
if ss.get("cluster_error") is not None:
    common.show_error(ss.cluster_error, "cluster")

# --- the node table -------------------------------------------------------------------------------------------------
editor_key = f"cl_editor_{ss.cluster_version}"
if editor_key not in ss or "cl_base" not in ss:
    ss.cl_base = nodes_frame(cluster)
    ss.cl_name = cluster.name
st.subheader("Nodes", anchor=False)
st.text_input("Cluster name", key="cl_name")
if grouped(cluster):
    st.caption(f"{len(cluster.nodes):,} nodes: shown as groups of identical nodes (`count` nodes each, named "
               "name-0, name-1, ...). Edit a group's count to grow or shrink it.")
types = list(dict.fromkeys([*CATALOG, *(g.name for g in cluster.gpu_types)]))
edited = st.data_editor(
    ss.cl_base, key=editor_key, num_rows="dynamic", hide_index=True, width="stretch",
    column_config={
        "name": st.column_config.TextColumn("name", help="unique node name"),
        "gpu_type": st.column_config.SelectboxColumn("GPU type", options=types, required=True),
        "num_gpus": st.column_config.NumberColumn("GPUs", min_value=1, max_value=MAX_GPUS_PER_NODE, step=1, required=True),
        "count": st.column_config.NumberColumn("nodes", min_value=1, max_value=MAX_NODES, step=1,
                                               help="identical nodes in this group"),
        "intra_link": st.column_config.SelectboxColumn("intra-node link", options=["nvlink", "pcie",
                                                                                    "infinity-fabric"],
                                                       help="empty = the GPU type's usual link"),
        "intra_link_gbyte_s": st.column_config.NumberColumn("link GB/s per GPU", min_value=0.0,
                                                            help="empty = the GPU type's figure"),
        "network_gbit_s": st.column_config.NumberColumn("network Gbit/s", min_value=0.0),
    },
)
data = {"name": ss.cl_name or "cluster", "description": cluster.description,
        "gpu_types": [g.model_dump() for g in cluster.gpu_types], "nodes": rows_from_frame(edited)}
try:
    table_cluster = cluster_from_dict(data, source="node table")
except SpecError as err:
    common.show_error(err, "node table")
    st.caption("The cluster stays as it was until the table is valid.")
else:
    if table_cluster != cluster:
        ss.cluster = cluster = table_cluster
        ss.cluster_error = None  # an error about an earlier paste or upload no longer applies
counts = " · ".join(f"{n} × {g}" for g, n in cluster.gpus_by_type().items())
st.caption(f"**{cluster.name}**: {len(cluster.nodes)} nodes, {cluster.total_gpus} GPUs ({counts}); "
           f"${sum(n.num_gpus * cluster.gpu(n.gpu_type).price_per_hour_usd for n in cluster.nodes):,.2f}/h "
           "at catalog prices.")

# --- packing --------------------------------------------------------------------------------------------------------
st.subheader("Packing with HAS", anchor=False)
if ss.get("allocation") is None or len(ss.allocation.owner) != len(cluster.nodes) or any(
        len(o) != n.num_gpus for o, n in zip(ss.allocation.owner, cluster.nodes, strict=True)):
    if ss.get("allocation") is not None and ss.allocation.jobs:
        ss.pack_msg = ("info", "The cluster changed, so its placements were cleared.")
    ss.allocation = empty_allocation(cluster)
alloc = ss.allocation

ss.setdefault("pack_objective", "time")
ss.setdefault("pack_floor", DEFAULT_SCALING_FLOOR)
c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
with c1:
    st.selectbox("Submit a job: model", [CURRENT_MODEL, *ZOO], key="pack_model",
                 index=1 + list(ZOO).index("llama-2-7b"),
                 format_func=lambda k: f"{common.model().name} (Model & memory page)" if k == CURRENT_MODEL else k,
                 help="By model only: HAS picks the GPU type, the count and the split from the ranked plans. A zoo "
                      "model gets the simulator's training setup (bf16, global batch 384, micro-batch 1); the Model & "
                      "memory page's model (zoo, config.json or spec) keeps that page's setup.")
    st.segmented_control("Rank by", list(common.OBJECTIVE_LABELS), format_func=common.OBJECTIVE_LABELS.get, key="pack_objective",
                         help="the objective HAS walks the plans in (as on the Plans page)")
    st.slider("scaling floor", 0.0, 1.0, step=0.05, key="pack_floor",
              help="HAS skips a plan whose GPUs over a smaller plan of the same type buy less than this share of "
                   "linear speed-up (0.5: doubling the GPUs must be at least 1.5x faster; 0 = off)")
    st.button("Submit", key="pack_submit", on_click=on_submit, type="primary")
with c2:
    placed = [j.job_id for j in alloc.jobs]
    release_key = f"pack_release_{'_'.join(placed)}"  # a new widget whenever the placed jobs change
    st.selectbox("Release a job", placed, key=release_key, index=0 if placed else None,
                 placeholder="no jobs placed", disabled=not placed)
    st.button("Release", key="pack_release_btn", on_click=on_release, args=(release_key,), disabled=not placed)
with c3:
    st.button("Release all", key="pack_release_all", on_click=on_release_all, disabled=not placed)
if ss.get("pack_msg"):
    kind, text = ss.pack_msg
    getattr(st, kind)(text)

# node x GPU grid coloured by job (node groups as stacked bars above GROUP_ABOVE_NODES nodes)
colour = {j.job_id: JOB_COLOURS[i % len(JOB_COLOURS)] for i, j in enumerate(alloc.jobs)}


@st.cache_resource(max_entries=16, show_spinner=False)
def packing_figure(state_digest: str, _cluster, _alloc, colour: dict[str, str], spans):
    """charts.group_chart (node groups) or charts.node_grid, cached on a digest of the cluster and the allocation
    (Streamlit hashing the allocation's 80,000 slots at 10,000 nodes takes ~90 ms, a digest of its repr ~7 ms).
    cache_resource: the figure is only read, and cache_data's pickled copy would re-validate it."""
    return charts.group_chart(_cluster, _alloc, colour, spans) if spans else charts.node_grid(_cluster, _alloc, colour)


digest = hashlib.sha1((cluster.model_dump_json() + repr(alloc)).encode()).hexdigest()
fig = packing_figure(digest, cluster, alloc, colour, group_spans(cluster) if grouped(cluster) else None)
left, right = st.columns([2.2, 1])
with left:
    if fig is None:
        st.caption("No nodes to draw.")
    else:
        st.plotly_chart(fig, key="pack_grid", width="stretch", config=charts.config("packing"))
with right:
    caps = free_by_type(cluster, alloc)
    cap_fig = charts.capacity_chart(caps)
    if cap_fig is not None:
        st.plotly_chart(cap_fig, key="pack_capacity", width="stretch", config=charts.config("gpus_per_type"))
    st.dataframe(pd.DataFrame([{"GPU type": g, "free": f, "total": t} for g, (f, t) in caps.items()]),
                 hide_index=True, width="stretch")
if alloc.jobs:
    st.dataframe(pd.DataFrame([{
        "job": j.job_id, "model": j.model, "GPU type": j.plan.gpu_type, "d": j.plan.dp, "t": j.plan.tp,
        "p": j.plan.pp, "GPUs": j.plan.num_gpus, "GiB/GPU": round(common.gib(j.plan.memory_bytes), 1),
        "nodes": ", ".join(cluster.nodes[i].name for i, _ in j.placement.nodes),
    } for j in alloc.jobs]), hide_index=True, width="stretch")
