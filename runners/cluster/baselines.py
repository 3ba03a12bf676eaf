"""Tetris, Optimus, Dorm and RRH: the packing, elastic and utility baselines of the cluster arena.

None of the four papers' code is used; each is rebuilt from its description (``research/
cluster.md`` §3.1, ``research/papers-fulltext.md`` §1.8 for OASiS' baselines). Every choice
the papers leave open, or that we made differently, is marked **[ours]** below and is a keyword
parameter of the scheduler and of its factory.

**Tetris** (Grandl et al., "Multi-resource packing for cluster schedulers", SIGCOMM 2014).
Non-preemptive, the trace's worker/PS counts. At every round it repeatedly picks, among the
pending jobs, the one with the highest score and starts it with the placement rule, until no
pending job fits. Score = alignment - eps * remaining work, where

* alignment = dot product of the job's total demand (GPU, CPU, GB of all its workers and PSs)
  and the cluster's free resources, both divided per resource by the cluster totals;
* remaining work = the job's remaining time at its isolated speed x the sum of its normalised
  demand (resource-seconds, Tetris' "remaining work" of a job);
* ``eps = srtf_weight x mean(alignment) / mean(remaining work)`` over the candidates, so the two
  terms weigh the same on average at ``srtf_weight = 1`` (the normalisation of DL2's
  ``tetris_env.py``; the paper combines the two scores with such a weighted sum; the value of its
  multiplier is recalled, not verified: **[ours]** default 1). DL2 *adds* the remaining-work
  term, which favours long jobs; we subtract it, as Tetris prefers jobs with less remaining work
  **[ours]**. ``srtf_weight = 0`` is pure packing.
* **[ours]** the free-resource vector is the cluster's, not one server's: Tetris matches tasks to
  one machine's free resources; here the placement rule picks the servers, so alignment is
  computed against the whole cluster. Ties: arrival order.

**Optimus** (Peng et al., EuroSys 2018; the allocator of ``scheduler/optimus_scheduler.py``).
Elastic. At every round with an arrival or a completion **[ours]: not at every event, to bound
cost** (Optimus re-plans once per time slot) it re-allocates the workers and PSs of every active
job (running and pending), from scratch:

1. in arrival order, every job gets 1 worker (and 1 PS for a PS job) while the cluster's
   aggregate free resources allow (Optimus' starvation guard);
2. then, repeatedly, one more worker or PS goes to the job whose estimated remaining time
   drops the most per unit of resource: ``(T(w, p) - T(w + 1, p)) / share`` (or ``p + 1``),
   ``share`` = the dominant share of one task (demand / cluster total; Optimus divides by the
   absolute amount of the dominant resource, which mixes units **[ours]**); it stops when no
   job gains (gain <= 0) or nothing fits; a job whose next task does not fit stops growing and
   the others go on (Optimus stops the whole loop **[ours]**);
3. ``T(w, p)`` = remaining work / speed, speed from the simulator's own throughput model
   (``SpeedModel.step_time``) on a consolidated placement estimate: the fewest servers whose
   capacity holds the tasks, workers and PSs spread evenly over them (with a PS pool: the
   workers so, the PSs one per pool machine, the simulator's own rule), alone (no NIC sharing,
   no interference). Optimus fits its speed function online from a few measured points; we use
   the model directly, i.e. **an oracle of the fit** (and the remaining work is known exactly:
   an oracle of its convergence estimate). As in Optimus, one task at a time can stop at a local
   optimum (e.g. a job whose next worker would be the first on a second server);
4. caps **[ours]**: workers <= min(``max_workers``, ``worker_factor`` x the trace's request),
   PSs <= min(``max_ps``, ``ps_factor`` x the trace's request);
5. placement (``placement="optimus"``, Optimus' ``__place``): jobs in ascending task count;
   each on the fewest servers that can hold it, servers taken in order of most free GPUs (Optimus
   orders by least CPU used, its bottleneck; GPUs are ours **[ours]**), PSs then workers spread
   round-robin over them (a task skips a full server); with a PS pool the PSs go one per pool
   machine as far as the pool goes. A job that does not fit loses workers one at a time until it
   fits (Optimus places part of it); a job that gets nothing waits (a running one is preempted,
   progress kept). Any rule of ``policies.PLACEMENTS`` may be used instead;
6. ``sticky`` **[ours]**, default on: Optimus restarts every job every slot, which costs
   nothing in its model but ``restart_overhead_s`` here, so a running job keeps its servers,
   adjusted to its new counts with the fewest moves (tasks leave the servers where it has the
   fewest; new ones go to its servers with room first), unless the rule would put it on fewer
   servers; new jobs are placed by the rule in what is left. ``sticky=False`` re-places every
   job from scratch (Optimus' behaviour; many more moves).

**Dorm** (Sun et al., "Dorm: dynamically partitioning cluster resources for distributed ML",
2017). Elastic. At every arrival or completion it recomputes a partition of the cluster among
the active jobs. The paper solves an MILP (maximise utilisation subject to a fairness bound and
an adjustment-overhead bound); **[ours]** we use the greedy it approximates:

1. max-min fairness on the dominant share (progressive filling): in arrival order every job gets
   1 worker (+ PSs at the trace's PS-to-worker ratio, at least 1) while it fits, then the job with
   the smallest dominant share gets one more worker (+ PSs to keep the ratio), until every job is
   at its cap (``max_factor`` x its trace request **[ours]**, default 1: the trace's request is
   the application's maximum) or nothing fits in the aggregate free resources;
2. adjustment overhead: at most ``max_adjust`` running jobs change their allocation per round
   (**[ours]**: default 2; the paper bounds the number of adjusted applications, value unknown):
   the ones whose dominant share is farthest from the fair target; the others keep their counts
   and servers, and the partition is recomputed for the rest (pending jobs starting are not
   adjustments);
3. placement: the placement rule (default bin-packing) applied to the new counts (Dorm's MILP
   places too **[ours]**), with Optimus' ``sticky`` rule above (always on: Dorm minimises
   adjustments).

Fairness is among jobs, unweighted (Dorm weights applications; traces carry no weights).

**RRH** (risk-reward heuristic, OASiS' baseline; the OASiS paper only says "admit if utility
minus the delay cost it imposes exceeds a threshold"; fixed counts). Our reconstruction **[ours]**:

* utility density of a job = ``U(now - arrival + r) / (GPUs x r)``, ``r`` its remaining time at
  its isolated speed (utility per GPU-second if it started now);
* admission, when a job arrives: its expected completion = now + queueing estimate + its
  duration. Queueing estimate (fluid): 0 if the free GPUs hold it and every admitted pending
  job of higher density, else (remaining GPU-seconds of the running jobs + GPU-seconds of the
  admitted pending jobs of higher density) / cluster GPUs. Delay cost = the utility that the
  admitted pending jobs of lower density lose when their own estimate is recomputed with the new
  job ahead of them. Admit iff ``utility - delay cost > admit_threshold`` (default 0: a job
  whose utility is already 0 is rejected), else ``sim.reject``;
* admitted jobs start in order of density; ``backfill`` (default on) lets a job that fits start
  when one of higher density does not; ``preemptive`` (default off; the paper's RRH pauses jobs
  at arrivals/completions) keeps the highest-density jobs that fit in the GPUs running and
  preempts the rest. OASiS places RRH's tasks round-robin; the placement rule here is a
  parameter (default bin-packing).

Placement rules are given a view of the cluster (``_View``) whose free resources are those the
plan leaves, so every rule of ``policies.PLACEMENTS`` (and ``"optimus"``, ``spread_even``) also
works for the elastic schedulers (on a copy of the job with the allocated counts), and every
scheduler here takes any of them. Elastic plans are applied as preemptions (jobs that get
nothing), then resizes in an order where each fits, then starts; resizes that block each other
in a cycle are done as preempt + start (same progress and restart cost; the simulator counts
them under ``preemptions``, rare with ``sticky``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from workloads.traces import Job

from .policies import PLACEMENTS, ClusterPolicy, _fits, job_demand, keep_best
from .sim import ClusterSim, JobState, Placement, same_placement

Vec = list[float]


# -- shared helpers ---------------------------------------------------------------------------


def _needs_ps(job: Job) -> bool:
    return job.arch == "ps"


def _counts(placement: Placement) -> tuple[int, int]:
    return (sum(w for w, _ in placement.values()), sum(p for _, p in placement.values()))


def _arrival(sim: ClusterSim) -> Callable[[int], tuple[float, int]]:
    """Sort key: arrival order (ties: job id), as ``sim.pending``."""
    return lambda job_id: (sim.states[job_id].job.arrival_s, job_id)


def _isolated_rate(state: JobState) -> float:
    """Worker-steps per second at the trace's size, alone and packed (the simulator's rule)."""
    return state.work / state.job.duration_s if state.job.duration_s > 0 else math.inf


def _remaining_time(sim: ClusterSim, state: JobState) -> float:
    """Remaining seconds at the job's isolated speed."""
    rate = _isolated_rate(state)
    return sim.remaining_now(state) / rate if rate > 0 else 0.0


