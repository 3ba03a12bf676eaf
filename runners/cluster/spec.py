"""Run specs of the cluster arena: a scheduler or placement policy on a trace and a cluster.

    system: fifo                 # any registry entry of arena 'cluster'
    trace:                       # a seeded generator ...
      generator: philly          # philly | dl2
      jobs: 1000
      jobs_per_hour: 40
      ps_fraction: 0.3           # share of PS-architecture jobs (philly)
      arrivals: poisson          # poisson | google
      duration_scale: 1.0        # multiplies every duration (shorter tests)
    # ... or a file in one of the public formats:
    #   trace: {file: cluster_log.csv, format: helios, on_error: skip, limit: 5000}
    #   trace: {file: gavel.trace, format: gavel, throughputs: simulation_throughputs.json}
    cluster:
      servers: 32
      gpus_per_server: 8
      cpus_per_server: 64
      mem_gb_per_server: 512
      gpu: v100
      nic_gbps: 25
      max_interference: 0.3
      restart_overhead_s: 0
      ps_servers: 0              # > 0: a separate pool of CPU machines for PSs (OASiS, PAI)
    params: {placement: bin-packing}
    seed: 0

Relative trace paths are resolved against the current directory when the spec is validated;
the resolved spec records the absolute path. ``validate`` raises ``SpecError`` naming the field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workloads import devices

from .. import registry
from ..spec import (
    SPEC_VERSION,
    SpecError,
    _coerce,
    _int,
    _unknown_keys,
    checked_fields,
    validate_params,
)

GENERATORS = ("philly", "dl2")
ARRIVALS = ("poisson", "google")
TRACE_FORMATS = ("philly", "helios", "pai", "gavel", "tiresias")
ON_ERROR = ("stop", "skip")


@dataclass(frozen=True)
class TraceSpec:
    generator: str | None = "philly"
    jobs: int = 200
    jobs_per_hour: float = 20.0
    ps_fraction: float = 0.0
    arrivals: str = "poisson"
    duration_scale: float = 1.0
    file: str | None = None
    format: str | None = None
    on_error: str = "stop"
    throughputs: str | None = None
    limit: int | None = None


@dataclass(frozen=True)
class ClusterSpec:
    servers: int = 32
    gpus_per_server: int = 8
    cpus_per_server: float = 64.0
    mem_gb_per_server: float = 512.0
    gpu: str = "v100"
    compute_efficiency: float = 0.5
    nic_gbps: float = 25.0
    intra_gbps: float = 100.0
    max_interference: float = 0.3
    restart_overhead_s: float = 0.0
    ps_servers: int = 0
    ps_cpus_per_server: float = 32.0
    ps_mem_gb_per_server: float = 128.0


@dataclass(frozen=True)
class ClusterRunSpec:
    system: str
    mode: str
    trace: TraceSpec
    cluster: ClusterSpec
    params: dict[str, Any] = field(hash=False)
    seed: int = 0
    labels: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def arena(self) -> str:
        return "cluster"

    @property
    def workload(self) -> str:
        """What the run is on, for logs and tables: the trace's file or generator."""
        t = self.trace
        return Path(t.file).name if t.file else f"{t.generator}-{t.jobs}"

    def as_dict(self) -> dict[str, Any]:
        """The resolved spec; it validates again as it is (a run's spec.json, a queued run)."""
        data = asdict(self)
        keep = _FILE_KEYS if self.trace.file else _GENERATED_KEYS
        data["trace"] = {k: v for k, v in data["trace"].items() if k in keep}
        data["spec_version"] = SPEC_VERSION
        return data


_GENERATED_KEYS = {
    "generator", "jobs", "jobs_per_hour", "ps_fraction", "arrivals", "duration_scale"
}  # fmt: skip
_FILE_KEYS = {"file", "format", "on_error", "throughputs", "limit", "duration_scale"}
_TOP_KEYS = {"system", "mode", "trace", "cluster", "params", "seed", "labels", "spec_version"}

_CLUSTER_RULES: dict[str, tuple[type, Any, str]] = {
    "servers": (int, lambda v: 1 <= v <= 1_000_000, "an integer between 1 and 1000000"),
    "gpus_per_server": (int, lambda v: 0 <= v <= 1024, "an integer between 0 and 1024"),
    "cpus_per_server": (float, lambda v: 0 < v <= 1e5, "a number > 0 (cores)"),
    "mem_gb_per_server": (float, lambda v: 0 < v <= 1e7, "a number > 0 (GB)"),
    "gpu": (str, lambda v: v in devices.DEVICES, f"one of {', '.join(sorted(devices.DEVICES))}"),
    "compute_efficiency": (float, lambda v: 0 < v <= 1, "a fraction in (0, 1]"),
    "nic_gbps": (float, lambda v: 0 < v <= 1e6, "a number > 0 (Gbit/s per server NIC)"),
    "intra_gbps": (float, lambda v: 0 < v <= 1e6, "a number > 0 (Gbit/s inside a server)"),
    "max_interference": (float, lambda v: 0 <= v <= 10, "a number in [0, 10]"),
    "restart_overhead_s": (float, lambda v: 0 <= v <= 1e6, "a number >= 0 (seconds)"),
    "ps_servers": (int, lambda v: 0 <= v <= 1_000_000, "an integer >= 0 (CPU machines for PSs)"),
    "ps_cpus_per_server": (float, lambda v: 0 < v <= 1e5, "a number > 0 (cores)"),
    "ps_mem_gb_per_server": (float, lambda v: 0 < v <= 1e7, "a number > 0 (GB)"),
}


