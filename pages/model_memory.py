"""Model & memory: pick or edit a model (or paste a Hugging Face config.json), set the training setup and the split,
and see the per-GPU memory by component, detailed beside the paper's method, against each GPU type's capacity."""

from __future__ import annotations

import dataclasses
from typing import get_args

import streamlit as st

from frenzy_core.errors import SpecError
from frenzy_core.frameworks import FRAMEWORKS, KNOWN, SWITCH_OWNERS
from frenzy_core.frameworks import get as get_framework
from frenzy_core.gpus import CATALOG
from frenzy_core.limits import (
    DEFAULT_SAFETY_MARGIN,
    MAX_BATCH,
    MAX_DEEPSPEED_ELEMENTS,
    MAX_EXPERTS,
    MAX_GPUS_PER_NODE,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_PARALLEL,
    MAX_SEQ_LEN,
    MODEL_LIMITS,
    slug_name,
)
from frenzy_core.models import (
    SUPPORTED_MODEL_TYPES,
    ZOO,
    ModelSpec,
    beyond_trained_positions,
    make_model,
    parse_hf_config_text,
)
from frenzy_core.training import (
    RECOMPUTE_MODULES,
    Attention,
    BaseQuant,
    LoraTargets,
    Offload,
    Optimizer,
    Parallelism,
    Precision,
    Recompute,
    TrainingSpec,
    check_parallelism,
    make_training,
)
from pages import charts, common

common.page_setup()

ss = st.session_state

# Hyperparameters a user edits; the rest (qkv_bias, expert_ffn_size) follow the base model.
INT_FIELDS = {
    "vocab_size": "vocabulary size V", "hidden_size": "hidden size h", "num_layers": "layers l",
    "num_heads": "attention heads a", "num_kv_heads": "KV heads (GQA)", "ffn_size": "MLP inner width",
    "max_positions": "max positions", "num_experts": "experts (0 = dense)", "moe_top_k": "experts per token",
}
CHOICE_FIELDS = {
    "mlp_kind": ("MLP", ["gelu", "swiglu"]), "position_kind": ("positions", ["learned", "rotary"]),
    "norm_kind": ("norm", ["layernorm", "rmsnorm"]),
}
BOOL_FIELDS = {"tie_embeddings": "tied LM head", "bias": "linear biases"}
TRAINING_FIELDS = ("framework", "seq_len", "global_batch", "micro_batch", "precision", "optimizer", "zero_stage",
                   "distributed_optimizer", "recompute", "sequence_parallel", "attention", "dropout",
                   "recompute_every", "loss_chunks", "offload", "lora_rank", "lora_targets", "base_quant", "fp8_linears",
                   "compile", "moe_grouped_gemm", "fp8_params", "bf16_grad_reduce", "param_remainders", "recompute_modules",
                   "reduce_bucket_size", "stage3_max_live_parameters",
                   "stage3_max_reuse_distance")
