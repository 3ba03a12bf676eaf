"""Export for paper: an experiment's succeeded runs -> one artifact bundle (figures, CSVs,
manifests, regenerate.py, table.tex), refused for runs from a dirty tree unless a note says
why; and the portal's form that serves it."""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile

import pandas as pd
import pytest
from django.urls import reverse
from django.utils import timezone

from lab import actions
from lab.reports import bundle, export, figures
from lab.reports.bundle import DirtyTreeError
from lab.results.models import Measurement
from lab.runs.models import Run
from runners import rundir
from tests.unit.test_plots import speedups

pytestmark = pytest.mark.django_db


def finished(user, config, *, dirty=(), manifests=True):
    """An experiment whose runs all succeeded: the system takes 1 s per iteration, the
    baseline 2 s (over the bandwidth when swept), plus 0.01 s per seed; runs whose index is
    in `dirty` were recorded with uncommitted changes."""
    experiment = actions.create_experiment(user, config)
    for i, run in enumerate(experiment.runs.order_by("id")):
        bandwidth = run.spec["cluster"]["bandwidth_gbps"]
        seconds = (2.0 if run.system == "wfbp" else 1.0) / bandwidth + 0.01 * run.seed
        Measurement.objects.create(run=run, metric="iteration_time_s", value=seconds, unit="s")
        Measurement.objects.create(
            run=run, metric="throughput_samples_per_s", value=32 / seconds, unit="samples/s"
        )
        if manifests:
            run.run_dir.mkdir(parents=True)
            code = {"commit": "abc123", "dirty": i in dirty}
            rundir.write_json(run.run_dir / rundir.MANIFEST, {"spec": run.spec, "code": code})
    experiment.runs.update(state=Run.SUCCEEDED, finished_at=timezone.now())
    return experiment


def run_ids(experiment) -> list[int]:
    return list(experiment.runs.order_by("id").values_list("id", flat=True))


# --- the bundle ------------------------------------------------------------------------------


def test_the_bundle_holds_figures_csvs_manifests_the_script_and_a_latex_table(user, config):
    experiment = finished(user, config)
    path = export.export_experiment(experiment, "acm-1col")
    assert path == export.export_dir(experiment) / f"experiment-{experiment.pk}-acm-1col.zip"
    archive = zipfile.ZipFile(path)
    names = set(archive.namelist())
    stems = ["speedup-iteration_time_s", "speedup-throughput_samples_per_s"]
    assert {f"figures/{s}.pdf" for s in stems} | {f"data/{s}.csv" for s in stems} <= names
    assert {f"manifests/run-{pk}.json" for pk in run_ids(experiment)} <= names
    assert {"regenerate.py", "table.tex", "README.txt", "figures.json"} <= names
    assert not any(n.startswith("figures/sweep") for n in names), "nothing is swept"
    index = json.loads(archive.read("figures.json"))
    assert {f["venue"] for f in index["figures"]} == {"acm-1col"}
    assert index["dirty"] is False and index["extras"] == ["table.tex"]
    manifest = json.loads(archive.read(f"manifests/run-{run_ids(experiment)[0]}.json"))
    assert manifest["code"] == {"commit": "abc123", "dirty": False}
    assert list(export.export_dir(experiment).iterdir()) == [path], "no temporary files"


def test_the_speedup_is_the_ratio_of_means_oriented_so_more_is_better(user, config):
    experiment = finished(user, config)
    archive = zipfile.ZipFile(export.export_experiment(experiment, "ieee-1col"))
    time = pd.read_csv(archive.open("data/speedup-iteration_time_s.csv"))
    throughput = pd.read_csv(archive.open("data/speedup-throughput_samples_per_s.csv"))
    for data in (time, throughput):
        assert list(data["baseline"]) == ["wfbp"] and list(data["system"]) == ["bytescheduler"]
        assert data["ci_low"][0] <= data["speedup"][0] <= data["ci_high"][0]
        assert list(data["n"]) == [2]
    # seeds 0 and 1: bytescheduler 1.00 / 1.01 s, wfbp 2.00 / 2.01 s
    assert time["speedup"][0] == pytest.approx(2.005 / 1.005)
    throughput_ratio = (32 / 1.0 + 32 / 1.01) / (32 / 2.0 + 32 / 2.01)
    assert throughput["speedup"][0] == pytest.approx(throughput_ratio)
    index = json.loads(archive.read("figures.json"))
    caption = index["figures"][0]["kwargs"]["caption"]
    assert "95% CI" in caption and "n=2" in caption


def test_the_table_gives_mean_and_ci_per_system_with_the_best_in_bold(user, config):
    experiment = finished(user, config)
    table = zipfile.ZipFile(export.export_experiment(experiment, "ieee-1col")).read("table.tex")
    tex = table.decode()
    assert r"\toprule" in tex and r"\bottomrule" in tex and tex.count(r"\begin{table}") == 1
    assert "iteration time (s)" in tex and "throughput (samples/s)" in tex
    rows = [line for line in tex.splitlines() if line.startswith(("bytescheduler", "wfbp"))]
    assert rows[0].startswith("bytescheduler") and rows[1].startswith("wfbp")
    assert r"\textbf{1.005} $\pm$" in rows[0], rows[0]  # lower time is better
    assert r"\textbf" not in rows[1].split("&")[1]
    assert "resnet50-debug" in tex and "n=2 seeds" in tex


