"""Portal pages through Django's test client: login, CSRF, form validation, pages, files."""

from __future__ import annotations

import dataclasses

import pytest
from django.test import Client
from django.urls import reverse

from lab import actions
from lab.experiments import forms
from lab.experiments.models import Experiment
from lab.reports import claims, reproduce
from lab.runs.models import Run
from runners import registry
from runners.cluster import spec as cluster_spec

pytestmark = pytest.mark.django_db

FORM = {
    "name": "first",
    "system": "bytescheduler",
    "baselines": ["wfbp"],
    "workloads": ["resnet50-debug"],
    "mode": "sim",
    "seeds": "0, 1",
    "repeats": "3",
    "iterations": "5",
    "cluster_workers": "4",
    "cluster_bandwidth_gbps": "10",
    "cluster_latency_us": "10",
    "cluster_gpu": "v100",
    "cluster_compute_efficiency": "0.5",
    "cluster_compute_jitter_cv": "0.02",
    "cluster_stragglers": "",
    "params": "{}",
}
# A cluster-arena experiment as the page posts it: every field of the page is sent, the
# communication arenas' fields too (hidden, and here deliberately invalid: they are ignored).
CLUSTER_FORM = {
    **FORM,
    "name": "oasis vs fifo, drf",
    "system": "oasis",
    "baselines": ["fifo", "drf"],
    "workloads": ["resnet50-debug"],
    "iterations": "",
    "cluster_workers": "0",
    "params": '{"horizon_slots": 10}',
    "trace_generator": "dl2",
    "trace_jobs": "30",
    "trace_jobs_per_hour": "12",
    "trace_ps_fraction": "0",
    "trace_arrivals": "google",
    "trace_duration_scale": "0.5",
    **{
        forms.ARENA_PREFIX + f.name: str(f.default)
        for f in dataclasses.fields(cluster_spec.ClusterSpec)
    },
    "cluster_arena_servers": "4",
    "cluster_arena_gpus_per_server": "4",
    "cluster_arena_ps_servers": "2",
}


def field_block(html: str, field: str) -> str:
    """The HTML of one form field (label, input, help, errors)."""
    return html.split(f'id="field-{field}"', 1)[1].split('<div class="field', 1)[0]


@pytest.fixture
def browser(client, user) -> Client:
    client.force_login(user)
    return client


@pytest.mark.parametrize("name", ["experiment-list", "experiment-new", "catalogue"])
def test_every_page_requires_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_the_login_page_is_public(client):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    # the icon every page links, also where a browser asks for it on its own (no 404)
    assert 'rel="icon" href="/static/lab/favicon.svg"' in page.content.decode()
    icon = client.get("/favicon.ico")
    assert icon.status_code == 302 and icon.url == "/static/lab/favicon.svg"


def test_posts_without_a_csrf_token_are_refused(user, config):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    response = strict.post(reverse("experiment-new"), FORM)
    assert response.status_code == 403
    assert not Experiment.objects.exists()


def test_a_valid_form_creates_the_experiment_and_its_runs(browser, user):
    response = browser.post(reverse("experiment-new"), FORM)
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and response.url == experiment.get_absolute_url()
    assert experiment.owner == user
    assert experiment.seeds == [0, 1]
    assert experiment.runs.count() == 4


def test_repeats_give_seeds_when_no_seeds_are_given(browser):
    browser.post(reverse("experiment-new"), {**FORM, "seeds": "", "repeats": "3"})
    assert Experiment.objects.get().seeds == [0, 1, 2]


