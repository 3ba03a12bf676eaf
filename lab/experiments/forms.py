"""The "new experiment" form: the one validation path for the portal and the JSON API.

Every run the experiment would create is validated against the runners contract before
anything is stored; a spec error is shown next to the field it names.

The system's arena decides which fields apply: the communication arenas (all-reduce, PS) run
on workloads for a number of iterations on a ``cluster_*`` cluster; the cluster arena runs on a
generated trace of jobs (``trace_*``) and its own cluster of servers (``cluster_arena_*``). The
fields of the other arenas are ignored, errors included (the page hides them).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.forms.forms import DeclarativeFieldsMetaclass

from lab.actions import ExperimentConfig, arena_of
from lab.catalogue.models import CatalogueEntry, Workload
from runners import registry
from runners import spec as run_spec
from runners.cluster import spec as cluster_spec
from runners.real import testbed
from workloads import devices

MAX_RUNS = 500
# The conditions a sweep may take several values of, per side: the communication arenas'
# ``cluster_*`` fields and the cluster arena's load (``trace_jobs_per_hour``); see
# ``lab.runs.models.CONDITION_KEYS``.
COMM_SWEEP_KEYS = ("workers", "bandwidth_gbps")
CLUSTER_SWEEP_KEYS = ("jobs_per_hour",)
_DEFAULTS = run_spec.CommCluster()
_OVERLAP_LABELS = {  # ``cluster.overlap_model``'s choices, as the form says them
    "start": "when an op starts, for its whole length",
    "integrated": "integrated over the op, while the network is busy or idle",
}
_HOST_CPU_LABELS = {  # ``cluster.host_cpu_model``'s choices, as the form says them
    "floor": "each iteration at least the host's CPU work over its cores",
    "fair": "shared op by op, every computing worker and message alike",
    "messages-first": "shared op by op, the messages first (realtime communication threads)",
}
_MESSAGE_CPU_AT_LABELS = {  # ``cluster.message_cpu_at``'s choices, as the form says them
    "transfer": "as its transfer starts on the link",
    "handover": "as the backward hands its gradient to the transport",
}
_ROUND_LOOP_LABELS = {  # ``cluster.round_loop``'s choices, as the form says them
    "tick": "at the next cycle tick after a gradient is ready",
    "free": "free-running, back to back (Horovod's background loop)",
}
_REAL = run_spec.RealOptions()
REAL_KEYS = (
    "network", "dataset", "lr", "momentum", "implementation", "gpus", "gpu_model", "nodes",
    "comm_priority", "device", "dispatch", "ps_transport", "ddp_timeline",
)  # fmt: skip
# Spec cluster fields the portal does not offer, each with why (the API answers with it).
CLI_ONLY_CLUSTER_KEYS = {
    "optimizer_update": "needs a measured profile (cluster.gpu measured:<label>), which the "
    "portal does not offer: run it with python -m runners run",
    "lone_allreduce": "a list of measured [bytes, seconds] points (python -m runners "
    "calibrate's), which the portal does not offer: run it with python -m runners run",
}
CLUSTER_KEYS = (
    "workers",
    "bandwidth_gbps",
    "latency_us",
    "gpu",
    "compute_efficiency",
    "compute_jitter_cv",
    "compute_scale",
    "overlap_slowdown",
    "overlap_model",
    "step_jitter_cv",
    "stragglers",
    "link_burst_bytes",
    *(key for key in run_spec.ALLREDUCE_ONLY_FIELDS if key not in CLI_ONLY_CLUSTER_KEYS),
    "ps",
    "servers",
    "server_bandwidth_gbps",
    "server_agg_gbps",
    "server_agg_fixed_us",
    "ps_stragglers",
    "jitter_groups",
    "message_cpu_us",
    "message_cpu_at",
    "pull_rendezvous",
    "push_rendezvous",
    "push_buffered",
    "host_cores",
    "host_message_cpu_us",
    "host_cpu_ns_per_byte",
    "host_cpu_model",
)
# Cluster fields one arena alone uses (the spec refuses them elsewhere unless default): key ->
# its arena.
FIELD_ARENA = run_spec.FIELD_ARENA
STRAGGLER_HELP = (
    "worker:slowdown, or worker:slowdown:bandwidth_factor for a slow NIC too, optionally "
    "@from-until iterations (until exclusive, open-ended if left out); "
    "e.g. 0:1.5, 3:2@10-20, 1:1:0.5"
)
PS_STRAGGLER_HELP = (
    "server:bandwidth_factor:cpu_slowdown, optionally @from-until; e.g. 1:0.5:2, 2:1:3@10-"
)

# The arenas the portal and the API queue, in the order the system menu lists them.
PORTAL_ARENAS = ("allreduce", "ps", "cluster")
ARENA_LABELS = {
    "allreduce": "all-reduce arena",
    "ps": "parameter-server arena",
    "cluster": "cluster arena (a trace of jobs)",
}

# The cluster arena. Only generated traces: a trace file is a path on the server, and neither
# the portal nor the API may make the server read a file a user names (``python -m runners
# run`` takes trace files).
_TRACE = cluster_spec.TraceSpec()
TRACE_KEYS = ("generator", "jobs", "jobs_per_hour", "ps_fraction", "arrivals", "duration_scale")
TRACE_FILE_KEYS = ("file", "format", "on_error", "throughputs", "limit")
# Every field of the cluster arena's cluster (``ClusterSpec``): label, help text.
_ARENA = cluster_spec.ClusterSpec()
ARENA_PREFIX = "cluster_arena_"
ARENA_CLUSTER_FIELDS = {
    "servers": ("GPU servers", ""),
    "gpus_per_server": ("GPUs per server", ""),
    "gpu": ("GPU", "every server's GPU model"),
    "nic_gbps": ("NIC bandwidth (Gbit/s per server)", ""),
    "intra_gbps": ("bandwidth inside a server (Gbit/s)", "between the GPUs of one server"),
    "cpus_per_server": ("CPU cores per server", ""),
    "mem_gb_per_server": ("memory per server (GB)", ""),
    "compute_efficiency": (
        "compute efficiency",
        "fraction of the GPU's peak fp32 rate reached (our assumption)",
    ),
    "max_interference": (
        "max interference",
        "co-located jobs slow each other by up to this (a seeded matrix, not measured); 0 = none",
    ),
    "restart_overhead_s": ("restart overhead (s)", "lost when a job is preempted or resized"),
    "ps_servers": (
        "PS machines",
        "a separate pool of CPU machines for parameter servers (OASiS, PAI); 0 = none, PSs run "
        "on the GPU servers",
    ),
    "ps_cpus_per_server": ("CPU cores per PS machine", ""),
    "ps_mem_gb_per_server": ("memory per PS machine (GB)", ""),
}
_GPU_CHOICES = [(d, d) for d in sorted(devices.DEVICES)]
# The fields only one side uses; the form ignores the other side's (``ExperimentForm.clean``).
COMM_ONLY = (
    "workloads", "iterations", "batch_size", *(f"cluster_{key}" for key in CLUSTER_KEYS)
)  # fmt: skip
CLUSTER_ARENA_ONLY = (
    *(f"trace_{key}" for key in TRACE_KEYS),
    *(ARENA_PREFIX + key for key in ARENA_CLUSTER_FIELDS),
)


def _arena_field(key: str, label: str, help_text: str) -> forms.Field:
    """The form field of a ``ClusterSpec`` field, with the dataclass default as its initial."""
    default = getattr(_ARENA, key)
    if isinstance(default, str):
        return forms.ChoiceField(
            label=label, initial=default, choices=_GPU_CHOICES, help_text=help_text
        )
    kind = forms.IntegerField if isinstance(default, int) else forms.FloatField
    return kind(label=label, initial=default, help_text=help_text)


# The cluster arena's cluster fields, declared from the table above (``cluster_arena_<key>``).
_ClusterArenaFields = DeclarativeFieldsMetaclass(
    "_ClusterArenaFields",
    (forms.Form,),
    {ARENA_PREFIX + key: _arena_field(key, *text) for key, text in ARENA_CLUSTER_FIELDS.items()},
)


class ExperimentForm(_ClusterArenaFields):
    name = forms.CharField(max_length=200)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    system = forms.ChoiceField(help_text="the system under test")
    baselines = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="preselected: the baselines of the system's arena",
    )
    workloads = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        help_text="the models trained (communication arenas; the cluster arena runs a trace)",
    )
    mode = forms.ChoiceField(choices=[("sim", "simulation"), ("real", "real")], initial="sim")
    seeds = forms.CharField(
        required=False,
        help_text="comma-separated seeds, e.g. 0, 1, 2; leave empty to use 0..repeats-1",
    )
    repeats = forms.IntegerField(min_value=1, max_value=50, initial=3, required=False)
    iterations = forms.IntegerField(
        min_value=3,
        max_value=100_000,
        initial=20,
        help_text="measured iterations per run (after warm-up)",
    )
    batch_size = forms.IntegerField(
        label="Batch size",
        min_value=1,
        max_value=1_000_000,
        required=False,
        help_text="samples per worker and step; leave empty for each workload's default",
    )
    cluster_workers = forms.CharField(
        label="workers",
        initial=str(_DEFAULTS.workers),
        help_text="one value, or several separated by commas to sweep (e.g. 4, 8, 16)",
    )
    cluster_bandwidth_gbps = forms.CharField(
        label="bandwidth (Gbit/s per worker)",
        initial=f"{_DEFAULTS.bandwidth_gbps:g}",
        help_text="one value, or several separated by commas to sweep (e.g. 1, 10, 25, 100)",
    )
    cluster_latency_us = forms.FloatField(
        label="latency (µs per message)",
        initial=_DEFAULTS.latency_us,
        help_text=f"real runs on the emulated network: above {testbed.NATIVE_LATENCY_US:g} (the "
        f"testbed's own) it is added to every one-way trip, up to {testbed.MAX_LATENCY_US:g}",
    )
    cluster_gpu = forms.ChoiceField(
        label="GPU", initial=_DEFAULTS.gpu, choices=[(d, d) for d in sorted(devices.DEVICES)]
    )
    cluster_compute_efficiency = forms.FloatField(
        label="compute efficiency",
        initial=_DEFAULTS.compute_efficiency,
        help_text="fraction of the GPU's peak fp32 rate reached (our assumption)",
    )
    cluster_compute_jitter_cv = forms.FloatField(
        label="compute jitter (CV)",
        initial=_DEFAULTS.compute_jitter_cv,
        help_text="seeded per-op noise; 0 = deterministic",
    )
    cluster_compute_scale = forms.FloatField(
        label="compute scale",
        required=False,
        initial=_DEFAULTS.compute_scale,
        help_text="every forward and backward takes this many times the device's time: a "
        "what-if for a slower (> 1) or faster (< 1) machine (1 = as profiled; on a named GPU "
        "the same as dividing the compute efficiency by it)",
    )
    cluster_overlap_slowdown = forms.FloatField(
        label="overlap slow-down",
        required=False,
        initial=_DEFAULTS.overlap_slowdown,
        help_text="compute ops that start while the network is busy take 1 + this times "
        "longer (0 = no interference)",
    )
    cluster_stragglers = forms.CharField(
        label="stragglers", required=False, help_text=STRAGGLER_HELP
    )
    cluster_reduce_scatter_cost = forms.FloatField(
        label="reduce-scatter cost",
        required=False,
        initial=_DEFAULTS.reduce_scatter_cost,
        help_text="DeAR's reduce-scatter as a fraction of an all-reduce of the same tensor: 0.5 "
        "on a ring (NCCL), about 1 with gloo (python -m runners calibrate measures it)",
    )
    cluster_all_gather_cost = forms.FloatField(
        label="all-gather cost",
        required=False,
        initial=_DEFAULTS.all_gather_cost,
        help_text="DeAR's all-gather as a fraction of an all-reduce: 0.5 on a ring",
    )
    cluster_cpu_collectives = forms.BooleanField(
        label="collectives on CPU (gloo)",
        required=False,
        initial=_DEFAULTS.cpu_collectives,
        help_text="Horovod's background loop then performs them itself: a cycle waits for the "
        "previous cycle's all-reduces (unticked: NCCL on GPU)",
    )
    cluster_busy_latency_us = forms.FloatField(
        label="latency while computing (µs)",
        required=False,
        help_text="per message of a collective while the ranks compute; empty = the latency "
        "above (python -m runners calibrate measures it on CPU testbeds)",
    )
    cluster_overlap_comm_slowdown = forms.FloatField(
        label="communication slow-down while computing",
        required=False,
        initial=_DEFAULTS.overlap_comm_slowdown,
        help_text="while the ranks compute, a collective moves its bytes 1 + this times slower "
        "(0 = none)",
    )
    cluster_negotiation = forms.BooleanField(
        label="negotiate dispatch decisions",
        required=False,
        initial=_DEFAULTS.negotiation,
        help_text="plans that reorder by priority agree on each decision with one small "
        "collective, as the lab's real engine does (unticked: decisions are free)",
    )
    cluster_link_burst_bytes = forms.IntegerField(
        label="NIC token bucket (bytes)",
        required=False,
        min_value=0,
        initial=_DEFAULTS.link_burst_bytes,
        help_text="after a NIC idles, up to this many bytes of a collective (or of a PS push "
        "or pull) pass at once, as the shaper's burst shapes the emulated testbed (0 = links "
        "always at the bandwidth)",
    )
    cluster_collective_cpu_us = forms.FloatField(
        label="CPU per collective (us)",
        required=False,
        min_value=0,
        initial=_DEFAULTS.collective_cpu_us,
        help_text="compute time each collective takes from the op it overlaps, as the "
        "communication threads do on a CPU testbed (0 = none, as on a GPU)",
    )
    cluster_negotiation_cpu_us = forms.FloatField(
        label="CPU per negotiation round (us)",
        required=False,
        min_value=0,
        help_text="compute time each negotiation round takes from the op it overlaps; empty = "
        "the CPU per collective above (python -m runners calibrate measures it on CPU testbeds)",
    )
    cluster_round_latency_us = forms.FloatField(
        label="latency of a negotiation round (µs)",
        required=False,
        min_value=0,
        help_text="per ring step of a negotiation round, the ranks busy or idle; empty = a "
        "collective's latency (Horovod's rounds pay one trip a step where its all-reduces pay "
        "two, with added latency)",
    )
    cluster_round_loop = forms.ChoiceField(
        label="fusion cycles' rounds start",
        required=False,
        choices=[(loop, _ROUND_LOOP_LABELS[loop]) for loop in run_spec.ROUND_LOOPS],
        initial=_DEFAULTS.round_loop,
        help_text="with negotiation, Horovod's cycles: free-running, a gradient ready during a "
        "round waits for the next round, every cycle time or round time, whichever is longer",
    )
    cluster_step_jitter_cv = forms.FloatField(
        label="per-step compute jitter (CV)",
        required=False,
        min_value=0,
        initial=_DEFAULTS.step_jitter_cv,
        help_text="each worker's whole step slower or faster by a seeded draw; a step waits for "
        "the slowest worker, so it grows with the workers (0 = none)",
    )
    cluster_background_slowdown = forms.FloatField(
        label="background compute slow-down",
        required=False,
        min_value=0,
        initial=_DEFAULTS.background_slowdown,
        help_text="a compute op that starts while the network is idle takes 1 + this times as "
        "long (integrated: while it is idle), as beside a framework's background loop on a CPU "
        "testbed (Horovod's negotiation every cycle; 0 = none)",
    )
    cluster_overlap_model = forms.ChoiceField(
        label="compute slow-downs apply",
        required=False,
        choices=[(model, _OVERLAP_LABELS[model]) for model in run_spec.OVERLAP_MODELS],
        initial=_DEFAULTS.overlap_model,
        help_text="integrated: an op pays a slow-down only for the part of it a collective "
        "(PS arena: a push or pull on its worker's links) overlaps (bounded however large the "
        "slow-down; python -m runners fidelity uses it)",
    )
    cluster_ps = forms.IntegerField(label="parameter servers", required=False, initial=_DEFAULTS.ps)
    cluster_servers = forms.IntegerField(
        label="server machines",
        required=False,
        initial=_DEFAULTS.servers,
        help_text="machines the keys may be spread over (PSLD scales out up to this)",
    )
    cluster_server_bandwidth_gbps = forms.FloatField(
        label="server bandwidth (Gbit/s)",
        required=False,
        help_text="per server NIC; empty = the workers' bandwidth",
    )
    cluster_server_agg_gbps = forms.FloatField(
        label="server aggregation rate (Gbit/s)",
        required=False,
        initial=_DEFAULTS.server_agg_gbps,
        help_text="how fast a server's CPU sums pushed gradients",
    )
    cluster_server_agg_fixed_us = forms.FloatField(
        label="CPU per aggregation (us)",
        required=False,
        min_value=0,
        initial=_DEFAULTS.server_agg_fixed_us,
        help_text="a server's fixed time for each aggregation besides its bytes (handling the "
        "message, the step, the copy for the pulls; 0 = the bytes alone)",
    )
    cluster_ps_stragglers = forms.CharField(
        label="PS stragglers", required=False, help_text=PS_STRAGGLER_HELP
    )
    cluster_jitter_groups = forms.IntegerField(
        label="noise groups",
        required=False,
        min_value=1,
        initial=_DEFAULTS.jitter_groups,
        help_text="workers' compute noise is independent per group (our modelling assumption); "
        "1 = all identical workers jitter together (fast), the number of workers = per-worker "
        "noise",
    )
    cluster_message_cpu_us = forms.FloatField(
        label="CPU per message (us)",
        required=False,
        min_value=0,
        initial=_DEFAULTS.message_cpu_us,
        help_text="compute time each push or pull takes from the worker's op it overlaps, as "
        "the PS transport's threads do on a CPU testbed (0 = none, as on a GPU)",
    )
    cluster_message_cpu_at = forms.ChoiceField(
        label="a push's CPU taken",
        required=False,
        choices=[(at, _MESSAGE_CPU_AT_LABELS[at]) for at in run_spec.MESSAGE_CPU_AT],
        initial=_DEFAULTS.message_cpu_at,
        help_text="when a push's CPU per message is taken from the worker's compute: as the "
        "push reaches the link, or as soon as the backward hands it over (a transport whose "
        "send returns once the bytes are in the socket; needs CPU per message)",
    )
    cluster_pull_rendezvous = forms.BooleanField(
        label="pulls meet their receiver",
        required=False,
        initial=_DEFAULTS.pull_rendezvous,
        help_text="a pull holds its server's sender and its worker's receiver together, one at "
        "a time on each, as the lab's real gloo transport (unticked: buffered sends, as "
        "ps-lite)",
    )
    cluster_push_rendezvous = forms.BooleanField(
        label="pushes meet their receiver",
        required=False,
        initial=_DEFAULTS.push_rendezvous,
        help_text="a push holds its worker's sender and its server's receiver together, one at "
        "a time on each, as the lab's real gloo transport (unticked: cut-through, the worker "
        "sends on while the server's NIC queues the push)",
    )
    cluster_push_buffered = forms.BooleanField(
        label="pushes handed over",
        required=False,
        initial=_DEFAULTS.push_buffered,
        help_text="with pushes meeting their receiver: a worker's sender is free once a push's "
        "bytes are handed to its NIC, which sends them first in, first out (a gloo send on "
        "TCP; unticked: the sender is held until they are through)",
    )
    cluster_host_cores = forms.IntegerField(
        label="host cores",
        required=False,
        min_value=0,
        initial=_DEFAULTS.host_cores,
        help_text="every worker and server on one host of this many cores, as the lab's real "
        "PS runs share a machine: each iteration takes at least the host's CPU work over them "
        "(0 = a machine each, no floor)",
    )
    cluster_host_message_cpu_us = forms.FloatField(
        label="host CPU per message (us)",
        required=False,
        min_value=0,
        initial=_DEFAULTS.host_message_cpu_us,
        help_text="the host's CPU time each push or pull takes, every process together, besides "
        "its bytes' (needs host cores)",
    )
    cluster_host_cpu_ns_per_byte = forms.FloatField(
        label="host CPU per byte (ns)",
        required=False,
        min_value=0,
        initial=_DEFAULTS.host_cpu_ns_per_byte,
        help_text="the host's CPU time each byte of a push or pull takes (needs host cores)",
    )
    cluster_host_cpu_model = forms.ChoiceField(
        label="host cores shared",
        required=False,
        choices=[(model, _HOST_CPU_LABELS[model]) for model in run_spec.HOST_CPU_MODELS],
        initial=_DEFAULTS.host_cpu_model,
        help_text="how the workers' compute and the messages' CPU share the host cores (needs "
        "host cores; shared: leave message CPU and the compute slow-down at 0, the sharing "
        "slows the compute)",
    )
    trace_generator = forms.ChoiceField(
        label="trace generator",
        initial=_TRACE.generator,
        choices=[(g, g) for g in cluster_spec.GENERATORS],
        help_text="seeded by each run's seed: Philly-like jobs (all-reduce or PS) or DL2-like "
        "PS jobs. The portal and the API take generated traces only; trace files (Philly, "
        "Helios, PAI, Gavel, Tiresias logs) are paths on the server and run from the command "
        "line (python -m runners run)",
    )
    trace_jobs = forms.IntegerField(label="jobs", initial=_TRACE.jobs)
    trace_jobs_per_hour = forms.CharField(
        label="jobs per hour",
        initial=_TRACE.jobs_per_hour,
        help_text="mean arrival rate, i.e. the offered load; one value, or several separated by "
        "commas to sweep the load (e.g. 5, 10, 20): every system runs at every load",
    )
    trace_ps_fraction = forms.FloatField(
        label="PS fraction",
        initial=_TRACE.ps_fraction,
        help_text="share of parameter-server jobs (philly; dl2 jobs are all PS jobs)",
    )
    trace_arrivals = forms.ChoiceField(
        label="arrivals",
        initial=_TRACE.arrivals,
        choices=[(a, a) for a in cluster_spec.ARRIVALS],
        help_text="poisson, or google: a diurnal, bursty Google-like process",
    )
    trace_duration_scale = forms.FloatField(
        label="duration scale",
        initial=_TRACE.duration_scale,
        help_text="multiplies every job's duration (below 1: shorter runs)",
    )
    real_network = forms.ChoiceField(
        required=False,
        label="network",
        initial=_REAL.network,
        choices=[(n, n) for n in run_spec.NETWORKS],
        help_text="shaped: every rank in its own network namespace, its NIC shaped to the "
        "bandwidth above (the lab's worker must run as root); loopback: no shaping; auto: "
        "shaped when possible, and each run says which it got",
    )
    real_dataset = forms.ChoiceField(
        required=False,
        label="dataset",
        initial=_REAL.dataset,
        choices=[(d, d) for d in run_spec.REAL_DATASETS],
        help_text="synthetic (timing only), shapes (generated images, the CNNs) or markov (a "
        "generated language, the token models): held-out loss and accuracy are reported",
    )
    real_lr = forms.FloatField(
        label="learning rate", required=False, initial=_REAL.lr, help_text="plain SGD"
    )
    real_momentum = forms.FloatField(label="momentum", required=False, initial=_REAL.momentum)
    real_implementation = forms.ChoiceField(
        required=False,
        label="implementation",
        initial=_REAL.implementation,
        choices=[(i, i) for i in run_spec.IMPLEMENTATIONS],
        help_text="default: each system's own (PyTorch DDP for ddp, the real Horovod for "
        "horovod, the lab's engine for the rest); lab: the lab's engine for every system",
    )
    real_gpus = forms.IntegerField(
        label="GPUs",
        required=False,
        initial=_REAL.gpus,
        min_value=0,
        max_value=64,
        help_text="GPUs on one host (0: CPU only); the run waits for a host that has them free",
    )
    real_gpu_model = forms.CharField(
        label="GPU model",
        required=False,
        initial=_REAL.gpu_model,
        max_length=64,
        help_text="only GPUs whose name contains this, e.g. A100 (empty: any)",
    )
    real_nodes = forms.IntegerField(
        label="hosts",
        required=False,
        initial=_REAL.nodes,
        min_value=1,
        max_value=64,
        help_text="hosts the run spans, one node each (all-reduce systems; the workers split "
        "evenly; needs that many registered hosts)",
    )
    real_comm_priority = forms.ChoiceField(
        required=False,
        label="communication threads",
        initial=_REAL.comm_priority,
        choices=[(p, p) for p in run_spec.COMM_PRIORITIES],
        help_text="realtime: ahead of the compute, as on a GPU machine whose CPU is free (the "
        "lab's worker must run as root); normal: compute and communication share the cores; "
        "auto: realtime when possible, and each run says which it got",
    )
    real_device = forms.ChoiceField(
        required=False,
        label="device",
        initial=_REAL.device,
        choices=[(d, d) for d in run_spec.DEVICES],
        help_text="cuda: a GPU per rank, over NCCL (ask for as many GPUs as ranks per host); "
        "cpu: gloo; auto: GPUs where every rank has one, and each run says which it got",
    )
    real_dispatch = forms.ChoiceField(
        required=False,
        label="engine dispatch",
        initial=_REAL.dispatch,
        choices=[(d, d) for d in run_spec.DISPATCHES],
        help_text="how the lab's engine issues its collectives: auto, from the gradient hooks "
        "where the plan sends them as they are ready with no credit limit (wfbp, DDP's "
        "buckets, fifo delayed all-reduce), else by its communication thread; thread: always "
        "by that thread. Each run says which it used",
    )
    real_ps_transport = forms.ChoiceField(
        required=False,
        label="PS transport",
        initial=_REAL.ps_transport,
        choices=[(t, t) for t in run_spec.PS_TRANSPORTS],
        help_text="parameter-server systems only: blocking, a receive posted as each message "
        "comes (every message waits a round trip of the network); pipelined, receives posted "
        "ahead for every peer (its simulator twin needs a calibration that measured it: "
        "calibrate --ps-only --ps-transport pipelined)",
    )
    real_ddp_timeline = forms.BooleanField(
        required=False,
        label="DDP's timeline",
        initial=_REAL.ddp_timeline,
        help_text="PyTorch's DDP runs: time its buckets' all-reduces through PyTorch's default "
        "communication hook, for a timeline and the communication time (off: DDP as PyTorch "
        "runs it, no hook; the other systems record theirs anyway)",
    )
    params = forms.JSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="parameters of the system under test, as JSON",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        entries = list(CatalogueEntry.objects.filter(active=True, arena__in=PORTAL_ARENAS))
        groups = [(a, [e for e in entries if e.arena == a]) for a in PORTAL_ARENAS]
        self.fields["system"].choices = [
            (ARENA_LABELS[arena], [(e.name, f"{e.name} ({e.role})") for e in group])
            for arena, group in groups
            if group
        ]
        self.fields["baselines"].choices = [
            (ARENA_LABELS[arena], [(e.name, e.name) for e in group])
            for arena, group in groups
            if group
        ]
        self.fields["workloads"].choices = [
            (w.name, w.name) for w in Workload.objects.filter(active=True)
        ]
        self.config: ExperimentConfig | None = None

    @property
    def trace_fields(self) -> list[forms.BoundField]:
        return [self[f"trace_{key}"] for key in TRACE_KEYS]

    @property
    def real_fields(self) -> list[tuple[forms.BoundField, str]]:
        """Each real field with the arenas it applies to (``data-arenas``)."""
        return [
            (self[f"real_{key}"], " ".join(run_spec.REAL_KEY_ARENAS.get(key, ("allreduce", "ps"))))
            for key in REAL_KEYS
        ]

    @property
    def cluster_arena_fields(self) -> list[forms.BoundField]:
        return [self[ARENA_PREFIX + key] for key in ARENA_CLUSTER_FIELDS]

    def clean_seeds(self) -> list[int] | None:
        text = self.cleaned_data.get("seeds", "").strip()
        if not text:
            return None
        try:
            seeds = [int(part) for part in text.replace(" ", "").split(",") if part]
        except ValueError:
            raise forms.ValidationError("seeds must be integers separated by commas") from None
        if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise forms.ValidationError("seeds must be distinct non-negative integers")
        return seeds

    def clean_cluster_workers(self) -> list[int]:
        return _numbers(self.cleaned_data.get("cluster_workers", ""), int)

    def clean_cluster_bandwidth_gbps(self) -> list[float]:
        return _numbers(self.cleaned_data.get("cluster_bandwidth_gbps", ""), float)

    def clean_trace_jobs_per_hour(self) -> list[float]:
        return _numbers(self.cleaned_data.get("trace_jobs_per_hour", ""), float)

    def clean_cluster_overlap_model(self) -> str | None:
        return self.cleaned_data.get("cluster_overlap_model") or None  # empty: the default

    def clean_cluster_round_loop(self) -> str | None:
        return self.cleaned_data.get("cluster_round_loop") or None  # empty: the default

    def clean_cluster_message_cpu_at(self) -> str | None:
        return self.cleaned_data.get("cluster_message_cpu_at") or None  # empty: the default

    def clean_cluster_host_cpu_model(self) -> str | None:
        return self.cleaned_data.get("cluster_host_cpu_model") or None  # empty: the default

    def clean_cluster_stragglers(self) -> list[dict[str, Any]]:
        return _stragglers(
            self.cleaned_data.get("cluster_stragglers", ""),
            STRAGGLER_NAMES["stragglers"],
            (int, float, float),
            required=2,
        )

    def clean_cluster_ps_stragglers(self) -> list[dict[str, Any]]:
        return _stragglers(
            self.cleaned_data.get("cluster_ps_stragglers", ""),
            STRAGGLER_NAMES["ps_stragglers"],
            (int, float, float),
        )

    def clean_params(self) -> dict[str, Any]:
        value = self.cleaned_data.get("params") or {}
        if not isinstance(value, dict):
            raise forms.ValidationError('must be a JSON object, e.g. {"credit_bytes": 4000000}')
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        arena = arena_of(data.get("system", ""))
        ignored = list(COMM_ONLY if arena == "cluster" else CLUSTER_ARENA_ONLY)
        if data.get("mode") != "real" or arena == "cluster":
            ignored += [f"real_{key}" for key in REAL_KEYS]
        else:  # another arena's real field (hidden, its value posted as it was left)
            one_arena = run_spec.REAL_KEY_ARENAS.items()
            ignored += [f"real_{k}" for k, on in one_arena if arena not in on]
        for name in ignored:
            self.errors.pop(name, None)  # another arena's or mode's field: not checked or used
            data.pop(name, None)
        if self.errors:
            return data
        system = registry.get(data["system"])
        baselines = [b for b in data.get("baselines", []) if b != system.name]
        wrong = [b for b in baselines if registry.get(b).arena != system.arena]
        if wrong:
            self.add_error(
                "baselines",
                f"{', '.join(wrong)}: not in the '{system.arena}' arena of {system.name}",
            )
            return data
        common = {
            "name": data["name"],
            "description": data.get("description", ""),
            "system": system.name,
            "baselines": tuple(baselines),
            "mode": data["mode"],
            "seeds": tuple(data.get("seeds") or range(data.get("repeats") or 1)),
            "params": data["params"],
        }
        if data["mode"] == "real" and arena != "cluster":
            real = {key: data.get(f"real_{key}") for key in REAL_KEYS}
            common["real"] = {
                k: v for k, v in real.items() if v not in (None, "") and getattr(_REAL, k) != v
            }
        if arena == "cluster":
            config = self._cluster_arena_config(data, common)
        else:
            config = self._comm_config(data, common)
        if config is None:
            return data
        specs = []
        for raw in config.raw_specs():
            try:
                spec = run_spec.validate(raw)
                if getattr(spec, "mode", "sim") == "real":
                    from runners.real import launch

                    launch.preflight(spec)  # this machine: root, ranks, memory
            except run_spec.SpecError as err:
                self.add_error(form_field(err.field, arena), f"{err}" + _for(raw, system.name))
                return data
            specs.append(spec)
        try:
            from lab import actions

            actions.check_submission(specs)  # GPUs that no host has
        except run_spec.SpecError as err:
            self.add_error(form_field(err.field, arena), str(err))
            return data
        self.config = config
        return data

    def _comm_config(self, data: dict[str, Any], common: dict[str, Any]) -> ExperimentConfig | None:
        """The communication arenas: entries x workloads x sweep points x seeds."""
        sweep = {k: data[f"cluster_{k}"] for k in COMM_SWEEP_KEYS if len(data[f"cluster_{k}"]) > 1}
        points = 1
        for values in sweep.values():
            points *= len(values)
        entries = 1 + len(common["baselines"])
        n_runs = entries * len(data["workloads"]) * points * len(common["seeds"])
        if not self._within_limit(n_runs, "seeds, workloads, baselines or swept values"):
            return None
        cluster = {}
        arena = registry.get(common["system"]).arena
        for key in CLUSTER_KEYS:
            if FIELD_ARENA.get(key, arena) != arena:
                continue  # a hidden part of the form (set before another system was chosen)
            value = data.get(f"cluster_{key}")
            if key in COMM_SWEEP_KEYS:
                value = value[0]
            if value is None:
                continue  # left empty: the spec's default
            cluster[key] = value
        return ExperimentConfig(
            **common,
            workloads=tuple(data["workloads"]),
            iterations=data["iterations"],
            batch_size=data.get("batch_size") or 0,
            cluster=cluster,
            sweep=sweep,
        )

    def _cluster_arena_config(
        self, data: dict[str, Any], common: dict[str, Any]
    ) -> ExperimentConfig | None:
        """The cluster arena: entries x loads x seeds on a generated trace. No workloads (the
        trace is the workload) and no iterations (jobs run to completion). Several values of
        jobs per hour sweep the load: ``trace`` holds the first, ``sweep`` all of them."""
        sweep = {k: data[f"trace_{k}"] for k in CLUSTER_SWEEP_KEYS if len(data[f"trace_{k}"]) > 1}
        points = 1
        for values in sweep.values():
            points *= len(values)
        n_runs = (1 + len(common["baselines"])) * points * len(common["seeds"])
        if not self._within_limit(n_runs, "seeds, baselines or loads"):
            return None
        trace = {key: data[f"trace_{key}"] for key in TRACE_KEYS}
        for key in CLUSTER_SWEEP_KEYS:
            trace[key] = trace[key][0]
        cluster = {key: data[ARENA_PREFIX + key] for key in ARENA_CLUSTER_FIELDS}
        return ExperimentConfig(
            **common, workloads=(), cluster={"trace": trace, **cluster}, sweep=sweep
        )

    def _within_limit(self, n_runs: int, fewer: str) -> bool:
        if n_runs <= MAX_RUNS:
            return True
        self.add_error(
            None,
            f"this experiment would create {n_runs} runs; the limit is {MAX_RUNS} (fewer {fewer})",
        )
        return False


def _numbers(text: str, kind: type) -> list[Any]:
    """``"1, 10, 25"`` -> ``[1.0, 10.0, 25.0]``: one value, or the values of a sweep."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    what = "whole numbers" if kind is int else "numbers"
    if not parts:
        raise forms.ValidationError(f"give one value, or several {what} separated by commas")
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise forms.ValidationError(
            f"must be {what} separated by commas, e.g. {'4, 8, 16' if kind is int else '1, 10'}"
        ) from None
    if len(set(values)) != len(values):
        raise forms.ValidationError("each value may appear only once")
    return values


