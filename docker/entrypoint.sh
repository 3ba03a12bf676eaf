#!/usr/bin/env bash
# Entry point of the portal image (docker/portal.Dockerfile): one image, several roles.
#
#   web             migrate, load the catalogue, create the first admin, then gunicorn on :8000
#   worker          Celery worker (queues: $LAB_WORKER_QUEUES, default Celery's own `celery`)
#   beat            Celery beat with the django-celery-beat database scheduler
#   migrate         migrate + load_catalogue + ensure_admin, then exit (what `web` does first)
#   manage ARGS...  python manage.py ARGS...  (e.g. `manage createsuperuser`, `manage shell`)
#   health          the image's HEALTHCHECK: checks whichever role this container runs
#   anything else   run as a command (e.g. `bash`)
#
# Configuration only from the environment (README.md, "Configuration"); nothing secret is
# baked into the image: DJANGO_SECRET_KEY must be set or Django refuses to start.
# Worker-only: LAB_HOST_NAME names the Celery node (lab-worker@<name>, default the container's
# host name), LAB_WORKER_QUEUES the queues it consumes (comma-separated, -Q), and
# LAB_WORKER_CONCURRENCY its processes (default 2, as in the Procfile).
set -euo pipefail
cd /opt/lab

ROLE_FILE=/tmp/lab-role  # what `health` checks: written by the long-running roles
PORT=8000                # inside the container; compose publishes it

die() { echo "entrypoint: $*" >&2; exit 1; }

setup() {
  python manage.py migrate --no-input -v 1
  python manage.py load_catalogue
  python manage.py ensure_admin
}

# The results folder must be writable by this user (uid 1000): runs, logs and figures go there.
check_results_dir() {
  local dir=${LAB_RESULTS_DIR:-}
  [ -n "$dir" ] || return 0
  mkdir -p "$dir" 2>/dev/null || true
  [ -w "$dir" ] || die "LAB_RESULTS_DIR=$dir is not writable by uid $(id -u) (the image's user):" \
    "on the host run: sudo install -d -o $(id -u) -g $(id -g) $dir"
}

# With the docker executor the worker starts run containers through the engine's socket.
check_docker_socket() {
  [ "${LAB_EXECUTOR:-}" = docker ] || return 0
  local sock=/var/run/docker.sock
  [ -S "$sock" ] || die "LAB_EXECUTOR=docker but $sock is not mounted into this container"
  { [ -r "$sock" ] && [ -w "$sock" ]; } ||
    die "LAB_EXECUTOR=docker but uid $(id -u) (groups: $(id -G)) cannot use $sock" \
      "(its group is $(stat -c %g "$sock")): set LAB_DOCKER_GID=$(stat -c %g "$sock")"
}

health() {
  local role="" name=""
  [ -f "$ROLE_FILE" ] && read -r role name <"$ROLE_FILE"
  case "$role" in
    web)
      python - "$PORT" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=10) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
      ;;
    worker)  # answers a ping through the broker: connected and consuming
      celery -A lab inspect ping --destination "$name" --timeout 10 >/dev/null ;;
    beat)
      kill -0 "$(cat /tmp/celerybeat.pid)" ;;
    *) exit 0 ;;  # one-off commands have nothing to check
  esac
}

role=${1:-web}
[ $# -gt 0 ] && shift
case "$role" in
  web)
    check_results_dir
    setup
    echo "web" >"$ROLE_FILE"
    exec gunicorn lab.wsgi -c python:lab.gunicorn_conf --bind "0.0.0.0:$PORT" --workers "${LAB_WEB_WORKERS:-2}" \
      --access-logfile - --log-level warning "$@"
    ;;
  worker)
    check_results_dir
    check_docker_socket
    node="lab-worker@${LAB_HOST_NAME:-$HOSTNAME}"
    queues=()
    [ -n "${LAB_WORKER_QUEUES:-}" ] && queues=(-Q "$LAB_WORKER_QUEUES")
    echo "worker $node" >"$ROLE_FILE"
    echo "entrypoint: worker $node, queues ${LAB_WORKER_QUEUES:-celery (default)}," \
      "executor ${LAB_EXECUTOR:-local}"
    exec celery -A lab worker --loglevel INFO --concurrency "${LAB_WORKER_CONCURRENCY:-2}" \
      --hostname "$node" "${queues[@]}" "$@"
    ;;
  beat)
    echo "beat" >"$ROLE_FILE"
    rm -f /tmp/celerybeat.pid
    exec celery -A lab beat --loglevel INFO --pidfile /tmp/celerybeat.pid \
      --scheduler django_celery_beat.schedulers:DatabaseScheduler "$@"
    ;;
  migrate) setup ;;
  manage) exec python manage.py "$@" ;;
  health) health ;;
  *) exec "$role" "$@" ;;
esac
