"""Parameter-server arena: the interface every scheduler of this arena implements, and the
policies (ps-default, byteps, p3, tictac-tic/tac, eager-ps, psld).

A policy receives a frozen ``PSProblem`` (layers in forward order with their bytes, the DAG,
profiled times, the cluster's PS count) and returns a ``PSPlan``: how tensors are cut into
keys, which server holds each key, the order of pushes and pulls on the workers and on the
servers, the barrier, the server's consistency mode, and optionally a controller that may
re-assign keys between iterations (PSLD). ``runners.sim.ps`` executes the plan.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .allreduce import Layer, partitions
from .placement import best_fit_move, byteps_default, mxnet_default, scale_out
from .tictac import tac_priorities, tic_priorities

ORDERS = ("priority", "fifo", "random")
SERVER_MODES = ("sync", "sync-round", "async")


@dataclass(frozen=True)
class PSProblem:
    layers: tuple[Layer, ...]
    deps: tuple[tuple[int, ...], ...]
    fwd_s: tuple[float, ...]
    workers: int
    ps: int  # PS processes at the start
    servers: int  # machines that may host a PS (elastic policies scale up to this)
    worker_bytes_per_s: float
    server_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class PSTask:
    """One key: the whole or a part of one layer's tensor, held by ``server``."""

    layer: int
    size_bytes: int
    server: int
    priority: int  # lower = earlier, where the plan's order is "priority"


@dataclass(frozen=True)
class PSPlan:
    tasks: tuple[PSTask, ...]
    push_order: str  # "priority" | "fifo" | "random" (per worker group and iteration)
    pull_order: str
    server_order: str  # "priority" | "fifo"
    cross_barrier: bool  # forward of layer i waits only for layer i's keys
    server_mode: str = "sync"
    order_groups: int = 1  # "random": workers split into this many independent draws
    controller: Any = field(default=None, compare=False)  # see PSLDController
    lr_rule: str = "none"
    info: tuple[tuple[str, float], ...] = ()


def _sizes(problem: PSProblem) -> list[int]:
    return [layer.grad_bytes for layer in problem.layers]


def _tasks_from_parts(parts: Sequence[Sequence[tuple[int, int]]], priority: Sequence[int]):
    return tuple(
        PSTask(layer=i, size_bytes=size, server=server, priority=priority[i])
        for i, key_parts in enumerate(parts)
        for server, size in key_parts
    )


def ps_default(bigarray_bound_elems: int, order_groups: int) -> _Fixed:
    """MXNet KVStore default (kvstore_dist.h): small arrays hashed whole to a server, arrays of
    ``bigarray_bound_elems`` or more sharded over all servers; transfers leave each worker in a
    random order (TicTac's observation), drawn per group of workers and iteration; the
    framework executes the forward in data-flow order (per-key dependencies, no barrier)."""

    def build(problem: PSProblem) -> PSPlan:
        parts = mxnet_default(_sizes(problem), problem.ps, bigarray_bound_elems)
        return PSPlan(
            tasks=_tasks_from_parts(parts, range(len(parts))),
            push_order="random",
            pull_order="random",
            server_order="fifo",
            cross_barrier=True,
            order_groups=order_groups,
        )

    return _Fixed(build)


def byteps(partition_bytes: int, cross_barrier: bool) -> _Fixed:
    """BytePS: tensors cut into ``partition_bytes`` pieces, each piece hashed to a server;
    ready order, no server-side scheduling (BYTEPS_SERVER_ENABLE_SCHEDULE=0)."""

    def build(problem: PSProblem) -> PSPlan:
        parts = byteps_default(_sizes(problem), problem.ps, partition_bytes)
        return PSPlan(
            tasks=_tasks_from_parts(parts, range(len(parts))),
            push_order="fifo",
            pull_order="fifo",
            server_order="fifo",
            cross_barrier=cross_barrier,
        )

    return _Fixed(build)


def p3(slice_params: int) -> _Fixed:
    """P3: every layer sliced into ``slice_params``-parameter slices; slices go round-robin over
    the servers; push, server processing and pull in priority order (the layer the next
    forward needs first); the server sends the update as soon as it is aggregated."""

    def build(problem: PSProblem) -> PSPlan:
        slice_bytes = slice_params * 4
        tasks = []
        counter = 0
        for layer in problem.layers:
            for size in partitions(layer.grad_bytes, slice_bytes):
                tasks.append(PSTask(layer.index, size, counter % problem.ps, layer.index))
                counter += 1
        return PSPlan(
            tasks=tuple(tasks),
            push_order="priority",
            pull_order="priority",
            server_order="priority",
            cross_barrier=True,
        )

    return _Fixed(build)


def _tictac(problem: PSProblem, priorities: Sequence[int]) -> PSPlan:
    parts = mxnet_default(_sizes(problem), problem.ps)
    return PSPlan(
        tasks=_tasks_from_parts(parts, priorities),
        push_order="fifo",
        pull_order="priority",
        server_order="priority",
        cross_barrier=True,
    )