def _stragglers(
    text: str, names: tuple[str, ...], kinds: tuple[type, ...], required: int | None = None
) -> list[dict[str, Any]]:
    """``"0:1.5, 3:2@10-20"`` -> straggler dicts (the spec checks the values); the fields
    after the first ``required`` may be left out."""
    required = len(names) if required is None else required
    example = ":".join(names[:required]) + "".join(f"[:{n}]" for n in names[required:])
    out = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        head, at, window = part.partition("@")
        fields = head.split(":")
        try:
            if not required <= len(fields) <= len(names):
                raise ValueError
            item: dict[str, Any] = {n: k(f) for n, k, f in zip(names, kinds, fields, strict=False)}
            if at:
                start, dash, until = window.partition("-")
                if not dash:
                    raise ValueError
                item["from_iteration"] = int(start) if start else 0
                if until:
                    item["until_iteration"] = int(until)
        except ValueError:
            raise forms.ValidationError(
                f"'{part}' is not {example}[@from-until] (e.g. {_EXAMPLES[names[0]]})"
            ) from None
        out.append(item)
    return out


_EXAMPLES = {"worker": "0:1.5, 0:1.5@10-20 or 1:1:0.5", "server": "1:0.5:2 or 1:0.5:2@10-"}
STRAGGLER_NAMES = {
    "stragglers": ("worker", "slowdown", "bandwidth_factor"),
    "ps_stragglers": ("server", "bandwidth_factor", "cpu_slowdown"),
}


