"""CLI: `python -m workloads list` and `python -m workloads profile NAME... | --all [--check]`.

`python -m workloads profile NAME... --measure [--device cpu|cuda[:N]] [--batch-size N]
[--repeats R] [--warmup W] [--label LABEL] [--measured-dir DIR]` times real training steps
on this machine and writes profiles/measured/<name>@<label>.json instead (see
workloads/measure.py).

Exit codes: 0 ok, 1 a stored profile is stale (--check), 2 usage error, unknown name, or a
device this machine does not have.
"""

import argparse
import re
import sys
from pathlib import Path

from workloads import LABEL_PATTERN, MEASURED_DIR, PROFILES_DIR
from workloads.models import MODELS

_MEASURE_ONLY = ("batch_size", "repeats", "warmup", "label", "measured_dir", "barrier")


def _usage_error(message: str) -> int:
    print(f"python -m workloads: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with `argv` (default: sys.argv[1:]); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m workloads", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print the model names, one per line")
    prof = sub.add_parser("profile", help=f"write {PROFILES_DIR.name}/<name>.json")
    prof.add_argument("names", nargs="*", metavar="NAME")
    prof.add_argument("--all", action="store_true", help="every registered model")
    prof.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a stored file is stale"
    )
    prof.add_argument(
        "--device",
        default=None,
        help="torch device: for the analytic forward pass (default: meta), or to measure on "
        "with --measure (cpu or cuda[:N]; default: cpu)",
    )
    prof.add_argument(
        "--measure",
        action="store_true",
        help=f"time real training steps; write {PROFILES_DIR.name}/{MEASURED_DIR.name}/"
        "<name>@<label>.json",
    )
    prof.add_argument(
        "--batch-size", type=int, help="--measure: samples per step (default: the model's)"
    )
    prof.add_argument("--repeats", type=int, help="--measure: timed steps (default: 5)")
    prof.add_argument("--warmup", type=int, help="--measure: untimed steps first (default: 2)")
    prof.add_argument(
        "--label", help="--measure: file label (default: cpu, or the GPU's short name, e.g. h100)"
    )
    prof.add_argument(
        "--measured-dir",
        type=Path,
        help=f"--measure: write there instead of {PROFILES_DIR.name}/{MEASURED_DIR.name}/",
    )
    prof.add_argument(
        "--barrier",
        metavar="DIR:N",
        help="--measure: start the timed steps together with N-1 other processes given the "
        "same DIR (after each one's warm-up; how `python -m runners calibrate` measures its "
        "ranks at once)",
    )
    args = parser.parse_args(argv)

    if args.command == "list":
        print("\n".join(sorted(MODELS)))
        return 0

    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        print(
            f"unknown model(s): {', '.join(unknown)} (known: {', '.join(sorted(MODELS))})",
            file=sys.stderr,
        )
        return 2
    names = sorted(MODELS) if args.all else list(dict.fromkeys(args.names))
    if not names:
        parser.error("profile: give NAME... or --all")  # exits 2

    if args.measure:
        return _measure(args, names)
    given = [
        f"--{opt.replace('_', '-')}" for opt in _MEASURE_ONLY if getattr(args, opt) is not None
    ]
    if given:
        return _usage_error(f"{', '.join(given)} only go with --measure")

    from workloads import profiler  # imports torch: only now that there is work to do

    device = args.device or "meta"
    if args.check:
        problems = [p for n in names if (p := profiler.check_profile(n, device=device))]
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            return 1
        print(f"up to date: {', '.join(names)}")
        return 0
    for name in names:
        print(profiler.write_profile(name, device=device))
    return 0


def _measure(args: argparse.Namespace, names: list[str]) -> int:
    """`profile --measure`: validate the options, then measure and write each model."""
    device = args.device or "cpu"
    if args.check:
        return _usage_error("--check does not go with --measure (measured times vary)")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        return _usage_error(f"--measure needs --device cpu or cuda[:N], not '{device}'")
    for opt, low in (("batch_size", 1), ("repeats", 1), ("warmup", 0)):
        value = getattr(args, opt)
        if value is not None and value < low:
            return _usage_error(f"--{opt.replace('_', '-')} must be >= {low}, got {value}")
    barrier = None
    if args.barrier is not None:
        directory, _, parties = args.barrier.rpartition(":")
        if not directory or not parties.isdigit() or int(parties) < 1:
            return _usage_error(
                f"--barrier '{args.barrier}' must be DIR:N (a directory and a count >= 1)"
            )
        barrier = (Path(directory), int(parties))
    if args.label is not None and not re.fullmatch(LABEL_PATTERN, args.label):
        return _usage_error(
            f"--label '{args.label}' must be letters, digits, '.', '_' or '-' (not first)"
        )

    import torch  # only now: the checks above need no torch

    from workloads import measure

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            built = torch.version.cuda or "none"
            return _usage_error(
                f"--device {device}: CUDA is not available here (torch {torch.__version__}, "
                f"CUDA build: {built}, GPUs visible: {torch.cuda.device_count()}); measure "
                "with --device cpu, or run on a machine with an NVIDIA GPU, its driver and "
                "a CUDA build of torch"
            )
        index = torch.device(device).index or 0
        if index >= torch.cuda.device_count():
            return _usage_error(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here"
            )
    for name in names:  # every model checked before any is measured
        refusal = measure.memory_refusal(name, args.batch_size, device)
        if refusal:
            return _usage_error(refusal)
    for name in names:
        together = None if barrier is None else measure.file_barrier(barrier[0] / name, barrier[1])
        path = measure.write_measured(
            name,
            device=device,
            batch_size=args.batch_size,
            repeats=args.repeats if args.repeats is not None else measure.DEFAULT_REPEATS,
            warmup=args.warmup if args.warmup is not None else measure.DEFAULT_WARMUP,
            label=args.label,
            measured_dir=args.measured_dir or MEASURED_DIR,
            progress=measure.stderr_progress(name),
            before_timed=together,
        )
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
