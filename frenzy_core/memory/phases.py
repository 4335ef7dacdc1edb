"""The peak of one training step as the largest of a few moments (phases), each a list of the terms alive in it.

The peak moves (docs/memory.md, "The peak moves"): at the optimizer step every gradient, every state and the
optimizer's temporary are alive but no activation is; at the start of backward the activations of every
micro-batch in flight, the loss buffers and the weight copies are, and gradients only where they persist; while
a checkpointed layer is recomputed, its full set of activations is alive once more. `PHASES` names, per phase and
component, the terms alive in it (their bytes come from `_stage_terms`, one function per term in the modules named
there); `_detailed` takes the largest phase on the most loaded pipeline stage, never their sum.

>>> [phase.name for phase in PHASES]
['optimizer-step', 'backward-end', 'backward-start', 'backward-recompute', 'unit-gradient']
>>> PHASES[0].activations  # the step runs after the last backward: no activation is alive
()
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from frenzy_core.memory.copies import fp8_weight_cache_bytes, stage_weight_copies
from frenzy_core.memory.loss import (
    head_activation_bytes,
    head_gradient_bytes,
    head_input_gradient_bytes,
    loss_buffer_bytes,
)
from frenzy_core.memory.pipeline import (
    _candidate_stages,
    layer_footprints,
    micro_batch_input_bytes,
    stage_activation_terms,
    stage_table_bytes,
)
from frenzy_core.memory.pools import _idle_pools, moe_run_buffer_bytes, side_stream_pool_bytes
from frenzy_core.memory.states import (
    _layer_weights,
    _stage_layers,
    _stage_parameters,
    backward_gradients,
    gradient_bucket_bytes,
    optimizer_step_terms,
    stage_model_states,
    tied_embedding_gradient_bytes,
)
from frenzy_core.memory.step import Step, step_context
from frenzy_core.models import ModelSpec
from frenzy_core.training import Parallelism, TrainingSpec


@dataclass(frozen=True)
class Phase:
    """One moment of the step: per component of `MemoryBreakdown`, the names of the terms alive (`_stage_terms`),
    summed left to right."""

    name: str  # MemoryBreakdown.peak_phase
    weights: tuple[str, ...]
    gradients: tuple[str, ...]
    optimizer: tuple[str, ...]
    activations: tuple[str, ...]
    logits: tuple[str, ...]
    transient: tuple[str, ...]
    stream_pools: tuple[str, ...]  # reserved by other streams' pools, idle at this moment (not allocated)
    only_when_recomputing: bool = False  # a phase of steps that recompute layers in backward (else: all zero)
    # a term without which this moment does not exist: where it is 0 (a stack that never forms it), the phase is all
    # zero ("" for none)
    requires: str = ""


# The activations of the layers in flight, and what a stage keeps beside them
_ACTIVATIONS = ("layer_activations", "micro_batch_inputs", "stage_tables", "head_activations")
_COPIES = ("weight_copies_at_loss", "fp8_weight_caches")

PHASES = (
    # Optimizer step (docs/memory.md "The peak moves"): all gradients, all states, the foreach temporary; no
    # activation is alive.
    Phase("optimizer-step",
          weights=("weights",),
          gradients=("gradients_at_step",),
          optimizer=("optimizer_states",),
          activations=(),
          logits=(),
          transient=("optimizer_step_temporary", "moe_run_buffers"),
          stream_pools=("idle_pools_at_step",)),
    # End of backward (states.tied_embedding_gradient_bytes): the lookup's gradient of a tied embedding beside the
    # head's, waiting to be summed, and every other gradient; the activations and the loss are gone.
    Phase("backward-end",
          weights=("weights",),
          gradients=("gradients_at_step",),
          optimizer=("optimizer_states",),
          activations=(),
          logits=(),
          transient=("tied_embedding_gradient", "moe_run_buffers"),
          stream_pools=("idle_pools_at_step",),
          requires="tied_embedding_gradient"),
    # Start of backward, step >= 2: Adam states exist, gradients where they persist; every micro-batch in flight
    # holds its activations; the loss' buffers (or the head's gradient after them) and the weight copies.
    Phase("backward-start",
          weights=("weights",),
          gradients=("gradients_in_backward",),
          optimizer=("optimizer_states",),
          activations=_ACTIVATIONS,
          logits=("loss_or_head_gradient",),
          transient=(*_COPIES, "gradient_bucket", "moe_run_buffers"),
          stream_pools=("idle_pools_in_backward",)),
    # Recomputing a checkpointed layer in backward: its full activations once, the output gradient, its copies.
    Phase("backward-recompute",
          weights=("weights",),
          gradients=("gradients_in_backward",),
          optimizer=("optimizer_states",),
          activations=(*_ACTIVATIONS, "recomputed_layer"),
          logits=("head_input_gradient",),
          transient=(*_COPIES, "recomputed_layer_copies", "gradient_bucket", "moe_run_buffers"),
          stream_pools=("idle_pools_in_backward",),
          only_when_recomputing=True),
    # FSDP1, at the end of one FlatParameter unit's backward (frameworks/fsdp1.py): its views' gradients and their
    # concatenation into the flat gradient (memory.states.fsdp1_gradient_terms), beside the gradients accumulated
    # so far; the unit and the prefetched one unsharded; the gradient flowing into the unit; the loss is done.
    Phase("unit-gradient",
          weights=("weights",),
          gradients=("gradients_in_backward",),
          optimizer=("optimizer_states",),
          activations=_ACTIVATIONS,
          logits=("head_input_gradient",),
          transient=(*_COPIES, "recomputed_layer_copies", "fsdp1_unit_gradient", "gradient_bucket",
                     "moe_run_buffers"),
          stream_pools=("idle_pools_in_backward",),
          requires="fsdp1_unit_gradient"),
)
_PHASES = tuple(phase.name for phase in PHASES)
_COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "transient")
PHASE_COMPONENTS = (*_COMPONENTS, "stream_pools")  # the phase's parts: the breakdown's, and the idle pools
# `_detailed` evaluates all bounding stages in one pass while (stages x splits) holds at most this many elements, and
# stage by stage above (bench/plans.py's grids: the one pass wins at 4,500 elements, loses at 12,500)
STAGES_AT_ONCE_ELEMENTS = 8192


def phase_components(phase: Phase, terms: dict, recomputing: bool) -> dict[str, object]:
    """Component -> bytes of `phase`: the sum of its terms, left to right (0.0 for a component without one, and
    for every component of a phase this step does not have)."""
    if phase.only_when_recomputing and not recomputing:
        return dict.fromkeys(PHASE_COMPONENTS, 0.0)  # no layer is recomputed: never the peak
    parts = {}
    for component in PHASE_COMPONENTS:
        names = getattr(phase, component)
        total = terms[names[0]] if names else 0.0
        for name in names[1:]:
            total = total + terms[name]
        if phase.requires:  # where the required term is 0 the moment never happens: the phase is all zero
            total = np.where(np.asarray(terms[phase.requires]) > 0, total, 0.0)
        parts[component] = total
    return parts


def _detailed(model: ModelSpec, training: TrainingSpec, dp, tp, pp, b, stages=None, cp=1, vp=1, ep=1, etp=0, first=0,
              last=0):
    """Components of the peak and its phase index, on the most loaded stage (or on each of `stages`); `first` and
    `last` are the uneven first / last stages' layers (0: a middle stage's share)."""
    step = step_context(model, training, dp, tp, pp, b, cp, vp, ep, etp, first, last)
    shared = _shared_terms(step, model, training)
    if stages is None:  # these stages bound every stage (a middle one has fewer of both)
        stages = _candidate_stages(model, step.pipeline)
    shape = np.broadcast_shapes(np.shape(step.d), *(np.shape(st) for st in stages))
    stage_all = np.stack([np.broadcast_to(np.asarray(st, dtype=np.float64), shape) for st in stages])
    # Every bounding stage at once (a leading axis of stages in front of the splits' shape: one array operation per
    # term for all of them) while that stays small; one stage at a time on larger grids, where the operations
    # between (stages x splits) and (splits) arrays cost more than the calls they save. Element by element the
    # arithmetic is the same either way.
    at_once = stage_all.size <= STAGES_AT_ONCE_ELEMENTS
    by_group = []
    for stage in [stage_all] if at_once else list(stage_all):
        terms = _stage_terms(step, shared, model, training, stage)
        by_group.append(tuple(phase_components(phase, terms, step.full_recompute) for phase in PHASES))
    return _peak(by_group, len(stages), stage_all.shape, shape, at_once)


def _shared_terms(step: Step, model: ModelSpec, training: TrainingSpec) -> dict[str, object]:
    """The terms that are the same on every stage (per micro-batch, or per layer), computed once."""
    return {
        "footprints": layer_footprints(step, model, training),
        "micro_batch_inputs": micro_batch_input_bytes(step, model, training),
        "stage_tables": stage_table_bytes(step, model, training),
        "head_activations": head_activation_bytes(step, model, training),
        "loss_buffers": loss_buffer_bytes(step, model, training),
        "head_gradient": head_gradient_bytes(step, model, training),
        "moe_run_buffers": moe_run_buffer_bytes(step, model, training),
        # each layer's parameters per GPU (with ep = 1, and split over ep x etp)
        "layer_weights": _layer_weights(model, step.t),
        "layer_weights_ep": _layer_weights(model, step.t, step.e, step.et),
    }


def _stage_terms(step: Step, shared: dict, model: ModelSpec, training: TrainingSpec, stage) -> dict[str, object]:
    """Every term `PHASES` names, in bytes on pipeline stage `stage` (arrays over the stages x splits)."""
    last = stage == step.p - 1
    stage_count = step.pipeline.counts(stage)
    # the stage's mix of dense and MoE layers (DeepSeek: first_k_dense dense layers on the first stages)
    layers = _stage_layers(model, step.p, stage, n=stage_count, pipeline=step.pipeline)
    parameters = _stage_parameters(model, step.t, step.p, stage, step.e, step.et, step.layout, layers,
                                   shared["layer_weights"])
    castable = parameters[2]
    acts = stage_activation_terms(step, model, training, stage, stage_count, layers, shared["footprints"],
                                  shared["micro_batch_inputs"])
    states = stage_model_states(step, model, training, last, layers, parameters)
    # FSDP2's reduce-scatter and all-gather streams keep their own cached blocks (side_stream_pool_bytes)
    reduce_scatter_pool, all_gather_pool = side_stream_pool_bytes(model, step.recipe, step.ps, states.gradients,
                                                                  step.t, step.p, stage, step.shard, step.e,
                                                                  step.zero)
    gradients_at_step, step_temporary = optimizer_step_terms(step, training, states)
    gradients_in_backward = backward_gradients(step, states.gradients, states.accumulated_gradients)
    copies_at_loss, recomputed_copies = stage_weight_copies(step, model, training, stage, last, castable, layers,
                                                            shared["layer_weights_ep"])
    return {
        # states.py: model states
        "weights": states.weights,
        "optimizer_states": states.optimizer,
        "gradients_at_step": gradients_at_step,
        "gradients_in_backward": gradients_in_backward,
        "optimizer_step_temporary": step_temporary,
        "gradient_bucket": gradient_bucket_bytes(step),
        "tied_embedding_gradient": tied_embedding_gradient_bytes(step, model, training, last),
        "fsdp1_unit_gradient": states.unit_gradient,
        # pipeline.py: activations of the layers in flight, the micro-batches' inputs, per-stage tables
        "layer_activations": acts["layer_activations"],
        "micro_batch_inputs": acts["micro_batch_inputs"],
        "stage_tables": shared["stage_tables"],
        "recomputed_layer": acts["recomputed_layer"],
        # loss.py: the last stage's head and loss
        "head_activations": np.where(last, shared["head_activations"], 0),
        "loss_or_head_gradient": np.where(last, np.maximum(shared["loss_buffers"], shared["head_gradient"]), 0.0),
        "head_input_gradient": np.where(last, head_input_gradient_bytes(step, model), 0.0),
        # copies.py: weight copies
        "weight_copies_at_loss": copies_at_loss,
        "fp8_weight_caches": fp8_weight_cache_bytes(step, model, training, last, castable),
        "recomputed_layer_copies": recomputed_copies,
        # pools.py: buffers kept for the run, side-stream pools
        "moe_run_buffers": np.where(layers[1] > 0, shared["moe_run_buffers"], 0.0),
        "idle_pools_at_step": _idle_pools(reduce_scatter_pool, all_gather_pool, gradients_at_step),
        "idle_pools_in_backward": _idle_pools(reduce_scatter_pool, all_gather_pool, gradients_in_backward),
    }


def stage_terms(model: ModelSpec, training: TrainingSpec, par: Parallelism | None = None,
                stage: int | None = None) -> dict[str, float]:
    """Every term of `PHASES` in bytes on pipeline stage `stage` (default: the last) of the split `par`.

    >>> from frenzy_core.models import ZOO
    >>> terms = stage_terms(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8, precision="amp"))
    >>> terms["weights"], terms["optimizer_states"]  # fp32 weights; AdamW's two fp32 moments
    (497759232.0, 995518464.0)
    """
    par = par or Parallelism()
    step = step_context(model, training, par.dp, par.tp, par.pp, training.micro_batch, par.cp, par.vp, par.ep,
                        par.etp, par.first_stage_layers, par.last_stage_layers)
    at = np.float64(par.pp - 1 if stage is None else stage)
    terms = _stage_terms(step, _shared_terms(step, model, training), model, training, at)
    return {name: float(np.asarray(value)) for name, value in terms.items()}


def _peak(by_group, n_stages: int, stages_shape, shape, at_once: bool):
    """The components of the largest candidate (stage x phase) element by element, and its phase index; `by_group`
    holds each evaluation's phases in PHASES order (one evaluation of every stage at once, or one per stage)."""
    n_phases = len(PHASES)
    # the candidates stage by stage, each stage's phases in PHASES order: (phase, stage row of the one pass or None)
    if at_once:
        candidates = [(phase, i) for i in range(n_stages) for phase in by_group[0]]
        sums = [np.broadcast_to(sum(phase.values()), stages_shape) for phase in by_group[0]]
        totals = [sums[j][i] for i in range(n_stages) for j in range(n_phases)]
    else:
        candidates = [(phase, None) for group in by_group for phase in group]
        totals = [np.broadcast_to(sum(phase.values()), shape) for phase in (c for c, _ in candidates)]
    # each candidate's sum broadcasts by itself (the same additions, in the same order, as on broadcast copies);
    # candidates along the last axis: a contiguous argmax
    best = np.argmax(np.stack(totals, axis=-1), axis=-1)

    def component(i: int, k: str) -> np.ndarray:
        """Component k of candidate i, over the splits' shape."""
        phase, row = candidates[i]
        value = np.asarray(phase[k], dtype=np.float64)
        return np.broadcast_to(value, shape) if row is None else np.broadcast_to(value, stages_shape)[row]

    # the parts of the candidate that is the peak, element by element, among those that are the peak somewhere (a
    # few of the stages x phases)
    chosen = np.flatnonzero(np.bincount(best.ravel(), minlength=len(candidates))) if best.size else [0]
    masks = [best == i for i in chosen[:-1]]
    parts = {}
    for k in PHASE_COMPONENTS:
        part = component(chosen[-1], k)
        for i, mask in zip(chosen[:-1], masks, strict=True):
            part = np.where(mask, component(i, k), part)
        parts[k] = part
    return parts, best % n_phases
