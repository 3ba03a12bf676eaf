"""The one explicit table of systems and baselines the lab can run.

Each entry names its arena (the interface it implements), its role (system under test or
baseline), the modes it supports, its paper reference and its parameter schema with defaults.
Adding a baseline = one policy module + one line in ``ENTRIES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ARENAS = ("allreduce", "ps", "cluster")
ROLES = ("system", "baseline")
MODES = ("sim", "real")


@dataclass(frozen=True)
class Param:
    """One knob of a system, with its default. ``reconstructed`` marks a choice the paper leaves
    open (the harness labels such results)."""

    name: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    unit: str = ""
    reconstructed: bool = False
    choices: tuple[Any, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind.__name__,
            "default": self.default,
            "help": self.help,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "unit": self.unit,
            "reconstructed": self.reconstructed,
            "choices": list(self.choices),
        }


@dataclass(frozen=True)
class Entry:
    name: str
    arena: str
    role: str
    modes: tuple[str, ...]
    paper: str
    summary: str
    factory: str  # "module:function" building the policy from validated params
    params: tuple[Param, ...] = ()

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def build(self, params: dict[str, Any]) -> Any:
        """Instantiate the policy with ``params`` (already validated and completed)."""
        module_name, func_name = self.factory.split(":")
        factory: Callable[..., Any] = getattr(importlib.import_module(module_name), func_name)
        return factory(**params)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arena": self.arena,
            "role": self.role,
            "modes": list(self.modes),
            "paper": self.paper,
            "summary": self.summary,
            "params": [p.as_dict() for p in self.params],
        }


FP32_BYTES = 4
MIB = 1024 * 1024

_AR = "runners.policies.allreduce"
_PS = "runners.policies.ps"

# --- cluster arena ------------------------------------------------------------------------
_CL = "runners.cluster.policies"
CLUSTER_SCHEDULERS = ("fifo", "drf", "srtf", "tiresias")
CLUSTER_PLACEMENTS = ("bin-packing", "load-balance", "lif")


def _placement_param() -> Param:
    return Param(
        "placement",
        str,
        "bin-packing",
        "Placement rule the scheduler uses for the trace's workers and PSs.",
        choices=CLUSTER_PLACEMENTS,
    )


def _scheduler_param() -> Param:
    return Param(
        "scheduler",
        str,
        "fifo",
        "Scheduler deciding which job starts next (the placement rule decides where).",
        choices=CLUSTER_SCHEDULERS,
    )


CLUSTER_ENTRIES: tuple[Entry, ...] = (
    Entry(
        name="oasis",
        arena="cluster",
        role="system",
        modes=("sim",),
        paper="Bao, Peng, Wu, Li. Online job scheduling in distributed machine learning "
        "clusters (OASiS), IEEE INFOCOM 2018",
        summary="Online primal-dual admission and per-slot worker/PS allocation: exponential "
        "resource prices, a DP over slots with cheapest-server placement, admit iff the best "
        "payoff is positive. Slot model of a job and price constants from the trace are ours.",
        factory="runners.cluster.oasis:oasis",
        params=(
            Param(
                "slot_s",
                float,
                3600.0,
                "Length of a time slot (the paper: 1 hour or longer).",
                minimum=1.0,
                unit="s",
            ),
            Param(
                "horizon_slots",
                int,
                100,
                "Slots a job's schedule may span (the paper's T: 100-300).",
                minimum=1,
                maximum=10_000,
            ),
            Param(
                "max_scale",
                float,
                2.0,
                "Most workers a job may get, as a multiple of its trace request (stands for "
                "the paper's chunk count N_i, absent from traces).",
                minimum=1.0,
                maximum=64.0,
                reconstructed=True,
            ),
            Param(
                "price_ratio_scale",
                float,
                1.0,
                "Multiplies the estimated U/L ratios (the paper's Fig. 6 sensitivity study).",
                minimum=0.01,
                maximum=100.0,
            ),
            Param(
                "min_price_ratio",
                float,
                1e-6,
                "Floor of the lowest price L, as a fraction of the smallest U (ours: keeps "
                "prices positive when a utility falls to zero within the horizon).",
                minimum=1e-12,
                maximum=1.0,
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="fifo",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="First-in first-out with head-of-line blocking (YARN; Gavel's FIFO policy)",
        summary="Jobs start in arrival order; the head of the queue blocks the rest.",
        factory=f"{_CL}:fifo",
        params=(_placement_param(),),
    ),
    Entry(
        name="drf",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Ghodsi et al., Dominant resource fairness, USENIX NSDI 2011",
        summary="The next job comes from the user with the smallest dominant share (GPU, CPU, "
        "memory); jobs that do not fit are skipped (backfilling).",
        factory=f"{_CL}:drf",
        params=(_placement_param(),),
    ),
    Entry(
        name="srtf",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Shortest remaining time first (preemptive), as in DL2's and Blox's baselines",
        summary="Preemptive: the jobs with the least remaining time at their isolated speed run "
        "(an oracle that knows durations).",
        factory=f"{_CL}:srtf",
        params=(_placement_param(),),
    ),
    Entry(
        name="tiresias",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Gu et al., Tiresias: a GPU cluster manager for distributed deep learning, "
        "USENIX NSDI 2019",
        summary="Discretised 2D-LAS: queues by attained GPU-time, FIFO inside a queue, "
        "preemptive, optional starvation promotion.",
        factory=f"{_CL}:tiresias",
        params=(
            _placement_param(),
            Param(
                "threshold_1_gpu_s",
                float,
                3600.0,
                "First queue limit in attained GPU-seconds (the Tiresias simulator's).",
                minimum=0.0,
                unit="GPU-s",
            ),
            Param(
                "threshold_2_gpu_s",
                float,
                7200.0,
                "Second queue limit (0 = none).",
                minimum=0.0,
                unit="GPU-s",
            ),
            Param(
                "threshold_3_gpu_s",
                float,
                18000.0,
                "Third queue limit (0 = none).",
                minimum=0.0,
                unit="GPU-s",
            ),
            Param(
                "promote_knob",
                float,
                0.0,
                "Starvation promotion: a job waiting longer than this times its executed time "
                "returns to the first queue (0 = off).",
                minimum=0.0,
            ),
        ),
    ),
    Entry(
        name="harmony",
        arena="cluster",
        role="system",
        modes=("sim",),
        paper="Bao, Peng, Wu. Deep learning-based job placement in distributed machine learning "
        "clusters (Harmony), IEEE INFOCOM 2019",
        summary="Deep-RL placement: an actor-critic places a job's workers and PSs one at a time "
        "on masked servers, trained offline with job-aware exploration, experience replay and "
        "an auxiliary reward-prediction network. Per-job placement MDP and all constants ours.",
        factory="runners.cluster.harmony:harmony",
        params=(
            Param(
                "checkpoint",
                str,
                "",
                "A harmony-vN.pt from `python -m runners harmony train` (empty: a quick default "
                "policy trained on the spot, weak; the run's log says so).",
            ),
            _scheduler_param(),
        ),
    ),
    Entry(
        name="tetris",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Grandl et al., Multi-resource packing for cluster schedulers (Tetris), "
        "ACM SIGCOMM 2014",
        summary="Non-preemptive: start the pending job whose demand best aligns with the free "
        "resources (dot product), minus a shortest-remaining-work term.",
        factory="runners.cluster.baselines:tetris",
        params=(
            _placement_param(),
            Param(
                "srtf_weight",
                float,
                1.0,
                "Weight of the remaining-work term against alignment (0 = pure packing), "
                "scaled as in DL2's Tetris baseline.",
                minimum=0.0,
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="optimus",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Peng et al., Optimus: an efficient dynamic resource scheduler for deep learning "
        "clusters, ACM EuroSys 2018",
        summary="Elastic: at arrivals and completions, give workers/PSs one at a time to the job "
        "with the largest drop in remaining time per dominant share; the throughput model "
        "stands in for Optimus' fitted speed function.",
        factory="runners.cluster.baselines:optimus",
        params=(
            Param(
                "placement",
                str,
                "optimus",
                "Placement: 'optimus' (fewest servers, tasks spread evenly) or a placement rule.",
                choices=("optimus", *CLUSTER_PLACEMENTS),
            ),
            Param(
                "worker_factor",
                float,
                2.0,
                "Most workers, as a multiple of the trace's request.",
                minimum=1.0,
                reconstructed=True,
            ),
            Param("max_workers", int, 32, "Most workers of one job.", minimum=1),
            Param(
                "ps_factor",
                float,
                2.0,
                "Most PSs, as a multiple of the trace's request.",
                minimum=1.0,
                reconstructed=True,
            ),
            Param("max_ps", int, 32, "Most PSs of one job.", minimum=1),
            Param(
                "sticky",
                bool,
                True,
                "A running job keeps its servers when its counts change (fewest moves).",
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="dorm",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Sun et al., Dorm: dynamically partitioning cluster resources for distributed "
        "machine learning, 2017 (OASiS' baseline)",
        summary="Elastic max-min fair partition of dominant shares at arrivals and completions, "
        "at most max_adjust running jobs resized per round; a greedy stand-in for the "
        "paper's MILP.",
        factory="runners.cluster.baselines:dorm",
        params=(
            _placement_param(),
            Param(
                "max_factor",
                float,
                1.0,
                "Most workers, as a multiple of the trace's request.",
                minimum=1.0,
                reconstructed=True,
            ),
            Param(
                "max_adjust",
                int,
                2,
                "Running jobs resized per round at most (adjustment overhead).",
                minimum=0,
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="rrh",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Risk-reward heuristic (OASiS' baseline): admission by utility minus the delay "
        "cost imposed on admitted jobs, then utility density first",
        summary="Admit a job if its expected utility minus the utility it takes from admitted "
        "jobs exceeds a threshold; run admitted jobs by utility per GPU-second.",
        factory="runners.cluster.baselines:rrh",
        params=(
            _placement_param(),
            Param(
                "admit_threshold",
                float,
                0.0,
                "Admit iff utility minus delay cost exceeds this.",
                reconstructed=True,
            ),
            Param(
                "preemptive",
                bool,
                False,
                "Keep the densest jobs running (pause others).",
                reconstructed=True,
            ),
            Param("backfill", bool, True, "A job that fits may start past one that does not."),
        ),
    ),
    Entry(
        name="bin-packing",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Consolidated placement (Tiresias' and Gandiva's consolidation; Harmony's baseline)",
        summary="The whole job on the fullest server that holds it, else over the fewest, "
        "emptiest servers.",
        factory=f"{_CL}:bin_packing_policy",
        params=(_scheduler_param(),),
    ),
    Entry(
        name="load-balance",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Load balancing placement (Harmony's and Optimus' baseline)",
        summary="Every task on the server with the most free GPUs (PSs: the most free CPU).",
        factory=f"{_CL}:load_balance_policy",
        params=(_scheduler_param(),),
    ),
    Entry(
        name="lif",
        arena="cluster",
        role="baseline",
        modes=("sim",),
        paper="Least interference first (Harmony's baseline, after Paragon-style "
        "interference-aware placement)",
        summary="Every task on the feasible server where the job suffers the least modelled "
        "interference from the jobs already there.",
        factory=f"{_CL}:lif_policy",
        params=(_scheduler_param(),),
    ),
)

ENTRIES: tuple[Entry, ...] = (
    # --- all-reduce arena -----------------------------------------------------------------
    Entry(
        name="pace",
        arena="allreduce",
        role="system",
        modes=("sim", "real"),
        paper="Bao, Peng, Chen, Wu. Preemptive all-reduce scheduling for expediting distributed "
        "DNN training (PACE), IEEE INFOCOM 2020",
        summary="Preemptive priority schedule on the DAG (first-consumed tensor first, preemption "
        "at chunk boundaries) plus a fusion DP that uses the scheduler as its oracle. "
        "Reconstruction: the paper's exact formulation is not available.",
        factory=f"{_AR}:pace",
        params=(
            Param(
                "chunk_bytes",
                int,
                4 * MIB,
                "Preemption granularity: fused tensors are sent in chunks of this size, one in "
                "flight (our choice; the paper's is unknown).",
                minimum=1024,
                unit="bytes",
                reconstructed=True,
            ),
            Param(
                "fusion",
                str,
                "dp",
                "Tensor fusion: 'dp' (dynamic programme with the scheduler as oracle) or 'none'.",
                choices=("dp", "none"),
                reconstructed=True,
            ),
            Param(
                "fusion_window",
                int,
                8,
                "Largest number of consecutive tensors the DP may fuse into one group (bounds "
                "its O(m * window) oracle calls).",
                minimum=1,
                maximum=256,
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="delayed-allreduce",
        arena="allreduce",
        role="system",
        modes=("sim", "real"),
        paper="Along Jin, Towards fast distributed training with generic and efficient "
        "communication scheduling, HKU PhD thesis 2023, chapter on delayed all-reduce "
        "(papers not identified; research/comm.md section 4)",
        summary="All-reduce of iteration t overlaps with computation of iteration t+1; forward "
        "uses parameters at most max_delay steps old (approximation rule is a parameter). "
        "Reconstruction: the thesis' exact rule is unknown.",
        factory=f"{_AR}:delayed_allreduce",
        params=(
            Param(
                "max_delay",
                int,
                1,
                "Iterations the parameters used by a forward may lag (1 = the thesis' "
                "description).",
                minimum=0,
                maximum=8,
            ),
            Param(
                "approximation",
                str,
                "stale",
                "Parameter approximation while the all-reduce is in flight: stale (Pipe-SGD), "
                "local-correct, extrapolate. Changes numerics only (real mode), not timing.",
                choices=("stale", "local-correct", "extrapolate"),
                reconstructed=True,
            ),
            Param(
                "fusion_bytes",
                int,
                4 * MIB,
                "Gradients are fused in ready order up to this many bytes (0 = per layer).",
                minimum=0,
                unit="bytes",
                reconstructed=True,
            ),
            Param(
                "order",
                str,
                "priority",
                "Channel order: 'priority' (the layer the next forward needs first) or 'fifo'.",
                choices=("priority", "fifo"),
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="wfbp",
        arena="allreduce",
        role="baseline",
        modes=("sim", "real"),
        paper="Zhang et al., Poseidon: wait-free backpropagation, USENIX ATC 2017",
        summary="One all-reduce per layer in gradient-ready (FIFO) order; the next forward waits "
        "for every gradient (global barrier).",
        factory=f"{_AR}:wfbp",
    ),
    Entry(
        name="ddp",
        arena="allreduce",
        role="baseline",
        modes=("sim", "real"),
        paper="Li et al., PyTorch Distributed: experiences on accelerating data parallel "
        "training, VLDB 2020 (torch 2.13 defaults)",
        summary="Gradient buckets in ready order (25 MiB, first bucket 1 MiB), all-reduced in "
        "order; global barrier before the optimizer step; the model's buffers broadcast "
        "before each forward.",
        factory=f"{_AR}:ddp",
        params=(
            Param(
                "bucket_bytes",
                int,
                25 * MIB,
                "bucket_cap_mb default of torch 2.13 (25 MiB).",
                minimum=1,
                unit="bytes",
            ),
            Param(
                "first_bucket_bytes",
                int,
                1 * MIB,
                "torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (1 MiB).",
                minimum=1,
                unit="bytes",
            ),
            Param(
                "broadcast_buffers",
                bool,
                True,
                "DDP's broadcast_buffers default: each forward first broadcasts the model's "
                "buffers (batch norm's statistics) from rank 0, one blocking broadcast per dtype.",
            ),
        ),
    ),
    Entry(
        name="horovod",
        arena="allreduce",
        role="baseline",
        modes=("sim", "real"),
        paper="Sergeev and Del Balso, Horovod: fast and easy distributed deep learning in "
        "TensorFlow, arXiv 1802.05799 (tensor fusion, docs/tensor-fusion.rst)",
        summary="Every cycle, the gradients that became ready are fused in ready order up to the "
        "fusion threshold and all-reduced; global barrier.",
        factory=f"{_AR}:horovod",
        params=(
            Param(
                "fusion_threshold_bytes",
                int,
                128 * MIB,
                "HOROVOD_FUSION_THRESHOLD; default 128 MiB since v0.21.0 (PR #2468; 64 MiB "
                "before, and the tensor-fusion doc page still says 64 MB). 0 disables fusion.",
                minimum=0,
                unit="bytes",
            ),
            Param(
                "cycle_time_ms",
                float,
                1.0,
                "HOROVOD_CYCLE_TIME; default 1 ms since v0.21.0 (5 ms before).",
                minimum=0.0,
                unit="ms",
            ),
        ),
    ),
    Entry(
        name="bytescheduler",
        arena="allreduce",
        role="baseline",
        modes=("sim", "real"),
        paper="Peng et al., A generic communication scheduler for distributed DNN training "
        "acceleration (ByteScheduler), SOSP 2019",
        summary="Tensors split into partitions, sent in priority order (the layer the next "
        "forward needs first), at most `credit` bytes handed to the network at once; forward of "
        "layer i waits only for layer i (cross-barrier); Bayesian auto-tuning of the credit.",
        factory=f"{_AR}:bytescheduler",
        params=(
            Param(
                "partition_bytes",
                int,
                8_000_000 * FP32_BYTES,
                "Tensors larger than this are split. Default = 8M fp32 parameters, the value "
                "ByteScheduler's docs recommend for all-reduce.",
                minimum=1024,
                unit="bytes",
            ),
            Param(
                "credit_bytes",
                int,
                16_000_000 * FP32_BYTES,
                "Most bytes handed to the network and not yet acknowledged (the starting point "
                "when tuning). Default = 16M fp32 parameters, the docs' all-reduce value.",
                minimum=1024,
                unit="bytes",
            ),
            Param(
                "autotune",
                str,
                "credit",
                "Bayesian optimisation against the simulator: 'credit' (upstream default: credit "
                "tuning on, partition off), 'credit+partition', or 'off'.",
                choices=("credit", "credit+partition", "off"),
            ),
        ),
    ),
    Entry(
        name="dear",
        arena="allreduce",
        role="baseline",
        modes=("sim", "real"),
        paper="Zhang, Shi, Chu, Wang, Li, Liu. DeAR: accelerating distributed deep learning with "
        "fine-grained all-reduce pipelining, ICDCS 2023",
        summary="All-reduce split into reduce-scatter (during backward) and all-gather (before "
        "the next forward needs the layer, in forward order); exact synchronous semantics.",
        factory=f"{_AR}:dear",
        params=(
            Param(
                "fusion_bytes",
                int,
                25 * MIB,
                "Layers fused in ready order up to this size (0 = per layer). DeAR's own fusion "
                "search is not reproduced; our choice.",
                minimum=0,
                unit="bytes",
                reconstructed=True,
            ),
        ),
    ),
    # --- parameter-server arena -----------------------------------------------------------
    Entry(
        name="tictac-tic",
        arena="ps",
        role="system",
        modes=("sim", "real"),
        paper="Hashemi, Abdu Jyothi, Campbell. TicTac: accelerating distributed deep learning "
        "with communication scheduling, MLSys 2019",
        summary="Parameter transfers ordered by TIC (timing-independent, from the DAG alone); "
        "the same order on every worker.",
        factory=f"{_PS}:tictac_tic",
    ),
    Entry(
        name="tictac-tac",
        arena="ps",
        role="system",
        modes=("sim", "real"),
        paper="Hashemi, Abdu Jyothi, Campbell. TicTac: accelerating distributed deep learning "
        "with communication scheduling, MLSys 2019",
        summary="Parameter transfers ordered by TAC (timing-aware: profiled compute and "
        "transfer times, Johnson-rule comparator).",
        factory=f"{_PS}:tictac_tac",
    ),
    Entry(
        name="eager-ps",
        arena="ps",
        role="system",
        modes=("sim", "real"),
        paper="Along Jin, HKU PhD thesis 2023, chapter on the eager parameter server (papers not "
        "identified; research/comm.md section 4.2)",
        summary="Push and pull decoupled: a worker pulls whatever parameters the server holds "
        "instead of waiting for the round; staleness-aware learning rate. Timing side only "
        "(convergence in real mode). Reconstruction.",
        factory=f"{_PS}:eager_ps",
        params=(
            Param(
                "server_mode",
                str,
                "async",
                "'async': the server applies every push at once; 'sync-round': it aggregates "
                "rounds, but pulls are served with the newest complete round.",
                choices=("async", "sync-round"),
                reconstructed=True,
            ),
            Param(
                "lr_rule",
                str,
                "inverse",
                "Staleness-aware learning rate: 'inverse' eta/max(1,tau), 'linear' "
                "eta*(1-tau/(tau_max+1)), 'none'. Reported as mean_lr_scale.",
                choices=("inverse", "linear", "none"),
                reconstructed=True,
            ),
            Param(
                "partition_bytes",
                int,
                4_096_000,
                "Tensors are partitioned like BytePS.",
                minimum=1024,
                unit="bytes",
            ),
        ),
    ),
    Entry(
        name="psld",
        arena="ps",
        role="system",
        modes=("sim", "real"),
        paper="Chen, Peng, Bao, Wu, Zhu, Guo. Elastic parameter server load distribution in deep "
        "learning clusters (PSLD), ACM SoCC 2020",
        summary="Exploitation-exploration re-distribution of parameters among PSs (best-fit "
        "moves from the slowest server, random exploration, revert if worse) and PS scale-out/in "
        "with migration cost, starting from the MXNet default assignment. Reconstruction.",
        factory=f"{_PS}:psld",
        params=(
            Param(
                "window",
                int,
                3,
                "Iterations measured per decision.",
                minimum=1,
                maximum=1000,
                reconstructed=True,
            ),
            Param(
                "epsilon",
                float,
                0.1,
                "Probability of an exploration move instead of the best-fit exploit move.",
                minimum=0.0,
                maximum=1.0,
                reconstructed=True,
            ),
            Param(
                "scale_out_ratio",
                float,
                1.5,
                "Scale out when the slowest PS is this many times the mean and no move helps.",
                minimum=1.0,
                reconstructed=True,
            ),
            Param(
                "scale_in_utilisation",
                float,
                0.2,
                "Scale in when every PS is busy less than this fraction of the iteration.",
                minimum=0.0,
                maximum=1.0,
                reconstructed=True,
            ),
            Param(
                "max_servers",
                int,
                0,
                "Most PSs it may scale out to (0 = cluster.servers).",
                minimum=0,
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="ps-default",
        arena="ps",
        role="baseline",
        modes=("sim", "real"),
        paper="Li et al., Scaling distributed machine learning with the parameter server, OSDI "
        "2014; MXNet KVStore (kvstore_dist.h)",
        summary="MXNet key hashing ((key*9973) mod servers), arrays of 1M+ elements sharded over "
        "all servers, transfers in a random order per worker and iteration.",
        factory=f"{_PS}:ps_default",
        params=(
            Param(
                "bigarray_bound_elems",
                int,
                1_000_000,
                "MXNET_KVSTORE_BIGARRAY_BOUND (elements).",
                minimum=1,
            ),
            Param(
                "order_groups",
                int,
                4,
                "Workers are split into this many groups that draw independent random orders "
                "(each group is simulated once, with its own compute jitter; "
                "cluster.jitter_groups splits them further without adding order draws).",
                minimum=1,
                maximum=64,
                reconstructed=True,
            ),
        ),
    ),
    Entry(
        name="byteps",
        arena="ps",
        role="baseline",
        modes=("sim", "real"),
        paper="Jiang et al., A unified architecture for accelerating distributed DNN training in "
        "heterogeneous GPU/CPU clusters (BytePS), OSDI 2020",
        summary="Tensors partitioned into 4,096,000-byte pieces, each hashed to a server; "
        "ready order, no server-side scheduling; global barrier unless cross_barrier.",
        factory=f"{_PS}:byteps",
        params=(
            Param(
                "partition_bytes",
                int,
                4_096_000,
                "BYTEPS_PARTITION_BYTES default.",
                minimum=1024,
                unit="bytes",
            ),
            Param(
                "cross_barrier",
                bool,
                False,
                "BytePS' cross-barrier PyTorch wrapper (off by default).",
            ),
        ),
    ),
    Entry(
        name="p3",
        arena="ps",
        role="baseline",
        modes=("sim", "real"),
        paper="Jayarajan, Wei, Gibson, Fedorova, Pekhimenko. Priority-based parameter "
        "propagation for distributed DNN training (P3), SysML 2019",
        summary="Parameters sliced (50,000 per slice), pushed and pulled in priority order (the "
        "layer the next forward needs first), priority queues on the servers too.",
        factory=f"{_PS}:p3",
        params=(
            Param(
                "slice_params",
                int,
                50_000,
                "Parameters per slice (P3's default).",
                minimum=1,
            ),
        ),
    ),
    *CLUSTER_ENTRIES,
)

_BY_NAME = {e.name: e for e in ENTRIES}


class UnknownEntry(KeyError):
    pass


def get(name: str) -> Entry:
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(sorted(_BY_NAME))
        raise UnknownEntry(f"unknown system {name!r} (known: {known})") from None


def entries(arena: str | None = None) -> list[Entry]:
    return [e for e in ENTRIES if arena is None or e.arena == arena]


def baselines(arena: str) -> list[Entry]:
    return [e for e in entries(arena) if e.role == "baseline"]
