"""Per-layer compute times from a workload profile and a named device.

Documented model (an assumption, not a measurement): forward time of a layer =
``fwd_flops_per_sample * batch / (peak_fp32_flops * efficiency)``; backward time =
``backward_ratio`` x forward (2 by default: gradients with respect to inputs and to weights each
cost about one forward). ``efficiency`` is the fraction of the device's peak fp32 rate reached;
its default (``cluster.compute_efficiency`` = 0.5) is ours, not from a paper. Measured profiles
replace this model when a workload stores them.
"""

from __future__ import annotations

import workloads
from workloads import WorkloadProfile, devices
from workloads.devices import Device

from .engine import LayerTimes


def layer_times(
    profile: WorkloadProfile,
    device: Device,
    batch_size: int,
    efficiency: float,
    backward_ratio: float = 2.0,
) -> tuple[LayerTimes, ...]:
    rate = device.peak_fp32_flops * efficiency
    out = []
    for layer in profile.layers:
        fwd_s = layer.fwd_flops * batch_size / rate
        out.append(
            LayerTimes(layer.name, fwd_s, fwd_s * backward_ratio, layer.param_bytes, layer.deps)
        )
    return tuple(out)


MEASURED_PREFIX = "measured:"


def measured_layer_times(profile: WorkloadProfile, label: str, batch_size: int):
    """Per-layer times from a measured profile (``python -m workloads profile NAME --measure``),
    scaled linearly from the measured batch size to ``batch_size`` (an assumption: small
    batches underuse a device, so scaling up from them overestimates)."""
    measured = workloads.load_measured(profile.name, label)
    scale = batch_size / measured.batch_size
    return tuple(
        LayerTimes(
            layer.name,
            measured.fwd_s[i] * scale,
            measured.bwd_s[i] * scale,
            layer.param_bytes,
            layer.deps,
            # per parameter, not per sample: not scaled (none measured: 0)
            measured.update_s[i] if measured.update_s else 0.0,
        )
        for i, layer in enumerate(profile.layers)
    )


def times_for(profile: WorkloadProfile, gpu: str, batch_size: int, efficiency: float):
    """Compute times of ``profile`` on ``gpu``: a named device (FLOPs model) or
    ``measured:<label>`` (a stored measured profile; ``efficiency`` does not apply)."""
    if gpu.startswith(MEASURED_PREFIX):
        return measured_layer_times(profile, gpu[len(MEASURED_PREFIX) :], batch_size)
    return layer_times(profile, devices.get_device(gpu), batch_size, efficiency)
