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

``dl2_like`` draws PS jobs of DL2's eight job types (``DL2_TYPES``, research/cluster.md §3.2).
Both generators take ``arrivals``: Gavel's Poisson process, or a diurnal, bursty "google"
process (``arrival_times``, ``GoogleArrivals``). Importers of public trace files are in
``workloads.importers``.
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
    """One job of a trace. Demands are per task: (GPUs, CPU cores, memory GB). ``model`` is a
    workload name (``workloads.names()``): the throughput model reads its FLOPs and bytes."""

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
    # Measured speed, when the trace brings one (a Gavel trace with Gavel's throughput table):
    # steps per second alone at the requested size. The simulator then uses it as the job's
    # absolute speed and its own model only for how placement and neighbours change it.
    step_rate: float | None = None
    job_type: str = ""  # the trace's own name for the job's kind (e.g. Gavel's job type)

    @property
    def gpus(self) -> float:
        """GPUs of all workers (PAI asks for fractions of a GPU per worker)."""
        return self.workers * self.worker_demand[0]


UTILITY_CLASSES = {  # steepness range per OASiS class (ours: normalised, see Utility)
    "insensitive": (0.0, 0.0),
    "sensitive": (1.0, 3.0),
    "critical": (4.0, 6.0),
}


def sample_utility(rng: random.Random, duration_s: float) -> Utility:
    """The utility every generator and importer gives a job (ours, after OASiS §1.3): a
    sigmoid of class insensitive / sensitive / critical with equal probability (steepness
    uniform in the class's ``UTILITY_CLASSES`` range), weight U[1, 100] and target U[1, 3] x
    the job's duration. Draws exactly four numbers from ``rng``, in that order."""
    klass = rng.choice(tuple(UTILITY_CLASSES))
    low, high = UTILITY_CLASSES[klass]
    return Utility(
        "sigmoid",
        weight=rng.uniform(1.0, 100.0),
        steepness=rng.uniform(low, high),
        target_s=duration_s * rng.uniform(1.0, 3.0),
    )


def philly_like(
    n_jobs: int,
    seed: int = 0,
    jobs_per_hour: float = 10.0,
    ps_fraction: float = 0.0,
    users: int = 20,
    models: tuple[str, ...] = JOB_MODELS,
    arrivals: str | GoogleArrivals = "poisson",
) -> tuple[Job, ...]:
    """``n_jobs`` Philly-like jobs (see the module docstring).

    Ours, not Gavel's: a fraction ``ps_fraction`` of jobs use the PS architecture with one PS
    per two workers (at least one); jobs belong to ``users`` users with Zipf(1) popularity;
    utilities are sigmoids whose target is 1-3x the job's duration, weight U[1, 100], class
    insensitive / sensitive / critical with equal probability (``sample_utility``).
    ``arrivals``: ``"poisson"`` (Gavel's, the default) or ``"google"`` / a ``GoogleArrivals``
    (diurnal and bursty, see ``arrival_times``); only the arrival times change.
    """
    if n_jobs < 1:
        raise ValueError("n_jobs must be >= 1")
    if jobs_per_hour <= 0:
        raise ValueError("jobs_per_hour must be > 0")
    rng_type, rng_arrival, rng_duration, rng_size, rng_other = (
        random.Random(f"{seed}:{name}") for name in ("type", "arrival", "duration", "size", "other")
    )
    zipf = [1.0 / (k + 1) for k in range(users)]
    times = _arrivals(n_jobs, rng_arrival, jobs_per_hour, arrivals)
    jobs = []
    for i, now in enumerate(times):
        model = rng_type.choice(models)
        if rng_duration.random() < 0.8:
            duration = 60.0 * 10 ** rng_duration.uniform(1.5, 3.0)
        else:
            duration = 60.0 * 10 ** rng_duration.uniform(3.0, 4.0)
        r = rng_size.random()
        gpus = next(n for n, cum in _cumulative(GPU_COUNTS) if r < cum)
        arch = "ps" if rng_other.random() < ps_fraction else "allreduce"
        utility = sample_utility(rng_other, duration)
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


