"""runners.policies.allreduce: the plans of WFBP and ByteScheduler, and how they behave when the
simulator executes them."""

import math
from collections import defaultdict

import pytest

import workloads
from runners import registry
from runners.execute import simulate
from runners.policies.allreduce import (
    WFBP,
    ByteScheduler,
    CommPlan,
    CommProblem,
    Layer,
)
from runners.spec import validate

MB = 1_000_000


def problem_for(workload, workers=8):
    profile = workloads.load_profile(workload)
    layers = tuple(
        Layer(index=i, name=layer.name, grad_bytes=layer.param_bytes)
        for i, layer in enumerate(profile.layers)
    )
    return CommProblem(layers=layers, workers=workers)


def tiny_problem(*sizes):
    return CommProblem(
        layers=tuple(Layer(i, f"l{i}", size) for i, size in enumerate(sizes)), workers=4
    )


def sim(system, params=None, workload="resnet50", **cluster):
    raw = {
        "system": system,
        "workload": workload,
        "iterations": 8,
        "cluster": {"workers": 8, "bandwidth_gbps": 10, "compute_jitter_cv": 0, **cluster},
        "timeline_iterations": 0,  # the tests read the whole timeline
    }
    if params is not None:
        raw["params"] = params
    return simulate(validate(raw))


def channel_order(result):
    """(iteration, layer label) of every all-reduce, in the order the channel ran them."""
    network = [row for row in result.timeline if row[1] == "network"]
    return [(row[0], row[3]) for row in sorted(network, key=lambda row: row[4])]


# --- WFBP plan ---------------------------------------------------------------------------


@pytest.mark.parametrize("workload", ["resnet50", "vgg16"])
def test_wfbp_plans_one_whole_tensor_task_per_layer(workload):
    problem = problem_for(workload)
    plan = WFBP().plan(problem)

    assert len(plan.tasks) == len(problem.layers)
    for layer, task in zip(problem.layers, plan.tasks, strict=True):
        assert task.layers == (layer.index,)
        assert task.size_bytes == layer.grad_bytes


@pytest.mark.parametrize("workload", ["resnet50", "vgg16"])
def test_wfbp_priorities_follow_gradient_ready_order(workload):
    problem = problem_for(workload)
    plan = WFBP().plan(problem)

    by_priority = sorted(plan.tasks, key=lambda t: t.priority)
    assert [t.layers[0] for t in by_priority] == list(reversed(range(len(problem.layers))))
    assert len({t.priority for t in plan.tasks}) == len(plan.tasks)
    assert min(t.priority for t in plan.tasks) == 0


def test_wfbp_has_infinite_credit_and_a_global_barrier():
    plan = WFBP().plan(tiny_problem(10, 20, 30))

    assert plan.credit_bytes == math.inf
    assert plan.cross_barrier is False


def test_the_registry_builds_wfbp_from_no_params():
    policy = registry.get("wfbp").build({})

    assert isinstance(policy, WFBP)
    assert isinstance(policy.plan(tiny_problem(1)), CommPlan)


# --- ByteScheduler plan ------------------------------------------------------------------


@pytest.mark.parametrize("workload", ["resnet50", "vgg16"])
@pytest.mark.parametrize("partition", [64 * 1024, 4 * MB, 32 * MB])
def test_bytescheduler_partitions_sum_to_each_layer_and_none_is_too_large(workload, partition):
    problem = problem_for(workload)
    plan = ByteScheduler(partition_bytes=partition, credit_bytes=4 * MB).plan(problem)

    sizes = defaultdict(list)
    for task in plan.tasks:
        assert len(task.layers) == 1
        sizes[task.layers[0]].append(task.size_bytes)
    assert set(sizes) == {layer.index for layer in problem.layers}
    for layer in problem.layers:
        parts = sizes[layer.index]
        assert sum(parts) == layer.grad_bytes
        assert all(0 < size <= partition for size in parts)
        assert len(parts) == math.ceil(layer.grad_bytes / partition)


