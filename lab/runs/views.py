from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from lab import actions
from lab.runs.models import Run
from runners import rundir
from runners.executors import local

MAX_LOG_BYTES = 200_000


def run_log(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("experiment"), pk=pk)
    logs = {
        "process output": _tail(run.home / local.LOG),
        "runner log": _tail(run.run_dir / rundir.LOG),
    }
    if request.GET.get("raw") == "1":
        text = "\n".join(f"== {name} ==\n{body}" for name, body in logs.items() if body)
        return HttpResponse(text or "no log yet", content_type="text/plain; charset=utf-8")
    return render(request, "runs/log.html", {"run": run, "logs": logs})


def _tail(path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - MAX_LOG_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


@require_POST
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=pk)
    experiment = run.experiment
    if not (request.user.is_staff or experiment.owner_id == request.user.pk):
        messages.error(request, "Only the owner or staff can cancel this run.")
    elif actions.cancel_run(run, by=request.user.get_username()):
        messages.info(request, f"Cancelled run {run.pk}.")
    return redirect(experiment)
