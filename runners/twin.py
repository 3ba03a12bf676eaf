"""The simulator's prediction of a finished real run: its *twin*, as ``fidelity`` builds it.

A real run has a twin where a calibration (``python -m runners calibrate``, a testbed file in
``workloads/profiles/testbeds``) measured its configuration: the same model, network (shaped at
the same nominal bandwidth, or loopback), workers, torch threads, communication-thread priority
and, in the PS arena, server processes and PS transport, on the CPU, with no stragglers and,
in the all-reduce arena, the latency the emulated network added to the run where the
calibration measured the network with it (``calibrate --latency-only``; what the calibration
did not measure, the twin cannot know). The twin is
``fidelity.matched_specs``'s, the one the fidelity report scores, given the run's own system
parameters, iterations, warm-up and seed, and simulated as ``fidelity`` simulates it (an
all-reduce system with the plan the real run executed). Nothing in it comes from the run's
own times.

What the run actually had (network, device, priority) comes from its summary where it has
one, as ``auto`` in a spec resolves only when the run starts. Which calibration: the one asked
for, else the newest (its ``date``) that covers the run; ``NoTwin`` says why none does and what
to measure.

    python -m runners twin RUN_DIR [--label L] [--phases] [--json]

``phases`` sets the run's timeline beside its twin's phase by phase (each resource's busy time
and when its last operation of the iteration ends, the compute's waits): where the simulator
differs from the real run, not only by how much.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import fidelity
from .sim.engine import SimResult
from .spec import RealOptions, SpecError, validate

# The cluster fields a real run uses (``runners.real``); the others only the simulator reads.
REAL_CLUSTER_FIELDS = ("workers", "stragglers", "ps", "servers", "ps_stragglers")
SHAPED_CLUSTER_FIELDS = ("bandwidth_gbps", "server_bandwidth_gbps")  # read when shaped
# The real options that change the run's times beside the network and the priority.
REAL_FIELDS = ("threads", "implementation", "nodes", "gpus", "momentum", "ps_transport")


class NoTwin(ValueError):
    """The run has no twin: no calibration covers its configuration (the message says which
    part, and what to measure)."""


@dataclass(frozen=True)
class Prediction:
    """A real run's twin: the calibration it came from and what the simulator predicts."""

    label: str
    date: str
    spec: dict[str, Any]  # the twin, resolved
    iteration_time_s: float
    metrics: dict[str, float]
    # the twin's timeline (its last ``timeline_iterations``): rows of TIMELINE_COLUMNS
    timeline: tuple[tuple, ...] = ()

    TIMELINE_COLUMNS = SimResult.TIMELINE_COLUMNS  # the simulator's (and timeline.csv's)


def calibrations(directory: Path | None = None) -> list[dict[str, Any]]:
    """Every calibration (testbed file) in ``directory`` (default: the project's), newest
    first (its ``date``, then its label); unreadable files are left out."""
    directory = fidelity.TESTBEDS_DIR if directory is None else directory
    docs = []
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("network"), list) and "label" in doc:
            docs.append(doc)
    return sorted(docs, key=lambda d: (str(d.get("date", "")), str(d["label"])), reverse=True)


def _engine_dispatch(real: dict[str, Any], summary: dict[str, Any] | None) -> str:
    """How the lab's engine issued the run's collectives (``inline`` from the gradient hooks,
    or ``thread``; ``runners.real.engine``): its summary's; a summary from before summaries
    recorded it, ``thread`` (the engine had no other way then); with no summary, what the
    spec's ``real.dispatch`` gives its plan; ``""`` where the engine does not run it."""
    options = real.get("real") or {}
    own = real["system"] in fidelity.OWN_FRAMEWORKS and options.get("implementation") != "lab"
    if _arena(real["system"]) == "ps" or own:
        return ""
    if summary:
        return summary.get("engine_dispatch") or "thread"
    from .real import launch

    return launch.engine_dispatch(validate(real))


