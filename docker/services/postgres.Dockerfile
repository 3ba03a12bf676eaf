# PostgreSQL from Debian bookworm's packages (15), for machines that cannot pull
# `postgres:16-bookworm`. Built by `LAB_LOCAL_SERVICES=1 scripts/images.sh` (context:
# docker/services). Same interface as the official image where compose uses it: POSTGRES_USER,
# POSTGRES_PASSWORD (required), POSTGRES_DB, data in /var/lib/postgresql/data (initialised on
# first start), pg_isready on the PATH, runs as the unprivileged user `postgres`.
# A data volume belongs to one major version: 15 here, 16 in the default official image. Do not
# switch images on the same volume (PostgreSQL refuses to start and says so): dump and restore.
ARG BASE_IMAGE=lab-base:bookworm
FROM ${BASE_IMAGE}
ARG DEBIAN_SECURITY=http://deb.debian.org/debian-security
ARG PG_MAJOR=15
# No default cluster: the entry point initialises one in PGDATA, as the official image does.
RUN if [ -n "$DEBIAN_SECURITY" ]; then \
      echo "deb $DEBIAN_SECURITY bookworm-security main" >/etc/apt/sources.list.d/security.list; fi \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-common >/dev/null \
 && sed -i 's/^#\?\s*create_main_cluster.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "postgresql-$PG_MAJOR" >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
 && install -d -o postgres -g postgres -m 2775 /run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
LABEL org.opencontainers.image.title="scheduler-lab postgres (Debian bookworm)"
ENV PATH=/usr/lib/postgresql/$PG_MAJOR/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER postgres
VOLUME /var/lib/postgresql/data
EXPOSE 5432
HEALTHCHECK --interval=10s --timeout=5s --retries=5 \
  CMD pg_isready -h 127.0.0.1 -U "${POSTGRES_USER:-postgres}" -d "${POSTGRES_DB:-${POSTGRES_USER:-postgres}}"
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/postgres-entrypoint.sh"]
CMD ["postgres"]
