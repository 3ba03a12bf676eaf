"""Parameter sweeps: ``python -m runners grid GRID --out DIR``.

A grid file (YAML or JSON) names lists of values; the grid is their cartesian product::

    systems: [wfbp, bytescheduler]   # registry names, "all" or "arena:<arena>"
    workloads: [resnet50, vgg16]
    seeds: [0, 1, 2]                 # optional, default [0]
    cluster:                         # any cluster field: a list = an axis, a scalar = fixed
      bandwidth_gbps: [1, 10, 25]
      workers: 8
    params:                          # optional, per system; a list = an axis of that system only
      bytescheduler: {credit_bytes: [4000000, 64000000]}
    iterations: 20                   # any other run-spec field: fixed, or a list = an axis
    mode: sim

``cluster.stragglers`` (and ``ps_stragglers``) is itself a list (of ``{worker, slowdown}``); it
is an axis only when given as a list of such lists. ``"all"`` selects every system of the
single-job arenas (all but the cluster arena). ``name`` and ``description`` are free text.

A grid over the cluster arena (schedulers and placement policies on a trace of many jobs, see
``runners.cluster.spec``) has a ``trace`` section instead of ``workloads``, and its ``cluster``
section holds the cluster arena's fields::

    systems: [fifo, srtf, tiresias, oasis, bin-packing]   # or "arena:cluster"
    seeds: [0, 1]                    # also the seed of a generated trace
    trace:                           # any trace field: a list = an axis, a scalar = fixed
      generator: philly
      jobs: 100
      jobs_per_hour: [5, 10, 20, 40] # the load sweep
      duration_scale: 0.1
    cluster: {servers: [8, 16], gpus_per_server: 8}
    params: {bin-packing: {scheduler: [fifo, srtf]}}
    mode: sim                        # optional; ``labels`` may be given too

A generated trace draws its jobs from the run's seed: one seed gives the same jobs (sizes,
durations) at every ``trace.jobs_per_hour``, only the arrival times scale. A grid's systems are
all of the cluster arena or all of the communication arenas (``allreduce``, ``ps``): a mix is
refused (field ``systems``), as are ``trace`` in a communication grid and ``workloads``,
``iterations``, ... in a cluster grid (the field is named). Besides validating every spec, a
cluster grid builds each distinct trace once (per seed, trace and cluster) and checks that its
jobs fit the cluster before anything runs (field ``trace``).

Every expanded spec is validated (``spec.validate``) before anything runs. The runs go to a
process pool (fork: the specs are already validated and the profiles loaded; ``jobs=1`` runs in
this process) in small batches. Output directory::

    grid.json             the grid as given, the resolved axes, counts, code version
    specs.jsonl           {"run_key", "index", "arena", "role", "workload", "spec"} per run
    results.partial.csv   run_key, ..., status, error, metrics (JSON): appended as runs finish
    results.csv           the tidy table, one row per run in run order (written at the end)
    failures.log          tracebacks of failed runs (only if some failed)
    runs/<run_key>/       full run directories (``keep_runs`` only)

The table's columns: ``run_key, system, arena, role, workload, seed, mode, iterations,
warmup_iterations, batch_size`` (the last three for communication runs only), then every field
of the resolved trace (cluster runs: ``trace.jobs``, ``trace.jobs_per_hour``, ...), of the
resolved cluster (``cluster.workers``, ``cluster.bandwidth_gbps``, ..., or ``cluster.servers``,
..., defaults included), the resolved parameters (``params.<name>``, empty for systems without
it), every metric the simulator reports (``iteration_time_s``, ``throughput_samples_per_s``, ...;
cluster runs: ``jobs_finished``, ``avg_jct_s``, ``p95_jct_s``, ``makespan_s``,
``total_utility``, ``avg_queueing_s``, ``gpu_utilization``, ``admitted_fraction``,
``sim_jobs_per_s``, ...), then ``sim_wall_s`` (wall-clock of the simulation, or of the real
run), ``status``
(ok/failed) and ``error`` (one line). A cluster run's ``workload`` is its trace
(``philly-100``, or the trace file's name). ``read_results`` loads it with proper dtypes.

``run_key`` is a short hash of the resolved spec, so the same grid gives the same keys and,
except for ``sim_wall_s``, the same table; ``resume`` skips run keys already recorded (ok or
failed) and runs the rest, also after the grid file gained values.

``mode: real`` (or a ``mode`` axis) runs for real (``runners.real``): every real run is checked
against this machine before anything runs (root for a shaped network, ranks, the real
Horovod: the field is named), the runs go one at a time in this process (two at once would
time each other), and the table gains a ``device`` column after ``mode``: where each trained.
A real run's key includes that device, so a grid resumed on a machine that resolves
``real.device: auto`` differently runs its real runs again. A ``real`` section holds the real
runs' fields, a list an axis, as ``cluster`` does::

    mode: [sim, real]
    real: {network: shaped, ps_transport: [blocking, pipelined], dispatch: [auto, thread]}

It goes to the real runs alone, and a field of one arena (``spec.REAL_KEY_ARENAS``:
``ps_transport`` the PS arena's; ``dispatch``, ``implementation``, ``nodes``,
``ddp_timeline`` the all-reduce arena's) to that arena's systems alone: a run a field does not
go to is made once, not once per value of its axis. A section no real run takes is refused
(field ``real``), as is a field of an arena the grid runs nothing of for real (its field).
The table then has a ``real.<field>`` column per field (defaults included), empty on
simulated rows.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import typing
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from . import execute, manifest, registry, rundir
from .cluster.spec import ClusterRunSpec
from .spec import (
    REAL_KEY_ARENAS,
    CommCluster,
    RealOptions,
    RunSpec,
    SpecError,
    load_file,
    validate,
)

if TYPE_CHECKING:
    import pandas as pd

GRID_JSON = "grid.json"
SPECS = "specs.jsonl"
RESULTS = "results.csv"
PARTIAL = "results.partial.csv"
FAILURES = "failures.log"
RUNS_DIR = "runs"

RUN_KEY_CHARS = 12
MAX_BATCH = 32  # runs per task handed to a worker process
BATCHES_PER_WORKER = 8  # at least this many tasks per worker, for load balance and progress

SELECTOR_ALL = "all"
SELECTOR_ARENA = "arena:"
# The arenas whose systems run as one single-job spec (the cluster arena schedules many jobs).
SINGLE_JOB_ARENAS = tuple(a for a in registry.ARENAS if a != "cluster")
CLUSTER_ARENA = "cluster"
# What a grid sweeps (``Grid.kind``): single-job specs of the communication arenas, or cluster
# specs (a trace of many jobs). One grid is one or the other.
COMM_GRID, CLUSTER_GRID = "communication", "cluster"

_AXIS_KEYS = ("systems", "workloads", "seeds")
_META_KEYS = ("name", "description")
_OWN_SPEC_KEYS = {"system", "workload", "seed", "cluster", "params", "trace", "real"}
_SINGULAR = {"system": "systems", "workload": "workloads", "seed": "seeds"}
# Run-spec fields a grid may give (fixed, or a list = an axis), per kind of grid.
_SPEC_KEYS = {
    COMM_GRID: tuple(f.name for f in dataclasses.fields(RunSpec) if f.name not in _OWN_SPEC_KEYS),
    CLUSTER_GRID: tuple(
        f.name for f in dataclasses.fields(ClusterRunSpec) if f.name not in _OWN_SPEC_KEYS
    ),
}
# Grid fields of one kind only, besides the run-spec fields above (``real``: the real runs'
# training options, a section of fields like ``cluster``).
_KIND_KEYS = {COMM_GRID: ("workloads", "real"), CLUSTER_GRID: ("trace",)}

IDENTITY_COLUMNS = (
    "run_key",
    "system",
    "arena",
    "role",
    "workload",
    "seed",
    "mode",
    "iterations",
    "warmup_iterations",
    "batch_size",
)
# Identity columns only communication runs have: absent from a cluster grid's table.
_COMM_ONLY_COLUMNS = ("iterations", "warmup_iterations", "batch_size")
# Columns of the resolved spec's sections (``real.``: real runs' training options, defaults
# included; empty on simulated rows).
_SPEC_PREFIXES = ("trace.", "cluster.", "params.", "real.")
_REAL_DEFAULTS = dataclasses.asdict(RealOptions())  # a real row's ``real.`` columns' defaults
TAIL_COLUMNS = ("sim_wall_s", "status", "error")
PARTIAL_COLUMNS = ("run_key", "system", "workload", "seed", "sim_wall_s", "status", "error")
_PARTIAL_METRICS = "metrics"
_INT_COLUMNS = ("seed", "iterations", "warmup_iterations", "batch_size")
DEVICE_COLUMN = "device"  # real runs' device, after mode (only in tables with real runs)
_TEXT_COLUMNS = (
    "run_key", "system", "arena", "role", "workload", "mode", DEVICE_COLUMN, "status", "error"
)  # fmt: skip
_ERROR_CHARS = 500


class GridError(SpecError):
    """An invalid grid. ``field`` is the grid field (``cluster.bandwidth_gbps``, ``systems``,
    ``params.bytescheduler.credit_bytes``, ``trace.jobs_per_hour``); ``combination`` the
    expanded run it failed on, if any. ``str(err)`` is one line."""

    def __init__(
        self, field_path: str, message: str, combination: Mapping[str, Any] | None = None
    ) -> None:
        self.combination = dict(combination or {})
        if self.combination:
            message = f"{message} [{_label(self.combination)}]"
        super().__init__(field_path, message)


class GridAborted(RuntimeError):
    """The worker pool died (e.g. a worker was killed); finished rows are in the partial file."""


@dataclasses.dataclass(frozen=True)
class GridRun:
    index: int
    run_key: str
    spec: RunSpec | ClusterRunSpec
    combination: dict[str, Any] = dataclasses.field(hash=False)  # axis path -> value
    device: str = ""  # a real run's device on this machine (cpu or cuda); "" simulated

    @property
    def label(self) -> str:
        return _label(self.combination)


@dataclasses.dataclass(frozen=True)
class Grid:
    """A validated, expanded grid: ``runs`` in run order (the order of the table)."""

    raw: dict[str, Any] = dataclasses.field(hash=False)  # as given
    source: str | None
    axes: dict[str, list[Any]] = dataclasses.field(hash=False)  # resolved, incl. systems
    fixed: dict[str, Any] = dataclasses.field(hash=False)
    runs: tuple[GridRun, ...]
    kind: str = COMM_GRID  # COMM_GRID or CLUSTER_GRID

    @property
    def systems(self) -> list[str]:
        return list(self.axes["systems"])

    def __len__(self) -> int:
        return len(self.runs)

    def counts(self) -> dict[str, Any]:
        by_system: dict[str, int] = {}
        for run in self.runs:
            by_system[run.spec.system] = by_system.get(run.spec.system, 0) + 1
        return {"runs": len(self.runs), "by_system": by_system}

    def describe(self) -> dict[str, Any]:
        """What ``grid.json`` records (without the outcome)."""
        return {
            "grid": self.raw,
            "source": self.source,
            "kind": self.kind,
            "axes": self.axes,
            "fixed": self.fixed,
            "counts": self.counts(),
        }


@dataclasses.dataclass(frozen=True)
class GridOutcome:
    out: Path
    results: Path
    total: int  # runs in the grid
    ran: int  # run by this call
    skipped: int  # already recorded (resume)
    ok: int
    failed: int
    wall_s: float

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["out"], data["results"] = str(self.out), str(self.results)
        return data


# --- loading and expansion -----------------------------------------------------------------


def load_grid(source: str | Path | Mapping[str, Any]) -> Grid:
    """Read (path) or take (mapping) a grid, check it, expand it and validate every run.

    Raises ``GridError`` naming the grid field (and the combination) of the first problem."""
    if isinstance(source, Mapping):
        raw: Any = copy.deepcopy(dict(source))
        where = None
    else:
        try:
            raw = load_file(source)
        except SpecError as err:
            raise GridError("GRID", err.message) from None
        where = str(source)
    if not isinstance(raw, dict):
        raise GridError("GRID", f"must be a mapping (got {type(raw).__name__})")
    return _expand(raw, where)


def _expand(raw: dict[str, Any], source: str | None) -> Grid:
    every_spec_key = dict.fromkeys(k for keys in _SPEC_KEYS.values() for k in keys)
    kind_keys = dict.fromkeys(k for keys in _KIND_KEYS.values() for k in keys)
    allowed = list(dict.fromkeys([*_AXIS_KEYS, *kind_keys, "cluster", "params"]))
    allowed += [*every_spec_key, *_META_KEYS]
    for key in raw:
        if key not in allowed:
            hint = (
                f"use '{_SINGULAR[key]}'" if key in _SINGULAR else f"allowed: {', '.join(allowed)}"
            )
            raise GridError(str(key), f"unknown grid field ({hint})")
    for key in _META_KEYS:
        if key in raw and not isinstance(raw[key], str):
            raise GridError(key, "must be a string")

    systems, kind = _systems(raw)
    spec_keys = _SPEC_KEYS[kind]
    _refuse_other_kind(raw, kind, systems)
    if kind == CLUSTER_GRID:
        workloads: list[Any] = [None]  # the trace is the workload
    else:
        workloads = _axis("workloads", _listed(raw, "workloads", str, "workload names", None))
    seeds = _axis("seeds", _listed(raw, "seeds", int, "integers", [0]))

    trace_axes: list[tuple[str, list[Any]]] = []
    trace_fixed: dict[str, Any] = {}
    if kind == CLUSTER_GRID and "trace" in raw:
        trace = raw["trace"]
        if not isinstance(trace, dict):
            raise GridError("trace", "must be a mapping of trace fields (a list value = an axis)")
        if "seed" in trace:
            raise GridError(
                "trace.seed",
                "unknown field: a generated trace draws from the run's seed (give 'seeds')",
            )
        trace_axes, trace_fixed = _split({f"trace.{k}": v for k, v in trace.items()})

    cluster = raw.get("cluster", {})
    if not isinstance(cluster, dict):
        raise GridError("cluster", "must be a mapping of cluster fields (a list value = an axis)")
    cluster_axes, cluster_fixed = _split({f"cluster.{k}": v for k, v in cluster.items()}, kind)

    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise GridError("params", "must be a mapping of system names to their parameters")
    param_axes: dict[str, list[tuple[str, list[Any]]]] = {}
    param_fixed: dict[str, dict[str, Any]] = {}
    for name, values in params.items():
        field = f"params.{name}"
        if name not in systems:
            try:
                registry.get(str(name))
            except registry.UnknownEntry as err:
                raise GridError(field, err.args[0]) from None
            raise GridError(field, f"'{name}' is not one of the grid's systems")
        if not isinstance(values, dict):
            raise GridError(field, "must be a mapping of parameter names to values (list = axis)")
        axes, fixed = _split({f"{field}.{k}": v for k, v in values.items()})
        param_axes[name], param_fixed[name] = axes, fixed

    other_axes, other_fixed = _split({k: raw[k] for k in spec_keys if k in raw})
    real_axes, real_fixed = _real_section(raw, kind)

    runs: list[GridRun] = []
    seen: dict[str, GridRun] = {}
    reduced: set[tuple[Any, ...]] = set()  # combinations with real fields left out (below)
    used: set[str] = set()  # the real fields some run was given
    for system in systems:
        arena = registry.get(system).arena
        own_param_axes = param_axes.get(system, [])
        axes = [*trace_axes, *cluster_axes, *own_param_axes, *other_axes, *real_axes]
        for workload in workloads:
            for values in itertools.product(*(v for _, v in axes), seeds):
                combination: dict[str, Any] = {"system": system}
                if workload is not None:
                    combination["workload"] = workload
                combination.update(zip((k for k, _ in axes), values[:-1], strict=True))
                combination["seed"] = values[-1]
                real = combination.get("mode", other_fixed.get("mode")) == "real"
                if any(not _real_applies(k, real, arena) for k in combination):
                    combination = {
                        k: v for k, v in combination.items() if _real_applies(k, real, arena)
                    }
                    if (key := tuple(combination.items())) in reduced:
                        continue  # the same run, already expanded
                    reduced.add(key)
                own_real = {k: v for k, v in real_fixed.items() if _real_applies(k, real, arena)}
                used.update(k for k in [*combination, *own_real] if _is_real(k))
                spec_raw = _spec_raw(
                    combination,
                    {**trace_fixed, **cluster_fixed},
                    param_fixed.get(system, {}),
                    {**other_fixed, **own_real},
                )
                if kind == CLUSTER_GRID and "trace" in raw:
                    spec_raw.setdefault("trace", {})  # all defaults, as in a run spec
                try:
                    spec = validate(spec_raw)
                    device = _real_device(spec) if spec.mode == "real" else ""
                except SpecError as err:
                    raise GridError(
                        _grid_field(err.field, system), err.message, combination
                    ) from None
                run = GridRun(len(runs), run_key(spec, device), spec, combination, device)
                if run.run_key in seen:
                    raise GridError(
                        "GRID",
                        f"two runs resolve to the same spec ({seen[run.run_key].label})",
                        combination,
                    )
                seen[run.run_key] = run
                runs.append(run)
    if kind == CLUSTER_GRID:
        _check_traces(runs)
    if (real_axes or real_fixed) and not any(run.spec.mode == "real" for run in runs):
        raise GridError(
            "real",
            "training options for real runs, and the grid has none (give mode: real, or a "
            "mode axis with real; or leave 'real' out)",
        )
    for path in [*(k for k, _ in real_axes), *real_fixed]:
        if path not in used:
            arenas = " or ".join(REAL_KEY_ARENAS[path[len("real.") :]])
            raise GridError(
                path,
                f"used by the {arenas} arena's systems alone, and the grid runs none of them "
                "for real (leave it out)",
            )

    resolved_axes: dict[str, list[Any]] = {"systems": systems}
    if kind == COMM_GRID:
        resolved_axes["workloads"] = workloads
    resolved_axes.update(trace_axes)
    resolved_axes.update(cluster_axes)
    for system in systems:
        resolved_axes.update(param_axes.get(system, []))
    resolved_axes.update(other_axes)
    resolved_axes.update(real_axes)
    resolved_axes["seeds"] = seeds
    fixed = {**trace_fixed, **cluster_fixed}
    fixed.update({k: v for f in param_fixed.values() for k, v in f.items()})
    fixed.update(other_fixed)
    fixed.update(real_fixed)
    return Grid(raw, source, resolved_axes, fixed, tuple(runs), kind)


def _real_section(
    raw: dict[str, Any], kind: str
) -> tuple[list[tuple[str, list[Any]]], dict[str, Any]]:
    """(axes, fixed) of a communication grid's ``real`` section: the real runs' training
    options (``runners.spec.RealOptions``), a list value an axis, as in ``cluster``. Given to
    the grid's real runs only, a field of one arena (``REAL_KEY_ARENAS``) to its systems
    only: a run it does not go to is expanded once, not once per value of its axis."""
    if kind != COMM_GRID or "real" not in raw:
        return [], {}
    section = raw["real"]
    if not isinstance(section, dict):
        raise GridError(
            "real",
            "must be a mapping of real-mode fields (network, ps_transport, ...; a list "
            "value = an axis)",
        )
    return _split({f"real.{k}": v for k, v in section.items()})


def _is_real(path: str) -> bool:
    return path.startswith("real.")


def _real_applies(path: str, real: bool, arena: str) -> bool:
    """Whether the grid field ``path`` goes to a run of ``arena`` (a real run or not): every
    field but the real section's, whose fields go to real runs, those of one arena alone
    (``REAL_KEY_ARENAS``) to that arena's."""
    if not _is_real(path):
        return True
    return real and arena in REAL_KEY_ARENAS.get(path[len("real.") :], (arena,))


