"""Limits at every boundary: the largest input the planner accepts, checked before anything is expanded or allocated.

Every file, widget and flag passes through these checks first, so that no input can hang the planner, exhaust its
memory or overflow its arithmetic. Each limit is far above any real training job or cluster (the largest published
training runs use about 10^5 GPUs, 10^3 layers, hidden sizes of 10^4-10^5 and sequences of 10^6 tokens) and far
below what breaks int64 byte arithmetic (2^63 B = 8 EiB). Messages name the field, the limit and the fix, and never
print a user value of unbounded size (`short_repr`).

>>> bounded_int(8, "micro_batch", 1, MAX_BATCH)
8
>>> bounded_int(10**30, "micro_batch", 1, MAX_BATCH)
Traceback (most recent call last):
...
frenzy_core.errors.SpecError: micro_batch: must be at most 16,777,216, got 1000000000000000000000000000000; use a smaller value
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from frenzy_core.errors import SpecError

# --- files -----------------------------------------------------------------------------------------------------------
MAX_SPEC_FILE_BYTES = 4 * 1024**2  # cluster YAML, config.json, model spec, scenario: real ones are a few KB
MAX_TRACE_FILE_BYTES = 256 * 1024**2  # the whole Philly trace is 4 MB, Alibaba's largest pod list ~100 MB
MAX_YAML_EVENTS = 1_000_000  # parser events in one YAML document (a 10,000-node cluster is ~100,000)

# --- clusters ----------------------------------------------------------------------------------------------------------
MAX_NODES = 100_000  # nodes after `count:` expansion
MAX_GPUS_PER_NODE = 1024  # an NVL72 rack is 72 GPUs in one NVLink domain; 1024 leaves room for any future domain
MAX_TOTAL_GPUS = 1_048_576  # 2^20 GPUs: ten times the largest cluster anyone has announced

# --- models and training -----------------------------------------------------------------------------------------------
MAX_LAYERS = 4096  # the deepest published LLMs have ~100-200 layers
MAX_HIDDEN = 1 << 20  # hidden size, ffn size, head dim (largest published: ~50k ffn)
MAX_HEADS = 1 << 16
MAX_VOCAB = 1 << 24  # 16.7M tokens (largest published vocabularies: ~256k)
MAX_EXPERTS = 1 << 14
MAX_SEQ_LEN = 1 << 24  # 16.7M tokens per sample (long-context training reaches ~1M)
MAX_BATCH = 1 << 24  # samples per step (global batch) and per micro-batch
MAX_PARALLEL = MAX_TOTAL_GPUS  # any of d, t, p

# --- traces and simulations --------------------------------------------------------------------------------------------
MAX_TRACE_ROWS = 5_000_000  # the full Philly trace has 82,247 jobs, Alibaba 2020 ~1.2M tasks
MAX_FIELD_CHARS = 4096  # one CSV cell (Python's csv module refuses fields over 131,072 chars with a traceback)
MAX_SEEDS = 1000
MAX_JOB_GPUS = MAX_TOTAL_GPUS
MAX_TRACE_NUMBER = 1e15  # any number in a trace row (GPUs, seconds, tokens are checked against their own limits)
MAX_DURATION_S = 10 * 365 * 86400.0  # a job of ten years is a data error


def short_repr(value: Any, limit: int = 40) -> str:
    """repr() of a user value, cut to `limit` characters so an error message never grows with the input.

    >>> short_repr("x" * 100)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
    >>> short_repr(10**100), short_repr(list(range(10**6)))
    ('an integer of 101 digits', 'a list of 1000000 items')
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**60:
        return f"an integer of {len(str(abs(value)))} digits"[:limit]  # str() of a huge int is itself slow
    try:
        text = repr(value) if not isinstance(value, (list, dict, tuple, set)) else _container_repr(value)
    except Exception:  # a value whose repr fails is still an error worth reporting
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _container_repr(value) -> str:
    kind = type(value).__name__
    return f"a {kind} of {len(value)} item{'s' if len(value) != 1 else ''}"


def bounded_int(value: Any, field: str, lo: int, hi: int, fix: str | None = None) -> int:
    """`value` as an int in [lo, hi]; otherwise a SpecError naming `field`, the limit and the fix."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            value = int(value)
        else:
            raise SpecError(field, f"must be a whole number, got {short_repr(value)}")
    if value < lo:
        raise SpecError(field, f"must be at least {lo:,}, got {short_repr(value)}")
    if value > hi:
        raise SpecError(field, f"must be at most {hi:,}, got {short_repr(value)}; {fix or 'use a smaller value'}")
    return value


def finite_float(value: Any, field: str, *, positive: bool = False, nonneg: bool = False) -> float:
    """`value` as a finite float (NaN and inf rejected), optionally > 0 or >= 0."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(field, f"must be a number, got {short_repr(value)}") from None
    if not math.isfinite(x):
        raise SpecError(field, f"must be a finite number, got {short_repr(value)}")
    if positive and x <= 0:
        raise SpecError(field, f"must be positive, got {short_repr(value)}")
    if nonneg and x < 0:
        raise SpecError(field, f"must be >= 0, got {short_repr(value)}")
    return x


