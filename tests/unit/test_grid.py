"""``runners.grid`` and ``python -m runners grid``: expansion, validation, the table, resume."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from runners import cli, execute, grid, registry
from runners.spec import validate

ROOT = Path(__file__).resolve().parents[2]


def _has_param(system, name):
    return any(p.name == name for p in registry.get(system).params)


# The tuner (where bytescheduler has one) would override the credit axis and cost seconds.
BS_FIXED = {"autotune": "off"} if _has_param("bytescheduler", "autotune") else {}
GRID = {
    "systems": ["wfbp", "bytescheduler"],
    "workloads": ["resnet50-debug", "vgg16-debug"],
    "seeds": [0, 1],
    "cluster": {"workers": 4, "bandwidth_gbps": [1, 10]},
    "params": {"bytescheduler": {"credit_bytes": [100_000, 4_000_000], **BS_FIXED}},
    "iterations": 4,
    "warmup_iterations": 1,
}
RUNS = 2 * 2 * 2 + 2 * 2 * 2 * 2  # wfbp: workloads x bandwidths x seeds; bytescheduler: x credits


def with_(**changes):
    return {**GRID, **changes}


def write_grid(path, data):
    path.write_text(json.dumps(data))
    return path


def run_cli(*args):
    return cli.main([str(a) for a in args])


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The grid run once in this process (jobs=1)."""
    out = tmp_path_factory.mktemp("grid") / "out"
    outcome = grid.run_grid(grid.load_grid(GRID), out, jobs=1, progress=False)
    return outcome, out


def without_wall(frame):
    return frame.drop(columns="sim_wall_s")


# --- expansion -----------------------------------------------------------------------------


def test_expansion_multiplies_params_axes_only_for_their_own_system():
    g = grid.load_grid(GRID)

    assert len(g) == RUNS
    assert g.counts() == {"runs": RUNS, "by_system": {"wfbp": 8, "bytescheduler": 16}}
    assert g.systems == ["wfbp", "bytescheduler"]
    wfbp = [r for r in g.runs if r.spec.system == "wfbp"]
    bs = [r for r in g.runs if r.spec.system == "bytescheduler"]
    assert all(r.spec.params == {} for r in wfbp)
    assert sorted({r.spec.params["credit_bytes"] for r in bs}) == [100_000, 4_000_000]
    assert {r.spec.cluster.workers for r in g.runs} == {4}  # a scalar is fixed
    assert {r.spec.cluster.bandwidth_gbps for r in g.runs} == {1.0, 10.0}
    assert len({r.run_key for r in g.runs}) == RUNS
    assert [r.index for r in g.runs] == list(range(RUNS))
    # Run order: systems, workloads, cluster axes, params axes, ..., seeds innermost.
    first = g.runs[0]
    assert (first.spec.system, first.spec.workload, first.spec.seed) == (
        "wfbp",
        "resnet50-debug",
        0,
    )
    assert first.combination == {
        "system": "wfbp",
        "workload": "resnet50-debug",
        "cluster.bandwidth_gbps": 1,
        "seed": 0,
    }
    assert g.runs[1].spec.seed == 1
    assert g.axes["params.bytescheduler.credit_bytes"] == [100_000, 4_000_000]
    assert g.fixed["cluster.workers"] == 4


def test_the_run_key_is_a_stable_hash_of_the_resolved_spec():
    a, b = grid.load_grid(GRID), grid.load_grid(json.loads(json.dumps(GRID)))

    assert [r.run_key for r in a.runs] == [r.run_key for r in b.runs]
    # Writing a default explicitly resolves to the same spec, hence the same key.
    explicit = grid.load_grid(with_(cluster={**GRID["cluster"], "latency_us": 10.0}))
    assert [r.run_key for r in explicit.runs] == [r.run_key for r in a.runs]


def test_selectors_expand_from_the_registry_without_duplicates():
    allreduce = [e.name for e in registry.entries("allreduce")]

    g = grid.load_grid(with_(systems=["arena:allreduce", "wfbp"], params={}))
    assert g.systems == allreduce
    g = grid.load_grid(with_(systems="all", params={}, workloads=["vgg16-debug"], seeds=[0]))
    assert set(allreduce) <= set(g.systems)
    assert all(registry.get(s).arena != "cluster" for s in g.systems)


