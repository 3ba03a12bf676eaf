"""A real run's memory, checked before any process starts (``runners.real.launch.preflight``):
each process's weights and a worker's training step (the most its tensors hold at once beyond
the weights, from the workload's profile; on the CPU counted twice for glibc's heap) against
this machine's available memory, or a GPU's free memory for runs on GPUs. Before the
activations were counted, ``gpt2`` on 2 workers passed the check and the kernel's OOM killer
ended a rank half way (2026-12-07). The machine's memory is a
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


def test_live_bytes_follow_each_tensor_from_its_op_to_its_end():
    """The step's peak counter: what the ops make, not the weights made before it; every
    storage once; freed tensors leave it, so after the backward only the gradients are
    alive, and the peak holds at least the saved activations and at least the gradients."""
    big = nn.Linear(1000, 1000, bias=False)  # 4 MB of weights
    model = nn.Sequential(big, nn.ReLU(), nn.Linear(1000, 2, bias=False))
    inputs = torch.zeros(3, 1000)
    grads = sum(p.numel() * 4 for p in model.parameters())
    saved = profiler.saved_bytes(model, lambda: model(inputs).sum())
    counter = profiler.LiveBytes()
    with counter:
        loss = model(inputs).sum()
        after_forward = counter.now
        loss.backward()
        del loss
    kept = saved - inputs.numel() * 4  # the batch, made before the counter, not counted
    assert after_forward >= kept  # what autograd keeps is alive until the backward
    assert counter.now == grads  # the activations and transients are freed
    assert counter.peak >= max(kept, grads)
    assert counter.peak < grads + 10 * (3 * 1000 * 4)  # the weights themselves not counted


def test_a_profile_s_step_peaks_bound_the_peak_between_its_batch_sizes():
    """Measured at its batch sizes; between them the line is at or above the peak (the peak
    is the largest of sums linear in the batch); transformer's peak is not one line through
    batch 2 and 4 (the old activations' rule would say 4.1 GiB at 32, it is 5.2)."""
    for name in ("transformer-debug", "resnet50-debug"):
        profile = workloads.load_profile(name)
        assert [b for b, _ in profile.step_peaks] == list(profiler.STEP_PEAK_BATCHES)
        assert profiler.step_peak_at(name, 8) == profile.step_peak_bytes(8)
        for batch in (3, 12, 48):
            assert profile.step_peak_bytes(batch) >= profiler.step_peak_at(name, batch)
    transformer = workloads.load_profile("transformer")
    assert transformer.step_peak_bytes(32) > 1.2 * transformer.activation_bytes(32)


def test_gpt2_on_two_workers_is_refused_for_its_activations(machine):
    machine(23.0)
    with pytest.raises(SpecError) as err:
        launch.preflight(spec("gpt2"))
    assert err.value.field == "workload"
    text = str(err.value)
    assert "gpt2 on 2 ranks needs about 96.5 GiB" in text
    assert "a worker's training step holds 23.2 GiB at batch_size 8" in text
    assert "counted 2 times for the CPU's heap" in text
    assert "23.0 GiB available" in text and "fewer workers or a smaller batch_size" in text
    # the weights alone (the check before activations were counted) would have let it start
    fixed, activations = launch.memory_need(spec("gpt2"))
    assert 2 * fixed < 0.8 * 23 * GIB < 2 * (fixed + activations)


def test_a_smaller_batch_or_more_memory_lets_it_start(machine):
    machine(23.0)
    launch.preflight(spec("gpt2", batch_size=1))  # 2 x (1.8 + 2 x 2.9) GiB
    machine(128.0)
    launch.preflight(spec("gpt2"))
    with pytest.raises(SpecError, match="on 1 rank needs"):
        machine(20.0)
        launch.preflight(spec("gpt2", workers=1))


def test_on_gpus_the_activations_are_checked_against_a_gpu_not_the_host(machine):
    machine(23.0, gpus=[79.0, 79.0])
    assert launch.resolve_device(spec("gpt2")) == ("cuda", "")
    launch.preflight(spec("gpt2"))  # a 23 GiB step on each 79 GiB GPU, no heap slack
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
    with pytest.raises(SpecError, match="gpt2 on 1 rank needs about 48.3 GiB"):
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
    assert measure.memory_refusal("gpt2", 1, "cpu") is None  # 7.6 GiB
    # on a GPU, against its free memory (a stand-in: no GPU here)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (16 * GIB, 80 * GIB))
    assert "cuda:0 has 16.0 GiB free" in measure.memory_refusal("gpt2", None, "cuda:0")
    assert measure.memory_refusal("gpt2", 2, "cuda:0") is None


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_sizes": [2, 4], "bytes": [10]},  # lengths differ
        {"batch_sizes": [4, 2], "bytes": [10, 20]},  # not increasing
        {"batch_sizes": [0, 2], "bytes": [10, 20]},  # a batch of none
        {"bytes": [10]},  # no batch sizes
    ],
)
def test_a_malformed_step_peak_is_an_error_naming_the_profile(bad):
    import json

    raw = json.loads((workloads.PROFILES_DIR / "vgg16-debug.json").read_text())
    raw["step_peak_bytes"] = bad
    with pytest.raises(ValueError, match="profile 'vgg16-debug': step_peak_bytes"):
        workloads._parse_profile("vgg16-debug", raw)


def test_a_profile_without_the_step_peak_counts_its_activations_and_all_copies():
    """A profile written before the step's peak was counted: the gradients among the weights'
    copies, the activations as the step."""
    import dataclasses

    profile = dataclasses.replace(workloads.load_profile("transformer"), step_peaks=())
    weights = profile.total_param_bytes
    assert profile.step_bytes(32) == profile.activation_bytes(32)
    assert profile.training_bytes(32) == 4 * weights + profile.activation_bytes(32)
    full = workloads.load_profile("transformer")
    assert full.training_bytes(32, 2.0) == 3 * weights + 2 * full.step_peak_bytes(32)
