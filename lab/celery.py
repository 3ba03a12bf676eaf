"""The Celery app: ``celery -A lab worker`` and ``celery -A lab beat``.

Every worker also consumes its host's own queue, ``host.<LAB_HOST_NAME>`` (whatever ``-Q``
says), and registers its host and GPUs when it starts (``lab.hosts.ledger.register_host``), so
adding a worker host is starting a worker on it: runs are routed there by the GPUs and slots it
has (``lab.actions.dispatch``)."""

import logging
import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import celeryd_after_setup, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab.settings.base")

app = Celery("lab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)

# Celery's generic warning for a worker that runs as root (its risk: a pickled task message
# run as root, which it refuses outright) is replaced by why this one does and what the lab
# does about it (``_say_why_root``): real runs on the emulated network need root.
warnings.filterwarnings(
    "ignore",
    message="You're running the worker with superuser privileges",
    category=SecurityWarning,
)
ROOT_NOTE = (
    "this worker runs as root: real runs on the emulated network need it (network namespaces, "
    "tc, the delay line). Its tasks take JSON only (CELERY_ACCEPT_CONTENT) and run specs "
    "validated before they are queued. A worker host without shaped real runs can run it as "
    "another user (celery worker --uid USER)."
)


def host_queue() -> str:
    from django.conf import settings

    return f"host.{settings.HOST_NAME}"


@celeryd_after_setup.connect
def _consume_host_queue(sender, instance, **kwargs) -> None:
    instance.app.amqp.queues.select_add(host_queue())


@worker_ready.connect
def _say_why_root(sender, **kwargs) -> None:
    if os.geteuid() == 0:
        log.warning(ROOT_NOTE)


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
