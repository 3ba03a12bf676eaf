"""Run one cluster-arena spec: build the trace, the cluster and the policy; simulate."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from workloads import traces
from workloads.traces import Job

from .. import registry
from .sim import ClusterConfig, ClusterResult, ClusterSim
from .spec import ClusterRunSpec
from .speed import SpeedModel

log = logging.getLogger("runners")


@dataclass(frozen=True)
class TraceInfo:
    """Where the jobs came from, for the summary: generator or file, and what was dropped."""

    source: str
    jobs: int
    skipped: tuple[tuple[int, str], ...] = ()
    filtered: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


def build_jobs(spec: ClusterRunSpec) -> tuple[tuple[Job, ...], TraceInfo]:
    t = spec.trace
    if t.file is not None:
        from workloads import importers

        loaded = importers.load_trace(
            t.file,
            t.format,
            on_error=t.on_error,
            throughputs=t.throughputs,
            gpu=spec.cluster.gpu,
            seed=spec.seed,
            limit=t.limit,
        )
        jobs = loaded.jobs
        info = TraceInfo(
            f"{t.format}:{t.file}",
            len(jobs),
            tuple(loaded.skipped),
            loaded.filtered,
        )
        for row, message in loaded.skipped[:20]:
            log.warning("trace row %d skipped: %s", row, message)
        if len(loaded.skipped) > 20:
            log.warning("... %d more rows skipped", len(loaded.skipped) - 20)
    elif t.generator == "dl2":
        jobs = traces.dl2_like(
            t.jobs, seed=spec.seed, jobs_per_hour=t.jobs_per_hour, arrivals=t.arrivals
        )
        info = TraceInfo(f"dl2-like({t.jobs} jobs, {t.arrivals})", len(jobs))
    else:
        jobs = traces.philly_like(
            t.jobs,
            seed=spec.seed,
            jobs_per_hour=t.jobs_per_hour,
            ps_fraction=t.ps_fraction,
            arrivals=t.arrivals,
        )
        info = TraceInfo(f"philly-like({t.jobs} jobs, {t.arrivals})", len(jobs))
    if t.duration_scale != 1.0:
        jobs = tuple(
            dataclasses.replace(
                j,
                duration_s=j.duration_s * t.duration_scale,
                step_rate=j.step_rate / t.duration_scale if j.step_rate else None,
            )
            for j in jobs
        )
    return jobs, info


def build_config(spec: ClusterRunSpec) -> ClusterConfig:
    c = spec.cluster
    return ClusterConfig(
        servers=c.servers,
        gpus_per_server=c.gpus_per_server,
        cpus_per_server=c.cpus_per_server,
        mem_gb_per_server=c.mem_gb_per_server,
        ps_servers=c.ps_servers,
        ps_cpus_per_server=c.ps_cpus_per_server,
        ps_mem_gb_per_server=c.ps_mem_gb_per_server,
        speed=SpeedModel(
            gpu=c.gpu,
            efficiency=c.compute_efficiency,
            nic_gbps=c.nic_gbps,
            intra_gbps=c.intra_gbps,
            max_interference=c.max_interference,
            seed=spec.seed,
        ),
    )


class TraceInputError(ValueError):
    """The trace cannot be run on this cluster (bad file or row, a job larger than any server,
    no jobs), or the policy cannot be built from its parameters (``what = "params"``): bad
    input, exit code 2 on the command line."""

    def __init__(self, message: str, what: str = "trace") -> None:
        super().__init__(message)
        self.what = what


def prepare(spec: ClusterRunSpec) -> tuple[ClusterSim, TraceInfo]:
    """Build the trace, cluster and policy; raise ``TraceInputError`` for bad input."""
    from workloads.importers import TraceError

    try:
        policy = registry.get(spec.system).build(spec.params)
    except (ValueError, OSError) as err:
        raise TraceInputError(str(err), what="params") from None
    if hasattr(policy, "reseed"):
        policy.reseed(spec.seed)
    try:
        jobs, info = build_jobs(spec)
        sim = ClusterSim(
            jobs,
            build_config(spec),
            policy.scheduler,
            policy.place,
            restart_overhead_s=spec.cluster.restart_overhead_s,
        )
    except TraceError as err:
        raise TraceInputError(str(err)) from None
    except ValueError as err:
        raise TraceInputError(f"trace: {err}") from None
    sim.policy_names = {"scheduler": policy.scheduler_name, "placement": policy.placement_name}
    return sim, info


def run(spec: ClusterRunSpec) -> tuple[ClusterResult, TraceInfo]:
    sim, info = prepare(spec)
    return sim.run(), info
