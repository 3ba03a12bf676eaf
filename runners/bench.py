"""Benchmarks of the simulators (``python -m runners bench``).

Performance targets live here, not in timed tests. Each case is timed ``repeats`` times after
one warm-up run; we report the median (our machines are shared and noisy).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from typing import Any

from .execute import simulate
from .spec import validate

CASES: tuple[dict[str, Any], ...] = tuple(
    {"system": system, "workload": workload, "cluster": {"workers": 16}, "iterations": 50}
    for workload in ("resnet50", "vgg16")
    for system in ("wfbp", "bytescheduler")
)


def run(repeats: int = 5, progress: bool = True) -> dict[str, Any]:
    cases = []
    for i, raw in enumerate(CASES):
        spec = validate(raw)
        simulate(spec)  # warm-up (imports, profile cache)
        walls, events = [], 0.0
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            result = simulate(spec)
            walls.append(time.perf_counter() - started)
            events = result.metrics["sim_events"]
        median = statistics.median(walls)
        name = f"{spec.system}/{spec.workload}/w{spec.cluster.workers}/it{spec.iterations}"
        cases.append(
            {
                "name": name,
                "median_wall_s": median,
                "events": events,
                "events_per_s": events / median,
                "simulated_iterations_per_s": (spec.iterations + spec.warmup_iterations + 1)
                / median,
                "repeats": len(walls),
            }
        )
        if progress:
            print(f"[bench] {i + 1}/{len(CASES)} {name}", file=sys.stderr)
    return {
        "host": {"python": platform.python_version(), "machine": platform.machine()},
        "cases": cases,
    }
