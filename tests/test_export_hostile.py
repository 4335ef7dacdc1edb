"""Exports stay inert when names are hostile (issue 20).

Every model, cluster, GPU type and node name here is built with pydantic's `model_construct` (or a plain `Plan`),
so `limits.check_name` never sees it: the export itself must keep each name data. For each format the hostile export
is read back with that format's own parser (bash runs the scripts, `tomllib`, `yaml.safe_load`, `json.loads`) and
compared with the export of the same plan under benign names: same directives, sections, keys and structure, no file
called PWNED, and the name, where it shows at all, only as a value.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from frenzy_core.cluster import Cluster, Node
from frenzy_core.errors import SpecError
from frenzy_core.export import FORMATS, export_plan
from frenzy_core.gpus import CATALOG, GPUType
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.plans import Plan
from frenzy_core.training import TrainingSpec

HOSTILE = {
    "newline": "lab\ntouch PWNED",
    "subshell": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "semicolon": "lab; touch PWNED",
    "quotes": "lab' \"; touch PWNED; echo '",
    "toml_table": ']\n[experimental]\ncustom_import = "evil_pkg.pwn"',
    "emoji": "llama-\U0001f999",
    "carriage_return": "lab\rtouch PWNED",
    "sbatch_directive": "lab\n#SBATCH --wrap='touch PWNED'",
    "yaml_key": "lab\nevil_key: touch PWNED",
}
PLACES = ("model", "cluster", "gpu", "node")  # where the hostile name goes
BENIGN = "benign-name"
TRAIN = TrainingSpec(seq_len=2048, global_batch=64, micro_batch=1, zero_stage=1, recompute="full",
                     sequence_parallel=True)
TOKENS = 1e9
# d=2 t=4 p=2 on two 8-GPU nodes: 64 = d x micro-batch 1 x 32 micro-batches
BASE_PLAN = Plan("A100-80GB", 2, 4, 2, 16, 1, 32, 40 * 2**30, 30 * 2**30, 80 * 2**30, 10.0, 13107.2, 3600.0, 16.0,
                 32.0)


def _setup(name: str, place: str) -> tuple[ModelSpec, Cluster, Plan]:
    """The base plan's model, a two-node cluster and the plan, with `name` at `place` and validation bypassed."""
    gpu = name if place == "gpu" else "A100-80GB"
    base = CATALOG["A100-80GB"]
    gpu_types = (GPUType.model_construct(**{**base.model_dump(), "name": gpu}),) if place == "gpu" else ()
    nodes = tuple(Node.model_construct(name=f"{name}-{i}" if place == "node" else f"n-{i}", gpu_type=gpu, num_gpus=8,
                                       intra_link=None, intra_link_gbyte_s=None, network_gbit_s=100.0)
                  for i in range(2))
    cluster = Cluster.model_construct(name=name if place == "cluster" else "lab", description="",
                                      gpu_types=gpu_types, nodes=nodes)
    llama = ZOO["llama-2-7b"]
    model = ModelSpec.model_construct(**{**llama.model_dump(), "name": name}) if place == "model" else llama
    return model, cluster, dataclasses.replace(BASE_PLAN, gpu_type=gpu)


def _export(fmt: str, name: str, place: str) -> str:
    model, cluster, plan = _setup(name, place)
    return export_plan(fmt, model, TRAIN, plan, cluster, TOKENS)


CASES = [pytest.param(name, place, id=f"{key}-{place}") for key, name in HOSTILE.items() for place in PLACES]


# --- shell scripts: run them --------------------------------------------------------------------------------------
STUB = """#!/bin/sh
# a stand-in for {name}: records its arguments (NUL-separated, one file per call) and succeeds
printf '%s\\0' "{name}" "$@" > "$(mktemp "$STUB_LOG/call.XXXXXX")"
if [ "${{STUB_FAIL:-}}" = "{name}" ]; then exit 3; fi
case "{name}" in
  scontrol) printf 'n-0\\nn-1\\n' ;;
  hostname) echo n-0 ;;
esac
exit 0
"""
STUBS = ("torchrun", "srun", "python", "python3", "sbatch", "scontrol", "hostname", "squeue", "nvidia-smi")


def run_with_stubs(text: str, tmp_path: Path, env: dict[str, str] | None = None,
                   unset: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run `text` with bash in tmp_path, every launcher a stub first on PATH, under a SLURM-like environment with
    the placeholders set (`env` adds to it, `unset` drops names); (the run, the stubs' calls, sorted)."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir(parents=True)
    for stub in STUBS:
        path = bin_dir / stub
        path.write_text(STUB.format(name=stub))
        path.chmod(0o755)
    script = tmp_path / "launch.sh"
    script.write_text(text, encoding="utf-8")
    log = tmp_path / "stub-calls"
    log.mkdir()
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "STUB_LOG": str(log), "LC_ALL": "C.UTF-8",
            "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n-[0-1]", "SLURM_JOB_NODELIST_HET_GROUP_0": "n-0",
            "DATA_PATH": "/data/corpus_text_document", "TOKENIZER_MODEL": "/data/tokenizer",
            "CHECKPOINT_DIR": "checkpoints"}
    env = {k: v for k, v in {**base, **(env or {})}.items() if k not in unset}
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=10)
    calls = sorted(f.read_text(encoding="utf-8", errors="replace").split("\0")[:-1] for f in log.iterdir())
    return run, calls


