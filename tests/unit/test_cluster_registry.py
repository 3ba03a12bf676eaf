"""Every cluster-arena registry entry against the simulator's invariants, and golden metrics
for FIFO, DRF and SRTF (regenerate with LAB_UPDATE_GOLDEN=1 after an intended model change)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from runners import registry
from runners.cluster.sim import ClusterConfig
from workloads.traces import philly_like

from .test_cluster_sim import CheckedSim

GOLDEN = Path(__file__).parent / "golden" / "cluster_metrics.json"
GOLDEN_KEYS = (
    "jobs_finished",
    "avg_jct_s",
    "p95_jct_s",
    "makespan_s",
    "total_utility",
    "avg_queueing_s",
    "gpu_utilization",
    "preemptions",
)
# Entries that promise not to move a running job (fixed placement until it ends).
NO_MIGRATION = {"fifo", "drf", "tetris", "rrh", "bin-packing", "load-balance", "lif"}


def small_trace(n: int = 80, seed: int = 4):
    jobs = philly_like(n, seed=seed, jobs_per_hour=25, ps_fraction=0.4)
    return tuple(dataclasses.replace(j, duration_s=j.duration_s / 10) for j in jobs)


class NoMigrationSim(CheckedSim):
    """Also checks that a running job's placement never changes between starts."""

    def _update_rates(self) -> None:
        super()._update_rates()
        seen = self.__dict__.setdefault("_placed", {})
        for job_id, state in self.running.items():
            key = (job_id, state.starts)
            placement = {s: tuple(x) for s, x in state.placement.items()}
            assert seen.setdefault(key, placement) == placement, f"job {job_id} was moved"


@pytest.mark.parametrize("ps_servers", [0, 2], ids=["one-pool", "ps-pool"])
@pytest.mark.parametrize("name", [e.name for e in registry.entries("cluster")])
def test_every_cluster_entry_keeps_the_invariants(name, ps_servers):
    entry = registry.get(name)
    policy = entry.build(entry.defaults())
    jobs = small_trace()
    sim_class = NoMigrationSim if name in NO_MIGRATION else CheckedSim
    config = ClusterConfig(servers=4, ps_servers=ps_servers)
    sim = sim_class(jobs, config, policy.scheduler, policy.place, restart_overhead_s=10.0)
    result = sim.run()
    assert int(result.metrics["jobs_finished"]) + len(sim.rejected) == len(jobs)
    for state in sim.finished:
        assert state.done == pytest.approx(state.work)  # never finishes before its work is done
        assert state.first_start >= state.job.arrival_s
        assert state.finish > state.first_start
    if name in NO_MIGRATION:
        assert result.metrics["resizes"] == 0


def golden_metrics() -> dict[str, dict[str, float]]:
    out = {}
    for name in ("fifo", "drf", "srtf"):
        entry = registry.get(name)
        policy = entry.build(entry.defaults())
        sim = CheckedSim(
            small_trace(200, seed=7), ClusterConfig(servers=8), policy.scheduler, policy.place
        )
        metrics = sim.run().metrics
        out[name] = {k: metrics[k] for k in GOLDEN_KEYS}
    return out


def test_golden_traces_for_fifo_drf_and_srtf():
    measured = golden_metrics()
    if os.environ.get("LAB_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n")
    stored = json.loads(GOLDEN.read_text())
    for name, metrics in stored.items():
        for key, value in metrics.items():
            assert measured[name][key] == pytest.approx(value, rel=1e-9), f"{name}.{key}"
    # The three differ on this trace (the golden file is not one policy copied three times).
    assert len({round(m["avg_jct_s"], 3) for m in stored.values()}) == 3
