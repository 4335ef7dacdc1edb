"""Launch files for a plan: Megatron-LM arguments, a DeepSpeed config, a torchtitan TOML, an accelerate config, a
SLURM batch script with torchrun and a Kubernetes manifest. Each is text a user saves and runs; nothing is written.

Flag and key names were checked against each project's source (read 2026-12-01):
- Megatron-LM `megatron/training/arguments.py` (`_add_distributed_args`, `_add_training_args`, `_add_network_size_args`):
  --tensor-model-parallel-size, --pipeline-model-parallel-size, --micro-batch-size, --global-batch-size,
  --seq-length, --recompute-granularity {full,selective}, --recompute-method, --recompute-num-layers,
  --use-distributed-optimizer, --sequence-parallel, --group-query-attention, --num-query-groups;
- DeepSpeed `deepspeed/runtime/config.py` / docs "DeepSpeed Configuration JSON": train_batch_size =
  train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel size, zero_optimization.stage,
  bf16.enabled, activation_checkpointing, tensor_parallel.autotp_size (AutoTP training), pipeline.stages;
- torchtitan `torchtitan/config/job_config.py` (commit 000204a4): [training] local_batch_size, global_batch_size,
  seq_len, steps, mixed_precision_param, compile; [parallelism] data_parallel_replicate_degree,
  data_parallel_shard_degree, tensor_parallel_degree, pipeline_parallel_degree, pipeline_parallel_microbatch_size;
  [activation_checkpoint] mode;
- accelerate `src/accelerate/commands/launch.py` (Megatron-LM arguments) and `commands/config/cluster.py`:
  distributed_type, num_machines, num_processes, megatron_lm_config.megatron_lm_tp_degree / _pp_degree /
  _num_micro_batches / _sequence_parallelism / _recompute_activations / _use_distributed_optimizer, deepspeed_config;
- Kubeflow training-operator `PyTorchJob` (kubeflow.org/v1: pytorchReplicaSpecs Master/Worker, nprocPerNode) and the
  JobSet API (jobset.x-k8s.io/v1alpha2: replicatedJobs), GPUs as the `nvidia.com/gpu` resource and the node selector
  `nvidia.com/gpu.product` that NVIDIA GPU Feature Discovery sets;
- SLURM `sbatch` heterogeneous jobs (`#SBATCH hetjob`, `srun --het-group`), torchrun's c10d rendezvous (nodes may
  run different numbers of processes).

Where a plan's GPUs sit on nodes that take different numbers of GPUs (8 on one, 4 on another), the SLURM script
becomes a heterogeneous job and the Kubernetes manifest a JobSet with one replicated job per node shape.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass

import numpy as np
import yaml

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.models import ModelSpec
from frenzy_core.packing import ClusterIndex, place
from frenzy_core.plans import Plan, titan_experts_fit
from frenzy_core.training import TrainingSpec

FORMATS = ("megatron", "deepspeed", "torchtitan", "accelerate", "slurm", "kubernetes")
# The export a framework's users reach for first (TrainingSpec.framework, where the training spec has one).
FRAMEWORK_EXPORT = {"megatron": "megatron", "deepspeed": "deepspeed", "fsdp2": "torchtitan", "hf": "accelerate",
                    "pytorch": "slurm"}
RDZV_PORT = 29500  # torchrun's default master port
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"  # NGC PyTorch container: torch, NCCL and torchrun
DEFAULT_SCRIPT = "pretrain_gpt.py"  # Megatron-LM's GPT pre-training entry point
# NVIDIA GPU Feature Discovery labels nodes with nvidia.com/gpu.product = the NVML device name, spaces as dashes.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRODUCTS = {
    "A100-40GB": "NVIDIA-A100-SXM4-40GB", "A100-80GB": "NVIDIA-A100-SXM4-80GB", "H100-80GB": "NVIDIA-H100-80GB-HBM3",
    "H200-141GB": "NVIDIA-H200", "L40S": "NVIDIA-L40S", "A10": "NVIDIA-A10", "RTX-3090": "NVIDIA-GeForce-RTX-3090",
    "RTX-4090": "NVIDIA-GeForce-RTX-4090", "RTX-2080Ti": "NVIDIA-GeForce-RTX-2080-Ti",
    "V100-32GB": "Tesla-V100-SXM2-32GB", "V100-16GB": "Tesla-V100-SXM2-16GB", "P100-16GB": "Tesla-P100-PCIE-16GB",
    "T4": "Tesla-T4",
}


@dataclass(frozen=True)
class NodeGroup:
    """Nodes that each give the plan the same number of GPUs: one SLURM het-job component / one replicated job."""

    nodes: tuple[str, ...]  # node names from the cluster
    gpus_per_node: int  # GPUs the plan takes on each of them (a multiple of t)


def node_groups(plan: Plan, cluster: Cluster) -> tuple[NodeGroup, ...]:
    """Where the plan runs on an empty cluster (HAS placement), grouped by GPUs taken per node, largest first.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> c = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8, count: 2}]")
    >>> p = Plan("A100-80GB", 3, 4, 1, 12, 1, 1, 0, 0, 0, 1.0, 1.0, 1.0, 1.0, 1.0)
    >>> [(g.nodes, g.gpus_per_node) for g in node_groups(p, c)]
    [(('a-0',), 8), (('a-1',), 4)]
    """
    index = ClusterIndex.from_cluster(cluster)
    got = place(index, index.node_gpus.copy(), plan.num_gpus, tp=plan.tp, gpu_types=(plan.gpu_type,))
    if got is None:
        raise SpecError("plan", f"{plan.label()} does not fit {cluster.name!r} even when it is empty; "
                        "export a plan ranked for this cluster")
    by_size: dict[int, list[str]] = {}
    for node, n in got.nodes:
        by_size.setdefault(n, []).append(index.node_names[node])
    return tuple(NodeGroup(tuple(names), size) for size, names in sorted(by_size.items(), reverse=True))


def train_iters(training: TrainingSpec, tokens: float) -> int:
    """Optimizer steps to see the token budget: ceil(tokens / (global batch x sequence length))."""
    return max(1, math.ceil(tokens / training.tokens_per_step()))


def megatron_args(model: ModelSpec, training: TrainingSpec, plan: Plan, tokens: float) -> list[str]:
    """Megatron-LM `pretrain_gpt.py` arguments for the plan (flag names from megatron/training/arguments.py)."""
    args = ["--tensor-model-parallel-size", plan.tp, "--pipeline-model-parallel-size", plan.pp,
            *(["--context-parallel-size", plan.cp] if plan.cp > 1 else []),
            *(["--num-layers-per-virtual-pipeline-stage", model.num_layers // (plan.pp * plan.vp)] if plan.vp > 1
              else []),
            "--micro-batch-size", plan.micro_batch, "--global-batch-size", training.global_batch,
            "--seq-length", training.seq_len, "--max-position-embeddings", max(training.seq_len, model.max_positions),
            "--num-layers", model.num_layers, "--hidden-size", model.hidden_size, "--ffn-hidden-size", model.ffn,
            "--num-attention-heads", model.num_heads, "--train-iters", train_iters(training, tokens)]
    if model.kv_heads != model.num_heads:
        args += ["--group-query-attention", "--num-query-groups", model.kv_heads]
    if model.mlp_kind == "swiglu":
        args += ["--swiglu"]
    if model.norm_kind == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    if model.position_kind == "rotary":
        args += ["--position-embedding-type", "rope"]
    if not model.tie_embeddings:
        args += ["--untie-embeddings-and-output-weights"]
    if not model.bias:
        args += ["--disable-bias-linear"]
    if training.precision in ("bf16-master", "amp"):
        args += ["--bf16"]
    if training.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1]
    elif training.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    if training.distributed_optimizer or training.zero_stage >= 1:  # Megatron shards optimizer states like ZeRO-1
        args += ["--use-distributed-optimizer"]
    if training.sequence_parallel and plan.tp > 1:
        args += ["--sequence-parallel"]
    args += ["--attention-dropout", training.dropout, "--hidden-dropout", training.dropout]
    if training.attention == "flash":
        args += ["--attention-backend", "flash"]
    if model.is_moe:  # TransformerConfig / ModelParallelConfig fields (megatron/core/transformer/transformer_config.py)
        args += ["--num-experts", model.num_experts, "--moe-router-topk", model.moe_top_k,
                 "--moe-ffn-hidden-size", model.expert_ffn, "--expert-model-parallel-size", plan.ep,
                 "--moe-token-dispatcher-type", "alltoall"]
        if model.num_shared_experts:
            args += ["--moe-shared-expert-intermediate-size", model.num_shared_experts * model.expert_ffn]
        if model.first_k_dense:
            args += ["--moe-layer-freq", f"([0]*{model.first_k_dense}+[1]*{model.num_moe_layers})"]
        if training.moe_grouped_gemm:
            args += ["--moe-grouped-gemm"]
        if plan.tp > 1 and "--sequence-parallel" not in args:  # arguments.py: MoE with tensor parallelism needs SP
            args += ["--sequence-parallel"]
    return [str(a) for a in args]


def _shell_word(w: str) -> str:
    """A word as the shell must see it: quoted unless it is plain (letters, digits, _@%+=:,./- and the $VAR
    references the launch scripts rely on), e.g. Megatron's `--moe-layer-freq '([0]*3+[1]*58)'`."""
    return w if re.fullmatch(r"[\w@%+=:,./$-]+", w) else shlex.quote(w)