def _pwned(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if "PWNED" in p.name]


def _sbatch_directives(text: str) -> list[str]:
    """The `#SBATCH` lines sbatch reads: those before the first line that is neither a comment nor blank."""
    out = []
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            out.append(line.split("=", 1)[0])
        elif line.strip() and not line.startswith("#"):
            break
    return out


@pytest.mark.parametrize(("name", "place"), CASES)
def test_megatron_script_runs_without_running_a_hostile_name(name, place, tmp_path):
    text = _export("megatron", name, place)
    run, calls = run_with_stubs(text, tmp_path)
    assert not _pwned(tmp_path), text
    assert run.returncode == 0, run.stderr
    # the script reached its launch: one torchrun, with the same arguments as under benign names
    assert [c[0] for c in calls if c[0] == "torchrun"] == ["torchrun"], calls
    benign_run, benign_calls = run_with_stubs(_export("megatron", BENIGN, place), tmp_path / "benign")
    assert next(c for c in calls if c[0] == "torchrun") == next(c for c in benign_calls if c[0] == "torchrun")


@pytest.mark.parametrize(("name", "place"), CASES)
def test_slurm_script_runs_without_running_a_hostile_name(name, place, tmp_path):
    if place == "node":
        # a node name that is no host name cannot go into --nodelist: refused, naming the nodes
        with pytest.raises(SpecError) as err:
            _export("slurm", name, place)
        assert err.value.field == "nodes"
        return
    text = _export("slurm", name, place)
    benign = _export("slurm", BENIGN, place)
    # sbatch reads the same directives: a name cannot end the header early or add one
    assert _sbatch_directives(text) == _sbatch_directives(benign)
    run, calls = run_with_stubs(text, tmp_path)
    assert not _pwned(tmp_path), text
    assert run.returncode == 0, run.stderr
    sruns = [c for c in calls if c[0] == "srun"]
    assert len(sruns) == 1 and "torchrun" in sruns[0], calls
    _, benign_calls = run_with_stubs(benign, tmp_path / "benign")
    assert sruns == [c for c in benign_calls if c[0] == "srun"]


def test_slurm_refuses_a_node_name_with_a_space_in_nodelist():
    with pytest.raises(SpecError, match="nodelist"):
        _export("slurm", "n 0", "node")


# --- TOML: the same tables and keys ---------------------------------------------------------------------------------
def _keys(cfg: dict) -> dict[str, set[str]]:
    return {section: set(values) for section, values in cfg.items()}


@pytest.mark.parametrize(("name", "place"), CASES)
def test_torchtitan_toml_has_the_benign_tables_and_keys(name, place):
    cfg = tomllib.loads(_export("torchtitan", name, place))
    benign = tomllib.loads(_export("torchtitan", BENIGN, place))
    assert "experimental" not in cfg
    assert _keys(cfg) == _keys(benign)
    if place == "model":  # the writer escapes the name, it does not change it
        assert cfg["model"]["flavor"] == name


# --- YAML and JSON: the same structure, the name only as a value ------------------------------------------------
def _shape(obj):
    """The structure of a parsed document: keys and list lengths, leaves as their type."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shape(v) for v in obj]
    return type(obj).__name__


def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


PARSERS = {"deepspeed": json.loads, "accelerate": yaml.safe_load, "kubernetes": yaml.safe_load}


@pytest.mark.parametrize("fmt", sorted(PARSERS))
@pytest.mark.parametrize(("name", "place"), CASES)
def test_structured_exports_keep_the_benign_structure(fmt, name, place):
    parse = PARSERS[fmt]
    doc = parse(_export(fmt, name, place))
    assert _shape(doc) == _shape(parse(_export(fmt, BENIGN, place)))
    # where the name shows, it is a whole value (accelerate's main_process_ip is a node name) or made into a plain
    # identifier (a Kubernetes name or label value), never a key of its own
    for s in _strings(doc):
        if "PWNED" in s or "evil" in s:
            assert name in s or re.fullmatch(r"[A-Za-z0-9._-]+", s), s


RFC1123_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # DNS-1035: also starts with a letter
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


@pytest.mark.parametrize(("name", "place"), CASES + [pytest.param("3b-café", "model", id="digit-accent")])
def test_kubernetes_names_and_labels_are_valid_whatever_the_names(name, place):
    job = yaml.safe_load(_export("kubernetes", name, place))
    assert RFC1123_LABEL.fullmatch(job["metadata"]["name"]), job["metadata"]["name"]
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        selector = spec["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
        assert LABEL_VALUE.fullmatch(selector), selector


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_exports_a_hostile_gpu_type_without_a_raw_control_character_in_a_comment(fmt):
    text = _export(fmt, HOSTILE["carriage_return"], "gpu")
    for line in text.split("\n"):
        assert "\r" not in line or not line.lstrip().startswith("#"), line

