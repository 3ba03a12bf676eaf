"""Local executor: run ``python -m runners run`` as a detached process on this machine.

The run lives in its own session/process group, outlives the process that launched it (a Celery
worker may restart meanwhile), and records its exit code in ``exit_code`` next to its log when it
ends. Whoever polls later (another process) learns the state from the files and the process
table only, so nothing is held in memory:

    <home>/spec.json     the spec to run (written by the caller)
    <home>/pid           the run's session leader (written first, so ``find`` can recover a
                         run whose launcher died before it recorded the handle)
    <home>/process.log   stdout + stderr of the runner
    <home>/exit_code     written when the runner exits
    <home>/run/          the run directory (appears atomically on success)

No user-provided string reaches a shell: the command is a fixed argument vector; only paths we
generate are passed, as positional arguments.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .base import EXIT_CODE, LOG, RUN_DIR, SPEC, Resources, Status

__all__ = ["EXIT_CODE", "LOG", "RUN_DIR", "SPEC", "Handle", "LocalExecutor", "Status"]

# $1 = python, $2 = home. The inner shell records its pid, waits for the runner and records
# its status.
PID = "pid"
_WRAPPER = (
    'cd "$2" && echo $$ >pid.tmp && mv pid.tmp pid && '
    '"$1" -m runners run spec.json --out run >process.log 2>&1; '
    "echo $? >exit_code.tmp && mv exit_code.tmp exit_code"
)
# Detach: a new session (own process group), stdin closed; print the session leader's pid.
_LAUNCH = 'setsid sh -c "$0" runner "$@" </dev/null >/dev/null 2>&1 & echo $!'


@dataclass(frozen=True)
class Handle:
    pid: int
    start_ticks: int | None  # from /proc/<pid>/stat, to tell a reused pid from ours


def launch(
    home: Path,
    python: str = sys.executable,
    project_root: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Handle:
    """Start the run in ``home`` (which must contain spec.json); return at once."""
    home = Path(home).resolve()
    if not (home / SPEC).is_file():
        raise FileNotFoundError(f"{home / SPEC} is missing")
    for stale in (EXIT_CODE, "exit_code.tmp", PID, "pid.tmp"):
        (home / stale).unlink(missing_ok=True)
    root = project_root or Path(__file__).resolve().parents[2]
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": _pythonpath(root)}
    out = subprocess.run(
        ["sh", "-c", _LAUNCH, _WRAPPER, python, str(home)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=30,
    )
    pid = int(out.stdout.strip())
    _wait_for_own_group(pid)
    return Handle(pid=pid, start_ticks=_start_ticks(pid))


def _wait_for_own_group(pid: int, timeout_s: float = 5.0) -> None:
    """Return once ``pid`` leads its own process group (setsid has run), so that ``stop``
    right after ``launch`` reaches the whole run; or once the process has already ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.getpgid(pid) == pid:
                return
        except ProcessLookupError:
            return
        time.sleep(0.005)
    raise RuntimeError(f"run process {pid} did not start its own session within {timeout_s} s")


def poll(home: Path, handle: Handle) -> Status:
    """State of a launched run, from its files and the process table."""
    code_file = Path(home) / EXIT_CODE
    if code_file.exists():
        return Status("exited", int(code_file.read_text().strip() or -1))
    if _alive(handle):
        return Status("running")
    # The exit code may have been written between the two checks.
    if code_file.exists():
        return Status("exited", int(code_file.read_text().strip() or -1))
    return Status("lost")


def stop(handle: Handle, sig: int = signal.SIGTERM) -> bool:
    """Signal the run's whole process group; False if it is already gone."""
    if not _alive(handle):
        return False
    try:
        os.killpg(handle.pid, sig)
    except ProcessLookupError:
        return False
    return True


ENDED = -1  # start ticks of a handle found after its run ended: never matches a live process


def find(home: Path) -> Handle | None:
    """The run started in ``home``: its session leader while it runs (pid and start time,
    checked against the wrapper's command line, so that a reused pid is not taken for it),
    a handle that is never alive once it has ended (its exit code written, as ``poll``
    judges it, even if the wrapper has not exited yet) or gone, None if no run was started
    there."""
    home = Path(home).resolve()
    try:
        pid = int((home / PID).read_text().strip())
    except (OSError, ValueError):
        return None
    ended = (home / EXIT_CODE).exists()  # the wrapper's last act: it exits next
    ticks = None if ended else _start_ticks(pid)
    if ticks is not None and _is_wrapper_of(pid, home):
        return Handle(pid=pid, start_ticks=ticks)
    # Gone: ``poll`` of this handle reads the exit code, or says "lost" if there is none.
    return Handle(pid=pid, start_ticks=ENDED)


def _is_wrapper_of(pid: int, home: Path) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return len(argv) >= 6 and argv[2] == _WRAPPER.encode() and argv[5] == str(home).encode()


def _alive(handle: Handle) -> bool:
    ticks = _start_ticks(handle.pid)
    if ticks is None:
        return False
    return handle.start_ticks is None or ticks == handle.start_ticks


def _start_ticks(pid: int) -> int | None:
    """Process start time in clock ticks, or None if no such live (non-zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _pythonpath(root: Path) -> str:
    existing = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{existing}" if existing else str(root)


class LocalExecutor:
    """The ``base.Executor`` interface over the functions above; the handle is
    ``"<pid>:<start ticks>"`` (the start time tells a reused pid from ours). GPUs from the
    ledger reach the run as ``CUDA_VISIBLE_DEVICES`` (UUIDs)."""

    name = "local"

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def launch(self, home: Path, run_id: int, resources: Resources) -> str:
        env = dict(resources.env)
        # the GPUs the ledger gave the run, and none other (real.device auto would take any
        # GPU it sees, including another run's)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(resources.gpus)
        handle = launch(home, python=self.python, extra_env=env)
        return format_handle(handle)

    def poll(self, home: Path, handle: str) -> Status:
        return poll(home, parse_handle(handle))

    def stop(self, home: Path, handle: str, grace_s: float = 10.0) -> bool:
        parsed = parse_handle(handle)
        if not stop(parsed):
            return False
        deadline = time.monotonic() + grace_s
        while _alive(parsed) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(parsed):
            stop(parsed, signal.SIGKILL)
        return True

    def find(self, run_id: int, home: Path | None = None) -> str | None:
        """The handle of the run launched in ``home``, from its ``pid`` file, if it started:
        the worker may have died between starting it and recording the handle. A run that
        has ended meanwhile gets a handle that is never alive (its ``exit_code`` tells the
        rest); None when nothing was started there."""
        if home is None:
            return None
        found = find(Path(home))
        return format_handle(found) if found else None


def format_handle(handle: Handle) -> str:
    return f"{handle.pid}:{handle.start_ticks if handle.start_ticks is not None else ''}"


def parse_handle(text: str) -> Handle:
    pid, _, ticks = text.partition(":")
    return Handle(int(pid), int(ticks) if ticks else None)
