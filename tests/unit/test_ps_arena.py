"""Behaviour of the parameter-server arena (``runners.sim.ps`` executing the plans of
``runners.policies.ps``): placement as planned, TicTac's priority discipline, P3's slicing,
eager PS under a straggler, PS stragglers, the PSLD controller, determinism.

Numbers quoted in docstrings were measured with this simulator (compute jitter 0) before the
assertions were written; the assertions keep a margin around them."""

import dataclasses
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from runners import grid, registry, rundir
from runners.execute import run_to_directory, simulate
from runners.policies.placement import byteps_default, mxnet_default
from runners.policies.ps import PSLDController
from runners.policies.tictac import tac_priorities, tic_priorities
from runners.sim import ps as ps_sim
from runners.sim.engine import LayerTimes, WorkerGroup
from runners.spec import SpecError, validate
from tests.unit.simruns import raw_spec, run, run_layers

MB = 1_000_000


def plan_of(spec, layers=None):
    """The plan ``ps_sim.run`` executes for ``spec`` (a fresh one: controllers are stateful)."""
    setup = ps_sim.compute_setup(spec, layers)
    plan = registry.get(spec.system).build(spec.params).plan(ps_sim.build_problem(spec, setup))
    return setup, plan


def timeline_rows(result):
    return [dict(zip(result.TIMELINE_COLUMNS, row, strict=True)) for row in result.timeline]


def measured_series(spec, result):
    return [r["iteration_time_s"] for r in result.series if not r["warmup"]]


def group_intervals(spec, result):
    """Mean interval between iteration starts (first forward op) per compute resource."""
    starts = defaultdict(dict)
    for row in timeline_rows(result):
        if row["op"] == "forward":
            d = starts[row["resource"]]
            d[row["iteration"]] = min(d.get(row["iteration"], np.inf), row["start_s"])
    return {
        res: float(np.diff([d[i] for i in sorted(d)])[spec.warmup_iterations :].mean())
        for res, d in starts.items()
    }


def servers_bytes(parts, servers):
    out = [0] * servers
    for pieces in parts:
        for server, nbytes in pieces:
            out[server] += nbytes
    return out


# --- placement ---------------------------------------------------------------------------


@pytest.mark.parametrize("order_groups", [1, 4])
def test_ps_default_servers_receive_workers_times_their_mxnet_share(order_groups):
    """Every key crosses its server's NIC once per worker and iteration. A ``ps{j}.in`` row
    is one worker group's push of one key: ``bytes`` is the key's size and the row lasts
    ``group_size * bytes / B_server`` (the group's copies back to back), so per server and
    iteration the rows' bytes sum to n_groups x the bytes ``mxnet_default`` put on it, and their
    wire time x B_server to workers x those bytes. Machines without a PS get nothing."""
    spec, result = run("ps-default", params={"order_groups": order_groups}, ps=3, servers=5)
    sizes = [lt.grad_bytes for lt in ps_sim.compute_setup(spec).layers]
    planned = servers_bytes(mxnet_default(sizes, 3), 5)
    n_groups = len(result.groups)
    assert n_groups == order_groups
    b_server = spec.cluster.server_bandwidth_gbps * 1e9 / 8
    key_bytes, wire_bytes = defaultdict(int), defaultdict(float)
    for row in timeline_rows(result):
        if row["resource"].endswith(".in") and row["op"] == "push":
            key = (row["iteration"], int(row["resource"][2:-3]))
            key_bytes[key] += row["bytes"]
            wire_bytes[key] += (row["end_s"] - row["start_s"]) * b_server

    assert planned[3] == planned[4] == 0 and min(planned[:3]) > 0
    for it in range(spec.warmup_iterations + spec.iterations):
        for j in range(5):
            assert key_bytes[it, j] == n_groups * planned[j], (it, j)
            expected = spec.cluster.workers * planned[j]
            # Cut-through: a tiny key's row can last its uplink's latency instead.
            assert expected * (1 - 1e-9) <= wire_bytes[it, j] <= expected * (1 + 1e-3) + 1, (it, j)


def test_byteps_pushes_4096000_byte_pieces_on_the_servers_byteps_default_hashes_them_to():
    """BytePS cuts every tensor into 4,096,000-byte partitions (the last one shorter) and
    hashes each partition key to a server: no push is bigger than a partition, vgg16's large
    layers produce full partitions, and the servers receive exactly byteps_default's shares."""
    spec, result = run("byteps", "vgg16", ps=4, servers=4, iterations=3, warmup=1)
    sizes = [lt.grad_bytes for lt in ps_sim.compute_setup(spec).layers]
    planned = servers_bytes(byteps_default(sizes, 4, 4_096_000), 4)
    pushes = [r for r in timeline_rows(result) if r["op"] == "push"]
    per_server = defaultdict(int)
    for row in pushes:
        if row["resource"].endswith(".in") and row["iteration"] == 1:
            per_server[int(row["resource"][2:-3])] += row["bytes"]

    assert max(r["bytes"] for r in pushes) == 4_096_000
    assert [per_server[j] for j in range(4)] == planned


def test_p3_sends_round_robin_slices_of_at_most_200000_bytes():
    """P3 slices every layer into 50,000-parameter (200,000-byte) slices, only a layer's last
    slice may be shorter, and consecutive slices go round-robin over the servers."""
    spec, result = run("p3", "vgg16-debug", ps=3, servers=3, iterations=3, warmup=1)
    setup, plan = plan_of(spec)

    assert max(r["bytes"] for r in timeline_rows(result) if r["op"] == "push") <= 200_000
    assert [t.server for t in plan.tasks] == [i % 3 for i in range(len(plan.tasks))]
    for layer, lt in enumerate(setup.layers):
        sizes = [t.size_bytes for t in plan.tasks if t.layer == layer]
        assert sum(sizes) == lt.grad_bytes
        assert all(size == 200_000 for size in sizes[:-1]), lt.name


# --- TicTac ------------------------------------------------------------------------------


def branchy(f_s=0.001, nbytes=MB):
    """A stem, three parallel branches of 1, 2 and 4 layers, a concat of the three and a head;
    every layer holds one 1 MB key (a single key even on one server)."""

    def layer(name, *deps):
        return LayerTimes(name, f_s, 2 * f_s, nbytes, deps)

    return (
        layer("stem"),
        layer("a1", 0),
        layer("b1", 0),
        layer("b2", 2),
        layer("c1", 0),
        layer("c2", 4),
        layer("c3", 5),
        layer("c4", 6),
        layer("concat", 1, 3, 7),
        layer("head", 8),
    )


DAG = branchy()
NAMES = [lt.name for lt in DAG]
# One PS serving 8 workers over a NIC as fast as a worker's: the server NIC is the bottleneck,
# so keys queue at the server (where the plans' server order applies).
SERVER_BOUND = {"workers": 8, "ps": 1, "servers": 1, "bandwidth_gbps": 10}
# Worker NICs 10x slower than the server's, compute short: keys queue on the worker NICs
# (where ps-default draws its random orders).
WORKER_BOUND = {
    "workers": 8,
    "ps": 1,
    "servers": 2,
    "bandwidth_gbps": 1,
    "server_bandwidth_gbps": 10,
}


@pytest.mark.parametrize(
    ("system", "params", "fixes"),
    [("tictac-tic", {}, 1), ("eager-ps", {"server_mode": "async", "partition_bytes": MB}, 4)],
)
def test_each_aggregation_takes_its_fixed_time_besides_its_bytes(system, params, fixes):
    """``server_agg_fixed_us``: every aggregation a server runs lasts the fixed time plus
    its bytes at the aggregation rate: a round of the 4 workers' pushes in sync, once; in
    async each push alone, so the group of 4 identical workers' aggregation (one simulated
    group) takes it 4 times. In sync, with one layer and one server, the iteration grows by
    exactly the fixed time. Other arenas refuse it."""
    layers = (LayerTimes("only", 0.010, 0.020, MB),)
    cluster = {"workers": 4, "ps": 1, "servers": 1, "bandwidth_gbps": 8, "latency_us": 5,
               "server_agg_gbps": 8}  # fmt: skip
    times = {}
    for fixed in (0.0, 700.0):
        spec, result = run_layers(system, layers, params=params, iterations=4,
                                  server_agg_fixed_us=fixed, **cluster)  # fmt: skip
        aggs = [r for r in timeline_rows(result) if r["op"] == "aggregate"]
        assert aggs
        for r in aggs:
            assert r["end_s"] - r["start_s"] == pytest.approx(
                fixes * fixed * 1e-6 + 4 * MB / 1e9, rel=1e-9
            )
        times[fixed] = result.metrics["iteration_time_s"]
    if system == "tictac-tic":
        assert times[700.0] - times[0.0] == pytest.approx(700e-6, rel=1e-6)
    with pytest.raises(SpecError, match="server_agg_fixed_us"):
        validate(raw_spec("wfbp", server_agg_fixed_us=10.0))
    with pytest.raises(SpecError, match="cluster.server_agg_fixed_us"):
        validate(raw_spec(system, server_agg_fixed_us=-1.0))


def test_tictac_plans_carry_the_tic_and_tac_priorities_of_the_dag():
    """TIC ranks a recv by the smallest multi-recv op containing it: the stem and each
    branch's first layer complete a 2-recv op ([stem, x1]) and tie at rank 0, the branches'
    second layers (3 recvs) follow, and so on down to the head. TAC's order comes from the
    same DAG with the profiled costs. Both plans keep MXNet's placement."""
    spec, _ = run_layers("tictac-tic", DAG, **SERVER_BOUND)
    _, tic = plan_of(spec, DAG)
    spec_tac, _ = run_layers("tictac-tac", DAG, **SERVER_BOUND)
    _, tac = plan_of(spec_tac, DAG)
    deps = [lt.deps for lt in DAG]
    transfer = [spec.cluster.latency_us * 1e-6 + MB / (10e9 / 8)] * len(DAG)

    assert [t.priority for t in tic.tasks] == [0, 0, 0, 4, 0, 4, 6, 7, 8, 9]
    assert [t.priority for t in tic.tasks] == tic_priorities(deps)
    assert [t.priority for t in tac.tasks] == tac_priorities(
        deps, [lt.fwd_s for lt in DAG], transfer
    )
    assert (tic.pull_order, tic.server_order, tic.push_order) == ("priority", "priority", "fifo")


