"""Event-driven simulator of a shared training cluster.

Servers hold GPUs, CPU cores and memory. Jobs arrive from a trace, wait, are started by a
scheduler on servers chosen by a placement rule, progress at the rate of the throughput model
(``speed``: placement, NIC sharing and interference between co-located jobs) and finish when
their work is done. Work = the trace's duration x the job's isolated speed at its requested
size (Gavel's convention), so a job that runs alone, packed, takes exactly its duration.

Elastic schedulers (OASiS, Optimus, Dorm) may give a job another number of workers and PSs
than its trace asks for (``try_start(job, placement)``, ``resize``); work is therefore counted
in worker-steps (steps x workers at a fixed per-worker batch, i.e. samples), and a job's rate is
``workers / step_time(placement)``. A job whose trace brings a measured speed (``Job.step_rate``)
keeps the model's ratios between placements but runs at the measured absolute speed. Admission
control (OASiS) may ``reject`` a job: it never runs and counts against ``admitted_fraction``.

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
    """``servers`` GPU servers (workers, and PSs when there is no PS pool) and optionally a
    separate pool of ``ps_servers`` CPU machines that host only parameter servers (OASiS'
    model, and PAI's PS jobs). Server ids: GPU servers first, then the PS pool."""

    servers: int = 32
    gpus_per_server: int = 8
    cpus_per_server: float = 64.0
    mem_gb_per_server: float = 512.0
    speed: SpeedModel = field(default_factory=SpeedModel)
    ps_servers: int = 0
    ps_cpus_per_server: float = 32.0
    ps_mem_gb_per_server: float = 128.0

    @property
    def capacity(self) -> tuple[float, float, float]:
        """(GPUs, CPU cores, memory GB) of one GPU server."""
        return (float(self.gpus_per_server), self.cpus_per_server, self.mem_gb_per_server)

    @property
    def ps_capacity(self) -> tuple[float, float, float]:
        """Capacity of a server that may host a PS (a PS-pool machine, else a GPU server)."""
        if self.ps_servers:
            return (0.0, self.ps_cpus_per_server, self.ps_mem_gb_per_server)
        return self.capacity

    @property
    def n_servers(self) -> int:
        return self.servers + self.ps_servers

    @property
    def worker_servers(self) -> range:
        return range(self.servers)

    @property
    def ps_hosts(self) -> range:
        """Servers a PS may go on: the PS pool if there is one, else the GPU servers."""
        if self.ps_servers:
            return range(self.servers, self.servers + self.ps_servers)
        return range(self.servers)

    def capacities(self) -> list[tuple[float, float, float]]:
        return [self.capacity] * self.servers + [self.ps_capacity] * self.ps_servers

    @property
    def total(self) -> tuple[float, float, float]:
        gpu, ps = self.capacity, self.ps_capacity
        n, m = self.servers, self.ps_servers
        return (n * gpu[0] + m * ps[0], n * gpu[1] + m * ps[1], n * gpu[2] + m * ps[2])


@dataclass
class JobState:
    job: Job
    work: float  # worker-steps
    scale: float = 1.0  # measured / modelled isolated speed (1 without a measured speed)
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
    gpus: float = 0.0  # GPUs held now
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
        for job in jobs:
            for kind, demand, cap in (
                ("worker", job.worker_demand, config.capacity),
                ("ps", job.ps_demand, config.ps_capacity),
            ):
                if (kind == "worker" or job.ps) and any(
                    d > c for d, c in zip(demand, cap, strict=True)
                ):
                    raise ValueError(
                        f"job {job.id}: a {kind} demands {demand} (GPU, CPU, GB) but a server "
                        f"holds only {cap}"
                    )
            if job.gpus > config.servers * config.gpus_per_server:
                raise ValueError(f"job {job.id}: {job.gpus} GPUs exceed the whole cluster")
        if len({j.id for j in jobs}) != len(jobs):
            raise ValueError("job ids must be unique")
        isolated = config.speed.isolated_rate
        self.states = {}
        for j in jobs:
            modelled = isolated(j, config.gpus_per_server, config.ps_servers > 0)
            scale = j.step_rate / modelled if j.step_rate else 1.0
            self.states[j.id] = JobState(
                j,
                work=j.duration_s * modelled * scale * j.workers,
                scale=scale,
                queued_since=j.arrival_s,
            )
        n = config.n_servers
        self.free = [list(c) for c in config.capacities()]
        self.free_gpus = float(config.servers * config.gpus_per_server)
        self.on_server: list[set[int]] = [set() for _ in range(n)]
        self.cross = [0] * n  # jobs sending across servers from each server
        self.worker_servers = config.worker_servers
        self.ps_hosts = config.ps_hosts
        # Per server: how much the jobs there slow a job of each model, itself included
        # (kept up to date as jobs come and go; the throughput model subtracts the job's own).
        self.hurt_on: list[dict[str, float]] = [{} for _ in range(n)]
        self._hurt_by = {
            m: {a: row.get(m, 0.0) for a, row in config.speed.interference.items()}
            for m in config.speed.interference
        }
        self.pending: list[int] = []  # arrival order
        self.running: dict[int, JobState] = {}
        self.finished: list[JobState] = []
        self.rejected: list[int] = []
        self.policy_names: dict[str, str] = {}  # for reports: what scheduled and placed
        self.now = 0.0
        self._events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._touched: set[int] = set()
        self.arrived: list[int] = []  # jobs that arrived at this instant (cleared per round)
        self.gpu_seconds = 0.0
        self.resizes = 0
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
                    self.arrived.append(job_id)
                elif kind == _FINISH:
                    state = self.running.get(job_id)
                    if state is not None and state.version == version:
                        self._finish(state)
            self.scheduler.schedule(self)
            self.arrived.clear()
            self._update_rates()
        if self.pending or self.running:
            raise RuntimeError(
                f"{len(self.pending)} jobs never started: the scheduler left them waiting"
            )
        return self._result(time.perf_counter() - wall)

    # -- actions for schedulers -------------------------------------------------------------
    def try_start(self, job_id: int, placement: Placement | None = None) -> bool:
        """Start a pending job now, on ``placement`` (elastic schedulers: any counts of workers
        and PSs) or where the placement rule puts the trace's counts; False (and nothing
        changes) if it does not fit."""
        state = self.states[job_id]
        job = state.job
        if placement is None:
            if job.gpus > self.free_gpus + 1e-9:
                return False
            placement = self.place(self, job)
            if placement is None:
                return False
        elif not self.fits(job, placement):
            return False
        self._occupy(state, placement)
        self.pending.remove(job_id)
        self.running[job_id] = state
        state.since = self.now
        state.rate = 0.0
        if state.first_start is None:
            state.first_start = self.now
        elif self.restart_overhead_s:
            state.penalty_s += self.restart_overhead_s
        state.starts += 1
        return True

    def resize(self, job_id: int, placement: Placement) -> bool:
        """Move a running job to ``placement`` (other counts or servers) now, keeping its
        progress; False (and nothing changes) if it does not fit once the job's own resources
        are freed. A resize costs ``restart_overhead_s`` like a restart (checkpoint/restore)."""
        state = self.running[job_id]
        if same_placement(placement, state.placement):
            return True
        self._accrue(state)
        old = state.placement
        self._vacate(state)
        if not self.fits(state.job, placement):
            self._occupy(state, old)
            return False
        self._occupy(state, placement)
        state.rate = 0.0
        state.version += 1
        if self.restart_overhead_s:
            state.penalty_s += self.restart_overhead_s
        self.resizes += 1
        return True

    def remaining_now(self, state: JobState) -> float:
        """Worker-steps left now, a running job's progress since its last update included
        (restart time it still has to serve is lost first, as in the accrual)."""
        left = state.remaining
        if state.job.id in self.running:
            left -= max(0.0, self.now - state.since - state.penalty_s) * state.rate
        return max(0.0, left)

    def reject(self, job_id: int) -> None:
        """Refuse a pending job (admission control): it never runs."""
        self.pending.remove(job_id)
        self.rejected.append(job_id)

    def fits(self, job: Job, placement: Placement) -> bool:
        """Whether ``placement`` fits in the free resources now (at least one worker; a PS
        job needs at least one PS)."""
        workers = sum(w for w, _ in placement.values())
        ps = sum(p for _, p in placement.values())
        if (
            workers < 1
            or (job.arch == "ps" and ps < 1)
            or min((min(w, p) for w, p in placement.values()), default=0) < 0
        ):
            return False
        for server, (w, p) in placement.items():
            if (w and server not in self.worker_servers) or (p and server not in self.ps_hosts):
                return False
            free = self.free[server]
            for k in range(3):
                if w * job.worker_demand[k] + p * job.ps_demand[k] > free[k] + 1e-9:
                    return False
        return True

    def _occupy(self, state: JobState, placement: Placement) -> None:
        job = state.job
        placement = {s: [w, p] for s, (w, p) in placement.items() if w or p}
        gpus = 0.0
        for server, (w, p) in placement.items():
            free = self.free[server]
            for k in range(3):
                free[k] -= w * job.worker_demand[k] + p * job.ps_demand[k]
                if free[k] < -1e-9:
                    raise RuntimeError(f"placement overfilled server {server} with job {job.id}")
            gpus += w * job.worker_demand[0] + p * job.ps_demand[0]
            self.on_server[server].add(job.id)
            self._touched.add(server)
            hurt = self.hurt_on[server]
            for a, x in self._hurt_by.get(job.model, {}).items():
                hurt[a] = hurt.get(a, 0.0) + x
        if len(placement) > 1:
            for server in placement:
                self.cross[server] += 1
        self.free_gpus -= gpus
        state.gpus = gpus
        state.placement = placement

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
            self.gpu_seconds += elapsed * state.gpus
            state.attained_gpu_s += elapsed * state.gpus
            if state.penalty_s:
                lost = min(elapsed, state.penalty_s)
                state.penalty_s -= lost
                elapsed -= lost
            state.done = min(state.work, state.done + elapsed * state.rate)
        state.since = self.now

    def _vacate(self, state: JobState) -> None:
        job = state.job
        for server, (w, p) in state.placement.items():
            free = self.free[server]
            for k in range(3):
                free[k] += w * job.worker_demand[k] + p * job.ps_demand[k]
            self.on_server[server].discard(job.id)
            self._touched.add(server)
            hurt = self.hurt_on[server]
            if self.on_server[server]:
                for a, x in self._hurt_by.get(job.model, {}).items():
                    hurt[a] -= x
            else:
                hurt.clear()  # empty: exactly zero, no rounding left behind
        if len(state.placement) > 1:
            for server in state.placement:
                self.cross[server] -= 1
        self.free_gpus += state.gpus
        state.placement = {}
        state.gpus = 0.0

    def _release(self, state: JobState) -> None:
        self._vacate(state)
        del self.running[state.job.id]
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
        hurt_on = self.hurt_on
        for job_id in sorted(affected):
            state = self.running[job_id]
            self._accrue(state)
            placement = [(s, w, p) for s, (w, p) in state.placement.items()]
            model = state.job.model
            hurt = {s: hurt_on[s].get(model, 0.0) for s, _, _ in placement}
            nic_users = {s: self.cross[s] for s, _, _ in placement}
            workers = sum(w for _, w, _ in placement)
            step = speed.step_time(state.job, placement, nic_users, hurt=hurt)
            state.rate = workers * state.scale / step
            state.version += 1
            left = state.penalty_s + state.remaining / state.rate
            self._push(self.now + left, _FINISH, job_id, state.version)

    def _result(self, wall_s: float) -> ClusterResult:
        done = sorted(self.finished, key=lambda s: s.job.id)
        total = len(self.states)
        nan = math.nan
        if done:
            jct = np.array([s.finish - s.job.arrival_s for s in done])
            queueing = np.array([s.first_start - s.job.arrival_s for s in done])
            first = min(s.job.arrival_s for s in done)
            makespan = max(s.finish for s in done) - first
        else:  # every job was rejected
            jct = queueing = np.array([nan])
            makespan = 0.0
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
            "admitted_fraction": (total - len(self.rejected)) / total,
            "preemptions": float(sum(s.starts - 1 for s in done)),
            "resizes": float(self.resizes),
            "sim_wall_s": wall_s,
            "sim_jobs_per_s": total / wall_s if wall_s > 0 else math.inf,
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
            "resizes": "resizes",
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
                "admitted": True,
            }
            for s in done
        ]
        for job_id in sorted(self.rejected):
            job = self.states[job_id].job
            jobs.append(
                {
                    "job": job.id,
                    "model": job.model,
                    "arch": job.arch,
                    "gpus": job.gpus,
                    "arrival_s": job.arrival_s,
                    "duration_s": job.duration_s,
                    "starts": 0,
                    "utility": 0.0,
                    "admitted": False,
                }
            )
        return ClusterResult(metrics, units, jobs)


def same_placement(a: Placement, b: Placement) -> bool:
    """Whether two placements put the same tasks on the same servers (empty entries ignored)."""
    return {s: tuple(x) for s, x in a.items() if any(x)} == {
        s: tuple(x) for s, x in b.items() if any(x)
    }
