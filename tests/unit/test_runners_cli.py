"""``python -m runners`` as a subprocess: list, run (the run-directory contract) and bench."""

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import workloads
from runners import bench, registry

ROOT = Path(__file__).resolve().parents[2]
SPEC = {
    "system": "bytescheduler",
    "workload": "resnet50",
    "iterations": 5,
    "warmup_iterations": 2,
    "params": {"credit_bytes": 4_000_000},
    "cluster": {"workers": 4},
}


def runners(*args):
    return subprocess.run(
        [sys.executable, "-m", "runners", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def tmp_siblings(out):
    return sorted(out.parent.glob(f".{out.name}.tmp-*"))


def write_json(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli-run")
    spec_path = write_json(base / "spec.json", SPEC)
    out = base / "runs" / "r1"  # the parent does not exist yet either
    proc = runners("run", spec_path, "--out", out)
    return proc, out


# --- list --------------------------------------------------------------------------------


def test_list_json_describes_the_entries_and_the_workloads():
    proc = runners("list", "--json")

    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    entries = {e["name"]: e for e in data["entries"]}
    comm_names = {
        "pace", "delayed-allreduce", "tictac-tic", "tictac-tac", "eager-ps", "psld",
        "wfbp", "ddp", "horovod", "bytescheduler", "p3", "dear", "ps-default", "byteps",
    }  # fmt: skip
    assert comm_names <= set(entries)
    for entry in entries.values():
        assert entry["arena"] in ("allreduce", "ps", "cluster")
        assert entry["role"] in ("system", "baseline")
        assert "sim" in entry["modes"]
        assert isinstance(entry["params"], list)
    assert entries["pace"]["role"] == "system" and entries["pace"]["arena"] == "allreduce"
    assert entries["psld"]["role"] == "system" and entries["psld"]["arena"] == "ps"
    params = {p["name"]: p for p in entries["bytescheduler"]["params"]}
    assert set(params) == {"partition_bytes", "credit_bytes", "autotune"}
    assert params["autotune"]["choices"] == ["credit", "credit+partition", "off"]
    assert params["credit_bytes"]["type"] == "int"
    assert params["credit_bytes"]["default"] > 0
    assert entries["wfbp"]["params"] == []
    assert {"resnet50", "vgg16"} <= set(data["workloads"])
    assert data["workloads"] == workloads.names()
    assert "v100" in data["devices"]


def test_list_json_filters_by_arena():
    proc = runners("list", "--json", "--arena", "ps")

    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)["entries"]
    assert {e["name"] for e in entries} == {
        "tictac-tic", "tictac-tac", "eager-ps", "psld", "ps-default", "byteps", "p3"
    }  # fmt: skip
    assert {e["arena"] for e in entries} == {"ps"}


def test_list_prints_one_line_per_entry_and_the_workloads():
    proc = runners("list")

    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("wfbp ") for line in lines)
    assert any(line.startswith("bytescheduler ") and "credit_bytes=" in line for line in lines)
    assert lines[-1].startswith("workloads:") and "vgg16" in lines[-1]


# --- run ---------------------------------------------------------------------------------


def test_run_exits_zero_and_prints_the_summary_as_its_last_stdout_line(finished_run):
    proc, out = finished_run

    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["metrics"]["iteration_time_s"] > 0
    assert summary["units"]["iteration_time_s"] == "s"
    assert set(summary["metrics"]) <= set(summary["units"])
    assert summary["run"]["system"] == "bytescheduler"
    assert summary == json.loads((out / "summary.json").read_text())


def test_run_writes_the_whole_run_directory(finished_run):
    proc, out = finished_run

    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in out.iterdir()}
    assert {"manifest.json", "summary.json", "metrics.jsonl", "log.txt", "timeline.csv"} <= names
    assert tmp_siblings(out) == []
    assert "iteration_time_s=" in (out / "log.txt").read_text()


def test_run_records_the_resolved_spec_code_packages_and_host_in_the_manifest(finished_run):
    _, out = finished_run
    manifest = json.loads((out / "manifest.json").read_text())

    spec = manifest["spec"]
    assert spec["system"] == "bytescheduler"
    assert spec["cluster"]["workers"] == 4
    assert spec["cluster"]["bandwidth_gbps"] == 10.0  # a default, filled in
    assert spec["batch_size"] == workloads.load_profile("resnet50").default_batch_size
    assert spec["params"]["credit_bytes"] == 4_000_000
    assert spec["params"]["partition_bytes"] > 0
    assert isinstance(manifest["code"]["commit"], str) and manifest["code"]["commit"]
    assert manifest["packages"]["python"].count(".") == 2
    assert manifest["host"]["cpu_count"] >= 1
    assert manifest["seeds"]["spec"] == 0


def test_run_writes_one_metrics_line_per_warmup_and_measured_iteration(finished_run):
    _, out = finished_run
    lines = (out / "metrics.jsonl").read_text().splitlines()

    # The simulator runs one extra iteration only to time the last interval; it has no row.
    rows = [json.loads(line) for line in lines]
    assert len(rows) == SPEC["warmup_iterations"] + SPEC["iterations"]
    assert [r["iteration"] for r in rows] == list(range(len(rows)))
    assert [r["warmup"] for r in rows] == [True, True, False, False, False, False, False]
    assert all(r["iteration_time_s"] > 0 for r in rows)


