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
from django.utils import timezone

from lab.experiments.models import Experiment
from lab.results.ingest import ingest_run
from lab.runs.models import CONDITION_KEYS, Run
from runners import registry
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
        """The cluster of every point of the sweep (just ``cluster`` without one)."""
        points = [dict(self.cluster)]
        for key in CONDITION_KEYS:  # the fields an experiment may sweep
            for_key = self.sweep.get(key)
            if for_key:
                points = [{**p, key: value} for p in points for value in for_key]
        return points

    def raw_specs(self) -> list[dict[str, Any]]:
        """One run spec per entry x workload x sweep point x seed; params apply to the system
        only. A cluster-arena system has no workloads: its trace is ``cluster["trace"]``."""
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
    from lab.runs.tasks import launch_run

    for run_id in run_ids:
        launch_run.delay(run_id)


# -- running ----------------------------------------------------------------------------------
def _transition(run_id: int, sources: tuple[str, ...], target: str, **fields: Any) -> bool:
    """Move a run from one of ``sources`` to ``target``; False if another actor got there."""
    return Run.objects.filter(pk=run_id, state__in=sources).update(state=target, **fields) == 1


def launch_run(run_id: int) -> bool:
    """Start a queued run as a detached process if a slot is free. Idempotent."""
    running = Run.objects.filter(state=Run.RUNNING)
    if running.count() >= settings.MAX_PARALLEL_RUNS:
        return False  # the reconciler launches it when a slot frees up
    # A real run trains on this machine's cores and network: it runs alone, so that no other
    # run disturbs the times it measures (and it disturbs no simulation's).
    if running.filter(spec__mode="real").exists():
        return False
    if running.exists() and Run.objects.filter(pk=run_id, spec__mode="real").exists():
        return False
    if not _transition(
        run_id,
        (Run.QUEUED,),
        Run.RUNNING,
        started_at=timezone.now(),
        pid=None,
        pid_start_ticks=None,
        executor="local",
    ):
        return False
    run = Run.objects.get(pk=run_id)
    try:
        _prepare_home(run)
        handle = local.launch(run.home, python=settings.RUNNER_PYTHON or sys.executable)
    except Exception as err:  # could not even start: the run fails with the reason
        log.exception("launch of run %s failed", run_id)
        _fail(run, f"could not launch: {type(err).__name__}: {err}")
        return False
    recorded = Run.objects.filter(pk=run_id, state=Run.RUNNING).update(
        pid=handle.pid, pid_start_ticks=handle.start_ticks
    )
    if not recorded:  # cancelled while we were starting it
        local.stop(handle)
        return False
    log.info("run %s launched as pid %s", run_id, handle.pid)
    return True


def _prepare_home(run: Run) -> None:
    """Fresh folder for this attempt; an earlier attempt's folder is kept beside it."""
    home = run.home
    if home.exists():
        home.rename(home.with_name(f"{home.name}.attempt-{run.attempt - 1}-{_stamp()}"))
    home.mkdir(parents=True)
    (home / local.SPEC).write_text(json.dumps(run.spec, indent=2, sort_keys=True))


def _stamp() -> str:
    return timezone.now().strftime("%Y%m%dT%H%M%S%f")


def reconcile() -> dict[str, int]:
    """Periodic: bring running runs' states up to date, then start queued runs in free slots."""
    counts = {"finished": 0, "requeued": 0, "launched": 0}
    grace = timedelta(seconds=settings.LAUNCH_GRACE_S)
    for run in Run.objects.filter(state=Run.RUNNING):
        if run.pid is None:
            if run.started_at and timezone.now() - run.started_at > grace:
                counts["requeued"] += _requeue_or_fail(run, "launch did not complete")
            continue
        status = local.poll(run.home, local.Handle(run.pid, run.pid_start_ticks))
        if status.state == "exited":
            finish_run(run, status.exit_code)
            counts["finished"] += 1
        elif status.state == "lost":
            reason = "the run's process vanished without an exit code (restart or kill -9)"
            counts["requeued"] += _requeue_or_fail(run, reason)
    free = settings.MAX_PARALLEL_RUNS - Run.objects.filter(state=Run.RUNNING).count()
    if free > 0:
        queued = Run.objects.filter(state=Run.QUEUED).order_by("created_at", "id")
        for run_id, mode in queued.values_list("pk", "spec__mode")[:free]:
            launched = launch_run(run_id)
            counts["launched"] += launched
            if not launched and mode == "real":
                break  # the oldest waiting run needs the machine alone: let it drain
    return counts


def _requeue_or_fail(run: Run, reason: str) -> int:
    if run.attempt < settings.MAX_RUN_ATTEMPTS:
        requeued = _transition(
            run.pk,
            (Run.RUNNING,),
            Run.QUEUED,
            attempt=run.attempt + 1,
            pid=None,
            pid_start_ticks=None,
            error=f"attempt {run.attempt}: {reason}; re-queued",
        )
        log.warning("run %s: %s; re-queued", run.pk, reason)
        return int(requeued)
    _fail(run, f"{reason} (after {run.attempt} attempts)")
    return 0


def finish_run(run: Run, exit_code: int | None) -> None:
    """Record the end of a run: ingest its results if it succeeded, else keep the error."""
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
        _after_change(run.experiment_id)
        return
    _fail(run, f"exit code {exit_code}: {_last_error_line(run)}")


def _fail(run: Run, error: str) -> None:
    if _transition(run.pk, Run.ACTIVE, Run.FAILED, finished_at=timezone.now(), error=error):
        log.warning("run %s failed: %s", run.pk, error)
        _after_change(run.experiment_id)


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
    """Cancel a queued or running run: state first, then stop its process group."""
    note = f"cancelled by {by}" if by else "cancelled"
    if not _transition(run.pk, Run.ACTIVE, Run.CANCELLED, finished_at=timezone.now(), error=note):
        return False
    if run.pid:
        local.stop(local.Handle(run.pid, run.pid_start_ticks))
    _after_change(run.experiment_id)
    return True


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
