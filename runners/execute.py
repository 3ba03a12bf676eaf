"""Run one validated spec and write its run directory (the only place that looks at mode)."""

from __future__ import annotations

import contextlib
import csv
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import manifest, rundir
from .cluster.spec import ClusterRunSpec
from .sim import allreduce, ps
from .sim.engine import SimResult
from .spec import RunSpec

log = logging.getLogger("runners")

SIMULATORS = {"allreduce": allreduce.run, "ps": ps.run}


def simulate(spec: RunSpec) -> SimResult:
    try:
        simulator = SIMULATORS[spec.arena]
    except KeyError:
        raise NotImplementedError(f"no simulator for the '{spec.arena}' arena yet") from None
    return simulator(spec)


def run_to_directory(spec: RunSpec | ClusterRunSpec, out: Path, argv: list[str]) -> dict[str, Any]:
    """Execute ``spec`` and write the complete run directory at ``out``; return the summary."""
    if isinstance(spec, ClusterRunSpec):
        return _cluster_to_directory(spec, out, argv)
    if spec.mode == "real":
        return _real_to_directory(spec, out, argv)
    with _staged_run(spec, out, argv) as tmp:
        log.info("run %s on %s, mode %s, seed %d", spec.system, spec.workload, spec.mode, spec.seed)
        started = time.perf_counter()
        result = simulate(spec)
        wall_s = time.perf_counter() - started
        log.info(
            "simulated %d iterations in %.3f s (%d events)",
            spec.iterations,
            wall_s,
            int(result.metrics["sim_events"]),
        )
        summary = _write_results(tmp, spec, result, wall_s)
        log.info("iteration_time_s=%.6f", result.metrics["iteration_time_s"])
    return summary


@contextlib.contextmanager
def _staged_run(spec: RunSpec | ClusterRunSpec, out: Path, argv: list[str]) -> Iterator[Path]:
    """A staging directory for ``out`` with the manifest written and the run's log file
    attached to the ``runners`` logger while the body runs."""
    with rundir.staging(out) as tmp:
        handler = logging.FileHandler(tmp / rundir.LOG)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        try:
            rundir.write_json(tmp / rundir.MANIFEST, manifest.build(spec, argv))
            yield tmp
        finally:
            log.removeHandler(handler)
            handler.close()


def _run_info(spec: RunSpec | ClusterRunSpec) -> dict[str, Any]:
    """The summary's ``run`` block."""
    return {
        "system": spec.system,
        "workload": spec.workload,
        "mode": spec.mode,
        "seed": spec.seed,
        "arena": spec.arena,
    }


# A comm-arena run's artifacts: the per-iteration series and the timeline.
COMM_ARTIFACTS = [
    {"kind": "timeline", "path": "timeline.csv"},
    {"kind": "series", "path": rundir.METRICS},
]


