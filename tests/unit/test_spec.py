"""runners.spec: the run-spec contract (defaults, round trip, errors with dotted fields, files)."""

import copy
import dataclasses
import json
import math

import pytest

import workloads
from runners import registry
from runners.spec import SPEC_VERSION, CommCluster, SpecError, Straggler, load_file, validate

MINIMAL = {"system": "wfbp", "workload": "resnet50"}


def with_changes(base=None, **changes):
    """A copy of ``base`` (default: the minimal spec) with top-level keys replaced."""
    raw = copy.deepcopy(MINIMAL if base is None else base)
    raw.update(changes)
    return raw


def with_cluster(**cluster):
    return with_changes(cluster=cluster)


def bytescheduler(**params):
    return with_changes(system="bytescheduler", params=params)


def ps_cluster(**cluster):
    """A parameter-server arena spec with these cluster fields."""
    return {"system": "ps-default", "workload": "resnet50", "cluster": cluster}


def without(key):
    raw = copy.deepcopy(MINIMAL)
    del raw[key]
    return raw


# --- defaults ----------------------------------------------------------------------------


def test_a_minimal_spec_gets_every_default_filled():
    spec = validate(MINIMAL)

    assert spec.system == "wfbp"
    assert spec.mode == "sim"
    assert spec.workload == "resnet50"
    assert spec.cluster == CommCluster(server_bandwidth_gbps=10.0)
    assert spec.cluster.ps == 4 and spec.cluster.servers == 8
    assert spec.cluster.workers == 8
    assert spec.cluster.bandwidth_gbps == 10.0
    assert spec.cluster.latency_us == 10.0
    assert spec.cluster.gpu == "v100"
    assert spec.cluster.compute_efficiency == 0.5
    assert spec.cluster.compute_jitter_cv == 0.02
    assert spec.cluster.stragglers == ()
    assert spec.cluster.jitter_groups == 1
    assert spec.params == {}
    assert spec.iterations == 20
    assert spec.warmup_iterations == 2
    assert spec.seed == 0
    assert spec.labels == {}
    assert spec.arena == "allreduce"


@pytest.mark.parametrize("workload", ["resnet50", "vgg16"])
def test_batch_size_defaults_to_the_workloads_default_batch_size(workload):
    spec = validate(with_changes(workload=workload))

    assert spec.batch_size == workloads.load_profile(workload).default_batch_size
    assert spec.batch_size > 0


def test_params_default_to_the_registry_entrys_defaults():
    spec = validate(bytescheduler())

    assert spec.params == registry.get("bytescheduler").defaults()
    assert set(spec.params) == {"partition_bytes", "credit_bytes", "autotune"}


def test_a_given_param_overrides_only_its_own_default():
    spec = validate(bytescheduler(credit_bytes=4_000_000))

    defaults = registry.get("bytescheduler").defaults()
    assert spec.params == {**defaults, "credit_bytes": 4_000_000}


def test_integral_floats_become_ints_and_ints_become_floats():
    spec = validate(
        with_changes(cluster={"workers": 16.0, "bandwidth_gbps": 25}, iterations=30.0, seed=7)
    )

    assert spec.cluster.workers == 16 and type(spec.cluster.workers) is int
    assert spec.cluster.bandwidth_gbps == 25.0 and type(spec.cluster.bandwidth_gbps) is float
    assert spec.iterations == 30 and type(spec.iterations) is int


def test_stragglers_are_resolved_into_a_tuple_of_stragglers():
    spec = validate(with_cluster(workers=4, stragglers=[{"worker": 3, "slowdown": 2}]))

    assert spec.cluster.stragglers == (Straggler(worker=3, slowdown=2.0),)


def test_validate_does_not_modify_its_input():
    raw = with_changes(cluster={"workers": 4, "stragglers": [{"worker": 0, "slowdown": 1.5}]})
    before = copy.deepcopy(raw)

    validate(raw)

    assert raw == before


