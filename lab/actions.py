"""Every state change of experiments and runs goes through here.

Views, API, Celery tasks, management commands and tests call these functions; nothing else
writes ``Run.state``. Transitions are conditional updates (``UPDATE ... WHERE state IN ...``), so
two workers racing on the same run cannot both win, and every function is safe to call twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from lab.experiments.models import Experiment
from lab.results.ingest import ingest_run
from lab.runs.models import CONDITION_KEYS, Run
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
    to its reconcile, which finds them again after any restart."""
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
            f"worker there and re-run the experiment (a job left running there is not "
            f"stopped)",
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
    for) are free. Idempotent: only one host and one worker can move it out of queued."""
    running = Run.objects.filter(_this_host(), state=Run.RUNNING)
    if running.count() >= settings.MAX_PARALLEL_RUNS:
        return False  # the reconciler launches it when a slot frees up
    # A real run trains on this machine's cores and network: it runs alone, so that no other
    # run disturbs the times it measures (and it disturbs no simulation's).
    if running.filter(spec__mode="real").exists():
        return False
    run = Run.objects.filter(pk=run_id, state=Run.QUEUED).first()
    if run is None or (running.exists() and run.spec.get("mode") == "real"):
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
    # Only the one actor that moved the run claims its GPUs (claims belong to the run, so a
    # loser releasing "its" claims would release the winner's).
    gpus = _claim_gpus(run)
    if gpus is None:  # not enough free GPUs here now: back to waiting
        _transition(run_id, (Run.RUNNING,), Run.QUEUED, started_at=None, host="")
        return False
    run.refresh_from_db()
    executor = executor_for(run.executor)
    try:
        _prepare_home(run)
        handle = executor.launch(run.home, run.pk, _resources(run, gpus))
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
    return True


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
    grace = timedelta(seconds=settings.LAUNCH_GRACE_S)
    for run in Run.objects.filter(_this_host(), state=Run.RUNNING):
        executor = executor_for(run.executor)
        handle = _handle_of(run)
        if not handle:
            # The worker may have died between starting the job and recording it.
            found = executor.find(run.pk)
            if found:
                Run.objects.filter(pk=run.pk, state=Run.RUNNING).update(handle=found)
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
        if status.state == "exited":
            finish_run(run, status.exit_code, status.reason)
            counts["finished"] += 1
        elif status.state == "lost":
            reason = status.reason or (
                "the run's process vanished without an exit code (restart or kill -9)"
            )
            counts["requeued"] += _requeue_or_fail(run, reason)
    _refresh_gpus()
    _seen()
    free = settings.MAX_PARALLEL_RUNS - Run.objects.filter(_this_host(), state=Run.RUNNING).count()
    if free > 0:
        queued = Run.objects.filter(state=Run.QUEUED).order_by("created_at", "id")
        for run_id, mode in queued.values_list("pk", "spec__mode")[: free + 16]:
            launched = launch_run(run_id)
            counts["launched"] += launched
            if not launched and mode == "real":
                break  # the oldest waiting run needs the machine alone: let it drain
            if counts["launched"] >= free:
                break
    return counts


def _seen() -> None:
    from lab.hosts.models import Host

    Host.objects.filter(name=settings.HOST_NAME).update(last_seen=timezone.now())


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


def _last_error_line(run: Run) -> str:
    log_path = run.home / local.LOG
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines()]
    except OSError:
        return "no log was written"
    for line in reversed(lines):
        if line.startswith(("run failed:", "invalid spec:", "--out:")) or "Error" in line:
            return line[:500]
    return next((ln[:500] for ln in reversed(lines) if ln), "the log is empty")


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
    from lab.reports.tasks import render_figures, settle

    transaction.on_commit(lambda: render_figures.delay(experiment_id))
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


def render_figures(experiment_id: int) -> list[str]:
    from lab.reports import figures

    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None:
        return []
    return [str(p) for p in figures.render(experiment)]
