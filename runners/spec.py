"""The run-spec contract: one JSON/YAML document describing one run.

``validate(raw)`` checks everything up front and returns a frozen ``RunSpec`` with every
default filled in (the "resolved spec" recorded in the manifest), or raises ``SpecError`` whose
``field`` names the offending entry with a dotted path (``cluster.workers``,
``params.credit_bytes``, ``cluster.stragglers[1].slowdown``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

import workloads
from workloads import devices

from . import registry

if TYPE_CHECKING:
    from .cluster.spec import ClusterRunSpec

SPEC_VERSION = 1


class SpecError(ValueError):
    """An invalid spec. ``str(err)`` is one line that names the field."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path
        self.message = message


@dataclass(frozen=True)
class Straggler:
    """A worker whose compute is ``slowdown`` times slower, and whose NIC has
    ``bandwidth_factor`` times the cluster's bandwidth, in iterations
    ``from_iteration <= it < until_iteration`` (``None`` = to the end). All-reduce arena: a ring
    all-reduce runs at its slowest link's rate, so the collectives of those iterations take the
    smallest factor of the stragglers active then. PS arena: that worker's pushes and pulls
    take its own NIC's rate. The emulated network re-shapes that worker's NIC."""

    worker: int
    slowdown: float = 1.0
    from_iteration: int = 0
    until_iteration: int | None = None
    bandwidth_factor: float = 1.0

    def active(self, iteration: int) -> bool:
        return _in_window(self.from_iteration, self.until_iteration, iteration)


@dataclass(frozen=True)
class PSStraggler:
    """A parameter server whose NIC bandwidth is multiplied by ``bandwidth_factor`` (contention)
    and whose aggregation takes ``cpu_slowdown`` times longer (interference), in iterations
    ``from_iteration <= it < until_iteration``."""

    server: int
    bandwidth_factor: float = 1.0
    cpu_slowdown: float = 1.0
    from_iteration: int = 0
    until_iteration: int | None = None

    def active(self, iteration: int) -> bool:
        return _in_window(self.from_iteration, self.until_iteration, iteration)


def _in_window(start: int, until: int | None, iteration: int) -> bool:
    """``start <= iteration < until`` (``until`` None: to the end)."""
    return start <= iteration and (until is None or iteration < until)


