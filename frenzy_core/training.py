"""The training setup: sequence, batch, precision, optimizer, sharding, recomputation, attention kind; and the split.

Everything the memory and performance models need besides the model's shape. Precision setups spell out their bytes
per parameter with each part named, so the 20 bytes of the paper's `20W` can be read off, not taken on trust.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from frenzy_core.errors import SpecError, from_validation_error
from frenzy_core.limits import MAX_PARALLEL, TRAINING_LIMITS, check_upper_limits, short_repr

Precision = Literal["amp", "bf16-master", "bf16", "fp32"]
Optimizer = Literal["adamw", "adamw-fused", "adamw-8bit", "sgd"]
# Where the optimizer's states live: on the GPU; "optimizer": master weights, Adam states and gradients on the CPU
# (ZeRO-Offload, arXiv 2101.06840 Sec. 4); "params": the parameters too (ZeRO-Infinity / FSDP2 CPUOffloadPolicy)
Offload = Literal["none", "optimizer", "params"]
LoraTargets = Literal["attention", "all-linear"]  # PEFT target_modules: q/k/v/o, or every linear of the blocks
# The frozen base linears' storage: the parameter dtype, or bitsandbytes NF4 (QLoRA), with double quantisation (dq)
BaseQuant = Literal["none", "nf4", "nf4-dq"]
# none; selective (Megatron: the attention core); full (every layer keeps only its input); op-sac (PyTorch per-op
# selective AC as torchtitan's selective_ac_option="op": matmul and attention outputs kept, the rest recomputed)
Recompute = Literal["none", "selective", "full", "op-sac"]
Attention = Literal["eager", "flash"]
# The training stack whose memory recipe applies (frenzy_core.recipes); "unknown": the band over all of them.
Framework = Literal["pytorch", "hf", "megatron", "fsdp2", "deepspeed", "unknown"]
UNKNOWN_FRAMEWORK = "unknown"


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


PRECISIONS: dict[str, PrecisionSetup] = {
    "amp": PrecisionSetup("amp", 4, 4, 0, 2, 2, 4, "bf16"),
    "bf16-master": PrecisionSetup("bf16-master", 2, 4, 4, 0, 2, 2, "bf16"),
    # pure bf16: bf16 params, grads and Adam states, no master (torchtitan/torchtune dtype=bfloat16 training)
    "bf16": PrecisionSetup("bf16", 2, 2, 0, 0, 2, 2, "bf16", state_element_bytes=2),
    "fp32": PrecisionSetup("fp32", 4, 4, 0, 0, 4, 4, "fp32"),
}

# Optimizer state bytes per parameter: AdamW keeps exp_avg and exp_avg_sq in fp32 (4 + 4); SGD with momentum 4.
# bitsandbytes AdamW8bit (bitsandbytes/optim/optimizer.py Optimizer8bit.init_state, block-wise): two uint8 states
# plus one fp32 absmax per 256-element block each: 2 x (1 + 4 / 256) = 2.03125.
BNB_BLOCK_ELEMENTS = 256
OPTIMIZER_STATE_BYTES: dict[str, float] = {"adamw": 8, "adamw-fused": 8, "adamw-8bit": 2 * (1 + 4 / BNB_BLOCK_ELEMENTS),
                                           "sgd": 4}
# Transient bytes per parameter inside optimizer.step(): foreach AdamW materialises one fp32 temporary per param
# (docs/memory.md, "The peak moves"); the fused kernels (torch fused, bitsandbytes) and SGD do not.
OPTIMIZER_TRANSIENT_BYTES: dict[str, int] = {"adamw": 4, "adamw-fused": 0, "adamw-8bit": 0, "sgd": 0}


DEEPSPEED_FIELDS = ("reduce_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance")


class TrainingSpec(BaseModel):
    """How the model is trained: shapes of a step and the memory-relevant switches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq_len: int = 2048  # s: tokens per sample
    global_batch: int = 64  # B: samples per optimizer step, over all data-parallel replicas
    micro_batch: int = 1  # b: samples per forward/backward on one GPU; accumulation = B / (b x d)
    precision: Precision = "bf16-master"  # see PRECISIONS
    optimizer: Optimizer = "adamw"  # adamw (foreach), adamw-fused, sgd (momentum)
    zero_stage: int = 0  # 0: none; 1: optimizer states; 2: + gradients; 3: + parameters, sharded over d
    distributed_optimizer: bool = False  # Megatron's: master weights + Adam states sharded over d (like ZeRO-1)
    recompute: Recompute = "none"  # activation recomputation: none, selective (attention core), full, op-sac
    sequence_parallel: bool = False  # Megatron SP: norms and dropouts split over t too (Korthikanti et al. 2022)
    attention: Attention = "flash"  # eager stores the s x s scores; flash keeps only output + log-sum-exp
    dropout: float = 0.0  # > 0 stores a 1-byte mask per dropped element
    framework: Framework = "pytorch"  # whose code runs the step: pytorch, hf, megatron, fsdp2, deepspeed, unknown
    recompute_every: int = 1  # with recompute full / op-sac: checkpoint every k-th layer only (torchtitan ac_freq)
    loss_chunks: int = 1  # cross-entropy over k chunks of the logits (torchtune CEWithChunkedOutputLoss)
    offload: Offload = "none"  # CPU offload of optimizer states (+ grads), or of the parameters too
    lora_rank: int = 0  # LoRA rank r (0: every parameter trains); the base model is frozen
    lora_targets: LoraTargets = "all-linear"  # which linears carry LoRA adapters
    base_quant: BaseQuant = "none"  # QLoRA: the frozen linears stored as NF4
    fp8_linears: bool = False  # Transformer Engine fp8 linears: fp8 saved inputs and a cached fp8 weight (+ transpose)
    compile: bool = False  # torchtitan per-block torch.compile (apply_compile): fused norms, SAC keeps what backward needs
    moe_grouped_gemm: bool = False  # Megatron --moe-grouped-gemm: TE GroupedLinear experts (multi-stream workspaces)
    # DeepSpeed zero_optimization values of the run (deepspeed/runtime/zero/config.py), in elements; 0: DeepSpeed's
    # default (5e8, 1e9, 1e9). Only the deepspeed recipe reads them.
    reduce_bucket_size: int = 0  # the contiguous gradient bucket (ZeRO-1/2: per backward; ZeRO-3: allocated once)
    stage3_max_live_parameters: int = 0  # ZeRO-3: the prefetch stops at this many available elements
    stage3_max_reuse_distance: int = 0  # ZeRO-3: a parameter used again within this many elements is not released

    @model_validator(mode="after")
    def _check(self) -> TrainingSpec:
        check_upper_limits(self, TRAINING_LIMITS)
        for field in ("seq_len", "global_batch", "micro_batch"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be a positive integer, got {getattr(self, field)}")
        if self.micro_batch > self.global_batch:
            raise ValueError(f"micro_batch ({self.micro_batch}) cannot exceed global_batch ({self.global_batch})")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.fp8_linears and self.precision == "fp32":
            raise ValueError("fp8 linears run inside a bf16 step: use precision amp, bf16-master or bf16")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank must be 0 (no LoRA) or a positive rank, got {self.lora_rank}")
        if self.base_quant != "none" and not self.lora_rank:
            raise ValueError("base_quant (QLoRA) freezes the base model: give a lora_rank > 0")
        for field in ("recompute_every", "loss_chunks"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be a positive integer, got {getattr(self, field)}")
        if self.offload == "params" and self.zero_stage != 3 and self.framework != "fsdp2":
            raise ValueError("offload params gathers layers as ZeRO-3 does: use zero_stage 3 (or framework fsdp2)")
        if self.framework == "megatron" and self.loss_chunks > 1:
            raise ValueError("megatron's vocab-parallel loss is not chunked: use loss_chunks 1")
        if self.framework == "megatron" and self.precision == "amp":
            raise ValueError("megatron has no autocast mode: use precision bf16-master (Megatron --bf16) or fp32")
        if self.compile and self.framework not in ("fsdp2", UNKNOWN_FRAMEWORK):
            raise ValueError(
                f"compile models torchtitan's per-block torch.compile: use framework fsdp2, got {self.framework}"
            )
        if self.moe_grouped_gemm and self.framework not in ("megatron", "unknown"):
            raise ValueError(
                f"moe_grouped_gemm is Megatron-Core's --moe-grouped-gemm: use framework megatron, got {self.framework}"
            )
        for field in DEEPSPEED_FIELDS:
            value = getattr(self, field)
            if value < 0:
                raise ValueError(f"{field} must be 0 (DeepSpeed's default) or a positive number of elements, got {value}")
            if value and self.framework not in ("deepspeed", UNKNOWN_FRAMEWORK):
                raise ValueError(f"{field} is a DeepSpeed zero_optimization setting: use framework deepspeed (or leave "
                                 f"it 0), got framework {self.framework}")
        if self.compile and self.moe_grouped_gemm:
            raise ValueError("compile (torchtitan, fsdp2) and moe_grouped_gemm (Megatron) belong to different stacks")
        if self.moe_grouped_gemm and self.precision == "amp":
            raise ValueError("moe_grouped_gemm runs in Megatron, which has no autocast mode: use precision bf16-master")
        if self.framework == "fsdp2" and self.zero_stage in (1, 2):
            raise ValueError(
                f"fsdp2 shards parameters (fully_shard = ZeRO-3): use zero_stage 3 or 0, got {self.zero_stage}"
            )
        return self

    @property
    def precision_setup(self) -> PrecisionSetup:
        return PRECISIONS[self.precision]

    def optimizer_bytes(self, ps: PrecisionSetup | None = None) -> tuple[float, float]:
        """(state bytes, step-temporary bytes) per parameter: fp32 figures scaled to the states' element size."""
        ps = ps or self.precision_setup
        scale = 1.0 if self.optimizer == "adamw-8bit" else ps.state_element_bytes / 4
        return OPTIMIZER_STATE_BYTES[self.optimizer] * scale, OPTIMIZER_TRANSIENT_BYTES[self.optimizer] * scale

    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


def make_training(**fields) -> TrainingSpec:
    """Build a TrainingSpec from user input; raises SpecError naming the bad field."""
    try:
        return TrainingSpec(**fields)
    except ValidationError as err:
        raise from_validation_error(err, fields=TrainingSpec.model_fields) from None


@dataclass(frozen=True)
class Parallelism:
    """How one job is split: d data-parallel replicas x t tensor-parallel shards x p pipeline stages (x cp, vp)."""

    dp: int = 1  # d: replicas, each sees global_batch / d samples per step
    tp: int = 1  # t: tensor-parallel shards of each layer (kept inside one node)
    pp: int = 1  # p: pipeline stages, each holds num_layers / p layers
    cp: int = 1  # context parallelism: each of cp GPUs holds seq_len / cp tokens of every sample (ring attention)
    vp: int = 1  # interleaved 1F1B: each pipeline rank holds vp chunks of num_layers / (p vp) layers
    ep: int = 1  # expert parallelism (MoE): each GPU holds num_experts / ep experts; carved out of dp x cp
    # expert tensor parallelism (Megatron --expert-tensor-parallel-size): each expert's linears split etp ways;
    # 0 means tp, Megatron's default (megatron/training/arguments.py: expert_tensor_parallel_size = tp if None)
    etp: int = 0

    @property
    def expert_tp(self) -> int:
        """The degree that splits each expert's linears: `etp`, or `tp` when etp is 0."""
        return self.etp or self.tp

    @property
    def num_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def label(self) -> str:
        """d=2 t=4 p=1, then vp / cp / ep / etp where they are not their default."""
        extra = [f"{k}={v}" for k, v, default in (("vp", self.vp, 1), ("cp", self.cp, 1), ("ep", self.ep, 1),
                                                   ("etp", self.etp, 0)) if v != default]
        return " ".join([f"d={self.dp} t={self.tp} p={self.pp}", *extra])


def expert_tp_array(etp, tp):
    """`Parallelism.expert_tp` over numpy arrays: etp where it is set, else tp (float64)."""
    return np.where(np.asarray(etp) > 0, np.asarray(etp, dtype=np.float64), tp)


def check_sequence(model, training: TrainingSpec) -> None:
    """A model with learned positions has a table of `max_positions` rows: a longer sequence cannot run."""
    if model.position_kind == "learned" and training.seq_len > model.max_positions:
        raise SpecError(
            "seq_len",
            f"{training.seq_len} exceeds the {model.max_positions} learned positions of {model.name}; "
            f"use seq_len <= {model.max_positions} (or a rotary-position model)",
        )


def check_parallelism(model, training: TrainingSpec, par: Parallelism) -> int:
    """Validate a split against the model and batch; returns the gradient-accumulation steps.

    >>> from frenzy_core.models import ZOO
    >>> check_parallelism(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=32, micro_batch=4), Parallelism(dp=2))
    4
    """
    check_sequence(model, training)
    for field in ("dp", "tp", "pp", "cp", "vp", "ep"):
        if not 0 < getattr(par, field) <= MAX_PARALLEL:
            raise SpecError(field, f"must be an integer from 1 to {MAX_PARALLEL:,}, got {short_repr(getattr(par, field))}")
    if model.num_heads % par.tp or model.kv_heads % par.tp:
        raise SpecError("tp", f"must divide num_heads ({model.num_heads}) and num_kv_heads ({model.kv_heads}), got {par.tp}")
    if model.num_layers % par.pp:
        raise SpecError("pp", f"must divide num_layers ({model.num_layers}), got {par.pp}")
    if par.vp > 1 and (par.pp == 1 or model.num_layers % (par.pp * par.vp)):
        raise SpecError(
            "vp", f"interleaving needs pp > 1 and pp x vp dividing num_layers ({model.num_layers}), got pp={par.pp} vp={par.vp}"
        )
    if not 0 <= par.etp <= MAX_PARALLEL:
        raise SpecError("etp", f"must be 0 (= tp) or an integer from 1 to {MAX_PARALLEL:,}, got {short_repr(par.etp)}")
    if par.etp and not model.num_experts:
        raise SpecError("etp", f"expert tensor parallelism needs an MoE model; {model.name} has no experts: use etp=0")
    # megatron/core/parallel_state.py initialize_model_parallel: the expert grid (etp x ep x expert-dp) re-tiles the
    # tp x cp x dp ranks of each pipeline stage, so etp x ep must divide tp x dp x cp (with etp = tp: ep | dp x cp)
    etp, ranks = par.expert_tp, par.tp * par.dp * par.cp
    if par.etp and ranks % (etp * par.ep):
        raise SpecError(
            "etp",
            f"etp x ep ({etp} x {par.ep}) must divide tp x dp x cp ({ranks}): Megatron tiles the expert grid over "
            f"those ranks; use etp=0 (= tp) or a divisor",
        )
    if par.ep > 1 and (not model.num_experts or model.num_experts % par.ep or ranks % (etp * par.ep)):
        raise SpecError(
            "ep",
            f"expert parallelism needs an MoE model with ep dividing num_experts ({model.num_experts}) and etp x ep "
            f"dividing tp x dp x cp ({ranks}; with etp = tp: ep dividing dp x cp = {par.dp * par.cp}), got {par.ep}",
        )
    if par.etp and model.expert_ffn % par.etp:
        raise SpecError("etp", f"must divide the expert ffn size ({model.expert_ffn}), got {par.etp}")
    if par.cp > 1 and training.seq_len % (2 * par.cp):
        raise SpecError(
            "cp", f"seq_len ({training.seq_len}) must be a multiple of 2 x cp = {2 * par.cp} (load-balanced chunks)"
        )
    per_step = training.micro_batch * par.dp
    if training.global_batch % per_step:
        raise SpecError(
            "global_batch",
            f"{training.global_batch} is not divisible by micro_batch x dp = {training.micro_batch} x {par.dp}; "
            f"use a multiple of {per_step}",
        )
    return training.global_batch // per_step
