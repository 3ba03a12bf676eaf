"""gunicorn's settings for the portal (``-c python:lab.gunicorn_conf``: the Procfile of
``make run`` and the portal image's entrypoint)."""

from __future__ import annotations

import logging
from typing import Any

from lab.logfilters import QuietPolls


def on_starting(server: Any) -> None:
    """Before the workers fork: the access log leaves out the live-status polls."""
    logging.getLogger("gunicorn.access").addFilter(QuietPolls())
