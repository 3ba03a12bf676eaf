"""``fidelity``'s journal: a set that stops (a configuration failing twice, Ctrl-C, a crash)
keeps every real run made so far, and ``--resume`` makes only the rest.

The real runs are fakes (``launch.run``): the runs themselves are tested in
``tests/integration``. What is tested here is what is kept and reused."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from runners import cli, fidelity, fidelity_journal
from runners.real import launch

from .test_fidelity import TESTBED
from .test_fidelity_latency import _entry

SYSTEMS = ("wfbp", "horovod")
MODEL = ("vgg16-debug",)


class FakeRuns:
    """``launch.run``: each call a new iteration time (30, 31, 32, ... ms), so a reused run is
    told from a new one; ``fail_on``: the calls (1-based) that fail; ``interrupt_on``: the
    call that gets Ctrl-C."""

    def __init__(self, fail_on: tuple[int, ...] = (), interrupt_on: int = 0) -> None:
        self.calls = 0
        self.fail_on = fail_on
        self.interrupt_on = interrupt_on
        self.specs: list[tuple[str, int]] = []

    def __call__(self, spec, work):
        self.calls += 1
        if self.calls == self.interrupt_on:
            raise KeyboardInterrupt
        if self.calls in self.fail_on:
            raise launch.RealRunError(f"rank 1 died (call {self.calls})")
        self.specs.append((spec.system, spec.iterations))
        t = 0.030 + 0.001 * (self.calls - 1)
        metrics = {"iteration_time_s": t, "iteration_time_median_s": t, "compute_time_s": 0.01}
        return SimpleNamespace(metrics=metrics, network=SimpleNamespace(kind="shaped"))


@pytest.fixture
def fakes(monkeypatch):
    """The calibration, preflight, twins (33 ms) and compute checks faked; returns a setter
    for the real runs and the list of compute checks made."""
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: TESTBED)
    monkeypatch.setattr(launch, "preflight", lambda spec: None)
    monkeypatch.setattr(
        fidelity,
        "_twin",
        lambda real, sim: SimpleNamespace(
            metrics={"iteration_time_s": 0.033 * sim.cluster.compute_scale, "compute_time_s": 0.01}
        ),
    )
    checks: list[str] = []
    monkeypatch.setattr(fidelity, "calibrated_step", lambda model, label: (0.010, 5))

    def step_now(model, workers, threads, repeats):
        checks.append(model)
        return 0.0105

    monkeypatch.setattr(fidelity, "step_now_s", step_now)

    def use(runs: FakeRuns) -> FakeRuns:
        monkeypatch.setattr(launch, "run", runs)
        return runs

    return SimpleNamespace(use=use, checks=checks)


def _set(journal, resume=False, repeats=2, iterations=5):
    return fidelity.fidelity(
        "cpu", SYSTEMS, MODEL, (1.0,), iterations, repeats=repeats, journal=journal, resume=resume
    )


def test_a_set_stopped_by_a_failing_configuration_goes_on_from_its_journal(fakes, tmp_path):
    """Round 2's horovod run fails twice (calls 4 and 5): the set stops, the three runs made
    are in the journal; resumed, only that one is made, and the report holds the first
    sitting's runs beside it, as one set would."""
    path = tmp_path / "j.jsonl"
    first = fakes.use(FakeRuns(fail_on=(4, 5)))
    with pytest.raises(launch.RealRunError, match="both attempts failed"):
        _set(path)
    assert first.calls == 5
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {
        "fidelity_journal": fidelity_journal.VERSION,
        "label": "cpu",
        "calibration": "",
        "profiles": "",
    }  # no calibration file here, no profiles named: no fingerprints
    kept = [entry["run"] for entry in lines if "run" in entry]
    assert [(r["round"], r["system"]) for r in kept] == [(0, "wfbp"), (0, "horovod"), (1, "wfbp")]
    assert [r["metrics"]["iteration_time_s"] for r in kept] == pytest.approx([0.030, 0.031, 0.032])
    assert [e["stage"] for e in lines if "drift" in e] == ["before", "between-0"]
    (failed,) = [entry["failed"] for entry in lines if "failed" in entry]
    assert (failed["round"], failed["system"]) == (1, "horovod")
    checks_before = len(fakes.checks)

    again = fakes.use(FakeRuns())
    result = _set(path, resume=True)
    assert again.calls == 1 and again.specs == [("horovod", 5)], "only the missing run is made"
    wfbp, horovod = result["configs"]
    assert wfbp["real_runs_s"] == pytest.approx([0.030, 0.032])
    assert horovod["real_runs_s"] == pytest.approx([0.031, 0.030])  # the new run: its first call
    # the tries that stopped the first sitting are the row's, as in a set that had gone on
    assert horovod["failed_attempts"] == ["rank 1 died (call 4)", "rank 1 died (call 5)"]
    assert result["journal"] == {
        "path": str(path),
        "reused_runs": 3,
        "runs": 4,
        "calibration_changed": False,
        "made_with": "cpu",
        "rescored": False,
        "kept_next_as": f"{path}.prev",
    }
    # the checks made before and between the rounds are the journal's; only "after" is new
    assert len(fakes.checks) == checks_before + 1
    (drift,) = result["compute_drift"].values()
    assert len(drift["between_pct"]) == 1 and "after_pct" in drift
    text = fidelity.format_report(result)
    assert f"3 of the 4 real runs read back from the journal {path} (--resume)" in text
    # resumed once more, every run read back: the failed tries are still the row's
    again = fakes.use(FakeRuns())
    horovod = _set(path, resume=True)["configs"][1]
    assert again.calls == 0
    assert horovod["failed_attempts"] == ["rank 1 died (call 4)", "rank 1 died (call 5)"]


