from __future__ import annotations

import re
from typing import NamedTuple

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from lab import actions
from lab.accounts.auth import session_or_token
from lab.catalogue.models import CatalogueEntry
from lab.experiments.forms import (
    ARENA_CLUSTER_FIELDS,
    ARENA_PREFIX,
    PORTAL_ARENAS,
    STRAGGLER_NAMES,
    TRACE_KEYS,
    ExperimentForm,
    straggler_text,
)
from lab.experiments.models import Experiment
from lab.reports import export, figures, paper, realsim
from lab.runs.models import Run
from runners import rundir
from runners.real import others


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
        return _blank_initial()
    initial: dict[str, object] = {
        "name": f"{source.name} (copy)",
        "description": source.description,
        "system": source.system,
        "baselines": source.baselines,
        "workloads": source.workloads,
        "mode": source.mode,
        "seeds": ", ".join(map(str, source.seeds)),
        "iterations": source.iterations,
        "batch_size": source.batch_size or None,
        "params": source.params,
    }
    if actions.arena_of(source.system) == "cluster":
        return {**initial, **_cluster_arena_initial(request, source)}
    for key, value in source.cluster.items():
        if key in STRAGGLER_NAMES:
            value = ", ".join(straggler_text(item, STRAGGLER_NAMES[key]) for item in value)
        initial[f"cluster_{key}"] = value
    for key, values in source.sweep.items():
        initial[f"cluster_{key}"] = ", ".join(f"{v:g}" for v in values)
    for key, value in (source.real or {}).items():
        initial[f"real_{key}"] = value
    return initial


def _blank_initial() -> dict[str, object]:
    """The first system of the portal's arenas with its arena's baselines ticked."""
    systems = CatalogueEntry.objects.filter(active=True, arena__in=PORTAL_ARENAS)
    first = systems.filter(role="system").first() or systems.first()
    if first is None:
        return {}
    baselines = [
        e.name for e in systems.filter(arena=first.arena, role="baseline") if e.name != first.name
    ]
    return {"system": first.name, "baselines": baselines}


def _cluster_arena_initial(request: HttpRequest, source: Experiment) -> dict[str, object]:
    """The trace and cluster fields of a cluster-arena experiment (its ``cluster`` holds the
    cluster spec and, under ``trace``, the trace; its ``sweep`` the loads of a load sweep)."""
    trace = source.cluster.get("trace") or {}
    if "file" in trace:
        messages.warning(
            request,
            f"#{source.pk} runs on a trace file; the portal generates traces only, so the copy "
            "has a generated trace (trace files run from the command line).",
        )
    initial = {f"trace_{k}": v for k, v in trace.items() if k in TRACE_KEYS}
    for key, values in source.sweep.items():  # a load sweep: every load, as the form takes it
        if key in TRACE_KEYS:
            initial[f"trace_{key}"] = ", ".join(f"{v:g}" for v in values)
    cluster = {k: v for k, v in source.cluster.items() if k in ARENA_CLUSTER_FIELDS}
    return {**initial, **{ARENA_PREFIX + k: v for k, v in cluster.items()}}


class ExportForm(forms.Form):
    venue = forms.ChoiceField(
        choices=[(name, name) for name in paper.VENUES],
        initial=next(iter(paper.VENUES)),
        help_text="page geometry and type size the figures are drawn for",
    )
    note = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="needed when a run came from a working tree with uncommitted changes; "
        "recorded in the bundle's README.txt",
    )


def experiment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("owner"), pk=pk)
    context = {**_live_context(experiment), "export_form": ExportForm()}
    return render(request, "experiments/detail.html", context)


