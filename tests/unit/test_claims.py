"""The claims ledger: schema validation, the verdict rule on hand-made numbers, and the
``reproduce`` command's argument handling (the queued path is in tests/integration)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from django.core.management import CommandError, call_command

from lab.reports import claims as c

CLAIM = {
    "id": "pace-speedup",
    "system": "pace",
    "arena": "allreduce",
    "paper": "PACE, INFOCOM 2020",
    "claim": "up to 36% faster",
    "source": "seeds",
    "metric": "iteration_time_s",
    "lower_is_better": True,
    "measure": "percent_faster",
    "claimed": 36.0,
    "unit": "%",
    "aggregate": "max",
    "baselines": ["horovod", "bytescheduler"],
    "modes": ["sim"],
    "experiment": {
        "workloads": ["resnet50-debug"],
        "cluster": {"workers": 4},
        "seeds": [0, 1],
        "iterations": 5,
    },  # fmt: skip
    "conditions": [{"name": "workers", "value": 4, "origin": "assumption"}],
}


def _write(tmp_path, claims) -> str:
    path = tmp_path / "ledger.yaml"
    path.write_text(yaml.safe_dump(claims))
    return str(path)


def _claim(**changes) -> c.Claim:
    raw = {**copy.deepcopy(CLAIM), **changes}
    return c._check_claim(c.LEDGER_PATH, 0, raw, set())


def test_a_valid_claim_loads(tmp_path):
    (claim,) = c.load_ledger(_write(tmp_path, [CLAIM]))
    assert claim.id == "pace-speedup" and claim.baselines == ("horovod", "bytescheduler")
    assert claim.conditions_summary() == {"workers": {"value": 4, "origin": "assumption"}}


@pytest.mark.parametrize("field", sorted(c.CLAIM_KEYS))
def test_a_missing_field_is_named(tmp_path, field):
    raw = {k: v for k, v in CLAIM.items() if k != field}
    with pytest.raises(c.LedgerError, match=f"field '{field}' is missing"):
        c.load_ledger(_write(tmp_path, [raw]))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"system": "warp-drive"}, "unknown system 'warp-drive'"),
        ({"arena": "ps"}, "pace is in arena 'allreduce'"),
        ({"baselines": ["ps-default"]}, "ps-default is not in arena allreduce"),
        ({"baselines": []}, "at least one baseline"),
        ({"measure": "vibes"}, "field 'measure' must be one of"),
        ({"unit": "x"}, "field 'unit' must be '%'"),
        ({"claimed": -3}, "field 'claimed' must be an improvement"),
        ({"claimed": "36%"}, "field 'claimed' must be a number"),
        ({"lower_is_better": False}, "percent_faster needs lower_is_better"),
        ({"aggregate": "median"}, "field 'aggregate'"),
        ({"modes": ["gpu"]}, "field 'modes'"),
        ({"id": "PACE Speedup"}, "field 'id' must be lowercase"),
        ({"experiment": {"workloads": ["vgg16"], "seeds": []}}, "experiment.seeds"),
        ({"experiment": {"seeds": [0], "gpus": 3}}, "unknown key"),
        ({"conditions": [{"name": "x", "value": 1, "origin": "hunch"}]}, "origin must be"),
        ({"colour": "blue"}, "unknown field"),
    ],
)
def test_bad_fields_are_refused_by_name(tmp_path, changes, message):
    with pytest.raises(c.LedgerError, match=message) as err:
        c.load_ledger(_write(tmp_path, [{**CLAIM, **changes}]))
    assert "ledger.yaml" in str(err.value)


def test_duplicate_ids_bad_yaml_and_missing_files_are_refused(tmp_path):
    with pytest.raises(c.LedgerError, match="repeats an earlier claim"):
        c.load_ledger(_write(tmp_path, [CLAIM, CLAIM]))
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: [unclosed\n")
    with pytest.raises(c.LedgerError, match="not valid YAML"):
        c.load_ledger(bad)
    with pytest.raises(c.LedgerError, match="no such file"):
        c.load_ledger(tmp_path / "nope.yaml")
    with pytest.raises(c.LedgerError, match="non-empty list"):
        c.load_ledger(_write(tmp_path, {"id": "x"}))


def test_the_measures_by_hand():
    assert c.improvement("percent_faster", True, 1.0, 1.36) == pytest.approx(36.0)
    assert c.improvement("percent_less", True, 0.46, 1.0) == pytest.approx(54.0)
    assert c.improvement("percent_more", False, 1.192, 1.0) == pytest.approx(19.2)
    assert c.improvement("ratio", True, 1.0, 2.86) == pytest.approx(2.86)
    assert c.improvement("ratio", False, 2.86, 1.0) == pytest.approx(2.86)


def _values(system, baseline, other=None, condition="resnet50"):
    groups = {"pace": system, "horovod": baseline}
    if other is not None:
        groups["bytescheduler"] = other
    return {condition: groups}


def test_verdicts_on_hand_made_numbers():
    claim = _claim()
    # Exact (no spread) 50% faster: beyond 80% of the claimed 36%.
    got = c.assess(claim, _values([1.0, 1.0, 1.0], [1.5, 1.5, 1.5], [1.2, 1.2, 1.2]))
    assert got.verdict == "reproduced" and got.measured == pytest.approx(50.0)
    assert got.per_baseline == {
        "horovod": pytest.approx(50.0),
        "bytescheduler": pytest.approx(20.0),
    }
    # 20% measured of 36% claimed: established, but partial.
    got = c.assess(claim, _values([1.0, 1.01, 0.99], [1.2, 1.21, 1.19]))
    assert got.verdict == "partial" and got.measured == pytest.approx(20.0)
    assert "below 80%" in got.reason
    # Slower than the baseline.
    got = c.assess(claim, _values([1.5, 1.5], [1.0, 1.0]))
    assert got.verdict == "not-reproduced" and "not better" in got.reason
    # Faster on average but within the noise over seeds.
    got = c.assess(claim, _values([1.0, 2.0, 0.5], [1.2, 0.6, 1.9]))
    assert got.verdict == "not-reproduced" and "not significant" in got.reason


def test_up_to_takes_the_best_condition_and_mean_averages():
    values = {
        "a": {"pace": [1.0, 1.0], "horovod": [1.1, 1.1]},  # 10%
        "b": {"pace": [1.0, 1.0], "horovod": [1.4, 1.4]},  # 40%
    }
    up_to = c.assess(_claim(), values)
    assert up_to.measured == pytest.approx(40.0) and up_to.condition == "b"
    assert up_to.verdict == "reproduced"
    mean = c.assess(_claim(aggregate="mean"), values)
    assert mean.measured == pytest.approx(25.0) and mean.verdict == "partial"


def test_a_ratio_claim_compares_the_gain_above_one():
    claim = _claim(measure="ratio", unit="x", claimed=2.86)
    assert c.assess(claim, _values([1.0] * 2, [2.6] * 2)).verdict == "reproduced"  # 1.6 >= 1.49
    assert c.assess(claim, _values([1.0] * 2, [2.0] * 2)).verdict == "partial"  # 1.0 < 1.49


def test_missing_values_mean_not_run():
    got = c.assess(_claim(), {"a": {"pace": [1.0]}})
    assert got.verdict == "not-run" and "horovod" in got.reason
    line = got.line("sim")
    assert line["verdict"] == "not-run" and line["measured"] is None
    assert set(line) >= {"claim", "system", "claimed", "measured", "unit", "verdict", "conditions"}


def test_the_project_ledger_is_valid_and_covers_every_seed_system():
    claims = c.load_ledger()
    systems = {claim.system for claim in claims}
    assert {"oasis", "harmony", "pace", "delayed-allreduce", "eager-ps", "psld"} <= systems
    assert systems & {"tictac-tic", "tictac-tac"}
    for claim in claims:
        assert claim.conditions and all(
            x["origin"] in c.CONDITION_ORIGINS for x in claim.conditions
        )


@pytest.mark.django_db
def test_reproduce_lists_refuses_bad_arguments_and_skips_claims_of_another_mode(tmp_path, capsys):
    ledger = _write(tmp_path, [CLAIM])
    call_command("reproduce", "--list", "--ledger", ledger)
    assert "pace-speedup" in capsys.readouterr().out
    for args, message in (
        (["nope"], "unknown claim"),
        ([], "name claims or pass --all"),
        (["--all", "pace-speedup"], "not both"),
    ):
        with pytest.raises(CommandError, match=message) as err:
            call_command("reproduce", *args, "--ledger", ledger)
        assert err.value.returncode == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("[]")
    with pytest.raises(CommandError, match="invalid ledger") as err:
        call_command("reproduce", "--all", "--ledger", str(bad))
    assert err.value.returncode == 2
    # A sim-only claim asked for in real mode: not-run, nothing queued, no waiting.
    call_command("reproduce", "--all", "--mode", "real", "--json", "--ledger", ledger)
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["verdict"] == "not-run" and "needs mode sim" in line["reason"]
    from lab.experiments.models import Experiment

    assert not Experiment.objects.exists()


def test_conditions_below_the_resolution_are_left_out_and_named():
    claim = _claim(resolution=0.1, measure="ratio", unit="x", claimed=2.0, aggregate="max")
    values = {
        "a": {"pace": [1e-4, 2e-4], "horovod": [1.0, 1.1]},  # ratio ~7000: undefined
        "b": {"pace": [0.5, 0.52], "horovod": [0.6, 0.61]},
    }
    result = c.assess(claim, values)
    assert result.condition == "b" and result.measured == pytest.approx(0.605 / 0.51)
    assert "left out" in result.reason and "a" in result.reason
    assert result.per_baseline["horovod"] == pytest.approx(0.605 / 0.51)
    everything_low = {"a": values["a"]}
    assert c.assess(claim, everything_low).verdict == "not-run"
    assert c.assess(_claim(measure="ratio", unit="x", claimed=2.0), values).condition == "a"
    with pytest.raises(c.LedgerError, match="resolution"):
        _claim(resolution=-1)
