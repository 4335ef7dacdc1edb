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
    python bench/deepspeed_truth.py        # re-evaluate and compare with the fixture (no deepspeed: say so, exit 0)
    python bench/deepspeed_truth.py --write --mirror /work/.mirror/deepspeedai+DeepSpeed/repo \
        --real-gpu tests/data/real_gpu_peaks.jsonl

`--write` rewrites the fixture. `--real-gpu tests/data/real_gpu_peaks.jsonl` (with --write) also rewrites, at the end
of that file, the rows DeepSpeed itself published as real-GPU peaks (DEEPSPEED_EXAMPLES_TABLE below, transcribed
with file, table and row), replacing any earlier `framework: "deepspeed"` rows and leaving every other row as it
is; the split is real_gpu_peaks.split_of.

The last line printed is a JSON object with the row counts, the version and whether the fixture was reproduced.
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


# --- real-GPU peaks DeepSpeed published -----------------------------------------------------------------------------
# deepspeedai/DeepSpeedExamples training/bf16_master_weight/README.md, the "Baseline (fp32 master)" rows:
# configs/baseline.json (bf16, ZeRO-3, AdamW, reduce_bucket_size 5e7, stage3_param_persistence_threshold 0,
# overlap_comm, no torch_autocast) with train.py's SimpleTransformerModel. "Peak Memory" is
# torch.cuda.max_memory_allocated() since torch.cuda.reset_peak_memory_stats() at the top of main(), i.e. it includes
# deepspeed.initialize(); "Allocated Memory" is torch.cuda.memory_allocated() after the last step; both printed by
# format_memory(): bytes / 1024**3 with two decimals, labelled "GB".
# Where each figure is: the four tables are in the README of 516082c (2025-12-04, "add bf16 master weights example",
# the first commit of pull request #994, reachable as refs/pull/994/head, not on main). The PR was squash-merged as
# 6a3d817 (2025-12-20), whose README keeps only the activation-checkpointing table ("4xH100"); main's HEAD 45b4b71
# still has it. train.py and configs/ are byte-identical at 516082c and 6a3d817, so the runs are the same code.
DSX_PR_COMMIT = "516082c65853d48b50850a05782267f36bcdc170"  # refs/pull/994/head: all four tables
DSX_MAIN_COMMIT = "45b4b7156c8794a3452a5a7d03dbd8d797068569"  # main HEAD read: the activation-checkpointing table only
DSX_PATH = "training/bf16_master_weight/README.md"
# Features of these runs no recipe models (bench/memory_accuracy.py reports such rows apart). The run's
# reduce_bucket_size (5e7) is a TrainingSpec field; stage3_param_persistence_threshold 0 is what the recipe assumes
# (it keeps no small parameter gathered for good).
DSX_FEATURES = [
    "torch-mha-need-weights",  # nn.MultiheadAttention(x, x, x) with need_weights=True: explicit bmm + bf16 softmax
    # (no autocast, no fp32 upcast), packed in_proj copied contiguous, out_proj.weight read as a ZeRO-3 external param
    "bf16-loss-on-kept-logits",  # nn.CrossEntropyLoss on the bf16 logits, the `logits` variable alive in backward
    "peak-includes-initialize",  # the peak window opens before deepspeed.initialize moves the module to the GPU
]
DSX_BUCKET = 50_000_000  # configs/baseline.json zero_optimization.reduce_bucket_size
# (id suffix, table, hidden, layers, heads, micro-batch, GPUs, activation checkpointing, peak GiB, allocated GiB,
#  commit whose README holds the figure, GPU as that README names it)
DEEPSPEED_EXAMPLES_TABLE = [
    ("254m-1gpu", "1-GPU Results", 1024, 12, 16, 4, 1, False, 5.93, 4.14, DSX_PR_COMMIT, "not stated (bf16 GPU)"),
    ("254m-4gpu", "4-GPU Results (per GPU) - 254M Model", 1024, 12, 16, 4, 4, False, 3.57, 1.29, DSX_PR_COMMIT,
     "not stated (bf16 GPU)"),
    ("6.86b-4gpu", "4-GPU Results (per GPU) - 6.86B Model", 4096, 32, 32, 1, 4, False, 41.28, 25.74, DSX_PR_COMMIT,
     "not stated (bf16 GPU)"),
    ("6.86b-4gpu-ac", "4-GPU Results (per GPU) - 6.86B Model with Activation Checkpointing", 4096, 32, 32, 1, 4, True,
     31.38, 25.74, DSX_MAIN_COMMIT, "H100"),
]
PR_NOTE = (" (pull request #994's first commit, refs/pull/994/head; the squash-merged README at 6a3d817 dropped this "
           "table; train.py and configs/ are identical)")
MAIN_NOTE = " (on main since 6a3d817; the same figures are in pull request #994's first commit 516082c)"
DSX_VOCAB, DSX_SEQ = 50000, 512  # train.py defaults (random token ids), --seq_length 512