def _continued(words: list[str], indent: str = "    ") -> str:
    """`prog --flag value` as shell lines joined by backslash-newline, one flag (and its value) per line."""
    words = [_shell_word(w) for w in words]
    lines: list[str] = [words[0]]
    for w in words[1:]:
        last = lines[-1]
        if not w.startswith("--") and last.startswith("--") and "=" not in last and " " not in last:
            lines[-1] += f" {w}"  # the value of the flag on the line above
        else:
            lines.append(w)
    return f" \\\n{indent}".join(lines)


def _torchrun(nnodes: int, nproc: int, rdzv_endpoint: str, rdzv_id: str) -> list[str]:
    return ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]


def export_megatron(model, training, plan, cluster, tokens) -> str:
    groups = node_groups(plan, cluster)
    nodes = sum(len(g.nodes) for g in groups)
    head = (f"# Megatron-LM arguments for {plan.label()}: data-parallel size {plan.dp} = {plan.num_gpus} GPUs / "
            f"(t={plan.tp} x p={plan.pp}{f' x cp={plan.cp}' if plan.cp > 1 else ''}); {plan.grad_accum} micro-batches "
            f"per step"
            + (f"; experts over ep={plan.ep} of the d x cp ranks" if plan.ep > 1 else "") + "\n")
    launch = _torchrun(nodes, groups[0].gpus_per_node, f"$MASTER_ADDR:{RDZV_PORT}", "$JOB_ID") if len(groups) == 1 \
        else ["torchrun"]
    note = "" if len(groups) == 1 else "# nodes take different GPU counts: launch with --export slurm or kubernetes\n"
    return head + note + _continued([*launch, DEFAULT_SCRIPT, *megatron_args(model, training, plan, tokens)]) + "\n"


