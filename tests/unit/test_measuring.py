"""A real run measures alone on its host: figures are drawn between real runs, never during
one (``lab.measuring``)."""

from __future__ import annotations

import os

import pytest

from lab import actions, measuring
from lab.reports import figures
from lab.reports import tasks as report_tasks
from lab.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def real_run(user, real_config) -> Run:
    return actions.create_experiment(user, real_config).runs.get()


@pytest.fixture
def asked(monkeypatch) -> list[int]:
    """The renders queued (the Celery task's ``delay``), recorded instead of sent."""
    calls: list[int] = []
    monkeypatch.setattr(report_tasks.render_figures, "delay", calls.append)
    return calls


def test_a_real_run_waits_for_the_figures_asked_for_before_it(real_run, user, config, asked):
    sim = actions.create_experiment(user, config)
    actions.ask_render(sim.pk)  # what a run's end asks for
    assert asked == [sim.pk] and list(measuring.pending()) == [sim.pk]
    assert not actions.launch_run(real_run.pk)
    real_run.refresh_from_db()
    assert real_run.state == Run.QUEUED
    actions.render_figures(sim.pk)  # the task: nothing measures here, so it draws
    assert measuring.pending() == {}
    assert actions.launch_run(real_run.pk)
    real_run.refresh_from_db()
    assert real_run.state == Run.RUNNING
    actions.cancel_run(real_run, "test")


def test_a_simulated_run_does_not_wait_for_figures(user, config, asked):
    sim = actions.create_experiment(user, config)
    actions.ask_render(sim.pk)
    run = sim.runs.first()
    assert actions.launch_run(run.pk)
    actions.cancel_run(run, "test")


def test_a_real_run_is_not_launched_while_figures_are_being_drawn(real_run):
    with measuring.drawing():  # a render (or a claim's figure) drawing now, in another worker
        assert not actions.launch_run(real_run.pk)
    assert actions.launch_run(real_run.pk)
    real_run.refresh_from_db()
    actions.cancel_run(real_run, "test")


def test_a_render_pending_for_too_long_no_longer_holds_up_the_queue(real_run, asked):
    actions.ask_render(999)
    old = measuring._pending_dir() / "999"
    os.utime(old, (old.stat().st_mtime - measuring.WAIT_S - 1,) * 2)  # its task was lost
    assert measuring.blocking() == [] and measuring.retry() == [999]
    assert actions.launch_run(real_run.pk)
    actions.cancel_run(real_run, "test")


def test_a_render_asked_for_while_a_real_run_measures_waits_and_is_asked_again(
    real_run, user, config, asked, monkeypatch, settings
):
    drawn: list[int] = []
    monkeypatch.setattr(figures, "render", lambda experiment: drawn.append(experiment.pk) or [])
    Run.objects.filter(pk=real_run.pk).update(state=Run.RUNNING, host=settings.HOST_NAME)
    sim = actions.create_experiment(user, config)
    actions.ask_render(sim.pk)
    assert actions.render_figures(sim.pk) == [] and drawn == []  # waits for the real run
    assert sim.pk in measuring.pending() and measuring.blocking() == []
    actions.reconcile()  # the real run still runs (as far as this test's records go)...
    assert asked == [sim.pk]  # ...so the render is not asked for again
    Run.objects.filter(pk=real_run.pk).update(state=Run.CANCELLED)
    actions.reconcile()  # no real run here now: asked again, and pending as of now
    assert asked == [sim.pk, sim.pk] and measuring.blocking() == [sim.pk]
    actions.render_figures(sim.pk)
    assert drawn == [sim.pk] and measuring.pending() == {}


def test_a_render_asked_for_again_while_drawing_stays_pending(user, config, asked, monkeypatch):
    sim = actions.create_experiment(user, config)

    def render(experiment):  # another run of the experiment ends while its figures are drawn
        marker = measuring._pending_dir() / str(experiment.pk)
        os.utime(marker, (marker.stat().st_mtime + 1,) * 2)
        return []

    monkeypatch.setattr(figures, "render", render)
    actions.ask_render(sim.pk)
    actions.render_figures(sim.pk)
    assert list(measuring.pending()) == [sim.pk]  # the second render is still owed


def test_the_page_of_a_real_experiment_under_way_says_its_figures_wait(
    real_run, user, config, client
):
    client.force_login(user)
    url = f"/experiments/{real_run.experiment_id}/"
    for state, said in ((Run.QUEUED, True), (Run.RUNNING, True), (Run.SUCCEEDED, False)):
        Run.objects.filter(pk=real_run.pk).update(state=state)
        assert ('id="figures-between-runs"' in client.get(url).content.decode()) is said, state
    sim = actions.create_experiment(user, config)
    assert 'id="figures-between-runs"' not in client.get(f"/experiments/{sim.pk}/").content.decode()


def test_a_render_waits_for_a_further_node_of_a_real_run_on_this_host(
    real_run, user, config, asked, monkeypatch, settings
):
    """A run over several hosts: its first node elsewhere, a further node here."""
    from lab.runs.models import RunNode

    drawn: list[int] = []
    monkeypatch.setattr(figures, "render", lambda experiment: drawn.append(experiment.pk) or [])
    Run.objects.filter(pk=real_run.pk).update(state=Run.RUNNING, host="elsewhere")
    sim = actions.create_experiment(user, config)
    actions.render_figures(sim.pk)
    assert drawn == [sim.pk]  # nothing of the real run here
    real_run.refresh_from_db()
    RunNode.objects.create(
        run=real_run, rank=1, attempt=real_run.attempt, rendezvous="elsewhere:29500",
        host=settings.HOST_NAME,
    )  # fmt: skip
    actions.ask_render(sim.pk)
    assert actions.render_figures(sim.pk) == [] and drawn == [sim.pk]  # waits for the node
