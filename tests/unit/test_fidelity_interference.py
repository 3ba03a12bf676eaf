"""``fidelity``'s interference check (``runners.fidelity_interference``): a collective's CPU
probed before an all-reduce set, against the calibration's; its probe faked here (the real
one runs in ``tests/integration/test_calibration.py``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from runners import fidelity, fidelity_interference
from runners.real import launch

from .test_fidelity import TESTBED, _run_of_40_ms


def _testbed(us: float = 300.0) -> dict:
    testbed = json.loads(json.dumps(TESTBED))
    for point in testbed["network"]:
        point["collective_cpu_inline_us"] = {"vgg16-debug": us}
    return testbed


def _fake_probes(monkeypatch, values_us: list[float], calls: list | None = None) -> None:
    """Each probe returns the next of ``values_us`` (a string: it fails with that)."""
    left = list(values_us)

    def probe(workers, nominal, threads, priority, latency_us):
        if calls is not None:
            calls.append((workers, nominal, threads, priority, latency_us))
        value = left.pop(0)
        if isinstance(value, str):
            raise RuntimeError(value)
        return value * 1e-6

    monkeypatch.setattr(fidelity_interference, "probe_once", probe)


def test_the_check_takes_the_median_of_its_probes_against_the_calibration_s(monkeypatch):
    testbed = _testbed(300.0)
    points = {1.0: testbed["network"][1], None: testbed["network"][0]}
    calls: list = []
    _fake_probes(monkeypatch, [640.0, 600.0, 900.0, 310.0, "rank 1 died\nmore", 290.0], calls)
    said: list[str] = []
    checks = fidelity_interference.check_interference(
        (1.0, None), points, {**testbed, "comm_priority": "realtime"}, said.append
    )
    shaped, loopback = checks["1"], checks["loopback"]
    assert shaped["probes_us"] == pytest.approx([640.0, 600.0, 900.0])
    assert shaped["median_us"] == pytest.approx(640.0)
    assert shaped["pct"] == pytest.approx(100.0 * (640 / 300 - 1)) and shaped["moved"]
    # a failed probe is noted, the others kept
    assert loopback["probes_us"] == pytest.approx([310.0, 290.0])
    assert loopback["errors"] == ["rank 1 died"] and not loopback["moved"]
    assert calls[0] == (2, 1.0, 1, "realtime", 0.0)  # the calibration's ranks and priority
    assert "interference check at 1 Gbit/s: 640 us a collective (+113% against the " in said[1]
    assert fidelity_interference.moved(checks)
    line = fidelity_interference.interference_line(checks, "unit", horovod=True)
    assert "1 Gbit/s 640 us (+113% against 300; the median of 3 probe(s), 600-900)" in line
    assert "loopback 300 us (+0% against 300; the median of 2 probe(s), 290-310)" in line
    assert "more than 50% off" in line
    assert "calibrate --label unit --overlap-only --horovod-only)" in line
    # every probe failed: not measured, nothing moved
    _fake_probes(monkeypatch, ["no netns", "no netns", "no netns"])
    checks = fidelity_interference.check_interference((1.0,), points, testbed, said.append)
    assert "median_us" not in checks["1"] and not fidelity_interference.moved(checks)
    assert "1 Gbit/s not measured (no netns; no netns; no netns)" in (
        fidelity_interference.interference_line(checks, "unit", horovod=False)
    )
    assert said[-1] == "interference check at 1 Gbit/s failed (no netns); the set goes on"


def test_the_check_s_networks_are_the_all_reduce_set_s_the_calibration_measured():
    testbed = _testbed()
    points = {p["nominal_gbps"]: p for p in testbed["network"]}
    networks = fidelity_interference.interference_networks
    assert networks(("wfbp",), (None, 1.0), points) == (None, 1.0)
    assert networks(("ps-default",), (None, 1.0), points) == ()  # the transport check's
    del points[None]["collective_cpu_inline_us"]  # a calibration from before it
    assert networks(("wfbp", "ps-default"), (None, 1.0, 0.25), points) == (1.0,)
    advice = fidelity_interference.advice("unit", horovod=False, added_latency_us=2000.0)
    assert advice.endswith("calibrate --label unit --latency-only --added-latency-us 2000)")


def _set(monkeypatch, testbed, **kwargs):
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: testbed)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)
    said: list[str] = []

    def run(*args, **kwargs):
        said.append("(a real run)")
        return _run_of_40_ms(*args, **kwargs)

    monkeypatch.setattr(launch, "run", run)
    metrics = {"iteration_time_s": 0.04, "compute_time_s": 0.01}
    monkeypatch.setattr(fidelity, "_twin", lambda real, sim: SimpleNamespace(metrics=metrics))
    result = fidelity.fidelity(
        "cpu", ("wfbp",), ("vgg16-debug",), (1.0,), 5, repeats=1, compute_check=False,
        progress=said.append, **kwargs,
    )  # fmt: skip
    return result, said


def test_a_set_checks_before_its_runs_warns_at_once_and_keeps_it_in_the_journal(
    monkeypatch, tmp_path
):
    calls: list = []
    _fake_probes(monkeypatch, [700.0, 650.0, 720.0], calls)
    path = tmp_path / "set.journal.jsonl"
    result, said = _set(monkeypatch, _testbed(300.0), journal=path)
    check = result["interference_check"]["1"]
    assert check["median_us"] == pytest.approx(700.0) and check["moved"]
    assert len(calls) == 3
    warning = next(m for m in said if "more than 50% off before the real runs" in m)
    assert said.index(warning) < said.index("(a real run)")
    assert "calibrate --label cpu --overlap-only) first, or let it go on)" in warning
    text = fidelity.format_report(result)
    assert "interference check, a collective's CPU before the real runs" in text
    assert "1 Gbit/s 700 us (+133% against 300" in text
    # resumed: the journal's check, no probe
    _fake_probes(monkeypatch, [], calls)
    again, said = _set(monkeypatch, _testbed(300.0), journal=path, resume=True)
    assert again["interference_check"] == json.loads(json.dumps(result["interference_check"]))
    assert "interference check before the real runs: the journal's" in said
    assert len(calls) == 3
    # rescored after the calibration was measured again: its probes against the new value
    again, _ = _set(monkeypatch, _testbed(680.0), journal=path, resume=True)
    check = again["interference_check"]["1"]
    assert check["probes_us"] == pytest.approx([700.0, 650.0, 720.0]) and len(calls) == 3
    assert check["calibrated_us"] == 680.0 and check["pct"] == pytest.approx(100 * (700 / 680 - 1))
    assert not check["moved"]


def test_no_check_when_turned_off_or_when_the_journal_s_runs_predate_it(monkeypatch, tmp_path):
    _fake_probes(monkeypatch, [])  # any probe fails the test (the list is empty)
    result, _ = _set(monkeypatch, _testbed(), interference_check=False)
    assert result["interference_check"] is None
    assert "interference check" not in fidelity.format_report(result)
    # a journal with runs and no check (a set from before it): runs made before a check now
    path = tmp_path / "set.journal.jsonl"
    _set(monkeypatch, TESTBED, journal=path)  # no collective CPU measured: nothing checked
    result, said = _set(monkeypatch, _testbed(), journal=path, resume=True)
    assert result["interference_check"] is None
    assert "interference check: not made (the journal's runs were made before it)" in said


def test_the_command_line_turns_the_check_off_and_says_it_beside_json(monkeypatch, capsys):
    from runners import cli

    seen = []

    def fake(label, systems, models, bandwidths, iterations, on_config=None, **options):
        seen.append(options["interference_check"])
        checks = {"1": {"nominal_gbps": 1.0, "calibrated_us": 300.0, "probes_us": [],
                        "errors": ["gone"]}}  # fmt: skip
        row = {"system": "wfbp", "workload": "vgg16-debug", "bandwidth_gbps": 1.0,
               "real_iteration_s": 0.04, "sim_iteration_s": 0.05, "ape_pct": 25.0}  # fmt: skip
        return fidelity.report([row], label, interference_check=checks)

    monkeypatch.setattr(fidelity, "fidelity", fake)
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: _testbed())
    argv = ["fidelity", "--label", "unit", "--systems", "wfbp", "--models", "vgg16-debug"]
    assert cli.main([*argv, "--bandwidths", "1", "--no-interference-check"]) == 0
    assert "1 Gbit/s not measured (gone)" in capsys.readouterr().out
    assert cli.main([*argv, "--bandwidths", "1", "--json"]) == 0
    assert seen == [False, True]
    # with --json, the check in words on stderr
    assert "[fidelity] interference check, a collective's CPU" in capsys.readouterr().err


def test_the_report_says_when_the_interference_was_measured_and_warns_on_an_earlier_day(
    monkeypatch,
):
    """Beside the check (one probe of one of them), the report gives the dates of the
    all-reduce twins' interference measurements, each part's own where it was measured again
    (``overlap_date``, ``horovod_date``, ``added_latency_date``) or the calibration's, and
    says to measure them again when one is from an earlier day than the report's."""
    testbed = {**TESTBED, "date": "2026-12-06", "horovod_date": "2026-12-07"}
    dates = fidelity_interference.interference_dates(testbed, ("wfbp", "horovod"), "2026-12-07")
    assert dates == {"overlap": "2026-12-06", "horovod": "2026-12-07", "today": "2026-12-07",
                     "earlier_day": True}  # fmt: skip
    line = fidelity_interference.dates_line(dates, "cpu", horovod=True)
    assert "overlap 2026-12-06, Horovod 2026-12-07; this report 2026-12-07: from an" in line
    assert "calibrate --label cpu --overlap-only --horovod-only) the day of the set" in line
    # the day's measurements: no warning; Horovod's and added latency's dates where they count
    today = {**testbed, "overlap_date": "2026-12-07", "added_latency_date": "2026-12-05"}
    dates = fidelity_interference.interference_dates(today, ("wfbp",), "2026-12-07")
    assert dates == {"overlap": "2026-12-07", "today": "2026-12-07", "earlier_day": False}
    assert fidelity_interference.dates_line(dates, "cpu", False).endswith("this report 2026-12-07")
    dates = fidelity_interference.interference_dates(today, ("wfbp",), "2026-12-07", 2000.0)
    assert dates["added_latency"] == "2026-12-05" and dates["earlier_day"]
    assert "--latency-only --added-latency-us 2000) the day" in (
        fidelity_interference.dates_line(dates, "cpu", False, 2000.0)
    )
    # a PS set's twins take their CPU from the transport check: nothing said
    assert fidelity_interference.interference_dates(testbed, ("ps-default",), "2026-12-07") is None
    # through a set: in the result and its text
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: testbed)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)
    monkeypatch.setattr(launch, "run", _run_of_40_ms)
    metrics = {"iteration_time_s": 0.04, "compute_time_s": 0.01}
    monkeypatch.setattr(fidelity, "_twin", lambda real, sim: SimpleNamespace(metrics=metrics))
    monkeypatch.setattr(fidelity, "_today", lambda: "2026-12-08")
    result = fidelity.fidelity("cpu", ("wfbp",), ("vgg16-debug",), (1.0,), 5, repeats=1)
    assert result["interference_dates"] == {"overlap": "2026-12-06", "today": "2026-12-08",
                                            "earlier_day": True}  # fmt: skip
    assert "interference measurements: overlap 2026-12-06; this report 2026-12-08: from an " in (
        fidelity.format_report(result)
    )
