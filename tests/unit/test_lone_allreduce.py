"""``cluster.lone_allreduce``: an all-reduce that starts alone on the channel (nothing else
waiting for it) takes a lone all-reduce's measured time for its size, as the network probe
measured it (a negotiation round keeps the alpha-beta time); ``fidelity`` scores twins of
DDP and Horovod with it (``mape_with``'s ``lone``). A reconstruction (docstring of
``runners.sim.iteration``); what is tested is that the simulator does what it says."""

from __future__ import annotations

import copy

import pytest

from runners import fidelity
from runners.sim.engine import LayerTimes
from runners.sim.network import RingAllReduce, lone_time
from runners.spec import SpecError, validate
from tests.unit.simruns import run_layers

from .test_fidelity import TESTBED
from .test_fidelity_latency import _entry

POINTS = ((4096, 0.009), (262_144, 0.011), (1_048_576, 0.013))


def test_lone_time_interpolates_between_points_and_extends_beyond_them():
    assert lone_time(POINTS, 16) == 0.009  # below the first: the first's trips
    assert lone_time(POINTS, 4096) == 0.009
    assert lone_time(POINTS, (4096 + 262_144) / 2) == pytest.approx(0.010)
    assert lone_time(POINTS, 1_048_576) == pytest.approx(0.013)
    slope = 0.002 / (1_048_576 - 262_144)  # the last two points' line beyond the last
    assert lone_time(POINTS, 2_000_000) == pytest.approx(0.013 + slope * (2_000_000 - 1_048_576))
    assert lone_time(((100, 0.5),), 10**6) == 0.5
    falling = ((100, 0.5), (200, 0.4))  # a noisy last point: never below its time beyond it
    assert lone_time(falling, 10**6) == 0.4
    with pytest.raises(ValueError):
        lone_time((), 1)


def _collectives(layers, it=3, **cluster):
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}
    _, result = run_layers("wfbp", layers, **kw, **cluster)
    rows = sorted(
        (r for r in result.timeline if r[1] == "network" and r[0] == it), key=lambda r: r[4]
    )
    return [(r[3], r[5] - r[4]) for r in rows]


def test_a_collective_alone_takes_the_measured_time_one_with_others_waiting_the_formula():
    """Backward ops of 10 ms between collectives of about 1 ms: each starts alone and takes
    the points' time. Backward ops of 0.1 ms: the collectives queue; those with another
    waiting behind them keep the alpha-beta time, the last (nothing behind it) the
    points'."""
    spaced = tuple(
        LayerTimes(f"l{i}", fwd_s=0.002, bwd_s=0.010, grad_bytes=100_000) for i in range(4)
    )
    formula = RingAllReduce.from_gbps(2, 1.0, 100.0).time_s(100_000)
    measured = lone_time(POINTS, 100_000)
    assert measured > 5 * formula
    assert [d for _, d in _collectives(spaced)] == pytest.approx([formula] * 4, rel=1e-9)
    lone = [d for _, d in _collectives(spaced, lone_allreduce=POINTS)]
    assert lone == pytest.approx([measured] * 4, rel=1e-9)

    packed = tuple(
        LayerTimes(f"l{i}", fwd_s=0.002, bwd_s=0.0001, grad_bytes=100_000) for i in range(4)
    )
    queued = [d for _, d in _collectives(packed, lone_allreduce=POINTS)]
    # the first starts alone (the next gradient is not ready yet): measured; then three
    # become ready during it and queue: the first two have one waiting behind them
    assert queued == pytest.approx([measured, formula, formula, measured], rel=1e-9)


def test_a_lone_collective_takes_the_bucket_s_tokens_and_scales_on_the_busy_network():
    """With the token bucket the lone collective's time stays the points' (measured with a
    full bucket) and the bucket gives its tokens up; while computing, the points' time
    times the busy network's alpha-beta time over the idle one's."""
    layers = tuple(
        LayerTimes(f"l{i}", fwd_s=0.002, bwd_s=0.050, grad_bytes=100_000) for i in range(4)
    )
    measured = lone_time(POINTS, 100_000)
    with_bucket = _collectives(layers, lone_allreduce=POINTS, link_burst_bytes=50_000)
    assert [d for _, d in with_bucket] == pytest.approx([measured] * 4, rel=1e-9)
    busy_kw = {"busy_latency_us": 1000.0, "overlap_comm_slowdown": 1.0}
    ratio = RingAllReduce.from_gbps(2, 0.5, 1000.0).time_s(100_000) / RingAllReduce.from_gbps(
        2, 1.0, 100.0
    ).time_s(100_000)
    # the first three start during the backward (50 ms ops: each outlasts its collective of
    # 35 ms), the last after it (the next forward waits for it)
    busy = [d for _, d in _collectives(layers, lone_allreduce=POINTS, **busy_kw)]
    assert busy == pytest.approx([measured * ratio] * 3 + [measured], rel=1e-9)


