"""Claim checks and nights: queueing, settling, history, regression alerts, expected changes,
environment drift, notification, the schedule and the Claims / Nightly pages. Runs are
finished by hand here (the queued path with a real worker and beat is in tests/integration)."""

from __future__ import annotations

import copy
import http.server
import json
import threading
from datetime import timedelta

import pytest
import yaml
from django.core import mail
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from lab import actions
from lab.reports import nightly as nights
from lab.reports import reproduce as reproduce_mod
from lab.reports.models import Alert, ClaimCheck, ExpectedChange, HistoryPoint, NightlyRun
from lab.results.models import Measurement
from lab.runs.models import Run
from tests.unit.test_claims import CLAIM

pytestmark = pytest.mark.django_db

REAL_ONLY = {**copy.deepcopy(CLAIM), "id": "real-only", "modes": ["real"]}


@pytest.fixture
def ledger(settings, tmp_path):
    path = tmp_path / "ledger.yaml"
    path.write_text(yaml.safe_dump([CLAIM, REAL_ONLY]))
    settings.CLAIMS_LEDGER = path
    return path


def _finish(experiment, times: dict[str, float]) -> None:
    """End every run of ``experiment`` as succeeded with the given iteration time per system
    (a little spread over seeds, so the statistics have something to test)."""
    for run in experiment.runs.all():
        value = times[run.system] * (1 + 0.01 * run.seed)
        Measurement.objects.create(run=run, metric="iteration_time_s", value=value, unit="s")
    experiment.runs.update(state=Run.SUCCEEDED, finished_at=timezone.now())


def test_a_check_is_pending_until_its_runs_end_then_judged_with_a_figure(ledger, user):
    claim = nights.claims_by_id()["pace-speedup"]
    check = nights.start_check(claim, "sim", user=user)
    assert check.state == ClaimCheck.PENDING and check.experiment.runs.count() == 6
    assert nights.settle()["judged"] == 0  # runs still queued
    _finish(check.experiment, {"pace": 0.6, "horovod": 1.0, "bytescheduler": 0.9})
    assert nights.settle()["judged"] == 1
    check.refresh_from_db()
    assert check.verdict == "reproduced"
    assert check.measured == pytest.approx(100 * (1.0 / 0.6 - 1), abs=0.5)  # percent faster
    assert set(check.per_condition) == {"horovod", "bytescheduler"}
    assert nights.claim_figure_path(check).read_bytes().startswith(b"\x89PNG")
    assert nights.settle()["judged"] == 0  # judged once


def test_a_claim_of_another_mode_is_not_run_at_once(ledger, user):
    check = nights.start_check(nights.claims_by_id()["real-only"], "sim", user=user)
    assert check.experiment is None and check.verdict == "not-run"
    assert "needs mode real" in check.line["reason"]


def test_a_night_checks_the_claims_reruns_nightly_experiments_and_records_history(
    ledger, user, config
):
    source = actions.create_experiment(user, config)
    source.nightly = True
    source.save()
    night = nights.start_night(trigger="manual")
    assert night.state == NightlyRun.RUNNING and night.manifest["packages"]["python"]
    (copy_,) = night.experiments.all()
    assert copy_.rerun_of == source and copy_.nightly is False and copy_.owner == user
    assert {c.claim_id: c.state for c in night.checks.all()} == {
        "pace-speedup": ClaimCheck.PENDING,
        "real-only": ClaimCheck.DONE,
    }
    check = night.checks.get(claim_id="pace-speedup")
    _finish(check.experiment, {"pace": 0.6, "horovod": 1.0, "bytescheduler": 0.9})
    assert nights.settle() == {"judged": 1, "finished": 0, "figures": 0}  # the nightly runs on
    _finish(copy_, {"bytescheduler": 0.5, "wfbp": 0.7})
    # one bytescheduler run measured beside other work (a real run's other_cores)
    beside = copy_.runs.filter(system="bytescheduler").first()
    Measurement.objects.create(run=beside, metric="other_cores", value=0.3, unit="cores")
    assert nights.settle()["finished"] == 1
    night.refresh_from_db()
    assert night.state == NightlyRun.DONE and night.finished_at
    assert night.summary["counts"]["reproduced"] == 1 and night.summary["counts"]["not-run"] == 1
    series = set(night.points.values_list("series", flat=True))
    assert "claim:pace-speedup:sim" in series
    assert f"exp:{source.pk}:bytescheduler:resnet50-debug:4:1.0:iteration_time_s" in series
    point = night.points.get(series="claim:pace-speedup:sim")
    assert point.finding["status"] == "insufficient-history"
    assert not night.alerts.exists()
    marked = [
        (p.series.split(":")[2], p.finding["other_cores"])
        for p in night.points.filter(series__startswith="exp:")
        if "other_cores" in p.finding
    ]
    assert marked == [("bytescheduler", pytest.approx(0.3))]  # its run's series, no other


