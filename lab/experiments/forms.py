"""The "new experiment" form: the one validation path for the portal and the JSON API.

Every run the experiment would create is validated against the runners contract before
anything is stored; a spec error is shown next to the field it names.
"""

from __future__ import annotations

from typing import Any

from django import forms

from lab.actions import ExperimentConfig
from lab.catalogue.models import CatalogueEntry, Workload
from runners import registry
from runners import spec as run_spec
from workloads import devices

MAX_RUNS = 500
_DEFAULTS = run_spec.CommCluster()
CLUSTER_KEYS = (
    "workers",
    "bandwidth_gbps",
    "latency_us",
    "gpu",
    "compute_efficiency",
    "compute_jitter_cv",
    "stragglers",
)


class ExperimentForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    system = forms.ChoiceField(help_text="the system under test")
    baselines = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="preselected: the baselines of the system's arena",
    )
    workloads = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    mode = forms.ChoiceField(choices=[("sim", "simulation"), ("real", "real")], initial="sim")
    seeds = forms.CharField(
        required=False,
        help_text="comma-separated seeds, e.g. 0, 1, 2; leave empty to use 0..repeats-1",
    )
    repeats = forms.IntegerField(min_value=1, max_value=50, initial=3, required=False)
    iterations = forms.IntegerField(
        min_value=3,
        max_value=100_000,
        initial=20,
        help_text="measured iterations per run (after warm-up)",
    )
    cluster_workers = forms.IntegerField(label="workers", initial=_DEFAULTS.workers)
    cluster_bandwidth_gbps = forms.FloatField(
        label="bandwidth (Gbit/s per worker)", initial=_DEFAULTS.bandwidth_gbps
    )
    cluster_latency_us = forms.FloatField(
        label="latency (µs per message)", initial=_DEFAULTS.latency_us
    )
    cluster_gpu = forms.ChoiceField(
        label="GPU", initial=_DEFAULTS.gpu, choices=[(d, d) for d in sorted(devices.DEVICES)]
    )
    cluster_compute_efficiency = forms.FloatField(
        label="compute efficiency",
        initial=_DEFAULTS.compute_efficiency,
        help_text="fraction of the GPU's peak fp32 rate reached (our assumption)",
    )
    cluster_compute_jitter_cv = forms.FloatField(
        label="compute jitter (CV)",
        initial=_DEFAULTS.compute_jitter_cv,
        help_text="seeded per-op noise; 0 = deterministic",
    )
    cluster_stragglers = forms.CharField(
        label="stragglers", required=False, help_text="worker:slowdown pairs, e.g. 0:1.5, 3:2"
    )
    params = forms.JSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="parameters of the system under test, as JSON",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        entries = CatalogueEntry.objects.filter(active=True)
        choices = [(e.name, f"{e.name} ({e.arena}, {e.role})") for e in entries]
        self.fields["system"].choices = choices
        self.fields["baselines"].choices = [(e.name, e.name) for e in entries]
        self.fields["workloads"].choices = [
            (w.name, w.name) for w in Workload.objects.filter(active=True)
        ]
        self.config: ExperimentConfig | None = None

    def clean_seeds(self) -> list[int] | None:
        text = self.cleaned_data.get("seeds", "").strip()
        if not text:
            return None
        try:
            seeds = [int(part) for part in text.replace(" ", "").split(",") if part]
        except ValueError:
            raise forms.ValidationError("seeds must be integers separated by commas") from None
        if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise forms.ValidationError("seeds must be distinct non-negative integers")
        return seeds

    def clean_cluster_stragglers(self) -> list[dict[str, float]]:
        text = self.cleaned_data.get("cluster_stragglers", "").strip()
        out = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            worker, sep, slowdown = part.partition(":")
            try:
                out.append({"worker": int(worker), "slowdown": float(slowdown)})
            except ValueError:
                raise forms.ValidationError(
                    f"'{part}' is not worker:slowdown (e.g. 0:1.5)"
                ) from None
            if not sep:
                raise forms.ValidationError(f"'{part}' is not worker:slowdown (e.g. 0:1.5)")
        return out

    def clean_params(self) -> dict[str, Any]:
        value = self.cleaned_data.get("params") or {}
        if not isinstance(value, dict):
            raise forms.ValidationError('must be a JSON object, e.g. {"credit_bytes": 4000000}')
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        system = registry.get(data["system"])
        baselines = [b for b in data.get("baselines", []) if b != system.name]
        wrong = [b for b in baselines if registry.get(b).arena != system.arena]
        if wrong:
            self.add_error(
                "baselines",
                f"{', '.join(wrong)}: not in the '{system.arena}' arena of {system.name}",
            )
            return data
        seeds = data.get("seeds") or list(range(data.get("repeats") or 1))
        n_runs = (1 + len(baselines)) * len(data["workloads"]) * len(seeds)
        if n_runs > MAX_RUNS:
            self.add_error(
                None,
                f"this experiment would create {n_runs} runs; the limit is "
                f"{MAX_RUNS} (fewer seeds, workloads or baselines)",
            )
            return data
        config = ExperimentConfig(
            name=data["name"],
            description=data.get("description", ""),
            system=system.name,
            baselines=tuple(baselines),
            workloads=tuple(data["workloads"]),
            mode=data["mode"],
            seeds=tuple(seeds),
            iterations=data["iterations"],
            params=data["params"],
            cluster={k: data[f"cluster_{k}"] for k in CLUSTER_KEYS},
        )
        for raw in config.raw_specs():
            try:
                run_spec.validate(raw)
            except run_spec.SpecError as err:
                self.add_error(form_field(err.field), f"{err}" + _for(raw, system.name))
                return data
        self.config = config
        return data


def _for(raw: dict[str, Any], system: str) -> str:
    return "" if raw["system"] == system else f" (for baseline {raw['system']})"


def form_field(spec_field: str) -> str | None:
    """The form field that holds a spec field (``cluster.stragglers[0].worker`` ->
    ``cluster_stragglers``)."""
    head = spec_field.split("[")[0]
    if head.startswith("cluster."):
        return f"cluster_{head.split('.')[1]}"
    if head.startswith("params"):
        return "params"
    return {
        "workload": "workloads",
        "system": "system",
        "mode": "mode",
        "iterations": "iterations",
        "seed": "seeds",
    }.get(head)


def api_field(form_field_name: str) -> str:
    """Name of a form field in the JSON API (``cluster_workers`` -> ``cluster.workers``)."""
    if form_field_name.startswith("cluster_"):
        return "cluster." + form_field_name.removeprefix("cluster_")
    return "non_field_errors" if form_field_name == "__all__" else form_field_name
