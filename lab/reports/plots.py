"""Paper figures from tidy DataFrames: each function is pure (a DataFrame in, a Figure out, no
I/O) and prints the method and n under the figure. Draw them inside `paper.paper_style(...)`
and write them with `paper.save_figure`.

Error bars and bands are percentile-bootstrap 95% confidence intervals of the mean over seeds:
the method of seaborn's `errorbar=("ci", 95)` with its defaults (1000 resamples), vectorised
here with a fixed seed so a convergence curve of thousands of points draws in milliseconds and
every figure is reproducible. Series differ in colour, hatch, marker and line style
(`paper.STYLES`), so figures survive grayscale printing.

Bundles copy this file verbatim next to paper.py (the relative import below is what lets the
copy run without the project).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .paper import series_style

CI_LEVEL = 95
N_BOOT = 1000
CI_SEED = 0
CI_METHOD = f"{CI_LEVEL}% CI: percentile bootstrap of the mean ({N_BOOT} resamples, seed {CI_SEED})"
LABELS = {
    "baseline": "baseline",
    "bandwidth_gbps": "bandwidth (Gbit/s per worker)",
    "workers": "workers",
    "load": "offered load",
    "jct_s": "job completion time (s)",
    "iteration_time_s": "iteration time (s)",
    "throughput_samples_per_s": "throughput (samples/s)",
    "time_s": "wall-clock time (s)",
    "iteration": "iteration",
    "loss": "training loss",
    "speedup": "speedup over baseline (\u00d7)",
}
UNITS = {"s": "s", "ms": "ms", "gbps": "Gbit/s", "bytes": "bytes", "pct": "%"}
KINDS = ("compute", "communication")  # first in every timeline, so they keep their style


def label(column: str) -> str:
    """Axis label of a column: a known name, else the name with its unit suffix spelled out."""
    if column in LABELS:
        return LABELS[column]
    head, _, unit = column.rpartition("_")
    if head and unit in UNITS:
        return f"{head.replace('_', ' ')} ({UNITS[unit]})"
    return column.replace("_", " ")


def require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise ValueError naming every required column `df` lacks."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {', '.join(map(repr, missing))}")


def bootstrap_ci(values: Sequence[float] | pd.Series) -> tuple[float, float, float]:
    """(mean, low, high): percentile-bootstrap CI of the mean, NaNs dropped; a single value
    has a zero-width interval."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (np.nan, np.nan, np.nan)
    mean = float(v.mean())
    if v.size == 1:
        return (mean, mean, mean)
    rng = np.random.default_rng(CI_SEED)
    means = v[rng.integers(0, v.size, size=(N_BOOT, v.size))].mean(axis=1)
    low, high = np.percentile(means, [50 - CI_LEVEL / 2, 50 + CI_LEVEL / 2])
    return (mean, float(low), float(high))


def summarise(df: pd.DataFrame, keys: Sequence[str], value: str) -> pd.DataFrame:
    """One row per group of `keys` (in order of appearance): mean, ci_low, ci_high, n."""
    rows = [
        (*(key if isinstance(key, tuple) else (key,)), *bootstrap_ci(group), group.notna().sum())
        for key, group in df.groupby(list(keys), sort=False)[value]
    ]
    return pd.DataFrame(rows, columns=[*keys, "mean", "ci_low", "ci_high", "n"])


def _order(values: Iterable) -> list:
    return list(dict.fromkeys(values))


def _n(counts: pd.Series) -> str:
    low, high = int(counts.min()), int(counts.max())
    return f"n={low}" if low == high else f"n={low}-{high}"


def _caption(fig: Figure, caption: str | None, default: str) -> None:
    """The method and n under the figure (`caption=""` leaves it off); supxlabel, so the
    constrained layout keeps room for it."""
    text = default if caption is None else caption
    if text:
        fig.supxlabel(text, x=0.01, ha="left", fontsize="small", wrap=True)


def _legend(ax: Axes, **kwargs) -> None:
    ax.legend(title=None, frameon=False, **kwargs)


# --- speedup -------------------------------------------------------------------------------


