"""``cluster.round_latency_us``: a negotiation round's latency, the ranks busy or idle, apart
from a collective's; and ``fidelity``'s ``trips`` twin of Horovod with added latency, which
sets it (its all-reduces at two trips a ring step, its rounds at one). A reconstruction
(docstrings of ``runners.spec`` and ``runners.fidelity.trips_twin``); what is tested is that
the simulator and the twin do what they say."""

from __future__ import annotations

import copy

import pytest

from runners import fidelity
from runners.sim.engine import LayerTimes
from runners.sim.iteration import simulate
from runners.sim.network import RingAllReduce
from runners.spec import SpecError, validate
from tests.unit.simruns import run_layers

from .test_fidelity import TESTBED
from .test_fidelity_latency import _entry
from .test_sim import horovod_cycles


def _horovod(round_network=None, busy=None, negotiate=True):
    """``test_sim.horovod_cycles`` with gradients 4 ms apart (a cycle each); the measured
    iteration's all-reduces (start, end), and the result."""
    setup, plan = horovod_cycles(0.004)
    network = RingAllReduce(2, 1e9 / 8, 100e-6)
    result = simulate(setup, network, plan, busy, negotiate=negotiate, round_network=round_network)
    rows = sorted((r[4], r[5]) for r in result.timeline if r[1] == "network" and r[0] == 1)
    return rows, result


def test_a_round_takes_its_own_network_s_time_busy_or_idle():
    """Each cycle's fused all-reduce starts a round after it would without negotiation: the
    round network's 16-byte time where given, on a busy network too (where a round is
    otherwise the busy one's), the collectives themselves unchanged."""
    rounds = RingAllReduce(2, 1e9 / 8, 300e-6)  # a round of 0.6 ms, within a cycle
    busy = RingAllReduce(2, 1e9 / 8, 200e-6)
    for busy_network in (None, busy):
        free, _ = _horovod(busy=busy_network, negotiate=False)
        timed, result = _horovod(round_network=rounds, busy=busy_network)
        assert len(free) == len(timed) == 3
        for (start, end), (free_start, free_end) in zip(timed, free, strict=True):
            assert start == pytest.approx(free_start + rounds.time_s(16), rel=1e-9)
            assert end - start == pytest.approx(free_end - free_start, rel=1e-9)
        assert result.metrics["negotiations_per_iteration"] == 3
    # without the round network a round during the backward is the busy network's
    free, _ = _horovod(busy=busy, negotiate=False)
    on_busy, _ = _horovod(busy=busy)
    assert on_busy[0][0] == pytest.approx(free[0][0] + busy.time_s(16), rel=1e-9)


def test_the_spec_field_reaches_the_simulator():
    layers = (LayerTimes("l0", fwd_s=0.002, bwd_s=0.002, grad_bytes=4096),)
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3,
          "negotiation": True}  # fmt: skip
    _, plain = run_layers("horovod", layers, **kw)
    _, slow = run_layers("horovod", layers, **kw, round_latency_us=2100.0)
    gained = slow.metrics["iteration_time_s"] - plain.metrics["iteration_time_s"]
    extra = 2 * 2000e-6  # two ring steps of two ranks, 2 ms more each, a round an iteration
    assert abs(gained - extra) <= 1e-3, gained


@pytest.mark.parametrize(
    ("cluster", "words"),
    [
        ({"negotiation": True, "round_latency_us": -1}, "a number in [0, 1000000]"),
        ({"round_latency_us": 2000.0}, "needs cluster.negotiation"),
    ],
)
def test_bad_round_latency_names_the_field(cluster, words):
    with pytest.raises(SpecError) as caught:
        validate({"system": "horovod", "workload": "vgg16-debug", "cluster": cluster})
    assert caught.value.field == "cluster.round_latency_us" and words in caught.value.message


def test_round_latency_is_left_out_at_its_default_and_refused_in_the_ps_arena():
    plain = validate({"system": "horovod", "workload": "vgg16-debug"})
    assert "round_latency_us" not in plain.as_dict()["cluster"]
    set_ = validate({"system": "horovod", "workload": "vgg16-debug",
                     "cluster": {"negotiation": True, "round_latency_us": 2200.0}})  # fmt: skip
    assert set_.as_dict()["cluster"]["round_latency_us"] == 2200.0
    assert validate(set_.as_dict()) == set_
    with pytest.raises(SpecError) as caught:
        validate({"system": "ps-default", "workload": "vgg16-debug",
                  "cluster": {"negotiation": True, "round_latency_us": 2200.0}})  # fmt: skip
    assert caught.value.field in ("cluster.negotiation", "cluster.round_latency_us")


def test_horovod_s_twin_with_added_latency_pays_two_trips_a_step_and_one_a_round():
    """``matched_specs``: Horovod's twin of a run with added latency (latency ``engine``,
    the default) gets the entry's back-to-back all-reduces' latency for its collectives and
    the engine stream's for its rounds, the busy latency as it was; other systems, other
    latency models and runs without added latency keep one latency; ``stream_twin`` gives
    the twin before (the engine stream's for both)."""
    testbed = copy.deepcopy(TESTBED)
    shaped = testbed["network"][1]
    entry = _entry(copy.deepcopy(shaped), 2000.0)
    shaped["added_latency"] = {"2000": entry}
    idle, busy, engine, inline = (
        entry[f"latency_{k}_us"]["vgg16-debug"] for k in ("idle", "busy", "engine", "engine_inline")
    )

    def twin(system, latency_us=2000.0, latency="engine"):
        raw = fidelity.matched_specs(system, "vgg16-debug", 1.0, testbed, latency=latency,
                                     added_latency_us=latency_us)  # fmt: skip
        return validate(raw[1])

    c = twin("horovod").cluster
    assert (c.latency_us, c.round_latency_us, c.busy_latency_us) == (idle, engine, busy)
    assert c.negotiation and c.lone_allreduce == ()
    stream = fidelity.stream_twin(twin("horovod"))
    assert stream is not None
    assert (stream.cluster.latency_us, stream.cluster.round_latency_us) == (engine, None)
    assert stream.cluster.busy_latency_us == busy
    for other in (twin("wfbp"), twin("ddp"), twin("horovod", latency="split")):
        assert other.cluster.round_latency_us is None
    assert twin("wfbp").cluster.latency_us in (engine, inline)  # the engine stream's
    assert twin("horovod", latency="split").cluster.latency_us == idle
    assert twin("horovod", 0.0).cluster.round_latency_us is None  # the network's own
    assert fidelity.stream_twin(twin("horovod", 0.0)) is None
    assert fidelity.stream_twin(twin("wfbp")) is None