def test_a_second_night_is_skipped_while_one_runs_and_beat_does_not_double_start(ledger):
    first = nights.start_night(trigger="beat")
    assert nights.start_night(trigger="beat") == first  # a redelivered beat task
    second = nights.start_night(trigger="manual")
    assert second.state == NightlyRun.SKIPPED and f"#{first.pk}" in second.note


def _night(
    claim: dict, measured: float, verdict: str = "reproduced", experiment=None
) -> NightlyRun:
    """A night whose one check was judged with ``measured`` (history without running), on
    ``experiment``'s runs where given."""
    night = NightlyRun.objects.create(trigger="manual")
    ClaimCheck.objects.create(
        claim_id=claim["id"],
        nightly=night,
        state=ClaimCheck.DONE,
        verdict=verdict,
        measured=measured,
        definition=claim,
        line={"reason": ""},
        experiment=experiment,
    )
    assert nights.finish_night(night)
    return night


def test_a_drop_raises_an_alert_noise_does_not_and_an_expected_change_resets_it(ledger):
    noise = [40.1, 39.8, 40.3, 39.9, 40.0, 40.2, 39.7, 40.1]
    for value in noise:
        _night(CLAIM, value)
    assert not Alert.objects.exists(), "noise alone must not alert"
    dropped = _night(CLAIM, 20.0, verdict="partial")
    kinds = set(dropped.alerts.values_list("kind", flat=True))
    assert kinds == {"point", "verdict"}
    assert "reproduced" in dropped.alerts.get(kind="verdict").message
    # Someone explains the change: the next nights at the new level start a fresh baseline.
    ExpectedChange.objects.create(
        series="claim:pace-speedup:sim", effective_at=dropped.started_at, note="new model"
    )
    after = _night(CLAIM, 20.2, verdict="partial")
    assert not after.alerts.exists()
    assert after.points.get().finding["status"] == "insufficient-history"
    history = nights.history("claim:pace-speedup:sim")
    assert [p.expected_change for p in history].count(True) == 1
    assert history[len(noise)].expected_change  # the annotated night starts the new regime


def test_an_alert_says_when_the_night_s_runs_were_measured_beside_other_work(ledger, user, config):
    """A point whose runs (real ones) had other work beside them on their host keeps the most
    of it in its finding, and its alert says the change may be that work's; a night whose runs
    were quiet, or under the flag, keeps nothing."""
    for value in [40.1, 39.8, 40.3, 39.9, 40.0, 40.2, 39.7, 40.1]:
        _night(CLAIM, value)
    experiment = actions.create_experiment(user, config)
    runs = list(experiment.runs.all())
    for run, cores in zip(runs, [0.05, 0.66, *[0.0] * len(runs)], strict=False):
        Measurement.objects.create(run=run, metric="other_cores", value=cores, unit="cores")
    night = _night(CLAIM, 20.0, "partial", experiment)
    point = night.points.get()
    assert point.finding["other_cores"] == pytest.approx(0.66)
    alert = night.alerts.get(kind="point")
    assert alert.message.endswith(
        "(tonight's runs were measured beside other work on their host, up to 0.66 cores: the "
        "change may be that work's, not the code's)"
    )
    Measurement.objects.filter(metric="other_cores", value__gt=0.5).update(value=0.09)
    quiet = _night(CLAIM, 20.0, "partial", experiment)
    assert "other_cores" not in quiet.points.get().finding
    assert all("other work" not in a.message for a in quiet.alerts.all())