def _refuse_other_kind(raw: dict[str, Any], kind: str, systems: list[str]) -> None:
    """A field of the other kind of grid (``trace`` in a communication grid, ``workloads`` or
    ``iterations`` in a cluster grid): refused, naming it."""
    mine = {*_AXIS_KEYS, *_KIND_KEYS[kind], "cluster", "params", *_SPEC_KEYS[kind], *_META_KEYS}
    if kind == CLUSTER_GRID:
        mine.discard("workloads")
    for key in raw:
        if key in mine:
            continue
        if kind == CLUSTER_GRID:
            what = (
                "a cluster run's jobs come from 'trace'"
                if key == "workloads"
                else "it is a field of the communication arenas"
            )
            raise GridError(
                key,
                f"not a field of a cluster-arena grid ({what}; the grid's systems "
                f"{', '.join(systems)} are in the cluster arena)",
            )
        raise GridError(
            key,
            "belongs to the cluster arena, but the grid's systems "
            f"{', '.join(systems)} are in the communication arenas",
        )


def _check_traces(runs: Sequence[GridRun]) -> None:
    """Build each distinct trace of a cluster grid once and check that its jobs fit its cluster
    (what ``python -m runners run`` refuses as bad input once the trace is read)."""
    from .cluster import run as cluster_run
    from .cluster.sim import ClusterSim

    checked: set[tuple[Any, ...]] = set()
    for run in runs:
        spec = run.spec
        assert isinstance(spec, ClusterRunSpec)
        key = (spec.trace, spec.cluster, spec.seed)
        if key in checked:
            continue
        checked.add(key)
        try:
            jobs, _ = cluster_run.build_jobs(spec)
            ClusterSim(jobs, cluster_run.build_config(spec), None, _no_placement)
        except (ValueError, OSError) as err:
            raise GridError("trace", _one_line(str(err)), run.combination) from None


