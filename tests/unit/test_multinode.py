"""Real runs over several hosts (``real.nodes``): node 0 starts on the host that takes the run
and hosts the rendezvous; the other nodes start on free hosts through their queues; each host
reconciles its own nodes. The hosts are rows in the database standing for other machines, all
reachable at 127.0.0.1 here; the nodes are real local runner processes that rendezvous over
c10d and train together. With real Celery workers and containers:
tests/integration/test_docker_executor.py."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time

import pytest
from django.utils import timezone

from lab import actions
from lab.hosts.models import Host
from lab.runs.models import Run, RunNode
from runners.executors import local
from runners.spec import SpecError, validate
from tests.conftest import require_horovod
from tests.unit.test_routing import gpu_run

pytestmark = pytest.mark.django_db


def host(name: str) -> Host:
    return Host.objects.create(
        name=name, queue=f"host.{name}", last_seen=timezone.now(), address="127.0.0.1"
    )


def two_node_run(config, iterations: int = 6, system: str = "wfbp"):
    """test_routing's real run, on two hosts over loopback instead of on a GPU."""
    real = {"network": "loopback", "nodes": 2}
    return dataclasses.replace(gpu_run(config), iterations=iterations, real=real, system=system)


@pytest.fixture
def hosts(settings, monkeypatch):
    """Hosts a and b, a shared broker (so several hosts are possible), and the launch_node
    messages recorded instead of sent."""
    from lab.runs import tasks

    settings.REDIS_URL = "redis://hosts-share-this:6379/0"
    host("a")
    host("b")
    sent: list[tuple[list[int], str]] = []
    monkeypatch.setattr(
        tasks.launch_node, "apply_async", lambda args, queue: sent.append((args, queue))
    )
    return sent


def as_host(settings, name: str, then):
    settings.HOST_NAME = name
    return then()


