"""Bayesian optimisation for ByteScheduler's auto-tuner (a reconstruction).

ByteScheduler (Peng et al., SOSP 2019) tunes its two knobs online with Bayesian optimisation
(``bytescheduler/common/tuner.py`` and ``search.py``, built on the ``bayes_opt`` package):

* search space, in millions of parameters: credit in [1, 16] for parameter-server jobs and in
  [4, 64] for all-reduce jobs; partition size in [2, 32] (see ``BYTESCHEDULER_BOUNDS``);
* 10 random initial points, then at most 15 tuning steps;
* acquisition: expected improvement with exploration ``xi = 0.1``;
* objective: minimise the measured training step time;
* rank 0 runs the tuner and broadcasts the chosen settings to the other ranks.

Those are facts of the original; everything below the acquisition level is our reconstruction
with numpy/scipy, not a copy of ``bayes_opt``:

* inputs are scaled to the unit cube; outputs are standardised (zero mean, unit variance);
* Gaussian process with an isotropic Matérn 5/2 kernel, a relative noise/jitter of ``1e-6``,
  the signal variance profiled out in closed form and the length scale chosen by maximising the
  log marginal likelihood over a log grid on [0.02, 5] (unit-cube units) refined by a bounded
  scalar search;
* expected improvement for minimisation, ``EI = a Φ(a/σ) + σ φ(a/σ)`` with
  ``a = y_best - μ - xi``, computed on the standardised outputs (``bayes_opt`` applies ``xi`` in
  the target's raw units; standardising makes ``xi`` scale-free);
* the acquisition is maximised over 2000 seeded random candidates, then L-BFGS-B runs from the
  3 best of them (SciPy >= 1.15's L-BFGS-B calls LAPACK and can be several times slower on a
  busy machine with a multi-threaded OpenBLAS; ``OPENBLAS_NUM_THREADS=1`` avoids that);
* integer dimensions are searched on ``[ceil(lo) - 0.5, floor(hi) + 0.5]`` and rounded to the
  nearest integer before evaluation, so each integer is equally likely in the random phase; a
  proposal that repeats an evaluated point is replaced by the best unevaluated candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize, minimize_scalar
from scipy.special import ndtr

__all__ = ["BYTESCHEDULER_BOUNDS", "TuningResult", "bayes_minimize"]

# ByteScheduler's search space in millions of parameters, per architecture.
BYTESCHEDULER_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "ps": {"credit": (1.0, 16.0), "partition": (2.0, 32.0)},
    "allreduce": {"credit": (4.0, 64.0), "partition": (2.0, 32.0)},
}

_JITTER = 1e-6
_LS_GRID = np.geomspace(0.02, 5.0, 30)
_N_CANDIDATES = 2000
_N_STARTS = 3
_SQRT5 = math.sqrt(5.0)
_SQRT2PI = math.sqrt(2.0 * math.pi)


@dataclass
class TuningResult:
    """Outcome of ``bayes_minimize``: the best evaluated point (first one on ties), its value,
    every evaluation in order as ``(params, value)`` and how many there were."""

    best_params: dict[str, float]
    best_value: float
    history: list[tuple[dict[str, float], float]] = field(default_factory=list)
    evaluations: int = 0


def _matern52(a: np.ndarray, b: np.ndarray, length_scale: float) -> np.ndarray:
    # Broadcasting, not BLAS: tiny matrix products through a threaded BLAS are slower here.
    diff = a[:, None, :] - b[None, :, :]
    s = _SQRT5 * np.sqrt(np.einsum("ijk,ijk->ij", diff, diff)) / length_scale
    return (1.0 + s + s * s / 3.0) * np.exp(-s)


class _GP:
    """Zero-mean GP on standardised targets; see the module docstring for the choices."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x = x
        self.y = y
        log_ls = np.log(_LS_GRID)
        scores = [self._neg_log_lik(v) for v in log_ls]
        i = int(np.argmin(scores))
        lo, hi = log_ls[max(i - 1, 0)], log_ls[min(i + 1, len(log_ls) - 1)]
        best = log_ls[i]
        if hi > lo:
            res = minimize_scalar(self._neg_log_lik, bounds=(lo, hi), method="bounded")
            if res.fun < scores[i]:
                best = float(res.x)
        self.length_scale = float(np.exp(best))
        factor, self.alpha, self.var = self._fit(self.length_scale)
        self.k_inv = cho_solve(factor, np.eye(len(y)))

    def _fit(self, length_scale: float) -> tuple[tuple[np.ndarray, bool], np.ndarray, float]:
        n = len(self.y)
        k = _matern52(self.x, self.x, length_scale)
        jitter = _JITTER
        while True:
            try:
                factor = cho_factor(k + jitter * np.eye(n), lower=True)
                break
            except np.linalg.LinAlgError:
                jitter *= 10.0
        alpha = cho_solve(factor, self.y)
        var = max(float(self.y @ alpha) / n, 1e-12)
        return factor, alpha, var

    def _neg_log_lik(self, log_ls: float) -> float:
        factor, _, var = self._fit(float(np.exp(log_ls)))
        n = len(self.y)
        return 0.5 * n * math.log(var) + float(np.log(np.diag(factor[0])).sum())

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = _matern52(x, self.x, self.length_scale)
        mean = np.einsum("ij,j->i", k, self.alpha)
        quad = np.einsum("ij,ij->i", np.einsum("ij,jk->ik", k, self.k_inv), k)
        var = self.var * np.maximum(1.0 - quad, 0.0)
        return mean, np.sqrt(var)