def test_a_resumed_finished_set_rescores_its_runs_without_running_them(fakes, tmp_path):
    """Every run and check in the journal: a resumed set makes no real run and no compute
    check, and scores the same runs against the twins simulated now."""
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    done = _set(path)
    checks = len(fakes.checks)
    none = fakes.use(FakeRuns())
    again = _set(path, resume=True)
    assert none.calls == 0 and len(fakes.checks) == checks
    assert again["configs"][0]["real_runs_s"] == done["configs"][0]["real_runs_s"]
    assert again["mape_pct"] == pytest.approx(done["mape_pct"])
    assert again["journal"]["reused_runs"] == 4


def test_a_resumed_set_says_when_its_calibration_was_measured_again(fakes, tmp_path, monkeypatch):
    """The journal's header keeps the calibration file's fingerprint. Resumed against the
    same file, nothing is said; after the file changed (``calibrate --ps-only`` measured it
    again), the runs are still rescored, and the progress line, the report's ``journal`` and
    its text say that the twins come from the calibration as it is now."""
    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    calibration = tmp_path / "cpu.json"
    calibration.write_text(json.dumps(TESTBED))
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    _set(path, repeats=1)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["calibration"] == fidelity_journal.fingerprint(calibration) != ""
    fakes.use(FakeRuns())
    same = _set(path, resume=True, repeats=1)
    assert same["journal"]["calibration_changed"] is False
    assert "measured again" not in fidelity.format_report(same)
    calibration.write_text(json.dumps({**TESTBED, "ps_date": "2026-11-27"}))
    said: list[str] = []
    none = fakes.use(FakeRuns())
    again = fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=1, journal=path,
                              resume=True, progress=said.append)  # fmt: skip
    assert none.calls == 0 and again["journal"]["reused_runs"] == 2
    assert again["journal"]["calibration_changed"] is True
    assert any("cpu has been measured again since the journal's runs" in s for s in said)
    assert "from the calibration as it is now, measured again since these runs" in (
        fidelity.format_report(again)
    )


