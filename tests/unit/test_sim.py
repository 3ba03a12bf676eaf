"""runners.sim: the event core, the ring all-reduce cost model and the iteration simulator."""

from collections import Counter

import pytest

import workloads
from runners import registry
from runners.policies.allreduce import CommPlan, CommTask
from runners.sim.core import EventLoop
from runners.sim.engine import ComputeJob, ComputeSetup, LayerTimes, WorkerGroup
from runners.sim.iteration import simulate as iteration_simulate
from runners.sim.network import RingAllReduce
from runners.spec import CommCluster, SpecError, validate
from tests.unit.simruns import raw_spec, run, run_layers

ALLREDUCE_ENTRIES = [e.name for e in registry.entries("allreduce")]
WORKLOADS = ["resnet50", "vgg16"]
# Headroom for float rounding: iteration and busy times are sums of differences of timestamps.
REL = 1e-9


def sim(system, workload, *, iterations=8, **kw):
    """``simruns.run`` with the spec's own compute jitter unless ``kw`` sets it."""
    kw.setdefault("compute_jitter_cv", CommCluster.compute_jitter_cv)
    return run(system, workload, iterations=iterations, **kw)


def rows(result, resource=None, op=None):
    return [
        dict(zip(result.TIMELINE_COLUMNS, row, strict=True))
        for row in result.timeline
        if (resource is None or row[1] == resource) and (op is None or row[2] == op)
    ]


each_entry_and_workload = pytest.mark.parametrize(
    ("system", "workload"), [(s, w) for s in ALLREDUCE_ENTRIES for w in WORKLOADS]
)


# --- event core --------------------------------------------------------------------------


def test_events_run_in_time_order_and_equal_times_in_scheduling_order():
    loop = EventLoop()
    ran = []
    loop.at(1.0, ran.append, "a")
    loop.at(1.0, ran.append, "b")
    loop.at(0.5, ran.append, "c")
    loop.after(1.0, ran.append, "d")
    loop.at(2.0, ran.append, "e")

    loop.run()

    assert ran == ["c", "a", "b", "d", "e"]
    assert loop.now == 2.0
    assert loop.events_processed == 5
    assert loop.pending == 0


def test_an_event_scheduled_now_runs_after_events_already_due_now():
    loop = EventLoop()
    ran = []

    def first():
        ran.append("first")
        loop.after(0.0, ran.append, "scheduled-by-first")

    loop.at(1.0, first)
    loop.at(1.0, ran.append, "second")
    loop.run()

    assert ran == ["first", "second", "scheduled-by-first"]


def test_callbacks_get_their_arguments_and_see_the_current_time():
    loop = EventLoop()
    seen = []
    loop.at(3.5, lambda a, b: seen.append((loop.now, a, b)), 1, "x")

    loop.run()

    assert seen == [(3.5, 1, "x")]


def test_scheduling_in_the_past_raises():
    loop = EventLoop()
    loop.at(2.0, lambda: None)
    loop.run()

    with pytest.raises(ValueError, match="before now"):
        loop.at(1.0, lambda: None)
    with pytest.raises(ValueError):
        loop.after(-0.1, lambda: None)
    assert loop.pending == 0


def test_run_until_stops_and_leaves_later_events_pending():
    loop = EventLoop()
    ran = []
    for t in (1.0, 2.0, 3.0, 4.0):
        loop.at(t, ran.append, t)

    loop.run(until=2.5)

    assert ran == [1.0, 2.0]
    assert loop.now == 2.5
    assert loop.pending == 2
    assert loop.events_processed == 2

    loop.run(until=3.0)  # an event exactly at `until` still runs
    assert ran == [1.0, 2.0, 3.0]
    assert loop.pending == 1

    loop.run()
    assert ran == [1.0, 2.0, 3.0, 4.0]
    assert loop.now == 4.0
    assert loop.pending == 0


# --- ring all-reduce ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "size", "bandwidth", "latency"),
    [
        (2, 1e9, 1e9, 0.0),
        (4, 8e6, 1.25e9, 1e-5),
        (8, 102_228_128, 1.25e9, 1e-5),
        (64, 1, 1e12, 1e-6),
    ],
)
def test_ring_allreduce_matches_the_alpha_beta_formula(workers, size, bandwidth, latency):
    ring = RingAllReduce(workers, bandwidth, latency)
    n = workers
    expected = 2 * (n - 1) * latency + 2 * (n - 1) / n * size / bandwidth

    assert ring.time_s(size) == pytest.approx(expected, rel=1e-12)


def test_ring_allreduce_of_a_gigabyte_between_two_ranks_at_a_gigabyte_per_second_is_a_second():
    assert RingAllReduce(2, 1e9, 0.0).time_s(10**9) == pytest.approx(1.0)


def test_ring_allreduce_takes_no_time_for_one_worker_or_zero_bytes():
    assert RingAllReduce(1, 1e9, 1e-3).time_s(10**9) == 0.0
    assert RingAllReduce(8, 1e9, 1e-3).time_s(0) == 0.0


def test_split_collectives_are_the_ring_s_halves_unless_measured_otherwise():
    ring = RingAllReduce(4, 1e9, 20e-6)
    half = 3 * 20e-6 + 3 / 4 * 10**6 / 1e9
    assert ring.time_s(10**6, "reduce_scatter") == half  # bit for bit, as before the fields
    assert ring.time_s(10**6, "all_gather") == half
    gloo = RingAllReduce(4, 1e9, 20e-6, reduce_scatter_cost=1.0, all_gather_cost=0.6)
    assert gloo.time_s(10**6, "reduce_scatter") == pytest.approx(ring.time_s(10**6))
    assert gloo.time_s(10**6, "all_gather") == pytest.approx(0.6 * ring.time_s(10**6))
    assert gloo.time_s(10**6) == ring.time_s(10**6), "the all-reduce itself is unchanged"


def test_dear_is_slower_when_its_reduce_scatter_costs_a_whole_all_reduce():
    _, base = run("dear", "vgg16", bandwidth_gbps=1.0)
    _, gloo = run("dear", "vgg16", bandwidth_gbps=1.0, reduce_scatter_cost=1.0)
    assert gloo.metrics["iteration_time_s"] > base.metrics["iteration_time_s"]
    _, wfbp = run("wfbp", "vgg16", bandwidth_gbps=1.0)
    _, same = run("wfbp", "vgg16", bandwidth_gbps=1.0, reduce_scatter_cost=1.0)
    assert same.metrics == wfbp.metrics, "systems without split collectives are unaffected"


