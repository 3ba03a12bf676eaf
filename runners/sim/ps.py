"""Iteration-level simulator of one data-parallel job in the parameter-server arena.

Resources, each a queue that serves one transfer at a time (priority or arrival order):
the uplink and the downlink of every worker group (each worker has its own NIC, so a group of
m workers moves m copies in parallel), and per parameter server its NIC in, its aggregation CPU
and its NIC out. A key (one whole tensor or one part) travels:

1. **push**: worker uplink (``alpha + S/B_w``) -> server NIC in (``m*S / B_s``, the group's m
   copies). Cut-through: the server may start receiving when the uplink starts; the transfer
   ends no earlier than the uplink does.
2. **aggregate**: once the round's pushes of the key arrived from every group (``sync``), the
   server CPU sums them (``fixed + n*S / agg_rate``, times its CPU slow-down; ``fixed`` is
   ``cluster.server_agg_fixed_us``).
3. **pull**: server NIC out (``n*S / B_s``) -> every group's downlink (``alpha + S/B_w``),
   cut-through again. The key is then up to date on that group.

``sync-round`` (eager pull): the pull of a group is served right after its push arrived, with
the newest complete round; ``async``: each group's push is aggregated alone and pulled back at
once. PS stragglers scale a server's NIC bandwidth (contention) and CPU time (interference),
possibly only in some iterations; a worker straggler's ``bandwidth_factor`` scales its own
NIC's (``B_w`` of its pushes and pulls; the worker is a group of its own).

With ``cluster.link_burst_bytes`` (the NICs shaped by a token bucket, as ``tc htb`` shapes
the emulated testbed's, each direction of each NIC), every worker uplink and downlink and every
server NIC in and out has a bucket of that depth, full at the start, filled at the NIC's rate
of the moment (a straggler's scaled one) while it does not send at the shaped rate (idle, a
transfer's latency, a cut-through transfer waiting for the bytes it forwards): a transfer's
bytes up to the tokens pass at once, the rest at the rate. Key migrations (PSLD) pass at the
rate. With ``cluster.message_cpu_us``, each push a worker group's uplink starts and each pull
its downlink starts takes that much CPU time from the op the group computes then (it ends
that much later; ``ComputeJob``'s CPU debt, as the all-reduce arena's ``collective_cpu_us``):
the PS transport's threads ahead of the compute on shared cores, as on our CPU testbed (a
reconstruction, labelled as such; ``cluster.message_cpu_at`` ``handover`` charges a push's
as the backward hands its gradient over instead, link free or not). With
``cluster.overlap_model`` ``integrated``, ``cluster.overlap_slowdown`` is a rate: a group's
op runs at ``1 / (1 + overlap_slowdown)`` of its speed while a push or pull runs on its
worker's uplink or downlink (a rendezvous sender waiting for its receiver is not running),
re-timed as they turn busy or idle (``runners.sim.engine``); ``start`` (the default) fixes
it when the op starts. With ``cluster.pull_rendezvous`` (the lab's real PS
transport: gloo sends meet their receives), a pull goes from one server's sender to one
worker's receiver at a time, both held for the longer of their NICs' times; a sender whose
worker's receiver is busy waits, with the pulls behind it, and a receiver takes the waiting
senders in the order they came; every worker is a group of its own (a reconstruction,
labelled as such). ``cluster.push_rendezvous`` does the same for pushes: a push holds one
worker's sender and one server's receiver, a sender whose server's receiver is busy waits
with the pushes behind it, and a receiver takes the waiting senders in the order they came
(migrations first; a reconstruction, labelled as such). With ``cluster.host_cores`` every
process shares one host: by default (``cluster.host_cpu_model`` ``floor``) each iteration of a
worker lasts at least the host's CPU work over its cores; ``fair`` and ``messages-first``
share the cores op by op instead (``runners.sim.hostcpu``: the computing workers and each
message's CPU, the compute ops re-timed at the speed they get; a reconstruction, labelled as
such). Modelling choices:
store-and-forward at the aggregation, no TCP dynamics, one transfer at a time per NIC
direction, one PS per server machine; an item that reaches an idle resource starts at once, so
one that arrives at the very instant the resource frees may start before a higher-priority one
arriving at that same instant.

Worker groups (see ``simulated_groups``): identical workers run as one group with one compute
stream and one jitter draw. ``cluster.jitter_groups`` (default 1) splits the workers of every
system into that many groups with independent compute noise (a modelling assumption: set it
to the number of workers for per-worker noise); a random-order plan splits them by its
``order_groups`` as well, with one order draw per order group.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush

import numpy as np

from .. import registry
from ..policies.allreduce import Layer
from ..policies.ps import PSPlan, PSProblem, lr_scale
from ..spec import RunSpec
from .allreduce import compute_setup
from .engine import ComputeJob, ComputeSetup, LayerTimes, SimResult, WorkerGroup
from .hostcpu import SharedCores


class _Station:
    """One resource serving one item at a time. ``free_at`` is when the item in service ends;
    ``pending`` says an event is scheduled at ``free_at`` that will serve the queue (a queued
    item always has one). Items whose end has no consequence but freeing the resource (a push
    leaving the uplink, a pull leaving the server, a migration) schedule no event of their own
    when nothing waits behind them: about a third fewer events, same schedule.

    The queue is ordered by (k1, k2, arrival sequence). It is a heap of ``(k1, k2, seq, *item)``
    (``item``: ``begin``'s arguments after the station); on a ``fifo`` station (every key
    (0, 0), so arrival order, and no migration to jump ahead) a deque of items: the same order
    for less work. An uplink in key order queues a *run* (the tasks of one layer that share a
    key, which arrive together) as one heap entry ``[k1, k2, seq, it, g, tasks, next, assign]``
    and serves its tasks in turn from the top of the heap: the same order as one entry per
    task, since with consecutive sequence numbers nothing can sort between them."""

    __slots__ = ("begin", "fifo", "free_at", "name", "pending", "queue", "server", "tokens",
                 "tokens_at", "wire_free")  # fmt: skip

    def __init__(self, name: str, fifo: bool, server: int = -1) -> None:
        self.name = name
        self.fifo = fifo
        self.queue: list[tuple] | deque[tuple] = deque() if fifo else []
        self.free_at = 0.0
        self.pending = False
        self.server = server
        # A NIC's token bucket (``cluster.link_burst_bytes``): bytes it held at ``tokens_at``.
        self.tokens = 0.0
        self.tokens_at = 0.0
        # ``cluster.push_buffered``: when the bytes handed to this uplink so far are through
        self.wire_free = 0.0
        # Set by ``_PSJob._bind``: ``begin(st, item)`` starts ``item`` on this idle station;
        # ``begin(st)``, the event at ``free_at``, serves the queue.
        self.begin: Callable[..., None] = _unbound


def _unbound(*_args: object) -> None:
    raise RuntimeError("station used before _PSJob._bind")


def build_problem(spec: RunSpec, setup: ComputeSetup) -> PSProblem:
    c = spec.cluster
    return PSProblem(
        layers=tuple(Layer(i, lt.name, lt.grad_bytes) for i, lt in enumerate(setup.layers)),
        deps=tuple(lt.deps for lt in setup.layers),
        fwd_s=tuple(lt.fwd_s for lt in setup.layers),
        workers=c.workers,
        ps=c.ps,
        servers=c.servers,
        worker_bytes_per_s=c.bandwidth_gbps * 1e9 / 8,
        server_bytes_per_s=c.server_bandwidth_gbps * 1e9 / 8,
        latency_s=c.latency_us * 1e-6,
    )


def split_groups(groups: tuple[WorkerGroup, ...], parts: int) -> tuple[WorkerGroup, ...]:
    """Split every group into up to ``parts`` groups (worker index modulo ``parts``)."""
    if parts <= 1:
        return groups
    out = []
    for g in groups:
        for k in range(parts):
            ws = tuple(w for w in g.workers if w % parts == k)
            if ws:
                out.append(dataclasses.replace(g, workers=ws))
    out.sort(key=lambda g: g.workers[0])
    return tuple(out)


def simulated_groups(
    groups: tuple[WorkerGroup, ...], order_groups: int, jitter_groups: int
) -> tuple[tuple[WorkerGroup, ...], tuple[int, ...]]:
    """The groups the PS arena simulates and, per group, the index of its random-order draw.

    ``groups`` (workers by straggler schedule) are split by order group (worker index modulo
    ``order_groups``; 1 when the plan has no random order), then by ``cluster.jitter_groups``
    (worker index modulo it). Every resulting group is one compute stream with its own jitter
    draw (``ComputeJob``), while the groups of one order split share that split's order draw:
    more noise groups do not give a random-order plan more independent orders. With
    ``jitter_groups == 1`` nothing changes: one order draw per group, as before the field.
    """
    ordered = split_groups(groups, order_groups)
    out = split_groups(ordered, jitter_groups)
    order_split = {w: i for i, g in enumerate(ordered) for w in g.workers}
    return out, tuple(order_split[g.workers[0]] for g in out)


def run(spec: RunSpec, layers: tuple[LayerTimes, ...] | None = None) -> SimResult:
    """Simulate ``spec``; ``layers`` replaces the workload's layers (tests, what-ifs)."""
    setup = compute_setup(spec, layers, link_groups=True)
    plan = registry.get(spec.system).build(spec.params).plan(build_problem(spec, setup))
    random_order = "random" in (plan.push_order, plan.pull_order)
    # ``cluster.pull_rendezvous`` (``push_rendezvous``): a pull goes to one worker's receiver
    # (a push from one worker's sender), so each worker is a group of its own
    c = spec.cluster
    rendezvous = c.pull_rendezvous or c.push_rendezvous
    jitter_groups = c.workers if rendezvous else c.jitter_groups
    groups, order_draw = simulated_groups(
        setup.groups, plan.order_groups if random_order else 1, jitter_groups
    )
    setup = dataclasses.replace(setup, groups=groups)
    if plan.controller is not None and hasattr(plan.controller, "reseed"):
        plan.controller.reseed(spec.seed)
    return simulate(setup, spec, plan, order_draw)


