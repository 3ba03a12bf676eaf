#!/usr/bin/env bash
# Fill docker/wheelhouse/ with every wheel the images install, downloaded on the host (which
# reaches PyPI and has the local torch wheel), so image builds need no network and no
# certificates inside the build. Adds the cached Horovod wheel (`make horovod`) when present.
# Idempotent: pip skips wheels already there.
#
#   docker/wheelhouse.sh           docker/wheelhouse/: the CPU runner and the portal images
#   docker/wheelhouse.sh --cuda    docker/wheelhouse-cuda/: the CUDA runner image, i.e. the
#                                  CUDA build of torch (PyPI's default Linux wheel) with its
#                                  NVIDIA libraries, about 2.7 GB (its Horovod wheel, built
#                                  with NCCL, comes from scripts/horovod-wheel.sh --cuda)
#
# For --cuda, pip ignores this machine's pip configuration and PIP_* variables (--isolated),
# so that a local CPU wheel of torch (a higher version, 2.13.0+cpu) in its find-links cannot
# stand in for the CUDA one; that drops their certificate and proxy settings too. It reads
# LAB_CUDA_INDEX_URL (default https://pypi.org/simple). A torch without CUDA in the result
# stops the script.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-.venv/bin/pip}"

if [ "${1:-}" = --cuda ]; then
  house=docker/wheelhouse-cuda
  index="${LAB_CUDA_INDEX_URL:-https://pypi.org/simple}"
  mkdir -p "$house"
  "$PIP" download --isolated --quiet --only-binary=:all: --index-url "$index" \
    --dest "$house" -r docker/requirements-runner.txt
  if ls "$house"/torch-*+cpu-*.whl >/dev/null 2>&1 || ! ls "$house"/nvidia_nccl_*.whl >/dev/null 2>&1; then
    echo "wheelhouse: $house has no CUDA build of torch (a +cpu wheel, or no NCCL): remove $house" \
      "and run this again; if it happens again, LAB_CUDA_INDEX_URL ($index) serves no CUDA torch" >&2
    exit 1
  fi
  du -sh "$house" | awk '{print "wheelhouse (CUDA): " $1}'
  exit 0
elif [ -n "${1:-}" ]; then
  echo "usage: docker/wheelhouse.sh [--cuda]" >&2
  exit 2
fi

house=docker/wheelhouse
mkdir -p "$house"
"$PIP" download --quiet --only-binary=:all: --dest "$house" \
  -r docker/requirements-runner.txt -r requirements.txt
cache="${LAB_WHEEL_CACHE:-$HOME/.cache/lab-wheels}"
# the CPU build (scripts/horovod-wheel.sh --cuda caches its NCCL one under horovod-<v>-nccl/)
found=$(find "$cache" -name 'horovod-*.whl' ! -path '*-nccl/*' 2>/dev/null | head -n 1 || true)
rm -f "$house"/horovod-*.whl
if [ -n "$found" ]; then
  cp "$found" "$house/"
  echo "wheelhouse: with Horovod ($(basename "$found"))"
else
  echo "wheelhouse: without Horovod (run \`make horovod\` first to include it)"
fi
du -sh "$house" | awk '{print "wheelhouse: " $1}'