@pytest.mark.parametrize(
    ("change", "field", "text"),
    [
        ({"cluster_workers": "0"}, "cluster_workers", "cluster.workers"),
        ({"cluster_bandwidth_gbps": "-1"}, "cluster_bandwidth_gbps", "cluster.bandwidth_gbps"),
        ({"params": '{"credit": 4}'}, "params", "params.credit"),
        ({"params": '{"credit_bytes": 1}'}, "params", "params.credit_bytes: must be"),
        ({"params": "[1, 2]"}, "params", "JSON object"),
        ({"params": "{nope"}, "params", "Enter a valid JSON"),
        ({"seeds": "1, x"}, "seeds", "integers"),
        ({"seeds": "1, 1"}, "seeds", "distinct"),
        ({"cluster_stragglers": "9:2"}, "cluster_stragglers", "cluster.stragglers[0].worker"),
        ({"cluster_stragglers": "1-2"}, "cluster_stragglers", "worker:slowdown"),
        (
            {"cluster_stragglers": "1:2@x-4"},
            "cluster_stragglers",
            "worker:slowdown[:bandwidth_factor][@from-until]",
        ),
        ({"cluster_stragglers": "1:2@4-4"}, "cluster_stragglers", "until_iteration"),
        ({"cluster_bandwidth_gbps": "1, ten"}, "cluster_bandwidth_gbps", "numbers separated"),
        ({"cluster_bandwidth_gbps": "1, 10, 0"}, "cluster_bandwidth_gbps", "got 0"),
        ({"cluster_workers": "4, 4"}, "cluster_workers", "only once"),
        ({"cluster_workers": "2.5"}, "cluster_workers", "whole numbers"),
        ({"cluster_ps": "9"}, "cluster_ps", "more PSs than servers"),
        ({"cluster_ps_stragglers": "1:0.5"}, "cluster_ps_stragglers", "server:bandwidth_factor"),
        ({"cluster_ps_stragglers": "8:0.5:1"}, "cluster_ps_stragglers", "ps_stragglers[0].server"),
        ({"workloads": []}, "workloads", "required"),
        ({"system": "nope"}, "system", "Select a valid choice"),
        ({"mode": "real", "cluster_workers": "1000"}, "cluster_workers", "on this machine"),
        ({"batch_size": "0"}, "batch_size", "greater than or equal to 1"),
        ({"name": ""}, "name", "required"),
    ],
)
def test_invalid_input_is_shown_next_to_its_field_and_nothing_is_queued(
    browser, change, field, text
):
    response = browser.post(reverse("experiment-new"), {**FORM, **change})
    assert response.status_code == 200
    block = field_block(response.content.decode(), field)
    assert 'class="error"' in block and text in block, block
    assert not Experiment.objects.exists()
    assert not Run.objects.exists()


def test_the_batch_size_is_taken_shown_and_copied(browser):
    response = browser.post(reverse("experiment-new"), {**FORM, "batch_size": "4"})
    assert response.status_code == 302
    experiment = Experiment.objects.get()
    assert {r.spec["batch_size"] for r in experiment.runs.all()} == {4}
    page = browser.get(experiment.get_absolute_url()).content.decode()
    assert "batch size: 4 a worker" in page
    copy = browser.get(reverse("experiment-new") + f"?copy={experiment.pk}").content.decode()
    assert 'name="batch_size" value="4"' in copy
    Experiment.objects.all().delete()
    browser.post(reverse("experiment-new"), FORM)  # left empty: each workload's default
    experiment = Experiment.objects.get()
    assert experiment.batch_size == 0
    assert {r.spec["batch_size"] for r in experiment.runs.all()} == {8}  # resnet50-debug's
    assert "each workload's default" in browser.get(experiment.get_absolute_url()).content.decode()


def test_too_many_runs_are_refused(browser):
    seeds = ", ".join(str(s) for s in range(70))  # 2 entries x 4 workloads x 70 seeds = 560
    workloads = ["resnet50", "vgg16", "resnet50-debug", "vgg16-debug"]
    response = browser.post(
        reverse("experiment-new"), {**FORM, "seeds": seeds, "workloads": workloads}
    )
    assert "limit is 500" in response.content.decode()


def test_several_bandwidths_and_workers_make_a_sweep_of_every_combination(browser):
    form = {**FORM, "cluster_workers": "2, 4", "cluster_bandwidth_gbps": "1, 10, 100"}
    response = browser.post(reverse("experiment-new"), form)
    assert response.status_code == 302
    experiment = Experiment.objects.get()
    assert experiment.sweep == {"bandwidth_gbps": [1.0, 10.0, 100.0], "workers": [2, 4]}
    runs = list(experiment.runs.all())
    assert len(runs) == 2 * 2 * 3 * 2  # entries x workers x bandwidths x seeds
    points = {(r.spec["cluster"]["workers"], r.spec["cluster"]["bandwidth_gbps"]) for r in runs}
    assert points == {(w, b) for w in (2, 4) for b in (1.0, 10.0, 100.0)}
    page = browser.get(experiment.get_absolute_url()).content.decode()
    assert "2 workers, 100 Gbit/s" in page  # the runs table shows each run's condition


