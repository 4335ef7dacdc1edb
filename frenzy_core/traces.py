"""Job traces: what arrived when, asking for how many GPUs, running for how long; loaders for public formats.

Every loader is a pure function ``load_<fmt>(source, *, limit=None, ...) -> Trace``. ``source`` is a path, the file's
text (any ``str`` containing a line break) or an open file (text or bytes). Loaders share one contract:

* arrivals are shifted so the first kept job arrives at 0 s; jobs are sorted by arrival (stable), ties by ``job_id``;
* a malformed row is skipped and reported as ``RowProblem(row, reason)``, the reason naming the field, the rule and
  (cut short) the value: a missing field, a non-numeric value, GPUs <= 0 or over ``MAX_JOB_GPUS``, a negative duration,
  a timestamp that is not one or lies outside ``TRACE_TIMESTAMP_RANGE``, a quote that is never closed, bytes that are
  not UTF-8, a duplicate id. ``row`` is 1-based and counts file lines after the header, so row N is line N+1 of a file
  with a header (blank lines are ignored but still counted). One line is one row: trace fields are short ids and
  numbers and never hold a line break, so a quote left open ends with its line instead of swallowing the rows after it;
* a file that is not the format at all (wrong header, wrong field count), is empty, or is over a limit
  (``MAX_TRACE_FILE_BYTES``, ``MAX_TRACE_ROWS`` rows, a field over ``MAX_FIELD_CHARS``) raises ``SpecError``;
* ``limit`` keeps the ``limit`` earliest-arriving valid jobs (traces such as Philly are not sorted on disk), so the
  whole file is still read and checked.

Loading streams: the file is read in blocks of whole lines (``_BLOCK_CHARS``); each block's cells are checked
column-wise with pandas, only failing rows are visited in Python, and only the compact columns of the valid rows are
kept, as numpy arrays (``TraceJobs``; skipped rows likewise, ``RowProblems``). A 5,000,000-row Philly file
(``MAX_TRACE_ROWS``, 201 MiB) loads in about 13 s under 600 MiB peak RSS, the 82,247-row Philly trace in about
0.4 s, on 2 shared cores (``bench/trace_load.py``). Formats, sources and assumptions: ``docs/traces.md``.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import math
import operator
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd
from numpy.dtypes import StringDType

from frenzy_core.errors import SpecError
from frenzy_core.limits import (
    MAX_FIELD_CHARS,
    MAX_JOB_GPUS,
    MAX_TRACE_FILE_BYTES,
    MAX_TRACE_NUMBER,
    MAX_TRACE_ROWS,
    TRACE_TIMESTAMP_RANGE,
    check_size,
    load_json,
    open_user_file,
    short_repr,
)


@dataclass(frozen=True)
class TraceJob:
    """One job as a trace records it: no model, only arrival, GPU count and duration."""

    job_id: str  # unique within the trace
    arrival_s: float  # seconds since the trace's first arrival (the loader shifts the origin to 0)
    num_gpus: int  # GPUs the user asked for (the baseline policies use this; Frenzy ignores it)
    duration_s: float  # how long it ran on its original allocation
    gpu_type: str | None = None  # original GPU type when the trace records one (catalog name), else None
    source_row: int = 0  # 1-based data row in the file it came from, for error messages
    model: str | None = None  # zoo model name when the trace names one (native traces); else the mapping picks one
    tokens: int | None = None  # training tokens when the trace gives them (native traces), else None
    job_type: str | None = None  # the trace's own workload label (Sia application, Gavel job type), for provenance
    batch_size: int | None = None  # the user's total batch when the trace gives it (Sia workloads), else None


_TRACEJOB_FIELDS = tuple(TraceJob.__dataclass_fields__)
_ITER_BLOCK = 1 << 16  # jobs built per step when iterating a TraceJobs


class _ReadsAsTuple(Sequence):
    """A column-backed sequence that compares, hashes and prints like the tuple of its values (so a `Trace` holding
    one equals one built from tuples, and its repr is a stable cache key)."""

    def _equals_values(self, other) -> bool:
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


class TraceJobs(_ReadsAsTuple):
    """A loaded trace's jobs as columns (one read-only numpy array per ``TraceJob`` field), read out as ``TraceJob``
    values on access: indexing gives a TraceJob, slicing a TraceJobs, iterating TraceJobs one after another.

    Why: 5,000,000 jobs (``MAX_TRACE_ROWS``) take ~120 MB as columns, ~1.6 GB as TraceJob objects (~310 B each).
    It compares (and hashes, and prints) like the tuple of the same TraceJobs, so ``Trace`` values built from
    either are interchangeable. Fields without a column are None. Ids from a file are a numpy ``StringDType``
    column (16 B each up to 15 bytes); generated ids (Philly's ``philly-000017``) are not stored at all:
    ``id_prefix`` + ``source_row`` zero-padded to ``id_width`` digits.

    >>> jobs = TraceJobs({"arrival_s": [0.0, 5.0], "num_gpus": [1, 8], "duration_s": [60.0, 3600.0],
    ...                   "source_row": [2, 10]}, id_prefix="philly-", id_width=2)
    >>> len(jobs), jobs[1].job_id, jobs[1].num_gpus, jobs == tuple(jobs)
    (2, 'philly-10', 8, True)
    """

    __slots__ = ("_cols", "_prefix", "_width", "_n")

    def __init__(self, columns: Mapping[str, np.ndarray | Sequence], id_prefix: str | None = None,
                 id_width: int = 0):
        cols = {}
        for name, values in columns.items():
            if name not in _TRACEJOB_FIELDS:
                raise ValueError(f"TraceJobs: {name!r} is not a TraceJob field")
            arr = np.array(values, dtype=object) if isinstance(values, (list, tuple)) and name in (
                "job_id", "gpu_type", "model", "tokens", "job_type", "batch_size") else np.asarray(values)
            arr = arr.view()
            arr.flags.writeable = False
            cols[name] = arr
        missing = {"arrival_s", "num_gpus", "duration_s", "source_row"} - set(cols)
        if id_prefix is None and "job_id" not in cols:
            missing.add("job_id")
        if missing:
            raise ValueError(f"TraceJobs: missing column(s) {', '.join(sorted(missing))}")
        lengths = {len(a) for a in cols.values()}
        if len(lengths) != 1:
            raise ValueError("TraceJobs: columns of different lengths")
        self._cols, self._prefix, self._width, self._n = cols, id_prefix, int(id_width), lengths.pop()

    def column(self, name: str) -> np.ndarray:
        """One field for every job, as a read-only array (object dtype for ids and labels; None where absent)."""
        if name == "job_id" and self._prefix is not None:
            return np.array(self._column_list(name, 0, self._n), dtype=object)
        if name not in self._cols:
            if name not in _TRACEJOB_FIELDS:
                raise KeyError(name)
            return np.full(self._n, None, dtype=object)
        return self._cols[name]

    def _column_list(self, name: str, lo: int, hi: int):
        if name == "job_id" and self._prefix is not None:
            p, w = self._prefix, self._width
            return [f"{p}{r:0{w}d}" for r in self._cols["source_row"][lo:hi].tolist()]
        if name in self._cols:
            return self._cols[name][lo:hi].tolist()
        return itertools.repeat(None, hi - lo)

    def _jobs(self, lo: int, hi: int) -> Iterator[TraceJob]:
        return map(TraceJob, *(self._column_list(f, lo, hi) for f in _TRACEJOB_FIELDS))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return TraceJobs({k: v[i] for k, v in self._cols.items()}, self._prefix, self._width)
        i = operator.index(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("trace job index out of range")
        return next(self._jobs(i, i + 1))

    def __iter__(self) -> Iterator[TraceJob]:
        for lo in range(0, self._n, _ITER_BLOCK):
            yield from self._jobs(lo, min(self._n, lo + _ITER_BLOCK))

    def __eq__(self, other) -> bool:
        if isinstance(other, TraceJobs):
            if self._n != other._n:
                return False
            if (self._prefix, self._width, self._cols.keys()) == (other._prefix, other._width, other._cols.keys()):
                return all(np.array_equal(a, other._cols[k]) for k, a in self._cols.items())
        elif not isinstance(other, tuple):
            return NotImplemented
        return self._equals_values(other)

    __hash__ = _ReadsAsTuple.__hash__  # defining __eq__ would otherwise unset it

    def __reduce__(self):
        return (TraceJobs, (dict(self._cols), self._prefix, self._width))


@dataclass(frozen=True)
class RowProblem:
    """A malformed row that the loader skipped, and why."""

    row: int  # 1-based data row (the header is row 0)
    reason: str


# How a skipped row's reason shows its offending value: not at all, as short_repr(value), or as a text made for it
GOT_NONE, GOT_REPR, GOT_RAW = 0, 1, 2
_GOT_CHARS = 100  # characters of an offending value kept per skipped row (short_repr shows 40 of them)


class RowProblems(_ReadsAsTuple):
    """A loader's skipped rows as columns (row, a code into a small table of reasons, the offending value cut to
    ``_GOT_CHARS``), read out as ``RowProblem`` values in row order; compares like the tuple of the same RowProblems.

    Why: a 5,000,000-row file whose every row is bad would otherwise hold 5M RowProblem objects and as many reason
    strings (~1 GB); here ~30 B a row. ``kinds`` entries are (reason, how the value is shown: GOT_*, suffix).

    >>> p = RowProblems([4, 2], [0, 1], ["0", ""], (("num_gpus: must be > 0", GOT_REPR, ""), ("duration: missing",
    ...                 GOT_NONE, "")))
    >>> list(p), p.reason_counts()
    ([RowProblem(row=4, reason="num_gpus: must be > 0 (got '0')"), RowProblem(row=2, reason='duration: missing')], {'num_gpus: must be > 0': 1, 'duration: missing': 1})
    """

    __slots__ = ("_rows", "_codes", "_got", "_kinds")

    def __init__(self, rows, codes, got, kinds: Sequence[tuple[str, int, str]]):
        self._rows = np.asarray(rows, dtype=np.int64)
        self._codes = np.asarray(codes, dtype=np.int32)
        self._got = np.asarray(got, dtype=StringDType())
        if not len(self._rows) == len(self._codes) == len(self._got):
            raise ValueError("RowProblems: columns of different lengths")
        for a in (self._rows, self._codes, self._got):
            a.flags.writeable = False
        self._kinds = tuple(tuple(k) for k in kinds)

    def _reason(self, code: int, got: str) -> str:
        kind, shown, suffix = self._kinds[code]
        if shown == GOT_REPR:
            return f"{kind} (got {short_repr(got)}){suffix}"
        if shown == GOT_RAW:
            return f"{kind} (got {got}){suffix}"
        return kind + suffix

    def _problems(self, lo: int, hi: int) -> Iterator[RowProblem]:
        for row, code, got in zip(self._rows[lo:hi].tolist(), self._codes[lo:hi].tolist(),
                                  self._got[lo:hi].tolist(), strict=True):
            yield RowProblem(row, self._reason(code, got))

    def reason_counts(self) -> dict[str, int]:
        """Skipped rows per kind of reason (the value left out), in order of first appearance: Trace.skip_reasons."""
        if not len(self._codes):
            return {}
        codes, first, counts = np.unique(self._codes, return_index=True, return_counts=True)
        out: dict[str, int] = {}
        for _, code, n in sorted(zip(first.tolist(), codes.tolist(), counts.tolist(), strict=True)):
            kind, shown, suffix = self._kinds[code]
            key = kind if shown != GOT_NONE else (kind + suffix).split(" (got ")[0]
            out[key] = out.get(key, 0) + n
        return out

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return RowProblems(self._rows[i], self._codes[i], self._got[i], self._kinds)
        i = operator.index(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("row problem index out of range")
        return next(self._problems(i, i + 1))

    def __iter__(self) -> Iterator[RowProblem]:
        for lo in range(0, len(self), _ITER_BLOCK):
            yield from self._problems(lo, min(len(self), lo + _ITER_BLOCK))

    def __eq__(self, other) -> bool:
        if not isinstance(other, (RowProblems, tuple)):
            return NotImplemented
        return self._equals_values(other)

    __hash__ = _ReadsAsTuple.__hash__  # defining __eq__ would otherwise unset it

    def __reduce__(self):
        return (RowProblems, (self._rows, self._codes, self._got, self._kinds))


class _Skips:
    """The skipped rows of one load as it goes: numbered reasons, and per block the rows, codes and values."""

    def __init__(self):
        self.kinds: list[tuple[str, int, str]] = []
        self._index: dict[tuple[str, int, str], int] = {}
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def code(self, kind: str, shown: int = GOT_NONE, suffix: str = "") -> int:
        key = (kind, shown, suffix)
        if key not in self._index:
            self._index[key] = len(self.kinds)
            self.kinds.append(key)
        return self._index[key]

    def add(self, rows, codes, got=None) -> None:
        """Record skipped ``rows`` with their reason ``codes`` (one code, or one per row) and offending values."""
        rows = np.asarray(rows, dtype=np.int64)
        if not rows.size:
            return
        codes = np.broadcast_to(np.asarray(codes, dtype=np.int32), rows.shape)
        got = np.full(rows.size, "", dtype=StringDType()) if got is None else np.array(
            ["" if g is None else str(g)[:_GOT_CHARS] for g in got], dtype=StringDType())
        self._parts.append((rows, codes, got))

    def result(self) -> RowProblems:
        """All skipped rows, in row order."""
        if not self._parts:
            return RowProblems([], [], [], self.kinds)
        rows, codes, got = (np.concatenate([p[k] for p in self._parts]) for k in range(3))
        order = np.argsort(rows, kind="stable")
        return RowProblems(rows[order], codes[order], got[order], self.kinds)


@dataclass(frozen=True)
class Trace:
    """A loaded trace plus what the loader kept and skipped."""

    jobs: Sequence[TraceJob]  # a tuple, or TraceJobs (columns) from a loader: they compare alike
    source: str  # file name or generator description
    format: str  # loader name
    skipped: Sequence[RowProblem] = field(default_factory=tuple)  # a tuple, or RowProblems from a loader

    @property
    def kept(self) -> int:
        return len(self.jobs)

    def head(self, n: int) -> Trace:
        """The first ``n`` jobs by arrival (the origin stays at the first job), same skipped rows."""
        return replace(self, jobs=self.jobs[: max(0, n)])

    def skip_reasons(self) -> dict[str, int]:
        """How many rows were skipped for each kind of reason (the offending value left out).

        >>> Trace((), "t.csv", "native", (RowProblem(3, "num_gpus: must be > 0 (got '0')"),)).skip_reasons()
        {'num_gpus: must be > 0': 1}
        """
        if isinstance(self.skipped, RowProblems):
            return self.skipped.reason_counts()
        return dict(Counter(p.reason.split(" (got ")[0] for p in self.skipped))

    def summary(self) -> str:
        """One line for a page or log, e.g. ``philly.csv: kept 82247 rows, skipped 0``."""
        text = f"{self.source}: kept {self.kept} rows, skipped {len(self.skipped)}"
        if self.skipped:
            text += " (" + "; ".join(f"{n} {r}" for r, n in self.skip_reasons().items()) + ")"
        return text


# Trace GPU codes -> catalog names (frenzy_core.gpus.CATALOG). Codes not listed (K80, Alibaba's anonymised G2/G3,
# MISC) have no catalog entry and map to None.
GPU_CODE_MAP: dict[str, str] = {
    "V100M32": "V100-32GB",  # Alibaba: V100 SXM2 32 GB
    "V100M16": "V100-16GB",  # Alibaba v2023: V100 16 GB
    "V100": "V100-16GB",  # Alibaba PAI v2020 "V100" (the 16 GB part; 32 GB is spelled V100M32)
    "P100": "P100-16GB",
    "T4": "T4",
    "A10": "A10",
}


def map_gpu_code(code: str | None) -> str | None:
    """A trace's GPU code as a catalog name, or None when unknown or ambiguous (``"P100|T4"``).

    >>> map_gpu_code("V100M32"), map_gpu_code("T4"), map_gpu_code("G2"), map_gpu_code("P100|T4")
    ('V100-32GB', 'T4', None, None)
    """
    from frenzy_core.gpus import CATALOG

    if code is None:
        return None
    code = code.strip()
    if code in CATALOG:
        return code
    return GPU_CODE_MAP.get(code.upper())


def _map_gpu_codes(codes: pd.Series) -> np.ndarray:
    """map_gpu_code over a column, once per distinct code (a column has a handful)."""
    table = {c: map_gpu_code(c) for c in pd.unique(codes.to_numpy())}
    return np.array([table[c] for c in codes.to_numpy()], dtype=object)


# --------------------------------------------------------------------------------------------------------------------
# Reading: source -> blocks of whole lines -> header + string cells with their row numbers

Source = str | os.PathLike | IO[str] | IO[bytes]

_BLOCK_CHARS = 1 << 22  # characters read and split at a time (~100,000 Philly rows): bounds the strings alive at once
_MAX_LINE_CHARS = 64 * (MAX_FIELD_CHARS + 1)  # longer than any row of real fields: refused without reading further
_LINE_BREAK = re.compile(r"\r\n?|\n")  # the csv module's line ends: \n, \r\n and a lone \r


def _line_end(text: str) -> int:
    """Index just past the last complete line end in ``text`` (a final \\r may be half of \\r\\n: not yet)."""
    return max(text.rfind("\n"), text.rfind("\r", 0, len(text) - 1)) + 1


def _stream_blocks(read: Callable[[int], str | bytes], name: str) -> Iterator[str]:
    """Blocks of whole lines from ``read(n)`` (bytes are decoded as UTF-8). Bytes that are not UTF-8 are kept as
    lone surrogates (U+DC80..U+DCFF) so that their row, not the whole file, is refused."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    carry, size, binary = "", 0, False
    while True:
        chunk = read(_BLOCK_CHARS)
        if not chunk:
            break
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            binary = True
            size += len(chunk)
            chunk = decoder.decode(bytes(chunk))
        elif isinstance(chunk, str):
            size += len(chunk) if chunk.isascii() else len(chunk.encode("utf-8", "surrogatepass"))
        else:
            raise SpecError("trace", f"the open file gave {type(chunk).__name__}, not text; give a CSV trace", name)
        if size > MAX_TRACE_FILE_BYTES:
            raise SpecError("trace", f"more than {MAX_TRACE_FILE_BYTES:,} bytes: over the {MAX_TRACE_FILE_BYTES:,}-byte "
                            "limit for a trace; give a smaller file (or a head of it)", name)
        carry += chunk
        cut = _line_end(carry)
        if cut == 0 and len(carry) > _MAX_LINE_CHARS:
            cut = len(carry)  # no line end in sight: the parser refuses this line by its length
        if cut:
            yield carry[:cut]
            carry = carry[cut:]
    if binary:
        carry += decoder.decode(b"", final=True)
    if carry:
        yield carry


