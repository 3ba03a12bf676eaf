"""Runs on several hosts: a run that asks for GPUs starts only on a host that has them free,
gets them by UUID and gives them back; submission refuses what no host has; dispatch asks every
live host's queue. Hosts are rows in the database standing for other machines (their GPUs are
made up: there is no GPU here); the runs are real local processes. The same routing with two
real Celery workers on two queues: tests/integration/test_hosts_stack.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from django.utils import timezone

from lab import actions
from lab.hosts.models import Gpu, GpuClaim, Host
from lab.runs.models import Run
from runners.spec import SpecError
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_run_left_training(db):
    """These runs train for 100,000 iterations until a test cancels them: one that fails
    half-way must not leave its run taking the cores from the rest of the suite (it did once
    in CI, for 25 minutes)."""
    yield
    for run in Run.objects.filter(state=Run.RUNNING):
        actions.cancel_run(run)


def host(name: str, gpus: int = 0, seen: bool = True) -> Host:
    made = Host.objects.create(
        name=name,
        queue=f"host.{name}",
        last_seen=timezone.now() if seen else timezone.now() - timezone.timedelta(hours=1),
    )
    for index in range(gpus):
        Gpu.objects.create(
            host=made, index=index, uuid=f"GPU-{name}-{index}", model="NVIDIA A100", memory_mb=1
        )
    return made


def gpu_run(config, gpus: int = 1, **real):
    return dataclasses.replace(
        config,
        system="wfbp",
        baselines=(),
        params={},
        mode="real",
        workloads=("vgg16-debug",),
        seeds=(0,),
        iterations=100_000,
        cluster={"workers": 2},
        real={"gpus": gpus, **real},
    )


def environ(pid: int) -> dict[str, str]:
    """The run process's environment, once it shows ``CUDA_VISIBLE_DEVICES``: read while the
    launcher's shell execs the runner, ``/proc/<pid>/environ`` can come back empty (a race
    seen once in CI); an environment that never has it still fails, after the wait."""

    def read() -> dict[str, str]:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(item.decode().split("=", 1) for item in raw if b"=" in item)

    return wait_for(
        lambda: (env := read()) and "CUDA_VISIBLE_DEVICES" in env and env,
        timeout_s=10,
        interval_s=0.05,
        what=f"CUDA_VISIBLE_DEVICES in process {pid}'s environment",
    )


def test_a_gpu_run_starts_only_where_gpus_are_free_and_gives_them_back(user, config, settings):
    host("cpu-box")
    host("gpu-box", gpus=2)
    run = actions.create_experiment(user, gpu_run(config)).runs.get()

    settings.HOST_NAME = "cpu-box"
    assert not actions.launch_run(run.pk), "no GPU on this host: the run waits"
    run.refresh_from_db()
    assert run.state == Run.QUEUED and not GpuClaim.objects.exists()

    settings.HOST_NAME = "gpu-box"
    assert actions.launch_run(run.pk)
    run.refresh_from_db()
    assert (run.state, run.host, run.executor) == (Run.RUNNING, "gpu-box", "local")
    claim = GpuClaim.objects.get(run=run, released_at=None)
    assert claim.gpu.host.name == "gpu-box"
    assert environ(run.pid)["CUDA_VISIBLE_DEVICES"] == claim.gpu.uuid
    from django.test import Client

    page = Client()
    page.force_login(user)
    html = page.get(f"/experiments/{run.experiment_id}/").content.decode()
    assert "gpu-box · local" in html, "the runs table says where each run runs"

    assert actions.cancel_run(run)
    assert not GpuClaim.objects.filter(released_at=None).exists(), "cancel releases the GPU"


def test_a_host_without_the_gpus_never_shows_the_run_running_on_it(
    user, config, settings, monkeypatch
):
    """The GPUs are claimed in the transaction that moves the run to running, so that a host
    without them free rolls the move back unseen: before, the run was running on that host
    (committed) until the claim failed and put it back, and a page or a second worker
    looking then saw it there (the hosts stack test did, under load in CI)."""
    from django.db import connection

    host("cpu-box")
    host("gpu-box", gpus=1)
    run = actions.create_experiment(user, gpu_run(config)).runs.get()
    seen = []
    claim = actions._claim_gpus
    depth = len(connection.savepoint_ids)  # the test's own transaction (pytest-django's)

    def claim_inside(run):
        inside = len(connection.savepoint_ids) > depth  # within the launch's atomic block
        seen.append((inside, Run.objects.get(pk=run.pk).state))
        return claim(run)

    monkeypatch.setattr(actions, "_claim_gpus", claim_inside)
    settings.HOST_NAME = "cpu-box"
    assert not actions.launch_run(run.pk)
    assert seen == [(True, Run.RUNNING)], "claimed inside the move, which is then undone"
    run.refresh_from_db()
    assert (run.state, run.host, run.started_at) == (Run.QUEUED, "", None)
    assert not GpuClaim.objects.exists()
    settings.HOST_NAME = "gpu-box"
    assert actions.launch_run(run.pk)
    run.refresh_from_db()
    assert (run.state, run.host) == (Run.RUNNING, "gpu-box")
    assert GpuClaim.objects.filter(run=run, released_at=None).count() == 1
    assert actions.cancel_run(run)


def test_a_run_without_gpus_sees_none_of_the_host_s(user, config, settings):
    """Only the ledger hands out GPUs: a run that asked for none gets an empty
    ``CUDA_VISIBLE_DEVICES`` (``real.device: auto`` would otherwise take any GPU it sees,
    another run's included)."""
    host("gpu-box", gpus=2)
    settings.HOST_NAME = "gpu-box"
    run = actions.create_experiment(user, gpu_run(config, gpus=0)).runs.get()
    assert actions.launch_run(run.pk)
    run.refresh_from_db()
    assert environ(run.pid)["CUDA_VISIBLE_DEVICES"] == ""
    assert not GpuClaim.objects.exists()
    assert actions.cancel_run(run)


def test_two_runs_never_share_a_gpu(user, config, settings):
    settings.HOST_NAME = "gpu-box"
    settings.MAX_PARALLEL_RUNS = 4
    host("gpu-box", gpus=1)
    first = actions.create_experiment(user, gpu_run(config)).runs.get()
    second = actions.create_experiment(user, gpu_run(config)).runs.get()
    assert actions.launch_run(first.pk)
    assert not actions.launch_run(second.pk), "the only GPU is taken (and a real run runs alone)"
    actions.cancel_run(first)
    wait_for(lambda: actions.launch_run(second.pk), 20, what="the freed GPU to be handed out")
    second.refresh_from_db()
    assert GpuClaim.objects.get(run=second, released_at=None).gpu.uuid == "GPU-gpu-box-0"
    actions.cancel_run(second)


def test_submission_refuses_more_gpus_than_any_host_has(user, config):
    host("gpu-box", gpus=2)
    with pytest.raises(SpecError, match=r"real\.gpus: 4 GPUs asked, the largest host has 2"):
        actions.create_experiment(user, gpu_run(config, gpus=4))
    with pytest.raises(SpecError, match="real.gpus"):
        actions.create_experiment(user, gpu_run(config, gpus=1, gpu_model="H100"))
    assert not Run.objects.exists(), "nothing stored"


def test_the_api_answers_400_naming_the_field(client, user, config):
    from lab.accounts.models import ApiToken

    host("gpu-box", gpus=1)
    body = {
        "name": "too many",
        "system": "wfbp",
        "mode": "real",
        "workloads": ["vgg16-debug"],
        "seeds": [0],
        "cluster": {"workers": 2},
        "real": {"gpus": 3},
    }
    response = client.post(
        "/api/experiments/",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {ApiToken.issue(user)}",
    )
    assert response.status_code == 400, response.content
    assert "real.gpus" in response.json()["errors"]


def test_dispatch_asks_every_live_host_and_skips_stopped_ones(settings, monkeypatch):
    from lab.runs import tasks

    sent = []
    monkeypatch.setattr(  # what would go to the broker (the stack test sends it for real)
        tasks.reconcile_host, "apply_async", lambda args, queue, expires: sent.append(queue)
    )
    settings.REDIS_URL = "redis://hosts-share-this:6379/0"  # hosts need a shared broker
    host("a")
    host("b", gpus=1)
    host("gone", seen=False)
    assert actions.dispatch() == {"hosts": 2}
    assert sent == ["host.a", "host.b"]


def test_the_embedded_broker_gets_no_fan_out(settings, monkeypatch):
    """One machine, kombu's filesystem transport: the worker reconciles directly."""
    from lab.runs import tasks

    monkeypatch.setattr(tasks.reconcile_host, "apply_async", lambda **kw: pytest.fail("sent"))
    settings.REDIS_URL = None
    host("main")
    assert actions.dispatch() == {"finished": 0, "requeued": 0, "launched": 0}


def test_without_hosts_dispatch_reconciles_here(user, config):
    experiment = actions.create_experiment(user, dataclasses.replace(config, seeds=(0,)))
    counts = actions.dispatch()
    assert counts["launched"] == 2
    assert set(experiment.runs.values_list("state", flat=True)) == {Run.RUNNING}
    actions.cancel_experiment(experiment)


def test_cancel_asks_the_runs_own_host_to_stop_it(
    user, config, settings, monkeypatch, django_capture_on_commit_callbacks
):
    """The portal's web process cannot reach another host's processes (or, in compose, the
    Docker engine): the stop goes to that host's queue, where ``stop_run`` stops the job."""
    from lab.runs import tasks

    sent = []
    monkeypatch.setattr(
        tasks.stop_run, "apply_async", lambda args, queue: sent.append((args, queue))
    )
    host("gpu-box")
    run = actions.create_experiment(user, config).runs.first()
    Run.objects.filter(pk=run.pk).update(state=Run.RUNNING, host="gpu-box", handle="123:456")
    run.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        assert actions.cancel_run(run, by="alice")
    assert sent == [([run.pk], "host.gpu-box")]


def test_a_docker_run_of_this_host_is_stopped_by_its_worker_too(
    user, config, settings, monkeypatch, django_capture_on_commit_callbacks
):
    """In compose the web container shares the worker's LAB_HOST_NAME but has no Docker
    socket: a container run is stopped by the worker, through the host's queue."""
    from lab.runs import tasks

    sent = []
    monkeypatch.setattr(
        tasks.stop_run, "apply_async", lambda args, queue: sent.append((args, queue))
    )
    settings.HOST_NAME = "main"
    host("main")
    run = actions.create_experiment(user, config).runs.first()
    Run.objects.filter(pk=run.pk).update(
        state=Run.RUNNING, host="main", executor="docker", handle="f00"
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert actions.cancel_run(run)
    assert sent == [([run.pk], "host.main")]


def test_a_second_host_launching_the_same_run_leaves_the_winners_gpus_alone(user, config, settings):
    host("gpu-a", gpus=1)
    host("gpu-b", gpus=1)
    run = actions.create_experiment(user, gpu_run(config)).runs.get()
    settings.HOST_NAME = "gpu-a"
    assert actions.launch_run(run.pk)
    settings.HOST_NAME = "gpu-b"
    assert not actions.launch_run(run.pk), "already running on gpu-a"
    claim = GpuClaim.objects.get(run=run, released_at=None)
    assert claim.gpu.uuid == "GPU-gpu-a-0", "the winner keeps its GPU"
    settings.HOST_NAME = "gpu-a"
    actions.cancel_run(run)


def test_runs_of_a_lost_host_fail_with_a_reason_and_give_their_gpus_back(
    user, config, settings, monkeypatch
):
    """A host whose worker stopped reconciling long ago: its running runs fail (not re-queued:
    the job may still run there); a host seen recently and this host's own runs are left alone."""
    from lab.hosts import ledger
    from lab.runs import tasks

    monkeypatch.setattr(tasks.reconcile_host, "apply_async", lambda **kw: None)
    settings.REDIS_URL = "redis://hosts-share-this:6379/0"
    settings.HOST_LOST_S = 600.0
    gone = host("gone", gpus=1, seen=False)  # last seen an hour ago
    host("alive", gpus=1)
    experiment = actions.create_experiment(user, dataclasses.replace(gpu_run(config), seeds=(0, 1)))
    on_gone, on_alive = experiment.runs.order_by("pk")
    Run.objects.filter(pk=on_gone.pk).update(state=Run.RUNNING, host="gone", handle="1:1")
    Run.objects.filter(pk=on_alive.pk).update(state=Run.RUNNING, host="alive", handle="2:2")
    ledger.claim_gpus(on_gone, 1, host="gone")
    ledger.claim_gpus(on_alive, 1, host="alive")
    host("portal", seen=False)  # this host, stale too: its own runs are its reconcile's
    mine = actions.create_experiment(user, dataclasses.replace(config, seeds=(0,))).runs.first()
    Run.objects.filter(pk=mine.pk).update(state=Run.RUNNING, host="portal", handle="3:3")
    settings.HOST_NAME = "portal"

    counts = actions.dispatch()

    assert counts["lost"] == 1
    on_gone.refresh_from_db()
    on_alive.refresh_from_db()
    assert on_gone.state == Run.FAILED and on_alive.state == Run.RUNNING
    assert "host gone lost" in on_gone.error and "restart the worker" in on_gone.error
    assert not ledger.held_gpus(on_gone) and ledger.held_gpus(on_alive)
    assert gone.gpus.get().claims.filter(released_at=None).count() == 0
    mine.refresh_from_db()
    assert mine.state == Run.RUNNING
    assert actions.fail_runs_of_lost_hosts() == 0  # once


@pytest.mark.parametrize("back", ["worker restarted", "reconcile after a gap"])
def test_a_lost_host_s_worker_stops_the_jobs_left_there_when_it_comes_back(
    user, config, settings, monkeypatch, back
):
    """The run's job kept running on a host whose worker was gone; another host failed the run
    as lost. When that host's worker starts again (worker_ready registers the host, then stops
    such jobs), or a worker that was cut off reconciles again, the job is stopped."""
    from lab.celery import _register_host
    from lab.runs import tasks
    from runners.executors import local

    monkeypatch.setattr(tasks.reconcile_host, "apply_async", lambda **kw: None)
    settings.REDIS_URL = "redis://hosts-share-this:6379/0"
    settings.HOST_LOST_S = 600.0
    host("box", gpus=1)
    host("portal")
    run = actions.create_experiment(user, gpu_run(config)).runs.get()
    settings.HOST_NAME = "box"
    assert actions.launch_run(run.pk)
    run.refresh_from_db()
    handle = local.parse_handle(run.handle)
    Host.objects.filter(name="box").update(last_seen=timezone.now() - timezone.timedelta(hours=1))

    settings.HOST_NAME = "portal"
    assert actions.fail_runs_of_lost_hosts() == 1
    run.refresh_from_db()
    assert run.state == Run.FAILED and "stopped when its worker comes back" in run.error
    assert local.poll(run.home, handle).state == "running", "nobody has stopped it yet"

    settings.HOST_NAME = "box"
    if back == "worker restarted":
        monkeypatch.setattr("lab.hosts.ledger.discover_gpus", lambda: [])
        _register_host(sender=None)  # what worker_ready runs
        assert "stopped" not in actions.reconcile(), "the host was seen just now"
    else:
        assert actions.reconcile()["stopped"] == 1
        assert "stopped" not in actions.reconcile(), "only on the first reconcile after the gap"
    assert local.poll(run.home, handle).state != "running"
    run.refresh_from_db()
    assert run.state == Run.FAILED and "host box lost" in run.error, "the reason stays"
