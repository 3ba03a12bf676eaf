"""Iteration-level simulator of one data-parallel job in the all-reduce arena.

Resources: the compute stream of each worker group (``engine.ComputeJob``) and one network
channel, the ring, on which collectives run one at a time in the order they were handed over.
The policy's ``CommPlan`` decides the tasks, their priority, the credit, fusion, the barrier
and the delay:

* a task becomes ready when all its member gradients are ready on *every* worker (the ring is
  synchronous), or, for a task with ``after``, when that task completes (DeAR's all-gather
  follows its reduce-scatter);
* with ``fusion_cycle_s`` > 0 ready tasks are not queued at once: every cycle tick (multiples
  of the cycle time, Horovod's background loop) the tasks that became ready are fused in ready
  order into buffers of at most ``fusion_threshold_bytes`` and each buffer is one collective;
* ready tasks wait in a priority queue (iteration first, then priority, then ready order);
  while credit remains the best one is handed to the channel (``credit > 0`` check, so one
  task may overshoot, as in ByteScheduler). A task on the channel is never preempted:
  preemption happens at task (= chunk) boundaries;
* the forward of layer i in iteration t+1 may start once layer i of iteration ``t - delay``
  is synchronised (cross-barrier) or once every layer of it is (global barrier);
* with a ``busy_network`` (CPU collectives sharing the cores with training: ``cluster.
  busy_latency_us`` / ``overlap_comm_slowdown``), a collective progresses at the busy
  network's rate (1 / its time on that network) while a compute op runs and at the idle
  network's otherwise, integrated over its span: one that overlaps computation throughout
  takes the busy network's time, one on idle ranks the idle network's (a reconstruction of
  how the collectives' CPU threads share the cores with training, labelled as such);
* with ``negotiate`` (``cluster.negotiation``: the lab's real engine), a plan that reorders by
  priority (not ``is_fifo``) agrees on each dispatch decision across the ranks, as Horovod's
  coordinator does: a *round* starts when tasks are waiting and credit is left, takes one
  small collective's time (16 bytes, on its own channel beside the gradients'; on the busy
  network when a compute op runs or can start at that instant, decided at the round's
  start), and hands to the queue only the tasks that were ready when it
  started; then the best of the queue go to the channel while credit remains, and the next
  round starts if tasks are still waiting. A plan with fusion cycles (Horovod) negotiates
  once per cycle instead: a cycle with tensors to fuse first agrees on those ready at its
  tick (the same small collective; Horovod's coordinator, whose response cache still costs a
  small all-reduce per cycle), then fuses them; a cycle due meanwhile waits for it;
* with ``collective_cpu_s`` (``cluster.collective_cpu_us``, on the compute setup), every
  collective that starts, a negotiation round's included, takes that much CPU time from the
  op each computing group runs then (``ComputeJob.charge_cpu``); a round's is
  ``negotiation_cpu_s`` instead when set (``cluster.negotiation_cpu_us``);
* with ``burst_bytes`` (``cluster.link_burst_bytes``: the NICs shaped by a token bucket, as
  ``tc htb`` shapes the emulated testbed's), each NIC's bucket fills at the bandwidth up to
  that many bytes while the channel is empty; a collective's bytes per link (``2(n-1)/n`` of
  its size for an all-reduce, times its cost for a split collective) up to the tokens pass at
  once, only the rest at the bandwidth (its latency, and on the busy network the CPU's share
  of its bytes' time, unchanged). The bucket refills while the channel is empty and, during a
  collective, for the part of its span in which the link does not send at the shaped rate
  (its latency, the CPU's share), credited when it ends; always at the plain bandwidth (a NIC
  straggler's lower rate is not taken into account);
* with ``lone`` (``cluster.lone_allreduce``: a lone all-reduce's measured time by size), an
  all-reduce that starts with the channel empty and no other task waiting for it (ready, or
  handed over behind it) takes the points' time for its size (``network.lone_time``) on
  idle ranks, and that times the busy network's alpha-beta time over the idle one's while a
  compute op runs; its bytes still take the bucket's tokens; a NIC straggler's collective
  keeps the alpha-beta time. A negotiation round (its own channel) keeps the alpha-beta
  time: Horovod's rounds run back to back, two messages each, one trip a message, where a
  lone all-reduce's four messages wait a trip each (delay-line traces with 2 ms a way,
  2026-12-07). A reconstruction of a collective run alone (PyTorch's DDP with one bucket a
  step; Horovod's fused all-reduce after its round), labelled as such;
* with ``free_rounds`` (``cluster.round_loop: free``; fusion cycles that negotiate) the cycle's
  rounds run as Horovod's background loop runs them (``RunLoopOnce``), free, not on ticks:
  after a cycle whose collectives the loop ran (``fusion_cycle_blocks``) the next round
  starts when they are done or a cycle time after the last round started, whichever is
  later; otherwise every cycle time or round time, whichever is longer, after the last round
  started; and idle rounds (nothing queued) go on so, unseen. A gradient ready during a round
  waits for the next round, which negotiates it. The idle rounds' period is the round's time
  when the gradient becomes ready (busy or idle network); their CPU is not charged (a
  framework's idle loop: ``background_slowdown``). A reconstruction, labelled as such.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..policies.allreduce import CommPlan, is_fifo
from .engine import ComputeJob, ComputeSetup, LayerTimes, SimResult
from .network import RingAllReduce, lone_time

__all__ = ["ComputeSetup", "LayerTimes", "SimResult", "simulate"]


def simulate(
    setup: ComputeSetup,
    network: RingAllReduce,
    plan: CommPlan,
    busy_network: RingAllReduce | None = None,
    negotiate: bool = False,
    burst_bytes: int = 0,
    lone: tuple[tuple[int, float], ...] = (),
    round_network: RingAllReduce | None = None,
    free_rounds: bool = False,
) -> SimResult:
    """Run the job for warm-up + measured iterations (+1 to time the last interval).
    ``busy_network``: the collectives' cost while the ranks compute (None: ``network``'s);
    ``negotiate``: dispatch decisions of non-FIFO plans cost a negotiation round;
    ``burst_bytes``: the NICs' token bucket (0: none); ``lone``: a lone all-reduce's
    measured ``(bytes, seconds)`` (empty: the alpha-beta time throughout);
    ``round_network``: a negotiation round's cost, busy or idle (None: a collective's);
    ``free_rounds``: fusion cycles' rounds run free, as Horovod's loop runs them (not on
    cycle ticks; with ``negotiate``)."""
    job = _AllReduceJob(
        setup, network, plan, busy_network, negotiate, burst_bytes, lone, round_network,
        free_rounds,
    )  # fmt: skip
    job.start()
    job.loop.run()
    return job.result()


@dataclass(slots=True)
class _Timed:
    """A collective on the channel whose rate follows the compute: the share of its work
    ``left`` (1 = all) since ``since``, at the busy network's rate while ``computing``."""

    it: int
    members: tuple[int, ...]
    size: int
    start: float
    since: float
    computing: bool
    idle_s: float  # its whole time on the idle network
    busy_s: float  # and on the busy one
    left: float = 1.0

    def duration(self) -> float:
        """Its whole time at the current rate."""
        return self.busy_s if self.computing else self.idle_s


