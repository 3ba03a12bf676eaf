#!/usr/bin/env bash
# `make run`: set up, then start the portal, a Celery worker and the beat scheduler in one
# terminal (honcho reads the Procfile and .env). Ctrl-C stops all three; runs already launched
# keep going and are picked up again at the next start.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
set -a; . ./.env; set +a
host=${LAB_HOST:-127.0.0.1}
port=${LAB_PORT:-8000}
broker=${REDIS_URL:+Redis at $REDIS_URL}
database=${DATABASE_URL:+$DATABASE_URL}
cat <<MSG

  The lab is starting at  http://$host:$port/
  Log in as ${LAB_ADMIN_USER:-admin} with the password printed above when the admin was created
  (or LAB_ADMIN_PASSWORD). Lost it? .venv/bin/python manage.py changepassword ${LAB_ADMIN_USER:-admin}
  Queue: ${broker:-embedded (filesystem broker in var/broker, no server needed)}
  Database: ${database:-embedded SQLite (var/lab.sqlite3)}
  API token for scripts: .venv/bin/python manage.py apitoken USERNAME

MSG
exec .venv/bin/honcho start -f Procfile
