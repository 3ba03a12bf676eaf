"""The real Horovod (``horovod.torch``, built by ``make horovod``) as the ``horovod`` baseline.

The ranks are started by ``horovodrun --gloo`` on loopback. Not yet on the emulated network:
``horovodrun`` reaches other hosts over ssh, which the namespaces do not have, and starting the
ranks with Horovod's own rendezvous server and ``HOROVOD_*`` variables (what ``horovodrun``
does) left Horovod 0.28.1's gloo device on ``lo`` despite ``HOROVOD_GLOO_IFACE=eth0``; a shaped
Horovod run is refused (``real.network: shaped``) or runs on loopback (``auto``), saying so.

The entry's parameters become Horovod's settings: ``fusion_threshold_bytes`` ->
``HOROVOD_FUSION_THRESHOLD``, ``cycle_time_ms`` -> ``HOROVOD_CYCLE_TIME``; both are recorded in
the run's manifest (the resolved spec), with Horovod's version.
"""

from __future__ import annotations

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
