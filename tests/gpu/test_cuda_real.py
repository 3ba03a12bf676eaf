"""Real mode on a GPU: the NCCL path of the all-reduce arena and the measured GPU profiles.

Our machines have no GPU: every test here is skipped on them (one skip for the module, its
reason naming what to run), and runs on a machine with CUDA, such as the lab's lent device
machine, through ``scripts/device-check.sh`` (one prepared command: this module, then the GPU
profiles of the full-size models). A lent machine has one GPU, and NCCL takes one GPU per rank,
so the runs here have one worker: a world of one over NCCL, the device placement, the
timers synchronised with the GPU and the engine's per-parameter updates on the GPU, not
collectives between GPUs (which need a machine with two or more).

Needs only torch, numpy and PyYAML (the device machine's image has them); no Django."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runners.execute import run_to_directory
from runners.spec import validate
from tests.conftest import EXACT_SCHEDULERS
from workloads import data
from workloads.models import build_model

if not torch.cuda.is_available():
    pytest.skip(
        "no CUDA device here: run scripts/device-check.sh on a machine with a GPU",
        allow_module_level=True,
    )

ROOT = Path(__file__).resolve().parents[2]
MODEL = "vgg16-debug"  # no batch norm: the engine's updates equal torch.optim.SGD's exactly
STEPS = 4  # 1 warm-up + 3 measured
BATCH = 8
SEED = 3
LR, MOMENTUM = 0.05, 0.9
# The run's ranks and this test's reference are separate processes on the same GPU with
# torch's defaults (TF32 convolutions in cuDNN, its algorithms chosen the same way); some of
# cuDNN's backward algorithms add with atomics, in no fixed order, hence a tolerance above the
# CPU tests' 1e-5.
TOLERANCE = 1e-4


def _spec(system: str, params: dict | None = None, **real) -> dict:
    return {
        "system": system,
        "mode": "real",
        "workload": MODEL,
        "batch_size": BATCH,
        "cluster": {"workers": 1, "bandwidth_gbps": 1},
        "params": params or {},
        "iterations": STEPS - 1,
        "warmup_iterations": 1,
        "seed": SEED,
        "real": {
            "network": "loopback",
            "device": "cuda",
            "dataset": "shapes",
            "lr": LR,
            "momentum": MOMENTUM,
            **real,
        },
    }


def _reference_sgd() -> dict:
    """Single-process SGD on the same GPU, on the batches the one rank trains on."""
    gpu = torch.device("cuda", 0)
    torch.manual_seed(SEED)
    model = build_model(MODEL).to(gpu)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = data.loss_fn(MODEL)
    for step in range(STEPS):
        opt.zero_grad()
        x, y = data.batch(MODEL, "shapes", BATCH, SEED, 0, 1, step)
        loss_fn(model(x.to(gpu)), y.to(gpu)).backward()
        opt.step()
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def reference() -> dict:
    return _reference_sgd()


@pytest.mark.parametrize(("system", "params"), EXACT_SCHEDULERS)
def test_exact_schedulers_train_on_the_gpu_as_single_process_sgd(
    system, params, reference, tmp_path, monkeypatch
):
    """Each exact scheduler through the command line's code path, its rank on the GPU over
    NCCL: the summary says so, the timers read the GPU's time, and the weights after the run
    are single-process SGD's on the same GPU."""
    if system == "ddp-lab":
        raw = _spec("ddp", params, implementation="lab")
    else:
        raw = _spec(system, params)
    monkeypatch.setenv("LAB_REAL_SAVE_PARAMS", "1")
    out = tmp_path / "run"
    summary = run_to_directory(validate(raw), out, ["test"])
    assert summary["device"]["kind"] == "cuda", summary["device"]
    got = torch.load(out / "params0.pt", map_location="cpu")
    worst = max((got[k] - reference[k]).abs().max().item() for k in reference)
    scale = max(reference[k].abs().max().item() for k in reference)
    assert worst <= TOLERANCE * max(1.0, scale), f"max difference {worst:g}"
    metrics = summary["metrics"]
    assert 0 < metrics["compute_time_s"] <= metrics["iteration_time_s"]
    series = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert [s["iteration"] for s in series] == list(range(STEPS))
    for row in series:  # each iteration holds its compute and its wait
        assert row["compute_time_s"] + row["exposed_comm_s"] <= row["iteration_time_s"], row
    if system != "ddp":  # the lab's engine records each layer (on a GPU: its kernels queued)
        rows = list(csv.DictReader((out / "timeline.csv").open()))
        compute = [r for r in rows if r["resource"] == "compute"]  # one worker: unnamed lanes
        assert compute and all(float(r["end_s"]) > float(r["start_s"]) for r in compute)


def test_the_gpu_profile_of_a_model_is_measured(tmp_path):
    """``workloads profile --measure --device cuda`` times training steps on the GPU (after
    ``torch.cuda.synchronize()``) and writes the profile under the GPU's short name."""
    done = subprocess.run(
        [sys.executable, "-m", "workloads", "profile", MODEL, "--measure", "--device", "cuda",
         "--measured-dir", str(tmp_path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (written,) = tmp_path.glob(f"{MODEL}@*.json")
    profile = json.loads(written.read_text())
    assert profile["label"] == written.stem.split("@")[1] != "cpu"
    assert profile["source"]["device"].startswith("cuda")
    assert profile["source"]["device_name"] == torch.cuda.get_device_name(0)
    assert profile["layers"] and all(
        layer["fwd_s"] > 0 and layer["bwd_s"] > 0 for layer in profile["layers"]
    ), profile["layers"]


def test_the_memory_check_reads_each_gpu_s_free_memory():
    """On GPUs a rank's weights and training step are checked against each GPU's free memory
    (``launch._gpu_free_memory``, from ``torch.cuda.mem_get_info``) before anything starts:
    ``gpt2`` at a batch whose step exceeds the GPU is refused naming ``workload``; at batch 1
    (a 2.9 GiB step) it passes."""
    from runners.real import launch
    from runners.spec import SpecError

    free = launch._gpu_free_memory()
    assert len(free) == torch.cuda.device_count()
    assert all(0 < f <= torch.cuda.get_device_properties(i).total_memory
               for i, f in enumerate(free))  # fmt: skip
    profile = launch.workloads.load_profile("gpt2")
    too_big = 1
    while profile.step_bytes(too_big) <= min(free):
        too_big *= 2

    def gpt2(batch: int) -> object:
        return validate({"system": "wfbp", "mode": "real", "workload": "gpt2",
                         "batch_size": batch, "cluster": {"workers": 1},
                         "real": {"network": "loopback", "device": "cuda"}})  # fmt: skip

    launch.preflight(gpt2(1))
    with pytest.raises(SpecError) as err:
        launch.preflight(gpt2(too_big))
    assert err.value.field == "workload" and "a GPU" in str(err.value)
