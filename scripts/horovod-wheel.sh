#!/usr/bin/env bash
# `make horovod`: put the real Horovod (PyTorch + Gloo, CPU) into .venv, building its wheel once.
# Horovod 0.28.1, the newest on PyPI, does not build against torch >= 2.1 as shipped: torch's
# headers need C++17 and Horovod asks for C++14. We build it from the sdist (pinned by hash) with
# CMAKE_CXX_STANDARD raised to 17 and cache the wheel per Horovod, torch and Python version in
# ${LAB_WHEEL_CACHE:-~/.cache/lab-wheels}. Idempotent: a no-op when .venv already has it.
set -euo pipefail
cd "$(dirname "$0")/.."

HOROVOD_VERSION=0.28.1
HOROVOD_SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
# Horovod's own dependencies (its setup_requires when building, install_requires at run time).
HOROVOD_DEPS=(cloudpickle psutil pyyaml packaging "cffi>=1.4.0")
PY=.venv/bin/python

die() { echo "horovod: $*" >&2; exit 1; }

[ -x "$PY" ] || die "no $PY: run \`make install\` first"

# One interpreter start (importing torch takes seconds): prints the torch version, the Python
# version, and "yes" if .venv has this Horovod built against this torch. Horovod records the
# framework versions it was built with in horovod/metadata.json; an import alone could succeed
# against another torch.
probe() {
  "$PY" - "$HOROVOD_VERSION" 2>/dev/null <<'PY' | tail -n 1
import json, pathlib, sys
import torch

def installed() -> bool:
    try:
        import horovod
        import horovod.torch  # noqa: F401
    except Exception:
        return False
    meta = json.loads((pathlib.Path(horovod.__file__).parent / "metadata.json").read_text())
    return horovod.__version__ == sys.argv[1] and meta.get("pytorch") == torch.__version__

print(torch.__version__, "%d.%d" % sys.version_info[:2], "yes" if installed() else "no")
PY
}

read -r torch_version py_version installed <<<"$(probe)"
[ -n "$installed" ] || die "torch is not importable from $PY: run \`make install\` first"
if [ "$installed" = yes ]; then
  echo "horovod: $HOROVOD_VERSION (torch $torch_version, Python $py_version) already installed"
  exit 0
fi
cache_dir="${LAB_WHEEL_CACHE:-$HOME/.cache/lab-wheels}/horovod-$HOROVOD_VERSION/torch-$torch_version/py$py_version"

work=$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")
partial=""  # a wheel being copied into the cache
trap 'rm -rf "$work" ${partial:+"$partial"}' EXIT

check_build_tools() {
  local missing=()
  for tool in cmake g++ make; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [ "${#missing[@]}" -eq 0 ] || die "building needs ${missing[*]}: apt-get install cmake g++ make"
  local include
  include=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  [ -f "$include/Python.h" ] ||
    die "building needs the Python headers ($include/Python.h): apt-get install python3-dev"
}

download_sdist() {
  echo "horovod: downloading the $HOROVOD_VERSION sdist"
  echo "horovod==$HOROVOD_VERSION --hash=sha256:$HOROVOD_SDIST_SHA256" > "$work/requirements.txt"
  .venv/bin/pip download --quiet --no-deps --no-binary :all: --require-hashes \
    -r "$work/requirements.txt" -d "$work"
  local sdist="$work/horovod-$HOROVOD_VERSION.tar.gz"
  echo "$HOROVOD_SDIST_SHA256  $sdist" | sha256sum --check --quiet ||
    die "sha256 of $sdist is not $HOROVOD_SDIST_SHA256"
  tar -xzf "$sdist" -C "$work"
}

# Raise CMAKE_CXX_STANDARD 14 -> 17; fail if the line is not there (a silent no-op would only
# show up later as a compile error deep inside torch's headers).
patch_cxx_standard() {
  local file
  for file in "$1/CMakeLists.txt" "$1/horovod/torch/CMakeLists.txt"; do
    grep -q 'set(CMAKE_CXX_STANDARD 14)' "$file" || die "no 'set(CMAKE_CXX_STANDARD 14)' in $file"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$file"
    grep -q 'set(CMAKE_CXX_STANDARD 17)' "$file" || die "patching $file failed"
  done
}

build_wheel() {
  local src="$work/horovod-$HOROVOD_VERSION"
  patch_cxx_standard "$src"
  .venv/bin/pip install --quiet "${HOROVOD_DEPS[@]}"
  echo "horovod: building wheel (about 4 minutes on 2 cores; log: $work/build.log)..."
  local start=$SECONDS
  if ! HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    MAKEFLAGS="-j$(nproc)" \
    .venv/bin/pip wheel --no-build-isolation --no-deps --wheel-dir "$work/dist" "$src" \
    > "$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    die "wheel build failed (last 40 lines above)"
  fi
  echo "horovod: built in $((SECONDS - start)) s"
}

cache_wheel() {
  local wheel
  wheel=$(ls "$work"/dist/horovod-"$HOROVOD_VERSION"-*.whl)
  mkdir -p "$cache_dir"
  # Copy under a hidden name, then rename: another run never sees half a wheel.
  partial="$cache_dir/.$(basename "$wheel").$$"
  cp "$wheel" "$partial"
  mv "$partial" "$cache_dir/$(basename "$wheel")"
  partial=""
  echo "horovod: cached $cache_dir/$(basename "$wheel")"
}

cached=$(ls "$cache_dir"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$cached" ]; then
  echo "horovod: using cached wheel $cached"
else
  check_build_tools
  download_sdist
  build_wheel
  cache_wheel
  cached=$(ls "$cache_dir"/horovod-"$HOROVOD_VERSION"-*.whl)
fi

echo "horovod: installing into .venv"
.venv/bin/pip install --quiet "${HOROVOD_DEPS[@]}"
.venv/bin/pip install --quiet --no-deps --force-reinstall "$cached"
"$PY" -c 'import horovod.torch as hvd' || die "import horovod.torch failed after installing"
read -r _ _ installed <<<"$(probe)"
[ "$installed" = yes ] ||
  die "the installed horovod is not $HOROVOD_VERSION built for torch $torch_version"
check=$(.venv/bin/horovodrun --check-build)
echo "$check"
grep -q '\[X\] PyTorch' <<<"$check" || die "horovodrun --check-build does not list PyTorch"
grep -q '\[X\] Gloo' <<<"$check" || die "horovodrun --check-build does not list Gloo"
echo "horovod: ready ($HOROVOD_VERSION, torch $torch_version)"
