"""The last pipeline stage's LM head and loss: the activations the final norm, the head and the loss keep, the loss
buffers alive in its backward, and the head's gradients (docs/memory.md, "Logits and loss").

>>> LOSS_BACKWARD_BYTES_PER_LOGIT  # fp32 log-softmax saved + nll_loss's gradient + the one it produces
12
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from frenzy_core.memory.activations import (
    NORM_STATS,
    frozen_norm_keeps_no_output,
    unfused_norm_extra,
    weight_kept_normed_bytes,
)
from frenzy_core.memory.adapters import base_keeps_inputs, lora_head_bytes_per_token
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


def loss_bytes_per_logit(recipe: Recipe, chunks: int = 1, loss_dtype: str = "fp32",
                         logit_bytes: int = BF16_BYTES, compiled: bool = False) -> float:
    """Loss bytes per logit element alive in its backward; with k chunks (torchtune CEWithChunkedOutputLoss) every
    chunk's fp32 log-softmax stays saved (4 B) but only one chunk at a time holds the two fp32 gradients. Where the
    stack holds the head's logit chunks (`logit_bytes` each) until the loss returns, the end of the loss' forward
    can be larger (`held_logit_chunks_bytes_per_logit`); the larger of the two moments is returned.

    loss_dtype bf16: F.cross_entropy on bf16 logits keeps a bf16 log-softmax, and its gradients are bf16 (LitGPT
    utils.py chunked_cross_entropy on the bf16-true model's logit chunks; torchtune's compiled
    CEWithChunkedOutputLoss, whose partitioner saves the bf16 logits of each chunk instead of the fp32 log-softmax).

    >>> from frenzy_core.recipes import get_recipe
    >>> loss_bytes_per_logit(get_recipe("pytorch")), loss_bytes_per_logit(get_recipe("pytorch"), 8)
    (12.0, 5.0)
    >>> loss_bytes_per_logit(get_recipe("pytorch"), 1, "bf16"), loss_bytes_per_logit(get_recipe("pytorch"), 8, "bf16")
    (6.0, 2.5)

    `compiled` (`compiled_cross_entropy`): Inductor's cross-entropy saves its input and a per-row fp32 max and
    log-sum, and its backward is one kernel writing only the input's gradient (nothing [tokens, V] in fp32 beside
    them; tests/test_memory_phases.py reads the compiled graphs). torchtune's chunked loss compiles
    `F.cross_entropy(logits.float(), ...)` per chunk, so the saved input is the bf16 chunk itself: every chunk
    (`logit_bytes`) and one chunk's gradient; a compiled plain loss gets the fp32 logits of
    `self.output(h).float()`: the saved fp32 input and its fp32 gradient.

    >>> tt = get_recipe("torchtune")
    >>> loss_bytes_per_logit(tt, 8, compiled=True), loss_bytes_per_logit(tt, 1, compiled=True)  # 2 + 2 / 8, 4 + 4
    (2.25, 8.0)
    """
    if compiled:
        if chunks == 1:
            return float(2 * FP32_BYTES)
        return logit_bytes + logit_bytes / chunks
    if recipe.loss_bytes_per_logit != TORCH_CROSS_ENTROPY_BYTES:
        return float(recipe.loss_bytes_per_logit)
    element = BF16_BYTES if loss_dtype == "bf16" else FP32_BYTES
    per_logit = recipe.loss_bytes_per_logit * element / FP32_BYTES  # saved log-softmax + two gradients
    if chunks == 1:
        return float(per_logit)
    saved = element  # each chunk's log-softmax output
    in_backward = saved + (per_logit - saved) / chunks
    if recipe.chunked_output_head and loss_dtype == "fp32":
        return max(in_backward, held_logit_chunks_bytes_per_logit(chunks, logit_bytes))
    return in_backward


def compiled_cross_entropy(recipe: Recipe, training: TrainingSpec) -> bool:
    """Whether the stack runs its cross-entropy compiled (`Recipe.compiles_loss` under compile): torchtune's chunked
    loss in both single-device recipes, its plain loss only in the LoRA one (frameworks/torchtune.py cites both)."""
    if not (recipe.compiles_loss and training.compile):
        return False
    return training.loss_chunks >= 2 or bool(training.lora_rank)


def held_logit_chunks_bytes_per_logit(chunks: int, logit_bytes: int = BF16_BYTES) -> float:
    """Bytes per logit element at the end of a chunked loss' forward when the logit chunks are still held.

    torchtune (pytorch/torchtune@1814feb1): modules/transformer.py TransformerDecoder.chunked_output returns
    `[self.output(chunk) for chunk in last_hidden_state.chunk(num_output_chunks, dim=1)]` (compute-dtype logits),
    recipes/full_finetune_single_device.py _loss_step keeps that list in `logits` until `del logits` after the loss;
    modules/loss/ce_chunked_output_loss.py CEWithChunkedOutputLoss.forward runs compute_cross_entropy chunk by
    chunk, `F.cross_entropy(logits.float(), ...)`: each chunk's fp32 log-softmax is saved for backward, and the fp32
    upcast of the chunk in progress lives while its log-softmax runs (`.float()` of fp32 logits is the tensor
    itself). So when the last chunk's log-softmax runs: every saved log-softmax (4 B), every held chunk
    (`logit_bytes`) and one chunk's upcast (4 B / k).

    >>> held_logit_chunks_bytes_per_logit(8)  # 4 + 2 + 4 / 8
    6.5
    """
    upcast = FP32_BYTES if logit_bytes != FP32_BYTES else 0
    return FP32_BYTES + logit_bytes + upcast / chunks


def head_activation_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """What the final norm, the LM head and the loss keep for backward, per micro-batch (last stage)."""
    h, tokens, sp_divisor = model.hidden_size, step.tokens, step.sp_divisor
    norm_extra = unfused_norm_extra(model, step.recipe, h, step.resid)
    norm_extra = norm_extra + weight_kept_normed_bytes(model, step.recipe, training, h, step.resid)
    normed = 0 if frozen_norm_keeps_no_output(model, step.recipe, training) else step.resid * h
    final_norm_input = tokens * (normed + NORM_STATS[model.norm_kind] * FP32_BYTES + norm_extra) / sp_divisor
    # the LM head's linear keeps its input for its weight's gradient: not when LoRA freezes it (an adapter on it
    # keeps it, and so does a quantised head whose kernel saves its input: quant_head + adapters.base_keeps_inputs)
    quantised_keeps = training.quant_head and base_keeps_inputs(training)
    head_frozen = training.lora_rank and "head" not in training.lora_target_set and not quantised_keeps
    head_input = 0 if head_frozen else tokens * step.act * h / sp_divisor
    target_ids = tokens * INDEX_BYTES  # the loss keeps a contiguous copy of the shifted targets
    head_activations = final_norm_input + head_input + target_ids + held_logits_bytes(step, model)
    return head_activations + tokens * lora_head_bytes_per_token(model, training, step.act) / sp_divisor


def held_logits_bytes(step: Step, model: ModelSpec):
    """The logits the training loop itself holds through the whole backward (last stage; 0 for other recipes).

    Lightning-AI/litgpt finetune/lora.py at 8641822b, train(): `logits = model(input_ids, lm_head_chunk_size=128)`,
    `logits[-1] = logits[-1][..., :-1, :]`, `loss = chunked_cross_entropy(logits, targets[..., 1:])`,
    `fabric.backward(loss / gradient_accumulation_iters)`: the list keeps every chunk referenced while backward
    runs, on top of what the loss saved (`loss_bytes_per_logit`: F.cross_entropy's log-softmax keeps its output,
    not the logits). The chunks are fp32: `model` is Fabric's wrapper, whose forward returns
    `self._precision.convert_output(output)`, and every precision plugin (bf16-true HalfPrecision, bf16-mixed
    MixedPrecision, BitsandbytesPrecision) casts floating outputs to `torch.get_default_dtype()`, fp32 outside its
    forward context (Lightning-AI/lightning@71aed751, the commit LitGPT's requirements.txt pins:
    src/lightning/fabric/wrappers.py _FabricModule.forward, plugins/precision/half.py convert_output).
    """
    if not step.recipe.logits_held_through_backward:
        return 0.0
    return step.tokens * model.vocab_size / step.t * FP32_BYTES


def loss_buffer_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """Loss buffers at the start of backward (last stage): `loss_bytes_per_logit` per logit of the micro-batch."""
    V, t = model.vocab_size, step.t
    loss_buffers = step.tokens * V / t * loss_bytes_per_logit(step.recipe, training.loss_chunks, training.loss_dtype,
                                                             step.act, compiled_cross_entropy(step.recipe, training))
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
    whole = head_grad + step.tokens * step.act * h / t  # the gradient w.r.t. the head's input
    if step.recipe.chunked_output_head:  # the head runs per chunk: its gradient is summed chunk by chunk
        return np.maximum(whole, chunked_head_gradient_bytes(step, model, training))
    return whole


def head_runs_per_chunk(recipe: Recipe, training: TrainingSpec) -> bool:
    """Whether the stack applies the LM head to each logit chunk (torchtune's chunked output, loss_chunks >= 2)."""
    return recipe.chunked_output_head and training.loss_chunks >= 2


def chunked_head_gradient_bytes(step: Step, model: ModelSpec, training: TrainingSpec):
    """The LM head's gradients when it runs per logit chunk and trains (last stage; 0 otherwise).

    torchtune (pytorch/torchtune@1814feb1) modules/transformer.py TransformerDecoder.chunked_output applies the head
    to each of the k chunks, so its backward runs k times, once after each chunk's loss backward: chunk j's matmul
    forms a V x h weight gradient (the parameter's dtype: bf16 params, no autocast) that autograd adds to the sum
    of the earlier chunks' (torch/csrc/autograd/input_buffer.cpp `accumulate`), while the k - j chunks not reached
    yet keep their saved log-softmax. Each chunk's gradient is a transposed view (F.linear's weight gradient: TBackward
    of mm's [h, V] result), which `can_accumulate_inplace` refuses: at j = 2 both are views and the sum is out of
    place, three V x h at once; from j = 3 on the sum is a fresh tensor and the add is in place (two). Measured on
    real CPU tensors: 4 chunks give one `aten::add` of V x h and two `aten::add_` (tests/test_memory_phases.py). So
    at j = 2: 3 x V h, the (k - 2) / k of the loss' saved tensors, and chunk j's logit gradient and input gradient.
    """
    k = training.loss_chunks
    if not head_runs_per_chunk(step.recipe, training) or training.lora_rank:
        return 0.0
    V, h, t = model.vocab_size, model.hidden_size, step.t
    saved_per_logit = BF16_BYTES if training.loss_dtype == "bf16" else FP32_BYTES  # each chunk's saved log-softmax
    unreached_chunks = (k - 2) / k * step.tokens * V / t * saved_per_logit
    weight_gradients = 3 * V * h / t * step.ps.param_bytes  # chunk 1's and chunk 2's views, and their sum
    chunk_gradients = step.tokens / k * step.act * (V / t + h)  # d logits of chunk j, d its input
    return unreached_chunks + weight_gradients + chunk_gradients


def head_input_gradient_bytes(step: Step, model: ModelSpec):
    """The gradient the LM head passes to the last layer (last stage), alive while that layer is recomputed."""
    return step.tokens * step.act * model.hidden_size / step.sp_divisor
