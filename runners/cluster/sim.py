"""Event-driven simulator of a shared training cluster.

Servers hold GPUs, CPU cores and memory. Jobs arrive from a trace, wait, are started by a
scheduler on servers chosen by a placement rule, progress at the rate of the throughput model
(``speed``: placement, NIC sharing and interference between co-located jobs) and finish when
their work is done. Work = the trace's duration x the job's isolated speed at its requested
size (Gavel's convention), so a job that runs alone, packed, takes exactly its duration.

Events: arrivals, completions and scheduler timers. All events at one instant are applied
before the scheduler runs once. Whenever placements change on a server, the speeds of every job
on it are recomputed (progress is integrated piecewise at constant speed). Preemption (for the
preemptive schedulers) returns a job to the queue with its progress kept, after an optional
``restart_overhead_s`` of lost time when it starts again.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workloads.traces import Job

from .speed import SpeedModel

Placement = dict[int, list[int]]  # server -> [workers, ps]

_ARRIVE, _FINISH, _TIMER = 0, 1, 2


@dataclass(frozen=True)
class ClusterConfig:
    servers: int = 32
    gpus_per_server: int = 8
    cpus_per_server: float = 64.0
    mem_gb_per_server: float = 512.0
    speed: SpeedModel = field(default_factory=SpeedModel)

    @property
    def capacity(self) -> tuple[float, float, float]:
        return (float(self.gpus_per_server), self.cpus_per_server, self.mem_gb_per_server)


@dataclass
class JobState:
    job: Job
    work: float  # steps
    done: float = 0.0
    rate: float = 0.0
    since: float = 0.0
    placement: Placement = field(default_factory=dict)
    first_start: float | None = None
    finish: float | None = None
    attained_gpu_s: float = 0.0
    version: int = 0
    starts: int = 0
    penalty_s: float = 0.0  # lost time still to serve after a restart
    queued_since: float = 0.0

    @property
    def remaining(self) -> float:
        return max(0.0, self.work - self.done)


@dataclass
class ClusterResult:
    metrics: dict[str, float]
    units: dict[str, str]
    jobs: list[dict[str, Any]]


class ClusterSim:
    """One simulation. ``scheduler`` is called as ``scheduler.schedule(sim)`` after every
    instant with events; it starts and preempts jobs through ``try_start`` and ``preempt``."""

    def __init__(
        self,
        jobs: tuple[Job, ...],
        config: ClusterConfig,
        scheduler: Any,
        place: Callable[[ClusterSim, Job], Placement | None],
        restart_overhead_s: float = 0.0,
    ) -> None:
        if not jobs:
            raise ValueError("the trace has no jobs")
        self.config = config
        self.scheduler = scheduler
        self.place = place
        self.restart_overhead_s = restart_overhead_s
        cap = config.capacity
        for job in jobs:
            for kind, demand in (("worker", job.worker_demand), ("ps", job.ps_demand)):
                if any(d > c for d, c in zip(demand, cap, strict=True)):
                    raise ValueError(
                        f"job {job.id}: a {kind} demands {demand} (GPU, CPU, GB) but a server "
                        f"holds only {cap}"
                    )
            if job.gpus > config.servers * config.gpus_per_server:
                raise ValueError(f"job {job.id}: {job.gpus} GPUs exceed the whole cluster")
        isolated = config.speed.isolated_rate
        self.states = {
            j.id: JobState(
                j,
                work=j.duration_s * isolated(j, config.gpus_per_server),
                queued_since=j.arrival_s,
            )
            for j in jobs
        }
        self.free = [list(cap) for _ in range(config.servers)]
        self.free_gpus = float(config.servers * config.gpus_per_server)
        self.on_server: list[set[int]] = [set() for _ in range(config.servers)]
        self.cross = [0] * config.servers  # jobs sending across servers from each server
        self.pending: list[int] = []  # arrival order
        self.running: dict[int, JobState] = {}
        self.finished: list[JobState] = []
        self.now = 0.0
        self._events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._touched: set[int] = set()
        self.gpu_seconds = 0.0
        self.events_processed = 0
        for j in sorted(jobs, key=lambda j: (j.arrival_s, j.id)):
            self._push(j.arrival_s, _ARRIVE, j.id, 0)

    # -- events -----------------------------------------------------------------------------
    def _push(self, t: float, kind: int, job_id: int, version: int) -> None:
        heapq.heappush(self._events, (t, self._seq, kind, job_id, version))
        self._seq += 1

    def timer(self, t: float) -> None:
        """Ask for a scheduling round at time ``t`` (schedulers with thresholds use this)."""
        if t > self.now:
            self._push(t, _TIMER, -1, 0)

    def run(self) -> ClusterResult:
        wall = time.perf_counter()
        events = self._events
        while events:
            t = events[0][0]
            self.now = t
            while events and events[0][0] == t:
                _, _, kind, job_id, version = heapq.heappop(events)
                self.events_processed += 1
                if kind == _ARRIVE:
                    self.pending.append(job_id)
                elif kind == _FINISH:
                    state = self.running.get(job_id)
                    if state is not None and state.version == version:
                        self._finish(state)
            self.scheduler.schedule(self)
            self._update_rates()
        if self.pending or self.running:
            raise RuntimeError(
                f"{len(self.pending)} jobs never started: the scheduler left them waiting"
            )
        return self._result(time.perf_counter() - wall)

    # -- actions for schedulers -------------------------------------------------------------
    def try_start(self, job_id: int) -> bool:
        """Place and start a pending job now; False (and nothing changes) if it does not fit."""
        state = self.states[job_id]
        if state.job.gpus > self.free_gpus:
            return False
        placement = self.place(self, state.job)
        if placement is None:
            return False
        job = state.job
        for server, (w, p) in placement.items():
            free = self.free[server]
            for k in range(3):
                free[k] -= w * job.worker_demand[k] + p * job.ps_demand[k]
                if free[k] < -1e-9:
                    raise RuntimeError(f"placement overfilled server {server} with job {job_id}")
            self.on_server[server].add(job_id)
            self._touched.add(server)
        if len(placement) > 1:
            for server in placement:
                self.cross[server] += 1
        self.free_gpus -= job.gpus
        self.pending.remove(job_id)
        self.running[job_id] = state
        state.placement = placement
        state.since = self.now
        state.rate = 0.0
        if state.first_start is None:
            state.first_start = self.now
        elif self.restart_overhead_s:
            state.penalty_s += self.restart_overhead_s
        state.starts += 1
        return True

    def preempt(self, job_id: int) -> None:
        state = self.running[job_id]
        self._accrue(state)
        self._release(state)
        state.version += 1
        state.queued_since = self.now
        bisect.insort(self.pending, job_id, key=self._arrival_key)

    def _arrival_key(self, job_id: int) -> tuple[float, int]:
        return (self.states[job_id].job.arrival_s, job_id)

    # -- internals --------------------------------------------------------------------------
    def _accrue(self, state: JobState) -> None:
        elapsed = self.now - state.since
        if elapsed > 0:
            self.gpu_seconds += elapsed * state.job.gpus
            state.attained_gpu_s += elapsed * state.job.gpus
            if state.penalty_s:
                lost = min(elapsed, state.penalty_s)
                state.penalty_s -= lost
                elapsed -= lost
            state.done = min(state.work, state.done + elapsed * state.rate)
        state.since = self.now

    def _release(self, state: JobState) -> None:
        job = state.job
        for server, (w, p) in state.placement.items():
            free = self.free[server]
            for k in range(3):
                free[k] += w * job.worker_demand[k] + p * job.ps_demand[k]
            self.on_server[server].discard(job.id)
            self._touched.add(server)
        if len(state.placement) > 1:
            for server in state.placement:
                self.cross[server] -= 1
        self.free_gpus += job.gpus
        del self.running[job.id]
        state.placement = {}
        state.rate = 0.0

    def _finish(self, state: JobState) -> None:
        self._accrue(state)
        state.done = state.work
        state.finish = self.now
        self._release(state)
        self.finished.append(state)

    def _update_rates(self) -> None:
        if not self._touched:
            return
        affected: set[int] = set()
        for server in self._touched:
            affected |= self.on_server[server]
        self._touched.clear()
        speed = self.config.speed
        for job_id in sorted(affected):
            state = self.running[job_id]
            self._accrue(state)
            placement = [(s, w, p) for s, (w, p) in state.placement.items()]
            neighbours = {
                s: [self.states[o].job.model for o in self.on_server[s] if o != job_id]
                for s, _, _ in placement
            }
            nic_users = {s: self.cross[s] for s, _, _ in placement}
            state.rate = 1.0 / speed.step_time(state.job, placement, nic_users, neighbours)
            state.version += 1
            left = state.penalty_s + state.remaining / state.rate
            self._push(self.now + left, _FINISH, job_id, state.version)

    def _result(self, wall_s: float) -> ClusterResult:
        done = sorted(self.finished, key=lambda s: s.job.id)
        jct = np.array([s.finish - s.job.arrival_s for s in done])
        queueing = np.array([s.first_start - s.job.arrival_s for s in done])
        first = min(s.job.arrival_s for s in done)
        makespan = max(s.finish for s in done) - first
        capacity = self.config.servers * self.config.gpus_per_server
        utility = sum(s.job.utility.value(s.finish - s.job.arrival_s) for s in done)
        metrics = {
            "jobs_finished": float(len(done)),
            "avg_jct_s": float(jct.mean()),
            "p95_jct_s": float(np.percentile(jct, 95)),
            "makespan_s": float(makespan),
            "total_utility": float(utility),
            "avg_queueing_s": float(queueing.mean()),
            "gpu_utilization": float(self.gpu_seconds / (capacity * makespan))
            if makespan > 0
            else 0.0,
            "admitted_fraction": 1.0,
            "preemptions": float(sum(s.starts - 1 for s in done)),
            "sim_wall_s": wall_s,
            "sim_jobs_per_s": len(done) / wall_s if wall_s > 0 else math.inf,
            "sim_events": float(self.events_processed),
        }
        units = {
            "jobs_finished": "jobs",
            "avg_jct_s": "s",
            "p95_jct_s": "s",
            "makespan_s": "s",
            "total_utility": "",
            "avg_queueing_s": "s",
            "gpu_utilization": "",
            "admitted_fraction": "",
            "preemptions": "restarts",
            "sim_wall_s": "s",
            "sim_jobs_per_s": "jobs/s",
            "sim_events": "events",
        }
        jobs = [
            {
                "job": s.job.id,
                "model": s.job.model,
                "arch": s.job.arch,
                "gpus": s.job.gpus,
                "arrival_s": s.job.arrival_s,
                "start_s": s.first_start,
                "finish_s": s.finish,
                "jct_s": s.finish - s.job.arrival_s,
                "duration_s": s.job.duration_s,
                "starts": s.starts,
                "utility": s.job.utility.value(s.finish - s.job.arrival_s),
            }
            for s in done
        ]
        return ClusterResult(metrics, units, jobs)