def test_a_nic_straggler_slows_the_collectives_of_its_window_to_its_link_s_rate():
    """A ring all-reduce runs at its slowest link's rate: half the bandwidth on one worker's
    NIC from iteration 4 doubles the bandwidth term of those iterations' collectives; the
    compute is untouched."""
    from runners.sim.engine import link_factors
    from runners.spec import Straggler

    assert link_factors([Straggler(1, bandwidth_factor=0.5, from_iteration=4)], 6) == (
        1.0, 1.0, 1.0, 1.0, 0.5, 0.5
    )  # fmt: skip
    assert link_factors([Straggler(1, slowdown=2.0)], 6) == ()
    kw = {"iterations": 6, "warmup": 1, "bandwidth_gbps": 1.0, "latency_us": 0.0}
    _, base = run("wfbp", "vgg16", **kw)
    slow = [{"worker": 3, "bandwidth_factor": 0.5, "from_iteration": 4}]
    _, nic = run("wfbp", "vgg16", stragglers=slow, **kw)
    times = [row["iteration_time_s"] for row in nic.series]
    ref = [row["iteration_time_s"] for row in base.series]
    assert times[:3] == pytest.approx(ref[:3], rel=REL)
    assert all(t > 1.5 * r for t, r in zip(times[5:], ref[5:], strict=True))
    assert nic.metrics["compute_time_s"] == pytest.approx(base.metrics["compute_time_s"], rel=REL)
    comm = [row for row in nic.timeline if row[1] == "network" and row[0] == 5]
    ref_comm = {
        row[3]: row[5] - row[4] for row in base.timeline if row[1] == "network" and row[0] == 5
    }
    for _, _, _, layer, start, end, _ in comm:
        assert end - start == pytest.approx(2 * ref_comm[layer], rel=1e-9)


def test_horovod_on_cpu_collectives_starts_a_cycle_only_once_the_last_one_is_done():
    """Horovod's background loop performs CPU collectives itself: tensors that become ready
    while it is busy go into the next cycle's (fewer, larger) fused buffers, and no two of its
    all-reduces are queued at once. GPU collectives (the default) let cycles go on."""
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 1500.0, "iterations": 3, "warmup": 1}
    params = {"fusion_threshold_bytes": 64 << 20, "cycle_time_ms": 1.0}
    _, gpu = run("horovod", "resnet50", params=params, **kw)
    _, cpu = run("horovod", "resnet50", params=params, cpu_collectives=True, **kw)

    def ops(result, it):
        return sorted((r[4], r[5]) for r in result.timeline if r[1] == "network" and r[0] == it)

    assert len(ops(cpu, 2)) < len(ops(gpu, 2))
    assert cpu.metrics["iteration_time_s"] != gpu.metrics["iteration_time_s"]
    _, wfbp = run("wfbp", "resnet50", **kw)
    _, same = run("wfbp", "resnet50", cpu_collectives=True, **kw)
    assert same.metrics == wfbp.metrics, "only Horovod's cycles change"


def _network_rows(result, it):
    return sorted(
        (r for r in result.timeline if r[1] == "network" and r[0] == it), key=lambda r: r[4]
    )


def test_a_collective_pays_the_busy_network_while_the_ranks_compute_and_the_idle_one_after():
    """``busy_latency_us`` / ``overlap_comm_slowdown``: WFBP's collectives that start during
    the backward pass (more of it to run) take the busy network's time, the last one (after
    the backward pass, the next forward held by the barrier) the idle network's."""
    layers = tuple(
        LayerTimes(f"l{i}", fwd_s=0.002, bwd_s=0.010, grad_bytes=100_000) for i in range(4)
    )
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}
    busy_kw = {"busy_latency_us": 1000.0, "overlap_comm_slowdown": 1.0}
    _, plain = run_layers("wfbp", layers, **kw)
    _, split = run_layers("wfbp", layers, **kw, **busy_kw)
    idle = RingAllReduce.from_gbps(2, 1.0, 100.0).time_s(100_000)
    busy = RingAllReduce.from_gbps(2, 0.5, 1000.0).time_s(100_000)
    assert busy > 2 * idle
    rows = _network_rows(split, 3)
    backward_end = max(r[5] for r in split.timeline if r[0] == 3 and r[2] == "backward")
    durations = [r[5] - r[4] for r in rows]
    assert [r[4] < backward_end for r in rows] == [True, True, True, False]
    assert durations == pytest.approx([busy, busy, busy, idle], rel=1e-9)
    assert all(r[5] - r[4] == pytest.approx(idle) for r in _network_rows(plain, 3))
    assert split.metrics["comm_time_s"] > plain.metrics["comm_time_s"]


def test_a_collective_that_outlasts_the_computation_goes_on_at_the_idle_rate():
    """The rate is integrated over the collective's span: busy while the last backward op
    runs, idle after it."""
    layers = (
        LayerTimes("l0", fwd_s=0.001, bwd_s=0.002, grad_bytes=1_000),
        LayerTimes("l1", fwd_s=0.001, bwd_s=0.010, grad_bytes=1_000_000),
    )
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}
    _, split = run_layers("wfbp", layers, **kw, busy_latency_us=1000.0, overlap_comm_slowdown=1.0)
    idle = RingAllReduce.from_gbps(2, 1.0, 100.0).time_s(1_000_000)
    busy = RingAllReduce.from_gbps(2, 0.5, 1000.0).time_s(1_000_000)
    first = _network_rows(split, 3)[0]
    assert first[3] == "l1"
    overlap = 0.002  # l0's backward runs beside it
    expected = overlap + (1 - overlap / busy) * idle
    assert first[5] - first[4] == pytest.approx(expected, rel=1e-9)
    assert idle < expected < busy


def test_the_links_token_bucket_lets_a_burst_through_after_an_idle_spell():
    """``link_burst_bytes``: a collective that starts after the links idled long enough gets
    up to the bucket's bytes through at once (its latency stays); the bucket refills at the
    bandwidth while the channel is empty and while a collective's latency keeps the link
    from sending."""
    burst = 50_000
    bandwidth = 1e9 / 8  # bytes/s at 1 Gbit/s

    def durations(bwd_s, latency_us=100.0, n_layers=4, grad_bytes=100_000, **more):
        layers = tuple(
            LayerTimes(f"l{i}", fwd_s=0.002, bwd_s=bwd_s, grad_bytes=grad_bytes)
            for i in range(n_layers)
        )
        kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": latency_us, "iterations": 3}
        _, result = run_layers("wfbp", layers, **kw, **more)
        return [r[5] - r[4] for r in _network_rows(result, 3)]

    idle = RingAllReduce.from_gbps(2, 1.0, 100.0).time_s(100_000)
    full = idle - burst / bandwidth  # 50,000 of its 100,000 bytes per link covered
    assert idle == pytest.approx(1e-3) and full == pytest.approx(0.6e-3)
    # 10 ms of backward between collectives of about 1 ms: each finds the bucket full
    assert durations(0.010) == pytest.approx([idle] * 4, rel=1e-9)
    assert durations(0.010, link_burst_bytes=burst) == pytest.approx([full] * 4, rel=1e-9)
    # backward ops of 0.1 ms: the collectives queue; the first drains the bucket, and each
    # one's 0.2 ms of latency refills 25,000 bytes for the next
    assert durations(0.0001, link_burst_bytes=burst) == pytest.approx(
        [full] + [idle - 0.2e-3] * 3, rel=1e-9
    )
    # no latency (0.8 ms a collective, 0.4 ms with a full bucket), 0.6 ms backward ops: a
    # 0.2 ms gap refills 25,000 bytes; then the next is ready as one ends (no gap)
    assert durations(0.0006, latency_us=0.0, link_burst_bytes=burst) == pytest.approx(
        [0.4e-3, 0.6e-3, 0.8e-3, 0.8e-3], rel=1e-9
    )
    # a long queue of small collectives (4,000 bytes, 0.6 ms of latency: it refills 75,000):
    # the bucket never runs dry, each takes its latency alone
    stream = durations(1e-5, latency_us=300.0, n_layers=40, grad_bytes=4000,
                       link_burst_bytes=burst)  # fmt: skip
    assert len(stream) == 40 and stream == pytest.approx([600e-6] * 40, rel=1e-9)
    # with the busy network (collectives during the backward pass): its time less what the
    # shaper would have made the covered bytes wait (at the shaped rate: the CPU's share of
    # their time stays)
    busy = RingAllReduce.from_gbps(2, 0.5, 1000.0).time_s(100_000)
    busy_kw = {"busy_latency_us": 1000.0, "overlap_comm_slowdown": 1.0}
    assert durations(0.010, link_burst_bytes=burst, **busy_kw) == pytest.approx(
        [busy - burst / bandwidth] * 3 + [full], rel=1e-9
    )
    # a bucket larger than a collective's bytes: the whole of them pass, the latency stays
    assert durations(0.010, link_burst_bytes=10**6)[0] == pytest.approx(2 * 100e-6, rel=1e-9)


