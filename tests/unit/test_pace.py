"""PACE in the simulator: its schedule against the exact optimum (runners.exact, a MILP) on small
instances, its own scheduler model against the event simulator, and the fusion DP."""

import numpy as np
import pytest

import workloads
from runners import exact
from runners.policies.allreduce import PACE, CommProblem, Layer, transition_time
from runners.sim import allreduce as ar_sim
from runners.sim.engine import LayerTimes
from runners.sim.iteration import simulate
from runners.sim.network import RingAllReduce
from runners.spec import validate

CHUNK = 1_000_000  # bytes; with 2 workers and no latency one chunk takes exactly 1 s


def layers_for(fwd, bwd, chunks, deps=None):
    n = len(fwd)
    deps = deps or [((i - 1,) if i else ()) for i in range(n)]
    return tuple(
        LayerTimes(f"l{i}", float(fwd[i]), float(bwd[i]), chunks[i] * CHUNK, tuple(deps[i]))
        for i in range(n)
    )


def instance_for(fwd, bwd, chunks, deps=None):
    """The exact model's instance of one steady-state iteration transition: backward runs
    layer n-1 .. 0 from time 0 and releases each layer's gradient when it ends."""
    n = len(fwd)
    deps = deps or [((i - 1,) if i else ()) for i in range(n)]
    release = [0] * n
    t = 0
    for i in range(n - 1, -1, -1):
        t += bwd[i]
        release[i] = t
    return exact.Instance(
        release=tuple(release),
        chunks=tuple(chunks),
        fwd=tuple(fwd),
        needs=tuple((i,) for i in range(n)),
        preds=tuple(tuple(d) for d in deps),
        compute_free=t,
    )


def simulate_pace(layers, fusion="none"):
    spec = validate(
        {
            "system": "pace",
            "workload": "resnet50",  # replaced by `layers`
            "params": {"chunk_bytes": CHUNK, "fusion": fusion},
            "iterations": 3,
            "warmup_iterations": 2,
            "cluster": {
                "workers": 2,
                "bandwidth_gbps": CHUNK * 8 / 1e9,
                "latency_us": 0,
                "compute_jitter_cv": 0,
            },
        }
    )
    return ar_sim.run(spec, layers)


def random_chain(rng, n):
    return (
        [int(x) for x in rng.integers(1, 4, n)],
        [int(x) for x in rng.integers(1, 5, n)],
        [int(x) for x in rng.integers(1, 5, n)],
    )


@pytest.mark.parametrize("seed", range(25))
def test_on_small_chains_the_simulated_pace_schedule_is_the_exact_optimum(seed):
    rng = np.random.default_rng(seed)
    fwd, bwd, chunks = random_chain(rng, int(rng.integers(2, 6)))

    simulated = simulate_pace(layers_for(fwd, bwd, chunks)).metrics["iteration_time_s"]
    optimum = exact.optimal_makespan(instance_for(fwd, bwd, chunks))

    assert simulated == pytest.approx(optimum, abs=1e-9)


def test_a_bad_order_is_worse_than_the_optimum_so_the_check_can_fail():
    # Layer 0 is needed first but released last; WFBP-style ready order makes it wait.
    fwd, bwd, chunks = [1, 1, 1], [1, 1, 1], [3, 3, 3]
    inst = instance_for(fwd, bwd, chunks)
    ready_order = [2, 1, 0]  # layer 2's gradient is ready first

    assert exact.priority_makespan(inst, ready_order) > exact.optimal_makespan(inst)


def diamond_dag():
    # 0 -> {1, 2} -> 3 (3 joins both branches)
    return [(), (0,), (0,), (1, 2)]


@pytest.mark.parametrize("seed", range(8))
def test_on_small_dags_the_simulator_follows_the_reference_priority_semantics(seed):
    rng = np.random.default_rng(100 + seed)
    fwd, bwd, chunks = random_chain(rng, 4)
    deps = diamond_dag()
    inst = instance_for(fwd, bwd, chunks, deps)

    simulated = simulate_pace(layers_for(fwd, bwd, chunks, deps)).metrics["iteration_time_s"]

    assert simulated == pytest.approx(
        exact.priority_makespan(inst, exact.consumer_priority(inst)), abs=1e-9
    )
    # On DAGs the consumer-order rule is not always optimal (runners.exact documents a
    # counter-example); it is never better than the optimum.
    assert simulated >= exact.optimal_makespan(inst) - 1e-9


def test_paces_scheduler_model_equals_the_event_simulator_for_fused_plans():
    rng = np.random.default_rng(7)
    fwd, bwd, chunks = random_chain(rng, 12)
    layers = layers_for(fwd, bwd, chunks)
    network = RingAllReduce(2, CHUNK, 0.0)
    problem = CommProblem(
        layers=tuple(Layer(i, lt.name, lt.grad_bytes) for i, lt in enumerate(layers)),
        workers=2,
        fwd_s=tuple(lt.fwd_s for lt in layers),
        bwd_s=tuple(lt.bwd_s for lt in layers),
        deps=tuple(lt.deps for lt in layers),
        collective_s=network.time_s,
    )
    policy = PACE(chunk_bytes=CHUNK, fusion="none", fusion_window=4)
    spec = validate(
        {
            "system": "pace",
            "workload": "resnet50",
            "params": {"chunk_bytes": CHUNK, "fusion": "none"},
            "iterations": 3,
            "cluster": {"workers": 2, "bandwidth_gbps": CHUNK * 8 / 1e9, "latency_us": 0},
        }
    )
    setup = ar_sim.compute_setup(spec, layers)
    for groups in (
        [[11, 10, 9], [8], [7, 6, 5, 4], [3, 2, 1, 0]],
        [[i] for i in range(11, -1, -1)],
    ):
        plan = policy._plan(problem, groups)
        simulated = simulate(ar_sim.oracle_setup(setup), network, plan).metrics
        assert transition_time(problem, groups, CHUNK) == pytest.approx(
            simulated["iteration_time_s"], rel=1e-12
        )


@pytest.mark.parametrize("workload", ["resnet50", "vgg16"])
def test_the_fusion_dp_is_never_worse_than_no_fusion_and_fuses_small_tensors(workload):
    def run(fusion):
        spec = validate(
            {
                "system": "pace",
                "workload": workload,
                "params": {"fusion": fusion},
                "iterations": 4,
                "cluster": {"workers": 16, "compute_jitter_cv": 0, "latency_us": 50},
            }
        )
        return ar_sim.run(spec)

    fused, single = run("dp"), run("none")

    assert fused.metrics["iteration_time_s"] <= single.metrics["iteration_time_s"] * (1 + 1e-9)
    assert fused.metrics["plan.fusion_groups"] < len(workloads.load_profile(workload).layers)
