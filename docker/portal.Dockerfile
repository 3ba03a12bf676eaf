# The portal image: Django web (gunicorn), Celery worker and Celery beat, one image with three
# start commands (docker/entrypoint.sh: web | worker | beat | migrate | manage ...). Python 3.11,
# requirements.txt installed from the wheelhouse (no network during the build), the lab's code,
# static files collected at build time, non-root user `lab` (uid 1000, as in the runner image).
# Build from the project root (scripts/images.sh does all of it and skips unchanged images):
#   docker/wheelhouse.sh && docker build -f docker/portal.Dockerfile \
#     --build-arg LAB_COMMIT=$(git rev-parse HEAD) -t lab-portal .
# BASE_IMAGE: any Debian bookworm with python3 + python3-venv + tini (docker/base.sh makes one).
# No secret is baked in: DJANGO_SECRET_KEY, DATABASE_URL, REDIS_URL... come from the environment
# at run time (docker/compose.yml).
ARG BASE_IMAGE=lab-base:bookworm

FROM ${BASE_IMAGE} AS deps
COPY docker/wheelhouse /wheelhouse
COPY requirements.txt docker/requirements-runner.txt /wheelhouse/requirements/
# requirements.txt for the portal; requirements-runner.txt (same pins) adds Horovod's run-time
# dependencies, so that a worker using the local executor runs runs with the same packages as
# the runner image, the real Horovod included when the wheelhouse has it.
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --quiet --no-index --find-links /wheelhouse \
      -r /wheelhouse/requirements/requirements.txt \
      -r /wheelhouse/requirements/requirements-runner.txt \
 && if ls /wheelhouse/horovod-*.whl >/dev/null 2>&1; then \
      /opt/venv/bin/pip install --quiet --no-index --no-deps /wheelhouse/horovod-*.whl; fi

FROM ${BASE_IMAGE}
RUN useradd --create-home --uid 1000 --shell /bin/bash lab \
 && install -d -o lab -g lab /var/lib/lab /srv/lab/results
COPY --from=deps /opt/venv /opt/venv
COPY manage.py pyproject.toml /opt/lab/
COPY lab /opt/lab/lab
COPY runners /opt/lab/runners
COPY workloads /opt/lab/workloads
COPY claims /opt/lab/claims
COPY examples /opt/lab/examples
COPY docker/entrypoint.sh /opt/lab/docker/entrypoint.sh
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/lab \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=lab.settings.base \
    LAB_VAR_DIR=/var/lib/lab \
    LAB_RESULTS_DIR=/srv/lab/results \
    LAB_IMAGE_KIND=portal
# Static files into $LAB_VAR_DIR/static (whitenoise serves them). Settings need a secret key to
# load: a throwaway one for this command only, not kept in the image's environment. Byte-compile
# the code now: it is read-only at run time and every start would compile it again.
RUN cd /opt/lab \
 && DJANGO_SECRET_KEY=collectstatic-only-not-a-secret python manage.py collectstatic --no-input -v 0 \
 && python -m compileall -q lab runners workloads \
 && chmod 0755 docker/entrypoint.sh \
 && rm -rf /var/lib/lab/broker /var/lib/lab/lab.sqlite3* \
 && chown -R lab:lab /var/lib/lab
# Last: a new commit alone then changes only these metadata layers, not the 1.5 GB venv copy.
ARG LAB_COMMIT=unknown
LABEL org.opencontainers.image.title="scheduler-lab portal (web, worker, beat)" \
      org.opencontainers.image.revision="${LAB_COMMIT}"
ENV LAB_COMMIT=${LAB_COMMIT}
USER lab
WORKDIR /opt/lab
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=25s --start-period=120s --retries=3 \
  CMD ["/opt/lab/docker/entrypoint.sh", "health"]
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/lab/docker/entrypoint.sh"]
CMD ["web"]
