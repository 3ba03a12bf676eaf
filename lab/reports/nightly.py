"""Claim checks and nightly reproducibility runs, from queueing to alerts.

A claim check (portal button, ``manage.py reproduce`` or a night) queues the claim's experiment
through the normal queue and stays *pending* until every run has ended; ``settle`` then judges
it with the ledger's verdict rule and draws the figure behind the number.

A night (``start_night``: beat's "nightly reproducibility" schedule, or "Run now") checks the
claims it was asked for and re-runs every experiment marked nightly. When all of them have
ended (or the night timed out), ``settle`` records one history point per tracked series (each
claim's measured value; the mean over seeds of each tracked metric of each nightly experiment
per system, workload and condition), runs the regression detector on each series' history
(``lab.reports.regression``; an ``ExpectedChange`` resets the baseline), opens alerts for
regressions and for claims whose verdict got worse, diffs the environment against the previous
night and sends the notification (e-mail and/or webhook).

``settle`` is idempotent and safe to run concurrently: the worker calls it when a run of a
pending experiment ends, and beat calls it periodically, so a worker restart loses nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import urllib.error
import urllib.request
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from statistics import fmean
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from lab import measuring
from lab.experiments.models import Experiment
from lab.reports import claims as ledger
from lab.reports import regression, reproduce
from lab.reports.models import Alert, ClaimCheck, ExpectedChange, HistoryPoint, NightlyRun
from lab.results.models import Measurement
from lab.runs.models import Run, condition_of, condition_text
from runners import manifest as run_manifest
from runners.real import others

log = logging.getLogger(__name__)

SCHEDULE_NAME = "nightly reproducibility"
TASK_NAME = "lab.reports.tasks.nightly"
TRACKED_METRICS = tuple(regression.DEFAULT_THRESHOLDS)  # the nightly experiments' metrics
VERDICT_RANK = {"reproduced": 3, "partial": 2, "not-reproduced": 1, "not-run": 0}
DEDUP_WINDOW = timedelta(minutes=10)  # a redelivered beat task does not start a second night


# --- claim checks -----------------------------------------------------------------------------


def claims_by_id() -> dict[str, ledger.Claim]:
    """The ledger's claims (``LAB_CLAIMS_LEDGER``, by default claims/ledger.yaml), read and
    validated again only when the file changed (the Claims page polls every 2 s)."""
    path = Path(settings.CLAIMS_LEDGER)
    try:
        stat = path.stat()
    except OSError:
        return {c.id: c for c in ledger.load_ledger(path)}  # raises LedgerError naming it
    return _read_ledger(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _read_ledger(path: str, mtime_ns: int, size: int) -> dict[str, ledger.Claim]:
    return {c.id: c for c in ledger.load_ledger(path)}


def start_check(
    claim: ledger.Claim, mode: str, user: Any = None, nightly: NightlyRun | None = None
) -> ClaimCheck:
    """Queue the claim's experiment (or record not-run at once when it needs another mode)."""
    with transaction.atomic():
        experiment = reproduce.start(claim, mode, owner=user)
        if experiment is not None and nightly is not None:
            experiment.name = f"nightly #{nightly.pk}: {experiment.name}"[:200]
            experiment.save(update_fields=["name"])
        check = ClaimCheck.objects.create(
            claim_id=claim.id,
            mode=mode,
            experiment=experiment,
            nightly=nightly,
            requested_by=user if getattr(user, "pk", None) else None,
            definition=claim.as_dict(),
        )
        if experiment is None:
            _record(check, claim, reproduce.judge(claim, None, mode), {})
    return check


def _finished(experiment: Experiment | None) -> bool:
    return experiment is None or not experiment.runs.filter(state__in=Run.ACTIVE).exists()


def claim_of(check: ClaimCheck) -> ledger.Claim:
    """The claim as it was when the check was queued."""
    return ledger.claim_from_dict(check.definition)