@pytest.mark.parametrize("system", ["tictac-tic", "tictac-tac"])
def test_tictac_on_a_chain_pulls_in_layer_order(system):
    """On a chain every op's dependency set is a prefix of the layers, so TIC's order is the
    layer order (layers 0 and 1 tie) and TAC's too: vgg16's priorities never decrease with the
    layer index."""
    spec = validate(raw_spec(system, "vgg16"))
    _, plan = plan_of(spec)
    by_layer = sorted({(t.layer, t.priority) for t in plan.tasks})

    assert [layer for layer, _ in by_layer] == list(range(16))
    priorities = [p for _, p in by_layer]
    assert priorities == sorted(priorities)
    assert priorities[2:] == list(range(2, 16))


def _waiting_since(rows):
    """For every server/downlink row of a single-group, single-PS run: when its item joined the
    station's queue (cut-through: the upstream transfer's start; store-and-forward: its end)."""
    comm = [r for r in rows if r["op"] not in ("forward", "backward")]
    index = {(r["resource"], r["iteration"], r["layer"]): r for r in comm}
    assert len(index) == len(comm), "one row per (resource, iteration, layer) expected"
    upstream = {
        "ps0.in": ("uplink", "start_s"),
        "ps0.cpu": ("ps0.in", "end_s"),
        "ps0.out": ("ps0.cpu", "end_s"),
        "downlink": ("ps0.out", "start_s"),
    }
    out = defaultdict(list)
    for r in rows:
        if r["resource"] in upstream:
            src, col = upstream[r["resource"]]
            queued = index[src, r["iteration"], r["layer"]][col]
            out[r["resource"]].append((queued, r["start_s"], r["iteration"], r["layer"]))
    return out


def _priority_audit(result, priority):
    """(violations, reorderings): a violation is a start while an item with a smaller
    (iteration, priority) was already waiting; a reordering is an item served before one that
    had been waiting longer."""
    eps = 1e-12
    violations = reorderings = 0
    for items in _waiting_since(timeline_rows(result)).values():
        for qa, sa, ita, la in items:
            for qb, sb, itb, lb in items:
                if sb > sa + eps and qb < sa - eps and (itb, priority[lb]) < (ita, priority[la]):
                    violations += 1
                if sb > sa + eps and qb < qa - eps:
                    reorderings += 1
    return violations, reorderings


def test_tictac_servers_and_downlink_serve_in_priority_order():
    """TicTac enforces its order wherever keys wait: the server's NIC in, CPU and NIC out and
    the worker's downlink are non-preemptive priority queues. So no transfer starts while a key
    of a smaller (iteration, priority) waits there, and since the server queues (SERVER_BOUND),
    keys do overtake ones that waited longer (the check is not vacuous). ps-default's servers
    are FIFO: they never reorder, and so break TIC's order."""
    tic = tic_priorities([lt.deps for lt in DAG])
    for system in ("tictac-tic", "tictac-tac"):
        spec, result = run_layers(system, DAG, iterations=6, **SERVER_BOUND)
        _, plan = plan_of(spec, DAG)
        priority = {NAMES[t.layer]: t.priority for t in plan.tasks}
        violations, reorderings = _priority_audit(result, priority)
        assert violations == 0, system
        assert reorderings > 20, system

    _, result = run_layers(
        "ps-default", DAG, iterations=6, params={"order_groups": 1}, **SERVER_BOUND
    )
    violations, reorderings = _priority_audit(result, dict(zip(NAMES, tic, strict=True)))
    assert reorderings == 0
    assert violations > 20


def test_tictac_beats_ps_default_when_keys_queue_at_the_server():
    """With the server NIC as bottleneck, TicTac's server queues send the stem and the
    branches' first layers before the concat and head that FIFO serves first (backward order):
    measured 75.2 ms (TIC and TAC) against 83.2 ms for ps-default, for every seed."""
    for seed in range(3):
        times = {}
        for system, params in (
            ("tictac-tic", None),
            ("tictac-tac", None),
            ("ps-default", None),
            ("ps-default", {"order_groups": 1}),
        ):
            _, result = run_layers(system, DAG, params=params, seed=seed, **SERVER_BOUND)
            times[system, bool(params)] = result.metrics["iteration_time_s"]
        for default in (times["ps-default", False], times["ps-default", True]):
            assert times["tictac-tic", False] < 0.95 * default, seed
            assert times["tictac-tac", False] < 0.95 * default, seed


def test_random_orders_make_ps_default_vary_and_tictac_does_not():
    """Where keys queue on the worker NICs, ps-default draws a new random order per worker
    group and iteration: its iteration time varies between iterations and between seeds, and
    the four groups' different orders make the servers wait for the slowest group (measured
    131 +- 4 ms over seeds). TicTac's orders are fixed: without compute jitter every measured
    iteration takes the same time on every seed (94.9 ms)."""
    tictac, default = [], []
    for seed in range(4):
        spec, result = run_layers("tictac-tic", DAG, iterations=8, seed=seed, **WORKER_BOUND)
        series = measured_series(spec, result)
        assert max(series) == pytest.approx(min(series), rel=1e-9)
        tictac.append(result.metrics["iteration_time_s"])
        spec, result = run_layers("ps-default", DAG, iterations=8, seed=seed, **WORKER_BOUND)
        series = measured_series(spec, result)
        assert statistics.pstdev(series) > 0.05 * statistics.mean(series), seed
        default.append(result.metrics["iteration_time_s"])

    assert max(tictac) == pytest.approx(min(tictac), rel=1e-9)
    assert len(set(default)) == len(default)
    assert statistics.mean(tictac) < 0.9 * statistics.mean(default)


def test_when_worker_nics_are_the_bottleneck_tictac_pulls_follow_its_fifo_pushes():
    """The limit of pull-only ordering in this model: a key is pulled as soon as its round is
    aggregated and pushes leave in backward (FIFO) order, so when the worker NICs are the
    bottleneck nothing ever waits at the server or the downlink and the pulls come back in
    exactly the push order -- TIC's priorities cannot act, and TIC and TAC take the same time.
    (Measured: ps-default with one random order per iteration then averages 91.0 ms, range
    86.8-93.0 ms over 8 seeds, faster than TicTac's 94.9 ms, because a random push order
    sometimes sends the stem early; with its default 4 order groups it takes 131 ms.)"""
    spec, tic = run_layers("tictac-tic", DAG, iterations=6, **WORKER_BOUND)
    _, tac = run_layers("tictac-tac", DAG, iterations=6, **WORKER_BOUND)
    rows = sorted(timeline_rows(tic), key=lambda r: r["start_s"])
    for it in range(spec.warmup_iterations + spec.iterations):
        uplink, downlink = (
            [r["layer"] for r in rows if r["resource"] == link and r["iteration"] == it]
            for link in ("uplink", "downlink")
        )
        assert uplink == downlink == NAMES[::-1], it
    assert tic.metrics["iteration_time_s"] == tac.metrics["iteration_time_s"]


# --- straggler time (TicTac's metric) ----------------------------------------------------

LEDGER = Path(__file__).resolve().parents[2] / "claims" / "ledger.yaml"
TICTAC_CLAIM = "tictac-straggler-reduction"


def straggler_from_timeline(spec, result):
    """``straggler_time_pct`` recomputed from timeline.csv alone: per iteration, each group's
    last push leaving its uplink is the end of its own work; the latest of them ends the
    iteration. Returns (max, mean) over the measured iterations."""
    done = defaultdict(float)
    for row in timeline_rows(result):
        if row["resource"].startswith("uplink"):
            key = (row["resource"], row["iteration"])
            done[key] = max(done[key], row["end_s"])
    links = {link for link, _ in done}
    pct, prev = [], 0.0
    for it in range(spec.warmup_iterations + spec.iterations + 1):
        column = [done[link, it] for link in links]
        pct.append(100 * (max(column) - min(column)) / (max(column) - prev))
        prev = max(column)
    measured = pct[spec.warmup_iterations : spec.warmup_iterations + spec.iterations]
    return max(measured), statistics.mean(measured)


def test_straggler_time_of_one_layer_and_a_2x_slower_worker_by_hand():
    """One 1 MB layer (forward 10 ms, backward 20 ms), two workers, worker 1 twice as slow, one
    PS; 8 Gbit/s everywhere (1 MB = 1 ms on a NIC), aggregation at 8 Gbit/s, no latency. From
    the pull that ends iteration i-1: worker 0 computes 30 ms and pushes 1 ms (done at 31 ms),
    worker 1 computes 60 ms and pushes 1 ms (61 ms); the server aggregates 2 MB (2 ms, 63 ms)
    and sends 2 copies (2 ms, 65 ms). Iteration = 65 ms, worker 0 waits 61 - 31 = 30 ms:
    100 * 30 / 65 = 46.15 % in every measured iteration."""
    layers = (LayerTimes("only", 0.010, 0.020, MB),)
    _, result = run_layers(
        "tictac-tic",
        layers,
        workers=2,
        ps=1,
        servers=1,
        bandwidth_gbps=8,
        server_agg_gbps=8,
        latency_us=0,
        stragglers=[{"worker": 1, "slowdown": 2}],
        iterations=3,
    )
    m = result.metrics

    assert m["iteration_time_s"] == pytest.approx(0.065, rel=1e-9)
    assert m["straggler_time_pct"] == pytest.approx(100 * 30 / 65, rel=1e-9)
    assert m["straggler_time_mean_pct"] == pytest.approx(100 * 30 / 65, rel=1e-9)
    assert result.units["straggler_time_pct"] == result.units["straggler_time_mean_pct"] == "%"