def tictac_tic() -> _Fixed:
    """TicTac TIC: the pull (PS -> worker) order from the DAG alone, the same on every worker
    and enforced at the servers; the MXNet/TF-style default placement otherwise."""
    return _Fixed(lambda problem: _tictac(problem, tic_priorities(problem.deps)))


def tictac_tac() -> _Fixed:
    """TicTac TAC: like TIC with the timing-aware order; costs come from the profile (forward
    compute per layer; transfer = latency + bytes / worker bandwidth), standing in for TAC's
    one profiled iteration."""

    def build(problem: PSProblem) -> PSPlan:
        transfer = [
            problem.latency_s + layer.grad_bytes / problem.worker_bytes_per_s
            for layer in problem.layers
        ]
        return _tictac(problem, tac_priorities(problem.deps, problem.fwd_s, transfer))

    return _Fixed(build)


def eager_ps(server_mode: str, lr_rule: str, partition_bytes: int) -> _Fixed:
    """Eager PS (reconstruction of Jin's thesis, research/comm.md §4.2): BytePS-style keys;
    a worker's pull is served as soon as its own push has arrived, with the newest parameters
    the server holds (``async``: every push applied at once; ``sync-round``: the newest
    complete round), so a straggler does not hold the others back. Staleness and the
    staleness-aware learning-rate scale are reported; convergence is measured in real mode."""

    def build(problem: PSProblem) -> PSPlan:
        parts = byteps_default(_sizes(problem), problem.ps, partition_bytes)
        return PSPlan(
            tasks=_tasks_from_parts(parts, range(len(parts))),
            push_order="fifo",
            pull_order="priority",
            server_order="fifo",
            cross_barrier=True,
            server_mode=server_mode,
            lr_rule=lr_rule,
        )

    return _Fixed(build)


def psld(
    window: int,
    epsilon: float,
    scale_out_ratio: float,
    scale_in_utilisation: float,
    max_servers: int,
) -> _Fixed:
    """PSLD (reconstruction of research/comm.md §5.3 on the mechanism of §5.2): starts from the
    MXNet default assignment (keys = its parts) and lets ``PSLDController`` move keys between
    servers and scale the PS set in and out while the job runs."""

    def build(problem: PSProblem) -> PSPlan:
        parts = mxnet_default(_sizes(problem), problem.ps)
        tasks = _tasks_from_parts(parts, range(len(parts)))
        limit = problem.servers if max_servers <= 0 else min(max_servers, problem.servers)
        controller = PSLDController(
            sizes=[t.size_bytes for t in tasks],
            assignment=[t.server for t in tasks],
            active=list(range(problem.ps)),
            max_servers=max(limit, problem.ps),
            window=window,
            epsilon=epsilon,
            scale_out_ratio=scale_out_ratio,
            scale_in_utilisation=scale_in_utilisation,
            server_bytes_per_s=problem.server_bytes_per_s,
        )
        return PSPlan(
            tasks=tasks,
            push_order="fifo",
            pull_order="fifo",
            server_order="fifo",
            cross_barrier=True,
            controller=controller,
        )

    return _Fixed(build)


@dataclass(frozen=True)
class _Fixed:
    """A policy whose plan is a pure function of the problem."""

    build: Any

    def plan(self, problem: PSProblem) -> PSPlan:
        return self.build(problem)


