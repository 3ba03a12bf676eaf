"""runners.executors.local: detached runs, polled from files and the process table only."""

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from runners.executors import local

DEADLINE_S = 30.0
INTERVAL_S = 0.05
QUICK = {"system": "wfbp", "workload": "resnet50", "iterations": 3, "cluster": {"workers": 2}}
# Runs for minutes: stopped by the tests long before it ends.
ENDLESS = {
    "system": "wfbp",
    "workload": "vgg16",
    "iterations": 100_000,
    "cluster": {"workers": 64},
}
# No process can have this pid: Linux pids stay below PID_MAX_LIMIT (2**22).
IMPOSSIBLE_PID = 2**22 + 4321


def wait_for(condition, what):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(INTERVAL_S)
    raise AssertionError(f"timed out after {DEADLINE_S} s waiting for {what}")


def wait_until_done(home, handle):
    def done():
        status = local.poll(home, handle)
        return status if status.state != "running" else None

    return wait_for(done, "the run to end")


def log_text(home):
    try:
        return (home / local.LOG).read_text()
    except FileNotFoundError:  # the wrapper shell has not created it yet
        return ""


def home_with(tmp_path, spec):
    home = tmp_path / "home"
    home.mkdir()
    (home / local.SPEC).write_text(json.dumps(spec))
    return home


