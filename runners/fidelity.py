"""Calibrate the simulator against this machine's real runs, and measure how well it predicts
them (``python -m runners calibrate`` / ``python -m runners fidelity``).

**calibrate** measures, on the machine and testbed that real runs use:

- per-layer compute of each debug model: ``python -m workloads profile NAME --measure`` run in
  ``workers`` processes at once, each with the real runs' torch thread count (real ranks share
  the machine's cores and memory bandwidth the same way), merged per layer by the median;
  written as the measured profile ``<model>@<label>`` (``cluster.gpu: measured:<label>``);
- the network's alpha-beta parameters: gloo all-reduce times over sizes 4 KiB..4 MiB between
  ``workers`` ranks, on loopback and on the emulated testbed at each nominal bandwidth, fitted
  to the simulator's ring all-reduce (``runners.real.probe.fit_alpha_beta``);
- per model and network, how much compute slows down while the rank's network is busy (the
  ranks' communication threads and the kernel's shaping share the cores with training): the
  simulator's ``cluster.overlap_slowdown``; and the other way round, back-to-back small
  all-reduces' time while the rank computes and while it idles (``latency_busy_us``,
  ``latency_idle_us``) and large ones' slow-down while it computes (``comm_slowdown``;
  ``runners.real.probe.overlap``; ``calibrate --overlap-only`` measures these again);
- DeAR's split collectives: a reduce-scatter and an all-gather timed against the all-reduce of
  the same tensor (``runners.real.probe.split``; the simulator's ``cluster.reduce_scatter_cost``
  / ``all_gather_cost``: gloo's reduce-scatter is a whole all-reduce, not the ring's half);
- the parameter-server arena (``runners.real.probe.ps_overlap``, on the real PS transport with
  ``cluster.ps`` server processes beside the workers): per model, the compute slow-down while
  the workers push and pull, the time a small message holds a link in a stream of pushes and
  answers while they compute and while they idle (the PS simulator's ``overlap_slowdown`` and
  ``latency_us``, busy or idle), and a server's aggregation of a round after its last push,
  handled as the real server handles it, after two push sizes (a line through them: the
  simulator's ``server_agg_fixed_us`` and ``server_agg_gbps``); and
  per network the compute time one message takes from a backward it overlaps
  (``runners.real.probe.ps_message_cpu``, the simulator's ``message_cpu_us``), under ``ps``
  of each network;
- the real Horovod's own CPU cost (``runners.real.probe.horovod_cpu``, where Horovod is
  installed; ``calibrate --horovod-only`` measures it again): the compute time one of its
  cycles with a collective takes from a backward it overlaps, and per model how much slower
  a step is while Horovod runs idle (its background thread negotiates every cycle), under
  ``horovod`` of each network: the ``horovod`` twin's ``negotiation_cpu_us`` (a cycle's) and
  ``background_slowdown`` (its twins of runs without added latency; scored apart with it);
  a Horovod that fails here is left out with a
  warning, the rest of the calibration kept;

all written to ``workloads/profiles/testbeds/<label>.json``.

**fidelity** runs matched configurations (systems x models x bandwidths): each for real on the
testbed, and in the simulator with the calibrated profile (``measured:<label>``, no compute
jitter) and the fitted bandwidth, latency, overlap slow-down and split collectives' costs of
that network (the slow-down integrated over each op's overlap with the collectives, for a
PS system with the transfers on its worker's links, ``cluster.overlap_model: integrated``;
for a PS system: the PS arena's latency, slow-down, aggregation rate and message CPU, and
pulls that hold a server's sender and a worker's receiver together, as the real transport's
do), the ranks' measured step noise, on a
shaped network the shaper's token bucket,
the plan the real run executed, and the real engine's negotiation of reordering plans. It
reports per configuration both iteration times and the simulator's absolute percentage error, and
their mean (MAPE) per system and overall. Nothing in the simulator is fitted to the training runs
themselves: only the calibration measurements above feed it. Before the first real run,
between rounds and after the last it times each model's step again as calibrate did and
reports how far the machine's compute has moved from the calibration's (``compute_drift``).
The twins keep the calibration's compute, so a stale calibration is reported, not corrected.
The report also scores the same real runs with twins whose compute is scaled by what these
checks measured (``cluster.compute_scale``: the geometric mean of a model's checks over the
calibration's step; ``mape_with``'s ``compute_checked``). That is the simulator given the
machine's speed during the set, measured apart from the runs it scores. A set with PS systems
probes the PS transport's CPU per message at the same stages, the same way
(``runners.fidelity_transport``: ``transport_check``, ``mape_with``'s ``transport_checked``).
A set with all-reduce systems probes a collective's CPU before its real runs, against the
calibration's (``runners.fidelity_interference``: ``interference_check``), and the report says
when the interference measurements were made (``interference_dates``), warning where either
says they are stale; nothing is scored with them.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

import workloads

from . import fidelity_interference, fidelity_transport, registry, resample
from .fidelity_journal import Journal, fingerprint, kept_as, profiles_fingerprint
from .fidelity_transport import network_key, network_name
from .manifest import usable_cpus
from .real.others import FLAG_CORES
from .spec import (
    PS_TRANSPORTS,
    SLOWDOWN_MAX,
    SPLIT_COST_MAX,
    CommCluster,
    RunSpec,
    SpecError,
    validate,
)

ROOT = Path(__file__).resolve().parent.parent
TESTBEDS_DIR = ROOT / "workloads" / "profiles" / "testbeds"
DEFAULT_LABEL = "testbed"
DEFAULT_MODELS = ("vgg16-debug", "resnet50-debug")
DEFAULT_BANDWIDTHS = (0.25, 1.0)
# Systems whose real runs use their framework's own implementation (PyTorch DDP's reducer,
# Horovod's background thread), not the lab's engine: the engine's measured CPU cost per
# collective (``collective_cpu_us``) and per negotiation round (``negotiation_cpu_us``) is not
# theirs. Horovod's own per cycle is measured where the calibration has it (``horovod`` of a
# network: ``calibrate --horovod-only``); DDP's is not (0).
OWN_FRAMEWORKS = ("ddp", "horovod")
# The twins of runs with added latency that take the probe's lone all-reduce times (DDP's:
# adopted 2026-12-07), and the systems ``lone_twin`` scores with them otherwise (a variant)
LONE_SYSTEMS = ("ddp",)
LONE_VARIANT_SYSTEMS = ("ddp", "horovod")
# The twins of runs with added latency whose all-reduces pay two trips a ring step and whose
# negotiation rounds pay one (``cluster.round_latency_us``; Horovod's: adopted 2026-12-07)
TRIPS_SYSTEMS = ("horovod",)
# The twins' ``cluster.overlap_model``: the calibrated compute slow-down as a rate while a
# collective (PS arena: a transfer on the worker's links) overlaps an op
# (``runners.sim.engine``), not in full for every op that starts during one. Chosen for its
# bound, not its score: on the shaped sets recorded on the second machine the two models are
# within their noise, on the unshaped network ``start`` is several times off
# (``docs/fidelity-history.md``, 2026-11-24). The PS twins have it since 2026-11-29: the
# probe's slow-down is measured beside pushes that never pause as well (on PS sets 15 and 17
# it scored 9.0 and 8.4 % against ``start``'s 11.5 and 11.6, moving only the rows at 1
# Gbit/s, where ``start`` charged 3.35 times an op's length). ``fidelity`` scores ``start``
# as ``mape_without``'s ``overlap_model``.
TWIN_OVERLAP_MODEL = "integrated"
# How a PS twin's processes share their host's cores (``matched_specs``' ``host_cpu``):
# ``shared`` (the default since 2026-11-29): op by op, the communication threads' messages
# first where they run at realtime priority (``twin_host_cpu_model``; ``cluster.
# host_cpu_model``), in place of the calibrated slow-down and message CPU; ``floor``: the
# work-conserving floor over the host's cores, with them (the model before). Adopted by the
# rule kept for the PS twins (a lower MAPE and ``run_checked`` on every set at hand: PS sets
# 15 and 17-20, 5.4-10.9 % against the floor's 6.8-14.1) and because the real runs do share
# their cores so: a worker's training thread was runnable but waiting for a core for as long
# as it ran while it computed, beside the realtime transport threads
# (``docs/fidelity-history.md``, 2026-11-29). ``fidelity`` scores the floor as
# ``mape_with``'s ``floor``.
HOST_CPU_TWINS = ("shared", "floor")
DEFAULT_SYSTEMS = ("wfbp", "ddp", "horovod", "bytescheduler", "pace", "dear", "delayed-allreduce")
MAPE_TARGET_PCT = 10.0
MAPE_MIN_CONFIGS = 12  # the target is over at least this many configurations
# The MAPE's confidence interval over the real runs' noise (``mape_interval``): the method of
# ``lab.reports.stats`` (percentile bootstrap, 10,000 resamples, seed 0, 95 %).
MAPE_CI = 0.95
MAPE_RESAMPLES = 10_000
MAPE_CI_SEED = 0
# Real runs per configuration (their median is scored): on a shared machine one run can be
# far off its configuration's usual time (ddp, resnet50-debug, 0.25 Gbit/s: 19-48 ms), and
# the median of 3 outvotes one such run where the mean of 2 takes half of it.
DEFAULT_REPEATS = 3
PROFILE_REPEATS = 50  # calibrate: timed steps per layer profile
PS_CPU_ROUNDS = 5  # the host's CPU per message: 3 probes' medians moved 2x between calibrations
PS_CPU_ROUNDS_MAX = 50  # calibrate --ps-cpu-probes' bound: two launches a probe, per network
SPLIT_COSTS = ("reduce_scatter_cost", "all_gather_cost")


class CalibrationMissing(ValueError):
    """The testbed file or a bandwidth in it is missing: run calibrate first."""


class CalibrationError(RuntimeError):
    """A network measurement could not be fitted even after measuring again: the testbed file
    is not written (the compute profiles already measured are kept)."""


def _today() -> str:
    """The date a calibration (or a part of it) is stamped with, UTC."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")


CALIBRATION_CHANGED_SHORT = "measured again since these runs were made"
CALIBRATION_CHANGED = (
    "the calibration {label} has been measured again since the journal's runs were made: "
    "their twins are simulated from it as it is now (to score them against the one they were "
    "made with, check that version out of git first)"
)


def testbed_path(label: str) -> Path:
    return TESTBEDS_DIR / f"{label}.json"


# -- calibrate ---------------------------------------------------------------------------------


def calibrate(
    label: str = DEFAULT_LABEL,
    models: tuple[str, ...] = DEFAULT_MODELS,
    bandwidths: tuple[float, ...] = DEFAULT_BANDWIDTHS,
    workers: int = 2,
    threads: int = 1,
    repeats: int = PROFILE_REPEATS,
    progress: Callable[[str], None] | None = None,
    comm_priority: str = "auto",
    ps_cpu_rounds: int = PS_CPU_ROUNDS,
    probe_rounds: int | None = None,
) -> dict[str, Any]:
    """Measure compute and network on this machine; write the profiles and the testbed file.
    ``comm_priority``: the communication threads' in the network probes
    (``runners.real.priority``; resolved here, recorded, and given to the real runs that
    ``fidelity`` matches with the calibration). ``ps_cpu_rounds``: the PS arena's message
    CPU probes per network (``_probe_ps``; ``calibrate --ps-cpu-probes``). ``probe_rounds``:
    the interference probes per model and network, of both arenas (``calibrate
    --probe-rounds``; default ``OVERLAP_ROUNDS`` and ``PS_ROUNDS``): fewer are quicker and
    noisier; the count is kept (``probe_rounds``) and said in the method."""
    from .real import priority
    from .real import testbed as tb

    say = progress or (lambda message: None)
    try:
        prio, note = priority.resolve(comm_priority)
    except PermissionError as err:
        raise CalibrationError(f"--comm-priority realtime is not permitted here ({err})") from None
    say(f"network probes: {note or f'communication threads at {prio} priority'}")
    from .real import hvd

    horovod = hvd.available() is not None
    if not horovod:
        say("Horovod: not installed here (`make horovod`): its own CPU cost is not measured")
    overlap_rounds, ps_rounds = probe_rounds or OVERLAP_ROUNDS, probe_rounds or PS_ROUNDS
    written = _measure_models(models, label, workers, threads, repeats, say)
    network = []
    points: list[float | None] = [None]
    if tb.can_shape() is None:
        points += list(bandwidths)
    else:
        say(f"network: loopback only ({tb.can_shape()})")
    for nominal in points:
        say(f"network: {_where(nominal)}")
        rows, alpha, bandwidth, remeasured = _probe_network(workers, nominal, threads, say, prio)
        split_rows, rs_cost, ag_cost = _probe_split(workers, nominal, threads, say, prio)
        overlap = _probe_overlap(models, workers, nominal, threads, say, prio, overlap_rounds)
        ps_entry = _probe_ps(
            models, workers, nominal, threads, say, prio, rounds=ps_rounds, cpu_rounds=ps_cpu_rounds
        )
        own = {}
        if horovod:
            try:
                own["horovod"] = _probe_horovod(models, workers, nominal, threads, say, prio)
                check_slowdowns([{"nominal_gbps": nominal, **own}], say, kinds=("horovod",),
                                kept="Horovod's entry left out")  # fmt: skip
            except RuntimeError as err:  # optional: the rest of the calibration stands
                own.clear()
                say(f"warning: Horovod's own CPU cost not measured ({err}); measure it later "
                    f"with calibrate --label {label} --horovod-only")  # fmt: skip
        network.append(
            {
                "nominal_gbps": nominal,
                **_fit_entry(rows, alpha, bandwidth),
                **overlap,
                **_split_entry(split_rows, rs_cost, ag_cost),
                "ps": ps_entry,
                **own,
                "remeasured": remeasured,
            }
        )
    doc = {
        "label": label,
        "workers": workers,
        "threads": threads,
        "comm_priority": prio,
        "profiles": {model: f"{model}@{label}" for model in models},
        "network": network,
        "probe_rounds": {"overlap": overlap_rounds, "ps": ps_rounds},
        "method": (
            "compute: measured profiles of every model, taken in `workers` processes at once "
            "(their timed steps started together; median per layer over them), torch threads "
            "as in real runs; network: median of "
            "timed gloo all-reduces per size between `workers` ranks (the slowest rank's), "
            "bandwidth from the sizes >= 1 MiB, latency from the smaller ones "
            "(runners.real.probe.fit_alpha_beta); "
            + _with_rounds(OVERLAP_METHOD, OVERLAP_ROUNDS, overlap_rounds)
            + "; "
            + SPLIT_METHOD
            + "; "
            + _with_rounds(PS_METHOD, PS_ROUNDS, ps_rounds)
            + "; "
            + (HOROVOD_METHOD + "; " if any("horovod" in p for p in network) else "")
            + PRIORITY_METHOD
        ),
        "host": {
            "cpus": os.cpu_count(),
            "usable_cpus": usable_cpus(),  # what the ranks could use (cpuset, quota)
            "python": platform.python_version(),
        },
        "date": _today(),
    }
    path = testbed_path(label)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_slowdowns(network, say, kinds=_NETWORK_SLOWDOWNS, kept="the testbed file is "
                    "unchanged; the compute profiles were written")  # fmt: skip
    _rewrite(doc, label)
    return {"testbed": str(path), "profiles": written, "network": network}


PROBE_ROUNDS_MAX = 20  # calibrate --probe-rounds' bound


def _rounds_of(label: str, arena: str, default: int) -> int:
    """The interference probes calibration ``label`` took in ``arena`` (``overlap`` or
    ``ps``; ``calibrate --probe-rounds``), which its method says: ``default`` for those from
    before the count was kept. ``CalibrationMissing`` where there is no such calibration."""
    return int(load_testbed(label).get("probe_rounds", {}).get(arena, default))


def _with_rounds(method: str, default: int, rounds: int) -> str:
    """``method``, whose probes it counts as ``default``, with ``rounds`` of them instead."""
    said = f"the median of {default} probes"
    assert method.count(said) == 1, said
    return method.replace(said, f"the median of {rounds} probe{'s' if rounds != 1 else ''}")


SLOWDOWN_WARN = 3.0  # a measured slow-down above it (4x slower) is told as a busy machine's

# kind: (where in a network's entry, the simulator's field it becomes, what is slowed down)
_SLOWDOWNS = {
    "overlap_slowdown": (
        ("overlap_slowdown",),
        "overlap_slowdown",
        "compute while all-reduces run",
    ),
    "comm_slowdown": (
        ("comm_slowdown",),
        "overlap_comm_slowdown",
        "1 MiB all-reduces while the ranks compute",
    ),
    "ps": (("ps", "overlap_slowdown"), "overlap_slowdown", "compute while PS pushes run"),
    "ps_pipelined": (
        ("ps_pipelined", "overlap_slowdown"),
        "overlap_slowdown",
        "compute while PS pushes run on the pipelined transport",
    ),
    "horovod": (
        ("horovod", "idle_slowdown"),
        "background_slowdown",
        "compute while Horovod runs idle",
    ),
}
# The slow-downs a whole calibration must have in range (Horovod's is optional: ``calibrate``
# leaves out a Horovod entry beyond it, with a warning).
_NETWORK_SLOWDOWNS = ("overlap_slowdown", "comm_slowdown", "ps")


# Why an all-reduce slow-down on the unshaped network can be large on a quiet machine too.
_UNSHAPED_NOTE = (
    "on an unshaped network the probe's collectives, which never pause, can take the cores "
    "almost whole (the twins charge it only while a collective overlaps an op: "
    "cluster.overlap_model integrated); or "
)


def check_slowdowns(
    network: list[dict[str, Any]],
    say: Callable[[str], None],
    kinds: tuple[str, ...] = tuple(_SLOWDOWNS),
    kept: str = "nothing written",
) -> None:
    """A calibration's slow-downs (of ``kinds``: those just measured) are measured ratios,
    written as measured; one over ``SLOWDOWN_WARN`` is told (the machine was likely busy
    with other work); one over the simulator's bound (``spec.SLOWDOWN_MAX``) stops the
    calibration before its file is written (``CalibrationError``, which says ``kept``):
    fidelity could not use it."""
    for point in network:
        for kind in kinds:
            where, field, what = _SLOWDOWNS[kind]
            values: Any = point
            for key in where:
                values = values.get(key, {})
            for model, value in values.items():
                said = (
                    f"{_where(point['nominal_gbps'])}: {what} of {model} measured "
                    f"{1 + value:.1f}x as slow as alone"
                )
                # the all-reduce arena's, on the unshaped network: not only a busy machine
                unshaped = point["nominal_gbps"] is None and kind == "overlap_slowdown"
                if value > SLOWDOWN_MAX:
                    raise CalibrationError(
                        f"{said}, beyond what the simulator takes (cluster.{field} <= "
                        f"{SLOWDOWN_MAX:g}): {_UNSHAPED_NOTE if unshaped else ''}the machine "
                        f"was busy with other work; calibrate again when it is quiet ({kept})"
                    )
                if value > SLOWDOWN_WARN:
                    say(
                        f"warning: {said}: {_UNSHAPED_NOTE if unshaped else ''}was the machine "
                        "busy with other work? If so, measure again when it is quiet"
                    )


T = TypeVar("T")
REPEATS, REPEATS_AGAIN = 11, 22  # a network probe's timed collectives per size; once more


def _measured_twice(
    attempt: Callable[[int], T], nominal: float | None, say: Callable[[str], None]
) -> tuple[T, bool]:
    """``attempt(repeats)``, and once more with twice the repeats when it raises
    ``ValueError`` (a physically impossible result: a disturbed measurement, another process
    took the cores); two such fail with what to do. Returns the result and whether it was
    measured again."""
    for again, repeats in enumerate((REPEATS, REPEATS_AGAIN)):
        try:
            return attempt(repeats), again > 0
        except ValueError as exc:
            if again:
                raise CalibrationError(
                    f"network {_where(nominal)}: {exc} in two measurements; run calibrate "
                    "again on a quieter machine"
                ) from exc
            say(f"  {exc}; measuring again with {2 * repeats} repeats")
    raise AssertionError("unreachable")


# On a shaped network large all-reduces take time linear in their size (the shaper's rate):
# measured 1-8 % off the fit on the shaped networks of four calibrations of 2026-11-22 to 24;
# 19 % and 45 % in two at 1 Gbit/s disturbed by another load (0.59 and 0.41 Gbit/s fitted,
# 0.96 measured again minutes later). Measuring again costs seconds. Loopback is not checked:
# its 1-2 MiB all-reduces run 30-40 % under a straight line through the larger ones (caches),
# every time.
LINEAR_TOLERANCE_PCT = 12.0


