"""``fidelity``'s interference check: a collective's CPU measured before an all-reduce set.

Why. The all-reduce twins charge each collective the compute time the calibration measured it
takes from a backward pass it overlaps (``collective_cpu_us``, ``collective_cpu_inline_us``;
``runners.real.probe.overlap``), with the compute's slow-down beside collectives, Horovod's
own cost and the small collectives' latencies taken in the same probes. On the lab's machine
those moved 2-3x from one day to the next while the compute did not (2026-12-07: a
collective's CPU at 1 Gbit/s 312 us the day before, 665-751 us that day; the same real runs
25.6 % off with the day before's measurements, 13.3 % with the day's; ``docs/
fidelity-history.md``). The compute check (``fidelity.compute_drift``) does not see it.

What. Before the real runs, at each of the set's networks where it has all-reduce systems and
the calibration measured a collective's CPU, ``PROBES`` launches of the calibration's own probe
of it (``runners.real.probe.collective_cpu``: the lab's engine issuing a synthetic model's
4 KiB all-reduces from the gradient hooks, the compute time each takes from the backward they
overlap; with the set's added latency), about 7 s each, their median against the
calibration's (the median over its models of ``collective_cpu_inline_us``; with added latency,
that latency's entry). The report gives it (``interference_check``) and, where a network moved
more than ``MOVED_PCT`` (probe to probe the value moves about 25 %), says the interference
measurements are stale and what to run: before the runs too, so that they can be measured
again first. Nothing is scored with it: one probe of one of the interference values says the
calibration is stale, not what the others would be now.

A probe that fails (the testbed cannot be set up, a rank dies) is noted under the network's
``errors``, and the set goes on.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import registry
from .fidelity_transport import network_key, network_name

# A network's check: {"loopback" or "<gbps>": {...}} (``check_interference``)
InterferenceChecks = dict[str, dict[str, Any]]
PROBES = 3  # launches of the probe per network (the calibration's value: the median of 5)
MOVED_PCT = 50.0  # beyond this the report says to measure the interference again
KEY = "collective_cpu_inline_us"  # the calibration's value the probe measures


def calibrated_us(point: dict[str, Any]) -> float | None:
    """A network entry's collective CPU (the median over its models), None where the
    calibration did not measure it."""
    values = list((point.get(KEY) or {}).values())
    return statistics.median(float(v) for v in values) if values else None


def interference_networks(
    systems: tuple[str, ...],
    bandwidths: tuple[float | None, ...],
    points: dict[float | None, dict[str, Any]],
) -> tuple[float | None, ...]:
    """The set's networks to check: every one whose calibration entry (``points``, by
    nominal Gbit/s, with the set's added latency) has a collective's CPU, where the set has
    an all-reduce system (none otherwise)."""
    if not any(registry.get(s).arena == "allreduce" for s in systems):
        return ()
    return tuple(b for b in bandwidths if b in points and calibrated_us(points[b]) is not None)


def probe_once(
    workers: int, nominal: float | None, threads: int, comm_priority: str, latency_us: float
) -> float:
    """One launch of the calibration's collective-CPU probe in a scratch directory, seconds."""
    from .real import probe

    with tempfile.TemporaryDirectory(prefix="lab-probe-") as tmp:
        return probe.collective_cpu(
            workers, nominal, Path(tmp), threads, comm_priority, latency_us=latency_us
        )


def check_interference(
    networks: tuple[float | None, ...],
    points: dict[float | None, dict[str, Any]],
    testbed: dict[str, Any],
    say: Callable[[str], None],
    added_latency_us: float = 0.0,
    probes: int = PROBES,
) -> InterferenceChecks:
    """Probe a collective's CPU ``probes`` times at each of ``networks`` (``points``: their
    calibration entries, with ``added_latency_us``): per network ``calibrated_us``,
    ``probes_us``, ``median_us`` and ``pct`` (the median over the calibration's, minus 1, in
    percent), ``moved`` (past ``MOVED_PCT``); a failed probe: ``errors`` (the set goes on)."""
    workers, threads = int(testbed["workers"]), int(testbed["threads"])
    priority = testbed.get("comm_priority", "normal")
    checks: InterferenceChecks = {}
    for nominal in networks:
        where = network_name(nominal)
        entry: dict[str, Any] = {
            "nominal_gbps": nominal,
            "calibrated_us": calibrated_us(points[nominal]),
            "probes_us": [],
        }
        checks[network_key(nominal)] = entry
        say(f"interference check: a collective's CPU at {where} ({probes} probes)")
        for _ in range(probes):
            try:
                seconds = probe_once(workers, nominal, threads, priority, added_latency_us)
            except RuntimeError as err:  # a rank died, or the testbed could not be set up
                entry.setdefault("errors", []).append(str(err).splitlines()[0])
                continue
            entry["probes_us"].append(seconds * 1e6)
        if not entry["probes_us"]:
            say(f"interference check at {where} failed ({entry['errors'][0]}); the set goes on")
            continue
        entry["median_us"] = statistics.median(entry["probes_us"])
        _compare(entry)
        say(
            f"interference check at {where}: {entry['median_us']:.0f} us a collective "
            f"({entry['pct']:+.0f}% against the calibration's {entry['calibrated_us']:.0f})"
        )
    return checks


