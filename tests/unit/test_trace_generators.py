"""Seeded trace generators: philly_like's default output is unchanged, dl2_like's jobs follow
DL2's type table, and the "google" arrival process follows its documented rate."""

from __future__ import annotations

import dataclasses
import math

import pytest

from workloads.importers import validate_jobs
from workloads.traces import (
    DL2_PS_PER_WORKER,
    DL2_TYPES,
    DL2_WORKERS,
    GOOGLE_ARRIVALS,
    GoogleArrivals,
    Utility,
    arrival_times,
    dl2_like,
    google_rate,
    philly_like,
)

# philly_like(3, seed=7, jobs_per_hour=30, ps_fraction=0.5) as generated before the arrival
# processes and dl2_like were added: the default output must stay exactly this.
PHILLY_GOLDEN = [
    (0.0, "vgg16", 1, 34864.10779226215, "ps", 1, "u2", 71.74371742152859, 99836.94140847454),
    (77.77407732109344, "resnet50", 1, 2460.84627458473, "allreduce", 0, "u14", 86.31565862690265,
     4783.394758763277),
    (133.94469989815704, "inception3", 1, 8368.680723580906, "ps", 1, "u1", 23.13536530677344,
     24377.918467270763),
]  # fmt: skip


def test_philly_like_default_output_is_unchanged():
    jobs = philly_like(3, seed=7, jobs_per_hour=30, ps_fraction=0.5)
    got = [
        (j.arrival_s, j.model, j.workers, j.duration_s, j.arch, j.ps, j.user)
        + (j.utility.weight, j.utility.target_s)
        for j in jobs
    ]
    assert got == PHILLY_GOLDEN
    assert jobs[2].utility == Utility("sigmoid", 23.13536530677344, 0.0, 24377.918467270763)
    assert philly_like(50, seed=2, arrivals="poisson") == philly_like(50, seed=2)


def test_arrival_times_are_the_generators_arrivals():
    for arrivals in ("poisson", "google"):
        jobs = philly_like(200, seed=4, jobs_per_hour=12, arrivals=arrivals)
        assert [j.arrival_s for j in jobs] == arrival_times(200, 12, seed=4, arrivals=arrivals)
        dl2 = dl2_like(200, seed=4, jobs_per_hour=12, arrivals=arrivals)
        assert [j.arrival_s for j in dl2] == arrival_times(200, 12, seed=4, arrivals=arrivals)


def test_google_arrivals_change_only_the_arrival_times():
    poisson = philly_like(300, seed=1, arrivals="poisson")
    google = philly_like(300, seed=1, arrivals="google")
    assert [j.arrival_s for j in google] != [j.arrival_s for j in poisson]
    strip = [dataclasses.replace(j, arrival_s=0.0) for j in poisson]
    assert strip == [dataclasses.replace(j, arrival_s=0.0) for j in google]


def test_arrivals_are_deterministic_sorted_and_start_at_zero():
    for arrivals in ("poisson", "google", GoogleArrivals(amplitude=0.9, burst_fraction=0.5)):
        a = arrival_times(2000, 30, seed=9, arrivals=arrivals)
        assert a == arrival_times(2000, 30, seed=9, arrivals=arrivals)
        assert a != arrival_times(2000, 30, seed=10, arrivals=arrivals)
        assert a[0] == 0.0 and a == sorted(a) and len(a) == 2000


def test_unknown_arrivals_and_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="poisson, google"):
        philly_like(5, arrivals="uniform")
    with pytest.raises(ValueError, match="poisson, google"):
        dl2_like(5, arrivals="ali")
    with pytest.raises(ValueError, match="amplitude"):
        GoogleArrivals(amplitude=1.5)
    with pytest.raises(ValueError, match="burst_fraction"):
        GoogleArrivals(burst_fraction=1.0)


