"""``fidelity``'s transport check (``runners.fidelity_transport``) without running anything
real: the probes, the real runs and the twins are fakes; what is tested is when the probes
are taken, what is kept of them, the twins they give and the report's words."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from runners import cli, fidelity, fidelity_transport
from runners.real import launch, probe
from runners.spec import validate

from .test_fidelity import HOST_PS_POINT, TESTBED, _row

# the calibration's medians: a line of 500 us + 2 ns/B through them (4 and 64 KiB)
CALIBRATED = {**HOST_PS_POINT, "host_cpu_small_us": 508.192, "host_cpu_big_us": 631.072}


class FakeProbes:
    """``probe_once``: the host's CPU per message of each call from ``small`` and ``big`` (us,
    by width) in turn; ``fail_on``: calls (1-based) that fail as a dead rank does."""

    def __init__(self, small, big, fail_on=()):
        self.small, self.big = iter(small), iter(big)
        self.calls: list[tuple] = []
        self.transports: list[str] = []  # each call's PS transport
        self.fail_on = fail_on

    def __call__(self, workers, servers, nominal, threads, priority, width, transport):
        self.calls.append((workers, servers, nominal, threads, priority, width))
        self.transports.append(transport)
        if len(self.calls) in self.fail_on:
            raise launch.RealRunError("rank 1 died")
        host = next(self.small if width == probe.PS_CPU_WIDTH else self.big)
        return probe.PSMessageCPU(compute_s=300e-6, host_s=host * 1e-6)


@pytest.fixture
def ps_set(monkeypatch):
    """A calibration with the host's CPU per message at 1 Gbit/s (none on loopback), each
    model's step at the calibration's speed, each real run 50 ms; the twins' iteration time
    grows with the host's CPU per message (40 ms at the calibration's). Returns the list of
    events (checks, probes, runs) and a setter for the probes."""
    network = [
        {**TESTBED["network"][0], "ps": HOST_PS_POINT},  # its CPU's line, not the medians
        {**TESTBED["network"][1], "ps": CALIBRATED},
    ]
    testbed = {**TESTBED, "network": network, "comm_priority": "realtime",
               "host": {"usable_cpus": 2}}  # fmt: skip
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: testbed)
    monkeypatch.setattr(fidelity, "check_priority", lambda testbed: None)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)
    monkeypatch.setattr(fidelity, "calibrated_step", lambda model, label: (0.010, 5))
    events: list[str] = []

    def step_now(*args):
        events.append("check")
        return 0.010

    monkeypatch.setattr(fidelity, "step_now_s", step_now)

    def fake_run(spec, work):
        events.append(f"run {spec.system}")
        metrics = {"iteration_time_s": 0.050, "iteration_time_median_s": 0.050,
                   "compute_time_s": 0.010}  # fmt: skip
        return SimpleNamespace(metrics=metrics, units={}, network=SimpleNamespace(kind="shaped"))

    monkeypatch.setattr(launch, "run", fake_run)

    def fake_twin(real_spec, sim_spec):
        c = sim_spec.cluster
        t = 0.030 * c.compute_scale
        metrics = {"compute_time_s": 0.01}
        if c.host_cores:  # 40 ms at the calibration's 500 us a message
            t += 0.010 * c.host_message_cpu_us / 500.0
            metrics["host_cpu_s"] = 1.8 * t
        return SimpleNamespace(metrics={**metrics, "iteration_time_s": t})

    monkeypatch.setattr(fidelity, "_twin", fake_twin)

    def use(probes: FakeProbes) -> FakeProbes:
        def probe_once(*args):
            events.append("probe")
            return probes(*args)

        monkeypatch.setattr(fidelity_transport, "probe_once", probe_once)
        return probes

    return SimpleNamespace(events=events, use=use)


def test_a_ps_set_probes_the_transport_at_each_stage_and_scores_twins_given_it(ps_set):
    """Before the real runs, between their rounds and after, one probe at each message size
    at each network with PS systems and a calibrated host CPU (1 Gbit/s; not loopback, which
    has none); each size's median against the calibration's; the PS twins given the line
    through the medians, the all-reduce rows scored with their own twin."""
    # 4 KiB: 600, 700, 650 us; 64 KiB: 750, 850, 800 (medians 650 and 800: +27.9 / +26.8 %)
    probes = ps_set.use(FakeProbes([600, 700, 650], [750, 850, 800]))
    said: list[str] = []
    result = fidelity.fidelity(
        "cpu", ("ps-default", "wfbp"), ("vgg16-debug",), (None, 1.0), 5, repeats=2,
        progress=said.append,
    )  # fmt: skip
    # the compute check, then the transport's; between the rounds; after
    runs = ["run ps-default", "run wfbp"] * 2  # a round: loopback, then 1 Gbit/s
    assert ps_set.events == [
        "check", "probe", "probe", *runs, "check", "probe", "probe", *runs,
        "check", "probe", "probe",
    ]  # fmt: skip
    assert [c[2] for c in probes.calls] == [1.0] * 6  # only the network with a calibrated CPU
    # the calibration's layout: its workers, its PS servers, threads and priority
    assert probes.calls[0] == (2, 2, 1.0, 1, "realtime", probe.PS_CPU_WIDTH)
    assert probes.calls[1][-1] == probe.PS_CPU_BIG_WIDTH
    (entry,) = result["transport_check"].values()
    assert entry["stages"] == ["before", "between-0", "after"]
    assert entry["host_cpu_small_probes_us"] == pytest.approx([600, 700, 650])
    assert entry["host_cpu_small_us"] == pytest.approx(650)
    assert entry["host_cpu_big_us"] == pytest.approx(800)
    fixed_s, per_byte_s = probe.host_cpu_fit(650e-6, 800e-6)
    assert entry["host_message_cpu_us"] == pytest.approx(fixed_s * 1e6)
    assert entry["host_cpu_ns_per_byte"] == pytest.approx(per_byte_s * 1e9)
    assert entry["small_pct"] == pytest.approx(100 * (650 / 508.192 - 1))
    assert entry["calibrated"]["host_message_cpu_us"] == 500.0
    assert any("transport check at 1 Gbit/s: 600 / 750 us" in line for line in said)
    # the twins: the report's keep the calibration's CPU (40 ms against 50: 20 %)
    rows = {(r["system"], r["bandwidth_gbps"]): r for r in result["configs"]}
    ps = rows[("ps-default", 1.0)]
    assert ps["sim_iteration_s"] == pytest.approx(0.040)
    expected = 0.030 + 0.010 * fixed_s * 1e6 / 500.0
    assert ps["sim_transport_checked_s"] == pytest.approx(expected)
    assert ps["sim_transport_compute_checked_s"] == pytest.approx(expected)  # compute on time
    assert "sim_transport_checked_s" not in rows[("ps-default", None)]  # no calibrated CPU
    assert "sim_transport_checked_s" not in rows[("wfbp", 1.0)]
    # the other rows with their own twins: ps-default on loopback 40 ms, wfbp 30 ms
    mape = 100 * (abs(expected - 0.05) / 0.05 + 0.2 + 0.4 + 0.4) / 4
    assert result["mape_with"]["transport_checked"] == pytest.approx(mape)
    assert result["mape_with"]["transport_compute_checked"] == pytest.approx(mape)
    text = " ".join(fidelity.format_report(result).split())
    assert (
        "transport check, the PS transport's host CPU per 4 / 64 KiB message against the "
        "calibration cpu's: 1 Gbit/s 650 / 800 us (+27.9 / +26.8% against 508 / 631; the "
        "median of 3 probe(s) each, before, between-0, after; the probes 600-700 / 750-850)"
    ) in text
    assert f"transport_checked {mape:.1f}% (ps-default" in text
    assert "with the compute check's speed too" in text


def test_sets_without_ps_systems_or_with_the_check_off_probe_nothing(ps_set):
    ps_set.use(FakeProbes([], []))
    result = fidelity.fidelity("cpu", ("wfbp",), ("vgg16-debug",), (1.0,), 5, repeats=1)
    assert "probe" not in ps_set.events and result["transport_check"] is None
    result = fidelity.fidelity(
        "cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5, repeats=1, transport_check=False
    )
    assert "probe" not in ps_set.events and result["transport_check"] is None
    assert "transport_checked" not in result["mape_with"]
    assert "transport check" not in fidelity.format_report(result)


def test_a_failed_probe_is_reported_and_the_runs_kept(ps_set):
    """The first stage's probe fails (a rank died): noted, the set goes on; the later stages'
    probes are the check. Every probe failing: the network is reported unmeasured and the
    variant is not scored."""
    ps_set.use(FakeProbes([700], [800], fail_on=(1,)))
    result = fidelity.fidelity("cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5, repeats=1)
    (entry,) = result["transport_check"].values()
    assert entry["errors"] == ["before: rank 1 died"] and entry["stages"] == ["after"]
    assert entry["host_cpu_small_us"] == 700
    assert len(result["configs"]) == 1 and "transport_checked" in result["mape_with"]
    assert "1 failed" in fidelity.format_report(result)
    ps_set.use(FakeProbes([], [], fail_on=(1, 2)))
    result = fidelity.fidelity("cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5, repeats=1)
    assert "transport_checked" not in result["mape_with"]
    text = fidelity.format_report(result)
    assert "1 Gbit/s not measured (before: rank 1 died; after: rank 1 died)" in text


def test_the_journal_keeps_the_transport_checks_and_resume_reuses_them(ps_set, tmp_path):
    ps_set.use(FakeProbes([600, 700], [750, 850]))
    journal = tmp_path / "j.jsonl"
    first = fidelity.fidelity(
        "cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5, repeats=1, journal=journal
    )
    stages = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    assert [e["stage"] for e in stages if "transport" in e] == ["before", "after"]
    ps_set.events.clear()
    ps_set.use(FakeProbes([], []))  # a probe now would fail the test (nothing left)
    again = fidelity.fidelity(
        "cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5, repeats=1, journal=journal,
        resume=True,
    )  # fmt: skip
    assert "probe" not in ps_set.events and "run ps-default" not in ps_set.events
    assert again["transport_check"] == first["transport_check"]
    assert again["mape_with"]["transport_checked"] == first["mape_with"]["transport_checked"]


def test_the_transport_twin_changes_only_a_ps_twin_s_cpu_per_message():
    checks = {"1": {"nominal_gbps": 1.0, "host_cpu_small_us": 600.0,
                    "host_message_cpu_us": 580.0, "host_cpu_ns_per_byte": 3.0,
                    "message_cpu_us": 450.0}}  # fmt: skip
    testbed = {**TESTBED, "network": [TESTBED["network"][0],
                                      {**TESTBED["network"][1], "ps": CALIBRATED}],
               "host": {"usable_cpus": 2}}  # fmt: skip
    shared = validate(fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, testbed)[1])
    twin = fidelity_transport.transport_twin(shared, checks, 1.0)
    assert (twin.cluster.host_message_cpu_us, twin.cluster.host_cpu_ns_per_byte) == (580.0, 3.0)
    assert twin.cluster.message_cpu_us == 0.0  # the shared twin charges none
    floor = validate(
        fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, testbed, host_cpu="floor")[1]
    )
    assert fidelity_transport.transport_twin(floor, checks, 1.0).cluster.message_cpu_us == 450.0
    assert fidelity_transport.transport_twin(shared, checks, None) is None  # not probed there
    wfbp = validate(fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, testbed)[1])
    assert fidelity_transport.transport_twin(wfbp, checks, 1.0) is None


def test_the_command_line_turns_the_check_off(monkeypatch, capsys):
    seen = []

    def fake(label, systems, models, bandwidths, iterations, on_config=None, **options):
        seen.append(options["transport_check"])
        checks = {"1": {"nominal_gbps": 1.0, "calibrated": {}, "errors": ["before: gone"]}}
        return fidelity.report([_row("ps-default", 0.04, 0.05)], label, transport_check=checks)

    monkeypatch.setattr(fidelity, "fidelity", fake)
    network = [TESTBED["network"][0], {**TESTBED["network"][1], "ps": CALIBRATED}]
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: {**TESTBED, "network": network})
    argv = ["fidelity", "--label", "unit", "--systems", "ps-default", "--models", "vgg16-debug"]
    assert cli.main([*argv, "--bandwidths", "1", "--no-transport-check"]) == 0
    capsys.readouterr()
    assert cli.main([*argv, "--bandwidths", "1", "--json"]) == 0
    assert seen == [False, True]
    # with --json, the check in words on stderr, where a JSON reader would not look for it
    assert "[fidelity] transport check" in capsys.readouterr().err


def test_a_pipelined_ps_set_runs_checks_and_scores_the_pipelined_transport(ps_set, tmp_path):
    """``fidelity --ps-transport pipelined``: the PS systems' real runs on it, their twins from
    the calibration's ``ps_pipelined`` (no rendezvous), the transport check probing it against
    that entry and kept in the journal apart from the blocking set's; the all-reduce systems
    as before; the report says the transport. Without the entry the set is refused before any
    run."""
    specs = []

    def fake_run(spec, work):
        specs.append(spec)
        metrics = {"iteration_time_s": 0.050, "iteration_time_median_s": 0.050,
                   "compute_time_s": 0.010}  # fmt: skip
        return SimpleNamespace(metrics=metrics, units={}, network=SimpleNamespace(kind="shaped"))

    twins = []

    def fake_twin(real_spec, sim_spec):
        twins.append(sim_spec)
        t = 0.030 + 0.010 * sim_spec.cluster.host_message_cpu_us / 500.0
        metrics = {"iteration_time_s": t, "compute_time_s": 0.01, "host_cpu_s": 1.8 * t}
        return SimpleNamespace(metrics=metrics)

    testbed = fidelity.load_testbed("cpu")
    with pytest.raises(fidelity.CalibrationMissing, match="--ps-transport pipelined"):
        fidelity.fidelity("cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5,
                          ps_transport="pipelined")  # fmt: skip
    assert not ps_set.events
    pipelined = {**CALIBRATED, "host_message_cpu_us": 250.0, "host_cpu_small_us": 254.0}
    for point in testbed["network"]:
        point["ps_pipelined"] = pipelined
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "run", fake_run)
        mp.setattr(fidelity, "_twin", fake_twin)
        probes = ps_set.use(FakeProbes([260, 270, 250, 240], [400, 410, 390, 380]))
        journal = tmp_path / "set.journal.jsonl"
        result = fidelity.fidelity(
            "cpu", ("ps-default", "wfbp"), ("vgg16-debug",), (1.0,), 5,
            ps_transport="pipelined", journal=journal,
        )  # fmt: skip
    real = {s.system: s for s in specs}
    assert real["ps-default"].real.ps_transport == "pipelined"
    assert real["wfbp"].real.ps_transport == "blocking"  # (validation refuses it elsewhere)
    ps_twin = next(t for t in twins if t.system == "ps-default")
    assert not ps_twin.cluster.pull_rendezvous and not ps_twin.cluster.push_rendezvous
    assert ps_twin.cluster.host_message_cpu_us == 250.0  # ps_pipelined's, not ps'
    assert set(probes.transports) == {"pipelined"}
    (entry,) = result["transport_check"].values()
    assert entry["calibrated"]["host_cpu_small_us"] == 254.0
    assert result["ps_transport"] == "pipelined"
    assert "PS transport: pipelined" in fidelity.format_report(result)
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    stages = [e["stage"] for e in entries if "transport" in e]
    assert stages == [f"{k}@pipelined" for k in ("before", "between-0", "between-1", "after")]


def test_a_kept_transport_check_is_compared_with_the_calibration_that_scores_it():
    """``against``: a journal's transport check, its probes as they were, compared with
    another calibration's medians (a resumed or rescored set); a network the calibration
    has no PS entry of keeps the values it was made against."""
    entry = {
        "nominal_gbps": 1.0,
        "calibrated": {"host_cpu_small_us": 500.0, "host_cpu_big_us": 600.0},
        "stages": ["before"],
        "host_cpu_small_probes_us": [550.0],
        "host_cpu_big_probes_us": [660.0],
        "message_cpu_probes_us": [300.0],
    }
    checks = {fidelity_transport.network_key(1.0): entry, "loopback": {"nominal_gbps": None}}
    testbed = {"network": [{"nominal_gbps": 1.0, "ps": CALIBRATED}, {"nominal_gbps": None}]}
    fidelity_transport.against(checks, testbed)
    assert entry["calibrated"]["host_cpu_small_us"] == pytest.approx(508.192)
    assert entry["small_pct"] == pytest.approx(100.0 * (550.0 / 508.192 - 1.0))
    assert entry["big_pct"] == pytest.approx(100.0 * (660.0 / 631.072 - 1.0))
    assert entry["host_cpu_small_us"] == 550.0, "the probes as they were"
    assert checks["loopback"] == {"nominal_gbps": None}
