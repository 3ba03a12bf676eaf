#!/usr/bin/env bash
# Fill docker/wheelhouse/ with every wheel the images install, downloaded on the host (which
# reaches PyPI and has the local torch wheel), so image builds need no network and no
# certificates inside the build. Adds the cached Horovod wheel (`make horovod`) when present.
# Idempotent: pip skips wheels already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-.venv/bin/pip}"
house=docker/wheelhouse
mkdir -p "$house"
"$PIP" download --quiet --only-binary=:all: --dest "$house" \
  -r docker/requirements-runner.txt -r requirements.txt
cache="${LAB_WHEEL_CACHE:-$HOME/.cache/lab-wheels}"
found=$(find "$cache" -name 'horovod-*.whl' 2>/dev/null | head -n 1 || true)
rm -f "$house"/horovod-*.whl
if [ -n "$found" ]; then
  cp "$found" "$house/"
  echo "wheelhouse: with Horovod ($(basename "$found"))"
else
  echo "wheelhouse: without Horovod (run \`make horovod\` first to include it)"
fi
du -sh "$house" | awk '{print "wheelhouse: " $1}'
