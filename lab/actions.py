"""Every state change of experiments and runs goes through here.

Views, API, Celery tasks, management commands and tests call these functions; nothing else
writes ``Run.state``. Transitions are conditional updates (``UPDATE ... WHERE state IN ...``), so
two workers racing on the same run cannot both win, and every function is safe to call twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from lab import measuring
from lab.experiments.models import Experiment
from lab.results.ingest import ingest_run
from lab.runs.models import CONDITION_KEYS, Run, RunNode
from runners import executors, registry
from runners import spec as run_spec
from runners.executors import local

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated experiment definition (what the form and the API produce)."""

    name: str
    system: str
    workloads: tuple[str, ...]
    seeds: tuple[int, ...]
    baselines: tuple[str, ...] = ()
    mode: str = "sim"
    description: str = ""
    cluster: dict[str, Any] = field(default_factory=dict, hash=False)
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    iterations: int = 20
    batch_size: int = 0  # per worker; 0: each workload's default
    sweep: dict[str, list[Any]] = field(default_factory=dict, hash=False)
    real: dict[str, Any] = field(default_factory=dict, hash=False)  # mode real: RealOptions

    def conditions(self) -> list[dict[str, Any]]:
        """The cluster of every point of the sweep (just ``cluster`` without one). The cluster
        arena's load, ``jobs_per_hour``, is a field of its trace: ``cluster["trace"]``."""
        points = [dict(self.cluster)]
        for key in CONDITION_KEYS:  # the fields an experiment may sweep
            for_key = self.sweep.get(key)
            if for_key:
                points = [self._at(p, key, value) for p in points for value in for_key]
        return points

    @staticmethod
    def _at(point: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
        """``point`` with the swept condition ``key`` set to ``value``."""
        if key == "jobs_per_hour":
            return {**point, "trace": {**point.get("trace", {}), key: value}}
        return {**point, key: value}

    def raw_specs(self) -> list[dict[str, Any]]:
        """One run spec per entry x workload x sweep point x seed; params apply to the system
        only. A cluster-arena system has no workloads: its trace is ``cluster["trace"]``, and
        its sweep points are loads (entry x load x seed)."""
        cluster_arena = arena_of(self.system) == "cluster"
        workloads = self.workloads or (("",) if cluster_arena else ())
        return [
            self._raw_spec(entry, workload, cluster, seed)
            for entry in (self.system, *self.baselines)
            for workload in workloads
            for cluster in self.conditions()
            for seed in self.seeds
        ]

    def _raw_spec(
        self, entry: str, workload: str, cluster: dict[str, Any], seed: int
    ) -> dict[str, Any]:
        params = dict(self.params) if entry == self.system else {}
        if arena_of(entry) == "cluster":
            rest = {k: v for k, v in cluster.items() if k != "trace"}
            trace = cluster.get("trace", {})
            return {"system": entry, "mode": self.mode, "trace": trace, "cluster": rest,
                    "params": params, "seed": seed}  # fmt: skip
        raw = {
            "system": entry,
            "mode": self.mode,
            "workload": workload,
            "cluster": cluster,
            "params": params,
            "iterations": self.iterations,
            "seed": seed,
        }
        if self.batch_size:
            raw["batch_size"] = self.batch_size
        if self.mode == "real" and self.real:
            raw["real"] = dict(self.real)
        return raw

    def model_fields(self) -> dict[str, Any]:
        """The Experiment model's fields for this definition (JSON-ready: lists, dicts)."""
        return {
            f.name: list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, dict) else v
            for f in dataclasses.fields(self)
            for v in [getattr(self, f.name)]
        }

    @classmethod
    def of(cls, experiment: Experiment) -> ExperimentConfig:
        values = {f.name: getattr(experiment, f.name) for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def arena_of(name: str) -> str | None:
    """The registry arena of ``name``; None if unknown (validation reports it)."""
    try:
        return registry.get(name).arena
    except registry.UnknownEntry:
        return None


def create_experiment(
    owner: Any, config: ExperimentConfig, rerun_of: Experiment | None = None
) -> Experiment:
    """Store the experiment and its runs, then queue the runs once the transaction commits.

    Every spec is validated first (``runners.spec.SpecError`` propagates): nothing is stored or
    queued when any run would be invalid.
    """
    specs = [run_spec.validate(raw) for raw in config.raw_specs()]
    check_submission(specs)
    with transaction.atomic():
        experiment = Experiment.objects.create(
            owner=owner, rerun_of=rerun_of, **config.model_fields()
        )
        runs = []
        for spec in specs:
            resolved = spec.as_dict()
            resolved["labels"] = {"experiment": experiment.pk}
            runs.append(
                Run(
                    experiment=experiment,
                    system=spec.system,
                    workload=spec.workload,
                    seed=spec.seed,
                    spec=resolved,
                )
            )
        created = Run.objects.bulk_create(runs)
        ids = [r.pk for r in created]
        transaction.on_commit(lambda: _enqueue_launches(ids))
    log.info("experiment %s created with %d runs", experiment.pk, len(ids))
    return experiment


def rerun_experiment(experiment: Experiment, owner: Any) -> Experiment:
    """A fresh copy of ``experiment`` (same definition, new runs); the original is kept."""
    config = ExperimentConfig.of(experiment)
    copies = experiment.reruns.count() + 1
    name = f"{experiment.name} (re-run {copies})"[:200]
    return create_experiment(owner, dataclasses.replace(config, name=name), rerun_of=experiment)


def _enqueue_launches(run_ids: list[int]) -> None:
    """New runs: with registered hosts, every host is asked to take what it can (each host's
    worker takes runs it has slots and GPUs for); on a single machine, launch here."""
    from lab.runs.tasks import launch_run

    if _many_hosts_possible() and _hosts():
        dispatch()
        return
    for run_id in run_ids:
        launch_run.delay(run_id)


def check_submission(specs: list[Any]) -> None:
    """Refuse at submission what no host can ever run (``SpecError`` naming the field)."""
    from lab.hosts import ledger

    for spec in specs:
        real = getattr(spec, "real", None)
        if real is not None and real.gpus:
            ledger.check_request(real.gpus, real.gpu_model or None, field="real.gpus")
        if real is not None and real.nodes > 1:
            check_nodes(real.nodes)


def check_nodes(count: int) -> None:
    """Refuse a run over more hosts than the lab has (registered and active), or any run over
    several hosts without a broker they share; a Slurm host runs it as one batch job."""
    from lab.hosts.models import Host

    if Host.objects.filter(active=True, executor="slurm").exists():
        return  # Slurm runs it as one batch job over its nodes
    if not _many_hosts_possible():
        raise run_spec.SpecError(
            "real.nodes",
            f"{count} hosts asked, but the lab runs on one machine (the embedded broker): a run "
            "over several hosts needs Redis (REDIS_URL) and a worker on each host",
        )
    have = Host.objects.filter(active=True).count()
    if count > have:
        raise run_spec.SpecError(
            "real.nodes",
            f"{count} hosts asked, {have} registered: start a worker on each further host "
            "(README, Adding a host) or ask for fewer",
        )


# -- hosts and executors ----------------------------------------------------------------------
def executor_for(name: str) -> executors.Executor:
    """The executor ``name`` as this host's settings configure it."""
    python = settings.RUNNER_PYTHON or sys.executable
    if name == "local":
        return executors.get("local", python=python)
    if name == "docker":
        return executors.get("docker", image=settings.RUNNER_IMAGE)
    return executors.get(
        "slurm",
        partition=settings.SLURM_PARTITION,
        python=python,
        extra_sbatch=settings.SLURM_OPTIONS,
    )


def _many_hosts_possible() -> bool:
    """Hosts need a broker they share (Redis). The embedded filesystem broker serves one
    machine, and its transport can hand a worker a message file before its writer has filled
    it (kombu; seen in CI as a worker dying on JSONDecodeError) -- so it gets no fan-out
    traffic: its worker reconciles its own host directly, as before hosts existed."""
    return bool(settings.REDIS_URL)


HOST_STALE_S = 120.0  # a host whose worker has not reconciled for this long gets no runs


def _hosts() -> list[Any]:
    """Active hosts whose worker reconciled recently (a stopped worker's host gets nothing)."""
    from lab.hosts.models import Host

    stale = max(HOST_STALE_S, 20 * settings.RECONCILE_INTERVAL_S)
    since = timezone.now() - timedelta(seconds=stale)
    return list(Host.objects.filter(active=True, last_seen__gte=since).order_by("name"))


def dispatch() -> dict[str, int]:
    """Periodic (beat) and on submission: with registered hosts, ask each host's worker (on
    its own queue ``host.<name>``) to reconcile its runs and take queued ones; without any,
    reconcile here (the single-machine default)."""
    from lab.runs.tasks import reconcile_host

    many = _many_hosts_possible()
    lost = fail_runs_of_lost_hosts() if many else 0
    hosts = _hosts() if many else []
    if not hosts:
        counts = reconcile()
        return {**counts, "lost": lost} if lost else counts
    expires = max(2.0, settings.RECONCILE_INTERVAL_S * 2)
    for host in hosts:
        reconcile_host.apply_async(args=[host.name], queue=host.queue, expires=expires)
    return {"hosts": len(hosts), **({"lost": lost} if lost else {})}


def fail_runs_of_lost_hosts() -> int:
    """Runs still marked running on another host whose worker has not reconciled for
    ``settings.HOST_LOST_S``: nobody is watching them, so they fail with a reason that says
    what to do (their GPU claims go back). They are not re-queued: the job may still be
    running there, and a second copy elsewhere would race it. This host's own runs are left
    to its reconcile, which finds them again after any restart. When the lost host's worker
    comes back, it stops the jobs of these runs (``stop_jobs_left_while_lost``)."""
    from lab.hosts.models import Host

    since = timezone.now() - timedelta(seconds=settings.HOST_LOST_S)
    lost = {
        h.name: h.last_seen
        for h in Host.objects.filter(last_seen__lt=since).exclude(name=settings.HOST_NAME)
    }
    failed = 0
    for run in Run.objects.filter(state=Run.RUNNING, host__in=list(lost)):
        seen = lost[run.host]
        failed += _fail(
            run,
            f"host {run.host} lost: its worker has not reconciled since "
            f"{seen:%Y-%m-%d %H:%M:%S} UTC (over {settings.HOST_LOST_S:.0f} s); restart the "
            f"worker there and re-run the experiment (a job left running there is stopped "
            f"when its worker comes back)",
        )
    return failed


def _this_host() -> Q:
    """Runs of this host (runs started before hosts were recorded have none: ours too)."""
    return Q(host=settings.HOST_NAME) | Q(host="")


# -- running ----------------------------------------------------------------------------------
def _transition(run_id: int, sources: tuple[str, ...], target: str, **fields: Any) -> bool:
    """Move a run from one of ``sources`` to ``target``; False if another actor got there."""
    return Run.objects.filter(pk=run_id, state__in=sources).update(state=target, **fields) == 1


def launch_run(run_id: int) -> bool:
    """Start a queued run on this host with its executor if a slot (and the GPUs it asks
    for) are free. Idempotent: only one host and one worker can move it out of queued. A real
    run also waits for the figures being drawn or waiting to be drawn here (``lab.measuring``):
    it measures alone."""
    queued = Run.objects.filter(pk=run_id, state=Run.QUEUED).first()
    if queued is None or queued.spec.get("mode") != "real":
        return _launch_run(run_id, queued)
    with measuring.launching() as quiet:
        return quiet and _launch_run(run_id, queued)


def _launch_run(run_id: int, queued: Run | None) -> bool:
    # A run over several hosts (not one Slurm batch job) needs free peers as well.
    many = queued is not None and _nodes_of(queued) > 1 and settings.EXECUTOR != "slurm"
    with transaction.atomic():
        # This host's row locked while it checks that it is free and takes the run: a launch
        # elsewhere choosing it as a peer (``_reserve_peers``) waits, then sees the run. A run
        # over several hosts locks every active host (name order, as ``_reserve_peers``) and
        # takes the run only if enough peers are free: two hosts launching such runs at once
        # then cannot both take theirs, each see the other busy and both give up (again and
        # again, at every reconcile); the second waits and finds the first one's run.
        _lock_hosts(
            Q(active=True) | Q(name=settings.HOST_NAME) if many else Q(name=settings.HOST_NAME)
        )
        running = Run.objects.filter(_this_host(), state=Run.RUNNING)
        if running.count() >= settings.MAX_PARALLEL_RUNS:
            return False  # the reconciler launches it when a slot frees up
        # A real run trains on this machine's cores and network: it runs alone, so that no
        # other run disturbs the times it measures (and it disturbs no simulation's). So does
        # one node of a real run over several hosts.
        if running.filter(spec__mode="real").exists() or _node_here():
            return False
        run = Run.objects.filter(pk=run_id, state=Run.QUEUED).first()
        if run is None or (running.exists() and run.spec.get("mode") == "real"):
            return False
        if many and _peer_hosts(run, _nodes_of(run) - 1) is None:
            log.info("run %s waits for %d more free hosts", run_id, _nodes_of(run) - 1)
            return False
        if not _transition(
            run_id,
            (Run.QUEUED,),
            Run.RUNNING,
            started_at=timezone.now(),
            pid=None,
            pid_start_ticks=None,
            handle="",
            host=settings.HOST_NAME,
            executor=settings.EXECUTOR,
        ):
            return False
        # Only the one actor that moved the run claims its GPUs (claims belong to the run, so
        # a loser releasing "its" claims would release the winner's), in the same transaction:
        # a host without them free never shows the run running on it, even for an instant (a
        # member's page, or another host's check, would see it there).
        gpus = _claim_gpus(run)
        if gpus is None:  # not enough free GPUs here now: the run stays queued
            transaction.set_rollback(True)
            return False
    run.refresh_from_db()
    resources = _resources(run, gpus)
    nodes = _nodes_of(run)
    if nodes > 1 and run.executor == "slurm":  # one batch job over the nodes (--nodes)
        resources = dataclasses.replace(resources, nodes=nodes)
        nodes = 1
    executor = executor_for(run.executor)
    try:
        if nodes > 1:  # node 0 here; the others on as many free hosts
            reserved = _reserve_peers(run, nodes - 1, resources)
            if reserved is None:
                log.info("run %s waits for %d more free hosts", run_id, nodes - 1)
                _release_gpus(run)
                _transition(run_id, (Run.RUNNING,), Run.QUEUED, started_at=None, host="")
                return False
            resources = reserved
        _prepare_home(run)
        handle = executor.launch(run.home, run.pk, resources)
    except Exception as err:  # could not even start: the run fails with the reason
        log.exception("launch of run %s failed", run_id)
        _fail(run, f"could not launch ({run.executor} executor): {type(err).__name__}: {err}")
        return False
    fields: dict[str, Any] = {"handle": handle}
    if run.executor == "local":
        parsed = local.parse_handle(handle)
        fields.update(pid=parsed.pid, pid_start_ticks=parsed.start_ticks)
    if not Run.objects.filter(pk=run_id, state=Run.RUNNING).update(**fields):
        executor.stop(run.home, handle, settings.STOP_GRACE_S)  # cancelled while starting
        return False
    log.info("run %s launched on %s (%s executor): %s", run_id, run.host, run.executor, handle)
    if nodes > 1:
        _start_other_nodes(run)
    return True


# -- runs over several hosts --------------------------------------------------------------------
def _nodes_of(run: Run) -> int:
    return int((run.spec.get("real") or {}).get("nodes", 1))


def _active_nodes() -> Any:
    """Nodes (rank >= 1) still going, of the current attempt of running runs."""
    return RunNode.objects.filter(
        exit_code__isnull=True, run__state=Run.RUNNING, attempt=F("run__attempt")
    )


def _node_here() -> bool:
    """Whether this host runs a node (rank >= 1) of a running run over several hosts."""
    return _active_nodes().filter(host=settings.HOST_NAME).exists()


def _exit_code(status: executors.Status) -> int | None:
    """The exit code of an ended job; -1 for one that was lost."""
    return status.exit_code if status.state == "exited" else -1


def _lock_hosts(which: Q) -> None:
    """(Inside a transaction.) Lock the rows of the hosts ``which`` selects until it ends: on
    PostgreSQL ``SELECT ... FOR UPDATE``, in name order (two launches that lock several hosts
    cannot deadlock: they take them in the same order); on SQLite a no-op, since the lab's
    transactions are IMMEDIATE and hold the database's write lock from their start."""
    from lab.hosts.models import Host

    list(Host.objects.select_for_update().filter(which).order_by("name").values_list("pk"))


def _reserve_peers(
    run: Run, count: int, resources: executors.Resources
) -> executors.Resources | None:
    """Choose ``count`` peers for ``run``'s other nodes and record the nodes on them
    (``_first_node``) in one transaction that first locks every active host: two hosts
    launching runs over several hosts at the same moment cannot pick the same peer (the
    second waits and then sees the first one's nodes), nor can a peer take a run of its own
    meanwhile (``launch_run`` locks its host while it takes one). Node 0's resources, or None
    when there are not that many free hosts now."""
    rendezvous = _rendezvous(run)  # before the locks: it may resolve a name or probe ports
    with transaction.atomic():
        _lock_hosts(Q(active=True))
        peers = _peer_hosts(run, count)
        return None if peers is None else _first_node(run, peers, resources, rendezvous)


def _peer_hosts(run: Run, count: int) -> list[Any] | None:
    """``count`` live hosts besides this one with nothing running (a real run needs its host
    alone), not Slurm (its own batch jobs), and with the GPUs the run asks for free: where a
    run's other nodes go. None when there are not that many now (the run waits). Called with
    the hosts locked (``_reserve_peers``); the peer still refuses a node when it is busy."""
    from lab.hosts import ledger

    if not _many_hosts_possible():
        return None
    busy = set(Run.objects.filter(state=Run.RUNNING).values_list("host", flat=True)) | set(
        _active_nodes().values_list("host", flat=True)
    )
    real = run.spec.get("real") or {}
    gpus, model = int(real.get("gpus", 0)), real.get("gpu_model") or None
    free = [
        h
        for h in _hosts()
        if h.name != settings.HOST_NAME
        and h.name not in busy
        and h.executor != "slurm"
        and (not gpus or ledger.free_gpus(model, h) >= gpus)
    ]
    return free[:count] if len(free) >= count else None


RENDEZVOUS_PORTS = (29400, 32000)  # below Linux's ephemeral ports (32768-60999)


def _free_port() -> int:
    """A port free here now for node 0's rendezvous, outside the ephemeral range: a node that
    connects before node 0 listens could otherwise be given that very port as its own source
    port and connect to itself (TCP self-connect; seen as both nodes hanging)."""
    import random

    low, high = RENDEZVOUS_PORTS
    for port in random.sample(range(low, high), 64):
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port for the rendezvous in {low}-{high - 1}")


def _node_env(run: Run, count: int, rank: int, rendezvous: str) -> dict[str, str]:
    """What ``runners.real.launch.Nodes.from_env`` reads: node ``rank`` of ``count``."""
    return {
        "LAB_NNODES": str(count),
        "LAB_NODE_RANK": str(rank),
        "LAB_RDZV_HOST": rendezvous,
        "LAB_RDZV_ID": f"lab-run-{run.pk}-{run.attempt}",
    }


def _rendezvous(run: Run) -> tuple[str, str]:
    """Where node 0 hosts the rendezvous, and the nodes' network: this host's address and a
    free port (the nodes on the hosts' network), or, when node 0 is a container and
    ``LAB_NODE_NETWORK`` names a Docker network, its container's name on that network."""
    from lab.hosts import ledger
    from lab.hosts.models import Host
    from runners.executors.docker import container_name

    network = settings.NODE_NETWORK if run.executor == "docker" else "host"
    if network == "host":
        me = Host.objects.filter(name=settings.HOST_NAME).first()
        address = me.address if me and me.address else ledger.host_address()
        return f"{address}:{_free_port()}", network
    return f"{container_name(run.pk, run.home.resolve())}:{RENDEZVOUS_PORTS[0]}", network


def _first_node(
    run: Run, peers: list[Any], resources: executors.Resources, rendezvous: tuple[str, str]
) -> executors.Resources:
    """Record the run's other nodes on ``peers`` and return node 0's resources, with the
    rendezvous (address, network) of ``_rendezvous``."""
    address, network = rendezvous
    RunNode.objects.bulk_create(
        RunNode(run=run, attempt=run.attempt, rank=k, host=h.name, executor=h.executor,
                rendezvous=address, network=network)
        for k, h in enumerate(peers, start=1)
    )  # fmt: skip
    env = {**resources.env, **_node_env(run, len(peers) + 1, 0, address)}
    return dataclasses.replace(resources, env=env, network=network)


def _start_other_nodes(run: Run) -> None:
    """Ask each other node's host (its queue) to start its node, once this is committed."""
    from lab.hosts.models import Host
    from lab.runs.tasks import launch_node

    queues = dict(Host.objects.values_list("name", "queue"))
    for node in RunNode.objects.filter(run=run, attempt=run.attempt):
        queue = queues.get(node.host, f"host.{node.host}")
        args = [run.pk, node.attempt, node.rank]
        transaction.on_commit(lambda a=args, q=queue: launch_node.apply_async(args=a, queue=q))


def launch_node(run_id: int, attempt: int, rank: int) -> bool:
    """(On the node's host.) Start node ``rank`` of a running run over several hosts with this
    host's executor, in its own home folder; idempotent. A node that cannot start fails the
    run with the reason (its other nodes are then stopped by their hosts)."""
    node = (
        RunNode.objects.select_related("run")
        .filter(run_id=run_id, attempt=attempt, rank=rank, run__state=Run.RUNNING)
        .first()
    )
    if node is None or node.handle or node.run.attempt != attempt:
        return False
    if node.host != settings.HOST_NAME:
        log.error("node %s of run %s is for host %s, not %s", rank, run_id, node.host,
                  settings.HOST_NAME)  # fmt: skip
        return False
    run = node.run
    try:
        busy = Run.objects.filter(_this_host(), state=Run.RUNNING).exists() or (
            _active_nodes().filter(host=settings.HOST_NAME).exclude(run=run).exists()
        )
        if busy:
            raise RuntimeError(f"{node.host} is busy with another run (chosen twice at once?)")
        gpus = _claim_gpus(run)
        if gpus is None:
            raise RuntimeError(f"the GPUs it asks for are not free on {node.host}")
        home = node.home
        if home.exists():
            home.rename(home.with_name(f"{home.name}.attempt-{attempt}-{_stamp()}"))
        home.mkdir(parents=True)
        (home / local.SPEC).write_text(json.dumps(run.spec, indent=2, sort_keys=True))
        count = _nodes_of(run)
        resources = dataclasses.replace(
            _resources(run, gpus),
            env=_node_env(run, count, rank, node.rendezvous),
            network=node.network or "host",
        )
        handle = executor_for(node.executor).launch(home, run.pk, resources)
    except Exception as err:
        log.exception("node %s of run %s could not start", rank, run_id)
        _fail(run, f"node {rank} could not start on {node.host} ({node.executor} executor): "
                   f"{type(err).__name__}: {err}")  # fmt: skip
        RunNode.objects.filter(pk=node.pk).update(exit_code=-1, error=str(err)[:2000])
        return False
    RunNode.objects.filter(pk=node.pk, handle="").update(handle=handle, started_at=timezone.now())
    log.info("run %s node %s launched on %s: %s", run_id, rank, node.host, handle)
    return True


def _adopt_nodes() -> None:
    """(On each host.) Its nodes whose job started without its handle recorded (the worker
    died between starting it and recording it, as ``reconcile`` adopts runs): their handle,
    from their executor, so they are watched and stopped like the others instead of being
    taken for nodes that never started (and their runs failed for it while they train on)."""
    for node in RunNode.objects.select_related("run").filter(
        host=settings.HOST_NAME, handle="", exit_code__isnull=True
    ):
        run = node.run
        if node.attempt != run.attempt or run.started_at is None:
            continue
        try:  # only a home made for this attempt (an earlier one's is renamed when it starts)
            if node.home.stat().st_mtime < run.started_at.timestamp() - 1:
                continue
        except OSError:
            continue  # not started here yet
        try:
            found = executor_for(node.executor).find(node.run_id, node.home)
        except Exception:
            log.exception("run %s node %s: cannot look for its job", node.run_id, node.rank)
            continue
        if found and RunNode.objects.filter(pk=node.pk, handle="").update(
            handle=found, started_at=node.started_at or timezone.now()
        ):
            log.warning("run %s node %s: its job %s had started without its handle recorded; "
                        "adopted", node.run_id, node.rank, found)  # fmt: skip


def _reconcile_nodes() -> None:
    """(On each host.) Its nodes of runs over several hosts: a node that failed or was lost
    fails its run; a node whose run has ended (or moved on to another attempt) is stopped.
    One node's trouble (an engine error) is logged and does not stop the others'."""
    _adopt_nodes()
    for node in (
        RunNode.objects.select_related("run")
        .filter(host=settings.HOST_NAME, exit_code__isnull=True)
        .exclude(handle="")
    ):
        try:
            _reconcile_node(node)
        except Exception:
            log.exception("run %s node %s: reconcile failed", node.run_id, node.rank)


def _ended_node(node: RunNode, code: int | None, reason: str = "") -> None:
    RunNode.objects.filter(pk=node.pk).update(exit_code=code, error=reason)
    _cleanup_node(node, code)


def _reconcile_node(node: RunNode) -> None:
    run = node.run
    executor = executor_for(node.executor)
    ended = run.state != Run.RUNNING or run.attempt != node.attempt
    if ended and run.state == Run.SUCCEEDED and run.attempt == node.attempt:
        # Node 0 has the results; this node is finishing too: let it end by itself.
        finished = run.finished_at or timezone.now()
        if timezone.now() - finished <= timedelta(seconds=settings.LAUNCH_GRACE_S):
            status = executor.poll(node.home, node.handle)
            if status.state != "running":
                _ended_node(node, _exit_code(status), status.reason)
            return
    if ended:  # cancelled, failed, re-queued, or a straggler of a finished run: stop it
        executor.stop(node.home, node.handle, settings.STOP_GRACE_S)
        status = executor.poll(node.home, node.handle)
        _ended_node(node, _exit_code(status))
        _release_gpus(run)  # claims a late launch made after the run had ended
        return
    status = executor.poll(node.home, node.handle)
    if status.state == "running":
        return
    code = _exit_code(status)
    RunNode.objects.filter(pk=node.pk).update(exit_code=code, error=status.reason)
    if status.state == "lost":
        _fail(run, f"node {node.rank} on {node.host} lost: {status.reason or 'its job vanished'}")
    elif code != 0:
        why = f" ({status.reason})" if status.reason else ""
        last = _last_error_line_in(node.home)
        _fail(run, f"node {node.rank} on {node.host}: exit code {code}{why}: {last}")
    else:
        _cleanup_node(node, code)


def _cleanup_node(node: RunNode, code: int | None) -> None:
    if code == 0 and node.executor == "docker":
        try:
            executor_for("docker").remove(node.handle)  # type: ignore[attr-defined]
        except executors.ExecutorError as err:
            log.warning("run %s node %s: container not removed: %s", node.run_id, node.rank, err)


def _nodes_missing(run: Run) -> str:
    """Why a run over several hosts cannot go on, from node 0's side: a node that never
    started within ``LAUNCH_GRACE_S`` (its host's worker is down?). Empty when all is well."""
    if _nodes_of(run) <= 1 or not run.started_at:
        return ""
    if timezone.now() - run.started_at <= timedelta(seconds=settings.LAUNCH_GRACE_S):
        return ""
    late = RunNode.objects.filter(run=run, attempt=run.attempt, handle="", exit_code__isnull=True)
    names = [f"node {n.rank} on {n.host}" for n in late]
    if not names:
        return ""
    return (f"{', '.join(names)} did not start within {settings.LAUNCH_GRACE_S:.0f} s: is the "
            "worker of that host running?")  # fmt: skip


def _resources(run: Run, gpus: list[str]) -> executors.Resources:
    real = run.spec.get("mode") == "real"
    return executors.Resources(gpus=tuple(gpus), shm_gb=2.0 if real else 0.25)


def _claim_gpus(run: Run) -> list[str] | None:
    """UUIDs of the GPUs the run asks for, claimed on this host; None when not free now."""
    count = int((run.spec.get("real") or {}).get("gpus", 0))
    if not count:
        return []
    from lab.hosts import ledger

    model = (run.spec.get("real") or {}).get("gpu_model") or None
    try:
        return [gpu.uuid for gpu in ledger.claim_gpus(run, count, model, host=settings.HOST_NAME)]
    except (ledger.NotEnoughGpus, LookupError, ValueError) as err:
        log.info("run %s waits for GPUs on %s: %s", run.pk, settings.HOST_NAME, err)
        return None


def _release_gpus(run: Run) -> None:
    if int((run.spec.get("real") or {}).get("gpus", 0)):
        from lab.hosts import ledger

        ledger.release_gpus(run)


def _prepare_home(run: Run) -> None:
    """Fresh folder for this attempt; an earlier attempt's folder is kept beside it."""
    home = run.home
    if home.exists():
        home.rename(home.with_name(f"{home.name}.attempt-{run.attempt - 1}-{_stamp()}"))
    home.mkdir(parents=True)
    (home / local.SPEC).write_text(json.dumps(run.spec, indent=2, sort_keys=True))


def _stamp() -> str:
    return timezone.now().strftime("%Y%m%dT%H%M%S%f")


def _handle_of(run: Run) -> str:
    """The executor's handle; runs launched before handles were recorded have only a pid."""
    return run.handle or (f"{run.pid}:{run.pid_start_ticks or ''}" if run.pid else "")


def reconcile() -> dict[str, int]:
    """Periodic, on each host: bring this host's running runs up to date (from the outside
    world: process table, Docker engine, Slurm), then start queued runs in free slots."""
    counts = {"finished": 0, "requeued": 0, "launched": 0}
    before = _seen()  # first: trouble below must not make this host look lost
    if before is not None and timezone.now() - before > timedelta(seconds=settings.HOST_LOST_S):
        counts["stopped"] = stop_jobs_left_while_lost(before)
    grace = timedelta(seconds=settings.LAUNCH_GRACE_S)
    for run in Run.objects.filter(_this_host(), state=Run.RUNNING):
        executor = executor_for(run.executor)
        handle = _handle_of(run)
        if not handle:
            # The worker may have died between starting the job and recording it.
            found = executor.find(run.pk, run.home)
            if found:
                Run.objects.filter(pk=run.pk, state=Run.RUNNING).update(handle=found)
                log.warning("run %s: its job %s had started without its handle recorded; "
                            "adopted", run.pk, found)  # fmt: skip
                handle = found
            elif run.started_at and timezone.now() - run.started_at > grace:
                counts["requeued"] += _requeue_or_fail(run, "launch did not complete")
                continue
            else:
                continue
        try:
            status = executor.poll(run.home, handle)
        except executors.ExecutorError as err:  # engine or controller down: ask again later
            log.warning("run %s: cannot poll (%s)", run.pk, err)
            continue
        missing = _nodes_missing(run) if status.state == "running" else ""
        if missing:
            if _fail(run, missing):
                stop_job(run)
            continue
        if status.state == "exited":
            finish_run(run, status.exit_code, status.reason)
            counts["finished"] += 1
        elif status.state == "lost":
            reason = status.reason or (
                "the run's process vanished without an exit code (restart or kill -9)"
            )
            counts["requeued"] += _requeue_or_fail(run, reason)
    _reconcile_nodes()
    try:
        _stop_failed_first_nodes()
    except Exception:
        log.exception("could not stop the first nodes of failed runs")
    _refresh_gpus()
    owed = measuring.retry()  # the renders that waited for a real run, or were lost
    if owed and _measuring_here() is None:
        for experiment_id in owed:
            ask_render(experiment_id)
    free = settings.MAX_PARALLEL_RUNS - Run.objects.filter(_this_host(), state=Run.RUNNING).count()
    if free > 0:
        rows = queue_order().values_list("pk", "spec__mode", "spec__real__nodes")[: free + 16]
        for run_id, mode, nodes in rows:
            launched = launch_run(run_id)
            counts["launched"] += launched
            if not launched and mode == "real" and (nodes or 1) <= 1:
                break  # the oldest waiting run needs the machine alone: let it drain
            # (a run over several hosts waiting for free hosts does not hold up the others)
            if counts["launched"] >= free:
                break
    return counts


def queue_order() -> QuerySet[Run]:
    """Queued runs in the order they start: the runs people queued first, oldest first, then
    the nightly suite's (its claim checks' experiments and its re-runs of nightly experiments),
    oldest first. A night's runs never hold up an experiment queued while they run; they wait
    for free slots instead, and a night whose runs have not ended within
    ``LAB_NIGHTLY_TIMEOUT_H`` is judged on what ran (``lab.reports.nightly.settle``)."""
    from lab.reports.models import ClaimCheck, NightlyRun

    nightly = Exists(
        NightlyRun.experiments.through.objects.filter(experiment_id=OuterRef("experiment_id"))
    ) | Exists(
        ClaimCheck.objects.filter(experiment_id=OuterRef("experiment_id"), nightly__isnull=False)
    )
    return (
        Run.objects.filter(state=Run.QUEUED)
        .annotate(nightly=nightly)
        .order_by("nightly", "created_at", "id")
    )


def _seen() -> Any:
    """Mark this host seen now; returns when it was seen before (None: never)."""
    from lab.hosts.models import Host

    mine = Host.objects.filter(name=settings.HOST_NAME)
    before = mine.values_list("last_seen", flat=True).first()
    mine.update(last_seen=timezone.now())
    return before


LEFT_WHILE_LOST_DAYS = 7  # how far back a returning worker looks for runs failed as lost


def stop_jobs_left_while_lost(since: Any = None) -> int:
    """This host's worker is back after being lost: the runs other hosts failed meanwhile
    (``fail_runs_of_lost_hosts``) may still have their jobs running here, holding the machine
    and its GPUs for results nobody ingests. Stop them (``LAB_STOP_GRACE_S``), keeping their
    logs; returns how many were stopped. Called when the worker starts (``lab.celery``) and
    by a reconcile that follows a gap longer than ``LAB_HOST_LOST_S`` (a worker that was
    alive but cut off); ``since``: runs failed from then on (default: the last
    ``LEFT_WHILE_LOST_DAYS`` days). One run's trouble does not stop the others'."""
    if since is None:
        since = timezone.now() - timedelta(days=LEFT_WHILE_LOST_DAYS)
    stopped = 0
    for run in Run.objects.filter(
        host=settings.HOST_NAME,
        state=Run.FAILED,
        finished_at__gte=since,
        error__startswith=f"host {settings.HOST_NAME} lost",
    ):
        try:
            if stop_job(run):
                stopped += 1
                log.warning("run %s: its job was still running after this host was lost; "
                            "stopped", run.pk)  # fmt: skip
        except Exception:
            log.exception("run %s: could not stop the job left while this host was lost", run.pk)
    return stopped


def _refresh_gpus() -> None:
    """Mark this host's GPUs that someone else's process uses (nvidia-smi), if it has any."""
    from lab.hosts import ledger
    from lab.hosts.models import Gpu

    if Gpu.objects.filter(host__name=settings.HOST_NAME).exists():
        try:
            ledger.refresh_busy(settings.HOST_NAME)
        except Exception as err:  # nvidia-smi failing must not stop the reconciler
            log.warning("could not check GPU use on %s: %s", settings.HOST_NAME, err)


def _requeue_or_fail(run: Run, reason: str) -> int:
    _release_gpus(run)
    if run.attempt < settings.MAX_RUN_ATTEMPTS:
        requeued = _transition(
            run.pk,
            (Run.RUNNING,),
            Run.QUEUED,
            attempt=run.attempt + 1,
            pid=None,
            pid_start_ticks=None,
            handle="",
            error=f"attempt {run.attempt}: {reason}; re-queued",
        )
        log.warning("run %s: %s; re-queued", run.pk, reason)
        return int(requeued)
    _fail(run, f"{reason} (after {run.attempt} attempts)")
    return 0


def finish_run(run: Run, exit_code: int | None, reason: str = "") -> None:
    """Record the end of a run: ingest its results if it succeeded, else keep the error."""
    _release_gpus(run)
    if exit_code == 0 and (run.run_dir / "summary.json").exists():
        try:
            with transaction.atomic():
                ingest_run(run)
                if not _transition(
                    run.pk, (Run.RUNNING,), Run.SUCCEEDED, finished_at=timezone.now(), error=""
                ):
                    transaction.set_rollback(True)  # cancelled meanwhile: keep it cancelled
                    return
        except (OSError, ValueError, KeyError) as err:
            _fail(run, f"results could not be ingested: {err}")
            return
        _cleanup(run)
        _after_change(run.experiment_id)
        return
    why = f" ({reason})" if reason else ""
    _fail(run, f"exit code {exit_code}{why}: {_last_error_line(run)}")


def _cleanup(run: Run) -> None:
    """A succeeded run's container is removed (its log is in process.log); failed ones are
    kept for ``docker logs`` / ``docker inspect``."""
    if run.executor == "docker" and run.handle:
        try:
            executor_for("docker").remove(run.handle)  # type: ignore[attr-defined]
        except executors.ExecutorError as err:
            log.warning("run %s: container not removed: %s", run.pk, err)


def _fail(run: Run, error: str) -> bool:
    _release_gpus(run)
    if _transition(run.pk, Run.ACTIVE, Run.FAILED, finished_at=timezone.now(), error=error):
        log.warning("run %s failed: %s", run.pk, error)
        _after_change(run.experiment_id)
        return True
    return False


def _stop_failed_first_nodes() -> None:
    """Node 0 (here) of a run over several hosts that another node failed: stop its job, which
    would otherwise wait for the lost node until torchrun's timeout."""
    recent = timezone.now() - timedelta(hours=1)
    for run in Run.objects.filter(
        _this_host(), state=Run.FAILED, finished_at__gte=recent, nodes__isnull=False
    ).distinct():
        handle = _handle_of(run)
        if not handle:
            continue
        try:
            if executor_for(run.executor).poll(run.home, handle).state == "running":
                stop_job(run)
        except executors.ExecutorError as err:
            log.warning("run %s: cannot stop node 0 (%s)", run.pk, err)


def _last_error_line_in(home: Any) -> str:
    """The line of ``home``'s process.log that says what went wrong (else its last line)."""
    from pathlib import Path

    log_path = Path(home) / local.LOG
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines()]
    except OSError:
        return "no log was written"
    for line in reversed(lines):
        if line.startswith(("run failed:", "invalid spec:", "--out:")) or "Error" in line:
            return line[:500]
    return next((ln[:500] for ln in reversed(lines) if ln), "the log is empty")


