"""Measure the peak memory of a real training step without a GPU: fake tensors plus a storage tracker.

`trace_peak` builds a plain-PyTorch decoder from a ModelSpec (GPT-2 style: learned positions, pre-LayerNorm, GELU
MLP, tied head; or Llama style: RoPE, RMSNorm, SwiGLU, GQA, untied head), runs two full training steps (forward,
backward, AdamW step, `zero_grad(set_to_none=True)`) under `FakeTensorMode` on device "cpu", and counts the bytes of
every live tensor storage, rounded up to the CUDA caching allocator's 512-byte blocks. The largest total seen, and the
phase it happened in, is the answer: the `torch.cuda.max_memory_allocated()` a GPU would report, minus what a trace
cannot see (CUDA context, cuBLAS/flash workspaces, NCCL buffers, fragmentation: see frenzy_core.memory.OverheadSpec).

torch is optional: this module imports without it, and `trace_peak` imports it on first use. Where the CPU build
behaves differently from CUDA, the model code below follows CUDA; docs/memory.md lists each difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from frenzy_core.errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    from frenzy_core.models import ModelSpec
    from frenzy_core.training import TrainingSpec

# The CUDA caching allocator rounds every block up to a multiple of 512 bytes (c10/cuda/CUDACachingAllocator.cpp,
# kMinBlockSize); max_memory_allocated() counts the rounded sizes, so the tracker does too.
ALLOCATOR_BLOCK_BYTES = 512
TRAINING_STEPS = 2  # step 1 creates Adam's states inside optimizer.step(); step 2 carries them through fwd/bwd
NORM_EPS = 1e-5
ROPE_THETA = 10000.0


@dataclass(frozen=True)
class TraceResult:
    """What one traced run measured, e.g. TraceResult(peak_bytes=2_936_012_800, peak_phase="step2:backward", ...)."""

    peak_bytes: int  # the largest sum of live storage bytes (512-byte rounded) over the whole run
    peak_phase: str  # "step<i>:<phase>", phase in forward / backward / optimizer-step / zero-grad / setup
    torch_version: str  # the PyTorch that produced it: saved beside cached fixtures
    steps: int  # training steps run


def round_to_block(nbytes: int) -> int:
    """Bytes the CUDA caching allocator reserves for a request of `nbytes` (multiples of 512).

    >>> round_to_block(1), round_to_block(512), round_to_block(513)
    (512, 512, 1024)
    """
    return -(-nbytes // ALLOCATOR_BLOCK_BYTES) * ALLOCATOR_BLOCK_BYTES


def trace_peak(model: ModelSpec, training: TrainingSpec, micro_batch: int | None = None, fake: bool = True) -> TraceResult:
    """Run TRAINING_STEPS real training steps of `model` on one GPU's worth of work and return the peak.

    Each step runs `training.global_batch // micro_batch` micro-batches (gradient accumulation), then the optimizer.
    `fake=False` runs the same code on real CPU tensors (only sensible for tiny models; used to check the fake path).
    """
    torch = _import_torch()
    b = micro_batch if micro_batch is not None else training.micro_batch
    if b <= 0:
        raise SpecError("micro_batch", f"must be a positive integer, got {b}")
    if training.global_batch % b:
        raise SpecError("global_batch", f"{training.global_batch} is not divisible by micro_batch {b}")
    if model.position_kind == "learned" and training.seq_len > model.max_positions:
        raise SpecError("seq_len", f"{training.seq_len} exceeds the model's max_positions ({model.max_positions})")
    if model.is_moe:
        raise SpecError("model", "the tracer builds dense models only; MoE is predicted analytically")
    if training.zero_stage or training.distributed_optimizer or training.recompute != "none":
        raise SpecError("training", "the tracer runs one unsharded GPU without recomputation (zero_stage=0)")
    if training.sequence_parallel:
        raise SpecError("sequence_parallel", "the tracer runs one GPU (t=1): sequence parallelism does not apply")
    if training.precision not in ("amp", "bf16-master"):
        raise SpecError("precision", f"the tracer supports amp and bf16-master, got {training.precision!r}")
    if training.optimizer not in ("adamw", "adamw-fused"):
        raise SpecError("optimizer", f"the tracer supports adamw and adamw-fused, got {training.optimizer!r}")
    accumulation = training.global_batch // b

    from torch._subclasses.fake_tensor import FakeTensorMode

    tracker = _make_tracker(torch)()
    fake_mode = FakeTensorMode() if fake else None
    if fake_mode is not None:
        fake_mode.__enter__()
    try:
        with tracker:
            _run_steps(torch, tracker, model, training, b, accumulation)
    finally:
        if fake_mode is not None:
            fake_mode.__exit__(None, None, None)
    return TraceResult(tracker.peak, tracker.peak_phase, torch.__version__, TRAINING_STEPS)


def _import_torch():
    try:
        import torch
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("frenzy_core.tracer needs the optional torch extra: pip install 'frenzy-planner[tracer]'") from err
    return torch


# --- the storage tracker -------------------------------------------------------------------------------------------
def _make_tracker(torch):
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.weak import WeakIdKeyDictionary

    class StorageTracker(TorchDispatchMode):
        """Counts each distinct untyped storage once, from the op that creates it until Python/C++ frees it."""

        def __init__(self):
            super().__init__()
            self.live = 0
            self.peak = 0
            self.phase = "setup"
            self.peak_phase = "setup"
            self._seen = WeakIdKeyDictionary()

        def _free(self, nbytes: int) -> None:
            self.live -= nbytes

        def track(self, tensors) -> None:
            for t in tensors:
                if not isinstance(t, torch.Tensor):
                    continue
                st = t.untyped_storage()
                if st in self._seen:
                    continue
                nbytes = round_to_block(st.nbytes())
                self._seen[st] = nbytes
                weakref.finalize(st, self._free, nbytes)
                self.live += nbytes
                if self.live > self.peak:
                    self.peak, self.peak_phase = self.live, self.phase

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.track(tree_flatten(out)[0])
            return out

    return StorageTracker


# --- one training run ----------------------------------------------------------------------------------------------
def _run_steps(
    torch, tracker, spec: ModelSpec, training: TrainingSpec, b: int, accumulation: int, device: str = "cpu"
) -> None:
    """TRAINING_STEPS steps of `accumulation` micro-batches each; `tracker.phase` names what runs (bench/measure_gpu.py
    calls this with device="cuda" and real tensors)."""
    s = training.seq_len
    amp = training.precision == "amp"
    param_dtype = torch.float32 if amp else torch.bfloat16
    with torch.device(device):
        net = _build_model(torch, spec, training, param_dtype)
    optimizer = _make_optimizer(torch, net, training, amp)
    for step in range(1, TRAINING_STEPS + 1):
        for _ in range(accumulation):
            tracker.phase = f"step{step}:forward"
            tokens = torch.randint(0, spec.vocab_size, (b, s + 1), device=device)
            inputs, targets = tokens[:, :-1], tokens[:, 1:]
            if amp:
                with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
                    loss = net(inputs, targets)
            else:
                loss = net(inputs, targets)
            tracker.phase = f"step{step}:backward"
            (loss / accumulation).backward()
            del loss, tokens, inputs, targets
        tracker.phase = f"step{step}:optimizer-step"
        optimizer.step()
        tracker.phase = f"step{step}:zero-grad"
        optimizer.zero_grad()


def _make_optimizer(torch, net, training: TrainingSpec, amp: bool):
    """AdamW over the trained parameters (LoRA: the adapters): on the params themselves under amp and with plain
    bf16 params (moments in the params' dtype), on fp32 masters under bf16-master."""
    foreach = training.optimizer == "adamw"
    kwargs = {"foreach": True} if foreach else {"fused": True}
    params = [p for p in net.parameters() if p.requires_grad]
    if amp or training.precision == "bf16":
        return _AmpOptimizer(torch.optim.AdamW(params, **kwargs))
    return _MasterWeightOptimizer(torch, params, kwargs)


class _AmpOptimizer:
    """PyTorch AMP: fp32 params, AdamW on them directly, grads freed by zero_grad(set_to_none=True)."""

    def __init__(self, inner):
        self.inner = inner

    def step(self) -> None:
        self.inner.step()

    def zero_grad(self) -> None:
        self.inner.zero_grad(set_to_none=True)


class _MasterWeightOptimizer:
    """Megatron's mixed-precision optimizer, minimal (megatron/core/optimizer/optimizer.py, Float16OptimizerWithFloat16Params).

    bf16 model params; a persistent fp32 `main_grad` per param (Megatron's contiguous grad buffer) that each bf16 grad
    is added into as soon as it is accumulated, then dropped; fp32 master copies made at construction; AdamW on the
    masters with main_grad as their grad; the result copied back into the bf16 params. No loss scaling (bf16 needs
    none) and no grad clipping (its norm is a scalar: no memory).
    """

    def __init__(self, torch, params, kwargs):
        self.torch = torch
        self.params = params
        self.main_grads = [torch.zeros_like(p, dtype=torch.float32) for p in params]
        self.masters = [p.detach().float().requires_grad_(True) for p in params]
        for p, g in zip(params, self.main_grads, strict=True):
            p.register_post_accumulate_grad_hook(_accumulate_into(g))
        self.inner = torch.optim.AdamW(self.masters, **kwargs)

    def step(self) -> None:
        for master, g in zip(self.masters, self.main_grads, strict=True):
            master.grad = g  # Megatron: main_param.grad = model_param.main_grad.float() (already fp32: no copy)
        self.inner.step()
        with self.torch.no_grad():
            for p, master in zip(self.params, self.masters, strict=True):
                p.copy_(master)

    def zero_grad(self) -> None:
        for master, g in zip(self.masters, self.main_grads, strict=True):
            master.grad = None
            g.zero_()  # the grad buffer persists; Megatron zeroes it


def _accumulate_into(main_grad):
    def hook(param) -> None:
        main_grad.add_(param.grad)
        param.grad = None  # the bf16 grad lives only until it is folded into main_grad

    return hook


def _build_model(torch, spec: ModelSpec, training: TrainingSpec, dtype):
    nn = torch.nn
    F = torch.nn.functional
    h, a, kv_heads, hd = spec.hidden_size, spec.num_heads, spec.kv_heads, spec.head_dim
    dropout = training.dropout
    eager = training.attention == "eager"

    class FusedRMSNorm(torch.autograd.Function):
        """RMSNorm as fused CUDA kernels (Apex / Transformer Engine) run it: saves the input and fp32 rstd only.

        F.rms_norm on the CPU build decomposes into pow/mean/rsqrt/mul and saves every intermediate.
        """

        @staticmethod
        def forward(ctx, x, weight):
            xf = x.float()
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)
            ctx.save_for_backward(x, weight, rstd)
            return (xf * rstd).to(x.dtype) * weight.to(x.dtype)

        @staticmethod
        def backward(ctx, grad):
            x, weight, rstd = ctx.saved_tensors
            xhat = x.float() * rstd
            g = grad.float()
            grad_weight = (g * xhat).sum(dim=tuple(range(g.dim() - 1))).to(weight.dtype)
            gw = g * weight.float()
            grad_x = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
            return grad_x.to(x.dtype), grad_weight

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h, dtype=dtype))
            self.bias = nn.Parameter(torch.zeros(h, dtype=dtype)) if spec.norm_kind == "layernorm" else None

        def forward(self, x):
            if self.bias is not None:
                return F.layer_norm(x, (h,), self.weight, self.bias, NORM_EPS)
            return FusedRMSNorm.apply(x, self.weight)

    def rope_tables(s: int, device):
        inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd)
        angles = torch.outer(torch.arange(s, dtype=torch.float32, device=device), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)  # q, k are bf16 in both recipes

    def drop(x):
        # CUDA's dropout runs the fused native_dropout and keeps a 1-byte bool mask; on CPU, F.dropout builds a noise
        # tensor in the input's dtype (2 or 4 bytes per element) instead. Call native_dropout to follow CUDA.
        return torch.native_dropout(x, dropout, True)[0]

    def apply_rope(x, cos, sin):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = Norm()
            # One fused QKV projection (Megatron's linear_qkv): separate q/k/v linears would make autocast cast the
            # fp32 norm output to bf16 three times and keep all three copies for backward.
            self.qkv = nn.Linear(h, spec.q_dim + 2 * spec.kv_dim, bias=spec.has_qkv_bias, dtype=dtype)
            self.proj = nn.Linear(spec.q_dim, h, bias=spec.bias, dtype=dtype)
            self.norm2 = Norm()
            inner = spec.ffn
            if spec.mlp_kind == "swiglu":
                self.fc1 = nn.Linear(h, 2 * inner, bias=spec.bias, dtype=dtype)  # fused gate + up (Megatron)
            else:
                self.fc1 = nn.Linear(h, inner, bias=spec.bias, dtype=dtype)
            self.fc2 = nn.Linear(inner, h, bias=spec.bias, dtype=dtype)

        def attention(self, x, rope, mask):
            bsz, s, _ = x.shape
            q, k, v = self.qkv(x).split([spec.q_dim, spec.kv_dim, spec.kv_dim], dim=-1)
            q = q.view(bsz, s, a, hd).transpose(1, 2)
            k = k.view(bsz, s, kv_heads, hd).transpose(1, 2)
            v = v.view(bsz, s, kv_heads, hd).transpose(1, 2)
            if rope is not None:
                q, k = apply_rope(q, *rope), apply_rope(k, *rope)
            if eager:
                if kv_heads != a:  # HF repeat_kv: eager attention works on full-width K and V copies
                    k = k.repeat_interleave(a // kv_heads, dim=1)
                    v = v.repeat_interleave(a // kv_heads, dim=1)
                scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                scores = scores.masked_fill(mask, float("-inf"))
                # CUDA autocast runs softmax in fp32; CPU autocast would keep bf16. Follow CUDA explicitly.
                probs = torch.softmax(scores.float(), dim=-1).to(v.dtype)
                if dropout:
                    probs = drop(probs)
                out = torch.matmul(probs, v)
            else:
                # dropout_p=0: CUDA flash regenerates its dropout mask from a Philox seed, so dropout costs it no
                # memory; CPU SDPA with dropout_p > 0 falls back to the math path and stores the s x s scores.
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != a)
            out = out.transpose(1, 2).reshape(bsz, s, spec.q_dim)
            return self.proj(out)

        def mlp(self, x):
            y = self.fc1(x)
            if spec.mlp_kind == "swiglu":
                gate, up = y.chunk(2, dim=-1)
                y = F.silu(gate) * up
            else:
                y = F.gelu(y, approximate="tanh")
            return self.fc2(y)

        def forward(self, x, rope, mask):
            y = self.attention(self.norm1(x), rope, mask)
            x = x + (drop(y) if dropout else y)
            y = self.mlp(self.norm2(x))
            return x + (drop(y) if dropout else y)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(spec.vocab_size, h, dtype=dtype)
            self.wpe = nn.Embedding(spec.max_positions, h, dtype=dtype) if spec.position_kind == "learned" else None
            self.blocks = nn.ModuleList(Block() for _ in range(spec.num_layers))
            self.norm_f = Norm()
            self.head = None if spec.tie_embeddings else nn.Linear(h, spec.vocab_size, bias=False, dtype=dtype)

        def forward(self, tokens, targets):
            s = tokens.shape[1]
            x = self.wte(tokens)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(s, device=tokens.device))
            if dropout:
                x = drop(x)
            rope = rope_tables(s, tokens.device) if spec.position_kind == "rotary" else None
            mask = torch.ones(s, s, dtype=torch.bool, device=tokens.device).triu(1) if eager else None  # one causal mask, shared by layers
            for block in self.blocks:
                x = block(x, rope, mask)
            x = self.norm_f(x)
            logits = F.linear(x, self.wte.weight if self.head is None else self.head.weight)
            # cross_entropy in fp32, as CUDA autocast (and Megatron's vocab-parallel loss) computes it
            return F.cross_entropy(logits.float().view(-1, spec.vocab_size), targets.reshape(-1))

    return Decoder()
