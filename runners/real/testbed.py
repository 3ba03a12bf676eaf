"""The emulated network of real runs (root only): every node (a training rank, later a
parameter server) in its own network namespace, joined to a bridge in a "switch" namespace by
a veth pair, each direction shaped to the node's NIC bandwidth by ``tc htb``: one token bucket
for the NIC (``burst_bytes`` deep), in which pure TCP acknowledgements go first, in a class of
their own, as on a full-duplex NIC a direction's acknowledgements do not wait behind the other
direction's data. (With one ``tc tbf`` queue per direction, as before 2026-11-23, they did: a
transfer running against another one in the opposite direction took 1.2-1.7 times as long as
alone, because its acknowledgements queued behind up to a burst of the other's data; see
``shaper_commands``.) Added latency (``latency_us`` above the testbed's own,
``NATIVE_LATENCY_US``) uses ``netem`` under both classes when the kernel has it; this project's
machines lack ``sch_netem``, so there a delay line in user space adds it (``runners.real.
delayline``: each node's received packets held ``latency_us`` in an ``NFQUEUE``), and a
latency up to ``NATIVE_LATENCY_US`` is the testbed's own, reported as not emulated.

A NIC delivers a TCP flow's packets in order; a veth delivers each into the backlog of the CPU
that sent it on, and behind a shaper that is whichever CPU dequeued it (the shaper's timer on
one, the sender's own call on another), so on a machine of several CPUs a flow's packets were
reordered with none lost: spurious fast retransmits, and on a 0.25 Gbit/s link iterations of
50-130 ms among ones of 18 (2026-11-30: 12-19 reorderings a rank in 40 iterations of wfbp on
resnet50-debug, 0 drops). Every veth end therefore steers what it receives by flow (receive
packet steering, ``rps_cpus``: ``steer``), which keeps a flow on one CPU's backlog.

Nothing is left behind: ``testbed()`` tears everything down on exit, a detached *reaper*
process deletes the namespaces if the launcher is killed (even by SIGKILL), and every start
sweeps namespaces whose creating process is gone. Names: ``labnet-<pid>-<n>-sw`` and
``labnet-<pid>-<n>-<k>``; addresses 10.77.0.<k+1>/24 exist only inside these namespaces.

``python -m runners.real.testbed sweep`` deletes every stale namespace by hand;
``python -m runners.real.testbed reap PID NAME`` is the reaper.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

PREFIX = "labnet"
_NAME = re.compile(rf"^({PREFIX}-(\d+)-\d+)-(sw|\d+)$")
_counter = itertools.count()
MIN_BURST_BYTES = 256 * 1024  # above a GSO super-packet (64 KiB), which tbf would drop
QUEUE_LATENCY_MS = 100  # a class's queue holds this long of its NIC's traffic (and a burst)
ACK_SHARE = 0.05  # the acknowledgements' class: its guaranteed share of the NIC (it may use all)


def ack_matches() -> list[list[str]]:
    """``u32`` matches (one filter each) of a pure TCP acknowledgement: TCP in an IPv4 header
    of 20 bytes, a total length of exactly the two headers (one match per TCP header length,
    5-15 words: timestamps and SACK blocks included, no payload however small, so data never
    goes first and no TCP stream is reordered), flags ACK without SYN, FIN, RST or PSH."""
    return [
        ["match", "ip", "protocol", "6", "0xff",
         "match", "u8", "0x05", "0x0f", "at", "0",
         "match", "u16", f"0x{20 + 4 * words:04x}", "0xffff", "at", "2",
         "match", "u8", f"0x{words << 4:02x}", "0xf0", "at", "32",
         "match", "u8", "0x10", "0x1f", "at", "33"]
        for words in range(5, 16)
    ]  # fmt: skip


NATIVE_LATENCY_US = 100.0  # up to this, no latency is added without netem (the testbed's own)
MAX_LATENCY_US = 100_000.0  # the most that may be added (the delay line's queues hold it)


def cpu_mask(cpus: Iterable[int]) -> str:
    """``cpus`` as sysfs writes a CPU mask: hexadecimal, in groups of 32 CPUs separated by
    commas, the highest first (``0,1`` -> ``00000003``)."""
    bits = 0
    for cpu in cpus:
        bits |= 1 << cpu
    groups = [f"{bits & 0xFFFFFFFF:08x}"]
    while bits >> 32:
        bits >>= 32
        groups.append(f"{bits & 0xFFFFFFFF:08x}")
    return ",".join(reversed(groups))


class TestbedError(RuntimeError):
    """The emulated network cannot be set up (not root, missing tools, ...)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode:
        raise TestbedError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def _tc(
    namespace: str, *args: str, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    if check and result.returncode:
        raise TestbedError(f"tc {' '.join(args)} in {namespace}: {result.stderr.strip()}")
    return result


def can_shape() -> str | None:
    """None if this process can build the testbed, else why not (one line)."""
    if os.geteuid() != 0:
        return "the emulated network needs root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if subprocess.run(["which", tool], capture_output=True).returncode:
            return f"the emulated network needs '{tool}' (Debian package iproute2)"
    return None


def added_latency_error(latency_us: float) -> str | None:
    """Why ``latency_us`` (a way) is not a latency this testbed adds, None if it is: above
    its own (``NATIVE_LATENCY_US``), up to ``MAX_LATENCY_US``."""
    if NATIVE_LATENCY_US < latency_us <= MAX_LATENCY_US:
        return None
    return (
        f"{latency_us:g} us is out of range: the testbed adds latency from above its own "
        f"{NATIVE_LATENCY_US:g} us up to {MAX_LATENCY_US:g} us a way"
    )


def can_delay() -> str | None:
    """None if the delay line can add latency here (``runners.real.delayline``: the kernel's
    ``nfnetlink_queue`` and ``iptables``), else why not (one line)."""
    if not os.path.exists("/proc/net/netfilter/nfnetlink_queue"):
        return "the kernel has neither the netem qdisc nor nfnetlink_queue"
    if subprocess.run(["which", "iptables"], capture_output=True).returncode:
        return "the delay line needs 'iptables' (Debian package iptables)"
    return None


def namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(only: str | None = None) -> list[str]:
    """Delete this project's namespaces whose creator is gone (or, with ``only``, those of
    testbed ``only``); returns the names deleted."""
    deleted = []
    for ns in namespaces():
        m = _NAME.match(ns)
        if not m:
            continue
        if only is not None and m.group(1) != only:
            continue
        if only is None and _alive(int(m.group(2))):
            continue
        kill_inside(ns)
        _ip("netns", "del", ns, check=False)
        deleted.append(ns)
    return deleted


def kill_inside(namespace: str) -> None:
    """SIGKILL every process still in ``namespace`` (a namespace is only freed, and its veth
    removed, when nothing runs in it any more)."""
    out = _ip("netns", "pids", namespace, check=False).stdout
    for pid in out.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            continue


def burst_bytes(gbps: float) -> int:
    """The depth of the token bucket shaping a NIC at ``gbps`` Gbit/s: a millisecond of its
    rate, and at least ``MIN_BURST_BYTES`` (the simulator's ``cluster.link_burst_bytes``
    models it)."""
    return max(MIN_BURST_BYTES, int(gbps * 1e9 / 8 / 1000))


def shaper_commands(
    dev: str, gbps: float, delay: str | None = None, change: bool = False
) -> list[list[str]]:
    """``tc`` commands (for ``tc -batch``) shaping ``dev``'s egress to ``gbps`` Gbit/s: HTB
    class ``1:1`` at the NIC's rate with a ``burst_bytes`` bucket, holding ``1:10`` for pure
    TCP acknowledgements (priority 0, ``ack_matches``) and ``1:20`` for everything else (the
    default), each queueing up to ``QUEUE_LATENCY_MS`` of the rate plus a burst (as the
    ``tbf`` before it; what it holds beyond is dropped). Both may borrow the whole rate; the
    acknowledgements are served first, so a transfer's acknowledgements never wait behind
    the data of one going the other way, and the two directions of a link run at full rate
    each (``tests/integration/test_real_mode`` measures it). ``delay``: a ``netem`` delay
    under both classes (in place of the byte limits). ``change``: re-rate the classes of an
    already shaped ``dev`` (time-varying stragglers) without dropping what is queued."""
    rate = max(int(gbps * 1e9), 8000)
    ack = max(int(rate * ACK_SHARE), 8000)
    burst = burst_bytes(gbps)
    bucket = ["burst", str(burst), "cburst", str(burst)]
    verb = "change" if change else "add"
    classes = [
        ["class", verb, "dev", dev, "parent", "1:", "classid", "1:1", "htb",
         "rate", f"{rate}bit", "ceil", f"{rate}bit", *bucket],
        ["class", verb, "dev", dev, "parent", "1:1", "classid", "1:10", "htb",
         "rate", f"{ack}bit", "ceil", f"{rate}bit", *bucket, "prio", "0", "quantum", "65536"],
        ["class", verb, "dev", dev, "parent", "1:1", "classid", "1:20", "htb",
         "rate", f"{rate - ack}bit", "ceil", f"{rate}bit", *bucket, "prio", "1",
         "quantum", "65536"],
    ]  # fmt: skip
    if change:
        return classes
    commands = [["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20"]]
    commands += classes
    for match in ack_matches():
        commands.append(["filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
                         "prio", "1", "u32", *match, "flowid", "1:10"])  # fmt: skip
    limit = int(gbps * 1e9 / 8 * QUEUE_LATENCY_MS / 1000) + burst
    leaf = ["netem", "delay", delay] if delay is not None else ["bfifo", "limit", str(limit)]
    for minor in ("10", "20"):
        commands.append(["qdisc", "add", "dev", dev, "parent", f"1:{minor}", "handle",
                         f"{minor}:", *leaf])  # fmt: skip
    return commands


@dataclass
class Testbed:
    """``nodes`` namespaces on one bridge; node k's NIC shaped to ``bandwidth_gbps[k]``."""

    name: str
    bandwidth_gbps: list[float]
    latency_us: float = 0.0
    netem: bool = False
    delay_line: subprocess.Popen[str] | None = None  # adds the latency where netem cannot
    delay_line_exit: str | None = None  # why it stopped under a run (``broken``), once it has
    steered: bool = True  # every veth end steers by flow (``steer``): no reordering
    created: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return len(self.bandwidth_gbps)

    @property
    def switch(self) -> str:
        return f"{self.name}-sw"

    def namespace(self, k: int) -> str:
        return f"{self.name}-{k}"

    def address(self, k: int) -> str:
        return f"10.77.{k // 250}.{k % 250 + 1}"

    def wrap(self, k: int, argv: list[str]) -> list[str]:
        """``argv`` run inside node k's namespace."""
        return ["ip", "netns", "exec", self.namespace(k), *argv]

    def setup(self) -> None:
        _ip("netns", "add", self.switch)
        self.created.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        self.netem = self.latency_us > 0 and _probe_netem(self.switch)
        for k in range(self.nodes):
            ns, port = self.namespace(k), f"v{k}"
            _ip("netns", "add", ns)
            self.created.append(ns)
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
                "netns", self.switch)  # fmt: skip
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(k)}/16", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self._shape(k, self.bandwidth_gbps[k], change=False)
            self.steered = steer(ns, ["eth0"]) and self.steered
        ports = [f"v{k}" for k in range(self.nodes)]
        self.steered = steer(self.switch, ports) and self.steered  # one call for the switch
        if self.latency_us > NATIVE_LATENCY_US and not self.netem:
            self._start_delay_line()

    @property
    def delayed(self) -> bool:
        """Whether this testbed's latency is added by the delay line."""
        return self.delay_line is not None

    def _start_delay_line(self) -> None:
        why = can_delay()
        if why:
            raise TestbedError(f"cannot add {self.latency_us:g} us of latency: {why}")
        nodes = [self.namespace(k) for k in range(self.nodes)]
        self.delay_line = subprocess.Popen(
            [sys.executable, "-m", "runners.real.delayline", f"{self.latency_us:g}",
             str(os.getpid()), *nodes],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.delay_line.stdout is not None
        ready, _, _ = select.select([self.delay_line.stdout], [], [], 30)
        if not ready or self.delay_line.stdout.readline().strip() != "ready":
            self.delay_line.kill()
            _, err = self.delay_line.communicate()
            raise TestbedError(f"the delay line did not start: {err.strip()[-500:]}")
        for ns in nodes:  # the rule only once the queue is bound: no packet is lost
            result = subprocess.run(
                ["ip", "netns", "exec", ns, "iptables", "-t", "mangle", "-A", "PREROUTING",
                 "-i", "eth0", "-j", "NFQUEUE", "--queue-num", "0"],
                capture_output=True, text=True,
            )  # fmt: skip
            if result.returncode:
                raise TestbedError(f"iptables in {ns}: {result.stderr.strip()}")

    def broken(self) -> str | None:
        """Why a run on this testbed cannot go on (None: it can): the delay line exited, and
        every packet a node receives is dropped from then on (its queues have no reader)."""
        line = self.delay_line
        if line is None or line.poll() is None:
            return None
        if self.delay_line_exit is None:
            err = line.stderr.read().strip() if line.stderr is not None else ""
            self.delay_line_exit = (
                f"the delay line adding the latency exited (code {line.returncode}"
                f"{': ' + err[-300:] if err else ''}); the nodes' packets were dropped from "
                "then on"
            )
        return self.delay_line_exit

    def delay_counts(self) -> dict[str, Any] | None:
        """The delay line's counts so far (``runners.real.delayline``); None without one."""
        line = self.delay_line
        if line is None or line.stdout is None:
            return None
        why = self.broken()
        if why:
            raise TestbedError(why)
        line.send_signal(signal.SIGUSR1)
        ready, _, _ = select.select([line.stdout], [], [], 10)
        return json.loads(line.stdout.readline()) if ready else None

    def _stop_delay_line(self) -> None:
        line, self.delay_line = self.delay_line, None
        if line is not None:
            line.terminate()
            try:
                line.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                line.kill()
                line.communicate()

    def notes(self) -> str:
        """What a run on this testbed reports it does not emulate (empty: nothing)."""
        said = []
        if self.delayed:
            said.append(
                f"{self.latency_us:g} us a way added by a delay line in user space (no netem qdisc)"
            )
        elif not self.netem:
            said.append("latency not emulated (no netem qdisc): the testbed's own")
        if not self.steered:
            said.append("a flow's packets may be reordered (no receive packet steering)")
        return "; ".join(said)

    def shape(self, k: int, gbps: float) -> None:
        """Re-shape node k's NIC, both directions, to ``gbps`` (time-varying stragglers:
        the classes change rate, what is queued stays)."""
        self._shape(k, gbps, change=True)

    def _shape(self, k: int, gbps: float, change: bool) -> None:
        delay = f"{self.latency_us / 2:g}us" if self.netem else None
        for ns, dev in ((self.namespace(k), "eth0"), (self.switch, f"v{k}")):
            commands = shaper_commands(dev, gbps, delay, change)
            _tc(ns, "-batch", "-", stdin="".join(" ".join(c) + "\n" for c in commands))
        self.bandwidth_gbps[k] = gbps

    def qdiscs(self, k: int) -> str:
        """Node k's NIC as ``tc`` shows it: queueing disciplines, then classes."""
        ns = self.namespace(k)
        return (_tc(ns, "qdisc", "show", "dev", "eth0").stdout
                + _tc(ns, "class", "show", "dev", "eth0").stdout)  # fmt: skip

    def health(self) -> dict[str, int]:
        """What the nodes' TCP and the shapers counted since setup: ``retransmits`` (segments
        sent again), ``reorderings`` (a flow's packets seen out of order: none on a NIC, see
        ``steer``) and ``drops`` (packets the shapers' queues dropped, and the delay line's
        queues in the nodes), over all nodes."""
        said = {"retransmits": 0, "reorderings": 0, "drops": 0}
        for k in range(self.nodes):
            tcp = tcp_counters(self.namespace(k))
            said["retransmits"] += tcp.get("TcpRetransSegs", 0)
            said["reorderings"] += sum(tcp.get(f"TcpExtTCP{kind}Reorder", 0)
                                       for kind in ("SACK", "TS", "Reno"))  # fmt: skip
            if self.delayed:  # its queue: full (queue_dropped), not handed over (user_dropped)
                queued = subprocess.run(
                    ["ip", "netns", "exec", self.namespace(k), "cat",
                     "/proc/net/netfilter/nfnetlink_queue"],
                    capture_output=True, text=True,
                ).stdout.split()  # fmt: skip
                said["drops"] += sum(int(n) for n in queued[5:7])
        for ns in self.created:
            shown = _tc(ns, "-s", "qdisc", "show", check=False).stdout
            said["drops"] += sum(int(n) for n in re.findall(r"dropped (\d+)", shown))
        return said

    def teardown(self) -> None:
        self._stop_delay_line()
        for ns in reversed(self.created):
            kill_inside(ns)
            _ip("netns", "del", ns, check=False)
        self.created.clear()
        sweep(only=self.name)


def tcp_counters(namespace: str) -> dict[str, int]:
    """``namespace``'s TCP counters (``/proc/net/snmp`` and ``netstat``), named as ``nstat``
    names them: ``TcpRetransSegs``, ``TcpExtTCPSACKReorder``, ..."""
    counters: dict[str, int] = {}
    lines = subprocess.run(  # both tables are pairs of lines: names, then values
        ["ip", "netns", "exec", namespace, "cat", "/proc/net/snmp", "/proc/net/netstat"],
        capture_output=True, text=True,
    ).stdout.splitlines()  # fmt: skip
    for names, values in zip(lines[0::2], lines[1::2], strict=False):
        kind, *keys = names.split()
        numbers = values.split()[1:]
        if len(numbers) == len(keys):
            counters.update(
                (kind.rstrip(":") + key, int(value))
                for key, value in zip(keys, numbers, strict=True)
            )
    return counters


def steer(namespace: str, devs: list[str]) -> bool:
    """Have ``devs`` in ``namespace`` steer the packets they receive to this process's CPUs by
    flow (``rps_cpus``), so a flow's are handled in order on one CPU (module docstring).
    False where the kernel cannot (no ``CONFIG_RPS``)."""
    paths = [f"/sys/class/net/{dev}/queues/rx-0/rps_cpus" for dev in devs]
    result = subprocess.run(
        ["ip", "netns", "exec", namespace, "tee", *paths],
        input=cpu_mask(sorted(os.sched_getaffinity(0))),
        capture_output=True,
        text=True,
    )
    return result.returncode == 0


def netem_available() -> bool:
    """Whether this kernel has the ``netem`` qdisc (tried in a namespace of its own)."""
    probe = f"{PREFIX}-{os.getpid()}-{next(_counter)}-sw"  # swept as any testbed's
    _ip("netns", "add", probe)
    try:
        return _probe_netem(probe)
    finally:
        _ip("netns", "del", probe, check=False)


def _probe_netem(namespace: str) -> bool:
    result = _tc(namespace, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1us",
                 check=False)  # fmt: skip
    if result.returncode == 0:
        _tc(namespace, "qdisc", "del", "dev", "lo", "root", check=False)
    return result.returncode == 0


@contextlib.contextmanager
def testbed(bandwidth_gbps: list[float], latency_us: float = 0.0) -> Iterator[Testbed]:
    """A testbed for the duration of the block, removed afterwards whatever happens."""
    why = can_shape()
    if why:
        raise TestbedError(why)
    sweep()
    tb = Testbed(f"{PREFIX}-{os.getpid()}-{next(_counter)}", list(bandwidth_gbps), latency_us)
    reaper = subprocess.Popen(
        [sys.executable, "-m", "runners.real.testbed", "reap", str(os.getpid()), tb.name],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives the launcher's process group being killed
    )
    try:
        tb.setup()
        yield tb
    finally:
        tb.teardown()
        reaper.terminate()
        reaper.wait()


def _reap(parent: int, name: str) -> None:
    """Wait for ``parent`` to exit, then delete testbed ``name``'s namespaces."""
    try:
        fd = os.pidfd_open(parent)
    except ProcessLookupError:
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    sweep(only=name)


def main(argv: list[str]) -> int:
    if argv[:1] == ["reap"] and len(argv) == 3:
        _reap(int(argv[1]), argv[2])
        return 0
    if argv[:1] == ["sweep"]:
        for ns in sweep():
            print(f"deleted {ns}")
        return 0
    print("usage: python -m runners.real.testbed sweep | reap PID NAME", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


class Reshaper:
    """Time-varying NIC rates on the emulated network, as a run's progress callback: when rank
    0 reports iteration ``i`` done, each of the nodes ``first, first + 1, ...`` whose rate in
    iteration ``i + 1`` (``rates(i + 1)``, one per node) differs from its current one is
    re-shaped (``Testbed.shape``), then ``progress`` is called. The switch follows rank 0, so
    the other ranks may be a little into the next iteration or not there yet (a
    reconstruction of a straggler window, not an exact one); ``changes`` counts the
    re-shapings, ``changed[j]`` those of node ``first + j``."""

    def __init__(
        self,
        bed: Testbed,
        rates: Callable[[int], list[float]],
        first: int,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.bed, self.rates, self.first, self.progress = bed, rates, first, progress
        self.rate = list(rates(0))
        self.changes = 0
        self.changed = [0] * len(self.rate)

    def __call__(self, done: int, total: int) -> None:
        if done < total:
            for j, gbps in enumerate(self.rates(done)):
                if gbps != self.rate[j]:
                    self.bed.shape(self.first + j, gbps)
                    self.rate[j] = gbps
                    self.changes += 1
                    self.changed[j] += 1
        if self.progress is not None:
            self.progress(done, total)
