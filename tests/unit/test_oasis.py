"""OASiS: the dual subroutine against brute force, the competitive ratio against the offline
optimum on tiny instances, and the scheduler in the cluster simulator."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from runners.cluster import oasis, policies
from runners.cluster.oasis import SlotCluster, SlotJob
from runners.cluster.sim import ClusterConfig, ClusterSim
from workloads.traces import Job, Utility, philly_like

from .test_cluster_sim import CheckedSim


def sigmoid(weight: float, steep: float, target: float, arrival: int):
    def value(end: int) -> float:
        x = steep * (end + 1 - arrival - target)
        return 0.0 if x > 700 else weight / (1 + math.exp(x))

    return value


def random_job(rng: random.Random, jid: int, ps: bool, max_slot: int = 1) -> SlotJob:
    arrival = rng.randint(0, max_slot)
    return SlotJob(
        id=jid,
        arrival_slot=arrival,
        units=rng.randint(1, 4),
        max_workers=rng.randint(1, 3),
        worker_demand=(1.0, rng.choice((1.0, 2.0)), 1.0),
        ps_demand=(0.0, 1.0, rng.choice((1.0, 2.0))) if ps else (0.0, 0.0, 0.0),
        ps_per_worker=rng.choice((0.5, 1.0)) if ps else 0.0,
        value=sigmoid(rng.uniform(1, 10), rng.choice((0.0, 1.0, 5.0)), rng.randint(1, 3), arrival),
    )


def tiny_cluster(ps: bool) -> tuple[list[tuple[float, float, float]], range, range]:
    if ps:  # the paper's two pools: one GPU server for workers, two PS servers
        return [(2.0, 4.0, 4.0), (0.0, 2.0, 3.0), (0.0, 2.0, 3.0)], range(0, 1), range(1, 3)
    return [(2.0, 3.0, 4.0), (3.0, 4.0, 4.0)], range(0, 2), range(0, 2)


def brute_best_payoff(cluster: SlotCluster, job: SlotJob, last_slot: int) -> float | None:
    free_cap = cluster.capacity  # schedules enumerated on the whole capacity, then filtered
    best = None
    for value, slots in oasis.enumerate_schedules(
        job,
        free_cap,
        range(len(free_cap)) if cluster.colocated else _ws(cluster),
        _ps(cluster),
        last_slot,
    ):
        ok = True
        cost = 0.0
        for t, placement in slots.items():
            use = cluster.used(t).copy()
            for h, (y, z) in placement.items():
                use[h] += y * np.asarray(job.worker_demand) + z * np.asarray(job.ps_demand)
            if (use > cluster.capacity + 1e-9).any():
                ok = False
                break
            cost += cluster.placement_cost(job, t, placement)
        if ok and (best is None or value - cost > best):
            best = value - cost
    return best


def _ws(cluster: SlotCluster) -> range:
    return range(int(cluster.worker_servers[0]), int(cluster.worker_servers[-1]) + 1)


def _ps(cluster: SlotCluster) -> range:
    return range(int(cluster.ps_hosts[0]), int(cluster.ps_hosts[-1]) + 1)


@pytest.mark.parametrize("ps", [False, True], ids=["allreduce-jobs", "ps-jobs-two-pools"])
def test_the_dual_subroutine_equals_brute_force_on_tiny_instances(ps):
    rng = random.Random(11 if ps else 7)
    caps, ws, hosts = tiny_cluster(ps)
    checked = 0
    for case in range(40):
        jobs = [random_job(rng, i, ps) for i in range(4)]
        upper, lower = oasis.price_constants(jobs, caps, horizon=4)
        cluster = SlotCluster(caps, ws, hosts, upper, lower)
        # Some load already committed (random earlier jobs), so prices differ per slot/server.
        for j in jobs[:2]:
            plan = cluster.best_schedule(j, j.arrival_slot, 4)
            if plan is not None:
                cluster.add(j, plan.slots)
        job = jobs[3]
        last = job.arrival_slot + 3
        plan = cluster.best_schedule(job, job.arrival_slot, 4)
        brute = brute_best_payoff(cluster, job, last)
        if brute is None:
            assert plan is None, f"case {case}: DP found a schedule brute force did not"
            continue
        assert plan is not None, f"case {case}: DP missed a feasible schedule"
        assert plan.payoff == pytest.approx(brute, rel=1e-9, abs=1e-9), f"case {case}"
        # The schedule it returns is what it claims: the work, in capacity, at that cost.
        assert sum(y for p in plan.slots.values() for y, _ in p.values()) == job.units
        cost = sum(cluster.placement_cost(job, t, p) for t, p in plan.slots.items())
        assert cost == pytest.approx(plan.cost)
        assert max(plan.slots) == plan.end_slot or job.value(max(plan.slots)) == pytest.approx(
            plan.value
        )
        checked += 1
    assert checked >= 20  # most cases are feasible: the comparison really ran


def test_prices_run_from_l_when_empty_to_u_when_full():
    caps, ws, hosts = tiny_cluster(False)
    cluster = SlotCluster(caps, ws, hosts, (50.0, 20.0, 10.0), 0.5)
    assert np.allclose(cluster.prices(0), 0.5)
    full = SlotJob(0, 0, 1, 5, (1.0, 1.0, 1.0))
    cluster.add(full, {0: {0: [2, 0]}})  # server 0: 2 of 2 GPUs, 2 of 3 cores, 2 of 4 GB
    p = cluster.prices(0)[0]
    assert p[0] == pytest.approx(50.0)
    assert p[1] == pytest.approx(0.5 * (20.0 / 0.5) ** (2 / 3))
    assert p[2] == pytest.approx(0.5 * (10.0 / 0.5) ** 0.5)


def test_competitive_ratio_against_the_offline_optimum_on_tiny_instances():
    """Theorem 4 bounds OPT / OASiS by 2 alpha; the paper's Fig. 5 measures 1.1-1.5. We check
    the bound on every instance and report the ratios we measure (not tuned to the paper)."""
    rng = random.Random(5)
    caps, ws, hosts = tiny_cluster(False)
    ratios = []
    for _ in range(12):
        jobs = [random_job(rng, i, False, max_slot=2) for i in range(4)]
        upper, lower = oasis.price_constants(jobs, caps, horizon=4)
        online, admitted = oasis.run_online(SlotCluster(caps, ws, hosts, upper, lower), jobs, 4)
        opt = oasis.offline_optimum(jobs, caps, ws, hosts, last_slot=5)
        assert opt >= online - 1e-9  # the online result is a feasible schedule
        alpha = oasis.competitive_alpha(upper, lower)
        if online > 0:
            ratios.append(opt / online)
            assert opt / online <= 2 * alpha
        else:
            assert opt == 0 or not admitted
    assert ratios, "no instance admitted anything"
    mean, worst = np.mean(ratios), max(ratios)
    print(f"OPT/OASiS on {len(ratios)} tiny instances: mean {mean:.2f}, max {worst:.2f}")


def oasis_trace(n: int = 60, seed: int = 2) -> tuple[Job, ...]:
    jobs = philly_like(n, seed=seed, jobs_per_hour=20, ps_fraction=0.4)
    return tuple(dataclasses.replace(j, duration_s=j.duration_s / 10) for j in jobs)


@pytest.mark.parametrize("ps_servers", [0, 2])
def test_oasis_in_the_simulator_keeps_capacity_and_finishes_what_it_admits(ps_servers):
    jobs = oasis_trace()
    config = ClusterConfig(servers=3, ps_servers=ps_servers)
    scheduler = oasis.Oasis(slot_s=600.0, horizon_slots=200)
    sim = CheckedSim(jobs, config, scheduler, policies.bin_packing)
    result = sim.run()
    finished = int(result.metrics["jobs_finished"])
    assert finished + len(sim.rejected) == len(jobs)
    assert result.metrics["admitted_fraction"] == pytest.approx(finished / len(jobs))
    for state in sim.finished:
        assert state.done == pytest.approx(state.work)
        assert state.first_start >= state.job.arrival_s
        # Starts only on slot boundaries.
        assert state.first_start / 600.0 == pytest.approx(round(state.first_start / 600.0))
    assert finished > len(jobs) // 2  # a small cluster, but most of the jobs are worth it


def test_oasis_rejects_a_job_it_cannot_profit_from_and_admits_on_an_empty_cluster():
    worthless = Job(
        id=0,
        arrival_s=0.0,
        model="resnet50",
        workers=2,
        duration_s=3600.0,
        utility=Utility("deadline", 10.0, 0.0, 60.0),  # worth nothing after one minute
    )
    good = Job(
        id=1,
        arrival_s=0.0,
        model="resnet50",
        workers=2,
        duration_s=3600.0,
        utility=Utility("sigmoid", 10.0, 0.0, 3600.0),
    )
    sim = ClusterSim(
        (worthless, good), ClusterConfig(servers=2), oasis.Oasis(slot_s=600.0), policies.bin_packing
    )
    result = sim.run()
    assert sim.rejected == [0]
    assert result.metrics["jobs_finished"] == 1
    # Alone on an empty cluster it may use up to max_scale x its workers: done sooner.
    assert result.jobs[0]["jct_s"] < 3600.0