def _no_placement(sim: Any, job: Any) -> None:
    return None


def run_key(spec: RunSpec | ClusterRunSpec, device: str = "") -> str:
    """Short stable hash of the resolved spec and, for a real run, the device it trains on here
    (``real.device: auto`` resolves per machine: a grid resumed on a GPU host runs again what it
    ran on the CPU). A simulated run's key is the spec's alone."""
    data = spec.as_dict()
    if device:
        data = {**data, "resolved_device": device}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:RUN_KEY_CHARS]


def _real_device(spec: RunSpec | ClusterRunSpec) -> str:
    """A real run's checks against this machine (``launch.preflight``: root for a shaped
    network, ranks, the real Horovod, ...), so that a grid refuses bad input before anything
    runs; the device it will train on."""
    from .real import launch

    assert isinstance(spec, RunSpec)
    launch.preflight(spec)
    return launch.resolve_device(spec)[0]


def _systems(raw: dict[str, Any]) -> tuple[list[str], str]:
    """Registry names and selectors ("all", "arena:<arena>") -> names, first mention first, and
    the kind of grid they make (all of the cluster arena, or none of it)."""
    items = _axis("systems", _listed(raw, "systems", str, "system names or selectors", None))
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise GridError("systems", f"must be registry names or selectors (got {item!r})")
        if item == SELECTOR_ALL:
            chosen = [e.name for e in registry.entries() if e.arena in SINGLE_JOB_ARENAS]
        elif item.startswith(SELECTOR_ARENA):
            arena = item[len(SELECTOR_ARENA) :]
            if arena not in registry.ARENAS:
                raise GridError(
                    "systems", f"unknown arena in {item!r} (arenas: {', '.join(registry.ARENAS)})"
                )
            chosen = [e.name for e in registry.entries(arena)]
        else:
            try:
                chosen = [registry.get(item).name]
            except registry.UnknownEntry as err:
                raise GridError("systems", err.args[0]) from None
        out.extend(name for name in chosen if name not in out)
    if not out:
        raise GridError("systems", f"{items!r} selects no systems (see `python -m runners list`)")
    cluster = [n for n in out if registry.get(n).arena == CLUSTER_ARENA]
    if cluster and len(cluster) < len(out):
        other = next(n for n in out if registry.get(n).arena != CLUSTER_ARENA)
        raise GridError(
            "systems",
            f"mixes arenas: '{cluster[0]}' is in the cluster arena, '{other}' in the "
            f"'{registry.get(other).arena}' arena; a grid sweeps either the cluster arena "
            f"(a trace) or the communication arenas ({', '.join(SINGLE_JOB_ARENAS)}: workloads)",
        )
    return out, (CLUSTER_GRID if cluster else COMM_GRID)


