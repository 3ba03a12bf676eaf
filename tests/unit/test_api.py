"""The JSON API with token authentication."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from lab.accounts.models import ApiToken
from lab.experiments.models import Experiment
from lab.runs.models import Run

pytestmark = pytest.mark.django_db

BODY = {
    "name": "api experiment",
    "system": "bytescheduler",
    "baselines": ["wfbp"],
    "workloads": ["resnet50-debug"],
    "mode": "sim",
    "seeds": [0, 1, 2],
    "cluster": {"workers": 4, "bandwidth_gbps": 10},
    "params": {"credit_bytes": 1_000_000},
}
CLUSTER_BODY = {
    "name": "oasis vs fifo",
    "system": "oasis",
    "baselines": ["fifo"],
    "trace": {"generator": "philly", "jobs": 50, "jobs_per_hour": 20, "ps_fraction": 0.5},
    "cluster": {"servers": 4, "gpus_per_server": 4},
    "seeds": [0, 1],
}


@pytest.fixture
def token(user) -> str:
    return ApiToken.issue(user)


def post(client, url, body, token):
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(
        url, data, content_type="application/json", HTTP_AUTHORIZATION=f"Token {token}"
    )


@pytest.mark.parametrize("header", ["", "Token nope", "Bearer x", "Token "])
def test_it_refuses_requests_without_a_valid_token(client, header):
    response = client.get("/api/experiments/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert "apitoken" in response.json()["error"]


def test_only_a_digest_of_the_token_is_stored(token):
    stored = ApiToken.objects.get()
    assert token not in (stored.key_digest, stored.prefix) and len(stored.key_digest) == 64


def test_creating_an_experiment_returns_201_with_its_id(client, token, user):
    response = post(client, "/api/experiments/", BODY, token)
    assert response.status_code == 201
    data = response.json()
    experiment = Experiment.objects.get(pk=data["id"])
    assert experiment.owner == user
    assert data["status"] == "queued"
    assert len(data["runs"]) == 6 and {r["status"] for r in data["runs"]} == {"queued"}
    assert data["cluster"]["workers"] == 4 and data["iterations"] == 20


def test_optimizer_updates_are_refused_with_why(client, token):
    body = {**BODY, "cluster": {**BODY.get("cluster", {}), "optimizer_update": True}}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 400
    message = response.json()["errors"]["cluster.optimizer_update"][0]
    assert "measured profile" in message and "python -m runners run" in message
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cluster": {"workers": 0}}, "cluster.workers"),
        ({"cluster": {"nics": 2}}, "cluster.nics"),
        ({"cluster": {"stragglers": [{"worker": 1}]}}, "cluster.stragglers[0]"),
        ({"cluster": {"stragglers": [{"worker": 9, "slowdown": 2}]}}, "cluster.stragglers"),
        ({"cluster": {"bandwidth_gbps": [1, "fast"]}}, "cluster.bandwidth_gbps"),
        ({"cluster": {"bandwidth_gbps": [10, -1]}}, "cluster.bandwidth_gbps"),
        ({"cluster": {"workers": [4, 4]}}, "cluster.workers"),
        ({"cluster": {"ps": 9, "servers": 8}}, "cluster.ps"),
        (
            {
                "cluster": {
                    "ps_stragglers": [{"server": 8, "bandwidth_factor": 0.5, "cpu_slowdown": 1}]
                }
            },
            "cluster.ps_stragglers",
        ),
        (
            {"cluster": {"ps_stragglers": [{"server": 1, "bandwidth_factor": 0.5}]}},
            "cluster.ps_stragglers[0]",
        ),
        ({"params": {"nope": 1}}, "params"),
        ({"workloads": ["mnist"]}, "workloads"),
        ({"workloads": "resnet50"}, "workloads"),
        ({"system": "pace-not-yet"}, "system"),
        ({"seeds": ["a"]}, "seeds"),
        ({"baselines": ["bytescheduler", "nope"]}, "baselines"),
        ({"colour": "red"}, "colour"),
        ({"name": ""}, "name"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": "lots"}, "batch_size"),
    ],
)
def test_bad_bodies_get_400_with_the_field_named_and_nothing_queued(client, token, change, field):
    response = post(client, "/api/experiments/", {**BODY, **change}, token)
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert not Run.objects.exists()


def test_the_batch_size_reaches_every_run_and_its_default_is_each_workload_s(client, token):
    body = {**BODY, "workloads": ["resnet50-debug", "vgg16"], "batch_size": 16}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    assert response.json()["batch_size"] == 16
    assert {r.spec["batch_size"] for r in Run.objects.all()} == {16}
    Run.objects.all().delete()
    response = post(client, "/api/experiments/", {**BODY, "workloads": ["vgg16"]}, token)
    assert response.json()["batch_size"] is None
    assert {r.spec["batch_size"] for r in Run.objects.all()} == {32}  # vgg16's default


def test_a_sweep_over_bandwidth_and_workers_creates_every_combination(client, token):
    body = {**BODY, "cluster": {"workers": [2, 4], "bandwidth_gbps": [1, 10, 100]}}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["sweep"] == {"bandwidth_gbps": [1.0, 10.0, 100.0], "workers": [2, 4]}
    entries = 1 + len(BODY.get("baselines", []))
    seeds = len(BODY.get("seeds", [0]))
    conditions = {
        (r["condition"]["workers"], r["condition"]["bandwidth_gbps"]) for r in data["runs"]
    }
    assert conditions == {(w, b) for w in (2, 4) for b in (1.0, 10.0, 100.0)}
    assert len(data["runs"]) == entries * len(BODY["workloads"]) * 6 * seeds


def test_ps_cluster_fields_and_time_varying_stragglers_reach_the_run_spec(client, token):
    cluster = {
        "workers": 4,
        "ps": 2,
        "servers": 3,
        "server_bandwidth_gbps": 40,
        "server_agg_gbps": 20,
        "overlap_slowdown": 0.2,
        "stragglers": [{"worker": 1, "slowdown": 2, "from_iteration": 3, "until_iteration": 6}],
        "ps_stragglers": [
            {"server": 2, "bandwidth_factor": 0.5, "cpu_slowdown": 3, "from_iteration": 4}
        ],
    }
    body = {**BODY, "system": "psld", "baselines": ["ps-default"], "cluster": cluster, "params": {}}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    spec = Run.objects.filter(system="psld").first().spec["cluster"]
    assert (spec["ps"], spec["servers"]) == (2, 3)
    assert (spec["server_bandwidth_gbps"], spec["server_agg_gbps"]) == (40.0, 20.0)
    assert spec["overlap_slowdown"] == 0.2
    assert spec["stragglers"] == [
        {"worker": 1, "slowdown": 2.0, "from_iteration": 3, "until_iteration": 6}
    ]
    assert spec["ps_stragglers"] == [
        {
            "server": 2,
            "bandwidth_factor": 0.5,
            "cpu_slowdown": 3.0,
            "from_iteration": 4,
            "until_iteration": None,
        }
    ]


def test_a_nic_straggler_reaches_the_run_spec_and_an_incomplete_one_is_refused(client, token):
    nic = {"worker": 1, "bandwidth_factor": 0.5, "from_iteration": 2}
    body = {**BODY, "cluster": {"workers": 4, "stragglers": [nic, {"worker": 0, "slowdown": 2}]}}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    spec = Run.objects.filter(system="bytescheduler").first().spec["cluster"]
    assert spec["stragglers"][0]["bandwidth_factor"] == 0.5
    assert spec["stragglers"][0]["slowdown"] == 1.0
    assert spec["stragglers"][1]["slowdown"] == 2.0
    bad = {**BODY, "cluster": {"workers": 4, "stragglers": [{"worker": 1}]}}
    response = post(client, "/api/experiments/", bad, token)
    assert response.status_code == 400
    assert (
        "slowdown and/or bandwidth_factor" in response.json()["errors"]["cluster.stragglers[0]"][0]
    )


def test_the_all_reduce_only_cluster_fields_are_refused_for_a_ps_system(client, token):
    body = {**BODY, "system": "horovod", "baselines": ["wfbp"], "params": {}}
    body["cluster"] = {
        "workers": 4,
        "cpu_collectives": True,
        "reduce_scatter_cost": 1.0,
        "busy_latency_us": 800.0,
        "negotiation": True,
        "link_burst_bytes": 262144,
    }
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    spec = Run.objects.filter(system="horovod").first().spec["cluster"]
    assert spec["cpu_collectives"] is True and spec["reduce_scatter_cost"] == 1.0
    assert spec["busy_latency_us"] == 800.0 and spec["negotiation"] is True
    assert spec["link_burst_bytes"] == 262144
    ps = {**body, "system": "ps-default", "baselines": ["byteps"]}
    response = post(client, "/api/experiments/", ps, token)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert "all-reduce arena only" in errors["cluster.cpu_collectives"][0]
    assert "cluster.link_burst_bytes" not in errors  # both arenas' NICs have the bucket


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("message_cpu_us", 350.0),
        ("jitter_groups", 2),
        ("server_agg_fixed_us", 40.0),
        ("host_cores", 2),
    ],  # fmt: skip
)
def test_the_ps_only_cluster_fields_are_refused_for_an_all_reduce_system(client, token, key, value):
    """The form drops a PS-only field for another arena (a hidden part of the page); the API
    refuses it, naming the field, rather than dropping it silently."""
    body = {**BODY, "system": "ps-default", "baselines": ["byteps"], "params": {}}
    body["cluster"] = {"workers": 4, key: value}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    assert Run.objects.filter(system="ps-default").first().spec["cluster"][key] == value
    wfbp = {**body, "system": "wfbp", "baselines": ["horovod"]}
    response = post(client, "/api/experiments/", wfbp, token)
    assert response.status_code == 400
    assert "parameter-server arena only" in response.json()["errors"][f"cluster.{key}"][0]


def test_the_shared_host_cores_are_taken_and_a_clash_is_refused_naming_the_field(client, token):
    """``host_cpu_model`` (PS arena): the runs get it; beside the message CPU it charges
    already, a 400 naming ``cluster.message_cpu_us``, and no experiment is made."""
    body = {**BODY, "system": "ps-default", "baselines": ["byteps"], "params": {}}
    body["cluster"] = {"workers": 4, "host_cores": 2, "host_cpu_model": "fair"}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    assert Run.objects.filter(system="ps-default").first().spec["cluster"]["host_cpu_model"] == (
        "fair"
    )
    made = Run.objects.count()
    body["cluster"] = {**body["cluster"], "message_cpu_us": 350.0}
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 400
    assert (
        "must be 0 with cluster.host_cpu_model fair"
        in (response.json()["errors"]["cluster.message_cpu_us"][0])
    )
    assert Run.objects.count() == made


def test_a_cluster_arena_experiment_runs_its_entries_on_the_given_trace(client, token):
    response = post(client, "/api/experiments/", CLUSTER_BODY, token)
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["workloads"] == [] and data["cluster"]["trace"]["jobs"] == 50
    assert sorted((r["system"], r["seed"]) for r in data["runs"]) == [
        ("fifo", 0),
        ("fifo", 1),
        ("oasis", 0),
        ("oasis", 1),
    ]
    for run in Run.objects.all():
        assert run.spec["trace"] == {
            "generator": "philly",
            "jobs": 50,
            "jobs_per_hour": 20.0,
            "ps_fraction": 0.5,
            "arrivals": "poisson",  # left out: the spec's default
            "duration_scale": 1.0,
        }
        assert (run.spec["cluster"]["servers"], run.spec["cluster"]["gpus_per_server"]) == (4, 4)
        assert run.spec["cluster"]["ps_servers"] == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"trace": {"file": "/etc/passwd", "format": "philly"}}, "trace.file"),
        ({"trace": {"generator": "philly", "throughputs": "/etc/hosts"}}, "trace.throughputs"),
        ({"trace": {"jobs": 0}}, "trace.jobs"),
        ({"trace": {"jobs_per_hour": [10, "fast"]}}, "trace.jobs_per_hour"),
        ({"trace": {"jobs_per_hour": []}}, "trace.jobs_per_hour"),
        ({"trace": {"jobs_per_hour": [10, 0]}}, "trace.jobs_per_hour"),
        ({"trace": {"jobs": [10, 20]}}, "trace.jobs"),
        ({"trace": {"generator": "gavel"}}, "trace.generator"),
        ({"trace": {"arrivals": "bursty"}}, "trace.arrivals"),
        ({"trace": {"colour": 1}}, "trace.colour"),
        ({"trace": "philly"}, "trace"),
        ({"cluster": {"servers": 0}}, "cluster.servers"),
        ({"cluster": {"gpus_per_server": True}}, "cluster.gpus_per_server"),
        ({"cluster": {"workers": 4}}, "cluster.workers"),
        ({"workloads": ["resnet50"]}, "workloads"),
        ({"iterations": 10}, "iterations"),
        ({"batch_size": 16}, "batch_size"),
        ({"baselines": ["wfbp"]}, "baselines"),
        ({"params": {"slot_s": -1}}, "params"),
    ],
)
def test_bad_cluster_arena_bodies_get_400_naming_the_field(client, token, change, field):
    response = post(client, "/api/experiments/", {**CLUSTER_BODY, **change}, token)
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert not Run.objects.exists()


def test_a_trace_file_is_refused_even_when_it_exists(client, token, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time\n")
    body = {**CLUSTER_BODY, "trace": {"file": str(trace), "format": "philly"}}
    response = post(client, "/api/experiments/", body, token)
    errors = response.json()["errors"]
    assert response.status_code == 400 and set(errors) == {"trace.file", "trace.format"}
    assert "generated trace" in errors["trace.file"][0]
    assert not Experiment.objects.exists()


def test_a_trace_is_refused_for_a_communication_system(client, token):
    response = post(client, "/api/experiments/", {**BODY, "trace": {"jobs": 5}}, token)
    assert response.status_code == 400 and "trace" in response.json()["errors"]


@pytest.mark.parametrize("body", ["{not json", "[1, 2]"])
def test_a_body_that_is_not_a_json_object_is_refused(client, token, body):
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 400 and "body" in response.json()["errors"]


def test_get_shows_status_runs_metrics_and_figures(client, token):
    created = post(client, "/api/experiments/", BODY, token).json()
    response = client.get(f"/api/experiments/{created['id']}/", HTTP_AUTHORIZATION=f"Token {token}")
    data = response.json()
    assert data["status"] == "queued"
    assert set(data["runs"][0]) >= {"id", "status", "metrics", "system", "workload", "seed"}
    assert data["figures"] == {}  # none yet: nothing has finished


def test_cancel_cancels_every_active_run(client, token):
    created = post(client, "/api/experiments/", BODY, token).json()
    response = post(client, f"/api/experiments/{created['id']}/cancel/", {}, token)
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled" and response.json()["cancelled_runs"] == 6


def test_the_apitoken_command_creates_the_user_and_prints_a_working_token(client, capsys):
    call_command("apitoken", "nightly-bot")
    token = capsys.readouterr().out.strip()
    response = client.get("/api/experiments/", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200 and response.json() == {"experiments": []}


def test_a_list_of_loads_sweeps_the_cluster_arena_like_a_list_of_workers(client, token):
    body = {
        **CLUSTER_BODY,
        "seeds": [0],
        "trace": {**CLUSTER_BODY["trace"], "jobs_per_hour": [5, 10, 20]},
    }
    response = post(client, "/api/experiments/", body, token)
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["sweep"] == {"jobs_per_hour": [5.0, 10.0, 20.0]}
    loads = sorted((r["system"], r["condition"]["jobs_per_hour"]) for r in data["runs"])
    assert loads == sorted((s, x) for s in ("oasis", "fifo") for x in (5.0, 10.0, 20.0))
