"""One rank of a real run: ``python -m runners.real.worker JOB_DIR`` (started by ``torchrun``).

Reads ``JOB_DIR/job.json`` (written by ``runners.real.launch``: the resolved spec, the plan, the
training options), trains, and writes ``JOB_DIR/rank<R>.json`` (per-iteration times, losses,
communication statistics, its timeline) and, when asked, ``params<R>.pt``. Rank 0 prints
``progress <done> <total>`` lines on stdout for the launcher's progress bar.
"""

from __future__ import annotations

import datetime
import gc
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from workloads import data
from workloads.models import build_model

from ..manifest import busy_ticks, thread_sched
from ..policies.allreduce import CommPlan, CommTask
from . import priority
from .engine import (
    Engine,
    LayerBinding,
    bind_layers,
    iteration_row,
    set_iteration_times,
    write_record,
)
from .order import run_order as interleave_order


def plan_from_json(raw: dict[str, Any]) -> CommPlan:
    tasks = tuple(
        CommTask(
            layers=tuple(t["layers"]),
            size_bytes=int(t["size_bytes"]),
            priority=int(t["priority"]),
            op=t.get("op", "allreduce"),
            after=int(t.get("after", -1)),
        )
        for t in raw["tasks"]
    )
    return CommPlan(
        tasks=tasks,
        credit_bytes=float(raw["credit_bytes"]),
        cross_barrier=bool(raw["cross_barrier"]),
        delay=int(raw.get("delay", 0)),
        fusion_threshold_bytes=float(raw.get("fusion_threshold_bytes", 0.0)),
        fusion_cycle_s=float(raw.get("fusion_cycle_s", 0.0)),
        forward_sync=tuple((str(op), int(size)) for op, size in raw.get("forward_sync", ())),
    )


def plan_to_json(plan: CommPlan) -> dict[str, Any]:
    """The run's plan, for its job file. Every all-reduce run has one, also where PyTorch's
    DDP trains with its own reducer (its plan may then carry the buffers' broadcast,
    ``forward_sync``, which only the lab's engine refuses: ``Engine``)."""
    return {
        "tasks": [
            {
                "layers": list(t.layers),
                "size_bytes": t.size_bytes,
                "priority": t.priority,
                "op": t.op,
                "after": t.after,
            }
            for t in plan.tasks
        ],
        "credit_bytes": plan.credit_bytes,
        "cross_barrier": plan.cross_barrier,
        "delay": plan.delay,
        "fusion_threshold_bytes": plan.fusion_threshold_bytes,
        "fusion_cycle_s": plan.fusion_cycle_s,
        "forward_sync": [[op, size] for op, size in plan.forward_sync],
    }


class Straggle:
    """Emulated compute slow-down of this rank: after each layer's forward and each
    parameter's gradient, sleep (factor - 1) x the compute time since the previous event, so
    the rank computes ``factor`` times slower and its gradients become ready that much later.
    Registered before the engine's (or DDP's) hooks, so they see the delayed readiness."""

    def __init__(self, binding: LayerBinding, sync: Callable[[], None] = lambda: None) -> None:
        self.factor = 1.0
        self.sync = sync  # on a GPU: wait for the compute stream, so the time is the compute's
        self.mark = time.perf_counter()
        self.handles = []
        for module in binding.modules:
            self.handles.append(module.register_forward_pre_hook(self._start))
            self.handles.append(module.register_forward_hook(self._forward_done))
        for params in binding.params:
            for p in params:
                self.handles.append(p.register_post_accumulate_grad_hook(self._grad_done))

    def reset(self) -> None:
        self.mark = time.perf_counter()

    def _start(self, module: nn.Module, args: Any) -> None:
        self.mark = time.perf_counter()

    def _sleep(self) -> None:
        if self.factor > 1.0:
            self.sync()
        now = time.perf_counter()
        if self.factor > 1.0:
            time.sleep((self.factor - 1.0) * (now - self.mark))
        self.mark = time.perf_counter()

    def _forward_done(self, module: nn.Module, args: Any, output: Any) -> None:
        self._sleep()

    def _grad_done(self, p: torch.Tensor) -> None:
        self._sleep()


