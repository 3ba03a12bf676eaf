"""Statistics over repeats: summaries with a bootstrap CI, and system-vs-baseline comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from lab.reports.stats import compare, summarize


def test_a_skewed_sample_matches_hand_computed_values():
    s = summarize([1, 2, 3, 4, 100])
    assert s.n == 5
    assert s.mean == 22.0
    assert s.median == 3.0
    assert s.olympic_mean == 3.0  # drop 1 and 100, mean of 2, 3, 4
    # squared deviations from 22: 441 + 400 + 361 + 324 + 6084 = 7610, over n - 1 = 4
    assert s.std == pytest.approx(math.sqrt(7610 / 4))


def test_the_bootstrap_ci_is_reproducible_for_a_fixed_seed_and_contains_the_mean():
    values = [1, 2, 3, 4, 100]
    first, again = summarize(values, seed=7), summarize(values, seed=7)
    assert (first.ci_low, first.ci_high) == (again.ci_low, again.ci_high)
    assert first.ci_low < first.mean < first.ci_high
    other = summarize(values, seed=8)
    assert (other.ci_low, other.ci_high) != (first.ci_low, first.ci_high)
    assert (
        first.method == "mean of n=5 seeds; 95% bootstrap CI (10000 resamples, percentile, seed 7)"
    )


def test_the_bootstrap_ci_of_a_large_sample_is_close_to_the_normal_interval():
    values = np.random.default_rng(0).normal(10.0, 2.0, size=400)
    s = summarize(values)
    half = 1.96 * values.std(ddof=1) / math.sqrt(values.size)
    assert s.ci_high - s.ci_low == pytest.approx(2 * half, rel=0.1)
    assert (s.ci_low + s.ci_high) / 2 == pytest.approx(s.mean, abs=0.1 * half)


def test_a_single_value_has_a_degenerate_ci_and_no_spread():
    s = summarize([4.5])
    assert (s.n, s.mean, s.median, s.ci_low, s.ci_high) == (1, 4.5, 4.5, 4.5, 4.5)
    assert math.isnan(s.std) and math.isnan(s.olympic_mean)
    assert "n=1" in s.method


def test_two_values_have_a_std_and_a_ci_but_no_olympic_mean():
    s = summarize([1.0, 3.0])
    assert s.std == pytest.approx(math.sqrt(2.0))
    assert math.isnan(s.olympic_mean)
    assert 1.0 <= s.ci_low <= s.mean <= s.ci_high <= 3.0
    assert s.as_dict()["n"] == 2


def test_welch_matches_the_hand_computed_statistic_and_degrees_of_freedom():
    x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0, 10.0]
    v1, v2 = np.var(x, ddof=1) / len(x), np.var(y, ddof=1) / len(y)
    t = (np.mean(x) - np.mean(y)) / math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1**2 / (len(x) - 1) + v2**2 / (len(y) - 1))
    p = 2 * sps.t.sf(abs(t), df)
    c = compare(x, y, lower_is_better=True, test="welch")
    assert c.statistic == pytest.approx(t)
    assert c.df == pytest.approx(df)
    assert c.p_value == pytest.approx(p)
    assert 0.05 < p < 0.1 and c.significant is False
    assert c.method.startswith(f"Welch's t-test, n=4 vs 5, p={p:.3f}")


def test_mann_whitney_on_fully_separated_groups_gives_the_exact_p_value():
    c = compare([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], lower_is_better=True, test="mannwhitney")
    assert c.test == "mannwhitney"
    assert c.statistic == 0.0  # no system value beats any baseline value in rank
    assert c.p_value == pytest.approx(2 / math.comb(10, 5))
    assert c.significant


def test_auto_uses_welch_for_few_repeats_and_mann_whitney_from_eight_each():
    few = compare([1, 2, 3], [4, 5, 6], lower_is_better=True)
    many = compare(range(8), range(10, 18), lower_is_better=True)
    assert (few.test, many.test) == ("welch", "mannwhitney")


def test_the_ratio_is_a_speedup_whatever_the_direction_of_the_metric():
    time = compare([1.0, 1.0], [2.0, 2.0], lower_is_better=True)
    assert (time.ratio, time.improvement_pct) == (2.0, 50.0)
    throughput = compare([2.0, 2.0], [1.0, 1.0], lower_is_better=False)
    assert (throughput.ratio, throughput.improvement_pct) == (2.0, 100.0)
    worse = compare([2.0, 2.0], [1.0, 1.0], lower_is_better=True)
    assert (worse.ratio, worse.improvement_pct) == (0.5, -100.0)


def test_the_ratio_ci_brackets_the_ratio_and_is_reproducible():
    system, baseline = [1.0, 1.1, 0.9, 1.05, 0.95], [2.0, 2.2, 1.8, 2.1, 1.9]
    c = compare(system, baseline, lower_is_better=True, seed=3)
    assert c.ratio == pytest.approx(2.0)
    assert c.ratio_ci_low < c.ratio < c.ratio_ci_high
    again = compare(system, baseline, lower_is_better=True, seed=3)
    assert (again.ratio_ci_low, again.ratio_ci_high) == (c.ratio_ci_low, c.ratio_ci_high)
    assert c.as_dict()["baseline"]["mean"] == pytest.approx(2.0)


def test_a_group_of_one_skips_the_test_without_crashing():
    c = compare([1.0], [2.0, 3.0], lower_is_better=True, test="welch")
    assert math.isnan(c.p_value) and math.isnan(c.statistic)
    assert c.significant is False
    assert "not run" in c.method and "n=1 vs 2" in c.method
    assert c.ratio == pytest.approx(2.5)


def test_identical_repeats_skip_welch_instead_of_claiming_p_zero():
    c = compare([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], lower_is_better=True, test="welch")
    assert math.isnan(c.p_value) and not c.significant
    assert "no variance" in c.method


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: summarize([]), "values"),
        (lambda: summarize([1.0, math.nan]), "values"),
        (lambda: summarize([[1.0, 2.0], [3.0, 4.0]]), "values"),
        (lambda: summarize(["fast", "slow"]), "values"),
        (lambda: summarize([1.0], ci=95), "ci"),
        (lambda: summarize([1.0], resamples=0), "resamples"),
        (lambda: compare([], [1.0], lower_is_better=True), "system_values"),
        (lambda: compare([1.0], [1.0, math.inf], lower_is_better=True), "baseline_values"),
        (lambda: compare([1.0], [1.0], lower_is_better=True, test="ttest"), "test"),
        (lambda: compare([1.0], [1.0], lower_is_better=True, alpha=5), "alpha"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=f"^{argument} "):
        call()
