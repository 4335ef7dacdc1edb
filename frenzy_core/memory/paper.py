"""The Frenzy paper's memory formula (arXiv 2412.14479, Sec. IV-A), verbatim: ``20W/t`` of model states plus
``s B h l (10/d + 24/(d t) + 5 a s/(d h t))`` bytes of activations, ``W = Vh + l(12h^2 + 13h)``, B the global batch.
It ignores the pipeline degree p, the precision, the micro-batch, the optimizer and any overhead.

>>> from frenzy_core.models import ZOO
>>> round(float(_paper(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8), np.array(1), np.array(1))["weights"]))
2473036800
"""

from __future__ import annotations

import numpy as np

from frenzy_core.models import ModelSpec
from frenzy_core.training import TrainingSpec

# --- the paper's constants (arXiv 2412.14479, Sec. IV-A) -----------------------------------------------------------
PAPER_STATE_BYTES_PER_PARAM = 20  # the paper's "20W": mixed-precision weights, gradients and Adam states
PAPER_REPLICATED_COEFF = 10  # sbh terms not split by t (LayerNorm inputs, QKV/MLP inputs, dropout masks) ...
PAPER_SPLIT_COEFF = 24  # ... sbh terms split by t ...
PAPER_SCORES_COEFF = 5  # ... and the 5as^2b attention-score terms (Korthikanti et al. Table 2, no recomputation)


def _paper(model: ModelSpec, training: TrainingSpec, dp, tp):
    """Frenzy Sec. IV-A verbatim: static = 20W/t; activations = s B h l (10/d + 24/(d t) + 5as/(d h t))."""
    d, t = dp.astype(np.float64), tp.astype(np.float64)
    s, B = training.seq_len, training.global_batch
    h, layers, a = model.hidden_size, model.num_layers, model.num_heads
    W = model.paper_weights()
    static = PAPER_STATE_BYTES_PER_PARAM * W / t
    activations = s * B * h * layers * (
        PAPER_REPLICATED_COEFF / d + PAPER_SPLIT_COEFF / (d * t) + PAPER_SCORES_COEFF * a * s / (d * h * t)
    )
    zero = np.zeros(np.shape(static))
    return {
        "weights": static,  # the paper does not split its 20W/t: reported whole as "weights"
        "gradients": zero,
        "optimizer": zero,
        "activations": activations,
        "logits": zero,
        "transient": zero,
    }
