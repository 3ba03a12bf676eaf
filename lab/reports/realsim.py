"""A real-mode experiment's runs beside the simulator's prediction of each: its *twin*
(``runners.twin``, the twin ``python -m runners fidelity`` scores), from the newest
calibration that covers the run, or the one ``LAB_TWIN_CALIBRATION`` names.

``frame`` has one row per succeeded real run (its iteration time, its twin's, or the note why
it has none); ``summary`` per system and cell (workload and swept condition) the mean over
seeds of both and the simulator's error, then per baseline the speedup of the system under
test, real beside simulated (ratios of the means). ``plot`` draws both; ``render`` writes the
figure, the CSV behind it and what the page shows (each run's twin, why runs have none).
Twins are simulated once per run spec and calibration (``CACHE``: a calibration measured
again is a new key); a twin that fails is a note, not a broken render.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import pandas as pd
from django.conf import settings
from matplotlib.figure import Figure

from lab.experiments.models import Experiment
from lab.reports import plots
from lab.runs.models import CONDITION_KEYS, Run, condition_of, condition_text
from runners import fidelity, rundir, twin

STEM = "real-vs-sim"
CSV = f"{STEM}.csv"
PAGE = f"{STEM}-page.json"  # for the page: each run's twin and why runs have none
CACHE = ".twins.json"
CELL = ["workload", *CONDITION_KEYS]
SOURCES = plots.SOURCES
log = logging.getLogger(__name__)
SUMMARY_COLUMNS = [
    *("quantity", "system", "baseline", *CELL, "n", "real", "simulated", "error_pct"),
    "calibration",
]


def _calibrations_key() -> str:
    """Changes whenever a calibration file or a measured profile is written."""
    stamps = [
        (p.name, p.stat().st_mtime_ns, p.stat().st_size)
        for directory in (fidelity.TESTBEDS_DIR, fidelity.TESTBEDS_DIR.parent / "measured")
        if directory.is_dir()
        for p in sorted(directory.glob("*.json"))
    ]
    return hashlib.sha256(json.dumps(stamps).encode()).hexdigest()[:16]


def _twin_of(
    run: Run, summary: dict[str, Any], cache: dict[str, Any], key: str, used: dict[str, Any]
) -> dict:
    """``{"label", "date", "sim_s"}`` or ``{"note"}`` for ``run``, through ``cache`` (what it
    gives is kept in ``used``, the next cache)."""
    got = {k: summary.get(k) for k in ("network", "device", "comm_priority")}
    pinned = settings.TWIN_CALIBRATION
    digest = hashlib.sha256(
        json.dumps([run.spec, got, pinned, key], sort_keys=True, default=str).encode()
    ).hexdigest()
    if digest not in cache:
        try:
            p = twin.predict(run.spec, summary, pinned)
        except twin.NoTwin as exc:
            cache[digest] = {"note": str(exc)}
        except Exception as exc:  # a twin that fails must not take the other figures with it
            log.exception("run %s: its twin failed", run.pk)
            cache[digest] = {"note": f"its twin failed ({type(exc).__name__}: {exc})"}
        else:
            cache[digest] = {"label": p.label, "date": p.date, "sim_s": p.iteration_time_s}
    used[digest] = cache[digest]
    return cache[digest]


def frame(experiment: Experiment, directory: Path | None = None) -> pd.DataFrame:
    """One row per succeeded run: system, workload, conditions, seed, ``real`` (its iteration
    time), ``simulated`` (its twin's, NaN without one), calibration, note."""
    cache_path = None if directory is None else directory / CACHE
    try:
        cache = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    except ValueError:
        cache = {}
    key = _calibrations_key()
    used: dict[str, Any] = {}
    rows = []
    runs = experiment.runs.filter(state=Run.SUCCEEDED).prefetch_related("measurements")
    for run in runs.order_by("id"):
        values = {m.metric: m.value for m in run.measurements.all()}
        if "iteration_time_s" not in values:
            continue
        try:
            summary = rundir.read_summary(run.run_dir)
        except (OSError, ValueError):
            got = {"note": f"run {run.pk}: its run directory has no readable summary"}
        else:
            got = _twin_of(run, summary, cache, key, used)
        condition = condition_of(run.spec)
        rows.append(
            {
                "run": run.pk,
                "system": run.system,
                "workload": run.workload,
                **{k: condition.get(k) for k in CONDITION_KEYS},
                "seed": run.seed,
                "real": values["iteration_time_s"],
                "simulated": got.get("sim_s", float("nan")),
                "calibration": got.get("label", ""),
                "calibration_date": got.get("date", ""),
                "note": got.get("note", ""),
            }
        )
    if cache_path is not None:  # only this experiment's current runs' twins
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f"{CACHE}.", dir=cache_path.parent)
        with os.fdopen(fd, "w") as out:
            json.dump(used, out)
        os.replace(tmp, cache_path)  # whole or not at all (the export reads it unlocked)
    return pd.DataFrame(rows)


