"""The "new experiment" form: the one validation path for the portal and the JSON API.

Every run the experiment would create is validated against the runners contract before
anything is stored; a spec error is shown next to the field it names.
"""

from __future__ import annotations

from typing import Any

from django import forms

from lab.actions import ExperimentConfig
from lab.catalogue.models import CatalogueEntry, Workload
from lab.runs.models import CONDITION_KEYS
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
    "overlap_slowdown",
    "stragglers",
    "ps",
    "servers",
    "server_bandwidth_gbps",
    "server_agg_gbps",
    "ps_stragglers",
    "jitter_groups",
)
STRAGGLER_HELP = (
    "worker:slowdown, optionally @from-until iterations (until exclusive, open-ended if "
    "left out); e.g. 0:1.5, 3:2@10-20"
)
PS_STRAGGLER_HELP = (
    "server:bandwidth_factor:cpu_slowdown, optionally @from-until; e.g. 1:0.5:2, 2:1:3@10-"
)


# The portal queues the single-job (communication) arenas; the cluster arena runs from the
# command line for now (``python -m runners run``).
PORTAL_ARENAS = ("allreduce", "ps")


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
    cluster_workers = forms.CharField(
        label="workers",
        initial=str(_DEFAULTS.workers),
        help_text="one value, or several separated by commas to sweep (e.g. 4, 8, 16)",
    )
    cluster_bandwidth_gbps = forms.CharField(
        label="bandwidth (Gbit/s per worker)",
        initial=f"{_DEFAULTS.bandwidth_gbps:g}",
        help_text="one value, or several separated by commas to sweep (e.g. 1, 10, 25, 100)",
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
    cluster_overlap_slowdown = forms.FloatField(
        label="overlap slow-down",
        required=False,
        initial=_DEFAULTS.overlap_slowdown,
        help_text="compute ops that start while the network is busy take 1 + this times "
        "longer (0 = no interference)",
    )
    cluster_stragglers = forms.CharField(
        label="stragglers", required=False, help_text=STRAGGLER_HELP
    )
    cluster_ps = forms.IntegerField(label="parameter servers", required=False, initial=_DEFAULTS.ps)
    cluster_servers = forms.IntegerField(
        label="server machines",
        required=False,
        initial=_DEFAULTS.servers,
        help_text="machines the keys may be spread over (PSLD scales out up to this)",
    )
    cluster_server_bandwidth_gbps = forms.FloatField(
        label="server bandwidth (Gbit/s)",
        required=False,
        help_text="per server NIC; empty = the workers' bandwidth",
    )
    cluster_server_agg_gbps = forms.FloatField(
        label="server aggregation rate (Gbit/s)",
        required=False,
        initial=_DEFAULTS.server_agg_gbps,
        help_text="how fast a server's CPU sums pushed gradients",
    )
    cluster_ps_stragglers = forms.CharField(
        label="PS stragglers", required=False, help_text=PS_STRAGGLER_HELP
    )
    cluster_jitter_groups = forms.IntegerField(
        label="noise groups",
        required=False,
        min_value=1,
        initial=_DEFAULTS.jitter_groups,
        help_text="workers' compute noise is independent per group (our modelling assumption); "
        "1 = all identical workers jitter together (fast), the number of workers = per-worker "
        "noise",
    )
    params = forms.JSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="parameters of the system under test, as JSON",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        entries = CatalogueEntry.objects.filter(active=True, arena__in=PORTAL_ARENAS)
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

    def clean_cluster_workers(self) -> list[int]:
        return _numbers(self.cleaned_data.get("cluster_workers", ""), int)

    def clean_cluster_bandwidth_gbps(self) -> list[float]:
        return _numbers(self.cleaned_data.get("cluster_bandwidth_gbps", ""), float)

    def clean_cluster_stragglers(self) -> list[dict[str, Any]]:
        return _stragglers(
            self.cleaned_data.get("cluster_stragglers", ""),
            STRAGGLER_NAMES["stragglers"],
            (int, float),
        )

    def clean_cluster_ps_stragglers(self) -> list[dict[str, Any]]:
        return _stragglers(
            self.cleaned_data.get("cluster_ps_stragglers", ""),
            STRAGGLER_NAMES["ps_stragglers"],
            (int, float, float),
        )

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
        sweep = {k: data[f"cluster_{k}"] for k in CONDITION_KEYS if len(data[f"cluster_{k}"]) > 1}
        points = 1
        for values in sweep.values():
            points *= len(values)
        n_runs = (1 + len(baselines)) * len(data["workloads"]) * points * len(seeds)
        if n_runs > MAX_RUNS:
            self.add_error(
                None,
                f"this experiment would create {n_runs} runs; the limit is "
                f"{MAX_RUNS} (fewer seeds, workloads, baselines or swept values)",
            )
            return data
        cluster = {}
        for key in CLUSTER_KEYS:
            value = data.get(f"cluster_{key}")
            if key in CONDITION_KEYS:
                value = value[0]
            if value is None:
                continue  # left empty: the spec's default
            cluster[key] = value
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
            cluster=cluster,
            sweep=sweep,
        )
        for raw in config.raw_specs():
            try:
                run_spec.validate(raw)
            except run_spec.SpecError as err:
                self.add_error(form_field(err.field), f"{err}" + _for(raw, system.name))
                return data
        self.config = config
        return data


def _numbers(text: str, kind: type) -> list[Any]:
    """``"1, 10, 25"`` -> ``[1.0, 10.0, 25.0]``: one value, or the values of a sweep."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    what = "whole numbers" if kind is int else "numbers"
    if not parts:
        raise forms.ValidationError(f"give one value, or several {what} separated by commas")
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise forms.ValidationError(
            f"must be {what} separated by commas, e.g. {'4, 8, 16' if kind is int else '1, 10'}"
        ) from None
    if len(set(values)) != len(values):
        raise forms.ValidationError("each value may appear only once")
    return values


def _stragglers(text: str, names: tuple[str, ...], kinds: tuple[type, ...]) -> list[dict[str, Any]]:
    """``"0:1.5, 3:2@10-20"`` -> straggler dicts (the spec checks the values)."""
    example = ":".join(names)
    out = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        head, at, window = part.partition("@")
        fields = head.split(":")
        try:
            if len(fields) != len(names):
                raise ValueError
            item: dict[str, Any] = {n: k(f) for n, k, f in zip(names, kinds, fields, strict=True)}
            if at:
                start, dash, until = window.partition("-")
                if not dash:
                    raise ValueError
                item["from_iteration"] = int(start) if start else 0
                if until:
                    item["until_iteration"] = int(until)
        except ValueError:
            raise forms.ValidationError(
                f"'{part}' is not {example}[@from-until] (e.g. {_EXAMPLES[names[0]]})"
            ) from None
        out.append(item)
    return out


_EXAMPLES = {"worker": "0:1.5 or 0:1.5@10-20", "server": "1:0.5:2 or 1:0.5:2@10-"}
STRAGGLER_NAMES = {
    "stragglers": ("worker", "slowdown"),
    "ps_stragglers": ("server", "bandwidth_factor", "cpu_slowdown"),
}


def straggler_text(item: dict[str, Any], names: tuple[str, ...]) -> str:
    """A straggler as the form writes it: ``0:1.5`` or ``0:1.5@10-20`` (the inverse of
    ``_stragglers``)."""
    text = ":".join(str(item[n]) for n in names)
    start, until = item.get("from_iteration"), item.get("until_iteration")
    if start or until is not None:
        text += f"@{start or 0}-{'' if until is None else until}"
    return text


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
