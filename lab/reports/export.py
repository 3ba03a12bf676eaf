"""Export an experiment for a paper: one artifact bundle (lab/reports/bundle.py) of its
succeeded runs.

Inside: per metric with data, the speedup of the system under test over each baseline with
its CI (`plots.speedup_plot`, the ratios of `figures.speedup_frame`) and, when the experiment
sweeps a condition, the metric against it (`plots.sweep_plot`, one figure per workload and
value of a second swept condition); the iteration timeline, JCT CDF and convergence figures
the page shows (`figures.detail_figures`); for a real-mode experiment its runs beside their
twins (`plots.real_vs_sim_plot`, `realsim`); the CSV behind each figure; every run's manifest as
manifests/run-<id>.json; and table.tex, a booktabs table of the mean and CI half-width per
system and metric (one table per workload and condition, so the bold best value is always
among runs of the same setting).

A run recorded with uncommitted changes in its working tree (manifest "code": {"dirty": true})
makes the export dirty: it is refused unless a note says why it is fine, and the note is
recorded in the bundle's README.txt and figures.json.

Everything but `export_experiment` and `load_manifests` is pure (frames and dicts in, specs
and text out).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from django.conf import settings

from lab.experiments.models import Experiment
from lab.reports import figures, paper, plots, realsim, stats
from lab.reports.bundle import DirtyTreeError, FigureSpec, write_bundle
from lab.runs.models import CONDITION_KEYS, Run, condition_text
from runners import rundir
from runners.real import others

TABLE = "table.tex"
DIRTY_HINT = (
    "add a note saying why these figures may be exported from a dirty tree, then export again"
)


class ExportError(ValueError):
    """Nothing (sound) to export; the message says what to do."""


class DirtyRunsError(DirtyTreeError):
    """Runs came from a working tree with uncommitted changes and no note was given."""

    def __init__(self, runs: Sequence[int]) -> None:
        self.runs = list(runs)
        names = ", ".join(str(r) for r in self.runs)
        which = f"run {names}" if len(self.runs) == 1 else f"runs {names}"
        super().__init__(f"{which} came from a working tree with uncommitted changes: {DIRTY_HINT}")


def export_dir(experiment: Experiment) -> Path:
    return Path(settings.RESULTS_DIR) / "exports" / f"experiment-{experiment.pk}"


def export_experiment(experiment: Experiment, venue: str, note: str = "") -> Path:
    """Write the experiment's bundle for `venue` (a key of paper.VENUES) and return its path,
    RESULTS_DIR/exports/experiment-<pk>/experiment-<pk>-<venue>.zip. Raises ValueError for an
    unknown venue, ExportError when there is nothing to export or a run's manifest is
    missing, DirtyRunsError when a run came from a dirty tree and `note` is blank; in every
    case nothing is written (the bundle appears atomically)."""
    paper.venue_preset(venue)
    runs = list(experiment.runs.filter(state=Run.SUCCEEDED).order_by("id"))
    if not runs:
        raise ExportError("nothing to export: the experiment has no succeeded runs")
    manifests = load_manifests(runs)
    dirty = dirty_runs(manifests)
    if dirty and not note.strip():
        raise DirtyRunsError(dirty)
    frame = figures.tidy_frame(experiment)
    specs = figure_specs(
        frame,
        system=experiment.system,
        baselines=list(experiment.baselines),
        sweep=figures.swept(experiment),
        venue=venue,
    )
    specs += [
        FigureSpec(stem, kind, data, kwargs, venue)
        for stem, kind, data, kwargs in figures.detail_figures(experiment)
    ]
    specs += real_vs_sim_figures(experiment, venue)
    if not specs:
        measured = ", ".join(figures.METRICS)
        raise ExportError(f"nothing to plot: no succeeded run measured {measured}")
    table = latex_tables(
        frame, order=experiment.entries, caption=experiment.name, label=f"exp{experiment.pk}"
    )
    out = export_dir(experiment) / f"experiment-{experiment.pk}-{venue}.zip"
    return write_bundle(
        out,
        specs,
        {f"run-{pk}": manifest for pk, manifest in manifests.items()},
        dirty=bool(dirty),
        note=note,
        extras={TABLE: table},
        cautions=disturbed(runs),
    )


def disturbed(runs: Sequence[Run]) -> list[str]:
    """A line per real run whose steady iterations had other work beside them on its host
    (its summary's ``others`` flagged: ``runners.real.others``), for the bundle's readers."""
    out = []
    for run in runs:
        try:
            record = rundir.read_summary(run.run_dir).get("others") or {}
        except (OSError, ValueError):
            continue
        if record.get("flagged"):
            out.append(
                f"run {run.pk} ({run.system}, seed {run.seed}) was measured beside other work "
                f"on its host, {others.words(record)}: its real times are slower and noisier "
                "than alone"
            )
    return out


def real_vs_sim_figures(experiment: Experiment, venue: str) -> list[FigureSpec]:
    """A real-mode experiment's runs beside their twins (``realsim``), where any has one."""
    if experiment.mode != "real":
        return []
    data = realsim.plot_frame(realsim.frame(experiment, figures.figure_dir(experiment)))
    if data.empty:
        return []
    kwargs = {
        "system": experiment.system,
        "baselines": list(experiment.baselines),
        "caption": realsim.caption(data),
    }
    return [FigureSpec(realsim.STEM, "real_vs_sim_plot", data, kwargs, venue)]


def load_manifests(runs: Sequence[Run]) -> dict[int, dict[str, Any]]:
    """Run id -> the manifest.json of its run directory; ExportError naming every run whose
    manifest is missing or unreadable (a bundle without them would not say how to rerun)."""
    manifests, missing = {}, []
    for run in runs:
        try:
            manifests[run.pk] = json.loads((run.run_dir / rundir.MANIFEST).read_text())
        except (OSError, ValueError):
            missing.append(run.pk)
    if missing:
        raise ExportError(
            f"no readable {rundir.MANIFEST} for run(s) {', '.join(map(str, missing))}: "
            "re-run them to export"
        )
    return manifests


def dirty_runs(manifests: Mapping[int, Mapping[str, Any]]) -> list[int]:
    """The runs whose manifest says their code had uncommitted changes (code.dirty true)."""
    return sorted(pk for pk, m in manifests.items() if (m.get("code") or {}).get("dirty") is True)


# --- figures ---------------------------------------------------------------------------------


def figure_specs(
    frame: pd.DataFrame, *, system: str, baselines: list[str], sweep: list[str], venue: str
) -> list[FigureSpec]:
    """The bundle's figures from the experiment's tidy frame (`figures.tidy_frame`): per metric
    with data a speedup figure, then (when `sweep` names swept conditions) the sweep figures."""
    speedups = figures.speedup_frame(frame, system, baselines)
    specs = []
    for metric in figures.METRICS:
        data, kwargs = figures.speedup_plot_data(speedups, metric)
        if not data.empty:
            specs.append(FigureSpec(f"speedup-{metric}", "speedup_plot", data, kwargs, venue))
    if sweep:
        for metric in figures.METRICS:
            specs += sweep_specs(frame[frame["metric"] == metric], metric, sweep, venue)
    return specs


def sweep_specs(data: pd.DataFrame, metric: str, sweep: list[str], venue: str) -> list[FigureSpec]:
    """`metric` against the first swept condition, one line per system: a figure per workload
    and value of the second swept condition (the plot pools whatever is not on its axes)."""
    if data.empty:
        return []
    x, panels = sweep[0], ["workload", *sweep[1:]]
    data = figures.by_cell(data)
    many = {k: data[k].nunique() > 1 for k in panels}
    specs = []
    for key, group in data.groupby(panels, sort=False):
        parts = [f"sweep-{metric}"]
        for k, v in zip(panels, key, strict=True):
            if many[k]:
                parts.append(_slug(v if k == "workload" else f"{k}{v:g}"))
        tidy = group[["system", "workload", *CONDITION_KEYS, "seed", "value"]].rename(
            columns={"value": metric}
        )
        log_x = bool(x == "bandwidth_gbps" and tidy[x].max() >= 10 * max(tidy[x].min(), 1e-9))
        kwargs = {"x": x, "metric": metric, "log_x": log_x}
        specs.append(FigureSpec("-".join(parts), "sweep_plot", tidy, kwargs, venue))
    return specs


def _slug(text: object) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_.-") or "x"


# --- table -----------------------------------------------------------------------------------


def latex_tables(frame: pd.DataFrame, *, order: Sequence[str], caption: str, label: str) -> str:
    """Booktabs tables (`paper.latex_table`) of the mean and 95% CI half-width over seeds per
    system and metric, systems in `order`: one table per workload and cluster condition, so
    the best value of a column (bold) is compared within one setting."""
    metrics = [m for m in figures.METRICS if (frame["metric"] == m).any()]
    data = figures.by_cell(frame[frame["metric"].isin(metrics)])
    cells = list(data.groupby(figures.CELL_KEYS, sort=False, dropna=False))
    tables = []
    for i, (cell, group) in enumerate(cells):
        rows, seeds = [], []
        for system in [s for s in order if s in set(group["system"])]:
            row: dict[str, Any] = {"system": system}
            for metric in metrics:
                values = group[(group["system"] == system) & (group["metric"] == metric)]
                if values.empty:
                    row[plots.label(metric)] = row[_ci(metric)] = math.nan
                    continue
                s = stats.summarize(values["value"])
                row[plots.label(metric)] = s.mean
                row[_ci(metric)] = (s.ci_high - s.ci_low) / 2
                seeds.append(s.n)
            rows.append(row)
        table = pd.DataFrame(rows)
        cell_values = dict(zip(figures.CELL_KEYS, cell, strict=True))
        where = condition_text(cell_values, bandwidth_unit="Gbit/s per worker")
        n = f"n={min(seeds)}" if min(seeds) == max(seeds) else f"n={min(seeds)}-{max(seeds)}"
        tables.append(
            paper.latex_table(
                table,
                metrics=[plots.label(m) for m in metrics],
                lower_is_better={plots.label(m): figures.LOWER_IS_BETTER[m] for m in metrics},
                caption=f"{caption}: {where}",
                label=f"tab:{label}" + (f"-{i + 1}" if len(cells) > 1 else ""),
                precision=_precision(
                    table[[plots.label(m) for m in metrics]], table[[_ci(m) for m in metrics]]
                ),
                ci={plots.label(m): _ci(m) for m in metrics},
                note=(
                    "mean over seeds +/- half the width of its 95% CI (percentile bootstrap, "
                    f"{stats.DEFAULT_RESAMPLES:,} resamples, seed 0); {n} seeds per value"
                ),
            )
        )
    return "\n".join(tables)


def _ci(metric: str) -> str:
    return f"{metric}_ci"


def _precision(means: pd.DataFrame, half_widths: pd.DataFrame) -> int:
    """Decimals (2 to 6) that show the smallest mean with about three significant digits and
    the narrowest CI half-width with at least one."""
    wanted = [2]
    for frame, digits in ((means, 3), (half_widths, 1)):
        values = frame.abs().to_numpy(dtype=float).ravel()
        values = values[(values > 0) & (values < math.inf)]
        if values.size:
            wanted.append(digits - 1 - math.floor(math.log10(values.min())))
    return min(6, max(wanted))