def test_bytescheduler_splits_vggs_largest_layer_with_the_default_partition():
    problem = problem_for("vgg16")
    params = registry.get("bytescheduler").defaults()
    plan = ByteScheduler(**params).plan(problem)
    largest = max(problem.layers, key=lambda layer: layer.grad_bytes)

    parts = [t.size_bytes for t in plan.tasks if t.layers == (largest.index,)]
    assert len(parts) == math.ceil(largest.grad_bytes / params["partition_bytes"]) > 1


def test_bytescheduler_partitions_an_exact_multiple_and_an_empty_layer():
    plan = ByteScheduler(partition_bytes=100, credit_bytes=1000).plan(tiny_problem(200, 0, 250))

    assert [(t.layers, t.size_bytes) for t in plan.tasks] == [
        ((0,), 100),
        ((0,), 100),
        ((1,), 0),  # an empty layer still gets a task, so it is synchronised
        ((2,), 100),
        ((2,), 100),
        ((2,), 50),
    ]


@pytest.mark.parametrize("workload", ["resnet50", "vgg16"])
def test_bytescheduler_priority_is_the_layer_index(workload):
    plan = ByteScheduler(partition_bytes=4 * MB, credit_bytes=4 * MB).plan(problem_for(workload))

    assert all(task.priority == task.layers[0] for task in plan.tasks)


@pytest.mark.parametrize("credit", [1024, 4 * MB, 10**12])
def test_bytescheduler_uses_its_credit_and_a_cross_barrier(credit):
    plan = ByteScheduler(partition_bytes=4 * MB, credit_bytes=credit).plan(tiny_problem(5, 6))

    assert plan.credit_bytes == credit
    assert plan.cross_barrier is True


def test_the_registry_builds_bytescheduler_from_validated_params():
    params = validate(
        {"system": "bytescheduler", "workload": "resnet50", "params": {"credit_bytes": 4 * MB}}
    ).params
    policy = registry.get("bytescheduler").build(params)

    assert policy == ByteScheduler(
        partition_bytes=params["partition_bytes"], credit_bytes=4 * MB, autotune="credit"
    )


# --- behaviour through the simulator -----------------------------------------------------
# Comm-bound setup: resnet50 on 8 workers at 10 Gbit/s: ~0.10 s of compute, ~0.16 s of
# all-reduce per iteration.


def test_the_reference_setup_is_comm_bound():
    m = sim("wfbp").metrics

    assert m["comm_time_s"] > 1.2 * m["compute_time_s"]


def test_bytescheduler_with_a_small_credit_is_strictly_faster_than_wfbp_when_comm_bound():
    """With 4 MB of credit, most ready gradients wait in ByteScheduler's priority queue, so the
    gradients the next forward needs first (low layers) overtake the large late layers; with
    the cross-barrier the forward overlaps the rest of the all-reduce. WFBP sends in ready order
    behind a global barrier, so forward and communication never overlap."""
    wfbp = sim("wfbp").metrics
    bs = sim("bytescheduler", {"credit_bytes": 4 * MB, "autotune": "off"}).metrics

    assert bs["iteration_time_s"] < 0.95 * wfbp["iteration_time_s"]
    # The overlap is so good that the (busy) channel is the only bottleneck left.
    assert bs["comm_time_s"] * (1 - 1e-9) <= bs["iteration_time_s"] <= 1.01 * bs["comm_time_s"]
    # WFBP pays the forward pass on top of the channel time.
    assert wfbp["iteration_time_s"] > wfbp["comm_time_s"] * 1.1


@pytest.mark.parametrize("credit", [103 * MB, 10**9, 10**12])
def test_bytescheduler_with_credit_for_the_whole_model_schedules_exactly_like_wfbp(credit):
    """Observed and explained: with credit >= the model's gradient bytes (resnet50: ~102 MB)
    every task is handed to the FIFO channel the moment its gradient is ready, so the priority
    queue never reorders anything and the channel runs the tasks in ready order, as WFBP's does.
    The default partition (32 MB) is larger than resnet50's largest layer (~9.4 MB), so the
    tasks are the same whole tensors. Layer 0's gradient is then always the last all-reduce of
    an iteration, so the cross-barrier waits as long as WFBP's global barrier: the iteration
    time is the same (not faster, not slower), and so is the channel order."""
    wfbp = sim("wfbp")
    bs = sim("bytescheduler", {"credit_bytes": credit, "autotune": "off"})

    assert bs.metrics["iteration_time_s"] == pytest.approx(
        wfbp.metrics["iteration_time_s"], rel=1e-12
    )
    assert channel_order(bs) == channel_order(wfbp)


