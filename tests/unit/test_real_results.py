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


def test_horovod_s_wait_in_its_step_is_exposed_communication_not_compute():
    """Horovod's rows carry ``sync_s``, the rank's wait in ``optimizer.synchronize()``
    (inside ``backward_s``, which runs to the step's end): left out of the compute and
    reported as the exposed communication; its total communication is not seen (no
    ``comm_time_s``). The last iteration's is left out of the metric, as the engine's."""
    times = [0.020] * 4
    ranks = []
    for r in range(2):
        rank = _rank(times, drain=0.0, compute=0.010)
        for row in rank["iterations"]:
            last = row is rank["iterations"][-1]
            row["sync_s"] = 0.008 if last else 0.003 + 0.001 * r
        ranks.append(rank)
    result = launch._results(_spec(4), ranks, launch.Network("loopback"))
    # the steady iterations' mean (the last left out of the timing metrics, as the engine's)
    assert result.metrics["exposed_comm_s"] == pytest.approx(0.0035)
    assert result.units["exposed_comm_s"] == "s"
    assert "comm_time_s" not in result.metrics
    # compute: every measured iteration's 10 ms less its wait (the last's too: its wait is
    # its own step's, not the run's drain, which comes after the loop)
    assert result.series[1]["compute_time_s"] == pytest.approx(0.0065)
    assert result.series[-1]["exposed_comm_s"] == pytest.approx(0.008)
    assert result.metrics["compute_time_s"] == pytest.approx((3 * 0.0065 + 0.002) / 4)
    # a record without it (DDP's on a GPU): nothing taken, nothing reported
    plain = launch._results(_spec(4), [_rank(times, 0.0)] * 2, launch.Network("loopback"))
    assert "exposed_comm_s" not in plain.metrics
    assert plain.metrics["compute_time_s"] == pytest.approx(0.004)


def test_ddp_s_timed_buckets_give_its_communication_time_beside_its_wait():
    """DDP's rows carry its wait in the step (``sync_s``) and, on the CPU, its buckets'
    all-reduces end to end (``comm_s``, its timed communication hook): both reported, the
    steady iterations' means; no negotiations (the lab's engine's alone)."""
    times = [0.020] * 4
    ranks = []
    for r in range(2):
        rank = _rank(times, drain=0.0, compute=0.010)
        for i, row in enumerate(rank["iterations"]):
            row.update(sync_s=0.002, comm_s=0.006 + 0.001 * r + (0.010 if i == 4 else 0.0))
        ranks.append(rank)
    result = launch._results(_spec(4), ranks, launch.Network("loopback"))
    assert result.metrics["comm_time_s"] == pytest.approx(0.0065)  # iterations 1-3
    assert result.units["comm_time_s"] == "s"
    assert result.metrics["exposed_comm_s"] == pytest.approx(0.002)
    assert "negotiations_per_iteration" not in result.metrics
    assert result.series[-1]["comm_time_s"] == pytest.approx(0.0165)
    # one rank's row without it (a record from before the hook): no total reported
    ranks[1]["iterations"][2].pop("comm_s")
    partial = launch._results(_spec(4), ranks, launch.Network("loopback"))
    assert "comm_time_s" not in partial.metrics
    assert partial.metrics["exposed_comm_s"] == pytest.approx(0.002)


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


def test_each_iteration_s_cpu_time_runs_from_its_begin_to_the_next():
    """``set_iteration_times`` turns each row's process CPU time at its begin into the CPU
    time of its interval (the last: to the CPU time at the end), and drops the marks."""
    from runners.real.engine import iteration_row, set_iteration_times

    loss = __import__("torch").tensor(1.0)
    rows = [iteration_row(i, 0.1 * i, (0.1 * i, 0.1 * i, 0.1 * i), loss, False, 2.0 + i * i)
            for i in range(3)]  # fmt: skip
    set_iteration_times(rows, 0.3, cpu_finished=10.0)
    assert [row["cpu_s"] for row in rows] == pytest.approx([1.0, 3.0, 4.0])
    assert not any("cpu_begin" in row for row in rows)
    plain = [iteration_row(0, 0.0, (0.0, 0.0, 0.0), loss, False)]
    set_iteration_times(plain, 0.1)
    assert "cpu_s" not in plain[0]