def slowdown(stragglers: list[dict[str, Any]], worker: int, iteration: int) -> float:
    """This worker's compute slow-down at ``iteration`` (the spec's straggler windows; the
    largest factor wins where windows overlap)."""
    factor = 1.0
    for s in stragglers:
        until = s.get("until_iteration")
        if (
            s["worker"] == worker
            and s.get("from_iteration", 0) <= iteration
            and (until is None or iteration < until)
        ):
            factor = max(factor, float(s["slowdown"]))
    return factor


def main(argv: list[str]) -> int:
    job_dir = Path(argv[0])
    try:
        return _main(job_dir)
    except BaseException:
        # The launcher shows the first rank's error (torchrun's own report names no cause).
        rank = os.environ.get("RANK", "x")
        (job_dir / f"error{rank}.txt").write_text(traceback.format_exc())
        raise


def _main(job_dir: Path) -> int:
    job = json.loads((job_dir / "job.json").read_text())
    if job.get("arena") == "ps":  # a PS worker or server process: runners.real.ps
        from .ps import process_main

        return process_main(job_dir, job)
    spec, train = job["spec"], job["train"]
    torch.set_num_threads(int(train["threads"]))
    if train.get("framework") == "horovod":
        import horovod.torch as hvd

        with priority.of_job(train):  # Horovod's background and gloo threads
            hvd.init()
        rank, world = hvd.rank(), hvd.size()
        if train.get("device") == "cuda":
            torch.cuda.set_device(local_device(hvd.local_rank()))
        worker = int(os.environ.get("LAB_WORKER", rank))
        try:
            result = _train(job, spec, train, rank, world, worker)
            if int(job.get("nodes", 1)) > 1:
                _share_records(job_dir, result, rank, hvd.local_rank(), hvd.allgather_object)
        finally:
            hvd.shutdown()
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        worker = int(os.environ.get("LAB_WORKER", rank))
        timeout = datetime.timedelta(seconds=float(job["timeout_s"]))
        with priority.of_job(train):  # gloo's or NCCL's threads
            if train.get("device") == "cuda":
                gpu = torch.device("cuda", local_device())
                torch.cuda.set_device(gpu)
                dist.init_process_group("nccl", timeout=timeout, device_id=gpu)
            else:
                dist.init_process_group("gloo", timeout=timeout)
        try:
            result = _train(job, spec, train, rank, world, worker)
            if int(job.get("nodes", 1)) > 1:

                def gather(record: Any) -> list[Any]:
                    records: list[Any] = [None] * world
                    dist.all_gather_object(records, record)
                    return records

                local_rank = int(os.environ.get("LOCAL_RANK", "0"))
                _share_records(job_dir, result, rank, local_rank, gather)
        finally:
            dist.destroy_process_group()
    write_record(job_dir, f"rank{rank}", rank, result)
    return 0


def local_device(default: int | None = None) -> int:
    """This rank's GPU among the host's visible ones: ``LAB_LOCAL_DEVICE`` (the launcher's, on
    the emulated network, where every rank is a node of its own), else torchrun's
    ``LOCAL_RANK`` (or ``default``: Horovod's local rank)."""
    for name in ("LAB_LOCAL_DEVICE", "LOCAL_RANK"):
        value = os.environ.get(name)
        if value is not None and (name == "LAB_LOCAL_DEVICE" or default is None):
            return int(value)
    return int(default or 0)


def synchronizer(device: torch.device) -> Callable[[], None]:
    """What to call before reading a timer: on a GPU, wait for the compute stream (kernels
    are asynchronous; the communication's own streams are not waited for); on the CPU,
    nothing."""
    if device.type != "cuda":
        return lambda: None
    return lambda: torch.cuda.current_stream(device).synchronize()


def _share_records(
    job_dir: Path,
    result: dict[str, Any],
    rank: int,
    local_rank: int,
    gather: Callable[[Any], list[Any]],
) -> None:
    """Over several nodes each node's launcher reads the records of every rank from its own
    folder: ``gather`` (the framework's all-gather of objects) brings them to every rank, and
    the first rank of each node writes the others' (a rank's saved state stays its own)."""
    state = result.pop("_state", None)
    records = gather(result)
    if local_rank == 0:
        for other, record in enumerate(records):
            if other != rank:
                write_record(job_dir, f"rank{other}", other, record)
    if state is not None:
        result["_state"] = state


