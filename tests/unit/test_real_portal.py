"""Real mode from the portal and the API: how the runs train (``real``) is part of an
experiment's definition, the machine is checked before anything is stored, and a real run
runs alone on the machine."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from django.test import override_settings

from lab import actions
from lab.accounts.models import ApiToken
from lab.experiments.models import Experiment
from lab.runs.models import Run
from tests.unit.test_actions import finish_all

pytestmark = pytest.mark.django_db

BODY = {
    "name": "real ddp",
    "system": "wfbp",
    "baselines": ["ddp"],
    "workloads": ["vgg16-debug"],
    "mode": "real",
    "seeds": [0],
    "iterations": 3,
    "cluster": {"workers": 2, "bandwidth_gbps": 1},
    "real": {"network": "loopback", "dataset": "shapes", "lr": 0.05},
}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.fixture
def token(user) -> str:
    return ApiToken.issue(user)


def post(client, body, token):
    return client.post(
        "/api/experiments/",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token}",
    )


def test_the_api_stores_how_real_runs_train(client, token):
    response = post(client, BODY, token)
    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get()
    assert experiment.real == {"network": "loopback", "dataset": "shapes", "lr": 0.05}
    for run in experiment.runs.all():
        assert run.spec["mode"] == "real"
        real = run.spec["real"]
        assert (real["network"], real["dataset"], real["lr"]) == ("loopback", "shapes", 0.05)
        assert real["momentum"] == 0.0  # the default, resolved in the stored spec
        assert real["dispatch"] == "auto"


def test_the_api_takes_the_engine_s_dispatch(client, token):
    body = {**BODY, "real": {**BODY["real"], "dispatch": "thread"}}
    response = post(client, body, token)
    assert response.status_code == 201, response.content
    assert all(
        run.spec["real"]["dispatch"] == "thread" for run in Experiment.objects.get().runs.all()
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"real": {"network": "satellite"}}, "real.network"),
        ({"real": {"lr": -1}}, "real.lr"),
        ({"real": {"comm_priority": "urgent"}}, "real.comm_priority"),
        ({"real": {"device": "tpu"}}, "real.device"),
        ({"real": {"dispatch": "inline"}}, "real.dispatch"),  # auto or thread
        ({"real": {"ps_transport": "pipelined"}}, "real.ps_transport"),  # the PS arena's
        pytest.param(
            {"real": {"device": "cuda"}},
            "real.device",
            marks=pytest.mark.skipif(_cuda(), reason="this machine has GPUs for them"),
        ),  # fmt: skip
        ({"real": {"threads_per_rank": 2}}, "real.threads_per_rank"),
        pytest.param(
            {"real": {"network": "shaped"}, "cluster": {"workers": 2, "latency_us": 2e5}},
            "cluster.latency_us",  # more than the emulated network adds (100 ms)
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="the emulated network is root's"),
        ),  # fmt: skip
        ({"real": "fast"}, "real"),
        ({"cluster": {"workers": 1000}}, "cluster.workers"),  # more ranks than this machine holds
        ({"system": "oasis", "baselines": []}, "mode"),  # the cluster arena has no real mode
    ],
)
def test_the_api_refuses_a_real_experiment_this_machine_cannot_run(client, token, change, field):
    response = post(client, {**BODY, **change}, token)
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert not Experiment.objects.exists()


def test_the_api_and_the_form_refuse_a_model_whose_training_step_does_not_fit(
    client, token, user, monkeypatch
):
    from django.urls import reverse

    from runners.real import launch
    from tests.unit.test_portal import FORM, field_block

    monkeypatch.setattr(launch, "_available_memory", lambda: 23 * 2**30)
    monkeypatch.setattr(launch, "cuda_devices", lambda: 0)
    body = {**BODY, "workloads": ["gpt2"], "real": {"network": "loopback"}}
    response = post(client, body, token)
    assert response.status_code == 400
    error = response.json()["errors"]["workloads"]
    assert "a worker's training step holds 23.2 GiB at batch_size 8" in str(error), error
    assert "fewer workers" in str(error)
    ok = post(client, {**body, "batch_size": 1}, token)  # 2 x 7.6 GiB
    assert ok.status_code == 201, ok.json()
    assert {r.spec["batch_size"] for r in Run.objects.all()} == {1}
    form = {**FORM, "mode": "real", "workloads": ["gpt2"], "cluster_workers": "2"}
    client.force_login(user)
    response = client.post(reverse("experiment-new"), form)
    block = field_block(response.content.decode(), "workloads")
    assert 'class="error"' in block and "23.2 GiB at batch_size 8" in block, block
    assert Experiment.objects.count() == 1  # the API's at batch size 1 alone


@pytest.mark.parametrize(
    ("system", "key", "value", "only"),
    [
        ("wfbp", "ps_transport", "pipelined", "parameter-server"),
        ("ps-default", "dispatch", "thread", "all-reduce"),
        ("ps-default", "nodes", 2, "all-reduce"),
        ("ps-default", "ddp_timeline", True, "all-reduce"),
    ],
)
def test_the_api_refuses_another_arena_s_real_field(client, token, system, key, value, only):
    """The form hides and ignores a real field of the other arena; the API refuses it,
    naming the field, rather than dropping it."""
    baselines = ["ddp"] if system == "wfbp" else []
    body = {**BODY, "system": system, "baselines": baselines, "real": {key: value}}
    response = post(client, body, token)
    assert response.status_code == 400, response.content
    (message,) = response.json()["errors"][f"real.{key}"]
    assert f"used by the {only} arena only" in message and system in message
    assert not Experiment.objects.exists()


def test_the_api_takes_ddp_s_timeline_for_an_all_reduce_experiment(client, token):
    body = {**BODY, "real": {**BODY["real"], "ddp_timeline": True}}
    response = post(client, body, token)
    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get()
    assert experiment.real["ddp_timeline"] is True
    assert {run.spec["real"].get("ddp_timeline") for run in experiment.runs.all()} == {True}
    # a string is not a bool (the form's field alone would read "no" as true)
    bad = post(client, {**body, "real": {"ddp_timeline": "no"}}, token)
    assert bad.status_code == 400
    assert bad.json()["errors"]["real.ddp_timeline"] == ["must be true or false (got 'no')"]


def test_the_form_ignores_a_hidden_real_field_of_the_other_arena(client, user):
    """A member who chose the pipelined PS transport, then an all-reduce system: the hidden
    field still posts its value, which the form leaves out of the runs (the spec would refuse
    it for wfbp) instead of showing an error on a field the member cannot see."""
    from lab.api.views import _form_data

    client.force_login(user)
    form, errors = _form_data({**BODY, "real": {**BODY["real"], "dispatch": "thread"}})
    assert not errors
    form["real_ps_transport"] = "pipelined"  # left so when a PS system was chosen
    response = client.post("/experiments/new/", form)
    assert response.status_code == 302, response.context["form"].errors
    experiment = Experiment.objects.get()
    assert "ps_transport" not in experiment.real and experiment.real["dispatch"] == "thread"


def test_a_simulated_experiment_ignores_the_real_fields(client, token):
    response = post(client, {**BODY, "mode": "sim", "real": {"network": "satellite"}}, token)
    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get()
    assert experiment.real == {}
    assert all("real" not in run.spec for run in experiment.runs.all())


def test_the_form_copies_the_real_options(client, user, token):
    post(client, BODY, token)
    client.force_login(user)
    experiment = Experiment.objects.get()
    page = client.get(f"/experiments/new/?copy={experiment.pk}").content.decode()
    assert 'id="real-fields"' in page and 'data-modes="real"' in page
    assert '<option value="loopback" selected>' in page
    assert 'name="real_lr" value="0.05"' in page


@override_settings(MAX_PARALLEL_RUNS=4)
def test_a_real_run_runs_alone_on_the_machine(user, config, real_config, client):
    sim = actions.create_experiment(user, dataclasses.replace(config, seeds=(0,)))
    real = actions.create_experiment(user, real_config)
    (real_run,) = real.runs.all()
    sim_ids = list(sim.runs.values_list("pk", flat=True))
    assert actions.launch_run(sim_ids[0])
    assert not actions.launch_run(real_run.pk)  # a simulation is running
    finish_all(sim)  # reconciling, it launches the real run once the machine is free
    real_run.refresh_from_db()
    assert real_run.state == Run.RUNNING
    rerun = actions.rerun_experiment(sim, user)
    assert not actions.launch_run(rerun.runs.first().pk)  # the real run has the machine
    finish_all(real, timeout_s=180)
    real_run.refresh_from_db()
    assert real_run.state == Run.SUCCEEDED, (real_run.home / "process.log").read_text()[-3000:]
    assert real_run.measurements.filter(metric="final_loss").exists()
    actions.render_figures(real.pk)  # the task a finished run queues
    client.force_login(user)
    page = client.get(f"/experiments/{real.pk}/").content.decode()
    assert "<th>network</th>" in page and "<td>loopback" in page
    # where it trained: this machine's CPU (real.device auto; no GPU was given to the run)
    assert "<th>device</th>" in page and "<td>cpu</td>" in page
    # and what other processes on the machine took beside it (quiet, or how much)
    assert "<th>beside it</th>" in page
    assert "final loss" in page
    # beside it the simulator's prediction (its twin) or why it has none on this machine
    assert "real-vs-sim.png" in page or "No simulator prediction beside these real" in page
    finish_all(rerun)


def test_the_other_work_beside_a_run_is_told_when_it_reached_the_flag():
    from lab.experiments.views import beside

    assert beside(None) == ""  # a run from before it was measured
    assert beside({"cores": 0.02, "top": [{"name": "sshd", "cores": 0.02}],
                   "flagged": False}) == "quiet"  # fmt: skip
    busy = {
        "cores": 0.93,
        "flagged": True,
        "top": [{"name": "python3 loop.py", "cores": 0.91}, {"name": "make", "cores": 0.02}],
    }
    assert beside(busy) == "other work: 0.93 cores (python3 loop.py 0.91, make 0.02)"


def test_the_page_says_which_runs_were_measured_beside_other_work(client, user, token):
    """A succeeded real run whose summary flags other work: its cell names it and a line
    below the table says what that means and what to do; a quiet run is not named."""
    from django.utils import timezone

    from runners import rundir

    post(client, {**BODY, "seeds": [0, 1]}, token)
    experiment = Experiment.objects.get()
    runs = list(experiment.runs.order_by("id"))
    busy = {
        "cores": 0.66,
        "flagged": True,
        "window_s": 1.5,
        "top": [
            {"name": "python3 loop.py", "cores": 0.64},
            {"name": "celery", "cores": 0.02},
            {"name": "honcho", "cores": 0.005},
        ],
    }
    quiet = {"cores": 0.0, "flagged": False, "window_s": 1.5, "top": []}  # fmt: skip
    # the network's note as the testbed words it: a headline in the cell, the whole on hover
    network = {"kind": "shaped", "note": "latency not emulated (no netem qdisc): the testbed's own"}
    for run, others in zip(runs, [busy, quiet, quiet, quiet], strict=True):
        run.run_dir.mkdir(parents=True)
        summary = {"metrics": {}, "units": {}, "others": others, "network": network}
        rundir.write_json(run.run_dir / rundir.SUMMARY, summary)
    experiment.runs.update(state=Run.SUCCEEDED, finished_at=timezone.now())
    client.force_login(user)
    page = " ".join(client.get(f"/experiments/{experiment.pk}/").content.decode().split())
    assert "<td>other work: 0.66 cores (python3 loop.py 0.64, celery 0.02)</td>" in page
    assert page.count("<td>quiet</td>") == 3
    whole = "shaped (latency not emulated (no netem qdisc): the testbed&#x27;s own)"
    short = "shaped (latency not emulated: the testbed&#x27;s own)"
    assert page.count(f'<td title="{whole}">{short}</td>') == 4
    assert (
        f"Run {runs[0].pk}: other processes on the host took a tenth of a core or more while "
        "it measured (<em>beside it</em>), so its times are slower and noisier than alone."
    ) in page


def test_a_run_s_network_is_told_with_what_its_testbed_counted():
    from lab.experiments.views import told

    assert told({"kind": "loopback"}) == "loopback"
    assert told({"kind": "shaped", "note": "latency not emulated"}) == (
        "shaped (latency not emulated)"
    )
    clean = {"retransmits": 1, "reorderings": 0, "drops": 0}
    assert told({"kind": "shaped", "health": clean}) == "shaped"
    bad = {"retransmits": 12, "reorderings": 30, "drops": 2}
    # the runs table's headline: the note without its asides in parentheses (the why)
    delayed = "250 us a way added (no netem (qdisc)); packets may be reordered (no RPS)"
    assert told({"kind": "shaped", "note": delayed}, headline=True) == (
        "shaped (250 us a way added; packets may be reordered)"
    )
    assert told({"kind": "cpu", "note": "no CUDA device"}, headline=True) == "cpu (no CUDA device)"
    assert told({"kind": "shaped", "note": "n", "health": bad}) == (
        "shaped (n; 30 packets reordered, 2 dropped, 12 retransmitted)"
    )
