#!/usr/bin/env bash
# Prepare the lab on this machine (idempotent): local .env with a fresh secret key, database
# migrations, catalogue, static files, and the first administrator. Used by `make run`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f .env ]; then
  umask 077
  key=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')
  printf '# Written by `make run` on first start; not committed. Add REDIS_URL, DATABASE_URL, ... here.\nDJANGO_SECRET_KEY=%s\n' "$key" > .env
  echo "setup: wrote .env with a new DJANGO_SECRET_KEY"
fi
set -a; . ./.env; set +a

.venv/bin/python manage.py migrate --no-input -v 0
.venv/bin/python manage.py load_catalogue
.venv/bin/python manage.py collectstatic --no-input -v 0
.venv/bin/python manage.py ensure_admin
