"""The cluster arena's simulator core: analytic cases, invariants for every scheduler x
placement pair, and the throughput model's placement effects."""

from __future__ import annotations

import dataclasses

import pytest

from runners.cluster import policies
from runners.cluster.sim import ClusterConfig, ClusterSim
from runners.cluster.speed import SpeedModel
from workloads.traces import Job, Utility, philly_like

SCHEDULERS = {
    "fifo": policies.Fifo,
    "drf": policies.Drf,
    "srtf": policies.Srtf,
    "tiresias": policies.Tiresias,
}


class CheckedSim(ClusterSim):
    """Checks capacity and bookkeeping after every scheduling round."""

    def _update_rates(self) -> None:
        super()._update_rates()
        caps = self.config.capacities()
        used = [[0.0, 0.0, 0.0] for _ in caps]
        for state in self.running.values():
            assert state.job.arrival_s <= self.now, "started before it arrived"
            for server, (w, p) in state.placement.items():
                assert not w or server in self.config.worker_servers, "worker off the GPU pool"
                assert not p or server in self.config.ps_hosts, "PS off the PS pool"
                for k in range(3):
                    used[server][k] += w * state.job.worker_demand[k] + p * state.job.ps_demand[k]
        for server, cap in enumerate(caps):
            for k in range(3):
                assert used[server][k] <= cap[k] + 1e-9, f"server {server} over capacity"
                assert abs(self.free[server][k] - (cap[k] - used[server][k])) < 1e-6


def trace(n: int = 120, seed: int = 3, ps_fraction: float = 0.3) -> tuple[Job, ...]:
    # Short jobs so a test finishes quickly: durations scaled down 20x.
    jobs = philly_like(n, seed=seed, jobs_per_hour=30, ps_fraction=ps_fraction)
    return tuple(dataclasses.replace(j, duration_s=j.duration_s / 20) for j in jobs)


@pytest.mark.parametrize("ps_servers", [0, 2], ids=["one-pool", "ps-pool"])
@pytest.mark.parametrize("placement", sorted(policies.PLACEMENTS))
@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_every_scheduler_and_placement_keeps_capacity_and_finishes_every_job(
    scheduler, placement, ps_servers
):
    jobs = trace()
    sim = CheckedSim(
        jobs,
        ClusterConfig(servers=4, ps_servers=ps_servers),
        SCHEDULERS[scheduler](),
        policies.PLACEMENTS[placement],
    )
    result = sim.run()
    assert result.metrics["jobs_finished"] == len(jobs)
    for state in sim.finished:
        assert state.first_start >= state.job.arrival_s
        assert state.done == pytest.approx(state.work)
        # Never faster than alone and packed (interference and sharing only slow jobs down).
        assert state.finish - state.first_start >= state.job.duration_s * (1 - 1e-9)
    if scheduler in ("fifo", "drf"):
        assert result.metrics["preemptions"] == 0  # these never preempt


def test_a_job_alone_takes_exactly_its_trace_duration():
    job = Job(id=0, arrival_s=100.0, model="resnet50", workers=4, duration_s=3600.0)
    result = ClusterSim(
        (job,), ClusterConfig(servers=2), policies.Fifo(), policies.bin_packing
    ).run()
    assert result.jobs[0]["start_s"] == 100.0
    assert result.jobs[0]["finish_s"] == pytest.approx(3700.0)
    assert result.metrics["avg_jct_s"] == pytest.approx(3600.0)


def test_fifo_blocks_behind_the_head_and_drf_backfills():
    big = Job(id=0, arrival_s=0.0, model="resnet50", workers=8, duration_s=1000.0)
    bigger = Job(id=1, arrival_s=1.0, model="resnet50", workers=8, duration_s=1000.0)
    small = Job(id=2, arrival_s=2.0, model="resnet50", workers=1, duration_s=10.0, user="u1")
    config = ClusterConfig(servers=1, gpus_per_server=9)
    fifo = ClusterSim((big, bigger, small), config, policies.Fifo(), policies.bin_packing).run()
    starts = {j["job"]: j["start_s"] for j in fifo.jobs}
    assert starts[2] == pytest.approx(1000.0)  # behind the head, until the head starts
    drf = ClusterSim((big, bigger, small), config, policies.Drf(), policies.bin_packing).run()
    starts = {j["job"]: j["start_s"] for j in drf.jobs}
    assert starts[2] == 2.0  # backfilled into the free GPU


