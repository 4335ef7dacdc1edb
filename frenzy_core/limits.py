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
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import yaml
from pydantic import AfterValidator

from frenzy_core.errors import SpecError

# --- files -----------------------------------------------------------------------------------------------------------
MAX_SPEC_FILE_BYTES = 1 << 20  # 1 MiB: cluster YAML, config.json, model spec, scenario, share link (real ones: a few KB;
# a 10,000-node cluster listed node by node is ~600 KB, and `count:` groups make any cluster a few hundred bytes)
MAX_TRACE_FILE_BYTES = 256 * 1024**2  # the whole Philly trace is 4 MB, Alibaba's largest pod list ~100 MB
MAX_YAML_EVENTS = 1_000_000  # parser events in one YAML document (a 10,000-node cluster is ~100,000)
MAX_SHARE_CHARS = 6000  # a share link's code: a URL under ~8 KB passes every mainstream browser, proxy and Tornado
MAX_FLAG_INT = 2**40  # any integer CLI flag: none means anything near this; larger ones would overflow int64 arithmetic
MAX_REPORTED_SKIPS = 1000  # skipped trace rows listed one by one in --json (all are counted)

# --- clusters ----------------------------------------------------------------------------------------------------------
MAX_NODES = 100_000  # nodes after `count:` expansion
MAX_GPUS_PER_NODE = 1024  # an NVL72 rack is 72 GPUs in one NVLink domain; 1024 leaves room for any future domain
MAX_TOTAL_GPUS = 1_048_576  # 2^20 GPUs: ten times the largest cluster anyone has announced
MAX_GPU_MEMORY_GIB = 1_048_576  # 1 PiB per GPU: 5,000x the largest today; keeps byte counts far inside int64

# --- models and training -----------------------------------------------------------------------------------------------
MAX_LAYERS = 4096  # the deepest published LLMs have ~100-200 layers
MAX_HIDDEN = 1 << 20  # hidden size, ffn size, head dim (largest published: ~50k ffn)
MAX_HEADS = 1 << 16  # attention heads (largest published: 128)
MAX_VOCAB = 1 << 24  # 16.7M tokens (largest published vocabularies: ~256k)
MAX_EXPERTS = 1 << 14  # routed experts (largest published: 256, DeepSeek-V3)
MAX_SEQ_LEN = 1 << 24  # 16.7M tokens per sample (long-context training reaches ~1M)
MAX_BATCH = 1 << 24  # samples per step (global batch) and per micro-batch
MAX_PARALLEL = MAX_TOTAL_GPUS  # any of d, t, p
MAX_LORA_TARGETS_CHARS = 64  # a LoRA target list: every linear named once with commas is 25 characters
MIN_TOKENS, MAX_TOKENS = 1e3, 1e16  # a plan's token budget: a smoke test to 100x the largest published pre-training run

# --- defaults every entry point shares (CLI flags, widgets, scenarios, the core's keyword arguments) ---------------
DEFAULT_SAFETY_MARGIN = 0.10  # keep 10% of each GPU free: allocator fragmentation beyond the modelled overhead
DEFAULT_TOKENS = 1e10  # the token budget a plan trains for when none is given

# --- the app's and a scenario's runs (widgets take their max_value from here) -------------------------------------
MAX_SCENARIO_JOBS = 100_000  # trace jobs one app or scenario simulation replays (the full Philly trace: 82,247)
MAX_SCENARIO_SEEDS = 20  # seeds per app or scenario run: a 95% CI is already tight at 10 (the CLI allows MAX_SEEDS)

# --- traces and simulations --------------------------------------------------------------------------------------------
MAX_TRACE_ROWS = 5_000_000  # the full Philly trace has 82,247 jobs, Alibaba 2020 ~1.2M tasks
MAX_FIELD_CHARS = 4096  # one CSV cell (Python's csv module refuses fields over 131,072 chars with a traceback)
MAX_SEEDS = 1000  # seeds of one CLI run (a 95% CI is tight at 10)
MAX_JOB_GPUS = MAX_TOTAL_GPUS  # GPUs of one trace job: no more than a cluster may have
MAX_TRACE_NUMBER = 1e15  # any number in a trace row (GPUs, seconds, tokens are checked against their own limits)
MAX_DURATION_S = 10 * 365 * 86400.0  # a job of ten years is a data error
MAX_SIZE_NOISE_SIGMA = 3.0  # lognormal sigma of a size-aware policy's job-size error: 3 is a factor of 20 at one sigma
MAX_ROUNDS = 2_000_000  # a round-engine run that has not finished after this many rounds is an error, not a loop

