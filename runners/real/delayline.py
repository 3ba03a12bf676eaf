"""Added latency on the emulated network without ``sch_netem``: a delay line in user space.

This project's machines have no ``netem`` qdisc (nor ``fq``, so no earliest-departure-time
pacing either), but their kernels have ``nfnetlink_queue``: an ``iptables`` rule in each
node's namespace (``mangle PREROUTING -i eth0 -j NFQUEUE``) hands every packet the node
receives to a queue, and this process accepts each one ``delay_us`` after it saw it. The delay
is the same for every packet, so packets leave in the order they came (one batch verdict
accepts every packet due). A node's one-way latency to another is therefore the testbed's own
plus ``delay_us``, and a round trip (data one way, its acknowledgement back) adds twice that,
as ``netem`` would with ``delay_us / 2`` on each of a link's two shapers. The packets are
held where they arrive, not where they leave: held on the sender's side they would still
belong to the sending socket, and TCP's small-queue limit let a flow have only about two
packets in the host at a time (2026-12-06: a bulk transfer at 0.25 Gbit/s fell to 0.009
Gbit/s behind 5 ms; ``netem`` orphans its packets for this reason, a queue's listener cannot).
A packet that crossed the veth is no longer the socket's.

What it is not: ``netem`` delays in the kernel with a timer per packet; this delay line wakes
in user space (at real-time priority where it may: ``realtime`` in its counts), so a packet
leaves up to a wake-up late (``late_mean_us``, ``late_max_us``), and on an idle machine the
wake-ups of the processes it serves add more: measured here at 2 ms a way, a round trip of
4.08 ms with both CPUs busy (as while training) and 4.48 ms on an idle machine, against 4.01
(``tests/integration/test_real_mode`` measures it). Its CPU time is the run's (one
process, all nodes: ``cpu_s``). Packets arrive whole: the queue is told to pass GSO
super-packets unsegmented (``NFQA_CFG_F_GSO``) and copies no payload (``NFQNL_COPY_META``).
If the process dies, the nodes' packets are dropped (no ``--queue-bypass``: a run without its
latency fails rather than silently running without it).

One process serves every node: it opens each queue's netlink socket inside that node's
namespace (``setns``) and returns to its own. It exits when its parent does (a ``pidfd``), so
a killed launcher leaves it behind no more than the namespaces (``testbed`` sweeps those).

``python -m runners.real.delayline DELAY_US PARENT NS [NS ...]`` is the process; it prints
``ready`` once every queue is bound, and its counts as one JSON line on SIGUSR1 and when it
ends (SIGTERM, or its parent gone).

A diagnostic, off by default: with ``LAB_DELAYLINE_TRACE`` set to a file's path, the queues
copy each packet's first ``TRACE_COPY`` bytes (its IPv4 and TCP headers) and the delay line
writes, when it ends, one CSV row per packet a node received: when it arrived (seconds on the
monotonic clock, before its delay), the node (its index in ``NS ...``), the TCP ports and the
TCP payload's bytes (0: an acknowledgement alone; a GSO super-packet is one row). The run's
timing is the same but for the copy (64 bytes a packet); the file is replaced by each run.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_CFG_MASK, NFQA_CFG_FLAGS = 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_GSO = 4
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
CLONE_NEWNET = 0x40000000
QUEUE = 0  # the queue number in every node's namespace (each namespace has its own queues)
MAXLEN = 1 << 16  # packets a queue may hold (beyond: dropped, and counted by the kernel)
RCVBUF = 32 << 20
NFQNL_COPY_PACKET, NFQA_PAYLOAD = 2, 10
TRACE_ENV = "LAB_DELAYLINE_TRACE"  # a file's path: every packet's arrival, written at the end
TRACE_COPY = 64  # bytes of each packet the queue copies when tracing: the IPv4 and TCP headers
TRACE_HEADER = "t_s,node,src_port,dst_port,payload_bytes"


class DelayLineError(RuntimeError):
    """The delay line cannot be set up."""


def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def _message(kind: int, flags: int, seq: int, attrs: bytes) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(QUEUE)) + attrs
    kind = (NFNL_SUBSYS_QUEUE << 8) | kind
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def _attrs(data: bytes) -> dict[int, bytes]:
    found, at = {}, 0
    while at + 4 <= len(data):
        size, kind = struct.unpack_from("=HH", data, at)
        if size < 4:
            break
        found[kind & 0x7FFF] = data[at + 4 : at + size]
        at += (size + 3) & ~3
    return found


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise DelayLineError(f"setns: {os.strerror(ctypes.get_errno())}")


def tcp_fields(packet: bytes) -> tuple[int, int, int] | None:
    """An IPv4 TCP packet's (source port, destination port, payload bytes) from its first
    bytes (the IPv4 and TCP headers; the length from the IP header, a GSO super-packet's
    whole); None for anything else."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != socket.IPPROTO_TCP:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 13:
        return None
    (total,) = struct.unpack_from("!H", packet, 2)
    src, dst = struct.unpack_from("!HH", packet, ihl)
    offset = (packet[ihl + 12] >> 4) * 4
    return src, dst, max(0, total - ihl - offset)


