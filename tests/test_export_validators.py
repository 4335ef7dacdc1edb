"""Each launch export read by its tool's own parser or schema, where that installs on a CPU machine (issue 23).

- DeepSpeed: `deepspeed.runtime.config.DeepSpeedConfig` (0.19.x) builds each exported JSON, with its batch identity
  checked against the plan's data-parallel size, and every key written is read back from what DeepSpeed holds.
- SLURM: `sbatch --test-only` from Debian's slurm-client reads every `#SBATCH` line with sbatch's own option parser;
  no controller runs here, so a script that parses gets as far as "Unable to contact slurm controller".
- Kubernetes: the PyTorchJob (Kubeflow training-operator v1.9.0) and JobSet (v0.12.0) CRDs' openAPIV3Schema,
  vendored under tests/data/ (see its README), with unknown fields refused as `kubectl apply --validate=strict` does.
- Megatron-LM: no PyPI package ships `megatron/training/arguments.py`, so that test skips unless a Megatron-LM checkout
  is importable. torchtitan's own parser runs in tests/test_export.py.

Each validator skips with the reason when its tool is missing, and each is shown to reject a broken export.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_export import CLUSTER, HET, MIXED, MODEL, SPREAD, TOKENS, TRAIN, TRAIN96, _shell_words

from frenzy_core.cluster import Cluster
from frenzy_core.export import export_plan
from frenzy_core.models import ZOO
from frenzy_core.plans import rank_plans
from frenzy_core.training import TrainingSpec

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
    plan = next(p for p in rank_plans(mixtral, moe, CLUSTER, tokens=TOKENS).plans if p.ep > 1 and p.vp == 1)
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


@pytest.mark.parametrize("break_it", [
    pytest.param(lambda c: c["zero_optimization"].update(stag=1), id="unknown-zero-key"),
    pytest.param(lambda c: c.update(gradient_accumulation_steps=c["gradient_accumulation_steps"] + 1),
                 id="batch-identity"),
    pytest.param(lambda c: c["zero_optimization"].update(stage=7), id="zero-stage-7"),
    pytest.param(lambda c: c.update(train_batch_sise=c.pop("train_batch_size")), id="misspelt-top-level-key"),
    pytest.param(lambda c: c["optimizer"].update(type="AdamWW"), id="unknown-optimizer"),
])
def test_deepspeed_validator_rejects_a_broken_export(break_it, tmp_path):
    _, dp, cfg = _deepspeed_exports()[0]
    broken = copy.deepcopy(cfg)
    break_it(broken)
    (parsed,) = _deepspeed_parse([(dp, broken)], tmp_path)
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

