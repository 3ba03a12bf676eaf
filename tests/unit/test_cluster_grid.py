"""``runners.grid`` over the cluster arena: trace and cluster axes (the load sweep), the table's
load column and cluster metrics, resume, and grids refused naming the field."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from runners import cli, grid
from runners.cluster import run as cluster_run
from runners.cluster.spec import ClusterRunSpec
from runners.spec import validate

from . import trace_samples as samples

ROOT = Path(__file__).resolve().parents[2]
JOBS = 12
LOADS = [10, 40]
GRID = {
    "systems": ["fifo", "srtf"],
    "seeds": [0],
    "trace": {"generator": "philly", "jobs": JOBS, "jobs_per_hour": LOADS, "duration_scale": 0.05},
    "cluster": {"servers": 2, "gpus_per_server": 8},
}
RUNS = 2 * len(LOADS)
METRICS = (
    "jobs_finished",
    "avg_jct_s",
    "p95_jct_s",
    "makespan_s",
    "total_utility",
    "avg_queueing_s",
    "gpu_utilization",
    "admitted_fraction",
    "sim_jobs_per_s",
)
WALL_DEPENDENT = ["sim_wall_s", "sim_jobs_per_s"]


def with_(**changes):
    return {**GRID, **changes}


def with_trace(**changes):
    return with_(trace={**GRID["trace"], **changes})


def write_grid(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The small cluster grid run once in this process (jobs=1)."""
    out = tmp_path_factory.mktemp("cluster-grid") / "out"
    outcome = grid.run_grid(grid.load_grid(GRID), out, jobs=1, progress=False)
    return outcome, out


# --- expansion -----------------------------------------------------------------------------


def test_a_cluster_grid_expands_trace_and_cluster_axes():
    g = grid.load_grid(GRID)

    assert g.kind == grid.CLUSTER_GRID
    assert len(g) == RUNS
    assert all(isinstance(r.spec, ClusterRunSpec) for r in g.runs)
    assert g.axes == {
        "systems": ["fifo", "srtf"],
        "trace.jobs_per_hour": LOADS,
        "seeds": [0],
    }
    assert g.fixed["trace.jobs"] == JOBS and g.fixed["cluster.servers"] == 2
    assert [(r.spec.system, r.spec.trace.jobs_per_hour) for r in g.runs] == [
        ("fifo", 10.0),
        ("fifo", 40.0),
        ("srtf", 10.0),
        ("srtf", 40.0),
    ]
    first = g.runs[0]
    assert first.combination == {"system": "fifo", "trace.jobs_per_hour": 10, "seed": 0}
    assert first.label == "system=fifo jobs_per_hour=10 seed=0"
    assert first.spec.workload == f"philly-{JOBS}"
    assert first.spec.cluster.servers == 2 and first.spec.trace.duration_scale == 0.05
    assert len({r.run_key for r in g.runs}) == RUNS
    assert g.describe()["kind"] == "cluster"


def test_trace_cluster_params_and_seed_axes_multiply():
    g = grid.load_grid(
        with_(
            systems=["bin-packing"],
            seeds=[0, 1],
            trace={**GRID["trace"], "jobs": [6, JOBS]},
            cluster={"servers": [2, 3]},
            params={"bin-packing": {"scheduler": ["fifo", "srtf"]}},
        )
    )

    assert len(g) == 2 * 2 * 2 * 2 * 2  # jobs x loads x servers x schedulers x seeds
    assert list(g.axes) == [
        "systems",
        "trace.jobs",
        "trace.jobs_per_hour",
        "cluster.servers",
        "params.bin-packing.scheduler",
        "seeds",
    ]
    assert {r.spec.trace.jobs for r in g.runs} == {6, JOBS}
    assert {r.spec.cluster.servers for r in g.runs} == {2, 3}
    assert {r.spec.params["scheduler"] for r in g.runs} == {"fifo", "srtf"}
    assert {r.spec.seed for r in g.runs} == {0, 1}
    assert g.runs[1].spec.seed == 1  # seeds innermost, as in communication grids


def test_the_cluster_arena_selector_and_a_trace_file():
    g = grid.load_grid(with_(systems=["arena:cluster"], trace={"jobs": 4}))
    assert "oasis" in g.systems and "fifo" in g.systems and "bin-packing" in g.systems
    assert len(g) == len(g.systems)