def _train(
    job: dict[str, Any],
    spec: dict[str, Any],
    train: dict[str, Any],
    rank: int,
    world: int,
    worker: int,
) -> dict[str, Any]:
    if job.get("interleave"):  # the engine bench's blocks: copies of its own
        return _train_interleaved(job, spec, train, rank, world, worker)
    workload, seed = spec["workload"], int(spec["seed"])
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if train.get("device") == "cuda"
        else torch.device("cpu")
    )
    sync = synchronizer(device)
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = build_model(workload).to(device)
    model.train()
    binding = bind_layers(model, job["layers"], job["grad_bytes"])
    loss_fn = data.loss_fn(workload)
    batches = data.loader(
        workload, train["dataset"], int(spec["batch_size"]), seed, rank, world, start_step=0
    )
    straggle = Straggle(binding, sync)
    stragglers = spec["cluster"].get("stragglers", [])
    first_recorded, end_recorded = job["timeline"]
    timeline: list[list[Any]] = []
    # Every rank records its own lanes, named per worker as the PS arena's are (``compute[w1]``,
    # ``network[w1]``; one rank: plain), on its clock (``clock`` below aligns them).
    lane = "" if world == 1 else f"[w{worker}]"

    def record(it: int, resource: str, op: str, layer: str, start: float, end: float, nbytes: int):
        if first_recorded <= it < end_recorded:
            timeline.append([it, resource + lane, op, layer, start, end, nbytes])

    total = int(spec["warmup_iterations"]) + int(spec["iterations"])
    lr, momentum = float(train["lr"]), float(train["momentum"])
    own = train.get("framework")  # ddp or horovod: the framework's own implementation
    step = None
    if own:
        if own == "ddp":  # with ``real.ddp_timeline``, its buckets timed on the timeline
            timed = record if train.get("ddp_timeline") else None
            step = _ddp_step(model, job, lr, momentum, sync, timed, binding)
        else:
            step = _horovod_step(model, job, lr, momentum, sync)
        engine = None
    else:
        with priority.of_job(train):
            engine = Engine(  # its dispatcher thread (and negotiation group's gloo threads)
                model,
                binding,
                plan_from_json(job["plan"]),
                lr=lr,
                momentum=momentum,
                approximation=job.get("approximation", "stale"),
                record=record,
                device=device,
                dispatch=train.get("dispatch", "auto"),
            )
    iterations = []
    settle_gc()
    _barrier(own)
    clock = {"boot_id": boot_id(), "barrier_s": time.perf_counter()}  # ``merged_timeline``
    for it in range(total):
        straggle.factor = slowdown(stragglers, worker, it)
        inputs, targets = next(batches)
        if device.type == "cuda":
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
        sync()  # the previous iteration's kernels are done: the timers read the GPU's time
        begin = time.perf_counter()
        cpu_begin, sched_begin = time.process_time(), thread_sched()
        machine_begin = busy_ticks() if rank == 0 else None  # the machine rank 0 runs on
        synced_s = None  # Horovod's or DDP's wait in its step (``_horovod_step``, ``_ddp_step``)
        if engine is not None:
            engine.begin(it)
            sync()
            straggle.reset()
            forward_start = time.perf_counter()
            loss = loss_fn(model(inputs), targets)
            sync()
            backward_start = time.perf_counter()
            loss.backward()
            sync()
            end = time.perf_counter()
        else:
            straggle.reset()
            forward_start, backward_start, end, loss, synced_s = step(inputs, targets, loss_fn)
        times = (forward_start, backward_start, end)
        warmup = it < int(spec["warmup_iterations"])
        row = iteration_row(it, begin, times, loss, warmup, cpu_begin, machine_begin, sched_begin)
        if synced_s is not None:  # Horovod or DDP: its wait for the all-reduces
            row["sync_s"] = synced_s
        iterations.append(row)
        if rank == 0:
            print(f"progress {it + 1} {total}", flush=True)
    threads = priority.census()  # while the communication threads are all alive
    if engine is not None:
        engine.finish()
    sync()  # the final updates
    finished, cpu_finished = time.perf_counter(), time.process_time()
    sched_finished = thread_sched()
    set_iteration_times(
        iterations,
        finished,
        engine.stats if engine is not None else getattr(step, "stats", None),
        cpu_finished,
        busy_ticks() if rank == 0 else None,
        sched_finished,
    )
    result: dict[str, Any] = {
        "rank": rank,
        "worker": worker,
        "world": world,
        "iterations": iterations,
        "timeline": timeline,
        "clock": clock,
        "negotiated": bool(engine is not None and engine.negotiate),
        "dispatch": engine.dispatch if engine is not None else "",
        "threads": threads,  # per priority (runners.real.priority)
        "compute_priority": priority.current(),
    }
    if rank == 0 and train["dataset"] != "synthetic":
        result["eval"] = _evaluate(model, workload, train["dataset"], loss_fn)
    if device.type == "cuda":
        result["gpu"] = {
            "index": device.index,
            "name": torch.cuda.get_device_name(device),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(device))),
        }
    if job.get("save_params"):  # on the CPU, whatever the ranks trained on
        result["_state"] = {
            k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()
        }
    return result


