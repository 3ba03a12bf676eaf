"""Benchmarks of the simulators (``python -m runners bench``).

Performance targets live here, not in timed tests. Each case is timed ``repeats`` times after
one first run; we report the median (our machines are shared and noisy). Policies that search
before running (PACE's fusion DP, ByteScheduler's tuner) cache their plan per condition, so the
first run's extra time is reported separately as ``plan_wall_s`` and the median is simulation
alone.

Targets (issue 3): one configuration of resnet50, 16 workers, 50 iterations: under 0.2 s of
simulation on one core, any policy; the full grid of every communication system and baseline x
6 workloads x 5 bandwidths x 3 seeds (``examples/grids/comm-full.yaml``): under 5 minutes on
2 cores (``--grid``).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import registry
from .execute import simulate
from .sim import allreduce as ar_sim
from .spec import validate

CASE_TARGET_S = 0.2
GRID_TARGET_S = 300.0
FULL_GRID = Path(__file__).resolve().parent.parent / "examples" / "grids" / "comm-full.yaml"


def cases() -> list[dict[str, Any]]:
    return [
        {"system": e.name, "workload": "resnet50", "cluster": {"workers": 16}, "iterations": 50}
        for e in registry.entries()
        if e.arena in ("allreduce", "ps")
    ]


def run(repeats: int = 5, progress: bool = True) -> dict[str, Any]:
    results = []
    all_cases = cases()
    for i, raw in enumerate(all_cases):
        spec = validate(raw)
        ar_sim.clear_plan_cache()
        started = time.perf_counter()
        simulate(spec)  # first run: imports, profile cache, the policy's plan search
        first = time.perf_counter() - started
        walls, events = [], 0.0
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            result = simulate(spec)
            walls.append(time.perf_counter() - started)
            events = result.metrics["sim_events"]
        median = statistics.median(walls)
        name = f"{spec.system}/{spec.workload}/w{spec.cluster.workers}/it{spec.iterations}"
        results.append(
            {
                "name": name,
                "system": spec.system,
                "arena": spec.arena,
                "median_wall_s": median,
                "plan_wall_s": max(0.0, first - median),
                "events": events,
                "events_per_s": events / median,
                "simulated_iterations_per_s": (spec.iterations + spec.warmup_iterations + 1)
                / median,
                "repeats": len(walls),
                "meets_target": median < CASE_TARGET_S,
            }
        )
        if progress:
            print(f"[bench] {i + 1}/{len(all_cases)} {name}", file=sys.stderr)
    return {
        "host": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "target_s": CASE_TARGET_S,
        "cases": results,
    }


def run_grid(path: Path = FULL_GRID, jobs: int = 2, progress: bool = True) -> dict[str, Any]:
    """Time a whole grid (default: the full communication grid) in a scratch directory."""
    from . import grid

    spec = grid.load_grid(path)
    with tempfile.TemporaryDirectory(prefix="bench-grid-") as tmp:
        started = time.perf_counter()
        outcome = grid.run_grid(spec, Path(tmp) / "out", jobs=jobs, progress=progress)
        wall = time.perf_counter() - started
    return {
        "grid": str(path),
        "runs": outcome.total,
        "failed": outcome.failed,
        "jobs": jobs,
        "wall_s": wall,
        "target_s": GRID_TARGET_S,
        "meets_target": wall < GRID_TARGET_S and outcome.failed == 0,
    }