def test_jitter_groups_is_a_ps_arena_field_up_to_the_number_of_workers():
    assert validate(ps_cluster()).cluster.jitter_groups == 1
    assert validate(ps_cluster(jitter_groups=8)).cluster.jitter_groups == 8
    assert validate(ps_cluster(workers=4, jitter_groups=4.0)).cluster.jitter_groups == 4
    assert validate(with_cluster(jitter_groups=1)) == validate(MINIMAL)  # 1: any arena


def test_as_dict_leaves_jitter_groups_out_at_its_default():
    """Specs that do not set it resolve (and hash to run keys) as before the field existed."""
    assert "jitter_groups" not in validate(ps_cluster()).as_dict()["cluster"]
    assert "jitter_groups" not in validate(ps_cluster(jitter_groups=1)).as_dict()["cluster"]
    assert validate(ps_cluster(jitter_groups=2)).as_dict()["cluster"]["jitter_groups"] == 2


def test_a_busy_machine_s_measured_slowdowns_are_accepted_up_to_the_bound():
    """CI measured 10.7 once; the bound (100) stops typos, not measurements."""
    spec = validate(with_cluster(overlap_slowdown=100, overlap_comm_slowdown=10.7))
    assert (spec.cluster.overlap_slowdown, spec.cluster.overlap_comm_slowdown) == (100, 10.7)


def test_as_dict_leaves_the_split_collective_costs_out_at_the_ring_s():
    """Specs written before the fields resolve (and hash to run keys) as before."""
    assert "reduce_scatter_cost" not in validate(MINIMAL).as_dict()["cluster"]
    assert "cpu_collectives" not in validate(MINIMAL).as_dict()["cluster"]
    assert validate(with_cluster(cpu_collectives=True)).as_dict()["cluster"]["cpu_collectives"]
    for key in ("busy_latency_us", "overlap_comm_slowdown", "negotiation", "link_burst_bytes"):
        assert key not in validate(MINIMAL).as_dict()["cluster"]
    bucket = validate(with_cluster(link_burst_bytes=262144))
    assert bucket.as_dict()["cluster"]["link_burst_bytes"] == 262144
    assert validate(bucket.as_dict()) == bucket
    split = validate(
        with_cluster(busy_latency_us=900.0, overlap_comm_slowdown=0.3, negotiation=True)
    )
    assert split.cluster.busy_latency_us == 900.0 and split.cluster.negotiation
    assert validate(split.as_dict()) == split
    spec = validate(with_cluster(reduce_scatter_cost=1.0, all_gather_cost=0.5))
    assert spec.as_dict()["cluster"]["reduce_scatter_cost"] == 1.0
    assert "all_gather_cost" not in spec.as_dict()["cluster"]
    assert validate(spec.as_dict()) == spec


def test_a_nic_straggler_round_trips_and_older_stragglers_keep_their_form():
    nic = validate(with_cluster(stragglers=[{"worker": 1, "bandwidth_factor": 0.5}]))
    assert nic.cluster.stragglers[0].slowdown == 1.0
    assert nic.as_dict()["cluster"]["stragglers"] == [
        {"worker": 1, "slowdown": 1.0, "from_iteration": 0, "until_iteration": None,
         "bandwidth_factor": 0.5}
    ]  # fmt: skip
    assert validate(nic.as_dict()) == nic
    old = validate(with_cluster(stragglers=[{"worker": 1, "slowdown": 2}]))
    assert "bandwidth_factor" not in old.as_dict()["cluster"]["stragglers"][0]
    ps = validate(ps_cluster(stragglers=[{"worker": 1, "bandwidth_factor": 0.5}]))
    assert ps.arena == "ps" and ps.cluster.stragglers[0].bandwidth_factor == 0.5


def test_as_dict_carries_the_spec_version():
    data = validate(MINIMAL).as_dict()

    assert data["spec_version"] == SPEC_VERSION
    assert data["batch_size"] == 32


# --- round trip --------------------------------------------------------------------------

