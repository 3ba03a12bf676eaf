"""``fidelity``'s transport check: the PS transport's CPU per message measured during a set.

Why. The PS twins charge each message the host CPU the calibration measured
(``host_message_cpu_us + S x host_cpu_ns_per_byte``, every process together;
``runners.real.probe.ps_message_cpu``). On the lab's machine that cost moved up to 28 %
within hours (``docs/fidelity-history.md``, 2026-11-29), and where the cores are full an
iteration lasts about its CPU work over the cores: a PS set then scores the calibration's
staleness as much as the simulator. The compute check (``fidelity.compute_drift``) sees the
compute move, not the transport.

What. At each of the compute check's stages (before the real runs, between their rounds,
after them) and at each of the set's networks where it has PS systems, one of the
calibration's message-CPU probes at each of its two message sizes (4 KiB and 64 KiB), about
30 s a network. The checks accumulate per network (``TransportChecks``): every probe kept,
the medians of the probes so far, the line through them as the calibration fits it
(``probe.host_cpu_fit``), and each size's median against the calibration's. ``fidelity``
scores the same real runs with the PS twins given that line (``transport_twin``;
``mape_with``'s ``transport_checked``, with the compute check's speed too
``transport_compute_checked``, with each run's ``transport_checked_run_checked``). Measured
apart from the runs it scores, as the compute check is: nothing is fitted to them.

A probe that fails (the testbed cannot be set up, a rank dies) is noted under the network's
``errors``, and the set goes on: its real runs are kept either way.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import registry
from .spec import RunSpec

# A network's checks: {"loopback" or "<gbps>": {...}} (``check_transport``)
TransportChecks = dict[str, dict[str, Any]]
# The calibration's values a network's check is against, and that a twin gets from it
FITTED = ("host_message_cpu_us", "host_cpu_ns_per_byte")
SIZES = ("small", "big")  # the probe's two message sizes: 4 KiB, 64 KiB


def ps_entry(transport: str = "blocking") -> str:
    """Where a calibration's network keeps the PS arena's measurements taken on PS transport
    ``transport`` (``real.ps_transport``): ``ps`` for the blocking one (every calibration's),
    ``ps_pipelined`` for the pipelined one (``calibrate --ps-only --ps-transport
    pipelined``)."""
    return "ps" if transport == "blocking" else f"ps_{transport}"


def network_key(nominal: float | None) -> str:
    """A network's key in ``TransportChecks`` and ``fidelity_interference``'s checks (JSON keys
    are strings)."""
    return "loopback" if nominal is None else f"{nominal:g}"


def network_name(gbps: float | None) -> str:
    """A fidelity row's (or check's) network in words: ``loopback`` or ``<g> Gbit/s``."""
    return "loopback" if gbps is None else f"{gbps:g} Gbit/s"


def transport_networks(
    systems: tuple[str, ...],
    bandwidths: tuple[float | None, ...],
    testbed: dict[str, Any],
    transport: str = "blocking",
) -> tuple[float | None, ...]:
    """The set's networks to check: every one, where the set has a PS system and the
    calibration measured the host's CPU per message there on PS ``transport`` (none
    otherwise)."""
    if not any(registry.get(s).arena == "ps" for s in systems):
        return ()
    have = {
        p["nominal_gbps"]
        for p in testbed["network"]
        if "host_cpu_small_us" in (p.get(ps_entry(transport)) or {})
    }
    return tuple(b for b in bandwidths if b in have)


def probe_once(
    workers: int,
    servers: int,
    nominal: float | None,
    threads: int,
    comm_priority: str,
    width: int,
    transport: str = "blocking",
) -> Any:
    """One of the calibration's message-CPU probes (``probe.ps_message_cpu``, on PS
    ``transport``) in a scratch directory; its ``compute_s`` and ``host_s`` in seconds.
    ``calibrate`` takes its probes through it too."""
    from .real import probe

    with tempfile.TemporaryDirectory(prefix="lab-probe-") as tmp:
        return probe.ps_message_cpu(
            workers, servers, nominal, Path(tmp), threads=threads,
            comm_priority=comm_priority, width=width, transport=transport,
        )  # fmt: skip


def _summarise(entry: dict[str, Any]) -> None:
    """``entry``'s medians, line and moves from the probes it holds (at least one a size)."""
    from .real import probe

    entry["host_cpu_small_us"] = statistics.median(entry["host_cpu_small_probes_us"])
    entry["host_cpu_big_us"] = statistics.median(entry["host_cpu_big_probes_us"])
    fixed_s, per_byte_s = probe.host_cpu_fit(
        entry["host_cpu_small_us"] * 1e-6, entry["host_cpu_big_us"] * 1e-6
    )
    entry["host_message_cpu_us"] = fixed_s * 1e6
    entry["host_cpu_ns_per_byte"] = per_byte_s * 1e9
    entry["message_cpu_us"] = statistics.median(entry["message_cpu_probes_us"])
    calibrated = entry["calibrated"]
    for size in SIZES:
        entry[f"{size}_pct"] = 100.0 * (
            entry[f"host_cpu_{size}_us"] / calibrated[f"host_cpu_{size}_us"] - 1.0
        )