def test_srtf_preempts_a_long_job_for_a_short_one():
    long = Job(id=0, arrival_s=0.0, model="resnet50", workers=8, duration_s=1000.0)
    short = Job(id=1, arrival_s=100.0, model="resnet50", workers=8, duration_s=50.0)
    result = ClusterSim(
        (long, short), ClusterConfig(servers=1), policies.Srtf(), policies.bin_packing
    ).run()
    by_id = {j["job"]: j for j in result.jobs}
    assert by_id[1]["finish_s"] == pytest.approx(150.0)
    assert by_id[0]["finish_s"] == pytest.approx(1050.0)  # progress kept across preemption
    assert by_id[0]["starts"] == 2


def test_tiresias_demotes_a_job_once_it_crosses_a_threshold():
    old = Job(id=0, arrival_s=0.0, model="resnet50", workers=8, duration_s=2000.0)
    new = Job(id=1, arrival_s=10.0, model="resnet50", workers=8, duration_s=100.0)
    # Thresholds in GPU-seconds: 8 GPUs cross 800 GPU-s after 100 s.
    scheduler = policies.Tiresias(thresholds_s=(800.0,))
    result = ClusterSim((old, new), ClusterConfig(servers=1), scheduler, policies.bin_packing).run()
    by_id = {j["job"]: j for j in result.jobs}
    assert by_id[1]["start_s"] == pytest.approx(100.0)  # when the old job was demoted
    assert by_id[0]["starts"] == 2


def test_spreading_a_job_over_servers_costs_communication():
    model = SpeedModel()
    job = Job(id=0, arrival_s=0.0, model="vgg16", workers=8, duration_s=1.0)
    packed = model.step_time(job, [(0, 8, 0)], {0: 0}, {})
    spread = model.step_time(job, [(0, 4, 0), (1, 4, 0)], {0: 1, 1: 1}, {})
    shared = model.step_time(job, [(0, 4, 0), (1, 4, 0)], {0: 3, 1: 1}, {})
    assert packed < spread < shared  # intra-server link > NIC > a third of a NIC
    alone = model.step_time(job, [(0, 8, 0)], {}, {})
    crowded = model.step_time(job, [(0, 8, 0)], {}, {0: ["gpt2", "bert-base"]})
    assert crowded > alone  # interference from co-located jobs


def test_ps_traffic_between_colocated_tasks_is_free():
    model = SpeedModel()
    job = Job(id=0, arrival_s=0.0, model="resnet50", workers=4, duration_s=1.0, arch="ps", ps=2)
    local = model.step_time(job, [(0, 4, 2)], {}, {})
    remote = model.step_time(job, [(0, 4, 0), (1, 0, 2)], {0: 1, 1: 1}, {})
    assert local == pytest.approx(model.speed("resnet50").compute_s)
    assert remote > local


def test_a_task_larger_than_any_server_is_refused_with_the_job_named():
    job = Job(
        id=7,
        arrival_s=0.0,
        model="resnet50",
        workers=1,
        duration_s=1.0,
        worker_demand=(1.0, 999.0, 1.0),
    )
    with pytest.raises(ValueError, match="job 7: a worker demands"):
        ClusterSim((job,), ClusterConfig(), policies.Fifo(), policies.bin_packing)


def test_the_synthetic_trace_is_seeded_and_follows_the_philly_split():
    a, b = philly_like(4000, seed=5), philly_like(4000, seed=5)
    assert a == b and a != philly_like(4000, seed=6)
    ones = sum(j.workers == 1 for j in a) / len(a)
    assert 0.67 < ones < 0.73  # 70% single-GPU jobs
    assert all(60 * 10**1.5 - 1e-6 <= j.duration_s <= 60 * 10**4 + 1e-6 for j in a)
    assert all(x.arrival_s <= y.arrival_s for x, y in zip(a, a[1:], strict=False))


def test_utilities_never_increase_with_completion_time():
    for u in (
        Utility("sigmoid", 10, 5, 100),
        Utility("linear", 10, 0, 100),
        Utility("deadline", 10, 0, 100),
    ):
        values = [u.value(d) for d in (0, 50, 100, 150, 400, 10**6)]
        assert values == sorted(values, reverse=True) and values[0] > 0
