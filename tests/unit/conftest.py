from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def results_dir(settings, tmp_path):
    """Each test gets its own result store (run ids restart with every test database)."""
    settings.RESULTS_DIR = tmp_path / "results"
    return settings.RESULTS_DIR


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path):
    """And its own state that lives in LAB_VAR_DIR at run time: the figures a real run's
    launch waits for (``lab.measuring``), so one test's render asked for holds up no other
    test's real run."""
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


@pytest.fixture
def real_config():
    """One real run: PyTorch's DDP on vgg16-debug, two ranks on loopback, 50 iterations."""
    from lab.actions import ExperimentConfig

    return ExperimentConfig(
        name="real",
        system="ddp",
        workloads=("vgg16-debug",),
        seeds=(0,),
        mode="real",
        iterations=50,
        cluster={"workers": 2},
        real={"network": "loopback"},
    )


@pytest.fixture(autouse=True)
def no_interference_probes(monkeypatch):
    """``fidelity``'s interference check launches ranks on the emulated network: in unit
    tests only where a test fakes its probe (one that forgets fails here rather than probing
    for real)."""
    from runners import fidelity_interference

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started the interference check's probe")

    monkeypatch.setattr(fidelity_interference, "probe_once", refuse)