def _probe_network(
    workers: int,
    nominal: float | None,
    threads: int,
    say: Callable[[str], None],
    comm_priority: str = "normal",
    latency_us: float = 0.0,
) -> tuple[list[tuple[int, float]], float, float, bool]:
    """All-reduce times and their alpha-beta fit. Times that do not grow with size are
    physically impossible: measured again (``remeasured``). On a shaped network, large
    all-reduces' times off the fit's straight line by more than ``LINEAR_TOLERANCE_PCT``
    (``nonlinearity_pct``) are a disturbed measurement too: measured again with twice the
    repeats (unless they were already) and the straighter of the two kept, with a warning
    where what is kept is still off. ``latency_us``: added a way on the shaped network; then
    the line is not checked, as large all-reduces do not pay the small ones' latency in full
    (their transfer overlaps the rendezvous of a gloo send: 27 % under the fit at 0.25 Gbit/s
    with 2 ms a way, their times in size a straight line of their own)."""
    from .real import probe

    def attempt(repeats: int) -> tuple[list[tuple[int, float]], float, float]:
        with tempfile.TemporaryDirectory(prefix="lab-probe-") as tmp:
            rows = probe.probe(
                workers, nominal, Path(tmp), repeats=repeats, threads=threads,
                comm_priority=comm_priority, latency_us=latency_us,
            )  # fmt: skip
        return (rows, *probe.fit_alpha_beta(rows, workers))

    first, remeasured = _measured_twice(attempt, nominal, say)
    off = 0.0 if nominal is None or latency_us else nonlinearity_pct(*first, workers)
    if off <= LINEAR_TOLERANCE_PCT:  # loopback, or a straight line
        return (*first, remeasured)
    kept = first
    if not remeasured:  # once more, as for an impossible result
        say(
            f"  {_where(nominal)}: a large all-reduce's time is {off:.0f}% off the fit's "
            "straight line (a disturbed measurement?); measuring again with "
            f"{REPEATS_AGAIN} repeats"
        )
        try:
            again = attempt(REPEATS_AGAIN)
        except ValueError:  # impossible this time: the first stands
            pass
        else:
            again_off = nonlinearity_pct(*again, workers)
            if again_off < off:
                kept, off = again, again_off
    if off > LINEAR_TOLERANCE_PCT:
        say(
            f"  warning: {_where(nominal)}: the all-reduce times kept are {off:.0f}% off a "
            "straight line in size; the fitted bandwidth may be off: run calibrate again on a "
            "quieter machine"
        )
    return (*kept, True)


def _fit_entry(rows: list[tuple[int, float]], alpha: float, bandwidth: float) -> dict[str, Any]:
    """A network entry's alpha-beta fit (``_probe_network``): its bandwidth, latency a ring
    step and the all-reduce times it was fitted to."""
    return {
        "bandwidth_gbps": round(bandwidth * 8 / 1e9, 6),
        "latency_us": round(alpha * 1e6, 3),
        "allreduce": [{"bytes": s, "seconds": round(t, 9)} for s, t in rows],
    }


def nonlinearity_pct(
    rows: list[tuple[int, float]], alpha: float, bandwidth: float, workers: int
) -> float:
    """How far, in percent of the fit, the all-reduces of at least ``probe.LARGE_BYTES`` are
    from the alpha-beta fit ``(alpha, bandwidth)`` of ``rows`` at most."""
    from .real import probe
    from .sim.network import RingAllReduce

    ring = RingAllReduce(workers, bandwidth, alpha)
    return max(
        100.0 * abs(t - ring.time_s(s)) / ring.time_s(s) for s, t in rows if s >= probe.LARGE_BYTES
    )


def _probe_split(
    workers: int,
    nominal: float | None,
    threads: int,
    say: Callable[[str], None],
    comm_priority: str = "normal",
) -> tuple[list[tuple[int, float, float, float]], float, float]:
    """The split collectives' times and costs. A cost the simulator refuses (outside (0,
    SPLIT_COST_MAX]: gloo's reduce-scatter is about one all-reduce) means a disturbed
    measurement: measured again."""
    from .real import probe

    def attempt(repeats: int) -> tuple[list[tuple[int, float, float, float]], float, float]:
        with tempfile.TemporaryDirectory(prefix="lab-probe-") as tmp:
            rows = probe.split(
                workers, nominal, Path(tmp), repeats=repeats, threads=threads,
                comm_priority=comm_priority,
            )  # fmt: skip
        rs_cost, ag_cost = probe.split_costs(rows)
        if not (0 < rs_cost <= SPLIT_COST_MAX and 0 < ag_cost <= SPLIT_COST_MAX):
            raise ValueError(
                f"split collectives at reduce-scatter {rs_cost:.2f}, all-gather {ag_cost:.2f} "
                f"all-reduces (at most {SPLIT_COST_MAX:g} expected)"
            )
        return rows, rs_cost, ag_cost

    say("  split collectives: reduce-scatter and all-gather against the all-reduce")
    return _measured_twice(attempt, nominal, say)[0]


def _split_entry(
    rows: list[tuple[int, float, float, float]], rs_cost: float, ag_cost: float
) -> dict[str, Any]:
    return {
        "reduce_scatter_cost": round(rs_cost, 4),
        "all_gather_cost": round(ag_cost, 4),
        "split": [
            {
                "bytes": s,
                "allreduce_s": round(ar, 9),
                "reduce_scatter_s": round(rs, 9),
                "all_gather_s": round(ag, 9),
            }
            for s, ar, rs, ag in rows
        ],  # fmt: skip
    }


PS_SERVERS = CommCluster().ps  # the PS arena's default server count
_PS_METHOD_BEFORE_CPU = (
    "PS arena, on the real PS transport with `ps.servers` server processes beside the "
    "workers: forward + backward timed alone and while the workers push 1 MiB to the servers "
    "in turn (one unanswered push per server); latency: the 10 %-trimmed mean time between "
    "answers of a stream of 4 KiB pushes while the workers compute (busy) and idle (idle): "
    "how long a small message holds a link, the simulator's per-transfer latency; for "
    "reference half the round trip of one 4 KiB push and its answer while computing "
    "(half_round_trip_busy_us); aggregation: the "
    "slowest server's median time to sum a 1 MiB push (runners.real.probe.ps_overlap)"
)
_PS_METHOD_BEFORE_ROUNDS = (
    _PS_METHOD_BEFORE_CPU
    + "; message CPU: the compute time a 4 KiB push or its answer takes from a synthetic "
    "backward it overlaps, pushed from the gradient hooks (message_cpu_us, "
    "runners.real.probe.ps_message_cpu)"
)
PS_ROUNDS = 3  # one probe's slow-down swung 2x between calibrations: median of rounds
_PS_METHOD_CPU_ONCE = (
    _PS_METHOD_BEFORE_ROUNDS
    + f" (the PS transport's values each the median of {PS_ROUNDS} probes taken in rounds "
    "over the models, the message CPU one probe)"
)
_PS_METHOD_SUM_ONLY = (
    _PS_METHOD_BEFORE_ROUNDS
    + f" (the PS transport's values each the median of {PS_ROUNDS} probes taken in rounds "
    f"over the models, the message CPU among them: the median of {PS_ROUNDS} probes)"
)
PS_AGG_MARKER = "a line through the two"
_PS_METHOD_BEFORE_HOST = _PS_METHOD_SUM_ONLY.replace(
    "aggregation: the slowest server's median time to sum a 1 MiB push",
    "aggregation: the slowest server's median time to handle a round's last push as a real "
    "server does (the sum, the SGD step, the copy for the pulls; at the communication "
    "priority) after 1 MiB pushes and after 4 KiB ones, "
    + PS_AGG_MARKER
    + " (server_agg_fixed_us + n x S / server_agg_gbps)",
)
PS_HOST_MARKER = "the host's CPU per message"
_PS_METHOD_THREE_CPU = (
    _PS_METHOD_BEFORE_HOST
    + "; "
    + PS_HOST_MARKER
    + ": in the message CPU's probes and in as many with 64 KiB pushes, every process's CPU "
    "time (all its threads) per message, the workers' beyond the same iterations without "
    "pushes and the servers' from their first push, a line through the two sizes' medians "
    "(host_message_cpu_us + S x host_cpu_ns_per_byte; the simulator's cluster.host_cores "
    "floor, runners.real.probe.ps_message_cpu)"
)
_PS_METHOD_FIVE_CPU = _PS_METHOD_THREE_CPU.replace(
    f"the message CPU among them: the median of {PS_ROUNDS} probes",
    "the message CPU the median of 5 probes, each stored",
)
PS_CPU_MARKER = (
    f"the message CPU the median of its probes ({PS_CPU_ROUNDS} unless calibrate "
    "--ps-cpu-probes said otherwise), each stored (message_cpu_probes_us)"
)
PS_METHOD = _PS_METHOD_THREE_CPU.replace(
    f"the message CPU among them: the median of {PS_ROUNDS} probes", PS_CPU_MARKER
)
PS_PIPELINED_MARKER = "PS arena on the pipelined transport"
PS_PIPELINED_METHOD = (
    PS_PIPELINED_MARKER
    + " (ps_pipelined; calibrate --ps-only --ps-transport pipelined): the PS arena's probes "
    "and values as on the blocking one, every process's messages through the transport real "
    "runs get with real.ps_transport: pipelined (runners.real.ps.PipelinedChannel: a message "
    "one send, receives posted ahead for each peer), the transport's values each the median "
    f"of {PS_ROUNDS} probes taken in rounds over the models, the message CPU the median of "
    "its probes, each stored"
)


def _probe_ps(
    models: tuple[str, ...],
    workers: int,
    nominal: float | None,
    threads: int,
    say: Callable[[str], None],
    comm_priority: str = "normal",
    servers: int = PS_SERVERS,
    rounds: int = PS_ROUNDS,
    cpu_rounds: int = PS_CPU_ROUNDS,
    transport: str = "blocking",
) -> dict[str, Any]:
    """The PS arena's measurements at one network on PS ``transport`` (``real.ps_transport``;
    ``ps`` of a calibration's network for the blocking one, ``fidelity_transport.ps_entry``):
    the transport's (``_probe_ps_transport``) and the message CPU, the median of
    ``cpu_rounds`` probes (one calibration's single probe was 422 µs, the next's 717 on the
    same machine; the host's CPU per message moved 2x between two calibrations' medians of
    3). The host's CPU per message: ``probe.host_cpu_fit`` through the medians of the
    message CPU's probes (4 KiB) and of as many with 64 KiB messages, both stored beside the
    fit; every message-CPU probe's own value is stored (``*_probes_us``): how far one probe
    is from the next."""
    from .real import probe

    on = "" if transport == "blocking" else f" ({transport} transport)"
    entry = _probe_ps_transport(
        models, workers, nominal, threads, say, comm_priority, servers, rounds, transport
    )
    cpus, host_small, host_big = [], [], []
    for k in range(cpu_rounds):
        say(f"  PS arena{on}: a message's CPU beside {servers} server processes "
            f"({k + 1}/{cpu_rounds})")  # fmt: skip
        for width, hosts in ((probe.PS_CPU_WIDTH, host_small), (probe.PS_CPU_BIG_WIDTH, host_big)):
            cost = fidelity_transport.probe_once(
                workers, servers, nominal, threads, comm_priority, width, transport
            )
            if width == probe.PS_CPU_WIDTH:
                cpus.append(cost.compute_s)
            hosts.append(cost.host_s)
    small_s, big_s = statistics.median(host_small), statistics.median(host_big)
    host_fixed_s, host_per_byte_s = probe.host_cpu_fit(small_s, big_s)
    return {
        **entry,
        "message_cpu_us": round(statistics.median(cpus) * 1e6, 3),
        "host_message_cpu_us": round(host_fixed_s * 1e6, 3),
        "host_cpu_ns_per_byte": round(host_per_byte_s * 1e9, 4),
        "host_cpu_small_us": round(small_s * 1e6, 3),  # 4 KiB messages
        "host_cpu_big_us": round(big_s * 1e6, 3),  # 64 KiB
        # every probe, in the order taken
        "message_cpu_probes_us": [round(x * 1e6, 3) for x in cpus],
        "host_cpu_small_probes_us": [round(x * 1e6, 3) for x in host_small],
        "host_cpu_big_probes_us": [round(x * 1e6, 3) for x in host_big],
    }


def _probe_ps_transport(
    models: tuple[str, ...],
    workers: int,
    nominal: float | None,
    threads: int,
    say: Callable[[str], None],
    comm_priority: str = "normal",
    servers: int = PS_SERVERS,
    rounds: int = PS_ROUNDS,
    transport: str = "blocking",
    latency_us: float = 0.0,
) -> dict[str, Any]:
    """The PS transport's measurements at one network (``probe.ps_overlap``, ``latency_us``
    added a way): each the median of ``rounds`` probes taken in rounds over the models, as
    the all-reduce arena's overlap entries (``_probe_overlap``); the servers' aggregation:
    ``probe.aggregation_fit`` through the medians over every probe of its two rounds (after
    1 MiB and 4 KiB pushes), both stored beside the fit."""
    from .real import probe

    on = "" if transport == "blocking" else f" ({transport} transport)"
    added = f", {latency_us:g} us a way added" if latency_us else ""
    taken = _in_rounds(
        models,
        rounds,
        say,
        lambda model: f"PS arena{on}: {model} beside {servers} server processes{added}",
        lambda model, tmp: probe.ps_overlap(
            model,
            workers,
            servers,
            nominal,
            tmp,
            threads=threads,
            comm_priority=comm_priority,
            transport=transport,
            latency_us=latency_us,
        ),
    )
    fields = {
        "overlap_slowdown": ("slowdown", 1.0, 4),
        "latency_busy_us": ("message_busy_s", 1e6, 3),
        "latency_idle_us": ("message_idle_s", 1e6, 3),
        "half_round_trip_busy_us": ("half_round_trip_busy_s", 1e6, 3),
    }
    round_big = statistics.median(m.agg_round_s for model in models for m in taken[model])
    round_small = statistics.median(m.agg_round_small_s for model in models for m in taken[model])
    fixed_s, agg_bytes_per_s = probe.aggregation_fit(round_big, round_small, workers)
    return {
        "servers": servers,
        **_medians(taken, fields),
        "server_agg_gbps": round(agg_bytes_per_s * 8 / 1e9, 3),
        "server_agg_fixed_us": round(fixed_s * 1e6, 3),
        "agg_round_us": round(round_big * 1e6, 3),  # 1 MiB pushes
        "agg_round_small_us": round(round_small * 1e6, 3),  # 4 KiB
    }


def _rewrite(doc: dict[str, Any], label: str) -> None:
    path = testbed_path(label)
    tmp_path = path.with_suffix(".json.tmp")
    tmp_path.write_text(json.dumps(doc, indent=2) + "\n")
    tmp_path.rename(path)


def _where(nominal: float | None) -> str:
    return "loopback" if nominal is None else f"{nominal:g} Gbit/s shaped"


