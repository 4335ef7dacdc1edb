"""Metrics: JCT percentiles, t-intervals, step-function integrals, checked against independent arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from frenzy_core import metrics
from frenzy_core.metrics import average_utilisation, busy_gpu_seconds, integral_mean, jct_stats, mean_ci


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


def test_mean_ci_of_one_seed_has_nan_bounds_not_a_zero_width_interval():
    m, lo, hi = mean_ci([5.0])
    assert m == 5.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in mean_ci([]))


def test_mean_ci_of_identical_seeds_is_zero_width():
    assert mean_ci([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)


def test_mean_ci_clips_the_lower_bound_at_zero_only_when_asked():
    values = [0.0, 0.1, 3.0]  # wide spread near 0: the t-interval dips below 0
    m, lo, hi = mean_ci(values)
    assert lo < 0
    assert mean_ci(values, nonnegative=True) == (m, 0.0, hi)


def test_integral_mean_is_an_int_only_when_whole():
    assert integral_mean([4, 4, 4]) == 4 and isinstance(integral_mean([4, 4, 4]), int)
    assert integral_mean([1, 2]) == 1.5
    assert isinstance(integral_mean([1.0, 3.0]), int)


def test_busy_gpu_seconds_integrates_the_step_function():
    t = np.array([0.0, 10.0, 15.0])
    busy = np.array([4, 8, 0])
    assert busy_gpu_seconds(t, busy, 20.0) == 4 * 10 + 8 * 5
    assert average_utilisation(t, busy, 8, 20.0) == pytest.approx(80 / 160)


def test_mean_ci_of_two_seeds_is_the_t_interval_with_one_degree_of_freedom():
    m, lo, hi = mean_ci([1.0, 3.0])
    half = 12.706204736174707 * math.sqrt(2.0) / math.sqrt(2)  # t(0.975, df=1) x s / sqrt(n), s = sqrt(2)
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))


def test_average_utilisation_of_an_empty_window_is_zero():
    assert average_utilisation(np.array([0.0]), np.array([4]), 8, 0.0) == 0.0
    assert average_utilisation(np.array([0.0]), np.array([4]), 8, 10.0) == 0.5


# --- mutation gaps (issue 13): each test pins one behaviour that a one-line change of metrics.py would break -------
def test_p95_is_the_linear_interpolation_at_rank_0_95():
    # 4 values: rank (n - 1) x 0.95 = 2.85, so 30 + 0.85 x (40 - 30) = 38.5
    assert jct_stats(np.array([10.0, 20.0, 30.0, 40.0]))["p95_jct_s"] == pytest.approx(38.5)


def test_jct_stats_of_one_finished_job_are_its_time():
    assert jct_stats(np.array([7.0, np.nan])) == {"avg_jct_s": 7.0, "median_jct_s": 7.0, "p95_jct_s": 7.0,
                                                 "p99_jct_s": 7.0}


def test_mean_ci_leaves_out_nan_and_none_seeds():
    # only 1.0 and 3.0 count: the two-seed interval, t(0.975, df=1) x sqrt(2) / sqrt(2)
    m, lo, hi = mean_ci([1.0, None, float("nan"), 3.0])
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - 12.706204736174707, 2.0 + 12.706204736174707))


def test_mean_ci_of_two_identical_seeds_is_zero_width():
    assert mean_ci([2.0, 2.0]) == (2.0, 2.0, 2.0)


def test_busy_gpu_seconds_of_no_steps_is_zero():
    assert busy_gpu_seconds(np.array([]), np.array([]), 10.0) == 0.0


def test_average_utilisation_of_a_cluster_without_gpus_is_zero():
    assert average_utilisation(np.array([0.0]), np.array([0]), 0, 10.0) == 0.0


def test_average_utilisation_of_a_single_gpu_over_a_short_window():
    # 1 GPU busy from 0 to 0.25 s, idle to 0.5 s: 0.25 busy GPU-seconds / (1 GPU x 0.5 s) = 0.5
    assert average_utilisation(np.array([0.0, 0.25]), np.array([1, 0]), 1, 0.5) == pytest.approx(0.5)


def test_utilisation_window_starts_at_time_zero_not_at_the_first_event():
    # 4 of 8 GPUs busy from t = 5 s to 10 s, nothing before: 20 busy GPU-seconds over 8 GPUs x 10 s = 0.25
    assert busy_gpu_seconds(np.array([5.0]), np.array([4]), 10.0) == 20.0
    assert average_utilisation(np.array([5.0]), np.array([4]), 8, 10.0) == pytest.approx(0.25)


def test_paired_comparison_interval_is_scipys_paired_t_test_interval():
    # another implementation: scipy's paired t-test reports the interval of the mean difference a - b
    a = [0.61, 0.55, 0.70, 0.52, 0.66]
    b = [0.64, 0.60, 0.69, 0.58, 0.71]
    c = metrics.paired_comparison(a, b)
    want = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert c.n == 5
    assert c.mean_diff == pytest.approx(-0.036)  # (-0.03 - 0.05 + 0.01 - 0.06 - 0.05) / 5 by hand
    assert (c.ci_low, c.ci_high) == pytest.approx((want.low, want.high))
    assert c.wins == 4  # every seed but the third (0.70 > 0.69)
    assert c.ratio_of_means == pytest.approx(3.04 / 3.22)


def test_paired_comparison_can_differ_from_the_ratio_of_means():
    # B has one slow seed: the ratio of means says A is 30% better, yet A wins 1 of 4 seeds and the paired interval
    # holds 0 (the case the issue names: a lead that comes from two slow seeds of the other policy)
    a = [1.0, 1.0, 1.0, 1.0]
    b = [0.9, 0.9, 0.9, 3.0]
    c = metrics.paired_comparison(a, b)
    assert c.wins == 1
    assert c.ratio_of_means == pytest.approx(4.0 / 5.7)
    assert c.ci_low < 0.0 < c.ci_high and not c.significant


def test_paired_comparison_is_significant_only_when_the_interval_excludes_zero_with_enough_units():
    # a constant difference of -0.1 on 3 seeds: zero-width interval at -0.1, significant
    assert metrics.paired_comparison([0.9, 1.9, 2.9], [1.0, 2.0, 3.0]).significant
    # the same on 2 seeds: below MIN_CI_SEEDS, never called significant
    assert not metrics.paired_comparison([0.9, 1.9], [1.0, 2.0]).significant


def test_paired_comparison_leaves_out_units_where_either_run_is_missing():
    c = metrics.paired_comparison([1.0, float("nan"), 2.0, None], [2.0, 1.0, 1.0, 5.0])
    assert c.n == 2 and c.wins == 1 and c.mean_diff == pytest.approx(0.0)
    with pytest.raises(ValueError, match="pair each unit"):
        metrics.paired_comparison([1.0, 2.0], [1.0])


def test_paired_comparison_is_significant_only_when_its_interval_leaves_out_zero():
    pc = metrics.PairedComparison
    assert not pc(3, 0.0, -0.5, 0.5, 1, 1.0).significant  # holds 0 (its upper end below 1 but above 0)
    assert not pc(3, 0.5, 0.0, 1.0, 0, 1.2).significant  # touches 0: not excluded
    assert not pc(3, -0.5, -1.0, 0.0, 3, 0.8).significant
    assert pc(3, 0.5, 0.1, 0.9, 0, 1.2).significant and pc(3, -0.5, -0.9, -0.1, 3, 0.8).significant


def test_paired_comparison_of_no_complete_pair_counts_none():
    c = metrics.paired_comparison([float("nan"), None], [1.0, 2.0])
    assert c.n == 0 and c.wins == 0 and not c.significant
    assert all(math.isnan(v) for v in (c.mean_diff, c.ci_low, c.ci_high, c.ratio_of_means))
