"""Peak GPU memory of one training step, per GPU: the Frenzy paper's formula and a detailed, mechanism-level model.

Two methods:

* ``"paper"``: exactly the Frenzy paper (arXiv 2412.14479, Sec. IV-A): ``20W/t`` of model states plus
  ``s B h l (10/d + 24/(d t) + 5 a s/(d h t))`` bytes of activations, ``W = Vh + l(12h^2 + 13h)``, B the global batch.
  It ignores the pipeline degree p, the precision, the micro-batch, the optimizer and any overhead.
* ``"detailed"`` (default): what a PyTorch / Megatron-style step really keeps alive, term by term, on the most loaded
  pipeline stage: weights, gradients and optimizer states (sharded by ZeRO / the distributed optimizer over d), the
  activations autograd saves (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4 / Table 2, corrected for what the
  code actually stores: fp32 residual stream under AMP, flash attention, GQA, SwiGLU, RMSNorm, ...), the logits and
  loss buffers, autocast's cached bf16 weight copies and the optimizer's foreach temporary. The peak is the largest
  of the phases in `phases.PHASES` (optimizer step, start of backward, recomputation of a layer), never their sum
  (docs/memory.md, "The peak moves").

One module per concept, one function per physical term:

* `predict`: the public entry points (`predict_memory`, `predict_memory_band`, `predict_memory_totals`);
* `phases`: the table of phases (which terms are alive when) and the peak over them (`_detailed`);
* `step`: the split and setup every term reads;
* `states`: weights, gradients, optimizer states, ZeRO sharding and the optimizer step;
* `activations`: what one layer saves for backward; `pipeline`: what a stage holds at once under 1F1B;
* `loss`: the LM head's and the loss' buffers; `copies`: autocast copies, ZeRO-3 / FSDP gathers, fp8 caches;
* `adapters`: LoRA / DoRA and the quantised base; `pools`: overheads, side-stream pools, MoE buffers;
* `paper`: the paper's formula; `sizes`: element sizes and the int64 limits.

Both are calibrated against `frenzy_core.tracer` (real training steps under fake tensors, storages counted like the
CUDA caching allocator): see bench/memory_accuracy.py and docs/memory.md. Everything here is numpy arithmetic on
typed values; `predict_memory_totals` evaluates thousands of splits at once.

>>> from frenzy_core.models import ZOO
>>> from frenzy_core.training import TrainingSpec
>>> predict_memory(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8), method="paper",
...                overhead=NO_OVERHEAD).total_bytes
11079748608
"""

from __future__ import annotations