def simulate(
    setup: ComputeSetup, spec: RunSpec, plan: PSPlan, order_draw: tuple[int, ...] | None = None
) -> SimResult:
    """Simulate ``plan`` on ``setup``'s groups as they are; ``order_draw[g]`` (default: ``g``)
    is the random-order draw group ``g`` uses (see ``simulated_groups``)."""
    job = _PSJob(setup, spec, plan, order_draw)
    job.start()
    job.loop.run()
    return job.result()


class _PSJob(ComputeJob):
    # ``cluster.overlap_model: integrated``: the job re-times the running ops as its workers'
    # links turn busy or idle (``_link_rate``)
    reports_network_changes = True

    def __init__(
        self,
        setup: ComputeSetup,
        spec: RunSpec,
        plan: PSPlan,
        order_draw: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(setup)
        c = spec.cluster
        self.plan = plan
        self.tasks = plan.tasks
        n_servers = c.servers
        for t in plan.tasks:
            if not 0 <= t.server < n_servers:
                raise ValueError(
                    f"plan puts layer {t.layer} on server {t.server} (0..{n_servers - 1})"
                )
        self.n_servers = n_servers
        self.alpha = c.latency_us * 1e-6
        self.bw_worker = c.bandwidth_gbps * 1e9 / 8
        self.bw_server = c.server_bandwidth_gbps * 1e9 / 8
        self.agg_rate = c.server_agg_gbps * 1e9 / 8
        self.agg_fixed = c.server_agg_fixed_us * 1e-6
        self.burst = float(c.link_burst_bytes)
        self.cpu_per_message = c.message_cpu_us * 1e-6
        self.cpu_at_handover = c.message_cpu_at == "handover"
        self.rendezvous = c.pull_rendezvous
        if self.rendezvous and any(g.count != 1 for g in setup.groups):
            raise ValueError("cluster.pull_rendezvous needs one worker per group (``run``)")
        self.push_rendezvous = c.push_rendezvous
        self.push_buffered = c.push_buffered
        if self.push_rendezvous and any(g.count != 1 for g in setup.groups):
            raise ValueError("cluster.push_rendezvous needs one worker per group (``run``)")
        # ``cluster.push_rendezvous``: per server, the workers' senders waiting for its
        # receiver, in the order they offered (``offer_push``): (uplink, it, task, group)
        self.push_offers: list[deque[tuple[_Station, int, int, int]]] = [
            deque() for _ in range(n_servers)
        ]
        # Per server, per iteration: NIC bandwidth factor and CPU slow-down.
        bw_factor = np.ones((n_servers, self.n_iter))
        cpu_factor = np.ones((n_servers, self.n_iter))
        for s in c.ps_stragglers:
            end = self.n_iter if s.until_iteration is None else min(s.until_iteration, self.n_iter)
            bw_factor[s.server, s.from_iteration : end] = s.bandwidth_factor
            cpu_factor[s.server, s.from_iteration : end] = s.cpu_slowdown
        self.bw_factor_l = bw_factor.tolist()  # lists: cheaper to index on the hot path
        self.cpu_factor_l = cpu_factor.tolist()
        self.sizes = [t.size_bytes for t in plan.tasks]
        self.task_layer = [t.layer for t in plan.tasks]
        self.labels = [self.names[t.layer] for t in plan.tasks]
        self.priority = [t.priority for t in plan.tasks]
        self.server_priority = plan.server_order == "priority"
        self.async_mode = plan.server_mode == "async"
        self.sync_mode = plan.server_mode == "sync"
        self.cross_barrier = plan.cross_barrier
        self.tasks_of_layer: list[list[int]] = [[] for _ in range(self.n_layers)]
        for i, t in enumerate(plan.tasks):
            self.tasks_of_layer[t.layer].append(i)
        # A layer without keys (no parameters of its own, e.g. a tied output projection) has
        # nothing to wait for.
        self.n_parts = [len(ts) for ts in self.tasks_of_layer]
        self.keyless = [i for i, n in enumerate(self.n_parts) if n == 0]
        self.group_size = [g.count for g in setup.groups]
        self.workers = setup.workers
        # Queues in arrival order are deques (see ``_Station``); a server's NIC queues also
        # take migrations, which go first, so they are heaps whenever keys may move.
        up_fifo = plan.push_order not in ("priority", "random")
        down_fifo = plan.pull_order not in ("priority", "random")
        cpu_fifo = not self.server_priority
        nic_fifo = cpu_fifo and plan.controller is None
        self.fifo = (up_fifo, down_fifo, cpu_fifo, nic_fifo)
        self.uplink = [_Station(f"uplink[{g.label}]", up_fifo) for g in setup.groups]
        self.downlink = [_Station(f"downlink[{g.label}]", down_fifo) for g in setup.groups]
        if self.n_groups == 1:
            self.uplink[0].name, self.downlink[0].name = "uplink", "downlink"
        self.s_in = [_Station(f"ps{j}.in", nic_fifo, j) for j in range(n_servers)]
        self.s_cpu = [_Station(f"ps{j}.cpu", cpu_fifo, j) for j in range(n_servers)]
        self.s_out = [_Station(f"ps{j}.out", nic_fifo, j) for j in range(n_servers)]
        for st in (*self.uplink, *self.downlink, *self.s_in, *self.s_out):
            st.tokens = self.burst  # full at the start, as a shaper that has not sent
        # Orders: per (order draw, iteration) priority of each task on the worker queues.
        self.order_draw = list(range(self.n_groups)) if order_draw is None else list(order_draw)
        if len(self.order_draw) != self.n_groups:
            raise ValueError(f"order_draw has {len(self.order_draw)} entries, not one per group")
        self.rng = random.Random(spec.seed * 7919 + 17)
        # ``random_prio[draw][it]``: the draw's layer places in iteration ``it`` (None: not
        # drawn yet; drawn on first use, so the draws come in event order).
        n_draws = max(self.order_draw, default=-1) + 1
        self.random_prio: list[list[list[int] | None]] = [
            [None] * self.n_iter for _ in range(n_draws)
        ]
        # Per-iteration state, per group (``[g][it]``) or per iteration (``[it]``); None until
        # the iteration's first gradient on the group (``_group_state``) or anywhere
        # (``_assignment``).
        self.assign = [t.server for t in plan.tasks]
        self.assign_of: list[list[int] | None] = [None] * self.n_iter
        self.parts_left: list[list[list[int] | None]] = [[None] * self.n_iter for _ in setup.groups]
        self.layers_left = [[0] * self.n_iter for _ in setup.groups]
        self.arrived: list[list[int] | None] = [None] * self.n_iter  # pushes in, per task
        self.round_left = [0] * self.n_iter
        self.completed_round = [-1] * len(plan.tasks)
        self.version = [0] * len(plan.tasks)
        self.read_version: dict[tuple[int, int], int] = {}
        self.staleness: list[float] = []
        # Plain lists, not arrays: indexing numpy scalars is slow on the hot path.
        self.busy_s = [[0.0] * (self.n_iter + 1) for _ in range(n_servers)]
        self.comm_up = [0.0] * self.n_iter
        self.comm_down = [0.0] * self.n_iter
        self.migrated_bytes = 0
        self.round_end: dict[int, float] = {}
        # Per group and iteration: when the group's last push left its uplink (see
        # ``straggler_times``); written once per group and iteration, off the per-event path.
        self.push_done = [[0.0] * self.n_iter for _ in setup.groups]
        self.host_cores = c.host_cores
        # ``cluster.host_cores``: each message's host CPU (``host_message_cpu_us + S *
        # host_cpu_ns_per_byte``), per task
        self.message_work = [
            c.host_message_cpu_us * 1e-6 + size * c.host_cpu_ns_per_byte * 1e-9
            for size in self.sizes
        ]
        self.host_work = self._host_work() if c.host_cores else None
        self.host_floor: list[float] | None = None
        self.shared: SharedCores | None = None
        if c.host_cores and c.host_cpu_model == "floor":
            self.host_floor = [w / c.host_cores for w in self.host_work]  # type: ignore[union-attr]
        elif c.host_cores:  # ``cluster.host_cpu_model`` fair or messages-first
            self.shared = SharedCores(self, c.host_cores, c.host_cpu_model == "messages-first")
            # the compute ops progress at the shared cores' speed (``overlap_integrated``'s
            # machinery), re-timed whenever a group starts or ends an op
            self.integrated = True
            self.batch_forward = False
            self.compute_watch = self.shared.changed
            self._rate = self.shared.rate  # type: ignore[method-assign]
            self._bind_compute()
        # ``cluster.overlap_model: integrated`` (with ``overlap_slowdown``): per group, when
        # the last transfer on its worker's links started so far ends (``_link_rate``)
        self.link_end = [0.0] * self.n_groups
        if self.integrated and self.shared is None:
            self._rate = self._link_rate  # type: ignore[method-assign]
            self._bind_compute()
        self._evq, self._evseq = self.loop.raw()
        self._bind()

    def _link_rate(self, g: int) -> float:
        """(``cluster.overlap_model: integrated``.) Group ``g``'s compute speed now: ``1 / (1 +
        overlap_slowdown)`` while a transfer runs on its worker's uplink or downlink, else
        its full speed. A transfer that runs: a push or pull between its start and its end; a
        rendezvous sender waiting for its receiver is not one."""
        return 1.0 / (1.0 + self.gamma) if self.link_end[g] > self.loop.now else 1.0

    def _host_work(self) -> list[float]:
        """``cluster.host_cores``: per iteration, the host's CPU work: every worker's compute
        ops, then each message's (``message_work``) for each push and each pull of every
        worker. The floor spreads it over the cores, the shared cores run it as it comes."""
        comm = self.workers * 2 * sum(self.message_work)
        counts = [g.count for g in self.setup.groups]
        return [
            sum(n * sum(d[it]) for n, d in zip(counts, self.durations, strict=True)) + comm
            for it in range(self.n_iter)
        ]

    # -- per-iteration state ----------------------------------------------------------------
    def _group_state(self, g: int, it: int) -> None:
        if it:
            # The first gradient of ``it``: every push of ``it - 1`` has left the uplink (the
            # forward of ``it`` needed their pulls), and nothing else has used it since.
            up = self.uplink[g]
            self.push_done[g][it - 1] = max(up.free_at, up.wire_free)
        self.parts_left[g][it] = list(self.n_parts)
        self.layers_left[g][it] = self.n_layers - len(self.keyless)
        for layer in self.keyless:
            self.synced.append((g, it, layer, self.loop.now))

    def _assignment(self, it: int) -> list[int]:
        a = self.assign_of[it]
        if a is None:
            a = self.assign_of[it] = list(self.assign)
            self.round_left[it] = len(self.tasks) * self.n_groups
            self.arrived[it] = [0] * len(self.tasks)
        return a

    def _random_order(self, g: int, it: int) -> list[int]:
        """Group ``g``'s random transfer order in iteration ``it``: each layer's place."""
        row = self.random_prio[self.order_draw[g]]
        perm = row[it]
        if perm is None:
            perm = list(range(self.n_layers))
            self.rng.shuffle(perm)
            row[it] = perm
        return perm

    # -- hooks ----------------------------------------------------------------------------
    # ``params_ready`` and ``gradient_ready`` are bound per job (``_bind``).
    def network_busy(self, g: int) -> bool:
        now = self.loop.now
        return self.uplink[g].free_at > now or self.downlink[g].free_at > now

    def comm_time(self, it: int) -> float:
        """Busy time of the first group's busier NIC direction (push or pull)."""
        return float(max(self.comm_up[it], self.comm_down[it]))

    # -- stations -------------------------------------------------------------------------
    def _bind(self) -> None:
        """Build the hot path of the PS arena (several events per key, per group and per
        iteration) as closures over this job's state, kept flat on purpose: what is constant
        for the run is a local of this function (no attribute look-ups per event), events go
        straight onto the loop's heap (``EventLoop.raw``), every kind of end has its own
        callback (no dispatch), enqueueing is inlined with the sort keys computed in place,
        and transfer times that do not change from one iteration to the next are computed
        once (the same operations in the same order: the same floats).

        ``begin_*(st, it, task, g, ...)``: start an item (iteration, task, group, and the
        server and the earliest end where the station needs them) on the idle station ``st``
        now, record it, schedule what its end triggers; ``begin_*(st)``, the event at
        ``st.free_at`` when something waits: serve the queue (see ``_Station``). Group -1 is
        every group (a synchronous round); task -1 is a migration (PSLD), its bytes in the
        group's place. ``*_end``: the events at the end of a transfer or an aggregation."""
        loop = self.loop
        evq, evseq = self._evq, self._evseq
        sizes = self.sizes
        prio = self.priority
        task_layer = self.task_layer
        labels = self.labels
        tasks_of_layer = self.tasks_of_layer
        group_size = self.group_size
        workers = self.workers
        n_groups = self.n_groups
        uplink, downlink = self.uplink, self.downlink
        s_in, s_cpu, s_out = self.s_in, self.s_cpu, self.s_out
        timeline = self.timeline
        recorded = [self.tl_from <= it < self.tl_to for it in range(self.n_iter)]
        comm_up, comm_down = self.comm_up, self.comm_down
        busy_s = self.busy_s
        cpu_factor = self.cpu_factor_l
        parts_left, layers_left = self.parts_left, self.layers_left
        assign_of, round_left, arrived = self.assign_of, self.round_left, self.arrived
        completed_round = self.completed_round
        staleness = self.staleness
        synced = self.synced
        random_prio, order_draw = self.random_prio, self.order_draw
        avail, busy = self.avail, self.busy  # the compute side's (lists of the groups')
        group_state, assignment, random_order = (
            self._group_state,
            self._assignment,
            self._random_order,
        )
        server_priority = self.server_priority
        async_mode, sync_mode = self.async_mode, self.sync_mode
        cross_barrier = self.cross_barrier
        push_order, pull_order = self.plan.push_order, self.plan.pull_order
        up_fifo, down_fifo, cpu_fifo, nic_fifo = self.fifo
        pull_random = pull_order == "random"
        # Steady-state constants: a push or pull on a worker NIC of each task (alpha + S/B_w),
        # a round's aggregation before the CPU slow-down (n*S / agg_rate), the server NIC's
        # bandwidth per server and iteration (B_s times the straggler factor).
        alpha, bw_worker, bw_server = self.alpha, self.bw_worker, self.bw_server
        agg_rate = self.agg_rate
        link_s = [alpha + size / bw_worker for size in sizes]
        # A group's NIC straggler (``WorkerGroup.links``): its push and pull times in an
        # iteration where its bandwidth is scaled; None for a group at the cluster's rate.
        link_slow: list[list[float] | None] = [
            list(g.links) if g.links else None for g in self.setup.groups
        ]
        agg_fixed = self.agg_fixed
        agg_s = [(agg_fixed if size else 0.0) + workers * size / agg_rate for size in sizes]
        # Bytes a server moves for a group's transfer of each task, ``[-1]``: every worker's
        # (one row per distinct group size).
        rows: dict[int, list[int]] = {}
        for m in (*group_size, workers):
            if m not in rows:
                rows[m] = [m * size for size in sizes]
        group_bytes = [rows[m] for m in (*group_size, workers)]
        server_bw = [[bw_server * f for f in row] for row in self.bw_factor_l]
        seq = 0  # arrival sequence of the heap queues
        # Per layer, its tasks cut into runs of equal priority (in order), for the uplink.
        prio_runs: list[list[tuple[int, list[int]]]] = []
        for tasks in tasks_of_layer:
            runs: list[tuple[int, list[int]]] = []
            for task in tasks:
                if runs and runs[-1][0] == prio[task]:
                    runs[-1][1].append(task)
                else:
                    runs.append((prio[task], [task]))
            prio_runs.append(runs)
        n_parts = self.n_parts
        # The downlinks a pull goes to: ``targets[g]`` for group ``g``, ``targets[-1]`` all.
        targets = [(g,) for g in range(n_groups)] + [range(n_groups)]

        burst = self.burst
        msg_cpu = self.cpu_per_message
        # ``cluster.message_cpu_at`` handover: a push's CPU is charged as its gradient is
        # handed to the transport (``gradient_ready``), not as it reaches the link
        push_cpu, handover_cpu = (0.0, msg_cpu) if self.cpu_at_handover else (msg_cpu, 0.0)
        shared, message_work = self.shared, self.message_work
        cpu_debt, bwd_next = self.cpu_debt, self.bwd_next
        # ``cluster.pull_rendezvous``: per group, the servers whose sender waits for the
        # group's receiver, in the order they offered (``offer_pull``)
        rendezvous = self.rendezvous
        offers: list[deque[tuple[_Station, int, int, int]]] = [deque() for _ in range(n_groups)]
        push_rendezvous, push_offers = self.push_rendezvous, self.push_offers
        push_buffered = self.push_buffered

        # ``cluster.overlap_model: integrated``: the running ops re-timed as links turn busy
        watch_links = self.integrated and self.shared is None
        link_end, network_changed = self.link_end, self.network_changed

        def link_busy(g: int, now: float, end: float) -> None:
            """(``watch_links``.) A transfer on group ``g``'s links from ``now`` to ``end``."""
            if end > link_end[g]:
                if link_end[g] <= now:  # the links turn busy
                    network_changed()
                link_end[g] = end
                heappush(evq, (end, next(evseq), network_changed, ()))

        def bucket(st: _Station, now: float, nbytes: float, rate: float, latency: float) -> float:
            """``cluster.link_burst_bytes``: how long ``nbytes`` take on NIC ``st`` from
            ``now`` through its token bucket (filled at ``rate`` up to ``burst`` while the
            link does not send at the shaped rate): the bytes its tokens cover pass at once,
            the rest at ``rate``, after ``latency``, during which the bucket fills."""
            tokens = st.tokens + (now - st.tokens_at) * rate
            if tokens > burst:
                tokens = burst
            used = nbytes if nbytes < tokens else tokens
            duration = latency + (nbytes - used) / rate
            tokens = tokens - used + latency * rate
            st.tokens = burst if tokens > burst else tokens
            st.tokens_at = now + duration
            return duration

        def enqueue(st: _Station, k1: int, k2: int, item: tuple) -> None:
            """The general enqueue of ``item`` (``st.begin``'s arguments after the station);
            the hot paths inline it."""
            nonlocal seq
            if st.pending or st.free_at > loop.now:
                if st.fifo:
                    st.queue.append(item)
                else:
                    heappush(st.queue, (k1, k2, seq, *item))
                    seq += 1
                if not st.pending:
                    st.pending = True
                    heappush(evq, (st.free_at, next(evseq), st.begin, (st,)))
            else:
                st.begin(st, *item)

        def params_ready(g: int, it: int, layer: int) -> bool:
            if it < 1:
                return True
            parts = parts_left[g][it - 1]
            if parts is None:
                return False
            if cross_barrier:
                return parts[layer] == 0
            return layers_left[g][it - 1] == 0

        host_floor = self.host_floor
        if host_floor is not None:  # ``cluster.host_cores``: the host's CPU holds iterations
            pulled_ready = params_ready
            fwd_done, iter_start = self.fwd_done, self.iter_start
            held = [-1] * n_groups  # per group, the iteration whose wake is due

            def params_ready(g: int, it: int, layer: int) -> bool:
                if it >= 1 and fwd_done[g] == 0:  # the iteration's first forward op
                    release = iter_start[g][it - 1] + host_floor[it - 1]
                    if loop.now < release:
                        if held[g] != it:
                            held[g] = it
                            heappush(evq, (release, next(evseq), self.wake, (g,)))
                        return False
                return pulled_ready(g, it, layer)

        def gradient_ready(g: int, it: int, layer: int) -> None:
            nonlocal seq
            if handover_cpu and (busy[g] or bwd_next[g] >= 0):
                # ``cluster.message_cpu_at`` handover: the layer's pushes' CPU, now
                cpu_debt[g] += handover_cpu * n_parts[layer]
            if parts_left[g][it] is None:
                group_state(g, it)
            assign = assign_of[it]
            if assign is None:
                assign = assignment(it)
            st = uplink[g]
            q = st.queue
            now = loop.now
            if not up_fifo:
                # Keys in priority order: a run of the layer's tasks with one key is queued as
                # one entry (see ``_Station``); they start directly while the uplink is idle.
                if push_order == "priority":
                    runs = prio_runs[layer]
                else:  # random: every part of a layer has the layer's place in the draw
                    perm = random_prio[order_draw[g]][it]
                    if perm is None:
                        perm = random_order(g, it)
                    runs = ((perm[layer], tasks_of_layer[layer]),) if n_parts[layer] else ()
                for k2, run in runs:
                    i = 0
                    while not (st.pending or st.free_at > now):
                        task = run[i]
                        begin_up(st, it, task, g, assign[task])
                        i += 1
                        if i == len(run):
                            break
                    else:
                        heappush(q, [it, k2, seq, it, g, run, i, assign])
                        seq += 1
                        if not st.pending:
                            st.pending = True
                            heappush(evq, (st.free_at, next(evseq), begin_up, (st,)))
            else:  # arrival order
                for task in tasks_of_layer[layer]:
                    if st.pending or st.free_at > now:
                        q.append((it, task, g, assign[task]))
                        if not st.pending:
                            st.pending = True
                            heappush(evq, (st.free_at, next(evseq), begin_up, (st,)))
                    else:
                        begin_up(st, it, task, g, assign[task])

        def begin_up(
            st: _Station, it: int = -1, task: int = 0, g: int = 0, server: int = 0
        ) -> None:
            nonlocal seq
            if it < 0:  # the item in service ended: serve the queue
                st.pending = False
                q = st.queue
                if not q:
                    return
                if up_fifo:
                    it, task, g, server = q.popleft()
                else:  # the next task of the first run
                    entry = q[0]
                    _, _, _, it, g, run, i, assign = entry
                    task = run[i]
                    server = assign[task]
                    if i + 1 == len(run):
                        heappop(q)
                    else:
                        entry[6] = i + 1
            if push_rendezvous:
                offer_push(st, it, task, g, server)
                return
            now = loop.now
            slow = link_slow[g]
            if burst:
                factor = 1.0 if slow is None or it >= len(slow) else slow[it]
                end = now + bucket(st, now, sizes[task], bw_worker * factor, alpha)
            elif slow is None or it >= len(slow) or slow[it] == 1.0:
                end = now + link_s[task]
            else:
                end = now + alpha + sizes[task] / (bw_worker * slow[it])
            if push_cpu and (busy[g] or bwd_next[g] >= 0):  # ``cluster.message_cpu_us``
                cpu_debt[g] += push_cpu
            if shared is not None:  # ``cluster.host_cpu_model``: its CPU on the shared cores
                shared.add(message_work[task], group_size[g])
            if watch_links:  # ``cluster.overlap_model: integrated``
                link_busy(g, now, end)
            # Cut-through: the server's NIC may start receiving now (enqueue, inlined).
            si = s_in[server]
            if si.pending or si.free_at > now:
                if nic_fifo:
                    si.queue.append((it, task, g, server, end))
                elif server_priority:
                    heappush(si.queue, (it, prio[task], seq, it, task, g, server, end))
                    seq += 1
                else:
                    heappush(si.queue, (0, 0, seq, it, task, g, server, end))
                    seq += 1
                if not si.pending:
                    si.pending = True
                    heappush(evq, (si.free_at, next(evseq), begin_in, (si,)))
            else:
                begin_in(si, it, task, g, server, end)
            if g == 0:
                comm_up[it] += end - now
            if recorded[it]:
                timeline.append((it, st.name, "push", labels[task], now, end, sizes[task]))
            st.free_at = end
            if st.queue:
                st.pending = True
                heappush(evq, (end, next(evseq), begin_up, (st,)))

        def held_s(
            wst: _Station, sst: _Station, now: float, it: int, size: int, g: int, server: int
        ) -> float:
            """A rendezvous transfer's time from ``now``: the longer of the worker's NIC's
            (``wst``: group ``g``'s, after the latency) and server ``server``'s (``sst``),
            each through its token bucket."""
            slow = link_slow[g]
            rate = bw_worker if slow is None or it >= len(slow) else bw_worker * slow[it]
            if burst:
                return max(
                    bucket(wst, now, size, rate, alpha),
                    bucket(sst, now, size, server_bw[server][it], 0.0),
                )
            return max(alpha + size / rate, size / server_bw[server][it])

        def offer_push(up: _Station, it: int, task: int, g: int, server: int) -> None:
            """``cluster.push_rendezvous``: group ``g``'s sender (``up``, idle) sends
            ``task``'s push to server ``server`` now if the server's receiver is free, else
            waits for it, taking nothing else meanwhile."""
            si = s_in[server]
            waiting = push_offers[server]
            if not si.pending and si.free_at <= loop.now and not waiting:
                start_push(up, si, it, task, g, server)
                return
            waiting.append((up, it, task, g))
            up.free_at = float("inf")  # its queue waits (served when the push ends)
            up.pending = True
            if not si.pending:  # busy with an item that schedules nothing (a migration)
                si.pending = True
                heappush(evq, (si.free_at, next(evseq), begin_in, (si,)))

        def buffered_s(up: _Station, si: _Station, now: float, it: int, size: int, g: int,
                       server: int) -> tuple[float, float, float]:  # fmt: skip
            """(``cluster.push_buffered``.) A rendezvous push whose bytes the worker's NIC
            takes behind those handed to it before: when its bytes are through (the later of
            the worker's NIC, from when it is free of them, and the server's, from now, each
            through its token bucket), when the sender is free again (after the latency) and
            when the worker's NIC starts on them."""
            slow = link_slow[g]
            rate = bw_worker if slow is None or it >= len(slow) else bw_worker * slow[it]
            start = up.wire_free if up.wire_free > now else now
            latency = now + alpha - start if now + alpha > start else 0.0
            if burst:
                wire = start + bucket(up, start, size, rate, latency)
                end = now + bucket(si, now, size, server_bw[server][it], 0.0)
            else:
                wire = start + latency + size / rate
                end = now + size / server_bw[server][it]
            end = wire if wire > end else end
            up.wire_free = end
            return end, now + alpha, start

        def start_push(up: _Station, si: _Station, it: int, task: int, g: int, server: int):
            """A rendezvous push: the worker's sender and the server's receiver both held for
            the longer of the two NICs' times (each through its token bucket); with
            ``cluster.push_buffered`` the sender only until its bytes are handed over."""
            now = loop.now
            size = sizes[task]
            if push_buffered:
                end, freed, start = buffered_s(up, si, now, it, size, g, server)
                duration = end - now
            else:
                duration = held_s(up, si, now, it, size, g, server)
                end = freed = now + duration
                start = now
            if push_cpu and (busy[g] or bwd_next[g] >= 0):  # ``cluster.message_cpu_us``
                cpu_debt[g] += push_cpu
            if shared is not None:  # ``cluster.host_cpu_model``: its CPU on the shared cores
                shared.add(message_work[task], group_size[g])
            if watch_links:  # ``cluster.overlap_model: integrated``
                link_busy(g, now, end)
            busy_s[server][it] += duration
            if g == 0:
                comm_up[it] += duration if start == now else end - start
            if recorded[it]:  # the worker's NIC from when it starts on the bytes
                timeline.append((it, up.name, "push", labels[task], start, end, size))
                timeline.append((it, si.name, "push", labels[task], now, end, size))
            up.free_at, si.free_at = freed, end
            up.pending = si.pending = True
            heappush(evq, (freed, next(evseq), begin_up, (up,)))  # its next push, if any
            heappush(evq, (end, next(evseq), arrived_end, (si, it, task, g, server)))

        def begin_down(
            st: _Station, it: int = -1, task: int = 0, g: int = 0, min_end: float = 0.0
        ) -> None:
            if it < 0:
                st.pending = False
                q = st.queue
                if not q:
                    return
                if down_fifo:
                    it, task, g, min_end = q.popleft()
                else:
                    _, _, _, it, task, g, min_end = heappop(q)
            now = loop.now
            slow = link_slow[g]
            if burst:
                factor = 1.0 if slow is None or it >= len(slow) else slow[it]
                end = now + bucket(st, now, sizes[task], bw_worker * factor, alpha)
            elif slow is None or it >= len(slow) or slow[it] == 1.0:
                end = now + link_s[task]
            else:
                end = now + alpha + sizes[task] / (bw_worker * slow[it])
            if msg_cpu and (busy[g] or bwd_next[g] >= 0):  # ``cluster.message_cpu_us``
                cpu_debt[g] += msg_cpu
            if shared is not None:  # ``cluster.host_cpu_model``: its CPU on the shared cores
                shared.add(message_work[task], group_size[g])
            if end < min_end:
                end = min_end
            if watch_links:  # ``cluster.overlap_model: integrated``
                link_busy(g, now, end)
            if g == 0:
                comm_down[it] += end - now
            if recorded[it]:
                timeline.append((it, st.name, "pull", labels[task], now, end, sizes[task]))
            st.free_at = end
            st.pending = True
            heappush(evq, (end, next(evseq), pulled_end, (st, it, task, g)))

        def begin_in(
            st: _Station,
            it: int = -1,
            task: int = 0,
            g: int = 0,
            server: int = 0,
            min_end: float = 0.0,
        ) -> None:
            if it < 0:
                st.pending = False
                q = st.queue
                if not q:
                    waiting = push_offers[st.server]
                    if waiting:  # ``cluster.push_rendezvous``: the first sender waiting
                        up, it, task, g = waiting.popleft()
                        start_push(up, st, it, task, g, st.server)
                    return
                if nic_fifo:
                    it, task, g, server, min_end = q.popleft()
                else:
                    _, _, _, it, task, g, server, min_end = heappop(q)
            if task < 0:
                self._begin_migration(st, it, g, server)
                return
            now = loop.now
            if burst:
                end = now + bucket(st, now, group_bytes[g][task], server_bw[server][it], 0.0)
            else:
                end = now + group_bytes[g][task] / server_bw[server][it]
            if end < min_end:
                end = min_end
            st.free_at = end
            busy_s[server][it] += end - now
            if recorded[it]:
                timeline.append((it, st.name, "push", labels[task], now, end, sizes[task]))
            st.pending = True
            heappush(evq, (end, next(evseq), arrived_end, (st, it, task, g, server)))

        def begin_agg(
            st: _Station, it: int = -1, task: int = 0, g: int = 0, server: int = 0
        ) -> None:
            if it < 0:
                st.pending = False
                q = st.queue
                if not q:
                    return
                if cpu_fifo:
                    it, task, g, server = q.popleft()
                else:
                    _, _, _, it, task, g, server = heappop(q)
            now = loop.now
            if async_mode:
                # a group of m identical workers: m pushes, each aggregated alone
                fixed = agg_fixed * group_size[g] if sizes[task] else 0.0
                agg = fixed + group_bytes[g][task] / agg_rate
                end = now + agg * cpu_factor[server][it]
            else:
                end = now + agg_s[task] * cpu_factor[server][it]
            st.free_at = end
            busy_s[server][it] += end - now
            if recorded[it]:
                timeline.append((it, st.name, "aggregate", labels[task], now, end, sizes[task]))
            st.pending = True
            heappush(evq, (end, next(evseq), aggregated_end, (st, it, task, g, server)))

        def begin_out(
            st: _Station, it: int = -1, task: int = 0, g: int = 0, server: int = 0
        ) -> None:
            nonlocal seq
            if it < 0:
                st.pending = False
                q = st.queue
                if not q:
                    return
                if nic_fifo:
                    it, task, g, server = q.popleft()
                else:
                    _, _, _, it, task, g, server = heappop(q)
            if task < 0:
                self._begin_migration(st, it, g, server)
                return
            if rendezvous:
                offer_pull(st, it, task, g, server)
                return
            now = loop.now
            if burst:
                end = now + bucket(st, now, group_bytes[g][task], server_bw[server][it], 0.0)
            else:
                end = now + group_bytes[g][task] / server_bw[server][it]
            k2 = prio[task]  # the priority order's
            for tg in targets[g]:
                dl = downlink[tg]
                if dl.pending or dl.free_at > now:
                    if down_fifo:
                        dl.queue.append((it, task, tg, end))
                    else:
                        if pull_random:
                            perm = random_prio[order_draw[tg]][it]
                            if perm is None:
                                perm = random_order(tg, it)
                            k2 = perm[task_layer[task]]
                        heappush(dl.queue, (it, k2, seq, it, task, tg, end))
                        seq += 1
                    if not dl.pending:
                        dl.pending = True
                        heappush(evq, (dl.free_at, next(evseq), begin_down, (dl,)))
                else:
                    if pull_random and random_prio[order_draw[tg]][it] is None:
                        random_order(tg, it)  # drawn now, as when the key is computed
                    begin_down(dl, it, task, tg, end)
            st.free_at = end
            busy_s[server][it] += end - now
            if recorded[it]:
                timeline.append((it, st.name, "pull", labels[task], now, end, sizes[task]))
            if st.queue:
                st.pending = True
                heappush(evq, (end, next(evseq), begin_out, (st,)))

        def offer_pull(st: _Station, it: int, task: int, g: int, server: int) -> None:
            """``cluster.pull_rendezvous``: server ``server``'s sender (``st``, idle) sends
            ``task``'s pull to group ``g`` (one worker) now if the group's receiver is free,
            else waits for it, taking nothing else meanwhile."""
            dl = downlink[g]
            if not dl.pending and dl.free_at <= loop.now and not offers[g]:
                start_pull(st, dl, it, task, g, server)
            else:
                offers[g].append((st, it, task, server))
                st.free_at = float("inf")  # its queue waits (served when the pull ends)
                st.pending = True

        def start_pull(so: _Station, dl: _Station, it: int, task: int, g: int, server: int) -> None:
            """A rendezvous pull: the server's sender and the group's receiver both held for
            the longer of the two NICs' times (each through its token bucket)."""
            now = loop.now
            size = sizes[task]
            duration = held_s(dl, so, now, it, size, g, server)
            end = now + duration
            if msg_cpu and (busy[g] or bwd_next[g] >= 0):  # ``cluster.message_cpu_us``
                cpu_debt[g] += msg_cpu
            if shared is not None:  # ``cluster.host_cpu_model``: its CPU on the shared cores
                shared.add(message_work[task], group_size[g])
            if watch_links:  # ``cluster.overlap_model: integrated``
                link_busy(g, now, end)
            busy_s[server][it] += duration
            if g == 0:
                comm_down[it] += duration
            if recorded[it]:
                timeline.append((it, so.name, "pull", labels[task], now, end, size))
                timeline.append((it, dl.name, "pull", labels[task], now, end, size))
            so.free_at = dl.free_at = end
            so.pending = dl.pending = True
            heappush(evq, (end, next(evseq), begin_out, (so,)))  # its next pull, if any
            heappush(evq, (end, next(evseq), pulled_end, (dl, it, task, g)))

        def pulled_end(st: _Station, it: int, task: int, g: int) -> None:
            """``task`` of iteration ``it`` is up to date on group ``g``."""
            st.pending = False
            parts = parts_left[g][it]
            layer = task_layer[task]
            left = parts[layer] - 1
            parts[layer] = left
            if left == 0:
                left = layers_left[g][it] - 1
                layers_left[g][it] = left
                synced.append((g, it, layer, loop.now))
                # Behind a global barrier a forward can start only once every layer is in;
                # across it, only a forward of this layer can (one the group is waiting to run).
                if (left == 0 or (cross_barrier and layer in avail[g])) and not busy[g]:
                    try_compute(g)  # ``wake(g)``
            left = round_left[it] - 1
            round_left[it] = left
            if left == 0:
                self._round_done(it)
            if rendezvous:  # the first server waiting for this receiver
                waiting = offers[g]
                if waiting and not st.pending:
                    so, it, task, server = waiting.popleft()
                    start_pull(so, st, it, task, g, server)
                return
            q = st.queue
            if q and not st.pending:
                if down_fifo:
                    it, task, g, min_end = q.popleft()
                else:
                    _, _, _, it, task, g, min_end = heappop(q)
                begin_down(st, it, task, g, min_end)

        def arrived_end(st: _Station, it: int, task: int, g: int, server: int) -> None:
            """A push of ``task`` from group ``g`` is in at ``server``."""
            nonlocal seq
            st.pending = False
            if sync_mode:  # aggregate once every group's push is in (enqueue, inlined)
                if n_groups == 1:
                    complete = True
                else:
                    counts = arrived[it]
                    count = counts[task] + 1
                    counts[task] = count
                    complete = count == n_groups
                if complete:
                    sc = s_cpu[server]
                    if sc.pending or sc.free_at > loop.now:
                        if cpu_fifo:
                            sc.queue.append((it, task, -1, server))
                        else:  # in server priority order
                            heappush(sc.queue, (it, prio[task], seq, it, task, -1, server))
                            seq += 1
                        if not sc.pending:
                            sc.pending = True
                            heappush(evq, (sc.free_at, next(evseq), begin_agg, (sc,)))
                    else:
                        begin_agg(sc, it, task, -1, server)
            else:
                if server_priority:
                    k1, k2 = it, prio[task]
                else:
                    k1 = k2 = 0
                if async_mode:
                    enqueue(s_cpu[server], k1, k2, (it, task, g, server))
                else:  # eager: serve the pull now with the newest complete round
                    staleness.append(float(it - completed_round[task] - 1))
                    enqueue(s_out[server], k1, k2, (it, task, g, server))
                    if n_groups == 1:
                        enqueue(s_cpu[server], k1, k2, (it, task, -1, server))
                    else:  # wait for every group's push
                        counts = arrived[it]
                        count = counts[task] + 1
                        counts[task] = count
                        if count == n_groups:
                            enqueue(s_cpu[server], k1, k2, (it, task, -1, server))
            q = st.queue
            if q and not st.pending:
                if nic_fifo:
                    it, task, g, server, min_end = q.popleft()
                else:
                    _, _, _, it, task, g, server, min_end = heappop(q)
                begin_in(st, it, task, g, server, min_end)
            elif push_rendezvous and not st.pending and push_offers[st.server]:
                begin_in(st)  # the first sender waiting for this receiver

        def aggregated_end(st: _Station, it: int, task: int, g: int, server: int) -> None:
            """The server summed ``task``'s pushes (of one group in async mode, else all)."""
            nonlocal seq
            st.pending = False
            if async_mode:
                self._applied(g, task)
                k1, k2 = (it, prio[task]) if server_priority else (0, 0)
                enqueue(s_out[server], k1, k2, (it, task, g, server))
            else:
                if it > completed_round[task]:
                    completed_round[task] = it
                if sync_mode and rendezvous:  # one pull per worker, in worker order
                    k1, k2 = (it, prio[task]) if server_priority else (0, 0)
                    for tg in range(n_groups):
                        enqueue(s_out[server], k1, k2, (it, task, tg, server))
                elif sync_mode:  # the round's pull (enqueue, inlined)
                    so = s_out[server]
                    if so.pending or so.free_at > loop.now:
                        if nic_fifo:
                            so.queue.append((it, task, -1, server))
                        elif server_priority:
                            heappush(so.queue, (it, prio[task], seq, it, task, -1, server))
                            seq += 1
                        else:
                            heappush(so.queue, (0, 0, seq, it, task, -1, server))
                            seq += 1
                        if not so.pending:
                            so.pending = True
                            heappush(evq, (so.free_at, next(evseq), begin_out, (so,)))
                    else:
                        begin_out(so, it, task, -1, server)
            q = st.queue
            if q and not st.pending:
                if cpu_fifo:
                    it, task, g, server = q.popleft()
                else:
                    _, _, _, it, task, g, server = heappop(q)
                begin_agg(st, it, task, g, server)

        for stations, begin in (
            (uplink, begin_up),
            (downlink, begin_down),
            (s_in, begin_in),
            (s_cpu, begin_agg),
            (s_out, begin_out),
        ):
            for st in stations:
                st.begin = begin
        self._enqueue = enqueue
        # The compute side's hooks (instance attributes shadow the class's methods), bound
        # into its handlers; ``pulled_end`` wakes a group with the handler bound with them.
        self.params_ready = params_ready  # type: ignore[method-assign]
        self.gradient_ready = gradient_ready  # type: ignore[method-assign]
        self._bind_compute()
        try_compute = self.try_compute

    def _applied(self, g: int, task: int) -> None:
        """Async mode: group ``g``'s pushes of ``task`` are applied.

        ASGD staleness of each of the group's m pushes: they are applied one after another
        and each worker pulls right after its own, so every one of them has missed its m-1
        siblings' updates plus what other groups applied since (the same number however
        identical workers are grouped for simulation; n-1 for n in lockstep)."""
        m = self.group_size[g]
        others = max(0, self.version[task] - self.read_version.get((g, task), 0))
        self.staleness.extend([float(others + m - 1)] * m)
        self.version[task] += m
        self.read_version[g, task] = self.version[task]

    def _begin_migration(self, st: _Station, it: int, size: int, server: int) -> None:
        """Moving keys between servers (PSLD): ``size`` bytes for iteration ``it``."""
        now = self.loop.now
        rate = self.bw_server * self.bw_factor_l[server][min(it, self.n_iter - 1)]
        end = now + size / rate
        if self.burst:  # the bucket filled until now, not while the keys pass at the rate
            st.tokens = min(self.burst, st.tokens + (now - st.tokens_at) * rate)
            st.tokens_at = end
        st.free_at = end
        self.busy_s[server][min(it, self.n_iter)] += end - now
        if self.tl_from <= it < self.tl_to:
            self.timeline.append((it, st.name, "migrate", "keys", now, end, size))
        # (``cluster.push_rendezvous``: the senders waiting for this server's receiver)
        waiting = st.server >= 0 and st is self.s_in[st.server] and self.push_offers[st.server]
        if st.queue or waiting:
            st.pending = True
            heappush(self._evq, (end, next(self._evseq), st.begin, (st,)))

    def _round_done(self, it: int) -> None:
        self.round_end[it] = self.loop.now
        controller = self.plan.controller
        if controller is None or it < 1:
            return
        starts = self.iter_start[0]
        if len(starts) <= it:
            return
        iteration_s = self.round_end[it] - self.round_end.get(it - 1, 0.0)
        busy = [row[it] for row in self.busy_s]
        new = controller.observe(it, iteration_s, busy)
        if new is None:
            return
        self._migrate(it, new)

    def _migrate(self, it: int, new: list[int]) -> None:
        moved: dict[tuple[int, int], int] = {}
        for task, (old, dest) in enumerate(zip(self.assign, new, strict=True)):
            if old != dest:
                moved[old, dest] = moved.get((old, dest), 0) + self.sizes[task]
        self.assign = list(new)
        for (src, dst), size in sorted(moved.items()):
            self.migrated_bytes += size
            # A migration is an item of task -1 carrying its bytes as its group; it goes
            # before every transfer waiting at the server.
            self._enqueue(self.s_out[src], -1, -1, (it + 1, -1, size, src))
            self._enqueue(self.s_in[dst], -1, -1, (it + 1, -1, size, dst, 0.0))

    # -- results --------------------------------------------------------------------------
    def straggler_times(self) -> list[float]:
        """Straggler time of every simulated iteration, % of the iteration (sync mode).

        Reconstruction of TicTac's metric (Hashemi et al., MLSys 2019: "the maximum time any
        worker waits, as a percentage of the iteration"; the paper measures it inside
        TensorFlow, which this simulator does not model). A worker's own work in iteration
        ``i`` ends when its last push of ``i`` has left its uplink, ``done_g(i)``: its compute
        and its gradient transfers are then over, and everything until it can go on
        (aggregation, pulls) waits for every worker's pushes. The iteration ends when the
        slowest worker is done, ``E(i) = max_g done_g(i)``, and lasts ``T(i) = E(i) - E(i-1)``
        (``E(-1) = 0``; the mean of ``T`` over many iterations is the iteration time). Worker
        ``g`` waits ``E(i) - done_g(i)``; the straggler time is the largest wait, i.e.
        ``100 * (E(i) - min_g done_g(i)) / T(i)``. Workers of one group run identically, so
        the maximum over groups is the maximum over workers; with one group it is 0. How many
        groups there are is thus part of the model: compare systems at the same
        ``cluster.jitter_groups`` (the workers' number for per-worker noise), since a system
        whose plan splits workers anyway (ps-default's ``order_groups``) would otherwise get
        more independent jitter draws than one that does not.

        In sync mode it lies in [0, 100): ``done_g(i)`` comes after ``g``'s backward of ``i``,
        which needed every key of ``i - 1`` pulled, hence aggregated from every worker, hence
        ``done_g(i) >= E(i-1)``. Cost: O(groups) per iteration, after the run.
        """
        done = self.push_done
        for g, st in enumerate(self.uplink):  # the last iteration has no next one to record it
            done[g][-1] = st.free_at
        out = []
        prev = 0.0
        for i in range(self.n_iter):
            column = [row[i] for row in done]
            end = max(column)
            span = end - prev
            out.append(100.0 * (end - min(column)) / span if span > 0 else 0.0)
            prev = end
        return out

    def result(self) -> SimResult:
        s = self.setup
        first = s.warmup_iterations
        measured = slice(first, first + s.iterations)
        busy = np.asarray(self.busy_s)[:, measured].mean(axis=1)
        extra: dict[str, tuple[float, str]] = {
            "ps_max_busy_s": (float(busy.max()), "s"),
            "ps_mean_busy_s": (float(busy[busy > 0].mean()) if (busy > 0).any() else 0.0, "s"),
            "ps_servers_used": (float(len(set(self.assign))), "servers"),
            "ps_migrated_bytes": (float(self.migrated_bytes), "bytes"),
        }
        if self.plan.server_mode == "sync":  # asynchronous workers do not wait for each other
            straggler = self.straggler_times()[measured]
            extra["straggler_time_pct"] = (float(max(straggler)), "%")
            extra["straggler_time_mean_pct"] = (float(np.mean(straggler)), "%")
        if self.plan.server_mode != "sync":
            stale = np.asarray(self.staleness or [0.0])
            tau_max = float(stale.max())
            scales = [lr_scale(self.plan.lr_rule, x, tau_max) for x in stale.tolist()]
            extra["mean_staleness"] = (float(stale.mean()), "updates")
            extra["max_staleness"] = (tau_max, "updates")
            extra["mean_lr_scale"] = (float(np.mean(scales)), "")
        if self.host_work is not None:  # ``cluster.host_cores``
            # the host's CPU work per iteration, every process together (a real run's
            # ``cpu_cores`` times its iteration time measures the same)
            work = float(np.median(self.host_work[measured]))
            extra["host_cpu_s"] = (work, "s")
            if self.host_floor is not None:
                extra["host_cpu_floor_s"] = (work / self.host_cores, "s")
        controller = self.plan.controller
        if controller is not None:
            extra["psld_changes"] = (float(controller.changes), "changes")
            extra["psld_reverts"] = (float(controller.reverts), "changes")
        return self.base_result(extra, synchronous=self.plan.server_mode == "sync")
