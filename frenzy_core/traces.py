"""Job traces: what arrived when, asking for how many GPUs, running for how long; loaders for public formats.

Every loader is a pure function ``load_<fmt>(source, *, limit=None, ...) -> Trace``. ``source`` is a path, the file's
text (any ``str`` containing a newline) or an open text file. Loaders share one contract:

* arrivals are shifted so the first kept job arrives at 0 s; jobs are sorted by arrival (stable), ties by ``job_id``;
* a malformed row (missing field, non-numeric value, GPUs <= 0, negative duration, unparseable timestamp) is skipped
  and reported as ``RowProblem(row, reason)``; ``row`` is 1-based and counts file lines after the header, so row N is
  line N+1 of a file with a header (blank lines are ignored but still counted);
* a file that is not the format at all (wrong header, wrong field count) or is empty raises ``SpecError``;
* ``limit`` keeps the ``limit`` earliest-arriving valid jobs (traces such as Philly are not sorted on disk).

Parsing is vectorised with pandas: values are coerced column-wise and only the rows that fail are visited in Python,
so the full 82,247-row Philly trace loads in about 0.3 s. Formats, sources and assumptions: ``docs/traces.md``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from frenzy_core.errors import SpecError
from frenzy_core.limits import (
    MAX_FIELD_CHARS,
    MAX_JOB_GPUS,
    MAX_TRACE_FILE_BYTES,
    MAX_TRACE_NUMBER,
    MAX_TRACE_ROWS,
    check_size,
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


@dataclass(frozen=True)
class RowProblem:
    """A malformed row that the loader skipped, and why."""

    row: int  # 1-based data row (the header is row 0)
    reason: str


@dataclass(frozen=True)
class Trace:
    """A loaded trace plus what the loader kept and skipped."""

    jobs: tuple[TraceJob, ...]
    source: str  # file name or generator description
    format: str  # loader name
    skipped: tuple[RowProblem, ...] = field(default_factory=tuple)

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


# --------------------------------------------------------------------------------------------------------------------
# Reading: source -> header + string records with their row numbers

Source = str | os.PathLike | IO[str]


def _read_source(source: Source) -> tuple[str, str]:
    """(text, display name) of a path, a text blob (contains a newline) or a file-like object."""
    if hasattr(source, "read"):
        name = Path(str(getattr(source, "name", "<stream>"))).name
        text = source.read(MAX_TRACE_FILE_BYTES + 1)
        check_size(text, "trace", MAX_TRACE_FILE_BYTES, name)
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError:
                raise SpecError("trace", "not a UTF-8 text file; give a CSV trace", name) from None
        return text, name
    if isinstance(source, str) and "\n" in source:
        check_size(source, "trace", MAX_TRACE_FILE_BYTES)
        return source, "<text>"
    path = Path(source)
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_FILE_BYTES:
            raise SpecError("trace", f"{size:,} bytes is over the {MAX_TRACE_FILE_BYTES:,}-byte limit for a trace; "
                            "give a smaller file (or a head of it)", path.name)
        return path.read_text(encoding="utf-8-sig"), path.name
    except FileNotFoundError:
        raise SpecError("path", f"no such trace file: {path}") from None
    except (IsADirectoryError, UnicodeDecodeError) as err:
        raise SpecError("path", f"cannot read {path} as a text trace ({err.__class__.__name__})") from None


class _bounded_rows:
    """A csv.reader whose errors (a field over the csv module's limit, a stray NUL) become SpecErrors with the line.

    Fields longer than MAX_FIELD_CHARS are refused here too: no trace column needs more than a short id or number.
    """

    def __init__(self, reader, name: str):
        self.reader, self.name = reader, name

    @property
    def line_num(self) -> int:
        return self.reader.line_num

    def __iter__(self):
        return self

    def __next__(self) -> list[str]:
        try:
            rec = next(self.reader)
        except csv.Error as err:
            raise SpecError("trace", f"line {self.reader.line_num}: not a readable CSV row "
                            f"({short_repr(str(err), 60)}); keep fields under {MAX_FIELD_CHARS:,} characters",
                            self.name) from None
        if any(len(cell) > MAX_FIELD_CHARS for cell in rec):
            raise SpecError("trace", f"line {self.reader.line_num}: a field of over {MAX_FIELD_CHARS:,} characters; "
                            "trace fields are short ids and numbers", self.name)
        return rec


@dataclass
class _Table:
    """String cells of a delimited file, one DataFrame column per field, plus row numbers and row problems."""

    df: pd.DataFrame
    rows: np.ndarray  # 1-based data row of each DataFrame row
    name: str
    problems: list[RowProblem]


def _parse(source: Source, *, fmt: str, expected: tuple[str, ...], required: tuple[str, ...],
           headerless: bool = False, delimiter: str = ",") -> _Table:
    """Split a file into string records. With ``headerless`` the columns are ``expected`` unless the first line
    equals them (headerless originals, or copies someone gave a header)."""
    text, name = _read_source(source)
    expect = ",".join(expected) if delimiter == "," else "\t".join(expected)
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = _bounded_rows(csv.reader(io.StringIO(text.lstrip("\ufeff")), delimiter=delimiter, quoting=quoting), name)
    header: list[str] | None = None
    header_line = 0
    records: list[list[str]] = []
    rows: list[int] = []
    problems: list[RowProblem] = []
    for rec in reader:
        if not rec or (len(rec) == 1 and not rec[0].strip()):
            continue  # blank line: not data, but still counted in the row numbers
        if header is None:
            header_line = reader.line_num
            cells = [c.strip() for c in rec]
            if headerless and [c.lower() for c in cells] != list(expected):
                header, header_line = list(expected), 0
                if len(rec) != len(expected):
                    raise SpecError("format", f"not a valid {fmt} trace: expected {len(expected)} fields per line "
                                    f"({expect}), got {len(rec)} on the first line", name)
            else:
                header = cells
                dup = next((c for c in cells if cells.count(c) > 1), None)
                if dup is not None:
                    raise SpecError("header", f"column {short_repr(dup)} appears twice; each column once", name)
                missing = [c for c in required if c not in header]
                if missing:
                    raise SpecError("header", f"not a valid {fmt} trace: missing column(s) {', '.join(missing)}; "
                                    f"expected header: {expect} (got: {short_repr(','.join(header), 120)})", name)
                continue
        row = reader.line_num - header_line
        if len(rec) != len(header):
            problems.append(RowProblem(row, f"expected {len(header)} fields, got {len(rec)}"))
            continue
        if len(records) >= MAX_TRACE_ROWS:
            raise SpecError("trace", f"more than {MAX_TRACE_ROWS:,} rows; give a smaller trace (or a head of it)",
                            name)
        records.append(rec)
        rows.append(row)
    if header is None:
        raise SpecError("file", f"empty {fmt} trace; expected " + ("lines of: " if headerless else "header: ") + expect,
                        name)
    df = pd.DataFrame(records, columns=header, dtype=object) if records else pd.DataFrame(columns=header, dtype=object)
    # Strip padding only when some field has it (a full column pass costs ~40 ms per 100k rows).
    pads = [" " + delimiter, delimiter + " ", "\t" + delimiter, delimiter + "\t", " \n", "\n ", " \r"]
    if records and (any(p in text for p in pads) or text[:1].isspace() or text.rstrip("\r\n")[-1:].isspace()):
        df = df.apply(lambda s: s.str.strip())
    return _Table(df, np.asarray(rows, dtype=np.int64), name, problems)


# --------------------------------------------------------------------------------------------------------------------
# Vectorised checks: each marks failing rows with the first reason found


class _Checks:
    def __init__(self, table: _Table):
        self.t = table
        self.reason = np.full(len(table.df), None, dtype=object)

    def flag(self, mask: np.ndarray | pd.Series, reason: str | Callable[[int], str]) -> None:
        """Give rows in ``mask`` that have no reason yet this one (a callable gets the DataFrame position)."""
        idx = np.flatnonzero(np.asarray(mask, dtype=bool) & pd.isna(self.reason))
        for i in idx:
            self.reason[i] = reason(i) if callable(reason) else reason

    def _got(self, col: str) -> Callable[[int], str]:
        cells = self.t.df[col].to_numpy()
        return lambda i: f" (got {short_repr(cells[i])})"

    def number(self, col: str, *, positive: bool = False, nonneg: bool = False, integer: bool = False) -> np.ndarray:
        s = self.t.df[col]
        x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
        got = self._got(col)
        self.flag(s.eq("").to_numpy(), f"{col}: missing")
        self.flag(~np.isfinite(x), lambda i: f"{col}: not a number{got(i)}")
        with np.errstate(invalid="ignore"):
            if integer:
                self.flag(x != np.round(x), lambda i: f"{col}: not a whole number{got(i)}")
            if positive:
                self.flag(x <= 0, lambda i: f"{col}: must be > 0{got(i)}")
            self.flag(np.abs(x) > MAX_TRACE_NUMBER, lambda i: f"{col}: larger than {MAX_TRACE_NUMBER:.0e}{got(i)}")
            if nonneg:
                self.flag(x < 0, lambda i: f"{col}: must be >= 0{got(i)}")
        return x

    def timestamp(self, col: str) -> np.ndarray:
        """Seconds since the Unix epoch of ISO-like timestamps ("2017-10-09 07:01:55")."""
        s = self.t.df[col]
        try:
            t = pd.to_datetime(s, errors="coerce", format="ISO8601")
            if getattr(t.dt, "tz", None) is not None:
                t = t.dt.tz_convert(None)
            secs = (t - pd.Timestamp(0)).dt.total_seconds().to_numpy(dtype=float)
        except (ValueError, TypeError, OverflowError, AttributeError):  # mixed time zones, dates beyond 2262, ...
            secs = np.array([_epoch_s(v) for v in s.to_numpy()], dtype=float)
        got = self._got(col)
        self.flag(s.eq("").to_numpy(), f"{col}: missing")
        self.flag(np.isnan(secs), lambda i: f"{col}: unparseable timestamp{got(i)}")
        return secs

    def duplicates(self, ids: pd.Series, col: str) -> None:
        dup = ids.duplicated(keep="first").to_numpy()
        got = self._got(col)
        self.flag(dup, lambda i: f"{col}: duplicate id{got(i)}")

    @property
    def ok(self) -> np.ndarray:
        return pd.isna(self.reason)

    def problems(self) -> list[RowProblem]:
        bad = np.flatnonzero(~self.ok)
        return self.t.problems + [RowProblem(int(self.t.rows[i]), str(self.reason[i])) for i in bad]


def _epoch_s(text: str) -> float:
    """Seconds since the Unix epoch of one ISO-like timestamp; NaN when it is not one or is out of range.

    The fallback when pandas refuses the whole column (mixed time zones, dates beyond 2262).

    >>> _epoch_s("1970-01-01 00:01:00"), _epoch_s("1970-01-01T01:00:00+01:00"), _epoch_s("99999-01-01")
    (60.0, 0.0, nan)
    """
    try:
        t = pd.Timestamp(text)
    except (ValueError, TypeError, OverflowError, pd.errors.OutOfBoundsDatetime):
        return float("nan")
    if t is pd.NaT:
        return float("nan")
    if t.tzinfo is not None:
        t = t.tz_convert(None)
    return (t - pd.Timestamp(0)).total_seconds()


def _finish(checks: _Checks, fmt: str, *, limit: int | None, arrival: np.ndarray, job_id: np.ndarray | pd.Series,
            num_gpus: np.ndarray, duration: np.ndarray, extra: Mapping[str, np.ndarray | pd.Series] | None = None,
            rows: np.ndarray | None = None, problems: list[RowProblem] | None = None) -> Trace:
    """Keep the valid rows, sort by (arrival, job_id), apply ``limit``, shift the origin to 0 and build the Trace."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise SpecError("limit", f"must be a non-negative integer or None, got {limit!r}")
    if rows is None:  # a job larger than any cluster is a data error, not a job to stretch over months
        with np.errstate(invalid="ignore"):
            checks.flag(np.asarray(num_gpus) > MAX_JOB_GPUS,
                        f"num_gpus: more than {MAX_JOB_GPUS:,} GPUs (the largest cluster the planner accepts)")
    ok = checks.ok if rows is None else np.ones(len(arrival), dtype=bool)
    cols = {"arrival_s": np.asarray(arrival, dtype=float), "job_id": np.asarray(job_id, dtype=object),
            "num_gpus": np.asarray(num_gpus), "duration_s": np.asarray(duration, dtype=float),
            "source_row": checks.t.rows if rows is None else rows}
    for k, v in (extra or {}).items():
        cols[k] = np.asarray(v, dtype=object)
    df = pd.DataFrame(cols)[ok].sort_values(["arrival_s", "job_id"], kind="mergesort")
    if limit is not None:
        df = df.head(limit)
    if len(df):
        df["arrival_s"] = df["arrival_s"] - df["arrival_s"].iloc[0]
    n = len(df)

    def column(name: str) -> list:
        if name not in df:
            return [None] * n
        if name in ("gpu_type", "model", "tokens", "job_type", "batch_size"):
            return [None if v is None or v != v else v for v in df[name].tolist()]  # NaN -> None
        return df[name].tolist()

    jobs = tuple(map(TraceJob, *(column(f) for f in _TRACEJOB_FIELDS)))
    skipped = sorted(checks.problems() if problems is None else problems, key=lambda p: p.row)
    return Trace(jobs=jobs, source=checks.t.name, format=fmt, skipped=tuple(skipped))


# --------------------------------------------------------------------------------------------------------------------
# Loaders

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def load_philly(source: Source, *, limit: int | None = None) -> Trace:
    """Microsoft Philly jobs as Sia ships them (``traces/philly.csv``): submit timestamp, run time (s), GPUs.

    ``gpu_time`` and ``cluster`` (the VC hash) are optional; job ids are ``philly-<row>``; Philly does not record GPU
    types (its cluster mixed K80/P100s), so ``gpu_type`` is None.
    """
    t = _parse(source, fmt="philly", expected=PHILLY_COLUMNS, required=("timestamp", "duration", "num_gpus"))
    c = _Checks(t)
    arrival = c.timestamp("timestamp")
    duration = c.number("duration", nonneg=True)
    gpus = c.number("num_gpus", positive=True, integer=True)
    width = len(str(max(t.rows, default=0)))
    ids = np.array([f"philly-{r:0{width}d}" for r in t.rows], dtype=object)
    return _finish(c, "philly", limit=limit, arrival=arrival, job_id=ids, num_gpus=_as_int(gpus), duration=duration)


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
    table = dict(SIA_APP_GPU_HOURS if app_gpu_hours is None else app_gpu_hours)
    t = _parse(source, fmt="sia", expected=SIA_COLUMNS, required=("name", "time", "application", "num_replicas"))
    c = _Checks(t)
    c.flag(t.df["name"].eq("").to_numpy(), "name: missing")
    arrival = c.number("time", nonneg=True)
    gpus = c.number("num_replicas", positive=True, integer=True)
    app = t.df["application"]
    c.flag(app.eq("").to_numpy(), "application: missing")
    gpu_h = app.map(table).to_numpy(dtype=float)
    apps = app.to_numpy()
    c.flag(np.isnan(gpu_h), lambda i: f"application: no typical GPU-hours known (got {apps[i]!r}); "
                                      f"known: {', '.join(sorted(table))}")
    c.duplicates(t.df["name"], "name")
    with np.errstate(invalid="ignore", divide="ignore"):
        duration = gpu_h * 3600.0 / gpus
    extra = {"job_type": apps}
    if "batch_size" in t.df:  # kept as given (None when not a positive whole number): only sia-apps needs it
        bsz = pd.to_numeric(t.df["batch_size"], errors="coerce").to_numpy(dtype=float)
        extra["batch_size"] = np.array([int(b) if np.isfinite(b) and b > 0 and b == round(b) else None for b in bsz],
                                       dtype=object)
    return _finish(c, "sia", limit=limit, arrival=arrival, job_id=t.df["name"], num_gpus=_as_int(gpus),
                   duration=duration, extra=extra)


HELIOS_COLUMNS = ("job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "node_num", "state", "submit_time",
                  "start_time", "end_time", "duration", "queue")


def load_helios(source: Source, *, limit: int | None = None) -> Trace:
    """SenseTime Helios ``cluster_log.csv`` (S-Lab-System-Group/HeliosData; schema of its README).

    Uses ``job_id``, ``gpu_num``, ``submit_time`` (arrival) and ``duration`` (run time, s); the other columns are
    optional. CPU-only jobs (``gpu_num`` == 0) are skipped with the reason "non-GPU job". Every final state is kept:
    failed and cancelled jobs held their GPUs too. Helios records no GPU type per job.
    """
    t = _parse(source, fmt="helios", expected=HELIOS_COLUMNS, required=("job_id", "gpu_num", "submit_time", "duration"))
    c = _Checks(t)
    c.flag(t.df["job_id"].eq("").to_numpy(), "job_id: missing")
    gpus = c.number("gpu_num", nonneg=True, integer=True)
    c.flag(gpus == 0, "non-GPU job (gpu_num == 0)")
    arrival = c.timestamp("submit_time")
    duration = c.number("duration", nonneg=True)
    c.duplicates(t.df["job_id"], "job_id")
    return _finish(c, "helios", limit=limit, arrival=arrival, job_id=t.df["job_id"], num_gpus=_as_int(gpus),
                   duration=duration)


ALIBABA2020_TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu",
                            "plan_mem", "plan_gpu", "gpu_type")