# Switches that belong to one stack (frameworks.SWITCH_OWNERS; TrainingSpec refuses them under another): their
# widgets show for that framework (and for unknown, whose band covers every recipe: `Framework.switches`); hidden,
# they count as their default, so switching the framework never leaves an error the user cannot reach (Streamlit
# drops a hidden widget's value: switching back starts it at its default again).
# The stacks' on/off switches (frameworks.SWITCH_OWNERS), each shown where `shown` says: (field, label, help)
STACK_SWITCH_BOXES = (
    ("compile", "torch.compile",
     "per-block torch.compile (framework fsdp2: torchtitan, or torchtune): fused norms and SwiGLU; selective AC "
     "keeps what backward needs"),
    ("moe_grouped_gemm", "MoE grouped GEMM",
     "framework megatron, MoE models: TE GroupedLinear experts (--moe-grouped-gemm)"),
    ("fp8_params", "fp8 weights",
     "framework megatron, with fp8 linears and the distributed optimizer: the linears' weights stored in fp8 "
     "(--fp8-param-gather)"),
    ("bf16_grad_reduce", "bf16 main grads",
     "framework megatron, bf16-master: gradients accumulated and reduce-scattered in bf16 (--grad-reduce-in-bf16); "
     "fp32 by default"),
    ("param_remainders", "16-bit master remainders",
     "framework megatron, bf16-master with the distributed optimizer: fp32 masters kept as the 16 bits the bf16 "
     "params lack (NeMo distributed_fused_adam, --use-precision-aware-optimizer)"),
)
SPLIT_FIELDS = tuple(f.name for f in dataclasses.fields(Parallelism))  # dp, tp, pp, cp, vp, ep, etp
MOE_SPLIT = ("ep", "etp")  # shown for a model with experts; hidden they are 1 and 0 (= t)
CUSTOM = "(config.json)"
# Upper bounds a user can type (the widgets refuse larger values with a message); the largest public models sit
# well inside them (Llama-3.1-405B: h 16,384, 126 layers, vocabulary 128,256).
INT_LIMITS = MODEL_LIMITS  # the core's own limits (frenzy_core/limits.py): a widget accepts what the core accepts
# What each memory term is, in words and symbols (W = parameters, s = sequence, b = micro-batch, h = hidden size,
# a = heads, V = vocabulary, l = layers on the most loaded stage); docs/memory.md derives and tests each one.
TERM_HELP = {
    "weights": "parameters on this GPU x bytes per parameter: W / (t x p) x 2 (bf16) or 4 (fp32); ZeRO-3 also / d",
    "gradients": "one gradient per parameter: W / (t x p) x 4 (fp32 main grad) or 2; ZeRO-2/3 also / d",
    "optimizer": "fp32 master copy (4 B) + Adam's exp_avg and exp_avg_sq (4 + 4 B) per parameter, / (t x p); "
                 "ZeRO-1+ or the distributed optimizer also / d",
    "activations": "tensors saved for backward on the most loaded pipeline stage: per layer s x b x h x "
                   "(34 + 5 a s / h) / t bytes in Korthikanti et al. 2022 (flash attention drops the 5 a s / h "
                   "score term), x layers x micro-batches in flight",
    "logits": "the [b x s, V / t] logits in bf16, the fp32 log-softmax cross_entropy saves, and the fp32 + bf16 "
              "logit gradients at the start of backward: 12-16 bytes per logit element (docs/memory.md, "
              "'Logits and loss')",
    "transient": "temporaries alive only at the peak moment, e.g. foreach AdamW's fp32 temporary inside "
                 "optimizer.step() (4 B per parameter) or the buffers at the start of backward "
                 "(docs/memory.md, 'The peak moves')",
    "overhead": "CUDA context and the caching allocator's reserve beyond the allocated tensors",
}


def resolved(spec: ModelSpec) -> dict:
    """The editable fields with defaults spelled out (None KV heads -> a, None MLP width -> 4h)."""
    values = {f: getattr(spec, f) for f in (*INT_FIELDS, *CHOICE_FIELDS, *BOOL_FIELDS)}
    values["num_kv_heads"] = spec.kv_heads
    values["ffn_size"] = spec.ffn
    return values


def seed_model_widgets(spec: ModelSpec) -> None:
    for field, value in resolved(spec).items():
        ss[f"hp_{field}"] = value
    # a model with learned positions cannot see more tokens than its table has rows: pull the sequence down to it
    # (the user can still type a longer one and gets the error naming seq_len)
    if spec.position_kind == "learned" and int(ss.get("tr_seq_len", 0)) > spec.max_positions:
        ss.tr_seq_len = spec.max_positions
        ss.seq_note = f"Sequence length set to {spec.max_positions}, the most {spec.name} has learned positions for."


def seed_training_widgets() -> None:
    t, p = common.training(), common.par()
    for field in TRAINING_FIELDS:
        value = getattr(t, field)
        ss[f"tr_{field}"] = list(value) if isinstance(value, tuple) else value  # a multiselect holds a list
    for field in SPLIT_FIELDS:
        ss[f"par_{field}"] = getattr(p, field)


