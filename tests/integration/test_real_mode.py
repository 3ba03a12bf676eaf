"""Real mode end to end: ranks started by torchrun train for real, through the command line's
code path (``runners.execute.run_to_directory``).

Correctness: the exact schedulers end with the weights of single-process SGD on the same global
batch; the delayed all-reduce rules end with the weights their documented update equations give
(computed here, in one process). The emulated network shapes bandwidth (measured), and leaves
nothing behind, even when the launcher is killed.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

import workloads
from runners.execute import run_to_directory
from runners.real import delayline, launch, testbed
from runners.spec import SpecError, validate
from tests.conftest import EXACT_SCHEDULERS, require_horovod, require_root, torchrun, wait_for
from workloads import data
from workloads.models import build_model

ROOT = Path(__file__).resolve().parents[2]
MODEL = "vgg16-debug"  # no batch norm: data-parallel SGD equals single-process SGD exactly
STEPS = 4  # 1 warm-up + 3 measured
LR, MOMENTUM = 0.05, 0.9


def _spec(system: str, params: dict | None = None, **real) -> dict:
    return {
        "system": system,
        "mode": "real",
        "workload": MODEL,
        "cluster": {"workers": 2, "bandwidth_gbps": 1},
        "params": params or {},
        "iterations": STEPS - 1,
        "warmup_iterations": 1,
        "seed": 3,
        "real": {
            "network": "loopback",
            "dataset": "shapes",
            "lr": LR,
            "momentum": MOMENTUM,
            **real,
        },
    }


def _run(raw: dict, out: Path, monkeypatch) -> tuple[dict, list[dict]]:
    monkeypatch.setenv("LAB_REAL_SAVE_PARAMS", "1")
    summary = run_to_directory(validate(raw), out, ["test"])
    params = [torch.load(out / f"params{r}.pt") for r in range(2)]
    return summary, params


def _rank_grads(models: list, step: int, seed: int, rng: torch.Tensor) -> torch.Tensor:
    """Each rank's gradients of ``step`` on its own batch (into ``models[r]``'s ``.grad``).
    Every rank seeds torch alike, so their dropout masks are the same draws: replay them."""
    loss_fn = data.loss_fn(MODEL)
    for r, model in enumerate(models):
        torch.set_rng_state(rng)
        model.zero_grad()
        x, y = data.batch(MODEL, "shapes", 8, seed, r, 2, step)
        loss_fn(model(x), y).backward()
    return torch.get_rng_state()


def _reference_sgd(seed: int) -> dict:
    """Single-process SGD on the global batch of each step (the mean of the ranks' losses)."""
    torch.manual_seed(seed)
    model = build_model(MODEL)
    rng = torch.get_rng_state()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = data.loss_fn(MODEL)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(2):
            torch.set_rng_state(rng)
            x, y = data.batch(MODEL, "shapes", 8, seed, r, 2, step)
            (loss_fn(model(x), y) / 2).backward()
        rng = torch.get_rng_state()
        opt.step()
    return model.state_dict()


def _assert_close(got: dict, want: dict) -> None:
    worst = max((got[k] - want[k]).abs().max().item() for k in want)
    scale = max(want[k].abs().max().item() for k in want)
    assert worst <= 1e-5 * max(1.0, scale), f"max difference {worst:g}"


def _wire_s(gbps: float) -> float:
    """The time one rank's NIC takes to send the model's gradients once (a ring all-reduce
    of 2 ranks) at ``gbps``."""
    grad_bytes = sum(p.numel() * 4 for p in build_model(MODEL).parameters())
    return grad_bytes * 8 / (gbps * 1e9)


def _each_iteration_holds_its_compute_and_wait(run_dir: Path) -> None:
    """Per iteration (the summary's compute and exposed time average different iterations:
    the last one is left out of the timing metrics only), both fit in the iteration."""
    for row in (json.loads(line) for line in (run_dir / "metrics.jsonl").open()):
        assert row["compute_time_s"] + row["exposed_comm_s"] <= row["iteration_time_s"], row


@pytest.mark.parametrize(
    ("system", "params"),
    [
        *EXACT_SCHEDULERS,
        ("horovod", {"fusion_threshold_bytes": 100_000, "cycle_time_ms": 1.0}),
        ("ddp-lab-thread", {"bucket_bytes": 200_000, "first_bucket_bytes": 50_000}),
        ("ddp-timed", {"bucket_bytes": 200_000, "first_bucket_bytes": 50_000}),
        ("wfbp-thread", {}),
    ],
)
def test_exact_schedulers_match_single_process_sgd(system, params, tmp_path, monkeypatch):
    """``ddp-lab``: DDP's buckets executed by the lab's engine (``real.implementation: lab``),
    the configuration the engine-overhead benchmark times against PyTorch's own DDP.
    ``-thread``: the engine's communication thread issues what ``dispatch: auto`` issues
    from the gradient hooks. ``ddp-timed``: PyTorch's DDP with ``real.ddp_timeline``, its
    buckets all-reduced by PyTorch's default hook with timers (the same maths)."""
    if system == "horovod":
        require_horovod()
    real: dict = {}
    if system.endswith("-thread"):
        system, real = system.removesuffix("-thread"), {"dispatch": "thread"}
    if system == "ddp-lab":  # the lab's engine: its collectives are on the timeline (below)
        raw = _spec("ddp", params, implementation="lab", **real)
    elif system == "ddp-timed":
        raw = _spec("ddp", params, ddp_timeline=True)
    else:
        raw = _spec(system, params, **real)
    summary, (rank0, rank1) = _run(raw, tmp_path / "run", monkeypatch)
    if system in ("ddp", "ddp-timed", "horovod"):  # the framework's own implementation
        assert summary["engine_dispatch"] == ""
    else:  # from the hooks where the plan sends in release order with no credit limit
        inline = system in ("wfbp", "ddp-lab") and not real
        assert summary["engine_dispatch"] == ("inline" if inline else "thread")
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), f"ranks differ on {key}"
    _assert_close(rank0, _reference_sgd(3))
    metrics = summary["metrics"]
    assert metrics["iteration_time_s"] > 0
    assert summary["network"]["kind"] == "loopback"
    if not torch.cuda.is_available():  # real.device auto on a machine without a GPU: gloo
        assert summary["device"] == {"kind": "cpu", "note": ""}
    if os.geteuid() == 0:  # auto: the communication threads ahead of the compute (root)
        prio = summary["comm_priority"]
        assert prio["priority"] == "realtime" and prio["rank0_compute"] == "normal"
        # gloo's threads (and Horovod's, the engine's dispatcher) as counted in the rank
        assert prio["rank0_threads"]["realtime"] >= 1, prio
    series = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [s["iteration"] for s in series] == list(range(STEPS))
    assert all(s["loss"] > 0 for s in series)
    if system not in ("ddp", "horovod"):  # the engine's collectives, DDP's timed buckets
        rows = (tmp_path / "run" / "timeline.csv").read_text().splitlines()
        lanes = {row["resource"] for row in csv.DictReader(rows)}
        # every rank's lanes, named per worker
        assert lanes == {"compute[w0]", "network[w0]", "compute[w1]", "network[w1]"}, lanes
        for row in csv.DictReader(rows):  # the Gantt chart refuses anything else
            assert float(row["end_s"]) >= float(row["start_s"]), row
        assert metrics["comm_time_s"] > 0
    if system == "ddp":  # as PyTorch runs it, without a hook: its total comm not seen
        assert "comm_time_s" not in metrics
        timeline = tmp_path / "run" / "timeline.csv"
        assert not timeline.exists() or "allreduce" not in timeline.read_text()
    elif system == "ddp-timed":  # its default all-reduce hook timed (``_DDPBuckets``)
        ops = {(row["op"], row["layer"]) for row in csv.DictReader(rows)}
        layers = {layer for op, layer in ops if op == "allreduce"}
        # each bucket named after its first parameter's layer: 200 kB buckets, several
        names = {layer.name for layer in workloads.load_profile(MODEL).layers}
        assert len(layers) >= 2 and layers <= names, ops
        assert {("forward", "model"), ("backward", "model")} <= ops, ops
        assert "negotiations_per_iteration" not in metrics
        assert 0 <= metrics["exposed_comm_s"] < metrics["iteration_time_s"]
    elif system != "horovod":
        negotiated = system in ("bytescheduler", "pace", "dear")
        assert (metrics["negotiations_per_iteration"] > 0) == negotiated
    else:  # its wait in the step only (``synchronize``)
        assert 0 <= metrics["exposed_comm_s"] < metrics["iteration_time_s"]


