"""Job traces: what arrived when, asking for how many GPUs, running for how long; loaders for public formats."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TraceJob:
    """One job as a trace records it: no model, only arrival, GPU count and duration."""

    job_id: str  # unique within the trace
    arrival_s: float  # seconds since the trace's first arrival (the loader shifts the origin to 0)
    num_gpus: int  # GPUs the user asked for (the baseline policies use this; Frenzy ignores it)
    duration_s: float  # how long it ran on its original allocation
    gpu_type: str | None = None  # original GPU type when the trace records one (catalog name), else None
    source_row: int = 0  # 1-based data row in the file it came from, for error messages


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

    def summary(self) -> str:
        return f"{self.source}: kept {self.kept} rows, skipped {len(self.skipped)}"
