"""Paper-ready figures and tables: venue presets, one rcParams context, atomic saving,
booktabs LaTeX tables and a check of the fonts a PDF embeds.

Pure: no Django, no database. `lab/reports/plots.py` draws the figures; this module only
styles and writes them. Bundles copy this file verbatim (see `lab/reports/bundle.py`), so it
imports nothing from the project.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib as mpl
import pandas as pd
from cycler import cycler
from matplotlib.figure import Figure


@dataclass(frozen=True)
class Venue:
    """Page geometry and type of one template. `columns` is what a figure spans by default:
    1 = one column (`figure`), 2 = the whole text width (`figure*`)."""

    column_width_in: float
    text_width_in: float
    columns: int
    font_size_pt: float = 8.0
    font: str = "DejaVu Serif"
    aspect: float = 0.75  # height / width_in

    @property
    def width_in(self) -> float:
        return self._width(self.columns)

    def size_in(self, columns: int | None = None) -> tuple[float, float]:
        """(width, height) in inches; `columns` changes the width and keeps the height."""
        width = self.width_in if columns is None else self._width(columns)
        return width, round(self.width_in * self.aspect, 3)

    def _width(self, columns: int) -> float:
        if columns not in (1, 2):
            raise ValueError(f"a figure spans 1 or 2 columns, not {columns}")
        return self.column_width_in if columns == 1 else self.text_width_in


# IEEE: one column 3.5 in, two columns 7.16 in (IEEE Author Center, "Preparing figures";
# IEEEtran letter-paper conference layout gives the same widths).
# ACM acmart sigconf: letter paper, inner = outer = 54 pt, columnsep = 2pc (acmart.cls geometry
# for sigconf), so \textwidth = 8.5 in - 108 pt = 506.3 pt = 7.0 in and \columnwidth =
# (506.3 - 24) / 2 pt = 241.1 pt = 3.33 in. Confirm yours with \the\columnwidth.
# Figure text is 8 pt: inside IEEE's 8-10 pt guidance for figure text and the size of the
# captions (\footnotesize at a 10 pt body), so a figure placed at 100% reads like its caption.
# DejaVu Serif ships with matplotlib, so the TrueType font is there to embed on every machine
# (Times would silently fall back to a sans font where it is not installed).
# Aspect: SciencePlots' 3.5 x 2.625 in (0.75) for one column; across the page 0.35, about the
# same height (2.5 in) with room for panels side by side.
VENUES: dict[str, Venue] = {
    "ieee-1col": Venue(column_width_in=3.5, text_width_in=7.16, columns=1, aspect=0.75),
    "ieee-2col": Venue(column_width_in=3.5, text_width_in=7.16, columns=2, aspect=0.35),
    "acm-1col": Venue(column_width_in=3.33, text_width_in=7.0, columns=1, aspect=0.75),
    "acm-2col": Venue(column_width_in=3.33, text_width_in=7.0, columns=2, aspect=0.35),
}

# Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision
# deficiency. Yellow and black last: yellow is weak on white paper and black hides a hatch.
PALETTE = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
HATCHES = ("", "//", "\\\\", "xx", "..", "++", "--", "oo")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 3)))


@dataclass(frozen=True)
class SeriesStyle:
    """Everything that tells one series from another; colour is never the only cue, so a
    figure printed in grayscale still separates its series."""

    color: str
    hatch: str
    marker: str
    linestyle: str | tuple[int, tuple[int, ...]]


STYLES = tuple(map(SeriesStyle, PALETTE, HATCHES, MARKERS, LINESTYLES))


def series_style(i: int) -> SeriesStyle:
    """The style of the i-th series (wraps after len(STYLES))."""
    return STYLES[i % len(STYLES)]


# TrueType (Type 42) fonts, never Type 3: IEEE PDF eXpress and ScholarOne reject or flag Type 3.
# SVG text becomes paths: the SVG looks the same without DejaVu Serif installed (the PDF is the
# vector file for LaTeX; the SVG is for slides and the web). A fixed hash salt and no dates keep
# the files byte-identical from one run to the next.
EMBED = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "path", "svg.hashsalt": "paper"}
METADATA = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}
FORMATS = ("pdf", "svg", "png")


def style_params(venue: Venue, columns: int | None = None) -> dict[str, Any]:
    """The rcParams of `paper_style` (a plain dict, so it can be inspected and tested)."""
    size = venue.font_size_pt
    return {
        **EMBED,
        "figure.figsize": venue.size_in(columns),
        "figure.dpi": 100,
        "savefig.dpi": 300,
        "savefig.bbox": None,  # keep the venue width: "tight" would crop it and LaTeX rescale
        "text.usetex": False,  # workers have no TeX
        "font.family": "serif",
        "font.serif": [venue.font],
        "mathtext.fontset": "dejavuserif",
        "font.size": size,
        "axes.titlesize": size,
        "axes.labelsize": size,
        "figure.titlesize": size,
        "figure.labelsize": size,
        "legend.fontsize": size - 1,
        "legend.title_fontsize": size - 1,
        "xtick.labelsize": size - 1,
        "ytick.labelsize": size - 1,
        "legend.frameon": False,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.linewidth": 0.6,
        "axes.prop_cycle": cycler(color=PALETTE, linestyle=LINESTYLES),
        "lines.linewidth": 1.0,
        "lines.markersize": 3.5,
        "patch.linewidth": 0.5,
        "hatch.linewidth": 0.5,
        "errorbar.capsize": 2.0,
        "xtick.major.width": 0.6,
        "ytick.major.width": 0.6,
        "xtick.major.size": 3.0,
        "ytick.major.size": 3.0,
        "grid.linewidth": 0.4,
    }


def venue_preset(name: str) -> Venue:
    """The preset called `name`; ValueError naming the known ones otherwise."""
    try:
        return VENUES[name]
    except KeyError:
        raise ValueError(f"unknown venue {name!r}; known: {', '.join(VENUES)}") from None


@contextlib.contextmanager
def paper_style(venue: str, columns: int | None = None) -> Iterator[Venue]:
    """Draw and save figures for `venue` (a key of VENUES) inside this block. `columns`
    overrides the span of the preset (1 or 2). Figures read the figure size and fonts when
    they are created, so create them inside the block."""
    preset = venue_preset(venue)
    with mpl.rc_context(style_params(preset, columns)):
        yield preset


def save_figure(
    fig: Figure, stem: Path, formats: Sequence[str] = FORMATS, dpi: int = 300
) -> list[Path]:
    """Write `stem.<fmt>` for every format, all or nothing: each file is drawn to a temporary
    file beside its target and the targets are only replaced once every format has been drawn.
    Fonts are embedded as TrueType whatever the caller's rcParams."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    targets = [stem.with_name(f"{stem.name}.{fmt}") for fmt in formats]
    temps: list[Path] = []
    try:
        with mpl.rc_context(EMBED):
            for fmt, target in zip(formats, targets, strict=True):
                temps.append(temp_beside(target))
                fig.savefig(temps[-1], format=fmt, dpi=dpi, metadata=METADATA.get(fmt))
        for temp, target in zip(temps, targets, strict=True):
            os.replace(temp, target)
    except BaseException:
        for temp in temps:
            temp.unlink(missing_ok=True)
        raise
    return targets