def judge_check(check: ClaimCheck) -> ClaimCheck:
    """Judge a check whose runs have all ended (idempotent: a judged check is left alone)."""
    claim = claim_of(check)
    assessment = reproduce.judge(claim, check.experiment, check.mode)
    per_condition: dict[str, dict[str, float]] = {}
    if check.experiment is not None and assessment.verdict != "not-run":
        values = reproduce.values_of(check.experiment, claim.metric)
        per_condition = {
            b: ledger.improvements_by_condition(claim, values, b) for b in claim.baselines
        }
    _record(check, claim, assessment, per_condition)
    if check.state == ClaimCheck.DONE and check.experiment is not None:
        try:
            draw_claim_figure(check, claim)
        except Exception:  # a figure must never block the verdict
            log.exception("claim figure of check %s could not be drawn", check.pk)
    return check


def _record(
    check: ClaimCheck,
    claim: ledger.Claim,
    assessment: ledger.Assessment,
    per_condition: dict[str, dict[str, float]],
) -> None:
    line = assessment.line(check.mode)
    if check.experiment is not None:  # real runs measured beside other work: said with it
        line.update(_beside(Run.objects.filter(experiment=check.experiment)))
    ClaimCheck.objects.filter(pk=check.pk, state=ClaimCheck.PENDING).update(
        state=ClaimCheck.DONE,
        verdict=assessment.verdict,
        measured=assessment.measured,
        line=line,
        per_condition={b: {k: round(v, 6) for k, v in d.items()} for b, d in per_condition.items()},
        judged_at=timezone.now(),
    )
    check.refresh_from_db()


def claim_figure_path(check: ClaimCheck) -> Path:
    return Path(settings.RESULTS_DIR) / "claims" / f"check-{check.pk}.png"


# How long after its verdict a check's missing figure is still drawn (by ``settle``) and
# awaited (the Claims page keeps polling): a worker that stopped between the verdict and the
# figure, or a slow first matplotlib import, then costs the figure nothing; a figure that
# cannot be drawn at all is not retried for ever.
FIGURE_GRACE = timedelta(minutes=10)
# ``settle`` leaves a check's figure to the worker that judged it for this long (it draws
# right after the verdict; its first matplotlib import can take tens of seconds), so that two
# workers do not draw one figure.
FIGURE_DRAWER_TIME = timedelta(seconds=90)


def figure_owed(check: ClaimCheck) -> bool:
    """Whether ``check`` was judged on runs with values to draw, recently (``FIGURE_GRACE``),
    and its figure is not on disk yet."""
    return (
        check.state == ClaimCheck.DONE
        and check.experiment_id is not None
        and any(check.per_condition.values())
        and check.judged_at is not None
        and timezone.now() - check.judged_at <= FIGURE_GRACE
        and not claim_figure_path(check).exists()
    )


def _draw_owed_figures() -> int:
    """Draw the figures of recent checks that were judged without one (``figure_owed``),
    once the worker that judged them had time to (``FIGURE_DRAWER_TIME``)."""
    drawn = 0
    now = timezone.now()
    for check in ClaimCheck.objects.filter(
        state=ClaimCheck.DONE,
        judged_at__gte=now - FIGURE_GRACE,
        judged_at__lte=now - FIGURE_DRAWER_TIME,
    ):
        if not figure_owed(check):
            continue
        try:
            drawn += draw_claim_figure(check, claim_of(check)) is not None
        except Exception:  # logged; tried again at the next settle within the grace
            log.exception("claim figure of check %s could not be drawn", check.pk)
    return drawn


SHORT_MEASURES = {
    "percent_faster": "% faster than",
    "percent_less": "% less than",
    "percent_more": "% more than",
    "ratio": "x (ratio) over",
}


def _short_condition(label: str) -> str:
    """reproduce's 'resnet50, workers=8, bandwidth_gbps=10.0' -> 'resnet50, 8 workers,
    10 Gbit/s' (``condition_text``)."""
    values: dict[str, Any] = {}
    for part in label.split(", "):
        key, _, value = part.partition("=")
        values.update({key: float(value)} if value else {"workload": part})
    return condition_text(values)


