"""FSDP1: torch.distributed.fsdp.FullyShardedDataParallel, the FlatParameter implementation that LitGPT's (Lightning
Fabric's FSDPStrategy) and accelerate's FSDP run; `TrainingSpec.fsdp` 1. Not a stack of its own: `apply` turns the
recipe of a stack that shards with it (hf, litgpt) into its FSDP1 form at zero_stage 3.

Read at PyTorch 2.1.0, the torch of LitGPT's published multi-GPU table (tutorials/resource-tables.md at b7329866:
"PyTorch 2.1.0+cu121"; LitGPT@8641822b requirements.txt `torch>=2.1.0`, lightning@71aed751), with
Lightning-AI/lightning@71aed751 src/lightning/fabric/strategies/fsdp.py for Fabric's settings. Each term is named
after the code that keeps the tensor alive (docs/memory.md, "FSDP1"):

* Sharded storage. flat_param.py FlatParamHandle.flatten_tensors / shard: each wrapped unit's parameters become one
  FlatParameter, of which a rank keeps 1 / d in the parameters' own dtype (bf16 under Fabric "bf16-true", fp32 under
  amp): the ZeRO-3 weights (memory.states.model_state_bytes), shared with the other ZeRO-3 stacks.
* Unsharded units (memory.copies._compute_copies, the same fields as FSDP2): FlatParamHandle.unshard all-gathers the
  padded unsharded flat parameter in MixedPrecision.param_dtype (the compute dtype). _runtime_utils.py
  _post_forward_reshard: `free_unsharded_flat_param = not state._is_root and ...`: the root unit (embedding, final
  norm, head: what no auto-wrapped unit holds) stays unsharded after forward (`root_unit_unsharded`). Backward:
  `backward_prefetch=BackwardPrefetch.BACKWARD_PRE` (FullyShardedDataParallel.__init__ default; Fabric sets none):
  _pre_backward_hook unshards the unit and `_prefetch_handle(state, handle, _PrefetchMode.BACKWARD)` the next one in
  backward order, 2 units at once (`zero3_gathered_layers`); limit_all_gathers=True (LitGPT) caps the all-gathers in
  flight at 2 (_limiter_utils.py _FreeEventQueue `_max_num_inflight_all_gathers = 2`), which the forward
  (forward_prefetch=False: no prefetch) also reaches. While the loss' backward runs, the root's pre-backward hook
  has prefetched only the last block (`zero3_layers_at_loss` 1).
* Gradients (`fsdp1_flat_parameters`; memory.states.fsdp1_trained_unit_elements and the terms that read it). With
  use_orig_params=True (Fabric: FSDPStrategy.__init__ `self._fsdp_kwargs.setdefault("use_orig_params", True)`;
  use_orig_params=False refuses a unit mixing frozen and trainable parameters, flat_param.py
  `_validate_tensors_to_flatten`: "Must flatten tensors with uniform requires_grad when use_orig_params=False"),
  FlatParamHandle._use_unsharded_views hands the modules autograd-tracked views of the unsharded FlatParameter in
  forward, so a unit holding any trainable parameter gets a gradient over all of it: FSDP's docstring, "mixing
  frozen and non-frozen ... the gradient memory usage will be higher than expected (namely, equivalent to not
  freezing those parameters)". Under LoRA every Block (LitGPT auto_wrap_policy={Block}) has adapters: its frozen
  base gets a gradient; the root unit only with an adapter on the head.
  - Accumulation: LitGPT `fabric.no_backward_sync(model, enabled=is_accumulating)` (finetune/lora.py train()) and
    accelerate's `accumulate` enter FullyShardedDataParallel.no_sync: _post_backward_hook returns before the
    reduce-scatter (`if not state._sync_gradients: ... return`), so each unit keeps its unsharded flat gradient in
    the compute dtype until the syncing micro-batch ("FSDP will accumulate the full model gradients (instead of
    gradient shards) until the eventual sync", FullyShardedDataParallel.no_sync).
  - A unit's backward: the views' gradients wait in the engine's input buffer of the split's backward
    (SplitWithSizesBackward, one node per FlatParameter, run once every view's gradient exists), which then
    concatenates them into the new flat gradient: two unit gradients at that moment (the `unit-gradient` phase).
  - The syncing micro-batch reduce-scatters it (_post_backward_hook -> _reduce_grad) into the sharded gradient,
    1 / d of the unit in the parameters' dtype (`_cast_grad_to_param_dtype`): what the optimizer step holds.
    optimizer.zero_grad() (set_to_none, torch 2.x's default) frees them before the next step's forward.

>>> from frenzy_core.frameworks import litgpt
>>> r = apply(litgpt.RECIPE); r.fsdp1_flat_parameters, r.root_unit_unsharded, r.zero3_layers_at_loss
(True, True, 1)
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.frameworks.base import Recipe

VERSION = 1  # TrainingSpec.fsdp
TORCH_VERSION = "2.1.0"  # the torch whose FSDP1 these terms were read from
# the FlatParameter units the backward has unsharded at once: the unit computing and the BACKWARD_PRE prefetch
UNITS_UNSHARDED_IN_BACKWARD = 2
# the units unsharded while the loss' backward runs, beside the root: the last block, prefetched by the root
UNITS_UNSHARDED_AT_LOSS = 1


def apply(recipe: Recipe) -> Recipe:
    """`recipe` (a stack's own) as it runs under FSDP1 at zero_stage 3: the module docstring's terms."""
    return replace(
        recipe,
        zero3_gathered_layers=UNITS_UNSHARDED_IN_BACKWARD,
        zero3_layers_at_loss=UNITS_UNSHARDED_AT_LOSS,
        root_unit_unsharded=True,
        grads_alive_at_peak=False,  # optimizer.zero_grad(set_to_none=True): none at a step's first micro-batch
        fsdp1_flat_parameters=True,
    )


def tune_recipe(recipe: Recipe, training) -> Recipe:
    """`Framework.tune_recipe` of a stack that can shard with FSDP1: its FSDP1 form where the run does."""
    from frenzy_core.frameworks import get  # the registry imports the stacks, which import this module

    return apply(recipe) if get(training.framework).fsdp_version(training) == VERSION else recipe
