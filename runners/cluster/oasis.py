"""OASiS: online admission and per-slot worker/PS allocation by a primal-dual rule.

Bao, Peng, Wu, Li, "Online Job Scheduling in Distributed Machine Learning Clusters", IEEE
INFOCOM 2018 (checked against the arXiv v1 full text: ``research/papers-fulltext.md`` §1).

The algorithm (paper Alg. 1 and 2), on time slots of ``slot_s`` seconds:

* every resource r of every server h in every slot t has a price that grows exponentially with
  what is already allocated there: ``p = L * (U_r / L) ** (g / C)``;
* when a job arrives, the **dual subroutine** finds its best schedule: for every candidate
  completion slot, the cheapest way to do the job's work by then (a DP over slots, exact), where
  one slot's cost of ``d`` workers is the greedy fill of the cheapest servers (workers, then
  ``ceil(gamma * d)`` PSs on the cheapest PS hosts); payoff = utility at that completion minus
  the cost;
* the job is admitted iff the best payoff is positive; its schedule (workers and PSs per server
  per slot) is committed and the prices rise. Admitted jobs are never re-planned; rejected jobs
  never run.

Our model of a job in slots (the paper's E, N, M, tau, e, b are not in public traces): one
**unit** of work = one worker for one slot at the job's isolated per-worker speed, so a job
needs ``ceil(work / (rate_per_worker * slot_s))`` units; at most ``N = max_scale x`` the trace's
worker count run at once (the paper's chunk cap N_i); a PS job keeps the trace's PS-to-worker
ratio ``gamma`` (the paper's bandwidth rule b/B). The simulator then runs each slot's placement
with its own placement-aware speed, which may be slower than the planner's linear model; a job
still unfinished when its planned slots end is re-planned for what is left and admitted without
the payoff test (it was admitted once), and a job that finishes early gives its future slots back.
These three are ours (the paper's model is exact, so the cases do not arise there).

Constants (paper §1.5): ``U_r = max_i f_i(d_min_i) / w_i^r`` over the whole trace (the paper
assumes they are known or estimated; we compute them from the trace: an oracle estimate, scaled
by ``price_ratio_scale`` as in the paper's Fig. 6) and ``L = min_i f_i(T) / sum_r(D_i w_i^r) /
(4 eta)``, floored at ``min_price_ratio x min_r U_r`` (ours: sigmoid utilities can make f(T) zero,
which would make every price zero). ``T`` is the planning horizon ``horizon_slots``.

Pools: the paper puts PSs on their own servers; with ``ClusterConfig.ps_servers`` that is what
happens here and the greedy slot cost is exact (Appendix B). Without a PS pool a PS job's PSs go
with its workers (``ceil(gamma * y)`` on each server holding ``y`` workers), each worker costed as
a bundle with its share of PS: a reconstruction, not the paper's exact subroutine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .sim import ClusterSim, Placement

INF = math.inf


@dataclass(frozen=True)
class SlotJob:
    """A job as the planner sees it: ``units`` worker-slots of work from ``arrival_slot`` on, at
    most ``max_workers`` at once; ``value(end_slot)`` = utility when the last slot used is
    ``end_slot``."""

    id: int
    arrival_slot: int
    units: int
    max_workers: int
    worker_demand: tuple[float, float, float]
    ps_demand: tuple[float, float, float] = (0.0, 0.0, 0.0)
    ps_per_worker: float = 0.0  # gamma; 0 = an all-reduce job (no PS)
    value: Callable[[int], float] = field(default=lambda end: 1.0, compare=False)

    def ps_for(self, workers: int) -> int:
        if self.ps_per_worker <= 0 or workers <= 0:
            return 0
        return min(workers, math.ceil(self.ps_per_worker * workers - 1e-9))


@dataclass
class Schedule:
    """Per slot: {server: [workers, ps]}; the end slot; cost at the prices when planned."""

    slots: dict[int, dict[int, list[int]]]
    end_slot: int
    cost: float
    value: float

    @property
    def payoff(self) -> float:
        return self.value - self.cost


class SlotCluster:
    """Servers x resources x slots: what is allocated, and the prices."""

    def __init__(
        self,
        capacity: list[tuple[float, float, float]],
        worker_servers: range,
        ps_hosts: range,
        upper: tuple[float, float, float],
        lower: float,
    ) -> None:
        self.capacity = np.asarray(capacity, dtype=float)
        self.worker_servers = np.asarray(list(worker_servers), dtype=int)
        self.ps_hosts = np.asarray(list(ps_hosts), dtype=int)
        self.colocated = set(worker_servers) == set(ps_hosts)
        self.alloc: dict[int, np.ndarray] = {}
        self.lower = lower
        self.log_ratio = np.log(np.maximum(np.asarray(upper, dtype=float), lower) / lower)
        with np.errstate(divide="ignore"):
            self._inv_cap = np.where(self.capacity > 0, 1.0 / self.capacity, 0.0)

    def used(self, t: int) -> np.ndarray:
        a = self.alloc.get(t)
        return a if a is not None else np.zeros_like(self.capacity)

    def prices(self, t: int) -> np.ndarray:
        """Unit price of every resource of every server in slot ``t``: (servers, 3)."""
        return self.lower * np.exp(self.used(t) * self._inv_cap * self.log_ratio)

    def add(self, job: SlotJob, slots: dict[int, dict[int, list[int]]], sign: float = 1.0) -> None:
        w = np.asarray(job.worker_demand)
        s = np.asarray(job.ps_demand)
        for t, placement in slots.items():
            a = self.alloc.get(t)
            if a is None:
                a = self.alloc[t] = np.zeros_like(self.capacity)
            for server, (y, z) in placement.items():
                a[server] += sign * (y * w + z * s)
            if sign < 0 and not a.any():
                del self.alloc[t]
            elif sign < 0:
                np.maximum(a, 0.0, out=a)

    # -- one slot ---------------------------------------------------------------------------
    def slot_costs(self, job: SlotJob, t: int) -> tuple[np.ndarray, Callable[[int], Placement]]:
        """Cost of running d = 0..max_workers workers (and their PSs) in slot ``t`` at current
        prices (inf where they do not fit), and a function giving the placement of a d."""
        n = job.max_workers
        price = self.prices(t)
        free = self.capacity - self.used(t)
        w = np.asarray(job.worker_demand)
        s = np.asarray(job.ps_demand)
        gamma = job.ps_per_worker
        ws = self.worker_servers
        bundle = self.colocated and gamma > 0
        if bundle:  # a worker plus its share of PSs, PSs beside their workers
            unit = price[ws] @ (w + gamma * s)
            room = free[ws] - s  # room for the ceil of the PS count
            per = w + gamma * s
        else:
            unit = price[ws] @ w
            room = free[ws]
            per = w
        with np.errstate(divide="ignore", invalid="ignore"):
            fit = np.where(per > 0, np.floor((room + 1e-9) / per), np.inf).min(axis=1)
        fit = np.clip(np.nan_to_num(fit, posinf=n), 0, n).astype(int)
        order = np.argsort(unit, kind="stable")
        counts = fit[order]
        prices = np.repeat(unit[order], counts)[:n]
        costs = np.full(n + 1, INF)
        costs[0] = 0.0
        costs[1 : len(prices) + 1] = np.cumsum(prices)
        if gamma > 0 and not bundle:
            hosts = self.ps_hosts
            ps_unit = price[hosts] @ s
            with np.errstate(divide="ignore", invalid="ignore"):
                ps_fit = np.where(s > 0, np.floor((free[hosts] + 1e-9) / s), np.inf).min(axis=1)
            ps_fit = np.clip(np.nan_to_num(ps_fit, posinf=n), 0, n).astype(int)
            ps_order = np.argsort(ps_unit, kind="stable")
            ps_prices = np.repeat(ps_unit[ps_order], ps_fit[ps_order])[:n]
            ps_costs = np.full(n + 1, INF)
            ps_costs[0] = 0.0
            ps_costs[1 : len(ps_prices) + 1] = np.cumsum(ps_prices)
            z = np.array([job.ps_for(d) for d in range(n + 1)])
            costs = costs + ps_costs[z]

        def place(d: int) -> Placement:
            out: Placement = {}
            left = d
            for k, server in enumerate(ws[order]):
                if left <= 0:
                    break
                y = min(int(counts[k]), left)
                if y:
                    out[int(server)] = [y, job.ps_for(y) if bundle else 0]
                    left -= y
            if gamma > 0 and not bundle:
                left = job.ps_for(d)
                for k, server in enumerate(hosts[ps_order]):
                    if left <= 0:
                        break
                    z_here = min(int(ps_fit[ps_order][k]), left)
                    if z_here:
                        out.setdefault(int(server), [0, 0])[1] += z_here
                        left -= z_here
            return out

        return costs, place

    def placement_cost(self, job: SlotJob, t: int, placement: Placement) -> float:
        price = self.prices(t)
        w = np.asarray(job.worker_demand)
        s = np.asarray(job.ps_demand)
        return float(sum(price[h] @ (y * w + z * s) for h, (y, z) in placement.items()))

    # -- the dual subroutine ----------------------------------------------------------------
    def best_schedule(self, job: SlotJob, start: int, horizon: int) -> Schedule | None:
        """The schedule of ``job`` from slot ``start`` with the best payoff (None if the work
        cannot be done within ``horizon`` slots). Exact DP over slots (paper Alg. 2)."""
        units = job.units
        best: Schedule | None = None
        f_prev = np.full(units + 1, INF)
        f_prev[0] = 0.0
        choices: list[np.ndarray] = []
        placers: list[Callable[[int], Placement]] = []
        empty: tuple[np.ndarray, Callable[[int], Placement]] | None = None
        for t in range(start, start + horizon):
            value = job.value(t)
            if best is not None and value <= best.payoff:
                break  # later ends are worth no more and cost no less than zero
            if t in self.alloc:
                costs, place = self.slot_costs(job, t)
            else:  # every empty slot costs the same
                if empty is None:
                    empty = self.slot_costs(job, t)
                costs, place = empty
            f = np.full(units + 1, INF)
            choice = np.zeros(units + 1, dtype=int)
            for d in range(min(units, job.max_workers) + 1):
                c = costs[d]
                if c == INF:
                    break  # costs only grow with d, and d+1 does not fit if d does not
                cand = f_prev[: units + 1 - d] + c
                better = cand < f[d:]
                if better.any():
                    f[d:][better] = cand[better]
                    choice[d:][better] = d
            choices.append(choice)
            placers.append(place)
            f_prev = f
            if f[units] < INF and (best is None or value - f[units] > best.payoff):
                best = Schedule({}, t, float(f[units]), value)
        if best is None:
            return None
        # Backtrack the chosen end slot.
        n = units
        for k in range(best.end_slot - start, -1, -1):
            d = int(choices[k][n])
            if d:
                best.slots[start + k] = placers[k](d)
            n -= d
        return best


def price_constants(
    jobs: list[SlotJob],
    capacity: list[tuple[float, float, float]],
    horizon: int,
    ratio_scale: float = 1.0,
    min_price_ratio: float = 1e-6,
) -> tuple[tuple[float, float, float], float]:
    """``(U_r, L)`` from a set of jobs (paper §1.5; see the module docstring): U_r = the best
    utility per unit of resource r of any job, L = the least utility per unit of resource-slot
    any job needs, over 4 eta."""
    upper = [0.0, 0.0, 0.0]
    lows = []
    total_cap = sum(sum(c) for c in capacity)
    eta_inv = 1.0
    for sj in jobs:
        fastest_end = sj.arrival_slot + math.ceil(sj.units / sj.max_workers) - 1
        best = sj.value(fastest_end)
        demands = [sj.worker_demand] + ([sj.ps_demand] if sj.ps_per_worker else [])
        for r in range(3):
            for demand in demands:
                if demand[r] > 0:
                    upper[r] = max(upper[r], best / demand[r])
        need = sj.units * (sum(sj.worker_demand) + sj.ps_per_worker * sum(sj.ps_demand))
        lows.append(sj.value(sj.arrival_slot + horizon - 1) / need)
        eta_inv = min(eta_inv, need / (horizon * total_cap))
    lower = min(lows) * eta_inv / 4.0
    positive = [u for u in upper if u > 0]
    if not positive:
        raise ValueError("no job has a positive utility and demand: prices undefined")
    lower = max(lower, min_price_ratio * min(positive))
    scaled = tuple(ratio_scale * max(u, lower) if u > 0 else 0.0 for u in upper)
    return scaled, lower  # type: ignore[return-value]


def competitive_alpha(upper: tuple[float, ...], lower: float) -> float:
    """alpha = max(1, ln(U_r / L)) of the paper's 2 alpha competitive ratio (Theorem 4)."""
    return max(1.0, *(math.log(u / lower) for u in upper if u > lower))


