"""Real mode of the parameter-server arena: ``cluster.workers`` worker processes and one
process per parameter server train for real, executing the ``PSPlan`` the simulator executes
(``runners.policies.ps``; planned by the same code, ``runners.sim.ps.build_problem``).

**Processes.** One torchrun world (gloo): logical ranks ``0..W-1`` are the workers, ``W..W+S-1``
the servers, ``S`` = the server indices the plan's keys use (``max(task.server) + 1``; for a
plan with a controller, PSLD, every server it may scale out to: ``controller.max_servers``).
On loopback one ``torchrun`` starts them all (dist rank = logical rank); on the emulated
network every process has its own namespace (servers' NICs shaped to
``cluster.server_bandwidth_gbps``) and the processes learn each other's dist ranks from one
all-gather of their logical ranks (``LAB_PS_ID``).

**Transport.** gloo point to point only (no ``torch.distributed.rpc``, no collective while
training). A gloo ``send`` returns only once the peer has posted the matching ``recv``, and gloo
point-to-point works have neither ``is_completed`` nor a future (checked on torch 2.13), so
every process has two communication threads: a *sender* that sends one message at a time from a
priority queue (the NIC's queue: a worker's pushes in the plan's push order, a server's pulls in
its pull/server order) and a *receiver* that loops on ``recv(src=None)`` of a fixed-size header
(tag 0) and then ``recv`` of its payload from that source (tag 1). gloo keeps the order of
messages of one pair and tag, and concurrent send and receive threads on one process group were
checked (3 ranks, 18,000 messages of random sizes, headers received from any source). Every
process sends every other one a ``STOP`` header after its last message; a receiver ends when it
has all of them. That is ``real.ps_transport: blocking`` (the default); ``pipelined`` keeps
receives posted ahead, a thread per peer (``PipelinedChannel``).

**Keys.** ``task i`` of the plan is key ``i``: the ``size_bytes / 4`` values of its layer's flat
parameter (the layer's parameters concatenated in model order) after the layer's earlier keys
(task order within a layer = offset order). Keys of 0 bytes (a layer without parameters) are not
sent.

**Worker.** Post-accumulate-grad hooks, as in ``runners.real.engine``: when all of a layer's
gradients are in, each key of the layer is queued for its server (``push_order``: ``priority`` =
lower ``task.priority`` first; ``fifo`` = ready order; ``random`` = the layer's place in a
shuffle seeded by (seed, worker % ``order_groups``, iteration), as the simulator's random
order). The server answers every push with the key's parameters (the pull); the worker writes
them into the model in the main thread: with ``cross_barrier`` in the forward pre-hook of the
key's layer, else (global barrier) before the next forward. A push carries the version of the
key the gradient was computed on (the version of the pull the worker last applied).

**Server.** Holds its keys' parameters (the model built with the run's seed, so the initial
values equal the workers'), a momentum buffer and a version per key. SGD with momentum, the
engine's equations: ``m <- momentum * m + g`` (``m`` starts at 0), ``w <- w - lr * m`` (without
momentum: ``w <- w - lr * g``), ``g`` the workers' gradients averaged (divided by ``W``).
All of a server's threads, its aggregation's included, run at the communication threads'
priority (``PSServer.serve``).

* ``sync``: a key's round ``r`` (every worker's push of iteration ``r``) is summed, averaged and
  applied once complete, then sent to every worker: exactly single-process SGD on the global
  batch (``version`` = rounds applied).
* ``sync-round`` (eager PS, a reconstruction: research/comm.md §4.2): rounds are aggregated as
  in ``sync``, but a worker's push is answered at once with the newest complete round (applied
  first when that push completes its round, so the last worker of a round gets it). The round's
  update is ``(1/W) sum_w s_w g_w`` with ``s_w = lr_scale(lr_rule, tau_w, tau_max)``,
  ``tau_w = r - v_w`` (version at apply minus version the gradient was computed on; research
  §4.2 item 3; the simulator's reported sync-round staleness counts from the previous round and
  is this minus 1) and ``tau_max`` the largest staleness this server has seen for the key so
  far (the simulator uses the run's maximum, unknown online).
* ``async``: each push is applied alone at once and answered: ``m <- momentum * m + s * g / W``,
  ``w <- w - lr * m``, ``version += 1``, ``s`` as above with ``tau = version - v`` (the updates
  the key received since the worker's copy); dividing by ``W`` (so that ``W`` pushes weigh one
  synchronous step) is a reconstruction.

``server_order`` orders the server's inbox (``priority``: iteration, then task priority; else
arrival); its pulls leave in priority order when ``pull_order`` or ``server_order`` is
``priority``, in the worker's random order when ``pull_order`` is ``random``, else in the order
they are answered. ``cluster.ps_stragglers``' ``cpu_slowdown`` stretches a server's
aggregation (sleep of ``(f - 1) x`` its time); a ``bandwidth_factor`` scales the server's shaped
NIC in the straggler's iterations, and a worker straggler's ``bandwidth_factor`` the worker's
(re-shaped when rank 0 reports the iteration before: see ``testbed.Reshaper``; shaped network
only, refused on loopback).

**PSLD** (``plan.controller``, sync mode only). Worker 0 runs the controller. At the start of its
iteration ``i`` it observes round ``r = i - 3`` (iteration time = between its starts of ``r`` and
``r + 1``; per-server busy time = the server's time receiving the round's pushes, aggregating
and sending its pulls, reported by each server owning keys in that round), and sends every
other process the key -> server assignment of iteration ``i + 2`` (unchanged or new). A worker
sends no push of iteration ``t`` before it has the assignment of ``t``; gloo's per-pair order
makes every server know the assignment of ``r + 1`` before round ``r`` of its keys can complete.
A key moving at iteration ``S`` is migrated by its old server right after applying round
``S - 1`` (parameters and momentum, so training stays exact); the new server holds round ``S``
until they arrive. Rounds between the decision and ``S`` measured the old assignment and are not
fed to the controller (its own settling round then skips ``S``, as the simulator's skips the
migration round). Reconstruction: the switch-at-an-agreed-step protocol follows the PSLD
co-author's MXNet fork (research/comm.md §5.2); the policy is ``PSLDController``'s.

Records: workers write ``rank<w>.json`` as the all-reduce ranks do (``launch._results`` averages
workers only), each with its timeline rows (``compute[w<k>]``, ``uplink[w<k>]``,
``downlink[w<k>]``, as the simulator's twin names them); servers write ``server<j>.json`` (busy
time per round, staleness, migrations, their timeline rows and, with ``LAB_REAL_SAVE_PARAMS``,
the log of every push they applied).
"""

from __future__ import annotations

import collections
import datetime
import functools
import heapq
import json
import os
import pickle
import random
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

import workloads
from workloads import data
from workloads.models import build_model

from ..manifest import busy_ticks, thread_sched
from ..policies.ps import ORDERS, SERVER_MODES, PSPlan, PSTask, lr_scale
from ..spec import RealOptions, RunSpec, SpecError
from . import priority
from . import testbed as tb
from .engine import (
    LayerBinding,
    PlanMismatch,
    attach_hooks,
    bind_layers,
    iteration_row,
    set_iteration_times,
    write_record,
)

if TYPE_CHECKING:
    from .launch import Network, RealResult

SERVER_ORDERS = ("priority", "fifo")
HEADER = 8  # int64 header: kind, key, iteration, version, origin, payload numel, 0, 0
PUSH, PULL, CONTROL, STATS, MIGRATE, STOP = range(1, 7)
_HDR_TAG, _DATA_TAG = 0, 1
_URGENT, _DATA, _LAST = 0, 1, 2  # first element of a send-queue order


# ------------------------------------------------------------------------------- planning
def plan_for(spec: RunSpec) -> PSPlan:
    """The policy's plan, from the same code as the simulator (``runners.sim.ps.run``); a
    controller is reseeded with the run's seed, as there."""
    from .. import registry
    from ..sim import ps as sim
    from ..sim.allreduce import compute_setup

    setup = compute_setup(spec)
    plan = registry.get(spec.system).build(spec.params).plan(sim.build_problem(spec, setup))
    if plan.controller is not None and hasattr(plan.controller, "reseed"):
        plan.controller.reseed(spec.seed)
    return plan


