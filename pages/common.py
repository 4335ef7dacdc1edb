"""What every page shares: session state set up once, cached calls into frenzy_core, and error display.

Not a page (app.py lists the pages explicitly). No domain logic: this module only moves values between widgets,
st.session_state and frenzy_core. Canonical values live under plain keys (`model`, `training`, `par`, `cluster`);
widgets use their own keys and are re-seeded from the canonical values when a page is opened again, so a bad
widget value never replaces the last good spec.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import streamlit as st

from frenzy_core.cluster import Cluster, bundled_clusters, load_cluster
from frenzy_core.errors import SpecError
from frenzy_core.gpus import GIB
from frenzy_core.limits import DEFAULT_SAFETY_MARGIN, DEFAULT_TOKENS, MAX_SCENARIO_JOBS
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.training import Parallelism, TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "sample_clusters"
DEFAULT_CLUSTER_PATH = SAMPLE_DIR / "modern-mixed.yaml"

# First-open defaults: a 7B model split so that it fits an 80 GB GPU, the batch a 7B run commonly uses.
DEFAULT_MODEL = "llama-2-7b"
DEFAULT_TRAINING = dict(seq_len=2048, global_batch=64, micro_batch=1, precision="bf16-master")
DEFAULT_PAR = Parallelism(dp=2, tp=4, pp=1)

# Widget keys that must survive a visit to another page. Streamlit drops a widget's state when the page changes;
# page_setup copies them into `_kept` at the top of each run of their page and puts them back when the page opens
# again. Buttons, uploaders and data editors cannot be assigned and are left out.
PERSISTENT_KEYS = {
    "overview": (),
    "model": ("mem_all_gpus", "mem_log_scale"),
    "plans": ("plans_objective", "plans_tokens", "plans_method", "plans_margin", "plans_floor", "plans_deadline_h",
              "plans_max_gpus", "plans_budget", "plans_export_format", "plans_export_rank"),
    "cluster": ("pack_model", "pack_objective", "pack_floor"),
    "simulation": ("sim_kind", "sim_limit", "sim_bundled", "sim_fmt", "sim_policies", "sim_seeds"),
    "whatif": ("wi_budget", "wi_policy", "wi_seeds", "wi_kind", "wi_limit", "wi_bundled", "wi_fmt"),
}

# the plan objectives (frenzy_core.plans.OBJECTIVES) as the pages label them
OBJECTIVE_LABELS = {"time": "time to train", "gpu-hours": "GPU-hours", "cost": "cost", "gpus": "fewest GPUs"}

PAGES = {
    "overview": ("pages/overview.py", "Overview", ":material/home:"),
    "model": ("pages/model_memory.py", "Model & memory", ":material/memory:"),
    "plans": ("pages/plans.py", "Plans", ":material/grid_on:"),
    "cluster": ("pages/cluster_packing.py", "Cluster & packing", ":material/dns:"),
    "simulation": ("pages/simulation.py", "Simulation", ":material/timeline:"),
    "whatif": ("pages/gpu_mix.py", "GPU mix what-if", ":material/shopping_cart:"),
}


# Modules the heavier pages need (scipy/pandas behind the simulator, the memory and plan models), imported
# once per server process when the router first loads, on the main thread: importing them from a background thread
# while a page imports the same modules races (Python hands one thread a partially initialised module).
WARM_MODULES = ("pandas", "frenzy_core.memory", "frenzy_core.plans", "frenzy_core.traces",
                "frenzy_core.simulate", "frenzy_core.allocation", "frenzy_core.whatif", "frenzy_core.timeline")
for _name in WARM_MODULES:
    importlib.import_module(_name)


def sample_clusters() -> dict[str, Path]:
    """The bundled sample cluster files, name -> path."""
    return bundled_clusters()


def _default_cluster() -> tuple[Cluster, str, str | None]:
    """FRENZY_CLUSTER (a YAML path) if set and valid, else the bundled modern-mixed sample."""
    env = os.environ.get("FRENZY_CLUSTER")
    if env:
        try:
            return load_cluster(env), env, None
        except SpecError as err:
            warning = f"FRENZY_CLUSTER={env} could not be loaded ({err}); using the bundled modern-mixed sample."
            return load_cluster(DEFAULT_CLUSTER_PATH), str(DEFAULT_CLUSTER_PATH.relative_to(ROOT)), warning
    return load_cluster(DEFAULT_CLUSTER_PATH), str(DEFAULT_CLUSTER_PATH.relative_to(ROOT)), None


def init_state() -> None:
    """Set every canonical value once per browser session (app.py calls this on every run; it is idempotent)."""
    ss = st.session_state
    if "model" not in ss:
        ss.model = ZOO[DEFAULT_MODEL]
        ss.model_base = DEFAULT_MODEL
    if "training" not in ss:
        ss.training = TrainingSpec(**DEFAULT_TRAINING)
    if "par" not in ss:
        ss.par = DEFAULT_PAR
    if "cluster" not in ss:
        cluster, source, warning = _default_cluster()
        ss.cluster = cluster
        ss.cluster_source = source
        ss.cluster_warning = warning
        ss.cluster_version = 0  # bumped whenever a new cluster is loaded, so editors and packing start afresh


def page_setup() -> None:
    """Every page calls this first. While a `pages/` folder exists, Streamlit runs a page URL's file on its own
    (its old multipage convention) until the first st.navigation call of the process. A brand-new session that
    arrives that way (a fresh server's first request for /plans, say) is sent through app.py, the router, so it gets
    its state, navigation and sidebar; a session that already has its state just carries on (nothing is lost)."""
    import sys

    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        if "model" not in st.session_state:
            st.rerun()
    init_state()
    keep_widgets(page_key(Path(sys._getframe(1).f_globals.get("__file__", "")).stem))


def set_cluster(cluster: Cluster, source: str) -> None:
    """Replace the current cluster (a loaded sample, an uploaded or pasted YAML); packing state starts afresh."""
    st.session_state.cluster = cluster
    st.session_state.cluster_source = source
    st.session_state.cluster_version = st.session_state.get("cluster_version", 0) + 1
    st.session_state.pop("allocation", None)


def model() -> ModelSpec:
    return st.session_state.model


def training() -> TrainingSpec:
    return st.session_state.training


def par() -> Parallelism:
    return st.session_state.par


def cluster() -> Cluster:
    return st.session_state.cluster


GIB_FLOAT = float(GIB)


def gib(n: float) -> float:
    return float(n) / GIB


def fmt_num(x: float, digits: int = 3) -> str:
    """A number with about `digits` significant digits, thousands separators and never scientific notation:
    3,615 · 36.2 · 7.05 · 0.123 (the pages' one number format)."""
    if x != x or x in (float("inf"), float("-inf")):
        return "n/a"
    if abs(x) < 10 ** (digits - 1):
        x = float(f"{x:.{digits}g}")  # round to the significant digits first: 99.96 -> 100, not 100.0
    if abs(x) >= 10 ** (digits - 1) or x == 0:  # whole units from here up: 3,615, never 3.62e+03
        return f"{x:,.0f}"
    decimals = digits - 1 - (len(str(int(abs(x)))) - 1 if abs(x) >= 1 else -1)
    return f"{x:,.{max(0, decimals)}f}"


def fmt_count(x: float) -> str:
    """A count: an integer when it is one (60, not 60.00), else a mean over seeds with one decimal (86.6)."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def eta_text(elapsed_s: float, fraction: float) -> str:
    """'about 12 s left' from the time so far and the fraction done (nothing until 2% is done)."""
    if fraction < 0.02:
        return "estimating time left…"
    left = elapsed_s * (1.0 - fraction) / fraction
    return f"about {left:,.0f} s left" if left < 120 else f"about {left / 60:,.1f} min left"


def fmt_params(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


@st.cache_data(max_entries=64, show_spinner=False)
def ranked_plans(model_json: str, training_json: str, cluster_json: str, objective: str = "time",
                 tokens: float = DEFAULT_TOKENS, method: str = "detailed", safety_margin: float = DEFAULT_SAFETY_MARGIN,
                 scaling_floor: float = 0.0, max_gpus: int | None = None, deadline_s: float | None = None,
                 budget_usd: float | None = None):
    """frenzy_core.plans.rank_plans, cached on the JSON of the specs (pydantic values hash through their JSON)."""
    from frenzy_core.plans import rank_plans

    return rank_plans(ModelSpec.model_validate_json(model_json), TrainingSpec.model_validate_json(training_json),
                      Cluster.model_validate_json(cluster_json), objective=objective, tokens=tokens, method=method,
                      safety_margin=safety_margin, scaling_floor=scaling_floor, max_gpus=max_gpus,
                      deadline_s=deadline_s, budget_usd=budget_usd)


def keep_widgets(current: str | None) -> None:
    """At the top of a page's run. The first run of a visit puts back the values the page had when the user left it
    (Streamlit dropped them, or kept a stale value set earlier through the Session State API); every later run of
    the visit remembers them (the user's latest input is already in st.session_state)."""
    ss = st.session_state
    kept = ss.setdefault("_kept", {})
    arriving = ss.get("_page") != current
    ss._page = current
    for key in PERSISTENT_KEYS.get(current, ()):
        if arriving and key in kept:
            ss[key] = kept[key]
        elif key in ss:
            kept[key] = ss[key]


def set_widget(key: str, value) -> None:
    """Set a page's widget value from outside the page (a loaded scenario): now and on the page's next visit."""
    st.session_state[key] = value
    st.session_state.setdefault("_kept", {})[key] = value


def page_key(url_path: str) -> str | None:
    """The PAGES key of a page from its URL path ("" is the overview)."""
    for key, (path, _, _) in PAGES.items():
        if Path(path).stem == (url_path or "overview"):
            return key
    return None


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$:&])")


def md_escape(text) -> str:
    """Text that Streamlit's markdown shows as typed: no links, images, HTML, colours, LaTeX or emphasis.

    Every message that can carry user text (a file's name, a field's value quoted by an error) goes through it.

    >>> print(md_escape("[x](http://e) $a$ :red[b]"))
    \\[x\\]\\(http\\://e\\) \\$a\\$ \\:red\\[b\\]
    """
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


class PageEnded(Exception):
    """Raised by `end_page`: the page has drawn all it can (an error said why) and its run ends here, while app.py
    still fills the sidebar and writes the share link. `st.stop()` would end the whole run, router included."""


def end_page() -> None:
    raise PageEnded


def show_error(err: Exception, what: str = "") -> None:
    """One st.error line for bad input: the SpecError already names the field and the fix (shown escaped)."""
    prefix = f"{what}: " if what else ""
    st.error(md_escape(f"{prefix}{err}"), icon=":material/error:")


def fill_sidebar(container) -> None:
    """The current model and cluster, shown on every page (filled after the page ran, so it is never stale)."""
    m, c, t, p = model(), cluster(), training(), par()
    with container:
        if label := scenario_label():
            st.markdown(f"**Scenario:** {md_escape(label)}")
        st.markdown("**Current model**")
        st.caption(f"{m.name} · {fmt_params(m.parameter_count())} parameters · seq {t.seq_len} · "
                   f"batch {t.global_batch} (micro {t.micro_batch}) · {t.precision} · {p.label()}")
        st.markdown("**Current cluster**")
        counts = ", ".join(f"{n} × {g}" for g, n in c.gpus_by_type().items())
        st.caption(f"{c.name} · {len(c.nodes)} nodes · {c.total_gpus} GPUs ({counts})")


def scenario_label() -> str | None:
    """What the sidebar calls the live scenario: the loaded scenario's name while the state still equals it,
    "unsaved changes (from <name>)" once any scenario field differs (the model, a page's setting), None when no
    scenario was loaded. Compared without the name, user and description, which no page edits."""
    ss = st.session_state
    loaded, name = ss.get("scenario_loaded"), ss.get("scenario_name")
    if not name:
        return None
    current = scenario_from_state()
    if loaded is None or current is None or _unnamed(current) == _unnamed(loaded):
        return name
    return f"unsaved changes (from {name})"


def _unnamed(s):
    return s.model_copy(update={"name": "", "user": "custom", "description": ""})


@st.cache_data(max_entries=32, show_spinner=False)
def load_trace_cached(source: str, fmt: str, limit: int | None):
    """frenzy_core.traces.load_trace on a path or the file's text, cached (a Trace is a plain picklable value)."""
    from frenzy_core.traces import load_trace

    return load_trace(source, fmt, limit=limit)


def trace_picker(prefix: str, default_limit: int = 200):
    """Widgets to choose a bundled trace or upload / paste one, plus a job limit. Returns the Trace or None.

    A file that is not the format shows an st.error and the last good trace of this picker stays in use; rows the
    loader skipped are listed in an st.warning.
    """
    from frenzy_core.traces import LOADERS, bundled_traces

    ss = st.session_state
    bundled = bundled_traces()
    c1, c2 = st.columns([2, 1])  # [3, 1] wraps "first N jobs" onto two lines in the what-if's narrow column
    kind = c1.radio("Trace", ["bundled sample", "upload or paste"], horizontal=True, key=f"{prefix}_kind")
    limit = c2.number_input("first N jobs", min_value=1, max_value=MAX_SCENARIO_JOBS, value=default_limit, step=50,
                            key=f"{prefix}_limit", help="the N earliest-arriving jobs")
    label = ""
    try:
        if kind == "bundled sample":
            names = list(bundled)
            name = st.selectbox("Bundled trace", names, index=names.index("philly-2000") if "philly-2000" in names
                                else 0, key=f"{prefix}_bundled")
            path, fmt = bundled[name]
            trace = load_trace_cached(str(path), fmt, int(limit))
            label = name
        else:
            c1, c2 = st.columns([1, 3])
            fmt = c1.selectbox("Format", list(LOADERS), key=f"{prefix}_fmt")
            upload = c2.file_uploader("Upload a trace file", key=f"{prefix}_upload")
            pasted = st.text_area("…or paste the file's text", key=f"{prefix}_paste", height=120,
                                  placeholder="timestamp,duration,num_gpus,gpu_time,cluster\n"
                                              "2017-10-09 00:01:56,66.0,1,66.0,11cb48")
            if upload is not None:
                text, label = upload.getvalue().decode("utf-8", errors="replace"), upload.name
            elif pasted.strip():
                text, label = pasted, "pasted trace"
            else:
                st.info("Upload a file or paste its text; until then the last loaded trace is used.")
                return ss.get(f"{prefix}_trace")
            trace = load_trace_cached(text if "\n" in text else text + "\n", fmt, int(limit))
    except SpecError as err:
        show_error(err, "trace")
        last = ss.get(f"{prefix}_trace")
        if last is not None:
            st.caption(f"Still using the last good trace: {last.summary()}")
        return last
    if not trace.jobs:
        show_error(SpecError("trace", "no valid job rows; check the format matches the file"), "trace")
        return ss.get(f"{prefix}_trace")
    ss[f"{prefix}_trace"] = trace
    ss[f"{prefix}_trace_label"] = label
    st.caption(trace.summary())
    if trace.skipped:
        shown = "; ".join(f"row {p.row}: {p.reason}" for p in trace.skipped[:5])
        more = f" (and {len(trace.skipped) - 5} more)" if len(trace.skipped) > 5 else ""
        st.warning(md_escape(f"Skipped {len(trace.skipped)} malformed row(s): {shown}{more}. Fix them in the file "
                             "to keep those jobs."), icon=":material/warning:")
    return trace


# --- the scenario: every input of every page as one value (frenzy_core.scenario), saved, loaded and shared ----------
SCENARIO_DIR = ROOT / "sample_scenarios"
SHARE_PARAM = "s"  # the query-string key of the share code: ?s=<base64url>


def sample_scenarios() -> dict[str, Path]:
    """The bundled scenario files, stem -> path (ml-engineer, procurement, teacher)."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.yaml"))}


def _widget(key: str, default):
    """A page's setting: the value remembered for its page (current even while another page is open), else the
    widget's, else `default`."""
    ss = st.session_state
    value = ss.get("_kept", {}).get(key, ss.get(key))
    return default if value is None else value


def _chosen_export(default: str | None) -> str | None:
    """The Plans page's export format when the user chose one other than the training framework's own (None keeps
    the framework's, so visiting the page does not change the scenario)."""
    from frenzy_core.export import FRAMEWORK_EXPORT

    value = _widget("plans_export_format", None)
    if value is None:
        return default
    own = FRAMEWORK_EXPORT.get(training().framework, "megatron")
    return None if value == own else value


def scenario_from_state():
    """The scenario the session holds now: canonical model/training/split/cluster plus every page's settings.
    Widget values that do not validate fall back to the last good scenario's (None if there is none yet)."""
    from pydantic import ValidationError

    from frenzy_core.scenario import PlanGoal, Scenario, SimulationSpec, SplitSpec, WhatIfSpec

    ss = st.session_state
    last = ss.get("scenario_last")
    goal0 = last.plans if last else PlanGoal()
    sim0 = last.simulation if last else SimulationSpec()
    wi0 = last.whatif if last else WhatIfSpec()
    m = model()
    try:
        deadline = float(_widget("plans_deadline_h", goal0.deadline_h or 0.0))
        max_gpus = int(_widget("plans_max_gpus", goal0.max_gpus or 0))
        budget = float(_widget("plans_budget", goal0.budget_usd or 0.0))
        goal = PlanGoal(objective=_widget("plans_objective", goal0.objective),
                        tokens=float(_widget("plans_tokens", goal0.tokens)),
                        method=_widget("plans_method", goal0.method),
                        safety_margin=float(_widget("plans_margin", goal0.safety_margin)),
                        scaling_floor=float(_widget("plans_floor", goal0.scaling_floor)),
                        deadline_h=deadline or None, max_gpus=max_gpus or None, budget_usd=budget or None,
                        export_format=_chosen_export(goal0.export_format))
        kind = _widget("sim_kind", "bundled sample")
        sim = SimulationSpec(trace=_widget("sim_bundled", sim0.trace) if kind == "bundled sample" else sim0.trace,
                             limit_jobs=int(_widget("sim_limit", sim0.limit_jobs)),
                             policies=tuple(_widget("sim_policies", sim0.policies)) or sim0.policies,
                             seeds=int(_widget("sim_seeds", sim0.seeds)))
        wi = WhatIfSpec(budget_usd_per_hour=float(_widget("wi_budget", wi0.budget_usd_per_hour)),
                        policy=_widget("wi_policy", wi0.policy), seeds=int(_widget("wi_seeds", wi0.seeds)))
        p = par()
        scenario = Scenario(name=ss.get("scenario_name") or "my-scenario", user=ss.get("scenario_user", "custom"),
                            description=ss.get("scenario_description", ""),
                            model=m.name if ZOO.get(m.name) == m else m, training=training(),
                            split=SplitSpec.of(p), cluster=cluster(), plans=goal,
                            simulation=sim, whatif=wi)
    except (ValidationError, SpecError, ValueError, TypeError):
        return last
    ss.scenario_last = scenario
    return scenario


# widget keys that pages re-seed from the canonical values when they are missing (the Model & memory page)
_RESEED = ("base_spec", "zoo_pick", "hp_hidden_size", "tr_seq_len")


def apply_scenario(s, source: str) -> None:
    """Make `s` the session's state: canonical values, every page's widgets (now and on their next visit), results
    of the old state dropped."""
    ss = st.session_state
    m = s.model_spec
    ss.model, ss.training, ss.par = m, s.training, s.split.parallelism()
    ss.model_base = m.name if m.name in ZOO else "(config.json)"
    set_cluster(s.cluster, source)
    for key in list(ss.keys()):
        if key.startswith(("hp_", "tr_", "par_")) or key in _RESEED:
            del ss[key]
    g, sim, wi = s.plans, s.simulation, s.whatif
    for key, value in {
        "plans_objective": g.objective, "plans_tokens": float(g.tokens), "plans_method": g.method,
        "plans_margin": float(g.safety_margin), "plans_floor": float(g.scaling_floor),
        "plans_deadline_h": float(g.deadline_h or 0.0), "plans_max_gpus": int(g.max_gpus or 0),
        "plans_budget": float(g.budget_usd or 0.0),
        **({"plans_export_format": g.export_format} if g.export_format else {}),
        "sim_kind": "bundled sample", "sim_bundled": sim.trace, "sim_limit": int(sim.limit_jobs),
        "sim_seeds": int(sim.seeds), "sim_policies": list(sim.policies),
        "wi_kind": "bundled sample", "wi_bundled": sim.trace, "wi_limit": int(sim.limit_jobs),
        "wi_budget": float(wi.budget_usd_per_hour), "wi_policy": wi.policy, "wi_seeds": int(wi.seeds),
    }.items():
        set_widget(key, value)
    for key in ("sim_results", "sim_meta", "wi_results", "wi_meta", "plans_p", "pack_msg"):
        ss.pop(key, None)
    ss.scenario_name, ss.scenario_user, ss.scenario_description = s.name, s.user, s.description
    ss.scenario_last = s
    # the scenario as the session holds it once applied (the same path every later comparison takes): the sidebar
    # names it while the live state still equals it (scenario_label)
    ss.scenario_loaded = scenario_from_state() or s


def share_code() -> str | None:
    """The current scenario's share code, or None when the scenario is too large for a link (or not valid yet)."""
    from frenzy_core.scenario import encode_share

    s = scenario_from_state()
    if s is None:
        return None
    ss = st.session_state
    cached = ss.get("share_cache")
    if cached is not None and cached[0] == s:  # equal scenarios: skip re-encoding a large cluster
        return cached[1]
    try:
        code = encode_share(s)
    except SpecError as err:
        ss.share_error = str(err)
        code = None
    else:
        ss.share_error = None
    ss.share_cache = (s, code)
    return code


def load_share_link() -> bool:
    """Apply the scenario of the URL's ?s= code once per code; True when it was applied. No rerun: a rerun before
    st.navigation would lose the page the URL asked for."""
    from frenzy_core.scenario import decode_share

    ss = st.session_state
    code = st.query_params.get(SHARE_PARAM)
    seen = ss.setdefault("share_seen", set())
    # a code this session wrote or applied before is an old address (the browser may keep it on a page change)
    if not code or code in seen or (ss.get("share_cache") or (None, None))[1] == code:
        return False
    seen.add(code)
    try:
        scenario = decode_share(code)
        apply_scenario(scenario, f"share link ({scenario.name})")
    except Exception as err:  # noqa: BLE001 - a hostile link never replaces the page or the loaded state
        reason = str(err) if isinstance(err, SpecError) else f"{type(err).__name__}: the link is not a scenario"
        ss.share_link_error = md_escape(f"The link's scenario could not be loaded ({reason}); showing the current "
                                        "settings.")
        return False
    ss.share_link_error = None
    return True


def sync_share_link() -> None:
    """Keep ?s= in the address bar equal to the current scenario, so a reload or a copied URL restores it."""
    code = share_code()
    if code:
        # always written: after a page change the browser can show an older ?s= than the server believes it has
        st.query_params[SHARE_PARAM] = code
        st.session_state.setdefault("share_seen", set()).add(code)