def test_each_collective_takes_its_cpu_time_from_the_compute_op_it_overlaps():
    """``collective_cpu_us``: a collective that starts while a backward op runs makes that op
    end that much later (and so every later op, gradient and collective); one that starts
    after the backward (nothing computing) costs the compute nothing; a negotiation round
    is a collective too."""
    layers = tuple(LayerTimes(f"l{i}", fwd_s=0.001, bwd_s=0.004, grad_bytes=1000) for i in range(3))
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}

    def backward(result, it=3):
        return sorted(
            (r for r in result.timeline if r[2] == "backward" and r[0] == it), key=lambda r: r[4]
        )

    _, plain = run_layers("wfbp", layers, **kw)
    _, charged = run_layers("wfbp", layers, **kw, collective_cpu_us=300.0)
    before, after = backward(plain), backward(charged)
    assert [r[3] for r in after] == ["l2", "l1", "l0"]
    # l2's gradient goes out as l1's backward starts (l1 pays 0.3 ms), l1's as l0's starts;
    # l0's after the backward ended: no op pays for it
    durations = [r[5] - r[4] for r in after]
    assert durations == pytest.approx([0.004, 0.0043, 0.0043], rel=1e-9)
    assert [r[5] - r[4] for r in before] == pytest.approx([0.004] * 3, rel=1e-9)
    assert charged.metrics["compute_time_s"] == pytest.approx(
        plain.metrics["compute_time_s"] + 0.0006, rel=1e-9
    )
    # rejected outside the all-reduce arena, like its other CPU-testbed fields
    with pytest.raises(SpecError) as err:
        validate(raw_spec("ps-default", collective_cpu_us=300.0))
    assert err.value.field == "cluster.collective_cpu_us"


def test_each_layer_s_forward_takes_its_measured_update_longer():
    """``optimizer_update``: a measured profile's per-layer update time is added to the
    layer's forward op (one worker: nothing to synchronise, the iteration is its compute);
    it needs measured update times and a measured profile, and the all-reduce arena."""
    layers = tuple(
        LayerTimes(f"l{i}", fwd_s=0.001, bwd_s=0.002, grad_bytes=1000, update_s=0.0005 * (i + 1))
        for i in range(3)
    )
    kw = {"workers": 1, "iterations": 3, "gpu": "measured:testbed", "workload": "vgg16-debug"}
    _, plain = run_layers("wfbp", layers, **kw)
    spec, updated = run_layers("wfbp", layers, **kw, optimizer_update=True)
    assert plain.metrics["iteration_time_s"] == pytest.approx(0.009, rel=1e-9)
    assert updated.metrics["iteration_time_s"] == pytest.approx(0.009 + 0.003, rel=1e-9)
    forward = sorted(
        (r for r in updated.timeline if r[2] == "forward" and r[0] == 3), key=lambda r: r[4]
    )
    assert [r[5] - r[4] for r in forward] == pytest.approx([0.0015, 0.002, 0.0025], rel=1e-9)
    assert spec.as_dict()["cluster"]["optimizer_update"] is True
    assert "optimizer_update" not in validate(raw_spec("wfbp")).as_dict()["cluster"]
    bare = tuple(LayerTimes(f"l{i}", 0.001, 0.002, 1000) for i in range(3))
    with pytest.raises(
        ValueError, match="optimizer_update: the profile measured:testbed .* has no update times"
    ):
        run_layers("wfbp", bare, **kw, optimizer_update=True)
    with pytest.raises(SpecError) as err:
        validate(raw_spec("wfbp", optimizer_update=True))  # the FLOPs model: no update times
    assert err.value.field == "cluster.optimizer_update" and "measured:<label>" in str(err.value)
    with pytest.raises(SpecError) as err:
        validate(
            raw_spec("ps-default", "vgg16-debug", gpu="measured:testbed", optimizer_update=True)
        )
    assert err.value.field == "cluster.optimizer_update"


def test_compute_scale_stretches_every_compute_op_in_both_arenas():
    """``compute_scale``: every forward, backward and measured update takes that many times
    its profile's time (the gradients' sizes kept), in the all-reduce and the PS arena; left
    out of the resolved spec at its default; refused at 0, below and above its bound."""
    layers = tuple(
        LayerTimes(f"l{i}", fwd_s=0.001, bwd_s=0.002, grad_bytes=10**6, update_s=0.0005)
        for i in range(3)
    )
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}
    kw |= {"gpu": "measured:testbed", "workload": "vgg16-debug", "optimizer_update": True}

    def ops(result, kind):
        return [r[5] - r[4] for r in result.timeline if r[2] == kind and r[0] == 3]

    _, plain = run_layers("wfbp", layers, **kw)
    spec, scaled = run_layers("wfbp", layers, **kw, compute_scale=1.5)
    assert ops(plain, "forward") == pytest.approx([0.0015] * 3, rel=1e-9)  # the updates in
    assert ops(scaled, "forward") == pytest.approx([0.00225] * 3, rel=1e-9)
    assert ops(scaled, "backward") == pytest.approx([0.003] * 3, rel=1e-9)
    assert spec.as_dict()["cluster"]["compute_scale"] == 1.5
    # the PS arena: its compute alike, its messages' sizes kept
    _, ps_plain = run("ps-default", "vgg16-debug", workers=2)
    _, ps_scaled = run("ps-default", "vgg16-debug", workers=2, compute_scale=2.0)
    compute = [r.metrics["compute_time_s"] for r in (ps_plain, ps_scaled)]
    assert compute[1] == pytest.approx(2 * compute[0], rel=1e-6)
    pushes = [
        sorted(r[6] for r in result.timeline if r[2] == "push") for result in (ps_plain, ps_scaled)
    ]
    assert pushes[0] and pushes[1] == pushes[0]
    assert "compute_scale" not in validate(raw_spec("wfbp")).as_dict()["cluster"]
    for value in (0.0, -1.0, 1001.0):
        with pytest.raises(SpecError) as err:
            validate(raw_spec("wfbp", compute_scale=value))
        assert err.value.field == "cluster.compute_scale", value