def deepspeed_config(model, training, plan, cluster, tokens) -> dict:
    """DeepSpeed config JSON as a dict; train_batch_size = micro x accumulation x data-parallel size (plan's d)."""
    if plan.cp > 1:
        raise SpecError("export", f"DeepSpeed has no ring-attention context parallelism (its Ulysses sequence "
                        f"parallelism is another scheme); export this cp={plan.cp} plan for megatron or torchtitan")
    if plan.vp > 1:
        raise SpecError("export", f"DeepSpeed's pipeline engine has no interleaved schedule; export this vp={plan.vp} "
                        f"plan for megatron or torchtitan, or pick a plan with vp=1")
    if plan.pp > 1 and training.zero_stage >= 2:
        raise SpecError("zero_stage", f"DeepSpeed's pipeline engine runs with ZeRO stage 0 or 1, not "
                        f"{training.zero_stage}; pick a plan with p=1 or set zero_stage to 1")
    cfg: dict = {
        "train_batch_size": training.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": max(training.zero_stage, int(training.distributed_optimizer))},
        "bf16": {"enabled": training.precision in ("bf16-master", "amp")},
        "optimizer": {"type": "AdamW" if training.optimizer != "sgd" else "SGD", "params": {"lr": 3e-4}},
        "steps_per_print": 100,
    }
    # the run's own bucket / live / reuse sizes (0: DeepSpeed's defaults, left out)
    for field in ("reduce_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance"):
        if getattr(training, field):
            cfg["zero_optimization"][field] = getattr(training, field)
    if training.recompute != "none":
        cfg["activation_checkpointing"] = {"partition_activations": plan.tp > 1, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False}
    if plan.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": plan.tp}
    if plan.pp > 1:
        cfg["pipeline"] = {"stages": plan.pp, "partition": "uniform"}
    return cfg