@pytest.mark.parametrize(
    ("burst", "iteration_ms"),
    [(0, 33.0), (MB // 2, 32.0), (MB, 31.0), (4 * MB, 31.0)],
    ids=["none", "half-a-key", "one-key", "deeper"],
)
def test_the_nics_token_bucket_lets_a_key_through_by_hand(burst, iteration_ms):
    """``link_burst_bytes`` in the PS arena, by hand. One 1 MB layer (forward 10 ms, backward
    20 ms), one worker, one PS, 8 Gbit/s (1 MB = 1 ms on a NIC), aggregation 1 ms, no latency.
    Without a bucket: 30 ms of compute, the push 1 ms (the server's NIC in, cut-through, ends
    with it), the aggregation 1 ms, the pull 1 ms (the downlink, cut-through, with it): 33 ms.
    With a bucket of half the key each transfer's first half passes at once: 0.5 + 1 + 0.5 =
    32 ms; with one of the key or deeper the transfers take no time: 31 ms. Each NIC idles
    30 ms per iteration, enough to fill its bucket again, so every iteration is the same."""
    layers = (LayerTimes("only", 0.010, 0.020, MB),)
    _, result = run_layers(
        "tictac-tic",
        layers,
        workers=1,
        ps=1,
        servers=1,
        bandwidth_gbps=8,
        server_agg_gbps=8,
        latency_us=0,
        link_burst_bytes=burst,
        iterations=4,
    )
    times = [r["iteration_time_s"] for r in result.series]
    assert times == pytest.approx([iteration_ms / 1e3] * len(times), rel=1e-9)
    pushes = [e - s for _, r, op, _, s, e, _ in result.timeline if r == "uplink" and op == "push"]
    assert pushes == pytest.approx([max(0.0, MB - burst) / 1e9] * len(pushes), abs=1e-12)


def test_the_bucket_fills_during_a_transfer_s_latency_not_while_it_sends():
    """Three 1 MB keys pushed back to back on a 1 MB/ms uplink with a 1 MB bucket and 0.5 ms
    of latency per transfer: the first passes at once (0.5 ms, the latency), which refills
    0.5 MB; the second then pays 0.5 MB at the rate (0.5 + 0.5 ms) and refills 0.5 MB again
    in its latency, and so does the third."""
    layers = tuple(LayerTimes(f"l{i}", 0.010, 1e-9, MB) for i in range(3))
    spec, result = run_layers(
        "ps-default",
        layers,
        params={"order_groups": 1},
        workers=1,
        ps=1,
        servers=1,
        bandwidth_gbps=8,
        server_agg_gbps=1000,
        latency_us=500,
        link_burst_bytes=MB,
        iterations=3,
        warmup=0,
    )
    first = [(s, e) for i, r, op, _, s, e, _ in result.timeline
             if i == 0 and r == "uplink" and op == "push"]  # fmt: skip
    assert [e - s for s, e in first] == pytest.approx([0.0005, 0.001, 0.001], rel=1e-6)


@pytest.mark.parametrize(("cpu_us", "iteration_ms"), [(0, 63.0), (500, 64.0), (2000, 67.0)])
def test_each_message_takes_its_cpu_from_the_op_its_worker_computes_by_hand(cpu_us, iteration_ms):
    """``message_cpu_us`` by hand. Two 1 MB layers a -> b (forward 10 ms, backward 20 ms
    each), one worker, one PS, 8 Gbit/s (1 MB = 1 ms), aggregation 1 ms, no latency. Backward
    runs b, then a. b's push starts as a's backward does, and b's pull arrives 3 ms later, a
    still computing: each takes ``cpu_us`` from a's backward. a's own push and pull find the
    worker idle (waiting for them): free. Iteration: 20 + 20 + (20 + 2 x cpu) + 3 ms."""
    layers = (LayerTimes("a", 0.010, 0.020, MB), LayerTimes("b", 0.010, 0.020, MB, (0,)))
    _, result = run_layers(
        "tictac-tic",
        layers,
        workers=1,
        ps=1,
        servers=1,
        bandwidth_gbps=8,
        server_agg_gbps=8,
        latency_us=0,
        message_cpu_us=cpu_us,
        iterations=4,
    )
    times = [r["iteration_time_s"] for r in result.series]
    assert times == pytest.approx([iteration_ms / 1e3] * len(times), rel=1e-9)
    backward_a = [e - s for _, r, op, name, s, e, _ in result.timeline
                  if r == "compute" and op == "backward" and name == "a"]  # fmt: skip
    assert backward_a == pytest.approx([0.020 + 2 * cpu_us * 1e-6] * len(backward_a), rel=1e-9)


def test_a_handed_over_push_frees_its_sender_and_its_bytes_queue_on_the_nic():
    """``push_buffered`` by hand. Four 1 MB layers a -> b -> c -> d (forward 10 ms, backward
    1 ms each), one worker, one PS, 0.8 Gbit/s (1 MB = 10 ms), no latency, rendezvous pushes,
    ps-default's random push order. The backward hands d's push over at 31 ms, c's at 32, b's
    and a's at 33 and 34. Held until its bytes are through (the default), the sender is busy
    with d until 41 and then takes c, b and a in the drawn order. Handed over, the sender is
    free at once and takes c as it comes; c then waits for the server's receiver, held until
    d's bytes are through, and b and a queue behind it in the drawn order: every iteration
    pushes d, then c. Either way the NIC sends one push at a time, 10 ms each."""
    layers = tuple(
        LayerTimes(name, 0.010, 0.001, MB, (i - 1,) if i else ()) for i, name in enumerate("abcd")
    )
    orders = {}
    for buffered in (False, True):
        _, result = run_layers(
            "ps-default", layers, workers=1, ps=1, servers=1, bandwidth_gbps=0.8,
            server_agg_gbps=80, latency_us=0, push_rendezvous=True, push_buffered=buffered,
            iterations=6, params={"bigarray_bound_elems": 10**9},
        )  # fmt: skip
        pushes = defaultdict(list)
        for it, r, op, name, start, end, _ in result.timeline:
            if r == "uplink" and op == "push":
                pushes[it].append((start, end, name))
        for it, spans in pushes.items():
            spans.sort()
            starts = [start for start, _, _ in spans]
            assert [end - start for start, end, _ in spans] == pytest.approx([0.010] * 4)
            assert starts == pytest.approx([starts[0] + 0.010 * k for k in range(4)]), it
        orders[buffered] = ["".join(name for _, _, name in pushes[it]) for it in sorted(pushes)]
    assert all(order.startswith("dc") for order in orders[True])
    assert not all(order.startswith("dc") for order in orders[False])  # the drawn orders
    with pytest.raises(SpecError, match="needs cluster.push_rendezvous") as err:
        validate(raw_spec("ps-default", push_buffered=True))
    assert err.value.field == "cluster.push_buffered"
    assert "push_buffered" not in validate(raw_spec("ps-default")).as_dict()["cluster"]


@pytest.mark.parametrize(
    ("model", "iteration_ms", "backward_a_ms"), [("start", 83.0, 40.0), ("integrated", 64.0, 21.0)]
)
def test_the_slow_down_integrated_over_the_worker_s_transfers_by_hand(
    model, iteration_ms, backward_a_ms
):
    """``overlap_model`` in the PS arena by hand, on the two 1 MB layers of the message CPU's
    test (forward 10 ms, backward 20 each, 1 MB = 1 ms on a link, aggregation 1 ms), with an
    ``overlap_slowdown`` of 1. b's push starts as a's backward does (20-21 ms after the
    backward's start) and b's pull comes back 22-23 ms. ``start``: a's backward starts with
    the uplink busy, so it takes twice its 20 ms. ``integrated``: it runs at half speed while
    the push and the pull run, 2 ms, losing 1 ms. The forward ops find the links idle. The
    iteration: 20 + 20 + a's backward + a's push, aggregation and pull (3 ms)."""
    _, result = run_layers(
        "tictac-tic",
        TWO_LAYERS,
        workers=1,
        ps=1,
        servers=1,
        bandwidth_gbps=8,
        server_agg_gbps=8,
        latency_us=0,
        overlap_slowdown=1.0,
        overlap_model=model,
        iterations=4,
    )
    times = [r["iteration_time_s"] for r in result.series]
    assert times == pytest.approx([iteration_ms / 1e3] * len(times), rel=1e-9)
    ops = defaultdict(list)
    for _, r, op, name, s, e, _ in result.timeline:
        if r == "compute":
            ops[op, name].append(e - s)
    expected = {("backward", "a"): backward_a_ms / 1e3, ("backward", "b"): 0.020}
    for key, durations in ops.items():
        assert durations == pytest.approx([expected.get(key, 0.010)] * len(durations)), key


@pytest.mark.parametrize(("at", "charged"), [("transfer", ("b",)), ("handover", ("b", "a"))])
def test_a_push_s_cpu_is_charged_as_it_is_handed_over_by_hand(at, charged):
    """``message_cpu_at`` by hand. Three 1 MB layers a -> b -> c (forward 10 ms, backward 20
    ms each), one worker, one PS, 0.16 Gbit/s (1 MB = 50 ms), no latency, 500 us a message.
    Backward runs c, b, a (0-20, 20-40, 40-60 ms after it starts). c's push starts at once
    (the link is idle) and takes its CPU from b's backward either way. b's gradient is handed
    over at 40 ms, a computing, but its push waits for the link until 70 ms, the backward
    over: ``transfer`` charges it nothing, ``handover`` charges it to a's backward. a's push
    comes with the backward's end: nothing to charge."""
    layers = (
        LayerTimes("a", 0.010, 0.020, MB),
        LayerTimes("b", 0.010, 0.020, MB, (0,)),
        LayerTimes("c", 0.010, 0.020, MB, (1,)),
    )
    _, result = run_layers(
        "tictac-tic",
        layers,
        workers=1,
        ps=1,
        servers=1,
        bandwidth_gbps=0.16,
        server_agg_gbps=80,
        latency_us=0,
        message_cpu_us=500,
        message_cpu_at=at,
        iterations=3,
    )
    for name in "abc":
        backward = [e - s for _, r, op, n, s, e, _ in result.timeline
                    if r == "compute" and op == "backward" and n == name]  # fmt: skip
        cpu = 500e-6 if name in charged else 0.0
        assert backward == pytest.approx([0.020 + cpu] * len(backward), rel=1e-9), name


def test_the_push_cpu_s_moment_needs_the_cpu():
    """``message_cpu_at`` other than its default needs ``message_cpu_us`` (nothing to charge
    otherwise), and takes only its two values; left at its default, a PS spec's run key is
    the one from before the field."""
    with pytest.raises(SpecError, match="needs cluster.message_cpu_us") as err:
        validate(raw_spec("ps-default", message_cpu_at="handover"))
    assert err.value.field == "cluster.message_cpu_at"
    with pytest.raises(SpecError, match="transfer or handover") as err:
        validate(raw_spec("ps-default", message_cpu_us=5, message_cpu_at="never"))
    assert err.value.field == "cluster.message_cpu_at"
    with pytest.raises(SpecError, match="parameter-server arena only"):
        validate(raw_spec("wfbp", message_cpu_us=5, message_cpu_at="handover"))
    assert "message_cpu_at" not in validate(raw_spec("ps-default")).as_dict()["cluster"]
    spec = validate(raw_spec("ps-default", message_cpu_us=5, message_cpu_at="handover"))
    assert spec.cluster.message_cpu_at == "handover"


@pytest.mark.parametrize(
    ("host", "iteration_ms"),
    [
        ({}, 63.0),  # no host: the network and the compute set the pace
        ({"host_cores": 2, "host_message_cpu_us": 5000}, 63.0),  # floor (60 + 20) / 2: below
        ({"host_cores": 1, "host_message_cpu_us": 5000}, 80.0),  # 60 + 4 x 5 ms
        ({"host_cores": 1, "host_cpu_ns_per_byte": 2.5, "host_message_cpu_us": 0}, 70.0),
    ],
)
def test_the_host_s_cpu_holds_each_iteration_to_its_work_over_the_cores_by_hand(host, iteration_ms):
    """``host_cores`` by hand, on the two 1 MB layers of the message CPU's test (63 ms an
    iteration): the host's work in an iteration is the compute (4 ops of 10 + 20 ms: 60 ms)
    and 4 messages (2 pushes, 2 pulls) of ``host_message_cpu_us + 1 MB x
    host_cpu_ns_per_byte``, over the cores. The first forward op of an iteration waits until
    that long after the previous iteration's started, so every iteration lasts the larger of
    the two."""
    layers = (LayerTimes("a", 0.010, 0.020, MB), LayerTimes("b", 0.010, 0.020, MB, (0,)))
    _, result = run_layers(
        "tictac-tic",
        layers,
        workers=1,
        ps=1,
        servers=1,
        bandwidth_gbps=8,
        server_agg_gbps=8,
        latency_us=0,
        iterations=4,
        **host,
    )
    times = [r["iteration_time_s"] for r in result.series]
    assert times == pytest.approx([iteration_ms / 1e3] * len(times), rel=1e-9)
    floor = result.metrics.get("host_cpu_floor_s")
    if not host:
        assert floor is None and "host_cpu_s" not in result.metrics
    else:
        work = 0.060 + 4 * (host.get("host_message_cpu_us", 0) * 1e-6
                            + MB * host.get("host_cpu_ns_per_byte", 0) * 1e-9)  # fmt: skip
        assert floor == pytest.approx(work / host["host_cores"], rel=1e-9)
        # the host's work itself, which fidelity sets beside the real runs' CPU time
        assert result.metrics["host_cpu_s"] == pytest.approx(work, rel=1e-9)
    starts = sorted(s for _, r, op, name, s, _, _ in result.timeline
                    if r == "compute" and op == "forward" and name == "a")  # fmt: skip
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) >= (floor or 0.0) - 1e-12


def test_the_host_s_floor_counts_every_worker_s_compute_and_messages():
    """Two identical workers on a 2-core host cost it what one worker costs a 1-core host:
    the same floor. A real workload, where the floor binds (its keys' messages at 600 us
    each), and a host of 64 cores that it does not bind on."""
    kw = dict(ps=4, servers=4, bandwidth_gbps=10, latency_us=0, iterations=6, warmup=2)
    one = run("ps-default", "resnet50", workers=1, host_cores=1, host_message_cpu_us=600, **kw)
    two = run("ps-default", "resnet50", workers=2, host_cores=2, host_message_cpu_us=600, **kw)
    free = run("ps-default", "resnet50", workers=2, **kw)
    floor = two[1].metrics["host_cpu_floor_s"]
    assert floor == pytest.approx(one[1].metrics["host_cpu_floor_s"], rel=1e-9)
    assert free[1].metrics["iteration_time_s"] < floor, "the floor binds here"
    assert two[1].metrics["iteration_time_s"] == pytest.approx(floor, rel=1e-6)
    four = run("ps-default", "resnet50", workers=2, host_cores=64, host_message_cpu_us=600, **kw)
    assert four[1].metrics["iteration_time_s"] == pytest.approx(
        free[1].metrics["iteration_time_s"], rel=1e-9
    ), "a floor below the pace changes nothing"


def test_the_host_fields_are_the_ps_arena_s_and_need_the_cores():
    with pytest.raises(SpecError, match="parameter-server arena only") as err:
        validate(raw_spec("wfbp", host_cores=2))
    assert err.value.field == "cluster.host_cores"
    for field in ("host_message_cpu_us", "host_cpu_ns_per_byte"):
        with pytest.raises(SpecError, match="needs cluster.host_cores") as err:
            validate(raw_spec("ps-default", **{field: 10.0}))
        assert err.value.field == f"cluster.{field}"
        with pytest.raises(SpecError) as err:
            validate(raw_spec("ps-default", host_cores=2, **{field: -1.0}))
        assert err.value.field == f"cluster.{field}"
    with pytest.raises(SpecError) as err:
        validate(raw_spec("ps-default", host_cores=-1))
    assert err.value.field == "cluster.host_cores"
    cluster = validate(raw_spec("ps-default")).as_dict()["cluster"]
    assert not {"host_cores", "host_message_cpu_us", "host_cpu_ns_per_byte"} & set(cluster)


TWO_LAYERS = (LayerTimes("a", 0.010, 0.020, MB), LayerTimes("b", 0.010, 0.020, MB, (0,)))
HAND = dict(workers=1, ps=1, servers=1, bandwidth_gbps=8, server_agg_gbps=8, latency_us=0)


@pytest.mark.parametrize(("model", "backward_a_end_ms"), [("fair", 61.5), ("messages-first", 63.0)])
def test_shared_cores_slow_the_compute_while_messages_want_more_than_the_cores_by_hand(
    model, backward_a_end_ms
):
    """``host_cpu_model`` fair / messages-first by hand, on the message CPU's two 1 MB layers,
    2 cores, 5 ms of host CPU per message. Iteration 0: the forward and b's backward alone
    (0-40 ms). a's backward starts at 40 with b's push (a 5 ms task): 2 wants, 2 cores, full
    speed. At 42 b's pull starts (another 5 ms): 3 wants. fair: each 2/3 until the push's
    task ends at 46.5 (3 ms left at 2/3), a's backward then 15 ms left at full speed: 61.5.
    messages-first: the two tasks take both cores, a's backward stops until the push's ends
    at 45, then runs at full speed beside the pull's: 18 ms left, 63."""
    _, result = run_layers(
        "tictac-tic", TWO_LAYERS, **HAND, iterations=4, host_cores=2,
        host_message_cpu_us=5000, host_cpu_model=model,
    )  # fmt: skip
    ops = {(name, op): (s, e) for i, r, op, name, s, e, _ in result.timeline
           if i == 0 and r == "compute"}  # fmt: skip
    assert ops[("b", "backward")] == pytest.approx((0.020, 0.040), rel=1e-9)
    assert ops[("a", "backward")] == pytest.approx((0.040, backward_a_end_ms / 1e3), rel=1e-9)
    assert "host_cpu_floor_s" not in result.metrics  # no floor: the cores are shared
    assert result.metrics["host_cpu_s"] == pytest.approx(0.060 + 4 * 0.005, rel=1e-9)


@pytest.mark.parametrize("model", ["fair", "messages-first"])
def test_shared_cores_that_never_idle_give_the_floor_s_iteration(model):
    """One core that always has work (the worker's compute or a message's CPU, 5 ms each):
    every iteration takes exactly the host's work, 60 ms of compute and 4 messages, as the
    floor says; the sharing changes only who waits."""
    _, result = run_layers(
        "tictac-tic", TWO_LAYERS, **HAND, iterations=6, host_cores=1,
        host_message_cpu_us=5000, host_cpu_model=model,
    )  # fmt: skip
    times = measured_series(None, result)
    assert times == pytest.approx([0.080] * len(times), rel=1e-9)


def test_shared_cores_idle_while_the_workers_wait_where_the_floor_packs_them():
    """A real workload on a 2-core host whose network sets the pace: the floor's twin says the
    cores are all busy only where its iteration is the floor; shared cores leave them idle while
    the workers wait for their pulls (under 2 cores busy), and slow the compute where the
    messages' CPU meets it (a longer iteration than without a host)."""
    kw = dict(workers=2, ps=2, servers=2, bandwidth_gbps=1, latency_us=0, iterations=6, warmup=2,
              host_cores=2, host_message_cpu_us=600, host_cpu_ns_per_byte=5.0)  # fmt: skip
    free = run("ps-default", "vgg16", **{k: v for k, v in kw.items() if not k.startswith("host")})
    for model in ("fair", "messages-first"):
        _, shared = run("ps-default", "vgg16", host_cpu_model=model, **kw)
        it = shared.metrics["iteration_time_s"]
        assert it > free[1].metrics["iteration_time_s"]
        assert shared.metrics["host_cpu_s"] / it < 2.0, "the cores idle at times"


def test_shared_cores_need_the_host_and_replace_the_other_cpu_charges():
    with pytest.raises(SpecError, match="needs cluster.host_cores") as err:
        validate(raw_spec("ps-default", host_cpu_model="fair"))
    assert err.value.field == "cluster.host_cpu_model"
    for field in ("message_cpu_us", "overlap_slowdown"):
        with pytest.raises(SpecError, match="must be 0 with cluster.host_cpu_model") as err:
            validate(raw_spec("ps-default", host_cores=2, host_cpu_model="fair", **{field: 1.0}))
        assert err.value.field == f"cluster.{field}"
    with pytest.raises(SpecError, match="floor or fair or messages-first") as err:
        validate(raw_spec("ps-default", host_cores=2, host_cpu_model="greedy"))
    assert err.value.field == "cluster.host_cpu_model"
    with pytest.raises(SpecError, match="parameter-server arena only"):
        validate(raw_spec("wfbp", host_cores=2, host_cpu_model="fair"))
    floor = validate(raw_spec("ps-default", host_cores=2)).as_dict()["cluster"]
    assert "host_cpu_model" not in floor  # the default is left out: run keys stay the same


def test_a_key_migration_passes_at_the_rate_and_keeps_the_bucket_s_clock():
    """PSLD's migrations do not use the bucket, and the bucket does not fill while one sends
    at the rate: a server NIC whose bucket was empty at 0, at 8 Gbit/s (1 MB/ms), migrating
    1 MB from 0.5 ms has filled half a MB by then, takes 1 ms, and still holds half a MB at
    its end (not the 1.5 MB's worth the elapsed time would give)."""
    spec = validate(raw_spec("psld", ps=2, servers=2, bandwidth_gbps=8, link_burst_bytes=4 * MB))
    setup, plan = plan_of(spec)
    job = ps_sim._PSJob(setup, spec, plan)
    st = job.s_in[0]
    st.tokens, st.tokens_at = 0.0, 0.0
    job.loop.now = 0.0005
    job._begin_migration(st, 0, MB, 0)
    assert st.free_at == pytest.approx(0.0015, rel=1e-12)
    assert (st.tokens, st.tokens_at) == pytest.approx((MB / 2, 0.0015), rel=1e-12)


def test_each_group_pays_for_its_own_messages():
    """The same two layers, two workers, worker 1 twice as slow (a group of its own). Worker
    0's b push starts as its a backward does (it pays once); b's pull waits for worker 1's
    push and arrives after worker 0's a backward ended (free for it), but while worker 1's a
    backward runs: worker 1 pays for its push and its pull."""
    layers = (LayerTimes("a", 0.010, 0.020, MB), LayerTimes("b", 0.010, 0.020, MB, (0,)))
    kw = dict(workers=2, ps=1, servers=1, bandwidth_gbps=8, server_agg_gbps=8, latency_us=0,
              stragglers=[{"worker": 1, "slowdown": 2}], iterations=4)  # fmt: skip

    def backward_a(cpu_us):
        _, result = run_layers("tictac-tic", layers, message_cpu_us=cpu_us, **kw)
        out = defaultdict(list)
        for _, resource, op, name, s, e, _ in result.timeline:
            if op == "backward" and name == "a":
                out[resource].append(e - s)
        return out

    base, charged = backward_a(0), backward_a(500)
    assert set(base) == {"compute[w0]", "compute[w1]"}
    for resource, paid in (("compute[w0]", 1), ("compute[w1]", 2)):
        expected = [t + paid * 500e-6 for t in base[resource]]
        assert charged[resource] == pytest.approx(expected, rel=1e-9), resource


def test_message_cpu_is_the_ps_arena_s_field():
    """The all-reduce arena refuses ``message_cpu_us`` (its collectives have
    ``collective_cpu_us``); left out, a PS spec's run key is the one from before the field."""
    with pytest.raises(SpecError, match="parameter-server arena only") as err:
        validate(raw_spec("wfbp", message_cpu_us=10.0))
    assert err.value.field == "cluster.message_cpu_us"
    with pytest.raises(SpecError) as err:
        validate(raw_spec("ps-default", message_cpu_us=-1.0))
    assert err.value.field == "cluster.message_cpu_us"
    assert "message_cpu_us" not in validate(raw_spec("ps-default")).as_dict()["cluster"]
    assert validate(raw_spec("ps-default", message_cpu_us=5)).cluster.message_cpu_us == 5.0


def test_identical_workers_with_one_order_have_no_straggler_time():
    """Workers that compute alike and receive the same order finish together: no waiting.
    One group (TicTac, ps-default with one order group) gives 0 trivially, even with compute
    jitter (drawn per group); four identical groups simulated separately under TicTac's fixed
    order also give exactly 0 (the server NIC serialises their pushes, but each group's own
    work ends at the same instant)."""
    for system, params in (("tictac-tic", None), ("ps-default", {"order_groups": 1})):
        _, result = run(system, params=params, compute_jitter_cv=0.05, iterations=4)
        assert result.metrics["straggler_time_pct"] == 0.0, system

    spec = validate(raw_spec("tictac-tic", "resnet50", iterations=4, ps=2, servers=2))
    setup, plan = plan_of(spec)
    split = dataclasses.replace(setup, groups=ps_sim.split_groups(setup.groups, 4))
    result = ps_sim.simulate(split, spec, plan)
    assert len(result.groups) == 4
    assert result.metrics["straggler_time_pct"] == 0.0
    assert result.metrics["straggler_time_mean_pct"] == 0.0


@pytest.mark.parametrize(
    ("system", "workload", "kw"),
    [
        ("ps-default", "dag", {"seed": 3, "iterations": 8, **WORKER_BOUND}),
        ("ps-default", "resnet50", {"compute_jitter_cv": 0.02, "ps": 2, "servers": 2}),
        ("ps-default", "vgg16-debug", {"bandwidth_gbps": 1, "ps": 2, "servers": 2}),
        (
            "byteps",
            "resnet50",
            {"stragglers": [{"worker": 0, "slowdown": 3}], "params": {"cross_barrier": False}},
        ),
        ("p3", "resnet50", {"stragglers": [{"worker": 3, "slowdown": 1.5}]}),
        ("psld", "resnet50", {"ps_stragglers": [{"server": 0, "bandwidth_factor": 0.5}]}),
    ],
)
def test_straggler_time_matches_the_timeline_and_lies_in_0_to_100(system, workload, kw):
    """The simulator records each group's end of work once per iteration (the uplink's free
    time when the next iteration's first gradient arrives); recomputing it from every push in
    the timeline gives the same values, and they lie in [0, 100): in sync mode a worker's last
    push of iteration i comes after the end of iteration i-1."""
    kw = {"iterations": 6, **kw}
    if workload == "dag":
        spec, result = run_layers(system, DAG, **kw)
    else:
        spec, result = run(system, workload, **kw)
    top, mean = straggler_from_timeline(spec, result)
    m = result.metrics

    assert m["straggler_time_pct"] == pytest.approx(top, rel=1e-9, abs=1e-9)
    assert m["straggler_time_mean_pct"] == pytest.approx(mean, rel=1e-9, abs=1e-9)
    assert 0.0 <= m["straggler_time_mean_pct"] <= m["straggler_time_pct"] < 100.0
    if len(result.groups) > 1:
        assert m["straggler_time_pct"] > 0.0


def test_asynchronous_eager_ps_reports_no_straggler_time():
    """Eager PS does not make workers wait for each other: the metric is not defined there."""
    _, result = run("eager-ps", stragglers=STRAGGLER, params={"server_mode": "async"})

    assert "straggler_time_pct" not in result.metrics
    assert "straggler_time_mean_pct" not in result.metrics


def test_tictac_straggler_claim_conditions_write_the_metric_to_summary_json(tmp_path):
    """The ledger's tictac-straggler-reduction experiment (its workload, cluster and params;
    few iterations here) writes straggler_time_pct, with its unit, into summary.json for the
    system and its baseline. Its cluster gives every worker its own compute noise
    (``jitter_groups`` = workers), so both systems run 8 groups that finish at different
    times (with one group TicTac's straggler time would be 0 by construction)."""
    (claim,) = [c for c in yaml.safe_load(LEDGER.read_text()) if c["id"] == TICTAC_CLAIM]
    experiment = claim["experiment"]
    assert experiment["cluster"]["jitter_groups"] == experiment["cluster"]["workers"]
    found = {}
    for system in (claim["system"], *claim["baselines"]):
        raw = {
            "system": system,
            "workload": experiment["workloads"][0],
            "cluster": dict(experiment["cluster"]),
            "params": dict(experiment["params"]),
            "iterations": 3,
            "seed": experiment["seeds"][0],
        }
        out = tmp_path / system
        run_to_directory(validate(raw), out, ["test"])
        summary = rundir.read_summary(out)
        assert summary["units"][claim["metric"]] == "%"
        found[system] = summary["metrics"][claim["metric"]]

    assert all(0.0 < v < 100.0 for v in found.values())


# --- noise groups (cluster.jitter_groups) ------------------------------------------------


def uplink_order(result, link, it):
    """Layers in the order they left ``link`` in iteration ``it``."""
    rows = [r for r in timeline_rows(result) if r["resource"] == link and r["iteration"] == it]
    return [r["layer"] for r in sorted(rows, key=lambda r: r["start_s"])]


@pytest.mark.parametrize("system", ["ps-default", "tictac-tic", "p3", "psld"])
def test_jitter_groups_1_is_the_behaviour_without_the_field(system):
    """Leaving ``cluster.jitter_groups`` out and setting it to 1 give the same spec, run key,
    metrics and timeline; and the same as simulating the groups the arena used before the
    field existed (ps-default: its order groups, one order draw each; others: one group)."""
    kw = {"compute_jitter_cv": 0.05, "ps": 2, "servers": 2, "seed": 4}
    raw = raw_spec(system, **kw)
    unset = validate(raw)
    one = validate(raw_spec(system, **kw, jitter_groups=1))

    assert unset == one
    assert "jitter_groups" not in unset.as_dict()["cluster"]
    assert grid.run_key(unset) == grid.run_key(one)

    setup, plan = plan_of(unset)
    if plan.push_order == "random":
        setup = dataclasses.replace(
            setup, groups=ps_sim.split_groups(setup.groups, plan.order_groups)
        )
    if plan.controller is not None:
        plan.controller.reseed(unset.seed)
    before = ps_sim.simulate(setup, unset, plan)
    for result in (simulate(unset), simulate(one)):
        assert result.metrics == before.metrics
        assert result.timeline == before.timeline


def test_tictac_with_4_jitter_groups_and_jitter_shows_straggler_time():
    """With noise per group TicTac's identical workers no longer finish together: four groups,
    each with its own uplink, downlink and compute stream in the timeline, and a straggler time
    above 0 (it is exactly 0 with one group)."""
    kw = {"compute_jitter_cv": 0.05, "ps": 2, "servers": 2, "iterations": 6}
    _, one = run("tictac-tic", **kw)
    spec, four = run("tictac-tic", **kw, jitter_groups=4)

    assert one.metrics["straggler_time_pct"] == 0.0
    assert [g.workers for g in four.groups] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    resources = {r["resource"] for r in timeline_rows(four)}
    for label in ("w0,4", "w1,5", "w2,6", "w3,7"):
        assert {f"uplink[{label}]", f"downlink[{label}]", f"compute[{label}]"} <= resources
    assert not {"uplink", "downlink", "compute"} & resources
    assert four.metrics["straggler_time_pct"] > 0.0
    top, mean = straggler_from_timeline(spec, four)
    assert four.metrics["straggler_time_pct"] == pytest.approx(top, rel=1e-9)
    assert four.metrics["straggler_time_mean_pct"] == pytest.approx(mean, rel=1e-9)


@pytest.mark.parametrize("jitter_groups", [1, 2, 3, 8])
@pytest.mark.parametrize(
    ("system", "params"),
    [("tictac-tic", None), ("p3", None), ("byteps", None), ("ps-default", {"order_groups": 1})],
)
def test_without_jitter_identical_workers_never_wait_whatever_the_groups(
    system, params, jitter_groups
):
    """Noise groups only matter through noise: with ``compute_jitter_cv`` 0 and one transfer
    order, identical workers end their work at the same instant however many groups simulate
    them. (The split is not free otherwise: each group's push is its own transfer at a server
    NIC, so with priority order at the servers iteration times can change; see CommCluster.)"""
    _, result = run(
        system, params=params, jitter_groups=jitter_groups, ps=2, servers=2, iterations=4
    )

    assert len(result.groups) == jitter_groups
    assert result.metrics["straggler_time_pct"] == 0.0
    assert result.metrics["straggler_time_mean_pct"] == 0.0


def test_more_jitter_groups_than_order_groups_keep_the_order_draws():
    """ps-default with its 4 order groups and 8 noise groups simulates every worker alone, but
    workers w and w+4 share one random order per iteration (still 4 independent orders: without
    jitter, w and w+4 push in the same order, w0..w3 in different ones); the jitter is drawn
    per simulated group (with it, w0 and w4 compute differently)."""
    spec, result = run("ps-default", jitter_groups=8, iterations=4)

    assert [g.workers for g in result.groups] == [(w,) for w in range(8)]
    for it in range(spec.warmup_iterations + spec.iterations):
        orders = [uplink_order(result, f"uplink[w{w}]", it) for w in range(8)]
        assert orders[:4] == orders[4:], it
        assert len({tuple(o) for o in orders[:4]}) == 4, it

    _, noisy = run("ps-default", jitter_groups=8, compute_jitter_cv=0.05, iterations=4)
    computes = defaultdict(list)
    for r in timeline_rows(noisy):
        if r["op"] == "forward":
            computes[r["resource"]].append(r["end_s"] - r["start_s"])
    assert len(computes) == 8
    assert computes["compute[w0]"] != computes["compute[w4]"]


def test_simulated_groups_split_straggler_order_and_noise_groups():
    """Groups by straggler schedule, then by order group, then by noise group; each group's
    order draw is the order group it came from."""
    base = (WorkerGroup((0,), (2.0,)), WorkerGroup((1, 2, 3, 4, 5)))
    groups, draws = ps_sim.simulated_groups(base, 2, 3)

    assert [g.workers for g in groups] == [(0,), (1,), (2,), (3,), (4,), (5,)]
    assert [g.slowdowns for g in groups] == [(2.0,)] + [()] * 5
    # order split: (0,), (1, 3, 5), (2, 4) -- then by worker % 3
    assert draws == (0, 1, 2, 1, 2, 1)
    assert ps_sim.simulated_groups(base, 1, 1) == (base, (0, 1))
    halves, draws = ps_sim.simulated_groups((WorkerGroup(tuple(range(8))),), 1, 2)
    assert [g.workers for g in halves] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert draws == (0, 0)


# --- P3 ----------------------------------------------------------------------------------


def test_p3_beats_byteps_and_ps_default_on_network_bound_vgg16():
    """vgg16 at 10 Gbit/s with 8 workers and 4 PSs is network-bound (compute 0.38 s). P3's
    small slices in priority order let the first layers' parameters return first and spread
    the huge fc layers evenly over the servers; measured 0.89 s against 1.06 s for BytePS
    (4 MB partitions, FIFO) and 2.10 s for ps-default (random order, 4 order groups)."""
    kw = {"ps": 4, "servers": 4, "iterations": 3, "warmup": 1}
    times = {s: run(s, "vgg16", **kw)[1].metrics for s in ("p3", "byteps", "ps-default")}

    assert times["p3"]["compute_time_s"] < 0.5 * times["p3"]["iteration_time_s"]
    assert times["p3"]["iteration_time_s"] < 0.9 * times["byteps"]["iteration_time_s"]
    assert times["byteps"]["iteration_time_s"] < times["ps-default"]["iteration_time_s"]


# --- eager PS ----------------------------------------------------------------------------

STRAGGLER = [{"worker": 0, "slowdown": 3}]
# 25 Gbit/s: compute-bound enough that a 3x straggler matters (resnet50 compute ~0.1 s).
EAGER = {"workers": 8, "bandwidth_gbps": 25, "iterations": 10, "warmup": 2}


@pytest.mark.parametrize("server_mode", ["async", "sync-round"])
def test_eager_ps_lets_the_fast_workers_outrun_a_straggler(server_mode):
    """BytePS is synchronous: every worker waits for the 3x straggler's push each iteration
    (0.30 s). Eager PS serves a worker's pull as soon as its own push arrived, so the seven
    fast workers run at their own pace (0.14 s against the straggler's 0.31 s), the job's
    throughput doubles, and the updates they read lag behind: mean staleness > 0."""
    _, sync = run("byteps", stragglers=STRAGGLER, **EAGER)
    spec, eager = run(
        "eager-ps", stragglers=STRAGGLER, params={"server_mode": server_mode}, **EAGER
    )
    intervals = group_intervals(spec, eager)
    m = eager.metrics

    assert set(intervals) == {"compute[w0]", "compute[w1-7]"}
    assert intervals["compute[w1-7]"] < 0.6 * intervals["compute[w0]"]
    assert m["throughput_samples_per_s"] > 1.5 * sync.metrics["throughput_samples_per_s"]
    assert m["mean_staleness"] > 0.5
    assert m["max_staleness"] >= m["mean_staleness"]
    assert 0 < m["mean_lr_scale"] < 1  # default rule: inverse


def test_eager_ps_sync_round_without_stragglers_has_no_staleness():
    """Identical workers push and pull in lockstep: every eager pull finds the round the
    worker has just contributed to complete, so staleness is 0 and the learning rate is 1."""
    _, result = run("eager-ps", params={"server_mode": "sync-round"}, **EAGER)
    m = result.metrics

    assert m["mean_staleness"] == m["max_staleness"] == 0.0
    assert m["mean_lr_scale"] == 1.0


def test_eager_ps_async_lockstep_staleness_is_workers_minus_one():
    """Asynchronous server, n identical workers in lockstep: pushes are applied one after
    another and each worker pulls right after its own, so each gradient was computed on
    parameters that miss the other n-1 workers' updates (ASGD staleness n-1)."""
    spec, result = run("eager-ps", params={"server_mode": "async"}, **EAGER)
    n = spec.cluster.workers

    assert result.metrics["max_staleness"] == n - 1
    assert result.metrics["mean_staleness"] == pytest.approx(n - 1, rel=0.02)
    assert result.metrics["mean_lr_scale"] == pytest.approx(1 / (n - 1), rel=0.05)


@pytest.mark.parametrize("lr_rule", ["inverse", "linear", "none"])
def test_eager_ps_learning_rate_scale_is_at_most_one_and_one_without_a_rule(lr_rule):
    """The learning-rate multiplier shrinks with staleness under the inverse and linear rules
    (so its mean is < 1 when there is staleness) and is 1 under 'none'; staleness itself does
    not depend on the rule (timing is the same)."""
    _, result = run("eager-ps", stragglers=STRAGGLER, params={"lr_rule": lr_rule}, **EAGER)
    _, reference = run("eager-ps", stragglers=STRAGGLER, **EAGER)
    m = result.metrics

    assert m["mean_staleness"] == reference.metrics["mean_staleness"] > 0
    if lr_rule == "none":
        assert m["mean_lr_scale"] == 1.0
    else:
        assert 0 < m["mean_lr_scale"] < 1


NEGLIGIBLE = [{"worker": 0, "slowdown": 1.0001}]
FAST_NET = {"workers": 8, "bandwidth_gbps": 100, "iterations": 10, "warmup": 2}


def test_a_negligible_straggler_hardly_changes_eager_ps_timing():
    """A 1.0001x slow-down on one worker splits the workers into two simulated groups but
    changes the iteration time by less than 0.1 % (compute-bound, 100 Gbit/s)."""
    _, one_group = run("eager-ps", **FAST_NET)
    _, two_groups = run("eager-ps", stragglers=NEGLIGIBLE, **FAST_NET)

    assert len(one_group.groups) == 1 and len(two_groups.groups) == 2
    assert two_groups.metrics["iteration_time_s"] == pytest.approx(
        one_group.metrics["iteration_time_s"], rel=1e-3
    )


def test_eager_ps_staleness_does_not_depend_on_how_workers_are_grouped():
    """Staleness is a property of the modelled job, not of the simulator's grouping of
    identical workers: the same (practically identical) timing must give the same staleness."""
    _, one_group = run("eager-ps", **FAST_NET)
    _, two_groups = run("eager-ps", stragglers=NEGLIGIBLE, **FAST_NET)

    assert two_groups.metrics["mean_staleness"] == pytest.approx(
        one_group.metrics["mean_staleness"], abs=0.5
    )
    assert two_groups.metrics["mean_lr_scale"] == pytest.approx(
        one_group.metrics["mean_lr_scale"], abs=0.05
    )


# --- PS stragglers -----------------------------------------------------------------------

ONE_ORDER = {"params": {"order_groups": 1}, "iterations": 10, "warmup": 2}


def test_a_slow_parameter_server_slows_ps_default():
    """Server 0 holds a third of resnet50's bytes (and a part of every big tensor); at a
    quarter of its NIC bandwidth every round waits for it (0.29 s -> 0.92 s), and a 20x slower
    aggregation CPU also shows (0.56 s). A straggling machine that hosts no PS (server 5 with
    4 PSs) changes nothing."""
    _, base = run("ps-default", **ONE_ORDER)
    _, slow_nic = run(
        "ps-default", ps_stragglers=[{"server": 0, "bandwidth_factor": 0.25}], **ONE_ORDER
    )
    _, slow_cpu = run("ps-default", ps_stragglers=[{"server": 0, "cpu_slowdown": 20}], **ONE_ORDER)
    _, idle = run(
        "ps-default", ps_stragglers=[{"server": 5, "bandwidth_factor": 0.25}], **ONE_ORDER
    )
    t = base.metrics["iteration_time_s"]

    assert slow_nic.metrics["iteration_time_s"] > 2 * t
    assert slow_cpu.metrics["iteration_time_s"] > 1.5 * t
    assert idle.metrics == base.metrics
    assert idle.timeline == base.timeline


def test_a_ps_straggler_window_limits_the_slowdown_to_its_iterations():
    """``from_iteration`` / ``until_iteration`` (exclusive) bound the slow-down: iterations
    before the window are identical to the unperturbed run (same random orders: one order group,
    drawn in iteration order), the window's iterations are much slower, and once the last
    slowed transfers have drained (one iteration of spill-over) the job is back to the
    unperturbed times."""
    window = {"server": 0, "bandwidth_factor": 0.25, "from_iteration": 5, "until_iteration": 8}
    spec, base = run("ps-default", **ONE_ORDER)
    _, slowed = run("ps-default", ps_stragglers=[window], **ONE_ORDER)
    a = [r["iteration_time_s"] for r in base.series]
    b = [r["iteration_time_s"] for r in slowed.series]
    assert [r["iteration"] for r in slowed.series] == list(range(len(b)))

    assert b[:5] == a[:5]
    for it in (5, 6, 7):
        assert b[it] > 2 * a[it], it
    assert b[8] >= a[8]
    assert b[9:] == pytest.approx(a[9:], rel=1e-6)


def test_a_worker_nic_straggler_slows_its_own_pushes_and_pulls_in_its_window():
    """A worker's ``bandwidth_factor`` in the PS arena: that worker becomes a group of its own
    whose pushes and pulls run at its NIC's reduced rate in the window only (each worker has
    its own NIC here, unlike a ring); the others' transfers keep the cluster's rate, and the
    synchronous rounds make everyone wait for it. Before the window nothing changes (TicTac's
    fixed order, and both runs with every worker a group of its own: how workers are grouped
    changes the server NICs' queues, see ``jitter_groups``, and a random order's draws)."""
    window = {"worker": 3, "bandwidth_factor": 0.1, "from_iteration": 5, "until_iteration": 8}
    _, base = run("tictac-tic", jitter_groups=8, iterations=10)
    _, slowed = run("tictac-tic", stragglers=[window], jitter_groups=8, iterations=10)
    a = [r["iteration_time_s"] for r in base.series]
    b = [r["iteration_time_s"] for r in slowed.series]
    assert b[:5] == a[:5]
    for it in (5, 6, 7):
        assert b[it] > 2 * a[it], it
    # two iterations of settling (the queues drain), then the unperturbed times again
    assert b[10:] == pytest.approx(a[10:], rel=1e-6)

    def push_s(result, resource, it):
        return sum(e - s for i, r, op, _, s, e, _ in result.timeline
                   if i == it and r == resource and op == "push")  # fmt: skip

    resources = {row[1] for row in slowed.timeline}
    others = "uplink[w2]"
    assert {"uplink[w3]", "downlink[w3]", others} <= resources
    # the straggler's own uplink: 10x slower in the window, as fast as the others' outside it
    assert push_s(slowed, "uplink[w3]", 6) > 5 * push_s(slowed, others, 6)
    assert push_s(slowed, "uplink[w3]", 2) == pytest.approx(push_s(slowed, others, 2))


# --- PSLD --------------------------------------------------------------------------------

PSLD = {"ps": 4, "servers": 8, "iterations": 30, "warmup": 29}


def psld_and_start(workload="resnet50", params=None, **kw):
    """PSLD's run and the run of its starting assignment (the same plan without controller)."""
    spec = validate(raw_spec("psld", workload, params=params, **{**PSLD, **kw}))
    setup, plan = plan_of(spec)
    start = ps_sim.simulate(setup, spec, dataclasses.replace(plan, controller=None))
    return spec, ps_sim.run(spec), start


def tail_mean(spec, result, n=10):
    return statistics.mean(measured_series(spec, result)[-n:])


@pytest.mark.parametrize(
    "straggler",
    [{"server": 0, "bandwidth_factor": 0.3}, {"server": 0, "cpu_slowdown": 10}],
    ids=["slow-nic", "slow-cpu"],
)
def test_psld_improves_on_its_starting_assignment_under_a_static_imbalance(straggler):
    """A server that stays slow for the whole run makes the MXNet assignment's rounds wait for
    it. PSLD measures per-server busy time and moves keys off the slowest server (migrating
    their bytes), so the last iterations are clearly faster than the starting assignment
    (measured: slow NIC 0.78 -> 0.30 s, slow CPU 0.31 -> 0.24 s)."""
    spec, psld, start = psld_and_start(ps_stragglers=[straggler])
    m = psld.metrics

    assert tail_mean(spec, psld) < 0.85 * tail_mean(spec, start)
    assert m["iteration_time_s"] < start.metrics["iteration_time_s"]
    assert max(measured_series(spec, psld)) <= max(measured_series(spec, start)) * 1.001
    assert m["ps_migrated_bytes"] > 0
    assert m["psld_changes"] > 0
    assert m["ps_servers_used"] <= spec.cluster.servers


def test_psld_without_imbalance_or_exploration_does_not_slow_resnet50():
    """With identical servers and epsilon 0 PSLD only makes best-fit moves and reverts those
    that did not pay off; on resnet50 (whose hashed assignment is uneven) it ends faster than
    where it started (0.287 -> 0.225 s)."""
    spec, psld, start = psld_and_start(params={"epsilon": 0.0})

    assert tail_mean(spec, psld) <= tail_mean(spec, start)
    assert psld.metrics["iteration_time_s"] <= start.metrics["iteration_time_s"]


def test_psld_without_imbalance_or_exploration_does_not_slow_vgg16():
    """The same promise as on resnet50: with identical servers and no exploration PSLD's
    measured iterations should be no slower than its starting assignment."""
    spec, psld, start = psld_and_start("vgg16", params={"epsilon": 0.0})

    assert psld.metrics["iteration_time_s"] <= start.metrics["iteration_time_s"] * 1.01
    assert tail_mean(spec, psld) <= tail_mean(spec, start) * 1.01


def test_psld_scales_out_from_a_single_overloaded_ps():
    """Starting with one PS on 4 machines, the lone server carries all the traffic; no move is
    possible, so PSLD scales out (keys migrate to a new server) and the job gets faster
    (measured 0.76 -> 0.42 s)."""
    spec, psld, start = psld_and_start(
        params={"epsilon": 0.0}, ps=1, servers=4, iterations=12, warmup=11
    )

    assert psld.metrics["ps_servers_used"] >= 2
    assert start.metrics["ps_servers_used"] == 1
    assert psld.metrics["ps_migrated_bytes"] > 0
    assert tail_mean(spec, psld, 5) < 0.7 * tail_mean(spec, start, 5)


def controller(**kw):
    """Three active servers of 1,000 B/s; key k of ``sizes`` on server ``assignment[k]``."""
    args = {
        "sizes": [600, 400, 100, 100],
        "assignment": [0, 0, 1, 2],
        "active": [0, 1, 2],
        "max_servers": 4,
        "window": 1,
        "epsilon": 0.0,
        "scale_out_ratio": 1.5,
        "scale_in_utilisation": 0.2,
        "server_bytes_per_s": 1000.0,
    }
    return PSLDController(**{**args, **kw})


BUSY = [1.0, 0.4, 0.4, 0.0]  # server 0 dominates; server 3 is not active


def test_psld_controller_moves_waits_one_round_and_reverts_a_move_that_made_it_slower():
    """Server 0 is busiest: the best-fit move sends its 400-byte key (0.4 s) to server 1, the
    least busy. The next round is skipped (settling), and when the round after is slower than
    the one before the change, the previous assignment comes back."""
    c = controller()

    assert c.observe(1, 1.5, BUSY) == [0, 1, 1, 2]
    assert c.observe(2, 1.5, BUSY) is None  # settling after the change
    assert c.observe(3, 1.6, BUSY) == [0, 0, 1, 2]
    assert (c.changes, c.reverts) == (1, 1)
    assert [action for _, action, _ in c.history] == ["move", "revert"]


def test_psld_controller_keeps_a_move_that_did_not_make_it_slower():
    """A change that left the iteration no slower is kept and the search goes on from it."""
    c = controller()
    c.observe(1, 1.5, BUSY)
    c.observe(2, 1.5, BUSY)

    following = c.observe(3, 1.4, [0.6, 0.8, 0.4, 0.0])
    assert c.reverts == 0
    assert following is not None and following[1] == 1  # the moved key stays on server 1


def test_psld_controller_scales_out_when_one_server_dominates_and_no_move_helps():
    """Server 0 is busy 1.0 s with two 0.6 s keys; moving one to a 0.4 s server would make
    that one 1.0 s (no gain), so no move helps, and 1.0 s > 1.5 x the mean (0.6 s): PSLD adds
    the lowest unused server and moves one key onto it. Reverting also restores the active
    set."""
    c = controller(sizes=[600, 600, 100, 100])

    new = c.observe(1, 1.5, BUSY)
    assert c.active == [0, 1, 2, 3]
    assert sorted(new) == [0, 1, 2, 3] and new[2:] == [1, 2]
    assert c.history[-1][1] == "scale-out"
    c.observe(2, 1.5, BUSY)
    assert c.observe(3, 2.0, BUSY) == [0, 0, 1, 2]
    assert c.active == [0, 1, 2]


def test_psld_controller_does_not_scale_out_beyond_max_servers():
    """With every allowed server already active there is nothing to scale out to."""
    c = controller(sizes=[600, 600, 100, 100], max_servers=3)

    assert c.observe(1, 1.5, BUSY) is None
    assert c.active == [0, 1, 2] and c.changes == 0


def test_psld_controller_does_not_retry_a_move_it_just_reverted():
    """A move that was reverted because it made the job slower should not be proposed again
    at once when nothing in the measurements has changed."""
    c = controller()
    first = c.observe(1, 1.5, BUSY)
    c.observe(2, 1.5, BUSY)
    c.observe(3, 1.6, BUSY)  # revert
    c.observe(4, 1.5, BUSY)  # settling

    assert c.observe(5, 1.5, BUSY) != first


# --- determinism -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "params"),
    [("psld", {"epsilon": 0.5, "window": 2}), ("ps-default", None)],
)
def test_the_same_seed_gives_the_same_timeline(system, params):
    """Random orders (ps-default), exploration (psld with epsilon 0.5), compute jitter and a
    straggling server are all drawn from the spec's seed: the same seed replays the same run
    exactly (PSLD's decisions included), another seed does not."""
    kw = {
        "params": params,
        "iterations": 10,
        "warmup": 2,
        "compute_jitter_cv": 0.05,
        "ps_stragglers": [{"server": 1, "bandwidth_factor": 0.5}],
    }
    _, a = run(system, seed=5, **kw)
    _, again = run(system, seed=5, **kw)
    _, other = run(system, seed=6, **kw)

    assert a.timeline == again.timeline
    assert a.metrics == again.metrics
    assert a.timeline != other.timeline
    if system == "psld":
        assert a.metrics["psld_changes"] > 0


