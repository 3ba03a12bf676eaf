"""``fidelity-pool`` (``runners.fidelity_pool``): several fidelity sets' journals scored
together. The sets are made by ``fidelity`` itself with its real runs, twins and checks faked
(``test_fidelity_journal``'s fixture); what is tested is what is pooled, what is refused and
what the report says."""

from __future__ import annotations

import json

import pytest

from runners import cli, fidelity, fidelity_pool
from runners.spec import SpecError

from .test_fidelity_journal import MODEL, SYSTEMS, FakeRuns, fakes  # noqa: F401 (a fixture)


def _set(path, runs: FakeRuns, fakes, systems=SYSTEMS, iterations=5, check_runs=False):  # noqa: F811
    fakes.use(runs)
    return fidelity.fidelity(
        "cpu",
        systems,
        MODEL,
        (1.0,),
        iterations,
        repeats=2,
        journal=path,
        compute_check=False,
        check_runs=check_runs,
    )


class Later(FakeRuns):
    """``FakeRuns`` whose times start at 40 ms: another set's runs, told from the first's."""

    def __call__(self, spec, work):
        result = super().__call__(spec, work)
        t = result.metrics["iteration_time_s"] + 0.010
        result.metrics.update(iteration_time_s=t, iteration_time_median_s=t)
        return result


