"""The public entry points: the peak memory per GPU of one training step, as a breakdown (`predict_memory`), as the
band over every framework recipe (`predict_memory_band`), and vectorised over many splits (`predict_memory_totals`).

>>> from frenzy_core.models import ZOO
>>> predict_memory(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8)).peak_phase
'backward-start'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from frenzy_core.errors import SpecError
from frenzy_core.frameworks import get as get_framework
from frenzy_core.memory.paper import _paper
from frenzy_core.memory.phases import _COMPONENTS, _PHASES, _detailed
from frenzy_core.memory.pools import DEFAULT_OVERHEAD, OverheadSpec, _gpu_reports
from frenzy_core.memory.sizes import check_sizes
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import FRAMEWORKS
from frenzy_core.training import DEEPSPEED_FIELDS, Parallelism, TrainingSpec, check_parallelism

METHODS = ("paper", "detailed")


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak bytes on the most loaded GPU, split into the parts that sum to `total_bytes`, and what a GPU reports.

    `allocated_bytes` is what `torch.cuda.max_memory_allocated()` reports on the most loaded rank (tensors plus
    cuBLAS / attention workspaces), `reserved_bytes` adds the caching allocator's fragmentation
    (`max_memory_reserved()`), `total_bytes` adds the CUDA context and NCCL buffers (what nvidia-smi shows).
    `per_stage_allocated_bytes` is the allocated peak of each pipeline stage, first to last.

    Example (gpt2, s=1024, B=b=8, amp, flash, NO_OVERHEAD): MemoryBreakdown(weights_bytes=497759232,
    gradients_bytes=0, optimizer_bytes=995518464, activations_bytes=2762145792, logits_bytes=4940464128,
    transient_bytes=247229952, overhead_bytes=0, total_bytes=9443117568, peak_phase='backward-start', ...).
    """

    weights_bytes: int  # parameters this GPU holds (the paper's whole 20W/t model-state term for method="paper")
    gradients_bytes: int  # gradients alive at the peak (none at the start of backward of the first micro-batch)
    optimizer_bytes: int  # optimizer states + fp32 master weights
    activations_bytes: int  # what autograd saved for backward, for every micro-batch in flight on this stage
    logits_bytes: int  # logits / loss buffers or the LM head's gradient at the start of backward
    transient_bytes: int  # optimizer-step: foreach temporary; backward: autocast's bf16 weight copies, ZeRO-3 gathers
    overhead_bytes: int  # CUDA context, workspaces, NCCL, fragmentation (OverheadSpec), FSDP2's idle stream pools
    total_bytes: int  # = sum of the parts: what nvidia-smi shows for this process
    peak_phase: str  # "optimizer-step", "backward-start", "backward-recompute" (detailed), "static+activations"
    method: str
    allocated_bytes: int = 0  # max_memory_allocated(): tensors + workspaces, most loaded rank
    reserved_bytes: int = 0  # max_memory_reserved(): allocated + fragmentation
    per_stage_allocated_bytes: tuple[int, ...] = ()  # allocated peak per pipeline stage, first to last
    framework: str = "pytorch"  # the recipe (frenzy_core.recipes) the detailed method used

    def components(self) -> dict[str, int]:
        """Component name -> bytes; the values sum to total_bytes."""
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "logits": self.logits_bytes,
            "transient": self.transient_bytes,
            "overhead": self.overhead_bytes,
        }

    def gpu_report(self) -> dict[str, object]:
        """The figures a GPU run reports, by the names of the calls that report them (bytes)."""
        return {
            "allocated_bytes": self.allocated_bytes,
            "reserved_bytes": self.reserved_bytes,
            "total_bytes": self.total_bytes,
            "per_stage_allocated_bytes": list(self.per_stage_allocated_bytes),
        }


def predict_memory(
    model: ModelSpec,
    training: TrainingSpec,
    par: Parallelism | None = None,
    method: str = "detailed",
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
) -> MemoryBreakdown:
    """Peak memory per GPU of one training step of `model` under `training`, split as `par` says.

    `training.framework` picks the recipe (frenzy_core.recipes) of the detailed method; "unknown" answers with the
    highest recipe (see `predict_memory_band` for both ends). Uneven pipeline stages (`par.first_stage_layers`,
    `par.last_stage_layers`) give each stage its own layers; `per_stage_allocated_bytes` lists every stage and the
    peak is the most loaded one's.

    >>> from frenzy_core.memory import NO_OVERHEAD
    >>> from frenzy_core.models import ZOO
    >>> predict_memory(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8), method="paper",
    ...                overhead=NO_OVERHEAD).total_bytes
    11079748608
    """
    par = par or Parallelism()
    _check_method(method)
    check_parallelism(model, training, par)
    check_sizes(model, training)
    if get_framework(training.framework).is_band and method == "detailed":
        return predict_memory_band(model, training, par, overhead)[1]
    dp, tp, pp, b = (np.asarray(v, dtype=np.int64) for v in (par.dp, par.tp, par.pp, training.micro_batch))
    parts, phase = _evaluate(model, training, dp, tp, pp, b, method, overhead, par.cp, par.vp, par.ep, par.etp,
                             par.first_stage_layers, par.last_stage_layers)
    values = {k: int(v) for k, v in parts.items()}
    phase_name = "static+activations" if method == "paper" else _PHASES[int(phase)]
    if method == "paper":
        per_stage = (values["allocated"],) * par.pp
    else:
        per_stage = tuple(
            int(v) for v in _stage_allocated(model, training, par, np.arange(par.pp), overhead)
        )
    return MemoryBreakdown(
        weights_bytes=values["weights"],
        gradients_bytes=values["gradients"],
        optimizer_bytes=values["optimizer"],
        activations_bytes=values["activations"],
        logits_bytes=values["logits"],
        transient_bytes=values["transient"],
        overhead_bytes=values["overhead"],
        total_bytes=values["total"],
        peak_phase=phase_name,
        method=method,
        allocated_bytes=values["allocated"],
        reserved_bytes=values["reserved"],
        per_stage_allocated_bytes=per_stage,
        framework=training.framework,
    )