@measuring.drawing()  # a real run's launch here waits for it
def draw_claim_figure(check: ClaimCheck, claim: ledger.Claim) -> Path | None:
    """Bars: the claim's measure at each condition over each baseline; a dashed line: the
    claimed value. The figure behind the number on the Claims page."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd
    import seaborn as sns
    from matplotlib.figure import Figure

    from lab.reports import figures as experiment_figures

    rows = [
        (baseline, _short_condition(condition), value)
        for baseline, values in check.per_condition.items()
        for condition, value in values.items()
    ]
    if not rows:
        return None
    frame = pd.DataFrame(rows, columns=["baseline", "condition", "value"])
    order = [b for b in claim.baselines if b in set(frame["baseline"])]
    bars = frame["condition"].nunique() * len(order)
    fig = Figure(figsize=(6.4, 1.5 + 0.22 * bars), layout="constrained")
    ax = fig.subplots()
    sns.barplot(
        data=frame,
        y="condition",
        x="value",
        hue="baseline",
        hue_order=order,
        ax=ax,
        palette=sns.color_palette("colorblind", len(order)),
        edgecolor="black",
        linewidth=0.5,
        errorbar=None,
    )
    experiment_figures.hatch_bars(ax)
    for container in ax.containers:
        ax.bar_label(container, fmt="%.3g", fontsize="x-small", padding=2)
    reference = 1.0 if claim.measure == "ratio" else 0.0
    ax.axvline(reference, color="black", linewidth=0.8)
    ax.axvline(claim.claimed, color="black", linestyle="--", linewidth=1.2)
    low = min(reference, claim.claimed, float(frame["value"].min()))
    high = max(reference, claim.claimed, float(frame["value"].max()))
    pad = 0.12 * (high - low or 1.0)
    ax.set_xlim(low - (pad if low < reference else 0), high + pad)
    ax.text(claim.claimed, 1.0, f" claimed {claim.claimed:g}{claim.unit}",
            transform=ax.get_xaxis_transform(), va="bottom", fontsize="x-small")  # fmt: skip
    what = SHORT_MEASURES.get(claim.measure, claim.measure)
    direction = "lower" if claim.lower_is_better else "higher"
    ax.set_xlabel(f"{claim.system}: {what} the baseline, on {claim.metric} ({direction} is better)",
                  fontsize="small")  # fmt: skip
    ax.set_ylabel("")
    ax.tick_params(axis="y", labelsize="x-small")
    ax.legend(title=None, frameon=False, fontsize="x-small", ncol=len(order),
              loc="lower left", bbox_to_anchor=(0.0, 1.0))  # fmt: skip
    seeds = len((claim.experiment or {}).get("seeds") or [])
    caption = (
        f"Bars: the measure from the means over {seeds} seeds at each condition. Verdict "
        f"{check.verdict}: {check.line.get('method') or check.line.get('reason', '')}"
    )
    fig.text(0.01, 0.0, "\n".join(textwrap.wrap(caption, 120)), fontsize="xx-small",
             ha="left", va="bottom")  # fmt: skip
    fig.get_layout_engine().set(h_pad=0.2)
    path = claim_figure_path(check)
    path.parent.mkdir(parents=True, exist_ok=True)
    experiment_figures.atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=130))
    return path


def latest_checks(mode: str | None = None) -> dict[tuple[str, str], ClaimCheck]:
    """(claim id, mode) -> its latest judged check."""
    out: dict[tuple[str, str], ClaimCheck] = {}
    checks = ClaimCheck.objects.filter(state=ClaimCheck.DONE).select_related("experiment")
    if mode:
        checks = checks.filter(mode=mode)
    for check in checks.order_by("-judged_at", "-id"):
        out.setdefault((check.claim_id, check.mode), check)
    return out


# --- nights -----------------------------------------------------------------------------------


def start_night(
    mode: str = "sim", claims: list[str] | None = None, trigger: str = "beat", user: Any = None
) -> NightlyRun:
    """Queue tonight's suite: the named claims (all, when None) and every nightly experiment."""
    known = claims_by_id()
    wanted = list(known) if not claims else [c for c in claims if c in known]
    unknown = sorted(set(claims or ()) - set(known))
    if trigger == "beat":
        recent = NightlyRun.objects.filter(
            trigger="beat", started_at__gte=timezone.now() - DEDUP_WINDOW
        ).first()
        if recent is not None:
            log.info("night #%s started moments ago; not starting another", recent.pk)
            return recent
    running = NightlyRun.objects.filter(state=NightlyRun.RUNNING).first()
    with transaction.atomic():
        night = NightlyRun.objects.create(
            trigger=trigger, mode=mode, claims=wanted, manifest=environment()
        )
        if running is not None:
            night.state = NightlyRun.SKIPPED
            night.finished_at = timezone.now()
            night.note = f"night #{running.pk} is still running; this one was skipped"
            night.save()
            return night
        if unknown:
            night.note = f"not in the ledger, ignored: {', '.join(unknown)}"
            night.save(update_fields=["note"])
        owner = user or reproduce.bot_user()
        for claim_id in wanted:
            start_check(known[claim_id], mode, user=owner, nightly=night)
        from lab import actions

        for source in Experiment.objects.filter(nightly=True).order_by("pk"):
            copy = actions.rerun_experiment(source, source.owner)
            copy.name = f"nightly #{night.pk}: {source.name}"[:200]
            copy.save(update_fields=["name"])
            night.experiments.add(copy)
    return night


