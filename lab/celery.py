"""The Celery app: ``celery -A lab worker`` and ``celery -A lab beat``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab.settings.base")

app = Celery("lab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