def test_a_resumed_set_says_when_the_compute_was_measured_again(fakes, tmp_path, monkeypatch):
    """``calibrate --compute-only`` on the calibration's own day rewrites the measured
    profiles and may leave the calibration's file as it was: the journal's header keeps the
    profiles' fingerprint too, and a resumed set says the calibration changed when they
    did. A journal from before the profiles' fingerprint is judged on the file alone."""
    import workloads

    monkeypatch.setattr(fidelity, "TESTBEDS_DIR", tmp_path)
    monkeypatch.setattr(workloads, "MEASURED_DIR", tmp_path)
    doc = {**TESTBED, "profiles": {"vgg16-debug": "vgg16-debug@cpu"}}
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: doc)
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    profile = tmp_path / "vgg16-debug@cpu.json"
    profile.write_text('{"step": 1}')
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    _set(path, repeats=1)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["profiles"] == fidelity_journal.profiles_fingerprint([profile]) != ""
    fakes.use(FakeRuns())
    assert _set(path, resume=True, repeats=1)["journal"]["calibration_changed"] is False
    profile.write_text('{"step": 2}')  # measured again; the calibration's file unchanged
    fakes.use(FakeRuns())
    again = _set(path, resume=True, repeats=1)
    assert again["journal"]["calibration_changed"] is True
    lines = path.read_text().splitlines()  # a journal from before the profiles' fingerprint
    old = {k: v for k, v in json.loads(lines[0]).items() if k != "profiles"}
    path.write_text("\n".join([json.dumps(old), *lines[1:]]) + "\n")
    fakes.use(FakeRuns())
    assert _set(path, resume=True, repeats=1)["journal"]["calibration_changed"] is False
    assert fidelity_journal.profiles_fingerprint([]) == ""
    missing = fidelity_journal.profiles_fingerprint([tmp_path / "gone.json"])
    assert missing != fidelity_journal.profiles_fingerprint([profile])


def test_a_journal_run_made_with_another_real_spec_is_not_reused(fakes, tmp_path):
    """A run of the same configuration and round made with other settings (here 5 measured
    iterations, now 7) is not mixed in: it is made again."""
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    _set(path, repeats=1, iterations=5)
    again = fakes.use(FakeRuns())
    result = _set(path, resume=True, repeats=1, iterations=7)
    assert again.specs == [("wfbp", 7), ("horovod", 7)]
    assert result["journal"]["reused_runs"] == 0


def test_a_torn_last_line_is_dropped_and_overwritten(fakes, tmp_path):
    """A crash while writing leaves half a line: reading ignores it, and the next run is
    appended on a clean line."""
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns(fail_on=(2, 3)))
    with pytest.raises(launch.RealRunError):
        _set(path, repeats=1)
    with path.open("a") as fh:
        fh.write('{"run": {"round": 0, "sys')
    fakes.use(FakeRuns())
    result = _set(path, resume=True, repeats=1)
    assert result["journal"]["reused_runs"] == 1
    entries = [json.loads(line) for line in path.read_text().splitlines()]  # all whole lines
    assert [e["run"]["system"] for e in entries if "run" in e] == ["wfbp", "horovod"]


def test_a_new_set_keeps_the_earlier_journal_as_prev(fakes, tmp_path):
    """Each new set with the same journal keeps the one there, the first as ``.prev``, the
    next as ``.prev2``: none is overwritten, so the sets can be pooled."""
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    _set(path, repeats=1)
    first = path.read_text()
    second = _set(path, repeats=1)
    assert (tmp_path / "j.jsonl.prev").read_text() == first
    assert sum(1 for line in path.read_text().splitlines() if '"run"' in line) == 2
    assert second["journal"]["kept_next_as"] == f"{path}.prev2"
    again = path.read_text()
    _set(path, repeats=1)
    assert (tmp_path / "j.jsonl.prev").read_text() == first
    assert (tmp_path / "j.jsonl.prev2").read_text() == again
    with pytest.raises(ValueError, match="read-only only to resume"):
        fidelity_journal.Journal(path, "cpu", False, read_only=True)
    assert (tmp_path / "j.jsonl.prev2").read_text() == again and path.exists()


def test_resume_without_a_journal_or_from_another_calibration_is_refused(fakes, tmp_path):
    path = tmp_path / "none.jsonl"
    fakes.use(FakeRuns())
    with pytest.raises(fidelity.SpecError, match="--resume: no journal at .*none.jsonl"):
        _set(path, resume=True)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"fidelity_journal": 1, "label": "testbed-1127"}) + "\n")
    with pytest.raises(fidelity.SpecError, match="--label: .*of calibration 'testbed-1127'"):
        _set(other, resume=True)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n")
    with pytest.raises(fidelity.SpecError, match="--resume: .*line 1 is not a journal entry"):
        _set(garbage, resume=True)
    # a file given by mistake is left as it was, even its last line without a newline
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nunfinished")
    with pytest.raises(fidelity.SpecError, match="--resume: .*line 1 is not a journal entry"):
        _set(notes, resume=True)
    assert notes.read_text() == "my notes\nunfinished"
    # a journal with a line that is not an entry: the line is named
    broken = tmp_path / "broken.jsonl"
    header = json.dumps({"fidelity_journal": 1, "label": "cpu"})
    broken.write_text(header + "\n" + json.dumps({"run": {"round": 0}}) + "\n")
    with pytest.raises(fidelity.SpecError, match="broken.jsonl line 2 is not a journal entry"):
        _set(broken, resume=True)


