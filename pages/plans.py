"""Plans: every (GPU type, d, t, p) for the current model on the current cluster, as headroom heatmaps and a ranked
table under a chosen objective and constraints, the best plan per GPU type, why the top plan wins, and the launch
files (Megatron-LM, DeepSpeed, torchtitan, accelerate, SLURM, Kubernetes) of any plan."""

from __future__ import annotations

import json

import streamlit as st

from frenzy_core.errors import SpecError
from frenzy_core.export import FILE_NAMES, FORMATS, FRAMEWORK_EXPORT, export_plan
from frenzy_core.limits import DEFAULT_SAFETY_MARGIN, DEFAULT_TOKENS, MAX_TOKENS, MAX_TOTAL_GPUS, MIN_TOKENS, load_json
from frenzy_core.models import beyond_trained_positions
from frenzy_core.plans import DEFAULT_SCALING_FLOOR, Plan
from pages import charts, common

common.page_setup()
ss = st.session_state

OBJECTIVE_LABELS = {"time": "time to train", "gpu-hours": "GPU-hours", "cost": "cost", "gpus": "fewest GPUs"}
FORMAT_LABELS = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "torchtitan": "torchtitan",
                 "accelerate": "accelerate", "slurm": "SLURM", "kubernetes": "Kubernetes"}
CODE_LANGUAGE = {"megatron": "bash", "deepspeed": "json", "torchtitan": "toml", "accelerate": "yaml", "slurm": "bash",
                 "kubernetes": "yaml"}
# Human column headers, units in the header; times in hours throughout. The deciding columns (time to train,
# GPU-hours, cost) come right after the split, so that they are in view at 1,280 px without scrolling sideways
# (tests/test_browser.py checks their right edge); the detail follows.
COLUMNS = {"gpu_type": "GPU type", "dp": "d (data)", "tp": "t (tensor)", "pp": "p (pipeline)", "num_gpus": "GPUs",
           "hours": "time to train (h)", "gpu_hours": "GPU-hours", "cost_usd": "cost (USD)",
           "micro_batch": "micro-batch", "grad_accum": "accumulation steps", "memory_gib": "memory (GiB/GPU)",
           "headroom_gib": "headroom (GiB)", "step_time_s": "step (s)", "tokens_per_s": "throughput (tokens/s)"}
DECIDING = 8  # the first DECIDING columns: the split, its GPU count and the three deciding columns
FORMATS_NUM = {"memory (GiB/GPU)": "%.1f", "headroom (GiB)": "%.1f", "step (s)": "%.3f",
               "throughput (tokens/s)": "%,.0f", "time to train (h)": "%,.1f", "GPU-hours": "%,.0f",
               "cost (USD)": "$%,.0f"}
DEFAULTS = {"plans_objective": "time", "plans_tokens": DEFAULT_TOKENS, "plans_method": "detailed",
            "plans_margin": DEFAULT_SAFETY_MARGIN,
            "plans_floor": DEFAULT_SCALING_FLOOR, "plans_deadline_h": 0.0, "plans_max_gpus": 0, "plans_budget": 0.0,
            "plans_export_format": "megatron", "plans_export_rank": 1}


def plan_table(frame):
    columns = dict(COLUMNS)
    extra = {k: v for k, v in (("vp", "vp (interleave)"), ("cp", "cp (context)"), ("ep", "ep (experts)"))
             if (frame[k] > 1).any()}
    extra |= {k: v for k, v in (("first_stage_layers", "first stage (layers)"), ("last_stage_layers", "last stage (layers)"))
              if (frame[k] > 0).any()}  # uneven pipeline stages (0: a middle stage's share)
    if extra:  # long sequences / MoE models: the context- and expert-parallel sizes after the deciding columns
        columns = dict([*COLUMNS.items()][:DECIDING]) | extra | dict([*COLUMNS.items()][DECIDING:])
    table = frame.assign(memory_gib=frame["memory_bytes"] / common.GIB_FLOAT,
                         headroom_gib=frame["headroom_bytes"] / common.GIB_FLOAT,
                         hours=frame["time_to_train_s"] / 3600.0)[list(columns)]
    return table.rename(columns=columns)


@st.cache_data(max_entries=64, show_spinner=False)
def launch_file(fmt: str, model_json: str, training_json: str, cluster_json: str, plan_json: str,
                tokens: float) -> str:
    """frenzy_core.export.export_plan, cached on the JSON of its inputs."""
    from frenzy_core.cluster import Cluster
    from frenzy_core.models import ModelSpec
    from frenzy_core.training import TrainingSpec

    return export_plan(fmt, ModelSpec.model_validate_json(model_json), TrainingSpec.model_validate_json(training_json),
                       Plan(**load_json(plan_json, "plan")), Cluster.model_validate_json(cluster_json), tokens=tokens)


