"""Calibration and fidelity (``runners.fidelity``, ``runners.real.probe``) without running
anything real: the alpha-beta fit, the matched specs, the report's arithmetic and the command
line's refusals (exit 2, nothing measured)."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import statistics
from pathlib import Path

import pytest

import workloads
from runners import cli, fidelity, fidelity_journal, fidelity_transport
from runners.real import probe
from runners.sim.network import RingAllReduce
from runners.spec import validate


@pytest.fixture(autouse=True)
def _no_measuring_processes(monkeypatch):
    """``fidelity``'s compute check starts measuring processes, its transport check probes:
    in these tests only where a test fakes them (a test that forgets fails here rather than
    timing torch or the transport for real)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started the compute check's measuring processes")

    monkeypatch.setattr(fidelity, "_concurrent_docs", refuse)

    def refuse_probe(*args, **kwargs):
        raise AssertionError("a unit test started the transport check's probes")

    monkeypatch.setattr(fidelity_transport, "check_transport", refuse_probe)


TESTBED = {
    "label": "cpu",  # vgg16-debug@cpu is a stored measured profile
    "workers": 2,
    "threads": 1,
    "network": [
        {
            "nominal_gbps": None,
            "bandwidth_gbps": 12.0,
            "latency_us": 80.0,
            "overlap_slowdown": {"vgg16-debug": 0.2},
            "latency_busy_us": {"vgg16-debug": 700.0},
            "latency_idle_us": {"vgg16-debug": 300.0},
            "comm_slowdown": {"vgg16-debug": 1.5},
            "latency_engine_us": {"vgg16-debug": 550.0},
            "latency_engine_inline_us": {"vgg16-debug": 450.0},
        },
        {
            "nominal_gbps": 1.0,
            "bandwidth_gbps": 0.94,
            "latency_us": 120.0,
            "overlap_slowdown": {"vgg16-debug": 0.4},
            "latency_busy_us": {"vgg16-debug": 900.0},
            "latency_idle_us": {"vgg16-debug": 400.0},
            "comm_slowdown": {"vgg16-debug": 0.2},
            "latency_engine_us": {"vgg16-debug": 650.0},
            "latency_engine_inline_us": {"vgg16-debug": 520.0},
        },
    ],
}


@pytest.mark.parametrize("workers", [2, 4])
def test_the_fit_recovers_the_ring_model_it_inverts(workers):
    ring = RingAllReduce(workers, 1e9 / 8 * 0.9, 150e-6)
    rows = [(s, ring.time_s(s)) for s in probe.DEFAULT_SIZES]
    alpha, bandwidth = probe.fit_alpha_beta(rows, workers)
    assert alpha == pytest.approx(150e-6, rel=1e-6)
    assert bandwidth == pytest.approx(1e9 / 8 * 0.9, rel=1e-6)


def test_the_fit_takes_bandwidth_from_large_sizes_only():
    """A token bucket lets small messages through at line rate: they must not set B."""
    ring = RingAllReduce(2, 1e8, 100e-6)
    rows = [(s, ring.time_s(s) if s >= probe.LARGE_BYTES else 100e-6) for s in probe.DEFAULT_SIZES]
    alpha, bandwidth = probe.fit_alpha_beta(rows, 2)
    assert bandwidth == pytest.approx(1e8, rel=1e-6)
    assert 0 <= alpha < 100e-6


def test_one_disturbed_size_does_not_spoil_the_bandwidth():
    """A shared machine stalls one size now and then (seen in CI: 1 MiB took as long as
    2 MiB); the median of pairwise slopes keeps the fit near the true bandwidth."""
    ring = RingAllReduce(2, 1e9, 50e-6)
    rows = [(s, ring.time_s(s)) for s in probe.DEFAULT_SIZES]
    rows[probe.DEFAULT_SIZES.index(1 << 20)] = (1 << 20, ring.time_s(1 << 22))
    _, bandwidth = probe.fit_alpha_beta(rows, 2)
    assert bandwidth == pytest.approx(1e9, rel=0.35)


def test_the_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="two sizes"):
        probe.fit_alpha_beta([(4096, 1e-4), (1 << 20, 1e-3)], 2)
    with pytest.raises(ValueError, match="do not grow"):
        probe.fit_alpha_beta([(4096, 1e-4), (1 << 20, 2e-3), (1 << 21, 1e-3)], 2)


def test_the_cpu_probes_divide_each_backward_s_extra_time_by_the_events_in_it():
    """``collective_cpu_us`` / ``message_cpu_us``: per backward (window), its time beyond the
    backward alone over the collectives or messages that started in it; the median over
    windows. A window without any is left out; a faster one than alone counts 0."""
    base = 0.002
    windows = [(0.0, 0.006), (1.0, 1.003), (2.0, 2.010), (3.0, 3.001)]
    events = [0.001, 0.002, 0.0059, 0.006, 1.001, 2.0, 2.005, 3.0, 5.0]  # 0.006: not in it
    # 4 ms / 3, 1 ms / 1, 8 ms / 2, max(0, -1 ms) / 1: median of (1.33, 1, 4, 0) ms
    assert probe._cost_per_event(windows, events, base) == pytest.approx((1e-3 + 4e-3 / 3) / 2)
    assert probe._cost_per_event(windows, [9.0], base) == 0.0
    # ``negotiation_cpu_us``: the rounds in a window pay what its collectives (``known``, 0.5
    # ms each) did not: (4 - 2 x 0.5) / 1, (1 - 0.5) / 1, (8 - 0) / 2 ms (the last window has
    # no round); median 3 ms
    rounds, known = [0.0005, 1.0, 2.001, 2.002], [0.001, 0.002, 1.001]
    assert probe._cost_per_event(
        windows, rounds, base, known=known, known_cost=5e-4
    ) == pytest.approx(3e-3)


def test_calibrate_measures_again_once_when_times_do_not_grow(monkeypatch):
    """Times that shrink with size mean a disturbed measurement: one more, with twice the
    repeats, and the entry says so; two disturbed ones fail with what to do next. (The probe
    is replaced here; it runs for real in tests/integration/test_calibration.py.)"""
    ring = RingAllReduce(2, 1e8, 100e-6)
    good = [(s, ring.time_s(s)) for s in probe.DEFAULT_SIZES]
    bad = [(s, 1e-3 if s < probe.LARGE_BYTES else 1.0 / s) for s in probe.DEFAULT_SIZES]
    calls = []

    def fake_probe(workers, nominal, work, repeats, threads, comm_priority, latency_us):
        assert comm_priority == "normal"  # the default of a probe not told otherwise
        assert latency_us == 0.0  # a whole calibration adds none
        calls.append(repeats)
        return bad if len(calls) == 1 or answers == "bad" else good

    monkeypatch.setattr(probe, "probe", fake_probe)
    answers = "once"
    rows, _, bandwidth, remeasured = fidelity._probe_network(2, None, 1, lambda m: None)
    assert (calls, remeasured, rows) == ([11, 22], True, good)
    assert bandwidth == pytest.approx(1e8, rel=1e-6)
    calls.clear()
    answers = "bad"
    with pytest.raises(fidelity.CalibrationError, match="loopback.*quieter machine"):
        fidelity._probe_network(2, None, 1, lambda m: None)
    assert calls == [11, 22]


def test_calibrate_measures_a_shaped_network_again_when_its_times_are_not_straight(monkeypatch):
    """On a shaped network a large all-reduce more than ``LINEAR_TOLERANCE_PCT`` off the fit's
    straight line (the 4 MiB one 3x its time: another load took the cores) is measured again
    with twice the repeats and the straighter measurement kept; where both are off, the
    straighter with a warning, as where the second is impossible or the first was already
    measured again (as impossible); loopback (not linear in size) is not checked, nor a
    network with latency added."""
    ring = RingAllReduce(2, 1.2e8, 50e-6)
    good = [(s, ring.time_s(s)) for s in probe.DEFAULT_SIZES]
    bent = [(s, t * (3.0 if s == 4 * 2**20 else 1.0)) for s, t in good]
    worse = [(s, t * (4.0 if s == 4 * 2**20 else 1.0)) for s, t in good]
    answers: list = []
    calls = []

    def fake_probe(workers, nominal, work, repeats, threads, comm_priority, latency_us):
        calls.append(repeats)
        return answers[len(calls) - 1]

    monkeypatch.setattr(probe, "probe", fake_probe)
    assert fidelity.nonlinearity_pct(good, 50e-6, 1.2e8, 2) == pytest.approx(0.0, abs=1e-6)
    said: list[str] = []
    answers[:] = [bent, good]
    rows, alpha, bandwidth, remeasured = fidelity._probe_network(2, 1.0, 1, said.append)
    assert (calls, rows, remeasured) == ([11, 22], good, True)
    assert bandwidth == pytest.approx(1.2e8, rel=1e-6) and alpha == pytest.approx(50e-6)
    assert "off the fit's straight line" in said[0] and len(said) == 1
    calls.clear(), said.clear()
    answers[:] = [bent, worse]
    rows, _, _, remeasured = fidelity._probe_network(2, 1.0, 1, said.append)
    assert (calls, rows, remeasured) == ([11, 22], bent, True)
    assert "the all-reduce times kept are 200% off a straight line" in said[-1]
    impossible = [(s, 1e-3 if s < probe.LARGE_BYTES else 1.0 / s) for s in probe.DEFAULT_SIZES]
    for answers[:] in ([bent, impossible], [impossible, bent]):
        calls.clear(), said.clear()
        rows, _, _, remeasured = fidelity._probe_network(2, 1.0, 1, said.append)
        assert (calls, rows, remeasured) == ([11, 22], bent, True)
        assert "off a straight line in size" in said[-1], said
    calls.clear(), said.clear()
    answers[:] = [bent]  # loopback: kept as measured
    assert fidelity._probe_network(2, None, 1, said.append)[0] == bent
    assert calls == [11] and said == []
    calls.clear()
    answers[:] = [bent]  # latency added: large all-reduces pay less of it, not checked
    assert fidelity._probe_network(2, 1.0, 1, said.append, "normal", 2000.0)[0] == bent
    assert calls == [11] and said == []
    calls.clear()
    answers[:] = [good]
    assert fidelity._probe_network(2, 1.0, 1, said.append)[3] is False and calls == [11]


def test_twins_get_the_optimizer_updates_where_the_calibration_timed_them(monkeypatch):
    """Every real system updates each parameter every iteration: where the calibration's
    profile timed the updates, every all-reduce twin (DDP's and Horovod's too) has them."""
    measured = workloads.load_measured("vgg16-debug", "cpu")
    timed = dataclasses.replace(measured, update_s=(1e-5,) * len(measured.fwd_s))
    monkeypatch.setattr(workloads, "load_measured", lambda model, label: timed)
    for system in ("wfbp", "ddp", "horovod", "dear"):
        _, sim = fidelity.matched_specs(system, "vgg16-debug", 1.0, TESTBED)
        assert validate(sim).cluster.optimizer_update, system


def test_the_step_noise_is_what_one_process_does_not_share_with_the_others():
    """``step_jitter_cv``: a slow spell both processes see is no skew; steps that differ
    between processes by +-d around a mean m give d / m times sqrt(2) (the sample variance of
    two values a, b is (a - b)^2 / 2); one process has nothing to compare."""
    shared = [0.010, 0.020, 0.010, 0.030]
    assert fidelity.step_jitter_cv([shared, list(shared)]) == 0.0
    apart = [[0.011, 0.009] * 50, [0.009, 0.011] * 50]
    assert fidelity.step_jitter_cv(apart) == pytest.approx(0.002 / 2**0.5 / 0.010, rel=1e-4)
    assert fidelity.step_jitter_cv([shared]) == 0.0
    assert fidelity.step_jitter_cv([[0.01, 0.02, 0.03], [0.01]]) == 0.0  # step 1 alike


def test_twins_get_the_ranks_step_noise_where_the_calibration_measured_it(monkeypatch):
    """Where the calibration's profile has ``step_jitter_cv``, the all-reduce twins wait for
    the slowest rank each step; profiles from before it leave the twins as they were."""
    measured = workloads.load_measured("vgg16-debug", "cpu")
    assert "step_jitter_cv" not in measured.source
    _, sim = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, TESTBED)
    assert validate(sim).cluster.step_jitter_cv == 0.0
    noisy = dataclasses.replace(measured, source={**measured.source, "step_jitter_cv": 0.04})
    monkeypatch.setattr(workloads, "load_measured", lambda model, label: noisy)
    for system in ("wfbp", "ddp", "horovod", "dear"):
        _, sim = fidelity.matched_specs(system, "vgg16-debug", 1.0, TESTBED)
        assert validate(sim).cluster.step_jitter_cv == 0.04, system


def test_matched_specs_share_the_configuration_and_use_the_calibration():
    real, sim = fidelity.matched_specs(
        "wfbp", "vgg16-debug", 1.0, TESTBED, iterations=7, latency="busy"
    )
    real_spec, sim_spec = validate(real), validate(sim)
    assert real_spec.mode == "real" and sim_spec.mode == "sim"
    assert real_spec.cluster.bandwidth_gbps == 1.0  # the shaper's nominal rate
    assert real_spec.real.network == "shaped"
    c = sim_spec.cluster
    assert (c.bandwidth_gbps, c.latency_us, c.overlap_slowdown) == (0.94, 900.0, 0.4)
    assert c.gpu == "measured:cpu" and c.compute_jitter_cv == 0
    assert c.cpu_collectives, "the real runs' collectives are gloo's, on CPU"
    assert not c.optimizer_update, "vgg16-debug@cpu was measured before updates were timed"
    assert real_spec.iterations == sim_spec.iterations == 7
    assert real_spec.warmup_iterations == sim_spec.warmup_iterations
    _, idle = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, TESTBED, latency="idle")
    assert idle["cluster"]["latency_us"] == 120.0  # the fit on idle ranks
    loop_real, loop_sim = fidelity.matched_specs("ddp", "vgg16-debug", None, TESTBED)
    assert loop_real["real"]["network"] == "loopback"
    assert loop_sim["cluster"]["bandwidth_gbps"] == 12.0
    # the shaper's token bucket (256 KiB of frames at 1 Gbit/s) in payload bytes; none on
    # loopback
    assert c.link_burst_bytes == int(262144 * 0.94)
    assert "link_burst_bytes" not in loop_sim["cluster"]
    # the real runs get the calibration's communication-thread priority (older ones: normal)
    assert real_spec.real.comm_priority == "normal"
    rt_real, _ = fidelity.matched_specs(
        "wfbp", "vgg16-debug", 1.0, {**TESTBED, "comm_priority": "realtime"}
    )
    assert validate(rt_real).real.comm_priority == "realtime"


def test_the_simulator_gets_the_measured_split_collectives_where_the_calibration_has_them():
    """gloo's reduce-scatter is a whole all-reduce: a calibration that measured it gives DeAR's
    simulated twin those costs; an older one leaves the ring's 0.5 each."""
    _, old = fidelity.matched_specs("dear", "vgg16-debug", 1.0, TESTBED)
    assert validate(old).cluster.reduce_scatter_cost == 0.5
    measured = json.loads(json.dumps(TESTBED))
    measured["network"][1].update(reduce_scatter_cost=1.02, all_gather_cost=0.57)
    _, sim = fidelity.matched_specs("dear", "vgg16-debug", 1.0, measured)
    c = validate(sim).cluster
    assert (c.reduce_scatter_cost, c.all_gather_cost) == (1.02, 0.57)


PS_POINT = {
    "servers": 3,
    "overlap_slowdown": {"vgg16-debug": 0.8},
    "latency_busy_us": {"vgg16-debug": 3500.0},
    "latency_idle_us": {"vgg16-debug": 600.0},
    "server_agg_gbps": 38.0,
}


