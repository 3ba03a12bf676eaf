"""Registry of the model definitions behind the workload profiles.

Importing this module does not import torch; only `build_model` does, lazily.
"""

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model and what a training sample looks like.

    builder: "module.path:function"; called as builder(num_classes=num_classes).
    input_shape: shape of one sample, without the batch dimension.
    default_batch_size: per-worker batch size, in samples.
    sample_unit: what one sample is, for throughput units (e.g. "images").
    """

    name: str
    builder: str
    input_shape: tuple[int, ...]
    num_classes: int
    default_batch_size: int
    sample_unit: str


_SPECS = [
    # Batch size 32 per worker: the usual per-GPU ImageNet batch for these models.
    ModelSpec("resnet50", "workloads.models.resnet:resnet50", (3, 224, 224), 1000, 32, "images"),
    ModelSpec(
        "resnet50-debug", "workloads.models.resnet:resnet50_debug", (3, 32, 32), 10, 8, "images"
    ),
    ModelSpec("vgg16", "workloads.models.vgg:vgg16", (3, 224, 224), 1000, 32, "images"),
    ModelSpec("vgg16-debug", "workloads.models.vgg:vgg16_debug", (3, 32, 32), 10, 8, "images"),
]

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}


def get_spec(name: str) -> ModelSpec:
    """The spec for `name`; ValueError naming the known models if there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model '{name}' (known: {', '.join(sorted(MODELS))})") from None


def build_model(name: str) -> "torch.nn.Module":
    """A freshly initialised model (train mode, default device and dtype) for `name`."""
    spec = get_spec(name)
    module_path, func_name = spec.builder.split(":")
    builder = getattr(importlib.import_module(module_path), func_name)
    return builder(num_classes=spec.num_classes)
