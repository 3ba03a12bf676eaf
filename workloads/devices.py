"""Accelerator peak-throughput figures, as printed by the vendor.

Datasheet peaks only: no efficiency factor and no compute-time model here (the simulator
owns that). Units: FLOP/s and decimal gigabytes, as on the datasheets.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    """One accelerator's datasheet peaks.

    peak_fp32_flops: dense FP32 peak (non-tensor-core), FLOP/s.
    peak_tensor_flops: dense (no structured sparsity) TF32 tensor-core peak, FLOP/s, i.e.
        what fp32 training can use via tensor cores; None where there is no TF32.
    memory_gb: device memory, decimal GB as on the datasheet.
    source: where each figure comes from.
    """

    name: str
    peak_fp32_flops: float
    peak_tensor_flops: float | None
    memory_gb: float
    source: str


DEVICES: dict[str, Device] = {
    d.name: d
    for d in [
        Device(
            name="k80",
            # K80 is a dual-GPU board; schedulers and clouds treat each GK210 as one GPU.
            peak_fp32_flops=4.365e12,
            peak_tensor_flops=None,
            memory_gb=12,
            source="NVIDIA Tesla K80 datasheet: 8.73 TFLOPS FP32 (GPU Boost) and 24 GB GDDR5 "
            "per board of two GK210 GPUs; halved here to one GPU.",
        ),
        Device(
            name="p100",
            peak_fp32_flops=10.6e12,
            peak_tensor_flops=None,
            memory_gb=16,
            source="NVIDIA Tesla P100 datasheet, SXM2 (NVLink) variant: 10.6 TFLOPS FP32, "
            "16 GB HBM2; no tensor cores (PCIe variant: 9.3 TFLOPS).",
        ),
        Device(
            name="v100",
            peak_fp32_flops=15.7e12,
            # V100 tensor cores do FP16 only (125 TFLOPS); there is no TF32 path for fp32.
            peak_tensor_flops=None,
            memory_gb=16,
            source="NVIDIA Tesla V100 datasheet, SXM2 variant: 15.7 TFLOPS FP32, 125 TFLOPS "
            "FP16 tensor (not TF32, so not counted here), 16 GB HBM2 (a 32 GB variant exists).",
        ),
        Device(
            name="a100",
            peak_fp32_flops=19.5e12,
            peak_tensor_flops=156e12,
            memory_gb=40,
            source="NVIDIA A100 Tensor Core GPU datasheet, SXM4 40GB: 19.5 TFLOPS FP32, "
            "156 TFLOPS TF32 tensor dense (312 with sparsity); an 80 GB variant exists.",
        ),
        Device(
            name="h100",
            peak_fp32_flops=67e12,
            peak_tensor_flops=494.7e12,
            memory_gb=80,
            source="NVIDIA H100 datasheet, SXM5: 67 TFLOPS FP32, 989 TFLOPS TF32 tensor with "
            "sparsity; dense 494.7 TFLOPS per the NVIDIA H100 (Hopper) architecture "
            "whitepaper; 80 GB HBM3.",
        ),
        Device(
            name="cpu-generic",
            peak_fp32_flops=1e12,
            peak_tensor_flops=None,
            memory_gb=64,
            source="ROUGH PLACEHOLDER, not a datasheet figure: order of magnitude of a "
            "16-core AVX2 server CPU (16 cores x ~2.5 GHz x 32 FP32 FLOP/cycle ~ 1.3 TFLOPS, "
            "rounded down); 64 GB is arbitrary. Use only for smoke tests.",
        ),
    ]
}


def get_device(name: str) -> Device:
    """The device called `name`; ValueError naming the known devices if there is none."""
    try:
        return DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown device '{name}' (known: {', '.join(sorted(DEVICES))})") from None
