"""Fast settings for pytest-django unit tests (the integration tests run the real stack)."""

import os
import tempfile

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-not-secret")
_TMP = tempfile.mkdtemp(prefix="lab-test-")
os.environ.setdefault("LAB_VAR_DIR", os.path.join(_TMP, "var"))
os.environ.setdefault("LAB_RESULTS_DIR", os.path.join(_TMP, "results"))

from .base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405 - whitenoise warns when it is missing