def test_a_ps_system_s_twins_get_the_ps_arena_s_measurements(monkeypatch):
    """A PS system's simulated twin gets the PS probe's latency, slow-down and aggregation
    rate (not the all-reduce ones), and both twins the probe's server count; none of the
    all-reduce-only fields; the shaper's token bucket and the ranks' step noise, as every twin
    on a shaped network; and the real transport's rendezvous pulls."""
    measured = json.loads(json.dumps(TESTBED))
    measured["network"][1].update(reduce_scatter_cost=1.02, all_gather_cost=0.57, ps=PS_POINT)
    profile = workloads.load_measured("vgg16-debug", "cpu")
    noisy = dataclasses.replace(profile, source={**profile.source, "step_jitter_cv": 0.05})
    monkeypatch.setattr(workloads, "load_measured", lambda model, label: noisy)
    real, sim = fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, measured, latency="busy")
    real_spec, sim_spec = validate(real), validate(sim)
    assert sim_spec.arena == "ps" and not sim_spec.cluster.cpu_collectives
    assert sim_spec.cluster.reduce_scatter_cost == 0.5
    assert sim_spec.cluster.overlap_model == "integrated"  # ``TWIN_OVERLAP_MODEL``
    c = sim_spec.cluster
    assert (c.latency_us, c.overlap_slowdown, c.server_agg_gbps) == (3500.0, 0.8, 38.0)
    assert c.bandwidth_gbps == 0.94  # the network's fit, as for every system
    assert real_spec.cluster.ps == c.ps == 3
    assert real_spec.cluster.servers == c.servers == 3  # PSLD starts no more processes
    assert c.link_burst_bytes == int(262144 * 0.94)
    assert c.pull_rendezvous and c.push_rendezvous and c.push_buffered
    assert c.server_agg_fixed_us == 0.0  # a calibration that timed the sum alone: none
    # an all-reduce system at the same network keeps the all-reduce measurements
    _, wfbp = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, measured, latency="busy")
    assert (wfbp["cluster"]["latency_us"], wfbp["cluster"]["overlap_slowdown"]) == (900.0, 0.4)
    assert c.step_jitter_cv == wfbp["cluster"]["step_jitter_cv"] == 0.05
    assert not {"pull_rendezvous", "push_rendezvous", "push_buffered"} & set(wfbp["cluster"])
    # a PS twin needs none of the all-reduce measurements
    for key in ("overlap_slowdown", "latency_busy_us"):
        del measured["network"][1][key]
    assert validate(fidelity.matched_specs("p3", "vgg16-debug", 1.0, measured)[1])


def test_the_aggregation_fit_goes_through_both_rounds_and_is_clamped():
    """``aggregation_fit``: the simulator's ``fixed + n * S / rate`` through the two measured
    rounds; a large round no slower than the small one gives no measurable byte cost (the
    bound's rate) and the small round as the fixed time; the fixed time is never negative."""
    big, small = 700e-6, 150e-6
    fixed, rate = probe.aggregation_fit(big, small, 2)
    for elements, measured in ((probe.PS_BIG_ELEMENTS, big), (probe.PS_SMALL_ELEMENTS, small)):
        assert fixed + 2 * 4 * elements / rate == pytest.approx(measured)
    assert 0 < fixed < small
    assert probe.aggregation_fit(100e-6, 120e-6, 2) == (
        120e-6,
        probe.PS_AGG_GBPS_MAX * 1e9 / 8,
    )
    fixed, rate = probe.aggregation_fit(1e-3, 1e-9, 3)  # a line below 0 at the small size
    assert fixed == 0.0 and rate > 0
    with pytest.raises(ValueError, match="workers"):
        probe.aggregation_fit(1e-3, 1e-4, 0)


def test_a_ps_system_without_the_ps_measurement_says_what_to_run():
    with pytest.raises(fidelity.CalibrationMissing, match="calibrate --label cpu --ps-only"):
        fidelity.matched_specs("tictac-tic", "vgg16-debug", 1.0, TESTBED)


# The message CPU's 5 probes at one network (median: the first), and their host CPU's, the
# small and the big width's in turn (each width's median: the first).
CPU_SWING = [1.0, 2.5, 0.4, 3.0, 0.9]
HOST_SWING = [1.0, 1.5, 0.5, 1.0, 1.5, 0.5, 0.8, 1.2, 1.2, 0.8]


def test_calibrate_ps_only_adds_the_ps_arena_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    doc = {**TESTBED, "method": "m", "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    doc["host"] = {"cpus": 8, "usable_cpus": 6}  # the calibration's machine, not this one
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    seen = []

    swing = iter([1.0, 3.0, 0.5] * 2)  # each network's probes: their median is the middle

    def fake_ps_overlap(
        model, workers, servers, nominal, work, threads, comm_priority, transport, latency_us
    ):
        assert comm_priority == "normal", "a calibration from before the priority: normal"
        assert transport == "blocking" and latency_us == 0.0  # the network's own
        seen.append((model, workers, servers, nominal))
        f = next(swing)
        return probe.PSProbe(
            slowdown=0.5 * f,
            message_busy_s=2e-3 * (1 + (nominal or 0)) * f,
            message_idle_s=5e-4 * f,
            half_round_trip_busy_s=3e-3 * f,
            # at the medians: 100 us + 2 pushes' bytes at 4e9 B/s (32 Gbit/s)
            agg_round_s=(100e-6 + 2 * 4 * probe.PS_BIG_ELEMENTS / 4e9) * f,
            agg_round_small_s=(100e-6 + 2 * 4 * probe.PS_SMALL_ELEMENTS / 4e9) * f,
        )

    cpu_swing = iter(CPU_SWING * 2)  # the message CPU's probes: the median the middle
    host_swing = iter(HOST_SWING * 2)  # and their host CPU, per width

    def fake_message_cpu(workers, servers, nominal, work, threads, comm_priority, width, transport):
        assert transport == "blocking"
        seen.append(("message", workers, servers, nominal, width))
        # the host: 500 us + 2 ns a byte at the medians; a big probe's own compute unused
        host = (500e-6 + 4 * width**2 * 2e-9) * next(host_swing)
        compute = (3e-4 if nominal is None else 4e-4) * next(cpu_swing) if width == 32 else 9.0
        return probe.PSMessageCPU(compute, host)

    monkeypatch.setattr(probe, "ps_overlap", fake_ps_overlap)
    monkeypatch.setattr(probe, "ps_message_cpu", fake_message_cpu)
    # a calibration from before the message CPU: its PS arena text is replaced, not doubled
    doc["method"] = f"m; {fidelity._PS_METHOD_BEFORE_CPU}"
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    assert cli.main(["calibrate", "--label", "cpu", "--ps-only", "--json"]) == 0
    servers = fidelity.PS_SERVERS
    assert (fidelity.PS_ROUNDS, fidelity.PS_CPU_ROUNDS) == (3, 5)
    small, big = probe.PS_CPU_WIDTH, probe.PS_CPU_BIG_WIDTH
    assert (small, big) == (32, 128)
    assert seen == [
        *[("vgg16-debug", 2, servers, None)] * 3,
        *[("message", 2, servers, None, small), ("message", 2, servers, None, big)] * 5,
        *[("vgg16-debug", 2, servers, 1.0)] * 3,
        *[("message", 2, servers, 1.0, small), ("message", 2, servers, 1.0, big)] * 5,
    ]
    stored = json.loads((tmp_path / "cpu.json").read_text())
    loop, shaped = stored["network"]
    # every probe kept, in the order taken (the fake's swings)
    assert shaped["ps"].pop("message_cpu_probes_us") == pytest.approx([400 * f for f in CPU_SWING])
    small_probes, big_probes = HOST_SWING[::2], HOST_SWING[1::2]
    assert shaped["ps"].pop("host_cpu_small_probes_us") == pytest.approx(
        [508.192 * f for f in small_probes]
    )
    assert shaped["ps"].pop("host_cpu_big_probes_us") == pytest.approx(
        [631.072 * f for f in big_probes]
    )
    assert shaped["ps"] == {
        "servers": servers,
        "overlap_slowdown": {"vgg16-debug": 0.5},
        "latency_busy_us": {"vgg16-debug": 4000.0},  # the stream's time per message
        "latency_idle_us": {"vgg16-debug": 500.0},
        "half_round_trip_busy_us": {"vgg16-debug": 3000.0},
        "server_agg_gbps": 32.0,  # the line through the two rounds
        "server_agg_fixed_us": 100.0,
        "agg_round_us": 624.288,
        "agg_round_small_us": 102.048,
        "message_cpu_us": 400.0,
        "host_message_cpu_us": 500.0,  # the line through the two widths' medians
        "host_cpu_ns_per_byte": 2.0,
        "host_cpu_small_us": 508.192,
        "host_cpu_big_us": 631.072,
    }
    assert loop["ps"]["latency_busy_us"] == {"vgg16-debug": 2000.0}
    assert loop["ps"]["message_cpu_us"] == 300.0
    assert shaped["latency_busy_us"] == TESTBED["network"][1]["latency_busy_us"], "kept"
    assert stored["method"] == f"m; {fidelity.PS_METHOD}" and stored["ps_date"]
    assert not list(tmp_path.glob("*.tmp"))
    # measured again, from calibrations with the text before the rounds, and with the one
    # of the message CPU as a single probe: replaced as well
    for older in (
        fidelity._PS_METHOD_BEFORE_ROUNDS,
        fidelity._PS_METHOD_CPU_ONCE,
        fidelity._PS_METHOD_SUM_ONLY,  # the aggregation as the sum of one push alone
        fidelity._PS_METHOD_BEFORE_HOST,  # without the host's CPU per message
        fidelity._PS_METHOD_THREE_CPU,  # the message CPU the median of 3, not stored
        fidelity._PS_METHOD_FIVE_CPU,  # of 5, stored, the count in the text
    ):
        stored["method"] = f"m; {older}"
        (tmp_path / "cpu.json").write_text(json.dumps(stored))
        swing, cpu_swing = iter([1.0, 3.0, 0.5] * 2), iter(CPU_SWING * 2)
        host_swing = iter(HOST_SWING * 2)
        assert cli.main(["calibrate", "--label", "cpu", "--ps-only", "--json"]) == 0
        method = json.loads((tmp_path / "cpu.json").read_text())["method"]
        assert method == f"m; {fidelity.PS_METHOD}"
    # --ps-cpu-probes: as many message-CPU probes per network, each kept; the same text
    seen.clear()
    swing, cpu_swing = iter([1.0, 3.0, 0.5] * 2), iter(CPU_SWING * 2)
    host_swing = iter(HOST_SWING * 2)
    argv = ["calibrate", "--label", "cpu", "--ps-only", "--json"]
    assert cli.main([*argv, "--ps-cpu-probes", "2"]) == 0
    assert [s[-1] for s in seen if s[0] == "message"] == [small, big] * 4
    fewer = json.loads((tmp_path / "cpu.json").read_text())
    assert fewer["network"][1]["ps"]["message_cpu_probes_us"] == pytest.approx(
        [400 * f for f in CPU_SWING[2:4]]
    )
    assert fewer["method"] == f"m; {fidelity.PS_METHOD}"
    _, sim = fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, stored, latency="busy")
    assert validate(sim).cluster.latency_us == 4000.0
    # the twin shares the host's cores op by op: no message CPU of its own (the calibration's
    # priority, normal here: fair); the floor's twin has it
    assert validate(sim).cluster.message_cpu_us == 0.0
    assert validate(sim).cluster.host_cpu_model == "fair"
    _, sim = fidelity.matched_specs(
        "ps-default", "vgg16-debug", 1.0, stored, latency="busy", host_cpu="floor"
    )
    assert validate(sim).cluster.message_cpu_us == 400.0
    assert validate(sim).cluster.server_agg_fixed_us == 100.0
    assert validate(sim).cluster.server_agg_gbps == 32.0
    host = validate(sim).cluster  # every process on the calibration's host
    assert (host.host_cores, host.host_message_cpu_us, host.host_cpu_ns_per_byte) == (6, 500.0, 2.0)
    for latency in ("idle", "split", "engine"):  # the PS simulator has one latency: the idle
        _, sim = fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, stored, latency=latency)
        assert validate(sim).cluster.latency_us == 500.0


@pytest.mark.parametrize(("slowdown", "code"), [(10.7, 0), (150.0, 1)])
def test_a_busy_machine_s_slowdown_is_written_as_measured_with_a_warning_or_refused(
    slowdown, code, tmp_path, monkeypatch, capsys
):
    """CI once measured the PS arena's compute 11.7x as slow while pushing (10.7): the
    calibration keeps what it measured, says so, and fidelity's twin takes it; beyond the
    simulator's bound the calibration stops and the file is left as it was."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    doc = {**TESTBED, "method": "m", "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    # an all-reduce slow-down stored by an older calibrate: --ps-only did not measure it
    doc["network"] = [{**p, "comm_slowdown": {"vgg16-debug": 150.0}} for p in doc["network"]]
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    before = (tmp_path / "cpu.json").read_text()

    def busy_ps_overlap(
        model, workers, servers, nominal, work, threads, comm_priority, transport, latency_us
    ):
        return probe.PSProbe(slowdown, 2e-3, 5e-4, 3e-3, 6e-4, 1e-4)

    monkeypatch.setattr(probe, "ps_overlap", busy_ps_overlap)
    monkeypatch.setattr(probe, "ps_message_cpu", lambda *a, **kw: probe.PSMessageCPU(4e-4, 6e-4))
    assert cli.main(["calibrate", "--label", "cpu", "--ps-only"]) == code
    err = capsys.readouterr().err
    said = f"compute while PS pushes run of vgg16-debug measured {1 + slowdown:.1f}x as slow"
    assert said in err and "1 MiB all-reduces" not in err
    if code:
        assert "cluster.overlap_slowdown <= 100" in err and "calibration is unchanged" in err
        assert (tmp_path / "cpu.json").read_text() == before
        return
    assert "warning:" in err and "busy with other work" in err
    stored = json.loads((tmp_path / "cpu.json").read_text())
    _, sim = fidelity.matched_specs(  # the floor's twin has it (the shared cores replace it)
        "ps-default", "vgg16-debug", 1.0, stored, latency="busy", host_cpu="floor"
    )
    assert validate(sim).cluster.overlap_slowdown == slowdown


def test_a_large_slowdown_on_the_unshaped_network_is_told_with_its_likely_cause():
    """The all-reduce probe's slow-down on the unshaped network (42.5x once on a quiet
    machine: its collectives never pause) is told with that cause and how the twins bound
    it; the same value elsewhere, or of another probe, only as a busy machine's."""
    said: list[str] = []
    loopback = {"nominal_gbps": None, "overlap_slowdown": {"resnet50-debug": 41.5}}
    shaped = {"nominal_gbps": 1.0, "overlap_slowdown": {"resnet50-debug": 41.5}}
    ps = {"nominal_gbps": None, "ps": {"overlap_slowdown": {"resnet50-debug": 5.0}}}
    fidelity.check_slowdowns([loopback, shaped, ps], said.append, ("overlap_slowdown", "ps"))
    assert len(said) == 3 and all("busy with other work" in line for line in said)
    assert "42.5x as slow" in said[0] and "overlap_model integrated" in said[0]
    assert "overlap_model" not in said[1] and "overlap_model" not in said[2]
    # beyond the simulator's bound the calibration stops, with the same likely cause
    beyond = fidelity.SLOWDOWN_MAX + 1
    for point, unshaped in ((loopback, True), (shaped, False)):
        point = {**point, "overlap_slowdown": {"resnet50-debug": beyond}}
        with pytest.raises(fidelity.CalibrationError) as err:
            fidelity.check_slowdowns([point], said.append, ("overlap_slowdown",))
        assert "busy with other work" in str(err.value)
        assert ("overlap_model integrated" in str(err.value)) is unshaped


