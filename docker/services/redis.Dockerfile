# Redis from Debian bookworm's packages (7.0), for machines that cannot pull `redis:7-bookworm`.
# Built by `LAB_LOCAL_SERVICES=1 scripts/images.sh` (context: docker/services). Same interface
# as the official image where compose uses it: `redis-server ...` as the command, data in /data,
# redis-cli on the PATH, runs as the unprivileged user `redis`.
# apt-get reaches Debian's mirror over plain http (packages are checked against the signed
# release files), so the build needs no CA bundle.
ARG BASE_IMAGE=lab-base:bookworm
FROM ${BASE_IMAGE}
ARG DEBIAN_SECURITY=http://deb.debian.org/debian-security
RUN if [ -n "$DEBIAN_SECURITY" ]; then \
      echo "deb $DEBIAN_SECURITY bookworm-security main" >/etc/apt/sources.list.d/security.list; fi \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o redis -g redis -m 0750 /data
LABEL org.opencontainers.image.title="scheduler-lab redis (Debian bookworm)"
USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
HEALTHCHECK --interval=10s --timeout=5s --retries=5 CMD ["redis-cli", "ping"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["redis-server", "--dir", "/data", "--protected-mode", "no"]
