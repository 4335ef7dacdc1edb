"""A scenario: everything one planning question needs, as one typed value that the app, the CLI and a share link hold.

Model (a zoo name or the full spec), training setup (incl. the framework where TrainingSpec has one), the split,
the cluster (inline, nodes grouped with `count`), the plan objective with its constraints and token budget, the
simulation's trace, policies and seeds, and the GPU-mix budget. Saved and loaded as YAML (at most
`MAX_SCENARIO_BYTES`), and as a share code: base64url of the zlib-compressed canonical JSON (at most
`MAX_SHARE_CHARS` characters), so a URL query string carries the whole state.

A scenario file looks like::

    name: 7B on our lab cluster
    user: ml-engineer
    model: llama-2-7b
    training: {seq_len: 2048, global_batch: 512, precision: bf16-master, zero_stage: 1}
    split: {dp: 2, tp: 4, pp: 1}          # also cp, vp, ep and etp (Parallelism's fields)
    cluster:
      name: lab
      nodes: [{name: h100, gpu_type: H100-80GB, num_gpus: 8, count: 4}]
    plans: {objective: cost, tokens: 2.0e+11, deadline_h: 480, max_gpus: 64}
    simulation: {trace: philly-2000, limit_jobs: 200, policies: [frenzy, fcfs], seeds: 5}
    whatif: {budget_usd_per_hour: 150}
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
import zlib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from frenzy_core.cluster import Cluster, bundled_clusters, cluster_from_dict, load_cluster
from frenzy_core.errors import SpecError, from_validation_error
from frenzy_core.limits import (
    DEFAULT_SAFETY_MARGIN,
    DEFAULT_TOKENS,
    MAX_SCENARIO_JOBS,
    MAX_SCENARIO_SEEDS,
    MAX_SHARE_CHARS,
    MAX_SPEC_FILE_BYTES,
    MAX_TOKENS,
    MIN_TOKENS,
    Name,
    load_json,
    load_yaml,
    read_user_file,
    short_repr,
)
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.plans import DEFAULT_SCALING_FLOOR
from frenzy_core.training import Parallelism, TrainingSpec, check_parallelism

MAX_SCENARIO_BYTES = MAX_SPEC_FILE_BYTES  # the one limit for spec-like files (limits.py)
USERS = ("ml-engineer", "procurement", "teacher", "custom")
_SHARE_ALPHABET = re.compile(r"^[A-Za-z0-9_-]*$")


class PlanGoal(BaseModel):
    """How plans are ranked and which are allowed (frenzy_core.plans.rank_plans)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    objective: Literal["time", "gpu-hours", "cost", "gpus"] = "time"  # see plans.OBJECTIVES
    tokens: float = DEFAULT_TOKENS  # token budget to train for
    method: Literal["detailed", "paper"] = "detailed"  # memory model
    safety_margin: float = DEFAULT_SAFETY_MARGIN  # fraction of each GPU's memory kept free
    scaling_floor: float = DEFAULT_SCALING_FLOOR  # added GPUs must buy this share of linear speed-up (0 = off)
    max_gpus: int | None = None  # at most this many GPUs
    deadline_h: float | None = None  # train the token budget within this many hours
    budget_usd: float | None = None  # spend at most this on the run (catalog prices)
    # the launch file the Plans page exports (frenzy_core.export.FORMATS); None: the training framework's own
    export_format: Literal["megatron", "deepspeed", "torchtitan", "accelerate", "slurm", "kubernetes"] | None = None

    @model_validator(mode="after")
    def _check(self) -> PlanGoal:
        if not MIN_TOKENS <= self.tokens <= MAX_TOKENS:
            raise ValueError(f"tokens must be between {MIN_TOKENS:g} and {MAX_TOKENS:g}, got {self.tokens:g}")
        if not 0.0 <= self.safety_margin < 1.0:
            raise ValueError(f"safety_margin must be in [0, 1), got {self.safety_margin}")
        if not 0.0 <= self.scaling_floor <= 1.0:
            raise ValueError(f"scaling_floor must be in [0, 1] (0 = off), got {self.scaling_floor}")
        for name in ("max_gpus", "deadline_h", "budget_usd"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be positive or left out, got {v}")
        return self

    def rank_kwargs(self) -> dict:
        """Keyword arguments for plans.rank_plans."""
        return {"objective": self.objective, "tokens": self.tokens, "method": self.method,
                "safety_margin": self.safety_margin, "scaling_floor": self.scaling_floor, "max_gpus": self.max_gpus,
                "deadline_s": None if self.deadline_h is None else self.deadline_h * 3600.0,
                "budget_usd": self.budget_usd}


class SimulationSpec(BaseModel):
    """The workload and policies of a trace-driven simulation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace: str = "philly-2000"  # a bundled trace (frenzy_core.traces.bundled_traces)
    limit_jobs: int = 200  # the first N jobs by arrival
    policies: tuple[str, ...] = ("frenzy", "frenzy-eft", "fcfs")  # keys of frenzy_core.policies.REGISTRY
    seeds: int = 3  # independent mappings of the trace; confidence intervals are over seeds

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from frenzy_core.policies import EVENT_POLICIES

        unknown = [p for p in v if p not in EVENT_POLICIES]
        if unknown or not v:
            raise ValueError(f"unknown policy {unknown[0]!r} for the LLM job model; choose from "
                             f"{', '.join(EVENT_POLICIES)}" if unknown else "list at least one policy")
        return v

    @field_validator("trace")
    @classmethod
    def _known_trace(cls, v: str) -> str:
        from frenzy_core.traces import bundled_traces

        if v not in bundled_traces():
            raise ValueError(f"unknown bundled trace {v!r}; choose from {', '.join(bundled_traces())}")
        return v

    @model_validator(mode="after")
    def _check(self) -> SimulationSpec:
        if not 1 <= self.limit_jobs <= MAX_SCENARIO_JOBS:
            raise ValueError(f"limit_jobs must be between 1 and {MAX_SCENARIO_JOBS:,}, got {self.limit_jobs}")
        if not 1 <= self.seeds <= MAX_SCENARIO_SEEDS:
            raise ValueError(f"seeds must be between 1 and {MAX_SCENARIO_SEEDS}, got {self.seeds}")
        return self


class WhatIfSpec(BaseModel):
    """The GPU-mix what-if's inputs that travel with a scenario."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budget_usd_per_hour: float = 100.0  # what the additions may cost per hour (catalog prices)
    policy: str = "frenzy-eft"  # the policy every candidate runs
    seeds: int = 5  # seeds per candidate

    @model_validator(mode="after")
    def _check(self) -> WhatIfSpec:
        if not 0 <= self.budget_usd_per_hour <= 1e7:
            raise ValueError(f"budget_usd_per_hour must be between 0 and 1e7, got {self.budget_usd_per_hour}")
        if not 1 <= self.seeds <= MAX_SCENARIO_SEEDS:
            raise ValueError(f"seeds must be between 1 and {MAX_SCENARIO_SEEDS}, got {self.seeds}")
        from frenzy_core.policies import EVENT_POLICIES

        if self.policy not in EVENT_POLICIES:
            raise ValueError(f"policy {short_repr(self.policy)} is not a policy of the LLM job model; choose from "
                             f"{', '.join(EVENT_POLICIES)}")
        return self


class SplitSpec(BaseModel):
    """The split the Model & memory page shows: d x t x p, and the cp / vp / ep / etp of `Parallelism`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1  # context-parallel ranks
    vp: int = 1  # interleaved pipeline chunks per rank
    ep: int = 1  # expert-parallel ranks (MoE)
    etp: int = 0  # expert tensor parallelism; 0 = tp
    first_stage_layers: int = 0  # layers on the first pipeline stage; 0 = an even split (Megatron's uneven stages)
    last_stage_layers: int = 0  # layers on the last pipeline stage; 0 = an even split

    def parallelism(self) -> Parallelism:
        return Parallelism(**self.model_dump())

    @classmethod
    def of(cls, par: Parallelism) -> SplitSpec:
        return cls(**dataclasses.asdict(par))


class Scenario(BaseModel):
    """One planning question, end to end. `model` is a zoo name or a full ModelSpec; `cluster` is inline."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1  # the file format's version
    name: Name = "scenario"  # shown in the app and the CLI, names downloads: limits.check_name's alphabet
    user: Literal["ml-engineer", "procurement", "teacher", "custom"] = "custom"  # who it is for
    description: str = ""  # free text (the title); shown escaped
    model: str | ModelSpec = "llama-2-7b"
    training: TrainingSpec = TrainingSpec()
    split: SplitSpec = SplitSpec()
    cluster: Cluster
    plans: PlanGoal = PlanGoal()
    simulation: SimulationSpec = SimulationSpec()
    whatif: WhatIfSpec = WhatIfSpec()

    @field_validator("model")
    @classmethod
    def _known_model(cls, v):
        if isinstance(v, str) and v not in ZOO:
            raise ValueError(f"unknown zoo model {v!r}; choose one of {', '.join(ZOO)} or give the full spec")
        return v

    @model_validator(mode="after")
    def _check_split(self) -> Scenario:
        try:
            check_parallelism(self.model_spec, self.training, self.split.parallelism())
        except SpecError as err:
            raise ValueError(f"split: {err}") from None
        return self

    @property
    def model_spec(self) -> ModelSpec:
        return ZOO[self.model] if isinstance(self.model, str) else self.model


# --- (de)serialisation --------------------------------------------------------------------------------------------
def grouped_cluster_data(cluster: Cluster) -> dict:
    """The cluster as YAML-ready data with runs of identical nodes named base-0, base-1, ... folded into `count`
    (cluster.cluster_from_dict expands it back to the same cluster).

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> grouped_cluster_data(parse_cluster_yaml("nodes: [{name: a, gpu_type: T4, num_gpus: 4, count: 3}]"))["nodes"]
    [{'name': 'a', 'gpu_type': 'T4', 'num_gpus': 4, 'count': 3}]
    """
    groups: list[dict] = []
    for node in cluster.nodes:
        fields = node.model_dump(exclude_defaults=True) | {"gpu_type": node.gpu_type, "num_gpus": node.num_gpus}
        base, _, idx = node.name.rpartition("-")
        last = groups[-1] if groups else None
        same = last is not None and {k: v for k, v in last.items() if k not in ("name", "count")} == \
            {k: v for k, v in fields.items() if k != "name"}
        if same and "count" in last and base == last["name"] and idx == str(last["count"]):
            last["count"] += 1
        elif base and idx == "0":
            groups.append({**fields, "name": base, "count": 1})
        else:
            groups.append(fields)
    for g in groups:
        if g.get("count") == 1:  # a lone `x-0` stays a node named x-0
            g.pop("count")
            g["name"] = f"{g['name']}-0"
    data: dict = {"name": cluster.name}
    if cluster.description:
        data["description"] = cluster.description
    if cluster.gpu_types:
        data["gpu_types"] = [g.model_dump() for g in cluster.gpu_types]
    data["nodes"] = [{"name": g.pop("name"), **g} for g in groups]
    return data


def scenario_to_data(s: Scenario) -> dict:
    """Plain data (canonical: defaults spelled out, the cluster in node groups, a zoo model by name)."""
    data = s.model_dump(mode="json", exclude={"cluster", "model"})
    model = s.model
    if isinstance(model, ModelSpec) and ZOO.get(model.name) == model:
        model = model.name
    data["model"] = model if isinstance(model, str) else model.model_dump(mode="json")
    data["cluster"] = grouped_cluster_data(s.cluster)
    order = ["version", "name", "user", "description", "model", "training", "split", "cluster", "plans",
             "simulation", "whatif"]
    return {k: data[k] for k in order}


def scenario_from_data(data, source: str = "scenario", base_dir: Path | None = None) -> Scenario:
    """Validate parsed YAML/JSON into a Scenario; errors name the field (e.g. `training.global_batch`).

    `cluster` is inline (a cluster YAML mapping) or the name of a bundled cluster (`cluster.bundled_clusters`). Only
    with `base_dir` (the CLI reading the user's own scenario file) may it also be a path to a cluster YAML, relative
    to `base_dir`; a share link, a pasted or an uploaded scenario never makes the server read a path.
    """
    if not isinstance(data, dict):
        raise SpecError("(top level)", "a scenario must be a mapping with at least `cluster`", source)
    data = dict(data)
    if "cluster" not in data:
        raise SpecError("cluster", "missing; give the cluster inline (name, nodes) or the name of a bundled cluster",
                        source)
    raw = data["cluster"]
    if isinstance(raw, str):
        data["cluster"] = _named_cluster(raw, source, base_dir)
    elif isinstance(raw, dict):
        try:
            data["cluster"] = cluster_from_dict(raw, source=f"{source}: cluster")
        except SpecError as err:
            raise SpecError(f"cluster.{err.field}", err.reason, source) from None
    else:
        raise SpecError("cluster", "must be a mapping (name, nodes) or the name of a bundled cluster", source)
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        e = from_validation_error(err, fields=tuple(Scenario.model_fields))
        field = e.field
        sub = _SECTIONS.get(field)
        lead = re.match(r"([a-z_]+)", e.reason)
        if sub is not None and lead and lead.group(1) in sub.model_fields:  # a section's own validator: name the key
            field = f"{field}.{lead.group(1)}"
        raise SpecError(field, e.reason, source) from None


def _named_cluster(raw: str, source: str, base_dir: Path | None) -> Cluster:
    """A cluster named by a string: a bundled cluster, or (CLI only, `base_dir` set) the user's own file."""
    bundled = bundled_clusters()
    if raw in bundled:
        return load_cluster(bundled[raw])
    if base_dir is None:
        raise SpecError("cluster", f"{short_repr(raw)} is not a bundled cluster ({', '.join(bundled)}); a shared, "
                        "pasted or uploaded scenario names a bundled cluster or carries its nodes inline, and no "
                        "path is read", source)
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    return load_cluster(path)


_SECTIONS: dict[str, type[BaseModel]] = {"training": TrainingSpec, "plans": PlanGoal, "simulation": SimulationSpec,
                                         "whatif": WhatIfSpec, "split": SplitSpec, "model": ModelSpec}


def scenario_to_yaml(s: Scenario) -> str:
    return yaml.safe_dump(scenario_to_data(s), sort_keys=False, width=120)


def parse_scenario_yaml(text: str, source: str = "scenario", base_dir: Path | None = None) -> Scenario:
    """A scenario from YAML text (`limits.load_yaml`); too large, not YAML, or a bad field each raise a SpecError."""
    return scenario_from_data(load_yaml(text, "(yaml)", source, limit=MAX_SCENARIO_BYTES), source, base_dir)


def load_scenario(path: str | Path) -> Scenario:
    """Read the user's own scenario YAML file (a regular file, size-checked); a cluster path resolves next to it."""
    p = Path(path)
    return parse_scenario_yaml(read_user_file(p, "scenario", "a scenario YAML file", MAX_SCENARIO_BYTES),
                               source=p.name, base_dir=p.parent)


def _share_data(s: Scenario) -> dict:
    """`scenario_to_data` without the training fields left at their defaults: a link carries what the user set, so
    every switch a release adds does not lengthen every link (decoding fills the defaults back in)."""
    data = scenario_to_data(s)
    defaults = TrainingSpec.model_construct().model_dump(mode="json")  # as the data holds them (tuples as lists)
    data["training"] = {k: v for k, v in data["training"].items() if k not in defaults or v != defaults[k]}
    return data


def encode_share(s: Scenario) -> str:
    """The share code: base64url (no padding) of zlib(canonical JSON). Raises when over MAX_SHARE_CHARS.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> s = Scenario(cluster=parse_cluster_yaml("nodes: [{name: a, gpu_type: T4, num_gpus: 4, count: 2}]"))
    >>> decode_share(encode_share(s)) == s
    True
    """
    raw = json.dumps(_share_data(s), sort_keys=True, separators=(",", ":")).encode()
    code = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
    if len(code) > MAX_SHARE_CHARS:
        raise SpecError("scenario", f"is {len(code):,} characters as a link, over the {MAX_SHARE_CHARS:,} limit; "
                        "download the YAML and share the file instead")
    return code


def decode_share(code: str) -> Scenario:
    """The scenario a share code holds; a damaged or oversized code raises a SpecError naming `share link`."""
    field = "share link"
    if len(code) > MAX_SHARE_CHARS:
        raise SpecError(field, f"{len(code):,} characters is over the {MAX_SHARE_CHARS:,} limit")
    if not _SHARE_ALPHABET.match(code):
        raise SpecError(field, "contains characters outside base64url (A-Z a-z 0-9 - _); copy the whole link again")
    try:
        packed = base64.urlsafe_b64decode(code + "=" * (-len(code) % 4))
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, MAX_SCENARIO_BYTES)
        if inflater.unconsumed_tail:
            raise SpecError(field, f"expands past {MAX_SCENARIO_BYTES:,} bytes")
        data = load_json(raw, field, limit=MAX_SCENARIO_BYTES)
    except (binascii.Error, zlib.error, ValueError, UnicodeDecodeError) as err:
        if isinstance(err, SpecError):
            raise
        raise SpecError(field, "is damaged or truncated; copy the whole link again") from None
    return scenario_from_data(data, source=field)