def test_calibrate_overlap_only_measures_the_interference_again_and_split_uses_it(
    tmp_path, monkeypatch
):
    """``calibrate --overlap-only`` stores per model the compute slow-down, the busy and idle
    latencies (the idle one also through the engine) and the large all-reduces' slow-down;
    ``--latency engine`` (the default) gives the twin the engine's idle latency, the busy one
    while computing and the slow-down, ``--latency split`` the same with the plain idle
    latency (a calibration without them is refused with the command to run)."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    method = f"m; {fidelity._OLD_OVERLAP_METHODS[0]}; split"  # what an older calibration says
    doc = {**TESTBED, "method": method, "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    doc = json.loads(json.dumps(doc))
    for point in doc["network"]:  # a calibration from before the idle measurement
        del point["latency_idle_us"], point["comm_slowdown"], point["latency_engine_us"]
        del point["latency_engine_inline_us"]
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    with pytest.raises(fidelity.CalibrationMissing, match="--overlap-only"):
        fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, doc)
    seen = []
    idle = [4e-4, 9e-4, 1e-4, 4.5e-4, 3e-4]  # the five probes of a network swing: the median

    def fake_overlap(model, workers, nominal, work, threads, comm_priority, latency_us):
        assert comm_priority == "normal", "a calibration from before the priority: normal"
        assert latency_us == 0.0
        seen.append((model, workers, nominal))
        return probe.OverlapProbe(
            slowdown=0.25,
            latency_busy_s=1e-3 * (1 + (nominal or 0)),
            latency_idle_s=idle[(len(seen) - 1) % 5],
            comm_slowdown=0.5,
            latency_engine_s=3 * idle[(len(seen) - 1) % 5],
            collective_cpu_s=2e-4,
            negotiation_cpu_s=5e-5,
            latency_engine_inline_s=2 * idle[(len(seen) - 1) % 5],
            collective_cpu_inline_s=1e-4,
        )

    monkeypatch.setattr(probe, "overlap", fake_overlap)
    assert cli.main(["calibrate", "--label", "cpu", "--overlap-only", "--json"]) == 0
    rounds = fidelity.OVERLAP_ROUNDS
    assert seen == [("vgg16-debug", 2, None)] * rounds + [("vgg16-debug", 2, 1.0)] * rounds
    stored = json.loads((tmp_path / "cpu.json").read_text())
    shaped = stored["network"][1]
    assert shaped["overlap_slowdown"] == {"vgg16-debug": 0.25}
    assert shaped["latency_busy_us"] == {"vgg16-debug": 2000.0}
    assert shaped["latency_idle_us"] == {"vgg16-debug": 400.0}
    assert shaped["comm_slowdown"] == {"vgg16-debug": 0.5}
    assert shaped["latency_engine_us"] == {"vgg16-debug": 1200.0}
    assert shaped["collective_cpu_us"] == {"vgg16-debug": 200.0}
    assert shaped["negotiation_cpu_us"] == {"vgg16-debug": 50.0}
    assert shaped["latency_engine_inline_us"] == {"vgg16-debug": 800.0}
    assert shaped["collective_cpu_inline_us"] == {"vgg16-debug": 100.0}
    assert shaped["latency_us"] == 120.0, "the alpha-beta fit is kept"
    assert "collective_cpu_inline_us" in stored["method"] and stored["overlap_date"]
    assert stored["method"].startswith("m; split; overlap per model"), "the old text replaced"
    assert stored["method"].count("overlap per model") == 1
    # bytescheduler's plan reorders (and has a credit): its engine's communication thread
    _, sim = fidelity.matched_specs("bytescheduler", "vgg16-debug", 1.0, stored)  # engine
    c = validate(sim).cluster
    assert (c.latency_us, c.busy_latency_us, c.overlap_comm_slowdown) == (1200.0, 2000.0, 0.5)
    assert c.negotiation, "the real engine negotiates reordering plans"
    assert c.collective_cpu_us == 200.0, "the lab's engine runs it: its CPU per collective"
    assert c.negotiation_cpu_us == 50.0, "and per negotiation round"
    # wfbp's is sent as released: issued from the gradient hooks, measured that way
    real, sim = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, stored)
    assert real["real"]["dispatch"] == "auto"
    c = validate(sim).cluster
    assert (c.latency_us, c.busy_latency_us, c.collective_cpu_us) == (800.0, 2000.0, 100.0)
    # ... unless the run said its engine used the thread (a run from before the hooks issued)
    _, sim = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, stored, engine_dispatch="thread")
    c = validate(sim).cluster
    assert (c.latency_us, c.collective_cpu_us) == (1200.0, 200.0)
    for own in fidelity.OWN_FRAMEWORKS:  # PyTorch DDP's and Horovod's own code: not measured
        _, twin = fidelity.matched_specs(own, "vgg16-debug", 1.0, stored)
        assert validate(twin).cluster.collective_cpu_us == 0.0
        assert validate(twin).cluster.negotiation_cpu_us is None
    _, split = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, stored, latency="split")
    c = validate(split).cluster
    assert (c.latency_us, c.busy_latency_us, c.overlap_comm_slowdown) == (400.0, 2000.0, 0.5)
    _, busy = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, stored, latency="busy")
    c = validate(busy).cluster
    assert (c.latency_us, c.busy_latency_us, c.overlap_comm_slowdown) == (2000.0, None, 0.0)


def test_overlap_only_replaces_the_previous_method_text_once(tmp_path, monkeypatch):
    """A calibration whose method ends with the overlap text from before the engine's latency
    gets the new text in its place; measuring again leaves one copy."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    fake = probe.OverlapProbe(0.1, 1e-3, 4e-4, 0.2, 8e-4, 3e-4, 1e-4)
    monkeypatch.setattr(probe, "overlap", lambda *args, **kwargs: fake)
    for old in fidelity._OLD_OVERLAP_METHODS[1:]:  # one older text starts the other
        doc = {**TESTBED, "method": f"m; {old}"}
        doc["profiles"] = {"vgg16-debug": "vgg16-debug@cpu"}
        (tmp_path / "cpu.json").write_text(json.dumps(doc))
        for _ in range(2):
            stored = fidelity.calibrate_overlap("cpu")
            assert stored["method"] == f"m; {fidelity.OVERLAP_METHOD}"
    assert stored["network"][0]["latency_engine_us"] == {"vgg16-debug": 800.0}
    assert stored["network"][0]["collective_cpu_us"] == {"vgg16-debug": 300.0}
    assert stored["network"][0]["negotiation_cpu_us"] == {"vgg16-debug": 100.0}


def test_the_twin_simulates_the_plan_the_real_run_executed(monkeypatch):
    """A searching policy plans under its spec's conditions: the real spec's (no calibration)
    may give another plan than the twin's; the twin runs the real run's."""
    from runners.policies.allreduce import CommPlan, CommTask
    from runners.real import launch

    real, sim = fidelity.matched_specs("pace", "vgg16-debug", 1.0, TESTBED)
    real_spec, sim_spec = validate(real), validate(sim)
    n = len(workloads.load_profile("vgg16-debug").layers)
    one = CommPlan(
        tasks=(CommTask(layers=tuple(range(n)), size_bytes=4 << 20, priority=0),),
        credit_bytes=float("inf"),
        cross_barrier=False,
    )
    monkeypatch.setattr(launch, "_plan", lambda spec: one if spec == real_spec else None)
    twin = fidelity._twin(real_spec, sim_spec)
    assert {r[6] for r in twin.timeline if r[1] == "network"} == {4 << 20}


def test_calibrate_horovod_only_measures_horovod_s_own_cost_and_its_twin_pays_it(
    tmp_path, monkeypatch, capsys
):
    """``calibrate --horovod-only``: the real Horovod's CPU cost at each network, under
    ``horovod`` (its other measurements kept); the ``horovod`` twin is charged it (a cycle's
    whole cost once per cycle, at its negotiation round, its collectives nothing more; the
    idle loop's slow-down only when asked, none where the step was faster beside it); DDP's
    and the lab's engine's twins are not."""
    from runners.real import hvd

    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    # a calibration whose Horovod entry is the first version's: its text replaced, not doubled
    method = f"m; {fidelity._HOROVOD_METHOD_BEFORE_CYCLE}"
    doc = {**TESTBED, "method": method, "comm_priority": "realtime"}
    doc["profiles"] = {"vgg16-debug": "vgg16-debug@cpu"}
    doc["network"] = [
        {
            **point,
            "collective_cpu_us": {"vgg16-debug": 300.0},
            "collective_cpu_inline_us": {"vgg16-debug": 250.0},
        }
        for point in doc["network"]
    ]
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    monkeypatch.setattr(hvd, "available", lambda: "0.28.1")
    seen = []

    def fake_horovod_cpu(workers, nominal, work, models, threads, comm_priority):
        assert comm_priority == "realtime", "the calibration's priority"
        seen.append((workers, nominal, models, threads))
        idle = -0.05 if nominal is None else 0.6  # a faster step: the machine's noise
        return probe.HorovodProbe(cycle_cpu_s=1.2e-3, idle_slowdown={"vgg16-debug": idle})

    monkeypatch.setattr(probe, "horovod_cpu", fake_horovod_cpu)
    assert cli.main(["calibrate", "--label", "cpu", "--horovod-only"]) == 0
    out = capsys.readouterr().out
    assert "Horovod: 1200 us of compute per cycle with a collective, a step vgg16-debug +60%" in out
    assert seen == [(2, None, ("vgg16-debug",), 1), (2, 1.0, ("vgg16-debug",), 1)]
    stored = json.loads((tmp_path / "cpu.json").read_text())
    loop, shaped = stored["network"]
    assert shaped["horovod"] == {"cycle_cpu_us": 1200.0, "idle_slowdown": {"vgg16-debug": 0.6}}
    assert loop["horovod"]["idle_slowdown"] == {"vgg16-debug": -0.05}, "written as measured"
    assert shaped["latency_engine_us"] == {"vgg16-debug": 650.0}, "the rest is kept"
    assert stored["horovod_date"] and stored["method"] == f"m; {fidelity.HOROVOD_METHOD}"
    _, twin = fidelity.matched_specs("horovod", "vgg16-debug", 1.0, stored)
    c = validate(twin).cluster
    # its idle loop by default on a run without added latency (adopted 2026-12-07)
    assert (c.collective_cpu_us, c.negotiation_cpu_us, c.background_slowdown) == (0.0, 1200.0, 0.6)
    _, twin = fidelity.matched_specs("horovod", "vgg16-debug", 1.0, stored, idle_loop=False)
    assert validate(twin).cluster.background_slowdown == 0.0, "left out when asked"
    _, twin = fidelity.matched_specs("horovod", "vgg16-debug", 1.0, stored, idle_loop=True)
    assert validate(twin).cluster.background_slowdown == 0.6
    _, twin = fidelity.matched_specs("horovod", "vgg16-debug", None, stored, idle_loop=True)
    assert validate(twin).cluster.background_slowdown == 0.0
    _, ddp = fidelity.matched_specs("ddp", "vgg16-debug", 1.0, stored)
    c = validate(ddp).cluster
    assert (c.collective_cpu_us, c.negotiation_cpu_us) == (0.0, None), "DDP's own: not measured"
    _, wfbp = fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, stored)
    c = validate(wfbp).cluster
    assert (c.collective_cpu_us, c.background_slowdown) == (250.0, 0.0), "the lab's engine's"
    # a calibration without it: the Horovod twin as before (nothing charged)
    _, older = fidelity.matched_specs("horovod", "vgg16-debug", 1.0, TESTBED)
    c = validate(older).cluster
    assert (c.collective_cpu_us, c.negotiation_cpu_us) == (0.0, None)
    # a slow-down beyond what the simulator takes: refused, the calibration unchanged
    monkeypatch.setattr(
        probe,
        "horovod_cpu",
        lambda *a, **kw: probe.HorovodProbe(1e-3, {"vgg16-debug": fidelity.SLOWDOWN_MAX + 1}),
    )
    assert cli.main(["calibrate", "--label", "cpu", "--horovod-only"]) == 1
    assert "compute while Horovod runs idle" in capsys.readouterr().err
    assert json.loads((tmp_path / "cpu.json").read_text()) == stored
    # without Horovod here: what to run, nothing written
    monkeypatch.setattr(hvd, "available", lambda: None)
    assert cli.main(["calibrate", "--label", "cpu", "--horovod-only"]) == 1
    assert "make horovod" in capsys.readouterr().err


def test_the_horovod_probe_takes_the_median_of_its_launches(monkeypatch):
    """``probe.horovod_cpu``: one launch of the ranks per round, under Horovod with the
    registry entry's default settings; each value the median over the launches."""
    from runners.real import hvd

    monkeypatch.setattr(hvd, "available", lambda: "0.28.1")
    answers = iter([(3e-4, 0.1), (9e-4, 0.7), (5e-4, 0.4)])
    seen = []

    def fake_launch(job, workers, nominal, work, threads, comm_priority, horovod):
        seen.append((job, horovod))
        cost, idle = next(answers)
        return {"cycle_cpu_s": cost, "idle_slowdown": {"vgg16-debug": idle}}

    monkeypatch.setattr(probe, "_launch", fake_launch)
    m = probe.horovod_cpu(2, 1.0, Path("/nonexistent"), ("vgg16-debug",), rounds=3)
    assert m == probe.HorovodProbe(5e-4, {"vgg16-debug": 0.4})
    job, settings = seen[0]
    assert len(seen) == 3 and job["horovod_cpu"]["models"] == ["vgg16-debug"]
    assert settings == {"HOROVOD_FUSION_THRESHOLD": str(128 << 20), "HOROVOD_CYCLE_TIME": "1"}


def test_each_launch_starts_the_ranks_file_barrier_afresh(tmp_path, monkeypatch):
    """The Horovod probe's ranks meet at ``workloads.measure.file_barrier`` in the job's
    directory (its waiting is tested in test_workloads); ``_launch`` clears an earlier
    launch's arrivals, so that its ranks meet again."""
    from runners.real import launch

    (tmp_path / ".barrier-plain").mkdir()
    (tmp_path / ".barrier-plain" / "123.ready").touch()
    seen = []

    def fake_supervise(commands, work, threads, total, progress):
        seen.append(sorted(f.name for f in work.glob(".barrier-*")))
        (work / "probe.json").write_text("[]")

    monkeypatch.setattr(launch, "_supervise", fake_supervise)
    assert probe._launch({"sizes": []}, 2, None, tmp_path, 1) == []
    assert seen == [[]]


def test_calibrate_keeps_the_rest_when_horovod_s_probe_fails(tmp_path, monkeypatch):
    """Horovod is optional: its probe failing during ``calibrate`` is said, with what to run
    later, and leaves its entry and method out; the other measurements are written."""
    from runners.real import hvd
    from runners.real import testbed as tb

    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    monkeypatch.setattr(hvd, "available", lambda: "0.28.1")
    monkeypatch.setattr(tb, "can_shape", lambda: "not root")  # loopback only
    monkeypatch.setattr(fidelity, "_measure_models", lambda *a: ["p.json"])
    point = {key: value for key, value in TESTBED["network"][0].items() if key != "nominal_gbps"}
    ring = [(4096, 1e-3), (1 << 20, 2e-3)]
    monkeypatch.setattr(fidelity, "_probe_network", lambda *a: (ring, 1e-4, 1e9, False))
    monkeypatch.setattr(fidelity, "_probe_split", lambda *a: ([], 1.0, 0.5))
    monkeypatch.setattr(fidelity, "_split_entry", lambda *a: {})
    monkeypatch.setattr(
        fidelity,
        "_probe_overlap",
        lambda *a: {k: v for k, v in point.items() if isinstance(v, dict)},
    )
    monkeypatch.setattr(fidelity, "_probe_ps", lambda *a, **k: {})

    def broken(*args):
        raise RuntimeError("Horovod's ranks failed: Segmentation fault")

    said = []
    monkeypatch.setattr(fidelity, "_probe_horovod", broken)
    fidelity.calibrate("cpu", ("vgg16-debug",), (), progress=said.append, comm_priority="normal")
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert "horovod" not in stored["network"][0]
    assert fidelity.HOROVOD_METHOD not in stored["method"]
    assert any("Segmentation fault" in m and "--horovod-only" in m for m in said)
    # a slow-down beyond what the simulator takes (a busy machine): the entry left out too
    beyond = {"cycle_cpu_us": 800.0, "idle_slowdown": {"vgg16-debug": fidelity.SLOWDOWN_MAX + 1}}
    monkeypatch.setattr(fidelity, "_probe_horovod", lambda *a: beyond)
    said.clear()
    fidelity.calibrate("cpu", ("vgg16-debug",), (), progress=said.append, comm_priority="normal")
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert "horovod" not in stored["network"][0]
    assert any("Horovod runs idle" in m and "entry left out" in m for m in said)
    own = {"cycle_cpu_us": 800.0, "idle_slowdown": {"vgg16-debug": 0.3}}
    monkeypatch.setattr(fidelity, "_probe_horovod", lambda *a: own)
    fidelity.calibrate("cpu", ("vgg16-debug",), (), progress=said.append, comm_priority="normal")
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert stored["network"][0]["horovod"] == own
    assert fidelity.HOROVOD_METHOD in stored["method"]


