"""The real Horovod over several machines (runners.real.hvd, launch._supervise_horovod_nodes):
the variables each rank gets, and the refusal where Horovod 0.28.1 would bind loopback. The
run itself: tests/unit/test_multinode.py and tests/integration/test_docker_executor.py."""

from __future__ import annotations

import pytest

from runners.real import hvd, launch
from tests.conftest import require_horovod


def test_each_node_s_ranks_get_horovodrun_s_assignment():
    require_horovod()
    hosts = hvd.node_hosts(2, 2)
    assert hosts == ["node0:2", "node1:2"]
    env = hvd.rank_env(hosts, 3, "10.0.0.1", 29411, "ens5")
    assert env["HOROVOD_HOSTNAME"] == "node1"
    assert (env["HOROVOD_RANK"], env["HOROVOD_SIZE"]) == ("3", "4")
    assert (env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"]) == ("1", "2")
    assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == ("1", "2")
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "10.0.0.1"
    assert env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "29411"
    assert env["HOROVOD_GLOO_IFACE"] == "ens5"


def test_the_interface_towards_loopback_is_lo():
    pytest.importorskip("psutil")
    assert hvd.interface_toward("127.0.0.1", 9) == ("127.0.0.1", "lo")


def test_a_node_whose_name_resolves_to_loopback_stops_with_what_to_fix(tmp_path, monkeypatch):
    """Not root, node 0 elsewhere, and this machine's name resolves to 127.0.1.1: Horovod's
    process sets would bind loopback and node 0 could not reach this node."""
    monkeypatch.setattr(hvd, "interface_toward", lambda host, port: ("10.0.0.2", "eth0"))
    monkeypatch.setattr(hvd, "name_resolves_to_loopback", lambda: True)
    monkeypatch.setattr(launch.os, "geteuid", lambda: 1000)
    nodes = launch.Nodes(count=2, rank=1, endpoint="10.0.0.1:29411", run_id="x")
    with pytest.raises(launch.RealRunError, match="/etc/hosts"):
        launch._supervise_horovod_nodes(nodes, 1, tmp_path, {}, 1, 5, None)


def test_a_node_gives_up_when_node_0_s_server_never_answers(tmp_path, monkeypatch):
    pytest.importorskip("psutil")  # the interface towards node 0 (make horovod installs it)
    monkeypatch.setattr(launch, "HOROVOD_JOIN_S", 0.5)
    monkeypatch.setattr(hvd, "name_resolves_to_loopback", lambda: False)
    nodes = launch.Nodes(count=2, rank=1, endpoint="127.0.0.1:9", run_id="x")
    with pytest.raises(launch.RealRunError, match="did not answer"):
        launch._supervise_horovod_nodes(nodes, 1, tmp_path, {}, 1, 5, None)


def test_node_0_whose_rendezvous_name_resolves_to_loopback_uses_the_default_route(
    tmp_path, monkeypatch
):
    """Slurm exports node 0's host name; on node 0 itself Debian resolves it to 127.0.1.1.
    Gloo must not bind loopback there: the default route's interface is used, and (not root,
    the machine's name on loopback) the run stops with what to fix instead of hanging."""
    asked = []

    def toward(host, port):
        asked.append(host)
        return ("127.0.1.1", "lo") if host == "gpu-07" else ("10.0.0.5", "eth0")

    monkeypatch.setattr(hvd, "interface_toward", toward)
    monkeypatch.setattr(hvd, "name_resolves_to_loopback", lambda: True)
    monkeypatch.setattr(launch.os, "geteuid", lambda: 1000)
    nodes = launch.Nodes(count=2, rank=0, endpoint="gpu-07:29400", run_id="x")
    with pytest.raises(launch.RealRunError, match="map the name to 10.0.0.5"):
        launch._supervise_horovod_nodes(nodes, 1, tmp_path, {}, 1, 5, None)
    assert asked == ["gpu-07", "192.0.2.1"]
    assert launch._loopback_literal("127.0.0.2") and launch._loopback_literal("localhost")
    assert not launch._loopback_literal("gpu-07")