def _listed(raw: dict[str, Any], key: str, kind: type, what: str, default: Any) -> list[Any]:
    """A top-level axis: a list, or one value of ``kind`` (bool is never an int here)."""
    if key not in raw:
        if default is None:
            raise GridError(key, f"required: a list of {what}")
        return list(default)
    value = raw[key]
    if isinstance(value, list):
        return value
    if isinstance(value, kind) and not isinstance(value, bool):
        return [value]
    raise GridError(key, f"must be a list of {what} (got {value!r})")


def _axis(field: str, values: list[Any]) -> list[Any]:
    if not values:
        raise GridError(field, "must not be an empty list")
    for i, value in enumerate(values):
        for earlier in values[:i]:
            if _same(value, earlier):
                raise GridError(field, f"lists {value!r} twice")
    return values


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False  # True == 1, but they are different values (and True fails validation)
    return bool(a == b)


def _split(
    entries: dict[str, Any], kind: str = COMM_GRID
) -> tuple[list[tuple[str, list[Any]]], dict[str, Any]]:
    """(axes, fixed) of dotted-path -> value entries: a list is an axis, anything else fixed."""
    axes, fixed = [], {}
    for path, value in entries.items():
        if _is_axis(path, value, kind):
            axes.append((path, _axis(path, value)))
        else:
            fixed[path] = value
    return axes, fixed


