"""Comparison figures: tidy data -> plot -> files (PNG, PDF with TrueType fonts, SVG)."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

from lab.reports import figures


def frame() -> pd.DataFrame:
    rows = [
        (
            i,
            system,
            "system" if system == "a" else "baseline",
            "resnet50",
            8,
            10.0,
            seed,
            "iteration_time_s",
            base + 0.01 * seed,
            "s",
        )
        for i, (system, base, seed) in enumerate(
            (s, b, k) for s, b in (("a", 1.0), ("b", 2.0)) for k in range(3)
        )
    ]
    return pd.DataFrame(rows, columns=figures.COLUMNS)


def test_the_plot_shows_one_bar_per_system_with_a_confidence_interval():
    fig = figures.plot_comparison(frame(), "iteration_time_s", ["a", "b"])
    ax = fig.axes[0]
    heights = sorted(round(p.get_height(), 3) for p in ax.patches if p.get_height() > 0)
    assert heights == [1.01, 2.01]  # the mean over the seeds
    assert len(ax.lines) >= 2  # error bars
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "95% CI" in caption and "n=3" in caption


def test_the_system_under_test_comes_first_whatever_the_alphabet():
    fig = figures.plot_comparison(frame(), "iteration_time_s", ["b", "a"])
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["b", "a"]


def test_save_writes_every_format_with_truetype_fonts_in_the_pdf(tmp_path):
    fig = figures.plot_comparison(frame(), "iteration_time_s", ["a", "b"])
    paths = figures.save(fig, tmp_path, "cmp")
    assert sorted(p.name for p in paths) == ["cmp.pdf", "cmp.png", "cmp.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pdf = (tmp_path / "cmp.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf
    if shutil.which("pdffonts"):
        out = subprocess.run(
            ["pdffonts", str(tmp_path / "cmp.pdf")], capture_output=True, text=True, check=True
        ).stdout
        assert "TrueType" in out and "Type 3" not in out
    assert not list(tmp_path.glob(".*")), "no temporary files are left behind"


@pytest.mark.django_db
def test_an_experiment_without_results_has_no_figures(user, config):
    from lab import actions

    experiment = actions.create_experiment(user, config)
    assert figures.render(experiment) == []


def sweep_frame() -> pd.DataFrame:
    rows = []
    for system, base in (("a", 1.0), ("b", 2.0)):
        for bandwidth in (1.0, 10.0, 100.0):
            for seed in range(3):
                value = base / bandwidth + 0.001 * seed
                role = "system" if system == "a" else "baseline"
                rows.append(
                    (len(rows), system, role, "resnet50", 8, bandwidth, seed, "m", value, "s")
                )
    return pd.DataFrame(rows, columns=figures.COLUMNS)


def test_a_sweep_is_drawn_as_one_line_per_system_against_the_swept_condition():
    fig = figures.plot_sweep(sweep_frame(), "m", ["a", "b"], ["bandwidth_gbps"])
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"  # bandwidths spanning 100x
    assert "bandwidth" in ax.get_xlabel()
    means = {}
    for line in ax.get_lines():
        xs, ys = line.get_data()
        if len(xs) == 3:
            means[tuple(round(y, 4) for y in ys)] = line
    assert (1.001, 0.101, 0.011) in means and (2.001, 0.201, 0.021) in means
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["a", "b"]
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "95% CI" in caption and "n=3 seeds per point" in caption


def test_a_two_axis_sweep_gets_one_panel_row_per_value_of_the_second_axis():
    frame = pd.concat([sweep_frame(), sweep_frame().assign(workers=16)])
    fig = figures.plot_sweep(frame, "m", ["a", "b"], ["bandwidth_gbps", "workers"])
    assert len(fig.axes) == 2
    assert [ax.get_title() for ax in fig.axes] == ["resnet50, workers=8", "resnet50, workers=16"]


@pytest.mark.django_db
def test_a_sweep_experiment_renders_line_plots_and_a_csv_with_its_conditions(user, config):
    import dataclasses

    from django.utils import timezone

    from lab import actions
    from lab.results.models import Measurement
    from lab.runs.models import Run

    swept = dataclasses.replace(config, sweep={"bandwidth_gbps": [1.0, 10.0]})
    experiment = actions.create_experiment(user, swept)
    for run in experiment.runs.all():
        bandwidth = run.spec["cluster"]["bandwidth_gbps"]
        value = (2.0 if run.system == "wfbp" else 1.0) / bandwidth + 0.01 * run.seed
        Measurement.objects.create(run=run, metric="iteration_time_s", value=value, unit="s")
    experiment.runs.update(state=Run.SUCCEEDED, finished_at=timezone.now())
    paths = figures.render(experiment)
    assert {p.name for p in paths} >= {"data.csv", "comparison-iteration_time_s.png"}
    data = pd.read_csv(figures.figure_dir(experiment) / "data.csv")
    assert sorted(data["bandwidth_gbps"].unique()) == [1.0, 10.0]
    assert set(data["workers"]) == {4}
    assert figures.is_current(experiment)
    assert figures.swept(experiment) == ["bandwidth_gbps"]


@pytest.mark.django_db
def test_render_draws_the_speedup_over_each_baseline_and_the_page_shows_it(client, user, config):
    import dataclasses

    from django.urls import reverse
    from django.utils import timezone

    from lab import actions
    from lab.results.models import Measurement
    from lab.runs.models import Run

    two = dataclasses.replace(config, baselines=("wfbp", "horovod"))
    experiment = actions.create_experiment(user, two)
    base = {"bytescheduler": 1.0, "wfbp": 2.0, "horovod": 4.0}
    for run in experiment.runs.all():
        value = base[run.system] + 0.01 * run.seed
        Measurement.objects.create(run=run, metric="iteration_time_s", value=value, unit="s")
    experiment.runs.update(state=Run.SUCCEEDED, finished_at=timezone.now())
    names = {p.name for p in figures.render(experiment)}
    assert {f"speedup-iteration_time_s.{fmt}" for fmt in figures.FORMATS} <= names
    assert figures.SPEEDUP_CSV in names and names <= figures.FILES
    assert "speedup-throughput_samples_per_s.png" not in names  # no throughput measured
    speedup = pd.read_csv(figures.figure_dir(experiment) / figures.SPEEDUP_CSV)
    assert list(speedup["baseline"]) == ["wfbp", "horovod"]
    assert list(speedup["speedup"]) == pytest.approx([2.005 / 1.005, 4.005 / 1.005])
    assert (speedup["ci_low"] <= speedup["speedup"]).all()
    assert (speedup["speedup"] <= speedup["ci_high"]).all()

    client.force_login(user)
    live = client.get(reverse("experiment-live", args=[experiment.pk]))
    assert [f["stem"] for f in live.context["figures"]] == [
        "comparison-iteration_time_s",
        "speedup-iteration_time_s",
    ]
    html = live.content.decode()
    png = reverse("experiment-file", args=[experiment.pk, "speedup-iteration_time_s.png"])
    assert png in html and "speedup over each baseline" in html
    assert reverse("experiment-file", args=[experiment.pk, figures.SPEEDUP_CSV]) in html
    served = client.get(png)
    assert served.status_code == 200
    assert b"".join(served.streaming_content)[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_speedup_figure_shows_one_bar_per_baseline_with_its_ci():
    speedup = figures.speedup_frame(frame(), "a", ["b"])
    assert list(speedup["speedup"]) == pytest.approx([2.01 / 1.01])
    fig = figures.plot_speedup(speedup, "iteration_time_s")
    ax = fig.axes[0]
    assert [round(p.get_height(), 3) for p in ax.patches] == [1.99]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b"]
    caption = fig.texts[0].get_text() if fig.texts else fig._supxlabel.get_text()
    assert "speedup of a over b" in caption and "95% CI" in caption and "n=3" in caption
    assert figures.plot_speedup(speedup, "throughput_samples_per_s") is None


# --- figures from the runs' own files: timeline, JCT CDF, convergence ---------------------------


def _run_for_real(experiment):
    """Simulate every run of ``experiment`` in this process into its run directory, ingest
    it and mark it succeeded (what the worker does, without the queue)."""
    from django.utils import timezone

    from lab.results.ingest import ingest_run
    from lab.runs.models import Run
    from runners.execute import run_to_directory
    from runners.spec import validate

    for run in experiment.runs.all():
        run.home.mkdir(parents=True, exist_ok=True)
        run_to_directory(validate(run.spec), run.run_dir, ["test"])
        ingest_run(run)
    experiment.runs.update(state=Run.SUCCEEDED, finished_at=timezone.now())


@pytest.mark.django_db
def test_a_comm_experiment_draws_the_last_iterations_timeline_per_system(client, user, config):
    from django.urls import reverse

    from lab import actions

    experiment = actions.create_experiment(user, config)
    _run_for_real(experiment)
    names = {p.name for p in figures.render(experiment)}
    assert {"timeline.png", "timeline.pdf", "timeline.svg", "timeline.csv"} <= names
    assert names <= figures.FILES
    assert not {"jct-cdf.png", "convergence.png"} & names  # no jobs, no loss in sim
    ops = pd.read_csv(figures.figure_dir(experiment) / "timeline.csv")
    assert list(dict.fromkeys(ops["panel"])) == ["bytescheduler", "wfbp"]  # system first
    assert set(ops["kind"]) == {"compute", "communication"}
    for _, panel in ops.groupby("panel"):
        assert panel["start_s"].min() == 0.0
        assert (panel["end_s"] >= panel["start_s"]).all()
        # one forward and one backward per layer of the model: one whole iteration
        layers = len(__import__("workloads").load_profile("resnet50-debug").layers)
        assert (panel["op"] == "forward").sum() == layers == (panel["op"] == "backward").sum()

    client.force_login(user)
    live = client.get(reverse("experiment-live", args=[experiment.pk]))
    stems = [f["stem"] for f in live.context["figures"]]
    assert stems[-1] == "timeline" and "jct-cdf" not in stems
    assert "iteration timeline" in live.content.decode()
    png = client.get(reverse("experiment-file", args=[experiment.pk, "timeline.png"]))
    assert png.status_code == 200
    from lab.accounts.models import ApiToken

    auth = f"Token {ApiToken.issue(user)}"
    api = client.get(reverse("api-experiment", args=[experiment.pk]), HTTP_AUTHORIZATION=auth)
    api = api.json()
    assert set(api["detail_figures"]) == {"timeline"}
    assert api["detail_figures"]["timeline"]["csv"].endswith("/timeline.csv")
    assert set(api["speedup_figures"]) == {"iteration_time_s", "throughput_samples_per_s"}

    import zipfile

    from lab.reports import export

    bundle = export.export_experiment(experiment, "acm-2col", note="test tree")
    names = set(zipfile.ZipFile(bundle).namelist())
    assert {"data/timeline.csv", "figures/timeline.pdf"} <= names  # in the paper bundle too


@pytest.mark.django_db
def test_the_timeline_says_whose_operations_it_shows_and_on_which_clock(user, config):
    """Simulated runs: simulated time. Real runs: measured time; a run that recorded no
    operations (PyTorch's DDP, the real Horovod write a timeline of a header only) is named
    as such, not listed among the runs shown."""
    from lab import actions

    experiment = actions.create_experiment(user, config)
    _run_for_real(experiment)

    def timeline() -> dict:
        (kwargs,) = [
            k for stem, _, _, k in figures.detail_figures(experiment) if stem == "timeline"
        ]
        return kwargs

    said = timeline()
    assert said["xlabel"].startswith("simulated time")
    assert "(bytescheduler seed 0, wfbp seed 0)" in said["caption"]
    for run in experiment.runs.all():  # as if they had trained for real
        run.spec = {**run.spec, "mode": "real"}
        run.save(update_fields=["spec"])
    for run in experiment.runs.filter(system="wfbp"):
        path = run.run_dir / "timeline.csv"
        path.write_text(path.read_text().splitlines()[0] + "\n")
    said = timeline()
    assert said["xlabel"].startswith("measured time")
    assert "(bytescheduler seed 0); no operations recorded by wfbp" in said["caption"]


@pytest.mark.django_db
def test_a_cluster_experiment_compares_jct_and_utility_and_draws_the_jct_cdf(client, user):
    from django.urls import reverse

    from lab import actions
    from lab.actions import ExperimentConfig

    config = ExperimentConfig(
        name="tiny cluster",
        system="tiresias",
        baselines=("fifo",),
        workloads=(),
        seeds=(0, 1),
        cluster={"trace": {"generator": "philly", "jobs": 40, "jobs_per_hour": 30}, "servers": 4},
    )
    experiment = actions.create_experiment(user, config)
    _run_for_real(experiment)
    names = {p.name for p in figures.render(experiment)}
    assert {"comparison-avg_jct_s.png", "comparison-total_utility.png"} <= names
    assert {"speedup-avg_jct_s.png", "jct-cdf.png", "jct.csv"} <= names
    assert "timeline.png" not in names and "comparison-iteration_time_s.png" not in names
    data = pd.read_csv(figures.figure_dir(experiment) / "data.csv")
    assert set(data["workload"]) == {experiment.runs.first().workload}  # the trace's name
    jct = pd.read_csv(figures.figure_dir(experiment) / "jct.csv")
    assert list(dict.fromkeys(jct["system"])) == ["tiresias", "fifo"]
    assert set(jct["seed"]) == {0, 1} and (jct["jct_s"] > 0).all()
    client.force_login(user)
    html = client.get(reverse("experiment-live", args=[experiment.pk])).content.decode()
    assert "avg JCT (s)" in html and "iteration time (s)" not in html
    assert "CDF of job completion times" in html


@pytest.mark.django_db
def test_runs_whose_series_carry_a_loss_get_a_convergence_figure(user, config):
    import json

    from lab import actions
    from lab.results.models import Artifact

    experiment = actions.create_experiment(user, config)
    _run_for_real(experiment)
    for artifact in Artifact.objects.filter(run__experiment=experiment, kind="series"):
        path = figures.Path(figures.settings.RESULTS_DIR) / artifact.path
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:  # as a real training run writes them (issue 6)
            row["loss"] = 2.0 / (1 + row["iteration"]) + 0.01 * artifact.run.seed
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures.render(experiment)
    curves = pd.read_csv(figures.figure_dir(experiment) / "convergence.csv")
    assert set(curves["system"]) == {"bytescheduler", "wfbp"} and set(curves["seed"]) == {0, 1}
    assert (curves["iteration"] >= 2).all()  # warm-up iterations left out
    assert (figures.figure_dir(experiment) / "convergence.png").exists()


def test_timeline_rows_go_worker_by_worker_then_server_by_server():
    """A real PS run and its twin name every worker's lanes (``compute[w1]``, ...); the Gantt
    chart shows each worker's lanes together, then the servers' (in, cpu, out) in number
    order. One worker's (or one group's) plain lanes come first."""
    resources = ["ps10.in", "uplink[w1]", "ps2.out", "downlink[w0]", "compute[w1]", "ps2.in",
                 "uplink[w0]", "compute[w0]", "ps2.cpu", "compute[w2-3]", "network"]  # fmt: skip

    ordered = sorted(resources, key=figures._resource_rank)

    assert ordered == ["compute[w0]", "network", "uplink[w0]", "downlink[w0]", "compute[w1]",
                       "uplink[w1]", "compute[w2-3]", "ps2.in", "ps2.cpu", "ps2.out",
                       "ps10.in"]  # fmt: skip
