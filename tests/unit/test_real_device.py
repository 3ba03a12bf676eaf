"""Where real runs train (``real.device``, ``runners.real.launch.resolve_device``): one GPU
per rank over NCCL where the host has them, gloo on the CPU otherwise, and the run's summary
says which and why. Our machines have no GPU: these tests drive the choice with a stand-in
for the number of CUDA devices torch sees, and run the CPU path for real; the NCCL path
itself is not run here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runners.real import hvd, launch, worker
from runners.spec import SpecError, validate

ROOT = Path(__file__).resolve().parents[2]


def spec(system: str = "wfbp", workers: int = 2, **real) -> object:
    return validate(
        {
            "system": system,
            "mode": "real",
            "workload": "vgg16-debug",
            "iterations": 3,
            "warmup_iterations": 1,
            "cluster": {"workers": workers},
            "real": {"network": "loopback", **real},
        }
    )


@pytest.fixture
def gpus(monkeypatch):
    """Set how many CUDA devices torch sees here."""

    def see(n: int) -> None:
        monkeypatch.setattr(launch, "cuda_devices", lambda: n)

    return see


def test_auto_takes_a_gpu_per_rank_where_there_is_one_else_the_cpu(gpus):
    gpus(0)
    assert launch.resolve_device(spec()) == ("cpu", "")  # a CPU machine: nothing to say
    assert launch.resolve_device(spec(gpus=2)) == (
        "cpu",
        "on the CPU: no CUDA device is visible to torch here",
    )
    gpus(1)
    device, note = launch.resolve_device(spec())
    assert device == "cpu" and "1 CUDA device here for 2 ranks" in note
    gpus(2)
    assert launch.resolve_device(spec()) == ("cuda", "")
    device, note = launch.resolve_device(spec(workers=4))
    assert device == "cpu" and "2 CUDA devices here for 4 ranks" in note
    assert launch.resolve_device(spec(device="cpu")) == ("cpu", "")


def test_cuda_is_refused_where_a_rank_would_have_no_gpu(gpus):
    gpus(1)
    with pytest.raises(SpecError, match=r"^real\.device: cuda asked, but 1 CUDA device here"):
        launch.resolve_device(spec(device="cuda"))
    gpus(2)
    assert launch.resolve_device(spec(device="cuda")) == ("cuda", "")
    with pytest.raises(SpecError, match=r"^real\.device: "):
        launch.preflight(spec(device="cuda", workers=3))


def test_the_real_horovod_goes_on_gpus_only_when_built_with_nccl(gpus, monkeypatch):
    gpus(2)
    monkeypatch.setattr(launch, "framework", lambda s: "horovod")
    monkeypatch.setattr(hvd, "nccl_built", lambda: False)
    device, note = launch.resolve_device(spec("horovod"))
    assert device == "cpu" and "built without NCCL" in note
    with pytest.raises(SpecError, match="built without NCCL"):
        launch.resolve_device(spec("horovod", device="cuda"))
    monkeypatch.setattr(hvd, "nccl_built", lambda: True)
    assert launch.resolve_device(spec("horovod")) == ("cuda", "")


def test_a_run_over_several_hosts_goes_on_gpus_only_where_every_host_has_them(gpus):
    """Each host's runner decides for itself: with ``auto`` over several hosts only GPUs the
    ledger gave every host (``real.gpus``: a GPU per rank) count, so all decide alike."""
    gpus(4)
    device, note = launch.resolve_device(spec(workers=4, nodes=2, network="auto"))
    assert device == "cpu" and "several hosts" in note
    assert launch.resolve_device(spec(workers=4, nodes=2, gpus=2, network="auto")) == (
        "cuda",
        "",
    )
    assert launch.resolve_device(spec(workers=4, nodes=2, device="cuda", network="auto")) == (
        "cuda",
        "",
    )


def test_the_ps_arena_trains_on_the_cpu(gpus):
    gpus(4)
    device, note = launch.resolve_device(spec("ps-default"))
    assert device == "cpu" and "PS arena" in note
    with pytest.raises(SpecError, match=r"^real\.device: the PS arena"):
        spec("ps-default", device="cuda")


def test_gpus_from_the_portal_s_ledger_are_checked_where_the_run_lands(gpus):
    """The portal checks a run against its own machine before storing it; GPUs asked of the
    ledger are another host's, so their check waits for the launch there."""
    gpus(0)
    launch.preflight(spec(device="cuda", gpus=2))  # no refusal here
    with pytest.raises(SpecError, match=r"^real\.device: "):
        launch.preflight(spec(device="cuda"))  # this machine's GPUs: none


def test_the_device_is_left_out_of_the_spec_at_its_default():
    assert "device" not in spec().as_dict()["real"]  # run keys of earlier runs unchanged
    assert spec(device="cpu").as_dict()["real"]["device"] == "cpu"


def test_each_rank_takes_its_own_gpu(monkeypatch):
    monkeypatch.delenv("LAB_LOCAL_DEVICE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert worker.local_device() == 1  # torchrun's ranks on one node
    assert worker.local_device(default=3) == 3  # Horovod's local rank
    monkeypatch.setenv("LAB_LOCAL_DEVICE", "2")  # the emulated network: a node per rank
    assert worker.local_device() == 2 and worker.local_device(default=3) == 2
    assert worker.synchronizer(torch.device("cpu"))() is None  # nothing to wait for


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_on_a_machine_without_a_gpu_exits_two_before_anything_starts(tmp_path):
    path = tmp_path / "spec.json"
    raw = {
        "system": "wfbp", "mode": "real", "workload": "vgg16-debug", "iterations": 3,
        "cluster": {"workers": 2}, "real": {"network": "loopback", "device": "cuda"},
    }  # fmt: skip
    path.write_text(json.dumps(raw))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "runners", "run", str(path), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("invalid spec: real.device: cuda asked, but no CUDA device")
    assert not out.exists()
