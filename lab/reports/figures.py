"""Comparison figures of an experiment: load -> pure transform -> plot (no I/O) -> save.

The bar is the mean over seeds; the error bar is seaborn's bootstrap 95% confidence interval
(1000 resamples, fixed seed so a figure is reproducible). Method and n are printed under the
figure.

Beside each comparison, the speedup of the system under test over each baseline
(`speedup_frame`): the ratio of the means over seeds, oriented so > 1 means the system is
better, with `stats.compare`'s bootstrap CI, drawn by `plots.speedup_plot` per workload and
swept condition.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
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
from lab.reports import plots, realsim, stats
from lab.results.models import Measurement
from lab.runs.models import CONDITION_KEYS, Run, condition_of, condition_text
from runners import rundir

log = logging.getLogger(__name__)

# The headline metrics compared per experiment: the communication arenas' two, then the
# cluster arena's (an experiment has the ones of its arena; the others find no data).
METRICS = (
    "iteration_time_s",
    "throughput_samples_per_s",
    "avg_jct_s",
    "p95_jct_s",
    "makespan_s",
    "total_utility",
)
LOWER_IS_BETTER = {
    "iteration_time_s": True,
    "throughput_samples_per_s": False,
    "avg_jct_s": True,
    "p95_jct_s": True,
    "makespan_s": True,
    "total_utility": False,
}
LABELS = {
    "iteration_time_s": "iteration time (s), lower is better",
    "throughput_samples_per_s": "throughput (samples/s), higher is better",
    "avg_jct_s": "average job completion time (s), lower is better",
    "p95_jct_s": "95th percentile job completion time (s), lower is better",
    "makespan_s": "makespan (s), lower is better",
    "total_utility": "total utility, higher is better",
}
# A cluster-arena run has no workload; its figures name the trace instead.
TRACE = "trace"
FORMATS = ("png", "pdf", "svg")
HATCHES = ("", "//", "\\\\", "xx", "..", "++", "--", "oo")
CI_SEED = 0
# The cluster arena's condition: its offered load (the generated trace's arrival rate).
LOAD = "jobs_per_hour"
# The tidy frame's columns (`tidy_frame`): TIDY_COLUMNS when its runs have a load (cluster-arena
# runs on a generated trace), else COLUMNS (no load column). Whatever groups by condition fills
# in a condition column a frame lacks (`with_conditions`).
TIDY_COLUMNS = [
    *("run", "system", "role", "workload"),
    *CONDITION_KEYS,
    *("seed", "metric", "value", "unit"),
]
COLUMNS = [c for c in TIDY_COLUMNS if c != LOAD]
AXIS_LABELS = {
    "workers": "workers",
    "bandwidth_gbps": "bandwidth (Gbit/s per worker)",
    LOAD: "offered load (jobs per hour)",
}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def figure_dir(experiment: Experiment) -> Path:
    return Path(settings.RESULTS_DIR) / "figures" / f"experiment-{experiment.pk}"


def figure_stem(metric: str) -> str:
    return f"comparison-{metric}"


def speedup_stem(metric: str) -> str:
    return f"speedup-{metric}"


SPEEDUP_CSV = "speedup.csv"
STEMS = (figure_stem, speedup_stem)
# Figures drawn from the runs' own files, for the first workload and condition (one per
# experiment): stem -> (CSV behind it, what it shows).
DETAIL_FIGURES = {
    "timeline": ("timeline.csv", "iteration timeline of the last measured iteration"),
    "jct-cdf": ("jct.csv", "CDF of job completion times"),
    "convergence": ("convergence.csv", "training loss against time and iteration"),
    "real-vs-sim-timeline": (
        "real-vs-sim-timeline.csv",
        "iteration timeline of a real run beside its twin's",
    ),
    "real-vs-sim-phases": (
        "real-vs-sim-phases.csv",
        "a real run beside its twin, phase by phase",
    ),
}
FILES = frozenset(
    {"data.csv", SPEEDUP_CSV}
    | {f"{stem(m)}.{fmt}" for stem in STEMS for m in METRICS for fmt in FORMATS}
    | {f"{stem}.{fmt}" for stem in DETAIL_FIGURES for fmt in FORMATS}
    | {csv for csv, _ in DETAIL_FIGURES.values()}
    | {realsim.CSV}
    | {f"{realsim.STEM}.{fmt}" for fmt in FORMATS}
)


def available(experiment: Experiment, stem=figure_stem) -> dict[str, Path]:
    """The metrics that have a figure on disk (the comparison, or the figure `stem` names),
    with the path of its PNG."""
    directory = figure_dir(experiment)
    pngs = {metric: directory / f"{stem(metric)}.png" for metric in METRICS}
    return {metric: png for metric, png in pngs.items() if png.exists()}


def tidy_frame(experiment: Experiment) -> pd.DataFrame:
    """Long-form table of every measurement of the experiment's succeeded runs, with the
    condition each run had: the cluster (workers, bandwidth) and, for runs with one, the load
    (jobs per hour). A frame without any load has just COLUMNS (no empty load column)."""
    runs = Run.objects.filter(experiment=experiment, state=Run.SUCCEEDED)
    conditions = {pk: condition_of(spec) for pk, spec in runs.values_list("id", "spec")}
    rows = Measurement.objects.filter(run__experiment=experiment, run__state=Run.SUCCEEDED)
    values = rows.values_list(
        "run_id", "run__system", "run__workload", "run__seed", "metric", "value", "unit"
    )
    records = [
        (run, system, role, workload or TRACE, *(conditions[run].get(c) for c in CONDITION_KEYS))
        + (seed, *rest)
        for run, system, workload, seed, *rest in values
        for role in ["system" if system == experiment.system else "baseline"]
    ]
    return _without_empty_load(pd.DataFrame(records, columns=TIDY_COLUMNS))


def with_conditions(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a column for every condition (CONDITION_KEYS), None where it had none."""
    missing = [k for k in CONDITION_KEYS if k not in frame.columns]
    return frame.assign(**dict.fromkeys(missing)) if missing else frame


