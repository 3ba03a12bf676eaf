"""A real run's twin (``runners.twin``, ``python -m runners twin``) and a real-mode
experiment's runs beside their twins in the portal (``lab.reports.realsim``).

The twins come from the committed calibration ``testbed-1128`` (pinned, so a newer
calibration does not change what these tests see); the real runs here are written by hand:
their times are made up, what is checked is what the portal and the command make of them."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from django.test import override_settings
from django.utils import timezone

from lab import actions
from lab.reports import figures, realsim
from lab.results.models import Measurement
from lab.runs.models import Run
from runners import cli, fidelity, rundir, twin
from runners.spec import validate

LABEL = "testbed-1128"
SUMMARY = {
    "network": {"kind": "shaped", "bandwidth_gbps": 0.25, "latency_emulated": False},
    "device": {"kind": "cpu", "note": ""},
    "comm_priority": {"priority": "realtime", "note": ""},
    "units": {"iteration_time_s": "s"},
}


def _real(system: str = "wfbp", **changes) -> dict:
    raw = {
        "system": system,
        "mode": "real",
        "workload": "vgg16-debug",
        "cluster": {"workers": 2, "bandwidth_gbps": 0.25},
        "iterations": 10,
        "real": {"network": "shaped", "comm_priority": "realtime"},
    }
    for key, value in changes.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return validate(raw).as_dict()


def _expected(spec: dict) -> float:
    """The twin as fidelity builds it, by hand: matched_specs, the run's own iterations,
    warm-up, seed and parameters, simulated as fidelity simulates it."""
    testbed = fidelity.load_testbed(LABEL)
    # SUMMARY says nothing of the engine's dispatch, as runs from before 2026-11-30: the thread
    _, sim = fidelity.matched_specs(
        spec["system"], spec["workload"], 0.25, testbed, 10, engine_dispatch="thread"
    )
    sim.update(
        params=spec["params"], warmup_iterations=spec["warmup_iterations"], seed=spec["seed"]
    )
    result = fidelity._twin(validate(spec), validate(sim))
    return result.metrics["iteration_time_s"]


@pytest.mark.parametrize("system", ["wfbp", "bytescheduler", "ps-default"])
def test_a_real_run_s_twin_is_fidelity_s_with_the_run_s_own_parameters(system):
    extra = {"params": {"credit_bytes": 200_000}} if system == "bytescheduler" else {}
    if system == "ps-default":
        extra = {"cluster": {"ps": 4, "servers": 4}}
    spec = _real(system, seed=3, **extra)
    prediction = twin.predict(spec, SUMMARY, LABEL)
    assert prediction.label == LABEL and prediction.date == "2026-11-28"
    assert prediction.iteration_time_s == pytest.approx(_expected(spec), rel=1e-12)
    assert prediction.spec["params"] == spec["params"] and prediction.spec["seed"] == 3
    assert prediction.spec["mode"] == "sim"


def test_a_run_whose_engine_issued_from_its_hooks_needs_a_calibration_that_measured_that():
    """``testbed-1128`` predates the engine's inline dispatch (its entries measured through
    the communication thread): a run that says its engine issued from the gradient hooks has
    no twin there, and the reason says what to measure; a run that says ``thread`` has one."""
    spec = _real("wfbp")
    with pytest.raises(twin.NoTwin, match="latency_engine_inline_us.*--overlap-only"):
        twin.predict(spec, {**SUMMARY, "engine_dispatch": "inline"}, LABEL)
    assert twin.predict(spec, {**SUMMARY, "engine_dispatch": "thread"}, LABEL).label == LABEL
    assert twin._engine_dispatch(spec, None) == "inline", "no summary: what auto gives wfbp"
    thread = _real("wfbp", real={"dispatch": "thread"})
    assert twin._engine_dispatch(thread, None) == "thread"
    assert twin._engine_dispatch(_real("ddp"), {**SUMMARY, "engine_dispatch": ""}) == ""


@pytest.mark.parametrize(
    ("change", "summary", "words"),
    [
        ({"cluster": {"workers": 3}}, {}, "cluster.workers is 3"),
        ({"real": {"threads": 2}}, {}, "real.threads is 2"),
        ({"batch_size": 16}, {}, "default batch size: a run at that batch has a twin"),
        ({"cluster": {"bandwidth_gbps": 0.5}}, {}, "has no 0.5 Gbit/s"),
        ({"workload": "gpt2-debug"}, {}, "calibrate --models gpt2-debug"),
        ({"cluster": {"stragglers": [{"worker": 0, "slowdown": 2.0}]}}, {}, "cluster.stragglers"),
        ({}, {"comm_priority": {"priority": "normal"}}, "set real.comm_priority: realtime"),
        ({}, {"device": {"kind": "cuda"}}, "trained on cuda"),
        (
            {"cluster": {"latency_us": 2000.0}},
            {"network": {"kind": "shaped", "latency_emulated": True}},
            "did not measure 0.25 Gbit/s shaped with 2000 us a way added",
        ),
    ],
)
def test_a_run_the_calibration_did_not_measure_has_no_twin_and_is_told_why(change, summary, words):
    spec = _real(**change)
    with pytest.raises(twin.NoTwin, match=words.replace(".", r"\.")):
        twin.predict(spec, {**SUMMARY, **summary}, LABEL)


def test_a_pipelined_ps_run_s_twin_comes_from_the_pipelined_transport_s_measurements(tmp_path):
    """A run on ``real.ps_transport: pipelined`` has no twin under a calibration that measured
    only the blocking transport (the reason says what to measure); under one that measured it
    too (``ps_pipelined``, ``calibrate --ps-only --ps-transport pipelined``) its twin takes
    that transport's values and has no rendezvous, and the blocking run's twin is unchanged."""
    ps = {"cluster": {"ps": 4, "servers": 4}}
    blocking, spec = _real("ps-default", **ps), _real("ps-default", real={"ps_transport":
                                                      "pipelined"}, **ps)  # fmt: skip
    before = twin.predict(blocking, SUMMARY, LABEL)
    assert before.spec["cluster"]["pull_rendezvous"] is True
    with pytest.raises(twin.NoTwin, match="on the pipelined transport.*--ps-only --ps-transport "
                       "pipelined"):  # fmt: skip
        twin.predict(spec, SUMMARY, LABEL)

    testbed = fidelity.load_testbed(LABEL)
    for point in testbed["network"]:  # the blocking one's values, a latency 10x as long
        pipelined = json.loads(json.dumps(point["ps"]))
        pipelined["latency_idle_us"] = {m: 10 * v for m, v in pipelined["latency_idle_us"].items()}
        point["ps_pipelined"] = pipelined
    (tmp_path / f"{LABEL}.json").write_text(json.dumps(testbed))
    prediction = twin.predict(spec, SUMMARY, LABEL, directory=tmp_path)
    cluster = prediction.spec["cluster"]
    for flag in ("pull_rendezvous", "push_rendezvous", "push_buffered"):
        assert not cluster.get(flag), flag
    assert cluster["jitter_groups"] == 2  # each worker its own transfers, as with rendezvous
    measured = testbed["network"][1]["ps_pipelined"]["latency_idle_us"]["vgg16-debug"]
    assert testbed["network"][1]["nominal_gbps"] == 0.25
    assert cluster["latency_us"] == pytest.approx(measured)
    same = twin.predict(blocking, SUMMARY, LABEL, directory=tmp_path)
    assert same.iteration_time_s == pytest.approx(before.iteration_time_s, rel=1e-12)
    # an all-reduce system has no PS transport: a set of both arenas gives it to the PS ones
    wfbp = functools.partial(fidelity.matched_specs, "wfbp", "vgg16-debug", 0.25, testbed,
                             engine_dispatch="thread")  # fmt: skip
    assert wfbp(ps_transport="pipelined") == wfbp()


def _with_added_latency(tmp_path: Path, latency_us: float) -> dict:
    """``testbed-1128`` in ``tmp_path`` with its 0.25 Gbit/s network measured again with
    ``latency_us`` added (made up: the network's own values, its latencies + 3x the added one,
    its bandwidth halved, its slow-down doubled)."""
    testbed = fidelity.load_testbed(LABEL)
    point = testbed["network"][1]
    assert point["nominal_gbps"] == 0.25
    entry = {"latency_added_us": latency_us, "date": "2026-12-06", "remeasured": False}
    entry["bandwidth_gbps"] = point["bandwidth_gbps"] / 2
    entry["latency_us"] = point["latency_us"] + 3 * latency_us
    for key in ("latency_busy_us", "latency_idle_us", "latency_engine_us"):
        entry[key] = {m: v + 3 * latency_us for m, v in point[key].items()}
    for key in ("comm_slowdown", "collective_cpu_us", "negotiation_cpu_us"):
        entry[key] = dict(point[key])
    entry["overlap_slowdown"] = {m: 2 * v for m, v in point["overlap_slowdown"].items()}
    point["added_latency"] = {fidelity.latency_key(latency_us): entry}
    (tmp_path / f"{LABEL}.json").write_text(json.dumps(testbed))
    return testbed


def test_a_run_with_added_latency_takes_the_calibration_s_measurements_with_it(tmp_path):
    """A shaped run whose summary says its latency was added (the delay line) has its twin
    from the network's values measured with that latency (``calibrate --latency-only``), not
    the network's own; its real spec carries the latency. The same spec whose latency was not
    added (the testbed's own) keeps the network's own twin; a PS run with added latency has
    no twin while the entry has no PS part (the command names the transport), and a latency
    the calibration did not measure names what to run."""
    testbed = _with_added_latency(tmp_path, 2000.0)
    entry = testbed["network"][1]["added_latency"]["2000"]
    own = twin.predict(_real("wfbp"), SUMMARY, LABEL, directory=tmp_path)
    spec = _real("wfbp", cluster={"latency_us": 2000.0})
    added = {**SUMMARY, "network": {**SUMMARY["network"], "latency_emulated": True}}
    prediction = twin.predict(spec, added, LABEL, directory=tmp_path)
    cluster = prediction.spec["cluster"]
    assert cluster["latency_us"] == pytest.approx(entry["latency_engine_us"]["vgg16-debug"])
    assert cluster["bandwidth_gbps"] == pytest.approx(entry["bandwidth_gbps"])
    assert cluster["busy_latency_us"] == pytest.approx(entry["latency_busy_us"]["vgg16-debug"])
    assert cluster["overlap_slowdown"] == pytest.approx(entry["overlap_slowdown"]["vgg16-debug"])
    assert prediction.iteration_time_s > own.iteration_time_s + 0.010  # 35 collectives, 6 ms+
    real, _ = fidelity.matched_specs("wfbp", "vgg16-debug", 0.25, testbed,
                                     engine_dispatch="thread", added_latency_us=2000.0)  # fmt: skip
    assert real["cluster"]["latency_us"] == 2000.0
    # not added (the summary says so): the network's own values
    same = twin.predict(spec, SUMMARY, LABEL, directory=tmp_path)
    assert same.iteration_time_s == pytest.approx(own.iteration_time_s, rel=1e-12)
    assert twin._added_latency(spec, "shaped", None) == 2000.0  # no summary: the spec's
    assert twin._added_latency(_real("wfbp", cluster={"latency_us": 50.0}), "shaped", None) == 0
    ps = _real("ps-default", cluster={"ps": 4, "servers": 4, "latency_us": 2000.0})
    with pytest.raises(twin.NoTwin, match="--added-latency-us 2000 --ps-transport blocking`"):
        twin.predict(ps, added, LABEL, directory=tmp_path)
    other = _real("wfbp", cluster={"latency_us": 5000.0})
    with pytest.raises(twin.NoTwin, match="measured: 2000\\): run .*--added-latency-us 5000"):
        twin.predict(other, added, LABEL, directory=tmp_path)


def test_a_ps_run_with_added_latency_takes_the_ps_arena_s_measurements_with_it(tmp_path):
    """A PS run with added latency has its twin from the PS arena's transport probes taken
    with that latency (``calibrate --latency-only --ps-transport``: the entry's ``ps``) and
    the message's CPU from the network's own PS entry (not measured with the latency); its
    bandwidth the network's own (the all-reduce arena's part of the entry is not the PS
    twin's). A pipelined run needs the entry's ``ps_pipelined``; an all-reduce run needs the
    all-reduce part, which a PS part alone does not give."""
    testbed = _with_added_latency(tmp_path, 2000.0)
    point = testbed["network"][1]
    own_ps = point["ps"]
    measured = {
        "servers": own_ps["servers"],
        "overlap_slowdown": {m: v + 0.1 for m, v in own_ps["overlap_slowdown"].items()},
        "latency_busy_us": {m: v + 4000 for m, v in own_ps["latency_busy_us"].items()},
        "latency_idle_us": {m: v + 3000 for m, v in own_ps["latency_idle_us"].items()},
        "server_agg_gbps": 2 * own_ps["server_agg_gbps"],
        "server_agg_fixed_us": 1.0,
        "probe_rounds": 3,
        "date": "2026-12-06",
    }
    point["added_latency"]["2000"]["ps"] = measured
    (tmp_path / f"{LABEL}.json").write_text(json.dumps(testbed))
    spec = _real("ps-default", cluster={"ps": 4, "servers": 4, "latency_us": 2000.0})
    added = {**SUMMARY, "network": {**SUMMARY["network"], "latency_emulated": True}}
    cluster = twin.predict(spec, added, LABEL, directory=tmp_path).spec["cluster"]
    assert cluster["latency_us"] == pytest.approx(measured["latency_idle_us"]["vgg16-debug"])
    assert cluster["server_agg_gbps"] == pytest.approx(measured["server_agg_gbps"])
    assert cluster["server_agg_fixed_us"] == pytest.approx(1.0)
    assert cluster["host_message_cpu_us"] == pytest.approx(own_ps["host_message_cpu_us"])
    assert cluster["host_cpu_ns_per_byte"] == pytest.approx(own_ps["host_cpu_ns_per_byte"])
    assert cluster["bandwidth_gbps"] == pytest.approx(point["bandwidth_gbps"])  # not the entry's
    floor = fidelity.matched_specs("ps-default", "vgg16-debug", 0.25, testbed, host_cpu="floor",
                                   added_latency_us=2000.0)[1]["cluster"]  # fmt: skip
    assert floor["overlap_slowdown"] == pytest.approx(measured["overlap_slowdown"]["vgg16-debug"])
    assert floor["message_cpu_us"] == pytest.approx(own_ps["message_cpu_us"])
    with pytest.raises(fidelity.CalibrationMissing, match="--ps-transport pipelined`"):
        fidelity.matched_specs("ps-default", "vgg16-debug", 0.25, testbed,
                               ps_transport="pipelined", added_latency_us=2000.0)  # fmt: skip
    del point["added_latency"]["2000"]["bandwidth_gbps"]  # the PS part alone
    with pytest.raises(fidelity.CalibrationMissing, match="measured: none\\): run .*2000`"):
        fidelity.matched_specs("wfbp", "vgg16-debug", 0.25, testbed, engine_dispatch="thread",
                               added_latency_us=2000.0)  # fmt: skip


def test_a_spec_that_left_its_network_to_auto_needs_the_run_s_summary():
    spec = _real(real={"network": "auto"})
    with pytest.raises(twin.NoTwin, match="real.network is auto"):
        twin.predict(spec, None, LABEL)
    assert twin.predict(spec, SUMMARY, LABEL).iteration_time_s > 0  # what the run got
    old = {k: v for k, v in SUMMARY.items() if k != "network"}  # a summary from before it
    with pytest.raises(twin.NoTwin, match="summary does not say what it got"):
        twin.predict(spec, old, LABEL)


def test_the_newest_calibration_covering_the_run_is_chosen(tmp_path):
    testbed = fidelity.load_testbed(LABEL)
    older = {**testbed, "date": "2026-01-01"}
    newer = {**testbed, "label": "newer", "date": "2026-12-01", "workers": 4}  # not this run
    for doc in (older, newer):
        (tmp_path / f"{doc['label']}.json").write_text(json.dumps(doc))
    assert [d["label"] for d in twin.calibrations(tmp_path)] == ["newer", LABEL]
    prediction = twin.predict(_real(), SUMMARY, directory=tmp_path)
    assert prediction.label == LABEL  # the newer one measured 4 workers
    with pytest.raises(twin.NoTwin, match=r"the newest, newer: calibration 'newer' has no 0\.5"):
        twin.predict(_real(cluster={"bandwidth_gbps": 0.5}), SUMMARY, directory=tmp_path)


def _run_dir(tmp_path: Path, spec: dict, seconds: float, **summary) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"spec": spec}))
    doc = {**SUMMARY, **summary, "run": {"system": spec["system"], "workload": spec["workload"]}}
    doc["metrics"] = {"iteration_time_s": seconds}
    (out / "summary.json").write_text(json.dumps(doc))
    return out


def test_the_twin_command_prints_the_run_beside_its_twin(tmp_path, capsys):
    spec = _real()
    out = _run_dir(tmp_path, spec, 0.040)
    assert cli.main(["twin", str(out), "--label", LABEL, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sim_iteration_s"] == pytest.approx(_expected(spec))
    assert doc["error_pct"] == pytest.approx(100 * (doc["sim_iteration_s"] - 0.040) / 0.040)
    assert cli.main(["twin", str(out), "--label", LABEL]) == 0
    line = capsys.readouterr().out
    assert line.startswith("wfbp on vgg16-debug: real 40.0 ms, simulated ")
    assert f"calibration '{LABEL}'" in line


def test_the_twin_command_says_when_the_run_had_other_work_beside_it(tmp_path, capsys):
    busy = {"cores": 0.66, "flagged": True, "window_s": 1.5,
            "top": [{"name": "python3 loop.py", "cores": 0.65}]}  # fmt: skip
    out = _run_dir(tmp_path, _real(), 0.040, others=busy)
    assert cli.main(["twin", str(out), "--label", LABEL]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "the run was measured beside other work on its host, 0.66 cores (python3 loop.py "
        "0.65): its real time is slower than alone" in text
    )
    assert cli.main(["twin", str(out), "--label", LABEL, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["others"] == busy
    (tmp_path / "q").mkdir()
    quiet = _run_dir(tmp_path / "q", _real(), 0.040, others={**busy, "flagged": False})
    assert cli.main(["twin", str(quiet), "--label", LABEL]) == 0
    assert "other work" not in capsys.readouterr().out


def test_the_twin_command_refuses_what_has_no_twin_with_exit_2(tmp_path, capsys):
    assert cli.main(["twin", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    out = _run_dir(tmp_path, _real(real={"threads": 2}), 0.040)
    assert cli.main(["twin", str(out), "--label", LABEL]) == 2
    assert "real.threads is 2, calibration 'testbed-1128' measured 1" in capsys.readouterr().err
    assert cli.main(["twin", str(out), "--label", "no-such"]) == 2
    assert "no calibration 'no-such'" in capsys.readouterr().err


def _ops(it: int, t0: float, fwd: float, gap: float, bwd: float, push_end: float) -> list:
    """One made-up PS iteration of one worker from ``t0``: a forward op, a wait of ``gap``, a
    backward op, a push ending ``push_end`` after ``t0`` (ms)."""
    ms = 1e-3
    return [
        (it, "compute[w0]", "forward", "a", t0, t0 + fwd * ms, 0),
        (it, "compute[w0]", "backward", "a", t0 + (fwd + gap) * ms, t0 + (fwd + gap + bwd) * ms, 0),
        (it, "uplink[w0]", "push", "a", t0 + fwd * ms, t0 + push_end * ms, 10),
        (it, "ps0.in", "push", "a", t0 + fwd * ms, t0 + push_end * ms, 10),
        (it, "ps1.in", "push", "a", t0 + fwd * ms, t0 + (fwd + 1) * ms, 10),
    ]


def test_phases_set_each_resource_of_the_run_beside_its_twin_s():
    real = _ops(5, 0.0, 4, 2, 10, 20) + _ops(6, 0.030, 4, 4, 10, 20) + _ops(7, 0.070, 1, 0, 1, 2)
    sim = _ops(5, 0.0, 8, 0, 6, 16) + _ops(6, 0.025, 8, 0, 6, 16) + _ops(7, 0.050, 1, 0, 1, 2)
    got = {p["phase"]: p for p in twin.phases(real, sim)}
    assert list(got)[:2] == ["iteration", "compute forward: busy"]
    # iterations 5 and 6 (7 has no next one): 30 and 40 ms real, 25 twin
    assert got["iteration"]["real_ms"] == pytest.approx(35.0)
    assert got["iteration"]["twin_ms"] == pytest.approx(25.0)
    assert got["iteration"]["iterations"] == "iterations 5-6"
    assert got["compute forward: busy"]["real_ms"] == pytest.approx(4.0)
    assert got["compute forward: busy"]["twin_ms"] == pytest.approx(8.0)
    assert got["compute backward: ends"]["real_ms"] == pytest.approx(17.0)  # (16 + 18) / 2
    # one op per op kind and lane: nothing to wait for within them
    assert got["compute forward: waits"]["real_ms"] == 0.0
    # a push holds ps0 for 16 ms and ps1 for 1: 8.5 a server; the uplink's 16 (one lane)
    assert got["ps.in push: busy"]["real_ms"] == pytest.approx(8.5)
    assert got["uplink push: busy"]["real_ms"] == pytest.approx(16.0)
    assert got["uplink push: ends"]["twin_ms"] == pytest.approx(16.0)
    names = [p["phase"] for p in twin.phases(real, sim)]
    assert names.index("uplink push: busy") < names.index("uplink push: ends")
    from lab.reports import plots

    figure = plots.phases_plot(pd.DataFrame(twin.phases(real, sim)))
    left, right = figure.axes[:2]
    assert [t.get_text() for t in left.get_yticklabels()][:2] == [
        "compute forward: busy",
        "compute forward: waits",
    ]
    assert "iteration" in [t.get_text() for t in right.get_yticklabels()]


def test_phases_count_the_compute_s_waits_within_its_span_and_missing_phases_are_nan():
    ms = 1e-3
    real = [
        (3, "compute", "forward", "a", 0.0, 1 * ms, 0),
        (3, "compute", "forward", "b", 4 * ms, 6 * ms, 0),  # waited 3 ms for b's pull
        (4, "compute", "forward", "a", 10 * ms, 11 * ms, 0),
        (3, "network", "allreduce", "a", 1 * ms, 2 * ms, 8),
    ]
    sim = [
        (3, "compute", "forward", "a", 0.0, 3 * ms, 0),
        (4, "compute", "forward", "a", 0.01, 0.011, 0),
    ]
    got = {p["phase"]: p for p in twin.phases(real, sim)}
    assert got["compute forward: waits"]["real_ms"] == pytest.approx(3.0)
    assert got["compute forward: waits"]["twin_ms"] == 0.0
    assert got["network allreduce: busy"]["real_ms"] == pytest.approx(1.0)
    assert math.isnan(got["network allreduce: busy"]["twin_ms"])


def test_the_twin_command_sets_a_run_s_phases_beside_its_twin_s(tmp_path, capsys):
    spec = _real(timeline_iterations=3)
    out = _run_dir(tmp_path, spec, 0.040)
    assert cli.main(["twin", str(out), "--label", LABEL, "--phases"]) == 2  # no timeline yet
    assert "no timeline.csv" in capsys.readouterr().err
    prediction = twin.predict(spec, SUMMARY, LABEL)
    last = spec["warmup_iterations"] + spec["iterations"] - 1
    assert {row[0] for row in prediction.timeline} == {last - 2, last - 1, last}  # the run's
    # the run's own timeline: the twin's, every operation 10 % longer
    rows = [(*r[:5], r[4] + 1.1 * (r[5] - r[4]), r[6]) for r in prediction.timeline]
    pd.DataFrame(rows, columns=list(twin.Prediction.TIMELINE_COLUMNS)).to_csv(
        out / "timeline.csv", index=False
    )
    assert cli.main(["twin", str(out), "--label", LABEL, "--phases", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    busy = {p["phase"]: p for p in doc["phases"]}["compute forward: busy"]
    assert busy["real_ms"] == pytest.approx(1.1 * busy["twin_ms"])
    assert all(p["real_ms"] is not None for p in doc["phases"])  # NaN would be null
    assert cli.main(["twin", str(out), "--label", LABEL, "--phases"]) == 0
    text = capsys.readouterr().out
    assert f"median over iterations {last - 2}-{last - 1}" in text
    (out / "timeline.csv").write_text("iteration,what\n1,x\n")  # not a timeline
    assert cli.main(["twin", str(out), "--label", LABEL, "--phases"]) == 2
    assert "no column 'resource' (not a timeline)" in capsys.readouterr().err
    assert any(line.startswith("compute forward: busy") for line in text.splitlines())


def test_the_phase_table_says_when_the_twin_s_forward_carries_the_updates():
    """A twin with ``cluster.optimizer_update`` times each layer's update in its forward ops,
    where the real engine applies the updates before it times a forward op: the table says
    so under it, and only then."""
    phases = [{"phase": "compute forward: busy", "real_ms": 4.0, "twin_ms": 7.0,
               "iterations": "iterations 13-21"}]  # fmt: skip
    note = "the twin's forward ops include each layer's optimizer update"
    assert note in cli._phase_table(phases, {"cluster": {"optimizer_update": True}})
    assert note not in cli._phase_table(phases, {"cluster": {}})
    assert note not in cli._phase_table(phases)
    assert "compute forward: busy     4.00     7.00      +3.00" in cli._phase_table(phases)


# --------------------------------------------------------------------------------- portal


def _experiment(user, seeds=(0, 1)):
    config = actions.ExperimentConfig(
        name="real bs",
        system="bytescheduler",
        baselines=("wfbp", "horovod"),
        workloads=("vgg16-debug",),
        seeds=seeds,
        mode="real",
        iterations=10,
        cluster={"workers": 2, "bandwidth_gbps": 0.25},
        real={"network": "shaped", "comm_priority": "realtime"},
    )
    return actions.create_experiment(user, config)


def _succeed(run: Run, seconds: float, **summary) -> None:
    """What the ingest of a finished real run leaves: its summary and its measurement."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    doc = {**SUMMARY, **summary, "metrics": {"iteration_time_s": seconds}}
    (run.run_dir / "summary.json").write_text(json.dumps(doc))
    Measurement.objects.create(run=run, metric="iteration_time_s", value=seconds, unit="s")
    run.state, run.finished_at = Run.SUCCEEDED, timezone.now()
    run.save()


def _api(client, user, url: str) -> dict:
    from lab.accounts.models import ApiToken

    token = ApiToken.issue(user)
    response = client.get(url, HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200, response.content
    return response.json()


REAL_S = {"bytescheduler": (0.030, 0.034), "wfbp": (0.036, 0.040), "horovod": (0.033, 0.035)}


def _finished(user, seeds=(0, 1)):
    """``_experiment`` with every run succeeded in ``REAL_S``'s time for its seed."""
    experiment = _experiment(user, seeds)
    for run in experiment.runs.all():
        _succeed(run, REAL_S[run.system][run.seed])
    return experiment


@pytest.mark.django_db
@override_settings(TWIN_CALIBRATION=LABEL)
def test_a_real_experiment_shows_its_runs_beside_their_twins(user, client):
    experiment = _finished(user)
    figures.render(experiment)
    directory = figures.figure_dir(experiment)
    for fmt in ("png", "pdf", "svg"):
        assert (directory / f"real-vs-sim.{fmt}").stat().st_size > 0
    table = pd.read_csv(directory / "real-vs-sim.csv")
    times = table[table["quantity"] == "iteration_time_s"].set_index("system")
    sims = {}
    for system in REAL_S:
        run = experiment.runs.get(system=system, seed=0)
        twins = [_expected(r.spec) for r in experiment.runs.filter(system=system)]
        sims[system] = sum(twins) / len(twins)
        assert times.at[system, "real"] == pytest.approx(sum(REAL_S[system]) / 2)
        assert times.at[system, "simulated"] == pytest.approx(sims[system])
        assert times.at[system, "n"] == 2 and times.at[system, "calibration"] == LABEL
        real = times.at[system, "real"]
        assert times.at[system, "error_pct"] == pytest.approx(100 * (sims[system] - real) / real)
        assert run.spec["iterations"] == 10
    speedups = table[table["quantity"] == "speedup"].set_index("baseline")
    assert list(speedups.index) == ["wfbp", "horovod"]
    assert set(speedups["system"]) == {"bytescheduler"}
    assert speedups.at["wfbp", "real"] == pytest.approx(0.038 / 0.032)
    assert speedups.at["wfbp", "simulated"] == pytest.approx(sims["wfbp"] / sims["bytescheduler"])
    client.force_login(user)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "real-vs-sim.png" in page and "real-vs-sim.csv" in page
    assert "No simulator prediction" not in page
    # each run's own twin in the runs table, right after its iteration time
    assert "<th>iteration time (s)</th><th>simulated (s)</th>" in page
    for run in experiment.runs.all():
        assert (
            f"<td>{run.measurements.get().value:.4f}</td><td>{_expected(run.spec):.4f}</td>" in page
        )
    response = client.get(f"/experiments/{experiment.pk}/files/real-vs-sim.csv")
    assert response.status_code == 200
    detail = _api(client, user, f"/api/experiments/{experiment.pk}/")
    assert detail["real_vs_sim"]["csv"].endswith(
        f"/experiments/{experiment.pk}/files/real-vs-sim.csv"
    )
    assert detail["real_vs_sim"]["pdf"].endswith("real-vs-sim.pdf")
    assert detail["real_vs_sim_notes"] == []


@pytest.mark.django_db
@override_settings(TWIN_CALIBRATION=LABEL)
def test_runs_without_a_twin_are_named_on_the_page_with_the_reason(user, client):
    experiment = _experiment(user, seeds=(0,))
    for run in experiment.runs.all():
        moved = {"comm_priority": {"priority": "normal"}} if run.system == "wfbp" else {}
        _succeed(run, REAL_S[run.system][0], **moved)
    figures.render(experiment)
    directory = figures.figure_dir(experiment)
    table = pd.read_csv(directory / "real-vs-sim.csv")
    assert "wfbp" not in set(table["system"])  # no twin: left out, not guessed
    assert list(table[table["quantity"] == "speedup"]["baseline"]) == ["horovod"]
    wfbp = experiment.runs.get(system="wfbp")
    client.force_login(user)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "No simulator prediction beside these real runs" in page
    assert f"runs {wfbp.pk}: the run&#x27;s communication threads ran at normal" in page
    (note,) = _api(client, user, f"/api/experiments/{experiment.pk}/")["real_vs_sim_notes"]
    assert note.startswith(f"runs {wfbp.pk}: the run's communication threads ran at normal")


@pytest.mark.django_db
def test_twins_are_simulated_once_per_run_and_calibration(user, monkeypatch):
    experiment = _finished(user, seeds=(0,))
    calls = []
    real_predict = twin.predict
    monkeypatch.setattr(twin, "predict", lambda *a, **k: calls.append(a) or real_predict(*a, **k))
    directory = figures.figure_dir(experiment)
    with override_settings(TWIN_CALIBRATION=LABEL):
        first = realsim.frame(experiment, directory)
        assert len(calls) == 3
        again = realsim.frame(experiment, directory)
        assert len(calls) == 3  # from the cache
        pd.testing.assert_frame_equal(first, again)
    with override_settings(TWIN_CALIBRATION="no-such"):  # another calibration: a new key
        notes = realsim.frame(experiment, directory)["note"]
    assert len(calls) == 6 and all("no calibration 'no-such'" in n for n in notes)


@pytest.mark.django_db
def test_a_simulated_experiment_has_no_real_vs_sim_figure(user, config):
    experiment = actions.create_experiment(user, config)
    for run in experiment.runs.all():
        _succeed(run, 0.05)
    figures.render(experiment)
    assert not (figures.figure_dir(experiment) / "real-vs-sim.png").exists()
    assert not math.isnan(pd.read_csv(figures.figure_dir(experiment) / "data.csv")["value"][0])


@pytest.mark.django_db
@override_settings(TWIN_CALIBRATION=LABEL)
def test_the_paper_bundle_carries_real_vs_sim_and_regenerates_it(user, tmp_path):
    from lab.reports import export

    experiment = _finished(user)
    for run in experiment.runs.all():
        rundir.write_json(run.run_dir / rundir.MANIFEST, {"spec": run.spec, "code": {}})
    archive = zipfile.ZipFile(export.export_experiment(experiment, "ieee-2col"))
    names = set(archive.namelist())
    assert {"data/real-vs-sim.csv", "figures/real-vs-sim.pdf", "figures/real-vs-sim.svg"} <= names
    data = pd.read_csv(archive.open("data/real-vs-sim.csv"))
    assert list(data.columns) == ["panel", "system", "seed", "real", "simulated", "calibration"]
    assert set(data["panel"]) == {"vgg16-debug, 2 workers, 0.25 Gbit/s"} and len(data) == 6
    entry = next(
        f for f in json.loads(archive.read("figures.json"))["figures"] if f["name"] == "real-vs-sim"
    )
    assert entry["kind"] == "real_vs_sim_plot"
    assert entry["kwargs"]["system"] == "bytescheduler"
    assert entry["kwargs"]["baselines"] == ["wfbp", "horovod"]
    archive.extractall(tmp_path)
    original = (tmp_path / "figures" / "real-vs-sim.svg").read_bytes()
    (tmp_path / "figures" / "real-vs-sim.svg").unlink()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "regenerate.py", "real-vs-sim"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "figures" / "real-vs-sim.svg").read_bytes() == original


def test_the_plot_s_speedups_are_ratios_of_the_means_real_and_simulated():
    from lab.reports import plots

    frame = pd.DataFrame(
        {
            "panel": ["a"] * 4 + ["b"] * 2,
            "system": ["s", "s", "w", "w", "s", "w"],
            "seed": [0, 1, 0, 1, 0, 0],
            "real": [1.0, 3.0, 4.0, 4.0, 2.0, 1.0],
            "simulated": [2.0, 2.0, 3.0, 5.0, 1.0, 3.0],
        }
    )
    table = plots.real_vs_sim_speedups(frame, "s", ["w", "missing"]).set_index("panel")
    assert table.at["a", "real"] == pytest.approx(4.0 / 2.0)
    assert table.at["a", "simulated"] == pytest.approx(4.0 / 2.0)
    assert table.at["b", "real"] == pytest.approx(0.5) and table.at["b", "simulated"] == 3.0
    figure = plots.real_vs_sim_plot(frame, system="s", baselines=["w"])
    assert len(figure.axes) == 4  # two panels, times above speedups
    with pytest.raises(ValueError, match="missing column.*'simulated'"):
        plots.real_vs_sim_plot(frame.drop(columns="simulated"), system="s")


def test_a_wide_sweep_s_real_vs_sim_figure_wraps_into_rows_of_panels():
    from lab.reports import plots

    panels = [f"{b} Gbit/s" for b in (0.25, 0.5, 1, 2, 4, 8)]  # six conditions
    frame = pd.DataFrame(
        [
            {"panel": p, "system": s, "seed": 0, "real": 1.0 + k, "simulated": 1.1 + k}
            for k, p in enumerate(panels)
            for s in ("s", "w")
        ]
    )
    figure = plots.real_vs_sim_plot(frame, system="s", baselines=["w"])
    shown = [ax for ax in figure.axes if ax.axison]
    titles = [ax.get_title(loc="left") for ax in shown if ax.get_title(loc="left")]
    assert titles == panels  # every condition once, in order
    # two blocks of 4 columns, each times above speedups; the last two places left empty
    assert len(figure.axes) == 16 and len(shown) == 12
    grid = {(round(ax.get_position().x0, 2), round(ax.get_position().y0, 2)) for ax in shown}
    assert len({x for x, _ in grid}) == plots.REAL_VS_SIM_COLUMNS
    width, height = figure.get_size_inches()
    assert width < 3.2 * len(panels) and height > width / 2  # wrapped, not one long row


@pytest.mark.django_db
def test_a_twin_that_fails_is_a_note_and_the_other_figures_are_drawn(user, monkeypatch):
    experiment = _finished(user, seeds=(0,))

    def broken(*args, **kwargs):
        raise RuntimeError("simulator exploded")

    monkeypatch.setattr(twin, "predict", broken)
    figures.render(experiment)
    directory = figures.figure_dir(experiment)
    assert (directory / "comparison-iteration_time_s.png").exists()
    assert not (directory / "real-vs-sim.png").exists()
    notes, runs = realsim.page(directory)
    assert runs == {}
    assert len(notes) == 1 and "its twin failed (RuntimeError: simulator exploded)" in notes[0]


@pytest.mark.django_db
@override_settings(TWIN_CALIBRATION=LABEL)
def test_the_system_s_real_timeline_is_drawn_beside_its_twin_s(user, client):
    from lab.results.models import Artifact

    experiment = _finished(user, seeds=(0,))
    run = experiment.runs.get(system="bytescheduler")
    last = run.spec["warmup_iterations"] + run.spec["iterations"] - 1
    rows = [
        (last - 1, "compute[w0]", "forward", "features.0", 0.00, 0.01, 0),
        (last, "compute[w0]", "forward", "features.0", 0.05, 0.06, 0),
        (last, "network", "allreduce", "features.0", 0.06, 0.07, 4096),
    ]
    path = run.run_dir / "timeline.csv"
    pd.DataFrame(rows, columns=twin.Prediction.TIMELINE_COLUMNS).to_csv(path, index=False)
    relative = path.relative_to(figures.settings.RESULTS_DIR)
    Artifact.objects.create(run=run, kind="timeline", path=str(relative))
    figures.render(experiment)
    directory = figures.figure_dir(experiment)
    drawn = pd.read_csv(directory / "real-vs-sim-timeline.csv")
    real = drawn[drawn["panel"] == "bytescheduler, real"]
    assert list(real["op"]) == ["forward", "allreduce"]  # the last measured iteration only
    assert list(real["start_s"]) == pytest.approx([0.0, 0.01])  # from its first operation
    prediction = twin.predict(
        run.spec, json.loads((run.run_dir / "summary.json").read_text()), LABEL
    )
    ops = [r for r in prediction.timeline if r[0] == last]
    sim = drawn[drawn["panel"] == f"bytescheduler, simulated ({LABEL})"]
    assert len(sim) == len(ops) > 0 and sim["start_s"].min() == 0.0
    assert (directory / "real-vs-sim-timeline.png").exists()
    # phase by phase, from the same twin: the run's iteration from its two recorded ones
    phases = pd.read_csv(directory / "real-vs-sim-phases.csv").set_index("phase")
    assert phases.at["iteration", "real_ms"] == pytest.approx(50.0)
    twin_phases = {p["phase"]: p for p in twin.phases(rows, prediction.timeline)}
    assert phases.at["compute forward: busy", "twin_ms"] == pytest.approx(
        twin_phases["compute forward: busy"]["twin_ms"]
    )
    assert (directory / "real-vs-sim-phases.png").exists()
    client.force_login(user)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "real-vs-sim-timeline.png" in page and "real-vs-sim-phases.png" in page
