"""The cluster arena from the command line: every entry listed and runnable on a synthetic
trace and on every imported format; bad input exits 2 with the field (file, row) named and
nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from runners import registry
from runners.cli import main

from . import trace_samples as samples

REQUIRED = ("avg_jct_s", "p95_jct_s", "makespan_s", "total_utility", "jobs_finished")
CLUSTER = [e.name for e in registry.entries("cluster")]
SMALL = {"generator": "philly", "jobs": 40, "jobs_per_hour": 30, "ps_fraction": 0.3}


def run_spec(tmp_path: Path, spec: dict, capsys, name: str = "out") -> tuple[int, dict, str]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    code = main(["run", str(path), "--out", str(tmp_path / name)])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def test_every_cluster_entry_is_listed_with_its_arena_and_role(capsys):
    assert main(["list", "--json", "--arena", "cluster"]) == 0
    listed = {e["name"]: e for e in json.loads(capsys.readouterr().out)["entries"]}
    for name in ("oasis", "fifo", "drf", "srtf", "tiresias", "bin-packing", "load-balance", "lif"):
        assert listed[name]["arena"] == "cluster"
    assert listed["oasis"]["role"] == "system" and listed["fifo"]["role"] == "baseline"


@pytest.mark.parametrize("system", CLUSTER)
def test_every_cluster_entry_runs_on_a_synthetic_trace(tmp_path, capsys, system):
    spec = {
        "system": system,
        "trace": {**SMALL, "duration_scale": 0.1},
        "cluster": {"servers": 4},
    }
    code, summary, err = run_spec(tmp_path, spec, capsys)
    assert code == 0, err
    metrics = summary["metrics"]
    for key in (*REQUIRED, "sim_jobs_per_s"):
        assert key in metrics
    assert metrics["jobs_finished"] + round((1 - metrics["admitted_fraction"]) * 40) == 40
    assert summary["run"]["arena"] == "cluster"
    jobs = (tmp_path / "out" / "jobs.csv").read_text().splitlines()
    assert len(jobs) == 41  # header + every job, admitted or not
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["spec"]["trace"]["jobs"] == 40


def _format_samples(tmp_path: Path) -> dict[str, dict]:
    folder = tmp_path / "traces"
    folder.mkdir()
    return {
        "philly": {"file": str(samples.write_philly(folder)), "format": "philly"},
        "helios": {"file": str(samples.write_helios(folder)), "format": "helios"},
        "pai": {"file": str(samples.write_pai(folder)), "format": "pai"},
        "gavel": {
            "file": str(samples.write_gavel(folder)),
            "format": "gavel",
            "throughputs": str(samples.write_gavel_table(folder)),
        },
        "tiresias": {"file": str(samples.write_tiresias(folder)), "format": "tiresias"},
    }


@pytest.mark.parametrize("fmt", ["philly", "helios", "pai", "gavel", "tiresias"])
@pytest.mark.parametrize("system", ["fifo", "oasis"])
def test_runs_on_every_imported_format(tmp_path, capsys, fmt, system):
    trace = _format_samples(tmp_path)[fmt]
    spec = {"system": system, "trace": trace, "cluster": {"servers": 4, "ps_servers": 2}}
    code, summary, err = run_spec(tmp_path, spec, capsys)
    assert code == 0, err
    assert summary["trace"]["source"].startswith(f"{fmt}:")
    assert summary["metrics"]["jobs_finished"] >= 1


def test_a_gavel_trace_runs_at_gavel_s_measured_speed(tmp_path, capsys):
    trace = _format_samples(tmp_path)["gavel"]
    spec = {
        "system": "fifo",
        "trace": trace,
        "cluster": {"servers": 4},
        "params": {"placement": "load-balance"},  # every job alone on its server
    }
    code, summary, err = run_spec(tmp_path, spec, capsys)
    assert code == 0, err
    rows = (tmp_path / "out" / "jobs.csv").read_text().splitlines()[1:]
    # ResNet-50 job: 7931 steps at the table's 10 it/s, alone on its server.
    first = rows[0].split(",")
    assert float(first[7]) == pytest.approx(793.1)


def bad(tmp_path, capsys, spec: dict, field: str) -> str:
    code, _, err = run_spec(tmp_path, spec, capsys)
    assert code == 2, err
    assert field in err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    return err


def test_bad_cluster_input_exits_2_naming_the_field(tmp_path, capsys):
    base = {"system": "fifo", "trace": SMALL, "cluster": {"servers": 4}}
    bad(tmp_path, capsys, {**base, "system": "no-such"}, "system")
    bad(tmp_path, capsys, {**base, "trace": {**SMALL, "jobs": 0}}, "trace.jobs")
    bad(tmp_path, capsys, {**base, "trace": {**SMALL, "speed": 1}}, "trace.speed")
    bad(tmp_path, capsys, {k: v for k, v in base.items() if k != "trace"}, "trace")
    bad(tmp_path, capsys, {**base, "cluster": {"servers": -1}}, "cluster.servers")
    bad(tmp_path, capsys, {**base, "cluster": {"workers": 4}}, "cluster.workers")
    bad(tmp_path, capsys, {**base, "params": {"placement": "random"}}, "params.placement")
    bad(
        tmp_path, capsys, {**base, "trace": {"file": "/nope.csv", "format": "helios"}}, "trace.file"
    )
    folder = tmp_path / "t"
    folder.mkdir()
    helios = str(samples.write_helios(folder))
    bad(tmp_path, capsys, {**base, "trace": {"file": helios, "format": "csv"}}, "trace.format")
    gavel = str(samples.write_gavel(folder))
    bad(tmp_path, capsys, {**base, "trace": {"file": gavel, "format": "gavel"}}, "throughputs")


def test_bad_trace_rows_exit_2_naming_file_and_row_or_are_skipped_when_asked(tmp_path, capsys):
    folder = tmp_path / "t"
    folder.mkdir()
    tiresias = str(samples.write_tiresias(folder, extra=["9,2,-5,100,vgg16,50,10"]))
    base = {"system": "fifo", "cluster": {"servers": 4}}
    err = bad(
        tmp_path, capsys, {**base, "trace": {"file": tiresias, "format": "tiresias"}}, "row 6"
    )
    assert "tiresias.csv" in err and "invalid trace" in err
    trace = {"file": tiresias, "format": "tiresias", "on_error": "skip"}
    code, summary, err = run_spec(tmp_path, {**base, "trace": trace}, capsys)
    assert code == 0, err
    assert summary["trace"]["rows_skipped"] == 1 and summary["trace"]["jobs"] == 3
    log = (tmp_path / "out" / "log.txt").read_text()
    assert "row 6" in log  # the skipped row is logged, not silently dropped


def test_a_job_larger_than_any_server_exits_2(tmp_path, capsys):
    folder = tmp_path / "t"
    folder.mkdir()
    tiresias = str(samples.write_tiresias(folder))  # one job asks for 8 GPUs
    spec = {
        "system": "fifo",
        "trace": {"file": tiresias, "format": "tiresias"},
        "cluster": {"servers": 4, "gpus_per_server": 4},
    }
    # 8 single-GPU workers spread fine; a task bigger than a server does not.
    code, _, err = run_spec(tmp_path, spec, capsys, name="fits")
    assert code == 0, err
    spec["cluster"] = {"servers": 1, "gpus_per_server": 4}
    err = bad(tmp_path, capsys, spec, "job")
    assert "exceed the whole cluster" in err


def test_a_cluster_grid_with_workloads_is_refused_naming_the_field(tmp_path, capsys):
    """Cluster-arena grids sweep a trace (tests/unit/test_cluster_grid.py), not workloads."""
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({"systems": ["fifo"], "workloads": ["resnet50"]}))
    assert main(["grid", str(grid), "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("invalid grid: workloads:") and "cluster arena" in err


def test_harmony_trains_from_the_command_line_and_the_checkpoint_runs(tmp_path, capsys):
    assert main(["harmony", "train"]) == 2  # --out is required
    capsys.readouterr()
    out = tmp_path / "ck"
    code = main(["harmony", "train", "--out", str(out), "--epochs", "1", "--episodes", "1",
                 "--jobs", "20"])  # fmt: skip
    assert code == 0
    checkpoint = out / "harmony-v1.pt"
    assert checkpoint.is_file() and (out / "harmony-v1.json").is_file()
    capsys.readouterr()
    spec = {
        "system": "harmony",
        "trace": {**SMALL, "duration_scale": 0.1},
        "cluster": {"servers": 4},
        "params": {"checkpoint": str(checkpoint)},
    }
    code, summary, err = run_spec(tmp_path, spec, capsys, name="trained")
    assert code == 0, err
    assert summary["policy"] == {"scheduler": "fifo", "placement": "harmony"}
    spec["params"] = {"checkpoint": str(tmp_path / "missing.pt")}
    bad(tmp_path, capsys, spec, "params.checkpoint")


@pytest.mark.parametrize("fmt", [None, "philly", "gavel"], ids=["generated", "philly", "gavel"])
def test_a_resolved_cluster_spec_validates_again_unchanged(tmp_path, fmt):
    """A queued run stores the resolved spec and the runner validates it again."""
    from runners import spec as run_spec

    trace = SMALL if fmt is None else _format_samples(tmp_path)[fmt]
    first = run_spec.validate({"system": "fifo", "trace": trace, "cluster": {"servers": 4}})
    again = run_spec.validate(json.loads(json.dumps(first.as_dict())))
    assert again == first
