"""A real run's memory, checked before any process starts (``runners.real.launch.preflight``):
each process's weights and a worker's activations (what autograd saves for the backward, from
the workload's profile) against this machine's available memory, or a GPU's free memory for
runs on GPUs. Before the activations were counted, ``gpt2`` on 2 workers passed the check and
the kernel's OOM killer ended a rank half way (2026-12-07). The machine's memory is a
stand-in here so the verdicts do not depend on the host; the GPUs' free memory too (our
machines have none: the GPU check is not run against a real device here)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import workloads
from runners.real import launch
from runners.spec import SpecError, validate
from workloads import profiler

GIB = 2**30


def spec(workload: str, workers: int = 2, batch_size: int | None = None, **real) -> object:
    raw = {
        "system": "wfbp",
        "mode": "real",
        "workload": workload,
        "cluster": {"workers": workers},
        "real": {"network": "loopback", **real},
    }
    if batch_size is not None:
        raw["batch_size"] = batch_size
    return validate(raw)


@pytest.fixture
def machine(monkeypatch):
    """Set this machine's available memory (GiB) and its GPUs' free memory (GiB each)."""

    def have(gib: float, gpus: list[float] | None = None) -> None:
        monkeypatch.setattr(launch, "_available_memory", lambda: int(gib * GIB))
        monkeypatch.setattr(launch, "cuda_devices", lambda: len(gpus or []))
        monkeypatch.setattr(launch, "_gpu_free_memory", lambda: [int(g * GIB) for g in gpus or []])

    return have


def test_saved_bytes_count_the_activations_once_and_not_the_weights():
    model = nn.Sequential(nn.Linear(4, 8, bias=False), nn.ReLU(), nn.Linear(8, 2, bias=False))
    inputs = torch.zeros(5, 4)
    saved = profiler.saved_bytes(model, lambda: model(inputs).sum())
    # the first Linear keeps its input (5 x 4), ReLU its output (5 x 8) and the second Linear
    # its input: that same output, counted once; the weights the Linears keep are not counted
    assert saved == (5 * 4 + 5 * 8) * 4


def test_a_profile_s_activations_are_a_line_in_the_batch_size():
    for name in ("resnet50-debug", "gpt2-debug"):
        profile = workloads.load_profile(name)
        assert profile.activation_per_sample_bytes > 0
        assert profiler.saved_activation_bytes(name, 3) == profile.activation_bytes(3)
    # GPT-2's attention keeps (heads x context x context) per layer and sample: gigabytes
    assert workloads.load_profile("gpt2").activation_bytes(8) > 16 * GIB


def test_gpt2_on_two_workers_is_refused_for_its_activations(machine):
    machine(23.0)
    with pytest.raises(SpecError) as err:
        launch.preflight(spec("gpt2"))
    assert err.value.field == "workload"
    text = str(err.value)
    assert "gpt2 on 2 ranks needs about 44.8 GiB" in text
    assert "its activations 20.2 GiB a worker at batch_size 8" in text
    assert "23.0 GiB available" in text and "fewer workers or a smaller batch_size" in text
    # the weights alone (the check before activations were counted) would have let it start
    fixed, activations = launch.memory_need(spec("gpt2"))
    assert 2 * fixed < 0.8 * 23 * GIB < 2 * (fixed + activations)


def test_a_smaller_batch_or_more_memory_lets_it_start(machine):
    machine(23.0)
    launch.preflight(spec("gpt2", batch_size=1))  # 2 x (2.2 + 2.5) GiB
    machine(64.0)
    launch.preflight(spec("gpt2"))
    with pytest.raises(SpecError, match="on 1 rank needs"):
        machine(20.0)
        launch.preflight(spec("gpt2", workers=1))


def test_on_gpus_the_activations_are_checked_against_a_gpu_not_the_host(machine):
    machine(23.0, gpus=[79.0, 79.0])
    assert launch.resolve_device(spec("gpt2")) == ("cuda", "")
    launch.preflight(spec("gpt2"))  # 20 GiB of activations on each 79 GiB GPU
    machine(23.0, gpus=[79.0, 16.0])
    with pytest.raises(SpecError) as err:
        launch.preflight(spec("gpt2"))
    assert err.value.field == "workload"
    assert "a GPU" in str(err.value) and "16.0 GiB free" in str(err.value)
    machine(23.0, gpus=[16.0, 16.0])
    launch.preflight(spec("gpt2", device="cpu", batch_size=1))  # the CPU: the host's memory


def test_a_run_over_several_nodes_checks_this_node_s_share(machine, monkeypatch):
    monkeypatch.setenv("LAB_NNODES", "2")
    monkeypatch.setenv("LAB_NODE_RANK", "0")
    monkeypatch.setenv("LAB_RDZV_HOST", "127.0.0.1")
    machine(23.0)
    with pytest.raises(SpecError, match="gpt2 on 1 rank needs about 22.4 GiB"):
        launch.preflight(spec("gpt2", device="cpu"))  # 2 workers: one on this node
    assert launch.preflight(spec("gpt2", batch_size=2, device="cpu")).kind == "nodes"


def test_measuring_a_model_that_does_not_fit_is_refused_before_anything_is_measured(
    monkeypatch, capsys, tmp_path
):
    """``python -m workloads profile --measure`` checks every model it is asked for first:
    gpt2 at its default batch (8) on a 23 GiB machine exits 2 naming --batch-size, and
    vgg16-debug, asked for beside it, is not measured either."""
    from workloads import __main__ as cli
    from workloads import measure

    monkeypatch.setattr(workloads, "available_memory", lambda: 23 * GIB)
    argv = ["profile", "vgg16-debug", "gpt2", "--measure", "--measured-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "gpt2 at batch size 8 needs about" in err and "smaller --batch-size" in err, err
    assert not list(tmp_path.iterdir())
    assert measure.memory_refusal("gpt2", 1, "cpu") is None  # 4.7 GiB
    # on a GPU, against its free memory (a stand-in: no GPU here)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (16 * GIB, 80 * GIB))
    assert "cuda:0 has 16.0 GiB free" in measure.memory_refusal("gpt2", None, "cuda:0")
    assert measure.memory_refusal("gpt2", 2, "cuda:0") is None