def predict_memory_band(
    model: ModelSpec, training: TrainingSpec, par: Parallelism | None = None, overhead: OverheadSpec = DEFAULT_OVERHEAD
) -> tuple[MemoryBreakdown, MemoryBreakdown]:
    """(lowest, highest) detailed prediction over every framework recipe: the answer when the stack is unknown.

    >>> from frenzy_core.models import ZOO
    >>> low, high = predict_memory_band(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8))
    >>> low.total_bytes <= high.total_bytes
    True
    """
    par = par or Parallelism()
    results = [predict_memory(model, spec, par, "detailed", overhead) for spec in _known_frameworks(training)]
    return min(results, key=lambda r: r.total_bytes), max(results, key=lambda r: r.total_bytes)


def predict_memory_totals(
    model: ModelSpec,
    training: TrainingSpec,
    dp,
    tp,
    pp,
    micro_batch,
    method: str = "detailed",
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
    cp=1,
    vp=1,
    ep=1,
    etp=0,
    first_stage_layers=0,
    last_stage_layers=0,
) -> np.ndarray:
    """Vectorised `predict_memory(...).total_bytes` over broadcast int arrays dp, tp, pp, micro_batch (int64 bytes);
    cp, vp, ep, etp and the uneven stages' `first_stage_layers` / `last_stage_layers` (0: even) broadcast too.

    No validation of the splits: the caller guarantees they divide the model and the batch (plans.py enumerates only
    those; `training.uneven_stage_options` lists the valid uneven stages). The framework comes from
    `training.framework` ("unknown": the highest recipe, element by element).

    >>> from frenzy_core.memory import NO_OVERHEAD
    >>> from frenzy_core.models import ZOO
    >>> predict_memory_totals(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8), np.array([1, 2]), 1, 1, 1,
    ...                       method="paper", overhead=NO_OVERHEAD).tolist()
    [11079748608, 6776392704]
    """
    _check_method(method)
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in (dp, tp, pp, micro_batch)))
    check_sizes(model, training, micro_batch=int(np.max(arrays[3])) if arrays[3].size else None)
    if get_framework(training.framework).is_band and method == "detailed":
        return np.max(
            [
                predict_memory_totals(model, spec, *arrays, method, overhead, cp, vp, ep, etp, first_stage_layers,
                                      last_stage_layers)
                for spec in _known_frameworks(training)
            ],
            axis=0,
        )
    parts, _ = _evaluate(model, training, *arrays, method, overhead, cp, vp, ep, etp, first_stage_layers,
                         last_stage_layers)
    return parts["total"]


def _known_frameworks(training: TrainingSpec) -> list[TrainingSpec]:
    """`training` under every framework that can run it (Megatron has no autocast mode, FSDP2 no ZeRO-1/2)."""
    specs = []
    for name in FRAMEWORKS:
        fields = {**training.model_dump(), "framework": name}
        # DeepSpeed's own buffer sizes mean nothing to the other stacks
        fields.update(dict.fromkeys((f for f in DEEPSPEED_FIELDS if f not in get_framework(name).switches), 0))
        try:
            specs.append(TrainingSpec(**fields))
        except ValidationError:
            continue
    return specs


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise SpecError("method", f"unknown memory method {method!r}; choose one of: {', '.join(METHODS)}")


def _evaluate(model, training, dp, tp, pp, b, method, overhead, cp=1, vp=1, ep=1, etp=0, first=0, last=0):
    """Components (int64 arrays, rounded one by one so they sum to the total), GPU-report totals, peak phase index."""
    if method == "paper":
        parts, phase = _paper(model, training, dp, tp), np.zeros(np.shape(dp), dtype=np.int64)
    else:
        parts, phase = _detailed(model, training, dp, tp, pp, b, cp=cp, vp=vp, ep=ep, etp=etp, first=first, last=last)
    rounded = {k: np.rint(parts[k]).astype(np.int64) for k in _COMPONENTS}
    tensors = sum(rounded.values())
    pools = np.rint(parts.get("stream_pools", 0.0)).astype(np.int64)
    allocated, reserved, total = _gpu_reports(overhead, dp * tp * pp * cp, tensors, method, pools)
    rounded["allocated"], rounded["reserved"], rounded["total"] = allocated, reserved, total
    rounded["overhead"] = total - tensors
    return rounded, phase


def _stage_allocated(model, training, par, stages, overhead):
    """Allocated peak (tensors + workspaces) of each pipeline stage in `stages`, for one split: one evaluation with
    the stages as an array (each element is that stage's own peak over the phases)."""
    split = (np.int64(par.dp), np.int64(par.tp), np.int64(par.pp), np.int64(training.micro_batch))
    parts, _ = _detailed(
        model, training, *split, stages=(np.asarray(stages, dtype=np.float64),), cp=par.cp, vp=par.vp, ep=par.ep,
        etp=par.etp, first=par.first_stage_layers, last=par.last_stage_layers,
    )
    rounded = [np.broadcast_to(np.rint(parts[k]), np.shape(stages)).tolist() for k in _COMPONENTS]
    return [sum(int(v) for v in stage) + overhead.workspace_bytes for stage in zip(*rounded, strict=True)]
