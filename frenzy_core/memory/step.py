"""One training step's split and setup, as every term of the detailed method reads it.

`step_context` turns the split (broadcast int arrays, one element per candidate split) into float64 arrays and
works out once what the terms share: the recipe and its precision, the tokens of a micro-batch on one GPU, the
micro-batches per step, the sharding groups, the ZeRO stage and the optimizer's bytes per parameter.

>>> from frenzy_core.models import ZOO
>>> step = step_context(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=2), 2, 1, 1, 2)
>>> float(step.tokens), float(step.micro_batches), step.opt_state
(2048.0, 2.0, 8.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from frenzy_core.frameworks import get as get_framework
from frenzy_core.memory.states import effective_zero_stage, paged_state_fraction
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import Recipe, block_recipe, run_recipe
from frenzy_core.training import PipelineStages, PrecisionSetup, TrainingSpec, expert_tp_array


@dataclass(frozen=True)
class Step:
    """The split and setup of one step (degrees as float64 arrays over the candidate splits)."""

    recipe: Recipe  # the run's recipe, with its own DeepSpeed bucket and live-parameter sizes
    blocks: Recipe  # what runs inside the transformer blocks (compiled or eager)
    ps: PrecisionSetup  # bytes per parameter and per activation element this stack holds
    d: np.ndarray  # data-parallel replicas
    t: np.ndarray  # tensor-parallel shards
    p: np.ndarray  # pipeline stages
    b: np.ndarray  # micro-batch (samples)
    c: np.ndarray  # context-parallel ranks
    v: np.ndarray  # virtual pipeline chunks per rank (interleaved 1F1B)
    e: np.ndarray  # expert-parallel ranks
    et: np.ndarray  # expert tensor parallelism (etp 0: t)
    act: int  # compute-dtype element of the saved activations
    resid: int  # the residual stream's element (the parameters' dtype unless the recipe casts it)
    tokens: np.ndarray  # tokens of one micro-batch on this GPU (context parallelism splits the sequence)
    micro_batches: np.ndarray  # m: micro-batches per replica per step
    # Megatron's distributed optimizer and FSDP shard over the data-parallel x context-parallel ranks
    # (parallel_state get_data_parallel_group(with_context_parallel=True); torchtitan's "dp_shard_cp" mesh)
    shard: np.ndarray
    expert_shard: np.ndarray  # the expert-data-parallel group the experts' states shard over: d c t / (ep etp)
    sp_divisor: object  # sequence parallelism splits the replicated terms by t too (1.0 without it)
    zero: int  # the ZeRO stage the framework runs (FSDP2: 3)
    shard_optimizer: int  # the stage the optimizer states are sharded by: Megatron's distributed optimizer = ZeRO-1
    opt_state: float  # optimizer state bytes per parameter (a paged optimizer's GPU share)
    opt_temp: float  # bytes per parameter inside optimizer.step() (foreach AdamW's temporary)
    full_recompute: bool  # layers recomputed in backward, one at a time (recompute full or op-sac)
    first_layers: np.ndarray  # the uneven first stage's layers (0: a middle stage's share)
    last_layers: np.ndarray  # the uneven last stage's layers (0: a middle stage's share)
    pipeline: PipelineStages  # the layers of each stage

    @property
    def layout(self) -> tuple:
        """(first, last, vp): the uneven first / last stages' layers, and vp for the layers' order."""
        return self.first_layers, self.last_layers, self.v


def step_context(model: ModelSpec, training: TrainingSpec, dp, tp, pp, b, cp=1, vp=1, ep=1, etp=0, first=0,
                 last=0) -> Step:
    """The `Step` of `training` split as the broadcast arrays dp, tp, pp, micro-batch b, cp, vp, ep, etp say;
    `first` / `last`: the uneven first / last stages' layers (0: a middle stage's share)."""
    recipe = run_recipe(training)  # with the run's own DeepSpeed bucket and live-parameter sizes
    ps = recipe.precision_setup(training.precision, training)
    d, t, p, b, c, v, e = (np.asarray(x).astype(np.float64) for x in (dp, tp, pp, b, cp, vp, ep))
    et = expert_tp_array(etp, t)  # expert tensor parallelism (0: t)
    zero = effective_zero_stage(training)
    opt_state, opt_temp = training.optimizer_bytes(ps)
    if get_framework(training.framework).optimizer_kernel(training) == "fused":
        opt_temp = 0.0  # a fused kernel (Framework.optimizer_kernel) steps in place: no foreach temporary
    if training.paged_optimizer:
        # bitsandbytes optim/optimizer.py get_state_buffer (at 95f9af30): a state of >= 1e5 elements is
        # F.get_paged (cudaMallocManaged), outside PyTorch's allocator, paged to the host under pressure; smaller
        # ones are torch.zeros_like on the GPU. Its kernels step in place: no foreach temporary.
        opt_state, opt_temp = opt_state * (1 - paged_state_fraction(model, training)), 0.0
    first_layers, last_layers = (np.asarray(x).astype(np.float64) for x in (first, last))
    shard = d * c
    return Step(
        recipe=recipe,
        blocks=block_recipe(recipe, training),
        ps=ps, d=d, t=t, p=p, b=b, c=c, v=v, e=e, et=et,
        act=ps.activation_bytes,
        resid=ps.activation_bytes if recipe.residual_in_compute_dtype else ps.residual_bytes,
        tokens=training.seq_len * b / c,
        micro_batches=training.global_batch / (d * b),
        shard=shard,
        expert_shard=shard * t / (e * et),
        sp_divisor=t if training.sequence_parallel else 1.0,
        zero=zero,
        shard_optimizer=1 if (training.distributed_optimizer and zero == 0) else zero,
        opt_state=opt_state,
        opt_temp=opt_temp,
        full_recompute=training.recompute in ("full", "op-sac"),
        first_layers=first_layers,
        last_layers=last_layers,
        pipeline=PipelineStages(model.num_layers, p, first_layers, last_layers, v),
    )