def _ps_points(testbed: dict[str, Any], transport: str) -> dict[float | None, dict[str, Any]]:
    """The calibration's PS entries of ``transport``, by nominal Gbit/s (networks with one)."""
    key = ps_entry(transport)
    return {p["nominal_gbps"]: p[key] for p in testbed["network"] if p.get(key)}


def _calibrated(ps: dict[str, Any]) -> dict[str, float]:
    """The calibration's values a transport check compares with (a network's PS entry)."""
    names = (*FITTED, "host_cpu_small_us", "host_cpu_big_us", "message_cpu_us")
    return {k: float(ps[k]) for k in names if k in ps}


def against(
    checks: TransportChecks, testbed: dict[str, Any], transport: str = "blocking"
) -> TransportChecks:
    """A kept check (a journal's) against calibration ``testbed`` as it is now: each
    network's ``calibrated`` values and moves again, its probes as they were (a set resumed
    after the calibration was measured again, or rescored against another one). A network
    the calibration has no PS entry of keeps the values it was made against."""
    points = _ps_points(testbed, transport)
    for entry in checks.values():
        ps = points.get(entry["nominal_gbps"])
        if ps is None:
            continue
        entry["calibrated"] = _calibrated(ps)
        if entry.get("host_cpu_small_probes_us") and entry.get("host_cpu_big_probes_us"):
            _summarise(entry)
    return checks