def environment() -> dict[str, Any]:
    """What a night ran on: code version, package versions, host and GPUs."""
    return {
        "code": run_manifest.code_version(),
        "packages": run_manifest.package_versions(),
        "host": run_manifest.host_info(),
        "gpus": run_manifest.gpu_info(),
    }


def manifest_diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The keys (dotted paths) whose values differ between two environments."""
    flat_before, flat_after = _flatten(before), _flatten(after)
    return [
        {"key": key, "before": flat_before.get(key), "after": flat_after.get(key)}
        for key in sorted(set(flat_before) | set(flat_after))
        if flat_before.get(key) != flat_after.get(key)
    ]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def settle(timeout: timedelta | None = None) -> dict[str, int]:
    """Judge every pending check whose runs ended; finish every night whose work ended (or
    that ran past ``timeout``: what did not end is judged not-run); draw the figures owed by
    recent checks (``figure_owed``: judged by a worker that stopped before drawing, or whose
    drawing failed)."""
    timeout = timeout or timedelta(hours=settings.NIGHTLY_TIMEOUT_H)
    judged = finished = 0
    for check in ClaimCheck.objects.filter(state=ClaimCheck.PENDING).select_related(
        "experiment", "nightly"
    ):
        late = check.nightly is not None and timezone.now() - check.nightly.started_at > timeout
        if _finished(check.experiment):
            judge_check(check)
            judged += 1
        elif late:
            claim = claim_of(check)
            reason = f"the runs did not end within {timeout}; night #{check.nightly_id}"
            _record(check, claim, ledger.not_run(claim, reason), {})
            judged += 1
    for night in NightlyRun.objects.filter(state=NightlyRun.RUNNING):
        late = timezone.now() - night.started_at > timeout
        ready = not night.checks.filter(state=ClaimCheck.PENDING).exists() and all(
            _finished(e) for e in night.experiments.all()
        )
        if (ready or late) and finish_night(night):
            finished += 1
    return {"judged": judged, "finished": finished, "figures": _draw_owed_figures()}


def finish_night(night: NightlyRun) -> bool:
    """Record the night's history, detect regressions, diff the environment and notify.
    Returns False when another worker finished it first."""
    with transaction.atomic():
        if not NightlyRun.objects.filter(pk=night.pk, state=NightlyRun.RUNNING).update(
            state=NightlyRun.DONE, finished_at=timezone.now()
        ):
            return False
        night.refresh_from_db()
        points = _record_points(night)
        alerts = [*_detect(night, points), *_verdict_alerts(night)]
        previous = (
            NightlyRun.objects.filter(state=NightlyRun.DONE, started_at__lt=night.started_at)
            .exclude(pk=night.pk)
            .first()
        )
        drift = manifest_diff(previous.manifest, night.manifest) if previous else []
        verdicts = {c.claim_id: c.verdict for c in night.checks.all()}
        night.summary = {
            "verdicts": verdicts,
            "counts": {v: sum(x == v for x in verdicts.values()) for v in ledger.VERDICTS},
            "points": len(points),
            "alerts": [a.pk for a in alerts],
            "drift": drift,
            "previous": previous.pk if previous else None,
        }
        night.save(update_fields=["summary"])
    transaction.on_commit(lambda: notify(night.pk))
    return True


def _record_points(night: NightlyRun) -> list[HistoryPoint]:
    points = []
    for check in night.checks.filter(state=ClaimCheck.DONE):
        if check.measured is None:
            continue
        claim = claim_of(check)
        points.append(
            HistoryPoint(
                nightly=night,
                series=f"claim:{check.claim_id}:{check.mode}",
                label=f"claim {check.claim_id} ({check.mode})",
                metric=claim.measure,
                value=check.measured,
                unit=claim.unit,
                finding=_beside(Run.objects.filter(experiment=check.experiment)),
            )
        )
    for experiment in night.experiments.select_related("rerun_of"):
        points += _experiment_points(night, experiment)
    HistoryPoint.objects.bulk_create(points, ignore_conflicts=True)
    return list(night.points.all())


def _experiment_points(night: NightlyRun, experiment: Experiment) -> list[HistoryPoint]:
    source = experiment.rerun_of or experiment
    groups: dict[tuple, list[float]] = defaultdict(list)
    group_runs: dict[tuple, list[int]] = defaultdict(list)
    units: dict[str, str] = {}
    rows = Measurement.objects.filter(
        run__experiment=experiment, run__state=Run.SUCCEEDED, metric__in=TRACKED_METRICS
    ).values_list("run_id", "run__system", "run__workload", "run__spec", "metric", "value", "unit")
    for run_id, system, workload, spec, metric, value, unit in rows:
        condition = condition_of(spec)
        load = condition.get("jobs_per_hour")  # a cluster experiment's load sweep
        key = (system, workload, condition["workers"], condition["bandwidth_gbps"], load, metric)
        groups[key].append(value)
        group_runs[key].append(run_id)
        units[metric] = unit
    out = []
    for key, values in sorted(groups.items(), key=str):
        system, workload, workers, bandwidth, load, metric = key
        where = condition_text(
            {"workload": workload, "workers": workers, "bandwidth_gbps": bandwidth,
             "jobs_per_hour": load}
        )  # fmt: skip
        # Series names of experiments without a load are as they always were (history).
        at = f"{workers}:{bandwidth}" + (f":{load:g}jph" if load is not None else "")
        out.append(
            HistoryPoint(
                nightly=night,
                series=f"exp:{source.pk}:{system}:{workload}:{at}:{metric}",
                label=f"#{source.pk} {source.name}: {system}, {where}, {metric}"[:300],
                metric=metric,
                value=fmean(values),
                unit=units[metric],
                finding=_beside(Run.objects.filter(pk__in=group_runs[key])),
            )
        )
    return out


def _beside(runs: Any) -> dict[str, float]:
    """``{"other_cores": x}``, the most CPU other processes took beside one of ``runs`` (real
    runs: ``runners.real.others``), where it reached ``FLAG_CORES``; else nothing. Kept in the
    point's ``finding`` and said in its alert: a change may be that work's, not the code's."""
    most = Measurement.objects.filter(run__in=runs, metric="other_cores").aggregate(
        most=Max("value")
    )["most"]
    return {"other_cores": most} if most is not None and most >= others.FLAG_CORES else {}