def test_two_sets_pool_their_runs_per_configuration_and_keep_each_ones_score(
    fakes,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Set A's runs are 30-33 ms, set B's 40-43 ms; the twins 33 ms. Pooled, each
    configuration's real time is the median of its four runs, the twin is simulated once
    per configuration, each set's own score is what ``fidelity`` reported for it, and the
    journals are read, not written."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    set_a = _set(a, FakeRuns(), fakes)
    set_b = _set(b, Later(), fakes)
    before = a.read_bytes(), b.read_bytes()
    twins = []
    faked = fidelity._twin
    monkeypatch.setattr(fidelity, "_twin", lambda real, sim: twins.append(1) or faked(real, sim))
    result = fidelity_pool.pool([a, b])
    assert len(twins) == 2, "one twin per configuration, not per set or run"
    wfbp, horovod = result["configs"]
    # set A: wfbp 30 and 32 ms (rounds 0 and 1), horovod 31 and 33; set B 10 ms more
    assert wfbp["real_runs_s"] == pytest.approx([0.030, 0.032, 0.040, 0.042])
    assert wfbp["real_iteration_s"] == pytest.approx(0.036)
    assert horovod["real_iteration_s"] == pytest.approx(0.037)
    assert wfbp["sets_runs"] == [2, 2]
    # the twins' 33 ms against the pooled medians
    assert result["mape_pct"] == pytest.approx((100 * 3 / 36 + 100 * 4 / 37) / 2)
    assert result["target_verdict"] == "too few configurations"
    # the sets differ by 10 ms, their runs by 2: the range over other draws of the sets and
    # their runs is wider than over the pooled runs alone
    (low, high), (runs_low, runs_high) = result["mape_ci_pct"], result["pool"]["mape_ci_runs_pct"]
    assert high - low > runs_high - runs_low
    assert "with other draws of the sets and of their runs, two-stage" in (
        fidelity.format_report(result)
    )
    mine = result["pool"]
    assert [s["journal"] for s in mine["sets"]] == [str(a), str(b)]
    assert [s["runs"] for s in mine["sets"]] == [4, 4]
    assert mine["sets"][0]["mape_pct"] == pytest.approx(set_a["mape_pct"])
    assert mine["sets"][1]["mape_pct"] == pytest.approx(set_b["mape_pct"])
    assert mine["runs"] == 8 and mine["left_out"] == []
    assert (a.read_bytes(), b.read_bytes()) == before
    text = fidelity_pool.format_pool(result)
    assert text.startswith("2 fidelity sets of calibration cpu pooled: 8 real runs")
    assert f"  {a}: 4 runs, MAPE {set_a['mape_pct']:.1f}%" in text
    assert f"  pooled: 8 runs, MAPE {result['mape_pct']:.1f}%" in text


def test_only_the_configurations_of_every_set_are_pooled(fakes, tmp_path):  # noqa: F811
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _set(a, FakeRuns(), fakes)
    _set(b, FakeRuns(), fakes, systems=("wfbp",))
    result = fidelity_pool.pool([a, b])
    assert [c["system"] for c in result["configs"]] == ["wfbp"]
    assert [one["runs"] for one in result["pool"]["sets"]] == [2, 2]  # the pooled runs alone
    assert result["pool"]["left_out"] == [
        {"system": "horovod", "workload": "vgg16-debug", "bandwidth_gbps": 1.0}
    ]
    assert "left out: horovod/vgg16-debug/1 Gbit/s" in fidelity_pool.format_pool(result)


def test_run_checked_is_pooled_only_where_every_run_was_checked(fakes, tmp_path):  # noqa: F811
    a, b, c = (tmp_path / f"{n}.jsonl" for n in "abc")
    _set(a, FakeRuns(), fakes, check_runs=True)
    _set(b, FakeRuns(), fakes, check_runs=True)
    _set(c, FakeRuns(), fakes)
    both = fidelity_pool.pool([a, b])
    assert "run_checked" in both["mape_with"]
    assert all(len(row["sim_run_checked_runs_s"]) == 4 for row in both["configs"])
    assert "run_checked" not in fidelity_pool.pool([a, c])["mape_with"]


def test_journals_that_cannot_be_pooled_are_refused_naming_the_file(
    fakes,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _set(a, FakeRuns(), fakes)
    with pytest.raises(SpecError, match="JOURNAL: give two or more"):
        fidelity_pool.pool([a])
    with pytest.raises(SpecError, match="JOURNAL: .*a.jsonl is given twice"):
        fidelity_pool.pool([a, tmp_path / "." / "a.jsonl"])
    with pytest.raises(SpecError, match="JOURNAL: .*nowhere.jsonl: cannot be read"):
        fidelity_pool.pool([a, tmp_path / "nowhere.jsonl"])
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(SpecError, match="JOURNAL: .*notes.txt is not a fidelity journal"):
        fidelity_pool.pool([a, notes])
    broken = tmp_path / "broken.jsonl"
    header = json.dumps({"fidelity_journal": 1, "label": "cpu"})
    broken.write_text(header + "\n" + json.dumps({"run": {"round": 0}}) + "\n")
    with pytest.raises(SpecError, match="JOURNAL: .*broken.jsonl line 2 .*: leave it out"):
        fidelity_pool.pool([a, broken])
    unlabelled = tmp_path / "unlabelled.jsonl"
    unlabelled.write_text(json.dumps({"fidelity_journal": 1}) + "\n")
    with pytest.raises(SpecError, match="unlabelled.jsonl is not a fidelity journal"):
        fidelity_pool.pool([a, unlabelled])
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"fidelity_journal": 1, "label": "testbed-1127"}) + "\n")
    with pytest.raises(SpecError, match="other.jsonl is a set of calibration 'testbed-1127'"):
        fidelity_pool.pool([a, other])
    # another length of run
    _set(b, FakeRuns(), fakes, iterations=6)
    with pytest.raises(SpecError, match=r"different iterations \(.*a.jsonl: 5, .*b.jsonl: 6\)"):
        fidelity_pool.pool([a, b])
    # a run made with another layout than the calibration gives now
    _set(b, FakeRuns(), fakes)
    lines = b.read_text().splitlines()
    entry = json.loads(lines[1])
    entry["run"]["spec"]["real"]["threads"] = 2
    lines[1] = json.dumps(entry)
    b.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=r"b.jsonl: its wfbp/.* \(real.threads: 2 in the journal"):
        fidelity_pool.pool([a, b])
    # a journal that kept no fingerprint, where the calibration has one now: not checkable
    _set(b, FakeRuns(), fakes)
    monkeypatch.setattr(fidelity, "calibration_prints", lambda label, testbed: ("f00", "ba4"))
    with pytest.raises(SpecError, match="a.jsonl: its header keeps no fingerprint"):
        fidelity_pool.pool([a, b])
    # made against another version of the calibration than the one there now
    _set(a, FakeRuns(), fakes)
    _set(b, FakeRuns(), fakes)
    assert fidelity_pool.pool([a, b])["pool"]["runs"] == 8
    monkeypatch.setattr(fidelity, "calibration_prints", lambda label, testbed: ("f01", "ba4"))
    with pytest.raises(SpecError, match="a.jsonl: its runs were made against another version"):
        fidelity_pool.pool([a, b])


