"""Two worker hosts emulated on one machine: two real Celery workers, each with its own
LAB_HOST_NAME and so its own queue (``host.<name>``), on a real Redis. Each registers its host
when it starts; ``beta`` sees one GPU through a fake ``nvidia-smi`` (no GPU here). A run that
asks for a GPU is routed to ``beta``; the Hosts page shows both hosts and who holds the GPU."""

from __future__ import annotations

import os

import pytest

from tests.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.redis]

UUID = "GPU-beta0000-1111-2222-3333-444444444444"
FAKE_SMI = f"""#!/bin/sh
case "$*" in
  *query-gpu*) echo "0, {UUID}, NVIDIA A100-SXM4-40GB, 40960" ;;
  *query-compute-apps*) ;;
  *) exit 2 ;;
esac
"""


def _waiting_for_both_hosts(stack):
    """Wait until workers alpha and beta have registered their hosts; return a function
    that runs Python in ``manage.py shell`` and returns its output."""

    def shell(code: str) -> str:
        return stack.manage("shell", "--no-imports", "-c", code).strip()

    def both_registered() -> bool:
        names = "print(sorted(Host.objects.values_list('name', flat=True)))"
        return shell(f"from lab.hosts.models import Host; {names}") == "['alpha', 'beta']"

    wait_for(both_registered, 60, 0.5, "both workers to register their hosts")
    return shell


def test_a_gpu_run_is_routed_to_the_host_that_has_the_gpu(fresh_stack, redis_server, tmp_path):
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    stack = fresh_stack(REDIS_URL=redis_server.url, LAB_HOST_NAME="alpha")
    stack.start(
        "worker",
        env={"LAB_HOST_NAME": "beta", "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
        as_name="worker-beta",
    )
    stack.manage("check")

    shell = _waiting_for_both_hosts(stack)
    gpu_body = {
        "name": "needs a gpu",
        "system": "wfbp",
        "mode": "real",
        "workloads": ["vgg16-debug"],
        "seeds": [0],
        "iterations": 4,
        "cluster": {"workers": 2},
        "real": {"gpus": 1, "dataset": "synthetic"},
    }
    status, created = stack.api("POST", "/api/experiments/", gpu_body)
    assert status == 201, created
    status, refused = stack.api("POST", "/api/experiments/", {**gpu_body, "real": {"gpus": 2}})
    assert status == 400 and "real.gpus" in refused["errors"], refused

    run_of = f"from lab.runs.models import Run; r = Run.objects.get(experiment_id={created['id']})"

    def running_on() -> str:
        state, _, where = shell(f"{run_of}; print(r.state, r.host)").partition(" ")
        return where if state in ("running", "succeeded") else ""

    assert wait_for(running_on, 90, 0.5, "the run to start") == "beta"
    claimed = shell(f"{run_of}; print([c.gpu.uuid for c in r.gpu_claims.all()])")
    assert claimed == f"['{UUID}']"
    data = stack.wait_finished(created["id"], timeout_s=240)
    assert data["status"] == "succeeded", data
    assert shell(f"{run_of}; print(r.gpu_claims.filter(released_at=None).count())") == "0"


def test_a_run_over_two_hosts_runs_one_node_on_each_worker(fresh_stack, redis_server):
    """``real.nodes: 2`` through the API: the worker that takes the run starts node 0, the
    other host's worker gets node 1 on its own queue, they train together and the run's
    results come from node 0. Both hosts are this machine (127.0.0.1)."""
    stack = fresh_stack(REDIS_URL=redis_server.url, LAB_HOST_NAME="alpha")
    stack.start("worker", env={"LAB_HOST_NAME": "beta"}, as_name="worker-beta")

    _waiting_for_both_hosts(stack)
    body = {
        "name": "two hosts",
        "system": "wfbp",
        "mode": "real",
        "workloads": ["vgg16-debug"],
        "seeds": [0],
        "iterations": 4,
        "cluster": {"workers": 2},
        "real": {"nodes": 2, "dataset": "synthetic", "network": "loopback"},
    }
    status, refused = stack.api("POST", "/api/experiments/", {**body, "real": {"nodes": 3}})
    assert status == 400 and "real.nodes" in refused["errors"], refused
    status, created = stack.api("POST", "/api/experiments/", body)
    assert status == 201, created
    data = stack.wait_finished(created["id"], timeout_s=240)
    assert data["status"] == "succeeded", data
    (run,) = data["runs"]
    hosts = {node["host"] for node in run["nodes"]}
    assert hosts == {"alpha", "beta"}, run["nodes"]
    assert run["metrics"]["iteration_time_s"] > 0
