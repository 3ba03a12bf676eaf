from __future__ import annotations

import pytest

from lab.actions import ExperimentConfig


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("alice", password="a-long-test-password")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("root", password="x" * 12, is_staff=True)


@pytest.fixture
def config() -> ExperimentConfig:
    """Small and fast: 2 entries x 1 workload x 2 seeds on the debug model."""
    return ExperimentConfig(
        name="bs vs wfbp",
        system="bytescheduler",
        baselines=("wfbp",),
        workloads=("resnet50-debug",),
        seeds=(0, 1),
        cluster={"workers": 4, "bandwidth_gbps": 1.0},
        params={"credit_bytes": 100_000},
        iterations=5,
    )


@pytest.fixture(autouse=True)
def results_dir(settings, tmp_path):
    """Each test gets its own result store (run ids restart with every test database)."""
    settings.RESULTS_DIR = tmp_path / "results"
    return settings.RESULTS_DIR