def test_a_copy_of_a_sweep_with_ps_fields_round_trips_through_the_form(browser):
    form = {
        **FORM,
        "system": "psld",
        "baselines": ["ps-default"],
        "params": "{}",
        "cluster_bandwidth_gbps": "5, 25",
        "cluster_stragglers": "1:2@3-6, 0:1.5",
        "cluster_ps": "2",
        "cluster_servers": "3",
        "cluster_server_agg_gbps": "20",
        "cluster_ps_stragglers": "2:0.5:3@4-",
    }
    assert browser.post(reverse("experiment-new"), form).status_code == 302
    source = Experiment.objects.get()
    spec = source.runs.first().spec["cluster"]
    assert spec["stragglers"][0] == {
        "worker": 1,
        "slowdown": 2.0,
        "from_iteration": 3,
        "until_iteration": 6,
    }
    assert spec["ps_stragglers"][0]["from_iteration"] == 4
    assert spec["server_bandwidth_gbps"] == spec["bandwidth_gbps"]  # empty: the workers' own
    initial = browser.get(reverse("experiment-new") + f"?copy={source.pk}").context["form"].initial
    copied = {**FORM, **{k: v for k, v in initial.items() if isinstance(v, (str, int, float))}}
    copied.update(baselines=initial["baselines"], workloads=initial["workloads"], params="{}")
    assert browser.post(reverse("experiment-new"), copied).status_code == 302
    copy = Experiment.objects.exclude(pk=source.pk).get()
    assert (copy.cluster, copy.sweep) == (source.cluster, source.sweep)


def test_a_nic_straggler_round_trips_through_the_form(browser):
    """worker:slowdown:bandwidth_factor (a slow NIC too); a copy writes it back the same."""
    form = {**FORM, "cluster_stragglers": "1:1:0.5@2-, 0:1.5"}
    assert browser.post(reverse("experiment-new"), form).status_code == 302
    source = Experiment.objects.get()
    stragglers = source.runs.first().spec["cluster"]["stragglers"]
    assert stragglers[0] == {"worker": 1, "slowdown": 1.0, "bandwidth_factor": 0.5,
                             "from_iteration": 2, "until_iteration": None}  # fmt: skip
    assert "bandwidth_factor" not in stragglers[1]
    initial = browser.get(reverse("experiment-new") + f"?copy={source.pk}").context["form"].initial
    assert initial["cluster_stragglers"] == "1:1.0:0.5@2-, 0:1.5"


def test_the_collective_fields_reach_all_reduce_runs_and_are_dropped_elsewhere(browser):
    """DeAR's split costs and CPU collectives: an all-reduce experiment's runs get them; a PS
    experiment ignores them (a hidden part of the form, set before the system changed)."""
    form = {
        **FORM,
        "cluster_reduce_scatter_cost": "1.0",
        "cluster_cpu_collectives": "on",
        "cluster_busy_latency_us": "900",
        "cluster_overlap_comm_slowdown": "0.3",
        "cluster_negotiation": "on",
        "cluster_link_burst_bytes": "262144",
        "cluster_collective_cpu_us": "450",
        "cluster_negotiation_cpu_us": "150",
        "cluster_round_latency_us": "2200",
        "cluster_round_loop": "free",
        "cluster_step_jitter_cv": "0.03",
        "cluster_background_slowdown": "0.4",
        "cluster_compute_scale": "1.3",
        "cluster_overlap_model": "integrated",
    }
    assert browser.post(reverse("experiment-new"), form).status_code == 302
    cluster = Experiment.objects.get().runs.first().spec["cluster"]
    assert cluster["reduce_scatter_cost"] == 1.0 and cluster["cpu_collectives"] is True
    assert cluster["busy_latency_us"] == 900.0 and cluster["overlap_comm_slowdown"] == 0.3
    assert cluster["negotiation"] is True and cluster["link_burst_bytes"] == 262144
    assert cluster["collective_cpu_us"] == 450.0 and cluster["step_jitter_cv"] == 0.03
    assert cluster["negotiation_cpu_us"] == 150.0 and cluster["background_slowdown"] == 0.4
    assert cluster["round_latency_us"] == 2200.0 and cluster["round_loop"] == "free"
    assert cluster["compute_scale"] == 1.3 and cluster["overlap_model"] == "integrated"
    ps = {**form, "system": "ps-default", "baselines": ["byteps"], "params": "{}"}
    assert browser.post(reverse("experiment-new"), ps).status_code == 302
    run = Experiment.objects.order_by("-pk").first().runs.first()
    assert "cpu_collectives" not in run.spec["cluster"]
    assert "reduce_scatter_cost" not in run.spec["cluster"]
    assert "busy_latency_us" not in run.spec["cluster"] and "negotiation" not in run.spec["cluster"]
    assert "round_latency_us" not in run.spec["cluster"] and "round_loop" not in run.spec["cluster"]
    assert run.spec["cluster"]["step_jitter_cv"] == 0.03, "both arenas' (a PS round waits too)"
    assert run.spec["cluster"]["compute_scale"] == 1.3, "both arenas'"
    assert run.spec["cluster"]["overlap_model"] == "integrated", "both arenas'"
    # the shaper's bucket applies to the PS arena's NICs as well
    assert run.spec["cluster"]["link_burst_bytes"] == 262144


