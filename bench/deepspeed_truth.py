"""Write tests/data/deepspeed_estimates.jsonl: DeepSpeed's own ZeRO memory estimators over a grid of setups.

DeepSpeed ships two estimators of the per-GPU memory of the model states (params, gradients, optimizer states):
`estimate_zero2_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py) and
`estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage3.py). This script evaluates them, through the
installed `deepspeed` package, for published model shapes (bench/hf_traces.py CONFIGS, plus Llama-3.1-70B) x
data-parallel degrees x ZeRO stages x offload, and writes one row per evaluation with the package version, the
source file, the function, the sha256 of the function's source text and the DeepSpeed commit whose file holds that
same text. tests/test_deepspeed_recipe.py compares the deepspeed recipe's model-state terms with these rows (it reads
the fixture; CI does not install deepspeed).

The estimators' inputs come from the real transformers classes built on the meta device: `total_params` counts shared
(tied) parameters once, as DeepSpeed's `model_to_params` does (it dedupes by `data_ptr()`, which is 0 for every meta
tensor, so here by identity: the same rule for real tensors); `largest_layer_params` is DeepSpeed's own
`stage3.model_to_params(model)[1]`: the most parameters any single module holds directly (`recurse=False`).

    DS_BUILD_OPS=0 pip install deepspeed   # imports on a CPU-only machine (accelerator "cpu")
    python bench/deepspeed_truth.py --mirror /work/.mirror/deepspeedai+DeepSpeed/repo

The last line printed is a JSON object with the row count and the version.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_traces import CONFIGS  # noqa: E402

from frenzy_core.models import model_from_hf_config  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "deepspeed_estimates.jsonl"
MODELS = {
    **{name: CONFIGS[name] for name in ("gpt2", "gpt2-medium", "llama-3.2-1b", "qwen2.5-7b", "mistral-7b",
                                        "llama-3.1-8b")},
    # meta-llama/Llama-3.1-70B config.json
    "llama-3.1-70b": dict(model_type="llama", vocab_size=128256, hidden_size=8192, num_hidden_layers=80,
                          num_attention_heads=64, num_key_value_heads=8, intermediate_size=28672,
                          max_position_embeddings=131072, tie_word_embeddings=False, rope_theta=500000.0),
}
# (num_gpus_per_node, num_nodes): the estimators' hardware arguments; dp = their product
HARDWARE = ((1, 1), (8, 1), (8, 8))
# ZeRO-2: offload_optimizer none / cpu. ZeRO-3: (offload_optimizer, offload_param): none/none, cpu/none, cpu/cpu.
ZERO2_OFFLOAD = (False, True)
ZERO3_OFFLOAD = ((False, False), (True, False), (True, True))
SOURCES = {
    2: ("deepspeed/runtime/zero/stage_1_and_2.py", "estimate_zero2_model_states_mem_needs"),
    3: ("deepspeed/runtime/zero/stage3.py", "estimate_zero3_model_states_mem_needs"),
}


def estimator_inputs(torch, transformers, stage3, config: dict) -> tuple[int, int]:
    """(total_params, largest_layer_params) of the transformers model, as DeepSpeed's model_to_params counts them."""
    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    _, largest = stage3.model_to_params(model)
    return int(total), int(largest)


def function_source(module, name: str) -> tuple[str, str]:
    text = inspect.getsource(getattr(module, name))
    return text, hashlib.sha256(text.encode()).hexdigest()


def mirror_commit(mirror: Path | None, path: str, text: str) -> str | None:
    """The mirror's HEAD commit if its copy of `path` contains the estimator's exact source text, else None."""
    if mirror is None:
        return None
    git = ["git", "-C", str(mirror)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    file_text = subprocess.run([*git, "show", f"HEAD:{path}"], capture_output=True, text=True, check=True).stdout
    return head if text in file_text else None


def rows(mirror: Path | None) -> list[dict]:
    import deepspeed
    import torch
    import transformers
    from deepspeed.runtime.zero import stage3, stage_1_and_2

    modules = {2: stage_1_and_2, 3: stage3}
    provenance = {}
    for stage, (path, name) in SOURCES.items():
        text, digest = function_source(modules[stage], name)
        provenance[stage] = {"source_repo": "deepspeedai/DeepSpeed", "source_path": path, "function": name,
                             "function_sha256": digest, "source_commit": mirror_commit(mirror, path, text)}
    out = []
    for model_name, config in MODELS.items():
        total, largest = estimator_inputs(torch, transformers, stage3, config)
        spec = model_from_hf_config(config, name=model_name)
        assert spec.parameter_count() == total, (model_name, spec.parameter_count(), total)
        for gpus_per_node, nodes in HARDWARE:
            dp = gpus_per_node * nodes
            for cpu_offload in ZERO2_OFFLOAD:
                cpu, gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(
                    total, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=cpu_offload)
                args = dict(total_params=total, num_gpus_per_node=gpus_per_node, num_nodes=nodes,
                            cpu_offload=cpu_offload, additional_buffer_factor=1.5)
                out.append(_row(model_name, config, spec, 2, dp, "optimizer" if cpu_offload else "none", args,
                                {"cpu_mem_bytes": cpu, "gpu_mem_bytes": gpu}, provenance[2], deepspeed.__version__))
            for cpu_offload, offload_params in ZERO3_OFFLOAD:
                cpu, gpu, largest_memory = stage3.estimate_zero3_model_states_mem_needs(
                    total, largest, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=cpu_offload,
                    cpu_offload_params=offload_params, zero_init=True)
                args = dict(total_params=total, largest_layer_params=largest, num_gpus_per_node=gpus_per_node,
                            num_nodes=nodes, cpu_offload=cpu_offload, cpu_offload_params=offload_params,
                            zero_init=True, additional_buffer_factor=1.5)
                offload = "params" if offload_params else "optimizer" if cpu_offload else "none"
                result = {"cpu_mem_bytes": cpu, "gpu_mem_bytes": gpu, "largest_layer_memory_bytes": largest_memory}
                out.append(_row(model_name, config, spec, 3, dp, offload, args, result, provenance[3],
                                deepspeed.__version__))
    return out


def _row(model_name, config, spec, stage, dp, offload, args, result, provenance, version) -> dict:
    return {
        "id": f"ds-estimator:zero{stage}:{model_name}:dp{dp}:offload-{offload}",
        "deepspeed_version": version, **provenance,
        "model": model_name, "hf_config": config, "model_spec": spec.model_dump(),
        "zero_stage": stage, "dp": dp, "offload": offload, "arguments": args, "result": result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=None, help="bare git mirror of deepspeedai/DeepSpeed")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    table = rows(args.mirror)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in table))
    print(json.dumps({"rows": len(table), "deepspeed_version": table[0]["deepspeed_version"],
                      "zero2_rows": sum(r["zero_stage"] == 2 for r in table),
                      "zero3_rows": sum(r["zero_stage"] == 3 for r in table),
                      "source_commit": table[0]["source_commit"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
