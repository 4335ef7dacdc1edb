"""Each launch export read by its tool's own parser or schema, where that installs on a CPU machine (issue 23).

- DeepSpeed: `deepspeed.runtime.config.DeepSpeedConfig` (0.19.x) builds each exported JSON, with its batch identity
  checked against the plan's data-parallel size, and every key written is read back from what DeepSpeed holds.
- SLURM: `sbatch --test-only` from Debian's slurm-client reads every `#SBATCH` line with sbatch's own option parser;
  no controller runs here, so a script that parses gets as far as "Unable to contact slurm controller".
- Kubernetes: the PyTorchJob (Kubeflow training-operator v1.9.0) and JobSet (v0.12.0) CRDs' openAPIV3Schema,
  vendored under tests/data/ (see its README), with unknown fields refused as `kubectl apply --validate=strict` does.
- Megatron-LM: megatron-core's `TransformerConfig` (`MLATransformerConfig` for MLA models; megatron-core 0.16.1)
  is built from each exported command line (shlex over the pretrain_gpt.py words), mapped into its fields as
  Megatron-LM's `core_transformer_config_from_args` maps its parsed arguments (core_v0.16.1, cited below): its
  `__post_init__` checks the split, the uneven first / last stages against the virtual pipeline, recompute
  granularity / method / layers, sequence parallelism against t, heads and query groups against t and the MoE
  settings, and the built config is read back against the plan and the model. Every flag written must be one the
  tables know, the factory-made ones named from megatron-core's own fields. Not checked, because no PyPI package
  ships `megatron/training/arguments.py`: Megatron-LM's argparse itself (the non-config flags' names and types) and
  `validate_args`' own rules (layers divisible by p for even stages and by the virtual stages, experts divisible by
  ep, MoE with t needing sequence parallelism, a recompute method without a granularity, which TransformerConfig
  ignores); that test skips unless a Megatron-LM checkout is importable.
- torchtitan's own parser runs in tests/test_export.py.

Each validator skips with the reason when its tool is missing, and each is shown to reject a broken export.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import importlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from test_export import CLUSTER, HET, MIXED, MODEL, SPREAD, TOKENS, TRAIN, TRAIN96, _flags, _shell_words

from frenzy_core.cluster import Cluster
from frenzy_core.export import export_plan
from frenzy_core.models import ZOO
from frenzy_core.plans import rank_plans
from frenzy_core.training import TrainingSpec, lighter_chunk_layout

DATA = Path(__file__).parent / "data"


# --- DeepSpeed: DeepSpeedConfig --------------------------------------------------------------------------------------
def _deepspeed_exports() -> list[tuple[str, int, dict]]:
    """(what, data-parallel size, config) for DeepSpeed exports that between them write every key."""
    out = []
    for recompute, every in (("selective", 1), ("full", 1), ("full", 3), ("none", 1)):
        train = TRAIN.model_copy(update={"recompute": recompute, "recompute_every": every})
        out.append((f"t4p2 {recompute} k={every}", SPREAD.dp,
                    json.loads(export_plan("deepspeed", MODEL, train, SPREAD, CLUSTER, TOKENS))))
    sizes = TRAIN.model_copy(update={"framework": "deepspeed", "reduce_bucket_size": 50_000_000,
                                     "stage3_max_live_parameters": 100_000_000,
                                     "stage3_max_reuse_distance": 2_000_000_000})
    out.append(("bucket sizes", SPREAD.dp, json.loads(export_plan("deepspeed", MODEL, sizes, SPREAD, CLUSTER, TOKENS))))
    zero3 = TrainingSpec(seq_len=2048, global_batch=64, framework="deepspeed", zero_stage=3, precision="fp32",
                         optimizer="sgd")
    flat = next(p for p in rank_plans(MODEL, zero3, CLUSTER, tokens=TOKENS).plans if p.pp == 1 and p.tp == 1)
    out.append(("zero-3 fp32 sgd", flat.dp, json.loads(export_plan("deepspeed", MODEL, zero3, flat, CLUSTER, TOKENS))))
    moe = TrainingSpec(seq_len=4096, global_batch=64, framework="megatron", distributed_optimizer=True,
                       recompute="full")
    mixtral = ZOO["mixtral-8x7b"]
    plan = next(p for p in rank_plans(mixtral, moe, CLUSTER, tokens=TOKENS).plans
                if p.ep > 1 and p.vp == 1 and not p.uneven)  # DeepSpeed refuses uneven stages
    out.append(("moe", plan.dp, json.loads(export_plan("deepspeed", mixtral, moe, plan, CLUSTER, TOKENS))))
    return out


# Runs in its own interpreter: importing deepspeed picks an accelerator and sets up logging for the process.
# DeepSpeedConfig asks deepspeed.comm for the rank and, given an mpu, the mpu for the data-parallel size; with no
# process group here, `dist` stands in for an initialised world (rank 0) and the mpu gives the plan's d, as a
# Megatron-style mpu does at launch.
DEEPSPEED_LOADER = r"""
import json, sys, types
import torch
import deepspeed.runtime.config as dsc