@require_POST
def experiment_export(request: HttpRequest, pk: int) -> HttpResponse:
    """The experiment's artifact bundle for a paper (figures, CSVs, manifests, regenerate.py,
    table.tex) as a download; a bad venue, nothing to export or a dirty run without a note
    re-renders the page with the error next to the form (400)."""
    experiment = get_object_or_404(Experiment.objects.select_related("owner"), pk=pk)
    form = ExportForm(request.POST)
    if form.is_valid():
        venue, note = form.cleaned_data["venue"], form.cleaned_data["note"]
        try:
            path = export.export_experiment(experiment, venue, note)
        except export.DirtyRunsError as error:
            form.add_error("note", str(error))
        except export.ExportError as error:
            form.add_error(None, str(error))
        else:
            return FileResponse(path.open("rb"), as_attachment=True, filename=path.name)
    context = {**_live_context(experiment), "export_form": form}
    return render(request, "experiments/detail.html", context, status=400)


def experiment_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The part of the experiment page that changes (polled by live.js)."""
    experiment = get_object_or_404(Experiment, pk=pk)
    return render(request, "experiments/_live.html", _live_context(experiment))


def _live_context(experiment: Experiment) -> dict[str, object]:
    runs = list(experiment.runs.prefetch_related("measurements", "nodes"))
    if actions.arena_of(experiment.system) == "cluster":
        columns = RUN_COLUMNS["cluster"]
    else:
        columns = RUN_COLUMNS["real" if experiment.mode == "real" else "comm"]
    real = experiment.mode == "real"
    notes, twins = realsim.page(figures.figure_dir(experiment)) if real else ([], {})
    disturbed: list[int] = []
    for run in runs:
        values = {m.metric: m.value for m in run.measurements.all()}
        run.cells = [
            Cell("" if values.get(metric) is None else format(values[metric], fmt))
            for metric, _, fmt in columns
        ]
        if real:  # its twin's time (python -m runners twin) beside its own
            run.cells.insert(1, Cell("" if run.pk not in twins else format(twins[run.pk], ".4f")))
            cells, beside_other_work = _trained_on(run)
            run.cells.extend(cells)
            if beside_other_work:
                disturbed.append(run.pk)
    status = Run.combined_state([r.state for r in runs])
    figure_list, settled = _figures(experiment)
    return {
        "experiment": experiment,
        "runs": runs,
        "status": status,
        "counts": {s: sum(r.state == s for r in runs) for s, _ in Run.STATE_CHOICES},
        "figures": figure_list,
        "metric_headers": _headers(columns, real),
        "active": status in Run.ACTIVE or not settled,
        # a real experiment under way: its figures are drawn between its runs (lab.measuring)
        "figures_wait": real and status in Run.ACTIVE,
        "twin_notes": notes,
        "disturbed": disturbed,  # real runs measured beside other work (runners.real.others)
    }


def _headers(columns: list[tuple[str, str, str]], real: bool) -> list[str]:
    headers = [header for _, header, _ in columns]
    if real:  # the twin's time right after the run's own; where it trained at the end
        headers = [headers[0], "simulated (s)", *headers[1:], "network", "device", "beside it"]
    return headers


# The metrics shown per run in the runs table: (metric, header, format).
RUN_COLUMNS = {
    "comm": [
        ("iteration_time_s", "iteration time (s)", ".4f"),
        ("throughput_samples_per_s", "throughput (samples/s)", ".1f"),
    ],
    "real": [
        ("iteration_time_s", "iteration time (s)", ".4f"),
        ("throughput_samples_per_s", "throughput (samples/s)", ".1f"),
        ("exposed_comm_s", "exposed comm (s)", ".4f"),
        ("final_loss", "final loss", ".4f"),
    ],
    "cluster": [
        ("avg_jct_s", "avg JCT (s)", ",.0f"),
        ("total_utility", "utility", ".1f"),
        ("admitted_fraction", "admitted", ".0%"),
    ],
}


class Cell(NamedTuple):
    """A cell of the runs table: its text and, where that is a short form, the whole of it
    (shown on hover)."""

    text: str
    title: str = ""


def _trained_on(run: Run) -> tuple[list[Cell], bool]:
    """What a finished real run trained on, from its summary: the network (e.g. "shaped") and
    the device ("cpu", "cuda"; with why, where it is not what the spec asked), each with its
    note, and the other work on its host beside it (``beside``); blank before the run has
    succeeded or for summaries from before these were recorded. And whether that other work
    reached ``FLAG_CORES``. The network's and device's notes lose their asides, the whole of
    them in the cell's title."""
    blank = [Cell(""), Cell(""), Cell("")]
    if run.state != Run.SUCCEEDED:
        return blank, False
    try:
        summary = rundir.read_summary(run.run_dir)
    except (OSError, ValueError):
        return blank, False
    record = summary.get("others")
    cells = [_brief(summary.get("network") or {}), _brief(summary.get("device") or {})]
    cells.append(Cell(beside(record)))
    return cells, bool(record and record.get("flagged"))