class _Pools:
    """Aggregate free resources of the worker servers and of the PS hosts (one pool when PSs
    share the GPU servers)."""

    def __init__(self, sim: ClusterSim, held: set[int] | None = None) -> None:
        """Free resources if the only running jobs were those in ``held``."""
        caps = sim.config.capacities()
        self.shared = sim.config.ps_servers == 0
        self.w = [sum(caps[s][k] for s in sim.worker_servers) for k in range(3)]
        self.p = (
            self.w if self.shared else [sum(caps[s][k] for s in sim.ps_hosts) for k in range(3)]
        )
        for job_id in held or ():
            state = sim.states[job_id]
            for w, p in state.placement.values():
                for k in range(3):
                    if w:
                        self.w[k] -= w * state.job.worker_demand[k]
                    if p:
                        self.p[k] -= p * state.job.ps_demand[k]

    def take(self, job: Job, workers: int, ps: int) -> bool:
        """Deduct ``workers`` workers and ``ps`` PSs of ``job`` if they fit; else change nothing."""
        wd, pd, fw, fp = job.worker_demand, job.ps_demand, self.w, self.p
        w0, w1, w2 = workers * wd[0], workers * wd[1], workers * wd[2]
        p0, p1, p2 = ps * pd[0], ps * pd[1], ps * pd[2]
        eps = 1e-9
        if self.shared:
            if w0 + p0 > fw[0] + eps or w1 + p1 > fw[1] + eps or w2 + p2 > fw[2] + eps:
                return False
        elif (
            w0 > fw[0] + eps
            or w1 > fw[1] + eps
            or w2 > fw[2] + eps
            or p0 > fp[0] + eps
            or p1 > fp[1] + eps
            or p2 > fp[2] + eps
        ):
            return False
        fw[0] -= w0
        fw[1] -= w1
        fw[2] -= w2
        fp[0] -= p0
        fp[1] -= p1
        fp[2] -= p2
        return True


