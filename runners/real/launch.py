"""Run a ``mode: real`` spec: check it against this machine, make the plan with the same
policy code as the simulator, start the ranks with ``torchrun`` (on loopback, or one
``torchrun`` per network namespace of the emulated testbed, c10d rendezvous), follow their
progress, and turn their per-rank records into the run directory's results.

Checks done before any process starts (``preflight``; ``SpecError`` naming the field): a
shaped network without root, bandwidth or latency the testbed cannot emulate, more ranks than
the machine can hold, a model too big for its memory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import math
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import workloads

from ..manifest import busy_cores, cpu_ticks, steal_pct, usable_cpus
from ..policies.allreduce import CommPlan
from ..spec import RealOptions, RunSpec, SpecError
from . import others, priority
from . import testbed as tb

log = logging.getLogger("runners")

ROOT = Path(__file__).resolve().parents[2]
MAX_SHAPED_GBPS = 10.0  # the shaper on a veth pair: above this CPU-bound here (tbf)
MIN_SHAPED_GBPS = 0.001
RANKS_PER_CPU = 4
CUDA_CONTEXT_BYTES = 600 * 2**20  # a rank's CUDA context and NCCL's buffers on its GPU
TIMEOUT_S = float(os.environ.get("LAB_REAL_TIMEOUT_S", "1800"))
COLLECTIVE_TIMEOUT_S = 300.0


class RealRunError(RuntimeError):
    """The ranks failed; the message carries the tail of their logs."""


@dataclass
class Network:
    """What the run's network is: shaped (namespaces) or loopback, and why."""

    kind: str
    note: str = ""
    latency_emulated: bool = False
    health: dict[str, int] | None = None  # the testbed's counts (``Testbed.health``)
    delay_line: dict[str, Any] | None = None  # its counts, where it added the latency

    def on(self, bed: tb.Testbed) -> None:
        """The run's network is ``bed`` (now set up): what it emulates, and the run log says
        what it does not (the launch's first line was written before the testbed existed)."""
        self.latency_emulated = bed.netem or bed.delayed
        self.note = bed.notes()
        if self.note:
            log.info("real run: shaped network: %s", self.note)

    def after(self, bed: tb.Testbed) -> None:
        """What ``bed`` counted over the run (its ranks done, the testbed still up)."""
        self.health = bed.health()
        self.delay_line = bed.delay_counts()


@dataclass
class RealResult:
    metrics: dict[str, float]
    units: dict[str, str]
    series: list[dict[str, Any]]
    timeline: list[list[Any]]
    network: Network
    ranks: list[dict[str, Any]] = field(default_factory=list)
    comm_priority: str = "normal"  # the communication threads' (runners.real.priority)
    comm_priority_note: str = ""  # why, where it is not what the spec asked
    servers_aggregate: list[str] = field(default_factory=list)  # PS: each server's (priority)
    device: str = "cpu"  # where the ranks trained (resolve_device)
    device_note: str = ""  # why, where the spec asked for auto and got the CPU
    others: others.Others | None = None  # other processes' CPU beside the steady iterations

    def priority_record(self) -> dict[str, Any]:
        """The run summary's ``comm_priority``: what the run had, with rank 0's threads per
        priority as counted at the end of its training loop and its compute thread's; in the
        PS arena, each server's aggregating (main) thread's as it served."""
        first = self.ranks[0] if self.ranks else {}
        return {
            "priority": self.comm_priority,
            "note": self.comm_priority_note,
            "rank0_threads": first.get("threads", {}),
            "rank0_compute": first.get("compute_priority", ""),
            **({"servers_aggregate": self.servers_aggregate} if self.servers_aggregate else {}),
        }

    def device_record(self) -> dict[str, Any]:
        """The run summary's ``device``: where the ranks trained, why (for ``auto``), and
        rank 0's GPU when on one."""
        first = self.ranks[0] if self.ranks else {}
        record: dict[str, Any] = {"kind": self.device, "note": self.device_note}
        if first.get("gpu"):
            record["rank0_gpu"] = first["gpu"]
        return record


@dataclass(frozen=True)
class Nodes:
    """A real run spread over several machines (``LAB_NNODES`` > 1): this runner is node
    ``rank`` and starts its share of the ranks; every node's ``torchrun`` rendezvouses (c10d)
    at ``endpoint`` under ``run_id``. Set by the executor that starts one runner per node (the
    Slurm executor's batch script; by hand: the same spec on each machine with these variables).
    """

    count: int
    rank: int
    endpoint: str
    run_id: str

    @staticmethod
    def from_env() -> Nodes | None:
        """``LAB_NNODES``, ``LAB_NODE_RANK``, ``LAB_RDZV_HOST`` (host or host:port, port
        29400 by default), ``LAB_RDZV_ID`` (default: ``SLURM_JOB_ID``, else ``lab``)."""
        count = _env_int("LAB_NNODES", 1)
        if count <= 1:
            return None
        rank = _env_int("LAB_NODE_RANK", -1)
        host = os.environ.get("LAB_RDZV_HOST", "")
        if not 0 <= rank < count or not host:
            raise SpecError(
                "LAB_NODE_RANK",
                f"a run over LAB_NNODES={count} nodes needs LAB_NODE_RANK in 0..{count - 1} "
                "and LAB_RDZV_HOST (the first node's address)",
            )
        endpoint = host if ":" in host else f"{host}:29400"
        run_id = os.environ.get("LAB_RDZV_ID") or os.environ.get("SLURM_JOB_ID") or "lab"
        return Nodes(count, rank, endpoint, run_id)