def open_queue(namespace: str | None, copy: int = 0) -> socket.socket:
    """A netlink socket bound to queue ``QUEUE`` in ``namespace`` (None: this one), passing
    packet ids only (``copy``: also each packet's first ``copy`` bytes), GSO super-packets
    whole."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY) if namespace else None
    try:
        if namespace:
            target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    finally:
        if home is not None:
            _setns(home)
            os.close(home)
    try:
        sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE (root)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.bind((0, 0))
    flags = struct.pack("!I", NFQA_CFG_F_GSO)
    mode = NFQNL_COPY_PACKET if copy else NFQNL_COPY_META
    steps = [
        _attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, 0)),
        _attr(NFQA_CFG_PARAMS, struct.pack("!IB", copy, mode))
        + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", MAXLEN))
        + _attr(NFQA_CFG_FLAGS, flags)
        + _attr(NFQA_CFG_MASK, flags),
    ]
    for seq, attrs in enumerate(steps, 1):
        sock.send(_message(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, attrs))
        reply = sock.recv(65536)
        size, kind = struct.unpack_from("=IH", reply)
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", reply, 16)
            if error:
                sock.close()
                raise DelayLineError(
                    f"binding the packet queue in {namespace or 'this namespace'}: "
                    f"{os.strerror(-error)}"
                )
    sock.setblocking(False)
    return sock


@dataclass
class Queue:
    """One node's queue: the packets held (kernel id, when due), and its counts."""

    sock: socket.socket
    held: collections.deque[tuple[int, float]] = field(default_factory=collections.deque)
    packets: int = 0
    trace: list[tuple[float, int, int, int]] | None = None  # (arrived, ports, payload)

    def receive(self, delay_s: float) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 17)
            except BlockingIOError:
                return
            except OSError as err:  # the socket overflowed: those packets are dropped, and
                if err.errno != errno.ENOBUFS:  # counted by the kernel (user_dropped)
                    raise
                continue
            now = time.monotonic()
            at = 0
            while at + 16 <= len(data):
                size, kind = struct.unpack_from("=IH", data, at)
                if size < 16:
                    break
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    attrs = _attrs(data[at + 20 : at + size])
                    header = attrs.get(NFQA_PACKET_HDR)
                    if self.trace is not None and (tcp := tcp_fields(attrs.get(NFQA_PAYLOAD, b""))):
                        self.trace.append((now, *tcp))
                    if header is not None:
                        (packet,) = struct.unpack_from("!I", header)
                        self.held.append((packet, now + delay_s))
                        self.packets += 1
                at += (size + 3) & ~3

    def release(self, now: float) -> list[float]:
        """Accept every packet due (one batch verdict); returns how late each one left."""
        late, last = [], None
        while self.held and self.held[0][1] <= now:
            packet, due = self.held.popleft()
            late.append(now - due)
            last = packet
        if last is not None:
            verdict = _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, last))
            self.sock.send(_message(NFQNL_MSG_VERDICT_BATCH, NLM_F_REQUEST, 0, verdict))
        return late

    def next_due(self) -> float | None:
        return self.held[0][1] if self.held else None


def serve(delay_us: float, parent: int, namespaces: list[str]) -> None:
    """Delay every packet the nodes of ``namespaces`` receive by ``delay_us`` until SIGTERM
    or until ``parent`` exits; print the counts (one JSON line) on SIGUSR1 and at the end
    (with ``LAB_DELAYLINE_TRACE``, write the packets' trace then too: ``write_trace``)."""
    trace_path = os.environ.get(TRACE_ENV) or None
    copy = TRACE_COPY if trace_path else 0
    queues = [Queue(open_queue(ns, copy), trace=[] if trace_path else None) for ns in namespaces]
    by_fd = {q.sock.fileno(): q for q in queues}
    signals, wake = os.pipe()
    signal.signal(signal.SIGTERM, lambda *_: os.write(wake, b"x"))
    signal.signal(signal.SIGUSR1, lambda *_: os.write(wake, b"c"))
    try:
        watch = [signals, *by_fd, os.pidfd_open(parent)]
    except ProcessLookupError:
        return
    try:  # wake on time while the ranks compute (root; else as is, and said in the counts)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        realtime = True
    except (PermissionError, OSError):
        realtime = False
    print("ready", flush=True)
    delay_s = delay_us * 1e-6
    late_sum, late_max, released = 0.0, 0.0, 0
    start_cpu = time.process_time()

    def counts() -> str:
        return json.dumps(
            {
                "delay_us": delay_us,
                "packets": sum(q.packets for q in queues),
                "late_mean_us": round(late_sum / released * 1e6, 1) if released else 0.0,
                "late_max_us": round(late_max * 1e6, 1),
                "cpu_s": round(time.process_time() - start_cpu, 3),
                "realtime": realtime,
            }
        )

    while True:
        dues = [d for q in queues if (d := q.next_due()) is not None]
        timeout = max(0.0, min(dues) - time.monotonic()) if dues else None
        ready, _, _ = select.select(watch, [], [], timeout)
        if signals in ready:
            asked = os.read(signals, 64)
            if b"c" in asked:
                print(counts(), flush=True)
            if b"x" in asked:
                break
        if watch[-1] in ready:  # the parent exited
            break
        for fd in ready:
            if fd in by_fd:
                by_fd[fd].receive(delay_s)
        now = time.monotonic()
        for q in queues:
            late = q.release(now)
            if late:
                released += len(late)
                late_sum += sum(late)
                late_max = max(late_max, max(late))
    if trace_path:
        write_trace(trace_path, queues)
    print(counts(), flush=True)


def write_trace(path: str, queues: list[Queue]) -> None:
    """The packets the queues saw, by arrival, as CSV (``TRACE_HEADER``); written whole to a
    temporary file first, then renamed over ``path``."""
    rows = sorted(
        (t, node, src, dst, size)
        for node, q in enumerate(queues)
        for t, src, dst, size in (q.trace or ())
    )
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        out.write(TRACE_HEADER + "\n")
        out.writelines(f"{t:.6f},{node},{src},{dst},{size}\n" for t, node, src, dst, size in rows)
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python -m runners.real.delayline DELAY_US PARENT NS [NS ...]",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        serve(float(argv[0]), int(argv[1]), argv[2:])
    except DelayLineError as e:
        print(f"delay line: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
