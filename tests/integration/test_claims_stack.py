"""`manage.py reproduce` through the real queue: a Celery worker runs every claim's experiment,
the results are ingested, and one JSON line per claim comes back with a verdict."""

from __future__ import annotations

import json

import pytest
import yaml

from lab.reports.claims import VERDICTS

pytestmark = pytest.mark.integration

COMMON = {
    "paper": "test",
    "claim": "test claim",
    "source": "test",
    "unit": "%",
    "aggregate": "max",
    "conditions": [{"name": "workers", "value": 4, "origin": "assumption"}],
}
LEDGER = [
    {
        **COMMON,
        "id": "comm-claim",
        "system": "bytescheduler",
        "arena": "allreduce",
        "metric": "iteration_time_s",
        "lower_is_better": True,
        "measure": "percent_faster",
        "claimed": 10.0,
        "baselines": ["wfbp"],
        "modes": ["sim"],
        "experiment": {
            "workloads": ["resnet50-debug"],
            "seeds": [0, 1],
            "iterations": 5,
            "cluster": {"workers": 4, "bandwidth_gbps": 1.0},
        },  # fmt: skip
    },
    {
        **COMMON,
        "id": "cluster-claim",
        "system": "srtf",
        "arena": "cluster",
        "metric": "avg_jct_s",
        "lower_is_better": True,
        "measure": "percent_less",
        "claimed": 5.0,
        "baselines": ["fifo"],
        "modes": ["sim"],
        "experiment": {
            "seeds": [0, 1],
            "cluster": {
                "servers": 2,
                "gpus_per_server": 4,
                "trace": {"generator": "philly", "jobs": 30, "jobs_per_hour": 30},
            },
        },  # fmt: skip
    },
    {
        **COMMON,
        "id": "real-only",
        "system": "pace",
        "arena": "allreduce",
        "metric": "iteration_time_s",
        "lower_is_better": True,
        "measure": "percent_faster",
        "claimed": 36.0,
        "baselines": ["horovod"],
        "modes": ["real"],
        "experiment": {"workloads": ["resnet50-debug"], "seeds": [0]},
    },
]


def test_reproduce_runs_each_claim_through_the_queue(embedded_stack, tmp_path):
    ledger = tmp_path / "ledger.yaml"
    ledger.write_text(yaml.safe_dump(LEDGER))
    out = embedded_stack.manage(
        "reproduce", "--all", "--mode", "sim", "--json", "--ledger", str(ledger), "--timeout", "110"
    )
    lines = {d["claim"]: d for d in map(json.loads, out.splitlines())}
    assert set(lines) == {"comm-claim", "cluster-claim", "real-only"}
    for claim in ("comm-claim", "cluster-claim"):
        line = lines[claim]
        assert line["verdict"] in VERDICTS and line["verdict"] != "not-run", line["reason"]
        assert isinstance(line["measured"], float) and line["unit"] == "%"
        assert line["conditions"] == {"workers": {"value": 4, "origin": "assumption"}}
    assert lines["real-only"]["verdict"] == "not-run"
    # The experiments are ordinary ones: the API lists them with their runs' status.
    status, listing = embedded_stack.api("GET", "/api/experiments/")
    assert status == 200
    by_name = {e["name"]: e for e in listing["experiments"]}
    for name in ("claim comm-claim (sim)", "claim cluster-claim (sim)"):
        assert by_name[name]["status"] == "succeeded", by_name[name]