def validate(raw: dict[str, Any], entry: registry.Entry) -> ClusterRunSpec:
    unknown = _unknown_keys(raw, _TOP_KEYS)
    if unknown:
        raise SpecError(
            unknown[0],
            f"unknown field for the cluster arena (allowed: {', '.join(sorted(_TOP_KEYS))})",
        )
    mode = raw.get("mode", "sim")
    if mode not in entry.modes:
        raise SpecError("mode", f"'{entry.name}' supports {', '.join(entry.modes)} only")
    labels = raw.get("labels", {})
    if not isinstance(labels, dict):
        raise SpecError("labels", "must be a mapping")
    return ClusterRunSpec(
        system=entry.name,
        mode=mode,
        trace=_trace(raw.get("trace")),
        cluster=_cluster(raw.get("cluster", {})),
        params=validate_params(entry, raw.get("params", {})),
        seed=_int(raw, "seed", 0, 0, 2**63 - 1),
        labels=dict(labels),
    )


def _trace(raw: Any) -> TraceSpec:
    if raw is None:
        raise SpecError(
            "trace", "required: {generator: philly, jobs: N} or {file: PATH, format: FORMAT}"
        )
    if not isinstance(raw, dict):
        raise SpecError("trace", "must be a mapping")
    generated = _GENERATED_KEYS - {"duration_scale"}
    allowed = _GENERATED_KEYS | _FILE_KEYS
    unknown = _unknown_keys(raw, allowed)
    if unknown:
        raise SpecError(
            f"trace.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})"
        )
    scale = _coerce("trace.duration_scale", raw.get("duration_scale", 1.0), float)
    if not 0 < scale <= 1e6:
        raise SpecError("trace.duration_scale", f"must be a number > 0 (got {scale})")
    if "file" in raw:
        mixed = sorted(set(raw) & generated)
        if mixed:
            raise SpecError(f"trace.{mixed[0]}", "belongs to a generated trace, not to a file")
        path = Path(_coerce("trace.file", raw["file"], str)).expanduser().resolve()
        if not path.is_file():
            raise SpecError("trace.file", f"no such file: {path}")
        fmt = raw.get("format")
        if fmt not in TRACE_FORMATS:
            raise SpecError(
                "trace.format", f"must be one of {', '.join(TRACE_FORMATS)} (got {fmt!r})"
            )
        on_error = raw.get("on_error", "stop")
        if on_error not in ON_ERROR:
            raise SpecError(
                "trace.on_error", f"must be one of {', '.join(ON_ERROR)} (got {on_error!r})"
            )
        throughputs = raw.get("throughputs")
        if throughputs is not None:
            tp = Path(_coerce("trace.throughputs", throughputs, str)).expanduser().resolve()
            if not tp.is_file():
                raise SpecError("trace.throughputs", f"no such file: {tp}")
            throughputs = str(tp)
        elif fmt == "gavel":
            raise SpecError(
                "trace.throughputs",
                "required for a Gavel trace: the path of Gavel's simulation_throughputs.json",
            )
        limit = raw.get("limit")
        if limit is not None:
            limit = _coerce("trace.limit", limit, int)
            if limit < 1:
                raise SpecError("trace.limit", f"must be >= 1 (got {limit})")
        return TraceSpec(
            generator=None,
            jobs=0,
            jobs_per_hour=0.0,
            duration_scale=scale,
            file=str(path),
            format=fmt,
            on_error=on_error,
            throughputs=throughputs,
            limit=limit,
        )
    extra = sorted(set(raw) & (_FILE_KEYS - {"duration_scale"}))
    if extra:
        raise SpecError(f"trace.{extra[0]}", "belongs to a trace file: give trace.file too")
    generator = raw.get("generator", "philly")
    if generator not in GENERATORS:
        raise SpecError(
            "trace.generator", f"must be one of {', '.join(GENERATORS)} (got {generator!r})"
        )
    jobs = _coerce("trace.jobs", raw.get("jobs", TraceSpec.jobs), int)
    if not 1 <= jobs <= 10_000_000:
        raise SpecError("trace.jobs", f"must be between 1 and 10000000 (got {jobs})")
    rate = _coerce("trace.jobs_per_hour", raw.get("jobs_per_hour", TraceSpec.jobs_per_hour), float)
    if not 0 < rate <= 1e7:
        raise SpecError("trace.jobs_per_hour", f"must be a number > 0 (got {rate})")
    ps_fraction = _coerce("trace.ps_fraction", raw.get("ps_fraction", 0.0), float)
    if not 0 <= ps_fraction <= 1:
        raise SpecError("trace.ps_fraction", f"must be a fraction in [0, 1] (got {ps_fraction})")
    arrivals = raw.get("arrivals", "poisson")
    if arrivals not in ARRIVALS:
        raise SpecError(
            "trace.arrivals", f"must be one of {', '.join(ARRIVALS)} (got {arrivals!r})"
        )
    return TraceSpec(
        generator=generator,
        jobs=jobs,
        jobs_per_hour=rate,
        ps_fraction=ps_fraction,
        arrivals=arrivals,
        duration_scale=scale,
    )


def _cluster(raw: Any) -> ClusterSpec:
    if not isinstance(raw, dict):
        raise SpecError("cluster", "must be a mapping")
    unknown = _unknown_keys(raw, set(_CLUSTER_RULES))
    if unknown:
        raise SpecError(
            f"cluster.{unknown[0]}",
            f"unknown field for the cluster arena (allowed: {', '.join(sorted(_CLUSTER_RULES))})",
        )
    return ClusterSpec(**checked_fields(raw, _CLUSTER_RULES, "cluster"))