def _add_to_calibration(
    label: str,
    progress: Callable[[str], None] | None,
    measure: Callable[
        [dict[str, Any], int, int, tuple[str, ...], Callable[[str], None], str], None
    ],
    method: str,
    marker: str,
    date_key: str,
    superseded: tuple[str, ...] = (),
    slowdowns: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Add a measurement to calibration ``label`` at each of its networks (``measure(point,
    workers, threads, models, say, comm_priority)`` updates the network's entry), leaving the
    others as they are; ``method`` is appended to the calibration's method unless it names
    ``marker`` already (``superseded``: older texts of it, taken out), ``date_key`` dated
    today. The probes run at the calibration's communication-thread priority (one from
    before the priority was recorded: normal), so its measurements stay of one kind.
    ``slowdowns``: the slow-downs the measurement takes (``check_slowdowns``' kinds)."""
    say = progress or (lambda message: None)
    doc = load_testbed(label)
    check_priority(doc)
    workers, threads = int(doc["workers"]), int(doc["threads"])
    prio = doc.get("comm_priority", "normal")
    models = tuple(doc.get("profiles", ()))  # every calibration `calibrate` writes has them
    for point in doc["network"]:
        say(f"network: {_where(point['nominal_gbps'])}")
        measure(point, workers, threads, models, say, prio)
    check_slowdowns(doc["network"], say, kinds=slowdowns, kept="the calibration is unchanged")
    if marker not in doc["method"]:
        # The older texts out, wherever they stand (one may be the start of ``method``: only
        # when it is absent); the trailing "; " lets the last part go like the others.
        text = doc["method"] + "; "
        for old in sorted(superseded, key=len, reverse=True):  # one may start another
            text = text.replace(old + "; ", "")
        doc["method"] = text + method
    doc[date_key] = _today()
    _rewrite(doc, label)
    return doc


OVERLAP_METHOD = (
    "overlap per model (runners.real.probe.overlap, each value the median of 5 probes taken "
    "in rounds over the models): the slow-down of forward + backward "
    "timed alone and while a thread keeps 1 MiB all-reduces going; 10 %-trimmed means of "
    "back-to-back 4 KiB all-reduces per ring step while the rank computes (latency_busy_us) "
    "and while it idles (latency_idle_us); the 1 MiB all-reduces' time while computing over "
    "idle, minus 1 (comm_slowdown); 4 KiB all-reduces issued by the lab's engine on idle "
    "ranks, a synthetic model's stream (latency_engine_us); the compute time such an engine "
    "collective takes from a synthetic backward it overlaps (collective_cpu_us); the compute "
    "time a negotiation round of the engine (one 16-byte all-reduce before a dispatch) takes "
    "from that backward, beyond the gradient collectives' (negotiation_cpu_us); the engine's "
    "stream and its collective's compute time again with each collective issued from the "
    "gradient hooks instead of the engine's communication thread (dispatch auto on this "
    "first-ready-first plan: latency_engine_inline_us, collective_cpu_inline_us)"
)


PRIORITY_METHOD = (
    "network probes with the communication threads at the priority `comm_priority` "
    "(runners.real.priority), which fidelity's real runs get too"
)


OVERLAP_ROUNDS = 5  # the measurements swing from one probe to the next: median of rounds


def _probe_overlap(
    models: tuple[str, ...],
    workers: int,
    nominal: float | None,
    threads: int,
    say: Callable[[str], None],
    comm_priority: str = "normal",
    rounds: int = OVERLAP_ROUNDS,
    latency_us: float = 0.0,
) -> dict[str, dict[str, float]]:
    """The all-reduce arena's interference measurements at one network (``latency_us`` added
    a way on the shaped one), per model: each the median of ``rounds`` probes, taken in
    rounds over the models (a slow spell of a shared machine then falls on several models'
    probes rather than on all of one's)."""
    from .real import probe

    taken = _in_rounds(
        models,
        rounds,
        say,
        lambda model: f"overlap: {model} while the network is busy",
        lambda model, tmp: probe.overlap(
            model,
            workers,
            nominal,
            tmp,
            threads=threads,
            comm_priority=comm_priority,
            latency_us=latency_us,
        ),
    )
    fields = {
        "overlap_slowdown": ("slowdown", 1.0, 4),
        "latency_busy_us": ("latency_busy_s", 1e6, 3),
        "latency_idle_us": ("latency_idle_s", 1e6, 3),
        "comm_slowdown": ("comm_slowdown", 1.0, 4),
        "latency_engine_us": ("latency_engine_s", 1e6, 3),
        "collective_cpu_us": ("collective_cpu_s", 1e6, 3),
        "negotiation_cpu_us": ("negotiation_cpu_s", 1e6, 3),
        "latency_engine_inline_us": ("latency_engine_inline_s", 1e6, 3),
        "collective_cpu_inline_us": ("collective_cpu_inline_s", 1e6, 3),
    }
    return _medians(taken, fields)


def _in_rounds(
    models: tuple[str, ...],
    rounds: int,
    say: Callable[[str], None],
    what: Callable[[str], str],
    take: Callable[[str, Path], Any],
) -> dict[str, list[Any]]:
    """Per model, ``rounds`` probes ``take(model, work_dir)``, taken in rounds over the models
    (a slow spell of a shared machine then falls on several models' probes rather than on all
    of one's), each said as ``what(model)`` with its round."""
    taken: dict[str, list[Any]] = {model: [] for model in models}
    for k in range(rounds):
        for model in models:
            say(f"  {what(model)} ({k + 1}/{rounds})")
            with tempfile.TemporaryDirectory(prefix="lab-probe-") as tmp:
                taken[model].append(take(model, Path(tmp)))
    return taken


def _medians(
    taken: dict[str, list[Any]], fields: dict[str, tuple[str, float, int]]
) -> dict[str, dict[str, float]]:
    """``{key: {model: median of the probes' attr x scale, rounded to digits}}`` for each
    ``key: (attr, scale, digits)`` of ``fields``."""
    return {
        key: {
            model: round(statistics.median(getattr(m, attr) for m in probes) * scale, digits)
            for model, probes in taken.items()
        }
        for key, (attr, scale, digits) in fields.items()
    }


def calibrate_overlap(
    label: str = DEFAULT_LABEL, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure the overlap entries of calibration ``label`` again (at each of its networks, for
    each of its models), leaving its other measurements as they are (``calibrate
    --overlap-only``), with as many probes as the calibration took (``probe_rounds``)."""
    rounds = _rounds_of(label, "overlap", OVERLAP_ROUNDS)

    def measure(
        point: dict[str, Any], workers: int, threads: int, models: Any, say: Any, prio: str
    ) -> None:
        nominal = point["nominal_gbps"]
        point.update(_probe_overlap(models, workers, nominal, threads, say, prio, rounds))

    return _add_to_calibration(
        label,
        progress,
        measure,
        OVERLAP_METHOD,
        "collective_cpu_inline_us",
        "overlap_date",
        superseded=_OLD_OVERLAP_METHODS,
        slowdowns=("overlap_slowdown", "comm_slowdown"),
    )


# What calibrations before ``latency_idle_us``, then before ``latency_engine_us``, then
# before ``collective_cpu_us``, then before ``negotiation_cpu_us``, then before the inline
# dispatch's entries, said of their overlap measurement.
_OLD_OVERLAP_METHODS = (
    "overlap slow-down per model: forward + backward timed alone and while a thread keeps "
    "1 MiB all-reduces going (runners.real.probe.overlap)",
    OVERLAP_METHOD.split("; 4 KiB all-reduces issued by")[0],
    OVERLAP_METHOD.split("; the compute time such an engine")[0],
    OVERLAP_METHOD.split("; the compute time a negotiation round")[0],
    OVERLAP_METHOD.split("; the engine's stream and its collective's")[0],
)


SPLIT_METHOD = (
    "split collectives: reduce-scatter and all-gather times over the all-reduce's of the same "
    "tensor, median over 256 KiB-4 MiB (runners.real.probe.split)"
)


def calibrate_split(
    label: str = DEFAULT_LABEL, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Add the split collectives' costs to calibration ``label`` (measured at each of its
    networks), leaving its other measurements as they are (``calibrate --split-only``)."""

    def measure(
        point: dict[str, Any], workers: int, threads: int, models: Any, say: Any, prio: str
    ) -> None:
        nominal = point["nominal_gbps"]
        point.update(_split_entry(*_probe_split(workers, nominal, threads, say, prio)))

    return _add_to_calibration(
        label, progress, measure, SPLIT_METHOD, "split collectives", "split_date"
    )


def calibrate_ps(
    label: str = DEFAULT_LABEL,
    progress: Callable[[str], None] | None = None,
    cpu_rounds: int = PS_CPU_ROUNDS,
    transport: str = "blocking",
) -> dict[str, Any]:
    """Add the PS arena's measurements to calibration ``label`` (at each of its networks, for
    each of its models), leaving its other measurements as they are (``calibrate
    --ps-only``), with as many transport probes as the calibration took (``probe_rounds``);
    ``cpu_rounds``: the message CPU's probes per network (``--ps-cpu-probes``). ``transport``:
    the PS transport probed (``--ps-transport``); the pipelined one's measurements go beside
    the blocking one's (``ps_pipelined``, ``ps_pipelined_date``), which stay as they are."""
    rounds = _rounds_of(label, "ps", PS_ROUNDS)
    key = fidelity_transport.ps_entry(transport)

    def measure(
        point: dict[str, Any], workers: int, threads: int, models: Any, say: Any, prio: str
    ) -> None:
        point[key] = _probe_ps(
            models,
            workers,
            point["nominal_gbps"],
            threads,
            say,
            prio,
            rounds=rounds,
            cpu_rounds=cpu_rounds,
            transport=transport,
        )

    if transport != "blocking":  # its own part of the method, beside the blocking one's
        method = _with_rounds(PS_PIPELINED_METHOD, PS_ROUNDS, rounds)
        marker, superseded = PS_PIPELINED_MARKER, ()
    else:
        method, marker = PS_METHOD, PS_CPU_MARKER  # older PS texts replaced
        superseded = (
            _PS_METHOD_BEFORE_CPU,
            _PS_METHOD_BEFORE_ROUNDS,
            _PS_METHOD_CPU_ONCE,
            _PS_METHOD_SUM_ONLY,
            _PS_METHOD_BEFORE_HOST,
            _PS_METHOD_THREE_CPU,
            _PS_METHOD_FIVE_CPU,
        )
    return _add_to_calibration(
        label, progress, measure, method, marker, f"{key}_date", superseded, slowdowns=(key,)
    )


HOROVOD_METHOD = (
    "Horovod's own CPU cost (runners.real.probe.horovod_cpu, under the real Horovod with the "
    "horovod entry's default cycle time and fusion threshold, the median of 5 launches of the "
    "ranks, each value the largest over them): the compute time a Horovod cycle carrying one "
    "4 KiB all-reduce (its negotiation and its collective; one after another under one name, "
    "polled) takes from a synthetic backward it overlaps, against that backward before Horovod "
    "started (horovod.cycle_cpu_us); per model, a training step's time with Horovod running "
    "idle over without it, minus 1 (horovod.idle_slowdown: its background thread negotiates "
    "every cycle)"
)


def _probe_horovod(
    models: tuple[str, ...],
    workers: int,
    nominal: float | None,
    threads: int,
    say: Callable[[str], None],
    comm_priority: str = "normal",
) -> dict[str, Any]:
    """The real Horovod's own CPU cost at one network (``horovod`` of a calibration's
    network)."""
    from .real import probe

    say("  Horovod: its cycles' and its idle loop's CPU")
    with tempfile.TemporaryDirectory(prefix="lab-probe-") as tmp:
        m = probe.horovod_cpu(
            workers, nominal, Path(tmp), models, threads=threads, comm_priority=comm_priority
        )
    return {
        "cycle_cpu_us": round(m.cycle_cpu_s * 1e6, 3),
        "idle_slowdown": {model: round(v, 4) for model, v in m.idle_slowdown.items()},
    }


def calibrate_horovod(
    label: str = DEFAULT_LABEL, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure the real Horovod's own CPU cost in calibration ``label`` (at each of its
    networks, for each of its models), leaving its other measurements as they are
    (``calibrate --horovod-only``). ``CalibrationError`` where Horovod is not installed."""
    from .real import hvd

    if hvd.available() is None:
        raise CalibrationError("the real Horovod is not installed here: run `make horovod` first")

    def measure(
        point: dict[str, Any], workers: int, threads: int, models: Any, say: Any, prio: str
    ) -> None:
        point["horovod"] = _probe_horovod(
            models, workers, point["nominal_gbps"], threads, say, prio
        )

    return _add_to_calibration(
        label,
        progress,
        measure,
        HOROVOD_METHOD,
        "horovod.cycle_cpu_us",
        "horovod_date",
        superseded=(_HOROVOD_METHOD_BEFORE_CYCLE,),
        slowdowns=("horovod",),
    )


# What calibrations measured on 2026-11-24 before the per-cycle cost said of Horovod's.
_HOROVOD_METHOD_BEFORE_CYCLE = (
    "Horovod's own CPU cost (runners.real.probe.horovod_cpu, under the real Horovod with "
    "the horovod entry's default cycle time and fusion threshold, the median of 5 "
    "launches of the ranks): the compute time one 4 KiB hvd.allreduce, issued back to "
    "back from a thread so that each Horovod cycle carries one (its negotiation and its "
    "collective), takes from a synthetic backward it overlaps "
    "(horovod.collective_cpu_us); per model, a training step's time with Horovod running "
    "idle over without it, minus 1 (horovod.idle_slowdown: its background thread "
    "negotiates every cycle)"
)


LATENCY_METHOD = (
    "added latency (calibrate --latency-only; each shaped network's added_latency, per "
    "latency added a way by the emulated network: netem where the kernel has it, else the "
    "delay line): the network probe's all-reduce times and their alpha-beta fit, and the "
    "overlap probes (the median of the entry's probe_rounds), taken as above with that "
    "latency added; twins of real runs with it take these in place of the network's own, "
    "and the rest (split collectives, the PS arena, Horovod's CPU) from the network without it"
)
LATENCY_MARKER = "added latency (calibrate --latency-only"


def latency_key(latency_us: float) -> str:
    """The key of an added latency in a network's ``added_latency`` (``"5000"`` for 5 ms)."""
    return f"{latency_us:g}"


LATENCY_PS_METHOD = (
    "added latency, PS arena (calibrate --latency-only --ps-transport; a shaped network's "
    "added_latency entry's ps, or ps_pipelined for the pipelined transport, with its own "
    "probe_rounds): the PS transport's probes (compute slow-down, a message's latency while "
    "computing and while idle, half a push's round trip, the servers' aggregation) taken "
    "as above with that latency added; twins of PS runs with it take these in place of the "
    "network's own and the message's CPU (message_cpu_us, the host's CPU per message) from "
    "the network's own on that transport: CPU costs, which the latency does not add to (a "
    "reconstruction: not measured with it)"
)
LATENCY_PS_MARKER = "added latency, PS arena (calibrate --latency-only --ps-transport"
# an added latency's entries of the PS arena, one a transport: ``ps``, ``ps_pipelined``
LATENCY_PS_PARTS = tuple(fidelity_transport.ps_entry(t) for t in PS_TRANSPORTS)


def calibrate_latency(
    label: str = DEFAULT_LABEL,
    latencies_us: tuple[float, ...] = (),
    progress: Callable[[str], None] | None = None,
    rounds: int | None = None,
    ps_transport: str | None = None,
) -> dict[str, Any]:
    """Measure calibration ``label``'s shaped networks again with each of ``latencies_us``
    added a way (``calibrate --latency-only --added-latency-us``), keeping each as the
    network's ``added_latency[latency_key(L)]``: the alpha-beta fit of the network probe
    (``_probe_network``) and the overlap entries (``_probe_overlap``, ``rounds`` probes each:
    ``calibrate --probe-rounds``, by default as many as the calibration took; kept as the
    entry's ``probe_rounds``), measured with the latency added as real runs get it (netem or
    the delay line, ``runners.real.testbed``). With ``ps_transport`` (``--ps-transport``),
    the PS arena's transport probes on it instead (``_probe_ps_transport``, as many rounds
    as the calibration's PS probes by default), kept as the entry's ``ps`` or
    ``ps_pipelined`` (``fidelity_transport.ps_entry``) with its own ``probe_rounds`` and
    date; the message's CPU is not probed again (``LATENCY_PS_METHOD``), so the network
    must have its own PS entry on that transport. Each arena's part of an entry is kept
    when the other's is measured. The loopback network is left as it is (no links to add
    latency on); other measurements too. ``CalibrationError`` where this machine can add no
    latency, the calibration has no shaped network or (``ps_transport``) a shaped network
    has no PS entry on that transport; ``ValueError`` for a latency the testbed does not add
    (``testbed.added_latency_error``)."""
    from .real import testbed as tb

    if not latencies_us:
        raise ValueError("no latency to add")
    for latency_us in latencies_us:
        if why := tb.added_latency_error(latency_us):
            raise ValueError(why)
    if why := tb.can_shape():  # (the testbed says where it cannot add the latency)
        raise CalibrationError(f"cannot add latency here: {why}")
    shaped = [p for p in load_testbed(label)["network"] if p["nominal_gbps"] is not None]
    if not shaped:
        raise CalibrationError(
            f"calibration '{label}' has no shaped network to add latency to: calibrate it "
            "with --bandwidths as root first"
        )
    part = None if ps_transport is None else fidelity_transport.ps_entry(ps_transport)
    if part is not None:
        if lacking := [_where(p["nominal_gbps"]) for p in shaped if part not in p]:
            flag = "" if ps_transport == "blocking" else f" --ps-transport {ps_transport}"
            raise CalibrationError(
                f"calibration '{label}' has no PS arena on the {ps_transport} transport at "
                f"{', '.join(lacking)} (its message CPU is what twins with added latency "
                f"take): run `python -m runners calibrate --label {label} --ps-only{flag}` "
                "first"
            )
        rounds = rounds or _rounds_of(label, "ps", PS_ROUNDS)
    else:
        rounds = rounds or _rounds_of(label, "overlap", OVERLAP_ROUNDS)

    def measure(
        point: dict[str, Any], workers: int, threads: int, models: Any, say: Any, prio: str
    ) -> None:
        nominal = point["nominal_gbps"]
        if nominal is None:
            say("  loopback: no links to add latency on; left as it is")
            return
        added = point.setdefault("added_latency", {})
        for latency_us in latencies_us:
            say(f"  {latency_us:g} us a way added")
            before = added.get(latency_key(latency_us), {})
            if part is not None:
                measured = _probe_ps_transport(
                    models, workers, nominal, threads, say, prio,
                    servers=int(point[part]["servers"]), rounds=rounds,
                    transport=str(ps_transport), latency_us=latency_us,
                )  # fmt: skip
                measured.update(probe_rounds=rounds, date=_today())
                check = {"nominal_gbps": nominal, part: measured}
                # the all-reduce arena's part, where measured, kept
                entry = {**before, "latency_added_us": latency_us, part: measured}
                kinds: tuple[str, ...] = (part,)
            else:
                rows, alpha, bandwidth, remeasured = _probe_network(
                    workers, nominal, threads, say, prio, latency_us
                )
                overlap = _probe_overlap(
                    models, workers, nominal, threads, say, prio, rounds, latency_us
                )
                entry = {
                    "latency_added_us": latency_us,
                    **_fit_entry(rows, alpha, bandwidth),
                    **overlap,
                    "remeasured": remeasured,
                    "probe_rounds": rounds,
                    "date": _today(),
                    # the PS arena's parts, where measured, kept
                    **{k: v for k, v in before.items() if k in LATENCY_PS_PARTS},
                }
                check = {"nominal_gbps": nominal, **entry}
                kinds = ("overlap_slowdown", "comm_slowdown")
            check_slowdowns(
                [check],
                say,
                kinds=kinds,
                kept=f"the calibration is unchanged ({latency_us:g} us added)",
            )
            added[latency_key(latency_us)] = entry

    if part is not None:
        method, marker = LATENCY_PS_METHOD, LATENCY_PS_MARKER
    else:
        method, marker = LATENCY_METHOD, LATENCY_MARKER
    return _add_to_calibration(label, progress, measure, method, marker, "added_latency_date")


def calibrate_compute(
    label: str = DEFAULT_LABEL,
    progress: Callable[[str], None] | None = None,
    repeats: int = PROFILE_REPEATS,
) -> dict[str, Any]:
    """Measure the compute profiles of calibration ``label``'s models again, as ``calibrate``
    does (its ``workers`` processes at once, its torch threads), leaving its network
    measurements as they are (``calibrate --compute-only``: what ``fidelity``'s compute check
    asks for when the machine's speed has moved). The network entries stay those measured
    before, some of them (the overlap's slow-downs, a collective's or a message's CPU)
    against the compute of then; ``compute_date`` says when the compute was measured."""
    say = progress or (lambda message: None)
    doc = load_testbed(label)
    models = tuple(doc.get("profiles", {}))
    _measure_models(models, label, int(doc["workers"]), int(doc["threads"]), repeats, say)
    doc["compute_date"] = _today()
    _rewrite(doc, label)
    return doc


def _wait_all(procs: list[subprocess.Popen[str]], logs: list[Path], model: str) -> None:
    """Wait for every measuring process (``logs``: their stderr files); the first that fails
    stops the others (they would wait at the barrier for it) and its error is raised."""
    running = list(zip(procs, logs, strict=True))
    try:
        while running:
            for proc, log in list(running):
                if proc.poll() is None:
                    continue
                if proc.returncode:
                    last = log.read_text().strip().splitlines()[-1:]
                    raise RuntimeError(f"measuring {model} failed: {last}")
                running.remove((proc, log))
            time.sleep(0.05)
    finally:
        for proc, _ in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


STEP_JITTER_METHOD = (
    "step_jitter_cv: the CV of one process's step time that the others' do not share, from "
    "the processes' timed steps side by side (concurrent_step_s, step k of each started about "
    "together): the mean over k of the variance of step k across the processes, its square "
    "root over the mean step time (runners.fidelity.step_jitter_cv). A slow spell the "
    "processes share is left out: it does not make one rank wait for another."
)


def step_jitter_cv(steps: list[list[float]]) -> float:
    """The per-step compute noise one rank does not share with the others, as a CV: from
    ``steps[p][k]``, process ``p``'s ``k``-th timed step (taken at once), the mean over ``k``
    of the sample variance across processes, square-rooted, over the mean step. 0 for one
    process (nothing to compare). A process slower throughout counts too, on purpose: a
    synchronous step waits for it every time."""
    n = min(len(row) for row in steps)
    if len(steps) < 2 or n == 0:
        return 0.0
    columns = [[row[k] for row in steps] for k in range(n)]
    variance = statistics.fmean(statistics.variance(col) for col in columns)
    mean = statistics.fmean(t for col in columns for t in col)
    return round(variance**0.5 / mean, 6)


def _concurrent_docs(
    model: str, label: str, workers: int, threads: int, repeats: int
) -> list[dict[str, Any]]:
    """``python -m workloads profile MODEL --measure`` in ``workers`` processes at once (their
    timed steps started together), ``threads`` torch threads each: each process's profile."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": str(threads),
    }
    with tempfile.TemporaryDirectory(prefix="lab-calibrate-") as tmp:
        logs = [Path(tmp) / f"p{k}.err" for k in range(workers)]
        errs = [log.open("w") for log in logs]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workloads",
                    "profile",
                    model,
                    "--measure",
                    "--label",
                    f"{label}-p{k}",
                    "--measured-dir",
                    tmp,
                    "--repeats",
                    str(repeats),
                    "--warmup",
                    "3",
                    # the timed steps of every process at once, as real runs' ranks compute
                    "--barrier",
                    f"{Path(tmp) / 'barrier'}:{workers}",
                ],  # fmt: skip
                env=env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                # a file, not a pipe: nothing reads it while they run (progress lines)
                stderr=errs[k],
                text=True,
            )
            for k in range(workers)
        ]
        for err in errs:
            err.close()  # the children have their own
        _wait_all(procs, logs, model)
        return [
            json.loads(workloads.measured_path(model, f"{label}-p{k}", Path(tmp)).read_text())
            for k in range(workers)
        ]


def _measure_models(
    models: tuple[str, ...], label: str, workers: int, threads: int, repeats: int,
    say: Callable[[str], None],
) -> list[str]:  # fmt: skip
    """Each model's measured profile ``<model>@<label>`` (``_measure_concurrently``); their
    paths."""
    written = []
    for model in models:
        say(f"compute: {model} in {workers} processes at once")
        written.append(str(_measure_concurrently(model, label, workers, threads, repeats)))
    return written


def _measure_concurrently(model: str, label: str, workers: int, threads: int, repeats: int) -> Path:
    """``workers`` measurement processes at once; the per-layer median written as one profile."""
    docs = _concurrent_docs(model, label, workers, threads, repeats)
    merged = docs[0]
    merged["label"] = label
    for i, layer in enumerate(merged["layers"]):
        for key in ("fwd_s", "bwd_s", "update_s"):
            layer[key] = round(statistics.median(d["layers"][i][key] for d in docs), 9)
    for key in ("step_fwd_s", "step_bwd_s"):
        merged["source"][key] = round(statistics.median(d["source"][key] for d in docs), 9)
    merged["source"]["concurrent_processes"] = workers
    steps = [d["source"]["step_s"] for d in docs]  # before docs[0]'s (merged's) is taken out
    merged["source"].pop("step_s")
    merged["source"]["concurrent_step_s"] = steps
    merged["source"]["step_jitter_cv"] = step_jitter_cv(steps)
    merged["source"]["method"] += (
        f" Taken in {workers} processes at once (as real runs' ranks share this machine), "
        "their timed steps started together (a barrier after each one's warm-up), each "
        "layer's time and the step times the median over the processes. " + STEP_JITTER_METHOD
    )
    # The measuring command each process ran (with this label), and the one that ran them.
    merged["source"]["command"] = merged["source"]["command"].replace(f"{label}-p0", label)
    merged["source"]["calibrated_by"] = (
        f"python -m runners calibrate --label {label} --models {model} --workers {workers}"
    )
    path = workloads.measured_path(model, label)
    path.parent.mkdir(parents=True, exist_ok=True)
    from workloads.profiler import dumps

    path.write_text(dumps(merged))
    return path


# -- fidelity ----------------------------------------------------------------------------------


def load_testbed(label: str) -> dict[str, Any]:
    path = testbed_path(label)
    if not path.exists():
        raise CalibrationMissing(
            f"no calibration '{label}' ({path}): run `python -m runners calibrate --label {label}`"
        )
    return json.loads(path.read_text())


def network_point(
    testbed: dict[str, Any],
    nominal: float | None,
    added_latency_us: float = 0.0,
    ps_transport: str | None = None,
) -> dict[str, Any]:
    """Calibration ``testbed``'s entry of the network at ``nominal`` Gbit/s (None: loopback);
    with ``added_latency_us``, its values measured with that latency added a way
    (``added_latency``, ``calibrate_latency``) in place of its own: the all-reduce arena's,
    or with ``ps_transport`` the PS arena's on that transport. ``CalibrationMissing``
    naming what to measure where it has no such entry."""
    for point in testbed["network"]:
        if point["nominal_gbps"] == nominal:
            return _with_added_latency(testbed["label"], point, added_latency_us, ps_transport)
    have = ", ".join(
        "loopback" if p["nominal_gbps"] is None else f"{p['nominal_gbps']:g}"
        for p in testbed["network"]
    )
    what = "loopback" if nominal is None else f"{nominal:g} Gbit/s"
    raise CalibrationMissing(
        f"calibration '{testbed['label']}' has no {what} (has: {have}): run `python -m runners "
        f"calibrate --label {testbed['label']} --bandwidths ...` with it"
    )


def _with_added_latency(
    label: str, point: dict[str, Any], latency_us: float, ps_transport: str | None = None
) -> dict[str, Any]:
    """``point`` (a network's entry), with its values measured with ``latency_us`` added a way
    in place of its own (none added: ``point`` itself): the all-reduce arena's, or with
    ``ps_transport`` the PS arena's on it (merged into the network's own PS entry there,
    whose message CPU the entry does not measure: ``LATENCY_PS_METHOD``). The other arena's
    values stay the network's own."""
    if not latency_us:
        return point
    if point["nominal_gbps"] is None:
        raise CalibrationMissing("latency is added on the shaped network only, not on loopback")
    part = None if ps_transport is None else fidelity_transport.ps_entry(ps_transport)
    added = point.get("added_latency", {})

    def measured(entry: dict[str, Any]) -> bool:
        return part in entry if part is not None else "bandwidth_gbps" in entry

    entry = added.get(latency_key(latency_us), {})
    if not measured(entry):
        have = ", ".join(f"{float(k):g}" for k, e in added.items() if measured(e)) or "none"
        arena = "" if part is None else f" for the PS arena on the {ps_transport} transport"
        flag = "" if part is None else f" --ps-transport {ps_transport}"
        raise CalibrationMissing(
            f"calibration '{label}' did not measure {_where(point['nominal_gbps'])} with "
            f"{latency_us:g} us a way added{arena} (added latencies measured: {have}): run "
            f"`python -m runners calibrate --label {label} --latency-only --added-latency-us "
            f"{latency_us:g}{flag}`"
        )
    if part is not None:
        if part not in point:  # the network's own PS entry: ``_ps_point`` names what to run
            return point
        ps = {k: v for k, v in entry[part].items() if k not in ("probe_rounds", "date")}
        return {**point, part: {**point[part], **ps}}
    # the entry's own, not the network's values; the PS arena's parts are not the all-reduce's
    own = ("latency_added_us", "date", "remeasured", "probe_rounds", *LATENCY_PS_PARTS)
    return {**point, **{k: v for k, v in entry.items() if k not in own}}


def _slowdown(point: dict[str, Any], model: str, label: str) -> float:
    try:
        return float(point["overlap_slowdown"][model])
    except KeyError:
        raise CalibrationMissing(
            f"calibration '{label}' did not measure {model}: run `python -m runners calibrate "
            f"--label {label} --models ...` with it"
        ) from None


def _ps_point(
    point: dict[str, Any], model: str, label: str, transport: str = "blocking"
) -> dict[str, Any]:
    """The PS arena's measurements of ``model`` at a network on PS ``transport``
    (``CalibrationMissing`` for a calibration that has none: it is measured by ``calibrate
    --ps-only``, with ``--ps-transport`` for the pipelined one)."""
    ps = point.get(fidelity_transport.ps_entry(transport))
    if ps is None or model not in ps.get("overlap_slowdown", {}):
        flag = "" if transport == "blocking" else f" --ps-transport {transport}"
        what = "" if transport == "blocking" else f" on the {transport} transport"
        raise CalibrationMissing(
            f"calibration '{label}' has no PS arena measurement of {model}{what}: run `python "
            f"-m runners calibrate --label {label} --ps-only{flag}`"
        )
    return ps


LATENCIES = ("busy", "idle", "split", "engine")
DEFAULT_LATENCY = "engine"
# Where each split model takes the latency of collectives on idle ranks from.
_IDLE_LATENCY = {"split": "latency_idle_us", "engine": "latency_engine_us"}


def check_priority(testbed: dict[str, Any]) -> None:
    """``CalibrationMissing`` when the calibration was measured with the communication
    threads at realtime priority and this process may not start such threads: its probes
    and fidelity's real runs would not see what it measured."""
    from .real import priority

    if testbed.get("comm_priority") == "realtime" and (why := priority.why_not_realtime()):
        raise CalibrationMissing(
            f"calibration '{testbed['label']}' was measured with the communication threads at "
            f"realtime priority (its comm_priority), which is not permitted here ({why}): run "
            "as root, or calibrate this machine under another label (python -m runners "
            "calibrate --label NAME --comm-priority normal)"
        )


def _measured(point: dict[str, Any], key: str, model: str, label: str) -> float:
    """An overlap measurement of ``model`` at a network (``CalibrationMissing`` if the
    calibration predates it: ``calibrate --overlap-only`` measures it again)."""
    try:
        return float(point[key][model])
    except KeyError:
        raise CalibrationMissing(
            f"calibration '{label}' has no {key} for {model}: run `python -m runners calibrate "
            f"--label {label} --overlap-only`"
        ) from None


def _issues_inline(
    system: str,
    model: str,
    nominal: float | None,
    testbed: dict[str, Any],
    engine_dispatch: str | None,
) -> bool:
    """Whether the lab's engine issues ``system``'s collectives from the gradient hooks in
    the real run (``runners.real.engine``): ``engine_dispatch`` where the run said
    (``inline`` or ``thread``), else what ``real.dispatch: auto`` gives its plan here."""
    if engine_dispatch is not None:
        return engine_dispatch == "inline"
    from .real import launch

    cluster: dict[str, Any] = {"workers": int(testbed["workers"])}
    if nominal is not None:
        cluster["bandwidth_gbps"] = nominal
    spec = validate({"system": system, "mode": "real", "workload": model, "cluster": cluster})
    return launch.engine_dispatch(spec) == "inline"


def matched_specs(
    system: str,
    model: str,
    nominal: float | None,
    testbed: dict[str, Any],
    iterations: int = 20,
    latency: str = DEFAULT_LATENCY,
    idle_loop: bool | None = None,
    host_cpu: str = "shared",
    engine_dispatch: str | None = None,
    ps_transport: str = "blocking",
    added_latency_us: float = 0.0,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The real spec and its simulated twin (raw, to be validated). ``latency``: which
    calibrated latency the simulator gets, ``busy`` (a small all-reduce's time while the rank
    computes: what an overlapped collective meets), ``idle`` (the fit of all-reduces timed
    on otherwise idle ranks) or ``split`` (all-reduce arena: back-to-back small all-reduces
    timed on idle ranks, ``latency_idle_us``, not the fit; while a compute op runs, the busy
    one and large all-reduces' measured slow-down, ``cluster.busy_latency_us`` and
    ``overlap_comm_slowdown``, which the simulator applies to the bytes alone: an
    approximation, as the probe's ratio is of whole 1 MiB all-reduces, their bytes dominating
    on the shaped networks) or ``engine`` (the default: as ``split``, but the idle ranks'
    latency is that of the same small all-reduces issued by the lab's real engine, as
    training runs issue them, ``latency_engine_us``: the engine's thread hand-offs included).
    A modelling choice, reported with the results. A PS
    system's twin gets the PS arena's own measurements instead (``ps`` of the network: its
    latency, busy or idle in the same sense, and ``split`` and ``engine`` there are the idle
    one, as the PS simulator has one latency and the PS transport is not the all-reduce
    engine; slow-down, aggregation rate and message CPU; the ranks' step noise as the
    all-reduce twins; and ``cluster.pull_rendezvous`` and ``push_rendezvous``, the real
    transport's pulls and pushes, each holding its sender and its receiver, a push's sender
    free once its bytes are handed over, ``cluster.push_buffered``; the slow-down
    integrated over each op's overlap with its worker's transfers, ``cluster.overlap_model``:
    ``TWIN_OVERLAP_MODEL``; every process on the calibration's cores, ``cluster.host_cores``
    with the measured host CPU per message, shared op by op with ``host_cpu`` ``shared``,
    the default, in place of the slow-down and the message CPU, or the floor over them with
    both, ``host_cpu`` ``floor``: ``HOST_CPU_TWINS``), and both twins as many
    server processes and machines as the probe had. On a shaped network, both arenas' twins
    have the NICs' token bucket (``cluster.link_burst_bytes``: the depth
    ``runners.real.testbed`` gives its shaper, in payload bytes; not fitted). An all-reduce
    twin negotiates its reordering plans' decisions as the real engine does (``cluster.
    negotiation``), has its compute slow-down integrated over each op's overlap with the
    collectives (``cluster.overlap_model``: ``TWIN_OVERLAP_MODEL``) and, where the
    calibration measured it and the lab's engine runs the system (not DDP's or Horovod's own
    code), the CPU time each collective takes from the compute (``cluster.
    collective_cpu_us``) and each negotiation round (``cluster.negotiation_cpu_us``), and
    where the calibration's profile timed them, each layer's optimizer update (``cluster.
    optimizer_update``: every real system updates each parameter
    every iteration), and where it measured the ranks' per-step noise, ``cluster.
    step_jitter_cv`` (a synchronous step waits for the slowest rank). The ``horovod`` twin
    gets Horovod's own measured CPU per cycle, where the calibration has it (``horovod`` of
    the network): charged once per cycle that has tensors to fuse, at its negotiation round
    (``cluster.negotiation_cpu_us``; its fused collectives then cost nothing more), and its
    idle loop's measured slow-down (``cluster.background_slowdown``) with ``idle_loop``, by
    default (None) on a run without added latency, where the probe measured it (the loop
    wakes every cycle; with a trip added it wakes once a round, not measured): adopted after
    two sets on 2026-12-07 (13.1 and 18.2 % against 23.1 and 27.4 %, at each run's speed
    15.5 and 20.3 against 24.3 and 28.8 %; ``docs/fidelity-history.md``), where on our second
    machine it had helped only where the machine ran slower than calibrated (2026-11-24);
    ``fidelity`` scores the twin without it as ``mape_without``'s ``background_slowdown``,
    and the twins of runs with added latency with it as ``mape_with``'s. The
    real run gets the
    calibration's communication-thread priority (``real.comm_priority``; calibrations from
    before it: normal). Where the lab's engine runs the system and issues its collectives
    from the gradient hooks (``engine_dispatch`` ``inline``; None: what ``real.dispatch:
    auto``, which the real spec sets, gives the system's plan), the twin gets the engine
    measurements taken that way (``latency_engine_inline_us`` with the ``engine`` latency,
    ``collective_cpu_inline_us``; ``CalibrationMissing`` for a calibration from before them:
    ``calibrate --overlap-only``), else the communication thread's.

    ``ps_transport`` (PS systems' alone: an all-reduce system has no PS transport, and a set
    of both arenas gives it to its PS systems; ``real.ps_transport``): ``pipelined`` gives
    the real run the pipelined transport and its twin the measurements taken on it
    (``ps_pipelined`` of the network; ``CalibrationMissing`` where the calibration has none:
    ``calibrate --ps-only --ps-transport pipelined``) and no rendezvous: a reconstruction,
    as its receives are posted ahead (up to ``runners.real.ps.PIPELINE_DEPTH`` a peer), so
    that a message waits for its link and its sender's earlier messages, not for its
    receiver; the twin's transfers then hold their links as the PS simulator's default
    transport does; each worker a group of its own (``cluster.jitter_groups``: its own
    transfers and step noise, as the rendezvous twins' workers are).

    ``added_latency_us`` (shaped networks; ``cluster.latency_us`` of the real run: netem or
    the delay line add it): the twin takes the network's values measured with that latency
    added (``network_point``: an all-reduce system's the alpha-beta fit and the overlap
    entries, ``calibrate --latency-only``; a PS system's the PS transport's probes on
    ``ps_transport``, ``calibrate --latency-only --ps-transport``, with the message's CPU
    from the network's own: ``LATENCY_PS_METHOD``), not the network's own plus the latency
    (an all-reduce twin built that way missed eight such runs by 11.2 %,
    ``docs/fidelity-history.md``, 2026-12-06); the rest as without it.
    ``CalibrationMissing`` where the calibration did not measure it. There the ``ddp`` twin
    (``LONE_SYSTEMS``) also takes the entry's network probe's all-reduces as a lone
    collective's times (``cluster.lone_allreduce``: DDP's one bucket a step runs alone, and
    with latency added a lone gloo all-reduce pays about two trips a ring step, a stream's
    one; adopted after three sets, ``docs/fidelity-history.md``, 2026-12-07; without added
    latency the points made it slower than its runs, and ``fidelity`` scores that apart:
    ``mape_with``'s ``lone``; with it, the twin without them: ``stream``), and, with
    ``latency`` ``engine``, the ``horovod`` twin (``TRIPS_SYSTEMS``) its all-reduces at the
    entry's back-to-back plain all-reduces' latency (``latency_idle_us``: two trips a ring
    step) and its negotiation rounds at the engine stream's (``latency_engine_us``: one
    trip, busy or idle, ``cluster.round_latency_us``), as delay-line traces of Horovod show
    them (adopted after two sets, ``docs/fidelity-history.md``, 2026-12-07; the twin before,
    every collective and round at the engine stream's: ``stream``)."""
    arena_ps = registry.get(system).arena == "ps"
    point = network_point(testbed, nominal, added_latency_us, ps_transport if arena_ps else None)
    if latency not in LATENCIES:
        raise ValueError(f"latency must be one of {', '.join(LATENCIES)} (got {latency!r})")
    if host_cpu not in HOST_CPU_TWINS:
        raise ValueError(f"host_cpu must be one of {', '.join(HOST_CPU_TWINS)} (got {host_cpu!r})")
    label = testbed["label"]
    ps = None
    interference: dict[str, Any] = {}
    engine = not arena_ps and system not in OWN_FRAMEWORKS
    inline = engine and _issues_inline(system, model, nominal, testbed, engine_dispatch)
    if arena_ps:  # the PS arena's own measurements
        ps = _ps_point(point, model, label, ps_transport)
        slowdown = float(ps["overlap_slowdown"][model])
        kind = "busy" if latency == "busy" else "idle"
        latency_us = float(ps[f"latency_{kind}_us"][model])
    else:
        slowdown = _slowdown(point, model, label)
        if latency == "idle":
            latency_us = float(point["latency_us"])
        else:
            busy_us = _measured(point, "latency_busy_us", model, label)
            latency_us = busy_us
            if latency in _IDLE_LATENCY:
                key = _IDLE_LATENCY[latency]
                if inline and latency == "engine":  # the hooks issue, not the thread
                    key = "latency_engine_inline_us"
                latency_us = _measured(point, key, model, label)
                interference = {
                    "busy_latency_us": busy_us,
                    "overlap_comm_slowdown": _measured(point, "comm_slowdown", model, label),
                }
                if system in TRIPS_SYSTEMS and added_latency_us and latency == "engine":
                    # its all-reduces two trips a ring step, its rounds one (its traces)
                    interference["round_latency_us"] = latency_us
                    latency_us = _measured(point, "latency_idle_us", model, label)
    if idle_loop is None:  # the measured idle loop where the probe measured it
        idle_loop = not added_latency_us
    workers = int(testbed["workers"])
    real_cluster: dict[str, Any] = {"workers": workers}
    if nominal is not None:
        real_cluster["bandwidth_gbps"] = nominal
    if added_latency_us:
        real_cluster["latency_us"] = added_latency_us
    real = {
        "system": system,
        "mode": "real",
        "workload": model,
        "cluster": real_cluster,
        "iterations": iterations,
        "warmup_iterations": 3,
        "real": {
            "network": "loopback" if nominal is None else "shaped",
            "threads": int(testbed["threads"]),
            # the calibration's (runners.real.priority): the probes measured what these meet
            "comm_priority": testbed.get("comm_priority", "normal"),
            # the lab's engine's (``_issues_inline``); the probes measured both ways
            **({"dispatch": "auto"} if engine else {}),
        },
    }
    sim = {
        "system": system,
        "workload": model,
        "cluster": {
            "workers": workers,
            "bandwidth_gbps": point["bandwidth_gbps"],
            "latency_us": latency_us,
            "gpu": f"measured:{testbed['label']}",
            "compute_jitter_cv": 0.0,
            "overlap_slowdown": slowdown,
        },
        "iterations": iterations,
        "warmup_iterations": 3,
    }
    if nominal is not None:  # the shaper's token bucket, in payload bytes
        sim["cluster"]["link_burst_bytes"] = _payload_burst(nominal, point["bandwidth_gbps"])
    if system in LONE_SYSTEMS and added_latency_us:  # its collectives alone: the probe's times
        sim["cluster"]["lone_allreduce"] = [
            list(p) for p in _probe_points(testbed, nominal, added_latency_us)
        ]
    if ps is not None:
        # The probe's layout: its server processes, as many server machines (PSLD, which may
        # scale out to every machine, then starts no more processes than the probe had).
        servers = int(ps["servers"])
        for cluster in (real_cluster, sim["cluster"]):
            cluster.update(ps=servers, servers=servers)
        sim["cluster"]["server_agg_gbps"] = float(ps["server_agg_gbps"])
        if "server_agg_fixed_us" in ps:  # older calibrations timed the sum alone: none
            sim["cluster"]["server_agg_fixed_us"] = float(ps["server_agg_fixed_us"])
        if "message_cpu_us" in ps:  # calibrations from before it was measured: none
            sim["cluster"]["message_cpu_us"] = float(ps["message_cpu_us"])
        if "host_message_cpu_us" in ps:  # every process on this host's cores, as the real run
            sim["cluster"].update(
                host_cores=_host_cores(testbed),
                host_message_cpu_us=float(ps["host_message_cpu_us"]),
                host_cpu_ns_per_byte=float(ps["host_cpu_ns_per_byte"]),
            )
            if host_cpu == "shared":  # op by op (``HOST_CPU_TWINS``), not the floor
                sim["cluster"]["host_cpu_model"] = twin_host_cpu_model(testbed)
                # the shared cores are what slows the compute beside the messages
                sim["cluster"]["overlap_slowdown"] = 0.0
                sim["cluster"].pop("message_cpu_us", None)
        if ps_transport == "blocking":
            # the real transport's pulls and pushes: a sender and a receiver held together
            sim["cluster"]["pull_rendezvous"] = True
            sim["cluster"]["push_rendezvous"] = True
            # ... a push's sender free once its bytes are handed over (a gloo send on TCP)
            sim["cluster"]["push_buffered"] = True
        else:  # receives posted ahead: no rendezvous (a reconstruction, above)
            real["real"]["ps_transport"] = ps_transport
            sim["cluster"]["jitter_groups"] = workers
        # the probe's slow-down is against pushes that never pause: an op pays it only while
        # a transfer on its worker's links overlaps it (``TWIN_OVERLAP_MODEL``)
        sim["cluster"]["overlap_model"] = TWIN_OVERLAP_MODEL
        _step_jitter(sim, _profile(model, label))
    else:
        sim["cluster"].update(
            # measured where the calibration has them; older ones: the ring's 0.5 each
            {k: float(point[k]) for k in SPLIT_COSTS if k in point},
            cpu_collectives=True,  # the real runs' gloo (Horovod's cycles wait for them)
            negotiation=True,  # the real engine negotiates reordering plans' decisions
            # the probe's slow-down is against collectives that never pause: an op pays it
            # only while one overlaps it (``TWIN_OVERLAP_MODEL``)
            overlap_model=TWIN_OVERLAP_MODEL,
            **interference,
        )
        cpu = point.get("collective_cpu_us", {}).get(model)
        if cpu is not None and inline:  # issued from the hooks: measured that way
            cpu = _measured(point, "collective_cpu_inline_us", model, label)
        if cpu is not None and engine:  # the lab's engine runs it
            sim["cluster"]["collective_cpu_us"] = float(cpu)
            rounds = point.get("negotiation_cpu_us", {}).get(model)
            if rounds is not None:  # calibrations from before it was measured: a collective's
                sim["cluster"]["negotiation_cpu_us"] = float(rounds)
        own = point.get("horovod")
        if system == "horovod" and own is not None:  # Horovod's own, where measured
            # the probe's cost is a whole cycle's (its negotiation and its collective): the
            # twin charges it once per cycle, at its negotiation round
            sim["cluster"]["negotiation_cpu_us"] = float(own["cycle_cpu_us"])
            idle = float(own["idle_slowdown"].get(model, 0.0))
            if idle_loop and idle > 0:  # a faster step beside it is the machine's noise: none
                sim["cluster"]["background_slowdown"] = idle
        profile = _profile(model, label)
        # every real system updates each parameter (profiles from before the updates were
        # timed have none)
        if profile is not None and any(t > 0 for t in profile.update_s):
            sim["cluster"]["optimizer_update"] = True
        _step_jitter(sim, profile)
    return real, sim


def _host_cores(testbed: dict[str, Any]) -> int:
    """The cores a PS twin's processes share (``cluster.host_cores``): those the calibration's
    ranks could use (its ``host``), this machine's for a calibration without them."""
    return int(testbed.get("host", {}).get("usable_cpus") or usable_cpus())


def _step_jitter(sim: dict[str, Any], profile: workloads.MeasuredProfile | None) -> None:
    """The ranks' steps differ; a synchronous step waits for the slowest (``cluster.
    step_jitter_cv``, both arenas, from the calibration's ``profile``; profiles from before
    it was measured: none)."""
    jitter = 0.0 if profile is None else float(profile.source.get("step_jitter_cv", 0.0))
    if jitter:
        sim["cluster"]["step_jitter_cv"] = jitter


def _profile(model: str, label: str) -> workloads.MeasuredProfile | None:
    """The calibration's measured profile of ``model`` (None if it has none)."""
    try:
        return workloads.load_measured(model, label)
    except ValueError:
        return None


# The compute check: each model's step timed again before, between the rounds of and after
# fidelity's real runs, as the calibration timed it, against the calibration's. A machine
# whose speed has moved since it was calibrated (a busier host, another machine) makes the
# twins' compute stale, and the report's error then measures the machine's drift as much as
# the simulator's model.
COMPUTE_DRIFT_PCT = 10.0  # beyond this the report says to measure again (the MAPE target)
# The PS twins' host CPU per iteration this far from the real runs' (the median over rows):
# the report says to measure the PS transport again (its CPU per message moved by up to 28 %
# within hours on our machine, 2026-11-29, which ``fidelity`` does not check during a set)
HOST_CPU_HINT_PCT = 5.0


def interference_lines(result: dict[str, Any]) -> list[str]:
    """A report's lines on the all-reduce twins' interference measurements: their dates
    (``interference_dates``) and the check before the real runs (``interference_check``),
    where it has them."""
    lines = []
    horovod = any(c["system"] == "horovod" for c in result["configs"])
    added = result.get("added_latency_us", 0.0)
    if result.get("interference_dates"):
        dates = result["interference_dates"]
        lines.append(fidelity_interference.dates_line(dates, result["label"], horovod, added))
    if result.get("interference_check"):
        checks = result["interference_check"]
        lines.append(
            fidelity_interference.interference_line(checks, result["label"], horovod, added)
        )
    return lines


def _moved(entry: dict[str, Any], key: str) -> bool:
    """Whether a compute check entry's move ``key`` (a percentage) is past
    ``COMPUTE_DRIFT_PCT`` (an entry without it has not moved)."""
    return abs(entry.get(key, 0.0)) > COMPUTE_DRIFT_PCT


def calibrated_step(model: str, label: str) -> tuple[float, int] | None:
    """The median training step (forward + backward + updates) of ``model`` in the
    calibration ``label``, over its processes' timed steps (``concurrent_step_s``), and how
    many steps each process timed; None for a calibration without them."""
    profile = _profile(model, label)
    steps = profile.source.get("concurrent_step_s") if profile is not None else None
    if not steps:
        return None
    return statistics.median(t for row in steps for t in row), len(steps[0])


def step_now_s(model: str, workers: int, threads: int, repeats: int) -> float:
    """The median training step of ``model`` now, timed as the calibration times it
    (``workers`` processes at once, ``threads`` torch threads each, ``repeats`` timed steps
    each; nothing written)."""
    docs = _concurrent_docs(model, "check", workers, threads, repeats)
    return statistics.median(t for d in docs for t in d["source"]["step_s"])


def _not_kept(what: str, journal: Path | None, detail: str = "") -> str:
    """``--rescore``'s error: what the set needs that the journal does not hold."""
    return (
        f"the journal {journal} holds no {what} this set needs{detail}: rescore a finished set's "
        "journal with the systems, models, bandwidths, --repeats, --iterations and checks it "
        "was made with (--no-*-check where it was made without one), or make the rest with "
        "--resume"
    )


def compute_drift(
    models: tuple[str, ...], label: str, testbed: dict[str, Any], when: str,
    drift: dict[str, dict[str, Any]],
) -> None:  # fmt: skip
    """Time each of ``models`` now (``when``: "before" or "after" the real runs, or
    "between" two rounds of them) into ``drift[model]``: the calibration's step
    (``calibrated_step_s``), ``{when}_step_s`` and ``{when}_pct`` (over the calibration's,
    minus 1, in percent; "between" appends to the lists ``between_step_s`` and
    ``between_pct``), ``drift_pct``, the largest move of every check so far (by its size,
    with its sign), and ``checked_scale``, the geometric mean of every step timed so far
    over the calibration's (the twins scored with the machine's measured speed:
    ``cluster.compute_scale``). A model the calibration has no step times for gets
    ``missing``; one whose measurement fails ``{when}_error`` ("between": appended to
    ``between_errors``; the real runs' results are kept either way)."""
    workers, threads = int(testbed["workers"]), int(testbed["threads"])
    for model in models:
        calibrated = calibrated_step(model, label)
        if calibrated is None:
            drift[model] = {"missing": "the calibration has no step times for it"}
            continue
        step, repeats = calibrated
        entry = drift.setdefault(model, {"calibrated_step_s": step})
        try:
            now = step_now_s(model, workers, threads, repeats)
        except RuntimeError as err:  # a measuring process failed (``_wait_all``)
            if when == "between":
                entry.setdefault("between_errors", []).append(str(err))
            else:
                entry[f"{when}_error"] = str(err)
            continue
        if when == "between":
            entry.setdefault("between_step_s", []).append(now)
        else:
            entry[f"{when}_step_s"] = now
        _drift_moves(entry)


def _drift_moves(entry: dict[str, Any]) -> None:
    """A ``compute_drift`` entry's moves from the steps it timed and its
    ``calibrated_step_s``: ``before_pct``, ``between_pct``, ``after_pct``, ``drift_pct`` and
    ``checked_scale`` (none where nothing was timed)."""
    step = entry["calibrated_step_s"]
    for when in ("before", "after"):
        if f"{when}_step_s" in entry:
            entry[f"{when}_pct"] = 100.0 * (entry[f"{when}_step_s"] / step - 1.0)
    if "between_step_s" in entry:
        entry["between_pct"] = [100.0 * (now / step - 1.0) for now in entry["between_step_s"]]
    moves = [entry[k] for k in ("before_pct", "after_pct") if k in entry]
    moves += entry.get("between_pct", [])
    timed = [entry[k] for k in ("before_step_s", "after_step_s") if k in entry]
    timed += entry.get("between_step_s", [])
    if timed:
        entry["drift_pct"] = max(moves, key=abs)
        entry["checked_scale"] = statistics.geometric_mean(timed) / step


def drift_against(
    drift: dict[str, dict[str, Any]], steps: dict[str, tuple[float, int] | None]
) -> dict[str, dict[str, Any]]:
    """Kept compute checks (a journal's ``compute_drift``) against the calibration as it is
    now (``steps``: each model's ``calibrated_step``): each model's ``calibrated_step_s`` and
    moves again, its timed steps as they were (a set resumed after ``calibrate
    --compute-only``, or rescored against another calibration, scores its
    ``compute_checked`` twins with the speed measured over the calibration that simulates
    them). A model the calibration has no step times for keeps what it was compared with."""
    for model, entry in drift.items():
        calibrated = steps.get(model)
        if calibrated is not None and "calibrated_step_s" in entry:
            entry["calibrated_step_s"] = calibrated[0]
            _drift_moves(entry)
    return drift


def _payload_burst(nominal_gbps: float, fitted_gbps: float) -> int:
    """The testbed's token bucket (``tc htb`` counts frames, headers included) in the payload
    bytes the simulator counts: its depth times the fitted bandwidth's share of the nominal."""
    from .real import testbed as tb

    return int(tb.burst_bytes(nominal_gbps) * min(1.0, fitted_gbps / nominal_gbps))


def fidelity(
    label: str = DEFAULT_LABEL,
    systems: tuple[str, ...] = DEFAULT_SYSTEMS,
    models: tuple[str, ...] = DEFAULT_MODELS,
    bandwidths: tuple[float | None, ...] = DEFAULT_BANDWIDTHS,
    iterations: int = 20,
    on_config: Callable[[dict[str, Any]], None] | None = None,
    latency: str = DEFAULT_LATENCY,
    repeats: int = DEFAULT_REPEATS,
    progress: Callable[[str], None] | None = None,
    compute_check: bool = True,
    journal: Path | None = None,
    resume: bool = False,
    check_runs: bool = False,
    transport_check: bool = True,
    ps_transport: str = "blocking",
    added_latency_us: float = 0.0,
    interference_check: bool = True,
    rescore: bool = False,
) -> dict[str, Any]:
    """Run every configuration for real and simulated; the report (see the module docstring).

    ``repeats`` real runs per configuration, in rounds (every configuration once, then again),
    so that a slow spell of a shared machine falls on several configurations' runs rather than
    on all of one's. The real iteration time is the median of the runs' (each the mean of its
    measured iterations); the row keeps every run's (``real_runs_s``), and says whether the
    simulator's prediction lies within their range (``sim_within_runs``; None with one run).
    ``wall_s`` is the configuration's real runs' wall time, all rounds together.
    ``on_config`` gets each row once its last run is done. ``compute_check``: time each
    model's step before, between the rounds of and after the real runs, as the calibration
    did, report how far it has moved from the calibration's (``compute_drift``) and score the
    runs with twins given the speed measured (``mape_with``'s ``compute_checked``, each row's
    ``sim_compute_checked_s``: rows are complete in the report, not in ``on_config``).

    ``journal``: keep each real run and compute check there as it finishes
    (``runners.fidelity_journal``); with ``resume``, reuse the runs and checks it holds and
    make only the rest (``SpecError`` naming ``--resume`` where it cannot be read). The report
    says how many runs came from it (``journal``).

    ``check_runs``: also time the model's step just before and just after every real run, as
    the compute check does (one check serves as the next run's "before" where that run is of
    the same model and nothing ran between), and score each run against a twin given the
    geometric mean of its two checks over the calibration's step (``mape_with``'s
    ``run_checked``, each row's ``sim_run_checked_s``: the median of its runs' twins; the
    rows keep ``run_checks_s``). On a machine whose speed moves within minutes, what is left
    is the simulator's error given the compute of the moment rather than of the set.

    ``transport_check``: where the set has PS systems, also probe the PS transport's CPU per
    message at each of their networks, as the calibration does, at the compute check's
    stages (``fidelity_transport``: about 30 s a network each time), report how far it has
    moved (``transport_check``) and score the same runs with PS twins given it
    (``mape_with``'s ``transport_checked``, ``transport_compute_checked`` with the compute
    check's speed too and, with ``check_runs``, ``transport_checked_run_checked``; rows'
    ``sim_transport_checked_s`` and so on).

    ``ps_transport``: the PS systems' transport (``real.ps_transport``; ``fidelity
    --ps-transport``): their real runs, twins (``matched_specs``) and transport checks on it;
    the report says which (``ps_transport``).

    ``added_latency_us``: every real run with that latency added a way on the shaped network
    (``cluster.latency_us``; ``fidelity --added-latency-us``), its twin from the calibration's
    measurements with it (``matched_specs``); all-reduce systems and shaped networks only
    (``CalibrationMissing`` otherwise); the report says it (``added_latency_us``).

    ``interference_check``: where the set has all-reduce systems, probe a collective's CPU
    at each of their networks before the real runs, as the calibration does
    (``fidelity_interference``: about 20 s a network), and report how far it has moved
    (``interference_check``), warning at once where it moved past ``fidelity_interference.
    MOVED_PCT``; not made for a set resumed from a journal that holds runs but no check.

    ``rescore`` (with ``journal``): score a finished set's journal and make nothing real,
    against calibration ``label``'s twins, which may be another calibration than the one the
    runs were made against (where its real specs for them are the same: the workers,
    threads and priority); its kept checks are compared with ``label``'s values. Every run
    and check the set needs must be in the journal (``SpecError`` naming ``--rescore`` and
    what is missing, before anything is scored). The report's ``journal`` names the
    calibration the runs were made with (``made_with``)."""
    from .real import launch

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1 (got {repeats})")
    say = progress or (lambda message: None)
    testbed = load_testbed(label)
    check_priority(testbed)
    plan = [(m, b, s) for m in models for b in bandwidths for s in systems]
    matched = functools.partial(
        matched_specs, ps_transport=ps_transport, added_latency_us=added_latency_us
    )
    pairs = [(cfg, matched(cfg[2], cfg[0], cfg[1], testbed, iterations, latency)) for cfg in plan]
    checked = [(cfg, validate(r), validate(s)) for cfg, (r, s) in pairs]  # all before any run
    others = _other_twins(plan, testbed, iterations, latency, ps_transport, added_latency_us)
    # with Horovod's idle loop where the twin lacks it (``mape_with``'s ``background_slowdown``)
    idle = [
        None if twin == sim else twin
        for (_, _, sim), twin in zip(
            checked,
            (validate(matched(s, m, b, testbed, iterations, latency, idle_loop=True)[1])
             for m, b, s in plan),
            strict=True,
        )
    ]  # fmt: skip
    # with the floor over the host's cores (``mape_with``'s ``floor``; PS twins alone)
    floor = [
        _floor_twin(s, m, b, testbed, iterations, latency, sim, ps_transport, added_latency_us)
        for (m, b, s), _, sim in checked
    ]
    # the floor's twin charging a push's CPU as it is handed over (``mape_with``'s ``handover``)
    handover = [None if twin is None else handover_twin(twin) for twin in floor]
    # with added latency: the twin of the network's own values plus the latency per ring step
    # (``mape_with``'s ``own_plus_added``: the reconstruction before ``calibrate --latency-only``)
    own_plus = [
        own_plus_added_twin(
            validate(
                matched_specs(s, m, b, testbed, iterations, latency, ps_transport=ps_transport)[1]
            ),
            added_latency_us,
        )
        if added_latency_us
        else None
        for m, b, s in plan
    ]
    # DDP's and Horovod's twins with the probe's lone all-reduce times where they lack them
    # (``mape_with``'s ``lone``), and without them where they have them (``stream``):
    # ``cluster.lone_allreduce``
    lone = [lone_twin(s, sim, testbed, b, added_latency_us) for (_, b, s), _, sim in checked]
    stream = [stream_twin(sim) for _, _, sim in checked]
    # Horovod's twins with its background loop's rounds free-running (``free_rounds``)
    rounds = [round_loop_twin(sim) for _, _, sim in checked]
    # the variants simulated with each row as ``sim_<name>_s`` alone (``floor`` and
    # ``handover`` keep more of their metrics, below)
    plain = (("idle_loop", idle), ("own_plus_added", own_plus), ("lone", lone),
             ("stream", stream), ("free_rounds", rounds))  # fmt: skip
    if rescore and journal is None:
        raise ValueError("rescore needs the journal to score")
    for _, real_spec, _ in checked if not rescore else ():  # nothing real runs in a rescore
        launch.preflight(real_spec)
    raw_reals = [r for _, (r, _) in pairs]
    steps = _run_check_steps(models, label) if check_runs else {}
    book = None
    if journal is not None:
        book = Journal(
            journal, label, resume or rescore, *calibration_prints(label, testbed),
            read_only=rescore, any_label=rescore,
        )  # fmt: skip
    if book is not None and rescore:
        say(f"rescoring {book.path}: {book.runs} real run(s) made against calibration "
            f"{book.made_with}, against the twins of calibration {label}")  # fmt: skip
        if not book.runs:
            raise SpecError("--rescore", _not_kept("real run", journal))
    elif book is not None and resume:
        say(f"resuming from {book.path}: it holds {book.runs} real run(s)")
        if book.calibration_changed:
            say(CALIBRATION_CHANGED.format(label=label))
    elif book is not None:
        say(f"journal: {book.path} (each real run kept as it finishes; if the set stops, the "
            "same command with --resume goes on from there)")  # fmt: skip
    networks = (
        fidelity_transport.transport_networks(systems, bandwidths, testbed, ps_transport)
        if transport_check
        else ()
    )
    transport: fidelity_transport.TransportChecks = {}

    def check_transport(stage: str) -> bool:
        """The transport check at ``stage`` (the journal's, where it has it); whether it
        probed now."""
        nonlocal transport
        if not networks:
            return False
        keys = [network_key(b) for b in networks]
        # the journal's stages of another transport are not this one's
        stage_key = stage if ps_transport == "blocking" else f"{stage}@{ps_transport}"
        kept = None if book is None else book.transport_stage(stage_key, keys)
        if kept is not None:
            transport = fidelity_transport.against(kept, testbed, ps_transport)
            return False
        if rescore:
            raise SpecError("--rescore", _not_kept(f"transport check {stage!r}", journal))
        fidelity_transport.check_transport(networks, testbed, stage, transport, say, ps_transport)
        if book is not None:
            book.add_transport_stage(stage_key, transport)
        return True

    # each model's calibrated step, what the journal's compute checks are compared with
    reread = book is not None and (resume or rescore) and compute_check
    steps_now = {m: calibrated_step(m, label) for m in models} if reread else {}

    def kept_drift(stage: str, what: str) -> dict[str, dict[str, Any]] | None:
        """The journal's compute checks after ``stage``, compared with the calibration as it
        is now (None: the journal has none, so the set times them; ``SpecError`` naming
        ``what`` in a rescore)."""
        kept = None if book is None else book.stage(stage, models)
        if kept is not None:
            return drift_against(kept, steps_now)
        if rescore:
            raise SpecError("--rescore", _not_kept(what, journal))
        return None

    drift: dict[str, dict[str, Any]] | None = {} if compute_check else None
    kept_before = None if drift is None else kept_drift("before", "compute check before the runs")
    if kept_before is not None:
        drift = kept_before
        say("compute check before the real runs: the journal's")
    elif drift is not None:
        say("compute check: each model's step timed as the calibration timed it")
        compute_drift(models, label, testbed, "before", drift)
        if book is not None:
            book.add_stage("before", drift)
        for model, entry in drift.items():
            if "before_pct" in entry:
                say(f"compute check: {model} {entry['before_pct']:+.1f}% against the calibration")
        if any(_moved(entry, "before_pct") for entry in drift.values()):
            say(
                f"compute check: more than {COMPUTE_DRIFT_PCT:g}% off before the real runs; the "
                "error will measure that as much as the simulator (stop here and run python -m "
                f"runners calibrate --label {label} --compute-only first, or let it go on; "
                "--check-each-run scores each run with the speed timed beside it)"
            )
    check_transport("before")
    interference = _check_interference(
        systems, bandwidths, testbed, added_latency_us, book, say, interference_check
    )
    runs: list[list[Any]] = [[] for _ in checked]
    run_checks: list[list[list[float | None] | None]] = [[] for _ in checked]
    # (model, step) of the check taken last in this sitting, nothing run since (None: none)
    last_check: tuple[str, float | None] | None = None

    def check_now(model: str) -> float | None:
        """(``check_runs``.) ``model``'s step now, as the compute check times it (None: the
        measurement failed; the run is kept, unchecked)."""
        nonlocal last_check
        try:
            now: float | None = step_now_s(
                model, int(testbed["workers"]), int(testbed["threads"]), steps[model][1]
            )
        except RuntimeError as err:  # a measuring process failed (``_wait_all``)
            say(f"per-run compute check of {model} failed: {err}")
            now = None
        last_check = (model, now)
        return now

    failures: list[list[str]] = [[] for _ in checked]
    walls = [0.0] * len(checked)
    configs = []
    for round_ in range(repeats):
        if repeats > 1:
            say(f"round {round_ + 1}/{repeats} of the real runs")
        for k, ((model, nominal, system), real_spec, sim_spec) in enumerate(checked):
            kept = None if book is None else book.kept(round_, system, model, nominal, raw_reals[k])
            if book is not None:  # tries that stopped an earlier sitting here
                failures[k].extend(book.failed(round_, system, model, nominal))
            if kept is not None:
                runs[k].append(kept)
                run_checks[k].append(kept.checks)
                walls[k] += kept.wall_s
                failures[k].extend(kept.failures)
                last_check = None  # a fresh sitting's run needs its own check before it
            elif rescore:
                run = f"{system}/{model}/{network_name(nominal)} run of round {round_ + 1}"
                other = book.other_spec(round_, system, model, nominal, raw_reals[k])
                detail = (
                    f" (its run was made with another real spec than calibration {label} "
                    f"gives: {other})"
                    if other
                    else ""
                )
                raise SpecError("--rescore", _not_kept(run, journal, detail))
            else:
                around: list[float | None] | None = None
                if check_runs:  # the check just taken, where nothing ran since
                    just = last_check[1] if last_check and last_check[0] == model else None
                    around = [just if just is not None else check_now(model)]
                started = time.perf_counter()
                tried = len(failures[k])
                try:
                    result = _real_run(real_spec, f"{system}/{model}", failures[k])
                except launch.RealRunError:
                    if book is not None:
                        book.add_failed(round_, system, model, nominal, failures[k][tried:])
                    raise
                wall = time.perf_counter() - started
                walls[k] += wall
                if around is not None:
                    around.append(check_now(model))
                runs[k].append(result)
                run_checks[k].append(around)
                if book is not None:
                    book.add_run(
                        round_, system, model, nominal, raw_reals[k], result, wall,
                        failures[k][tried:], checks=around,
                    )  # fmt: skip
            if round_ == repeats - 1:
                row = _row(system, model, nominal, runs[k], _twin(real_spec, sim_spec))
                row.update(wall_s=walls[k], failed_attempts=failures[k])
                if floor[k] is not None:  # a PS twin with the floor over its host's cores
                    metrics = _twin(real_spec, floor[k]).metrics
                    row["sim_floor_s"] = metrics["iteration_time_s"]
                    row["sim_floor_compute_s"] = metrics["compute_time_s"]
                    row["sim_floor_cpu_cores"] = metrics["host_cpu_s"] / metrics["iteration_time_s"]
                if handover[k] is not None:  # a PS twin charging a push's CPU at handover
                    metrics = _twin(real_spec, handover[k]).metrics
                    row["sim_handover_s"] = metrics["iteration_time_s"]
                    row["sim_handover_compute_s"] = metrics["compute_time_s"]
                for name, twins in plain:
                    if twins[k] is not None:
                        twin = _twin(real_spec, twins[k])
                        row[f"sim_{name}_s"] = twin.metrics["iteration_time_s"]
                configs.append(row)
                if on_config is not None:
                    on_config(row)
        if drift is not None and round_ < repeats - 1:
            stage = f"between-{round_}"
            kept = kept_drift(stage, f"compute check {stage!r}")
            if kept is not None:
                drift = kept
            else:
                last_check = None  # every model timed: not a run's check
                compute_drift(models, label, testbed, "between", drift)
                if book is not None:
                    book.add_stage(stage, drift)
            moves = [
                f"{model} {entry['between_pct'][-1]:+.1f}%"
                for model, entry in drift.items()
                if len(entry.get("between_pct", ())) == round_ + 1
            ]
            say(f"compute check between rounds: {', '.join(moves) or 'not timed'}")
        if round_ < repeats - 1 and check_transport(f"between-{round_}"):
            last_check = None  # a probe ran since: not a run's check
    kept_after = None if drift is None else kept_drift("after", "compute check after the runs")
    if kept_after is not None:
        drift = kept_after
    elif drift is not None:
        say("compute check after the real runs")
        compute_drift(models, label, testbed, "after", drift)
        if book is not None:
            book.add_stage("after", drift)
    check_transport("after")
    real_specs = [real_spec for _, real_spec, _ in checked]
    sims = [sim_spec for _, _, sim_spec in checked]

    def rescored(twins: list[RunSpec]) -> float:
        """The same real runs' MAPE against other twins."""
        return statistics.fmean(
            _ape(_twin(real_spec, twin).metrics["iteration_time_s"], row["real_iteration_s"])
            for real_spec, twin, row in zip(real_specs, twins, configs, strict=True)
        )

    by_latency = {latency: statistics.fmean(c["ape_pct"] for c in configs)}
    for kind, twins in others.items():  # the other latency models' twins
        by_latency[kind] = rescored(twins)
    without = {}
    for name in ABLATIONS:  # the twins without one modelled effect
        default = getattr(CommCluster, name)
        if all(getattr(s.cluster, name) == default for s in sims):
            continue  # no twin has it
        without[name] = rescored(
            [dataclasses.replace(s, cluster=dataclasses.replace(s.cluster, **{name: default}))
             for s in sims]
        )  # fmt: skip
    with_: dict[str, float] = {}
    scales = {m: d["checked_scale"] for m, d in (drift or {}).items() if "checked_scale" in d}
    if scales and all(row["workload"] in scales for row in configs):  # else the text says why
        for real_spec, sim, row in zip(real_specs, sims, configs, strict=True):
            twin = _scaled_twin(sim, scales[row["workload"]])
            row["sim_compute_checked_s"] = _twin(real_spec, twin).metrics["iteration_time_s"]
        with_["compute_checked"] = _mape_of(configs, "sim_compute_checked_s")
    if check_runs:
        for k, (real_spec, sim, row) in enumerate(zip(real_specs, sims, configs, strict=True)):
            _run_checked(row, real_spec, sim, run_checks[k], steps[row["workload"]][0])
        if all("sim_run_checked_s" in row for row in configs):  # else the text says why
            with_["run_checked"] = _mape_of(configs, "sim_run_checked_s")
    # PS twins with the floor over their host's cores (``floor``), and those charging a
    # push's CPU as it is handed over (``handover``); all simulated with the rows
    for name, twins in (("floor", floor), ("handover", handover), *plain):
        if not any(twin is not None for twin in twins):
            continue
        if check_runs:  # at each run's speed, as ``run_checked``
            for k, (real_spec, twin, row) in enumerate(
                zip(real_specs, twins, configs, strict=True)
            ):
                if twin is not None:
                    step = steps[row["workload"]][0]
                    times = _run_checked_times(real_spec, twin, run_checks[k], step)
                    if times is not None:
                        row[f"sim_{name}_run_checked_s"] = statistics.median(times)
        _score_variant(configs, name, with_)
    if transport:
        checks = run_checks if check_runs else None
        _transport_checked(configs, real_specs, sims, transport, scales, with_, checks, steps)
    priority = testbed.get("comm_priority", "normal")
    result = report(
        configs,
        label,
        latency,
        by_latency,
        priority,
        mape_without=without,
        compute_drift=drift,
        mape_with=with_,
        transport_check=transport or None,
        interference_check=interference,
    )
    if any(registry.get(s).arena == "ps" for s in systems):
        result["ps_transport"] = ps_transport
    if added_latency_us:
        result["added_latency_us"] = added_latency_us
    result["interference_dates"] = fidelity_interference.interference_dates(
        testbed, systems, _today(), added_latency_us
    )
    if book is not None:
        made = sum(len(r) for r in runs)
        result["journal"] = {"path": str(book.path), "reused_runs": book.reused, "runs": made,
                             "calibration_changed": book.calibration_changed,
                             "made_with": book.made_with, "rescored": rescore,
                             # where the next set with this journal keeps it
                             "kept_next_as": str(kept_as(book.path))}  # fmt: skip
    return result


def _check_interference(
    systems: tuple[str, ...],
    bandwidths: tuple[float | None, ...],
    testbed: dict[str, Any],
    added_latency_us: float,
    book: Journal | None,
    say: Callable[[str], None],
    enabled: bool = True,
) -> dict[str, dict[str, Any]] | None:
    """``fidelity``'s interference check before the real runs (``fidelity_interference``):
    the journal's where it has one of the same networks; none where it is off, the set has
    no network to check, or the journal holds runs but no check (runs made earlier than a
    check now); else measured now (and kept in the journal), saying at once where it moved."""
    if not enabled:
        return None
    points = {}
    for nominal in bandwidths:
        try:
            points[nominal] = network_point(testbed, nominal, added_latency_us)
        except CalibrationMissing:
            continue
    networks = fidelity_interference.interference_networks(systems, bandwidths, points)
    if not networks:
        return None
    kept = None
    if book is not None:
        kept = book.interference([network_key(b) for b in networks])
    if kept is not None:
        say("interference check before the real runs: the journal's")
        return fidelity_interference.against(kept, points)
    if book is not None and book.runs:
        say("interference check: not made (the journal's runs were made before it)")
        return None
    checks = fidelity_interference.check_interference(
        networks, points, testbed, say, added_latency_us
    )
    if book is not None:
        book.add_interference(checks)
    if fidelity_interference.moved(checks):
        label = testbed["label"]
        say(
            f"interference check: more than {fidelity_interference.MOVED_PCT:g}% off before "
            "the real runs; the error will measure that as much as the simulator (stop here "
            "and "
            + fidelity_interference.advice(label, "horovod" in systems, added_latency_us)
            + " first, or let it go on)"
        )
    return checks


def calibration_prints(label: str, testbed: dict[str, Any]) -> tuple[str, str]:
    """The fingerprints a journal keeps of calibration ``label`` as it is now: its file's, and
    its measured compute profiles' (the files the twins' profiles are read from, ``_profile``,
    in its models' order)."""
    return fingerprint(testbed_path(label)), profiles_fingerprint(
        [
            workloads.measured_path(model, label, workloads.MEASURED_DIR)
            for model in testbed.get("profiles", ())
        ]
    )


def _run_check_steps(models: tuple[str, ...], label: str) -> dict[str, tuple[float, int]]:
    """(``check_runs``.) Each model's calibrated step and timed steps per process
    (``calibrated_step``); ``SpecError`` naming ``--check-each-run`` where the calibration
    has none."""
    steps = {}
    for model in models:
        calibrated = calibrated_step(model, label)
        if calibrated is None:
            raise SpecError(
                "--check-each-run",
                f"the calibration {label} has no step times for {model} to check each run "
                f"against: calibrate it again (python -m runners calibrate --label {label} "
                "--compute-only) or run without --check-each-run",
            )
        steps[model] = calibrated
    return steps


def _run_checked(
    row: dict[str, Any],
    real_spec: RunSpec,
    sim: RunSpec,
    checks: list[list[float | None] | None],
    step: float,
) -> None:
    """(``check_runs``.) ``row``'s ``run_checks_s`` (each run's [before, after] checks, None:
    a run read back from a journal without them) and, where every run has both,
    ``sim_run_checked_runs_s`` (each run's twin, its compute scaled by the geometric mean of
    its checks over the calibration's ``step``) and ``sim_run_checked_s``, their median (the
    real time is the runs' median)."""
    row["run_checks_s"] = checks
    twins = _run_checked_times(real_spec, sim, checks, step)
    if twins is None:
        return
    row["sim_run_checked_runs_s"] = twins
    row["sim_run_checked_s"] = statistics.median(twins)


def _run_checked_times(
    real_spec: RunSpec, sim: RunSpec, checks: list[list[float | None] | None], step: float
) -> list[float] | None:
    """(``check_runs``.) Each run's twin's iteration time, ``sim`` given the geometric mean of
    the run's checks over the calibration's ``step``; None unless every run has both."""
    both = [(c[0], c[1]) for c in checks if c and len(c) == 2 and c[0] and c[1]]
    if len(both) < len(checks):
        return None
    return [
        _twin(real_spec, _scaled_twin(sim, math.sqrt(before * after) / step)).metrics[
            "iteration_time_s"
        ]
        for before, after in both
    ]


# ``mape_with``'s key of a variant whose rows' key (``sim_<name>_s``) is named otherwise
VARIANT_LABELS = {"idle_loop": "background_slowdown"}


def _score_variant(configs: list[dict[str, Any]], name: str, with_: dict[str, float]) -> None:
    """``mape_with``'s ``label`` (``VARIANT_LABELS``' for ``name``, else ``name``; and
    ``<label>_run_checked``, where every twin of the variant
    has its ``sim_<name>_run_checked_s`` and ``run_checked`` was scored): the rows scored
    with their ``sim_<name>_s``, the others (systems the variant does not apply to) with
    their own twin's."""
    label = VARIANT_LABELS.get(name, name)
    with_[label] = statistics.fmean(
        _ape(row.get(f"sim_{name}_s", row["sim_iteration_s"]), row["real_iteration_s"])
        for row in configs
    )
    twins = [row for row in configs if f"sim_{name}_s" in row]
    if "run_checked" in with_ and all(f"sim_{name}_run_checked_s" in r for r in twins):
        with_[f"{label}_run_checked"] = statistics.fmean(
            _ape(
                row.get(f"sim_{name}_run_checked_s", row["sim_run_checked_s"]),
                row["real_iteration_s"],
            )
            for row in configs
        )


def _transport_checked(
    configs: list[dict[str, Any]],
    real_specs: list[RunSpec],
    sims: list[RunSpec],
    checks: fidelity_transport.TransportChecks,
    scales: dict[str, float],
    with_: dict[str, float],
    run_checks: list[list[list[float | None] | None]] | None,
    steps: dict[str, tuple[float, int]],
) -> None:
    """(The transport check.) The PS rows' ``sim_transport_checked_s`` (their twins given
    the host's CPU per message measured during the set: ``fidelity_transport.
    transport_twin``), with every model's compute check ``sim_transport_compute_checked_s``
    (at its ``scales``) and with ``run_checks`` ``sim_transport_checked_run_checked_s``; and
    ``mape_with``'s ``transport_checked``, ``transport_compute_checked`` and
    ``transport_checked_run_checked``, the other rows scored with their own twin's (the
    compute-checked one's, the run-checked one's)."""
    twins = [
        fidelity_transport.transport_twin(sim, checks, row["bandwidth_gbps"])
        for sim, row in zip(sims, configs, strict=True)
    ]
    if not any(twin is not None for twin in twins):
        return
    scaled = "compute_checked" in with_  # every model's compute checked (``scales``)
    for k, (real_spec, twin, row) in enumerate(zip(real_specs, twins, configs, strict=True)):
        if twin is None:
            continue
        row["sim_transport_checked_s"] = _twin(real_spec, twin).metrics["iteration_time_s"]
        if scaled:
            at = _scaled_twin(twin, scales[row["workload"]])
            row["sim_transport_compute_checked_s"] = _twin(real_spec, at).metrics[
                "iteration_time_s"
            ]
        if run_checks is not None:
            times = _run_checked_times(real_spec, twin, run_checks[k], steps[row["workload"]][0])
            if times is not None:
                row["sim_transport_checked_run_checked_s"] = statistics.median(times)
    _score_variant(configs, "transport_checked", with_)
    if scaled:
        with_["transport_compute_checked"] = statistics.fmean(
            _ape(
                row.get("sim_transport_compute_checked_s", row["sim_compute_checked_s"]),
                row["real_iteration_s"],
            )
            for row in configs
        )


def _compute_error(rows: list[dict[str, Any]]) -> str:
    """How far ``rows``' floor twins' compute per step is from the real runs'
    (``compute_time_s``: the backward stretched by what runs beside it), with the push's CPU
    charged as it is handed over (``sim_handover_compute_s``) and as its transfer starts
    (``sim_floor_compute_s``), and the report's twins' (the host's cores shared op by op,
    ``sim_compute_s``): the mean absolute percentage errors."""
    both = [r for r in rows if r.get("real_compute_s") and "sim_floor_compute_s" in r]
    if not both:
        return "the real runs' compute not recorded"

    def error(key: str) -> float:
        return statistics.fmean(_ape(r[key], r["real_compute_s"]) for r in both)

    return (
        f"the twins' compute per step {error('sim_handover_compute_s'):.1f}% off the real "
        f"runs' ({error('sim_floor_compute_s'):.1f}% charging it as the transfer starts, "
        f"{error('sim_compute_s'):.1f}% sharing the cores op by op; mean absolute errors)"
    )


def own_plus_added_twin(sim: RunSpec, added_latency_us: float) -> RunSpec:
    """``sim``, a twin from the network's own values (measured without the latency), with
    ``added_latency_us`` added to each of its latencies, a ring step's, a PS message's or a
    collective's while computing (``busy_latency_us``): the reconstruction before
    calibrations measured the added latency, which missed eight all-reduce runs by 11.2 %
    (``docs/fidelity-history.md``, 2026-12-06); ``fidelity`` scores it as ``mape_with``'s
    ``own_plus_added``."""
    c = sim.cluster
    busy = None if c.busy_latency_us is None else c.busy_latency_us + added_latency_us
    cluster = dataclasses.replace(
        c, latency_us=c.latency_us + added_latency_us, busy_latency_us=busy
    )
    return dataclasses.replace(sim, cluster=cluster)


def _probe_points(
    testbed: dict[str, Any], nominal: float | None, added_latency_us: float = 0.0
) -> tuple[tuple[int, float], ...]:
    """The network probe's all-reduces of the network at ``nominal`` (with
    ``added_latency_us``, its entry's own, never the network's, measured without it), as
    ``cluster.lone_allreduce`` points; ``CalibrationMissing`` where there are none."""
    point = network_point(testbed, nominal)
    if added_latency_us:
        point = point.get("added_latency", {}).get(latency_key(added_latency_us), {})
    rows = point.get("allreduce") or []
    if not rows:
        label, where = testbed["label"], _where(nominal)
        flag = ""
        if added_latency_us:
            flag = f" --latency-only --added-latency-us {added_latency_us:g}"
            where += f" with {added_latency_us:g} us a way added"
        raise CalibrationMissing(
            f"calibration '{label}' has no network probe's all-reduces at {where}: run "
            f"`python -m runners calibrate --label {label}{flag}`"
        )
    return tuple((int(r["bytes"]), float(r["seconds"])) for r in rows)


def lone_twin(
    system: str,
    sim: RunSpec,
    testbed: dict[str, Any],
    nominal: float | None,
    added_latency_us: float = 0.0,
) -> RunSpec | None:
    """``sim``, the twin of a ``ddp`` or ``horovod`` run (``LONE_VARIANT_SYSTEMS``), with the
    network probe's all-reduces of its network (with ``added_latency_us``, its entry's) as a
    lone collective's times (``cluster.lone_allreduce``), as the ``ddp`` twins of runs with
    added latency have them: DDP's reducer, with one bucket a step on the debug models, runs
    it alone; Horovod's background thread runs each cycle's fused all-reduce alone after the
    cycle's round (delay-line traces with 2 ms a way: four messages, each waiting a trip for
    the one before, 2026-12-07). Not the default for ``ddp`` without added latency: it made
    the twin slower than its runs (9.2 against 6.7 % run-checked, 2026-12-07; the probe's
    back-to-back all-reduces may find the token bucket short, not measured). ``fidelity``
    scores it as ``mape_with``'s ``lone``; None for the other systems (the lab's engine keeps
    collectives in flight together), for twins that have the points already, and for a
    network without the probe's all-reduces. A reconstruction, labelled as such."""
    if system not in LONE_VARIANT_SYSTEMS or sim.cluster.lone_allreduce:
        return None
    try:
        points = _probe_points(testbed, nominal, added_latency_us)
    except CalibrationMissing:
        return None
    return dataclasses.replace(sim, cluster=dataclasses.replace(sim.cluster, lone_allreduce=points))


def stream_twin(sim: RunSpec) -> RunSpec | None:
    """``sim`` with every collective and negotiation round at the alpha-beta time of the
    engine's stream, as the twins of runs with added latency were before 2026-12-07: without
    ``cluster.lone_allreduce`` (the ``ddp`` twin's points), and with a ``horovod`` twin's
    ``cluster.round_latency_us`` (the engine stream's latency) as its latency too;
    ``fidelity`` scores it as ``mape_with``'s ``stream``. None for a twin with neither."""
    c = sim.cluster
    if not c.lone_allreduce and c.round_latency_us is None:
        return None
    latency = c.latency_us if c.round_latency_us is None else c.round_latency_us
    cluster = dataclasses.replace(c, lone_allreduce=(), latency_us=latency, round_latency_us=None)
    return dataclasses.replace(sim, cluster=cluster)


def round_loop_twin(sim: RunSpec) -> RunSpec | None:
    """``sim``, a twin whose cycles negotiate (``horovod``'s), with its fusion cycles' rounds
    free-running as Horovod's background loop runs them (``cluster.round_loop`` ``free``)
    instead of on cycle ticks; ``fidelity`` scores it as ``mape_with``'s ``free_rounds``.
    None for other twins and for one that has them so already."""
    c = sim.cluster
    if sim.system != "horovod" or not c.negotiation or c.round_loop == "free":
        return None
    return dataclasses.replace(sim, cluster=dataclasses.replace(c, round_loop="free"))


def handover_twin(sim: RunSpec) -> RunSpec | None:
    """A PS twin with its pushes' CPU (``cluster.message_cpu_us``) charged as the backward
    hands each gradient to the transport (``cluster.message_cpu_at`` ``handover``) instead of
    as its transfer starts (``fidelity`` scores it as ``mape_with``'s ``handover``); None for
    a twin without message CPU or that charges it so already."""
    c = sim.cluster
    if sim.arena != "ps" or not c.message_cpu_us or c.message_cpu_at == "handover":
        return None
    return dataclasses.replace(sim, cluster=dataclasses.replace(c, message_cpu_at="handover"))


def twin_host_cpu_model(testbed: dict[str, Any]) -> str:
    """How a PS twin's host cores are shared (``cluster.host_cpu_model``): ``messages-first``
    where the calibration's communication threads ran at realtime priority, as the real
    runs' do (they preempt the compute as soon as they wake), else ``fair``."""
    return "messages-first" if testbed.get("comm_priority") == "realtime" else "fair"


def _floor_twin(
    system: str,
    model: str,
    nominal: float | None,
    testbed: dict[str, Any],
    iterations: int,
    latency: str,
    twin: RunSpec,
    ps_transport: str = "blocking",
    added_latency_us: float = 0.0,
) -> RunSpec | None:
    """The floor's twin of a configuration whose twin (``twin``) shares its host's cores op
    by op (``matched_specs``' ``host_cpu`` ``floor``: ``mape_with``'s ``floor``); None for
    any other twin."""
    if twin.arena != "ps" or twin.cluster.host_cpu_model == "floor":
        return None
    raw = matched_specs(
        system, model, nominal, testbed, iterations, latency, host_cpu="floor",
        ps_transport=ps_transport, added_latency_us=added_latency_us,
    )  # fmt: skip
    return validate(raw[1])


# The systems the report's speedups are over, where the set has them: the all-reduce arena's
# baselines and the PS arena's (a PS system's speedup over ``wfbp`` or ``horovod`` compares
# arenas: the same model, workers and worker NICs, the PS runs with their servers beside).
SPEEDUP_BASELINES = ("wfbp", "horovod", "ddp", "ps-default")

# Modelled effects ``fidelity`` also scores the twins without (``mape_without``): what each
# contributes, on the same real runs. Each field goes back to its default alone: without
# ``collective_cpu_us`` the rounds keep their own ``negotiation_cpu_us``; without that, a round
# costs a collective's (the model before it).
ABLATIONS = (
    "overlap_model",  # back to ``start``: the slow-down fixed when an op starts
    "step_jitter_cv",
    "optimizer_update",
    "collective_cpu_us",
    "negotiation_cpu_us",
    "link_burst_bytes",
    "message_cpu_us",
    "pull_rendezvous",
    "push_rendezvous",
    "push_buffered",
    "server_agg_fixed_us",
    "host_cores",
    "background_slowdown",  # Horovod's idle loop (its twins without added latency)
)
ABLATION_NAMES = {"overlap_model": "overlap_model (slow-down at op start)"}  # in the text


def _scaled_twin(sim: RunSpec, scale: float) -> RunSpec:
    """``sim`` with its compute ``scale`` times as long (``cluster.compute_scale``)."""
    return dataclasses.replace(sim, cluster=dataclasses.replace(sim.cluster, compute_scale=scale))


def _ape(predicted: float, measured: float) -> float:
    """The absolute percentage error of a prediction."""
    return abs(_signed_pct(predicted, measured))


def _mape_of(rows: list[dict[str, Any]], predicted: str) -> float:
    """The MAPE of ``rows`` scored with each one's ``predicted`` time (a row key) against its
    real one."""
    return statistics.fmean(_ape(row[predicted], row["real_iteration_s"]) for row in rows)


def _other_twins(
    plan: list[tuple[str, float | None, str]],
    testbed: dict[str, Any],
    iterations: int,
    latency: str,
    ps_transport: str = "blocking",
    added_latency_us: float = 0.0,
) -> dict[str, list[RunSpec]]:
    """Per latency model other than ``latency`` that the calibration supports, the twins of
    every configuration (PS systems on ``ps_transport``; ``added_latency_us`` as
    ``matched_specs``'), validated before any real run (``mape_by_latency`` scores the same
    real runs with them: the modelling choice's effect, free of the runs' noise)."""
    matched = functools.partial(
        matched_specs, ps_transport=ps_transport, added_latency_us=added_latency_us
    )
    out = {}
    for kind in LATENCIES:
        if kind == latency:
            continue
        try:
            out[kind] = [
                validate(matched(system, model, nominal, testbed, iterations, kind)[1])
                for model, nominal, system in plan
            ]
        except (CalibrationMissing, SpecError, KeyError):
            continue  # this model cannot be simulated from this calibration
    return out


def _twin(real_spec: RunSpec, sim_spec: RunSpec) -> Any:
    """The simulation of a real run: an all-reduce system simulated with the plan the real
    run executed (planned from the real spec, as ``runners.real.launch`` does; a searching
    policy's oracle otherwise searches under the twin's calibrated conditions and may choose
    another plan)."""
    from .execute import simulate

    if sim_spec.arena != "allreduce":
        return simulate(sim_spec)
    from .real import launch
    from .sim import allreduce

    return allreduce.run(sim_spec, plan=launch._plan(real_spec))


def _real_run(spec: RunSpec, name: str, failures: list[str]) -> Any:
    """One real run of ``spec``; a failed one is noted in ``failures`` and tried once more."""
    from .real import launch

    for _attempt in range(2):
        with tempfile.TemporaryDirectory(prefix="lab-fidelity-") as tmp:
            try:
                return launch.run(spec, Path(tmp))
            except launch.RealRunError as err:
                launch.log.warning("%s failed, %s", name, err)
                failures.append(str(err).splitlines()[0])
    raise launch.RealRunError(f"{name}: both attempts failed: {failures[-2:]}")


def _row(
    system: str, model: str, nominal: float | None, runs: list[Any], sim: Any
) -> dict[str, Any]:
    """A configuration's row: its real runs (their median scored) beside the simulation."""
    times = [r.metrics["iteration_time_s"] for r in runs]
    measured = statistics.median(times)
    predicted = sim.metrics["iteration_time_s"]
    row = {
        "system": system,
        "workload": model,
        "bandwidth_gbps": nominal,
        "network": runs[-1].network.kind,
        "real_iteration_s": measured,
        "real_runs_s": times,
        "real_iteration_median_s": statistics.median(
            r.metrics["iteration_time_median_s"] for r in runs
        ),
        "sim_iteration_s": predicted,
        # within the real runs' range (None with one run: no range to be in)
        "sim_within_runs": min(times) <= predicted <= max(times) if len(times) > 1 else None,
        "ape_pct": _ape(predicted, measured),
        "real_compute_s": statistics.median(r.metrics["compute_time_s"] for r in runs),
        "sim_compute_s": sim.metrics["compute_time_s"],
    }
    if all("cpu_cores" in r.metrics for r in runs):  # runs from before it was measured: none
        # the cores its processes used (ranks and servers) on this one machine, whose cores
        # they share; the simulator gives each a machine of its own
        row["real_cpu_cores"] = statistics.median(r.metrics["cpu_cores"] for r in runs)
        # the host's CPU work per iteration, every process together, beside the twin's
        # (a PS twin on one host: ``cluster.host_cores``): whether its CPU model holds
        row["real_host_cpu_s"] = statistics.median(
            r.metrics["cpu_cores"] * r.metrics["iteration_time_s"] for r in runs
        )
    if all("machine_busy_cores" in r.metrics for r in runs):  # runs from before: none
        # the cores the machine kept busy over the steady iterations, every process on it:
        # beside ``real_cpu_cores``, what the run left idle
        row["real_machine_busy_cores"] = statistics.median(
            r.metrics["machine_busy_cores"] for r in runs
        )
    if "host_cpu_s" in sim.metrics:
        row["sim_host_cpu_s"] = sim.metrics["host_cpu_s"]
        # the cores the twin's host work keeps busy: all of ``cluster.host_cores`` where its
        # iteration is the host's floor
        row["sim_cpu_cores"] = sim.metrics["host_cpu_s"] / predicted if predicted > 0 else None
    if all("machine_steal_pct" in r.metrics for r in runs):  # the hypervisor's share
        row["real_steal_pct"] = statistics.median(r.metrics["machine_steal_pct"] for r in runs)
    if all("other_cores" in r.metrics for r in runs):  # runs from before: none
        # the most CPU other processes took beside one of its runs (runners.real.others)
        row["real_other_cores"] = max(r.metrics["other_cores"] for r in runs)
    if all("train_runq_wait_s" in r.metrics for r in runs):  # runs from before: none
        # per iteration, the training threads' time on a core and runnable but waiting for
        # one (/proc/thread-self/schedstat): how far the compute waits for the cores the
        # twins share (``cluster.host_cpu_model``)
        for key in ("train_thread_cpu_s", "train_runq_wait_s"):
            row[f"real_{key}"] = statistics.median(r.metrics[key] for r in runs)
    return row


def mape_interval(
    configs: list[dict[str, Any]],
    ci: float = MAPE_CI,
    resamples: int = MAPE_RESAMPLES,
    seed: int = MAPE_CI_SEED,
) -> tuple[float, float] | None:
    """The range the MAPE would take with other draws of the same real runs: a percentile
    bootstrap (the ``ci`` central share of ``resamples`` resamples). Each resample draws every
    configuration's runs (``real_runs_s``) with replacement, as many as it had, and scores the
    configuration's prediction against their median, as the MAPE does; the configurations
    are the set (not resampled) and the simulator is deterministic. The target is on this
    measured MAPE, so a range wholly over (under) it says that other runs of the set would
    have missed (met) it too. It leans above the MAPE where runs spread, as noise in the real
    times adds to any error whichever way it moves them: it describes how reproducible the
    score is, not the simulator's error against exact times. With 3 runs a configuration's
    resampled median is one of its three times: the range shows the noise only as far as the
    runs do, narrower than the truth's where they happened to agree. None where no
    configuration has more than one run."""
    if not 0.0 < ci < 1.0 or resamples < 1:
        raise ValueError(f"ci must be in (0, 1) and resamples positive (got {ci}, {resamples})")
    if not configs or all(len(c.get("real_runs_s", ())) < 2 for c in configs):
        return None
    rng = np.random.default_rng(seed)
    total = np.zeros(resamples)
    for c in configs:
        runs = np.asarray(c.get("real_runs_s") or [c["real_iteration_s"]], dtype=float)
        medians = resample.medians(runs, rng, resamples)
        total += 100.0 * np.abs(c["sim_iteration_s"] - medians) / medians
    return resample.interval(total / len(configs), ci)


def target_verdict(mape: float, interval: tuple[float, float] | None, configs: int) -> str:
    """The 10 % target over at least ``MAPE_MIN_CONFIGS`` configurations: ``met`` where the
    MAPE and all of its range over other draws of the runs (``mape_interval``) are under it,
    ``missed`` where the MAPE and all of its range are at or over it, else ``not resolved``
    (other draws of the same runs could have gone either way; as the range leans above the
    MAPE where runs spread widely, a MAPE under the target with a range over it is not
    called missed). Without a range (one run each) the MAPE alone; ``too few
    configurations`` under the minimum."""
    if configs < MAPE_MIN_CONFIGS:
        return "too few configurations"
    low, high = interval if interval is not None else (mape, mape)
    if mape < MAPE_TARGET_PCT and high < MAPE_TARGET_PCT:
        return "met"
    if mape >= MAPE_TARGET_PCT and low >= MAPE_TARGET_PCT:
        return "missed"
    return "not resolved"


def headline(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """A set's headline: its MAPE, the MAPE's range over other draws of the same runs
    (``mape_interval``; None: one run each), the verdict on it (``target_verdict``) and the
    median over configurations of their real runs' range over their median (None: one run
    each)."""
    mape = statistics.fmean(c["ape_pct"] for c in configs)
    interval = mape_interval(configs)
    spreads = [
        100.0 * (max(c["real_runs_s"]) - min(c["real_runs_s"])) / c["real_iteration_s"]
        for c in configs
        if len(c.get("real_runs_s", ())) > 1
    ]
    return {
        "mape_pct": mape,
        "mape_ci_pct": None if interval is None else list(interval),
        "target_verdict": target_verdict(mape, interval, len(configs)),
        "real_spread_pct": statistics.median(spreads) if spreads else None,
    }


def report(
    configs: list[dict[str, Any]],
    label: str,
    latency: str = DEFAULT_LATENCY,
    mape_by_latency: dict[str, float] | None = None,
    comm_priority: str = "normal",
    mape_without: dict[str, float] | None = None,
    compute_drift: dict[str, dict[str, Any]] | None = None,
    mape_with: dict[str, float] | None = None,
    transport_check: dict[str, dict[str, Any]] | None = None,
    interference_check: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """MAPE per system and overall, and each system's speedup over the baselines, real and
    simulated, per (model, bandwidth); ``mape_by_latency``: the same real runs scored with
    each latency model's twins; ``comm_priority``: the real runs' communication threads';
    ``mape_without``: the same real runs scored with twins without one modelled effect each
    (``ABLATIONS``); ``mape_with``: the same with twins that have a measured effect the
    default twins leave out (``background_slowdown``: Horovod's idle loop in its twins of
    runs with added latency, ``matched_specs``; with ``_run_checked``)
    or a measurement they do not take (``compute_checked``: the compute check's speed;
    ``run_checked``: each run's own checks, ``fidelity``'s ``check_runs``), or another
    model of the same effect (``floor``: the PS twins with the floor over their host's cores
    instead of sharing them op by op, ``_floor_twin``; ``handover``: those floor twins with
    their pushes' CPU charged as it is handed over, ``handover_twin``; ``lone``,
    ``stream``, ``own_plus_added``: ``lone_twin``, ``stream_twin``, ``own_plus_added_twin``;
    ``free_rounds``: Horovod's rounds free-running, ``round_loop_twin``; each with its
    ``_run_checked``);
    ``compute_drift``: each model's step now against the calibration's
    (``fidelity``'s compute check; None where it was not made), and ``calibration_stale``
    whether any moved more than ``COMPUTE_DRIFT_PCT`` at any check; ``transport_check``: the PS
    transport's CPU per message measured during the set per network
    (``fidelity_transport.TransportChecks``; None where it was not made), whose twins
    ``mape_with``'s ``transport_checked`` and its kin score; ``interference_check``: a
    collective's CPU measured before the real runs per network
    (``fidelity_interference.InterferenceChecks``; None where it was not made)."""
    by_system: dict[str, list[dict[str, Any]]] = {}
    for c in configs:
        by_system.setdefault(c["system"], []).append(c)
    per_system = {k: statistics.fmean(c["ape_pct"] for c in rows) for k, rows in by_system.items()}
    mape = statistics.fmean(c["ape_pct"] for c in configs)
    per_system_ci = {k: mape_interval(rows) for k, rows in by_system.items()}
    speedups = []
    for baseline in SPEEDUP_BASELINES:
        base = {(c["workload"], c["bandwidth_gbps"]): c for c in configs if c["system"] == baseline}
        for c in configs:
            b = base.get((c["workload"], c["bandwidth_gbps"]))
            if b is None or c["system"] == baseline:
                continue
            speedups.append(
                {
                    "system": c["system"],
                    "baseline": baseline,
                    "workload": c["workload"],
                    "bandwidth_gbps": c["bandwidth_gbps"],
                    "real": b["real_iteration_s"] / c["real_iteration_s"],
                    "sim": b["sim_iteration_s"] / c["sim_iteration_s"],
                }
            )
    steals = [c["real_steal_pct"] for c in configs if "real_steal_pct" in c]
    scored = headline(configs)
    return {
        "label": label,
        "latency": latency,
        "comm_priority": comm_priority,
        "repeats": max((len(c.get("real_runs_s", ())) for c in configs), default=1),
        # the real runs' own range over their median, per configuration (repeats > 1)
        "real_spread_pct": scored["real_spread_pct"],
        "sim_within_runs": sum(bool(c.get("sim_within_runs")) for c in configs)
        if scored["real_spread_pct"] is not None
        else None,
        "mape_pct": mape,
        # its range over other draws of the same runs, 95 % (``mape_interval``; None: one
        # run each)
        "mape_ci_pct": scored["mape_ci_pct"],
        "mape_ci": MAPE_CI,
        # judged on that interval: met (all of it under the target), missed (none of it),
        # not resolved (it spans the target); meets_target: the MAPE alone under it
        "target_verdict": scored["target_verdict"],
        # the real runs' processes share this machine's cores (``real_cpu_cores`` per row)
        "machine_cores": usable_cpus(),
        # the twin's host CPU work per iteration against the real runs' (PS twins on one
        # host; ``host_cpu_error``; None: no row has both)
        "host_cpu_error_pct": host_cpu_error(configs),
        # the machine's busy cores during the real runs against the twins' (rows with both;
        # ``cores_busy``; None: none has)
        "cores_busy": cores_busy(configs),
        # the CPU time a hypervisor took from this machine during the real runs (median over
        # configurations of each one's median; the largest): a contended host's runs are slow
        "steal_pct": statistics.median(steals) if steals else None,
        "steal_max_pct": max(steals) if steals else None,
        "mape_by_latency": mape_by_latency or {latency: mape},
        "mape_without": mape_without or {},
        "mape_with": mape_with or {},
        # each model's step timed before, between the rounds of and after the real runs
        # against the calibration's (None: not checked)
        "compute_drift": compute_drift,
        "calibration_stale": any(_moved(d, "drift_pct") for d in (compute_drift or {}).values()),
        # the PS transport's CPU per message probed before, between the rounds of and after
        # the real runs, per network (None: not checked)
        "transport_check": transport_check,
        # a collective's CPU probed before the real runs, per network (None: not checked)
        "interference_check": interference_check,
        "target_pct": MAPE_TARGET_PCT,
        "meets_target": mape < MAPE_TARGET_PCT and len(configs) >= MAPE_MIN_CONFIGS,
        "per_system_mape_pct": per_system,
        # each one's interval as ``mape_ci_pct``'s (None: one run each)
        "per_system_mape_ci_pct": {
            k: None if v is None else list(v) for k, v in per_system_ci.items()
        },
        "configs": configs,
        "speedups": speedups,
    }


def host_cpu_error(configs: list[dict[str, Any]]) -> dict[str, float] | None:
    """How far the twins' host CPU work per iteration (``sim_host_cpu_s``: the compute and
    the messages' CPU that ``cluster.host_cores`` spreads over the cores) is from the real
    runs' (``real_host_cpu_s``: the cores their processes used times their iteration time),
    in % of the real: the median and the range over the rows that have both; None if none
    has. A check of the CPU model on its own: a twin can be right on time and wrong here,
    or the reverse."""
    errors = [
        _signed_pct(c["sim_host_cpu_s"], c["real_host_cpu_s"])
        for c in configs
        if c.get("sim_host_cpu_s") is not None and c.get("real_host_cpu_s")
    ]
    if not errors:
        return None
    return {"median": statistics.median(errors), "min": min(errors), "max": max(errors)}


def cores_busy(configs: list[dict[str, Any]]) -> dict[str, float] | None:
    """The machine's cores the real runs kept busy (``real_machine_busy_cores``: every
    process on it, over the steady iterations) beside those the twins' host work keeps busy
    (``sim_cpu_cores``: ``cluster.host_cores``' work over the twin's iteration), the medians
    over the rows that have both, and the largest gap (the twin's less the real's); None if
    none has. Where a twin's iteration is the host's floor it keeps every core busy: a real
    run that leaves some idle (its processes waiting on each other or on the network) is then
    slower than its twin by as much."""
    pairs = [
        (c["real_machine_busy_cores"], c["sim_cpu_cores"])
        for c in configs
        if c.get("real_machine_busy_cores") is not None and c.get("sim_cpu_cores") is not None
    ]
    if not pairs:
        return None
    return {
        "real": statistics.median(real for real, _ in pairs),
        "sim": statistics.median(sim for _, sim in pairs),
        "max_gap": max(sim - real for real, sim in pairs),
    }


def _signed_pct(predicted: float, measured: float) -> float:
    """A prediction's error in % of the measured value, with its sign (``_ape``: its size)."""
    return 100.0 * (predicted - measured) / measured


def drift_line(result: dict[str, Any]) -> str:
    """The compute check in words: each model's step before, between the rounds of and after
    the real runs against the calibration's."""
    label = result["label"]

    def timed(entry: dict[str, Any], when: str) -> str:
        if f"{when}_step_s" in entry:
            return f"{when} {entry[f'{when}_step_s'] * 1e3:.1f} ({entry[f'{when}_pct']:+.1f}%)"
        if f"{when}_error" in entry:
            return f"{when}: not timed ({entry[f'{when}_error']})"
        return f"{when}: -"

    parts = []
    for model, d in result["compute_drift"].items():
        if "missing" in d:
            parts.append(f"{model} not checked ({d['missing']})")
            continue
        checks = [timed(d, "before")]
        between = [
            f"{t * 1e3:.1f} ({p:+.1f}%)"
            for t, p in zip(d.get("between_step_s", ()), d.get("between_pct", ()), strict=True)
        ]
        between += [f"not timed ({err})" for err in d.get("between_errors", ())]
        if between:
            checks.append(f"between rounds {', '.join(between)}")
        checks.append(timed(d, "after"))
        if "checked_scale" in d:
            checks.append(f"x{d['checked_scale']:.2f} over the set (compute_checked's scale)")
        calibrated = f"{model} calibrated {d['calibrated_step_s'] * 1e3:.1f} ms, "
        parts.append(calibrated + ", ".join(checks))
    line = (
        f"compute check, each model's step against the calibration {label}'s, before, "
        "between the rounds of and after the real runs: " + "; ".join(parts)
    )
    if result.get("calibration_stale"):
        line += (
            f"; more than {COMPUTE_DRIFT_PCT:g}% off: this machine's speed has moved since it "
            "was calibrated, so the error measures that as much as the simulator"
        )
        if "run_checked" in result.get("mape_with", {}):  # each run's speed is measured
            line += " (the report's run_checked scores each run at the speed timed beside it)"
    if result.get("calibration_stale") or any(
        "missing" in d for d in result["compute_drift"].values()
    ):
        line += (
            f"; measure the compute again (python -m runners calibrate --label {label} "
            "--compute-only, a few seconds per model; the whole calibration without "
            "--compute-only) and compare on the same day"
        )
    return line


def _idle_checked_words(with_: dict[str, float], idle: list[dict[str, Any]]) -> str:
    """The idle loop's ``run_checked`` score, where there is one, in words."""
    if "background_slowdown_run_checked" not in with_:
        return ""
    return (
        f"; at each run's speed (run_checked) {with_['background_slowdown_run_checked']:.1f}% "
        f"(on the Horovod configurations {_mape_of(idle, 'sim_idle_loop_run_checked_s'):.1f}% "
        f"with it, {_mape_of(idle, 'sim_run_checked_s'):.1f}% without)"
    )


def _variant_score(with_: dict[str, float], name: str) -> str:
    """A twin variant's score in ``mape_with`` (``_score_variant``), with its ``run_checked``
    where it has one: ``"floor 8.1%, run_checked 7.5%"``."""
    checked = with_.get(f"{name}_run_checked")
    return f"{name} {with_[name]:.1f}%" + (
        f", run_checked {checked:.1f}%" if checked is not None else ""
    )


def _per_system(result: dict[str, Any], predicted: str) -> str:
    """Each system's MAPE of the report's rows scored with their ``predicted`` time instead
    of the twin's, in words ("wfbp 4.1%, ...")."""
    rows = result["configs"]
    return ", ".join(
        f"{system} {_mape_of([c for c in rows if c['system'] == system], predicted):.1f}%"
        for system in result["per_system_mape_pct"]
        if any(c["system"] == system for c in rows)
    )


def _others_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What other processes took beside the real runs (``real_other_cores``): the
    configurations whose runs were disturbed, or that none was."""
    seen = [c for c in rows if c.get("real_other_cores") is not None]
    if not seen:
        return []
    flagged = [c for c in seen if c["real_other_cores"] >= FLAG_CORES]
    if not flagged:
        most = max(c["real_other_cores"] for c in seen)
        return [f"no other work beside the real runs (at most {most:.2f} cores)"]
    named = ", ".join(
        f"{c['system']} {c['workload']} {network_name(c['bandwidth_gbps'])} "
        f"{c['real_other_cores']:.2f}"
        for c in sorted(flagged, key=lambda c: -c["real_other_cores"])
    )
    return [
        f"other processes on this machine took {FLAG_CORES:g} cores or more beside the real "
        f"runs of {len(flagged)} of {len(seen)} configurations ({named}; the most in one run, "
        "rows' real_other_cores): those runs are slower and noisier than alone; run the set "
        "again on a quiet machine"
    ]


def format_report(result: dict[str, Any]) -> str:
    """The report as text: one line per configuration, MAPE per system and overall, speedups."""

    cores = result.get("machine_cores")
    with_cores = cores is not None and any("real_cpu_cores" in c for c in result["configs"])
    # each step's compute, real and simulated: where an error lies, compute or communication
    with_compute = any("real_compute_s" in c for c in result["configs"])
    with_host = any("sim_host_cpu_s" in c for c in result["configs"])
    lines = [
        f"{'system':18} {'workload':18} {'network':12} {'real ms':>9} {'sim ms':>9} {'error':>7}"
        + (f" {'compute real/sim':>16}" if with_compute else "")
        + (f" {'cores used real/sim':>22}" if with_cores else "")
        + (f" {'host CPU real/sim':>17}" if with_host else "")
    ]
    for c in result["configs"]:
        line = (
            f"{c['system']:18} {c['workload']:18} {network_name(c['bandwidth_gbps']):12} "
            f"{c['real_iteration_s'] * 1e3:9.1f} {c['sim_iteration_s'] * 1e3:9.1f} "
            f"{c['ape_pct']:6.1f}%"
        )
        if with_compute:
            compute = (
                f"{c['real_compute_s'] * 1e3:.1f} / {c['sim_compute_s'] * 1e3:.1f}"
                if "real_compute_s" in c and "sim_compute_s" in c
                else "-"
            )
            line += f" {compute:>16}"
        if with_cores:
            used = f"{c['real_cpu_cores']:.2f}" if "real_cpu_cores" in c else "-"
            if c.get("real_machine_busy_cores") is not None:
                used += f" ({c['real_machine_busy_cores']:.2f})"
            if c.get("sim_cpu_cores") is not None:
                used += f" / {c['sim_cpu_cores']:.2f}"
            line += f" {used + f' of {cores}':>22}"
        if with_host:
            host = (
                f"{c['real_host_cpu_s'] * 1e3:.1f} / {c['sim_host_cpu_s'] * 1e3:.1f}"
                if "real_host_cpu_s" in c and "sim_host_cpu_s" in c
                else "-"
            )
            line += f" {host:>17}"
        lines.append(line)
    if with_compute:
        lines.append(
            "(compute real/sim: each side's compute_time_s per step in ms, the real runs' "
            "median, as each counts it, slow-downs and CPU charges included; real Horovod "
            "steps, and DDP's on the CPU, leave out their wait for the collectives)"
        )
    if with_cores:
        lines.append(
            "(cores used: the real run's processes, ranks and servers, on this machine's "
            f"{cores} cores, in brackets the cores the machine kept busy over the steady "
            "iterations, every process on it; after the slash a PS twin's, its host CPU work "
            "over its iteration (cluster.host_cores); elsewhere the simulator gives each "
            "process a machine of its own)"
        )
    busy = result.get("cores_busy")
    if busy:
        lines.append(
            f"the real runs kept a median {busy['real']:.2f} of the machine's cores busy, the "
            f"twins' host work {busy['sim']:.2f} (at most {busy['max_gap']:+.2f} more than "
            "the real): a twin at its host's floor keeps every core busy, one sharing them "
            "op by op idles them only while its workers wait for the network"
        )
    sched = [c for c in result["configs"] if "real_train_runq_wait_s" in c]
    if sched:
        waits = [c["real_train_runq_wait_s"] / c["real_iteration_s"] for c in sched]
        lines.append(
            "the real runs' training threads waited, runnable, for a core a median "
            f"{100 * statistics.median(waits):.0f} % of an iteration (configurations "
            f"{100 * min(waits):.0f}-{100 * max(waits):.0f} %; rows' real_train_runq_wait_s)"
        )
    lines.extend(_others_lines(result["configs"]))
    host_error = result.get("host_cpu_error_pct")
    if with_host:
        lines.append(
            "(host CPU real/sim: the CPU time per iteration in ms of every process together, "
            "the real runs' (cores used times their iteration time) and the twin's "
            "(cluster.host_cores' work: the compute and each message's host CPU)"
            + (
                "; the twin's against the real's: {median:+.1f}%, median ({min:+.1f} to "
                "{max:+.1f}%))".format(**host_error)
                if host_error
                else ")"
            )
        )
    if (
        host_error
        and abs(host_error["median"]) >= HOST_CPU_HINT_PCT
        and "transport_checked" not in result.get("mape_with", {})
    ):  # with the transport check, its own lines below say what it measured
        lines.append(
            f"the twins' host CPU per iteration is a median {host_error['median']:+.1f}% off "
            "the real runs': where the compute check found the compute at the calibration's "
            "speed, the PS transport's CPU per message has likely moved since the calibration; "
            f"measure it again (python -m runners calibrate --label {result['label']} "
            "--ps-only, about 20 minutes) and compare on the same day"
        )
    lines.append("")
    intervals = result.get("per_system_mape_ci_pct", {})  # reports from before it: none
    for system, value in result["per_system_mape_pct"].items():
        line = f"MAPE {system:18} {value:5.1f}%"
        if intervals.get(system) is not None:
            line += " ({:.1f}-{:.1f}%)".format(*intervals[system])
        lines.append(line)
    if result.get("real_spread_pct") is not None:
        lines.append(
            f"real runs: {result['repeats']} per configuration, their range a median "
            f"{result['real_spread_pct']:.1f}% of their median; the simulator within their "
            f"range in {result['sim_within_runs']} of {len(result['configs'])} configurations"
        )
    if result.get("steal_pct") is not None:
        lines.append(
            f"the hypervisor took {result['steal_pct']:.1f}% of this machine's CPU time during "
            f"a configuration's real runs (median; at most {result['steal_max_pct']:.1f}%; "
            "/proc/stat steal): on a contended host, runs and calibrations are slower and noisier"
        )
    if result.get("compute_drift") is not None:
        lines.append(drift_line(result))
    lines.extend(interference_lines(result))
    transport = result.get("ps_transport", "blocking")
    if transport != "blocking":
        lines.append(
            f"PS transport: {transport} (real.ps_transport; the twins from the calibration's "
            f"measurements of it, {fidelity_transport.ps_entry(transport)}, without rendezvous)"
        )
    if result.get("added_latency_us"):
        lines.append(
            f"added latency: {result['added_latency_us']:g} us a way in every real run "
            "(cluster.latency_us); the twins from the calibration's measurements with it "
            "(added_latency)"
        )
    if result.get("transport_check"):
        lines.append(fidelity_transport.transport_line(result["transport_check"], result["label"]))
    others = {
        k: v for k, v in result.get("mape_by_latency", {}).items() if k != result.get("latency")
    }
    if others:
        scored = ", ".join(f"{kind} {value:.1f}%" for kind, value in others.items())
        lines.append(f"the same real runs with the other latency models: {scored}")
    if result.get("mape_without"):
        scored = ", ".join(
            f"{ABLATION_NAMES.get(k, k)} {v:.1f}%" for k, v in result["mape_without"].items()
        )
        lines.append(f"the same real runs, the simulator without one modelled effect: {scored}")
    with_ = result.get("mape_with", {})
    if "background_slowdown" in with_:
        idle = [c for c in result["configs"] if "sim_idle_loop_s" in c]
        alone = _mape_of(idle, "sim_idle_loop_s")
        lines.append(
            "the same real runs, the simulator with a measured effect it leaves out, Horovod's "
            f"idle loop: background_slowdown {with_['background_slowdown']:.1f}% (on the "
            f"Horovod configurations {alone:.1f}% with it, "
            f"{statistics.fmean(c['ape_pct'] for c in idle):.1f}% without)"
            + _idle_checked_words(with_, idle)
        )
    if "compute_checked" in with_:
        systems = _per_system(result, "sim_compute_checked_s")
        lines.append(
            "the same real runs, the simulator given each model's compute as the compute check "
            f"measured it during the set: compute_checked {with_['compute_checked']:.1f}% "
            f"({systems})"
        )
    if "run_checked" in with_:
        systems = _per_system(result, "sim_run_checked_s")
        lines.append(
            "the same real runs, each run's twin given its model's compute as timed just "
            f"before and after it: run_checked {with_['run_checked']:.1f}% ({systems})"
        )
    if "transport_checked" in with_:
        rows = [c for c in result["configs"] if "sim_transport_checked_s" in c]
        also = [
            f"{words} {with_[key]:.1f}%"
            for key, words in (
                ("transport_compute_checked", "with the compute check's speed too"),
                ("transport_checked_run_checked", "with each run's compute"),
            )
            if key in with_
        ]
        lines.append(
            "the same real runs, the PS twins given the host's CPU per message as the "
            f"transport check measured it during the set: transport_checked "
            f"{with_['transport_checked']:.1f}% "
            f"({_per_system({**result, 'configs': rows}, 'sim_transport_checked_s')})"
            + (f"; {', '.join(also)}" if also else "")
        )
    if "floor" in with_:
        rows = [c for c in result["configs"] if "sim_floor_s" in c]
        cores = [c["sim_floor_cpu_cores"] for c in rows]
        busy_real = [c["real_machine_busy_cores"] for c in rows
                     if c.get("real_machine_busy_cores") is not None]  # fmt: skip
        lines.append(
            "the same real runs, the PS twins with the work-conserving floor over the host's "
            "cores instead of sharing them op by op (cluster.host_cpu_model floor, with the "
            "calibrated slow-down and message CPU; the model before): "
            + _variant_score(with_, "floor")
            + f" ({_per_system({**result, 'configs': rows}, 'sim_floor_s')}); their "
            f"cores busy a median {statistics.median(cores):.2f}"
            + (f" against the machine's {statistics.median(busy_real):.2f}" if busy_real else "")
        )
    if "handover" in with_:
        rows = [c for c in result["configs"] if "sim_handover_s" in c]
        lines.append(
            "the same real runs, the floor's PS twins charging a push's CPU as the backward "
            "hands it to the transport (cluster.message_cpu_at handover) instead of as its "
            "transfer starts: "
            + _variant_score(with_, "handover")
            + f" ({_per_system({**result, 'configs': rows}, 'sim_handover_s')}); "
            + _compute_error(rows)
        )
    for name, what in (
        ("lone", "ddp and horovod with their collectives at the network probe's lone "
         "all-reduce times (cluster.lone_allreduce), as ddp's with added latency"),
        ("stream", "ddp and horovod with every collective and round at the engine stream's "
         "alpha-beta time (ddp's without the probe's lone all-reduce times, horovod's "
         "all-reduces at one trip a ring step: the twins before 2026-12-07)"),
        ("free_rounds", "horovod with its background loop's rounds free-running, a gradient "
         "ready during a round waiting for the next (cluster.round_loop free), not on cycle "
         "ticks"),
    ):  # fmt: skip
        if name in with_:
            rows = [c for c in result["configs"] if f"sim_{name}_s" in c]
            lines.append(
                f"the same real runs, the twins of {what}: "
                + _variant_score(with_, name)
                + f" ({_per_system({**result, 'configs': rows}, f'sim_{name}_s')})"
            )
    if "own_plus_added" in with_:
        lines.append(
            "the same real runs, the twins of the network's own values with the added latency "
            "on each latency (the reconstruction before calibrate --latency-only): "
            + _variant_score(with_, "own_plus_added")
        )
    if "run_checked" not in with_ and any("run_checks_s" in c for c in result["configs"]):
        lines.append(
            "each run's compute check: not scored, as some runs have no check before and "
            "after them (a failed check, or runs read back from a journal made without "
            "--check-each-run)"
        )
    unscaled = [
        m for m, d in (result.get("compute_drift") or {}).items() if "checked_scale" not in d
    ]
    if unscaled and "compute_checked" not in with_:  # checked, but not every model timed
        lines.append(
            "the same real runs with the compute the check measured: not scored, as "
            f"{', '.join(unscaled)} could not be timed (above)"
        )
    book = result.get("journal")  # sets without one (or from before it): none
    if book is not None and book["reused_runs"]:
        lines.append(
            f"{book['reused_runs']} of the {book['runs']} real runs read back from the journal "
            f"{book['path']} ({'--rescore' if book.get('rescored') else '--resume'}), the "
            "twins simulated now"
            + (
                f" from the calibration as it is now, {CALIBRATION_CHANGED_SHORT}"
                if book.get("calibration_changed")
                else ""
            )
            + (
                f"; its runs were made against calibration {book['made_with']}, scored here "
                f"against {result['label']}'s twins"
                if book.get("made_with", result["label"]) != result["label"]
                else ""
            )
        )
    interval = result.get("mape_ci_pct")  # reports from before it: none
    if interval is not None:
        low, high = interval
        judged = {
            "met": f"meets the {result['target_pct']:g}% target: all of it under",
            "missed": f"misses the {result['target_pct']:g}% target: all of it over",
            "not resolved": f"the {result['target_pct']:g}% target not resolved by these runs",
            "too few configurations": f"the {result['target_pct']:g}% target needs at least "
            f"{MAPE_MIN_CONFIGS}",
        }[result["target_verdict"]]
        verdict = (
            f"{low:.1f}-{high:.1f}% with other draws of "
            f"{result.get('mape_ci_of', 'the same runs')}, "
            f"{result.get('mape_ci', MAPE_CI) * 100:g}% bootstrap; {judged}"
        )
    else:
        verdict = (
            f"{'meets' if result['meets_target'] else 'misses'} the "
            f"{result['target_pct']:g}% target over at least {MAPE_MIN_CONFIGS}"
        )
    lines.append(
        f"MAPE overall {result['mape_pct']:.1f}% over {len(result['configs'])} configurations "
        f"({verdict}; simulator latency: {result.get('latency', 'busy')}; real runs' "
        f"communication threads at {result.get('comm_priority', 'normal')} priority)"
    )  # older reports: busy, normal
    if result.get("target_verdict") == "not resolved" and book and "kept_next_as" in book:
        path, kept = book["path"], book["kept_next_as"]
        lines.append(
            "more sets may resolve it: run the same command again without --resume (this "
            f"set's journal is then kept as {kept}) and score the sets together, "
            f"python -m runners fidelity-pool {kept} {path} (with two sets the range spans "
            "their difference: three or more resolve it better)"
        )
    if result["speedups"]:
        lines.append("")
        lines.append(
            f"{'speedup':18} {'over':10} {'workload':18} {'network':12} {'real':>6} {'sim':>6}"
        )
        for s in result["speedups"]:
            lines.append(
                f"{s['system']:18} {s['baseline']:10} {s['workload']:18} "
                f"{network_name(s['bandwidth_gbps']):12} {s['real']:6.2f} {s['sim']:6.2f}"
            )
    return "\n".join(lines)
