"""Write tests/data/tune_traces.jsonl: fake-tensor peaks of torchtune's own model code and training step (issue 21:
"fake-tensor traces of the real PEFT, torchtune and LitGPT model code").

torchtune 0.4.0 (the PyPI wheel; its modules are those frameworks/torchtune.py was read from at 1814feb1, 2024-11-18:
the x.float() RMSNorm, separate q/k/v projections, k and v widened by expand + flatten, the chunked output head), its
Llama 3.2 / 3.1 builders at published config.json shapes (no weights), and the step of its single-device recipes
(recipes/lora_finetune_single_device.py, full_finetune_single_device.py at 0.4.0): the model built in bf16
(training.set_default_dtype), LoRA adapters trained alone (modules.peft.set_trainable_params), QLoRA on torchao's NF4
(quantize_base=True: FrozenNF4Linear), activation checkpointing per TransformerSelfAttentionLayer
(training.set_activation_checkpointing), CEWithChunkedOutputLoss with model.set_num_output_chunks or
torch.nn.CrossEntropyLoss on the flattened fp32 logits, `del logits`, backward, AdamW step, zero_grad(set_to_none).
Each run is two such optimizer steps under FakeTensorMode, every live storage counted by frenzy_core.tracer's
tracker (512-byte blocks), with CUDA's dropout (frenzy_core.hf_tracer.cuda_semantics) where no activation
checkpointing replays the layers; the peak is what torch.cuda.max_memory_allocated would report minus what a trace cannot
see (CUDA context, workspaces), so bench/memory_accuracy.py compares it with the recipe's allocated bytes without
overhead, as it does the transformers traces.

Two patches, memory-neutral: Llama3ScaledRoPE.apply_scaling (a data-dependent loop over the frequencies, which fake
tensors cannot run) returns its input, a tensor of the same shape and dtype, so the rope cache has the same bytes;
FrozenNF4Linear registers its NF4 weight by assignment instead of torch.utils.swap_tensors (`_patch_frozen_nf4_linear`);
Llama 2's builders are left out: they deep-copy one layer (modules/transformer.py _get_clones), and each copy of a
fake tensor lands in a fake mode of its own, which the step then cannot mix.

Split rule, fixed before any run was compared with the recipe (the rule of bench/hf_traces.py): every third run of
RUNS (0-based index % 3 == 2) is `heldout`, the rest `calibration`.

    .venv/bin/pip install --no-deps torchtune==0.4.0 && .venv/bin/pip install torchao==0.10.0 datasets omegaconf \
        sentencepiece tiktoken blobfile      # the tracer's extra; CI does not need it (the test reads the fixture)
    .venv/bin/python bench/tune_traces.py [--out PATH]

The last line printed is a JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.models import ModelSpec  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

OUT = REPO / "tests" / "data" / "tune_traces.jsonl"

# config.json shapes of the published checkpoints (no weights read): builder kwargs of torchtune 0.4.0
SHAPES = {
    # meta-llama/Llama-3.2-1B: torchtune/models/llama3_2/_model_builders.py llama3_2_1b
    "llama-3.2-1b": ("llama3_2", dict(vocab_size=128_256, num_layers=16, num_heads=32, num_kv_heads=8, embed_dim=2048,
                                      max_seq_len=131_072, intermediate_dim=8192, rope_base=500_000,
                                      scale_factor=32), True),
    # meta-llama/Llama-3.2-3B: llama3_2_3b
    "llama-3.2-3b": ("llama3_2", dict(vocab_size=128_256, num_layers=28, num_heads=24, num_kv_heads=8, embed_dim=3072,
                                      max_seq_len=131_072, intermediate_dim=8192, rope_base=500_000,
                                      scale_factor=32), True),
    # meta-llama/Llama-3.1-8B: torchtune/models/llama3_1/_model_builders.py llama3_1_8b
    "llama-3.1-8b": ("llama3_1", dict(vocab_size=128_256, num_layers=32, num_heads=32, num_kv_heads=8, embed_dim=4096,
                                      max_seq_len=131_072, intermediate_dim=14_336, rope_base=500_000), False),
    "tiny-llama3": ("llama3_2", dict(vocab_size=1024, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=256,
                                     max_seq_len=2048, intermediate_dim=1024, rope_base=500_000, scale_factor=32),
                    True),
}
ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "output_proj"}
MLP = ("gate", "up", "down")

# (shape, method, lora targets, rank, dropout, seq, micro-batch, accumulation, AC, loss chunks (0: plain CE), AdamW)
RUNS = [
    ("llama-3.2-1b", "full", "", 0, 0.0, 2048, 2, 1, True, 8, "adamw-fused"),
    ("llama-3.2-1b", "full", "", 0, 0.0, 1024, 2, 1, False, 0, "adamw"),
    ("llama-3.2-1b", "lora", "q,v", 8, 0.0, 2048, 2, 1, True, 8, "adamw-fused"),
    ("llama-3.2-1b", "lora", "q,k,v,o,gate,up,down", 64, 0.0, 1024, 4, 1, False, 0, "adamw"),
    ("llama-3.2-1b", "qlora", "q,k,v,o,gate,up,down", 8, 0.0, 2048, 2, 1, True, 8, "adamw-fused"),
    ("llama-3.2-3b", "qlora", "q,v,o,gate,up,down", 64, 0.0, 4096, 2, 1, True, 8, "adamw-fused"),
    ("llama-3.2-3b", "lora", "q,v,o,gate,up,down", 64, 0.0, 4096, 2, 1, True, 8, "adamw-fused"),
    ("llama-3.2-3b", "full", "", 0, 0.0, 4096, 2, 1, True, 8, "adamw-fused"),
    ("llama-3.1-8b", "qlora", "q,k,v,o,gate,up,down", 8, 0.0, 2048, 2, 1, True, 8, "adamw-fused"),
    ("llama-3.1-8b", "lora", "q,k,v,o,gate,up,down", 8, 0.0, 1024, 1, 1, False, 0, "adamw-fused"),
    ("tiny-llama3", "lora", "q,v", 8, 0.05, 512, 4, 2, False, 0, "adamw"),
    ("llama-3.1-8b", "qlora", "q,k,v,o,gate,up,down", 8, 0.05, 512, 2, 1, True, 0, "adamw"),
    ("llama-3.2-1b", "lora", "q,v", 8, 0.05, 512, 2, 2, True, 0, "adamw"),
    ("tiny-llama3", "qlora", "q,k,v,o,gate,up,down", 16, 0.0, 1024, 2, 1, False, 8, "adamw-fused"),
]


def model_spec(name: str) -> ModelSpec:
    family, kw, tied = SHAPES[name]
    return ModelSpec(name=name, vocab_size=kw["vocab_size"], hidden_size=kw["embed_dim"], num_layers=kw["num_layers"],
                     num_heads=kw["num_heads"], num_kv_heads=kw["num_kv_heads"],
                     ffn_size=kw["intermediate_dim"], mlp_kind="swiglu", tie_embeddings=tied,
                     position_kind="rotary", max_positions=kw["max_seq_len"], norm_kind="rmsnorm", bias=False)


def training_spec(run) -> TrainingSpec:
    _, method, targets, rank, dropout, seq, b, accum, ac, chunks, opt = run
    fields = dict(seq_len=seq, micro_batch=b, global_batch=b * accum, precision="bf16", framework="torchtune",
                  optimizer=opt, recompute="full" if ac else "none", loss_dtype="fp32")
    if chunks:
        fields["loss_chunks"] = chunks
    if method != "full":
        fields.update(lora_rank=rank, lora_targets=targets, lora_dropout=dropout)
    if method == "qlora":
        fields.update(base_quant="nf4-dq", quant_backend="torchao")
    return TrainingSpec(**fields)


def run_id(run) -> str:
    name, method, targets, rank, dropout, seq, b, accum, ac, chunks, opt = run
    lora = f":r{rank}:{targets.replace(',', '')}:d{dropout:g}" if method != "full" else ""
    return (f"torchtune:{name}:{method}{lora}:s{seq}:b{b}x{accum}:{'ac' if ac else 'noac'}:"
            f"{'ce' + str(chunks) if chunks else 'ce'}:{opt}")


def _build(torch, run):
    import importlib

    name, method, targets, rank, dropout, *_ = run
    family, kw, tied = SHAPES[name]
    builders = importlib.import_module(f"torchtune.models.{family}._component_builders")
    if method == "full":
        return getattr(builders, family)(**kw)
    chosen = targets.split(",")
    attn = [ATTN[t] for t in chosen if t in ATTN]
    mlp = any(t in MLP for t in chosen)
    return getattr(builders, f"lora_{family}")(attn, mlp, False, lora_rank=rank, lora_alpha=2 * rank,
                                               lora_dropout=dropout, quantize_base=method == "qlora", **kw)


def trace(run) -> tuple[int, str]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtune import training
    from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE

    from frenzy_core import hf_tracer, tracer

    Llama3ScaledRoPE.apply_scaling = lambda self, freqs, *a, **k: freqs  # memory-neutral (module docstring)
    _patch_frozen_nf4_linear(torch)
    tracker = tracer._make_tracker(torch)()
    with FakeTensorMode():
        # built before the tracker starts (torch.utils.swap_tensors in FrozenNF4Linear refuses a tensor the
        # tracker's weak references watch), then every parameter and buffer is counted, a tensor subclass (NF4) by
        # its inner tensors
        with training.set_default_dtype(torch.bfloat16):
            model = _build(torch, run)
        # CUDA's dropout (fused native_dropout: a 1-byte mask) where CPU multiplies by a bf16 noise tensor
        # (frenzy_core.hf_tracer.cuda_semantics, as for the transformers traces). Not under activation
        # checkpointing: its recomputation runs outside the function mode and would find other saved tensors;
        # there a checkpointed layer keeps only its input, and the CPU noise lives only while one layer is replayed
        checkpointed = run[8]
        cuda = contextlib.nullcontext() if checkpointed else hf_tracer.cuda_semantics(
            torch, None, frozenset({"dropout", "sdpa"}))
        with cuda, tracker:
            tracker.phase = "setup"
            tracker.track([leaf for t in (*model.parameters(), *model.buffers()) for leaf in _leaves(t)])
            _step(torch, tracker, model, run)
    return tracker.peak, tracker.peak_phase


def _patch_frozen_nf4_linear(torch) -> None:
    """FrozenNF4Linear.__init__ of 0.4.0 registers its NF4 weight with torch.utils.swap_tensors, which refuses a fake
    tensor (FakeTensorMode keeps weak references to it); the same module results from assigning the Parameter, which
    is what this does: the bf16 weight is dropped, the NF4 weight registered, as in the original."""
    from torchao.dtypes.nf4tensor import to_nf4
    from torchtune.modules.low_precision import nf4_linear

    def init(self, in_dim, out_dim, bias=False, device=None, dtype=None, **quantization_kwargs):
        torch.nn.Linear.__init__(self, in_dim, out_dim, bias=bias, device=device, dtype=dtype)
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.weight = torch.nn.Parameter(to_nf4(self.weight, **quantization_kwargs), requires_grad=False)

    nf4_linear.FrozenNF4Linear.__init__ = init


def _leaves(t) -> list:
    """The plain tensors holding a tensor's bytes: a wrapper subclass (torchao's NF4Tensor) by its inner tensors."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return [leaf for n in names for leaf in _leaves(getattr(t, n))]
    return [t]


