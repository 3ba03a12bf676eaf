"""A small deterministic discrete-event core (SimPy-sized, no processes).

Time is in seconds. Events at the same time run in the order they were scheduled (a sequence
number breaks ties), so a simulation is a pure function of its inputs. The core knows nothing
about scheduling, networks or jobs; models build on ``EventLoop.at`` / ``EventLoop.after``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

Callback = Callable[..., None]


class EventLoop:
    __slots__ = ("_queue", "_seq", "events_processed", "now")

    def __init__(self) -> None:
        self.now: float = 0.0
        self.events_processed: int = 0
        self._queue: list[tuple[float, int, Callback, tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def at(self, time: float, callback: Callback, *args: Any) -> None:
        """Run ``callback(*args)`` at absolute ``time`` (never in the past)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time} before now={self.now}")
        heapq.heappush(self._queue, (time, next(self._seq), callback, args))

    def after(self, delay: float, callback: Callback, *args: Any) -> None:
        self.at(self.now + delay, callback, *args)

    def pusher(self) -> Callable[[float, Callback, tuple[Any, ...]], None]:
        """A fast ``at`` for hot paths of models: ``push(time, callback, args_tuple)``, with no
        check that ``time`` is not in the past (the caller guarantees it)."""
        queue, seq, heappush = self._queue, self._seq, heapq.heappush

        def push(time: float, callback: Callback, args: tuple[Any, ...]) -> None:
            heappush(queue, (time, next(seq), callback, args))

        return push

    def raw(self) -> tuple[list[tuple[float, int, Callback, tuple[Any, ...]]], Any]:
        """The heap and the sequence counter, for the hottest paths of models: an event is
        ``heapq.heappush(heap, (time, next(seq), callback, args))``, with the same ordering as
        ``at`` and no check that ``time`` is not in the past (the caller guarantees it)."""
        return self._queue, self._seq

    def run(self, until: float | None = None) -> None:
        """Process events in time order until none are left (or ``until`` is reached)."""
        queue = self._queue
        heappop = heapq.heappop
        done = 0
        try:
            if until is None:
                while queue:
                    time, _, callback, args = heappop(queue)
                    self.now = time
                    done += 1
                    callback(*args)
                return
            while queue:
                time, _, callback, args = queue[0]
                if time > until:
                    self.now = until
                    return
                heappop(queue)
                self.now = time
                done += 1
                callback(*args)
        finally:
            self.events_processed += done

    @property
    def pending(self) -> int:
        return len(self._queue)