@dataclass(frozen=True)
class CommCluster:
    """Cluster of a communication arena (one training job). The ``ps``/``server*`` fields are
    used by the parameter-server arena only (accepted and ignored elsewhere); so are
    ``jitter_groups``, ``message_cpu_us``, ``message_cpu_at``, ``pull_rendezvous``,
    ``push_rendezvous``, ``push_buffered``, ``server_agg_fixed_us`` and the ``host_*`` fields
    (``PS_ONLY_FIELDS``), which other arenas refuse unless default (a model they would
    silently not apply).

    ``jitter_groups`` is a modelling assumption of the PS arena's simulator, not a property of
    the hardware: workers' compute noise (``compute_jitter_cv``) is independent per group. The
    simulator runs identical workers as one group (one compute stream, one jitter draw); with
    ``jitter_groups = n`` the workers are split into ``n`` groups (worker index modulo ``n``)
    for every system, each with its own draw. 1 means all workers of a group jitter together
    (fast); set it to the number of workers for per-worker noise (the physical situation; the
    simulation's cost grows about linearly with the number of groups). Groups are split
    further, each part with its own draw as well, by worker straggler schedule and by a plan's
    random-order groups (``order_groups`` of ps-default: still that many order draws). Beyond
    the noise, the split also refines the network model: each group's push is its own transfer
    at a server NIC (one at a time), so with priority order at the servers (TicTac, P3)
    iteration times can change even without jitter (tictac-tic, resnet50, 8 K80 workers, 2 PSs,
    10 Gbit/s: +14-18 % from 1 to 2-8 groups); compare systems at the same value.

    ``reduce_scatter_cost`` and ``all_gather_cost`` (all-reduce arena: DeAR's split
    collectives) are each collective's time as a fraction of an all-reduce of the same tensor.
    0.5 each is the ring's split (DeAR's model; NCCL). Gloo builds its reduce-scatter from a
    whole all-reduce (about 1.0 and 0.5 on our testbed): ``python -m runners calibrate``
    measures both, and ``fidelity`` simulates with the measured values.

    ``cpu_collectives`` (all-reduce arena): the collectives run on CPU (gloo or MPI), as on our
    testbed, instead of GPU (NCCL). It changes Horovod: its background loop performs CPU
    collectives itself (``PerformOperation`` in ``RunLoopOnce``, horovod/common/operations.cc),
    so a cycle starts only once the previous cycle's all-reduces are done, and then at once;
    GPU collectives finish on a finalizer thread and the cycles go on. ``fidelity`` sets it.

    ``busy_latency_us`` and ``overlap_comm_slowdown`` (all-reduce arena; the counterpart of
    ``overlap_slowdown``): while a compute op runs, a collective progresses at the rate of a
    network with this latency (None: ``latency_us``) and its bandwidth divided by ``1 +
    overlap_comm_slowdown``; while the ranks idle, at the plain network's rate (integrated over
    the collective's span). On our CPU testbed the collectives' threads share the cores with
    training; ``python -m runners calibrate`` measures both and ``fidelity --latency split``
    simulates with them. A reconstruction of that contention, labelled as such; the planning
    oracle of searching policies (PACE, ByteScheduler) ignores it, and ``negotiation``.

    ``negotiation`` (all-reduce arena): plans that reorder by priority (ByteScheduler, PACE,
    DeAR, priority delayed all-reduce) agree on each dispatch decision across the ranks with
    one small collective, as the lab's real engine does (like Horovod's coordinator); a
    decision then waits that collective's time. Horovod (fusion cycles) negotiates once per
    cycle that has tensors to fuse, before fusing them (its coordinator). Off: decisions are
    free (the papers' model). ``fidelity`` sets it.

    ``link_burst_bytes``: the NICs are shaped by a token bucket of this depth (payload bytes)
    filled at the bandwidth, as ``tc htb`` shapes the emulated testbed's: a collective's (PS
    arena: a push's, a pull's, at every NIC it crosses) bytes up to the tokens gathered while
    the links did not send pass at once, the rest at the bandwidth. 0 (the default): links
    that always run at the bandwidth.
    ``fidelity`` sets the testbed's depth (``runners.real.testbed.burst_bytes``, 256 KiB of
    frames) in payload bytes: about 250 KiB, 8.4 ms of traffic at 0.25 Gbit/s.

    ``collective_cpu_us`` (all-reduce arena): the CPU time each collective (a negotiation
    round's included, unless ``negotiation_cpu_us`` is set) takes from the compute op that runs
    on its ranks when it starts: the op ends that much later. The communication threads' CPU
    work on cores the training shares, as on our CPU testbed with the communication threads
    ahead of the compute (``real.comm_priority: realtime``). 0 (the default): the collectives
    cost the compute nothing (a GPU's compute). ``python -m runners calibrate`` measures it
    through the lab's engine and ``fidelity`` sets it for the systems that engine runs. A
    reconstruction, labelled as such.

    ``negotiation_cpu_us`` (all-reduce arena, with ``negotiation``): the CPU time a negotiation
    round takes from the compute, in place of ``collective_cpu_us`` for the rounds. Left out
    (the default): a round costs what a collective does. ``python -m runners calibrate``
    measures it through the lab's engine (a round is one 16-byte all-reduce, issued
    synchronously by the engine's dispatcher; beyond the gradient collectives' cost) and
    ``fidelity`` sets it; for the ``horovod`` twin, Horovod's own cost per cycle (its
    negotiation and its fused collective, ``runners.real.probe.horovod_cpu``), charged at the
    cycle's round with ``collective_cpu_us`` 0. A reconstruction, labelled as such.

    ``optimizer_update`` (all-reduce arena; needs ``gpu: measured:<label>``): each layer's
    forward takes its measured momentum-SGD update time longer (the profile's ``update_s``:
    one parameter at a time, as the lab's engine and ``torch.optim.SGD`` on CPU apply it; the
    engine updates a layer just before its forward with a cross-barrier plan, every layer at
    the iteration's start otherwise, and DDP every layer after the backward: all on the
    critical path before the forward). False (the default): updates take no time (the
    papers' model). ``fidelity`` sets it. The simulated ``compute_time_s`` then includes the
    updates, which a real run of the lab's engine counts outside its compute (at the
    iteration's start, or in the forward's waits) and DDP's inside its backward.

    ``step_jitter_cv``: per iteration, each worker's compute is scaled by one log-normal
    draw with mean 1 and this CV, and a synchronous step computes at the pace of its slowest
    worker (the largest draw: ``runners.sim.engine``; in the PS arena a group of identical
    workers computes at its slowest's pace, and a synchronous round waits for every group:
    for asynchronous modes set ``jitter_groups`` to the workers). It grows with the
    workers, as stragglers in synchronous training do. 0 (the default): every worker computes
    each step alike (``compute_jitter_cv``'s per-op draws average out over a step). ``python
    -m runners calibrate`` measures it as the spread of step k across processes computing at
    once (a slow spell they share is left out) and ``fidelity`` sets it. A reconstruction,
    labelled as such.

    ``background_slowdown`` (all-reduce arena): a compute op that starts while its worker's
    network is idle (no collective in flight) takes ``1 + background_slowdown`` times as long:
    a framework's background loop on the cores the training shares, which wakes every cycle
    and negotiates with the other ranks while it has nothing to send (Horovod's: on our CPU
    testbed that slows the forward pass, which runs after the last collective); while a
    collective runs the loop is busy with it, and its cost is the cycle's
    (``negotiation_cpu_us``). 0 (the default): none. ``python -m runners calibrate`` measures
    it for Horovod (``runners.real.probe.horovod_cpu``: a step with Horovod idle over a step
    without); ``fidelity``'s ``horovod`` twin of a run without added latency has it (adopted
    after two sets, 2026-12-07; with added latency the loop wakes once a round, not measured:
    left out, and scored apart, ``mape_with``). A reconstruction, labelled as such.

    ``round_latency_us`` (all-reduce arena, with ``negotiation``): the latency a ring step of
    a negotiation round pays, the ranks busy or idle (None, the default: a collective's, the
    busy network's while a compute op runs). Why: Horovod's rounds run back to back, two
    messages a round each waiting a trip for the other, computing or not, where its fused
    all-reduces pay two trips a ring step (delay-line traces with 2 ms a way, 2026-12-07).
    ``fidelity``'s twin of a ``horovod`` run with added latency sets it to the engine
    stream's latency, its ``latency_us`` to the back-to-back all-reduces' (adopted after two
    sets, 2026-12-07). A reconstruction, labelled as such.

    ``round_loop`` (all-reduce arena, with ``negotiation``; plans with fusion cycles,
    Horovod's): when a cycle's negotiation round starts. ``tick`` (the default): at the next
    multiple of the cycle time after a gradient becomes ready. ``free``: as Horovod's
    background loop runs (``RunLoopOnce``: it sleeps until a cycle time after the last round
    started, takes the tensors queued then, negotiates, runs the collectives, and loops,
    whether or not anything is queued), rounds follow one another every cycle time or round
    time, whichever is longer, from the last round the loop started after a busy cycle; a
    gradient ready during a round waits for the next. Idle rounds take no CPU here (a
    framework's idle loop: ``background_slowdown``). A reconstruction, labelled as such.

    ``lone_allreduce`` (all-reduce arena): ``[bytes, seconds]`` points, a lone all-reduce's
    time by its size, as ``python -m runners calibrate``'s network probe measures them (the
    testbed's ``allreduce`` points: one all-reduce after a barrier, on idle ranks, none other
    in flight). An all-reduce that starts with the channel empty and no other collective
    waiting for it takes the points' time for its size (linear between points, along the
    line through the last two beyond the last, the first point's time below the first) on
    idle ranks, in place of the alpha-beta time less the token bucket's burst (the bucket
    still gives its tokens up); while a compute op runs, that time scaled by the busy
    network's alpha-beta time over the idle one's; a NIC straggler's collective keeps the
    alpha-beta time. A negotiation round (``negotiation``) keeps the alpha-beta time: Horovod's
    rounds run back to back, each two messages that wait a trip each, not a lone all-reduce's
    four (delay-line traces, 2026-12-07). Empty (the default): the alpha-beta time
    throughout. Why: with latency added, gloo's lone all-reduce pays about two trips a
    ring step (a send waits for its receiver's notice that the receive is posted) where
    collectives in a stream pay about one, and its bytes overlap its trips (on the 1 Gbit/s
    network with 2 ms a way, 11.1 ms at 256 KiB and 13.2 at 1 MiB where the stream's latency
    and the bytes add to 4.4 and 10.0 ms): what PyTorch's DDP, with one bucket a step on the
    debug models, meets. ``fidelity``'s twin of a ``ddp`` run with added latency takes the
    latency entry's probe points (adopted after three sets, 2026-12-07); without added
    latency it scores them apart (``mape_with``'s ``lone``: there they made the twin slower
    than the runs). Horovod's twins with it and the rounds at the 16-byte time were 29-53 %
    too slow; ``fidelity`` scores Horovod's twins with it and the rounds as they are
    (``lone``). A reconstruction, labelled as such.

    ``overlap_model``: how ``overlap_slowdown`` (and the all-reduce arena's
    ``background_slowdown``) lengthen a compute op. ``start`` (the default): by the slow-down
    of the network's state when the op starts, for its whole length. ``integrated``: as rates
    over the op's span, re-timed when the network turns busy or idle, so the extra time
    ``overlap_slowdown`` gives an op is at most ``overlap_slowdown / (1 + overlap_slowdown)``
    of the time a collective overlaps it (``runners.sim.engine``; PS arena: the time a push or
    pull on its worker's uplink or downlink overlaps it, a rendezvous sender waiting for its
    receiver not counted). The slow-down is measured beside collectives (pushes) that never
    pause, which on an unshaped network take the cores almost whole; ``start`` charges that
    in full to every op that starts during a short one. ``fidelity``'s twins use
    ``integrated`` and score ``start`` apart. A reconstruction, labelled as such.

    ``message_cpu_us`` (PS arena): the CPU time each message a worker's NIC carries (a push
    it sends, a pull it receives) takes from the compute op its worker runs when the message
    starts: the op ends that much later. The PS transport's threads (the worker's, the
    servers', gloo's) on cores the training shares, as on our CPU testbed with the
    communication threads ahead of the compute. 0 (the default): messages cost the compute
    nothing. ``python -m runners calibrate`` measures it through the real PS transport
    (``runners.real.probe.ps_message_cpu``) and ``fidelity`` sets it for the PS systems. A
    reconstruction, labelled as such.

    ``message_cpu_at`` (PS arena, with ``message_cpu_us``): when a push's CPU is taken.
    ``transfer`` (the default): as its transfer starts on the worker's link, as above.
    ``handover``: as the backward hands the layer's gradient to the transport, whether the
    link is free or not: a transport whose ``send`` returns once the bytes are in the socket
    (gloo's on TCP; the kernel drains them through the shaper later) spends a push's CPU
    then, during the backward, where a queued push of ``transfer`` charges the op computing
    when its turn on the link comes (often none: the backward has ended). Pulls are charged
    as their transfers start either way. A reconstruction, labelled as such, from the real
    PS runs' timelines (``python -m runners twin RUN_DIR --phases``: a real worker's last
    push ends with its backward, its backward stretched well past its compute).

    ``pull_rendezvous`` (PS arena): a pull holds its server's sender and its worker's
    receiver together, one pull at a time on each, as the lab's real PS transport does
    (``runners.real.ps``: gloo's ``send`` returns only once the peer has posted the matching
    ``recv``; each process sends from one thread and receives from one thread, from any
    source in the order the messages come). A server's pull to a worker whose receiver is busy
    waits, and so do the pulls behind it on that server. Every worker is then a group of its
    own (``jitter_groups`` as the workers). False (the default): a server sends a round's
    pull to every worker at once, and each worker's downlink takes it when it is free
    (cut-through), as a transport with buffered sends (ps-lite, BytePS) does.
    ``fidelity`` sets it for the PS twins. A reconstruction, labelled as such: the
    transfer takes the longer of the two NICs' times.

    ``push_rendezvous`` (PS arena): the same for pushes. A push holds its worker's sender and
    its server's receiver together, one at a time on each: a worker whose push waits for a
    server busy receiving another worker's push sends nothing else meanwhile (head-of-line
    blocking, seen in the real runs' timelines: a 66 KB push held 5.7 ms behind the other
    worker's 148 KB one), and a server takes the waiting senders in the order they came
    (its receiver takes the first header from any source; migrations go first). Every worker
    is a group of its own. False (the default): cut-through, the worker's uplink sends on
    while the server's NIC queues the push. ``fidelity`` sets it for the PS twins. A
    reconstruction, labelled as such: the transfer takes the longer of the two NICs' times
    (each through its token bucket), as a rendezvous pull.

    ``push_buffered`` (PS arena, with ``push_rendezvous``): a push's sender is free again
    once the push is handed over (after the latency), as a gloo ``send`` on TCP returns once
    its bytes are in the socket; the worker's NIC sends the bytes behind those handed to it
    before, first in, first out, and the server's receiver is held until they are through.
    The sender then takes its next push at once, so pushes leave about in the order the
    backward hands them over, whatever the plan's push order. False (the default): the
    sender is held until the bytes are through. A reconstruction, labelled as such: the
    socket's buffer is taken as unbounded (Linux's ``tcp_wmem`` allows 4 MiB; a push is at
    most a layer's gradient).

    ``server_agg_fixed_us`` (PS arena): a fixed CPU time of every aggregation a server runs
    (a key's round in ``sync`` and ``sync-round``, a push in ``async``), besides the bytes'
    ``n * S / server_agg_gbps``: the Python and operator overheads of handling the message
    (queueing it, the sum, the step, the copy for the pulls), which dominate small keys. 0
    (the default): the bytes alone. ``calibrate`` fits both to a server handling rounds of two
    push sizes as the real one does (``runners.real.probe._ps_server``) and ``fidelity`` sets
    them for the PS twins.

    ``host_cores``, ``host_message_cpu_us`` and ``host_cpu_ns_per_byte`` (PS arena): every
    process of the job (the workers and the servers) on one host of ``host_cores`` cores, as
    the lab's real PS runs share this machine. Each iteration of a worker then takes at least
    its host's CPU work over the cores: every worker's compute (its ops' times, jitter and
    ``compute_scale`` included, without the slow-downs and charges that model contention)
    plus, for each message (each push and each pull of every worker), ``host_message_cpu_us
    + S * host_cpu_ns_per_byte`` (the worker's threads, the server's, gloo's and the kernel's,
    the server's aggregation included). The simulator holds the first forward op of a
    worker's iteration until that long after the start of its previous one (a work-conserving
    floor: a machine whose cores are all busy cannot go faster; below it the other
    resources set the pace). 0 cores (the default): every process on a machine of its own,
    no floor. ``calibrate`` measures the two CPU times (``runners.real.probe.ps_message_cpu``:
    the processes' CPU time per message, at two message sizes) and ``fidelity`` sets them, with
    the host's cores, for the PS twins. A reconstruction, labelled as such: the floor counts
    neither PSLD's migrations nor the servers' idle loops, and spreads the work evenly over
    the cores.

    ``host_cpu_model`` (PS arena, with ``host_cores``): how the host's cores are shared.
    ``floor`` (the default): the work-conserving floor above. ``fair`` and
    ``messages-first``: processor sharing, op by op, instead of the floor. Each worker that
    computes wants one core; each message (each push and each pull of every worker) is a
    CPU task of ``host_message_cpu_us + S * host_cpu_ns_per_byte`` that starts with its
    transfer and wants one core until its work is done. While they want more than the
    ``host_cores``, ``fair`` gives each the same share; ``messages-first`` serves the
    messages first (at most one core each) and the computing workers share what is left (the
    communication threads at realtime priority, as the calibration's ``comm_priority``
    ``realtime``). A compute op then ends when its work is done at the speed it was given,
    and a machine can idle while the workers wait for their pulls (the floor packs the work
    on every core). Neither ``message_cpu_us`` nor ``overlap_slowdown`` may be set with them:
    the shared cores are what slows the compute beside the messages. ``fidelity``'s PS twins
    share their host's cores so (``runners.fidelity.HOST_CPU_TWINS``). A reconstruction,
    labelled as such: a message's CPU does not delay its transfer, its work is one thread's
    (at most one core), and PSLD's migrations and the servers' idle loops take no CPU.

    ``compute_scale``: every compute op (forward, backward, optimizer update) takes this many
    times its profile's time: a machine whose speed has moved since its profile was measured,
    or a what-if for a slower (> 1) or faster (< 1) device. 1 (the default): the profile's
    times. ``fidelity`` sets it from its compute check (each model's step timed before, between
    and after the real runs, as the calibration timed it) for the twins it scores apart
    (``mape_with``: ``compute_checked``); a uniform scale is an assumption: contention slows
    every layer alike.
    """

    workers: int = 8
    bandwidth_gbps: float = 10.0
    latency_us: float = 10.0
    gpu: str = "v100"
    compute_efficiency: float = 0.5
    compute_jitter_cv: float = 0.02
    overlap_slowdown: float = 0.0
    reduce_scatter_cost: float = 0.5  # all-reduce arena: of an all-reduce's time (ring: 0.5)
    all_gather_cost: float = 0.5
    cpu_collectives: bool = False  # all-reduce arena: collectives on CPU (gloo), see below
    busy_latency_us: float | None = None  # all-reduce arena: while computing (None: latency_us)
    overlap_comm_slowdown: float = 0.0  # all-reduce arena: bytes slower while computing
    negotiation: bool = False  # all-reduce arena: reordering plans negotiate each decision
    link_burst_bytes: int = 0  # the NICs' token bucket (the testbed's tc htb), 0 = none
    collective_cpu_us: float = 0.0  # all-reduce arena: CPU a collective takes from compute
    negotiation_cpu_us: float | None = None  # all-reduce arena: a round's (None: a collective's)
    round_latency_us: float | None = None  # all-reduce arena: a round's, busy or idle (None: as
    # a collective's)
    round_loop: str = "tick"  # all-reduce arena: fusion cycles' rounds on ticks or free-running
    optimizer_update: bool = False  # all-reduce arena: a measured profile's update times
    step_jitter_cv: float = 0.0  # per-worker, per-step compute noise
    background_slowdown: float = 0.0  # all-reduce arena: a framework's background work
    overlap_model: str = "start"  # slow-downs at op start or integrated over the op
    # all-reduce arena: a lone all-reduce's measured time by size, ((bytes, seconds), ...)
    lone_allreduce: tuple[tuple[int, float], ...] = ()
    compute_scale: float = 1.0  # every compute op's time over its profile's
    stragglers: tuple[Straggler, ...] = ()
    ps: int = 4
    servers: int = 8
    server_bandwidth_gbps: float | None = None  # None only before validation: = bandwidth_gbps
    server_agg_gbps: float = 80.0
    server_agg_fixed_us: float = 0.0  # PS arena: CPU of each aggregation besides its bytes'
    ps_stragglers: tuple[PSStraggler, ...] = ()
    jitter_groups: int = 1  # PS arena: groups of workers with independent compute noise
    message_cpu_us: float = 0.0  # PS arena: CPU a message takes from its worker's compute
    message_cpu_at: str = "transfer"  # PS arena: when a push's message_cpu_us is charged
    pull_rendezvous: bool = False  # PS arena: a pull holds a server's sender and a receiver
    push_rendezvous: bool = False  # PS arena: a push holds a worker's sender and a receiver
    push_buffered: bool = False  # PS arena: a rendezvous push frees its sender once handed over
    host_cores: int = 0  # PS arena: the cores every process shares (0: a machine each)
    host_message_cpu_us: float = 0.0  # PS arena: host CPU per message besides its bytes'
    host_cpu_ns_per_byte: float = 0.0  # PS arena: host CPU per byte of a message
    host_cpu_model: str = "floor"  # PS arena: how the host's cores are shared (see above)


