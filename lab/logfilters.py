"""Logging filters for the lab's processes (wired in ``settings.LOGGING`` and
``lab/gunicorn_conf.py``)."""

from __future__ import annotations

import logging
import re

# The periodic housekeeping tasks: beat sends them every few seconds (reconcile every
# LAB_RECONCILE_INTERVAL_S, 3 s by default), and Celery logs each one three times at INFO
# (sent, received, succeeded): 3,600 lines an hour that bury the lab's own lines (run launched,
# run failed, night started). What they do is logged by the lab itself when it happens.
HOUSEKEEPING = (
    "lab.runs.tasks.reconcile_runs",
    "lab.runs.tasks.reconcile_host",
    "lab.reports.tasks.settle",
)


class QuietHousekeeping(logging.Filter):
    """Drop Celery's INFO lines about the housekeeping tasks (beat sending one, the worker
    receiving it, its success). Warnings and errors about them (a failure, a retry, a time
    limit) pass, and so does every line about any other task. ``LAB_LOG_LEVEL=DEBUG`` shows
    them all (``settings.LOGGING`` does not install the filter then)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        return not any(task in message for task in HOUSEKEEPING)


# A successful poll of a page's live part: the experiment and claims pages ask for it every
# 2 s while something runs (lab/static/lab/live.js).
_POLL = re.compile(r'"GET /(?:experiments/\d+/|claims/)live/\S* HTTP/[\d.]+" (?:200|304) ')


class QuietPolls(logging.Filter):
    """Drop gunicorn's access-log lines of successful live-status polls: one every 2 s for each
    open page while an experiment runs, between the lines of the requests people make. A
    failed poll, and every other request, stay (``lab/gunicorn_conf.py`` installs it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _POLL.search(record.getMessage())
