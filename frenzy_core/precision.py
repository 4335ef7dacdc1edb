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


def with_run_switches(ps: PrecisionSetup, training=None) -> PrecisionSetup:
    """The setup as a run's Megatron switches change it (`training`: a TrainingSpec, or None for none):

    * `bf16_grad_reduce` (Megatron-LM --grad-reduce-in-bf16, Megatron-Bridge `ddp.grad_reduce_in_fp32 = False`,
      NeMo's Apex optimizer `grad_sync_dtype: bf16`): the fp32 main-grad buffer takes the params' dtype,
      megatron/core/distributed/distributed_data_parallel.py `grad_dtype = torch.float if
      ddp_config.grad_reduce_in_fp32 else param.dtype`: 2 B per parameter;
    * `param_remainders` (Apex DistributedFusedAdam `store_param_remainders`, which NeMo's
      megatron_base_model.setup_optimization turns on for bf16 params; Megatron-Core's precision-aware
      optimizer, megatron/core/optimizer/distrib_optimizer.py `master_param = init_shard(torch.int16)` with
      store_param_remainders and bf16): the fp32 master is the bf16 param plus its low 16 bits, 2 B kept.

    Only a setup with an fp32 master copy (bf16-master) has either to change.

    >>> class Run: bf16_grad_reduce, param_remainders = True, True
    >>> s = with_run_switches(PRECISIONS["bf16-master"], Run()); s.grad_bytes, s.master_bytes
    (2, 2)
    >>> with_run_switches(PRECISIONS["amp"], Run()).grad_bytes  # no master copy: fp32 params, fp32 grads
    4
    """
    if training is None or not ps.master_bytes:
        return ps
    if getattr(training, "bf16_grad_reduce", False):
        ps = replace(ps, grad_bytes=BF16_BYTES)
    if getattr(training, "param_remainders", False):
        ps = replace(ps, master_bytes=BF16_BYTES)
    return ps


BF16_BYTES = 2  # a bf16 gradient; the 16 remainder bits of an fp32 master beside its bf16 param

PRECISIONS: dict[str, PrecisionSetup] = {
    "amp": PrecisionSetup("amp", 4, 4, 0, 2, 2, 4, "bf16"),
    "bf16-master": PrecisionSetup("bf16-master", 2, 4, 4, 0, 2, 2, "bf16"),
    # pure bf16: bf16 params, grads and Adam states, no master (torchtitan/torchtune dtype=bfloat16 training)
    "bf16": PrecisionSetup("bf16", 2, 2, 0, 0, 2, 2, "bf16", state_element_bytes=2),
    "fp32": PrecisionSetup("fp32", 4, 4, 0, 0, 4, 4, "fp32"),
}