def test_calibrate_takes_several_only_flags_one_after_the_other(tmp_path, monkeypatch, capsys):
    """Several ``--*-only`` flags: each measured in turn (the compute first, whatever the
    order on the command line), each written as it completes; a failure names the step and
    what was written before it; the flags of one step refused without it."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    ran = []

    def step(name, fail=False):
        def measure(label, progress, **options):
            ran.append((name, label))
            if fail:
                raise RuntimeError("the probe's ranks failed")
            return {"label": label, "network": [], "done": [n for n, _ in ran]}

        return measure

    for name in ("compute", "overlap", "horovod", "split"):
        monkeypatch.setattr(fidelity, f"calibrate_{name}", step(name))
    argv = ["calibrate", "--label", "cpu", "--horovod-only", "--overlap-only", "--compute-only"]
    assert cli.main([*argv, "--json"]) == 0
    assert ran == [("compute", "cpu"), ("overlap", "cpu"), ("horovod", "cpu")]
    out, err = capsys.readouterr()
    assert json.loads(out)["done"] == ["compute", "overlap", "horovod"]
    assert "--overlap-only (2 of 3)" in err
    ran.clear()
    monkeypatch.setattr(fidelity, "calibrate_horovod", step("horovod", fail=True))
    assert cli.main(argv) == 1
    assert ran == [("compute", "cpu"), ("overlap", "cpu"), ("horovod", "cpu")]
    err = capsys.readouterr().err
    assert "calibration failed at --horovod-only: the probe's ranks failed" in err
    assert "--compute-only, --overlap-only written before it" in err
    ran.clear()
    refused = [
        (["--overlap-only", "--horovod-only", "--probe-rounds", "2"], "--probe-rounds"),
        (["--overlap-only", "--ps-cpu-probes", "2"], "--ps-cpu-probes"),
        (["--ps-only", "--latency-only", "--ps-transport", "pipelined"], "--ps-transport"),
        (["--overlap-only", "--added-latency-us", "1000"], "--added-latency-us"),
        (["--horovod-only", "--latency-only"], "--added-latency-us"),
    ]
    for flags, named in refused:
        assert cli.main(["calibrate", "--label", "cpu", *flags]) == 2, flags
        assert f"invalid arguments: {named}" in capsys.readouterr().err
    assert ran == [], "nothing measured where the arguments are refused"


def test_calibrate_probe_rounds_takes_as_many_interference_probes_and_says_so(
    tmp_path, monkeypatch
):
    """``--probe-rounds N``: N interference probes per model and network in both arenas (5
    and 3 by default), the count kept in the calibration and said in its method."""
    from runners.real import hvd
    from runners.real import testbed as tb

    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    monkeypatch.setattr(hvd, "available", lambda: None)
    monkeypatch.setattr(tb, "can_shape", lambda: "not root")  # loopback only
    monkeypatch.setattr(fidelity, "_measure_models", lambda *a: ["p.json"])
    ring = [(4096, 1e-3), (1 << 20, 2e-3)]
    monkeypatch.setattr(fidelity, "_probe_network", lambda *a: (ring, 1e-4, 1e9, False))
    monkeypatch.setattr(fidelity, "_probe_split", lambda *a: ([], 1.0, 0.5))
    monkeypatch.setattr(fidelity, "_split_entry", lambda *a: {})
    rounds = {}
    monkeypatch.setattr(fidelity, "_probe_overlap", lambda *a: rounds.update(overlap=a[6]) or {})
    monkeypatch.setattr(fidelity, "_probe_ps", lambda *a, **k: rounds.update(ps=k["rounds"]) or {})
    fidelity.calibrate("cpu", ("vgg16-debug",), (), comm_priority="normal")
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert rounds == stored["probe_rounds"] == {"overlap": 5, "ps": 3}
    assert fidelity.OVERLAP_METHOD in stored["method"] and fidelity.PS_METHOD in stored["method"]
    fidelity.calibrate("cpu", ("vgg16-debug",), (), comm_priority="normal", probe_rounds=1)
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert rounds == stored["probe_rounds"] == {"overlap": 1, "ps": 1}
    assert "each value the median of 1 probe taken in rounds" in stored["method"]
    assert "the PS transport's values each the median of 1 probe taken" in stored["method"]
    assert "median of 5 probes" not in stored["method"]
    assert "median of 3 probes" not in stored["method"]


def test_an_only_measurement_takes_as_many_probes_as_its_calibration_did(tmp_path, monkeypatch):
    """``--overlap-only`` and ``--ps-only`` keep the calibration's ``probe_rounds`` (which its
    method says), as they keep its priority; calibrations from before the count: 5 and 3."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    doc = {**TESTBED, "method": "m", "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    ps = {"overlap_slowdown": {"vgg16-debug": 0.1}}
    doc["network"] = [{**point, "ps": ps} for point in TESTBED["network"]]
    seen = []

    def overlap(models, workers, nominal, threads, say, prio, rounds):
        seen.append(("overlap", rounds))
        return {}

    def ps_probe(models, workers, nominal, threads, say, prio, *, rounds, cpu_rounds, transport):
        seen.append(("ps", rounds))
        return ps

    monkeypatch.setattr(fidelity, "_probe_overlap", overlap)
    monkeypatch.setattr(fidelity, "_probe_ps", ps_probe)
    for rounds, want in (({"overlap": 1, "ps": 2}, (1, 2)), (None, (5, 3))):
        written = {**doc, "probe_rounds": rounds} if rounds else doc
        (tmp_path / "cpu.json").write_text(json.dumps(written))
        seen.clear()
        assert cli.main(["calibrate", "--label", "cpu", "--overlap-only", "--json"]) == 0
        assert cli.main(["calibrate", "--label", "cpu", "--ps-only", "--json"]) == 0
        assert seen == [("overlap", want[0])] * 2 + [("ps", want[1])] * 2  # two networks


def test_calibrate_ps_only_on_the_pipelined_transport_adds_its_entry_beside_the_blocking_one(
    tmp_path, monkeypatch, capsys
):
    """``--ps-only --ps-transport pipelined``: the PS probes on the pipelined transport, with
    the calibration's probe count, stored as ``ps_pipelined`` beside ``ps`` (left as it was),
    dated, and said in the method once however often it is measured; the flag is refused
    without ``--ps-only``, naming it."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    doc = {**TESTBED, "method": "m", "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}

    def entry(slowdown: float) -> dict:
        busy = {"latency_busy_us": {"vgg16-debug": 900.0}, "server_agg_gbps": 9.0}
        return {"servers": 2, "overlap_slowdown": {"vgg16-debug": slowdown}, **busy}

    blocking = entry(0.1)
    doc["network"] = [{**point, "ps": blocking} for point in TESTBED["network"]]
    doc["probe_rounds"] = {"overlap": 5, "ps": 2}
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    seen = []

    def ps_probe(models, workers, nominal, threads, say, prio, *, rounds, cpu_rounds, transport):
        seen.append((nominal, rounds, transport))
        return entry(0.2 if nominal else 0.3)

    monkeypatch.setattr(fidelity, "_probe_ps", ps_probe)
    argv = ["calibrate", "--label", "cpu", "--ps-only", "--ps-transport", "pipelined"]
    for _ in range(2):
        assert cli.main(argv) == 0
    assert seen == [(None, 2, "pipelined"), (1.0, 2, "pipelined")] * 2
    out = capsys.readouterr().out  # each network: both transports' entries
    assert "PS arena (2 servers): vgg16-debug +10% (900 us)" in out
    assert "PS arena, pipelined transport (2 servers): vgg16-debug +20% (900 us)" in out
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert [p["ps"] for p in stored["network"]] == [blocking, blocking]
    assert [p["ps_pipelined"] for p in stored["network"]] == [entry(0.3), entry(0.2)]
    assert stored["method"].count(fidelity.PS_PIPELINED_MARKER) == 1
    assert "the median of 2 probes taken in rounds" in stored["method"]
    assert stored["ps_pipelined_date"] == fidelity._today() and "ps_date" not in stored
    capsys.readouterr()
    for extra in ([], ["--overlap-only"]):
        assert cli.main(["calibrate", *extra, "--ps-transport", "pipelined"]) == 2
        assert "--ps-transport: with --ps-only" in capsys.readouterr().err
    # a slow-down beyond the simulator's bound: refused, the calibration unchanged
    monkeypatch.setattr(fidelity, "_probe_ps", lambda *a, **k: entry(101.0))
    assert cli.main(argv) == 1
    assert json.loads((tmp_path / "cpu.json").read_text()) == stored


def test_calibrate_refuses_probe_rounds_out_of_range_or_with_an_only_flag(capsys):
    for n in ("0", str(fidelity.PROBE_ROUNDS_MAX + 1)):
        assert cli.main(["calibrate", "--probe-rounds", n]) == 2
        err = capsys.readouterr().err
        assert f"--probe-rounds: must be between 1 and {fidelity.PROBE_ROUNDS_MAX}" in err
    assert cli.main(["calibrate", "--overlap-only", "--probe-rounds", "2"]) == 2
    assert "--probe-rounds: with a whole calibration or --latency-only, not with --overlap" in (
        capsys.readouterr().err
    )


def test_calibrate_refuses_ps_cpu_probes_out_of_range_or_without_the_ps_arena(capsys):
    for n in ("0", str(fidelity.PS_CPU_ROUNDS_MAX + 1)):
        assert cli.main(["calibrate", "--ps-only", "--ps-cpu-probes", n]) == 2
        err = capsys.readouterr().err
        assert f"--ps-cpu-probes: must be between 1 and {fidelity.PS_CPU_ROUNDS_MAX}" in err
    assert cli.main(["calibrate", "--compute-only", "--ps-cpu-probes", "3"]) == 2
    assert "not with --compute-only" in capsys.readouterr().err


def test_calibrate_compute_only_measures_the_profiles_again_and_keeps_the_network(
    tmp_path, monkeypatch, capsys
):
    """``calibrate --compute-only`` (what the compute check asks for): each of the
    calibration's models measured again in its layout, the network entries kept, the date
    recorded; an unknown calibration is exit 2 with the command to run."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    doc = {**TESTBED, "method": "m", "workers": 3, "threads": 2}
    doc["profiles"] = {"vgg16-debug": "vgg16-debug@cpu", "resnet50-debug": "resnet50-debug@cpu"}
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    seen = []
    written = tmp_path / "profile.json"

    def fake_measure(model, label, workers, threads, repeats):
        seen.append((model, label, workers, threads, repeats))
        return written

    monkeypatch.setattr(fidelity, "_measure_concurrently", fake_measure)
    argv = ["calibrate", "--label", "cpu", "--compute-only", "--repeats", "7", "--json"]
    assert cli.main(argv) == 0
    assert seen == [("vgg16-debug", "cpu", 3, 2, 7), ("resnet50-debug", "cpu", 3, 2, 7)]
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert stored.pop("compute_date") == datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    assert stored == json.loads(json.dumps(doc)), "the network measurements are kept"
    assert not list(tmp_path.glob("*.tmp"))
    capsys.readouterr()
    assert cli.main(["calibrate", "--label", "nowhere", "--compute-only"]) == 2
    assert "python -m runners calibrate --label nowhere" in capsys.readouterr().err


def test_split_costs_are_each_collective_over_the_all_reduce():
    rows = [
        (1 << 18, 2e-3, 2.2e-3, 0.9e-3),
        (1 << 20, 8e-3, 8e-3, 4e-3),
        (1 << 22, 32e-3, 31e-3, 18e-3),
    ]
    rs, ag = probe.split_costs(rows)
    assert rs == pytest.approx(1.0) and ag == pytest.approx(0.5)


def test_calibrate_split_only_adds_the_costs_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    # the calibration's communication-thread priority: its added measurements take it too
    (tmp_path / "cpu.json").write_text(
        json.dumps({**TESTBED, "method": "m", "comm_priority": "realtime"})
    )
    seen = []

    def fake_split(workers, nominal, work, threads, repeats, comm_priority):
        assert comm_priority == "realtime"
        seen.append(nominal)
        return [(1 << 20, 8e-3, 8e-3 * (1 + (nominal or 0)), 4e-3)]

    monkeypatch.setattr(probe, "split", fake_split)
    doc = fidelity.calibrate_split("cpu")
    assert seen == [None, 1.0]
    stored = json.loads((tmp_path / "cpu.json").read_text())
    assert stored == doc
    loop, shaped = stored["network"]
    assert (loop["reduce_scatter_cost"], shaped["reduce_scatter_cost"]) == (1.0, 2.0)
    assert shaped["all_gather_cost"] == 0.5 and shaped["split"][0]["bytes"] == 1 << 20
    assert shaped["latency_busy_us"] == TESTBED["network"][1]["latency_busy_us"], "kept"
    assert "split collectives" in stored["method"]
    assert not list(tmp_path.glob("*.tmp"))


def test_an_impossible_split_cost_is_measured_again_then_refused(monkeypatch):
    """A reduce-scatter at 4.2 all-reduces (a disturbed probe on a loaded machine; the
    simulator takes at most 4) is measured once more with twice the repeats; twice fails
    with what to do, instead of a calibration fidelity would refuse."""
    calls = []
    answers = [[(1 << 20, 8e-3, 8e-3 * 4.2, 4e-3)], [(1 << 20, 8e-3, 8e-3, 4e-3)]]

    def fake_split(workers, nominal, work, threads, repeats, comm_priority):
        calls.append(repeats)
        return answers[min(len(calls) - 1, len(answers) - 1)]

    monkeypatch.setattr(probe, "split", fake_split)
    _, rs, ag = fidelity._probe_split(2, None, 1, lambda m: None)
    assert (calls, rs, ag) == ([11, 22], 1.0, 0.5)
    calls.clear()
    answers[1] = answers[0]
    with pytest.raises(fidelity.CalibrationError, match="loopback.*quieter machine"):
        fidelity._probe_split(2, None, 1, lambda m: None)
    assert calls == [11, 22]


def test_a_missing_calibration_point_says_what_to_run():
    with pytest.raises(fidelity.CalibrationMissing, match="no 0.25 Gbit/s.*has: loopback, 1"):
        fidelity.matched_specs("wfbp", "vgg16-debug", 0.25, TESTBED)
    with pytest.raises(fidelity.CalibrationMissing, match="did not measure resnet50-debug"):
        fidelity.matched_specs("wfbp", "resnet50-debug", 1.0, TESTBED)


def _row(system, real, sim, gbps=1.0, workload="vgg16-debug"):
    return {
        "system": system,
        "workload": workload,
        "bandwidth_gbps": gbps,
        "real_iteration_s": real,
        "real_runs_s": [real],
        "sim_iteration_s": sim,
        "ape_pct": 100 * abs(sim - real) / real,
    }


