#!/usr/bin/env bash
# `make images`: build the lab's container images, skipping those already built from the same
# inputs. Steps: the base image (docker/base.sh, when missing), the wheelhouse
# (docker/wheelhouse.sh), the CPU runner image, the portal image and, with LAB_LOCAL_SERVICES=1,
# Redis and PostgreSQL images made from Debian packages (for machines that cannot pull).
#
#   scripts/images.sh [runner] [portal] [services] [runner-cuda]
#                                              default: runner portal (+ services)
#   scripts/images.sh prune                    remove old kept builds now (LAB_IMAGE_KEEP), build nothing
#
# runner-cuda (`make image-cuda`, never by default): the CUDA runner image
# (docker/runner-cuda.Dockerfile) on LAB_CUDA_BASE_IMAGE, installed offline from
# docker/wheelhouse-cuda (docker/wheelhouse.sh --cuda: PyPI's CUDA build of torch and its NVIDIA
# libraries, about 2.7 GB), with the real Horovod built with NCCL against that torch
# (scripts/horovod-wheel.sh --cuda: about 6 minutes on 2 cores the first time, then cached;
# LAB_CUDA_HOROVOD=0 leaves it out). Its build context is a folder of hard links
# (var/images/context-cuda), so that the other images' builds do not send the CUDA wheels.
#
#   LAB_BASE_IMAGE      base of every image      default lab-base:bookworm (made locally)
#   LAB_RUNNER_IMAGE    the CPU runner image     default lab-runner:cpu
#   LAB_RUNNER_CUDA_IMAGE  the CUDA runner image default lab-runner:cuda
#   LAB_CUDA_BASE_IMAGE    its base              default LAB_BASE_IMAGE (the wheels bring CUDA;
#                                                the host's NVIDIA driver, through the NVIDIA
#                                                Container Toolkit, brings the rest)
#   LAB_CUDA_HOROVOD    0: the CUDA image without Horovod   default 1
#   LAB_PORTAL_IMAGE    the portal image         default lab-portal
#   LAB_LOCAL_SERVICES  1: also build the two service images below
#   LAB_REDIS_IMAGE     local Redis image        default lab-redis:bookworm (with LAB_LOCAL_SERVICES=1)
#   LAB_POSTGRES_IMAGE  local PostgreSQL image   default lab-postgres:bookworm (idem)
#   LAB_REBUILD         1: build even when the inputs are unchanged
#   LAB_IMAGE_KEEP      kept builds per image    default 5 ('all': never remove one)
#
# Kept builds: every build is also tagged <image>-<inputs hash, 12 hex> so that `rerun` finds
# the exact image a past run used. After each build (and with `prune`), the kept builds of that
# image beyond the newest LAB_IMAGE_KEEP are removed, except the one its tag points to and any
# a container (running or stopped) still uses; none where the image's own tag is missing
# (0 keeps only the current build). The CUDA image is 5.3 GB a build.
#
# Reuse: each image carries the label `lab.inputs`, a sha256 over everything its build reads
# (Dockerfile, requirements, wheelhouse, copied source folders, file modes, the base image's id,
# build arguments except LAB_COMMIT). An image whose tag exists with the same label is kept;
# a changed file rebuilds it. Build logs: var/images/<image>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${LAB_BASE_IMAGE:-lab-base:bookworm}
RUNNER=${LAB_RUNNER_IMAGE:-lab-runner:cpu}
PORTAL=${LAB_PORTAL_IMAGE:-lab-portal}
LOCAL_SERVICES=${LAB_LOCAL_SERVICES:-0}

CUDA_RUNNER=${LAB_RUNNER_CUDA_IMAGE:-lab-runner:cuda}
REDIS=${LAB_REDIS_IMAGE:-lab-redis:bookworm}
POSTGRES=${LAB_POSTGRES_IMAGE:-lab-postgres:bookworm}
KEEP=${LAB_IMAGE_KEEP:-5}
LOGS=var/images

say() { echo "images: $*"; }
die() { echo "images: $*" >&2; exit 1; }
usage() { echo "images: $*" >&2; exit 2; }

case "$KEEP" in
  all) ;;
  '' | *[!0-9]*) usage "LAB_IMAGE_KEEP must be a whole number of kept builds per image or 'all' (got '$KEEP')" ;;
esac

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(runner portal)
  [ "$LOCAL_SERVICES" = 1 ] && targets+=(services)