def _is_axis(path: str, value: Any, kind: str = COMM_GRID) -> bool:
    if not isinstance(value, list):
        return False
    items = _list_valued().get(path) if kind == COMM_GRID else None
    if items is not None:  # a list itself: axis only as a list of such lists
        return bool(value) and all(
            isinstance(v, list) and (items is dict or all(isinstance(i, list) for i in v))
            for v in value
        )
    return True


@functools.cache
def _list_valued() -> dict[str, type]:
    """Cluster fields whose value is a list (tuple defaults in CommCluster), each with how its
    items are given: a mapping for a dataclass (``stragglers``), a list for a tuple
    (``lone_allreduce``'s [bytes, seconds] pairs)."""
    hints = typing.get_type_hints(CommCluster)
    out: dict[str, type] = {}
    for f in dataclasses.fields(CommCluster):
        if isinstance(f.default, tuple) or f.default_factory in (tuple, list):
            item = typing.get_args(hints[f.name])[0]
            out[f"cluster.{f.name}"] = list if typing.get_origin(item) is tuple else dict
    return out


def _spec_raw(
    combination: dict[str, Any],
    cluster_fixed: dict[str, Any],
    params_fixed: dict[str, Any],
    other_fixed: dict[str, Any],
) -> dict[str, Any]:
    spec: dict[str, Any] = {"cluster": {}, "params": {}}
    for path, value in itertools.chain(
        cluster_fixed.items(), params_fixed.items(), other_fixed.items(), combination.items()
    ):
        if path.startswith(("cluster.", "trace.", "real.")):
            section, name = path.split(".", 1)
            spec.setdefault(section, {})[name] = value
        elif path.startswith("params."):
            spec["params"][path.split(".", 2)[2]] = value
        else:
            spec[path] = value
    return spec


def _grid_field(spec_field: str, system: str) -> str:
    """The grid field behind a run-spec field."""
    head, _, rest = spec_field.partition(".")
    if spec_field in _SINGULAR:
        return _SINGULAR[spec_field]
    if head == "params":
        return f"params.{system}" + (f".{rest}" if rest else "")
    if spec_field == "SPEC":
        return "GRID"
    return spec_field


def _label(combination: Mapping[str, Any]) -> str:
    return " ".join(f"{k.rsplit('.', 1)[-1]}={_show(v)}" for k, v in combination.items())


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


# --- running -------------------------------------------------------------------------------


