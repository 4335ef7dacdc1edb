"""Scenarios: YAML and share-code round trips, errors that name the field, size limits, the bundled samples, and
`frenzy scenario run` agreeing with a direct rank_plans call."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import pytest

from frenzy_core.cli import main
from frenzy_core.cluster import load_cluster, parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.models import ZOO
from frenzy_core.plans import rank_plans
from frenzy_core.scenario import (
    MAX_SCENARIO_BYTES,
    MAX_SHARE_CHARS,
    Scenario,
    decode_share,
    encode_share,
    load_scenario,
    parse_scenario_yaml,
    scenario_to_yaml,
)
from frenzy_core.training import TrainingSpec

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted((REPO / "sample_scenarios").glob("*.yaml"))
TINY = """
name: tiny
model: gpt2
training: {seq_len: 1024, global_batch: 32, micro_batch: 4, precision: amp}
split: {dp: 2}
cluster:
  name: t
  nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8, count: 2}]
plans: {objective: cost, tokens: 1.0e+9, max_gpus: 8}
"""


def test_three_samples_one_per_user():
    users = {load_scenario(p).user for p in SAMPLES}
    assert users == {"ml-engineer", "procurement", "teacher"} and len(SAMPLES) == 3


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_sample_round_trips_through_yaml_and_the_share_code(path):
    s = load_scenario(path)
    assert parse_scenario_yaml(scenario_to_yaml(s)) == s
    code = encode_share(s)
    assert len(code) <= MAX_SHARE_CHARS and decode_share(code) == s


def test_the_export_format_travels_in_the_scenario_and_the_share_code():
    from frenzy_core.export import FORMATS
    from frenzy_core.scenario import PlanGoal

    s = parse_scenario_yaml(TINY.replace("max_gpus: 8}", "max_gpus: 8, export_format: kubernetes}"))
    assert s.plans.export_format == "kubernetes"
    assert decode_share(encode_share(s)).plans.export_format == "kubernetes"
    assert parse_scenario_yaml(scenario_to_yaml(s)) == s
    assert parse_scenario_yaml(TINY).plans.export_format is None  # left out: the framework's own format
    for fmt in FORMATS:  # the field takes exactly the formats export.py writes
        assert PlanGoal(export_format=fmt).export_format == fmt
    with pytest.raises(SpecError, match="export_format"):
        parse_scenario_yaml(TINY.replace("max_gpus: 8}", "max_gpus: 8, export_format: bash}"))


def test_share_code_is_base64url_of_zlib_json():
    s = parse_scenario_yaml(TINY)
    data = json.loads(zlib.decompress(base64.urlsafe_b64decode(encode_share(s) + "==")))
    assert data["model"] == "gpt2" and data["plans"]["max_gpus"] == 8
    assert data["cluster"]["nodes"] == [{"name": "a", "gpu_type": "A100-80GB", "num_gpus": 8, "count": 2}]


def test_a_10000_node_cluster_stays_a_short_link():
    text = TINY.replace("count: 2", "count: 10000")
    s = parse_scenario_yaml(text)
    assert len(s.cluster.nodes) == 10000
    assert len(encode_share(s)) < 1000 and decode_share(encode_share(s)).cluster == s.cluster


def test_an_edited_model_travels_in_full():
    s = parse_scenario_yaml(TINY)
    edited = s.model_copy(update={"model": ZOO["gpt2"].model_copy(update={"num_layers": 6, "name": "gpt2-edited"})})
    assert decode_share(encode_share(edited)).model_spec.num_layers == 6


@pytest.mark.parametrize(("change", "field"), [
    (("global_batch: 32", "global_batch: -4"), "training.global_batch"),
    (("objective: cost", "objective: fastest"), "plans.objective"),
    (("max_gpus: 8", "max_gpus: 0"), "plans.max_gpus"),
    (("model: gpt2", "model: gpt5"), "model"),
    (("split: {dp: 2}", "split: {dp: 3}"), "split"),
    (("split: {dp: 2}", "split: {dp: 2, cp: 3}"), "split"),  # seq_len 1024 is not a multiple of 2 x cp
    (("split: {dp: 2}", "split: {dp: 2, ep: 2}"), "split"),  # gpt2 has no experts
    (("gpu_type: A100-80GB", "gpu_type: A100-81GB"), "cluster"),
    (("name: tiny", "name: tiny\nsimulation: {policies: [lottery]}"), "simulation.policies"),
    (("name: tiny", "name: tiny\nbogus: 1"), "bogus"),
])
def test_bad_field_is_named(change, field):
    with pytest.raises(SpecError) as err:
        parse_scenario_yaml(TINY.replace(*change), source="s.yaml")
    assert err.value.field.startswith(field), str(err.value)
    assert "s.yaml" in str(err.value)


def test_oversized_yaml_is_refused_with_the_limit():
    with pytest.raises(SpecError) as err:
        parse_scenario_yaml(TINY + "#" * (MAX_SCENARIO_BYTES + 1))
    assert f"{MAX_SCENARIO_BYTES:,}" in str(err.value)


def test_broken_yaml_says_where():
    with pytest.raises(SpecError) as err:
        parse_scenario_yaml("name: [unclosed\n")
    assert err.value.field == "(yaml)" and "line" in str(err.value)


@pytest.mark.parametrize("code", ["not base64 !", "AAAA", "x" * (MAX_SHARE_CHARS + 1),
                                  base64.urlsafe_b64encode(zlib.compress(b"[1, 2]")).decode()])
def test_damaged_share_codes_are_refused_naming_the_link(code):
    with pytest.raises(SpecError) as err:
        decode_share(code)
    assert err.value.field in ("share link", "(top level)")


def test_zip_bomb_share_code_is_refused():
    bomb = base64.urlsafe_b64encode(zlib.compress(b" " * (4 * MAX_SCENARIO_BYTES), 9)).decode().rstrip("=")
    assert len(bomb) < MAX_SHARE_CHARS
    with pytest.raises(SpecError) as err:
        decode_share(bomb)
    assert "expands" in str(err.value)


def test_cluster_given_as_a_path_next_to_the_file(tmp_path):
    (tmp_path / "c.yaml").write_text("name: c\nnodes: [{name: t, gpu_type: T4, num_gpus: 4}]\n")
    f = tmp_path / "s.yaml"
    f.write_text("model: gpt2\ntraining: {seq_len: 1024, global_batch: 8}\ncluster: c.yaml\n")
    assert load_scenario(f).cluster.name == "c"


def test_scenario_run_json_matches_rank_plans(capsys):
    path = REPO / "sample_scenarios" / "ml-engineer.yaml"
    assert main(["scenario", "run", str(path), "--json", "--top", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = load_scenario(path)
    direct = rank_plans(ZOO["llama-3.1-8b"], s.training, load_cluster(REPO / "sample_clusters/modern-mixed.yaml"),
                        objective="time", tokens=2e10, max_gpus=32, deadline_s=72 * 3600.0, scaling_floor=0.5)
    assert [r["label"] for r in out["plans"]["top"]] == [p.label() for p in direct.top(3)]
    assert out["plans"]["count"] == len(direct)
    assert all(r["time_to_train_s"] <= 72 * 3600 and r["num_gpus"] <= 32 for r in out["plans"]["top"])
    assert sum(out["memory"]["breakdown"].values()) == out["memory"]["total_bytes"]


def test_scenario_run_bad_file_exits_2_with_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.replace("global_batch: 32", "global_batch: many"))
    assert main(["scenario", "run", str(bad), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "training.global_batch" in err


def test_scenario_run_simulate_gives_a_summary_per_policy(capsys, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(TINY + "simulation: {limit_jobs: 12, policies: [frenzy, fcfs], seeds: 1}\n")
    assert main(["scenario", "run", str(f), "--json", "--simulate"]) == 0
    out = json.loads(capsys.readouterr().out)
    sim = out["simulation"]
    assert set(sim) == {"frenzy", "fcfs"} and all(v["jobs"] == 12 for v in sim.values())
    # the policy with the higher average is explained against the other, and only it
    worse, better = sorted(sim, key=lambda p: sim[p]["avg_jct_s"], reverse=True)
    if sim[worse]["avg_jct_s"] > sim[better]["avg_jct_s"]:
        assert list(out["simulation_why"]) == [worse]
        assert out["simulation_why"][worse][0].startswith(f"{worse} averages") and f"{better}'s" in \
            out["simulation_why"][worse][0]


def test_default_scenario_holds_a_valid_default_training():
    s = Scenario(cluster=parse_cluster_yaml("nodes: [{name: a, gpu_type: T4, num_gpus: 4}]"))
    assert s.training == TrainingSpec()


def test_a_split_with_cp_vp_ep_and_etp_round_trips_and_is_the_parallelism_memory_uses():
    from frenzy_core.memory import predict_memory
    from frenzy_core.training import Parallelism

    text = TINY.replace("model: gpt2", "model: mixtral-8x7b").replace(
        "training: {seq_len: 1024, global_batch: 32, micro_batch: 4, precision: amp}",
        "training: {seq_len: 4096, global_batch: 32, framework: megatron, recompute: full}").replace(
        "split: {dp: 2}", "split: {dp: 2, tp: 2, pp: 4, cp: 2, vp: 2, ep: 4, etp: 1}")
    s = parse_scenario_yaml(text)
    want = Parallelism(dp=2, tp=2, pp=4, cp=2, vp=2, ep=4, etp=1)
    assert s.split.parallelism() == want
    assert parse_scenario_yaml(scenario_to_yaml(s)) == s and decode_share(encode_share(s)) == s
    # the scenario's memory is the core's at the whole split, not at d x t x p alone
    from frenzy_core.scenario import run_scenario

    out = run_scenario(s)["memory"]
    assert out["total_bytes"] == int(predict_memory(s.model_spec, s.training, want).total_bytes)
    assert (out["cp"], out["vp"], out["ep"], out["etp"]) == (2, 2, 4, 1)
    assert out["total_bytes"] != int(predict_memory(s.model_spec, s.training, Parallelism(dp=2, tp=2, pp=4)).total_bytes)


def test_scenario_sections_accept_their_boundary_values_and_refuse_just_past_them():
    """The validators' edges (survivors of bench/mutation.py on scenario.py): 1 job, a $0 budget and a floor of 1.0
    are valid; a floor of 1.2 is not."""
    from frenzy_core.scenario import PlanGoal, SimulationSpec, WhatIfSpec

    assert SimulationSpec(limit_jobs=1).limit_jobs == 1
    assert WhatIfSpec(budget_usd_per_hour=0.0).budget_usd_per_hour == 0.0
    assert PlanGoal(scaling_floor=1.0).scaling_floor == 1.0
    with pytest.raises(ValueError, match="scaling_floor"):
        PlanGoal(scaling_floor=1.2)
    assert PlanGoal(max_gpus=1).max_gpus == 1  # the smallest positive limits are valid
    assert PlanGoal(deadline_h=0.5).deadline_h == 0.5 and PlanGoal(budget_usd=0.5).budget_usd == 0.5
    for name in ("max_gpus", "deadline_h", "budget_usd"):
        with pytest.raises(ValueError, match=name):
            PlanGoal(**{name: 0})


def test_unknown_policy_names_are_refused_for_the_llm_job_model_and_every_event_policy_is_taken():
    """A scenario's simulation and what-if run the LLM job model (the event engine): they take every policy that
    engine runs (frenzy-elastic too, since it gained an event version) and refuse any other name, naming the field."""
    from frenzy_core.policies import EVENT_POLICIES
    from frenzy_core.scenario import SimulationSpec, WhatIfSpec

    assert {"frenzy", "frenzy-elastic", "frenzy-elastic-srpt"} <= set(EVENT_POLICIES)
    assert SimulationSpec(policies=("frenzy-elastic", "sia")).policies == ("frenzy-elastic", "sia")
    assert WhatIfSpec(policy="frenzy-elastic-srpt").policy == "frenzy-elastic-srpt"
    with pytest.raises(ValueError, match="LLM job model"):
        SimulationSpec(policies=("nope",))
    with pytest.raises(ValueError, match="LLM job model"):
        WhatIfSpec(policy="nope")
    assert WhatIfSpec(policy="sia").policy == "sia"


def test_a_link_carries_the_training_fields_set_and_decodes_them_back():
    from frenzy_core.training import TrainingSpec

    training = TrainingSpec(framework="megatron", precision="bf16-master", distributed_optimizer=True,
                            fp8_linears=True, fp8_params=True, bf16_grad_reduce=True, seq_len=4096)
    s = Scenario(cluster=parse_cluster_yaml("nodes: [{name: a, gpu_type: H100-80GB, num_gpus: 8}]"),
                 training=training)
    code = encode_share(s)
    assert decode_share(code) == s
    carried = json.loads(zlib.decompress(base64.urlsafe_b64decode(code + "=" * (-len(code) % 4))))["training"]
    assert carried == {"framework": "megatron", "distributed_optimizer": True, "fp8_linears": True, "fp8_params": True,
                       "bf16_grad_reduce": True, "seq_len": 4096}  # bf16-master is the default precision


@pytest.mark.parametrize("margin, ok", [(0.0, True), (0.99, True), (1.0, False), (1.2, False), (-0.01, False)])
def test_a_plans_safety_margin_is_a_fraction_below_one(margin, ok):
    # kills the mutation-seed-1 survivor `safety_margin < 1.0` -> `< 1.5` in scenario.PlanGoal._check (2026-12-03)
    from frenzy_core.scenario import PlanGoal

    if ok:
        assert PlanGoal(safety_margin=margin).safety_margin == margin
        return
    with pytest.raises(ValueError, match="safety_margin must be in"):
        PlanGoal(safety_margin=margin)
