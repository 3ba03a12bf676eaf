"""Ingest a finished run directory into Measurements and Artifacts (idempotent)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from lab.results.models import Artifact, Measurement
from runners import rundir


def ingest_run(run) -> int:
    """Store every metric of ``run``'s summary and register its artifacts; return #metrics."""
    run_dir = Path(run.run_dir)
    summary = rundir.read_summary(run_dir)
    units = summary["units"]
    for metric, value in summary["metrics"].items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"summary.json: metric '{metric}' is not a number ({value!r})")
        Measurement.objects.update_or_create(
            run=run, metric=metric, defaults={"value": float(value), "unit": units.get(metric, "")}
        )
    results_root = Path(settings.RESULTS_DIR).resolve()
    for item in summary.get("artifacts", []):
        path = (run_dir / item["path"]).resolve()
        if not path.is_relative_to(run_dir.resolve()) or not path.is_file():
            raise ValueError(f"summary.json: artifact '{item['path']}' is not a file of the run")
        Artifact.objects.update_or_create(
            run=run, kind=item["kind"], defaults={"path": str(path.relative_to(results_root))}
        )
    return len(summary["metrics"])