ROUND_TRIP_SPECS = [
    MINIMAL,
    with_changes(workload="vgg16", iterations=5, warmup_iterations=4, seed=3, labels={"a": 1}),
    {
        "system": "bytescheduler",
        "workload": "resnet50",
        "params": {"credit_bytes": 4_000_000},
        "cluster": {
            "workers": 4,
            "gpu": "a100",
            "compute_jitter_cv": 0,
            "stragglers": [{"worker": 1, "slowdown": 2}, {"worker": 3, "slowdown": 1.5}],
        },
    },
    ps_cluster(workers=6, jitter_groups=6),
]
ROUND_TRIP_IDS = ["minimal", "vgg16-labels", "stragglers", "ps-jitter-groups"]


@pytest.mark.parametrize("raw", ROUND_TRIP_SPECS, ids=ROUND_TRIP_IDS)
def test_the_resolved_spec_stored_as_json_validates_to_itself(raw):
    spec = validate(raw)
    stored = json.loads(json.dumps(spec.as_dict()))  # what manifest.json holds

    assert validate(stored) == spec


@pytest.mark.parametrize("raw", ROUND_TRIP_SPECS, ids=ROUND_TRIP_IDS)
def test_the_resolved_spec_as_a_dict_validates_to_itself(raw):
    spec = validate(raw)

    assert validate(spec.as_dict()) == spec


# --- errors ------------------------------------------------------------------------------

