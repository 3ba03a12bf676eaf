"""Iteration-level simulator of one data-parallel job in the parameter-server arena.

Resources, each a queue that serves one transfer at a time (priority or arrival order):
the uplink and the downlink of every worker group (each worker has its own NIC, so a group of
m workers moves m copies in parallel), and per parameter server its NIC in, its aggregation CPU
and its NIC out. A key (one whole tensor or one part) travels:

1. **push**: worker uplink (``alpha + S/B_w``) -> server NIC in (``m*S / B_s``, the group's m
   copies). Cut-through: the server may start receiving when the uplink starts; the transfer
   ends no earlier than the uplink does.
2. **aggregate**: once the round's pushes of the key arrived from every group (``sync``), the
   server CPU sums them (``n*S / agg_rate``, times its CPU slow-down).
3. **pull**: server NIC out (``n*S / B_s``) -> every group's downlink (``alpha + S/B_w``),
   cut-through again. The key is then up to date on that group.

``sync-round`` (eager pull): the pull of a group is served right after its push arrived, with
the newest complete round; ``async``: each group's push is aggregated alone and pulled back at
once. PS stragglers scale a server's NIC bandwidth (contention) and CPU time (interference),
possibly only in some iterations. Modelling choices: store-and-forward at the aggregation,
no TCP dynamics, one transfer at a time per NIC direction, one PS per server machine; an item
that reaches an idle resource starts at once, so one that arrives at the very instant the
resource frees may start before a higher-priority one arriving at that same instant.

Worker groups (see ``simulated_groups``): identical workers run as one group with one compute
stream and one jitter draw. ``cluster.jitter_groups`` (default 1) splits the workers of every
system into that many groups with independent compute noise (a modelling assumption: set it
to the number of workers for per-worker noise); a random-order plan splits them by its
``order_groups`` as well, with one order draw per order group.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from heapq import heappop, heappush

import numpy as np

from .. import registry
from ..policies.allreduce import Layer
from ..policies.ps import PSPlan, PSProblem, lr_scale
from ..spec import RunSpec
from .allreduce import compute_setup
from .engine import ComputeJob, ComputeSetup, LayerTimes, SimResult, WorkerGroup

# Station item kinds.
_UP, _IN, _AGG, _OUT, _DOWN, _MIGRATE_OUT, _MIGRATE_IN = range(7)


class _Station:
    """One resource serving one item at a time. ``free_at`` is when the item in service ends;
    ``pending`` says an event is scheduled at ``free_at`` that will serve the queue (a queued
    item always has one). Items whose end has no consequence but freeing the resource (a push
    leaving the uplink, a pull leaving the server, a migration) schedule no event of their own
    when nothing waits behind them: about a third fewer events, same schedule."""

    __slots__ = ("begin", "free_at", "name", "pending", "queue", "server")

    def __init__(
        self, name: str, begin: Callable[[_Station, tuple], None], server: int = -1
    ) -> None:
        self.name = name
        self.begin = begin  # starts an item on this station (``_PSJob._begin_*``)
        self.queue: list[tuple] = []
        self.free_at = 0.0
        self.pending = False
        self.server = server


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
                out.append(WorkerGroup(ws, g.slowdowns))
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
    setup = compute_setup(spec, layers)
    plan = registry.get(spec.system).build(spec.params).plan(build_problem(spec, setup))
    random_order = "random" in (plan.push_order, plan.pull_order)
    groups, order_draw = simulated_groups(
        setup.groups, plan.order_groups if random_order else 1, spec.cluster.jitter_groups
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
        self.pull_priority = plan.pull_order == "priority"
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
        self.uplink = [_Station(f"uplink[{g.label}]", self._begin_up) for g in setup.groups]
        self.downlink = [_Station(f"downlink[{g.label}]", self._begin_down) for g in setup.groups]
        if self.n_groups == 1:
            self.uplink[0].name, self.downlink[0].name = "uplink", "downlink"
        self.s_in = [_Station(f"ps{j}.in", self._begin_in, j) for j in range(n_servers)]
        self.s_cpu = [_Station(f"ps{j}.cpu", self._begin_agg, j) for j in range(n_servers)]
        self.s_out = [_Station(f"ps{j}.out", self._begin_out, j) for j in range(n_servers)]
        self.seq = 0
        self._evq, self._evseq = self.loop.raw()
        self.serve_next_cb = self._serve_next
        self.pulled_cb = self._pulled_end
        self.arrived_cb = self._arrived_end
        self.aggregated_cb = self._aggregated_end
        # Orders: per (order draw, iteration) priority of each task on the worker queues.
        self.order_draw = list(range(self.n_groups)) if order_draw is None else list(order_draw)
        if len(self.order_draw) != self.n_groups:
            raise ValueError(f"order_draw has {len(self.order_draw)} entries, not one per group")
        self.rng = random.Random(spec.seed * 7919 + 17)
        self.random_prio: dict[tuple[int, int], list[int]] = {}
        # Per-iteration state.
        self.assign = [t.server for t in plan.tasks]
        self.assign_of: dict[int, list[int]] = {}
        self.parts_left: dict[tuple[int, int], list[int]] = {}
        self.layers_left: dict[tuple[int, int], int] = {}
        self.arrived: dict[tuple[int, int], int] = {}
        self.round_left: dict[int, int] = {}
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

    # -- per-iteration state ----------------------------------------------------------------
    def _group_state(self, g: int, it: int) -> None:
        if it:
            # The first gradient of ``it``: every push of ``it - 1`` has left the uplink (the
            # forward of ``it`` needed their pulls), and nothing else has used it since.
            self.push_done[g][it - 1] = self.uplink[g].free_at
        self.parts_left[g, it] = list(self.n_parts)
        self.layers_left[g, it] = self.n_layers - len(self.keyless)
        for layer in self.keyless:
            self.synced.append((g, it, layer, self.loop.now))

    def _assignment(self, it: int) -> list[int]:
        a = self.assign_of.get(it)
        if a is None:
            a = self.assign_of[it] = list(self.assign)
            self.round_left[it] = len(self.tasks) * self.n_groups
        return a

    def _worker_key(self, order: str, g: int, it: int, task: int) -> tuple[int, int]:
        if order == "priority":
            return (it, self.priority[task])
        if order == "random":
            return (it, self._random_order(g, it)[self.task_layer[task]])
        return (0, 0)  # arrival order

    def _random_order(self, g: int, it: int) -> list[int]:
        """Group ``g``'s random transfer order in iteration ``it``: each layer's place."""
        draw = self.order_draw[g]
        perm = self.random_prio.get((draw, it))
        if perm is None:
            perm = list(range(self.n_layers))
            self.rng.shuffle(perm)
            self.random_prio[draw, it] = perm
        return perm

    # -- hooks ----------------------------------------------------------------------------
    def params_ready(self, g: int, it: int, layer: int) -> bool:
        src = it - 1
        if src < 0:
            return True
        key = (g, src)
        if key not in self.parts_left:
            return False
        if self.plan.cross_barrier:
            return self.parts_left[key][layer] == 0
        return self.layers_left[key] == 0

    def network_busy(self, g: int) -> bool:
        now = self.loop.now
        return self.uplink[g].free_at > now or self.downlink[g].free_at > now

    def comm_time(self, it: int) -> float:
        """Busy time of the first group's busier NIC direction (push or pull)."""
        return float(max(self.comm_up[it], self.comm_down[it]))

    def gradient_ready(self, g: int, it: int, layer: int) -> None:
        if (g, it) not in self.parts_left:
            self._group_state(g, it)
        assign = self._assignment(it)
        order = self.plan.push_order
        uplink = self.uplink[g]
        tasks = self.tasks_of_layer[layer]
        if order == "priority":
            for task in tasks:
                item = (_UP, it, task, g, assign[task], 0.0)
                self._enqueue(uplink, it, self.priority[task], item)
        elif order == "random":  # every part of a layer has the layer's place in the draw
            k2 = self._random_order(g, it)[layer]
            for task in tasks:
                self._enqueue(uplink, it, k2, (_UP, it, task, g, assign[task], 0.0))
        else:
            for task in tasks:
                self._enqueue(uplink, 0, 0, (_UP, it, task, g, assign[task], 0.0))

    # -- stations -------------------------------------------------------------------------
    # The hot path of the PS arena (several events per key, per group and per iteration): kept
    # flat on purpose. Events go straight onto the loop's heap (``EventLoop.raw``), every kind
    # of end has its own pre-bound callback (no dispatch), and the sort keys are computed
    # inline. A station's queue is ordered by (k1, k2, arrival sequence).
    def _enqueue(self, st: _Station, k1: int, k2: int, item: tuple) -> None:
        if st.pending or st.free_at > self.loop.now:
            heappush(st.queue, (k1, k2, self.seq, item))
            self.seq += 1
            if not st.pending:
                st.pending = True
                heappush(self._evq, (st.free_at, next(self._evseq), self.serve_next_cb, (st,)))
        else:
            st.begin(st, item)

    def _serve_next(self, st: _Station) -> None:
        st.pending = False
        if st.queue:
            st.begin(st, heappop(st.queue)[3])

    # ``_begin_*``: start ``item`` on the idle station ``st`` now, record it, schedule what its
    # end triggers. Each station has the one for its kind of resource (``_Station.begin``).
    def _begin_up(self, st: _Station, item: tuple) -> None:
        _, it, task, g, server, _ = item
        now = self.loop.now
        size = self.sizes[task]
        end = now + (self.alpha + size / self.bw_worker)
        # Cut-through: the server's NIC may start receiving now (``_enqueue``, inlined).
        s_in = self.s_in[server]
        if s_in.pending or s_in.free_at > now:
            if self.server_priority:
                heappush(
                    s_in.queue, (it, self.priority[task], self.seq, (_IN, it, task, g, server, end))
                )
            else:
                heappush(s_in.queue, (0, 0, self.seq, (_IN, it, task, g, server, end)))
            self.seq += 1
            if not s_in.pending:
                s_in.pending = True
                heappush(self._evq, (s_in.free_at, next(self._evseq), self.serve_next_cb, (s_in,)))
        else:
            self._begin_in(s_in, (_IN, it, task, g, server, end))
        if g == 0:
            self.comm_up[it] += end - now
        if self.tl_from <= it < self.tl_to:
            self.timeline.append((it, st.name, "push", self.labels[task], now, end, size))
        st.free_at = end
        if st.queue:
            st.pending = True
            heappush(self._evq, (end, next(self._evseq), self.serve_next_cb, (st,)))

    def _begin_down(self, st: _Station, item: tuple) -> None:
        _, it, task, g, _, min_end = item
        now = self.loop.now
        size = self.sizes[task]
        end = now + (self.alpha + size / self.bw_worker)
        if end < min_end:
            end = min_end
        if g == 0:
            self.comm_down[it] += end - now
        if self.tl_from <= it < self.tl_to:
            self.timeline.append((it, st.name, "pull", self.labels[task], now, end, size))
        st.free_at = end
        st.pending = True
        heappush(self._evq, (end, next(self._evseq), self.pulled_cb, (st, it, task, g)))

    def _begin_in(self, st: _Station, item: tuple) -> None:
        kind, it, task, g, server, min_end = item
        if kind != _IN:
            self._begin_migration(st, item)
            return
        now = self.loop.now
        size = self.sizes[task]
        end = now + self.group_size[g] * size / (self.bw_server * self.bw_factor_l[server][it])
        if end < min_end:
            end = min_end
        st.free_at = end
        self.busy_s[server][it] += end - now
        if self.tl_from <= it < self.tl_to:
            self.timeline.append((it, st.name, "push", self.labels[task], now, end, size))
        st.pending = True
        heappush(self._evq, (end, next(self._evseq), self.arrived_cb, (st, it, task, g, server)))

    def _begin_agg(self, st: _Station, item: tuple) -> None:
        _, it, task, g, server, _ = item
        now = self.loop.now
        size = self.sizes[task]
        m = self.group_size[g] if self.async_mode else self.workers
        end = now + m * size / self.agg_rate * self.cpu_factor_l[server][it]
        st.free_at = end
        self.busy_s[server][it] += end - now
        if self.tl_from <= it < self.tl_to:
            self.timeline.append((it, st.name, "aggregate", self.labels[task], now, end, size))
        st.pending = True
        heappush(self._evq, (end, next(self._evseq), self.aggregated_cb, (st, it, task, g, server)))

    def _begin_out(self, st: _Station, item: tuple) -> None:
        kind, it, task, g, server, _ = item
        if kind != _OUT:
            self._begin_migration(st, item)
            return
        now = self.loop.now
        size = self.sizes[task]
        m = self.workers if g < 0 else self.group_size[g]
        end = now + m * size / (self.bw_server * self.bw_factor_l[server][it])
        if self.pull_priority:
            k2 = self.priority[task]
            for tg in range(self.n_groups) if g < 0 else (g,):
                self._enqueue(self.downlink[tg], it, k2, (_DOWN, it, task, tg, server, end))
        else:
            for tg in range(self.n_groups) if g < 0 else (g,):
                k1, k2 = self._worker_key(self.plan.pull_order, tg, it, task)
                self._enqueue(self.downlink[tg], k1, k2, (_DOWN, it, task, tg, server, end))
        st.free_at = end
        self.busy_s[server][it] += end - now
        if self.tl_from <= it < self.tl_to:
            self.timeline.append((it, st.name, "pull", self.labels[task], now, end, size))
        if st.queue:
            st.pending = True
            heappush(self._evq, (end, next(self._evseq), self.serve_next_cb, (st,)))

    def _begin_migration(self, st: _Station, item: tuple) -> None:
        """Moving keys between servers (PSLD): the bytes are carried in the item's group."""
        _, it, _, size, server, _ = item
        now = self.loop.now
        end = now + size / (self.bw_server * self.bw_factor_l[server][min(it, self.n_iter - 1)])
        st.free_at = end
        self.busy_s[server][min(it, self.n_iter)] += end - now
        if self.tl_from <= it < self.tl_to:
            self.timeline.append((it, st.name, "migrate", "keys", now, end, size))
        if st.queue:
            st.pending = True
            heappush(self._evq, (end, next(self._evseq), self.serve_next_cb, (st,)))

    def _pulled_end(self, st: _Station, it: int, task: int, g: int) -> None:
        """``task`` of iteration ``it`` is up to date on group ``g``."""
        st.pending = False
        parts = self.parts_left[g, it]
        layer = self.task_layer[task]
        parts[layer] -= 1
        if parts[layer] == 0:
            left = self.layers_left[g, it] = self.layers_left[g, it] - 1
            self.synced.append((g, it, layer, self.loop.now))
            # Behind a global barrier a forward can start only once every layer is in; across
            # it, only a forward of this layer can (one the group is waiting to run).
            if left == 0 or (self.cross_barrier and layer in self.avail[g]):
                self.wake(g)
        left = self.round_left[it] = self.round_left[it] - 1
        if left == 0:
            self._round_done(it)
        if st.queue and not st.pending:
            st.begin(st, heappop(st.queue)[3])

    def _arrived_end(self, st: _Station, it: int, task: int, g: int, server: int) -> None:
        """A push of ``task`` from group ``g`` is in at ``server``."""
        st.pending = False
        if self.server_priority:
            k1, k2 = it, self.priority[task]
        else:
            k1 = k2 = 0
        if self.async_mode:
            self._enqueue(self.s_cpu[server], k1, k2, (_AGG, it, task, g, server, 0.0))
        else:
            if not self.sync_mode:  # eager: serve the pull now with the newest complete round
                self.staleness.append(float(it - self.completed_round[task] - 1))
                self._enqueue(self.s_out[server], k1, k2, (_OUT, it, task, g, server, 0.0))
            if self.n_groups == 1:
                self._enqueue(self.s_cpu[server], k1, k2, (_AGG, it, task, -1, server, 0.0))
            else:  # wait for every group's push
                key = (it, task)
                count = self.arrived.get(key, 0) + 1
                if count < self.n_groups:
                    self.arrived[key] = count
                else:
                    del self.arrived[key]
                    self._enqueue(self.s_cpu[server], k1, k2, (_AGG, it, task, -1, server, 0.0))
        if st.queue and not st.pending:
            st.begin(st, heappop(st.queue)[3])

    def _aggregated_end(self, st: _Station, it: int, task: int, g: int, server: int) -> None:
        """The server summed ``task``'s pushes (of one group in async mode, else all)."""
        st.pending = False
        if self.server_priority:
            k1, k2 = it, self.priority[task]
        else:
            k1 = k2 = 0
        if self.async_mode:
            # ASGD staleness of each of the group's m pushes: they are applied one after
            # another and each worker pulls right after its own, so every one of them has missed
            # its m-1 siblings' updates plus what other groups applied since (the same number
            # however identical workers are grouped for simulation; n-1 for n in lockstep).
            m = self.group_size[g]
            others = max(0, self.version[task] - self.read_version.get((g, task), 0))
            self.staleness.extend([float(others + m - 1)] * m)
            self.version[task] += m
            self.read_version[g, task] = self.version[task]
            self._enqueue(self.s_out[server], k1, k2, (_OUT, it, task, g, server, 0.0))
        else:
            if it > self.completed_round[task]:
                self.completed_round[task] = it
            if self.sync_mode:
                self._enqueue(self.s_out[server], k1, k2, (_OUT, it, task, -1, server, 0.0))
        if st.queue and not st.pending:
            st.begin(st, heappop(st.queue)[3])

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
            self._enqueue(self.s_out[src], -1, -1, (_MIGRATE_OUT, it + 1, -1, size, src, 0.0))
            self._enqueue(self.s_in[dst], -1, -1, (_MIGRATE_IN, it + 1, -1, size, dst, 0.0))

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
        controller = self.plan.controller
        if controller is not None:
            extra["psld_changes"] = (float(controller.changes), "changes")
            extra["psld_reverts"] = (float(controller.reverts), "changes")
        return self.base_result(extra, synchronous=self.plan.server_mode == "sync")