def test_a_rendezvous_pull_waits_for_the_worker_s_receiver_and_holds_its_server():
    """``pull_rendezvous`` by hand, on the stations alone. Two workers, two servers, 1 MB
    keys at 8 Gbit/s (1 MB/ms on every NIC), no latency. Server 1 sends a pull to worker 0
    at 0: it holds both until 1 ms. Server 0's pull to worker 0, offered at 0, waits for
    that receiver (1-2 ms), and its pull to worker 1, queued behind it, waits for server 0
    although worker 1's receiver is free: 2-3 ms. (A buffered transport would have sent it
    to worker 1 at once.)"""
    layers = tuple(LayerTimes(f"l{i}", 1.0, 1.0, MB) for i in range(3))  # no push for 1 s
    spec = validate(raw_spec("tictac-tic", workers=2, ps=2, servers=2, bandwidth_gbps=8,
                             latency_us=0, pull_rendezvous=True))  # fmt: skip
    setup, plan = plan_of(spec, layers)
    setup = dataclasses.replace(setup, groups=ps_sim.split_groups(setup.groups, 2))
    job = ps_sim._PSJob(setup, spec, plan)
    assert [t.size_bytes for t in plan.tasks] == [MB] * 3
    for g in (0, 1):
        job._group_state(g, 0)
    job._enqueue(job.s_out[1], 0, 0, (0, 1, 0, 1))  # task 1 to worker 0 from server 1
    job._enqueue(job.s_out[0], 0, 0, (0, 0, 0, 0))  # task 0 to worker 0 from server 0
    job._enqueue(job.s_out[0], 0, 0, (0, 0, 1, 0))  # task 0 to worker 1 from server 0
    job.loop.run(until=0.010)  # the forwards the pulls of l0 let start end at 1 s
    pulls = sorted((r, name, round(s * 1e3, 9), round(e * 1e3, 9))
                   for _, r, op, name, s, e, _ in job.timeline if op == "pull")  # fmt: skip
    assert pulls == [
        ("downlink[w0]", "l0", 1.0, 2.0),
        ("downlink[w0]", "l1", 0.0, 1.0),
        ("downlink[w1]", "l0", 2.0, 3.0),
        ("ps0.out", "l0", 1.0, 2.0),
        ("ps0.out", "l0", 2.0, 3.0),
        ("ps1.out", "l1", 0.0, 1.0),
    ]
    assert [row[0] for row in job.synced if row[2] == 0] == [0, 1]  # both workers got task 0