def run_grid(
    grid: Grid,
    out: Path,
    jobs: int | None = None,
    progress: bool = True,
    resume: bool = False,
    keep_runs: bool = False,
) -> GridOutcome:
    """Run every run of ``grid`` not yet recorded in ``out`` and write the table.

    ``jobs``: worker processes (default: the CPUs this process may use, ``usable_cpus``; 1
    runs in this process); a grid with real runs left to do runs everything in this process,
    one run at a time.
    ``out`` must not exist unless ``resume``. A run that raises is recorded as failed; the
    grid goes on. Raises ``rundir.OutputExists``, ``ValueError`` (jobs < 1) or ``GridAborted``.
    """
    out = Path(out)
    jobs = manifest.usable_cpus() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1 (got {jobs})")
    if out.exists() and not resume:
        raise rundir.OutputExists(f"{out} already exists (use --resume to continue it)")
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    done = _recorded(out) if resume else {}
    in_grid = {run.run_key for run in grid.runs}
    skipped = sum(1 for key in done if key in in_grid)
    description = {**grid.describe(), "code": manifest.code_version()}
    description["started_at"] = _now()
    description["status"] = "running"
    _write_atomic(out / GRID_JSON, _json(description))
    _write_atomic(
        out / SPECS, "".join(json.dumps(e, sort_keys=True) + "\n" for e in _entries(grid))
    )

    todo = [run for run in grid.runs if run.run_key not in done]
    real = sum(1 for run in todo if run.spec.mode == "real")
    if real and jobs > 1:
        # A real run's ranks take the machine's cores (and, shaped, its namespaces): running
        # two at once would time each against the other.
        jobs = 1
        if progress:
            print(f"[grid] {real} real runs: one run at a time", file=sys.stderr, flush=True)
    bar = _Progress(len(todo), skipped, sys.stderr, enabled=progress)
    runs_dir = str(out / RUNS_DIR) if keep_runs else None
    argv = [str(a) for a in sys.argv]
    failed_now = 0
    with _PartialWriter(out / PARTIAL, done) as partial:
        try:
            for outcome in _execute(todo, jobs, runs_dir, argv):
                done[outcome["run_key"]] = outcome
                partial.append(outcome)
                if outcome["status"] != "ok":
                    failed_now += 1
                    _append_failure(out / FAILURES, outcome)
                bar.update(failed_now)
        finally:
            bar.close()

    rows = [done[run.run_key] for run in grid.runs]
    columns, cells = _table(_entries(grid), {r["run_key"]: r for r in rows})
    _write_atomic(out / RESULTS, _csv_text(columns, cells))
    (out / PARTIAL).unlink(missing_ok=True)
    failed = sum(1 for r in rows if r["status"] != "ok")
    wall_s = time.perf_counter() - started
    outcome = GridOutcome(
        out=out,
        results=out / RESULTS,
        total=len(grid.runs),
        ran=len(todo),
        skipped=skipped,
        ok=len(rows) - failed,
        failed=failed,
        wall_s=wall_s,
    )
    description["counts"].update(ok=outcome.ok, failed=failed, ran=len(todo), skipped=skipped)
    description.update(status="finished", finished_at=_now(), wall_s=round(wall_s, 3))
    _write_atomic(out / GRID_JSON, _json(description))
    return outcome


def _execute(
    todo: list[GridRun], jobs: int, runs_dir: str | None, argv: list[str]
) -> Iterator[dict[str, Any]]:
    """Outcomes of ``todo`` in completion order."""
    payload = [(run.run_key, run.spec) for run in todo]
    jobs = min(jobs, len(payload))
    if jobs <= 1:
        for item in payload:
            yield from _run_batch([item], runs_dir, argv)
        return
    size = max(1, min(MAX_BATCH, len(payload) // (jobs * BATCHES_PER_WORKER)))
    batches = [payload[i : i + size] for i in range(0, len(payload), size)]
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_mp_context(), initializer=_worker_init)
    try:
        futures = [pool.submit(_run_batch, batch, runs_dir, argv) for batch in batches]
        for future in as_completed(futures):
            yield from future.result()
    except BrokenProcessPool as err:
        pool.shutdown(wait=False, cancel_futures=True)
        raise GridAborted(f"a worker process died ({err}); rerun with --resume") from err
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _worker_init() -> None:
    """Ctrl-C is the parent's to handle (it cancels what has not started)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _mp_context() -> multiprocessing.context.BaseContext:
    """fork where it exists and is safe (this process runs no other thread): workers inherit the
    imported modules and loaded profiles and need no ``__main__`` guard; measured on 800 runs of
    ~3 ms with 2 workers: 0.2 ms overhead per run with fork, 0.6 ms with forkserver or spawn.
    A threaded caller (a web or Celery process) gets forkserver: forking threads can deadlock."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _run_batch(
    batch: Sequence[tuple[str, RunSpec | ClusterRunSpec]], runs_dir: str | None, argv: list[str]
) -> list[dict[str, Any]]:
    """Worker: run each spec; never raises for a failing run."""
    with _quiet_runner_log():
        return [_run_one(key, spec, runs_dir, argv) for key, spec in batch]


def _run_one(
    key: str, spec: RunSpec | ClusterRunSpec, runs_dir: str | None, argv: list[str]
) -> dict[str, Any]:
    outcome: dict[str, Any] = {
        "run_key": key,
        "system": spec.system,
        "workload": spec.workload,
        "seed": spec.seed,
    }
    started = time.perf_counter()
    try:
        if runs_dir is None and spec.mode != "real":
            metrics = _simulate(spec)
        else:  # a real run writes its directory; without keep_runs only its metrics are kept
            with ExitStack() as stack:
                parent = runs_dir or stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="grid-real-")
                )
                target = Path(parent) / key
                if target.exists():  # complete (rundir.staging) but not recorded: run it again
                    shutil.rmtree(target)
                metrics = dict(execute.run_to_directory(spec, target, argv)["metrics"])
        wall_s = metrics.pop("sim_wall_s", time.perf_counter() - started)
    except Exception as err:
        outcome.update(
            status="failed",
            error=_one_line(f"{type(err).__name__}: {err}"),
            traceback=traceback.format_exc(),
            sim_wall_s=time.perf_counter() - started,
            metrics={},
        )
        return outcome
    outcome.update(status="ok", error="", sim_wall_s=wall_s, metrics=_plain(metrics))
    return outcome


