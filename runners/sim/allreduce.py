"""Build the all-reduce arena's simulation from a validated run spec."""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict

import workloads

from .. import registry
from ..policies.allreduce import CommPlan, CommProblem, Layer, plan_info
from ..spec import RunSpec
from .compute import times_for
from .engine import ComputeSetup, LayerTimes, SimResult, groups_for, link_factors
from .iteration import simulate
from .network import RingAllReduce

_PLAN_CACHE: OrderedDict[str, CommPlan] = OrderedDict()
_PLAN_CACHE_SIZE = 64


def profile_times(spec: RunSpec) -> tuple[LayerTimes, ...]:
    """Per-layer compute times and sizes of the spec's workload on its device."""
    c = spec.cluster
    profile = workloads.load_profile(spec.workload)
    return times_for(profile, c.gpu, spec.batch_size, c.compute_efficiency)


def compute_setup(
    spec: RunSpec, layers: tuple[LayerTimes, ...] | None = None, link_groups: bool = False
) -> ComputeSetup:
    """The compute side of the job; ``layers`` replaces the workload's (tests, what-ifs).
    ``link_groups`` (PS arena): workers split by their NIC stragglers as well."""
    c = spec.cluster
    times = profile_times(spec) if layers is None else layers
    if c.optimizer_update:
        times = with_updates(times, spec)
    if c.compute_scale != 1.0:
        times = scaled(times, c.compute_scale)
    n_iter = spec.warmup_iterations + spec.iterations + 1
    return ComputeSetup(
        layers=times,
        groups=groups_for(c.workers, c.stragglers, n_iter, links=link_groups),
        iterations=spec.iterations,
        warmup_iterations=spec.warmup_iterations,
        batch_size=spec.batch_size,
        jitter_cv=c.compute_jitter_cv,
        overlap_slowdown=c.overlap_slowdown,
        seed=spec.seed,
        timeline_window=timeline_window(spec),
        link_factors=link_factors(c.stragglers, n_iter),
        collective_cpu_s=c.collective_cpu_us * 1e-6,
        negotiation_cpu_s=None if c.negotiation_cpu_us is None else c.negotiation_cpu_us * 1e-6,
        step_jitter_cv=c.step_jitter_cv,
        background_slowdown=c.background_slowdown,
        overlap_integrated=c.overlap_model == "integrated",
    )


def with_updates(times: tuple[LayerTimes, ...], spec: RunSpec) -> tuple[LayerTimes, ...]:
    """``cluster.optimizer_update``: each layer's forward takes its measured update longer.
    Raises ValueError where the profile has no update times (measured before they were)."""
    if not any(lt.update_s > 0 for lt in times):
        raise ValueError(
            f"cluster.optimizer_update: the profile {spec.cluster.gpu} of {spec.workload} has "
            "no update times (measured before they were timed): measure it again with "
            "python -m runners calibrate"
        )
    return tuple(dataclasses.replace(lt, fwd_s=lt.fwd_s + lt.update_s) for lt in times)


def scaled(times: tuple[LayerTimes, ...], factor: float) -> tuple[LayerTimes, ...]:
    """``cluster.compute_scale``: every compute time ``factor`` times as long (the sizes kept)."""
    return tuple(
        dataclasses.replace(
            lt, fwd_s=lt.fwd_s * factor, bwd_s=lt.bwd_s * factor, update_s=lt.update_s * factor
        )
        for lt in times
    )


def timeline_window(spec: RunSpec) -> tuple[int, int] | None:
    """The iterations the run's timeline records: the last ``spec.timeline_iterations``
    measured ones (None, i.e. every simulated iteration, when it is 0)."""
    if spec.timeline_iterations == 0:
        return None
    end = spec.warmup_iterations + spec.iterations
    return (max(0, end - spec.timeline_iterations), end)


def network_for(spec: RunSpec) -> RingAllReduce:
    c = spec.cluster
    return RingAllReduce.from_gbps(
        c.workers, c.bandwidth_gbps, c.latency_us, c.reduce_scatter_cost, c.all_gather_cost
    )


def busy_network_for(spec: RunSpec) -> RingAllReduce | None:
    """The collectives' cost while the ranks compute (``cluster.busy_latency_us`` and
    ``overlap_comm_slowdown``), or None when the spec sets neither (one cost throughout)."""
    c = spec.cluster
    if c.busy_latency_us is None and not c.overlap_comm_slowdown:
        return None
    latency = c.latency_us if c.busy_latency_us is None else c.busy_latency_us
    return RingAllReduce.from_gbps(
        c.workers,
        c.bandwidth_gbps / (1.0 + c.overlap_comm_slowdown),
        latency,
        c.reduce_scatter_cost,
        c.all_gather_cost,
    )


