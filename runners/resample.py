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
