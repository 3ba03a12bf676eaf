#!/usr/bin/env bash
# The checks that need a GPU, in one command: real mode's NCCL path (tests/gpu) and the
# measured GPU profiles of every registered model. For a machine with a CUDA GPU and a
# Python that has torch (CUDA), numpy and PyYAML; nothing is installed and nothing outside
# the checkout is written but the output folder. Used on the lab's lent device machine as
#   run(command="bash scripts/device-check.sh", timeout_s=540)
# where $OUT is the folder that comes back; elsewhere: scripts/device-check.sh [OUT_DIR].
#
# Writes OUT/env.txt (the GPU, driver, torch), OUT/pytest.log (tests/gpu, every test's
# outcome), OUT/profiles.tar (workloads/profiles/measured/<model>@<gpu>.json for every model:
# unpack it into the checkout and commit what you keep) and OUT/profiles.log. Exits non-zero
# when a step failed; every step runs whatever the one before did, within its own time limit,
# so that one call gives every answer (the device machine's time is short).
set -uo pipefail

out=${1:-${OUT:-device-out}}
python=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
status=0

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$python" -c 'import sys, torch; gpu = torch.cuda.is_available()
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", ".".join(map(str, torch.cuda.nccl.version())) if gpu else None,
      "devices", torch.cuda.device_count() if gpu else 0)'
  git log -1 --format='commit %H' 2>/dev/null || true
} >"$out/env.txt" 2>&1 || status=1
cat "$out/env.txt"

echo "== tests/gpu"
timeout 300 "$python" -m pytest tests/gpu -q -rA -o addopts= -p no:cacheprovider \
  2>&1 | tee "$out/pytest.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== GPU profiles"
profiles=$(mktemp -d)
timeout 180 "$python" -m workloads profile --all --measure --device cuda \
  --measured-dir "$profiles" 2>&1 | tee "$out/profiles.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
tar -C "$profiles" -cf "$out/profiles.tar" . && rm -rf "$profiles"
tar -tf "$out/profiles.tar" | grep json || status=1

echo "== device-check: exit $status"
exit "$status"