def test_the_host_cpu_check_sets_each_twin_s_cpu_work_beside_the_real_runs():
    """A PS row: the real runs' host CPU per iteration (cores used times iteration time, the
    median over runs) beside the twin's ``host_cpu_s``; the report's error is the median and
    range of the signed errors, and its text shows both columns. Rows without a twin's host
    (the all-reduce arena) are left out of it."""
    from types import SimpleNamespace

    def run(t, cores):
        metrics = {"iteration_time_s": t, "iteration_time_median_s": t, "compute_time_s": 0.01,
                   "cpu_cores": cores}  # fmt: skip
        return SimpleNamespace(metrics=metrics, network=SimpleNamespace(kind="shaped"))

    runs = [run(0.040, 1.5), run(0.050, 1.6), run(0.030, 1.9)]  # 60, 80 and 57 ms of CPU
    twin = SimpleNamespace(metrics={"iteration_time_s": 0.04, "compute_time_s": 0.01,
                                    "host_cpu_s": 0.072})  # fmt: skip
    row = fidelity._row("ps-default", "vgg16-debug", 1.0, runs, twin)
    assert row["real_host_cpu_s"] == pytest.approx(0.060)
    assert row["sim_host_cpu_s"] == 0.072
    plain = SimpleNamespace(metrics={"iteration_time_s": 0.04, "compute_time_s": 0.01})
    other = fidelity._row("wfbp", "vgg16-debug", 1.0, runs, plain)
    assert "sim_host_cpu_s" not in other and other["real_host_cpu_s"] == pytest.approx(0.060)
    rows = [
        {**_row("ps-default", 0.04, 0.04), "real_host_cpu_s": 0.060, "sim_host_cpu_s": 0.072},
        {**_row("p3", 0.04, 0.04), "real_host_cpu_s": 0.100, "sim_host_cpu_s": 0.090},
        {**_row("tictac-tic", 0.04, 0.04), "real_host_cpu_s": 0.050, "sim_host_cpu_s": 0.055},
        {**_row("wfbp", 0.04, 0.04), "real_host_cpu_s": 0.050},  # no twin host: left out
    ]
    out = fidelity.report(rows, "unit")
    assert out["host_cpu_error_pct"] == pytest.approx({"median": 10.0, "min": -10.0, "max": 20.0})
    text = fidelity.format_report(out)
    assert "host CPU real/sim" in text.splitlines()[0]
    assert "60.0 / 72.0" in text.splitlines()[1]
    assert text.splitlines()[4].rstrip().endswith("-")  # the all-reduce row has no twin's
    assert "the twin's against the real's: +10.0%, median (-10.0 to +20.0%)" in text
    # that far off, the text says to measure the PS transport again; under the hint's bound not
    assert "calibrate --label unit --ps-only" in text
    near = [{**r, "sim_host_cpu_s": r["real_host_cpu_s"] * 1.04} for r in rows[:3]]
    assert "--ps-only" not in fidelity.format_report(fidelity.report(near, "unit"))
    assert fidelity.report(rows[3:], "unit")["host_cpu_error_pct"] is None
    assert "host CPU" not in fidelity.format_report(fidelity.report(rows[3:], "unit"))


def test_the_busy_cores_check_sets_the_machine_s_beside_the_twin_s():
    """A row: the machine's busy cores over the real runs (the median) and the cores a PS
    twin's host work keeps busy (its host CPU over its iteration); the report has their
    medians and the largest gap, the table both, and a line in the text; rows without both
    (older runs, the all-reduce arena) are left out of it."""
    from types import SimpleNamespace

    def run(t, busy):
        metrics = {"iteration_time_s": t, "iteration_time_median_s": t, "compute_time_s": 0.01,
                   "cpu_cores": busy - 0.05, "machine_busy_cores": busy}  # fmt: skip
        return SimpleNamespace(metrics=metrics, network=SimpleNamespace(kind="shaped"))

    runs = [run(0.045, 1.70), run(0.050, 1.80), run(0.040, 1.75)]
    twin = SimpleNamespace(metrics={"iteration_time_s": 0.04, "compute_time_s": 0.01,
                                    "host_cpu_s": 0.078})  # fmt: skip
    row = fidelity._row("ps-default", "vgg16-debug", 0.25, runs, twin)
    assert row["real_machine_busy_cores"] == pytest.approx(1.75)
    assert row["sim_cpu_cores"] == pytest.approx(1.95)
    plain = SimpleNamespace(metrics={"iteration_time_s": 0.04, "compute_time_s": 0.01})
    other = fidelity._row("wfbp", "vgg16-debug", 1.0, runs, plain)
    assert "sim_cpu_cores" not in other and other["real_machine_busy_cores"] == 1.75
    del runs[0].metrics["machine_busy_cores"]  # a run from before it was measured: none
    assert "real_machine_busy_cores" not in fidelity._row("p3", "vgg16-debug", 1.0, runs, twin)
    rows = [
        {**_row("ps-default", 0.05, 0.04), "real_cpu_cores": 1.7,
         "real_machine_busy_cores": 1.75, "sim_cpu_cores": 1.95},
        {**_row("p3", 0.05, 0.04), "real_cpu_cores": 1.8,
         "real_machine_busy_cores": 1.9, "sim_cpu_cores": 2.0},
        {**_row("tictac-tic", 0.05, 0.04), "real_cpu_cores": 1.8,
         "real_machine_busy_cores": 1.85, "sim_cpu_cores": 1.9},
        {**_row("wfbp", 0.05, 0.04), "real_cpu_cores": 1.8, "real_machine_busy_cores": 1.8},
    ]  # fmt: skip
    out = fidelity.report(rows, "unit")
    assert out["cores_busy"] == pytest.approx({"real": 1.85, "sim": 1.95, "max_gap": 0.2})
    text = fidelity.format_report(out)
    assert "cores used real/sim" in text.splitlines()[0]
    assert "1.70 (1.75) / 1.95 of " in text.splitlines()[1]
    assert "1.80 (1.80) of " in text.splitlines()[4]  # no twin's host: the real's alone
    assert (
        "the real runs kept a median 1.85 of the machine's cores busy, the twins' host "
        "work 1.95 (at most +0.20 more" in " ".join(text.split())
    )
    assert fidelity.report(rows[3:], "unit")["cores_busy"] is None
    assert "kept a median" not in fidelity.format_report(fidelity.report(rows[3:], "unit"))


def test_the_report_names_the_configurations_whose_runs_had_other_work_beside_them():
    """A row keeps the most CPU other processes took beside one of its runs; the text names
    the configurations at or over the flag, or says that none was; rows without it (runs
    from before) are left out, and with none the line is left out too."""
    from types import SimpleNamespace

    def run(other):
        metrics = {"iteration_time_s": 0.03, "iteration_time_median_s": 0.03,
                   "compute_time_s": 0.01, "other_cores": other}  # fmt: skip
        return SimpleNamespace(metrics=metrics, network=SimpleNamespace(kind="shaped"))

    plain = SimpleNamespace(metrics={"iteration_time_s": 0.03, "compute_time_s": 0.01})
    row = fidelity._row("wfbp", "vgg16-debug", 0.25, [run(0.0), run(0.62), run(0.01)], plain)
    assert row["real_other_cores"] == pytest.approx(0.62)
    older = run(0.0)
    del older.metrics["other_cores"]
    assert "real_other_cores" not in fidelity._row("wfbp", "vgg16-debug", 1, [older], plain)
    rows = [
        {**_row("wfbp", 0.05, 0.04, 0.25), "real_other_cores": 0.62},
        {**_row("ddp", 0.05, 0.04, 0.25), "real_other_cores": 0.02},
        {**_row("ddp", 0.05, 0.04), "real_other_cores": 1.31},
        _row("horovod", 0.05, 0.04),
    ]
    text = " ".join(fidelity.format_report(fidelity.report(rows, "unit")).split())
    assert (
        "other processes on this machine took 0.1 cores or more beside the real runs of 2 of "
        "3 configurations (ddp vgg16-debug 1 Gbit/s 1.31, wfbp vgg16-debug 0.25 Gbit/s 0.62;"
    ) in text
    quiet = [{**r, "real_other_cores": 0.02} for r in rows[:2]]
    text = fidelity.format_report(fidelity.report(quiet, "unit"))
    assert "no other work beside the real runs (at most 0.02 cores)" in text
    assert "other work" not in fidelity.format_report(fidelity.report(rows[3:], "unit"))


def test_the_report_averages_errors_and_computes_speedups():
    rows = [
        _row("wfbp", 0.040, 0.036),  # 10 %
        _row("pace", 0.020, 0.021),  # 5 %
        _row("wfbp", 0.100, 0.100, gbps=None),  # 0 %
    ]
    out = fidelity.report(rows, "unit")
    assert out["mape_pct"] == pytest.approx(5.0)
    assert out["per_system_mape_pct"] == pytest.approx({"wfbp": 5.0, "pace": 5.0})
    assert not out["meets_target"]  # under 10 %, but fewer than 12 configurations
    (speedup,) = out["speedups"]
    assert speedup["system"] == "pace" and speedup["baseline"] == "wfbp"
    assert speedup["real"] == pytest.approx(2.0)
    assert speedup["sim"] == pytest.approx(0.036 / 0.021)
    text = fidelity.format_report(out)
    assert "MAPE overall 5.0% over 3 configurations (misses" in text
    assert "cores used" not in text  # runs without the processes' CPU time
    many = fidelity.report([_row("wfbp", 0.04, 0.041)] * 12, "unit")
    assert many["meets_target"]


def _runs(system, runs, sim, gbps=1.0):
    real = statistics.median(runs)
    return {**_row(system, real, sim, gbps), "real_runs_s": list(runs)}


def test_the_mape_s_range_is_a_bootstrap_over_the_runs():
    # one configuration, runs 90/100/110 ms, predicted 100: the MAPE is 0, but another draw
    # of the runs would have scored 0, 9.1 or 11.1 %
    rows = [_runs("wfbp", [0.090, 0.100, 0.110], 0.100)]
    low, high = fidelity.mape_interval(rows)
    assert low == 0.0 and high == pytest.approx(100 * 10 / 90)
    # predicted 130 against the same runs: APE 30 %, resamples 18.2, 30 or 44.4 %
    rows = [_runs("wfbp", [0.090, 0.100, 0.110], 0.130)]
    low, high = fidelity.mape_interval(rows)
    assert (low, high) == pytest.approx((100 * 2 / 11, 100 * 40 / 90))
    assert fidelity.mape_interval(rows) == (low, high)  # the same seed, the same range
    # four configurations: resampled apart, so the range is narrower than each one's
    both = fidelity.mape_interval(rows * 4)
    assert low < both[0] < both[1] < high
    tight = fidelity.mape_interval([_runs("wfbp", [0.0999, 0.100, 0.1001], 0.130)])
    assert tight[1] - tight[0] < 0.5 < high - low  # runs that agree: a narrow one
    assert fidelity.mape_interval([_row("wfbp", 0.1, 0.13)]) is None  # one run: no range
    assert fidelity.mape_interval([]) is None
    with pytest.raises(ValueError, match="ci must be in"):
        fidelity.mape_interval(rows, ci=1.0)


def test_the_target_is_judged_on_the_interval():
    assert fidelity.target_verdict(5.0, (3.0, 8.0), 12) == "met"
    assert fidelity.target_verdict(12.0, (10.0, 14.0), 12) == "missed"
    assert fidelity.target_verdict(9.0, (7.0, 11.0), 28) == "not resolved"
    assert fidelity.target_verdict(12.4, (11.1, 15.6), 28) == "missed"
    assert fidelity.target_verdict(5.0, (3.0, 8.0), 11) == "too few configurations"
    assert fidelity.target_verdict(9.9, None, 12) == "met"  # one run each: the MAPE itself
    assert fidelity.target_verdict(10.0, None, 12) == "missed"
    # in the report: 12 configurations 1.0, 5.0 or 9.4 % off as a run is drawn: met
    rows = [_runs("wfbp", [0.096, 0.100, 0.104], 0.105)] * 12
    out = fidelity.report(rows, "unit")
    low, high = out["mape_ci_pct"]
    assert low < out["mape_pct"] < high < 10.0
    assert out["target_verdict"] == "met" and out["meets_target"]
    assert out["per_system_mape_ci_pct"]["wfbp"] == pytest.approx([low, high])
    text = fidelity.format_report(out)
    assert f"MAPE {'wfbp':18}   5.0% ({low:.1f}-{high:.1f}%)" in text
    assert f"({low:.1f}-{high:.1f}% with other draws of the same runs, 95% bootstrap; meets" in text
    # the MAPE under the target, its range over it: meets_target, but not resolved
    rows = [_runs("wfbp", [0.090, 0.100, 0.110], 0.109)] * 12
    out = fidelity.report(rows, "unit")
    assert out["meets_target"] and out["target_verdict"] == "not resolved"
    assert "the 10% target not resolved by these runs" in fidelity.format_report(out)
    # 12 to 30 % off: missed
    out = fidelity.report([_runs("wfbp", [0.090, 0.100, 0.110], 0.130)] * 12, "unit")
    assert out["target_verdict"] == "missed"
    assert "misses the 10% target: all of it over" in fidelity.format_report(out)
    # predicted at every median, runs 30 % either side: MAPE 0, but other draws score
    # 17 % on average; the range is over the target: not resolved, not missed
    rows = [_runs("wfbp", [0.070, 0.100, 0.130], 0.100)] * 28
    out = fidelity.report(rows, "unit")
    assert out["mape_pct"] == 0.0 and out["mape_ci_pct"][0] > 10.0
    assert out["target_verdict"] == "not resolved" and out["meets_target"]
    # a set mixing one-run and three-run configurations: the one-run rows score as they are
    mixed = [_row("pace", 0.1, 0.11)] * 6 + [_runs("wfbp", [0.09, 0.10, 0.11], 0.10)] * 6
    del mixed[0]["real_runs_s"]  # a row without its runs: its median alone
    low, high = fidelity.mape_interval(mixed)
    assert 5.0 <= low <= high <= (10.0 * 6 + 100 * 10 / 90 * 6) / 12
    out = fidelity.report(mixed, "unit")
    assert out["per_system_mape_ci_pct"]["pace"] is None  # one run each
    assert out["per_system_mape_ci_pct"]["wfbp"] is not None
    # one run each: no interval, the old wording
    out = fidelity.report([_row("wfbp", 0.04, 0.041)] * 12, "unit")
    assert out["mape_ci_pct"] is None and out["per_system_mape_ci_pct"] == {"wfbp": None}
    assert "(meets the 10% target over at least 12;" in fidelity.format_report(out)


def test_the_text_shows_each_step_s_compute_real_beside_simulated():
    rows = [
        {**_row("wfbp", 0.040, 0.036), "real_compute_s": 0.0208, "sim_compute_s": 0.0385},
        _row("pace", 0.020, 0.021),  # a row without it (older reports): a dash
    ]
    text = fidelity.format_report(fidelity.report(rows, "unit"))
    lines = text.splitlines()
    assert "compute real/sim" in lines[0]
    assert lines[1].endswith("20.8 / 38.5") and lines[2].endswith(" -")
    assert "(compute real/sim: each side's compute_time_s per step in ms" in text
    plain = fidelity.format_report(fidelity.report([_row("pace", 0.02, 0.021)], "unit"))
    assert "compute real/sim" not in plain


