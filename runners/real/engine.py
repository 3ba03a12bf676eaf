"""The data-parallel engine of real mode: it executes a ``CommPlan`` -- the very object the
simulator executes (``runners.policies.allreduce``) -- on real gradients.

* **Readiness**: a post-accumulate-grad hook on every parameter; a layer (a parameter-owning
  module of the workload profile) is ready when all its parameters have their gradient, a task
  group (the plan's fused or partitioned unit) when all its layers are. The group's gradients are
  then copied into one flat buffer and its tasks are *released*.
* **Dispatch**: one communication thread issues the released tasks as asynchronous collectives
  (``all_reduce``, or DeAR's ``reduce_scatter`` + ``all_gather``), highest priority first, while
  the bytes in flight are below the plan's credit. Every rank must issue collectives in the same
  order. Plans whose order is first-ready-first-sent (WFBP, DDP-like buckets, FIFO delayed
  all-reduce) are issued in release order, which autograd makes the same on every rank. Plans
  that reorder by priority (ByteScheduler, PACE, DeAR, priority delayed all-reduce) *negotiate*
  each decision, as Horovod's coordinator does: the ranks all-reduce (MIN) how many tasks each
  has released and seen complete, and every rank takes the same decision from those common
  counts (one small collective per decision, on its own process group; its cost is part of the
  measured iteration time and is reported as ``negotiations_per_iteration``).
  ``dispatch: auto`` (the default) skips the thread where it has no decision to take: a plan
  issued in release order with no credit limit and no dependent tasks (``inline_eligible``:
  WFBP, DDP-like buckets, FIFO delayed all-reduce) has each released task issued from the
  gradient hook that released it, on the thread running the backward (on the CPU the training
  thread; on a GPU autograd's device thread), as PyTorch DDP's reducer issues its buckets --
  the same collectives in the same order, without waking a second thread (on our 2-core
  testbed a wake often waits for a core). ``thread`` keeps the communication thread for every
  plan. ``dispatch`` says which the engine uses.
* **Updates**: per-layer SGD (``lr``, ``momentum``) applied in the main thread. With
  ``cross_barrier`` a forward pre-hook on each layer waits only for that layer's group of the
  iteration its update comes from; without it (global barrier) the next iteration starts after
  every group is synchronised. ``delay`` = d lets forward t use the synchronised update of
  iteration t-1-d; the approximation of the missing steps (delayed all-reduce, a
  reconstruction: research/comm.md §4.3) is ``stale`` (the synchronised weights w),
  ``local-correct`` (w - lr * the worker's own gradients of the d unsynchronised iterations) or
  ``extrapolate`` (w - lr * d * the newest synchronised gradient). ``finish`` applies every
  outstanding update, so all ranks end with the same synchronised weights.

On a GPU (``device``: CUDA; the process group NCCL) the buffers live on the rank's GPU, the
communication thread issues on that device, and a collective counts as complete when the
GPU has finished it (a watcher thread blocks on an event recorded after it): an NCCL work's
future completes when the collective is enqueued, not when it ends. A collective's span
starts when it is issued, so on a GPU it includes any compute queued ahead of it, and the
per-layer compute spans of the timeline are the times the kernels were queued. The
negotiation stays on its own gloo group, on the CPU. (Written for NCCL, not run on a GPU
here: our machines have none.)

Gradients are averaged over ranks (divided by the world size after the sum). Torch's own
``DistributedDataParallel`` is not used here; the ``ddp`` system runs it directly
(``runners.real.worker``).
"""

from __future__ import annotations

import heapq
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..policies.allreduce import CommPlan, inline_eligible, is_fifo
from ..spec import DISPATCHES  # Engine's ``dispatch`` (the module docstring)

APPROXIMATIONS = ("stale", "local-correct", "extrapolate")


# torch 2.13 deprecates reduce_scatter_tensor for reduce_scatter_single (same arguments).
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class PlanMismatch(ValueError):
    """The plan does not fit the model (profile out of date, unsupported task shape)."""


@dataclass
class LayerBinding:
    """The model's parameters per layer of the workload profile (forward order)."""

    names: list[str]
    modules: list[nn.Module]
    params: list[list[nn.Parameter]]

    def numel(self, layer: int) -> int:
        return sum(p.numel() for p in self.params[layer])


