"""Metrics: JCT percentiles, t-intervals, step-function integrals, checked against independent arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from frenzy_core.metrics import average_utilisation, busy_gpu_seconds, jct_stats, mean_ci


def test_jct_stats_match_numpy_and_skip_unfinished():
    x = np.array([10.0, 20.0, 30.0, 40.0, np.nan])
    s = jct_stats(x)
    assert s["avg_jct_s"] == 25.0 and s["median_jct_s"] == 25.0
    assert s["p99_jct_s"] == pytest.approx(40.0 - 0.03 * 10.0)  # linear interpolation between 30 and 40
    assert math.isnan(jct_stats(np.array([np.nan]))["avg_jct_s"])


def test_mean_ci_is_the_student_t_interval():
    m, lo, hi = mean_ci([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t(0.975, df=2) x s / sqrt(n), s = 1
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0)


def test_busy_gpu_seconds_integrates_the_step_function():
    t = np.array([0.0, 10.0, 15.0])
    busy = np.array([4, 8, 0])
    assert busy_gpu_seconds(t, busy, 20.0) == 4 * 10 + 8 * 5
    assert average_utilisation(t, busy, 8, 20.0) == pytest.approx(80 / 160)