@pytest.mark.parametrize("rendezvous", [False, True])
def test_a_rendezvous_push_waits_for_the_server_s_receiver_and_holds_its_sender(rendezvous):
    """``push_rendezvous`` by hand, on the stations alone. Two workers, two servers, 1 MB
    keys at 8 Gbit/s (1 MB/ms on every NIC), no latency. Worker 0 pushes key 0 to server 0
    at 0: it holds both until 1 ms. Worker 1's push of key 0, offered at 0, waits for that
    receiver (1-2 ms), and its push of key 1 to server 1, queued behind it, waits for worker
    1's sender although server 1 is free: 2-3 ms. Cut-through (the default), worker 1's
    uplink sends both at once (0-1, 1-2 ms) and server 0's NIC takes key 0 after worker 0's
    (1-2 ms)."""
    layers = tuple(LayerTimes(f"l{i}", 1.0, 1.0, MB) for i in range(3))  # no push for 1 s
    spec = validate(raw_spec("tictac-tic", workers=2, ps=2, servers=2, bandwidth_gbps=8,
                             latency_us=0, push_rendezvous=rendezvous))  # fmt: skip
    setup, plan = plan_of(spec, layers)
    setup = dataclasses.replace(setup, groups=ps_sim.split_groups(setup.groups, 2))
    job = ps_sim._PSJob(setup, spec, plan)
    job._assignment(0)
    for g in (0, 1):
        job._group_state(g, 0)
    job._enqueue(job.uplink[0], 0, 0, (0, 0, 0, 0))  # key 0 from worker 0 to server 0
    job._enqueue(job.uplink[1], 0, 0, (0, 0, 1, 0))  # key 0 from worker 1 to server 0
    job._enqueue(job.uplink[1], 0, 0, (0, 1, 1, 1))  # key 1 from worker 1 to server 1
    job.loop.run(until=0.010)
    pushes = sorted((r, name, round(s * 1e3, 9), round(e * 1e3, 9))
                    for _, r, op, name, s, e, _ in job.timeline if op == "push")  # fmt: skip
    if rendezvous:
        assert pushes == [
            ("ps0.in", "l0", 0.0, 1.0),
            ("ps0.in", "l0", 1.0, 2.0),
            ("ps1.in", "l1", 2.0, 3.0),
            ("uplink[w0]", "l0", 0.0, 1.0),
            ("uplink[w1]", "l0", 1.0, 2.0),
            ("uplink[w1]", "l1", 2.0, 3.0),
        ]
    else:
        assert pushes == [
            ("ps0.in", "l0", 0.0, 1.0),
            ("ps0.in", "l0", 1.0, 2.0),
            ("ps1.in", "l1", 1.0, 2.0),
            ("uplink[w0]", "l0", 0.0, 1.0),
            ("uplink[w1]", "l0", 0.0, 1.0),
            ("uplink[w1]", "l1", 1.0, 2.0),
        ]
    # both pushes of key 0 are in at 2 ms: its round is aggregated then
    aggregated = [s for _, r, op, name, s, *_ in job.timeline if op == "aggregate"]
    assert [round(s * 1e3, 9) for s in aggregated][:1] == [2.0]


