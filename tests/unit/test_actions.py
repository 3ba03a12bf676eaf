"""The actions layer: every state change of experiments and runs, with real subprocess runs."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from django.test import override_settings

from lab import actions
from lab.experiments.models import Experiment
from lab.results.models import Artifact, Measurement
from lab.runs.models import Run
from runners.executors import local
from runners.spec import SpecError
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db


def slow(config):
    """A run that lasts long enough to be cancelled while it runs."""
    return dataclasses.replace(
        config, workloads=("vgg16",), seeds=(0,), iterations=100_000, cluster={"workers": 64}
    )


def finish_all(experiment: Experiment, timeout_s: float = 60) -> list[Run]:
    """Reconcile until no run is active (what the beat task does every few seconds)."""

    def done() -> bool:
        actions.reconcile()
        return not experiment.runs.filter(state__in=Run.ACTIVE).exists()

    wait_for(done, timeout_s, what="runs to finish")
    return list(experiment.runs.all())


def test_it_creates_one_run_per_entry_workload_and_seed(user, config):
    experiment = actions.create_experiment(user, config)
    runs = list(experiment.runs.all())
    assert len(runs) == 2 * 1 * 2
    assert {(r.system, r.seed) for r in runs} == {
        ("bytescheduler", 0),
        ("bytescheduler", 1),
        ("wfbp", 0),
        ("wfbp", 1),
    }
    assert all(r.state == Run.QUEUED for r in runs)
    by_system = {r.system: r.spec for r in runs}
    assert by_system["bytescheduler"]["params"]["credit_bytes"] == 100_000
    assert by_system["wfbp"]["params"] == {}  # system parameters never leak into baselines
    assert by_system["wfbp"]["labels"] == {"experiment": experiment.pk}


def test_it_stores_nothing_when_any_run_would_be_invalid(user, config):
    bad = actions.ExperimentConfig(**{**config.__dict__, "cluster": {"workers": 0}})
    with pytest.raises(SpecError) as err:
        actions.create_experiment(user, bad)
    assert err.value.field == "cluster.workers"
    assert not Experiment.objects.exists()
    assert not Run.objects.exists()


def test_a_run_goes_from_queued_to_succeeded_with_its_results_ingested(user, config):
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    assert actions.launch_run(run.pk)
    run.refresh_from_db()
    assert run.state == Run.RUNNING and run.pid and run.started_at
    assert not actions.launch_run(run.pk), "launching twice must be a no-op"
    runs = finish_all(experiment)
    assert {r.state for r in runs} == {Run.SUCCEEDED}
    run.refresh_from_db()
    metrics = dict(Measurement.objects.filter(run=run).values_list("metric", "value"))
    assert metrics["iteration_time_s"] > 0
    assert Measurement.objects.get(run=run, metric="iteration_time_s").unit == "s"
    kinds = set(Artifact.objects.filter(run=run).values_list("kind", flat=True))
    assert kinds == {"timeline", "series"}
    assert (run.run_dir / "summary.json").exists()
    assert run.finished_at >= run.started_at


def test_a_crashing_run_ends_failed_with_its_log_and_error_kept(user, config):
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    run.spec = {**run.spec, "cluster": {**run.spec["cluster"], "workers": -1}}
    run.save(update_fields=["spec"])
    finish_all(experiment)
    run.refresh_from_db()
    assert run.state == Run.FAILED
    assert run.error.startswith("exit code 2")
    assert "cluster.workers" in run.error
    assert "cluster.workers" in (run.home / local.LOG).read_text()
    assert not Measurement.objects.filter(run=run).exists()


def test_cancelling_a_queued_run_keeps_it_from_starting(user, config):
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    assert actions.cancel_run(run, by="alice")
    assert not actions.launch_run(run.pk)
    run.refresh_from_db()
    assert run.state == Run.CANCELLED and run.error == "cancelled by alice"
    assert not actions.cancel_run(run), "a finished run cannot be cancelled again"


def test_cancelling_a_running_run_stops_its_process(user, config):
    experiment = actions.create_experiment(user, slow(config))
    run = experiment.runs.get(system="wfbp")
    assert actions.launch_run(run.pk)
    run.refresh_from_db()
    handle = local.Handle(run.pid, run.pid_start_ticks)
    assert local.poll(run.home, handle).state == "running"
    assert actions.cancel_run(run)
    wait_for(lambda: local.poll(run.home, handle).state != "running", 20, what="process to stop")
    actions.reconcile()
    run.refresh_from_db()
    assert run.state == Run.CANCELLED
    assert not (run.run_dir / "summary.json").exists()


def test_cancelling_an_experiment_cancels_every_active_run(user, config):
    experiment = actions.create_experiment(user, config)
    assert actions.cancel_experiment(experiment) == 4
    assert experiment.status == Run.CANCELLED


@override_settings(MAX_PARALLEL_RUNS=1)
def test_it_never_runs_more_than_the_allowed_number_of_runs_at_once(user, config):
    experiment = actions.create_experiment(user, config)
    ids = list(experiment.runs.values_list("pk", flat=True))
    assert actions.launch_run(ids[0])
    assert not actions.launch_run(ids[1])
    assert Run.objects.filter(state=Run.RUNNING).count() == 1
    assert {r.state for r in finish_all(experiment)} == {Run.SUCCEEDED}


@override_settings(MAX_PARALLEL_RUNS=1)
def test_a_night_s_runs_wait_behind_the_runs_people_queued(user, config):
    from lab.reports.models import ClaimCheck, NightlyRun

    night = NightlyRun.objects.create(trigger="manual")
    rerun = actions.create_experiment(user, config)  # the night's re-run of a nightly one
    night.experiments.add(rerun)
    check = actions.create_experiment(user, config)  # a claim check of the night
    ClaimCheck.objects.create(claim_id="c1", experiment=check, nightly=night)
    asked = actions.create_experiment(user, config)  # a claim check someone asked for
    ClaimCheck.objects.create(claim_id="c1", experiment=asked)
    mine = actions.create_experiment(user, config)  # queued last, while the night waits
    order = list(actions.queue_order().values_list("experiment_id", flat=True))
    assert order == [asked.pk] * 4 + [mine.pk] * 4 + [rerun.pk] * 4 + [check.pk] * 4
    try:
        assert actions.reconcile()["launched"] == 1
        assert Run.objects.get(state=Run.RUNNING).experiment_id == asked.pk
    finally:
        for experiment in (asked, mine, rerun, check):
            actions.cancel_experiment(experiment)
    assert not Run.objects.filter(state__in=Run.ACTIVE).exists()


def test_a_run_whose_process_vanished_is_requeued_then_succeeds(user, config):
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    # As after a machine restart: the database says running, but no such process exists.
    Run.objects.filter(pk=run.pk).update(state=Run.RUNNING, pid=2**22 + 12345, pid_start_ticks=1)
    run.home.mkdir(parents=True)
    (run.home / "process.log").write_text("partial output of attempt 1\n")
    counts = actions.reconcile()
    assert counts["requeued"] == 1
    run.refresh_from_db()
    assert run.attempt == 2
    assert "vanished" in run.error
    finish_all(experiment)
    run.refresh_from_db()
    assert run.state == Run.SUCCEEDED
    kept = list(run.home.parent.glob(f"{run.pk}.attempt-1-*"))
    assert len(kept) == 1 and (kept[0] / "process.log").read_text().startswith("partial")


@override_settings(MAX_RUN_ATTEMPTS=1)
def test_a_vanished_run_fails_after_its_last_attempt(user, config):
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    Run.objects.filter(pk=run.pk).update(state=Run.RUNNING, pid=2**22 + 12345)
    actions.reconcile()
    run.refresh_from_db()
    assert run.state == Run.FAILED
    assert "after 1 attempts" in run.error


def test_a_launch_that_never_recorded_its_process_is_requeued(user, config, settings):
    settings.LAUNCH_GRACE_S = 0.0
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    Run.objects.filter(pk=run.pk).update(
        state=Run.RUNNING, pid=None, started_at="2020-01-01T00:00:00Z"
    )
    assert actions.reconcile()["requeued"] == 1


def test_a_launch_whose_worker_died_before_recording_the_process_is_adopted(
    user, config, settings, caplog
):
    """The worker started the job, then was killed before it wrote the handle: the
    reconciler finds the job from its home and follows it; nothing is launched twice."""
    settings.LAUNCH_GRACE_S = 0.0
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    Run.objects.filter(pk=run.pk).update(
        state=Run.RUNNING, pid=None, handle="", started_at="2020-01-01T00:00:00Z"
    )
    run.refresh_from_db()
    actions._prepare_home(run)
    started = local.launch(run.home)
    wait_for(lambda: local.find(run.home) is not None, 10, what="the job to record its pid")

    assert actions.reconcile()["requeued"] == 0
    run.refresh_from_db()
    assert run.handle == local.format_handle(started) or run.state == Run.SUCCEEDED
    assert f"run {run.pk}: its job" in caplog.text and "adopted" in caplog.text
    finish_all(experiment)
    run.refresh_from_db()
    assert (run.state, run.attempt) == (Run.SUCCEEDED, 1)
    assert not list(run.home.parent.glob(f"{run.pk}.attempt-*"))


def test_rerun_copies_the_definition_and_queues_new_runs(user, config):
    first = actions.create_experiment(user, config)
    second = actions.rerun_experiment(first, user)
    assert second.pk != first.pk and second.rerun_of == first
    assert second.name == "bs vs wfbp (re-run 1)"
    assert second.runs.count() == first.runs.count()
    assert actions.ExperimentConfig.of(second).raw_specs() == config.raw_specs()


def test_experiment_status_combines_run_states():
    combined = Run.combined_state
    assert combined(["queued", "running", "succeeded"]) == "running"
    assert combined(["queued", "succeeded"]) == "queued"
    assert combined(["succeeded", "failed"]) == "failed"
    assert combined(["succeeded", "succeeded"]) == "succeeded"
    assert combined(["succeeded", "cancelled"]) == "cancelled"


def test_figures_are_drawn_from_succeeded_runs(user, config):
    experiment = actions.create_experiment(user, config)
    finish_all(experiment)
    paths = {p.rsplit("/", 1)[1] for p in actions.render_figures(experiment.pk)}
    assert {
        "data.csv",
        "comparison-iteration_time_s.png",
        "comparison-iteration_time_s.pdf",
        "comparison-iteration_time_s.svg",
    } <= paths


def test_signals_reach_the_whole_process_group(user, config):
    """Cancel stops the runner and its wrapper shell, not just one process."""
    experiment = actions.create_experiment(user, slow(config))
    run = experiment.runs.get(system="wfbp")
    actions.launch_run(run.pk)
    run.refresh_from_db()
    assert os.getpgid(run.pid) == run.pid  # the run leads its own process group
    actions.cancel_run(run)
    wait_for(lambda: _group_gone(run.pid), 20, what="process group to exit")


def _group_gone(pgid: int) -> bool:
    """No live (non-zombie) process is left in the group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return False
    return True
