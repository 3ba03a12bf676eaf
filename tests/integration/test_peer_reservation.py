"""Choosing the peers of runs over several hosts, under real concurrency on a real PostgreSQL.

Two hosts launch a run over two hosts each at the same moment (forked processes, each with its
own database connection and its own ``HOST_NAME``, released together by a barrier). Two peers
are free, and both launches would pick the same one (the first by name) if they did not
serialise: ``actions._reserve_peers`` locks the hosts, so each run gets its own peer. A third
launch with no free peer left waits (None) instead of taking a busy one. No GPU or second
machine is needed: hosts and runs are rows made here.

Then the whole launch: two hosts, each with a run over two hosts queued and no other host,
call ``actions.launch_run`` at the same moment. Without coordination both take their run, each
finds the other busy and both give their run back (and again at every reconcile); with it, one
launches with the other as its peer and the other's run stays queued. The executor is a stub
(the hosts are rows, not machines): what is tested is the database's choice.

This file is also the launchers' script: ``python -m tests.integration.test_peer_reservation
MODE LAUNCHERS ROUNDS`` (run by the test with DATABASE_URL pointing at the test server).
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
    rounds = run_json_script(env, SCRIPT, "reserve", len(LAUNCHERS), ROUNDS, timeout=180)
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


def test_two_hosts_launching_runs_over_two_hosts_at_once_do_not_both_give_up(pg_env):  # noqa: F811
    env = {**pg_env, "REDIS_URL": "redis://127.0.0.1:1/0"}
    rounds = run_json_script(env, SCRIPT, "launch", 2, ROUNDS, timeout=180)
    assert len(rounds) == ROUNDS
    for results in rounds:
        crashed = [r for r in results if "crash" in r]
        assert not crashed, crashed[0]["crash"]
        won = [r for r in results if r["launched"]]
        assert len(won) == 1, f"both gave up (or both launched): {results}"
        (lost,) = [r for r in results if not r["launched"]]
        assert won[0]["state"] == "running" and won[0]["nodes"] == [lost["host"]], results
        assert lost["state"] == "queued" and lost["nodes"] == [], results


# --- the launchers' script (runs in subprocesses, with Django set up on PostgreSQL) ---------


def _setup(launchers: int, peers: tuple[str, ...] = PEERS) -> list[tuple[int, str]]:
    """Fresh hosts (the launchers' and ``peers``), each launcher's run already running on
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
    names = [*LAUNCHERS[:launchers], *peers]
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


def _setup_queued(launchers: int) -> list[tuple[int, str]]:
    """The launchers' hosts alone, each with a run over two hosts queued for it."""
    from lab.runs.models import Run

    runs = _setup(launchers, peers=())
    Run.objects.filter(pk__in=[pk for pk, _ in runs]).update(state=Run.QUEUED, host="")
    return runs


class _StubExecutor:
    """Starts nothing: the hosts are database rows here."""

    def launch(self, home: Any, run_id: int, resources: Any) -> str:
        return f"stub-{run_id}"

    def stop(self, home: Any, handle: str, grace_s: float) -> None:
        pass


def _launch_whole(run_id: int, host: str, barrier: Any, results: Any) -> None:
    """A forked host calling ``launch_run`` for its queued run over two hosts."""
    from django.conf import settings
    from django.db import connection

    from lab import actions
    from lab.runs.models import Run, RunNode

    try:
        settings.HOST_NAME = host
        settings.EXECUTOR = "docker"  # a handle the stub makes, not a local pid
        actions.executor_for = lambda name: _StubExecutor()
        actions._prepare_home = lambda run: None
        actions._start_other_nodes = lambda run: None  # would queue Celery tasks on peers
        connection.ensure_connection()
        barrier.wait(timeout=30)
        launched = actions.launch_run(run_id)
        run = Run.objects.get(pk=run_id)
        nodes = list(RunNode.objects.filter(run=run).values_list("host", flat=True))
        results.put(
            {"run": run_id, "host": host, "launched": launched, "state": run.state, "nodes": nodes}
        )
    except BaseException:
        results.put({"run": run_id, "crash": traceback.format_exc()})
    finally:
        connection.close()


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab.settings.base")
    django.setup()
    mode, launchers_arg, rounds_arg = sys.argv[1:]
    launchers, rounds = int(launchers_arg), int(rounds_arg)
    if mode == "reserve":
        out = [_race(launchers) for _ in range(rounds)]
    else:
        out = [fork_at_once(_launch_whole, _setup_queued(launchers)) for _ in range(rounds)]
    print(json.dumps(out))