def export_deepspeed(model, training, plan, cluster, tokens) -> str:
    cfg = deepspeed_config(model, training, plan, cluster, tokens)
    if plan.ep > 1:
        # DeepSpeed-MoE takes the expert-parallel size in the model code (deepspeed/moe/layer.py: MoE(...,
        # ep_size=N)), not in the config; JSON has no comments, so it rides in a top-level key DeepSpeed does not read
        cfg["_frenzy_moe"] = {"ep_size": plan.ep, "set_in": "deepspeed.moe.layer.MoE(..., ep_size=ep_size)"}
    return json.dumps(cfg, indent=2) + "\n"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string: JSON's escaping is valid TOML


def titan_expert_degree(model, training, plan) -> int:
    """torchtitan's expert_parallel_degree for the plan. torchtitan (configs.py, parallel_dims.py `_validate` at
    b5bcd76) keeps experts whole and borrows the EP ranks from dp_shard x cp x tp; the plan splits the experts over
    ep x t ranks (Megatron's etp = t), the same experts per GPU, so torchtitan's degree is ep x t. It must divide the
    experts and dp_shard x cp x tp."""
    degree = plan.ep * plan.tp if plan.ep > 1 else 1
    shard = plan.dp if (training.zero_stage >= 1 or training.distributed_optimizer) else 1
    if plan.ep > 1 and not titan_experts_fit(model.num_experts, shard, plan.tp, plan.cp, plan.ep):
        raise SpecError("export", f"torchtitan needs expert_parallel_degree = ep x t = {degree} to divide the "
                        f"{model.num_experts} experts and dp_shard x cp x tp = {shard * plan.cp * plan.tp}; pick a "
                        f"plan with a smaller ep or t, or shard the parameters (zero_stage 3)")
    return degree