def _last_error_line(run: Run) -> str:
    return _last_error_line_in(run.home)


def cancel_run(run: Run, by: str = "") -> bool:
    """Cancel a queued or running run: state first, then stop its process or container (with
    a grace period); its GPUs are released."""
    note = f"cancelled by {by}" if by else "cancelled"
    if not _transition(run.pk, Run.ACTIVE, Run.CANCELLED, finished_at=timezone.now(), error=note):
        return False
    run.refresh_from_db()
    if _stopped_by_its_host(run):
        # Its process or container lives on another host, or behind a Docker engine or Slurm
        # controller this process may not reach (the portal's web container has no Docker
        # socket): that host's worker stops it.
        from lab.runs.tasks import stop_run

        queue = f"host.{run.host}"
        transaction.on_commit(lambda: stop_run.apply_async(args=[run.pk], queue=queue))
    else:
        stop_job(run)
    _release_gpus(run)
    _after_change(run.experiment_id)
    return True


def _stopped_by_its_host(run: Run) -> bool:
    """Whether the run's host's worker (queue ``host.<name>``) must stop it: a registered
    host that is another machine, or whose executor is not a local process."""
    from lab.hosts.models import Host

    if not run.host or not Host.objects.filter(name=run.host).exists():
        return False  # no registered host to ask: stop it from here
    return run.host != settings.HOST_NAME or run.executor != "local"


