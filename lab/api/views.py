"""JSON API for scripts and nightly jobs; token authentication (see lab.accounts.auth)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from lab import actions
from lab.accounts.auth import token_required
from lab.experiments.forms import (
    ARENA_CLUSTER_FIELDS,
    ARENA_PREFIX,
    CLI_ONLY_CLUSTER_KEYS,
    CLUSTER_KEYS,
    CLUSTER_SWEEP_KEYS,
    FIELD_ARENA,
    REAL_KEYS,
    STRAGGLER_NAMES,
    TRACE_FILE_KEYS,
    TRACE_KEYS,
    ExperimentForm,
    api_field,
    straggler_text,
)
from lab.experiments.models import Experiment
from lab.reports import figures, realsim
from lab.runs.models import CONDITION_KEYS, Run
from runners.spec import ARENA_NAMES, REAL_KEY_ARENAS

FIELDS = {
    "name",
    "description",
    "system",
    "baselines",
    "workloads",
    "mode",
    "seeds",
    "repeats",
    "iterations",
    "batch_size",
    "cluster",
    "trace",
    "params",
    "real",
}
TRACE_FILE_REFUSED = (
    "trace files are not taken by the API (the server would read a path you name): give a "
    "generated trace ({generator, jobs, jobs_per_hour, ...}); trace files run from the command "
    "line (python -m runners run)"
)


@token_required
@require_http_methods(["GET", "POST"])
def experiments(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        latest = Experiment.objects.prefetch_related("runs")[:50]
        return JsonResponse({"experiments": [_summary(request, e) for e in latest]})
    try:
        body = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return _errors({"body": [f"not valid JSON: {err}"]})
    if not isinstance(body, dict):
        return _errors({"body": ["must be a JSON object"]})
    data, errors = _form_data(body)
    form = ExperimentForm(data)
    if errors or not form.is_valid():
        form_errors = {api_field(k): list(v) for k, v in form.errors.items()}
        return _errors({**form_errors, **errors})
    experiment = actions.create_experiment(request.user, form.config)
    return JsonResponse(_detail(request, experiment), status=201)


def _form_data(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Map the JSON body onto the form's fields (one validation path for both)."""
    errors: dict[str, list[str]] = {}
    for key in sorted(set(body) - FIELDS):
        errors[key] = [f"unknown field (allowed: {', '.join(sorted(FIELDS))})"]
    nested = {"cluster", "trace", "seeds", "params", "real"}
    data = {k: v for k, v in body.items() if k in FIELDS - nested}
    real = body.get("real", {})
    if not isinstance(real, dict):
        errors["real"] = ["must be an object (mode real: how the runs train)"]
        real = {}
    for key in sorted(set(real) - set(REAL_KEYS)):
        errors[f"real.{key}"] = [f"unknown field (allowed: {', '.join(REAL_KEYS)})"]
    for key in REAL_KEYS:
        if key in real:
            data[f"real_{key}"] = real[key]
            boolean = isinstance(ExperimentForm.base_fields[f"real_{key}"], forms.BooleanField)
            if boolean and not isinstance(real[key], bool):  # the form's would take "yes"
                errors[f"real.{key}"] = [f"must be true or false (got {real[key]!r})"]
    if "params" in body:
        data["params"] = json.dumps(body["params"])
    seeds = body.get("seeds")
    if seeds is not None:
        if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
            errors["seeds"] = ["must be a list of integers"]
        else:
            data["seeds"] = ", ".join(map(str, seeds))
    for key in ("baselines", "workloads"):
        if key in body and not isinstance(body[key], list):
            errors[key] = ["must be a list of names"]
    cluster = body.get("cluster", {})
    if not isinstance(cluster, dict):
        errors["cluster"] = ["must be an object"]
        cluster = {}
    system = body.get("system")
    if isinstance(system, str) and actions.arena_of(system) == "cluster":
        _cluster_arena_data(body, cluster, data, errors)
    else:
        _comm_data(cluster, data, errors)
        arena = actions.arena_of(system) if isinstance(system, str) else None
        # One arena's fields, which the form drops for the other's systems: refuse them.
        of_one_arena = [
            ("cluster", cluster, {key: (only,) for key, only in FIELD_ARENA.items()}),
            ("real", real, REAL_KEY_ARENAS),
        ]
        for section, given, arenas in of_one_arena:
            for key, on in arenas.items():
                if key in given and arena is not None and arena not in on:
                    names = " and ".join(ARENA_NAMES[a] for a in on)
                    errors[f"{section}.{key}"] = [
                        f"used by the {names} arena only ({system} is in the {arena} arena)"
                    ]
        if "trace" in body:
            errors["trace"] = ["only for a system of the cluster arena"]
    for name, form_field in ExperimentForm.base_fields.items():
        if name not in data and form_field.initial is not None:
            initial = form_field.initial() if callable(form_field.initial) else form_field.initial
            data[name] = json.dumps(initial) if name == "params" else initial
    return data, errors