class _AllReduceJob(ComputeJob):
    reports_network_changes = True  # the channel turning busy or idle (``network_changed``)

    def __init__(
        self,
        setup: ComputeSetup,
        network: RingAllReduce,
        plan: CommPlan,
        busy_network: RingAllReduce | None = None,
        negotiate: bool = False,
        burst_bytes: int = 0,
        lone: tuple[tuple[int, float], ...] = (),
        round_network: RingAllReduce | None = None,
        free_rounds: bool = False,
    ) -> None:
        if busy_network is not None:
            self.compute_watch = self._compute_changed
        super().__init__(setup)
        self.network = network
        self.busy_network = busy_network
        # The collective on the channel when its rate depends on the compute (busy_network);
        # its end event carries ``channel_token`` (stale once re-timed).
        self.current: _Timed | None = None
        self.channel_token = 0
        self.recheck_due = False
        # Negotiation rounds of reordering plans (fusion cycles: ``negotiate_cycles``).
        self.negotiate = negotiate and plan.fusion_cycle_s <= 0 and not is_fifo(plan)
        # Horovod's cycles: each one with tensors to fuse negotiates first (its coordinator).
        self.negotiate_cycles = negotiate and plan.fusion_cycle_s > 0
        self.cycle_negotiating = False
        # ``free_rounds``: the loop's rounds free-running from ``round_anchor`` (a round's
        # start, from which idle rounds follow one another); when the last round started.
        self.free_rounds = free_rounds and self.negotiate_cycles
        self.round_anchor = 0.0
        self.round_started = -math.inf
        if self.negotiate:  # the instance's dispatch (the default path stays a plain call)
            self._dispatch = self._negotiated_dispatch  # type: ignore[method-assign]
        self.unadmitted: list[tuple[int, int, int, int, tuple[int, ...]]] = []
        self.round_running = False
        self.rounds: Counter[int] = Counter()  # negotiation rounds per iteration (as the engine
        self.last_ready_it = 0  # counts them: the iteration of the last task admitted)
        self.plan = plan
        n = self.n_layers
        self.tasks = plan.tasks
        self.tasks_of_layer: list[list[int]] = [[] for _ in range(n)]
        self.triggered_by_grad: list[list[int]] = [[] for _ in range(n)]
        self.followers: list[list[int]] = [[] for _ in plan.tasks]
        for task_id, task in enumerate(plan.tasks):
            for layer in task.layers:
                if not 0 <= layer < n:
                    raise ValueError(f"plan task {task_id} names layer {layer} outside 0..{n - 1}")
                self.tasks_of_layer[layer].append(task_id)
                if task.after < 0:
                    self.triggered_by_grad[layer].append(task_id)
            if task.after >= 0:
                self.followers[task.after].append(task_id)
        missing = [self.names[i] for i, ts in enumerate(self.tasks_of_layer) if not ts]
        if missing:
            raise ValueError(f"plan leaves layers unsynchronised: {missing[:3]}")
        self.durations_s = [network.time_s(t.size_bytes, t.op) for t in plan.tasks]
        self.busy_durations_s = (
            None
            if busy_network is None
            else [busy_network.time_s(t.size_bytes, t.op) for t in plan.tasks]
        )
        self.n_members = [len(t.layers) if t.after < 0 else 0 for t in plan.tasks]
        self.n_tasks_of_layer = [len(ts) for ts in self.tasks_of_layer]
        # Per-iteration state, created lazily.
        self.grad_groups: dict[int, list[int]] = {}
        self.members_missing: dict[int, list[int]] = {}
        self.layer_tasks_left: dict[int, list[int]] = {}
        self.layers_left: dict[int, int] = {}
        # Network channel.
        self.ready: list[tuple[int, int, int, int, tuple[int, ...]]] = []
        self.seq = 0
        self.credit_left = plan.credit_bytes
        self.channel: list[tuple[int, tuple[int, ...], int]] = []  # (iteration, tasks, bytes)
        self.channel_head = 0
        self.channel_busy = False
        self.comm_s = np.zeros(self.n_iter)
        self.pending: list[tuple[int, int]] = []  # fusion: (iteration, task) in ready order
        self.tick_scheduled = False
        self.tick_waits = False  # fusion_cycle_blocks: a cycle waits for the network
        self.delay = plan.delay
        self.cross_barrier = plan.cross_barrier
        self.link_factors = setup.link_factors  # NIC stragglers: the ring's slowest link
        # The NICs' token bucket: its tokens (bytes per link) when the last collective ended,
        # and when.
        self.burst = float(burst_bytes)
        self.lone = lone
        self.round_network = round_network
        self.tokens = self.burst
        self.tokens_at = 0.0
        self.sending_s = 0.0  # of the collective on the channel: its bytes at the shaped rate
        # ``plan.forward_sync``: the iterations whose forward may start (their blocking
        # collectives done), and per iteration the groups that wait for them.
        self.forward_sync = bool(plan.forward_sync)
        self.forward_sync_bytes = sum(size for _, size in plan.forward_sync)
        self.forward_synced: set[int] = set()
        self.forward_waiting: dict[int, set[int]] = {}

    def _state(self, it: int) -> None:
        self.grad_groups[it] = [0] * self.n_layers
        self.members_missing[it] = list(self.n_members)
        self.layer_tasks_left[it] = list(self.n_tasks_of_layer)
        self.layers_left[it] = self.n_layers

    # -- hooks ----------------------------------------------------------------------------
    def params_ready(self, g: int, it: int, layer: int) -> bool:
        src = it - 1 - self.delay
        if src >= 0:
            if src not in self.layers_left:
                return False
            if self.cross_barrier:
                if self.layer_tasks_left[src][layer] != 0:
                    return False
            elif self.layers_left[src] != 0:
                return False
        if not self.forward_sync or it in self.forward_synced:
            return True
        self._wait_forward_sync(g, it)
        return False

    def _wait_forward_sync(self, g: int, it: int) -> None:
        """Group ``g`` is at iteration ``it``'s forward, its parameters in: it waits for
        ``plan.forward_sync``, whose collectives start once every group is there. They run
        back to back on ranks that all wait (so on the idle network, at the iteration's NIC
        straggler's rate, outside the channel and its token bucket: a reconstruction, with
        the bytes few next to the gradients')."""
        waiting = self.forward_waiting.setdefault(it, set())
        if g in waiting:
            return
        waiting.add(g)
        if len(waiting) == self.n_groups:
            slow = self.link_factors[it] if it < len(self.link_factors) else 1.0
            took = sum(self.network.time_s(size, op, slow) for op, size in self.plan.forward_sync)
            self.loop.after(took, self._forward_synced, it, self.loop.now)

    def _forward_synced(self, it: int, start: float) -> None:
        now = self.loop.now
        self.forward_synced.add(it)
        del self.forward_waiting[it]
        self.comm_s[it] += now - start
        if self.tl_from <= it < self.tl_to:
            size = self.forward_sync_bytes
            self.timeline.append((it, "network", "broadcast", "buffers", start, now, size))
        self.wake_all()

    def network_busy(self, g: int) -> bool:
        return self.channel_busy

    def comm_time(self, it: int) -> float:
        return float(self.comm_s[it])

    def gradient_ready(self, g: int, it: int, layer: int) -> None:
        if it not in self.grad_groups:
            self._state(it)
        counts = self.grad_groups[it]
        counts[layer] += 1
        if counts[layer] < self.n_groups:
            return
        missing = self.members_missing[it]
        for task_id in self.triggered_by_grad[layer]:
            missing[task_id] -= 1
            if missing[task_id] == 0:
                self._task_ready(it, task_id)
        self._dispatch()

    # -- network channel ------------------------------------------------------------------
    def _task_ready(self, it: int, task_id: int) -> None:
        if self.plan.fusion_cycle_s > 0:
            self.pending.append((it, task_id))
            if not self.tick_scheduled:
                self.tick_scheduled = True
                if self.free_rounds and self._cycle_busy():
                    self.tick_waits = True  # the loop's next round: once this cycle is done
                    return
                self.loop.at(self._next_round(), self._fusion_tick)
            return
        prio = self.tasks[task_id].priority
        entry = (it, prio, self.seq, it, (task_id,))
        self.seq += 1
        if self.negotiate:
            self.unadmitted.append(entry)  # admitted by the next negotiation round
            self.last_ready_it = it
        else:
            heapq.heappush(self.ready, entry)

    def _next_round(self) -> float:
        """When the cycle that takes a tensor ready now starts: the next cycle tick, or with
        ``free_rounds`` the loop's first round starting from now on (idle rounds every cycle
        time or round time, whichever is longer, from ``round_anchor``)."""
        now = self.loop.now
        cycle = self.plan.fusion_cycle_s
        if not self.free_rounds:
            return max(now, math.ceil(now / cycle - 1e-9) * cycle)
        anchor = self.round_anchor
        if now <= anchor:
            return anchor
        period = max(cycle, self._round_s())
        return max(now, anchor + math.ceil((now - anchor) / period - 1e-9) * period)

    def _cycle_busy(self) -> bool:
        """Whether the loop is in a cycle: negotiating, or (``fusion_cycle_blocks``) running
        its collectives."""
        return self.cycle_negotiating or (self.plan.fusion_cycle_blocks and self._cycle_running())

    def _loop_free(self) -> None:
        """(``free_rounds``.) The loop's cycle is done: its next round starts a cycle time
        after the last one started, or now, whichever is later; idle rounds follow it."""
        self.round_anchor = max(self.loop.now, self.round_started + self.plan.fusion_cycle_s)
        if self.tick_waits:
            self.tick_waits = False
            self.loop.at(self.round_anchor, self._fusion_tick)

    def _fusion_tick(self) -> None:
        """Horovod's cycle: fuse what became ready, in ready order, up to the threshold. With
        ``fusion_cycle_blocks`` a cycle waits until the previous cycle's all-reduces are done
        (then starts at once: its cycle time has passed). With ``negotiate_cycles`` the cycle
        first agrees on the tensors ready at its start (one small collective, Horovod's
        coordinator), which the next cycle waits for too."""
        if self._cycle_busy():
            self.tick_waits = True
            return
        self.tick_scheduled = False
        entries, self.pending = self.pending, []
        if not entries:
            return
        if self.negotiate_cycles:
            self.cycle_negotiating = True
            self.round_started = self.round_anchor = self.loop.now
            self.charge_cpu(negotiation=True)  # the coordinator's collective
            self.loop.after(self._round_s(), self._cycle_negotiated, entries)
            return
        self._fuse(entries)

    def _cycle_negotiated(self, entries: list[tuple[int, int]]) -> None:
        self.cycle_negotiating = False
        self.rounds[entries[-1][0]] += 1
        self._fuse(entries)
        if self._cycle_busy():  # (its collectives, with ``fusion_cycle_blocks``)
            return
        if self.free_rounds:
            self._loop_free()
        elif self.tick_waits:
            self.tick_waits = False  # a cycle due during the negotiation starts now
            self.loop.after(0.0, self._fusion_tick)

    def _fuse(self, entries: list[tuple[int, int]]) -> None:
        """Fuse a cycle's tensors (ready order) into buffers up to the threshold; dispatch."""
        threshold = self.plan.fusion_threshold_bytes
        buffer: list[int] = []
        size = 0
        buffer_it = -1
        for it, task_id in entries:
            task_size = self.tasks[task_id].size_bytes
            if buffer and (it != buffer_it or size + task_size > threshold):
                self._push_fused(buffer_it, buffer)
                buffer, size = [], 0
            buffer.append(task_id)
            buffer_it = it
            size += task_size
        if buffer:
            self._push_fused(buffer_it, buffer)
        self._dispatch()

    def _cycle_running(self) -> bool:
        return self.channel_busy or self.channel_head < len(self.channel) or bool(self.ready)

    def _push_fused(self, it: int, members: list[int]) -> None:
        heapq.heappush(self.ready, (it, 0, self.seq, it, tuple(members)))
        self.seq += 1

    def _dispatch(self) -> None:
        """Hand the best ready tasks to the channel while credit remains (with negotiation,
        ``_negotiated_dispatch`` replaces this on the instance)."""
        self._issue(self.credit_left)

    def _negotiated_dispatch(self) -> None:
        self._try_channel()  # tasks already handed over go on
        if self.round_running or self.credit_left <= 0 or not (self.unadmitted or self.ready):
            return
        self.round_running = True
        self.charge_cpu(negotiation=True)  # the round's collective
        # What the ranks agree on is what they had when the round started: the tasks ready
        # then, and the credit left then (bytes completed during the round count next round).
        self.loop.after(self._round_s(), self._round_done, len(self.unadmitted), self.credit_left)

    def _round_done(self, admitted: int, credit: float) -> None:
        self.round_running = False
        self.rounds[self.unadmitted[admitted - 1][0] if admitted else self.last_ready_it] += 1
        for entry in self.unadmitted[:admitted]:
            heapq.heappush(self.ready, entry)
        del self.unadmitted[:admitted]
        self._issue(credit)
        self._negotiated_dispatch()

    def _round_s(self) -> float:
        """A negotiation round's time: one small collective, on ``round_network`` where
        given, else on the busy network when a compute op runs or can start now (the
        alpha-beta time, with ``lone`` too)."""
        if self.round_network is not None:
            return self.round_network.time_s(16)
        busy = self.busy_network
        computing = busy is not None and self._computing()
        return (busy if computing else self.network).time_s(16)

    def _busy_ratio(self, network: RingAllReduce, size: int) -> float:
        """``network``'s alpha-beta time of an all-reduce of ``size`` over the idle one's (1
        where that is 0)."""
        idle = self.network.time_s(size)
        return network.time_s(size) / idle if network is not self.network and idle > 0 else 1.0

    def _issue(self, budget: float) -> None:
        """Hand the best ready tasks to the channel while ``budget`` (the credit left, or what
        a negotiation round agreed on) remains."""
        ready = self.ready
        while ready and budget > 0:
            *_, it, members = heapq.heappop(ready)
            size = sum(self.tasks[m].size_bytes for m in members)
            budget -= size
            self.credit_left -= size
            self.channel.append((it, members, size))
        self._try_channel()

    def _try_channel(self) -> None:
        if self.channel_busy or self.channel_head >= len(self.channel):
            return
        it, members, size = self.channel[self.channel_head]
        self.channel_head += 1
        slow = self.link_factors[it] if it < len(self.link_factors) else 1.0
        self.channel_busy = True
        self.network_changed()
        self.charge_cpu()
        if (
            self.lone
            and slow == 1.0
            and self.channel_head == len(self.channel)
            and not self.ready
            and self.tasks[members[0]].op == "allreduce"
        ):
            self._start_lone(it, members, size)
            return
        if self.burst > 0:
            self._start_burst(it, members, size, slow)
            return
        if self.busy_durations_s is not None:
            self._start_timed(it, members, size, slow)
            return
        # ``_duration`` for the plain network, inlined: once per collective on the hot path
        if slow != 1.0:
            duration = self.network.time_s(size, self.tasks[members[0]].op, slow)
        elif len(members) == 1:
            duration = self.durations_s[members[0]]
        else:
            duration = self.network.time_s(size, self.tasks[members[0]].op)
        self.loop.after(duration, self._task_done, it, members, size, self.loop.now)

    def _start_burst(self, it: int, members: tuple[int, ...], size: int, slow: float) -> None:
        """Put a collective on the channel through the NICs' token bucket: the bytes its
        tokens cover take no time (what the shaper would have made them wait); the rest, its
        latency and, on the busy network, the CPU's share of its bytes' time stay."""
        now = self.loop.now
        net = self.network
        rate = net.bandwidth_bytes_per_s
        tokens = min(self.burst, self.tokens + (now - self.tokens_at) * rate)
        op = self.tasks[members[0]].op
        per_link = net.link_bytes(size, op)
        used = min(tokens, per_link)
        self.tokens = tokens - used
        saved = used / (rate * slow)
        self.sending_s = (per_link - used) / (rate * slow)  # the link at the shaped rate
        idle = max(0.0, net.time_s(size, op, slow) - saved)
        if self.busy_network is None:
            self.loop.after(idle, self._task_done, it, members, size, now)
            return
        busy = max(0.0, self.busy_network.time_s(size, op, slow) - saved)
        self._put_timed(it, members, size, idle, busy)

    def _start_lone(self, it: int, members: tuple[int, ...], size: int) -> None:
        """Put a lone all-reduce on the channel (``lone``): the measured time for its size,
        its bytes taking the bucket's tokens (the measurement's bucket was full)."""
        now = self.loop.now
        net = self.network
        idle = lone_time(self.lone, size)
        if self.burst > 0:
            rate = net.bandwidth_bytes_per_s
            tokens = min(self.burst, self.tokens + (now - self.tokens_at) * rate)
            per_link = net.link_bytes(size)
            used = min(tokens, per_link)
            self.tokens = tokens - used
            self.sending_s = min(idle, (per_link - used) / rate)
        if self.busy_network is None:
            self.loop.after(idle, self._task_done, it, members, size, now)
            return
        self._put_timed(it, members, size, idle, idle * self._busy_ratio(self.busy_network, size))

    def _start_timed(self, it: int, members: tuple[int, ...], size: int, slow: float) -> None:
        """Put a collective on the channel whose rate follows the compute (busy network)."""
        assert self.busy_network is not None and self.busy_durations_s is not None
        idle = self._duration(self.network, self.durations_s, members, size, slow)
        busy = self._duration(self.busy_network, self.busy_durations_s, members, size, slow)
        self._put_timed(it, members, size, idle, busy)

    def _put_timed(
        self, it: int, members: tuple[int, ...], size: int, idle: float, busy: float
    ) -> None:
        """The collective on the channel, ``idle`` / ``busy`` long at either rate."""
        now = self.loop.now
        computing = any(self.busy)
        self.current = _Timed(it, members, size, now, now, computing, idle, busy)
        self.channel_token += 1
        self.loop.after(busy if computing else idle, self._channel_end, self.channel_token)

    def _duration(
        self,
        network: RingAllReduce,
        durations: list[float],
        members: tuple[int, ...],
        size: int,
        slow: float,
    ) -> float:
        if slow != 1.0:
            return network.time_s(size, self.tasks[members[0]].op, slow)
        if len(members) == 1:
            return durations[members[0]]
        return network.time_s(size, self.tasks[members[0]].op)

    def _channel_end(self, token: int) -> None:
        if token != self.channel_token or self.current is None:
            return  # re-timed since
        cur, self.current = self.current, None
        self._task_done(cur.it, cur.members, cur.size, cur.start)

    def _compute_changed(self) -> None:
        """(``compute_watch``.) An op started or ended: re-time the collective on the channel
        once everything due at this instant has happened (an op that ends and the next that
        starts at once change nothing)."""
        if self.current is not None and not self.recheck_due:
            self.recheck_due = True
            self.loop.after(0.0, self._recheck)

    def _recheck(self) -> None:
        self.recheck_due = False
        cur = self.current
        if cur is None:
            return
        computing = any(self.busy)
        if computing == cur.computing:
            return
        now = self.loop.now
        was = cur.duration()
        if was > 0:  # (a collective of no bytes on one worker takes no time either way)
            cur.left = max(0.0, cur.left - (now - cur.since) / was)
        cur.since, cur.computing = now, computing
        self.channel_token += 1
        rest = cur.left * cur.duration()
        self.loop.after(rest, self._channel_end, self.channel_token)

    def _computing(self) -> bool:
        """Whether a group computes now: an op running, in the middle of a backward pass, or
        a forward op able to start (its parameters in) at this instant (events due now may
        not have started it yet)."""
        for g in range(self.n_groups):
            if self.busy[g] or self.bwd_next[g] >= 0:
                return True
            it = self.iteration[g]
            if it < self.n_iter and any(self.params_ready(g, it, lay) for lay in self.avail[g]):
                return True
        return False

    def _task_done(self, it: int, members: tuple[int, ...], size: int, start: float) -> None:
        now = self.loop.now
        self.channel_busy = False
        if self.burst > 0:
            # The bucket filled while the link did not send at the shaped rate (the
            # collective's latency, the CPU's share), and fills again from here.
            rate = self.network.bandwidth_bytes_per_s
            idle_link = max(0.0, now - start - self.sending_s)
            self.tokens = min(self.burst, self.tokens + idle_link * rate)
            self.tokens_at = now
        self.comm_s[it] += now - start
        tasks = self.tasks
        self.credit_left = min(self.credit_left + size, self.plan.credit_bytes)
        if self.tl_from <= it < self.tl_to:
            first = tasks[members[0]]
            label = self.names[first.layers[0]]
            n_layers = sum(len(tasks[m].layers) for m in members)
            if n_layers > 1:
                label += f"+{n_layers - 1}"
            self.timeline.append((it, "network", first.op, label, start, now, size))
        left = self.layer_tasks_left[it]
        for m in members:
            for layer in tasks[m].layers:
                left[layer] -= 1
                if left[layer] == 0:
                    self.layers_left[it] -= 1
                    self.synced.append((-1, it, layer, now))
            for follower in self.followers[m]:
                self._task_ready(it, follower)
        if self.channel_head > 4096:  # keep the FIFO list short
            del self.channel[: self.channel_head]
            self.channel_head = 0
        # Choose the next task after everything else due now has happened: a gradient that
        # becomes ready at this very instant competes on priority (slot semantics).
        self.loop.after(0.0, self._dispatch)
        if self.free_rounds:
            if self.plan.fusion_cycle_blocks and not self._cycle_running():
                self._loop_free()
        elif self.tick_waits and not self._cycle_running():
            self.tick_waits = False  # the blocked cycle starts now (its time has passed)
            self.loop.after(0.0, self._fusion_tick)
        self.network_changed()  # after the next collective's start, if one starts now
        self.wake_all()

    def result(self) -> SimResult:
        if not (self.negotiate or self.negotiate_cycles):
            return self.base_result()
        first = self.setup.warmup_iterations
        measured = range(first, first + self.setup.iterations)
        per_iteration = sum(self.rounds[it] for it in measured) / len(measured)
        return self.base_result({"negotiations_per_iteration": (per_iteration, "")})
