"""The optimizer step's HBM traffic (perf.optimizer_sweep_bytes): by hand, against torch's own ops, against a GPU.

The foreach count is checked twice without trusting perf.py's table: by hand below, and by running torch.optim.AdamW
itself (foreach and fused, CPU tensors) under a dispatch mode that adds up the bytes of every tensor each aten op
reads and writes. The measured H200 step (bench/data/gpu_h200_2026-12-04, bench/measure_gpu.py --mode profile)
checks the ratio of the two kernels' times.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frenzy_core.frameworks import get as get_framework
from frenzy_core.perf import optimizer_sweep_bytes
from frenzy_core.precision import PRECISIONS
from frenzy_core.training import TrainingSpec

GPU_SESSION = Path(__file__).resolve().parents[1] / "bench" / "data" / "gpu_h200_2026-12-04"


@pytest.mark.parametrize(("precision", "optimizer", "framework", "want"), [
    # amp: fp32 params (the updated tensor) and grads, two fp32 moments, an fp32 sqrt temporary:
    # (4 params + 3 grads + 3 exp_avg + 5 exp_avg_sq + 6 temporary) accesses x 4 B
    ("amp", "adamw", "pytorch", (4 + 3 + 3 + 5 + 6) * 4),
    # fused: read param, grad, both moments; write param, both moments
    ("amp", "adamw-fused", "pytorch", (4 + 4 + 8) + (4 + 8)),
    # bf16-master: the foreach ops run on the fp32 masters, then each bf16 weight is written from its master
    ("bf16-master", "adamw", "hf", (4 + 3 + 3 + 5 + 6) * 4 + (4 + 2)),
    # pure bf16: params, grads, moments and the temporary all bf16
    ("bf16", "adamw", "pytorch", (4 + 3 + 3 + 5 + 6) * 2),
    # SGD with momentum, foreach: mul_(buf) r b w b; add_(buf, g) r b g w b; add_(p, buf) r p b w p
    ("amp", "sgd", "pytorch", 2 * 4 + 1 * 4 + 5 * 4),
    # Megatron's FusedAdam whatever the name: read weight 2, grad 4, master 4, moments 8; write 2 + 4 + 8
    ("bf16-master", "adamw", "megatron", (2 + 4 + 4 + 8) + (2 + 4 + 8)),
])
def test_sweep_bytes_by_hand(precision, optimizer, framework, want):
    training = TrainingSpec(framework=framework, precision=precision, optimizer=optimizer)
    assert optimizer_sweep_bytes(training.precision_setup, training) == pytest.approx(want)


def test_each_stack_names_its_kernel():
    """torch.optim users (plain PyTorch, HF, LitGPT, torchtune, FSDP2 scripts: torchtitan's rows name its default
    "fused" as adamw-fused) get foreach unless they ask for fused; Megatron (TE / apex FusedAdam) and DeepSpeed
    (FusedAdam) step fused whatever the optimizer is called."""
    for name in ("pytorch", "hf", "litgpt", "torchtune", "fsdp2"):
        fw = get_framework(name)
        assert fw.optimizer_kernel(TrainingSpec(framework=name, precision="bf16", optimizer="adamw")) == "foreach"
        assert fw.optimizer_kernel(TrainingSpec(framework=name, precision="bf16", optimizer="adamw-fused")) == "fused"
    for name in ("megatron", "deepspeed"):
        precision = "bf16-master"
        assert get_framework(name).optimizer_kernel(TrainingSpec(framework=name, precision=precision)) == "fused"


def _bytes_moved_by_torch_adamw(torch, impl: str, n: int = 4096) -> float:
    """Bytes per parameter read + written by the aten ops of one torch.optim.AdamW step (after the first, which
    creates the states), counted by a TorchDispatchMode; the one-element step counters are left out."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    params = [torch.zeros(n, requires_grad=True) for _ in range(3)]
    for p in params:
        p.grad = torch.ones(n)
    opt = torch.optim.AdamW(params, weight_decay=0.01, **{impl: True})
    opt.step()  # states exist from here on

    def nbytes(t) -> int:
        return t.numel() * t.element_size() if isinstance(t, torch.Tensor) and t.numel() > 1 else 0

    class Count(TorchDispatchMode):
        moved = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            reads = sum(nbytes(t) for t in tree_flatten((args, kwargs))[0])
            schema = func._schema
            # `_fused_adamw_` declares its grads written (Tensor(b!)[] grads): it unscales them in place when given a
            # grad_scale, which AdamW without a GradScaler is not; they are only read here
            mutated = [a for a, arg in zip(args, schema.arguments, strict=False)
                       if arg.alias_info is not None and arg.alias_info.is_write
                       and not (func.__name__.startswith("_fused_adam") and arg.name == "grads")]
            writes = sum(nbytes(t) for t in tree_flatten(mutated)[0])
            if not schema.is_mutable:  # a fresh output: written once
                writes += sum(nbytes(t) for t in tree_flatten(out)[0])
            Count.moved += reads + writes
            return out

    with Count():
        opt.step()
    return Count.moved / (3 * n)


def test_the_foreach_count_is_what_torch_adamw_moves():
    torch = pytest.importorskip("torch")
    amp = PRECISIONS["amp"]
    assert _bytes_moved_by_torch_adamw(torch, "foreach") == pytest.approx(
        optimizer_sweep_bytes(amp, TrainingSpec(optimizer="adamw")))


def test_the_fused_count_is_what_torch_fused_adamw_moves():
    torch = pytest.importorskip("torch")
    try:
        moved = _bytes_moved_by_torch_adamw(torch, "fused")
    except (RuntimeError, NotImplementedError) as err:  # a build without the CPU fused kernel
        pytest.skip(f"fused AdamW unavailable on this CPU build: {err}")
    assert moved == pytest.approx(optimizer_sweep_bytes(PRECISIONS["amp"], TrainingSpec(optimizer="adamw-fused")))


def test_the_measured_h200_step_keeps_the_two_kernels_apart():
    """On a real H200 (2^30 fp32 parameters) foreach AdamW took 24.2 ms and fused 9.1 ms: 2.65x, against the 3.0x the
    byte counts give (the fused kernel reaches less of the copy bandwidth than the foreach ops do). Both run below
    the datasheet bandwidth perf.py charges at, so the prediction is fast by about what the copy bandwidth is short
    of the datasheet (4,197 of 4,800 GB/s) -- docs/perf.md "The optimizer step"."""
    data = json.loads((GPU_SESSION / "profile_gpu.json").read_text())
    measured = {r["optimizer"]: r["step_s"] for r in data["optimizer"]}
    counted = (optimizer_sweep_bytes(PRECISIONS["amp"], TrainingSpec(optimizer="adamw"))
               / optimizer_sweep_bytes(PRECISIONS["amp"], TrainingSpec(optimizer="adamw-fused")))
    assert counted == 3.0
    assert measured["adamw-foreach"] / measured["adamw-fused"] == pytest.approx(counted, rel=0.15)
    params = data["optimizer"][0]["params"]
    for name, training in (("adamw-foreach", TrainingSpec(optimizer="adamw")),
                           ("adamw-fused", TrainingSpec(optimizer="adamw-fused"))):
        predicted = params * optimizer_sweep_bytes(PRECISIONS["amp"], training) / 4800e9
        assert -0.35 < predicted / measured[name] - 1 < -0.05, name  # fast, by the bandwidth shortfall and no more