def speedup_bars(df: pd.DataFrame, x: str = "baseline") -> pd.DataFrame:
    """Bars of a speedup plot: per (x, system) the mean speedup and its CI, bootstrapped over
    the rows (seeds) or taken from the ci_low/ci_high columns when the frame has them."""
    require(df, ["system", "baseline", "speedup", x], "speedup_plot")
    if "ci_low" not in df.columns and "ci_high" not in df.columns:
        return summarise(df, [x, "system"], "speedup")
    require(df, ["ci_low", "ci_high"], "speedup_plot (with given CIs)")
    if df.duplicated([x, "system"]).any():
        raise ValueError("speedup_plot: with ci_low/ci_high give one row per (x, system)")
    bars = df[[x, "system", "speedup", "ci_low", "ci_high"]].rename(columns={"speedup": "mean"})
    return bars.assign(n=df["n"] if "n" in df.columns else np.nan)


def speedup_plot(df: pd.DataFrame, *, x: str = "baseline", caption: str | None = None) -> Figure:
    """Speedup of each system over each baseline (columns system, baseline, speedup; per-seed
    rows, or one row per bar with ci_low/ci_high and optionally n): bars with CI error bars,
    one hatch per system, a dashed line at 1.0 (no speedup)."""
    bars = speedup_bars(df, x)
    groups, systems = _order(bars[x]), _order(bars["system"])
    width = 0.8 / len(systems)
    fig = Figure(layout="constrained")
    ax = fig.subplots()
    for j, system in enumerate(systems):
        style, rows = series_style(j), bars[bars["system"] == system]
        pos = [groups.index(g) + (j - (len(systems) - 1) / 2) * width for g in rows[x]]
        ax.bar(
            pos,
            rows["mean"],
            width,
            color=style.color,
            hatch=style.hatch,
            label=str(system),
            edgecolor="black",
        )
        spread = [rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]]
        ax.errorbar(pos, rows["mean"], yerr=spread, fmt="none", ecolor="black", elinewidth=0.6)
    ax.axhline(1.0, color="0.3", linestyle="--", linewidth=0.8, zorder=0)
    ax.set_xticks(range(len(groups)), [str(g) for g in groups])
    ax.set_xlabel(label(x))
    ax.set_ylabel(label("speedup"))
    if len(systems) > 1:
        _legend(ax)
    given = "ci_low" in df.columns
    spread = "error bars: CI as given" if given else f"error bars: {CI_METHOD}"
    n = _n(bars["n"]) + " seeds per bar" if bars["n"].notna().all() else "n not given"
    _caption(fig, caption, f"bars: mean speedup; {spread}; {n}")
    return fig


# --- sweep -----------------------------------------------------------------------------------


def sweep_plot(
    df: pd.DataFrame, x: str, metric: str, *, log_x: bool = False, caption: str | None = None
) -> Figure:
    """`metric` against a swept condition `x` (bandwidth, workers, load): one line per system
    with markers, mean over the rows (seeds) at each x with a CI band."""
    require(df, ["system", x, metric], "sweep_plot")
    points = summarise(df.sort_values(x, kind="stable"), ["system", x], metric)
    fig = Figure(layout="constrained")
    ax = fig.subplots()
    for j, system in enumerate(_order(df["system"])):
        _line_with_band(ax, points[points["system"] == system], x, j, str(system))
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(metric))
    _legend(ax)
    _caption(fig, caption, f"lines: mean; bands: {CI_METHOD}; {_n(points['n'])} per point")
    return fig


def _line_with_band(ax: Axes, rows: pd.DataFrame, x: str, i: int, name: str) -> None:
    style = series_style(i)
    ax.fill_between(
        rows[x], rows["ci_low"], rows["ci_high"], color=style.color, alpha=0.2, linewidth=0
    )
    ax.plot(
        rows[x],
        rows["mean"],
        color=style.color,
        linestyle=style.linestyle,
        marker=style.marker,
        markevery=_markevery(len(rows)),
        label=name,
    )


