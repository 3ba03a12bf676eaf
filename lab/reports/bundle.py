"""Artifact bundle of paper figures: one zip with the data, the figures, the run manifests and a
script that redraws every figure from the data with one command.

Layout of the zip:

    data/<name>.csv                 the tidy CSV behind each figure
    figures/<name>.{pdf,svg,png}    drawn under the figure's venue style (paper.paper_style)
    manifests/<run>.json            the reproducibility manifest of each run
    figures.json                    index: name, kind, kwargs, venue, csv, files; dirty, note
    figlib/{paper,plots}.py         verbatim copies of lab/reports/paper.py and plots.py
    regenerate.py                   python regenerate.py [NAME ...] [--out DIR]
    requirements.txt                the library versions the figures were drawn with
    README.txt                      what is inside, how to regenerate, the dirty-tree note
    <extra>                         extra text files the caller adds (e.g. table.tex)

regenerate.py is self-contained: rather than import the project (which would need a checkout
of the same commit on PYTHONPATH) or embed a second, hand-written copy of the plotting (which
would drift), the bundle carries the two modules the figures were drawn with, byte for byte.
Both the bundle's figures and regenerate.py go through `paper.render_from_csv`, and the
bundle's figures are drawn from the CSV as written, so with the versions in requirements.txt
the regenerated files are byte-identical to the ones in the zip (and the same inputs give the
same zip: fixed file times, no dates in the figures).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd

from . import paper, plots

BUNDLE_FORMAT = 1
LIBRARY = "figlib"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
REQUIREMENTS = ("matplotlib", "seaborn", "pandas", "numpy")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so the same inputs give the same zip
# Names at the top of a bundle that extra files may not take.
RESERVED = frozenset(
    {"README.txt", "figures.json", "regenerate.py", "requirements.txt", LIBRARY}
    | {"data", "figures", "manifests"}
)


class DirtyTreeError(RuntimeError):
    """The working tree has uncommitted changes and no note says why exporting is fine."""


@dataclass(frozen=True, eq=False)
class FigureSpec:
    """One figure of a bundle: `kind` names a function of plots.PLOTS, which draws `data` with
    `kwargs` (JSON values) under the style of `venue` (a key of paper.VENUES)."""

    name: str
    kind: str
    data: pd.DataFrame
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    venue: str = "ieee-1col"


def write_bundle(
    out_zip: Path,
    figures: list[FigureSpec],
    manifests: dict[str, dict],
    *,
    dirty: bool,
    note: str = "",
    extras: Mapping[str, str] | None = None,
    cautions: Sequence[str] = (),
) -> Path:
    """Write the bundle to `out_zip` atomically: it is built in a temporary file beside the
    target and moved into place at the end, so on any error `out_zip` is as it was. A dirty
    tree is refused unless `note` says why the export is fine; the note is recorded in
    README.txt and figures.json. `extras` maps file names to text written at the top of the
    bundle beside README.txt (a LaTeX table, say); they may not replace the bundle's own files.
    ``cautions`` are what a reader of the figures should know about the runs behind them (a
    real run measured beside other work), listed in README.txt and figures.json."""
    if dirty and not note.strip():
        raise DirtyTreeError(
            "the working tree has uncommitted changes: commit them and export again, or pass "
            "note='...' saying why these figures may be exported from a dirty tree"
        )
    extras = dict(extras or {})
    check(figures, manifests, extras)
    out_zip = Path(out_zip)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bundle-") as work:
        root = Path(work)
        _write_tree(
            root, figures, manifests, extras, dirty=dirty, note=note.strip(), cautions=cautions
        )
        temp = paper.temp_beside(out_zip)
        try:
            _zip(root, temp)
            os.replace(temp, out_zip)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    return out_zip


def check(
    figures: list[FigureSpec],
    manifests: Mapping[str, Mapping],
    extras: Mapping[str, str] | None = None,
) -> None:
    """Refuse what would make a broken bundle, before anything is drawn."""
    extras = extras or {}
    names = [f.name for f in figures]
    bad = [n for n in [*names, *manifests, *extras] if not NAME.match(n)]
    if bad:
        raise ValueError(f"not a file name (letters, digits, . _ -): {', '.join(map(repr, bad))}")
    taken = sorted(set(extras) & RESERVED)
    if taken:
        raise ValueError(f"extra file(s) would replace the bundle's own: {', '.join(taken)}")
    if len(set(names)) != len(names):
        raise ValueError("two figures share a name")
    for spec in figures:
        if spec.kind not in plots.PLOTS:
            raise ValueError(
                f"{spec.name}: unknown kind {spec.kind!r}; known: {', '.join(plots.PLOTS)}"
            )
        paper.venue_preset(spec.venue)
        try:
            json.dumps(dict(spec.kwargs))
        except TypeError as error:
            raise ValueError(f"{spec.name}: kwargs must be JSON values ({error})") from None


def _write_tree(
    root: Path,
    figures: list[FigureSpec],
    manifests: Mapping,
    extras: Mapping[str, str],
    *,
    dirty: bool,
    note: str,
    cautions: Sequence[str] = (),
) -> None:
    entries = [_figure(root, spec) for spec in figures]
    for name, text in extras.items():
        _write(root / name, text)
    for run, manifest in manifests.items():
        _write(root / "manifests" / f"{run}.json", _json(manifest))
    library = root / LIBRARY
    library.mkdir()
    (library / "__init__.py").write_text('"""Plotting code the figures were drawn with."""\n')
    for module in (paper, plots):
        shutil.copyfile(module.__file__, library / Path(module.__file__).name)
    _write(root / "regenerate.py", REGENERATE)
    _write(root / "requirements.txt", "".join(f"{p}=={version(p)}\n" for p in REQUIREMENTS))
    index = {
        "bundle_format": BUNDLE_FORMAT,
        "dirty": dirty,
        "note": note,
        "python": platform.python_version(),
        "error_bars": plots.CI_METHOD,
        "figures": entries,
        "manifests": [f"manifests/{run}.json" for run in manifests],
        "extras": sorted(extras),
        "cautions": list(cautions),
    }
    _write(root / "figures.json", _json(index))
    _write(root / "README.txt", readme(index))


def _figure(root: Path, spec: FigureSpec) -> dict[str, Any]:
    """Write the figure's CSV, then draw the figure from that CSV (not from the frame), so the
    figure in the bundle is exactly what regenerate.py draws."""
    csv = root / "data" / f"{spec.name}.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    spec.data.to_csv(csv, index=False)
    kwargs = dict(spec.kwargs)
    plot = plots.PLOTS[spec.kind]
    files = paper.render_from_csv(plot, csv, root / "figures" / spec.name, spec.venue, kwargs)
    return {
        "name": spec.name,
        "kind": spec.kind,
        "kwargs": kwargs,
        "venue": spec.venue,
        "csv": csv.relative_to(root).as_posix(),
        "files": [f.relative_to(root).as_posix() for f in files],
    }


def readme(index: Mapping[str, Any]) -> str:
    """README.txt of a bundle, from its figures.json index."""
    tree = "clean (every figure drawn from committed code)"
    if index["dirty"]:
        tree = "DIRTY: exported with uncommitted changes"
    figures = [
        f"  {f['name']}: {f['kind']} ({f['venue']}) from {f['csv']}\n"
        f"      python regenerate.py {f['name']}"
        for f in index["figures"]
    ]
    lines = [
        "Paper figures: artifact bundle",
        "",
        "Contents",
        "  data/<name>.csv               the tidy data behind each figure",
        "  figures/<name>.{pdf,svg,png}  the figures (PDF with TrueType fonts, SVG, PNG 300 dpi)",
        "  figures.json                  index: name, kind, kwargs, venue, csv, files",
        "  manifests/<run>.json          the reproducibility manifest of each run",
        f"  {LIBRARY}/                       the plotting code the figures were drawn with",
        "  regenerate.py                 rebuilds every figure from the CSVs",
        "  requirements.txt              the library versions the figures were drawn with",
        *(f"  {name:<29} added by the exporter" for name in index.get("extras", [])),
        "",
        "Regenerate (Python >= 3.11, nothing else from the project is needed)",
        "  python -m pip install -r requirements.txt",
        "  python regenerate.py            # all figures into figures/; --out DIR writes elsewhere",
        "With these library versions the figures come out byte-identical.",
        "",
        f"Error bars and bands: {index['error_bars']}.",
        "",
        "Figures",
        *figures,
        "",
        f"Working tree: {tree}",
    ]
    if index["note"]:
        lines.append(f"Note: {index['note']}")
    cautions = index.get("cautions") or []
    if cautions:
        lines += ["", "Cautions", *(f"  {c}" for c in cautions)]
    return "\n".join(lines) + "\n"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _zip(root: Path, target: Path) -> None:
    """Every file under root, in name order, with fixed times and modes (reproducible zip)."""
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        files = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
        for name, path in sorted(files.items()):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())


REGENERATE = '''\
"""Rebuild the figures of this bundle from their CSVs: python regenerate.py [NAME ...] [--out DIR]

Self-contained: the plotting code is figlib/ (a verbatim copy of the exporting project's
lab/reports/paper.py and plots.py); it needs only the packages in requirements.txt.
"""

import argparse
import json
from pathlib import Path

from figlib import paper, plots

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only these figures (default: every figure)")
    parser.add_argument("--out", type=Path, default=HERE / "figures", help="output folder")
    args = parser.parse_args()
    index = json.loads((HERE / "figures.json").read_text())
    unknown = set(args.names) - {entry["name"] for entry in index["figures"]}
    if unknown:
        parser.error(f"no such figure: {', '.join(sorted(unknown))}")
    for entry in index["figures"]:
        if args.names and entry["name"] not in args.names:
            continue
        plot = plots.PLOTS[entry["kind"]]
        csv, stem = HERE / entry["csv"], args.out / entry["name"]
        paths = paper.render_from_csv(plot, csv, stem, entry["venue"], entry["kwargs"])
        print(*(str(p) for p in paths))


if __name__ == "__main__":
    main()
'''