def shown(field: str, framework: str) -> bool:
    """Whether a framework-only switch has a widget under `framework`."""
    return field not in SWITCH_OWNERS or field in get_framework(framework).switches


def training_fields() -> dict:
    """TrainingSpec fields from the widgets; a hidden framework-only switch is its default."""
    framework = ss.tr_framework
    return {f: ss[f"tr_{f}"] if shown(f, framework) else TrainingSpec.model_fields[f].default
            for f in TRAINING_FIELDS}


def split_fields(moe: bool) -> dict:
    defaults = {"ep": 1, "etp": 0}
    return {f: int(ss[f"par_{f}"]) if moe or f not in MOE_SPLIT else defaults[f] for f in SPLIT_FIELDS}


def on_zoo_pick() -> None:
    name = ss.zoo_pick
    ss.hf_error = None  # a config.json error is stale once another model is picked
    if name in ZOO:
        ss.base_spec = ZOO[name]
        ss.model_base = name
        seed_model_widgets(ZOO[name])


def apply_hf_config(text: str, name: str | None = None) -> None:
    """Parse a pasted or uploaded config.json; on success it becomes the base model, else ss.hf_error says why."""
    ss.hf_error = None
    try:
        spec = parse_hf_config_text(text, name=name)
    except SpecError as err:
        ss.hf_error = err
        return
    ss.base_spec = spec
    ss.model_base = CUSTOM
    ss.zoo_pick = CUSTOM
    seed_model_widgets(spec)


def on_hf_paste() -> None:
    apply_hf_config(ss.get("hf_text", ""), name=(ss.get("hf_name") or None))


def on_hf_upload() -> None:
    upload = ss.get("hf_upload")
    if upload is not None:
        apply_hf_config(upload.getvalue().decode("utf-8", errors="replace"), name=upload.name.rsplit(".", 1)[0])


@st.cache_data(max_entries=256, show_spinner=False)
def memory_breakdowns(model_json: str, training_json: str, split: tuple[int, ...]) -> dict:
    """{method: (components GiB, total GiB, peak phase)} for the detailed and the paper method."""
    from frenzy_core.memory import predict_memory  # imported here: the page still opens if memory is missing
    from frenzy_core.models import ModelSpec as _M
    from frenzy_core.training import TrainingSpec as _T

    m, t = _M.model_validate_json(model_json), _T.model_validate_json(training_json)
    par = Parallelism(**dict(zip(SPLIT_FIELDS, split, strict=True)))
    out = {}
    for method in ("detailed", "paper"):
        mem = predict_memory(m, t, par, method=method)
        out[method] = ({k: common.gib(v) for k, v in mem.components().items()}, common.gib(mem.total_bytes),
                       mem.peak_phase)
    from frenzy_core.memory import predict_memory_band

    low, high = predict_memory_band(m, t, par)
    out["band"] = (common.gib(low.total_bytes), common.gib(high.total_bytes))
    return out


# --- state seeding: once per visit to this page --------------------------------------------------------------------
if "base_spec" not in ss:
    ss.base_spec = ZOO.get(ss.model_base, common.model())
if "zoo_pick" not in ss:
    ss.zoo_pick = ss.model_base if ss.model_base in ZOO else CUSTOM
if "hp_hidden_size" not in ss:
    seed_model_widgets(common.model())
if "tr_seq_len" not in ss:
    seed_training_widgets()


SMALLEST_SPLIT_GPUS = 1024  # the one-type cluster the smallest split is searched on: 128 nodes of 8 GPUs