def test_run_writes_a_timeline_csv_with_its_header(finished_run):
    _, out = finished_run
    with (out / "timeline.csv").open(newline="") as f:
        table = list(csv.reader(f))

    assert table[0] == ["iteration", "resource", "op", "layer", "start_s", "end_s", "bytes"]
    assert {row[1] for row in table[1:]} == {"compute", "network"}


def test_rerun_runs_the_manifests_spec_again(finished_run, tmp_path):
    """A run made here (no container) is re-run here from its manifest: same spec, and the
    same metrics (the simulator is deterministic for a seed)."""
    _, first = finished_run
    again = tmp_path / "again"
    proc = runners("rerun", first, "--out", again)
    assert proc.returncode == 0, proc.stderr
    old, new = (json.loads((d / "manifest.json").read_text()) for d in (first, again))
    assert old["spec"] == new["spec"] and new["container_image"] is None
    metrics = [json.loads((d / "summary.json").read_text())["metrics"] for d in (first, again)]
    assert metrics[0]["iteration_time_s"] == metrics[1]["iteration_time_s"]


def test_rerun_refuses_a_broken_manifest_naming_what_is_wrong(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    write_json(broken / "manifest.json", {"spec": {**SPEC, "system": "nope"}})
    proc = runners("rerun", broken, "--out", tmp_path / "x")
    assert proc.returncode == 2 and proc.stderr.startswith("invalid spec in"), proc.stderr
    proc = runners("rerun", tmp_path / "missing", "--out", tmp_path / "x")
    assert proc.returncode == 2 and "no readable manifest.json" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_run_accepts_a_yaml_spec(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(
        "system: wfbp\nworkload: vgg16\niterations: 3\ncluster:\n  workers: 2\n  gpu: a100\n"
    )
    out = tmp_path / "yaml-run"

    proc = runners("run", spec_path, "--out", out)

    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["run"]["workload"] == "vgg16"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"]["cluster"]["gpu"] == "a100"
    assert manifest["spec"]["cluster"]["workers"] == 2


@pytest.mark.parametrize(
    ("name", "content", "field"),
    [
        ("spec.json", json.dumps({**SPEC, "cluster": {"workers": 0}}), "cluster.workers"),
        ("spec.json", json.dumps({**SPEC, "params": {"credit": 1}}), "params.credit"),
        ("spec.yaml", "system: wfbp\nworkload: [vgg16\n", "SPEC"),
        ("missing.json", None, "SPEC"),
    ],
    ids=["bad-workers", "unknown-param", "bad-yaml", "missing-file"],
)
def test_run_rejects_an_invalid_spec_with_one_line_and_exit_two(tmp_path, name, content, field):
    spec_path = tmp_path / name
    if content is not None:
        spec_path.write_text(content)
    out = tmp_path / "out"

    proc = runners("run", spec_path, "--out", out)

    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"{field}: " in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()
    assert tmp_siblings(out) == []


def test_run_refuses_an_existing_out_directory_and_leaves_it_untouched(tmp_path):
    spec_path = write_json(tmp_path / "spec.json", SPEC)
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("precious")

    proc = runners("run", spec_path, "--out", out)

    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert "--out" in proc.stderr and "already exists" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "precious"
    assert tmp_siblings(out) == []


# --- bench -------------------------------------------------------------------------------


def test_bench_json_reports_every_case():
    proc = runners("bench", "--json", "--repeats", "1")

    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    comm = {e.name for e in registry.entries() if e.arena in ("allreduce", "ps")}
    assert {case["system"] for case in report["cases"]} == comm
    for case in report["cases"]:
        assert case["median_wall_s"] > 0
        assert case["plan_wall_s"] >= 0
        assert case["events_per_s"] > 0
        assert case["repeats"] == 1
        assert case["meets_target"] == (case["median_wall_s"] < report["target_s"])
        assert "/resnet50/w16/it50" in case["name"]
    assert report["host"]["python"]
    assert "grid" not in report  # only with --grid


def test_bench_harmony_training_compares_with_every_placement_baseline(capsys):
    from runners.cluster import harmony

    tiny = dataclasses.replace(harmony.QUICK_DEFAULT, val_traces=1)
    report = bench.run_harmony_train(held_out_traces=1, progress=False, config=tiny, jobs=30)

    rivals = set(harmony.HEURISTICS)
    assert set(report["validation_avg_jct_s"]) == {"harmony", "random", *rivals}
    assert set(report["held_out_avg_jct_s"]) == {"harmony", "random", *rivals}
    val = report["validation_avg_jct_s"]
    beats = all(val["harmony"] < val[r] for r in rivals)
    assert report["beats_every_placement_baseline_on_validation"] == beats
    assert report["meets_target"] == (beats and report["train_wall_s"] <= 900)
    assert 0 < report["train_wall_s"] < 900
