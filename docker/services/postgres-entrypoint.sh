#!/usr/bin/env bash
# Entry point of docker/services/postgres.Dockerfile: on first start (empty PGDATA) create the
# cluster with POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB (like the official image), then
# run the server listening on all interfaces with password (scram-sha-256) authentication.
set -euo pipefail
: "${PGDATA:=/var/lib/postgresql/data}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}

if [ "${1:-postgres}" != postgres ]; then exec "$@"; fi
[ $# -gt 0 ] && shift

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || {
    echo "postgres: POSTGRES_PASSWORD is required to initialise $PGDATA" >&2; exit 1; }
  echo "postgres: initialising $PGDATA (user $user, database $db)"
  pwfile=$(mktemp)
  trap 'rm -f "$pwfile"' EXIT
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    # A private server on the socket only, to create the database, then stop it.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    createdb -U "$user" "$db"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  echo "postgres: initialised"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
