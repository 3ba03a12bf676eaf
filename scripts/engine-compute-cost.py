"""The lab engine's own compute-side cost, without communication: one process (a gloo group of
one), DDP's step and the engine's forward and backward on copies of a debug model, taking turns
in blocks of 12 iterations as ``bench --only real`` does (each block's ends left
out). With one rank there is no traffic, so what differs is the per-iteration work each side
does on the training thread (the engine's hooks per layer and per parameter and its updates
tensor by tensor; DDP's reducer and ``optimizer.step``). The gap against the two-rank bench is
what communication adds.

    PYTHONPATH=. .venv/bin/python scripts/engine-compute-cost.py resnet50-debug [--pairs 30]
        [--dispatch auto|thread]

``--dispatch``: the engine's ``real.dispatch`` (``auto``, the default: DDP's buckets issued from
the gradient hooks; ``thread``: through its communication thread).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

BLOCK = 12


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a debug model, e.g. resnet50-debug")
    parser.add_argument("--pairs", type=int, default=30, help="block pairs (default 30)")
    parser.add_argument(
        "--dispatch", choices=["auto", "thread"], default="auto",
        help="the engine's dispatch (real.dispatch; default auto)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not 1 <= args.pairs <= 10_000:
        print(f"--pairs: must be between 1 and 10000 (got {args.pairs})", file=sys.stderr)
        return 2
    with socket.socket() as s:  # a free port for the group of one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")

    import torch
    import torch.distributed as dist

    import workloads
    from runners import bench
    from runners.real import launch
    from runners.real.engine import Engine, bind_layers
    from runners.real.order import run_order
    from runners.real.worker import _ddp_step
    from runners.spec import SpecError
    from workloads import data
    from workloads.models import build_model

    try:
        spec = bench._ddp_spec(args.model, 3, 50, "lab")
    except SpecError as err:
        print(f"invalid model: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        plan = launch._plan(spec)
        profile = workloads.load_profile(spec.workload)
        names = [layer.name for layer in profile.layers]
        grad_bytes = [layer.param_bytes for layer in profile.layers]
        job = {"spec": spec.as_dict()}
        models = {}
        for side in ("default", "lab"):
            torch.manual_seed(spec.seed)
            models[side] = build_model(spec.workload).train()
        binding = bind_layers(models["lab"], names, grad_bytes)
        loss_fn = data.loss_fn(spec.workload)
        batches = data.loader(spec.workload, "synthetic", spec.batch_size, 0, 0, 1, start_step=0)
        step = _ddp_step(models["default"], job, 0.01, 0.9, lambda: None)
        times: dict[str, list[float]] = {"default": [], "lab": []}
        for pair in range(1 + args.pairs):  # the first pair: warm-up
            for side in run_order(pair):
                engine = (
                    Engine(
                        models["lab"],
                        binding,
                        plan,
                        lr=0.01,
                        momentum=0.9,
                        dispatch=args.dispatch,
                    )
                    if side == "lab"
                    else None
                )
                for k in range(BLOCK):
                    inputs, targets = next(batches)
                    begin = time.perf_counter()
                    if engine is not None:
                        engine.begin(k)
                        loss_fn(models["lab"](inputs), targets).backward()
                    else:
                        step(inputs, targets, loss_fn)
                    if pair and 0 < k < BLOCK - 1:
                        times[side].append(time.perf_counter() - begin)
                if engine is not None:
                    engine.finish()
    finally:
        dist.destroy_process_group()
    ddp, lab = statistics.median(times["default"]), statistics.median(times["lab"])
    print(
        f"{spec.workload}: one process, no traffic: DDP's step {ddp * 1e3:.2f} ms, the engine's "
        f"forward and backward {lab * 1e3:.2f} ms ({100 * (lab / ddp - 1):+.1f} %), medians of "
        f"{len(times['lab'])} iterations a side"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