def summary(runs: pd.DataFrame, system: str, baselines: list[str]) -> pd.DataFrame:
    """Per system and cell, the mean iteration time over the seeds that have a twin, real and
    simulated, and the simulator's error (signed, % of the real); then per cell and baseline
    the speedup of ``system`` over it (baseline's mean time over the system's), real and
    simulated. Columns ``SUMMARY_COLUMNS``."""
    twinned = runs[runs["simulated"].notna()] if not runs.empty else runs
    if twinned.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    twinned = twinned.assign(**{k: twinned[k].astype(object) for k in CONDITION_KEYS})
    rows = []
    for cell, group in twinned.groupby(CELL, sort=False, dropna=False):
        means = group.groupby("system", sort=False)[["real", "simulated"]].mean()
        counts = group.groupby("system", sort=False)["seed"].nunique()
        labels = group.groupby("system", sort=False)["calibration"].agg(
            lambda s: ", ".join(dict.fromkeys(s))
        )
        for name, (real, sim) in means.iterrows():
            error = 100.0 * (sim - real) / real if real else float("nan")
            rows.append(
                ("iteration_time_s", name, "", *cell, int(counts[name]), real, sim, error)
                + (labels[name],)
            )
        if system not in means.index:
            continue
        for baseline in baselines:
            if baseline not in means.index:
                continue
            real = means.at[baseline, "real"] / means.at[system, "real"]
            sim = means.at[baseline, "simulated"] / means.at[system, "simulated"]
            n = int(min(counts[system], counts[baseline]))
            error = 100.0 * (sim - real) / real if real else float("nan")
            calibration = ", ".join(dict.fromkeys([labels[system], labels[baseline]]))
            rows.append(("speedup", system, baseline, *cell, n, real, sim, error, calibration))
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    empty = [k for k in CONDITION_KEYS if table[k].isna().all()]  # e.g. no load: comm arenas
    return table.drop(columns=empty)


def plot_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that have a twin, as ``plots.real_vs_sim_plot`` draws them: panel (the cell:
    workload and condition), system, seed, real, simulated, calibration."""
    if runs.empty:
        return pd.DataFrame(columns=["panel", "system", "seed", *SOURCES, "calibration"])
    twinned = runs[runs["simulated"].notna()]
    panels = [
        condition_text({k: row[k] for k in CELL if k in row}) for _, row in twinned.iterrows()
    ]
    columns = ["system", "seed", *SOURCES, "calibration"]
    return twinned[columns].assign(panel=panels)[["panel", *columns]].reset_index(drop=True)


def plot(data: pd.DataFrame, system: str, baselines: list[str]) -> Figure:
    """The page's figure of ``plot_frame``'s rows (the bundle draws the same from its CSV)."""
    with matplotlib.rc_context({"figure.figsize": (6.4, 3.6)}):
        return plots.real_vs_sim_plot(
            data, system=system, baselines=baselines, caption=caption(data)
        )


def caption(data: pd.DataFrame) -> str:
    labels = ", ".join(sorted({str(x) for x in data["calibration"] if x}))
    seeds = data.groupby(["panel", "system"], sort=False)["seed"].nunique()
    n = f"n={seeds.min()}" if seeds.min() == seeds.max() else f"n={seeds.min()}-{seeds.max()}"
    return (
        f"bars: mean iteration time over seeds, real and each run's twin (python -m runners "
        f"twin, calibration {labels}); error bars: {plots.CI_METHOD}; speedups: ratios of the "
        f"means; {n} seeds per bar"
    )


def notes(runs: pd.DataFrame, limit: int = 5) -> list[str]:
    """Why runs have no twin, one line per distinct reason (the runs it concerns), at most
    ``limit``."""
    if runs.empty:
        return []
    missing = runs[runs["note"] != ""]
    out = []
    for note, group in missing.groupby("note", sort=False):
        ids = ", ".join(str(r) for r in group["run"].head(4))
        more = f" and {len(group) - 4} more" if len(group) > 4 else ""
        out.append(f"runs {ids}{more}: {note}")
    return out[:limit]


def render(experiment: Experiment, directory: Path) -> list[Path]:
    """The figure, its CSV and what the page shows of a real-mode experiment; nothing (and
    any old ones removed) for others or without twins. (Called by ``figures.render``.)"""
    from lab.reports.figures import FORMATS, atomic_write, save  # (figures imports this)

    old = [directory / name for name in (CSV, PAGE, *(f"{STEM}.{f}" for f in FORMATS))]
    if experiment.mode != "real":
        for path in old:
            path.unlink(missing_ok=True)
        return []
    runs = frame(experiment, directory)
    paths: list[Path] = []
    twins = {} if runs.empty else runs[runs["simulated"].notna()].set_index("run")["simulated"]
    page = {"notes": notes(runs), "runs": {str(k): float(v) for k, v in dict(twins).items()}}
    atomic_write(directory / PAGE, lambda tmp: Path(tmp).write_text(json.dumps(page)))
    table = summary(runs, experiment.system, experiment.baselines)
    if table.empty:
        for path in old[:1] + old[2:]:
            path.unlink(missing_ok=True)
        return paths
    atomic_write(directory / CSV, lambda tmp: table.to_csv(tmp, index=False))
    paths.append(directory / CSV)
    figure = plot(plot_frame(runs), experiment.system, list(experiment.baselines))
    paths += save(figure, directory, STEM)
    return paths


def page(directory: Path) -> tuple[list[str], dict[int, float]]:
    """What ``render`` left for the page: why runs have no twin, and each run's twin's
    iteration time by run id (nothing before it ran)."""
    try:
        doc = json.loads((directory / PAGE).read_text())
        return list(doc["notes"]), {int(k): float(v) for k, v in doc["runs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [], {}
