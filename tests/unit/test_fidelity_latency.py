"""``fidelity --added-latency-us``: a set whose real runs have latency added by the emulated
network (netem or the delay line), scored against twins from the calibration's measurements
with that latency (``calibrate --latency-only``). Nothing real runs: the real runs and the
twins are the transport tests' fakes; what is tested is the specs they are given, the
journal and the report."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from runners import fidelity, fidelity_journal, fidelity_pool
from runners.real import launch

from .test_fidelity_transport import ps_set  # noqa: F401 (the fixture)


def _entry(point: dict, latency_us: float) -> dict:
    """The network's values as if measured with ``latency_us`` added: its latencies plus it
    and 300 us, its bandwidth 10 % lower, the probe's all-reduces four trips and 300 us
    (``ddp``'s twin takes them as a lone collective's times)."""
    entry = {"latency_added_us": latency_us, "date": "2026-12-06", "remeasured": False}
    entry["bandwidth_gbps"] = round(point["bandwidth_gbps"] * 0.9, 6)
    entry["latency_us"] = point["latency_us"] + latency_us + 300.0
    for key in ("latency_busy_us", "latency_idle_us", "latency_engine_us",
                "latency_engine_inline_us"):  # fmt: skip
        entry[key] = {m: v + latency_us + 300.0 for m, v in point[key].items()}
    for key in ("overlap_slowdown", "comm_slowdown"):
        entry[key] = dict(point[key])
    entry["allreduce"] = [
        {"bytes": size, "seconds": 4 * latency_us * 1e-6 + 300e-6 + size / 1e8}
        for size in (4096, 1 << 20)
    ]
    return entry


def test_a_set_with_added_latency_runs_it_and_scores_twins_measured_with_it(
    ps_set,  # noqa: F811 (the fixture imported above)
    tmp_path,
    monkeypatch,
):
    """Every real run has the latency (``cluster.latency_us``), every twin the calibration's
    values measured with it; the journal is the set's own (not the set without latency's);
    the report says the latency. A calibration without them refuses the set before any run."""
    testbed = fidelity.load_testbed("cpu")
    with pytest.raises(fidelity.CalibrationMissing, match="--added-latency-us 2000`"):
        fidelity.fidelity("cpu", ("wfbp",), ("vgg16-debug",), (1.0,), 5, added_latency_us=2000.0)
    assert not ps_set.events
    shaped = testbed["network"][1]
    shaped["added_latency"] = {"2000": _entry(copy.deepcopy(shaped), 2000.0)}
    specs, twins = [], []

    def fake_run(spec, work):
        specs.append(spec)
        metrics = {"iteration_time_s": 0.050, "iteration_time_median_s": 0.050,
                   "compute_time_s": 0.010}  # fmt: skip
        return SimpleNamespace(metrics=metrics, units={}, network=SimpleNamespace(kind="shaped"))

    def fake_twin(real_spec, sim_spec):
        twins.append(sim_spec)
        return SimpleNamespace(metrics={"iteration_time_s": 0.045, "compute_time_s": 0.01})

    monkeypatch.setattr(launch, "run", fake_run)
    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    journal = tmp_path / "set.journal.jsonl"
    result = fidelity.fidelity(
        "cpu", ("wfbp", "ddp"), ("vgg16-debug",), (1.0,), 5, added_latency_us=2000.0,
        journal=journal, compute_check=False,
    )  # fmt: skip
    assert {s.system for s in specs} == {"wfbp", "ddp"}
    assert all(s.cluster.latency_us == 2000.0 for s in specs)
    entry = shaped["added_latency"]["2000"]
    # every twin (the default's and the other latency models') from the entry, none from
    # the network's own values
    measured = {entry["latency_us"]} | {
        entry[k]["vgg16-debug"]
        for k in (
            "latency_busy_us",
            "latency_idle_us",
            "latency_engine_us",
            "latency_engine_inline_us",
        )  # fmt: skip
    }
    # ... but those of mape_with's own_plus_added: the network's own values plus 2 ms
    own = {t for t in twins if t.cluster.bandwidth_gbps == shaped["bandwidth_gbps"]}
    mine = [t for t in twins if t not in own]
    assert mine and all(t.cluster.bandwidth_gbps == entry["bandwidth_gbps"] for t in mine)
    assert {t.cluster.latency_us for t in mine} <= measured
    busy = [t.cluster.busy_latency_us for t in mine if t.cluster.busy_latency_us is not None]
    assert busy and set(busy) == {entry["latency_busy_us"]["vgg16-debug"]}
    assert len(own) == 2  # one a configuration
    for t in own:
        assert t.cluster.busy_latency_us == shaped["latency_busy_us"]["vgg16-debug"] + 2000.0
        assert t.cluster.latency_us - 2000.0 in {
            shaped["latency_engine_us"]["vgg16-debug"],
            shaped["latency_engine_inline_us"]["vgg16-debug"],
        }
    assert result["mape_with"]["own_plus_added"] == pytest.approx(10.0)
    assert "own_plus_added 10.0%" in fidelity.format_report(result)
    # ddp's twin has the entry's probe points (a lone collective's times); the same runs
    # are scored with its twin without them (``stream``), ``lone`` is for runs without latency
    points = {tuple(t.cluster.lone_allreduce) for t in mine if t.system == "ddp"}
    assert (
        (4096, entry["allreduce"][0]["seconds"]),
        (1 << 20, entry["allreduce"][1]["seconds"]),
    ) in points
    assert "stream" in result["mape_with"] and "lone" not in result["mape_with"]
    assert "the twins of ddp and horovod with every collective and round at the engine" in (
        fidelity.format_report(result)
    )
    assert result["added_latency_us"] == 2000.0 and result["mape_pct"] == pytest.approx(10.0)
    assert "added latency: 2000 us a way in every real run" in fidelity.format_report(result)
    # pooled with another set of it (``fidelity-pool``), the report says the latency too
    again = tmp_path / "again.journal.jsonl"
    again.write_bytes(journal.read_bytes())
    pooled = fidelity_pool.pool([journal, again])
    assert pooled["added_latency_us"] == 2000.0 and "ps_transport" not in pooled
    text = fidelity_pool.format_pool(pooled)
    assert "added latency: 2000 us a way in every real run" in text
    # its own journal: not the one of the same set without latency, nor of another latency
    path = fidelity_journal.default_path
    args = ("cpu", ["wfbp"], ["vgg16-debug"], [1.0])
    assert len({path(*args), path(*args, "blocking", 2000.0), path(*args, "blocking", 5000.0)}) == 3
    assert path(*args, "blocking", 0.0) == path(*args)


def test_a_ps_set_with_added_latency_scores_twins_from_the_ps_arena_measured_with_it(
    ps_set,  # noqa: F811 (the fixture imported above)
    tmp_path,
    monkeypatch,
):
    """A PS system's real runs get the latency; its twins (the default's, the floor's, the
    other latency models') the PS arena's transport values measured with it (the entry's
    ``ps``), the message's CPU the network's own; ``own_plus_added`` the network's own PS
    latency plus the latency; the transport check still probes the host's CPU (without
    latency: a CPU cost). Without the entry's PS part the set is refused before any run,
    naming the command with the transport."""
    from .test_fidelity_transport import FakeProbes

    testbed = fidelity.load_testbed("cpu")
    shaped = testbed["network"][1]
    shaped["added_latency"] = {"2000": _entry(copy.deepcopy(shaped), 2000.0)}
    with pytest.raises(fidelity.CalibrationMissing, match="2000 --ps-transport blocking`"):
        fidelity.fidelity("cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5,
                          added_latency_us=2000.0)  # fmt: skip
    assert not ps_set.events
    own = shaped["ps"]
    with_it = {k: own[k] for k in ("servers", "server_agg_gbps", "server_agg_fixed_us")}
    with_it["overlap_slowdown"] = {"vgg16-debug": 0.25}
    with_it["latency_busy_us"] = {"vgg16-debug": 4900.0}
    with_it["latency_idle_us"] = {"vgg16-debug": 4400.0}
    shaped["added_latency"]["2000"]["ps"] = {**with_it, "probe_rounds": 3, "date": "2026-12-06"}
    ps_set.use(FakeProbes([500] * 9, [640] * 9))
    twins, reals = [], []
    fake_twin = fidelity._twin

    def seen(real_spec, sim_spec):
        reals.append(real_spec)
        twins.append(sim_spec)
        return fake_twin(real_spec, sim_spec)

    monkeypatch.setattr(fidelity, "_twin", seen)
    journal = tmp_path / "ps.journal.jsonl"
    result = fidelity.fidelity(
        "cpu", ("ps-default",), ("vgg16-debug",), (1.0,), 5, added_latency_us=2000.0,
        compute_check=False, journal=journal,
    )  # fmt: skip
    assert "probe" in ps_set.events and "run ps-default" in ps_set.events
    assert {r.cluster.latency_us for r in reals} == {2000.0}
    latencies = {t.cluster.latency_us for t in twins}
    assert latencies == {4400.0, 4900.0, own["latency_idle_us"]["vgg16-debug"] + 2000.0}
    own_plus = [t for t in twins if t.cluster.latency_us == 2400.0]
    assert own_plus and all(t.cluster.overlap_slowdown in (0.0, 0.5) for t in own_plus)
    floor = [t for t in twins if t.cluster.host_cpu_model == "floor"]
    assert floor and {t.cluster.overlap_slowdown for t in floor} == {0.25}
    # the message's CPU: the network's own (the report's twins keep the calibration's)
    assert own["host_message_cpu_us"] in {t.cluster.host_message_cpu_us for t in twins}
    assert result["added_latency_us"] == 2000.0 and "own_plus_added" in result["mape_with"]
    # pooled with another set of it (``fidelity-pool``): the report names the transport and
    # the latency, as the set's own does
    again = tmp_path / "again.journal.jsonl"
    again.write_bytes(journal.read_bytes())
    pooled = fidelity_pool.pool([journal, again])
    assert pooled["ps_transport"] == "blocking" and pooled["added_latency_us"] == 2000.0
    assert "added latency: 2000 us a way" in fidelity_pool.format_pool(pooled)