def load_alibaba2020(source: Source, *, limit: int | None = None) -> Trace:
    """Alibaba PAI 2020 ``pai_task_table`` (headerless in the original; a header line equal to the schema is allowed).

    Tasks are grouped into jobs by ``job_name``: arrival = the earliest task ``start_time`` (Unix s), duration = latest
    ``end_time`` minus that, GPUs = ceil(sum of ``inst_num * plan_gpu / 100``) (``plan_gpu`` is percent of one GPU,
    so fractional jobs round up to 1). ``gpu_type`` is the catalog name when all GPU tasks agree, else None. Task rows
    without a GPU (``plan_gpu`` empty or 0) are skipped as "non-GPU task"; rows and jobs are 1:N, so ``kept`` counts
    jobs and ``source_row`` is the job's first task row.
    """
    t = _parse(source, fmt="alibaba2020", expected=ALIBABA2020_TASK_COLUMNS, required=ALIBABA2020_TASK_COLUMNS,
               headerless=True)
    c = _Checks(t)
    c.flag(t.df["job_name"].eq("").to_numpy(), "job_name: missing")
    plan = t.df["plan_gpu"]
    plan_gpu = pd.to_numeric(plan, errors="coerce").to_numpy(dtype=float)
    c.flag(plan.eq("").to_numpy() | (plan_gpu == 0), "non-GPU task (plan_gpu empty or 0)")
    plan_gpu = c.number("plan_gpu", positive=True)
    inst = c.number("inst_num", positive=True, integer=True)
    start = c.number("start_time", nonneg=True)
    end = c.number("end_time", nonneg=True)
    with np.errstate(invalid="ignore"):
        c.flag(end < start, "end_time: before start_time")
    ok = c.ok
    tasks = pd.DataFrame({"job": t.df["job_name"].to_numpy(), "start": start, "end": end,
                          "gpu": inst * plan_gpu / 100.0, "type": t.df["gpu_type"].map(map_gpu_code).to_numpy(),
                          "row": t.rows})[ok]
    jobs = tasks.groupby("job", sort=False).agg(start=("start", "min"), end=("end", "max"), gpu=("gpu", "sum"),
                                                row=("row", "min"), ntypes=("type", "nunique"),
                                                gtype=("type", "first"), nnull=("type", lambda s: s.isna().sum()))
    gtype = np.where((jobs["ntypes"] == 1) & (jobs["nnull"] == 0), jobs["gtype"], None)
    return _finish(c, "alibaba2020", limit=limit, arrival=jobs["start"].to_numpy(), job_id=jobs.index.to_numpy(),
                   num_gpus=np.maximum(1, np.ceil(jobs["gpu"].to_numpy() - 1e-9)).astype(int),
                   duration=(jobs["end"] - jobs["start"]).to_numpy(), extra={"gpu_type": gtype},
                   rows=jobs["row"].to_numpy(), problems=c.problems())


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
    t = _parse(source, fmt="alibaba2023", expected=ALIBABA2023_COLUMNS,
               required=("name", "num_gpu", "creation_time", "deletion_time", "scheduled_time"))
    c = _Checks(t)
    c.flag(t.df["name"].eq("").to_numpy(), "name: missing")
    gpus = c.number("num_gpu", nonneg=True, integer=True)
    c.flag(gpus == 0, "non-GPU pod (num_gpu == 0)")
    arrival = c.number("creation_time", nonneg=True)
    c.flag(t.df["scheduled_time"].eq("").to_numpy(), "never scheduled (scheduled_time empty)")
    sched = c.number("scheduled_time", nonneg=True)
    deleted = c.number("deletion_time", nonneg=True)
    with np.errstate(invalid="ignore"):
        c.flag(deleted < sched, "deletion_time: before scheduled_time")
    c.duplicates(t.df["name"], "name")
    spec = t.df["gpu_spec"].map(map_gpu_code).to_numpy() if "gpu_spec" in t.df else None
    return _finish(c, "alibaba2023", limit=limit, arrival=arrival, job_id=t.df["name"], num_gpus=_as_int(gpus),
                   duration=deleted - sched, extra={"gpu_type": spec} if spec is not None else None)


