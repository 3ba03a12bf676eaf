"""All-reduce arena: the one interface every communication scheduler of this arena implements.

A policy receives a frozen ``CommProblem`` (the job's gradient tensors in forward order, and an
optional *oracle* that returns the simulated iteration time of a candidate plan under the job's
conditions) and returns a ``CommPlan``: which collectives exist, their priority, how many bytes
may be in flight, fusion, the barrier and the delay. The simulator (``runners.sim.iteration``)
and, later, the real data-parallel engine execute the same plan; only the executor differs.

Policies that search (PACE's fusion DP, ByteScheduler's auto-tuner) call the oracle; the search
happens before the measured run and its cost is not charged to the job's iteration time (the
real systems tune online; documented in the README).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

MIB = 1024 * 1024


@dataclass(frozen=True)
class Layer:
    index: int  # position in the forward pass (0 = input side)
    name: str
    grad_bytes: int


@dataclass(frozen=True)
class CommProblem:
    """What a policy may know about the job. ``oracle(plan)`` = simulated iteration time of a
    plan; ``fwd_s``/``bwd_s``/``deps`` (per layer) and ``collective_s(bytes)`` let a policy run
    its own scheduler as a model (PACE)."""

    layers: tuple[Layer, ...]  # forward order; gradients become ready in reverse order
    workers: int
    oracle: Callable[[CommPlan], float] | None = field(default=None, compare=False)
    fwd_s: tuple[float, ...] = ()
    bwd_s: tuple[float, ...] = ()
    deps: tuple[tuple[int, ...], ...] = ()
    collective_s: Callable[[int], float] | None = field(default=None, compare=False)
    # The model's buffers' bytes per dtype (``WorkloadProfile.buffers``): DDP broadcasts each.
    buffer_bytes: tuple[int, ...] = ()


@dataclass(frozen=True)
class CommTask:
    """One collective on the wire: a whole tensor, a partition of one, or a fused bucket.

    A task becomes ready when every member layer's gradient is ready or, if ``after`` >= 0,
    when task ``after`` completes. A layer is synchronised when every task that carries part of
    it has completed.
    """

    layers: tuple[int, ...]
    size_bytes: int
    priority: int  # lower = sent earlier; ties are broken by ready order
    op: str = "allreduce"  # or "reduce_scatter" / "all_gather"
    after: int = -1


@dataclass(frozen=True)
class CommPlan:
    tasks: tuple[CommTask, ...]
    credit_bytes: float  # bytes handed to the network and not yet completed; inf = no limit
    cross_barrier: bool  # True: forward of layer i waits only for layer i's parameters
    delay: int = 0  # forward of iteration t+1 waits for synchronisation of iteration t-delay
    fusion_threshold_bytes: float = 0.0  # with fusion_cycle_s > 0: Horovod-style fusion
    fusion_cycle_s: float = 0.0
    # Horovod with CPU collectives (gloo, MPI): the background loop runs a cycle's fused
    # all-reduces itself, so the next cycle starts only once they are done (GPU ops go to a
    # finalizer thread and cycles go on: False).
    fusion_cycle_blocks: bool = False
    info: tuple[tuple[str, float], ...] = ()  # numbers the policy chose (reported as metrics)
    # Blocking collectives before every iteration's forward, in order, as (op, bytes): no
    # layer's forward starts until they are done on every rank (DDP's buffer broadcast).
    forward_sync: tuple[tuple[str, int], ...] = ()


def is_fifo(plan: CommPlan) -> bool:
    """Whether the plan sends first-ready first (no reordering): priorities never decrease in
    the expected release order (groups released from the output side), no dependent tasks.
    Such plans need no negotiation: the lab's real engine (``runners.real.engine``)
    negotiates every dispatch decision of the others, and so does the simulator with
    ``cluster.negotiation``."""
    if any(t.after >= 0 for t in plan.tasks):
        return False
    order = sorted(range(len(plan.tasks)), key=lambda i: (-min(plan.tasks[i].layers), i))
    prios = [plan.tasks[i].priority for i in order]
    return all(a <= b for a, b in zip(prios, prios[1:], strict=False))


def inline_eligible(plan: CommPlan) -> bool:
    """Whether the lab's real engine may issue ``plan``'s collectives from the gradient hooks
    (``real.dispatch: auto``): sent in release order (``is_fifo``: no reordering, no dependent
    tasks) with no credit limit, so its dispatcher would issue every released task at once, in
    the order it was released."""
    return is_fifo(plan) and math.isinf(plan.credit_bytes)


class AllReducePolicy(Protocol):
    def plan(self, problem: CommProblem) -> CommPlan: ...


def partitions(total_bytes: int, partition_bytes: int) -> list[int]:
    """Sizes of the pieces a tensor is cut into (the last may be smaller; an empty tensor is
    one empty piece)."""
    full, rest = divmod(total_bytes, partition_bytes)
    return [partition_bytes] * full + ([rest] if rest or not full else [])


def _backward_order(problem: CommProblem) -> list[int]:
    return [layer.index for layer in reversed(problem.layers)]


def threshold_groups(problem: CommProblem, cap_bytes: float, first_cap: float | None = None):
    """Consecutive layers in gradient-ready (backward) order, closed once a group reaches the
    cap (the last member may cross it; torch's bucket assignment rule)."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index in _backward_order(problem):
        current.append(index)
        size += problem.layers[index].grad_bytes
        cap = first_cap if (first_cap is not None and not groups) else cap_bytes
        if size >= cap:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    return groups


def fusion_groups(problem: CommProblem, fusion_bytes: int) -> list[list[int]]:
    """Layers fused in backward order up to ``fusion_bytes``; 0 = one group per layer."""
    if fusion_bytes > 0:
        return threshold_groups(problem, fusion_bytes)
    return [[i] for i in _backward_order(problem)]


def _group_tasks(
    problem: CommProblem, groups: Sequence[Sequence[int]], chunk_bytes: int | None = None
) -> list[CommTask]:
    """One task per group (or per chunk of it); priority = the group's first-consumed layer."""
    tasks = []
    for group in groups:
        size = sum(problem.layers[i].grad_bytes for i in group)
        members = tuple(sorted(group))
        sizes = [size] if chunk_bytes is None else partitions(size, chunk_bytes)
        for part in sizes:
            tasks.append(CommTask(layers=members, size_bytes=part, priority=members[0]))
    return tasks


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
class DDP:
    """PyTorch DistributedDataParallel (torch 2.13 defaults): gradients are put into buckets in
    gradient-ready order, each closed once it reaches ``bucket_bytes`` (the first at
    ``first_bucket_bytes``); a bucket is all-reduced when all its gradients are ready, buckets in
    order; the optimizer step waits for every bucket (global barrier). With
    ``broadcast_buffers`` (DDP's default) each forward first broadcasts the model's buffers from
    rank 0 (``_sync_buffers``; no ``Join``), one blocking broadcast per dtype
    (``_broadcast_coalesced`` groups them by type; each under its 250 MiB bucket for every
    model here): the plan's ``forward_sync``, for a model that has buffers."""

    bucket_bytes: int
    first_bucket_bytes: int
    broadcast_buffers: bool = True

    def plan(self, problem: CommProblem) -> CommPlan:
        groups = threshold_groups(problem, self.bucket_bytes, self.first_bucket_bytes)
        tasks = []
        for order, group in enumerate(groups):
            size = sum(problem.layers[i].grad_bytes for i in group)
            tasks.append(CommTask(layers=tuple(sorted(group)), size_bytes=size, priority=order))
        sync = ()
        if self.broadcast_buffers and problem.workers > 1:
            sync = tuple(("broadcast", size) for size in problem.buffer_bytes if size > 0)
        return CommPlan(
            tasks=tuple(tasks), credit_bytes=math.inf, cross_barrier=False, forward_sync=sync
        )


@dataclass(frozen=True)
class Horovod:
    """Horovod tensor fusion (docs/tensor-fusion.rst): every cycle the background loop takes the
    gradients that became ready (on all ranks), in ready order, fuses them into buffers of at most
    ``fusion_threshold_bytes`` and all-reduces each buffer; no priorities; ``step()`` waits for
    all (global barrier). Negotiation cost is not modelled."""

    fusion_threshold_bytes: int
    cycle_time_ms: float

    def plan(self, problem: CommProblem) -> CommPlan:
        tasks = tuple(
            CommTask(layers=(layer.index,), size_bytes=layer.grad_bytes, priority=0)
            for layer in problem.layers
        )
        cycle_s = self.cycle_time_ms / 1000
        if self.fusion_threshold_bytes <= 0 or cycle_s <= 0:  # fusion disabled
            return CommPlan(tasks=tasks, credit_bytes=math.inf, cross_barrier=False)
        return CommPlan(
            tasks=tasks,
            credit_bytes=math.inf,
            cross_barrier=False,
            fusion_threshold_bytes=self.fusion_threshold_bytes,
            fusion_cycle_s=cycle_s,
        )


@dataclass(frozen=True)
class ByteScheduler:
    """ByteScheduler (SOSP'19, bytescheduler/docs/scheduling.md): tensors larger than the
    partition size are split; ready partitions wait in a priority queue keyed by layer index
    (the layer the next forward needs first); while credit remains, the highest-priority
    partition is handed to the network and its size is taken from the credit (the check is
    ``credit > 0``, so one partition may overshoot, as in the original). Cross-barrier: the
    forward of layer i starts once layer i is synchronised.

    ``autotune``: Bayesian optimisation (``runners.tuning``) of the credit (``credit``, the
    upstream default) or of credit and partition, within the upstream all-reduce search space
    (credit 4..64 M parameters, partition 2..32 M), 10 random points + 15 steps, objective = the
    oracle's iteration time (deterministic simulation, tuned before the measured run).
    """

    partition_bytes: int
    credit_bytes: int
    autotune: str = "off"

    @property
    def searches(self) -> bool:
        """Whether ``plan`` searches with the oracle (its plan is worth caching)."""
        return self.autotune != "off"

    def plan(self, problem: CommProblem) -> CommPlan:
        if self.autotune == "off" or problem.oracle is None:
            return self._plan(problem, self.partition_bytes, self.credit_bytes)
        return self._tuned(problem)

    def _plan(
        self, problem: CommProblem, partition: int, credit: int, info: tuple = ()
    ) -> CommPlan:
        tasks = []
        for layer in problem.layers:
            for size in partitions(layer.grad_bytes, partition):
                tasks.append(CommTask(layers=(layer.index,), size_bytes=size, priority=layer.index))
        return CommPlan(tasks=tuple(tasks), credit_bytes=credit, cross_barrier=True, info=info)

    def _tuned(self, problem: CommProblem) -> CommPlan:
        from ..tuning import bayes_minimize

        oracle = problem.oracle
        assert oracle is not None
        million = 1_000_000 * 4  # bytes of one million fp32 parameters
        bounds = {"credit_m": (4.0, 64.0)}
        if self.autotune == "credit+partition":
            bounds["partition_m"] = (2.0, 32.0)

        def step_time(point: dict[str, float]) -> float:
            partition = int(point.get("partition_m", self.partition_bytes / million) * million)
            return oracle(
                self._plan(problem, max(1024, partition), int(point["credit_m"] * million))
            )

        best = bayes_minimize(step_time, bounds, init_points=10, n_iter=15, xi=0.1, seed=0)
        credit = int(best.best_params["credit_m"] * million)
        partition = int(
            best.best_params.get("partition_m", self.partition_bytes / million) * million
        )
        partition = max(1024, partition)
        info = (
            ("tuned_credit_bytes", float(credit)),
            ("tuned_partition_bytes", float(partition)),
            ("tuning_evaluations", float(best.evaluations)),
        )
        return self._plan(problem, partition, credit, info)


@dataclass(frozen=True)
class DeAR:
    """DeAR (Zhang et al., ICDCS 2023): each all-reduce is decoupled into a reduce-scatter,
    issued during backward, and an all-gather, issued before the next forward needs the layer
    (priority by forward order); exact synchronous semantics. Fusion (reconstruction): layers
    are grouped in backward order up to ``fusion_bytes`` (0 = one group per layer); DeAR's own
    fusion search is not reproduced."""

    fusion_bytes: int

    def plan(self, problem: CommProblem) -> CommPlan:
        tasks: list[CommTask] = []
        for group in fusion_groups(problem, self.fusion_bytes):
            members = tuple(sorted(group))
            size = sum(problem.layers[i].grad_bytes for i in group)
            rs = len(tasks)
            tasks.append(CommTask(members, size, members[0], op="reduce_scatter"))
            tasks.append(CommTask(members, size, members[0], op="all_gather", after=rs))
        # One collective in flight: what waits is ordered by priority, so the all-gathers go in
        # forward order (DeAR issues each just before the layer's forward needs it).
        return CommPlan(tasks=tuple(tasks), credit_bytes=1.0, cross_barrier=True)


APPROXIMATIONS = ("stale", "local-correct", "extrapolate")


@dataclass(frozen=True)
class DelayedAllReduce:
    """Delayed all-reduce (Along Jin's HKU thesis, ch. (b); the exact rule is unknown, this is
    the reconstruction of research/comm.md §4.3): the all-reduce of iteration t overlaps with
    the computation of iteration t+1; the forward of layer i in iteration t+1 uses parameters
    that lag by at most ``max_delay`` steps, approximated by ``approximation`` (``stale``: w^t,
    Pipe-SGD style; ``local-correct``: w^t - eta*g_local then corrected; ``extrapolate``: w^t -
    eta*g_global^{t-1}). The approximation changes the numerics (measured in real mode), not the
    timing simulated here. Gradients are fused in backward order up to ``fusion_bytes`` and
    sent ``priority`` (forward order) or ``fifo`` (ready order)."""

    max_delay: int
    approximation: str
    fusion_bytes: int
    order: str

    def plan(self, problem: CommProblem) -> CommPlan:
        tasks = []
        for order, group in enumerate(fusion_groups(problem, self.fusion_bytes)):
            members = tuple(sorted(group))
            size = sum(problem.layers[i].grad_bytes for i in group)
            prio = members[0] if self.order == "priority" else order
            tasks.append(CommTask(members, size, prio))
        return CommPlan(
            tasks=tuple(tasks), credit_bytes=math.inf, cross_barrier=True, delay=self.max_delay
        )


@dataclass(frozen=True)
class PACE:
    """PACE (Bao et al., INFOCOM 2020), reconstruction of research/comm.md §2.4 (the paper's
    exact formulation is not available):

    * schedule (the oracle): preemptive priority on the DAG -- the ready tensor whose first
      consuming forward op comes earliest goes first; preemption happens at chunk boundaries
      (``chunk_bytes``), one chunk in flight;
    * fusion: a dynamic program over the tensors in gradient-ready order that merges contiguous
      tensors, evaluating each candidate plan with the scheduler itself (the simulator as
      oracle): D[j] = min over i of iteration_time(best plan of the first i tensors + group
      i..j + the rest unfused), with groups of at most ``fusion_window`` tensors
      (O(m * window) oracle calls). ``fusion`` = ``none`` skips it.
    """

    chunk_bytes: int
    fusion: str
    fusion_window: int

    @property
    def searches(self) -> bool:
        """Whether ``plan`` runs the fusion DP (its plan is worth caching)."""
        return self.fusion == "dp"

    def plan(self, problem: CommProblem) -> CommPlan:
        groups = [[i] for i in _backward_order(problem)]
        info: tuple[tuple[str, float], ...] = ()
        if self.fusion == "dp" and (problem.collective_s or problem.oracle):
            groups, calls = self._fusion_dp(problem)
            info = (("fusion_groups", float(len(groups))), ("oracle_calls", float(calls)))
        return self._plan(problem, groups, info)

    def _evaluate(self, problem: CommProblem, groups: Sequence[Sequence[int]]) -> float:
        if problem.collective_s is not None and problem.deps:
            return transition_time(problem, groups, self.chunk_bytes)
        assert problem.oracle is not None
        return problem.oracle(self._plan(problem, groups))

    def _plan(self, problem: CommProblem, groups: Sequence[Sequence[int]], info=()) -> CommPlan:
        tasks = _group_tasks(problem, groups, self.chunk_bytes)
        return CommPlan(tasks=tuple(tasks), credit_bytes=1.0, cross_barrier=True, info=info)

    def _fusion_dp(self, problem: CommProblem) -> tuple[list[list[int]], int]:
        order = _backward_order(problem)
        m = len(order)
        best: list[list[list[int]]] = [[]]  # best[j]: grouping of the first j tensors
        calls = 0
        for j in range(1, m + 1):
            rest = [[i] for i in order[j:]]
            choice: tuple[float, list[list[int]]] | None = None
            for i in range(max(0, j - self.fusion_window), j):
                candidate = best[i] + [order[i:j]]
                value = self._evaluate(problem, candidate + rest)
                calls += 1
                if choice is None or value < choice[0] - 1e-12:
                    choice = (value, candidate)
            assert choice is not None
            best.append(choice[1])
        return best[m], calls


def transition_time(
    problem: CommProblem, groups: Sequence[Sequence[int]], chunk_bytes: int
) -> float:
    """PACE's scheduler as a model: the iteration time of one steady-state iteration when the
    fused ``groups`` are sent in chunks, one at a time, highest priority (first-consumed layer)
    first among the released ones, preempting only at chunk boundaries.

    Exact for the simulator's semantics when all workers run alike, without jitter and
    interference: the backward of iteration t releases each group when its last gradient is
    ready; the next forward runs in data-flow order, each layer once its group is synchronised.
    (Every gradient is consumed by the next forward, so the pattern repeats each iteration.)
    """
    collective_s = problem.collective_s
    assert collective_s is not None
    n = len(problem.layers)
    fwd, bwd, deps = problem.fwd_s, problem.bwd_s, problem.deps
    # Backward runs layer n-1 .. 0 from time 0; a group is released at its lowest layer's end.
    end_of_bwd = [0.0] * n
    t = 0.0
    for layer in range(n - 1, -1, -1):
        t += bwd[layer]
        end_of_bwd[layer] = t
    backward_s = t
    releases = []
    for g in groups:
        first = min(g)
        size = sum(problem.layers[i].grad_bytes for i in g)
        chunks = [collective_s(c) for c in partitions(size, chunk_bytes)]
        releases.append((end_of_bwd[first], first, chunks, g))
    releases.sort()
    synced = [0.0] * n
    ready: list[tuple[int, int]] = []  # (priority, group index)
    remaining = [list(r[2]) for r in releases]
    nxt = 0
    now = 0.0
    while nxt < len(releases) or ready:
        while nxt < len(releases) and releases[nxt][0] <= now:
            heapq.heappush(ready, (releases[nxt][1], nxt))
            nxt += 1
        if not ready:
            now = releases[nxt][0]
            continue
        gi = ready[0][1]
        now += remaining[gi].pop()
        if not remaining[gi]:
            heapq.heappop(ready)
            for layer in releases[gi][3]:
                synced[layer] = now
    # Next forward (data-flow, lowest index first) starting when backward ends.
    clock = backward_s
    left = [len(set(d)) for d in deps]
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for d in set(deps[i]):
            children[d].append(i)
    avail = [i for i in range(n) if left[i] == 0]
    heapq.heapify(avail)
    while avail:
        pick = -1
        for cand in sorted(avail):
            if synced[cand] <= clock:
                pick = cand
                break
        if pick < 0:
            clock = min(synced[c] for c in avail)
            continue
        avail.remove(pick)
        heapq.heapify(avail)
        clock += fwd[pick]
        for c in children[pick]:
            left[c] -= 1
            if left[c] == 0:
                heapq.heappush(avail, c)
    # Interval between successive ends of backward = end of this forward (backward started at 0).
    return clock


def wfbp() -> WFBP:
    return WFBP()


def ddp(bucket_bytes: int, first_bucket_bytes: int, broadcast_buffers: bool = True) -> DDP:
    return DDP(
        bucket_bytes=bucket_bytes,
        first_bucket_bytes=first_bucket_bytes,
        broadcast_buffers=broadcast_buffers,
    )


def horovod(fusion_threshold_bytes: int, cycle_time_ms: float) -> Horovod:
    return Horovod(fusion_threshold_bytes=fusion_threshold_bytes, cycle_time_ms=cycle_time_ms)


def bytescheduler(partition_bytes: int, credit_bytes: int, autotune: str = "off") -> ByteScheduler:
    return ByteScheduler(
        partition_bytes=partition_bytes, credit_bytes=credit_bytes, autotune=autotune
    )


def dear(fusion_bytes: int) -> DeAR:
    return DeAR(fusion_bytes=fusion_bytes)


def delayed_allreduce(
    max_delay: int, approximation: str, fusion_bytes: int, order: str
) -> DelayedAllReduce:
    return DelayedAllReduce(
        max_delay=max_delay, approximation=approximation, fusion_bytes=fusion_bytes, order=order
    )


def pace(chunk_bytes: int, fusion: str, fusion_window: int) -> PACE:
    return PACE(chunk_bytes=chunk_bytes, fusion=fusion, fusion_window=fusion_window)


def plan_info(plan: Any) -> dict[str, float]:
    return dict(getattr(plan, "info", ()))
