"""All-reduce arena: the one interface every communication scheduler of this arena implements.

A policy is pure: it receives a frozen ``CommProblem`` (the job's gradient tensors in forward
order) and returns a ``CommPlan`` (which communication tasks exist, their priority, how many
bytes may be in flight, and whether the next forward waits per layer or at a global barrier).
The simulator (``runners.sim.iteration``) and, later, the real data-parallel engine both execute
the same plan; only the executor at the edge differs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Layer:
    index: int  # position in the forward pass (0 = input side)
    name: str
    grad_bytes: int


@dataclass(frozen=True)
class CommProblem:
    layers: tuple[Layer, ...]  # forward order; gradients become ready in reverse order
    workers: int


@dataclass(frozen=True)
class CommTask:
    """One collective on the wire: a whole tensor, a partition of one, or a fused bucket.

    The task becomes ready when every member layer's gradient is ready. A layer is synchronised
    when every task that carries part of it has completed.
    """

    layers: tuple[int, ...]
    size_bytes: int
    priority: int  # lower = sent earlier; ties are broken by ready order


@dataclass(frozen=True)
class CommPlan:
    tasks: tuple[CommTask, ...]
    credit_bytes: float  # bytes handed to the network and not yet completed; inf = no limit
    cross_barrier: bool  # True: forward of layer i waits only for layer i's parameters


class AllReducePolicy(Protocol):
    def plan(self, problem: CommProblem) -> CommPlan: ...


@dataclass(frozen=True)
class WFBP:
    """Wait-free backpropagation (Poseidon, ATC'17): every layer's gradient is all-reduced as
    soon as its backward finishes, first-ready first-sent, and the next iteration starts only
    when all gradients are synchronised (global barrier), as in stock frameworks."""

    def plan(self, problem: CommProblem) -> CommPlan:
        last = len(problem.layers) - 1
        tasks = tuple(
            CommTask(
                layers=(layer.index,), size_bytes=layer.grad_bytes, priority=last - layer.index
            )
            for layer in problem.layers
        )
        return CommPlan(tasks=tasks, credit_bytes=math.inf, cross_barrier=False)


@dataclass(frozen=True)
class ByteScheduler:
    """ByteScheduler (SOSP'19, bytescheduler/docs/scheduling.md): tensors larger than the
    partition size are split; ready partitions wait in a priority queue keyed by layer index
    (the layer the next forward needs first); while credit remains, the highest-priority
    partition is handed to the network and its size is taken from the credit (the check is
    ``credit > 0``, so one partition may overshoot, as in the original). Cross-barrier: the
    forward of layer i starts once layer i is synchronised.

    Not modelled here yet: the Bayesian-optimisation auto-tuner of credit and partition size.
    """

    partition_bytes: int
    credit_bytes: int

    def plan(self, problem: CommProblem) -> CommPlan:
        tasks = []
        for layer in problem.layers:
            for size in _partitions(layer.grad_bytes, self.partition_bytes):
                tasks.append(CommTask(layers=(layer.index,), size_bytes=size, priority=layer.index))
        return CommPlan(tasks=tuple(tasks), credit_bytes=self.credit_bytes, cross_barrier=True)


def _partitions(total_bytes: int, partition_bytes: int) -> list[int]:
    full, rest = divmod(total_bytes, partition_bytes)
    return [partition_bytes] * full + ([rest] if rest or not full else [])


def wfbp() -> WFBP:
    return WFBP()


def bytescheduler(partition_bytes: int, credit_bytes: int) -> ByteScheduler:
    return ByteScheduler(partition_bytes=partition_bytes, credit_bytes=credit_bytes)