def test_environment_drift_is_a_diff_of_manifests():
    before = {"code": {"commit": "a", "dirty": False}, "packages": {"torch": "2.12"}, "gpus": []}
    after = {"code": {"commit": "b", "dirty": False}, "packages": {"torch": "2.13"},
             "gpus": [{"name": "H100"}]}  # fmt: skip
    assert nights.manifest_diff(before, after) == [
        {"key": "code.commit", "before": "a", "after": "b"},
        {"key": "gpus[0].name", "before": None, "after": "H100"},
        {"key": "packages.torch", "before": "2.12", "after": "2.13"},
    ]
    assert nights.manifest_diff(before, before) == []


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # http.server's name
        length = int(self.headers["Content-Length"])
        _Hook.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_alerts_are_sent_by_email_and_webhook_and_failures_are_recorded(ledger, settings):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.NIGHTLY_EMAIL = ["lab@example.org"]
    settings.NIGHTLY_WEBHOOK = f"http://127.0.0.1:{server.server_port}/hook"
    try:
        night = _night(CLAIM, 30.0)
        assert nights.notify(night.pk) == {"skipped": "no alerts (LAB_NIGHTLY_NOTIFY=alerts)"}
        Alert.objects.create(nightly=night, series="s", label="claim x", kind="point", message="m")
        sent = nights.notify(night.pk)
        assert sent == {"email": ["lab@example.org"], "webhook": 204}
        (message,) = mail.outbox
        assert "1 alert" in message.subject and "claim x" in message.body
        body = _Hook.received[-1]
        assert body["night"] == night.pk and body["alerts"][0]["series"] == "claim x"
        assert body["verdicts"] == {"pace-speedup": "reproduced"}
    finally:
        server.shutdown()
    settings.NIGHTLY_WEBHOOK = f"http://127.0.0.1:{server.server_port}/gone"
    sent = nights.notify(night.pk)
    assert "webhook_error" in sent
    night.refresh_from_db()
    assert night.notified == sent


def test_the_schedule_exists_and_edits_are_validated(ledger):
    task = nights.ensure_schedule()
    assert task.task == "lab.reports.tasks.nightly" and task.enabled
    assert nights.cron_text(task.crontab) == "30 2 * * *"
    nights.update_schedule("15 3 * * 1-5", enabled=False, claims=["pace-speedup"])
    task = PeriodicTask.objects.get(name=nights.SCHEDULE_NAME)
    assert nights.cron_text(task.crontab) == "15 3 * * 1-5" and not task.enabled
    assert json.loads(task.kwargs) == {"mode": "sim", "claims": ["pace-speedup"]}
    with pytest.raises(ValueError, match="hour"):
        nights.update_schedule("0 25 * * *", enabled=True, claims=None)
    with pytest.raises(ValueError, match="5 fields"):
        nights.update_schedule("nightly", enabled=True, claims=None)
    with pytest.raises(ValueError, match="not in the ledger: nope"):
        nights.update_schedule("0 1 * * *", enabled=True, claims=["nope"])


def test_the_claims_page_shows_claimed_measured_rule_figure_and_runs(client, ledger, user):
    client.force_login(user)
    check = nights.start_check(nights.claims_by_id()["pace-speedup"], "sim", user=user)
    page = client.get(reverse("claims")).content.decode()
    assert "Verdict rule" in page and "checking" in page and 'data-active="true"' in page
    _finish(check.experiment, {"pace": 0.6, "horovod": 1.0, "bytescheduler": 0.9})
    nights.settle()
    page = client.get(reverse("claims-live")).content.decode()
    assert 'data-active="false"' in page and "reproduced" in page and ">36.0%<" in page
    assert reverse("claim-figure", args=[check.pk]) in page
    assert check.experiment.get_absolute_url() in page
    assert client.get(reverse("claim-figure", args=[check.pk]))["Content-Type"] == "image/png"
    response = client.post(reverse("claim-reproduce", args=["pace-speedup"]), {"mode": "sim"})
    assert response.status_code == 302 and ClaimCheck.objects.filter(state="pending").count() == 1
    response = client.post(reverse("claim-reproduce", args=["real-only"]), {"mode": "sim"})
    assert ClaimCheck.objects.count() == 2  # refused: the claim is real-only
    assert client.post(reverse("claim-reproduce", args=["nope"])).status_code == 404


def test_a_claim_checked_on_runs_beside_other_work_says_so(client, ledger, user):
    """A check whose runs (real ones) had other work beside them: its line keeps the most of
    it and the Claims page says the measured value may be that work's; a quiet check not."""
    client.force_login(user)
    check = nights.start_check(nights.claims_by_id()["pace-speedup"], "sim", user=user)
    _finish(check.experiment, {"pace": 0.6, "horovod": 1.0, "bytescheduler": 0.9})
    run = check.experiment.runs.filter(system="pace").first()
    Measurement.objects.create(run=run, metric="other_cores", value=0.42, unit="cores")
    nights.settle()
    check.refresh_from_db()
    assert check.line["other_cores"] == pytest.approx(0.42)
    page = " ".join(client.get(reverse("claims-live")).content.decode().split())
    assert (
        "its runs were measured beside other work on their host (up to 0.42 cores): the "
        "measured value may be that work's" in page
    )
    quiet = nights.start_check(nights.claims_by_id()["pace-speedup"], "sim", user=user)
    _finish(quiet.experiment, {"pace": 0.6, "horovod": 1.0, "bytescheduler": 0.9})
    nights.settle()
    quiet.refresh_from_db()
    assert "other_cores" not in quiet.line