def test_the_ps_arena_s_systems_get_their_speedup_over_ps_default_and_over_wfbp():
    rows = [
        _row("ps-default", 0.050, 0.040),
        _row("tictac-tac", 0.025, 0.032),
        _row("wfbp", 0.040, 0.036),
    ]
    found = {
        (s["system"], s["baseline"]): (s["real"], s["sim"])
        for s in fidelity.report(rows, "unit")["speedups"]
    }
    assert found[("tictac-tac", "ps-default")] == pytest.approx((2.0, 1.25))
    assert found[("tictac-tac", "wfbp")] == pytest.approx((1.6, 1.125))
    assert found[("wfbp", "ps-default")] == pytest.approx((1.25, 0.04 / 0.036))
    assert ("ps-default", "ps-default") not in found and len(found) == 4  # and ps-default/wfbp
    text = fidelity.format_report(fidelity.report(rows, "unit"))
    assert "tictac-tac         ps-default" in text, text


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["fidelity", "--systems", "wfbp,nope"], "--systems"),
        (["fidelity", "--systems", "oasis"], "--systems"),  # no real mode
        (["fidelity", "--bandwidths", "50"], "--bandwidths"),
        (["fidelity", "--bandwidths", "fast"], "--bandwidths"),
        (["fidelity", "--models", "vgg17"], "--models"),
        (["fidelity", "--iterations", "1"], "--iterations"),
        (["fidelity", "--repeats", "0"], "--repeats"),
        (["fidelity", "--systems", "wfbp", "--ps-transport", "pipelined"], "--ps-transport"),
        (["fidelity", "--label", "no-such-calibration"], "no calibration"),
        (["calibrate", "--workers", "1"], "--workers"),
        (["calibrate", "--label", "a b"], "--label"),
        (["calibrate", "--bandwidths", "loopback"], "--bandwidths"),
    ],
)
def test_the_command_line_refuses_bad_arguments(argv, field, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1


def test_fidelity_json_ends_with_the_report(monkeypatch, capsys):
    rows = [_row("wfbp", 0.04, 0.04 * (1 + i / 100), workload="vgg16-debug") for i in range(3)]

    def fake(label, systems, models, bandwidths, iterations, on_config=None, **options):
        assert options == {
            "latency": "engine", "repeats": 3, "progress": options["progress"],
            "compute_check": True, "resume": False, "check_runs": False, "transport_check": True,
            "journal": fidelity_journal.default_path("unit", ["wfbp"], ["vgg16-debug"], [1.0]),
            "ps_transport": "blocking", "added_latency_us": 0.0, "interference_check": True,
            "rescore": False,
        }  # fmt: skip
        for row in rows:
            on_config(row)
        drift = {"calibrated_step_s": 0.01, "before_step_s": 0.012, "before_pct": 20.0}
        drift["drift_pct"] = 20.0
        return fidelity.report(rows, label, compute_drift={"vgg16-debug": drift})

    monkeypatch.setattr(fidelity, "fidelity", fake)
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: TESTBED)
    argv = ["fidelity", "--label", "unit", "--systems", "wfbp", "--models", "vgg16-debug"]
    assert cli.main([*argv, "--bandwidths", "1", "--json"]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert len(lines) == 4
    last = json.loads(lines[-1])
    assert last["mape_pct"] == pytest.approx(1.0)
    assert len(last["configs"]) == 3
    # the compute check in words on stderr too, where a JSON reader would not look for it
    assert last["calibration_stale"] and "before 12.0 (+20.0%)" in out.err
    assert "python -m runners calibrate --label unit --compute-only" in out.err


def test_fidelity_times_each_model_before_between_and_after_the_real_runs(monkeypatch):
    """The compute check: each model's step timed as the calibration timed it (its layout and
    number of timed steps), before the first real run, between rounds and after the last,
    against the calibration's; the report flags a move of more than ``COMPUTE_DRIFT_PCT`` at
    any check, even where before and after move opposite ways, and says to measure it again;
    and it scores the same runs with twins whose compute is the checks' geometric mean over
    the calibration's (``compute_checked``)."""
    from types import SimpleNamespace

    from runners.real import launch

    monkeypatch.setattr(fidelity, "load_testbed", lambda label: {**TESTBED, "workers": 3})
    monkeypatch.setattr(launch, "preflight", lambda spec: None)
    events = []
    monkeypatch.setattr(fidelity, "calibrated_step", lambda model, label: (0.010, 7))
    # -15 % before, +12 % after (their mean would be -1.5 %), between rounds 14 and 12.5 ms
    now = iter([0.0085, 0.0140, 0.0125, 0.0112])

    def step_now(model, workers, threads, repeats):
        assert (model, workers, threads, repeats) == ("vgg16-debug", 3, 1, 7)
        events.append("check")
        return next(now)

    def fake_run(spec, work):
        events.append("run")
        metrics = {"iteration_time_s": 0.03, "iteration_time_median_s": 0.03}
        metrics["compute_time_s"] = 0.01
        return SimpleNamespace(metrics=metrics, units={}, network=SimpleNamespace(kind="shaped"))

    monkeypatch.setattr(fidelity, "step_now_s", step_now)
    monkeypatch.setattr(launch, "run", fake_run)

    def fake_twin(real_spec, sim_spec):  # 30 ms at the calibration's compute
        t = 0.03 * sim_spec.cluster.compute_scale
        return SimpleNamespace(metrics={"iteration_time_s": t, "compute_time_s": 0.01})

    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    models = ("vgg16-debug",)
    said = []
    result = fidelity.fidelity(
        "cpu", ("wfbp",), models, (1.0,), 5, repeats=3, progress=said.append
    )  # fmt: skip
    assert events == ["check", "run", "check", "run", "check", "run", "check"]
    # said at once, before the real runs: the user may stop and measure the compute again
    assert "compute check: vgg16-debug -15.0% against the calibration" in said
    assert any("--compute-only first" in line for line in said[:4]), said
    (entry,) = result["compute_drift"].values()
    scale = (0.0085 * 0.0140 * 0.0125 * 0.0112) ** 0.25 / 0.010  # 1.13
    entry = dict(entry)  # the report's own is read again below
    assert entry.pop("between_step_s") == pytest.approx([0.0140, 0.0125])
    assert entry.pop("between_pct") == pytest.approx([40.0, 25.0])
    assert entry == pytest.approx({
        "calibrated_step_s": 0.010, "before_step_s": 0.0085, "after_step_s": 0.0112,
        "checked_scale": scale,
        "before_pct": -15.0, "after_pct": 12.0, "drift_pct": 40.0,  # the largest move
    })  # fmt: skip
    assert "compute check between rounds: vgg16-debug +40.0%" in said
    assert result["calibration_stale"]
    assert result["mape_pct"] == 0.0, "the twins keep the calibration's compute"
    (row,) = result["configs"]
    assert row["sim_compute_checked_s"] == pytest.approx(0.03 * scale)
    assert result["mape_with"] == pytest.approx({"compute_checked": 100 * abs(scale - 1)})
    text = fidelity.format_report(result)
    assert (
        "vgg16-debug calibrated 10.0 ms, before 8.5 (-15.0%), between rounds 14.0 (+40.0%), "
        f"12.5 (+25.0%), after 11.2 (+12.0%), x{scale:.2f} over the set (compute_checked's"
    ) in text
    assert "--compute-only" in text
    assert "the report's run_checked" not in text, "no runs checked one by one here"
    checked = f"measured it during the set: compute_checked {100 * abs(scale - 1):.1f}% (wfbp"
    assert checked in text
    calm = {**entry, "before_pct": -9.0, "after_pct": 9.5, "drift_pct": 9.5}  # no between
    calm = fidelity.report(result["configs"], "cpu", compute_drift={"vgg16-debug": calm})
    assert not calm["calibration_stale"] and "--compute-only" not in fidelity.format_report(calm)
    events.clear()
    result = fidelity.fidelity("cpu", ("wfbp",), models, (1.0,), 5, repeats=1, compute_check=False)
    assert events == ["run"] and result["compute_drift"] is None  # not checked, not "calm"
    assert "compute check" not in fidelity.format_report(result)


def test_the_compute_check_keeps_the_runs_when_it_cannot_measure(monkeypatch):
    """A model the calibration has no step times for is named with the command that
    records them; a measurement that fails is reported (each between rounds too), and the
    real runs' results stand; the runs are then not scored with the checked compute, and
    the text says why."""
    monkeypatch.setattr(
        fidelity, "calibrated_step", lambda m, label: None if m == "vgg16-debug" else (0.01, 5)
    )

    def broken(model, workers, threads, repeats):
        raise RuntimeError("measuring resnet50-debug failed: ['Killed']")

    monkeypatch.setattr(fidelity, "step_now_s", broken)
    drift: dict = {}
    models = ("vgg16-debug", "resnet50-debug")
    fidelity.compute_drift(models, "cpu", TESTBED, "before", drift)
    assert drift["vgg16-debug"] == {"missing": "the calibration has no step times for it"}
    assert drift["resnet50-debug"] == {
        "calibrated_step_s": 0.01, "before_error": "measuring resnet50-debug failed: ['Killed']"
    }  # fmt: skip
    out = fidelity.report([_row("wfbp", 0.04, 0.04)], "cpu", compute_drift=drift)
    assert not out["calibration_stale"]
    line = fidelity.drift_line(out)
    assert "vgg16-debug not checked (the calibration has no step times for it)" in line
    assert "before: not timed (measuring resnet50-debug failed" in line and "after: -" in line
    assert "python -m runners calibrate --label cpu --compute-only" in line
    for _ in range(2):
        fidelity.compute_drift(models, "cpu", TESTBED, "between", drift)
    assert (
        drift["resnet50-debug"]["between_errors"]
        == ["measuring resnet50-debug failed: ['Killed']"] * 2
    )
    out = fidelity.report([_row("wfbp", 0.04, 0.04)], "cpu", compute_drift=drift)
    assert "between rounds not timed (measuring resnet50-debug failed" in fidelity.drift_line(out)
    assert out["mape_with"] == {}
    assert (
        "with the compute the check measured: not scored, as vgg16-debug, resnet50-debug could "
        "not be timed"
    ) in fidelity.format_report(out)


def test_the_check_times_the_step_as_the_calibration_does_and_writes_nothing(monkeypatch):
    """``step_now_s``: the measuring processes' timed steps together, their median; the
    calibration's step likewise over ``concurrent_step_s``, with how many each timed."""
    calls = []

    def docs(model, label, workers, threads, repeats):
        calls.append((model, label, workers, threads, repeats))
        return [{"source": {"step_s": [0.010, 0.030, 0.011]}}, {"source": {"step_s": [0.012]}}]

    monkeypatch.setattr(fidelity, "_concurrent_docs", docs)
    assert fidelity.step_now_s("vgg16-debug", 2, 1, 3) == pytest.approx(0.0115)
    assert calls == [("vgg16-debug", "check", 2, 1, 3)]  # written in a temporary folder
    measured = workloads.load_measured("vgg16-debug", "cpu")
    steps = [[0.010, 0.030, 0.011], [0.012, 0.013, 0.009]]
    with_steps = dataclasses.replace(
        measured, source={**measured.source, "concurrent_step_s": steps}
    )
    monkeypatch.setattr(workloads, "load_measured", lambda model, label: with_steps)
    assert fidelity.calibrated_step("vgg16-debug", "x") == (pytest.approx(0.0115), 3)
    monkeypatch.setattr(workloads, "load_measured", lambda model, label: measured)
    assert fidelity.calibrated_step("vgg16-debug", "cpu") is None  # a profile without them


def test_repeated_real_runs_go_in_rounds_and_their_median_is_scored(monkeypatch):
    """``repeats``: every configuration once per round (a slow spell of the machine spreads
    over configurations), the real time the median of a configuration's runs, and the report
    says how far the runs spread and whether the simulator lies within them."""
    from types import SimpleNamespace

    from runners.real import launch

    monkeypatch.setattr(fidelity, "load_testbed", lambda label: TESTBED)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)
    order, times = [], iter([0.030, 0.050, 0.036, 0.044, 0.040, 0.060])

    def fake_run(spec, work):
        order.append(spec.system)
        t = next(times)
        metrics = {"iteration_time_s": t, "iteration_time_median_s": t, "compute_time_s": 0.01}
        metrics["cpu_cores"] = 40 * t  # the processes' cores (ranks and servers)
        metrics["machine_steal_pct"] = 10 * t  # launch.run's: the hypervisor's share
        if spec.system == "wfbp":  # the training threads' scheduling (ddp's: an older run)
            metrics["train_thread_cpu_s"], metrics["train_runq_wait_s"] = t / 2, t / 4
        return SimpleNamespace(metrics=metrics, units={}, network=SimpleNamespace(kind="shaped"))

    def fake_twin(real_spec, sim_spec):
        assert real_spec.system == sim_spec.system and real_spec.mode == "real"
        t = {"wfbp": 0.035, "ddp": 0.070}[sim_spec.system]
        t *= sim_spec.cluster.latency_us / 400.0  # split's (the idle 400 us) gives t itself
        return SimpleNamespace(metrics={"iteration_time_s": t, "compute_time_s": 0.01})

    monkeypatch.setattr(launch, "run", fake_run)
    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    rows = []
    result = fidelity.fidelity(
        "cpu", ("wfbp", "ddp"), ("vgg16-debug",), (1.0,), 5, on_config=rows.append, repeats=3,
        latency="split",
    )  # fmt: skip
    assert order == ["wfbp", "ddp"] * 3  # rounds, not one configuration's runs back to back
    wfbp, ddp = result["configs"]
    assert rows == result["configs"]
    assert wfbp["real_runs_s"] == [0.030, 0.036, 0.040] and wfbp["real_iteration_s"] == 0.036
    assert ddp["real_runs_s"] == [0.050, 0.044, 0.060] and ddp["real_iteration_s"] == 0.050
    assert wfbp["sim_within_runs"] and not ddp["sim_within_runs"]
    assert wfbp["ape_pct"] == pytest.approx(100 * 0.001 / 0.036)
    assert result["repeats"] == 3 and result["sim_within_runs"] == 1
    # the same real runs against every latency model's twins (busy: 900 us, idle: the fit's 120)
    by = result["mape_by_latency"]
    assert by["split"] == pytest.approx(result["mape_pct"])
    busy_wfbp = 100 * abs(0.035 * 900 / 400 - 0.036) / 0.036
    busy_ddp = 100 * abs(0.070 * 900 / 400 - 0.050) / 0.050
    assert by["busy"] == pytest.approx((busy_wfbp + busy_ddp) / 2)
    assert set(by) == {"busy", "idle", "split", "engine"}
    assert by["engine"] > by["split"]  # the engine's idle latency (650 us) is further off
    assert "the other latency models: busy" in fidelity.format_report(result)
    # ranges over medians: 0.010 / 0.036 and 0.016 / 0.050; their median
    assert result["real_spread_pct"] == pytest.approx(100 * (0.010 / 0.036 + 0.016 / 0.050) / 2)
    assert "within their range in 1 of 2" in fidelity.format_report(result)
    # the cores the runs' processes used: the median of a configuration's runs, shown
    assert wfbp["real_cpu_cores"] == pytest.approx(40 * 0.036)
    cores = launch.usable_cpus()
    assert result["machine_cores"] == cores
    assert f"  1.44 of {cores}" in fidelity.format_report(result).splitlines()[1]
    # the hypervisor's share during each run: a median per row
    assert wfbp["real_steal_pct"] == pytest.approx(100 * 0.036 / 10)
    assert ddp["real_steal_pct"] == pytest.approx(100 * 0.050 / 10)
    assert result["steal_max_pct"] == pytest.approx(0.5)
    # the training threads' time on a core and waiting for one: medians, where every run has it
    assert wfbp["real_train_thread_cpu_s"] == pytest.approx(0.018)
    assert wfbp["real_train_runq_wait_s"] == pytest.approx(0.009)
    assert "real_train_runq_wait_s" not in ddp
    assert "waited, runnable, for a core a median 25 % of an iteration" in fidelity.format_report(
        result
    )


HOST_PS_POINT = {  # a PS point with the host's CPU per message
    "servers": 2,
    "overlap_slowdown": {"vgg16-debug": 0.5},
    "latency_busy_us": {"vgg16-debug": 900.0},
    "latency_idle_us": {"vgg16-debug": 400.0},
    "server_agg_gbps": 32.0,
    "server_agg_fixed_us": 100.0,
    "message_cpu_us": 400.0,
    "host_message_cpu_us": 500.0,
    "host_cpu_ns_per_byte": 2.0,
}


