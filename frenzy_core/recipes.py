"""Framework recipes: where each training stack keeps a tensor alive that the plain-PyTorch model counts differently.

Each recipe lives with its stack in frenzy_core.frameworks (pytorch.py, hf.py, megatron.py, fsdp2.py, deepspeed.py);
this module is the by-name view frenzy_core.memory reads, plus the helpers every recipe shares.
A `Recipe` is a small set of named terms. `pytorch` is the mechanism-level model of frenzy_core.memory, exact against
frenzy_core.tracer (a plain PyTorch decoder under CUDA autocast). The other recipes change only the terms their
framework's code changes; everything they share (weights, Adam states, saved linear inputs, flash attention, the
1F1B schedule) lives once in frenzy_core.memory. Each field cites the file and function it comes from, read at the
commits listed in docs/memory.md ("Framework recipes"). No term is fitted to a measurement.

>>> RECIPES["megatron"].loss_bytes_per_logit, RECIPES["pytorch"].loss_bytes_per_logit
(6, 12)
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.errors import SpecError
from frenzy_core.frameworks import FRAMEWORKS as _STACKS
from frenzy_core.frameworks import KNOWN
from frenzy_core.frameworks.base import BF16_BYTES, FP32_BYTES, MASK_BYTES, Recipe
from frenzy_core.frameworks.deepspeed import (
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    DEEPSPEED_STAGE3_MAX_LIVE_PARAMETERS,
    DEEPSPEED_STAGE3_MAX_REUSE_DISTANCE,
    DEEPSPEED_SUB_GROUP_ELEMENTS,
    DEEPSPEED_ZERO3_HELD_OUT_ERROR,
)
from frenzy_core.frameworks.megatron import MEGATRON_VOCAB_PARALLEL_CE_BYTES
from frenzy_core.frameworks.pytorch import RECIPE as PYTORCH
from frenzy_core.frameworks.pytorch import TORCH_CROSS_ENTROPY_BYTES

# The recipe of every known stack, by name: the memory package looks them up here at call time (tests swap one in)
RECIPES: dict[str, Recipe] = {name: _STACKS[name].recipe for name in KNOWN}

FRAMEWORKS = KNOWN

__all__ = [
    "BF16_BYTES", "DEEPSPEED_REDUCE_BUCKET_ELEMENTS", "DEEPSPEED_STAGE3_MAX_LIVE_PARAMETERS",
    "DEEPSPEED_STAGE3_MAX_REUSE_DISTANCE", "DEEPSPEED_SUB_GROUP_ELEMENTS", "DEEPSPEED_ZERO3_HELD_OUT_ERROR",
    "FP32_BYTES", "FRAMEWORKS", "MASK_BYTES", "MEGATRON_VOCAB_PARALLEL_CE_BYTES", "PYTORCH", "RECIPES", "Recipe",
    "TORCH_CROSS_ENTROPY_BYTES", "block_recipe", "get_recipe", "run_recipe",
]


def block_recipe(recipe: Recipe, training) -> Recipe:
    """The recipe inside the transformer blocks of a `TrainingSpec`: with `compile`, torchtitan's apply_compile
    (parallelize_llama.py at 9dec370) wraps each TransformerBlock in torch.compile(fullgraph=True), and Inductor
    fuses its RMSNorms (no fp32 copy saved) and its SwiGLU: AOTAutograd's min-cut partitioner saves fc1's gate and
    up outputs and the product the down projection keeps, and recomputes SiLU in backward (3 x inner, as Megatron's
    fused SwiGLU; measured with saved_tensors_hooks on torch 2.13's Inductor: a compiled RMSNorm keeps only its fp32
    rstd beside its input, a compiled w2(silu(w1 x) * w3 x) 3 x inner bf16, eager 4 x; tests/test_recipes.py). The
    final norm, the head and the loss stay eager.

    >>> compiled = block_recipe(RECIPES["fsdp2"], type("T", (), {"compile": True})())
    >>> compiled.unfused_rmsnorm, compiled.fused_swiglu
    (False, True)
    """
    if getattr(training, "compile", False):
        return replace(recipe, unfused_rmsnorm=False, fused_swiglu=True)
    return recipe


def run_recipe(training) -> Recipe:
    """The recipe of `training.framework` with the run's own settings (its stack's `Framework.tune_recipe`: DeepSpeed's
    zero_optimization values `TrainingSpec.reduce_bucket_size`, `stage3_max_live_parameters`,
    `stage3_max_reuse_distance`; 0 keeps DeepSpeed's defaults).

    >>> run_recipe(type("T", (), {"framework": "deepspeed", "reduce_bucket_size": 50_000_000,
    ...                           "stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0})()).reduce_bucket_elements
    50000000
    """
    recipe = get_recipe(training.framework)
    return _STACKS[training.framework].tune_recipe(recipe, training)


def get_recipe(framework: str) -> Recipe:
    """The recipe for a `TrainingSpec.framework` name; a SpecError naming `framework` otherwise."""
    try:
        return RECIPES[framework]
    except KeyError:
        raise SpecError("framework", f"unknown framework {framework!r}; choose one of: {', '.join(FRAMEWORKS)}") from None
