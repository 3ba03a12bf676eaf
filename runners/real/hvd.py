"""The real Horovod (``horovod.torch``, built by ``make horovod``) as the ``horovod`` baseline.

On loopback the ranks are started by ``horovodrun --gloo``. On the emulated network (root)
each rank runs in its own network namespace, like every other system's ranks: ``horovodrun``
would reach its hosts over ssh, which the namespaces do not have, so the launcher does what
``horovodrun --gloo`` does itself: Horovod's own rendezvous server (``RendezvousServer``, run
in node 0's namespace by ``python -m runners.real.hvd serve ADDRESS...``), one host per rank
(its namespace's address) and the ``HOROVOD_*`` variables of Horovod's host assignment.

Each rank also gets its own UTS namespace whose host name is its address
(``unshare --uts``). Horovod 0.28.1 builds the gloo device of its process sets (the global
one included) from an interface name that ``HOROVOD_GLOO_IFACE`` never reaches
(``GlooContext::InitializeForProcessSet`` reads the new context's empty ``gloo_iface_``), so
gloo falls back to resolving the host name: on the machine's own name that is 127.0.0.1, and
ranks in different namespaces cannot connect. With the address as host name gloo binds the
rank's shaped interface. (Seen in Horovod's debug log: the first contexts on ``eth0``, the
process set's on ``lo``.)

Over several machines (``real.nodes``) each machine's runner starts its share of the ranks
(``launch._supervise_horovod_nodes``): node 0 runs the rendezvous server on the port the
nodes were given, the hosts are labels ``node<k>:<ranks>`` and gloo uses the interface
towards node 0. The process-set bug above applies there too: a machine whose name resolves
to loopback gets the same UTS-namespace fix when root, and otherwise a clear error.

The entry's parameters become Horovod's settings: ``fusion_threshold_bytes`` ->
``HOROVOD_FUSION_THRESHOLD``, ``cycle_time_ms`` -> ``HOROVOD_CYCLE_TIME``; both are recorded in
the run's manifest (the resolved spec), with Horovod's version.
"""

from __future__ import annotations

import signal
import sys
from typing import Any


def available() -> str | None:
    """Horovod's version if ``horovod.torch`` imports, else None."""
    try:
        import horovod
        import horovod.torch
    except ImportError:
        return None
    return str(horovod.__version__)


def nccl_built() -> bool:
    """Whether the installed Horovod was built with NCCL (GPU collectives)."""
    try:
        import horovod.torch as hvd
    except ImportError:
        return False
    return bool(hvd.nccl_built())


def settings_env(params: dict[str, Any]) -> dict[str, str]:
    return {
        "HOROVOD_FUSION_THRESHOLD": str(int(params["fusion_threshold_bytes"])),
        "HOROVOD_CYCLE_TIME": f"{float(params['cycle_time_ms']):g}",
    }


def _slots(hosts: list[str]) -> str:
    """``horovodrun -H``'s host list: ``HOST:SLOTS`` each (one slot when SLOTS is left out)."""
    return ",".join(h if ":" in h else f"{h}:1" for h in hosts)


def _assignments(hosts: list[str]) -> list[Any]:
    """Horovod's host assignment for ``hosts`` (``HOST[:SLOTS]``; ranks fill each host's slots
    in turn)."""
    from horovod.runner.common.util import hosts as util

    parsed = util.parse_hosts(_slots(hosts))
    return util.get_host_assignments(parsed, sum(h.slots for h in parsed))


def rank_env(
    hosts: list[str], rank: int, rendezvous: str, port: int, iface: str = "eth0"
) -> dict[str, str]:
    """The variables ``horovodrun --gloo`` gives rank ``rank`` of ``hosts`` (``HOST[:SLOTS]``),
    with Horovod's rendezvous server at ``rendezvous:port`` and gloo on ``iface``."""
    slot = next(s for s in _assignments(hosts) if s.rank == rank)
    return {
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": iface,
    }


def node_hosts(count: int, per_node: int) -> list[str]:
    """Horovod's hosts for a run over ``count`` machines: ``node<k>:<per_node>``. The names
    are only labels (the rendezvous scopes of each machine's ranks); gloo finds its addresses
    through ``HOROVOD_GLOO_IFACE`` and the host name (see the module)."""
    return [f"node{k}:{per_node}" for k in range(count)]


def interface_toward(host: str, port: int) -> tuple[str, str]:
    """This machine's address and interface on the route to ``host`` (no packet is sent:
    a UDP socket's connect only picks the route)."""
    import socket

    import psutil

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        address = probe.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return address, name
    raise RuntimeError(f"no interface here has {address}, the address towards {host}")


def name_resolves_to_loopback() -> bool:
    """Whether this machine's host name resolves to a loopback address (Debian's
    ``127.0.1.1 name`` in /etc/hosts, for one): then Horovod's process sets bind loopback."""
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(socket.gethostbyname(socket.gethostname())).is_loopback
    except OSError:
        return True


def with_hostname(address: str, argv: list[str]) -> list[str]:
    """``argv`` in a new UTS namespace whose host name is ``address`` (see the module)."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', address, *argv]


def serve(hosts: list[str], port: int = 0) -> int:
    """Run Horovod's rendezvous server for ``hosts`` (``HOST[:SLOTS]``) on ``port`` (0: a free
    one); print ``port N``, then serve until SIGTERM or stdin closes."""
    from horovod.runner.http.http_server import (
        RendezvousHandler,
        RendezvousHTTPServer,
        RendezvousServer,
    )

    server = RendezvousServer(verbose=0)
    if port:  # what RendezvousServer.start does, on the port the nodes were told
        import threading

        server._httpd = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
        server._listen_thread = threading.Thread(target=server._httpd.serve_forever, daemon=True)
        server._listen_thread.start()
    else:
        port = server.start()
    server.init(_assignments(hosts))
    print(f"port {port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.stdin.read()  # the launcher holds the pipe open while the ranks run
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    port = 0
    if args[1:2] == ["--port"] and len(args) > 2 and args[2].isdigit():
        port = int(args[2])
        args = args[:1] + args[3:]
    if len(args) < 2 or args[0] != "serve":
        print("usage: python -m runners.real.hvd serve [--port N] HOST[:SLOTS]...", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(args[1:], port))