class _View:
    """What a placement rule reads of the simulator, with the free resources a plan leaves;
    everything else (servers, jobs, interference) is read from the simulator itself."""

    def __init__(self, sim: ClusterSim) -> None:
        self._sim = sim
        self.free = [list(f) for f in sim.free]
        self.free_gpus = sim.free_gpus

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sim, name)

    def _apply(self, job: Job, placement: Placement, sign: float) -> None:
        for server, (w, p) in placement.items():
            free = self.free[server]
            for k in range(3):
                amount = w * job.worker_demand[k] + p * job.ps_demand[k]
                free[k] += sign * amount
                if k == 0:
                    self.free_gpus += sign * amount

    def release(self, state: JobState) -> None:
        self._apply(state.job, state.placement, 1.0)

    def release_placement(self, job: Job, placement: Placement) -> None:
        self._apply(job, placement, 1.0)

    def take(self, job: Job, placement: Placement) -> None:
        self._apply(job, placement, -1.0)


PlaceFn = Callable[[Any, Job, int, int], Placement | None]


def spread_even(
    sim: Any, job: Job, workers: int | None = None, ps: int | None = None
) -> Placement | None:
    """Optimus' placement: the fewest servers that hold the job, servers with the most free GPUs
    first (a PS pool: the most free CPU), the PSs then the workers spread round-robin over them
    (a task skips a server that is full). ``sim`` is a ClusterSim or a ``_View``."""
    w = job.workers if workers is None else workers
    p = job.ps if ps is None else ps
    free = [list(f) for f in sim.free]
    ps_groups = [(1, job.ps_demand, p)] if p else []
    if sim.config.ps_servers and p:
        workers_at = _fewest(free, sim.worker_servers, [(0, job.worker_demand, w)])
        if workers_at is None:
            return None
        ps_at = _fewest(free, sim.ps_hosts, ps_groups, min_servers=p)
        if ps_at is None:
            return None
        return {**workers_at, **ps_at}
    return _fewest(free, sim.worker_servers, [*ps_groups, (0, job.worker_demand, w)])


def _fewest(
    free: list[Vec],
    hosts: range,
    groups: list[tuple[int, tuple[float, float, float], int]],
    min_servers: int = 1,
) -> Placement | None:
    """Place ``groups`` of (slot, demand, count) on the fewest (at least ``min_servers``) of
    ``hosts``, emptiest first, round-robin; deducts from ``free`` on success."""
    order = sorted(hosts, key=lambda s: (-free[s][0], -free[s][1], s))
    need = [sum(n * d[k] for _, d, n in groups) for k in range(3)]
    have = [0.0, 0.0, 0.0]
    for k_servers, server in enumerate(order, start=1):
        for k in range(3):
            have[k] += free[server][k]
        if k_servers < min(min_servers, len(order)) or not _fits(have, need):
            continue
        chosen = order[:k_servers]
        local = {s: list(free[s]) for s in chosen}
        placement: Placement = {}
        ok = True
        for slot, demand, n in groups:
            cursor = 0
            for _ in range(n):
                for step in range(k_servers):
                    s = chosen[(cursor + step) % k_servers]
                    if _fits(local[s], demand):
                        break
                else:
                    ok = False
                    break
                for k in range(3):
                    local[s][k] -= demand[k]
                placement.setdefault(s, [0, 0])[slot] += 1
                cursor = (chosen.index(s) + 1) % k_servers
            if not ok:
                break
        if ok:
            for s, f in local.items():
                free[s][:] = f
            return placement
    return None


def _rule_as_place_fn(rule: Callable[[Any, Job], Placement | None]) -> PlaceFn:
    """A trace-count placement rule used for other counts: it places a copy of the job."""

    def place(view: Any, job: Job, workers: int, ps: int) -> Placement | None:
        if workers != job.workers or ps != job.ps:
            job = dataclasses.replace(job, workers=workers, ps=ps)
        return rule(view, job)

    return place


PLACEMENT_NAMES = ("optimus", *PLACEMENTS)  # what every scheduler here accepts


def _check(name: str) -> None:
    if name not in PLACEMENT_NAMES:
        choices = ", ".join(PLACEMENT_NAMES)
        raise ValueError(f"unknown placement {name!r} (choices: {choices})")