def test_a_framework_s_background_loop_slows_the_ops_that_start_while_the_network_idles():
    """``background_slowdown``: an op that starts while no collective is in flight, a measured
    update included, takes 1 + it times as long; one that starts while a collective runs
    does not (the loop is busy with it); left out of the resolved spec at its default; the
    all-reduce arena's alone."""
    # two workers, 1 MB gradients at 1 Gbit/s (8.2 ms a collective): the forward ops and the
    # first backward op start with the network idle (wfbp's barrier waited for the last
    # collective); the two others start while the first gradient's collective runs
    layers = tuple(
        LayerTimes(f"l{i}", fwd_s=0.001, bwd_s=0.002, grad_bytes=10**6, update_s=0.0005)
        for i in range(3)
    )
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}
    kw |= {"gpu": "measured:testbed", "workload": "vgg16-debug"}

    def ops(result, kind):
        rows = sorted(
            (r for r in result.timeline if r[2] == kind and r[0] == 3), key=lambda r: r[4]
        )
        return [r[5] - r[4] for r in rows]

    _, plain = run_layers("wfbp", layers, **kw)
    spec, slowed = run_layers("wfbp", layers, **kw, background_slowdown=0.5)
    assert ops(plain, "forward") == pytest.approx([0.001] * 3, rel=1e-9)
    assert ops(slowed, "forward") == pytest.approx([0.0015] * 3, rel=1e-9)
    assert ops(plain, "backward") == pytest.approx([0.002] * 3, rel=1e-9)
    assert ops(slowed, "backward") == pytest.approx([0.003, 0.002, 0.002], rel=1e-9)
    assert spec.as_dict()["cluster"]["background_slowdown"] == 0.5
    _, both = run_layers("wfbp", layers, **kw, background_slowdown=0.5, optimizer_update=True)
    assert ops(both, "forward") == pytest.approx([0.00225] * 3, rel=1e-9)
    # beside the busy network's own slow-down: each op gets one of the two, by when it starts
    _, mixed = run_layers("wfbp", layers, **kw, background_slowdown=0.5, overlap_slowdown=1.0)
    assert ops(mixed, "forward") == pytest.approx([0.0015] * 3, rel=1e-9)
    assert ops(mixed, "backward") == pytest.approx([0.003, 0.004, 0.004], rel=1e-9)
    assert "background_slowdown" not in validate(raw_spec("wfbp")).as_dict()["cluster"]
    for system, value in (("ps-default", 0.5), ("wfbp", -0.1), ("wfbp", 101.0)):
        with pytest.raises(SpecError) as err:
            validate(raw_spec(system, background_slowdown=value))
        assert err.value.field == "cluster.background_slowdown", (system, value)


def test_integrated_slow_downs_charge_an_op_only_while_a_collective_overlaps_it():
    """``overlap_model: integrated``: an op progresses at ``1 / (1 + overlap_slowdown)`` of its
    speed while a collective runs and at full speed (or ``1 / (1 + background_slowdown)``)
    once it has ended, so its extra time is the overlap's share, bounded however large the
    slow-down; ``start`` charges the whole op. Left out of the resolved spec at its default;
    refused where it is not one of the two, and outside the all-reduce arena."""
    # two workers, 100 kB gradients at 1 Gbit/s (a collective of 1 ms: 2 x 100 us of latency
    # and 0.8 ms of bytes) and 2 ms backward ops: each gradient's collective starts with the
    # next backward op and ends during it
    layers = tuple(
        LayerTimes(f"l{i}", fwd_s=0.001, bwd_s=0.002, grad_bytes=10**5) for i in range(3)
    )
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}
    kw |= {"gpu": "measured:testbed", "workload": "vgg16-debug"}

    def rows(result, kind):
        return sorted(
            (r for r in result.timeline if r[2] == kind and r[0] == 3), key=lambda r: r[4]
        )

    def ops(result, kind):
        return [r[5] - r[4] for r in rows(result, kind)]

    _, start = run_layers("wfbp", layers, **kw, overlap_slowdown=1.0)
    spec, integrated = run_layers(
        "wfbp", layers, **kw, overlap_slowdown=1.0, overlap_model="integrated"
    )

    def collectives(result):
        return [r[5] - r[4] for r in rows(result, "allreduce")]

    d = 0.001
    assert collectives(integrated) == pytest.approx([d] * 3, rel=1e-9)
    assert ops(start, "backward") == pytest.approx([0.002, 0.004, 0.004], rel=1e-9)
    assert ops(integrated, "backward") == pytest.approx([0.002] + [0.002 + d / 2] * 2, rel=1e-9)
    assert ops(integrated, "forward") == pytest.approx([0.001] * 3, rel=1e-9)
    assert spec.as_dict()["cluster"]["overlap_model"] == "integrated"
    # a slow-down measured against collectives that never pause (36x): bounded by the overlap
    _, huge = run_layers("wfbp", layers, **kw, overlap_slowdown=36.0, overlap_model="integrated")
    assert ops(huge, "backward") == pytest.approx([0.002] + [0.002 + d * 36 / 37] * 2, rel=1e-9)
    _, huge_start = run_layers("wfbp", layers, **kw, overlap_slowdown=36.0)
    assert ops(huge_start, "backward")[1] == pytest.approx(0.074, rel=1e-9)
    # with the idle network's slow-down too: each part of an op at its own rate
    _, both = run_layers(
        "wfbp",
        layers,
        **kw,
        overlap_slowdown=1.0,
        background_slowdown=0.5,
        overlap_model="integrated",
    )
    assert ops(both, "forward") == pytest.approx([0.0015] * 3, rel=1e-9)
    assert ops(both, "backward") == pytest.approx([0.003] + [0.003 + 0.25 * d] * 2, rel=1e-9)
    # the collectives' CPU comes on top, at full speed, after the op's work
    integrate = {"overlap_slowdown": 1.0, "overlap_model": "integrated"}
    _, cpu = run_layers("wfbp", layers, **kw, **integrate, collective_cpu_us=300)
    assert ops(cpu, "backward") == pytest.approx([0.002] + [0.0023 + d / 2] * 2, rel=1e-9)
    # collectives slower while the ranks compute (fidelity's twins): each op pays for the
    # collective's whole span, now twice its bytes' time (the last one, after the backward,
    # on idle ranks)
    _, busy = run_layers("wfbp", layers, **kw, **integrate, overlap_comm_slowdown=1.0)
    assert collectives(busy) == pytest.approx([0.0018, 0.0018, 0.001], rel=1e-9)
    assert ops(busy, "backward") == pytest.approx([0.002] + [0.002 + 0.0009] * 2, rel=1e-9)
    assert "overlap_model" not in validate(raw_spec("wfbp")).as_dict()["cluster"]
    for system, value in (("wfbp", "rate"), ("wfbp", ""), ("ps-default", "rate")):
        with pytest.raises(SpecError) as err:
            validate(raw_spec(system, overlap_model=value))
        assert err.value.field == "cluster.overlap_model", (system, value)


