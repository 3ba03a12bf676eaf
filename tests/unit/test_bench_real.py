"""``bench --only real``: the engine's overhead against PyTorch's DDP from pairs of runs. The
real runs are faked (``launch.run``); what is tested is the order of a pair's runs, the paired
and unpaired estimates, their ranges, the verdict and what the command prints."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from runners import bench, cli, resample
from runners.real import launch, worker


class FakeRuns:
    """``launch.run`` on a machine whose speed drifts from one repeat to the next: DDP's
    iteration in repeat r takes ``ddp[r]``, the engine's ``ratio`` times it; ``fail``:
    (repeat, implementation) runs that fail both attempts."""

    def __init__(self, ddp: list[float], ratio: float, fail=()):
        self.ddp, self.ratio, self.fail = ddp, ratio, set(fail)
        self.calls: list[tuple[str, str]] = []
        self.slots: dict[str, list[list]] = {}  # per model: [repeat, implementation, tries]

    def __call__(self, spec, work):
        model, impl = spec.workload, spec.real.implementation
        self.calls.append((model, impl))
        slots = self.slots.setdefault(model, [])
        last = slots[-1] if slots else None
        if last and (last[0], last[1]) in self.fail and last[2] == 1:
            last[2] = 2  # the bench tries a failed run once more
        else:
            slots.append([len(slots) // 2, impl, 1])  # two slots a repeat
        repeat = slots[-1][0]
        if (repeat, impl) in self.fail:
            raise launch.RealRunError(f"rank 1 died ({impl}, repeat {repeat})")
        t = self.ddp[repeat] * (self.ratio if impl == "lab" else 1.0)
        used = "inline" if impl == "lab" else ""  # as the worker reports the engine's
        return SimpleNamespace(metrics={"iteration_time_median_s": t}, ranks=[{"dispatch": used}])


def test_a_pair_s_order_alternates_from_one_repeat_to_the_next():
    assert [bench.pair_order(r) for r in range(3)] == [
        ("default", "lab"),
        ("lab", "default"),
        ("default", "lab"),
    ]


def test_pairs_cancel_the_machine_s_drift_where_the_sides_medians_do_not(monkeypatch):
    """The machine's speed swings by 2x between repeats; the engine is always 3 % slower.
    Paired: 3.0 %, its range 3.0-3.0 %, met; the two sides' medians see the swing."""
    drift = [0.010, 0.020, 0.011, 0.019, 0.012]
    runs = FakeRuns(drift, 1.03)
    monkeypatch.setattr(launch, "run", runs)
    (case,) = bench.run_real(
        ("vgg16-debug",), repeats=5, iterations=5, progress=False, interleave=False
    )
    assert [impl for _, impl in runs.calls] == [
        "default", "lab", "lab", "default", "default", "lab", "lab", "default", "default", "lab",
    ]  # fmt: skip
    assert case["overhead_pct"] == pytest.approx(3.0)
    assert case["overhead_ci_pct"] == pytest.approx([3.0, 3.0])
    assert case["verdict"] == "met" and case["meets_target"]
    assert case["method"] == "launched" and case["repeats"] == 5
    assert case["pairs"][1] == pytest.approx([0.020, 0.0206])
    assert case["ddp_first_pairs"] == 3
    low, high = case["overhead_unpaired_ci_pct"]
    assert high - low > 20.0, "the medians over separate runs carry the machine's swing"


def test_a_pair_with_a_side_that_failed_twice_is_left_out(monkeypatch):
    runs = FakeRuns([0.010, 0.020, 0.011], 1.10, fail={(1, "lab")})
    monkeypatch.setattr(launch, "run", runs)
    (case,) = bench.run_real(
        ("vgg16-debug",), repeats=3, iterations=5, progress=False, interleave=False
    )
    assert case["repeats"] == 2 and len(case["failures"]) == 2
    assert case["ddp_first_pairs"] == 2  # repeat 1, the engine first, left out
    assert case["failures"][0].startswith("lab: rank 1 died")
    assert case["runs"]["default"] == pytest.approx([0.010, 0.020, 0.011])
    assert len(case["runs"]["lab"]) == 2
    assert case["overhead_pct"] == pytest.approx(10.0)
    assert case["verdict"] == "missed" and not case["meets_target"]