def test_the_message_cpu_reaches_ps_runs_and_is_dropped_elsewhere(browser):
    """``message_cpu_us`` and ``message_cpu_at`` (PS arena): a PS experiment's runs get them;
    an all-reduce experiment ignores them (a hidden part of the form), and so do
    ``jitter_groups``, the rendezvous, ``server_agg_fixed_us`` and the host's fields."""
    fields = {"cluster_message_cpu_us": "350", "cluster_message_cpu_at": "handover",
              "cluster_jitter_groups": "2",
              "cluster_pull_rendezvous": "on", "cluster_push_rendezvous": "on",
              "cluster_push_buffered": "on",
              "cluster_server_agg_fixed_us": "40",
              "cluster_host_cores": "2", "cluster_host_message_cpu_us": "550",
              "cluster_host_cpu_ns_per_byte": "3.5"}  # fmt: skip
    ps = {**FORM, "system": "ps-default", "baselines": ["byteps"], "params": "{}", **fields}
    assert browser.post(reverse("experiment-new"), ps).status_code == 302
    cluster = Experiment.objects.get().runs.first().spec["cluster"]
    assert cluster["message_cpu_us"] == 350.0 and cluster["jitter_groups"] == 2
    assert cluster["message_cpu_at"] == "handover"
    assert cluster["pull_rendezvous"] is True and cluster["server_agg_fixed_us"] == 40.0
    assert cluster["push_rendezvous"] is True and cluster["push_buffered"] is True
    assert (cluster["host_cores"], cluster["host_message_cpu_us"]) == (2, 550.0)
    assert cluster["host_cpu_ns_per_byte"] == 3.5
    allreduce = {**FORM, **fields}
    assert browser.post(reverse("experiment-new"), allreduce).status_code == 302
    run = Experiment.objects.order_by("-pk").first().runs.first()
    assert not {"message_cpu_us", "message_cpu_at"} & set(run.spec["cluster"])
    assert not {"pull_rendezvous", "push_rendezvous", "push_buffered"} & set(run.spec["cluster"])
    assert "server_agg_fixed_us" not in run.spec["cluster"]
    assert not {"host_cores", "host_message_cpu_us", "host_cpu_ns_per_byte"} & set(
        run.spec["cluster"]
    )
    assert run.spec["cluster"].get("jitter_groups", 1) == 1


def test_the_shared_host_cores_reach_ps_runs_and_a_clash_is_named(browser):
    """``host_cpu_model`` (PS arena): a PS experiment's runs get the cores shared; with the
    message CPU charged as well, the form names the field that clashes."""
    fields = {"cluster_host_cores": "2", "cluster_host_message_cpu_us": "550",
              "cluster_host_cpu_model": "messages-first"}  # fmt: skip
    ps = {**FORM, "system": "ps-default", "baselines": ["byteps"], "params": "{}", **fields}
    assert browser.post(reverse("experiment-new"), ps).status_code == 302
    cluster = Experiment.objects.get().runs.first().spec["cluster"]
    assert (cluster["host_cores"], cluster["host_cpu_model"]) == (2, "messages-first")
    clash = browser.post(reverse("experiment-new"), {**ps, "cluster_message_cpu_us": "350"})
    assert clash.status_code == 200
    assert "must be 0 with cluster.host_cpu_model messages-first" in clash.content.decode()
    assert Experiment.objects.count() == 1


