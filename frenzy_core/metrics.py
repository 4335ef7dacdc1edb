"""Metrics of simulation runs: JCT percentiles, queueing delay, makespan, GPU-hours, utilisation, confidence intervals.

Pure functions over arrays; `simulate.SimResult` and `simulate.MultiSeedResult` call them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

SUMMARY_KEYS = ("jobs", "completed", "gave_up", "rejected", "avg_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s",
                "gpu_hours", "oom_failures", "model_fallbacks", "oversized_jobs", "rejected_no_fit",
                "sched_overhead_ms_per_decision",
                "wall_s")
# JCT, queueing and percentiles are over completed jobs only: a job given up after `max_oom_retries` out-of-memory
# failures, or rejected, has no completion time; `gave_up` and `rejected` count them so no table hides them.
COUNT_KEYS = ("jobs", "completed", "gave_up", "rejected", "oom_failures", "model_fallbacks", "oversized_jobs",
              "rejected_no_fit")  # ints in a summary when integral
# Metrics that cannot be negative: their confidence intervals are clipped at 0 (see mean_ci).
NONNEGATIVE_KEYS = frozenset({
    "jobs", "completed", "gave_up", "rejected", "avg_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s",
    "p99_queue_s", "makespan_s", "gpu_hours", "avg_utilisation", "oom_failures", "oom_wasted_gpu_hours", "restarts",
    "decisions", "sched_overhead_ms_per_decision", "wall_s", "model_fallbacks", "oversized_jobs", "rejected_no_fit"})


def jct_stats(jct_s: np.ndarray) -> dict[str, float]:
    """Average, median, p95 and p99 of job completion times (NaN for unfinished jobs are left out).

    >>> jct_stats(np.array([1.0, 2.0, 3.0, np.nan]))["avg_jct_s"]
    2.0
    """
    x = np.asarray(jct_s, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"avg_jct_s": math.nan, "median_jct_s": math.nan, "p95_jct_s": math.nan, "p99_jct_s": math.nan}
    return {"avg_jct_s": float(x.mean()), "median_jct_s": float(np.median(x)),
            "p95_jct_s": float(np.percentile(x, 95)), "p99_jct_s": float(np.percentile(x, 99))}


# Fewest seeds whose 95% interval the pages draw and the what-if verdict calls significant: with 2 seeds the
# t-interval is the mean +- 12.7 standard errors (t_0.975 with 1 degree of freedom), wide enough to mislead
MIN_CI_SEEDS = 3


def mean_ci(values: Sequence[float], confidence: float = 0.95, *,
            nonnegative: bool = False) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval over seeds; NaN and None values are left out.

    With fewer than 2 values there is no spread to estimate, so the bounds are NaN (pages show "n/a"): a zero-width
    interval would read as certainty. Values that all agree give a zero-width interval (the t-interval with s = 0).
    `nonnegative=True` clips the lower bound at 0 for quantities that cannot be negative (JCT, queueing delay,
    makespan, GPU-hours, utilisation, counts); the symmetric t-interval can dip below 0 when seeds vary widely.

    >>> [round(v, 3) for v in mean_ci([1.0, 2.0, 3.0])]
    [2.0, -0.484, 4.484]
    >>> [round(v, 3) for v in mean_ci([1.0, 2.0, 3.0], nonnegative=True)]
    [2.0, 0.0, 4.484]
    >>> mean_ci([5.0])
    (5.0, nan, nan)
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(x.mean())
    if x.size < 2:
        return (m, math.nan, math.nan)
    if float(x.std(ddof=1)) == 0.0:
        return (m, m, m)
    lo, hi = stats.t.interval(confidence, df=x.size - 1, loc=m, scale=stats.sem(x))
    lo = max(float(lo), 0.0) if nonnegative else float(lo)
    return (m, lo, float(hi))


@dataclass(frozen=True)
class PairedComparison:
    """Policy A against policy B on the same units (seeds or workloads), paired: unit i ran both on the same input.

    `mean_diff`, `ci_low`, `ci_high`: the mean of the per-unit differences a_i - b_i and its Student-t interval
    (NaN bounds with fewer than 2 units, as `mean_ci`); `wins`: units where a_i < b_i (lower is better: JCT,
    GPU-hours); `ratio_of_means`: mean(a) / mean(b), the figure a table of means implies, beside the paired one.
    A paired interval that excludes 0 says A and B differ on these units; the ratio of means alone does not (one
    slow unit of B can make it).
    """
    n: int
    mean_diff: float
    ci_low: float
    ci_high: float
    wins: int
    ratio_of_means: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0, with at least MIN_CI_SEEDS units."""
        return self.n >= MIN_CI_SEEDS and (self.ci_high < 0.0 or self.ci_low > 0.0)


def paired_comparison(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> PairedComparison:
    """Paired differences of two policies' per-unit values (the same seed or workload at the same index).

    Units where either value is NaN or None are left out of every figure (a run that did not finish is not a win).

    >>> c = paired_comparison([1.0, 2.0, 4.0], [2.0, 2.5, 3.0])  # differences -1, -0.5, +1: mean -1/6
    >>> round(c.mean_diff, 4), c.wins, round(c.ratio_of_means, 4), c.significant
    (-0.1667, 2, 0.9333, False)
    >>> paired_comparison([1.0], [2.0]).ci_low
    nan
    """
    if len(a) != len(b):
        raise ValueError(f"paired_comparison: {len(a)} values against {len(b)}; pair each unit's two runs")
    pairs = [(float(x), float(y)) for x, y in zip(a, b, strict=True)
             if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
    if not pairs:
        return PairedComparison(0, math.nan, math.nan, math.nan, 0, math.nan)
    xa, xb = np.array(pairs).T
    mean_diff, low, high = mean_ci(xa - xb, confidence)
    mean_b = float(xb.mean())
    ratio = float(xa.mean()) / mean_b if mean_b != 0.0 else math.nan
    return PairedComparison(len(pairs), mean_diff, low, high, int(np.sum(xa < xb)), ratio)


def integral_mean(values: Sequence[float]) -> float | int:
    """Mean of per-seed values, as an int when it is a whole number (counts on which every seed agrees).

    >>> integral_mean([3, 3]), integral_mean([1, 2]), integral_mean([2.0, 4.0])
    (3, 1.5, 3)
    """
    m = float(np.mean(values))
    return int(m) if math.isfinite(m) and m == int(m) else m


def busy_gpu_seconds(times_s: np.ndarray, busy: np.ndarray, until_s: float | None = None) -> float:
    """Integral of a step function busy(t) (value holds from times_s[i] to times_s[i+1]) up to until_s; None closes
    the last step where it starts (a finished run's last step, every GPU free, adds nothing either way).

    >>> busy_gpu_seconds(np.array([0.0, 10.0]), np.array([4, 0]), 20.0)
    40.0
    >>> busy_gpu_seconds(np.array([0.0, 10.0]), np.array([4, 0]))
    40.0
    """
    if len(times_s) == 0:
        return 0.0
    t = np.asarray(times_s, dtype=float)
    t = np.append(t, t[-1] if until_s is None else until_s)
    return float(np.sum(np.diff(t) * np.asarray(busy, dtype=float)))


def average_utilisation(times_s: np.ndarray, busy: np.ndarray, total_gpus: int, until_s: float) -> float:
    """Busy GPU-seconds / (total GPUs x until_s)."""
    if until_s <= 0 or total_gpus <= 0:
        return 0.0
    return busy_gpu_seconds(times_s, busy, until_s) / (total_gpus * until_s)
