from celery import shared_task

from lab import actions


@shared_task(ignore_result=True)
def render_figures(experiment_id: int) -> None:
    actions.render_figures(experiment_id)