def _train_interleaved(
    job: dict[str, Any],
    spec: dict[str, Any],
    train: dict[str, Any],
    rank: int,
    world: int,
    worker: int,
) -> dict[str, Any]:
    """The engine bench's interleaved measurement (``job["interleave"]``: ``block``
    iterations a side, ``pairs`` block pairs after one of warm-up, ``control``,
    ``ddp_built_first``): copies of the model with the same initial weights, one trained by
    PyTorch's DDP, one by the lab's engine (and, with ``control``, a second under DDP), in
    the same processes, taking turns in blocks in ``order.run_order`` and drawing their
    batches from one loader in turn (the timing is measured here, not the training). Each
    side sees the machine a fraction of a second from the other, where launched runs see it
    tens of seconds apart. A block's first iteration (the switch: caches cold for this
    copy) and its last (its interval runs on to the next block's begin, through the
    engine's drain and the ranks' barrier) are marked ``trim``; the engine is started
    afresh for each of its blocks (its momentum with it) and finished at the block's end, so
    no collective of one side overlaps the other's. Rows carry ``side`` and ``block``."""
    workload, seed = spec["workload"], int(spec["seed"])
    plan = job["interleave"]
    block, pairs, control = int(plan["block"]), int(plan["pairs"]), bool(plan["control"])
    device = torch.device("cpu")  # the bench's: loopback, CPUs
    sync = synchronizer(device)
    sides = ["default", "lab"] + (["control"] if control else [])
    if not plan.get("ddp_built_first", True):  # which copy's memory comes first, alternated
        sides = sides[1:] + sides[:1]
    models: dict[str, nn.Module] = {}
    stragglers: dict[str, Straggle] = {}  # factor 1: the hooks a launched run has, idle
    bindings: dict[str, LayerBinding] = {}
    for side in sides:
        torch.manual_seed(seed)  # the same initial weights for every copy, on every rank
        models[side] = build_model(workload).to(device)
        models[side].train()
        bindings[side] = bind_layers(models[side], job["layers"], job["grad_bytes"])
        stragglers[side] = Straggle(bindings[side], sync)
    loss_fn = data.loss_fn(workload)
    batches = data.loader(
        workload, train["dataset"], int(spec["batch_size"]), seed, rank, world, start_step=0
    )
    lr, momentum = float(train["lr"]), float(train["momentum"])
    steps = {
        side: _ddp_step(models[side], job, lr, momentum, sync)
        for side in ("default", "control")
        if side in models
    }
    iterations: list[dict[str, Any]] = []
    dispatch = ""  # how the engine side issued its collectives
    total = (1 + pairs) * block * len(sides)  # the spec's iterations: the launcher's progress
    done = 0
    settle_gc()
    dist.barrier()
    for pair in range(1 + pairs):
        for side in interleave_order(pair, control):
            engine = None
            if side == "lab":
                with priority.of_job(train):
                    engine = Engine(
                        models[side],
                        bindings[side],
                        plan_from_json(job["plan"]),
                        lr=lr,
                        momentum=momentum,
                        device=device,
                        dispatch=train.get("dispatch", "auto"),
                    )
                    dispatch = engine.dispatch
            for k in range(block):
                inputs, targets = next(batches)
                begin = time.perf_counter()
                cpu_begin, sched_begin = time.process_time(), thread_sched()
                stragglers[side].reset()
                if engine is not None:
                    engine.begin(k)
                    forward_start = time.perf_counter()
                    loss = loss_fn(models[side](inputs), targets)
                    backward_start = time.perf_counter()
                    loss.backward()
                    end = time.perf_counter()
                else:
                    forward_start, backward_start, end, loss, _ = steps[side](
                        inputs, targets, loss_fn
                    )
                row = iteration_row(
                    len(iterations), begin, (forward_start, backward_start, end), loss,
                    pair == 0, cpu_begin, None, sched_begin,
                )  # fmt: skip
                row.update(side=side, block=pair, trim=k in (0, block - 1))
                iterations.append(row)
                done += 1
                if rank == 0:
                    print(f"progress {done} {total}", flush=True)
            if engine is not None:
                engine.finish()
            dist.barrier()  # in the block's last (trimmed) interval: the sides never overlap
    set_iteration_times(
        iterations, time.perf_counter(), None, time.process_time(), None, thread_sched()
    )
    return {
        "rank": rank,
        "worker": worker,
        "world": world,
        "iterations": iterations,
        "timeline": [],
        "clock": {"boot_id": boot_id(), "barrier_s": iterations[0]["begin"]},
        "negotiated": False,
        "dispatch": dispatch,
        "threads": priority.census(),
        "compute_priority": priority.current(),
    }


