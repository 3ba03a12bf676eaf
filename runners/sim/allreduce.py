"""Build the all-reduce arena's simulation from a validated run spec."""

from __future__ import annotations

import workloads
from workloads import devices

from .. import registry
from ..policies.allreduce import CommProblem, Layer
from ..spec import RunSpec
from .compute import layer_times
from .iteration import IterationSetup, SimResult, simulate
from .network import RingAllReduce


def setup_for(spec: RunSpec) -> IterationSetup:
    c = spec.cluster
    profile = workloads.load_profile(spec.workload)
    times = layer_times(profile, devices.get_device(c.gpu), spec.batch_size, c.compute_efficiency)
    slowdown = max((s.slowdown for s in c.stragglers), default=1.0)
    return IterationSetup(
        layers=times,
        network=RingAllReduce.from_gbps(c.workers, c.bandwidth_gbps, c.latency_us),
        iterations=spec.iterations,
        warmup_iterations=spec.warmup_iterations,
        samples_per_iteration=spec.batch_size * c.workers,
        compute_slowdown=slowdown,
        jitter_cv=c.compute_jitter_cv,
        seed=spec.seed,
    )


def run(spec: RunSpec) -> SimResult:
    setup = setup_for(spec)
    problem = CommProblem(
        layers=tuple(Layer(i, lt.name, lt.grad_bytes) for i, lt in enumerate(setup.layers)),
        workers=spec.cluster.workers,
    )
    policy = registry.get(spec.system).build(spec.params)
    return simulate(setup, policy.plan(problem))
