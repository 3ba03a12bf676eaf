"""Invariants every registry entry must keep in simulation, in both communication arenas:
no resource runs two things at once, every gradient is synchronised exactly once per
iteration, no forward uses a parameter before its rule allows, analytic cases, determinism."""

from collections import Counter, defaultdict

import pytest

import workloads
from runners import registry
from runners.sim.engine import LayerTimes
from tests.unit.simruns import run, run_layers

ENTRIES = [e.name for e in registry.entries() if e.arena in ("allreduce", "ps")]
WORKLOADS = ["resnet50", "vgg16"]
REL = 1e-9

every_entry = pytest.mark.parametrize("system", ENTRIES)
every_entry_and_workload = pytest.mark.parametrize(
    ("system", "workload"), [(s, w) for s in ENTRIES for w in WORKLOADS]
)


def timeline_rows(result):
    return [dict(zip(result.TIMELINE_COLUMNS, row, strict=True)) for row in result.timeline]


def delay_of(spec):
    return spec.params.get("max_delay", 0)


def cross_barrier(spec):
    plan_flags = {
        "wfbp": False,
        "ddp": False,
        "horovod": False,
        "byteps": spec.params.get("cross_barrier", False),
    }
    return plan_flags.get(spec.system, True)


# --- resources ----------------------------------------------------------------------------


@every_entry_and_workload
def test_no_resource_runs_two_things_at_once(system, workload):
    _, result = run(system, workload, compute_jitter_cv=0.05, seed=3)
    by_resource = defaultdict(list)
    for row in timeline_rows(result):
        assert row["end_s"] >= row["start_s"] >= 0
        by_resource[row["resource"]].append((row["start_s"], row["end_s"]))

    assert by_resource, "empty timeline"
    for resource, spans in by_resource.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-12 * max(1.0, end), resource


# --- synchronisation ----------------------------------------------------------------------


@every_entry_and_workload
def test_every_gradient_is_synchronised_exactly_once_per_iteration_on_every_worker(
    system, workload
):
    spec, result = run(system, workload, stragglers=[{"worker": 1, "slowdown": 1.3}])
    n_layers = len(workloads.load_profile(workload).layers)
    n_iter = spec.warmup_iterations + spec.iterations + 1
    groups = range(len(result.groups)) if spec.arena == "ps" else [-1]
    got = Counter((g, it, layer) for g, it, layer, _ in result.synced)

    # The last iteration's updates may still be in flight when the run stops.
    for it in range(n_iter - 1):
        for g in groups:
            for layer in range(n_layers):
                assert got[(g, it, layer)] == 1, (g, it, layer)
    assert max(got.values()) == 1


@every_entry_and_workload
def test_every_iteration_moves_each_gradient_byte_once_per_direction(system, workload):
    spec, result = run(system, workload, iterations=3, warmup=1)
    profile = workloads.load_profile(workload)
    total = profile.total_param_bytes
    moved = defaultdict(int)
    broadcast = defaultdict(int)  # DDP's buffers before each forward: not gradients
    for row in timeline_rows(result):
        if row["iteration"] >= spec.warmup_iterations + spec.iterations:
            continue  # the run may stop with the last iteration's transfers in flight
        if spec.arena == "allreduce" and row["op"] == "broadcast":
            broadcast[row["iteration"]] += row["bytes"]
        elif spec.arena == "allreduce" and row["resource"] == "network":
            moved[(row["iteration"], row["op"])] += row["bytes"]
        elif spec.arena == "ps" and row["resource"].startswith(("uplink", "downlink")):
            moved[(row["iteration"], row["resource"])] += row["bytes"]  # per worker group

    ops = {op.split("[")[0] for _, op in moved}
    expected_ops = {
        "allreduce": {"reduce_scatter", "all_gather"} if system == "dear" else {"allreduce"},
        "ps": {"uplink", "downlink"},
    }[spec.arena]
    assert ops == expected_ops
    for key, value in moved.items():
        assert value == total, key
    if system == "ddp" and profile.buffer_bytes:  # the buffers, before each forward
        recorded = {it for it, _ in moved}
        assert broadcast == {it: profile.buffer_bytes for it in recorded}
    else:
        assert not broadcast


@every_entry_and_workload
def test_no_forward_uses_a_parameter_before_its_rule_allows(system, workload):
    spec, result = run(system, workload, compute_jitter_cv=0.05, seed=1)
    delay = delay_of(spec)
    synced = {(g, it, layer): t for g, it, layer, t in result.synced}
    last_of_iteration = defaultdict(float)
    for (g, it, _), t in synced.items():
        last_of_iteration[(g, it)] = max(last_of_iteration[(g, it)], t)
    names = [layer.name for layer in workloads.load_profile(workload).layers]
    index = {name: i for i, name in enumerate(names)}
    group_of = {"compute": 0} | {f"compute[{grp.label}]": g for g, grp in enumerate(result.groups)}
    checked = 0
    for row in timeline_rows(result):
        if row["op"] != "forward":
            continue
        src = row["iteration"] - 1 - delay
        if src < 0:
            continue
        g = group_of[row["resource"]] if spec.arena == "ps" else -1
        if cross_barrier(spec):
            needed = synced[(g, src, index[row["layer"]])]
        else:
            needed = last_of_iteration[(g, src)]
        assert row["start_s"] >= needed - 1e-12, row
        checked += 1
    assert checked > 0


# --- analytic cases -----------------------------------------------------------------------

