"""frenzy_core.frameworks: one contract over every registered stack, and a few values worked by hand."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from frenzy_core import frameworks
from frenzy_core.cli import build_parser
from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.export import FORMATS, FRAMEWORK_EXPORT, export_plan
from frenzy_core.frameworks import FRAMEWORKS, KNOWN, SWITCH_OWNERS, Framework, get, switch_owner
from frenzy_core.memory import effective_zero_stage
from frenzy_core.models import ModelSpec
from frenzy_core.perf import comm_overlaps
from frenzy_core.plans import (
    context_parallel_sizes,
    ep_allowed,
    expert_parallel_sizes,
    pipeline_layouts,
    rank_plans,
    virtual_pipeline_sizes,
)
from frenzy_core.recipes import RECIPES, run_recipe
from frenzy_core.training import FrameworkName, TrainingSpec, make_training

NAMES = list(FRAMEWORKS)
REPO = Path(__file__).resolve().parents[1]
# 6 rotary layers (p = 4 needs uneven stages: 6 + 2 = 8 = 4 x 2), 8 experts; small enough to rank in milliseconds
TINY = ModelSpec(name="tiny-rope", vocab_size=1024, hidden_size=128, num_layers=6, num_heads=4, max_positions=65536,
                 position_kind="rotary")
TINY_MOE = TINY.model_copy(update={"name": "tiny-rope-moe", "num_experts": 8, "moe_top_k": 2, "ffn_size": 256})
SWITCH_ON = {"compile": True, "moe_grouped_gemm": True, "reduce_bucket_size": 1000,
             "stage3_max_live_parameters": 1000, "stage3_max_reuse_distance": 1000, "fp8_params": True,
             "bf16_grad_reduce": True, "param_remainders": True, "recompute_modules": ("layernorm",)}
# what a switch needs beside it to be accepted by its owner (fp8 weights: fp8 linears and the distributed optimizer)
SWITCH_NEEDS = {"fp8_params": {"fp8_linears": True, "distributed_optimizer": True},
                "param_remainders": {"distributed_optimizer": True}}


def _spec(name: str, **kw) -> TrainingSpec:
    """A TrainingSpec the stack accepts: its own default precision unless given."""
    return TrainingSpec(**{"framework": name, "precision": FRAMEWORKS[name].default_precision, **kw})


def _accepted(name: str, **kw) -> bool:
    try:
        _spec(name, **kw)
    except ValueError:  # pydantic's ValidationError
        return False
    return True


# --- the contract, every registered stack ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_stack_has_every_attribute_of_its_kind(name):
    fw = FRAMEWORKS[name]
    assert isinstance(fw, Framework)
    for f in dataclasses.fields(Framework):
        assert hasattr(fw, f.name)
    for flag in ("supports_cp", "supports_vp", "supports_uneven_stages", "supports_ep", "fully_shards", "supports_amp",
                 "supports_chunked_loss"):
        assert isinstance(getattr(fw, flag), bool), flag
    for hook in ("dp_overlap_default", "tp_overlap_default", "memory_caveat", "tune_recipe"):
        assert callable(getattr(fw, hook)), hook
    assert fw.experts_fit is None or callable(fw.experts_fit)
    assert set(fw.zero_stages) <= {0, 1, 2, 3} and 0 in fw.zero_stages
    assert all(isinstance(s, str) and s in TrainingSpec.model_fields for s in fw.switches)
    assert bool(fw.switches) == bool(fw.switches_label)
    assert fw.export_format is None or fw.export_format in FORMATS
    assert fw.describes


@pytest.mark.parametrize("name", NAMES)
def test_names_round_trip_through_the_registry_the_spec_and_the_cli(name):
    fw = get(name)
    assert fw is FRAMEWORKS[name] and fw.name == name
    assert _spec(name).framework == name
    if fw.is_band:
        assert name not in KNOWN and name not in RECIPES
    else:
        assert fw.recipe is RECIPES[name] and fw.recipe.name == name


def test_the_spec_the_cli_and_the_recipes_offer_the_registrys_names():
    assert get_args(FrameworkName) == tuple(FRAMEWORKS)
    action = next(a for a in build_parser()._subparsers._group_actions[0].choices["plans"]._actions
                  if a.dest == "framework")
    assert list(action.choices) == NAMES
    assert tuple(RECIPES) == KNOWN == tuple(n for n in NAMES if not FRAMEWORKS[n].is_band)
    assert FRAMEWORK_EXPORT == {n: fw.export_format for n, fw in FRAMEWORKS.items() if fw.export_format}


def test_an_unregistered_name_is_a_spec_error_naming_framework():
    with pytest.raises(SpecError) as err:
        get("jax")
    assert err.value.field == "framework" and "pytorch" in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_cp_plans_exist_only_under_a_stack_that_supports_cp(name):
    fw = FRAMEWORKS[name]
    training = _spec(name, seq_len=16384, global_batch=8)
    assert (context_parallel_sizes(training, 64) > 1).any() == fw.supports_cp
    cluster = parse_cluster_yaml("nodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8}]")
    plans = rank_plans(TINY, training, cluster)
    assert len(plans)
    assert bool((plans.columns["cp"] > 1).any()) == fw.supports_cp


@pytest.mark.parametrize("name", NAMES)
def test_vp_and_uneven_layouts_exist_only_under_a_stack_that_supports_them(name):
    fw = FRAMEWORKS[name]
    training = _spec(name)
    rows = pipeline_layouts(TINY, training, 4)
    assert bool((rows[:, 1] > 1).any()) == fw.supports_vp
    assert bool((virtual_pipeline_sizes(TINY, training) > 1).any()) == fw.supports_vp
    assert bool(((rows[:, 2] > 0) | (rows[:, 3] > 0)).any()) == fw.supports_uneven_stages


@pytest.mark.parametrize("name", NAMES)
def test_ep_is_tried_only_under_a_stack_that_supports_it_and_obeys_its_rule(name):
    fw = FRAMEWORKS[name]
    training = _spec(name, zero_stage=3)
    assert bool((expert_parallel_sizes(TINY_MOE, training) > 1).any()) == fw.supports_ep
    d, t, c, e = np.array([2, 2, 4]), 2, 1, np.array([2, 4, 4])
    common = (d * c) % e == 0
    got = np.asarray(ep_allowed(TINY_MOE, training, d, t, c, e))
    want = common if fw.experts_fit is None else common & fw.experts_fit(TINY_MOE, training, d, t, c, e)
    assert got.tolist() == np.asarray(want).tolist()


@pytest.mark.parametrize("name", NAMES)
def test_zero_stages_amp_and_chunked_loss_are_accepted_exactly_where_the_stack_says(name):
    fw = FRAMEWORKS[name]
    for zero in (0, 1, 2, 3):
        assert _accepted(name, zero_stage=zero) == (zero in fw.zero_stages)
    assert _accepted(name, precision="amp") == fw.supports_amp
    assert _accepted(name, loss_chunks=4) == fw.supports_chunked_loss
    assert effective_zero_stage(_spec(name)) == (3 if fw.fully_shards else 0)


@pytest.mark.parametrize("name", NAMES)
def test_each_refusal_is_the_stacks_own_message(name):
    fw = FRAMEWORKS[name]
    if not fw.supports_amp:
        with pytest.raises(SpecError, match=re.escape(fw.amp_refusal)):
            make_training(framework=name, precision="amp")
    if not fw.supports_chunked_loss:
        with pytest.raises(SpecError, match=re.escape(fw.chunked_loss_refusal)):
            make_training(framework=name, precision=fw.default_precision, loss_chunks=2)
    for zero in set(range(4)) - set(fw.zero_stages):
        with pytest.raises(SpecError, match=re.escape(fw.zero_stage_refusal.format(zero_stage=zero))):
            make_training(framework=name, precision=fw.default_precision, zero_stage=zero)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("field", sorted(SWITCH_OWNERS))
def test_a_stack_switch_is_accepted_by_its_owner_and_unknown_only(name, field):
    fw, owner = FRAMEWORKS[name], switch_owner(field)
    assert field in owner.switches and field in FRAMEWORKS["unknown"].switches
    kw = {field: SWITCH_ON[field], **SWITCH_NEEDS.get(field, {})}
    ok = _accepted(name, precision="bf16-master", **kw)
    assert ok == (field in fw.switches)
    if not ok:
        with pytest.raises(SpecError, match=re.escape(owner.switch_refusal.format(field=field, framework=name))):
            make_training(framework=name, precision="bf16-master", **kw)


@pytest.mark.parametrize("name", NAMES)
def test_overlap_defaults_are_what_the_step_model_uses(name):
    fw = FRAMEWORKS[name]
    for zero in fw.zero_stages:
        for sp in (False, True):
            training = _spec(name, zero_stage=zero, sequence_parallel=sp)
            assert comm_overlaps(training) == (fw.dp_overlap_default(training), fw.tp_overlap_default(training))
            forced = training.model_copy(update={"overlap_dp_comm": False, "tp_comm_overlap": True})
            assert comm_overlaps(forced) == (False, True)


# --- values worked by hand ------------------------------------------------------------------------------------------
def test_overlap_defaults_by_hand():
    # megatron: Bridge / NeMo recipes overlap DDP, TE userbuffers with SP; fsdp2: prefetch; DeepSpeed: stage == 3
    assert comm_overlaps(_spec("megatron", sequence_parallel=True)) == (True, True)
    assert comm_overlaps(_spec("megatron")) == (True, False)
    assert comm_overlaps(_spec("fsdp2")) == (True, False)
    assert comm_overlaps(_spec("deepspeed", zero_stage=2)) == (False, False)
    assert comm_overlaps(_spec("deepspeed", zero_stage=3)) == (True, False)
    assert comm_overlaps(_spec("pytorch")) == (False, False)


def test_capabilities_by_hand():
    table = {n: (fw.supports_cp, fw.supports_vp, fw.supports_uneven_stages, fw.supports_ep)
             for n, fw in FRAMEWORKS.items()}
    assert table == {"pytorch": (True, False, False, True), "hf": (False, False, False, False),
                     "megatron": (True, True, True, True), "fsdp2": (True, True, False, True),
                     "deepspeed": (False, False, False, True), "torchtune": (False, False, False, False),
                     "litgpt": (False, False, False, False), "unknown": (True, True, True, True)}
    assert [n for n, fw in FRAMEWORKS.items() if fw.fully_shards] == ["fsdp2"]
    assert FRAMEWORKS["megatron"].default_precision == "bf16-master"


def test_precision_overrides_by_hand():
    # FSDP2 MixedPrecisionPolicy(bf16, fp32): fp32 shards (4) + fp32 grads (4), no master, no autocast copy
    amp = get("fsdp2").recipe.precision_setup("amp")
    assert (amp.name, amp.param_bytes, amp.grad_bytes, amp.master_bytes, amp.compute_copy_bytes) == (
        "fsdp2-bf16", 4, 4, 0, 0)
    assert get("fsdp2").recipe.precision_setup("bf16").name == "bf16"
    # DeepSpeed bf16: bf16 params (2) + bf16 grads (2) + fp32 master (4)
    ds = get("deepspeed").recipe.precision_setup("bf16-master")
    assert (ds.name, ds.param_bytes, ds.grad_bytes, ds.master_bytes) == ("deepspeed-bf16", 2, 2, 4)
    assert get("megatron").recipe.precision_setup("bf16-master").name == "bf16-master"


def test_torchtitan_expert_rule_by_hand():
    # 8 experts, t = 2: degree e x t must divide 8 and dp_shard x cp (= d = 2 under ZeRO-3) must be a multiple of e
    fit = get("fsdp2").experts_fit
    sharded, replicated = _spec("fsdp2", zero_stage=3), _spec("fsdp2", zero_stage=0)
    assert bool(fit(TINY_MOE, sharded, 2, 2, 1, 2))  # 8 % 4 == 0, 2 % 2 == 0
    assert not bool(fit(TINY_MOE, sharded, 2, 2, 1, 4))  # 2 % 4 != 0
    assert not bool(fit(TINY_MOE, replicated, 2, 2, 1, 2))  # zero_stage 0: dp_shard = 1
    assert bool(fit(TINY_MOE, replicated, 2, 2, 1, 1))  # ep 1 always fits


def test_deepspeed_tunes_its_recipe_with_the_runs_buckets():
    training = _spec("deepspeed", reduce_bucket_size=50_000_000)
    assert run_recipe(training).reduce_bucket_elements == 50_000_000
    assert run_recipe(training).max_live_parameters == 1_000_000_000  # 0: DeepSpeed's default 1e9
    assert run_recipe(_spec("megatron")) is RECIPES["megatron"]


def test_deepspeed_warns_on_zero3_over_several_ranks_only():
    from frenzy_core.training import Parallelism

    caveat = get("deepspeed").memory_caveat
    assert "23.8% low" in caveat(_spec("deepspeed", zero_stage=3), Parallelism(dp=2))
    assert caveat(_spec("deepspeed", zero_stage=3), Parallelism(dp=1)) is None
    assert caveat(_spec("deepspeed", zero_stage=2), Parallelism(dp=2)) is None
    assert get("megatron").memory_caveat(_spec("megatron", zero_stage=3), Parallelism(dp=2)) is None


def test_export_hook_is_the_stacks_default_format():
    cluster = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8}]")
    training = _spec("megatron", seq_len=1024, global_batch=16)
    plan = rank_plans(TINY, training, cluster).plan(0)
    assert get("megatron").export(TINY, training, plan, cluster) == export_plan("megatron", TINY, training, plan,
                                                                                cluster)
    with pytest.raises(SpecError):
        get("unknown").export(TINY, training, plan, cluster)


def test_no_module_outside_the_registry_compares_a_framework_name():
    names = "|".join(frameworks.FRAMEWORKS)
    pattern = re.compile(rf"""(==|!=)\s*['"]({names})['"]|\b(not )?in \(['"]({names})['"]""")
    files = [*sorted((REPO / "frenzy_core").rglob("*.py")), *sorted((REPO / "pages").glob("*.py")), REPO / "app.py"]
    hits = [f"{p.relative_to(REPO)}:{i}" for p in files if "frameworks" not in p.parts
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []
