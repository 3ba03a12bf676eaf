"""Iteration-level simulator of one data-parallel training job in the all-reduce arena.

Resources: one compute stream (forward 0..L-1, then backward L-1..0, per iteration) and one
network channel on which all-reduce tasks run one at a time, FIFO in the order the policy hands
them over. The policy's plan decides the tasks, their priority, the credit (bytes handed to the
channel and not yet completed) and the barrier:

* a task becomes ready when all its member gradients are ready (end of their backward);
* ready tasks wait in a priority queue; while credit remains the best one is handed over;
* the forward of layer i in iteration t+1 starts after the forward of layer i-1 and after layer
  i is synchronised (cross-barrier) or after every layer is (global barrier).

Modelling choices (written down, labelled in reports):
* all ranks run the same per-layer times; a straggler slows the whole synchronous group, so
  compute times are multiplied by the largest straggler slow-down;
* per-op compute times get seeded log-normal jitter with mean 1 and CV ``jitter_cv``;
* optimizer update time is not modelled (0); comm/compute interference is not modelled;
* a task on the channel is never preempted (preemption happens only between tasks).

The steady-state iteration time is the mean interval between successive starts of forward(0)
after the warm-up iterations.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..policies.allreduce import CommPlan
from .core import EventLoop
from .network import RingAllReduce


@dataclass(frozen=True)
class LayerTimes:
    name: str
    fwd_s: float
    bwd_s: float
    grad_bytes: int


@dataclass(frozen=True)
class IterationSetup:
    layers: tuple[LayerTimes, ...]
    network: RingAllReduce
    iterations: int  # measured iterations
    warmup_iterations: int
    samples_per_iteration: int  # global batch (all workers)
    compute_slowdown: float = 1.0
    jitter_cv: float = 0.0
    seed: int = 0


@dataclass
class SimResult:
    metrics: dict[str, float]
    units: dict[str, str]
    series: list[dict[str, Any]]  # one row per iteration
    timeline: list[tuple[int, str, str, str, float, float, int]] = field(repr=False)

    TIMELINE_COLUMNS = ("iteration", "resource", "op", "layer", "start_s", "end_s", "bytes")


def simulate(setup: IterationSetup, plan: CommPlan) -> SimResult:
    """Run the job for warm-up + measured iterations (+1 to time the last interval)."""
    job = _Job(setup, plan)
    job.loop.run()
    return job.result()


class _Job:
    def __init__(self, setup: IterationSetup, plan: CommPlan) -> None:
        self.setup = setup
        self.plan = plan
        self.loop = EventLoop()
        n_layers = len(setup.layers)
        self.n_layers = n_layers
        self.n_iter = setup.warmup_iterations + setup.iterations + 1
        self.durations = self._compute_durations()
        self.tasks_of_layer: list[list[int]] = [[] for _ in range(n_layers)]
        for task_id, task in enumerate(plan.tasks):
            for layer in task.layers:
                self.tasks_of_layer[layer].append(task_id)
        missing = [setup.layers[i].name for i, ts in enumerate(self.tasks_of_layer) if not ts]
        if missing:
            raise ValueError(f"plan leaves layers unsynchronised: {missing[:3]}")
        # Per-iteration state, created lazily as iterations begin.
        self.members_missing: dict[int, list[int]] = {}
        self.layer_tasks_left: dict[int, list[int]] = {}
        self.layers_left: dict[int, int] = {}
        # Compute stream.
        self.cursor = (0, 0)  # (iteration, op index); ops 0..L-1 forward, L..2L-1 backward
        self.compute_busy = False
        self.iter_start: list[float] = []
        self.compute_s = [0.0] * self.n_iter
        # Network channel.
        self.ready: list[tuple[int, int, int, int, int]] = []  # (iter, prio, seq, iter, task)
        self.ready_seq = 0
        self.credit_left = plan.credit_bytes
        self.channel: deque[tuple[int, int]] = deque()
        self.channel_busy = False
        self.comm_s = [0.0] * self.n_iter
        self.timeline: list[tuple[int, str, str, str, float, float, int]] = []
        self._open_iteration(0)
        self.loop.at(0.0, self._try_compute)

    def _compute_durations(self) -> np.ndarray:
        """Per-iteration, per-op compute durations (seeded jitter, straggler factor)."""
        layers = self.setup.layers
        base = np.array([lt.fwd_s for lt in layers] + [lt.bwd_s for lt in reversed(layers)])
        base = base * self.setup.compute_slowdown
        cv = self.setup.jitter_cv
        if cv <= 0:
            return np.tile(base, (self.n_iter, 1))
        sigma = math.sqrt(math.log1p(cv * cv))
        rng = np.random.default_rng(self.setup.seed)
        noise = rng.lognormal(-sigma * sigma / 2, sigma, size=(self.n_iter, base.size))
        return base * noise

    def _open_iteration(self, it: int) -> None:
        self.members_missing[it] = [len(t.layers) for t in self.plan.tasks]
        self.layer_tasks_left[it] = [len(ts) for ts in self.tasks_of_layer]
        self.layers_left[it] = self.n_layers

    # -- compute stream -------------------------------------------------------------------
    def _try_compute(self) -> None:
        it, op = self.cursor
        if self.compute_busy or it >= self.n_iter:
            return
        if op < self.n_layers and it > 0 and not self._params_ready(it - 1, op):
            return  # re-tried when a synchronisation completes
        if op == 0:
            self.iter_start.append(self.loop.now)
            if it not in self.members_missing:
                self._open_iteration(it)
        duration = float(self.durations[it, op])
        self.compute_busy = True
        self.loop.after(duration, self._compute_done, it, op, self.loop.now)

    def _params_ready(self, prev_it: int, layer: int) -> bool:
        if self.plan.cross_barrier:
            return self.layer_tasks_left[prev_it][layer] == 0
        return self.layers_left[prev_it] == 0

    def _compute_done(self, it: int, op: int, start: float) -> None:
        self.compute_busy = False
        self.compute_s[it] += self.loop.now - start
        n = self.n_layers
        if op < n:
            self.timeline.append(
                (it, "compute", "forward", self._name(op), start, self.loop.now, 0)
            )
        else:
            layer = 2 * n - 1 - op
            name = self._name(layer)
            self.timeline.append((it, "compute", "backward", name, start, self.loop.now, 0))
            self._gradient_ready(it, layer)
        self.cursor = (it + 1, 0) if op == 2 * n - 1 else (it, op + 1)
        self._try_compute()

    def _name(self, layer: int) -> str:
        return self.setup.layers[layer].name

    # -- network channel ------------------------------------------------------------------
    def _gradient_ready(self, it: int, layer: int) -> None:
        missing = self.members_missing[it]
        for task_id in self.tasks_of_layer[layer]:
            missing[task_id] -= 1
            if missing[task_id] == 0:
                prio = self.plan.tasks[task_id].priority
                heapq.heappush(self.ready, (it, prio, self.ready_seq, it, task_id))
                self.ready_seq += 1
        self._dispatch()

    def _dispatch(self) -> None:
        while self.ready and self.credit_left > 0:
            *_, it, task_id = heapq.heappop(self.ready)
            self.credit_left -= self.plan.tasks[task_id].size_bytes
            self.channel.append((it, task_id))
        self._try_channel()

    def _try_channel(self) -> None:
        if self.channel_busy or not self.channel:
            return
        it, task_id = self.channel.popleft()
        duration = self.setup.network.time_s(self.plan.tasks[task_id].size_bytes)
        self.channel_busy = True
        self.loop.after(duration, self._task_done, it, task_id, self.loop.now)

    def _task_done(self, it: int, task_id: int, start: float) -> None:
        task = self.plan.tasks[task_id]
        self.channel_busy = False
        self.comm_s[it] += self.loop.now - start
        self.credit_left = min(self.credit_left + task.size_bytes, self.plan.credit_bytes)
        label = self._name(task.layers[0]) + (
            f"+{len(task.layers) - 1}" if len(task.layers) > 1 else ""
        )
        self.timeline.append(
            (it, "network", "allreduce", label, start, self.loop.now, task.size_bytes)
        )
        left = self.layer_tasks_left[it]
        for layer in task.layers:
            left[layer] -= 1
            if left[layer] == 0:
                self.layers_left[it] -= 1
        self._dispatch()
        self._try_compute()

    # -- results --------------------------------------------------------------------------
    def result(self) -> SimResult:
        s = self.setup
        if len(self.iter_start) != self.n_iter:
            raise RuntimeError("simulation stalled: a plan dependency was never satisfied")
        first = s.warmup_iterations
        intervals = np.diff(self.iter_start)[first:]
        measured = slice(first, first + s.iterations)
        iteration_time = float(intervals.mean())
        compute_time = float(np.mean(self.compute_s[measured]))
        comm_time = float(np.mean(self.comm_s[measured]))
        metrics = {
            "iteration_time_s": iteration_time,
            "iteration_time_std_s": float(intervals.std(ddof=1)) if intervals.size > 1 else 0.0,
            "throughput_samples_per_s": s.samples_per_iteration / iteration_time,
            "compute_time_s": compute_time,
            "comm_time_s": comm_time,
            "exposed_comm_s": max(0.0, iteration_time - compute_time),
            "sim_events": float(self.loop.events_processed),
        }
        units = {
            "iteration_time_s": "s",
            "iteration_time_std_s": "s",
            "throughput_samples_per_s": "samples/s",
            "compute_time_s": "s",
            "comm_time_s": "s",
            "exposed_comm_s": "s",
            "sim_events": "events",
        }
        series = [
            {
                "iteration": i,
                "warmup": i < first,
                "start_s": self.iter_start[i],
                "iteration_time_s": self.iter_start[i + 1] - self.iter_start[i],
                "compute_time_s": self.compute_s[i],
                "comm_time_s": self.comm_s[i],
            }
            for i in range(self.n_iter - 1)
        ]
        return SimResult(metrics, units, series, self.timeline)