ONE_LAYER = (LayerTimes("only", fwd_s=0.010, bwd_s=0.020, grad_bytes=100_000),)
NO_OVERLAP_PARAMS = {
    "horovod": {"cycle_time_ms": 0.0},  # no cycle tick to wait for
    "ps-default": {"order_groups": 1},  # one push per server, not one per group
    "delayed-allreduce": {"max_delay": 0},  # the delay exists to overlap across iterations
    "bytescheduler": {"autotune": "off"},
    "ddp": {"broadcast_buffers": False},  # resnet50's buffers: a broadcast before the forward
}


@every_entry
def test_one_layer_cannot_overlap_so_iteration_is_forward_plus_backward_plus_transfer(system):
    cluster = {"workers": 4, "bandwidth_gbps": 8, "latency_us": 5, "ps": 1, "servers": 1}
    spec, result = run_layers(
        system, ONE_LAYER, params=NO_OVERLAP_PARAMS.get(system), iterations=5, **cluster
    )
    size, n, alpha = 100_000, 4, 5e-6
    bw = 8e9 / 8
    if spec.arena == "allreduce":
        transfer = 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bw
    else:  # push and pull cut through one server NIC; aggregation in between
        agg = n * size / (spec.cluster.server_agg_gbps * 1e9 / 8)
        transfer = 2 * max(alpha + size / bw, n * size / bw) + agg
    expected = 0.010 + 0.020 + transfer

    assert result.metrics["iteration_time_s"] == pytest.approx(expected, rel=1e-9)
    assert result.metrics["compute_time_s"] == pytest.approx(0.030, rel=1e-9)


def test_ddp_s_buffer_broadcast_comes_before_each_forward_and_adds_its_collectives():
    """DDP with ``broadcast_buffers`` (its default): before each forward rank 0 broadcasts
    resnet50's buffers, one blocking broadcast per dtype (batch norm's float32 statistics
    and int64 counters): the iteration grows by exactly their time, and nothing computes
    during it."""
    cluster = {"workers": 4, "bandwidth_gbps": 8, "latency_us": 5}
    times = {}
    for broadcast in (False, True):
        params = {"broadcast_buffers": broadcast}
        spec, result = run_layers("ddp", ONE_LAYER, params=params, iterations=5, **cluster)
        times[broadcast] = result
    n, alpha, bw = 4, 5e-6, 8e9 / 8
    profile = workloads.load_profile("resnet50")
    assert [dtype for dtype, _ in profile.buffers] == ["float32", "int64"]
    buffers = profile.buffer_bytes
    broadcast_s = sum((n - 1) * alpha + size / bw for _, size in profile.buffers)
    grown = times[True].metrics["iteration_time_s"] - times[False].metrics["iteration_time_s"]
    assert grown == pytest.approx(broadcast_s, rel=1e-9)
    assert times[True].metrics["compute_time_s"] == pytest.approx(0.030, rel=1e-9)
    rows = [r for r in timeline_rows(times[True]) if r["op"] == "broadcast"]
    forwards = {r["iteration"]: r["start_s"] for r in timeline_rows(times[True])
                if r["op"] == "forward"}  # fmt: skip
    assert len(rows) == spec.warmup_iterations + spec.iterations + 1
    for row in rows:  # each before its iteration's forward, which starts as it ends
        assert row["bytes"] == buffers
        assert row["end_s"] - row["start_s"] == pytest.approx(broadcast_s, rel=1e-9)
        assert forwards[row["iteration"]] == pytest.approx(row["end_s"], abs=1e-12)
    assert not [r for r in timeline_rows(times[False]) if r["op"] == "broadcast"]


def test_one_layer_with_a_one_step_delay_overlaps_transfer_with_the_next_iteration():
    for bandwidth, bound in ((8, "compute"), (0.05, "network")):
        _, result = run_layers(
            "delayed-allreduce",
            ONE_LAYER,
            params={"max_delay": 1},
            workers=4,
            bandwidth_gbps=bandwidth,
            latency_us=0,
            iterations=10,
            warmup=6,
        )
        transfer = 2 * 3 / 4 * 100_000 / (bandwidth * 1e9 / 8)
        expected = max(0.030, transfer)
        assert result.metrics["iteration_time_s"] == pytest.approx(expected, rel=1e-9), bound


@every_entry_and_workload
def test_with_an_infinite_network_the_iteration_is_pure_compute(system, workload):
    _, result = run(
        system,
        workload,
        bandwidth_gbps=1e5,
        server_bandwidth_gbps=1e5,
        latency_us=0,
        server_agg_gbps=1e7,
    )
    m = result.metrics

    if system == "horovod":  # the background loop adds up to one cycle per iteration
        cycle_s = 1e-3  # registry default cycle_time_ms = 1
        assert m["compute_time_s"] <= m["iteration_time_s"] <= m["compute_time_s"] + cycle_s
    else:
        assert m["iteration_time_s"] == pytest.approx(m["compute_time_s"], rel=2e-3)


# --- determinism --------------------------------------------------------------------------


@every_entry
def test_a_fixed_seed_gives_identical_results_and_another_seed_differs(system):
    kw = {"compute_jitter_cv": 0.05, "stragglers": [{"worker": 2, "slowdown": 1.5}]}
    _, a = run(system, "resnet50", seed=11, **kw)
    _, again = run(system, "resnet50", seed=11, **kw)
    _, other = run(system, "resnet50", seed=12, **kw)

    assert a.metrics == again.metrics
    assert a.timeline == again.timeline
    assert a.series == again.series
    assert a.metrics["iteration_time_s"] != other.metrics["iteration_time_s"]


@every_entry
def test_results_carry_both_headline_metrics(system):
    spec, result = run(system, "vgg16")
    m = result.metrics

    assert m["iteration_time_s"] > 0
    expected = spec.cluster.workers * spec.batch_size / m["iteration_time_s"]
    assert m["throughput_samples_per_s"] == pytest.approx(expected, rel=1e-9)