NETWORKS = ("auto", "shaped", "loopback")
REAL_DATASETS = ("synthetic", "shapes", "markov")


@dataclass(frozen=True)
class RealOptions:
    """How a ``mode: real`` run trains (absent from sim runs' specs).

    network: ``shaped`` = every rank in its own network namespace, its NIC shaped to
        ``cluster.bandwidth_gbps`` (root only; refused otherwise); ``loopback`` = no shaping
        (the cluster's bandwidth and latency are not applied); ``auto`` = shaped when running
        as root, else loopback, and the run's summary says which.
    dataset: ``synthetic`` (random data, for timing), ``shapes`` (generated 32x32 images for
        the debug CNNs) or ``markov`` (a generated language for the token models); see
        ``workloads.data``.
    lr, momentum: plain SGD on every rank (the same update equations in every system).
    threads: torch intra-op threads per rank.
    implementation: ``default`` = the system's own implementation (PyTorch's
        DistributedDataParallel for ``ddp``, the real Horovod for ``horovod``, the lab's engine
        for every other system); ``lab`` = the lab's engine executing the system's plan (for
        ``ddp`` and ``horovod``: their buckets or fusion), e.g. to measure the engine's own
        overhead against DDP (``python -m runners bench --only real``).
    gpus: GPUs the run asks of its host (0: CPU only). The portal's GPU ledger hands them out
        (by UUID, never one GPU to two runs) and routes the run to a host that has them free.
    gpu_model: only GPUs whose name contains this (e.g. ``A100``); empty: any.
    nodes: hosts the run spans (all-reduce arena; ``cluster.workers`` split evenly, ``gpus``
        per host). The portal starts one runner per host (one container each with the docker
        executor) and they rendezvous at the first: torchrun's c10d, or for the real Horovod
        its own rendezvous server; Slurm gets ``--nodes``. On the hosts' own network: not with
        ``network: shaped``.
    comm_priority: ``realtime`` = the communication threads (gloo's, Horovod's, the engine's
        dispatcher, the PS transport's) run under ``SCHED_FIFO``, ahead of the compute, as on
        a GPU machine whose CPU is free while the GPU computes (root or ``CAP_SYS_NICE``;
        refused otherwise); ``normal`` = every thread as the OS starts it, the compute and the
        communication competing for the cores; ``auto`` = realtime where permitted, else
        normal, and the run's summary says which (``runners.real.priority``).
    device: where the ranks train (all-reduce arena). ``cuda`` = one GPU per rank (the ranks
        of a host take its visible GPUs in order), collectives over NCCL; refused where this
        host's torch sees fewer CUDA devices than the run has ranks here. ``cpu`` = CPU ranks,
        collectives over gloo. ``auto`` = ``cuda`` where this host has a CUDA device for every
        rank (and, for the real Horovod, Horovod was built with NCCL), else ``cpu``; the run's
        summary says which it got and why (``runners.real.launch.resolve_device``). The PS
        arena trains on the CPU (gloo point to point).
    dispatch: how the lab's engine issues its collectives (``runners.real.engine``). ``auto``
        = from the gradient hooks on the training thread where the plan issues in release
        order with no credit limit (``wfbp``, ``ddp``'s buckets, ``fifo`` delayed all-reduce;
        as PyTorch DDP's reducer does), else by the communication thread; ``thread`` = always
        by the communication thread (the engine as it was before 2026-11-30, e.g. to compare).
        The run's summary says which the engine used (``engine_dispatch``).
    ps_transport: the PS arena's transport (``runners.real.ps``). ``blocking`` = one receiver
        thread that posts a message's receive as it comes (gloo's send waits for it: a round
        trip of the network per message under latency); ``pipelined`` = a receiver thread per
        peer keeping ``PIPELINE_DEPTH`` receives posted ahead, so a send does not wait for the
        peer (added 2026-12-06; such a run's twin needs a calibration that measured it,
        ``calibrate --ps-only --ps-transport pipelined``).
    ddp_timeline: PyTorch's own DDP (``ddp`` with ``implementation: default``, on the CPU):
        all-reduce its buckets through PyTorch's default communication hook with a timer
        around it, so the run records a timeline (each bucket's all-reduce, the buffers'
        broadcast, the forward and the backward) and ``comm_time_s``, which stock DDP's
        reducer does not show (``runners.real.worker._DDPBuckets``). The all-reduce arena's
        other runs (the lab's engine: their timeline is recorded anyway, and the real Horovod)
        are as without it, so one experiment's ``real`` serves ``ddp`` and its neighbours;
        refused in the PS arena. Off by default: the ``ddp`` baseline is DDP as PyTorch runs
        it without a hook (in an interleaved A/B on this machine, 2026-12-07, the hooked
        DDP's step was shorter in 11 of 14 comparisons, median -5.6 %, from -22 to +16 %).
    """

    network: str = "auto"
    dataset: str = "synthetic"
    lr: float = 0.01
    momentum: float = 0.0
    threads: int = 1
    implementation: str = "default"
    gpus: int = 0
    gpu_model: str = ""
    nodes: int = 1
    comm_priority: str = "auto"
    device: str = "auto"
    dispatch: str = "auto"
    ps_transport: str = "blocking"
    ddp_timeline: bool = False


