#!/usr/bin/env bash
# `make horovod`: put the real Horovod (PyTorch + Gloo, CPU) into .venv, building its wheel once.
# Horovod 0.28.1, the newest on PyPI, does not build against torch >= 2.1 as shipped: torch's
# headers need C++17 and Horovod asks for C++14. We build it from the sdist (pinned by hash) with
# CMAKE_CXX_STANDARD raised to 17 and cache the wheel per Horovod, torch and Python version in
# ${LAB_WHEEL_CACHE:-~/.cache/lab-wheels}. Idempotent: a no-op when .venv already has it.
#
#   scripts/horovod-wheel.sh           the CPU wheel (PyTorch + Gloo), installed into .venv
#   scripts/horovod-wheel.sh --cuda    the CUDA image's wheel (PyTorch + NCCL + Gloo), built
#                                      against the CUDA torch of docker/wheelhouse-cuda
#                                      (docker/wheelhouse.sh --cuda first), cached like the CPU
#                                      one and copied into docker/wheelhouse-cuda; not installed
#
# --cuda needs no CUDA installation and no GPU: it builds in a throw-away virtual environment
# with the wheelhouse's torch and NVIDIA libraries, and takes the compiler from PyPI's NVIDIA
# wheels of torch's CUDA release (nvidia-cuda-nvcc, -crt, -cccl, nvidia-nvvm; about 45 MB, from
# LAB_CUDA_INDEX_URL, default https://pypi.org/simple, pip --isolated as in wheelhouse.sh). The
# kernels are compiled for the GPU architectures that torch is built for
# (HOROVOD_BUILD_CUDA_CC_LIST, e.g. 80,90, to choose).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

HOROVOD_VERSION=0.28.1
HOROVOD_SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
# Horovod's own dependencies (its setup_requires when building, install_requires at run time).
HOROVOD_DEPS=(cloudpickle psutil pyyaml packaging "cffi>=1.4.0")
PY=.venv/bin/python

die() { echo "horovod: $*" >&2; exit 1; }

cuda=0
case "${1:-}" in
  --cuda) cuda=1 ;;
  "") ;;
  *) echo "usage: scripts/horovod-wheel.sh [--cuda]" >&2; exit 2 ;;
esac

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

# build_wheel PIP [VAR=VALUE...]: the wheel into $work/dist, with PIP's environment (its torch)
# and the given build variables beside the common ones.
build_wheel() {
  local pip=$1
  shift
  local src="$work/horovod-$HOROVOD_VERSION"
  patch_cxx_standard "$src"
  echo "horovod: building wheel (2-6 minutes on 2 cores; log: $work/build.log)..."
  local start=$SECONDS
  if ! env "$@" HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    MAKEFLAGS="-j$(nproc)" \
    "$pip" wheel --no-build-isolation --no-deps --wheel-dir "$work/dist" "$src" \
    > "$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    die "wheel build failed (last 40 lines above)"
  fi
  echo "horovod: built in $((SECONDS - start)) s"
}

# check_build HOROVODRUN OPERATION...: --check-build lists PyTorch and each operation.
check_build() {
  local check op
  check=$("$1" --check-build)
  shift
  echo "$check"
  grep -q '\[X\] PyTorch' <<<"$check" || die "horovodrun --check-build does not list PyTorch"
  for op in "$@"; do
    grep -q "\[X\] $op" <<<"$check" || die "horovodrun --check-build does not list $op"
  done
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

make_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")
  partial=""  # a wheel being copied into the cache
  trap 'rm -rf "$work" ${partial:+"$partial"}' EXIT
}

# A wheel that links NCCL (its PyTorch extension needs libnccl.so.2): a cheap check of a cached
# one, without a CUDA torch to import it with.
links_nccl() {
  "$PY" - "$1" <<'PY'
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
libs = [n for n in wheel.namelist() if n.startswith("horovod/torch/mpi_lib") and n.endswith(".so")]
sys.exit(0 if libs and all(b"libnccl.so" in wheel.read(n) for n in libs) else 1)
PY
}

# --- the CUDA image's wheel (--cuda) ----------------------------------------------------------
if [ "$cuda" = 1 ]; then
  house=docker/wheelhouse-cuda
  pin=$(sed -n 's/^torch==\([^ ;#]*\).*/\1/p' docker/requirements-runner.txt)
  torch_wheel=$(ls "$house"/torch-"$pin"-*.whl 2>/dev/null | head -n 1 || true)
  [ -n "$torch_wheel" ] ||
    die "no torch $pin wheel in $house: run docker/wheelhouse.sh --cuda first"
  # torch's version (2.13.0+cu130) and CUDA release (13.0), from the wheel without installing it
  read -r torch_version cuda_version <<<"$("$PY" - "$torch_wheel" <<'PY'
