"""Tetris, Optimus, Dorm and RRH (``runners.cluster.baselines``): the simulator's invariants
under each of them, and one behaviour each that tells the policy apart from FIFO."""

from __future__ import annotations

import dataclasses

import pytest

from runners.cluster import baselines, policies
from runners.cluster.sim import ClusterConfig, ClusterSim
from workloads.traces import Job, Utility, philly_like


class CheckedSim(ClusterSim):
    """Checks capacity (every server, the PS pool included) and bookkeeping after every round,
    and records what every running job holds."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_counts: dict[int, tuple[int, int]] = {}
        self.snapshots: list[tuple[float, dict[int, tuple[int, int]]]] = []

    def _update_rates(self) -> None:
        super()._update_rates()
        caps = self.config.capacities()
        used = [[0.0, 0.0, 0.0] for _ in caps]
        snapshot = {}
        for job_id, state in self.running.items():
            assert state.job.arrival_s <= self.now, "started before it arrived"
            assert job_id not in self.pending and job_id not in self.rejected
            workers = sum(w for w, _ in state.placement.values())
            ps = sum(p for _, p in state.placement.values())
            assert workers >= 1 and (state.job.arch != "ps" or ps >= 1)
            snapshot[job_id] = (workers, ps)
            best = self.max_counts.get(job_id, (0, 0))
            self.max_counts[job_id] = (max(best[0], workers), max(best[1], ps))
            for server, (w, p) in state.placement.items():
                assert w == 0 or server in self.worker_servers
                assert p == 0 or server in self.ps_hosts
                for k in range(3):
                    used[server][k] += w * state.job.worker_demand[k] + p * state.job.ps_demand[k]
        for server, cap in enumerate(caps):
            for k in range(3):
                assert used[server][k] <= cap[k] + 1e-9, f"server {server} over capacity"
                assert abs(self.free[server][k] - (cap[k] - used[server][k])) < 1e-6
        self.snapshots.append((self.now, snapshot))


def trace(n: int = 100, seed: int = 3, ps_fraction: float = 0.3) -> tuple[Job, ...]:
    # Short jobs so a test finishes quickly: durations scaled down 20x.
    jobs = philly_like(n, seed=seed, jobs_per_hour=30, ps_fraction=ps_fraction)
    return tuple(dataclasses.replace(j, duration_s=j.duration_s / 20) for j in jobs)


def run(policy, jobs, config, **kwargs) -> tuple[CheckedSim, dict]:
    sim = CheckedSim(jobs, config, policy.scheduler, policy.place, **kwargs)
    result = sim.run()
    return sim, result


CONFIGS = {
    "shared": ClusterConfig(servers=4),
    "ps-pool": ClusterConfig(servers=4, ps_servers=2),
}
POLICIES = {
    "tetris": lambda: baselines.tetris(),
    "tetris-pure-packing": lambda: baselines.tetris(placement="load-balance", srtf_weight=0.0),
    "optimus": lambda: baselines.optimus(),
    "optimus-bin-packing-not-sticky": lambda: baselines.optimus(
        placement="bin-packing", sticky=False
    ),
    "dorm": lambda: baselines.dorm(),
    "dorm-lif-x2": lambda: baselines.dorm(placement="lif", max_factor=2.0, max_adjust=1),
    "rrh": lambda: baselines.rrh(),
    "rrh-preemptive": lambda: baselines.rrh(preemptive=True, admit_threshold=5.0),
}
ELASTIC = ("optimus", "dorm")


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_capacity_arrival_and_work_are_kept_and_every_admitted_job_finishes(name, config):
    jobs = trace()
    overhead = 30.0 if name.startswith(ELASTIC) else 0.0
    sim, result = run(POLICIES[name](), jobs, CONFIGS[config], restart_overhead_s=overhead)
    admitted = len(jobs) - len(sim.rejected)
    assert result.metrics["jobs_finished"] == admitted > 0
    assert {s.job.id for s in sim.finished} | set(sim.rejected) == {j.id for j in jobs}
    for state in sim.finished:
        assert state.first_start >= state.job.arrival_s
        assert state.done == pytest.approx(state.work)
        assert state.finish > state.first_start
    if name.startswith(ELASTIC):
        assert result.metrics["resizes"] > 0  # they do re-allocate
    else:
        for state in sim.finished:  # fixed counts: never faster than alone and packed
            assert state.finish - state.first_start >= state.job.duration_s * (1 - 1e-9)
            assert sim.max_counts[state.job.id] == (state.job.workers, state.job.ps)
    if name in ("tetris", "tetris-pure-packing", "rrh"):
        assert result.metrics["preemptions"] == 0  # non-preemptive
    if not name.startswith("rrh"):
        assert not sim.rejected


def test_tetris_starts_the_better_aligned_job_first():
    # One server (8 GPUs, 64 cores, 512 GB). A blocker holds 4 GPUs and 56 cores, so the free
    # vector is (4 GPUs, 8 cores, 480 GB): memory-rich. Two 4-GPU jobs arrive together; only
    # one fits. A is CPU-heavy, B memory-heavy: B aligns better with what is free.
    config = ClusterConfig(servers=1)
    blocker = Job(0, 0.0, "resnet50", 4, 1000.0, worker_demand=(1.0, 14.0, 8.0))
    a = Job(1, 10.0, "resnet50", 4, 500.0, worker_demand=(1.0, 2.0, 16.0))
    b = Job(2, 10.0, "resnet50", 4, 500.0, worker_demand=(1.0, 1.0, 110.0))
    jobs = (blocker, a, b)
    fifo = ClusterSim(jobs, config, policies.Fifo(), policies.bin_packing).run()
    assert {j["job"]: j["start_s"] for j in fifo.jobs}[1] == 10.0  # FIFO: A, in arrival order
    for weight in (0.0, 1.0):
        _, result = run(baselines.tetris(srtf_weight=weight), jobs, config)
        starts = {j["job"]: j["start_s"] for j in result.jobs}
        assert starts[2] == 10.0
        assert starts[1] > 10.0


def test_tetris_remaining_work_term_prefers_the_shorter_job():
    # Same demands, so the same alignment: only the remaining-work term tells them apart.
    config = ClusterConfig(servers=1)
    blocker = Job(0, 0.0, "resnet50", 4, 1000.0)
    long = Job(1, 10.0, "resnet50", 8, 5000.0)
    short = Job(2, 10.0, "resnet50", 8, 50.0)
    _, result = run(baselines.tetris(srtf_weight=1.0), (blocker, long, short), config)
    starts = {j["job"]: j["start_s"] for j in result.jobs}
    assert starts[2] < starts[1]
    _, result = run(baselines.tetris(srtf_weight=0.0), (blocker, long, short), config)
    starts = {j["job"]: j["start_s"] for j in result.jobs}
    assert starts[1] < starts[2]  # a tie in alignment: arrival order


def test_optimus_scales_a_job_out_on_an_empty_cluster_and_finishes_it_sooner():
    job = Job(0, 0.0, "resnet50", 2, 3600.0)
    config = ClusterConfig(servers=1)
    fifo = ClusterSim((job,), config, policies.Fifo(), policies.bin_packing).run()
    assert fifo.metrics["avg_jct_s"] == pytest.approx(3600.0)
    sim, result = run(baselines.optimus(), (job,), config)
    assert sim.max_counts[0][0] == 4  # 2x the request: the cap
    assert result.metrics["avg_jct_s"] < 0.6 * fifo.metrics["avg_jct_s"]
    capped, _ = run(baselines.optimus(worker_factor=1.0), (job,), config)
    assert capped.max_counts[0][0] == 2


def test_optimus_gives_a_ps_job_more_parameter_servers_when_they_help():
    # Servers of 4 GPUs and a PS pool: 8 workers span two servers and send 8 models' worth of
    # traffic to the single PS's NIC, twice what each worker server's NIC carries; a second PS
    # on another machine halves it.
    job = Job(0, 0.0, "vgg16", 4, 3600.0, arch="ps", ps=1)
    config = ClusterConfig(servers=2, gpus_per_server=4, ps_servers=2)
    sim, result = run(baselines.optimus(), (job,), config)
    workers, ps = sim.max_counts[0]
    assert ps == 2 and workers > 4  # (6 here: 7 split 4 + 3 is slower, a local optimum)
    one_ps, slower = run(baselines.optimus(ps_factor=1.0), (job,), config)
    assert one_ps.max_counts[0][1] == 1
    assert result.metrics["avg_jct_s"] < slower.metrics["avg_jct_s"]


def test_dorm_shares_the_gpus_equally_between_equal_jobs():
    config = ClusterConfig(servers=1)  # 8 GPUs
    jobs = tuple(Job(i, 0.0, "resnet50", 8, 1000.0) for i in range(2))
    sim, result = run(baselines.dorm(), jobs, config)
    first = sim.snapshots[0][1]
    assert first == {0: (4, 0), 1: (4, 0)}
    finish = [j["finish_s"] for j in result.jobs]
    assert finish[0] == pytest.approx(finish[1])
    # FIFO runs them one after the other.
    fifo = ClusterSim(jobs, config, policies.Fifo(), policies.bin_packing).run()
    assert sorted(j["start_s"] for j in fifo.jobs) == [0.0, pytest.approx(1000.0)]


def test_dorm_adjusts_at_most_max_adjust_running_jobs_per_round():
    config = ClusterConfig(servers=1)
    first = tuple(Job(i, 0.0, "resnet50", 8, 1000.0) for i in range(2))
    late = Job(2, 10.0, "resnet50", 8, 1000.0)
    sim, _ = run(baselines.dorm(max_adjust=2), (*first, late), config)
    at_10 = next(snap for t, snap in sim.snapshots if t == 10.0)
    assert sorted(w for w, _ in at_10.values()) == [2, 3, 3]  # max-min over 8 GPUs
    frozen, _ = run(baselines.dorm(max_adjust=0), (*first, late), config)
    at_10 = next(snap for t, snap in frozen.snapshots if t == 10.0)
    assert at_10 == {0: (4, 0), 1: (4, 0)}  # no running job may shrink: the new one waits
    # One move allowed: the target is 3/3/2; job 0 (the first of the two equally far from it)
    # moves, job 1 keeps its 4 GPUs, and 0 and 2 share the other 4.
    one, _ = run(baselines.dorm(max_adjust=1), (*first, late), config)
    at_10 = next(snap for t, snap in one.snapshots if t == 10.0)
    assert at_10 == {0: (2, 0), 1: (4, 0), 2: (2, 0)}


def test_rrh_rejects_a_job_whose_utility_is_already_zero():
    config = ClusterConfig(servers=1)
    ok = Job(0, 0.0, "resnet50", 2, 100.0, utility=Utility("deadline", 5.0, target_s=500.0))
    late = Job(1, 0.0, "resnet50", 2, 100.0, utility=Utility("deadline", 50.0, target_s=50.0))
    sim, result = run(baselines.rrh(), (ok, late), config)
    assert sim.rejected == [1]
    assert result.metrics["admitted_fraction"] == 0.5
    assert [j["job"] for j in result.jobs if j.get("admitted", True)] == [0]
    assert sorted(s.job.id for s in sim.finished) == [0]
    # FIFO runs it anyway, for no utility.
    fifo = ClusterSim((ok, late), config, policies.Fifo(), policies.bin_packing).run()
    assert fifo.metrics["jobs_finished"] == 2


def test_rrh_starts_jobs_in_order_of_utility_density():
    config = ClusterConfig(servers=1)
    flat = Utility("sigmoid", 1.0, steepness=0.0)
    blocker = Job(0, 0.0, "resnet50", 8, 100.0, utility=flat)
    cheap = Job(1, 1.0, "resnet50", 8, 100.0, utility=flat)  # 1 per 800 GPU-s
    rich = Job(2, 2.0, "resnet50", 8, 100.0, utility=dataclasses.replace(flat, weight=50.0))
    small = Job(3, 3.0, "resnet50", 8, 10.0, utility=dataclasses.replace(flat, weight=10.0))
    sim, result = run(baselines.rrh(), (blocker, cheap, rich, small), config)
    assert not sim.rejected
    order = [j["job"] for j in sorted(result.jobs, key=lambda j: j["start_s"])]
    # Densities: small 10/80 > rich 50/800 > cheap 1/800.
    assert order == [0, 3, 2, 1]
    fifo = ClusterSim((blocker, cheap, rich, small), config, policies.Fifo(), policies.bin_packing)
    assert [j["job"] for j in sorted(fifo.run().jobs, key=lambda j: j["start_s"])] == [0, 1, 2, 3]


def test_rrh_rejects_a_job_whose_delay_cost_exceeds_its_utility():
    # A queued job worth 100 that just meets its deadline; a later, denser job worth 20 would
    # push it past the deadline: admitting it costs 100 for a gain of 20.
    config = ClusterConfig(servers=1)
    blocker = Job(0, 0.0, "resnet50", 8, 100.0)
    valuable = Job(1, 1.0, "resnet50", 8, 100.0, utility=Utility("deadline", 100.0, target_s=205.0))
    dense = Job(2, 2.0, "resnet50", 8, 10.0, utility=Utility("deadline", 20.0, target_s=1e6))
    sim, result = run(baselines.rrh(), (blocker, valuable, dense), config)
    assert sim.rejected == [2]
    assert result.metrics["total_utility"] == pytest.approx(0.5 + 100.0)
    # Without admission control the dense job goes first and the valuable one misses.
    sim, result = run(baselines.rrh(admit_threshold=-1e9), (blocker, valuable, dense), config)
    assert not sim.rejected
    assert result.metrics["total_utility"] == pytest.approx(0.5 + 20.0)


def test_factories_name_their_policies_and_refuse_unknown_placements():
    for name, factory in baselines.BASELINES.items():
        policy = factory()
        assert policy.scheduler_name == name
        assert callable(policy.place)
        with pytest.raises(ValueError, match="unknown placement"):
            factory(placement="nowhere")
    assert baselines.optimus().placement_name == "optimus"
    assert baselines.dorm(placement="lif").placement_name == "lif"


@pytest.mark.parametrize("name", sorted(baselines.BASELINES))
def test_a_policy_run_twice_gives_what_a_fresh_one_gives(name):
    a, b = trace(40, seed=1), trace(40, seed=2)
    config = ClusterConfig(servers=2)
    reused = baselines.BASELINES[name]()
    run(reused, a, config)
    _, again = run(reused, b, config)
    _, fresh = run(baselines.BASELINES[name](), b, config)
    assert again.jobs == fresh.jobs
