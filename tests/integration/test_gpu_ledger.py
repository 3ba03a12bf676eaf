"""GPU claims under real concurrency, on a real PostgreSQL server.

Several processes, each with its own database connection, claim GPUs for different runs at
the same moment (forked after Django's setup, a barrier releases them together): exactly as
many succeed as there are GPUs to give, the others get ``NotEnoughGpus`` (never a database
error), and no GPU is claimed twice. No GPU is needed: the hosts and GPUs are rows made here.

This file is also the claimers' script: ``python -m tests.integration.test_gpu_ledger HOSTS
CLAIMERS COUNT ROUNDS`` (run by the tests with DATABASE_URL pointing at the test server).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.stack import ROOT, PostgresServer, fork_at_once, run_json_script

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

PY = sys.executable
SCRIPT = "tests.integration.test_gpu_ledger"
ROUNDS = 5  # each round starts from a fresh ledger; more rounds, more chances of a close race


@pytest.fixture(scope="module")
def pg_env(tmp_path_factory) -> Iterator[dict[str, str]]:
    """Environment of a lab on a fresh, migrated PostgreSQL (one server for this module)."""
    server = PostgresServer()
    root = tmp_path_factory.mktemp("gpu-ledger")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "lab.settings.base",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(40),
        "DATABASE_URL": server.url,
        "LAB_VAR_DIR": str(root / "var"),
        "LAB_RESULTS_DIR": str(root / "results"),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("REDIS_URL", None)
    try:
        migrate = subprocess.run(
            [PY, "manage.py", "migrate", "--no-input"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        yield env
    finally:
        server.close()


def race(env: dict[str, str], hosts: str, claimers: int, count: int) -> list[dict[str, Any]]:
    """Run the claimers' script: ROUNDS rounds of ``claimers`` forked processes, each claiming
    ``count`` GPUs for its own run at the same moment; one result list per round."""
    return run_json_script(env, SCRIPT, hosts, claimers, count, ROUNDS, timeout=120)


def assert_no_gpu_twice(rounds: list[dict[str, Any]], succeeded: int) -> None:
    assert len(rounds) == ROUNDS
    for outcome in rounds:
        results, claims = outcome["results"], outcome["claims"]
        crashed = [r for r in results if "crash" in r]
        assert not crashed, crashed[0]["crash"]
        won = [r for r in results if r["ok"]]
        lost = [r for r in results if not r["ok"]]
        assert len(won) == succeeded, results
        assert all(r["error"] == "NotEnoughGpus" for r in lost), lost
        uuids = [u for r in won for u in r["gpus"]]
        assert len(uuids) == len(set(uuids)), f"a GPU was handed out twice: {won}"
        for r in won:
            assert len(set(r["hosts"])) == 1, f"run {r['run']} got GPUs on several hosts: {r}"
        assert sorted(c["gpu"] for c in claims) == sorted(uuids)
        assert {c["run"] for c in claims} == {r["run"] for r in won}


def test_eight_claimers_of_four_gpus_exactly_four_win(pg_env):
    assert_no_gpu_twice(race(pg_env, "host-a:4", 8, 1), succeeded=4)


def test_pairs_of_gpus_stay_on_one_host_under_contention(pg_env):
    # 2 pairs fit on host-a, 1 on host-b, none on host-c.
    assert_no_gpu_twice(race(pg_env, "host-a:4,host-b:2,host-c:1", 6, 2), succeeded=3)


# --- the claimers' script (runs in subprocesses, with Django set up on PostgreSQL) ---------


def _setup(hosts: str, n_runs: int) -> list[int]:
    """Empty the ledger; make hosts ("name:gpus,...") and ``n_runs`` runs; return run ids."""
    from django.contrib.auth import get_user_model

    from lab.experiments.models import Experiment
    from lab.hosts.models import Gpu, GpuClaim, Host
    from lab.runs.models import Run

    GpuClaim.objects.all().delete()
    Gpu.objects.all().delete()
    Host.objects.all().delete()
    user, _ = get_user_model().objects.get_or_create(username="ledger-test")
    experiment = Experiment.objects.create(owner=user, name="gpu ledger", system="wfbp")
    for spec in hosts.split(","):
        name, gpus = spec.split(":")
        host = Host.objects.create(name=name, queue=f"host.{name}")
        for index in range(int(gpus)):
            Gpu.objects.create(host=host, index=index, uuid=f"GPU-{name}-{index}", model="A100")
    runs = [
        Run.objects.create(experiment=experiment, system="wfbp", workload="w", seed=i, spec={})
        for i in range(n_runs)
    ]
    return [r.pk for r in runs]


def _claim(run_id: int, count: int, barrier: Any, results: Any) -> None:
    """A forked claimer: its own connection, then wait at the barrier and claim."""
    from django.db import connection

    from lab.hosts import ledger
    from lab.runs.models import Run

    try:
        run = Run.objects.get(pk=run_id)  # connects: the connection is this process's own
        connection.ensure_connection()
        barrier.wait(timeout=30)
        try:
            gpus = ledger.claim_gpus(run, count)
        except ledger.NotEnoughGpus as err:
            results.put({"run": run_id, "ok": False, "error": "NotEnoughGpus", "why": str(err)})
            return
        hosts = [g.host.name for g in gpus]
        results.put({"run": run_id, "ok": True, "gpus": [g.uuid for g in gpus], "hosts": hosts})
    except BaseException:
        results.put({"run": run_id, "crash": traceback.format_exc()})
    finally:
        connection.close()


def _race(hosts: str, claimers: int, count: int) -> dict[str, Any]:
    """One round: fresh ledger, ``claimers`` processes forked from here, the claims after."""
    runs = _setup(hosts, claimers)
    outcome = fork_at_once(_claim, [(r, count) for r in runs])
    return {"results": outcome, "claims": _report()}


def _report() -> list[dict[str, Any]]:
    from lab.hosts.models import GpuClaim

    active = GpuClaim.objects.filter(released_at__isnull=True).select_related("gpu")
    return [{"gpu": c.gpu.uuid, "run": c.run_id} for c in active]


if __name__ == "__main__":
    import django

    django.setup()
    hosts_arg, claimers_arg, count_arg, rounds_arg = sys.argv[1:]
    rounds = [_race(hosts_arg, int(claimers_arg), int(count_arg)) for _ in range(int(rounds_arg))]
    print(json.dumps(rounds))