def server_count(plan: PSPlan) -> int:
    """Server processes the plan needs: every server index its keys use, and for a plan with a
    controller every server it may scale out to."""
    used = max((t.server for t in plan.tasks), default=0) + 1
    if plan.controller is not None:
        used = max(used, int(getattr(plan.controller, "max_servers", used)))
    return used


def preflight(spec: RunSpec, network: Network) -> tuple[int, str]:
    """Checks of a PS real run (``SpecError`` naming the field); returns the number of server
    processes and the spec field that sets it (for the launcher's rank-count check)."""
    plan = plan_for(spec)
    if plan.push_order not in ORDERS or plan.pull_order not in ORDERS:
        raise SpecError("system", f"plan orders {plan.push_order}/{plan.pull_order} unknown")
    if plan.server_order not in SERVER_ORDERS or plan.server_mode not in SERVER_MODES:
        raise SpecError("system", f"server order/mode {plan.server_order}/{plan.server_mode}")
    if plan.controller is not None and plan.server_mode != "sync":
        raise SpecError("system", "real mode runs a key-moving controller in sync mode only")
    servers = server_count(plan)
    if plan.controller is None:
        field = "cluster.ps"
    else:
        field = "params.max_servers" if spec.params.get("max_servers") else "cluster.servers"
    if network.kind == "shaped":
        from .launch import MAX_SHAPED_GBPS, MIN_SHAPED_GBPS

        total = spec.warmup_iterations + spec.iterations
        for j, gbps in (
            (j, server_gbps(spec, j, it)) for j in range(servers) for it in range(total)
        ):
            if not MIN_SHAPED_GBPS <= gbps <= MAX_SHAPED_GBPS:
                raise SpecError(
                    "cluster.server_bandwidth_gbps",
                    f"the emulated network shapes {MIN_SHAPED_GBPS:g}..{MAX_SHAPED_GBPS:g} Gbit/s"
                    f" (server {j} gets {gbps:g}); use the simulator beyond that",
                )
    return servers, field


def server_gbps(spec: RunSpec, server: int, iteration: int = 0) -> float:
    """Server ``server``'s shaped NIC rate in ``iteration``: ``cluster.server_bandwidth_gbps``
    times the bandwidth factors of the ``ps_stragglers`` active then (``from_iteration`` <=
    iteration < ``until_iteration``)."""
    c = spec.cluster
    gbps = float(c.server_bandwidth_gbps or c.bandwidth_gbps)
    for s in c.ps_stragglers:
        if s.server == server and s.active(iteration):
            gbps *= s.bandwidth_factor
    return gbps


def plan_to_json(plan: PSPlan) -> dict[str, Any]:
    """The plan for the job file, without its controller (pickled apart by ``run``)."""
    return {
        "tasks": [[t.layer, t.size_bytes, t.server, t.priority] for t in plan.tasks],
        "push_order": plan.push_order,
        "pull_order": plan.pull_order,
        "server_order": plan.server_order,
        "cross_barrier": plan.cross_barrier,
        "server_mode": plan.server_mode,
        "order_groups": plan.order_groups,
        "lr_rule": plan.lr_rule,
    }


def plan_from_json(raw: dict[str, Any]) -> PSPlan:
    """The plan without its controller (worker 0 unpickles that from ``controller.pkl``)."""
    return PSPlan(
        tasks=tuple(PSTask(int(a), int(b), int(c), int(d)) for a, b, c, d in raw["tasks"]),
        push_order=raw["push_order"],
        pull_order=raw["pull_order"],
        server_order=raw["server_order"],
        cross_barrier=bool(raw["cross_barrier"]),
        server_mode=raw["server_mode"],
        order_groups=int(raw["order_groups"]),
        lr_rule=raw["lr_rule"],
    )


# ------------------------------------------------------------------------------ launching
def run(
    spec: RunSpec,
    work: Path,
    network: Network,
    progress: Callable[[int, int], None] | None = None,
) -> RealResult:
    """Train ``spec`` (PS arena) for real: workers and servers under torchrun, on loopback or
    the emulated network; the run's results from the workers' records (``launch._results``)
    plus the servers' metrics."""
    from . import launch

    options = spec.real or RealOptions()
    plan = plan_for(spec)
    prio, prio_note = launch.comm_priority(spec)
    servers = server_count(plan)
    c = spec.cluster
    workers = c.workers
    profile = workloads.load_profile(spec.workload)
    end = spec.warmup_iterations + spec.iterations
    window = [0, end] if spec.timeline_iterations == 0 else [
        max(0, end - spec.timeline_iterations), end
    ]  # fmt: skip
    job = {
        "arena": "ps",
        "spec": spec.as_dict(),
        "plan": plan_to_json(plan),
        "servers": servers,
        "controller": plan.controller is not None,
        "layers": [layer.name for layer in profile.layers],
        "grad_bytes": [layer.param_bytes for layer in profile.layers],
        "train": {
            "dataset": options.dataset,
            "lr": options.lr,
            "momentum": options.momentum,
            "threads": options.threads,
            "framework": None,
            "comm_priority": prio,
        },
        "timeline": window,
        # Idle is normal for a server (no keys, or behind a straggler): the launcher's limit
        # bounds the run; a process that dies breaks its peers' connections at once.
        "timeout_s": launch.TIMEOUT_S,
        "save_params": bool(os.environ.get("LAB_REAL_SAVE_PARAMS")),
    }
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps(job))
    if plan.controller is not None:
        (work / "controller.pkl").write_bytes(pickle.dumps(plan.controller))
    n = workers + servers
    launch.log.info(
        "real run: %d workers + %d servers, %s network%s; %s", workers, servers, network.kind,
        f" ({network.note})" if network.note else "", launch.priority_words(prio, prio_note),
    )  # fmt: skip
    started = time.perf_counter()
    if network.kind == "shaped":

        def rates(it: int) -> list[float]:  # every process's NIC: workers, then servers
            return launch.worker_rates(spec, it) + [
                server_gbps(spec, j, it) for j in range(servers)
            ]

        with tb.testbed(rates(0), c.latency_us) as bed:
            network.on(bed)
            commands = []
            for k in range(n):
                env = {"LAB_PS_ID": str(k), "GLOO_SOCKET_IFNAME": "eth0"}
                argv = bed.wrap(k, launch._torchrun(spec, work, k, bed, nodes=n))
                commands.append((argv, env))
            reshaper = tb.Reshaper(bed, rates, 0, progress)
            launch._supervise(commands, work, options.threads, end, reshaper, bed.broken)
            network.after(bed)
            worker_reshapes = sum(reshaper.changed[:workers])
            reshapes = sum(reshaper.changed[workers:])
    else:
        commands = [(launch._torchrun(spec, work, None, None, nodes=n), {})]
        launch._supervise(commands, work, options.threads, end, progress)
        worker_reshapes = reshapes = 0
    wall_s = time.perf_counter() - started
    ranks = [json.loads((work / f"rank{w}.json").read_text()) for w in range(workers)]
    records = [json.loads((work / f"server{j}.json").read_text()) for j in range(servers)]
    first, last = window
    ranks[0]["timeline"] = [
        *(row for r in ranks for row in r["timeline"]),
        *(row for r in records for row in r["timeline"] if first <= row[0] < last),
    ]
    for r in ranks[1:]:
        r["timeline"] = []  # in rank 0's now
    result = launch._results(spec, ranks, network)
    result.comm_priority, result.comm_priority_note = prio, prio_note
    result.servers_aggregate = [str(r.get("aggregate_priority", "")) for r in records]
    result.device, result.device_note = launch.resolve_device(spec)  # the CPU (gloo)
    metrics, units = _server_metrics(spec, plan, ranks, records)
    if "server_cpu_cores" in metrics and "cpu_cores" in result.metrics:
        metrics["cpu_cores"] = result.metrics["cpu_cores"] + metrics["server_cpu_cores"]
    else:  # the whole run's or none: the workers' alone would understate it
        result.metrics.pop("cpu_cores", None)
        result.units.pop("cpu_cores", None)
    result.metrics.update(metrics)
    result.units.update(units)
    result.metrics["real_wall_s"] = wall_s
    result.units["real_wall_s"] = "s"
    if any(s.bandwidth_factor != 1.0 for s in c.ps_stragglers) and network.kind == "shaped":
        result.metrics["ps_bandwidth_reshapes"] = float(reshapes)
        result.units["ps_bandwidth_reshapes"] = ""
    if any(s.bandwidth_factor != 1.0 for s in c.stragglers) and network.kind == "shaped":
        result.metrics["link_reshapes"] = float(worker_reshapes)  # as the all-reduce arena's
        result.units["link_reshapes"] = ""
    for key, value in dict(plan.info).items():
        result.metrics[f"plan.{key}"] = value
        result.units[f"plan.{key}"] = ""
    if job["save_params"]:
        _save_server_params(spec, plan, servers, work)
    return result