def temp_beside(target: Path) -> Path:
    """An empty temporary file in the target's directory (so os.replace is atomic), readable
    by all like an ordinary file rather than mkstemp's owner-only 0600."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.fchmod(fd, 0o644)
    os.close(fd)
    return Path(name)


def render_from_csv(
    plot: Callable[..., Figure],
    csv: Path,
    stem: Path,
    venue: str,
    kwargs: Mapping[str, Any],
) -> list[Path]:
    """Draw one figure from the CSV behind it under the venue's style and save it. Bundles and
    their regenerate.py both go through here, so the two draw the same figure."""
    data = pd.read_csv(csv)  # pandas 3 reads back exactly the floats to_csv wrote
    with paper_style(venue):
        return save_figure(plot(data, **kwargs), stem)


# --- tables ----------------------------------------------------------------------------------

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_LATEX_RE = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIAL))


def latex_escape(text: object) -> str:
    """Plain text -> LaTeX that prints it as written (one pass, so nothing is escaped twice)."""
    return _LATEX_RE.sub(lambda m: _LATEX_SPECIAL[m.group()], str(text))


def latex_table(
    df: pd.DataFrame,
    *,
    metrics: Sequence[str],
    lower_is_better: Mapping[str, bool],
    caption: str,
    label: str,
    precision: int = 2,
    ci: Mapping[str, str] | None = None,
    note: str = "",
) -> str:
    """A booktabs table (needs \\usepackage{booktabs}): one row per row of `df`, the other
    columns first as escaped text, then each metric right-aligned with `precision` decimals.
    The best value of each metric (min where `lower_is_better[m]`, else max, compared as
    printed so ties are all bold) is in \\textbf{}. `ci` maps a metric to the column holding
    its CI half-width, printed as "value $\\pm$ half-width". `note` (the method and n) goes
    under the rule in small type. Caption and note are plain text and are escaped."""
    ci = dict(ci or {})
    missing = [c for c in [*metrics, *ci.values()] if c not in df.columns]
    missing += [f"lower_is_better[{m!r}]" for m in metrics if m not in lower_is_better]
    if missing:
        raise ValueError(f"latex_table: missing {', '.join(missing)}")
    text = [c for c in df.columns if c not in metrics and c not in ci.values()]
    best = {m: _best(df[m], lower_is_better[m], precision) for m in metrics}
    arrows = {True: r"$\downarrow$", False: r"$\uparrow$"}
    header = [latex_escape(c) for c in text]
    header += [f"{latex_escape(m)} {arrows[bool(lower_is_better[m])]}" for m in metrics]
    rows = [
        [latex_escape(row[c]) for c in text]
        + [_cell(row[m], row[ci[m]] if m in ci else None, best[m], precision) for m in metrics]
        for _, row in df.iterrows()
    ]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\label{{{label}}}",
        rf"\begin{{tabular}}{{{'l' * len(text)}{'r' * len(metrics)}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *(" & ".join(cells) + r" \\" for cells in rows),
        r"\bottomrule",
        r"\end{tabular}",
    ]
    if note:
        lines.append(rf"\par\smallskip{{\footnotesize {latex_escape(note)}\par}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _best(values: pd.Series, lower: bool, precision: int) -> float:
    printed = values.dropna().astype(float).round(precision)
    if printed.empty:
        return math.nan
    return float(printed.min() if lower else printed.max())


def _cell(value: float, half_width: float | None, best: float, precision: int) -> str:
    if pd.isna(value):
        return "--"
    number = _number(value, precision)
    if round(float(value), precision) == best:
        number = rf"\textbf{{{number}}}"
    if half_width is None or pd.isna(half_width):
        return number
    return rf"{number} $\pm$ {_number(half_width, precision)}"


def _number(value: float, precision: int) -> str:
    text = f"{float(value):.{precision}f}"
    return f"$-${text[1:]}" if text.startswith("-") else text


# --- font check ------------------------------------------------------------------------------


def pdf_font_types(path: Path) -> list[tuple[str, str, bool]]:
    """(font name, font type, embedded) for every font of a PDF, read with poppler's
    `pdffonts`. A figure is ready for IEEE/ACM when no type is "Type 3" and all are embedded."""
    exe = shutil.which("pdffonts")
    if exe is None:
        raise RuntimeError("pdffonts not found: install poppler-utils to check a PDF's fonts")
    done = subprocess.run([exe, str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pdffonts {path} failed: {done.stderr.strip()}")
    return parse_pdffonts(done.stdout)


def parse_pdffonts(output: str) -> list[tuple[str, str, bool]]:
    """Parse `pdffonts` output: the dashed rule under the header gives the column spans
    (names and types may contain spaces, so splitting on blanks would not do)."""
    lines = output.splitlines()
    rule = next((i for i, line in enumerate(lines) if line.startswith("---")), None)
    if rule is None:
        return []
    spans = [m.span() for m in re.finditer(r"-+", lines[rule])]
    fonts = []
    for line in lines[rule + 1 :]:
        if line.strip():
            name, kind, _encoding, emb, *_ = (line[a:b].strip() for a, b in _widen(spans))
            fonts.append((name, kind, emb == "yes"))
    return fonts


def _widen(spans: list[tuple[int, int]]) -> list[tuple[int, int | None]]:
    """Each column runs to the start of the next one (the last to the end of the line)."""
    starts = [a for a, _ in spans]
    return [(a, b) for a, b in zip(starts, [*starts[1:], None], strict=True)]