def test_a_figure_missing_after_the_verdict_is_drawn_by_settle_and_awaited_by_the_page(
    client, ledger, user, monkeypatch
):
    """A worker that stopped between the verdict and the figure (here: drawing that failed
    once) owes the figure: the Claims page keeps polling and the next settle draws it; a check
    judged longer ago than the grace is not retried."""
    client.force_login(user)
    check = nights.start_check(nights.claims_by_id()["pace-speedup"], "sim", user=user)
    _finish(check.experiment, {"pace": 0.6, "horovod": 1.0, "bytescheduler": 0.9})
    draw = nights.draw_claim_figure

    def broken(*args):
        raise RuntimeError("the worker stopped here")

    monkeypatch.setattr(nights, "draw_claim_figure", broken)
    assert nights.settle() == {"judged": 1, "finished": 0, "figures": 0}
    check.refresh_from_db()
    assert check.verdict == "reproduced" and not nights.claim_figure_path(check).exists()
    assert nights.figure_owed(check)
    page = client.get(reverse("claims-live")).content.decode()
    assert 'data-active="true"' in page and "reproduced" in page  # the figure is awaited
    assert reverse("claim-figure", args=[check.pk]) not in page
    monkeypatch.setattr(nights, "draw_claim_figure", draw)
    # left to the worker that judged it for a while (it draws right after the verdict)
    assert nights.settle()["figures"] == 0 and not nights.claim_figure_path(check).exists()
    earlier = timezone.now() - nights.FIGURE_DRAWER_TIME - timedelta(seconds=1)
    ClaimCheck.objects.filter(pk=check.pk).update(judged_at=earlier)
    assert nights.settle() == {"judged": 0, "finished": 0, "figures": 1}
    assert nights.claim_figure_path(check).read_bytes().startswith(b"\x89PNG")
    page = client.get(reverse("claims-live")).content.decode()
    assert 'data-active="false"' in page and reverse("claim-figure", args=[check.pk]) in page
    assert nights.settle()["figures"] == 0  # drawn once
    # Past the grace: neither drawn again nor awaited.
    nights.claim_figure_path(check).unlink()
    earlier = timezone.now() - nights.FIGURE_GRACE - timedelta(seconds=1)
    ClaimCheck.objects.filter(pk=check.pk).update(judged_at=earlier)
    check.refresh_from_db()
    assert not nights.figure_owed(check) and nights.settle()["figures"] == 0
    assert 'data-active="false"' in client.get(reverse("claims-live")).content.decode()


def test_the_nightly_page_schedule_form_is_staff_only_and_validated(client, ledger, user, staff):
    client.force_login(user)
    page = client.get(reverse("nightly")).content.decode()
    assert "30 2 * * *" in page and "Save schedule" not in page
    client.post(reverse("nightly-schedule"), {"cron": "0 4 * * *", "enabled": "on"})
    assert nights.cron_text(nights.ensure_schedule().crontab) == "30 2 * * *"
    client.force_login(staff)
    response = client.post(reverse("nightly-schedule"), {"cron": "0 99 * * *"}, follow=True)
    assert "Schedule not changed: cron hour" in response.content.decode()
    client.post(reverse("nightly-schedule"), {"cron": "0 4 * * *", "enabled": "on"})
    assert nights.cron_text(nights.ensure_schedule().crontab) == "0 4 * * *"
    response = client.post(reverse("nightly-run-now"))
    night = NightlyRun.objects.get()
    assert response.url == night.get_absolute_url() and night.trigger == "manual"
    assert "pace-speedup" in client.get(night.get_absolute_url()).content.decode()