# -- the scheduler in the cluster simulator -----------------------------------------------------


class Oasis:
    """OASiS as a scheduler of ``ClusterSim`` (see the module docstring)."""

    def __init__(
        self,
        slot_s: float = 3600.0,
        horizon_slots: int = 100,
        max_scale: float = 2.0,
        price_ratio_scale: float = 1.0,
        min_price_ratio: float = 1e-6,
    ) -> None:
        self.slot_s = slot_s
        self.horizon = horizon_slots
        self.max_scale = max_scale
        self.price_ratio_scale = price_ratio_scale
        self.min_price_ratio = min_price_ratio
        self.cluster: SlotCluster | None = None
        self.jobs: dict[int, SlotJob] = {}
        self.plans: dict[int, Schedule] = {}
        self.applied = -1
        self.rejections = 0
        self.replans = 0
        self.waiting: set[int] = set()  # admitted, work left, no feasible re-plan yet
        self._armed = -1.0

    # -- planning model ---------------------------------------------------------------------
    def slot_job(self, sim: ClusterSim, job_id: int, work_left: float | None = None) -> SlotJob:
        state = sim.states[job_id]
        job = state.job
        per_worker = state.work / (job.duration_s * job.workers)  # worker-steps/s per worker
        work = state.remaining if work_left is None else work_left
        units = max(1, math.ceil(work / (per_worker * self.slot_s) - 1e-9))
        arrival = job.arrival_s
        slot_s = self.slot_s
        utility = job.utility

        def value(end_slot: int) -> float:
            return utility.value((end_slot + 1) * slot_s - arrival)

        return SlotJob(
            id=job_id,
            arrival_slot=self._slot_at(arrival, up=True),
            units=units,
            max_workers=max(1, int(self.max_scale * job.workers)),
            worker_demand=job.worker_demand,
            ps_demand=job.ps_demand,
            ps_per_worker=(job.ps / job.workers) if job.arch == "ps" and job.ps else 0.0,
            value=value,
        )

    def _slot_at(self, t: float, up: bool = False) -> int:
        x = t / self.slot_s
        k = math.floor(x + 1e-9)
        return k + 1 if up and x - k > 1e-9 else k

    def _setup(self, sim: ClusterSim) -> None:
        jobs = [self.slot_job(sim, j) for j in sim.states]
        caps = sim.config.capacities()
        upper, lower = price_constants(
            jobs, caps, self.horizon, self.price_ratio_scale, self.min_price_ratio
        )
        self.cluster = SlotCluster(
            caps, sim.config.worker_servers, sim.config.ps_hosts, upper, lower
        )
        self.upper, self.lower = upper, lower

    @property
    def alpha(self) -> float:
        """The competitive ratio's alpha = max(1, ln(U_r / L)) (paper Theorem 4)."""
        return competitive_alpha(self.upper, self.lower)

    # -- events -----------------------------------------------------------------------------
    def schedule(self, sim: ClusterSim) -> None:
        if self.cluster is None:
            self._setup(sim)
        cluster = self.cluster
        assert cluster is not None
        for job_id in sim.arrived:
            sj = self.slot_job(sim, job_id)
            plan = cluster.best_schedule(sj, sj.arrival_slot, self.horizon)
            if plan is None or plan.payoff <= 0:
                sim.reject(job_id)
                self.rejections += 1
                continue
            cluster.add(sj, plan.slots)
            self.jobs[job_id] = sj
            self.plans[job_id] = plan
        # Jobs that finished give their future slots back.
        for job_id in [j for j in self.plans if sim.states[j].finish is not None]:
            self._release_future(job_id, self._slot_at(sim.now))
        now_slot = self._slot_at(sim.now)
        if now_slot > self.applied and abs(sim.now - now_slot * self.slot_s) < 1e-6:
            self._apply(sim, now_slot)
        self._arm(sim)

    def _release_future(self, job_id: int, after: int) -> None:
        assert self.cluster is not None
        plan = self.plans.pop(job_id)
        future = {t: p for t, p in plan.slots.items() if t > after}
        if future:
            self.cluster.add(self.jobs[job_id], future, sign=-1.0)
        del self.jobs[job_id]

    def _apply(self, sim: ClusterSim, slot: int) -> None:
        """Put every admitted job on its placement for ``slot`` (pausing the others)."""
        assert self.cluster is not None
        self.applied = slot
        # Overruns: planned slots are over but work is left: plan the rest, admitted anyway.
        for job_id, plan in list(self.plans.items()):
            if plan.end_slot < slot and sim.states[job_id].finish is None:
                self._release_future(job_id, slot)
                self.waiting.add(job_id)
        for job_id in sorted(self.waiting):
            state = sim.states[job_id]
            left = state.remaining
            if job_id in sim.running:
                left -= (sim.now - state.since) * state.rate
            sj = self.slot_job(sim, job_id, work_left=max(left, 1e-9))
            replan = self.cluster.best_schedule(sj, slot, self.horizon)
            self.replans += 1
            if replan is not None:
                self.cluster.add(sj, replan.slots)
                self.jobs[job_id], self.plans[job_id] = sj, replan
                self.waiting.discard(job_id)
        targets = {j: p.slots.get(slot) for j, p in self.plans.items()}
        for job_id in list(sim.running):
            target = targets.get(job_id)
            if not target or target != sim.running[job_id].placement:
                sim.preempt(job_id)
        for job_id, target in targets.items():
            starting = target and job_id not in sim.running and job_id in sim.pending
            if starting and not sim.try_start(job_id, target):
                raise RuntimeError(f"OASiS: job {job_id}'s committed placement does not fit")

    def _arm(self, sim: ClusterSim) -> None:
        if self.plans or self.waiting:
            t = (self._slot_at(sim.now) + 1) * self.slot_s
            if t != self._armed:
                sim.timer(t)
                self._armed = t