# --- running ------------------------------------------------------------------------------------------------------
def _plan_row(p) -> dict:
    return {**p.as_dict(), "label": p.label(), "memory_bytes": int(p.memory_bytes)}


def run_scenario(s: Scenario, *, top: int = 5, simulate: bool = False) -> dict:
    """What the app shows for a scenario, as plain data: memory at the split, ranked plans and, with `simulate`,
    the simulation summary per policy.

    Returns {"scenario", "model", "cluster", "memory": {"total_bytes", "peak_phase", "breakdown"},
    "plans": {"count", "top", "best_per_type", "why_top", "ranking", "dropped", "explanation"},
    "simulation": {policy: summary} and "simulation_why": {policy: sentences} against the lowest average JCT
    (`comparison.explain_results`; both only with simulate=True)}.
    """
    from frenzy_core.memory import predict_memory
    from frenzy_core.plans import rank_plans

    model = s.model_spec
    mem = predict_memory(model, s.training, s.split.parallelism(), method=s.plans.method)
    ranked = rank_plans(model, s.training, s.cluster, **s.plans.rank_kwargs())
    out: dict = {
        "scenario": s.name, "user": s.user, "model": model.name, "cluster": s.cluster.name,
        "memory": {**s.split.model_dump(), "total_bytes": int(mem.total_bytes),
                   "peak_phase": mem.peak_phase, "breakdown": {k: int(v) for k, v in mem.components().items()}},
        "plans": {"objective": s.plans.objective, "count": len(ranked),
                  "top": [_plan_row(p) for p in ranked.top(top)],
                  "best_per_type": [_plan_row(p) for p in ranked.best_per_type()],
                  "why_top": ranked.why_top, "ranking": ranked.ranking_text, "dropped": ranked.dropped,
                  "explanation": ranked.explanation},
    }
    if simulate:
        from frenzy_core.comparison import explain_results
        from frenzy_core.simulate import SimOptions, simulate_seeds
        from frenzy_core.traces import bundled_traces, load_trace

        path, fmt = bundled_traces()[s.simulation.trace]
        trace = load_trace(path, fmt, limit=s.simulation.limit_jobs)
        runs = {policy: simulate_seeds(trace, s.cluster, policy, seeds=range(s.simulation.seeds),
                                       options=SimOptions())
                for policy in s.simulation.policies}
        out["simulation"] = {policy: r.summary_dict() for policy, r in runs.items()}
        out["simulation_why"] = explain_results(runs)
    return out

