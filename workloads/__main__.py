"""CLI: `python -m workloads list` and `python -m workloads profile NAME... | --all [--check]`.

Exit codes: 0 ok, 1 a stored profile is stale (--check), 2 usage error or unknown name.
"""

import argparse
import sys

from workloads import PROFILES_DIR
from workloads.models import MODELS


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
        "--device", default="meta", help="torch device for the forward pass (default: meta)"
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

    from workloads import profiler  # imports torch: only now that there is work to do

    if args.check:
        problems = [p for n in names if (p := profiler.check_profile(n, device=args.device))]
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            return 1
        print(f"up to date: {', '.join(names)}")
        return 0
    for name in names:
        print(profiler.write_profile(name, device=args.device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
