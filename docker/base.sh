#!/usr/bin/env bash
# Make the lab's base image locally: Debian bookworm (minbase) with Python 3.11, built with
# debootstrap and loaded with `docker import`, for machines that cannot pull from a registry.
# Idempotent: does nothing when the image already exists (delete it to rebuild).
#
#   docker/base.sh [IMAGE]     default: $LAB_BASE_IMAGE or lab-base:bookworm
#   LAB_DEBIAN_MIRROR          default: http://deb.debian.org/debian
#
# Where a registry is reachable, any Debian bookworm image with python3 works as the base too:
# set LAB_BASE_IMAGE=python:3.11-slim-bookworm (the Dockerfiles take it as BASE_IMAGE).
set -euo pipefail
IMAGE="${1:-${LAB_BASE_IMAGE:-lab-base:bookworm}}"
MIRROR="${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base: $IMAGE exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "base: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "base: debootstrap needs root" >&2; exit 1; }

root="$(mktemp -d /tmp/lab-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "base: debootstrap bookworm into $root (about a minute)"
# python3-venv for the images' virtual environments, ca-certificates for pip, tini as PID 1.
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,tini \
  bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE" >/dev/null
echo "base: made $IMAGE"