@pytest.mark.parametrize("system", ["ps-default", "tictac-tic", "p3", "eager-ps", "psld"])
def test_with_one_worker_and_one_server_a_rendezvous_push_is_the_cut_through_one(system):
    """One worker, one server: the server's receiver takes only that worker's pushes, one at
    a time either way, so both models give the same run (token bucket and CPU charges on)."""
    kw = dict(workers=1, ps=1, servers=1, bandwidth_gbps=1, latency_us=300,
              message_cpu_us=400, iterations=5)  # fmt: skip
    _, cut = run(system, "vgg16-debug", **kw)
    _, held = run(system, "vgg16-debug", push_rendezvous=True, **kw)
    assert held.metrics["iteration_time_s"] == pytest.approx(
        cut.metrics["iteration_time_s"], rel=1e-9
    )


def test_rendezvous_pushes_change_a_network_bound_run_and_are_the_ps_arena_s_field():
    """Three workers pushing to two servers: the held senders change the run against
    cut-through with the same groups (slower for ps-default here, whose random orders make
    workers push different keys at once; not always slower: the servers take the pushes in
    the order offered, not by priority, and that reorders the rounds); every worker is a
    group of its own; the all-reduce arena refuses the field; left out, a PS spec's run key
    is the one from before it."""
    kw = dict(workers=3, ps=2, servers=2, bandwidth_gbps=0.5, iterations=8, jitter_groups=3)
    _, cut = run("ps-default", "vgg16-debug", **kw)
    spec, held = run("ps-default", "vgg16-debug", push_rendezvous=True, **kw)
    assert held.metrics["iteration_time_s"] > cut.metrics["iteration_time_s"] * 1.05
    assert [g.workers for g in held.groups] == [(0,), (1,), (2,)]
    setup, plan = plan_of(spec)
    with pytest.raises(ValueError, match="one worker per group"):
        ps_sim._PSJob(setup, spec, plan)
    with pytest.raises(SpecError, match="parameter-server arena only") as err:
        validate(raw_spec("wfbp", push_rendezvous=True))
    assert err.value.field == "cluster.push_rendezvous"
    assert "push_rendezvous" not in validate(raw_spec("ps-default")).as_dict()["cluster"]


