"""Communication threads ahead of compute on a CPU testbed.

On the GPU machines the papers measured, a worker's compute runs on its GPU: the threads that
drive communication (gloo's or NCCL's, Horovod's background thread, the lab's engine's
dispatcher, the PS transport's; a parameter server's, all of whose work is communication, on a
machine of its own) find an idle CPU and start a collective as soon as it is due.
On our CPU testbed the compute occupies the very cores those threads need: a thread woken
while every core computes waits for the scheduler, on our 2-core machines often until the next
timer tick (4 ms at ``CONFIG_HZ=250``). Such waits fell between most collectives of a training
iteration and made the real iteration times long and scattered (wfbp, vgg16-debug, loopback:
19-70 ms per iteration, 34-43 ms on average; 14 ms with the communication threads ahead).

``realtime`` runs every communication thread under ``SCHED_FIFO`` (priority ``RT_PRIORITY``):
such a thread preempts a computing one as soon as it wakes, as on an idle CPU of a GPU machine.
The compute (the training loop's thread, and torch's intra-op threads it starts) stays at normal
priority. The communication threads block while they wait (gloo's sockets, condition
variables), so they take the CPU only while they have work; the kernel's real-time throttling
(``/proc/sys/kernel/sched_rt_runtime_us``) bounds them anyway. Needs ``CAP_SYS_NICE`` (root);
``normal`` leaves every thread as the OS starts it; ``auto`` is ``realtime`` where permitted,
else ``normal``, and the run's summary says which it got and why.

Threads inherit their creator's scheduling policy (``pthread_create``'s default, which Python's
and C++'s threads use): ``communication_threads`` raises the calling thread for the block that
starts them (``init_process_group``, ``hvd.init``, the engine's or transport's threads), then
puts it back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from ..spec import COMM_PRIORITIES as PRIORITIES

RT_PRIORITY = 10  # SCHED_FIFO priority of the communication threads (1..99)


def why_not_realtime() -> str | None:
    """None when this process may start threads under ``SCHED_FIFO``; else the reason."""
    if not hasattr(os, "sched_setscheduler"):
        return "this OS has no sched_setscheduler"
    outcome: list[str | None] = []

    def attempt() -> None:  # on a thread of its own: the caller's policy is left alone
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
        except OSError as err:
            outcome.append(
                f"SCHED_FIFO refused: {err.strerror or err} (needs root or CAP_SYS_NICE)"
            )
        else:
            outcome.append(None)

    thread = threading.Thread(target=attempt, name="priority-check")
    thread.start()
    thread.join()
    return outcome[0]


def resolve(requested: str) -> tuple[str, str]:
    """``(priority, note)`` for a run that asked for ``requested``: ``realtime`` or
    ``normal``, and why where it is not what was asked. Raises ``PermissionError`` when
    ``realtime`` was asked and is not permitted here."""
    if requested not in PRIORITIES:
        raise ValueError(
            f"comm priority must be one of {', '.join(PRIORITIES)} (got {requested!r})"
        )
    if requested == "normal":
        return "normal", ""
    why = why_not_realtime()
    if why is None:
        return "realtime", ""
    if requested == "realtime":
        raise PermissionError(why)
    return "normal", f"communication threads at normal priority ({why})"


@contextmanager
def communication_threads(priority: str) -> Iterator[None]:
    """Threads started inside this block run at ``priority`` (``realtime``: ``SCHED_FIFO``);
    the calling thread gets its own policy back afterwards. ``normal``: nothing changes."""
    if priority not in ("realtime", "normal"):
        raise ValueError(f"a resolved priority is realtime or normal (got {priority!r})")
    if priority == "normal":
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)


def of_job(train: dict) -> AbstractContextManager[None]:
    """``communication_threads`` at the priority a launcher resolved into a job's ``train``
    section (jobs written before the field: normal)."""
    return communication_threads(train.get("comm_priority", "normal"))


def current() -> str:
    """The calling thread's priority in this module's terms (``realtime`` under a real-time
    policy, else ``normal``)."""
    if not hasattr(os, "sched_getscheduler"):
        return "normal"
    rt = {getattr(os, "SCHED_FIFO", -1), getattr(os, "SCHED_RR", -1)}
    return "realtime" if os.sched_getscheduler(0) in rt else "normal"


def census() -> dict[str, int]:
    """This process's threads per priority (``realtime``/``normal``), from ``/proc``: what
    the threads had, for the run's record (empty where ``/proc`` has no task list)."""
    if not hasattr(os, "sched_getscheduler"):
        return {}
    rt = {getattr(os, "SCHED_FIFO", -1), getattr(os, "SCHED_RR", -1)}
    counts = {"realtime": 0, "normal": 0}
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return {}
    for tid in tids:
        try:
            policy = os.sched_getscheduler(tid)
        except OSError:  # the thread ended meanwhile
            continue
        counts["realtime" if policy in rt else "normal"] += 1
    return counts