def test_top_level_and_list_valued_cluster_fields():
    g = grid.load_grid(with_(iterations=[3, 4], systems=["wfbp"], params={}))
    assert len(g) == 2 * 8
    assert {r.spec.iterations for r in g.runs} == {3, 4}

    fixed = {"worker": 0, "slowdown": 2.0}
    g = grid.load_grid(with_(systems=["wfbp"], params={}, cluster={"stragglers": [fixed]}))
    assert len(g) == 4  # a list of stragglers is one value
    assert all(len(r.spec.cluster.stragglers) == 1 for r in g.runs)
    g = grid.load_grid(with_(systems=["wfbp"], params={}, cluster={"stragglers": [[], [fixed]]}))
    assert len(g) == 8  # a list of lists is an axis


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"system": "wfbp"}, "system", "use 'systems'"),
        ({"colour": "red"}, "colour", "unknown grid field"),
        ({"seeds": []}, "seeds", "empty"),
        ({"workloads": {"a": 1}}, "workloads", "must be a list"),
        ({"cluster": [1, 2]}, "cluster", "mapping"),
        ({"systems": ["wfbp", "nope"]}, "systems", "unknown system 'nope'"),
        ({"systems": ["arena:nowhere"]}, "systems", "unknown arena"),
        ({"systems": ["wfbp"]}, "params.bytescheduler", "not one of the grid's systems"),
        ({"params": {"wfbp": {"x": [1]}}}, "params.wfbp.x", "no such parameter"),
        ({"params": {"bytescheduler": [1]}}, "params.bytescheduler", "mapping"),
        ({"cluster": {"bandwidth_gbps": [1, 1.0]}}, "cluster.bandwidth_gbps", "twice"),
        ({"workloads": ["resnet50-debug", "nope"]}, "workloads", "unknown workload"),
        ({"seeds": [0, -1]}, "seeds", "got -1"),
        ({"iterations": [4, 1]}, "iterations", "got 1"),
        ({"cluster": {"gpuu": "v100"}}, "cluster.gpuu", "unknown field"),
    ],
)
def test_load_grid_names_the_grid_field_of_the_first_problem(changes, field, words):
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid(with_(**changes))

    assert caught.value.field == field
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_invalid_value_names_the_field_and_the_combination():
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid(with_(cluster={"bandwidth_gbps": [10, -1]}))

    assert caught.value.field == "cluster.bandwidth_gbps"
    assert str(caught.value).startswith("cluster.bandwidth_gbps: must be a number > 0")
    assert str(caught.value).endswith(
        "[system=wfbp workload=resnet50-debug bandwidth_gbps=-1 seed=0]"
    )
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid(with_(params={"bytescheduler": {"credit_bytes": [100_000, 1]}}))
    assert caught.value.field == "params.bytescheduler.credit_bytes"
    assert "credit_bytes=1" in str(caught.value)


# --- the table -----------------------------------------------------------------------------


def test_the_table_has_one_row_per_run_in_run_order(finished):
    outcome, out = finished
    table = grid.read_results(out)
    g = grid.load_grid(GRID)

    assert (outcome.total, outcome.ran, outcome.ok, outcome.failed) == (RUNS, RUNS, RUNS, 0)
    assert outcome.results == out / "results.csv"
    assert len(table) == RUNS
    assert list(table["run_key"]) == [r.run_key for r in g.runs]
    assert set(table["status"]) == {"ok"}
    assert table["error"].isna().all()
    assert (table["iteration_time_s"] > 0).all()
    assert (table["throughput_samples_per_s"] > 0).all()
    assert sorted(p.name for p in out.iterdir()) == ["grid.json", "results.csv", "specs.jsonl"]


