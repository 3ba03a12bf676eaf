"""Per-layer profiles of DNN training workloads, read from stored JSON.

The analytic profiles under workloads/profiles/ are generated from the torch definitions in
workloads/models/ by `python -m workloads profile`; the measured ones under
workloads/profiles/measured/ by `python -m workloads profile NAME --measure`. This module
only reads them, so importing it does not import torch.
"""

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

PROFILES_DIR = Path(__file__).parent / "profiles"
MEASURED_DIR = PROFILES_DIR / "measured"
# What a measured profile's label may look like ("cpu", "h100", "a100-40gb", ...).
LABEL_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"


@dataclass(frozen=True)
class LayerProfile:
    """One module that owns parameters directly, e.g. a Conv2d.

    param_count: its parameters; a parameter shared with an earlier layer (tied weights)
        counts only there, so this can be 0.
    param_bytes: fp32 bytes of its parameters (4 per parameter).
    fwd_flops: forward-pass FLOPs for ONE sample (2 x multiply-accumulates), including
        parameter-free matmuls attributed to it (see the profile's source.flops_rule).
    deps: indices (into the profile's layers, each < this layer's own) of the layers whose
        outputs reach this layer's input through parameter-free ops only: its nearest
        parameter-owning ancestors in the forward data-flow graph. () = fed only by the
        model input. The forward DAG; gradients flow along the reversed edges.
    """

    name: str
    param_count: int
    param_bytes: int
    fwd_flops: float
    deps: tuple[int, ...]


# A training process holds about this many copies of the weights: the weights, their
# gradients, the optimizer's momentum, and a flat buffer (the lab's engine) or the optimizer's
# temporaries.
WEIGHT_COPIES = 4
PROCESS_BYTES = 400 * 2**20  # a training process's Python and torch before the model
# The memory checks (real runs, measuring) refuse what needs more than these shares of the
# host's available memory or of a GPU's free memory.
HOST_MEMORY_SHARE = 0.8
GPU_MEMORY_SHARE = 0.9
# On the CPU a training process's resident memory holds its step's tensors (the profile's
# ``step_peak_bytes``) about this many times over: glibc's heap keeps what the step frees
# (its mmap threshold rises to the largest freed block, up to 32 MiB, and what is freed below
# it stays in the process). Measured 2026-12-08 on 8 real runs of one CPU worker at batch 32
# (gpt2 at 1; wfbp and ddp): 0.94-1.98 times the peak beyond the process and its other
# copies of the weights; with glibc's threshold fixed (MALLOC_MMAP_THRESHOLD_=131072, 3 runs)
# 0.94-0.97. A bound chosen to cover those runs, not a model of the allocator.
HOST_HEAP_SLACK = 2.0


