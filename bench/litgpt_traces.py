"""Write tests/data/litgpt_traces.jsonl: fake-tensor peaks of LitGPT's own model code and LoRA step (issue 21:
"fake-tensor traces of the real PEFT, torchtune and LitGPT model code").

LitGPT at Lightning-AI/litgpt@8641822b3249bb94f068c254aa5d13decbc9f0a0 (2023-10-16), the commit frameworks/litgpt.py
was read at and whose "Finetuning with LoRA on 1 GPU" table bench/data/published_finetune_peaks.jsonl quotes: its
`lit_gpt` package (model.py, lora.py, config.py, utils.py) taken from the repository at that commit
(`--litgpt-src DIR`, e.g. `git archive 8641822b lit_gpt | tar -x -C DIR`), with Lightning installed, which it
imports. The step is finetune/lora.py's `train` at that commit, without Fabric's launcher (one process, one device):
the model built in bf16 (Fabric's "bf16-true" init_module sets the default dtype), `mark_only_lora_as_trainable`,
`model.max_seq_length = seq` outside the dtype context (the rope cache rebuilt in fp32, as train() does),
`logits = model(input_ids, lm_head_chunk_size=128)` with Fabric's output conversion (every floating output cast to
the default dtype, fp32: lightning/fabric/wrappers.py _FabricModule.forward, HalfPrecision.convert_output),
`logits[-1] = logits[-1][..., :-1, :]`, `chunked_cross_entropy(logits, targets[..., 1:])`, backward of
loss / accumulation, torch AdamW (foreach, CUDA's default) step and zero_grad. Two optimizer steps under
FakeTensorMode, every live storage counted by frenzy_core.tracer's tracker, with CUDA's dropout
(frenzy_core.hf_tracer.cuda_semantics: the fused native_dropout's 1-byte mask where CPU keeps a bf16 noise tensor,
which read 1 B per element too much on every LoRA input). QLoRA (bitsandbytes' CUDA kernels) is not traced.

Split rule, fixed before any run was compared with the recipe (that of bench/hf_traces.py): every third run of RUNS
(0-based index % 3 == 2) is `heldout`.

    git -C <litgpt clone> archive 8641822b lit_gpt | tar -x -C /tmp/litgpt_8641822 && .venv/bin/pip install lightning
    .venv/bin/python bench/litgpt_traces.py --litgpt-src /tmp/litgpt_8641822 [--out PATH]

The last line printed is a JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.models import ModelSpec  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

OUT = REPO / "tests" / "data" / "litgpt_traces.jsonl"
COMMIT = "8641822b3249bb94f068c254aa5d13decbc9f0a0"
LM_HEAD_CHUNK = 128  # finetune/lora.py: model(input_ids, lm_head_chunk_size=128)
# the planner's target names -> lit_gpt.lora.Config switches
SWITCHES = {"q": "to_query", "k": "to_key", "v": "to_value", "o": "to_projection", "gate": "to_mlp", "up": "to_mlp",
            "down": "to_mlp", "head": "to_head"}

# (lit_gpt config name, lora targets, rank, dropout, seq, micro-batch, accumulation)
RUNS = [
    ("phi-1_5", "q,v", 8, 0.05, 1044, 1, 2),
    ("phi-1_5", "q,v", 8, 0.05, 1044, 4, 1),
    ("phi-1_5", "q,k,v,o,gate,up,down,head", 16, 0.05, 512, 2, 1),
    ("stablelm-base-alpha-3b", "q,v", 8, 0.05, 1044, 1, 1),
    ("stablelm-base-alpha-3b", "q,k,v,o,gate,up,down", 8, 0.0, 1044, 2, 1),
    ("Llama-2-7b-hf", "q,v", 8, 0.05, 1044, 1, 1),
    ("Llama-2-7b-hf", "q,k,v,o,gate,up,down,head", 8, 0.05, 512, 2, 1),
    ("Llama-2-13b-hf", "q,v", 8, 0.05, 512, 1, 1),
    ("tiny-llama-1.1b", "q,v", 8, 0.05, 1024, 2, 1),
]


def _config(name: str, run):
    from lit_gpt.lora import Config

    _, targets, rank, dropout, *_ = run
    chosen = targets.split(",")
    switches = {flag: any(SWITCHES[t] == flag for t in chosen) for flag in set(SWITCHES.values())}
    if name == "tiny-llama-1.1b":  # TinyLlama 1.1B (GQA 4 groups): not in the commit's config list, its shape given
        return Config(name=name, block_size=2048, vocab_size=32000, padding_multiple=64, n_layer=22, n_head=32,
                      n_embd=2048, rotary_percentage=1.0, parallel_residual=False, bias=False, _norm_class="RMSNorm",
                      norm_eps=1e-5, _mlp_class="LLaMAMLP", intermediate_size=5632, n_query_groups=4, r=rank,
                      alpha=2 * rank, dropout=dropout, **switches)
    return Config.from_name(name, r=rank, alpha=2 * rank, dropout=dropout, **switches)


def model_spec(config, name: str) -> ModelSpec:
    """The planner's ModelSpec of a lit_gpt Config (the fields the memory model reads; a partial rotary fraction and
    the parallel residual, phi-1.5's and StableLM's, are not ModelSpec fields, as in bench/finetune_accuracy.py)."""
    mlp = {"LLaMAMLP": "swiglu", "GptNeoxMLP": "gelu"}[config._mlp_class]
    return ModelSpec(name=name, vocab_size=config.padded_vocab_size, hidden_size=config.n_embd,
                     num_layers=config.n_layer, num_heads=config.n_head, num_kv_heads=config.n_query_groups,
                     ffn_size=config.intermediate_size, mlp_kind=mlp, tie_embeddings=False,
                     position_kind="rotary", max_positions=config.block_size,
                     norm_kind="rmsnorm" if config._norm_class == "RMSNorm" else "layernorm", bias=config.bias,
                     head_size=None if config.head_size * config.n_head == config.n_embd else config.head_size)


def training_spec(run) -> TrainingSpec:
    _, targets, rank, dropout, seq, b, accum = run
    return TrainingSpec(seq_len=seq, micro_batch=b, global_batch=b * accum, precision="bf16", framework="litgpt",
                        lora_rank=rank, lora_targets=targets, lora_dropout=dropout, loss_dtype="fp32",
                        loss_chunks=-(-seq // LM_HEAD_CHUNK), optimizer="adamw")


def run_id(run) -> str:
    name, targets, rank, dropout, seq, b, accum = run
    return f"litgpt:{name}:lora:r{rank}:{targets.replace(',', '')}:d{dropout:g}:s{seq}:b{b}x{accum}:adamw"


def trace(run) -> tuple[int, str, dict]:
    import torch
    from lit_gpt.lora import GPT, mark_only_lora_as_trainable
    from lit_gpt.utils import chunked_cross_entropy
    from torch._subclasses.fake_tensor import FakeTensorMode

    from frenzy_core import hf_tracer, tracer

    name, _, _, _, seq, b, accum = run
    config = _config(name, run)
    tracker = tracer._make_tracker(torch)()
    # CUDA's dropout (fused native_dropout: a 1-byte mask) where CPU multiplies by a bf16 noise tensor
    # (frenzy_core.hf_tracer.cuda_semantics, as for the transformers traces)
    with FakeTensorMode(), hf_tracer.cuda_semantics(torch, None, frozenset({"dropout", "sdpa"})), tracker:
        torch.set_default_dtype(torch.bfloat16)  # Fabric("bf16-true").init_module()
        model = GPT(config)
        torch.set_default_dtype(torch.float32)
        mark_only_lora_as_trainable(model)
        model.max_seq_length = seq  # train(): the rope cache rebuilt in fp32
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, foreach=True)
        for step in (1, 2):
            for _ in range(accum):
                tracker.phase = f"step{step}:forward"
                input_ids = torch.randint(0, config.padded_vocab_size, (b, seq))
                targets = torch.randint(0, config.padded_vocab_size, (b, seq))
                logits = [chunk.to(torch.get_default_dtype()) for chunk in model(input_ids, lm_head_chunk_size=128)]
                logits[-1] = logits[-1][..., :-1, :]
                loss = chunked_cross_entropy(logits, targets[..., 1:])
                tracker.phase = f"step{step}:backward"
                (loss / accum).backward()
                del loss, logits, input_ids, targets
            tracker.phase = f"step{step}:optimizer-step"
            optimizer.step()
            tracker.phase = f"step{step}:zero-grad"
            optimizer.zero_grad()
    return tracker.peak, tracker.peak_phase, model_spec(config, name).model_dump(mode="json")


def one_row(i: int) -> dict:
    import torch

    run = RUNS[i]
    peak, phase, spec = trace(run)
    return {"id": run_id(run), "framework": "litgpt", "split": "heldout" if i % 3 == 2 else "calibration",
            "model_spec": spec, "training": training_spec(run).model_dump(mode="json", exclude_defaults=True),
            "peak_bytes": peak, "peak_phase": phase, "torch_version": torch.__version__, "litgpt_commit": COMMIT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litgpt-src", type=Path, required=True, help="a directory holding lit_gpt/ at the commit")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(args.litgpt_src))
    if args.one is not None:  # one run per process, as bench/tune_traces.py
        print(json.dumps(one_row(args.one)))
        return
    rows, t0 = [], time.perf_counter()
    for i in range(len(RUNS)):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--litgpt-src", str(args.litgpt_src), "--one", str(i)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"run {i} ({run_id(RUNS[i])}) failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{rows[-1]['id']:72} {rows[-1]['peak_bytes'] / 2**30:7.3f} GiB  {rows[-1]['peak_phase']:22} "
              f"{time.perf_counter() - t:5.1f} s", flush=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps({"runs": len(rows), "heldout_runs": sum(r["split"] == "heldout" for r in rows),
                      "wall_s": round(time.perf_counter() - t0, 1), "litgpt_commit": COMMIT}))


if __name__ == "__main__":
    main()
