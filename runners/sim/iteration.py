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
  is synchronised (cross-barrier) or once every layer of it is (global barrier).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from ..policies.allreduce import CommPlan
from .engine import ComputeJob, ComputeSetup, LayerTimes, SimResult
from .network import RingAllReduce

__all__ = ["ComputeSetup", "LayerTimes", "SimResult", "simulate"]


def simulate(setup: ComputeSetup, network: RingAllReduce, plan: CommPlan) -> SimResult:
    """Run the job for warm-up + measured iterations (+1 to time the last interval)."""
    job = _AllReduceJob(setup, network, plan)
    job.start()
    job.loop.run()
    return job.result()


class _AllReduceJob(ComputeJob):
    def __init__(self, setup: ComputeSetup, network: RingAllReduce, plan: CommPlan) -> None:
        super().__init__(setup)
        self.network = network
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

    def _state(self, it: int) -> None:
        self.grad_groups[it] = [0] * self.n_layers
        self.members_missing[it] = list(self.n_members)
        self.layer_tasks_left[it] = list(self.n_tasks_of_layer)
        self.layers_left[it] = self.n_layers

    # -- hooks ----------------------------------------------------------------------------
    def params_ready(self, g: int, it: int, layer: int) -> bool:
        src = it - 1 - self.delay
        if src < 0:
            return True
        if src not in self.layers_left:
            return False
        if self.cross_barrier:
            return self.layer_tasks_left[src][layer] == 0
        return self.layers_left[src] == 0

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
                cycle = self.plan.fusion_cycle_s
                tick = math.ceil(self.loop.now / cycle - 1e-9) * cycle
                self.tick_scheduled = True
                self.loop.at(max(tick, self.loop.now), self._fusion_tick)
            return
        prio = self.tasks[task_id].priority
        heapq.heappush(self.ready, (it, prio, self.seq, it, (task_id,)))
        self.seq += 1

    def _fusion_tick(self) -> None:
        """Horovod's cycle: fuse what became ready, in ready order, up to the threshold. With
        ``fusion_cycle_blocks`` a cycle waits until the previous cycle's all-reduces are done
        (then starts at once: its cycle time has passed)."""
        if self.plan.fusion_cycle_blocks and self._cycle_running():
            self.tick_waits = True
            return
        self.tick_scheduled = False
        threshold = self.plan.fusion_threshold_bytes
        buffer: list[int] = []
        size = 0
        buffer_it = -1
        for it, task_id in self.pending:
            task_size = self.tasks[task_id].size_bytes
            if buffer and (it != buffer_it or size + task_size > threshold):
                self._push_fused(buffer_it, buffer)
                buffer, size = [], 0
            buffer.append(task_id)
            buffer_it = it
            size += task_size
        if buffer:
            self._push_fused(buffer_it, buffer)
        self.pending = []
        self._dispatch()

    def _cycle_running(self) -> bool:
        return self.channel_busy or self.channel_head < len(self.channel) or bool(self.ready)

    def _push_fused(self, it: int, members: list[int]) -> None:
        heapq.heappush(self.ready, (it, 0, self.seq, it, tuple(members)))
        self.seq += 1

    def _dispatch(self) -> None:
        ready = self.ready
        while ready and self.credit_left > 0:
            *_, it, members = heapq.heappop(ready)
            size = sum(self.tasks[m].size_bytes for m in members)
            self.credit_left -= size
            self.channel.append((it, members, size))
        self._try_channel()

    def _try_channel(self) -> None:
        if self.channel_busy or self.channel_head >= len(self.channel):
            return
        it, members, size = self.channel[self.channel_head]
        self.channel_head += 1
        slow = self.link_factors[it] if it < len(self.link_factors) else 1.0
        if slow != 1.0:
            duration = self.network.time_s(size, self.tasks[members[0]].op, slow)
        elif len(members) == 1:
            duration = self.durations_s[members[0]]
        else:
            duration = self.network.time_s(size, self.tasks[members[0]].op)
        self.channel_busy = True
        self.loop.after(duration, self._task_done, it, members, size, self.loop.now)

    def _task_done(self, it: int, members: tuple[int, ...], size: int, start: float) -> None:
        now = self.loop.now
        self.channel_busy = False
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
        if self.tick_waits and not self._cycle_running():
            self.tick_waits = False  # the blocked cycle starts now (its time has passed)
            self.loop.after(0.0, self._fusion_tick)
        self.wake_all()

    def result(self) -> SimResult:
        return self.base_result()