IMPLEMENTATIONS = ("default", "lab")
DEVICES = ("auto", "cpu", "cuda")  # runners.real.launch.resolve_device
COMM_PRIORITIES = ("auto", "realtime", "normal")  # runners.real.priority
DISPATCHES = ("auto", "thread")  # runners.real.engine
PS_TRANSPORTS = ("blocking", "pipelined")  # runners.real.ps
# The real fields of one arena alone (the others are both's). The portal hides them for the
# other arena's systems and ignores them there, the API refuses them there, and a grid gives
# them to that arena's systems alone; ``validate`` refuses ``real.ps_transport``,
# ``real.ddp_timeline`` and ``real.nodes`` other than their defaults outside their arena, and
# a run of the other arena leaves ``implementation`` and ``dispatch`` unused.
REAL_KEY_ARENAS: dict[str, tuple[str, ...]] = {
    "implementation": ("allreduce",),  # PyTorch's DDP or Horovod, or the lab's engine
    "nodes": ("allreduce",),
    "dispatch": ("allreduce",),  # the lab's engine's
    "ps_transport": ("ps",),
    "ddp_timeline": ("allreduce",),  # PyTorch's DDP's
}


_REAL_RULES: dict[str, tuple[type, Any, str]] = {
    "network": (str, lambda v: v in NETWORKS, f"one of {', '.join(NETWORKS)}"),
    "dataset": (str, lambda v: v in REAL_DATASETS, f"one of {', '.join(REAL_DATASETS)}"),
    "lr": (float, lambda v: 0 < v <= 100, "a number in (0, 100] (SGD learning rate)"),
    "momentum": (float, lambda v: 0 <= v < 1, "a number in [0, 1) (SGD momentum)"),
    "threads": (int, lambda v: 1 <= v <= 256, "an integer between 1 and 256 (per rank)"),
    "implementation": (
        str,
        lambda v: v in IMPLEMENTATIONS,
        f"one of {', '.join(IMPLEMENTATIONS)} (default: the system's own; lab: the lab's engine)",
    ),
    "gpus": (int, lambda v: 0 <= v <= 64, "an integer between 0 and 64 (GPUs on one host)"),
    "nodes": (int, lambda v: 1 <= v <= 64, "an integer between 1 and 64 (hosts the run spans)"),
    "comm_priority": (
        str,
        lambda v: v in COMM_PRIORITIES,
        f"one of {', '.join(COMM_PRIORITIES)} (the communication threads' priority: realtime "
        "ahead of the compute, normal as the OS starts them, auto: realtime where permitted)",
    ),
    "dispatch": (
        str,
        lambda v: v in DISPATCHES,
        f"one of {', '.join(DISPATCHES)} (the lab engine's collectives: auto = from the "
        "gradient hooks where the plan sends in release order with no credit limit, else by "
        "its communication thread; thread = always by that thread)",
    ),
    "ps_transport": (
        str,
        lambda v: v in PS_TRANSPORTS,
        f"one of {', '.join(PS_TRANSPORTS)} (the PS arena's transport: blocking = a receive "
        "posted as each message comes, a round trip per message; pipelined = receives posted "
        "ahead for every peer)",
    ),
    "ddp_timeline": (
        bool,
        lambda v: True,
        "true or false (PyTorch's DDP: its buckets' all-reduces timed through its default "
        "communication hook, for a timeline)",
    ),
    "device": (
        str,
        lambda v: v in DEVICES,
        f"one of {', '.join(DEVICES)} (cuda: a GPU per rank over NCCL; cpu: gloo; auto: cuda "
        "where every rank has a GPU)",
    ),
    "gpu_model": (
        str,
        lambda v: len(v) <= 64 and all(c.isalnum() or c in " -_." for c in v),
        "a GPU model name such as A100 (letters, digits, space, '-', '_', '.')",
    ),
}


SPLIT_COST_MAX = 4.0  # reduce_scatter_cost / all_gather_cost: of an all-reduce, at most
# overlap_slowdown / overlap_comm_slowdown: measured ratios minus 1 (``calibrate``); a machine
# busy with other work can make them large (10.7 once in CI), so the bound only stops typos.
SLOWDOWN_MAX = 100.0
COMPUTE_SCALE_MAX = 1000.0  # ``cluster.compute_scale``: the bound only stops typos
OVERLAP_MODELS = ("start", "integrated")  # ``cluster.overlap_model``
ROUND_LOOPS = ("tick", "free")  # ``cluster.round_loop``
HOST_CPU_MODELS = ("floor", "fair", "messages-first")  # ``cluster.host_cpu_model``
MESSAGE_CPU_AT = ("transfer", "handover")  # ``cluster.message_cpu_at``

