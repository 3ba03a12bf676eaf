"""Load sweeps of the cluster arena: several values of the trace's arrival rate
(``trace.jobs_per_hour``) from the portal's form and the JSON API, each run's condition, and
the experiment's figures drawn against the load."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from django.urls import reverse

from lab import actions
from lab.accounts.models import ApiToken
from lab.experiments.models import Experiment
from lab.reports import export, figures
from lab.runs.models import Run, condition_of, condition_text
from tests.unit.test_figures import _run_for_real
from tests.unit.test_portal import CLUSTER_FORM, field_block

pytestmark = pytest.mark.django_db

LOADS = [5.0, 10.0, 20.0]
# 2 systems x 3 loads x 1 seed on a tiny generated trace.
FORM = {
    **CLUSTER_FORM,
    "name": "tiresias vs fifo over the load",
    "system": "tiresias",
    "baselines": ["fifo"],
    "params": "{}",
    "seeds": "0",
    "trace_generator": "philly",
    "trace_jobs": "20",
    "trace_jobs_per_hour": "5, 10, 20",
    "trace_arrivals": "poisson",
    "cluster_arena_ps_servers": "0",
}
# The API takes the loads as the form's text; a JSON list ([5, 10, 20], like cluster.workers)
# needs lab/api/views.py to accept it (``_scalars`` refuses lists today).
BODY = {
    "name": "tiresias vs fifo over the load",
    "system": "tiresias",
    "baselines": ["fifo"],
    "seeds": [0],
    "trace": {"generator": "philly", "jobs": 20, "jobs_per_hour": "5, 10, 20"},
    "cluster": {"servers": 4, "gpus_per_server": 4},
}


@pytest.fixture
def browser(client, user):
    client.force_login(user)
    return client


def api_post(client, user, body):
    return client.post(
        "/api/experiments/",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {ApiToken.issue(user)}",
    )


def loads_by_system(experiment: Experiment) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for run in experiment.runs.order_by("id"):
        out.setdefault(run.system, []).append(run.spec["trace"]["jobs_per_hour"])
    return out


# --- the form and the API create one run per system x load x seed ---------------------------


def test_the_form_sweeps_the_load_one_run_per_system_load_and_seed(browser):
    response = browser.post(reverse("experiment-new"), FORM)
    assert response.status_code == 302, response.context["form"].errors
    experiment = Experiment.objects.get()
    assert experiment.sweep == {"jobs_per_hour": LOADS}
    assert experiment.cluster["trace"]["jobs_per_hour"] == 5.0  # the first load
    assert experiment.runs.count() == 2 * 3 * 1
    assert loads_by_system(experiment) == {"tiresias": LOADS, "fifo": LOADS}
    for run in experiment.runs.all():
        assert run.seed == 0 and run.workload == "philly-20"  # the load is not the workload
        assert run.spec["trace"]["jobs"] == 20 and run.spec["cluster"]["servers"] == 4
        assert run.condition == {
            "workers": None,
            "bandwidth_gbps": None,
            "jobs_per_hour": run.spec["trace"]["jobs_per_hour"],
        }
    page = browser.get(experiment.get_absolute_url()).content.decode()
    assert "sweep jobs_per_hour over 5.0, 10.0, 20.0" in page
    assert "20 jobs/h" in page and "5 jobs/h" in page  # each run's condition in the table


def test_the_api_sweeps_the_load_one_run_per_system_load_and_seed(client, user):
    response = api_post(client, user, BODY)
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["sweep"] == {"jobs_per_hour": LOADS}
    assert len(data["runs"]) == 6
    conditions = sorted((r["system"], r["condition"]["jobs_per_hour"]) for r in data["runs"])
    assert conditions == sorted((s, load) for s in ("tiresias", "fifo") for load in LOADS)
    assert loads_by_system(Experiment.objects.get()) == {"tiresias": LOADS, "fifo": LOADS}


def test_one_load_is_no_sweep(client, user):
    response = api_post(client, user, {**BODY, "trace": {**BODY["trace"], "jobs_per_hour": 12}})
    assert response.status_code == 201, response.json()
    experiment = Experiment.objects.get()
    assert experiment.sweep == {} and experiment.runs.count() == 2
    assert {r.spec["trace"]["jobs_per_hour"] for r in experiment.runs.all()} == {12.0}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("0", "trace.jobs_per_hour: must be a number &gt; 0 (got 0.0)"),
        ("-5", "trace.jobs_per_hour: must be a number &gt; 0 (got -5.0)"),
        ("5, 10, -20", "trace.jobs_per_hour: must be a number &gt; 0 (got -20.0)"),
        ("fast", "must be numbers separated by commas"),
        ("5, ten", "must be numbers separated by commas"),
        ("5, 5", "each value may appear only once"),
        ("", "This field is required"),
    ],
)
def test_a_bad_load_is_refused_next_to_its_field_and_nothing_is_queued(browser, value, text):
    response = browser.post(reverse("experiment-new"), {**FORM, "trace_jobs_per_hour": value})
    assert response.status_code == 200
    html = response.content.decode()
    block = field_block(html, "trace_jobs_per_hour")
    assert 'class="error"' in block and text in block, block
    assert html.count('class="error"') == 1
    assert not Experiment.objects.exists() and not Run.objects.exists()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "must be a number > 0"),
        (-5, "must be a number > 0"),
        ("5, 0", "must be a number > 0"),
        ("fast", "must be numbers separated by commas"),
        (True, "must be numbers separated by commas"),
    ],
)
def test_the_api_refuses_a_bad_load_naming_the_field(client, user, value, text):
    response = api_post(client, user, {**BODY, "trace": {**BODY["trace"], "jobs_per_hour": value}})
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert list(errors) == ["trace.jobs_per_hour"], errors
    assert text in errors["trace.jobs_per_hour"][0]
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_too_many_loads_are_refused(browser):
    loads = ", ".join(str(x) for x in range(1, 101))  # 2 entries x 100 loads x 3 seeds = 600
    response = browser.post(
        reverse("experiment-new"), {**FORM, "trace_jobs_per_hour": loads, "seeds": "0, 1, 2"}
    )
    assert "limit is 500" in response.content.decode() and "loads" in response.content.decode()
    assert not Experiment.objects.exists()


def test_a_copy_and_a_rerun_of_a_load_sweep_keep_every_load(browser, user):
    assert browser.post(reverse("experiment-new"), FORM).status_code == 302
    source = Experiment.objects.get()
    form = browser.get(reverse("experiment-new") + f"?copy={source.pk}").context["form"]
    assert form.initial["trace_jobs_per_hour"] == "5, 10, 20"
    rerun = actions.rerun_experiment(source, user)
    assert loads_by_system(rerun) == loads_by_system(source)


def test_a_communication_experiment_ignores_the_load_field(browser):
    from tests.unit.test_portal import FORM as COMM_FORM

    response = browser.post(reverse("experiment-new"), {**COMM_FORM, "trace_jobs_per_hour": "x"})
    assert response.status_code == 302
    experiment = Experiment.objects.get()
    assert experiment.sweep == {}
    assert {tuple(r.condition) for r in experiment.runs.all()} == {("workers", "bandwidth_gbps")}


# --- the condition -----------------------------------------------------------------------------


def test_a_cluster_runs_condition_is_its_load_and_a_comm_runs_is_unchanged():
    cluster = {"system": "fifo", "trace": {"generator": "philly", "jobs_per_hour": 20.0}}
    assert condition_of(cluster) == {"workers": None, "bandwidth_gbps": None, "jobs_per_hour": 20.0}
    assert condition_text(condition_of(cluster)) == "20 jobs/h"
    assert (
        condition_text({"workload": "philly-200", "jobs_per_hour": 7.5}) == "philly-200, 7.5 jobs/h"
    )
    trace_file = {"system": "fifo", "trace": {"file": "/x.csv", "format": "philly"}}
    assert condition_text(condition_of(trace_file)) == ""
    comm = {"system": "wfbp", "cluster": {"workers": 8, "bandwidth_gbps": 10.0, "latency_us": 5}}
    assert condition_of(comm) == {"workers": 8, "bandwidth_gbps": 10.0}
    assert condition_text(condition_of(comm)) == "8 workers, 10 Gbit/s"
    assert condition_text({"jobs_per_hour": float("nan"), "workers": 4}) == "4 workers"


# --- the figures: every cluster metric against the load, from the real simulator -----------------


def test_the_figures_draw_each_cluster_metric_against_the_load(client, user):
    config = actions.ExperimentConfig(
        name="tiny load sweep",
        system="tiresias",
        baselines=("fifo",),
        workloads=(),
        seeds=(0, 1),
        cluster={
            "trace": {
                "generator": "philly",
                "jobs": 20,
                "jobs_per_hour": 5.0,
                "duration_scale": 0.05,
            },
            "servers": 2,
            "gpus_per_server": 4,
        },
        sweep={"jobs_per_hour": [5.0, 20.0, 60.0]},
    )
    experiment = actions.create_experiment(user, config)
    _run_for_real(experiment)
    assert figures.swept(experiment) == ["jobs_per_hour"]

    frame = figures.tidy_frame(experiment)
    assert list(frame.columns) == figures.TIDY_COLUMNS
    assert sorted(frame["jobs_per_hour"].unique()) == [5.0, 20.0, 60.0]
    jct = figures.metric_frame(frame, "avg_jct_s").groupby(["system", "jobs_per_hour"])["value"]
    assert jct.mean().groupby("system").nunique().to_dict() == {"fifo": 3, "tiresias": 3}
    for metric in ("avg_jct_s", "p95_jct_s", "makespan_s", "total_utility"):
        data = figures.metric_frame(frame, metric)
        assert len(data) == 2 * 3 * 2, metric  # systems x loads x seeds
        fig = figures.plot_sweep(data, metric, experiment.entries, ["jobs_per_hour"])
        ax = fig.axes[0]
        assert ax.get_xlabel() == "offered load (jobs per hour)"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["tiresias", "fifo"]
        means = data.groupby(["system", "jobs_per_hour"])["value"].mean()
        lines = [line for line in ax.get_lines() if len(line.get_xdata()) == 3]
        assert len(lines) == 2  # one line per system: the mean over seeds at each load
        for line, system in zip(lines, ("tiresias", "fifo"), strict=True):
            assert list(line.get_xdata()) == [5.0, 20.0, 60.0]
            assert list(line.get_ydata()) == pytest.approx(list(means[system]), nan_ok=True)
        assert len(ax.collections) >= 1  # the CI bands
        caption = " ".join(t.get_text() for t in fig.texts)
        assert "95% CI" in caption and "n=2 seeds per point" in caption

    names = {p.name for p in figures.render(experiment)}
    for metric in ("avg_jct_s", "p95_jct_s", "makespan_s", "total_utility"):
        assert {f"comparison-{metric}.png", f"speedup-{metric}.png"} <= names
    assert names <= figures.FILES
    data = pd.read_csv(figures.figure_dir(experiment) / "data.csv")
    assert sorted(data["jobs_per_hour"].unique()) == [5.0, 20.0, 60.0]
    speedup = pd.read_csv(figures.figure_dir(experiment) / figures.SPEEDUP_CSV)
    jct = speedup[speedup["metric"] == "avg_jct_s"]
    assert list(jct["jobs_per_hour"]) == [5.0, 20.0, 60.0]
    assert figures.speedup_plot_data(speedup, "avg_jct_s")[1]["x"] == "jobs_per_hour"

    # the paper bundle's sweep figures and table follow the same condition
    specs = export.figure_specs(
        frame, system="tiresias", baselines=["fifo"], sweep=["jobs_per_hour"], venue="acm-1col"
    )
    sweeps = {s.name: s for s in specs if s.kind == "sweep_plot"}
    assert sweeps["sweep-avg_jct_s"].kwargs["x"] == "jobs_per_hour"
    table = export.latex_tables(frame, order=experiment.entries, caption="c", label="l")
    assert table.count(r"\begin{table}") == 3 and "philly-20, 60 jobs/h" in table

    client.force_login(user)
    live = client.get(reverse("experiment-live", args=[experiment.pk]))
    assert "60 jobs/h" in live.content.decode()  # the runs table: each run's load
    stems = [f["stem"] for f in live.context["figures"]]
    assert stems[:4] == [
        "comparison-avg_jct_s",
        "speedup-avg_jct_s",
        "comparison-p95_jct_s",
        "speedup-p95_jct_s",
    ]


def test_a_comm_sweeps_tidy_frame_has_no_load_column(user, config):
    import dataclasses

    from django.utils import timezone

    from lab.results.models import Measurement

    experiment = actions.create_experiment(
        user, dataclasses.replace(config, sweep={"bandwidth_gbps": [1.0, 10.0]})
    )
    for run in experiment.runs.all():
        Measurement.objects.create(run=run, metric="iteration_time_s", value=1.0, unit="s")
    experiment.runs.update(state=Run.SUCCEEDED, finished_at=timezone.now())
    frame = figures.tidy_frame(experiment)
    assert list(frame.columns) == figures.COLUMNS and "jobs_per_hour" not in frame
    assert "jobs_per_hour" not in figures.speedup_frame(frame, config.system, ["wfbp"])
