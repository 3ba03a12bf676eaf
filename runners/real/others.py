"""Other work on the host beside a real run: the CPU that processes outside the run used while
it measured.

A real run's times are its host's: on our 2-core machines a CPU-bound neighbour at normal
priority made wfbp's iteration 19.6 % slower (2026-12-06), and a render of an experiment's
figures beside a Horovod run made its step 33.0 ms against 19.0-19.7 ms alone. The lab keeps
its own work off a real run (``lab.measuring``), but not a user's shell, another user's job or
an export. So every real run measures what others took: a thread of the launcher reads
``/proc/<pid>/stat`` of every process every ``INTERVAL_S``; the processes outside the
launcher's own tree (the launcher, its ranks, servers, testbed helpers and delay line are the
run's) are *others*, and their CPU over rank 0's steady iterations (each sampling interval
counted for the part of it inside them), over those iterations' wall time, is the run's
``other_cores``, with the busiest others by name.

Not counted: kernel threads (on the emulated network they carry the run's own packets),
processes that start and end between two samples, and the CPU of a process's children until it
reaps them. Its own cost: a scan of 65 processes took 0.7 ms of CPU (2026-12-06), 0.3 % of a
core at ``INTERVAL_S``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTERVAL_S = 0.25  # between two scans of /proc
FLAG_CORES = 0.1  # others at or above this over a run's steady iterations: said where it shows
KTHREADD = 2  # the parent of every kernel thread
LABEL_CHARS = 48  # of a process's command line in the summary and the run log


@dataclass(frozen=True)
class Proc:
    """A process as one scan saw it: its name, parent, CPU ticks (user + system, every thread
    of it) and its start time (ticks after boot: a pid reused is another process)."""

    name: str
    ppid: int
    ticks: int
    start: int


def parse_stat(raw: bytes) -> Proc | None:
    """A ``/proc/<pid>/stat`` line (the name may hold spaces and brackets: it ends at the last
    ``)``); ``None`` where it does not parse."""
    try:
        close = raw.rindex(b")")
        name = raw[raw.index(b"(") + 1 : close].decode(errors="replace")
        fields = raw[close + 2 :].split()
        return Proc(name, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]))
    except (ValueError, IndexError):
        return None


def scan(proc: Path = Path("/proc")) -> dict[int, Proc]:
    """Every process of the machine but the kernel's threads, by pid."""
    out: dict[int, Proc] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(proc / name / "stat", "rb") as f:
                seen = parse_stat(f.read())
        except OSError:  # ended meanwhile
            continue
        if seen is not None and seen.ppid != KTHREADD and int(name) != KTHREADD:
            out[int(name)] = seen
    return out