def _host_ps_set(monkeypatch, priority: str) -> None:
    """A set on a calibration whose PS point has the host's CPU per message (its threads at
    ``priority``), each model's step 1.2 times the calibration's at every check, each real run
    50 ms an iteration, 10 ms of it computing, 1.7 of the machine's cores busy; the twins are
    the test's own fakes."""
    from types import SimpleNamespace

    from runners.real import launch

    def fake_run(spec, work):
        metrics = {"iteration_time_s": 0.050, "iteration_time_median_s": 0.050,
                   "compute_time_s": 0.010, "machine_busy_cores": 1.7}  # fmt: skip
        return SimpleNamespace(metrics=metrics, units={}, network=SimpleNamespace(kind="shaped"))

    monkeypatch.setattr(launch, "run", fake_run)

    network = [TESTBED["network"][0], {**TESTBED["network"][1], "ps": HOST_PS_POINT}]
    testbed = {**TESTBED, "network": network, "comm_priority": priority,
               "host": {"usable_cpus": 2}}  # fmt: skip
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: testbed)
    monkeypatch.setattr(fidelity, "check_priority", lambda testbed: None)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)
    monkeypatch.setattr(fidelity, "calibrated_step", lambda model, label: (0.010, 5))
    monkeypatch.setattr(fidelity, "step_now_s", lambda *args: 0.012)  # 1.2 x the calibration's


@pytest.mark.parametrize(
    ("priority", "model"), [("realtime", "messages-first"), ("normal", "fair")]
)
def test_the_ps_twins_share_the_host_s_cores_and_are_also_scored_with_the_floor(
    monkeypatch, priority, model
):
    """The PS twins share their host's cores op by op (the messages first where the
    calibration's communication threads ran at realtime priority), the twins' message CPU and
    slow-down left to the sharing. ``mape_with``'s ``floor``: the same real runs against the
    floor's twins (the model before: the work-conserving floor, the calibrated message CPU
    and slow-down); with each run checked, also at each run's speed; their cores busy beside
    the machine's in the text. The all-reduce rows keep their own twin in it."""
    from types import SimpleNamespace

    _host_ps_set(monkeypatch, priority)
    twins = []

    def fake_twin(real_spec, sim_spec):
        c = sim_spec.cluster
        twins.append((sim_spec.system, c.host_cpu_model, c.message_cpu_us, c.overlap_slowdown))
        t = (0.045 if c.host_cpu_model != "floor" else 0.040) * c.compute_scale
        metrics = {"iteration_time_s": t, "compute_time_s": 0.01}
        if c.host_cores:
            metrics["host_cpu_s"] = 0.9 * 2 * t  # 1.8 cores busy
        return SimpleNamespace(metrics=metrics)

    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    printed = []
    result = fidelity.fidelity(
        "cpu", ("ps-default", "wfbp"), ("vgg16-debug",), (1.0,), 5, repeats=1, check_runs=True,
        on_config=lambda row: printed.append(dict(row)),
    )  # fmt: skip
    # in the row printed as its runs finish (the run-checked ones need every run's checks)
    assert printed[0]["sim_iteration_s"] == 0.045  # the report's twin: the shared cores
    assert printed[0]["sim_floor_s"] == 0.040
    assert "sim_floor_run_checked_s" not in printed[0]
    assert ("ps-default", model, 0.0, 0.0) in twins  # the report's own twin
    assert ("ps-default", "floor", 400.0, 0.5) in twins  # the floor's keeps them
    assert not any(system == "wfbp" and m != "floor" for system, m, _, _ in twins)
    ps, wfbp = result["configs"]
    assert ps["sim_floor_s"] == 0.040 and "sim_floor_s" not in wfbp
    assert ps["sim_floor_cpu_cores"] == pytest.approx(1.8)
    assert ps["sim_floor_run_checked_s"] == pytest.approx(0.040 * 1.2)
    # ps-default 20 % off (40 against 50 ms), wfbp scored with its own twin (40 ms: 20 %)
    assert result["mape_with"]["floor"] == pytest.approx(20.0)
    # at each run's speed: 48 ms (4 %) and wfbp's run-checked twin, 48 ms (4 %)
    assert result["mape_with"]["floor_run_checked"] == pytest.approx(4.0)
    text = " ".join(fidelity.format_report(result).split())
    assert "floor 20.0%, run_checked 4.0% (ps-default 20.0%)" in text
    assert "their cores busy a median 1.80 against the machine's 1.70" in text


def test_the_ps_twins_are_also_scored_charging_a_push_s_cpu_as_it_is_handed_over(monkeypatch):
    """``mape_with``'s ``handover``: the same real runs against PS twins that charge a push's
    CPU as the backward hands it over (``cluster.message_cpu_at``), the rest of the twin as
    the floor's (the floor, the message CPU); with each run checked, also at each run's
    speed; the text says how far their compute per step is from the real runs', beside the
    floor's twins' and the report's. The all-reduce rows keep their own twin in it."""
    from types import SimpleNamespace

    _host_ps_set(monkeypatch, "realtime")
    twins = []

    def fake_twin(real_spec, sim_spec):
        c = sim_spec.cluster
        twins.append((sim_spec.system, c.message_cpu_at, c.host_cpu_model, c.message_cpu_us))
        handover = c.message_cpu_at == "handover"
        t = (0.048 if handover else 0.040) * c.compute_scale
        metrics = {"iteration_time_s": t, "compute_time_s": 0.012 if handover else 0.007}
        if c.host_cores:
            metrics["host_cpu_s"] = 1.8 * t
        return SimpleNamespace(metrics=metrics)

    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    printed = []
    result = fidelity.fidelity(
        "cpu", ("ps-default", "wfbp"), ("vgg16-debug",), (1.0,), 5, repeats=1, check_runs=True,
        on_config=lambda row: printed.append(dict(row)),
    )  # fmt: skip
    # in the row printed as its runs finish (the run-checked one needs every run's checks)
    assert printed[0]["sim_handover_s"] == 0.048
    assert "sim_handover_run_checked_s" not in printed[0]
    assert ("ps-default", "handover", "floor", 400.0) in twins
    assert not any(system == "wfbp" and at == "handover" for system, at, _, _ in twins)
    ps, wfbp = result["configs"]
    assert ps["sim_handover_s"] == 0.048 and "sim_handover_s" not in wfbp
    assert ps["sim_handover_compute_s"] == 0.012
    assert ps["sim_handover_run_checked_s"] == pytest.approx(0.048 * 1.2)
    # ps-default 4 % off (48 against 50 ms), wfbp scored with its own twin (40 ms: 20 %)
    assert result["mape_with"]["handover"] == pytest.approx(12.0)
    # at each run's speed: 57.6 ms (15.2 %) and wfbp's run-checked twin, 48 ms (4 %)
    assert result["mape_with"]["handover_run_checked"] == pytest.approx(9.6)
    text = " ".join(fidelity.format_report(result).split())
    assert "handover 12.0%, run_checked 9.6% (ps-default 4.0%)" in text
    # the twins' compute: 12 ms against the real 10 (20 %); the floor's and the report's
    # twins' 7 ms (30 %)
    assert "compute per step 20.0% off the real runs' (30.0% charging it as" in text
    assert "30.0% sharing the cores op by op" in text


def _run_of_40_ms(spec, work):
    """A fake real run (``launch.run``): 40 ms an iteration, 10 ms of it computing."""
    from types import SimpleNamespace

    metrics = {"iteration_time_s": 0.040, "iteration_time_median_s": 0.040}
    metrics["compute_time_s"] = 0.01
    return SimpleNamespace(metrics=metrics, network=SimpleNamespace(kind="shaped"))


def test_the_twins_integrate_the_slow_down():
    """``matched_specs``: an all-reduce twin, the lab's engine's or a framework's own, and a
    PS twin get ``overlap_model: integrated`` (``TWIN_OVERLAP_MODEL``)."""
    assert fidelity.TWIN_OVERLAP_MODEL == "integrated"
    measured = json.loads(json.dumps(TESTBED))
    measured["network"][1]["ps"] = PS_POINT
    for system in ("wfbp", "horovod", "ddp", "dear", "ps-default", "p3"):
        _, sim = fidelity.matched_specs(system, "vgg16-debug", 1.0, measured)
        assert validate(sim).cluster.overlap_model == "integrated", system


def test_the_report_scores_the_same_runs_without_each_modelled_effect(monkeypatch):
    """``mape_without``: where the twins model an effect (here the ranks' step noise, and the
    slow-down integrated over each op's overlap), the same real runs scored with twins
    without it (the slow-down at op start); effects no twin has are left out."""
    from types import SimpleNamespace

    from runners.real import launch

    measured = workloads.load_measured("vgg16-debug", "cpu")
    noisy = dataclasses.replace(measured, source={**measured.source, "step_jitter_cv": 0.05})
    monkeypatch.setattr(workloads, "load_measured", lambda model, label: noisy)
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: TESTBED)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)

    def fake_twin(real_spec, sim_spec):  # 39 ms with the step noise, 36 ms without
        t = 0.036 + (0.003 if sim_spec.cluster.step_jitter_cv else 0.0)
        t += 0.004 if sim_spec.cluster.overlap_model == "start" else 0.0  # 43 ms
        return SimpleNamespace(metrics={"iteration_time_s": t, "compute_time_s": 0.01})

    monkeypatch.setattr(launch, "run", _run_of_40_ms)
    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    result = fidelity.fidelity("cpu", ("wfbp",), ("vgg16-debug",), (1.0,), 5, repeats=1)
    assert result["mape_pct"] == pytest.approx(2.5)
    # the shaper's token bucket, which this fake twin ignores, changes nothing
    assert result["mape_without"] == pytest.approx(
        {"overlap_model": 7.5, "step_jitter_cv": 10.0, "link_burst_bytes": 2.5}
    )
    text = fidelity.format_report(result)
    assert "without one modelled effect: overlap_model (slow-down at op start) 7.5%, " in text
    assert "step_jitter_cv 10.0%" in text


def test_horovod_s_twin_has_its_idle_loop_and_the_report_scores_it_without(monkeypatch):
    """Where the calibration measured Horovod's idle loop, a Horovod twin of a run without
    added latency has it (adopted 2026-12-07) and the same real runs are scored without it
    (``mape_without``'s ``background_slowdown``), not with it again (``mape_with``); a set
    without a ``horovod`` configuration has neither."""
    from types import SimpleNamespace

    from runners.real import launch

    testbed = json.loads(json.dumps(TESTBED))
    testbed["network"][1]["horovod"] = {
        "cycle_cpu_us": 900.0,
        "idle_slowdown": {"vgg16-debug": 0.5},
    }
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: testbed)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)

    def fake_twin(real_spec, sim_spec):  # 38 ms, 41 ms with the idle loop
        t = 0.038 + (0.003 if sim_spec.cluster.background_slowdown else 0.0)
        return SimpleNamespace(metrics={"iteration_time_s": t, "compute_time_s": 0.01})

    monkeypatch.setattr(launch, "run", _run_of_40_ms)
    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    both = ("wfbp", "horovod")
    result = fidelity.fidelity("cpu", both, ("vgg16-debug",), (1.0,), 5, repeats=1)
    assert result["mape_pct"] == pytest.approx((5.0 + 2.5) / 2)
    assert result["mape_without"]["background_slowdown"] == pytest.approx(5.0)
    assert "background_slowdown" not in result["mape_with"]
    wfbp, horovod = result["configs"]
    assert "sim_idle_loop_s" not in wfbp and "sim_idle_loop_s" not in horovod
    assert "the simulator without one modelled effect: " in fidelity.format_report(result)
    assert "background_slowdown 5.0%" in fidelity.format_report(result)
    result = fidelity.fidelity("cpu", ("wfbp",), ("vgg16-debug",), (1.0,), 5, repeats=1)
    assert result["mape_with"] == {} and "background_slowdown" not in result["mape_without"]


def test_a_measuring_process_that_fails_stops_the_others_at_once(tmp_path):
    """One of the calibration's measuring processes dies before the barrier: the others
    (waiting there for it) are stopped and its own error is raised, not a timeout."""
    import subprocess
    import sys
    import time

    logs = [tmp_path / "p0.err", tmp_path / "p1.err"]
    codes = ["import time; time.sleep(60)", "import sys; sys.exit('no such layer: fc9')"]
    procs = []
    for log, code in zip(logs, codes, strict=True):
        with log.open("w") as err:
            procs.append(subprocess.Popen([sys.executable, "-c", code], stderr=err, text=True))
    began = time.monotonic()
    with pytest.raises(
        RuntimeError, match=r"measuring vgg16-debug failed: \['no such layer: fc9'\]"
    ):
        fidelity._wait_all(procs, logs, "vgg16-debug")
    assert time.monotonic() - began < 30
    assert procs[0].poll() is not None, "the waiting process was left running"


def test_the_hypervisor_s_share_of_the_cpu_is_read_from_proc_stat(tmp_path):
    from runners.manifest import cpu_ticks, steal_pct

    stat = tmp_path / "stat"
    #         user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  600 0 100 200 50 0 10 40 5 0\ncpu0 300 0 50 100 25 0 5 20 0 0\n")
    assert cpu_ticks(str(stat)) == (40, 1000)
    later = (40 + 30, 1000 + 300)  # 30 of the next 300 ticks stolen
    assert steal_pct((40, 1000), later) == pytest.approx(10.0)
    assert steal_pct(None, later) is None
    assert steal_pct(later, later) is None  # no time passed
    assert cpu_ticks(str(tmp_path / "missing")) is None
    stat.write_text("intr 1 2 3\n")
    assert cpu_ticks(str(stat)) is None


def test_every_real_run_records_the_hypervisor_s_share(monkeypatch, tmp_path):
    """``launch.run`` (the command line's, the portal's, fidelity's): the steal over the run
    in its metrics with its unit; nothing where ``/proc/stat`` cannot be read."""
    from types import SimpleNamespace

    from runners.real import launch

    ticks = iter([(100, 10_000), (130, 10_600)])  # 30 of the run's 600 ticks stolen
    monkeypatch.setattr(launch, "cpu_ticks", lambda: next(ticks))
    fake = SimpleNamespace(
        metrics={"iteration_time_s": 0.01}, units={"iteration_time_s": "s"}, ranks=[]
    )
    monkeypatch.setattr(launch, "_run", lambda spec, work, progress, interleave=None: fake)
    result = launch.run(None, tmp_path)
    assert result.metrics["machine_steal_pct"] == pytest.approx(5.0)
    assert result.units["machine_steal_pct"] == "%"
    fake.metrics.pop("machine_steal_pct")
    fake.units.pop("machine_steal_pct")
    monkeypatch.setattr(launch, "cpu_ticks", lambda: None)  # not Linux
    result = launch.run(None, tmp_path)
    assert "machine_steal_pct" not in result.metrics and "machine_steal_pct" not in result.units


def test_the_report_says_how_much_cpu_the_hypervisor_took():
    rows = [_row("wfbp", 0.04, 0.04), _row("pace", 0.02, 0.02), _row("dear", 0.03, 0.03)]
    for row, stolen in zip(rows, (2.0, 9.5, 4.0), strict=True):
        row["real_steal_pct"] = stolen
    out = fidelity.report(rows, "unit")
    assert (out["steal_pct"], out["steal_max_pct"]) == (4.0, 9.5)
    assert "hypervisor took 4.0%" in fidelity.format_report(out)
    plain = fidelity.report([_row("wfbp", 0.04, 0.04)], "unit")  # runs without it
    assert plain["steal_pct"] is None and "hypervisor" not in fidelity.format_report(plain)


