"""Launch exports: each output parses (shlex, json, tomllib, yaml) and says what the plan says."""

from __future__ import annotations

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
    assert cfg["activation_checkpoint"]["mode"] == "selective"
    assert tr["compile"] is False


def test_torchtitan_compile_follows_the_training():
    compiled = TRAIN.model_copy(update={"framework": "fsdp2", "compile": True})
    assert tomllib.loads(export_plan("torchtitan", MODEL, compiled, SPREAD, CLUSTER, TOKENS))["training"]["compile"]


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