def bind_layers(
    model: nn.Module, names: Sequence[str], grad_bytes: Sequence[int] | None = None
) -> LayerBinding:
    """Map the profile's layer names to the model's modules and their own parameters.

    A parameter shared by several modules (tied weights) belongs to the first layer that owns
    it. Raises ``PlanMismatch`` if a name is not a module, a trainable parameter belongs to no
    layer, or (with ``grad_bytes``) a layer's fp32 size differs from the profile's.
    """
    seen: set[int] = set()
    modules, params = [], []
    for name in names:
        try:
            module = model.get_submodule(name)
        except AttributeError:
            raise PlanMismatch(f"profile layer {name!r} is not a module of the model") from None
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        own = [p for p in own if id(p) not in seen]
        seen.update(id(p) for p in own)
        modules.append(module)
        params.append(own)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in seen]
    if missing:
        raise PlanMismatch(
            f"parameters outside every profile layer: {', '.join(missing[:3])}; regenerate the "
            "profile (python -m workloads profile NAME)"
        )
    binding = LayerBinding(list(names), modules, params)
    if grad_bytes is not None:
        for i, want in enumerate(grad_bytes):
            have = binding.numel(i) * 4
            if have != want:
                raise PlanMismatch(
                    f"layer {names[i]!r}: the model has {have} bytes of fp32 parameters, the "
                    f"profile {want}; regenerate the profile (python -m workloads profile NAME)"
                )
    return binding


@dataclass
class _Group:
    layers: tuple[int, ...]
    params: list[nn.Parameter]
    numel: int
    length: int = 0  # buffer length: numel, padded to a multiple of the world for RS/AG
    initial: list[int] = field(default_factory=list)  # tasks released with the group
    finals: int = 0  # tasks whose completion (together) synchronises the group


@dataclass
class _Task:
    index: int
    group: int
    op: str
    start: int
    stop: int
    priority: int
    after: int
    nbytes: int
    dependents: list[int] = field(default_factory=list)