def _place_fn(name: str) -> PlaceFn:
    _check(name)
    if name == "optimus":
        return spread_even
    return _rule_as_place_fn(PLACEMENTS[name])


def _trace_rule(name: str) -> Callable[[ClusterSim, Job], Placement | None]:
    """The placement rule for the trace's counts (what ``sim.place`` is)."""
    _check(name)
    if name == "optimus":
        return lambda sim, job: spread_even(sim, job)
    return PLACEMENTS[name]


def _plan_and_apply(
    sim: ClusterSim,
    alloc: dict[int, tuple[int, int]],
    keep: set[int],
    order: list[int],
    place: PlaceFn,
    sticky: bool,
) -> None:
    """Turn counts into placements and apply them.

    ``alloc``: job -> (workers, ps) for the jobs to (re)place, in ``order``; ``keep``: running
    jobs left exactly as they are. A running job in neither is preempted. A job that does not
    fit loses workers until it fits, else gets nothing.

    ``sticky`` (moves cost restarts, so we avoid needless ones): every running job first holds
    its current servers adjusted to its new counts with the fewest moves (``_shrunk``, then
    ``_grown``; a job that cannot grow there is placed like a new one); then,
    in ``order``, a running job moves only if the rule puts it on fewer servers, and the other
    jobs are placed by the rule in what is left. Without ``sticky`` every job is placed from
    scratch by the rule (Optimus restarts every job every slot)."""
    view = _View(sim)
    plan: dict[int, Placement | None] = {job_id: sim.running[job_id].placement for job_id in keep}
    for job_id, state in sim.running.items():
        if job_id in keep:
            continue
        if (
            sticky
            and job_id in alloc
            and alloc[job_id] == _counts(state.placement)
            and (
                len(state.placement) == 1
                or len(state.placement) <= _min_servers(sim, state.job, *alloc[job_id])
            )
        ):
            plan[job_id] = state.placement  # unchanged and as consolidated as it can be
        else:
            view.release(state)
    held: dict[int, Placement] = {}
    if sticky:
        staying = [j for j in order if j not in plan and j in alloc and j in sim.running]
        for job_id in staying:  # what each keeps of its servers, reserved before any growth
            held[job_id] = _shrunk(sim.running[job_id].placement, *alloc[job_id])
            view.take(sim.states[job_id].job, held[job_id])
        for job_id in staying:
            job = sim.states[job_id].job
            grown = _grown(view, job, held[job_id], *alloc[job_id])
            view.release_placement(job, held[job_id])
            if grown is None:
                del held[job_id]
            else:
                view.take(job, grown)
                held[job_id] = grown
    for job_id in order:
        if job_id in plan or job_id not in alloc:
            continue
        job = sim.states[job_id].job
        w, p = alloc[job_id]
        current = held.get(job_id)
        if current is not None:
            if len(current) <= _min_servers(sim, job, w, p):
                plan[job_id] = current
                continue
            view.release_placement(job, current)
        gpu = job.worker_demand[0]
        if gpu > 0:  # no more workers than the free GPUs hold
            w = min(w, int((view.free_gpus - p * job.ps_demand[0]) / gpu + 1e-9))
        placement = None
        while w >= 1 and placement is None:
            placement = place(view, job, w, p)
            if placement is None and w == 1 and p > 1:
                p = 1
                continue
            w -= 1
        if current is not None and (placement is None or len(current) <= len(placement)):
            placement = current
        if placement is not None:
            view.take(job, placement)
        plan[job_id] = placement
    _apply(sim, plan)


def _shrunk(current: Placement, workers: int, ps: int) -> Placement:
    """``current`` cut down to at most ``workers`` and ``ps``: tasks leave the servers where the
    job has the fewest tasks first."""
    placement = {s: list(x) for s, x in current.items()}
    for slot, target in ((0, workers), (1, ps)):
        have = sum(x[slot] for x in placement.values())
        while have > target:
            server = min(
                (s for s, x in placement.items() if x[slot]),
                key=lambda s: (sum(placement[s]), -s),
            )
            placement[server][slot] -= 1
            have -= 1
    return {s: x for s, x in placement.items() if x[0] or x[1]}


def _grown(view: _View, job: Job, held: Placement, workers: int, ps: int) -> Placement | None:
    """``held`` (already taken in the view) grown to ``workers`` and ``ps``: new tasks go to the
    job's servers with room first, then to the emptiest others; None if they do not fit."""
    placement = {s: list(x) for s, x in held.items()}
    free: dict[int, Vec] = {}
    for slot, target, demand, hosts in (
        (0, workers, job.worker_demand, view.worker_servers),
        (1, ps, job.ps_demand, view.ps_hosts),
    ):
        have = sum(x[slot] for x in placement.values())
        while have < target:
            mine = [s for s in placement if s in hosts]
            for s in mine:
                free.setdefault(s, list(view.free[s]))
            mine = [s for s in mine if _fits(free[s], demand)]
            if mine:
                server = max(mine, key=lambda s: (free[s][0], free[s][1], -s))
            else:
                server, best = -1, (0.0, 0.0)
                for s in hosts:
                    f = free.get(s) or view.free[s]
                    if (
                        s not in placement
                        and _fits(f, demand)
                        and (server < 0 or (f[0], f[1]) > best)
                    ):
                        server, best = s, (f[0], f[1])
                if server < 0:
                    return None
                free.setdefault(server, list(view.free[server]))
            placement.setdefault(server, [0, 0])[slot] += 1
            for k in range(3):
                free[server][k] -= demand[k]
            have += 1
    return placement