def _got(real: dict[str, Any], summary: dict[str, Any] | None) -> tuple[str, str, str]:
    """The network kind, device and communication priority the run had: its summary's, else
    its spec's where the spec settles them (``NoTwin`` for an ``auto`` without a summary)."""
    summary = summary or {}
    options = real.get("real") or {}
    network = (summary.get("network") or {}).get("kind") or options.get("network", "auto")
    device = (summary.get("device") or {}).get("kind") or options.get("device", "auto")
    if _arena(real["system"]) == "ps":  # the PS arena trains on the CPU
        device = "cpu"
    priority = (summary.get("comm_priority") or {}).get("priority") or options.get(
        "comm_priority", "auto"
    )
    for name, value in (("network", network), ("device", device), ("comm_priority", priority)):
        if value != "auto":
            continue
        if summary:  # a finished run from before its summary recorded this
            raise NoTwin(
                f"real.{name} is auto and the run's summary does not say what it got (a run "
                f"from before summaries recorded it): run it again, or with real.{name} set"
            )
        raise NoTwin(
            f"real.{name} is auto and the run has no summary saying what it got: the twin "
            "needs a finished run (or the spec to set it)"
        )
    return network, device, priority


def _added_latency(real: dict[str, Any], network: str, summary: dict[str, Any] | None) -> float:
    """The latency the emulated network added to the run a way (``cluster.latency_us``, by
    netem or the delay line), 0 for none: its summary says whether it was added; without
    one, a shaped run's latency above the testbed's own is."""
    from .real import testbed as tb

    latency = float((real.get("cluster") or {}).get("latency_us") or 0.0)
    if network != "shaped":
        return 0.0
    if summary is not None and "network" in summary:
        return latency if summary["network"].get("latency_emulated") else 0.0
    return latency if latency > tb.NATIVE_LATENCY_US else 0.0


def _arena(system: str) -> str:
    from . import registry

    return registry.get(system).arena