def _write_series_and_timeline(tmp: Path, series: list[Any], timeline: list[Any]) -> None:
    rundir.write_jsonl(tmp / rundir.METRICS, series)
    with (tmp / "timeline.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SimResult.TIMELINE_COLUMNS)
        writer.writerows(timeline)


def _write_results(tmp: Path, spec: RunSpec, result: SimResult, wall_s: float) -> dict[str, Any]:
    _write_series_and_timeline(tmp, result.series, result.timeline)
    summary = {
        "run": _run_info(spec),
        "metrics": {**result.metrics, "sim_wall_s": wall_s},
        "units": {**result.units, "sim_wall_s": "s"},
        "artifacts": COMM_ARTIFACTS,
    }
    rundir.write_json(tmp / rundir.SUMMARY, summary)
    return summary


def _real_to_directory(spec: RunSpec, out: Path, argv: list[str]) -> dict[str, Any]:
    """A real run (``runners.real.launch``): the same files as a simulated one, plus the
    ranks' logs under ``ranks/``."""
    from .real import launch

    launch.preflight(spec)  # bad input is refused before the directory is staged
    with _staged_run(spec, out, argv) as tmp:
        log.info("run %s on %s, mode real, seed %d", spec.system, spec.workload, spec.seed)
        step = max(1, (spec.warmup_iterations + spec.iterations) // 10)

        def progress(done: int, total: int) -> None:
            if done % step == 0 or done == total:
                log.info("iteration %d/%d", done, total)

        result = launch.run(spec, tmp / "ranks", progress)
        health = result.network.health or {}
        if health.get("reorderings") or health.get("drops"):
            log.warning(
                "the emulated network reordered %d and dropped %d packets (%d retransmits): "
                "its iteration times include TCP's recovery",
                health["reorderings"], health["drops"], health["retransmits"],
            )  # fmt: skip
        for path in (tmp / "ranks").glob("params*.pt"):
            path.rename(tmp / path.name)
        _write_series_and_timeline(tmp, result.series, result.timeline)
        summary = {
            "run": _run_info(spec),
            "network": {
                "kind": result.network.kind,
                "bandwidth_gbps": spec.cluster.bandwidth_gbps
                if result.network.kind == "shaped"
                else None,
                "latency_emulated": result.network.latency_emulated,
                # where the delay line added it: its packets, lateness, CPU (shaped only)
                "delay_line": result.network.delay_line,
                "note": result.network.note,
                # the testbed's TCP retransmits, reorderings and shaper drops (shaped only)
                "health": result.network.health,
            },
            # the communication threads' priority (runners.real.priority)
            "comm_priority": result.priority_record(),
            "device": result.device_record(),
            # other processes' CPU on this machine beside the steady iterations (None where
            # not measured: rank 0 on another machine)
            "others": result.others.record() if result.others is not None else None,
            # how the lab's engine issued its collectives ("" where it did not run)
            "engine_dispatch": result.ranks[0].get("dispatch", "") if result.ranks else "",
            "metrics": {k: _finite(v) for k, v in result.metrics.items()},
            "units": result.units,
            "artifacts": COMM_ARTIFACTS,
        }
        rundir.write_json(tmp / rundir.SUMMARY, summary)
        log.info("iteration_time_s=%.6f", result.metrics["iteration_time_s"])
    return summary


JOB_COLUMNS = (
    "job",
    "model",
    "arch",
    "gpus",
    "arrival_s",
    "start_s",
    "finish_s",
    "jct_s",
    "duration_s",
    "starts",
    "utility",
    "admitted",
)


def _cluster_to_directory(spec: ClusterRunSpec, out: Path, argv: list[str]) -> dict[str, Any]:
    from .cluster import run as cluster_run

    with _staged_run(spec, out, argv) as tmp:
        log.info("run %s on %s, seed %d", spec.system, spec.workload, spec.seed)
        sim, info = cluster_run.prepare(spec)
        log.info("trace %s: %d jobs", info.source, info.jobs)
        started = time.perf_counter()
        result = sim.run()
        wall_s = time.perf_counter() - started
        log.info(
            "simulated %d jobs in %.3f s (%.0f jobs/s)",
            info.jobs,
            wall_s,
            result.metrics["sim_jobs_per_s"],
        )
        with (tmp / "jobs.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, JOB_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(result.jobs)
        summary = {
            "run": _run_info(spec),
            "policy": sim.policy_names,
            "trace": {
                "source": info.source,
                "jobs": info.jobs,
                "rows_skipped": len(info.skipped),
                "rows_filtered": info.filtered,
            },
            "metrics": {k: _finite(v) for k, v in result.metrics.items()},
            "units": result.units,
            "artifacts": [{"kind": "jobs", "path": "jobs.csv"}],
        }
        rundir.write_json(tmp / rundir.SUMMARY, summary)
    return summary


def _finite(value: float) -> float | None:
    """NaN (no job finished) is not JSON: null instead."""
    return None if value != value else value
