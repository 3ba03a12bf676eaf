"""Placement-aware throughput model of a training job in a shared cluster.

A job's step time is ``compute_s * interference + comm_s(placement)``; its speed is one step
per step time. The parts (a documented model, not a measurement; every constant is a
parameter of ``SpeedModel``):

* **compute_s**: forward + backward of one step at the workload's default batch per worker on
  the cluster's GPU, from the workload profile's FLOPs (``runners.sim.compute``'s rule:
  backward = 2x forward, ``efficiency`` of the fp32 peak). Data parallel: per-worker batch fixed.
* **comm_s**, all-reduce: a ring over the job's workers moves ``2 (w-1)/w * M`` bytes through
  the slowest link: the intra-server bandwidth when all workers share one server, else the
  NIC share of the busiest server the job uses. PS: each worker pushes and pulls ``M`` bytes
  split evenly over the ``p`` PSs; traffic between a worker and a PS on the same server is
  local (free); the step waits for the most loaded NIC (a PS's or a worker's).
* **NIC sharing**: a server's NIC is split evenly among the jobs that send across servers from
  it (max-min fairness without the water-filling).
* **interference**: jobs on the same server slow each other's compute; ``interference[a][b]``
  is how much a job of model b slows one of model a. The matrix is seeded and documented, not
  measured: uniform in ``[0, max_interference]`` (Harmony's measured matrix is not public).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache

import workloads
from workloads import devices
from workloads.traces import JOB_MODELS, Job

BACKWARD_RATIO = 2.0


@dataclass(frozen=True)
class ModelSpeed:
    compute_s: float  # one step (forward + backward) on one worker
    model_bytes: float


@cache
def model_speed(model: str, gpu: str, efficiency: float) -> ModelSpeed:
    profile = workloads.load_profile(model)
    rate = devices.get_device(gpu).peak_fp32_flops * efficiency
    compute = profile.total_fwd_flops * profile.default_batch_size * (1 + BACKWARD_RATIO) / rate
    return ModelSpeed(compute, float(profile.total_param_bytes))


@dataclass(frozen=True)
class SpeedModel:
    gpu: str = "v100"
    efficiency: float = 0.5
    nic_gbps: float = 25.0
    intra_gbps: float = 100.0  # NVLink/PCIe between GPUs of one server (ours)
    max_interference: float = 0.3
    seed: int = 0
    models: tuple[str, ...] = JOB_MODELS
    interference: dict[str, dict[str, float]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        rng = random.Random(f"interference:{self.seed}")
        matrix = {
            a: {b: rng.uniform(0.0, self.max_interference) for b in self.models}
            for a in self.models
        }
        object.__setattr__(self, "interference", matrix)

    def speed(self, model: str) -> ModelSpeed:
        return model_speed(model, self.gpu, self.efficiency)

    def isolated_rate(self, job: Job, gpus_per_server: int, ps_pool: bool = False) -> float:
        """Steps per second at the job's requested size, packed as tightly as possible on
        servers of ``gpus_per_server`` GPUs and alone (how a trace's duration becomes work);
        with ``ps_pool`` the PSs sit on their own machines, one per machine."""
        placement = _packed(job, gpus_per_server, ps_pool)
        return 1.0 / self.step_time(job, placement, {s: 1 for s, _, _ in placement})

    def step_time(
        self,
        job: Job,
        placement: Iterable[tuple[int, int, int]],
        nic_users: dict[int, int],
        neighbours: Mapping[int, Iterable[str]] | None = None,
        hurt: Mapping[int, float] | None = None,
    ) -> float:
        """Seconds per step of ``job`` placed as ``(server, workers, ps)`` triples, with
        ``nic_users[server]`` jobs sending across servers from each server and
        ``neighbours[server]`` the models of the other jobs there; or, instead of
        ``neighbours``, ``hurt[server]`` = the summed interference on a job of this model from
        every job there, this one included (the simulator keeps it up to date)."""
        placement = [p for p in placement if p[1] or p[2]]
        speed = self.speed(job.model)
        slow = 1.0
        row = self.interference.get(job.model, {})
        if hurt is not None:
            own = row.get(job.model, 0.0)
            for server, _, _ in placement:
                slow = max(slow, 1.0 + hurt.get(server, 0.0) - own)
        elif neighbours:
            for server, _, _ in placement:
                models = neighbours.get(server, ())
                slow = max(slow, 1.0 + sum(row.get(m, 0.0) for m in models))
        compute = speed.compute_s * slow
        nic = self.nic_gbps * 1e9 / 8
        m = speed.model_bytes
        if job.arch == "ps" and job.ps > 0:
            workers = sum(w for _, w, _ in placement)
            ps = sum(p for _, _, p in placement)
            worst = 0.0
            for server, w_here, p_here in placement:
                share = nic / max(1, nic_users.get(server, 1))
                # PSs here serve the workers elsewhere; workers here reach the PSs elsewhere.
                ps_bytes = 2 * m / ps * p_here * (workers - w_here)
                worker_bytes = 2 * m * w_here * (ps - p_here) / ps
                worst = max(worst, max(ps_bytes, worker_bytes) / share)
            return compute + worst
        workers = sum(w for _, w, _ in placement)
        if workers <= 1:
            return compute
        if len(placement) == 1:
            link = self.intra_gbps * 1e9 / 8
        else:
            link = min(nic / max(1, nic_users.get(s, 1)) for s, _, _ in placement)
        return compute + 2 * (workers - 1) / workers * m / link


def _packed(job: Job, gpus_per_server: int, ps_pool: bool = False) -> list[tuple[int, int, int]]:
    """Workers filled server by server; PSs spread round-robin over the same servers (or one
    per machine of a PS pool)."""
    out: list[list[int]] = []
    left = job.workers
    per_server = max(1, gpus_per_server)
    while left > 0:
        n = min(left, per_server)
        out.append([len(out), n, 0])
        left -= n
    if ps_pool:
        out.extend([len(out) + k, 0, 1] for k in range(job.ps))
        return [tuple(x) for x in out]  # type: ignore[misc]
    for k in range(job.ps):
        out[k % len(out)][2] += 1
    return [tuple(x) for x in out]  # type: ignore[misc]
