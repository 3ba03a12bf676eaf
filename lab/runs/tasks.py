"""Celery tasks: short, idempotent, take ids. The work lives in ``lab.actions``."""

import logging

from celery import shared_task
from django.conf import settings

from lab import actions

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def launch_run(run_id: int) -> None:
    actions.launch_run(run_id)


@shared_task(ignore_result=True)
def launch_node(run_id: int, attempt: int, rank: int) -> None:
    """On the node's host's queue: start one more node of a run over several hosts."""
    actions.launch_node(run_id, attempt, rank)


@shared_task(ignore_result=True)
def reconcile_runs() -> None:
    """Beat, every LAB_RECONCILE_INTERVAL_S: fan out to every host's queue (or reconcile here
    on a single machine)."""
    actions.dispatch()


@shared_task(ignore_result=True)
def reconcile_host(name: str) -> None:
    """On host ``name``'s own queue (``host.<name>``): its runs and its free slots."""
    if name != settings.HOST_NAME:  # a worker consuming another host's queue by mistake
        log.error("reconcile for host %s reached host %s: check LAB_HOST_NAME", name,
                  settings.HOST_NAME)  # fmt: skip
        return
    actions.reconcile()


@shared_task(ignore_result=True)
def stop_run(run_id: int) -> None:
    """On the run's host's queue: stop the job of a run that was cancelled elsewhere."""
    from lab.runs.models import Run

    run = Run.objects.filter(pk=run_id, state=Run.CANCELLED).first()
    if run is not None:
        actions.stop_job(run)