def _comm_data(cluster: dict[str, Any], data: dict[str, Any], errors: dict[str, list[str]]) -> None:
    """A communication-arena system: ``cluster`` onto the ``cluster_*`` form fields."""
    for key in CLUSTER_KEYS:
        value = cluster.get(key)
        if value is None:
            continue  # the form's initial value (the spec's default) fills it in
        if key in CONDITION_KEYS:
            values = value if isinstance(value, list) else [value]
            if not values or not all(_is_number(v) for v in values):
                errors[f"cluster.{key}"] = ["must be a number or a list of numbers (a sweep)"]
                continue
            value = ", ".join(map(str, values))
        elif key in STRAGGLER_NAMES:
            value = _straggler_text(key, value, errors)
            if value is None:
                continue
        data[f"cluster_{key}"] = value
    for key in sorted(set(cluster) - set(CLUSTER_KEYS)):
        why = CLI_ONLY_CLUSTER_KEYS.get(key, f"unknown field (allowed: {', '.join(CLUSTER_KEYS)})")
        errors[f"cluster.{key}"] = [why]


def _cluster_arena_data(
    body: dict[str, Any],
    cluster: dict[str, Any],
    data: dict[str, Any],
    errors: dict[str, list[str]],
) -> None:
    """A cluster-arena system: ``trace`` (generated only, never a file) onto the ``trace_*``
    form fields and ``cluster`` onto the ``cluster_arena_*`` ones. Workloads and iterations
    have no meaning there and are refused rather than silently dropped."""
    for key in ("workloads", "iterations", "batch_size"):
        if body.get(key) not in (None, []):
            errors[key] = [f"not used in the cluster arena ({body['system']} runs a trace)"]
    trace = body.get("trace", {})
    if not isinstance(trace, dict):
        errors["trace"] = ["must be an object, e.g. {generator: philly, jobs: 200}"]
        trace = {}
    for key in TRACE_FILE_KEYS:
        if key in trace:
            errors[f"trace.{key}"] = [TRACE_FILE_REFUSED]
    generated = {k: v for k, v in trace.items() if k not in TRACE_FILE_KEYS}
    for key in CLUSTER_SWEEP_KEYS:  # the load: one number, or a list of numbers (a sweep)
        if isinstance(generated.get(key), list):
            values = generated.pop(key)
            if not values or not all(_is_number(v) for v in values):
                errors[f"trace.{key}"] = ["must be a number or a list of numbers (a sweep)"]
            else:
                data[f"trace_{key}"] = ", ".join(map(str, values))
    _scalars("trace", generated, TRACE_KEYS, "trace_", data, errors)
    _scalars("cluster", cluster, tuple(ARENA_CLUSTER_FIELDS), ARENA_PREFIX, data, errors)


def _scalars(
    section: str,
    given: dict[str, Any],
    keys: tuple[str, ...],
    prefix: str,
    data: dict[str, Any],
    errors: dict[str, list[str]],
) -> None:
    """``given[key]`` onto the form field ``prefix + key``; one value each (the load's sweep
    is taken before, by ``_cluster_arena_data``)."""
    for key, value in given.items():
        if key not in keys:
            errors[f"{section}.{key}"] = [
                f"unknown field for the cluster arena (allowed: {', '.join(keys)})"
            ]
        elif isinstance(value, (list, dict)):
            errors[f"{section}.{key}"] = ["must be one value (only trace.jobs_per_hour sweeps)"]
        elif value is not None:
            data[prefix + key] = value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _straggler_text(key: str, value: Any, errors: dict[str, list[str]]) -> str | None:
    names = STRAGGLER_NAMES[key]
    if key == "stragglers":  # worker, and slowdown (compute) and/or bandwidth_factor (NIC)
        shape = "{worker, slowdown and/or bandwidth_factor[, from_iteration, until_iteration]}"
    else:
        shape = "{" + ", ".join(names) + "[, from_iteration, until_iteration]}"
    allowed = {*names, "from_iteration", "until_iteration"}

    def complete(item: dict[str, Any]) -> bool:
        if key == "stragglers":
            return "worker" in item and bool({"slowdown", "bandwidth_factor"} & set(item))
        return set(names) <= set(item)

    if not isinstance(value, (list, tuple)):
        errors[f"cluster.{key}"] = [f"must be a list of {shape}"]
        return None
    parts = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not complete(item) or set(item) - allowed:
            errors[f"cluster.{key}[{i}]"] = [f"must be {shape}"]
            return None
        if not all(_is_number(v) or v is None for v in item.values()):
            errors[f"cluster.{key}[{i}]"] = ["values must be numbers"]
            return None
        parts.append(straggler_text(item, names))
    return ", ".join(parts)