def test_a_sweep_adds_the_metric_against_the_swept_condition(user, config):
    swept = dataclasses.replace(config, sweep={"bandwidth_gbps": [1.0, 10.0]})
    experiment = finished(user, swept)
    archive = zipfile.ZipFile(export.export_experiment(experiment, "ieee-2col"))
    names = set(archive.namelist())
    assert {"figures/sweep-iteration_time_s.pdf", "data/sweep-iteration_time_s.csv"} <= names
    index = {f["name"]: f for f in json.loads(archive.read("figures.json"))["figures"]}
    assert index["sweep-iteration_time_s"]["kwargs"]["x"] == "bandwidth_gbps"
    assert index["speedup-iteration_time_s"]["kwargs"]["x"] == "bandwidth_gbps"
    speedup = pd.read_csv(archive.open("data/speedup-iteration_time_s.csv"))
    assert list(speedup["bandwidth_gbps"]) == [1.0, 10.0]
    assert list(speedup["system"]) == ["bytescheduler vs wfbp"] * 2
    assert archive.read("table.tex").decode().count(r"\begin{table}") == 2  # one per bandwidth


def test_dirty_runs_without_a_note_are_refused_naming_them_and_nothing_is_written(user, config):
    experiment = finished(user, config, dirty={1, 3})
    ids = run_ids(experiment)
    with pytest.raises(export.DirtyRunsError) as caught:
        export.export_experiment(experiment, "ieee-1col", note="   ")
    assert isinstance(caught.value, DirtyTreeError)
    assert caught.value.runs == [ids[1], ids[3]]
    assert f"runs {ids[1]}, {ids[3]} came from a working tree" in str(caught.value)
    assert export.DIRTY_HINT in str(caught.value)
    assert not export.export_dir(experiment).exists()


def test_with_a_note_a_dirty_export_is_written_and_the_note_is_in_the_readme(user, config):
    experiment = finished(user, config, dirty={0})
    path = export.export_experiment(experiment, "ieee-1col", note="only README edits uncommitted")
    archive = zipfile.ZipFile(path)
    readme = archive.read("README.txt").decode()
    assert "DIRTY" in readme and "Note: only README edits uncommitted" in readme
    assert "table.tex" in readme
    assert json.loads(archive.read("figures.json"))["dirty"] is True


SUMMARY = {"metrics": {}, "units": {}}


def test_a_run_measured_beside_other_work_is_named_in_the_readme(user, config):
    """A real run's summary says other processes took a tenth of a core or more beside it
    (``runners.real.others``): the bundle's readers are told, in README.txt and figures.json;
    a quiet run and a run without a summary are not named."""
    experiment = finished(user, config)
    ids = run_ids(experiment)
    busy = {"cores": 0.66, "flagged": True, "window_s": 1.5,
            "top": [{"name": "python3 loop.py", "cores": 0.65}]}  # fmt: skip
    quiet = {"cores": 0.0, "flagged": False, "window_s": 1.5, "top": []}
    runs = list(experiment.runs.order_by("id"))
    rundir.write_json(runs[0].run_dir / rundir.SUMMARY, {**SUMMARY, "others": busy})
    rundir.write_json(runs[1].run_dir / rundir.SUMMARY, {**SUMMARY, "others": quiet})
    archive = zipfile.ZipFile(export.export_experiment(experiment, "ieee-1col"))
    readme = " ".join(archive.read("README.txt").decode().split())
    said = (
        f"run {ids[0]} ({runs[0].system}, seed {runs[0].seed}) was measured beside other work "
        "on its host, 0.66 cores (python3 loop.py 0.65): its real times are slower and noisier "
        "than alone"
    )
    assert f"Cautions {said}" in readme
    assert json.loads(archive.read("figures.json"))["cautions"] == [said]
    assert f"run {ids[1]} " not in readme
    rundir.write_json(runs[0].run_dir / rundir.SUMMARY, {**SUMMARY, "others": quiet})
    archive = zipfile.ZipFile(export.export_experiment(experiment, "ieee-1col"))
    assert "Cautions" not in archive.read("README.txt").decode()


def test_a_run_without_a_manifest_is_named_and_nothing_is_written(user, config):
    experiment = finished(user, config, manifests=False)
    with pytest.raises(export.ExportError, match=f"run\\(s\\) {run_ids(experiment)[0]}, "):
        export.export_experiment(experiment, "ieee-1col")
    assert not export.export_dir(experiment).exists()


def test_an_experiment_without_succeeded_runs_has_nothing_to_export(user, config):
    experiment = actions.create_experiment(user, config)
    with pytest.raises(export.ExportError, match="no succeeded runs"):
        export.export_experiment(experiment, "ieee-1col")


def test_an_unknown_venue_is_refused(user, config):
    with pytest.raises(ValueError, match="ieee-1col"):
        export.export_experiment(finished(user, config), "nature")


