"""Alpha-beta cost models of collective communication."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

OPS = ("allreduce", "reduce_scatter", "all_gather", "broadcast")


@dataclass(frozen=True)
class RingAllReduce:
    """Ring all-reduce among ``workers`` ranks, each with a full-duplex NIC.

    ``T(S) = 2(n-1)*alpha + 2(n-1)/n * S / B``: each rank sends and receives 2(n-1)/n of the
    tensor in 2(n-1) steps (the standard alpha-beta form; research/comm.md section 1).
    """

    workers: int
    bandwidth_bytes_per_s: float
    latency_s: float
    reduce_scatter_cost: float = 0.5
    all_gather_cost: float = 0.5

    def time_s(
        self, size_bytes: int, op: str = "allreduce", bandwidth_factor: float = 1.0
    ) -> float:
        """Duration of one collective. ``reduce_scatter`` and ``all_gather`` each take their
        ``*_cost`` fraction of the all-reduce of the same tensor. 0.5 each is the ring's split,
        ``(n-1)*alpha + (n-1)/n * S / B`` (DeAR's model, NCCL's ring); a backend that builds
        them otherwise differs (gloo's reduce-scatter is a whole all-reduce: measured by
        ``python -m runners calibrate``, cluster fields of the same names). ``bandwidth_factor``:
        the slowest link's share of the bandwidth (a NIC straggler; the ring runs at its rate).
        """
        if bandwidth_factor != 1.0:
            slow = dataclasses.replace(
                self, bandwidth_bytes_per_s=self.bandwidth_bytes_per_s * bandwidth_factor
            )
            return slow.time_s(size_bytes, op)
        n = self.workers
        if n <= 1 or size_bytes <= 0:
            return 0.0
        if op not in OPS:
            raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
        if op == "broadcast":  # a chain from the root: n-1 hops, every link carries it once
            return (n - 1) * self.latency_s + size_bytes / self.bandwidth_bytes_per_s
        cost = {"reduce_scatter": self.reduce_scatter_cost, "all_gather": self.all_gather_cost}
        if op == "allreduce" or cost[op] != 0.5:
            steps = 2 * (n - 1)
            full = steps * self.latency_s + steps / n * size_bytes / self.bandwidth_bytes_per_s
            return full if op == "allreduce" else cost[op] * full
        steps = n - 1  # the ring's half, computed as such (bit for bit as before the fields)
        return steps * self.latency_s + steps / n * size_bytes / self.bandwidth_bytes_per_s

    def link_bytes(self, size_bytes: int, op: str = "allreduce") -> float:
        """The bytes each rank's link carries in one collective: the bandwidth term of
        ``time_s`` times the bandwidth (``2(n-1)/n`` of the size for an all-reduce, times its
        cost for a split collective)."""
        n = self.workers
        if n <= 1 or size_bytes <= 0:
            return 0.0
        if op == "broadcast":
            return float(size_bytes)
        per_link = 2 * (n - 1) / n * size_bytes
        if op == "allreduce":
            return per_link
        cost = {"reduce_scatter": self.reduce_scatter_cost, "all_gather": self.all_gather_cost}
        return cost[op] * per_link

    @classmethod
    def from_gbps(
        cls,
        workers: int,
        bandwidth_gbps: float,
        latency_us: float,
        reduce_scatter_cost: float = 0.5,
        all_gather_cost: float = 0.5,
    ) -> RingAllReduce:
        return cls(
            workers,
            bandwidth_gbps * 1e9 / 8,
            latency_us * 1e-6,
            reduce_scatter_cost,
            all_gather_cost,
        )


def lone_time(points: tuple[tuple[int, float], ...], size_bytes: float) -> float:
    """A lone all-reduce's time for ``size_bytes`` from measured ``(bytes, seconds)`` points
    (``cluster.lone_allreduce``, sizes increasing): linear between points, along the line
    through the last two beyond the last (never below the last's time), the first point's
    time below the first (a smaller one pays the same trips)."""
    if not points:
        raise ValueError("no lone all-reduce points")
    if size_bytes <= points[0][0] or len(points) == 1:
        return points[0][1]
    for (s0, t0), (s1, t1) in zip(points, points[1:], strict=False):
        if size_bytes <= s1:
            return t0 + (t1 - t0) * (size_bytes - s0) / (s1 - s0)
    (s0, t0), (s1, t1) = points[-2], points[-1]
    return max(t1, t1 + (t1 - t0) * (size_bytes - s1) / (s1 - s0))