def test_the_slowest_of_n_per_step_draws_follows_the_order_statistic():
    """``slowest_of``: one worker's draws have mean 1 and the CV asked for; the largest of n
    has the log-normal's quantile U ** (1/n): its median is the quantile 0.5 ** (1/n)."""
    import math
    from statistics import NormalDist

    import numpy as np

    from runners.sim.engine import slowest_of

    rng = np.random.default_rng(7)
    one = slowest_of(1, 0.1, 200_000, rng)
    assert one.mean() == pytest.approx(1.0, abs=2e-3)
    assert one.std() / one.mean() == pytest.approx(0.1, rel=0.02)
    sigma = math.sqrt(math.log1p(0.01))
    for n in (2, 64, 100_000):
        draws = slowest_of(n, 0.1, 20_000, rng)
        z = NormalDist().inv_cdf(0.5 ** (1 / n))
        assert np.median(draws) == pytest.approx(math.exp(-sigma * sigma / 2 + sigma * z), rel=0.01)
    # more workers, a slower slowest: the mean grows with n
    means = [slowest_of(n, 0.1, 20_000, rng).mean() for n in (1, 2, 8, 64)]
    assert means == sorted(means) and means[-1] > 1.15


def test_a_synchronous_step_waits_for_the_slowest_worker_s_per_step_draw():
    """``step_jitter_cv``: one worker computes at mean 1 (no slower on average); eight
    synchronised workers compute as their slowest, so the iteration is longer; the default 0
    leaves every run as it was (its run key too) and the per-op draws untouched."""
    layers = tuple(LayerTimes(f"l{i}", 0.001, 0.002, 1000) for i in range(4))
    kw = {"iterations": 400, "bandwidth_gbps": 100_000, "latency_us": 0}
    _, alone = run_layers("wfbp", layers, workers=1, step_jitter_cv=0.1, **kw)
    assert alone.metrics["iteration_time_s"] == pytest.approx(0.012, rel=0.02)
    assert alone.metrics["iteration_time_std_s"] == pytest.approx(0.0012, rel=0.15)
    _, plain = run_layers("wfbp", layers, workers=8, **kw)
    spec, eight = run_layers("wfbp", layers, workers=8, step_jitter_cv=0.1, **kw)
    # E[max of 8 standard normals] is about 1.42: a step about 14 % longer
    assert eight.metrics["iteration_time_s"] / plain.metrics["iteration_time_s"] == pytest.approx(
        1.14, abs=0.02
    )
    assert spec.as_dict()["cluster"]["step_jitter_cv"] == 0.1
    assert "step_jitter_cv" not in validate(raw_spec("wfbp")).as_dict()["cluster"]
    # the per-op draws are those of a run without it (its own random stream)
    _, ops = run_layers("wfbp", layers, workers=1, compute_jitter_cv=0.05, **kw)
    _, both = run_layers(
        "wfbp", layers, workers=1, compute_jitter_cv=0.05, step_jitter_cv=0.1, **kw
    )
    first = [r[5] - r[4] for r in ops.timeline if r[0] == 5 and r[2] in ("forward", "backward")]
    second = [r[5] - r[4] for r in both.timeline if r[0] == 5 and r[2] in ("forward", "backward")]
    assert len(first) == 8
    ratios = [b / a for a, b in zip(first, second, strict=True)]
    assert ratios == pytest.approx([ratios[0]] * len(ratios), rel=1e-9)  # one factor per step
    # both arenas take it (the PS arena's rounds wait for every worker's pushes too)
    assert validate(raw_spec("ps-default", "vgg16-debug", step_jitter_cv=0.1))
    with pytest.raises(SpecError) as err:
        validate(raw_spec("wfbp", step_jitter_cv=1.5))
    assert err.value.field == "cluster.step_jitter_cv"


def test_the_cpu_charge_lengthens_forward_ops_and_every_group_computing_then():
    """``charge_cpu`` on the compute streams alone: a charge while both groups (one a 2x
    straggler) run their first forward op lengthens both ops, and no later op; a charge while
    no group computes (after the last iteration) costs nothing."""
    layers = tuple(LayerTimes(f"l{i}", fwd_s=0.001, bwd_s=0.001, grad_bytes=0) for i in range(2))
    n_iter = 3
    setup = ComputeSetup(
        layers=layers,
        groups=(WorkerGroup((0,)), WorkerGroup((1,), slowdowns=(2.0,) * n_iter)),
        iterations=2, warmup_iterations=0, batch_size=1, collective_cpu_s=0.0003,
    )  # fmt: skip
    job = ComputeJob(setup)
    job.loop.at(0.0005, job.charge_cpu)
    job.loop.at(1.0, job.charge_cpu)  # everything is done by then
    job.start()
    job.loop.run()
    ops = {(r[1], r[0], r[2], r[3]): r[5] - r[4] for r in job.timeline}
    assert ops[("compute[w0]", 0, "forward", "l0")] == pytest.approx(0.0013)
    assert ops[("compute[w1]", 0, "forward", "l0")] == pytest.approx(0.0023)
    assert ops[("compute[w0]", 0, "forward", "l1")] == pytest.approx(0.001)
    assert ops[("compute[w1]", 1, "backward", "l0")] == pytest.approx(0.002)
    assert job.cpu_debt == [0.0, 0.0]


def test_a_negotiation_round_is_charged_like_a_collective(monkeypatch):
    """With ``negotiation``, PACE's rounds charge the compute as well: more charges than its
    collectives, which alone are charged without it."""
    calls: list = []  # the jobs charged, kept alive (PACE's planning simulates jobs too)
    charge = ComputeJob.charge_cpu

    def counting(self, negotiation=False):
        calls.append(self)
        charge(self, negotiation)

    def charges_of_the_run() -> int:  # the measured run's job is the last one charged
        return sum(1 for job in calls if job is calls[-1])

    monkeypatch.setattr(ComputeJob, "charge_cpu", counting)
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 200.0, "iterations": 3}
    _, free = run("pace", "resnet50", **kw, collective_cpu_us=100.0)
    collectives = sum(1 for r in free.timeline if r[1] == "network")
    assert charges_of_the_run() == collectives
    calls.clear()
    _, negotiated = run("pace", "resnet50", **kw, collective_cpu_us=100.0, negotiation=True)
    assert sum(1 for r in negotiated.timeline if r[1] == "network") == collectives
    assert charges_of_the_run() > collectives
    assert negotiated.metrics["compute_time_s"] > free.metrics["compute_time_s"]