def label(pid: int, fallback: str, proc: Path = Path("/proc")) -> str:
    """A process's name for people: its command line's program (without its directory) and
    first arguments (``python3 -m celery``, ``python3 loop.py``), at most ``LABEL_CHARS``;
    ``fallback`` (the kernel's 15-character name) where the command line cannot be read."""
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return fallback
    words = [a.decode(errors="replace") for a in argv if a][:4]
    if not words:
        return fallback
    words[0] = words[0].rsplit("/", 1)[-1]
    words[1:] = [w.rsplit("/", 1)[-1] if "/" in w and not w.startswith("-") else w
                 for w in words[1:]]  # fmt: skip
    text = " ".join(" ".join(words).split())  # one line
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def tree(procs: dict[int, Proc], root: int) -> set[int]:
    """``root`` and every process descended from it, as ``procs`` sees them."""
    children: dict[int, list[int]] = {}
    for pid, p in procs.items():
        children.setdefault(p.ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


@dataclass
class Interval:
    """Between two scans: the others' CPU ticks by name."""

    start: float
    end: float
    ticks: dict[str, int]


def interval(
    before: dict[int, Proc],
    after: dict[int, Proc],
    ours: set[int],
    start: float,
    end: float,
    name: Callable[[int, Proc], str] = lambda pid, p: p.name,
) -> Interval:
    """The ticks every process outside ``ours`` used between two scans (seen in both, the same
    process: the same start time), by ``name``."""
    ticks: dict[str, int] = {}
    for pid, p in after.items():
        q = before.get(pid)
        if pid in ours or q is None or q.start != p.start or p.ticks <= q.ticks:
            continue
        key = name(pid, p)
        ticks[key] = ticks.get(key, 0) + p.ticks - q.ticks
    return Interval(start, end, ticks)


@dataclass
class Others:
    """The other work over a window: cores in all and the busiest by name."""

    cores: float
    by_name: dict[str, float] = field(default_factory=dict)
    window_s: float = 0.0

    def top(self, n: int = 3) -> list[tuple[str, float]]:
        return sorted(self.by_name.items(), key=lambda kv: -kv[1])[:n]

    def record(self) -> dict[str, Any]:
        """The run summary's ``others``."""
        return {
            "cores": round(self.cores, 4),
            "top": [{"name": name, "cores": round(c, 4)} for name, c in self.top()],
            "window_s": round(self.window_s, 3),
            "flagged": self.cores >= FLAG_CORES,
        }

    def words(self) -> str:
        """'0.93 cores (python3 loop.py 0.91, celery 0.02)'."""
        return words(self.record())


def words(record: dict[str, Any], top: int = 3) -> str:
    """A summary's ``others`` in words: its cores and its ``top`` busiest (those of at least
    0.005 cores), '0.93 cores (python3 loop.py 0.91, celery 0.02)'."""
    busiest = [t for t in record["top"] if t["cores"] >= 0.005][:top]
    top_words = ", ".join(f"{t['name']} {t['cores']:.2f}" for t in busiest)
    return f"{record['cores']:.2f} cores" + (f" ({top_words})" if top_words else "")


def over(intervals: Iterable[Interval], start: float, end: float, hz: int) -> Others | None:
    """The others' cores over ``[start, end]``: each interval's ticks counted for the share
    of it inside the window; ``None`` where no interval overlaps it."""
    if end <= start:
        return None
    by_name: dict[str, float] = {}
    covered = 0.0
    for iv in intervals:
        length = iv.end - iv.start
        inside = min(iv.end, end) - max(iv.start, start)
        if length <= 0 or inside <= 0:
            continue
        share = inside / length
        covered += inside
        for name, ticks in iv.ticks.items():
            by_name[name] = by_name.get(name, 0.0) + share * ticks / hz
    if covered <= 0:
        return None
    # Over the part of the window the scans covered (its first and last fraction of an
    # interval may fall outside every interval).
    cores = {name: cpu_s / covered for name, cpu_s in by_name.items()}
    return Others(sum(cores.values()), cores, end - start)


class Watch:
    """The launcher's thread that scans ``/proc`` while a ``with`` block runs (the run);
    ``over(start, end)`` reads the other work in a window of ``time.perf_counter`` (the same
    clock as the ranks' on this machine)."""

    def __init__(self, root: int | None = None, interval_s: float = INTERVAL_S) -> None:
        self.root = os.getpid() if root is None else root
        self.interval_s = interval_s
        self.hz = os.sysconf("SC_CLK_TCK")
        self.intervals: list[Interval] = []
        self._labels: dict[tuple[int, int], str] = {}  # (pid, start) -> its label, read once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="others", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def over(self, start: float, end: float) -> Others | None:
        return over(list(self.intervals), start, end, self.hz)

    def _loop(self) -> None:
        before, t0 = scan(), time.perf_counter()
        while not self._stop.wait(self.interval_s):
            after, t1 = scan(), time.perf_counter()
            if not before or not after:  # /proc unreadable: no interval, so no measurement
                before, t0 = after, t1
                continue
            # The run's tree as this scan sees it (its processes come and go as it starts)
            ours = tree(after, self.root) | tree(before, self.root)
            self.intervals.append(interval(before, after, ours, t0, t1, self._label))
            before, t0 = after, t1

    def _label(self, pid: int, p: Proc) -> str:
        key = (pid, p.start)
        if key not in self._labels:
            self._labels[key] = label(pid, p.name)
        return self._labels[key]
