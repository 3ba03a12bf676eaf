"""The Celery app: ``celery -A lab worker`` and ``celery -A lab beat``.

Every worker also consumes its host's own queue, ``host.<LAB_HOST_NAME>`` (whatever ``-Q``
says), and registers its host and GPUs when it starts (``lab.hosts.ledger.register_host``), so
adding a worker host is starting a worker on it: runs are routed there by the GPUs and slots it
has (``lab.actions.dispatch``)."""

import logging
import os

from celery import Celery
from celery.signals import celeryd_after_setup, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab.settings.base")

app = Celery("lab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)


def host_queue() -> str:
    from django.conf import settings

    return f"host.{settings.HOST_NAME}"


@celeryd_after_setup.connect
def _consume_host_queue(sender, instance, **kwargs) -> None:
    instance.app.amqp.queues.select_add(host_queue())


@worker_ready.connect
def _register_host(sender, **kwargs) -> None:
    from django.conf import settings

    from lab.hosts import ledger

    try:
        host = ledger.register_host(
            settings.HOST_NAME, queue=host_queue(), executor=settings.EXECUTOR
        )
    except Exception:  # a worker without its host registered still serves the default queue
        log.exception("could not register host %s", settings.HOST_NAME)
        return
    log.info("host %s registered: queue %s, %s executor, %d GPUs", host.name, host.queue,
             host.executor, host.gpus.count())  # fmt: skip
    try:  # jobs of runs that other hosts failed while this one was lost
        from lab import actions

        actions.stop_jobs_left_while_lost()
    except Exception:
        log.exception("could not stop the jobs left while host %s was lost", settings.HOST_NAME)
