"""Comparison figures of an experiment: load -> pure transform -> plot (no I/O) -> save.

The bar is the mean over seeds; the error bar is seaborn's bootstrap 95% confidence interval
(1000 resamples, fixed seed so a figure is reproducible). Method and n are printed under the
figure.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import seaborn as sns
from django.conf import settings
from django.db.models import Count, Max
from matplotlib.figure import Figure

from lab.experiments.models import Experiment
from lab.results.models import Measurement
from lab.runs.models import CONDITION_KEYS, Run, condition_of

METRICS = ("iteration_time_s", "throughput_samples_per_s")
LABELS = {
    "iteration_time_s": "iteration time (s), lower is better",
    "throughput_samples_per_s": "throughput (samples/s), higher is better",
}
FORMATS = ("png", "pdf", "svg")
HATCHES = ("", "//", "\\\\", "xx", "..", "++", "--", "oo")
CI_SEED = 0
COLUMNS = ["run", "system", "role", "workload", *CONDITION_KEYS, "seed", "metric", "value", "unit"]
AXIS_LABELS = {"workers": "workers", "bandwidth_gbps": "bandwidth (Gbit/s per worker)"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def figure_dir(experiment: Experiment) -> Path:
    return Path(settings.RESULTS_DIR) / "figures" / f"experiment-{experiment.pk}"


def figure_stem(metric: str) -> str:
    return f"comparison-{metric}"


FILES = frozenset({"data.csv"} | {f"{figure_stem(m)}.{fmt}" for m in METRICS for fmt in FORMATS})


def available(experiment: Experiment) -> dict[str, Path]:
    """The metrics that have a figure on disk, with the path of its PNG."""
    directory = figure_dir(experiment)
    pngs = {metric: directory / f"{figure_stem(metric)}.png" for metric in METRICS}
    return {metric: png for metric, png in pngs.items() if png.exists()}


def tidy_frame(experiment: Experiment) -> pd.DataFrame:
    """Long-form table of every measurement of the experiment's succeeded runs, with the
    cluster condition (workers, bandwidth) each run had."""
    runs = Run.objects.filter(experiment=experiment, state=Run.SUCCEEDED)
    conditions = {pk: condition_of(spec) for pk, spec in runs.values_list("id", "spec")}
    rows = Measurement.objects.filter(run__experiment=experiment, run__state=Run.SUCCEEDED)
    values = rows.values_list(
        "run_id", "run__system", "run__workload", "run__seed", "metric", "value", "unit"
    )
    records = [
        (run, system, role, workload, *(conditions[run][c] for c in CONDITION_KEYS), seed, *rest)
        for run, system, workload, seed, *rest in values
        for role in ["system" if system == experiment.system else "baseline"]
    ]
    return pd.DataFrame(records, columns=COLUMNS)


def metric_frame(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    return frame[frame["metric"] == metric].sort_values(["workload", "system", "seed"])


def plot_comparison(data: pd.DataFrame, metric: str, order: list[str]) -> Figure:
    """Bars per workload, one per system (system under test first), 95% CI over seeds."""
    order = [s for s in order if s in set(data["system"])]
    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.subplots()
    sns.barplot(
        data=data,
        x="workload",
        y="value",
        hue="system",
        hue_order=order,
        ax=ax,
        errorbar=("ci", 95),
        n_boot=1000,
        seed=CI_SEED,
        capsize=0.1,
        palette=sns.color_palette("colorblind", len(order)),
        edgecolor="black",
        linewidth=0.6,
    )
    for container, hatch in zip(ax.containers, HATCHES, strict=False):
        for bar in getattr(container, "patches", container):
            bar.set_hatch(hatch)
    ax.set_xlabel("workload")
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.legend(title=None, frameon=False, fontsize="small")
    _caption(fig, data, ["system", "workload"], "bars", "error bars", "bar")
    return fig


def _caption(
    fig: Figure, data: pd.DataFrame, keys: list[str], mark: str, spread: str, unit: str
) -> None:
    """The method and n under a figure (one sentence shape for every plot)."""
    seeds = data.groupby(keys)["seed"].nunique()
    n = f"n={seeds.min()}" if seeds.min() == seeds.max() else f"n={seeds.min()}-{seeds.max()}"
    fig.text(
        0.01,
        0.0,
        f"{mark}: mean over seeds; {spread}: bootstrap 95% CI "
        f"(1000 resamples, seed {CI_SEED}), {n} seeds per {unit}",
        fontsize="x-small",
        ha="left",
        va="bottom",
    )
    fig.get_layout_engine().set(h_pad=0.15)


def plot_sweep(data: pd.DataFrame, metric: str, order: list[str], axes: list[str]) -> Figure:
    """The metric against the swept condition: one panel per workload (and per value of a
    second swept condition), one line per system with markers and dashes that survive
    grayscale, mean over seeds with a bootstrap 95% CI band."""
    order = [s for s in order if s in set(data["system"])]
    x = axes[0]
    rows = sorted(data[axes[1]].unique()) if len(axes) > 1 else [None]
    workloads = list(dict.fromkeys(data["workload"]))
    fig = Figure(figsize=(3.2 * len(workloads) + 0.8, 2.8 * len(rows) + 0.6), layout="constrained")
    grid = fig.subplots(len(rows), len(workloads), squeeze=False)
    palette = dict(zip(order, sns.color_palette("colorblind", len(order)), strict=True))
    markers = dict(zip(order, MARKERS * (len(order) // len(MARKERS) + 1), strict=False))
    for r, row_value in enumerate(rows):
        for c, workload in enumerate(workloads):
            ax = grid[r][c]
            panel = data[data["workload"] == workload]
            if row_value is not None:
                panel = panel[panel[axes[1]] == row_value]
            sns.lineplot(
                data=panel,
                x=x,
                y="value",
                hue="system",
                hue_order=order,
                style="system",
                style_order=order,
                markers=markers,
                palette=palette,
                errorbar=("ci", 95),
                n_boot=1000,
                seed=CI_SEED,
                ax=ax,
                legend=(r == 0 and c == 0),
            )
            if x == "bandwidth_gbps" and panel[x].max() / max(panel[x].min(), 1e-9) >= 10:
                ax.set_xscale("log")
            title = workload if row_value is None else f"{workload}, {axes[1]}={row_value:g}"
            ax.set_title(title, fontsize="small")
            ax.set_xlabel(AXIS_LABELS.get(x, x))
            ax.set_ylabel(LABELS.get(metric, metric) if c == 0 else "")
    legend = grid[0][0].get_legend()
    if legend is not None:
        legend.set_title(None)
        legend.set_frame_on(False)
    _caption(fig, data, ["system", "workload", *axes], "lines", "bands", "point")
    return fig


def swept(experiment: Experiment) -> list[str]:
    """The conditions the experiment sweeps, bandwidth first (the usual x axis)."""
    return [c for c in ("bandwidth_gbps", "workers") if len(experiment.sweep.get(c, [])) > 1]


def save(fig: Figure, directory: Path, stem: str) -> list[Path]:
    """Write the figure in every format; each file appears atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context({"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}):
        for fmt in FORMATS:
            target = directory / f"{stem}.{fmt}"
            _atomic(target, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=150))
            paths.append(target)
    return paths


def _atomic(target: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


FINGERPRINT = "fingerprint.txt"


def results_fingerprint(experiment: Experiment) -> str:
    """Identifies the set of results a figure is drawn from (succeeded runs only)."""
    done = experiment.runs.filter(state=Run.SUCCEEDED).aggregate(
        n=Count("id"), t=Max("finished_at")
    )
    return f"{done['n']}:{done['t'].isoformat() if done['t'] else '-'}"


def is_current(experiment: Experiment) -> bool:
    """True when the figures on disk show every succeeded run (nothing left to redraw)."""
    expected = results_fingerprint(experiment)
    if expected.startswith("0:"):
        return True
    fingerprint = figure_dir(experiment) / FINGERPRINT
    return fingerprint.exists() and fingerprint.read_text() == expected


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One render per experiment at a time, so an older render never overwrites a newer."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def render(experiment: Experiment) -> list[Path]:
    """Redraw every figure of the experiment and the CSV behind them."""
    directory = figure_dir(experiment)
    with _locked(directory):
        fingerprint = results_fingerprint(experiment)  # inside the lock, before the data
        frame = tidy_frame(experiment)
        if frame.empty:
            for old in directory.glob("*"):
                if old.name != ".lock":
                    old.unlink()
            return []
        csv_path = directory / "data.csv"
        _atomic(csv_path, lambda tmp: frame.to_csv(tmp, index=False))
        paths = [csv_path]
        for metric in METRICS:
            data = metric_frame(frame, metric)
            if data.empty:
                continue
            axes = swept(experiment)
            if axes:
                figure = plot_sweep(data, metric, experiment.entries, axes)
            else:
                figure = plot_comparison(data, metric, experiment.entries)
            paths += save(figure, directory, figure_stem(metric))
        _atomic(directory / FINGERPRINT, lambda tmp: Path(tmp).write_text(fingerprint))
    return paths