def test_a_negotiation_round_takes_its_own_cpu_time_when_measured():
    """``negotiation_cpu_us``: each negotiation round takes that much CPU from the compute op
    it overlaps, in place of ``collective_cpu_us``; left out, a round costs a collective's.
    The gradient collectives keep theirs. PS systems refuse it (no negotiation there)."""
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 200.0, "iterations": 3}
    kw |= {"negotiation": True, "collective_cpu_us": 300.0}
    _, default = run("pace", "resnet50", **kw)
    _, same = run("pace", "resnet50", **kw, negotiation_cpu_us=300.0)
    _, cheap = run("pace", "resnet50", **kw, negotiation_cpu_us=0.0)
    _, dear = run("pace", "resnet50", **kw, negotiation_cpu_us=900.0)
    assert same.metrics == default.metrics
    compute = [r.metrics["compute_time_s"] for r in (cheap, default, dear)]
    assert compute[0] < compute[1] < compute[2]
    kw["collective_cpu_us"] = 0.0
    _, free = run("pace", "resnet50", **kw, negotiation_cpu_us=0.0)
    _, rounds_only = run("pace", "resnet50", **kw, negotiation_cpu_us=300.0)
    assert rounds_only.metrics["compute_time_s"] > free.metrics["compute_time_s"]
    with pytest.raises(SpecError) as err:
        validate(raw_spec("ps-default", negotiation_cpu_us=100.0))
    assert err.value.field == "cluster.negotiation_cpu_us"
    with pytest.raises(SpecError) as err:
        validate(raw_spec("pace", negotiation_cpu_us=-1.0))
    assert err.value.field == "cluster.negotiation_cpu_us"
    # left out, the resolved spec (and the run key hashed from it) is the one from before it
    assert "negotiation_cpu_us" not in validate(raw_spec("pace")).as_dict()["cluster"]
    kept = validate(raw_spec("pace", negotiation_cpu_us=150))
    assert kept.cluster.negotiation_cpu_us == 150.0
    assert validate(kept.as_dict()) == kept


def test_negotiation_makes_each_decision_of_a_reordering_plan_wait_a_small_collective():
    """``negotiation``: PACE (credit of one task, priority order) agrees on every dispatch
    with a 16-byte collective, so each all-reduce starts at least that long after the one
    before it ended; FIFO plans (WFBP) do not negotiate and are unchanged."""
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 500.0, "iterations": 3}
    _, free = run("pace", "resnet50", **kw)
    _, negotiated = run("pace", "resnet50", negotiation=True, **kw)
    round_s = RingAllReduce.from_gbps(2, 1.0, 500.0).time_s(16)
    rows = sorted((r for r in negotiated.timeline if r[1] == "network"), key=lambda r: r[4])
    gaps = [b[4] - a[5] for a, b in zip(rows, rows[1:], strict=False)]
    assert min(gaps) >= round_s * (1 - 1e-9)
    assert negotiated.metrics["iteration_time_s"] > free.metrics["iteration_time_s"]
    assert negotiated.metrics["negotiations_per_iteration"] >= 1
    assert "negotiations_per_iteration" not in free.metrics
    _, wfbp = run("wfbp", "resnet50", **kw)
    _, same = run("wfbp", "resnet50", negotiation=True, **kw)
    assert same.metrics == wfbp.metrics, "a FIFO plan needs no negotiation"


def horovod_cycles(bwd_s: float) -> tuple[ComputeSetup, CommPlan]:
    """Three layers (forward 1 ms, backward ``bwd_s`` each) under Horovod-style 1 ms cycles
    on CPU collectives, two iterations (one warm-up)."""
    layers = tuple(LayerTimes(f"l{i}", fwd_s=0.001, bwd_s=bwd_s, grad_bytes=1000) for i in range(3))
    setup = ComputeSetup(
        layers=layers, groups=(WorkerGroup((0, 1)),), iterations=2, warmup_iterations=1,
        batch_size=1,
    )  # fmt: skip
    plan = CommPlan(
        tasks=tuple(CommTask((i,), 1000, priority=0) for i in range(3)),
        credit_bytes=float("inf"),
        cross_barrier=False,
        fusion_threshold_bytes=64 << 20,
        fusion_cycle_s=0.001,
        fusion_cycle_blocks=True,
    )
    return setup, plan


def _cycle_job(bwd_s: float, latency_s: float, negotiate: bool):
    """``horovod_cycles``; the measured iteration's all-reduces (start, end) and the result."""
    setup, plan = horovod_cycles(bwd_s)
    network = RingAllReduce(2, 1e9 / 8, latency_s)
    result = iteration_simulate(setup, network, plan, negotiate=negotiate)
    rows = sorted((r[4], r[5]) for r in result.timeline if r[1] == "network" and r[0] == 1)
    return rows, result, network.time_s(16)


def test_horovod_cycles_negotiate_once_each_before_fusing():
    """With ``negotiation`` each Horovod cycle with tensors agrees on them first (its
    coordinator): its fused all-reduce starts one small collective after the tick, and a
    cycle due during a negotiation waits for it to end."""
    # Gradients ready 4 ms apart, on cycle ticks: one cycle (one all-reduce) each.
    free, plain, _ = _cycle_job(0.004, 100e-6, negotiate=False)
    rows, negotiated, round_s = _cycle_job(0.004, 100e-6, negotiate=True)
    assert len(rows) == len(free) == 3
    for (start, _), (free_start, _) in zip(rows, free, strict=True):
        assert start == pytest.approx(free_start + round_s, rel=1e-9)
    assert negotiated.metrics["negotiations_per_iteration"] == 3
    assert "negotiations_per_iteration" not in plain.metrics
    # A 3 ms negotiation, gradients 1 ms apart: the first cycle takes l2's; l1's and l0's
    # cycles fall in its negotiation and its all-reduce, and go as one cycle after them.
    rows, _, round_s = _cycle_job(0.001, 1.5e-3, negotiate=True)
    assert round_s > 0.003 and len(rows) == 2
    assert rows[1][0] == pytest.approx(rows[0][1] + round_s, rel=1e-9)


def _two_layer_job(credit: float, bytes_each: int = 1000):
    """Two layers (backward 1 ms each: l1's gradient first) and a plan that sends l0 first
    (priority 0): not FIFO, so it negotiates."""
    layers = (
        LayerTimes("l0", fwd_s=0.001, bwd_s=0.001, grad_bytes=bytes_each),
        LayerTimes("l1", fwd_s=0.001, bwd_s=0.001, grad_bytes=bytes_each),
    )
    setup = ComputeSetup(
        layers=layers, groups=(WorkerGroup((0, 1)),), iterations=2, warmup_iterations=1,
        batch_size=1,
    )  # fmt: skip
    plan = CommPlan(
        tasks=(CommTask((0,), bytes_each, priority=0), CommTask((1,), bytes_each, priority=1)),
        credit_bytes=credit,
        cross_barrier=False,
    )
    return setup, plan