@dataclass(frozen=True)
class WorkloadProfile:
    """A model's parameter-owning layers, in forward execution order, plus provenance.

    layers: execution order of the forward pass (the first call of each module).
    default_batch_size: per-worker batch size in samples of `sample_unit`.
    input_shape: one sample's shape, without the batch dimension.
    input_dtype: "float32" (images) or "int64" (token ids).
    source: read-only provenance (how and from what the numbers were made).
    buffers: the bytes of the model's buffers (batch norm's statistics, position tables) per
        dtype, as (dtype, bytes) in the order the dtypes first appear: PyTorch's DDP
        broadcasts each dtype's before each forward. Empty in profiles written before it.
    activation_per_sample_bytes, activation_fixed_bytes: what autograd saves for the backward
        of one training forward, as a line in the batch size (the profile's
        ``activation_bytes``, ``source.activations_rule``); 0 in profiles written before it.
    step_peaks: (batch size, bytes) pairs, the most bytes alive at once beyond the weights in
        one training forward and backward at that batch size (the profile's
        ``step_peak_bytes``, ``source.step_peak_rule``); empty in profiles written before it.
    """

    name: str
    layers: tuple[LayerProfile, ...]
    default_batch_size: int
    sample_unit: str
    input_shape: tuple[int, ...]
    input_dtype: str
    source: Mapping[str, Any] = field(hash=False)
    buffers: tuple[tuple[str, int], ...] = ()
    activation_per_sample_bytes: int = 0
    activation_fixed_bytes: int = 0
    step_peaks: tuple[tuple[int, int], ...] = ()

    def activation_bytes(self, batch_size: int) -> int:
        """The bytes autograd saves for the backward of one training forward of
        ``batch_size`` samples (a lower bound of a rank's activation memory: the backward's
        transient gradients and the allocator's slack come on top)."""
        return self.activation_per_sample_bytes * batch_size + self.activation_fixed_bytes

    def step_peak_bytes(self, batch_size: int) -> int:
        """The most bytes alive at once beyond the weights in one training forward and
        backward of ``batch_size`` samples: the activations, the gradients and the backward's
        transients (``step_peaks``; between two measured batch sizes the line through them,
        at or above the peak, beyond them the nearest two's line). 0 without ``step_peaks``.
        The allocator's slack comes on top."""
        points = self.step_peaks
        if not points:
            return 0
        if len(points) == 1:
            return round(points[0][1] * batch_size / points[0][0])
        i = next((k for k, (b, _) in enumerate(points) if b >= batch_size), len(points) - 1)
        (b0, y0), (b1, y1) = points[max(0, i - 1)], points[max(1, i)]
        return max(0, round(y0 + (y1 - y0) * (batch_size - b0) / (b1 - b0)))

    def step_bytes(self, batch_size: int) -> int:
        """A training step's bytes beyond the weights at ``batch_size``: the step's peak
        (``step_peak_bytes``, gradients included), or in a profile without it, the activations
        (``activation_bytes``, from below)."""
        if self.step_peaks:
            return self.step_peak_bytes(batch_size)
        return self.activation_bytes(batch_size)

    def resident_bytes(self) -> int:
        """The weights' copies a training process holds throughout (``WEIGHT_COPIES``; the
        gradients not, where ``step_bytes`` holds them)."""
        copies = WEIGHT_COPIES - 1 if self.step_peaks else WEIGHT_COPIES
        return copies * self.total_param_bytes

    def training_bytes(self, batch_size: int, heap_slack: float = 1.0) -> int:
        """A training process's bytes for this model at ``batch_size``, beyond the process
        itself: ``resident_bytes`` and ``heap_slack`` times ``step_bytes`` (on the CPU
        ``HOST_HEAP_SLACK``; on a GPU 1, PyTorch's caching allocator's slack not counted)."""
        return self.resident_bytes() + round(heap_slack * self.step_bytes(batch_size))

    def cpu_worker_bytes(self, batch_size: int) -> int:
        """A CPU training process's bytes at ``batch_size``: the process itself and
        ``training_bytes`` with ``HOST_HEAP_SLACK`` (what the memory checks count)."""
        return PROCESS_BYTES + self.training_bytes(batch_size, HOST_HEAP_SLACK)

    @property
    def buffer_bytes(self) -> int:
        """Every buffer's bytes, all dtypes."""
        return sum(size for _, size in self.buffers)

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


def available_memory() -> int | None:
    """This machine's available memory in bytes (``MemAvailable`` of ``/proc/meminfo``; None
    where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def names() -> list[str]:
    """Sorted names of the workloads that have a stored (analytic) profile."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.json"))


def _step_peaks(profile_name: str, raw: Any) -> tuple[tuple[int, int], ...]:
    """A profile's ``step_peak_bytes`` as (batch size, bytes) pairs in increasing batch size;
    () where it has none. Raises ValueError naming the profile where it is malformed."""
    if raw is None:
        return ()
    try:
        sizes, peaks = list(raw["batch_sizes"]), list(raw["bytes"])
        points = tuple((int(b), int(y)) for b, y in zip(sizes, peaks, strict=True))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"profile '{profile_name}': step_peak_bytes must hold batch_sizes and bytes, two "
            f"lists of integers of one length ({exc})"
        ) from None
    if (
        not points
        or any(b < 1 or y < 0 for b, y in points)
        or any(a[0] >= b[0] for a, b in zip(points, points[1:], strict=False))
    ):
        raise ValueError(
            f"profile '{profile_name}': step_peak_bytes needs increasing batch sizes of at "
            "least 1 and bytes of at least 0"
        )
    return points


