"""``python -m runners``: list the registry, run one spec, run a grid of specs, benchmark.

    python -m runners list [--json] [--arena ARENA]
    python -m runners run SPEC --out DIR
    python -m runners grid GRID --out DIR [--jobs N] [--resume] [--keep-runs]
    python -m runners bench [--json] [--repeats N] [--only comm|cluster|real|harmony] [--grid]
                            [--control] [--launched] [--iterations N]  (with --only real)
    python -m runners harmony train --out DIR [--epochs E] [--seed S] | evaluate --checkpoint P
    python -m runners calibrate [--label L] [--models M,..] [--bandwidths G,..] [--workers N]
                                [--threads T] [--repeats R] [--comm-priority auto|realtime|normal]
                                [--split-only] [--ps-only] [--overlap-only] [--horovod-only]
                                [--compute-only] [--latency-only]  (one or several)
                                [--ps-cpu-probes N] [--probe-rounds N]
                                [--ps-transport blocking|pipelined]  (with --ps-only or
                                 --latency-only)
                                [--added-latency-us US,..]  (with --latency-only)
    python -m runners fidelity [--label L] [--systems S,..] [--models M,..] [--bandwidths G,..]
                               [--iterations I] [--repeats R] [--latency busy|idle|split|engine]
                               [--no-compute-check] [--no-transport-check]
                               [--no-interference-check] [--check-each-run]
                               [--ps-transport blocking|pipelined] [--added-latency-us US]
                               [--resume] [--rescore] [--journal PATH] [--json]
    python -m runners fidelity-pool JOURNAL JOURNAL.. [--latency L] [--json]
    python -m runners twin RUN_DIR [--label L] [--json]

``grid`` expands a sweep (systems x workloads x cluster/params/spec axes x seeds, see
``runners.grid``), validates every run, runs them in parallel and writes DIR/results.csv (one row
per run), grid.json and specs.jsonl.

Exit codes: 0 success, 1 the run failed (grid: at least one run failed), 2 bad input (invalid
spec or grid, existing --out).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import re
import sys
from pathlib import Path
from typing import Any

import workloads
from workloads import devices

from . import bench, grid, registry, rundir
from .cluster.run import TraceInputError
from .execute import run_to_directory
from .spec import COMM_PRIORITIES, DISPATCHES, PS_TRANSPORTS, SpecError, load_file, validate


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["harmony"]:  # its own parser (train / evaluate), options passed through
        logging.basicConfig(level=logging.INFO, format="[runners] %(message)s", stream=sys.stderr)
        return _harmony(argparse.Namespace(args=argv[1:]))
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[runners] %(message)s", stream=sys.stderr)
    return args.func(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runners", description=__doc__)
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="list systems, baselines and workloads")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--arena", choices=registry.ARENAS)
    p.set_defaults(func=_list)
    p = sub.add_parser("run", help="run one spec and write its run directory")
    p.add_argument("spec", help="run spec, JSON or YAML")
    p.add_argument("--out", required=True, type=Path, help="run directory to create")
    p.add_argument(
        "--executor",
        choices=("local", "docker"),
        default="local",
        help="local: in this process (default); docker: inside the runner image (make images)",
    )
    p.add_argument(
        "--image",
        default=None,
        help="runner image for --executor docker (default: $LAB_RUNNER_IMAGE or lab-runner:cpu)",
    )
    p.set_defaults(func=_run)
    p = sub.add_parser(
        "rerun",
        help="run a run directory's spec again, in the same container image when it had one",
    )
    p.add_argument("run_dir", type=Path, help="a run directory (its manifest.json is read)")
    p.add_argument("--out", required=True, type=Path, help="run directory to create")
    p.set_defaults(func=_rerun)
    p = sub.add_parser("grid", help="run a sweep of specs in parallel and write one table")
    p.add_argument("grid", help="grid file, JSON or YAML (see runners/grid.py)")
    p.add_argument("--out", required=True, type=Path, help="output directory to create")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue in an existing --out: skip the runs it recorded (ok or failed)",
    )
    p.add_argument(
        "--keep-runs", action="store_true", help="also write every run directory under DIR/runs/"
    )
    p.set_defaults(func=_grid)
    p = sub.add_parser(
        "harmony",
        help="train or evaluate a Harmony placement policy (train --out DIR | evaluate ...)",
        add_help=False,
    )
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_harmony)
    p = sub.add_parser("bench", help="benchmark the simulators")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per case (median)")
    p.add_argument(
        "--grid",
        action="store_true",
        help="also time the full comm grid (examples/grids/comm-full.yaml, 2 jobs)",
    )
    p.add_argument(
        "--only",
        choices=("comm", "cluster", "real", "harmony"),
        help="only the communication arenas' cases, only the cluster arena's, only real "
        "mode's (the lab's engine against PyTorch DDP, 2 ranks on loopback: a few minutes), or "
        "only Harmony's training against the placement baselines (a few minutes; at most 15)",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="with --only real: a second DDP beside DDP in each repeat (a third copy taking "
        "its turns; with --launched, a third run), scored against DDP as the engine is: the "
        "overhead this machine's noise alone gives now (half as long again)",
    )
    p.add_argument(
        "--launched",
        action="store_true",
        help="with --only real: each repeat a pair of separate launches, DDP's and the "
        "engine's, back to back (tens of seconds apart), instead of one launch in which they "
        f"take turns in blocks of {bench.INTERLEAVE_BLOCK} iterations (the default since "
        "2026-11-29: its control, DDP against a second copy, reads within 2 %%)",
    )
    p.add_argument(
        "--iterations",
        type=int,
        help="with --only real: measured iterations a side a launch, its blocks' ends and "
        "first pair left out (with --launched: a run, after 3 warm-up); default "
        f"{bench.REAL_ITERATIONS}",
    )
    p.add_argument(
        "--dispatch",
        choices=DISPATCHES,
        help="with --only real: how the engine issues its collectives (real.dispatch): auto "
        "(the default: DDP's buckets from the gradient hooks, as DDP's reducer) or thread "
        "(by its communication thread, the engine before 2026-11-30)",
    )
    p.set_defaults(func=_bench)
    from . import fidelity

    p = sub.add_parser(
        "calibrate",
        help="measure this machine's compute and network for the simulator (real-mode testbed)",
        description="Measure this machine's compute and network for the simulator. The "
        "--*-only flags measure one part of an existing calibration again, keeping the rest; "
        "several together are measured one after the other (compute, split, ps, overlap, "
        "horovod, latency), each written as it completes: e.g. --overlap-only --horovod-only "
        "measures the all-reduce arena's interference again, as fidelity's checks ask.",
    )
    p.add_argument("--label", default=fidelity.DEFAULT_LABEL, help="name of the calibration")
    p.add_argument("--models", default=",".join(fidelity.DEFAULT_MODELS), help="comma-separated")
    p.add_argument(
        "--bandwidths",
        default=",".join(map(str, fidelity.DEFAULT_BANDWIDTHS)),
        help="nominal Gbit/s of the emulated network to measure, comma-separated (loopback "
        "is always measured)",
    )
    p.add_argument("--workers", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument(
        "--repeats",
        type=int,
        default=fidelity.PROFILE_REPEATS,
        help=f"timed steps per layer profile (default {fidelity.PROFILE_REPEATS})",
    )
    p.add_argument(
        "--comm-priority",
        choices=COMM_PRIORITIES,
        default=None,
        help="the communication threads' priority in the network probes, recorded and given "
        "to fidelity's real runs: realtime (SCHED_FIFO, ahead of the compute; root), normal, "
        "or auto (realtime where permitted; the default). The --*-only measurements keep the "
        "calibration's",
    )
    p.add_argument(
        "--split-only",
        action="store_true",
        help="only measure the split collectives' costs (reduce-scatter, all-gather) at each "
        "network of an existing calibration, keeping its other measurements",
    )
    p.add_argument(
        "--ps-only",
        action="store_true",
        help="only measure the parameter-server arena (compute slow-down, latency and the "
        "servers' aggregation rate, on the real PS transport) at each network of an existing "
        "calibration, keeping its other measurements",
    )
    p.add_argument(
        "--overlap-only",
        action="store_true",
        help="only measure the all-reduce arena's interference (compute slow-down, small "
        "all-reduces' latency while computing and while idle, also through the lab's engine, "
        "large ones' slow-down while computing) at each network of an existing calibration, "
        "keeping its other measurements",
    )
    p.add_argument(
        "--horovod-only",
        action="store_true",
        help="only measure the real Horovod's own CPU cost (what one of its cycles with a "
        "collective and its idle negotiation loop take from the compute) at each network of "
        "an existing "
        "calibration, keeping its other measurements",
    )
    p.add_argument(
        "--compute-only",
        action="store_true",
        help="only measure the compute profiles of an existing calibration's models again "
        "(a few seconds per model), keeping its network measurements: what fidelity's "
        "compute check asks for when this machine's speed has moved since it was calibrated",
    )
    p.add_argument(
        "--ps-cpu-probes",
        type=int,
        default=None,
        metavar="N",
        help="the PS arena's message-CPU probes per network, whose median the calibration "
        f"keeps (default {fidelity.PS_CPU_ROUNDS}; one probe to the next moves up to 75%%; "
        "fewer are quicker, two launches each); with a whole calibration or --ps-only",
    )
    p.add_argument(
        "--probe-rounds",
        type=int,
        default=None,
        metavar="N",
        help="the interference probes per model and network, of both arenas, whose medians "
        f"the calibration keeps (default {fidelity.OVERLAP_ROUNDS} for the all-reduce "
        f"arena's, {fidelity.PS_ROUNDS} for the PS arena's; fewer are quicker and noisier: one "
        "probe's slow-down swung 2x between calibrations); kept in the calibration "
        "(probe_rounds) and its method; with a whole calibration, or with --latency-only "
        "(its overlap probes; by default the calibration's count: 10 minutes for two shaped "
        "networks and two models with 2 ms added)",
    )
    p.add_argument(
        "--ps-transport",
        choices=PS_TRANSPORTS,
        default=None,
        help="with --ps-only: the PS transport the PS arena's probes use (real.ps_transport; "
        "default blocking, which every calibration measures). pipelined adds its "
        "measurements beside the blocking ones (ps_pipelined), and twins of pipelined runs "
        "then come from them. With --latency-only: measure the PS arena's transport probes "
        "on it with the latency added (instead of the all-reduce arena's), which twins of PS "
        "runs with that latency take",
    )
    p.add_argument(
        "--latency-only",
        action="store_true",
        help="only measure the shaped networks of an existing calibration again with latency "
        "added (--added-latency-us): the network probe's fit and the overlap entries, kept "
        "beside the network's own (added_latency); twins of real runs with that "
        "cluster.latency_us then come from them. The all-reduce arena's, or with "
        "--ps-transport the PS arena's; root",
    )
    p.add_argument(
        "--added-latency-us",
        default=None,
        metavar="US,..",
        help="with --latency-only: the latencies to add a way, in microseconds, comma-separated "
        "(as a real run's cluster.latency_us: above the testbed's own 100 us, up to 100000)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_calibrate)
    p = sub.add_parser(
        "fidelity", help="run matched real and simulated configurations; report the error"
    )
    p.add_argument("--label", default=fidelity.DEFAULT_LABEL, help="calibration to use")
    p.add_argument("--systems", default=",".join(fidelity.DEFAULT_SYSTEMS), help="comma-separated")
    p.add_argument("--models", default=",".join(fidelity.DEFAULT_MODELS), help="comma-separated")
    p.add_argument(
        "--bandwidths",
        default=",".join(map(str, fidelity.DEFAULT_BANDWIDTHS)),
        help="nominal Gbit/s, comma-separated; 'loopback' for the unshaped network",
    )
    p.add_argument("--iterations", type=int, default=20, help="measured iterations per run")
    p.add_argument(
        "--repeats",
        type=int,
        default=fidelity.DEFAULT_REPEATS,
        help="real runs per configuration, in rounds over all configurations; the real time "
        "is their median, and the report says where the simulator falls in their range "
        f"(default {fidelity.DEFAULT_REPEATS}: a single run can be 50 %% off its "
        "configuration's usual time on a shared machine; the median of 3 outvotes one such "
        "run)",
    )
    p.add_argument(
        "--latency",
        choices=fidelity.LATENCIES,
        default=fidelity.DEFAULT_LATENCY,
        help="the simulator's latency: a small all-reduce's (PS arena: a small message's) "
        "time while the ranks compute (busy: what overlapped communication meets), on idle "
        "ranks (idle), or each collective the one of the state it meets, busy while a compute "
        "op runs and idle otherwise, with large collectives' slow-down while computing "
        "(split), or as split with the idle ranks' latency measured through the lab's engine "
        "(engine, the default; the PS arena: idle for both)",
    )
    p.add_argument(
        "--no-compute-check",
        dest="compute_check",
        action="store_false",
        help="skip timing each model's step before, between the rounds of and after the real "
        "runs against the calibration's (about 6 s per model each time; the report's "
        "compute_drift, and mape_with's compute_checked)",
    )
    p.add_argument(
        "--no-transport-check",
        dest="transport_check",
        action="store_false",
        help="skip probing the PS transport's CPU per message (as calibrate does) at each "
        "network with PS systems before, between the rounds of and after the real runs "
        "(about 30 s per network each time; the report's transport_check, and mape_with's "
        "transport_checked)",
    )
    p.add_argument(
        "--no-interference-check",
        dest="interference_check",
        action="store_false",
        help="skip probing a collective's CPU (as calibrate does) at each network with "
        "all-reduce systems before the real runs (about 20 s per network; the report's "
        "interference_check, which warns where the calibration's interference measurements "
        "are stale)",
    )
    p.add_argument(
        "--ps-transport",
        choices=PS_TRANSPORTS,
        default="blocking",
        help="the PS systems' transport (real.ps_transport; default blocking): their real runs "
        "on it, their twins from the calibration's measurements of it (calibrate --ps-only "
        "--ps-transport pipelined) and the transport check on it; all-reduce systems have none",
    )
    p.add_argument(
        "--added-latency-us",
        type=float,
        default=0.0,
        metavar="US",
        help="add this latency a way (cluster.latency_us, microseconds) to every real run on "
        "the shaped networks, their twins from the calibration's measurements with it "
        "(calibrate --latency-only --added-latency-us US); all-reduce systems, no loopback",
    )
    p.add_argument(
        "--check-each-run",
        dest="check_runs",
        action="store_true",
        help="also time the model's step just before and after every real run (a few "
        "seconds each; one serves two runs of a model in a row) and score each run against a twin "
        "given that speed (mape_with's run_checked): on a machine whose speed moves within "
        "minutes, the simulator's error given the compute of the moment",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on from the journal of an earlier set that stopped (a failed configuration, "
        "a crash, Ctrl-C): its real runs are reused, the rest run now, the twins simulated "
        "again (a finished set's journal: its real runs rescored with the current simulator)",
    )
    p.add_argument(
        "--rescore",
        action="store_true",
        help="score a finished set's journal (--journal) and run nothing real: against the "
        "twins of --label's calibration, which may be another than the one its runs were made "
        "against (where it gives them the same real specs), its checks compared with that "
        "calibration's values; an error names what the journal lacks",
    )
    p.add_argument(
        "--journal",
        type=Path,
        default=None,
        help="where each real run is kept as it finishes (default "
        "$LAB_RESULTS_DIR/fidelity/<label>-<set>.journal.jsonl, results/ without it, <set> "
        "naming the systems, models and bandwidths; an earlier journal there is kept as .prev, "
        "or .prev2, .prev3, ... where that is taken, unless --resume)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON line per configuration, then the report (mape_pct, configs, ...)",
    )
    p.set_defaults(func=_fidelity)
    p = sub.add_parser(
        "fidelity-pool",
        help="score the real runs of several fidelity sets of one calibration together",
        description="Pool the real runs of fidelity sets made against one calibration (their "
        "journals) per configuration and score the median of each configuration's runs "
        "against its twin, as fidelity does, with each set's own score beside it. Nothing "
        "real runs; pool every set of a calibration, not the good ones.",
    )
    p.add_argument(
        "journals",
        metavar="JOURNAL",
        nargs="+",
        type=Path,
        help="a fidelity set's journal, two or more (fidelity's --journal; by default "
        "$LAB_RESULTS_DIR/fidelity/<label>-<set>.journal.jsonl, the sets before it there "
        "as .prev, .prev2, ...)",
    )
    p.add_argument(
        "--latency",
        choices=fidelity.LATENCIES,
        default=fidelity.DEFAULT_LATENCY,
        help="the simulator's latency model, as fidelity's --latency",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="the report as one JSON object (fidelity's, with pool: each set's own score)",
    )
    p.set_defaults(func=_fidelity_pool)
    p = sub.add_parser(
        "twin",
        help="the simulator's prediction of a finished real run (its fidelity twin), beside it",
    )
    p.add_argument("run_dir", type=Path, help="a finished real run's directory")
    p.add_argument(
        "--label", default=None, help="the calibration to use (default: the newest covering it)"
    )
    p.add_argument(
        "--phases",
        action="store_true",
        help="also set the run's timeline beside its twin's, phase by phase (each resource's "
        "busy time, when its last operation ends, the compute's waits; medians over the "
        "recorded iterations: run with timeline_iterations above 2 for more)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=_twin)
    return parser


def _twin(args: argparse.Namespace) -> int:
    """A real run beside its twin: exit 2 for a directory that is not a finished real run or
    a run no calibration covers (the message says what to measure)."""
    from . import twin

    try:
        summary, prediction = twin.predict_run_dir(args.run_dir, args.label)
    except twin.NoTwin as err:
        print(f"run_dir: no twin for {args.run_dir}: {err}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as err:
        print(f"run_dir: {err}", file=sys.stderr)
        return 2
    real = float(summary["metrics"]["iteration_time_s"])
    error = 100.0 * (prediction.iteration_time_s - real) / real
    run = summary.get("run", {})
    phases = None
    if args.phases:
        try:
            phases = twin.run_phases(args.run_dir, prediction)
        except ValueError as err:
            print(f"--phases: {err}; run it with a timeline (timeline_iterations)", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({
            "system": run.get("system"), "workload": run.get("workload"),
            "real_iteration_s": real, "sim_iteration_s": prediction.iteration_time_s,
            "error_pct": error, "calibration": prediction.label,
            "calibration_date": prediction.date, "twin_spec": prediction.spec,
            "others": summary.get("others"),
            **({"phases": _json_phases(phases)} if phases is not None else {}),
        }))  # fmt: skip
        return 0
    print(
        f"{run.get('system')} on {run.get('workload')}: real {real * 1e3:.1f} ms, simulated "
        f"{prediction.iteration_time_s * 1e3:.1f} ms ({error:+.1f} %), the twin of calibration "
        f"'{prediction.label}' ({prediction.date})"
    )
    beside = summary.get("others") or {}
    if beside.get("flagged"):
        from .real.others import words

        print(
            f"the run was measured beside other work on its host, {words(beside)}: its real "
            "time is slower than alone, so the error is not the simulator's alone; run it again "
            "on a quiet machine"
        )
    if phases:
        print(_phase_table(phases, prediction.spec))
    return 0


def _json_phases(phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``twin.phases`` for JSON: a phase one side lacks is null, not NaN."""
    return [
        {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in p.items()}
        for p in phases
    ]