def _room(view: _View, job: Job, placement: Placement) -> bool:
    """Whether ``placement`` fits in the view's free resources."""
    for server, (w, p) in placement.items():
        free = view.free[server]
        for k in range(3):
            if w * job.worker_demand[k] + p * job.ps_demand[k] > free[k] + 1e-9:
                return False
    return True


def _apply(sim: ClusterSim, plan: dict[int, Placement | None]) -> None:
    """Preempt, resize, then start, so that every target fits: the plan as a whole fits in the
    cluster once the jobs that move have left their servers. Moves that block each other in a
    cycle are done as preempt + start (the simulator counts them as restarts)."""
    for job_id in list(sim.running):
        if plan.get(job_id) is None:
            sim.preempt(job_id)
    todo = [
        job_id
        for job_id, placement in plan.items()
        if placement is not None
        and job_id in sim.running
        and placement is not sim.running[job_id].placement
        and not same_placement(placement, sim.running[job_id].placement)
    ]
    while todo:
        left = [job_id for job_id in todo if not sim.resize(job_id, plan[job_id])]  # type: ignore[arg-type]
        if len(left) == len(todo):
            break
        todo = left
    for job_id in todo:
        sim.preempt(job_id)
    for job_id, placement in plan.items():
        if placement is not None and job_id not in sim.running:
            sim.try_start(job_id, placement)


class _OnChange:
    """Schedulers that re-plan only at instants with an arrival or a completion."""

    def __init__(self) -> None:
        self._finished = -1
        self._due_sim: ClusterSim | None = None

    def due(self, sim: ClusterSim) -> bool:
        finished = len(sim.finished)
        if sim.arrived or finished != self._finished or sim is not self._due_sim:
            self._due_sim = sim
            self._finished = finished
            return True
        return False


# -- Tetris -----------------------------------------------------------------------------------


class Tetris:
    def __init__(self, srtf_weight: float = 1.0) -> None:
        if srtf_weight < 0:
            raise ValueError("srtf_weight must be >= 0")
        self.srtf_weight = srtf_weight
        self._sim: ClusterSim | None = None
        self._norm: dict[int, np.ndarray] = {}

    def _demand(self, sim: ClusterSim, job: Job) -> np.ndarray:
        vec = self._norm.get(job.id)
        if vec is None:
            total = sim.config.total
            vec = np.array(
                [d / t if t > 0 else 0.0 for d, t in zip(job_demand(job), total, strict=True)]
            )
            self._norm[job.id] = vec
        return vec

    def schedule(self, sim: ClusterSim) -> None:
        if sim is not self._sim:  # a new simulation: per-job caches start afresh
            self._sim, self._norm = sim, {}
        ids = [j for j in sim.pending if sim.states[j].job.gpus <= sim.free_gpus + 1e-9]
        if not ids:
            return
        total = np.array(sim.config.total)
        scale = np.where(total > 0, 1.0 / np.where(total > 0, total, 1.0), 0.0)
        demand = np.array([self._demand(sim, sim.states[j].job) for j in ids])
        gpus = np.array([sim.states[j].job.gpus for j in ids], dtype=float)
        if self.srtf_weight:
            left = np.array([_remaining_time(sim, sim.states[j]) for j in ids])
            work = left * demand.sum(axis=1)
        alive = np.ones(len(ids), dtype=bool)
        while alive.any():
            free = np.asarray(sim.free).sum(axis=0) * scale
            score = demand @ free
            if self.srtf_weight:
                mean_work = work[alive].mean()
                if mean_work > 0:
                    eps = self.srtf_weight * score[alive].mean() / mean_work
                    score = score - eps * work
            score = np.where(alive, score, -np.inf)
            best = int(np.argmax(score))  # ties: the first, i.e. the earliest arrival
            alive[best] = False
            sim.try_start(ids[best])
            alive &= gpus <= sim.free_gpus + 1e-9


# -- Optimus ----------------------------------------------------------------------------------