cases = json.load(open(sys.argv[1]))
out = []
for dp, cfg in cases:
    dsc.dist = types.SimpleNamespace(get_rank=lambda: 0, get_world_size=lambda *a, **k: dp)
    mpu = types.SimpleNamespace(get_data_parallel_world_size=lambda: dp)
    try:
        c = dsc.DeepSpeedConfig(cfg, mpu=mpu)
    except Exception as err:  # what DeepSpeed refuses: pydantic's ValidationError, its asserts, DeepSpeedConfigError
        out.append({"error": f"{type(err).__name__}: {err}"})
        continue
    zero = c.zero_config.model_dump(by_alias=True)
    ac = c.activation_checkpointing_config
    out.append({"error": None, "world_size": c.world_size, "held": {
        "train_batch_size": c.train_batch_size,
        "train_micro_batch_size_per_gpu": c.train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": c.gradient_accumulation_steps,
        "gradient_clipping": c.gradient_clipping,
        "steps_per_print": c.steps_per_print,
        "zero_optimization": {k: int(zero[k]) for k in cfg.get("zero_optimization", {})},
        "bf16": {"enabled": c.bfloat16_config.enabled},
        "optimizer": {"type": c.optimizer_name, "params": c.optimizer_params},
        "activation_checkpointing": {k: getattr(ac, k) for k in cfg.get("activation_checkpointing", {})},
        "tensor_parallel": {"autotp_size": c.tensor_parallel_config.autotp_size},
        "pipeline": {k: c.pipeline[k] for k in cfg.get("pipeline", {})},
        "pipeline_keys": sorted(dsc.get_pipeline_config({})),
        # engine.py _is_supported_optimizer: one of DeepSpeed's own, or a torch.optim class by that name
        "optimizer_supported": c.optimizer_name in dsc.DEEPSPEED_OPTIMIZERS or hasattr(torch.optim, c.optimizer_name),
    }})