def test_bytescheduler_with_a_small_credit_reorders_the_channel_by_layer_priority():
    wfbp = sim("wfbp")
    bs = sim("bytescheduler", {"credit_bytes": 4 * MB, "autotune": "off"})
    first_layer = workloads.load_profile("resnet50").layers[0].name

    def position_of_first_layer(result, iteration):
        labels = [label for it, label in channel_order(result) if it == iteration]
        return labels.index(first_layer), len(labels)

    wfbp_pos, n = position_of_first_layer(wfbp, 3)
    bs_pos, _ = position_of_first_layer(bs, 3)
    assert wfbp_pos == n - 1  # ready last, sent last
    assert bs_pos < n - 1  # overtakes tensors that were ready earlier


@pytest.mark.parametrize(
    ("system", "params"),
    [("wfbp", None), ("bytescheduler", None), ("bytescheduler", {"credit_bytes": 4 * MB})],
    ids=["wfbp", "bytescheduler-default", "bytescheduler-4MB"],
)
def test_when_compute_bound_both_policies_run_at_compute_speed(system, params):
    """At 100 Tbit/s the bytes cost nothing; what is left of comm time is the 10 us latency of
    2(n-1) ring steps per task (~15 ms for resnet50's 107 tasks), which overlaps backward."""
    m = sim(system, params, bandwidth_gbps=100_000).metrics

    assert m["comm_time_s"] < 0.2 * m["compute_time_s"]
    assert m["iteration_time_s"] == pytest.approx(m["compute_time_s"], rel=0.01)


# --- ByteScheduler's auto-tuner -------------------------------------------------------------


def test_the_autotuner_finds_a_credit_at_least_as_good_as_the_documented_default():
    default = sim("bytescheduler", {"autotune": "off"}, compute_jitter_cv=0).metrics
    tuned = sim("bytescheduler", {"autotune": "credit"}, compute_jitter_cv=0).metrics

    assert tuned["plan.tuning_evaluations"] == 25  # 10 random points + 15 BO steps
    assert 4e6 * 4 <= tuned["plan.tuned_credit_bytes"] <= 64e6 * 4  # upstream search space
    assert tuned["plan.tuned_partition_bytes"] == 8_000_000 * 4  # partition not tuned
    assert tuned["iteration_time_s"] <= default["iteration_time_s"] * (1 + 1e-9)


def test_tuning_both_knobs_moves_the_partition_inside_its_range():
    tuned = sim("bytescheduler", {"autotune": "credit+partition"}, compute_jitter_cv=0).metrics

    assert 2e6 * 4 <= tuned["plan.tuned_partition_bytes"] <= 32e6 * 4


# --- the other all-reduce baselines and systems -------------------------------------------


def test_ddp_buckets_follow_torch_rules():
    problem = problem_for("resnet50")
    plan = registry.get("ddp").build(registry.get("ddp").defaults()).plan(problem)
    sizes = [t.size_bytes for t in plan.tasks]
    largest_layer = max(layer.grad_bytes for layer in problem.layers)

    assert sum(sizes) == sum(layer.grad_bytes for layer in problem.layers)
    assert sizes[0] >= 1024 * 1024 and sizes[0] < 1024 * 1024 + largest_layer  # first bucket
    for size in sizes[1:-1]:  # closed once 25 MiB is reached: at most one layer over
        assert 25 * 1024 * 1024 <= size < 25 * 1024 * 1024 + largest_layer
    assert [t.priority for t in plan.tasks] == list(range(len(plan.tasks)))
    assert plan.cross_barrier is False
    # The first bucket holds the last layers (ready first).
    assert max(plan.tasks[0].layers) == len(problem.layers) - 1


def test_horovod_fuses_what_became_ready_within_a_cycle():
    small_cycle = sim("horovod", {"cycle_time_ms": 0.01}, compute_jitter_cv=0)
    long_cycle = sim("horovod", {"cycle_time_ms": 50.0}, compute_jitter_cv=0)

    def collectives(result):
        return len([r for r in result.timeline if r[1] == "network" and r[0] == 3])

    assert collectives(long_cycle) < collectives(small_cycle)
    assert max(r[6] for r in long_cycle.timeline if r[1] == "network") <= 128 * 1024 * 1024