CLI = ["fidelity", "--label", "cpu", "--systems", "wfbp,horovod", "--models", "vgg16-debug"]
CLI += ["--bandwidths", "1", "--iterations", "5", "--repeats", "1", "--no-compute-check"]


def test_the_command_says_where_the_runs_are_kept_and_how_to_go_on(
    fakes, tmp_path, monkeypatch, capsys
):
    """``fidelity`` stopped by a configuration that fails twice: exit 1, the journal's path
    and ``--resume`` named; Ctrl-C: exit 130, the same; ``--resume`` then finishes the set
    with only the runs missing. Without ``--journal`` the journal is under
    ``$LAB_RESULTS_DIR/fidelity``, one per set of systems, models and bandwidths."""
    monkeypatch.setenv("LAB_RESULTS_DIR", str(tmp_path))
    path = fidelity_journal.default_path("cpu", ["wfbp", "horovod"], ["vgg16-debug"], ["1"])
    assert path.parent == tmp_path / "fidelity" and path.name.startswith("cpu-")
    assert path == fidelity_journal.default_path("cpu", SYSTEMS, MODEL, [1.0])
    assert path != fidelity_journal.default_path("cpu", ["wfbp"], MODEL, [1.0])
    # a set on the pipelined PS transport keeps its own; the blocking one's as before
    assert path == fidelity_journal.default_path("cpu", SYSTEMS, MODEL, [1.0], "blocking")
    assert path != fidelity_journal.default_path("cpu", SYSTEMS, MODEL, [1.0], "pipelined")
    fakes.use(FakeRuns(fail_on=(2, 3)))
    assert cli.main(CLI) == 1
    err = capsys.readouterr().err
    assert "[fidelity] stopped: horovod/vgg16-debug: both attempts failed" in err
    assert f"kept in {path}: run the same command with --resume to go on" in err
    assert f"journal: {path}" in err
    fakes.use(FakeRuns(interrupt_on=1))
    assert cli.main([*CLI, "--resume"]) == 130
    assert "interrupted; the real runs so far are kept in" in capsys.readouterr().err
    last = fakes.use(FakeRuns())
    assert cli.main([*CLI, "--resume"]) == 0
    out = capsys.readouterr()
    assert last.specs == [("horovod", 5)]
    assert f"resuming from {path}: it holds 1 real run(s)" in out.err
    assert "1 of the 2 real runs read back from the journal" in out.out
    assert cli.main([*CLI, "--resume", "--journal", str(tmp_path / "nowhere.jsonl")]) == 2
    assert "invalid arguments: --resume: no journal at" in capsys.readouterr().err


def _flat(pairs) -> list[float]:
    return [t for pair in pairs for t in pair]


def _stepping(monkeypatch, calls: list[str]) -> None:
    """``step_now_s`` returning 10, 11, 12, ... ms on its 1st, 2nd, 3rd, ... call."""

    def step_now(model, workers, threads, repeats):
        calls.append(model)
        return 0.010 + 0.001 * (len(calls) - 1)

    monkeypatch.setattr(fidelity, "step_now_s", step_now)


