"""The Claims and Nightly pages."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from lab.experiments.models import Experiment
from lab.reports import claims as ledger
from lab.reports import nightly as nights
from lab.reports.models import Alert, ClaimCheck, ExpectedChange, HistoryPoint, NightlyRun
from lab.runs.models import Run

# --- Claims -----------------------------------------------------------------------------------


def claims(request: HttpRequest) -> HttpResponse:
    return _claims(request, "reports/claims.html")


def claims_live(request: HttpRequest) -> HttpResponse:
    """The part of the Claims page that changes while checks are pending (polled)."""
    return _claims(request, "reports/_claims.html")


def _claims(request: HttpRequest, template: str) -> HttpResponse:
    try:
        entries = list(nights.claims_by_id().values())
    except ledger.LedgerError as err:
        return render(request, template, {"ledger_error": str(err)}, status=500)
    latest = nights.latest_checks()
    pending = {
        (c.claim_id, c.mode): c
        for c in ClaimCheck.objects.filter(state=ClaimCheck.PENDING).order_by("created_at")
    }
    rows = []
    for claim in entries:
        results = []
        for mode in ledger.MODES:
            check = latest.get((claim.id, mode))
            results.append(
                {
                    "mode": mode,
                    "check": check,
                    "pending": pending.get((claim.id, mode)),
                    "applies": mode in claim.modes,
                    "figure": check is not None and nights.claim_figure_path(check).exists(),
                    "runs": _run_counts(check.experiment) if check and check.experiment else None,
                }
            )
        rows.append({"claim": claim, "results": results})
    return render(
        request,
        template,
        {
            "rows": rows,
            "verdict_rule": ledger.VERDICT_RULE,
            # and while a verdict's figure is still being drawn (after the verdict)
            "active": bool(pending) or any(nights.figure_owed(c) for c in latest.values()),
        },
    )


def _run_counts(experiment: Experiment) -> dict[str, int]:
    states = list(experiment.runs.values_list("state", flat=True))
    return {"total": len(states), "succeeded": states.count(Run.SUCCEEDED)}


@require_POST
def claim_reproduce(request: HttpRequest, claim_id: str) -> HttpResponse:
    mode = request.POST.get("mode", "sim")
    claim = nights.claims_by_id().get(claim_id)
    if claim is None:
        raise Http404(f"no claim {claim_id} in the ledger")
    if mode not in claim.modes:
        messages.error(request, f"{claim_id} runs in {'/'.join(claim.modes)} mode, not {mode}.")
        return redirect(reverse("claims") + f"#{claim_id}")
    check = nights.start_check(claim, mode, user=request.user)
    runs = check.experiment.runs.count() if check.experiment else 0
    messages.success(
        request,
        f"Queued {runs} runs to check {claim_id} ({mode}); the verdict appears here when they end.",
    )
    return redirect(reverse("claims") + f"#{claim_id}")


def claim_figure(request: HttpRequest, pk: int) -> HttpResponse:
    check = get_object_or_404(ClaimCheck, pk=pk)
    path = nights.claim_figure_path(check)
    if not path.exists():
        raise Http404("this check has no figure")
    return FileResponse(path.open("rb"), content_type="image/png")


# --- Nightly ----------------------------------------------------------------------------------


def nightly(request: HttpRequest) -> HttpResponse:
    task = nights.ensure_schedule()
    kwargs = json.loads(task.kwargs or "{}")
    known = list(nights.claims_by_id())
    night_list = list(NightlyRun.objects.all()[:30])
    latest = next((n for n in night_list if n.state == NightlyRun.DONE), None)
    tracked = set(
        HistoryPoint.objects.filter(series__in=[f"claim:{c}:sim" for c in known])
        .values_list("series", flat=True)
        .distinct()
    )
    claim_series = [
        {"series": f"claim:{c}:sim", "claim": c} for c in known if f"claim:{c}:sim" in tracked
    ]
    return render(
        request,
        "reports/nightly.html",
        {
            "task": task,
            "cron": nights.cron_text(task.crontab) if task.crontab else "",
            "scheduled_claims": kwargs.get("claims") or [],
            "known_claims": known,
            "nights": night_list,
            "latest": latest,
            "alerts": Alert.objects.filter(state=Alert.OPEN).select_related("nightly")[:100],
            "claim_series": claim_series,
            "experiment_series": _experiment_series(),
            "nightly_experiments": Experiment.objects.filter(nightly=True),
            "expected": ExpectedChange.objects.select_related("created_by")[:20],
            "now": timezone.now(),
        },
    )


def _experiment_series() -> list[dict[str, Any]]:
    """The tracked series of nightly experiments, with their latest point and finding."""
    latest: dict[str, HistoryPoint] = {}
    for point in HistoryPoint.objects.filter(series__startswith="exp:").order_by(
        "nightly__started_at", "nightly_id"
    ):
        latest[point.series] = point
    return [{"series": s, "point": p} for s, p in sorted(latest.items())]


def nightly_detail(request: HttpRequest, pk: int) -> HttpResponse:
    night = get_object_or_404(NightlyRun, pk=pk)
    known = nights.claims_by_id()
    checks = list(night.checks.select_related("experiment").order_by("claim_id"))
    for check in checks:
        check.claim = known.get(check.claim_id)
    return render(
        request,
        "reports/nightly_detail.html",
        {
            "night": night,
            "checks": checks,
            "experiments": night.experiments.select_related("rerun_of"),
            "points": night.points.order_by("series"),
            "alerts": night.alerts.all(),
        },
    )


@require_POST
def nightly_schedule(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        messages.error(request, "Only staff can change the nightly schedule.")
        return redirect("nightly")
    chosen = request.POST.getlist("claims")
    try:
        nights.update_schedule(
            request.POST.get("cron", ""), request.POST.get("enabled") == "on", chosen or None
        )
    except ValueError as err:
        messages.error(request, f"Schedule not changed: {err}")
        return redirect("nightly")
    messages.success(request, "Nightly schedule saved.")
    return redirect("nightly")


@require_POST
def nightly_run_now(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        messages.error(request, "Only staff can start a night by hand.")
        return redirect("nightly")
    task = nights.ensure_schedule()
    kwargs = json.loads(task.kwargs or "{}")
    night = nights.start_night(
        mode=kwargs.get("mode", "sim"),
        claims=kwargs.get("claims"),
        trigger="manual",
        user=None,
    )
    if night.state == NightlyRun.SKIPPED:
        messages.error(request, night.note)
    else:
        messages.success(request, f"Night #{night.pk} queued.")
    return redirect(night)


@require_POST
def expected_change(request: HttpRequest) -> HttpResponse:
    series = request.POST.get("series", "").strip()
    note = request.POST.get("note", "").strip()
    when = request.POST.get("effective_at", "").strip()
    if not note:
        messages.error(request, "An expected change needs a note saying what changed and why.")
        return redirect("nightly")
    try:
        effective_at = _parse_time(when) if when else timezone.now()
    except ValueError:
        messages.error(request, f"effective_at: {when!r} is not a date and time (YYYY-MM-DD HH:MM)")
        return redirect("nightly")
    ExpectedChange.objects.create(
        series=series, effective_at=effective_at, note=note, created_by=request.user
    )
    closed = 0
    alert_id = request.POST.get("alert")
    if alert_id:
        closed = Alert.objects.filter(pk=alert_id, state=Alert.OPEN).update(
            state=Alert.CLOSED,
            closed_by=request.user,
            closed_at=timezone.now(),
            close_note=f"expected change: {note}",
        )
    target = series or "every series"
    messages.success(
        request,
        f"Expected change recorded for {target}: the baseline restarts from the first night "
        f"at or after {effective_at:%Y-%m-%d %H:%M}" + (" (alert closed)." if closed else "."),
    )
    return redirect("nightly")


def _parse_time(text: str) -> datetime:
    for fmt in ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return timezone.make_aware(datetime.strptime(text, fmt))
        except ValueError:
            continue
    raise ValueError(text)


@require_POST
def alert_close(request: HttpRequest, pk: int) -> HttpResponse:
    alert = get_object_or_404(Alert, pk=pk)
    Alert.objects.filter(pk=alert.pk, state=Alert.OPEN).update(
        state=Alert.CLOSED,
        closed_by=request.user,
        closed_at=timezone.now(),
        close_note=request.POST.get("note", "").strip(),
    )
    messages.info(request, f"Alert on {alert.label} closed.")
    return redirect("nightly")


def history_png(request: HttpRequest) -> HttpResponse:
    """The history of one series as a small plot (drawn on request; a few ms)."""
    series = request.GET.get("series", "")
    rows = list(
        HistoryPoint.objects.filter(series=series)
        .select_related("nightly")
        .order_by("nightly__started_at", "nightly_id")
    )
    if not rows:
        raise Http404("no history for this series")
    claimed = None
    if series.startswith("claim:"):
        claim = nights.claims_by_id().get(series.split(":")[1])
        claimed = claim.claimed if claim else None
    png = _history_figure(series, rows, claimed)
    response = HttpResponse(png, content_type="image/png")
    response["Cache-Control"] = "private, max-age=60"
    return response


def _history_figure(series: str, rows: list[HistoryPoint], claimed: float | None) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    marks = [
        e.effective_at
        for e in ExpectedChange.objects.filter(series__in=[series, ""])
        if rows[0].nightly.started_at <= e.effective_at <= rows[-1].nightly.started_at
    ]
    alerts = set(Alert.objects.filter(series=series).values_list("nightly_id", flat=True))
    fig = Figure(figsize=(4.8, 1.9), layout="constrained")
    ax = fig.subplots()
    x = [r.nightly.started_at for r in rows]
    y = [r.value for r in rows]
    ax.plot(x, y, marker="o", markersize=3, linewidth=1, color="#0173b2")
    bad = [(a, b) for a, b, r in zip(x, y, rows, strict=True) if r.nightly_id in alerts]
    if bad:
        ax.scatter(*zip(*bad, strict=True), color="#d55e00", marker="X", s=40, zorder=3,
                   label="alert")  # fmt: skip
    if claimed is not None:
        ax.axhline(claimed, color="black", linestyle="--", linewidth=0.8, label="claimed")
    for mark in marks:
        ax.axvline(mark, color="#029e73", linestyle=":", linewidth=1)
    ax.set_ylabel(rows[-1].unit or rows[-1].metric, fontsize="small")
    ax.tick_params(labelsize="x-small")
    fig.autofmt_xdate()
    if bad or claimed is not None:
        ax.legend(fontsize="x-small", frameon=False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


@require_POST
def experiment_nightly(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=pk)
    if not (request.user.is_staff or experiment.owner_id == request.user.pk):
        messages.error(request, "Only the owner or staff can change whether this runs nightly.")
        return redirect(experiment)
    value = request.POST.get("nightly")
    if value not in ("0", "1"):
        return HttpResponse("nightly: expected 0 or 1", status=400)
    experiment.nightly = value == "1"
    experiment.save(update_fields=["nightly", "updated_at"])
    messages.success(
        request,
        "This experiment now re-runs every night." if experiment.nightly
        else "This experiment no longer runs nightly.",
    )  # fmt: skip
    return redirect(experiment)
