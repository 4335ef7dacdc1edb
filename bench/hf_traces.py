"""Write tests/data/hf_traces.jsonl: fake-tensor peaks of the real transformers models (frenzy_core.hf_tracer).

Each row: a published config.json shape (GPT-2 124M / 355M, Llama-3.2-1B, TinyLlama-1.1B, Qwen2.5-0.5B / 7B,
Mistral-7B-v0.1, Llama-3.1-8B; since 2026-12-03 also Phi-3-mini, OLMo-2-1B, Gemma-3-1B and Qwen3-30B-A3B's
widths narrowed to two layers and 16 experts), tiny models (tiny Qwen3-MoE, Mixtral, DeepSeek-V2 / V3 among them),
a training setup, and the traced peak with its phase. MoE models are traced on real CPU tensors with bf16
parameters, DeepSeek's MLA with eager attention only (frenzy_core.hf_tracer says why). Split rule, fixed before any
recipe was compared with these traces: every third run of RUNS (0-based index % 3 == 2) is `heldout`, the rest
`calibration` (7 of the first 22, spanning the four architectures of then; the 11 runs added on 2026-12-03 follow
the same rule, 4 of them held out; their tiny configs' errors had been seen in exploration before, the rule was
not changed; the sha256 rule of tests/data/real_gpu_peaks.jsonl would have held out only 4 of the first 22).

    flock /tmp/frenzy-heavy.lock .venv/bin/python bench/hf_traces.py            # all rows, ~11 minutes on 2 cores (the MoE rows run real tensors)
    .venv/bin/python bench/hf_traces.py --only tiny --out /tmp/tiny.jsonl       # a subset elsewhere

The last line printed is a JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from frenzy_core.hf_tracer import HF_ARCHITECTURES, model_spec_of, trace_hf_peak  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf_traces.jsonl"

# config.json fields of published checkpoints (the shape only; no weights are read)
CONFIGS = {
    "tiny-gpt2": dict(model_type="gpt2", vocab_size=1024, n_embd=128, n_layer=2, n_head=4, n_positions=256,
                      bos_token_id=0, eos_token_id=0),
    "tiny-llama": dict(model_type="llama", vocab_size=1024, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=344, max_position_embeddings=512,
                       bos_token_id=0, eos_token_id=0),
    "tiny-qwen2": dict(model_type="qwen2", vocab_size=1024, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=352, max_position_embeddings=512,
                       tie_word_embeddings=True, bos_token_id=0, eos_token_id=0),
    "tiny-mistral": dict(model_type="mistral", vocab_size=1024, hidden_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, intermediate_size=448,
                         max_position_embeddings=512, sliding_window=None, bos_token_id=0, eos_token_id=0),
    # openai-community/gpt2, gpt2-medium
    "gpt2": dict(model_type="gpt2", vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024),
    "gpt2-medium": dict(model_type="gpt2", vocab_size=50257, n_embd=1024, n_layer=24, n_head=16, n_positions=1024),
    # meta-llama/Llama-3.2-1B (tied embeddings)
    "llama-3.2-1b": dict(model_type="llama", vocab_size=128256, hidden_size=2048, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, intermediate_size=8192,
                         max_position_embeddings=131072, tie_word_embeddings=True, rope_theta=500000.0,
                         bos_token_id=128000, eos_token_id=128001),
    # TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T
    "tinyllama-1.1b": dict(model_type="llama", vocab_size=32000, hidden_size=2048, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, intermediate_size=5632,
                           max_position_embeddings=2048, tie_word_embeddings=False),
    # Qwen/Qwen2.5-0.5B (tied), Qwen/Qwen2.5-7B
    "qwen2.5-0.5b": dict(model_type="qwen2", vocab_size=151936, hidden_size=896, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                         max_position_embeddings=32768, tie_word_embeddings=True, rope_theta=1000000.0,
                         bos_token_id=151643, eos_token_id=151643),
    "qwen2.5-7b": dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944,
                       max_position_embeddings=131072, tie_word_embeddings=False, rope_theta=1000000.0,
                       bos_token_id=151643, eos_token_id=151643),
    # mistralai/Mistral-7B-v0.1 (sliding window 4096: no effect at s <= 4096)
    "mistral-7b": dict(model_type="mistral", vocab_size=32000, hidden_size=4096, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                       max_position_embeddings=32768, sliding_window=4096, tie_word_embeddings=False),
    # meta-llama/Llama-3.1-8B
    "llama-3.1-8b": dict(model_type="llama", vocab_size=128256, hidden_size=4096, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                         max_position_embeddings=131072, tie_word_embeddings=False, rope_theta=500000.0,
                         bos_token_id=128000, eos_token_id=128001),
    # added 2026-12-03 (issue 21: Phi-3, OLMo-2, Gemma-3, Qwen3-MoE, DeepSeek-V2/V3 join the set); the split rule
    # above applies unchanged to their runs, appended after the first 22
    # microsoft/Phi-3-mini-4k-instruct (fused qkv_proj and gate_up_proj)
    "phi-3-mini-4k": dict(model_type="phi3", vocab_size=32064, hidden_size=3072, num_hidden_layers=32,
                          num_attention_heads=32, num_key_value_heads=32, intermediate_size=8192,
                          max_position_embeddings=4096, tie_word_embeddings=False, sliding_window=None,
                          bos_token_id=1, eos_token_id=32000, pad_token_id=32000),
    # allenai/OLMo-2-0425-1B (post-norms, whole-projection q/k norms)
    "olmo-2-1b": dict(model_type="olmo2", vocab_size=100352, hidden_size=2048, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=16, intermediate_size=8192,
                      max_position_embeddings=4096, tie_word_embeddings=False, rope_theta=500000.0,
                      bos_token_id=100257, eos_token_id=100257, pad_token_id=100277),
    # google/gemma-3-1b-pt (text only; sliding window 512 on 5 of every 6 layers, per-head q/k norms)
    "gemma-3-1b": dict(model_type="gemma3_text", vocab_size=262144, hidden_size=1152, num_hidden_layers=26,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=256, intermediate_size=6912,
                       max_position_embeddings=32768, sliding_window=512, query_pre_attn_scalar=256,
                       rope_theta=1000000.0, bos_token_id=2, eos_token_id=1, pad_token_id=0),
    # tiny MoE models, traced on real CPU tensors (frenzy_core.hf_tracer: _grouped_mm has no fake kernel for CPU)
    "tiny-qwen3-moe": dict(model_type="qwen3_moe", vocab_size=1024, hidden_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=352,
                           moe_intermediate_size=96, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                           decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=512,
                           bos_token_id=0, eos_token_id=0),
    "tiny-mixtral": dict(model_type="mixtral", vocab_size=1024, hidden_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=352, num_local_experts=4,
                         num_experts_per_tok=2, max_position_embeddings=512, sliding_window=None,
                         bos_token_id=0, eos_token_id=0),
    "tiny-deepseek-v3": dict(model_type="deepseek_v3", vocab_size=1024, hidden_size=128, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=4, intermediate_size=352,
                             moe_intermediate_size=96, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                             first_k_dense_replace=1, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16,
                             qk_nope_head_dim=32, v_head_dim=32, n_group=2, topk_group=1,
                             max_position_embeddings=512, bos_token_id=0, eos_token_id=0),
    "tiny-deepseek-v2": dict(model_type="deepseek_v2", vocab_size=1024, hidden_size=128, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=4, intermediate_size=352,
                             moe_intermediate_size=96, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                             first_k_dense_replace=1, kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16,
                             qk_nope_head_dim=32, v_head_dim=32, topk_method="greedy", n_group=1, topk_group=1,
                             max_position_embeddings=512, bos_token_id=0, eos_token_id=0),
    # Qwen/Qwen3-30B-A3B's layer widths (hidden 2048, 32 heads / 4 kv of 128, experts 768 wide, top-8), narrowed
    # to fit real CPU tensors: 2 layers, 16 experts, an 8,192-token vocabulary
    "qwen3-30b-a3b-narrow": dict(model_type="qwen3_moe", vocab_size=8192, hidden_size=2048, num_hidden_layers=2,
                                 num_attention_heads=32, num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                                 moe_intermediate_size=768, num_experts=16, num_experts_per_tok=8,
                                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                                 max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=0,
                                 eos_token_id=0),
}

# (config, precision, attention, seq_len, micro_batch, global_batch, optimizer, dropout)
RUNS = [
    ("tiny-gpt2", "amp", "eager", 128, 4, 8, "adamw", 0.1),
    ("tiny-gpt2", "bf16-master", "flash", 256, 2, 2, "adamw-fused", 0.1),
    ("tiny-llama", "amp", "flash", 256, 4, 4, "adamw-fused", 0.0),
    ("tiny-qwen2", "amp", "eager", 128, 2, 4, "adamw", 0.1),
    ("tiny-mistral", "bf16-master", "eager", 128, 4, 4, "adamw", 0.0),
    ("gpt2", "amp", "eager", 1024, 4, 4, "adamw-fused", 0.1),
    ("gpt2", "amp", "flash", 1024, 8, 16, "adamw-fused", 0.1),
    ("gpt2", "amp", "flash", 512, 2, 2, "adamw", 0.0),
    ("gpt2", "bf16-master", "eager", 1024, 2, 4, "adamw-fused", 0.1),
    ("gpt2-medium", "amp", "flash", 1024, 4, 4, "adamw-fused", 0.1),
    ("gpt2-medium", "amp", "eager", 1024, 2, 4, "adamw", 0.0),
    ("llama-3.2-1b", "amp", "flash", 2048, 2, 2, "adamw-fused", 0.0),
    ("llama-3.2-1b", "amp", "eager", 1024, 1, 2, "adamw", 0.0),
    ("llama-3.2-1b", "bf16-master", "flash", 2048, 4, 4, "adamw-fused", 0.0),
    ("tinyllama-1.1b", "amp", "flash", 2048, 4, 8, "adamw-fused", 0.0),
    ("qwen2.5-0.5b", "amp", "eager", 1024, 4, 4, "adamw-fused", 0.0),
    ("qwen2.5-0.5b", "amp", "flash", 2048, 8, 8, "adamw", 0.1),
    ("qwen2.5-7b", "amp", "flash", 2048, 1, 1, "adamw-fused", 0.0),
    ("qwen2.5-7b", "bf16-master", "flash", 4096, 1, 2, "adamw-fused", 0.0),
    ("mistral-7b", "amp", "flash", 2048, 1, 1, "adamw-fused", 0.0),
    ("mistral-7b", "bf16-master", "eager", 1024, 1, 1, "adamw", 0.0),
    ("llama-3.1-8b", "amp", "flash", 2048, 1, 1, "adamw-fused", 0.0),
    # added 2026-12-03 (MoE: bf16-master only, real tensors; DeepSeek's MLA: eager only; frenzy_core.hf_tracer)
    ("phi-3-mini-4k", "amp", "flash", 2048, 1, 1, "adamw-fused", 0.0),
    ("olmo-2-1b", "bf16-master", "flash", 2048, 2, 2, "adamw-fused", 0.0),
    ("olmo-2-1b", "amp", "eager", 1024, 1, 2, "adamw", 0.0),
    ("gemma-3-1b", "amp", "eager", 1024, 2, 2, "adamw-fused", 0.0),
    ("gemma-3-1b", "bf16-master", "flash", 2048, 1, 1, "adamw", 0.0),
    ("tiny-qwen3-moe", "bf16-master", "flash", 256, 2, 4, "adamw", 0.0),
    ("tiny-mixtral", "bf16-master", "eager", 128, 2, 2, "adamw-fused", 0.0),
    ("tiny-deepseek-v3", "bf16-master", "eager", 128, 2, 2, "adamw", 0.0),
    ("tiny-deepseek-v2", "bf16-master", "eager", 256, 2, 4, "adamw-fused", 0.0),
    ("qwen3-30b-a3b-narrow", "bf16-master", "flash", 128, 1, 1, "adamw-fused", 0.0),  # ~3.5 min each on 2 cores
    ("qwen3-30b-a3b-narrow", "bf16-master", "eager", 128, 1, 1, "adamw", 0.0),
]

NEUTRALISED = [
    "dropout: CUDA fused native_dropout (1-byte mask)",
    "autocast: CUDA fp32 / fp32_set_opt_dtype / promote policies on AutocastCPU; CPU-only policies fall through",
    "sdpa: dropout_p=0 (CUDA flash keeps a Philox seed, no mask)",
    "hf mask: find_packed_sequence_indices -> None (the real-tensor answer for unpacked rows)",
]


def split_of(index: int) -> str:
    """The split of the run at `index` in RUNS (module docstring)."""
    return "heldout" if index % 3 == 2 else "calibration"


def run_id(name, precision, attention, s, b, gb, optimizer, dropout) -> str:
    return f"hf:{name}:{precision}:{attention}:s{s}:b{b}x{gb // b}:{optimizer}:d{dropout:g}"


def hf_parameter_count(config: dict) -> int:
    """sum(p.numel()) of the transformers model built on fake tensors: the count the row's ModelSpec must match."""
    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode

    from frenzy_core.hf_tracer import build_hf_model

    with FakeTensorMode():
        model = build_hf_model(torch, transformers, config, TrainingSpec(seq_len=8, global_batch=1, precision="amp"))
        return sum(p.numel() for p in model.parameters())