@st.cache_data(max_entries=64, show_spinner=False)
def smallest_splits(model_json: str, training_json: str, gpu_jsons: tuple[str, ...]) -> dict[str, str]:
    """Per GPU type, the fewest-GPU plan that fits (frenzy_core.plans.rank_plans with objective "gpus" on a cluster of
    that type alone), as its label and per-GPU memory, or why none does."""
    from frenzy_core.cluster import Cluster, Node
    from frenzy_core.gpus import GPUType
    from frenzy_core.plans import rank_plans

    model, training = ModelSpec.model_validate_json(model_json), TrainingSpec.model_validate_json(training_json)
    out = {}
    for text in gpu_jsons:
        g = GPUType.model_validate_json(text)
        nodes = [Node(name=f"n{i}", gpu_type=g.name, num_gpus=8) for i in range(SMALLEST_SPLIT_GPUS // 8)]
        try:
            plans = rank_plans(model, training, Cluster(name="one-type", gpu_types=(g,), nodes=tuple(nodes)),
                               objective="gpus").plans
        except SpecError as err:
            out[g.name] = f"none: {err.reason}"
            continue
        out[g.name] = (f"{plans[0].label().removeprefix(g.name + ' ')}, {common.gib(plans[0].memory_bytes):.1f} GiB"
                       if len(plans)
                       else f"none on up to {SMALLEST_SPLIT_GPUS:,} GPUs")
    return out

st.title("Model & memory")
errors: list[tuple[str, Exception]] = []
left, right = st.columns([1, 1.35], gap="large")

with left:
    st.subheader("Model", anchor=False)
    tab_zoo, tab_hf = st.tabs(["Zoo & edit", "HF config.json"])
    with tab_hf:
        st.file_uploader("Upload a config.json", type=["json"], key="hf_upload", on_change=on_hf_upload)
        st.text_input("Name (optional)", key="hf_name", placeholder="e.g. my-llama")
        st.text_area("…or paste config.json", key="hf_text", height=140,
                     placeholder='{"model_type": "llama", "hidden_size": 4096, ...}')
        st.button("Use this config", key="hf_apply", on_click=on_hf_paste)
        st.caption(f"Supported model_type: {', '.join(SUPPORTED_MODEL_TYPES)}. Read locally, never fetched.")
        if ss.get("hf_error") is not None:
            errors.append(("config.json", ss.hf_error))
    with tab_zoo:
        options = list(ZOO) + ([CUSTOM] if ss.zoo_pick == CUSTOM else [])
        st.selectbox("Model", options, key="zoo_pick", on_change=on_zoo_pick,
                     format_func=lambda n: f"{n} ({common.fmt_params(ZOO[n].parameter_count())})" if n in ZOO
                     else f"{ss.base_spec.name} (from config.json)")
        cols = st.columns(3)
        for i, (field, label) in enumerate(INT_FIELDS.items()):
            cols[i % 3].number_input(label, min_value=0 if field == "num_experts" else 1, max_value=INT_LIMITS[field],
                                     step=1, key=f"hp_{field}")
        cols = st.columns(2)  # two per row: three clip the values below 1,400 px
        for i, (field, (label, choices)) in enumerate(CHOICE_FIELDS.items()):
            cols[i % 2].selectbox(label, choices, key=f"hp_{field}")
        cols = st.columns(2)
        for i, (field, label) in enumerate(BOOL_FIELDS.items()):
            cols[i].checkbox(label, key=f"hp_{field}")

    st.subheader("Training setup", anchor=False)
    if ss.get("seq_note"):
        st.info(ss.pop("seq_note"))
    c1, c2, c3 = st.columns(3)
    c1.number_input("sequence length", min_value=1, max_value=MAX_SEQ_LEN, step=256, key="tr_seq_len",
                    help="tokens per sample, 1 to 1,048,576")
    c2.number_input("global batch", min_value=1, max_value=MAX_BATCH, step=1, key="tr_global_batch",
                    help="samples per optimizer step over all replicas")
    c3.number_input("micro-batch", min_value=1, max_value=MAX_BATCH, step=1, key="tr_micro_batch",
                    help="samples per forward/backward; at most the global batch")
    s1, s2 = st.columns(2)  # choices two per row: three clip values such as "bf16-master" below 1,400 px
    s1.selectbox("framework", list(FRAMEWORKS), key="tr_framework",
                 help="the training stack whose memory recipe applies (docs/memory.md, 'Framework recipes'); "
                      "unknown: the highest recipe, with the band over all of them")
    s2.selectbox("precision", get_args(Precision), key="tr_precision")
    s1.selectbox("optimizer", get_args(Optimizer), key="tr_optimizer")
    s2.selectbox("ZeRO stage", [0, 1, 2, 3], key="tr_zero_stage")
    s1.selectbox("recomputation", get_args(Recompute), key="tr_recompute")
    s2.selectbox("attention", get_args(Attention), key="tr_attention")
    s1.number_input("dropout", min_value=0.0, max_value=0.99, step=0.05, key="tr_dropout")
    s2.checkbox("distributed optimizer", key="tr_distributed_optimizer")
    s2.checkbox("sequence parallel", key="tr_sequence_parallel")
    framework = ss.tr_framework
    switches = get_framework(framework).switches_label
    with st.expander("More training options: LoRA, offload, fp8, chunked loss, checkpoint stride"
                     + (f", {switches}" if switches else "")):
        e1, e2 = st.columns(2)
        e1.number_input("LoRA rank", min_value=0, max_value=MAX_HIDDEN, step=8, key="tr_lora_rank",
                        help="PEFT LoRA: the base model is frozen and only rank-r adapters train; 0 = full training")
        e2.selectbox("LoRA targets", get_args(LoraTargets), key="tr_lora_targets",
                     help="attention: q/k/v/o projections; all-linear: every linear of the blocks")
        e1.selectbox("base weights (QLoRA)", get_args(BaseQuant), key="tr_base_quant",
                     help="nf4 / nf4-dq: the frozen linears stored 4-bit (bitsandbytes); needs a LoRA rank")
        e2.selectbox("CPU offload", get_args(Offload), key="tr_offload",
                     help="optimizer: states and gradients on the CPU (ZeRO-Offload); params: the parameters too "
                          "(ZeRO-3 or fsdp2)")
        e1.number_input("checkpoint every k layers", min_value=1, max_value=MAX_LAYERS, step=1, key="tr_recompute_every",
                        help="with recomputation full or op-sac: only every k-th layer is checkpointed "
                             "(torchtitan ac_freq)")
        e2.number_input("loss chunks", min_value=1, max_value=MAX_SEQ_LEN, step=1, key="tr_loss_chunks",
                        help="cross-entropy over k chunks of the logits (torchtune CEWithChunkedOutputLoss)")
        e1.checkbox("fp8 linears", key="tr_fp8_linears",
                    help="Transformer Engine fp8 linears: fp8 saved inputs and a cached fp8 weight")
        for i, (field, label, hint) in enumerate(f for f in STACK_SWITCH_BOXES if shown(f[0], framework)):
            (e2 if i % 2 == 0 else e1).checkbox(label, key=f"tr_{field}", help=hint)
        if shown("recompute_modules", framework):
            st.multiselect("recompute modules (Megatron)", RECOMPUTE_MODULES, key="tr_recompute_modules",
                           help="Megatron --recompute-modules beyond the attention core: layernorm (an MoE layer's "
                                "pre-MLP norm), moe_act (the experts' activation); with recomputation none or "
                                "selective")
        if shown("reduce_bucket_size", framework):
            st.caption("DeepSpeed zero_optimization, in elements; 0 = DeepSpeed's default (5e8, 1e9, 1e9)")
            d1, d2, d3 = st.columns(3)
            d1.number_input("reduce_bucket_size", min_value=0, max_value=MAX_DEEPSPEED_ELEMENTS, step=10_000_000,
                            key="tr_reduce_bucket_size", help="the contiguous gradient bucket")
            d2.number_input("stage3_max_live_parameters", min_value=0, max_value=MAX_DEEPSPEED_ELEMENTS, step=100_000_000,
                            key="tr_stage3_max_live_parameters",
                            help="ZeRO-3: the prefetch stops at this many gathered elements")
            d3.number_input("stage3_max_reuse_distance", min_value=0, max_value=MAX_DEEPSPEED_ELEMENTS, step=100_000_000,
                            key="tr_stage3_max_reuse_distance",
                            help="ZeRO-3: a parameter used again within this many elements stays gathered")
    moe = int(ss.get("hp_num_experts") or 0) > 0
    st.markdown("**Split** (data × tensor × pipeline" + (" × context; experts" if moe else " × context") + ")")
    c1, c2, c3 = st.columns(3)
    c1.number_input("d (data)", min_value=1, max_value=MAX_PARALLEL, step=1, key="par_dp")
    c2.number_input("t (tensor)", min_value=1, max_value=MAX_GPUS_PER_NODE, step=1, key="par_tp")
    c3.number_input("p (pipeline)", min_value=1, max_value=MAX_LAYERS, step=1, key="par_pp")
    c1.number_input("cp (context)", min_value=1, max_value=MAX_PARALLEL, step=1, key="par_cp",
                    help="context parallelism: each of cp GPUs holds seq_len / cp tokens (ring attention)")
    c2.number_input("vp (interleave)", min_value=1, max_value=MAX_LAYERS, step=1, key="par_vp",
                    help="interleaved 1F1B: each pipeline rank holds vp chunks of layers; needs p > 1")
    if moe:
        c3.number_input("ep (experts)", min_value=1, max_value=MAX_EXPERTS, step=1, key="par_ep",
                        help="expert parallelism: each GPU holds num_experts / ep experts, carved out of d x cp")
        c1.number_input("etp (expert tensor, 0 = t)", min_value=0, max_value=MAX_GPUS_PER_NODE, step=1, key="par_etp",
                        help="Megatron --expert-tensor-parallel-size; 0 keeps Megatron's default, t")

# --- widgets -> specs; a bad value shows an error and the last good spec stays ----------------------------------------
base: ModelSpec = ss.base_spec
edited = {f: ss[f"hp_{f}"] for f in resolved(base)}
fields = base.model_dump() | edited
if edited != resolved(base):
    fields["name"] = slug_name(f"{base.name}-edited")
else:
    fields["name"] = base.name
new_model = new_training = new_par = None
try:
    new_model = make_model(**fields)
except SpecError as err:
    errors.append(("model", err))
try:
    new_training = make_training(**{**common.training().model_dump(), **training_fields()})
except SpecError as err:
    errors.append(("training", err))
if new_model is not None and new_training is not None:
    new_par = Parallelism(**split_fields(new_model.num_experts > 0))
    try:
        check_parallelism(new_model, new_training, new_par)
        ss.model, ss.training, ss.par = new_model, new_training, new_par
    except SpecError as err:
        errors.append(("split", err))
elif new_model is not None:
    try:
        check_parallelism(new_model, common.training(), common.par())
        ss.model = new_model
    except SpecError as err:
        errors.append(("split", err))

with right:
    for what, err in errors:
        common.show_error(err, what)
    if errors:
        st.caption("Showing the last valid setup until the value above is fixed.")
    m, t, p = common.model(), common.training(), common.par()
    try:
        result = memory_breakdowns(m.model_dump_json(), t.model_dump_json(), dataclasses.astuple(p))
    except SpecError as err:
        common.show_error(err, "memory")
        common.end_page()
    detailed, paper = result["detailed"], result["paper"]
    # two metrics with three significant digits (exact figures in the help): wider rows clip values below 1,400 px
    a, b = st.columns(2)
    a.metric("Peak per GPU", f"{common.fmt_num(detailed[1])} GiB",
             help=f"detailed method, {t.framework} recipe: {detailed[1]:,.3f} GiB, peak during {detailed[2]}")
    b.metric("Paper's formula", f"{common.fmt_num(paper[1])} GiB",
             help=f"{paper[1]:,.3f} GiB: Frenzy paper (arXiv 2412.14479), Sec. IV-A")
    low, high = result["band"]
    band = f"Across the framework recipes ({', '.join(KNOWN)}): {low:.2f}-{high:.2f} GiB."
    st.caption(f"**{m.name}**: {common.fmt_params(m.parameter_count())} parameters ({m.parameter_count():,}). "
               f"Detailed peak ({t.framework} recipe) during **{detailed[2]}**. {band}")
    if positions := beyond_trained_positions(m, t.seq_len):
        st.warning(common.md_escape(positions[0].upper() + positions[1:] + "."), icon=":material/warning:")
    fw = get_framework(t.framework)
    caveat = fw.memory_caveat(t, p)  # e.g. DeepSpeed ZeRO-3's held-out error (frameworks/deepspeed.py)
    if caveat:
        st.warning(caveat, icon=":material/warning:")
    if fw.is_band:
        st.warning(f"Framework unknown: the planner uses the highest recipe ({high:.2f} GiB); the real peak lies in "
                   f"{low:.2f}-{high:.2f} GiB depending on the stack. Pick the framework to narrow it.")

    ss.setdefault("mem_all_gpus", False)
    ss.setdefault("mem_log_scale", False)
    t1, t2 = st.columns(2)
    show_all = t1.toggle("All catalog GPUs", key="mem_all_gpus",
                         help="Off: only the GPU types of the current cluster.")
    log_scale = t2.toggle("Log scale", key="mem_log_scale",
                          help="The paper's formula can be many times the detailed figure; a log axis shows both.")
    gpus = list(CATALOG.values()) if show_all else common.cluster().gpu_types_present()
    by_capacity: dict[float, list[str]] = {}
    for g in gpus:
        by_capacity.setdefault(common.gib(g.memory_bytes), []).append(g.name)
    names = list(dict.fromkeys([*detailed[0], *paper[0]]))
    # st.cache_resource, not cache_data: the figure is only read, and cache_data's pickled copy re-validates it
    # (~10 ms, more than building it); the key is the plain values below
    fig = st.cache_resource(max_entries=256, show_spinner=False)(charts.memory_chart)(
        result, names, by_capacity, log_scale, [m.name, f"{p.label()}, micro-batch {t.micro_batch}, seq {t.seq_len}"],
        TERM_HELP)
    if fig is None:
        st.caption("No memory to chart for this setup.")
    else:
        st.plotly_chart(fig, key="memory_chart", width="stretch", config=charts.config("memory"))
    smallest = smallest_splits(m.model_dump_json(), t.model_dump_json(),
                               tuple(g.model_dump_json() for g in gpus))
    st.table([{"GPU": g.name, "memory GiB": f"{common.gib(g.memory_bytes):.1f}",
               "headroom GiB (detailed)": f"{common.gib(g.memory_bytes) - detailed[1]:.2f}",
               "fits": "✓" if detailed[1] <= common.gib(g.memory_bytes) else "✗",
               "smallest split that fits": smallest[g.name]} for g in gpus])
    st.caption("Capacity is the GPU's nominal memory; the Plans page also keeps a safety margin free. "
               "Detailed = component model with the most loaded pipeline stage; paper = Frenzy's closed form. "
               "Smallest split: the plan with the fewest GPUs of that type (any d, t, p, cp, micro-batch) that fits "
               f"with the Plans page's default {DEFAULT_SAFETY_MARGIN:.0%} safety margin, on up to "
               f"{SMALLEST_SPLIT_GPUS:,} GPUs in 8-GPU nodes.")
    # the formulas sit in a popover (drawn only when opened) so the page and its memory updates stay fast
    with st.popover("What each term is (formulas, docs/memory.md)", icon=":material/function:"):
        st.markdown("| term | detailed GiB | paper GiB | what it is |\n|---|---:|---:|---|\n" + "\n".join(
            f"| {name} | {detailed[0].get(name, 0.0):.3f} | {paper[0].get(name, 0.0):.3f} | "
            f"{TERM_HELP.get(name, 'see docs/memory.md')} |" for name in names))
        st.caption("Derivations and the traced findings behind each term: docs/memory.md, \"Findings the model is "
                   "built on\".")