GAVEL_COLUMNS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
                 "scale_factor")
_GAVEL_THROUGHPUTS = Path(__file__).parent / "data" / "traces" / "gavel_throughputs.json"


def gavel_throughputs(reference_gpu: str = "v100") -> dict[str, dict[int, float]]:
    """Gavel's isolated throughputs (steps/s) on ``reference_gpu`` (v100, p100, k80): job_type -> scale -> steps/s."""
    data = json.loads(_GAVEL_THROUGHPUTS.read_text())
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
    tput = gavel_throughputs(reference_gpu) if throughputs is None else throughputs
    t = _parse(source, fmt="gavel", expected=GAVEL_COLUMNS, required=GAVEL_COLUMNS, headerless=True, delimiter="\t")
    c = _Checks(t)
    c.flag(t.df["job_type"].eq("").to_numpy(), "job_type: missing")
    steps = c.number("total_steps", positive=True)
    arrival = c.number("arrival_time", nonneg=True)
    scale = c.number("scale_factor", positive=True, integer=True)
    types = t.df["job_type"].to_numpy()
    duration = np.full(len(types), np.nan)
    cache: dict[tuple[str, int], float | None] = {}
    for i in np.flatnonzero(c.ok):
        key = (types[i], int(scale[i]))
        if key not in cache:
            cache[key] = gavel_duration_s(key[0], key[1], 1.0, tput)
        if cache[key] is not None:
            duration[i] = steps[i] * cache[key]
    c.flag(np.isnan(duration), lambda i: f"job_type: no Gavel throughput for it (got {types[i]!r})")
    width = len(str(max(t.rows, default=0)))
    ids = np.array([f"gavel-{r:0{width}d}" for r in t.rows], dtype=object)
    return _finish(c, "gavel", limit=limit, arrival=arrival, job_id=ids, num_gpus=_as_int(scale), duration=duration,
                   extra={"job_type": types})


