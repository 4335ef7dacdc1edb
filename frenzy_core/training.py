"""The training setup: sequence, batch, precision, optimizer, sharding, recomputation, attention kind; and the split.

Everything the memory and performance models need besides the model's shape. Precision setups spell out their bytes
per parameter with each part named, so the 20 bytes of the paper's `20W` can be read off, not taken on trust.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from frenzy_core.errors import SpecError, from_validation_error
from frenzy_core.frameworks import FRAMEWORKS, switch_owner
from frenzy_core.frameworks.deepspeed import ZERO_OPTIMIZATION_FIELDS
from frenzy_core.limits import MAX_LORA_TARGETS_CHARS, MAX_PARALLEL, TRAINING_LIMITS, check_upper_limits, short_repr
from frenzy_core.precision import PRECISIONS, PrecisionSetup, with_run_switches

__all__ = ["PRECISIONS", "PrecisionSetup"]  # re-exported from frenzy_core.precision, where they live

Precision = Literal["amp", "bf16-master", "bf16", "fp32"]
Optimizer = Literal["adamw", "adamw-fused", "adamw-8bit", "sgd"]
# Where the optimizer's states live: on the GPU; "optimizer": master weights, Adam states and gradients on the CPU
# (ZeRO-Offload, arXiv 2101.06840 Sec. 4); "params": the parameters too (ZeRO-Infinity / FSDP2 CPUOffloadPolicy)
Offload = Literal["none", "optimizer", "params"]
LoraTargets = Literal["attention", "all-linear"]  # PEFT target_modules presets: q/k/v/o, or every linear of the blocks
# `TrainingSpec.lora_targets` also takes a comma list of these linears (PEFT target_modules, LitGPT lora_query / ...):
# the attention projections, the MLP's (GELU MLPs have only up = fc1 and down = fc2) and the LM head
LORA_LINEARS = ("q", "k", "v", "o", "gate", "up", "down", "head")
LORA_PRESETS: dict[str, frozenset[str]] = {
    "attention": frozenset({"q", "k", "v", "o"}),
    "all-linear": frozenset({"q", "k", "v", "o", "gate", "up", "down"}),  # PEFT "all-linear" skips the head
}
# The frozen base linears' storage: the parameter dtype, 4-bit NF4 (QLoRA), with double quantisation (dq), or
# bitsandbytes LLM.int8 (Linear8bitLt: int8 weights + an fp32 scale per output row)
BaseQuant = Literal["none", "nf4", "nf4-dq", "int8"]
# Whose kernel runs the frozen quantised linears (what its autograd Function saves for backward differs):
# "bitsandbytes" (>= 0.43.2) MatMul4Bit saves only the packed weight (ctx.tensors = (None, B)); "bitsandbytes-legacy"
# (< 0.43.2, e.g. the 0.41.1 of LitGPT's resource tables) saved its input too (ctx.tensors = (A, B), removed by
# bitsandbytes commit 9e753741, "fix QLoRA mem bug: delete useless buffered activation"); "torchao" NF4Tensor
# (torchtune's QLoRA) LinearNF4 saves only the weight. bitsandbytes-foundation/bitsandbytes
# bitsandbytes/autograd/_functions.py at 95f9af30 (MatMul4Bit.forward; MatMul8bitLt.forward saves (CAt, subA, A)).
QuantBackend = Literal["bitsandbytes", "bitsandbytes-legacy", "torchao"]
LoraVariant = Literal["lora", "dora"]  # peft LoraConfig(use_dora=...): DoRA adds a magnitude vector per linear
LossDtype = Literal["fp32", "bf16"]  # the dtype the cross-entropy keeps its log-softmax (or logits) in
# optimizer states' element dtype; "auto": the precision's (PrecisionSetup.state_element_bytes)
OptimizerDtype = Literal["auto", "fp32", "bf16"]
# none; selective (Megatron: the attention core); full (every layer keeps only its input); op-sac (PyTorch per-op
# selective AC as torchtitan's selective_ac_option="op": matmul and attention outputs kept, the rest recomputed)
Recompute = Literal["none", "selective", "full", "op-sac"]
# Megatron-Core --recompute-modules beyond the attention core (megatron/core/transformer/transformer_config.py
# recompute_modules, output-discarding checkpoints): "layernorm" recomputes the norms that are not fused into the
# next linear (transformer_layer.py: input_layernorm / pre_mlp_layernorm unless IdentityOp; under Transformer
# Engine the MoE layers' pre-MLP norm), "moe_act" the experts' activation (moe/experts.py activation_recompute)
RecomputeModule = Literal["layernorm", "moe_act"]
RECOMPUTE_MODULES: tuple[str, ...] = ("layernorm", "moe_act")
Attention = Literal["eager", "flash"]
# The training stack (frenzy_core.frameworks, the registry's names); "unknown": the band over all of them.
FrameworkName = Literal[tuple(FRAMEWORKS)]


# Optimizer state bytes per parameter: AdamW keeps exp_avg and exp_avg_sq in fp32 (4 + 4); SGD with momentum 4.
# bitsandbytes AdamW8bit (bitsandbytes/optim/optimizer.py Optimizer8bit.init_state, block-wise): two uint8 states
# plus one fp32 absmax per 256-element block each: 2 x (1 + 4 / 256) = 2.03125.
BNB_BLOCK_ELEMENTS = 256
OPTIMIZER_STATE_BYTES: dict[str, float] = {"adamw": 8, "adamw-fused": 8, "adamw-8bit": 2 * (1 + 4 / BNB_BLOCK_ELEMENTS),
                                           "sgd": 4}
# Transient bytes per parameter inside optimizer.step(): foreach AdamW materialises one fp32 temporary per param
# (docs/memory.md, "The peak moves"); the fused kernels (torch fused, bitsandbytes) and SGD do not.
OPTIMIZER_TRANSIENT_BYTES: dict[str, int] = {"adamw": 4, "adamw-fused": 0, "adamw-8bit": 0, "sgd": 0}


DEEPSPEED_FIELDS = ZERO_OPTIMIZATION_FIELDS  # frenzy_core.frameworks.deepspeed: only that stack reads them


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
    # Megatron's output-discarding recomputation of these modules too (RECOMPUTE_MODULES; with recompute "selective"
    # Megatron's list holds core_attn as well, with "none" it does not)
    recompute_modules: tuple[RecomputeModule, ...] = ()
    sequence_parallel: bool = False  # Megatron SP: norms and dropouts split over t too (Korthikanti et al. 2022)
    attention: Attention = "flash"  # eager stores the s x s scores; flash keeps only output + log-sum-exp
    dropout: float = 0.0  # > 0 stores a 1-byte mask per dropped element
    framework: FrameworkName = "pytorch"  # whose code runs the step: pytorch, hf, megatron, fsdp2, deepspeed, torchtune, litgpt, unknown
    recompute_every: int = 1  # with recompute full / op-sac: checkpoint every k-th layer only (torchtitan ac_freq)
    loss_chunks: int = 1  # cross-entropy over k chunks of the logits (torchtune CEWithChunkedOutputLoss)
    offload: Offload = "none"  # CPU offload of optimizer states (+ grads), or of the parameters too
    lora_rank: int = 0  # LoRA rank r (0: every parameter trains); the base model is frozen
    lora_targets: str = "all-linear"  # which linears carry LoRA adapters: a preset or a comma list of LORA_LINEARS
    lora_dropout: float = 0.0  # peft lora_dropout: > 0 keeps a mask and a dropped copy of every adapter's input
    lora_variant: LoraVariant = "lora"  # dora: peft use_dora (weight-decomposed LoRA, arXiv 2402.09353)
    base_quant: BaseQuant = "none"  # QLoRA: the frozen linears stored as NF4; int8: LLM.int8
    quant_backend: QuantBackend = "bitsandbytes"  # whose quantised linear runs (what it saves for backward)
    quant_head: bool = False  # the LM head quantised too (LitGPT's BitsandbytesPrecision converts every nn.Linear)
    loss_dtype: LossDtype = "fp32"  # bf16: the loss keeps bf16 log-probabilities (LitGPT, torchtune compiled loss)
    optimizer_dtype: OptimizerDtype = "auto"  # the optimizer states' dtype (auto: the precision's)
    paged_optimizer: bool = False  # bitsandbytes paged optimizer: states >= 1e5 elements in CUDA managed memory
    optimizer_in_backward: bool = False  # torchtune optimizer_in_bwd: each parameter steps and frees its gradient
    activation_offload: bool = False  # torchtune enable_activation_offloading: saved activations go to the host
    # several documents packed into each seq_len row, attention kept within each (position ids restart per document;
    # torchtune packed: True, HF DataCollatorWithFlattening): memory.pipeline.packed_mask_bytes
    packed: bool = False
    # with packed: the mean tokens of one document (0: one document fills the row). Attention then runs within each
    # document where the stack's kernel skips the others (perf.attention_span); memory does not depend on it
    packed_doc_tokens: int = 0
    fp8_linears: bool = False  # Transformer Engine fp8 linears: fp8 saved inputs and a cached fp8 weight (+ transpose)
    compile: bool = False  # per-block torch.compile (torchtitan apply_compile, torchtune compile_model): fused norms and SwiGLU
    moe_grouped_gemm: bool = False  # Megatron --moe-grouped-gemm: TE GroupedLinear experts (multi-stream workspaces)
    # Megatron --fp8-param-gather (TE fp8_model_init; Megatron-Bridge's fp8 recipes set it): the linears' weights are
    # stored as fp8 (1 B) with their cached fp8 transpose, no bf16 copy; the distributed optimizer keeps fp32 masters
    fp8_params: bool = False
    # Megatron --grad-reduce-in-bf16 (Megatron-Bridge ddp.grad_reduce_in_fp32 False): main grads and their
    # reduce-scatter in bf16 (2 B per parameter) instead of fp32 (precision.with_run_switches)
    bf16_grad_reduce: bool = False
    # the fp32 master weights kept as the 16 bits their bf16 params lack (Apex DistributedFusedAdam
    # store_param_remainders: NeMo's distributed_fused_adam; Megatron --use-precision-aware-optimizer): 2 B, not 4
    param_remainders: bool = False
    # Which FSDP shards a zero_stage 3 run: 1 FullyShardedDataParallel (FSDP1, FlatParameter: LitGPT's and accelerate's),
    # 2 fully_shard (FSDP2: fsdp2, torchtune); 0 the stack's own (Framework.fsdp_default: litgpt 1, fsdp2 / torchtune
    # 2, hf its generic ZeRO-3, as its accelerate export writes DeepSpeed ZeRO). FSDP1's terms: frameworks/fsdp1.py
    fsdp: int = 0
    # Communication hidden behind compute (perf.comm_overlaps); None = the framework's default. Data parallel: Megatron
    # --overlap-grad-reduce / --overlap-param-gather, FSDP / ZeRO-3 prefetch, DeepSpeed overlap_comm (default: on for
    # megatron, fsdp2 and ZeRO-3). Tensor parallel: Megatron --tp-comm-overlap, torchtitan AsyncTP (default: on for
    # megatron with sequence parallelism). False reproduces the no-overlap step model.
    overlap_dp_comm: bool | None = None
    tp_comm_overlap: bool | None = None
    # Pipeline sends hidden behind the other chunks' compute (Megatron overlap_p2p_comm, which needs the interleaved
    # schedule: only plans with vp > 1 overlap); None = the framework's default (Framework.pp_overlap: on for
    # megatron), False = in series (--no-overlap-p2p-communication)
    overlap_pp_comm: bool | None = None
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
        self._check_finetune()
        for field in ("recompute_every", "loss_chunks"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be a positive integer, got {getattr(self, field)}")
        fw = FRAMEWORKS[self.framework]  # the stack's capabilities and messages (frenzy_core.frameworks)
        if self.offload == "params" and self.zero_stage != 3 and not fw.fully_shards:
            raise ValueError("offload params gathers layers as ZeRO-3 does: use zero_stage 3 (or framework fsdp2)")
        if self.loss_chunks > 1 and not fw.supports_chunked_loss:
            raise ValueError(fw.chunked_loss_refusal)
        if self.loss_dtype != "fp32" and not fw.supports_chunked_loss:
            raise ValueError(f"loss_dtype {self.loss_dtype}: {self.framework}'s loss is its own kernel (no torch "
                             f"cross-entropy on the logits); use loss_dtype fp32")
        if self.precision == "amp" and not fw.supports_amp:
            raise ValueError(fw.amp_refusal)
        if self.recompute_modules:
            if len(set(self.recompute_modules)) != len(self.recompute_modules):
                raise ValueError(f"recompute_modules lists a module twice: {', '.join(self.recompute_modules)}")
            if self.recompute in ("full", "op-sac"):
                raise ValueError(f"recompute_modules adds modules to recompute none or selective; recompute "
                                 f"{self.recompute} already replays every module: drop recompute_modules")
        for field in ("compile", "moe_grouped_gemm", "fp8_params", "bf16_grad_reduce",
                      "param_remainders", "recompute_modules"):  # another stack's switch
            if getattr(self, field) and field not in fw.switches:
                raise ValueError(switch_owner(field).switch_refusal.format(field=field, framework=self.framework))
        for field in DEEPSPEED_FIELDS:
            value = getattr(self, field)
            if value < 0:
                raise ValueError(f"{field} must be 0 (DeepSpeed's default) or a positive number of elements, got {value}")
            if value and field not in fw.switches:
                raise ValueError(switch_owner(field).switch_refusal.format(field=field, framework=self.framework))
        self._check_megatron_precision()
        if self.packed_doc_tokens:
            if not self.packed:
                raise ValueError("packed_doc_tokens is the document length of packed rows: turn packed on, or give 0")
            if not 0 < self.packed_doc_tokens <= self.seq_len:
                raise ValueError(f"packed_doc_tokens must be from 1 to seq_len ({self.seq_len}) tokens, or 0 (a "
                                 f"document fills the row), got {self.packed_doc_tokens}")
        if self.compile and self.moe_grouped_gemm:
            raise ValueError("compile (torchtitan, fsdp2) and moe_grouped_gemm (Megatron) belong to different stacks")
        if self.moe_grouped_gemm and self.precision == "amp":
            raise ValueError("moe_grouped_gemm runs in Megatron, which has no autocast mode: use precision bf16-master")
        if self.zero_stage not in fw.zero_stages:
            raise ValueError(fw.zero_stage_refusal.format(zero_stage=self.zero_stage))
        self._check_fsdp(fw)
        return self

    def _check_megatron_precision(self) -> None:
        """fp8_params, bf16_grad_reduce and param_remainders change Megatron's bf16-master bytes: each needs what it
        changes (an fp32 main grad, an fp32 master beside a bf16 param, fp8 linears and the distributed optimizer)."""
        if self.bf16_grad_reduce and self.precision != "bf16-master":
            raise ValueError(f"bf16_grad_reduce puts Megatron's fp32 main grads in bf16: use precision bf16-master, "
                             f"got {self.precision} (or bf16_grad_reduce off)")
        sharded_optimizer = self.distributed_optimizer or self.zero_stage >= 1
        if self.param_remainders:
            if self.precision != "bf16-master":
                raise ValueError(f"param_remainders keeps the 16 bits an fp32 master has beside its bf16 param: use "
                                 f"precision bf16-master, got {self.precision} (or param_remainders off)")
            if not sharded_optimizer:
                raise ValueError("param_remainders is the distributed optimizer's (Apex DistributedFusedAdam, "
                                 "Megatron's precision-aware optimizer): turn distributed_optimizer on, or "
                                 "param_remainders off")
            if self.fp8_params:
                raise ValueError("param_remainders with fp8_params: fp8 weights have no bf16 half to complete, the "
                                 "optimizer keeps whole fp32 masters (NeMo store_params); turn one of them off")
        if not self.fp8_params:
            return
        if not self.fp8_linears:
            raise ValueError("fp8_params stores the fp8 linears' weights in fp8: turn fp8_linears on (--fp8), or "
                             "fp8_params off")
        if self.precision != "bf16-master":
            raise ValueError(f"fp8_params keeps fp32 master weights in the optimizer: use precision bf16-master, "
                             f"got {self.precision}")
        if not sharded_optimizer:
            raise ValueError("fp8_params (--fp8-param-gather) gathers fp8 weights from the distributed optimizer: "
                             "turn distributed_optimizer on (or zero_stage >= 1), or fp8_params off")
        if self.lora_rank:
            raise ValueError("fp8_params with LoRA is not modelled: use lora_rank 0 or fp8_params off")

    def _check_fsdp(self, fw) -> None:
        """`fsdp`: 1 or 2 (0: the stack's own), under a stack that shards with it, at zero_stage 3."""
        if self.fsdp not in (0, 1, 2):
            raise ValueError(f"fsdp must be 1 (FullyShardedDataParallel, FSDP1) or 2 (fully_shard, FSDP2), or 0 for "
                             f"the stack's own; got {short_repr(self.fsdp)}")
        if fw.fsdp_version(self) == 1 and (self.offload != "none" or self.optimizer_in_backward):
            raise ValueError(f"fsdp 1 ({self.framework} at zero_stage 3 shards with FullyShardedDataParallel): its "
                             f"CPUOffload and optimizer-in-backward are not modelled; use offload none and "
                             f"optimizer_in_backward off (or framework fsdp2)")
        if not self.fsdp:
            return
        if not fw.fsdp_versions:
            raise ValueError(f"fsdp {self.fsdp}: {self.framework} does not shard with FSDP; fsdp 1 runs under "
                             f"framework hf or litgpt, fsdp 2 under fsdp2 or torchtune (or leave fsdp 0)")
        if self.fsdp not in fw.fsdp_versions:
            raise ValueError(fw.fsdp_refusal.format(fsdp=self.fsdp))
        if self.zero_stage != 3 and not fw.fully_shards:
            raise ValueError(f"fsdp {self.fsdp} names the FSDP that shards the parameters: use zero_stage 3 "
                             f"(FULL_SHARD), got zero_stage {self.zero_stage} (or leave fsdp 0)")

    def _check_finetune(self) -> None:
        """The fine-tuning switches: each names its field, its limit and the fix."""
        lora_targets_set(self.lora_targets)  # raises naming lora_targets
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        for field, value, default in (("lora_dropout", self.lora_dropout, 0.0), ("lora_variant", self.lora_variant,
                                                                                  "lora")):
            if value != default and not self.lora_rank:
                raise ValueError(f"{field} {value!r} configures LoRA adapters: give a lora_rank > 0 (or {default!r})")
        if self.base_quant == "none" and (self.quant_backend != "bitsandbytes" or self.quant_head):
            raise ValueError("quant_backend / quant_head describe a quantised base: give base_quant nf4, nf4-dq or "
                             "int8 (or leave quant_backend bitsandbytes and quant_head off)")
        if self.quant_backend == "torchao" and self.base_quant != "nf4-dq":
            raise ValueError(f"quant_backend torchao runs NF4Tensor, which always quantises its scales (to_nf4 "
                             f"scaler_block_size=256): use base_quant nf4-dq, got {self.base_quant}")
        if self.base_quant == "int8" and self.quant_backend != "bitsandbytes":
            raise ValueError("base_quant int8 is bitsandbytes LLM.int8 (Linear8bitLt): use quant_backend bitsandbytes")
        if self.optimizer_dtype != "auto" and self.optimizer == "adamw-8bit":
            raise ValueError("optimizer_dtype: adamw-8bit keeps uint8 states whatever the dtype; use optimizer_dtype "
                             "auto (or another optimizer)")
        if self.paged_optimizer and (self.optimizer not in ("adamw", "adamw-fused", "adamw-8bit")
                                     or self.offload != "none"):
            raise ValueError("paged_optimizer is bitsandbytes PagedAdamW / PagedAdamW8bit: use optimizer adamw, "
                             "adamw-fused or adamw-8bit, with offload none (both move the states off the GPU)")
        if self.optimizer_in_backward and (self.offload != "none" or self.zero_stage in (1, 2)):
            raise ValueError("optimizer_in_backward steps each parameter in its gradient hook on the GPU: use offload "
                             "none and zero_stage 0 or 3")

    @property
    def lora_target_set(self) -> frozenset[str]:
        """The linears carrying adapters (LORA_LINEARS names); empty without LoRA."""
        return lora_targets_set(self.lora_targets) if self.lora_rank else frozenset()

    @property
    def precision_setup(self) -> PrecisionSetup:
        return with_run_switches(PRECISIONS[self.precision], self)

    def optimizer_bytes(self, ps: PrecisionSetup | None = None) -> tuple[float, float]:
        """(state bytes, step-temporary bytes) per parameter: fp32 figures scaled to the states' element size
        (`optimizer_dtype`, or the precision's when auto).

        >>> TrainingSpec(optimizer_dtype="bf16").optimizer_bytes()  # exp_avg + exp_avg_sq in bf16, a bf16 temporary
        (4.0, 2.0)
        """
        ps = ps or self.precision_setup
        element = {"auto": ps.state_element_bytes, "fp32": 4, "bf16": 2}[self.optimizer_dtype]
        scale = 1.0 if self.optimizer == "adamw-8bit" else element / 4
        return OPTIMIZER_STATE_BYTES[self.optimizer] * scale, OPTIMIZER_TRANSIENT_BYTES[self.optimizer] * scale

    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


def lora_targets_set(targets: str) -> frozenset[str]:
    """The linears a `lora_targets` value names: a preset, or a comma list of LORA_LINEARS.

    >>> sorted(lora_targets_set("q,v"))
    ['q', 'v']
    >>> sorted(lora_targets_set("attention"))
    ['k', 'o', 'q', 'v']
    """
    if targets in LORA_PRESETS:
        return LORA_PRESETS[targets]
    if not isinstance(targets, str) or len(targets) > MAX_LORA_TARGETS_CHARS:
        raise ValueError(f"lora_targets must be a preset or a comma list of {','.join(LORA_LINEARS)} (at most "
                         f"{MAX_LORA_TARGETS_CHARS} characters); got {short_repr(targets)}")
    names = [t.strip() for t in targets.split(",")]
    bad = [t for t in names if t not in LORA_LINEARS]
    if not names or bad:
        raise ValueError(f"lora_targets must be {' or '.join(LORA_PRESETS)}, or a comma list of "
                         f"{','.join(LORA_LINEARS)}; got {short_repr(targets)} (unknown: {', '.join(map(repr, bad))})")
    return frozenset(names)


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
    # uneven pipeline stages (Megatron --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers,
    # TransformerConfig.num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage): the layers of the
    # first / last stage; 0 means unset (Megatron's None): that stage is a middle one. The middle stages split the
    # rest evenly (`check_pipeline_layout` states the rule); both 0 is the even split num_layers / p.
    first_stage_layers: int = 0
    last_stage_layers: int = 0

    @property
    def expert_tp(self) -> int:
        """The degree that splits each expert's linears: `etp`, or `tp` when etp is 0."""
        return self.etp or self.tp

    @property
    def num_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def uneven(self) -> bool:
        """Whether the first or the last pipeline stage has its own layer count."""
        return bool(self.first_stage_layers or self.last_stage_layers)

    def label(self) -> str:
        """d=2 t=4 p=1, then vp / cp / ep / etp / first / last where they are not their default."""
        extra = [f"{k}={v}" for k, v, default in (("vp", self.vp, 1), ("cp", self.cp, 1), ("ep", self.ep, 1),
                                                   ("etp", self.etp, 0), ("first", self.first_stage_layers, 0),
                                                   ("last", self.last_stage_layers, 0)) if v != default]
        return " ".join([f"d={self.dp} t={self.tp} p={self.pp}", *extra])

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Layers on each pipeline stage, first to last (a valid split: see `check_pipeline_layout`).

        >>> Parallelism(pp=16, first_stage_layers=7, last_stage_layers=7).stage_layers(126)[:3]
        (7, 8, 8)
        """
        counts = stage_layer_counts(num_layers, self.pp, np.arange(self.pp), self.first_stage_layers,
                                    self.last_stage_layers)
        return tuple(int(round(float(n))) for n in counts)


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
    check_pipeline_layout(model.num_layers, par)
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
    if training.optimizer_in_backward and training.global_batch != per_step:
        raise SpecError(
            "optimizer_in_backward",
            f"steps each parameter as its gradient forms, so it cannot accumulate gradients: global_batch "
            f"({training.global_batch}) must equal micro_batch x dp ({per_step}); turn optimizer_in_backward off",
        )
    if training.global_batch % per_step:
        raise SpecError(
            "global_batch",
            f"{training.global_batch} is not divisible by micro_batch x dp = {training.micro_batch} x {par.dp}; "
            f"use a multiple of {per_step}",
        )
    return training.global_batch // per_step


# --- the pipeline layout --------------------------------------------------------------------------------------------
# Megatron-Core's uneven pipeline split (megatron/core/transformer/transformer_config.py, TransformerConfig
# __post_init__, "Uneven PP"; read at d98e8a64): a first (last) stage with its own layer count takes those layers
# out, the p - #uneven middle stages share the rest evenly, and under interleaving (vp chunks per rank) the first,
# the last and each middle stage's count must be multiples of vp. The layers' order follows
# transformer_layer.py get_transformer_layer_offset: round r of the vp rounds holds num_layers / vp consecutive
# layers, stage s's chunk of it starting after the chunks of the stages before s.
UNEVEN_LIGHTER_LAYERS = 2  # `uneven_stage_options` tries first / last stages up to this many layers lighter


class PipelineStages:
    """The layers of each stage of a pipeline layout: num_layers over p stages of vp chunks, the first / last stage
    holding `first` / `last` layers where set (> 0), the middle stages the rest evenly (float64; numpy arrays
    broadcast, so one value can hold many layouts). What does not depend on the stage (the middle stages' share) is
    computed once, for callers that ask about several stages of the same layouts (the memory model's loop over the
    bounding stages); `stage_layer_counts`, `stage_leading_layers`, `stage_of_layer` and `bounding_stages` ask one
    question each.

    >>> pipe = PipelineStages(126, 16, 7, 7)  # Llama-3.1-405B: 7 / 8 x 14 / 7
    >>> pipe.counts(np.array([0, 1, 15])).tolist(), [float(s) for s in pipe.bounding(0)]
    ([7.0, 8.0, 7.0], [0.0, 1.0, 15.0])
    """

    def __init__(self, num_layers: int, p, first=0, last=0, vp=1):
        self.num_layers = num_layers
        self.p, self.first, self.last, self.vp = (np.asarray(x, dtype=np.float64) for x in (p, first, last, vp))
        self.even = not (self.first.any() or self.last.any())  # num_layers / p on every stage
        self.consecutive = self.even and not (self.vp != 1).any()  # ... and each stage's layers in one run

    @cached_property
    def middle(self) -> np.ndarray:
        """Layers on each middle stage (0 when there is none: p = 2 with both ends set)."""
        return _middle_stage_layers(self.num_layers, self.p, self.first, self.last)

    def _own_counts(self, stage) -> np.ndarray:
        # the memory model asks `counts` and then `leading` of the same stages: the last answer is kept
        if getattr(self, "_counted", (None,))[0] is not stage:
            self._counted = stage, np.where((stage == 0) & (self.first > 0), self.first,
                                            np.where((stage == self.p - 1) & (self.last > 0), self.last, self.middle))
        return self._counted[1]

    @cached_property
    def _first_chunk(self) -> np.ndarray:
        """Layers in the first stage's chunk of each round (vp rounds)."""
        return np.where(self.first > 0, self.first, self.middle) / self.vp

    def _round_start(self, r: int) -> np.ndarray:
        """Layer where round r of the vp rounds starts."""
        starts = self.__dict__.setdefault("_round_starts", {})
        if r not in starts:
            starts[r] = r * self.num_layers / self.vp
        return starts[r]

    def counts(self, stage) -> np.ndarray:
        """`stage_layer_counts` of this layout."""
        stage = np.asarray(stage, dtype=np.float64)
        if self.even:
            return self.num_layers / self.p + 0.0 * stage
        return self._own_counts(stage)

    def leading(self, leading: int, stage) -> np.ndarray:
        """`stage_leading_layers` of this layout."""
        stage = np.asarray(stage, dtype=np.float64)
        p, v, num_layers = self.p, self.vp, self.num_layers
        if self.consecutive:  # consecutive layers, l / p per stage
            n = num_layers / p
            return np.clip(leading - stage * n, 0.0, n)
        middle = self.middle
        chunk = self._own_counts(stage) / v
        if not leading:
            return 0.0 * chunk
        offset = np.where(stage == 0, 0.0, self._first_chunk + (stage - 1) * middle / v)  # within each round
        # only the rounds that start before layer `leading` hold any of them
        top = float(np.max(v)) if np.size(v) else 1.0
        total = 0.0 * chunk
        for r in range(int(min(top, np.ceil(leading * top / num_layers)))):
            start = self._round_start(r) + offset
            total = total + np.where(r < v, np.clip(leading - start, 0.0, chunk), 0.0)
        return total

    def stage_of(self, layer) -> np.ndarray:
        """`stage_of_layer` of this layout."""
        layer = np.asarray(layer, dtype=np.float64)
        p, v = self.p, self.vp
        if self.consecutive:  # consecutive layers, l / p per stage
            return np.clip(np.floor(layer / (self.num_layers / p)), 0.0, p - 1)
        per_round = self.num_layers / v
        offset = layer - np.floor(layer / per_round) * per_round  # position within its round
        first_chunk = self.counts(0.0) / v
        middle_chunk = self.middle / v
        middle = 1 + np.floor((offset - first_chunk) / np.where(middle_chunk > 0, middle_chunk, np.inf))
        return np.clip(np.where(offset < first_chunk, 0.0, middle), 0.0, p - 1)

    def bounding(self, leading: int) -> tuple:
        """`bounding_stages` of this layout."""
        p = self.p
        stages = [0.0 * p]
        if np.any(self.first > 0):
            stages.append(np.minimum(1.0, p - 1))
        if leading:
            boundary = self.stage_of(leading)
            stages += [boundary, np.minimum(boundary + 1, p - 1)]
        stages.append(p - 1)
        return tuple(stages)


def stage_layer_counts(num_layers: int, p, stage, first=0, last=0) -> np.ndarray:
    """Layers on pipeline stage `stage` of p (numpy arrays broadcast; float64): `first` on stage 0 and `last` on
    stage p - 1 where they are set (> 0), the middle count (num_layers - first - last) / #middle stages elsewhere.

    >>> stage_layer_counts(126, 16, np.array([0, 1, 14, 15]), 7, 7).tolist()
    [7.0, 8.0, 8.0, 7.0]
    >>> stage_layer_counts(12, 4, np.arange(4)).tolist()  # the even split
    [3.0, 3.0, 3.0, 3.0]
    """
    return PipelineStages(num_layers, p, first, last).counts(stage)


def _middle_stage_layers(num_layers: int, p, f, lst) -> np.ndarray:
    """Layers on each middle stage (0 when there is none: p = 2 with both ends set)."""
    stages = p - (f > 0) - (lst > 0)
    return np.where(stages > 0, (num_layers - f - lst) / np.maximum(stages, 1.0), 0.0)


def stage_leading_layers(num_layers: int, leading: int, p, stage, first=0, last=0, vp=1) -> np.ndarray:
    """How many of the model's first `leading` layers sit on pipeline stage `stage` (float64, arrays broadcast):
    DeepSeek's first_k_dense dense layers. Megatron's order (get_transformer_layer_offset): round r of vp holds
    layers r x num_layers / vp onwards, and stage s's chunk of n_s / vp layers starts after its predecessors'.

    >>> stage_leading_layers(61, 3, 8, np.arange(3), 7, 6).tolist()  # DeepSeek-V3's 3 dense layers: all on stage 0
    [3.0, 0.0, 0.0]
    >>> stage_leading_layers(8, 3, 2, np.arange(2), vp=2).tolist()  # chunks [0 1] [4 5] | [2 3] [6 7]
    [2.0, 1.0]
    """
    return PipelineStages(num_layers, p, first, last, vp).leading(leading, stage)


def stage_of_layer(num_layers: int, layer, p, first=0, last=0, vp=1) -> np.ndarray:
    """The pipeline stage holding layer `layer` (0-based) under Megatron's order (float64 stage index)."""
    return PipelineStages(num_layers, p, first, last, vp).stage_of(layer)


def bounding_stages(num_layers: int, leading: int, p, first=0, last=0, vp=1) -> tuple:
    """Pipeline stages that bound every stage's memory (float64 arrays): the first (embedding, most micro-batches in
    flight), the first middle one where the first stage has its own count (a lighter first stage can leave stage 1
    the most loaded), the stage holding layer `leading` and the next (dense-first MoE models: the first stages with
    MoE layers; 0 = none), and the last (LM head and loss). Any other stage equals one of these in layers and
    parameters and holds fewer micro-batches in flight.

    >>> [float(s) for s in bounding_stages(126, 0, 16, 7, 7)]
    [0.0, 1.0, 15.0]
    """
    return PipelineStages(num_layers, p, first, last, vp).bounding(leading)


def pipeline_layout_problem(num_layers: int, p: int, vp: int = 1, first: int = 0, last: int = 0) -> str | None:
    """Why (first, last) cannot split num_layers over p stages of vp chunks under Megatron's rule, or None.

    >>> pipeline_layout_problem(126, 16, 1, 7, 7) is None
    True
    >>> pipeline_layout_problem(126, 16, 1, 7, 0)
    'the 119 middle layers (num_layers 126 - first 7 - last 0) do not split evenly over 15 middle stages'

    With vp > 1 an end stage may hold one layer less than the middle stages, in its first chunk (the first stage:
    the embedding's slot) or its last (the last stage: the loss'): Megatron's --account-for-embedding-in-pipeline-split
    / --account-for-loss-in-pipeline-split (`lighter_chunk_layout`), which cannot be mixed with other uneven ends.

    >>> pipeline_layout_problem(126, 8, 8, 15, 15) is None  # Llama-3.1-405B, PP8 x VP8: 1 + 7 x 2 layers at each end
    True
    >>> pipeline_layout_problem(126, 8, 8, 15, 0)  # doctest: +ELLIPSIS
    "first (15) is neither a multiple of vp (8) nor one layer less than the other stages (Megatron's ... 126 layers + 1 slot(s) over 8 stages)"
    """
    if not (first or last):
        if num_layers % p:
            return f"p ({p}) does not divide num_layers ({num_layers})"
        if vp > 1 and (p == 1 or num_layers % (p * vp)):
            return f"interleaving needs p > 1 and p x vp ({p} x {vp}) dividing num_layers ({num_layers})"
        return None
    if p == 1:
        return "uneven stages need at least 2 pipeline stages"
    stages = p - (first > 0) - (last > 0)
    if vp > 1 and any(value % vp for value in (first, last) if value):
        return _lighter_chunk_problem(num_layers, p, vp, first, last)
    middle = num_layers - first - last
    detail = f"(num_layers {num_layers} - first {first} - last {last})"
    if middle < 0 or bool(middle) != bool(stages):
        return f"{middle} middle layers {detail} for {stages} middle stages: either both or neither must be 0"
    if stages and middle % stages:
        return f"the {middle} middle layers {detail} do not split evenly over {stages} middle stages"
    if stages and middle // stages % vp:
        return f"each middle stage's {middle // stages} layers are not a multiple of vp ({vp})"
    return None


def lighter_chunk_layout(vp, first=0, last=0) -> tuple[bool, bool]:
    """(first, last): whether each end stage of an interleaved layout holds one layer less than a whole number of
    chunks, i.e. Megatron's account_for_embedding / account_for_loss_in_pipeline_split (its first / last chunk one
    layer lighter). With vp = 1 an uneven end is plain --decoder-first/last-pipeline-num-layers.

    >>> lighter_chunk_layout(8, 15, 15), lighter_chunk_layout(2, 6, 0), lighter_chunk_layout(1, 7, 7)
    ((True, True), (False, False), (False, False))
    """
    return (bool(vp > 1 and first and first % vp), bool(vp > 1 and last and last % vp))


def _lighter_chunk_problem(num_layers: int, p: int, vp: int, first: int, last: int) -> str | None:
    """`pipeline_layout_problem` for an end that is not a whole number of chunks: it must be Megatron's
    account-for layout (megatron/core/transformer/transformer_block.py get_num_layers_to_build): num_layers + the
    embedding's and the loss' slots split evenly over p x vp chunks, the first stage's first chunk (the last stage's
    last chunk) one layer lighter; both ends follow it (TransformerConfig refuses mixing it with
    num_layers_in_first/last_pipeline_stage)."""
    slots = num_layers + (first > 0) + (last > 0)
    per_stage = slots // p
    for name, value in (("first", first), ("last", last)):
        if value and value != per_stage - 1:
            return (f"{name} ({value}) is neither a multiple of vp ({vp}) nor one layer less than the other stages "
                    f"(Megatron's account-for-embedding/loss layout: {num_layers} layers + {slots - num_layers} "
                    f"slot(s) over {p} stages)")
    if slots % (p * vp):
        return (f"the embedding's / loss' slots layout needs p x vp ({p} x {vp}) dividing num_layers ({num_layers}) "
                f"plus its {slots - num_layers} lighter end(s)")
    if per_stage // vp < 2:
        return (f"vp ({vp}) leaves chunks of {per_stage // vp} layer(s): a chunk one layer lighter would be empty "
                f"(fewer chunks, or no lighter end)")
    return None


def check_pipeline_layout(num_layers: int, par: Parallelism) -> None:
    """Raise SpecError naming the rule when `par`'s stages cannot hold num_layers (Megatron's, see above).

    >>> check_pipeline_layout(126, Parallelism(pp=16, first_stage_layers=7, last_stage_layers=7))
    >>> check_pipeline_layout(126, Parallelism(pp=16))
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: pp: must divide num_layers (126), got 16; or give first_stage_layers / last_stage_layers (uneven stages), e.g. 0/6, 7/7, 6/0
    """
    f, lst = par.first_stage_layers, par.last_stage_layers
    for field, value in (("first_stage_layers", f), ("last_stage_layers", lst)):
        if not 0 <= value <= MAX_PARALLEL:
            raise SpecError(field, f"must be 0 (a middle stage's share) or a number of layers, got {short_repr(value)}")
    problem = pipeline_layout_problem(num_layers, par.pp, par.vp, f, lst)
    if problem is None:
        return
    options = ", ".join(f"{a}/{b}" for a, b in uneven_stage_options(num_layers, par.pp, par.vp)[:3])
    hint = f"; or give first_stage_layers / last_stage_layers (uneven stages), e.g. {options}" if options else ""
    if not par.uneven:
        if num_layers % par.pp:
            raise SpecError("pp", f"must divide num_layers ({num_layers}), got {par.pp}{hint}")
        raise SpecError(
            "vp", f"interleaving needs pp > 1 and pp x vp dividing num_layers ({num_layers}), got pp={par.pp} "
                  f"vp={par.vp}{hint}"
        )
    raise SpecError(
        "last_stage_layers" if problem.startswith("last") or not f else "first_stage_layers",
        f"{problem}. Megatron's uneven split (TransformerConfig num_layers_in_first/last_pipeline_stage): the "
        f"first and last stages take their own layers, each a multiple of vp, and the num_layers - first - last "
        f"middle layers divide over the p - #uneven middle stages in multiples of vp, at least one layer per stage; "
        f"or (--account-for-embedding/loss-in-pipeline-split) an end one layer short of its chunks, the others "
        f"equal (got num_layers={num_layers} pp={par.pp} vp={par.vp} first={f} last={lst}){hint}",
    )


def uneven_stage_options(num_layers: int, p: int, vp: int = 1) -> tuple[tuple[int, int], ...]:
    """(first_stage_layers, last_stage_layers) pairs worth trying for p stages of vp chunks, 0 meaning a middle
    stage's share: the even split (0, 0) where p x vp divides the layers, then every split whose first and last
    stages are each 0 to UNEVEN_LIGHTER_LAYERS layers lighter than its middle stages (the first stage also holds the
    embedding and the most micro-batches in flight, the last the LM head and the loss), valid under Megatron's rule
    (`pipeline_layout_problem`); fewest layers moved first. Empty when p x vp cannot hold the layers at all.

    >>> uneven_stage_options(126, 16)  # Llama-3.1-405B: middle stages of 8
    ((0, 6), (7, 7), (6, 0))
    >>> uneven_stage_options(126, 16, vp=2)  # 7 / 7: each end's outer chunk a layer lighter (lighter_chunk_layout)
    ((0, 6), (7, 7), (6, 0))
    >>> uneven_stage_options(126, 16, vp=4)  # 6 is not a multiple of 4, 7 is 8 - 1
    ((7, 7),)
    >>> uneven_stage_options(32, 4)  # even, or first and last 2 lighter than middle stages of 9
    ((0, 0), (7, 7))
    """
    options: list[tuple[int, int]] = []
    pairs = sorted(((a, b) for a in range(UNEVEN_LIGHTER_LAYERS + 1) for b in range(UNEVEN_LIGHTER_LAYERS + 1)),
                   key=lambda ab: (ab[0] + ab[1], ab[0]))
    for a, b in pairs:
        if (num_layers + a + b) % p:
            continue
        middle = (num_layers + a + b) // p
        first, last = (middle - a if a else 0), (middle - b if b else 0)
        if (a and first < 1) or (b and last < 1) or (first, last) in options:
            continue
        if p == 1 and (first or last):
            continue
        if pipeline_layout_problem(num_layers, p, vp, first, last) is None:
            options.append((first, last))
    return tuple(options)
