#!/usr/bin/env bash
# Run the whole suite (called by `make test` after lint). pytest's exit code 5 ("no tests were
# collected") is an error here: a suite that runs nothing must not look green.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; treating that as a failure" >&2
  exit 1
fi
exit "$code"
