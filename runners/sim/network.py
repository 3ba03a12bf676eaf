"""Alpha-beta cost models of collective communication."""

from __future__ import annotations

from dataclasses import dataclass

OPS = ("allreduce", "reduce_scatter", "all_gather")


@dataclass(frozen=True)
class RingAllReduce:
    """Ring all-reduce among ``workers`` ranks, each with a full-duplex NIC.

    ``T(S) = 2(n-1)*alpha + 2(n-1)/n * S / B``: each rank sends and receives 2(n-1)/n of the
    tensor in 2(n-1) steps (the standard alpha-beta form; research/comm.md section 1).
    """

    workers: int
    bandwidth_bytes_per_s: float
    latency_s: float

    def time_s(self, size_bytes: int, op: str = "allreduce") -> float:
        """Duration of one collective. ``reduce_scatter`` and ``all_gather`` are each one half
        of the ring all-reduce: ``(n-1)*alpha + (n-1)/n * S / B`` (DeAR's split)."""
        n = self.workers
        if n <= 1 or size_bytes <= 0:
            return 0.0
        steps = 2 * (n - 1) if op == "allreduce" else n - 1
        if op not in OPS:
            raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
        return steps * self.latency_s + steps / n * size_bytes / self.bandwidth_bytes_per_s

    @classmethod
    def from_gbps(cls, workers: int, bandwidth_gbps: float, latency_us: float) -> RingAllReduce:
        return cls(workers, bandwidth_gbps * 1e9 / 8, latency_us * 1e-6)