def _markevery(points: int) -> int:
    """A marker on every point of a short line, about 10 along a long one."""
    return max(1, points // 10)


# --- job completion time ---------------------------------------------------------------------


def jct_cdf(df: pd.DataFrame, *, log_x: bool = False, caption: str | None = None) -> Figure:
    """Empirical CDF of job completion time per system (columns system, jct_s), jobs of every
    seed pooled."""
    require(df, ["system", "jct_s"], "jct_cdf")
    fig = Figure(layout="constrained")
    ax = fig.subplots()
    for j, system in enumerate(_order(df["system"])):
        style = series_style(j)
        sns.ecdfplot(
            data=df[df["system"] == system],
            x="jct_s",
            ax=ax,
            color=style.color,
            linestyle=style.linestyle,
            marker=style.marker,
            markevery=0.1,
            label=str(system),
        )
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(label("jct_s"))
    ax.set_ylabel("fraction of jobs")
    _legend(ax, loc="lower right")
    pooled = f", pooled over {df['seed'].nunique()} seeds" if "seed" in df.columns else ""
    jobs = _n(df.groupby("system", sort=False)["jct_s"].count())
    _caption(fig, caption, f"empirical CDF; {jobs} jobs per system{pooled}")
    return fig


# --- iteration timeline ----------------------------------------------------------------------


def timeline_gantt(
    df: pd.DataFrame, *, caption: str | None = None, xlabel: str | None = None
) -> Figure:
    """An iteration timeline (columns resource, kind, start_s, end_s, optional label and
    panel): one row per resource, top to bottom in order of appearance, one bar per operation
    with a colour and hatch per kind (compute and communication first), a tick in its colour
    for an operation of no length (e.g. a message of the pipelined PS transport, whose
    arrival is one instant: ``INSTANT``, said in the caption); the kinds' legend
    above the axes. With a ``panel`` column (e.g. the system), one panel per value, stacked
    on a shared time axis, each as tall as its resources need."""
    require(df, ["resource", "kind", "start_s", "end_s"], "timeline_gantt")
    if (df["end_s"] < df["start_s"]).any():
        raise ValueError("timeline_gantt: an operation ends before it starts (end_s < start_s)")
    kinds = _kinds(df["kind"])
    panels = _order(df["panel"]) if "panel" in df.columns else [None]
    parts = [df if p is None else df[df["panel"] == p] for p in panels]
    heights = [max(1, len(_order(part["resource"]))) for part in parts]
    fig = Figure(layout="constrained")
    if len(panels) > 1:
        width, _ = fig.get_size_inches()
        fig.set_size_inches(width, 1.0 + 0.28 * sum(heights) + 0.35 * len(panels))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False, height_ratios=heights)[:, 0]
    labelled: set = set()  # each kind in the legend once, from the first panel that has it
    for ax, panel, part in zip(axes, panels, parts, strict=True):
        _gantt_panel(ax, part, kinds, labelled)
        if panel is not None:
            ax.set_title(str(panel), fontsize="small", loc="left")
    axes[-1].set_xlabel(xlabel or label("time_s"))
    fig.legend(loc="outside upper center", ncols=len(kinds), frameon=False)
    resources = sum(heights)
    default = f"one bar per operation [start, end); n={len(df)} operations"
    if caption is None and (df["end_s"] == df["start_s"]).any():
        default += f", {INSTANT}"
    _caption(fig, caption, f"{default} on {resources} resources")
    return fig


INSTANT = "a tick for an operation of no length"  # what timeline_gantt draws for one


def _gantt_panel(ax: Axes, df: pd.DataFrame, kinds: list, labelled: set) -> None:
    resources = _order(df["resource"])
    for j, kind in enumerate(kinds):
        style, ops = series_style(j), df[df["kind"] == kind]
        if ops.empty:
            continue
        legend = kind not in labelled
        labelled.add(kind)
        spans, instants = ops[ops["end_s"] > ops["start_s"]], ops[ops["end_s"] == ops["start_s"]]
        if not spans.empty:
            ax.barh(
                [resources.index(r) for r in spans["resource"]],
                spans["end_s"] - spans["start_s"],
                left=spans["start_s"],
                height=0.6,
                color=style.color,
                hatch=style.hatch,
                edgecolor="black",  # the hatch's colour; no outline, so short bars keep theirs
                linewidth=0,
                label=str(kind) if legend else "_nolegend_",
            )
        if not instants.empty:  # a bar of no width would not show
            ax.scatter(
                instants["start_s"],
                [resources.index(r) for r in instants["resource"]],
                marker="|",
                s=120,
                color=style.color,
                label=str(kind) if legend and spans.empty else "_nolegend_",
            )
    if "label" in df.columns:
        _bar_labels(ax, df, resources)
    ax.set_yticks(range(len(resources)), [str(r) for r in resources])
    ax.set_ylim(len(resources) - 0.5, -0.5)  # first resource on top


def _kinds(kinds: pd.Series) -> list:
    present = _order(kinds)
    return [k for k in KINDS if k in present] + [k for k in present if k not in KINDS]


def _bar_labels(ax: Axes, df: pd.DataFrame, resources: list) -> None:
    for op in df.itertuples(index=False):
        if isinstance(op.label, str) and op.label:
            ax.text(
                (op.start_s + op.end_s) / 2,
                resources.index(op.resource),
                op.label,
                ha="center",
                va="center",
                fontsize="x-small",
                clip_on=True,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8},
            )


