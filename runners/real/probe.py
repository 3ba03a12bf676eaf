"""Measure the real network of real runs: gloo all-reduce times over a range of sizes, on
loopback or on the emulated testbed, with the same launcher as training runs.

``probe(workers, bandwidth_gbps, work)`` starts ``workers`` ranks (``python -m
runners.real.probe JOB_DIR`` under torchrun) that time all-reduces of each size (median of
``repeats`` after a warm-up) and returns ``[(bytes, seconds), ...]``; ``fit_alpha_beta`` turns
them into the simulator's ring all-reduce parameters. ``overlap(model, ...)`` measures how much
a model's forward + backward slows down while the rank's network is busy (the simulator's
``cluster.overlap_slowdown``) and the other way round, small all-reduces' latency and large
ones' slow-down while the rank computes against while it idles (``cluster.busy_latency_us``,
``latency_us`` and ``overlap_comm_slowdown`` of ``fidelity --latency split``); ``split``
times reduce-scatter and all-gather against the all-reduce (the simulator's
``cluster.reduce_scatter_cost`` / ``all_gather_cost``); ``ps_overlap`` is the
parameter-server arena's counterpart of ``overlap``, with server processes beside the
workers, and ``ps_message_cpu`` the compute time one PS message takes from a backward it
overlaps and the host's CPU time for it, every process together; ``horovod_cpu`` the
compute time one cycle of the real Horovod with a collective takes from a backward it
overlaps, and a step's slow-down beside its idle loop.
``runners.fidelity.calibrate`` uses all seven.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import priority
from . import testbed as tb

_PRIORITY = "normal"  # the communication threads' in this probe process (its job's)
_PS_TRANSPORT = "blocking"  # the PS probes' transport in this process (its job's)


def _communication() -> Any:
    """The block that starts communication threads, at the calibration's priority
    (``runners.real.priority``): probes measure what real runs meet."""
    return priority.communication_threads(_PRIORITY)


def _ps_channel(rank: int, cv: Any, on_message: Any, numel: int) -> Any:
    """The PS probes' transport, as a real run's (``runners.real.ps.open_channel``): the
    job's ``ps_transport``, for messages of at most ``numel`` values (every message of a PS
    probe has at most that many)."""
    import torch.distributed as dist

    from .ps import open_channel

    table = list(range(dist.get_world_size()))  # logical rank = dist rank here
    return open_channel(_PS_TRANSPORT, rank, table, cv, on_message, numel)


DEFAULT_SIZES = (4096, 16384, 65536, 262144, 1048576, 2097152, 4194304, 8388608)


def probe(
    workers: int,
    bandwidth_gbps: float | None,
    work: Path,
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    repeats: int = 11,
    threads: int = 1,
    comm_priority: str = "normal",
    latency_us: float = 0.0,
) -> list[tuple[int, float]]:
    """Median all-reduce time per size: on loopback when ``bandwidth_gbps`` is None, else on
    the emulated testbed with every NIC shaped to it (root only: ``TestbedError`` otherwise)
    and ``latency_us`` a way added (``runners.real.testbed``: netem or the delay line)."""
    rows = _launch(
        {"sizes": list(sizes), "repeats": repeats},
        workers, bandwidth_gbps, work, threads, comm_priority, latency_us=latency_us,
    )  # fmt: skip
    return [(int(size), float(seconds)) for size, seconds in rows]


SPLIT_SIZES = (262144, 1048576, 4194304)


def split(
    workers: int,
    bandwidth_gbps: float | None,
    work: Path,
    sizes: tuple[int, ...] = SPLIT_SIZES,
    repeats: int = 11,
    threads: int = 1,
    comm_priority: str = "normal",
) -> list[tuple[int, float, float, float]]:
    """Per size, the median time of an all-reduce, a reduce-scatter and an all-gather of the
    same tensor (DeAR's split collectives), as ``[(bytes, all-reduce s, reduce-scatter s,
    all-gather s), ...]``; where ``probe`` runs them."""
    rows = _launch(
        {"split_sizes": list(sizes), "repeats": repeats},
        workers, bandwidth_gbps, work, threads, comm_priority,
    )  # fmt: skip
    return [(int(s), float(ar), float(rs), float(ag)) for s, ar, rs, ag in rows]


def split_costs(rows: list[tuple[int, float, float, float]]) -> tuple[float, float]:
    """The simulator's ``reduce_scatter_cost`` and ``all_gather_cost``: the median over sizes
    of each collective's time over the all-reduce's."""
    rs = statistics.median(r / ar for _, ar, r, _ in rows)
    ag = statistics.median(g / ar for _, ar, _, g in rows)
    return rs, ag


@dataclass(frozen=True)
class OverlapProbe:
    """What ``overlap`` measures (every value the slowest rank's; latencies per ring step)."""

    slowdown: float  # forward + backward while 1 MiB all-reduces go, over alone, minus 1 (>= 0)
    latency_busy_s: float  # a 4 KiB all-reduce back to back while the rank computes
    latency_idle_s: float  # the same while the rank idles
    comm_slowdown: float  # a 1 MiB all-reduce's time while computing over idle, minus 1 (>= 0)
    latency_engine_s: float  # a 4 KiB all-reduce in a stream through the lab's engine, idle
    collective_cpu_s: float = 0.0  # compute time an engine collective takes from a backward
    negotiation_cpu_s: float = 0.0  # the same of a round, beyond the gradient collectives'
    # the first two again with the engine issuing from the gradient hooks (``dispatch: auto``
    # on a first-ready-first plan), where the two above go through its communication thread
    latency_engine_inline_s: float = 0.0
    collective_cpu_inline_s: float = 0.0


def overlap(
    model: str,
    workers: int,
    bandwidth_gbps: float | None,
    work: Path,
    steps: int = 15,
    threads: int = 1,
    comm_priority: str = "normal",
    latency_us: float = 0.0,
) -> OverlapProbe:
    """How computing and communicating slow each other down on this machine: every rank
    times forward + backward of ``model`` (its real loss, the default batch) ``steps`` times
    alone, then as many times while a thread of its own keeps 1 MiB all-reduces going, then
    again while the thread keeps 4 KiB all-reduces going; then the same thread keeps each size
    going as long while the rank idles. The slow-down is ``median(busy) / median(alone) - 1``;
    the all-reduce times are 10 %-trimmed means of back-to-back collectives (what a stream of
    them pays), the 4 KiB ones per ring step (``/ 2(n-1)``), the 1 MiB ones as the ratio of
    their time while computing to their time while idle (the simulator's
    ``overlap_comm_slowdown``). Last, ``latency_engine_s``: the same 4 KiB all-reduces on idle
    ranks, but issued by the lab's real engine (``_engine_stream``), as training runs issue
    them: asynchronous, from its communication thread, each completion handed back to the
    waiting threads (per ring step, 10 %-trimmed mean); and ``collective_cpu_s``, the compute
    time such a collective takes from a backward pass it overlaps (``_engine_cpu``), then
    ``negotiation_cpu_s``, what a negotiation round takes beyond the gradient collectives'
    (``_engine_cpu`` with ``negotiate``). These three go through the engine's communication
    thread (``dispatch: thread``), as the plans that reorder are issued; ``latency_engine_inline_s``
    and ``collective_cpu_inline_s`` are the first two with each collective issued from the
    gradient hook that releases it (``dispatch: auto`` on this first-ready-first plan), as
    WFBP, DDP's buckets and FIFO delayed all-reduce are. ``latency_us``: added a way on the
    shaped network, as ``probe``'s."""
    values = _launch(
        {"overlap_model": model, "steps": steps},
        workers, bandwidth_gbps, work, threads, comm_priority, latency_us=latency_us,
    )  # fmt: skip
    alone, busy, small_busy, big_busy, big_idle, small_idle, engine, cpu, rounds = values[:9]
    engine_inline, cpu_inline = values[9:]
    steps_per = 2 * (workers - 1)
    return OverlapProbe(
        slowdown=max(0.0, busy / alone - 1.0),
        latency_busy_s=small_busy / steps_per,
        latency_idle_s=small_idle / steps_per,
        comm_slowdown=max(0.0, big_busy / big_idle - 1.0),
        latency_engine_s=engine / steps_per,
        collective_cpu_s=cpu,
        negotiation_cpu_s=rounds,
        latency_engine_inline_s=engine_inline / steps_per,
        collective_cpu_inline_s=cpu_inline,
    )


def collective_cpu(
    workers: int,
    bandwidth_gbps: float | None,
    work: Path,
    threads: int = 1,
    comm_priority: str = "normal",
    latency_us: float = 0.0,
) -> float:
    """``overlap``'s ``collective_cpu_inline_s`` alone (``_engine_cpu`` with ``dispatch:
    auto``), in one launch of the ranks: the compute time one collective the lab's engine
    issues from a gradient hook takes from the backward pass it overlaps, the slowest rank's
    (``fidelity``'s interference check, ``runners.fidelity_interference``)."""
    job = {"collective_cpu": {"dispatch": "auto"}}
    values = _launch(
        job, workers, bandwidth_gbps, work, threads, comm_priority, latency_us=latency_us
    )
    return float(values[0])


@dataclass(frozen=True)
class HorovodProbe:
    """What ``horovod_cpu`` measures (each value the median over rounds of the ranks' largest)."""

    cycle_cpu_s: float  # compute time a Horovod cycle with a collective takes from a backward
    idle_slowdown: dict[str, float]  # per model: a step with Horovod idle over without, minus 1


HOROVOD_ROUNDS = 5  # launches of the ranks (Horovod started once in each): their median
HOROVOD_COLLECTIVES = 200  # per round: a second or so of back-to-back collectives


def horovod_cpu(
    workers: int,
    bandwidth_gbps: float | None,
    work: Path,
    models: tuple[str, ...] = (),
    threads: int = 1,
    comm_priority: str = "normal",
    rounds: int = HOROVOD_ROUNDS,
    collectives: int = HOROVOD_COLLECTIVES,
    steps: int = 15,
) -> HorovodProbe:
    """The compute time one cycle of the real Horovod that carries a collective takes from a
    backward pass it overlaps, on this machine and network: the ``horovod`` baseline's
    counterpart of ``overlap``'s ``collective_cpu_s`` (the lab's engine's) and
    ``negotiation_cpu_s``. The ranks run under Horovod as ``horovod`` real runs do
    (``horovodrun --gloo`` on loopback, one namespace per rank on the emulated network; the
    registry entry's default cycle time and fusion threshold; Horovod's threads at
    ``comm_priority``), ``rounds`` times (each a launch of the ranks, Horovod started once in
    each). In each, the ranks meet at a file barrier, and every rank times each model of
    ``models`` for ``steps`` training steps (forward + backward, as ``overlap`` times them,
    after 3 untimed) and the engine probes' synthetic backward (``_synthetic_backward``)
    before Horovod starts, then the steps again with it started and idle. Then a thread issues
    ``collectives`` 4 KiB all-reduces one after another under one name (Horovod's response
    cache hits, as with a training run's gradients), each waited for by polling with the GIL
    released (nothing waits on Horovod during a training run's backward), so that each
    Horovod cycle carries one: its negotiation, a fusion-buffer copy and a gloo all-reduce.
    Meanwhile the rank computes the synthetic backward over and over. ``cycle_cpu_s`` is
    ``_cost_per_event`` over those backward passes, against that backward's median before
    Horovod started (what Horovod's loop costs while it is busy, its idle cycles' share
    included), and the calls' starts; ``idle_slowdown`` per model, the step's median with
    Horovod idle over without it, minus 1 (Horovod's background thread negotiates every cycle
    even with nothing to send; may be negative on a noisy machine). Each value is the median
    over rounds of the largest over the ranks (a synchronous step waits for the slowest).
    Not measured: what a training run's gradient hooks cost (``DistributedOptimizer`` enqueues
    each gradient from the backward), and the fusion-buffer copies of more than 4 KiB."""
    from .. import registry
    from . import hvd

    if hvd.available() is None:
        raise RuntimeError("the real Horovod is not installed here: run `make horovod`")
    settings = hvd.settings_env(registry.get("horovod").defaults())
    job = {"collectives": collectives, "models": list(models), "steps": steps}
    taken = [
        _launch(
            {"horovod_cpu": job},
            workers,
            bandwidth_gbps,
            work,
            threads,
            comm_priority,
            horovod=settings,
        )
        for _ in range(rounds)
    ]
    return HorovodProbe(
        cycle_cpu_s=statistics.median(t["cycle_cpu_s"] for t in taken),
        idle_slowdown={
            model: statistics.median(t["idle_slowdown"][model] for t in taken) for model in models
        },
    )


@dataclass(frozen=True)
class PSProbe:
    """What ``ps_overlap`` measures (every value the slowest rank's)."""

    slowdown: float  # forward + backward while pushing 1 MiB, over alone, minus 1 (>= 0)
    message_busy_s: float  # a 4 KiB stream's time per answered push, the worker computing
    message_idle_s: float  # the same with the worker idle
    half_round_trip_busy_s: float  # half a 4 KiB push-and-pull's round trip, computing
    agg_round_s: float  # a server's aggregation of a round after its last 1 MiB push
    agg_round_small_s: float  # the same, 4 KiB pushes


PS_BIG_ELEMENTS = 1 << 18  # ps_overlap's large pushes: 1 MiB of float32
PS_SMALL_ELEMENTS = 1024  # its small ones: 4 KiB
PS_AGG_GBPS_MAX = 1e7  # cluster.server_agg_gbps's bound: a rate no byte count can be seen at


def aggregation_fit(big_s: float, small_s: float, workers: int) -> tuple[float, float]:
    """The simulator's aggregation of a round of ``workers`` pushes of ``S`` bytes,
    ``fixed + workers * S / rate``, through ``ps_overlap``'s two measured rounds (``big_s``
    after 1 MiB pushes, ``small_s`` after 4 KiB ones): ``(fixed_s, rate in bytes/s)``. A line
    through two points, clamped: where the large round was no slower than the small one, the
    bytes cost nothing measurable (rate ``PS_AGG_GBPS_MAX``) and ``fixed`` is the small
    round's; ``fixed`` is at least 0."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1 (got {workers})")
    span = workers * 4 * (PS_BIG_ELEMENTS - PS_SMALL_ELEMENTS)
    per_byte = max(big_s - small_s, 0.0) / span
    if per_byte <= 0:
        return max(small_s, 0.0), PS_AGG_GBPS_MAX * 1e9 / 8
    fixed = max(small_s - workers * 4 * PS_SMALL_ELEMENTS * per_byte, 0.0)
    return fixed, 1.0 / per_byte


def ps_overlap(
    model: str,
    workers: int,
    servers: int,
    bandwidth_gbps: float | None,
    work: Path,
    steps: int = 15,
    threads: int = 1,
    comm_priority: str = "normal",
    transport: str = "blocking",
    latency_us: float = 0.0,
) -> PSProbe:
    """The parameter-server arena's ``overlap``, on the real PS arena's transport
    (``runners.real.ps.Channel``: a sender and a receiver thread per process, a header and a
    payload per message, gloo point to point): ``workers`` worker and ``servers`` server
    processes, laid out as a real PS run lays them out on this machine (on the emulated network
    each in its own namespace, shaped to ``bandwidth_gbps``). Every worker times forward +
    backward of ``model`` alone, then while its channel pushes to the servers in turn, each
    push answered by the server (a pull of the same size). A server sums each push into its
    key, steps the key (SGD) after as many pushes as there are workers and answers with it.
    Four launches:

    - 1 MiB pushes, as many unanswered as there are servers: the compute slow-down and the
      servers' aggregation of a round after its last push (``_ps_server``: the median time of
      handling a round's completing push, the sum, the step and the copy for the pulls);
    - 4 KiB pushes, as many unanswered as there are servers, while the worker computes and
      while it idles (computing: the small round's aggregation too; ``aggregation_fit`` puts
      the simulator's ``server_agg_fixed_us`` and ``server_agg_gbps`` through the two):
      the 10 %-trimmed mean time between answers, how long a small message holds a worker's
      link when messages follow each other (the simulator's per-transfer ``latency_us``,
      ``busy`` or ``idle`` as ``fidelity --latency`` chooses);
    - 4 KiB pushes one at a time while the worker computes: half the trimmed mean round trip
      (one latency for the push, one for the pull), for reference.

    ``transport``: the PS transport the processes use (``real.ps_transport``: ``blocking``,
    ``Channel``, or ``pipelined``, ``PipelinedChannel``). ``latency_us``: added a way on the
    shaped testbed, on every process's link (``_launch``)."""
    if servers < 1:
        raise ValueError(f"servers must be at least 1 (got {servers})")
    job = {"ps_model": model, "ps_workers": workers, "steps": steps, "ps_transport": transport}
    world = workers + servers

    def launch(elements: int, window: int, compute: bool = True) -> list[float]:
        job_now = {**job, "elements": elements, "window": window, "compute": compute}
        return _launch(
            job_now, world, bandwidth_gbps, work, threads, comm_priority, latency_us=latency_us
        )

    alone, busy, _, agg_big = launch(PS_BIG_ELEMENTS, servers)
    _, _, message_busy, agg_small = launch(PS_SMALL_ELEMENTS, servers)
    _, _, message_idle, _ = launch(PS_SMALL_ELEMENTS, servers, compute=False)
    _, _, round_trip, _ = launch(PS_SMALL_ELEMENTS, 1)
    return PSProbe(
        slowdown=max(0.0, busy / alone - 1.0),
        message_busy_s=message_busy,
        message_idle_s=message_idle,
        half_round_trip_busy_s=round_trip / 2,
        agg_round_s=agg_big,
        agg_round_small_s=agg_small,
    )


class PSMessageCPU(NamedTuple):
    """What one PS message costs (``ps_message_cpu``), in seconds."""

    compute_s: float  # the compute time it takes from a backward it overlaps
    host_s: float  # the host's CPU time, all processes together


PS_CPU_WIDTH = 32  # the synthetic layers' width: 4 KiB messages (``message_cpu_us``)
PS_CPU_BIG_WIDTH = 128  # 64 KiB messages: with the 4 KiB ones, the host CPU's part per byte


def ps_message_cpu(
    workers: int,
    servers: int,
    bandwidth_gbps: float | None,
    work: Path,
    threads: int = 1,
    comm_priority: str = "normal",
    width: int = PS_CPU_WIDTH,
    transport: str = "blocking",
) -> PSMessageCPU:
    """What one PS message costs (``_ps_cpu``): the compute time it takes from a backward it
    overlaps (the simulator's ``cluster.message_cpu_us``) and the host's CPU time for it,
    every process together (``host_message_cpu_us`` and ``host_cpu_ns_per_byte``, through
    two widths), in seconds; ``workers`` worker and ``servers`` server processes laid out as
    a real PS run lays them out (``ps_overlap``'s layout), messages of ``width**2`` floats,
    on the PS ``transport`` (``ps_overlap``'s)."""
    if servers < 1:
        raise ValueError(f"servers must be at least 1 (got {servers})")
    job = {"ps_cpu_workers": workers, "width": width, "ps_transport": transport}
    compute, host = _launch(job, workers + servers, bandwidth_gbps, work, threads, comm_priority)
    return PSMessageCPU(float(compute), float(host))


def host_cpu_fit(small_s: float, big_s: float) -> tuple[float, float]:
    """The host CPU per message as ``fixed + per_byte * S`` through its medians at the two
    widths' message sizes (``PS_CPU_WIDTH``, ``PS_CPU_BIG_WIDTH``): ``(fixed seconds,
    seconds per byte)``. A line that would fall with size (noise on a shared machine) is
    flat at the small messages' value; the fixed part is at least 0."""
    small, big = 4 * PS_CPU_WIDTH**2, 4 * PS_CPU_BIG_WIDTH**2
    per_byte = max(0.0, (big_s - small_s) / (big - small))
    return max(0.0, small_s - per_byte * small), per_byte


def _launch(
    job: dict,
    workers: int,
    bandwidth_gbps: float | None,
    work: Path,
    threads: int,
    comm_priority: str = "normal",
    horovod: dict[str, str] | None = None,
    latency_us: float = 0.0,
) -> Any:
    """Run ``job`` on ``workers`` ranks; ``comm_priority``: the communication threads'
    (``runners.real.priority``, resolved: realtime or normal), as the real runs have it.
    ``horovod``: Horovod's settings (``hvd.settings_env``): the ranks run under the real
    Horovod, started as ``horovod`` real runs are, instead of under torchrun.
    ``latency_us``: added a way on the shaped testbed (``tb.testbed``; ``ValueError`` on
    loopback, which has no links to add it on)."""
    from .launch import _supervise, _supervise_horovod, horovodrun_argv, torchrun_argv

    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps({**job, "comm_priority": comm_priority}))
    (work / "probe.json").unlink(missing_ok=True)
    for stale in work.glob(".barrier-*"):  # an earlier launch's ranks' (``file_barrier``)
        shutil.rmtree(stale)
    module = "runners.real.probe"
    if bandwidth_gbps is None and latency_us:
        raise ValueError("latency can be added on the shaped testbed only, not on loopback")
    if bandwidth_gbps is None:
        if horovod is not None:
            argv = horovodrun_argv(workers, module, work)
        else:
            argv = torchrun_argv(module, work, workers, None, None)
        _supervise([(argv, horovod or {})], work, threads, 0, None)
    else:
        if why_not := tb.can_shape():
            raise tb.TestbedError(why_not)
        with tb.testbed([bandwidth_gbps] * workers, latency_us) as bed:
            if horovod is not None:
                _supervise_horovod(bed, work, horovod, threads, 0, None, module=module)
            else:
                commands = [
                    (bed.wrap(k, torchrun_argv(module, work, workers, k, bed)),
                     {"GLOO_SOCKET_IFNAME": "eth0"})
                    for k in range(workers)
                ]  # fmt: skip
                _supervise(commands, work, threads, 0, None, bed.broken)
    return json.loads((work / "probe.json").read_text())


LARGE_BYTES = 1 << 20  # sizes from here set the bandwidth; smaller ones, the latency


def fit_alpha_beta(rows: list[tuple[int, float]], workers: int) -> tuple[float, float]:
    """Fit ``t(S) = 2(n-1) * alpha + 2(n-1)/n * S / B`` (the simulator's ring all-reduce) to
    measured ``(S bytes, t seconds)``: returns ``(alpha_s, B bytes/s)``.

    Two regimes, because the shaper's token bucket (``tc htb``, burst 256 KiB) lets small
    messages through at line rate: B comes from the Theil-Sen slope (median of the pairwise
    slopes, robust to one disturbed size on a shared machine) over the sizes of at least
    ``LARGE_BYTES`` (the throughput a long transfer sees); alpha is the median, over the
    smaller sizes, of what their time leaves after ``S / B``, per step (0 if negative).
    ``ValueError`` when the times do not grow with size (a disturbed measurement)."""
    n = workers
    steps = 2 * (n - 1)
    large = [(float(s), t) for s, t in rows if s >= LARGE_BYTES]
    small = [(float(s), t) for s, t in rows if s < LARGE_BYTES]
    if len({s for s, _ in large}) < 2 or not small:
        raise ValueError(f"need two sizes of at least {LARGE_BYTES} bytes and one smaller to fit")
    slope = statistics.median(
        (t2 - t1) / (s2 - s1) for s1, t1 in large for s2, t2 in large if s2 > s1
    )
    if slope <= 0:
        raise ValueError("measured times do not grow with size: cannot fit a bandwidth")
    bandwidth = (steps / n) / slope
    alpha = statistics.median((t - steps / n * s / bandwidth) / steps for s, t in small)
    return max(0.0, alpha), bandwidth


def _settings(job: dict[str, Any]) -> None:
    """(A rank.) The job's settings for this process: its communication threads' priority,
    its PS probes' transport."""
    global _PRIORITY, _PS_TRANSPORT
    _PRIORITY = job.get("comm_priority", "normal")
    _PS_TRANSPORT = job.get("ps_transport", "blocking")


def main(argv: list[str]) -> int:
    """(A rank.) Run the job (all-reduce sizes or the overlap measurement); rank 0 writes
    ``probe.json``."""
    import datetime
    import os

    import torch
    import torch.distributed as dist

    work = Path(argv[0])
    job = json.loads((work / "job.json").read_text())
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    _settings(job)
    # as a real run's ranks before their timed loop: no full collection of torch's heap
    # inside a probe (``worker.settle_gc``)
    from .worker import settle_gc

    settle_gc()
    if "horovod_cpu" in job:  # under the real Horovod, not torch.distributed
        rank, out = _horovod_cpu(work, **job["horovod_cpu"])
        if rank == 0:
            _write(work, out)
        return 0
    with _communication():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = int(os.environ["RANK"])
    try:
        if "overlap_model" in job:
            out: Any = _overlap(job["overlap_model"], int(job["steps"]), rank)
        elif "collective_cpu" in job:
            out = [_slowest(_engine_cpu(dispatch=job["collective_cpu"]["dispatch"]))]
        elif "ps_cpu_workers" in job:
            out = _ps_cpu(
                rank,
                int(job["ps_cpu_workers"]),
                batch=int(job.get("batch", CPU_BATCH)),
                width=int(job.get("width", 32)),
            )
        elif "ps_model" in job:
            out = _ps_overlap(
                job["ps_model"],
                int(job["steps"]),
                rank,
                int(job["ps_workers"]),
                int(job["elements"]),
                int(job["window"]),
                bool(job["compute"]),
            )
        elif "split_sizes" in job:
            out = _split(job["split_sizes"], int(job["repeats"]))
        else:
            out = _sizes(job["sizes"], int(job["repeats"]))
    finally:
        dist.destroy_process_group()
    if rank == 0:
        _write(work, out)
    return 0


def _write(work: Path, out: Any) -> None:
    """Rank 0's result, as ``probe.json`` (whole or not at all)."""
    tmp = work / ".probe.json"
    tmp.write_text(json.dumps(out))
    tmp.rename(work / "probe.json")


def _trimmed_mean(values: list[float], cut: float = 0.1) -> float:
    """The mean without the lowest and highest ``cut`` of the values: latencies here are
    bimodal (a communication thread waits for a core, or not), so the median flips between
    the modes from one measurement to the next, while an iteration pays the mean."""
    ordered = sorted(values)
    k = int(len(ordered) * cut)
    kept = ordered[k : len(ordered) - k] or ordered
    return statistics.fmean(kept)


def _slowest(seconds: float) -> float:
    """The largest of the ranks' values (every rank calls it)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _sizes(sizes: list[int], repeats: int) -> list[list[float]]:
    import torch
    import torch.distributed as dist

    rows = []
    for size in sizes:
        buf = torch.ones(max(1, size // 4))
        for _ in range(2):
            dist.all_reduce(buf)
        times = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - start)
        # The slowest rank's view: every rank waits for the collective's end.
        rows.append([size, _slowest(statistics.median(times))])
    return rows


def _split(sizes: list[int], repeats: int) -> list[list[float]]:
    """Per size: the all-reduce, reduce-scatter and all-gather (the calls of the lab's engine,
    ``runners.real.engine``) of one tensor, each the slowest rank's median."""
    import torch
    import torch.distributed as dist

    from .engine import _reduce_scatter

    n = dist.get_world_size()
    rows = []
    for size in sizes:
        full = torch.ones(max(n, size // 4 // n * n))
        shard = torch.empty(full.numel() // n)
        row: list[float] = [size]
        for call in (
            lambda f=full: dist.all_reduce(f),
            lambda f=full, s=shard: _reduce_scatter(s, f),
            lambda f=full, s=shard: dist.all_gather_into_tensor(f, s),
        ):
            for _ in range(2):
                call()
            times = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            row.append(_slowest(statistics.median(times)))
        rows.append(row)
    return rows


def _timed_steps(model_name: str, rank: int, workers: int) -> Callable[[int], list[float]]:
    """``timed(n)``: the times of ``n`` forward + backward passes of ``model_name`` (its real
    loss, the default batch of synthetic data for ``rank`` of ``workers``), in seconds."""
    import torch

    import workloads
    from workloads import data
    from workloads.models import build_model

    torch.manual_seed(0)
    model = build_model(model_name)
    model.train()
    loss_fn = data.loss_fn(model_name)
    batch_size = workloads.load_profile(model_name).default_batch_size
    inputs, targets = data.batch(model_name, "synthetic", batch_size, 0, rank, workers, 0)

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            model.zero_grad(set_to_none=True)
            loss_fn(model(inputs), targets).backward()
            out.append(time.perf_counter() - start)
        return out

    return timed


def _overlap(model_name: str, steps: int, rank: int) -> list[float]:
    import threading

    import torch
    import torch.distributed as dist

    timed = _timed_steps(model_name, rank, dist.get_world_size())
    timed(3)
    dist.barrier()
    alone = statistics.median(timed(steps))
    with _communication():
        group = dist.new_group(backend="gloo")

    def traffic_while(elements: int, work: Callable[[], Any]) -> tuple[Any, float]:
        """What ``work()`` returns, run while a thread keeps all-reduces of ``elements``
        floats going back to back, and the 10 %-trimmed mean of those all-reduces' times."""
        stop = threading.Event()
        buf = torch.ones(elements)
        times: list[float] = []

        def traffic() -> None:
            # Element 0 carries each rank's stop flag: summed by the all-reduce itself, every
            # rank sees the same total in the same round, so all threads leave after it.
            while True:
                buf[0] = 1.0 if stop.is_set() else 0.0
                start = time.perf_counter()
                dist.all_reduce(buf, group=group)
                times.append(time.perf_counter() - start)
                if buf[0] > 0:
                    return

        dist.barrier()
        thread = threading.Thread(target=traffic, daemon=True)
        with _communication():
            thread.start()
        result = work()
        stop.set()
        thread.join()
        return result, _trimmed_mean(times[1:-1] or times)

    def computing() -> float:
        return statistics.median(timed(steps))

    busy, big_busy = traffic_while(1 << 18, computing)  # 1 MiB
    _, small_busy = traffic_while(1024, computing)  # 4 KiB

    def idling() -> None:  # as long as the rank computed, and at least a second
        time.sleep(max(steps * alone, 1.0))

    _, big_idle = traffic_while(1 << 18, idling)
    _, small_idle = traffic_while(1024, idling)
    engine = _engine_stream(dispatch="thread")
    cpu = _engine_cpu(dispatch="thread")
    rounds = _engine_cpu(negotiate=True, per_collective=cpu)
    engine_inline = _engine_stream(dispatch="auto")  # this plan: from the gradient hooks
    cpu_inline = _engine_cpu(dispatch="auto")
    values = (
        alone, busy, small_busy, big_busy, big_idle, small_idle, engine, cpu, rounds,
        engine_inline, cpu_inline,
    )  # fmt: skip
    return [_slowest(v) for v in values]


ENGINE_LAYERS = 32  # the synthetic model's layers, each one 4 KiB all-reduce
ENGINE_ITERATIONS = 20  # measured, after 3 warm-up iterations


def _engine_stream(
    layers: int = ENGINE_LAYERS, iterations: int = ENGINE_ITERATIONS, dispatch: str = "thread"
) -> float:
    """(Every rank.) The 10 %-trimmed mean time of a 4 KiB all-reduce in a stream issued by
    the lab's engine (``runners.real.engine.Engine``, the code training runs use) on idle
    ranks: a synthetic model of ``layers`` bias-free 32 x 32 linear layers (1,024 values each)
    whose forward and backward take almost no time, one all-reduce per layer released as its
    gradient is ready (a first-ready-first plan, global barrier), the main thread waiting for
    them before the next iteration. A collective's time is the engine's own record of it: from
    its issue, or the end of the one before it if that was later, to its completion as the
    engine's threads learn of it. Not a model of training: the same collectives as the idle
    probe's, through the engine's path (its thread hand-offs cost here, on shared cores).
    ``dispatch``: the engine's (``thread``, or ``auto``: this plan from the gradient hooks)."""
    import torch
    from torch import nn

    from .engine import Engine

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(32, 32, bias=False) for _ in range(layers)])
    binding, plan = _layer_plan(model, layers)
    warmup = 3
    times: list[float] = []

    def record(it: int, resource: str, _op: str, _layer: str, start: float, end: float, _b: int):
        if resource == "network" and it >= warmup:
            times.append(end - start)

    with _communication():
        engine = Engine(model, binding, plan, lr=1e-3, record=record, dispatch=dispatch)
    if engine.dispatch != ("thread" if dispatch == "thread" else "inline"):  # the plan's fault
        raise RuntimeError(f"the engine probe asked dispatch {dispatch}, got {engine.dispatch}")
    inputs = torch.randn(8, 32)
    for it in range(warmup + iterations):
        engine.begin(it)
        model(inputs).square().mean().backward()
    engine.finish()
    return _trimmed_mean(times)


def _layer_plan(model: Any, layers: int) -> tuple[Any, Any]:
    """The engine probes' binding of a synthetic model (one layer per module) and its plan:
    one all-reduce per layer, released as its gradient is ready (first ready, first issued),
    no credit limit, a global barrier."""
    from ..policies.allreduce import CommPlan, CommTask
    from .engine import bind_layers

    binding = bind_layers(model, [str(i) for i in range(layers)])
    tasks = tuple(
        CommTask(layers=(i,), size_bytes=binding.numel(i) * 4, priority=layers - 1 - i)
        for i in range(layers)
    )
    return binding, CommPlan(tasks=tasks, credit_bytes=float("inf"), cross_barrier=False)


CPU_BATCH = 1024  # the synthetic model's batch in _engine_cpu: a backward of a few ms alone


SYNTHETIC_WARMUP = 3  # the synthetic backward's untimed first iterations


def _synthetic_backward(
    layers: int, iterations: int, batch: int, width: int = 32
) -> tuple[Any, Any, float]:
    """The CPU probes' synthetic model (``layers`` bias-free ``width`` x ``width`` linear
    layers, seeded), its input (``batch`` rows) and the median time of its backward alone
    (plain autograd, no hooks) over ``iterations`` after ``SYNTHETIC_WARMUP``."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    inputs = torch.randn(batch, width)
    alone = []
    for it in range(SYNTHETIC_WARMUP + iterations):
        start, end = _backward_window(model, inputs)
        if it >= SYNTHETIC_WARMUP:
            alone.append(end - start)
        model.zero_grad(set_to_none=True)
    return model, inputs, statistics.median(alone)


def _cost_per_event(
    windows: list[tuple[float, float]],
    events: list[float],
    base: float,
    known: list[float] | None = None,
    known_cost: float = 0.0,
) -> float:
    """The median over ``windows`` (backward passes, start and end) of the time each took
    beyond ``base``, less ``known_cost`` for each of the ``known`` instants in it, over the
    ``events`` (instants) that fell in it: what one event cost the compute (0 when no window
    had any)."""
    per_event = []
    for start, end in windows:
        overlapping = sum(start <= t < end for t in events)
        if overlapping:
            paid = known_cost * sum(start <= t < end for t in known or ())
            per_event.append(max(0.0, (end - start - base - paid) / overlapping))
    return statistics.median(per_event) if per_event else 0.0


def _engine_cpu(
    layers: int = ENGINE_LAYERS,
    iterations: int = ENGINE_ITERATIONS,
    batch: int = CPU_BATCH,
    negotiate: bool = False,
    per_collective: float = 0.0,
    dispatch: str = "thread",
) -> float:
    """(Every rank.) The compute time one collective issued by the lab's engine takes from a
    backward pass it overlaps, on this machine at this process's communication-thread
    priority: ``_engine_stream``'s synthetic model (``layers`` bias-free 32 x 32 linear
    layers, one 4 KiB all-reduce per layer) with a batch of ``batch`` rows, so that its
    backward computes for a few milliseconds. Its backward is timed alone (plain autograd, no
    hooks) and then through the engine, each layer's all-reduce released as its gradient is
    ready; the engine's record gives each collective's start. The value is the median over
    iterations of (backward time through the engine - the median alone) / the collectives
    that started during that backward (the slowest rank's): what a collective's threads (the
    engine's dispatcher, gloo's, the completion hand-off) and the engine's hooks cost the
    compute on shared cores. Not a model of training: a synthetic model's stream.
    ``dispatch``: the engine's (``thread``, or ``auto``: from the gradient hooks, where the
    hook's issue is part of the backward it times).

    With ``negotiate``, the engine negotiates each dispatch decision (a round: one 16-byte
    MIN all-reduce on a group of its own, issued by its dispatcher and waited for there, as
    for reordering plans), and the value is per round instead: each iteration's backward time
    beyond the median alone, less ``per_collective`` for each collective that started in it,
    over the rounds that started in it (median over iterations)."""

    from .engine import Engine

    model, inputs, base = _synthetic_backward(layers, iterations, batch)
    warmup = SYNTHETIC_WARMUP
    binding, plan = _layer_plan(model, layers)
    starts: list[float] = []
    rounds: list[float] = []

    def record(it: int, resource: str, _op: str, _layer: str, start: float, _e: float, _b: int):
        if resource == "network":
            starts.append(start)

    with _communication():
        engine = Engine(model, binding, plan, lr=1e-9, negotiate=negotiate, record=record,
                        on_negotiation=rounds.append, dispatch=dispatch)  # fmt: skip
    windows = []
    for it in range(warmup + iterations):
        engine.begin(it)  # waits for the previous iteration's collectives
        window = _backward_window(model, inputs)
        if it >= warmup:
            windows.append(window)
    engine.finish()
    if negotiate:
        return _cost_per_event(windows, rounds, base, known=starts, known_cost=per_collective)
    return _cost_per_event(windows, starts, base)


def _backward_window(model: Any, inputs: Any) -> tuple[float, float]:
    """The synthetic model's forward, then its backward timed: ``(start, end)``."""
    loss = model(inputs).square().mean()
    start = time.perf_counter()
    loss.backward()
    return start, time.perf_counter()


HOROVOD_POLL_S = 0.0005  # the stream's wait between polls of a collective (GIL released)


def _horovod_cpu(
    work: Path,
    collectives: int,
    models: list[str],
    steps: int,
    layers: int = ENGINE_LAYERS,
    iterations: int = ENGINE_ITERATIONS,
    batch: int = CPU_BATCH,
) -> tuple[int, dict[str, Any]]:
    """(Every rank, under ``horovodrun``'s variables.) One round of ``horovod_cpu``: this
    rank's rank and what rank 0 writes, each value the largest over the ranks. The ranks meet
    at a file barrier; each times every model's ``steps`` steps (after 3 untimed) and the
    synthetic backward before Horovod starts, starts it, times the steps again with it idle,
    then measures the synthetic backward's cost per cycle, and shuts Horovod down. (One start
    per process: Horovod 0.28.1 crashes in ``hvd.init`` after a ``shutdown`` that followed
    more than a few collectives.)"""
    import os
    import threading

    import horovod.torch as hvd
    import torch

    from workloads.measure import file_barrier

    rank, workers = int(os.environ["HOROVOD_RANK"]), int(os.environ["HOROVOD_SIZE"])
    timers = {model: _timed_steps(model, rank, workers) for model in models}
    for timed in timers.values():
        timed(3)
    # every rank's namespace sees the job's directory; ``_launch`` clears it for each launch
    file_barrier(work / ".barrier-plain", workers, timeout_s=120.0)()
    plain = {model: statistics.median(timers[model](steps)) for model in models}
    synthetic, inputs, base = _synthetic_backward(layers, iterations, batch)
    with _communication():  # Horovod's background and gloo threads
        hvd.init()
    try:
        hvd.allreduce(torch.zeros(1), name="ready")
        idle = {model: statistics.median(timers[model](steps)) for model in models}
        hvd.allreduce(torch.zeros(1), name="go")  # the streams start together
        starts: list[float] = []

        def stream() -> None:
            tensor = torch.ones(1024)  # 4 KiB, under one name: Horovod's response cache hits,
            for _ in range(collectives):  # as a training run's gradients' names do
                starts.append(time.perf_counter())
                handle = hvd.allreduce_async_(tensor, name="cycle")
                while not hvd.poll(handle):
                    time.sleep(HOROVOD_POLL_S)
                hvd.synchronize(handle)

        windows = []
        thread = threading.Thread(target=stream)
        thread.start()
        while thread.is_alive():
            synthetic.zero_grad(set_to_none=True)
            windows.append(_backward_window(synthetic, inputs))
        if not any(a <= t < b for a, b in windows for t in starts):
            raise RuntimeError("no synthetic backward overlapped a Horovod collective")
        mine = [_cost_per_event(windows, starts, base)]
        mine += [idle[model] / plain[model] - 1 for model in models]
        every = hvd.allgather(torch.tensor([mine], dtype=torch.float64), name="largest")
        largest = [float(v) for v in every.max(dim=0).values]
    finally:
        hvd.shutdown()
    idle_slowdown = dict(zip(models, largest[1:], strict=True))
    return rank, {"cycle_cpu_s": largest[0], "idle_slowdown": idle_slowdown}


def _ps_server(rank: int, workers: int, elements: int) -> tuple[float, float, int]:
    """(A server rank of the PS probes.) Serve pushes of one key of ``elements`` values as a
    real server serves a key in ``sync`` mode (``runners.real.ps.PSServer``), until every
    worker has stopped: the receiver thread queues each push; this thread, at the
    communication priority as a real server's (``PSServer.serve``), takes them in order and
    keeps the first push of a round, adds the next ones into it, and with the push that
    completes the round (as many pushes as workers, whoever sent them) averages the sum,
    steps the key (``ps.sgd_step``, the real runs' default: no momentum) and copies it for
    the pulls. Every push is answered at once with the newest copy (a pull of the same
    size), so a worker's stream never waits for another worker's pushes (the other probes
    time those answers) and a round still sends as many pulls as a real round. Returns the
    median time of handling a round's completing push, in seconds: what a round's
    aggregation takes after its last push, as the real server's ``cpu``/``aggregate`` record
    of that push times it (``aggregation_fit`` puts the simulator's aggregation through two
    sizes); then the process's CPU time (every thread: its receiver's, its sender's, gloo's
    and this one's) from its first push on, and the messages it handled in that time (the
    pushes it received and the answers it sent), for ``_ps_cpu``'s host CPU per message."""
    import threading
    from collections import deque

    import torch
    import torch.distributed as dist

    from .ps import _DATA, PULL, PUSH, sgd_step

    cv = threading.Condition()
    key = torch.zeros(elements)
    inbox: deque[tuple[list[int], torch.Tensor]] = deque()
    completing: list[float] = []

    def receive(h: list[int], payload: torch.Tensor | None, _s: float, _e: float) -> None:
        with cv:
            if h[0] == PUSH and payload is not None:
                inbox.append((h, payload))
            cv.notify_all()  # a push, or a STOP

    channel = _ps_channel(rank, cv, receive, elements)
    dist.barrier()
    total: torch.Tensor | None = None
    values = key.clone()  # the newest copy for the pulls
    pushes = 0  # of this round
    cpu_from: float | None = None  # the process's CPU time at the first push
    handled = 0  # messages since: pushes received, answers sent
    with _communication():  # as a real run's server (PSServer.serve): all of it
        channel.start()
        while True:
            with cv:
                while not inbox and not set(range(workers)) <= channel.stops:
                    if channel.error is not None:
                        break
                    cv.wait(0.5)
                if not inbox:
                    break
                h, payload = inbox.popleft()
            if cpu_from is None:
                cpu_from = time.process_time()
            handled += 2  # the push, and its answer
            start = time.perf_counter()
            if total is None:
                total = payload
            else:
                total.add_(payload)
            pushes += 1
            complete = pushes == workers
            if complete:
                sgd_step(key, None, total.div_(workers), 0.01, 0.0)
                values = key.clone()
                total, pushes = None, 0
            with cv:  # data order, in arrival order (STOP, queued last, goes after it)
                channel.post((_DATA, 0), h[4], PULL, h[1], h[2], payload=values)
            if complete:
                completing.append(time.perf_counter() - start)
    channel.failed()
    with cv:
        channel.close()
    channel.join()  # (the last answers are out)
    cpu = 0.0 if cpu_from is None else time.process_time() - cpu_from
    dist.barrier()
    return (statistics.median(completing) if completing else 0.0), cpu, handled


def _ps_overlap(
    model_name: str,
    steps: int,
    rank: int,
    workers: int,
    elements: int,
    window: int,
    compute: bool,
) -> list[float]:
    """(A rank of ``ps_overlap``.) Ranks below ``workers`` are workers, the others servers;
    every rank returns ``[alone, busy, time per answered push, a server's round]``, each the
    slowest rank's (a server reports 0 for the workers' values, a worker 0 for the
    server's)."""
    import threading

    import torch
    import torch.distributed as dist

    from .ps import _DATA, PULL, PUSH

    world = dist.get_world_size()
    servers = list(range(workers, world))
    cv = threading.Condition()

    if rank >= workers:
        agg, _, _ = _ps_server(rank, workers, elements)
        return [_slowest(0.0), _slowest(0.0), _slowest(0.0), _slowest(agg)]

    timed = _timed_steps(model_name, rank, workers)

    answered = 0  # answers received (under ``cv``)

    def on_answer(h: list[int], payload: torch.Tensor | None, _s: float, _e: float) -> None:
        nonlocal answered
        with cv:
            answered += h[0] == PULL
            cv.notify_all()

    channel = _ps_channel(rank, cv, on_answer, elements)
    timed(3)
    alone = statistics.median(timed(steps))
    dist.barrier()
    with _communication():
        channel.start()
    stop = threading.Event()
    push = torch.ones(elements)
    gaps: list[float] = []

    def traffic() -> None:
        """Keep ``window`` pushes unanswered, sent to the servers in turn (answers may come
        back out of order, so a server may hold two for a while); ``gaps``: the time between
        successive answers, shared among the answers that came together."""
        sent = seen = 0
        last = time.perf_counter()
        while not stop.is_set():
            with cv:
                while sent - answered < window:
                    server = servers[sent % len(servers)]
                    channel.post((_DATA, sent), server, PUSH, 0, sent, payload=push)
                    sent += 1
                while answered == seen and channel.error is None:
                    cv.wait(0.5)
                now, got, seen = time.perf_counter(), answered - seen, answered
            channel.failed()
            gaps.extend([(now - last) / got] * got)
            last = now

    thread = threading.Thread(target=traffic, daemon=True)
    with _communication():  # the PS transport's client side, as a real run's
        thread.start()
    if compute:
        busy = statistics.median(timed(steps))
    else:  # the worker idles as long as it would compute
        time.sleep(alone * steps)
        busy = alone
    stop.set()
    thread.join()
    with cv:
        channel.close()
    channel.join()
    dist.barrier()
    small = _trimmed_mean(gaps[1:-1] or gaps)
    return [_slowest(alone), _slowest(busy), _slowest(small), _slowest(0.0)]


def _ps_cpu(
    rank: int,
    workers: int,
    layers: int = ENGINE_LAYERS,
    iterations: int = ENGINE_ITERATIONS,
    batch: int = CPU_BATCH,
    width: int = 32,
) -> float:
    """(A rank of ``ps_message_cpu``.) The compute time one PS message (a push a worker
    sends, or a pull it receives) takes from a backward pass it overlaps, on this machine and
    testbed at this process's communication-thread priority, through the real PS transport
    (``runners.real.ps.Channel``; servers as ``_ps_server``, on the same cores as in a real
    run): ``_engine_cpu``'s synthetic model (``layers`` bias-free ``width`` x ``width``
    linear layers, a batch of ``batch`` rows: a backward of a few milliseconds) whose backward
    is timed alone (no hooks), then with each layer's gradient pushed (``width**2`` values; 4
    KiB at the default 32) to the servers in turn as it is ready, from a post-accumulate-grad
    hook as a real run's worker pushes, every push answered by a pull; each iteration waits
    for its answers before the next. Two values, every rank's the same:

    - the compute's: the median over iterations of (backward time with the pushes - the
      median alone) / the messages that started during that backward (pushes leaving the
      sender, pulls arriving), the slowest worker's. What the messages' threads (the
      worker's, the servers', gloo's) cost the compute on shared cores (the simulator's
      ``cluster.message_cpu_us``);
    - the host's: the CPU time one message takes from the machine, all processes together:
      the workers' process CPU time (every thread) over the iterations with the pushes less
      that of as many iterations alone, over the messages they sent and received, plus the
      servers' process CPU time from their first push on over the messages they handled (a
      message goes through one worker and one server). What ``cluster.host_message_cpu_us``
      and ``host_cpu_ns_per_byte`` charge the host's cores per message.

    Not a model of training: a synthetic model's stream."""
    import threading

    import torch
    import torch.distributed as dist

    from .ps import _DATA, PULL, PUSH

    if rank >= workers:
        _, cpu, handled = _ps_server(rank, workers, width * width)
        return [_slowest(0.0), _host_cpu_per_message(0.0, 0, cpu, handled)]
    servers = list(range(workers, dist.get_world_size()))
    model, inputs, base = _synthetic_backward(layers, iterations, batch, width)
    warmup = SYNTHETIC_WARMUP
    alone_from = time.process_time()  # the same iterations' CPU time without the pushes
    for _ in range(iterations):
        _backward_window(model, inputs)
        model.zero_grad(set_to_none=True)
    alone_cpu = time.process_time() - alone_from

    cv = threading.Condition()
    events: list[float] = []  # when each message started: a push's send, a pull's arrival
    answered = sent = 0  # (under ``cv``)

    def on_answer(h: list[int], payload: torch.Tensor | None, start: float, _e: float) -> None:
        nonlocal answered
        with cv:
            if h[0] == PULL:
                answered += 1
                events.append(start)
            cv.notify_all()

    def pushed(start: float, _end: float) -> None:
        with cv:
            events.append(start)

    channel = _ps_channel(rank, cv, on_answer, width * width)

    def hook(p: torch.Tensor) -> None:
        nonlocal sent
        assert p.grad is not None
        with cv:  # as a real run's worker: one push per layer, to the servers in turn
            server = servers[sent % len(servers)]
            channel.post((_DATA, sent), server, PUSH, 0, sent, payload=p.grad.reshape(-1),
                         done=pushed)  # fmt: skip
            sent += 1

    for layer in model:
        layer.weight.register_post_accumulate_grad_hook(hook)
    dist.barrier()
    with _communication():  # the PS transport's client side, as a real run's
        channel.start()
    windows = []
    cpu_from = 0.0
    for it in range(warmup + iterations):
        if it == warmup:
            cpu_from = time.process_time()
        loss = model(inputs).square().mean()
        start = time.perf_counter()
        loss.backward()
        end = time.perf_counter()
        with cv:  # every answer in before the gradients go (and the next iteration)
            while answered < sent and channel.error is None:
                cv.wait(0.5)
        channel.failed()
        model.zero_grad(set_to_none=True)
        if it >= warmup:
            windows.append((start, end))
    with_cpu = time.process_time() - cpu_from
    with cv:
        channel.close()
    channel.join()
    dist.barrier()
    messages = 2 * layers * iterations  # measured: each layer's push and its answer
    return [
        _slowest(_cost_per_event(windows, events, base)),
        _host_cpu_per_message(max(0.0, with_cpu - alone_cpu), messages, 0.0, 0),
    ]


def _host_cpu_per_message(
    worker_cpu: float, worker_messages: int, server_cpu: float, server_messages: int
) -> float:
    """(Every rank of ``_ps_cpu``.) The host CPU time of one message, in seconds: the
    workers' CPU time for their messages over the messages they sent and received, plus the
    servers' over the messages they handled (each rank gives its own; 0 on the other
    side)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(
        [worker_cpu, float(worker_messages), server_cpu, float(server_messages)],
        dtype=torch.float64,
    )
    dist.all_reduce(t)
    w_cpu, w_n, s_cpu, s_n = (float(x) for x in t)
    return (w_cpu / w_n if w_n else 0.0) + (s_cpu / s_n if s_n else 0.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
