"""The one interface every executor implements (``local``, ``docker``, ``slurm``).

All follow dispatch-and-reconcile: ``launch`` is short and returns a ``handle`` (a string the
database keeps: a pid, a container id, a Slurm job id); ``poll`` answers from the outside world
only (process table, Docker engine, ``squeue``), so any process may ask after any restart;
``find`` recovers the handle of a run from its run id alone (a container label, a Slurm job
name) when a worker died between starting a run and saving its handle; ``stop`` ends a run with
a grace period. A run's home folder is the contract between them:

    <home>/spec.json     the spec to run (written by the caller)
    <home>/process.log   stdout + stderr of the runner (streamed there by every executor)
    <home>/exit_code     written when the runner exits (by the runner's wrapper, or by poll)
    <home>/run/          the run directory (appears atomically on success)

No string from a spec reaches a shell or a container's configuration: an executor takes only
the typed ``Resources`` below, which the caller builds from validated fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

SPEC = "spec.json"
LOG = "process.log"
EXIT_CODE = "exit_code"
RUN_DIR = "run"
LABEL = "lab.run-id"  # container label / Slurm job-name prefix that ties a job to its run


@dataclass(frozen=True)
class Status:
    state: str  # "running" | "exited" | "lost"
    exit_code: int | None = None
    reason: str = ""  # why a run is lost or failed, in words (shown in the portal)


@dataclass(frozen=True)
class Resources:
    """What a run may ask of its executor; nothing else reaches the container or the job.

    ``gpus`` are GPU UUIDs handed out by the GPU ledger (empty: CPU only). ``cpus`` and
    ``memory_gb`` are limits (None: no limit). ``nodes`` > 1 only for Slurm multi-node runs
    (one batch job over the nodes). ``network``: empty for every run but one node of a run over
    several hosts, which must reach the other nodes (its rendezvous and gloo's connections):
    ``host`` gives the docker executor's container the host's network, any other name joins
    the Docker network of that name (set by the administrator: ``LAB_NODE_NETWORK``)."""

    gpus: tuple[str, ...] = ()
    cpus: float | None = None
    memory_gb: float | None = None
    shm_gb: float = 2.0
    nodes: int = 1
    env: dict[str, str] = field(default_factory=dict, hash=False)
    network: str = ""

    def __post_init__(self) -> None:
        if self.cpus is not None and not self.cpus > 0:
            raise ValueError(f"cpus must be > 0 (got {self.cpus})")
        if self.memory_gb is not None and not self.memory_gb > 0:
            raise ValueError(f"memory_gb must be > 0 (got {self.memory_gb})")
        if not self.shm_gb > 0 or self.nodes < 1:
            raise ValueError("shm_gb must be > 0 and nodes >= 1")
        if self.network and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", self.network):
            raise ValueError(f"network {self.network!r} is not a Docker network name")
        for key in self.env:
            if not key.replace("_", "").isalnum() or not key[:1].isalpha():
                raise ValueError(f"environment variable name {key!r} is not allowed")


class ExecutorError(RuntimeError):
    """The executor cannot do what was asked (engine down, image missing): says what to do."""


class Executor(Protocol):
    name: str

    def launch(self, home: Path, run_id: int, resources: Resources) -> str:
        """Start the run in ``home`` (which holds spec.json); return its handle at once."""
        ...

    def poll(self, home: Path, handle: str) -> Status:
        """State of a launched run, from the outside world only."""
        ...

    def stop(self, home: Path, handle: str, grace_s: float = 10.0) -> bool:
        """Ask the run to end (SIGTERM), kill it after ``grace_s``; False if already gone."""
        ...

    def find(self, run_id: int, home: Path | None = None) -> str | None:
        """The handle of run ``run_id``'s job (launched in ``home``) if one was started,
        else None: the launcher may have died before it recorded the handle."""
        ...


def read_exit_code(home: Path) -> int | None:
    path = Path(home) / EXIT_CODE
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() else -1


def write_exit_code(home: Path, code: int) -> None:
    """Atomically (tmp + rename), as the runner's wrapper does."""
    tmp = Path(home) / (EXIT_CODE + ".tmp")
    tmp.write_text(f"{code}\n")
    tmp.rename(Path(home) / EXIT_CODE)