def _env_int(name: str, default: int) -> int:
    """The whole number in environment variable ``name`` (``default`` when unset or empty);
    ``SpecError`` naming it otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise SpecError(name, f"must be a whole number (got {text!r})") from None


def framework(spec: RunSpec) -> str | None:
    """``ddp`` or ``horovod`` when the run trains with that framework's own implementation,
    ``None`` when the lab's engine executes the system's plan (``real.implementation``)."""
    options = spec.real or RealOptions()
    if spec.system in ("ddp", "horovod") and options.implementation == "default":
        return spec.system
    return None


def network_for(spec: RunSpec) -> Network:
    """The network the run gets (``SpecError`` if it asks for one it cannot have)."""
    options = spec.real or RealOptions()
    why_not = tb.can_shape()
    if options.network == "loopback":
        return Network("loopback", "real.network is loopback: bandwidth and latency not applied")
    if framework(spec) == "horovod" and not why_not and not shutil.which("unshare"):
        why_not = "the real Horovod on the emulated network needs 'unshare' (util-linux)"
    if why_not:
        if options.network == "shaped":
            raise SpecError(
                "real.network",
                f"shaped asks for the emulated network, but {why_not}; run as root or set "
                "real.network: loopback",
            )
        return Network("loopback", f"not shaped ({why_not}): bandwidth and latency not applied")
    return Network("shaped")


def worker_rates(spec: RunSpec, iteration: int) -> list[float]:
    """Each worker's shaped NIC rate in ``iteration``: the cluster's bandwidth times the
    ``bandwidth_factor`` of its straggler when that is active then."""
    c = spec.cluster
    rates = [float(c.bandwidth_gbps)] * c.workers
    for s in c.stragglers:
        if s.active(iteration):
            rates[s.worker] *= s.bandwidth_factor
    return rates


def comm_priority(spec: RunSpec) -> tuple[str, str]:
    """The communication threads' priority for ``spec`` on this machine and, where it is not
    what the spec asked (``auto`` without the permission), why (``runners.real.priority``).
    ``realtime`` without the permission is refused.

    In the all-reduce arena, ``auto`` is ``normal`` where this host has at least twice as many
    ranks as CPUs: their communication threads under ``SCHED_FIFO`` then held every core and
    starved the compute until the kernel's real-time throttling let it run. Measured on our
    2-CPU machine (wfbp, resnet50-debug, shaped 10 Gbit/s): 4 ranks took over 60 s per
    iteration under ``realtime`` against 0.25 s at ``normal``; 3 ranks were faster under
    ``realtime`` (71 ms against 147 ms), so the threshold is 2 ranks per CPU. An explicit
    ``realtime`` is kept, with that said in the run's note. The PS arena keeps ``realtime``
    with its servers on the same cores (2 workers and 4 servers on 2 CPUs: 53-73 ms per
    iteration against 125-149 ms at ``normal``)."""
    real = spec.real or RealOptions()
    requested = real.comm_priority
    nodes = Nodes.from_env()  # a run over several hosts started by hand, else real.nodes
    hosts = nodes.count if nodes is not None else max(real.nodes, 1)
    ranks, cpus = spec.cluster.workers // hosts, usable_cpus()
    try:
        prio, note = priority.resolve(requested)
    except PermissionError as err:
        raise SpecError(
            "real.comm_priority",
            f"realtime is not permitted here ({err}): run as root, or use auto or normal",
        ) from None
    if prio == "realtime" and spec.arena == "allreduce" and ranks >= 2 * cpus:
        if requested == "auto":
            return "normal", (
                f"communication threads at normal priority: {ranks} ranks on {cpus} CPUs "
                "(under SCHED_FIFO they could hold every core and starve the compute; "
                "real.comm_priority: realtime overrides)"
            )
        note = (
            f"realtime as asked, with {ranks} ranks on {cpus} CPUs: the communication threads "
            "can hold every core and starve the compute (4 ranks on 2 CPUs took over 60 s per "
            "iteration here); auto would run them at normal priority"
        )
    return prio, note


def cuda_devices() -> int:
    """The CUDA devices this process's torch sees (after ``CUDA_VISIBLE_DEVICES``)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(spec: RunSpec) -> tuple[str, str]:
    """Where the ranks train, ``cuda`` or ``cpu`` (``real.device``), and, for ``auto`` on the
    CPU where GPUs are visible or wanted, why. ``cuda`` needs a CUDA device for every rank on
    this host (NCCL: one GPU per rank) and, for the real Horovod, a Horovod built with NCCL;
    ``real.device: cuda`` without them is refused (``SpecError``)."""
    real = spec.real or RealOptions()
    asked = real.device
    if asked == "cpu":
        return "cpu", ""
    visible = cuda_devices()
    if spec.arena != "allreduce":  # refused with cuda by the spec's validation
        return "cpu", "the PS arena trains on the CPU (gloo point to point)" if visible else ""
    per_host = spec.cluster.workers // real.nodes
    why = ""
    if asked == "auto" and real.nodes > 1 and real.gpus < per_host:
        # every host must take the same decision: only GPUs the ledger gave every host count
        why = (
            f"a run over several hosts goes on GPUs with real.device cuda, or real.gpus "
            f"{per_host} (a GPU per rank on every host)"
        )
    elif visible < per_host:
        why = (
            "no CUDA device is visible to torch here"
            if not visible
            else f"{visible} CUDA device{'s' if visible > 1 else ''} here for {per_host} ranks "
            "(NCCL needs one per rank)"
        )
    elif framework(spec) == "horovod":
        from . import hvd

        if not hvd.nccl_built():
            why = (
                "the real Horovod here was built without NCCL (`make horovod` builds it for "
                "the CPU; the CUDA image, `make image-cuda`, has it with NCCL)"
            )
    if not why:
        return "cuda", ""
    if asked == "cuda":
        raise SpecError("real.device", f"cuda asked, but {why}; set real.device: cpu or auto")
    return "cpu", f"on the CPU: {why}" if visible or real.gpus else ""


# NCCL through the emulated network: sockets on the namespace's interface, not the GPUs' own
# links (peer to peer, shared memory) or InfiniBand, which would bypass the shaped veth pairs.
NCCL_SHAPED_ENV = {
    "NCCL_SOCKET_IFNAME": "=eth0",  # exactly eth0 (without "=", a prefix)
    "NCCL_NET": "Socket",  # not a network plugin's transport
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_IB_DISABLE": "1",
    "NCCL_NVLS_ENABLE": "0",
}