def oasis(
    slot_s: float = 3600.0,
    horizon_slots: int = 100,
    max_scale: float = 2.0,
    price_ratio_scale: float = 1.0,
    min_price_ratio: float = 1e-6,
) -> object:
    from .policies import ClusterPolicy, bin_packing

    return ClusterPolicy(
        Oasis(slot_s, horizon_slots, max_scale, price_ratio_scale, min_price_ratio),
        bin_packing,  # unused: OASiS places every job itself
        "oasis",
        "oasis",
    )


# -- small instances: the online algorithm alone, and the offline optimum -----------------------


def run_online(cluster: SlotCluster, jobs: list[SlotJob], horizon: int) -> tuple[float, list[int]]:
    """OASiS in its own slot model (the paper's setting, no simulator): jobs in arrival order,
    admit iff the best payoff is positive. Returns (total utility, admitted job ids)."""
    total, admitted = 0.0, []
    for job in sorted(jobs, key=lambda j: (j.arrival_slot, j.id)):
        plan = cluster.best_schedule(job, job.arrival_slot, horizon)
        if plan is None or plan.payoff <= 0:
            continue
        cluster.add(job, plan.slots)
        total += plan.value
        admitted.append(job.id)
    return total, admitted


def enumerate_schedules(
    job: SlotJob, capacity: np.ndarray, worker_servers: range, ps_hosts: range, last_slot: int
) -> list[tuple[float, dict[int, dict[int, list[int]]]]]:
    """Every schedule of ``job`` on an empty cluster that does exactly its work by
    ``last_slot`` (brute force: tiny instances only), with its utility."""
    w = np.asarray(job.worker_demand)
    s = np.asarray(job.ps_demand)
    servers = list(worker_servers)
    hosts = list(ps_hosts)

    def fits(y: tuple[int, ...], z: tuple[int, ...]) -> bool:
        use = np.zeros_like(capacity)
        for h, n in zip(servers, y, strict=True):
            use[h] += n * w
        for k, n in zip(hosts, z, strict=True):
            use[k] += n * s
        return bool((use <= capacity + 1e-9).all())

    # One slot's options: worker vectors (sum <= N) with a cheapest-count PS vector.
    options: list[tuple[int, dict[int, list[int]]]] = []
    for y in _vectors(len(servers), job.max_workers):
        total = sum(y)
        need = job.ps_for(total)
        for z in _vectors(len(hosts), need) if need else [tuple(0 for _ in hosts)]:
            if sum(z) != need or not fits(y, z):
                continue
            placement: dict[int, list[int]] = {}
            for h, n in zip(servers, y, strict=True):
                if n:
                    placement.setdefault(h, [0, 0])[0] += n
            for k, n in zip(hosts, z, strict=True):
                if n:
                    placement.setdefault(k, [0, 0])[1] += n
            options.append((total, placement))
    slots = list(range(job.arrival_slot, last_slot + 1))
    out: list[tuple[float, dict[int, dict[int, list[int]]]]] = []

    def walk(i: int, left: int, chosen: dict[int, dict[int, list[int]]]) -> None:
        if left == 0:
            if chosen:
                out.append((job.value(max(chosen)), dict(chosen)))
            return
        if i == len(slots):
            return
        walk(i + 1, left, chosen)
        for total, placement in options:
            if 0 < total <= left:
                chosen[slots[i]] = placement
                walk(i + 1, left - total, chosen)
                del chosen[slots[i]]

    walk(0, job.units, {})
    return out


