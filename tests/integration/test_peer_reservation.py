"""Choosing the peers of runs over several hosts, under real concurrency on a real PostgreSQL.

Two hosts launch a run over two hosts each at the same moment (forked processes, each with its
own database connection and its own ``HOST_NAME``, released together by a barrier). Two peers
are free, and both launches would pick the same one (the first by name) if they did not
serialise: ``actions._reserve_peers`` locks the hosts, so each run gets its own peer. A third
launch with no free peer left waits (None) instead of taking a busy one. No GPU or second
machine is needed: hosts and runs are rows made here.

This file is also the launchers' script: ``python -m tests.integration.test_peer_reservation
LAUNCHERS ROUNDS`` (run by the test with DATABASE_URL pointing at the test server).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import pytest

from tests.integration.stack import fork_at_once, run_json_script
from tests.integration.test_gpu_ledger import pg_env  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SCRIPT = "tests.integration.test_peer_reservation"
ROUNDS = 5
LAUNCHERS = ("host-a", "host-b", "host-c")  # each launches one run over 2 hosts
PEERS = ("host-p", "host-q")  # the only free hosts besides them


def test_two_launches_at_once_get_two_different_peers_and_a_third_waits(pg_env):  # noqa: F811
    env = {**pg_env, "REDIS_URL": "redis://127.0.0.1:1/0"}  # hosts need a shared broker
    rounds = run_json_script(env, SCRIPT, len(LAUNCHERS), ROUNDS, timeout=180)
    assert len(rounds) == ROUNDS
    for results in rounds:
        crashed = [r for r in results if "crash" in r]
        assert not crashed, crashed[0]["crash"]
        peers = [r["peers"] for r in results if r["peers"] is not None]
        # two free peers: exactly two launches get one, each its own; the third waits
        assert len(peers) == len(PEERS), results
        chosen = [p for ps in peers for p in ps]
        assert sorted(chosen) == sorted(PEERS), f"a peer was chosen twice: {results}"
        waiting = [r for r in results if r["peers"] is None]
        assert len(waiting) == 1 and waiting[0]["nodes"] == [], waiting


# --- the launchers' script (runs in subprocesses, with Django set up on PostgreSQL) ---------


def _setup(launchers: int) -> list[tuple[int, str]]:
    """Fresh hosts (the launchers' and the peers'), each launcher's run already running on
    it as node 0 would be; returns (run id, its host) per launcher."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from lab.experiments.models import Experiment
    from lab.hosts.models import Host
    from lab.runs.models import Run, RunNode

    RunNode.objects.all().delete()
    Run.objects.all().delete()
    Host.objects.all().delete()
    user, _ = get_user_model().objects.get_or_create(username="peer-test")
    experiment = Experiment.objects.create(owner=user, name="peers", system="wfbp")
    names = [*LAUNCHERS[:launchers], *PEERS]
    for k, name in enumerate(names):
        Host.objects.create(
            name=name, queue=f"host.{name}", last_seen=timezone.now(), address=f"10.0.0.{k + 1}"
        )
    spec = {"mode": "real", "real": {"nodes": 2}, "cluster": {"workers": 2}}
    runs = []
    for i, name in enumerate(LAUNCHERS[:launchers]):
        run = Run.objects.create(
            experiment=experiment, system="wfbp", workload="w", seed=i, spec=spec,
            state=Run.RUNNING, host=name, executor="local",
        )  # fmt: skip
        runs.append((run.pk, name))
    return runs


def _launch(run_id: int, host: str, barrier: Any, results: Any) -> None:
    """A forked launcher on ``host``: its own connection, then wait at the barrier and
    reserve one peer for its run."""
    from django.conf import settings
    from django.db import connection

    from lab import actions
    from lab.runs.models import Run, RunNode
    from runners import executors

    try:
        settings.HOST_NAME = host
        run = Run.objects.get(pk=run_id)  # connects: the connection is this process's own
        connection.ensure_connection()
        barrier.wait(timeout=30)
        reserved = actions._reserve_peers(run, 1, executors.Resources())
        nodes = list(RunNode.objects.filter(run=run).values_list("host", flat=True))
        peers = None if reserved is None else nodes
        results.put({"run": run_id, "host": host, "peers": peers, "nodes": nodes})
    except BaseException:
        results.put({"run": run_id, "crash": traceback.format_exc()})
    finally:
        connection.close()


def _race(launchers: int) -> list[dict[str, Any]]:
    return fork_at_once(_launch, _setup(launchers))


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab.settings.base")
    django.setup()
    launchers_arg, rounds_arg = sys.argv[1:]
    print(json.dumps([_race(int(launchers_arg)) for _ in range(int(rounds_arg))]))