def test_the_ranks_cpu_time_is_the_steady_iterations_mean_and_its_cores():
    times = [0.020, 0.022, 0.021, 0.023]
    ranks = [_rank(times, drain=0.05), _rank(times, drain=0.05)]
    for r, rank in enumerate(ranks):
        for i, row in enumerate(rank["iterations"]):
            row["cpu_s"] = 0.5 if row["warmup"] else 0.010 + 0.002 * r + 0.001 * i
    result = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    want = statistics.fmean(0.011 + 0.001 * i for i in (1, 2, 3))  # warm-up and last left out
    assert result.metrics["cpu_time_s"] == pytest.approx(want)
    assert result.metrics["cpu_cores_per_rank"] == pytest.approx(
        want / result.metrics["iteration_time_s"]
    )
    assert result.units["cpu_cores_per_rank"] == "cores"
    del ranks[1]["iterations"][2]["cpu_s"]  # a record without it (older worker): none
    result = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    assert "cpu_time_s" not in result.metrics


def test_each_iteration_s_machine_ticks_run_from_its_begin_to_the_next():
    """``set_iteration_times`` turns the machine's busy and total ticks at each row's begin
    into the interval's (the last: to the ticks at the end), with the machine's CPUs."""
    from runners.real.engine import iteration_row, set_iteration_times

    loss = __import__("torch").tensor(1.0)
    marks = [(100, 200, 2), (130, 240, 2), (190, 300, 2)]
    rows = [iteration_row(i, 0.1 * i, (0.1 * i,) * 3, loss, False, None, marks[i])
            for i in range(3)]  # fmt: skip
    set_iteration_times(rows, 0.3, machine_finished=(200, 320, 2))
    assert [row["machine_ticks"] for row in rows] == [[30, 40, 2], [60, 60, 2], [10, 20, 2]]
    assert not any("machine_begin" in row for row in rows)
    plain = [iteration_row(0, 0.0, (0.0, 0.0, 0.0), loss, False)]
    set_iteration_times(plain, 0.1, machine_finished=(1, 2, 2))
    assert "machine_ticks" not in plain[0]


def test_the_machine_s_busy_cores_are_rank_0_s_over_the_steady_iterations():
    """The cores rank 0's machine kept busy: its busy ticks over its total across the steady
    iterations (the warm-up and the last left out, as the timing metrics), times its CPUs;
    other ranks' rows (none on a real run) are not read; none without every steady row's."""
    times = [0.020, 0.022, 0.021, 0.023]
    ranks = [_rank(times, drain=0.05), _rank(times, drain=0.05)]
    busy = {0: 1, 1: 30, 2: 35, 3: 20, 4: 2}  # per iteration, of 40 ticks
    for row in ranks[0]["iterations"]:
        row["machine_ticks"] = [busy[row["iteration"]], 40, 2]
    result = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    assert result.metrics["machine_busy_cores"] == pytest.approx(2 * (30 + 35 + 20) / 120)
    assert result.units["machine_busy_cores"] == "cores"
    for row in ranks[1]["iterations"]:  # another rank's (its machine's) is not rank 0's
        row["machine_ticks"] = [40, 40, 2]
    again = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    assert again.metrics["machine_busy_cores"] == result.metrics["machine_busy_cores"]
    del ranks[0]["iterations"][2]["machine_ticks"]  # a steady row without it: none
    result = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    assert "machine_busy_cores" not in result.metrics


def test_busy_ticks_reads_the_machine_s_busy_and_total_ticks_and_its_cpus(tmp_path):
    from runners.manifest import busy_cores, busy_ticks

    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  100 5 20 300 7 1 2 3 0 0\n"
        "cpu0 50 2 10 150 3 1 1 2 0 0\ncpu1 50 3 10 150 4 0 1 1 0 0\nintr 1 2\n"
    )
    assert busy_ticks(str(stat)) == (100 + 5 + 20 + 1 + 2, 128 + 300 + 7 + 3, 2)
    assert busy_cores(30, 40, 2) == pytest.approx(1.5)
    assert busy_cores(0, 0, 2) is None
    stat.write_text("nonsense\n")
    assert busy_ticks(str(stat)) is None
    assert busy_ticks(str(tmp_path / "missing")) is None


