"""The lab portal (Django project). Knows runners' public API only."""

from .celery import app as celery_app

__all__ = ("celery_app",)