# --- convergence -----------------------------------------------------------------------------


def convergence_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Per (system, iteration): the loss's mean and CI over seeds and the mean wall-clock time
    at which the seeds reached that iteration (seeds do not share time stamps, so the curves
    are aligned by iteration and placed at the mean time)."""
    require(df, ["system", "seed", "iteration", "time_s", "loss"], "convergence_plot")
    ordered = df.sort_values(["iteration"], kind="stable")
    curves = summarise(ordered, ["system", "iteration"], "loss")
    times = ordered.groupby(["system", "iteration"], sort=False)["time_s"].mean()
    return curves.join(times, on=["system", "iteration"])


def convergence_plot(
    df: pd.DataFrame, *, log_y: bool = False, caption: str | None = None
) -> Figure:
    """Loss against wall-clock time (left) and against iteration (right): per system the mean
    over seeds with a CI band; the panels share the loss axis."""
    curves = convergence_curves(df)
    fig = Figure(layout="constrained")
    by_time, by_iteration = fig.subplots(1, 2, sharey=True)
    for j, system in enumerate(_order(df["system"])):
        rows = curves[curves["system"] == system]
        for ax, x in ((by_time, "time_s"), (by_iteration, "iteration")):
            _line_with_band(ax, rows, x, j, str(system))
    for ax, x in ((by_time, "time_s"), (by_iteration, "iteration")):
        ax.set_xlabel(label(x))
        if log_y:
            ax.set_yscale("log")
    by_time.set_ylabel(label("loss"))
    _legend(by_iteration)
    seeds = _n(curves["n"])
    _caption(
        fig,
        caption,
        f"lines: mean over seeds ({seeds}); bands: {CI_METHOD}; "
        "time: mean over seeds at each iteration",
    )
    return fig


# --- real runs beside the simulator's prediction --------------------------------------------

SOURCES = ("real", "simulated")


def real_vs_sim_speedups(df: pd.DataFrame, system: str, baselines: Sequence[str]) -> pd.DataFrame:
    """Per panel and baseline, the speedup of ``system`` over it, real and simulated: the
    baseline's mean iteration time over the system's (> 1: the system is faster)."""
    rows = []
    for panel, group in df.groupby("panel", sort=False):
        means = group.groupby("system", sort=False)[list(SOURCES)].mean()
        if system not in means.index:
            continue
        for baseline in baselines:
            if baseline in means.index:
                ratio = means.loc[baseline] / means.loc[system]
                rows.append((panel, baseline, ratio["real"], ratio["simulated"]))
    return pd.DataFrame(rows, columns=["panel", "baseline", *SOURCES])


REAL_VS_SIM_COLUMNS = 4  # panels a row of ``real_vs_sim_plot``


def real_vs_sim_plot(
    df: pd.DataFrame,
    *,
    system: str,
    baselines: Sequence[str] = (),
    caption: str | None = None,
) -> Figure:
    """Real runs beside the simulator's prediction of each (columns panel, system, seed, real,
    simulated: iteration times in seconds, one row per run). Top, per panel: per system the
    real runs' mean with its CI beside their twins'; below, where the frame has ``system`` and
    a baseline, the system's speedup over each baseline, real beside simulated (ratios of the
    means)."""
    require(df, ["panel", "system", "seed", *SOURCES], "real_vs_sim_plot")
    panels = _order(df["panel"])
    speedups = real_vs_sim_speedups(df, system, baselines)
    rows = 2 if not speedups.empty else 1
    # at most ``REAL_VS_SIM_COLUMNS`` panels a row: a wide sweep wraps into blocks of rows
    columns = min(len(panels), REAL_VS_SIM_COLUMNS)
    blocks = -(-len(panels) // columns)
    fig = Figure(layout="constrained")
    width, height = fig.get_size_inches()
    fig.set_size_inches(max(width, 3.2 * columns), height * (1.0 if rows == 1 else 1.6) * blocks)
    grid = fig.subplots(rows * blocks, columns, squeeze=False)
    for k in range(len(panels), blocks * columns):  # the last block's empty places
        for r in range(rows):
            grid[(blocks - 1) * rows + r][k % columns].set_axis_off()
    for k, panel in enumerate(panels):
        b, c = divmod(k, columns)
        part = df[df["panel"] == panel]
        systems = _order(part["system"])
        ax = grid[b * rows][c]
        for j, source in enumerate(SOURCES):
            bars = summarise(part, ["system"], source).set_index("system").loc[systems]
            _paired_bars(
                ax, j, source, bars["mean"] * 1e3, bars["ci_low"] * 1e3, bars["ci_high"] * 1e3
            )
        ax.set_xticks(range(len(systems)), [str(s) for s in systems], rotation=30, ha="right")
        ax.set_title(str(panel), fontsize="small", loc="left")
        ax.set_ylabel("iteration time (ms)" if c == 0 else "")
        if rows == 2:
            ax = grid[b * rows + 1][c]
            part = speedups[speedups["panel"] == panel]
            if part.empty:
                ax.set_axis_off()
                continue
            for j, source in enumerate(SOURCES):
                _paired_bars(ax, j, source, part[source], None, None)
            ax.axhline(1.0, color="0.3", linestyle="--", linewidth=0.8, zorder=0)
            names = [str(b) for b in part["baseline"]]
            ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
            ax.set_xlabel(f"{system} over baseline")
            ax.set_ylabel(label("speedup") if c == 0 else "")
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=2, frameon=False)
    seeds = _n(df.groupby(["panel", "system"], sort=False)["seed"].nunique())
    _caption(
        fig,
        caption,
        f"bars: mean iteration time over seeds, real and each run's simulated twin; error bars: "
        f"{CI_METHOD}; speedups: ratios of the means; {seeds} seeds per bar",
    )
    return fig


def phases_plot(df: pd.DataFrame, *, caption: str | None = None) -> Figure:
    """A real run beside its twin, phase by phase (``runners.twin.phases``: columns phase,
    real_ms, twin_ms): left, how long each phase keeps its resource busy and the compute's
    waits; right, when each phase's last operation ends after the iteration's start, with the
    iteration's length. Horizontal bars, real and twin in ``SOURCES``' styles."""
    require(df, ["phase", "real_ms", "twin_ms"], "phases_plot")
    what = df["phase"].str.rpartition(": ")[2]  # busy, waits, ends; "iteration" itself
    left = df[what.isin(["busy", "waits"])]
    right = df[what.isin(["ends", "iteration"])]
    fig = Figure(layout="constrained")
    width, height = fig.get_size_inches()
    rows = max(len(left), len(right), 1)
    fig.set_size_inches(max(width, 9.0), max(height, 0.28 * rows + 1.4))
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for ax, part, title in (
        (axes[0], left, "busy (per worker or server) and waits"),
        (axes[1], right, "ends, after the iteration's start"),
    ):
        height_ = 0.4
        for j, (source, column) in enumerate(zip(SOURCES, ("real_ms", "twin_ms"), strict=True)):
            style = series_style(j)
            pos = [k + (j - 0.5) * height_ for k in range(len(part))]
            ax.barh(
                pos, list(part[column].fillna(0.0)), height_, color=style.color,
                hatch=style.hatch, label=source, edgecolor="black",
            )  # fmt: skip
        ax.set_yticks(range(len(part)), list(part["phase"]), fontsize="small")
        ax.invert_yaxis()  # in the table's order, top down
        ax.set_xlabel("ms")
        ax.set_title(title, fontsize="small", loc="left")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=2, frameon=False)
    _caption(
        fig, caption, "medians over the recorded iterations; real: the run's timeline, "
        "simulated: its twin's (python -m runners twin --phases)",
    )  # fmt: skip
    return fig


def _paired_bars(ax: Axes, j: int, name: str, means, low, high) -> None:
    """The j-th of two bars at each tick (``SOURCES``' style j), with CI error bars where
    ``low`` and ``high`` are given."""
    style, width = series_style(j), 0.4
    pos = [k + (j - 0.5) * width for k in range(len(means))]
    ax.bar(
        pos, list(means), width, color=style.color, hatch=style.hatch, label=name, edgecolor="black"
    )
    if low is not None:
        spread = [np.asarray(means) - np.asarray(low), np.asarray(high) - np.asarray(means)]
        ax.errorbar(pos, list(means), yerr=spread, fmt="none", ecolor="black", elinewidth=0.6)


# The figure kinds a bundle can name (figures.json "kind"): the function names themselves.
PLOTS: dict[str, Callable[..., Figure]] = {
    f.__name__: f
    for f in (
        speedup_plot, sweep_plot, jct_cdf, timeline_gantt, convergence_plot, real_vs_sim_plot,
        phases_plot,
    )
}  # fmt: skip