def test_the_training_thread_s_cpu_and_run_queue_wait_per_iteration():
    """``set_iteration_times`` turns the training thread's scheduler statistics at each row's
    begin (``thread_sched``: ns on a CPU, ns waiting for one) into the interval's seconds;
    ``_results`` averages them over the ranks and the steady iterations (none without every
    steady row's)."""
    from runners.real.engine import iteration_row, set_iteration_times

    loss = __import__("torch").tensor(1.0)
    marks = [(0, 0), (4_000_000, 1_000_000), (10_000_000, 5_000_000)]
    rows = [iteration_row(i, 0.1 * i, (0.1 * i,) * 3, loss, False, None, None, marks[i])
            for i in range(3)]  # fmt: skip
    set_iteration_times(rows, 0.3, sched_finished=(13_000_000, 5_000_000))
    assert [(r["thread_cpu_s"], r["runq_wait_s"]) for r in rows] == [
        (0.004, 0.001), (0.006, 0.004), (0.003, 0.0)
    ]  # fmt: skip
    assert not any("sched_begin" in row for row in rows)
    times = [0.020, 0.022, 0.021, 0.023]
    ranks = [_rank(times, drain=0.05), _rank(times, drain=0.05)]
    for k, rank in enumerate(ranks):
        for row in rank["iterations"]:
            row["thread_cpu_s"] = 0.010 + 0.002 * k
            row["runq_wait_s"] = 0.001 * row["iteration"] + 0.002 * k
    result = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    assert result.metrics["train_thread_cpu_s"] == pytest.approx(0.011)
    # steady iterations 1-3 (the warm-up and the last left out), ranks 0 and 1
    assert result.metrics["train_runq_wait_s"] == pytest.approx(0.002 + 0.001)
    assert result.units["train_runq_wait_s"] == "s"
    del ranks[1]["iterations"][2]["runq_wait_s"]
    result = launch._results(_spec(len(times)), ranks, launch.Network("loopback"))
    assert "train_runq_wait_s" not in result.metrics


def test_thread_sched_reads_the_thread_s_time_on_a_cpu_and_waiting_for_one(tmp_path):
    from runners.manifest import thread_sched

    assert thread_sched() is not None  # Linux: this thread's own
    stat = tmp_path / "schedstat"
    stat.write_text("123 456 7\n")
    assert thread_sched(str(stat)) == (123, 456)
    stat.write_text("x\n")
    assert thread_sched(str(stat)) is None
    assert thread_sched(str(tmp_path / "missing")) is None


def _clocked(rank: int, boot: str | None, barrier_s: float, rows: list[list]) -> dict:
    return {"rank": rank, "clock": {"boot_id": boot, "barrier_s": barrier_s}, "timeline": rows}


def test_every_rank_s_timeline_is_merged_on_rank_0_s_clock():
    """Ranks on rank 0's machine (its boot id) keep their times, whatever their barrier
    reading; a rank elsewhere, or with an unknown boot id, is shifted so that it left the
    barrier when rank 0 did; the merged rows start at 0, sorted by start."""
    zero = _clocked(0, "a", 100.0, [[0, "compute[w0]", "forward", "l", 100.5, 100.7, 0]])
    same = _clocked(1, "a", 100.2, [[0, "compute[w1]", "forward", "l", 100.4, 100.6, 0]])
    rows = launch.merged_timeline([zero, same])
    assert rows == [
        [0, "compute[w1]", "forward", "l", 0.0, pytest.approx(0.2), 0],
        [0, "compute[w0]", "forward", "l", pytest.approx(0.1), pytest.approx(0.3), 0],
    ]
    # another machine's clock: 5000 s apart, its barrier 0.05 s before its row
    away = _clocked(1, "b", 5000.0, [[0, "network[w1]", "allreduce", "l", 5000.05, 5000.9, 8]])
    unknown = {**away, "clock": {"boot_id": None, "barrier_s": 5000.0}}
    for other in (away, unknown):
        rows = launch.merged_timeline([zero, other])
        assert [row[1] for row in rows] == ["network[w1]", "compute[w0]"]
        assert rows[0][4:6] == [0.0, pytest.approx(0.85)]
        assert rows[1][4:6] == [pytest.approx(0.45), pytest.approx(0.65)]
    # no clocks (the PS arena's, all in rank 0's record): the times as they are
    plain = [{"rank": 0, "timeline": [[1, "uplink", "push", "l", 3.0, 4.0, 9]]},
             {"rank": 1, "timeline": [[1, "ps0.in", "push", "l", 3.5, 4.0, 9]]}]  # fmt: skip
    assert [row[4] for row in launch.merged_timeline(plain)] == [0.0, 0.5]
    assert launch.merged_timeline([{"rank": 0, "timeline": []}]) == []