def test_a_torn_last_line_of_a_running_set_is_read_past_and_left(fakes, tmp_path):  # noqa: F811
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _set(a, FakeRuns(), fakes)
    _set(b, FakeRuns(), fakes)
    with b.open("a") as fh:
        fh.write('{"run": {"round": 2, "sys')
    torn = b.read_bytes()
    assert fidelity_pool.pool([a, b])["pool"]["runs"] == 8
    assert b.read_bytes() == torn


def test_the_command_prints_the_pool_or_refuses_with_exit_2(fakes, tmp_path, capsys):  # noqa: F811
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _set(a, FakeRuns(), fakes)
    _set(b, Later(), fakes)
    assert cli.main(["fidelity-pool", str(a), str(b)]) == 0
    out = capsys.readouterr()
    assert "2 fidelity sets of calibration cpu pooled" in out.out
    assert "[fidelity-pool] 2/2 horovod/vgg16-debug/1 Gbit/s: 4 runs" in out.err
    assert cli.main(["fidelity-pool", str(a), str(b), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pool"]["runs"] == 8 and len(report["configs"]) == 2
    assert cli.main(["fidelity-pool", str(a)]) == 2
    assert "invalid arguments: JOURNAL: give two or more" in capsys.readouterr().err


def test_the_two_stage_range_draws_the_sets_then_their_runs():
    """One run a set: set A 30 ms, set B 40 ms, the twin 35 ms. Two sets drawn with
    replacement: A and A (the median 30, 16.7 % off), B and B (12.5 %) or one of each (35,
    0 %): the 95 % range is 0-16.7 %. Runs alone would never see A twice."""
    low, high = fidelity_pool.sets_interval([(0.035, [[0.030], [0.040]])])
    assert low == pytest.approx(0.0) and high == pytest.approx(100 * 5 / 30)
    # four configurations share each resample's draw of the sets: where one is off the
    # other is too, so the range reaches the mean of their errors on the same draw
    low, high = fidelity_pool.sets_interval([(0.035, [[0.030], [0.040]])] * 4)
    assert high == pytest.approx(100 * 5 / 30)
    assert fidelity_pool.sets_interval([(0.035, [[0.030, 0.031]])]) is None  # one set
    with pytest.raises(ValueError, match="each of the same sets"):
        fidelity_pool.sets_interval([(0.035, [[0.030], [0.040]]), (0.035, [[0.030]])])


def test_a_set_not_resolved_says_how_to_pool_it_with_the_next(fakes, tmp_path):  # noqa: F811
    """A set's text report, where its verdict is not resolved, gives the command that pools
    it with the same set run again; that command works (the journal kept as ``.prev``)."""
    path = tmp_path / "j.jsonl"
    first = _set(path, FakeRuns(), fakes)
    assert "fidelity-pool" not in fidelity.format_report(first)  # too few configurations
    first["target_verdict"] = "not resolved"
    hint = f"python -m runners fidelity-pool {path}.prev {path}"
    assert hint in fidelity.format_report(first)
    assert "more sets may resolve it" in fidelity.format_report(first)
    _set(path, Later(), fakes)
    pooled = fidelity_pool.pool([tmp_path / "j.jsonl.prev", path])
    assert [s["runs"] for s in pooled["pool"]["sets"]] == [4, 4]
    pooled["target_verdict"] = "not resolved"
    assert "fidelity-pool" not in fidelity.format_report(pooled)  # already pooled