def _without_empty_load(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without its load column when no row has a load (the communication arenas)."""
    if LOAD in frame.columns and frame[LOAD].isna().all():
        return frame.drop(columns=LOAD)
    return frame


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
    hatch_bars(ax)
    ax.set_xlabel("workload")
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.legend(title=None, frameon=False, fontsize="small")
    _caption(fig, data, ["system", "workload"], "bars", "error bars", "bar")
    return fig


def hatch_bars(ax) -> None:
    """One hatch per series of bars, so bars stay apart in grayscale."""
    for container, hatch in zip(ax.containers, HATCHES, strict=False):
        for bar in getattr(container, "patches", container):
            bar.set_hatch(hatch)


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
    width = max(6.4, 3.2 * len(workloads) + 0.8)  # one panel: as wide as the bar charts
    fig = Figure(figsize=(width, 2.8 * len(rows) + 0.6), layout="constrained")
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


CELL_KEYS = ["workload", *CONDITION_KEYS]
SPEEDUP_COLUMNS = [
    "system",
    "baseline",
    *CELL_KEYS,
    "metric",
    "speedup",
    "ci_low",
    "ci_high",
    "n",
    "n_system",
    "n_baseline",
]


def by_cell(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the order of their workload's first appearance, then by swept condition (every
    condition column is there, see `with_conditions`)."""
    frame = with_conditions(frame)
    first = {w: i for i, w in enumerate(dict.fromkeys(frame["workload"]))}
    keys = ["_order", *CONDITION_KEYS]
    ordered = frame.assign(_order=frame["workload"].map(first)).sort_values(keys, kind="stable")
    return ordered.drop(columns="_order")


def speedup_frame(frame: pd.DataFrame, system: str, baselines: list[str]) -> pd.DataFrame:
    """Per metric, workload and cluster condition, the speedup of `system` over each baseline:
    the ratio of the means over seeds (baseline/system for a time, system/baseline for a
    throughput, so > 1 always means the system is better) with the bootstrap CI of
    `stats.compare`, which resamples each side's seeds independently. n is the smaller of
    the two sides' seed counts. Cells where either side has no value are left out."""
    rows = []
    for metric in METRICS:
        data = by_cell(frame[frame["metric"] == metric])
        for cell, group in data.groupby(CELL_KEYS, sort=False, dropna=False):
            values = {name: g["value"].to_numpy() for name, g in group.groupby("system")}
            if system not in values:
                continue
            for baseline in baselines:
                if baseline not in values:
                    continue
                mine, theirs = values[system], values[baseline]
                c = stats.compare(mine, theirs, lower_is_better=LOWER_IS_BETTER[metric])
                n = min(mine.size, theirs.size)
                rows.append(
                    (system, baseline, *cell, metric, c.ratio, c.ratio_ci_low, c.ratio_ci_high)
                    + (n, mine.size, theirs.size)
                )
    speedups = _without_empty_load(pd.DataFrame(rows, columns=SPEEDUP_COLUMNS))
    finite = speedups["speedup"].abs() < float("inf")  # a zero time has no speedup
    return speedups[finite].reset_index(drop=True)


def speedup_plot_data(speedups: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, dict]:
    """The rows of one metric shaped for `plots.speedup_plot`, and its kwargs. With one
    workload and condition the bars are the baselines; otherwise the groups are what varies
    (the workload, the swept condition, or a "condition" label of all of them) and there is
    one bar per baseline, named "<system> vs <baseline>"."""
    rows = speedups[speedups["metric"] == metric]
    if rows.empty:
        return rows, {}
    system = rows["system"].iloc[0]
    varying = [k for k in CELL_KEYS if k in rows and rows[k].nunique(dropna=False) > 1]
    spread = f"{stats.DEFAULT_RESAMPLES:,} resamples of each side's seeds, seed 0"
    low, high = int(rows["n"].min()), int(rows["n"].max())
    n = f"n={low}" if low == high else f"n={low}-{high}"
    over = ", ".join(dict.fromkeys(rows["baseline"]))
    caption = (
        f"bars: speedup of {system} over {over}: ratio of mean {plots.label(metric)} over "
        f"seeds (> 1: {system} better); error bars: 95% CI, percentile bootstrap ({spread}); "
        f"{n} seeds per side"
    )
    if not varying:
        return rows, {"x": "baseline", "caption": caption}
    if len(varying) == 1:
        x = varying[0]
    else:
        x = "condition"
        rows = rows.assign(
            condition=[condition_text({k: r[k] for k in varying}) for _, r in rows.iterrows()]
        )
    return rows.assign(system=system + " vs " + rows["baseline"]), {"x": x, "caption": caption}


def plot_speedup(speedups: pd.DataFrame, metric: str) -> Figure | None:
    """The speedup figure of one metric for the experiment page, or None without data."""
    data, kwargs = speedup_plot_data(speedups, metric)
    if data.empty:
        return None
    with matplotlib.rc_context({"figure.figsize": (6.4, 3.6)}):
        return plots.speedup_plot(data, **kwargs)


def swept(experiment: Experiment) -> list[str]:
    """The conditions the experiment sweeps, bandwidth first (the usual x axis); a
    cluster-arena experiment sweeps its load (jobs per hour)."""
    order = ("bandwidth_gbps", "workers", LOAD)
    return [c for c in order if len(experiment.sweep.get(c, [])) > 1]


def save(fig: Figure, directory: Path, stem: str) -> list[Path]:
    """Write the figure in every format; each file appears atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context({"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}):
        for fmt in FORMATS:
            target = directory / f"{stem}.{fmt}"
            atomic_write(target, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=150))
            paths.append(target)
    return paths


def atomic_write(target: Path, write) -> None:
    """``write(tmp)`` into a temporary file beside ``target``, then move it into place."""
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
        atomic_write(csv_path, lambda tmp: frame.to_csv(tmp, index=False))
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
        paths += _render_speedups(experiment, frame, directory)
        paths += _render_details(experiment, directory)
        paths += realsim.render(experiment, directory)
        atomic_write(directory / FINGERPRINT, lambda tmp: Path(tmp).write_text(fingerprint))
    return paths


def _render_speedups(experiment: Experiment, frame: pd.DataFrame, directory: Path) -> list[Path]:
    """The speedup figures and the CSV behind them; those without data any more are removed."""
    speedups = speedup_frame(frame, experiment.system, experiment.baselines)
    paths: list[Path] = []
    for metric in METRICS:
        figure = plot_speedup(speedups, metric)
        if figure is None:
            for fmt in FORMATS:
                (directory / f"{speedup_stem(metric)}.{fmt}").unlink(missing_ok=True)
            continue
        paths += save(figure, directory, speedup_stem(metric))
    csv_path = directory / SPEEDUP_CSV
    if speedups.empty:
        csv_path.unlink(missing_ok=True)
    else:
        atomic_write(csv_path, lambda tmp: speedups.to_csv(tmp, index=False))
        paths.append(csv_path)
    return paths


# --- figures from the runs' own files ----------------------------------------------------------


def first_cell_runs(experiment: Experiment) -> list[Run]:
    """The succeeded runs of the experiment's first workload and cluster condition that has a
    run of the system under test, entries in the experiment's order, every seed."""
    succeeded = experiment.runs.filter(state=Run.SUCCEEDED).prefetch_related("artifacts")
    runs = list(succeeded.order_by("seed", "id"))
    workloads = {w: i for i, w in enumerate(experiment.workloads)}

    def cell(run: Run) -> tuple:
        condition = condition_of(run.spec)
        return (workloads.get(run.workload, len(workloads)), run.workload) + tuple(
            (condition.get(k) is None, condition.get(k) or 0) for k in CONDITION_KEYS
        )

    mine = sorted(cell(r) for r in runs if r.system == experiment.system)
    if not mine:
        return []
    first = mine[0]
    order = {name: i for i, name in enumerate(experiment.entries)}
    chosen = [r for r in runs if cell(r) == first and r.system in order]
    return sorted(chosen, key=lambda r: (order[r.system], r.seed, r.pk))


def _artifact(run: Run, kind: str) -> Path | None:
    """The file of the run's artifact of ``kind`` (artifacts prefetched by
    ``first_cell_runs``), if it is there."""
    found = next((a.path for a in run.artifacts.all() if a.kind == kind), None)
    path = Path(settings.RESULTS_DIR) / found if found else None
    return path if path is not None and path.is_file() else None


def _op_kind(op: str) -> str:
    if op in ("forward", "backward"):
        return "compute"
    return "aggregation" if op == "aggregate" else "communication"


def timeline_frame(runs: list[Run]) -> pd.DataFrame:
    """Per entry (its lowest seed), the operations of its last measured iteration from the
    run's timeline.csv, on a time axis that starts at the iteration's first operation: columns
    panel (the system), resource, kind (compute, communication, aggregation), op, layer,
    start_s, end_s."""
    frames = []
    for run in _lowest_seeds(runs):
        path = _artifact(run, "timeline")
        if path is None:
            continue
        frame = _last_iteration(pd.read_csv(path), run.spec, run.system)
        if not frame.empty:
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _last_iteration(ops: pd.DataFrame, spec: dict, panel: str) -> pd.DataFrame:
    """The operations (a timeline's rows) of ``spec``'s last measured iteration as
    ``timeline_frame`` draws them, in panel ``panel``; empty when it has none."""
    last = int(spec.get("warmup_iterations", 0)) + int(spec.get("iterations", 0)) - 1
    ops = ops[ops["iteration"] == last]
    if ops.empty:
        return pd.DataFrame()
    t0 = ops["start_s"].min()
    ranks = ops["resource"].map(_resource_rank)
    ops = ops.iloc[sorted(range(len(ops)), key=ranks.iat.__getitem__)]
    return pd.DataFrame(
        {
            "panel": panel,
            "resource": ops["resource"],
            "kind": ops["op"].map(_op_kind),
            "op": ops["op"],
            "layer": ops["layer"],
            "start_s": ops["start_s"] - t0,
            "end_s": ops["end_s"] - t0,
        }
    )


def twin_frames(runs: list[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A real run of the system under test (the first of ``runs``, whose timeline it has)
    beside its twin (``runners.twin``), from one simulation of the twin: the last measured
    iteration of each, panels "<system>, real" and "<system>, simulated"; and the two
    timelines phase by phase (``twin.phases``). Both empty for a simulated run, one without
    a timeline or one without a twin."""
    from runners import twin

    none = (pd.DataFrame(), pd.DataFrame())
    if not runs or runs[0].spec.get("mode") != "real":
        return none
    run = runs[0]
    path = _artifact(run, "timeline")
    if path is None:
        return none
    try:
        prediction = twin.predict(
            run.spec, rundir.read_summary(run.run_dir), settings.TWIN_CALIBRATION
        )
    except twin.NoTwin:  # its reason is on the page
        return none
    except Exception:  # realsim notes it on the page; the other figures go on
        log.exception("run %s: its twin's timeline failed", run.pk)
        return none
    timeline = pd.read_csv(path)
    real = _last_iteration(timeline, run.spec, f"{run.system}, real")
    columns = list(twin.Prediction.TIMELINE_COLUMNS)
    ops = pd.DataFrame(list(prediction.timeline), columns=columns)
    sim = _last_iteration(ops, run.spec, f"{run.system}, simulated ({prediction.label})")
    if real.empty or sim.empty:
        return none
    try:
        rows = timeline[columns].itertuples(index=False)
        phases = pd.DataFrame(twin.phases(rows, prediction.timeline))
    except (KeyError, TypeError, ValueError):  # a timeline the phases cannot read
        log.exception("run %s: its phases beside its twin's failed", run.pk)
        phases = pd.DataFrame()
    return pd.concat([real, sim], ignore_index=True), phases


_RESOURCE_ORDER = ("compute", "network", "uplink", "downlink", "ps")


def _resource_rank(resource: str) -> tuple:
    """The workers' lanes first, worker (group) by worker: compute, then its network (the PS
    arena's ``compute[w1]``, ``uplink[w1]``, ...); then each server (in, cpu, out) in order."""
    head = next((i for i, p in enumerate(_RESOURCE_ORDER) if resource.startswith(p)), 99)
    if head == _RESOURCE_ORDER.index("ps"):
        number = re.search(r"\d+", resource)
        part = {"in": 0, "cpu": 1, "out": 2}.get(resource.rsplit(".", 1)[-1], 0)
        return (1, int(number.group()) if number else 0, part, resource)
    group = re.search(r"\[w(\d+)", resource)
    return (0, int(group[1]) if group else 0, head, resource)


def jct_frame(runs: list[Run]) -> pd.DataFrame:
    """Job completion times of every admitted, finished job of the runs' jobs.csv: columns
    system, seed, job, jct_s."""
    frames = []
    for run in runs:
        path = _artifact(run, "jobs")
        if path is None:
            continue
        jobs = pd.read_csv(path)
        if "admitted" in jobs.columns:
            jobs = jobs[jobs["admitted"].astype(str).isin(["True", "true", "1", "1.0"])]
        jobs = jobs[jobs["jct_s"].notna()]
        frames.append(
            pd.DataFrame(
                {"system": run.system, "seed": run.seed, "job": jobs["job"], "jct_s": jobs["jct_s"]}
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def convergence_frame(runs: list[Run]) -> pd.DataFrame:
    """The loss per iteration of every run whose series carries one (real training runs):
    columns system, seed, iteration, time_s (``time_s`` of the series, else the iteration's
    ``start_s``), loss. Simulated runs have no loss and give nothing."""
    rows = []
    for run in runs:
        path = _artifact(run, "series")
        if path is None:
            continue
        lines = path.read_text().splitlines()
        for point in (json.loads(line) for line in lines if line.strip()):
            loss = point.get("loss")
            if isinstance(loss, (int, float)) and not point.get("warmup", False):
                time_s = point.get("time_s", point.get("start_s"))
                rows.append((run.system, run.seed, point.get("iteration"), time_s, float(loss)))
    return pd.DataFrame(rows, columns=["system", "seed", "iteration", "time_s", "loss"])


def detail_figures(experiment: Experiment) -> list[tuple[str, str, pd.DataFrame, dict]]:
    """(stem, plot kind of `plots.PLOTS`, data, kwargs) of the timeline, JCT CDF and
    convergence figures the experiment's first workload and condition have data for; the
    page draws them and the paper bundle exports them."""
    runs = first_cell_runs(experiment)
    if not runs:
        return []
    cell = condition_text({"workload": runs[0].workload, **condition_of(runs[0].spec)})
    where = f" ({cell})" if cell else ""
    out = []
    timeline = timeline_frame(runs)
    if not timeline.empty:
        shown = set(timeline["panel"])
        seeds = ", ".join(
            f"{r.system} seed {r.seed}" for r in _lowest_seeds(runs) if r.system in shown
        )
        without = [r.system for r in _lowest_seeds(runs) if r.system not in shown]
        caption = (
            f"one bar per operation [start, end) in the last measured iteration{where}, one run "
            f"per system ({seeds})"
        )
        if without:  # e.g. PyTorch's DDP, the real Horovod: their operations are not recorded
            caption += f"; no operations recorded by {', '.join(without)}"
        if (timeline["end_s"] == timeline["start_s"]).any():  # the pipelined PS transport's
            caption += f"; {plots.INSTANT}"
        real = runs[0].spec.get("mode") == "real"
        kwargs = {
            "caption": caption,
            "xlabel": ("measured" if real else "simulated")
            + " time since the iteration's first operation (s)",
        }
        out.append(("timeline", "timeline_gantt", timeline, kwargs))
    jct = jct_frame(runs)
    if not jct.empty:
        spread = jct["jct_s"].max() / max(jct["jct_s"].min(), 1e-9)
        out.append(("jct-cdf", "jct_cdf", jct, {"log_x": bool(spread >= 100)}))
    curves = convergence_frame(runs)
    if not curves.empty:
        out.append(("convergence", "convergence_plot", curves, {}))
    twins, phases = twin_frames(runs)
    if not twins.empty:
        kwargs = {
            "caption": f"one bar per operation [start, end) in the last measured iteration"
            f"{where}: {runs[0].system} seed {runs[0].seed} for real (its ranks' clocks) and "
            "its twin (python -m runners twin)",
            "xlabel": "time since the iteration's first operation (s)",
        }
        out.append(("real-vs-sim-timeline", "timeline_gantt", twins, kwargs))
    if not phases.empty:
        used = phases["iterations"].iat[0]
        caption = (
            f"{runs[0].system} seed {runs[0].seed}{where}, medians over {used} of "
            "the run's timeline and its twin's (python -m runners twin --phases); busy: per "
            "worker or server; waits: within the compute's span; ends: after the iteration's "
            "first forward op"
        )
        out.append(("real-vs-sim-phases", "phases_plot", phases, {"caption": caption}))
    return out


def _render_details(experiment: Experiment, directory: Path) -> list[Path]:
    """The detail figures (`detail_figures`) and the CSV behind each; those without data any
    more are removed."""
    drawn = {stem: (kind, data, kwargs) for stem, kind, data, kwargs in detail_figures(experiment)}
    paths: list[Path] = []
    for stem, (csv_name, _) in DETAIL_FIGURES.items():
        if stem not in drawn:
            for name in (csv_name, *(f"{stem}.{fmt}" for fmt in FORMATS)):
                (directory / name).unlink(missing_ok=True)
            continue
        kind, data, kwargs = drawn[stem]
        figure = plots.PLOTS[kind](data, **kwargs)
        atomic_write(directory / csv_name, lambda tmp, d=data: d.to_csv(tmp, index=False))
        paths.append(directory / csv_name)
        paths += save(figure, directory, stem)
    return paths


def _lowest_seeds(runs: list[Run]) -> list[Run]:
    seen: dict[str, Run] = {}
    for run in runs:
        seen.setdefault(run.system, run)
    return list(seen.values())


def available_details(experiment: Experiment) -> dict[str, Path]:
    """The run-detail figures on disk (timeline, JCT CDF, convergence), with their PNG."""
    directory = figure_dir(experiment)
    pngs = {stem: directory / f"{stem}.png" for stem in DETAIL_FIGURES}
    return {stem: png for stem, png in pngs.items() if png.exists()}