def _deps(profile_name: str, index: int, layer: Mapping[str, Any]) -> tuple[int, ...]:
    """A stored layer's deps, validated: distinct ints, each in [0, index)."""
    where = f"profile '{profile_name}' layer {index} ({layer.get('name')!r})"
    if "deps" not in layer:
        raise ValueError(
            f"{where} has no deps (regenerate: python -m workloads profile {profile_name})"
        )
    raw = layer["deps"]
    if not isinstance(raw, list) or not all(type(d) is int for d in raw):
        raise ValueError(f"{where}: deps must be a list of integers, got {raw!r}")
    bad = [d for d in raw if not 0 <= d < index]
    if bad:
        raise ValueError(
            f"{where}: deps {bad} out of range (each must be >= 0 and < its own index {index})"
        )
    if len(set(raw)) != len(raw):
        raise ValueError(f"{where}: deps {raw} repeat an index")
    return tuple(raw)


@functools.cache
def load_profile(name: str) -> WorkloadProfile:
    """The stored profile for `name` (cached; the result is immutable).

    Raises ValueError("unknown workload 'x' (known: ...)") if there is no stored profile,
    ValueError if the stored layers do not add up to its total_param_count, and ValueError
    naming the profile and layer if a layer's deps are missing, not integers, repeated, or
    not each below the layer's own index.
    """
    known = names()
    if name not in known:
        raise ValueError(f"unknown workload '{name}' (known: {', '.join(known)})")
    return _parse_profile(name, json.loads((PROFILES_DIR / f"{name}.json").read_text()))


def _parse_profile(name: str, raw: Mapping[str, Any]) -> WorkloadProfile:
    """Build and validate a WorkloadProfile from the parsed JSON of profile `name`."""
    profile = WorkloadProfile(
        name=raw["name"],
        layers=tuple(
            LayerProfile(
                name=layer["name"],
                param_count=int(layer["param_count"]),
                param_bytes=int(layer["param_bytes"]),
                fwd_flops=float(layer["fwd_flops"]),
                deps=_deps(name, i, layer),
            )
            for i, layer in enumerate(raw["layers"])
        ),
        default_batch_size=int(raw["default_batch_size"]),
        sample_unit=raw["sample_unit"],
        input_shape=tuple(raw["input_shape"]),
        input_dtype=raw["input_dtype"],
        source=MappingProxyType(raw["source"]),
        buffers=tuple((k, int(v)) for k, v in raw.get("buffer_bytes_by_dtype", {}).items()),
        activation_per_sample_bytes=int(raw.get("activation_bytes", {}).get("per_sample", 0)),
        activation_fixed_bytes=int(raw.get("activation_bytes", {}).get("fixed", 0)),
        step_peaks=_step_peaks(name, raw.get("step_peak_bytes")),
    )
    if profile.total_param_count != raw["total_param_count"]:
        raise ValueError(
            f"profile '{name}' is inconsistent: layers sum to {profile.total_param_count} "
            f"parameters, total_param_count says {raw['total_param_count']}"
        )
    return profile


# --- measured profiles -------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredProfile:
    """Per-layer training-step times measured on one machine, for an analytic profile.

    workload: the analytic profile's name; fwd_s/bwd_s are in its layer order (same length).
    label: which machine/device, e.g. "cpu" or "h100" (file <workload>@<label>.json).
    batch_size: samples per step the times were measured with (times are for the whole
        batch, not per sample).
    fwd_s, bwd_s: median seconds per layer for the forward and the backward pass, with the
        time of parameter-free ops attributed as source.method says.
    update_s: median seconds of each layer's momentum-SGD update (source.method); zeros for
        files measured before it was timed (their source.method does not mention it).
    source: read-only provenance (torch version, device, CPU, method, date, command).
    """

    workload: str
    label: str
    batch_size: int
    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    source: Mapping[str, Any] = field(hash=False)
    update_s: tuple[float, ...] = ()

    @property
    def total_fwd_s(self) -> float:
        return sum(self.fwd_s)

    @property
    def total_bwd_s(self) -> float:
        return sum(self.bwd_s)


