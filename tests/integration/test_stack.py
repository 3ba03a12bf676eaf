"""The whole path with real components: API -> queue -> worker -> detached run -> ingest ->
figures, on the embedded default, on a real Redis, and on a real PostgreSQL."""

from __future__ import annotations

import csv
import io
import os
import signal

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.integration

BODY = {
    "name": "integration",
    "system": "bytescheduler",
    "baselines": ["wfbp"],
    "workloads": ["resnet50-debug"],
    "seeds": [0, 1],
    "iterations": 5,
    "cluster": {"workers": 4, "bandwidth_gbps": 1.0},
    "params": {"credit_bytes": 100_000},
}


def run_experiment(stack, body=BODY) -> dict:
    status, created = stack.api("POST", "/api/experiments/", body)
    assert status == 201, created
    return stack.wait_finished(created["id"])


def assert_complete(
    stack, data: dict, expected_runs: int, retried: frozenset = frozenset()
) -> None:
    """``retried``: ids of runs allowed a second attempt (see the worker-kill test)."""
    assert data["status"] == "succeeded", data
    assert len(data["runs"]) == expected_runs
    for run in data["runs"]:
        assert run["status"] == "succeeded"
        assert run["attempt"] == (2 if run["id"] in retried else 1), run
        assert run["metrics"]["iteration_time_s"] > 0
    png = stack.fetch(data["figures"]["iteration_time_s"]["png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert stack.fetch(data["figures"]["iteration_time_s"]["pdf"])[:5] == b"%PDF-"
    rows = list(csv.DictReader(io.StringIO(stack.fetch(data["data_csv"]).decode())))
    systems = {r["system"] for r in rows if r["metric"] == "iteration_time_s"}
    assert systems == {"bytescheduler", "wfbp"}


def test_an_experiment_runs_end_to_end_on_the_embedded_default(embedded_stack):
    assert_complete(embedded_stack, run_experiment(embedded_stack), 4)


def test_a_worker_run_as_root_says_why_instead_of_celery_s_generic_warning(embedded_stack):
    """Root is what real runs on the emulated network need: the worker's log says so (and what
    the lab does about it) in place of Celery's "absolutely not recommended"."""
    # the whole log (``Stack.log`` keeps its tail): the note is written when the worker starts
    log = (embedded_stack.root / "logs" / "worker.log").read_text(errors="replace")
    assert "ready." in log  # the worker started (Celery's "lab-worker@... ready.")
    assert "absolutely not recommended" not in log
    if os.geteuid() == 0:
        assert "this worker runs as root: real runs on the emulated network need it" in log
    else:
        assert "this worker runs as root" not in log


@pytest.mark.redis
def test_an_experiment_runs_end_to_end_on_a_real_redis(fresh_stack, redis_server):
    stack = fresh_stack(REDIS_URL=redis_server.url)
    assert_complete(stack, run_experiment(stack), 4)


@pytest.mark.postgres
@pytest.mark.redis
def test_an_experiment_runs_end_to_end_on_postgresql_and_redis(
    fresh_stack, redis_server, postgres_server
):
    stack = fresh_stack(REDIS_URL=redis_server.url, DATABASE_URL=postgres_server.url)
    assert_complete(stack, run_experiment(stack), 4)


def test_invalid_bodies_are_refused_and_nothing_is_queued(embedded_stack):
    status, data = embedded_stack.api(
        "POST", "/api/experiments/", {**BODY, "cluster": {"workers": 0}}
    )
    assert status == 400 and "cluster.workers" in data["errors"]
    _, listing = embedded_stack.api("GET", "/api/experiments/")
    assert all(e["name"] != "never" for e in listing["experiments"])


@pytest.mark.redis
def test_a_worker_killed_mid_experiment_loses_and_duplicates_no_run(fresh_stack, redis_server):
    """SIGKILL the worker while runs are queued and running; a new worker finishes the job.

    Runs are detached processes, so the ones already running keep going and are reconciled by
    the new worker; queued ones are launched exactly once (conditional state transitions)."""
    stack = fresh_stack(REDIS_URL=redis_server.url, LAB_MAX_PARALLEL_RUNS="1")
    body = {
        **BODY,
        "seeds": [0, 1, 2],
        "workloads": ["vgg16"],
        "iterations": 3000,
        "cluster": {"workers": 16},
    }
    status, created = stack.api("POST", "/api/experiments/", body)
    assert status == 201

    def some_running() -> bool:
        _, data = stack.api("GET", f"/api/experiments/{created['id']}/")
        return any(r["status"] == "running" for r in data["runs"])

    wait_for(some_running, 60, 0.2, "a run to start")
    stack.stop("worker", signal.SIGKILL)
    stack.start("worker")
    data = stack.wait_finished(created["id"], timeout_s=300)
    runs_dir = stack.root / "results" / "runs"
    # A worker killed between claiming a run and starting its job leaves a run that never
    # started: it is re-queued (attempt 2), its first folder kept beside it without a job's
    # pid. A job that did start is adopted (``find``), never launched again.
    earlier = [p for p in runs_dir.iterdir() if ".attempt-" in p.name]
    assert not [p for p in earlier if (p / "pid").exists()], "a started job was launched again"
    retried = frozenset(int(p.name.split(".")[0]) for p in earlier)
    assert len(retried) == len(earlier) <= 1, earlier
    assert_complete(stack, data, 6, retried)
    assert sorted(p.name for p in runs_dir.iterdir() if p not in earlier) == sorted(
        str(r["id"]) for r in data["runs"]
    ), "one folder per run"