def _vectors(n: int, most: int) -> list[tuple[int, ...]]:
    """All non-negative integer vectors of length ``n`` with sum <= ``most``."""
    if n == 0:
        return [()]
    return [(a, *rest) for a in range(most + 1) for rest in _vectors(n - 1, most - a)]


def offline_optimum(
    jobs: list[SlotJob],
    capacity: list[tuple[float, float, float]],
    worker_servers: range,
    ps_hosts: range,
    last_slot: int,
) -> float:
    """The best total utility any schedule of ``jobs`` reaches, knowing them all in advance
    (exhaustive search over every job's schedules: tiny instances only)."""
    cap = np.asarray(capacity, dtype=float)
    options = []
    for job in jobs:
        scheds = enumerate_schedules(job, cap, worker_servers, ps_hosts, last_slot)
        scheds.sort(key=lambda x: -x[0])
        options.append((job, scheds))
    best = 0.0
    remaining_best = [0.0] * (len(options) + 1)
    for i in range(len(options) - 1, -1, -1):
        top = options[i][1][0][0] if options[i][1] else 0.0
        remaining_best[i] = remaining_best[i + 1] + max(0.0, top)
    used: dict[int, np.ndarray] = {}

    def fits_add(job: SlotJob, slots: dict[int, dict[int, list[int]]], sign: int) -> bool:
        w = np.asarray(job.worker_demand)
        s = np.asarray(job.ps_demand)
        for t, placement in slots.items():
            a = used.setdefault(t, np.zeros_like(cap))
            for h, (y, z) in placement.items():
                a[h] += sign * (y * w + z * s)
        if sign > 0:
            return all((a <= cap + 1e-9).all() for a in used.values())
        return True

    def search(i: int, value: float) -> None:
        nonlocal best
        best = max(best, value)
        if i == len(options) or value + remaining_best[i] <= best:
            return
        job, scheds = options[i]
        for utility, slots in scheds:
            if value + utility + remaining_best[i + 1] <= best:
                break
            if fits_add(job, slots, +1):
                search(i + 1, value + utility)
            fits_add(job, slots, -1)
        search(i + 1, value)

    search(0, 0.0)
    return best
