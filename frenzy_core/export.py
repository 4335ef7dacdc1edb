"""Launch files for a plan: Megatron-LM arguments, a DeepSpeed config, a torchtitan TOML, an accelerate config, a
SLURM batch script with torchrun and a Kubernetes manifest. Each is text a user saves and runs; nothing is written.

Every file is written by its format's own writer, never by pasting names into text: shell words through
`shlex.quote` (the only unquoted expansions are this module's own `${VAR}` references, `_Expand`), TOML through
`tomli_w`, YAML through `yaml.safe_dump`, JSON through `json.dumps`. Names reach comments only through `_printable`
(no newline, carriage return or other control character can start a line), `#SBATCH` values are checked to be
plain words, and Kubernetes names are RFC 1123 labels. Model, cluster, GPU type and node names are validated at the
boundary (`limits.check_name`); the exports stay inert for values built without validation too.

Flag and key names were checked against each project's source (read 2026-12-01):
- Megatron-LM `megatron/training/arguments.py` (`_add_distributed_args`, `_add_training_args`, `_add_network_size_args`,
  at 307dcf37; at d98e8a64 the same flags come from `megatron/training/config/training_config.py`'s dataclasses):
  --tensor-model-parallel-size, --pipeline-model-parallel-size, --micro-batch-size, --global-batch-size,
  --seq-length, --recompute-granularity {full,selective}, --recompute-method {uniform,block}, --recompute-num-layers,
  --use-distributed-optimizer, --sequence-parallel, --group-query-attention, --num-query-groups, --kv-channels,
  --add-qkv-bias, --fp8-format {e4m3,hybrid}, --fp8-param-gather, --grad-reduce-in-bf16,
  --use-precision-aware-optimizer, --multi-latent-attention with --q-lora-rank, --kv-lora-rank,
  --qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim (at core_v0.16.1, 55ac7082, most flags are made from
  megatron-core's TransformerConfig fields by `ArgumentGroupFactory`; tests/test_export_validators.py builds that
  TransformerConfig from each export), --num-layers-per-virtual-pipeline-stage, and for uneven stages
  --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers (or, an end one layer short of its chunks,
  --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split) with
  --num-virtual-stages-per-pipeline-rank (`validate_args` at 000c4ac2 asserts "please use
  --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when enable uneven pipeline
  parallelism" where the layers-per-virtual-stage flag meets uneven stages); the run's own
  --data-path (a .bin/.idx prefix), --split, --tokenizer-type (HuggingFaceTokenizer, ...), --tokenizer-model, --lr,
  --min-lr, --lr-decay-style {constant,linear,cosine,...}, --lr-warmup-iters, --save, --load, --save-interval;
  `megatron/core/recompute.py` (d98e8a64): `uniform` checkpoints the input of every chunk of recompute_num_layers
  layers, `block` checkpoints the first recompute_num_layers layers of each (virtual) stage and no others;
- DeepSpeed `deepspeed/runtime/config.py` / docs "DeepSpeed Configuration JSON": train_batch_size =
  train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel size, zero_optimization.stage,
  bf16.enabled, activation_checkpointing, tensor_parallel.autotp_size (AutoTP training), pipeline.stages,
  pipeline.activation_checkpoint_interval (`runtime/pipe/engine.py`, checked by DeepSpeedConfig 0.19.8 in the tests);
- torchtitan `torchtitan/config/job_config.py` at v0.2.2 (commit 73a0e697, the last release that reads TOML job
  configs; 0.3 replaced them with Python config registries): [training] local_batch_size, global_batch_size,
  seq_len, steps, mixed_precision_param; [compile] enable; [parallelism] data_parallel_replicate_degree,
  data_parallel_shard_degree, tensor_parallel_degree, pipeline_parallel_degree, pipeline_parallel_microbatch_size,
  pipeline_parallel_schedule, pipeline_parallel_layers_per_stage, pipeline_parallel_first_stage_less_layers /
  pipeline_parallel_last_stage_less_layers (1 each by default: `distributed/pipeline_parallel.py`
  `generate_llm_fqn_per_model_part` spreads num_layers + first_less + last_less "effective" layers evenly over the
  stages, then takes first_less layers off the first stage and last_less off the last), context_parallel_degree,
  expert_parallel_degree;
  [activation_checkpoint] mode {selective,full,memory_budget,none} and selective_ac_option ("op", or a layer
  stride k as a string: `torchtitan/distributed/activation_checkpoint.py` `_apply_ac_to_transformer_block` accepts
  "op" or digits and `_apply_layer_sac` wraps every k-th layer in full AC);
- accelerate `src/accelerate/commands/launch.py` (Megatron-LM arguments) and `commands/config/cluster.py`:
  distributed_type, num_machines, num_processes, megatron_lm_config.megatron_lm_tp_degree / _pp_degree /
  _num_micro_batches / _sequence_parallelism / _recompute_activations / _use_distributed_optimizer, deepspeed_config;
- Kubeflow training-operator `PyTorchJob` (kubeflow.org/v1: pytorchReplicaSpecs Master/Worker, nprocPerNode) and the
  JobSet API (jobset.x-k8s.io/v1alpha2: replicatedJobs), GPUs as the `nvidia.com/gpu` resource and the node selector
  `nvidia.com/gpu.product` that NVIDIA GPU Feature Discovery sets;
- SLURM `sbatch` heterogeneous jobs (`#SBATCH hetjob`, `srun --het-group`; doc/html/heterogeneous_jobs.shtml lists
  --time among the options a later component inherits, and the script still writes it in every component),
  torchrun's c10d rendezvous (nodes may run different numbers of processes).

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
import tomli_w
import yaml

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.frameworks import FRAMEWORKS
from frenzy_core.frameworks.fsdp2 import titan_experts_fit
from frenzy_core.limits import DEFAULT_TOKENS, short_repr
from frenzy_core.models import ModelSpec
from frenzy_core.packing import ClusterIndex, place
from frenzy_core.plans import Plan
from frenzy_core.training import TrainingSpec, check_pipeline_layout, lighter_chunk_layout

FORMATS = ("megatron", "deepspeed", "torchtitan", "accelerate", "slurm", "kubernetes")
# The export a framework's users reach for first (TrainingSpec.framework, where the training spec has one): each
# stack's `Framework.export_format` (frenzy_core.frameworks).
FRAMEWORK_EXPORT = {name: fw.export_format for name, fw in FRAMEWORKS.items() if fw.export_format}
RDZV_PORT = 29500  # torchrun's default master port
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"  # NGC PyTorch container: torch, NCCL and torchrun
DEFAULT_SCRIPT = "pretrain_gpt.py"  # Megatron-LM's GPT pre-training entry point
# The learning-rate schedule the launch files start from (the user's to tune): AdamW's 3e-4, cosine down to a tenth,
# warm-up over 1% of the steps (at most 2,000), a checkpoint every 1,000 steps (or once, for a shorter run)
LR = 3e-4
MIN_LR = 3e-5  # LR / 10
MAX_WARMUP_ITERS = 2000
SAVE_INTERVAL_ITERS = 1000
TIME_LIMIT_MARGIN = 1.2  # sbatch --time: the predicted time to train + 20%
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


def megatron_recompute_layers(model: ModelSpec, training: TrainingSpec, plan: Plan) -> list[str | int]:
    """Megatron's --recompute-method / --recompute-num-layers for full recomputation of every k-th layer
    (TrainingSpec.recompute_every = k), as the memory model counts it: a fraction 1/k of the layers keeps only its
    input, the rest keep everything.

    k = 1 is `uniform` over chunks of one layer (every layer checkpointed). For k > 1 Megatron has no stride, but
    `block` checkpoints the first N layers of each (virtual) pipeline stage and no others (megatron/core/recompute.py);
    N = ceil(layers per stage / k) recomputes at least the planned fraction, so memory stays within the plan's.

    >>> from frenzy_core.models import ZOO
    >>> p = Plan("A100-80GB", 2, 1, 2, 4, 1, 8, 0, 0, 0, 1.0, 1.0, 1.0, 1.0, 1.0)
    >>> megatron_recompute_layers(ZOO["llama-2-7b"], TrainingSpec(recompute="full", recompute_every=3), p)
    ['--recompute-method', 'block', '--recompute-num-layers', 6]
    """
    k = training.recompute_every
    if k == 1:
        return ["--recompute-method", "uniform", "--recompute-num-layers", 1]
    # 32 layers / p=2 = 16: ceil(16 / 3) = 6; uneven stages: the largest stage's chunk (a lighter one recomputes more)
    layers_per_stage = max(plan.parallelism.stage_layers(model.num_layers)) // plan.vp
    return ["--recompute-method", "block", "--recompute-num-layers", math.ceil(layers_per_stage / k)]


def megatron_pipeline_layout(model: ModelSpec, plan: Plan) -> list[str | int]:
    """Megatron's flags for the plan's stages: uneven first / last stages (--decoder-first-pipeline-num-layers,
    --decoder-last-pipeline-num-layers, each only where set) and the interleaving, which with uneven stages must be
    --num-virtual-stages-per-pipeline-rank (arguments.py asserts it: --num-layers-per-virtual-pipeline-stage
    assumes num_layers / p layers on every stage).

    >>> from frenzy_core.models import ZOO
    >>> p = Plan("H100-80GB", 1, 1, 4, 4, 1, 8, 0, 0, 0, 1.0, 1.0, 1.0, 1.0, 1.0, vp=3)
    >>> megatron_pipeline_layout(ZOO["gpt2"], p)  # 12 layers: 4 stages of 3 chunks of 1 layer
    ['--num-layers-per-virtual-pipeline-stage', 1]
    >>> from dataclasses import replace
    >>> megatron_pipeline_layout(ZOO["gpt2"], replace(p, vp=2, first_stage_layers=2, last_stage_layers=2))
    ['--decoder-first-pipeline-num-layers', 2, '--decoder-last-pipeline-num-layers', 2, '--num-virtual-stages-per-pipeline-rank', 2]

    An end one layer short of whole chunks (`lighter_chunk_layout`) is Megatron's slot for the embedding / the loss
    (megatron/core/transformer/transformer_block.py get_num_layers_to_build):

    >>> xl = replace(p, pp=2, vp=5, first_stage_layers=24, last_stage_layers=24)  # 48 + 2 = 2 x 5 chunks of 5
    >>> megatron_pipeline_layout(ZOO["gpt2-xl"], xl)
    ['--account-for-embedding-in-pipeline-split', '--account-for-loss-in-pipeline-split', '--num-virtual-stages-per-pipeline-rank', 5]
    """
    check_pipeline_layout(model.num_layers, plan.parallelism)
    flags: list[str | int] = []
    embedding_slot, loss_slot = lighter_chunk_layout(plan.vp, plan.first_stage_layers, plan.last_stage_layers)
    if embedding_slot or loss_slot:  # TransformerConfig refuses mixing them with the decoder-first/last counts
        flags += ["--account-for-embedding-in-pipeline-split"] if embedding_slot else []
        flags += ["--account-for-loss-in-pipeline-split"] if loss_slot else []
    else:
        if plan.first_stage_layers:
            flags += ["--decoder-first-pipeline-num-layers", plan.first_stage_layers]
        if plan.last_stage_layers:
            flags += ["--decoder-last-pipeline-num-layers", plan.last_stage_layers]
    if plan.vp > 1:
        flags += (["--num-virtual-stages-per-pipeline-rank", plan.vp] if plan.uneven else
                  ["--num-layers-per-virtual-pipeline-stage", model.num_layers // (plan.pp * plan.vp)])
    return flags


def megatron_args(model: ModelSpec, training: TrainingSpec, plan: Plan, tokens: float) -> list[str]:
    """Megatron-LM `pretrain_gpt.py` arguments for the plan (flag names from megatron/training/arguments.py)."""
    args = ["--tensor-model-parallel-size", plan.tp, "--pipeline-model-parallel-size", plan.pp,
            *(["--context-parallel-size", plan.cp] if plan.cp > 1 else []),
            *megatron_pipeline_layout(model, plan),
            "--micro-batch-size", plan.micro_batch, "--global-batch-size", training.global_batch,
            "--seq-length", training.seq_len, "--max-position-embeddings", max(training.seq_len, model.max_positions),
            "--num-layers", model.num_layers, "--hidden-size", model.hidden_size, "--ffn-hidden-size", model.ffn,
            "--num-attention-heads", model.num_heads, "--train-iters", train_iters(training, tokens)]
    if model.kv_heads != model.num_heads:
        args += ["--group-query-attention", "--num-query-groups", model.kv_heads]
    if model.is_mla:  # DeepSeek's latent attention: MLATransformerConfig, its widths from arguments.py _add_mla_args
        args += ["--multi-latent-attention", *(["--q-lora-rank", model.q_lora_rank] if model.q_lora_rank else []),
                 "--kv-lora-rank", model.kv_lora_rank, "--qk-head-dim", model.qk_nope_head_dim,
                 "--qk-pos-emb-head-dim", model.qk_rope_head_dim, "--v-head-dim", model.v_head_dim]
    elif model.head_dim != model.hidden_size // model.num_heads:  # Gemma, Qwen3: TransformerConfig's default is h / a
        args += ["--kv-channels", model.head_dim]
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
        if model.has_qkv_bias:  # Qwen2: biases on q, k, v only (with linear biases Megatron adds them itself)
            args += ["--add-qkv-bias"]
    if training.precision in ("bf16-master", "amp"):
        args += ["--bf16"]
    if training.fp8_linears:  # Transformer Engine fp8 linears: e4m3 weights and activations, e5m2 gradients
        args += ["--fp8-format", "hybrid"]
    if training.fp8_params:  # arguments.py: fp8 weights (TE fp8_model_init), gathered in fp8
        args += ["--fp8-param-gather"]
    if training.bf16_grad_reduce:  # arguments.py validate_args: accumulate_allreduce_grads_in_fp32 = False
        args += ["--grad-reduce-in-bf16"]
    if training.param_remainders:  # TE FusedAdam keeps the masters' remainders (store_param_remainders, default on)
        args += ["--use-precision-aware-optimizer"]
    if training.recompute == "full":
        args += ["--recompute-granularity", "full", *megatron_recompute_layers(model, training, plan)]
    elif training.recompute == "selective" or training.recompute_modules:
        # transformer_config.py recompute_modules (default ["core_attn"], which recompute selective is); the
        # output-discarding modules join it, or stand alone when the attention core is not recomputed
        args += ["--recompute-granularity", "selective"]
        if training.recompute_modules:
            core = ["core_attn"] if training.recompute == "selective" else []
            args += ["--recompute-modules", *core, *training.recompute_modules]
            if "moe_act" in training.recompute_modules and not training.moe_grouped_gemm:
                raise SpecError("recompute_modules", "Megatron recomputes moe_act only with --moe-grouped-gemm "
                                "(transformer_config.py __post_init__): turn moe_grouped_gemm on, or drop moe_act")
    elif training.recompute == "op-sac":
        # Megatron has no per-op SAC: its selective granularity recomputes the attention core only (recompute_modules
        # core_attn) and keeps the norm and activation outputs per-op SAC drops, so it would run above the plan
        raise SpecError("recompute", "Megatron-LM has no per-op selective activation checkpointing (op-sac); its "
                        "--recompute-granularity selective keeps more than the plan counts. Rank the plan with "
                        "recompute selective or full, or export this one for torchtitan")
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


# --- text that names things: comments and shell words ------------------------------------------------------------
def _printable(text: object) -> str:
    """`text` with every character that could end or hide a line (newline, carriage return, other control and format
    characters, Unicode line separators, lone surrogates) as '?': how names reach comments and free-text fields.

    >>> _printable("lab\\ntouch PWNED\\r")
    'lab?touch PWNED?'
    """
    return "".join(ch if ch.isprintable() else "?" for ch in str(text))


def _comment(text: object) -> str:
    return f"# {_printable(text)}"


def _utf8(text: object) -> str:
    """`text` as a string every writer can encode: a lone surrogate becomes '?' (the writer escapes the rest)."""
    return str(text).encode("utf-8", "replace").decode("utf-8")


class _Expand(str):
    """A shell word of this module's own making that the shell must expand, e.g. `--rdzv-id=${SLURM_JOB_ID}`: written
    inside double quotes. It is built from constants only, never from a plan's names, and holds nothing the shell would
    run or unquote inside double quotes (no `"`, backslash, backtick or `$(`)."""

    def __new__(cls, text: str):
        if not re.fullmatch(r"[\w ${}:?.,/+=@%()-]*", text) or "$(" in text:
            raise ValueError(f"not a plain expansion: {text!r}")
        return super().__new__(cls, text)


def _shell_word(w: object) -> str:
    """A word as the shell must see it: `shlex.quote` (plain words stay bare, e.g. `--tensor-model-parallel-size 4`;
    Megatron's `--moe-layer-freq '([0]*3+[1]*58)'` is quoted); this module's `${VAR}` words in double quotes."""
    return f'"{w}"' if isinstance(w, _Expand) else shlex.quote(str(w))


def _continued(words: list, indent: str = "    ") -> str:
    """`prog --flag value` as shell lines joined by backslash-newline, one flag (and its value) per line. The layout
    is decided on the words as given and every word is quoted afterwards, so no value can start a line of its own."""
    lines: list[list] = [[words[0]]]
    for w in words[1:]:
        last = lines[-1]
        flag = str(last[0])
        if len(last) == 1 and flag.startswith("--") and "=" not in flag and not str(w).startswith("--"):
            last.append(w)  # the value of the flag on the line above
        else:
            lines.append([w])
    return f" \\\n{indent}".join(" ".join(_shell_word(w) for w in line) for line in lines)


def _torchrun(nnodes: int, nproc: int, rdzv_endpoint: str, rdzv_id: str) -> list[str]:
    return ["torchrun", f"--nnodes={int(nnodes)}", f"--nproc-per-node={int(nproc)}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]


def _shell_torchrun(nnodes: int, nproc: int, job_id_var: str) -> list[str]:
    """torchrun with its c10d rendezvous at the script's $MASTER_ADDR:$MASTER_PORT, keyed by the job id variable."""
    words = _torchrun(nnodes, nproc, "${MASTER_ADDR}:${MASTER_PORT}", f"${{{job_id_var}}}")
    return [*words[:4], _Expand(words[4]), _Expand(words[5])]


# What only the user knows: the variable, what to set it to (a script stops naming it while it is unset)
_USER_SETTINGS = (
    ("DATA_PATH", "your Megatron .bin/.idx prefix (tools/preprocess_data.py output)"),
    ("TOKENIZER_MODEL", "a Hugging Face tokenizer name or folder"),
    ("CHECKPOINT_DIR", "the folder to save checkpoints to and resume from"),
)
PLACEHOLDER = "SET-ME"  # Kubernetes env values the user must replace: Megatron stops on the missing path


def _run_defaults(training: TrainingSpec, tokens: float) -> dict[str, str]:
    """The settings a launch file starts from and the user may override: tokenizer type and the learning-rate
    schedule (LR, cosine to MIN_LR, warm-up over 1% of the steps, at most MAX_WARMUP_ITERS) and the save interval."""
    iters = train_iters(training, tokens)
    return {"TOKENIZER_TYPE": "HuggingFaceTokenizer", "LR": repr(LR), "MIN_LR": repr(MIN_LR),
            "LR_WARMUP_ITERS": str(min(MAX_WARMUP_ITERS, iters // 100)),
            "SAVE_INTERVAL": str(min(SAVE_INTERVAL_ITERS, iters))}


def _run_settings(training: TrainingSpec, tokens: float, before: str = "running") -> list[str]:
    """The lines that ask for what only the user knows (data, tokenizer, checkpoints) and set the learning-rate
    schedule, each overridable from the environment; `${VAR:?...}` stops the script, naming VAR, while it is unset."""
    defaults = _run_defaults(training, tokens)
    return [
        f"# Your data, tokenizer and checkpoints: export these before {before} (or write them in here)",
        *(f'{var}="${{{var}:?set {var} to {hint}}}"' for var, hint in _USER_SETTINGS[:1]),
        f'TOKENIZER_TYPE="${{TOKENIZER_TYPE:-{defaults["TOKENIZER_TYPE"]}}}"',
        *(f'{var}="${{{var}:?set {var} to {hint}}}"' for var, hint in _USER_SETTINGS[1:]),
        "# The learning-rate schedule to start from (tune it)",
        *(f'{var}="${{{var}:-{defaults[var]}}}"' for var in ("LR", "MIN_LR", "LR_WARMUP_ITERS", "SAVE_INTERVAL")),
    ]


def _run_env(training: TrainingSpec, tokens: float) -> list[dict[str, str]]:
    """The same settings as a Kubernetes container's env: the user's as `SET-ME: ...` placeholders, the rest their
    defaults. The command reads them as $(VAR), which the kubelet expands from the container's env."""
    user = [{"name": var, "value": f"{PLACEHOLDER}: {hint}"} for var, hint in _USER_SETTINGS]
    return user + [{"name": var, "value": value} for var, value in _run_defaults(training, tokens).items()]


def _run_args(k8s: bool = False) -> list[str]:
    """Megatron's data, tokenizer, learning-rate and checkpoint arguments, from the variables `_run_settings` sets
    (for Kubernetes, `_run_env`'s, as $(VAR)). --load and --save name one folder: a first run finds no checkpoint
    there and starts fresh, a rerun resumes."""
    var = (lambda name: f"$({name})") if k8s else (lambda name: _Expand(f"${{{name}}}"))  # noqa: E731
    return ["--data-path", var("DATA_PATH"), "--split", "949,50,1",
            "--tokenizer-type", var("TOKENIZER_TYPE"), "--tokenizer-model", var("TOKENIZER_MODEL"),
            "--lr", var("LR"), "--min-lr", var("MIN_LR"), "--lr-decay-style", "cosine",
            "--lr-warmup-iters", var("LR_WARMUP_ITERS"),
            "--save", var("CHECKPOINT_DIR"), "--load", var("CHECKPOINT_DIR"),
            "--save-interval", var("SAVE_INTERVAL")]


def export_megatron(model, training, plan, cluster, tokens) -> str:
    groups = node_groups(plan, cluster)
    nodes = sum(len(g.nodes) for g in groups)
    job = _job_name(model, plan)
    head = [
        "#!/usr/bin/env bash",
        _comment(f"Megatron-LM pre-training for {plan.label()}: data-parallel size {plan.dp} = {plan.num_gpus} GPUs / "
                 f"(t={plan.tp} x p={plan.pp}{f' x cp={plan.cp}' if plan.cp > 1 else ''}); {plan.grad_accum} "
                 f"micro-batches per step" + (f"; experts over ep={plan.ep} of the d x cp ranks" if plan.ep > 1 else "")
                 + _stage_words(model, plan)),
    ]
    if len(groups) == 1:
        where = f"on each of the {nodes} nodes, with MASTER_ADDR set to the first," if nodes > 1 else "on the node"
        head.append(_comment(f"Run it {where} from a Megatron-LM checkout; for SLURM, --export slurm writes the "
                             "batch script"))
        launch = _shell_torchrun(nodes, groups[0].gpus_per_node, "JOB_ID")
    else:
        head.append(_comment("nodes take different GPU counts: launch with --export slurm or kubernetes"))
        launch = ["torchrun"]
    rendezvous = [
        "# torchrun's rendezvous: the scheduler's values where it sets them, else the first SLURM host or this one",
        'if [[ -z "${MASTER_ADDR:-}" && -n "${SLURM_JOB_NODELIST:-}" ]]; then',
        '  MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | sed -n 1p)"',
        "fi",
        'MASTER_ADDR="${MASTER_ADDR:-$(hostname)}"',
        f'MASTER_PORT="${{MASTER_PORT:-{RDZV_PORT}}}"',
        f'JOB_ID="${{SLURM_JOB_ID:-${{JOB_ID:-{job}}}}}"',
    ]
    cmd = _continued([*launch, DEFAULT_SCRIPT, *megatron_args(model, training, plan, tokens), *_run_args()])
    return "\n".join([*head, "set -euo pipefail", "", *_run_settings(training, tokens), "", *rendezvous, "",
                      cmd]) + "\n"


def _stage_words(model: ModelSpec, plan: Plan) -> str:
    """'; uneven stages: 7 + 14 x 8 + 7 layers' for a plan with its own first / last stage counts, else ''."""
    if not plan.uneven:
        return ""
    layers = plan.parallelism.stage_layers(model.num_layers)
    inner = f" + {len(layers) - 2} x {layers[1]}" if len(layers) > 2 else ""
    return f"; uneven stages: {layers[0]}{inner} + {layers[-1]} layers"


def _refuse_uneven(plan: Plan, what: str) -> None:
    """Stop an export whose format cannot place Megatron's uneven first / last stages, naming the plan and where to go."""
    if plan.uneven:
        raise SpecError("export", f"{what}; {plan.label()} puts {plan.first_stage_layers or 'a middle share of'} "
                        f"layers on its first stage and {plan.last_stage_layers or 'a middle share of'} on its last "
                        "(Megatron's --decoder-first/last-pipeline-num-layers): export it for megatron (or slurm / "
                        "kubernetes, which launch Megatron), or pick a plan with even stages")


def deepspeed_config(model, training, plan, cluster, tokens) -> dict:
    """DeepSpeed config JSON as a dict; train_batch_size = micro x accumulation x data-parallel size (plan's d)."""
    if plan.cp > 1:
        raise SpecError("export", f"DeepSpeed has no ring-attention context parallelism (its Ulysses sequence "
                        f"parallelism is another scheme); export this cp={plan.cp} plan for megatron or torchtitan")
    if plan.vp > 1:
        raise SpecError("export", f"DeepSpeed's pipeline engine has no interleaved schedule; export this vp={plan.vp} "
                        f"plan for megatron or torchtitan, or pick a plan with vp=1")
    _refuse_uneven(plan, "DeepSpeed's pipeline engine splits the layers by its partition_method (uniform, "
                         "parameters or type:regex, in PipelineModule), not by first / last stage counts")
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
        cfg["pipeline"] = {"stages": plan.pp, "partition": "uniform",
                           **deepspeed_checkpoint_interval(training)}
    return cfg


def deepspeed_checkpoint_interval(training: TrainingSpec) -> dict[str, int]:
    """DeepSpeed's pipeline activation_checkpoint_interval for full recomputation (runtime/pipe/engine.py hands
    config pipeline.activation_checkpoint_interval to PipelineModule, which checkpoints its layers in chunks of that
    many, keeping each chunk's input). k = 1 is the plan's every-layer recompute; for a stride k > 1 DeepSpeed has no
    every-k-th-layer option, and chunks of k keep one input per k layers (at most what the plan keeps, every layer's
    forward run twice: more recompute than the plan counts). Selective and op-sac have no config knob in DeepSpeed
    (the model code calls deepspeed.checkpointing.checkpoint), so nothing is written for them.

    >>> deepspeed_checkpoint_interval(TrainingSpec(recompute="full", recompute_every=2))
    {'activation_checkpoint_interval': 2}
    """
    if training.recompute != "full":
        return {}
    return {"activation_checkpoint_interval": int(training.recompute_every)}


def export_deepspeed(model, training, plan, cluster, tokens) -> str:
    cfg = deepspeed_config(model, training, plan, cluster, tokens)
    if plan.ep > 1:
        # DeepSpeed-MoE takes the expert-parallel size in the model code (deepspeed/moe/layer.py: MoE(...,
        # ep_size=N)), not in the config; JSON has no comments, so it rides in a top-level key DeepSpeed does not read
        cfg["_frenzy_moe"] = {"ep_size": plan.ep, "set_in": "deepspeed.moe.layer.MoE(..., ep_size=ep_size)"}
    return json.dumps(cfg, indent=2) + "\n"


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


def titan_activation_checkpoint(training: TrainingSpec) -> dict[str, str]:
    """torchtitan's [activation_checkpoint] for the training's recompute policy and stride k (recompute_every).

    torchtitan (v0.2.2 `distributed/activation_checkpoint.py`) takes mode "none", "full" (every layer) or "selective"
    with selective_ac_option "op" (per-op SAC on every layer) or a stride "k" (full AC on every k-th layer only):
    - none -> "none"; full, k = 1 -> "full"; full, k > 1 -> selective "k" (the memory model's every-k-th layer);
    - op-sac -> selective "op"; torchtitan has no per-op SAC on every k-th layer, so op-sac with k > 1 is refused;
    - selective (Megatron's attention-core recompute) has no torchtitan twin: per-op SAC is the nearest (it too
      recomputes cheap ops and keeps matmul and attention outputs) and keeps less than the plan counts.

    >>> titan_activation_checkpoint(TrainingSpec(recompute="full", recompute_every=2))
    {'mode': 'selective', 'selective_ac_option': '2'}
    """
    k = training.recompute_every
    if training.recompute == "none":
        return {"mode": "none"}
    if training.recompute == "full":
        return {"mode": "full"} if k == 1 else {"mode": "selective", "selective_ac_option": str(int(k))}
    if training.recompute == "op-sac" and k > 1:
        raise SpecError("recompute_every", f"torchtitan applies per-op SAC to every layer or full AC to every k-th "
                        f"layer, not per-op SAC to every {k}th; use recompute_every 1, or recompute full with "
                        f"recompute_every {k}")
    return {"mode": "selective", "selective_ac_option": "op"}


def titan_stage_less_layers(model: ModelSpec, plan: Plan) -> dict[str, int]:
    """torchtitan's pipeline_parallel_first_stage_less_layers / _last_stage_less_layers for a pipelined plan.

    torchtitan v0.2.2 (`distributed/pipeline_parallel.py` `generate_llm_fqn_per_model_part`) spreads num_layers +
    first_less + last_less layers evenly over the (virtual) stages and takes first_less off the first stage and
    last_less off the last. Its default 1 / 1 would not split evenly (32 layers on 4 stages: 8, 9, 8, 7; with
    interleaving, ceil(34 / 4) = 9 virtual stages, which 4 ranks cannot hold), so the even split is 0 / 0. An uneven
    plan without interleaving is Megatron's split when each end is that much lighter than a middle stage: 126 layers
    on 16 stages as 7 + 14 x 8 + 7 is 1 / 1. torchtitan has no such knob per rank for an interleaved schedule (only
    the first and the last virtual stage), nor a heavier end: those plans are refused.

    >>> from frenzy_core.models import ZOO
    >>> p = Plan("H100-80GB", 1, 1, 4, 4, 1, 8, 0, 0, 0, 1.0, 1.0, 1.0, 1.0, 1.0, first_stage_layers=2, last_stage_layers=2)
    >>> titan_stage_less_layers(ZOO["gpt2"], p)  # 12 layers: 2 + 2 x 4 + 2
    {'pipeline_parallel_first_stage_less_layers': 2, 'pipeline_parallel_last_stage_less_layers': 2}
    """
    if plan.pp == 1:
        return {}
    layers = plan.parallelism.stage_layers(model.num_layers)
    if plan.uneven:
        if plan.vp > 1:
            _refuse_uneven(plan, f"torchtitan lightens only its first and last virtual stage, not every chunk of the "
                                 f"first and last rank (vp={plan.vp})")
        # the middle stages' count; with two stages, the heavier end plays it
        middle = layers[1] if plan.pp > 2 else max(layers)
        less = (middle - layers[0], middle - layers[-1])
        if min(less) < 0 or middle * plan.pp != model.num_layers + sum(less):
            _refuse_uneven(plan, f"torchtitan can only lighten the first and last stage against the middle ones "
                                 f"({' + '.join(map(str, layers))} layers are not such a split)")
    else:
        less = (0, 0)
    return {"pipeline_parallel_first_stage_less_layers": less[0], "pipeline_parallel_last_stage_less_layers": less[1]}


def torchtitan_config(model, training, plan, cluster, tokens) -> dict[str, dict]:
    """torchtitan JobConfig sections. ZeRO-3 (or FSDP) shards over d; ZeRO-1/2 shard with reshard_after_forward off
    (FSDP2 keeps parameters gathered between forward and backward, like ZeRO-2); ZeRO-0 replicates (DDP)."""
    shard = training.zero_stage >= 1 or training.distributed_optimizer
    local = plan.micro_batch * plan.grad_accum if plan.pp > 1 else plan.micro_batch
    ep = titan_expert_degree(model, training, plan) if model.is_moe else 1
    return {
        "job": {"description": _utf8(f"{model.name}: {plan.label()} (Frenzy Planner)")},
        "model": {"name": "llama3", "flavor": _utf8(model.name)},
        "optimizer": {"name": "AdamW", "lr": LR},
        "training": {"local_batch_size": local, "global_batch_size": training.global_batch,
                     "seq_len": training.seq_len, "steps": train_iters(training, tokens),
                     "mixed_precision_param": "float32" if training.precision == "fp32" else "bfloat16"},
        "compile": {"enable": bool(training.compile)},  # per-block torch.compile (job_config.py Compile)
        "parallelism": {"data_parallel_replicate_degree": 1 if shard else plan.dp,
                        "data_parallel_shard_degree": plan.dp if shard else 1,
                        "fsdp_reshard_after_forward": "default" if training.zero_stage >= 3 or not shard else "never",
                        "tensor_parallel_degree": plan.tp, "pipeline_parallel_degree": plan.pp,
                        "pipeline_parallel_microbatch_size": plan.micro_batch,
                        "context_parallel_degree": plan.cp,
                        # job_config.py Parallelism (v0.2.2): the interleaved schedule and its chunk size
                        **({"pipeline_parallel_schedule": "Interleaved1F1B",
                            "pipeline_parallel_layers_per_stage": model.num_layers // (plan.pp * plan.vp)}
                           if plan.vp > 1 else {}),
                        **titan_stage_less_layers(model, plan),
                        **({"expert_parallel_degree": ep} if model.is_moe else {})},
        "activation_checkpoint": titan_activation_checkpoint(training),
    }


def export_torchtitan(model, training, plan, cluster, tokens) -> str:
    head = "\n".join([
        _comment(f"torchtitan job config for {plan.label()}; run with torchrun --nproc-per-node ... "
                 "-m torchtitan.train --job.config_file this.toml (torchtitan 0.2.x: 0.3 dropped TOML configs)"),
        _comment(f"[model] name/flavor: set them to torchtitan's registered model closest to {model.name}"),
    ])
    return head + "\n" + tomli_w.dumps(torchtitan_config(model, training, plan, cluster, tokens))


def accelerate_config(model, training, plan, cluster, tokens) -> dict:
    """An `accelerate launch --config_file` YAML as a dict (one machine rank; set machine_rank per node)."""
    for name, value, what in (("cp", plan.cp, "context-parallel degree"), ("vp", plan.vp, "interleaved pipeline"),
                              ("ep", plan.ep, "expert-parallel degree")):
        if value > 1:
            raise SpecError("export", f"accelerate's launcher config has no {what}; export this {name}={value} plan "
                            f"for megatron or torchtitan")
    _refuse_uneven(plan, "accelerate's megatron_lm_config has no first / last pipeline stage layers (only "
                         "megatron_lm_pp_degree)")
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
    elif training.zero_stage == 3 and training.fsdp == 1:
        # the FSDP1 memory terms (frameworks/fsdp1.py) describe accelerate's FSDP plugin, not the DeepSpeed config below
        raise SpecError("export", "fsdp 1 (FullyShardedDataParallel) has no accelerate fsdp_config writer yet; this "
                                  "export writes DeepSpeed ZeRO for zero_stage > 0: leave fsdp 0 to export it")
    elif training.zero_stage > 0:
        cfg["distributed_type"] = "DEEPSPEED"
        cfg["deepspeed_config"] = {"zero_stage": training.zero_stage, "gradient_accumulation_steps": plan.grad_accum,
                                   "gradient_clipping": 1.0, "offload_optimizer_device": "none",
                                   "offload_param_device": "none", "zero3_init_flag": training.zero_stage == 3}
    else:
        cfg["distributed_type"] = "MULTI_GPU" if plan.num_gpus > 1 else "NO"
    return cfg


def export_accelerate(model, training, plan, cluster, tokens) -> str:
    head = _comment(f"accelerate config for {plan.label()}: accelerate launch --config_file this.yaml train.py")
    if (plan.tp > 1 or plan.pp > 1) and training.recompute in ("full", "op-sac"):
        # accelerate's MegatronLMPlugin turns megatron_lm_recompute_activations into recompute_granularity
        # "selective" (src/accelerate/utils/dataclasses.py), which keeps more than full or per-op recompute
        if training.recompute == "full":
            _, method, _, layers = megatron_recompute_layers(model, training, plan)
            fix = (f"pass MegatronLMPlugin(other_megatron_args={{'recompute_granularity': 'full', "
                   f"'recompute_method': '{method}', 'recompute_num_layers': {layers}}}) in train.py")
        else:
            fix = "Megatron has no per-op SAC: expect more memory than the plan, or rank it with recompute full"
        head += "\n" + _comment(f"megatron_lm_recompute_activations is Megatron's selective recompute; for the "
                                f"plan's {training.recompute} recompute {fix}")
    return head + "\n" + yaml.safe_dump(accelerate_config(model, training, plan, cluster, tokens), sort_keys=False)


def _slurm_time(seconds: float) -> str:
    """sbatch --time as days-hours:minutes:seconds, rounded up to the minute.

    >>> _slurm_time(3600 * 1.2), _slurm_time(86400 * 3 + 61)
    ('0-01:12:00', '3-00:02:00')
    """
    if not (math.isfinite(seconds) and seconds >= 0):
        raise SpecError("plan", f"the predicted time to train must be a finite number of seconds, got {seconds}; "
                        "export a plan ranked for this cluster")
    minutes = max(1, math.ceil(seconds / 60))
    d, rem = divmod(minutes, 1440)
    return f"{d}-{rem // 60:02d}:{rem % 60:02d}:00"


# What an #SBATCH value may hold: sbatch splits a directive at white space and reads quotes, and a newline ends it,
# so every value is one plain word (job names are already DNS labels, times and counts are numbers)
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9._,:+-]+")
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # one SLURM node name: no spaces, brackets or commas


def _sbatch(option: str, value: object) -> str:
    text = str(value)
    if not _SBATCH_VALUE.fullmatch(text):
        raise SpecError("export", f"#SBATCH {option}={short_repr(text)} is not one plain word sbatch can read")
    return f"#SBATCH {option}={text}"


def _nodelist(nodes: tuple[str, ...]) -> str:
    for node in nodes:
        if not _HOST_NAME.fullmatch(str(node)):
            raise SpecError("nodes", f"node {short_repr(node)} is not a host name sbatch --nodelist can take "
                            "(letters, digits, '.', '_', '-'); rename it in the cluster file")
    return ",".join(nodes)


def export_slurm(model, training, plan, cluster, tokens) -> str:
    groups = node_groups(plan, cluster)
    nodes = sum(len(g.nodes) for g in groups)
    job = _job_name(model, plan)
    time_limit = _slurm_time(plan.time_to_train_s * TIME_LIMIT_MARGIN)
    lines = ["#!/bin/bash",
             _comment(f"{plan.label()} on {cluster.name}: predicted {plan.time_to_train_s / 3600:,.1f} h to train "
                      f"{tokens:.3g} tokens (time limit: prediction + 20%)")]
    for i, g in enumerate(groups):
        if i:
            lines.append("#SBATCH hetjob")
        else:
            lines.append(_sbatch("--job-name", job))
        # --time in every component: each is a job of its own to the scheduler
        lines += [_sbatch("--time", time_limit), _sbatch("--nodes", len(g.nodes)), _sbatch("--ntasks-per-node", 1),
                  _sbatch("--gpus-per-node", int(g.gpus_per_node)), f"#SBATCH --nodelist={_nodelist(g.nodes)}"]
    lines += ["set -euo pipefail", "", *_run_settings(training, tokens, "sbatch (it passes your environment on)"), ""]
    nodelist = "SLURM_JOB_NODELIST_HET_GROUP_0" if len(groups) > 1 else "SLURM_JOB_NODELIST"
    lines += ["# torchrun's rendezvous: the first node of the allocation, keyed by the job id SLURM gives",
              f'MASTER_ADDR="$(scontrol show hostnames "${{{nodelist}:?submit this script with sbatch}}" | sed -n 1p)"',
              f'MASTER_PORT="${{MASTER_PORT:-{RDZV_PORT}}}"', ""]
    train = [DEFAULT_SCRIPT, *megatron_args(model, training, plan, tokens), *_run_args()]
    if len(groups) > 1:
        lines.append("pids=()")
    for i, g in enumerate(groups):
        srun = ["srun"] + ([f"--het-group={i}"] if len(groups) > 1 else [])
        cmd = _continued([*srun, *_shell_torchrun(nodes, g.gpus_per_node, "SLURM_JOB_ID"), *train])
        lines += [cmd + " &", 'pids+=("$!")'] if len(groups) > 1 else [cmd]
    if len(groups) > 1:  # wait for each group: the job fails when either does
        lines.append('for pid in "${pids[@]}"; do wait "$pid"; done')
    return "\n".join(lines) + "\n"


_K8S_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # RFC 1123 label that starts with a letter (RFC 1035)


def _job_name(model: ModelSpec, plan: Plan) -> str:
    """A DNS label for the job (Kubernetes object, SLURM job name): lowercase ASCII letters, digits and dashes,
    starting with a letter, at most 40 characters (JobSet adds its pod suffixes within the 63 of a label).

    >>> from frenzy_core.models import ZOO
    >>> _job_name(ZOO["llama-2-7b"], Plan("H100-80GB", 2, 4, 2, 16, 1, 32, 0, 0, 0, 1.0, 1.0, 1.0, 1.0, 1.0))
    'llama-2-7b-h100-80gb-d2t4p2'
    """
    extra = f"{f'c{plan.cp}' if plan.cp > 1 else ''}{f'e{plan.ep}' if plan.ep > 1 else ''}"
    raw = f"{model.name}-{plan.gpu_type}-d{plan.dp}t{plan.tp}p{plan.pp}{extra}".lower()
    clean = re.sub(r"[^a-z0-9]+", "-", raw).strip("-")
    if not clean[:1].isalpha():
        clean = f"job-{clean}"
    name = clean[:40].strip("-")
    return name if _K8S_NAME.fullmatch(name) else "frenzy-job"


def _label_value(text: str) -> str:
    """A Kubernetes label value: at most 63 of A-Z a-z 0-9 . _ -, alphanumeric at both ends (GPU Feature Discovery
    writes the NVML device name the same way, spaces as dashes)."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", clean)


def _pod_spec(plan: Plan, gpus: int, command: list[str], image: str, env: list[dict[str, str]]) -> dict:
    return {"nodeSelector": {GPU_PRODUCT_LABEL: _label_value(GPU_PRODUCTS.get(plan.gpu_type, plan.gpu_type))},
            "containers": [{"name": "pytorch", "image": image, "command": command, "env": env,
                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}


def kubernetes_manifest(model, training, plan, cluster, tokens, image: str = DEFAULT_IMAGE) -> dict:
    """A Kubeflow PyTorchJob when every node takes the same GPU count, else a JobSet (one replicated job per shape)."""
    groups = node_groups(plan, cluster)
    nodes = sum(len(g.nodes) for g in groups)
    name = _job_name(model, plan)
    train = [DEFAULT_SCRIPT, *megatron_args(model, training, plan, tokens), *_run_args(k8s=True)]
    env = _run_env(training, tokens)
    if len(groups) == 1:
        g = groups[0]
        # the training operator sets the PET_* rendezvous variables torchrun reads (master address, node rank)
        command = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={g.gpus_per_node}", *train]
        replica = lambda n: {"replicas": n, "restartPolicy": "OnFailure",  # noqa: E731
                             "template": {"spec": _pod_spec(plan, g.gpus_per_node, command, image, env)}}
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
            "template": {"spec": {**_pod_spec(plan, g.gpus_per_node, command, image, env), "restartPolicy": "Never"}}}}})
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"network": {"enableDNSHostnames": True}, "replicatedJobs": jobs}}


class _PlainDumper(yaml.SafeDumper):
    """yaml.safe_dump without anchors and aliases: replicas that share a command or env list each spell it out, as
    a manifest a person reads and edits, one replica at a time, should."""

    def ignore_aliases(self, data) -> bool:
        return True


# A plain scalar that YAML 1.2's core schema reads as a number (Go's YAML readers: kubectl, the API server) though
# PyYAML's 1.1 rules call it a string, e.g. 3e-05: such strings are written quoted, so an env value stays a string
_YAML12_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|0o[0-7]+|0x[0-9a-fA-F]+"
                            r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "'" if _YAML12_NUMBER.fullmatch(text) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_PlainDumper.add_representer(str, _represent_str)


def export_kubernetes(model, training, plan, cluster, tokens) -> str:
    return yaml.dump(kubernetes_manifest(model, training, plan, cluster, tokens), Dumper=_PlainDumper,
                     sort_keys=False)


_EXPORTERS = {"megatron": export_megatron, "deepspeed": export_deepspeed, "torchtitan": export_torchtitan,
              "accelerate": export_accelerate, "slurm": export_slurm, "kubernetes": export_kubernetes}
FILE_NAMES = {"megatron": "megatron_args.sh", "deepspeed": "ds_config.json", "torchtitan": "torchtitan.toml",
              "accelerate": "accelerate_config.yaml", "slurm": "train.sbatch", "kubernetes": "job.yaml"}


def export_plan(fmt: str, model: ModelSpec, training: TrainingSpec, plan: Plan, cluster: Cluster,
                tokens: float = DEFAULT_TOKENS) -> str:
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