from frenzy_core.memory.activations import (
    MEGATRON_PERMUTED_PROB_BYTES,
    NORM_STATS,
    layer_activations,
    megatron_expert_inner_bytes,
    op_sac_layer_activations,
    unfused_norm_extra,
    weight_kept_normed_bytes,
)
from frenzy_core.memory.activations import _LayerActivations as _LayerActivations
from frenzy_core.memory.activations import _mla_attention as _mla_attention
from frenzy_core.memory.activations import _mlp_inner_bytes as _mlp_inner_bytes
from frenzy_core.memory.activations import _qk_norm_bytes as _qk_norm_bytes
from frenzy_core.memory.adapters import (
    INT8_ROW_SCALE_BYTES,
    INT8_WEIGHT_BYTES,
    NF4_BYTES,
    base_keeps_inputs,
    frozen_weight_bytes,
    lora_head_bytes_per_token,
    lora_head_parameters,
    lora_layer_terms,
    lora_parameters,
    lora_zero_pad_source_bytes,
    quantised_bytes_per_weight,
)
from frenzy_core.memory.adapters import _LoraLayerTerms as _LoraLayerTerms
from frenzy_core.memory.copies import _autocast_copy_bytes as _autocast_copy_bytes
from frenzy_core.memory.copies import _compute_copies as _compute_copies
from frenzy_core.memory.copies import zero3_gathered_elements
from frenzy_core.memory.loss import (
    HEAD_GRAD_COMPUTE_BYTES,
    LOGITS_GRAD_BYTES,
    LOGSOFTMAX_SAVED_BYTES,
    LOSS_BACKWARD_BYTES_PER_LOGIT,
    NLL_GRAD_BYTES,
    held_logits_bytes,
    loss_bytes_per_logit,
)
from frenzy_core.memory.paper import (
    PAPER_REPLICATED_COEFF,
    PAPER_SCORES_COEFF,
    PAPER_SPLIT_COEFF,
    PAPER_STATE_BYTES_PER_PARAM,
)
from frenzy_core.memory.paper import _paper as _paper
from frenzy_core.memory.phases import _COMPONENTS as _COMPONENTS
from frenzy_core.memory.phases import _PHASES as _PHASES
from frenzy_core.memory.phases import PHASES, STAGES_AT_ONCE_ELEMENTS, Phase, phase_components, stage_terms
from frenzy_core.memory.phases import _detailed as _detailed
from frenzy_core.memory.pipeline import _candidate_stages as _candidate_stages
from frenzy_core.memory.pipeline import in_flight_layers
from frenzy_core.memory.pools import (
    DEFAULT_OVERHEAD,
    NO_OVERHEAD,
    TE_COMPUTE_STREAMS,
    TE_CUBLAS_WORKSPACE_BYTES,
    OverheadSpec,
    side_stream_pool_bytes,
)
from frenzy_core.memory.pools import _gpu_reports as _gpu_reports
from frenzy_core.memory.pools import _idle_pools as _idle_pools
from frenzy_core.memory.predict import (
    METHODS,
    MemoryBreakdown,
    predict_memory,
    predict_memory_band,
    predict_memory_totals,
)
from frenzy_core.memory.predict import _check_method as _check_method
from frenzy_core.memory.predict import _evaluate as _evaluate
from frenzy_core.memory.predict import _known_frameworks as _known_frameworks
from frenzy_core.memory.predict import _stage_allocated as _stage_allocated
from frenzy_core.memory.sizes import (
    BF16_BYTES,
    FP8_BYTES,
    FP32_BYTES,
    GIB,
    INDEX_BYTES,
    MASK_BYTES,
    MAX_BYTES,
    MAX_BYTES_PER_ELEMENT,
    MIB,
    check_sizes,
)
from frenzy_core.memory.states import (
    BNB_PAGED_MIN_ELEMENTS,
    effective_zero_stage,
    largest_trained_parameter,
    model_state_bytes,
    paged_state_fraction,
    zero_model_states_at_step,
    zero_step_terms,
)
from frenzy_core.memory.states import _layer_weights as _layer_weights
from frenzy_core.memory.states import _root_embedding as _root_embedding
from frenzy_core.memory.states import _stage_layers as _stage_layers
from frenzy_core.memory.states import _stage_parameters as _stage_parameters
from frenzy_core.memory.states import _trained_matrices as _trained_matrices

# the recipes the detailed method reads, as memory.py re-exported them (tests call memory.run_recipe)
from frenzy_core.recipes import block_recipe as block_recipe
from frenzy_core.recipes import get_recipe as get_recipe
from frenzy_core.recipes import run_recipe as run_recipe

__all__ = [
    "BF16_BYTES", "BNB_PAGED_MIN_ELEMENTS", "DEFAULT_OVERHEAD", "FP8_BYTES", "FP32_BYTES", "GIB",
    "HEAD_GRAD_COMPUTE_BYTES", "INDEX_BYTES", "INT8_ROW_SCALE_BYTES", "INT8_WEIGHT_BYTES", "LOGITS_GRAD_BYTES",
    "LOGSOFTMAX_SAVED_BYTES", "LOSS_BACKWARD_BYTES_PER_LOGIT", "MASK_BYTES", "MAX_BYTES", "MAX_BYTES_PER_ELEMENT",
    "MEGATRON_PERMUTED_PROB_BYTES", "METHODS", "MIB", "NF4_BYTES", "NLL_GRAD_BYTES", "NORM_STATS", "NO_OVERHEAD",
    "PAPER_REPLICATED_COEFF", "PAPER_SCORES_COEFF", "PAPER_SPLIT_COEFF", "PAPER_STATE_BYTES_PER_PARAM", "PHASES",
    "STAGES_AT_ONCE_ELEMENTS", "TE_COMPUTE_STREAMS", "TE_CUBLAS_WORKSPACE_BYTES", "MemoryBreakdown", "OverheadSpec",
    "Phase", "base_keeps_inputs", "check_sizes", "effective_zero_stage", "frozen_weight_bytes", "in_flight_layers",
    "largest_trained_parameter", "layer_activations", "lora_head_bytes_per_token", "lora_head_parameters",
    "lora_layer_terms", "lora_parameters", "lora_zero_pad_source_bytes", "loss_bytes_per_logit",
    "megatron_expert_inner_bytes", "model_state_bytes", "held_logits_bytes",
    "op_sac_layer_activations", "paged_state_fraction", "phase_components", "predict_memory", "predict_memory_band",
    "predict_memory_totals", "quantised_bytes_per_weight", "side_stream_pool_bytes", "stage_terms",
    "unfused_norm_extra", "weight_kept_normed_bytes", "zero3_gathered_elements", "zero_model_states_at_step",
    "zero_step_terms",
]