def measured_path(name: str, label: str, measured_dir: Path = MEASURED_DIR) -> Path:
    """Where the measured profile of workload `name` on `label` is stored."""
    return Path(measured_dir) / f"{name}@{label}.json"


def measured_labels(name: str, measured_dir: Path = MEASURED_DIR) -> list[str]:
    """Sorted labels of the measured profiles stored for workload `name` (maybe none).

    Raises ValueError("unknown workload 'x' (known: ...)") if `name` has no analytic
    profile.
    """
    known = names()
    if name not in known:
        raise ValueError(f"unknown workload '{name}' (known: {', '.join(known)})")
    prefix = f"{name}@"
    directory = Path(measured_dir)
    if not directory.is_dir():
        return []
    return sorted(
        path.stem.removeprefix(prefix)
        for path in directory.glob("*.json")
        if path.stem.startswith(prefix)
    )


def load_measured(name: str, label: str, measured_dir: Path = MEASURED_DIR) -> MeasuredProfile:
    """The measured profile `<measured_dir>/<name>@<label>.json` (not cached).

    Raises ValueError naming the workload if it has no analytic profile, naming the label
    (and the stored ones) if there is no such measured file, and naming the file if its
    contents are inconsistent: workload/label fields that differ from the file name, a layer
    count or layer names that differ from the analytic profile's, a batch size that is not
    a positive integer, or a time that is not a finite number >= 0.
    """
    labels = measured_labels(name, measured_dir)  # raises for an unknown workload
    if label not in labels:
        raise ValueError(
            f"no measured profile '{label}' for workload '{name}' "
            f"(measured: {', '.join(labels) or 'none'}) in {measured_dir}"
        )
    analytic = load_profile(name)
    path = measured_path(name, label, measured_dir)
    where = f"measured profile '{name}@{label}'"
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON ({exc})") from None
    if (raw.get("workload"), raw.get("label")) != (name, label):
        raise ValueError(
            f"{where} says it is '{raw.get('workload')}@{raw.get('label')}' inside the file"
        )
    layers = raw.get("layers")
    if not isinstance(layers, list) or len(layers) != len(analytic.layers):
        count = len(layers) if isinstance(layers, list) else "no"
        raise ValueError(
            f"{where} has {count} layers, the analytic profile '{name}' has "
            f"{len(analytic.layers)} (re-measure: python -m workloads profile {name} --measure)"
        )
    for i, (got, want) in enumerate(zip(layers, analytic.layers, strict=True)):
        if got.get("name") != want.name:
            raise ValueError(
                f"{where} layer {i} is {got.get('name')!r}, the analytic profile's is {want.name!r}"
            )
        for key in ("fwd_s", "bwd_s", "update_s"):
            if key == "update_s" and not any(key in layer for layer in layers):
                continue  # measured before updates were timed: none has it
            value = got.get(key)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ValueError(f"{where} layer {i} ({want.name}): {key} = {value!r}")
    batch_size = raw.get("batch_size")
    if type(batch_size) is not int or batch_size < 1:
        raise ValueError(f"{where}: batch_size must be a positive integer, got {batch_size!r}")
    return MeasuredProfile(
        workload=name,
        label=label,
        batch_size=batch_size,
        fwd_s=tuple(float(layer["fwd_s"]) for layer in layers),
        bwd_s=tuple(float(layer["bwd_s"]) for layer in layers),
        source=MappingProxyType(raw.get("source", {})),
        update_s=tuple(float(layer.get("update_s", 0.0)) for layer in layers),
    )
