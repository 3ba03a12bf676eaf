"""Statistics over repeats (seeds) for figures, tables and the claims ledger.

Method, stated once: a metric is summarised by the mean over its n repeats with a percentile
bootstrap confidence interval of that mean (default 95%, 10,000 resamples, numpy
``default_rng(seed)`` with seed 0, so the same values always give the same interval). The
MLPerf-style olympic mean (drop the one fastest and the one slowest repeat, average the rest;
MLPerf Training rules, "benchmark result") is reported beside it for n >= 3. A system is compared
with a baseline by the ratio of means oriented so that > 1 means the system is better (a
speedup; meaningful for positive metrics), with a bootstrap CI that resamples each group
independently (resamples with a zero denominator are left out), and by a two-sided test:
Welch's unequal-variance t-test, or Mann-Whitney U. ``test="auto"`` picks Mann-Whitney when both
groups have at least ``AUTO_MANN_WHITNEY_MIN_N`` (8) repeats and Welch otherwise: with 3 vs 3
repeats the smallest two-sided exact Mann-Whitney p-value is 0.1, so a rank test can never
reach alpha = 0.05 at the repeat counts we usually run, while from about 8 per group it keeps
~95% of the t-test's power under normal noise and is not thrown by one straggler repeat.
A test needs n >= 2 in each group; otherwise it is not run (p is nan, not significant) and the
method text says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats as sps

Test = Literal["welch", "mannwhitney", "auto"]
TESTS: tuple[str, ...] = ("welch", "mannwhitney", "auto")
TEST_NAMES = {"welch": "Welch's t-test", "mannwhitney": "Mann-Whitney U test"}
AUTO_MANN_WHITNEY_MIN_N = 8
DEFAULT_RESAMPLES = 10_000
# Bound on the size of one block of bootstrap indices (resamples x n), so long series of
# per-iteration timings do not allocate gigabytes.
_BLOCK_CELLS = 2_000_000


@dataclass(frozen=True)
class Summary:
    """One metric over n repeats. ``std`` is the sample std (ddof=1; nan for n < 2);
    ``olympic_mean`` drops one min and one max (nan for n < 3); ``ci_low``/``ci_high`` bound
    the mean (both equal the value when n == 1)."""

    n: int
    mean: float
    median: float
    std: float
    olympic_mean: float
    ci_low: float
    ci_high: float
    ci: float
    resamples: int
    seed: int
    method: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Comparison:
    """System vs baseline. ``ratio`` > 1 means the system is better whatever the metric's
    direction (baseline/system for lower-is-better, system/baseline otherwise);
    ``improvement_pct`` > 0 likewise (relative to the baseline mean). ``statistic`` is t for
    Welch (system minus baseline) or U of the system for Mann-Whitney; ``df`` is Welch's
    degrees of freedom (nan for Mann-Whitney)."""

    system: Summary
    baseline: Summary
    lower_is_better: bool
    ratio: float
    ratio_ci_low: float
    ratio_ci_high: float
    improvement_pct: float
    test: str
    statistic: float
    df: float
    p_value: float
    alpha: float
    significant: bool
    method: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def summarize(
    values: Iterable[float],
    *,
    ci: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Summary:
    """Mean, median, sample std, olympic mean and bootstrap CI of the mean of ``values``.

    Raises ValueError (naming the argument) for empty or non-finite values, a ``ci`` outside
    (0, 1) or fewer than one resample."""
    x = _finite_array(values, "values")
    _check_bootstrap(ci, resamples)
    n = x.size
    boot = _bootstrap_means(x, np.random.default_rng(seed), resamples)
    low, high = _interval(boot, ci)
    return Summary(
        n=n,
        mean=float(x.mean()),
        median=float(np.median(x)),
        std=float(x.std(ddof=1)) if n >= 2 else math.nan,
        olympic_mean=float(np.sort(x)[1:-1].mean()) if n >= 3 else math.nan,
        ci_low=low,
        ci_high=high,
        ci=ci,
        resamples=resamples,
        seed=seed,
        method=_summary_method(n, ci, resamples, seed),
    )


def compare(
    system_values: Iterable[float],
    baseline_values: Iterable[float],
    *,
    lower_is_better: bool,
    test: Test = "auto",
    alpha: float = 0.05,
    ci: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Compare a system's repeats with a baseline's (see the module docstring for the method).

    Never raises for small samples: with n < 2 in a group the test is skipped (p = nan,
    ``significant`` False). Raises ValueError naming the argument for empty or non-finite
    values, an unknown ``test`` or an ``alpha`` outside (0, 1)."""
    sys_x = _finite_array(system_values, "system_values")
    base_x = _finite_array(baseline_values, "baseline_values")
    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}, got {test!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    _check_bootstrap(ci, resamples)
    system = summarize(sys_x, ci=ci, resamples=resamples, seed=seed)
    baseline = summarize(base_x, ci=ci, resamples=resamples, seed=seed)
    rng = np.random.default_rng(seed)
    boot_ratio = _oriented_ratio(
        _bootstrap_means(sys_x, rng, resamples),
        _bootstrap_means(base_x, rng, resamples),
        lower_is_better,
    )
    ratio_low, ratio_high = _interval(boot_ratio, ci)
    name = _resolve_test(test, sys_x.size, base_x.size)
    statistic, df, p_value, test_text = _run_test(name, sys_x, base_x)
    significant = bool(math.isfinite(p_value) and p_value < alpha)
    if math.isfinite(p_value):
        verdict = "significant" if significant else "not significant"
        test_text += f" ({verdict} at alpha={alpha:g})"
    return Comparison(
        system=system,
        baseline=baseline,
        lower_is_better=lower_is_better,
        ratio=float(_oriented_ratio(system.mean, baseline.mean, lower_is_better)),
        ratio_ci_low=ratio_low,
        ratio_ci_high=ratio_high,
        improvement_pct=_improvement_pct(system.mean, baseline.mean, lower_is_better),
        test=name,
        statistic=statistic,
        df=df,
        p_value=p_value,
        alpha=alpha,
        significant=significant,
        method=f"{test_text}; ratio of means with {_ci_text(ci, resamples, seed)}",
    )


def _finite_array(values: Iterable[float], name: str) -> np.ndarray:
    """``values`` as a 1-D float array, or ValueError naming ``name``."""
    try:
        raw = values if isinstance(values, np.ndarray) else list(values)
        x = np.asarray(raw, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of numbers ({exc})") from exc
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} must not be empty")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise ValueError(f"{name} must be finite; got {x[bad[0]]} at index {bad[0]}")
    return x


def _check_bootstrap(ci: float, resamples: int) -> None:
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")
    if not isinstance(resamples, int | np.integer) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")


def _bootstrap_means(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Means of ``resamples`` resamples of ``x`` with replacement, drawn in bounded blocks."""
    block = max(1, _BLOCK_CELLS // x.size)
    means = [
        x[rng.integers(0, x.size, size=(min(block, resamples - start), x.size))].mean(axis=1)
        for start in range(0, resamples, block)
    ]
    return np.concatenate(means)


def _interval(samples: np.ndarray, ci: float) -> tuple[float, float]:
    """Percentile interval; non-finite samples (a zero denominator) are left out."""
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return math.nan, math.nan
    low, high = np.quantile(finite, [(1.0 - ci) / 2.0, (1.0 + ci) / 2.0])
    return float(low), float(high)


def _oriented_ratio(system: Any, baseline: Any, lower_is_better: bool) -> Any:
    """Speedup-style ratio (> 1 = system better); inf/nan where the denominator is zero."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if lower_is_better:
            return np.divide(baseline, system)
        return np.divide(system, baseline)


def _improvement_pct(system: float, baseline: float, lower_is_better: bool) -> float:
    """Percent change relative to the baseline mean, positive when the system is better
    (for a time: 2x speedup = 50% less time)."""
    if baseline == 0.0:
        return math.nan
    change = (baseline - system) if lower_is_better else (system - baseline)
    return 100.0 * change / abs(baseline)


def _resolve_test(test: str, n_system: int, n_baseline: int) -> str:
    if test != "auto":
        return test
    enough = min(n_system, n_baseline) >= AUTO_MANN_WHITNEY_MIN_N
    return "mannwhitney" if enough else "welch"


def _run_test(name: str, x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, str]:
    """(statistic, df, p, text) of the two-sided test, or nans with the reason it was not run."""
    label = TEST_NAMES[name]
    sizes = f"n={x.size} vs {y.size}"
    if min(x.size, y.size) < 2:
        return math.nan, math.nan, math.nan, f"{label} not run: {sizes} (needs n>=2 per group)"
    if name == "welch" and np.ptp(x) == 0.0 and np.ptp(y) == 0.0:
        reason = "no variance within either group (identical repeats)"
        return math.nan, math.nan, math.nan, f"{label} not run: {sizes}, {reason}"
    if name == "welch":
        result = sps.ttest_ind(x, y, equal_var=False)
        statistic, df = float(result.statistic), float(result.df)
    else:
        result = sps.mannwhitneyu(x, y, alternative="two-sided")
        statistic, df = float(result.statistic), math.nan
    p_value = float(result.pvalue)
    return statistic, df, p_value, f"{label}, {sizes}, {_format_p(p_value)}"


def _format_p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def _ci_text(ci: float, resamples: int, seed: int) -> str:
    return f"{_percent(ci)} bootstrap CI ({resamples} resamples, percentile, seed {seed})"


def _summary_method(n: int, ci: float, resamples: int, seed: int) -> str:
    if n == 1:
        return "single value (n=1 seed); no spread or CI"
    return f"mean of n={n} seeds; {_ci_text(ci, resamples, seed)}"
