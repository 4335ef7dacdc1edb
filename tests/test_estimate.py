"""frenzy_core.estimate and `frenzy estimate`: one split's numbers, the same as `frenzy plans` gives for it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from frenzy_core.cli import EXIT_BAD_INPUT, main
from frenzy_core.errors import SpecError
from frenzy_core.estimate import cluster_links, estimate
from frenzy_core.gpus import CATALOG
from frenzy_core.memory import predict_memory_totals
from frenzy_core.models import ZOO
from frenzy_core.perf import step_time_totals, training_flops_per_step
from frenzy_core.plans import DEFAULT_SAFETY_MARGIN, rank_plans
from frenzy_core.training import Parallelism, TrainingSpec

JSON_KEYS = ["step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "parts", "allocated_bytes",
             "reserved_bytes", "per_stage_allocated_bytes", "fits"]
H100 = CATALOG["H100-80GB"]


def _run(capsys, *argv):
    code = main(["estimate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- the command ----------------------------------------------------------------------------------------------------
def test_json_has_exactly_the_documented_keys(capsys):
    code, out, _ = _run(capsys, "--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--dp", "2", "--tp", "2", "--pp", "2",
                        "--global-batch", "16", "--seq-len", "4096", "--framework", "megatron", "--json")
    assert code == 0
    got = json.loads(out)
    assert list(got) == JSON_KEYS
    assert [p["name"] for p in got["parts"]] == ["compute", "tp_comm", "ep_comm", "cp_comm", "pp_bubble", "pp_p2p",
                                                 "dp_comm", "optimizer", "overhead"]
    assert all(set(p) == {"name", "exposed_s", "overlapped_s"} and p["overlapped_s"] >= 0.0 for p in got["parts"])
    hidden = {p["name"] for p in got["parts"] if p["overlapped_s"] > 0}
    # only communication hides behind compute (megatron overlaps by default; the sends only with vp > 1)
    assert hidden <= {"tp_comm", "dp_comm"}
    assert sum(p["exposed_s"] for p in got["parts"]) == pytest.approx(got["step_time_s"], rel=1e-12)
    assert len(got["per_stage_allocated_bytes"]) == 2 and got["allocated_bytes"] == max(got["per_stage_allocated_bytes"])
    assert got["reserved_bytes"] > got["allocated_bytes"] and got["fits"] is True


def test_interleaved_pipeline_sends_hide_unless_switched_off(capsys):
    """Megatron with vp 2 hides the pipeline sends (overlap_p2p_comm); --overlap-pp-comm off puts them in series:
    exposed then equals the overlapped seconds of the default run, and the step is longer by the difference."""
    argv = ["--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--dp", "2", "--tp", "2", "--pp", "2", "--vp", "2",
            "--global-batch", "16", "--seq-len", "4096", "--framework", "megatron", "--json"]
    runs = {}
    for flag in ("auto", "off"):
        code, out, _ = _run(capsys, *argv, "--overlap-pp-comm", flag)
        assert code == 0
        runs[flag] = json.loads(out)
    p2p = {flag: next(p for p in run["parts"] if p["name"] == "pp_p2p") for flag, run in runs.items()}
    assert p2p["auto"]["overlapped_s"] > 0 and p2p["off"]["overlapped_s"] == 0.0
    assert p2p["off"]["exposed_s"] == pytest.approx(p2p["auto"]["exposed_s"] + p2p["auto"]["overlapped_s"], rel=1e-12)
    assert runs["off"]["step_time_s"] > runs["auto"]["step_time_s"]


def test_uneven_stages_on_the_command_line(capsys):
    # Llama-3.1-8B's 32 layers on 5 stages: 5 + 3 x 8 + 3
    argv = ["--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--dp", "2", "--pp", "5", "--first-stage-layers", "5",
            "--last-stage-layers", "3", "--global-batch", "16", "--seq-len", "4096", "--framework", "megatron"]
    code, out, _ = _run(capsys, *argv, "--json")
    assert code == 0 and len(json.loads(out)["per_stage_allocated_bytes"]) == 5
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and "first=5 last=3" in out and "layers 5, 8, 8, 8, 3" in out


@pytest.mark.parametrize("argv, field", [
    (["--pp", "5"], "pp"),  # 12 layers
    (["--pp", "4", "--first-stage-layers", "4"], "first_stage_layers"),  # 8 middle layers over 3 stages
    (["--pp", "4", "--vp", "2", "--first-stage-layers", "3", "--last-stage-layers", "3"], "first_stage_layers"),
    (["--dp", "2", "--gpus", "4"], "gpus"),  # d x t x p x cp = 2
    (["--tp", "5"], "tp"),
    (["--gpus-per-node", "0"], "gpus_per_node"),
    (["--inter-node-gbps", "0"], "inter_node_gbps"),
])
def test_an_invalid_split_exits_2_with_one_line_naming_the_rule(capsys, argv, field):
    code, out, err = _run(capsys, "--model", "gpt2", "--gpu", "A100-80GB", "--global-batch", "8", *argv)
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith(f"frenzy estimate: error: {field}: ")


def test_an_unknown_gpu_exits_2(capsys):
    code, _, err = _run(capsys, "--model", "gpt2", "--gpu", "B300")
    assert code == EXIT_BAD_INPUT and "gpu_type" in err


def test_gpus_defaults_to_the_split_and_may_repeat_it(capsys):
    base = ["--model", "gpt2", "--gpu", "A100-80GB", "--dp", "2", "--tp", "2", "--global-batch", "8", "--json"]
    assert _run(capsys, *base)[1] == _run(capsys, *base, "--gpus", "4")[1]


# --- the core function ----------------------------------------------------------------------------------------------
def test_throughput_and_mfu_by_hand():
    tr = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=4, precision="amp", recompute="full")
    got = estimate(ZOO["gpt2"], tr, Parallelism(dp=2), CATALOG["A100-40GB"])
    assert got.tokens_per_s_per_gpu == pytest.approx(8 * 1024 / got.step_time_s / 2, rel=1e-12)
    # model FLOPs leave the recomputation out (PaLM App. B); the A100 peaks at 312 bf16 TFLOP/s
    model_flops = training_flops_per_step(ZOO["gpt2"], tr.model_copy(update={"recompute": "none"}))
    assert got.model_tflops_per_gpu == pytest.approx(model_flops / got.step_time_s / 2 / 1e12, rel=1e-12)
    assert got.mfu == pytest.approx(got.model_tflops_per_gpu / 312, rel=1e-12)


def test_fits_uses_the_planners_safety_margin():
    tr = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8, precision="amp")
    got = estimate(ZOO["gpt2"], tr, Parallelism(), CATALOG["A100-40GB"])
    assert got.usable_bytes == CATALOG["A100-40GB"].memory_bytes * (1 - DEFAULT_SAFETY_MARGIN)
    assert got.fits == (got.total_bytes <= got.usable_bytes)
    tight = estimate(ZOO["gpt2"], tr, Parallelism(), CATALOG["A100-40GB"], safety_margin=0.99)
    assert not tight.fits


def test_a_mismatched_gpu_count_is_refused():
    with pytest.raises(SpecError) as err:
        estimate(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8), Parallelism(dp=2), H100, num_gpus=3)
    assert err.value.field == "gpus"


# --- estimate == plans ----------------------------------------------------------------------------------------------
def _plan_estimate(model, training, plan, cluster):
    return estimate(model, training.model_copy(update={"micro_batch": plan.micro_batch}), plan.parallelism,
                    cluster.type_table[plan.gpu_type], num_gpus=plan.num_gpus, **cluster_links(cluster, plan.gpu_type))


@pytest.mark.parametrize("model_name, training", [
    ("gpt2", TrainingSpec(seq_len=1024, global_batch=64, micro_batch=1, precision="amp")),
    ("llama-2-7b", TrainingSpec(seq_len=4096, global_batch=64, micro_batch=1, precision="bf16-master",
                                framework="megatron", recompute="selective")),
    # a dense-first MoE model: its plans use ep and pipelines of 3 stages
    ("deepseek-v2-lite", TrainingSpec(seq_len=4096, global_batch=64, micro_batch=1, precision="bf16-master",
                                      framework="megatron", distributed_optimizer=True, recompute="full")),
])
def test_plans_numbers_equal_estimate_for_the_same_split(tiny_cluster, model_name, training):
    model = ZOO[model_name]
    result = rank_plans(model, training, tiny_cluster)
    assert result.plans
    for plan in result.plans[:5]:  # the best plan first, then its runners-up
        got = _plan_estimate(model, training, plan, tiny_cluster)
        assert got.step_time_s == pytest.approx(plan.step_time_s, rel=1e-9)
        assert got.total_bytes == plan.memory_bytes
        assert got.fits
        assert plan.gpu_memory_bytes * (1 - DEFAULT_SAFETY_MARGIN) - got.total_bytes == pytest.approx(
            plan.headroom_bytes, abs=1)


def test_uneven_split_vectorised_equals_estimate():
    # what plans.py will call for uneven stages: the vectorised functions with first / last arrays
    model = ZOO["llama-3.1-8b"]
    training = TrainingSpec(seq_len=4096, global_batch=32, micro_batch=1, precision="bf16-master",
                            framework="megatron")
    for first, last in ((5, 3), (0, 4), (4, 0)):
        par = Parallelism(dp=2, tp=2, pp=5, first_stage_layers=first, last_stage_layers=last)
        got = estimate(model, training, par, H100, gpus_per_node=8, intra_link_gbyte_s=450.0, network_gbit_s=400.0)
        step = step_time_totals(model, training, H100, np.array([2, 2]), 2, 5, 1, intra_link_gbyte_s=450.0,
                                network_gbit_s=400.0, gpus_per_node=8, first_stage_layers=first,
                                last_stage_layers=last)
        memory = predict_memory_totals(model, training, 2, 2, 5, 1, first_stage_layers=first, last_stage_layers=last)
        np.testing.assert_allclose(step, got.step_time_s, rtol=1e-12)
        assert int(memory) == got.total_bytes
        assert math.isfinite(got.mfu) and len(got.per_stage_allocated_bytes) == 5