# the Launch panel opens on the training's framework where the spec has one (TrainingSpec.framework)
DEFAULTS["plans_export_format"] = FRAMEWORK_EXPORT.get(getattr(common.training(), "framework", None), "megatron")
for key, value in DEFAULTS.items():
    ss.setdefault(key, value)

st.title("Plans")
m, t, c = common.model(), common.training(), common.cluster()
st.caption(f"{m.name} · seq {t.seq_len} · global batch {t.global_batch} · {t.precision} · ZeRO-{t.zero_stage} · "
           f"recompute {t.recompute} on **{c.name}** ({c.total_gpus} GPUs). Change them on the Model & memory and "
           "Cluster pages.")
if positions := beyond_trained_positions(m, t.seq_len):
    st.warning(common.md_escape(positions[0].upper() + positions[1:] + "."), icon=":material/warning:")

# the objective on its own row and the number inputs four to a row: narrower columns clip them below 1,400 px
objective = st.segmented_control("Rank by", list(OBJECTIVE_LABELS), format_func=OBJECTIVE_LABELS.get,
                                 key="plans_objective") or "time"
c1, c2, c3, c4 = st.columns(4)
tokens = c1.number_input("token budget", min_value=MIN_TOKENS, max_value=MAX_TOKENS, step=1e9, format="%.2e", key="plans_tokens",
                         help="tokens to train for, 1e6 to 1e16")
method = c2.selectbox("memory method", ["detailed", "paper"], key="plans_method")
margin = c3.slider("safety margin", 0.0, 0.5, step=0.01, key="plans_margin",
                   help="fraction of each GPU's memory kept free")
floor = c4.slider("scaling floor", 0.0, 1.0, step=0.05, key="plans_floor",
                  help="drop a plan when the GPUs it adds over a smaller plan of the same GPU type buy less than "
                       "this share of linear speed-up (0.5: doubling the GPUs must be at least 1.5x faster; 0 = off)")
c1, c2, c3, _ = st.columns(4)
deadline_h = c1.number_input("deadline (h, 0 = none)", min_value=0.0, max_value=1e6, step=24.0, key="plans_deadline_h",
                             help="drop plans that take longer than this to train the token budget")
max_gpus = c2.number_input("max GPUs (0 = none)", min_value=0, max_value=MAX_TOTAL_GPUS, step=8, key="plans_max_gpus")
budget = c3.number_input("budget (USD, 0 = none)", min_value=0.0, max_value=1e10, step=1000.0,
                         key="plans_budget", help="drop plans that cost more (GPU-hours x catalog price)")

try:
    with st.spinner("Ranking plans…"):
        result = common.ranked_plans(
            m.model_dump_json(), t.model_dump_json(), c.model_dump_json(), objective, float(tokens), method,
            float(margin), float(floor), int(max_gpus) or None, float(deadline_h) * 3600.0 or None,
            float(budget) or None)
except SpecError as err:
    common.show_error(err)
    common.end_page()

grid = result.grid
best = result.plan(0) if len(result) else None
if best is not None:
    st.success(result.why_top, icon=":material/emoji_events:")
else:
    st.error(result.explanation, icon=":material/block:")
if result.dropped_types:  # GPU types green on the heatmap yet absent from the table: which constraint dropped them
    with st.container(key="plans_dropped_types"):
        st.info("No plan left on " + ", ".join(map(common.md_escape, result.dropped_types)) + ":\n\n" + "\n".join(
            f"- {common.md_escape(text)}" for text in result.dropped_types.values()), icon=":material/filter_alt:")
with st.expander("How the plans are ranked", expanded=False):
    st.markdown(f"{result.ranking_text}\n\nEvery feasible (GPU type, d, t, p) fits the GPU's memory after the safety "
                "margin. The **scaling floor** compares each plan with the fastest plan of every smaller GPU count "
                "on the same GPU type: the added GPUs must buy at least that share of a linear speed-up. The full "
                "rules are in `docs/ranking.md`.")

st.subheader("Memory headroom per split", anchor=False)
if grid.empty:
    st.info("No split could be enumerated for this batch on this cluster.")