def test_the_table_columns_and_dtypes(finished):
    _, out = finished
    table = grid.read_results(out / "results.csv")
    columns = list(table.columns)

    assert columns[:6] == ["run_key", "system", "arena", "role", "workload", "seed"]
    assert columns[-3:] == ["sim_wall_s", "status", "error"]
    cluster = [c for c in columns if c.startswith("cluster.")]
    params = [c for c in columns if c.startswith("params.")]
    # Every cluster field of the resolved spec, defaults included, then the resolved params.
    assert {"cluster.workers", "cluster.bandwidth_gbps", "cluster.gpu"} <= set(cluster)
    assert {"params.credit_bytes", "params.partition_bytes"} <= set(params)
    assert columns.index(cluster[-1]) < columns.index(params[0]) < columns.index("iteration_time_s")
    assert table["seed"].dtype == "int64"
    assert table["cluster.workers"].dtype == "int64"
    assert table["cluster.bandwidth_gbps"].dtype == "float64"
    assert table["cluster.latency_us"].dtype == "float64"  # a default
    assert pd.api.types.is_string_dtype(table["cluster.gpu"])
    assert pd.api.types.is_string_dtype(table["system"])
    assert table["params.credit_bytes"].dtype == "Int64"  # empty for wfbp
    assert table["iteration_time_s"].dtype == "float64"
    assert table["sim_wall_s"].dtype == "float64"
    wfbp = table[table["system"] == "wfbp"]
    bs = table[table["system"] == "bytescheduler"]
    assert wfbp["params.credit_bytes"].isna().all()
    assert set(bs["params.credit_bytes"]) == {100_000, 4_000_000}
    assert set(table["arena"]) == {"allreduce"}
    assert set(table["role"]) <= set(registry.ROLES)


def test_specs_jsonl_and_grid_json_describe_every_run(finished):
    _, out = finished
    lines = [json.loads(line) for line in (out / "specs.jsonl").read_text().splitlines()]
    described = json.loads((out / "grid.json").read_text())

    assert len(lines) == RUNS
    first = lines[0]
    spec = validate(first["spec"])
    assert grid.run_key(spec) == first["run_key"]
    assert first["index"] == 0 and first["arena"] == "allreduce"
    assert described["grid"] == GRID
    assert described["axes"]["systems"] == ["wfbp", "bytescheduler"]
    assert described["axes"]["cluster.bandwidth_gbps"] == [1, 10]
    assert described["counts"]["runs"] == RUNS and described["counts"]["ok"] == RUNS
    assert described["status"] == "finished"
    assert described["code"]["commit"]


def test_the_same_grid_gives_the_same_table_serial_or_parallel(finished, tmp_path):
    _, out = finished
    first = grid.read_results(out)

    again = grid.run_grid(grid.load_grid(GRID), tmp_path / "again", jobs=1, progress=False)
    parallel = grid.run_grid(grid.load_grid(GRID), tmp_path / "par", jobs=2, progress=False)

    pd.testing.assert_frame_equal(without_wall(first), without_wall(grid.read_results(again.out)))
    pd.testing.assert_frame_equal(
        without_wall(first), without_wall(grid.read_results(parallel.out))
    )


# --- the command ---------------------------------------------------------------------------


def test_cli_runs_a_grid_prints_a_summary_and_reports_progress(tmp_path, capsys):
    small = with_(systems=["wfbp"], params={}, seeds=[0])
    out = tmp_path / "out"

    code = run_cli("grid", write_grid(tmp_path / "g.json", small), "--out", out, "--jobs", "2")

    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.splitlines()[-1])
    assert summary["total"] == summary["ok"] == 4
    assert "[grid] 4/4 (100%)" in captured.err and "ETA" in captured.err
    assert len(grid.read_results(out)) == 4