def thresholds(point: HistoryPoint) -> regression.Thresholds:
    """A claim's measured value is an improvement (higher is better); a metric has its own."""
    if point.series.startswith("claim:"):
        return regression.Thresholds(point.series, lower_is_better=False)
    return regression.thresholds_for(point.metric)


def history(series: str, until: NightlyRun | None = None) -> list[regression.Point]:
    """The series' nights in order, with ``expected_change`` set on the first night at or
    after each annotation for the series (or for every series)."""
    points = HistoryPoint.objects.filter(series=series).select_related("nightly")
    if until is not None:
        points = points.filter(nightly__started_at__lte=until.started_at)
    rows = list(points.order_by("nightly__started_at", "nightly_id"))
    marks = sorted(
        ExpectedChange.objects.filter(series__in=[series, ""]).values_list(
            "effective_at", flat=True
        )
    )
    out = []
    previous_at = None
    for row in rows:
        at = row.nightly.started_at
        expected = any((previous_at is None or mark > previous_at) and mark <= at for mark in marks)
        out.append(
            regression.Point(
                row.value, label=f"night #{row.nightly_id}", timestamp=at, expected_change=expected
            )
        )
        previous_at = at
    return out


def _detect(night: NightlyRun, points: list[HistoryPoint]) -> list[Alert]:
    alerts = []
    for point in points:
        finding = regression.detect(history(point.series, until=night), thresholds(point))
        beside = point.finding.get("other_cores")  # as _record_points left it
        point.finding = _json_safe(finding.as_dict())
        message = finding.message
        if beside is not None:
            point.finding["other_cores"] = beside
            message += (
                f" (tonight's runs were measured beside other work on their host, up to "
                f"{beside:.2f} cores: the change may be that work's, not the code's)"
            )
        point.save(update_fields=["finding"])
        if finding.status == "alert":
            alerts.append(
                Alert.objects.create(
                    nightly=night,
                    series=point.series,
                    label=point.label,
                    kind=finding.kind or "point",
                    message=message,
                    z=_finite(finding.z),
                    rel_change=_finite(finding.rel_change),
                )
            )
    return alerts


