"""Launch exports: each output parses (shlex, json, tomllib, yaml) and says what the plan says."""

from __future__ import annotations

import dataclasses
import json
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.export import FORMATS, GPU_PRODUCTS, export_plan, node_groups
from frenzy_core.models import ZOO
from frenzy_core.plans import Plan, rank_plans
from frenzy_core.training import TrainingSpec

MODEL = ZOO["llama-2-7b"]
TRAIN = TrainingSpec(seq_len=2048, global_batch=64, micro_batch=1, zero_stage=1, recompute="selective",
                     sequence_parallel=True)
CLUSTER = parse_cluster_yaml("name: two\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 2}]")
# one 8-GPU and one 4-GPU A100 node: a 12-GPU plan takes 8 on one and 4 on the other
MIXED = parse_cluster_yaml("name: mixed\nnodes:\n  - {name: big, gpu_type: A100-80GB, num_gpus: 8}\n"
                           "  - {name: small, gpu_type: A100-80GB, num_gpus: 4}\n")
TOKENS = 1e9


def _plan(result, **want) -> Plan:
    return next(p for p in result.plans if all(getattr(p, k) == v for k, v in want.items()))


PLANS = rank_plans(MODEL, TRAIN, CLUSTER, tokens=TOKENS)
SPREAD = _plan(PLANS, dp=2, tp=4, pp=2)  # 16 GPUs over both nodes
TRAIN96 = TRAIN.model_copy(update={"global_batch": 96})  # d=3 divides it: 12 GPUs = 3 x t=4
HET = _plan(rank_plans(MODEL, TRAIN96, MIXED, tokens=TOKENS), num_gpus=12, tp=4)


def _shell_words(text: str) -> list[str]:
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return shlex.split(body.replace("\\\n", " "))