def deepspeed_examples_rows() -> list[dict]:
    from real_gpu_peaks import split_of

    out = []
    for suffix, table, h, layers, heads, b, gpus, ac, peak_gib, alloc_gib, commit, gpu in DEEPSPEED_EXAMPLES_TABLE:
        # SimpleTransformerModel: token + position embeddings, post-LN blocks (nn.MultiheadAttention, LayerNorm,
        # Linear-GELU-Linear 4h, all with biases), an untied output_proj with bias, no final norm
        spec = dict(name=f"dsx-simple-transformer-{layers}x{h}", vocab_size=DSX_VOCAB, hidden_size=h, num_layers=layers,
                    num_heads=heads, ffn_size=4 * h, mlp_kind="gelu", tie_embeddings=False, position_kind="learned",
                    max_positions=DSX_SEQ, norm_kind="layernorm", bias=True)
        recompute = "full" if ac else "none"
        training = dict(seq_len=DSX_SEQ, global_batch=b * gpus, micro_batch=b, precision="bf16-master",
                        optimizer="adamw-fused", zero_stage=3, recompute=recompute, attention="eager", dropout=0.0,
                        framework="deepspeed", reduce_bucket_size=DSX_BUCKET)
        row = dict(
            id=f"dsx:bf16_master_weight:{suffix}:baseline", framework="deepspeed", split=None,
            source=f"deepspeedai/DeepSpeedExamples {DSX_PATH} (table '{table}', row 'Baseline (fp32 master)', column "
                   f"'Peak Memory') at commit {commit}{PR_NOTE if commit == DSX_PR_COMMIT else MAIN_NOTE}; train.py "
                   f"prints torch.cuda.max_memory_allocated() / 1024**3",
            source_repo="deepspeedai/DeepSpeedExamples", source_path=DSX_PATH,
            source_config_path="training/bf16_master_weight/configs/baseline.json + train.py (SimpleTransformerModel)",
            source_commit=commit, test_type="published example" if commit == DSX_MAIN_COMMIT else "published in a PR",
            quoted=f"{table}: Baseline (fp32 master) | Allocated Memory {alloc_gib} GB | Peak Memory {peak_gib} GB",
            measured_bytes=round(peak_gib * 2**30), measured_kind="max_memory_allocated",
            measured_rank="one rank's SUMMARY line (gather_memory.py); ZeRO-3 ranks are symmetric",
            allocated_after_run_bytes=round(alloc_gib * 2**30),
            run_config=dict(reduce_bucket_size=DSX_BUCKET, stage3_param_persistence_threshold=0, overlap_comm=True,
                            contiguous_gradients=True, vocab_size=DSX_VOCAB, logits_kept_dtype_bytes=2),
            model=f"DeepSpeedExamples SimpleTransformerModel: hidden {h}, {layers} post-LN layers, {heads} heads, GELU "
                  f"ffn {4 * h}, vocab {DSX_VOCAB}, learned positions {DSX_SEQ}, untied output_proj with bias",
            model_spec=spec, seq_len=DSX_SEQ, micro_batch=b, global_batch=b * gpus, dp=gpus, tp=1, pp=1, vp=None,
            cp=1, ep=1, zero_or_fsdp="DeepSpeed ZeRO-3 (configs/baseline.json)",
            precision="bf16 params (engine casts the module), fp32 master + AdamW states (DeepSpeed FusedAdam)",
            optimizer="DeepSpeed AdamW (FusedAdam, adam_w_mode)",
            recompute="torch.utils.checkpoint per block (use_reentrant=False)" if ac else "none",
            attention="nn.MultiheadAttention (explicit bmm + softmax in bf16, non-causal)", dropout="none",
            framework_detail="DeepSpeed ZeRO-3, overlap_comm, contiguous_gradients, loss.backward() + engine.step()",
            gpu=f"{gpu} x{gpus}", world_size=gpus, training=training,
            parallel=dict(dp=gpus, tp=1, pp=1, vp=None, cp=1, ep=1), features=list(DSX_FEATURES),
            in_shared_reference=False,
        )
        row["split"] = split_of(row)
        out.append(row)
    return out


def write_real_gpu_rows(path: Path) -> list[dict]:
    """Replace the deepspeed rows at the end of the real-GPU fixture, keeping every other row and its order."""
    kept = [line for line in path.read_text().splitlines() if line.strip()
            and json.loads(line)["framework"] != "deepspeed"]
    new = deepspeed_examples_rows()
    path.write_text("".join(line + "\n" for line in kept) + "".join(json.dumps(r) + "\n" for r in new))
    return new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=None, help="bare git mirror of deepspeedai/DeepSpeed")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--write", action="store_true", help="rewrite the fixture (default: compare with it)")
    parser.add_argument("--real-gpu", type=Path, default=None, help="with --write: real_gpu_peaks.jsonl to append to")
    args = parser.parse_args(argv)
    fixture = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()] if (
        args.out.exists()) else []
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        print("deepspeed is not installed (DS_BUILD_OPS=0 pip install deepspeed): nothing re-evaluated", file=sys.stderr)
        print(json.dumps({"deepspeed_installed": False, "fixture_rows": len(fixture)}))
        return 0
    table = rows(args.mirror)
    real = write_real_gpu_rows(args.real_gpu) if args.write and args.real_gpu else []
    if args.write:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in table))
    stored = {r["id"]: r["result"] for r in fixture}
    reproduced = sum(stored.get(r["id"]) == r["result"] for r in table)
    print(json.dumps({"deepspeed_installed": True, "rows": len(table), "fixture_rows_reproduced": reproduced,
                      "real_gpu_rows_written": len(real),
                      "real_gpu_heldout": sum(r["split"] == "heldout" for r in real),
                      "deepspeed_version": table[0]["deepspeed_version"],
                      "zero2_rows": sum(r["zero_stage"] == 2 for r in table),
                      "zero3_rows": sum(r["zero_stage"] == 3 for r in table),
                      "source_commit": table[0]["source_commit"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
