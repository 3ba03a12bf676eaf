"""The Hosts page: every registered host, its GPUs, and which run holds each GPU."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from lab.hosts import ledger
from lab.hosts.models import Gpu, Host


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
        rows.append({"host": host, "gpus": host_gpus, "free": free})
    return render(request, "hosts/hosts.html", {"rows": rows})