NATIVE_COLUMNS = ("job_id", "arrival_s", "num_gpus", "duration_s", "gpu_type", "model", "tokens")


def load_native(source: Source, *, limit: int | None = None) -> Trace:
    """Our own CSV: ``job_id,arrival_s,num_gpus,duration_s`` plus optional ``gpu_type,model,tokens`` columns.

    ``gpu_type`` is a catalog name (or a trace code such as V100M32) or empty; ``model`` a zoo model name passed
    through unchecked (the workload mapping validates it); ``tokens`` a positive integer or empty.

    >>> load_native("job_id,arrival_s,num_gpus,duration_s\\nb,70,2,60\\na,10,1,3600\\n").jobs[0]
    TraceJob(job_id='a', arrival_s=0.0, num_gpus=1, duration_s=3600.0, gpu_type=None, source_row=2, model=None, \
tokens=None, job_type=None, batch_size=None)
    """
    t = _parse(source, fmt="native", expected=NATIVE_COLUMNS, required=NATIVE_COLUMNS[:4])
    c = _Checks(t)
    c.flag(t.df["job_id"].eq("").to_numpy(), "job_id: missing")
    arrival = c.number("arrival_s", nonneg=True)
    gpus = c.number("num_gpus", positive=True, integer=True)
    duration = c.number("duration_s", nonneg=True)
    extra: dict[str, np.ndarray] = {}
    if "gpu_type" in t.df:
        raw = t.df["gpu_type"]
        mapped = raw.map(map_gpu_code).to_numpy()
        got = c._got("gpu_type")
        c.flag((raw.ne("") & pd.isna(mapped)).to_numpy(), lambda i: f"gpu_type: not in the GPU catalog{got(i)}")
        extra["gpu_type"] = mapped
    if "model" in t.df:
        extra["model"] = t.df["model"].where(t.df["model"].ne(""), None).to_numpy()
    if "tokens" in t.df:
        raw = t.df["tokens"]
        tok = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        got = c._got("tokens")
        with np.errstate(invalid="ignore"):
            c.flag((raw.ne("") & ~(np.isfinite(tok) & (tok > 0) & (tok == np.round(tok)))).to_numpy(),
                   lambda i: f"tokens: must be a positive whole number{got(i)}")
        extra["tokens"] = np.array([int(v) if np.isfinite(v) else None for v in tok], dtype=object)
    c.duplicates(t.df["job_id"], "job_id")
    return _finish(c, "native", limit=limit, arrival=arrival, job_id=t.df["job_id"], num_gpus=_as_int(gpus),
                   duration=duration, extra=extra)


def _as_int(x: np.ndarray) -> np.ndarray:
    """Float column -> int column; rows that failed their checks (NaN) become 0 and are dropped anyway."""
    return np.where(np.isfinite(x), x, 0).astype(np.int64)


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
    span = trace.jobs[-1].arrival_s - trace.jobs[0].arrival_s
    work = sum(j.num_gpus * j.duration_s for j in trace.jobs)
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