def _file_blocks(f: IO[bytes], name: str) -> Iterator[str]:
    with f:
        yield from _stream_blocks(f.read, name)


def _text_blocks(text: str) -> Iterator[str]:
    """Blocks of whole lines of a text already in memory (slices of it, cut after a \\n)."""
    pos, n = 0, len(text)
    while pos < n:
        end = text.find("\n", pos + _BLOCK_CHARS - 1)
        end = n if end < 0 else end + 1
        yield text[pos:end]
        pos = end


def _open(source: Source) -> tuple[str, Iterator[str]]:
    """(display name, blocks of whole lines) of a path, a text (contains a line break) or an open file.

    Errors that need no reading (no such file, over the size limit) are raised here, not on the first block."""
    if isinstance(source, (bytes, bytearray)):
        source = io.BytesIO(source)
    if hasattr(source, "read"):
        name = Path(str(getattr(source, "name", "<stream>"))).name
        return name, _stream_blocks(source.read, name)
    if isinstance(source, str) and ("\n" in source or "\r" in source):
        check_size(source, "trace", MAX_TRACE_FILE_BYTES)
        return "<text>", _text_blocks(source)
    if not isinstance(source, (str, os.PathLike)):
        raise SpecError("trace", f"give a path, the file's text or an open file, not {type(source).__name__}")
    path = Path(source)
    # regular files only, size-checked before a byte is read: a device or a FIFO never reaches the reader
    f = open_user_file(path, "path", "a trace file (CSV or text)", MAX_TRACE_FILE_BYTES)
    return path.name, _file_blocks(f, path.name)


