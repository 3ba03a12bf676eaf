"""A real run's metrics from its ranks' records (``runners.real.launch._results``): the
steady state's iteration time, as the simulator measures it (intervals between successive
iterations' begins), so the run's last iteration, whose time runs on to the end of the
ranks' drain, is in the series but not in the timing metrics."""

from __future__ import annotations

import statistics

import pytest

from runners.real import launch
from runners.spec import validate


def _spec(iterations: int) -> object:
    return validate(
        {
            "system": "wfbp",
            "mode": "real",
            "workload": "vgg16-debug",
            "iterations": iterations,
            "warmup_iterations": 1,
            "cluster": {"workers": 2},
            "real": {"network": "loopback"},
        }
    )


def _rank(times: list[float], drain: float, compute: float = 0.004) -> dict:
    """A rank's record: one warm-up iteration, then ``times``; the last iteration's time
    has the drain added (as the worker measures it: to the end of ``engine.finish``)."""
    rows = []
    begin = 0.0
    all_times = [0.5, *times]  # the warm-up iteration (slow, left out)
    for i, t in enumerate(all_times):
        last = i == len(all_times) - 1
        rows.append(
            {
                "iteration": i,
                "begin": begin,
                "forward_s": compute / 2,
                "backward_s": compute / 2,
                "loss": 2.0 - 0.1 * i,
                "warmup": i == 0,
                "iteration_time_s": t + (drain if last else 0.0),
            }
        )
        begin += t
    return {"iterations": rows, "timeline": []}


def test_the_last_iteration_s_drain_is_left_out_of_the_timing_metrics():
    times = [0.020, 0.022, 0.021, 0.023]
    ranks = [_rank(times, drain=0.050), _rank([t - 0.001 for t in times], drain=0.040)]
    result = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    steady = [t - 0.0005 for t in times[:-1]]  # the ranks' mean interval
    assert result.metrics["iteration_time_s"] == pytest.approx(statistics.fmean(steady))
    assert result.metrics["iteration_time_median_s"] == pytest.approx(statistics.median(steady))
    assert result.metrics["iteration_time_std_s"] == pytest.approx(statistics.stdev(steady))
    assert result.metrics["throughput_samples_per_s"] == pytest.approx(
        2 * _spec(len(times)).batch_size / statistics.fmean(steady)
    )
    # The series keeps every iteration, the last with its drain; losses and compute of all.
    assert len(result.series) == len(times) + 1
    assert result.series[-1]["iteration_time_s"] == pytest.approx(times[-1] - 0.0005 + 0.045)
    assert result.metrics["final_loss"] == pytest.approx(2.0 - 0.1 * len(times))
    assert result.metrics["compute_time_s"] == pytest.approx(0.004)


def test_the_drain_s_wait_is_not_exposed_communication():
    times = [0.020] * 4
    ranks = []
    for _ in range(2):
        rank = _rank(times, drain=0.030)
        for row in rank["iterations"]:
            last = row is rank["iterations"][-1]
            row.update(comm_s=0.010, wait_s=0.030 if last else 0.002, negotiations=3)
        ranks.append(rank)
    result = launch._results(_spec(4), ranks, launch.Network("loopback"))
    assert result.metrics["exposed_comm_s"] == pytest.approx(0.002)
    assert result.metrics["comm_time_s"] == pytest.approx(0.010)
    assert result.metrics["negotiations_per_iteration"] == pytest.approx(3)
    assert result.series[-1]["exposed_comm_s"] == pytest.approx(0.030)


def test_a_drain_as_long_as_the_rest_does_not_move_the_mean():
    times = [0.020] * 5
    fast = launch._results(_spec(5), [_rank(times, 0.0)] * 2, launch.Network("loopback"))
    slow = launch._results(_spec(5), [_rank(times, 0.100)] * 2, launch.Network("loopback"))
    assert slow.metrics["iteration_time_s"] == pytest.approx(fast.metrics["iteration_time_s"])
    assert slow.series[-1]["iteration_time_s"] > fast.series[-1]["iteration_time_s"] + 0.09


def test_a_wait_one_rank_pays_an_iteration_after_the_other_counts_once():
    """DDP at 0.25 Gbit/s: rank 1's backward ends with a 50 ms wait for its bucket's
    all-reduce in iteration 2; rank 0, done with it, waits as long at the start of its
    iteration 3's forward (the buffer broadcast). Both ranks' spans are the wall time: 50 ms
    more over the run, not 100 (the longest per iteration counted the wait in both)."""
    base = [0.018] * 6
    slow_1 = [t + (0.050 if i == 2 else 0.0) for i, t in enumerate(base)]
    slow_0 = [t + (0.050 if i == 3 else 0.0) for i, t in enumerate(base)]
    ranks = [_rank(slow_0, drain=0.0), _rank(slow_1, drain=0.0)]
    result = launch._results(_spec(len(base)), ranks, launch.Network("loopback"))
    steady = len(base) - 1
    assert result.metrics["iteration_time_s"] == pytest.approx(0.018 + 0.050 / steady)
    assert [s["iteration_time_s"] for s in result.series[1:]] == pytest.approx(
        [0.018, 0.018, 0.043, 0.043, 0.018, 0.018]
    )