def torchtitan_config(model, training, plan, cluster, tokens) -> dict[str, dict]:
    """torchtitan JobConfig sections. ZeRO-3 (or FSDP) shards over d; ZeRO-1/2 shard with reshard_after_forward off
    (FSDP2 keeps parameters gathered between forward and backward, like ZeRO-2); ZeRO-0 replicates (DDP)."""
    shard = training.zero_stage >= 1 or training.distributed_optimizer
    local = plan.micro_batch * plan.grad_accum if plan.pp > 1 else plan.micro_batch
    ep = titan_expert_degree(model, training, plan) if model.is_moe else 1
    return {
        "job": {"description": f"{model.name}: {plan.label()} (Frenzy Planner)"},
        "model": {"name": "llama3", "flavor": model.name},
        "optimizer": {"name": "AdamW", "lr": 3e-4},
        "training": {"local_batch_size": local, "global_batch_size": training.global_batch,
                     "seq_len": training.seq_len, "steps": train_iters(training, tokens),
                     "mixed_precision_param": "float32" if training.precision == "fp32" else "bfloat16",
                     "compile": training.compile},
        "parallelism": {"data_parallel_replicate_degree": 1 if shard else plan.dp,
                        "data_parallel_shard_degree": plan.dp if shard else 1,
                        "fsdp_reshard_after_forward": "default" if training.zero_stage >= 3 or not shard else "never",
                        "tensor_parallel_degree": plan.tp, "pipeline_parallel_degree": plan.pp,
                        "pipeline_parallel_microbatch_size": plan.micro_batch,
                        "context_parallel_degree": plan.cp,
                        # torchtitan/config/configs.py (b5bcd76): the interleaved schedule and its chunk size
                        **({"pipeline_parallel_schedule": "Interleaved1F1B",
                            "pipeline_parallel_layers_per_stage": model.num_layers // (plan.pp * plan.vp)}
                           if plan.vp > 1 else {}),
                        **({"expert_parallel_degree": ep} if model.is_moe else {})},
        "activation_checkpoint": {"mode": training.recompute},
    }


def export_torchtitan(model, training, plan, cluster, tokens) -> str:
    head = (f"# torchtitan job config for {plan.label()}; run with torchrun --nproc-per-node ... "
            f"-m torchtitan.train --job.config_file this.toml\n"
            f"# [model] name/flavor: set them to torchtitan's registered model closest to {model.name}\n")
    body = "\n".join(f"[{section}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items())
                     for section, values in torchtitan_config(model, training, plan, cluster, tokens).items())
    return head + body


def accelerate_config(model, training, plan, cluster, tokens) -> dict:
    """An `accelerate launch --config_file` YAML as a dict (one machine rank; set machine_rank per node)."""
    for name, value, what in (("cp", plan.cp, "context-parallel degree"), ("vp", plan.vp, "interleaved pipeline"),
                              ("ep", plan.ep, "expert-parallel degree")):
        if value > 1:
            raise SpecError("export", f"accelerate's launcher config has no {what}; export this {name}={value} plan "
                            f"for megatron or torchtitan")
    groups = node_groups(plan, cluster)
    if len(groups) > 1:
        sizes = " + ".join(f"{len(g.nodes)} x {g.gpus_per_node}" for g in groups)
        raise SpecError("export", f"accelerate starts the same number of processes on every machine, but this plan "
                        f"takes {sizes} GPUs per node; use --export slurm or kubernetes")
    machines = len(groups[0].nodes)
    cfg: dict = {"compute_environment": "LOCAL_MACHINE", "num_machines": machines, "num_processes": plan.num_gpus,
                 "machine_rank": 0, "main_process_ip": groups[0].nodes[0] if machines > 1 else None,
                 "main_process_port": RDZV_PORT, "rdzv_backend": "static", "same_network": True, "use_cpu": False,
                 "mixed_precision": "no" if training.precision == "fp32" else "bf16", "main_training_function": "main"}
    if plan.tp > 1 or plan.pp > 1:
        cfg["distributed_type"] = "MEGATRON_LM"
        cfg["megatron_lm_config"] = {
            "megatron_lm_tp_degree": plan.tp, "megatron_lm_pp_degree": plan.pp,
            "megatron_lm_num_micro_batches": plan.grad_accum,
            "megatron_lm_sequence_parallelism": bool(training.sequence_parallel and plan.tp > 1),
            "megatron_lm_recompute_activations": training.recompute != "none",
            "megatron_lm_use_distributed_optimizer": bool(training.distributed_optimizer or training.zero_stage),
            "megatron_lm_gradient_clipping": 1.0,
        }
    elif training.zero_stage > 0:
        cfg["distributed_type"] = "DEEPSPEED"
        cfg["deepspeed_config"] = {"zero_stage": training.zero_stage, "gradient_accumulation_steps": plan.grad_accum,
                                   "gradient_clipping": 1.0, "offload_optimizer_device": "none",
                                   "offload_param_device": "none", "zero3_init_flag": training.zero_stage == 3}
    else:
        cfg["distributed_type"] = "MULTI_GPU" if plan.num_gpus > 1 else "NO"
    return cfg


def export_accelerate(model, training, plan, cluster, tokens) -> str:
    head = f"# accelerate config for {plan.label()}: accelerate launch --config_file this.yaml train.py\n"
    return head + yaml.safe_dump(accelerate_config(model, training, plan, cluster, tokens), sort_keys=False)


def _slurm_time(seconds: float) -> str:
    """sbatch --time as days-hours:minutes:seconds, rounded up to the minute."""
    minutes = max(1, math.ceil(seconds / 60))
    d, rem = divmod(minutes, 1440)
    return f"{d}-{rem // 60:02d}:{rem % 60:02d}:00"


def export_slurm(model, training, plan, cluster, tokens) -> str:
    groups = node_groups(plan, cluster)
    nodes = sum(len(g.nodes) for g in groups)
    job = _job_name(model, plan)
    lines = ["#!/bin/bash",
             f"# {plan.label()} on {cluster.name}: predicted {plan.time_to_train_s / 3600:,.1f} h to train "
             f"{tokens:.3g} tokens (time limit: prediction + 20%)"]
    for i, g in enumerate(groups):
        if i:
            lines.append("#SBATCH hetjob")
        else:
            lines += [f"#SBATCH --job-name={job}", f"#SBATCH --time={_slurm_time(plan.time_to_train_s * 1.2)}"]
        lines += [f"#SBATCH --nodes={len(g.nodes)}", "#SBATCH --ntasks-per-node=1",
                  f"#SBATCH --gpus-per-node={g.gpus_per_node}", f"#SBATCH --nodelist={','.join(g.nodes)}"]
    lines += ["set -euo pipefail", ""]
    nodelist = "SLURM_JOB_NODELIST_HET_GROUP_0" if len(groups) > 1 else "SLURM_JOB_NODELIST"
    lines += [f'MASTER_ADDR=$(scontrol show hostnames "${nodelist}" | head -n 1)', ""]
    train = [DEFAULT_SCRIPT, *megatron_args(model, training, plan, tokens)]
    for i, g in enumerate(groups):
        srun = ["srun"] + ([f"--het-group={i}"] if len(groups) > 1 else [])
        cmd = _continued([*srun, *_torchrun(nodes, g.gpus_per_node, f"$MASTER_ADDR:{RDZV_PORT}", "$SLURM_JOB_ID"),
                          *train])
        lines.append(cmd + (" &" if len(groups) > 1 else ""))
    if len(groups) > 1:
        lines.append("wait")
    return "\n".join(lines) + "\n"


def _job_name(model: ModelSpec, plan: Plan) -> str:
    """A DNS-1123 label: lowercase letters, digits and dashes, at most 40 characters here."""
    extra = f"{f'c{plan.cp}' if plan.cp > 1 else ''}{f'e{plan.ep}' if plan.ep > 1 else ''}"
    raw = f"{model.name}-{plan.gpu_type}-d{plan.dp}t{plan.tp}p{plan.pp}{extra}".lower()
    clean = "".join(ch if ch.isalnum() else "-" for ch in raw).strip("-")
    while "--" in clean:
        clean = clean.replace("--", "-")
    return clean[:40].strip("-") or "frenzy-job"


def _pod_spec(plan: Plan, gpus: int, command: list[str], image: str) -> dict:
    return {"nodeSelector": {GPU_PRODUCT_LABEL: GPU_PRODUCTS.get(plan.gpu_type, plan.gpu_type)},
            "containers": [{"name": "pytorch", "image": image, "command": command,
                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}


def kubernetes_manifest(model, training, plan, cluster, tokens, image: str = DEFAULT_IMAGE) -> dict:
    """A Kubeflow PyTorchJob when every node takes the same GPU count, else a JobSet (one replicated job per shape)."""
    groups = node_groups(plan, cluster)
    nodes = sum(len(g.nodes) for g in groups)
    name = _job_name(model, plan)
    train = [DEFAULT_SCRIPT, *megatron_args(model, training, plan, tokens)]
    if len(groups) == 1:
        g = groups[0]
        # the training operator sets the PET_* rendezvous variables torchrun reads (master address, node rank)
        command = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={g.gpus_per_node}", *train]
        replica = lambda n: {"replicas": n, "restartPolicy": "OnFailure",  # noqa: E731
                             "template": {"spec": _pod_spec(plan, g.gpus_per_node, command, image)}}
        specs = {"Master": replica(1)}
        if nodes > 1:
            specs["Worker"] = replica(nodes - 1)
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
                "spec": {"nprocPerNode": str(g.gpus_per_node), "pytorchReplicaSpecs": specs}}
    head = f"{name}-g0-0-0.{name}"  # JobSet pod DNS: <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>
    jobs = []
    for i, g in enumerate(groups):
        command = _torchrun(nodes, g.gpus_per_node, f"{head}:{RDZV_PORT}", name) + train
        jobs.append({"name": f"g{i}", "replicas": 1, "template": {"spec": {
            "parallelism": len(g.nodes), "completions": len(g.nodes), "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {**_pod_spec(plan, g.gpus_per_node, command, image), "restartPolicy": "Never"}}}}})
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"network": {"enableDNSHostnames": True}, "replicatedJobs": jobs}}


def export_kubernetes(model, training, plan, cluster, tokens) -> str:
    return yaml.safe_dump(kubernetes_manifest(model, training, plan, cluster, tokens), sort_keys=False)


_EXPORTERS = {"megatron": export_megatron, "deepspeed": export_deepspeed, "torchtitan": export_torchtitan,
              "accelerate": export_accelerate, "slurm": export_slurm, "kubernetes": export_kubernetes}
FILE_NAMES = {"megatron": "megatron_args.sh", "deepspeed": "ds_config.json", "torchtitan": "torchtitan.toml",
              "accelerate": "accelerate_config.yaml", "slurm": "train.sbatch", "kubernetes": "job.yaml"}


def export_plan(fmt: str, model: ModelSpec, training: TrainingSpec, plan: Plan, cluster: Cluster,
                tokens: float = 1e10) -> str:
    """The launch file `fmt` (one of FORMATS) for `plan`, as text.

    >>> from frenzy_core.cluster import parse_cluster_yaml; from frenzy_core.models import ZOO
    >>> c = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8}]")
    >>> p = Plan("A100-80GB", 2, 2, 2, 8, 1, 32, 0, 0, 0, 1.0, 1.0, 1.0, 1.0, 1.0)
    >>> json.loads(export_plan("deepspeed", ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=64), p, c)
    ...            )["gradient_accumulation_steps"]
    32
    """
    if fmt not in _EXPORTERS:
        raise SpecError("export", f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    if plan.dp * plan.micro_batch * plan.grad_accum != training.global_batch:
        raise SpecError("plan", f"d x micro-batch x accumulation = {plan.dp} x {plan.micro_batch} x "
                        f"{plan.grad_accum} is not the global batch {training.global_batch}; export a plan ranked "
                        "for this training setup")
    if not (tokens > 0 and np.isfinite(tokens)):
        raise SpecError("tokens", f"the token budget must be a positive, finite number, got {tokens}")
    return _EXPORTERS[fmt](model, training, plan, cluster, tokens)
