"""The claims ledger: every headline claim of the seed papers as data, and the one rule that
turns a measurement into a verdict.

The ledger lives in ``claims/ledger.yaml`` (one entry per claim; schema in ``CLAIM_KEYS`` and
``load_ledger``). Nothing here touches the database: ``lab.reports.reproduce`` runs the
experiments and hands the per-run values to ``assess``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

import yaml

from lab.reports.stats import Comparison, compare
from runners import registry

LEDGER_PATH = Path(__file__).resolve().parents[2] / "claims" / "ledger.yaml"

MEASURES = {
    "percent_faster": "(baseline / system - 1) x 100, on a time (lower is better)",
    "percent_less": "(1 - system / baseline) x 100, on a lower-is-better metric",
    "percent_more": "(system / baseline - 1) x 100, on a higher-is-better metric",
    "ratio": "baseline / system when lower is better, system / baseline otherwise",
}
AGGREGATES = ("max", "mean")
MODES = ("sim", "real")
VERDICTS = ("reproduced", "partial", "not-reproduced", "not-run")
REPRODUCED_FRACTION = 0.8
ALPHA = 0.05

VERDICT_RULE = f"""\
For each condition of the claim's experiment (workload x sweep point), the claim's measure is
computed from the means over seeds of the system and of its primary baseline (the first one the
ledger lists; the others are reported beside it). The headline "measured" is the maximum over
conditions when the paper says "up to", else their mean. At the condition that gives it, the
improvement is "established" when the system is better and either a test over the seeds says so
(Welch's t-test, or Mann-Whitney U from 8 seeds a side, p < {ALPHA}) or both sides are exact
(no spread over seeds) and differ.
- reproduced: established, and the measured improvement reaches {REPRODUCED_FRACTION:.0%} of
  the claimed one (for a ratio claim: of the claimed gain above 1x).
- partial: established, but below {REPRODUCED_FRACTION:.0%} of the claimed improvement.
- not-reproduced: no established improvement in the claimed direction.
- not-run: the claim needs a mode that was not run, or its runs did not all succeed.
A claim may state a resolution: a condition where a mean is below it is left out (and named),
because a ratio or percentage of a value below what can be measured is undefined."""

CLAIM_KEYS = {
    "id": str,
    "system": str,
    "arena": str,
    "paper": str,
    "claim": str,
    "source": str,
    "metric": str,
    "lower_is_better": bool,
    "measure": str,
    "claimed": (int, float),
    "unit": str,
    "aggregate": str,
    "baselines": list,
    "modes": list,
    "experiment": dict,
    "conditions": list,
}
OPTIONAL_KEYS = {"notes": str, "resolution": (int, float)}
EXPERIMENT_KEYS = {"workloads", "cluster", "sweep", "params", "seeds", "iterations"}
CONDITION_ORIGINS = ("paper", "assumption")


class LedgerError(ValueError):
    """A malformed ledger: the message names the file, the claim and the field."""


@dataclass(frozen=True)
class Claim:
    id: str
    system: str
    arena: str
    paper: str
    claim: str
    source: str
    metric: str
    lower_is_better: bool
    measure: str
    claimed: float
    unit: str
    aggregate: str
    baselines: tuple[str, ...]
    modes: tuple[str, ...]
    experiment: dict[str, Any] = field(hash=False)
    conditions: tuple[dict[str, Any], ...] = field(hash=False)
    notes: str = ""
    resolution: float = 0.0  # means below this are unmeasurable: their condition is left out

    def conditions_summary(self) -> dict[str, Any]:
        """name -> {value, origin} (what the JSON line prints)."""
        return {c["name"]: {"value": c["value"], "origin": c["origin"]} for c in self.conditions}

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "system": self.system,
            "arena": self.arena,
            "paper": self.paper,
            "claim": self.claim,
            "source": self.source,
            "metric": self.metric,
            "lower_is_better": self.lower_is_better,
            "measure": self.measure,
            "claimed": self.claimed,
            "unit": self.unit,
            "aggregate": self.aggregate,
            "baselines": list(self.baselines),
            "modes": list(self.modes),
            "experiment": self.experiment,
            "conditions": list(self.conditions),
            "notes": self.notes,
            "resolution": self.resolution,
        }


def _fail(path: Path, where: str, message: str) -> LedgerError:
    return LedgerError(f"{path}: {where}: {message}")


def _check_claim(path: Path, index: int, raw: Any, seen: set[str]) -> Claim:
    where = f"claim #{index + 1}"
    if not isinstance(raw, dict):
        raise _fail(path, where, "each claim must be a mapping")
    if isinstance(raw.get("id"), str):
        where = f"claim '{raw['id']}'"
    unknown = set(raw) - set(CLAIM_KEYS) - set(OPTIONAL_KEYS)
    if unknown:
        raise _fail(path, where, f"unknown field(s) {sorted(unknown)}")
    for key, kind in {**CLAIM_KEYS, **OPTIONAL_KEYS}.items():
        if key not in raw:
            if key in OPTIONAL_KEYS:
                continue
            raise _fail(path, where, f"field '{key}' is missing")
        value = raw[key]
        if isinstance(value, bool) and kind is not bool:
            raise _fail(path, where, f"field '{key}' must be {_kind_name(kind)}")
        if not isinstance(value, kind):
            raise _fail(path, where, f"field '{key}' must be {_kind_name(kind)}")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", raw["id"]):
        raise _fail(path, where, "field 'id' must be lowercase letters, digits and dashes")
    if raw["id"] in seen:
        raise _fail(path, where, "field 'id' repeats an earlier claim")
    seen.add(raw["id"])
    try:
        entry = registry.get(raw["system"])
    except registry.UnknownEntry:
        raise _fail(path, where, f"field 'system': unknown system '{raw['system']}'") from None
    if entry.arena != raw["arena"]:
        raise _fail(path, where, f"field 'arena': {raw['system']} is in arena '{entry.arena}'")
    for name in raw["baselines"]:
        try:
            base = registry.get(name)
        except (registry.UnknownEntry, TypeError):
            raise _fail(path, where, f"field 'baselines': unknown baseline {name!r}") from None
        if base.arena != entry.arena:
            raise _fail(path, where, f"field 'baselines': {name} is not in arena {entry.arena}")
    if not raw["baselines"]:
        raise _fail(path, where, "field 'baselines' must name at least one baseline")
    if raw["measure"] not in MEASURES:
        raise _fail(path, where, f"field 'measure' must be one of {sorted(MEASURES)}")
    if raw["aggregate"] not in AGGREGATES:
        raise _fail(path, where, f"field 'aggregate' must be one of {list(AGGREGATES)}")
    if not raw["modes"] or any(m not in MODES for m in raw["modes"]):
        raise _fail(path, where, f"field 'modes' must list some of {list(MODES)}")
    expected_unit = "x" if raw["measure"] == "ratio" else "%"
    if raw["unit"] != expected_unit:
        raise _fail(path, where, f"field 'unit' must be '{expected_unit}' for {raw['measure']}")
    claimed = float(raw["claimed"])
    if not math.isfinite(claimed) or claimed <= (1.0 if raw["measure"] == "ratio" else 0.0):
        raise _fail(path, where, "field 'claimed' must be an improvement (> 0 %, or > 1 x)")
    if raw["measure"] in ("percent_faster", "percent_less") and not raw["lower_is_better"]:
        raise _fail(path, where, f"field 'measure': {raw['measure']} needs lower_is_better")
    if raw["measure"] == "percent_more" and raw["lower_is_better"]:
        raise _fail(path, where, "field 'measure': percent_more needs a higher-is-better metric")
    experiment = raw["experiment"]
    unknown = set(experiment) - EXPERIMENT_KEYS
    if unknown:
        raise _fail(path, where, f"field 'experiment': unknown key(s) {sorted(unknown)}")
    seeds = experiment.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise _fail(path, where, "field 'experiment.seeds' must be a list of integers")
    if entry.arena != "cluster" and not experiment.get("workloads"):
        raise _fail(path, where, "field 'experiment.workloads' must name a workload")
    trace = (experiment.get("cluster") or {}).get("trace")
    if entry.arena == "cluster" and not isinstance(trace, dict):
        raise _fail(path, where, "field 'experiment.cluster.trace' must describe the trace")
    resolution = float(raw.get("resolution", 0.0))
    if not math.isfinite(resolution) or resolution < 0:
        raise _fail(path, where, "field 'resolution' must be a number >= 0")
    if not raw["conditions"]:
        raise _fail(path, where, "field 'conditions' must state the conditions")
    for k, cond in enumerate(raw["conditions"]):
        if not isinstance(cond, dict) or not {"name", "value", "origin"} <= set(cond):
            raise _fail(path, where, f"conditions[{k}] needs name, value and origin")
        if cond["origin"] not in CONDITION_ORIGINS:
            raise _fail(path, where, f"conditions[{k}].origin must be 'paper' or 'assumption'")
    return Claim(
        id=raw["id"],
        system=raw["system"],
        arena=raw["arena"],
        paper=raw["paper"],
        claim=raw["claim"],
        source=raw["source"],
        metric=raw["metric"],
        lower_is_better=raw["lower_is_better"],
        measure=raw["measure"],
        claimed=claimed,
        unit=raw["unit"],
        aggregate=raw["aggregate"],
        baselines=tuple(raw["baselines"]),
        modes=tuple(raw["modes"]),
        experiment=dict(experiment),
        conditions=tuple(dict(c) for c in raw["conditions"]),
        notes=raw.get("notes", ""),
        resolution=resolution,
    )


def _kind_name(kind: Any) -> str:
    names = {str: "text", bool: "true or false", list: "a list", dict: "a mapping"}
    if isinstance(kind, tuple):
        return "a number"
    return names.get(kind, kind.__name__)


def load_ledger(path: Path | str = LEDGER_PATH) -> list[Claim]:
    """Read and validate the ledger; ``LedgerError`` names the file, the claim and the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise LedgerError(f"{path}: no such file") from None
    except yaml.YAMLError as err:
        raise LedgerError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, list) or not data:
        raise LedgerError(f"{path}: the ledger must be a non-empty list of claims")
    seen: set[str] = set()
    return [_check_claim(path, i, raw, seen) for i, raw in enumerate(data)]