def _split_lines(block: str) -> list[str]:
    """The lines of a block (without their line ends); a block ends with a line end except the file's last."""
    lines = _LINE_BREAK.split(block) if "\r" in block else block.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _not_utf8(text: str) -> bool:
    """Whether ``text`` holds bytes that were not UTF-8 (kept as lone surrogates by ``_stream_blocks``)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_UNTERMINATED = 'unterminated quote: a field opens with " and the line ends first; close the quote or remove it'
# cells with padding to strip: present only if one of these is in the block (a full strip costs ~40 ms per 100k rows)
_PADS = (" ,", ", ", "\t,", ",\t", " \t", "\t ", " \n", "\n ", " \r", "\r ", "\t\n", "\n\t")


@dataclass
class _Table:
    """String cells of one block of a delimited file, one DataFrame column per field, plus row numbers (rows that
    did not even split into the header's fields are already in ``skips``)."""

    df: pd.DataFrame
    rows: np.ndarray  # 1-based data row of each DataFrame row
    name: str
    skips: _Skips  # the load's skipped rows


class _Reader:
    """A delimited trace file read one block of rows at a time; the header is read and checked on construction.

    With ``headerless`` the columns are ``expected`` unless the first line equals them (headerless originals, or
    copies someone gave a header). Iterating gives one ``_Table`` per block (at least one, maybe empty)."""

    def __init__(self, source: Source, *, fmt: str, expected: tuple[str, ...], required: tuple[str, ...],
                 headerless: bool = False, delimiter: str = ","):
        self.name, self._blocks = _open(source)
        self.delimiter, self.quoting = delimiter, delimiter != "\t"  # Gavel's TSV has no quoting (csv.QUOTE_NONE)
        self.records = 0  # data rows split so far (MAX_TRACE_ROWS)
        self.skips = _Skips()
        self.last_record_row = 0  # data row of the last of them (ids made of row numbers are padded to its width)
        self._lines = self._line_blocks()
        try:
            self._read_header(fmt, expected, required, headerless)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._lines.close()
        self._blocks.close()

    def _line_blocks(self) -> Iterator[tuple[int, list[str], str]]:
        """(line number of the first line, lines, the block's text) per block; the first BOM is dropped."""
        line = 1
        for k, block in enumerate(self._blocks):
            if k == 0:
                block = block.lstrip("\ufeff")
            lines = _split_lines(block) if block else []
            yield line, lines, block
            line += len(lines)

    def _read_header(self, fmt: str, expected: tuple[str, ...], required: tuple[str, ...], headerless: bool) -> None:
        expect = self.delimiter.join(expected)
        self._pending: tuple[int, list[str], str] | None = None
        for first, lines, _ in self._lines:
            k = next((i for i, ln in enumerate(lines) if ln.strip()), None)
            if k is not None:
                line_no, line = first + k, lines[k]
                break
        else:
            raise SpecError("file", f"empty {fmt} trace; expected " + ("lines of: " if headerless else "header: ")
                            + expect, self.name)
        if "\x00" in line or _not_utf8(line):
            raise SpecError("trace", "not a UTF-8 text file (its first line has bytes that are not UTF-8 text); "
                            "give a CSV trace", self.name)
        cells = self._cells(line, line_no)
        if cells is None:
            raise SpecError("header", f"line {line_no}: {_UNTERMINATED}", self.name)
        stripped = [c.strip() for c in cells]
        rest = lines[k + 1:]
        if headerless and [c.lower() for c in stripped] != list(expected):
            self.header, self.header_line = list(expected), 0
            if len(cells) != len(expected):
                raise SpecError("format", f"not a valid {fmt} trace: expected {len(expected)} fields per line "
                                f"({expect}), got {len(cells)} on the first line", self.name)
            rest = lines[k:]  # the first line is data
            line_no -= 1
        else:
            self.header, self.header_line = stripped, line_no
            dup = next((c for c in stripped if stripped.count(c) > 1), None)
            if dup is not None:
                raise SpecError("header", f"column {short_repr(dup)} appears twice; each column once", self.name)
            missing = [c for c in required if c not in stripped]
            if missing:
                raise SpecError("header", f"not a valid {fmt} trace: missing column(s) {', '.join(missing)}; "
                                f"expected header: {expect} (got: {short_repr(','.join(stripped), 120)})", self.name)
        self._pending = (line_no + 1, rest, "\n".join(rest))

    def _too_long(self, line_no: int) -> SpecError:
        return SpecError("trace", f"line {line_no}: a field of over {MAX_FIELD_CHARS:,} characters; trace fields are "
                         "short ids and numbers", self.name)

    def _cells(self, line: str, line_no: int) -> list[str] | None:
        """The cells of one line; None for a quote left open. Over-long fields raise (not a trace at all)."""
        if len(line) > _MAX_LINE_CHARS:
            raise SpecError("trace", f"line {line_no}: over {_MAX_LINE_CHARS:,} characters in one line; a trace row "
                            "is a few short fields", self.name)
        if self.quoting and '"' in line:
            try:
                cells = next(csv.reader([line], delimiter=self.delimiter, strict=True))
            except csv.Error as err:
                if "unexpected end of data" in str(err):
                    return None
                if "field larger than field limit" in str(err):
                    raise self._too_long(line_no) from None
                cells = next(csv.reader([line], delimiter=self.delimiter))  # as the csv module reads it: a"b -> a"b
        else:
            cells = line.split(self.delimiter)
        if len(line) > MAX_FIELD_CHARS and any(len(c) > MAX_FIELD_CHARS for c in cells):
            raise self._too_long(line_no)
        return cells

    def __iter__(self) -> Iterator[_Table]:
        try:
            empty = True
            for first, lines, text in itertools.chain([self._pending], self._lines):
                if lines or empty:
                    yield self._table(first, lines, text)
                    empty = False
        finally:
            self.close()

    def _regular(self, lines: list[str], text: str) -> bool:
        """Whether every line of a block is a plain row: the header's field count, no quotes, NULs, non-UTF-8
        bytes, blank lines or long fields. Such a block is split in two C calls; any other, line by line."""
        if not lines or (self.quoting and '"' in text) or "\x00" in text or _not_utf8(text):
            return False
        want = len(self.header) - 1
        counts = list(map(str.count, lines, itertools.repeat(self.delimiter)))
        return counts.count(want) == len(lines) and max(map(len, lines)) <= MAX_FIELD_CHARS

    def _table(self, first: int, lines: list[str], text: str) -> _Table:
        n, d = len(self.header), self.delimiter
        base = first - self.header_line  # data row of lines[0]
        if self._regular(lines, text):
            flat = d.join(lines).split(d)
            cols = [flat[i::n] for i in range(n)]
            rows = np.arange(base, base + len(lines), dtype=np.int64)
        else:
            records, kept = [], []
            bad: dict[str, list[int]] = {}  # reason -> rows
            for k, line in enumerate(lines):
                if not line.strip():
                    continue  # blank line: not data, but still counted in the row numbers
                row = base + k
                if "\x00" in line:
                    bad.setdefault("a NUL character in the row; trace rows are plain text", []).append(row)
                    continue
                if _not_utf8(line):
                    bad.setdefault("not UTF-8 text (bytes that are not UTF-8 in the row); save the file as UTF-8",
                                   []).append(row)
                    continue
                cells = self._cells(line, first + k)
                if cells is None:
                    bad.setdefault(_UNTERMINATED, []).append(row)
                    continue
                if len(cells) != n:
                    bad.setdefault(f"expected {n} fields, got {len(cells)}", []).append(row)
                    continue
                records.append(cells)
                kept.append(row)
            for reason, bad_rows in bad.items():
                self.skips.add(bad_rows, self.skips.code(reason))
            cols = [list(c) for c in zip(*records, strict=True)] if records else [[] for _ in range(n)]
            rows = np.array(kept, dtype=np.int64)
        self.records += len(rows)
        if self.records > MAX_TRACE_ROWS:
            raise SpecError("trace", f"more than {MAX_TRACE_ROWS:,} rows; give a smaller trace (or a head of it)",
                            self.name)
        if len(rows):
            self.last_record_row = int(rows[-1])
        if any(p in text for p in _PADS) or text[:1].isspace() or text.rstrip("\r\n")[-1:].isspace():
            cols = [[c.strip() for c in col] for col in cols]
        df = pd.DataFrame({h: np.array(c, dtype=object) for h, c in zip(self.header, cols, strict=True)},
                          dtype=object, copy=False)
        return _Table(df, rows, self.name, self.skips)


# --------------------------------------------------------------------------------------------------------------------
# Vectorised checks: each marks failing rows of a block with the first reason found


def _over_gpus() -> str:
    return f"more than {MAX_JOB_GPUS:,} GPUs (MAX_JOB_GPUS, the largest cluster the planner accepts)"


class _Checks:
    """Marks the failing rows of one block with the first reason found (a code into the load's ``_Skips``)."""

    def __init__(self, table: _Table):
        self.t = table
        self.code = np.full(len(table.df), -1, dtype=np.int32)  # -1: no reason (yet)
        self.got = np.full(len(table.df), None, dtype=object)  # the offending value of each failing row

    def flag(self, mask: np.ndarray | pd.Series, kind: str, got=None, *, raw: bool = False, suffix: str = "") -> None:
        """Give rows in ``mask`` that have no reason yet the reason ``kind`` [`` (got <value>)``]``suffix``.

        ``got``: the offending values, a column aligned with the block (cells, shown with short_repr; ``raw``: texts
        made for the message) or a callable giving them for an array of failing positions."""
        idx = np.flatnonzero(np.asarray(mask, dtype=bool) & (self.code < 0))
        if not idx.size:
            return
        self.code[idx] = self.t.skips.code(kind, GOT_NONE if got is None else GOT_RAW if raw else GOT_REPR, suffix)
        if got is not None:
            self.got[idx] = got(idx) if callable(got) else np.asarray(got, dtype=object)[idx]

    def cells(self, col: str) -> np.ndarray:
        return self.t.df[col].to_numpy()

    def number(self, col: str, *, positive: bool = False, nonneg: bool = False, integer: bool = False,
               gpus: bool = False) -> np.ndarray:
        """The column as floats; ``gpus``: a GPU count, at most MAX_JOB_GPUS."""
        s = self.t.df[col]
        x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
        got = s.to_numpy()
        self.flag(s.eq("").to_numpy(), f"{col}: missing")
        self.flag(~np.isfinite(x), f"{col}: not a number", got)
        with np.errstate(invalid="ignore"):
            if integer:
                self.flag(x != np.round(x), f"{col}: not a whole number", got)
            if positive:
                self.flag(x <= 0, f"{col}: must be > 0", got)
            if gpus:
                self.flag(x > MAX_JOB_GPUS, f"{col}: {_over_gpus()}", got)
            self.flag(np.abs(x) > MAX_TRACE_NUMBER, f"{col}: larger than {MAX_TRACE_NUMBER:.0e}", got)
            if nonneg:
                self.flag(x < 0, f"{col}: must be >= 0", got)
        return x

    def timestamp(self, col: str) -> np.ndarray:
        """Seconds since the Unix epoch of ISO-like timestamps ("2017-10-09 07:01:55"; with an offset: its UTC)."""
        s = self.t.df[col]
        secs = _epoch_seconds(s)
        got = s.to_numpy()
        lo, hi = TRACE_TIMESTAMP_RANGE
        self.flag(s.eq("").to_numpy(), f"{col}: missing")
        self.flag(np.isnan(secs), f"{col}: unparseable timestamp", got)
        with np.errstate(invalid="ignore"):
            self.flag((secs < _epoch_s(lo)) | (secs >= _epoch_s(hi)), f"{col}: outside {lo} to {hi}", got)
        return secs

    @property
    def ok(self) -> np.ndarray:
        return self.code < 0

    def commit(self) -> None:
        """Record this block's failing rows in the load's skipped rows."""
        bad = ~self.ok
        self.t.skips.add(self.t.rows[bad], self.code[bad], self.got[bad])


def _epoch_seconds(s: pd.Series) -> np.ndarray:
    """Seconds since the Unix epoch of a column of ISO-like timestamps; NaN where a cell is not one.

    Column-wise with pandas (time zones converted to UTC, naive times taken as UTC), in microseconds, so that a
    year such as 9999 is a number (and then out of range), not an overflow; one by one (``_epoch_s``) only if pandas
    refuses the whole column."""
    try:
        t = pd.to_datetime(s, errors="coerce", format="ISO8601", utc=True).dt.tz_convert(None).to_numpy()
        secs = t.astype("datetime64[us]").astype(np.int64) / 1e6
        secs[np.isnat(t)] = np.nan
        return secs
    except (ValueError, TypeError, OverflowError, AttributeError, pd.errors.OutOfBoundsDatetime):
        return np.array([_epoch_s(v) for v in s.to_numpy()], dtype=float)


def _epoch_s(text: str) -> float:
    """Seconds since the Unix epoch of one ISO-like timestamp; NaN when it is not one.

    >>> _epoch_s("1970-01-01 00:01:00"), _epoch_s("1970-01-01T01:00:00+01:00"), _epoch_s("99999-01-01")
    (60.0, 0.0, nan)
    >>> _epoch_s("9999-12-31") > 2.5e11
    True
    """
    try:
        t = pd.Timestamp(text)
        if t is pd.NaT:
            return float("nan")
        if t.tzinfo is not None:
            t = t.tz_convert(None)
        return float(t.to_datetime64().astype("datetime64[us]").astype(np.int64)) / 1e6
    except (ValueError, TypeError, OverflowError, pd.errors.OutOfBoundsDatetime):
        return float("nan")


# --------------------------------------------------------------------------------------------------------------------
# Assembling: blocks -> the valid rows' compact columns -> a sorted Trace

def _check_limit(limit) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise SpecError("limit", f"must be a non-negative integer or None, got {short_repr(limit)}")


def _shared(values: np.ndarray) -> np.ndarray:
    """An object column whose equal strings are one object: a label repeated on 5M rows costs 8 B a row, not 60."""
    codes, uniques = pd.factorize(values)
    out = np.full(len(values), None, dtype=object)
    known = codes >= 0
    out[known] = np.asarray(uniques, dtype=object)[codes[known]]
    return out


def _read(reader: _Reader, checks: Callable[[_Checks], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Run a loader's column checks on each block and keep, per column, only the rows that passed.

    ``checks`` gets a block's ``_Checks``, flags its bad rows and returns its columns (any TraceJob field, or the
    loader's own); a ``num_gpus`` column (floats) is held to MAX_JOB_GPUS here and stored as int32, ``source_row``
    is added, ``job_id`` is stored as StringDType and other string columns share their repeated values. The columns
    of all blocks are concatenated in file order."""
    parts: dict[str, list[np.ndarray]] = {}
    for table in reader:
        c = _Checks(table)
        cols = checks(c)
        if "num_gpus" in cols:  # a job larger than any cluster is a data error, not a job to stretch over months
            with np.errstate(invalid="ignore"):
                c.flag(~(np.asarray(cols["num_gpus"], dtype=float) <= MAX_JOB_GPUS), f"num_gpus: {_over_gpus()}")
        ok = c.ok
        c.commit()
        cols["source_row"] = table.rows
        for k, v in cols.items():
            v = np.asarray(v)[ok]
            if k in ("num_gpus", "source_row"):
                v = v.astype(np.int32)  # <= MAX_JOB_GPUS; rows <= lines <= MAX_TRACE_FILE_BYTES
            elif k == "job_id":
                v = v.astype(StringDType())
            elif v.dtype == object:
                v = _shared(v)
            parts.setdefault(k, []).append(v)
    return {k: np.concatenate(v) for k, v in parts.items()}


def _drop_duplicates(reader: _Reader, cols: dict[str, np.ndarray], col: str) -> dict[str, np.ndarray]:
    """Skip every later row whose ``job_id`` an earlier kept row already has (the file's order)."""
    ids = cols["job_id"]
    _, first = np.unique(ids, return_index=True)  # a stable sort: the index of each id's first row
    dup = np.ones(len(ids), dtype=bool)
    dup[first] = False
    if not dup.any():
        return cols
    reader.skips.add(cols["source_row"][dup], reader.skips.code(f"{col}: duplicate id", GOT_REPR), ids[dup].tolist())
    return {k: v[~dup] for k, v in cols.items()}


_OPTIONAL = ("gpu_type", "model", "tokens", "job_type", "batch_size")


def _finish(reader: _Reader, fmt: str, cols: dict[str, np.ndarray], *, limit: int | None,
            id_prefix: str | None = None) -> Trace:
    """Sort the kept rows by (arrival, job_id), apply ``limit``, shift the origin to 0 and build the Trace.

    With ``id_prefix`` the ids are ``<prefix><row>``, the row zero-padded to the width of the file's last row, so
    sorting by (arrival, row) is sorting by (arrival, id) and the ids need not exist as strings."""
    arrival = np.asarray(cols["arrival_s"], dtype=float)
    if id_prefix is not None:
        order = np.lexsort((cols["source_row"], arrival))
    else:
        cols["job_id"] = np.asarray(cols["job_id"]).astype(StringDType())  # sorts as Python sorts str: by code point
        order = np.lexsort((cols["job_id"], arrival))
    if limit is not None:
        order = order[:limit]
    out = {k: np.asarray(v)[order] for k, v in cols.items() if k in _TRACEJOB_FIELDS}
    out["arrival_s"] = arrival[order]
    if len(order):
        out["arrival_s"] = out["arrival_s"] - out["arrival_s"][0]
    out["duration_s"] = np.asarray(out["duration_s"], dtype=float)
    for k in _OPTIONAL:
        if k in out:
            v = out[k].astype(object)
            v[pd.isna(v)] = None  # NaN -> None
            out[k] = v
    width = len(str(reader.last_record_row)) if id_prefix is not None else 0
    return Trace(jobs=TraceJobs(out, id_prefix, width), source=reader.name, format=fmt, skipped=reader.skips.result())


# --------------------------------------------------------------------------------------------------------------------
# Loaders

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def load_philly(source: Source, *, limit: int | None = None) -> Trace:
    """Microsoft Philly jobs as Sia ships them (``traces/philly.csv``): submit timestamp, run time (s), GPUs.

    ``gpu_time`` and ``cluster`` (the VC hash) are optional; job ids are ``philly-<row>``; Philly does not record GPU
    types (its cluster mixed K80/P100s), so ``gpu_type`` is None.
    """
    _check_limit(limit)
    reader = _Reader(source, fmt="philly", expected=PHILLY_COLUMNS, required=("timestamp", "duration", "num_gpus"))

    def checks(c: _Checks) -> dict[str, np.ndarray]:
        return {"arrival_s": c.timestamp("timestamp"), "duration_s": c.number("duration", nonneg=True),
                "num_gpus": c.number("num_gpus", positive=True, integer=True, gpus=True)}

    cols = _read(reader, checks)
    return _finish(reader, "philly", cols, limit=limit, id_prefix="philly-")


SIA_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")

# Sia workloads give no run time: a job runs until its application's fixed amount of work is done. In Sia's simulator
# (siasosp23/artifacts @ aaf7a0de, sia-simulator/applications.py, `Application` and `APPLICATIONS`) that work is the
# statistical "progress" of `max_epochs` epochs, measured in iterations at the application's initial batch size
# (`init_batch_size` = the smallest batch with a validation-*.csv curve; `target_metric` is None, so a job completes
# at epoch `max_epochs - 1`). One application's GPU-hours are therefore
#     iteration[max_epochs - 1] of validation-<init_batch_size>.csv  x  step_time of placement "1" at that local batch
# (interpolated in local_bsz as Sia's `get_throughput` does) on one T4 of the aws cluster (g4dn.12xlarge), / 3600.
# bench/step_time_calibration.py (`sia_app_t4_hours`) recomputes every row from the CSVs; tests/test_traces.py
# recomputes cifar10 by hand. These replace the older Philly-median GPU-times (cifar10 0.217, 5x too little work).
# A trace names no GPU type, so the simulator runs these hours on the cluster's reference type.
SIA_APP_GPU_HOURS: dict[str, float] = {
    "cifar10": 1.119,  # batch 128, max_epochs 100: 39,062 iterations x 0.1031 s (local_bsz 91 0.0759 s, 129 0.1039 s)
    "ncf": 0.401,  # batch 256, max_epochs 10: 194,174 iterations x 0.00743 s
    "deepspeech2": 5.400,  # batch 20, max_epochs 80: 28,536 iterations x 0.6812 s
    "bert": 3.782,  # batch 12, max_epochs 2: 14,774 iterations x 0.9215 s
    "yolov3": 9.372,  # batch 8, max_epochs 50: 103,444 iterations x 0.3261 s
    "imagenet": 147.9,  # batch 200, max_epochs 90: 576,525 iterations x 0.9235 s (200 = the T4's largest local_bsz)
}


def load_sia(source: Source, *, limit: int | None = None, app_gpu_hours: Mapping[str, float] | None = None) -> Trace:
    """A Sia workload (``workloads/<trace>/workload-N.csv``: name,time,application,num_replicas,batch_size).

    ``num_gpus`` = ``num_replicas``; ``job_type`` = the application. Sia gives no duration, so
    ``duration_s = app_gpu_hours[application] * 3600 / num_replicas`` with ``SIA_APP_GPU_HOURS`` by default (see
    its comment); an application missing from the table is a skipped row.
    """
    _check_limit(limit)
    table = dict(SIA_APP_GPU_HOURS if app_gpu_hours is None else app_gpu_hours)
    known = ", ".join(sorted(table))
    reader = _Reader(source, fmt="sia", expected=SIA_COLUMNS, required=("name", "time", "application", "num_replicas"))

    def checks(c: _Checks) -> dict[str, np.ndarray]:
        df = c.t.df
        c.flag(df["name"].eq("").to_numpy(), "name: missing")
        arrival = c.number("time", nonneg=True)
        gpus = c.number("num_replicas", positive=True, integer=True, gpus=True)
        app = df["application"]
        c.flag(app.eq("").to_numpy(), "application: missing")
        gpu_h = app.map(table).to_numpy(dtype=float)
        apps = app.to_numpy()
        c.flag(np.isnan(gpu_h), "application: no typical GPU-hours known", apps, suffix=f"; known: {known}")
        with np.errstate(invalid="ignore", divide="ignore"):
            duration = gpu_h * 3600.0 / gpus
        out = {"arrival_s": arrival, "job_id": df["name"].to_numpy(), "num_gpus": gpus, "duration_s": duration,
               "job_type": apps}
        if "batch_size" in df:  # kept as given (None when not a positive whole number): only sia-apps needs it
            bsz = pd.to_numeric(df["batch_size"], errors="coerce").to_numpy(dtype=float)
            out["batch_size"] = np.array([int(b) if np.isfinite(b) and 0 < b <= MAX_TRACE_NUMBER and b == round(b)
                                          else None for b in bsz], dtype=object)
        return out

    cols = _read(reader, checks)
    cols = _drop_duplicates(reader, cols, "name")
    return _finish(reader, "sia", cols, limit=limit)


HELIOS_COLUMNS = ("job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "node_num", "state", "submit_time",
                  "start_time", "end_time", "duration", "queue")


def load_helios(source: Source, *, limit: int | None = None) -> Trace:
    """SenseTime Helios ``cluster_log.csv`` (S-Lab-System-Group/HeliosData; schema of its README).

    Uses ``job_id``, ``gpu_num``, ``submit_time`` (arrival) and ``duration`` (run time, s); the other columns are
    optional. CPU-only jobs (``gpu_num`` == 0) are skipped with the reason "non-GPU job". Every final state is kept:
    failed and cancelled jobs held their GPUs too. Helios records no GPU type per job.
    """
    _check_limit(limit)
    reader = _Reader(source, fmt="helios", expected=HELIOS_COLUMNS,
                     required=("job_id", "gpu_num", "submit_time", "duration"))

    def checks(c: _Checks) -> dict[str, np.ndarray]:
        df = c.t.df
        c.flag(df["job_id"].eq("").to_numpy(), "job_id: missing")
        gpus = c.number("gpu_num", nonneg=True, integer=True, gpus=True)
        c.flag(gpus == 0, "non-GPU job (gpu_num == 0)")
        arrival = c.timestamp("submit_time")
        duration = c.number("duration", nonneg=True)
        return {"arrival_s": arrival, "job_id": df["job_id"].to_numpy(), "num_gpus": gpus, "duration_s": duration}

    cols = _read(reader, checks)
    cols = _drop_duplicates(reader, cols, "job_id")
    return _finish(reader, "helios", cols, limit=limit)


ALIBABA2020_TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu",
                            "plan_mem", "plan_gpu", "gpu_type")


def load_alibaba2020(source: Source, *, limit: int | None = None) -> Trace:
    """Alibaba PAI 2020 ``pai_task_table`` (headerless in the original; a header line equal to the schema is allowed).

    Tasks are grouped into jobs by ``job_name``: arrival = the earliest task ``start_time`` (Unix s), duration = latest
    ``end_time`` minus that, GPUs = ceil(sum of ``inst_num * plan_gpu / 100``) (``plan_gpu`` is percent of one GPU,
    so fractional jobs round up to 1). ``gpu_type`` is the catalog name when all GPU tasks agree, else None. Task rows
    without a GPU (``plan_gpu`` empty or 0) are skipped as "non-GPU task"; rows and jobs are 1:N, so ``kept`` counts
    jobs and ``source_row`` is the job's first task row. A task, or a job's tasks together, over ``MAX_JOB_GPUS``
    GPUs is skipped (a job: at its first task row).
    """
    _check_limit(limit)
    reader = _Reader(source, fmt="alibaba2020", expected=ALIBABA2020_TASK_COLUMNS,
                     required=ALIBABA2020_TASK_COLUMNS, headerless=True)

    def checks(c: _Checks) -> dict[str, np.ndarray]:
        df = c.t.df
        c.flag(df["job_name"].eq("").to_numpy(), "job_name: missing")
        plan, inst = df["plan_gpu"], df["inst_num"]
        plan_raw = pd.to_numeric(plan, errors="coerce").to_numpy(dtype=float)
        c.flag(plan.eq("").to_numpy() | (plan_raw == 0), "non-GPU task (plan_gpu empty or 0)")
        with np.errstate(over="ignore", invalid="ignore"):  # 1e300 x 1e300 is inf: over the limit, as it should be
            task_gpus = pd.to_numeric(inst, errors="coerce").to_numpy(dtype=float) * plan_raw / 100.0
        inst_cells, plan_cells = inst.to_numpy(), plan.to_numpy()
        c.flag(task_gpus > MAX_JOB_GPUS, f"inst_num x plan_gpu / 100: {_over_gpus()}", raw=True,
               got=lambda idx: [f"{short_repr(a)} x {short_repr(b)}" for a, b in zip(inst_cells[idx], plan_cells[idx],
                                                                                   strict=True)])
        plan_gpu = c.number("plan_gpu", positive=True)
        n_inst = c.number("inst_num", positive=True, integer=True)
        start = c.number("start_time", nonneg=True)
        end = c.number("end_time", nonneg=True)
        with np.errstate(invalid="ignore"):
            c.flag(end < start, "end_time: before start_time")
        return {"job": df["job_name"].to_numpy(), "start": start, "end": end, "gpu": n_inst * plan_gpu / 100.0,
                "type": _map_gpu_codes(df["gpu_type"])}

    task = _read(reader, checks)
    tasks = pd.DataFrame({"job": task["job"], "start": task["start"], "end": task["end"], "gpu": task["gpu"],
                          "type": task["type"], "null": pd.isna(task["type"]), "row": task["source_row"]})
    jobs = tasks.groupby("job", sort=False).agg(start=("start", "min"), end=("end", "max"), gpu=("gpu", "sum"),
                                                row=("row", "min"), ntypes=("type", "nunique"),
                                                gtype=("type", "first"), nnull=("null", "sum"))
    gpus = np.maximum(1, np.ceil(jobs["gpu"].to_numpy(dtype=float) - 1e-9))
    over = ~(gpus <= MAX_JOB_GPUS)
    names, rows = jobs.index.to_numpy(dtype=object), jobs["row"].to_numpy()
    reader.skips.add(rows[over], reader.skips.code(f"GPUs of the job's tasks together: {_over_gpus()}", GOT_RAW),
                     [f"{g:,.0f} for job {short_repr(n)}" for g, n in zip(gpus[over].tolist(), names[over].tolist(),
                                                                           strict=True)])
    keep = ~over
    start = jobs["start"].to_numpy(dtype=float)
    gtype = np.where((jobs["ntypes"] == 1) & (jobs["nnull"] == 0), jobs["gtype"], None)
    cols = {"arrival_s": start[keep], "job_id": names[keep], "num_gpus": gpus[keep].astype(np.int32),
            "duration_s": jobs["end"].to_numpy(dtype=float)[keep] - start[keep], "gpu_type": gtype[keep],
            "source_row": rows[keep].astype(np.int32)}
    return _finish(reader, "alibaba2020", cols, limit=limit)


ALIBABA2023_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                       "creation_time", "deletion_time", "scheduled_time")


def load_alibaba2023(source: Source, *, limit: int | None = None) -> Trace:
    """Alibaba PAI GPU v2023 pod list (``openb_pod_list_*.csv``; times in s from the trace start).

    arrival = ``creation_time``; duration = ``deletion_time - scheduled_time`` (the time the pod held its GPUs).
    Pods with ``num_gpu`` == 0 are skipped as "non-GPU pod", pods never scheduled (empty ``scheduled_time``, phase
    Pending) as "never scheduled". A pod sharing a fraction of one GPU (``gpu_milli`` < 1000) counts as 1 GPU: our
    simulator does not share GPUs. ``gpu_spec`` maps to a catalog name when it names one type, else None.
    (``openb_pod_list_multigpu50.csv`` has only 5 columns and no times, so it is rejected as not this format.)
    """
    _check_limit(limit)
    reader = _Reader(source, fmt="alibaba2023", expected=ALIBABA2023_COLUMNS,
                     required=("name", "num_gpu", "creation_time", "deletion_time", "scheduled_time"))

    def checks(c: _Checks) -> dict[str, np.ndarray]:
        df = c.t.df
        c.flag(df["name"].eq("").to_numpy(), "name: missing")
        gpus = c.number("num_gpu", nonneg=True, integer=True, gpus=True)
        c.flag(gpus == 0, "non-GPU pod (num_gpu == 0)")
        arrival = c.number("creation_time", nonneg=True)
        c.flag(df["scheduled_time"].eq("").to_numpy(), "never scheduled (scheduled_time empty)")
        sched = c.number("scheduled_time", nonneg=True)
        deleted = c.number("deletion_time", nonneg=True)
        with np.errstate(invalid="ignore"):
            c.flag(deleted < sched, "deletion_time: before scheduled_time")
        out = {"arrival_s": arrival, "job_id": df["name"].to_numpy(), "num_gpus": gpus, "duration_s": deleted - sched}
        if "gpu_spec" in df:
            out["gpu_type"] = _map_gpu_codes(df["gpu_spec"])
        return out

    cols = _read(reader, checks)
    cols = _drop_duplicates(reader, cols, "name")
    return _finish(reader, "alibaba2023", cols, limit=limit)


GAVEL_COLUMNS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
                 "scale_factor")
_GAVEL_THROUGHPUTS = Path(__file__).parent / "data" / "traces" / "gavel_throughputs.json"


def gavel_throughputs(reference_gpu: str = "v100") -> dict[str, dict[int, float]]:
    """Gavel's isolated throughputs (steps/s) on ``reference_gpu`` (v100, p100, k80): job_type -> scale -> steps/s."""
    data = load_json(_GAVEL_THROUGHPUTS.read_bytes(), "gavel_throughputs.json")
    if reference_gpu not in data or reference_gpu.startswith("_"):
        raise SpecError("reference_gpu", f"Gavel has throughputs for v100, p100, k80; got {reference_gpu!r}")
    return {jt: {int(s): v for s, v in per.items()} for jt, per in data[reference_gpu].items()}


def gavel_duration_s(job_type: str, scale_factor: int, total_steps: float,
                     throughputs: Mapping[str, Mapping[int, float]]) -> float | None:
    """Run time of ``total_steps`` at Gavel's measured throughput; None for an unknown job type.

    Where Gavel measured no throughput for this scale factor (A3C and CycleGAN only at 1 GPU, nothing above 8 GPUs),
    we assume linear scaling from the largest measured scale factor below it.

    >>> gavel_duration_s("A3C", 2, 100.0, {"A3C": {1: 5.0}})
    10.0
    """
    per = throughputs.get(job_type)
    if not per:
        return None
    base = max((s for s in per if s <= scale_factor), default=min(per))
    steps_per_s = per[base] * scale_factor / base
    return total_steps / steps_per_s if steps_per_s > 0 else None


def load_gavel(source: Source, *, limit: int | None = None, reference_gpu: str = "v100",
               throughputs: Mapping[str, Mapping[int, float]] | None = None) -> Trace:
    """A Gavel ``.trace`` (tab-separated, headerless; the 7-field layout of gavel@c4fa400 ``scheduler/utils.py``:
    job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor).

    ``num_gpus`` = ``scale_factor``; ``job_type`` keeps Gavel's label ("ResNet-50 (batch size 64)"). Gavel gives
    work in steps, not time: ``duration_s = total_steps / throughput`` with Gavel's measured isolated throughput on
    ``reference_gpu`` (default V100, the GPU of Gavel's homogeneous Philly cluster spec), via ``gavel_duration_s``.
    ``gpu_type`` is None: Gavel jobs are not tied to a GPU type.
    """
    _check_limit(limit)
    tput = gavel_throughputs(reference_gpu) if throughputs is None else throughputs
    reader = _Reader(source, fmt="gavel", expected=GAVEL_COLUMNS, required=GAVEL_COLUMNS, headerless=True,
                     delimiter="\t")
    per_step: dict[tuple[str, int], float | None] = {}  # seconds per step, per (job type, scale factor)

    def checks(c: _Checks) -> dict[str, np.ndarray]:
        df = c.t.df
        c.flag(df["job_type"].eq("").to_numpy(), "job_type: missing")
        steps = c.number("total_steps", positive=True)
        arrival = c.number("arrival_time", nonneg=True)
        scale = c.number("scale_factor", positive=True, integer=True, gpus=True)
        types = df["job_type"].to_numpy()
        duration = np.full(len(types), np.nan)
        for i in np.flatnonzero(c.ok):
            key = (types[i], int(scale[i]))
            if key not in per_step:
                per_step[key] = gavel_duration_s(key[0], key[1], 1.0, tput)
            if per_step[key] is not None:
                duration[i] = steps[i] * per_step[key]
        c.flag(np.isnan(duration), "job_type: no Gavel throughput for it", types)
        return {"arrival_s": arrival, "num_gpus": scale, "duration_s": duration, "job_type": types}

    cols = _read(reader, checks)
    return _finish(reader, "gavel", cols, limit=limit, id_prefix="gavel-")


NATIVE_COLUMNS = ("job_id", "arrival_s", "num_gpus", "duration_s", "gpu_type", "model", "tokens")


def load_native(source: Source, *, limit: int | None = None) -> Trace:
    """Our own CSV: ``job_id,arrival_s,num_gpus,duration_s`` plus optional ``gpu_type,model,tokens`` columns.

    ``gpu_type`` is a catalog name (or a trace code such as V100M32) or empty; ``model`` a zoo model name passed
    through unchecked (the workload mapping validates it); ``tokens`` a positive integer or empty.

    >>> load_native("job_id,arrival_s,num_gpus,duration_s\\nb,70,2,60\\na,10,1,3600\\n").jobs[0]
    TraceJob(job_id='a', arrival_s=0.0, num_gpus=1, duration_s=3600.0, gpu_type=None, source_row=2, model=None, \
tokens=None, job_type=None, batch_size=None)
    """
    _check_limit(limit)
    reader = _Reader(source, fmt="native", expected=NATIVE_COLUMNS, required=NATIVE_COLUMNS[:4])

    def checks(c: _Checks) -> dict[str, np.ndarray]:
        df = c.t.df
        c.flag(df["job_id"].eq("").to_numpy(), "job_id: missing")
        out = {"arrival_s": c.number("arrival_s", nonneg=True), "job_id": df["job_id"].to_numpy(),
               "num_gpus": c.number("num_gpus", positive=True, integer=True, gpus=True),
               "duration_s": c.number("duration_s", nonneg=True)}
        if "gpu_type" in df:
            raw = df["gpu_type"]
            mapped = _map_gpu_codes(raw)
            c.flag(raw.ne("").to_numpy() & pd.isna(mapped), "gpu_type: not in the GPU catalog", raw.to_numpy())
            out["gpu_type"] = mapped
        if "model" in df:
            names = df["model"].to_numpy()
            out["model"] = np.where(names == "", None, names)
        if "tokens" in df:
            raw = df["tokens"]
            tok = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
            given = raw.ne("").to_numpy()
            with np.errstate(invalid="ignore"):
                whole = np.isfinite(tok) & (tok > 0) & (tok == np.round(tok))
                c.flag(given & ~whole, "tokens: must be a positive whole number", raw.to_numpy())
                c.flag(given & (tok > MAX_TRACE_NUMBER), f"tokens: larger than {MAX_TRACE_NUMBER:.0e}", raw.to_numpy())
            good = whole & (tok <= MAX_TRACE_NUMBER)
            out["tokens"] = np.array([int(v) if g else None for v, g in zip(tok.tolist(), good.tolist(),
                                                                            strict=True)], dtype=object)
        return out

    cols = _read(reader, checks)
    cols = _drop_duplicates(reader, cols, "job_id")
    return _finish(reader, "native", cols, limit=limit)


Loader = Callable[..., Trace]

LOADERS: dict[str, Loader] = {
    "philly": load_philly,
    "sia": load_sia,
    "helios": load_helios,
    "alibaba2020": load_alibaba2020,
    "alibaba2023": load_alibaba2023,
    "gavel": load_gavel,
    "native": load_native,
}


def load_trace(path: Source, fmt: str, *, limit: int | None = None, **options) -> Trace:
    """Load ``path`` with the loader registered for ``fmt`` (a key of ``LOADERS``)."""
    try:
        loader = LOADERS[fmt]
    except KeyError:
        raise SpecError("format", f"unknown trace format {fmt!r}; choose one of: {', '.join(LOADERS)}") from None
    return loader(path, limit=limit, **options)


# --------------------------------------------------------------------------------------------------------------------
# Bundled samples

_BUNDLED_DIR = Path(__file__).parent / "data" / "traces"
_BUNDLED: dict[str, tuple[str, str]] = {
    "philly-2000": ("philly-2000.csv", "philly"),
    "sia-philly-workload-1": ("sia-philly-workload-1.csv", "sia"),
    "sia-saturn-workload-1": ("sia-saturn-workload-1.csv", "sia"),
    "sia-saturn-workload-2": ("sia-saturn-workload-2.csv", "sia"),
    "gavel-msr-51b7ef": ("gavel-msr-51b7ef.trace", "gavel"),
}


def bundled_traces() -> dict[str, tuple[Path, str]]:
    """Sample traces shipped with the package: name -> (path, format). Sources: data/traces/ATTRIBUTION.md.

    >>> bundled_traces()["philly-2000"][1]
    'philly'
    """
    return {name: (_BUNDLED_DIR / file, fmt) for name, (file, fmt) in _BUNDLED.items()}


# --------------------------------------------------------------------------------------------------------------------
# Synthetic traces

# Philly GPU-count mix (sia-sosp23/traces/philly.csv, 82,247 jobs; the few 12/24-GPU jobs left out).
PHILLY_GPU_COUNT_DIST: dict[int, float] = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 16: 199, 32: 67, 64: 6, 128: 3}
# Log-normal run time: median 1,144 s is Philly's median job; sigma 1.5 puts the 90th percentile near 2 h.
DEFAULT_DURATION_DIST: tuple[float, float] = (1144.0, 1.5)  # (median_s, sigma of ln duration)


