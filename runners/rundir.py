"""The run-directory contract.

A run directory is written under a temporary sibling name and renamed into place only when
complete, so a half-written run never looks finished:

    manifest.json   resolved spec, code version + dirty flag, packages, host/CPU/GPU, seeds
    summary.json    {"metrics": {...}, "units": {...}, "artifacts": [...]}
    metrics.jsonl   one JSON object per step (per iteration / per job)
    log.txt         what the runner did
    <artifacts>     e.g. timeline.csv (which op ran on which resource when)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
LOG = "log.txt"


class OutputExists(FileExistsError):
    pass


@contextlib.contextmanager
def staging(out: Path) -> Iterator[Path]:
    """Yield a temporary directory beside ``out``; rename it to ``out`` on success, delete it
    on any error (nothing half-written is left behind)."""
    out = Path(out)
    if out.exists():
        raise OutputExists(f"--out: {out} already exists (choose a new directory)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any]:
    """Load and sanity-check a finished run's summary (used by the portal's ingest)."""
    data = json.loads((Path(run_dir) / SUMMARY).read_text())
    if not isinstance(data.get("metrics"), dict) or not isinstance(data.get("units"), dict):
        raise ValueError(f"{run_dir}/{SUMMARY}: 'metrics' and 'units' must be mappings")
    return data