def _simulate(spec: RunSpec | ClusterRunSpec) -> dict[str, Any]:
    """The metrics of one run, no directory (a cluster run's include its ``sim_wall_s``)."""
    if isinstance(spec, ClusterRunSpec):
        from .cluster import run as cluster_run

        result, _ = cluster_run.run(spec)
        return dict(result.metrics)
    return dict(execute.simulate(spec).metrics)


@contextmanager
def _quiet_runner_log() -> Iterator[None]:
    """run_to_directory logs each run to its log.txt; keep that off the grid's stderr."""
    log = logging.getLogger("runners")
    before = log.propagate
    log.propagate = False
    try:
        yield
    finally:
        log.propagate = before


def _plain(metrics: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in metrics.items():
        if value is None:  # a summary's NaN (no job finished)
            out[str(name)] = math.nan
            continue
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            out[str(name)] = str(value)
    return out


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _ERROR_CHARS else line[: _ERROR_CHARS - 3] + "..."


def _append_failure(path: Path, outcome: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(f"=== {outcome['run_key']} ({outcome['system']} {outcome['workload']})\n")
        f.write(outcome.get("traceback") or outcome["error"] + "\n")


# --- the partial file ----------------------------------------------------------------------


class _PartialWriter:
    """Append-only CSV of finished runs, one flushed line per run. On open the file is rewritten
    from ``done`` (drops a torn last line after a crash)."""

    def __init__(self, path: Path, done: dict[str, dict[str, Any]]) -> None:
        self.path = path
        self.done = done
        self._file: IO[str] | None = None
        self._writer: Any = None

    def __enter__(self) -> _PartialWriter:
        _write_atomic(self.path, _csv_text([*PARTIAL_COLUMNS, _PARTIAL_METRICS], []))
        self._file = self.path.open("a", newline="")
        self._writer = csv.writer(self._file, lineterminator="\n")
        for outcome in self.done.values():
            self._writer.writerow(_partial_cells(outcome))
        self._file.flush()
        return self

    def append(self, outcome: dict[str, Any]) -> None:
        assert self._file is not None
        self._writer.writerow(_partial_cells(outcome))
        self._file.flush()

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()


def _partial_cells(outcome: dict[str, Any]) -> list[str]:
    cells = [_cell(outcome.get(c)) for c in PARTIAL_COLUMNS]
    return [*cells, json.dumps(outcome.get("metrics", {}), separators=(",", ":"))]


def _recorded(out: Path) -> dict[str, dict[str, Any]]:
    """Finished runs recorded in ``out`` (a finished table, then the partial file)."""
    done: dict[str, dict[str, Any]] = {}
    if (out / RESULTS).is_file():
        with (out / RESULTS).open(newline="") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            metrics = _metric_columns(columns)
            for row in reader:
                values = {m: row[m] for m in metrics if row.get(m, "") != ""}
                outcome = _outcome_from(row, {m: _number(v) for m, v in values.items()})
                if outcome:
                    done[outcome["run_key"]] = outcome
    if (out / PARTIAL).is_file():
        with (out / PARTIAL).open(newline="") as f:
            for row in csv.DictReader(f):
                try:
                    metrics = json.loads(row.get(_PARTIAL_METRICS) or "")
                except json.JSONDecodeError:
                    continue  # torn line
                outcome = _outcome_from(row, metrics) if isinstance(metrics, dict) else None
                if outcome:
                    done[outcome["run_key"]] = outcome
    return done


def _outcome_from(row: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any] | None:
    if not row.get("run_key") or row.get("status") not in ("ok", "failed"):
        return None
    try:
        wall = float(row["sim_wall_s"]) if row.get("sim_wall_s") else None
        seed = int(row["seed"]) if row.get("seed") else None
    except ValueError:
        return None
    return {
        "run_key": row["run_key"],
        "system": row.get("system") or "",
        "workload": row.get("workload") or "",
        "seed": seed,
        "status": row["status"],
        "error": row.get("error") or "",
        "sim_wall_s": wall,
        "metrics": metrics,
    }


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


# --- the table -----------------------------------------------------------------------------


def _entries(grid: Grid) -> list[dict[str, Any]]:
    """specs.jsonl lines: everything the table needs besides the outcomes."""
    out = []
    for run in grid.runs:
        entry = registry.get(run.spec.system)
        out.append(
            {
                "run_key": run.run_key,
                "index": run.index,
                "arena": entry.arena,
                "role": entry.role,
                "workload": run.spec.workload,
                "spec": run.spec.as_dict(),
                **({DEVICE_COLUMN: run.device} if run.device else {}),
            }
        )
    return out


def _table(
    entries: list[dict[str, Any]], outcomes: dict[str, dict[str, Any]]
) -> tuple[list[str], list[list[str]]]:
    """Columns and string cells of the tidy table: one row per entry that has an outcome."""
    rows = []
    for e in entries:
        outcome = outcomes.get(e["run_key"])
        if outcome is None:
            continue
        spec = e["spec"]
        row: dict[str, Any] = {
            "run_key": e["run_key"],
            "system": spec["system"],
            "arena": e["arena"],
            "role": e["role"],
            "workload": e.get("workload", spec.get("workload")),
            "seed": spec["seed"],
            "mode": spec["mode"],
        }
        if e.get(DEVICE_COLUMN):
            row[DEVICE_COLUMN] = e[DEVICE_COLUMN]
        row.update((c, spec[c]) for c in _COMM_ONLY_COLUMNS if c in spec)
        for prefix in _SPEC_PREFIXES:
            section = spec.get(prefix[:-1]) or {}
            if prefix == "real." and section:  # the spec's dict leaves later fields' defaults out
                section = {**_REAL_DEFAULTS, **section}
            row.update((f"{prefix}{k}", v) for k, v in section.items())
        rows.append((row, outcome))
    in_specs = {c for e in entries for c in _COMM_ONLY_COLUMNS if c in e["spec"]}
    real = any(DEVICE_COLUMN in row for row, _ in rows)  # real runs: where they trained
    identity: dict[str, None] = {}
    for c in IDENTITY_COLUMNS:
        if c not in _COMM_ONLY_COLUMNS or c in in_specs or not entries:
            identity[c] = None
        if c == "mode" and real:
            identity[DEVICE_COLUMN] = None
    for prefix in _SPEC_PREFIXES:
        for row, _ in rows:
            identity.update((k, None) for k in row if k.startswith(prefix))
    metrics: dict[str, None] = {}
    for _, outcome in rows:
        metrics.update((m, None) for m in outcome["metrics"] if m not in identity)
    metrics = {m: None for m in metrics if m not in TAIL_COLUMNS}
    columns = [*identity, *metrics, *TAIL_COLUMNS]
    cells = []
    for row, outcome in rows:
        values = {**row, **outcome["metrics"]}
        values.update((c, outcome.get(c)) for c in TAIL_COLUMNS)
        cells.append([_cell(values.get(c)) for c in columns])
    return columns, cells


def _metric_columns(columns: list[str]) -> list[str]:
    """The metric columns of a finished table: after identity/trace/cluster/params, before the
    tail."""
    return [
        c
        for c in columns
        if c not in IDENTITY_COLUMNS
        and c not in TAIL_COLUMNS
        and c != DEVICE_COLUMN
        and not c.startswith(_SPEC_PREFIXES)
    ]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _csv_text(columns: Sequence[str], cells: list[list[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(cells)
    return buffer.getvalue()


def read_results(path: str | Path) -> pd.DataFrame:
    """The tidy table as a DataFrame with proper dtypes.

    ``path``: a ``results.csv``, or a grid output directory (its ``results.csv``; while the grid
    is still running or after a crash, the finished runs of its partial file)."""
    import pandas as pd

    p = Path(path)
    if p.is_dir() and not (p / RESULTS).is_file():
        p = p / PARTIAL
    elif p.is_dir():
        p = p / RESULTS
    if p.name == PARTIAL:
        entries = [json.loads(line) for line in (p.parent / SPECS).read_text().splitlines()]
        columns, cells = _table(entries, _recorded(p.parent))
        frame = pd.DataFrame(cells, columns=columns, dtype=object)
    else:
        frame = pd.read_csv(p, dtype=str, keep_default_na=False, na_filter=False)
    return _typed(frame)


_INT_TEXT = re.compile(r"-?\d+")


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    out = {}
    for column in frame.columns:
        text = frame[column].astype(str)
        empty = text == ""
        if column in _TEXT_COLUMNS:
            out[column] = text.where(~empty, np.nan).astype("str")
        elif column in _INT_COLUMNS or column.startswith(_SPEC_PREFIXES):
            out[column] = _inferred(text, empty)
        else:  # metrics and sim_wall_s
            out[column] = pd.to_numeric(text.where(~empty, np.nan), errors="coerce").astype(
                "float64"
            )
    return pd.DataFrame(out, index=frame.index)


def _inferred(text: pd.Series, empty: pd.Series) -> pd.Series:
    """Ints stay ints (nullable where some rows lack the column), floats are written by repr."""
    import numpy as np
    import pandas as pd

    present = text[~empty]
    if len(present) and present.map(lambda v: bool(_INT_TEXT.fullmatch(v))).all():
        values = pd.Series([pd.NA if v == "" else int(v) for v in text], dtype="Int64")
        values.index = text.index
        return values if empty.any() else values.astype("int64")
    if len(present) and present.isin(["True", "False"]).all():
        return text.map({"True": True, "False": False}).astype("boolean")
    try:
        return pd.to_numeric(text.where(~empty, np.nan)).astype("float64")
    except (ValueError, TypeError):
        return text.where(~empty, np.nan).astype("str")


# --- helpers -------------------------------------------------------------------------------


class _Progress:
    """done/total, elapsed, ETA on stderr: a rewritten line on a TTY, else one line per 10%."""

    def __init__(self, total: int, skipped: int, stream: IO[str], enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.stream = stream
        self.enabled = enabled and total > 0
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._last_decile = 0
        if enabled:
            resumed = f", {skipped} already recorded" if skipped else ""
            self._print(f"[grid] {total} runs to do{resumed}")

    def update(self, failed: int) -> None:
        self.done += 1
        self.failed = failed
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if now - self._last_draw >= 0.1 or self.done == self.total:
                self._last_draw = now
                self.stream.write("\r" + self._line(now) + "\x1b[K")
                self.stream.flush()
        else:
            decile = self.done * 10 // self.total
            if decile > self._last_decile:
                self._last_decile = decile
                self._print(self._line(now))

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _line(self, now: float) -> str:
        elapsed = now - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else math.nan
        failed = f", {self.failed} failed" if self.failed else ""
        return (
            f"[grid] {self.done}/{self.total} ({100 * self.done // self.total}%) "
            f"elapsed {_clock(elapsed)} ETA {_clock(eta)}{failed}"
        )

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--:--"
    if seconds < 60:
        return f"{seconds:.1f}s"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return (f"{hours}:" if hours else "") + f"{rest // 60:02d}:{rest % 60:02d}"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
