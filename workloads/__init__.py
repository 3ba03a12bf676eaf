"""Per-layer profiles of DNN training workloads, read from stored JSON.

The profiles under workloads/profiles/ are generated from the torch definitions in
workloads/models/ by `python -m workloads profile`. This module only reads them, so
importing it does not import torch.
"""

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

PROFILES_DIR = Path(__file__).parent / "profiles"


@dataclass(frozen=True)
class LayerProfile:
    """One module that owns parameters directly, e.g. a Conv2d.

    param_bytes: fp32 bytes of its parameters (4 per parameter).
    fwd_flops: forward-pass FLOPs for ONE sample (2 x multiply-accumulates).
    """

    name: str
    param_count: int
    param_bytes: int
    fwd_flops: float


@dataclass(frozen=True)
class WorkloadProfile:
    """A model's parameter-owning layers, in forward execution order, plus provenance.

    layers: execution order of the forward pass (the first call of each module).
    default_batch_size: per-worker batch size in samples of `sample_unit`.
    input_shape: one sample's shape, without the batch dimension.
    source: read-only provenance (how and from what the numbers were made).
    """

    name: str
    layers: tuple[LayerProfile, ...]
    default_batch_size: int
    sample_unit: str
    input_shape: tuple[int, ...]
    source: Mapping[str, Any] = field(hash=False)

    @property
    def total_param_count(self) -> int:
        return sum(layer.param_count for layer in self.layers)

    @property
    def total_param_bytes(self) -> int:
        return sum(layer.param_bytes for layer in self.layers)

    @property
    def total_fwd_flops(self) -> float:
        """Forward FLOPs per sample over all parameter-owning layers."""
        return sum(layer.fwd_flops for layer in self.layers)


def names() -> list[str]:
    """Sorted names of the workloads that have a stored profile."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.json"))


@functools.cache
def load_profile(name: str) -> WorkloadProfile:
    """The stored profile for `name` (cached; the result is immutable).

    Raises ValueError("unknown workload 'x' (known: ...)") if there is no stored profile,
    and ValueError if the stored layers do not add up to its total_param_count.
    """
    known = names()
    if name not in known:
        raise ValueError(f"unknown workload '{name}' (known: {', '.join(known)})")
    raw = json.loads((PROFILES_DIR / f"{name}.json").read_text())
    profile = WorkloadProfile(
        name=raw["name"],
        layers=tuple(
            LayerProfile(
                name=layer["name"],
                param_count=int(layer["param_count"]),
                param_bytes=int(layer["param_bytes"]),
                fwd_flops=float(layer["fwd_flops"]),
            )
            for layer in raw["layers"]
        ),
        default_batch_size=int(raw["default_batch_size"]),
        sample_unit=raw["sample_unit"],
        input_shape=tuple(raw["input_shape"]),
        source=MappingProxyType(raw["source"]),
    )
    if profile.total_param_count != raw["total_param_count"]:
        raise ValueError(
            f"profile '{name}' is inconsistent: layers sum to {profile.total_param_count} "
            f"parameters, total_param_count says {raw['total_param_count']}"
        )
    return profile