def test_a_negotiation_round_admits_only_the_tasks_ready_when_it_started():
    """l1's gradient starts a 2 ms round at the end of its backward; l0's, ready 1 ms into
    it, waits for the next round although it has the higher priority."""
    setup, plan = _two_layer_job(credit=float("inf"))
    network = RingAllReduce.from_gbps(2, 1.0, 1000.0)
    result = iteration_simulate(setup, network, plan, negotiate=True)
    round_s = network.time_s(16)
    rows = {r[3]: r for r in result.timeline if r[1] == "network" and r[0] == 1}
    l1_ready = max(
        r[5] for r in result.timeline if r[0] == 1 and r[3] == "l1" and r[2] == "backward"
    )
    assert rows["l1"][4] == pytest.approx(l1_ready + round_s)
    assert rows["l0"][4] >= l1_ready + 2 * round_s - 1e-12  # the second round
    free = iteration_simulate(setup, network, plan)
    first = min((r for r in free.timeline if r[1] == "network" and r[0] == 1), key=lambda r: r[4])
    assert first[3] == "l1"  # without rounds l1 goes at once too (the channel was free)
    assert result.metrics["negotiations_per_iteration"] == 2


def test_credit_freed_during_a_round_counts_only_at_the_next_round():
    """A round hands over only the credit left when it started, as the real engine counts
    completions at the round's start: with room for one task then, one goes, even if the
    collective on the wire finished during the round."""
    from runners.sim.iteration import _AllReduceJob

    setup, plan = _two_layer_job(credit=1500.0)
    job = _AllReduceJob(setup, RingAllReduce.from_gbps(2, 1.0, 100.0), plan, negotiate=True)
    job.channel_busy = True  # something on the wire: the hand-over is what is checked
    job.unadmitted = [(1, 0, 0, 1, (0,)), (1, 1, 1, 1, (1,))]
    job.credit_left = 1500.0  # freed during the round
    job._round_done(admitted=2, credit=500.0)  # agreed at its start
    assert [members for _, members, _ in job.channel] == [(0,)]
    assert job.credit_left == 500.0 and len(job.ready) == 1


def test_two_groups_re_time_a_collective_when_either_computes():
    """A straggler makes two groups; the collective is busy while either group computes."""
    layers = (
        LayerTimes("l0", fwd_s=0.001, bwd_s=0.002, grad_bytes=1_000),
        LayerTimes("l1", fwd_s=0.001, bwd_s=0.010, grad_bytes=1_000_000),
    )
    kw = {"workers": 2, "bandwidth_gbps": 1.0, "latency_us": 100.0, "iterations": 3}
    busy = {"busy_latency_us": 1000.0, "overlap_comm_slowdown": 1.0}
    slow = [{"worker": 1, "slowdown": 1.5}]
    _, result = run_layers("wfbp", layers, **kw, **busy, stragglers=slow)
    assert len(result.groups) == 2
    idle_s = RingAllReduce.from_gbps(2, 1.0, 100.0).time_s(1_000_000)
    busy_s = RingAllReduce.from_gbps(2, 0.5, 1000.0).time_s(1_000_000)
    first = _network_rows(result, 3)[0]
    # l1's collective starts when the slower group's l1 backward ends (the ring waits for
    # both); that group's l0 backward (3 ms) runs beside it, then both groups idle
    overlap = 0.002 * 1.5
    assert first[5] - first[4] == pytest.approx(overlap + (1 - overlap / busy_s) * idle_s)


def test_ring_allreduce_from_gbps_converts_bits_and_microseconds():
    ring = RingAllReduce.from_gbps(8, 10.0, 25.0)

    assert ring.workers == 8
    assert ring.bandwidth_bytes_per_s == pytest.approx(1.25e9)
    assert ring.latency_s == pytest.approx(25e-6)


# --- iteration simulator: invariants over every all-reduce entry ---------------------------


@each_entry_and_workload
@pytest.mark.parametrize("jitter", [0.0, 0.05])
def test_iteration_time_is_at_least_compute_time_and_at_least_comm_time(system, workload, jitter):
    # Enough warm-up for a delayed system's backlog of in-flight all-reduces to settle.
    _, result = sim(system, workload, compute_jitter_cv=jitter, warmup=6)
    m = result.metrics

    assert m["compute_time_s"] > 0
    assert m["comm_time_s"] > 0
    assert m["iteration_time_s"] >= m["compute_time_s"] * (1 - REL)
    # One network channel: the channel cannot be busy for longer than an iteration lasts.
    assert m["iteration_time_s"] >= m["comm_time_s"] * (1 - REL)


@each_entry_and_workload
def test_with_a_near_infinite_network_iteration_time_is_compute_time(system, workload):
    _, result = sim(system, workload, bandwidth_gbps=100_000, latency_us=0, compute_jitter_cv=0)
    m = result.metrics
    # Horovod's background loop adds up to one cycle (1 ms by default) per iteration.
    slack = 1e-3 if system == "horovod" else 1e-4 * m["compute_time_s"]

    assert m["compute_time_s"] <= m["iteration_time_s"] * (1 + REL)
    assert m["iteration_time_s"] <= m["compute_time_s"] + slack
    assert m["exposed_comm_s"] <= slack


@each_entry_and_workload
@pytest.mark.parametrize("bandwidth", [1.0, 10.0, 10_000.0])
def test_exposed_comm_is_iteration_minus_compute_time_floored_at_zero(system, workload, bandwidth):
    _, result = sim(system, workload, bandwidth_gbps=bandwidth)
    m = result.metrics

    assert m["exposed_comm_s"] == max(0.0, m["iteration_time_s"] - m["compute_time_s"])
    assert m["exposed_comm_s"] >= 0


@each_entry_and_workload
def test_throughput_is_the_global_batch_over_iteration_time(system, workload):
    spec, result = sim(system, workload, workers=4)
    m = result.metrics

    expected = 4 * spec.batch_size / m["iteration_time_s"]
    assert m["throughput_samples_per_s"] == pytest.approx(expected, rel=1e-12)
    assert result.units["throughput_samples_per_s"] == "samples/s"
    assert result.units["iteration_time_s"] == "s"


@each_entry_and_workload
def test_without_jitter_every_iteration_takes_the_same_time_and_the_seed_does_not_matter(
    system, workload
):
    _, a = sim(system, workload, seed=0, compute_jitter_cv=0, warmup=6)
    _, b = sim(system, workload, seed=12345, compute_jitter_cv=0, warmup=6)

    # The intervals are differences of absolute timestamps, so "equal" means equal up to float
    # rounding of those timestamps (a few ulp), not bit-identical. Horovod's cycle ticks sit on
    # a fixed time grid, so its iterations legitimately differ by up to one cycle.
    if system != "horovod":
        assert a.metrics["iteration_time_std_s"] == pytest.approx(
            0.0, abs=1e-12 * a.metrics["iteration_time_s"]
        )
    assert a.metrics == b.metrics
    assert a.timeline == b.timeline


@each_entry_and_workload
def test_with_jitter_the_seed_changes_the_result_and_the_same_seed_repeats_it(system, workload):
    _, a = sim(system, workload, seed=1, compute_jitter_cv=0.05)
    _, again = sim(system, workload, seed=1, compute_jitter_cv=0.05)
    _, other = sim(system, workload, seed=2, compute_jitter_cv=0.05)

    assert a.metrics == again.metrics
    assert a.timeline == again.timeline
    assert a.series == again.series
    assert a.metrics["iteration_time_std_s"] > 0
    assert a.metrics["compute_time_s"] != other.metrics["compute_time_s"]
    assert a.metrics["iteration_time_s"] != other.metrics["iteration_time_s"]