def test_the_verdict_is_judged_on_the_range():
    assert bench.overhead_verdict(2.0, (1.0, 4.9)) == "met"
    assert bench.overhead_verdict(2.0, (1.0, 6.0)) == "not resolved"
    assert bench.overhead_verdict(6.0, (5.5, 9.0)) == "missed"
    assert bench.overhead_verdict(6.0, (4.0, 9.0)) == "not resolved"
    assert bench.overhead_verdict(-8.0, None) == "met"  # one pair: the estimate alone
    overhead, interval = bench.paired_overhead([(0.010, 0.0104)])
    assert overhead == pytest.approx(4.0) and interval is None
    with pytest.raises(ValueError, match="no pair"):
        bench.paired_overhead([])


def test_the_command_prints_each_model_s_pairs_range_and_verdict(monkeypatch, capsys):
    monkeypatch.setattr(launch, "run", FakeRuns([0.010, 0.020, 0.011], 0.98))
    assert cli.main(["bench", "--only", "real", "--launched", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if "engine-vs-ddp/gpt2-debug" in s)
    assert (
        "overhead  -2.0% (-2.0 to -2.0%) over 3 pairs of 150-iteration runs; the medians'" in line
    )
    assert line.endswith("met (target 5%)")
    assert "geometric mean -2.0%" in out
    rows = [s for s in out.splitlines() if s.startswith("real engine-vs-ddp/")]
    assert len(rows) == 6 and len({s.index(" DDP ") for s in rows}) == 1, rows  # one column


class SlotRuns:
    """``launch.run`` for the control: the ``n``-th call of a model takes ``times[n]``."""

    def __init__(self, times: list[float]):
        self.times = times
        self.calls: dict[str, list[str]] = {}

    def __call__(self, spec, work):
        calls = self.calls.setdefault(spec.workload, [])
        calls.append(spec.real.implementation)
        return SimpleNamespace(
            metrics={"iteration_time_median_s": self.times[len(calls) - 1]}, ranks=[{}]
        )


def test_the_control_runs_ddp_again_beside_the_pair_s_ddp_run():
    assert bench.run_order(0) == ("default", "lab")
    assert bench.run_order(0, control=True) == ("control", "default", "lab")
    assert bench.run_order(1, control=True) == ("lab", "default", "control")
    assert bench.run_order(2, control=True) == bench.run_order(0, control=True)


def test_the_control_scores_ddp_against_itself_and_leaves_the_engine_s_figures(monkeypatch):
    """Repeat 0 runs control, DDP, engine; repeat 1 engine, DDP, control. DDP's second run is
    4 % slower, then 2 % faster, than its pair's; the engine 3 % slower than DDP in both."""
    runs = SlotRuns([0.0104, 0.010, 0.0103, 0.0206, 0.020, 0.0196])
    monkeypatch.setattr(launch, "run", runs)
    (case,) = bench.run_real(
        ("vgg16-debug",), 2, iterations=5, progress=False, control=True, interleave=False
    )
    assert runs.calls["vgg16-debug"] == ["default", "default", "lab", "lab", "default", "default"]
    assert sum(case["pairs"], []) == pytest.approx([0.010, 0.0103, 0.020, 0.0206])
    assert case["overhead_pct"] == pytest.approx(3.0)
    assert sum(case["control_pairs"], []) == pytest.approx([0.010, 0.0104, 0.020, 0.0196])
    assert case["control_pct"] == pytest.approx(1.0)  # the median of +4 and -2 %
    assert case["control_ci_pct"] == pytest.approx([-2.0, 4.0])
    assert case["control_verdict"] == "met"  # -2 to +4 %: all of it under the 5 % target
    assert case["runs"]["control"] == pytest.approx([0.0104, 0.0196])
    assert case["runs"]["default"] == pytest.approx([0.010, 0.020])
    monkeypatch.setattr(launch, "run", SlotRuns([0.010, 0.0103, 0.0206, 0.020]))
    (plain,) = bench.run_real(("vgg16-debug",), 2, iterations=5, progress=False, interleave=False)
    assert plain["overhead_pct"] == pytest.approx(case["overhead_pct"])
    assert "control_pct" not in plain


def test_the_command_prints_the_control_and_refuses_it_without_the_real_bench(monkeypatch, capsys):
    monkeypatch.setattr(launch, "run", SlotRuns([0.0104, 0.010, 0.0103] * 12))
    assert cli.main(["bench", "--only", "real", "--launched", "--repeats", "1", "--control"]) == 0
    out = capsys.readouterr().out
    assert "control: DDP against itself +4.0% over 1 pair: met" in out
    assert cli.main(["bench", "--only", "cluster", "--control"]) == 2
    assert "--control: only with --only real" in capsys.readouterr().err


def test_the_runs_length_is_a_flag_of_the_real_bench_alone(monkeypatch, capsys):
    lengths = []

    def run(spec, work):
        lengths.append(spec.iterations)
        return SimpleNamespace(metrics={"iteration_time_median_s": 0.01}, ranks=[{}])

    monkeypatch.setattr(launch, "run", run)
    assert (
        cli.main(["bench", "--only", "real", "--launched", "--repeats", "1", "--iterations", "40"])
        == 0
    )
    assert lengths and set(lengths) == {40}
    assert "over 1 pair of 40-iteration runs" in capsys.readouterr().out
    for bad in (
        ["--only", "real", "--iterations", "0"],
        ["--only", "cluster", "--iterations", "50"],
    ):
        assert cli.main(["bench", *bad]) == 2
        assert "--iterations: " in capsys.readouterr().err
    assert len(lengths) == 12  # the refusals ran nothing


# -- --interleave: the sides take turns in blocks within one launch --------------------------


def test_the_interleaved_blocks_alternate_as_the_launched_pairs_do():
    for pair in range(4):
        assert worker.interleave_order(pair, False) == bench.run_order(pair)
        assert worker.interleave_order(pair, True) == bench.run_order(pair, control=True)


class InterleavedRuns:
    """``launch.run`` with ``interleave``: a series of blocks as the worker writes them.
    Launch k's machine runs at ``speed[k]`` (its DDP iteration's time), and within it each
    block pair at a speed of its own (``drift``); the engine takes ``ratio`` times DDP's time,
    the control ``control`` times; a block's trimmed ends take 10x (must not count)."""

    def __init__(self, speed, drift, ratio, control=1.0):
        self.speed, self.drift, self.ratio, self.control = speed, drift, ratio, control
        self.plans: list[dict] = []
        self.specs: list = []

    def __call__(self, spec, work, interleave=None):
        assert interleave is not None, "the interleaved bench launches with its plan"
        k = len(self.plans)
        self.plans.append(dict(interleave))
        self.specs.append(spec)
        series, block = [], interleave["block"]
        factor = {"default": 1.0, "lab": self.ratio, "control": self.control}
        for pair in range(1 + interleave["pairs"]):
            base = self.speed[k] * (3.0 if pair == 0 else self.drift[(pair - 1) % len(self.drift)])
            for side in worker.interleave_order(pair, interleave["control"]):
                for i in range(block):
                    trim = i in (0, block - 1)
                    series.append(
                        {
                            "iteration_time_s": base * factor[side] * (10.0 if trim else 1.0),
                            "warmup": pair == 0,
                            "side": side,
                            "block": pair,
                            "trim": trim,
                        }
                    )
        used = "inline" if spec.real.dispatch == "auto" else "thread"  # DDP's buckets: FIFO
        return SimpleNamespace(series=series, metrics={}, ranks=[{"dispatch": used}])


def test_interleaved_blocks_cancel_drift_within_and_between_launches(monkeypatch):
    """The machine runs 2x slower in one launch than another and swings by 50 % from one
    block pair to the next; the engine is 3 % slower throughout, the control as fast as DDP.
    The warm-up pair and the trimmed ends (10x) count nowhere."""
    runs = InterleavedRuns([0.010, 0.020, 0.012], [1.0, 1.5, 0.8], 1.03)
    monkeypatch.setattr(launch, "run", runs)
    (case,) = bench.run_real(
        ("vgg16-debug",), repeats=3, iterations=25, progress=False, control=True, interleave=True
    )
    block = bench.INTERLEAVE_BLOCK
    assert [p["ddp_built_first"] for p in runs.plans] == [True, False, True]
    assert {p["pairs"] for p in runs.plans} == {3}  # 25 untrimmed iterations: 3 blocks of 10
    assert runs.specs[0].warmup_iterations == 0  # the worker marks the warm-up pair's rows
    assert runs.specs[0].iterations == 4 * 3 * block  # 1 + 3 pairs, three sides
    assert runs.specs[0].real.implementation == "lab"
    assert runs.specs[0].real.dispatch == "auto" and case["engine_dispatch"] == "inline"
    assert case["method"] == "interleaved" and case["repeats"] == 3
    assert case["block_pairs"] == 9 and case["iterations"] == 30
    assert case["overhead_pct"] == pytest.approx(3.0)
    assert case["overhead_ci_pct"] == pytest.approx([3.0, 3.0])
    assert case["verdict"] == "met"
    assert case["launch_overhead_pct"] == pytest.approx([3.0, 3.0, 3.0])
    assert case["control_pct"] == pytest.approx(0.0) and case["control_verdict"] == "met"
    assert case["ddp_iteration_s"] == pytest.approx(0.015)  # the median block, not a trim
    assert case["ddp_first_pairs"] == 3  # pair 2 of each launch (the control first, then DDP)
    low, high = case["overhead_unpaired_ci_pct"]
    assert high - low > 20.0, "the sides' medians over all blocks carry the swing"


def test_the_interleaved_range_counts_the_launches_differences():
    """Two launches read -2 % and +8 % on every block pair: the pooled pairs alone would
    give a narrow range; the two-stage draw spans both launches' figures."""
    a = [(0.010, 0.0098)] * 10
    b = [(0.010, 0.0108)] * 10
    overhead, (low, high) = bench.launches_overhead([a, b])
    assert low == pytest.approx(-2.0) and high == pytest.approx(8.0)
    assert bench.overhead_verdict(overhead, (low, high)) == "not resolved"
    one, interval = bench.launches_overhead([[(0.010, 0.0101)]])
    assert one == pytest.approx(1.0) and interval is None
    with pytest.raises(ValueError, match="no block pair"):
        bench.launches_overhead([[], []])


def test_the_two_stage_draw_reduces_to_the_plain_one_with_one_group():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    two = resample.two_stage_medians([values], np.random.default_rng(0), 4000)
    one = resample.medians(values, np.random.default_rng(1), 4000)
    assert set(np.unique(two)) <= {1.0, 2.0, 3.0, 4.0, 10.0}
    assert abs(float(np.mean(two)) - float(np.mean(one))) < 0.1
    with pytest.raises(ValueError, match="every group"):
        resample.two_stage_medians([[1.0], []], np.random.default_rng(0), 10)


def test_the_command_interleaves_by_default_and_refuses_launched_elsewhere(monkeypatch, capsys):
    monkeypatch.setattr(launch, "run", InterleavedRuns([0.010] * 12, [1.0], 0.98))
    assert cli.main(["bench", "--only", "real", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if "engine-vs-ddp/gpt2-debug" in s)
    assert (
        f"-2.0% (-2.0 to -2.0%) over 30 block pairs ({bench.INTERLEAVE_BLOCK} iterations a "
        "side, ends trimmed) in 2 launches" in line
    )
    assert line.endswith("met (target 5%)")
    assert "(the engine's dispatch: inline)" in out
    assert cli.main(["bench", "--only", "comm", "--launched"]) == 2
    assert "--launched: only with --only real" in capsys.readouterr().err


def test_the_engine_s_dispatch_is_a_flag_of_the_real_bench(monkeypatch, capsys):
    """``--dispatch thread`` reaches the engine side's spec, and the report says what the
    engine used; elsewhere the flag is refused."""
    runs = InterleavedRuns([0.010] * 6, [1.0], 1.0)
    monkeypatch.setattr(launch, "run", runs)
    assert cli.main(["bench", "--only", "real", "--repeats", "1", "--dispatch", "thread"]) == 0
    assert {spec.real.dispatch for spec in runs.specs} == {"thread"}
    assert "(the engine's dispatch: thread)" in capsys.readouterr().out
    assert cli.main(["bench", "--only", "comm", "--dispatch", "thread"]) == 2
    assert "--dispatch: only with --only real" in capsys.readouterr().err


def test_the_shortest_interleaved_run_is_a_valid_spec(monkeypatch):
    """``--iterations 1`` still asks one block pair after the warm-up one, and the spec the
    launch gets validates (its warm-up once came to its iterations, and was refused)."""
    runs = InterleavedRuns([0.010], [1.0], 1.0)
    monkeypatch.setattr(launch, "run", runs)
    (case,) = bench.run_real(("vgg16-debug",), repeats=1, iterations=1, progress=False)
    assert runs.plans[0]["pairs"] == 1 and case["block_pairs"] == 1
    assert case["overhead_ci_pct"] is None  # one pair: the estimate alone