def _expected_improvement(gp: _GP, x: np.ndarray, y_best: float, xi: float) -> np.ndarray:
    mean, sd = gp.predict(x)
    a = y_best - mean - xi
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 1e-12, a / sd, 0.0)
    return np.where(
        sd > 1e-12, a * ndtr(z) + sd * np.exp(-0.5 * z * z) / _SQRT2PI, np.maximum(a, 0.0)
    )


def _check(
    bounds: dict[str, tuple[float, float]],
    integer: Collection[str],
    init_points: int,
    n_iter: int,
    xi: float,
) -> None:
    if not bounds:
        raise ValueError("bounds: at least one parameter is required")
    for name, pair in bounds.items():
        try:
            lo, hi = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise ValueError(
                f"bounds[{name!r}]: must be a (low, high) pair, got {pair!r}"
            ) from None
        if not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
            raise ValueError(f"bounds[{name!r}]: need finite low < high, got {pair!r}")
    for name in integer:
        if name not in bounds:
            raise ValueError(f"integer: {name!r} is not a parameter in bounds")
        lo, hi = bounds[name]
        if math.ceil(lo) > math.floor(hi):
            raise ValueError(f"bounds[{name!r}]: no integer lies in {bounds[name]!r}")
    if init_points < 1:
        raise ValueError(f"init_points: must be >= 1, got {init_points}")
    if n_iter < 0:
        raise ValueError(f"n_iter: must be >= 0, got {n_iter}")
    if not (math.isfinite(xi) and xi >= 0):
        raise ValueError(f"xi: must be a finite number >= 0, got {xi}")


def bayes_minimize(
    f: Callable[[dict[str, float]], float],
    bounds: dict[str, tuple[float, float]],
    *,
    init_points: int = 10,
    n_iter: int = 15,
    xi: float = 0.1,
    seed: int = 0,
    integer: Collection[str] = (),
) -> TuningResult:
    """Minimise ``f`` over the box ``bounds`` by Bayesian optimisation (ByteScheduler's tuner).

    ``init_points`` seeded uniform random points are evaluated first, then ``n_iter`` points
    that each maximise expected improvement under a Gaussian process fitted to everything seen
    so far (details and what is reconstructed: module docstring). Parameters listed in
    ``integer`` are passed to ``f`` as Python ints, the others as floats; every point lies
    within ``bounds``. ``f`` must return a finite number (``ValueError`` otherwise); it is
    assumed deterministic or mildly noisy. The search is deterministic for a given ``seed``.
    Invalid arguments raise ``ValueError`` naming the offending parameter.
    """
    _check(bounds, integer, init_points, n_iter, xi)
    names = sorted(bounds)
    is_int = np.array([n in integer for n in names])
    lo = np.array([math.ceil(bounds[n][0]) - 0.5 if n in integer else bounds[n][0] for n in names])
    hi = np.array([math.floor(bounds[n][1]) + 0.5 if n in integer else bounds[n][1] for n in names])
    int_lo = np.array([math.ceil(bounds[n][0]) if n in integer else 0 for n in names])
    int_hi = np.array([math.floor(bounds[n][1]) if n in integer else 0 for n in names])
    span = hi - lo
    rng = np.random.default_rng(seed)

    def snap(u: np.ndarray) -> np.ndarray:
        """Unit-cube points -> the unit-cube image of the point actually evaluated."""
        v = lo + np.clip(u, 0.0, 1.0) * span
        v = np.where(is_int, np.clip(np.round(v), int_lo, int_hi), v)
        return (v - lo) / span

    def params_of(u: np.ndarray) -> dict[str, float]:
        v = lo + u * span
        return {
            n: int(round(v[i])) if is_int[i] else float(min(max(v[i], lo[i]), hi[i]))
            for i, n in enumerate(names)
        }

    xs: list[np.ndarray] = []
    history: list[tuple[dict[str, float], float]] = []

    def evaluate(u: np.ndarray) -> None:
        params = params_of(u)
        value = float(f(dict(params)))
        if not math.isfinite(value):
            raise ValueError(f"f: returned a non-finite value {value} at {params}")
        xs.append(u)
        history.append((params, value))

    def seen(u: np.ndarray) -> bool:
        return any(float(np.abs(u - x).max()) < 1e-9 for x in xs)

    for u in snap(rng.random((init_points, len(names)))):
        evaluate(u)

    for _ in range(n_iter):
        x = np.array(xs)
        y = np.array([v for _, v in history])
        sd = y.std()
        y = (y - y.mean()) / (sd if sd > 0 else 1.0)
        gp = _GP(x, y)
        y_best = float(y.min())

        cand = snap(rng.random((_N_CANDIDATES, len(names))))
        ei = _expected_improvement(gp, cand, y_best, xi)
        order = np.argsort(-ei, kind="stable")

        def neg_ei(u: np.ndarray, gp: _GP = gp, y_best: float = y_best) -> float:
            return -float(_expected_improvement(gp, u[None, :], y_best, xi)[0])

        best_u, best_ei = cand[order[0]], float(ei[order[0]])
        for start in cand[order[:_N_STARTS]]:
            res = minimize(neg_ei, start, method="L-BFGS-B", bounds=[(0.0, 1.0)] * len(names))
            u = snap(res.x)
            val = -neg_ei(u)
            if val > best_ei:
                best_u, best_ei = u, val
        if seen(best_u):
            fresh = (cand[i] for i in order if not seen(cand[i]))
            best_u = next(fresh, best_u)
        evaluate(best_u)

    values = [v for _, v in history]
    i = int(np.argmin(values))
    return TuningResult(
        best_params=dict(history[i][0]),
        best_value=values[i],
        history=history,
        evaluations=len(history),
    )
