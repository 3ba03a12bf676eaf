"""``cluster.round_loop``: Horovod's fusion cycles' negotiation rounds on cycle ticks
(``tick``) or free-running, as its background loop runs them (``free``: ``RunLoopOnce``
sleeps until a cycle time after the last round started, takes what is queued, negotiates,
runs the collectives, loops). A reconstruction (``runners.sim.iteration``'s docstring);
what is tested is that the simulator, the spec and ``fidelity``'s variant do what they say."""

from __future__ import annotations

import copy
import dataclasses

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

CYCLE_S = 0.001  # horovod_cycles'
NETWORK = RingAllReduce(2, 1e9 / 8, 100e-6)


def _rows(free: bool, round_latency_s: float, network: RingAllReduce = NETWORK):
    """``horovod_cycles`` (gradients 4 ms apart) negotiating on a round network of
    ``round_latency_s`` a ring step: every all-reduce (start, end, iteration) in time order,
    the round's time, the result."""
    setup, plan = horovod_cycles(0.004)
    rounds = RingAllReduce(2, 1e9 / 8, round_latency_s)
    result = simulate(setup, network, plan, negotiate=True, round_network=rounds, free_rounds=free)
    rows = sorted((r[4], r[5], r[0]) for r in result.timeline if r[1] == "network")
    return rows, rounds.time_s(16), result


def _ready_times(result) -> list[float]:
    """When each gradient became ready (its backward op's end), in time order."""
    return sorted(r[5] for r in result.timeline if r[1] != "network" and r[2] == "backward")


def test_free_rounds_follow_one_another_from_the_last_busy_cycle():
    """Rounds of 3 ms, cycles of 1 ms, gradients 4 ms apart: each all-reduce starts a round
    after its round, which starts when the loop's last cycle was done (its all-reduce over,
    a cycle time after its round started) or a whole number of round times after that (the
    idle rounds), the first such start at or after its gradient became ready."""
    rows, round_s, result = _rows(True, 1.5e-3)
    assert round_s > 3 * CYCLE_S
    ready = _ready_times(result)
    assert len(rows) == len(ready) == 12  # a cycle a gradient: 4 ms apart, a round 3 ms
    anchor = 0.0
    for (start, end, _), ready_at in zip(rows, ready, strict=True):
        round_start = start - round_s
        waited = round_start - max(anchor, ready_at)
        if ready_at <= anchor:  # queued while the loop was busy: the next round at once
            assert waited == pytest.approx(0.0, abs=1e-9)
        else:  # the first idle-lattice round at or after it
            steps = (round_start - anchor) / round_s
            assert steps == pytest.approx(round(steps), abs=1e-6), (round_start, anchor)
            assert -1e-9 <= waited < round_s
        anchor = max(end, round_start + CYCLE_S)
    assert result.metrics["negotiations_per_iteration"] == 3


def test_a_gradient_ready_during_a_round_waits_for_the_next():
    """The first gradient of an iteration becomes ready at 7 ms, during the idle round that
    started at 6 ms (3 ms rounds from 0): its round starts at 9 ms, where the ticks start
    one at 7 ms."""
    free, round_s, result = _rows(True, 1.5e-3)
    tick, _, _ = _rows(False, 1.5e-3)
    first_ready = _ready_times(result)[0]
    assert first_ready == pytest.approx(0.007)
    assert tick[0][0] - round_s == pytest.approx(0.007, abs=1e-9)  # the 7 ms tick
    assert free[0][0] - round_s == pytest.approx(3 * round_s, abs=1e-9)  # the 4th round