def _reference_delayed(rule: str, seed: int, delay: int = 1) -> dict:
    """research/comm.md §4.3: forward t uses the synchronised weights w (all averaged
    gradients up to t-1-delay applied, momentum on w) -- as they are (stale), minus lr x the
    rank's own gradients since (local-correct), or minus lr x delay x the newest synchronised
    step (extrapolate); at the end w has every update."""
    torch.manual_seed(seed)
    w = build_model(MODEL)
    rng = torch.get_rng_state()
    replicas = [build_model(MODEL) for _ in range(2)]
    names = [n for n, _ in w.named_parameters()]
    momentum, last, gbar, local = {}, {}, {}, {0: {}, 1: {}}

    def apply(source: int) -> None:
        with torch.no_grad():
            for n, p in w.named_parameters():
                g = gbar[source][n]
                m = momentum[n] = (
                    g.clone() if n not in momentum else momentum[n].mul_(MOMENTUM).add_(g)
                )
                p.add_(m, alpha=-LR)
                last[n] = m.clone()

    for t in range(STEPS):
        if t - 1 - delay >= 0:
            apply(t - 1 - delay)
        for r, model in enumerate(replicas):
            with torch.no_grad():
                for (n, p), (_, q) in zip(
                    model.named_parameters(), w.named_parameters(), strict=False
                ):
                    p.copy_(q)
                    if rule == "local-correct":
                        for k in range(max(0, t - delay), t):
                            p.add_(local[r][k][n], alpha=-LR)
                    elif rule == "extrapolate" and last:
                        p.add_(last[n], alpha=-LR * delay)
        rng = _rank_grads(replicas, t, seed, rng)
        grads = [{n: p.grad.clone() for n, p in m.named_parameters()} for m in replicas]
        local[0][t], local[1][t] = grads
        gbar[t] = {n: (grads[0][n] + grads[1][n]) / 2 for n in names}
    for source in range(max(0, STEPS - 1 - delay), STEPS):
        apply(source)
    return w.state_dict()


@pytest.mark.parametrize(
    ("rule", "order"),
    [
        ("stale", "priority"),
        ("local-correct", "priority"),
        ("extrapolate", "priority"),
        ("local-correct", "fifo"),  # issued from the gradient hooks (dispatch auto)
    ],
)
def test_delayed_allreduce_follows_its_update_equations(rule, order, tmp_path, monkeypatch):
    # fused into several groups: ``priority`` reorders them (the communication thread,
    # negotiating), ``fifo`` sends them as released (from the gradient hooks)
    params = {"approximation": rule, "max_delay": 1, "order": order, "fusion_bytes": 200_000}
    summary, (rank0, rank1) = _run(
        _spec("delayed-allreduce", params), tmp_path / "run", monkeypatch
    )
    assert summary["engine_dispatch"] == ("inline" if order == "fifo" else "thread")
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), f"ranks end with different {key}"
    _assert_close(rank0, _reference_delayed(rule, 3))
    # and it is not plain SGD: the delay changes the maths
    sgd = _reference_sgd(3)
    assert max((rank0[k] - sgd[k]).abs().max().item() for k in sgd) > 1e-4


def test_a_straggler_slows_the_iteration(tmp_path, monkeypatch):
    base = _spec("wfbp")
    base["iterations"] = 6
    fast = run_to_directory(validate(base), tmp_path / "fast", ["test"])
    slow_spec = {
        **base,
        "cluster": {**base["cluster"], "stragglers": [{"worker": 1, "slowdown": 10}]},
    }
    slow = run_to_directory(validate(slow_spec), tmp_path / "slow", ["test"])
    # Worker 1 computes 10x slower. The debug model's iteration on loopback is mostly
    # communication (about 3x its compute on a loaded 2-core machine), which a mild straggler
    # hides behind; at 10x the straggler's compute outlasts the communication and the
    # iteration waits for it, about 9 x its compute longer; asserted at two compute times
    # (measured: 13-18), the machine is shared.
    added = slow["metrics"]["iteration_time_s"] - fast["metrics"]["iteration_time_s"]
    assert added > 2 * fast["metrics"]["compute_time_s"]


# --- the emulated network ---------------------------------------------------------------

_SINK = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5201)); s.listen(1); c, _ = s.accept(); n, t0 = 0, None
while True:
    b = c.recv(1 << 20)
    if not b: break
    t0 = t0 or time.perf_counter(); n += len(b)
print(n * 8 / (time.perf_counter() - t0) / 1e6)
"""
_SOURCE = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5201)); buf = b"x" * (1 << 16)
end = time.perf_counter() + 2.0
while time.perf_counter() < end: c.sendall(buf)
c.close()
"""


def _ours() -> list[str]:
    return [ns for ns in testbed.namespaces() if ns.startswith(testbed.PREFIX + "-")]