class PSLDController:
    """Exploitation-exploration load distribution (reconstruction; the paper's policy details
    are not available). Every ``window`` measured rounds (after one settling round following a
    change) it compares the mean iteration time with the one before its last change and
    reverts the change if the job got slower. Then it picks the next change:

    * with probability ``epsilon``: explore -- move a random key to a random active server;
    * else exploit -- ``placement.best_fit_move`` from the busiest server (measured busy time,
      so bandwidth contention and CPU interference count) to the least busy;
    * if no move helps and the busiest server is ``scale_out_ratio`` x the mean: scale out
      (``placement.scale_out``) up to ``max_servers``;
    * if every server is busy less than ``scale_in_utilisation`` of the iteration: scale in,
      moving the least busy server's keys, largest first, to the least loaded others.

    A change that was reverted is never proposed again (without this memory the deterministic
    best-fit step would retry the same move after every revert, migrating forever).

    Moved bytes are migrated by the simulator (server NIC time). Decisions are seeded.
    """

    def __init__(
        self,
        *,
        sizes: list[int],
        assignment: list[int],
        active: list[int],
        max_servers: int,
        window: int,
        epsilon: float,
        scale_out_ratio: float,
        scale_in_utilisation: float,
        server_bytes_per_s: float,
        seed: int = 0,
    ) -> None:
        self.sizes = sizes
        self.assignment = list(assignment)
        self.active = sorted(active)
        self.max_servers = max_servers
        self.window = window
        self.epsilon = epsilon
        self.scale_out_ratio = scale_out_ratio
        self.scale_in_utilisation = scale_in_utilisation
        self.server_bytes_per_s = server_bytes_per_s
        self.rng = random.Random(seed)
        self.samples: list[tuple[float, list[float]]] = []
        self.settle = 0
        self.baseline: float | None = None
        self.previous: tuple[list[int], list[int]] | None = None  # to revert the last change
        self.changes = 0
        self.reverts = 0
        self.history: list[tuple[int, str, float]] = []  # (round, action, mean iteration time)
        self.rejected: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()  # never retried

    def reseed(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def observe(self, round_: int, iteration_s: float, busy_s: Sequence[float]) -> list[int] | None:
        """Feed one finished round; return the new key -> server list when it changes."""
        if self.settle > 0:
            self.settle -= 1
            return None
        self.samples.append((iteration_s, list(busy_s)))
        if len(self.samples) < self.window:
            return None
        mean_t = sum(s[0] for s in self.samples) / len(self.samples)
        busy = [sum(s[1][j] for s in self.samples) / len(self.samples) for j in range(len(busy_s))]
        self.samples = []
        if self.previous is not None and self.baseline is not None:
            if mean_t > self.baseline * (1 + 1e-6):
                self.rejected.add((tuple(self.assignment), tuple(self.active)))
                self.assignment, self.active = self.previous
                self.previous = None
                self.reverts += 1
                self.history.append((round_, "revert", mean_t))
                self.settle = 1
                return list(self.assignment)
            self.previous = None
        self.baseline = mean_t
        action = self._next_change(mean_t, busy)
        if action is None:
            return None
        self.history.append((round_, action, mean_t))
        self.changes += 1
        self.settle = 1
        return list(self.assignment)

    def _next_change(self, mean_t: float, busy: Sequence[float]) -> str | None:
        active = self.active
        before = (list(self.assignment), list(active))
        logical = {server: k for k, server in enumerate(active)}
        whole = [logical[s] for s in self.assignment]
        load = [busy[s] for s in active]
        rates = [self.server_bytes_per_s] * len(active)
        if len(active) > 1 and self.rng.random() < self.epsilon:
            key = self.rng.randrange(len(self.sizes))
            dest = self.rng.choice([s for s in active if s != self.assignment[key]])
            self.assignment[key] = dest
            self.previous = before
            return "explore"
        move = best_fit_move(whole, self.sizes, load, rates) if len(active) > 1 else None
        if move is not None:
            key, _, to = move
            candidate = list(self.assignment)
            candidate[key] = active[to]
            if (tuple(candidate), tuple(active)) not in self.rejected:
                self.assignment = candidate
                self.previous = before
                return "move"
            # The measured best fit was tried and made the job slower: not again.
        mean_load = sum(load) / len(load)
        if (
            len(active) < self.max_servers
            and mean_load > 0
            and max(load) > self.scale_out_ratio * mean_load
            or (len(active) == 1 and len(active) < self.max_servers and max(load) > 0.5 * mean_t)
        ):
            new_whole = scale_out(whole, self.sizes, len(active))
            new_server = min(set(range(self.max_servers)) - set(active))
            mapping = [*active, new_server]
            candidate = [mapping[k] for k in new_whole]
            if (tuple(candidate), tuple(sorted(mapping))) not in self.rejected:
                self.assignment = candidate
                self.active = sorted(mapping)
                self.previous = before
                return "scale-out"
        if len(active) > 1 and max(load) < self.scale_in_utilisation * mean_t:
            victim = active[min(range(len(active)), key=lambda k: (load[k], k))]
            rest = [s for s in active if s != victim]
            bytes_on = {s: 0 for s in rest}
            for key, s in enumerate(self.assignment):
                if s in bytes_on:
                    bytes_on[s] += self.sizes[key]
            keys = [k for k, s in enumerate(self.assignment) if s == victim]
            candidate = list(self.assignment)
            for key in sorted(keys, key=lambda k: (-self.sizes[k], k)):
                dest = min(rest, key=lambda s: (bytes_on[s], s))
                candidate[key] = dest
                bytes_on[dest] += self.sizes[key]
            if (tuple(candidate), tuple(rest)) not in self.rejected:
                self.assignment = candidate
                self.active = rest
                self.previous = before
                return "scale-in"
        return None


def lr_scale(rule: str, staleness: float, max_staleness: float) -> float:
    """The learning-rate multiplier of a gradient ``staleness`` updates old (reconstructed
    rules: inverse = 1/max(1, tau) after Zhang et al. IJCAI'16; linear = 1 - tau/(tau_max+1))."""
    if rule == "inverse":
        return 1.0 / max(1.0, staleness)
    if rule == "linear":
        return 1.0 - staleness / (max_staleness + 1.0)
    return 1.0


__all__ = [
    "ORDERS",
    "SERVER_MODES",
    "PSLDController",
    "PSPlan",
    "PSProblem",
    "PSTask",
    "byteps",
    "eager_ps",
    "lr_scale",
    "p3",
    "ps_default",
    "psld",
    "tictac_tac",
    "tictac_tic",
]
