"""Cluster traces: jobs arriving at a shared cluster, and seeded synthetic generators.

A trace is a tuple of ``Job`` records sorted by arrival. A job states what it asks for (workers,
PSs, per-task demands), how long it would take alone at that size (``duration_s``, what every
public trace records) and what finishing it is worth (``Utility``). The simulator turns the
duration into work (training steps) with its own throughput model, as Gavel does.

``philly_like`` follows Gavel's generator (``scheduler/utils.py::generate_job``, read in
``research/cluster.md`` §4.1): Poisson arrivals; duration ``60 * 10**U(1.5, 3)`` s with
probability 0.8, else ``60 * 10**U(3, 4)`` s; 1, 2, 4 or 8 GPUs with probability 0.7, 0.1,
0.15, 0.05; a separately seeded generator for each of job type, inter-arrival, duration and
size. Users, the PS share and utilities are ours (marked below).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

# The models jobs train (workload names; their speed comes from the workload profiles).
JOB_MODELS = ("resnet50", "vgg16", "inception3", "bert-base", "transformer", "gpt2")
GPU_COUNTS = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))  # Gavel / Blox "Philly" split


@dataclass(frozen=True)
class Utility:
    """What finishing a job ``d`` seconds after it arrived is worth (non-increasing in d).

    ``sigmoid`` (OASiS): ``weight / (1 + exp(steepness * (d - target_s) / target_s))``;
    steepness 0 is a time-insensitive job. ``linear``: ``weight * max(0, 1 - d / (2 target))``.
    ``deadline``: ``weight`` when ``d <= target_s``, else 0. The sigmoid is normalised by the
    target so one steepness means the same for short and long jobs (our choice: the paper's
    constants are in slots and not verified, see research/cluster.md §1.3).
    """

    kind: str = "sigmoid"
    weight: float = 1.0
    steepness: float = 0.0
    target_s: float = 3600.0

    def value(self, jct_s: float) -> float:
        if self.kind == "deadline":
            return self.weight if jct_s <= self.target_s else 0.0
        if self.kind == "linear":
            return self.weight * max(0.0, 1.0 - jct_s / (2.0 * self.target_s))
        x = self.steepness * (jct_s - self.target_s) / self.target_s
        if x > 700:
            return 0.0
        return self.weight / (1.0 + math.exp(x))


@dataclass(frozen=True)
class Job:
    """One job of a trace. Demands are per task: (GPUs, CPU cores, memory GB)."""

    id: int
    arrival_s: float
    model: str
    workers: int
    duration_s: float
    arch: str = "allreduce"  # or "ps"
    ps: int = 0
    user: str = "u0"
    worker_demand: tuple[float, float, float] = (1.0, 4.0, 16.0)
    ps_demand: tuple[float, float, float] = (0.0, 4.0, 8.0)
    utility: Utility = field(default_factory=Utility)

    @property
    def gpus(self) -> int:
        return int(round(self.workers * self.worker_demand[0]))


UTILITY_CLASSES = {  # steepness range per OASiS class (ours: normalised, see Utility)
    "insensitive": (0.0, 0.0),
    "sensitive": (1.0, 3.0),
    "critical": (4.0, 6.0),
}


def philly_like(
    n_jobs: int,
    seed: int = 0,
    jobs_per_hour: float = 10.0,
    ps_fraction: float = 0.0,
    users: int = 20,
    models: tuple[str, ...] = JOB_MODELS,
) -> tuple[Job, ...]:
    """``n_jobs`` Philly-like jobs (see the module docstring).

    Ours, not Gavel's: a fraction ``ps_fraction`` of jobs use the PS architecture with one PS
    per two workers (at least one); jobs belong to ``users`` users with Zipf(1) popularity;
    utilities are sigmoids whose target is 1-3x the job's duration, weight U[1, 100], class
    insensitive / sensitive / critical with equal probability.
    """
    if n_jobs < 1:
        raise ValueError("n_jobs must be >= 1")
    if jobs_per_hour <= 0:
        raise ValueError("jobs_per_hour must be > 0")
    rng_type, rng_arrival, rng_duration, rng_size, rng_other = (
        random.Random(f"{seed}:{name}") for name in ("type", "arrival", "duration", "size", "other")
    )
    zipf = [1.0 / (k + 1) for k in range(users)]
    mean_gap_s = 3600.0 / jobs_per_hour
    jobs = []
    now = 0.0
    for i in range(n_jobs):
        if i:
            now += rng_arrival.expovariate(1.0 / mean_gap_s)
        model = rng_type.choice(models)
        if rng_duration.random() < 0.8:
            duration = 60.0 * 10 ** rng_duration.uniform(1.5, 3.0)
        else:
            duration = 60.0 * 10 ** rng_duration.uniform(3.0, 4.0)
        r = rng_size.random()
        gpus = next(n for n, cum in _cumulative(GPU_COUNTS) if r < cum)
        arch = "ps" if rng_other.random() < ps_fraction else "allreduce"
        klass = rng_other.choice(tuple(UTILITY_CLASSES))
        low, high = UTILITY_CLASSES[klass]
        utility = Utility(
            "sigmoid",
            weight=rng_other.uniform(1.0, 100.0),
            steepness=rng_other.uniform(low, high),
            target_s=duration * rng_other.uniform(1.0, 3.0),
        )
        user = rng_other.choices(range(users), weights=zipf)[0]
        jobs.append(
            Job(
                id=i,
                arrival_s=now,
                model=model,
                workers=gpus,
                duration_s=duration,
                arch=arch,
                ps=max(1, gpus // 2) if arch == "ps" else 0,
                user=f"u{user}",
                utility=utility,
            )
        )
    return tuple(jobs)


def _cumulative(dist: tuple[tuple[int, float], ...]) -> list[tuple[int, float]]:
    total, out = 0.0, []
    for value, p in dist:
        total += p
        out.append((value, total))
    out[-1] = (out[-1][0], 1.0 + 1e-12)
    return out