def _ddp_step(
    model: nn.Module,
    job: dict[str, Any],
    lr: float,
    momentum: float,
    sync: Callable[[], None],
    record: Callable[..., None] | None = None,
    binding: LayerBinding | None = None,
):
    """PyTorch's own DistributedDataParallel with the ``ddp`` entry's bucket sizes (on a GPU:
    its device). DDP waits for the network twice in a step, and on the CPU the step returns
    both waits together: the run's exposed communication, left out of its compute, as
    Horovod's. In its forward, before the model's, it broadcasts the model's buffers from
    rank 0 (batch norm's statistics; ``broadcast_buffers``, on by default), one blocking
    broadcast per dtype: from the call to the model's own forward (a pre-hook on it). In
    ``backward`` its reducer waits for the buckets' all-reduces after the last gradient: from
    the last gradient's accumulation (a hook on every parameter, which runs just before the
    reducer's own) to ``backward``'s return (the reducer's launch of its last bucket, its wait
    and its copies back). On a GPU the hooks see the kernels' launches, not their ends: the
    waits are not split (None).

    With ``record`` (a launched run's timeline, with ``real.ddp_timeline``; on the CPU),
    DDP's buckets are all-reduced by a communication hook that is PyTorch's own default one
    (``allreduce_hook``: divide by the world size, all-reduce asynchronously) timed: each
    bucket's all-reduce from the reducer's call of the hook (or the end of the bucket before
    it: gloo runs one collective at a time, in order) to its future's completion is a
    ``network`` row of the timeline, named after the layer (``binding``) of the bucket's
    first parameter, and the step's ``stats(it)`` gives their sum with the buffers'
    broadcast (``comm_s``, as the simulator's comm time counts its ``forward_sync``); the
    broadcast and the model's forward and backward are rows too (``_DDPBuckets.close``).
    PyTorch documents the default hook as leaving DDP's results unchanged; its timing may
    differ (a Python call a bucket; in an A/B here the hooked step was shorter in 11 of 14
    comparisons, median -5.6 %), so without ``real.ddp_timeline`` DDP runs hookless, as
    PyTorch runs it."""
    from torch.nn.parallel import DistributedDataParallel

    params = job["spec"]["params"]
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(params["first_bucket_bytes"])
    device = next(model.parameters()).device
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=int(params["bucket_bytes"]) / 2**20,
        # torch 2.13 renamed ``broadcast_buffers`` (now deprecated, with a FutureWarning in
        # every rank's log) to ``forward_sync_buffers``; the new one still broadcasts the
        # buffers once at construction, before the warm-up, where every rank's are equal
        # already (the same seed): the timed steps are the same either way.
        forward_sync_buffers=bool(params.get("broadcast_buffers", True)),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    split = device.type != "cuda"
    timed = None
    if record is not None and split:
        buffers = bool(params.get("broadcast_buffers", True)) and any(True for _ in model.buffers())
        timed = _DDPBuckets(ddp, binding, buffers)
    model_forward = [0.0]  # when the model's own forward began (DDP's buffers synced)
    last_gradient = [0.0]  # when this backward's latest gradient was accumulated
    if split:

        def forwarding(module: nn.Module, args: Any) -> None:
            model_forward[0] = time.perf_counter()

        def accumulated(_: torch.Tensor) -> None:
            last_gradient[0] = time.perf_counter()

        model.register_forward_pre_hook(forwarding)
        for p in model.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(accumulated)

    def step(inputs: torch.Tensor, targets: torch.Tensor, loss_fn: Any):
        sync()
        forward_start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        called = model_forward[0] = time.perf_counter()
        loss = loss_fn(ddp(inputs), targets)  # DDP syncs the buffers before the model's
        sync()
        backward_start = last_gradient[0] = time.perf_counter()
        loss.backward()  # the reducer waits here for its buckets' all-reduces
        returned = time.perf_counter()
        if timed is not None:  # every bucket's future is done: the reducer waited for them
            timed.close(record, called, model_forward[0], backward_start, last_gradient[0])
        waited = (model_forward[0] - called) + (returned - last_gradient[0]) if split else None
        optimizer.step()
        sync()
        return forward_start, backward_start, time.perf_counter(), loss, waited

    if timed is not None:
        step.stats = timed.stats  # type: ignore[attr-defined]
    return step