def test_a_grid_over_a_trace_file(tmp_path):
    path = samples.write_philly(tmp_path)
    g = grid.load_grid(
        with_(trace={"file": str(path), "format": "philly"}, cluster={"servers": [2, 4]})
    )

    outcome = grid.run_grid(g, tmp_path / "out", jobs=1, progress=False)

    assert (outcome.total, outcome.ok) == (4, 4)
    table = grid.read_results(outcome.out)
    assert set(table["workload"]) == {path.name}
    assert set(table["trace.file"]) == {str(path)}
    assert set(table["cluster.servers"]) == {2, 4}


# --- refused grids -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"systems": ["fifo", "wfbp"]}, "systems", "mixes arenas"),
        ({"systems": ["all", "fifo"]}, "systems", "mixes arenas"),
        ({"systems": ["fifo", "nope"]}, "systems", "unknown system 'nope'"),
        ({"workloads": ["resnet50"]}, "workloads", "jobs come from 'trace'"),
        ({"iterations": [3, 4]}, "iterations", "not a field of a cluster-arena grid"),
        ({"trace": [1, 2]}, "trace", "mapping"),
        ({"trace": {"jobs": 5, "seed": [0, 1]}}, "trace.seed", "give 'seeds'"),
        ({"trace": {"jobs": 5, "jobs_per_hr": [1, 2]}}, "trace.jobs_per_hr", "unknown field"),
        ({"trace": {"jobs": 5, "jobs_per_hour": [10, 10.0]}}, "trace.jobs_per_hour", "twice"),
        ({"trace": {"jobs": [5, 0]}}, "trace.jobs", "got 0"),
        ({"cluster": {"bandwidth_gbps": [1, 10]}}, "cluster.bandwidth_gbps", "unknown field"),
        ({"cluster": {"servers": [2, 0]}}, "cluster.servers", "between 1 and"),
        ({"params": {"fifo": {"placement": ["nowhere"]}}}, "params.fifo.placement", "one of"),
        ({"mode": "real"}, "mode", "supports sim only"),
    ],
)
def test_a_bad_cluster_grid_names_the_grid_field(changes, field, words):
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid(with_(**changes))

    assert caught.value.field == field
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_trace_and_a_trace_that_does_not_fit_are_refused():
    data = {k: v for k, v in GRID.items() if k != "trace"}
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid(data)
    assert caught.value.field == "trace" and "required" in str(caught.value)

    # Philly-like jobs ask for up to 8 GPUs: a 1-GPU cluster cannot hold them (found by building
    # the trace before anything runs, as `python -m runners run` would refuse it).
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid(with_(cluster={"servers": 1, "gpus_per_server": [8, 1]}))
    assert caught.value.field == "trace"
    assert "exceed" in str(caught.value) or "demands" in str(caught.value)
    assert str(caught.value).endswith("[system=fifo jobs_per_hour=10 gpus_per_server=1 seed=0]")


def test_a_communication_grid_refuses_a_trace():
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid({"systems": ["wfbp"], "workloads": ["vgg16-debug"], "trace": {"jobs": 5}})

    assert caught.value.field == "trace"
    assert "belongs to the cluster arena" in str(caught.value)


