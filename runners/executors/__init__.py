"""Executors: where a run's process lives. ``get(name, **options)`` builds one; every executor
implements ``base.Executor`` (launch / poll / stop / find), chosen per worker host by
configuration (``LAB_EXECUTOR``)."""

from __future__ import annotations

from typing import Any

from .base import Executor, ExecutorError, Resources, Status

NAMES = ("local", "docker", "slurm")

__all__ = ["NAMES", "Executor", "ExecutorError", "Resources", "Status", "get"]


def get(name: str, **options: Any) -> Executor:
    """``local`` (python=), ``docker`` (image=), ``slurm`` (partition=, extra_sbatch=)."""
    if name == "local":
        from .local import LocalExecutor

        return LocalExecutor(**options)
    if name == "docker":
        from .docker import DockerExecutor

        return DockerExecutor(**options)
    if name == "slurm":
        from .slurm import SlurmExecutor

        return SlurmExecutor(**options)
    raise ValueError(f"unknown executor {name!r} (one of {', '.join(NAMES)})")