def test_only_a_manifest_that_says_dirty_makes_the_export_dirty():
    manifests = {
        1: {"code": {"commit": "a", "dirty": True}},
        2: {"code": {"commit": "a", "dirty": False}},
        3: {"code": {"commit": "unknown", "dirty": None}},
        4: {},
        5: {"code": {"commit": "b", "dirty": True}},
    }
    assert export.dirty_runs(manifests) == [1, 5]


def test_several_workloads_and_conditions_get_a_condition_label_per_bar_group():
    rows = [
        (0, s, "", w, workers, 1.0, seed, "iteration_time_s", base * k, "s")
        for w, k in (("resnet50", 1.0), ("vgg16", 3.0))
        for workers in (4, 8)
        for s, base in (("a", 1.0), ("b", 2.0))
        for seed in (0, 1)
    ]
    frame = pd.DataFrame(rows, columns=figures.COLUMNS)
    speedup = figures.speedup_frame(frame, "a", ["b"])
    data, kwargs = figures.speedup_plot_data(speedup, "iteration_time_s")
    assert kwargs["x"] == "condition"
    assert list(data["condition"]) == [
        "resnet50, 4 workers",
        "resnet50, 8 workers",
        "vgg16, 4 workers",
        "vgg16, 8 workers",
    ]
    assert list(data["speedup"]) == pytest.approx([2.0] * 4)


# --- the bundle's extra files ----------------------------------------------------------------


def test_extra_files_go_to_the_top_of_the_bundle_and_may_not_replace_its_own(tmp_path):
    spec = bundle.FigureSpec("speedup", "speedup_plot", speedups())
    out = bundle.write_bundle(tmp_path / "b.zip", [spec], {}, dirty=False, extras={"t.tex": "x"})
    assert zipfile.ZipFile(out).read("t.tex") == b"x"
    for name in ("README.txt", "regenerate.py", "figures", "../t.tex"):
        with pytest.raises(ValueError, match="bundle's own|not a file name"):
            bundle.write_bundle(tmp_path / "c.zip", [spec], {}, dirty=False, extras={name: "x"})
    assert not (tmp_path / "c.zip").exists()


# --- the portal ------------------------------------------------------------------------------


@pytest.fixture
def browser(client, user):
    client.force_login(user)
    return client


def test_the_portal_serves_the_bundle_of_a_clean_experiment(browser, user, config):
    experiment = finished(user, config)
    url = reverse("experiment-export", args=[experiment.pk])
    response = browser.post(url, {"venue": "ieee-2col", "note": ""})
    assert response.status_code == 200
    disposition = response["Content-Disposition"]
    assert disposition.startswith("attachment") and f"experiment-{experiment.pk}-ieee-2col.zip" in (
        disposition
    )
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert "table.tex" in archive.namelist()


def test_the_portal_refuses_a_dirty_experiment_without_a_note_and_says_what_to_do(
    browser, user, config
):
    experiment = finished(user, config, dirty={2})
    url = reverse("experiment-export", args=[experiment.pk])
    response = browser.post(url, {"venue": "ieee-1col", "note": ""})
    assert response.status_code == 400
    page = response.content.decode()
    assert f"run {run_ids(experiment)[2]} came from a working tree" in page
    assert export.DIRTY_HINT in page and '<details id="export" open>' in page
    assert not export.export_dir(experiment).exists()
    response = browser.post(url, {"venue": "ieee-1col", "note": "rebased, same code"})
    assert response.status_code == 200 and response["Content-Disposition"].startswith("attach")


def test_an_unknown_venue_is_a_form_error_naming_the_field(browser, user, config):
    experiment = finished(user, config)
    url = reverse("experiment-export", args=[experiment.pk])
    response = browser.post(url, {"venue": "nature", "note": ""})
    assert response.status_code == 400
    assert response.context["export_form"].errors["venue"]
    assert 'data-field="venue"' in response.content.decode()
    assert not export.export_dir(experiment).exists()


def test_exporting_needs_a_login_and_a_post(client, browser, user, config):
    experiment = finished(user, config)
    url = reverse("experiment-export", args=[experiment.pk])
    assert browser.get(url).status_code == 405
    browser.logout()
    response = client.post(url, {"venue": "ieee-1col"})
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_the_page_has_the_export_form_and_a_nightly_toggle(browser, user, config):
    experiment = actions.create_experiment(user, config)
    page = browser.get(experiment.get_absolute_url()).content.decode()
    assert f'action="{reverse("experiment-export", args=[experiment.pk])}"' in page
    assert all(f'<option value="{v}"' in page for v in ("ieee-1col", "acm-2col"))
    assert f'action="{reverse("experiment-nightly", args=[experiment.pk])}"' in page
    assert 'name="nightly" value="1"' in page and "Run nightly" in page
    assert 'id="nightly-badge"' not in page
    experiment.nightly = True
    experiment.save(update_fields=["nightly"])
    page = browser.get(experiment.get_absolute_url()).content.decode()
    assert 'name="nightly" value="0"' in page and "Stop nightly" in page
    assert 'id="nightly-badge"' in page
