"""The last pipeline stage's LM head and loss: the activations the final norm, the head and the loss keep, the loss
buffers alive in its backward, and the head's gradients (docs/memory.md, "Logits and loss").

>>> LOSS_BACKWARD_BYTES_PER_LOGIT  # fp32 log-softmax saved + nll_loss's gradient + the one it produces
12
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from frenzy_core.memory.activations import NORM_STATS, unfused_norm_extra
from frenzy_core.memory.adapters import lora_head_bytes_per_token
from frenzy_core.memory.sizes import BF16_BYTES, FP32_BYTES, INDEX_BYTES
from frenzy_core.models import ModelSpec
from frenzy_core.recipes import TORCH_CROSS_ENTROPY_BYTES, Recipe
from frenzy_core.training import TrainingSpec

if TYPE_CHECKING:
    from frenzy_core.memory.step import Step

# Loss buffers per logit element at the start of backward (traced; docs/memory.md "Logits and loss"):
# cross_entropy runs in fp32 and saves its fp32 log-softmax; LogSoftmaxBackward then holds that saved output, the
# incoming fp32 gradient from nll_loss and the fp32 gradient it produces, all at once.
LOGSOFTMAX_SAVED_BYTES = FP32_BYTES
NLL_GRAD_BYTES = FP32_BYTES
LOGITS_GRAD_BYTES = FP32_BYTES
LOSS_BACKWARD_BYTES_PER_LOGIT = LOGSOFTMAX_SAVED_BYTES + NLL_GRAD_BYTES + LOGITS_GRAD_BYTES  # = 12
# Right after, the LM head's weight gradient is formed in the compute dtype (bf16) and, under AMP, cast back to the
# fp32 parameter's dtype by autocast's ToCopyBackward: both exist together for a moment.
HEAD_GRAD_COMPUTE_BYTES = BF16_BYTES


def loss_bytes_per_logit(recipe: Recipe, chunks: int = 1, loss_dtype: str = "fp32") -> float:
    """Loss bytes per logit element alive in its backward; with k chunks (torchtune CEWithChunkedOutputLoss) every
    chunk's fp32 log-softmax stays saved (4 B) but only one chunk at a time holds the two fp32 gradients.

    loss_dtype bf16: F.cross_entropy on bf16 logits keeps a bf16 log-softmax, and its gradients are bf16 (LitGPT
    utils.py chunked_cross_entropy on the bf16-true model's logit chunks; torchtune's compiled
    CEWithChunkedOutputLoss, whose partitioner saves the bf16 logits of each chunk instead of the fp32 log-softmax).

    >>> from frenzy_core.recipes import get_recipe
    >>> loss_bytes_per_logit(get_recipe("pytorch")), loss_bytes_per_logit(get_recipe("pytorch"), 8)
    (12.0, 5.0)
    >>> loss_bytes_per_logit(get_recipe("pytorch"), 1, "bf16"), loss_bytes_per_logit(get_recipe("pytorch"), 8, "bf16")
    (6.0, 2.5)
    """
    if recipe.loss_bytes_per_logit != TORCH_CROSS_ENTROPY_BYTES:
        return float(recipe.loss_bytes_per_logit)
    element = BF16_BYTES if loss_dtype == "bf16" else FP32_BYTES
    per_logit = recipe.loss_bytes_per_logit * element / FP32_BYTES  # saved log-softmax + two gradients
    if chunks == 1:
        return float(per_logit)
    saved = element  # each chunk's log-softmax output
    return saved + (per_logit - saved) / chunks


def head_activation_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """What the final norm, the LM head and the loss keep for backward, per micro-batch (last stage)."""
    h, tokens, sp_divisor = model.hidden_size, step.tokens, step.sp_divisor
    norm_extra = unfused_norm_extra(model, step.recipe, h, step.resid)
    final_norm_input = tokens * (step.resid * h + NORM_STATS[model.norm_kind] * FP32_BYTES + norm_extra) / sp_divisor
    head_input = tokens * step.act * h / sp_divisor  # the LM head's linear keeps its input
    target_ids = tokens * INDEX_BYTES  # the loss keeps a contiguous copy of the shifted targets
    head_activations = final_norm_input + head_input + target_ids
    return head_activations + tokens * lora_head_bytes_per_token(model, training, step.act) / sp_divisor


def loss_buffer_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """Loss buffers at the start of backward (last stage): `loss_bytes_per_logit` per logit of the micro-batch."""
    V, t = model.vocab_size, step.t
    loss_buffers = step.tokens * V / t * loss_bytes_per_logit(step.recipe, training.loss_chunks, training.loss_dtype)
    if model.final_logit_softcapping is not None:
        # Gemma2ForCausalLM.forward: logits / cap, tanh, * cap before the loss: tanh's saved output (compute dtype)
        # is alive through the loss' backward
        loss_buffers = loss_buffers + step.tokens * V / t * step.act
    return loss_buffers


def head_gradient_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """The LM head's gradients right after the loss' backward (last stage): its weight gradient (none for a frozen
    head) and the gradient w.r.t. its input."""
    V, h, t, ps = model.vocab_size, model.hidden_size, step.t, step.ps
    head_grad_params = V * h / t
    head_grad = head_grad_params * HEAD_GRAD_COMPUTE_BYTES  # bf16 weight gradient from the head's matmul ...
    if ps.param_bytes != HEAD_GRAD_COMPUTE_BYTES:
        head_grad = head_grad + head_grad_params * ps.param_bytes  # ... and its cast to the parameter dtype (AMP)
    if training.lora_rank:  # a frozen LM head forms no weight gradient
        head_grad = 0.0
    return head_grad + step.tokens * step.act * h / t  # the gradient w.r.t. the head's input


def head_input_gradient_bytes(step: Step, model: ModelSpec):
    """The gradient the LM head passes to the last layer (last stage), alive while that layer is recomputed."""
    return step.tokens * step.act * model.hidden_size / step.sp_divisor