def test_each_run_checked_gets_a_twin_at_the_speed_timed_beside_it(fakes, tmp_path, monkeypatch):
    """``check_runs``: the model's step is timed just before and after each run, a check
    serving two runs in a row (none taken twice); each run's twin has its compute scaled by
    the geometric mean of its two checks over the calibration's 10 ms, the row's checked
    prediction is the median of its runs' twins, and the journal keeps the checks, so a
    resumed set rescores them without timing anything."""
    calls: list[str] = []
    _stepping(monkeypatch, calls)
    fakes.use(FakeRuns())
    path = tmp_path / "j.jsonl"
    result = fidelity.fidelity(
        "cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=2, journal=path, check_runs=True
    )
    # calls: 1 before the set; 2 before wfbp, 3 after it (= before horovod), 4 after
    # horovod; 5 between the rounds (every model: not a run's check); 6, 7, 8 as 2-4; 9 after
    assert len(calls) == 9
    wfbp, horovod = result["configs"]
    ms = [0.010 + 0.001 * k for k in range(9)]
    assert _flat(wfbp["run_checks_s"]) == pytest.approx([ms[1], ms[2], ms[5], ms[6]])
    assert _flat(horovod["run_checks_s"]) == pytest.approx([ms[2], ms[3], ms[6], ms[7]])
    twins = [0.033 * (ms[1] * ms[2]) ** 0.5 / 0.010, 0.033 * (ms[5] * ms[6]) ** 0.5 / 0.010]
    assert wfbp["sim_run_checked_runs_s"] == pytest.approx(twins)
    assert wfbp["sim_run_checked_s"] == pytest.approx((twins[0] + twins[1]) / 2)
    expected = (
        sum(fidelity._ape(c["sim_run_checked_s"], c["real_iteration_s"]) for c in (wfbp, horovod))
        / 2
    )
    assert result["mape_with"]["run_checked"] == pytest.approx(expected)
    assert result["mape_with"]["run_checked"] != pytest.approx(result["mape_pct"])
    text = fidelity.format_report(result)
    assert "each run's twin given its model's compute as timed just before and after" in text
    # the checks moved the step up to +80 %: the drift line points to the runs' own score
    assert "(the report's run_checked scores each run at the speed timed beside it)" in text
    runs = [json.loads(line)["run"] for line in path.read_text().splitlines()[1:]
            if "run" in json.loads(line)]  # fmt: skip
    assert _flat(r["checks"] for r in runs[:2]) == pytest.approx([ms[1], ms[2], ms[2], ms[3]])

    fakes.use(FakeRuns())
    again = fidelity.fidelity(
        "cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=2, journal=path, resume=True, check_runs=True
    )
    assert len(calls) == 9, "nothing timed again"
    assert again["mape_with"]["run_checked"] == pytest.approx(expected)


def test_horovod_s_idle_loop_is_scored_at_each_run_s_speed_too(fakes, tmp_path, monkeypatch):
    """``check_runs`` with Horovod's idle loop measured, a set with added latency (whose
    twins leave the loop out): its twins with the loop scored at each run's speed
    (``background_slowdown_run_checked``), the other rows with their own ``run_checked``;
    the report says both."""
    testbed = json.loads(json.dumps(TESTBED))
    shaped = testbed["network"][1]
    shaped["horovod"] = {"cycle_cpu_us": 900.0, "idle_slowdown": {"vgg16-debug": 0.5}}
    shaped["added_latency"] = {"2000": _entry(json.loads(json.dumps(shaped)), 2000.0)}
    monkeypatch.setattr(fidelity, "load_testbed", lambda label: testbed)

    def fake_twin(real, sim):  # 33 ms at the calibration's speed, 1.5 times with the loop
        loop = 1.5 if sim.cluster.background_slowdown else 1.0
        t = 0.033 * sim.cluster.compute_scale * loop
        return SimpleNamespace(metrics={"iteration_time_s": t, "compute_time_s": 0.01})

    monkeypatch.setattr(fidelity, "_twin", fake_twin)
    _stepping(monkeypatch, [])
    fakes.use(FakeRuns())
    result = fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=2, check_runs=True,
                               journal=tmp_path / "j.jsonl", added_latency_us=2000.0)  # fmt: skip
    wfbp, horovod = result["configs"]
    assert "sim_idle_loop_run_checked_s" not in wfbp
    assert horovod["sim_idle_loop_run_checked_s"] == pytest.approx(
        1.5 * horovod["sim_run_checked_s"]
    )
    ape = fidelity._ape
    expected = (
        ape(wfbp["sim_run_checked_s"], wfbp["real_iteration_s"])
        + ape(horovod["sim_idle_loop_run_checked_s"], horovod["real_iteration_s"])
    ) / 2
    with_ = result["mape_with"]
    assert with_["background_slowdown_run_checked"] == pytest.approx(expected)
    assert with_["background_slowdown_run_checked"] != pytest.approx(with_["run_checked"])
    horovod_alone = ape(horovod["sim_idle_loop_run_checked_s"], horovod["real_iteration_s"])
    assert (
        f"; at each run's speed (run_checked) {expected:.1f}% (on the Horovod configurations "
        f"{horovod_alone:.1f}% with it"
    ) in fidelity.format_report(result)