BAD_SPECS = [
    # (id, raw, field)
    ("not-a-mapping", ["wfbp"], "SPEC"),
    ("missing-system", without("system"), "system"),
    ("empty-system", with_changes(system=""), "system"),
    ("system-not-a-string", with_changes(system=3), "system"),
    ("unknown-system", with_changes(system="horovod-magic"), "system"),
    ("unknown-top-level-key", with_changes(nodes=4), "nodes"),
    ("real-mode-for-sim-only-entry", {"system": "oasis", "mode": "real"}, "mode"),
    ("real-options-in-sim-mode", with_changes(real={"lr": 0.1}), "real"),
    ("real-unknown-option", with_changes(mode="real", real={"speed": 2}), "real.speed"),
    ("real-bad-network", with_changes(mode="real", real={"network": "wifi"}), "real.network"),
    ("real-bad-lr", with_changes(mode="real", real={"lr": -1}), "real.lr"),
    (
        "real-bad-comm-priority",
        with_changes(mode="real", real={"comm_priority": "high"}),
        "real.comm_priority",
    ),
    ("real-bad-dispatch", with_changes(mode="real", real={"dispatch": "inline"}), "real.dispatch"),
    (
        "real-bad-ps-transport",
        with_changes(ps_cluster(), mode="real", real={"ps_transport": "rdma"}),
        "real.ps_transport",
    ),
    (
        "real-ddp-timeline-of-the-ps-arena",
        with_changes(ps_cluster(), mode="real", real={"ddp_timeline": True}),
        "real.ddp_timeline",
    ),
    (
        "real-ddp-timeline-not-a-bool",
        with_changes(mode="real", real={"ddp_timeline": "yes"}),
        "real.ddp_timeline",
    ),
    (
        "real-ps-transport-of-the-allreduce-arena",
        with_changes(mode="real", real={"ps_transport": "pipelined"}),
        "real.ps_transport",
    ),
    ("bad-mode", with_changes(mode="turbo"), "mode"),
    ("missing-workload", without("workload"), "workload"),
    ("unknown-workload", with_changes(workload="alexnet"), "workload"),
    ("cluster-not-a-mapping", with_changes(cluster=[8]), "cluster"),
    ("workers-0", with_cluster(workers=0), "cluster.workers"),
    ("workers-string", with_cluster(workers="x"), "cluster.workers"),
    ("workers-fraction", with_cluster(workers=2.5), "cluster.workers"),
    ("workers-bool", with_cluster(workers=True), "cluster.workers"),
    ("workers-too-many", with_cluster(workers=100_001), "cluster.workers"),
    ("bandwidth-negative", with_cluster(bandwidth_gbps=-1), "cluster.bandwidth_gbps"),
    ("bandwidth-zero", with_cluster(bandwidth_gbps=0), "cluster.bandwidth_gbps"),
    ("bandwidth-nan", with_cluster(bandwidth_gbps=math.nan), "cluster.bandwidth_gbps"),
    ("bandwidth-inf", with_cluster(bandwidth_gbps=math.inf), "cluster.bandwidth_gbps"),
    ("bandwidth-string", with_cluster(bandwidth_gbps="fast"), "cluster.bandwidth_gbps"),
    ("latency-negative", with_cluster(latency_us=-0.5), "cluster.latency_us"),
    ("gpu-unknown", with_cluster(gpu="tpu-v9"), "cluster.gpu"),
    ("gpu-not-a-string", with_cluster(gpu=100), "cluster.gpu"),
    ("efficiency-zero", with_cluster(compute_efficiency=0), "cluster.compute_efficiency"),
    ("efficiency-above-one", with_cluster(compute_efficiency=1.5), "cluster.compute_efficiency"),
    ("jitter-one", with_cluster(compute_jitter_cv=1), "cluster.compute_jitter_cv"),
    ("unknown-cluster-key", with_cluster(nodes=2), "cluster.nodes"),
    ("jitter-groups-0", ps_cluster(jitter_groups=0), "cluster.jitter_groups"),
    ("jitter-groups-negative", ps_cluster(jitter_groups=-1), "cluster.jitter_groups"),
    ("jitter-groups-string", ps_cluster(jitter_groups="x"), "cluster.jitter_groups"),
    ("jitter-groups-fraction", ps_cluster(jitter_groups=2.5), "cluster.jitter_groups"),
    ("jitter-groups-bool", ps_cluster(jitter_groups=True), "cluster.jitter_groups"),
    ("jitter-groups-above-workers", ps_cluster(jitter_groups=9), "cluster.jitter_groups"),
    (
        "jitter-groups-above-given-workers",
        ps_cluster(workers=4, jitter_groups=5),
        "cluster.jitter_groups",
    ),
    ("jitter-groups-outside-ps-arena", with_cluster(jitter_groups=2), "cluster.jitter_groups"),
    ("stragglers-not-a-list", with_cluster(stragglers={"worker": 0}), "cluster.stragglers"),
    ("straggler-not-a-mapping", with_cluster(stragglers=[3]), "cluster.stragglers[0]"),
    (
        "straggler-missing-slowdown",
        with_cluster(stragglers=[{"worker": 0}]),
        "cluster.stragglers[0]",
    ),
    (
        "straggler-extra-key",
        with_cluster(stragglers=[{"worker": 0, "slowdown": 2, "why": "x"}]),
        "cluster.stragglers[0]",
    ),
    (
        "straggler-worker-out-of-range",
        with_cluster(workers=4, stragglers=[{"worker": 4, "slowdown": 2}]),
        "cluster.stragglers[0].worker",
    ),
    (
        "straggler-worker-negative",
        with_cluster(stragglers=[{"worker": -1, "slowdown": 2}]),
        "cluster.stragglers[0].worker",
    ),
    (
        "straggler-worker-out-of-default-range",
        with_cluster(stragglers=[{"worker": 8, "slowdown": 2}]),
        "cluster.stragglers[0].worker",
    ),
    (
        "straggler-duplicate-worker",
        with_cluster(stragglers=[{"worker": 1, "slowdown": 2}, {"worker": 1, "slowdown": 3}]),
        "cluster.stragglers[1].worker",
    ),
    (
        "straggler-without-an-effect",
        with_cluster(stragglers=[{"worker": 0, "from_iteration": 2}]),
        "cluster.stragglers[0]",
    ),
    (
        "straggler-bandwidth-factor-above-one",
        with_cluster(stragglers=[{"worker": 0, "bandwidth_factor": 2}]),
        "cluster.stragglers[0].bandwidth_factor",
    ),
    (
        "straggler-nic-in-the-ps-arena-on-loopback",
        {
            **ps_cluster(stragglers=[{"worker": 0, "bandwidth_factor": 0.5}], workers=2),
            "mode": "real",
            "workload": "vgg16-debug",
            "real": {"network": "loopback"},
        },
        "cluster.stragglers[0].bandwidth_factor",
    ),
    ("cpu-collectives-not-a-bool", with_cluster(cpu_collectives=1), "cluster.cpu_collectives"),
    (
        "cpu-collectives-in-the-ps-arena",
        ps_cluster(cpu_collectives=True),
        "cluster.cpu_collectives",
    ),
    ("busy-latency-negative", with_cluster(busy_latency_us=-1), "cluster.busy_latency_us"),
    (
        "comm-slowdown-too-large",
        with_cluster(overlap_comm_slowdown=101),
        "cluster.overlap_comm_slowdown",
    ),
    ("slowdown-too-large", with_cluster(overlap_slowdown=101), "cluster.overlap_slowdown"),
    ("negotiation-not-a-bool", with_cluster(negotiation="yes"), "cluster.negotiation"),
    (
        "busy-latency-in-the-ps-arena",
        ps_cluster(busy_latency_us=500.0),
        "cluster.busy_latency_us",
    ),
    ("negotiation-in-the-ps-arena", ps_cluster(negotiation=True), "cluster.negotiation"),
    ("burst-negative", with_cluster(link_burst_bytes=-1), "cluster.link_burst_bytes"),
    ("burst-not-an-integer", with_cluster(link_burst_bytes=1.5), "cluster.link_burst_bytes"),
    (
        "reduce-scatter-cost-in-the-ps-arena",
        ps_cluster(reduce_scatter_cost=1.0),
        "cluster.reduce_scatter_cost",
    ),
    (
        "straggler-nic-on-loopback",
        with_changes(
            mode="real",
            workload="vgg16-debug",
            cluster={"workers": 2, "stragglers": [{"worker": 1, "bandwidth_factor": 0.5}]},
            real={"network": "loopback"},
        ),
        "cluster.stragglers[0].bandwidth_factor",
    ),
    (
        "straggler-slowdown-below-one",
        with_cluster(stragglers=[{"worker": 0, "slowdown": 0.5}]),
        "cluster.stragglers[0].slowdown",
    ),
    (
        "straggler-slowdown-nan",
        with_cluster(stragglers=[{"worker": 0, "slowdown": math.nan}]),
        "cluster.stragglers[0].slowdown",
    ),
    (
        "reduce-scatter-cost-zero",
        with_cluster(reduce_scatter_cost=0),
        "cluster.reduce_scatter_cost",
    ),
    ("all-gather-cost-above-4", with_cluster(all_gather_cost=5), "cluster.all_gather_cost"),
    ("params-not-a-mapping", with_changes(params=[1, 2]), "params"),
    ("unknown-param", bytescheduler(credit=1), "params.credit"),
    (
        "param-for-a-system-without-params",
        with_changes(params={"credit_bytes": 1}),
        "params.credit_bytes",
    ),
    ("param-below-minimum", bytescheduler(credit_bytes=1023), "params.credit_bytes"),
    ("param-bool-for-int", bytescheduler(partition_bytes=True), "params.partition_bytes"),
    ("param-fraction-for-int", bytescheduler(partition_bytes=4096.5), "params.partition_bytes"),
    ("param-string-for-int", bytescheduler(credit_bytes="4MB"), "params.credit_bytes"),
    ("iterations-below-3", with_changes(iterations=2), "iterations"),
    ("iterations-bool", with_changes(iterations=True), "iterations"),
    (
        "warmup-equal-to-iterations",
        with_changes(iterations=5, warmup_iterations=5),
        "warmup_iterations",
    ),
    ("warmup-above-iterations", with_changes(warmup_iterations=20), "warmup_iterations"),
    ("warmup-negative", with_changes(warmup_iterations=-1), "warmup_iterations"),
    ("batch-size-zero", with_changes(batch_size=0), "batch_size"),
    ("seed-negative", with_changes(seed=-1), "seed"),
    ("labels-not-a-mapping", with_changes(labels="nightly"), "labels"),
]