@pytest.mark.parametrize("system", ["ps-default", "tictac-tic", "p3", "eager-ps"])
def test_with_one_worker_a_rendezvous_pull_is_the_cut_through_one(system):
    """One worker: a server's pull goes to one receiver either way, and nothing else
    contends for it, so both models give the same run (token bucket and CPU charges on)."""
    kw = dict(workers=1, ps=2, servers=2, bandwidth_gbps=1, latency_us=300,
              link_burst_bytes=250_000, message_cpu_us=400, iterations=5)  # fmt: skip
    _, cut = run(system, "vgg16-debug", **kw)
    _, held = run(system, "vgg16-debug", pull_rendezvous=True, **kw)
    assert held.metrics["iteration_time_s"] == pytest.approx(
        cut.metrics["iteration_time_s"], rel=1e-9
    )


def test_rendezvous_pulls_make_every_worker_a_group_and_are_the_ps_arena_s_field():
    """With ``pull_rendezvous`` every worker is a group of its own (a pull goes to one
    receiver); the stations refuse a group of several workers; the all-reduce arena refuses
    the field; left out, a PS spec's run key is the one from before it."""
    spec, result = run("tictac-tic", "vgg16-debug", workers=3, ps=2, servers=2,
                       pull_rendezvous=True)  # fmt: skip
    assert [g.workers for g in result.groups] == [(0,), (1,), (2,)]
    setup, plan = plan_of(spec)
    with pytest.raises(ValueError, match="one worker per group"):
        ps_sim._PSJob(setup, spec, plan)
    with pytest.raises(SpecError, match="parameter-server arena only") as err:
        validate(raw_spec("wfbp", pull_rendezvous=True))
    assert err.value.field == "cluster.pull_rendezvous"
    assert "pull_rendezvous" not in validate(raw_spec("ps-default")).as_dict()["cluster"]