# dates a trace timestamp may hold (UTC, end exclusive): from the Unix epoch, which epoch-second traces cannot
# precede, to 2100; outside is a placeholder or a typo ("9999-12-31"), never a submit time
TRACE_TIMESTAMP_RANGE = ("1970-01-01", "2100-01-01")

# --- what-if and sweeps ------------------------------------------------------------------------------------------------
# A purchase of 10^5 GPUs is the largest cluster anyone has announced; one --add past it is a typo (1e20 used to
# build nodes until memory ran out).
MAX_GPUS_PER_ADDITION = 100_000
# All candidates together: ten purchases of that size. Every added GPU is simulated in every run of its candidate.
MAX_ADDED_GPUS = 1_000_000
# Candidate clusters in one what-if or sweep: a procurement compares a handful (the page offers 3, the search 8).
MAX_CANDIDATES = 1000
# Mixes the budget search enumerates (one Python loop step each, ~1 s for 10^6): three GPU types at 100 servers
# each is 10^6; the default $100/h in 8-GPU servers is ~125.
MAX_SEARCH_MIXES = 1_000_000
# Simulations in one sweep (candidates x policies x seeds x workloads): a run takes 0.1 s to minutes, so 10^5 is a
# day of one core or minutes of a Ray cluster; the default what-if is 4 candidates x 5 seeds = 20.
MAX_SWEEP_RUNS = 100_000
# Worker processes (local pool) or CPUs (a local Ray cluster): the largest two-socket servers have 2 x 192 cores x 2
# threads = 768; more would only start processes that wait.
MAX_WORKERS = 1024
# Seconds to resolve a Ray --address and hear a gRPC server answer on it: a head on the same network answers in
# milliseconds. Without it ray.init(address=...) retries a dead address 20 times at ~40 s each.
RAY_CONNECT_TIMEOUT_S = 5.0


# --- names -------------------------------------------------------------------------------------------------------------
MAX_NAME_CHARS = 64  # model, cluster, node, GPU type and scenario names: "llama-3.1-405b", "H100-80GB", "dgx-h100-17"
NAME_RULE = f"1 to {MAX_NAME_CHARS} letters, digits, '.', '_' or '-'"
_NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_NAME_CHARS}}}")


def check_name(value: Any, field: str = "name") -> str:
    """`value` as a name that is safe in a shell word, a TOML key or string, a YAML scalar, a file name and markdown.

    Names end up in launch scripts, job names, host lists and page headings, so they are held to one plain alphabet
    here rather than escaped differently in each place (exports escape as well: defence in depth).

    >>> check_name("llama-2-7b"), check_name("H100-80GB")
    ('llama-2-7b', 'H100-80GB')
    >>> check_name("lab\\ntouch PWNED", "cluster.name")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: cluster.name: must be 1 to 64 letters, digits, '.', '_' or '-', got 'lab\\ntouch PWNED'; rename it
    """
    if not isinstance(value, str) or not _NAME.fullmatch(value) or value in (".", ".."):
        raise SpecError(field, f"must be {NAME_RULE}, got {short_repr(value)}; rename it")
    return value


def slug_name(text: str, fallback: str = "custom") -> str:
    """A valid name made from free text (a file's stem, an upload's name): other characters become '-'.

    >>> slug_name("my model (v2).json"), slug_name("???"), slug_name("a" * 100) == "a" * MAX_NAME_CHARS
    ('my-model-v2-.json', 'custom', True)
    """
    slug = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._-]", "-", str(text)))[:MAX_NAME_CHARS].strip("-")
    return slug if _NAME.fullmatch(slug) and slug not in (".", "..") else fallback


def _name_validator(value: Any) -> str:
    try:
        return check_name(value)
    except SpecError as err:
        raise ValueError(f"name {err.reason}") from None


Name = Annotated[str, AfterValidator(_name_validator)]  # a pydantic field type: check_name at every boundary


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


MAX_YAML_DEPTH = 32  # nesting levels in one YAML or JSON document: a scenario is 5 deep, a cluster 4