def _verdict_alerts(night: NightlyRun) -> list[Alert]:
    """A claim whose verdict is worse than on the previous night it was checked."""
    alerts = []
    for check in night.checks.filter(state=ClaimCheck.DONE):
        before = (
            ClaimCheck.objects.filter(
                claim_id=check.claim_id,
                mode=check.mode,
                state=ClaimCheck.DONE,
                nightly__isnull=False,
                nightly__started_at__lt=night.started_at,
            )
            .order_by("-nightly__started_at")
            .first()
        )
        if before and VERDICT_RANK.get(check.verdict, 0) < VERDICT_RANK.get(before.verdict, 0):
            reason = check.line.get("reason", "")
            alerts.append(
                Alert.objects.create(
                    nightly=night,
                    series=f"claim:{check.claim_id}:{check.mode}",
                    label=f"claim {check.claim_id} ({check.mode})",
                    kind="verdict",
                    message=f"verdict went from {before.verdict} (night #{before.nightly_id}) "
                    f"to {check.verdict}" + (f": {reason}" if reason else ""),
                )
            )
    return alerts


def _finite(x: float | None) -> float | None:
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


# --- notification -----------------------------------------------------------------------------


def report(night: NightlyRun) -> dict[str, Any]:
    """The notification's content (the webhook's JSON body)."""
    alerts = list(night.alerts.all())
    return {
        "night": night.pk,
        "url": f"{settings.PUBLIC_URL.rstrip('/')}{night.get_absolute_url()}",
        "state": night.state,
        "started_at": night.started_at.isoformat(),
        "finished_at": night.finished_at.isoformat() if night.finished_at else None,
        "verdicts": night.summary.get("verdicts", {}),
        "alerts": [
            {"series": a.label, "kind": a.kind, "message": a.message, "z": a.z} for a in alerts
        ],
        "environment_drift": night.summary.get("drift", []),
    }