def test_cli_rejects_an_invalid_grid_with_one_line_exit_two_and_writes_nothing(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "systems: [wfbp]\nworkloads: [resnet50-debug]\nseeds: [0]\n"
        "cluster:\n  bandwidth_gbps: [10, -1]\n"
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
    assert line.startswith("invalid grid: cluster.bandwidth_gbps: must be a number > 0")
    assert line.endswith("(got -1) [system=wfbp workload=resnet50-debug bandwidth_gbps=-1 seed=0]")
    assert not out.exists()


@pytest.mark.parametrize(
    "content",
    ["systems: [wfbp]\nworkloads: [resnet50-debug]\nsed: [1]\n", "[1, 2]\n", "systems: [\n"],
    ids=["unknown-key", "not-a-mapping", "bad-yaml"],
)
def test_cli_rejects_a_malformed_grid_file(tmp_path, capsys, content):
    path = tmp_path / "g.yaml"
    path.write_text(content)

    assert run_cli("grid", path, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("invalid grid: ") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cli_refuses_an_existing_out_directory_without_resume(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("precious")

    code = run_cli("grid", write_grid(tmp_path / "g.json", GRID), "--out", out)

    assert code == 2
    err = capsys.readouterr().err
    assert "--out" in err and "already exists" in err and len(err.splitlines()) == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_cli_rejects_jobs_below_one(tmp_path, capsys):
    code = run_cli(
        "grid", write_grid(tmp_path / "g.json", GRID), "--out", tmp_path / "o", "--jobs", 0
    )

    assert code == 2
    assert "--jobs" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_failing_run_is_recorded_and_the_grid_goes_on_exit_one(tmp_path, capsys, monkeypatch):
    real = execute.simulate

    def flaky(spec):
        if spec.system == "bytescheduler" and spec.workload == "vgg16-debug":
            raise RuntimeError("boom\nsecond line")
        return real(spec)

    monkeypatch.setattr(execute, "simulate", flaky)
    out = tmp_path / "out"

    code = run_cli("grid", write_grid(tmp_path / "g.json", GRID), "--out", out, "--jobs", 1)

    assert code == 1
    err = capsys.readouterr().err
    assert "8 of 24 runs failed" in err
    table = grid.read_results(out)
    assert len(table) == RUNS
    failed = table[table["status"] == "failed"]
    assert len(failed) == 8
    assert set(failed["workload"]) == {"vgg16-debug"} and set(failed["system"]) == {"bytescheduler"}
    assert set(failed["error"]) == {"RuntimeError: boom second line"}
    assert failed["iteration_time_s"].isna().all()
    assert (table.loc[table["status"] == "ok", "iteration_time_s"] > 0).all()
    assert "RuntimeError: boom" in (out / "failures.log").read_text()
    assert json.loads((out / "grid.json").read_text())["counts"]["failed"] == 8


# --- resume and crash safety ---------------------------------------------------------------


def _partial_row(run, metrics):
    return [
        run.run_key,
        run.spec.system,
        run.spec.workload,
        str(run.spec.seed),
        "0.5",
        "ok",
        "",
    ] + [json.dumps(metrics)]


def test_resume_skips_run_keys_already_in_the_partial_file(tmp_path, monkeypatch):
    g = grid.load_grid(GRID)
    out = tmp_path / "out"
    out.mkdir()
    recorded = g.runs[:5]
    with (out / "results.partial.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([*grid.PARTIAL_COLUMNS, "metrics"])
        for run in recorded:
            writer.writerow(_partial_row(run, {"iteration_time_s": 123.0}))
        f.write(g.runs[5].run_key + ",wfbp,resnet")  # a line torn by a crash
    simulated = []
    real = execute.simulate

    def counting(spec):
        simulated.append(spec)
        return real(spec)

    monkeypatch.setattr(execute, "simulate", counting)

    outcome = grid.run_grid(g, out, jobs=1, progress=False, resume=True)

    assert (outcome.skipped, outcome.ran, outcome.ok) == (5, RUNS - 5, RUNS)
    assert len(simulated) == RUNS - 5
    assert {s for s in simulated} == {r.spec for r in g.runs[5:]}
    table = grid.read_results(out)
    assert list(table["run_key"]) == [r.run_key for r in g.runs]
    assert list(table["iteration_time_s"][:5]) == [123.0] * 5  # kept, not re-run
    assert (table["iteration_time_s"][5:] < 1).all()
    assert not (out / "results.partial.csv").exists()

    # Resuming a finished grid runs nothing and rewrites the same table.
    again = grid.run_grid(g, out, jobs=1, progress=False, resume=True)
    assert (again.skipped, again.ran) == (RUNS, 0)
    pd.testing.assert_frame_equal(grid.read_results(out), table)


def test_cli_resume_continues_an_existing_out(tmp_path, capsys):
    path = write_grid(tmp_path / "g.json", with_(systems=["wfbp"], params={}))
    out = tmp_path / "out"
    assert run_cli("grid", path, "--out", out, "--jobs", 1) == 0
    bigger = write_grid(tmp_path / "g2.json", with_(systems=["wfbp"], params={}, seeds=[0, 1, 2]))
    capsys.readouterr()

    assert run_cli("grid", bigger, "--out", out, "--jobs", 1, "--resume") == 0

    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (summary["total"], summary["skipped"], summary["ran"]) == (12, 8, 4)
    assert len(grid.read_results(out)) == 12


def test_read_results_of_a_grid_in_progress_reads_the_partial_file(finished, tmp_path):
    _, done_out = finished
    out = tmp_path / "live"
    out.mkdir()
    (out / "specs.jsonl").write_text((done_out / "specs.jsonl").read_text())
    text = (done_out / "results.csv").read_text().splitlines()
    g = grid.load_grid(GRID)
    with (out / "results.partial.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([*grid.PARTIAL_COLUMNS, "metrics"])
        writer.writerow(_partial_row(g.runs[3], {"iteration_time_s": 2.5}))

    table = grid.read_results(out)

    assert list(table["run_key"]) == [g.runs[3].run_key]
    assert table["iteration_time_s"].tolist() == [2.5]
    assert table["seed"].dtype == "int64"
    assert len(text) == RUNS + 1


def test_keep_runs_writes_each_run_directory(tmp_path):
    small = grid.load_grid(with_(systems=["wfbp"], params={}, workloads=["vgg16-debug"], seeds=[0]))

    outcome = grid.run_grid(small, tmp_path / "out", jobs=1, progress=False, keep_runs=True)

    assert outcome.ok == 2
    table = grid.read_results(outcome.out)
    for key, iteration_time in zip(table["run_key"], table["iteration_time_s"], strict=True):
        summary = json.loads((outcome.out / "runs" / key / "summary.json").read_text())
        assert summary["metrics"]["iteration_time_s"] == iteration_time


def test_a_real_grid_is_checked_against_this_machine_before_anything_runs(tmp_path, capsys):
    """What ``python -m runners run`` refuses for a real run (here more ranks than this machine
    holds) is refused for the whole grid, naming the field, before any run starts."""

    from runners.real import launch

    too_many = launch.RANKS_PER_CPU * launch.usable_cpus() + 1
    raw = {
        "systems": ["wfbp"],
        "workloads": ["vgg16-debug"],
        "mode": "real",
        "cluster": {"workers": too_many},
        "real": {"network": "loopback"},
    }
    assert run_cli("grid", write_grid(tmp_path / "g.json", raw), "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "cluster.workers" in err and f"{too_many} ranks" in err and "at most" in err, err
    assert not (tmp_path / "out").exists()


REAL_GRID = {
    "systems": ["wfbp", "ps-default"],
    "workloads": ["vgg16-debug"],
    "cluster": {"workers": 2},
    "iterations": 3,
    "warmup_iterations": 1,
}


def test_the_real_section_goes_to_real_runs_its_arena_fields_to_their_arena_alone():
    """``real`` is a section of fields like ``cluster`` (a list an axis). With a ``mode`` axis
    the simulated runs take none of it and are expanded once; a PS field's axis multiplies
    the PS system's real runs alone, an all-reduce field's the all-reduce system's."""
    raw = {
        **REAL_GRID,
        "mode": ["sim", "real"],
        "real": {
            "network": "loopback",
            "ps_transport": ["blocking", "pipelined"],
            "dispatch": ["auto", "thread"],
        },
    }
    g = grid.load_grid(raw)
    runs = {
        (
            r.spec.system,
            r.spec.mode,
            r.spec.real and (r.spec.real.ps_transport, r.spec.real.dispatch),
        )
        for r in g.runs
    }
    assert runs == {
        ("wfbp", "sim", None),
        ("wfbp", "real", ("blocking", "auto")),
        ("wfbp", "real", ("blocking", "thread")),
        ("ps-default", "sim", None),
        ("ps-default", "real", ("blocking", "auto")),
        ("ps-default", "real", ("pipelined", "auto")),
    }
    assert len(g) == len(runs)
    assert all(r.spec.real.network == "loopback" for r in g.runs if r.spec.mode == "real")
    # a run's label names the axes it takes: not the simulated runs' nor the other arena's
    assert {r.label for r in g.runs if r.spec.mode == "sim"} == {
        "system=wfbp workload=vgg16-debug mode=sim seed=0",
        "system=ps-default workload=vgg16-debug mode=sim seed=0",
    }
    assert grid.load_grid(raw).describe()["axes"]["real.ps_transport"] == ["blocking", "pipelined"]


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"real": {"network": "loopback"}}, "real", "the grid has none"),
        ({"mode": "real", "real": "loopback"}, "real", "must be a mapping"),
        (
            {
                "mode": "real",
                "systems": ["wfbp"],
                "real": {"ps_transport": ["blocking", "pipelined"]},
            },
            "real.ps_transport",
            "ps arena's systems alone",
        ),
        (
            {"mode": ["sim", "real"], "systems": ["ps-default"], "real": {"dispatch": "thread"}},
            "real.dispatch",
            "allreduce arena's systems alone",
        ),
        ({"mode": "real", "real": {"network": ["loopback", "wifi"]}}, "real.network", "wifi"),
    ],
)
def test_a_bad_real_section_names_its_field(changes, field, words):
    with pytest.raises(grid.GridError) as caught:
        grid.load_grid({**REAL_GRID, **changes})
    assert caught.value.field == field
    assert words in str(caught.value)


def test_the_table_has_the_real_sections_fields_defaults_included_on_real_rows_alone():
    """The table's ``real.<field>`` columns (every field of the resolved options, as for
    ``cluster``) come from each real run's spec; a simulated row leaves them empty, and a
    table without real runs has none."""
    g = grid.load_grid(
        {**REAL_GRID, "systems": ["wfbp"], "mode": ["sim", "real"], "real": {"threads": 2}}
    )
    entries = grid._entries(g)
    outcomes = {
        e["run_key"]: {"status": "ok", "error": "", "sim_wall_s": 1.0, "metrics": {"x": 1.0}}
        for e in entries
    }
    columns, cells = grid._table(entries, outcomes)
    real = [c for c in columns if c.startswith("real.")]
    assert "real.ddp_timeline" in real and "real.ps_transport" in real  # defaults, left out
    assert "real.ddp_timeline" not in entries[1]["spec"]["real"]  # ... of the spec's dict
    rows = [dict(zip(columns, row, strict=True)) for row in cells]
    by_mode = {row["mode"]: row for row in rows}
    assert (
        by_mode["real"]["real.threads"] == "2" and by_mode["real"]["real.ddp_timeline"] == "False"
    )
    assert all(by_mode["sim"][c] == "" for c in real)
    assert "x" in columns and "x" not in real and columns.index("x") > columns.index(real[-1])

    sim_only = grid.load_grid({**REAL_GRID, "systems": ["wfbp"]})
    entries = grid._entries(sim_only)
    ok = {"status": "ok", "error": "", "sim_wall_s": 1.0, "metrics": {}}
    columns, _ = grid._table(entries, {e["run_key"]: ok for e in entries})
    assert not [c for c in columns if c.startswith("real.")]


def test_the_real_transports_example_expands_to_both_transports_per_system():
    g = grid.load_grid(ROOT / "examples" / "grids" / "real-transports.yaml")
    assert {(r.spec.system, r.spec.real.ps_transport) for r in g.runs} == {
        (s, t) for s in ("ps-default", "tictac-tic") for t in ("blocking", "pipelined")
    }
    assert all(r.spec.mode == "real" and r.spec.real.network == "loopback" for r in g.runs)


def test_lone_allreduce_points_are_one_value_and_a_list_of_them_an_axis():
    """``cluster.lone_allreduce`` is itself a list of [bytes, seconds] pairs: as given, one
    value (not an axis of pairs); a list of such lists, an axis."""
    points = [[4096, 0.009], [1 << 20, 0.013]]
    base = {"systems": ["ddp"], "workloads": ["vgg16-debug"], "cluster": {"workers": 2}}
    one = grid.load_grid({**base, "cluster": {"workers": 2, "lone_allreduce": points}})
    assert [r.spec.cluster.lone_allreduce for r in one.runs] == [((4096, 0.009), (1 << 20, 0.013))]
    axis = grid.load_grid({**base, "cluster": {"workers": 2, "lone_allreduce": [[], points]}})
    assert [r.spec.cluster.lone_allreduce for r in axis.runs] == [
        (),
        ((4096, 0.009), (1 << 20, 0.013)),
    ]