def test_the_form_preselects_the_baselines_of_the_systems_arena(browser):
    form = browser.get(reverse("experiment-new")).context["form"]
    system = registry.get(form.initial["system"])
    assert system.role == "system"
    expected = {e.name for e in registry.baselines(system.arena)}
    assert set(form.initial["baselines"]) == expected and len(expected) >= 3


def test_copy_prefills_the_form_from_an_experiment(browser, user, config):
    source = actions.create_experiment(user, config)
    form = browser.get(reverse("experiment-new") + f"?copy={source.pk}").context["form"]
    assert form.initial["name"] == "bs vs wfbp (copy)"
    assert form.initial["cluster_workers"] == 4
    assert form.initial["params"] == {"credit_bytes": 100_000}


def test_a_cluster_arena_experiment_runs_every_entry_and_seed_on_the_given_trace(browser):
    response = browser.post(reverse("experiment-new"), CLUSTER_FORM)
    assert response.status_code == 302, response.context["form"].errors
    experiment = Experiment.objects.get()
    assert experiment.workloads == [] and experiment.sweep == {}
    runs = list(experiment.runs.all())
    pairs = sorted((r.system, r.seed) for r in runs)
    assert pairs == sorted((s, seed) for s in ("oasis", "fifo", "drf") for seed in (0, 1))
    trace = {
        "generator": "dl2",
        "jobs": 30,
        "jobs_per_hour": 12.0,
        "ps_fraction": 0.0,
        "arrivals": "google",
        "duration_scale": 0.5,
    }
    for run in runs:
        assert run.spec["trace"] == trace
        assert "workload" not in run.spec and "iterations" not in run.spec
        cluster = run.spec["cluster"]
        assert (cluster["servers"], cluster["gpus_per_server"], cluster["ps_servers"]) == (4, 4, 2)
        assert cluster["nic_gbps"] == cluster_spec.ClusterSpec.nic_gbps
        assert run.workload == "dl2-30"
        assert ("horizon_slots" in run.spec["params"]) == (run.system == "oasis")
    assert next(r for r in runs if r.system == "oasis").spec["params"]["horizon_slots"] == 10


@pytest.mark.parametrize(
    ("change", "field", "text"),
    [
        ({"trace_jobs": "0"}, "trace_jobs", "trace.jobs: must be between 1"),
        ({"trace_jobs": ""}, "trace_jobs", "required"),
        ({"trace_jobs_per_hour": "-2"}, "trace_jobs_per_hour", "trace.jobs_per_hour"),
        ({"trace_jobs_per_hour": "10, fast"}, "trace_jobs_per_hour", "separated by commas"),
        ({"trace_jobs_per_hour": "10, 0"}, "trace_jobs_per_hour", "trace.jobs_per_hour"),
        ({"trace_ps_fraction": "1.5"}, "trace_ps_fraction", "trace.ps_fraction"),
        ({"trace_duration_scale": "0"}, "trace_duration_scale", "trace.duration_scale"),
        ({"trace_generator": "gavel"}, "trace_generator", "Select a valid choice"),
        ({"cluster_arena_servers": "0"}, "cluster_arena_servers", "cluster.servers"),
        ({"cluster_arena_max_interference": "11"}, "cluster_arena_max_interference", "cluster."),
        ({"cluster_arena_gpu": "tpu"}, "cluster_arena_gpu", "Select a valid choice"),
        ({"baselines": ["fifo", "wfbp"]}, "baselines", "wfbp: not in the"),
        ({"params": '{"slot_s": -1}'}, "params", "params.slot_s"),
        ({"mode": "real"}, "mode", "supports sim only"),
    ],
)
def test_a_bad_cluster_arena_value_is_shown_next_to_its_field(browser, change, field, text):
    response = browser.post(reverse("experiment-new"), {**CLUSTER_FORM, **change})
    assert response.status_code == 200
    html = response.content.decode()
    block = field_block(html, field)
    assert 'class="error"' in block and text in block, block
    assert html.count('class="error"') == 1  # the ignored fields show none
    assert not Experiment.objects.exists()


