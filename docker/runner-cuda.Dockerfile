# The runner image (CUDA): the CUDA build of PyTorch 2.13.0 from PyPI, the lab's runners and
# workloads; same contract as the CPU image (docker/runner.Dockerfile): runs one run,
# `python -m runners run spec.json --out run` in /work, as user `lab` (uid 1000), and the docker
# executor gives it its GPUs by UUID (device requests; needs the NVIDIA Container Toolkit).
#
# Two ways to build it, from the project root:
# * `make image-cuda` (scripts/images.sh runner-cuda): the wheels downloaded on the host first
#   (docker/wheelhouse.sh --cuda: PyPI's CUDA build of torch and its NVIDIA libraries), then an
#   offline build on the lab's Debian base. Built and tested this way on our machines, which
#   have no GPU, no registry and no certificates for PyPI inside a build (the tests:
#   tests/integration/test_cuda_image.py); a run on a GPU is not verified.
# * on a host that reaches Docker Hub and PyPI, from the package index:
#   docker build -f docker/runner-cuda.Dockerfile --build-arg LAB_COMMIT=$(git rev-parse HEAD) \
#     -t lab-runner:cuda .
# Then, on a GPU host:
#   docker run --rm --gpus all lab-runner:cuda list            # then, to check the GPU:
#   docker run --rm --gpus all --entrypoint python lab-runner:cuda -c \
#     'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())'
# and point that host's worker at it: LAB_RUNNER_IMAGE=lab-runner:cuda (docker/README.md).
#
# The real Horovod (NCCL + Gloo, PyTorch): Horovod 0.28.1 has no wheel and must be compiled
# against CUDA, NCCL and this torch. `make image-cuda` compiles it on the host
# (scripts/horovod-wheel.sh --cuda: nvcc from PyPI's NVIDIA wheels, no CUDA installation, no GPU)
# and puts the wheel into the wheelhouse; this file installs a horovod-*.whl found there and
# fails unless `horovodrun --check-build` lists NCCL. From the package index instead, build it
# here with a CUDA *devel* image of the same Ubuntu release as the base (the virtual environment
# is copied across, so Python must be the same):
#   docker build -f docker/runner-cuda.Dockerfile --build-arg WITH_HOROVOD=1 \
#     --build-arg BUILD_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04 \
#     --build-arg LAB_COMMIT=$(git rev-parse HEAD) -t lab-runner:cuda .
# (the C++17 patch of scripts/horovod-wheel.sh is applied here too; about 10 minutes.)
# CUDA 13 because torch 2.13.0's PyPI wheel is built against it (its metadata, read 2026-11-23:
# cuda-toolkit==13.0.3, nvidia-nccl-cu13==2.29.7, nvidia-cudnn-cu13==9.20.0.48): Horovod's NCCL
# operations must be compiled against the CUDA and NCCL torch uses. Horovod 0.28.1 compiles
# against CUDA 13.0 (scripts/horovod-wheel.sh --cuda, 2026-11-23); the devel-image route above
# is not tried here (no registry). The host's driver must support CUDA 13.
#
# BASE_IMAGE: an image with the CUDA runtime (the torch wheel brings its own CUDA libraries, so
# any Ubuntu/Debian with apt works too, the driver comes from the NVIDIA Container Toolkit).
# Ubuntu 24.04 has Python 3.12, which the lab supports (requires-python >= 3.11).
ARG BASE_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04
ARG BUILD_IMAGE=${BASE_IMAGE}

