"""The communication threads' priority (``runners.real.priority``): threads started in the
block run under SCHED_FIFO, the caller gets its policy back, a census sees them; where the
OS refuses, ``auto`` says why and ``realtime`` is refused before anything starts (exit 2)."""

from __future__ import annotations

import json
import os
import threading

import pytest
import yaml

from runners import cli
from runners.real import launch, priority
from runners.spec import SpecError, validate


def _permitted() -> None:
    if why := priority.why_not_realtime():
        pytest.skip(why)


def _refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one without CAP_SYS_NICE: the kernel's answer, EPERM."""

    def refused(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refused)


def _spec(**real: str) -> dict:
    return {
        "system": "wfbp",
        "mode": "real",
        "workload": "vgg16-debug",
        "iterations": 3,
        "cluster": {"workers": 2},
        "real": {"network": "loopback", **real},
    }


def test_threads_started_in_the_block_run_realtime_and_the_caller_gets_its_policy_back():
    _permitted()
    seen: dict[str, str] = {}

    def note(name: str) -> None:
        seen[name] = priority.current()

    before = priority.census()
    with priority.communication_threads("realtime"):
        assert priority.current() == "realtime"
        inside = threading.Thread(target=note, args=("inside",))
        inside.start()
    assert priority.current() == "normal"
    outside = threading.Thread(target=note, args=("outside",))
    outside.start()
    inside.join()
    outside.join()
    assert seen == {"inside": "realtime", "outside": "normal"}
    assert before.get("realtime", 0) == 0

    hold = threading.Event()
    with priority.communication_threads("realtime"):
        waiting = threading.Thread(target=hold.wait)
        waiting.start()
    try:
        assert priority.census()["realtime"] == 1  # the waiting thread, counted from /proc
    finally:
        hold.set()
        waiting.join()


def test_normal_changes_nothing_and_only_resolved_priorities_are_taken():
    with priority.communication_threads("normal"):
        assert priority.current() == "normal"
    assert priority.resolve("normal") == ("normal", "")
    with pytest.raises(ValueError, match="realtime or normal"):  # resolve() first
        priority.communication_threads("auto").__enter__()


def test_auto_is_realtime_where_permitted():
    _permitted()
    assert priority.resolve("auto") == ("realtime", "")


def test_where_realtime_is_refused_auto_says_why_and_realtime_is_refused(monkeypatch):
    _refuse(monkeypatch)
    assert priority.why_not_realtime().startswith("SCHED_FIFO refused")
    prio, note = priority.resolve("auto")
    assert prio == "normal" and "needs root or CAP_SYS_NICE" in note
    with pytest.raises(PermissionError):
        priority.resolve("realtime")
    with pytest.raises(ValueError, match="one of auto, realtime, normal"):
        priority.resolve("high")


def test_a_real_run_asking_for_realtime_where_it_is_refused_is_bad_input(monkeypatch, tmp_path):
    _refuse(monkeypatch)
    with pytest.raises(SpecError) as err:
        launch.preflight(validate(_spec(comm_priority="realtime")))
    assert err.value.field == "real.comm_priority" and "use auto or normal" in str(err.value)
    # auto runs at normal priority and says so; nothing refused
    assert launch.comm_priority(validate(_spec()))[0] == "normal"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec(comm_priority="realtime")))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists(), "nothing half-written"


def test_the_spec_keeps_the_priority_in_its_key():
    spec = validate(_spec(comm_priority="normal"))
    assert spec.real.comm_priority == "normal"
    assert spec.as_dict()["real"]["comm_priority"] == "normal"
    assert validate(spec.as_dict()) == spec
    auto = validate(_spec())
    assert auto.real.comm_priority == "auto"  # the default
    # in the key even at its default: auto runs differently from the runs before the field
    assert auto.as_dict()["real"]["comm_priority"] == "auto"


def test_a_realtime_calibration_is_refused_where_realtime_is_not_permitted(monkeypatch, tmp_path):
    """Its probes and fidelity's real runs would not see what it measured: exit 2 with what
    to do, before anything runs; ``--comm-priority`` with an ``--*-only`` measurement too
    (those keep the calibration's)."""
    from runners import fidelity
    from tests.unit.test_fidelity import TESTBED

    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    doc = {**TESTBED, "method": "m", "comm_priority": "realtime"}
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    _refuse(monkeypatch)
    with pytest.raises(fidelity.CalibrationMissing, match="--comm-priority normal"):
        fidelity.check_priority(doc)
    assert cli.main(["fidelity", "--label", "cpu", "--models", "vgg16-debug"]) == 2
    assert cli.main(["calibrate", "--label", "cpu", "--overlap-only"]) == 2
    fidelity.check_priority({**doc, "comm_priority": "normal"})  # nothing to refuse
    monkeypatch.undo()
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    args = ["calibrate", "--label", "cpu", "--split-only", "--comm-priority", "normal"]
    assert cli.main(args) == 2
    assert json.loads((tmp_path / "cpu.json").read_text()) == doc, "nothing measured"