def test_a_communication_system_needs_workloads_and_ignores_the_cluster_arena_fields(browser):
    ignored = {"trace_jobs": "0", "cluster_arena_servers": "many", "trace_generator": "x"}
    response = browser.post(reverse("experiment-new"), {**FORM, **ignored, "workloads": []})
    html = response.content.decode()
    assert "required" in field_block(html, "workloads")
    assert html.count('class="error"') == 1 and not Experiment.objects.exists()
    assert browser.post(reverse("experiment-new"), {**FORM, **ignored}).status_code == 302
    assert "trace" not in Experiment.objects.get().runs.first().spec


def test_the_cluster_arena_fields_show_the_spec_defaults():
    form = forms.ExperimentForm()
    trace, cluster = cluster_spec.TraceSpec(), cluster_spec.ClusterSpec()
    spec_fields = {f.name for f in dataclasses.fields(cluster_spec.ClusterSpec)}
    assert set(forms.ARENA_CLUSTER_FIELDS) == spec_fields  # every field of the spec, no more
    for key in spec_fields:
        assert form.fields[forms.ARENA_PREFIX + key].initial == getattr(cluster, key), key
    for key in forms.TRACE_KEYS:
        assert form.fields[f"trace_{key}"].initial == getattr(trace, key), key
    trace_fields = {f.name for f in dataclasses.fields(cluster_spec.TraceSpec)}
    assert set(forms.TRACE_KEYS) | set(forms.TRACE_FILE_KEYS) == trace_fields
    assert not any(name.startswith("trace_file") for name in form.fields)  # no server paths


@pytest.mark.parametrize(
    ("spec_field", "arena", "form_field", "api_field"),
    [
        ("trace.jobs", "cluster", "trace_jobs", "trace.jobs"),
        ("cluster.servers", "cluster", "cluster_arena_servers", "cluster.servers"),
        ("cluster.servers", "ps", "cluster_servers", "cluster.servers"),
        ("cluster.stragglers[0].worker", "allreduce", "cluster_stragglers", "cluster.stragglers"),
        ("params.slot_s", "cluster", "params", "params"),
        ("trace.file", "cluster", None, None),
        ("cluster.nope", "cluster", None, None),
    ],
)
def test_a_spec_field_maps_to_the_form_field_and_api_name_of_its_arena(
    spec_field, arena, form_field, api_field
):
    assert forms.form_field(spec_field, arena) == form_field
    if form_field is not None:
        assert forms.api_field(form_field) == api_field


def test_the_system_menu_groups_systems_by_arena(browser):
    html = browser.get(reverse("experiment-new")).content.decode()
    menu = html.split('id="id_system"', 1)[1].split("</select>", 1)[0]
    cluster_group = menu.split('<optgroup label="cluster arena', 1)[1].split("</optgroup>", 1)[0]
    assert 'value="oasis"' in cluster_group and 'value="fifo"' in cluster_group
    assert 'value="pace"' not in cluster_group and 'value="pace"' in menu
    for part in ('id="trace-fields" data-arenas="cluster"', 'id="comm-fields"'):
        assert part in html


def page_values(form: forms.ExperimentForm) -> dict[str, object]:
    """What the page posts for an unbound form as it shows it (each field's value)."""
    values = {name: form[name].value() for name in form.fields}
    return {name: value for name, value in values.items() if value is not None}


def test_a_copy_of_a_cluster_experiment_round_trips_through_the_form(browser):
    assert browser.post(reverse("experiment-new"), CLUSTER_FORM).status_code == 302
    source = Experiment.objects.get()
    page = browser.get(reverse("experiment-new") + f"?copy={source.pk}")
    form = page.context["form"]
    assert (form.initial["trace_jobs"], form.initial["cluster_arena_servers"]) == (30, 4)
    assert 'value="30"' in field_block(page.content.decode(), "trace_jobs")
    assert browser.post(reverse("experiment-new"), page_values(form)).status_code == 302
    copy = Experiment.objects.exclude(pk=source.pk).get()
    assert (copy.system, copy.baselines, copy.seeds) == ("oasis", ["fifo", "drf"], [0, 1])
    assert copy.params == {"horizon_slots": 10}
    assert copy.cluster == source.cluster and copy.cluster["trace"]["generator"] == "dl2"