def stop_job(run: Run) -> bool:
    """(On the run's host.) Stop a cancelled run's process, container or Slurm job, with
    ``LAB_STOP_GRACE_S`` between SIGTERM and a kill; False if there was nothing to stop."""
    handle = _handle_of(run)
    if not handle:
        return False
    try:
        return executor_for(run.executor).stop(run.home, handle, settings.STOP_GRACE_S)
    except executors.ExecutorError as err:
        log.warning("run %s: could not stop its job: %s", run.pk, err)
        return False


def cancel_experiment(experiment: Experiment, by: str = "") -> int:
    runs = list(experiment.runs.filter(state__in=Run.ACTIVE))
    return sum(cancel_run(run, by) for run in runs)


def _after_change(experiment_id: int) -> None:
    """Results changed: redraw the experiment's figures once the transaction commits; when its
    last run ended and a claim check or a night waits on it, settle them."""
    from lab.reports.tasks import settle

    transaction.on_commit(lambda: ask_render(experiment_id))
    if _awaited(experiment_id):
        transaction.on_commit(settle.delay)


def _awaited(experiment_id: int) -> bool:
    from lab.reports.models import ClaimCheck, NightlyRun

    if Run.objects.filter(experiment_id=experiment_id, state__in=Run.ACTIVE).exists():
        return False
    return (
        ClaimCheck.objects.filter(experiment_id=experiment_id, state=ClaimCheck.PENDING).exists()
        or NightlyRun.objects.filter(
            state=NightlyRun.RUNNING, experiments__id=experiment_id
        ).exists()
    )