@pytest.mark.parametrize(
    ("raw", "field"), [(raw, field) for _, raw, field in BAD_SPECS], ids=[i for i, *_ in BAD_SPECS]
)
def test_it_rejects_a_bad_spec_naming_the_field(raw, field):
    with pytest.raises(SpecError) as info:
        validate(raw)

    err = info.value
    assert err.field == field
    text = str(err)
    assert "\n" not in text
    assert text.startswith(f"{field}: ")
    assert err.message and err.message in text


def test_an_unknown_system_error_lists_the_known_systems():
    with pytest.raises(SpecError) as info:
        validate(with_changes(system="nope"))

    assert "wfbp" in str(info.value) and "bytescheduler" in str(info.value)


def test_an_unknown_gpu_error_lists_the_known_devices():
    with pytest.raises(SpecError) as info:
        validate(with_cluster(gpu="tpu-v9"))

    assert "v100" in str(info.value)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (with_changes(iterations=math.nan), "iterations"),
        (with_changes(seed=math.inf), "seed"),
        (with_cluster(workers=math.inf), "cluster.workers"),
        (bytescheduler(credit_bytes=math.nan), "params.credit_bytes"),
    ],
    ids=["iterations-nan", "seed-inf", "workers-inf", "param-nan"],
)
def test_a_non_finite_number_for_an_integer_field_is_a_spec_error(raw, field):
    with pytest.raises(SpecError) as info:
        validate(raw)

    assert info.value.field == field