def live_group_members(pgid):
    """Pids of live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def leads_its_group_or_is_gone(handle):
    try:
        return not local._alive(handle) or os.getpgid(handle.pid) == handle.pid
    except ProcessLookupError:
        return True


@pytest.fixture
def launched():
    """Launch runs; whatever is still alive at teardown is killed (by its own group id, once
    that group exists)."""
    handles = []

    def launch(home):
        handle = local.launch(home)
        handles.append(handle)
        return handle

    yield launch
    for handle in handles:
        wait_for(lambda h=handle: leads_its_group_or_is_gone(h), "the run's group to exist")
        local.stop(handle, signal.SIGKILL)


def test_launch_returns_at_once_and_the_run_finishes_with_exit_code_zero(tmp_path, launched):
    home = home_with(tmp_path, QUICK)

    started = time.monotonic()
    handle = launched(home)
    assert time.monotonic() - started < 5  # the launcher does not wait for the run
    assert handle.pid > 0

    status = wait_until_done(home, handle)

    assert status == local.Status("exited", 0), log_text(home)
    assert (home / local.RUN_DIR / "summary.json").is_file()
    summary = json.loads((home / local.RUN_DIR / "summary.json").read_text())
    assert summary["metrics"]["iteration_time_s"] > 0
    assert (home / local.EXIT_CODE).read_text().strip() == "0"
    assert "iteration_time_s" in (home / local.LOG).read_text()


def test_the_run_gets_its_own_process_group(tmp_path, launched):
    home = home_with(tmp_path, ENDLESS)
    handle = launched(home)
    wait_for(lambda: "run wfbp on vgg16" in log_text(home), "the run to start")

    assert os.getpgid(handle.pid) == handle.pid
    assert os.getsid(handle.pid) == handle.pid
    assert os.getpgid(handle.pid) != os.getpgid(0)
    assert handle.start_ticks is not None


def test_an_invalid_spec_ends_with_exit_code_two_and_the_field_in_the_log(tmp_path, launched):
    home = home_with(tmp_path, {**QUICK, "cluster": {"workers": 0}})
    handle = launched(home)

    status = wait_until_done(home, handle)

    assert status == local.Status("exited", 2)
    assert "cluster.workers" in (home / local.LOG).read_text()
    assert not (home / local.RUN_DIR).exists()


def test_launch_without_a_spec_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        local.launch(tmp_path)


def test_launch_removes_a_stale_exit_code(tmp_path, launched):
    home = home_with(tmp_path, ENDLESS)
    (home / local.EXIT_CODE).write_text("0\n")

    handle = launched(home)

    assert local.poll(home, handle).state == "running"


def test_stop_kills_the_whole_group_and_the_run_is_then_lost(tmp_path, launched):
    home = home_with(tmp_path, ENDLESS)
    handle = launched(home)
    # The runner logs its first line once it has validated the spec and started simulating.
    wait_for(lambda: "run wfbp on vgg16" in log_text(home), "the run to start")
    assert local.poll(home, handle) == local.Status("running")
    members = live_group_members(handle.pid)
    assert handle.pid in members
    assert len(members) >= 2  # the wrapper shell and the python runner

    assert local.stop(handle) is True

    wait_for(lambda: not live_group_members(handle.pid), "the process group to die")
    status = wait_until_done(home, handle)
    assert status == local.Status("lost")  # the wrapper died too: no exit code was recorded
    assert not (home / local.EXIT_CODE).exists()
    assert not (home / local.RUN_DIR).exists()
    assert local.stop(handle) is False  # already gone


def test_stop_right_after_launch_stops_the_run(tmp_path, monkeypatch, launched):
    # Widen the (normally milliseconds) window between launch() returning and setsid(2) with a
    # setsid that starts late, so the race shows on every run.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    slow_setsid = fake_bin / "setsid"
    slow_setsid.write_text(f'#!/bin/sh\nsleep 0.5\nexec {shutil.which("setsid")} "$@"\n')
    slow_setsid.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    home = home_with(tmp_path, ENDLESS)
    handle = launched(home)

    assert local.stop(handle) is True
    assert wait_until_done(home, handle) == local.Status("lost")


def test_a_handle_with_the_wrong_start_time_is_not_our_process(tmp_path):
    real_ticks = local._start_ticks(os.getpid())
    assert real_ticks is not None

    assert local._alive(local.Handle(os.getpid(), real_ticks)) is True
    assert local._alive(local.Handle(os.getpid(), real_ticks + 1)) is False
    assert local.poll(tmp_path, local.Handle(os.getpid(), real_ticks + 1)).state == "lost"
    assert local.poll(tmp_path, local.Handle(os.getpid(), real_ticks)).state == "running"


def test_poll_of_a_pid_that_does_not_exist_reports_lost(tmp_path):
    handle = local.Handle(IMPOSSIBLE_PID, None)

    assert local.poll(tmp_path, handle) == local.Status("lost")
    assert local.stop(handle) is False


def test_poll_reads_the_exit_code_even_when_the_process_is_gone(tmp_path):
    (tmp_path / local.EXIT_CODE).write_text("1\n")

    assert local.poll(tmp_path, local.Handle(IMPOSSIBLE_PID, None)) == local.Status("exited", 1)


# -- find: a run whose launcher died before it recorded the handle ----------------------------


def test_find_recovers_the_handle_of_a_running_run_from_its_home(tmp_path, launched):
    home = home_with(tmp_path, ENDLESS)
    handle = launched(home)
    wait_for(lambda: (home / local.PID).exists(), "the wrapper to record its pid")

    assert local.find(home) == handle
    executor = local.LocalExecutor()
    assert executor.find(7, home) == local.format_handle(handle)
    assert executor.poll(home, executor.find(7, home)).state == "running"


def test_find_gives_a_never_alive_handle_once_the_run_has_ended(tmp_path, launched):
    home = home_with(tmp_path, QUICK)
    handle = launched(home)
    wait_until_done(home, handle)

    found = local.find(home)

    assert found == local.Handle(pid=handle.pid, start_ticks=local.ENDED)
    assert not local._alive(found) and local.stop(found) is False
    assert local.poll(home, found) == local.Status("exited", 0)


def test_find_takes_a_run_whose_exit_code_is_written_as_ended(tmp_path, launched):
    """The wrapper writes the exit code as its last act and exits just after: in between,
    ``find`` says the run has ended, as ``poll`` does (CI once found the wrapper still alive
    there). Here the wrapper stays alive with an exit code written beside it."""
    home = home_with(tmp_path, ENDLESS)
    handle = launched(home)
    wait_for(lambda: (home / local.PID).exists(), "the wrapper to record its pid")
    assert local.find(home) == handle
    (home / local.EXIT_CODE).write_text("0\n")

    assert local.find(home) == local.Handle(pid=handle.pid, start_ticks=local.ENDED)
    assert local._alive(handle), "the wrapper itself still runs"


def test_find_of_a_killed_run_polls_as_lost(tmp_path, launched):
    home = home_with(tmp_path, ENDLESS)
    handle = launched(home)
    wait_for(lambda: (home / local.PID).exists(), "the wrapper to record its pid")
    wait_for(lambda: leads_its_group_or_is_gone(handle), "the run's group to exist")
    local.stop(handle, signal.SIGKILL)
    wait_for(lambda: not local._alive(handle), "the run to die")

    assert local.poll(home, local.find(home)).state == "lost"


def test_find_is_none_where_nothing_was_started(tmp_path):
    home = home_with(tmp_path, QUICK)

    assert local.find(home) is None
    assert local.LocalExecutor().find(3, home) is None
    assert local.LocalExecutor().find(3) is None  # no home: nothing to look in


def test_find_does_not_take_a_reused_pid_for_the_run(tmp_path):
    """The pid file names a live process that is not this home's wrapper (this test)."""
    home = home_with(tmp_path, QUICK)
    (home / local.PID).write_text(f"{os.getpid()}\n")

    found = local.find(home)

    assert found == local.Handle(pid=os.getpid(), start_ticks=local.ENDED)
    assert local.stop(found) is False  # never signals the process that reused the pid
    assert local.poll(home, found).state == "lost"