def test_history_plot_alerts_and_expected_change_from_the_page(client, ledger, user):
    client.force_login(user)
    for value in [40.0, 40.1, 39.9, 40.0, 40.2, 39.8]:
        _night(CLAIM, value)
    night = _night(CLAIM, 10.0, verdict="partial")
    alert = night.alerts.get(kind="point")
    page = client.get(reverse("nightly")).content.decode()
    assert f'id="alert-{alert.pk}"' in page and "history of pace-speedup" in page
    png = client.get(reverse("nightly-history-png"), {"series": "claim:pace-speedup:sim"})
    assert png.content.startswith(b"\x89PNG")
    assert client.get(reverse("nightly-history-png"), {"series": "nope"}).status_code == 404
    response = client.post(
        reverse("nightly-expected"),
        {"series": alert.series, "alert": alert.pk, "note": "", "effective_at": ""},
    )
    assert not ExpectedChange.objects.exists()  # a note is required
    client.post(
        reverse("nightly-expected"),
        {"series": alert.series, "alert": alert.pk, "note": "faster model",
         "effective_at": timezone.localtime(night.started_at).strftime("%Y-%m-%d %H:%M")},
    )  # fmt: skip
    alert.refresh_from_db()
    assert alert.state == Alert.CLOSED and "faster model" in alert.close_note
    change = ExpectedChange.objects.get()
    assert change.created_by == user and change.effective_at <= night.started_at
    other = night.alerts.get(kind="verdict")
    client.post(reverse("alert-close", args=[other.pk]))
    assert Alert.objects.filter(state=Alert.OPEN).count() == 0
    assert response.status_code == 302


def test_marking_an_experiment_nightly_is_for_its_owner(client, user, config, django_user_model):
    experiment = actions.create_experiment(user, config)
    url = reverse("experiment-nightly", args=[experiment.pk])
    other = django_user_model.objects.create_user("bob", password="b" * 12)
    client.force_login(other)
    client.post(url, {"nightly": "1"})
    experiment.refresh_from_db()
    assert not experiment.nightly
    client.force_login(user)
    assert client.post(url, {"nightly": "maybe"}).status_code == 400
    client.post(url, {"nightly": "1"})
    experiment.refresh_from_db()
    assert experiment.nightly
    assert actions.rerun_experiment(experiment, user).nightly is False


def test_settle_gives_up_on_a_night_past_its_timeout(ledger):
    night = nights.start_night(trigger="manual")
    NightlyRun.objects.filter(pk=night.pk).update(started_at=timezone.now() - timedelta(hours=13))
    assert nights.settle(timeout=timedelta(hours=12)) == {"judged": 1, "finished": 1, "figures": 0}
    check = night.checks.get(claim_id="pace-speedup")
    assert check.verdict == "not-run" and "did not end within" in check.line["reason"]
    assert HistoryPoint.objects.count() == 0


def test_the_api_carries_the_noise_groups_of_the_ps_arena(client, user):
    from lab.accounts.models import ApiToken

    auth = {"HTTP_AUTHORIZATION": f"Token {ApiToken.issue(user)}"}
    body = {
        "name": "noise", "system": "tictac-tic", "baselines": ["ps-default"],
        "workloads": ["resnet50-debug"], "seeds": [0], "iterations": 3,
        "cluster": {"workers": 4, "jitter_groups": 4},
    }  # fmt: skip
    response = client.post(
        reverse("api-experiments"), body, content_type="application/json", **auth
    )
    assert response.status_code == 201, response.content
    run = Run.objects.filter(system="tictac-tic").get()
    assert run.spec["cluster"]["jitter_groups"] == 4
    body["cluster"]["jitter_groups"] = 9
    response = client.post(
        reverse("api-experiments"), body, content_type="application/json", **auth
    )
    assert response.status_code == 400 and "cluster.jitter_groups" in response.json()["errors"]


def test_reproduce_says_a_claim_was_checked_beside_other_work(ledger, user, monkeypatch, capsys):
    """``manage.py reproduce``'s table says what the Claims page says of a check whose runs had
    other work beside them; a quiet check's line has no such words."""

    beside = [0.42]  # the first check's runs only

    def wait(experiments, timeout_s, progress=None):
        for experiment in experiments:
            _finish(experiment, {"pace": 0.6, "horovod": 1.0, "bytescheduler": 0.9})
            for cores in beside:
                run = experiment.runs.filter(system="pace").first()
                Measurement.objects.create(run=run, metric="other_cores", value=cores, unit="cores")
        beside.clear()
        return True

    monkeypatch.setattr(reproduce_mod, "wait", wait)
    call_command("reproduce", "pace-speedup", "--mode", "sim")
    out = capsys.readouterr().out
    assert "pace-speedup" in out and "reproduced" in out
    assert "measured beside other work on their host (up to 0.42 cores)" in out
    call_command("reproduce", "pace-speedup", "--mode", "sim")
    out = capsys.readouterr().out
    assert "pace-speedup" in out and "other work" not in out