def preflight(spec: RunSpec) -> Network:
    """Check a real run against this machine before anything starts; returns its network."""
    if spec.arena not in ("allreduce", "ps"):
        raise SpecError(
            "system", f"real mode runs the all-reduce and PS arenas only (got {spec.arena})"
        )
    comm_priority(spec)
    device = "cuda" if spec.real and spec.real.gpus and spec.real.device != "cpu" else "cpu"
    if not (spec.real and spec.real.gpus):
        # GPUs asked of the portal's ledger are checked where the run lands (launch.run);
        # otherwise they are this machine's
        device = resolve_device(spec)[0]
    if framework(spec) == "horovod":
        from . import hvd

        if hvd.available() is None:
            raise SpecError(
                "system",
                "horovod runs the real Horovod, which is not installed here: run `make horovod`",
            )
    c = spec.cluster
    nodes = Nodes.from_env()
    links = [i for i, s in enumerate(c.stragglers) if s.bandwidth_factor != 1.0]
    if links and nodes is not None:
        raise SpecError(
            f"cluster.stragglers[{links[0]}].bandwidth_factor",
            "a worker's NIC straggler needs the emulated network on one machine, not a run "
            "over several hosts (it would not be applied)",
        )
    if nodes is not None:
        if spec.arena != "allreduce":
            raise SpecError(
                "system",
                "a run over several nodes is for the all-reduce arena (torchrun, or the real "
                "Horovod's rendezvous), not the PS arena",
            )
        if c.workers % nodes.count:
            raise SpecError(
                "cluster.workers",
                f"{c.workers} workers do not split evenly over {nodes.count} nodes",
            )
        _check_memory(spec, c.workers // nodes.count, 0, device)  # this node's share
        return Network(
            kind="nodes",
            note=f"{nodes.count} nodes over their own network (not shaped: bandwidth and "
            "latency are the cluster's)",
        )
    network = network_for(spec)
    if links and network.kind != "shaped":
        raise SpecError(
            f"cluster.stragglers[{links[0]}].bandwidth_factor",
            "a worker's NIC straggler needs the emulated network (real.network: shaped, as "
            "root); on loopback it would not be applied",
        )
    if links:
        total = spec.warmup_iterations + spec.iterations
        slowest = min(min(worker_rates(spec, it)) for it in range(total))
        if slowest < MIN_SHAPED_GBPS:
            raise SpecError(
                f"cluster.stragglers[{links[0]}].bandwidth_factor",
                f"a straggler's NIC would get {slowest:g} Gbit/s: the emulated network shapes "
                f"{MIN_SHAPED_GBPS:g}..{MAX_SHAPED_GBPS:g} Gbit/s",
            )
    if network.kind == "shaped":
        if not MIN_SHAPED_GBPS <= c.bandwidth_gbps <= MAX_SHAPED_GBPS:
            raise SpecError(
                "cluster.bandwidth_gbps",
                f"the emulated network shapes {MIN_SHAPED_GBPS:g}..{MAX_SHAPED_GBPS:g} Gbit/s "
                f"(got {c.bandwidth_gbps:g}); use the simulator beyond that",
            )
        if c.latency_us > tb.MAX_LATENCY_US:
            raise SpecError(
                "cluster.latency_us",
                f"the emulated network adds at most {tb.MAX_LATENCY_US:g} us (got "
                f"{c.latency_us:g}); use the simulator beyond that",
            )
        why = tb.can_delay() if c.latency_us > tb.NATIVE_LATENCY_US else None
        if why and not tb.netem_available():
            raise SpecError(
                "cluster.latency_us",
                f"the emulated network cannot add latency on this machine ({why}): at most "
                f"{tb.NATIVE_LATENCY_US:g} us, the testbed's own (got {c.latency_us:g})",
            )
    cpus = usable_cpus()
    ranks, servers, server_field = c.workers, 0, "cluster.workers"
    if spec.arena == "ps":  # one process per parameter server as well (runners.real.ps)
        from . import ps

        servers, server_field = ps.preflight(spec, network)
        ranks += servers
    if ranks > RANKS_PER_CPU * cpus:
        what = f"{ranks} ranks" if not servers else (
            f"{ranks} ranks ({c.workers} workers + {servers} servers)"
        )  # fmt: skip
        raise SpecError(
            "cluster.workers" if c.workers > RANKS_PER_CPU * cpus or not servers
            else server_field,
            f"{what} on {cpus} CPUs: at most {RANKS_PER_CPU * cpus} on this machine",
        )  # fmt: skip
    _check_memory(spec, ranks, servers, device)
    return network


def memory_need(spec: RunSpec) -> tuple[int, int]:
    """``(each process's bytes besides its training step, a worker's training step)`` for
    ``spec``'s workload: the process (``workloads.PROCESS_BYTES``) with the weights' copies
    it holds throughout (``WorkloadProfile.resident_bytes``: weights, the engine's flat
    buffers, momentum; a server holds its shard of them, counted as all of them), and the
    most a worker's training step at ``spec.batch_size`` holds at once beyond them (the
    profile's ``step_peak_bytes``: activations, gradients, the backward's transients). On
    the CPU ``_check_memory`` counts the step ``workloads.HOST_HEAP_SLACK`` times over for
    glibc's heap (one CPU worker at batch 32, 2026-12-08: transformer 9.32 GiB resident,
    6.06 estimated before the slack, 11.0 with it; bert-base 8.47, 5.07, 8.5; resnet50 4.51,
    3.25, 5.8; vgg16 4.44, 4.60, 7.3; gpt2 at batch 1: 5.33, 4.69, 7.6)."""
    profile = workloads.load_profile(spec.workload)
    fixed = workloads.PROCESS_BYTES + profile.resident_bytes()
    return fixed, profile.step_bytes(spec.batch_size)


def _check_memory(spec: RunSpec, ranks: int, servers: int, device: str) -> None:
    """Refuse (``SpecError``) a run whose processes need more than 80 % of this machine's
    available memory, or on GPUs, whose ranks need more than 90 % of a GPU's free memory
    (``memory_need``): before any process starts, not the kernel's OOM killer half way."""
    fixed, step = memory_need(spec)
    workers = ranks - servers
    slack = workloads.HOST_HEAP_SLACK
    on_host = 0 if device == "cuda" else round(slack * step)
    need = ranks * fixed + workers * on_host
    have = _available_memory()
    advice = (
        f"use {spec.workload.removesuffix('-debug')}-debug, fewer workers or a smaller batch_size"
    )
    what = (
        f" (a worker's training step holds {step / 2**30:.1f} GiB at batch_size "
        f"{spec.batch_size}, counted {slack:g} times for the CPU's heap)"
        if on_host
        else ""
    )
    if have is not None and need > workloads.HOST_MEMORY_SHARE * have:
        raise SpecError(
            "workload",
            f"{spec.workload} on {ranks} rank{'s' if ranks > 1 else ''} needs about "
            f"{need / 2**30:.1f} GiB{what}, this machine has {have / 2**30:.1f} GiB "
            f"available; {advice}",
        )
    if device != "cuda":
        return
    gpu_need = fixed - workloads.PROCESS_BYTES + step  # the weights' copies on the GPU
    free = _gpu_free_memory()
    if free and gpu_need + CUDA_CONTEXT_BYTES > workloads.GPU_MEMORY_SHARE * min(free):
        raise SpecError(
            "workload",
            f"{spec.workload} needs about {(gpu_need + CUDA_CONTEXT_BYTES) / 2**30:.1f} GiB "
            f"a GPU (its training step {step / 2**30:.1f} GiB at batch_size "
            f"{spec.batch_size}), the GPUs here have {min(free) / 2**30:.1f} GiB free; "
            f"{advice}",
        )


def _gpu_free_memory() -> list[int]:
    """Each visible CUDA device's free bytes (``torch.cuda.mem_get_info``); empty without
    one."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]


def _available_memory() -> int | None:
    return workloads.available_memory()


def _plan(spec: RunSpec) -> CommPlan:
    """The policy's plan, from the same code (and planning oracle) as the simulator."""
    from ..sim import allreduce as sim

    setup = sim.compute_setup(spec)
    return sim.plan_for(spec, setup, sim.network_for(spec))


def engine_dispatch(spec: RunSpec) -> str:
    """How the lab's engine will issue ``spec``'s collectives (``runners.real.engine``):
    ``inline`` from the gradient hooks where ``real.dispatch`` is ``auto`` and the plan
    allows it (``inline_eligible``), else ``thread``."""
    from ..policies.allreduce import inline_eligible

    if spec.real.dispatch == "auto" and inline_eligible(_plan(spec)):
        return "inline"
    return "thread"


def run(
    spec: RunSpec,
    work: Path,
    progress: Callable[[int, int], None] | None = None,
    interleave: dict[str, Any] | None = None,
) -> RealResult:
    """Train ``spec`` for real; ``work`` holds the job file and the ranks' logs and records.
    The metrics get ``machine_steal_pct``, the share of this machine's CPU time a hypervisor
    took while the run ran (``/proc/stat``; left out where it cannot be read): on a contended
    host, runs are slower and noisier than their configuration's usual. And ``other_cores``
    (and ``result.others``): the CPU other processes on this machine took beside the steady
    iterations (``runners.real.others``), with a warning in the log from ``FLAG_CORES``
    (left out where rank 0 ran on another machine). ``interleave`` is the
    engine bench's (``bench.run_real``; ``worker._train_interleaved``): DDP and the lab's
    engine in turns in the same ranks; the series' rows then carry ``side``, ``block`` and
    ``trim``, and the summary metrics mix the sides."""
    before = cpu_ticks()
    with others.Watch() as watch:
        result = _run(spec, work, progress, interleave)
    stolen = steal_pct(before, cpu_ticks())
    if stolen is not None:
        result.metrics["machine_steal_pct"] = stolen
        result.units["machine_steal_pct"] = "%"
    window = steady_window(result.ranks)
    seen = watch.over(*window) if window is not None else None
    if seen is not None:
        result.others = seen
        result.metrics["other_cores"] = seen.cores
        result.units["other_cores"] = "cores"
        if seen.cores >= others.FLAG_CORES:
            log.warning(
                "other processes on this machine used %s beside the run's steady iterations: "
                "its times are slower and noisier than on a quiet machine; run it again when "
                "they have ended", seen.words(),
            )  # fmt: skip
    return result


def steady_window(ranks: list[dict[str, Any]]) -> tuple[float, float] | None:
    """Rank 0's steady iterations on this machine's ``time.perf_counter``: from the first
    measured iteration's begin to the last one's (the intervals the timing metrics average);
    ``None`` where rank 0 ran on another machine (its clock's boot id is not ours) or has
    fewer than two measured iterations."""
    from .worker import boot_id

    if not ranks:
        return None
    clock = ranks[0].get("clock")
    if clock is not None and clock.get("boot_id") not in (None, boot_id()):
        return None
    begins = [r["begin"] for r in ranks[0].get("iterations", []) if not r["warmup"]]
    if len(begins) < 2:
        return None
    return begins[0], begins[-1]


def _run(
    spec: RunSpec,
    work: Path,
    progress: Callable[[int, int], None] | None = None,
    interleave: dict[str, Any] | None = None,
) -> RealResult:
    """``run`` without the steal measurement."""
    from .worker import plan_to_json

    network = preflight(spec)
    work = work.resolve()  # the ranks start in the project's root, not in our directory
    if spec.arena == "ps":  # workers and server processes: runners.real.ps
        from . import ps

        return ps.run(spec, work, network, progress)
    options = spec.real or RealOptions()
    nodes = Nodes.from_env()
    if options.nodes > 1 and (nodes is None or nodes.count != options.nodes):
        raise SpecError(
            "real.nodes",
            f"{options.nodes} hosts asked, but this runner was started as one of "
            f"{nodes.count if nodes else 1}: the portal starts one runner per host; by hand, "
            f"set LAB_NNODES={options.nodes}, LAB_NODE_RANK and LAB_RDZV_HOST on each",
        )
    plan = _plan(spec)
    prio, prio_note = comm_priority(spec)
    device, device_note = resolve_device(spec)
    profile = workloads.load_profile(spec.workload)
    end = spec.warmup_iterations + spec.iterations
    window = [0, end] if spec.timeline_iterations == 0 else [
        max(0, end - spec.timeline_iterations), end
    ]  # fmt: skip
    params = dict(spec.params)
    job = {
        "spec": spec.as_dict(),
        "plan": plan_to_json(plan),
        "layers": [layer.name for layer in profile.layers],
        "grad_bytes": [layer.param_bytes for layer in profile.layers],
        "approximation": params.get("approximation", "stale"),
        "train": {
            "dataset": options.dataset,
            "lr": options.lr,
            "momentum": options.momentum,
            "threads": options.threads,
            "framework": framework(spec),
            "comm_priority": prio,
            "device": device,
            "dispatch": options.dispatch,  # the lab's engine's (runners.real.engine)
            "ddp_timeline": options.ddp_timeline,  # PyTorch's DDP's buckets timed (worker)
        },
        "timeline": window,
        "timeout_s": COLLECTIVE_TIMEOUT_S,
        "save_params": bool(os.environ.get("LAB_REAL_SAVE_PARAMS")),
        "nodes": nodes.count if nodes else 1,
    }
    if interleave is not None:
        if spec.system != "ddp" or job["train"]["framework"] or network.kind != "loopback" or nodes:
            raise ValueError("interleave: the ddp system on the lab's engine, loopback, one host")
        if device != "cpu":
            raise ValueError("interleave: CPUs only (the bench's engine-overhead comparison)")
        job["interleave"] = interleave
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps(job))
    log.info(
        "real run: %d ranks on %s, %s network%s; %s", spec.cluster.workers,
        "GPUs (NCCL)" if device == "cuda" else "CPUs (gloo)", network.kind,
        f" ({network.note})" if network.note else "", priority_words(prio, prio_note),
    )  # fmt: skip
    if device_note:
        log.info("real run: %s", device_note)
    started = time.perf_counter()
    n = spec.cluster.workers
    horovod = framework(spec) == "horovod"
    reshaper: tb.Reshaper | None = None
    extra = {}
    if horovod:
        from . import hvd

        extra = hvd.settings_env(spec.params)
    if nodes is not None and horovod:
        _supervise_horovod_nodes(
            nodes, n // nodes.count, work, extra, options.threads, end, progress
        )
    elif nodes is not None:
        per_node = n // nodes.count
        argv = [sys.executable, "-m", "torch.distributed.run", "--max-restarts", "0",
                *torchrun_log_dir(work), "--nnodes", str(nodes.count),
                "--node-rank", str(nodes.rank),
                "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", nodes.endpoint, "--rdzv-id", nodes.run_id,
                "--rdzv-conf", f"is_host={'true' if nodes.rank == 0 else 'false'}",
                "--module", "runners.real.worker", str(work)]  # fmt: skip
        _supervise([(argv, {})], work, options.threads, end, progress)
    elif network.kind == "shaped":
        with tb.testbed(worker_rates(spec, 0), spec.cluster.latency_us) as bed:
            network.on(bed)
            if any(s.bandwidth_factor != 1.0 for s in spec.cluster.stragglers):
                progress = reshaper = tb.Reshaper(
                    bed, lambda it: worker_rates(spec, it), 0, progress
                )
            if horovod:
                settings = {**extra, **(NCCL_SHAPED_ENV if device == "cuda" else {})}
                _supervise_horovod(bed, work, settings, options.threads, end, progress)
            else:

                def nccl(k: int) -> dict[str, str]:  # each rank a host of its own to NCCL
                    if device != "cuda":
                        return {}
                    return {**NCCL_SHAPED_ENV, "NCCL_HOSTID": f"{bed.address(k)}"}

                commands = [
                    (bed.wrap(k, _torchrun(spec, work, k, bed)),
                     {"LAB_WORKER": str(k), "LAB_LOCAL_DEVICE": str(k),
                      "GLOO_SOCKET_IFNAME": "eth0", **nccl(k)})
                    for k in range(n)
                ]  # fmt: skip
                _supervise(commands, work, options.threads, end, progress, bed.broken)
            network.after(bed)
    elif horovod:
        argv = horovodrun_argv(n, "runners.real.worker", work)
        _supervise([(argv, extra)], work, options.threads, end, progress)
    else:
        commands = [(_torchrun(spec, work, None, None), {})]
        _supervise(commands, work, options.threads, end, progress)
    wall_s = time.perf_counter() - started
    ranks = [json.loads((work / f"rank{r}.json").read_text()) for r in range(spec.cluster.workers)]
    result = _results(spec, ranks, network)
    result.comm_priority, result.comm_priority_note = prio, prio_note
    result.device, result.device_note = device, device_note
    result.metrics["real_wall_s"] = wall_s
    result.units["real_wall_s"] = "s"
    if reshaper is not None:
        result.metrics["link_reshapes"] = float(reshaper.changes)
        result.units["link_reshapes"] = ""
    for key, value in dict(plan.info).items():
        result.metrics[f"plan.{key}"] = value
        result.units[f"plan.{key}"] = ""
    return result