# What each neutralisation changes, measured side by side on small models under fake tensors (docs/memory.md):
# GPT-2-style (gelu_new, softmax without dtype) and Llama-style (GQA, SDPA) with dropout and 2 micro-batches.
ABLATION_RUNS = [
    ("tiny-gpt2", TrainingSpec(seq_len=128, global_batch=8, micro_batch=4, precision="amp", attention="eager",
                               dropout=0.1)),
    ("tiny-gpt2", TrainingSpec(seq_len=128, global_batch=8, micro_batch=4, precision="amp", attention="flash",
                               dropout=0.1)),
    ("tiny-llama", TrainingSpec(seq_len=256, global_batch=8, micro_batch=4, precision="amp", attention="flash",
                                dropout=0.1)),
]


def ablation() -> dict:
    """Peak with every neutralisation, and its relative change when one is left out, per ablation run."""
    from frenzy_core.hf_tracer import NEUTRALISATIONS

    out = {}
    for name, training in ABLATION_RUNS:
        config = {"_name_or_path": name, **CONFIGS[name]}
        full = trace_hf_peak(config, training).peak_bytes
        key = f"{name}:{training.attention}"
        out[key] = {"peak_bytes": full}
        for left_out in sorted(NEUTRALISATIONS):
            peak = trace_hf_peak(config, training, neutralise=NEUTRALISATIONS - {left_out}).peak_bytes
            out[key][f"without_{left_out}_pct"] = round(100 * (peak - full) / full, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the JSONL (default: tests/data)")
    parser.add_argument("--only", default="", help="keep runs whose id contains this text")
    args = parser.parse_args(argv)

    import torch
    import transformers

    rows, started = [], time.perf_counter()
    for index, (name, precision, attention, s, b, gb, optimizer, dropout) in enumerate(RUNS):
        rid = run_id(name, precision, attention, s, b, gb, optimizer, dropout)
        if args.only not in rid:
            continue
        config = {"_name_or_path": name, **CONFIGS[name]}
        training = TrainingSpec(seq_len=s, global_batch=gb, micro_batch=b, precision=precision, optimizer=optimizer,
                                attention=attention, dropout=dropout)
        spec = model_spec_of(config)
        t0 = time.perf_counter()
        result = trace_hf_peak(config, training, fake=not spec.is_moe)  # MoE: real CPU tensors
        seconds = time.perf_counter() - t0
        rows.append({
            "id": rid, "framework": "hf", "split": split_of(index), "model_type": config["model_type"],
            "architecture": HF_ARCHITECTURES[config["model_type"]], "hf_config": config,
            "model_spec": spec.model_dump(), "q_dim": spec.q_dim, "parameter_count": hf_parameter_count(config),
            "training": {**training.model_dump(), "framework": "hf"},
            "attn_implementation": {"eager": "eager", "flash": "sdpa"}[attention],
            "peak_bytes": result.peak_bytes, "peak_phase": result.peak_phase, "steps": result.steps,
            "measured_kind": "max_memory_allocated",
            "method": ("real-tensor" if spec.is_moe else "fake-tensor")
                      + " trace (frenzy_core.hf_tracer.trace_hf_peak): live storages rounded to 512 B; "
                      "no CUDA context, cuBLAS/flash workspaces, NCCL or fragmentation",
            "neutralised": NEUTRALISED,
            "torch_version": result.torch_version, "transformers_version": transformers.__version__,
            "trace_seconds": round(seconds, 2),
        })
        print(f"{rid}: {result.peak_bytes / 2**30:.3f} GiB at {result.peak_phase} ({seconds:.1f} s)", file=sys.stderr)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    effects = ablation()
    for key, values in effects.items():
        print(f"ablation {key}: {values}", file=sys.stderr)
    total = time.perf_counter() - started
    splits = [r["split"] for r in rows]
    print(json.dumps({
        "rows": len(rows), "calibration_rows": splits.count("calibration"), "heldout_rows": splits.count("heldout"),
        "architectures": sorted({r["architecture"] for r in rows}), "total_seconds": round(total, 1),
        "max_peak_gib": round(max((r["peak_bytes"] for r in rows), default=0) / 2**30, 3),
        "ablation_pct": {k: {n: v for n, v in d.items() if n != "peak_bytes"} for k, d in effects.items()},
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
