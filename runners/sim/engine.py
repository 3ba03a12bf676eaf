"""The part of the iteration-level simulator both communication arenas share: compute streams.

A job is ``workers`` data-parallel replicas of one model. Workers with the same compute
slow-down schedule form a *group* and are simulated once (they run identical op sequences; the
network models of the arenas account for the group's size). Each group has one compute stream
that runs, per iteration:

* **forward** over the layer DAG in *data-flow* order: any layer whose producers have finished
  and whose parameters the arena allows it to use may run; among those the lowest index (the
  program order) goes first. For a chain this is plain layer order; on a branchy graph a layer
  whose parameters arrived early may overtake one whose parameters are late (TensorFlow / MXNet
  executor semantics, the setting of TicTac);
* **backward** in reverse layer order; the end of layer i's backward makes its gradient ready,
  which the arena turns into communication.

Modelling choices (written down, labelled in reports):

* per-op compute times get seeded log-normal jitter with mean 1 and CV ``jitter_cv``, drawn per
  group, iteration and op (workers of one group share a draw);
* ``step_jitter_cv`` (``cluster.step_jitter_cv``): per iteration, each
  worker's compute is scaled by one log-normal draw with mean 1 and this CV (a whole step
  slower or faster: the machine's other work, the cores the ranks share), and a group computes
  as its slowest worker, the largest of its ``count`` draws (a synchronous step waits for the
  last gradient; a reconstruction, labelled as such: the faster workers' own forward overlap
  is not modelled);
* a straggler's slow-down multiplies its group's compute times in the iterations it is active;
* ``overlap_slowdown`` (gamma): an op that *starts* while its group's network is busy takes
  ``1 + gamma`` times longer (Echo-style interference, applied at op start; integrated with
  ``overlap_integrated``, below);
* ``background_slowdown`` (all-reduce arena's ``cluster.background_slowdown``): an op that
  starts while its group's network is idle takes ``1 + background_slowdown`` times longer (a
  framework's loop that wakes every cycle and negotiates while it has nothing to send, as
  Horovod's does; while a collective runs, the loop is busy with it and its cost is the
  cycle's, ``negotiation_cpu_s``; a reconstruction, labelled as such);
* ``overlap_integrated`` (``cluster.overlap_model: integrated``; the PS arena has
  ``overlap_slowdown`` alone, over its workers' transfers, ``runners.sim.ps``): the two
  slow-downs above are rates instead, integrated over the op's span: an op progresses at
  ``1 / (1 + gamma)`` of its speed while its group's network is busy and ``1 / (1 +
  background_slowdown)`` while it is idle, re-timed whenever the network turns busy or idle
  (the arena calls ``network_changed``). The extra time ``overlap_slowdown`` gives an op is
  then at most the time the network was busy during it times ``gamma / (1 + gamma)``,
  however large gamma (``background_slowdown`` and the collectives' CPU add their own): a
  slow-down measured against a stream of collectives that never pauses (where the
  communication threads take the cores whole, as on an unshaped network) is not charged in
  full to an op that overlaps a short collective. A reconstruction, labelled as such;
* ``collective_cpu_s`` (all-reduce arena): each collective the arena starts (``charge_cpu``)
  takes that much CPU time from the op each computing group runs then (a negotiation round's,
  ``negotiation_cpu_s`` when set): the op ends that much later (the communication threads
  ahead of the compute on shared cores, as on our CPU testbed; a reconstruction, labelled as
  such); the PS arena's ``cpu_per_message``
  (``cluster.message_cpu_us``) likewise charges each message to its own group's op;
* optimizer update time is not modelled here (0); the all-reduce arena adds a measured
  profile's per-layer update time to each layer's forward op with ``cluster.optimizer_update``
  (``runners.sim.allreduce.compute_setup``).

The steady-state iteration time of a group is the mean interval between successive starts of
its first forward op after the warm-up iterations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from statistics import NormalDist
from typing import Any

import numpy as np

from .core import EventLoop


@dataclass(frozen=True)
class LayerTimes:
    name: str
    fwd_s: float
    bwd_s: float
    grad_bytes: int
    deps: tuple[int, ...] = ()  # producers in the forward DAG (indices < own index)
    # The layer's optimizer update (a measured profile's update_s; 0: not measured). The
    # all-reduce arena adds it to the layer's forward with ``cluster.optimizer_update``.
    update_s: float = 0.0


@dataclass(frozen=True)
class WorkerGroup:
    """Workers that run identically: ``slowdowns[it]`` multiplies compute in iteration ``it``
    (an empty tuple means 1.0 throughout); ``links[it]`` (PS arena) multiplies their NICs'
    bandwidth (empty: 1.0 throughout)."""

    workers: tuple[int, ...]
    slowdowns: tuple[float, ...] = ()
    links: tuple[float, ...] = ()

    @property
    def count(self) -> int:
        return len(self.workers)

    @property
    def label(self) -> str:
        w = self.workers
        if len(w) == 1:
            return f"w{w[0]}"
        if w == tuple(range(w[0], w[-1] + 1)):
            return f"w{w[0]}-{w[-1]}"
        return "w" + ",".join(map(str, w))


@dataclass(frozen=True)
class ComputeSetup:
    layers: tuple[LayerTimes, ...]
    groups: tuple[WorkerGroup, ...]
    iterations: int  # measured iterations
    warmup_iterations: int
    batch_size: int  # per worker
    jitter_cv: float = 0.0
    overlap_slowdown: float = 0.0
    seed: int = 0
    # Iterations whose operations the timeline records, ``(first, end)`` with ``end``
    # exclusive; None records all of them, ``(0, 0)`` none (a policy's planning runs).
    timeline_window: tuple[int, int] | None = None
    # All-reduce arena: per iteration, the slowest worker link's share of the bandwidth (NIC
    # stragglers; ``link_factors``); empty when every link runs at the cluster's rate.
    link_factors: tuple[float, ...] = ()
    # All-reduce arena: CPU time each collective takes from the compute op it overlaps.
    collective_cpu_s: float = 0.0
    # All-reduce arena: CPU time a negotiation round takes so (None: a collective's).
    negotiation_cpu_s: float | None = None
    # All-reduce arena: per-worker, per-iteration compute noise (CV of one draw per step).
    step_jitter_cv: float = 0.0
    # All-reduce arena: how much longer an op takes that starts while the network is idle.
    background_slowdown: float = 0.0
    # ``cluster.overlap_model: integrated``: the two slow-downs are rates
    # over the op's span (re-timed as the network turns busy or idle), not fixed at its start.
    overlap_integrated: bool = False

    @property
    def workers(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def n_iter(self) -> int:
        """Iterations simulated: warm-up + measured + 1 (to time the last interval)."""
        return self.warmup_iterations + self.iterations + 1


def slowest_of(count: int, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of the largest of ``count`` log-normal factors with mean 1 and CV ``cv``
    (the order statistic: the quantile ``U ** (1 / count)`` of the log-normal, one uniform per
    draw, so a group of 100 000 workers costs what one worker does)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    quantiles = np.clip(rng.random(n) ** (1.0 / count), 1e-15, 1 - 1e-15)
    normal = NormalDist()
    z = np.array([normal.inv_cdf(float(q)) for q in quantiles])
    return np.exp(-sigma * sigma / 2 + sigma * z)


@dataclass
class SimResult:
    metrics: dict[str, float]
    units: dict[str, str]
    series: list[dict[str, Any]]  # one row per iteration
    timeline: list[tuple[int, str, str, str, float, float, int]] = field(repr=False)
    # (group, iteration, layer index, time) when a layer's update reached a group (-1 = all).
    synced: list[tuple[int, int, int, float]] = field(default_factory=list, repr=False)
    groups: tuple[WorkerGroup, ...] = ()

    TIMELINE_COLUMNS = ("iteration", "resource", "op", "layer", "start_s", "end_s", "bytes")


def groups_for(
    workers: int, stragglers: Any, n_iter: int, links: bool = False
) -> tuple[WorkerGroup, ...]:
    """Partition workers by their slow-down schedule. ``stragglers`` items have ``worker``,
    ``slowdown`` and optional ``from_iteration`` / ``until_iteration`` (exclusive) attributes.
    With ``links`` (the PS arena, where each worker's NIC is its own resource) by their NIC
    schedule as well (``bandwidth_factor``), carried as the groups' ``links``."""

    def schedule_of(field: str) -> dict[int, tuple[float, ...]]:
        out: dict[int, tuple[float, ...]] = {}
        for s in stragglers:
            start = getattr(s, "from_iteration", 0) or 0
            until = getattr(s, "until_iteration", None)
            end = n_iter if until is None else min(until, n_iter)
            value = getattr(s, field, 1.0)
            row = tuple(value if start <= it < end else 1.0 for it in range(n_iter))
            if any(x != 1.0 for x in row):
                out[s.worker] = row
        return out

    compute = schedule_of("slowdown")
    nic = schedule_of("bandwidth_factor") if links else {}
    by_schedule: dict[tuple[tuple[float, ...], tuple[float, ...]], list[int]] = {}
    for w in range(workers):
        by_schedule.setdefault((compute.get(w, ()), nic.get(w, ())), []).append(w)
    groups = [WorkerGroup(tuple(ws), slow, link) for (slow, link), ws in by_schedule.items()]
    groups.sort(key=lambda g: g.workers[0])
    return tuple(groups)


def link_factors(stragglers: Any, n_iter: int) -> tuple[float, ...]:
    """Per iteration, the smallest ``bandwidth_factor`` of the stragglers active then (1.0 when
    none is); empty when no straggler has one."""
    slow = [s for s in stragglers if getattr(s, "bandwidth_factor", 1.0) != 1.0]
    if not slow:
        return ()
    factors = [1.0] * n_iter
    for s in slow:
        end = n_iter if s.until_iteration is None else min(s.until_iteration, n_iter)
        for it in range(s.from_iteration, end):
            factors[it] = min(factors[it], s.bandwidth_factor)
    return tuple(factors)


@dataclass(slots=True)
class _Op:
    """(``overlap_integrated``.) A running op: its work ``left`` (seconds at full speed) as
    of ``since``, the ``rate`` it progresses at since then, and its ``compute_done``
    arguments."""

    left: float
    since: float
    rate: float
    done: tuple[int, int, int, int, float]


class ComputeJob:
    """Compute streams of every group; subclasses add the network of their arena.

    Subclass hooks: ``params_ready(g, it, layer)`` (may the forward of ``layer`` in iteration
    ``it`` run on group ``g``? Once true it must stay true), ``gradient_ready(g, it, layer)``,
    ``network_busy(g)`` and ``comm_time(it)``; call ``wake(g)`` / ``wake_all()`` when a
    synchronisation completes. The compute handlers bind the hooks when they are built
    (``_bind_compute``, from ``__init__``): a subclass that sets a hook on the instance
    afterwards calls ``_bind_compute()`` again. ``compute_watch`` (None, or a callable set
    before ``__init__`` binds the handlers) is called whenever a group's op starts or ends
    (an arena whose network depends on whether the ranks compute).
    """

    compute_watch: Any = None
    # Whether the arena calls ``network_changed`` when its network turns busy or idle: only
    # then can ``overlap_integrated`` re-time the running ops (else the slow-downs apply at
    # op start).
    reports_network_changes = False

    # Run forward ops whose turn is certain back to back in one event (``_run_forward``): the
    # same results as op by op, except that when events tie to the instant (identical groups
    # without compute jitter) they may run in another order, equally valid (a test switches
    # it off to compare).
    batch_forward = True

    def __init__(self, setup: ComputeSetup) -> None:
        self.setup = setup
        self.loop = EventLoop()
        self.n_layers = n = len(setup.layers)
        self.n_iter = setup.n_iter
        self.n_groups = len(setup.groups)
        self.names = [lt.name for lt in setup.layers]
        self.children: list[list[int]] = [[] for _ in range(n)]
        for i, lt in enumerate(setup.layers):
            for d in lt.deps:
                if not 0 <= d < i:
                    raise ValueError(f"layer {lt.name}: dependency {d} is not an earlier layer")
                self.children[d].append(i)
        self.n_deps = [len(set(lt.deps)) for lt in setup.layers]
        self.roots = [i for i in range(n) if self.n_deps[i] == 0]
        self.durations = self._durations()
        self.gamma = setup.overlap_slowdown
        self.idle_gamma = setup.background_slowdown
        self.cpu_per_collective = setup.collective_cpu_s
        self.cpu_per_round = (
            setup.collective_cpu_s if setup.negotiation_cpu_s is None else setup.negotiation_cpu_s
        )
        self.cpu_per_message = 0.0  # PS arena: ``cluster.message_cpu_us`` (set by its job)
        g = self.n_groups
        # ``overlap_integrated``: each group's running op, or None; its end event carries
        # ``op_token`` (stale once re-timed).
        self.integrated = (
            setup.overlap_integrated
            and self.reports_network_changes
            and bool(self.gamma or self.idle_gamma)
        )
        self.running: list[_Op | None] = [None] * g
        self.op_token = [0] * g
        self.retime_due = False
        # CPU time collectives took from each group's running op, not yet added to it.
        self.cpu_debt = [0.0] * g
        self.iteration = [0] * g
        self.busy = [False] * g
        self.fwd_done = [0] * g
        self.bwd_next = [-1] * g  # next backward layer, -1 while in forward
        self.deps_left: list[list[int]] = [list(self.n_deps) for _ in range(g)]
        self.avail: list[list[int]] = [list(self.roots) for _ in range(g)]
        self.iter_start: list[list[float]] = [[] for _ in range(g)]
        self.compute_s = [[0.0] * self.n_iter for _ in range(g)]  # lists: cheap on the hot path
        self.timeline: list[tuple[int, str, str, str, float, float, int]] = []
        window = setup.timeline_window
        self.tl_from, self.tl_to = (0, self.n_iter + 1) if window is None else window
        self.synced: list[tuple[int, int, int, float]] = []
        self.compute_resource = [
            "compute" if g == 1 else f"compute[{grp.label}]" for grp in setup.groups
        ]
        self._bind_compute()

    # -- hooks ----------------------------------------------------------------------------
    def params_ready(self, g: int, it: int, layer: int) -> bool:
        return True

    def gradient_ready(self, g: int, it: int, layer: int) -> None:
        pass

    def network_busy(self, g: int) -> bool:
        return False

    def comm_time(self, it: int) -> float:
        return 0.0

    # -- compute --------------------------------------------------------------------------
    def _durations(self) -> list[list[list[float]]]:
        """[group][iteration][op] with ops 0..L-1 forward, L..2L-1 backward (layer L-1 first)."""
        s = self.setup
        layers = s.layers
        base = np.array([lt.fwd_s for lt in layers] + [lt.bwd_s for lt in reversed(layers)])
        rng = np.random.default_rng(s.seed)
        cv = s.jitter_cv
        sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0
        # its own stream: the per-op draws stay those of a run without it
        step_rng = np.random.default_rng([s.seed, 1]) if s.step_jitter_cv > 0 else None
        out = []
        for grp in s.groups:
            if sigma > 0:
                noise = rng.lognormal(-sigma * sigma / 2, sigma, size=(self.n_iter, base.size))
                d = base * noise
            else:
                d = np.tile(base, (self.n_iter, 1))
            if grp.slowdowns:
                d = d * np.asarray(grp.slowdowns[: self.n_iter])[:, None]
            if step_rng is not None:
                d = d * slowest_of(grp.count, s.step_jitter_cv, self.n_iter, step_rng)[:, None]
            out.append(d.tolist())
        return out

    def start(self) -> None:
        for g in range(self.n_groups):
            self.loop.at(0.0, self.try_compute, g)

    def wake(self, g: int) -> None:
        if not self.busy[g]:
            self.try_compute(g)

    def wake_all(self) -> None:
        for g in range(self.n_groups):
            if not self.busy[g]:
                self.try_compute(g)

    def _bind_compute(self) -> None:
        """Bind the compute streams' event handlers (``try_compute``, ``_compute_done``,
        ``_run_forward``, ``_forward_done``) as closures over this job's state and hooks:
        several run per op, so what is constant for the run is a local here rather than an
        attribute looked up per op, and events go straight onto the loop's heap. The hooks
        are bound too: a subclass that replaces one on the instance after ``__init__`` calls
        this again."""
        loop = self.loop
        evq, evseq = loop.raw()
        n = self.n_layers
        n_iter = self.n_iter
        busy, iteration = self.busy, self.iteration
        fwd_done, bwd_next = self.fwd_done, self.bwd_next
        avail, deps_left = self.avail, self.deps_left  # per group; rows replaced per iteration
        iter_start, compute_s = self.iter_start, self.compute_s
        durations, children = self.durations, self.children
        n_deps, roots = self.n_deps, self.roots
        timeline, names, compute_resource = self.timeline, self.names, self.compute_resource
        tl_from, tl_to = self.tl_from, self.tl_to
        gamma, idle_gamma = self.gamma, self.idle_gamma
        # Batched forward ops cannot be lengthened by a collective that starts among them.
        batch = (
            self.batch_forward
            and not gamma
            and not idle_gamma
            and not self.cpu_per_collective
            and not self.cpu_per_round
            and not self.cpu_per_message
        )
        cpu_debt = self.cpu_debt
        params_ready, gradient_ready = self.params_ready, self.gradient_ready
        network_busy = self.network_busy
        watch = self.compute_watch
        integrated, running, op_token = self.integrated, self.running, self.op_token
        rate_of = self._rate

        def try_compute(g: int) -> None:
            if busy[g]:
                return
            it = iteration[g]
            if it >= n_iter:
                return
            layer = bwd_next[g]
            if layer >= 0:
                op = 2 * n - 1 - layer
            else:
                av = avail[g]
                if not av:
                    return
                layer = av[0]
                ready = params_ready(g, it, layer)
                if ready and batch:
                    run_forward(g, it)
                    return
                if not ready:
                    layer = -1
                    for cand in sorted(av)[1:]:
                        if params_ready(g, it, cand):
                            layer = cand
                            break
                    if layer < 0:
                        return  # re-tried when a synchronisation completes
                    av.remove(layer)
                    heapify(av)
                else:
                    heappop(av)
                if fwd_done[g] == 0 and len(iter_start[g]) == it:
                    iter_start[g].append(loop.now)
                op = layer
            duration = durations[g][it][op]
            busy[g] = True
            if watch is not None:
                watch()
            now = loop.now
            if integrated:
                rate = rate_of(g)
                running[g] = _Op(duration, now, rate, (g, it, op, layer, now))
                op_token[g] += 1
                if rate > 0.0:  # (0: the PS arena's shared cores give it none for now)
                    heappush(evq, (now + duration / rate, next(evseq), op_end, (g, op_token[g])))
                return
            if gamma or idle_gamma:
                duration *= 1.0 + (gamma if network_busy(g) else idle_gamma)
            heappush(evq, (now + duration, next(evseq), compute_done, (g, it, op, layer, now)))

        def op_end(g: int, token: int) -> None:
            """(``overlap_integrated``.) The running op's end, unless re-timed since."""
            if token == op_token[g]:
                args = running[g].done  # type: ignore[union-attr]
                running[g] = None
                compute_done(*args)

        def run_forward(g: int, it: int) -> None:
            """Forward ops of ``it`` on group ``g`` back to back, in one event, while the next
            op is certain: the lowest-index available layer, whose parameters are already in
            (they stay in, and no other layer is preferred to it, so op by op would pick it
            too, at the same time). Needs ``overlap_slowdown`` and ``background_slowdown`` 0
            (else an op's time depends on the network when it starts). Same op order, times
            (``t + d`` in sequence) and sums as op by op."""
            now = loop.now
            if fwd_done[g] == 0 and len(iter_start[g]) == it:
                iter_start[g].append(now)
            dur = durations[g][it]
            comp = compute_s[g]
            recorded = tl_from <= it < tl_to
            resource = compute_resource[g]
            av, left = avail[g], deps_left[g]
            done = fwd_done[g]
            while True:
                layer = heappop(av)
                end = now + dur[layer]
                comp[it] += end - now
                if recorded:
                    timeline.append((it, resource, "forward", names[layer], now, end, 0))
                now = end
                for c in children[layer]:
                    left[c] -= 1
                    if left[c] == 0:
                        heappush(av, c)
                done += 1
                if done == n or not av or not params_ready(g, it, av[0]):
                    break
            fwd_done[g] = done
            busy[g] = True
            if watch is not None:
                watch()
            heappush(evq, (now, next(evseq), forward_done, (g,)))

        def forward_done(g: int) -> None:
            busy[g] = False
            if watch is not None:
                watch()
            if fwd_done[g] == n:
                bwd_next[g] = n - 1
            try_compute(g)

        def compute_done(g: int, it: int, op: int, layer: int, start: float) -> None:
            now = loop.now
            debt = cpu_debt[g]
            if debt > 0.0:  # the op lost that much CPU to collectives: it ends later
                cpu_debt[g] = 0.0
                heappush(evq, (now + debt, next(evseq), compute_done, (g, it, op, layer, start)))
                return
            busy[g] = False
            if watch is not None:
                watch()
            compute_s[g][it] += now - start
            recorded = tl_from <= it < tl_to
            if op < n:
                if recorded:
                    timeline.append(
                        (it, compute_resource[g], "forward", names[layer], start, now, 0)
                    )
                left = deps_left[g]
                av = avail[g]
                for c in children[layer]:
                    left[c] -= 1
                    if left[c] == 0:
                        heappush(av, c)
                fwd_done[g] += 1
                if fwd_done[g] == n:
                    bwd_next[g] = n - 1
            else:
                if recorded:
                    timeline.append(
                        (it, compute_resource[g], "backward", names[layer], start, now, 0)
                    )
                bwd_next[g] = layer - 1
                if layer == 0:  # iteration done on this group
                    iteration[g] = it + 1
                    fwd_done[g] = 0
                    bwd_next[g] = -1
                    deps_left[g] = list(n_deps)
                    avail[g] = list(roots)
                gradient_ready(g, it, layer)
            try_compute(g)

        # Instance attributes (they shadow nothing: the class has no such methods).
        self.try_compute = try_compute
        self._run_forward = run_forward
        self._forward_done = forward_done
        self._compute_done = compute_done
        self._op_end = op_end

    def network_changed(self) -> None:
        """(``overlap_integrated``; the arena calls it when its network turns busy or idle.)
        Re-time the running ops once everything due at this instant has happened: a
        collective that ends as the next one starts at the same instant changes nothing."""
        if self.integrated and not self.retime_due:
            self.retime_due = True
            self.loop.after(0.0, self._retime)

    def _rate(self, g: int) -> float:
        """(``overlap_integrated``.) Group ``g``'s compute speed now, as a share of its own."""
        return 1.0 / (1.0 + (self.gamma if self.network_busy(g) else self.idle_gamma))

    def _retime(self) -> None:
        """Every running op on at its group's ``_rate`` from now, where that changed (an op
        given no speed waits, without an end, for the next re-timing)."""
        self.retime_due = False
        now = self.loop.now
        for g, op in enumerate(self.running):
            if op is None:
                continue
            rate = self._rate(g)
            if rate == op.rate:
                continue
            op.left = max(0.0, op.left - (now - op.since) * op.rate)
            op.since, op.rate = now, rate
            self.op_token[g] += 1
            if rate > 0.0:  # (0: the PS arena's shared cores give it none for now)
                self.loop.after(op.left / rate, self._op_end, g, self.op_token[g])

    def charge_cpu(self, negotiation: bool = False) -> None:
        """A collective starts: each group computing now loses ``collective_cpu_s`` of its
        running op's time (added when the op would have ended); a negotiation round's
        collective, ``negotiation_cpu_s`` (when set). A group in the middle of its backward
        pass computes now even between two ops (a gradient's collective starts as the next op
        does): the op that starts now pays."""
        cost = self.cpu_per_round if negotiation else self.cpu_per_collective
        if cost:
            busy, bwd_next, debt = self.busy, self.bwd_next, self.cpu_debt
            for g in range(self.n_groups):
                if busy[g] or bwd_next[g] >= 0:
                    debt[g] += cost

    # -- results --------------------------------------------------------------------------
    def check_finished(self) -> None:
        for g, starts in enumerate(self.iter_start):
            if len(starts) != self.n_iter:
                raise RuntimeError(
                    f"simulation stalled on {self.compute_resource[g]} in iteration "
                    f"{len(starts)}: a plan dependency was never satisfied"
                )

    def base_result(
        self,
        extra_metrics: dict[str, tuple[float, str]] | None = None,
        synchronous: bool = True,
    ) -> SimResult:
        """Metrics of the critical (slowest) group plus the job's throughput.

        Synchronous jobs advance together: iteration time = the slowest group's mean interval,
        throughput = global batch / iteration time. Otherwise (asynchronous PS) every group runs
        at its own pace: throughput = sum of group rates, iteration time = the worker-weighted
        mean of the groups' intervals.
        """
        self.check_finished()
        s = self.setup
        first = s.warmup_iterations
        measured = slice(first, first + s.iterations)
        intervals = [np.diff(starts)[first:] for starts in self.iter_start]
        means = [float(iv.mean()) for iv in intervals]
        # The critical group: the one that computes longest (the straggler).
        compute_s = np.asarray(self.compute_s)
        crit = int(np.argmax(compute_s[:, measured].mean(axis=1)))
        if synchronous:
            iteration_time = max(means)
            throughput = s.workers * s.batch_size / iteration_time
        else:
            pairs = list(zip(s.groups, means, strict=True))
            throughput = sum(grp.count * s.batch_size / m for grp, m in pairs)
            iteration_time = sum(grp.count * m for grp, m in pairs) / s.workers
        compute_time = float(np.mean(compute_s[crit, measured]))
        comm = [self.comm_time(i) for i in range(self.n_iter)]
        crit_iv = intervals[crit]
        metrics: dict[str, float] = {
            "iteration_time_s": iteration_time,
            "iteration_time_std_s": float(crit_iv.std(ddof=1)) if crit_iv.size > 1 else 0.0,
            "throughput_samples_per_s": throughput,
            "compute_time_s": compute_time,
            "comm_time_s": float(np.mean(comm[measured])),
            "exposed_comm_s": max(0.0, means[crit] - compute_time),
            "sim_events": float(self.loop.events_processed),
        }
        units = {
            "iteration_time_s": "s",
            "iteration_time_std_s": "s",
            "throughput_samples_per_s": "samples/s",
            "compute_time_s": "s",
            "comm_time_s": "s",
            "exposed_comm_s": "s",
            "sim_events": "events",
        }
        for key, (value, unit) in (extra_metrics or {}).items():
            metrics[key] = value
            units[key] = unit
        starts = self.iter_start[crit]
        series = [
            {
                "iteration": i,
                "warmup": i < first,
                "start_s": starts[i],
                "iteration_time_s": starts[i + 1] - starts[i],
                "compute_time_s": float(compute_s[crit, i]),
                "comm_time_s": comm[i],
            }
            for i in range(self.n_iter - 1)
        ]
        return SimResult(metrics, units, series, self.timeline, self.synced, s.groups)