def offered_load(trace: Trace, cluster_gpus: int) -> float:
    """GPU-seconds asked for / GPU-seconds available over the arrival window: sum(g*d) / (cluster_gpus * span)."""
    if len(trace.jobs) < 2:
        raise SpecError("trace", "offered load needs at least 2 jobs")
    jobs = trace.jobs
    span = jobs[-1].arrival_s - jobs[0].arrival_s
    if isinstance(jobs, TraceJobs):  # columns: one dot product, not a million TraceJob values
        work = float(np.dot(jobs.column("num_gpus").astype(float), jobs.column("duration_s")))
    else:
        work = sum(j.num_gpus * j.duration_s for j in jobs)
    return work / (cluster_gpus * span) if span > 0 else math.inf


def synthetic_trace(num_jobs: int, load: float, cluster_gpus: int, seed: int = 0, *,
                    duration_dist: tuple[float, float] = DEFAULT_DURATION_DIST,
                    gpu_count_dist: Mapping[int, float] | None = None) -> Trace:
    """A Philly-like trace whose offered load on ``cluster_gpus`` GPUs is ``load``; same seed, same trace.

    Durations are log-normal (``duration_dist`` = (median_s, sigma)); GPU counts are drawn from ``gpu_count_dist``
    (weights; default Philly's mix) after dropping counts larger than the cluster. Arrivals are a Poisson process
    whose rate is set so that ``offered_load`` equals ``load``: we draw exponential gaps and rescale them so the last
    arrival lands at span = sum(g*d) / (load * cluster_gpus) -- i.e. a Poisson process conditioned on its n-th
    arrival at that time -- so the achieved load matches the target exactly, not only in expectation.

    >>> t = synthetic_trace(100, 0.8, 64, seed=1)
    >>> t.kept, round(offered_load(t, 64), 6), t.jobs[0].arrival_s
    (100, 0.8, 0.0)
    """
    if not isinstance(num_jobs, int) or num_jobs < 2:
        raise SpecError("num_jobs", f"must be an integer >= 2, got {num_jobs!r}")
    if not load > 0:
        raise SpecError("load", f"must be > 0, got {load!r}")
    if not isinstance(cluster_gpus, int) or cluster_gpus < 1:
        raise SpecError("cluster_gpus", f"must be a positive integer, got {cluster_gpus!r}")
    median_s, sigma = duration_dist
    if not (median_s > 0 and sigma >= 0):
        raise SpecError("duration_dist", f"needs median_s > 0 and sigma >= 0, got {duration_dist!r}")
    weights = {int(g): float(w) for g, w in (gpu_count_dist or PHILLY_GPU_COUNT_DIST).items()
               if 0 < int(g) <= cluster_gpus and w > 0}
    if not weights:
        raise SpecError("gpu_count_dist", f"has no positive-weight GPU count <= cluster_gpus ({cluster_gpus})")
    rng = np.random.default_rng(seed)
    counts = np.array(sorted(weights))
    probs = np.array([weights[g] for g in counts]) / sum(weights.values())
    gpus = rng.choice(counts, size=num_jobs, p=probs)
    duration = rng.lognormal(mean=math.log(median_s), sigma=sigma, size=num_jobs)
    span_s = float(np.sum(gpus * duration)) / (load * cluster_gpus)
    gaps = rng.exponential(1.0, size=num_jobs - 1)
    arrival = np.concatenate([[0.0], np.cumsum(gaps) * (span_s / gaps.sum())])
    width = len(str(num_jobs - 1))
    jobs = tuple(TraceJob(job_id=f"syn-{i:0{width}d}", arrival_s=float(a), num_gpus=int(g), duration_s=float(d),
                          source_row=i + 1)
                 for i, (a, g, d) in enumerate(zip(arrival, gpus, duration, strict=True)))
    desc = (f"synthetic(n={num_jobs}, load={load}, cluster_gpus={cluster_gpus}, seed={seed}, "
            f"median_s={median_s}, sigma={sigma})")
    return Trace(jobs=jobs, source=desc, format="synthetic")