def _compare(entry: dict[str, Any]) -> None:
    """``entry``'s move against its ``calibrated_us`` (``pct``, ``moved``)."""
    entry["pct"] = 100.0 * (entry["median_us"] / entry["calibrated_us"] - 1.0)
    entry["moved"] = abs(entry["pct"]) > MOVED_PCT


def against(
    checks: InterferenceChecks, points: dict[float | None, dict[str, Any]]
) -> InterferenceChecks:
    """A kept check (a journal's) against the calibration as it is now (``points``, by
    nominal Gbit/s): each network's ``calibrated_us`` and move again, its probes as they
    were; a set resumed or rescored after the calibration was measured again (or against
    another one) says how its runs' time compares with the calibration that scores them."""
    for entry in checks.values():
        entry["calibrated_us"] = calibrated_us(points[entry["nominal_gbps"]])
        if "median_us" in entry:
            _compare(entry)
    return checks


def moved(checks: InterferenceChecks | None) -> bool:
    """Whether any network's check moved past ``MOVED_PCT``."""
    return any(entry.get("moved") for entry in (checks or {}).values())


def advice(label: str, horovod: bool, added_latency_us: float) -> str:
    """What to run where the check moved."""
    flags = [
        f"--latency-only --added-latency-us {added_latency_us:g}"
        if added_latency_us
        else "--overlap-only"
    ]
    if horovod:
        flags.append("--horovod-only")
    return (
        f"measure the interference again (python -m runners calibrate --label {label} "
        f"{' '.join(flags)})"
    )


def interference_dates(
    testbed: dict[str, Any],
    systems: tuple[str, ...],
    today: str,
    added_latency_us: float = 0.0,
) -> dict[str, Any] | None:
    """When calibration ``testbed``'s measurements that the all-reduce systems among
    ``systems`` take their interference from were made (``overlap``; ``horovod`` where the set
    has Horovod; ``added_latency`` with ``added_latency_us``), each its part's date or the
    calibration's, ``today`` (the report's day) and ``earlier_day``: whether any is from
    before it. None for a set without all-reduce systems."""
    if not any(registry.get(s).arena == "allreduce" for s in systems):
        return None
    made = testbed.get("date")
    dates = {"overlap": testbed.get("overlap_date", made)}
    if "horovod" in systems:
        dates["horovod"] = testbed.get("horovod_date", made)
    if added_latency_us:
        dates["added_latency"] = testbed.get("added_latency_date", made)
    earlier = any(d is not None and d < today for d in dates.values())
    return {**dates, "today": today, "earlier_day": earlier}


def dates_line(
    dates: dict[str, Any], label: str, horovod: bool, added_latency_us: float = 0.0
) -> str:
    """``interference_dates`` in words, with what to do when one is from an earlier day."""
    named = {"overlap": "overlap", "horovod": "Horovod", "added_latency": "added latency"}
    parts = [f"{named[k]} {dates[k] or 'undated'}" for k in named if k in dates]
    line = (
        f"the calibration {label}'s interference measurements: {', '.join(parts)}; this "
        f"report {dates['today']}"
    )
    if dates["earlier_day"]:
        line += (
            ": from an earlier day, and the compute check does not see them move (on our "
            "machine a collective's CPU doubled from one day to the next while the compute "
            "stayed): before reading the error as the simulator's, "
            + advice(label, horovod, added_latency_us)
            + " the day of the set"
        )
    return line


def interference_line(
    checks: InterferenceChecks, label: str, horovod: bool, added_latency_us: float = 0.0
) -> str:
    """The interference check in words: each network's median against the calibration's,
    with what to do where one moved past ``MOVED_PCT``."""
    parts = []
    for entry in checks.values():
        nominal = entry["nominal_gbps"]
        where = network_name(nominal)
        if "median_us" not in entry:
            parts.append(f"{where} not measured ({'; '.join(entry.get('errors', ())) or '-'})")
            continue
        probes = entry["probes_us"]
        parts.append(
            f"{where} {entry['median_us']:.0f} us ({entry['pct']:+.0f}% against "
            f"{entry['calibrated_us']:.0f}; the median of {len(probes)} probe(s), "
            f"{min(probes):.0f}-{max(probes):.0f})"
        )
    line = (
        "interference check, a collective's CPU before the real runs (calibrate's probe, "
        f"collective_cpu_inline_us) against the calibration {label}'s: " + "; ".join(parts)
    )
    if moved(checks):
        line += (
            f"; more than {MOVED_PCT:g}% off: the twins' interference measurements (the "
            "collectives' CPU, the compute's slow-down beside them, Horovod's) are stale, so "
            "the error measures that as much as the simulator; "
            + advice(label, horovod, added_latency_us)
        )
    return line