def priority_words(prio: str, note: str) -> str:
    """The run log's words for the communication threads' priority."""
    return note or f"communication threads at {prio} priority"


def _start(argv: list[str], env: dict[str, str], stdin: int = subprocess.DEVNULL) -> Any:
    """A process of this run: output on one text pipe, in its own session (stopped as a
    group), in the project's root, dying with the launcher."""
    return subprocess.Popen(
        argv,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def _pythonpath() -> str:
    """The project's root first, then whatever PYTHONPATH the caller had."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


@contextlib.contextmanager
def _horovod_server(argv: list[str]) -> Iterator[int]:
    """Horovod's rendezvous server (``argv``: ``python -m runners.real.hvd serve ...``, maybe
    wrapped in a namespace) while the block runs; yields the port it listens on."""
    server = _start(argv, {**os.environ, "PYTHONPATH": _pythonpath()}, stdin=subprocess.PIPE)
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 60.0
        port = 0
        while not port and time.monotonic() < deadline and server.poll() is None:
            ready, _, _ = select.select([server.stdout], [], [], 1.0)
            if not ready:
                continue
            line = server.stdout.readline()  # type: ignore[union-attr]
            if line.startswith("port "):
                port = int(line.split()[1])
            elif line:
                seen.append(line)  # a warning before the port: keep reading
        if not port:
            raise RuntimeError(
                f"Horovod's rendezvous server did not start: {''.join(seen).strip()[-500:]}"
            )
        yield port
    finally:
        with contextlib.suppress(OSError):
            server.stdin.close()  # type: ignore[union-attr]
            server.stdout.close()  # type: ignore[union-attr]
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def horovodrun_argv(n: int, module: str, work: Path) -> list[str]:
    """``n`` ranks of ``python -m module work`` under ``horovodrun --gloo`` on this machine."""
    horovodrun = str(Path(sys.executable).parent / "horovodrun")
    return [horovodrun, "--gloo", "-np", str(n), "-H", f"localhost:{n}",
            sys.executable, "-m", module, str(work)]  # fmt: skip


def _supervise_horovod(
    bed: tb.Testbed,
    work: Path,
    settings: dict[str, str],
    threads: int,
    total: int,
    progress: Callable[[int, int], None] | None,
    module: str = "runners.real.worker",
) -> None:
    """The real Horovod on the emulated network (``runners.real.hvd``): Horovod's rendezvous
    server in node 0's namespace, then one rank per namespace with ``horovodrun``'s variables
    (each ``python -m module work``), supervised like every other real run."""
    from . import hvd

    addresses = [bed.address(k) for k in range(bed.nodes)]
    serve = [sys.executable, "-m", "runners.real.hvd", "serve", *addresses]
    with _horovod_server(bed.wrap(0, serve)) as port:
        worker = [sys.executable, "-m", module, str(work)]
        commands = [
            (
                bed.wrap(k, hvd.with_hostname(addresses[k], worker)),
                {**settings, **hvd.rank_env(addresses, k, addresses[0], port),
                 "LAB_WORKER": str(k), "LAB_LOCAL_DEVICE": str(k)},
            )
            for k in range(len(addresses))
        ]  # fmt: skip
        _supervise(commands, work, threads, total, progress, bed.broken)


def _loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _loopback_literal(host: str) -> bool:
    """``localhost`` or a loopback address written as such (not a name that resolves to one)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