def check_transport(
    networks: tuple[float | None, ...],
    testbed: dict[str, Any],
    when: str,
    checks: TransportChecks,
    say: Callable[[str], None],
    transport: str = "blocking",
) -> None:
    """Probe PS ``transport``'s CPU per message at each of ``networks`` (one probe at each
    message size), at stage ``when`` (``before``, ``between-<round>``, ``after``), into
    ``checks``: each network's ``calibrated`` values (the calibration's medians and line),
    ``stages`` (when each probe pair was taken), every probe (``host_cpu_small_probes_us``,
    ``host_cpu_big_probes_us``, ``message_cpu_probes_us``), and from them the medians
    (``host_cpu_small_us``, ``host_cpu_big_us``, ``message_cpu_us``), the calibration's line
    through them (``host_message_cpu_us``, ``host_cpu_ns_per_byte``) and each size's median
    over the calibration's, minus 1, in percent (``small_pct``, ``big_pct``). A failed
    probe: ``errors`` (the set goes on)."""
    from .real import probe

    workers, threads = int(testbed["workers"]), int(testbed["threads"])
    priority = testbed.get("comm_priority", "normal")
    points = _ps_points(testbed, transport)
    for nominal in networks:
        ps = points[nominal]
        key = network_key(nominal)
        entry = checks.setdefault(
            key,
            {
                "nominal_gbps": nominal,
                "calibrated": _calibrated(ps),
                "stages": [],
                "host_cpu_small_probes_us": [],
                "host_cpu_big_probes_us": [],
                "message_cpu_probes_us": [],
            },
        )
        where = network_name(nominal)
        say(f"transport check ({when}): a PS message's CPU at {where}")
        try:
            small, big = [
                probe_once(workers, int(ps["servers"]), nominal, threads, priority, w, transport)
                for w in (probe.PS_CPU_WIDTH, probe.PS_CPU_BIG_WIDTH)
            ]
        except RuntimeError as err:  # a rank died, or the testbed could not be set up
            entry.setdefault("errors", []).append(f"{when}: {str(err).splitlines()[0]}")
            say(f"transport check at {where} failed ({err}); the set goes on")
            continue
        entry["stages"].append(when)
        entry["host_cpu_small_probes_us"].append(small.host_s * 1e6)
        entry["host_cpu_big_probes_us"].append(big.host_s * 1e6)
        entry["message_cpu_probes_us"].append(small.compute_s * 1e6)
        _summarise(entry)
        say(
            f"transport check at {where}: {small.host_s * 1e6:.0f} / {big.host_s * 1e6:.0f} us "
            f"a 4 / 64 KiB message (the calibration's medians "
            f"{entry['calibrated']['host_cpu_small_us']:.0f} / "
            f"{entry['calibrated']['host_cpu_big_us']:.0f})"
        )


def transport_twin(sim: RunSpec, checks: TransportChecks, nominal: float | None) -> RunSpec | None:
    """A PS twin with the host's CPU per message (and the message CPU, where the twin charges
    it) the transport check measured at its network; None for a twin without the host's CPU
    per message, or a network the check has no probe of."""
    entry = checks.get(network_key(nominal))
    c = sim.cluster
    if sim.arena != "ps" or not c.host_cores or entry is None or "host_cpu_small_us" not in entry:
        return None
    changes: dict[str, Any] = {k: float(entry[k]) for k in FITTED}
    if c.message_cpu_us:  # the floor's twins charge it (the shared twins leave it out)
        changes["message_cpu_us"] = float(entry["message_cpu_us"])
    return dataclasses.replace(sim, cluster=dataclasses.replace(c, **changes))


def transport_line(checks: TransportChecks, label: str) -> str:
    """The transport check in words: each network's median host CPU per message at both
    sizes against the calibration's."""
    parts = []
    for entry in checks.values():
        nominal = entry["nominal_gbps"]
        where = network_name(nominal)
        calibrated = entry["calibrated"]
        if "host_cpu_small_us" not in entry:
            parts.append(f"{where} not measured ({'; '.join(entry.get('errors', ())) or '-'})")
            continue
        small, big = entry["host_cpu_small_probes_us"], entry["host_cpu_big_probes_us"]
        part = (
            f"{where} {entry['host_cpu_small_us']:.0f} / {entry['host_cpu_big_us']:.0f} us "
            f"({entry['small_pct']:+.1f} / {entry['big_pct']:+.1f}% against "
            f"{calibrated['host_cpu_small_us']:.0f} / {calibrated['host_cpu_big_us']:.0f}; "
            f"the median of {len(entry['stages'])} probe(s) each, "
            f"{', '.join(entry['stages'])}; the probes {min(small):.0f}-{max(small):.0f} / "
            f"{min(big):.0f}-{max(big):.0f})"
        )
        if entry.get("errors"):
            part += f", {len(entry['errors'])} failed"
        parts.append(part)
    return (
        f"transport check, the PS transport's host CPU per 4 / 64 KiB message against the "
        f"calibration {label}'s: " + "; ".join(parts)
    )