def straggler_text(item: dict[str, Any], names: tuple[str, ...]) -> str:
    """A straggler as the form writes it: ``0:1.5`` or ``0:1.5@10-20`` (the inverse of
    ``_stragglers``)."""
    values = [item.get(n, 1.0) for n in names]
    while len(values) > 2 and values[-1] == 1.0 and names[0] == "worker":
        values.pop()  # a worker straggler without a NIC factor: worker:slowdown
    text = ":".join(str(v) for v in values)
    start, until = item.get("from_iteration"), item.get("until_iteration")
    if start or until is not None:
        text += f"@{start or 0}-{'' if until is None else until}"
    return text


def _for(raw: dict[str, Any], system: str) -> str:
    return "" if raw["system"] == system else f" (for baseline {raw['system']})"


def form_field(spec_field: str, arena: str | None = None) -> str | None:
    """The form field that holds a spec field of a system of ``arena``
    (``cluster.stragglers[0].worker`` -> ``cluster_stragglers``; in the cluster arena
    ``cluster.servers`` -> ``cluster_arena_servers`` and ``trace.jobs`` -> ``trace_jobs``);
    None when no field holds it (the error is shown above the form)."""
    head = spec_field.split("[")[0]
    section, _, key = head.partition(".")
    if section == "cluster" and key:
        name = (ARENA_PREFIX if arena == "cluster" else "cluster_") + key.split(".")[0]
    elif section == "trace" and key:
        name = f"trace_{key.split('.')[0]}"
    elif section == "params":
        name = "params"
    elif section == "real" and key:
        name = f"real_{key}"
    else:
        name = {
            "workload": "workloads",
            "system": "system",
            "mode": "mode",
            "iterations": "iterations",
            "batch_size": "batch_size",
            "seed": "seeds",
        }.get(head, "")
    return name if name in ExperimentForm.base_fields else None


def api_field(form_field_name: str) -> str:
    """Name of a form field in the JSON API (``cluster_workers`` -> ``cluster.workers``,
    ``cluster_arena_servers`` -> ``cluster.servers``, ``trace_jobs`` -> ``trace.jobs``)."""
    for prefix, section in (
        (ARENA_PREFIX, "cluster"),
        ("cluster_", "cluster"),
        ("trace_", "trace"),
        ("real_", "real"),
    ):
        if form_field_name.startswith(prefix):
            return f"{section}.{form_field_name.removeprefix(prefix)}"
    return "non_field_errors" if form_field_name == "__all__" else form_field_name