# Cluster fields the all-reduce arena alone uses (other arenas refuse them unless default).
ALLREDUCE_ONLY_FIELDS = (
    "reduce_scatter_cost",
    "all_gather_cost",
    "cpu_collectives",
    "busy_latency_us",
    "overlap_comm_slowdown",
    "negotiation",
    "collective_cpu_us",
    "negotiation_cpu_us",
    "optimizer_update",
    "background_slowdown",
    "lone_allreduce",
    "round_latency_us",
    "round_loop",
)

# Cluster fields the PS arena alone uses (other arenas refuse them unless default; the ``ps`` /
# ``server*`` fields are accepted and ignored elsewhere).
PS_ONLY_FIELDS = (
    "jitter_groups",
    "message_cpu_us",
    "message_cpu_at",
    "pull_rendezvous",
    "push_rendezvous",
    "push_buffered",
    "server_agg_fixed_us",
    "host_cores",
    "host_message_cpu_us",
    "host_cpu_ns_per_byte",
    "host_cpu_model",
)
# The arena each arena-only cluster field belongs to; ARENA_NAMES, how errors name it.
FIELD_ARENA = {
    **{key: "allreduce" for key in ALLREDUCE_ONLY_FIELDS},
    **{key: "ps" for key in PS_ONLY_FIELDS},
}
ARENA_NAMES = {"allreduce": "all-reduce", "ps": "parameter-server"}

# Fields left out of ``RunSpec.as_dict`` at their default: added after results were recorded,
# so the resolved spec (and the run key hashed from it) of a run that does not set them is
# the same as before they existed. ``validate`` fills the default back in.
_OMITTED_AT_DEFAULT = {
    "jitter_groups": CommCluster.jitter_groups,
    "message_cpu_us": CommCluster.message_cpu_us,
    "message_cpu_at": CommCluster.message_cpu_at,
    "pull_rendezvous": CommCluster.pull_rendezvous,
    "push_rendezvous": CommCluster.push_rendezvous,
    "push_buffered": CommCluster.push_buffered,
    "server_agg_fixed_us": CommCluster.server_agg_fixed_us,
    "host_cores": CommCluster.host_cores,
    "host_message_cpu_us": CommCluster.host_message_cpu_us,
    "host_cpu_ns_per_byte": CommCluster.host_cpu_ns_per_byte,
    "host_cpu_model": CommCluster.host_cpu_model,
    "reduce_scatter_cost": CommCluster.reduce_scatter_cost,
    "all_gather_cost": CommCluster.all_gather_cost,
    "cpu_collectives": CommCluster.cpu_collectives,
    "busy_latency_us": CommCluster.busy_latency_us,
    "overlap_comm_slowdown": CommCluster.overlap_comm_slowdown,
    "negotiation": CommCluster.negotiation,
    "link_burst_bytes": CommCluster.link_burst_bytes,
    "collective_cpu_us": CommCluster.collective_cpu_us,
    "negotiation_cpu_us": CommCluster.negotiation_cpu_us,
    "optimizer_update": CommCluster.optimizer_update,
    "step_jitter_cv": CommCluster.step_jitter_cv,
    "background_slowdown": CommCluster.background_slowdown,
    "compute_scale": CommCluster.compute_scale,
    "overlap_model": CommCluster.overlap_model,
    "lone_allreduce": CommCluster.lone_allreduce,
    "round_latency_us": CommCluster.round_latency_us,
    "round_loop": CommCluster.round_loop,
}
_TOP_OMITTED_AT_DEFAULT = {"timeline_iterations": 2}


@dataclass(frozen=True)
class RunSpec:
    system: str
    mode: str
    workload: str
    cluster: CommCluster
    params: dict[str, Any] = field(hash=False)
    iterations: int = 20
    warmup_iterations: int = 2
    batch_size: int = 0  # per worker; 0 never survives validation (the workload default)
    seed: int = 0
    labels: dict[str, Any] = field(default_factory=dict, hash=False)
    # How many of the last measured iterations ``timeline.csv`` records (0: every iteration).
    timeline_iterations: int = 2
    real: RealOptions | None = None  # mode real only

    @property
    def arena(self) -> str:
        return registry.get(self.system).arena

    def as_dict(self) -> dict[str, Any]:
        """The resolved spec as JSON-ready data; ``validate(spec.as_dict()) == spec``. Cluster
        fields in ``_OMITTED_AT_DEFAULT`` appear only when set to something else."""
        data = asdict(self)
        cluster = data["cluster"]
        cluster["stragglers"] = [
            # added later: stragglers without a NIC factor keep their form (and run keys)
            {k: v for k, v in dict(s).items() if k != "bandwidth_factor" or v != 1.0}
            for s in cluster["stragglers"]
        ]
        cluster["ps_stragglers"] = [dict(s) for s in cluster["ps_stragglers"]]
        cluster["lone_allreduce"] = [list(p) for p in cluster["lone_allreduce"]]
        for key, default in _OMITTED_AT_DEFAULT.items():
            if cluster[key] == (list(default) if isinstance(default, tuple) else default):
                del cluster[key]
        for key, default in _TOP_OMITTED_AT_DEFAULT.items():
            if data[key] == default:
                del data[key]
        if data["real"] is None:
            del data["real"]
        else:  # added later: old real runs keep their key
            for key in ("implementation", "gpus", "gpu_model", "nodes", "device", "ddp_timeline"):
                if data["real"][key] == getattr(RealOptions, key):
                    del data["real"][key]
        data["spec_version"] = SPEC_VERSION
        return data


