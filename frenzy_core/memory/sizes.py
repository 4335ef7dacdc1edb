"""Element sizes, binary units and the byte counts int64 arithmetic can hold: what every term module multiplies by.

>>> FP32_BYTES, BF16_BYTES, MASK_BYTES, INDEX_BYTES
(4, 2, 1, 8)
"""

from __future__ import annotations

from frenzy_core.errors import SpecError
from frenzy_core.models import ModelSpec
from frenzy_core.training import TrainingSpec

GIB = 1024**3
MIB = 1024**2

# --- element sizes -------------------------------------------------------------------------------------------------
FP32_BYTES = 4  # fp32 statistics, log-softmax, loss gradients
BF16_BYTES = 2
MASK_BYTES = 1  # torch native_dropout keeps a bool mask: one byte per dropped-or-kept element
FP8_BYTES = 1  # e4m3 / e5m2 elements (Transformer Engine fp8 linears)
INDEX_BYTES = 8  # int64 token ids (the embedding and the loss keep them for backward)


# --- sizes the int64 arithmetic can hold -----------------------------------------------------------------------------
# Every byte count is an int64; 2**62 bytes (4 EiB) leaves headroom for the sums. A model or batch whose weights or
# logits alone exceed it is not a training job any GPU can hold: say so instead of overflowing.
MAX_BYTES = 2**62
MAX_BYTES_PER_ELEMENT = 64  # the largest bytes-per-element any term multiplies a parameter or a logit by


def check_sizes(model: ModelSpec, training: TrainingSpec, micro_batch: int | None = None) -> None:
    """Reject shapes whose byte counts overflow int64, naming the field and the limit (SpecError).

    >>> from frenzy_core.models import ZOO
    >>> check_sizes(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8)) is None
    True
    """
    limit = MAX_BYTES // MAX_BYTES_PER_ELEMENT
    b = int(micro_batch if micro_batch is not None else training.micro_batch)
    s = training.seq_len
    # (field named in the error, what it multiplies, elements)
    sizes = (
        ("parameters", "the model's parameters", model.parameter_count()),
        ("vocab_size", "logits = seq_len x micro_batch x vocab_size", s * b * model.vocab_size),
        ("hidden_size", "activations = seq_len x micro_batch x hidden_size x num_layers",
         s * b * model.hidden_size * model.num_layers * max(1, model.moe_top_k if model.is_moe else 1)),
        ("seq_len", "attention scores = seq_len^2 x micro_batch x num_heads x num_layers",
         s * s * b * model.num_heads * model.num_layers),
        # tokens per step (global_batch x seq_len) need no row: TrainingSpec bounds both at 2^24
        # (limits.TRAINING_LIMITS), so their product, 2^48 at most, stays under the 2^56-element limit
    )
    for field, what, value in sizes:
        if value > limit:
            raise SpecError(
                field,
                f"{what} = {value:.3g} exceeds the {limit:.3g} elements whose bytes fit in 64-bit arithmetic "
                f"({MAX_BYTES_PER_ELEMENT} bytes each, {MAX_BYTES:.3g} bytes); no GPU cluster holds this: "
                f"use a smaller model or batch",
            )
