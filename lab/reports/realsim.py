"""A real-mode experiment's runs beside the simulator's prediction of each: its *twin*
(``runners.twin``, the twin ``python -m runners fidelity`` scores), from the newest
calibration that covers the run, or the one ``LAB_TWIN_CALIBRATION`` names.

``frame`` has one row per succeeded real run (its iteration time, its twin's, or the note why
it has none); ``summary`` per system and cell (workload and swept condition) the mean over
seeds of both and the simulator's error, then per baseline the speedup of the system under
test, real beside simulated (ratios of the means). ``plot`` draws both; ``render`` writes the
figure, the CSV behind it and the notes the page shows. Twins are simulated once per run
spec and calibration (``CACHE``: a calibration measured again is a new key).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import seaborn as sns
from django.conf import settings
from matplotlib.figure import Figure

from lab.experiments.models import Experiment
from lab.runs.models import CONDITION_KEYS, Run, condition_of, condition_text
from runners import fidelity, rundir, twin

STEM = "real-vs-sim"
CSV = f"{STEM}.csv"
NOTES = f"{STEM}-notes.json"  # why runs have no twin (the page lists them)
CACHE = ".twins.json"
CELL = ["workload", *CONDITION_KEYS]
SOURCES = ("real", "simulated")
FORMATS = ("png", "pdf", "svg")  # as ``figures.FORMATS`` (which imports this module)
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
        cache_path.write_text(json.dumps(used))
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


def _cell_title(values: dict[str, Any]) -> str:
    return condition_text({k: v for k, v in values.items() if k in CELL})


def plot(runs: pd.DataFrame, table: pd.DataFrame, order: list[str]) -> Figure:
    """Per cell, a panel of iteration times (one pair of bars per system: the real runs' mean
    with its bootstrap 95% CI over seeds, and their twins') and, below, the system's speedup
    over each baseline, real beside simulated."""
    twinned = runs[runs["simulated"].notna()]
    twinned = twinned.assign(**{k: twinned[k].astype(object) for k in CONDITION_KEYS})
    cells = list(twinned.groupby(CELL, sort=False, dropna=False))
    speedups = table[table["quantity"] == "speedup"]
    rows = 2 if not speedups.empty else 1
    fig = Figure(figsize=(max(6.4, 3.6 * len(cells)), 3.0 * rows + 0.8), layout="constrained")
    grid = fig.subplots(rows, len(cells), squeeze=False)
    palette = dict(zip(SOURCES, sns.color_palette("colorblind", 2), strict=True))
    for c, (cell, group) in enumerate(cells):
        values = dict(zip(CELL, cell, strict=True))
        long = group.melt(
            id_vars=["system", "seed"], value_vars=list(SOURCES), var_name="source"
        ).assign(value=lambda d: d["value"] * 1e3)
        systems = [s for s in order if s in set(long["system"])]
        ax = grid[0][c]
        sns.barplot(
            data=long, x="system", y="value", hue="source", order=systems, hue_order=SOURCES,
            palette=palette, errorbar=("ci", 95), n_boot=1000, seed=0, capsize=0.1, ax=ax,
            edgecolor="black", linewidth=0.6,
        )  # fmt: skip
        _hatch(ax)
        ax.set_title(_cell_title(values), fontsize="small")
        ax.set_xlabel("")
        ax.set_ylabel("iteration time (ms), lower is better" if c == 0 else "")
        ax.tick_params(axis="x", labelrotation=30, labelsize="small")
        _legend(ax, c == len(cells) - 1)
        if rows == 2:
            ax = grid[1][c]
            mine = speedups
            for k, v in values.items():
                if k not in mine.columns:
                    continue
                mine = mine[mine[k].isna()] if v is None or v != v else mine[mine[k] == v]
            bars = mine.melt(id_vars=["baseline"], value_vars=list(SOURCES), var_name="source")
            if bars.empty:
                ax.set_axis_off()
                continue
            sns.barplot(
                data=bars, x="baseline", y="value", hue="source", hue_order=SOURCES,
                palette=palette, errorbar=None, ax=ax, edgecolor="black", linewidth=0.6,
            )  # fmt: skip
            _hatch(ax)
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
            ax.set_xlabel(f"{mine['system'].iloc[0]} over baseline")
            ax.set_ylabel("speedup (\u00d7), > 1: faster" if c == 0 else "")
            ax.tick_params(axis="x", labelrotation=30, labelsize="small")
            _legend(ax, False)
    labels = ", ".join(sorted({x for x in twinned["calibration"] if x}))
    seeds = twinned.groupby(["system", *CELL], dropna=False)["seed"].nunique()
    n = f"n={seeds.min()}" if seeds.min() == seeds.max() else f"n={seeds.min()}-{seeds.max()}"
    fig.text(
        0.01, 0.0,
        f"real: mean iteration time over seeds, error bars bootstrap 95% CI (1000 resamples, "
        f"seed 0); simulated: each run's twin (python -m runners twin) from calibration "
        f"{labels}, same CI; speedups: ratios of the means; {n} seeds per bar",
        fontsize="x-small", ha="left", va="bottom", wrap=True,
    )  # fmt: skip
    fig.get_layout_engine().set(h_pad=0.2)
    return fig


def _hatch(ax) -> None:
    for container, hatch in zip(ax.containers, ("", "//"), strict=False):
        for bar in getattr(container, "patches", container):
            bar.set_hatch(hatch)


def _legend(ax, show: bool) -> None:
    legend = ax.get_legend()
    if legend is None:
        return
    if show:  # beside the last panel of the top row, clear of the bars
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.0, 1.0), title=None, frameon=False)
    else:
        legend.remove()


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


def render(experiment: Experiment, directory: Path, save, atomic_write) -> list[Path]:
    """The figure (``save(fig, directory, STEM)``), its CSV and the notes of a real-mode
    experiment; nothing (and any old ones removed) for others or without twins."""
    old = [directory / name for name in (CSV, NOTES, *(f"{STEM}.{f}" for f in FORMATS))]
    if experiment.mode != "real":
        for path in old:
            path.unlink(missing_ok=True)
        return []
    runs = frame(experiment, directory)
    paths: list[Path] = []
    lines = notes(runs)
    atomic_write(directory / NOTES, lambda tmp: Path(tmp).write_text(json.dumps(lines)))
    table = summary(runs, experiment.system, experiment.baselines)
    if table.empty:
        for path in old[:1] + old[2:]:
            path.unlink(missing_ok=True)
        return paths
    atomic_write(directory / CSV, lambda tmp: table.to_csv(tmp, index=False))
    paths.append(directory / CSV)
    paths += save(plot(runs, table, experiment.entries), directory, STEM)
    return paths


def page_notes(directory: Path) -> list[str]:
    """The notes ``render`` left for the page (none before it ran)."""
    try:
        return list(json.loads((directory / NOTES).read_text()))
    except (OSError, ValueError):
        return []
