"""Spec builders shared by the simulator test files (not a test module)."""

from runners.execute import simulate
from runners.sim import allreduce as ar_sim
from runners.sim import ps as ps_sim
from runners.spec import validate


def raw_spec(system, workload="resnet50", *, params=None, iterations=4, warmup=2, seed=0, **c):
    """A spec with 8 workers at 10 Gbit/s and no compute jitter unless ``c`` says otherwise,
    whose timeline records every iteration (the tests read it whole)."""
    cluster = {"workers": 8, "bandwidth_gbps": 10, "compute_jitter_cv": 0.0, **c}
    raw = {
        "system": system,
        "workload": workload,
        "iterations": iterations,
        "warmup_iterations": warmup,
        "seed": seed,
        "cluster": cluster,
        "timeline_iterations": 0,
    }
    if params:
        raw["params"] = params
    return raw


def run(system, workload="resnet50", **kw):
    spec = validate(raw_spec(system, workload, **kw))
    return spec, simulate(spec)


def run_layers(system, layers, **kw):
    """Simulate ``system`` on hand-made ``layers`` (LayerTimes) instead of a workload's."""
    spec = validate(raw_spec(system, **kw))
    runner = ar_sim.run if spec.arena == "allreduce" else ps_sim.run
    return spec, runner(spec, layers)