# Per key: (type, default-from-dataclass, check, description for the error message).
_CLUSTER_RULES: dict[str, tuple[type, Any, str]] = {
    "workers": (int, lambda v: 1 <= v <= 100_000, "an integer between 1 and 100000"),
    "bandwidth_gbps": (float, lambda v: 0 < v <= 100_000, "a number > 0 (Gbit/s per worker NIC)"),
    "latency_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds per message)",
    ),
    "gpu": (
        str,
        lambda v: v in devices.DEVICES or v.startswith("measured:"),
        f"one of {', '.join(sorted(devices.DEVICES))} or measured:<label>",
    ),
    "compute_efficiency": (float, lambda v: 0 < v <= 1, "a fraction in (0, 1]"),
    "compute_jitter_cv": (float, lambda v: 0 <= v < 1, "a fraction in [0, 1)"),
    "overlap_slowdown": (
        float,
        lambda v: 0 <= v <= SLOWDOWN_MAX,
        f"a number in [0, {SLOWDOWN_MAX:g}] (compute slow-down while communication overlaps)",
    ),
    "reduce_scatter_cost": (
        float,
        lambda v: 0 < v <= SPLIT_COST_MAX,
        "a number in (0, 4] (a reduce-scatter's time as a fraction of an all-reduce of the same "
        "tensor: 0.5 on a ring, about 1 with gloo; `python -m runners calibrate` measures it)",
    ),
    "all_gather_cost": (
        float,
        lambda v: 0 < v <= SPLIT_COST_MAX,
        "a number in (0, 4] (an all-gather's time as a fraction of an all-reduce of the same "
        "tensor: 0.5 on a ring; `python -m runners calibrate` measures it)",
    ),
    "cpu_collectives": (
        bool,
        lambda v: True,
        "true or false (the collectives run on CPU, gloo or MPI: Horovod's cycles then wait "
        "for them)",
    ),
    "busy_latency_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds per message of a collective while the ranks "
        "compute; left out: latency_us)",
    ),
    "overlap_comm_slowdown": (
        float,
        lambda v: 0 <= v <= SLOWDOWN_MAX,
        f"a number in [0, {SLOWDOWN_MAX:g}] (how much slower a collective moves its bytes while "
        "the ranks compute)",
    ),
    "negotiation": (
        bool,
        lambda v: True,
        "true or false (plans that reorder by priority agree on each dispatch decision with "
        "one small collective, as the lab's real engine and Horovod's coordinator do)",
    ),
    "link_burst_bytes": (
        int,
        lambda v: 0 <= v <= 1 << 40,
        "an integer >= 0 (bytes a NIC's token bucket holds, as the testbed's burst; 0 = no bucket)",
    ),
    "collective_cpu_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds of CPU each collective takes from the "
        "compute it overlaps; 0 = none)",
    ),
    "negotiation_cpu_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds of CPU each negotiation round takes from the "
        "compute it overlaps; left out: collective_cpu_us)",
    ),
    "round_latency_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds per ring step of a negotiation round, the "
        "ranks busy or idle; left out: a collective's latency, latency_us or busy_latency_us)",
    ),
    "round_loop": (
        str,
        lambda v: v in ROUND_LOOPS,
        f"{' or '.join(ROUND_LOOPS)} (when a fusion cycle's negotiation round starts: at the "
        "next cycle tick, or as Horovod's free-running background loop)",
    ),
    "optimizer_update": (
        bool,
        lambda v: True,
        "true or false (each layer's forward takes its measured optimizer update longer; "
        "needs gpu: measured:<label>)",
    ),
    "step_jitter_cv": (
        float,
        lambda v: 0 <= v < 1,
        "a fraction in [0, 1) (the CV of each worker's per-step compute; a step waits for the "
        "slowest worker)",
    ),
    "background_slowdown": (
        float,
        lambda v: 0 <= v <= SLOWDOWN_MAX,
        f"a number in [0, {SLOWDOWN_MAX:g}] (how much longer a compute op takes that starts "
        "while the network is idle, beside a framework's background loop; 0 = none)",
    ),
    "overlap_model": (
        str,
        lambda v: v in OVERLAP_MODELS,
        f"{' or '.join(OVERLAP_MODELS)} (how the compute slow-downs apply: fixed when an op "
        "starts, or as rates over its span)",
    ),
    "compute_scale": (
        float,
        lambda v: 0 < v <= COMPUTE_SCALE_MAX,
        f"a number in (0, {COMPUTE_SCALE_MAX:g}] (every compute op's time over its profile's; "
        "1 = the profile's)",
    ),
    "ps": (int, lambda v: 1 <= v <= 10_000, "an integer between 1 and 10000 (PS processes)"),
    "servers": (int, lambda v: 1 <= v <= 10_000, "an integer between 1 and 10000 (PS machines)"),
    "server_bandwidth_gbps": (
        float,
        lambda v: 0 < v <= 100_000,
        "a number > 0 (Gbit/s per parameter-server NIC)",
    ),
    "server_agg_gbps": (
        float,
        lambda v: 0 < v <= 1e7,
        "a number in (0, 10000000] (Gbit/s a parameter server can sum)",
    ),
    "server_agg_fixed_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds of CPU each parameter-server aggregation "
        "takes besides its bytes'; 0 = none)",
    ),
    "host_cores": (
        int,
        lambda v: 0 <= v <= 100_000,
        "an integer in [0, 100000] (PS arena: the cores of the one host every process of the "
        "job shares, each iteration at least the host's CPU work over them; 0 = a machine "
        "each)",
    ),
    "host_message_cpu_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds of the host's CPU each PS message takes "
        "besides its bytes', all processes together; with cluster.host_cores)",
    ),
    "host_cpu_ns_per_byte": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (nanoseconds of the host's CPU each byte of a PS message "
        "takes; with cluster.host_cores)",
    ),
    "host_cpu_model": (
        str,
        lambda v: v in HOST_CPU_MODELS,
        f"{' or '.join(HOST_CPU_MODELS)} (PS arena, with cluster.host_cores: floor = each "
        "iteration at least the host's CPU work over its cores; fair / messages-first = the "
        "compute and each message's CPU share the cores as they run, equally or the "
        "messages first)",
    ),
    "jitter_groups": (
        int,
        lambda v: 1 <= v <= 100_000,
        "an integer between 1 and cluster.workers (PS arena, a modelling assumption: workers'"
        " compute noise is independent per group; 1 means all workers of a group jitter"
        " together (fast); set it to the number of workers for per-worker noise)",
    ),
    "message_cpu_us": (
        float,
        lambda v: 0 <= v <= 1e6,
        "a number in [0, 1000000] (microseconds of CPU each PS message takes from its "
        "worker's compute; 0 = none)",
    ),
    "message_cpu_at": (
        str,
        lambda v: v in MESSAGE_CPU_AT,
        f"{' or '.join(MESSAGE_CPU_AT)} (PS arena, with cluster.message_cpu_us: when a push's "
        "CPU is taken from its worker's compute, as its transfer starts or as its gradient is "
        "handed to the transport)",
    ),
    "pull_rendezvous": (
        bool,
        lambda v: True,
        "true or false (PS arena: a pull holds its server's sender and its worker's receiver "
        "together, one at a time on each, as the lab's real gloo transport; false: buffered "
        "sends, a server's pull goes to every worker at once)",
    ),
    "push_buffered": (
        bool,
        lambda v: True,
        "true or false (PS arena, with cluster.push_rendezvous: a push's sender is free once "
        "its bytes are handed to its NIC, which sends them behind those before them; false: "
        "held until they are through)",
    ),
    "push_rendezvous": (
        bool,
        lambda v: True,
        "true or false (PS arena: a push holds its worker's sender and its server's receiver "
        "together, one at a time on each, as the lab's real gloo transport; false: cut-through, "
        "a worker's uplink sends on while the server's NIC queues the push)",
    ),
}
_TOP_KEYS = {
    "system",
    "mode",
    "workload",
    "cluster",
    "params",
    "iterations",
    "warmup_iterations",
    "batch_size",
    "seed",
    "labels",
    "timeline_iterations",
    "real",
    "spec_version",
}


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON or YAML spec file into a mapping (not yet validated)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise SpecError("SPEC", f"cannot read {p}: {err.strerror}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        first_line = str(err).splitlines()[0]
        raise SpecError("SPEC", f"{p} is not valid JSON/YAML: {first_line}") from None
    if not isinstance(data, dict):
        raise SpecError("SPEC", f"{p} must contain a mapping (got {type(data).__name__})")
    return data


def validate(raw: Any) -> RunSpec | ClusterRunSpec:
    """Check ``raw`` against the contract and return the resolved spec: a ``RunSpec`` for the
    communication arenas, a ``runners.cluster.spec.ClusterRunSpec`` for the cluster arena."""
    if not isinstance(raw, dict):
        raise SpecError("SPEC", f"must be a mapping (got {type(raw).__name__})")
    entry = _entry(raw)
    if entry.arena == "cluster":
        from .cluster import spec as cluster_spec

        return cluster_spec.validate(raw, entry)
    return validate_comm(raw, entry)


def validate_comm(raw: dict[str, Any], entry: registry.Entry) -> RunSpec:
    """The communication arenas' half of ``validate``."""
    unknown = _unknown_keys(raw, _TOP_KEYS)
    if unknown:
        raise SpecError(unknown[0], f"unknown field (allowed: {', '.join(sorted(_TOP_KEYS))})")
    mode = raw.get("mode", "sim")
    if mode not in registry.MODES:
        raise SpecError("mode", f"must be one of {', '.join(registry.MODES)} (got {mode!r})")
    if mode not in entry.modes:
        raise SpecError("mode", f"'{entry.name}' supports {', '.join(entry.modes)} only")
    workload = _workload(raw)
    profile = workloads.load_profile(workload)
    iterations = _int(raw, "iterations", 20, 3, 100_000)
    warmup = _int(raw, "warmup_iterations", 2, 0, iterations - 1)
    labels = raw.get("labels", {})
    if not isinstance(labels, dict):
        raise SpecError("labels", "must be a mapping")
    cluster = _cluster(raw.get("cluster", {}))
    for key, arena in FIELD_ARENA.items():
        value, default = getattr(cluster, key), getattr(CommCluster, key)
        if value != default and entry.arena != arena:
            fix = "leave it out"
            if not isinstance(default, tuple):
                fix += f" or set it to {default}"
            raise SpecError(
                f"cluster.{key}",
                f"used by the {ARENA_NAMES[arena]} arena only: '{entry.name}' is in the "
                f"'{entry.arena}' arena ({fix}; got {raw['cluster'][key]!r})",
            )
    for i, straggler in enumerate(cluster.stragglers):
        if straggler.bandwidth_factor != 1.0 and entry.arena not in ("allreduce", "ps"):
            raise SpecError(
                f"cluster.stragglers[{i}].bandwidth_factor",
                f"a worker's NIC straggler is modelled in the all-reduce and PS arenas: "
                f"'{entry.name}' is in the '{entry.arena}' arena",
            )
    if cluster.gpu.startswith("measured:"):
        label = cluster.gpu.split(":", 1)[1]
        have = workloads.measured_labels(workload)
        if label not in have:
            raise SpecError(
                "cluster.gpu",
                f"no measured profile '{label}' for {workload} (have: {', '.join(have) or 'none'};"
                f" make one with: python -m workloads profile {workload} --measure)",
            )
    real = _real(raw.get("real"), mode)
    if real is not None and real.nodes > 1:
        if entry.arena != "allreduce":
            raise SpecError(
                "real.nodes",
                f"a run over several hosts is for the all-reduce arena (not "
                f"'{entry.name}'); set real.nodes: 1",
            )
        if cluster.workers % real.nodes:
            raise SpecError(
                "real.nodes",
                f"cluster.workers ({cluster.workers}) must split evenly over {real.nodes} hosts",
            )
        if real.network == "shaped":
            raise SpecError(
                "real.network",
                "a run over several hosts uses the hosts' own network: the emulated one is on "
                "one machine (set real.network: auto or loopback)",
            )
    if real is not None and real.device == "cuda":
        if entry.arena != "allreduce":
            raise SpecError(
                "real.device",
                f"the PS arena's real mode trains on the CPU (gloo point to point), not "
                f"'{entry.name}' on GPUs; set real.device: cpu or auto",
            )
        per_host = cluster.workers // real.nodes
        if real.gpus and real.gpus < per_host:
            raise SpecError(
                "real.gpus",
                f"{real.gpus} GPU{'s' if real.gpus > 1 else ''} for {per_host} ranks per host: "
                "with real.device cuda every rank needs a GPU of its own (NCCL); ask for "
                f"{per_host}, or set real.device: auto",
            )
    if real is not None and real.ps_transport != "blocking" and entry.arena != "ps":
        raise SpecError(
            "real.ps_transport",
            f"the PS arena's transport; '{entry.name}' is of the {entry.arena} arena: leave it "
            "out (or blocking)",
        )
    if real is not None and real.ddp_timeline and entry.arena != "allreduce":
        raise SpecError(
            "real.ddp_timeline",
            f"times PyTorch's DDP in the all-reduce arena; '{entry.name}' is of the "
            f"{entry.arena} arena: leave it out",
        )
    links = [i for i, s in enumerate(cluster.stragglers) if s.bandwidth_factor != 1.0]
    if real is not None and links and (real.nodes > 1 or real.network == "loopback"):
        raise SpecError(
            f"cluster.stragglers[{links[0]}].bandwidth_factor",
            "a worker's NIC straggler needs the emulated network on one machine (real.network: "
            "shaped or auto, as root); "
            + ("a run over several hosts" if real.nodes > 1 else "on loopback it")
            + " would not apply it",
        )
    params = validate_params(entry, raw.get("params", {}))
    if (
        real is not None
        and real.implementation == "lab"
        and params.get("broadcast_buffers")
        and profile.buffer_bytes > 0
    ):
        raise SpecError(
            "params.broadcast_buffers",
            f"the lab's engine (real.implementation: lab) does not broadcast {workload}'s "
            "buffers, as DDP does before each forward: set params.broadcast_buffers: false "
            "(and the simulator leaves the broadcast out too), or real.implementation: default",
        )
    return RunSpec(
        system=entry.name,
        mode=mode,
        workload=workload,
        cluster=cluster,
        params=params,
        iterations=iterations,
        warmup_iterations=warmup,
        batch_size=_int(raw, "batch_size", profile.default_batch_size, 1, 1_000_000),
        seed=_int(raw, "seed", 0, 0, 2**63 - 1),
        labels=dict(labels),
        timeline_iterations=_int(raw, "timeline_iterations", 2, 0, iterations),
        real=real,
    )


def _real(raw: Any, mode: str) -> RealOptions | None:
    if mode != "real":
        if raw is not None:
            raise SpecError("real", "training options are for mode 'real' only (leave it out)")
        return None
    if raw is None:
        return RealOptions()
    if not isinstance(raw, dict):
        raise SpecError("real", "must be a mapping")
    unknown = _unknown_keys(raw, set(_REAL_RULES))
    if unknown:
        raise SpecError(
            f"real.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(_REAL_RULES))})"
        )
    return RealOptions(**checked_fields(raw, _REAL_RULES, "real"))


def validate_params(entry: registry.Entry, raw: Any, prefix: str = "params") -> dict[str, Any]:
    """Check system parameters against the entry's schema; fill defaults."""
    if not isinstance(raw, dict):
        raise SpecError(prefix, "must be a mapping of parameter names to values")
    schema = {p.name: p for p in entry.params}
    unknown = _unknown_keys(raw, set(schema))
    if unknown:
        allowed = ", ".join(schema) or "none"
        raise SpecError(
            f"{prefix}.{unknown[0]}",
            f"'{entry.name}' has no such parameter (parameters: {allowed})",
        )
    out = entry.defaults()
    for name, value in raw.items():
        p = schema[name]
        field_path = f"{prefix}.{name}"
        value = _coerce(field_path, value, p.kind)
        if p.choices and value not in p.choices:
            raise SpecError(
                field_path, f"must be one of {', '.join(map(str, p.choices))} (got {value!r})"
            )
        if p.minimum is not None and value < p.minimum:
            raise SpecError(field_path, f"must be >= {p.minimum:g} (got {value})")
        if p.maximum is not None and value > p.maximum:
            raise SpecError(field_path, f"must be <= {p.maximum:g} (got {value})")
        out[name] = value
    return out


def _entry(raw: dict[str, Any]) -> registry.Entry:
    name = raw.get("system")
    if not isinstance(name, str) or not name:
        raise SpecError("system", "required: a registry name (see `python -m runners list`)")
    try:
        entry = registry.get(name)
    except registry.UnknownEntry as err:
        raise SpecError("system", err.args[0]) from None
    return entry


def _workload(raw: dict[str, Any]) -> str:
    name = raw.get("workload")
    known = workloads.names()
    if not isinstance(name, str) or not name:
        raise SpecError("workload", f"required: one of {', '.join(known)}")
    if name not in known:
        raise SpecError("workload", f"unknown workload {name!r} (known: {', '.join(known)})")
    return name


def _cluster(raw: Any) -> CommCluster:
    if not isinstance(raw, dict):
        raise SpecError("cluster", "must be a mapping")
    allowed = set(_CLUSTER_RULES) | {"stragglers", "ps_stragglers", "lone_allreduce"}
    unknown = _unknown_keys(raw, allowed)
    if unknown:
        raise SpecError(
            f"cluster.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})"
        )
    values = checked_fields(raw, _CLUSTER_RULES, "cluster")
    workers = values.get("workers", CommCluster.workers)
    servers = values.get("servers", CommCluster.servers)
    ps = values.get("ps", CommCluster.ps)
    if ps > servers:
        raise SpecError(
            "cluster.ps",
            f"must be <= cluster.servers ({servers}): more PSs than servers (got {ps})",
        )
    jitter_groups = values.get("jitter_groups", CommCluster.jitter_groups)
    if jitter_groups > workers:
        raise SpecError(
            "cluster.jitter_groups",
            f"must be <= cluster.workers ({workers}): more noise groups than workers"
            f" (got {jitter_groups}; {workers} = one per worker)",
        )
    if not values.get("host_cores"):
        for key in ("host_message_cpu_us", "host_cpu_ns_per_byte"):
            if values.get(key):
                raise SpecError(
                    f"cluster.{key}",
                    "needs cluster.host_cores (the host's cores the CPU time is spread over; "
                    f"0 = every process on a machine of its own, no host CPU) (got {raw[key]!r})",
                )
    if values.get("round_latency_us") is not None and not values.get("negotiation"):
        raise SpecError(
            "cluster.round_latency_us",
            "needs cluster.negotiation (without it no collective negotiates: there are no "
            f"rounds for the latency) (got {raw['round_latency_us']!r})",
        )
    if values.get("round_loop", "tick") != "tick" and not values.get("negotiation"):
        raise SpecError(
            "cluster.round_loop",
            "needs cluster.negotiation (without it no cycle negotiates: there is no round loop) "
            f"(got {raw['round_loop']!r})",
        )
    if values.get("push_buffered") and not values.get("push_rendezvous"):
        raise SpecError(
            "cluster.push_buffered",
            "needs cluster.push_rendezvous (without it a worker's uplink already sends on while "
            "the server's NIC queues the push)",
        )
    at = values.get("message_cpu_at", CommCluster.message_cpu_at)
    if at != CommCluster.message_cpu_at and not values.get("message_cpu_us"):
        raise SpecError(
            "cluster.message_cpu_at",
            f"{at} needs cluster.message_cpu_us (the CPU each message takes from its "
            "worker's compute; 0 = none, so there is nothing to charge)",
        )
    model = values.get("host_cpu_model", CommCluster.host_cpu_model)
    if model != "floor":
        if not values.get("host_cores"):
            raise SpecError(
                "cluster.host_cpu_model",
                f"{model} needs cluster.host_cores (the cores the compute and the messages share)",
            )
        for key in ("message_cpu_us", "overlap_slowdown"):
            if values.get(key):
                raise SpecError(
                    f"cluster.{key}",
                    f"must be 0 with cluster.host_cpu_model {model}: the shared cores already "
                    f"slow the compute while messages run (got {raw[key]!r}; use "
                    "host_cpu_model floor to combine them)",
                )
    gpu = values.get("gpu", CommCluster.gpu)
    if values.get("optimizer_update") and not gpu.startswith("measured:"):
        raise SpecError(
            "cluster.optimizer_update",
            f"needs measured update times: set cluster.gpu to measured:<label> (got {gpu!r}; "
            "python -m runners calibrate measures them)",
        )
    values.setdefault(
        "server_bandwidth_gbps", values.get("bandwidth_gbps", CommCluster.bandwidth_gbps)
    )
    values["stragglers"] = _stragglers(raw.get("stragglers", []), workers)
    values["ps_stragglers"] = _ps_stragglers(raw.get("ps_stragglers", []), servers)
    values["lone_allreduce"] = _lone_points(raw.get("lone_allreduce", []))
    return CommCluster(**values)


LONE_POINTS_MAX = 64  # ``cluster.lone_allreduce``: the probe measures 8 sizes


def _lone_points(raw: Any) -> tuple[tuple[int, float], ...]:
    """``cluster.lone_allreduce``: ``[bytes, seconds]`` pairs, sizes increasing."""
    where = "cluster.lone_allreduce"
    what = (
        f"a list of at most {LONE_POINTS_MAX} [bytes, seconds] pairs, sizes increasing (a lone "
        "all-reduce's measured time by size; [] = none)"
    )
    if not isinstance(raw, (list, tuple)) or len(raw) > LONE_POINTS_MAX:
        raise SpecError(where, f"must be {what} (got {raw!r})")
    out: list[tuple[int, float]] = []
    for i, pair in enumerate(raw):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise SpecError(f"{where}[{i}]", f"must be a [bytes, seconds] pair (got {pair!r})")
        size = _coerce(f"{where}[{i}][0]", pair[0], int)
        seconds = _coerce(f"{where}[{i}][1]", pair[1], float)
        if not 0 < size <= 1 << 40 or (out and size <= out[-1][0]):
            raise SpecError(
                f"{where}[{i}][0]", f"must be a size in bytes above the previous one (got {size})"
            )
        if not 0 < seconds <= 3600:
            raise SpecError(f"{where}[{i}][1]", f"must be seconds in (0, 3600] (got {seconds})")
        out.append((size, seconds))
    return tuple(out)


def checked_fields(
    raw: dict[str, Any], rules: dict[str, tuple[type, Any, str]], prefix: str
) -> dict[str, Any]:
    """The ``rules`` keys present in ``raw``, coerced to their type and checked; a failed check
    raises ``SpecError`` on ``prefix.key`` with the rule's description."""
    values: dict[str, Any] = {}
    for key, (kind, check, what) in rules.items():
        if key not in raw:
            continue
        value = _coerce(f"{prefix}.{key}", raw[key], kind)
        if not check(value):
            raise SpecError(f"{prefix}.{key}", f"must be {what} (got {raw[key]!r})")
        values[key] = value
    return values


def _iteration_range(where: str, item: dict[str, Any]) -> tuple[int, int | None]:
    start = _coerce(f"{where}.from_iteration", item.get("from_iteration", 0), int)
    if start < 0:
        raise SpecError(f"{where}.from_iteration", f"must be >= 0 (got {start})")
    until = item.get("until_iteration")
    if until is not None:
        until = _coerce(f"{where}.until_iteration", until, int)
        if until <= start:
            raise SpecError(
                f"{where}.until_iteration", f"must be > from_iteration ({start}) (got {until})"
            )
    return start, until


def _stragglers(raw: Any, workers: int) -> tuple[Straggler, ...]:
    if not isinstance(raw, list):
        raise SpecError(
            "cluster.stragglers", "must be a list of {worker, slowdown and/or bandwidth_factor}"
        )
    out = []
    seen = set()
    effects = {"slowdown", "bandwidth_factor"}
    optional = {"from_iteration", "until_iteration"}
    for i, item in enumerate(raw):
        where = f"cluster.stragglers[{i}]"
        if (
            not isinstance(item, dict)
            or "worker" not in item
            or not effects & set(item)
            or set(item) - {"worker"} - effects - optional
        ):
            raise SpecError(
                where,
                "must be a mapping with 'worker' and 'slowdown' (compute) and/or "
                "'bandwidth_factor' (NIC) (optional: from_iteration, "
                "until_iteration)",
            )
        worker = _coerce(f"{where}.worker", item["worker"], int)
        if not 0 <= worker < workers or worker in seen:
            raise SpecError(
                f"{where}.worker",
                f"must be a distinct worker index in 0..{workers - 1} (got {worker})",
            )
        slowdown = _coerce(f"{where}.slowdown", item.get("slowdown", 1.0), float)
        if not 1.0 <= slowdown <= 1000:
            raise SpecError(f"{where}.slowdown", f"must be a factor in [1, 1000] (got {slowdown})")
        factor = _coerce(f"{where}.bandwidth_factor", item.get("bandwidth_factor", 1.0), float)
        if not 0.001 <= factor <= 1.0:
            raise SpecError(
                f"{where}.bandwidth_factor",
                f"must be a factor in [0.001, 1] of the cluster's bandwidth (got {factor})",
            )
        seen.add(worker)
        out.append(Straggler(worker, slowdown, *_iteration_range(where, item), factor))
    return tuple(out)


def _ps_stragglers(raw: Any, servers: int) -> tuple[PSStraggler, ...]:
    if not isinstance(raw, list):
        raise SpecError(
            "cluster.ps_stragglers", "must be a list of {server, bandwidth_factor, cpu_slowdown}"
        )
    allowed = {"server", "bandwidth_factor", "cpu_slowdown", "from_iteration", "until_iteration"}
    out = []
    seen = set()
    for i, item in enumerate(raw):
        where = f"cluster.ps_stragglers[{i}]"
        if not isinstance(item, dict) or "server" not in item or set(item) - allowed:
            raise SpecError(
                where, f"must be a mapping with 'server' (optional: {', '.join(sorted(allowed))})"
            )
        server = _coerce(f"{where}.server", item["server"], int)
        if not 0 <= server < servers or server in seen:
            raise SpecError(
                f"{where}.server",
                f"must be a distinct server index in 0..{servers - 1} (got {server})",
            )
        factor = _coerce(f"{where}.bandwidth_factor", item.get("bandwidth_factor", 1.0), float)
        if not 0 < factor <= 1:
            raise SpecError(
                f"{where}.bandwidth_factor", f"must be a fraction in (0, 1] (got {factor})"
            )
        cpu = _coerce(f"{where}.cpu_slowdown", item.get("cpu_slowdown", 1.0), float)
        if not 1.0 <= cpu <= 1000:
            raise SpecError(f"{where}.cpu_slowdown", f"must be a factor in [1, 1000] (got {cpu})")
        seen.add(server)
        out.append(PSStraggler(server, factor, cpu, *_iteration_range(where, item)))
    return tuple(out)


def _unknown_keys(raw: dict[Any, Any], allowed: set[str]) -> list[str]:
    """Keys not in ``allowed``, as sortable strings (YAML allows non-string keys)."""
    return sorted(repr(k) if not isinstance(k, str) else k for k in raw if k not in allowed)


def _int(raw: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    if key not in raw:
        return default
    value = _coerce(key, raw[key], int)
    if not low <= value <= high:
        raise SpecError(key, f"must be between {low} and {high} (got {value})")
    return value


def _coerce(field_path: str, value: Any, kind: type) -> Any:
    """Accept JSON-ish values of the right kind; never silently truncate."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise SpecError(field_path, f"must be true or false (got {value!r})")
    if kind is int:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value != int(value)
        ):
            raise SpecError(field_path, f"must be an integer (got {value!r})")
        return int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(field_path, f"must be a number (got {value!r})")
        if not math.isfinite(value):
            raise SpecError(field_path, f"must be finite (got {value!r})")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise SpecError(field_path, f"must be a string (got {value!r})")
        return value
    raise TypeError(f"unsupported parameter type {kind}")