def layout(plan: CommPlan, binding: LayerBinding, world: int) -> tuple[list[_Group], list[_Task]]:
    """Cut each task group's flat buffer into the plan's tasks (consecutive pieces per op)."""
    groups: list[_Group] = []
    by_layers: dict[tuple[int, ...], int] = {}
    offsets: dict[tuple[int, str], int] = {}
    tasks: list[_Task] = []
    owner: dict[int, int] = {}
    for index, t in enumerate(plan.tasks):
        key = tuple(sorted(t.layers))
        g = by_layers.get(key)
        if g is None:
            for layer in key:
                if layer in owner:
                    raise PlanMismatch(f"layer {layer} is in two task groups of the plan")
                owner[layer] = len(groups)
            params = [p for layer in key for p in binding.params[layer]]
            numel = sum(p.numel() for p in params)
            g = by_layers[key] = len(groups)
            groups.append(_Group(key, params, numel, numel))
        if t.op not in ("allreduce", "reduce_scatter", "all_gather"):
            raise PlanMismatch(f"task {index}: unknown collective {t.op!r}")
        if t.size_bytes % 4:
            raise PlanMismatch(f"task {index}: {t.size_bytes} bytes is not whole fp32 values")
        start = offsets.get((g, t.op), 0)
        stop = start + t.size_bytes // 4
        offsets[(g, t.op)] = stop
        tasks.append(_Task(index, g, t.op, start, stop, t.priority, t.after, t.size_bytes))
    missing = [i for i in range(len(binding.params)) if i not in owner]
    if missing:
        raise PlanMismatch(f"layers {missing[:5]} are in no task of the plan")
    for g, group in enumerate(groups):
        ops = {op for (gg, op) in offsets if gg == g}
        for op in ops:
            if offsets[(g, op)] != group.numel:
                raise PlanMismatch(
                    f"the {op} tasks of layers {group.layers} carry {offsets[(g, op)]} values, "
                    f"the layers have {group.numel}"
                )
        if ops & {"reduce_scatter", "all_gather"}:
            if ops != {"reduce_scatter", "all_gather"}:
                raise PlanMismatch(f"layers {group.layers}: reduce_scatter without all_gather")
            group.length = -(-group.numel // world) * world
    for task in tasks:
        group = groups[task.group]
        if task.op in ("reduce_scatter", "all_gather"):
            if task.start != 0 or task.stop != group.numel:
                raise PlanMismatch(f"task {task.index}: a partitioned {task.op} is not supported")
            task.stop = group.length
        if task.after >= 0:
            if not 0 <= task.after < len(tasks) or task.after == task.index:
                raise PlanMismatch(f"task {task.index}: 'after' {task.after} is not a task")
            tasks[task.after].dependents.append(task.index)
        else:
            group.initial.append(task.index)
        if task.op != "reduce_scatter":
            group.finals += 1
    for task in tasks:
        if task.after >= 0 and tasks[task.after].op != "reduce_scatter":
            raise PlanMismatch(f"task {task.index} waits for a task that is not a reduce_scatter")
    return groups, tasks


def attach_hooks(
    binding: LayerBinding,
    grad_ready: Callable[[torch.Tensor], None],
    pre_forward: Callable[[int], Callable[..., None]],
    post_forward: Callable[[int], Callable[..., None]],
) -> list[Any]:
    """Readiness hooks on every parameter, forward pre- and post-hooks on every layer's module
    (``pre_forward(layer)`` / ``post_forward(layer)`` make the hooks); returns the handles."""
    hooks: list[Any] = []
    for ps in binding.params:
        for p in ps:
            hooks.append(p.register_post_accumulate_grad_hook(grad_ready))
    for layer, module in enumerate(binding.modules):
        hooks.append(module.register_forward_pre_hook(pre_forward(layer)))
        hooks.append(module.register_forward_hook(post_forward(layer)))
    return hooks


def iteration_row(
    it: int,
    begin: float,
    times: tuple[float, float, float],
    loss: torch.Tensor,
    warmup: bool,
    cpu_begin: float | None = None,
    machine_begin: tuple[int, int, int] | None = None,
    sched_begin: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A rank's record of iteration ``it`` (``times``: forward start, backward start, end;
    ``cpu_begin``: the process's CPU time, ``time.process_time()``, at ``begin``;
    ``machine_begin``: the machine's ``busy_ticks`` then, on the rank that reads them;
    ``sched_begin``: the training thread's ``thread_sched`` then)."""
    forward_start, backward_start, end = times
    row = {
        "iteration": it,
        "begin": begin,
        "forward_s": backward_start - forward_start,
        "backward_s": end - backward_start,
        "loss": float(loss.detach()),
        "warmup": warmup,
    }
    if cpu_begin is not None:
        row["cpu_begin"] = cpu_begin
    if machine_begin is not None:
        row["machine_begin"] = machine_begin
    if sched_begin is not None:
        row["sched_begin"] = sched_begin
    return row


def set_iteration_times(
    iterations: list[dict[str, Any]],
    finished: float,
    stats: Callable[[int], dict[str, float]] | None = None,
    cpu_finished: float | None = None,
    machine_finished: tuple[int, int, int] | None = None,
    sched_finished: tuple[int, int] | None = None,
) -> None:
    """An iteration lasts from its begin to the next one's (the last: to ``finished``); with
    ``stats``, each row also gets the executor's per-iteration statistics. Rows with a
    ``cpu_begin`` get ``cpu_s``: the CPU time the process (every thread of it: compute,
    communication, gloo's) used over the same interval (the last: to ``cpu_finished``).
    Rows with a ``machine_begin`` get ``machine_ticks``: ``[busy, total, cpus]``, the
    machine's busy and total clock ticks over the same interval (the last: to
    ``machine_finished``; ``runners.manifest.busy_ticks``), every process's on it. Rows with
    a ``sched_begin`` get ``thread_cpu_s`` and ``runq_wait_s``: the training thread's time on
    a CPU and its time ready to run but waiting for one over the same interval (the last: to
    ``sched_finished``; ``runners.manifest.thread_sched``)."""
    for i, row in enumerate(iterations):
        nxt = iterations[i + 1] if i + 1 < len(iterations) else None
        row["iteration_time_s"] = (finished if nxt is None else nxt["begin"]) - row["begin"]
        if stats is not None:
            row.update(stats(row["iteration"]))
        # (this row's mark is read, and dropped, after the row before has read it)
        cpu_begin = row.pop("cpu_begin", None)
        cpu_end = cpu_finished if nxt is None else nxt.get("cpu_begin")
        if cpu_begin is not None and cpu_end is not None:
            row["cpu_s"] = cpu_end - cpu_begin
        machine_begin = row.pop("machine_begin", None)
        machine_end = machine_finished if nxt is None else nxt.get("machine_begin")
        if machine_begin is not None and machine_end is not None:
            row["machine_ticks"] = [
                machine_end[0] - machine_begin[0],
                machine_end[1] - machine_begin[1],
                machine_begin[2],
            ]
        sched_begin = row.pop("sched_begin", None)
        sched_end = sched_finished if nxt is None else nxt.get("sched_begin")
        if sched_begin is not None and sched_end is not None:
            row["thread_cpu_s"] = (sched_end[0] - sched_begin[0]) / 1e9
            row["runq_wait_s"] = (sched_end[1] - sched_begin[1]) / 1e9


def write_record(job_dir: Path, name: str, rank: int, result: dict[str, Any]) -> None:
    """A process's record for the launcher: its parameters (``_state``, when saved) as
    ``params<rank>.pt``, the rest as ``<name>.json``, written atomically (temp, rename)."""
    state = result.pop("_state", None)
    if state is not None:
        torch.save(state, job_dir / f"params{rank}.pt")
    # The writer's own temp file: over several nodes a record is written by its rank and by
    # its node's first rank (the same content), maybe at the same moment.
    tmp = job_dir / f".{name}.{os.getpid()}.json"
    tmp.write_text(json.dumps(result))
    tmp.rename(job_dir / f"{name}.json")


class _Iteration:
    """Per-iteration state: readiness counters, buffers, synchronisation flags."""

    def __init__(self, it: int, engine: Engine) -> None:
        self.it = it
        params = engine.binding.params
        self.layer_left = [len(p) for p in params]
        # A layer without parameters of its own (a tied LM head) is never "ready": it does not
        # hold its group back, and a group with no parameters at all needs no collective.
        self.group_left = [sum(1 for layer in g.layers if params[layer]) for g in engine.groups]
        self.finals_left = [g.finals for g in engine.groups]
        self.synced = [g.numel == 0 for g in engine.groups]
        self.bufs: list[torch.Tensor | None] = [None] * len(engine.groups)
        self.local: list[torch.Tensor | None] = [None] * len(engine.groups)
        self.comm_s = 0.0
        self.wait_s = 0.0
        self.fwd_wait_s = 0.0  # in the forward's parameter hooks (not compute)
        self.negotiations = 0


class Engine:
    """Runs ``plan`` for ``model`` on the default process group (see the module docstring).

    Use: ``begin(t)``; forward; ``loss.backward()``; ... ; ``finish()``. ``stats(t)`` gives an
    iteration's communication time, exposed wait and negotiations once it is synchronised.
    """

    def __init__(
        self,
        model: nn.Module,
        binding: LayerBinding,
        plan: CommPlan,
        *,
        lr: float,
        momentum: float = 0.0,
        approximation: str = "stale",
        negotiate: bool | None = None,
        record: Any = None,
        on_negotiation: Callable[[float], None] | None = None,
        device: torch.device | None = None,
        dispatch: str = "auto",
    ) -> None:
        if dispatch not in DISPATCHES:
            raise ValueError(f"dispatch must be one of {', '.join(DISPATCHES)}")
        if approximation not in APPROXIMATIONS:
            raise ValueError(f"approximation must be one of {', '.join(APPROXIMATIONS)}")
        if plan.forward_sync:  # a second line behind the spec's check (``ddp``'s parameter)
            raise ValueError(
                "the lab's engine has no blocking collectives before the forward "
                f"(forward_sync: {plan.forward_sync}): set params.broadcast_buffers: false"
            )
        self.model, self.binding, self.plan = model, binding, plan
        self.device = device or torch.device("cpu")
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.groups, self.tasks = layout(plan, binding, self.world)
        self.lr, self.momentum = lr, momentum
        self.delay = plan.delay
        self.approximation = approximation if plan.delay > 0 else "stale"
        self.cross_barrier = plan.cross_barrier
        self.credit = plan.credit_bytes
        self.negotiate = (not is_fifo(plan)) if negotiate is None else negotiate
        # ``inline``: each released task is issued from the gradient hook (training thread).
        inline = dispatch == "auto" and inline_eligible(plan) and not self.negotiate
        self.dispatch = "inline" if inline else "thread"
        # A separate group for the negotiation, so it does not queue behind gradient traffic.
        self._neg_group = dist.new_group(backend="gloo") if self.negotiate else None
        self.record = record  # callable(iteration, resource, op, layer, start, end, bytes) or None
        self.on_negotiation = on_negotiation  # callable(start) per negotiation round, or None

        self._layer_of: dict[int, int] = {}
        group_of_layer = {layer: g for g, grp in enumerate(self.groups) for layer in grp.layers}
        self._group_of_layer = [group_of_layer[i] for i in range(len(binding.params))]
        offsets = [0] * len(self.groups)
        per_layer: dict[int, list[tuple[nn.Parameter, int, int]]] = {}
        for g, grp in enumerate(self.groups):
            for layer in grp.layers:
                for p in binding.params[layer]:
                    per_layer.setdefault(layer, []).append((p, offsets[g], offsets[g] + p.numel()))
                    offsets[g] += p.numel()
        # Per layer: (parameter, start, stop) in its group's flat buffer.
        self._slices = [per_layer.get(i, []) for i in range(len(binding.params))]
        for layer, ps in enumerate(binding.params):
            for p in ps:
                self._layer_of[id(p)] = layer
        self._momentum_buf: dict[int, torch.Tensor] = {}
        self._synced_w: dict[int, torch.Tensor] = {}  # delay with local-correct/extrapolate
        self._last_gbar: dict[int, torch.Tensor] = {}  # extrapolate: newest averaged gradient

        self._iters: dict[int, _Iteration] = {}
        self._stats: dict[int, dict[str, float]] = {}  # of iterations no longer held
        self._cur: _Iteration | None = None
        self._applied_upto: list[int] = [-1] * len(binding.params)  # source iteration applied
        self._approx_for: list[int | None] = [None] * len(binding.params)
        self._pool: dict[int, list[torch.Tensor]] = {}
        self._mark = 0.0  # time of the previous compute event (backward per-layer timing)

        # Shared with the communication thread (under self._cv).
        self._cv = threading.Condition()
        self._released: list[tuple[int, int]] = []  # (iteration, task) in release order
        self._issued: list[tuple[int, int, Any, int]] = []  # (iteration, task, work, bytes)
        self._issued_bytes = [0]  # prefix sums over self._issued
        self._issue_time: list[float] = []
        self._done_time: list[float] = []
        self._completed = 0  # issued tasks known complete here (in issue order)
        self._stop = False
        self._error: BaseException | None = None

        self._hooks = attach_hooks(binding, self._grad_ready, self._pre_forward, self._post_forward)
        self._watch: list[tuple[int, Any]] = []  # GPU: (position, work) not yet complete
        self._watcher: threading.Thread | None = None
        if self.device.type == "cuda":
            self._watcher = threading.Thread(target=self._watch_loop, name="cuda-watch",
                                             daemon=True)  # fmt: skip
            self._watcher.start()
        self._thread: threading.Thread | None = None
        if self.dispatch == "thread":
            self._thread = threading.Thread(target=self._comm_loop, name="comm", daemon=True)
            self._thread.start()

    # ----------------------------------------------------------------- main thread
    def begin(self, it: int) -> None:
        """Start iteration ``it`` (its forward comes next)."""
        self._raise_comm_error()
        self._cur = self._iters[it] = _Iteration(it, self)
        source = it - 1 - self.delay
        if not self.cross_barrier:
            for layer in range(len(self.binding.params)):
                self._update(layer, source)
        else:  # layers the forward did not call last time still get their update
            for layer in range(len(self.binding.params)):
                if self._applied_upto[layer] < source - 1:
                    self._update(layer, source - 1)
        for old in [k for k in self._iters if k < source - self.delay]:
            self._drop(old)
        self._mark = time.perf_counter()

    def finish(self) -> None:
        """Wait for every outstanding synchronisation, apply every update (all ranks end with
        the synchronised weights) and stop the communication thread."""
        last = max(self._iters, default=-1)
        for layer in range(len(self.binding.params)):
            self._update(layer, last, final=True)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()
        if self._watcher is not None:
            self._watcher.join()
        self._raise_comm_error()
        for h in self._hooks:
            h.remove()

    def stats(self, it: int) -> dict[str, float]:
        """Communication time, exposed wait and negotiations of iteration ``it``."""
        st = self._iters.get(it)
        if st is None:
            return self._stats.get(it, {})
        return {
            "comm_s": st.comm_s,
            "wait_s": st.wait_s,
            "fwd_wait_s": st.fwd_wait_s,
            "negotiations": st.negotiations,
        }

    def _pre_forward(self, layer: int):
        def hook(module: nn.Module, args: Any) -> None:
            st = self._cur
            if st is None:
                return
            if self.cross_barrier:
                start = time.perf_counter()
                self._update(layer, st.it - 1 - self.delay)
                self._fwd_start = time.perf_counter()
                st.fwd_wait_s += self._fwd_start - start
            else:
                self._fwd_start = time.perf_counter()

        return hook

    def _post_forward(self, layer: int):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            now = time.perf_counter()
            start = getattr(self, "_fwd_start", now)
            st = self._cur
            if self.record is not None and st is not None:
                self.record(st.it, "compute", "forward", self.binding.names[layer], start, now, 0)
            self._mark = now

        return hook

    def _grad_ready(self, p: torch.Tensor) -> None:
        st = self._cur
        if st is None:
            return
        layer = self._layer_of[id(p)]
        st.layer_left[layer] -= 1
        if st.layer_left[layer]:
            return
        now = time.perf_counter()
        if self.record is not None:
            self.record(st.it, "compute", "backward", self.binding.names[layer], self._mark, now, 0)
        self._mark = now
        g = self._group_of_layer[layer]
        st.group_left[g] -= 1
        if st.group_left[g] == 0:
            self._release(st, g)

    def _release(self, st: _Iteration, g: int) -> None:
        group = self.groups[g]
        buf = self._buffer(g)
        flat = buf[: group.numel]
        torch.cat([p.grad.reshape(-1) for p in group.params], out=flat)
        if group.length > group.numel:
            buf[group.numel :].zero_()
        if self.approximation == "local-correct":
            st.local[g] = flat.clone()
        for p in group.params:
            p.grad = None
        st.bufs[g] = buf
        if self.dispatch == "inline":  # release order is issue order: no thread hand-over
            for t in group.initial:
                self._issue(st.it, t)
            return
        with self._cv:
            for t in group.initial:
                self._released.append((st.it, t))
            self._cv.notify_all()

    def _buffer(self, g: int) -> torch.Tensor:
        free = self._pool.get(g)
        if free:
            return free.pop()
        return torch.empty(self.groups[g].length, device=self.device)

    def _drop(self, it: int) -> None:
        self._stats[it] = self.stats(it)
        st = self._iters.pop(it)
        for g, buf in enumerate(st.bufs):
            if buf is not None and st.synced[g]:
                self._pool.setdefault(g, []).append(buf)

    def _wait_synced(self, st: _Iteration, g: int) -> None:
        if st.synced[g]:
            return
        start = time.perf_counter()
        with self._cv:
            while True:
                # Count finished collectives here too: the communication thread may be waiting
                # for a core, and this thread would otherwise wait for it to wake.
                self._advance_completions()
                if st.synced[g] or self._error is not None:
                    break
                self._cv.wait(0.5)
        self._raise_comm_error()
        cur = self._cur
        if cur is not None:
            cur.wait_s += time.perf_counter() - start

    def _update(self, layer: int, source: int, final: bool = False) -> None:
        """Apply the synchronised gradients of iterations up to ``source`` to ``layer`` (in
        order), then (delay rules other than ``stale``) set its working weights."""
        done = self._applied_upto[layer]
        if done < source:
            g = self._group_of_layer[layer]
            for it in range(done + 1, source + 1):
                st = self._iters.get(it)
                if st is None:  # before the first iteration
                    continue
                self._wait_synced(st, g)
                self._apply(layer, st.bufs[g])
            self._applied_upto[layer] = source
        if self.approximation != "stale" and (final or self._approx_for[layer] != source):
            self._approximate(layer, source, final)
            self._approx_for[layer] = source

    @torch.no_grad()
    def _apply(self, layer: int, buf: torch.Tensor) -> None:
        for p, start, stop in self._slices[layer]:
            grad = buf[start:stop].view_as(p)
            target = self._synced_w.get(id(p), p)
            if self.momentum:
                m = self._momentum_buf.get(id(p))
                if m is None:
                    m = self._momentum_buf[id(p)] = grad.clone()
                else:
                    m.mul_(self.momentum).add_(grad)
                grad = m
            target.add_(grad, alpha=-self.lr)
            if self.approximation == "extrapolate":
                self._last_gbar[id(p)] = grad.clone()

    @torch.no_grad()
    def _approximate(self, layer: int, source: int, final: bool) -> None:
        """Working weights from the synchronised ones w (kept aside for these rules)."""
        g = self._group_of_layer[layer]
        for p, start, stop in self._slices[layer]:
            w = self._synced_w.get(id(p))
            if w is None:
                # First call: p still equals the synchronised weights (no update applied yet,
                # or only synchronised ones): keep them aside.
                w = self._synced_w[id(p)] = p.detach().clone()
            p.copy_(w)
            if final:
                continue
            if self.approximation == "local-correct":
                for it in range(source + 1, source + 1 + self.delay):
                    st = self._iters.get(it)
                    if st is not None and st.local[g] is not None:
                        p.add_(st.local[g][start:stop].view_as(p), alpha=-self.lr)
            else:  # extrapolate
                last = self._last_gbar.get(id(p))
                if last is not None:
                    p.add_(last, alpha=-self.lr * self.delay)

    def _raise_comm_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"communication thread failed: {self._error}") from self._error

    # --------------------------------------------------------- communication thread
    def _comm_loop(self) -> None:
        try:
            if self.device.type == "cuda":  # a thread's current device is its own
                torch.cuda.set_device(self.device)
            self._dispatch()
        except BaseException as err:  # handed to the main thread
            with self._cv:
                self._error = err
                self._cv.notify_all()

    def _dispatch(self) -> None:
        heap: list[tuple[Any, ...]] = []
        admitted = 0  # released tasks moved into the heap
        waiting: list[tuple[int, int, int]] = []  # (issue index of predecessor, iteration, task)
        after_pos = 0
        while True:
            with self._cv:
                while True:
                    self._advance_completions()
                    if (
                        self._stop
                        and self._completed == len(self._issued)
                        and (admitted == len(self._released) and not heap)
                    ):
                        return
                    R_loc, C_loc = len(self._released), self._completed
                    candidates = (
                        admitted < R_loc or heap or self._after_ready(waiting, after_pos, C_loc)
                    )
                    inflight = self._issued_bytes[-1] - self._issued_bytes[C_loc]
                    if candidates and inflight < self.credit:
                        break
                    self._cv.wait(0.05)
            if self.negotiate:
                counts = torch.tensor([R_loc, C_loc], dtype=torch.int64)
                if self.on_negotiation is not None:
                    self.on_negotiation(time.perf_counter())
                dist.all_reduce(counts, op=dist.ReduceOp.MIN, group=self._neg_group)
                R, C = int(counts[0]), int(counts[1])
                with self._cv:
                    cur = self._iters.get(self._released[R - 1][0]) if R else None
                if cur is not None:
                    cur.negotiations += 1
            else:
                R, C = R_loc, C_loc
            with self._cv:
                released = self._released[admitted:R]
            for seq, (it, t) in enumerate(released, start=admitted):
                key = (seq,) if not self.negotiate else (it, self.tasks[t].priority, seq)
                heapq.heappush(heap, (*key, it, t))
            admitted = max(admitted, R)
            # Dependent tasks (DeAR's all-gathers) become candidates once their predecessor is
            # complete on every rank (C counts completions in issue order).
            while after_pos < len(waiting) and waiting[after_pos][0] < C:
                _, it, t = waiting[after_pos]
                # Tie-break after every released task, by the predecessor's issue position
                # (the same on every rank).
                key = (it, self.tasks[t].priority, (1 << 40) + waiting[after_pos][0])
                heapq.heappush(heap, (*key, it, t))
                after_pos += 1
            issued_any = False
            while heap:
                inflight = self._issued_bytes[-1] - self._issued_bytes[C]
                if inflight >= self.credit:
                    break
                *_, it, t = heapq.heappop(heap)
                position = self._issue(it, t)
                for dep in self.tasks[t].dependents:
                    waiting.append((position, it, dep))
                issued_any = True
            if not issued_any and self.negotiate:
                time.sleep(0.0002)  # another rank is behind: give it the CPU

    @staticmethod
    def _after_ready(waiting: list[tuple[int, int, int]], start: int, completed: int) -> bool:
        return start < len(waiting) and waiting[start][0] < completed

    def _issue(self, it: int, t: int) -> int:
        task = self.tasks[t]
        st = self._iters[it]
        buf = st.bufs[task.group]
        assert buf is not None
        view = buf[task.start : task.stop]
        if task.op == "allreduce":
            work = dist.all_reduce(view, async_op=True)
        else:
            shard = view.view(self.world, -1)[self.rank]
            if task.op == "reduce_scatter":
                work = _reduce_scatter(shard, view, async_op=True)
            else:
                work = dist.all_gather_into_tensor(view, shard, async_op=True)
        now = time.perf_counter()
        with self._cv:
            position = len(self._issued)
            self._issued.append((it, t, work, task.nbytes))
            self._issued_bytes.append(self._issued_bytes[-1] + task.nbytes)
            self._issue_time.append(now)
            self._done_time.append(math.nan)
        if self.device.type == "cuda":  # done when the GPU is: the watcher asks the work
            with self._cv:
                self._watch.append((position, work))
                self._cv.notify_all()
            return position
        try:
            future = work.get_future()
        except RuntimeError:
            # gloo's reduce-scatter has no future (and never reports is_completed): wait here.
            work.wait()
            self._completion(position)
        else:
            future.add_done_callback(lambda _f, i=position: self._completion(i))
        return position

    def _watch_loop(self) -> None:
        """(GPU.) Stamp each collective's completion when the GPU has finished it, in issue
        order (NCCL's run in that order on one stream): a side stream of this thread waits for
        the work and the thread blocks on an event recorded after it (a blocking event: the
        thread sleeps, without the GIL, instead of polling)."""
        try:
            torch.cuda.set_device(self.device)  # a thread's current device is its own
            side = torch.cuda.Stream(self.device)
            while True:
                with self._cv:
                    while not self._watch and not (self._stop and self._all_issued_done()):
                        self._cv.wait(0.05)
                    if not self._watch:
                        return
                    position, work = self._watch.pop(0)
                with torch.cuda.stream(side):
                    work.wait()  # the side stream waits for the collective's end
                    done = torch.cuda.Event(blocking=True)
                    done.record(side)
                done.synchronize()
                self._completion(position)
        except BaseException as err:  # handed to the main thread
            with self._cv:
                self._error = err
                self._cv.notify_all()

    def _all_issued_done(self) -> bool:
        """(Under the lock.) Every issued collective has its completion stamped."""
        return not any(math.isnan(t) for t in self._done_time[self._completed :])

    def _completion(self, position: int) -> None:
        with self._cv:
            self._done_time[position] = time.perf_counter()
            self._cv.notify_all()

    def _advance_completions(self) -> None:
        """(Under the lock.) Count completions in issue order; synchronise finished groups."""
        while self._completed < len(self._issued):
            i = self._completed
            it, t, work, nbytes = self._issued[i]
            if math.isnan(self._done_time[i]):
                return
            work.wait()  # surfaces a failed collective as an exception
            self._completed += 1
            task = self.tasks[t]
            st = self._iters[it]
            start = max(self._issue_time[i], self._done_time[i - 1] if i else 0.0)
            # Collectives finish in issue order, but their done-callbacks may run (and stamp
            # the time) out of order: an op cannot end before the one ahead of it did.
            end = max(self._done_time[i], start)
            self._done_time[i] = end
            st.comm_s += end - start
            if self.record is not None:
                name = self.binding.names[self.groups[task.group].layers[0]]
                self.record(it, "network", task.op, name, start, end, nbytes)
            if task.op == "reduce_scatter":
                continue
            st.finals_left[task.group] -= 1
            if st.finals_left[task.group] == 0:
                buf = st.bufs[task.group]
                assert buf is not None
                buf.div_(self.world)
                st.synced[task.group] = True
                self._cv.notify_all()