def test_unknown_keys_of_mixed_types_are_a_spec_error():
    with pytest.raises(SpecError):
        validate(with_changes(**{"nodes": 1}) | {1: "one"})


@pytest.mark.parametrize(
    "raw",
    [with_changes(system="wf\nbp"), with_changes(workload="res\nnet")],
    ids=["system", "workload"],
)
def test_the_error_stays_on_one_line_when_the_bad_value_contains_a_newline(raw):
    with pytest.raises(SpecError) as info:
        validate(raw)

    assert "\n" not in str(info.value)


# --- files -------------------------------------------------------------------------------


def test_load_file_reads_json(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"system": "wfbp", "workload": "vgg16", "cluster": {"workers": 4}}))

    assert load_file(path) == {"system": "wfbp", "workload": "vgg16", "cluster": {"workers": 4}}


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_load_file_reads_yaml(tmp_path, suffix):
    path = tmp_path / f"spec{suffix}"
    path.write_text(
        "system: bytescheduler\n"
        "workload: resnet50\n"
        "params:\n"
        "  credit_bytes: 4000000\n"
        "cluster:\n"
        "  stragglers:\n"
        "    - {worker: 1, slowdown: 2.5}\n"
    )

    raw = load_file(str(path))

    assert raw == {
        "system": "bytescheduler",
        "workload": "resnet50",
        "params": {"credit_bytes": 4_000_000},
        "cluster": {"stragglers": [{"worker": 1, "slowdown": 2.5}]},
    }
    assert validate(raw).params["credit_bytes"] == 4_000_000


BAD_FILES = [
    ("missing", None),
    ("invalid-yaml", ("spec.yaml", "system: [wfbp\nworkload: {\n")),
    ("invalid-json", ("spec.json", '{"system": "wfbp",')),
    ("yaml-list", ("spec.yaml", "- system\n- workload\n")),
    ("yaml-scalar", ("spec.yaml", "wfbp\n")),
    ("empty-yaml", ("spec.yaml", "")),
    ("json-list", ("spec.json", '["wfbp"]')),
]


@pytest.mark.parametrize("content", [c for _, c in BAD_FILES], ids=[i for i, _ in BAD_FILES])
def test_load_file_reports_an_unusable_file_as_field_spec(tmp_path, content):
    if content is None:
        path = tmp_path / "nowhere.json"
    else:
        name, text = content
        path = tmp_path / name
        path.write_text(text)

    with pytest.raises(SpecError) as info:
        load_file(path)

    assert info.value.field == "SPEC"
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("SPEC: ")
    assert str(path) in str(info.value)


def test_load_file_on_a_directory_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError) as info:
        load_file(tmp_path)

    assert info.value.field == "SPEC"


