"""The percentile bootstrap's two steps, shared by the fidelity ranges (``fidelity``,
``fidelity_pool``) and the engine-overhead bench (``bench``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def medians(values: Any, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The medians of ``resamples`` draws of ``values`` with replacement, as many a draw as
    there are values."""
    x = np.asarray(values, dtype=float)
    return np.median(x[rng.integers(0, x.size, (resamples, x.size))], axis=1)


def interval(draws: Any, ci: float) -> tuple[float, float]:
    """The ``ci`` central share of ``draws``: its lower and upper percentiles."""
    low, high = np.quantile(draws, [(1.0 - ci) / 2.0, (1.0 + ci) / 2.0])
    return float(low), float(high)


def two_stage_medians(groups: Any, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The medians of ``resamples`` two-stage draws from ``groups`` (lists of values): as many
    groups as there are, drawn with replacement, then each drawn group's values drawn with
    replacement, pooled. Where values within a group are alike for a reason of the group's
    own (one launch, one sitting), the range this gives counts the groups' differences, which
    a draw of the pooled values alone would take for more evidence than it is."""
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("every group needs a value")
    width = max(a.size for a in arrays)
    # per group, ``resamples`` draws of its values, padded to the widest group with NaN
    drawn = np.full((len(arrays), resamples, width), np.nan)
    for g, a in enumerate(arrays):
        drawn[g, :, : a.size] = a[rng.integers(0, a.size, (resamples, a.size))]
    chosen = rng.integers(0, len(arrays), (resamples, len(arrays)))
    pooled = drawn[chosen, np.arange(resamples)[:, None], :]  # (resamples, groups, width)
    return np.nanmedian(pooled.reshape(resamples, -1), axis=1)