def hour_counts(times: list[float]) -> list[int]:
    counts = [0] * 24
    for t in times:
        counts[int(t // 3600) % 24] += 1
    return counts


def test_google_arrivals_keep_the_mean_rate_and_peak_in_the_afternoon():
    jobs_per_hour, n = 10.0, 20000  # about 83 days
    google = arrival_times(n, jobs_per_hour, seed=0, arrivals="google")
    poisson = arrival_times(n, jobs_per_hour, seed=0, arrivals="poisson")
    for times in (google, poisson):
        assert n / (times[-1] / 3600) == pytest.approx(jobs_per_hour, rel=0.06)
    peak = GOOGLE_ARRIVALS.peak_hour
    near = [int(peak + d) % 24 for d in range(-3, 3)]  # the 6 hours around the peak
    far = [int(peak + 12 + d) % 24 for d in range(-3, 3)]  # and around the trough
    g, p = hour_counts(google), hour_counts(poisson)
    ratio = sum(g[h] for h in near) / sum(g[h] for h in far)
    # Documented rate: (1-f)(1 + a cos) + f; averaged over those hours about 1.36 vs 0.64.
    expected = sum(google_rate(h * 3600 + 1800, 1.0) for h in near) / sum(
        google_rate(h * 3600 + 1800, 1.0) for h in far
    )
    assert expected == pytest.approx(2.1, abs=0.1)
    assert ratio == pytest.approx(expected, rel=0.15)
    assert sum(p[h] for h in near) / sum(p[h] for h in far) == pytest.approx(1.0, abs=0.1)


def test_google_arrivals_follow_the_documented_hourly_rate():
    jobs_per_hour, n = 20.0, 60000  # 125 days: each hour-of-day bin holds ~2,500 jobs
    times = arrival_times(n, jobs_per_hour, seed=3, arrivals="google")
    days = times[-1] / 86400
    for hour, count in enumerate(hour_counts(times)):
        expected = google_rate(hour * 3600 + 1800, jobs_per_hour) * days
        assert count == pytest.approx(expected, rel=0.2), hour
    assert sum(google_rate(h * 3600 + 1800, 7.0) for h in range(24)) / 24 == pytest.approx(7.0)


def test_google_arrivals_come_in_bursts():
    # Jobs of a burst are spaced by burst_gap_s (20 s) on average: gaps under 10 s are about
    # 3x as common as in a Poisson stream of the same mean rate (mean gap 360 s here).
    def short_gaps(times: list[float]) -> int:
        return sum(1 for a, b in zip(times, times[1:], strict=False) if b - a < 10)

    google = arrival_times(5000, 10, seed=5, arrivals="google")
    poisson = arrival_times(5000, 10, seed=5, arrivals="poisson")
    assert short_gaps(google) > 2.5 * short_gaps(poisson)
    calm = arrival_times(5000, 10, seed=5, arrivals=GoogleArrivals(burst_fraction=0.0))
    assert short_gaps(calm) < 1.5 * short_gaps(poisson)


def test_dl2_like_is_deterministic_for_a_seed():
    assert dl2_like(300, seed=2) == dl2_like(300, seed=2)
    assert dl2_like(300, seed=2) != dl2_like(300, seed=3)


def test_dl2_like_jobs_follow_the_type_table():
    jobs = dl2_like(2000, seed=0, jobs_per_hour=40)
    validate_jobs(jobs)
    types = {t.name: t for t in DL2_TYPES}
    seen_types, seen_workers = set(), set()
    for job in jobs:
        kind = types[job.job_type]
        seen_types.add(kind.name)
        seen_workers.add(job.workers)
        assert job.model == kind.model and job.arch == "ps"
        assert job.worker_demand == (1.0, kind.worker_cpus, kind.worker_mem_gb)
        assert job.ps_demand == (0.0, kind.ps_cpus, kind.ps_mem_gb)
        assert job.ps in {max(1, round(job.workers * r)) for r in DL2_PS_PER_WORKER}
        # duration = epochs * steps/epoch * s/step / workers, epochs within 90-110 % of nominal
        epochs = job.duration_s * job.workers / (kind.steps_per_epoch * kind.step_s)
        nominal = max(1, int(kind.epoch_fraction * 200))
        assert 0.9 * nominal - 1e-6 <= epochs <= 1.1 * nominal + 1e-6
    assert seen_types == set(types)
    assert seen_workers == {n for n, _ in DL2_WORKERS}
    assert jobs[0].arrival_s == 0.0
    assert math.isclose(len(jobs) / (jobs[-1].arrival_s / 3600), 40, rel_tol=0.1)


def test_dl2_ps_memory_grows_with_the_model():
    by_name = {t.name: t for t in DL2_TYPES}
    assert by_name["vgg-16"].ps_mem_gb > by_name["resnet-50"].ps_mem_gb >= 2.0
    assert all(t.ps_mem_gb * 2 == int(t.ps_mem_gb * 2) for t in DL2_TYPES)


def test_dl2_like_options():
    short = dl2_like(100, seed=1, max_epochs=20)
    long = dl2_like(100, seed=1, max_epochs=200)
    assert sum(j.duration_s for j in short) < sum(j.duration_s for j in long) / 5
    only_vgg = dl2_like(50, seed=1, types=DL2_TYPES[1:2])
    assert {j.model for j in only_vgg} == {"vgg16"}
    with pytest.raises(ValueError):
        dl2_like(0)