class Optimus(_OnChange):
    def __init__(
        self,
        placement: str = "optimus",
        worker_factor: float = 2.0,
        max_workers: int = 32,
        ps_factor: float = 2.0,
        max_ps: int = 32,
        sticky: bool = True,
    ) -> None:
        super().__init__()
        if worker_factor <= 0 or ps_factor <= 0 or max_workers < 1 or max_ps < 1:
            raise ValueError("the caps must be positive")
        self.place = _place_fn(placement)
        self.worker_factor = worker_factor
        self.max_workers = max_workers
        self.ps_factor = ps_factor
        self.max_ps = max_ps
        self.sticky = sticky
        self._steps: dict[tuple[Any, ...], float] = {}
        self._sim: ClusterSim | None = None
        self._jobs: dict[int, tuple[Any, ...]] = {}

    # The fitted speed function of Optimus, here the simulator's model (an oracle of the fit).
    def step_time(self, sim: ClusterSim, job: Job, workers: int, ps: int) -> float:
        key = (_speed_key(job), workers, ps)
        step = self._steps.get(key)
        if step is None:
            step = sim.config.speed.step_time(job, _consolidated(sim, job, workers, ps), {}, {})
            self._steps[key] = step
        return step

    def caps(self, job: Job) -> tuple[int, int]:
        workers = max(1, min(self.max_workers, math.floor(self.worker_factor * job.workers)))
        ps = 0
        if _needs_ps(job):
            ps = max(1, min(self.max_ps, math.floor(self.ps_factor * max(1, job.ps))))
        return workers, ps

    def _job(self, sim: ClusterSim, job_id: int) -> tuple[Any, ...]:
        """Per-job constants: caps, 1 / dominant share of a worker and of a PS, whether it has
        PSs, its key in the step-time cache, the job."""
        c = self._jobs.get(job_id)
        if c is None:
            job = sim.states[job_id].job
            total = sim.config.total

            def inv_share(demand: tuple[float, float, float]) -> float:
                share = max((demand[k] / total[k] for k in range(3) if total[k] > 0), default=0)
                return 1.0 / max(share, 1e-12)

            cap_w, cap_p = self.caps(job)
            inv_w, inv_p = inv_share(job.worker_demand), inv_share(job.ps_demand)
            c = (cap_w, cap_p, inv_w, inv_p, cap_p > 0, _speed_key(job), job)
            self._jobs[job_id] = c
        return c

    def allocate(self, sim: ClusterSim) -> dict[int, tuple[int, int]]:
        active = sorted([*sim.running, *sim.pending], key=_arrival(sim))
        pools = _Pools(sim)
        alloc: dict[int, list[int]] = {}
        left: dict[int, float] = {}
        heap: list[tuple[float, float, int, int]] = []

        steps = self._steps

        def push(job_id: int) -> None:
            cap_w, cap_p, inv_w, inv_p, _, skey, job = self._job(sim, job_id)
            w, p = alloc[job_id]
            work = left[job_id]

            def time(w: int, p: int) -> float:
                step = steps.get((skey, w, p))
                if step is None:
                    step = self.step_time(sim, job, w, p)
                return work * step / w

            now = time(w, p)
            best, kind = 0.0, -1
            if w < cap_w:
                best, kind = (now - time(w + 1, p)) * inv_w, 0
            if p and p < cap_p:
                gain = (now - time(w, p + 1)) * inv_p
                if gain > best:
                    best, kind = gain, 1
            if kind >= 0 and best > 0:
                heapq.heappush(heap, (-best, job.arrival_s, job_id, kind))

        refused: set[tuple[Any, ...]] = set()  # tasks that did not fit (the same: skip)
        for job_id in active:
            state = sim.states[job_id]
            job = state.job
            p = 1 if self._job(sim, job_id)[4] else 0
            need = (job.worker_demand, job.ps_demand if p else None)
            if need in refused:
                continue
            if not pools.take(job, 1, p):
                refused.add(need)
                continue
            alloc[job_id] = [1, p]
            left[job_id] = sim.remaining_now(state) / state.scale
            push(job_id)
        while heap:
            _, _, job_id, kind = heapq.heappop(heap)
            job = sim.states[job_id].job
            need = (job.ps_demand if kind else job.worker_demand, kind)
            if need in refused:
                continue
            if pools.take(job, 1 - kind, kind):
                alloc[job_id][kind] += 1
                push(job_id)
            else:
                refused.add(need)
        return {job_id: (w, p) for job_id, (w, p) in alloc.items()}

    def schedule(self, sim: ClusterSim) -> None:
        if sim is not self._sim:  # a new simulation: per-job and speed caches start afresh
            self._sim, self._jobs, self._steps = sim, {}, {}
        if not self.due(sim):
            return
        alloc = self.allocate(sim)
        key = _arrival(sim)
        order = sorted(alloc, key=lambda j: (sum(alloc[j]), key(j)))
        _plan_and_apply(sim, alloc, set(), order, self.place, self.sticky)


def _speed_key(job: Job) -> tuple[Any, ...]:
    """What the throughput model and the consolidated estimate read of a job."""
    return (job.model, job.arch, job.ps > 0, job.worker_demand, job.ps_demand)


_MIN_SERVERS: dict[tuple[Any, ...], int] = {}


def _min_servers(sim: Any, job: Job, workers: int, ps: int) -> int:
    """Servers an empty cluster needs for ``workers`` and ``ps`` of ``job``."""
    key = (sim.config.capacity, sim.config.ps_capacity, sim.config.ps_servers, *_speed_key(job))
    key = (*key, workers, ps)
    n = _MIN_SERVERS.get(key)
    if n is None:
        n = len(_consolidated(sim, job, workers, ps))
        if len(_MIN_SERVERS) < 100_000:
            _MIN_SERVERS[key] = n
    return n