# --- Arrival processes (shared by the generators) ---------------------------------------------

ARRIVALS = ("poisson", "google")


@dataclass(frozen=True)
class GoogleArrivals:
    """Parameters of the ``"google"`` arrival process (ours; see ``arrival_times``).

    DL2 (research/cluster.md §3.2) can replay per-slot arrival counts from the Google cluster
    trace (20-minute slots over about a day: one large burst, and a rate that swings over the
    day). We model that shape, not the data: a non-homogeneous Poisson process whose rate
    follows the time of day, plus bursts.

    peak_hour: hour of day (0-24; the trace starts at 00:00) of the highest rate.
    amplitude: relative daily swing a: the steady rate is proportional to
        ``1 + a * cos(2 pi (hour - peak_hour) / 24)`` (0 <= a <= 1).
    burst_fraction: long-run share of jobs that arrive in bursts (0 <= f < 1).
    burst_size: mean jobs per burst (>= 1): 1 + a geometric number.
    burst_gap_s: mean gap between the jobs of one burst (exponential).
    """

    peak_hour: float = 14.0
    amplitude: float = 0.5
    burst_fraction: float = 0.2
    burst_size: float = 8.0
    burst_gap_s: float = 20.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.amplitude <= 1.0:
            raise ValueError("amplitude must be in [0, 1]")
        if not 0.0 <= self.burst_fraction < 1.0:
            raise ValueError("burst_fraction must be in [0, 1)")
        if self.burst_size < 1.0:
            raise ValueError("burst_size must be >= 1")
        if self.burst_gap_s <= 0:
            raise ValueError("burst_gap_s must be > 0")


GOOGLE_ARRIVALS = GoogleArrivals()


def google_rate(
    t_s: float, jobs_per_hour: float, params: GoogleArrivals = GOOGLE_ARRIVALS
) -> float:
    """Expected arrivals per hour at time ``t_s`` under the ``"google"`` process: the daily
    sinusoid of the steady part plus the (time-independent) mean rate of burst jobs. Its
    average over a day is ``jobs_per_hour``."""
    hour = (t_s / 3600.0) % 24.0
    swing = 1.0 + params.amplitude * math.cos(2.0 * math.pi * (hour - params.peak_hour) / 24.0)
    return jobs_per_hour * ((1.0 - params.burst_fraction) * swing + params.burst_fraction)


def arrival_times(
    n_jobs: int,
    jobs_per_hour: float,
    seed: int = 0,
    arrivals: str | GoogleArrivals = "poisson",
) -> list[float]:
    """The ``n_jobs`` sorted arrival times (s) that ``philly_like`` and ``dl2_like`` use for
    this seed (their arrival generator is ``random.Random(f"{seed}:arrival")``). The first job
    arrives at 0 in both processes.

    ``"poisson"``: exponential gaps of mean ``3600 / jobs_per_hour`` s (Gavel's).
    ``"google"`` (or a ``GoogleArrivals``): the first job at 0, then a non-homogeneous Poisson
    process drawn by thinning (Lewis & Shedler) from a bound of the total event rate. Each event
    is either one steady job, at rate ``(1 - f) * jobs_per_hour * (1 + a cos(...))`` per hour,
    or a burst, at rate ``f * jobs_per_hour / burst_size`` per hour, of ``1 + G`` jobs (G
    geometric, mean ``burst_size - 1``) spaced by exponential gaps of mean ``burst_gap_s``.
    The long-run rate is ``jobs_per_hour`` (``google_rate`` gives the rate at a time).
    """
    if n_jobs < 1:
        raise ValueError("n_jobs must be >= 1")
    if jobs_per_hour <= 0:
        raise ValueError("jobs_per_hour must be > 0")
    return _arrivals(n_jobs, random.Random(f"{seed}:arrival"), jobs_per_hour, arrivals)