def _errors(errors: dict[str, list[str]]) -> JsonResponse:
    return JsonResponse({"errors": errors}, status=400)


@token_required
@require_http_methods(["GET"])
def experiment(request: HttpRequest, pk: int) -> HttpResponse:
    return JsonResponse(_detail(request, get_object_or_404(Experiment, pk=pk)))


@token_required
@require_http_methods(["POST"])
def experiment_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    found = get_object_or_404(Experiment, pk=pk)
    if not (request.user.is_staff or found.owner_id == request.user.pk):
        return JsonResponse({"error": "only the owner or staff can cancel"}, status=403)
    cancelled = actions.cancel_experiment(found, by=request.user.get_username())
    return JsonResponse({**_detail(request, found), "cancelled_runs": cancelled})


def _summary(request: HttpRequest, e: Experiment) -> dict[str, Any]:
    return {
        "id": e.pk,
        "name": e.name,
        "status": Run.combined_state([r.state for r in e.runs.all()]),
        "url": request.build_absolute_uri(reverse("api-experiment", args=[e.pk])),
    }


def _detail(request: HttpRequest, e: Experiment) -> dict[str, Any]:
    runs = list(e.runs.prefetch_related("measurements", "nodes"))
    directory = figures.figure_dir(e)

    def file_url(name: str) -> str:
        return request.build_absolute_uri(reverse("experiment-file", args=[e.pk, name]))

    def urls(stem: str) -> dict[str, str]:
        return {fmt: file_url(f"{stem}.{fmt}") for fmt in figures.FORMATS}

    figure_urls = {metric: urls(figures.figure_stem(metric)) for metric in figures.available(e)}
    speedups = figures.available(e, stem=figures.speedup_stem)
    speedup_urls = {metric: urls(figures.speedup_stem(metric)) for metric in speedups}
    detail_urls = {
        stem: {**urls(stem), "csv": file_url(figures.DETAIL_FIGURES[stem][0])}
        for stem in figures.available_details(e)
    }
    return {
        "id": e.pk,
        "name": e.name,
        "description": e.description,
        "owner": e.owner.get_username(),
        "status": Run.combined_state([r.state for r in runs]),
        "system": e.system,
        "baselines": e.baselines,
        "workloads": e.workloads,
        "mode": e.mode,
        "seeds": e.seeds,
        "iterations": e.iterations,
        "batch_size": e.batch_size or None,  # None: each workload's default
        "cluster": e.cluster,
        "sweep": e.sweep,
        "params": e.params,
        "created_at": e.created_at.isoformat(),
        "page": request.build_absolute_uri(e.get_absolute_url()),
        "runs": [_run(r) for r in runs],
        "figures": figure_urls,
        "speedup_figures": speedup_urls,
        "detail_figures": detail_urls,  # timeline, jct-cdf, convergence: what has data
        "figures_current": figures.is_current(e),
        "data_csv": file_url("data.csv") if (directory / "data.csv").exists() else None,
        # a real-mode experiment's runs beside their twins (None until one has a twin) and why
        # runs have none
        "real_vs_sim": {**urls(realsim.STEM), "csv": file_url(realsim.CSV)}
        if (directory / realsim.CSV).exists()
        else None,
        "real_vs_sim_notes": realsim.page(directory)[0] if e.mode == "real" else [],
    }


def _run(r: Run) -> dict[str, Any]:
    return {
        "id": r.pk,
        "system": r.system,
        "workload": r.workload,
        "seed": r.seed,
        "condition": r.condition,
        "status": r.state,
        "attempt": r.attempt,
        "host": r.host or None,
        "executor": r.executor,
        "nodes": [{"rank": 0, "host": r.host or None}]
        + [{"rank": n.rank, "host": n.host, "exit_code": n.exit_code} for n in r.other_nodes],
        "error": r.error,
        "started_at": r.started_at.isoformat() if r.started_at else None,
        "finished_at": r.finished_at.isoformat() if r.finished_at else None,
        "metrics": {m.metric: m.value for m in r.measurements.all()},
        "units": {m.metric: m.unit for m in r.measurements.all()},
    }