def claim_from_dict(raw: dict[str, Any]) -> Claim:
    """A claim back from ``Claim.as_dict`` (as a claim check stores it), validated again."""
    return _check_claim(Path("stored claim"), 0, dict(raw), set())


def improvement(measure: str, lower_is_better: bool, system: float, baseline: float) -> float:
    """The claim's measure for one pair of means (see ``MEASURES``)."""
    if system <= 0 or baseline <= 0:
        return math.nan
    if measure == "percent_faster":
        return (baseline / system - 1.0) * 100.0
    if measure == "percent_less":
        return (1.0 - system / baseline) * 100.0
    if measure == "percent_more":
        return (system / baseline - 1.0) * 100.0
    if measure == "ratio":
        return baseline / system if lower_is_better else system / baseline
    raise ValueError(f"measure: unknown measure {measure!r}")


@dataclass(frozen=True)
class Assessment:
    claim: Claim
    verdict: str
    measured: float | None
    condition: str = ""  # the condition that gives the headline value
    reason: str = ""
    per_condition: dict[str, float] = field(default_factory=dict, hash=False)
    per_baseline: dict[str, float] = field(default_factory=dict, hash=False)
    comparison: Comparison | None = None

    def line(self, mode: str) -> dict[str, Any]:
        """The JSON line ``reproduce --json`` prints."""
        c = self.claim
        return {
            "claim": c.id,
            "system": c.system,
            "claimed": c.claimed,
            "measured": None if self.measured is None else round(self.measured, 4),
            "unit": c.unit,
            "verdict": self.verdict,
            "conditions": c.conditions_summary(),
            "baseline": c.baselines[0],
            "mode": mode,
            "at": self.condition,
            "per_baseline": {k: round(v, 4) for k, v in self.per_baseline.items()},
            "method": self.comparison.method if self.comparison else "",
            "reason": self.reason,
        }


