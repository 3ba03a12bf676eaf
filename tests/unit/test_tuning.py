"""runners.tuning: ByteScheduler's Bayesian-optimisation auto-tuner (reconstruction)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runners.tuning import BYTESCHEDULER_BOUNDS, TuningResult, bayes_minimize


def wavy(p):
    # Several local minima on [-5, 10]; the global one is at x ~= 1.5584, f ~= -0.9681.
    x = p["x"]
    return math.sin(3 * x) + 0.1 * (x - 1) ** 2


def bowl(p):
    # Tilted quadratic, minimum 0 at (a, b) = (0.7, 0.2).
    da, db = p["a"] - 0.7, p["b"] - 0.2
    return 4 * da * da + db * db + 0.5 * da * db


def branin(p):
    # Standard Branin; global minimum 0.397887 at three points.
    x, y = p["x"], p["y"]
    return (
        (y - 5.1 / (4 * math.pi**2) * x * x + 5 / math.pi * x - 6) ** 2
        + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x)
        + 10
    )


# Random search with the same 20 points gets within 0.2 of the optimum ~40% of the time, so
# requiring it for five seeds is what makes this test able to fail.
@pytest.mark.parametrize("seed", range(5))
def test_1d_finds_global_minimum_and_beats_its_random_start(seed):
    r = bayes_minimize(wavy, {"x": (-5.0, 10.0)}, init_points=5, n_iter=15, seed=seed)
    assert isinstance(r, TuningResult)
    assert r.evaluations == len(r.history) == 20
    assert abs(r.best_params["x"] - 1.5584) < 0.2
    assert r.best_value < -0.85
    # The random phase alone lands far from the global minimum at these seeds.
    assert r.best_value < min(v for _, v in r.history[:5]) - 0.1


def test_1d_quadratic_low_exploration_is_precise():
    r = bayes_minimize(lambda p: (p["x"] - 2.3) ** 2, {"x": (-5.0, 10.0)}, init_points=5, xi=0.01)
    assert abs(r.best_params["x"] - 2.3) < 0.1


@pytest.mark.parametrize("seed", [0, 3])
def test_2d_bowl(seed):
    r = bayes_minimize(bowl, {"a": (0.0, 1.0), "b": (-1.0, 1.0)}, seed=seed)
    assert r.evaluations == 25
    assert abs(r.best_params["a"] - 0.7) < 0.05
    assert abs(r.best_params["b"] - 0.2) < 0.08
    assert r.best_value < 0.01


def test_beats_random_search_with_the_same_budget_on_branin():
    bo, rs = [], []
    for s in range(4):
        bo.append(bayes_minimize(branin, {"x": (-5.0, 10.0), "y": (0.0, 15.0)}, seed=s).best_value)
        pts = np.random.default_rng(100 + s).random((25, 2)) * 15 + np.array([-5.0, 0.0])
        rs.append(min(branin({"x": a, "y": b}) for a, b in pts))
    assert np.mean(bo) < 1.5
    assert np.mean(bo) < np.mean(rs)


def test_deterministic_for_a_seed():
    space = {"x": (-5.0, 10.0), "y": (0.0, 15.0)}
    a = bayes_minimize(branin, space, init_points=4, n_iter=4, seed=11)
    b = bayes_minimize(branin, space, init_points=4, n_iter=4, seed=11)
    c = bayes_minimize(branin, space, init_points=4, n_iter=4, seed=12)
    assert a.history == b.history
    assert a.best_params == b.best_params and a.best_value == b.best_value
    assert a.history != c.history


def test_bytescheduler_space_respects_bounds_and_integers():
    space = BYTESCHEDULER_BOUNDS["allreduce"]
    assert space == {"credit": (4.0, 64.0), "partition": (2.0, 32.0)}
    assert BYTESCHEDULER_BOUNDS["ps"]["credit"] == (1.0, 16.0)
    seen = []

    def step_time(p):
        seen.append(dict(p))
        return 0.1 + 1e-4 * (p["credit"] - 24) ** 2 + 1e-3 * (p["partition"] - 8) ** 2

    r = bayes_minimize(step_time, space, seed=0, integer={"credit", "partition"})
    assert seen == [params for params, _ in r.history]
    for p in seen:
        assert type(p["credit"]) is int and type(p["partition"]) is int
        assert 4 <= p["credit"] <= 64 and 2 <= p["partition"] <= 32
    assert abs(r.best_params["credit"] - 24) <= 6 and abs(r.best_params["partition"] - 8) <= 2


def test_mixed_dims_and_no_repeats_on_a_small_integer_grid():
    seen = []

    def f(p):
        seen.append(p)
        return (p["k"] - 2) ** 2 + (p["x"] - 0.5) ** 2

    bayes_minimize(f, {"k": (0.5, 3.2), "x": (0.0, 1.0)}, init_points=3, n_iter=5, integer=["k"])
    assert {p["k"] for p in seen} <= {1, 2, 3}
    assert all(isinstance(p["x"], float) and 0.0 <= p["x"] <= 1.0 for p in seen)

    only = []
    bayes_minimize(lambda p: only.append(p["k"]) or p["k"], {"k": (0, 3)}, init_points=1, n_iter=3,
                   integer=["k"])  # fmt: skip
    assert sorted(only) == [0, 1, 2, 3]  # four proposals, four distinct integers


@pytest.mark.parametrize(
    ("bounds", "kwargs", "name"),
    [
        ({}, {}, "bounds"),
        ({"credit": (16.0, 4.0)}, {}, "credit"),
        ({"credit": (4.0, 4.0)}, {}, "credit"),
        ({"x": (0.0, 1.0), "partition": (0.0, math.inf)}, {}, "partition"),
        ({"partition": (math.nan, 1.0)}, {}, "partition"),
        ({"partition": (1.0,)}, {}, "partition"),
        ({"partition": (0.2, 0.8)}, {"integer": ["partition"]}, "partition"),
        ({"x": (0.0, 1.0)}, {"integer": ["credit"]}, "credit"),
        ({"x": (0.0, 1.0)}, {"init_points": 0}, "init_points"),
        ({"x": (0.0, 1.0)}, {"n_iter": -1}, "n_iter"),
        ({"x": (0.0, 1.0)}, {"xi": -0.1}, "xi"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(bounds, kwargs, name):
    with pytest.raises(ValueError, match=name):
        bayes_minimize(lambda p: 0.0, bounds, **kwargs)


def test_non_finite_objective_raises():
    with pytest.raises(ValueError, match="non-finite"):
        bayes_minimize(lambda p: math.nan, {"x": (0.0, 1.0)}, init_points=2, n_iter=0)