def _phase_table(phases: list[dict[str, Any]], twin_spec: dict[str, Any] | None = None) -> str:
    """``twin.phases`` as text: per phase the real run's and the twin's ms and the difference;
    under it, where the twin's forward ops carry the optimizer updates (``cluster.
    optimizer_update``), that the real run's do not (its engine applies them before it times
    a forward op), so their busy times are not alike."""
    width = max(len(p["phase"]) for p in phases)
    head = (
        f"per worker or server, ms, the median over {phases[0]['iterations']} "
        "(ends: after the iteration's first forward op; waits: within the compute's span)"
    )
    lines = [head, f"{'phase':{width}}  {'real':>7}  {'twin':>7}  {'twin-real':>9}"]
    for p in phases:
        real, sim = p["real_ms"], p["twin_ms"]
        diff = sim - real  # NaN where one side lacks the phase
        lines.append(f"{p['phase']:{width}}  {real:7.2f}  {sim:7.2f}  {diff:+9.2f}")
    if (twin_spec or {}).get("cluster", {}).get("optimizer_update"):
        lines.append(
            "(the twin's forward ops include each layer's optimizer update, the real run's do "
            "not: it applies the updates before timing a forward op; compare the forward's "
            "ends, not its busy time)"
        )
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> int:
    entries = registry.entries(args.arena)
    if args.json:
        print(
            json.dumps(
                {
                    "entries": [e.as_dict() for e in entries],
                    "workloads": workloads.names(),
                    "devices": sorted(devices.DEVICES),
                },
                indent=2,
            )
        )
        return 0
    for e in entries:
        params = ", ".join(f"{p.name}={p.default}" for p in e.params) or "-"
        print(f"{e.name:16} {e.arena:10} {e.role:9} {'/'.join(e.modes):9} {params}")
    print(f"workloads: {', '.join(workloads.names())}")
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        spec = validate(load_file(args.spec))
        if args.out.exists():
            raise rundir.OutputExists(f"{args.out} already exists (choose a new directory)")
    except SpecError as err:
        print(f"invalid spec: {err}", file=sys.stderr)
        return 2
    except rundir.OutputExists as err:
        print(f"--out: {err}", file=sys.stderr)
        return 2
    if args.executor == "docker":
        return _run_in_container(spec, args.out, args.image)
    return _run_here(spec, args.out)