def test_runs_without_their_checks_are_not_scored_as_checked(fakes, tmp_path, monkeypatch):
    """A journal made without ``check_runs``, resumed with it: its runs have no checks, so no
    ``run_checked`` score, and the report says why; a failed check is the same."""
    fakes.use(FakeRuns())
    path = tmp_path / "j.jsonl"
    _set(path)
    result = fidelity.fidelity(
        "cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=2, journal=path, resume=True, check_runs=True
    )
    assert "run_checked" not in result["mape_with"]
    assert result["configs"][0]["run_checks_s"] == [None, None]
    assert "each run's compute check: not scored" in fidelity.format_report(result)

    def failing(model, workers, threads, repeats):
        raise RuntimeError("a measuring process failed")

    monkeypatch.setattr(fidelity, "step_now_s", failing)
    result = fidelity.fidelity(
        "cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=1, check_runs=True, compute_check=False
    )
    assert result["configs"][0]["run_checks_s"] == [[None, None]]
    assert "run_checked" not in result["mape_with"]
    assert len(result["configs"]) == 2, "the runs are kept"


def test_check_each_run_needs_the_calibrations_step_times(fakes, monkeypatch, capsys):
    """A calibration without step times: refused before any run, naming the option (exit 2)."""
    monkeypatch.setattr(fidelity, "calibrated_step", lambda model, label: None)
    runs = fakes.use(FakeRuns())
    with pytest.raises(fidelity.SpecError, match="--check-each-run: the calibration cpu has no"):
        fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=1, check_runs=True)
    assert cli.main([*CLI, "--check-each-run"]) == 2
    assert "invalid arguments: --check-each-run" in capsys.readouterr().err
    assert runs.calls == 0


def _steps(monkeypatch, by_label: dict[str, float]) -> None:
    """Each calibration's step time for the model (as ``calibrated_step`` reads it)."""
    monkeypatch.setattr(fidelity, "calibrated_step", lambda model, label: (by_label[label], 5))


def test_rescore_scores_a_finished_set_against_another_calibration_and_runs_nothing(
    fakes, tmp_path, monkeypatch
):
    """``rescore``: a finished set's journal, made against calibration ``cpu``, scored with
    the twins of ``other`` (whose step is 25 % longer): no real run, no check, the journal
    left as it was; its compute checks compared with ``other``'s step (the ``compute_checked``
    twins at the speed measured over ``other``'s), and the report says whose runs they are."""
    _steps(monkeypatch, {"cpu": 0.010, "other": 0.0125})
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    done = _set(path)
    assert done["compute_drift"]["vgg16-debug"]["before_pct"] == pytest.approx(5.0)
    kept = path.read_bytes()
    checks = len(fakes.checks)
    none = fakes.use(FakeRuns())
    said: list[str] = []
    again = fidelity.fidelity("other", SYSTEMS, MODEL, (1.0,), 5, repeats=2, journal=path,
                              rescore=True, progress=said.append)  # fmt: skip
    assert none.calls == 0 and len(fakes.checks) == checks, "nothing real in a rescore"
    assert path.read_bytes() == kept, "the journal is only read"
    assert again["label"] == "other"
    assert again["configs"][0]["real_runs_s"] == done["configs"][0]["real_runs_s"]
    assert again["journal"]["made_with"] == "cpu" and again["journal"]["rescored"] is True
    assert again["journal"]["calibration_changed"] is False
    drift = again["compute_drift"]["vgg16-debug"]
    assert drift["calibrated_step_s"] == pytest.approx(0.0125)
    assert drift["before_pct"] == pytest.approx(-16.0)
    assert drift["checked_scale"] == pytest.approx(0.84)
    # the twins here are 33 ms times the compute scale; the runs 30-33 ms
    assert again["configs"][0]["sim_compute_checked_s"] == pytest.approx(0.033 * 0.84)
    assert any("made against calibration cpu, against the twins of calibration other" in m
               for m in said)  # fmt: skip
    text = fidelity.format_report(again)
    assert "(--rescore)" in text
    assert "its runs were made against calibration cpu, scored here against other's twins" in text
    # rescored against its own calibration: the same score as a resumed finished set's
    same = fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=2, journal=path,
                             rescore=True)  # fmt: skip
    assert same["mape_pct"] == pytest.approx(done["mape_pct"])
    assert "scored here against" not in fidelity.format_report(same)


