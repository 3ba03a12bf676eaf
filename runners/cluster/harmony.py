"""Harmony: deep-RL placement of a new job's workers and PSs (Bao, Peng, Wu, INFOCOM 2019).

What the paper gives (``research/cluster.md`` §2) and how it is built here:

* **MDP, one task per action.** A new job's tasks are placed one at a time, workers first, then
  PSs. The action is one server; **invalid actions are masked** (a server without room for the
  task, or in the wrong pool: workers on GPU servers, PSs on ``sim.ps_hosts``) and the softmax
  is renormalised over the rest, so an infeasible server is never chosen.
* **State** (ours, after the paper's (x, r, w, p, v, d)): per server, its free GPU/CPU/memory as
  fractions of its capacity, the interference the jobs there put on this job's model
  (``sim.hurt_on``), the interference this job would put on them, how many jobs it holds, its
  NIC users (``sim.cross``), how many of this job's workers and PSs are already there, whether the
  job's remaining workers would fit there, whether all of the job's remaining tasks would, the
  GPUs it would have left after the remaining workers (the fragmentation a choice leaves), and
  its pool; per job, its model one-hot, the kind of
  the task being placed, its architecture, the tasks still to place, its size, its per-task
  demands and its compute/communication profile; for the cluster, the number of jobs waiting
  and the fraction of GPUs in use. The paper's state covers every concurrent job
  (a padded M x 2N matrix); ours describes the other jobs through per-server summaries, so one
  network works for any number of servers (a policy trained on 8 servers runs on 32).
* **Policy** (ours: sizes unknown in the paper): an actor-critic pair of small MLPs. The actor
  scores each server with one MLP shared by all servers (input: the server's features and the
  job's); the critic reads the mean and max of the server features and the job's features.
  Inference is **deterministic**: the argmax of the masked logits (ties: the lowest server id);
  the actor runs in NumPy at inference (copied from the torch weights) for speed.
* **Reward**, two choices (``TrainConfig.reward``; the default is the paper's ``"interval"``):

  - ``"interval"`` (the paper's, after DL2): the cluster-wide normalised progress,
    ``R(t) = sum over running jobs of rate_j / work_j`` (fraction of each job done per second),
    recorded after every event of a training simulation. A job's placement made at ``t0``
    gets the discounted progress that follows, ``integral_{t0} exp(-(t - t0) / tau) R(t) dt``
    (in jobs), as the return of each of its tasks. The paper uses fixed intervals and a
    discount factor; ours is the continuous-time limit, with ``tau = interval_tau_s`` (ours:
    the paper's interval and discount are not published). Returns are divided by their
    episode's mean (ours: an episode-level baseline, since traces differ in load far more than
    placements differ in effect).
  - ``"placement"`` (ours): the job's normalised speed under the simulator's throughput model,
    ``isolated step time / placed step time`` (in (0, 1]; interference, NIC sharing and
    communication included), minus ``neighbour_weight`` x the interference it adds to the
    jobs already on its servers; immediate, one decision sequence per job, undiscounted.

  A sequence that dead-ends (a task with no feasible server although a heuristic could place
  the job) gets ``dead_end_reward`` under ``"placement"``; under ``"interval"`` the fallback
  placement's consequences are its return like any other.
* **Auxiliary reward-prediction model** (paper §2.5): an MLP from a full placement's features
  (model one-hot, sizes, and per used server: its workers, PSs, interference, NIC users) to the
  reward (the placed job's speed relative to alone; under ``"placement"`` also the neighbour
  term). Training first logs (placement features, reward) samples from simulations with
  heuristic and random placements (the "historical trace"), fits the model, and then the agent
  trains on **predicted** rewards, computing the throughput model's reward only for a fraction
  ``audit_fraction`` of placements, which are added to the samples so the model is refit every
  epoch (the paper's online refinement). Under ``"interval"`` the progress ``R(t)`` is summed
  from each running job's predicted speed (made when it was placed: a slow-down from jobs
  placed beside it later is not in it; ours), as the paper computes its reward from the
  predicted speeds. ``TrainConfig(reward_model=False)`` turns it off: every reward then comes
  from the throughput model.
* **Job-aware exploration**: for each new job, with probability omega (decaying linearly from
  ``omega_start`` to ``omega_end`` over the epochs) every task of the job is placed by a
  heuristic (bin packing, load balancing or least-interference, drawn uniformly) instead of the
  policy; otherwise actions are sampled from the policy. An entropy bonus is also used.
* **Experience replay**: a FIFO buffer of (state, mask, action, return) samples; after every
  episode, minibatch actor-critic updates (advantage = return - value).

* **Warm start** (``TrainConfig.imitate``; ours, after DL2 by the same group, whose agent first
  learns by supervised imitation of an existing scheduler): before reinforcement learning, the
  actor is fitted by cross-entropy to a heuristic's per-task choices on ``imitation_episodes``
  traces. On by default (bin packing): without it, 7-minute trainings stayed 13-47% behind
  bin packing; with it the policy starts where bin packing is and reinforcement learning
  moves it from there (README, "Harmony").
* **Checkpoint selection** (``keep_best``; ours): after every epoch (and after the warm start)
  the policy is scored on ``val_traces`` validation traces; the checkpoint keeps the weights
  with the lowest mean validation JCT. Claims are measured on other, held-out traces
  (``harmony evaluate``), never on the validation ones.

Ours, beyond the paper: when the policy's sequence dead-ends but the job fits, the placement
falls back to ``fallback`` (least-interference by default) rather than leaving a job that fits
waiting; ``HarmonyPlacement.fallbacks`` counts how often. ``random_placement`` (each task on a
uniformly random feasible server, seeded; same fallback) is the comparison baseline.

Checkpoints are versioned files ``harmony-v{N}.pt`` (torch state dicts + metadata) with a
``harmony-v{N}.json`` beside them (config, seed, code version, training curve).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import math
import random
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from workloads.traces import JOB_MODELS, Job, philly_like

from .policies import SCHEDULERS, ClusterPolicy, Fifo, bin_packing, lif, load_balance
from .sim import ClusterConfig, ClusterSim, Placement

CODE_VERSION = "harmony-3"  # bump when features or networks change (checkpoints record it)

N_SERVER_FEATURES = 15
N_JOB_FEATURES = len(JOB_MODELS) + 16
RM_TOP_SERVERS = 4  # servers described individually in the reward model's input
N_RM_FEATURES = len(JOB_MODELS) + 5 + 5 * RM_TOP_SERVERS

HEURISTICS: dict[str, Callable[[ClusterSim, Job], Placement | None]] = {
    "bin-packing": bin_packing,
    "load-balance": load_balance,
    "lif": lif,
}


# -- features ----------------------------------------------------------------------------------


class _JobView:
    """What stays fixed while one job's tasks are placed: per-server static features and the
    job's own; the dynamic columns (free resources, own tasks) are updated per task."""

    def __init__(self, sim: ClusterSim, job: Job) -> None:
        n = len(sim.free)
        self.n = n
        caps = np.array(sim.config.capacities(), dtype=np.float64)
        self.inv_caps = np.where(caps > 0, 1.0 / np.maximum(caps, 1e-12), 0.0)
        self.free = np.array(sim.free, dtype=np.float64)
        self.worker_pool = np.zeros(n, dtype=bool)
        self.worker_pool[list(sim.worker_servers)] = True
        self.ps_pool = np.zeros(n, dtype=bool)
        self.ps_pool[list(sim.ps_hosts)] = True
        self.ps_pool_used = sim.config.ps_servers > 0
        model = job.model
        matrix = sim.config.speed.interference
        states = sim.states
        hurt = np.zeros(n)
        inflicted = np.zeros(n)
        jobs_here = np.zeros(n)
        for s in range(n):
            on = sim.on_server[s]
            if on:
                hurt[s] = sim.hurt_on[s].get(model, 0.0)
                jobs_here[s] = len(on)
                inflicted[s] = sum(matrix.get(states[k].job.model, {}).get(model, 0.0) for k in on)
        self.hurt, self.inflicted = hurt, inflicted
        x = np.zeros((n, N_SERVER_FEATURES), dtype=np.float32)
        x[:, 3] = hurt
        x[:, 4] = inflicted
        x[:, 5] = jobs_here / 8.0
        x[:, 6] = np.array(sim.cross, dtype=np.float64) / 4.0
        x[:, 11] = self.worker_pool
        x[:, 12] = self.ps_pool
        self.x = x
        self.counts = np.zeros((n, 2))
        self.job = job
        self.worker_demand = np.array(job.worker_demand, dtype=np.float64)
        self.ps_demand = np.array(job.ps_demand, dtype=np.float64)
        speed = sim.config.speed.speed(model)
        nic = sim.config.speed.nic_gbps * 1e9 / 8
        base = np.zeros(N_JOB_FEATURES, dtype=np.float32)
        if model in JOB_MODELS:
            base[JOB_MODELS.index(model)] = 1.0
        k = len(JOB_MODELS)
        base[k + 1] = job.arch == "ps"
        base[k + 4] = job.workers / 8.0
        base[k + 5] = job.ps / 8.0
        cap = caps[0]
        base[k + 6 : k + 9] = self.worker_demand / np.maximum(cap, 1e-12)
        base[k + 9 : k + 12] = self.ps_demand / np.maximum(caps[list(sim.ps_hosts)[0]], 1e-12)
        base[k + 12] = math.log10(max(speed.compute_s, 1e-6)) / 3.0
        base[k + 13] = math.log10(max(speed.model_bytes / nic / speed.compute_s, 1e-6)) / 3.0
        # The rest of the cluster (the paper's state covers every concurrent job; ours
        # summarises it): jobs waiting, and the fraction of the GPUs in use.
        base[k + 14] = len(sim.pending) / 16.0
        gpus = sum(caps[s][0] for s in sim.worker_servers)
        base[k + 15] = 1.0 - sum(sim.free[s][0] for s in sim.worker_servers) / max(gpus, 1e-12)
        self.base = base

    def state(
        self, kind: int, left_w: int, left_p: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(server features, job features, mask) for placing a task of ``kind`` (0 worker,
        1 PS) with ``left_w`` workers and ``left_p`` PSs still to place, this one included."""
        x = self.x.copy()
        x[:, 0:3] = self.free * self.inv_caps
        job = self.job
        x[:, 7] = self.counts[:, 0] / max(1, job.workers)
        x[:, 8] = self.counts[:, 1] / max(1, job.ps)
        x[:, 9] = self.free[:, 0] + 1e-9 >= left_w * self.worker_demand[0]
        x[:, 10] = self.counts.sum(axis=1) > 0
        # Does everything left of the job fit here (workers, and PSs unless they go to a PS
        # pool), and the GPUs this server would have left after the remaining workers (as a
        # fraction of its GPUs; -1 where they do not fit): the fragmentation a choice leaves.
        rest = left_w * self.worker_demand + (0 if self.ps_pool_used else left_p) * self.ps_demand
        x[:, 13] = np.all(self.free + 1e-9 >= rest, axis=1)
        after = (self.free[:, 0] - left_w * self.worker_demand[0]) * self.inv_caps[:, 0]
        gpu_server = self.inv_caps[:, 0] > 0  # a PS machine has no GPUs: nothing "fits" there
        x[:, 14] = np.where((after >= -1e-9) & gpu_server, after, -1.0)
        j = self.base.copy()
        k = len(JOB_MODELS)
        j[k] = kind
        j[k + 2] = left_w / 8.0
        j[k + 3] = left_p / 8.0
        demand = self.worker_demand if kind == 0 else self.ps_demand
        pool = self.worker_pool if kind == 0 else self.ps_pool
        mask = pool & np.all(self.free + 1e-9 >= demand, axis=1)
        return x, j, mask

    def take(self, server: int, kind: int) -> None:
        self.free[server] -= self.worker_demand if kind == 0 else self.ps_demand
        self.counts[server, kind] += 1


log = logging.getLogger("runners")


def _tasks(job: Job) -> list[int]:
    return [0] * job.workers + [1] * job.ps


def placement_features(sim: ClusterSim, job: Job, placement: Placement) -> np.ndarray:
    """The reward model's input for ``job`` placed as ``placement`` now (before it starts)."""
    f = np.zeros(N_RM_FEATURES, dtype=np.float32)
    if job.model in JOB_MODELS:
        f[JOB_MODELS.index(job.model)] = 1.0
    k = len(JOB_MODELS)
    used = [(s, w, p) for s, (w, p) in placement.items() if w or p]
    f[k] = job.arch == "ps"
    f[k + 1] = job.workers / 8.0
    f[k + 2] = job.ps / 8.0
    f[k + 3] = len(used) / 8.0
    speed = sim.config.speed.speed(job.model)
    nic = sim.config.speed.nic_gbps * 1e9 / 8
    f[k + 4] = math.log10(max(speed.model_bytes / nic / speed.compute_s, 1e-6)) / 3.0
    matrix = sim.config.speed.interference
    used.sort(key=lambda t: (-(t[1] + t[2]), t[0]))
    at = k + 5
    for s, w, p in used[:RM_TOP_SERVERS]:
        inflicted = sum(
            matrix.get(sim.states[o].job.model, {}).get(job.model, 0.0) for o in sim.on_server[s]
        )
        f[at : at + 5] = (
            w / 8.0,
            p / 8.0,
            sim.hurt_on[s].get(job.model, 0.0),
            sim.cross[s] / 4.0,
            inflicted,
        )
        at += 5
    return f


def placement_reward(
    sim: ClusterSim, job: Job, placement: Placement, neighbour_weight: float = 0.0
) -> float:
    """The throughput model's reward of ``job`` placed as ``placement`` now: isolated step time
    / placed step time (in (0, 1]), minus ``neighbour_weight`` x the interference it adds to
    the jobs already on its servers."""
    speed = sim.config.speed
    model = job.model
    own = speed.interference.get(model, {}).get(model, 0.0)
    triples = [(s, w, p) for s, (w, p) in placement.items() if w or p]
    spread = len(triples) > 1
    hurt = {s: sim.hurt_on[s].get(model, 0.0) + own for s, _, _ in triples}
    nic = {s: sim.cross[s] + spread for s, _, _ in triples}
    placed = speed.step_time(job, triples, nic, hurt=hurt)
    isolated = 1.0 / speed.isolated_rate(job, sim.config.gpus_per_server, sim.config.ps_servers > 0)
    reward = min(1.0, isolated / placed)
    if neighbour_weight:
        matrix = speed.interference
        neighbours = set().union(*(sim.on_server[s] for s, _, _ in triples))
        reward -= neighbour_weight * sum(
            matrix.get(sim.states[o].job.model, {}).get(model, 0.0) for o in neighbours
        )
    return reward


# -- networks ----------------------------------------------------------------------------------


def _mlp(n_in: int, hidden: Sequence[int], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(n_in, h), nn.ReLU()]
        n_in = h
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Actor: a shared per-server scorer over [server features, job features]; critic: an MLP
    over [mean and max of server features, job features]."""

    def __init__(self, hidden: Sequence[int] = (64, 64)) -> None:
        super().__init__()
        self.hidden = tuple(hidden)
        self.actor = _mlp(N_SERVER_FEATURES + N_JOB_FEATURES, hidden, 1)
        self.critic = _mlp(2 * N_SERVER_FEATURES + N_JOB_FEATURES, hidden, 1)

    def forward(
        self, x: torch.Tensor, j: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, M, Fs), j: (B, Fj), mask: (B, M) -> masked logits (B, M), value (B,)."""
        b, m, _ = x.shape
        joint = torch.cat([x, j[:, None, :].expand(b, m, j.shape[1])], dim=2)
        logits = self.actor(joint).squeeze(2).masked_fill(~mask, -1e9)
        pooled = torch.cat([x.mean(dim=1), x.amax(dim=1), j], dim=1)
        return logits, self.critic(pooled).squeeze(1)


class _NumpyActor:
    """The actor's forward pass in NumPy (inference: no torch overhead per task). The first
    layer is split into its server and job parts so the job part is computed once per task."""

    def __init__(self, actor: nn.Sequential) -> None:
        linears = [m for m in actor if isinstance(m, nn.Linear)]
        self.layers = [
            (m.weight.detach().double().numpy().T.copy(), m.bias.detach().double().numpy().copy())
            for m in linears
        ]
        w0, _ = self.layers[0]
        self.w0_server = w0[:N_SERVER_FEATURES]
        self.w0_job = w0[N_SERVER_FEATURES:]

    def logits(self, x: np.ndarray, j: np.ndarray) -> np.ndarray:
        _, b0 = self.layers[0]
        h = np.maximum(x @ self.w0_server + (j @ self.w0_job + b0), 0.0)
        for w, b in self.layers[1:-1]:
            h = np.maximum(h @ w + b, 0.0)
        w, b = self.layers[-1]
        return (h @ w + b)[:, 0]


class RewardModel(nn.Module):
    """Auxiliary reward prediction: placement features -> reward."""

    def __init__(self, hidden: Sequence[int] = (64, 64)) -> None:
        super().__init__()
        self.hidden = tuple(hidden)
        self.net = _mlp(N_RM_FEATURES, hidden, 1)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.net(f).squeeze(-1)

    def predict(self, f: np.ndarray) -> float:
        with torch.no_grad():
            return float(self(torch.from_numpy(f[None, :]))[0])


def fit_reward_model(
    model: RewardModel,
    features: np.ndarray,
    rewards: np.ndarray,
    steps: int,
    lr: float = 3e-3,
    batch: int = 256,
    seed: int = 0,
) -> list[float]:
    """Supervised MSE fit on logged (features, reward) samples; the full-data loss per step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    f = torch.from_numpy(np.asarray(features, dtype=np.float32))
    r = torch.from_numpy(np.asarray(rewards, dtype=np.float32))
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(f), (min(batch, len(f)),), generator=gen)
        loss = ((model(f[idx]) - r[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            losses.append(float(((model(f) - r) ** 2).mean()))
    return losses


# -- placement rules ---------------------------------------------------------------------------


def _choose(logits: np.ndarray, mask: np.ndarray) -> int:
    """Deterministic masked argmax (ties: the lowest server id); -1 if nothing is feasible."""
    if not mask.any():
        return -1
    return int(np.argmax(np.where(mask, logits, -np.inf)))


def _sample(logits: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    if not mask.any():
        return -1
    z = np.where(mask, logits, -np.inf)
    p = np.exp(z - z.max())
    p /= p.sum()
    return int(rng.choice(len(p), p=p))


Chooser = Callable[[np.ndarray, np.ndarray, np.ndarray, int], int]
"""(server features, job features, mask, task index) -> server (-1: dead end)."""


def _sequential(
    sim: ClusterSim, job: Job, choose: Chooser, log: list | None = None
) -> Placement | None:
    """Place ``job``'s tasks one by one (workers, then PSs) with ``choose``; None at a dead end.
    ``log`` receives (server features, job features, mask, action) per task."""
    view = _JobView(sim, job)
    tasks = _tasks(job)
    left = [job.workers, job.ps]
    placement: Placement = {}
    for i, kind in enumerate(tasks):
        x, j, mask = view.state(kind, left[0], left[1])
        server = choose(x, j, mask, i)
        if server < 0:
            return None
        if not mask[server]:  # never: every chooser is masked
            raise RuntimeError(f"chose infeasible server {server} for job {job.id}")
        if log is not None:
            log.append((x, j, mask, server))
        view.take(server, kind)
        left[kind] -= 1
        placement.setdefault(server, [0, 0])[kind] += 1
    return placement


class HarmonyPlacement:
    """The trained actor as a placement rule ``(sim, job) -> Placement | None``: masked argmax
    per task (deterministic). ``fallback`` places a job whose sequence dead-ends."""

    def __init__(
        self,
        net: ActorCritic,
        fallback: Callable[[ClusterSim, Job], Placement | None] | None = lif,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.net = net
        self.actor = _NumpyActor(net.actor)
        self.fallback = fallback
        self.meta = meta or {}
        self.fallbacks = 0
        self.decisions: list[tuple[int, int, bool]] | None = None  # (job, server, feasible)

    def _choose(self, x: np.ndarray, j: np.ndarray, mask: np.ndarray, i: int) -> int:
        return _choose(self.actor.logits(x, j), mask)

    def __call__(self, sim: ClusterSim, job: Job) -> Placement | None:
        if self.decisions is None:
            placement = _sequential(sim, job, self._choose)
        else:
            log: list = []
            placement = _sequential(sim, job, self._choose, log)
            self.decisions += [(job.id, a, bool(m[a])) for _, _, m, a in log]
        if placement is None and self.fallback is not None:
            placement = self.fallback(sim, job)
            self.fallbacks += placement is not None
        return placement


class RandomPlacement:
    """Each task on a uniformly random feasible server (seeded); same fallback as Harmony."""

    def __init__(
        self,
        seed: int = 0,
        fallback: Callable[[ClusterSim, Job], Placement | None] | None = lif,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.fallback = fallback
        self.fallbacks = 0

    def _choose(self, x: np.ndarray, j: np.ndarray, mask: np.ndarray, i: int) -> int:
        idx = np.flatnonzero(mask)
        return int(self.rng.choice(idx)) if len(idx) else -1

    def __call__(self, sim: ClusterSim, job: Job) -> Placement | None:
        placement = _sequential(sim, job, self._choose)
        if placement is None and self.fallback is not None:
            placement = self.fallback(sim, job)
            self.fallbacks += placement is not None
        return placement


def random_placement(seed: int = 0) -> RandomPlacement:
    return RandomPlacement(seed)


# -- training ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """Training settings. Every constant here is ours: the paper does not publish them.

    Traces: ``philly_like(jobs_per_episode, seed, rate, ps_fraction)`` with durations divided
    by ``duration_scale``, on ``servers`` GPU servers of ``gpus_per_server`` GPUs (``ps_servers``
    PS machines), FIFO scheduling; episode e of epoch k uses trace seed
    ``seed * 100_003 + k * episodes_per_epoch + e``; validation uses ``val_seed`` (held out).

    The arrival rate is ``jobs_per_hour`` when set, else derived from ``load``, the offered GPU
    load (GPU-seconds asked per second / GPUs; ``arrival_rate``). Ours: 0.8, a loaded but stable
    cluster. Above 1 the queue grows without bound, JCT is dominated by waiting and every
    placement that keeps a job on one server ties with bin packing (``harmony evaluate`` prints a
    load sweep, so that regime stays visible). ``servers`` = 6 is the paper's testbed size [V];
    its arrival rate and GPUs per server are not published.
    """

    seed: int = 0
    epochs: int = 12
    episodes_per_epoch: int = 4
    jobs_per_episode: int = 60
    load: float = 0.8
    jobs_per_hour: float = 0.0  # 0: derived from ``load``
    ps_fraction: float = 0.5
    duration_scale: float = 20.0
    servers: int = 6
    gpus_per_server: int = 8
    ps_servers: int = 0
    val_seed: int = 10_001
    val_jobs: int = 100
    hidden: tuple[int, ...] = (64, 64)
    lr: float = 1e-3
    entropy_weight: float = 0.001
    value_weight: float = 0.5
    omega_start: float = 0.5
    omega_end: float = 0.05
    replay_size: int = 20_000
    batch_size: int = 256
    updates_per_episode: int = 20
    neighbour_weight: float = 0.5
    dead_end_reward: float = 0.0
    min_log_prob: float = -5.0  # policy-gradient clamp on replayed actions (see _update)
    reward: str = "interval"  # "interval" (the paper's) or "placement" (ours; see the module)
    interval_tau_s: float = 3600.0  # discount time constant of the "interval" reward (ours)
    reward_model: bool = True  # agent trains on the reward model's predictions (both rewards)
    imitate: str = "bin-packing"  # warm start: imitate this heuristic ("": none; ours, after DL2)
    imitation_episodes: int = 8
    imitation_steps: int = 1500
    val_traces: int = 2  # validation traces (seeds val_seed, val_seed + 1, ...)
    keep_best: bool = True  # the checkpoint keeps the epoch with the best validation JCT
    reward_hidden: tuple[int, ...] = (64, 64)
    reward_warmup_episodes: int = 4
    reward_fit_steps: int = 300
    reward_refit_steps: int = 50
    audit_fraction: float = 0.1
    max_train_s: float = 0.0  # stop after the epoch that crosses this wall time (0: no limit);
    # with a budget, omega decays over whichever ends first, the epochs or the budget

    def arrival_rate(self) -> float:
        """Jobs per hour: ``jobs_per_hour``, or the rate at which the trace's mean GPU-seconds
        per job (``mean_gpu_seconds``) offer ``load`` x the cluster's GPUs."""
        if self.jobs_per_hour > 0:
            return self.jobs_per_hour
        if self.load <= 0:
            raise ValueError("load must be > 0 (or set jobs_per_hour)")
        per_job = mean_gpu_seconds(self.ps_fraction, self.duration_scale)
        return self.load * self.servers * self.gpus_per_server * 3600.0 / per_job

    def trace(self, seed: int, n_jobs: int) -> tuple[Job, ...]:
        jobs = philly_like(
            n_jobs, seed=seed, jobs_per_hour=self.arrival_rate(), ps_fraction=self.ps_fraction
        )
        return tuple(
            dataclasses.replace(j, duration_s=j.duration_s / self.duration_scale) for j in jobs
        )

    def cluster(self) -> ClusterConfig:
        return ClusterConfig(
            servers=self.servers, gpus_per_server=self.gpus_per_server, ps_servers=self.ps_servers
        )


class _ProgressSim(ClusterSim):
    """A training simulation that records the cluster-wide normalised progress rate
    ``R(t) = sum_j rate_j / work_j`` after every event (piecewise constant in between).

    With ``predicted`` (job id -> the reward model's predicted speed relative to alone, made
    when the job was placed), a job's term is ``predicted / duration`` instead of the
    simulator's true rate: the agent then trains against the reward model, as in the paper.
    The prediction is made once, at placement, so a slow-down from jobs placed beside it later
    is not in it (ours)."""

    def __init__(
        self, *args: Any, predicted: dict[int, float] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.progress_t: list[float] = []
        self.progress_r: list[float] = []
        self.predicted = predicted

    def _update_rates(self) -> None:
        super()._update_rates()
        if self.predicted is None:
            r = sum(st.rate / st.work for st in self.running.values() if st.work > 0)
        else:
            r = 0.0
            for job_id, st in self.running.items():
                guess = self.predicted.get(job_id)
                if guess is None:
                    r += st.rate / st.work if st.work > 0 else 0.0
                elif st.job.duration_s > 0:
                    r += max(0.0, guess) / st.job.duration_s
        if self.progress_t and self.progress_t[-1] == self.now:
            self.progress_r[-1] = r
        else:
            self.progress_t.append(self.now)
            self.progress_r.append(r)

    def discounted_progress(self, t0: np.ndarray, tau: float) -> np.ndarray:
        """``integral_{t0} exp(-(t - t0) / tau) R(t) dt`` for each decision time in ``t0``."""
        t = np.asarray(self.progress_t)
        r = np.asarray(self.progress_r)
        if not len(t):
            return np.zeros(len(t0))
        ends = np.append(t[1:], t[-1])  # R is 0 after the last event
        lo = np.maximum(t[None, :], t0[:, None])
        hi = np.maximum(ends[None, :], t0[:, None])
        w = np.exp(-(lo - t0[:, None]) / tau) - np.exp(-(hi - t0[:, None]) / tau)
        return (w * r[None, :]).sum(axis=1) * tau


@functools.cache
def mean_gpu_seconds(ps_fraction: float, duration_scale: float, sample: int = 20_000) -> float:
    """Mean GPUs x duration per job of ``philly_like`` (a fixed 20,000-job sample, seed 0; the
    durations are heavy-tailed, so this is an estimate, but a deterministic one)."""
    jobs = philly_like(sample, seed=0, jobs_per_hour=1.0, ps_fraction=ps_fraction)
    return sum(j.workers * j.duration_s for j in jobs) / len(jobs) / duration_scale


class _Trainer:
    """The placement rule used while training: job-aware omega-greedy over the heuristics,
    sampling from the policy otherwise; logs samples and rewards."""

    def __init__(self, cfg: TrainConfig, net: ActorCritic, rm: RewardModel | None) -> None:
        self.cfg = cfg
        self.net = net
        self.actor = _NumpyActor(net.actor)
        self.rm = rm
        self.rng = random.Random(f"harmony-train:{cfg.seed}")
        self.np_rng = np.random.default_rng(cfg.seed)
        self.omega = cfg.omega_start
        self.samples: list[tuple[np.ndarray, np.ndarray, np.ndarray, int, float]] = []
        self.times: list[float] = []  # decision time of each sample ("interval" reward)
        self.rm_log: list[tuple[np.ndarray, float]] = []
        self.rewards: list[float] = []
        self.true_rewards: list[float] = []
        self.random_only = False  # warm-up: random and heuristic placements only
        self.imitate: str = ""  # warm start: every job placed by this heuristic
        self.predicted: dict[int, float] = {}  # "interval" + reward model: job -> speed

    def refresh(self) -> None:
        self.actor = _NumpyActor(self.net.actor)

    def _reward(self, sim: ClusterSim, job: Job, placement: Placement) -> float:
        """The placement's reward (``"placement"``) or predicted speed (``"interval"``, which
        has no neighbour term): from the reward model, audited with the throughput model's
        true value for a fraction of placements (logged to refit the model)."""
        cfg = self.cfg
        use_model = self.rm is not None and not self.random_only
        weight = cfg.neighbour_weight if cfg.reward == "placement" else 0.0
        if not use_model or self.rng.random() < cfg.audit_fraction:
            r = placement_reward(sim, job, placement, weight)
            self.rm_log.append((placement_features(sim, job, placement), r))
            self.true_rewards.append(r)
            if not use_model:
                return r
        return self.rm.predict(placement_features(sim, job, placement))  # type: ignore[union-attr]

    def __call__(self, sim: ClusterSim, job: Job) -> Placement | None:
        log: list = []
        heuristic: Placement | None = None
        if self.imitate:
            heuristic = HEURISTICS[self.imitate](sim, job)
        elif self.random_only or self.rng.random() < self.omega:
            name = self.rng.choice([*HEURISTICS, "random"] if self.random_only else [*HEURISTICS])
            if name != "random":
                heuristic = HEURISTICS[name](sim, job)
        if heuristic is not None:
            left = {s: list(c) for s, c in heuristic.items()}

            def choose(x: np.ndarray, j: np.ndarray, mask: np.ndarray, i: int) -> int:
                kind = 0 if i < job.workers else 1
                server = min(s for s, c in left.items() if c[kind] > 0)
                left[server][kind] -= 1
                return server

        elif self.random_only:

            def choose(x: np.ndarray, j: np.ndarray, mask: np.ndarray, i: int) -> int:
                idx = np.flatnonzero(mask)
                return int(self.np_rng.choice(idx)) if len(idx) else -1

        else:

            def choose(x: np.ndarray, j: np.ndarray, mask: np.ndarray, i: int) -> int:
                return _sample(self.actor.logits(x, j), mask, self.np_rng)

        placement = _sequential(sim, job, choose, log)
        dead_end = placement is None
        if dead_end:
            placement = lif(sim, job)
            if placement is None:
                return None  # the job does not fit now: nothing learned
        if self.cfg.reward == "interval":
            reward = math.nan  # filled in after the episode (_Trainer.run)
            if self.rm is not None:
                self.predicted[job.id] = self._reward(sim, job, placement)
        elif dead_end:
            reward = self.cfg.dead_end_reward
        else:
            reward = self._reward(sim, job, placement)
        for x, j, mask, a in log:
            self.samples.append((x, j, mask, a, reward))
            self.times.append(sim.now)
        if self.cfg.reward != "interval":
            self.rewards.append(reward)
        return placement

    def run(self, jobs: tuple[Job, ...], cluster: ClusterConfig) -> None:
        """One training episode; afterwards ``samples`` hold their returns."""
        self.samples, self.times = [], []
        self.predicted = {}
        predicted = self.predicted if self.rm is not None and not self.random_only else None
        sim = _ProgressSim(jobs, cluster, Fifo(), self, predicted=predicted)
        sim.run()
        if self.cfg.reward == "interval" and self.samples:
            returns = sim.discounted_progress(np.asarray(self.times), self.cfg.interval_tau_s)
            # Relative to the episode's mean (ours): traces differ in load far more than
            # placements differ in effect, so this removes the episode's level from the return.
            returns = returns / max(float(returns.mean()), 1e-12)
            self.samples = [
                (*smp[:4], float(g)) for smp, g in zip(self.samples, returns, strict=True)
            ]
            self.rewards.extend(returns.tolist())


def evaluate(
    place: Callable[[ClusterSim, Job], Placement | None],
    jobs: tuple[Job, ...],
    config: ClusterConfig,
    scheduler: str = "fifo",
) -> dict[str, float]:
    """Run one simulation and return its metrics."""
    return ClusterSim(jobs, config, SCHEDULERS[scheduler](), place).run().metrics


def evaluate_sweep(
    placement: Callable[[ClusterSim, Job], Placement | None],
    base: TrainConfig,
    loads: Sequence[float],
    jobs: int,
    seed: int,
    traces: int,
    servers: int | None = None,
) -> list[dict[str, Any]]:
    """Harmony, random placement and every placement heuristic on the same ``traces`` traces
    (seeds ``seed``, ``seed + 1``, ...) at each offered load: the mean of each metric."""
    rows = []
    for load_ in loads:
        cfg = dataclasses.replace(
            base, load=load_, jobs_per_hour=0.0, servers=servers or base.servers
        )
        traces_ = [cfg.trace(seed + k, jobs) for k in range(traces)]
        rules: dict[str, Callable[[ClusterSim, Job], Placement | None]] = {
            "harmony": placement,
            "random": random_placement(seed),
            **HEURISTICS,
        }
        for name, rule in rules.items():
            ms = [evaluate(rule, t, cfg.cluster()) for t in traces_]
            rows.append({
                "load": load_,
                "rule": name,
                "traces": traces,
                "avg_jct_s": float(np.mean([m["avg_jct_s"] for m in ms])),
                "p95_jct_s": float(np.mean([m["p95_jct_s"] for m in ms])),
            })  # fmt: skip
    return rows


def _next_version(out_dir: Path) -> int:
    versions = [
        int(p.stem.split("-v")[1])
        for p in out_dir.glob("harmony-v*.pt")
        if p.stem.split("-v")[1].isdigit()
    ]
    return max(versions, default=0) + 1


def train(
    config: TrainConfig,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Train a Harmony policy (seeded) and write ``out_dir/harmony-v{N}.pt`` (+ ``.json``);
    return the checkpoint's path."""
    cfg = config
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    started = time.perf_counter()
    net = ActorCritic(cfg.hidden)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    if cfg.reward not in ("placement", "interval"):
        raise ValueError(f"reward must be 'placement' or 'interval', not {cfg.reward!r}")
    rm = RewardModel(cfg.reward_hidden) if cfg.reward_model else None
    trainer = _Trainer(cfg, net, rm)
    cluster = cfg.cluster()
    replay: deque = deque(maxlen=cfg.replay_size)
    gen = torch.Generator().manual_seed(cfg.seed)
    curve: list[dict[str, float]] = []
    rm_curve: list[float] = []

    if rm is not None:  # the "historical trace": heuristic and random placements, true rewards
        trainer.random_only = True
        for e in range(cfg.reward_warmup_episodes):
            trainer.run(cfg.trace(cfg.seed * 100_003 + 50_000 + e, cfg.jobs_per_episode), cluster)
        trainer.random_only = False
        trainer.samples.clear()
        feats = np.stack([f for f, _ in trainer.rm_log])
        rewards = np.array([r for _, r in trainer.rm_log], dtype=np.float32)
        rm_curve = fit_reward_model(rm, feats, rewards, cfg.reward_fit_steps, seed=cfg.seed)
        if progress:
            progress(
                f"reward model: {len(rewards)} samples, mse {rm_curve[0]:.4f} -> {rm_curve[-1]:.4f}"
            )

    if cfg.imitate:
        if cfg.imitate not in HEURISTICS:
            raise ValueError(f"imitate: unknown heuristic {cfg.imitate!r}; {sorted(HEURISTICS)}")
        trainer.imitate = cfg.imitate
        demos: list = []
        for e in range(cfg.imitation_episodes):
            trainer.run(cfg.trace(cfg.seed * 100_003 + 70_000 + e, cfg.jobs_per_episode), cluster)
            demos.extend(trainer.samples)
        trainer.imitate = ""
        trainer.rewards.clear()
        bc = _imitate(net, demos, cfg, gen)
        trainer.refresh()
        if progress:
            progress(f"imitation of {cfg.imitate}: {len(demos)} decisions, loss {bc[0]:.3f} -> "
                     f"{bc[-1]:.3f}")  # fmt: skip

    val_traces = [cfg.trace(cfg.val_seed + k, cfg.val_jobs) for k in range(cfg.val_traces)]

    def validate() -> tuple[float, int]:
        rule = HarmonyPlacement(net)
        jct = float(np.mean([evaluate(rule, t, cluster)["avg_jct_s"] for t in val_traces]))
        return jct, rule.fallbacks

    best_jct, best_epoch = math.inf, -1
    best_state = None
    if cfg.imitate:
        best_jct, _ = validate()
        best_state = {k: v.clone() for k, v in net.state_dict().items()}
        curve.append({"epoch": -1, "val_avg_jct_s": best_jct,
                      "elapsed_s": time.perf_counter() - started})  # fmt: skip
    for epoch in range(cfg.epochs):
        frac = epoch / max(1, cfg.epochs - 1)
        if cfg.max_train_s:  # a time budget: omega decays over the budget instead
            frac = min(1.0, max(frac, (time.perf_counter() - started) / cfg.max_train_s))
        trainer.omega = cfg.omega_start + (cfg.omega_end - cfg.omega_start) * frac
        trainer.rewards.clear()
        trainer.true_rewards.clear()
        audited_before = len(trainer.rm_log)
        losses = []
        for e in range(cfg.episodes_per_epoch):
            seed = cfg.seed * 100_003 + epoch * cfg.episodes_per_epoch + e
            trainer.run(cfg.trace(seed, cfg.jobs_per_episode), cluster)
            replay.extend(trainer.samples)
            if not replay:
                continue
            for _ in range(cfg.updates_per_episode):
                losses.append(_update(net, opt, replay, cfg, gen))
            trainer.refresh()
        rm_mse = math.nan
        if rm is not None and len(trainer.rm_log) > audited_before:
            new = trainer.rm_log[audited_before:]
            with torch.no_grad():
                pred = rm(torch.from_numpy(np.stack([f for f, _ in new])))
                rm_mse = float(((pred - torch.tensor([r for _, r in new])) ** 2).mean())
            feats = np.stack([f for f, _ in trainer.rm_log])
            rewards = np.array([r for _, r in trainer.rm_log], dtype=np.float32)
            fit_reward_model(rm, feats, rewards, cfg.reward_refit_steps, seed=cfg.seed + epoch)
        val_jct, val_fallbacks = validate()
        if val_jct < best_jct:
            best_jct, best_epoch = val_jct, epoch
            best_state = {k: v.clone() for k, v in net.state_dict().items()}
        point = {
            "epoch": epoch,
            "omega": trainer.omega,
            "mean_reward": float(np.mean(trainer.rewards)) if trainer.rewards else math.nan,
            "mean_true_reward": float(np.mean(trainer.true_rewards))
            if trainer.true_rewards
            else math.nan,
            "reward_model_mse": rm_mse,
            "loss": float(np.mean(losses)) if losses else math.nan,
            "val_avg_jct_s": val_jct,
            "val_fallbacks": val_fallbacks,
            "elapsed_s": time.perf_counter() - started,
        }
        curve.append(point)
        if progress:
            progress(
                f"epoch {epoch + 1}/{cfg.epochs}: reward {point['mean_reward']:.4f} "
                f"omega {point['omega']:.2f} loss {point['loss']:.4f} "
                f"val avg JCT {point['val_avg_jct_s']:.1f} s ({point['elapsed_s']:.1f} s)"
            )
        if cfg.max_train_s and point["elapsed_s"] > cfg.max_train_s:
            break

    kept = "last epoch"
    if cfg.keep_best and best_state is not None and curve and best_epoch != curve[-1]["epoch"]:
        net.load_state_dict(best_state)
        kept = "warm start" if best_epoch < 0 else f"epoch {best_epoch + 1}"
    # The placement baselines on the same validation traces, so the checkpoint says where it
    # stands (selection was on these traces: held-out ones are for claims, `harmony evaluate`).
    val_baselines = {
        name: float(np.mean([evaluate(rule, t, cluster)["avg_jct_s"] for t in val_traces]))
        for name, rule in {**HEURISTICS, "random": random_placement(cfg.seed)}.items()
    }
    if progress:
        others = ", ".join(f"{k} {v:.1f} s" for k, v in val_baselines.items())
        progress(f"checkpoint keeps the {kept} (validation avg JCT {best_jct:.1f} s; {others})")
    version = _next_version(out_dir)
    path = out_dir / f"harmony-v{version}.pt"
    meta = {
        "code_version": CODE_VERSION,
        "checkpoint_version": version,
        "seed": cfg.seed,
        "config": dataclasses.asdict(cfg),
        "kept": kept,
        "best_val_avg_jct_s": best_jct,
        "val_baselines_avg_jct_s": val_baselines,
        "curve": curve,
        "reward_model_fit": rm_curve,
        "train_s": time.perf_counter() - started,
    }
    torch.save(
        {
            "meta": json.dumps(meta),
            "actor_critic": net.state_dict(),
            "reward_model": rm.state_dict() if rm is not None else None,
        },
        path,
    )
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    return path


def _imitate(net: ActorCritic, demos: list, cfg: TrainConfig, gen: Any) -> list[float]:
    """Fit the actor to demonstrated (state, mask, action) decisions by masked cross-entropy."""
    opt = torch.optim.Adam(net.actor.parameters(), lr=cfg.lr)
    losses = []
    for _ in range(cfg.imitation_steps if demos else 0):
        x, j, mask, a, _ = _minibatch(demos, cfg.batch_size, gen)
        logits, _ = net(x, j, mask)
        loss = nn.functional.cross_entropy(logits, a)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses or [math.nan]


def _minibatch(samples: Sequence, size: int, gen: Any) -> tuple[torch.Tensor, ...]:
    """A random minibatch (with replacement) of (x, j, mask, action, return) samples, stacked:
    (x, j, mask, actions, returns)."""
    idx = torch.randint(0, len(samples), (min(size, len(samples)),), generator=gen)
    batch = [samples[i] for i in idx.tolist()]
    return (
        torch.from_numpy(np.stack([b[0] for b in batch])),
        torch.from_numpy(np.stack([b[1] for b in batch])),
        torch.from_numpy(np.stack([b[2] for b in batch])),
        torch.tensor([b[3] for b in batch]),
        torch.tensor([b[4] for b in batch], dtype=torch.float32),
    )


def _update(
    net: ActorCritic, opt: torch.optim.Optimizer, replay: deque, cfg: TrainConfig, gen: Any
) -> float:
    x, j, mask, a, ret = _minibatch(replay, cfg.batch_size, gen)
    logits, value = net(x, j, mask)
    logp = torch.log_softmax(logits, dim=1)
    probs = logp.exp()
    entropy = -(probs * logp.masked_fill(~mask, 0.0)).sum(dim=1).mean()
    advantage = (ret - value).detach()
    # Clamped log-probability: replayed and heuristic (off-policy) actions the policy already
    # finds improbable are not pushed further down without bound (ours; without it the
    # logits of bad heuristic actions diverge).
    logp_a = logp.gather(1, a[:, None]).squeeze(1).clamp(min=cfg.min_log_prob)
    policy_loss = -(logp_a * advantage).mean()
    value_loss = ((ret - value) ** 2).mean()
    loss = policy_loss + cfg.value_weight * value_loss - cfg.entropy_weight * entropy
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


# -- checkpoints and the registry's factory ----------------------------------------------------


def load_checkpoint(path: str | Path) -> tuple[ActorCritic, RewardModel | None, dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no Harmony checkpoint at {path}")
    data = torch.load(path, map_location="cpu", weights_only=True)
    meta = json.loads(data["meta"])
    if meta.get("code_version") != CODE_VERSION:
        raise ValueError(
            f"{path} was written by {meta.get('code_version')!r}; this code is "
            f"{CODE_VERSION!r}: retrain with `python -m runners harmony train`"
        )
    cfg = meta["config"]
    net = ActorCritic(tuple(cfg["hidden"]))
    net.load_state_dict(data["actor_critic"])
    net.eval()
    rm = None
    if data.get("reward_model") is not None:
        rm = RewardModel(tuple(cfg["reward_hidden"]))
        rm.load_state_dict(data["reward_model"])
        rm.eval()
    return net, rm, meta


def load(path: str | Path) -> HarmonyPlacement:
    """The placement rule of a checkpoint written by ``train``."""
    net, _, meta = load_checkpoint(path)
    return HarmonyPlacement(net, meta=meta)


QUICK_DEFAULT = TrainConfig(
    epochs=3,
    episodes_per_epoch=2,
    jobs_per_episode=40,
    val_jobs=40,
    reward="placement",
    imitate="",
    lr=3e-3,
    entropy_weight=0.01,
)
"""The quick default: no warm start and the immediate reward, so that it trains in about 2 s
(the full recipe takes a minute or two)."""


@functools.cache
def quick_default(seed: int = 0) -> HarmonyPlacement:
    """A small policy trained on the spot (``QUICK_DEFAULT``, about 2 s), for runs that name no
    checkpoint. It is a real trained policy, but a weak one: the run's log says so, and results
    that matter should use a checkpoint from ``python -m runners harmony train``."""
    with tempfile.TemporaryDirectory(prefix="harmony-quick-") as tmp:
        path = train(dataclasses.replace(QUICK_DEFAULT, seed=seed), Path(tmp))
        return load(path)


def harmony(checkpoint: str = "", scheduler: str = "fifo") -> ClusterPolicy:
    """Registry factory: Harmony placement under ``scheduler``, from ``checkpoint`` (a
    ``harmony-vN.pt`` written by training) or, without one, the quick default policy."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; choose from {sorted(SCHEDULERS)}")
    if not checkpoint:
        log.warning(
            "harmony: no checkpoint given, using a quick default policy (%d epochs of %d "
            "episodes); train a real one with `python -m runners harmony train --out DIR` and "
            "pass params.checkpoint",
            QUICK_DEFAULT.epochs,
            QUICK_DEFAULT.episodes_per_epoch,
        )
        return ClusterPolicy(
            SCHEDULERS[scheduler](), quick_default(0), scheduler, "harmony (quick default)"
        )
    if not Path(checkpoint).is_file():
        raise ValueError(f"params.checkpoint: no such file {checkpoint}")
    return ClusterPolicy(SCHEDULERS[scheduler](), load(checkpoint), scheduler, "harmony")


# -- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``train --out DIR [--episodes N] [--epochs E] [--jobs J] [--seed S] [--no-reward-model]``
    and ``evaluate --checkpoint PATH [--jobs J] [--servers M] [--seed S]``."""
    parser = argparse.ArgumentParser(prog="harmony", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a policy and write a versioned checkpoint")
    t.add_argument("--out", required=True, type=Path)
    t.add_argument("--episodes", type=int, default=TrainConfig.episodes_per_epoch,
                   help="episodes per epoch")  # fmt: skip
    t.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    t.add_argument("--jobs", type=int, default=TrainConfig.jobs_per_episode)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-reward-model", action="store_true")
    t.add_argument("--reward", choices=("placement", "interval"), default=TrainConfig.reward,
                   help="placement: the job's own speed (ours); interval: discounted "
                   "cluster-wide progress (the paper's)")  # fmt: skip
    t.add_argument("--imitate", choices=("none", *HEURISTICS), default=TrainConfig.imitate,
                   help="warm start: imitate a heuristic before RL (ours, after DL2; "
                   "default %(default)s)")  # fmt: skip
    t.add_argument("--load", type=float, default=TrainConfig.load,
                   help="offered GPU load of the training traces")  # fmt: skip
    t.add_argument("--max-seconds", type=float, default=0.0, help="wall-time budget (0: none)")
    e = sub.add_parser("evaluate", help="compare a checkpoint with the baselines on traces")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--jobs", type=int, default=200)
    e.add_argument("--servers", type=int, default=None, help="default: the training cluster's")
    e.add_argument("--seed", type=int, default=20_001, help="first of --traces trace seeds")
    e.add_argument("--traces", type=int, default=3, help="traces per load (mean reported)")
    e.add_argument("--loads", default="0.5,0.8,1.0,1.5", help="offered GPU loads to sweep")
    args = parser.parse_args(argv)
    if args.command == "train":
        cfg = TrainConfig(
            seed=args.seed,
            episodes_per_epoch=args.episodes,
            epochs=args.epochs,
            jobs_per_episode=args.jobs,
            reward_model=not args.no_reward_model,
            reward=args.reward,
            imitate="" if args.imitate == "none" else args.imitate,
            load=args.load,
            max_train_s=args.max_seconds,
        )
        path = train(cfg, args.out, progress=lambda s: print(s, flush=True))
        print(path)
        return 0
    try:
        loads = [float(x) for x in args.loads.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--loads: not a comma-separated list of numbers: {args.loads!r}")
    if not loads or any(x <= 0 for x in loads):
        parser.error("--loads: give positive offered loads, e.g. 0.5,0.8,1.0")
    placement = load(args.checkpoint)
    base = TrainConfig(**{
        k: tuple(v) if isinstance(v, list) else v
        for k, v in placement.meta["config"].items()
    })  # fmt: skip
    for row in evaluate_sweep(
        placement, base, loads, args.jobs, args.seed, args.traces, args.servers
    ):
        print(
            f"load {row['load']:4.2f} {row['rule']:>13}: avg JCT {row['avg_jct_s']:9.1f} s  "
            f"p95 {row['p95_jct_s']:9.1f} s  ({row['traces']} traces of {args.jobs} jobs)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