def ask_render(experiment_id: int) -> None:
    """Have the experiment's figures redrawn: pending from now (``lab.measuring``)."""
    from lab.reports.tasks import render_figures

    measuring.mark_pending(experiment_id)
    render_figures.delay(experiment_id)


def _measuring_here() -> Run | None:
    """The real run running on this host, if any: its first node or, for a run over several
    hosts, a further node of it."""
    run = Run.objects.filter(_this_host(), state=Run.RUNNING, spec__mode="real").first()
    if run is None:
        node = _active_nodes().filter(host=settings.HOST_NAME).select_related("run").first()
        run = node.run if node is not None else None
    return run


def render_figures(experiment_id: int) -> list[str]:
    """Redraw the experiment's figures, unless a real run is measuring on this host: then the
    render waits (``lab.measuring``) and is asked for again once no real run runs here."""
    from lab.reports import figures

    asked = measuring.asked_at(experiment_id)
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None:
        measuring.done(experiment_id, asked)
        return []
    with measuring.drawing():
        run = _measuring_here()
        if run is not None:
            log.info("figures of experiment %s wait: real run %s is measuring on %s",
                     experiment_id, run.pk, settings.HOST_NAME)  # fmt: skip
            measuring.defer(experiment_id)
            return []
        try:
            return [str(p) for p in figures.render(experiment)]
        finally:
            measuring.done(experiment_id, asked)
