"""A real run measures alone on its host: no figure is drawn on that machine while it runs.

A real run trains on the host's cores and times every iteration; the lab already runs it alone
(``actions.launch_run``: no other run beside it). Drawing an experiment's figures takes a core
for seconds too (seaborn, the PDFs, each real run's twin): 5-11 s a render on the 2-core
machine of 2026-12-06, where a render of one run's figures during the next run made Horovod's
measured iteration 33.0 ms against 19.0-19.7 ms for the same spec with nothing beside it. So:

- each render of a changed experiment is *pending* from the moment it is asked for until it has
  drawn (a marker file per experiment under ``LAB_VAR_DIR/renders-pending``);
- a real run is not launched while a render is pending on this host (younger than
  ``WAIT_S``: a lost render task does not hold the queue for ever) or drawing (a shared
  ``flock`` on ``LAB_VAR_DIR/measuring.lock`` held while drawing, tried exclusively by the
  launch);
- a render asked for while a real run is running on this host waits: its marker stays and
  ``actions.reconcile`` asks for it again (``retry``) once no real run runs here;
- a claim's figure (a small bar chart, drawn when its check is judged) holds the lock while
  drawn, so a launch waits for it; it is not deferred.

Renders and launches on one host meet on that host's files; a render of another host's
experiment that runs here waits for this host's real run the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

WAIT_S = 120.0  # how long a pending render holds up the launch of a real run; then asked again


def _pending_dir() -> Path:
    path = Path(settings.VAR_DIR) / "renders-pending"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _lock_path() -> Path:
    Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)
    return Path(settings.VAR_DIR) / "measuring.lock"


def _marker(experiment_id: int) -> Path:
    return _pending_dir() / str(experiment_id)


def mark_pending(experiment_id: int) -> None:
    """A render of the experiment is asked for now."""
    _marker(experiment_id).touch()


def asked_at(experiment_id: int) -> float | None:
    """When the experiment's pending render was asked for (None: none pending)."""
    try:
        return _marker(experiment_id).stat().st_mtime
    except FileNotFoundError:
        return None


def done(experiment_id: int, asked: float | None) -> None:
    """The render asked for at ``asked`` has run (drawn, or failed: either way it is no longer
    pending). A render asked for again since (its marker newer) stays pending."""
    if asked is not None and asked_at(experiment_id) == asked:
        _marker(experiment_id).unlink(missing_ok=True)


def defer(experiment_id: int) -> None:
    """The render waits for a real run: pending, but not blocking a launch until asked again
    (its marker dated at the epoch, so ``retry`` picks it up first)."""
    marker = _marker(experiment_id)
    marker.touch()
    os.utime(marker, (0, 0))


def pending() -> dict[int, float]:
    """Experiment id -> seconds since its render was asked for, of every pending render."""
    now = time.time()
    out = {}
    for marker in _pending_dir().iterdir():
        if marker.name.isdigit():
            with contextlib.suppress(FileNotFoundError):  # drawn meanwhile
                out[int(marker.name)] = now - marker.stat().st_mtime
    return out


def blocking() -> list[int]:
    """The experiments whose pending render holds up a real run's launch now."""
    return sorted(e for e, age in pending().items() if age < WAIT_S)


def retry() -> list[int]:
    """The pending renders to ask for again (deferred, or asked for over ``WAIT_S`` ago and
    never drawn); asked for when no real run runs here."""
    return sorted(e for e, age in pending().items() if age >= WAIT_S)


@contextlib.contextmanager
def drawing() -> Iterator[None]:
    """Held while a render draws (shared: renders run side by side); also a decorator."""
    with _lock_path().open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def launching() -> Iterator[bool]:
    """Around a real run's launch (its move to running, committed): True when no render is
    drawing here and none waits; renders that start meanwhile wait for the launch to commit,
    then see the run and defer."""
    with _lock_path().open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield not blocking()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