def not_run(claim: Claim, reason: str) -> Assessment:
    return Assessment(claim, "not-run", None, reason=reason)


def assess(claim: Claim, values: Mapping[str, Mapping[str, Sequence[float]]]) -> Assessment:
    """The verdict of ``claim`` from ``values[condition][system or baseline]`` = per-seed values
    of the claim's metric (``VERDICT_RULE``)."""
    primary = claim.baselines[0]
    for condition, groups in values.items():
        if not groups.get(claim.system) or not groups.get(primary):
            return not_run(claim, f"no values for {claim.system} and {primary} at {condition}")
    unresolved = _unresolved(claim, values, primary)
    measurable = {k: v for k, v in values.items() if k not in unresolved}
    if not measurable:
        return not_run(
            claim,
            f"at every condition a mean of {claim.metric} is below the claim's resolution "
            f"({claim.resolution:g}): the measure is undefined",
        )
    per_condition = improvements_by_condition(claim, measurable, primary)
    if not per_condition or any(math.isnan(v) for v in per_condition.values()):
        return not_run(claim, "no usable values (a metric was missing or not positive)")
    if claim.aggregate == "max":
        at = max(per_condition, key=lambda k: per_condition[k])
        measured = per_condition[at]
    else:
        measured = fmean(per_condition.values())
        at = min(per_condition, key=lambda k: abs(per_condition[k] - measured))
    groups = values[at]
    comparison = compare(
        list(groups[claim.system]), list(groups[primary]), lower_is_better=claim.lower_is_better
    )
    per_baseline = {}
    for name in claim.baselines:
        found = improvements_by_condition(
            claim,
            {k: v for k, v in values.items() if k not in _unresolved(claim, values, name)},
            name,
        )
        if found:
            found_values = found.values()
            per_baseline[name] = (
                max(found_values) if claim.aggregate == "max" else fmean(found_values)
            )
    better = comparison.ratio > 1.0
    exact = _no_spread(groups[claim.system]) and _no_spread(groups[primary])
    established = better and (comparison.significant or exact)
    gain, wanted = measured, claim.claimed
    if claim.measure == "ratio":
        gain, wanted = measured - 1.0, claim.claimed - 1.0
    if not established:
        verdict = "not-reproduced"
        reason = (
            f"{claim.system} is not better than {primary} at {at}"
            if not better
            else f"the difference at {at} is not significant ({comparison.method})"
        )
    elif gain >= REPRODUCED_FRACTION * wanted:
        verdict, reason = "reproduced", ""
    else:
        verdict = "partial"
        reason = f"{measured:.3g} {claim.unit} is below {REPRODUCED_FRACTION:.0%} of the claim"
    if unresolved:
        left_out = (
            f"left out (a mean below the resolution {claim.resolution:g}, measure undefined): "
            f"{'; '.join(sorted(unresolved))}"
        )
        reason = f"{reason}; {left_out}" if reason else left_out
    return Assessment(claim, verdict, measured, at, reason, per_condition, per_baseline, comparison)


def _unresolved(
    claim: Claim, values: Mapping[str, Mapping[str, Sequence[float]]], baseline: str
) -> set[str]:
    """Conditions where the system's or ``baseline``'s mean is below the claim's resolution."""
    if claim.resolution <= 0:
        return set()
    return {
        condition
        for condition, groups in values.items()
        if any(
            groups.get(name) and fmean(groups[name]) < claim.resolution
            for name in (claim.system, baseline)
        )
    }


def improvements_by_condition(
    claim: Claim, values: Mapping[str, Mapping[str, Sequence[float]]], baseline: str
) -> dict[str, float]:
    """condition -> the claim's measure from the mean values of the system and ``baseline``,
    at the conditions where both have values."""
    return {
        condition: improvement(
            claim.measure,
            claim.lower_is_better,
            fmean(groups[claim.system]),
            fmean(groups[baseline]),
        )
        for condition, groups in values.items()
        if groups.get(claim.system) and groups.get(baseline)
    }


def _no_spread(values: Sequence[float]) -> bool:
    return max(values) - min(values) <= 1e-12 * max(1.0, abs(max(values)))