@pytest.mark.parametrize(
    ("small_us", "big_us", "fixed_us", "ns_per_byte"),
    [
        (508.192, 631.072, 500.0, 2.0),  # through both points
        (600.0, 550.0, 600.0, 0.0),  # falling with size (noise): flat at the small value
        (10.0, 1000.0, 0.0, 990 / (65536 - 4096) * 1e3),  # steep: the fixed part at 0
    ],
)
def test_the_host_cpu_fit_and_its_clamps(small_us, big_us, fixed_us, ns_per_byte):
    fixed, per_byte = probe.host_cpu_fit(small_us * 1e-6, big_us * 1e-6)
    assert fixed * 1e6 == pytest.approx(fixed_us, abs=1e-6)
    if small_us < big_us and fixed_us > 0:
        assert per_byte * 1e9 == pytest.approx(ns_per_byte, rel=1e-9)
        assert (fixed + per_byte * 4096) * 1e6 == pytest.approx(small_us, rel=1e-9)
        assert (fixed + per_byte * 65536) * 1e6 == pytest.approx(big_us, rel=1e-9)
    elif small_us >= big_us:
        assert per_byte == 0.0
    else:  # the line's fixed part would be negative: 0, the slope kept
        assert per_byte * 1e9 == pytest.approx(ns_per_byte, rel=1e-9)


def test_a_ps_twin_without_the_host_measurement_has_no_host():
    """Calibrations from before the host CPU was measured: every process on a machine of its
    own, as before (no floor); with it, the twin shares the calibration's cores."""
    ps = {"servers": 4, "overlap_slowdown": {"vgg16-debug": 0.1},
          "latency_busy_us": {"vgg16-debug": 700.0}, "latency_idle_us": {"vgg16-debug": 600.0},
          "server_agg_gbps": 20.0, "message_cpu_us": 400.0}  # fmt: skip
    doc = {**TESTBED, "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    doc["network"] = [{**p, "ps": ps} for p in TESTBED["network"]]
    _, sim = fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, doc)
    assert validate(sim).cluster.host_cores == 0
    assert "host_cores" not in validate(sim).as_dict()["cluster"]
    doc["network"] = [
        {**p, "ps": {**ps, "host_message_cpu_us": 550.0, "host_cpu_ns_per_byte": 3.0}}
        for p in TESTBED["network"]
    ]
    _, sim = fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, doc)
    assert validate(sim).cluster.host_cores == fidelity.usable_cpus()  # no ``host``: this one
    doc["host"] = {"cpus": 4, "usable_cpus": 3}
    _, sim = fidelity.matched_specs("ps-default", "vgg16-debug", 1.0, doc)
    cluster = validate(sim).cluster
    assert (cluster.host_cores, cluster.host_message_cpu_us, cluster.host_cpu_ns_per_byte) == (
        3,
        550.0,
        3.0,
    )


def test_the_ps_probes_carry_their_transport_to_the_ranks(tmp_path, monkeypatch):
    """The PS probes' job names the transport (``ps_transport``, blocking by default), and a
    rank takes it from the job with its priority (``probe._settings``), which chooses the
    channel its probe uses (``probe._ps_channel``)."""
    jobs = []

    def launch(job, world, bandwidth, work, threads, comm_priority="normal", horovod=None,
               latency_us=0.0):  # fmt: skip
        jobs.append(job)
        return [1.0, 1.5, 2e-3, 1e-4] if "ps_model" in job else [1e-4, 5e-4]

    monkeypatch.setattr(probe, "_launch", launch)
    probe.ps_overlap("vgg16-debug", 2, 1, None, tmp_path, transport="pipelined")
    probe.ps_message_cpu(2, 1, None, tmp_path)
    assert [job["ps_transport"] for job in jobs] == ["pipelined"] * 4 + ["blocking"]
    monkeypatch.setattr(probe, "_PRIORITY", "normal")
    monkeypatch.setattr(probe, "_PS_TRANSPORT", "blocking")
    probe._settings({"comm_priority": "realtime", "ps_transport": "pipelined"})
    assert (probe._PRIORITY, probe._PS_TRANSPORT) == ("realtime", "pipelined")
    probe._settings({})  # a job from before either
    assert (probe._PRIORITY, probe._PS_TRANSPORT) == ("normal", "blocking")
    import threading

    import torch.distributed as dist

    from runners.real import ps

    monkeypatch.setattr(dist, "get_world_size", lambda: 3)
    for transport, kind in (("pipelined", ps.PipelinedChannel), ("blocking", ps.Channel)):
        probe._settings({"ps_transport": transport})
        channel = probe._ps_channel(0, threading.Condition(), lambda *a: None, 1 << 24)
        assert type(channel) is kind and channel.peers == [1, 2]
    probe._settings({"ps_transport": "pipelined"})  # receives no larger than a run's
    assert probe._ps_channel(0, threading.Condition(), lambda *a: None, 1 << 24).inline_numel == (
        ps.INLINE_BYTES // 4
    )


def test_calibrate_latency_only_measures_the_shaped_networks_with_the_latency_added(
    tmp_path, monkeypatch, capsys
):
    """``--latency-only --added-latency-us``: at each shaped network (loopback left as it
    is), per latency, the network probe and the overlap probes (the calibration's count) with
    that latency added, kept as the network's ``added_latency`` entry beside its own values
    (unchanged), dated, said in the method once; twins of runs with that latency take them.
    A slow-down beyond the simulator's bound: refused, the calibration unchanged."""
    from runners.real import testbed as tb

    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    monkeypatch.setattr(tb, "can_shape", lambda: None)
    doc = {**TESTBED, "method": "m", "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    doc["probe_rounds"] = {"overlap": 3, "ps": 2}
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    seen = []
    ring = [(4096, 0.004), (1 << 20, 0.02), (1 << 22, 0.07)]

    def network(workers, nominal, threads, say, prio, latency_us):
        seen.append(("network", nominal, latency_us))
        return ring, 2.1e-3, 1e8, False

    def overlap(models, workers, nominal, threads, say, prio, rounds, latency_us, slow=0.5):
        seen.append(("overlap", nominal, rounds, latency_us))
        values = {"overlap_slowdown": slow, "latency_busy_us": latency_us + 900.0}
        values |= {"latency_engine_us": latency_us + 700.0, "comm_slowdown": 0.1}
        return {k: {"vgg16-debug": v} for k, v in values.items()}

    monkeypatch.setattr(fidelity, "_probe_network", network)
    monkeypatch.setattr(fidelity, "_probe_overlap", overlap)
    argv = ["calibrate", "--label", "cpu", "--latency-only", "--added-latency-us", "2000,5000"]
    assert cli.main([*argv, "--probe-rounds", "1"]) == 0  # its own count, kept in the entry
    assert seen[1] == ("overlap", 1.0, 1, 2000.0)
    assert json.loads((tmp_path / "cpu.json").read_text())["network"][1]["added_latency"][
        "2000"]["probe_rounds"] == 1  # fmt: skip
    seen.clear()
    for _ in range(2):
        assert cli.main(argv) == 0
    assert seen == [("network", 1.0, 2000.0), ("overlap", 1.0, 3, 2000.0),
                    ("network", 1.0, 5000.0), ("overlap", 1.0, 3, 5000.0)] * 2  # fmt: skip
    out = capsys.readouterr().out
    assert "with 2000 us a way added: bandwidth 0.800 Gbit/s, latency 2100 us, latency while " \
        "computing vgg16-debug 2900 us  with 5000 us a way added" in out  # fmt: skip
    stored = json.loads((tmp_path / "cpu.json").read_text())
    loopback, shaped = stored["network"]
    assert loopback == TESTBED["network"][0]  # no links to add latency on
    assert {k: v for k, v in shaped.items() if k != "added_latency"} == TESTBED["network"][1]
    entry = shaped["added_latency"]["2000"]
    assert entry["latency_added_us"] == 2000.0 and entry["date"] == fidelity._today()
    assert entry["bandwidth_gbps"] == pytest.approx(0.8) and entry["latency_us"] == 2100.0
    assert entry["latency_engine_us"] == {"vgg16-debug": 2700.0}
    assert set(shaped["added_latency"]) == {"2000", "5000"}
    assert stored["method"].count(fidelity.LATENCY_MARKER) == 1
    assert stored["added_latency_date"] == fidelity._today()
    # the twin of a run with 5 ms added: the values measured with it; its real run has it
    matched = functools.partial(
        fidelity.matched_specs, "wfbp", "vgg16-debug", 1.0, stored, engine_dispatch="thread"
    )
    real, sim = matched(added_latency_us=5000.0)
    assert real["cluster"]["latency_us"] == 5000.0
    assert sim["cluster"]["latency_us"] == 5700.0 and sim["cluster"]["bandwidth_gbps"] == 0.8
    assert sim["cluster"]["busy_latency_us"] == 5900.0
    own_real, own = matched()  # without: the network's own values, no latency in the run
    assert own["cluster"]["latency_us"] == 650.0 and "latency_us" not in own_real["cluster"]
    with pytest.raises(fidelity.CalibrationMissing, match="--added-latency-us 1000`"):
        fidelity.matched_specs("wfbp", "vgg16-debug", 1.0, stored, added_latency_us=1000.0)
    with pytest.raises(fidelity.CalibrationMissing, match="shaped network only"):
        fidelity.matched_specs("wfbp", "vgg16-debug", None, stored, added_latency_us=2000.0)
    # a slow-down beyond the simulator's bound: refused, the calibration unchanged
    monkeypatch.setattr(fidelity, "_probe_overlap", functools.partial(overlap, slow=101.0))
    assert cli.main(argv) == 1
    assert "2000 us added" in capsys.readouterr().err
    assert json.loads((tmp_path / "cpu.json").read_text()) == stored


def test_calibrate_latency_only_with_a_ps_transport_measures_the_ps_arena_with_it(
    tmp_path, monkeypatch, capsys
):
    """``--latency-only --ps-transport T``: at each shaped network, the PS arena's transport
    probes on T with the latency added (the calibration's PS probe count, the network's PS
    server count), kept as the latency entry's ``ps`` beside its all-reduce part (each part
    kept when the other is measured again), dated, said in the method once; the message's
    CPU is not probed again, so twins take the network's own (``network_point``). Refused
    where a shaped network has no PS entry on T, and for a slow-down beyond the bound (the
    calibration unchanged either way)."""
    from runners.real import testbed as tb

    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    monkeypatch.setattr(tb, "can_shape", lambda: None)
    doc = {**TESTBED, "method": "m", "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    doc["probe_rounds"] = {"overlap": 3, "ps": 2}
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    argv = ["calibrate", "--label", "cpu", "--latency-only", "--added-latency-us", "2000"]
    assert cli.main([*argv, "--ps-transport", "blocking"]) == 1  # no PS entry to take CPU from
    assert "--label cpu --ps-only` first" in capsys.readouterr().err
    assert json.loads((tmp_path / "cpu.json").read_text()) == doc
    own_ps = {
        "servers": 4, "overlap_slowdown": {"vgg16-debug": 0.1},
        "latency_busy_us": {"vgg16-debug": 500.0}, "latency_idle_us": {"vgg16-debug": 400.0},
        "server_agg_gbps": 20.0, "message_cpu_us": 300.0, "host_message_cpu_us": 350.0,
        "host_cpu_ns_per_byte": 2.5,
    }  # fmt: skip
    doc["network"] = [doc["network"][0], {**doc["network"][1], "ps": own_ps}]
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    seen = []

    def ps_transport(models, workers, nominal, threads, say, prio, servers, rounds, transport,
                     latency_us, slow=0.3):  # fmt: skip
        seen.append((nominal, servers, rounds, transport, latency_us))
        return {
            "servers": servers, "overlap_slowdown": {"vgg16-debug": slow},
            "latency_busy_us": {"vgg16-debug": latency_us + 600.0},
            "latency_idle_us": {"vgg16-debug": latency_us + 450.0},
            "server_agg_gbps": 18.0, "server_agg_fixed_us": 50.0,
        }  # fmt: skip

    def network(workers, nominal, threads, say, prio, latency_us):
        return [(4096, 0.004), (1 << 20, 0.02), (1 << 22, 0.07)], 2.1e-3, 1e8, False

    def overlap(models, workers, nominal, threads, say, prio, rounds, latency_us):
        values = {"overlap_slowdown": 0.5, "latency_busy_us": latency_us + 900.0}
        return {k: {"vgg16-debug": v} for k, v in values.items()}

    monkeypatch.setattr(fidelity, "_probe_ps_transport", ps_transport)
    monkeypatch.setattr(fidelity, "_probe_network", network)
    monkeypatch.setattr(fidelity, "_probe_overlap", overlap)
    assert cli.main(argv) == 0  # the all-reduce arena's part first
    for _ in range(2):
        assert cli.main([*argv, "--ps-transport", "blocking"]) == 0
    assert seen == [(1.0, 4, 2, "blocking", 2000.0)] * 2  # the shaped network alone
    out = capsys.readouterr().out
    assert (
        "with 2000 us a way added: bandwidth 0.800 Gbit/s, latency 2100 us, latency while "
        "computing vgg16-debug 2900 us  PS arena (4 servers): vgg16-debug +30% (2600 us)" in out
    )
    stored = json.loads((tmp_path / "cpu.json").read_text())
    shaped = stored["network"][1]
    assert {k: v for k, v in shaped.items() if k != "added_latency"} == doc["network"][1]
    entry = shaped["added_latency"]["2000"]
    assert entry["bandwidth_gbps"] == pytest.approx(0.8)  # the all-reduce part kept
    assert entry["ps"]["probe_rounds"] == 2 and entry["ps"]["date"] == fidelity._today()
    assert stored["method"].count(fidelity.LATENCY_PS_MARKER) == 1
    assert stored["method"].count(fidelity.LATENCY_MARKER) == 1
    assert cli.main(argv) == 0  # the all-reduce part again: the PS part kept
    again = json.loads((tmp_path / "cpu.json").read_text())["network"][1]["added_latency"]
    assert again["2000"]["ps"] == entry["ps"]
    # the PS twin's: the transport's with the latency, the message's CPU the network's own
    ps = fidelity.network_point(stored, 1.0, 2000.0, "blocking")["ps"]
    assert ps["latency_idle_us"] == {"vgg16-debug": 2450.0}
    assert ps["server_agg_fixed_us"] == 50.0 and "probe_rounds" not in ps
    assert (ps["message_cpu_us"], ps["host_message_cpu_us"]) == (300.0, 350.0)
    assert fidelity.network_point(stored, 1.0, 2000.0)["ps"] == own_ps  # an all-reduce twin's
    # a slow-down beyond the simulator's bound: refused, the calibration unchanged
    before = (tmp_path / "cpu.json").read_text()
    monkeypatch.setattr(fidelity, "_probe_ps_transport", functools.partial(ps_transport, slow=101))
    assert cli.main([*argv, "--ps-transport", "blocking"]) == 1
    assert "2000 us added" in capsys.readouterr().err
    assert (tmp_path / "cpu.json").read_text() == before
    # pipelined: the network has no PS entry on it
    assert cli.main([*argv, "--ps-transport", "pipelined"]) == 1
    assert "--ps-only --ps-transport pipelined` first" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--latency-only"], "--added-latency-us: --latency-only needs the latencies"),
        (["--added-latency-us", "2000"], "--added-latency-us: with --latency-only"),
        (["--overlap-only", "--added-latency-us", "2000"], "--added-latency-us: with --latency"),
        (["--latency-only", "--added-latency-us", "50"], "50 us is out of range: the testbed adds"),
        (["--latency-only", "--added-latency-us", "200000"], "200000 us is out of range"),
        (["--latency-only", "--added-latency-us", "2ms"], "'2ms' is not a number"),
    ],
)
def test_calibrate_refuses_an_added_latency_it_cannot_measure(argv, words, capsys):
    assert cli.main(["calibrate", "--label", "cpu", *argv]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--bandwidths", "1", "--added-latency-us", "20"], "20 us is out of range"),
        (["--bandwidths", "loopback,1", "--added-latency-us", "2000"], "leave loopback out"),
    ],
)
def test_fidelity_refuses_an_added_latency_its_twins_cannot_have(argv, words, capsys):
    assert cli.main(["fidelity", "--label", "testbed-1128", *argv]) == 2
    err = capsys.readouterr().err
    assert "--added-latency-us" in err and words in err
