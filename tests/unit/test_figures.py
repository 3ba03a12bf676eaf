"""Comparison figures: tidy data -> plot -> files (PNG, PDF with TrueType fonts, SVG)."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

from lab.reports import figures


def frame() -> pd.DataFrame:
    rows = [
        (
            i,
            system,
            "system" if system == "a" else "baseline",
            "resnet50",
            seed,
            "iteration_time_s",
            base + 0.01 * seed,
            "s",
        )
        for i, (system, base, seed) in enumerate(
            (s, b, k) for s, b in (("a", 1.0), ("b", 2.0)) for k in range(3)
        )
    ]
    return pd.DataFrame(rows, columns=figures.COLUMNS)


def test_the_plot_shows_one_bar_per_system_with_a_confidence_interval():
    fig = figures.plot_comparison(frame(), "iteration_time_s", ["a", "b"])
    ax = fig.axes[0]
    heights = sorted(round(p.get_height(), 3) for p in ax.patches if p.get_height() > 0)
    assert heights == [1.01, 2.01]  # the mean over the seeds
    assert len(ax.lines) >= 2  # error bars
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "95% CI" in caption and "n=3" in caption


def test_the_system_under_test_comes_first_whatever_the_alphabet():
    fig = figures.plot_comparison(frame(), "iteration_time_s", ["b", "a"])
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["b", "a"]


def test_save_writes_every_format_with_truetype_fonts_in_the_pdf(tmp_path):
    fig = figures.plot_comparison(frame(), "iteration_time_s", ["a", "b"])
    paths = figures.save(fig, tmp_path, "cmp")
    assert sorted(p.name for p in paths) == ["cmp.pdf", "cmp.png", "cmp.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pdf = (tmp_path / "cmp.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf
    if shutil.which("pdffonts"):
        out = subprocess.run(
            ["pdffonts", str(tmp_path / "cmp.pdf")], capture_output=True, text=True, check=True
        ).stdout
        assert "TrueType" in out and "Type 3" not in out
    assert not list(tmp_path.glob(".*")), "no temporary files are left behind"


@pytest.mark.django_db
def test_an_experiment_without_results_has_no_figures(user, config):
    from lab import actions

    experiment = actions.create_experiment(user, config)
    assert figures.render(experiment) == []
