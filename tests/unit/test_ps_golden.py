"""Golden outputs of the parameter-server simulator, bit for bit: every metric of every
parameter-server system on small configurations, and a digest of each run's timeline, synced
records and per-iteration series. Performance work on the simulator (``runners.sim.ps``,
``runners.sim.engine``, ``runners.sim.core``) must not change any of them.

The configurations have no compute noise (no numpy draws), so the outputs are pure Python float
arithmetic and the same on every platform; identical workers split into jitter groups make
events tie to the instant, so the order of simultaneous events is pinned too (the straggler
makes a third group). Regenerate with
LAB_UPDATE_GOLDEN=1 only after an intended model change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from runners import registry
from runners.execute import simulate
from runners.sim import ps as ps_sim
from runners.sim.allreduce import compute_setup
from runners.sim.engine import SimResult
from runners.spec import validate

GOLDEN = Path(__file__).parent / "golden" / "ps_sim.json"

_BASE: dict[str, Any] = {
    "workload": "resnet50",
    "iterations": 6,
    "timeline_iterations": 0,  # every iteration
    "cluster": {
        "workers": 8,
        "compute_jitter_cv": 0.0,
        "jitter_groups": 2,
        "stragglers": [{"worker": 3, "slowdown": 1.5, "from_iteration": 2}],
    },
}


def _case(system: str, params: dict[str, Any] | None = None, **over: Any) -> dict[str, Any]:
    raw = {**_BASE, "system": system, **over}
    if params:
        raw["params"] = params
    return raw


CASES: dict[str, dict[str, Any]] = {
    **{name: _case(name) for name in (e.name for e in registry.entries("ps"))},
    "eager-ps/sync-round": _case("eager-ps", {"server_mode": "sync-round", "lr_rule": "linear"}),
    "ps-default/one-order": _case("ps-default", {"order_groups": 1}),
    "p3/ps-stragglers": _case(
        "p3",
        cluster={
            **_BASE["cluster"],
            "ps": 3,
            "ps_stragglers": [
                {"server": 1, "bandwidth_factor": 0.5, "cpu_slowdown": 2.0, "from_iteration": 2}
            ],
        },
    ),
    "p3/mixed-priorities": _case("p3", cluster={**_BASE["cluster"], "latency_us": 0}),
    "psld/migrating": _case(
        "psld",
        {"epsilon": 0.5, "window": 1},
        iterations=20,
        cluster={**_BASE["cluster"], "ps": 2, "servers": 4},
    ),
}


def _mixed_priorities(raw: dict[str, Any]) -> SimResult:
    """p3's keys with priorities that tie within and across layers, not in runs: each layer's
    tasks pushed, served and pulled in priority order (the uplink queues runs of equal keys)."""
    spec = validate(raw)
    setup = compute_setup(spec)
    plan = registry.get(spec.system).build(spec.params).plan(ps_sim.build_problem(spec, setup))
    tasks = tuple(dataclasses.replace(t, priority=(i * 7) % 5) for i, t in enumerate(plan.tasks))
    plan = dataclasses.replace(plan, tasks=tasks, server_order="fifo")
    groups, order_draw = ps_sim.simulated_groups(setup.groups, 1, spec.cluster.jitter_groups)
    return ps_sim.simulate(dataclasses.replace(setup, groups=groups), spec, plan, order_draw)


CUSTOM = {"p3/mixed-priorities": _mixed_priorities}


def outputs(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    result = CUSTOM[name](raw) if name in CUSTOM else simulate(validate(raw))
    records = repr((result.timeline, result.synced, result.series)).encode()
    return {
        "metrics": result.metrics,
        "digest": hashlib.sha256(records).hexdigest(),
        "timeline_rows": len(result.timeline),
    }


def golden_outputs() -> dict[str, dict[str, Any]]:
    return {name: outputs(name, raw) for name, raw in CASES.items()}


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, Any]]:
    out = golden_outputs()
    if os.environ.get("LAB_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_ps_simulator_outputs_are_unchanged_bit_for_bit(measured, name):
    stored = json.loads(GOLDEN.read_text())[name]
    got = measured[name]
    # JSON keeps floats exactly (shortest repr that round-trips): compare with ==.
    assert got["metrics"] == stored["metrics"], name
    assert got["timeline_rows"] == stored["timeline_rows"], name
    assert got["digest"] == stored["digest"], f"{name}: timeline, synced or series changed"


def test_the_golden_cases_cover_what_they_are_for():
    stored = json.loads(GOLDEN.read_text())
    assert set(stored) == set(CASES)
    assert stored["psld/migrating"]["metrics"]["ps_migrated_bytes"] > 0  # migrations ran
    assert stored["eager-ps"]["metrics"]["mean_staleness"] > 0  # async by default
    assert all(v["timeline_rows"] > 0 for v in stored.values())