def _arrivals(
    n_jobs: int, rng: random.Random, jobs_per_hour: float, arrivals: str | GoogleArrivals
) -> list[float]:
    if isinstance(arrivals, GoogleArrivals):
        return _google_arrivals(n_jobs, rng, jobs_per_hour, arrivals)
    if arrivals not in _ARRIVAL_PROCESSES:
        raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)} (got {arrivals!r})")
    return _ARRIVAL_PROCESSES[arrivals](n_jobs, rng, jobs_per_hour)


def _poisson_arrivals(n_jobs: int, rng: random.Random, jobs_per_hour: float) -> list[float]:
    # Draw for draw what philly_like always did, so its default output is unchanged.
    mean_gap_s = 3600.0 / jobs_per_hour
    times, now = [], 0.0
    for i in range(n_jobs):
        if i:
            now += rng.expovariate(1.0 / mean_gap_s)
        times.append(now)
    return times


def _google_arrivals(
    n_jobs: int,
    rng: random.Random,
    jobs_per_hour: float,
    params: GoogleArrivals = GOOGLE_ARRIVALS,
) -> list[float]:
    f, a = params.burst_fraction, params.amplitude
    steady_mean = (1.0 - f) * jobs_per_hour / 3600.0  # per second
    burst_events = f * jobs_per_hour / 3600.0 / params.burst_size
    bound = steady_mean * (1.0 + a) + burst_events
    extra_p = 1.0 / params.burst_size  # geometric "success" probability
    times, t, tail = [0.0], 0.0, 0.0
    # Stop only once no later event can land before a burst already drawn.
    while len(times) < n_jobs or t <= tail:
        t += rng.expovariate(bound)
        hour = (t / 3600.0) % 24.0
        steady = steady_mean * (1.0 + a * math.cos(2.0 * math.pi * (hour - params.peak_hour) / 24))
        u = rng.random() * bound
        if u < steady:
            times.append(t)
        elif u < steady + burst_events:
            extra = 0
            if extra_p < 1.0:
                extra = int(math.log(1.0 - rng.random()) / math.log(1.0 - extra_p))
            s = t
            for _ in range(1 + extra):
                times.append(s)
                s += rng.expovariate(1.0 / params.burst_gap_s)
            tail = max(tail, s)
    times.sort()
    return times[:n_jobs]


_ARRIVAL_PROCESSES = {
    "poisson": _poisson_arrivals,
    "google": _google_arrivals,
}


# --- DL2-style jobs ------------------------------------------------------------------------


@dataclass(frozen=True)
class DL2Type:
    """One of DL2's eight job types (``trace.py`` of pengyanghua/DL2, research/cluster.md §3.2)
    and how we turn it into a ``Job``.

    From DL2: ``name``; ``step_s`` (its ``local_comp_times``: seconds per local step on one
    worker); ``steps_per_epoch`` (its ``epoch_sizes``); ``model_mb`` (``model_sizes``);
    ``epoch_fraction`` (its ``num_epochs`` / ``MAX_NUM_EPOCHS``); ``worker_cpus`` and
    ``ps_cpus`` (the type-specific CPU slots ``trace.py`` keeps beside its uniform default of
    2, one slot read as one core).
    Ours: ``model`` (the nearest of our workloads), ``worker_mem_gb`` (DL2 has no memory
    dimension: 16 GB for image models, 8 GB for text) and ``ps_mem_gb``.
    """

    name: str
    model: str
    step_s: float
    steps_per_epoch: int
    model_mb: float
    epoch_fraction: float
    worker_cpus: float
    ps_cpus: float
    worker_mem_gb: float

    @property
    def ps_mem_gb(self) -> float:
        """Ours: 2 GB plus 4x the model (weights, gradients, optimizer state), rounded up to
        0.5 GB."""
        return math.ceil((2.0 + 4.0 * self.model_mb / 1024.0) * 2.0) / 2.0