def twin_spec(
    real: dict[str, Any], testbed: dict[str, Any], summary: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The raw twin of the resolved real spec ``real`` under calibration ``testbed``;
    ``NoTwin`` names the first thing the calibration did not measure."""
    label = testbed["label"]
    if real.get("mode") != "real":
        raise NoTwin("not a real run: a simulated run is its own prediction")
    network, device, priority = _got(real, summary)
    if device != "cpu":
        raise NoTwin(f"the run trained on {device}; calibrations measure the CPU testbed")
    if network not in ("shaped", "loopback"):
        raise NoTwin(f"real.network {network}: no calibration measures it")
    if real["workload"] not in testbed.get("profiles", {}):
        raise NoTwin(
            f"calibration '{label}' did not measure {real['workload']}: run `python -m runners "
            f"calibrate --models {real['workload']}` (with the bandwidths the run uses)"
        )
    cluster = real.get("cluster") or {}
    nominal = float(cluster["bandwidth_gbps"]) if network == "shaped" else None
    try:
        matched, twin = fidelity.matched_specs(
            real["system"],
            real["workload"],
            nominal,
            testbed,
            int(real.get("iterations", 20)),
            engine_dispatch=_engine_dispatch(real, summary),
            ps_transport=(real.get("real") or {}).get("ps_transport", "blocking"),
            added_latency_us=_added_latency(real, network, summary),
        )
    except (fidelity.CalibrationMissing, KeyError) as exc:
        raise NoTwin(str(exc).strip("'\"")) from None
    expected = validate(matched).as_dict()
    wanted = testbed.get("comm_priority", "normal")
    if priority != wanted:
        raise NoTwin(
            f"the run's communication threads ran at {priority} priority, calibration "
            f"'{label}' measured them at {wanted}: set real.comm_priority: {wanted}"
        )
    fields = REAL_CLUSTER_FIELDS + (SHAPED_CLUSTER_FIELDS if network == "shaped" else ())
    for key in fields:
        if cluster.get(key) != expected["cluster"].get(key):
            raise NoTwin(
                f"cluster.{key} is {cluster.get(key)!r}, calibration '{label}' measured "
                f"{expected['cluster'].get(key)!r}"
            )
    options, measured = real.get("real") or {}, expected.get("real") or {}
    for key in REAL_FIELDS:
        have = options.get(key, getattr(RealOptions, key))
        want = measured.get(key, getattr(RealOptions, key))
        if have != want:
            raise NoTwin(f"real.{key} is {have!r}, calibration '{label}' measured {want!r}")
    if real.get("batch_size") != expected.get("batch_size"):
        raise NoTwin(
            f"batch_size is {real.get('batch_size')!r}, calibration '{label}' profiled "
            f"{expected.get('batch_size')!r} (calibrations measure each model at its default "
            "batch size: a run at that batch has a twin)"
        )
    twin["params"] = dict(real.get("params") or {})
    for key in ("iterations", "warmup_iterations", "seed", "timeline_iterations"):
        if key in real:
            twin[key] = real[key]
    return twin


def predict(
    real: dict[str, Any],
    summary: dict[str, Any] | None = None,
    label: str | None = None,
    directory: Path | None = None,
) -> Prediction:
    """The twin of the resolved real spec ``real`` (with its run's ``summary``), simulated:
    under calibration ``label``, else the newest that covers it. ``NoTwin`` when none does
    (its message: why not, for the newest calibration or the one asked for)."""
    if label is not None:
        path = (fidelity.TESTBEDS_DIR if directory is None else directory) / f"{label}.json"
        if not path.exists():
            raise NoTwin(f"no calibration '{label}' ({path})")
        docs = [json.loads(path.read_text())]
    else:
        docs = calibrations(directory)
        if not docs:
            raise NoTwin("no calibration on this machine: run `python -m runners calibrate`")
    first: NoTwin | None = None
    for doc in docs:
        try:
            raw = twin_spec(real, doc, summary)
        except NoTwin as exc:
            first = first or exc
            continue
        try:
            spec, real_spec = validate(raw), validate(real)
        except SpecError as exc:  # a calibration the simulator no longer reads
            first = first or NoTwin(f"calibration '{doc['label']}': {exc}")
            continue
        result = fidelity._twin(real_spec, spec)
        return Prediction(
            label=str(doc["label"]),
            date=str(doc.get("date", "")),
            spec=spec.as_dict(),
            iteration_time_s=float(result.metrics["iteration_time_s"]),
            metrics={k: float(v) for k, v in result.metrics.items()},
            timeline=tuple(tuple(row) for row in result.timeline),
        )
    assert first is not None
    if len(docs) > 1:
        raise NoTwin(f"no calibration covers this run (the newest, {docs[0]['label']}: {first})")
    raise NoTwin(str(first))


def predict_run_dir(run_dir: Path, label: str | None = None) -> tuple[dict[str, Any], Prediction]:
    """A finished real run directory's summary and its twin (``NoTwin``; ``ValueError`` for a
    directory that is not a finished run)."""
    from . import rundir

    manifest = run_dir / "manifest.json"
    if not manifest.is_file():
        raise ValueError(f"{run_dir}: no manifest.json (not a run directory)")
    spec = json.loads(manifest.read_text()).get("spec")
    if not isinstance(spec, dict):
        raise ValueError(f"{manifest}: no spec")
    summary = rundir.read_summary(run_dir)
    return summary, predict(spec, summary, label)


def _family(resource: str) -> str:
    """A timeline resource without its lane: ``compute[w1]`` -> ``compute``, ``ps3.in`` ->
    ``ps.in``."""
    return re.sub(r"^ps\d+\.", "ps.", re.sub(r"\[[^\]]*\]", "", resource))


def _phase_values(rows: Iterable[Sequence]) -> tuple[dict[str, float], list[int]]:
    """Per phase, its median over the timeline's iterations (each but the last, which has no
    next one, when it has two or more), in ms; and the iterations used. Each iteration starts
    at its first forward op (else its first operation). A phase's *busy* time is per lane (a
    worker's, a server's): its operations' total over the family's lanes; *ends* is when its
    last operation of the iteration ends, after the iteration's start; a compute lane's
    *waits* within the forward (backward) are its span less its operations (waiting for
    pulls or collectives, a descheduled thread)."""
    by_it: dict[int, list[tuple[str, str, str, float, float]]] = defaultdict(list)
    lanes: dict[str, set[str]] = defaultdict(set)
    for it, resource, op, _layer, start, end, *_ in rows:
        family = _family(resource)
        by_it[int(it)].append((resource, family, str(op), float(start), float(end)))
        lanes[family].add(resource)
    iterations = sorted(by_it)
    starts = {}
    for it in iterations:
        ops = by_it[it]
        forward = [st for res, fam, op, st, _ in ops if fam == "compute" and op == "forward"]
        starts[it] = min(forward or [st for *_, st, _ in ops])
    used = iterations[:-1] if len(iterations) > 1 else iterations
    series: dict[str, list[float]] = defaultdict(list)
    for it in used:
        if it + 1 in starts:
            series["iteration"].append(starts[it + 1] - starts[it])
        busy: dict[tuple[str, str], float] = defaultdict(float)
        ends: dict[tuple[str, str], float] = {}
        span: dict[tuple[str, str], list[float]] = {}  # a compute lane's, per op
        for res, fam, op, st, en in by_it[it]:
            busy[fam, op] += en - st
            ends[fam, op] = max(ends.get((fam, op), en), en)
            if fam == "compute":
                lo_hi = span.setdefault((res, op), [st, en, 0.0])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], st), max(lo_hi[1], en)
                lo_hi[2] += en - st
        for (fam, op), total in busy.items():
            series[f"{fam} {op}: busy"].append(total / len(lanes[fam]))
            series[f"{fam} {op}: ends"].append(ends[fam, op] - starts[it])
        waits: dict[str, list[float]] = defaultdict(list)
        for (_res, op), (lo, hi, work) in span.items():
            waits[op].append(hi - lo - work)
        for op, values in waits.items():
            series[f"compute {op}: waits"].append(statistics.fmean(values))
    return {k: 1e3 * statistics.median(v) for k, v in series.items()}, used


def phases(real_rows: Iterable[Sequence], twin_rows: Iterable[Sequence]) -> list[dict[str, Any]]:
    """A real run's timeline (rows of ``Prediction.TIMELINE_COLUMNS``) beside its twin's,
    phase by phase (``_phase_values``): ``{"phase", "real_ms", "twin_ms", "iterations"}``
    per phase either has (``iterations``: the real run's used, in words: "iterations 5-6",
    "iteration 30"), the iteration first, then the compute's, then the others by when they
    end; NaN where one side lacks the phase."""
    real, real_its = _phase_values(real_rows)
    sim, sim_its = _phase_values(twin_rows)
    names = list(dict.fromkeys([*real, *sim]))
    bases = list(dict.fromkeys(n.split(": ")[0] for n in names))
    quantity = {"busy": 0, "waits": 1, "ends": 2}

    def place(name: str) -> tuple[int, float, int, int]:
        """The iteration, the compute's phases, then the others by when they end; within a
        phase busy, waits, ends."""
        base, _, what = name.partition(": ")
        rank = 0 if base == "iteration" else 1 if base.startswith("compute ") else 2
        end = real.get(f"{base}: ends", sim.get(f"{base}: ends", 0.0)) if rank == 2 else 0.0
        return (rank, end, bases.index(base), quantity.get(what, 0))

    names.sort(key=place)
    used = ""  # "iteration 30", "iterations 5-6": what the medians are over
    if real_its:
        used = f"iteration {real_its[0]}"
        if len(real_its) > 1:
            used = f"iterations {real_its[0]}-{real_its[-1]}"
    return [
        {
            "phase": name,
            "real_ms": real.get(name, float("nan")),
            "twin_ms": sim.get(name, float("nan")),
            "iterations": used,
        }
        for name in names
    ]


def run_phases(run_dir: Path, prediction: Prediction) -> list[dict[str, Any]]:
    """``phases`` of a finished real run's ``timeline.csv`` and its twin's; ``ValueError`` when
    the run recorded no timeline."""
    import csv

    path = run_dir / "timeline.csv"
    if not path.is_file():
        raise ValueError(f"{run_dir}: no timeline.csv (the run recorded no timeline)")
    with path.open(newline="") as f:
        try:
            rows = [
                (r["iteration"], r["resource"], r["op"], r["layer"], r["start_s"], r["end_s"])
                for r in csv.DictReader(f)
            ]
        except KeyError as exc:
            raise ValueError(f"{path}: no column {exc} (not a timeline)") from None
    if not rows or not prediction.timeline:
        raise ValueError(f"{run_dir}: an empty timeline, the run's or its twin's")
    try:
        return phases(rows, prediction.timeline)
    except (TypeError, ValueError) as exc:  # a row whose numbers are not numbers
        raise ValueError(f"{path}: {exc}") from None
