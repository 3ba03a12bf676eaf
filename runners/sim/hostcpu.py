"""Processor sharing of one host's cores between compute streams and message CPU tasks.

The PS arena's ``cluster.host_cpu_model`` ``fair`` and ``messages-first`` (see
``runners.spec.CommCluster``): every process of a job on one host of ``cores`` cores. Each
computing worker wants one core (a group of ``m`` workers, ``m``); each message is a task of
a given CPU work that wants one core until the work is done. While the wants exceed the
cores, ``fair`` gives every want the same share, and ``messages-first`` gives the messages
their cores first (at most one each) and the computing workers share the rest, possibly
nothing. The compute ops run on ``ComputeJob``'s ``overlap_integrated`` machinery (an op's
work progresses at a rate, re-timed when the rate changes); the messages in virtual time:
they all progress at one rate, so a task that starts at virtual time ``v`` with work ``w``
ends when the virtual time reaches ``v + w``.

A reconstruction, labelled as such: a message's CPU does not delay its transfer, and a
message's work is one thread's (the worker's, the server's, gloo's and the kernel's CPU
for it, summed into one task).
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import ComputeJob

_EPS = 1e-12  # virtual seconds: a task this close to its end has ended


class SharedCores:
    """The host's cores, shared as the job's compute and messages run. ``changed()`` when a
    compute op starts or ends (the job's ``compute_watch``), ``add(work)`` when a message
    starts; ``compute_rate`` is the speed of every running compute op, as a share of its own.
    """

    def __init__(self, job: ComputeJob, cores: int, messages_first: bool) -> None:
        if cores < 1:
            raise ValueError(f"SharedCores needs at least one core (got {cores})")
        self.job = job
        self.loop = job.loop
        self.cores = float(cores)
        self.messages_first = messages_first
        self.counts = [grp.count for grp in job.setup.groups]
        self.tasks: list[float] = []  # a heap: each running message's end, in virtual time
        self.v = 0.0  # the messages' virtual time (the work each running one has done) ...
        self.v_at = 0.0  # ... as of then
        self.msg_rate = 1.0
        self.compute_rate = 1.0
        self.token = 0  # the pending message end event's (older ones are stale) ...
        self.due: float | None = None  # ... and when it is due (None: none pending)

    def rates(self) -> tuple[float, float]:
        """(a message's speed, a computing worker's), in cores, for the wants now."""
        busy = self.job.busy
        computing = sum(n for n, b in zip(self.counts, busy, strict=True) if b)
        messages = len(self.tasks)
        cores = self.cores
        if self.messages_first:
            msg = min(1.0, cores / messages) if messages else 1.0
            left = max(0.0, cores - messages * msg)
            return msg, (min(1.0, left / computing) if computing else 1.0)
        wants = computing + messages
        share = min(1.0, cores / wants) if wants else 1.0
        return share, share

    def add(self, work: float, count: int = 1) -> None:
        """``count`` messages start now, each with ``work`` seconds of CPU (a group's
        workers')."""
        self._advance()
        if work > 0.0:
            for _ in range(count):
                heappush(self.tasks, self.v + work)
        self.changed(advanced=True)

    def rate(self, g: int) -> float:
        """Group ``g``'s compute speed now, as a share of its own (``ComputeJob._rate``):
        every computing worker's is the same."""
        return self.compute_rate

    def changed(self, advanced: bool = False) -> None:
        """The wants changed now: new speeds, the running compute ops and the next message
        end re-timed."""
        if not advanced:
            self._advance()
        msg, compute = self.rates()
        self.msg_rate = msg
        if compute != self.compute_rate:
            self.compute_rate = compute
            self.job._retime()  # the running ops on at the new speed (``rate``)
        due = self.loop.now + max(0.0, self.tasks[0] - self.v) / msg if self.tasks else None
        if due != self.due:  # a compute op's start or end alone leaves the pending end as it is
            self.token += 1
            self.due = due
            if due is not None:
                self.loop.at(due, self._message_end, self.token)

    def _advance(self) -> None:
        now = self.loop.now
        self.v += (now - self.v_at) * self.msg_rate
        self.v_at = now

    def _message_end(self, token: int) -> None:
        if token != self.token:
            return
        self.due = None
        self._advance()
        tasks = self.tasks
        while tasks and tasks[0] <= self.v + _EPS:
            heappop(tasks)
        self.changed(advanced=True)
