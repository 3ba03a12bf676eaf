"""Per-layer compute times from a workload profile and a named device.

Documented model (an assumption, not a measurement): forward time of a layer =
``fwd_flops_per_sample * batch / (peak_fp32_flops * efficiency)``; backward time =
``backward_ratio`` x forward (2 by default: gradients with respect to inputs and to weights each
cost about one forward). ``efficiency`` is the fraction of the device's peak fp32 rate reached;
its default (``cluster.compute_efficiency`` = 0.5) is ours, not from a paper. Measured profiles
replace this model when a workload stores them.
"""

from __future__ import annotations

from workloads import WorkloadProfile
from workloads.devices import Device

from .iteration import LayerTimes


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
        out.append(LayerTimes(layer.name, fwd_s, fwd_s * backward_ratio, layer.param_bytes))
    return tuple(out)