def test_a_negotiation_round_keeps_the_alpha_beta_time_and_the_fused_collective_is_lone():
    """Horovod's twin negotiates each cycle with tensors to fuse: the round keeps the
    network's 16-byte time (Horovod's back-to-back rounds pay a trip a message, not a lone
    all-reduce's), and the cycle's fused collective, alone on the channel, takes the
    points' time; the iteration gains that collective's difference alone (to within a cycle:
    the cycles tick every millisecond)."""
    layers = (LayerTimes("l0", fwd_s=0.002, bwd_s=0.002, grad_bytes=4096),)
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3,
          "negotiation": True}  # fmt: skip
    _, plain = run_layers("horovod", layers, **kw)
    _, lone = run_layers("horovod", layers, **kw, lone_allreduce=POINTS)
    extra = lone_time(POINTS, 4096) - RingAllReduce.from_gbps(2, 1.0, 100.0).time_s(4096)
    gained = lone.metrics["iteration_time_s"] - plain.metrics["iteration_time_s"]
    assert abs(gained - extra) <= 1e-3
    rows = [r for r in lone.timeline if r[1] == "network" and r[0] == 2]
    assert [r[5] - r[4] for r in rows] == pytest.approx([lone_time(POINTS, 4096)], rel=1e-9)


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ("x", "cluster.lone_allreduce", "[bytes, seconds] pairs"),
        ([[4096]], "cluster.lone_allreduce[0]", "pair"),
        ([[4096, 0.01], [100, 0.02]], "cluster.lone_allreduce[1][0]", "above the previous"),
        ([[4096, 0]], "cluster.lone_allreduce[0][1]", "seconds in (0, 3600]"),
        ([["a", 1]], "cluster.lone_allreduce[0][0]", ""),
    ],
)
def test_bad_lone_points_name_the_field(value, field, words):
    with pytest.raises(SpecError) as caught:
        validate({"system": "ddp", "workload": "vgg16-debug",
                  "cluster": {"lone_allreduce": value}})  # fmt: skip
    assert caught.value.field == field and words in caught.value.message


def test_lone_points_round_trip_are_left_out_at_their_default_and_refused_in_the_ps_arena():
    spec = validate({"system": "ddp", "workload": "vgg16-debug",
                     "cluster": {"lone_allreduce": [list(p) for p in POINTS]}})  # fmt: skip
    assert spec.cluster.lone_allreduce == POINTS
    assert spec.as_dict()["cluster"]["lone_allreduce"] == [list(p) for p in POINTS]
    assert validate(spec.as_dict()) == spec
    plain = validate({"system": "ddp", "workload": "vgg16-debug"})
    assert "lone_allreduce" not in plain.as_dict()["cluster"]  # older run keys unchanged
    with pytest.raises(SpecError, match="all-reduce arena only.*leave it out;"):
        validate({"system": "ps-default", "workload": "vgg16-debug",
                  "cluster": {"lone_allreduce": [[1, 1.0]]}})  # fmt: skip


def test_ddp_s_twin_with_added_latency_takes_the_entry_s_probe_points_and_the_variants():
    """``matched_specs``: the ``ddp`` twin of a run with added latency has the latency
    entry's own probe points (never the network's, measured without the latency), the other
    systems' none; a calibration whose entry has none refuses, naming the command. Without
    added latency ``lone_twin`` (``mape_with``'s ``lone``) gives ddp's twin the network's
    points, and with it ``stream_twin`` takes them away (``stream``)."""
    testbed = copy.deepcopy(TESTBED)
    shaped = testbed["network"][1]
    shaped["allreduce"] = [{"bytes": 4096, "seconds": 0.0004}, {"bytes": 1 << 20, "seconds": 0.01}]
    entry = _entry(copy.deepcopy(shaped), 2000.0)
    del entry["allreduce"]  # the probe's points: none yet
    shaped["added_latency"] = {"2000": entry}

    def twin(system, latency=0.0):
        return validate(fidelity.matched_specs(system, "vgg16-debug", 1.0, testbed,
                                               added_latency_us=latency)[1])  # fmt: skip

    with pytest.raises(fidelity.CalibrationMissing, match="--latency-only --added-latency-us 2000"):
        twin("ddp", 2000.0)
    assert twin("wfbp", 2000.0).cluster.lone_allreduce == ()  # the engine's: no points needed
    entry["allreduce"] = [{"bytes": 4096, "seconds": 0.009}, {"bytes": 1 << 20, "seconds": 0.013}]
    with_latency = twin("ddp", 2000.0)
    assert with_latency.cluster.lone_allreduce == ((4096, 0.009), (1 << 20, 0.013))
    assert twin("horovod", 2000.0).cluster.lone_allreduce == ()
    assert twin("wfbp", 2000.0).cluster.lone_allreduce == ()
    stream = fidelity.stream_twin(with_latency)
    assert stream is not None and stream.cluster.lone_allreduce == ()
    assert fidelity.lone_twin("ddp", with_latency, testbed, 1.0) is None  # it has them
    # without added latency: the default twin has none; the variant the network's own points
    plain = twin("ddp")
    assert plain.cluster.lone_allreduce == () and fidelity.stream_twin(plain) is None
    lone = fidelity.lone_twin("ddp", plain, testbed, 1.0)
    assert lone is not None and lone.cluster.lone_allreduce == ((4096, 0.0004), (1 << 20, 0.01))
    assert lone.cluster.latency_us == plain.cluster.latency_us  # the rest is the twin's
    assert fidelity.lone_twin("wfbp", twin("wfbp"), testbed, 1.0) is None
    assert fidelity.lone_twin("ddp", plain, testbed, None) is None  # loopback: no probe here
    # Horovod's twins: the variant has the points of the twin's network, with added latency
    # the entry's (never the network's own)
    hvd = fidelity.lone_twin("horovod", twin("horovod"), testbed, 1.0)
    assert hvd is not None and hvd.cluster.lone_allreduce == ((4096, 0.0004), (1 << 20, 0.01))
    hvd = fidelity.lone_twin("horovod", twin("horovod", 2000.0), testbed, 1.0, 2000.0)
    assert hvd is not None and hvd.cluster.lone_allreduce == ((4096, 0.009), (1 << 20, 0.013))
    del entry["allreduce"]
    assert fidelity.lone_twin("horovod", twin("horovod", 2000.0), testbed, 1.0, 2000.0) is None