def round_network_for(spec: RunSpec) -> RingAllReduce | None:
    """A negotiation round's network, busy or idle (``cluster.round_latency_us``), or None
    when the spec leaves it out (a round costs what a collective does)."""
    c = spec.cluster
    if c.round_latency_us is None:
        return None
    return RingAllReduce.from_gbps(
        c.workers, c.bandwidth_gbps, c.round_latency_us, c.reduce_scatter_cost, c.all_gather_cost
    )


def oracle_setup(setup: ComputeSetup) -> ComputeSetup:
    """The conditions a planning policy evaluates candidates under: no jitter (per op or per
    step), one warm-up and one measured iteration, the straggler factors of the first
    iterations."""
    groups = tuple(
        dataclasses.replace(g, slowdowns=g.slowdowns[:3], links=g.links[:3]) for g in setup.groups
    )
    return dataclasses.replace(
        setup,
        groups=groups,
        link_factors=setup.link_factors[:3],
        iterations=1,
        warmup_iterations=1,
        jitter_cv=0.0,
        step_jitter_cv=0.0,
        seed=0,
        timeline_window=(0, 0),
    )


def plan_for(spec: RunSpec, setup: ComputeSetup, network: RingAllReduce) -> CommPlan:
    """The policy's plan for this job. Plans of policies that search (``policy.searches``) are
    cached per condition: everything but the seed and the measured iteration counts."""
    policy = registry.get(spec.system).build(spec.params)
    if not getattr(policy, "searches", False):
        return policy.plan(_problem(spec, setup, network, None))
    conditions = oracle_setup(setup)
    key = json.dumps(
        [spec.system, spec.params, spec.workload, spec.batch_size, repr(conditions), repr(network)],
        sort_keys=True,
        default=str,
    )
    cached = _PLAN_CACHE.get(key)
    if cached is not None:
        _PLAN_CACHE.move_to_end(key)
        return cached

    def oracle(plan: CommPlan) -> float:
        return simulate(conditions, network, plan).metrics["iteration_time_s"]

    plan = policy.plan(_problem(spec, setup, network, oracle))
    _PLAN_CACHE[key] = plan
    if len(_PLAN_CACHE) > _PLAN_CACHE_SIZE:
        _PLAN_CACHE.popitem(last=False)
    return plan


def clear_plan_cache() -> None:
    """Forget cached plans (the benchmark times the search on a cold cache)."""
    _PLAN_CACHE.clear()


def _problem(spec: RunSpec, setup: ComputeSetup, network: RingAllReduce, oracle) -> CommProblem:
    factor = max((g.slowdowns[0] if g.slowdowns else 1.0) for g in setup.groups)
    return CommProblem(
        layers=tuple(Layer(i, lt.name, lt.grad_bytes) for i, lt in enumerate(setup.layers)),
        workers=spec.cluster.workers,
        oracle=oracle,
        fwd_s=tuple(lt.fwd_s * factor for lt in setup.layers),
        bwd_s=tuple(lt.bwd_s * factor for lt in setup.layers),
        deps=tuple(lt.deps for lt in setup.layers),
        collective_s=network.time_s,
        buffer_bytes=tuple(size for _, size in workloads.load_profile(spec.workload).buffers),
    )


def run(
    spec: RunSpec, layers: tuple[LayerTimes, ...] | None = None, plan: CommPlan | None = None
) -> SimResult:
    """Simulate ``spec``; ``plan`` replaces the policy's (``fidelity`` gives the plan a real
    run executed, which its own spec planned). With ``layers``, the workload's buffers (which
    ``ddp`` broadcasts) stay those of ``spec.workload``."""
    setup = compute_setup(spec, layers)
    network = network_for(spec)
    if plan is None:
        plan = plan_for(spec, setup, network)
    if spec.cluster.cpu_collectives and plan.fusion_cycle_s > 0:
        plan = dataclasses.replace(plan, fusion_cycle_blocks=True)  # Horovod on CPU
    result = simulate(
        setup,
        network,
        plan,
        busy_network_for(spec),
        negotiate=spec.cluster.negotiation,
        burst_bytes=spec.cluster.link_burst_bytes,
        lone=spec.cluster.lone_allreduce,
        round_network=round_network_for(spec),
        free_rounds=spec.cluster.round_loop == "free",
    )
    for key, value in plan_info(plan).items():
        result.metrics[f"plan.{key}"] = value
        result.units[f"plan.{key}"] = ""
    return result