def notify(night_id: int) -> dict[str, Any]:
    """Send the night's report by e-mail and to the webhook, as configured. Failures are
    recorded on the night (and logged); they never undo the night."""
    night = NightlyRun.objects.get(pk=night_id)
    body = report(night)
    worth_it = bool(body["alerts"]) or settings.NIGHTLY_NOTIFY == "always"
    sent: dict[str, Any] = {}
    if not worth_it:
        sent["skipped"] = "no alerts (LAB_NIGHTLY_NOTIFY=alerts)"
    if worth_it and settings.NIGHTLY_EMAIL:
        subject = f"[scheduler lab] night #{night.pk}: {len(body['alerts'])} alert(s)"
        try:
            send_mail(subject, _email_text(body), None, settings.NIGHTLY_EMAIL)
            sent["email"] = settings.NIGHTLY_EMAIL
        except Exception as err:  # any mail failure is recorded, not raised
            log.warning("night #%s: e-mail failed: %s", night.pk, err)
            sent["email_error"] = str(err)[:500]
    if worth_it and settings.NIGHTLY_WEBHOOK:
        request = urllib.request.Request(
            settings.NIGHTLY_WEBHOOK,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                sent["webhook"] = response.status
        except (urllib.error.URLError, OSError, ValueError) as err:
            log.warning("night #%s: webhook failed: %s", night.pk, err)
            sent["webhook_error"] = str(err)[:500]
    NightlyRun.objects.filter(pk=night.pk).update(notified=sent)
    return sent


def _email_text(body: dict[str, Any]) -> str:
    lines = [f"Night #{body['night']} ({body['state']}): {body['url']}", "", "Verdicts:"]
    lines += [f"  {claim}: {verdict}" for claim, verdict in sorted(body["verdicts"].items())]
    lines += ["", f"Alerts ({len(body['alerts'])}):"]
    lines += [f"  [{a['kind']}] {a['series']}: {a['message']}" for a in body["alerts"]]
    if body["environment_drift"]:
        lines += ["", "Environment changed since the previous night:"]
        lines += [f"  {d['key']}: {d['before']} -> {d['after']}" for d in body["environment_drift"]]
    return "\n".join(lines) + "\n"


# --- the schedule -----------------------------------------------------------------------------

CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


def parse_cron(text: str) -> dict[str, str]:
    """'30 2 * * *' -> the five crontab fields; ValueError naming the bad field."""
    from celery.schedules import crontab

    parts = (text or "").split()
    if len(parts) != 5:
        raise ValueError(
            "cron: expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(parts)}"
        )
    fields = dict(zip(CRON_FIELDS, parts, strict=True))
    for name, value in fields.items():
        try:
            crontab(**{name: value})
        except (ValueError, TypeError) as err:
            label = name.replace("_", "-")
            raise ValueError(f"cron {label}: {value!r} is not valid ({err})") from None
    return fields


def cron_text(schedule: Any) -> str:
    return " ".join(str(getattr(schedule, name)) for name in CRON_FIELDS)


def ensure_schedule() -> Any:
    """The beat entry that starts the nights (created from LAB_NIGHTLY_CRON when missing)."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    task = PeriodicTask.objects.filter(name=SCHEDULE_NAME).select_related("crontab").first()
    if task is None:
        cron, _ = CrontabSchedule.objects.get_or_create(
            **parse_cron(settings.NIGHTLY_CRON), timezone=settings.TIME_ZONE
        )
        task = PeriodicTask.objects.create(
            name=SCHEDULE_NAME,
            task=TASK_NAME,
            crontab=cron,
            kwargs=json.dumps({"mode": "sim", "claims": None}),
            description="claims suite and experiments marked nightly",
        )
    return task


def update_schedule(cron: str, enabled: bool, claims: list[str] | None) -> Any:
    """Change the nightly schedule (beat picks the change up within seconds)."""
    from django_celery_beat.models import CrontabSchedule

    fields = parse_cron(cron)
    known = claims_by_id()
    unknown = [c for c in claims or () if c not in known]
    if unknown:
        raise ValueError(f"claims: not in the ledger: {', '.join(unknown)}")
    task = ensure_schedule()
    crontab, _ = CrontabSchedule.objects.get_or_create(**fields, timezone=settings.TIME_ZONE)
    task.crontab = crontab
    task.interval = None
    task.enabled = enabled
    task.kwargs = json.dumps({"mode": "sim", "claims": list(claims) if claims else None})
    task.save()
    return task