def _bulk_mbit(bed: testbed.Testbed) -> float:
    """Mbit/s of a 2-s bulk transfer from node 0 to node 1 (from the first byte received)."""
    sink = subprocess.Popen(
        bed.wrap(1, [sys.executable, "-c", _SINK, bed.address(1)]),
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    subprocess.run(bed.wrap(0, [sys.executable, "-c", _SOURCE, bed.address(1)]), check=True)
    return float(sink.communicate(timeout=30)[0])


def test_testbed_shapes_bandwidth_and_cleans_up():
    require_root("the emulated network")
    with testbed.testbed([0.05, 0.05]) as bed:
        shown = bed.qdiscs(0)
        assert "qdisc htb 1: root" in shown and "class htb 1:1 root rate 50Mbit" in shown
        mbit = _bulk_mbit(bed)
        assert set(_ours()) >= {bed.namespace(0), bed.namespace(1), bed.switch}
    assert 0.8 * 50 <= mbit <= 1.05 * 50, f"{mbit:.1f} Mbit/s through a 50 Mbit/s link"
    assert not _ours()


_PEER = """
import socket, sys, threading, time
me, other, nbytes, both = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "both"
start_at = float(sys.argv[5])  # both peers send from this instant (time.time())
def receive():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((me, 5202)); s.listen(1); c, _ = s.accept(); n, t0 = 0, None
    while n < nbytes:
        n += len(c.recv(1 << 20)); t0 = t0 or time.perf_counter()
    print(time.perf_counter() - t0, flush=True)
def send():
    for _ in range(200):
        try:
            c = socket.create_connection((other, 5202)); break
        except OSError:
            time.sleep(0.02)
    else:
        raise SystemExit(f"no connection to {other}")
    time.sleep(max(0.0, start_at - time.time()))
    c.sendall(b"x" * nbytes); time.sleep(1.0)
work = [threading.Thread(target=receive)] if me.endswith(".1") or both else []
if me.endswith(".2") or both:
    work.append(threading.Thread(target=send))
for t in work: t.start()
for t in work: t.join()
"""


def _transfer_s(bed: testbed.Testbed, both: bool) -> list[float]:
    """Seconds node 0 took to receive 2 MB from node 1 (first byte to last), and with
    ``both``, node 1's from node 0, the two sent from the same instant (the connections are
    made first)."""
    mode, start_at = "both" if both else "one", str(time.time() + 2.0)
    argv = [[sys.executable, "-c", _PEER, bed.address(k), bed.address(1 - k), "2000000", mode,
             start_at] for k in (0, 1)]  # fmt: skip
    peers = [subprocess.Popen(bed.wrap(k, argv[k]), stdout=subprocess.PIPE, text=True)
             for k in (0, 1)]  # fmt: skip
    return [float(x) for p in peers for x in p.communicate(timeout=60)[0].split()]


def test_the_testbed_is_full_duplex():
    """Two transfers in opposite directions on a link, sent at once, each run as fast as one
    alone (the faster of two). Behind one ``tc tbf`` queue per direction (the testbed before
    2026-11-23), a transfer's acknowledgements waited behind the other's data: in 13 of 18
    tries here one of the two took over 1.2 times as long as alone (up to 1.7)."""
    require_root("the emulated network")
    with testbed.testbed([0.25, 0.25]) as bed:
        alone = _transfer_s(bed, both=False) + _transfer_s(bed, both=False)
        assert len(alone) == 2
        together = _transfer_s(bed, both=True) + _transfer_s(bed, both=True)
    assert len(together) == 4
    assert max(together) <= 1.2 * min(alone), (
        f"2 MB each way at once took {[round(t * 1e3, 1) for t in together]} ms, "
        f"one way alone {[round(t * 1e3, 1) for t in alone]} ms"
    )


def test_the_testbed_keeps_a_flow_s_packets_in_order(tmp_path):
    """A NIC delivers a flow's packets in order. Behind the shaper a veth delivered each on
    the CPU that dequeued it, so they crossed: before ``testbed.steer`` (2026-11-30) wfbp on
    resnet50-debug at 0.25 Gbit/s saw 12-19 reorderings a rank in 40 iterations and
    retransmits with no packet dropped, and iterations of 50-130 ms among ones of 18. The run
    reports what its testbed counted (``network.health``)."""
    require_root("the emulated network")
    with testbed.testbed([0.25, 0.25]) as bed:
        assert bed.steered and "reordered" not in bed.notes()
        for ns, dev in ((bed.namespace(0), "eth0"), (bed.switch, "v1")):
            mask = subprocess.run(
                ["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            assert int(mask.replace(",", ""), 16), f"{dev} in {ns} does not steer by flow"
    raw = {
        "system": "wfbp", "mode": "real", "workload": "resnet50-debug", "iterations": 30,
        "warmup_iterations": 2, "cluster": {"workers": 2, "bandwidth_gbps": 0.25},
        "real": {"network": "shaped", "threads": 1},
    }  # fmt: skip
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    health = summary["network"]["health"]
    assert health["drops"] == 0, f"the shaper dropped packets: {health}"
    assert health["reorderings"] == 0, f"a flow's packets crossed: {health}"


_BURST_SINK = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5203)); s.listen(1); c, _ = s.accept(); ends = []
while True:
    head = c.recv(8, socket.MSG_WAITALL)
    if len(head) < 8: break
    n = int.from_bytes(head, "little")
    while n: n -= len(c.recv(min(n, 1 << 20)))
    ends.append(time.clock_gettime(time.CLOCK_MONOTONIC)); c.sendall(b"k")
print(" ".join(map(str, ends)))
"""
_BURST_SOURCE = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5203)); starts = []
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for n in map(int, sys.argv[2:]):
    time.sleep(0.1)  # idle: the buckets fill
    starts.append(time.clock_gettime(time.CLOCK_MONOTONIC))
    c.sendall(n.to_bytes(8, "little") + b"x" * n); c.recv(1)
print(" ".join(map(str, starts)))
"""


def test_the_shaper_s_token_bucket_is_what_the_simulator_models():
    """After an idle spell a transfer within the NIC's bucket (``testbed.burst_bytes``, the
    twins' ``cluster.link_burst_bytes``) passes at once; a longer one passes its bucket at
    once and the rest at the rate: ``(S - burst) / rate``. Measured here at 0.25 Gbit/s
    (medians): 128 KiB 0.5 ms, 1 MiB 27.0 ms against the model's 0 and 25.2 ms."""
    require_root("the emulated network")
    sizes = [128 * 1024, 1024 * 1024] * 3
    with testbed.testbed([0.25, 0.25]) as bed:
        sink = subprocess.Popen(
            bed.wrap(1, [sys.executable, "-c", _BURST_SINK, bed.address(1)]),
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        source = subprocess.run(
            bed.wrap(0, [sys.executable, "-c", _BURST_SOURCE, bed.address(1), *map(str, sizes)]),
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        ends = [float(x) for x in sink.communicate(timeout=30)[0].split()]
    took = [e - s for e, s in zip(ends, map(float, source.stdout.split()), strict=True)]
    within = statistics.median(took[0::2])
    beyond = statistics.median(took[1::2])
    rate, burst = 0.25e9 / 8, testbed.burst_bytes(0.25)
    model = (sizes[1] - burst) / rate
    assert within <= 0.25 * sizes[0] / rate, f"128 KiB took {within * 1e3:.2f} ms"
    assert 0.85 * model <= beyond <= 1.3 * model, (
        f"1 MiB took {beyond * 1e3:.1f} ms, the bucket's model {model * 1e3:.1f} ms"
    )


_ECHO = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5204)); s.listen(1); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while b := c.recv(1): c.sendall(b)
"""
_PING = """
import socket, sys, time
for _ in range(200):
    try:
        c = socket.create_connection((sys.argv[1], 5204)); break
    except OSError:
        time.sleep(0.02)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); c.sendall(b"x"); c.recv(1); print(time.perf_counter() - t)