HOROVOD_JOIN_S = 900.0  # how long a node waits for node 0's rendezvous server (c10d: 900 s)


def _supervise_horovod_nodes(
    nodes: Nodes,
    per_node: int,
    work: Path,
    settings: dict[str, str],
    threads: int,
    total: int,
    progress: Callable[[int, int], None] | None,
) -> None:
    """This node's share of the real Horovod over several machines, as ``horovodrun`` would
    start it: node 0 runs Horovod's rendezvous server on the agreed port (``LAB_RDZV_HOST``);
    every node waits for it, then starts its ``per_node`` ranks with the variables of
    Horovod's host assignment (hosts ``node<k>:<per_node>``), gloo on the interface towards
    node 0. Horovod's process sets bind the address the host name resolves to (see
    ``runners.real.hvd``): where that is loopback but node 0 is not, the ranks get a UTS
    namespace named after this machine's address (root), or the run stops with what to fix."""
    from . import hvd

    host, port = nodes.endpoint.rsplit(":", 1)
    hosts = hvd.node_hosts(nodes.count, per_node)
    address, iface = hvd.interface_toward(host, int(port))
    if _loopback(address) and not _loopback_literal(host):
        # node 0's own name resolves to loopback here (Debian's "127.0.1.1 name" line), but
        # the other nodes reach it at its address: gloo must use the default route's interface
        address, iface = hvd.interface_toward("192.0.2.1", 9)
        if _loopback(address):
            raise RealRunError(
                f"{host} resolves to {socket.gethostbyname(host)} here and this machine has no "
                f"default route: the other nodes could not reach Horovod's ranks on node 0"
            )
    fix_name = hvd.name_resolves_to_loopback() and not _loopback(address)
    if fix_name and os.geteuid() != 0:
        raise RealRunError(
            f"this machine's host name ({socket.gethostname()}) resolves to a loopback address, "
            f"so Horovod 0.28.1's process sets would bind it and node 0 at {host} could not "
            f"reach this node: map the name to {address} in /etc/hosts, or run as root"
        )
    worker = [sys.executable, "-m", "runners.real.worker", str(work)]
    if fix_name:
        worker = hvd.with_hostname(address, worker)

    def start_ranks() -> None:
        commands = [
            (worker, {**settings, **hvd.rank_env(hosts, r, host, int(port), iface),
                      "LAB_WORKER": str(r)})
            for r in range(nodes.rank * per_node, (nodes.rank + 1) * per_node)
        ]  # fmt: skip
        _supervise(commands, work, threads, total, progress)

    if nodes.rank == 0:
        serve = [sys.executable, "-m", "runners.real.hvd", "serve", "--port", port, *hosts]
        with _horovod_server(serve):
            start_ranks()
        return
    deadline = time.monotonic() + HOROVOD_JOIN_S
    while True:  # Horovod's ranks give up on a server that is not there yet
        try:
            socket.create_connection((host, int(port)), timeout=2.0).close()
            break
        except OSError as err:
            if time.monotonic() > deadline:
                raise RealRunError(
                    f"node 0's Horovod rendezvous server at {nodes.endpoint} did not answer "
                    f"within {HOROVOD_JOIN_S:g} s ({err})"
                ) from err
            time.sleep(1.0)
    start_ranks()