def test_a_ps_run_takes_the_steps_noise_and_waits_for_its_slowest_worker():
    """``step_jitter_cv`` in the PS arena (the all-reduce arena's, measured by ``calibrate``):
    a synchronous PS step waits for every worker's pushes, so per-step noise makes the
    iteration slower on average, more with more workers (compute-bound here: resnet50 at
    100 Gbit/s); without it nothing changes."""
    kw = dict(ps=2, servers=2, iterations=30, bandwidth_gbps=100)
    base = run("tictac-tic", workers=4, **kw)[1].metrics["iteration_time_s"]
    noisy = {w: run("tictac-tic", workers=w, step_jitter_cv=0.3, **kw)[1] for w in (1, 4)}
    assert noisy[4].metrics["iteration_time_s"] > base * 1.15  # the slowest of 4: about +25 %
    assert noisy[4].metrics["iteration_time_s"] > noisy[1].metrics["iteration_time_s"] * 1.15
    again = run("tictac-tic", workers=4, step_jitter_cv=0.0, **kw)[1]
    assert again.metrics["iteration_time_s"] == base


def test_psld_migrates_keys_under_rendezvous_pushes_and_pulls():
    """Migrations share a server's receiver with the held pushes (they go first): a PSLD run
    with both rendezvous moves keys and still ends every iteration (no sender left waiting),
    and its per-worker timelines hold every push."""
    slow_nic = [{"server": 0, "bandwidth_factor": 0.3}]
    kw = dict(PSLD, workers=2, push_rendezvous=True, pull_rendezvous=True, ps_stragglers=slow_nic)
    spec = validate(raw_spec("psld", **kw))
    psld = ps_sim.run(spec)
    m = psld.metrics
    assert m["ps_migrated_bytes"] > 0 and m["psld_changes"] > 0
    assert len(measured_series(spec, psld)) == spec.iterations
    pushes = Counter(r for _, r, op, *_ in psld.timeline if op == "push")
    assert pushes["uplink[w0]"] == pushes["uplink[w1]"] > 0
    assert sum(n for r, n in pushes.items() if r.endswith(".in")) == 2 * pushes["uplink[w0]"]
