"""Load the catalogue (systems, baselines, workloads) from runners' registry and workloads."""

from __future__ import annotations

import workloads
from lab.catalogue.models import CatalogueEntry, Workload
from runners import registry


def load_catalogue() -> tuple[int, int]:
    """Upsert every registry entry and workload; mark vanished ones inactive. Idempotent."""
    names = []
    for entry in registry.ENTRIES:
        data = entry.as_dict()
        CatalogueEntry.objects.update_or_create(
            name=entry.name,
            defaults={k: data[k] for k in ("arena", "role", "modes", "paper", "summary", "params")}
            | {"active": True},
        )
        names.append(entry.name)
    CatalogueEntry.objects.exclude(name__in=names).update(active=False)
    workload_names = workloads.names()
    for name in workload_names:
        profile = workloads.load_profile(name)
        Workload.objects.update_or_create(
            name=name,
            defaults={
                "layers": len(profile.layers),
                "total_param_bytes": profile.total_param_bytes,
                "default_batch_size": profile.default_batch_size,
                "activation_bytes_per_sample": profile.activation_per_sample_bytes,
                "cpu_worker_bytes": profile.cpu_worker_bytes(profile.default_batch_size),
                "sample_unit": profile.sample_unit,
                "source": dict(profile.source),
                "active": True,
            },
        )
    Workload.objects.exclude(name__in=workload_names).update(active=False)
    return len(names), len(workload_names)
