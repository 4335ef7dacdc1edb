"""Framework unknown: the stack is not known, so memory is the band over every known stack's recipe (the planner
uses its top) and every capability any stack has is allowed.

>>> FRAMEWORK.is_band, FRAMEWORK.supports_cp, FRAMEWORK.supports_uneven_stages
(True, True, True)
"""

from __future__ import annotations

from frenzy_core.frameworks import deepspeed, fsdp2, megatron
from frenzy_core.frameworks.base import Framework

FRAMEWORK = Framework(
    name="unknown",
    describes="the stack is not known: the band over every recipe",
    recipe=None,
    export_format=None,
    default_precision="amp",
    supports_cp=True,  # covers megatron, fsdp2 and pytorch
    supports_vp=True,  # covers megatron and fsdp2
    supports_uneven_stages=True,  # covers megatron
    supports_ep=True,
    experts_fit=None,
    fully_shards=False,
    zero_stages=(0, 1, 2, 3),
    supports_amp=True,
    supports_chunked_loss=True,
    # the band covers every recipe, so every stack's switches are accepted
    switches=megatron.SWITCHES + fsdp2.SWITCHES + deepspeed.ZERO_OPTIMIZATION_FIELDS,
    switches_label="stack switches",
)