import re, sys, zipfile
text = zipfile.ZipFile(sys.argv[1]).read("torch/version.py").decode()
def field(name):
    found = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]?([^'\"\n]+)", text, re.M)
    return found.group(1) if found else "unreadable"
print(field("__version__"), field("cuda"))
PY
)"
  case "$cuda_version" in
    "" | unreadable) die "cannot read torch's version from $torch_wheel (torch/version.py)" ;;
    None) die "$torch_wheel is not a CUDA build of torch ($torch_version): remove $house and run docker/wheelhouse.sh --cuda again" ;;
  esac
  py_version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # Its own cache root (a CPU wheel for a torch also called 2.13.0+cu130 never mixes with it),
  # one folder per architecture list.
  archs_key=default
  [ -z "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ] || archs_key="sm_${HOROVOD_BUILD_CUDA_CC_LIST//,/-}"
  cache_dir="${LAB_WHEEL_CACHE:-$HOME/.cache/lab-wheels}/horovod-$HOROVOD_VERSION-nccl/torch-$torch_version/$archs_key/py$py_version"
  cached=$(ls "$cache_dir"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -n "$cached" ]; then
    links_nccl "$cached" || die "the cached $cached does not link NCCL: remove it and run this again"
    echo "horovod: using cached wheel $cached"
  else
    check_build_tools
    make_work
    download_sdist
    index="${LAB_CUDA_INDEX_URL:-https://pypi.org/simple}"
    venv="$work/venv"
    echo "horovod: a build environment with torch $torch_version (CUDA $cuda_version) and nvcc" \
      "in $work (about 5 GB; TMPDIR moves it)"
    "$PY" -m venv "$venv"
    "$venv/bin/pip" install --isolated --quiet --no-index --find-links "$house" \
      "torch==$pin" numpy "${HOROVOD_DEPS[@]}" setuptools
    # the CUDA compiler of torch's CUDA release, from PyPI's NVIDIA wheels (no CUDA install)
    "$venv/bin/pip" install --isolated --quiet --no-deps --only-binary=:all: --index-url "$index" \
      "nvidia-cuda-nvcc==$cuda_version.*" "nvidia-cuda-crt==$cuda_version.*" \
      "nvidia-nvvm==$cuda_version.*" "nvidia-cuda-cccl==$cuda_version.*"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    nvcc=$(ls "$site"/nvidia/*/bin/nvcc 2>/dev/null | head -n 1 || true)
    [ -n "$nvcc" ] || die "no nvcc in the nvidia-cuda-nvcc wheel for CUDA $cuda_version"
    toolkit=$(dirname "$(dirname "$nvcc")")  # site-packages/nvidia/cu13: bin, include, lib, nvvm
    nccl="$site/nvidia/nccl"
    [ -f "$nccl/include/nccl.h" ] || die "no NCCL headers in $nccl (the nvidia-nccl wheel)"
    # The layout a CUDA toolkit has and the wheels lack: lib64, and the unversioned names
    # the linker looks for.
    ln -sfn lib "$toolkit/lib64"
    ln -sf "$(basename "$(ls "$toolkit"/lib/libcudart.so.* | head -n 1)")" "$toolkit/lib/libcudart.so"
    ln -sf libnccl.so.2 "$nccl/lib/libnccl.so"
    archs=${HOROVOD_BUILD_CUDA_CC_LIST:-$("$venv/bin/python" -c \
      'import torch; print(",".join(a[3:] for a in torch._C._cuda_getArchFlags().split() if a.startswith("sm_")))')}
    [ -n "$archs" ] || die "torch names no GPU architecture: set HOROVOD_BUILD_CUDA_CC_LIST (e.g. 80,90)"
    echo "horovod: NCCL operations, kernels for sm_${archs//,/, sm_}"
    build_wheel "$venv/bin/pip" CUDA_HOME="$toolkit" HOROVOD_CUDA_HOME="$toolkit" \
      HOROVOD_NCCL_HOME="$nccl" HOROVOD_NCCL_LINK=SHARED HOROVOD_GPU_OPERATIONS=NCCL \
      HOROVOD_BUILD_CUDA_CC_LIST="$archs"
    wheel=$(ls "$work"/dist/horovod-"$HOROVOD_VERSION"-*.whl)
    "$venv/bin/pip" install --quiet --no-index --no-deps "$wheel"
    check_build "$venv/bin/horovodrun" NCCL Gloo
    links_nccl "$wheel" || die "the built wheel does not link NCCL"
    built_for=$("$venv/bin/python" -c 'import horovod, json, pathlib; print(json.loads((pathlib.Path(horovod.__file__).parent / "metadata.json").read_text())["pytorch"])')
    [ "$built_for" = "$torch_version" ] || die "the wheel is built for torch $built_for, not $torch_version"
    cache_wheel
    cached=$(ls "$cache_dir"/horovod-"$HOROVOD_VERSION"-*.whl)
  fi
  rm -f "$house"/horovod-*.whl
  cp "$cached" "$house/"
  echo "horovod: $(basename "$cached") (torch $torch_version, NCCL) in $house"
  exit 0
fi

# --- the CPU wheel, into .venv ------------------------------------------------------------------
read -r torch_version py_version installed <<<"$(probe)"
[ -n "$installed" ] || die "torch is not importable from $PY: run \`make install\` first"
if [ "$installed" = yes ]; then
  echo "horovod: $HOROVOD_VERSION (torch $torch_version, Python $py_version) already installed"
  exit 0
fi
cache_dir="${LAB_WHEEL_CACHE:-$HOME/.cache/lab-wheels}/horovod-$HOROVOD_VERSION/torch-$torch_version/py$py_version"

make_work
cached=$(ls "$cache_dir"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$cached" ]; then
  echo "horovod: using cached wheel $cached"
else
  check_build_tools
  download_sdist
  .venv/bin/pip install --quiet "${HOROVOD_DEPS[@]}"
  build_wheel .venv/bin/pip
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
check_build .venv/bin/horovodrun Gloo
echo "horovod: ready ($HOROVOD_VERSION, torch $torch_version)"