else:
    grid = grid.assign(headroom_gib=grid["headroom_bytes"] / common.GIB_FLOAT)
    cp_values = sorted(int(v) for v in grid["cp"].unique())
    if len(cp_values) > 1:  # one cp at a time: a d x t cell holds one split (the best plan's cp first)
        if best is not None and ss.get("plans_cp_for") != best.label():
            ss.plans_cp, ss.plans_cp_for = best.cp, best.label()
        if ss.get("plans_cp") not in cp_values:  # first visit, or Streamlit dropped it on another page
            ss.plans_cp = best.cp if best is not None else cp_values[0]
        cp = st.select_slider("context-parallel ranks cp", cp_values, key="plans_cp",
                              help="each of cp GPUs holds seq_len / cp tokens (ring attention); a plan takes "
                                   "d x t x p x cp GPUs")
        grid = grid[grid["cp"] == cp]
    else:
        cp = cp_values[0]
    p_values = sorted(int(v) for v in grid["pp"].unique())
    if best is not None and ss.get("plans_p_for") != best.label():  # a new winner: open its p
        ss.plans_p, ss.plans_p_for = best.pp, best.label()
    if ss.get("plans_p") not in p_values:  # first visit, or Streamlit dropped it on another page
        ss.plans_p = best.pp if best is not None and best.pp in p_values else p_values[0]
    p = st.select_slider("pipeline stages p", p_values, key="plans_p") if len(p_values) > 1 else p_values[0]
    types = list(dict.fromkeys(grid["gpu_type"]))
    # one colour scale for every GPU type, spanning the feasible headroom (deeper deficits saturate red)
    fit = grid.loc[grid["feasible"], "headroom_gib"]
    lim = max(1.0, float(fit.max()) if len(fit) else float(grid["headroom_gib"].abs().max()))
    shown_best = best if best is not None and best.cp == cp else None
    fig = st.cache_resource(max_entries=64, show_spinner=False)(charts.headroom_heatmaps)(  # read-only figure
        grid, types, p, lim, shown_best)
    if fig is None:
        st.caption(f"No split to chart at p={p}.")
    else:
        st.plotly_chart(fig, key="plans_heatmaps", width="content", config=charts.config("headroom"))
    st.caption("Green: fits with that much memory to spare (after the safety margin); red ✗: does not fit; ★: the "
               "best plan. Each cell uses the micro-batch with the fastest step that fits.")

if len(result.plans):
    frame = result.to_frame()
    st.subheader("Best plan per GPU type", anchor=False)
    per_type = plan_table(frame.drop_duplicates("gpu_type", keep="first"))
    per_type.index = [int(i) + 1 for i in per_type.index]
    with st.container(key="plans_per_type_box"):  # a keyed box: tests/test_browser.py measures the columns in view
        st.dataframe(per_type, width="stretch", key="plans_per_type", column_config={
            k: st.column_config.NumberColumn(k, format=f) for k, f in FORMATS_NUM.items()})
    st.caption("The index is each plan's rank in the full table below.")

    st.subheader(f"Ranked plans ({len(result.plans)} pass)", anchor=False)
    table = plan_table(frame)
    table.index = range(1, len(table) + 1)
    with st.container(key="plans_table_box"):
        st.dataframe(table.head(200), width="stretch", height=380, key="plans_table", column_config={
            k: st.column_config.NumberColumn(k, format=f) for k, f in FORMATS_NUM.items()})
    st.download_button("Download all plans (CSV)", table.to_csv(index_label="rank"), file_name="plans.csv",
                       mime="text/csv", key="plans_csv")

    st.subheader("Launch", anchor=False)
    ss.plans_export_rank = min(max(1, int(ss.plans_export_rank)), len(result))
    c1, c2 = st.columns([1, 4], vertical_alignment="bottom")
    rank = c1.number_input("plan # (rank)", min_value=1, max_value=len(result), step=1, key="plans_export_rank")
    fmt = c2.segmented_control("Export as", list(FORMATS), format_func=FORMAT_LABELS.get,
                               key="plans_export_format") or "megatron"
    chosen = result.plan(int(rank) - 1)
    try:
        text = launch_file(fmt, m.model_dump_json(), t.model_dump_json(), c.model_dump_json(),
                           json.dumps(chosen.as_dict()), float(tokens))
    except SpecError as err:
        common.show_error(err, FORMAT_LABELS[fmt])
    else:
        st.caption(f"{FORMAT_LABELS[fmt]} for plan #{rank}: {chosen.label()}, micro-batch {chosen.micro_batch}, "
                   f"{chosen.grad_accum} accumulation steps. Same as `frenzy plans ... --export {fmt}`.")
        st.code(text, language=CODE_LANGUAGE[fmt], line_numbers=False, height=320)
        st.download_button(f"Download {FILE_NAMES[fmt]}", text, file_name=FILE_NAMES[fmt], key="plans_launch_dl",
                           icon=":material/download:")