def _torchrun(
    spec: RunSpec,
    work: Path,
    node: int | None,
    bed: tb.Testbed | None,
    nodes: int | None = None,
) -> list[str]:
    """``torchrun`` for all ranks (loopback) or for ``node`` of ``bed``; ``nodes`` ranks in
    all (default: one per worker; the PS arena adds its server processes)."""
    n = spec.cluster.workers if nodes is None else nodes
    return torchrun_argv("runners.real.worker", work, n, node, bed)


TORCHRUN_LOGS = ".torchrun"  # under a launch's work folder; removed when the launch ends


def torchrun_log_dir(work: Path) -> list[str]:
    """``torchrun``'s own folder (its agent's per-attempt files) inside ``work``, removed by
    ``_supervise``: by default torchrun makes a ``torchelastic_*`` folder in the system's
    temporary folder for every launch and never removes it (3,311 of them had piled up in
    this machine's /tmp over the real runs and calibrations of a few weeks)."""
    return ["--log-dir", str(work / TORCHRUN_LOGS)]


def torchrun_argv(
    module: str, work: Path, nodes: int, node: int | None, bed: tb.Testbed | None
) -> list[str]:
    """``torchrun`` starting ``python -m module work``: all ``nodes`` ranks here (loopback),
    or rank ``node`` in its namespace of ``bed`` (c10d rendezvous at node 0)."""
    base = [sys.executable, "-m", "torch.distributed.run", "--max-restarts", "0",
            *torchrun_log_dir(work)]  # fmt: skip
    target = ["--module", module, str(work)]
    if bed is None or node is None:
        # The loopback address, not the host name: a container without a network (the docker
        # executor's) or a host whose name does not resolve still rendezvouses.
        return [*base, "--standalone", "--nnodes", "1", "--nproc-per-node", str(nodes),
                "--local-addr", "127.0.0.1", *target]  # fmt: skip
    return [
        *base,
        "--nnodes", str(nodes),
        "--nproc-per-node", "1",
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"{bed.address(0)}:29400",
        "--rdzv-id", bed.name,
        "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
        "--local-addr", bed.address(node),
        *target,
    ]  # fmt: skip