def run_both_until_done(settings, run: Run, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name in ("a", "b"):
            as_host(settings, name, actions.reconcile)
        run.refresh_from_db()
        if run.state != Run.RUNNING:
            return
        time.sleep(0.3)
    pytest.fail(f"run still {run.state} after {timeout_s} s")


@pytest.mark.parametrize("system", ["wfbp", "horovod"])
def test_a_run_over_two_hosts_trains_with_one_node_on_each(
    user, config, settings, hosts, django_capture_on_commit_callbacks, system
):
    """wfbp: torchrun's c10d rendezvous at node 0; horovod: the real Horovod, its rendezvous
    server on node 0 at the port the nodes were given."""
    if system == "horovod":
        require_horovod()
    run = actions.create_experiment(user, two_node_run(config, system=system)).runs.get()
    with django_capture_on_commit_callbacks(execute=True):
        assert as_host(settings, "a", lambda: actions.launch_run(run.pk))
    run.refresh_from_db()
    assert (run.state, run.host) == (Run.RUNNING, "a")
    node = RunNode.objects.get(run=run)
    assert (node.rank, node.host, node.attempt) == (1, "b", 1)
    assert node.rendezvous.startswith("127.0.0.1:")
    assert hosts == [([run.pk, 1, 1], "host.b")], "node 1 goes to b's queue"
    # b is busy with the node: it takes no other run meanwhile; a does not either.
    assert as_host(settings, "b", actions._node_here)

    assert as_host(settings, "b", lambda: actions.launch_node(run.pk, 1, 1))
    assert not as_host(settings, "b", lambda: actions.launch_node(run.pk, 1, 1)), "idempotent"
    run_both_until_done(settings, run)

    assert run.state == Run.SUCCEEDED, run.error
    deadline = time.monotonic() + 60  # node 1 ends by itself, a moment after node 0
    while node.exit_code is None and time.monotonic() < deadline:
        as_host(settings, "b", actions.reconcile)
        node.refresh_from_db()
        time.sleep(0.2)
    assert node.exit_code == 0
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["network"]["kind"] == "nodes"
    assert summary["metrics"]["iteration_time_s"] > 0
    assert (node.home / "run" / "summary.json").exists(), "node 1 ran a runner of its own"
    assert run.measurements.filter(metric="iteration_time_s").exists()
    ranks = sorted(p.name for p in (node.home / "run" / "ranks").glob("rank*.json"))
    assert ranks == ["rank0.json", "rank1.json"], "each node has every rank's record"


def test_a_failed_node_fails_the_run_and_node_0_is_stopped(
    user, config, settings, hosts, django_capture_on_commit_callbacks
):
    run = actions.create_experiment(user, two_node_run(config, iterations=100_000)).runs.get()
    with django_capture_on_commit_callbacks(execute=True):
        assert as_host(settings, "a", lambda: actions.launch_run(run.pk))
    assert as_host(settings, "b", lambda: actions.launch_node(run.pk, 1, 1))
    node = RunNode.objects.get(run=run)
    node_pid = local.parse_handle(node.handle).pid
    time.sleep(2)
    os.killpg(node_pid, signal.SIGKILL)
    run_both_until_done(settings, run, timeout_s=60)

    assert run.state == Run.FAILED
    assert "node 1 on b" in run.error
    first = local.parse_handle(run.handle)
    deadline = time.monotonic() + 30
    while local.poll(run.home, first).state == "running" and time.monotonic() < deadline:
        as_host(settings, "a", actions.reconcile)
        time.sleep(0.3)
    assert local.poll(run.home, first).state != "running", "node 0 was stopped"


def test_a_node_whose_worker_died_before_recording_it_is_adopted_not_failed(
    user, config, settings, hosts, django_capture_on_commit_callbacks, caplog
):
    """b's worker started node 1, then died before it wrote the handle: b's reconcile finds
    the job in the node's home and follows it, so node 0 does not take it for a node that
    never started (past LAUNCH_GRACE_S it would fail the run while node 1 trains on, and
    nothing would stop node 1)."""
    settings.LAUNCH_GRACE_S = 1.0
    run = actions.create_experiment(user, two_node_run(config)).runs.get()
    with django_capture_on_commit_callbacks(execute=True):
        assert as_host(settings, "a", lambda: actions.launch_run(run.pk))
    assert as_host(settings, "b", lambda: actions.launch_node(run.pk, 1, 1))
    node = RunNode.objects.get(run=run)
    started = node.handle
    RunNode.objects.filter(pk=node.pk).update(handle="", started_at=None)  # never recorded
    time.sleep(1.5)  # past the grace: node 0's host would now fail the run for it
    as_host(settings, "b", actions.reconcile)  # b's worker, back, reconciles first
    node.refresh_from_db()
    assert node.handle == started and node.started_at is not None
    assert f"run {run.pk} node 1: its job" in caplog.text and "adopted" in caplog.text
    as_host(settings, "a", actions.reconcile)
    run.refresh_from_db()
    assert run.state == Run.RUNNING, run.error
    run_both_until_done(settings, run)
    assert run.state == Run.SUCCEEDED, run.error


def test_a_run_waits_for_enough_free_hosts(user, config, settings, hosts):
    run = actions.create_experiment(user, two_node_run(config)).runs.get()
    Host.objects.filter(name="b").update(last_seen=timezone.now() - timezone.timedelta(hours=1))
    assert not as_host(settings, "a", lambda: actions.launch_run(run.pk))
    run.refresh_from_db()
    assert run.state == Run.QUEUED and not RunNode.objects.exists() and not hosts


def test_a_node_that_never_starts_fails_the_run_with_a_reason(
    user, config, settings, hosts, django_capture_on_commit_callbacks
):
    settings.LAUNCH_GRACE_S = 1.0
    run = actions.create_experiment(user, two_node_run(config, iterations=100_000)).runs.get()
    with django_capture_on_commit_callbacks(execute=True):
        assert as_host(settings, "a", lambda: actions.launch_run(run.pk))
    time.sleep(1.5)  # b's worker never takes the message
    as_host(settings, "a", actions.reconcile)
    run.refresh_from_db()
    assert run.state == Run.FAILED
    assert "node 1 on b did not start" in run.error and "worker" in run.error
    assert local.poll(run.home, local.parse_handle(run.handle)).state != "running"


def test_submission_refuses_more_hosts_than_the_lab_has(user, config, settings, hosts):
    with pytest.raises(SpecError) as err:
        actions.create_experiment(
            user,
            dataclasses.replace(two_node_run(config), real={"nodes": 3}, cluster={"workers": 3}),
        )
    assert err.value.field == "real.nodes" and "3 hosts asked, 2 registered" in str(err.value)
    settings.REDIS_URL = None  # the embedded broker: one machine
    with pytest.raises(SpecError, match="needs Redis"):
        actions.create_experiment(user, two_node_run(config))


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"system": "ps-default"}, "real.nodes", "all-reduce arena"),
        ({"cluster": {"workers": 3}}, "real.nodes", "split evenly"),
        ({"real": {"nodes": 2, "network": "shaped"}}, "real.network", "own network"),
        ({"real": {"nodes": 0}}, "real.nodes", "between 1 and 64"),
    ],
)
def test_bad_multi_host_specs_name_the_field(change, field, words):
    raw = {
        "system": "wfbp",
        "mode": "real",
        "workload": "vgg16-debug",
        "cluster": {"workers": 2},
        "real": {"nodes": 2},
        **change,
    }
    with pytest.raises(SpecError) as err:
        validate(raw)
    assert err.value.field == field and words in str(err.value)


@pytest.mark.parametrize("name", ["host; rm -rf /", "--net=host", "a b", "x" * 200])
def test_a_node_network_that_is_not_a_docker_network_name_is_refused(name):
    from runners.executors.base import Resources

    with pytest.raises(ValueError, match="not a Docker network name"):
        Resources(network=name)
    assert Resources(network="lab-nodes_1.overlay").network == "lab-nodes_1.overlay"


def test_a_run_waiting_for_hosts_does_not_hold_up_the_queue(user, config, settings, hosts):
    """The oldest queued run is real and needs two hosts, only one is live: the simulation
    queued after it still starts (a single-host real run would have the queue wait for it)."""
    Host.objects.filter(name="b").update(last_seen=timezone.now() - timezone.timedelta(hours=1))
    waiting = actions.create_experiment(user, two_node_run(config)).runs.get()
    later = actions.create_experiment(user, dataclasses.replace(config, seeds=(0,)))
    counts = as_host(settings, "a", actions.reconcile)
    waiting.refresh_from_db()
    assert waiting.state == Run.QUEUED
    assert counts["launched"] >= 1
    assert later.runs.filter(state=Run.RUNNING).exists()
    actions.cancel_experiment(later)