def _run_here(spec: Any, out: Path) -> int:
    """Run ``spec`` in this process into ``out``; print its summary as one JSON line."""
    try:
        if getattr(spec, "mode", "sim") == "real":
            from .real import launch

            launch.preflight(spec)  # this machine: root, ranks, memory (before anything starts)
    except SpecError as err:
        print(f"invalid spec: {err}", file=sys.stderr)
        return 2
    try:
        summary = run_to_directory(spec, out, sys.argv)
    except TraceInputError as err:  # found once the trace is read: still bad input
        print(f"invalid {err.what}: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # the run failed: say why on one line, keep the traceback in stderr
        logging.getLogger("runners").exception("run failed")
        print(f"run failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


def _rerun(args: argparse.Namespace) -> int:
    """The manifest's resolved spec, in the image it ran in (by content id: exactly that
    image) when it ran in a container, else here; says when this code is another commit."""
    try:
        manifest = json.loads((args.run_dir / "manifest.json").read_text())
        spec = validate(manifest["spec"])
        if args.out.exists():
            raise rundir.OutputExists(f"{args.out} already exists (choose a new directory)")
    except SpecError as err:  # before ValueError: it is one
        print(f"invalid spec in {args.run_dir}/manifest.json: {err}", file=sys.stderr)
        return 2
    except rundir.OutputExists as err:
        print(f"--out: {err}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as err:
        print(f"run_dir: {args.run_dir} has no readable manifest.json ({err})", file=sys.stderr)
        return 2
    image = (manifest.get("container_image") or {}).get("id")
    if image:
        print(f"[runners] re-running in image {image}", file=sys.stderr)
        return _run_in_container(spec, args.out, image)
    from . import manifest as manifests

    then, now = manifest.get("code", {}).get("commit"), manifests.code_version()["commit"]
    if then != now:
        print(f"[runners] note: the run was made by commit {then}; this is {now}", file=sys.stderr)
    return _run_here(spec, args.out)


def _run_in_container(spec: Any, out: Path, image: str | None) -> int:
    """``run --executor docker``: the same run inside the runner image, its output streamed
    here; the run directory lands at ``out`` (exit code: the container's)."""
    import os
    import shutil
    import tempfile

    from .executors.base import ExecutorError, Resources
    from .executors.docker import DEFAULT_IMAGE, DockerExecutor

    executor = DockerExecutor(image or os.environ.get("LAB_RUNNER_IMAGE") or DEFAULT_IMAGE)
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    handle = None
    try:
        (home / "spec.json").write_text(json.dumps(spec.as_dict(), indent=2, sort_keys=True))
        real = getattr(spec, "mode", "sim") == "real"
        handle = executor.launch(home, 0, Resources(shm_gb=2.0 if real else 0.25))
        print(f"[runners] container {handle[:12]} of {executor.image}", file=sys.stderr)
        for chunk in executor.client.containers.get(handle).logs(stream=True, follow=True):
            sys.stderr.write(chunk.decode(errors="replace"))
        code = executor.wait(handle, timeout_s=24 * 3600)
        executor.poll(home, handle)  # process.log and exit_code, as the portal keeps them
        if code == 0 and (home / "run").is_dir():
            (home / "run").rename(out)
            executor.remove(handle)
            summary = json.loads((out / "summary.json").read_text())
            print(json.dumps(summary, sort_keys=True))  # as a local run prints it
        else:
            print(f"run failed in its container (exit {code}); log: {home / 'process.log'}",
                  file=sys.stderr)  # fmt: skip
        return code
    except ExecutorError as err:
        print(f"docker: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if handle:
            executor.stop(home, handle, grace_s=10)
        print("interrupted: the container was stopped", file=sys.stderr)
        return 130
    finally:
        if out.exists() or not any(home.iterdir()):
            shutil.rmtree(home, ignore_errors=True)


def _grid(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        print(f"--jobs: must be >= 1 (got {args.jobs})", file=sys.stderr)
        return 2
    try:
        loaded = grid.load_grid(args.grid)
        if args.out.exists() and not args.resume:
            raise rundir.OutputExists(f"{args.out} already exists (use --resume to continue it)")
    except SpecError as err:
        print(f"invalid grid: {err}", file=sys.stderr)
        return 2
    except rundir.OutputExists as err:
        print(f"--out: {err}", file=sys.stderr)
        return 2
    try:
        outcome = grid.run_grid(
            loaded, args.out, jobs=args.jobs, resume=args.resume, keep_runs=args.keep_runs
        )
    except KeyboardInterrupt:
        print(f"interrupted: finished runs are in {args.out}; add --resume", file=sys.stderr)
        return 130
    except grid.GridAborted as err:
        print(f"grid aborted: {err}", file=sys.stderr)
        return 1
    print(json.dumps(outcome.as_dict(), sort_keys=True))
    if outcome.failed:
        print(
            f"{outcome.failed} of {outcome.total} runs failed "
            f"(status/error columns of {outcome.results})",
            file=sys.stderr,
        )
        return 1
    return 0


def _harmony(args: argparse.Namespace) -> int:
    from .cluster import harmony

    try:
        return harmony.main(args.args)
    except SystemExit as err:  # argparse: usage errors exit 2, --help exits 0
        return int(err.code or 0)


def _names(value: str, what: str, known: list[str]) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    if not names:
        raise SpecError(what, "must name at least one")
    for name in names:
        if name not in known:
            raise SpecError(what, f"unknown {name!r} (known: {', '.join(known)})")
    return names


def _bandwidths(value: str, loopback: bool) -> tuple[float | None, ...]:
    from .real import launch

    out: list[float | None] = []
    for item in (v.strip() for v in value.split(",") if v.strip()):
        if item == "loopback" and loopback:
            out.append(None)
            continue
        try:
            gbps = float(item)
        except ValueError:
            raise SpecError("--bandwidths", f"not a number: {item!r}") from None
        if not launch.MIN_SHAPED_GBPS <= gbps <= launch.MAX_SHAPED_GBPS:
            raise SpecError(
                "--bandwidths",
                f"the emulated network shapes {launch.MIN_SHAPED_GBPS:g}.."
                f"{launch.MAX_SHAPED_GBPS:g} Gbit/s (got {gbps:g})",
            )
        out.append(gbps)
    if not out:
        raise SpecError("--bandwidths", "must name at least one")
    return tuple(out)


# ``calibrate --<name>-only``: one measurement added to an existing calibration. Several
# flags together are measured one after the other in this order (the compute profiles first,
# as a whole calibration measures them), each written as it completes.
CALIBRATE_ONLY = ("compute", "split", "ps", "overlap", "horovod", "latency")


def _only_flags(names: list[str]) -> str:
    return ", ".join(f"--{name}-only" for name in names)


def _calibrate(args: argparse.Namespace) -> int:
    from . import fidelity
    from .real import priority
    from .real import testbed as tb

    try:
        models = _names(args.models, "--models", workloads.names())
        bandwidths = _bandwidths(args.bandwidths, loopback=False)
        if not 2 <= args.workers <= 64:
            raise SpecError("--workers", f"must be between 2 and 64 (got {args.workers})")
        if not 1 <= args.threads <= 256 or args.repeats < 3:
            raise SpecError("--threads/--repeats", "threads 1..256, repeats >= 3")
        if not re.fullmatch(workloads.LABEL_PATTERN, args.label):
            raise SpecError("--label", f"bad label {args.label!r} (letters, digits, '.', '_', '-')")
        asked = [name for name in CALIBRATE_ONLY if getattr(args, f"{name}_only")]
        if asked and args.comm_priority is not None:
            raise SpecError(
                "--comm-priority",
                "the --*-only measurements keep the calibration's priority (its comm_priority);"
                " measure a whole calibration to change it",
            )
        if args.comm_priority == "realtime" and (why := priority.why_not_realtime()):
            raise SpecError("--comm-priority", f"realtime is not permitted here ({why})")
        cpu_rounds = fidelity.PS_CPU_ROUNDS if args.ps_cpu_probes is None else args.ps_cpu_probes
        if not 1 <= cpu_rounds <= fidelity.PS_CPU_ROUNDS_MAX:
            raise SpecError(
                "--ps-cpu-probes",
                f"must be between 1 and {fidelity.PS_CPU_ROUNDS_MAX} (got {cpu_rounds})",
            )
        if args.ps_cpu_probes is not None and asked and "ps" not in asked:
            raise SpecError(
                "--ps-cpu-probes",
                f"the PS arena's probes: with a whole calibration or --ps-only, not with "
                f"{_only_flags(asked)} alone",
            )
        if args.probe_rounds is not None:
            if not 1 <= args.probe_rounds <= fidelity.PROBE_ROUNDS_MAX:
                raise SpecError(
                    "--probe-rounds",
                    f"must be between 1 and {fidelity.PROBE_ROUNDS_MAX} (got {args.probe_rounds})",
                )
            if asked and "latency" not in asked:
                raise SpecError(
                    "--probe-rounds",
                    f"with a whole calibration or --latency-only, not with {_only_flags(asked)}"
                    " alone (the calibration's other measurements keep their counts)",
                )
        if args.ps_transport is not None and ("ps" in asked) == ("latency" in asked):
            raise SpecError(
                "--ps-transport",
                "with --ps-only or --latency-only, one of them: it names the transport the PS "
                "arena's probes use in either, and a whole calibration measures the blocking "
                f"transport (add the pipelined one's after it with --label {args.label} "
                "--ps-only --ps-transport pipelined)",
            )
        latencies = _added_latencies(args.added_latency_us, asked, args.label)
    except SpecError as err:
        print(f"invalid arguments: {err}", file=sys.stderr)
        return 2
    say = lambda message: print(f"[calibrate] {message}", file=sys.stderr, flush=True)  # noqa: E731
    if asked:
        steps = {
            "split": fidelity.calibrate_split,
            "ps": functools.partial(
                fidelity.calibrate_ps,
                cpu_rounds=cpu_rounds,
                transport=args.ps_transport or "blocking",
            ),
            "overlap": fidelity.calibrate_overlap,
            "horovod": fidelity.calibrate_horovod,
            "compute": functools.partial(fidelity.calibrate_compute, repeats=args.repeats),
            "latency": functools.partial(
                fidelity.calibrate_latency,
                latencies_us=latencies,
                rounds=args.probe_rounds,
                ps_transport=args.ps_transport,
            ),
        }
        done: list[str] = []
        for name in asked:
            if len(asked) > 1:
                say(f"--{name}-only ({len(done) + 1} of {len(asked)})")
            try:
                doc = steps[name](args.label, progress=say)
            except fidelity.CalibrationMissing as err:
                print(f"invalid arguments: --label: {err}", file=sys.stderr)
                return 2
            except RuntimeError as err:  # the testbed, or a probe's ranks failing
                kept = f"; {_only_flags(done)} written before it" if done else ""
                print(f"calibration failed at --{name}-only: {err}{kept}", file=sys.stderr)
                return 1
            done.append(name)
        wrote = f"wrote {fidelity.testbed_path(args.label)}"
        if len(done) > 1:
            wrote += f" ({_only_flags(done)})"
        return _show_calibration(doc, args.json, wrote)
    if why_not := tb.can_shape():
        print(f"note: {why_not}: measuring loopback only", file=sys.stderr)
    try:
        result = fidelity.calibrate(
            args.label,
            models,
            tuple(b for b in bandwidths if b is not None),
            args.workers,
            args.threads,
            args.repeats,
            progress=say,
            comm_priority=args.comm_priority or "auto",
            ps_cpu_rounds=cpu_rounds,
            probe_rounds=args.probe_rounds,
        )
    except RuntimeError as err:  # CalibrationError, the testbed, or a probe's ranks failing
        print(f"calibration failed: {err}", file=sys.stderr)
        return 1
    wrote = f"wrote {result['testbed']} and {len(result['profiles'])} measured profiles"
    return _show_calibration(result, args.json, wrote)


def _added_latencies(value: str | None, asked: list[str], label: str) -> tuple[float, ...]:
    """``calibrate --added-latency-us``: the latencies to add a way (``SpecError`` naming the
    flag for a value out of the testbed's range, or the flag without ``--latency-only`` and
    the other way round)."""
    from .real import testbed as tb

    if value is None:
        if "latency" in asked:
            raise SpecError(
                "--added-latency-us",
                "--latency-only needs the latencies to add, e.g. --added-latency-us 1000,5000",
            )
        return ()
    if "latency" not in asked:
        raise SpecError(
            "--added-latency-us",
            "with --latency-only (a whole calibration measures no added latency; add it after "
            f"with --label {label} --latency-only --added-latency-us US,..)",
        )
    out = []
    for part in value.split(","):
        try:
            latency = float(part)
        except ValueError:
            raise SpecError("--added-latency-us", f"{part!r} is not a number") from None
        if why := tb.added_latency_error(latency):
            raise SpecError("--added-latency-us", why)
        out.append(latency)
    return tuple(dict.fromkeys(out))


def _show_calibration(doc: dict[str, Any], as_json: bool, wrote: str) -> int:
    """A calibration as JSON, or one line per network and what was written."""
    if as_json:
        print(json.dumps(doc))
        return 0
    for point in doc["network"]:
        _print_point(point)
    print(wrote)
    return 0


def _print_point(point: dict[str, Any]) -> None:
    """One network of a calibration, on one line."""
    nominal = point["nominal_gbps"]
    where = "loopback" if nominal is None else f"{nominal:g} Gbit/s shaped"
    slow = ", ".join(
        f"{m} {v:+.0%} ({point['latency_busy_us'][m]:.0f} us)"
        for m, v in point["overlap_slowdown"].items()
    )
    split = (
        f"  reduce-scatter {point['reduce_scatter_cost']:.2f} / all-gather "
        f"{point['all_gather_cost']:.2f} of an all-reduce"
        if "reduce_scatter_cost" in point
        else ""
    )
    cpu = point.get("collective_cpu_us", {})
    rounds = point.get("negotiation_cpu_us", {})
    cpu_line = (
        "  compute per collective"
        + (" (per negotiation round): " if rounds else ": ")
        + ", ".join(
            f"{m} {v:.0f} us" + (f" ({rounds[m]:.0f} us)" if m in rounds else "")
            for m, v in cpu.items()
        )
        if cpu
        else ""
    )
    ps_line = _ps_line(point.get("ps"), "PS arena") + _ps_line(
        point.get("ps_pipelined"), "PS arena, pipelined transport"
    )
    own = point.get("horovod")
    horovod_line = (
        f"  Horovod: {own['cycle_cpu_us']:.0f} us of compute per cycle with a collective, a step "
        + ", ".join(f"{m} {v:+.0%}" for m, v in own["idle_slowdown"].items())
        + " while it idles"
        if own
        else ""
    )
    added = "".join(_added_line(float(key), e) for key, e in point.get("added_latency", {}).items())
    print(
        f"{where:20} bandwidth {point['bandwidth_gbps']:8.3f} Gbit/s  latency "
        f"{point['latency_us']:7.1f} us  compute while communicating (latency while "
        f"computing): {slow}{cpu_line}{split}{ps_line}{horovod_line}{added}"
    )


def _added_line(latency_us: float, entry: dict[str, Any]) -> str:
    """A network's measurements with ``latency_us`` added a way, in words: the all-reduce
    arena's fit and latencies while computing, and the PS arena's per transport, where
    measured."""
    line = f"  with {latency_us:g} us a way added:"
    if "bandwidth_gbps" in entry:
        line += (
            f" bandwidth {entry['bandwidth_gbps']:.3f} Gbit/s, latency "
            f"{entry['latency_us']:.0f} us, latency while computing "
            + ", ".join(f"{m} {v:.0f} us" for m, v in entry["latency_busy_us"].items())
        )
    return (
        line
        + _ps_line(entry.get("ps"), "PS arena")
        + _ps_line(entry.get("ps_pipelined"), "PS arena, pipelined transport")
    )


def _ps_line(ps: dict[str, Any] | None, name: str) -> str:
    """A calibration's PS arena entry at a network, in words ("" for none)."""
    if not ps:
        return ""
    return (
        f"  {name} ({ps['servers']} servers): "
        + ", ".join(
            f"{m} {v:+.0%} ({ps['latency_busy_us'][m]:.0f} us)"
            for m, v in ps["overlap_slowdown"].items()
        )
        + f", aggregation {ps['server_agg_gbps']:.1f} Gbit/s"
        + (f" + {ps['server_agg_fixed_us']:.0f} us a round" if "server_agg_fixed_us" in ps else "")
        + (
            f", {ps['message_cpu_us']:.0f} us of compute per message"
            if "message_cpu_us" in ps
            else ""
        )
        + (
            f", {ps['host_message_cpu_us']:.0f} us + {ps['host_cpu_ns_per_byte']:.2f} ns/B of"
            " the host's CPU per message"
            if "host_message_cpu_us" in ps
            else ""
        )
    )


def _fidelity(args: argparse.Namespace) -> int:
    from . import fidelity, fidelity_transport

    try:
        systems = _names(
            args.systems,
            "--systems",
            [e.name for e in registry.entries() if "real" in e.modes],
        )
        models = _names(args.models, "--models", workloads.names())
        bandwidths = _bandwidths(args.bandwidths, loopback=True)
        if not 3 <= args.iterations <= 10_000:
            raise SpecError("--iterations", f"must be between 3 and 10000 (got {args.iterations})")
        if not 1 <= args.repeats <= 20:
            raise SpecError("--repeats", f"must be between 1 and 20 (got {args.repeats})")
        if args.ps_transport != "blocking" and all(registry.get(s).arena != "ps" for s in systems):
            raise SpecError(
                "--ps-transport",
                f"{args.ps_transport} is a PS transport and --systems has no PS system "
                f"({', '.join(systems)}): add one, or leave the flag out",
            )
        if args.added_latency_us:
            _check_added_latency(args.added_latency_us, bandwidths)
        testbed = fidelity.load_testbed(args.label)
        fidelity.check_priority(testbed)
        for model in models:
            for nominal in bandwidths:
                for system in systems:  # each arena has its own measurements
                    fidelity.matched_specs(
                        system, model, nominal, testbed, latency=args.latency,
                        ps_transport=args.ps_transport, added_latency_us=args.added_latency_us,
                    )  # fmt: skip
    except (SpecError, fidelity.CalibrationMissing) as err:
        print(f"invalid arguments: {err}", file=sys.stderr)
        return 2
    total = len(systems) * len(models) * len(bandwidths)
    done = [0]

    def on_config(row: dict) -> None:
        done[0] += 1
        where = "loopback" if row["bandwidth_gbps"] is None else f"{row['bandwidth_gbps']:g}G"
        line = (
            f"[fidelity] {done[0]}/{total} {row['system']}/{row['workload']}/{where}: real "
            f"{row['real_iteration_s'] * 1e3:.1f} ms, sim {row['sim_iteration_s'] * 1e3:.1f} ms "
            f"({row['ape_pct']:.1f}%)"
        )
        if len(row["real_runs_s"]) > 1:
            runs = ", ".join(f"{t * 1e3:.1f}" for t in row["real_runs_s"])
            line += f"; real runs {runs} ms"
        print(line, file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(row), flush=True)

    from .fidelity_journal import default_path
    from .real.launch import RealRunError

    journal = args.journal or default_path(
        args.label, systems, models, bandwidths, args.ps_transport, args.added_latency_us
    )
    again = "run the same command with --resume to go on from there"
    try:
        result = fidelity.fidelity(
            args.label,
            systems,
            models,
            bandwidths,
            args.iterations,
            on_config=on_config,
            latency=args.latency,
            repeats=args.repeats,
            progress=lambda m: print(f"[fidelity] {m}", file=sys.stderr, flush=True),
            compute_check=args.compute_check,
            journal=journal,
            resume=args.resume,
            check_runs=args.check_runs,
            transport_check=args.transport_check,
            ps_transport=args.ps_transport,
            added_latency_us=args.added_latency_us,
            interference_check=args.interference_check,
            rescore=args.rescore,
        )
    except SpecError as err:
        print(f"invalid arguments: {err}", file=sys.stderr)
        return 2
    except RealRunError as err:  # a configuration failed twice: the set stops, its runs kept
        print(f"[fidelity] stopped: {err}", file=sys.stderr)
        print(f"[fidelity] the real runs so far are kept in {journal}: {again}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n[fidelity] interrupted; the real runs so far are kept in {journal}: {again}",
              file=sys.stderr)  # fmt: skip
        return 130
    except Exception:
        print(f"[fidelity] the real runs so far are kept in {journal}: {again}", file=sys.stderr)
        raise
    if args.json:
        if result["compute_drift"] is not None:  # the text report's line, on stderr
            print(f"[fidelity] {fidelity.drift_line(result)}", file=sys.stderr, flush=True)
        if result.get("transport_check"):  # the same for the transport check
            line = fidelity_transport.transport_line(result["transport_check"], result["label"])
            print(f"[fidelity] {line}", file=sys.stderr, flush=True)
        for line in fidelity.interference_lines(result):  # and the interference's
            print(f"[fidelity] {line}", file=sys.stderr, flush=True)
        print(json.dumps(result))
        return 0
    print(fidelity.format_report(result))
    return 0


def _check_added_latency(latency_us: float, bandwidths: tuple[float | None, ...]) -> None:
    """``fidelity --added-latency-us``: ``SpecError`` naming the flag for a latency out of the
    testbed's range or loopback among the networks."""
    from .real import testbed as tb

    if why := tb.added_latency_error(latency_us):
        raise SpecError("--added-latency-us", why)
    if None in bandwidths:
        raise SpecError(
            "--added-latency-us",
            "latency is added on the shaped network only: leave loopback out of --bandwidths",
        )


def _fidelity_pool(args: argparse.Namespace) -> int:
    """``fidelity-pool``: exit 2 for journals that cannot be pooled (the error names the
    file and what differs)."""
    from . import fidelity, fidelity_pool

    try:
        result = fidelity_pool.pool(
            args.journals,
            args.latency,
            progress=lambda m: print(f"[fidelity-pool] {m}", file=sys.stderr, flush=True),
        )
    except (SpecError, fidelity.CalibrationMissing) as err:
        print(f"invalid arguments: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
        return 0
    print(fidelity_pool.format_pool(result))
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        print("--repeats: must be >= 1", file=sys.stderr)
        return 2
    given = [
        flag
        for flag, on in (
            ("--control", args.control),
            ("--launched", args.launched),
            ("--iterations", args.iterations is not None),
            ("--dispatch", args.dispatch is not None),
        )
        if on
    ]
    if args.only != "real" and given:
        print(f"{given[0]}: only with --only real (the engine-vs-DDP pairs)", file=sys.stderr)
        return 2
    if args.iterations is not None and not 1 <= args.iterations <= 10_000:
        print(f"--iterations: must be between 1 and 10000 (got {args.iterations})",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.only in ("cluster", "real", "harmony"):
        report: dict = {"cases": [], "target_s": bench.CASE_TARGET_S}
    else:
        report = bench.run(repeats=args.repeats, progress=not args.json)
    if args.only in (None, "cluster"):
        report["cluster"] = bench.run_cluster(repeats=args.repeats, progress=not args.json)
    if args.only == "real":
        report["real"] = bench.run_real(
            repeats=args.repeats,
            iterations=args.iterations or bench.REAL_ITERATIONS,
            progress=not args.json,
            control=args.control,
            interleave=not args.launched,
            dispatch=args.dispatch or "auto",
        )
    if args.only == "harmony":
        report["harmony_train"] = bench.run_harmony_train(progress=not args.json)
    if args.grid:
        report["grid"] = bench.run_grid(progress=not args.json)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for case in report["cases"]:
        flag = "" if case["meets_target"] else f"  (over the {report['target_s']} s target)"
        print(
            f"{case['name']:44} median {case['median_wall_s'] * 1e3:8.1f} ms  "
            f"plan {case['plan_wall_s'] * 1e3:7.1f} ms  "
            f"{case['events_per_s']:10,.0f} events/s{flag}"
        )
    for case in report.get("cluster", []):
        target = case["target"]
        goal = (
            f">= {target['min_jobs_per_s']:,.0f} jobs/s"
            if "min_jobs_per_s" in target
            else f"<= {target['max_wall_s']:.0f} s"
        )
        flag = "" if case["meets_target"] else "  (misses the target)"
        print(
            f"cluster {case['name']:34} median {case['median_wall_s']:7.2f} s  "
            f"{case['simulated_jobs_per_s']:9,.0f} jobs/s  (target {goal}){flag}"
        )

    def span(values: list[float] | None) -> str:
        return "" if values is None else " ({:+.1f} to {:+.1f}%)".format(*values)

    def plural(n: int, word: str, words: str = "") -> str:
        return f"{n} {word if n == 1 else words or word + 's'}"

    def measured(case: dict) -> str:  # what the overhead was taken over
        if case.get("method") == "interleaved":
            return (
                f"{plural(case['block_pairs'], 'block pair')} ({case['block']} iterations a "
                f"side, ends trimmed) in {plural(case['repeats'], 'launch', 'launches')}"
            )
        return f"{plural(case['repeats'], 'pair')} of {case['iterations']}-iteration runs"

    width = max([42] + [len(c["name"]) for c in report.get("real", [])])  # the names aligned
    for case in report.get("real", []):
        flag = f"  {case['verdict']} (target {case['target_pct']:g}%)"
        if case["failures"]:
            flag += f"  ({len(case['failures'])} failed runs: {case['failures'][0]})"
        print(
            f"real {case['name']:{width}} DDP {case['ddp_iteration_s'] * 1e3:7.1f} ms  "
            f"engine {case['engine_iteration_s'] * 1e3:7.1f} ms  "
            f"overhead {case['overhead_pct']:+5.1f}%{span(case['overhead_ci_pct'])} over "
            f"{measured(case)}; the medians' "
            f"ratio {case['overhead_unpaired_pct']:+.1f}%"
            f"{span(case['overhead_unpaired_ci_pct'])}{flag}"
        )
        if "control_pct" in case:
            said = "not run"
            if case["control_pct"] is not None:
                said = (
                    f"{case['control_pct']:+.1f}%{span(case['control_ci_pct'])} over "
                    f"{plural(len(case['control_pairs']), 'pair')}: {case['control_verdict']} (the "
                    "verdict DDP would get against itself)"
                )
            print(f"real {'':{width}} control: DDP against itself {said}")
    if report.get("real"):
        ratios = [1 + c["overhead_pct"] / 100 for c in report["real"]]
        geomean = math.prod(ratios) ** (1 / len(ratios))
        used = sorted({c.get("engine_dispatch") or "?" for c in report["real"]})
        print(
            f"real engine vs DDP over {len(ratios)} models: geometric mean {geomean - 1:+.1%} "
            f"(the engine's dispatch: {', '.join(used)})"
        )
    if "harmony_train" in report:
        h = report["harmony_train"]
        for where, key in (
            ("validation", "validation_avg_jct_s"),
            ("held-out", "held_out_avg_jct_s"),
        ):
            others = "  ".join(f"{k} {v:,.0f}" for k, v in h[key].items() if k != "harmony")
            print(f"harmony {where:10} avg JCT: harmony {h[key]['harmony']:,.0f} s  ({others})")
        verdict = "meets" if h["meets_target"] else "misses"
        print(
            f"harmony training {h['train_wall_s']:.0f} s (kept the {h['kept']}): {verdict} the "
            f"target (beat {', '.join(h['target']['beats'])} on validation within "
            f"{h['target']['max_train_s']:.0f} s); held out: "
            f"{'beats' if h['beats_every_placement_baseline_held_out'] else 'does not beat'} all"
        )
    if "grid" in report:
        g = report["grid"]
        print(
            f"grid {g['grid']}: {g['runs']} runs ({g['failed']} failed) in {g['wall_s']:.1f} s "
            f"with {g['jobs']} jobs (target {g['target_s']:.0f} s)"
        )
    return 0