print(json.dumps(out))
"""
# Top-level keys a DeepSpeed export may write: DeepSpeedConfig reads each (it ignores any other key, so a misspelt
# one would pass unnoticed: this table is what catches it). `_frenzy_moe` is ours, deliberately unread (export.py).
DEEPSPEED_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                  "gradient_clipping", "steps_per_print", "zero_optimization", "bf16", "optimizer",
                  "activation_checkpointing", "tensor_parallel", "pipeline"}
UNREAD_KEYS = {"_frenzy_moe"}


def _deepspeed_parse(cases: list[tuple[int, dict]], tmp_path: Path) -> list[dict]:
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (DS_BUILD_OPS=0 pip install --no-deps --no-build-isolation "
                    "deepspeed==0.19.8 hjson py-cpuinfo psutil einops ninja; see .ci/run)")
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    run = subprocess.run([sys.executable, "-c", DEEPSPEED_LOADER, str(path)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def _deepspeed_mismatches(cfg: dict, parsed: dict) -> list[str]:
    """What DeepSpeed refused or holds differently from what the export wrote ([] when it reads it all back)."""
    if parsed["error"]:
        return [parsed["error"]]
    held, bad = parsed["held"], []
    for key, value in cfg.items():
        if key in UNREAD_KEYS:
            continue
        if key not in DEEPSPEED_KEYS:
            bad.append(f"{key}: not a key DeepSpeedConfig reads")
        elif key == "optimizer":
            if held["optimizer"]["type"].lower() != value["type"].lower() or held["optimizer"]["params"] != \
                    value["params"] or not held["optimizer_supported"]:
                bad.append(f"optimizer: {held['optimizer']} (supported: {held['optimizer_supported']})")
        elif key == "pipeline" and set(value) - set(held["pipeline_keys"]):
            bad.append(f"pipeline: {sorted(set(value) - set(held['pipeline_keys']))} not among DeepSpeed's keys")
        elif held[key] != value:
            bad.append(f"{key}: wrote {value}, DeepSpeed holds {held[key]}")
    return bad


def test_deepspeed_config_class_reads_every_export_back(tmp_path):
    exports = _deepspeed_exports()
    parsed = _deepspeed_parse([(dp, cfg) for _, dp, cfg in exports], tmp_path)
    for (what, dp, cfg), got in zip(exports, parsed, strict=True):
        assert _deepspeed_mismatches(cfg, got) == [], what
        assert got["world_size"] == dp, what  # train_batch_size = micro x accumulation x d held
    written = {k for _, _, cfg in exports for k in cfg}
    assert written == DEEPSPEED_KEYS | UNREAD_KEYS  # the exports above write every key the table knows
    interval = {what: cfg["pipeline"].get("activation_checkpoint_interval") for what, _, cfg in exports
                if "pipeline" in cfg}
    assert interval["t4p2 full k=1"] == 1 and interval["t4p2 full k=3"] == 3 and interval["t4p2 selective k=1"] is None


BROKEN = {
    "unknown-zero-key": lambda c: c["zero_optimization"].update(stag=1),
    "batch-identity": lambda c: c.update(gradient_accumulation_steps=c["gradient_accumulation_steps"] + 1),
    "zero-stage-7": lambda c: c["zero_optimization"].update(stage=7),
    "misspelt-top-level-key": lambda c: c.update(train_batch_sise=c.pop("train_batch_size")),
    "unknown-optimizer": lambda c: c["optimizer"].update(type="AdamWW"),
}


@pytest.fixture(scope="module")
def broken_parsed(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    """Each broken copy of the first export and what DeepSpeed's config class made of it: all read in one
    subprocess (importing deepspeed costs seconds; one import per case was a quarter of this file's time)."""
    _, dp, cfg = _deepspeed_exports()[0]
    broken = {}
    for name, break_it in BROKEN.items():
        broken[name] = copy.deepcopy(cfg)
        break_it(broken[name])
    parsed = _deepspeed_parse([(dp, b) for b in broken.values()], tmp_path_factory.mktemp("broken"))
    return {name: (broken[name], got) for name, got in zip(broken, parsed, strict=True)}


@pytest.mark.parametrize("name", list(BROKEN))
def test_deepspeed_validator_rejects_a_broken_export(broken_parsed, name):
    broken, parsed = broken_parsed[name]
    assert _deepspeed_mismatches(broken, parsed)


# --- SLURM: sbatch --test-only ---------------------------------------------------------------------------------------
def _slurm_conf(cluster: Cluster, path: Path) -> Path:
    """A slurm.conf naming the cluster's nodes and GPUs, for sbatch to read its options against. Its controller is
    on a loopback port where nothing listens, so sbatch stops once it has built the request."""
    lines = ["ClusterName=frenzy-check", "SlurmctldHost=localhost(127.0.0.1)", "SlurmctldPort=1",
             "AuthType=auth/none", "CredType=cred/none", "MessageTimeout=1", "GresTypes=gpu"]
    lines += [f"NodeName={n.name} CPUs=1 Gres=gpu:{n.num_gpus} State=UNKNOWN" for n in cluster.nodes]
    lines.append("PartitionName=debug Nodes=ALL Default=YES")
    path.write_text("\n".join(lines) + "\n")
    return path


def _sbatch_test_only(text: str, cluster: Cluster, tmp_path: Path) -> subprocess.CompletedProcess:
    if shutil.which("sbatch") is None:
        pytest.skip("sbatch is not installed (apt-get install slurm-client; see .ci/run)")
    script = tmp_path / "train.sbatch"
    script.write_text(text, encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(_slurm_conf(cluster, tmp_path / "slurm.conf")),
           "LC_ALL": "C.UTF-8"}
    return subprocess.run(["sbatch", "--test-only", str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=30)


# What sbatch says once its options parsed and it tried to send the job: the only failure a good script may show
NO_CONTROLLER = "Unable to contact slurm controller"


def _sbatch_accepted(run: subprocess.CompletedProcess) -> bool:
    """sbatch parsed every option: it submitted (a real cluster), or its only complaint is the missing controller."""
    said = [line for line in run.stderr.splitlines() if line.strip()]
    return run.returncode == 0 or (bool(said) and all(NO_CONTROLLER in line for line in said))


@pytest.mark.parametrize("which", ["homogeneous", "heterogeneous"])
def test_sbatch_reads_every_directive_of_the_slurm_export(which, tmp_path):
    plan, train, cluster = (SPREAD, TRAIN, CLUSTER) if which == "homogeneous" else (HET, TRAIN96, MIXED)
    text = export_plan("slurm", MODEL, train, plan, cluster, TOKENS)
    run = _sbatch_test_only(text, cluster, tmp_path)
    assert _sbatch_accepted(run), run.stderr
    assert "unrecognized option" not in run.stderr and "Invalid" not in run.stderr


@pytest.mark.parametrize(("old", "new"), [
    ("#SBATCH --time=", "#SBATCH --time=banana"),  # not a time
    ("#SBATCH --nodes=", "#SBATCH --nodez="),  # not an option
    ("#SBATCH --gpus-per-node=", "#SBATCH --gpus-per-node=gpu:x"),  # not a GPU count
])
def test_sbatch_rejects_a_broken_slurm_export(old, new, tmp_path):
    text = export_plan("slurm", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS)
    assert old in text
    run = _sbatch_test_only(text.replace(old, new, 1), CLUSTER, tmp_path)
    assert not _sbatch_accepted(run), run.stderr


# --- Kubernetes: the CRDs' openAPIV3Schema ---------------------------------------------------------------------------
SCHEMAS = {"PyTorchJob": "kubeflow_pytorchjob_v1_schema.json", "JobSet": "jobset_v1alpha2_schema.json"}


def _strict(schema: dict) -> dict:
    """The schema with every object that lists its properties closed to others: the API server prunes unknown
    fields silently, `kubectl apply --validate=strict` (fieldValidation=Strict) refuses them, as this does. Objects
    with x-kubernetes-preserve-unknown-fields or additionalProperties stay open."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and \
            not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _k8s_errors(manifest: dict) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install jsonschema)")
    schema = _strict(json.loads((DATA / SCHEMAS[manifest["kind"]]).read_text()))
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]
    name = manifest["metadata"]["name"]  # ObjectMeta is not in a CRD's schema: a DNS-1035 label, as export.py writes
    if not (re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63):
        errors.append(f"metadata/name: {name!r} is not a DNS-1035 label")
    return errors


def _yaml12_numbers(text: str) -> list[str]:
    """Plain scalars that a YAML 1.2 reader (kubectl, the API server) takes as numbers where PyYAML takes strings."""
    number = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
    found = []
    for token in yaml.scan(text):
        if isinstance(token, yaml.ScalarToken) and token.plain and number.fullmatch(token.value):
            if not isinstance(yaml.safe_load(token.value), (int, float)):
                found.append(token.value)
    return found


@pytest.mark.parametrize("which", ["homogeneous", "heterogeneous"])
def test_kubernetes_manifest_is_valid_for_its_crd(which, tmp_path):
    plan, train, cluster = (SPREAD, TRAIN, CLUSTER) if which == "homogeneous" else (HET, TRAIN96, MIXED)
    text = export_plan("kubernetes", MODEL, train, plan, cluster, TOKENS)
    manifest = yaml.safe_load(text)
    assert manifest["kind"] == ("PyTorchJob" if which == "homogeneous" else "JobSet")
    assert _k8s_errors(manifest) == []
    assert _yaml12_numbers(text) == []  # e.g. MIN_LR 3e-05 is quoted: an env value must stay a string
    assert "&id" not in text and "*id" not in text  # no YAML anchors: each replica spells out its pod


@pytest.mark.parametrize("break_it", [
    pytest.param(lambda m: m["spec"].update(pytorchReplicaSpec=m["spec"].pop("pytorchReplicaSpecs")),
                 id="misspelt-spec-key"),
    pytest.param(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas="one"), id="replicas-not-int"),
    pytest.param(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
                 [0].update(value=3e-05), id="env-value-number"),
    pytest.param(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].update(
        comand=["torchrun"]), id="misspelt-container-key"),
    pytest.param(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
                 ["resources"]["limits"].update({"nvidia.com/gpu": "eight"}), id="gpu-limit-not-a-quantity"),
])
def test_kubernetes_validator_rejects_a_broken_pytorchjob(break_it):
    manifest = yaml.safe_load(export_plan("kubernetes", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))
    break_it(manifest)
    assert _k8s_errors(manifest)


def test_kubernetes_validator_rejects_a_broken_jobset():
    manifest = yaml.safe_load(export_plan("kubernetes", MODEL, TRAIN96, HET, MIXED, TOKENS))
    manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["paralellism"] = 2
    assert _k8s_errors(manifest)


def test_kubernetes_pods_carry_the_run_settings_and_placeholders():
    """Data, tokenizer and checkpoints as SET-ME placeholders in the container's env, the learning-rate schedule as
    values, and the command reading each as $(VAR), which the kubelet expands from that env."""
    manifest = yaml.safe_load(export_plan("kubernetes", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))
    container = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert all(env[v].startswith("SET-ME: ") for v in ("DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_DIR"))
    assert env["LR"] == "0.0003" and env["MIN_LR"] == "3e-05" and env["SAVE_INTERVAL"] == "1000"
    command = container["command"]
    for flag, var in (("--data-path", "DATA_PATH"), ("--tokenizer-model", "TOKENIZER_MODEL"), ("--lr", "LR"),
                      ("--save", "CHECKPOINT_DIR"), ("--load", "CHECKPOINT_DIR")):
        assert command[command.index(flag) + 1] == f"$({var})" and var in env


# --- Megatron-LM: megatron-core's TransformerConfig ------------------------------------------------------------------
# How Megatron-LM turns pretrain_gpt.py's command line into the TransformerConfig its GPT model is built from, read in
# NVIDIA/Megatron-LM at tag core_v0.16.1 (commit 55ac7082517c3878ae653c07c09c534b8aed49f6, the release the
# megatron-core 0.16.1 wheel is cut from), megatron/training/arguments.py (at d98e8a64 the same function lives in
# megatron/training/argument_utils.py, unchanged in every line used here):
# - `_add_network_size_args` adds a flag for each TransformerConfig / ModelParallelConfig field outside its `exclude`
#   list, through `ArgumentGroupFactory` (megatron/training/argument_utils.py): `--field-name`; a bool field that
#   defaults to True as `--no-field-name` / `--disable-field-name` (store_false), one that defaults to False as
#   store_true; the names in the field's metadata["argparse_meta"]["arg_names"] where it has them
#   (`--disable-bias-linear` for add_bias_linear, `--fp8-format` for fp8); the value typed by the field's annotation
#   (an enum member by its name, a Literal one of its choices). MEGATRON_FACTORY_FIELDS are the fields the exports
#   set that way; the flag names are derived from the installed megatron-core's own fields, so a misspelt flag is an
#   unknown one.
# - Its other flags are `add_argument` calls of its own; `core_transformer_config_from_args` copies each into the
#   config field of the same name (`for f in dataclasses.fields(config_class): if hasattr(args, f.name)`), its
#   Megatron-LM default too (MEGATRON_NAMED_FLAGS), then sets: num_moe_experts = args.num_experts,
#   num_layers_in_first/last_pipeline_stage = args.decoder_first/last_pipeline_num_layers, pipeline_dtype =
#   args.params_dtype, batch_p2p_comm = not args.overlap_p2p_comm, num_query_groups = args.num_query_groups only with
#   --group-query-attention (else None), with --swiglu activation_func F.silu, gated_linear_unit True and
#   bias_activation_fusion = args.bias_swiglu_fusion (else args.bias_gelu_fusion), fp8_param = args.fp8_param_gather;
#   MLATransformerConfig with --multi-latent-attention.
# - `validate_args` derives, before that: params_dtype (torch.float, torch.bfloat16 with --bf16),
#   virtual_pipeline_model_parallel_size (num_layers / p / --num-layers-per-virtual-pipeline-stage, or
#   --num-virtual-stages-per-pipeline-rank; None for 1), overlap_p2p_comm = False without interleaving,
#   bias_gelu_fusion = False without linear biases, add_qkv_bias = True with them (and expert_tensor_parallel_size =
#   t, which ModelParallelConfig.__post_init__ also does). Its own asserts are not mirrored: only
#   TransformerConfig.__post_init__ judges here.
# Fields no flag sets keep megatron-core's defaults, also where Megatron-LM's differ: those (apply_rope_fusion,
# gradient_accumulation_fusion, masked_softmax_fusion, ...) pick fused kernels, and the rope fusion's check is that
# Transformer Engine is installed, which says nothing about the export on a machine without a GPU.
MEGATRON_FACTORY_FIELDS = frozenset({
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "sequence_parallel", "bf16", "fp8", "num_layers", "hidden_size",
    "num_attention_heads", "ffn_hidden_size", "num_query_groups", "kv_channels", "normalization", "add_bias_linear",
    "add_qkv_bias", "multi_latent_attention", "attention_dropout", "hidden_dropout", "attention_backend",
    "recompute_granularity", "recompute_method", "recompute_num_layers", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_token_dispatcher_type", "moe_shared_expert_intermediate_size", "moe_grouped_gemm",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
})


def _moe_freq(text: str) -> int | list[int]:
    """arguments.py `moe_freq_type`: an int, or a list expression of digits, brackets, + and * (`_eval_pattern`)."""
    if "[" not in text:
        return int(text)
    assert re.fullmatch(r"[,\d\[\]()+*]+", text), text
    return eval(text, {"__builtins__": {}})  # the same characters _eval_pattern lets through to eval


# flag -> (config field, type, Megatron-LM's default): arguments.py's own flags that reach the config by name
MEGATRON_NAMED_FLAGS: dict[str, tuple[str, type | Callable, object]] = {
    "--num-experts": ("num_moe_experts", int, None),  # _add_moe_args; kw_args['num_moe_experts'] = args.num_experts
    "--moe-layer-freq": ("moe_layer_freq", _moe_freq, 1),  # _add_moe_args, type=moe_freq_type
    "--decoder-first-pipeline-num-layers": ("num_layers_in_first_pipeline_stage", int, None),  # _add_distributed_args
    "--decoder-last-pipeline-num-layers": ("num_layers_in_last_pipeline_stage", int, None),
    # _add_mla_args: their defaults, not MLATransformerConfig's (q_lora_rank 512, kv_lora_rank 512), reach the config
    "--q-lora-rank": ("q_lora_rank", int, None), "--kv-lora-rank": ("kv_lora_rank", int, 32),
    "--qk-head-dim": ("qk_head_dim", int, 128), "--qk-pos-emb-head-dim": ("qk_pos_emb_head_dim", int, 64),
    "--v-head-dim": ("v_head_dim", int, 128),
}
# flags validate_args / core_transformer_config_from_args derive config values from: True for a switch, else the type
MEGATRON_DERIVING_FLAGS: dict[str, type | bool] = {
    "--group-query-attention": True, "--swiglu": True, "--fp8-param-gather": True,
    "--num-layers-per-virtual-pipeline-stage": int, "--num-virtual-stages-per-pipeline-rank": int,
}
# flags that never reach TransformerConfig: pretrain_gpt.py's model provider (positions, untied head), the
# optimizer, the batch and schedule, data, tokenizer and checkpoints
MEGATRON_OUTSIDE_FLAGS: dict[str, type | bool] = {
    "--micro-batch-size": int, "--global-batch-size": int, "--seq-length": int, "--max-position-embeddings": int,
    "--train-iters": int, "--position-embedding-type": str, "--untie-embeddings-and-output-weights": True,
    "--use-distributed-optimizer": True, "--data-path": str, "--split": str, "--tokenizer-type": str,
    "--tokenizer-model": str, "--lr": str, "--min-lr": str, "--lr-decay-style": str, "--lr-warmup-iters": str,
    "--save": str, "--load": str, "--save-interval": str, "--grad-reduce-in-bf16": True,
    "--use-precision-aware-optimizer": True,
}


def _mcore():
    """megatron.core.transformer.transformer_config, or skip naming how to install it."""
    try:
        found = importlib.util.find_spec("megatron.core") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        pytest.skip("megatron-core is not installed (pip install --no-deps megatron-core==0.16.1; see .ci/run)")
    try:
        return importlib.import_module("megatron.core.transformer.transformer_config")
    except ImportError as err:  # megatron-core needs torch, which --no-deps leaves to the torch line of .ci/run
        pytest.skip(f"megatron-core does not import: {err}")


def _unoptional(kind):
    args = typing.get_args(kind)
    return args[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args else kind


def _factory_flags() -> dict[str, tuple[str, object]]:
    """flag -> (field, how it reads: True / False for a store_true / store_false switch, else the field's type) for
    MEGATRON_FACTORY_FIELDS, as ArgumentGroupFactory._build_argparse_kwargs_from_field names the installed
    TransformerConfig's fields (arguments.py builds the factory on TransformerConfig, also for MLA models)."""
    out: dict[str, tuple[str, object]] = {}
    for f in dataclasses.fields(_mcore().TransformerConfig):
        if f.name not in MEGATRON_FACTORY_FIELDS:
            continue
        kind = _unoptional(f.type)
        if kind is bool:
            how: object = f.default is False  # store_true where the default is False, else store_false
            names = [f"--{f.name}"] if how else [f"--no-{f.name}", f"--disable-{f.name}"]
        else:
            how, names = kind, [f"--{f.name}"]
        for name in f.metadata.get("argparse_meta", {}).get("arg_names", [n.replace("_", "-") for n in names]):
            out[name] = (f.name, how)
    return out


def _typed(kind, text: str):
    """A flag's value as argparse hands it over: an enum member by name, a Literal's choice, else kind(text)."""
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind[text]
    if typing.get_origin(kind) is typing.Literal:
        if text not in typing.get_args(kind):
            raise ValueError(f"{text!r} is not one of {typing.get_args(kind)}")
        return text
    return kind(text)


def _megatron_argv(text: str) -> list[str]:
    """The words after pretrain_gpt.py on the script's torchrun line (shlex; ${VAR} as the shell leaves them)."""
    words = _shell_words(text)
    return words[words.index("pretrain_gpt.py") + 1:]


def _megatron_flags(argv: list[str]) -> dict[str, object]:
    """{flag: value}, each value typed as Megatron-LM reads it (a switch: the value it stores). A word that is not
    a flag, a flag given twice or one no table knows fails the test: argparse would stop on it, or take the last."""
    reads = {**{flag: how for flag, (_, how) in _factory_flags().items()},
             **{flag: kind for flag, (_, kind, _) in MEGATRON_NAMED_FLAGS.items()},
             **MEGATRON_DERIVING_FLAGS, **MEGATRON_OUTSIDE_FLAGS}
    flags: dict[str, object] = {}
    words = iter(argv)
    for word in words:
        assert word in reads, f"{word}: not a flag of Megatron-LM's that this check knows"
        assert word not in flags, f"{word} given twice"
        how = reads[word]
        flags[word] = how if isinstance(how, bool) else _typed(how, next(words))
    return flags


def _megatron_config_kwargs(argv: list[str]) -> tuple[type, dict]:
    """The config class and keyword arguments core_transformer_config_from_args builds from `argv` (see above);
    every other field keeps megatron-core's default."""
    import torch
    import torch.nn.functional as F

    mc = _mcore()
    config_class = mc.MLATransformerConfig if "--multi-latent-attention" in argv else mc.TransformerConfig
    factory, flags = _factory_flags(), _megatron_flags(argv)
    fields = {f.name for f in dataclasses.fields(config_class)}
    kw = {field: default for field, _, default in MEGATRON_NAMED_FLAGS.values() if field in fields}
    kw.update({factory[flag][0]: value for flag, value in flags.items() if flag in factory})
    kw.update({MEGATRON_NAMED_FLAGS[flag][0]: value for flag, value in flags.items() if flag in MEGATRON_NAMED_FLAGS})
    # validate_args
    per_stage = kw["num_layers"] // kw.get("pipeline_model_parallel_size", 1)
    vp = flags.get("--num-virtual-stages-per-pipeline-rank") or (
        per_stage // flags["--num-layers-per-virtual-pipeline-stage"]
        if "--num-layers-per-virtual-pipeline-stage" in flags else None)
    kw["virtual_pipeline_model_parallel_size"] = vp if vp != 1 else None
    kw["overlap_p2p_comm"] = vp not in (None, 1)  # on by default (--no-overlap-p2p-communication), off without vp
    kw["params_dtype"] = torch.bfloat16 if kw.get("bf16") else torch.float
    bias = kw.get("add_bias_linear", True)
    kw["add_qkv_bias"] = kw.get("add_qkv_bias", False) or bias
    # core_transformer_config_from_args
    kw.update(pipeline_dtype=kw["params_dtype"], batch_p2p_comm=not kw["overlap_p2p_comm"], persist_layer_norm=True,
              deallocate_pipeline_outputs=True, fp8_param="--fp8-param-gather" in flags)
    if "--group-query-attention" not in flags:
        kw["num_query_groups"] = None
    if "--swiglu" in flags:  # bias_swiglu_fusion defaults to on
        kw.update(activation_func=F.silu, gated_linear_unit=True, bias_activation_fusion=True)
    else:  # bias_gelu_fusion: on, and off without linear biases (validate_args)
        kw["bias_activation_fusion"] = bias
    return config_class, kw


@functools.cache
def _megatron_exports() -> tuple[tuple[str, object, TrainingSpec, object, str], ...]:
    """(what, model, training, plan, script) for Megatron exports that between them write every flag the export
    has: dense t x p with each recompute policy, interleaved, uneven first / last stages (with and without
    interleaving, only the last set, the 405B plan the planner picks), cp, MoE with ep (etp = t), DeepSeek's dense
    first layers, shared experts and MLA, GQA, head widths other than h / a, q/k/v biases, GELU with biases, fp8
    linears, and nodes of two GPU counts."""
    from test_export import FOUR, GPT2_MCORE, _uneven_plan
    from test_plans import H100_1024, LLAMA_405B, MCORE

    out = []

    def add(what, model, train, plan, cluster=CLUSTER):
        out.append((what, model, train, plan, export_plan("megatron", model, train, plan, cluster, TOKENS)))

    for recompute, every in (("selective", 1), ("full", 1), ("full", 3), ("none", 1)):
        add(f"t4p2 {recompute} k={every}", MODEL,
            TRAIN.model_copy(update={"recompute": recompute, "recompute_every": every}), SPREAD)
    add("t4p2 fp8 linears", MODEL, TRAIN.model_copy(update={"fp8_linears": True}), SPREAD)
    add("t4p2 fp8 weights, bf16 grads", MODEL, TRAIN.model_copy(update={
        "fp8_linears": True, "fp8_params": True, "bf16_grad_reduce": True, "distributed_optimizer": True}), SPREAD)
    add("t4p2 master remainders", MODEL, TRAIN.model_copy(update={"param_remainders": True,
                                                                   "distributed_optimizer": True}), SPREAD)
    add("heterogeneous nodes", MODEL, TRAIN96, HET, MIXED)
    deep = TrainingSpec(seq_len=4096, global_batch=64, framework="megatron", distributed_optimizer=True,
                        recompute="full", recompute_every=2)
    add("interleaved, block recompute", ZOO["llama-2-13b"], deep,
        next(p for p in rank_plans(ZOO["llama-2-13b"], deep, CLUSTER, tokens=TOKENS).plans if p.vp > 1))
    add("uneven 2+4+4+2", ZOO["gpt2"], GPT2_MCORE, _uneven_plan(), FOUR)
    add("uneven interleaved", ZOO["gpt2"], GPT2_MCORE, _uneven_plan(2), FOUR)
    add("uneven, last only", ZOO["gpt2"], GPT2_MCORE,
        dataclasses.replace(_uneven_plan(), pp=3, first_stage_layers=0, last_stage_layers=2), FOUR)
    add("405B PP8 x VP8, embedding and loss slots", LLAMA_405B, MCORE,
        dataclasses.replace(next(p for p in rank_plans(LLAMA_405B, MCORE, H100_1024, tokens=TOKENS).plans),
                            dp=16, tp=8, pp=8, vp=8, first_stage_layers=15, last_stage_layers=15, micro_batch=1,
                            grad_accum=MCORE.global_batch // 16), H100_1024)
    add("uneven 405B", LLAMA_405B, MCORE,
        next(p for p in rank_plans(LLAMA_405B, MCORE, H100_1024, tokens=TOKENS).plans if p.uneven), H100_1024)
    long = TrainingSpec(seq_len=32768, global_batch=16, framework="megatron", distributed_optimizer=True,
                        recompute="full")
    add("cp", MODEL, long, next(p for p in rank_plans(MODEL, long, CLUSTER, tokens=TOKENS).plans if p.cp > 1))
    moe = TrainingSpec(seq_len=4096, global_batch=64, framework="megatron", distributed_optimizer=True,
                       recompute="full", moe_grouped_gemm=True)
    ranked = rank_plans(ZOO["mixtral-8x7b"], moe, CLUSTER, tokens=TOKENS).plans
    add("moe ep, etp = t", ZOO["mixtral-8x7b"], moe, next(p for p in ranked if p.ep > 1 and p.tp > 1))
    add("deepseek-v3: MLA, dense first layers, shared experts", ZOO["deepseek-v3"], moe,
        next(p for p in ranked if p.ep > 1 and p.tp > 1 and p.pp == 1))  # a Mixtral plan: p = 1 holds 61 layers
    shapes = TrainingSpec(seq_len=2048, global_batch=64, framework="megatron", distributed_optimizer=True,
                          recompute="selective", sequence_parallel=True)
    for name in ("deepseek-v2-lite", "qwen3-0.6b", "qwen2.5-7b", "gemma-2-2b", "llama-3.1-8b"):
        add(f"{name} top plan", ZOO[name], shapes, rank_plans(ZOO[name], shapes, CLUSTER, tokens=TOKENS).plans[0])
    return tuple(out)


def _megatron_export(what: str) -> str:
    return next(text for name, *_, text in _megatron_exports() if name == what)


def _megatron_held(config, model, training, plan) -> dict[str, tuple[object, object]]:
    """{field: (what the plan and model say, what the built config holds)}: the split, the shape, the switches."""
    embedding_slot, loss_slot = lighter_chunk_layout(plan.vp, plan.first_stage_layers, plan.last_stage_layers)
    want = {
        "tensor_model_parallel_size": plan.tp, "pipeline_model_parallel_size": plan.pp,
        "context_parallel_size": plan.cp, "expert_model_parallel_size": plan.ep,
        "expert_tensor_parallel_size": plan.tp,  # the planner splits experts t ways: Megatron's default etp
        "virtual_pipeline_model_parallel_size": plan.vp if plan.vp > 1 else None,
        "num_layers_in_first_pipeline_stage": None if embedding_slot else plan.first_stage_layers or None,
        "num_layers_in_last_pipeline_stage": None if loss_slot else plan.last_stage_layers or None,
        "account_for_embedding_in_pipeline_split": embedding_slot, "account_for_loss_in_pipeline_split": loss_slot,
        "num_layers": model.num_layers, "hidden_size": model.hidden_size, "num_attention_heads": model.num_heads,
        "ffn_hidden_size": model.ffn, "num_query_groups": model.kv_heads,
        "gated_linear_unit": model.mlp_kind == "swiglu", "add_bias_linear": model.bias,
        "add_qkv_bias": model.has_qkv_bias, "normalization": "RMSNorm" if model.norm_kind == "rmsnorm" else "LayerNorm",
        "num_moe_experts": model.num_experts or None, "multi_latent_attention": model.is_mla,
        "recompute_granularity": None if training.recompute == "none" else training.recompute,
        "sequence_parallel": plan.tp > 1 and (training.sequence_parallel or model.is_moe),  # MoE with t needs SP
        "bf16": training.precision in ("bf16-master", "amp"), "fp8": "hybrid" if training.fp8_linears else None,
        "fp8_param": training.fp8_params,
    }
    if model.is_mla:
        want.update(q_lora_rank=model.q_lora_rank, kv_lora_rank=model.kv_lora_rank, qk_head_dim=model.qk_nope_head_dim,
                    qk_pos_emb_head_dim=model.qk_rope_head_dim, v_head_dim=model.v_head_dim)
    else:
        want["kv_channels"] = model.head_dim
    if model.is_moe:
        freq = [0] * model.first_k_dense + [1] * model.num_moe_layers if model.first_k_dense else 1
        want.update(moe_router_topk=model.moe_top_k, moe_ffn_hidden_size=model.expert_ffn, moe_layer_freq=freq,
                    moe_shared_expert_intermediate_size=model.num_shared_experts * model.expert_ffn or None)
    return {field: (value, getattr(config, field, "no such field")) for field, value in want.items()}


def test_megatron_core_builds_a_transformer_config_from_every_megatron_export():
    """Each export's command line, mapped as core_transformer_config_from_args maps it, builds megatron-core's
    TransformerConfig (MLATransformerConfig for MLA models): __post_init__ accepts the split, recompute and MoE
    settings, and the config holds the plan's split and the model's shape."""
    for what, model, training, plan, text in _megatron_exports():
        config_class, kw = _megatron_config_kwargs(_megatron_argv(text))
        config = config_class(**kw)
        assert config_class.__name__ == ("MLATransformerConfig" if model.is_mla else "TransformerConfig"), what
        held = _megatron_held(config, model, training, plan)
        assert {field: v for field, v in held.items() if v[0] != v[1]} == {}, what


def test_megatron_flag_tables_name_megatron_cores_fields_and_every_exported_flag():
    """Each factory field gives its flag in the installed megatron-core, each named flag's field exists, and the
    exports above write every flag the tables know (and no other: _megatron_flags refuses those)."""
    flags = _factory_flags()
    assert {field for field, _ in flags.values()} == MEGATRON_FACTORY_FIELDS
    assert flags["--disable-bias-linear"] == ("add_bias_linear", False) and "--no-add-bias-linear" not in flags
    assert flags["--sequence-parallel"] == ("sequence_parallel", True) and flags["--fp8-format"][0] == "fp8"
    mla_fields = {f.name for f in dataclasses.fields(_mcore().MLATransformerConfig)}
    assert {field for field, _, _ in MEGATRON_NAMED_FLAGS.values()} <= mla_fields
    written = {w for *_, text in _megatron_exports() for w in _megatron_argv(text) if w.startswith("--")}
    assert written == set(flags) | set(MEGATRON_NAMED_FLAGS) | set(MEGATRON_DERIVING_FLAGS) | set(
        MEGATRON_OUTSIDE_FLAGS)


def _set(flag: str, value: str | None):
    """A change to a command line: `flag` given `value`, or (None) taken out with its value."""
    def change(argv: list[str]) -> list[str]:
        i = argv.index(flag)
        return [*argv[:i], *([flag, value] if value is not None else []), *argv[i + 2:]]
    return change


@pytest.mark.parametrize(("what", "break_it", "says"), [
    pytest.param("t4p2 full k=1", _set("--recompute-method", None), "recompute_method",
                 id="full-recompute-without-method"),
    pytest.param("t4p2 full k=1", _set("--recompute-num-layers", None), "recompute_num_layers",
                 id="full-recompute-without-num-layers"),
    pytest.param("t4p2 selective k=1", lambda a: [*a, "--recompute-num-layers", "1"], "must be None",
                 id="selective-recompute-with-num-layers"),
    pytest.param("uneven 2+4+4+2", _set("--decoder-first-pipeline-num-layers", "3"), "middle stage",
                 id="first-stage-leaves-7-layers-for-2-stages"),
    pytest.param("uneven interleaved", _set("--decoder-first-pipeline-num-layers", "1"), "virtual pipeline",
                 id="first-stage-not-divisible-by-vp"),
    pytest.param("t4p2 selective k=1", _set("--tensor-model-parallel-size", "1"), "sequence parallelism",
                 id="sequence-parallel-without-tp"),
    pytest.param("t4p2 selective k=1", _set("--num-attention-heads", "30"), "multiple of",
                 id="heads-not-split-by-tp"),
    pytest.param("moe ep, etp = t", _set("--num-experts", None), "num_moe_experts", id="ep-without-experts"),
])
def test_megatron_core_rejects_a_broken_megatron_export(what, break_it, says):
    config_class, kw = _megatron_config_kwargs(break_it(_megatron_argv(_megatron_export(what))))
    with pytest.raises(ValueError, match=says):
        config_class(**kw)


def test_megatron_read_back_reports_a_shape_the_export_drops():
    """A config that builds can still be another model: without --kv-channels Qwen3-0.6B gets h / a = 64-wide heads."""
    _, model, training, plan, text = next(e for e in _megatron_exports() if e[0] == "qwen3-0.6b top plan")
    config_class, kw = _megatron_config_kwargs(_set("--kv-channels", None)(_megatron_argv(text)))
    held = _megatron_held(config_class(**kw), model, training, plan)
    assert {field: v for field, v in held.items() if v[0] != v[1]} == {"kv_channels": (128, 64)}


# a misspelling, an abbreviation (parse_args sets allow_abbrev=False), and the store_false name that
# add_bias_linear's argparse_meta replaces with --disable-bias-linear
@pytest.mark.parametrize("flag", ["--sequence-paralel", "--num-expert", "--no-add-bias-linear"])
def test_megatron_flag_no_table_knows_fails_the_check(flag):
    _mcore()
    with pytest.raises(AssertionError, match="not a flag"):
        _megatron_flags([*_megatron_argv(_megatron_export("t4p2 selective k=1")), flag])


def test_megatron_export_carries_head_width_qkv_bias_latent_attention_and_fp8():
    """What the read-back above found missing (it ran these models with other shapes and fp8 plans in bf16): the
    head width where it is not h / a, Qwen2's q/k/v biases, DeepSeek's MLA widths, and the fp8 linears. Checked on
    the flags alone, so it runs without megatron-core."""
    flags = {what: _flags(_megatron_argv(text)) for what, *_, text in _megatron_exports()}
    assert flags["qwen3-0.6b top plan"]["--kv-channels"] == "128"  # 16 heads of 128 on h = 1024
    assert flags["gemma-2-2b top plan"]["--kv-channels"] == "256"
    assert "--kv-channels" not in flags["t4p2 selective k=1"]  # Llama-2: h / a, Megatron's default
    assert flags["qwen2.5-7b top plan"]["--add-qkv-bias"] is True
    assert flags["qwen2.5-7b top plan"]["--disable-bias-linear"] is True
    assert "--add-qkv-bias" not in flags["llama-3.1-8b top plan"]
    v3 = flags["deepseek-v3: MLA, dense first layers, shared experts"]
    assert v3["--multi-latent-attention"] is True and "--kv-channels" not in v3
    assert (v3["--q-lora-rank"], v3["--kv-lora-rank"], v3["--qk-head-dim"], v3["--qk-pos-emb-head-dim"],
            v3["--v-head-dim"]) == ("1536", "512", "128", "64", "128")
    assert "--q-lora-rank" not in flags["deepseek-v2-lite top plan"]  # no q compression: one q_proj
    assert flags["t4p2 fp8 linears"]["--fp8-format"] == "hybrid" and "--fp8-format" not in flags["t4p2 none k=1"]
    both = flags["t4p2 fp8 weights, bf16 grads"]  # arguments.py: --fp8-param-gather, --grad-reduce-in-bf16
    assert both["--fp8-param-gather"] is True and both["--grad-reduce-in-bf16"] is True
    assert "--fp8-param-gather" not in flags["t4p2 fp8 linears"] and "--grad-reduce-in-bf16" not in flags["t4p2 fp8 linears"]
    assert flags["t4p2 master remainders"]["--use-precision-aware-optimizer"] is True
    slots = flags["405B PP8 x VP8, embedding and loss slots"]  # 126 + 2 slots = 8 x 8 chunks of 2
    assert slots["--account-for-embedding-in-pipeline-split"] is True
    assert slots["--account-for-loss-in-pipeline-split"] is True
    assert "--decoder-first-pipeline-num-layers" not in slots and slots["--num-virtual-stages-per-pipeline-rank"] == "8"
    assert "--use-precision-aware-optimizer" not in both


# --- Megatron-LM: its argument parser --------------------------------------------------------------------------------
def test_megatron_arguments_parse_with_megatrons_own_parser():
    """Megatron-LM's `megatron/training/arguments.py` `parse_args` reads the exported command line. No PyPI package
    ships that file (megatron-core's wheels hold megatron/core only; megatron-bridge's mlm_compat/arguments.py
    converts checkpoint args), so this runs only where a Megatron-LM checkout is on PYTHONPATH."""
    try:
        spec = importlib.util.find_spec("megatron.training.arguments")
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        pytest.skip("megatron.training.arguments is not importable: no PyPI package ships it; put a Megatron-LM "
                    "checkout on PYTHONPATH to run this check")
    from megatron.training.arguments import parse_args

    words = _shell_words(export_plan("megatron", MODEL, TRAIN, SPREAD, CLUSTER, TOKENS))
    argv = words[words.index("pretrain_gpt.py"):]
    argv = [re.sub(r"\$\{(\w+)\}", r"\1", w) for w in argv]  # the script's ${DATA_PATH} etc. as plain values
    old = sys.argv
    try:
        sys.argv = argv
        args = parse_args(ignore_unknown_args=False)  # argparse exits on any flag or choice it does not know
    finally:
        sys.argv = old
    assert args.tensor_model_parallel_size == SPREAD.tp and args.pipeline_model_parallel_size == SPREAD.pp