def _server_metrics(
    spec: RunSpec, plan: PSPlan, ranks: list[dict[str, Any]], records: list[dict[str, Any]]
) -> tuple[dict[str, float], dict[str, str]]:
    """The simulator's PS metrics, measured: busy time per server (mean over the measured
    rounds), servers used, migrated bytes, staleness (asynchronous modes), PSLD's changes."""
    first = spec.warmup_iterations
    rounds = range(first, first + spec.iterations)
    busy = [statistics.fmean(r["busy_s"][i] if i < len(r["busy_s"]) else 0.0 for i in rounds)
            for r in records]  # fmt: skip
    used = [b for b in busy if b > 0]
    ps0 = ranks[0].get("ps", {})
    metrics = {
        "ps_max_busy_s": max(busy, default=0.0),
        "ps_mean_busy_s": statistics.fmean(used) if used else 0.0,
        "ps_servers_used": float(len(set(ps0.get("assignment", [t.server for t in plan.tasks])))),
        "ps_migrated_bytes": float(sum(r["migrated_bytes"] for r in records)),
    }
    units = {"ps_max_busy_s": "s", "ps_mean_busy_s": "s", "ps_servers_used": "servers",
             "ps_migrated_bytes": "bytes"}  # fmt: skip
    serving = [r for r in records if r["keys"]]  # servers that hold keys
    if serving and all(r.get("cpu", {}).get("wall_s", 0.0) > 0 for r in serving):
        # What the servers take from the machine's cores (on one host: from the workers'),
        # each over its own span of the measured rounds (first push taken to last handled).
        metrics["server_cpu_cores"] = sum(r["cpu"]["cpu_s"] / r["cpu"]["wall_s"] for r in serving)
        units["server_cpu_cores"] = "cores"
    if plan.server_mode != "sync":
        count = sum(r["staleness"]["count"] for r in records)
        metrics["mean_staleness"] = sum(r["staleness"]["sum"] for r in records) / max(1, count)
        metrics["max_staleness"] = max((r["staleness"]["max"] for r in records), default=0.0)
        metrics["mean_lr_scale"] = (
            sum(r["staleness"]["scale_sum"] for r in records) / count if count else 1.0
        )
        units.update(mean_staleness="updates", max_staleness="updates", mean_lr_scale="")
    if "psld" in ps0:
        metrics["psld_changes"] = float(ps0["psld"]["changes"])
        metrics["psld_reverts"] = float(ps0["psld"]["reverts"])
        units.update(psld_changes="changes", psld_reverts="changes")
    return metrics, units


def _save_server_params(spec: RunSpec, plan: PSPlan, servers: int, work: Path) -> None:
    """The servers' final parameters assembled into a model state dict:
    ``params-servers.pt`` (moved into the run directory with the workers' ``params<w>.pt``)."""
    held: dict[int, torch.Tensor] = {}
    for j in range(servers):
        path = work / f"serverstate{j}.pt"
        if path.exists():
            held.update(torch.load(path))
    torch.manual_seed(spec.seed)
    model = build_model(spec.workload)
    profile = workloads.load_profile(spec.workload)
    binding = bind_layers(model, [layer.name for layer in profile.layers])
    keys = layout(plan, binding)
    with torch.no_grad():
        for key in keys:
            if key.numel:
                key.write(binding, held[key.index])
    torch.save(model.state_dict(), work / "params-servers.pt")


# ----------------------------------------------------------------------------------- keys
@dataclass
class Key:
    """One key: values ``start:stop`` of its layer's flat parameter vector."""

    index: int
    layer: int
    start: int
    stop: int
    priority: int
    segments: list[tuple[int, int, int, int, int]]  # (param, p_start, p_stop, k_start, k_stop)

    @property
    def numel(self) -> int:
        return self.stop - self.start

    def read(self, binding: LayerBinding) -> torch.Tensor:
        """The key's current values in the model (a new tensor)."""
        params = binding.params[self.layer]
        out = torch.empty(self.numel)
        for j, a, b, c, d in self.segments:
            out[c:d] = params[j].detach().reshape(-1)[a:b]
        return out

    def write(self, binding: LayerBinding, values: torch.Tensor) -> None:
        """Write ``values`` into the model's parameters (call under ``torch.no_grad``)."""
        params = binding.params[self.layer]
        for j, a, b, c, d in self.segments:
            params[j].view(-1)[a:b].copy_(values[c:d])


def layout(plan: PSPlan, binding: LayerBinding) -> list[Key]:
    """Cut every layer's flat parameter vector into the plan's keys, in task order."""
    sizes = [[p.numel() for p in ps] for ps in binding.params]
    offsets = [0] * len(sizes)
    keys = []
    for index, t in enumerate(plan.tasks):
        if not 0 <= t.layer < len(sizes):
            raise PlanMismatch(f"key {index}: layer {t.layer} is not a layer of the model")
        if t.size_bytes % 4:
            raise PlanMismatch(f"key {index}: {t.size_bytes} bytes is not whole fp32 values")
        start = offsets[t.layer]
        stop = start + t.size_bytes // 4
        offsets[t.layer] = stop
        segments = []
        base = 0
        for j, n in enumerate(sizes[t.layer]):
            lo, hi = max(start, base), min(stop, base + n)
            if lo < hi:
                segments.append((j, lo - base, hi - base, lo - start, hi - start))
            base += n
        keys.append(Key(index, t.layer, start, stop, t.priority, segments))
    for layer, n in enumerate(sizes):
        if offsets[layer] != sum(n):
            raise PlanMismatch(
                f"the keys of layer {binding.names[layer]!r} carry {offsets[layer]} values, the "
                f"layer has {sum(n)}"
            )
    return keys


class RandomOrder:
    """The random transfer order of ``(seed, order group, iteration)``: each layer's place in a
    seeded shuffle of the layers (the simulator's random order, one draw per order group)."""

    def __init__(self, seed: int, layers: int, groups: int) -> None:
        self.seed, self.layers, self.groups = seed, layers, max(1, groups)
        self._cache: dict[tuple[int, int], list[int]] = {}

    def place(self, worker: int, it: int, layer: int) -> int:
        group = worker % self.groups
        perm = self._cache.get((group, it))
        if perm is None:
            if len(self._cache) > 64:
                self._cache.clear()
            perm = list(range(self.layers))
            random.Random(f"{self.seed}:{group}:{it}").shuffle(perm)
            self._cache[group, it] = perm
        return perm[layer]


class Assignments:
    """Key -> server per iteration: the plan's for every iteration, or (with a controller) the
    plan's for iterations 0 and 1 and worker 0's decisions after (``set``), each known to a
    process once worker 0's ``CONTROL`` message for it has arrived."""

    def __init__(self, initial: list[int], dynamic: bool, cv: threading.Condition) -> None:
        self.dynamic = dynamic
        self.by_it: dict[int, list[int]] = {0: list(initial), 1: list(initial)}
        self.cv = cv

    def set(self, it: int, assignment: list[int] | None) -> None:
        """(Under ``cv``.) The assignment of ``it``; ``None`` = that of ``it - 1``."""
        self.by_it[it] = self.by_it[it - 1] if assignment is None else list(assignment)
        self.cv.notify_all()

    def get(self, it: int, failed: Callable[[], None]) -> list[int]:
        """(Under ``cv``.) The assignment of ``it``, waiting for it if needed."""
        if not self.dynamic:
            return self.by_it[0]
        while it not in self.by_it:
            failed()
            self.cv.wait(0.5)
        return self.by_it[it]