def _supervise(
    commands: list[tuple[list[str], dict[str, str]]],
    work: Path,
    threads: int,
    total: int,
    progress: Callable[[int, int], None] | None,
    broken: Callable[[], str | None] | None = None,
) -> None:
    """Start every command, follow rank 0's progress lines, and fail with the logs' tails if
    any command fails, the run exceeds ``TIMEOUT_S`` or ``broken`` says why the run cannot go
    on (the testbed's ``Testbed.broken``); stops every process on the way out."""
    env = {
        **os.environ,
        "PYTHONPATH": _pythonpath(),
        "OMP_NUM_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[subprocess.Popen[str]] = []
    readers = []
    logs = []
    try:
        for k, (argv, extra) in enumerate(commands):
            path = work / f"node{k}.log"
            logs.append(path)
            proc = _start(argv, {**env, **extra})
            procs.append(proc)
            reader = threading.Thread(
                target=_follow, args=(proc, path, total, progress), daemon=True
            )
            reader.start()
            readers.append(reader)
        deadline = time.monotonic() + TIMEOUT_S
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            if time.monotonic() > deadline:
                raise RealRunError(f"the ranks did not finish within {TIMEOUT_S:g} s"
                                   + _tails(logs))  # fmt: skip
            why = broken() if broken is not None else None
            if why:
                raise RealRunError(why + _tails(logs))
            time.sleep(0.1)
        failed = [k for k, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed:
            _stop(procs)
            for reader in readers:
                reader.join(timeout=5)
            raise RealRunError(f"node {failed[0]} exited with {procs[failed[0]].returncode}"
                               + _tails(logs))  # fmt: skip
        for reader in readers:
            reader.join(timeout=5)
    finally:
        _stop(procs)
        shutil.rmtree(work / TORCHRUN_LOGS, ignore_errors=True)


def _die_with_parent() -> None:
    """(In the child, before exec.) SIGTERM when the launcher dies, even by SIGKILL, so torchrun
    stops its ranks instead of leaving them waiting for peers."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


def _follow(
    proc: subprocess.Popen[str],
    path: Path,
    total: int,
    progress: Callable[[int, int], None] | None,
) -> None:
    assert proc.stdout is not None
    with path.open("w") as out:
        for line in proc.stdout:
            if line.startswith("progress "):
                if progress is not None:
                    done, _ = line.split()[1:3]
                    progress(int(done), total)
                continue
            out.write(line)
            out.flush()


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                continue
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()


def _tails(logs: list[Path], lines: int = 15) -> str:
    """A rank's own error if one wrote it (``error<rank>.txt``), else the end of each node's
    log."""
    errors = sorted(logs[0].parent.glob("error*.txt")) if logs else []
    if errors:
        text = errors[0].read_text().strip().splitlines()
        return f"\n--- {errors[0].name} ---\n" + "\n".join(text[-lines:])
    parts = []
    for path in logs:
        try:
            text = path.read_text().splitlines()
        except OSError:
            continue
        # The ranks' own errors, not torchrun's report about them.
        errors = [
            line
            for line in text
            if ("Error" in line or "error" in line)
            and "ChildFailedError" not in line
            and "elastic" not in line
        ]
        tail = (errors[-5:] if errors else []) + text[-lines:]
        parts.append(f"\n--- {path.name} ---\n" + "\n".join(dict.fromkeys(tail)))
    return "".join(parts)


def _results(spec: RunSpec, ranks: list[dict[str, Any]], network: Network) -> RealResult:
    """Per-iteration series and summary metrics from the ranks' records. An iteration's time
    is the ranks' mean interval between its begin and the next (as compute and losses are
    the ranks' means). Not the longest: the ranks' iterations begin at different instants, so
    one rank's wait that another pays one iteration later (a slow all-reduce at the end of
    rank 1's backward, then rank 0's next forward waiting for rank 1) lies in different
    iterations of the two, and the longest per iteration counts it twice; the ranks' spans,
    coupled by the collectives, are the run's wall time, which the mean keeps. The timing
    metrics leave out the last iteration (its time includes the run's drain; see below)."""
    n = len(ranks[0]["iterations"])
    series = []
    clock = 0.0
    for i in range(n):
        rows = [r["iterations"][i] for r in ranks]
        it_s = statistics.fmean(row["iteration_time_s"] for row in rows)
        # Forward + backward (and an own framework's step), less the forward's waits for
        # synchronised parameters (the lab's engines' pre-forward hooks) and Horovod's or
        # DDP's wait for its all-reduces in the step (``sync_s``; DDP's on a GPU is not split).
        compute = statistics.fmean(
            row["forward_s"]
            + row["backward_s"]
            - row.get("fwd_wait_s", 0.0)
            - row.get("sync_s", 0.0)
            for row in rows
        )
        entry = {
            "iteration": rows[0]["iteration"],
            "warmup": rows[0]["warmup"],
            "start_s": clock,
            "iteration_time_s": it_s,
            "compute_time_s": compute,
            "loss": statistics.fmean(row["loss"] for row in rows),
        }
        if "side" in rows[0]:  # interleaved (``run``'s ``interleave``): every rank's alike
            entry.update(side=rows[0]["side"], block=rows[0]["block"], trim=rows[0]["trim"])
        if all("cpu_s" in row for row in rows):  # the process's, every thread of it
            entry["cpu_time_s"] = statistics.fmean(row["cpu_s"] for row in rows)
        if all("runq_wait_s" in row for row in rows):  # the training thread's alone
            entry["train_thread_cpu_s"] = statistics.fmean(row["thread_cpu_s"] for row in rows)
            entry["train_runq_wait_s"] = statistics.fmean(row["runq_wait_s"] for row in rows)
        if "wait_s" in rows[0]:  # the lab's engine
            entry["comm_time_s"] = statistics.fmean(row["comm_s"] for row in rows)
            entry["exposed_comm_s"] = statistics.fmean(row["wait_s"] for row in rows)
            entry["negotiations"] = statistics.fmean(row["negotiations"] for row in rows)
        elif all("sync_s" in row for row in rows):  # Horovod, DDP: their waits in the step
            entry["exposed_comm_s"] = statistics.fmean(row["sync_s"] for row in rows)
            if all("comm_s" in row for row in rows):  # DDP's timed buckets (``_DDPBuckets``)
                entry["comm_time_s"] = statistics.fmean(row["comm_s"] for row in rows)
        series.append(entry)
        clock += it_s
    measured = [s for s in series if not s["warmup"]]
    # The timing metrics are the steady state's, as the simulator's: the intervals between
    # successive iterations' begins. The run's last iteration has no next begin: its time
    # runs on to the end of the ranks' drain (the outstanding synchronisation, which the
    # next iteration's forward would otherwise overlap or wait for at its start, already
    # counted there; the final updates; the thread census), so it is left out of them (it
    # stays in the series). ``iterations`` is at least 3, so at least 2 intervals remain
    # (the simulator runs one iteration more and averages ``iterations`` intervals).
    steady = measured[:-1]
    times = [s["iteration_time_s"] for s in steady]
    mean = statistics.fmean(times)
    samples = spec.cluster.workers * spec.batch_size
    metrics: dict[str, float] = {
        "iteration_time_s": mean,
        "iteration_time_std_s": statistics.stdev(times) if len(times) > 1 else 0.0,
        "iteration_time_median_s": statistics.median(times),
        "throughput_samples_per_s": samples / mean if mean > 0 else math.nan,
        "compute_time_s": statistics.fmean(s["compute_time_s"] for s in measured),
        "final_loss": measured[-1]["loss"],
    }
    units = {
        "iteration_time_s": "s",
        "iteration_time_std_s": "s",
        "iteration_time_median_s": "s",
        "throughput_samples_per_s": "samples/s",
        "compute_time_s": "s",
        "final_loss": "",
    }
    if "negotiations" in measured[0]:
        # The steady iterations' too: the last one's exposed wait includes the drain's.
        for key in ("comm_time_s", "exposed_comm_s"):
            metrics[key] = statistics.fmean(s[key] for s in steady)
            units[key] = "s"
        metrics["negotiations_per_iteration"] = statistics.fmean(s["negotiations"] for s in steady)
        units["negotiations_per_iteration"] = ""
    elif "exposed_comm_s" in measured[0]:  # Horovod's or DDP's wait
        metrics["exposed_comm_s"] = statistics.fmean(s["exposed_comm_s"] for s in steady)
        units["exposed_comm_s"] = "s"
        if all("comm_time_s" in s for s in steady):  # DDP's buckets (Horovod's: not seen)
            metrics["comm_time_s"] = statistics.fmean(s["comm_time_s"] for s in steady)
            units["comm_time_s"] = "s"
    if all("cpu_time_s" in s for s in steady):
        # CPU time a rank's process used per iteration (compute, communication, gloo's
        # threads) and the cores that is: above 1 with threads=1, communication's own
        metrics["cpu_time_s"] = statistics.fmean(s["cpu_time_s"] for s in steady)
        metrics["cpu_cores_per_rank"] = metrics["cpu_time_s"] / mean if mean > 0 else math.nan
        metrics["cpu_cores"] = len(ranks) * metrics["cpu_cores_per_rank"]  # the PS: + servers'
        units.update(cpu_time_s="s", cpu_cores_per_rank="cores", cpu_cores="cores")
    if all("train_runq_wait_s" in s for s in steady):
        # A rank's training thread per iteration: its time on a core, and its time ready to
        # run but waiting for one (the cores taken by the other ranks, the servers and the
        # communication threads, which preempt it at realtime priority)
        for key in ("train_thread_cpu_s", "train_runq_wait_s"):
            metrics[key] = statistics.fmean(s[key] for s in steady)
            units[key] = "s"
    steady_its = {s["iteration"] for s in steady}
    ticks = [
        row["machine_ticks"]
        for row in ranks[0]["iterations"]
        if row["iteration"] in steady_its and "machine_ticks" in row
    ]
    if ticks and len(ticks) == len(steady_its):
        # The cores rank 0's machine kept busy over the steady iterations, every process on
        # it (the run's and any other): beside ``cpu_cores``, what the run left idle.
        busy = busy_cores(sum(t[0] for t in ticks), sum(t[1] for t in ticks), ticks[0][2])
        if busy is not None:
            metrics["machine_busy_cores"] = busy
            units["machine_busy_cores"] = "cores"
    evaluation = next((r["eval"] for r in ranks if "eval" in r), None)
    for key, value in (evaluation or {}).items():
        metrics[key] = value
        units[key] = "" if key != "eval_accuracy" else "fraction"
    return RealResult(metrics, units, series, merged_timeline(ranks), network, ranks)


def merged_timeline(ranks: list[dict[str, Any]]) -> list[list[Any]]:
    """Every rank's timeline rows on one time axis that starts at the earliest row, sorted by
    start. A rank's ``clock`` (its boot id and its ``perf_counter`` as it left the barrier
    before its timed loop) puts it on rank 0's: a rank on the same machine (the same boot id)
    reads the same clock and keeps its times; one elsewhere, or whose boot id is unknown, is
    shifted so that it left the barrier when rank 0 did (within the barrier's own skew).
    Ranks without a clock (the PS arena's, merged into rank 0's timeline on one machine)
    keep their times."""
    ref = next((r.get("clock") for r in ranks if r.get("rank") == 0), None)
    rows: list[list[Any]] = []
    for r in ranks:
        clock, shift = r.get("clock"), 0.0
        if ref and clock and (ref["boot_id"] is None or clock["boot_id"] != ref["boot_id"]):
            shift = ref["barrier_s"] - clock["barrier_s"]
        rows.extend([*row[:4], row[4] + shift, row[5] + shift, row[6]] for row in r["timeline"])
    if not rows:
        return []
    origin = min(row[4] for row in rows)
    return sorted(
        ([*row[:4], row[4] - origin, row[5] - origin, row[6]] for row in rows),
        key=lambda row: (row[4], row[1]),
    )
