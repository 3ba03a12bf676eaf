"""The lab's processes log what happens to runs, not every tick of the housekeeping tasks."""

from __future__ import annotations

import logging

import pytest
from celery.app import trace
from django.conf import settings

from lab.logfilters import QuietHousekeeping

RECONCILE = "lab.runs.tasks.reconcile_runs"


def _context(task: str) -> dict:
    return {"id": "f00", "name": task, "args": "()", "kwargs": "{}", "eta": None,
            "runtime": 0.009, "return_value": None}  # fmt: skip


@pytest.mark.skipif(settings.LOG_LEVEL.upper() == "DEBUG", reason="LAB_LOG_LEVEL=DEBUG shows all")
def test_celery_s_info_lines_about_the_housekeeping_tasks_are_left_out(caplog):
    """Celery's own messages (its format strings) on the loggers it uses: beat sending the
    reconcile task, the worker receiving it, its success are dropped; the same lines about
    another task (the figures' render) and a housekeeping task's failure are kept."""
    caplog.set_level(logging.INFO)
    logging.getLogger("celery.beat").info(
        "Scheduler: Sending due task %s (%s)", "reconcile-runs", RECONCILE
    )
    logging.getLogger("celery.worker.strategy").info(trace.LOG_RECEIVED, _context(RECONCILE))
    logging.getLogger("celery.app.trace").info(trace.LOG_SUCCESS, _context(RECONCILE))
    render = "lab.reports.tasks.render_figures"
    logging.getLogger("celery.worker.strategy").info(trace.LOG_RECEIVED, _context(render))
    logging.getLogger("celery.app.trace").info(trace.LOG_SUCCESS, _context(render))
    failed = {**_context(RECONCILE), "exc": "OperationalError('locked')", "description": "raised"}
    logging.getLogger("celery.app.trace").error(trace.LOG_FAILURE, failed)
    kept = [r.getMessage() for r in caplog.records]
    assert [m.split("[")[0] for m in kept] == [
        f"Task {render}",
        f"Task {render}",
        f"Task {RECONCILE}",
    ], kept
    assert "received" in kept[0] and "succeeded" in kept[1] and "raised" in kept[2]


def test_the_filter_keeps_lines_that_name_no_housekeeping_task():
    quiet = QuietHousekeeping()
    line = logging.LogRecord(
        "celery.beat", logging.INFO, __file__, 1, "beat: Starting...", (), None
    )
    assert quiet.filter(line)
    tick = logging.LogRecord(
        "celery.beat", logging.INFO, __file__, 1, "Sending due task %s (%s)",
        ("settle-claims-and-nights", "lab.reports.tasks.settle"), None,
    )  # fmt: skip
    assert not quiet.filter(tick)


def test_the_font_subsetting_of_the_pdf_figures_logs_no_info():
    """matplotlib's PDF backend subsets fonts with fontTools, which logs each step at INFO:
    about 180 lines a figure, 1,870 in one three-run experiment's renders."""
    assert not logging.getLogger("fontTools.subset").isEnabledFor(logging.INFO)
    assert logging.getLogger("fontTools.subset").isEnabledFor(logging.WARNING)


def test_the_access_log_leaves_out_successful_live_polls():
    """gunicorn's access lines (its default format) through the filter gunicorn_conf installs."""
    from lab.logfilters import QuietPolls

    def line(request: str, status: int) -> logging.LogRecord:
        message = (
            f'127.0.0.1 - - [06/Dec/2026:04:34:39 +0000] "{request} HTTP/1.1" {status} 2351 '
            '"http://127.0.0.1:8000/experiments/1/" "Mozilla/5.0"'
        )
        return logging.LogRecord("gunicorn.access", logging.INFO, "", 0, message, (), None)

    quiet = QuietPolls()
    assert not quiet.filter(line("GET /experiments/12/live/", 200))
    assert not quiet.filter(line("GET /claims/live/?x=1", 200))
    assert quiet.filter(line("GET /experiments/12/live/", 500))  # a failed poll is told
    assert quiet.filter(line("GET /experiments/12/", 200))  # what people ask for is told
    assert quiet.filter(line("POST /experiments/new/", 302))


def test_gunicorn_s_settings_install_the_filter():
    from lab import gunicorn_conf
    from lab.logfilters import QuietPolls

    access = logging.getLogger("gunicorn.access")
    before = list(access.filters)
    try:
        gunicorn_conf.on_starting(None)
        assert any(isinstance(f, QuietPolls) for f in access.filters)
    finally:
        access.filters[:] = before
