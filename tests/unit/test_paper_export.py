"""Paper export: venue sizes, TrueType fonts, booktabs tables, atomic saves, and artifact
bundles whose regenerate.py redraws every figure from the CSVs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import matplotlib as mpl
import pandas as pd
import pytest
from matplotlib.figure import Figure

from lab.reports import bundle, paper
from lab.reports.bundle import DirtyTreeError, FigureSpec
from tests.unit.test_plots import speedups, timeline

needs_pdffonts = pytest.mark.skipif(shutil.which("pdffonts") is None, reason="no poppler-utils")


def small_figure() -> Figure:
    fig = Figure(layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [1, 0], label="a_b")
    ax.set_xlabel("bandwidth (Gbit/s)")
    return fig


def media_box_width_pt(pdf: Path) -> float:
    box = re.search(rb"/MediaBox \[ 0 0 ([\d.]+) ([\d.]+) \]", pdf.read_bytes())
    return float(box.group(1))


@pytest.mark.parametrize(
    ("venue", "width_in"),
    [("ieee-1col", 3.5), ("ieee-2col", 7.16), ("acm-1col", 3.33), ("acm-2col", 7.0)],
)
def test_each_venue_gives_its_figure_width_on_screen_and_in_the_pdf(venue, width_in, tmp_path):
    with paper.paper_style(venue):
        fig = small_figure()
        assert mpl.rcParams["font.size"] == 8 and mpl.rcParams["pdf.fonttype"] == 42
        (pdf,) = paper.save_figure(fig, tmp_path / "f", formats=("pdf",))
    assert fig.get_size_inches()[0] == pytest.approx(width_in)
    assert media_box_width_pt(pdf) == pytest.approx(72 * width_in)  # no tight-bbox cropping


def test_columns_override_the_width_and_keep_the_height():
    with paper.paper_style("ieee-1col", columns=2):
        assert tuple(Figure().get_size_inches()) == pytest.approx((7.16, 2.625))
    with pytest.raises(ValueError, match="1 or 2 columns"), paper.paper_style("ieee-1col", 3):
        pass


def test_an_unknown_venue_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="ieee-1col"), paper.paper_style("nature"):
        pass


def test_the_style_is_restored_after_the_block():
    before = dict(mpl.rcParams)
    with paper.paper_style("acm-1col"):
        pass
    assert dict(mpl.rcParams) == before


def test_series_styles_differ_in_every_cue_and_wrap():
    assert len({(s.color, s.hatch, s.marker, str(s.linestyle)) for s in paper.STYLES}) == 8
    for cue in ("color", "hatch", "marker", "linestyle"):
        assert len({str(getattr(s, cue)) for s in paper.STYLES}) == 8
    assert paper.series_style(9) == paper.series_style(1)


@needs_pdffonts
def test_a_saved_pdf_embeds_only_truetype_fonts(tmp_path):
    with paper.paper_style("ieee-1col"):
        (pdf,) = paper.save_figure(small_figure(), tmp_path / "f", formats=("pdf",))
    fonts = paper.pdf_font_types(pdf)
    assert fonts and all("TrueType" in kind and embedded for _, kind, embedded in fonts)
    assert any("DejaVuSerif" in name for name, _, _ in fonts)


@needs_pdffonts
def test_the_font_check_sees_type_3_fonts(tmp_path):
    with mpl.rc_context({"pdf.fonttype": 3}):  # matplotlib's default, which venues reject
        small_figure().savefig(tmp_path / "t3.pdf")
    assert {kind for _, kind, _ in paper.pdf_font_types(tmp_path / "t3.pdf")} == {"Type 3"}


PDFFONTS = """\
name                                 type              encoding         emb sub uni object ID
------------------------------------ ----------------- ---------------- --- --- --- ---------
ABCDEF+DejaVuSerif                   CID TrueType      Identity-H       yes yes yes     17  0
DejaVuSans                           Type 3            Custom           no  no  no      9  0
"""


def test_pdffonts_output_is_parsed_by_its_column_rule():
    output = PDFFONTS
    assert paper.parse_pdffonts(output) == [
        ("ABCDEF+DejaVuSerif", "CID TrueType", True),
        ("DejaVuSans", "Type 3", False),
    ]


def test_the_font_check_says_what_to_install_without_pdffonts(monkeypatch, tmp_path):
    monkeypatch.setattr(paper.shutil, "which", lambda _: None)
    with pytest.raises(RuntimeError, match="poppler-utils"):
        paper.pdf_font_types(tmp_path / "f.pdf")


def test_save_figure_writes_every_format(tmp_path):
    paths = paper.save_figure(small_figure(), tmp_path / "out" / "fig.v2")
    assert [p.name for p in paths] == ["fig.v2.pdf", "fig.v2.svg", "fig.v2.png"]
    assert paths[0].read_bytes()[:5] == b"%PDF-" and paths[2].read_bytes()[:4] == b"\x89PNG"
    assert paths[0].stat().st_mode & 0o044 == 0o044  # readable like any file, not mkstemp's 0600
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)


def test_save_figure_leaves_nothing_when_drawing_fails(tmp_path, monkeypatch):
    fig = small_figure()
    real = fig.savefig

    def fail_on_svg(fname, *, format, **kwargs):
        if format == "svg":
            raise RuntimeError("disk full")
        real(fname, format=format, **kwargs)

    monkeypatch.setattr(fig, "savefig", fail_on_svg)
    (tmp_path / "f.png").write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        paper.save_figure(fig, tmp_path / "f")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]  # no pdf, no temp files
    assert (tmp_path / "f.png").read_bytes() == b"old"


def results() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "system": ["byte_scheduler", "wfbp", "p3 & co"],
            "iteration_time_s": [1.234, 1.5, 1.236],
            "iteration_time_s_ci": [0.02, 0.05, 0.03],
            "throughput": [90.0, 70.0, 95.5],
        }
    )


def table(**overrides) -> str:
    arguments = {
        "metrics": ["iteration_time_s", "throughput"],
        "lower_is_better": {"iteration_time_s": True, "throughput": False},
        "caption": "Iteration time and throughput (95% CI)",
        "label": "tab:main",
        "precision": 2,
        "ci": {"iteration_time_s": "iteration_time_s_ci"},
        "note": "mean over n=5 seeds; ± bootstrap 95% CI half-width",
    }
    return paper.latex_table(results(), **{**arguments, **overrides})


def test_the_latex_table_uses_booktabs_rules_in_order():
    text = table()
    rules = [text.index(r) for r in (r"\toprule", r"\midrule", r"\bottomrule")]
    assert rules == sorted(rules)
    assert r"\begin{tabular}{lrr}" in text and r"\label{tab:main}" in text
    assert r"\hline" not in text


def test_the_latex_table_bolds_the_min_or_the_max_as_printed():
    rows = table().split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    byte, wfbp, p3 = rows
    # 1.234 and 1.236 both print as 1.23: the reader sees a tie, so both are bold
    assert r"\textbf{1.23} $\pm$ 0.02" in byte and r"\textbf{1.24}" not in p3
    assert r"\textbf{" not in wfbp
    assert r"\textbf{95.50}" in p3 and r"\textbf{90.00}" not in byte


def test_the_latex_table_bolds_the_max_when_higher_is_better():
    text = table(lower_is_better={"iteration_time_s": False, "throughput": False})
    assert r"\textbf{1.50} $\pm$ 0.05" in text


def test_the_latex_table_escapes_text_and_states_the_direction():
    text = table()
    assert r"byte\_scheduler" in text and r"p3 \& co" in text
    assert r"iteration\_time\_s $\downarrow$" in text and r"throughput $\uparrow$" in text
    assert r"(95\% CI)" in text  # the caption is text too: an unescaped % would comment out
    assert r"{\footnotesize mean over n=5 seeds" in text
    assert paper.latex_escape("a_b%c&d#e") == r"a\_b\%c\&d\#e"


def test_the_latex_table_names_a_missing_metric():
    with pytest.raises(ValueError, match="latency_s"):
        table(metrics=["latency_s"], lower_is_better={"latency_s": True})


# --- bundles ---------------------------------------------------------------------------------


def specs() -> list[FigureSpec]:
    return [
        FigureSpec("speedup", "speedup_plot", speedups(), {}, "ieee-1col"),
        FigureSpec("timeline", "timeline_gantt", timeline(), {"caption": ""}, "acm-2col"),
    ]


MANIFESTS = {"run-1": {"git": {"commit": "abc123", "dirty": False}, "seed": 0}}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "paper.zip"
    return bundle.write_bundle(out, specs(), MANIFESTS, dirty=True, note="typo fix in README only")


def test_the_bundle_holds_data_figures_manifests_and_the_script(built):
    names = zipfile.ZipFile(built).namelist()
    assert names == sorted(names)
    assert set(names) == {
        "README.txt",
        "data/speedup.csv",
        "data/timeline.csv",
        "figlib/__init__.py",
        "figlib/paper.py",
        "figlib/plots.py",
        "figures.json",
        *(f"figures/{n}.{fmt}" for n in ("speedup", "timeline") for fmt in ("pdf", "svg", "png")),
        "manifests/run-1.json",
        "regenerate.py",
        "requirements.txt",
    }
    archive = zipfile.ZipFile(built)
    assert json.loads(archive.read("manifests/run-1.json")) == MANIFESTS["run-1"]
    index = json.loads(archive.read("figures.json"))
    assert [(f["name"], f["kind"], f["venue"], f["csv"]) for f in index["figures"]] == [
        ("speedup", "speedup_plot", "ieee-1col", "data/speedup.csv"),
        ("timeline", "timeline_gantt", "acm-2col", "data/timeline.csv"),
    ]
    assert index["figures"][1]["kwargs"] == {"caption": ""}
    assert "matplotlib==" in archive.read("requirements.txt").decode()


def test_the_bundle_carries_the_csv_behind_each_figure(built, tmp_path):
    with zipfile.ZipFile(built) as archive:
        frame = pd.read_csv(archive.open("data/speedup.csv"))
    pd.testing.assert_frame_equal(frame, speedups())


def test_a_dirty_tree_without_a_note_is_refused_and_nothing_is_written(tmp_path):
    out = tmp_path / "paper.zip"
    with pytest.raises(DirtyTreeError, match="commit"):
        bundle.write_bundle(out, specs(), MANIFESTS, dirty=True, note="  ")
    assert list(tmp_path.iterdir()) == []


def test_the_note_is_recorded_in_the_readme_and_the_index(built):
    archive = zipfile.ZipFile(built)
    readme = archive.read("README.txt").decode()
    assert "DIRTY" in readme and "Note: typo fix in README only" in readme
    assert "python regenerate.py speedup" in readme
    index = json.loads(archive.read("figures.json"))
    assert index["dirty"] is True and index["note"] == "typo fix in README only"


def test_a_failing_figure_leaves_no_bundle_behind(tmp_path):
    out = tmp_path / "paper.zip"
    out.write_bytes(b"previous bundle")
    broken = FigureSpec("cdf", "jct_cdf", speedups())  # no jct_s column
    with pytest.raises(ValueError, match="jct_s"):
        bundle.write_bundle(out, [*specs(), broken], {}, dirty=False)
    assert list(tmp_path.iterdir()) == [out] and out.read_bytes() == b"previous bundle"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (FigureSpec("a", "pie_chart", speedups()), "unknown kind"),
        (FigureSpec("../a", "speedup_plot", speedups()), "not a file name"),
        (FigureSpec("a", "speedup_plot", speedups(), venue="nature"), "unknown venue"),
        (FigureSpec("a", "speedup_plot", speedups(), {"x": {1, 2}}), "JSON"),
    ],
)
def test_a_spec_that_would_break_the_bundle_is_refused_before_drawing(spec, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        bundle.write_bundle(tmp_path / "b.zip", [spec], {}, dirty=False)
    assert not (tmp_path / "b.zip").exists()


def test_regenerate_redraws_every_figure_from_the_csvs_alone(built, tmp_path):
    zipfile.ZipFile(built).extractall(tmp_path)
    original = {p.name: p.read_bytes() for p in (tmp_path / "figures").iterdir()}
    shutil.rmtree(tmp_path / "figures")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "regenerate.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    redrawn = {p.name: p.read_bytes() for p in (tmp_path / "figures").iterdir()}
    assert sorted(redrawn) == sorted(original)
    for name in redrawn:  # same code, same CSV, same library versions: the same bytes
        assert redrawn[name] == original[name], name


def test_the_same_inputs_give_the_same_zip(built, tmp_path):
    again = bundle.write_bundle(
        tmp_path / "again.zip", specs(), MANIFESTS, dirty=True, note="typo fix in README only"
    )
    assert again.read_bytes() == built.read_bytes()
