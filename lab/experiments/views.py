from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from lab import actions
from lab.accounts.auth import session_or_token
from lab.catalogue.models import CatalogueEntry
from lab.experiments.forms import PORTAL_ARENAS, STRAGGLER_NAMES, ExperimentForm, straggler_text
from lab.experiments.models import Experiment
from lab.reports import figures
from lab.runs.models import Run


def experiment_list(request: HttpRequest) -> HttpResponse:
    experiments = Experiment.objects.select_related("owner").prefetch_related(
        Prefetch("runs", queryset=Run.objects.only("id", "state", "experiment_id"))
    )
    page = Paginator(experiments, 50).get_page(request.GET.get("page"))
    return render(request, "experiments/list.html", {"page": page})


def experiment_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = ExperimentForm(request.POST)
        if form.is_valid():
            experiment = actions.create_experiment(request.user, form.config)
            messages.success(request, f"Queued {experiment.runs.count()} runs.")
            return redirect(experiment)
    else:
        form = ExperimentForm(initial=_initial(request))
    catalogue = list(
        CatalogueEntry.objects.filter(active=True, arena__in=PORTAL_ARENAS).values(
            "name", "arena", "role", "params"
        )
    )
    return render(request, "experiments/new.html", {"form": form, "catalogue": catalogue})


def _initial(request: HttpRequest) -> dict[str, object]:
    """Defaults for a blank form; ``?copy=<id>`` starts from an existing experiment."""
    source = Experiment.objects.filter(pk=request.GET.get("copy") or 0).first()
    if source is None:
        systems = CatalogueEntry.objects.filter(active=True, arena__in=PORTAL_ARENAS)
        first = systems.filter(role="system").first() or systems.first()
        if first is None:
            return {}
        baselines = [
            e.name
            for e in systems.filter(arena=first.arena, role="baseline")
            if e.name != first.name
        ]
        return {"system": first.name, "baselines": baselines}
    initial: dict[str, object] = {
        "name": f"{source.name} (copy)",
        "description": source.description,
        "system": source.system,
        "baselines": source.baselines,
        "workloads": source.workloads,
        "mode": source.mode,
        "seeds": ", ".join(map(str, source.seeds)),
        "iterations": source.iterations,
        "params": source.params,
    }
    for key, value in source.cluster.items():
        if key in STRAGGLER_NAMES:
            value = ", ".join(straggler_text(item, STRAGGLER_NAMES[key]) for item in value)
        initial[f"cluster_{key}"] = value
    for key, values in source.sweep.items():
        initial[f"cluster_{key}"] = ", ".join(f"{v:g}" for v in values)
    return initial


def experiment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("owner"), pk=pk)
    return render(request, "experiments/detail.html", _live_context(experiment))


def experiment_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The part of the experiment page that changes (polled by live.js)."""
    experiment = get_object_or_404(Experiment, pk=pk)
    return render(request, "experiments/_live.html", _live_context(experiment))


def _live_context(experiment: Experiment) -> dict[str, object]:
    runs = list(experiment.runs.prefetch_related("measurements"))
    for run in runs:
        run.metrics = {m.metric: m for m in run.measurements.all()}
    status = Run.combined_state([r.state for r in runs])
    figure_list, settled = _figures(experiment)
    return {
        "experiment": experiment,
        "runs": runs,
        "status": status,
        "counts": {s: sum(r.state == s for r in runs) for s, _ in Run.STATE_CHOICES},
        "figures": figure_list,
        "active": status in Run.ACTIVE or not settled,
    }


def _figures(experiment: Experiment) -> tuple[list[dict[str, object]], bool]:
    """Figures on disk, and whether they are up to date with the latest finished run."""
    out = [
        {"metric": metric, "stem": figures.figure_stem(metric), "version": png.stat().st_mtime_ns}
        for metric, png in figures.available(experiment).items()
    ]
    return out, figures.is_current(experiment)


@require_POST
def experiment_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=pk)
    if not _may_change(request, experiment):
        messages.error(request, "Only the owner or staff can cancel this experiment.")
    else:
        count = actions.cancel_experiment(experiment, by=request.user.get_username())
        messages.info(request, f"Cancelled {count} runs.")
    return redirect(experiment)


@require_POST
def experiment_rerun(request: HttpRequest, pk: int) -> HttpResponse:
    source = get_object_or_404(Experiment, pk=pk)
    experiment = actions.rerun_experiment(source, request.user)
    messages.success(request, f"Re-run of '{source.name}' queued.")
    return redirect(experiment)


def _may_change(request: HttpRequest, experiment: Experiment) -> bool:
    return request.user.is_staff or experiment.owner_id == request.user.pk


@session_or_token
def experiment_file(request: HttpRequest, pk: int, filename: str) -> HttpResponse:
    """A figure (PNG/PDF/SVG) or the CSV behind it, downloadable."""
    experiment = get_object_or_404(Experiment, pk=pk)
    path = figures.figure_dir(experiment) / filename
    if filename not in figures.FILES or not path.exists():
        raise Http404("no such file (yet)")
    attachment = request.GET.get("download") == "1"
    return FileResponse(
        path.open("rb"), as_attachment=attachment, filename=f"experiment-{pk}-{filename}"
    )