fi
for target in "${targets[@]}"; do
  case "$target" in
    runner | portal | services | runner-cuda) ;;
    prune) [ ${#targets[@]} -eq 1 ] || usage "'prune' is a target of its own (scripts/images.sh prune)" ;;
    *) usage "unknown target '$target' (runner, portal, services, runner-cuda, prune)" ;;
  esac
done
wants() { local t; for t in "${targets[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }

command -v docker >/dev/null || die "the docker command is not installed (apt-get install docker.io)"
if ! err=$(docker info 2>&1 >/dev/null); then
  die "the Docker engine is not reachable: ${err##*$'\n'}
        start it (e.g. \`dockerd &\` or \`systemctl start docker\`) or check DOCKER_HOST and the
        permissions on /var/run/docker.sock, then run this again"
fi

# --- inputs ----------------------------------------------------------------------------------
# sha256 over: the given strings, then each file under the given paths (sorted, with its mode)
# as the build context sends it (no __pycache__, no *.pyc, as .dockerignore says).
inputs_hash() {
  local strings=$1
  shift
  {
    printf '%s\n' "$strings"
    find "$@" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z |
      xargs -0 -r stat -c '%a %n'
    find "$@" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z |
      xargs -0 -r sha256sum
  } | sha256sum | cut -d' ' -f1
}

label_of() {
  docker image inspect -f '{{ index .Config.Labels "lab.inputs" }}' "$1" 2>/dev/null || true
}

# build IMAGE DOCKERFILE CONTEXT HASH [docker build args...]
build() {
  local image=$1 file=$2 context=$3 hash=$4
  shift 4
  local current old_id log start
  current=$(label_of "$image")
  if [ "$current" = "$hash" ] && [ "${LAB_REBUILD:-0}" != 1 ]; then
    say "$image is up to date (inputs ${hash:0:12}), not rebuilt"
    return 0
  fi
  old_id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  mkdir -p "$LOGS"
  log="$LOGS/$(tr '/:' '__' <<<"$image").log"
  if [ -z "$old_id" ]; then
    say "building $image from $file (inputs ${hash:0:12}; log: $log)"
  elif [ "$current" = "$hash" ]; then
    say "rebuilding $image from $file (LAB_REBUILD=1; log: $log)"
  elif [ -z "$current" ]; then
    say "rebuilding $image from $file (it has no lab.inputs label: built by hand?; log: $log)"
  else
    say "rebuilding $image from $file (inputs changed: ${current:0:12} -> ${hash:0:12}; log: $log)"
  fi
  start=$SECONDS
  if ! docker build -f "$file" --label "lab.inputs=$hash" "$@" -t "$image" "$context" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "building $image failed (last 30 lines above, all of it in $log)"
  fi
  local new_id
  new_id=$(docker image inspect -f '{{.Id}}' "$image")
  say "built $image in $((SECONDS - start)) s: ${new_id:7:12}, $(size_of "$image")"
  # Every build also keeps a tag of its inputs (<image>-<hash12>): an earlier image stays on
  # the host, addressable, so `python -m runners rerun RUN_DIR` can run a past run in exactly
  # the image its manifest names; the oldest beyond LAB_IMAGE_KEEP go (prune_kept).
  local keep
  keep=$(tagged "$image")
  docker tag "$image" "$keep-${hash:0:12}"
  say "kept as $keep-${hash:0:12}"
  prune_kept "$image"
}

# IMAGE with its tag (lab-portal -> lab-portal:latest)
tagged() {
  if [[ "${1##*/}" == *:* ]]; then echo "$1"; else echo "$1:latest"; fi
}

# prune_kept IMAGE: remove IMAGE's kept builds (<repo>:<tag>-<12 hex>) beyond the newest
# LAB_IMAGE_KEEP, by creation time. The one IMAGE points to stays, and so does one a container
# uses: docker refuses to remove it without -f, which is not used.
prune_kept() {
  [ "$KEEP" = all ] && return 0
  local image repo tag current t suffix id created ts err n=0
  image=$(tagged "$1")
  repo=${image%:*}
  tag=${image##*:}
  current=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  # without the image's own tag, its current build is unknown: remove nothing
  [ -n "$current" ] || return 0
  local -a kept=()
  while read -r t; do
    [[ "$t" == "$tag-"* ]] || continue
    suffix=${t#"$tag-"}
    [[ "$suffix" =~ ^[0-9a-f]{12}$ ]] || continue
    read -r id created < <(docker image inspect -f '{{.Id}} {{.Created}}' "$repo:$t" 2>/dev/null) || continue
    ts=$(date -d "$created" +%s%N 2>/dev/null) || continue
    kept+=("$ts $id $t $created")
  done < <(docker images "$repo" --format '{{.Tag}}')
  [ ${#kept[@]} -gt "$KEEP" ] || return 0
  while read -r _ id t created; do
    n=$((n + 1))
    if [ "$n" -le "$KEEP" ] || [ "$id" = "$current" ]; then
      continue
    fi
    if ! err=$(docker rmi "$repo:$t" 2>&1 >/dev/null); then
      say "kept $repo:$t beyond LAB_IMAGE_KEEP=$KEEP: ${err##*$'\n'}"
    elif docker image inspect "$id" >/dev/null 2>&1; then
      say "untagged the kept build $repo:$t (its image has another tag; LAB_IMAGE_KEEP=$KEEP)"
    else
      say "removed the kept build $repo:$t (built ${created%%.*}; LAB_IMAGE_KEEP=$KEEP)"
    fi
  done < <(printf '%s\n' "${kept[@]}" | sort -rn)
}

size_of() {
  docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}'
}

# --- prune: only remove old kept builds -----------------------------------------------------
if wants prune; then
  [ "$KEEP" = all ] && { say "LAB_IMAGE_KEEP=all: nothing to remove"; exit 0; }
  for image in "$RUNNER" "$CUDA_RUNNER" "$PORTAL" "$REDIS" "$POSTGRES"; do
    prune_kept "$image"
  done
  say "done: at most $KEEP kept builds per image (docker image prune also reclaims untagged build stages)"
  exit 0
fi

# --- base image ------------------------------------------------------------------------------
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  case "$BASE" in
    lab-base:*)
      say "base image $BASE missing: making it with docker/base.sh"
      docker/base.sh "$BASE"
      ;;
    *)
      say "base image $BASE missing: pulling it"
      docker pull "$BASE" ||
        die "cannot pull $BASE; unset LAB_BASE_IMAGE to make lab-base:bookworm locally (docker/base.sh)"
      ;;
  esac
else
  say "base image $BASE exists"
fi
base_id=$(docker image inspect -f '{{.Id}}' "$BASE")
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain -- runners workloads lab requirements.txt docker 2>/dev/null)" ]; then
  say "note: uncommitted changes in the copied sources; the images' LAB_COMMIT ($commit) does not include them"
fi

# --- wheelhouse (runner and portal) ----------------------------------------------------------
if wants runner || wants portal; then
  [ -x .venv/bin/pip ] || die "no .venv: run \`make install\` first (docker/wheelhouse.sh downloads with its pip)"
  say "filling the wheelhouse (docker/wheelhouse.sh)"
  docker/wheelhouse.sh | sed 's/^/images: /'
  # pip resolves markers for the host's Python (3.11.7 here); Debian bookworm's, in the images,
  # is 3.11.2, for which redis also needs async-timeout (python_full_version < "3.11.3").
  .venv/bin/pip download --quiet --only-binary=:all: --dest docker/wheelhouse \
    'async-timeout==5.0.1' 2>&1 | grep -v '^WARNING: Location' || true
fi

# --- runner (CPU) ----------------------------------------------------------------------------
if wants runner; then
  hash=$(inputs_hash "runner base=$base_id" docker/runner.Dockerfile \
    docker/requirements-runner.txt docker/wheelhouse runners workloads)
  build "$RUNNER" docker/runner.Dockerfile . "$hash" \
    --build-arg BASE_IMAGE="$BASE" --build-arg LAB_COMMIT="$commit"
fi

# --- runner (CUDA) ---------------------------------------------------------------------------
if wants runner-cuda; then
  [ -x .venv/bin/pip ] || die "no .venv: run \`make install\` first (docker/wheelhouse.sh downloads with its pip)"
  say "filling the CUDA wheelhouse (docker/wheelhouse.sh --cuda)"
  docker/wheelhouse.sh --cuda | sed 's/^/images: /'
  if [ "${LAB_CUDA_HOROVOD:-1}" != 0 ]; then
    say "Horovod with NCCL for it (scripts/horovod-wheel.sh --cuda; built once, then cached)"
    scripts/horovod-wheel.sh --cuda 2>&1 | sed 's/^/images: /' ||
      die "building Horovod with NCCL failed (above); LAB_CUDA_HOROVOD=0 builds the image without it"
  else
    say "without Horovod (LAB_CUDA_HOROVOD=0)"
    rm -f docker/wheelhouse-cuda/horovod-*.whl
  fi
  cuda_base=${LAB_CUDA_BASE_IMAGE:-$BASE}
  if ! docker image inspect "$cuda_base" >/dev/null 2>&1; then
    say "base image $cuda_base missing: pulling it"
    docker pull "$cuda_base" || die "cannot pull $cuda_base; unset LAB_CUDA_BASE_IMAGE to build on $BASE"
  fi
  cuda_base_id=$(docker image inspect -f '{{.Id}}' "$cuda_base")
  # The wheels are for the Python of this machine's .venv: the base must have the same one.
  version='import sys; print("%d.%d" % sys.version_info[:2])'
  host_py=$(.venv/bin/python -c "$version")
  base_py=$(docker run --rm --entrypoint python3 "$cuda_base" -c "$version" 2>/dev/null || echo none)
  [ "$host_py" = "$base_py" ] || die "the CUDA wheelhouse is for Python $host_py (this machine's .venv), \
$cuda_base has Python $base_py: use a base with Python $host_py, or build from the package index \
(docker/README.md, The CUDA runner image)"
  hash=$(inputs_hash "runner-cuda base=$cuda_base_id" docker/runner-cuda.Dockerfile \
    docker/requirements-runner.txt docker/wheelhouse-cuda runners workloads)
  context=$LOGS/context-cuda
  trap 'rm -rf "$context"' EXIT
  rm -rf "$context"
  mkdir -p "$context/docker"
  # hard links (no copy of 2.7 GB) where the file system allows them, else a copy
  cp -al runners workloads "$context/" 2>/dev/null || cp -a runners workloads "$context/"
  cp -al docker/wheelhouse-cuda "$context/docker/" 2>/dev/null ||
    cp -a docker/wheelhouse-cuda "$context/docker/"
  cp docker/requirements-runner.txt docker/runner-cuda.Dockerfile "$context/docker/"
  printf '**/__pycache__\n**/*.pyc\n' >"$context/.dockerignore"
  build "$CUDA_RUNNER" "$context/docker/runner-cuda.Dockerfile" \
    "$context" "$hash" --build-arg BASE_IMAGE="$cuda_base" --build-arg LAB_COMMIT="$commit"
  rm -rf "$context"
fi

# --- portal (web, worker, beat) --------------------------------------------------------------
if wants portal; then
  hash=$(inputs_hash "portal base=$base_id" docker/portal.Dockerfile docker/entrypoint.sh \
    requirements.txt docker/requirements-runner.txt docker/wheelhouse manage.py pyproject.toml \
    lab runners workloads claims examples)
  build "$PORTAL" docker/portal.Dockerfile . "$hash" \
    --build-arg BASE_IMAGE="$BASE" --build-arg LAB_COMMIT="$commit"
fi

# --- Redis and PostgreSQL from Debian packages (LAB_LOCAL_SERVICES=1) ------------------------
if wants services; then
  hash=$(inputs_hash "redis base=$base_id" docker/services/redis.Dockerfile)
  build "$REDIS" docker/services/redis.Dockerfile docker/services "$hash" \
    --build-arg BASE_IMAGE="$BASE"
  hash=$(inputs_hash "postgres base=$base_id" docker/services/postgres.Dockerfile \
    docker/services/postgres-entrypoint.sh)
  build "$POSTGRES" docker/services/postgres.Dockerfile docker/services "$hash" \
    --build-arg BASE_IMAGE="$BASE"
  say "for docker/compose.yml, set in its env file: LAB_REDIS_IMAGE=$REDIS LAB_POSTGRES_IMAGE=$POSTGRES"
fi

say "done:"
shown=("$BASE")
wants runner && shown+=("$RUNNER")
wants portal && shown+=("$PORTAL")
wants runner-cuda && shown+=("$CUDA_RUNNER")
wants services && shown+=("$REDIS" "$POSTGRES")
for image in "${shown[@]}"; do
  printf 'images:   %-28s %s  %s\n' "$image" \
    "$(docker image inspect -f '{{.Id}}' "$image" | cut -c8-19)" "$(size_of "$image")"
done
