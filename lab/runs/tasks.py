"""Celery tasks: short, idempotent, take ids. The work lives in ``lab.actions``."""

from celery import shared_task

from lab import actions


@shared_task(ignore_result=True)
def launch_run(run_id: int) -> None:
    actions.launch_run(run_id)


@shared_task(ignore_result=True)
def reconcile_runs() -> None:
    actions.reconcile()
