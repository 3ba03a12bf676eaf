"""Celery tasks of the reports: short, idempotent, take ids. The work lives in the modules."""

from celery import shared_task

from lab import actions


@shared_task(ignore_result=True)
def render_figures(experiment_id: int) -> None:
    actions.render_figures(experiment_id)


@shared_task(ignore_result=True)
def settle() -> None:
    """Judge claim checks whose runs ended; finish nights whose work ended; draw the figures
    recent checks still owe."""
    from lab.reports import nightly as nights

    nights.settle()


@shared_task(ignore_result=True)
def nightly(mode: str = "sim", claims: list[str] | None = None, trigger: str = "beat") -> int:
    """Start a night of the reproducibility suite (beat's "nightly reproducibility" entry)."""
    from lab.reports import nightly as nights

    return nights.start_night(mode=mode, claims=claims, trigger=trigger).pk


@shared_task(ignore_result=True)
def notify(night_id: int) -> None:
    from lab.reports import nightly as nights

    nights.notify(night_id)
