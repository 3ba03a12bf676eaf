"""Shared test helpers.

Tests that need an external program (redis-server, PostgreSQL, Chromium) skip when it is
missing on a developer machine, but fail when LAB_REQUIRE_SERVICES=1 (set by .ci/run), so CI can
never pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

# The exact all-reduce schedulers as the real-mode correctness tests run them on the debug
# model (small buckets, partitions and chunks, so that each schedules several collectives;
# ``ddp-lab``: DDP's buckets executed by the lab's engine), on the CPU and on a GPU.
EXACT_SCHEDULERS = [
    ("wfbp", {}),
    ("ddp", {"bucket_bytes": 200_000, "first_bucket_bytes": 50_000}),
    ("ddp-lab", {"bucket_bytes": 200_000, "first_bucket_bytes": 50_000}),
    ("bytescheduler", {"partition_bytes": 40_000, "credit_bytes": 80_000}),
    ("pace", {"chunk_bytes": 64_000, "fusion": "none"}),
    ("dear", {"fusion_bytes": 100_000}),
]


def skip_or_fail(message: str) -> NoReturn:
    """Skip with ``message``; fail instead under LAB_REQUIRE_SERVICES=1 (CI)."""
    if os.environ.get("LAB_REQUIRE_SERVICES") == "1":
        pytest.fail(message + "; LAB_REQUIRE_SERVICES=1 forbids skipping")
    pytest.skip(message)


def require_binary(name: str, *candidates: str) -> str:
    for candidate in (name, *candidates):
        found = shutil.which(candidate) or (candidate if os.path.isfile(candidate) else None)
        if found:
            return found
    skip_or_fail(f"{name} is not installed (apt-get install it, or run .ci/run)")


def wait_for(
    predicate: Callable[[], Any],
    timeout_s: float = 60,
    interval_s: float = 0.2,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def torchrun(script: Path, ranks: int, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` (with ``args``) run by ``ranks`` processes under torchrun on this machine
    (one torch thread each, the project on the path, 120 s at most); its output captured.
    torchrun's own files go beside the script (in the test's folder), not into the system's
    /tmp."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
         "--log-dir", str(script.parent / "torchrun"), "--nproc-per-node", str(ranks),
         str(script), *args],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def require_root(what: str) -> None:
    """Skip (fail under LAB_REQUIRE_SERVICES=1) unless running as root, which ``what`` needs."""
    if os.geteuid() == 0:
        return
    skip_or_fail(f"{what} needs root")


def require_horovod() -> None:
    """Skip when this interpreter cannot import horovod.torch; fail instead under
    LAB_REQUIRE_SERVICES=1 (CI), like require_binary."""
    probe = subprocess.run(
        [sys.executable, "-c", "import horovod.torch"], capture_output=True, text=True
    )
    if probe.returncode == 0:
        return
    last_line = (probe.stderr.strip().splitlines() or ["?"])[-1]
    skip_or_fail(f"horovod.torch is not importable ({last_line}): run `make horovod`")


# --- Django fixtures shared by unit and integration tests ---------------------------------
@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("alice", password="a-long-test-password")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("root", password="x" * 12, is_staff=True)


@pytest.fixture
def config() -> Any:
    """Small and fast: 2 entries x 1 workload x 2 seeds on the debug model (unit and
    integration tests that call ``lab.actions`` directly)."""
    from lab.actions import ExperimentConfig

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