class _DDPBuckets:
    """(``_ddp_step`` with a timeline.) DDP's communication hook, PyTorch's default
    all-reduce timed: each bucket's issue (the reducer calling the hook) and completion (its
    future's callback, on gloo's thread) kept per step, then, after the step's backward, laid
    end to end in issue order (``close``): a collective starts when it was issued or when the
    one ahead of it ended, whichever is later, and ends no earlier than it started (the
    callbacks may run out of order; gloo completes them in order)."""

    def __init__(self, ddp: nn.Module, binding: LayerBinding | None, buffers: bool) -> None:
        self.world = dist.get_world_size()
        self.buffers = buffers  # DDP broadcasts the model's buffers in its forward
        self.layer_of: dict[int, str] = {}
        if binding is not None:
            pairs = zip(binding.names, binding.params, strict=True)
            self.layer_of = {id(p): name for name, own in pairs for p in own}
        self.it = 0  # the step (the launched run's iteration) the buckets belong to
        self.issued: list[list[float]] = []  # [issue, done, bytes], in issue order
        self.labels: list[str] = []
        self.comm: dict[int, float] = {}
        ddp.register_comm_hook(None, self.hook)

    def hook(self, state, bucket):  # no annotations: DDP checks them (below)
        """DDP's communication hook (``register_comm_hook``, which refuses annotations other
        than ``dist.GradBucket`` and ``Future[Tensor]``: none here, as this module's are
        strings)."""
        tensor = bucket.buffer()
        entry = [time.perf_counter(), math.nan, float(tensor.numel() * tensor.element_size())]
        params = bucket.parameters()
        self.labels.append(self.layer_of.get(id(params[0]), "") if params else "")
        self.issued.append(entry)
        tensor.div_(self.world)  # as ``allreduce_hook``: before, against overflow

        def done(fut: torch.futures.Future) -> torch.Tensor:
            entry[1] = time.perf_counter()
            return fut.value()[0]

        return dist.all_reduce(tensor, async_op=True).get_future().then(done)

    def close(
        self,
        record: Callable[..., None],
        called: float,
        model_forward: float,
        backward_start: float,
        last_gradient: float,
    ) -> None:
        """The step as timeline rows of iteration ``it``, then the next step: DDP's own
        forward until the model's (``called`` to ``model_forward``: its buffers' broadcast,
        where it has buffers to sync), the model's forward with the loss and its backward to
        the last gradient as two ``compute`` rows (the whole model's, not per layer), and
        the buckets' all-reduces."""
        it = self.it
        total, ahead = 0.0, 0.0
        if self.buffers:  # the simulator's ``forward_sync``, counted in its comm time too
            record(it, "network", "broadcast", "buffers", called, model_forward, 0)
            total = model_forward - called
        record(it, "compute", "forward", "model", model_forward, backward_start, 0)
        record(it, "compute", "backward", "model", backward_start, last_gradient, 0)
        for (issue, done, nbytes), label in zip(self.issued, self.labels, strict=True):
            start = max(issue, ahead)
            end = max(done, start) if not math.isnan(done) else start
            record(it, "network", "allreduce", label, start, end, int(nbytes))
            total += end - start
            ahead = end
        self.comm[it] = total
        self.issued, self.labels = [], []
        self.it += 1

    def stats(self, it: int) -> dict[str, float]:
        """Iteration ``it``'s communication time: its buckets' all-reduces, end to end, and
        its buffers' broadcast."""
        return {"comm_s": self.comm[it]} if it in self.comm else {}


