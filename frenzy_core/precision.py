"""Precision setups: the bytes per parameter of each `TrainingSpec.precision`, each part named.

Its own module so that the framework registry (frenzy_core.frameworks, whose recipes override some setups) and
frenzy_core.training (whose TrainingSpec validates against that registry) can both import it; training re-exports
`PrecisionSetup` and `PRECISIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PrecisionSetup:
    """Bytes per parameter of one precision recipe, each part named.

    `amp` (PyTorch autocast, foreach AdamW) = 4 param + 4 grad + 4 exp_avg + 4 exp_avg_sq = 16 persistent bytes,
    plus a 2-byte bf16 weight copy that autocast caches during forward/backward and a 4-byte foreach temporary inside
    `optimizer.step()` (docs/memory.md, "The peak moves": exactly 20 bytes per parameter inside the step).
    `bf16-master` (Megatron-LM, arXiv 1909.08053 + 2205.05198): 2 bf16 param + 4 fp32 main grad + 4 master weight
    + 4 + 4 Adam states = 18 bytes (the "18 bytes per parameter" of Megatron's distributed-optimizer docs).
    """

    name: str
    param_bytes: int  # the parameter tensors the model holds
    grad_bytes: int  # the gradient each parameter accumulates into
    master_bytes: int  # an fp32 master copy kept by the optimizer (0 when params are already fp32)
    compute_copy_bytes: int  # low-precision weight copies cached by autocast during forward/backward
    activation_bytes: int  # bytes per activation element for matmul outputs (2 for bf16/fp16, 4 for fp32)
    residual_bytes: int  # bytes per element of the residual stream (fp32 under amp: params are fp32)
    compute_dtype: str  # "bf16" or "fp32": which peak TFLOP/s the GPU delivers
    state_element_bytes: int = 4  # bytes per optimizer-state element (fp32; 2 when the states are bf16 too)

    @property
    def model_state_bytes(self) -> int:
        """Persistent bytes per parameter before optimizer states: param + grad + master."""
        return self.param_bytes + self.grad_bytes + self.master_bytes


def with_grad_reduce(ps: PrecisionSetup, bf16_grad_reduce: bool) -> PrecisionSetup:
    """The setup with its fp32 main-grad buffer in bf16 when `bf16_grad_reduce` (TrainingSpec.bf16_grad_reduce:
    Megatron-LM --grad-reduce-in-bf16, Megatron-Bridge `ddp.grad_reduce_in_fp32 = False`; the DDP's grad buffer
    takes the params' dtype, megatron/core/distributed/distributed_data_parallel.py `grad_dtype = torch.float if
    ddp_config.grad_reduce_in_fp32 else param.dtype`). Only a setup with a master copy keeps fp32 main grads.

    >>> with_grad_reduce(PRECISIONS["bf16-master"], True).grad_bytes, with_grad_reduce(PRECISIONS["amp"], True).grad_bytes
    (2, 4)
    """
    if not bf16_grad_reduce or not ps.master_bytes or ps.grad_bytes <= BF16_GRAD_BYTES:
        return ps
    return replace(ps, grad_bytes=BF16_GRAD_BYTES)


BF16_GRAD_BYTES = 2

PRECISIONS: dict[str, PrecisionSetup] = {
    "amp": PrecisionSetup("amp", 4, 4, 0, 2, 2, 4, "bf16"),
    "bf16-master": PrecisionSetup("bf16-master", 2, 4, 4, 0, 2, 2, "bf16"),
    # pure bf16: bf16 params, grads and Adam states, no master (torchtitan/torchtune dtype=bfloat16 training)
    "bf16": PrecisionSetup("bf16", 2, 2, 0, 0, 2, 2, "bf16", state_element_bytes=2),
    "fp32": PrecisionSetup("fp32", 4, 4, 0, 0, 4, 4, "fp32"),
}