FROM ${BUILD_IMAGE} AS deps
ARG WITH_HOROVOD=0
# 1: fail the build unless torch is a CUDA build (0 only to smoke-test this file with a CPU wheel).
ARG EXPECT_CUDA=1
# pip reads PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_TRUSTED_HOST from build args
# of those names: a local mirror, or e.g. PIP_INDEX_URL=https://download.pytorch.org/whl/cu128
# with PIP_EXTRA_INDEX_URL=https://pypi.org/simple for another CUDA build of torch 2.13.0.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_TRUSTED_HOST
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/*
# With docker/wheelhouse-cuda (docker/wheelhouse.sh --cuda; scripts/images.sh runner-cuda sends
# it in the build context) pip installs from it, offline; without it (the project root as the
# context: .dockerignore leaves the folder out, and the pattern below then matches nothing) from
# the package index.
COPY docker/requirements-runner.txt docker/wheelhouse-cud[a] /wheelhouse/
RUN python3 -m venv /opt/venv \
 && if ls /wheelhouse/torch-*.whl >/dev/null 2>&1; then \
      /opt/venv/bin/pip install --quiet --no-index --find-links /wheelhouse -r /wheelhouse/requirements-runner.txt; \
    else \
      /opt/venv/bin/pip install --quiet -r /wheelhouse/requirements-runner.txt; \
    fi \
 && /opt/venv/bin/python -c "import sys, torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda); sys.exit(1 if sys.argv[1] == '1' and not torch.version.cuda else 0)" "$EXPECT_CUDA" \
 && if ls /wheelhouse/horovod-*.whl >/dev/null 2>&1; then \
      /opt/venv/bin/pip install --quiet --no-index --no-deps /wheelhouse/horovod-*.whl \
      && /opt/venv/bin/horovodrun --check-build | tee /tmp/check \
      && grep -q '\[X\] NCCL' /tmp/check && grep -q '\[X\] PyTorch' /tmp/check \
      && grep -q '\[X\] Gloo' /tmp/check && rm /tmp/check; \
    fi \
 && rm -rf /wheelhouse
# Horovod 0.28.1 from its sdist (pinned by hash), CMAKE_CXX_STANDARD 14 -> 17 as in
# scripts/horovod-wheel.sh, NCCL for GPU collectives and Gloo for the rest, no MPI.
RUN if [ "$WITH_HOROVOD" = 1 ]; then \
      set -e; \
      command -v nvcc >/dev/null || { echo "WITH_HOROVOD=1 needs a CUDA devel BUILD_IMAGE (nvcc, NCCL headers)" >&2; exit 1; }; \
      apt-get update -qq; \
      apt-get install -y -qq --no-install-recommends cmake g++ make python3-dev >/dev/null; \
      rm -rf /var/lib/apt/lists/*; \
      echo "horovod==0.28.1 --hash=sha256:92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0" >/tmp/horovod.txt; \
      /opt/venv/bin/pip download --quiet --no-deps --no-binary :all: --require-hashes -r /tmp/horovod.txt -d /tmp; \
      tar -xzf /tmp/horovod-0.28.1.tar.gz -C /tmp; \
      for f in /tmp/horovod-0.28.1/CMakeLists.txt /tmp/horovod-0.28.1/horovod/torch/CMakeLists.txt; do \
        grep -q 'set(CMAKE_CXX_STANDARD 14)' "$f"; sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$f"; done; \
      HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 \
      HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_MPI=1 MAKEFLAGS="-j$(nproc)" \
        /opt/venv/bin/pip install --quiet --no-build-isolation --no-deps /tmp/horovod-0.28.1; \
      /opt/venv/bin/horovodrun --check-build; \
      rm -rf /tmp/horovod*; \
    fi \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
ARG LAB_COMMIT=unknown
LABEL org.opencontainers.image.title="scheduler-lab runner (CUDA)" \
      org.opencontainers.image.revision="${LAB_COMMIT}"
# python3 at the same path as in the deps stage (the venv links to it); Ubuntu images ship a
# user `ubuntu` with uid 1000: the runner's user `lab` takes that uid (the docker executor's).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 tini >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
 && useradd --create-home --uid 1000 --shell /bin/bash lab \
 && mkdir -p /work && chown lab:lab /work
COPY --from=deps /opt/venv /opt/venv
COPY runners /opt/lab/runners
COPY workloads /opt/lab/workloads
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/lab \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LAB_COMMIT=${LAB_COMMIT} \
    LAB_IMAGE_KIND=cuda
USER lab
WORKDIR /work
HEALTHCHECK --interval=30s --timeout=20s --retries=3 \
  CMD ["python", "-c", "import runners.spec, torch"]
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "runners"]
CMD ["list"]