class _SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses what lets a small file cost a lot, in one linear pass.

    - aliases (`*name`) and merge keys (`<<`): how a 400-byte file expands into gigabytes;
    - duplicate keys: YAML says they are an error, PyYAML silently keeps the last;
    - nesting past MAX_YAML_DEPTH: PyYAML composes recursively (a RecursionError) and its scanner's simple-key table
      grows with the depth (quadratic time), so the depth is checked on each token the scanner fetches (flow levels
      and block indents) and on each node as it is composed;
    - more than MAX_YAML_EVENTS parser events.
    """

    def __init__(self, stream, field: str, source: str | None):
        super().__init__(stream)
        self.field, self.source, self.depth, self.events = field, source, 0, 0

    def fail(self, mark, message: str):
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise SpecError(self.field, f"{line}{message}", self.source)

    def fetch_more_tokens(self):
        # the scanner looks up to 1,024 characters ahead for a simple key and rescans its table of open levels on
        # each token: checked here, a deep `[[[[...` or `- - - ...` stops after MAX_YAML_DEPTH levels, not ~1,000
        if self.flow_level > MAX_YAML_DEPTH or len(self.indents) > MAX_YAML_DEPTH:
            self.fail(self.get_mark(), f"nested more than {MAX_YAML_DEPTH} levels deep; a real file is a few levels deep")
        return super().fetch_more_tokens()

    def get_event(self):
        self.events += 1
        if self.events > MAX_YAML_EVENTS:
            self.fail(None, f"more than {MAX_YAML_EVENTS:,} YAML items; give a smaller file")
        return super().get_event()

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.fail(self.peek_event().start_mark, "YAML aliases (*name) are not allowed; write the values out")
        self.depth += 1
        if self.depth > MAX_YAML_DEPTH:
            self.fail(self.peek_event().start_mark,
                      f"nested more than {MAX_YAML_DEPTH} levels deep; a real file is a few levels deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.fail(key_node.start_mark, "YAML merge keys (<<) are not allowed; write the keys out")
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: SafeConstructor reports it below
                continue
            if duplicate:
                self.fail(key_node.start_mark, f"duplicate key {short_repr(key)}; give each key once")
        return super().construct_mapping(node, deep)


def load_yaml(text: str, field: str, source: str | None = None, limit: int = MAX_SPEC_FILE_BYTES) -> Any:
    """Parse YAML text safely: size-checked; no aliases, merge keys or duplicate keys; bounded depth and events.

    The one YAML loader of the project: scenarios, share links, clusters, model specs and configs all come here.

    >>> load_yaml("a: &x [1]\\nb: *x", "cluster")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: cluster: line 2: YAML aliases (*name) are not allowed; write the values out
    >>> load_yaml("nodes: 1\\nnodes: 2", "cluster")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: cluster: line 2: duplicate key 'nodes'; give each key once
    """
    check_size(text, field, limit, source)
    loader = _SafeLoader(text, field, source)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise SpecError(field, f"{where}not valid YAML: {short_repr(problem, 80)}", source) from None
    except RecursionError:  # cannot happen below MAX_YAML_DEPTH; kept so that no RecursionError ever escapes
        raise SpecError(field, "nested more than the parser allows; a real file is a few levels deep",
                        source) from None
    finally:
        loader.dispose()


def _no_duplicate_keys(field: str, source: str | None):
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set[str] = set()
            key = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise SpecError(field, f"duplicate key {short_repr(key)}; give each key once", source)
        return out
    return hook


def check_depth(data: Any, field: str, source: str | None = None, limit: int = MAX_YAML_DEPTH) -> None:
    """Refuse data nested deeper than `limit` (iteratively: a deep value never recurses here)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                raise SpecError(field, f"nested more than {limit} levels deep; a real file is a few levels deep",
                                source)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))


def load_json(text: str | bytes, field: str, source: str | None = None, limit: int = MAX_SPEC_FILE_BYTES) -> Any:
    """Parse JSON text: size-checked, duplicate keys refused, depth bounded; never a crash of the parser.

    >>> load_json("[" * 100_000 + "]" * 100_000, "config.json")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: config.json: nested too deeply for the parser; a real config is 3-4 levels deep
    >>> load_json('{"a": 1, "a": 2}', "config.json")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: config.json: duplicate key 'a'; give each key once
    """
    check_size(text, field, limit, source)
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys(field, source))
    except json.JSONDecodeError as err:
        raise SpecError(field, f"not valid JSON (line {err.lineno}: {err.msg}); give the file's whole text",
                        source) from None
    except UnicodeDecodeError:
        raise SpecError(field, "is not UTF-8 text; give the file's whole text", source) from None
    except RecursionError:  # the C decoder recurses once per level
        raise SpecError(field, "nested too deeply for the parser; a real config is 3-4 levels deep", source) from None
    check_depth(data, field, source)
    return data


