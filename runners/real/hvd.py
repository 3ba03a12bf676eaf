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


def settings_env(params: dict[str, Any]) -> dict[str, str]:
    return {
        "HOROVOD_FUSION_THRESHOLD": str(int(params["fusion_threshold_bytes"])),
        "HOROVOD_CYCLE_TIME": f"{float(params['cycle_time_ms']):g}",
    }


def _assignments(addresses: list[str]) -> list[Any]:
    """Horovod's host assignment for one slot per address (rank k on ``addresses[k]``)."""
    from horovod.runner.common.util import hosts

    return hosts.get_host_assignments(
        hosts.parse_hosts(",".join(f"{a}:1" for a in addresses)), len(addresses)
    )


def rank_env(addresses: list[str], rank: int, rendezvous: str, port: int) -> dict[str, str]:
    """The variables ``horovodrun --gloo`` gives rank ``rank`` of one rank per address, with
    Horovod's rendezvous server at ``rendezvous:port``."""
    slot = next(s for s in _assignments(addresses) if s.rank == rank)
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
        "HOROVOD_GLOO_IFACE": "eth0",
    }


def with_hostname(address: str, argv: list[str]) -> list[str]:
    """``argv`` in a new UTS namespace whose host name is ``address`` (see the module)."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', address, *argv]


def serve(addresses: list[str]) -> int:
    """Run Horovod's rendezvous server for one rank per address; print ``port N``, then
    serve until SIGTERM or stdin closes."""
    from horovod.runner.http.http_server import RendezvousServer

    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(_assignments(addresses))
    print(f"port {port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.stdin.read()  # the launcher holds the pipe open while the ranks run
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "serve":
        print("usage: python -m runners.real.hvd serve ADDRESS...", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(sys.argv[2:]))
