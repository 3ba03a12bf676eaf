# The runner image (CPU): Python 3.11, PyTorch, the lab's runners and workloads, the real
# Horovod when the wheelhouse has it. Runs one run: `python -m runners run spec.json --out run`
# in /work (the run's home, mounted by the docker executor). Build from the project root:
#   docker/wheelhouse.sh && docker build -f docker/runner.Dockerfile -t lab-runner:cpu .
# BASE_IMAGE: any Debian bookworm with python3 + python3-venv (docker/base.sh makes one).
ARG BASE_IMAGE=lab-base:bookworm

FROM ${BASE_IMAGE} AS deps
COPY docker/wheelhouse /wheelhouse
COPY docker/requirements-runner.txt /wheelhouse/requirements-runner.txt
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --quiet --no-index --find-links /wheelhouse \
      -r /wheelhouse/requirements-runner.txt \
 && if ls /wheelhouse/horovod-*.whl >/dev/null 2>&1; then \
      /opt/venv/bin/pip install --quiet --no-index --no-deps /wheelhouse/horovod-*.whl; fi \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="scheduler-lab runner (CPU)"
RUN useradd --create-home --uid 1000 --shell /bin/bash lab \
 && mkdir -p /work && chown lab:lab /work
COPY --from=deps /opt/venv /opt/venv
COPY runners /opt/lab/runners
COPY workloads /opt/lab/workloads
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/lab \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LAB_IMAGE_KIND=cpu
# Last, so that a new commit does not re-copy the layers above.
ARG LAB_COMMIT=unknown
LABEL org.opencontainers.image.revision="${LAB_COMMIT}"
ENV LAB_COMMIT=${LAB_COMMIT}
USER lab
WORKDIR /work
HEALTHCHECK --interval=30s --timeout=10s --retries=3 \
  CMD ["python", "-c", "import runners.spec, torch"]
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "runners"]
CMD ["list"]
