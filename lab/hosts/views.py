"""The Hosts page: every registered host, its GPUs, and which run holds each GPU."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from lab.hosts import ledger
from lab.hosts.models import Gpu, Host
from lab.runs.models import Run, RunNode


def host_state(last_seen: datetime | None, now: datetime | None = None) -> str:
    """live | stale (gets no new runs) | lost (its running runs fail) | never: from when its
    worker last reconciled, with the dispatcher's and the lost-host sweep's thresholds."""
    from lab import actions

    if last_seen is None:
        return "never"
    age = (now or timezone.now()) - last_seen
    if age > timedelta(seconds=settings.HOST_LOST_S):
        return "lost"
    if age > timedelta(seconds=max(actions.HOST_STALE_S, 20 * settings.RECONCILE_INTERVAL_S)):
        return "stale"
    return "live"


def gpu_state(gpu: Gpu, claim_run_id: int | None) -> str:
    """free | claimed | busy | removed: what the Hosts page shows for ``gpu``."""
    if not gpu.present:
        return "removed"
    if claim_run_id is not None:
        return "claimed"
    if gpu.busy_external:
        return "busy"
    return "free"


def host_list(request: HttpRequest) -> HttpResponse:
    """Hosts (login required, as every page: LoginRequiredMiddleware) with their GPUs."""
    hosts = list(Host.objects.prefetch_related("gpus"))
    gpus = [gpu for host in hosts for gpu in host.gpus.all()]
    claims = ledger.claims_by_gpu(g.pk for g in gpus)
    running = dict(
        Run.objects.filter(state=Run.RUNNING)
        .values_list("host")
        .annotate(n=Count("id"))
        .values_list("host", "n")
    )
    for name in RunNode.objects.filter(run__state=Run.RUNNING, exit_code__isnull=True).values_list(
        "host", flat=True
    ):  # one node of a run over several hosts
        running[name] = running.get(name, 0) + 1
    now = timezone.now()
    rows = []
    for host in hosts:
        host_gpus = []
        for gpu in host.gpus.all():
            claim = claims.get(gpu.pk)
            host_gpus.append(
                {
                    "gpu": gpu,
                    "claim": claim,
                    "state": gpu_state(gpu, claim.run_id if claim else None),
                }
            )
        free = sum(1 for g in host_gpus if g["state"] == "free")
        rows.append(
            {
                "host": host,
                "gpus": host_gpus,
                "free": free,
                "state": host_state(host.last_seen, now),
                "running": running.get(host.name, 0),
            }
        )
    return render(request, "hosts/hosts.html", {"rows": rows})
