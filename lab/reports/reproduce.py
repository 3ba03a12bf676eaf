"""Run the claims ledger's experiments through the normal queue and store, and judge them.

Each claim becomes one experiment (system + baselines x workloads x sweep x seeds), created by
``actions.create_experiment`` exactly as the portal does: its runs are queued for the Celery
worker, run by the executor and ingested into the result store. ``wait`` follows them until
every run has ended; ``judge`` reads the measurements back and applies the ledger's verdict
rule. A claim that needs a mode other than the one asked for is ``not-run``, with the reason.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib.auth import get_user_model

from lab import actions
from lab.experiments.models import Experiment
from lab.reports.claims import Assessment, Claim, assess, not_run
from lab.results.models import Measurement
from lab.runs.models import Run, condition_of

BOT_USER = "claims-bot"


def bot_user() -> Any:
    """The owner of reproduction experiments: a user who cannot log in (unusable password)."""
    user, created = get_user_model().objects.get_or_create(username=BOT_USER)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def experiment_config(claim: Claim, mode: str) -> actions.ExperimentConfig:
    ex = claim.experiment
    return actions.ExperimentConfig(
        name=f"claim {claim.id} ({mode})",
        system=claim.system,
        baselines=tuple(claim.baselines),
        workloads=tuple(ex.get("workloads") or ()),
        seeds=tuple(ex["seeds"]),
        mode=mode,
        description=f"Reproduction of: {claim.claim} [{claim.paper}]",
        cluster=dict(ex.get("cluster") or {}),
        params=dict(ex.get("params") or {}),
        iterations=int(ex.get("iterations", 20)),
        sweep={k: list(v) for k, v in (ex.get("sweep") or {}).items()},
    )


def start(claim: Claim, mode: str, owner: Any | None = None) -> Experiment | None:
    """Queue the claim's experiment; None when the claim does not run in ``mode``."""
    if mode not in claim.modes:
        return None
    return actions.create_experiment(owner or bot_user(), experiment_config(claim, mode))


def wait(
    experiments: Iterable[Experiment],
    timeout_s: float,
    progress: Callable[[int, int], None] | None = None,
    poll_s: float = 1.0,
) -> bool:
    """Wait until every run of ``experiments`` has ended; False on timeout."""
    ids = [e.pk for e in experiments]
    runs = Run.objects.filter(experiment_id__in=ids)
    total = runs.count()
    deadline = time.monotonic() + timeout_s
    while True:
        done = runs.filter(state__in=Run.TERMINAL).count()
        if progress:
            progress(done, total)
        if done >= total:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


def _condition_label(run: Run) -> str:
    parts = [run.workload] if run.workload else []
    parts += [f"{k}={v}" for k, v in condition_of(run.spec).items() if v is not None]
    return ", ".join(parts) or "default"


def values_of(experiment: Experiment, metric: str) -> dict[str, dict[str, list[float]]]:
    """condition label -> system -> per-seed values of ``metric`` (succeeded runs only)."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rows = Measurement.objects.filter(
        run__experiment=experiment, run__state=Run.SUCCEEDED, metric=metric
    ).select_related("run")
    for m in rows.order_by("run__seed", "run__pk"):
        out[_condition_label(m.run)][m.run.system].append(m.value)
    return {k: dict(v) for k, v in out.items()}


def judge(claim: Claim, experiment: Experiment | None, mode: str) -> Assessment:
    if experiment is None:
        return not_run(claim, f"needs mode {' or '.join(claim.modes)}; this run is {mode}")
    runs = experiment.runs.all()
    failed = [r for r in runs if r.state != Run.SUCCEEDED]
    if failed:
        first = failed[0]
        return not_run(
            claim,
            f"{len(failed)} of {len(runs)} runs did not succeed (run {first.pk}: "
            f"{first.state} {first.error[:200]})",
        )
    values = values_of(experiment, claim.metric)
    if not values:
        return not_run(claim, f"no run reported the metric {claim.metric}")
    return assess(claim, values)