def test_a_copy_of_a_claims_cluster_experiment_queues_the_same_runs(browser, user):
    claim = next(c for c in claims.load_ledger() if c.arena == "cluster")
    source = actions.create_experiment(user, reproduce.experiment_config(claim, "sim"))
    form = browser.get(reverse("experiment-new") + f"?copy={source.pk}").context["form"]
    response = browser.post(reverse("experiment-new"), page_values(form))
    assert response.status_code == 302, response.context["form"].errors
    copy = Experiment.objects.exclude(pk=source.pk).get()

    def specs(experiment: Experiment) -> list[dict]:
        return [{**r.spec, "labels": {}} for r in experiment.runs.order_by("system", "seed")]

    assert specs(copy) == specs(source) and len(specs(source)) > 1


def test_the_experiment_page_shows_a_cluster_experiment(browser):
    browser.post(reverse("experiment-new"), CLUSTER_FORM)
    experiment = Experiment.objects.get()
    page = browser.get(experiment.get_absolute_url())
    html = page.content.decode()
    assert page.status_code == 200 and html.count('id="run-') == 6
    assert "dl2-30" in html and "avg JCT" in html
    assert "on the dl2-30 trace at 12.0 jobs/h" in html and "iterations:" not in html


def test_the_catalogue_lists_every_entry_with_its_paper_and_parameters(browser):
    html = browser.get(reverse("catalogue")).content.decode()
    assert 'id="entry-wfbp"' in html and 'id="entry-bytescheduler"' in html
    assert "SOSP 2019" in html and "USENIX ATC 2017" in html
    assert "credit_bytes" in html and "partition_bytes" in html
    assert "resnet50" in html and "vgg16" in html
    assert "activations (MB per sample)" in html
    assert "<td>2707</td>" in html  # gpt2's: 2.7 GB a sample (1024 tokens)
    # a CPU worker of gpt2 at its batch (8), as the memory check counts it: 51.8 GB
    assert "memory a CPU worker (GB)" in html and "<td>51.8</td>" in html


def test_the_experiment_page_shows_runs_and_live_fragment(browser, user, config):
    experiment = actions.create_experiment(user, config)
    page = browser.get(experiment.get_absolute_url()).content.decode()
    assert 'data-live-url="' in page and page.count('id="run-') == 4
    live = browser.get(reverse("experiment-live", args=[experiment.pk])).content.decode()
    assert 'data-active="true"' in live and "queued" in live
    assert "<html" not in live


def test_cancel_and_rerun_buttons_change_state(browser, user, config):
    experiment = actions.create_experiment(user, config)
    browser.post(reverse("experiment-cancel", args=[experiment.pk]))
    assert experiment.status == Run.CANCELLED
    response = browser.post(reverse("experiment-rerun", args=[experiment.pk]))
    copy = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.url == copy.get_absolute_url() and copy.status == Run.QUEUED


def test_only_the_owner_or_staff_may_cancel(client, django_user_model, user, config):
    experiment = actions.create_experiment(user, config)
    other = django_user_model.objects.create_user("bob", password="b" * 12)
    client.force_login(other)
    client.post(reverse("experiment-cancel", args=[experiment.pk]))
    assert experiment.status == Run.QUEUED


def test_the_run_log_page_shows_the_process_output(browser, user, config):
    experiment = actions.create_experiment(user, config)
    run = experiment.runs.first()
    run.home.mkdir(parents=True)
    (run.home / "process.log").write_text("hello from the runner\n")
    page = browser.get(reverse("run-log", args=[run.pk])).content.decode()
    assert "hello from the runner" in page
    raw = browser.get(reverse("run-log", args=[run.pk]) + "?raw=1")
    assert raw["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize("name", ["../../secret", "settings.py", "comparison-x.png", "data.csv"])
def test_only_known_figure_files_are_served(browser, user, config, name):
    experiment = actions.create_experiment(user, config)
    response = browser.get(reverse("experiment-file", args=[experiment.pk, "x"]).replace("x", name))
    assert response.status_code == 404


def test_a_redrawn_figure_gets_a_new_url_even_within_the_same_second(browser, user, config):
    """Browsers cache figure URLs: the version must change whenever the file does."""
    from lab.reports import figures

    experiment = actions.create_experiment(user, config)
    directory = figures.figure_dir(experiment)
    directory.mkdir(parents=True)
    png = directory / "comparison-iteration_time_s.png"
    live = reverse("experiment-live", args=[experiment.pk])
    png.write_bytes(b"first")
    first = browser.get(live).context["figures"][0]["version"]
    png.write_bytes(b"second")
    second = browser.get(live).context["figures"][0]["version"]
    assert first != second