def _step(torch, tracker, model, run) -> None:
    """Two optimizer steps of torchtune 0.4.0's single-device recipes (module docstring)."""
    from torchtune import modules, training
    from torchtune.modules.loss import CEWithChunkedOutputLoss
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    name, method, _, _, _, seq, b, accum, ac, chunks, opt = run
    vocab = SHAPES[name][1]["vocab_size"]
    if method != "full":
        set_trainable_params(model, get_adapter_params(model))
    if ac:
        training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    loss_fn = CEWithChunkedOutputLoss(num_output_chunks=chunks) if chunks else torch.nn.CrossEntropyLoss()
    if chunks:
        model.set_num_output_chunks(chunks)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=opt == "adamw-fused", foreach=opt == "adamw")
    ignore = torch.full((b, 1), -100, dtype=torch.long)
    for step in (1, 2):
        for _ in range(accum):
            tracker.phase = f"step{step}:forward"
            tokens = torch.randint(0, vocab, (b, seq))
            labels = torch.hstack((torch.randint(0, vocab, (b, seq))[..., 1:], ignore))
            logits = model(tokens)
            if not isinstance(logits, list):
                labels = labels.reshape(-1)
                logits = logits.reshape(-1, logits.size(-1))
            loss = loss_fn(logits, labels)
            del logits
            tracker.phase = f"step{step}:backward"
            (loss / accum).backward()
            del loss, tokens, labels
        tracker.phase = f"step{step}:optimizer-step"
        optimizer.step()
        tracker.phase = f"step{step}:zero-grad"
        optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # one run, its row on stdout
    args = parser.parse_args()
    if args.one is not None:  # each run in its own process: torchtune / torchao keep module-level tensors that
        print(json.dumps(one_row(args.one)))  # a second FakeTensorMode in the same process refuses to mix
        return
    import subprocess

    rows = []
    t0 = time.perf_counter()
    for i in range(len(RUNS)):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--one", str(i)], capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"run {i} ({run_id(RUNS[i])}) failed:\n{done.stderr[-3000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['id']:80} {row['peak_bytes'] / 2**30:7.3f} GiB  {row['peak_phase']:22} "
              f"{time.perf_counter() - t:5.1f} s", flush=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps({"runs": len(rows), "heldout_runs": sum(r["split"] == "heldout" for r in rows),
                      "wall_s": round(time.perf_counter() - t0, 1), "torchtune_version": rows[0]["torchtune_version"]}))


def one_row(i: int) -> dict:
    import torch
    import torchtune

    run = RUNS[i]
    peak, phase = trace(run)
    return {"id": run_id(run), "framework": "torchtune", "split": "heldout" if i % 3 == 2 else "calibration",
            "model_spec": model_spec(run[0]).model_dump(mode="json"),
            "training": training_spec(run).model_dump(mode="json", exclude_defaults=True),
            "peak_bytes": peak, "peak_phase": phase, "torch_version": torch.__version__,
            "torchtune_version": torchtune.__version__, "builder": SHAPES[run[0]][0]}


if __name__ == "__main__":
    main()
