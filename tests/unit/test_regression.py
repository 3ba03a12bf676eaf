"""Regression detection over nightly histories: alerts on real changes, silence on noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.reports.regression import (
    DEFAULT_THRESHOLDS,
    FALLBACK_THRESHOLDS,
    Point,
    Thresholds,
    detect,
    thresholds_for,
)

JCT = DEFAULT_THRESHOLDS["avg_jct_s"]  # lower is better
THROUGHPUT = DEFAULT_THRESHOLDS["throughput_samples_per_s"]  # higher is better


def nights(seed: int, n: int, noise: float = 0.02, level: float = 100.0) -> list[float]:
    """``n`` nights of Gaussian noise of relative size ``noise`` around ``level``."""
    rng = np.random.default_rng(seed)
    return list(level * (1.0 + noise * rng.standard_normal(n)))


def with_step(values: list[float], at: int, factor: float) -> list[float]:
    return [v * factor if i >= at else v for i, v in enumerate(values)]


def verdicts(values, thresholds, start: int, stop: int) -> list:
    """The finding of every prefix ending at night ``start`` .. ``stop - 1``."""
    return [detect(values[: k + 1], thresholds) for k in range(start, stop)]


@pytest.mark.parametrize("thresholds", [JCT, THROUGHPUT], ids=["lower", "higher"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pure_noise_raises_nothing_on_any_prefix(thresholds, seed):
    values = nights(seed, 60)
    early = verdicts(values, thresholds, 0, thresholds.min_history)
    assert {f.status for f in early} == {"insufficient-history"}
    judged = verdicts(values, thresholds, thresholds.min_history, 60)
    assert [f.message for f in judged if f.status != "ok"] == []


def test_a_15_percent_step_is_found_within_three_nights():
    values = with_step(nights(5, 40), at=30, factor=1.15)
    assert all(f.status == "ok" for f in verdicts(values, JCT, 5, 30))
    found = [f for f in verdicts(values, JCT, 30, 33) if f.status == "alert"]
    assert found and found[0].kind in ("point", "step")
    assert all(f.status == "alert" for f in verdicts(values, JCT, 32, 40))


def test_the_alert_message_says_what_rose_by_how_much_against_which_baseline():
    values = [99.0, 101.0] * 5 + [112.0]  # baseline mean 100
    f = detect(values, JCT)
    assert (f.status, f.kind) == ("alert", "point")
    assert f.rel_change == pytest.approx(0.12)
    assert f.message == f"avg_jct_s rose 12.0% over its 10-night baseline (z={f.z:.1f})"


def test_a_sustained_step_below_the_point_threshold_is_reported_as_a_step():
    values = with_step(nights(0, 40, noise=0.025), at=30, factor=1.09)
    after = verdicts(values, JCT, 30, 40)
    assert all(abs(f.z) <= JCT.z_threshold for f in after)  # no single night is convincing
    steps = [f for f in after if f.status == "alert"]
    assert steps and all(f.kind == "step" for f in steps)
    assert steps[-1].step_index == 30
    assert steps[-1].message.startswith("avg_jct_s stepped up")


@pytest.mark.parametrize(("thresholds", "factor"), [(JCT, 0.85), (THROUGHPUT, 1.15)])
def test_an_improvement_is_reported_as_improvement_not_alert(thresholds, factor):
    values = with_step(nights(5, 40), at=30, factor=factor)
    statuses = {f.status for f in verdicts(values, thresholds, 30, 40)}
    assert statuses == {"improvement"}
    assert detect(values, thresholds).message.endswith("; improvement")


def test_a_drop_of_a_higher_is_better_metric_is_an_alert():
    values = with_step(nights(5, 40), at=30, factor=0.85)
    f = detect(values[:31], THROUGHPUT)
    assert f.status == "alert" and f.z < 0
    assert f.message.startswith("throughput_samples_per_s fell 1")


def test_an_outlier_night_does_not_inflate_the_baseline():
    values = nights(0, 12, noise=0.01)
    values[8] = 300.0  # one broken night
    values.append(112.0)
    f = detect(values, JCT)
    assert f.excluded_outliers == 1 and f.baseline_n == 9  # only the broken night is left out
    assert f.baseline_mean == pytest.approx(100.0, abs=1.0)
    assert f.baseline_std < 2.0  # the plain std with the 300 in it is over 60
    assert f.status == "alert"


def test_one_wild_night_is_not_a_step_once_it_has_passed():
    values = nights(4, 30)
    values[26] = 150.0
    assert detect(values[:27], JCT).status == "alert"
    assert [f.status for f in verdicts(values, JCT, 27, 30)] == ["ok"] * 3


def test_an_expected_change_annotation_resets_the_baseline():
    values = with_step(nights(6, 45), at=30, factor=1.15)
    assert detect(values, JCT).status == "alert"  # without the annotation
    points = [Point(v, label=f"n{i}", expected_change=(i == 30)) for i, v in enumerate(values)]
    after = verdicts(points, JCT, 30, 45)
    assert [f.status for f in after[: JCT.min_history]] == ["insufficient-history"] * 5
    assert {f.status for f in after[JCT.min_history :]} == {"ok"}
    assert "since the baseline reset at n30" in after[0].message


def test_a_flat_history_ignores_tiny_noise_but_not_a_real_jump():
    flat = [100.0] * 20
    assert detect([*flat, 100.3], JCT).status == "ok"  # the std floor (1%) holds
    f = detect([*flat, 110.0], JCT)
    assert f.status == "alert" and f.baseline_std == pytest.approx(1.0)


def test_too_short_history_gives_insufficient_history():
    f = detect([100.0, 101.0, 99.0], JCT)
    assert (f.status, f.kind) == ("insufficient-history", None)
    assert math.isnan(f.z) and f.value == 99.0
    assert detect([], JCT).status == "insufficient-history"


def test_the_defaults_know_each_metric_direction_and_fall_back_for_others():
    lower = {m for m, t in DEFAULT_THRESHOLDS.items() if t.lower_is_better}
    assert lower == {"iteration_time_s", "avg_jct_s"}
    assert set(DEFAULT_THRESHOLDS) == lower | {
        "throughput_samples_per_s",
        "total_utility",
        "speedup",
    }
    assert thresholds_for("avg_jct_s") is JCT
    other = thresholds_for("peak_memory_bytes")
    assert other.metric == "peak_memory_bytes"
    assert other.z_threshold == FALLBACK_THRESHOLDS.z_threshold


def test_thresholds_reject_a_window_shorter_than_the_minimum_history():
    with pytest.raises(ValueError, match="Thresholds.window"):
        Thresholds("x", window=3, min_history=5)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "fast", None])
def test_a_bad_value_raises_value_error_naming_the_point(bad):
    with pytest.raises(ValueError, match=r"^points\[2\]"):
        detect([100.0, 101.0, bad, 99.0], JCT)