def _consolidated(sim: Any, job: Job, workers: int, ps: int) -> list[tuple[int, int, int]]:
    """Where Optimus would put ``workers`` and ``ps`` on an empty cluster: the fewest servers
    that hold them, tasks spread evenly (the PSs over the PS pool if there is one)."""
    config = sim.config
    pool = config.ps_servers > 0 and ps > 0

    def servers_for(demand: Vec, cap: tuple[float, float, float], limit: int) -> int:
        n = max((math.ceil(demand[k] / cap[k] - 1e-9) for k in range(3) if cap[k] > 0), default=1)
        return max(1, min(limit, n))

    if pool:  # the PSs one per machine of the pool, as far as it goes (the simulator's rule)
        k = servers_for(job_demand(job, workers, 0), config.capacity, workers)
        kp = max(
            min(ps, config.ps_servers),
            servers_for(job_demand(job, 0, ps), config.ps_capacity, ps),
        )
    else:
        k = servers_for(job_demand(job, workers, ps), config.capacity, max(1, workers))
        kp = 0
    out = [[s, workers // k + (s < workers % k), 0] for s in range(k)]
    if pool:
        out += [[k + s, 0, ps // kp + (s < ps % kp)] for s in range(kp)]
    else:
        for s in range(k):
            out[s][2] = ps // k + (s < ps % k)
    return [(s, w, p) for s, w, p in out]


# -- Dorm -------------------------------------------------------------------------------------


class Dorm(_OnChange):
    def __init__(
        self, placement: str = "bin-packing", max_factor: float = 1.0, max_adjust: int = 2
    ) -> None:
        super().__init__()
        if max_factor <= 0 or max_adjust < 0:
            raise ValueError("max_factor must be > 0 and max_adjust >= 0")
        self.place = _place_fn(placement)
        self.max_factor = max_factor
        self.max_adjust = max_adjust

    def cap(self, job: Job) -> int:
        return max(1, math.floor(self.max_factor * job.workers + 1e-9))

    @staticmethod
    def ps_for(job: Job, workers: int) -> int:
        if not _needs_ps(job):
            return 0
        return max(1, math.ceil(workers * job.ps / max(1, job.workers) - 1e-9))

    @staticmethod
    def share(total: tuple[float, ...], job: Job, workers: int, ps: int) -> float:
        demand = job_demand(job, workers, ps)
        return max((demand[k] / total[k] for k in range(3) if total[k] > 0), default=0.0)

    def fill(self, sim: ClusterSim, jobs: list[int], pools: _Pools) -> dict[int, tuple[int, int]]:
        """Max-min fair (progressive filling of the dominant share) counts for ``jobs``."""
        total = sim.config.total
        alloc: dict[int, tuple[int, int]] = {}
        heap: list[tuple[float, float, int]] = []
        refused: set[tuple[Any, ...]] = set()  # increments that did not fit (same: skip)
        for job_id in jobs:
            job = sim.states[job_id].job
            p = self.ps_for(job, 1)
            need = (job.worker_demand, job.ps_demand, p)
            if need in refused:
                continue
            if not pools.take(job, 1, p):
                refused.add(need)
                continue
            alloc[job_id] = (1, p)
            if self.cap(job) > 1:
                heap.append((self.share(total, job, 1, p), job.arrival_s, job_id))
        heapq.heapify(heap)
        while heap:
            _, arrival, job_id = heapq.heappop(heap)
            job = sim.states[job_id].job
            w, p = alloc[job_id]
            p2 = self.ps_for(job, w + 1)
            need = (job.worker_demand, job.ps_demand, p2 - p)
            if need in refused:
                continue
            if not pools.take(job, 1, p2 - p):
                refused.add(need)
                continue  # saturated: the others go on filling
            alloc[job_id] = (w + 1, p2)
            if w + 1 < self.cap(job):
                heapq.heappush(heap, (self.share(total, job, w + 1, p2), arrival, job_id))
        return alloc

    def schedule(self, sim: ClusterSim) -> None:
        if not self.due(sim):
            return
        total = sim.config.total
        key = _arrival(sim)
        active = sorted([*sim.running, *sim.pending], key=key)
        target = self.fill(sim, active, _Pools(sim))
        # Adjustment overhead: only the max_adjust running jobs farthest from the target move.
        moves = []
        for job_id, state in sim.running.items():
            now = _counts(state.placement)
            goal = target.get(job_id, (0, 0))
            if goal != now:
                gap = abs(self.share(total, state.job, *goal) - self.share(total, state.job, *now))
                moves.append((-gap, key(job_id), job_id))
        if len(moves) <= self.max_adjust:  # every move allowed: the fair partition itself
            keep = {job_id for job_id in sim.running if job_id in target} - {
                job_id for _, _, job_id in moves
            }
            alloc = {j: c for j, c in target.items() if j not in keep}
        else:
            moves.sort()
            moving = {job_id for _, _, job_id in moves[: self.max_adjust]}
            keep = {job_id for job_id in sim.running if job_id not in moving}
            alloc = self.fill(sim, [j for j in active if j not in keep], _Pools(sim, held=keep))
        order = [j for j in active if j in alloc]
        _plan_and_apply(sim, alloc, keep, order, self.place, sticky=True)


# -- RRH --------------------------------------------------------------------------------------


class Rrh:
    def __init__(
        self, admit_threshold: float = 0.0, preemptive: bool = False, backfill: bool = True
    ) -> None:
        self.admit_threshold = admit_threshold
        self.preemptive = preemptive
        self.backfill = backfill
        self.admitted: list[int] = []  # in admission order (for tests and reports)
        self._sim: ClusterSim | None = None

    @staticmethod
    def density(sim: ClusterSim, job_id: int) -> float:
        state = sim.states[job_id]
        job = state.job
        left = _remaining_time(sim, state)
        value = job.utility.value(sim.now - job.arrival_s + left)
        return value / max(job.gpus * left, 1e-9)

    def _key(self, sim: ClusterSim, job_id: int) -> tuple[float, float, int]:
        return (-self.density(sim, job_id), *_arrival(sim)(job_id))

    def admit(self, sim: ClusterSim, job_id: int, queue: list[int]) -> bool:
        """Whether to admit ``job_id`` given the admitted pending jobs ``queue``."""
        capacity = float(sim.config.servers * sim.config.gpus_per_server)
        busy = sum(s.gpus * _remaining_time(sim, s) for s in sim.running.values())
        order = sorted([*queue, job_id], key=lambda j: self._key(sim, j))
        new = sim.states[job_id]
        new_gpu_s = new.job.gpus * _remaining_time(sim, new)

        def jct(state: JobState, ahead_gpus: float, ahead_gpu_s: float) -> float:
            left = _remaining_time(sim, state)
            if ahead_gpus + state.job.gpus <= sim.free_gpus + 1e-9:
                wait = 0.0
            else:
                wait = (busy + ahead_gpu_s) / capacity
            return sim.now - state.job.arrival_s + wait + left

        gpus = gpu_s = 0.0  # of the admitted jobs ahead (the new job excluded)
        value = cost = 0.0
        behind = False
        for other in order:
            state = sim.states[other]
            if other == job_id:
                value = state.job.utility.value(jct(state, gpus, gpu_s))
                behind = True
                continue
            if behind:
                before = state.job.utility.value(jct(state, gpus, gpu_s))
                after = state.job.utility.value(jct(state, gpus + new.job.gpus, gpu_s + new_gpu_s))
                cost += before - after
            gpus += state.job.gpus
            gpu_s += state.job.gpus * _remaining_time(sim, state)
        return value - cost > self.admit_threshold

    def schedule(self, sim: ClusterSim) -> None:
        if sim is not self._sim:
            self._sim, self.admitted = sim, []
        if sim.arrived:
            arrived = set(sim.arrived)
            queue = [j for j in sim.pending if j not in arrived]
            for job_id in sim.arrived:
                if self.admit(sim, job_id, queue):
                    queue.append(job_id)
                    self.admitted.append(job_id)
                else:
                    sim.reject(job_id)
        if self.preemptive:
            self._preemptive(sim)
            return
        if not sim.pending:
            return
        smallest = min(sim.states[j].job.gpus for j in sim.pending)
        for job_id in sorted(sim.pending, key=lambda j: self._key(sim, j)):
            if sim.free_gpus + 1e-9 < smallest:
                break
            if sim.states[job_id].job.gpus > sim.free_gpus + 1e-9:
                if not self.backfill:
                    break
                continue
            if not sim.try_start(job_id) and not self.backfill:
                break

    def _preemptive(self, sim: ClusterSim) -> None:
        order = sorted([*sim.running, *sim.pending], key=lambda j: self._key(sim, j))
        keep_best(sim, order, self.backfill)


# -- what the registry builds -----------------------------------------------------------------


def tetris(placement: str = "bin-packing", srtf_weight: float = 1.0) -> ClusterPolicy:
    return ClusterPolicy(Tetris(srtf_weight), _trace_rule(placement), "tetris", placement)


def optimus(
    placement: str = "optimus",
    worker_factor: float = 2.0,
    max_workers: int = 32,
    ps_factor: float = 2.0,
    max_ps: int = 32,
    sticky: bool = True,
) -> ClusterPolicy:
    scheduler = Optimus(placement, worker_factor, max_workers, ps_factor, max_ps, sticky)
    return ClusterPolicy(scheduler, _trace_rule(placement), "optimus", placement)


def dorm(
    placement: str = "bin-packing", max_factor: float = 1.0, max_adjust: int = 2
) -> ClusterPolicy:
    return ClusterPolicy(
        Dorm(placement, max_factor, max_adjust), _trace_rule(placement), "dorm", placement
    )


def rrh(
    placement: str = "bin-packing",
    admit_threshold: float = 0.0,
    preemptive: bool = False,
    backfill: bool = True,
) -> ClusterPolicy:
    return ClusterPolicy(
        Rrh(admit_threshold, preemptive, backfill), _trace_rule(placement), "rrh", placement
    )


BASELINES: dict[str, Callable[..., ClusterPolicy]] = {
    "tetris": tetris,
    "optimus": optimus,
    "dorm": dorm,
    "rrh": rrh,
}