def _flags(words: list[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    for i, w in enumerate(words):
        if w.startswith("--") and "=" in w:
            key, value = w.split("=", 1)
            out[key] = value
        elif w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else "--"
            out[w] = True if nxt.startswith("--") else nxt
    return out


def test_megatron_arguments_match_the_plan():
    flags = _flags(_shell_words(export_plan("megatron", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS)))
    assert flags["--tensor-model-parallel-size"] == "4" and flags["--pipeline-model-parallel-size"] == "2"
    assert flags["--micro-batch-size"] == str(SPREAD.micro_batch) and flags["--global-batch-size"] == "64"
    assert flags["--seq-length"] == "2048" and flags["--recompute-granularity"] == "selective"
    assert flags["--use-distributed-optimizer"] is True and flags["--sequence-parallel"] is True
    assert flags["--num-layers"] == "32" and flags["--hidden-size"] == "4096"
    # 1e9 tokens / (64 x 2048 tokens per step) = 7629.4 -> 7630 steps
    assert flags["--train-iters"] == "7630"
    # Megatron's data-parallel size is world / (t x p): the plan's d
    assert int(flags["--nnodes"]) * int(flags["--nproc-per-node"]) // (4 * 2) == SPREAD.dp


def test_deepspeed_batch_identity_holds():
    cfg = json.loads(export_plan("deepspeed", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))
    dp = SPREAD.num_gpus // (SPREAD.tp * SPREAD.pp)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
    assert cfg["train_batch_size"] == 64 and cfg["zero_optimization"]["stage"] == 1
    assert cfg["tensor_parallel"]["autotp_size"] == 4 and cfg["pipeline"]["stages"] == 2
    assert cfg["bf16"]["enabled"] is True and "activation_checkpointing" in cfg


def test_deepspeed_pipeline_with_zero2_is_refused_naming_zero_stage():
    with pytest.raises(SpecError) as err:
        export_plan("deepspeed", MODEL, TRAIN.model_copy(update={"zero_stage": 2}), SPREAD, CLUSTER, TOKENS)
    assert err.value.field == "zero_stage"


def test_torchtitan_degrees_multiply_to_the_world_size():
    cfg = tomllib.loads(export_plan("torchtitan", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))
    par = cfg["parallelism"]
    world = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * par["tensor_parallel_degree"]
             * par["pipeline_parallel_degree"])
    assert world == SPREAD.num_gpus and par["tensor_parallel_degree"] == 4 and par["pipeline_parallel_degree"] == 2
    tr = cfg["training"]
    assert tr["global_batch_size"] == 64 and tr["seq_len"] == 2048
    # with p > 1 the local batch holds every micro-batch of one replica's step
    assert tr["local_batch_size"] * SPREAD.dp == 64
    # Megatron's selective recompute has no torchtitan twin: per-op SAC, the nearest (export.titan_activation_checkpoint)
    assert cfg["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert cfg["compile"] == {"enable": False}  # torchtitan >= 0.2.0: [compile] enable, not [training] compile


def test_torchtitan_compile_follows_the_training():
    compiled = TRAIN.model_copy(update={"framework": "fsdp2", "compile": True})
    cfg = tomllib.loads(export_plan("torchtitan", MODEL, compiled, SPREAD, CLUSTER, TOKENS))
    assert cfg["compile"]["enable"] is True and "compile" not in cfg["training"]


def test_accelerate_megatron_config_matches_the_plan():
    cfg = yaml.safe_load(export_plan("accelerate", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))
    assert cfg["distributed_type"] == "MEGATRON_LM" and cfg["num_processes"] == 16 and cfg["num_machines"] == 2
    mc = cfg["megatron_lm_config"]
    assert (mc["megatron_lm_tp_degree"], mc["megatron_lm_pp_degree"]) == (4, 2)
    assert mc["megatron_lm_num_micro_batches"] == SPREAD.grad_accum


def test_accelerate_refuses_nodes_with_different_gpu_counts():
    with pytest.raises(SpecError) as err:
        export_plan("accelerate", MODEL, TRAIN96, HET, MIXED, TOKENS)
    assert err.value.field == "export" and "slurm" in str(err.value)


def test_slurm_script_for_a_homogeneous_plan():
    text = export_plan("slurm", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS)
    assert text.startswith("#!/bin/bash") and "hetjob" not in text
    sbatch = dict(line[len("#SBATCH "):].split("=", 1) for line in text.splitlines() if line.startswith("#SBATCH --"))
    assert sbatch["--nodes"] == "2" and sbatch["--gpus-per-node"] == "8" and sbatch["--nodelist"] == "h-0,h-1"
    srun = [line for line in text.replace("\\\n", " ").splitlines() if line.startswith("srun")]
    flags = _flags(shlex.split(srun[0]))
    assert flags["--nnodes"] == "2" and flags["--nproc-per-node"] == "8"


def test_slurm_script_is_a_heterogeneous_job_when_nodes_take_different_counts():
    text = export_plan("slurm", MODEL, TRAIN96, HET, MIXED, TOKENS)
    assert text.count("#SBATCH hetjob") == 1
    sruns = [shlex.split(line) for line in text.replace("\\\n", " ").splitlines() if line.startswith("srun")]
    per_group = sorted(int(_flags(s)["--nproc-per-node"]) for s in sruns)
    assert per_group == [4, 8] and sum(per_group) == HET.num_gpus
    assert all(_flags(s)["--nnodes"] == "2" for s in sruns)
    assert {_flags(s)["--het-group"] for s in sruns} == {"0", "1"}


def test_kubernetes_pytorchjob_requests_the_plans_gpus_on_its_gpu_type():
    job = yaml.safe_load(export_plan("kubernetes", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))
    assert job["kind"] == "PyTorchJob" and job["apiVersion"] == "kubeflow.org/v1"
    specs = job["spec"]["pytorchReplicaSpecs"]
    total = 0
    for spec in specs.values():
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"]["nvidia.com/gpu.product"] == GPU_PRODUCTS["H100-80GB"]
        total += spec["replicas"] * pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert total == SPREAD.num_gpus


def test_kubernetes_jobset_for_nodes_with_different_gpu_counts():
    js = yaml.safe_load(export_plan("kubernetes", MODEL, TRAIN96, HET, MIXED, TOKENS))
    assert js["kind"] == "JobSet"
    total = sum(rj["template"]["spec"]["parallelism"]
                * rj["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
                for rj in js["spec"]["replicatedJobs"])
    assert total == HET.num_gpus == 12


def test_node_groups_cover_the_plan_with_multiples_of_t():
    groups = node_groups(HET, MIXED)
    assert sum(len(g.nodes) * g.gpus_per_node for g in groups) == 12
    assert all(g.gpus_per_node % HET.tp == 0 for g in groups)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_exports_the_top_plan_of_a_real_ranking(fmt):
    best = PLANS.plans[0]
    assert export_plan(fmt, MODEL, TRAIN, best, CLUSTER, TOKENS).strip()


def test_unknown_format_names_the_field():
    with pytest.raises(SpecError) as err:
        export_plan("horovod", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS)
    assert err.value.field == "export"


def test_a_plan_for_another_batch_is_refused():
    with pytest.raises(SpecError) as err:
        export_plan("deepspeed", MODEL, TRAIN.model_copy(update={"global_batch": 128}), SPREAD, CLUSTER, TOKENS)
    assert err.value.field == "plan"


# --- the CLI: frenzy plans ... --export / constraints ----------------------------------------------------------------
def _cli(capsys, *argv):
    from frenzy_core.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_export_deepspeed_is_the_top_plan_under_the_constraints(capsys, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: two\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 2}]\n")
    code, out, _ = _cli(capsys, "plans", "--model", "llama-2-7b", "--seq-len", "2048", "--global-batch", "64",
                        "--cluster", str(f), "--max-gpus", "8", "--export", "deepspeed")
    top = rank_plans(MODEL, TrainingSpec(seq_len=2048, global_batch=64, precision="amp"), CLUSTER, max_gpus=8,
                     scaling_floor=0.5).plans[0]
    cfg = json.loads(out)
    assert code == 0 and cfg["train_micro_batch_size_per_gpu"] == top.micro_batch
    assert cfg.get("tensor_parallel", {"autotp_size": 1})["autotp_size"] == top.tp
    assert cfg["gradient_accumulation_steps"] == top.grad_accum


def test_cli_deadline_and_budget_filter_the_json(capsys):
    cluster = str(Path(__file__).resolve().parents[1] / "sample_clusters" / "modern-mixed.yaml")
    code, out, _ = _cli(capsys, "plans", "--model", "llama-2-7b", "--global-batch", "64", "--cluster", cluster,
                        "--deadline", "2d", "--budget", "3000", "--top", "0", "--json")
    rows = json.loads(out)
    assert code == 0 and rows
    assert all(r["time_to_train_s"] <= 2 * 86400 and r["cost_usd"] <= 3000 for r in rows)


def test_cli_bad_deadline_exits_2_naming_it(capsys):
    code, _, err = _cli(capsys, "plans", "--global-batch", "8", "--cluster", "x.yaml", "--deadline", "soon")
    assert code == 2 and "deadline" in err and err.count("\n") == 1


def test_deepspeed_config_carries_the_runs_own_bucket_and_live_sizes():
    # TrainingSpec's DeepSpeed sizes go to zero_optimization under DeepSpeed's own key names; 0 leaves the default
    ds = TRAIN.model_copy(update={"framework": "deepspeed", "reduce_bucket_size": 50_000_000,
                                  "stage3_max_reuse_distance": 2_000_000_000})
    zero = json.loads(export_plan("deepspeed", MODEL, ds, SPREAD, CLUSTER, TOKENS))["zero_optimization"]
    assert zero["reduce_bucket_size"] == 50_000_000 and zero["stage3_max_reuse_distance"] == 2_000_000_000
    assert "stage3_max_live_parameters" not in zero
    plain = json.loads(export_plan("deepspeed", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))["zero_optimization"]
    assert set(plain) == {"stage"}


def test_moe_plans_export_their_experts_and_ep():
    """A ranked Mixtral plan with ep > 1: Megatron gets the MoE flags with the plan's ep; DeepSeek-V3 its dense
    first layers and shared experts; torchtitan its expert degree; DeepSpeed, whose ep lives in the model code, a
    key that names it."""
    mixtral = ZOO["mixtral-8x7b"]
    moe_train = TrainingSpec(seq_len=4096, global_batch=64, framework="megatron", distributed_optimizer=True,
                             recompute="full", moe_grouped_gemm=True)
    plan = next(p for p in rank_plans(mixtral, moe_train, CLUSTER, tokens=TOKENS).plans
                if p.ep > 1 and p.tp > 1 and p.vp == 1)  # DeepSpeed's pipeline has no interleaving
    flags = _flags(_shell_words(export_plan("megatron", mixtral, moe_train, plan, CLUSTER, TOKENS)))
    assert flags["--num-experts"] == "8" and flags["--moe-router-topk"] == "2"
    assert flags["--moe-ffn-hidden-size"] == "14336" and flags["--expert-model-parallel-size"] == str(plan.ep)
    assert flags["--moe-token-dispatcher-type"] == "alltoall" and flags["--moe-grouped-gemm"] is True
    assert flags["--sequence-parallel"] is True  # Megatron refuses MoE with t > 1 without it
    assert "--moe-layer-freq" not in flags and "--moe-shared-expert-intermediate-size" not in flags
    assert plan.dp % plan.ep == 0 and 8 % plan.ep == 0
    # torchtitan keeps experts whole and borrows EP ranks from dp_shard x cp x tp: its degree is ep x t, which must
    # divide the 8 experts (parallel_dims.py _validate at b5bcd76)
    ranked = rank_plans(mixtral, moe_train, CLUSTER, tokens=TOKENS).plans
    fits = next(p for p in ranked if p.ep > 1 and p.tp > 1 and 8 % (p.ep * p.tp) == 0)
    titan = tomllib.loads(export_plan("torchtitan", mixtral, moe_train, fits, CLUSTER, TOKENS))
    assert titan["parallelism"]["expert_parallel_degree"] == fits.ep * fits.tp
    too_wide = next(p for p in ranked if p.ep > 1 and 8 % (p.ep * p.tp))
    with pytest.raises(SpecError, match=f"ep x t = {too_wide.ep * too_wide.tp}"):
        export_plan("torchtitan", mixtral, moe_train, too_wide, CLUSTER, TOKENS)
    with pytest.raises(SpecError, match=f"ep={plan.ep}"):  # accelerate has no expert parallelism at all
        export_plan("accelerate", mixtral, moe_train, plan, CLUSTER, TOKENS)
    ds = json.loads(export_plan("deepspeed", mixtral, moe_train, plan, CLUSTER, TOKENS))
    assert ds["_frenzy_moe"]["ep_size"] == plan.ep and ds["train_batch_size"] == 64
    assert f"e{plan.ep}" in yaml.safe_load(export_plan("kubernetes", mixtral, moe_train, plan, CLUSTER,
                                                       TOKENS))["metadata"]["name"]
    v3 = ZOO["deepseek-v3"]  # 3 dense layers, then 58 MoE layers with one shared expert of width 2048
    v3_script = export_plan("megatron", v3, moe_train, plan, CLUSTER, TOKENS)
    v3_flags = _flags(_shell_words(v3_script))
    assert v3_flags["--moe-layer-freq"] == "([0]*3+[1]*58)"  # shlex reads it back: quoted for the shell
    assert "'([0]*3+[1]*58)'" in v3_script
    import subprocess

    slurm = export_plan("slurm", v3, moe_train, plan, CLUSTER, TOKENS)
    assert subprocess.run(["bash", "-n"], input=slurm, text=True, capture_output=True).returncode == 0
    assert v3_flags["--moe-shared-expert-intermediate-size"] == "2048"
    dense = _flags(_shell_words(export_plan("megatron", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS)))
    assert "--num-experts" not in dense and "--expert-model-parallel-size" not in dense


def test_context_parallel_plans_export_their_cp_or_are_refused_naming_the_export():
    long = TrainingSpec(seq_len=32768, global_batch=16, framework="megatron", distributed_optimizer=True,
                        recompute="full")
    plan = next(p for p in rank_plans(MODEL, long, CLUSTER, tokens=TOKENS).plans if p.cp > 1)
    flags = _flags(_shell_words(export_plan("megatron", MODEL, long, plan, CLUSTER, TOKENS)))
    assert flags["--context-parallel-size"] == str(plan.cp)
    assert plan.num_gpus == plan.dp * plan.tp * plan.pp * plan.cp
    titan = tomllib.loads(export_plan("torchtitan", MODEL, long, plan, CLUSTER, TOKENS))["parallelism"]
    world = (titan["data_parallel_replicate_degree"] * titan["data_parallel_shard_degree"]
             * titan["tensor_parallel_degree"] * titan["pipeline_parallel_degree"] * titan["context_parallel_degree"])
    assert titan["context_parallel_degree"] == plan.cp and world == plan.num_gpus
    for fmt in ("deepspeed", "accelerate"):
        with pytest.raises(SpecError, match=f"cp={plan.cp}") as err:
            export_plan(fmt, MODEL, long, plan, CLUSTER, TOKENS)
        assert err.value.field == "export"
    assert "--context-parallel-size" not in _flags(_shell_words(export_plan("megatron", MODEL, TRAIN, SPREAD,
                                                                            CLUSTER, TOKENS)))


def test_interleaved_plans_export_their_chunks_or_are_refused_naming_the_export():
    deep = TrainingSpec(seq_len=4096, global_batch=64, framework="megatron", distributed_optimizer=True)
    plan = next(p for p in rank_plans(ZOO["llama-2-13b"], deep, CLUSTER, tokens=TOKENS).plans if p.vp > 1)
    layers = 40 // (plan.pp * plan.vp)  # Llama-2-13B: 40 layers
    flags = _flags(_shell_words(export_plan("megatron", ZOO["llama-2-13b"], deep, plan, CLUSTER, TOKENS)))
    assert flags["--num-layers-per-virtual-pipeline-stage"] == str(layers) and layers * plan.pp * plan.vp == 40
    titan = tomllib.loads(export_plan("torchtitan", ZOO["llama-2-13b"], deep, plan, CLUSTER, TOKENS))["parallelism"]
    assert titan["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert titan["pipeline_parallel_layers_per_stage"] == layers
    for fmt in ("deepspeed", "accelerate"):
        with pytest.raises(SpecError, match=f"vp={plan.vp}"):
            export_plan(fmt, ZOO["llama-2-13b"], deep, plan, CLUSTER, TOKENS)
    flat = next(p for p in rank_plans(ZOO["llama-2-13b"], deep, CLUSTER, tokens=TOKENS).plans if p.vp == 1)
    assert "--num-layers-per-virtual-pipeline-stage" not in _flags(_shell_words(
        export_plan("megatron", ZOO["llama-2-13b"], deep, flat, CLUSTER, TOKENS)))


def test_every_fsdp2_moe_plan_is_one_torchtitan_accepts():
    """The planner's torchtitan EP rule (plans.ep_allowed) and the export's agree: every ranked fsdp2 plan of
    Mixtral exports, with expert_parallel_degree = ep x t dividing the 8 experts and dp_shard x cp x tp."""
    tr = TrainingSpec(seq_len=16384, global_batch=16, framework="fsdp2", zero_stage=3, recompute="full")
    big = parse_cluster_yaml("name: big\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 8}]")
    plans = rank_plans(ZOO["mixtral-8x7b"], tr, big, tokens=TOKENS).plans
    assert any(p.ep > 1 for p in plans) and any(p.cp > 1 for p in plans)
    for p in plans:
        par = tomllib.loads(export_plan("torchtitan", ZOO["mixtral-8x7b"], tr, p, big, TOKENS))["parallelism"]
        degree = par["expert_parallel_degree"]
        assert 8 % degree == 0 and (par["data_parallel_shard_degree"] * par["context_parallel_degree"]
                                    * par["tensor_parallel_degree"]) % degree == 0, p.label()


# --- launch files that run as they are (issue 23) --------------------------------------------------------------------
def _torchrun_args(calls: list[list[str]]) -> dict[str, str | bool]:
    """The flags of the one torchrun (or srun ... torchrun) call the stubs recorded."""
    (call,) = [c for c in calls if c[0] in ("torchrun", "srun")]
    return _flags(call)


def test_megatron_script_is_a_strict_bash_script():
    text = export_plan("megatron", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS)
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    first_command = next(line for line in lines[1:] if line.strip() and not line.startswith("#"))
    assert first_command == "set -euo pipefail"
    import subprocess

    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


@pytest.mark.parametrize("missing", ["DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_DIR"])
def test_megatron_script_stops_naming_a_placeholder_left_unset(missing, tmp_path):
    from test_export_hostile import run_with_stubs

    run, calls = run_with_stubs(export_plan("megatron", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS), tmp_path,
                                unset=(missing,))
    assert run.returncode != 0 and f"set {missing} to" in run.stderr
    assert not [c for c in calls if c[0] == "torchrun"]  # stopped before launching anything


def test_megatron_script_passes_data_tokenizer_lr_and_checkpoints_to_megatron(tmp_path):
    from test_export_hostile import run_with_stubs

    run, calls = run_with_stubs(export_plan("megatron", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS), tmp_path,
                                env={"LR": "1e-4", "TOKENIZER_TYPE": "Llama2Tokenizer"})
    assert run.returncode == 0, run.stderr
    flags = _torchrun_args(calls)
    assert flags["--data-path"] == "/data/corpus_text_document" and flags["--split"] == "949,50,1"
    assert flags["--tokenizer-type"] == "Llama2Tokenizer" and flags["--tokenizer-model"] == "/data/tokenizer"
    assert flags["--lr"] == "1e-4" and flags["--min-lr"] == "3e-05" and flags["--lr-decay-style"] == "cosine"
    assert flags["--lr-warmup-iters"] == str(7630 // 100)  # 1% of the 7,630 steps
    assert flags["--save"] == flags["--load"] == "checkpoints" and flags["--save-interval"] == "1000"


@pytest.mark.parametrize(("env", "unset", "endpoint", "rdzv_id"), [
    ({"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "6000"}, (), "10.0.0.7:6000", "4242"),  # the scheduler's values
    ({}, ("MASTER_ADDR",), "n-0:29500", "4242"),  # SLURM: the first host of SLURM_JOB_NODELIST, SLURM_JOB_ID
    ({"JOB_ID": "run-7"}, ("SLURM_JOB_ID", "SLURM_JOB_NODELIST"), "n-0:29500", "run-7"),  # no scheduler: hostname
    ({}, ("SLURM_JOB_ID", "SLURM_JOB_NODELIST"), "n-0:29500", "llama-2-7b-h100-80gb-d2t4p2"),
])
def test_megatron_script_takes_its_rendezvous_from_the_environment(env, unset, endpoint, rdzv_id, tmp_path):
    from test_export_hostile import run_with_stubs

    run, calls = run_with_stubs(export_plan("megatron", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS), tmp_path, env=env,
                                unset=unset)
    assert run.returncode == 0, run.stderr
    flags = _torchrun_args(calls)
    assert flags["--rdzv-endpoint"] == endpoint and flags["--rdzv-id"] == rdzv_id


@pytest.mark.parametrize(("every", "method", "layers"), [(1, "uniform", "1"), (2, "block", "8"), (3, "block", "6"),
                                                         (32, "block", "1")])
def test_megatron_full_recompute_follows_the_stride(every, method, layers):
    # SPREAD: p=2, so 16 layers per stage; `block` recomputes ceil(16 / k) of them (megatron/core/recompute.py)
    train = TRAIN.model_copy(update={"recompute": "full", "recompute_every": every})
    flags = _flags(_shell_words(export_plan("megatron", MODEL, train, SPREAD, CLUSTER, TOKENS)))
    assert flags["--recompute-granularity"] == "full"
    assert flags["--recompute-method"] == method and flags["--recompute-num-layers"] == layers


def test_megatron_block_recompute_counts_the_layers_of_one_virtual_stage():
    deep = TrainingSpec(seq_len=4096, global_batch=64, framework="megatron", distributed_optimizer=True,
                        recompute="full", recompute_every=2)
    plan = next(p for p in rank_plans(ZOO["llama-2-13b"], deep, CLUSTER, tokens=TOKENS).plans if p.vp > 1)
    flags = _flags(_shell_words(export_plan("megatron", ZOO["llama-2-13b"], deep, plan, CLUSTER, TOKENS)))
    chunk = 40 // (plan.pp * plan.vp)
    assert flags["--recompute-method"] == "block" and flags["--recompute-num-layers"] == str(-(-chunk // 2))


@pytest.mark.parametrize(("recompute", "every", "expected"), [
    ("none", 1, {"mode": "none"}),
    ("full", 1, {"mode": "full"}),
    ("full", 3, {"mode": "selective", "selective_ac_option": "3"}),  # full AC on every 3rd layer (_apply_layer_sac)
    ("op-sac", 1, {"mode": "selective", "selective_ac_option": "op"}),
    ("selective", 1, {"mode": "selective", "selective_ac_option": "op"}),  # nearest to Megatron's attention core
])
def test_torchtitan_activation_checkpoint_is_one_torchtitan_takes(recompute, every, expected):
    train = TRAIN.model_copy(update={"recompute": recompute, "recompute_every": every})
    assert tomllib.loads(export_plan("torchtitan", MODEL, train, SPREAD, CLUSTER, TOKENS))["activation_checkpoint"] \
        == expected


def test_torchtitan_refuses_per_op_sac_on_every_kth_layer_naming_the_stride():
    train = TRAIN.model_copy(update={"recompute": "op-sac", "recompute_every": 2})
    with pytest.raises(SpecError) as err:
        export_plan("torchtitan", MODEL, train, SPREAD, CLUSTER, TOKENS)
    assert err.value.field == "recompute_every"


# torchtitan v0.2.2 (commit 73a0e697) torchtitan/config/job_config.py: the fields the export writes, with their
# types (a tuple: the Literal's choices). ConfigManager._dict_to_dataclass refuses any other key; it does not check
# Literal values from TOML (the trainer does, later: "Invalid AC mode"), so the choices are checked here.
TITAN_FIELDS: dict[str, dict[str, type | tuple]] = {
    "job": {"description": str},
    "model": {"name": str, "flavor": str},
    "optimizer": {"name": str, "lr": float},
    "training": {"local_batch_size": int, "global_batch_size": int, "seq_len": int, "steps": int,
                 "mixed_precision_param": ("bfloat16", "float32")},
    "compile": {"enable": bool},
    "parallelism": {"data_parallel_replicate_degree": int, "data_parallel_shard_degree": int,
                    "fsdp_reshard_after_forward": ("default", "always", "never"), "tensor_parallel_degree": int,
                    "pipeline_parallel_degree": int, "pipeline_parallel_microbatch_size": int,
                    "context_parallel_degree": int, "pipeline_parallel_schedule": str,
                    "pipeline_parallel_layers_per_stage": int, "expert_parallel_degree": int,
                    "pipeline_parallel_first_stage_less_layers": int, "pipeline_parallel_last_stage_less_layers": int},
    "activation_checkpoint": {"mode": ("selective", "full", "memory_budget", "none"), "selective_ac_option": str},
}


def _titan_exports() -> list[str]:
    """torchtitan exports that between them write every key: dense, each recompute policy, interleaved, cp, MoE."""
    out = [export_plan("torchtitan", MODEL, TRAIN.model_copy(update={"recompute": r, "recompute_every": k}), SPREAD,
                       CLUSTER, TOKENS) for r, k in (("none", 1), ("full", 1), ("full", 4), ("op-sac", 1))]
    out.append(export_plan("torchtitan", MODEL, TRAIN.model_copy(update={"framework": "fsdp2", "compile": True}),
                           SPREAD, CLUSTER, TOKENS))
    deep = TrainingSpec(seq_len=4096, global_batch=64, framework="fsdp2", zero_stage=3)
    out.append(export_plan("torchtitan", ZOO["llama-2-13b"], deep, next(
        p for p in rank_plans(ZOO["llama-2-13b"], deep, CLUSTER, tokens=TOKENS).plans if p.vp > 1), CLUSTER, TOKENS))
    moe = TrainingSpec(seq_len=16384, global_batch=16, framework="fsdp2", zero_stage=3, recompute="full")
    big = parse_cluster_yaml("name: big\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 8}]")
    plans = rank_plans(ZOO["mixtral-8x7b"], moe, big, tokens=TOKENS).plans
    for want in (lambda p: p.ep > 1, lambda p: p.cp > 1):
        out.append(export_plan("torchtitan", ZOO["mixtral-8x7b"], moe, next(p for p in plans if want(p)), big, TOKENS))
    return out


def test_torchtitan_keys_and_values_are_those_of_torchtitans_job_config():
    written: set[tuple[str, str]] = set()
    for text in _titan_exports():
        for section, values in tomllib.loads(text).items():
            for key, value in values.items():
                kind = TITAN_FIELDS[section][key]  # KeyError: a key torchtitan refuses
                assert value in kind if isinstance(kind, tuple) else type(value) is kind, (section, key, value)
                written.add((section, key))
        ac = tomllib.loads(text)["activation_checkpoint"]
        if ac["mode"] == "selective":  # _apply_ac_to_transformer_block: "op" or a positive layer stride
            assert ac["selective_ac_option"] == "op" or ac["selective_ac_option"].isdigit()
    assert written == {(s, k) for s, keys in TITAN_FIELDS.items() for k in keys}  # the table is what we write


TITAN_LOADER = r"""
import dataclasses, importlib.util, json, sys, types, typing
# torchtitan/__init__.py imports its model zoo (triton kernels); the config parser needs only torchtitan.config
spec = importlib.util.find_spec("torchtitan")
pkg = types.ModuleType("torchtitan")
pkg.__path__ = list(spec.submodule_search_locations)
sys.modules["torchtitan"] = pkg
import tomllib
from torchtitan.config import ConfigManager
out = []
for path in sys.argv[1:]:
    config = ConfigManager().parse_args(["--job.config_file", path])
    written = tomllib.load(open(path, "rb"))
    bad = []
    for section, values in written.items():
        obj = getattr(config, section)
        hints = typing.get_type_hints(type(obj))
        for key in values:
            hint = hints[key]
            if typing.get_origin(hint) is typing.Literal and getattr(obj, key) not in typing.get_args(hint):
                bad.append([section, key, getattr(obj, key)])
    out.append({"config": {s: {k: getattr(getattr(config, s), k) for k in v} for s, v in written.items()},
                "bad": bad})
print(json.dumps(out))
"""


def test_torchtitan_config_loads_through_torchtitans_own_config_manager(tmp_path):
    """torchtitan 0.2.x (the releases that read TOML) parses every export with ConfigManager, keeps each value, and
    each Literal field holds one of its choices. Needs `pip install --no-deps torchtitan==0.2.2 tyro` (CPU torch)."""
    import importlib.metadata
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("torchtitan") is None or importlib.util.find_spec("tyro") is None:
        pytest.skip("torchtitan 0.2.x and tyro are not installed (pip install --no-deps torchtitan==0.2.2 tyro)")
    if not importlib.metadata.version("torchtitan").startswith("0.2."):
        pytest.skip("torchtitan reads TOML job configs in 0.2.x only")
    paths = []
    for i, text in enumerate(_titan_exports()):
        paths.append(tmp_path / f"titan{i}.toml")
        paths[-1].write_text(text, encoding="utf-8")
    run = subprocess.run([sys.executable, "-c", TITAN_LOADER, *map(str, paths)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    for path, parsed in zip(paths, json.loads(run.stdout.splitlines()[-1]), strict=True):
        assert parsed["bad"] == [], path.name
        assert parsed["config"] == tomllib.loads(path.read_text(encoding="utf-8")), path.name


def test_slurm_time_limit_is_the_prediction_plus_a_fifth_in_every_component():
    from frenzy_core.export import _slurm_time

    for plan, train, cluster, components in ((SPREAD, TRAIN, CLUSTER, 1), (HET, TRAIN96, MIXED, 2)):
        for hours in (0.5, 30.0):
            timed = dataclasses.replace(plan, time_to_train_s=hours * 3600)
            text = export_plan("slurm", MODEL, train, timed, cluster, TOKENS)
            limits = [line for line in text.splitlines() if line.startswith("#SBATCH --time=")]
            assert limits == [f"#SBATCH --time={_slurm_time(hours * 3600 * 1.2)}"] * components
    assert _slurm_time(0.5 * 3600 * 1.2) == "0-00:36:00" and _slurm_time(30 * 3600 * 1.2) == "1-12:00:00"


def test_heterogeneous_slurm_job_runs_every_group_and_fails_when_one_does(tmp_path):
    from test_export_hostile import run_with_stubs

    text = export_plan("slurm", MODEL, TRAIN96, HET, MIXED, TOKENS)
    run, calls = run_with_stubs(text, tmp_path / "ok")
    assert run.returncode == 0, run.stderr
    sruns = [c for c in calls if c[0] == "srun"]
    assert sorted(_flags(c)["--het-group"] for c in sruns) == ["0", "1"]
    assert {_flags(c)["--rdzv-endpoint"] for c in sruns} == {"n-0:29500"}  # the first host of het group 0
    assert {_flags(c)["--rdzv-id"] for c in sruns} == {"4242"}
    failed, _ = run_with_stubs(text, tmp_path / "fail", env={"STUB_FAIL": "srun"})
    assert failed.returncode != 0


def test_slurm_script_outside_slurm_stops_naming_sbatch(tmp_path):
    from test_export_hostile import run_with_stubs

    run, calls = run_with_stubs(export_plan("slurm", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS), tmp_path,
                                unset=("SLURM_JOB_NODELIST",))
    assert run.returncode != 0 and "sbatch" in run.stderr and not [c for c in calls if c[0] == "srun"]


# --- uneven pipeline stages ------------------------------------------------------------------------------------------
GPT2_MCORE = TrainingSpec(seq_len=1024, global_batch=64, framework="megatron", distributed_optimizer=True)
FOUR = parse_cluster_yaml("name: four\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 4}]")


def _uneven_plan(vp: int = 1) -> Plan:
    """GPT-2 (12 layers) on 4 stages as 2 + 4 + 4 + 2 layers (vp = 1: a planner plan; vp = 2: the same split)."""
    from dataclasses import replace

    base = rank_plans(ZOO["gpt2"], GPT2_MCORE, FOUR, tokens=TOKENS, micro_batch=1)
    plan = next(p for p in base.plans if p.pp == 4)
    return replace(plan, vp=vp, first_stage_layers=2, last_stage_layers=2)


def test_an_uneven_megatron_plan_carries_its_first_and_last_stage_layers():
    flags = _flags(_shell_words(export_plan("megatron", ZOO["gpt2"], GPT2_MCORE, _uneven_plan(), FOUR, TOKENS)))
    assert flags["--decoder-first-pipeline-num-layers"] == "2" and flags["--decoder-last-pipeline-num-layers"] == "2"
    assert "--num-layers-per-virtual-pipeline-stage" not in flags
    assert "--num-virtual-stages-per-pipeline-rank" not in flags


def test_an_uneven_interleaved_plan_names_its_virtual_stages_per_rank_not_layers_per_chunk():
    # Megatron's validate_args: with --decoder-first/last-pipeline-num-layers the interleaving must be given as
    # --num-virtual-stages-per-pipeline-rank
    flags = _flags(_shell_words(export_plan("megatron", ZOO["gpt2"], GPT2_MCORE, _uneven_plan(2), FOUR, TOKENS)))
    assert flags["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert "--num-layers-per-virtual-pipeline-stage" not in flags
    assert flags["--decoder-first-pipeline-num-layers"] == "2"


def test_only_the_set_end_of_an_uneven_plan_gets_its_flag():
    from dataclasses import replace

    plan = replace(_uneven_plan(), pp=3, first_stage_layers=0, last_stage_layers=2)  # 5 + 5 + 2 of 12
    flags = _flags(_shell_words(export_plan("megatron", ZOO["gpt2"], GPT2_MCORE, plan, FOUR, TOKENS)))
    assert flags["--decoder-last-pipeline-num-layers"] == "2" and "--decoder-first-pipeline-num-layers" not in flags


def test_slurm_and_kubernetes_launch_the_uneven_split_too():
    plan = _uneven_plan()
    assert "--decoder-first-pipeline-num-layers 2" in export_plan("slurm", ZOO["gpt2"], GPT2_MCORE, plan, FOUR, TOKENS)
    job = yaml.safe_load(export_plan("kubernetes", ZOO["gpt2"], GPT2_MCORE, plan, FOUR, TOKENS))
    command = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--decoder-last-pipeline-num-layers") + 1] == "2"


@pytest.mark.parametrize("fmt", ["deepspeed", "accelerate"])
def test_deepspeed_and_accelerate_refuse_an_uneven_plan_naming_it_and_megatron(fmt):
    plan = _uneven_plan()
    with pytest.raises(SpecError) as err:
        export_plan(fmt, ZOO["gpt2"], GPT2_MCORE, plan, FOUR, TOKENS)
    assert plan.label() in str(err.value) and "export it for megatron" in str(err.value)


def test_torchtitan_lightens_the_ends_of_an_uneven_plan_and_refuses_it_interleaved():
    # torchtitan's pipeline_parallel_first/last_stage_less_layers: (12 + 2 + 2) / 4 = 4 per stage, less 2 at each end
    titan = tomllib.loads(export_plan("torchtitan", ZOO["gpt2"], GPT2_MCORE, _uneven_plan(), FOUR, TOKENS))
    assert titan["parallelism"]["pipeline_parallel_first_stage_less_layers"] == 2
    assert titan["parallelism"]["pipeline_parallel_last_stage_less_layers"] == 2
    with pytest.raises(SpecError) as err:
        export_plan("torchtitan", ZOO["gpt2"], GPT2_MCORE, _uneven_plan(2), FOUR, TOKENS)
    assert _uneven_plan(2).label() in str(err.value) and "megatron" in str(err.value)


def test_torchtitan_even_pipelines_take_no_layers_off_their_ends():
    # torchtitan's default 1 / 1 would put 8, 9, 8, 7 of 32 layers on 4 stages (and 9 virtual stages of 4 layers on
    # 4 ranks with interleaving): an even plan writes 0 / 0
    for text in _titan_exports():
        par = tomllib.loads(text)["parallelism"]
        if par["pipeline_parallel_degree"] > 1:
            assert par["pipeline_parallel_first_stage_less_layers"] == 0
            assert par["pipeline_parallel_last_stage_less_layers"] == 0


def test_a_plan_whose_stages_cannot_hold_the_layers_is_refused_naming_the_rule():
    from dataclasses import replace

    with pytest.raises(SpecError) as err:  # 12 layers do not split evenly over 5 stages
        export_plan("megatron", ZOO["gpt2"], GPT2_MCORE, replace(_uneven_plan(), pp=5, first_stage_layers=0,
                                                                 last_stage_layers=0), FOUR, TOKENS)
    assert err.value.field == "pp"


def test_uneven_405b_plan_from_the_planner_exports_for_megatron():
    from test_plans import H100_1024, LLAMA_405B, MCORE

    from frenzy_core.training import lighter_chunk_layout

    uneven = [p for p in rank_plans(LLAMA_405B, MCORE, H100_1024, tokens=TOKENS).plans if p.uneven]
    # the planner's first uneven plan, and the first of each way Megatron writes one: whole chunks at the ends
    # (--decoder-first/last-pipeline-num-layers) or one layer lighter (the account-for-embedding/loss layout)
    picks = {any(lighter_chunk_layout(p.vp, p.first_stage_layers, p.last_stage_layers)): p for p in reversed(uneven)}
    assert uneven and uneven[0] in picks.values()
    for lighter, plan in picks.items():
        words = _shell_words(export_plan("megatron", LLAMA_405B, MCORE, plan, H100_1024, TOKENS))
        flags = _flags(words)
        first, last = lighter_chunk_layout(plan.vp, plan.first_stage_layers, plan.last_stage_layers)
        if lighter:  # 126 layers + the embedding's and the loss' slots over p x vp chunks
            assert ("--account-for-embedding-in-pipeline-split" in words) == first
            assert ("--account-for-loss-in-pipeline-split" in words) == last
            assert "--decoder-first-pipeline-num-layers" not in flags
            assert (126 + first + last) % (plan.pp * plan.vp) == 0
        else:
            for flag, value in (("--decoder-first-pipeline-num-layers", plan.first_stage_layers),
                                ("--decoder-last-pipeline-num-layers", plan.last_stage_layers)):
                assert flags.get(flag) == (str(value) if value else None)
        assert flags["--pipeline-model-parallel-size"] == str(plan.pp)


def test_megatron_refuses_per_op_sac_naming_the_recompute_field():
    # Megatron has no per-op SAC; its selective recompute keeps more than the plan counts (export.megatron_args)
    train = TRAIN.model_copy(update={"recompute": "op-sac"})
    for fmt in ("megatron", "slurm", "kubernetes"):
        with pytest.raises(SpecError) as err:
            export_plan(fmt, MODEL, train, SPREAD, CLUSTER, TOKENS)
        assert err.value.field == "recompute" and "torchtitan" in str(err.value)


@pytest.mark.parametrize(("every", "interval"), [(1, 1), (3, 3)])
def test_deepspeed_pipeline_checkpoints_layers_in_chunks_of_the_stride(every, interval):
    # runtime/pipe/engine.py hands pipeline.activation_checkpoint_interval to PipelineModule
    full = TRAIN.model_copy(update={"recompute": "full", "recompute_every": every})
    assert json.loads(export_plan("deepspeed", MODEL, full, SPREAD, CLUSTER, TOKENS))["pipeline"][
        "activation_checkpoint_interval"] == interval
    # selective: DeepSpeed's pipeline engine has no such knob (the model code checkpoints), so none is written
    assert "activation_checkpoint_interval" not in json.loads(
        export_plan("deepspeed", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))["pipeline"]


def test_accelerate_says_how_to_get_full_recompute_past_its_selective_flag():
    # accelerate's megatron_lm_recompute_activations means Megatron's selective recompute (MegatronLMPlugin)
    full = TRAIN.model_copy(update={"recompute": "full", "recompute_every": 2})
    text = export_plan("accelerate", MODEL, full, SPREAD, CLUSTER, TOKENS)
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert any("'recompute_method': 'block', 'recompute_num_layers': 8" in line for line in comments), comments
    assert yaml.safe_load(text)["megatron_lm_config"]["megatron_lm_recompute_activations"] is True
    plain = export_plan("accelerate", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS)
    assert "recompute_granularity" not in plain


def test_megatron_export_names_the_recompute_modules_after_the_attention_core():
    # transformer_config.py: recompute_modules defaults to ["core_attn"] (recompute selective); layernorm / moe_act
    # join it, or stand alone (recompute none); moe_act needs --moe-grouped-gemm (its __post_init__ raises otherwise)
    from frenzy_core.export import megatron_args

    def words(**update):
        return [str(w) for w in megatron_args(MODEL, TRAIN.model_copy(update={"framework": "megatron", **update}),
                                              SPREAD, TOKENS)]

    def modules(ws):
        i = ws.index("--recompute-modules")
        return ws[i + 1:i + 1 + next((k for k, w in enumerate(ws[i + 1:]) if w.startswith("--")), len(ws) - i - 1)]

    sel = words(recompute="selective", recompute_modules=("layernorm", "moe_act"), moe_grouped_gemm=True)
    assert sel[sel.index("--recompute-granularity") + 1] == "selective"
    assert modules(sel) == ["core_attn", "layernorm", "moe_act"]
    alone = words(recompute="none", recompute_modules=("layernorm",))
    assert alone[alone.index("--recompute-granularity") + 1] == "selective" and modules(alone) == ["layernorm"]
    assert "--recompute-modules" not in words(recompute="selective")
    with pytest.raises(SpecError) as err:
        words(recompute="none", recompute_modules=("moe_act",))
    assert err.value.field == "recompute_modules" and "--moe-grouped-gemm" in str(err.value)