# -------------------------------------------------------------------------- communication
OnMessage = Callable[[list[int], torch.Tensor | None, float, float], None]


class Channel:
    """A process's sender and receiver threads (see the module docstring). ``on_message`` is
    called in the receiver thread with (header list, payload or None, start, end)."""

    def __init__(
        self,
        me: int,
        table: list[int],
        cv: threading.Condition,
        on_message: OnMessage,
    ) -> None:
        self.me, self.table, self.cv = me, table, cv
        self.on_message = on_message
        self.peers = [k for k in range(len(table)) if k != me]
        self.queue: list[tuple[Any, ...]] = []
        self.seq = 0
        self.error: BaseException | None = None
        self.stops: set[int] = set()
        self._threads = [
            threading.Thread(target=self._guard, args=(self._send_loop,), name="ps-send",
                             daemon=True),
            threading.Thread(target=self._guard, args=(self._recv_loop,), name="ps-recv",
                             daemon=True),
        ]  # fmt: skip

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def post(
        self,
        order: tuple[Any, ...],
        dst: int | Callable[[], int],
        kind: int,
        key: int,
        it: int,
        version: int = 0,
        payload: torch.Tensor | None = None,
        done: Callable[[float, float], None] | None = None,
    ) -> None:
        """(Under ``cv``.) Queue a message; ``dst`` may be a callable the sender resolves (it
        may wait), ``done(start, end)`` runs in the sender thread once it is sent."""
        numel = 0 if payload is None else payload.numel()
        header = [kind, key, it, version, self.me, numel, 0, 0]
        heapq.heappush(self.queue, (order, self.seq, dst, header, payload, done))
        self.seq += 1
        self.cv.notify_all()

    def close(self) -> None:
        """(Under ``cv``.) After everything queued: ``STOP`` to every peer."""
        heapq.heappush(self.queue, ((_LAST,), self.seq, None, None, None, None))
        self.seq += 1
        self.cv.notify_all()

    def join(self) -> None:
        for t in self._threads:
            while t.is_alive():
                t.join(0.5)
                self.failed()

    def failed(self) -> None:
        """Raise (in the caller) a communication thread's error."""
        if self.error is not None:
            raise RuntimeError(f"communication thread failed: {self.error}") from self.error

    def _guard(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as err:  # handed to the main thread
            with self.cv:
                self.error = err
                self.cv.notify_all()

    def _send_loop(self) -> None:
        while True:
            with self.cv:
                while not self.queue:
                    self.cv.wait()
                _, _, dst, header, payload, done = heapq.heappop(self.queue)
                if header is not None and callable(dst):
                    dst = dst()
            if header is None:
                for peer in self.peers:
                    self._send_stop(self.table[peer])
                return
            start = time.perf_counter()
            self._transmit(self.table[dst], header, payload)
            if done is not None:
                done(start, time.perf_counter())

    def _transmit(self, rank: int, header: list[int], payload: torch.Tensor | None) -> None:
        dist.send(torch.tensor(header, dtype=torch.int64), rank, tag=_HDR_TAG)
        if payload is not None:
            dist.send(payload, rank, tag=_DATA_TAG)

    def _send_stop(self, rank: int) -> None:
        self._transmit(rank, [STOP, 0, 0, 0, self.me, 0, 0, 0], None)

    def _recv_loop(self) -> None:
        while len(self.stops) < len(self.peers):
            header = torch.empty(HEADER, dtype=torch.int64)
            src = dist.recv(header, tag=_HDR_TAG)
            h = header.tolist()
            start = time.perf_counter()
            payload = None
            if h[5]:
                payload = torch.empty(h[5])
                dist.recv(payload, src=src, tag=_DATA_TAG)
            if h[0] == STOP:
                self.stops.add(h[4])
            self.on_message(h, payload, start, time.perf_counter())


PIPELINE_DEPTH = 4  # real.ps_transport pipelined: receives posted ahead for each peer
INLINE_BYTES = 4 << 20  # pipelined: a larger payload follows its header (a round trip more)
_PIPE_TAG = 2
FILLER = 7  # pipelined: after a STOP, one for each receive the peer still has posted
_HEADER_BYTES = HEADER * 8


class PipelinedChannel(Channel):
    """``real.ps_transport: pipelined``: the sender as ``Channel``'s (one message at a time,
    in the queue's order), but a message is its header and payload in one send (bytes: the
    int64 header, then the float32 payload), and a receiver thread per peer keeps ``depth``
    receives from that peer posted ahead, each for up to ``inline_numel`` values. A gloo send
    waits until its receive is posted: with one posted as each message comes, every message
    waits for a round trip of the network (measured 2026-12-06, 2 ms a way: 50 messages in
    242 ms; 14 ms with the receives posted first). A payload larger than ``inline_numel``
    (``INLINE_BYTES``: the posted buffers' memory) follows its header in a send of its own,
    whose receive is posted when the header is in: a round trip beside a transfer of more than
    4 MiB. A peer's messages are handled in their order by its thread (gloo keeps the order
    of a pair and tag); ``on_message`` is called from several threads (the workers' and
    servers' take ``cv``). An inline message's start and end are both the time its receive
    completed: its header is not seen apart from its payload (a server's busy time, which
    PSLD's controller observes, then counts no receiving). After its ``STOP`` a process sends
    each peer ``depth - 1`` ``FILLER`` messages, so that no receive stays posted."""

    def __init__(
        self,
        me: int,
        table: list[int],
        cv: threading.Condition,
        on_message: OnMessage,
        inline_numel: int,
        depth: int = PIPELINE_DEPTH,
    ) -> None:
        super().__init__(me, table, cv, on_message)
        self.inline_numel, self.depth = inline_numel, depth
        self._threads = [self._threads[0]] + [
            threading.Thread(target=self._guard, args=(functools.partial(self._recv_peer, peer),),
                             name="ps-recv", daemon=True)
            for peer in self.peers
        ]  # fmt: skip

    def _transmit(self, rank: int, header: list[int], payload: torch.Tensor | None) -> None:
        numel = 0 if payload is None else payload.numel()
        follows = numel > self.inline_numel  # header[6]: the payload follows on its own
        message = torch.empty(_HEADER_BYTES + (0 if follows else 4 * numel), dtype=torch.uint8)
        message[:_HEADER_BYTES].view(torch.int64).copy_(
            torch.tensor([*header[:6], int(follows), 0], dtype=torch.int64)
        )
        if payload is not None and not follows:
            message[_HEADER_BYTES:].view(torch.float32).copy_(payload.reshape(-1))
        dist.send(message, rank, tag=_PIPE_TAG)
        if follows:
            dist.send(payload, rank, tag=_DATA_TAG)

    def _send_stop(self, rank: int) -> None:
        super()._send_stop(rank)
        for _ in range(self.depth - 1):
            self._transmit(rank, [FILLER, 0, 0, 0, self.me, 0, 0, 0], None)

    def _post(self, rank: int) -> tuple[Any, torch.Tensor]:
        buffer = torch.empty(_HEADER_BYTES + 4 * self.inline_numel, dtype=torch.uint8)
        return dist.irecv(buffer, src=rank, tag=_PIPE_TAG), buffer

    def _recv_peer(self, peer: int) -> None:
        rank = self.table[peer]
        posted = collections.deque(self._post(rank) for _ in range(self.depth))
        while posted:
            work, buffer = posted.popleft()
            work.wait()
            start = time.perf_counter()
            h = buffer[:_HEADER_BYTES].view(torch.int64).tolist()
            if h[0] == FILLER:
                continue
            if h[0] == STOP:
                with self.cv:
                    self.stops.add(h[4])
            else:
                posted.append(self._post(rank))  # before the handling: the next may come
            payload = None
            if h[5] and h[6]:
                payload = torch.empty(h[5])
                dist.recv(payload, src=rank, tag=_DATA_TAG)
            elif h[5]:
                payload = buffer[_HEADER_BYTES : _HEADER_BYTES + 4 * h[5]].view(torch.float32)
                if 2 * h[5] < self.inline_numel:  # a small message does not hold a large buffer
                    payload = payload.clone()
            self.on_message(h, payload, start, time.perf_counter() if h[6] else start)


def max_message_numel(keys: list[Key]) -> int:
    """The most float32 values one PS message carries: a migrated key's parameters and
    momentum, a key's push or pull, or PSLD's assignment of every key."""
    return max(2 * max((k.numel for k in keys), default=0), len(keys), 1)


def open_channel(
    transport: str,
    me: int,
    table: list[int],
    cv: threading.Condition,
    on_message: OnMessage,
    numel: int,
) -> Channel:
    """The channel of PS ``transport`` (``real.ps_transport``) for messages of at most
    ``numel`` values: the pipelined one's receives posted for that many, up to
    ``INLINE_BYTES``."""
    if transport == "pipelined":
        return PipelinedChannel(me, table, cv, on_message, min(numel, INLINE_BYTES // 4))
    return Channel(me, table, cv, on_message)


def channel_for(
    ctx: Context,
    cv: threading.Condition,
    on_message: OnMessage,
    keys: list[Key],
) -> Channel:
    """The transport ``real.ps_transport`` names (``blocking`` for jobs from before it)."""
    transport = (ctx.spec.get("real") or {}).get("ps_transport", "blocking")
    return open_channel(transport, ctx.me, ctx.table, cv, on_message, max_message_numel(keys))


@dataclass
class Context:
    """What every process of the run knows: the job, its own logical rank, the dist rank of
    every logical rank."""

    job: dict[str, Any]
    me: int
    table: list[int]

    @property
    def spec(self) -> dict[str, Any]:
        return self.job["spec"]

    @property
    def workers(self) -> int:
        return int(self.spec["cluster"]["workers"])

    @property
    def total(self) -> int:
        return int(self.spec["warmup_iterations"]) + int(self.spec["iterations"])


def _model(ctx: Context) -> tuple[nn.Module, LayerBinding]:
    torch.manual_seed(int(ctx.spec["seed"]))  # the same initial weights in every process
    model = build_model(ctx.spec["workload"])
    model.train()
    return model, bind_layers(model, ctx.job["layers"], ctx.job["grad_bytes"])


def _data_order(plan: PSPlan, order: str, keys: list[Key], rnd: RandomOrder) -> Any:
    """Send-queue order of a key's transfer of iteration ``it`` for ``worker``."""
    if order == "priority":
        return lambda worker, it, key: (_DATA, it, keys[key].priority)
    if order == "random":
        return lambda worker, it, key: (_DATA, it, rnd.place(worker, it, keys[key].layer))
    return lambda worker, it, key: (_DATA, 0, 0)


# --------------------------------------------------------------------------------- worker
class PSWorker:
    """A worker's side of the plan (see the module docstring): ``begin(t)``; forward;
    ``loss.backward()``; ...; ``finish()``."""

    def __init__(
        self,
        ctx: Context,
        model: nn.Module,
        binding: LayerBinding,
        plan: PSPlan,
        *,
        record: Callable[..., None] | None = None,
        controller: Any = None,
    ) -> None:
        self.ctx, self.model, self.binding, self.plan = ctx, model, binding, plan
        self.me, self.workers, self.total = ctx.me, ctx.workers, ctx.total
        self.keys = layout(plan, binding)
        self.layer_keys = [[k.index for k in self.keys if k.layer == i and k.numel]
                           for i in range(len(binding.params))]  # fmt: skip
        self.cross_barrier = plan.cross_barrier
        self.cv = threading.Condition()
        self.channel = channel_for(ctx, self.cv, self._on_message, self.keys)
        self.assign = Assignments(
            [t.server for t in plan.tasks], bool(ctx.job["controller"]), self.cv
        )
        rnd = RandomOrder(int(ctx.spec["seed"]), len(binding.params), plan.order_groups)
        self.push_order = _data_order(plan, plan.push_order, self.keys, rnd)
        self.record = record
        self.controller = controller
        self.version = [0] * len(self.keys)
        self.pulled: dict[tuple[int, int], tuple[torch.Tensor, int]] = {}
        self.applied_upto = [-1] * len(binding.params)
        self._layer_of = {id(p): i for i, ps in enumerate(binding.params) for p in ps}
        self._left: list[int] = []
        self._it = -1
        self._stats: dict[int, dict[str, float]] = {}
        self._begins: list[float] = []
        self._mark = 0.0
        self._fwd_start = 0.0
        # PSLD (worker 0): servers' busy time per round, the rounds the controller may see.
        self._busy: dict[tuple[int, int], float] = {}
        self._observe_from = 0
        self.migrated_bytes = 0
        self._hooks = attach_hooks(binding, self._grad_ready, self._pre_forward, self._post_forward)

    def start(self) -> None:
        self.channel.start()

    # -------------------------------------------------------------- main thread
    def begin(self, it: int) -> None:
        """Start iteration ``it`` (its forward comes next)."""
        self.channel.failed()
        self._it = it
        self._stats[it] = {"up": 0.0, "down": 0.0, "wait": 0.0, "fwd_wait": 0.0}
        self._begins.append(time.perf_counter())
        self._left = [len(ps) for ps in self.binding.params]
        if self.controller is not None:
            self._control(it)
        if not self.cross_barrier:
            for layer in range(len(self.binding.params)):
                self._apply(layer, it - 1)
        else:  # layers the forward did not call last time still get their update
            for layer in range(len(self.binding.params)):
                if self.applied_upto[layer] < it - 2:
                    self._apply(layer, it - 2)
        self._mark = time.perf_counter()

    def finish(self) -> None:
        """Apply the pulls of the last iteration (the end of this worker's training)."""
        for layer in range(len(self.binding.params)):
            self._apply(layer, self._it)

    def close(self) -> None:
        """Stop the communication threads (once every process has sent its last message:
        with the asynchronous modes, after the slowest worker)."""
        with self.cv:
            self.channel.close()
        self.channel.join()
        for h in self._hooks:
            h.remove()

    def stats(self, it: int) -> dict[str, float]:
        """Iteration ``it``'s communication time (the busier of push and pull), exposed wait."""
        st = self._stats.get(it, {"up": 0.0, "down": 0.0, "wait": 0.0})
        return {
            "comm_s": max(st["up"], st["down"]),
            "wait_s": st["wait"],
            "fwd_wait_s": st.get("fwd_wait", 0.0),
            "negotiations": 0,
        }

    def _pre_forward(self, layer: int):
        def hook(module: nn.Module, args: Any) -> None:
            if self._it < 0:
                return
            if self.cross_barrier:
                start = time.perf_counter()
                self._apply(layer, self._it - 1)
                self._fwd_start = time.perf_counter()
                st = self._stats.get(self._it)
                if st is not None:  # waiting for pulls, and writing them in: not compute
                    st["fwd_wait"] += self._fwd_start - start
            else:
                self._fwd_start = time.perf_counter()

        return hook

    def _post_forward(self, layer: int):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            now = time.perf_counter()
            if self.record is not None and self._it >= 0:
                name = self.binding.names[layer]
                self.record(self._it, "compute", "forward", name, self._fwd_start, now, 0)
            self._mark = now

        return hook

    def _apply(self, layer: int, source: int) -> None:
        """Write the pulls of iterations up to ``source`` of ``layer``'s keys into the model."""
        for it in range(self.applied_upto[layer] + 1, source + 1):
            for k in self.layer_keys[layer]:
                values, version = self._wait_pull(k, it)
                with torch.no_grad():
                    self.keys[k].write(self.binding, values)
                self.version[k] = version
        self.applied_upto[layer] = max(self.applied_upto[layer], source)

    def _wait_pull(self, key: int, it: int) -> tuple[torch.Tensor, int]:
        with self.cv:
            got = self.pulled.pop((key, it), None)
            if got is not None:
                return got
            start = time.perf_counter()
            while (key, it) not in self.pulled:
                self.channel.failed()
                self.cv.wait(0.5)
            got = self.pulled.pop((key, it))
        st = self._stats.get(self._it)
        if st is not None:
            st["wait"] += time.perf_counter() - start
        return got

    def _grad_ready(self, p: torch.Tensor) -> None:
        it = self._it
        if it < 0:
            return
        layer = self._layer_of[id(p)]
        self._left[layer] -= 1
        if self._left[layer]:
            return
        now = time.perf_counter()
        name = self.binding.names[layer]
        if self.record is not None:
            self.record(it, "compute", "backward", name, self._mark, now, 0)
        self._mark = now
        params = self.binding.params[layer]
        flat = torch.cat([q.grad.reshape(-1) for q in params])
        for q in params:
            q.grad = None
        with self.cv:
            for k in self.layer_keys[layer]:
                key = self.keys[k]
                self.channel.post(
                    self.push_order(self.me, it, k),
                    self._server_of(k, it),
                    PUSH,
                    k,
                    it,
                    self.version[k],
                    flat[key.start : key.stop],
                    self._pushed(it, k),
                )

    def _server_of(self, key: int, it: int) -> Callable[[], int]:
        def resolve() -> int:  # (sender thread, under cv)
            return self.workers + self.assign.get(it, self.channel.failed)[key]

        return resolve

    def _pushed(self, it: int, k: int) -> Callable[[float, float], None]:
        nbytes = self.keys[k].numel * 4

        def done(start: float, end: float) -> None:
            self._stats[it]["up"] += end - start
            if self.record is not None:
                name = self.binding.names[self.keys[k].layer]
                self.record(it, "uplink", "push", name, start, end, nbytes)

        return done

    def _on_message(self, h: list[int], payload: torch.Tensor | None, start: float, end: float):
        kind, key, it = h[0], h[1], h[2]
        if kind == PULL:
            assert payload is not None
            with self.cv:
                self.pulled[key, it] = (payload, h[3])
                st = self._stats.get(it)
                if st is not None:
                    st["down"] += end - start
                self.cv.notify_all()
            if self.record is not None:
                name = self.binding.names[self.keys[key].layer]
                self.record(it, "downlink", "pull", name, start, end, payload.numel() * 4)
        elif kind == CONTROL:
            with self.cv:
                self.assign.set(it, None if payload is None else _ints(payload))
        elif kind == STATS:
            assert payload is not None
            with self.cv:
                self._busy[h[4] - self.workers, it] = float(payload[0])
                self.cv.notify_all()

    # ---------------------------------------------------------------- PSLD (worker 0)
    def _control(self, i: int) -> None:
        """Observe round ``i - 3``, decide the assignment of iteration ``i + 2`` and send it to
        every other process."""
        target = i + 2
        if target >= self.total:
            return
        decision = None
        r = i - 3
        if r >= 1 and r >= self._observe_from:
            busy = self._round_busy(r)
            iteration_s = self._begins[r + 1] - self._begins[r]
            decision = self.controller.observe(r, iteration_s, busy)
            if decision is not None:
                self._observe_from = target
        with self.cv:
            before = self.assign.get(target - 1, self.channel.failed)
            self.assign.set(target, decision)
            if decision is not None:
                self.migrated_bytes += sum(
                    self.keys[k].numel * 4 for k, (a, b) in enumerate(zip(before, decision,
                                                                          strict=True)) if a != b
                )  # fmt: skip
            payload = None if decision is None else torch.tensor(decision, dtype=torch.float32)
            for peer in self.channel.peers:
                self.channel.post((_URGENT,), peer, CONTROL, 0, target, 0, payload)

    def _round_busy(self, r: int) -> list[float]:
        """Busy time of every server in round ``r`` (waits for the reports of the servers that
        held keys in that round; 0 for the others)."""
        servers = int(self.ctx.job["servers"])
        with self.cv:
            owners = {s for k, s in enumerate(self.assign.get(r, self.channel.failed))
                      if self.keys[k].numel}  # fmt: skip
            while any((s, r) not in self._busy for s in owners):
                self.channel.failed()
                self.cv.wait(0.5)
            busy = [self._busy.pop((s, r), 0.0) for s in range(servers)]
        return busy


def _ints(payload: torch.Tensor) -> list[int]:
    return [int(x) for x in payload.tolist()]


def _work(ctx: Context) -> dict[str, Any]:
    """A worker process: train, return its ``rank<w>.json`` record."""
    from .worker import Straggle, _evaluate, settle_gc, slowdown

    job, spec, train = ctx.job, ctx.spec, ctx.job["train"]
    worker = ctx.me
    model, binding = _model(ctx)
    workload, seed = spec["workload"], int(spec["seed"])
    loss_fn = data.loss_fn(workload)
    batches = data.loader(
        workload, train["dataset"], int(spec["batch_size"]), seed, worker, ctx.workers
    )
    straggle = Straggle(binding)  # before the PS hooks: they see the delayed readiness
    stragglers = spec["cluster"].get("stragglers", [])
    first_recorded, end_recorded = job["timeline"]
    timeline: list[list[Any]] = []
    # Every worker records, so that the workers' skew can be read from the run's own timeline;
    # its lanes are named as the simulator's twin names them (each worker a group of its own,
    # ``cluster.pull_rendezvous``): compute[w1], uplink[w1], ...; one worker's plain compute, ...
    lane = "" if ctx.workers == 1 else f"[w{worker}]"

    def record(it: int, resource: str, op: str, layer: str, start: float, end: float, nbytes: int):
        if first_recorded <= it < end_recorded:
            timeline.append([it, resource + lane, op, layer, start, end, nbytes])

    controller = None
    if worker == 0 and job["controller"]:
        controller = pickle.loads((Path(job["dir"]) / "controller.pkl").read_bytes())
    ps = PSWorker(
        ctx,
        model,
        binding,
        plan_from_json(job["plan"]),
        record=record,
        controller=controller,
    )
    total = ctx.total
    settle_gc()
    dist.barrier()
    with priority.of_job(ctx.job["train"]):  # the transport's threads
        ps.start()
    iterations = []
    for it in range(total):
        straggle.factor = slowdown(stragglers, worker, it)
        inputs, targets = next(batches)
        begin = time.perf_counter()
        cpu_begin, sched_begin = time.process_time(), thread_sched()
        machine_begin = busy_ticks() if worker == 0 else None  # the machine worker 0 runs on
        ps.begin(it)
        straggle.reset()
        forward_start = time.perf_counter()
        loss = loss_fn(model(inputs), targets)
        backward_start = time.perf_counter()
        loss.backward()
        end = time.perf_counter()
        times = (forward_start, backward_start, end)
        warmup = it < int(spec["warmup_iterations"])
        iterations.append(
            iteration_row(it, begin, times, loss, warmup, cpu_begin, machine_begin, sched_begin)
        )
        if worker == 0:
            print(f"progress {it + 1} {total}", flush=True)
    threads = priority.census()  # while the transport's threads are alive
    ps.finish()
    finished, cpu_finished = time.perf_counter(), time.process_time()
    sched_finished = thread_sched()
    machine_finished = busy_ticks() if worker == 0 else None
    ps.close()
    set_iteration_times(
        iterations, finished, ps.stats, cpu_finished, machine_finished, sched_finished
    )
    info: dict[str, Any] = {"assignment": ps.assign.by_it[max(ps.assign.by_it)]}
    if controller is not None:
        info["psld"] = {
            "changes": controller.changes,
            "reverts": controller.reverts,
            "history": controller.history,
            "migrated_bytes": ps.migrated_bytes,
        }
    result: dict[str, Any] = {
        "rank": worker,
        "worker": worker,
        "world": ctx.workers,
        "iterations": iterations,
        "timeline": timeline,
        "negotiated": False,
        "threads": threads,  # per priority (runners.real.priority)
        "compute_priority": priority.current(),
        "ps": info,
    }
    if worker == 0 and train["dataset"] != "synthetic":
        result["eval"] = _evaluate(model, workload, train["dataset"], loss_fn)
    if job.get("save_params"):
        result["_state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return result


# --------------------------------------------------------------------------------- server
@dataclass
class _KeyState:
    w: torch.Tensor
    m: torch.Tensor | None
    version: int
    tau_max: float = 0.0


def sgd_step(
    w: torch.Tensor, m: torch.Tensor | None, g: torch.Tensor, lr: float, momentum: float
) -> None:
    """A server's update of a key (the engine's equations): ``m <- momentum * m + g``,
    ``w <- w - lr * m``; without a momentum buffer ``w <- w - lr * g``. In place."""
    if m is not None:
        m.mul_(momentum).add_(g)
        g = m
    w.add_(g, alpha=-lr)


class PSServer:
    """A server process's side of the plan (see the module docstring): ``serve()`` until every
    worker has stopped."""

    def __init__(self, ctx: Context, binding: LayerBinding, plan: PSPlan) -> None:
        spec, train = ctx.spec, ctx.job["train"]
        self.ctx, self.plan = ctx, plan
        self.me, self.workers, self.total = ctx.me, ctx.workers, ctx.total
        self.index = ctx.me - ctx.workers  # server index of the plan
        self.keys = layout(plan, binding)
        self.names = binding.names
        self.lr, self.momentum = float(train["lr"]), float(train["momentum"])
        self.mode, self.rule = plan.server_mode, plan.lr_rule
        self.cv = threading.Condition()
        self.channel = channel_for(ctx, self.cv, self._on_message, self.keys)
        self.dynamic = bool(ctx.job["controller"])
        self.assign = Assignments([t.server for t in plan.tasks], self.dynamic, self.cv)
        self.state: dict[int, _KeyState] = {}
        for key, t in zip(self.keys, plan.tasks, strict=True):
            if t.server == self.index and key.numel:
                m = torch.zeros(key.numel) if self.momentum else None
                self.state[key.index] = _KeyState(key.read(binding), m, 0)
        rnd = RandomOrder(int(spec["seed"]), len(binding.params), plan.order_groups)
        priority = "priority" in (plan.pull_order, plan.server_order)
        self.pull_order = _data_order(plan, "priority" if priority else plan.pull_order,
                                      self.keys, rnd)  # fmt: skip
        self.inbox_priority = plan.server_order == "priority"
        self.inbox: list[tuple[Any, ...]] = []
        self.seq = 0
        self.rounds: dict[tuple[int, int], list[Any]] = {}  # (key, round) -> [sum, count]
        self.ready: dict[tuple[int, int], torch.Tensor] = {}  # complete rounds not yet applied
        self.stopped: set[int] = set()
        self.busy: dict[int, float] = {}
        self.keys_left: dict[int, int] = {}  # PSLD: keys of a round not yet applied here
        self.pulls_left: dict[int, int] = {}  # PSLD: pulls of a round not yet sent
        self.reported: set[int] = set()
        self.migrated_bytes = 0
        self.staleness = {"count": 0, "sum": 0.0, "max": 0.0, "scale_sum": 0.0}
        self.log: dict[int, list[list[float]]] | None = {} if ctx.job["save_params"] else None
        self.cpu_factor = self._cpu_factors(spec)
        first, end = ctx.job["timeline"]
        self.window = range(first, end)
        self.timeline: list[list[Any]] = []
        self.first_measured = int(spec["warmup_iterations"])
        # (wall, process CPU) at the first measured push taken and after the last one handled
        self.cpu_from: tuple[float, float] | None = None
        self.cpu_to: tuple[float, float] | None = None
        self.aggregate_priority = ""  # its main thread's, as serve() runs (priority.current)

    def _cpu_factors(self, spec: dict[str, Any]) -> list[float]:
        factors = [1.0] * (self.total + 1)
        for s in spec["cluster"].get("ps_stragglers", []):
            if s["server"] != self.index:
                continue
            until = s.get("until_iteration")
            for it in range(s.get("from_iteration", 0), self.total if until is None else until):
                if it < len(factors):
                    factors[it] = max(factors[it], float(s.get("cpu_slowdown", 1.0)))
        return factors

    def _record(self, it: int, resource: str, op: str, key: int, start: float, end: float):
        """(Any thread.) Busy time of round ``it`` and the timeline."""
        with self.cv:
            self.busy[it] = self.busy.get(it, 0.0) + (end - start)
        if it in self.window:
            name = self.names[self.keys[key].layer] if key >= 0 else "keys"
            nbytes = self.keys[key].numel * 4 if key >= 0 else 0
            self.timeline.append([it, f"ps{self.index}.{resource}", op, name, start, end, nbytes])

    # ----------------------------------------------------------------- receiver thread
    def _on_message(self, h: list[int], payload: torch.Tensor | None, start: float, end: float):
        kind, key, it = h[0], h[1], h[2]
        with self.cv:
            if kind == PUSH:
                order = (1, it, self.keys[key].priority) if self.inbox_priority else (1, 0, 0)
                heapq.heappush(self.inbox, (order, self.seq, h, payload))
            elif kind == MIGRATE:
                heapq.heappush(self.inbox, ((0,), self.seq, h, payload))
            elif kind == CONTROL:
                self.assign.set(it, None if payload is None else _ints(payload))
            elif kind == STOP and h[4] < self.workers:
                self.stopped.add(h[4])
            self.seq += 1
            self.cv.notify_all()
        if kind == PUSH:
            self._record(it, "in", "push", key, start, end)
        elif kind == MIGRATE:
            self._record(it, "in", "migrate", -1, start, end)

    # ------------------------------------------------------------------- main thread
    def serve(self) -> None:
        """Take the inbox's messages in order until every worker has stopped. The whole of
        it runs at the communication threads' priority (``runners.real.priority``): a server
        does nothing but communication (receive, aggregate, send), as a PS process on a server
        machine of the papers' clusters whose CPU no worker's compute shares; on our CPU
        testbed, where it shares cores with the workers' compute, at normal priority its
        aggregation waited behind that compute (up to a scheduler slice per push), which the
        simulator's server (a CPU of its own) and the calibration's probe (``_ps_server``,
        aggregating on its realtime receiver thread) do not. Its threads then take the CPU only
        while they have work, as the transport's do."""
        with priority.of_job(self.ctx.job["train"]):  # this thread and the transport's
            self.aggregate_priority = priority.current()
            self.channel.start()
            self._serve_inbox()
        with self.cv:
            self.channel.close()
        self.channel.join()

    def _serve_inbox(self) -> None:
        while True:
            with self.cv:
                while not self.inbox and not self._done():
                    self.channel.failed()
                    self.cv.wait(0.5)
                if not self.inbox:
                    break
                _, _, h, payload = heapq.heappop(self.inbox)
            if h[0] == PUSH:
                measured = h[2] >= self.first_measured
                if measured and self.cpu_from is None:
                    self.cpu_from = (time.perf_counter(), time.process_time())
                self._push(h, payload)
                if measured:
                    self.cpu_to = (time.perf_counter(), time.process_time())
            else:
                self._migrated_in(h, payload)

    def _done(self) -> bool:
        return len(self.stopped) == self.workers and not self.ready

    def _push(self, h: list[int], g: torch.Tensor) -> None:
        key, it, version, worker = h[1], h[2], h[3], h[4]
        start = time.perf_counter()
        if self.mode == "async":
            st = self._state(key)
            scale = self._scale(key, st, st.version - version, worker, it, version)
            self._step(st, g.mul_(scale / self.workers))
            st.version += 1
            self._answer(key, it, worker, st)
            self._stretch(it, start)
            self._record(it, "cpu", "aggregate", key, start, time.perf_counter())
            return
        scale = 1.0
        if self.mode == "sync-round":  # version at apply of round it = it
            scale = self._scale(key, self.state.get(key), it - version, worker, it, version)
        elif self.log is not None:
            self.log.setdefault(key, []).append([worker, it, version, 0, 1.0])
        rnd = self.rounds.get((key, it))
        if rnd is None:
            rnd = self.rounds[key, it] = [g.mul_(scale) if scale != 1.0 else g, 1]
        else:
            rnd[0].add_(g, alpha=scale)
            rnd[1] += 1
        if rnd[1] == self.workers:
            del self.rounds[key, it]
            with self.cv:
                self.ready[key, it] = rnd[0]
            self._apply_ready(key)
        if self.mode == "sync-round":
            self._answer(key, it, worker, self.state[key])
        self._stretch(it, start)
        self._record(it, "cpu", "aggregate", key, start, time.perf_counter())

    def _scale(
        self, key: int, st: _KeyState | None, tau: float, worker: int, it: int, version: int
    ) -> float:
        """The staleness-aware learning-rate multiplier of a gradient ``tau`` updates old
        (``lr_scale``; tau_max = the largest staleness of this key so far); recorded."""
        tau_max = max(st.tau_max if st is not None else 0.0, float(tau))
        if st is not None:
            st.tau_max = tau_max
        scale = lr_scale(self.rule, float(tau), tau_max)
        s = self.staleness
        s["count"] += 1
        s["sum"] += tau
        s["max"] = max(s["max"], float(tau))
        s["scale_sum"] += scale
        if self.log is not None:
            self.log.setdefault(key, []).append([worker, it, version, tau, scale])
        return scale

    def _state(self, key: int) -> _KeyState:
        st = self.state.get(key)
        if st is None:
            raise RuntimeError(f"server {self.index} got a push of key {key} it does not hold")
        return st

    def _stretch(self, it: int, start: float) -> None:
        """``ps_stragglers`` CPU slow-down: the aggregation takes ``f`` times as long."""
        f = self.cpu_factor[min(it, len(self.cpu_factor) - 1)]
        if f > 1.0:
            time.sleep((f - 1.0) * (time.perf_counter() - start))

    def _step(self, st: _KeyState, g: torch.Tensor) -> None:
        sgd_step(st.w, st.m, g, self.lr, self.momentum)

    def _apply_ready(self, key: int) -> None:
        """Apply the complete rounds of ``key`` in order, while this server holds the key
        (a key migrating in waits for its state)."""
        while True:
            st = self.state.get(key)
            if st is None:
                return
            r = st.version
            with self.cv:
                total = self.ready.pop((key, r), None)
            if total is None:
                return
            self._step(st, total.div_(self.workers))
            st.version = r + 1
            if self.mode == "sync":
                values = st.w.clone()
                with self.cv:
                    for w in range(self.workers):
                        self.channel.post(
                            self.pull_order(w, r, key), w, PULL, key, r, st.version, values,
                            self._pulled(r, key),
                        )  # fmt: skip
                    if self.dynamic:
                        self.pulls_left[r] = self.pulls_left.get(r, 0) + self.workers
            if self.dynamic:
                self._applied(key, r, st)

    def _answer(self, key: int, it: int, worker: int, st: _KeyState) -> None:
        with self.cv:
            self.channel.post(
                self.pull_order(worker, it, key), worker, PULL, key, it, st.version,
                st.w.clone(), self._pulled(it, key),
            )  # fmt: skip

    def _pulled(self, it: int, key: int) -> Callable[[float, float], None]:
        def done(start: float, end: float) -> None:
            self._record(it, "out", "pull", key, start, end)
            if self.dynamic:
                with self.cv:
                    self.pulls_left[it] -= 1
                    self._report(it)

        return done

    # ------------------------------------------------------------------ PSLD
    def _applied(self, key: int, r: int, st: _KeyState) -> None:
        """Round ``r`` of ``key`` applied (sync, with a controller): migrate the key if it
        moves at ``r + 1``; report the round's busy time once all of it is done."""
        with self.cv:
            if r not in self.keys_left:
                mine = self.assign.get(r, self.channel.failed)
                self.keys_left[r] = sum(
                    1 for k, s in enumerate(mine) if s == self.index and self.keys[k].numel
                )
            self.keys_left[r] -= 1
            moves = r + 1 < self.total and (
                self.assign.get(r + 1, self.channel.failed)[key] != self.index
            )
            if moves:
                dest = self.assign.get(r + 1, self.channel.failed)[key]
                m = st.m if st.m is not None else torch.zeros(0)
                payload = torch.cat([st.w, m])
                del self.state[key]
                self.migrated_bytes += self.keys[key].numel * 4

                def sent(start: float, end: float, it: int = r + 1) -> None:
                    self._record(it, "out", "migrate", -1, start, end)

                self.channel.post((_URGENT,), self.workers + dest, MIGRATE, key, r + 1,
                                  st.version, payload, sent)  # fmt: skip
            self._report(r)

    def _report(self, r: int) -> None:
        """(Under cv.) Round ``r`` done here (keys applied, pulls sent): its busy time to
        worker 0."""
        if self.keys_left.get(r, 1) or self.pulls_left.get(r, 0) or r in self.reported:
            return
        self.reported.add(r)
        busy = torch.tensor([self.busy.get(r, 0.0)], dtype=torch.float32)
        self.channel.post((_URGENT,), 0, STATS, 0, r, 0, busy)

    def _migrated_in(self, h: list[int], payload: torch.Tensor) -> None:
        key, version = h[1], h[3]
        n = self.keys[key].numel
        m = payload[n:].clone() if self.momentum else None
        self.state[key] = _KeyState(payload[:n].clone(), m, version)
        self._apply_ready(key)

    def result(self) -> dict[str, Any]:
        rounds = max(self.busy, default=-1) + 1
        out: dict[str, Any] = {
            "server": self.index,
            "busy_s": [self.busy.get(r, 0.0) for r in range(rounds)],
            "migrated_bytes": self.migrated_bytes,
            "staleness": self.staleness,
            "keys": sorted(self.state),
            "timeline": self.timeline,
            "aggregate_priority": self.aggregate_priority,  # its main thread's, as it served
        }
        if self.cpu_from and self.cpu_to:  # the measured rounds' span: its wall and CPU time
            (w0, c0), (w1, c1) = self.cpu_from, self.cpu_to
            out["cpu"] = {"wall_s": w1 - w0, "cpu_s": c1 - c0}
        if self.log is not None:
            out["log"] = {str(k): v for k, v in self.log.items()}
        return out


def _serve(ctx: Context, job_dir: Path) -> dict[str, Any]:
    """A server process: serve until the workers stop; return its ``server<j>.json``."""
    from .worker import settle_gc

    _, binding = _model(ctx)
    server = PSServer(ctx, binding, plan_from_json(ctx.job["plan"]))
    settle_gc()
    dist.barrier()
    server.serve()
    if ctx.job.get("save_params"):
        torch.save({k: st.w for k, st in server.state.items()},
                   job_dir / f"serverstate{server.index}.pt")  # fmt: skip
    return server.result()


# ------------------------------------------------------------------------ process entry
def process_main(job_dir: Path, job: dict[str, Any]) -> int:
    """One process of a PS run (``runners.real.worker`` hands over when the job's arena is
    ``ps``): a worker (logical rank < W) or a server."""
    job = {**job, "dir": str(job_dir)}
    torch.set_num_threads(int(job["train"]["threads"]))
    timeout = datetime.timedelta(seconds=float(job["timeout_s"]))
    with priority.of_job(job["train"]):  # gloo's threads
        dist.init_process_group("gloo", timeout=timeout)
    me = int(os.environ.get("LAB_PS_ID", dist.get_rank()))
    try:
        mine = torch.tensor([me], dtype=torch.int64)
        every = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
        dist.all_gather(every, mine)
        table = [0] * len(every)
        for rank, logical in enumerate(every):
            table[int(logical)] = rank
        ctx = Context(job, me, table)
        if me < ctx.workers:
            result = _work(ctx)
            name = f"rank{me}"
        else:
            result = _serve(ctx, job_dir)
            name = f"server{me - ctx.workers}"
        dist.barrier()
    except BaseException:
        # The communication threads may be blocked in gloo: leave at once (torchrun stops the
        # peers), after writing the error the launcher shows.
        text = traceback.format_exc()
        (job_dir / f"error{me}.txt").write_text(text)
        sys.stderr.write(text)
        sys.stderr.flush()
        os._exit(1)
    dist.destroy_process_group()
    write_record(job_dir, name, me, result)
    return 0


__all__ = [
    "Key",
    "PSServer",
    "PSWorker",
    "layout",
    "plan_for",
    "preflight",
    "process_main",
    "run",
    "server_count",
    "sgd_step",
]