def check_size(text: str | bytes, field: str, limit: int = MAX_SPEC_FILE_BYTES, source: str | None = None) -> None:
    """Refuse a file or upload larger than `limit` bytes before parsing it."""
    size = len(text.encode("utf-8")) if isinstance(text, str) and len(text) * 4 > limit else len(text)
    if size > limit:
        raise SpecError(field, f"{size:,} bytes is over the {limit:,}-byte limit for this kind of file; "
                        "give a smaller file", source)


class _NoAliasLoader(yaml.SafeLoader):
    """yaml.SafeLoader without aliases: `*name` references are how a 400-byte file expands into gigabytes."""


def load_yaml(text: str, field: str, source: str | None = None, limit: int = MAX_SPEC_FILE_BYTES) -> Any:
    """Parse YAML text safely: size-checked, no aliases/anchors, a bounded number of parser events.

    >>> load_yaml("a: &x [1]\\nb: *x", "cluster")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: cluster: line 2: YAML aliases (*name) are not allowed; write the values out
    """
    check_size(text, field, limit, source)
    events = 0
    try:
        for event in yaml.parse(text, Loader=_NoAliasLoader):
            events += 1
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise SpecError(field, f"line {line}: YAML aliases (*name) are not allowed; write the values out",
                                source)
            if events > MAX_YAML_EVENTS:
                raise SpecError(field, f"more than {MAX_YAML_EVENTS:,} YAML items; give a smaller file", source)
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise SpecError(field, f"{where}not valid YAML: {short_repr(problem, 80)}", source) from None
    except RecursionError:
        raise SpecError(field, "nested more than the parser allows; a real file is a few levels deep",
                        source) from None


def load_json(text: str, field: str, source: str | None = None, limit: int = MAX_SPEC_FILE_BYTES) -> Any:
    """Parse JSON text: size-checked; a deeply nested file is a SpecError, not a crash of the parser.

    >>> load_json("[" * 100_000 + "]" * 100_000, "config.json")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: config.json: nested too deeply for the parser; a real config is 3-4 levels deep
    """
    check_size(text, field, limit, source)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(field, f"not valid JSON (line {err.lineno}: {err.msg}); give the file's whole text",
                        source) from None
    except RecursionError:  # the C decoder recurses once per level
        raise SpecError(field, "nested too deeply for the parser; a real config is 3-4 levels deep", source) from None


def divisors(n: int) -> list[int]:
    """The divisors of n in ascending order, in O(sqrt n) steps (n bounded by the limits above).

    >>> divisors(12), divisors(1), divisors(97)
    ([1, 2, 3, 4, 6, 12], [1], [1, 97])
    """
    if n <= 0:
        return []
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


MODEL_LIMITS = {"vocab_size": MAX_VOCAB, "hidden_size": MAX_HIDDEN, "num_layers": MAX_LAYERS, "num_heads": MAX_HEADS,
                "num_kv_heads": MAX_HEADS, "ffn_size": MAX_HIDDEN, "max_positions": MAX_SEQ_LEN,
                "num_experts": MAX_EXPERTS, "moe_top_k": MAX_EXPERTS, "expert_ffn_size": MAX_HIDDEN}
# DeepSpeed buffer sizes in elements: 10^12 is a 2 TB bf16 bucket, far above any GPU
MAX_DEEPSPEED_ELEMENTS = 10**12
# a LoRA rank is at most a linear's width, a chunked loss has at most one chunk per token, and a checkpoint stride
# at most the layers: past these the terms would only overflow (lora_rank 10^30 used to wrap int64 to 1 GiB)
TRAINING_LIMITS = {"seq_len": MAX_SEQ_LEN, "global_batch": MAX_BATCH, "micro_batch": MAX_BATCH,
                   "lora_rank": MAX_HIDDEN, "loss_chunks": MAX_SEQ_LEN, "recompute_every": MAX_LAYERS,
                   "reduce_bucket_size": MAX_DEEPSPEED_ELEMENTS, "stage3_max_live_parameters": MAX_DEEPSPEED_ELEMENTS,
                   "stage3_max_reuse_distance": MAX_DEEPSPEED_ELEMENTS}


def check_upper_limits(obj: Any, limits: dict[str, int]) -> None:
    """Inside a pydantic validator: raise ValueError("<field> must be at most ...") for the first field over its limit.

    Runs before any arithmetic on the fields, so a 10^30 hidden size never reaches int64 code.
    """
    for field, hi in limits.items():
        value = getattr(obj, field, None)
        if isinstance(value, int) and value > hi:
            raise ValueError(f"{field} must be at most {hi:,}, got {short_repr(value)}; real models and training "
                             "runs stay far below it")