def _brief(block: dict) -> Cell:
    """``told(block)`` without the note's asides in parentheses (e.g. "shaped (latency not
    emulated: the testbed's own)"), the whole in the title where that cut something."""
    whole = told(block)
    short = told(block, headline=True)
    return Cell(short, whole if short != whole else "")


def beside(record: dict | None) -> str:
    """A summary's ``others`` in words: "quiet" under ``FLAG_CORES``, else the cores other
    processes took and the two busiest (the page says what it means below the table); blank
    where not measured (runs from before it, rank 0 on another host)."""
    if not record:
        return ""
    if not record.get("flagged"):
        return "quiet"
    return f"other work: {others.words(record, top=2)}"


def told(block: dict, headline: bool = False) -> str:
    """A summary's ``network`` or ``device`` block in words: its kind, with its note and, for
    a shaped network that reordered or dropped packets, how many (``network.health``). With
    ``headline``, the note without its asides in parentheses (the why of it)."""
    kind = str(block.get("kind", ""))
    said = [str(block["note"])] if block.get("note") else []
    while headline and said and said[0] != (bare := re.sub(r" \([^()]*\)", "", said[0])):
        said = [bare]  # the asides in parentheses, innermost first
    health = block.get("health") or {}
    if health.get("reorderings") or health.get("drops"):
        said.append(
            f"{health['reorderings']} packets reordered, {health['drops']} dropped, "
            f"{health.get('retransmits', 0)} retransmitted"
        )
    return f"{kind} ({'; '.join(said)})" if said else kind


def _figures(experiment: Experiment) -> tuple[list[dict[str, object]], bool]:
    """Figures on disk (per metric the comparison, then the speedup over each baseline), and
    whether they are up to date with the latest finished run."""
    comparisons = figures.available(experiment)
    speedups = figures.available(experiment, stem=figures.speedup_stem)
    kinds = [
        (comparisons, figures.figure_stem, "data.csv", "vs baselines"),
        (speedups, figures.speedup_stem, figures.SPEEDUP_CSV, "speedup over each baseline"),
    ]
    out = [
        {
            "metric": metric,
            "stem": stem(metric),
            "csv": csv,
            "alt": f"{metric}: {experiment.system} {what}",
            "version": pngs[metric].stat().st_mtime_ns,
        }
        for metric in figures.METRICS
        for pngs, stem, csv, what in kinds
        if metric in pngs
    ]
    # figures of the whole experiment: the run-detail ones, a real experiment's real vs sim
    whole = [
        (stem, png, *figures.DETAIL_FIGURES[stem])
        for stem, png in figures.available_details(experiment).items()
    ]
    png = figures.figure_dir(experiment) / f"{realsim.STEM}.png"
    if png.exists():
        what = "real runs beside the simulator's prediction"
        whole.append((realsim.STEM, png, realsim.CSV, what))
    out += [
        {
            "metric": stem,
            "stem": stem,
            "csv": csv,
            "alt": f"{what}: {', '.join(experiment.entries)}",
            "version": png.stat().st_mtime_ns,
        }
        for stem, png, csv, what in whole
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