DL2_TYPES = (
    DL2Type("resnet-50", "resnet50", 0.449, 115, 102.2, 0.30, 2, 3, 16),
    DL2Type("vgg-16", "vgg16", 0.535, 115, 553.4, 0.96, 2, 4, 16),
    DL2Type("resnext-110", "resnet50", 0.226, 390, 6.92, 0.05, 2, 3, 16),
    DL2Type("inception-bn", "inception3", 0.815, 120, 42.1, 0.54, 2, 3, 16),
    DL2Type("seq2seq", "transformer", 0.075, 780, 36.5, 0.95, 4, 1, 8),
    DL2Type("cnn-text-classification", "bert-base", 0.585, 193, 24.0, 0.46, 2, 3, 8),
    DL2Type("dssm", "bert-base", 0.567, 349, 6.0, 0.33, 4, 1, 8),
    DL2Type("wlm", "gpt2", 0.154, 165, 19.2, 0.23, 1, 1, 8),
)
DL2_WORKERS = ((1, 0.30), (2, 0.25), (4, 0.25), (8, 0.15), (16, 0.05))  # ours; DL2's cap is 16
DL2_PS_PER_WORKER = (0.25, 0.5, 1.0)  # ours, drawn uniformly: DL2 varies the PS:worker ratio


def dl2_like(
    n_jobs: int,
    seed: int = 0,
    jobs_per_hour: float = 20.0,
    arrivals: str | GoogleArrivals = "poisson",
    max_epochs: int = 200,
    users: int = 20,
    types: tuple[DL2Type, ...] = DL2_TYPES,
) -> tuple[Job, ...]:
    """``n_jobs`` DL2-style PS jobs: a type uniformly from ``types`` (DL2's "Normal" job-length
    pattern), its epochs ``int(epoch_fraction * max_epochs)`` times U{90..110}/100 (DL2's
    non-fixed length; ``max_epochs`` 200 is the default its ``parameters.py`` names), per-task
    demands from the type (``DL2Type``), arrivals as in ``arrival_times``.

    Ours, not DL2's (DL2's scheduler chooses the sizes; here the user asks for them, as in
    Harmony): workers from ``DL2_WORKERS``; PSs ``max(1, round(workers * r))`` with r from
    ``DL2_PS_PER_WORKER``; every worker holds one GPU (DL2 gives cnn-text-classification and
    dssm CPU-only workers, which our GPU throughput model cannot represent); the duration alone
    at the requested size is ``epochs * steps_per_epoch * step_s / workers`` (ideal data
    parallelism: the simulator's throughput model adds communication on its own); users and
    utilities as in ``philly_like``. ``job_type`` keeps DL2's type name.
    """
    if n_jobs < 1:
        raise ValueError("n_jobs must be >= 1")
    if jobs_per_hour <= 0:
        raise ValueError("jobs_per_hour must be > 0")
    if max_epochs < 1:
        raise ValueError("max_epochs must be >= 1")
    if not types:
        raise ValueError("types must not be empty")
    rng_arrival = random.Random(f"{seed}:arrival")  # as arrival_times (and philly_like)
    rng_type, rng_epochs, rng_size, rng_other = (
        random.Random(f"{seed}:dl2-{name}") for name in ("type", "epochs", "size", "other")
    )
    times = _arrivals(n_jobs, rng_arrival, jobs_per_hour, arrivals)
    zipf = [1.0 / (k + 1) for k in range(users)]
    jobs = []
    for i, now in enumerate(times):
        kind = rng_type.choice(types)
        epochs = max(1, int(kind.epoch_fraction * max_epochs)) * rng_epochs.randint(90, 110) / 100
        r = rng_size.random()
        workers = next(n for n, cum in _cumulative(DL2_WORKERS) if r < cum)
        ps = max(1, round(workers * rng_size.choice(DL2_PS_PER_WORKER)))
        duration = epochs * kind.steps_per_epoch * kind.step_s / workers
        user = rng_other.choices(range(users), weights=zipf)[0]
        jobs.append(
            Job(
                id=i,
                arrival_s=now,
                model=kind.model,
                workers=workers,
                duration_s=duration,
                arch="ps",
                ps=ps,
                user=f"u{user}",
                worker_demand=(1.0, kind.worker_cpus, kind.worker_mem_gb),
                ps_demand=(0.0, kind.ps_cpus, kind.ps_mem_gb),
                utility=sample_utility(rng_other, duration),
                job_type=kind.name,
            )
        )
    return tuple(jobs)