def test_cli_refuses_a_bad_cluster_grid_exit_two_one_line_nothing_written(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "systems: [fifo, srtf]\n"
        "trace: {generator: philly, jobs: 10, jobs_per_hour: [10, -5]}\n"
        "cluster: {servers: 2}\n"
    )
    out = tmp_path / "out"

    proc = subprocess.run(
        [sys.executable, "-m", "runners", "grid", str(path), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("invalid grid: trace.jobs_per_hour: must be a number > 0")
    assert line.endswith("[system=fifo jobs_per_hour=-5 seed=0]")
    assert not out.exists()


def test_cli_refuses_a_mixed_arena_grid(tmp_path, capsys):
    path = write_grid(tmp_path / "g.json", with_(systems=["fifo", "bytescheduler"]))

    assert cli.main(["grid", str(path), "--out", str(tmp_path / "out")]) == 2

    err = capsys.readouterr().err
    assert err.startswith("invalid grid: systems: mixes arenas: 'fifo' is in the cluster arena")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


# --- the table -----------------------------------------------------------------------------


def test_the_table_has_the_load_column_and_the_cluster_metrics(finished):
    outcome, out = finished
    table = grid.read_results(out)
    columns = list(table.columns)

    assert (outcome.total, outcome.ran, outcome.ok, outcome.failed) == (RUNS, RUNS, RUNS, 0)
    assert list(table["run_key"]) == [r.run_key for r in grid.load_grid(GRID).runs]
    assert columns[:7] == ["run_key", "system", "arena", "role", "workload", "seed", "mode"]
    assert columns[-3:] == ["sim_wall_s", "status", "error"]
    assert not {"iterations", "warmup_iterations", "batch_size"} & set(columns)
    trace = [c for c in columns if c.startswith("trace.")]
    cluster = [c for c in columns if c.startswith("cluster.")]
    assert {"trace.jobs", "trace.jobs_per_hour", "trace.generator"} <= set(trace)
    assert {"cluster.servers", "cluster.gpus_per_server", "cluster.gpu"} <= set(cluster)
    assert columns.index(trace[-1]) < columns.index(cluster[0])
    assert columns.index(cluster[-1]) < columns.index("params.placement")
    assert columns.index("params.placement") < columns.index("avg_jct_s")
    for metric in METRICS:
        assert table[metric].dtype == "float64", metric
    assert list(table["trace.jobs_per_hour"]) == [10.0, 40.0, 10.0, 40.0]
    assert table["trace.jobs_per_hour"].dtype == "float64"
    assert table["trace.jobs"].dtype == "int64" and table["cluster.servers"].dtype == "int64"
    assert set(table["arena"]) == {"cluster"} and set(table["role"]) == {"baseline"}
    assert set(table["workload"]) == {f"philly-{JOBS}"}
    assert set(table["status"]) == {"ok"} and table["error"].isna().all()
    # fifo and srtf admit every job: all of the trace's jobs finish.
    assert (table["jobs_finished"] == JOBS).all()
    assert (table["admitted_fraction"] == 1.0).all()
    assert (table["avg_jct_s"] > 0).all() and (table["p95_jct_s"] > 0).all()
    assert (table["makespan_s"] > 0).all() and (table["sim_wall_s"] > 0).all()
    # Ready to plot: one value per system and load.
    by_load = table.pivot(index="trace.jobs_per_hour", columns="system", values="avg_jct_s")
    assert by_load.shape == (len(LOADS), 2) and not by_load.isna().any().any()


def test_specs_jsonl_and_grid_json_describe_the_cluster_runs(finished):
    _, out = finished
    lines = [json.loads(line) for line in (out / "specs.jsonl").read_text().splitlines()]
    described = json.loads((out / "grid.json").read_text())

    assert len(lines) == RUNS
    assert lines[0]["arena"] == "cluster" and lines[0]["workload"] == f"philly-{JOBS}"
    spec = validate(lines[0]["spec"])
    assert isinstance(spec, ClusterRunSpec) and grid.run_key(spec) == lines[0]["run_key"]
    assert described["kind"] == "cluster"
    assert described["axes"]["trace.jobs_per_hour"] == LOADS
    assert described["counts"] == {
        "runs": RUNS,
        "by_system": {"fifo": 2, "srtf": 2},
        "ok": RUNS,
        "failed": 0,
        "ran": RUNS,
        "skipped": 0,
    }


def test_the_same_cluster_grid_gives_the_same_table_serial_or_parallel(finished, tmp_path):
    _, out = finished
    first = grid.read_results(out).drop(columns=WALL_DEPENDENT)

    parallel = grid.run_grid(grid.load_grid(GRID), tmp_path / "par", jobs=2, progress=False)

    again = grid.read_results(parallel.out).drop(columns=WALL_DEPENDENT)
    pd.testing.assert_frame_equal(first, again)


def test_keep_runs_writes_cluster_run_directories(tmp_path):
    small = grid.load_grid(with_(systems=["fifo"], trace={**GRID["trace"], "jobs_per_hour": 20}))

    outcome = grid.run_grid(small, tmp_path / "out", jobs=1, progress=False, keep_runs=True)

    assert outcome.ok == 1
    table = grid.read_results(outcome.out)
    key = table["run_key"][0]
    summary = json.loads((outcome.out / "runs" / key / "summary.json").read_text())
    assert summary["metrics"]["avg_jct_s"] == table["avg_jct_s"][0]
    assert summary["metrics"]["jobs_finished"] == JOBS
    assert (outcome.out / "runs" / key / "jobs.csv").is_file()


# --- resume --------------------------------------------------------------------------------


def test_resume_skips_cluster_runs_already_recorded(tmp_path, monkeypatch):
    g = grid.load_grid(GRID)
    out = tmp_path / "out"
    out.mkdir()
    recorded = g.runs[:2]
    with (out / "results.partial.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([*grid.PARTIAL_COLUMNS, "metrics"])
        for run in recorded:
            row = [run.run_key, run.spec.system, run.spec.workload, str(run.spec.seed), "0.5"]
            writer.writerow([*row, "ok", "", json.dumps({"avg_jct_s": 123.0})])
    simulated = []
    real = cluster_run.run

    def counting(spec):
        simulated.append(spec)
        return real(spec)

    monkeypatch.setattr(cluster_run, "run", counting)

    outcome = grid.run_grid(g, out, jobs=1, progress=False, resume=True)

    assert (outcome.skipped, outcome.ran, outcome.ok) == (2, RUNS - 2, RUNS)
    assert simulated == [r.spec for r in g.runs[2:]]
    table = grid.read_results(out)
    assert list(table["run_key"]) == [r.run_key for r in g.runs]
    assert list(table["avg_jct_s"][:2]) == [123.0, 123.0]  # kept, not re-run
    assert table["jobs_finished"][:2].isna().all() and (table["jobs_finished"][2:] == JOBS).all()

    again = grid.run_grid(g, out, jobs=1, progress=False, resume=True)
    assert (again.skipped, again.ran) == (RUNS, 0)
    pd.testing.assert_frame_equal(grid.read_results(out), table)


def test_cli_resume_adds_a_load_to_a_finished_cluster_grid(tmp_path, capsys):
    out = tmp_path / "out"
    small = write_grid(tmp_path / "g.json", with_trace(jobs_per_hour=LOADS))
    assert cli.main(["grid", str(small), "--out", str(out), "--jobs", "1"]) == 0
    bigger = write_grid(tmp_path / "g2.json", with_trace(jobs_per_hour=[*LOADS, 80]))
    capsys.readouterr()

    assert cli.main(["grid", str(bigger), "--out", str(out), "--jobs", "1", "--resume"]) == 0

    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (summary["total"], summary["skipped"], summary["ran"]) == (6, 4, 2)
    table = grid.read_results(out)
    assert sorted(set(table["trace.jobs_per_hour"])) == [10.0, 40.0, 80.0]


def test_read_results_of_a_cluster_grid_in_progress(finished, tmp_path):
    _, done_out = finished
    out = tmp_path / "live"
    out.mkdir()
    (out / "specs.jsonl").write_text((done_out / "specs.jsonl").read_text())
    run = grid.load_grid(GRID).runs[1]
    with (out / "results.partial.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([*grid.PARTIAL_COLUMNS, "metrics"])
        row = [run.run_key, run.spec.system, run.spec.workload, "0", "0.5", "ok", ""]
        writer.writerow([*row, json.dumps({"avg_jct_s": 7.5, "jobs_finished": 12.0})])

    table = grid.read_results(out)

    assert list(table["run_key"]) == [run.run_key]
    assert table["trace.jobs_per_hour"].tolist() == [40.0]
    assert table["avg_jct_s"].tolist() == [7.5]


# --- the example ---------------------------------------------------------------------------


def test_the_example_load_grid_is_valid():
    g = grid.load_grid(ROOT / "examples" / "grids" / "cluster-load.yaml")

    assert g.kind == "cluster"
    assert len(g) == 5 * 4 * 2
    assert len(g.axes["trace.jobs_per_hour"]) == 4 and g.axes["seeds"] == [0, 1]
    assert {r.spec.trace.jobs for r in g.runs} == {100}