def test_free_rounds_shorter_than_a_cycle_start_a_cycle_apart():
    """Rounds shorter than a cycle: the idle rounds are a cycle time apart, so a gradient
    waits less than a cycle for its round, as on ticks; the lattice is the loop's own (from
    its last busy cycle: here its all-reduce ends 1.4 ms after its round started), not the
    clock's."""
    slow = RingAllReduce(2, 1e9 / 8, 600e-6)  # an all-reduce of 1.2 ms, longer than a cycle
    rows, round_s, result = _rows(True, 100e-6, slow)
    assert round_s < CYCLE_S
    ready = _ready_times(result)
    anchor = 0.0
    for (start, end, _), ready_at in zip(rows, ready, strict=True):
        round_start = start - round_s
        if ready_at > anchor:
            steps = (round_start - anchor) / CYCLE_S
            assert steps == pytest.approx(round(steps), abs=1e-6)
            assert -1e-9 <= round_start - ready_at < CYCLE_S
        anchor = max(end, round_start + CYCLE_S)
    tick, _, _ = _rows(False, 100e-6, slow)
    off_ticks = [start - round_s for start, _, _ in rows]
    assert any(abs(t / CYCLE_S - round(t / CYCLE_S)) > 1e-3 for t in off_ticks)
    assert all(
        abs((s - round_s) / CYCLE_S - round((s - round_s) / CYCLE_S)) < 1e-6 for s, _, _ in tick
    )


def test_without_negotiation_the_loop_flag_changes_nothing():
    setup, plan = horovod_cycles(0.004)
    plain = simulate(setup, NETWORK, plan)
    free = simulate(setup, NETWORK, plan, free_rounds=True)
    assert plain.timeline == free.timeline


def test_the_spec_field_reaches_the_simulator():
    """Gradients ready every 2.5 ms, rounds of about 4 ms: free-running, the first waits for
    the round in flight, so the step takes longer than on ticks."""
    layers = (LayerTimes("l0", fwd_s=0.0025, bwd_s=0.0025, grad_bytes=4096),)
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3,
          "negotiation": True, "round_latency_us": 2000.0}  # fmt: skip
    _, tick = run_layers("horovod", layers, **kw)
    _, free = run_layers("horovod", layers, **kw, round_loop="free")
    assert free.metrics["iteration_time_s"] > tick.metrics["iteration_time_s"] + 1e-4


@pytest.mark.parametrize(
    ("cluster", "words"),
    [
        ({"negotiation": True, "round_loop": "loose"}, "tick or free"),
        ({"round_loop": "free"}, "needs cluster.negotiation"),
    ],
)
def test_bad_round_loop_names_the_field(cluster, words):
    with pytest.raises(SpecError) as caught:
        validate({"system": "horovod", "workload": "vgg16-debug", "cluster": cluster})
    assert caught.value.field == "cluster.round_loop" and words in caught.value.message


def test_round_loop_is_left_out_at_its_default_and_refused_in_the_ps_arena():
    plain = validate({"system": "horovod", "workload": "vgg16-debug"})
    assert "round_loop" not in plain.as_dict()["cluster"]
    free = validate({"system": "horovod", "workload": "vgg16-debug",
                     "cluster": {"negotiation": True, "round_loop": "free"}})  # fmt: skip
    assert free.as_dict()["cluster"]["round_loop"] == "free"
    assert validate(free.as_dict()) == free
    with pytest.raises(SpecError) as caught:
        validate({"system": "ps-default", "workload": "vgg16-debug",
                  "cluster": {"round_loop": "free"}})  # fmt: skip
    assert caught.value.field in ("cluster.negotiation", "cluster.round_loop")


def test_fidelity_scores_horovod_s_twin_with_free_rounds_apart():
    """``round_loop_twin``: Horovod's twin (it negotiates) with free rounds, nothing else
    changed; None for the other systems' twins and for one with free rounds already."""
    testbed = copy.deepcopy(TESTBED)
    shaped = testbed["network"][1]
    shaped["added_latency"] = {"2000": _entry(copy.deepcopy(shaped), 2000.0)}

    def twin(system):
        raw = fidelity.matched_specs(system, "vgg16-debug", 1.0, testbed, added_latency_us=2000.0)
        return validate(raw[1])

    horovod = twin("horovod")
    free = fidelity.round_loop_twin(horovod)
    assert free is not None and free.cluster.round_loop == "free"
    assert dataclasses.replace(free.cluster, round_loop="tick") == horovod.cluster
    assert validate(free.as_dict()) == free
    assert fidelity.round_loop_twin(free) is None
    assert fidelity.round_loop_twin(twin("ddp")) is None