@each_entry_and_workload
def test_the_timeline_has_one_forward_and_one_backward_row_per_layer_per_iteration(
    system, workload
):
    spec, result = sim(system, workload, iterations=4, warmup=1)
    names = [layer.name for layer in workloads.load_profile(workload).layers]
    n_iter = spec.warmup_iterations + spec.iterations + 1  # +1 times the last interval
    expected = Counter({(it, name): 1 for it in range(n_iter) for name in names})

    for op in ("forward", "backward"):
        got = Counter((r["iteration"], r["layer"]) for r in rows(result, "compute", op))
        assert got == expected, op
    assert {row[1] for row in result.timeline} == {"compute", "network"}
    assert all(r["end_s"] >= r["start_s"] >= 0 for r in rows(result))


@each_entry_and_workload
def test_the_compute_stream_runs_one_op_at_a_time(system, workload):
    _, result = sim(system, workload, iterations=3, warmup=1)
    ops = sorted((r["start_s"], r["end_s"]) for r in rows(result, "compute"))
    channel = sorted((r["start_s"], r["end_s"]) for r in rows(result, "network"))

    for timeline in (ops, channel):
        for (_, end), (start, _) in zip(timeline, timeline[1:], strict=False):
            assert start >= end * (1 - REL)


@each_entry_and_workload
def test_a_straggler_with_slowdown_two_doubles_compute_time(system, workload):
    _, base = sim(system, workload, compute_jitter_cv=0)
    _, slow = sim(
        system,
        workload,
        compute_jitter_cv=0,
        stragglers=[{"worker": 3, "slowdown": 2}, {"worker": 5, "slowdown": 1.5}],
    )

    assert slow.metrics["compute_time_s"] == pytest.approx(
        2 * base.metrics["compute_time_s"], rel=REL
    )
    assert slow.metrics["iteration_time_s"] > base.metrics["iteration_time_s"]


@each_entry_and_workload
def test_more_workers_at_the_same_bandwidth_increase_comm_time(system, workload):
    comm = [
        sim(system, workload, workers=n, compute_jitter_cv=0)[1].metrics["comm_time_s"]
        for n in (2, 4, 8, 16)
    ]

    assert comm == sorted(comm)
    assert len(set(comm)) == len(comm)


@each_entry_and_workload
@pytest.mark.parametrize("workers", [2, 3, 8])
def test_without_latency_comm_time_is_the_ring_factor_times_model_bytes_over_bandwidth(
    system, workload, workers
):
    _, result = sim(system, workload, workers=workers, latency_us=0, bandwidth_gbps=10)
    profile = workloads.load_profile(workload)

    expected = 2 * (workers - 1) / workers * profile.total_param_bytes / 1.25e9
    if system == "ddp":  # the buffers' broadcast before each forward
        expected += profile.buffer_bytes / 1.25e9
    assert result.metrics["comm_time_s"] == pytest.approx(expected, rel=REL)


def test_one_worker_never_communicates():
    _, result = sim("wfbp", "resnet50", workers=1, compute_jitter_cv=0)

    assert result.metrics["comm_time_s"] == 0.0
    assert result.metrics["iteration_time_s"] == pytest.approx(
        result.metrics["compute_time_s"], rel=REL
    )


@pytest.mark.parametrize("system", ALLREDUCE_ENTRIES)
def test_a_simulation_is_a_pure_function_of_its_spec(system):
    _, a = sim(system, "resnet50", compute_jitter_cv=0.1, seed=7, stragglers=[])
    _, b = sim(system, "resnet50", compute_jitter_cv=0.1, seed=7, stragglers=[])

    assert a.metrics == b.metrics
    assert a.units == b.units
    assert a.series == b.series
    assert a.timeline == b.timeline


def test_the_series_has_one_row_per_warmup_and_measured_iteration():
    spec, result = sim("bytescheduler", "vgg16", iterations=6, warmup=3)

    assert [r["iteration"] for r in result.series] == list(range(9))
    assert [r["warmup"] for r in result.series] == [True] * 3 + [False] * 6
    measured = [r["iteration_time_s"] for r in result.series if not r["warmup"]]
    assert sum(measured) / len(measured) == pytest.approx(
        result.metrics["iteration_time_s"], rel=REL
    )
    assert result.metrics["sim_events"] > 0


# --- the recorded timeline and the one-event forward ---------------------------------------


@pytest.mark.parametrize("system", ["wfbp", "p3", "ps-default"])
def test_the_timeline_records_the_last_measured_iterations_without_changing_a_result(system):
    from runners.execute import simulate
    from runners.spec import validate
    from tests.unit.simruns import raw_spec

    raw = raw_spec(system, iterations=6, warmup=2, compute_jitter_cv=0.02)
    whole = simulate(validate(raw))
    default = simulate(validate({k: v for k, v in raw.items() if k != "timeline_iterations"}))
    three = simulate(validate({**raw, "timeline_iterations": 3}))
    assert whole.metrics == default.metrics == three.metrics
    assert {row[0] for row in whole.timeline} == set(range(9))  # 2 + 6 + the closing one
    assert {row[0] for row in default.timeline} == {6, 7}  # the last two measured
    assert {row[0] for row in three.timeline} == {5, 6, 7}
    assert sorted(three.timeline) == sorted(r for r in whole.timeline if r[0] in (5, 6, 7))


@pytest.mark.parametrize(
    ("system", "workload"),
    [
        ("wfbp", "resnet50"),
        ("horovod", "inception3"),
        ("byteps", "vgg16"),
        ("pace", "inception3"),
        ("tictac-tac", "inception3"),
        ("p3", "resnet50"),
        ("ps-default", "inception3"),
    ],
)
def test_a_forward_run_as_one_event_equals_the_forward_op_by_op(system, workload, monkeypatch):
    """``ComputeJob`` runs forward ops whose turn is certain in one event; the op-by-op path
    must give the same times, metrics and timeline. (With compute jitter: without it, groups
    tie to the instant and simultaneous events may run in another, equally valid order.)"""
    from runners.sim import engine

    kw = {"stragglers": [{"worker": 1, "slowdown": 1.5}], "compute_jitter_cv": 0.05}
    _, batched = run(system, workload, iterations=5, **kw)
    events = batched.metrics["sim_events"]
    monkeypatch.setattr(engine.ComputeJob, "batch_forward", False)
    _, stepwise = run(system, workload, iterations=5, **kw)
    assert stepwise.metrics["sim_events"] > events  # the one-event path was taken
    drop = ("sim_events",)
    assert {k: v for k, v in batched.metrics.items() if k not in drop} == {
        k: v for k, v in stepwise.metrics.items() if k not in drop
    }
    assert sorted(batched.timeline) == sorted(stepwise.timeline)
    assert sorted(batched.synced) == sorted(stepwise.synced)
