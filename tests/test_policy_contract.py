"""The registry contract (issue 22, item 5 "a policy is one module"): every registered policy brings its own
`Options`, colour and note, runs on a tiny LLM workload in the event engine and on a tiny sia-apps workload in the
round engine (or says why it has no round version), is deterministic per seed and never over-commits GPUs; and the
old flat SimOptions keys still reach the policies that own them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frenzy_core import policies
from frenzy_core.cluster import load_cluster, parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.policies import REGISTRY
from frenzy_core.rounds import AppJob, layouts_of, simulate_rounds
from frenzy_core.simulate import SimOptions, legacy_key_owners, simulate
from frenzy_core.traces import TraceJob
from frenzy_core.workload import AnalyticEstimator

REPO = Path(__file__).resolve().parents[1]
CLUSTER = parse_cluster_yaml("""
name: mixed
nodes:
  - {name: a, gpu_type: A100-80GB, num_gpus: 4, count: 2}
  - {name: t, gpu_type: T4, num_gpus: 4, count: 2}
""")
# arrivals faster than completions, so jobs queue, and the preemptive and elastic policies move some of them
LLM_JOBS = [TraceJob(f"j{i}", 120.0 * i, n, 900.0 + 300 * i) for i, n in enumerate([1, 4, 8, 2, 1, 4])]
SIA64 = load_cluster(REPO / "sample_clusters" / "sia-64.yaml")
APP_JOBS = [AppJob(f"bert-{i}", 60.0 * i, "bert", 4, 96) for i in range(2)]
OPTS = SimOptions(estimator=AnalyticEstimator())

# The policies with no round-engine (sia-apps) version, and why; the registry says the same (`no_round_engine`):
# - fcfs: its user-count baseline on that job model is gavel (the Sia artifact's baseline, the user's GPU count too);
# - sia: there Sia runs as published (sia-real); this ILP reads the LLM job model's plan table, which it has not.
NO_ROUND_ENGINE = {"fcfs", "sia"}
# the charts' colours before the registry owned them (pages/charts.py), so charts look the same; frenzy-elastic-srpt
# was drawn in frenzy-elastic's by an inherited class attribute, and has its table colour now
COLOURS = {"frenzy": "#1565c0", "frenzy-share": "#00838f", "frenzy-eft": "#6a1b9a", "frenzy-srpt": "#ad1457",
           "frenzy-las": "#283593", "fcfs": "#ef6c00", "sia": "#2e7d32", "sia-real": "#9e9d24", "gavel": "#5d4037",
           "frenzy-elastic": "#0b7a75", "frenzy-elastic-srpt": "#7b1fa2"}
# where each old flat SimOptions knob lives now: (policy, its Options field), over the whole registry
LEGACY = {
    "frenzy_objective": {("frenzy", "objective")},
    "sia_round_s": {(p, "round_s") for p in ("sia", "sia-real", "frenzy-elastic", "frenzy-elastic-srpt")},
    "sia_max_jobs": {(p, "max_jobs") for p in ("sia", "sia-real", "frenzy-elastic", "frenzy-elastic-srpt")},
    "sia_max_gpus": {(p, "max_gpus") for p in ("sia", "sia-real", "frenzy-elastic", "frenzy-elastic-srpt")},
    "sia_node_limit": {(p, "node_limit") for p in ("sia", "sia-real", "frenzy-elastic", "frenzy-elastic-srpt")},
    "sia_mip_gap": {(p, "mip_gap") for p in ("sia", "sia-real", "frenzy-elastic", "frenzy-elastic-srpt")},
    "sia_restart_penalty": {("sia", "restart_penalty")},
    "preempt_min_run_s": {(p, "preempt_min_run_s") for p in ("frenzy-srpt", "frenzy-las", "frenzy-elastic",
                                                             "frenzy-elastic-srpt")},
    "replan_min_gain": {("frenzy-srpt", "replan_min_gain"), ("frenzy-las", "replan_min_gain")},
}
# a value other than the default for each old knob
LEGACY_VALUES = {"frenzy_objective": "time", "sia_round_s": 240.0, "sia_max_jobs": 8, "sia_max_gpus": 4,
                 "sia_node_limit": 50, "sia_mip_gap": 1e-3, "sia_restart_penalty": 0.2, "preempt_min_run_s": 300.0,
                 "replan_min_gain": 0.5}
ALL = sorted(REGISTRY)
ROUND = sorted(policies.ROUND_POLICIES)


# --- what every policy module brings ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_every_policy_has_frozen_documented_options_with_defaults(name):
    cls = REGISTRY[name]
    assert cls.name == name  # the registry key is the class's name: SimOptions.policy_options is keyed by it
    opts = policies.options_for(name)
    assert dataclasses.is_dataclass(cls.Options) and isinstance(opts, cls.Options)
    assert cls.Options.__dataclass_params__.frozen and (cls.Options.__doc__ or "").strip()
    for f in dataclasses.fields(cls.Options):
        assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, f.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(opts, f.name, getattr(opts, f.name))
    assert OPTS.options_for(name) == opts  # no overrides: the defaults


@pytest.mark.parametrize("name", ALL)
def test_every_policy_has_its_colour_and_a_one_paragraph_note(name):
    assert re.fullmatch(r"#[0-9a-f]{6}", policies.colour(name))
    text = policies.note(name)
    assert 100 < len(text) < 600 and "\n" not in text and text.endswith(".")


def test_colours_are_distinct_and_the_charts_keep_them():
    assert {n: policies.colour(n) for n in REGISTRY} == COLOURS
    from pages import charts

    assert all(charts.colour(n) == c for n, c in COLOURS.items())


def test_the_registry_says_which_policies_have_no_round_engine_and_why():
    assert {n for n in REGISTRY if REGISTRY[n].round_allocator is None} == NO_ROUND_ENGINE
    for name in ALL:
        why = policies.no_round_engine(name)
        assert bool(why) == (name in NO_ROUND_ENGINE)
        assert policies.engines(name) == (("event",) if name in NO_ROUND_ENGINE else ("event", "round"))
    with pytest.raises(SpecError, match="sia-apps version .*sia-real"):
        simulate_rounds(APP_JOBS, SIA64, "sia")


# --- the event engine (LLM job model) ------------------------------------------------------------------------------
def _event(name: str, seed: int = 1):
    return simulate(LLM_JOBS, CLUSTER, name, seed=seed, options=OPTS)


@pytest.mark.parametrize("name", ALL)
def test_every_policy_runs_the_tiny_llm_workload_deterministically_without_over_commit(name):
    a, b = _event(name), _event(name)
    pd.testing.assert_frame_equal(a.jobs_frame(), b.jobs_frame())
    assert a.policy_stats.keys() == b.policy_stats.keys()
    assert a.completed == len(LLM_JOBS) and (a.jobs["state"] == "done").all()
    cap = np.array([8, 8])  # A100-80GB, T4: busy GPUs per type never above the type's at any instant
    assert (a.util_busy <= cap).all() and (a.util_busy >= 0).all() and a.util_busy[-1].sum() == 0
    assert a.jobs["gpu_hours"].sum() * 3600.0 <= CLUSTER.total_gpus * a.makespan_s * (1 + 1e-9)


# --- the round engine (sia-apps job model) -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ROUND)
def test_every_round_policy_runs_the_tiny_sia_apps_workload_deterministically_without_over_commit(name):
    a, b = simulate_rounds(APP_JOBS, SIA64, name), simulate_rounds(APP_JOBS, SIA64, name)
    pd.testing.assert_frame_equal(a.jobs_frame(), b.jobs_frame())
    assert a.completed == len(APP_JOBS)
    cap = np.array([lay.total_gpus for lay in layouts_of(SIA64)])  # the engine also refuses any node over-committed
    assert (a.util_busy <= cap).all() and (a.util_busy >= 0).all()


# --- SimOptions: the simulator's knobs, the policies' overrides, the old flat keys ----------------------------------
def test_each_old_flat_key_maps_onto_exactly_the_policies_that_own_it():
    assert {k: set(v) for k, v in legacy_key_owners().items()} == LEGACY
    for key, owners in LEGACY.items():
        opts = SimOptions(**{key: LEGACY_VALUES[key]})
        for name in REGISTRY:
            got = opts.options_for(name)
            for policy, field in owners:
                if policy == name:
                    assert getattr(got, field) == LEGACY_VALUES[key], (key, name)
            if name not in {p for p, _ in owners}:
                assert got == policies.options_for(name), (key, name)


def test_old_keys_work_through_dataclasses_replace_and_win_over_policy_options():
    opts = SimOptions(policy_options={"sia": {"round_s": 120.0, "max_jobs": 9}})
    moved = dataclasses.replace(opts, sia_round_s=300.0, sia_every_round=True)
    assert moved.options_for("sia").round_s == 300.0 and moved.options_for("sia").max_jobs == 9
    assert moved.options_for("sia-real").round_s == 300.0 and moved.every_round and moved.sia_every_round
    assert dataclasses.replace(moved, backfill_window=8).policy_options == moved.policy_options


def test_policy_options_take_an_options_instance_or_a_dict_of_fields():
    from frenzy_core.policies import sia

    a = SimOptions(policy_options={"sia": sia.Options(round_s=120.0)})
    b = SimOptions(policy_options={"sia": {"round_s": 120.0}})
    assert a.options_for("sia") == b.options_for("sia") == sia.Options(round_s=120.0)
    assert hash(a) == hash(b) and a == b
    assert SimOptions(sia_round_s=120.0).options_for("sia") == a.options_for("sia")
    # an Options instance changes only the fields it sets: a variant's own defaults stay (srpt=True here)
    from frenzy_core.policies import frenzy_elastic

    srpt = SimOptions(policy_options={"frenzy-elastic-srpt": frenzy_elastic.Options(efficiency_floor=0.2)})
    got = srpt.options_for("frenzy-elastic-srpt")
    assert got.srpt and got.efficiency_floor == 0.2


def test_unknown_keys_are_errors_that_name_them_and_list_the_valid_ones():
    with pytest.raises(SpecError, match="sia_rounds_s: not a SimOptions knob.*backfill_window.*sia_round_s"):
        SimOptions(sia_rounds_s=60.0)
    with pytest.raises(SpecError, match=r"policy_options\.sia\.round: not a knob of sia; its knobs: round_s"):
        SimOptions(policy_options={"sia": {"round": 60.0}})
    with pytest.raises(SpecError, match="policy_options: unknown policy 'siaa'"):
        SimOptions(policy_options={"siaa": {}})
    with pytest.raises(SpecError, match="sia_node_limit: must be >= 1"):  # validated once, named as given
        SimOptions(sia_node_limit=0)
    with pytest.raises(SpecError, match=r"policy_options\.frenzy\.objective: unknown objective"):
        SimOptions(policy_options={"frenzy": {"objective": "speed"}})
    with pytest.raises(AttributeError, match="sia_round_s is a policy knob now: .*sia \\(Options.round_s\\)"):
        _ = SimOptions().sia_round_s


def test_a_policys_options_change_its_run_as_the_old_key_did():
    """The same override through the old key and through policy_options gives the same run; and it is used."""
    busy = [TraceJob(f"b{i}", 30.0 * i, 4, 3000.0) for i in range(6)]
    old = simulate(busy, CLUSTER, "sia", options=SimOptions(estimator=AnalyticEstimator(), sia_round_s=600.0))
    new = simulate(busy, CLUSTER, "sia", options=SimOptions(estimator=AnalyticEstimator(),
                                                            policy_options={"sia": {"round_s": 600.0}}))
    base = simulate(busy, CLUSTER, "sia", options=OPTS)
    pd.testing.assert_frame_equal(old.jobs_frame(), new.jobs_frame())
    assert not old.jobs_frame().equals(base.jobs_frame())


def test_a_policy_built_by_hand_takes_its_options_directly():
    from frenzy_core.packing import ClusterIndex
    from frenzy_core.policies.base import PolicyContext
    from frenzy_core.policies.frenzy import Options
    from frenzy_core.workload import PlanTable, map_trace

    est = AnalyticEstimator()
    ctx = PolicyContext(cluster=CLUSTER, index=ClusterIndex.from_cluster(CLUSTER),
                        workload=map_trace(LLM_JOBS, CLUSTER, 0, estimator=est), table=PlanTable(est, CLUSTER),
                        estimator=est, options=OPTS)
    assert REGISTRY["frenzy"](ctx).objective() == "gpu-hours"
    assert REGISTRY["frenzy"](ctx, Options(objective="time")).objective() == "time"
    assert REGISTRY["frenzy-share"](ctx).objective() == "time"  # the variant's ranking, whatever the options
