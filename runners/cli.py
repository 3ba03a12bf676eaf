"""``python -m runners``: list the registry, run one spec, benchmark the simulator.

Exit codes: 0 success, 1 the run failed, 2 bad input (invalid spec, existing --out).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import workloads
from workloads import devices

from . import bench, registry, rundir
from .execute import run_to_directory
from .spec import SpecError, load_file, validate


def main(argv: list[str] | None = None) -> int:
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
    p.set_defaults(func=_run)
    p = sub.add_parser("bench", help="benchmark the simulators")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per case (median)")
    p.set_defaults(func=_bench)
    return parser


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
    try:
        summary = run_to_directory(spec, args.out, sys.argv)
    except Exception as err:  # the run failed: say why on one line, keep the traceback in stderr
        logging.getLogger("runners").exception("run failed")
        print(f"run failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


def _bench(args: argparse.Namespace) -> int:
    report = bench.run(repeats=args.repeats, progress=not args.json)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for case in report["cases"]:
            print(
                f"{case['name']:40} median {case['median_wall_s'] * 1e3:8.1f} ms  "
                f"{case['events_per_s']:12,.0f} events/s"
            )
    return 0