def settle_gc() -> None:
    """Just before a process's timed loop: collect once, then freeze what survives (the
    model, torch, every module imported) into the collector's permanent generation. Without
    it a full (generation-2) collection scans that whole heap, 0.1-0.2 s on our CPU testbed,
    and the processes of one job, allocating alike, reach it at the same iteration: every
    rank stalls at once (seen at iterations 27-28 of 33 in every PS run recording each
    iteration's timeline, 80-90 ms on every lane). Frozen, a full collection scans only what
    the loop has allocated since. The collector stays on (cycles are still freed)."""
    gc.collect()
    gc.freeze()


def boot_id() -> str | None:
    """This machine's boot id (``/proc/sys/kernel/random/boot_id``): processes that report
    the same one read one ``time.perf_counter`` clock (the kernel's monotonic clock, which
    containers share with their host); None where it cannot be read."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _barrier(framework: str | None) -> None:
    if framework == "horovod":
        import horovod.torch as hvd

        hvd.allreduce(torch.zeros(1), name="barrier")  # a CPU tensor: Horovod's gloo path
    else:
        dist.barrier()


def _horovod_step(
    model: nn.Module, job: dict[str, Any], lr: float, momentum: float, sync: Callable[[], None]
):
    """The real Horovod: ``hvd.DistributedOptimizer`` (gradients averaged; tensor fusion with
    the entry's threshold and cycle time, set by the launcher in the environment). The step
    also returns the time the rank waited in ``optimizer.synchronize()`` for the step's
    all-reduces (Horovod's documented split of ``step``: synchronize, then the update with
    ``skip_synchronize``): the run's exposed communication, left out of its compute."""
    import horovod.torch as hvd

    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum),
        named_parameters=model.named_parameters(),
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    def step(inputs: torch.Tensor, targets: torch.Tensor, loss_fn: Any):
        sync()
        forward_start = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        sync()
        backward_start = time.perf_counter()
        loss.backward()  # each gradient's hook enqueues its all-reduce; none waited for
        sync()  # (on a GPU) the backward's kernels are done: the wait below is Horovod's
        waited = time.perf_counter()
        optimizer.synchronize()
        synced = time.perf_counter()
        with optimizer.skip_synchronize():
            optimizer.step()
        sync()
        return forward_start, backward_start, time.perf_counter(), loss, synced - waited

    return step


@torch.no_grad()
def _evaluate(model: nn.Module, workload: str, dataset: str, loss_fn: Any) -> dict[str, float]:
    """Loss (and accuracy for classifiers) of the final weights on the held-out split."""
    inputs, targets = data.eval_set(workload, dataset)
    device = next(model.parameters()).device
    inputs, targets = inputs.to(device), targets.to(device)
    model.eval()
    losses, correct, count = [], 0, 0
    for start in range(0, len(inputs), 256):
        x, y = inputs[start : start + 256], targets[start : start + 256]
        out = model(x)
        losses.append(float(loss_fn(out, y)) * len(x))
        if isinstance(out, torch.Tensor) and out.dim() == 2:
            correct += int((out.argmax(1) == y).sum())
            count += len(x)
    model.train()
    result = {"eval_loss": sum(losses) / len(inputs)}
    if count:
        result["eval_accuracy"] = correct / count
    return result


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Every record is written (atomically): leave without the interpreter's finalization. There
    # torch may still destroy gloo work objects (DDP's reducer holds some) and abort with
    # SIGABRT, failing a finished run; seen once in CI after a DDP run's last iteration under
    # load (the crash pytorch/pytorch PR 179291 describes).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
