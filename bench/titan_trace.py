"""The fsdp2 recipe's activation and loss terms against a fake-tensor trace of a torchtitan-style Llama.

    python bench/titan_trace.py        # Llama-3.1-8B at torchtitan Table 1's shapes (b 2, s 8,192), op-SAC and no AC

The traced model is written from torchtitan 9dec370 (models/llama/model.py, models/norms.py RMSNorm,
parallelisms/parallelize_llama.py op-SAC policy, train.py loss): bf16 parameters as FSDP2's all-gather computes on
them (one process, no FSDP), separate wq/wk/wv, complex RoPE, repeat_kv copies, SDPA is_causal, eager RMSNorm,
`cross_entropy(pred.flatten(0, 1).float())` then `del pred`. The CPU flash kernel stands in for CUDA's in the SAC
save list (it saves the same tensors). Live storages are counted in 512-byte blocks (frenzy_core.tracer's tracker),
so `peak - setup` is what the step adds to the parameters: the recipe's activations + loss buffers (less RoPE's
cos/sin tables, which the trace holds in the freqs_cis buffer) plus nll_loss's two 512-byte scalars. Needs torch;
fake tensors, a few seconds per run. The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from frenzy_core.memory import NO_OVERHEAD, predict_memory  # noqa: E402
from frenzy_core.models import ModelSpec  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

DIMS = ("V", "H", "L", "A", "KV", "FFN", "S", "B")  # vocab, hidden, layers, heads, kv heads, ffn, sequence, batch
LLAMA_8B_TABLE1 = dict(V=128256, H=4096, L=32, A=32, KV=8, FFN=14336, S=8192, B=2)
LOSS_SCALARS_BYTES = 2 * 512  # nll_loss's output and total_weight: one 512-byte block each


def model_spec(dims: dict) -> ModelSpec:
    """The ModelSpec of a traced torchtitan Llama of these dimensions."""
    return ModelSpec(name="titan-llama", vocab_size=dims["V"], hidden_size=dims["H"], num_layers=dims["L"],
                     num_heads=dims["A"], num_kv_heads=dims["KV"], ffn_size=dims["FFN"], mlp_kind="swiglu",
                     tie_embeddings=False, position_kind="rotary", max_positions=dims["S"], norm_kind="rmsnorm",
                     bias=False)


def trace_titan_llama(torch, dims: dict, op_sac: bool) -> tuple[int, int]:
    """(live bytes after building the model, peak bytes) of one forward + backward."""
    from collections import defaultdict

    import torch.nn.functional as F
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    from frenzy_core.tracer import _make_tracker

    V, H, L, A, KV, FFN, S, B = (dims[k] for k in DIMS)
    hd = H // A

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(H))

        def forward(self, x):
            y = x.float()
            return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight

    def rope(x, cis):
        z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(z * cis.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

    def widen(x):  # repeat_kv: unsqueeze, expand, reshape
        b, s = x.shape[:2]
        return x.unsqueeze(3).expand(b, s, KV, A // KV, hd).reshape(b, s, A, hd)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            lin = lambda i, o: nn.Linear(i, o, bias=False)  # noqa: E731
            self.wq, self.wk, self.wv, self.wo = lin(H, A * hd), lin(H, KV * hd), lin(H, KV * hd), lin(A * hd, H)
            self.w1, self.w2, self.w3 = lin(H, FFN), lin(FFN, H), lin(H, FFN)
            self.attention_norm, self.ffn_norm = RMSNorm(), RMSNorm()

        def forward(self, x, cis):
            b, s, _ = x.shape
            z = self.attention_norm(x)
            q, k, v = (w(z).view(b, s, -1, hd) for w in (self.wq, self.wk, self.wv))
            q, k = rope(q, cis), rope(k, cis)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), widen(k).transpose(1, 2),
                                               widen(v).transpose(1, 2), is_causal=True)
            h = x + self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))
            z = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(z)) * self.w3(z))

    save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}

    def sac_context():
        count = defaultdict(int)

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            count[mode] += func == torch.ops.aten.mm.default
            keep = func in save and not (func == torch.ops.aten.mm.default and count[mode] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings, self.layers = nn.Embedding(V, H), nn.ModuleList(Block() for _ in range(L))
            self.norm, self.output = RMSNorm(), nn.Linear(H, V, bias=False)
            freqs = 1.0 / 10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            angles = torch.outer(torch.arange(S, dtype=torch.float32), freqs)
            self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles))  # complex64

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                h = (checkpoint(layer, h, self.freqs_cis, use_reentrant=False, context_fn=sac_context,
                                preserve_rng_state=False) if op_sac else layer(h, self.freqs_cis))
            return self.output(self.norm(h))

    tracker = _make_tracker(torch)()
    with FakeTensorMode(), tracker:
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            net = Llama()
        finally:
            torch.set_default_dtype(default)
        setup = tracker.live
        tokens, labels = torch.randint(0, V, (B, S)), torch.randint(0, V, (B, S))
        pred = net(tokens)
        loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
        del pred
        loss.backward()
    return setup, tracker.peak


def compare(torch, dims: dict, recompute: str) -> dict:
    """Traced bytes the step adds to the parameters against the fsdp2 recipe's activations + loss buffers."""
    start = time.perf_counter()
    setup, peak = trace_titan_llama(torch, dims, op_sac=recompute == "op-sac")
    training = TrainingSpec(seq_len=dims["S"], global_batch=dims["B"], micro_batch=dims["B"], precision="amp",
                            framework="fsdp2", recompute=recompute)
    got = predict_memory(model_spec(dims), training, overhead=NO_OVERHEAD)
    rope_tables = 2 * dims["S"] * (dims["H"] // dims["A"]) * 2
    traced = peak - setup - LOSS_SCALARS_BYTES
    predicted = got.activations_bytes + got.logits_bytes - rope_tables
    return {"recompute": recompute, "traced_bytes": traced, "predicted_bytes": predicted,
            "err": predicted / traced - 1, "trace_s": round(time.perf_counter() - start, 1)}


def main() -> int:
    import torch

    rows = [compare(torch, LLAMA_8B_TABLE1, recompute) for recompute in ("op-sac", "none")]
    print(f"Llama-3.1-8B, b=2, s=8192, torch {torch.__version__}: traced step bytes vs fsdp2 recipe")
    for r in rows:
        print(f"  {r['recompute']:7s} traced {r['traced_bytes']:>15,d}  predicted {r['predicted_bytes']:>15,d}  "
              f"err {r['err']:+.6%}  ({r['trace_s']} s)")
    print(json.dumps({"torch": torch.__version__, **{f"{r['recompute']}_err": round(r["err"], 9) for r in rows},
                      **{f"{r['recompute']}_traced_bytes": r["traced_bytes"] for r in rows}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