def _as_root_on(monkeypatch: pytest.MonkeyPatch, cpus: int) -> None:
    """SCHED_FIFO permitted, on a machine of ``cpus`` CPUs."""
    monkeypatch.setattr(priority, "why_not_realtime", lambda: None)
    monkeypatch.setattr(launch, "usable_cpus", lambda: cpus)


def test_auto_is_normal_with_more_all_reduce_ranks_than_cpus(monkeypatch):
    """Measured on 2 CPUs: 4 ranks under SCHED_FIFO took over 60 s per iteration (0.25 s at
    normal): the communication threads held both cores."""
    _as_root_on(monkeypatch, 2)
    monkeypatch.delenv("LAB_NNODES", raising=False)
    crowded = {**_spec(), "cluster": {"workers": 4}}
    prio, note = launch.comm_priority(validate(crowded))
    assert prio == "normal" and "4 ranks on 2 CPUs" in note, note
    assert launch.comm_priority(validate(_spec())) == ("realtime", "")  # 2 ranks on 2 CPUs
    three = {**_spec(), "cluster": {"workers": 3}}  # measured faster under realtime
    assert launch.comm_priority(validate(three)) == ("realtime", "")
    # asked for explicitly: kept, with the warning in the run's note
    prio, note = launch.comm_priority(validate({**crowded, "real": {"comm_priority": "realtime"}}))
    assert prio == "realtime" and "starve the compute" in note, note
    asked_normal = {**crowded, "real": {"comm_priority": "normal"}}
    assert launch.comm_priority(validate(asked_normal)) == ("normal", "")
    # ranks per host: 4 ranks over 2 nodes are 2 on each (real.nodes, or LAB_NNODES by hand)
    over_nodes = {**_spec(), "cluster": {"workers": 4}, "real": {"nodes": 2}}
    assert launch.comm_priority(validate(over_nodes)) == ("realtime", "")
    for name, value in (("LAB_NNODES", "2"), ("LAB_NODE_RANK", "0"), ("LAB_RDZV_HOST", "h")):
        monkeypatch.setenv(name, value)
    assert launch.comm_priority(validate(crowded)) == ("realtime", "")
    monkeypatch.delenv("LAB_NNODES")
    _as_root_on(monkeypatch, 4)
    assert launch.comm_priority(validate(crowded)) == ("realtime", "")


def test_the_ps_arena_keeps_realtime_with_its_servers_on_the_same_cores(monkeypatch):
    """2 workers and 4 servers on 2 CPUs: 53-73 ms per iteration under SCHED_FIFO, 125-149 ms
    at normal (ps-default, resnet50-debug, 0.25 Gbit/s)."""
    _as_root_on(monkeypatch, 2)
    ps = {**_spec(), "system": "ps-default", "cluster": {"workers": 2, "ps": 4, "servers": 4}}
    assert launch.comm_priority(validate(ps)) == ("realtime", "")


def test_where_realtime_is_refused_crowded_auto_gives_the_permission_reason(monkeypatch):
    _refuse(monkeypatch)
    monkeypatch.setattr(launch, "usable_cpus", lambda: 2)
    prio, note = launch.comm_priority(validate({**_spec(), "cluster": {"workers": 4}}))
    assert prio == "normal" and "needs root or CAP_SYS_NICE" in note, note


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"LAB_NNODES": "two"}, "LAB_NNODES"),
        ({"LAB_NNODES": "2", "LAB_NODE_RANK": "x"}, "LAB_NODE_RANK"),
    ],
)
def test_a_malformed_node_variable_is_refused_naming_it(tmp_path, monkeypatch, capsys, env, field):
    """``python -m runners run`` and ``grid`` on a node started by hand: exit 2, no
    traceback, nothing written."""
    for name, value in {"LAB_RDZV_HOST": "h", **env}.items():
        monkeypatch.setenv(name, value)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec()))
    out = tmp_path / "out"
    assert cli.main(["run", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert field in err and "whole number" in err and "Traceback" not in err, err
    assert not out.exists()
    grid = tmp_path / "grid.yaml"
    raw = _spec()
    del raw["system"], raw["workload"]
    grid.write_text(yaml.safe_dump({**raw, "systems": ["wfbp"], "workloads": ["vgg16-debug"]}))
    assert cli.main(["grid", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert field in err and "whole number" in err and "Traceback" not in err, err
    assert not out.exists()


def test_usable_cpus_follows_the_affinity_mask_and_the_cpu_quota(monkeypatch, tmp_path):
    """A cpuset (a container's, ``taskset``'s) limits the ranks and the priority rule, which
    ``os.cpu_count()`` would not see."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert launch.usable_cpus(str(tmp_path / "none")) == 1
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert launch.usable_cpus(str(tmp_path / "none")) == 3
    # a cgroup v2 quota (``docker --cpus``, the docker executor's limit): rounded up
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")
    assert launch.usable_cpus(str(quota)) == 2
    quota.write_text("max 100000\n")
    assert launch.usable_cpus(str(quota)) == 3
    quota.write_text("20000 100000\n")  # a fifth of a CPU still runs one rank
    assert launch.usable_cpus(str(quota)) == 1