"""


def _round_trip_s(bed: testbed.Testbed, n: int = 20) -> float:
    """The median round trip of a byte from node 0 to node 1 and back (TCP, no Nagle)."""
    echo = subprocess.Popen(bed.wrap(1, [sys.executable, "-c", _ECHO, bed.address(1)]))
    try:
        out = subprocess.run(
            bed.wrap(0, [sys.executable, "-c", _PING, bed.address(1), str(n)]),
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
    finally:
        echo.wait(timeout=30)  # it ends with the connection
    return statistics.median(float(x) for x in out.split())


def _pids(module: str) -> list[str]:
    """The processes running ``python -m module``."""
    out = subprocess.run(["pgrep", "-f", module], capture_output=True, text=True)
    return out.stdout.split()


def _delay_line_pids() -> list[str]:
    return _pids("runners.real.delayline")


def test_the_testbed_adds_latency_without_netem():
    """2 ms added to each node's one-way latency: a round trip takes 4 ms more than the
    testbed's own, and a link keeps its rate. Where the kernel has no ``netem`` (ours) the
    delay line adds it (``runners.real.delayline``). Measured here, an idle machine: 4.47 ms
    against 4.01 (the wake-ups of idle CPUs after each 2 ms gap; 4.08 with both CPUs busy),
    0.238 Gbit/s through a 0.25 Gbit/s link."""
    require_root("the emulated network")
    with testbed.testbed([0.25, 0.25]) as bed:
        own = _round_trip_s(bed)
    with testbed.testbed([0.25, 0.25], latency_us=2000) as bed:
        assert bed.netem or bed.delayed, bed.notes()
        added = _round_trip_s(bed)
        mbit = _bulk_mbit(bed)
        counts = bed.delay_counts()
        health = bed.health()
    assert 4e-3 + own <= added <= 5e-3 + own, (
        f"a round trip took {added * 1e3:.2f} ms with 2 ms a way added, {own * 1e3:.3f} without"
    )
    assert 0.8 * 250 <= mbit <= 1.05 * 250, f"{mbit:.1f} Mbit/s through a 250 Mbit/s link"
    assert health["drops"] == 0, health
    if counts is not None:  # the delay line: it held every packet, at real-time priority
        assert counts["packets"] >= 40 and counts["realtime"], counts
    assert not _ours() and not _delay_line_pids()


def test_the_delay_line_traces_the_packets_it_holds(tmp_path, monkeypatch):
    """With ``LAB_DELAYLINE_TRACE`` the delay line writes every TCP packet a node received
    when it ends: each of 20 one-byte pings and its echo, on the echo's port, and an echo
    reaching node 0 at least the added 2 ms after its ping reached node 1 (a row's time is
    the packet's arrival, before it is held)."""
    require_root("the emulated network")
    trace = tmp_path / "trace.csv"
    monkeypatch.setenv(delayline.TRACE_ENV, str(trace))
    with testbed.testbed([0.25, 0.25], latency_us=2000) as bed:
        if not bed.delayed:
            pytest.skip("netem adds the latency here: no delay line")
        _round_trip_s(bed)
    with trace.open() as f:
        rows = list(csv.DictReader(f))
    assert rows and list(rows[0]) == delayline.TRACE_HEADER.split(","), rows[:1]
    ones = [r for r in rows if r["payload_bytes"] == "1"]
    pings = [float(r["t_s"]) for r in ones if r["node"] == "1" and r["dst_port"] == "5204"]
    echoes = [float(r["t_s"]) for r in ones if r["node"] == "0" and r["src_port"] == "5204"]
    assert len(pings) == len(echoes) == 20, (len(pings), len(echoes))
    gaps = [echo - ping for ping, echo in zip(pings, echoes, strict=True)]
    assert min(gaps) >= 2e-3, f"an echo came {min(gaps) * 1e3:.2f} ms after its ping"
    assert not list(tmp_path.glob("*.tmp")) and not _delay_line_pids()


def test_the_calibration_s_network_probe_pays_the_added_latency(tmp_path):
    """``calibrate --latency-only`` measures the shaped network with the latency added as real
    runs get it: the network probe's small all-reduce (two ring steps of two ranks, each a
    one-way trip) takes at least twice the added latency, and nothing is left behind. On
    loopback the probe refuses to add any. Measured here: 9.1 ms with 2 ms a way (the
    probe's barrier before each all-reduce leaves the ranks up to a trip apart, and a gloo
    send waits for its receive to be posted); the bound above is six trips. The overlap
    probe's latencies a ring step at least one trip."""
    from runners.real import probe

    require_root("the emulated network")
    rows = probe.probe(2, 0.25, tmp_path / "p", sizes=(4096,), repeats=5, latency_us=2000)
    ((_, seconds),) = rows
    assert 4e-3 <= seconds <= 12e-3, f"a 4 KiB all-reduce took {seconds * 1e3:.2f} ms"
    # the overlap probe too: a ring step of the engine's stream one trip and a little (2.15-2.21
    # ms measured by calibrate), of back-to-back plain all-reduces at least one trip (3 steps
    # of compute here: few of them while busy, their mean noisy)
    m = probe.overlap("resnet50-debug", 2, 0.25, tmp_path / "o", steps=3, latency_us=2000)
    assert 2e-3 <= m.latency_engine_s <= 6e-3, m
    assert m.latency_idle_s >= 2e-3 and m.latency_busy_s >= 2e-3, m
    assert not _ours() and not _delay_line_pids()
    with pytest.raises(ValueError, match="shaped testbed only"):
        probe.probe(2, None, tmp_path / "q", sizes=(4096,), repeats=1, latency_us=2000)


def test_the_ps_probe_pays_the_added_latency(tmp_path):
    """``calibrate --latency-only --ps-transport blocking`` measures the PS transport with the
    latency added on every process's link: half a 4 KiB push's round trip (the push and its
    pull each cross a worker's link and a server's) at least one trip, and the time between
    answers while idle (one push unanswered at a time with one server: a round trip) at
    least two; nothing left behind. One server, three steps: the smallest layout that has
    both kinds of process."""
    from runners.real import probe

    require_root("the emulated network")
    m = probe.ps_overlap("resnet50-debug", 2, 1, 0.25, tmp_path / "ps", steps=3, latency_us=2000)
    assert m.half_round_trip_busy_s >= 2e-3, m
    assert m.message_idle_s >= 4e-3, m
    assert not _ours() and not _delay_line_pids()


def _torchrun_leftovers() -> set[str]:
    """The folders torchrun makes in the temporary folder when not given ``--log-dir``."""
    return {p.name for p in Path(tempfile.gettempdir()).glob("torchelastic_*")}


def test_a_real_run_on_the_shaped_network(tmp_path):
    require_root("the emulated network")
    raw = _spec("wfbp", network="shaped", dataset="synthetic")
    raw["cluster"]["bandwidth_gbps"] = 0.05
    before = _torchrun_leftovers()
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    assert _torchrun_leftovers() <= before  # one torchrun per namespace, none left a folder
    assert summary["network"]["kind"] == "shaped"
    assert summary["network"]["bandwidth_gbps"] == 0.05
    # Ring all-reduce of 2 ranks: each sends the gradients' size once over its 50 Mbit/s NIC.
    wire_s = _wire_s(0.05)
    assert 0.8 * wire_s <= summary["metrics"]["comm_time_s"] <= 2.0 * wire_s
    assert summary["metrics"]["iteration_time_s"] >= 0.8 * wire_s
    # a rank's training thread: its own CPU (within its process's) and its wait for a core
    metrics = summary["metrics"]
    assert 0 < metrics["train_thread_cpu_s"] <= metrics["cpu_time_s"]
    assert 0 <= metrics["train_runq_wait_s"] < metrics["iteration_time_s"]
    assert not _ours()


LOOP = """
import sys, time
out, last, x = open(sys.argv[1], "w"), time.perf_counter(), 0
while True:
    x += 1
    if x % 20000 == 0 and time.perf_counter() - last >= 0.05:
        last = time.perf_counter()
        out.write(f"{last} {time.process_time()}\\n")
        out.flush()
"""


def test_a_real_run_measures_the_other_work_beside_it(tmp_path, caplog):
    """A CPU-bound process beside a real run (not the run's: not under its launcher) logs its
    own CPU time; the run's ``other_cores`` over its steady iterations is that process's CPU
    over the same time, within a tenth of a core, and names it; the run log warns. Measured
    (2026-12-06, wfbp on resnet50-debug, three runs): 0.634, 0.577 and 0.597 cores against the
    loop's own 0.637, 0.566 and 0.601."""
    raw = _spec("wfbp", dataset="synthetic")
    raw["iterations"] = 40  # a steady window of about a second
    script, log = tmp_path / "busy_neighbour.py", tmp_path / "cpu.txt"
    script.write_text(LOOP)
    # Started by a shell that exits at once: not a descendant of this process, the launcher
    started = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" "{script}" "{log}" >/dev/null 2>&1 & echo $!'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pid = int(started.stdout)
    try:
        wait_for(lambda: log.exists() and log.stat().st_size > 0, timeout_s=30, what="the loop")
        with caplog.at_level("WARNING", logger="runners"):
            summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    finally:
        os.kill(pid, signal.SIGKILL)
    rank0 = json.loads((tmp_path / "run" / "ranks" / "rank0.json").read_text())
    start, end = launch.steady_window([rank0])
    rows = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    inside = [r for r in rows if start <= r[0] <= end]
    own = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    others = summary["others"]
    assert others["cores"] == pytest.approx(own, abs=0.1)
    assert summary["metrics"]["other_cores"] == pytest.approx(others["cores"], abs=1e-4)
    assert others["top"][0]["name"].endswith("busy_neighbour.py cpu.txt")
    if own >= 0.2:
        assert others["flagged"]
        assert "beside the run's steady iterations" in caplog.text


def test_a_real_run_pays_the_added_latency_in_every_collective(tmp_path):
    """wfbp issues its all-reduces one after another on one thread; a ring all-reduce of two
    ranks is two steps, each a one-way trip, so 5 ms added to every trip adds at least 10 ms
    to each. Measured here: 35 all-reduces a rank, 395 ms an iteration against 21 without
    (388-394 in a fidelity set). The bound above is twice that floor, what the latency paid
    twice a trip would cost at least: a CI run on a slow spell of this machine took 601 ms by
    the mean of 4 iterations (1.7x), so the median of 6 is taken."""
    require_root("the emulated network")
    latency_s = 5e-3
    raw = {
        "system": "wfbp", "mode": "real", "workload": "resnet50-debug", "iterations": 6,
        "warmup_iterations": 1, "real": {"network": "shaped", "threads": 1},
        "cluster": {"workers": 2, "bandwidth_gbps": 0.25, "latency_us": latency_s * 1e6},
    }  # fmt: skip
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    network = summary["network"]
    assert network["latency_emulated"] and network["health"]["drops"] == 0, network
    if network["delay_line"] is not None:
        assert network["delay_line"]["packets"] > 0
        assert "delay line" in network["note"]
    with open(tmp_path / "run" / "timeline.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["op"] == "allreduce"]
    iterations = {r["iteration"] for r in rows}
    per_rank = len(rows) / len(iterations) / 2
    floor = per_rank * 2 * latency_s
    took = summary["metrics"]["iteration_time_median_s"]
    assert floor <= took < 2 * floor, (
        f"{took * 1e3:.0f} ms an iteration, {per_rank:g} all-reduces a rank: at least "
        f"{floor * 1e3:.0f} ms of added latency"
    )


def test_compute_time_leaves_out_the_forward_s_waits_for_parameters(tmp_path):
    """PACE (cross-barrier) at 50 Mbit/s: each layer's forward waits in its hook for that
    layer's synchronised parameters, most of the iteration. ``compute_time_s`` is forward +
    backward less those waits (what the simulator calls compute), not the wall time of the
    forward pass."""
    require_root("the emulated network")
    raw = _spec("pace", network="shaped", dataset="synthetic")
    raw["cluster"]["bandwidth_gbps"] = 0.05
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    m = summary["metrics"]
    assert m["exposed_comm_s"] > 0.5 * m["iteration_time_s"], m  # the waits are there
    assert 0 < m["compute_time_s"] < 0.3 * m["iteration_time_s"], m
    # the waits block (no spinning): the ranks' processes use a fraction of a core
    assert 0 < m["cpu_time_s"] < 0.5 * m["iteration_time_s"], m
    assert not _ours()


def test_a_nic_straggler_slows_the_iterations_of_its_window(tmp_path):
    """Worker 1's NIC drops from 400 to 50 Mbit/s from iteration 5 (``bandwidth_factor``):
    the testbed re-shapes it once, and from then the ring all-reduce runs at the slow link's
    rate, as the simulator models it."""
    require_root("the emulated network")
    raw = _spec("wfbp", network="shaped", dataset="synthetic")
    raw["cluster"]["bandwidth_gbps"] = 0.4
    raw["cluster"]["stragglers"] = [{"worker": 1, "bandwidth_factor": 0.125, "from_iteration": 5}]
    raw["iterations"], raw["warmup_iterations"] = 10, 1
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    assert summary["metrics"]["link_reshapes"] == 1
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    slow_wire_s = _wire_s(0.05)
    # The switch follows rank 0's progress, read by the launcher (at normal priority, beside
    # ranks whose communication threads run ahead): iterations 5 and 6 may still run partly
    # at the old rate.
    before = [r["iteration_time_s"] for r in rows if 1 <= r["iteration"] <= 3]
    after = [r["iteration_time_s"] for r in rows if r["iteration"] >= 7]
    assert min(after) >= 0.8 * slow_wire_s, (before, after, slow_wire_s)
    assert max(before) < 0.6 * slow_wire_s, (before, after, slow_wire_s)
    assert not _ours()


def test_a_nic_straggler_is_refused_on_loopback(tmp_path):
    raw = _spec("wfbp", network="loopback")
    raw["cluster"]["stragglers"] = [{"worker": 1, "bandwidth_factor": 0.5}]
    with pytest.raises(SpecError) as err:
        run_to_directory(validate(raw), tmp_path / "run", ["test"])
    assert err.value.field == "cluster.stragglers[0].bandwidth_factor"
    assert "shaped" in str(err.value)
    assert not (tmp_path / "run" / "summary.json").exists()


def test_the_real_horovod_on_the_shaped_network(tmp_path):
    """Horovod's own rendezvous server in node 0's namespace, one rank per namespace (see
    runners.real.hvd): the shaped links carry its all-reduces."""
    require_root("the emulated network")
    require_horovod()
    raw = _spec(
        "horovod", {"fusion_threshold_bytes": 64 << 20, "cycle_time_ms": 1.0},
        network="shaped", dataset="synthetic",
    )  # fmt: skip
    raw["cluster"]["bandwidth_gbps"] = 0.05
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    assert summary["network"]["kind"] == "shaped"
    # One fused ring all-reduce of 2 ranks per step: each rank sends the gradients' size once
    # over its 50 Mbit/s NIC (on loopback the step takes about 20 ms).
    wire_s = _wire_s(0.05)
    metrics = summary["metrics"]
    assert 0.8 * wire_s <= metrics["iteration_time_s"] <= 3.0 * wire_s
    # the step waits for that all-reduce (most of it after the backward): exposed, and not
    # in the compute; Horovod's total communication time is not seen
    assert 0.3 * wire_s <= metrics["exposed_comm_s"] <= metrics["iteration_time_s"]
    assert "comm_time_s" not in metrics
    _each_iteration_holds_its_compute_and_wait(tmp_path / "run")
    assert not _ours()
    assert not subprocess.run(["pgrep", "-f", "runners.real.hvd"], capture_output=True).stdout


def test_ddp_s_wait_inside_its_backward_is_exposed_communication_not_compute(tmp_path):
    """PyTorch's DDP with one bucket at 50 Mbit/s: its reducer all-reduces every gradient
    after the last one is ready and waits inside ``backward``. That wait is the step's
    exposed communication, not its compute."""
    require_root("the emulated network")
    big = 64 << 20  # one bucket: nothing overlaps the backward
    raw = _spec(
        "ddp", {"bucket_bytes": big, "first_bucket_bytes": big},
        network="shaped", dataset="synthetic",
    )  # fmt: skip
    raw["cluster"]["bandwidth_gbps"] = 0.05
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    wire_s = _wire_s(0.05)
    metrics = summary["metrics"]
    assert 0.8 * wire_s <= metrics["iteration_time_s"] <= 3.0 * wire_s, metrics
    assert 0.8 * wire_s <= metrics["exposed_comm_s"] <= metrics["iteration_time_s"], metrics
    assert 0 < metrics["compute_time_s"] < 0.3 * metrics["iteration_time_s"], metrics
    _each_iteration_holds_its_compute_and_wait(tmp_path / "run")
    assert not _ours()


_DDP_BUFFERS_PROBE = """
import datetime, gc, os, time, torch, torch.distributed as dist
from torch import nn
from runners.real.worker import _ddp_step
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
me = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))  # DDP syncs its buffers
job = {"spec": {"params": {"bucket_bytes": 1 << 20, "first_bucket_bytes": 1 << 20}}}
step = _ddp_step(model, job, 0.1, 0.0, lambda: None)
inputs, targets = torch.randn(4, 8), torch.randint(0, 2, (4,))
for it in range(3):
    if me == 1:
        time.sleep(0.4)  # rank 1 comes to the step late: rank 0 waits in DDP's forward
    forward_start, _, end, _, waited = step(inputs, targets, nn.functional.cross_entropy)
    line = f"rank {me} it {it} waited {waited:.4f} step {end - forward_start:.4f}\\n"
    os.write(1, line.encode())  # one write: the two ranks' lines never interleave
del step  # DDP (its reducer) gone before its process group, as a real run's ends in _train:
gc.collect()  # torn down after it, at exit, it aborted both ranks once (SIGABRT)
dist.destroy_process_group()
"""


def test_ddp_s_wait_for_its_buffers_in_the_forward_is_exposed_communication(tmp_path):
    """DDP broadcasts the model's buffers (batch norm's statistics) in its forward, a blocking
    collective: a rank that comes to the step 0.4 s before the other waits there, and that
    wait is the step's exposed communication (``sync_s``), not its compute. Two ranks on
    loopback; rank 1 sleeps before each step."""
    script = tmp_path / "probe.py"
    script.write_text(_DDP_BUFFERS_PROBE)
    result = torchrun(script, 2, ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "FutureWarning" not in result.stderr, result.stderr[-2000:]  # torch 2.13's rename
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("rank ")]
    waits = {(int(r[1]), int(r[3])): (float(r[5]), float(r[7])) for r in rows}
    assert len(waits) == 6, result.stdout
    for it in (1, 2):  # after the first step (DDP's lazy set-up)
        waited, took = waits[(0, it)]
        assert 0.3 <= waited <= took, waits  # rank 0 waited for rank 1, and it is in the step
        assert waits[(1, it)][0] < 0.1, waits  # rank 1 came last: it hardly waited


def test_pytorch_s_ddp_trains_a_model_with_buffers_through_the_run_command(tmp_path):
    """A model with batch norm: the ``ddp`` plan carries the buffers' broadcast
    (``forward_sync``), which PyTorch's DDP does itself. Its job file once refused that plan
    (the lab's engine's check), so no real ``ddp`` run on such a model started, and
    ``fidelity`` stopped at its first one."""
    raw = _spec("ddp", dataset="synthetic", ddp_timeline=True)  # its timeline too (below)
    raw["workload"] = "resnet50-debug"
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    assert summary["metrics"]["iteration_time_s"] > 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert len(rows) == STEPS
    assert all(row["exposed_comm_s"] > 0 for row in rows), rows  # the broadcast and buckets
    # on the timeline, each step's broadcast before the model's forward, as its twin has it
    timeline = list(csv.DictReader((tmp_path / "run" / "timeline.csv").open()))
    broadcasts = [r for r in timeline if (r["op"], r["layer"]) == ("broadcast", "buffers")]
    assert {r["resource"] for r in broadcasts} == {"network[w0]", "network[w1]"}, timeline[:5]
    assert summary["metrics"]["comm_time_s"] > 0


def _launch(raw: dict, tmp_path: Path, stderr: int) -> subprocess.Popen[str]:
    """``python -m runners run`` of ``raw`` into ``tmp_path / "run"``, started, not awaited."""
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(raw))
    return subprocess.Popen(
        [sys.executable, "-m", "runners", "run", str(spec_path), "--out", str(tmp_path / "run")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
    )


def test_a_killed_launcher_leaves_no_namespace_and_no_rank(tmp_path):
    require_root("the emulated network")
    raw = _spec("wfbp", network="shaped", dataset="synthetic")
    raw["cluster"]["bandwidth_gbps"] = 0.01
    raw["cluster"]["latency_us"] = 2000.0  # and the delay line, where it adds the latency
    raw["iterations"] = 1000
    delayed = not testbed.netem_available()
    proc = _launch(raw, tmp_path, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(_ours()) >= 3, timeout_s=60, what="the testbed")
        wait_for(lambda: _worker_pids(), timeout_s=60, what="the ranks")
        assert _delay_line_pids() or not delayed
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    wait_for(lambda: not _ours(), timeout_s=30, what="the reaper to delete the namespaces")
    wait_for(lambda: not _worker_pids(), timeout_s=30, what="the ranks to stop")
    wait_for(lambda: not _delay_line_pids(), timeout_s=30, what="the delay line to stop")
    assert not (tmp_path / "run").exists()


def test_a_run_whose_delay_line_dies_fails_at_once_and_says_so(tmp_path):
    """Without its delay line a node's packets are dropped (its queue has no reader): the run
    stops within a second or so, saying why, instead of waiting out the collectives' timeout,
    and leaves nothing behind."""
    require_root("the emulated network")
    if testbed.netem_available():
        pytest.skip("this kernel has netem: the testbed adds latency without the delay line")
    raw = _spec("wfbp", network="shaped", dataset="synthetic")
    raw["cluster"].update(bandwidth_gbps=0.25, latency_us=2000.0)
    raw["iterations"] = 1000
    proc = _launch(raw, tmp_path, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _worker_pids(), timeout_s=60, what="the ranks")
        time.sleep(2.0)  # training
        for pid in _delay_line_pids():
            os.kill(int(pid), signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert "the delay line adding the latency exited (code -9)" in err, err
    assert took < 15, f"the run went on {took:.1f} s without its delay line"
    wait_for(lambda: not _ours() and not _worker_pids(), timeout_s=30, what="the cleanup")
    assert not (tmp_path / "run").exists()


def _worker_pids() -> list[str]:
    return _pids("runners.real.worker")


# --- bad input ----------------------------------------------------------------------------


def _cli(raw: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(raw))
    return subprocess.run(
        [sys.executable, "-m", "runners", "run", str(spec_path), "--out", str(tmp_path / "o")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


SHAPED = {"network": "shaped"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cluster": {"workers": 500}}, "cluster.workers"),
        ({"workload": "gpt2", "cluster": {"workers": 64}}, "cluster.workers"),
        (
            {"real": {"network": "shaped"}, "cluster": {"bandwidth_gbps": 50}},
            "cluster.bandwidth_gbps",
        ),
        ({"real": {"network": "shaped"}, "cluster": {"latency_us": 2e5}}, "cluster.latency_us"),
        ("too-big", "workload"),
    ],
)
def test_the_command_line_refuses_what_this_machine_cannot_run(change, field, tmp_path):
    from runners.real import launch

    if "real" in change and change != "too-big":
        require_root("checks of the emulated network")
    if change == "too-big":  # GPT-2 (a 23 GiB training step a rank) on 2 ranks
        change = {"workload": "gpt2", "cluster": {"workers": 2}}
        gpt2 = validate({"system": "wfbp", "mode": "real", **change})
        fixed, step = launch.memory_need(gpt2)
        if 2 * (fixed + 2 * step) <= 0.8 * launch._available_memory():
            pytest.skip("this machine has the memory for GPT-2 on 2 ranks")
    raw = {"system": "wfbp", "mode": "real", "workload": MODEL, **change}
    result = _cli(raw, tmp_path)
    assert result.returncode == 2, result.stderr
    assert field in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_shaped_without_root_is_refused_not_run_on_loopback(monkeypatch):
    from runners.real import launch

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    spec = validate({"system": "wfbp", "mode": "real", "workload": MODEL,
                     "real": {"network": "shaped"}})  # fmt: skip
    with pytest.raises(SpecError) as err:
        launch.preflight(spec)
    assert err.value.field == "real.network"
    auto = validate({"system": "wfbp", "mode": "real", "workload": MODEL})
    network = launch.preflight(auto)
    assert network.kind == "loopback" and "root" in network.note


@pytest.mark.parametrize(
    ("workload", "dataset"), [("gpt2-debug", "markov"), ("inception3-debug", "shapes")]
)
def test_tied_weights_and_branchy_graphs_train(workload, dataset, tmp_path):
    """gpt2's LM head owns no parameter (tied to the embedding): its layer must not hold its
    group back; inception's branches release gradients out of layer order."""
    raw = {**_spec("bytescheduler", {"partition_bytes": 20_000, "credit_bytes": 40_000}),
           "workload": workload}  # fmt: skip
    raw["real"]["dataset"] = dataset
    summary = run_to_directory(validate(raw), tmp_path / "run", ["test"])
    assert summary["metrics"]["comm_time_s"] > 0
    assert summary["metrics"]["eval_loss"] > 0


def test_a_run_over_two_nodes_rendezvouses_and_trains_exactly(tmp_path):
    """Two machines emulated by two runner processes (``python -m runners run`` each, as the
    Slurm executor's batch script starts them), one rank per node, rendezvousing with c10d
    at the first node: each node writes a whole result, and the weights equal single-process
    SGD's as on one node."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec("wfbp")))
    port = _free_port()
    procs = []
    for node in range(2):
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LAB_REAL_SAVE_PARAMS": "1",
            "LAB_NNODES": "2",
            "LAB_NODE_RANK": str(node),
            "LAB_RDZV_HOST": f"127.0.0.1:{port}",
            "LAB_RDZV_ID": f"test-{port}",
        }
        argv = [
            sys.executable,
            "-m",
            "runners",
            "run",
            str(spec),
            "--out",
            str(tmp_path / f"node{node}"),
        ]
        procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert summaries[0]["network"]["kind"] == "nodes"
    assert summaries[0]["metrics"]["final_loss"] == summaries[1]["metrics"]["final_loss"]
    series = [json.loads(line) for line in (tmp_path / "node1" / "metrics.jsonl").open()]
    assert [s["iteration"] for s in series] == list(range(STEPS))
    # c10d hands out ranks in the order the nodes join, not by node rank: find each rank's.
    saved = sorted(tmp_path.glob("node*/params*.pt"), key=lambda path: path.name)
    assert [path.name for path in saved] == ["params0.pt", "params1.pt"]
    want = _reference_sgd(3)
    for path in saved:
        _assert_close(torch.load(path), want)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_grid_runs_its_real_runs_for_real_and_records_the_device(tmp_path):
    """A grid with ``mode: [sim, real]``: the real rows come from real ranks (their metrics,
    e.g. the cores used, which the simulator does not report), with a ``device`` column; the
    real run's key holds that device; a resume runs nothing again. (Before, a grid simulated
    its ``mode: real`` runs and labelled them real.) Its ``real`` section goes to the real
    runs alone, a PS field to the PS system alone: its axis makes two real ps-default runs,
    each on its transport, and one simulated run of each system. (Before, a grid took
    ``real`` as a whole, refused for the simulated runs.)"""
    from runners import grid

    raw = {
        "systems": ["wfbp", "ps-default"],
        "workloads": [MODEL],
        "iterations": 3,
        "warmup_iterations": 1,
        "cluster": {"workers": 2},
        "mode": ["sim", "real"],
        "real": {"network": "loopback", "ps_transport": ["blocking", "pipelined"]},
    }
    g = grid.load_grid(raw)
    assert [(r.spec.system, r.spec.mode) for r in g.runs] == [
        ("wfbp", "sim"), ("wfbp", "real"),
        ("ps-default", "sim"), ("ps-default", "real"), ("ps-default", "real"),
    ]  # fmt: skip
    from runners.real import launch

    real_run = next(r for r in g.runs if r.spec.mode == "real")
    device = launch.resolve_device(real_run.spec)[0]  # cpu here; cuda on a host with GPUs
    assert real_run.device == device
    assert real_run.run_key == grid.run_key(real_run.spec, device) != grid.run_key(real_run.spec)
    outcome = grid.run_grid(g, tmp_path / "out", jobs=2, progress=False)
    assert outcome.failed == 0
    table = grid.read_results(tmp_path / "out")
    wfbp = table[table["system"] == "wfbp"]
    by_mode = {row["mode"]: row for _, row in wfbp.iterrows()}
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["mode"]: r["device"] for r in rows if r["system"] == "wfbp"} == {
        "sim": "",
        "real": device,
    }
    assert by_mode["real"]["cpu_cores"] > 0 and math.isnan(by_mode["sim"]["cpu_cores"])
    # rank 0's machine: its busy cores over the steady iterations, every process on it
    assert 0 < by_mode["real"]["machine_busy_cores"] <= (os.cpu_count() or 1)
    assert by_mode["real"]["iteration_time_s"] > 0
    assert list(table.columns).index("device") == list(table.columns).index("mode") + 1
    # the real section's columns: every field, defaults included, on the real rows alone
    assert {(r["system"], r["mode"], r["real.network"], r["real.ps_transport"]) for r in rows} == {
        ("wfbp", "sim", "", ""),
        ("wfbp", "real", "loopback", "blocking"),
        ("ps-default", "sim", "", ""),
        ("ps-default", "real", "loopback", "blocking"),
        ("ps-default", "real", "loopback", "pipelined"),
    }
    assert {r["real.ddp_timeline"] for r in rows if r["mode"] == "real"} == {"False"}
    ps = table[(table["system"] == "ps-default") & (table["mode"] == "real")]
    assert (ps["iteration_time_s"] > 0).all() and len(ps) == 2
    again = grid.run_grid(g, tmp_path / "out", jobs=1, progress=False, resume=True)
    assert again.ran == 0 and again.skipped == 5


def test_the_engine_bench_s_interleaved_launch_takes_turns_in_blocks(tmp_path):
    """``bench --only real``'s launch (its default, interleaved): DDP, the lab's engine and
    DDP's second copy train in the same two ranks, in blocks in ``interleave_order`` (the
    sides never overlapping: a collective of one taken for another's would stall or fail the
    run), each block's ends marked as trimmed, the first pair as warm-up. Outside the bench's
    one configuration the launcher refuses it before any process starts."""
    from runners.real import launch, worker

    block, pairs = 4, 2
    raw = _spec("ddp", {"broadcast_buffers": False}, dataset="synthetic", implementation="lab")
    raw.update(warmup_iterations=3 * block, iterations=3 * block * pairs)
    plan = {"block": block, "pairs": pairs, "control": True, "ddp_built_first": False}
    result = launch.run(validate(raw), tmp_path / "work", interleave=plan)
    series = result.series
    assert len(series) == (1 + pairs) * 3 * block
    expected = [
        (pair, side)
        for pair in range(1 + pairs)
        for side in worker.interleave_order(pair, True)
        for _ in range(block)
    ]
    assert [(row["block"], row["side"]) for row in series] == expected
    assert [row["trim"] for row in series[:block]] == [True, False, False, True]
    assert [row["warmup"] for row in series] == [True] * 3 * block + [False] * 3 * block * pairs
    assert all(row["iteration_time_s"] > 0 and math.isfinite(row["loss"]) for row in series)
    wfbp = _spec("wfbp")
    with pytest.raises(ValueError, match="interleave: the ddp system"):
        launch.run(validate(wfbp), tmp_path / "refused", interleave=plan)
    assert not (tmp_path / "refused").exists()


def test_the_engine_s_compute_side_cost_script_measures_both_sides():
    """``scripts/engine-compute-cost.py``: one process, DDP's step and the engine's forward
    and backward in turns; it prints both medians and their ratio, and refuses what it cannot
    run with exit 2 before starting anything."""
    script = ROOT / "scripts" / "engine-compute-cost.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(script), "vgg16-debug", "--pairs", "1"],
        capture_output=True, text=True, env=env, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("vgg16-debug: one process, no traffic: DDP's step ")
    assert line.endswith("medians of 10 iterations a side")
    for bad, said in (
        (["nope"], "invalid model: workload"),
        (["vgg16-debug", "--pairs", "0"], "--pairs"),
    ):
        refused = subprocess.run(
            [sys.executable, str(script), *bad], capture_output=True, text=True, env=env,
            timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
