"""Paper figures from tidy frames: each function draws what its data says, prints its method
and n, and names the column it is missing."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from lab.reports import plots
from lab.reports.paper import paper_style, series_style


def speedups() -> pd.DataFrame:
    rows = [
        (system, baseline, seed, base + 0.01 * seed)
        for system, offset in (("bytescheduler", 0.5), ("tictac", 0.2))
        for baseline, base in (("wfbp", 1.0 + offset), ("ps", 1.5 + offset), ("horovod", 0.9))
        for seed in range(3)
    ]
    return pd.DataFrame(rows, columns=["system", "baseline", "seed", "speedup"])


def sweep() -> pd.DataFrame:
    rows = [
        (system, bandwidth, seed, factor / bandwidth + 0.01 * seed)
        for system, factor in (("bytescheduler", 1.0), ("wfbp", 2.0))
        for bandwidth in (1.0, 10.0, 100.0)
        for seed in range(3)
    ]
    return pd.DataFrame(rows, columns=["system", "bandwidth_gbps", "seed", "iteration_time_s"])


def jobs() -> pd.DataFrame:
    rows = [
        (s, seed, 10.0 * (i + 1) * k)
        for k, s in ((1, "fifo"), (2, "srtf"))
        for seed in (0, 1)
        for i in range(5)
    ]
    return pd.DataFrame(rows, columns=["system", "seed", "jct_s"])


def timeline() -> pd.DataFrame:
    rows = [
        ("gpu0", "compute", 0.0, 1.0, "fwd"),
        ("nic0", "communication", 0.5, 1.5, "push"),
        ("gpu0", "compute", 1.0, 2.0, "bwd"),
        ("nic0", "idle", 1.5, 2.0, None),
    ]
    return pd.DataFrame(rows, columns=["resource", "kind", "start_s", "end_s", "label"])


def losses() -> pd.DataFrame:
    rows = [
        (system, seed, it, it * (0.1 + 0.01 * seed), 2.0 / (1 + it * rate) + 0.01 * seed)
        for system, rate in (("bytescheduler", 0.2), ("wfbp", 0.1))
        for seed in range(3)
        for it in range(0, 50, 5)
    ]
    return pd.DataFrame(rows, columns=["system", "seed", "iteration", "time_s", "loss"])


def bars(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def caption(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts)


def test_the_speedup_plot_draws_one_bar_per_system_and_baseline_at_the_mean():
    fig = plots.speedup_plot(speedups())
    ax = fig.axes[0]
    assert len(bars(ax)) == 6
    first = bars(ax)[0]  # bytescheduler over wfbp: 1.5, 1.51, 1.52
    assert first.get_height() == pytest.approx(1.51)
    assert first.get_hatch() in (None, "") and bars(ax)[3].get_hatch() == series_style(1).hatch
    assert [t.get_text() for t in ax.get_xticklabels()] == ["wfbp", "ps", "horovod"]
    assert legend(ax) == ["bytescheduler", "tictac"]
    assert ax.get_ylabel().startswith("speedup")
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in ax.lines)  # the no-speedup line
    assert "95% CI" in caption(fig) and "n=3 seeds per bar" in caption(fig)


def test_the_speedup_plot_uses_given_confidence_intervals_as_they_are():
    given = pd.DataFrame(
        {
            "system": ["a", "a"],
            "baseline": ["x", "y"],
            "speedup": [2.0, 3.0],
            "ci_low": [1.5, 2.9],
            "ci_high": [2.5, 3.1],
            "n": [5, 5],
        }
    )
    summary = plots.speedup_bars(given)
    assert summary[["mean", "ci_low", "ci_high"]].values.tolist() == [
        [2.0, 1.5, 2.5],
        [3.0, 2.9, 3.1],
    ]
    fig = plots.speedup_plot(given, caption="my method")
    assert len(bars(fig.axes[0])) == 2 and caption(fig) == "my method"
    with pytest.raises(ValueError, match="'ci_high'"):
        plots.speedup_plot(given.drop(columns="ci_high"))


def test_the_bootstrap_interval_is_reproducible_and_holds_the_mean():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    mean, low, high = plots.bootstrap_ci(values)
    assert (mean, low, high) == plots.bootstrap_ci(values)
    assert low < mean < high and mean == 4.0
    assert plots.bootstrap_ci([7.0]) == (7.0, 7.0, 7.0)


def test_the_sweep_plot_draws_one_line_per_system_with_markers_and_bands():
    fig = plots.sweep_plot(sweep(), "bandwidth_gbps", "iteration_time_s", log_x=True)
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and len(ax.collections) == 2  # lines and CI bands
    assert [line.get_marker() for line in ax.lines] == ["o", "s"]
    assert list(ax.lines[1].get_ydata()) == pytest.approx([2.01, 0.21, 0.03])
    assert legend(ax) == ["bytescheduler", "wfbp"]
    assert ax.get_xscale() == "log" and ax.get_xlabel().startswith("bandwidth")
    assert ax.get_ylabel() == "iteration time (s)"


def test_the_jct_cdf_has_one_step_curve_per_system_ending_at_one():
    fig = plots.jct_cdf(jobs(), log_x=True)
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and legend(ax) == ["fifo", "srtf"]
    assert all(line.get_ydata()[-1] == 1.0 for line in ax.lines)
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "job completion time (s)"
    assert "n=10 jobs per system, pooled over 2 seeds" in caption(fig)


def test_the_timeline_draws_a_bar_per_operation_on_its_resource_row():
    fig = plots.timeline_gantt(timeline())
    ax = fig.axes[0]
    assert len(bars(ax)) == 4
    assert [t.get_text() for t in ax.get_yticklabels()] == ["gpu0", "nic0"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "compute",
        "communication",
        "idle",
    ]
    assert sorted(t.get_text() for t in ax.texts) == ["bwd", "fwd", "push"]
    hatches = {b.get_hatch() or "" for b in bars(ax)}
    assert hatches == {series_style(i).hatch for i in range(3)}


def test_an_operation_of_no_length_is_a_tick_in_its_kind_s_colour():
    """The pipelined PS transport's messages arrive in one instant (start = end): a bar of
    no width would not show, so each is a tick on its row, and the caption says so; a kind
    with ticks only is in the legend by them."""
    rows = timeline()
    instants = pd.DataFrame(
        [("ps0.in", "communication", 0.7, 0.7, None), ("ps0.in", "aggregation", 0.9, 0.9, None)],
        columns=rows.columns,
    )
    fig = plots.timeline_gantt(pd.concat([rows, instants], ignore_index=True))
    ax = fig.axes[0]
    assert len(bars(ax)) == 4  # the spans only
    ticks = [c for c in ax.collections if len(c.get_offsets())]
    assert [list(map(tuple, c.get_offsets())) for c in ticks] == [[(0.7, 2.0)], [(0.9, 2.0)]]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["gpu0", "nic0", "ps0.in"]
    assert "aggregation" in [t.get_text() for t in fig.legends[0].get_texts()]
    assert plots.INSTANT in caption(fig)
    assert plots.INSTANT not in caption(plots.timeline_gantt(timeline()))


def test_the_timeline_refuses_an_operation_that_ends_before_it_starts():
    bad = timeline().assign(end_s=[1.0, 0.1, 2.0, 2.0])
    with pytest.raises(ValueError, match="end_s < start_s"):
        plots.timeline_gantt(bad)


def test_the_convergence_plot_shows_loss_by_time_and_by_iteration():
    fig = plots.convergence_plot(losses())
    by_time, by_iteration = fig.axes
    assert len(by_time.lines) == len(by_iteration.lines) == 2
    assert (
        by_time.get_xlabel() == "wall-clock time (s)" and by_iteration.get_xlabel() == "iteration"
    )
    assert by_time.get_ylabel() == "training loss" and legend(by_iteration) == [
        "bytescheduler",
        "wfbp",
    ]
    # x of the time panel: the mean over the seeds' times at each iteration
    assert by_time.lines[0].get_xdata()[1] == pytest.approx(5 * 0.11)
    assert "n=3" in caption(fig)


@pytest.mark.parametrize(
    ("draw", "frame", "column"),
    [
        (plots.speedup_plot, speedups(), "baseline"),
        (lambda df: plots.sweep_plot(df, "bandwidth_gbps", "iteration_time_s"), sweep(), "system"),
        (plots.jct_cdf, jobs(), "jct_s"),
        (plots.timeline_gantt, timeline(), "end_s"),
        (plots.convergence_plot, losses(), "seed"),
    ],
)
def test_a_missing_column_is_named_in_the_error(draw, frame, column):
    with pytest.raises(ValueError, match=f"'{column}'"):
        draw(frame.drop(columns=column))


def test_figures_take_their_size_from_the_paper_style():
    with paper_style("acm-2col"):
        fig = plots.jct_cdf(jobs())
    assert tuple(fig.get_size_inches()) == pytest.approx((7.0, 2.45))


def test_an_empty_caption_leaves_the_method_line_off():
    assert caption(plots.jct_cdf(jobs(), caption="")) == ""


def test_column_labels_spell_out_units():
    assert plots.label("jct_s") == "job completion time (s)"
    assert plots.label("queue_delay_ms") == "queue delay (ms)"
    assert plots.label("load") == "offered load"
