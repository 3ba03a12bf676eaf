"""Schedulers (which job runs) and placement rules (on which servers) of the cluster arena.

Baselines keep the worker and PS counts the trace asks for. Schedulers:

* ``Fifo``: arrival order with head-of-line blocking (YARN/Gavel FIFO).
* ``Srtf``: preemptive shortest remaining time first, remaining time = remaining work at the
  job's isolated speed (an oracle: it knows durations, as in DL2's and Blox's SRTF).
* ``Drf``: dominant resource fairness over users: the next job comes from the user with the
  smallest dominant share of the cluster; jobs that do not fit are skipped (backfilling).
* ``Tiresias``: discretised 2D-LAS (Gu et al., NSDI 2019): queues by attained GPU-time with
  thresholds (default 3600 and 7200 GPU-s... see ``TIRESIAS_THRESHOLDS_S``), FIFO inside a
  queue, preemptive; optional starvation promotion (a job waiting longer than ``promote_knob``
  times its executed time returns to the first queue; 0 = off).

Placement rules return ``{server: [workers, ps]}`` or None:

* ``bin_packing`` (consolidated): the whole job on the fullest server that holds it, else
  spread over the emptiest servers (fewest servers).
* ``load_balance``: every task on the server with the most free GPUs (PSs: most free CPU).
* ``lif`` (least interference first): every task on the feasible server where the job would
  suffer the least interference from the jobs already there.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.traces import Job

from .sim import ClusterSim, Placement

TIRESIAS_THRESHOLDS_S = (3600.0, 7200.0, 18000.0)  # the simulator's MLFQ limits (cluster.md §4.3)


def _fits(free: Sequence[float], demand: Sequence[float], n: int = 1) -> bool:
    return all(free[k] + 1e-9 >= n * demand[k] for k in range(3))


def _tasks(job: Job) -> list[tuple[str, tuple[float, float, float]]]:
    return [("w", job.worker_demand)] * job.workers + [("p", job.ps_demand)] * job.ps


def _greedy(
    sim: ClusterSim, job: Job, score: Callable[[int, str, list[list[float]]], float]
) -> Placement | None:
    """Each task, workers first, on the feasible server with the lowest ``score``."""
    free = [list(f) for f in sim.free]
    placement: Placement = {}
    for kind, demand in _tasks(job):
        best, best_score = -1, 0.0
        for server in sim.worker_servers if kind == "w" else sim.ps_hosts:
            if not _fits(free[server], demand):
                continue
            s = score(server, kind, free)
            if best < 0 or s < best_score:
                best, best_score = server, s
        if best < 0:
            return None
        for k in range(3):
            free[best][k] -= demand[k]
        slot = placement.setdefault(best, [0, 0])
        slot[0 if kind == "w" else 1] += 1
    return placement


def load_balance(sim: ClusterSim, job: Job) -> Placement | None:
    return _greedy(sim, job, lambda s, kind, free: -free[s][0 if kind == "w" else 1])


def lif(sim: ClusterSim, job: Job) -> Placement | None:
    model = job.model

    def score(server: int, kind: str, free: list[list[float]]) -> float:
        hurt = sim.hurt_on[server].get(model, 0.0)  # from the jobs already there
        return hurt - 1e-6 * free[server][0]  # ties: the emptier server

    return _greedy(sim, job, score)


def bin_packing(sim: ClusterSim, job: Job) -> Placement | None:
    pool = sim.config.ps_servers > 0 and job.ps > 0
    if pool:  # workers packed on the GPU servers, PSs packed on the PS pool
        g, c, m = (job.workers * d - 1e-9 for d in job.worker_demand)
    else:
        g, c, m = (x - 1e-9 for x in job_demand(job))
    best, best_left = -1, 0.0
    for server in sim.worker_servers:  # the hot loop of FIFO: kept flat
        free = sim.free[server]
        if free[0] >= g and free[1] >= c and free[2] >= m:
            left = free[0] - g
            if best < 0 or left < best_left:
                best, best_left = server, left
    if best >= 0 and not pool:
        return {best: [job.workers, job.ps]}
    # Spread: the emptiest servers first, each filled before the next, so the job uses as few
    # servers as possible.
    free = {s: list(sim.free[s]) for s in range(len(sim.free))}
    placement: Placement = {}
    if best >= 0:
        placement[best] = [job.workers, 0]
        for k in range(3):
            free[best][k] -= job.workers * job.worker_demand[k]
        tasks = [("p", job.ps_demand)] * job.ps
    else:
        tasks = _tasks(job)
    # Per kind of task: the pool's servers, emptiest first (most free GPUs, or CPU on a PS
    # pool), scanned once: a server too full for a task now stays too full for the same task.
    queues: dict[str, tuple[list[int], list[int]]] = {}
    for kind, demand in tasks:
        pool_servers = sim.worker_servers if kind == "w" else sim.ps_hosts
        used = [s for s in placement if s in pool_servers and _fits(free[s], demand)]
        if used:
            server = used[0]
        else:
            if kind not in queues:
                k = 0 if kind == "w" or not pool else 1
                order = sorted(pool_servers, key=lambda s: (-free[s][k], s))
                queues[kind] = (order, [0])
            order, at = queues[kind]
            while at[0] < len(order) and (
                order[at[0]] in placement or not _fits(free[order[at[0]]], demand)
            ):
                at[0] += 1
            if at[0] == len(order):
                return None
            server = order[at[0]]
        for k in range(3):
            free[server][k] -= demand[k]
        slot = placement.setdefault(server, [0, 0])
        slot[0 if kind == "w" else 1] += 1
    return placement


PLACEMENTS: dict[str, Callable[[ClusterSim, Job], Placement | None]] = {
    "bin-packing": bin_packing,
    "load-balance": load_balance,
    "lif": lif,
}


class Fifo:
    def schedule(self, sim: ClusterSim) -> None:
        while sim.pending and sim.try_start(sim.pending[0]):
            pass


class Drf:
    def schedule(self, sim: ClusterSim) -> None:
        total = list(sim.config.total)
        used: dict[str, list[float]] = {}
        for state in sim.running.values():
            _add(used.setdefault(state.job.user, [0.0, 0.0, 0.0]), state.job)
        queues: dict[str, list[int]] = {}
        for job_id in sim.pending:  # arrival order
            queues.setdefault(sim.states[job_id].job.user, []).append(job_id)

        def dominant(user: str) -> float:
            u = used.get(user, [0.0, 0.0, 0.0])
            return max(u[k] / total[k] for k in range(3) if total[k] > 0)

        heap = [(dominant(user), user) for user in queues]
        heapq.heapify(heap)
        while heap:
            _, user = heapq.heappop(heap)
            for job_id in queues[user]:
                if sim.try_start(job_id):
                    queues[user].remove(job_id)
                    _add(used.setdefault(user, [0.0, 0.0, 0.0]), sim.states[job_id].job)
                    if queues[user]:
                        heapq.heappush(heap, (dominant(user), user))
                    break


def _add(used: list[float], job: Job) -> None:
    for k, amount in enumerate(job_demand(job)):
        used[k] += amount


def job_demand(job: Job, workers: int | None = None, ps: int | None = None) -> list[float]:
    """(GPU, CPU, GB) of all of a job's tasks: the trace's counts, or the ones given."""
    w = job.workers if workers is None else workers
    p = job.ps if ps is None else ps
    return [w * job.worker_demand[k] + p * job.ps_demand[k] for k in range(3)]


def keep_best(sim: ClusterSim, order: list[int], backfill: bool = True) -> None:
    """Keep the first jobs of ``order`` that fit the cluster's GPUs running: preempt the
    others, then start the kept ones in order. With ``backfill`` a job that does not fit does
    not stop the ones after it."""
    capacity = sim.config.servers * sim.config.gpus_per_server
    wanted, used = [], 0.0
    for job_id in order:
        gpus = sim.states[job_id].job.gpus
        if used + gpus <= capacity:
            wanted.append(job_id)
            used += gpus
        elif not backfill:
            break
    keep = set(wanted)
    for job_id in [j for j in sim.running if j not in keep]:
        sim.preempt(job_id)
    for job_id in wanted:
        if job_id not in sim.running and not sim.try_start(job_id) and not backfill:
            break


class _Preemptive:
    """Keep the ``priority``-best jobs running: preempt the others, then start in order."""

    def priority(self, sim: ClusterSim, job_id: int) -> tuple[float, ...]:
        raise NotImplementedError

    def schedule(self, sim: ClusterSim) -> None:
        keep_best(sim, sorted([*sim.running, *sim.pending], key=lambda j: self.priority(sim, j)))
        self.after(sim)

    def after(self, sim: ClusterSim) -> None:
        pass


class Srtf(_Preemptive):
    def priority(self, sim: ClusterSim, job_id: int) -> tuple[float, ...]:
        state = sim.states[job_id]
        left = state.remaining
        if job_id in sim.running:  # progress since the last update
            left -= (sim.now - state.since) * state.rate
        rate = state.work / state.job.duration_s  # the isolated speed
        return (left / rate, state.job.arrival_s, job_id)


class Tiresias(_Preemptive):
    def __init__(
        self, thresholds_s: tuple[float, ...] = TIRESIAS_THRESHOLDS_S, promote_knob: float = 0.0
    ) -> None:
        self.thresholds = tuple(sorted(thresholds_s))
        self.promote_knob = promote_knob
        self._armed = -1.0

    def _attained(self, sim: ClusterSim, job_id: int) -> float:
        state = sim.states[job_id]
        extra = (sim.now - state.since) * state.job.gpus if job_id in sim.running else 0.0
        return state.attained_gpu_s + extra

    def priority(self, sim: ClusterSim, job_id: int) -> tuple[float, ...]:
        state = sim.states[job_id]
        attained = self._attained(sim, job_id)
        queue = sum(attained >= t for t in self.thresholds)
        if self.promote_knob and job_id not in sim.running:
            executed = attained / max(1, state.job.gpus)
            if sim.now - state.queued_since > self.promote_knob * executed > 0:
                queue = 0
        return (queue, state.job.arrival_s, job_id)

    def after(self, sim: ClusterSim) -> None:
        # Wake up when the first running job crosses its next threshold (it may lose its
        # place); one armed timer at a time.
        crossings = []
        for job_id, state in sim.running.items():
            attained = self._attained(sim, job_id)
            above = [t for t in self.thresholds if t > attained]
            if above:
                crossings.append(sim.now + (above[0] - attained) / state.job.gpus)
        if not crossings:
            return
        first = min(crossings)
        if not (sim.now < self._armed <= first):
            sim.timer(first)
            self._armed = first


# -- what the registry builds ---------------------------------------------------------------


@dataclass
class ClusterPolicy:
    """A registry entry of the cluster arena, built: the scheduler and the placement rule."""

    scheduler: Any
    place: Callable[[ClusterSim, Job], Placement | None]
    scheduler_name: str
    placement_name: str


def _policy(scheduler: str, placement: str, **kwargs: Any) -> ClusterPolicy:
    return ClusterPolicy(
        SCHEDULERS[scheduler](**kwargs), PLACEMENTS[placement], scheduler, placement
    )


def fifo(placement: str = "bin-packing") -> ClusterPolicy:
    return _policy("fifo", placement)


def drf(placement: str = "bin-packing") -> ClusterPolicy:
    return _policy("drf", placement)


def srtf(placement: str = "bin-packing") -> ClusterPolicy:
    return _policy("srtf", placement)


def tiresias(
    placement: str = "bin-packing",
    threshold_1_gpu_s: float = TIRESIAS_THRESHOLDS_S[0],
    threshold_2_gpu_s: float = TIRESIAS_THRESHOLDS_S[1],
    threshold_3_gpu_s: float = TIRESIAS_THRESHOLDS_S[2],
    promote_knob: float = 0.0,
) -> ClusterPolicy:
    thresholds = tuple(
        t for t in (threshold_1_gpu_s, threshold_2_gpu_s, threshold_3_gpu_s) if t > 0
    )
    return _policy("tiresias", placement, thresholds_s=thresholds, promote_knob=promote_knob)


def placement_policy(name: str) -> Callable[..., ClusterPolicy]:
    """The factory of a placement entry: the rule under a scheduler chosen by parameter."""

    def build(scheduler: str = "fifo") -> ClusterPolicy:
        return _policy(scheduler, name)

    return build


bin_packing_policy = placement_policy("bin-packing")
load_balance_policy = placement_policy("load-balance")
lif_policy = placement_policy("lif")

SCHEDULERS: dict[str, Callable[..., Any]] = {
    "fifo": Fifo,
    "drf": Drf,
    "srtf": Srtf,
    "tiresias": Tiresias,
}
