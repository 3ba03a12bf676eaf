"""Settings of the lab portal. Every value that varies comes from ``lab.env``."""

from __future__ import annotations

import os
import socket

import dj_database_url

from lab import env

BASE_DIR = env.BASE_DIR
VAR_DIR = env.path("LAB_VAR_DIR", BASE_DIR / "var")
RESULTS_DIR = env.path("LAB_RESULTS_DIR", BASE_DIR / "results")
# The calibration real runs' twins come from (lab.reports.realsim); unset: the newest covering
# each run (python -m runners twin).
TWIN_CALIBRATION = env.text("LAB_TWIN_CALIBRATION")

SECRET_KEY = env.required(
    "DJANGO_SECRET_KEY", "`make run` writes one to .env; in production set it yourself"
)
DEBUG = env.flag("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env.csv("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env.csv("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "lab.accounts",
    "lab.catalogue",
    "lab.experiments",
    "lab.runs",
    "lab.results",
    "lab.reports",
    "lab.api",
    "lab.hosts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "lab.urls"
WSGI_APPLICATION = "lab.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "lab" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite (embedded default) or whatever DATABASE_URL names (e.g. postgres://...).
_SQLITE_PATH = VAR_DIR / "lab.sqlite3"
DATABASES = {
    "default": dj_database_url.parse(
        env.text("DATABASE_URL") or f"sqlite:///{_SQLITE_PATH}", conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and beat share one file: wait for locks, take write locks up front, WAL.
    _SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiment-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.text("LAB_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "lab" / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the live-status script reads it for POSTs
SESSION_COOKIE_SECURE = env.flag("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"

# --- Queue -----------------------------------------------------------------------------------
# Redis when REDIS_URL is set; otherwise kombu's filesystem transport, which needs no server.
REDIS_URL = env.text("REDIS_URL")
BROKER_DIR = VAR_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": 3600}
else:
    import lab.broker  # noqa: F401 - registers labfs://, kombu's filesystem transport made atomic

    CELERY_BROKER_URL = "labfs://localhost//"  # a hostname, though unused: no kombu warning
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
    for _folder in ("queue", "processed", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True  # tasks are idempotent; a worker killed mid-task loses nothing
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 120  # tasks are short: runs are detached, never a blocking task
CELERY_TASK_TIME_LIMIT = 180
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
RECONCILE_INTERVAL_S = env.number("LAB_RECONCILE_INTERVAL_S", 3.0, minimum=0.5)
CELERY_BEAT_SCHEDULE = {
    "reconcile-runs": {
        "task": "lab.runs.tasks.reconcile_runs",
        "schedule": RECONCILE_INTERVAL_S,
        "options": {"expires": RECONCILE_INTERVAL_S * 2},
    },
    "settle-claims-and-nights": {
        "task": "lab.reports.tasks.settle",
        "schedule": env.number("LAB_SETTLE_INTERVAL_S", 30.0, minimum=1.0),
        "options": {"expires": 60},
    },
}

# --- Claims and nightly reproducibility runs -------------------------------------------------
# The nightly schedule itself lives in the database (django-celery-beat), editable on the
# Nightly page; LAB_NIGHTLY_CRON only seeds it the first time (minute hour day-of-month month
# day-of-week).
CLAIMS_LEDGER = env.path("LAB_CLAIMS_LEDGER", BASE_DIR / "claims" / "ledger.yaml")
NIGHTLY_CRON = env.text("LAB_NIGHTLY_CRON", "30 2 * * *")
NIGHTLY_TIMEOUT_H = env.number("LAB_NIGHTLY_TIMEOUT_H", 12.0, minimum=0.01)
NIGHTLY_NOTIFY = env.text("LAB_NIGHTLY_NOTIFY", "alerts")
if NIGHTLY_NOTIFY not in ("alerts", "always"):
    raise env.ConfigError(f"LAB_NIGHTLY_NOTIFY={NIGHTLY_NOTIFY!r}: expected alerts or always")
NIGHTLY_EMAIL = env.csv("LAB_NIGHTLY_EMAIL", "")
NIGHTLY_WEBHOOK = env.text("LAB_NIGHTLY_WEBHOOK")
PUBLIC_URL = env.text("LAB_PUBLIC_URL", "http://localhost:8000")
EMAIL_BACKEND = env.text("LAB_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env.text("LAB_EMAIL_HOST", "localhost")
EMAIL_PORT = env.integer("LAB_EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env.text("LAB_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env.text("LAB_EMAIL_PASSWORD", "")  # a secret: only from the environment
EMAIL_USE_TLS = env.flag("LAB_EMAIL_TLS", False)
EMAIL_TIMEOUT = 20
DEFAULT_FROM_EMAIL = env.text("LAB_EMAIL_FROM", "scheduler-lab@localhost")

# --- Runs ------------------------------------------------------------------------------------
MAX_PARALLEL_RUNS = env.integer("LAB_MAX_PARALLEL_RUNS", os.cpu_count() or 1, minimum=1)
MAX_RUN_ATTEMPTS = env.integer("LAB_MAX_RUN_ATTEMPTS", 3, minimum=1)
LAUNCH_GRACE_S = env.number("LAB_LAUNCH_GRACE_S", 60.0, minimum=1.0)
RUNNER_PYTHON = env.text("LAB_RUNNER_PYTHON")  # default: the interpreter running Django

# --- Hosts and executors (see docker/README.md) -------------------------------------------------
# This worker host's name (its Celery queue is host.<name>) and how it runs runs: local
# (subprocess), docker (a container of LAB_RUNNER_IMAGE per run) or slurm (sbatch).
HOST_NAME = env.text("LAB_HOST_NAME") or socket.gethostname()
# Where the other hosts reach this one (a multi-host run rendezvouses at its first host).
HOST_ADDRESS = env.text("LAB_HOST_ADDRESS")
# The network of the docker executor's containers of a run over several hosts: host (they
# rendezvous at the first host's address) or a Docker network's name (an attachable overlay
# network across machines, or a bridge on one engine: they rendezvous at the first container).
NODE_NETWORK = env.text("LAB_NODE_NETWORK", "host")
EXECUTOR = env.text("LAB_EXECUTOR", "local")
if EXECUTOR not in ("local", "docker", "slurm"):
    raise env.ConfigError(f"LAB_EXECUTOR={EXECUTOR!r}: expected local, docker or slurm")
RUNNER_IMAGE = env.text("LAB_RUNNER_IMAGE", "lab-runner:cpu")
SLURM_PARTITION = env.text("LAB_SLURM_PARTITION")
SLURM_OPTIONS = tuple(env.csv("LAB_SLURM_OPTIONS", ""))  # e.g. --account=lab,--qos=normal
STOP_GRACE_S = env.number("LAB_STOP_GRACE_S", 10.0, minimum=0.0)
# A host whose worker has not reconciled for this long is lost: its running runs fail.
HOST_LOST_S = env.number("LAB_HOST_LOST_S", 600.0, minimum=60.0)

LOG_LEVEL = env.text("LAB_LOG_LEVEL", "INFO")
# Celery's INFO lines about the periodic housekeeping tasks (three every few seconds) are left
# out unless LAB_LOG_LEVEL is DEBUG: lab.logfilters.QuietHousekeeping.
_QUIET = [] if LOG_LEVEL.upper() == "DEBUG" else ["quiet_housekeeping"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"quiet_housekeeping": {"()": "lab.logfilters.QuietHousekeeping"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "fontTools": {"level": "WARNING"},  # matplotlib's PDFs: ~180 INFO lines a figure
        **{
            name: {"filters": _QUIET}
            for name in ("celery.beat", "celery.worker.strategy", "celery.app.trace")
        },
    },
}

# --- First administrator (see `manage.py ensure_admin`) ---------------------------------------
LAB_ADMIN_USER = env.text("LAB_ADMIN_USER", "admin")
LAB_ADMIN_PASSWORD = env.text("LAB_ADMIN_PASSWORD")  # None: generate one and print it once
