"""Other work on a real run's host (``runners.real.others``): processes outside the launcher's
tree, their CPU between two scans of ``/proc``, counted over the run's steady iterations."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.real import launch, others
from runners.real.others import Interval, Proc


def _stat(pid: int, name: str, ppid: int, utime: int, stime: int, start: int) -> bytes:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    # stime cutime cstime priority nice threads itrealvalue starttime ...
    rest = [ppid, 1, 1, 0, -1, 0, 0, 0, 0, 0, utime, stime, 0, 0, 20, 0, 1, 0, start, 0]
    return f"{pid} ({name}) S {' '.join(map(str, rest))}\n".encode()


def test_a_stat_line_whose_name_holds_spaces_and_brackets_parses():
    p = others.parse_stat(_stat(7, "a (b) c)", 1, 30, 12, 555))
    assert p == Proc("a (b) c)", 1, 42, 555)
    assert others.parse_stat(b"7 (cut short") is None
    assert others.parse_stat(b"7 (x) S 1 2") is None


def test_a_scan_reads_every_process_but_the_kernel_threads(tmp_path):
    for pid, name, ppid in ((1, "init", 0), (2, "kthreadd", 0), (9, "ksoftirqd/0", 2),
                            (40, "python3", 1)):  # fmt: skip
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_bytes(_stat(pid, name, ppid, 5, 5, 100 + pid))
    (tmp_path / "self").mkdir()  # not a pid
    (tmp_path / "77").mkdir()  # ended between the listing and the read: no stat
    seen = others.scan(tmp_path)
    assert sorted(seen) == [1, 40]
    assert seen[40] == Proc("python3", 1, 10, 140)


def test_the_run_s_tree_is_its_root_and_every_descendant():
    procs = {1: Proc("init", 0, 0, 1), 10: Proc("launcher", 1, 0, 2),
             11: Proc("torchrun", 10, 0, 3), 12: Proc("rank", 11, 0, 4),
             20: Proc("shell", 1, 0, 5), 21: Proc("vim", 20, 0, 6)}  # fmt: skip
    assert others.tree(procs, 10) == {10, 11, 12}
    assert others.tree(procs, 99) == {99}  # gone: itself only


def test_an_interval_counts_the_others_only_and_not_a_pid_reused():
    before = {10: Proc("launcher", 1, 100, 2), 20: Proc("make", 1, 50, 5),
              30: Proc("old", 1, 70, 6), 31: Proc("python3", 1, 10, 7)}  # fmt: skip
    after = {10: Proc("launcher", 1, 150, 2), 20: Proc("make", 1, 80, 5),
             30: Proc("new", 1, 3, 9), 31: Proc("python3", 1, 35, 7),
             40: Proc("born", 1, 9, 10)}  # fmt: skip
    iv = others.interval(before, after, {10}, 0.0, 0.5)
    # the launcher is ours; pid 30 is another process now; pid 40 was not seen before
    assert iv.ticks == {"make": 30, "python3": 25}
    named = others.interval(before, after, {10}, 0.0, 0.5, lambda pid, p: f"{p.name}#{pid}")
    assert named.ticks == {"make#20": 30, "python3#31": 25}


def test_the_window_counts_each_interval_for_its_share_inside():
    ivs = [Interval(0.0, 1.0, {"a": 100}), Interval(1.0, 2.0, {"a": 50, "b": 20}),
           Interval(2.0, 3.0, {"b": 100})]  # fmt: skip
    seen = others.over(ivs, 0.5, 2.0, hz=100)
    assert seen is not None
    # a: half of 1.0 s + all of 0.5 s = 1.0 CPU-s, b: 0.2 CPU-s, over 1.5 s
    assert seen.by_name == pytest.approx({"a": 1.0 / 1.5, "b": 0.2 / 1.5})
    assert seen.cores == pytest.approx(1.2 / 1.5)
    assert seen.window_s == pytest.approx(1.5)
    assert seen.top(1) == [("a", pytest.approx(1.0 / 1.5))]
    assert others.over(ivs, 5.0, 6.0, hz=100) is None  # no scan there
    assert others.over(ivs, 2.0, 2.0, hz=100) is None  # an empty window


def test_the_record_and_the_words_flag_from_a_tenth_of_a_core():
    quiet = others.Others(0.02, {"sshd": 0.02}, 1.5)
    assert not quiet.record()["flagged"]
    busy = others.Others(0.93, {"python3 loop.py": 0.91, "celery": 0.02, "x": 0.001}, 2.0)
    assert busy.record() == {
        "cores": 0.93,
        "top": [{"name": "python3 loop.py", "cores": 0.91},
                {"name": "celery", "cores": 0.02}, {"name": "x", "cores": 0.001}],
        "window_s": 2.0,
        "flagged": True,
    }  # fmt: skip
    assert busy.words() == "0.93 cores (python3 loop.py 0.91, celery 0.02)"


def test_a_label_is_the_command_line_on_one_line_without_directories(tmp_path):
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "cmdline").write_bytes(b"/usr/bin/python3\0/tmp/s/loop.py\0--x\0/a/b\0y\0")
    assert others.label(5, "python3", tmp_path) == "python3 loop.py --x b"
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "cmdline").write_bytes(b"")  # a zombie's
    assert others.label(6, "defunct", tmp_path) == "defunct"
    assert others.label(7, "gone", tmp_path) == "gone"
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "cmdline").write_bytes(b"python3\0-c\0" + b"x = 1\n" * 30)
    text = others.label(8, "python3", tmp_path)
    assert len(text) == others.LABEL_CHARS and text.endswith("…") and "\n" not in text


def test_the_steady_window_is_rank_0_s_measured_begins_on_this_machine():
    rows = [{"begin": 10.0 + i, "warmup": i < 2} for i in range(6)]
    assert launch.steady_window([{"iterations": rows}]) == (12.0, 15.0)
    elsewhere = {"iterations": rows, "clock": {"boot_id": "another machine", "barrier_s": 0}}
    assert launch.steady_window([elsewhere]) is None
    assert launch.steady_window([{"iterations": rows[:3]}]) is None  # one measured
    assert launch.steady_window([]) is None


def test_a_watch_sees_a_busy_process_outside_the_tree_and_not_one_inside(tmp_path):
    """Real processes: a CPU-bound loop beside a sleeping root is another's work; the same
    loop as the root is the run's own."""
    code = "import time\nend = time.time() + 3\nwhile time.time() < end: pass"
    loop = [sys.executable, "-c", code]
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    busy = subprocess.Popen(loop)
    try:
        with (
            others.Watch(root=sleeper.pid, interval_s=0.1) as beside,
            others.Watch(root=busy.pid, interval_s=0.1) as own,
        ):
            start = time.perf_counter()
            time.sleep(1.5)
            end = time.perf_counter()
        seen, mine = beside.over(start, end), own.over(start, end)
    finally:
        for p in (busy, sleeper):
            p.kill()
            p.wait()
    assert seen is not None and mine is not None
    name, cores = seen.top(1)[0]
    assert name.startswith(Path(sys.executable).name + " -c") and cores > 0.3
    assert mine.by_name.get(name, 0.0) < 0.05
    assert os.sysconf("SC_CLK_TCK") == beside.hz


def test_a_watch_that_cannot_read_proc_measures_nothing(monkeypatch):
    """No scan, no interval: ``over`` gives None (no ``other_cores``), not a quiet 0."""
    monkeypatch.setattr(others, "scan", lambda proc=None: {})
    with others.Watch(interval_s=0.05) as watch:
        start = time.perf_counter()
        time.sleep(0.3)
        end = time.perf_counter()
    assert watch.intervals == [] and watch.over(start, end) is None