def test_timeline_iterations_is_checked_and_left_out_of_the_resolved_spec_at_its_default():
    from runners import grid

    raw = {"system": "wfbp", "workload": "resnet50", "iterations": 10}
    default = validate(raw)
    assert default.timeline_iterations == 2
    assert "timeline_iterations" not in default.as_dict()  # run keys of older runs stand
    assert grid.run_key(default) == grid.run_key(validate({**raw, "timeline_iterations": 2}))
    every = validate({**raw, "timeline_iterations": 0})
    assert every.as_dict()["timeline_iterations"] == 0
    assert validate(every.as_dict()) == every
    for bad in (-1, 11, "many", 2.5):
        with pytest.raises(SpecError) as err:
            validate({**raw, "timeline_iterations": bad})
        assert err.value.field == "timeline_iterations"


def test_ddp_on_the_lab_s_engine_must_say_it_does_not_broadcast_the_buffers():
    """The lab's engine runs DDP's buckets but no buffer broadcast; DDP's default asks for one
    before each forward, so a run that would not do what its spec says is refused."""
    raw = {
        "system": "ddp",
        "mode": "real",
        "workload": "resnet50-debug",  # batch norm: buffers
        "real": {"network": "loopback", "implementation": "lab"},
    }
    with pytest.raises(SpecError, match=r"^params\.broadcast_buffers: the lab's engine"):
        validate(raw)
    assert (
        validate({**raw, "params": {"broadcast_buffers": False}}).params["broadcast_buffers"]
        is False
    )
    assert validate({**raw, "workload": "vgg16-debug"}).system == "ddp"  # no buffers to broadcast
    assert validate({**raw, "real": {"network": "loopback"}}).params["broadcast_buffers"] is True


def test_the_lab_s_engine_refuses_a_plan_with_collectives_before_the_forward():
    """A second line behind the spec's check: the lab's engine has no counterpart of DDP's
    buffer broadcast, so it refuses a plan that carries one. The job file keeps it: PyTorch's
    own DDP runs with such a plan (a refusal there stopped every real ``ddp`` run on a model
    with buffers, ``fidelity`` included)."""
    from runners.policies.allreduce import CommPlan, CommTask
    from runners.real.engine import Engine
    from runners.real.worker import plan_from_json, plan_to_json

    task = CommTask(layers=(0,), size_bytes=4, priority=0)
    plan = CommPlan(tasks=(task,), credit_bytes=math.inf, cross_barrier=False)
    synced = dataclasses.replace(plan, forward_sync=(("broadcast", 8), ("broadcast", 4)))
    assert plan_from_json(json.loads(json.dumps(plan_to_json(synced)))) == synced
    assert plan_from_json(json.loads(json.dumps(plan_to_json(plan)))) == plan
    with pytest.raises(ValueError, match="params.broadcast_buffers: false"):
        Engine(None, None, synced, lr=0.1)  # refused before it touches the model or the group


def test_the_ps_transport_defaults_to_blocking_and_takes_pipelined():
    assert validate(with_changes(ps_cluster(), mode="real")).real.ps_transport == "blocking"
    spec = validate(with_changes(ps_cluster(), mode="real", real={"ps_transport": "pipelined"}))
    assert spec.real.ps_transport == "pipelined"
    assert validate(spec.as_dict()).real.ps_transport == "pipelined"  # round trip


def test_ddp_s_timeline_is_off_by_default_and_left_out_of_the_spec_there():
    """``real.ddp_timeline``: off, DDP as PyTorch runs it (no hook), and the key left out of
    the spec's dict (older specs and fidelity's journals keep matching); on, kept through
    a round trip, for any system of the all-reduce arena (one experiment's options serve
    ddp and its neighbours)."""
    plain = validate(with_changes(system="ddp", mode="real"))
    assert plain.real.ddp_timeline is False
    assert "ddp_timeline" not in plain.as_dict()["real"]
    for system in ("ddp", "wfbp"):
        timed = validate(with_changes(system=system, mode="real", real={"ddp_timeline": True}))
        assert timed.real.ddp_timeline is True
        assert validate(timed.as_dict()).real.ddp_timeline is True