def test_a_resumed_set_s_compute_checks_are_compared_with_the_calibration_now(
    fakes, tmp_path, monkeypatch
):
    """After ``calibrate --compute-only`` (the step measured again), a resumed finished set
    compares its kept compute checks with the step as it is now."""
    steps = {"cpu": 0.010}
    monkeypatch.setattr(fidelity, "calibrated_step", lambda model, label: (steps[label], 5))
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    _set(path)
    steps["cpu"] = 0.0105
    fakes.use(FakeRuns())
    drift = _set(path, resume=True)["compute_drift"]["vgg16-debug"]
    assert drift["calibrated_step_s"] == pytest.approx(0.0105)
    assert drift["before_pct"] == pytest.approx(0.0)
    assert drift["between_pct"] == pytest.approx([0.0])
    assert drift["checked_scale"] == pytest.approx(1.0)


def test_rescore_names_what_the_journal_lacks_before_scoring_anything(fakes, tmp_path):
    """A rescore needs every run and check the set would make in the journal: a round it
    lacks, runs made with another real spec, checks it was made without; each named under
    ``--rescore`` with nothing run and the journal unchanged."""
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    _set(path)
    kept = path.read_bytes()
    none = fakes.use(FakeRuns())
    with pytest.raises(fidelity.SpecError, match=r"--rescore: .*wfbp/vgg16-debug/1 Gbit/s run "
                       "of round 3 this set needs"):  # fmt: skip
        fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=3, journal=path,
                          rescore=True, compute_check=False)  # fmt: skip
    with pytest.raises(fidelity.SpecError, match="--rescore: .*holds no compute check "
                       "'between-1' this set needs"):  # fmt: skip
        fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=3, journal=path,
                          rescore=True)  # fmt: skip
    with pytest.raises(fidelity.SpecError, match=r"another real spec than calibration cpu "
                       r"gives: iterations: 5 in the journal, 6 now"):  # fmt: skip
        fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 6, repeats=2, journal=path,
                          rescore=True)  # fmt: skip
    bare = tmp_path / "bare.jsonl"
    fakes.use(FakeRuns())
    fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=1, journal=bare,
                      compute_check=False)  # fmt: skip
    none = fakes.use(FakeRuns())
    with pytest.raises(fidelity.SpecError, match="--rescore: .*compute check before the runs"):
        fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, repeats=1, journal=bare,
                          rescore=True)  # fmt: skip
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps(json.loads(kept.splitlines()[0])) + "\n")
    with pytest.raises(fidelity.SpecError, match="--rescore: .*holds no real run"):
        fidelity.fidelity("cpu", SYSTEMS, MODEL, (1.0,), 5, journal=empty, rescore=True)
    assert none.calls == 0 and path.read_bytes() == kept


def test_the_command_rescores_a_journal_against_another_calibration(
    fakes, tmp_path, monkeypatch, capsys
):
    """``fidelity --rescore --journal J --label other``: exit 0 and the report; a journal
    lacking a run: exit 2 naming ``--rescore``, nothing run."""
    _steps(monkeypatch, {"cpu": 0.010, "other": 0.0125})
    path = tmp_path / "j.jsonl"
    fakes.use(FakeRuns())
    assert cli.main([*CLI, "--journal", str(path)]) == 0
    capsys.readouterr()
    other = [a if a != "cpu" else "other" for a in CLI]
    none = fakes.use(FakeRuns())
    assert cli.main([*other, "--journal", str(path), "--rescore"]) == 0
    out = capsys.readouterr().out
    assert "2 of the 2 real runs read back from the journal" in out and "(--rescore)" in out
    assert "made against calibration cpu, scored here against other's twins" in out
    assert cli.main([*other, "--journal", str(path), "--rescore", "--repeats", "2"]) == 2
    assert "invalid arguments: --rescore: the journal" in capsys.readouterr().err
    assert none.calls == 0