def test_horovod_with_a_zero_threshold_sends_every_tensor_alone_like_wfbp():
    hv = sim("horovod", {"fusion_threshold_bytes": 0}, compute_jitter_cv=0)
    wfbp = sim("wfbp", compute_jitter_cv=0)

    assert hv.metrics["iteration_time_s"] == pytest.approx(
        wfbp.metrics["iteration_time_s"], rel=1e-12
    )


def test_dear_per_layer_overlaps_all_gathers_with_the_forward_and_beats_wfbp():
    """Same per-layer tensors, same bytes on the ring (RS + AG = one all-reduce each); DeAR's
    all-gathers run in forward order while the forward proceeds, WFBP waits for everything."""
    dear = sim("dear", {"fusion_bytes": 0}, compute_jitter_cv=0).metrics
    wfbp = sim("wfbp", compute_jitter_cv=0).metrics

    assert dear["iteration_time_s"] < 0.95 * wfbp["iteration_time_s"]
    assert dear["comm_time_s"] == pytest.approx(wfbp["comm_time_s"], rel=1e-9)


def test_a_one_step_delay_hides_the_forward_behind_the_previous_all_reduce():
    raw = {"system": "delayed-allreduce", "workload": "resnet50", "iterations": 8}
    raw |= {"warmup_iterations": 7, "cluster": {"bandwidth_gbps": 10, "compute_jitter_cv": 0}}
    delayed = simulate(validate(raw)).metrics  # warm-up: the in-flight backlog settles
    no_delay = sim("delayed-allreduce", {"max_delay": 0}, compute_jitter_cv=0).metrics

    assert delayed["iteration_time_s"] < no_delay["iteration_time_s"]
    # Comm-bound: with the delay the channel never idles, so it sets the pace.
    assert delayed["iteration_time_s"] == pytest.approx(delayed["comm_time_s"], rel=1e-3)


@pytest.mark.parametrize("approximation", ["stale", "local-correct", "extrapolate"])
def test_the_delayed_approximation_rule_does_not_change_simulated_timing(approximation):
    m = sim("delayed-allreduce", {"approximation": approximation}, compute_jitter_cv=0).metrics
    ref = sim("delayed-allreduce", {"approximation": "stale"}, compute_jitter_cv=0).metrics

    assert m["iteration_time_s"] == ref["iteration_time_s"]


def test_pace_beats_wfbp_when_comm_bound():
    pace = sim("pace", compute_jitter_cv=0).metrics
    wfbp = sim("wfbp", compute_jitter_cv=0).metrics

    assert pace["iteration_time_s"] < 0.95 * wfbp["iteration_time_s"]


def test_the_engine_issues_inline_only_what_its_thread_would_issue_at_once():
    """``dispatch: auto`` skips the communication thread only for plans that thread takes no
    decision for: release order (no priorities to reorder by, no dependent tasks) and no credit
    limit. Every other plan keeps the thread (and its negotiation, where it has one)."""
    from runners.policies import allreduce as ar

    layers = tuple(Layer(index=i, name=f"l{i}", grad_bytes=400_000) for i in range(6))
    problem = CommProblem(layers=layers, workers=2)
    eligible = {
        "wfbp": ar.WFBP(),
        "ddp": ar.DDP(bucket_bytes=800_000, first_bucket_bytes=400_000, broadcast_buffers=False),
        "delayed-fifo": ar.DelayedAllReduce(1, "stale", 800_000, "fifo"),
    }
    kept = {
        "bytescheduler": ar.bytescheduler(200_000, 400_000),  # a credit limit
        "dear": ar.DeAR(fusion_bytes=800_000),  # all-gathers after their reduce-scatters
        "delayed-priority": ar.DelayedAllReduce(1, "stale", 800_000, "priority"),
    }
    for name, policy in eligible.items():
        assert ar.inline_eligible(policy.plan(problem)), name
    for name, policy in kept.items():
        assert not ar.inline_eligible(policy.plan(problem)), name