def open_user_file(path: str | os.PathLike, field: str, expected: str, limit: int = MAX_SPEC_FILE_BYTES) -> BinaryIO:
    """A user's own file opened for reading in binary, or a SpecError; the caller closes it.

    Only a regular file is opened for reading, and only after its size is checked against `limit`: a device
    (/dev/zero reads forever), a FIFO (blocks forever), a folder or a socket is refused by what it is, before a byte
    is read. The file is opened non-blocking and checked through its descriptor, so it cannot be swapped between the
    check and the read.
    """
    name = str(path)
    shown = name if name.isprintable() and len(name) <= 200 else short_repr(name, 200)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise SpecError(field, f"file not found: {shown}") from None
    except IsADirectoryError:
        raise SpecError(field, f"{shown} is a folder; give the path of {expected}") from None
    except (OSError, ValueError) as err:  # no permission, a NUL in the name, ...
        raise SpecError(field, f"cannot read {shown}: {getattr(err, 'strerror', None) or 'bad path'}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SpecError(field, f"{shown} is a folder; give the path of {expected}")
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(field, f"{shown} is not a regular file ({_file_kind(info.st_mode)}); "
                            f"give the path of {expected}")
        if info.st_size > limit:
            raise SpecError(field, f"{info.st_size:,} bytes is over the {limit:,}-byte limit for {expected}; "
                            "give a smaller file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_user_file(path: str | os.PathLike, field: str, expected: str, limit: int = MAX_SPEC_FILE_BYTES) -> str:
    """A user's own text file (the CLI's --spec, --config, cluster and scenario paths), read safely
    (`open_user_file`: regular files only, size-checked before reading).

    >>> read_user_file("/dev/zero", "spec", "a model spec")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: spec: /dev/zero is not a regular file (a character device); give the path of a model spec
    >>> read_user_file("/nonexistent.yaml", "cluster", "a cluster YAML file")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: cluster: file not found: /nonexistent.yaml
    """
    with open_user_file(path, field, expected, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # grew since the check
        raise SpecError(field, f"over the {limit:,}-byte limit for {expected}; give a smaller file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError(field, f"{Path(str(path)).name} is not UTF-8 text; give {expected}") from None


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a plain file"


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


def table() -> list[tuple[str, str, str]]:
    """Every limit and default of this module as (name, value, why): the one limits table (docs/limits.md is
    `python -m frenzy_core.limits` and a test keeps them equal). The why is the constant's own comment, on its line
    or on the comment lines just above it."""
    import ast
    import sys

    source = Path(__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    module = sys.modules[__name__]
    rows = []
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        name = getattr(target, "id", "")
        value = getattr(module, name, None)
        if not re.fullmatch(r"(MAX|MIN|DEFAULT)_[A-Z0-9_]+|[A-Z0-9_]+_(S|RANGE)", name) or \
                isinstance(value, bool) or not isinstance(value, (int, float, tuple)):
            continue
        line = lines[node.lineno - 1]
        why = line.split("#", 1)[1].strip() if "#" in line else ""
        k = node.end_lineno
        while why and k < len(lines) and lines[k].strip().startswith("#") and \
                (lines[k].startswith(" ") or why.count("(") > why.count(")")):
            why += " " + lines[k].strip()[1:].strip()  # the comment goes on, indented, on the next lines
            k += 1
        k = node.lineno - 2
        above = []
        while not why and k >= 0 and lines[k].startswith("# ") and not lines[k].startswith("# ---"):
            above.insert(0, lines[k][2:].strip())
            k -= 1
        why = why or " ".join(above)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 1e10 tokens reads 10,000,000,000
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else repr(value)
        rows.append((name, shown, why))
    return rows


def table_markdown() -> str:
    """docs/limits.md: the table() as Markdown."""
    out = ["# Limits and defaults", "",
           "Every bound the CLI, the pages and the core check, from `frenzy_core/limits.py` (the one place they are",
           "defined; widget maxima and messages read them from there). Generated by `python -m frenzy_core.limits`;",
           "`tests/test_limits.py` fails when this file and the module disagree.", "",
           "| name | value | why |", "|---|---|---|"]
    out += [f"| `{n}` | {v} | {w.replace('|', '/')} |" for n, v, w in table()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(table_markdown(), end="")
