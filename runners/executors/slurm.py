"""Slurm executor: submit a run as a batch job with ``sbatch``; follow it with ``squeue``/``sacct``.

Same dispatch-and-reconcile contract as the other executors (see ``base``): ``launch`` writes a
batch script into the run's home folder, submits it with ``sbatch --parsable`` and returns the
Slurm job id as the handle at once; ``poll``, ``stop`` and ``find`` ask Slurm (``squeue``,
``sacct``, ``scancel``) and the home folder only, so any process may ask after any restart. The
home folder must be on a file system that the submit host and the compute nodes share:

    <home>/spec.json     the spec to run (written by the caller)
    <home>/slurm.sh      the batch script (written by ``launch``)
    <home>/process.log   the job's stdout + stderr (``#SBATCH --output``)
    <home>/exit_code     the runner's exit status, written atomically (tmp + mv) by the script
    <home>/run/          the run directory (appears atomically on success)

**The batch script** is a fixed template. Only values this module generates or checks go into
it: the home folder, the project root and the python interpreter (paths, quoted with
``shlex.quote`` in shell lines, restricted to plain characters in ``#SBATCH`` lines), the run id,
numbers from the typed ``Resources``, the partition and ``extra_sbatch`` (site configuration by
an administrator, never from a run spec: each option must start with ``--`` and contain no
whitespace). No string from a spec reaches it. ``Resources.env`` goes into the environment of
``sbatch`` itself, which Slurm exports into the job by default (``--export=ALL``), so its values
are never parsed by a shell either.

**Resources.** ``--job-name=lab.run-<id>`` (how ``find`` recovers a job), ``--nodes``,
``--gres=gpu:<n>`` with ``n = len(resources.gpus)`` GPUs per node, ``--cpus-per-task`` (rounded
up) and ``--mem`` (per node, in MiB, rounded up) when set, ``--partition`` when configured. On
Slurm the GPU ledger's UUIDs are *not* used: Slurm picks the GPUs of the allocation and sets
``CUDA_VISIBLE_DEVICES`` in the job (a ``CUDA_VISIBLE_DEVICES`` in ``Resources.env`` is dropped
for that reason). ``shm_gb`` does not apply (a job sees its node's ``/dev/shm``).

**Multi-node runs** (``nodes > 1``): the script asks ``scontrol show hostnames`` for the first
node of the allocation and exports it as ``LAB_RDZV_HOST`` (with ``LAB_NNODES``), then ``srun``
starts one task per node (given the job's CPUs per task, which ``srun`` does not inherit). Each
task runs the runner (``python -m runners run``), whose real-mode launcher starts that node's
``torchrun`` (or the real Horovod's ranks); the nodes rendezvous at ``LAB_RDZV_HOST`` (c10d,
or Horovod's rendezvous server on node 0), each task learning its node rank from
``SLURM_NODEID`` (also exported as ``LAB_NODE_RANK``). The real-mode launcher reads them
(``runners.real.launch.Nodes``: the all-reduce arena; the rendezvous id is ``SLURM_JOB_ID``);
tested with two runner processes on one
machine, not on a Slurm cluster. Node 0 writes the run directory ``run``; node ``k > 0`` writes
``run.node<k>`` (two runners may not write the same directory). The script records ``srun``'s
exit status (non-zero when any task failed).

**Polling.** ``exit_code`` present: the run ended with that status. Otherwise ``squeue`` says
whether the job is still queued or running; once Slurm has forgotten it, ``sacct`` tells how it
ended: a job that ended without writing ``exit_code`` (time limit, cancelled, out of memory, node
failure, a batch script that could not even start) is reported ``exited`` with sacct's exit code
(or 1) and the Slurm state as the reason. A job neither ``squeue`` nor ``sacct`` knows is
``lost``. A Slurm command that cannot be run or answers with an error other than "unknown job"
raises ``ExecutorError`` (the controller may be down: ask again later).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from .base import EXIT_CODE, LOG, RUN_DIR, SPEC, ExecutorError, Resources, Status, read_exit_code

SCRIPT = "slurm.sh"
JOB_NAME_PREFIX = "lab.run-"  # job name = prefix + run id (base.LABEL names the same tie)
COMMAND_TIMEOUT_S = 60.0
STOP_POLL_S = 0.2

# squeue states of a job that has not ended yet (anything else squeue shows is terminal).
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "RESV_DEL_HOLD",
        "SIGNALING",
        "SPECIAL_EXIT",
        "STAGE_OUT",
        "STOPPED",
    }
)
# Terminal states, with what they mean in words (shown in the portal as the reason).
TERMINAL_STATES = {
    "COMPLETED": "the batch script ended without recording an exit code (is the home folder on "
    "a file system the compute nodes share?)",
    "FAILED": "the batch script failed before recording an exit code (see process.log)",
    "CANCELLED": "the job was cancelled",
    "TIMEOUT": "the job reached its time limit",
    "OUT_OF_MEMORY": "the job ran out of memory",
    "NODE_FAIL": "a node of the job failed",
    "PREEMPTED": "the job was preempted",
    "BOOT_FAIL": "a node of the job failed to boot",
    "DEADLINE": "the job reached its deadline",
    "REVOKED": "the job was revoked (federation)",
}
# Environment variables Slurm sets for the allocation itself: not taken from Resources.env.
_SLURM_OWNED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
# sbatch options the executor relies on: extra_sbatch may not override them.
_RESERVED_OPTIONS = frozenset(
    {"--job-name", "--output", "--error", "--chdir", "--wrap", "--parsable", "--array"}
)
# What a path may contain to appear in an #SBATCH line (Slurm's parser knows no shell quoting,
# and % starts a file-name pattern in --output).
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+:@,=-]+")
_PARTITION = re.compile(r"[A-Za-z0-9_.,-]+")
_JOB_ID = re.compile(r"[0-9]+")
_UNKNOWN_JOB = "invalid job id"  # squeue/scancel's error for a job slurmctld has forgotten

_SINGLE_NODE = "{python} -m runners run {spec} --out {run}\n"
_MULTI_NODE = (
    'LAB_RDZV_HOST="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"\n'
    "export LAB_RDZV_HOST\n"
    "export LAB_NNODES={nodes}\n"
    "srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1{cpus} --kill-on-bad-exit=1 \\\n"
    '    /bin/sh -c \'if [ "$SLURM_NODEID" = 0 ]; then out="$2"; '
    'else out="$2.node$SLURM_NODEID"; fi; export LAB_NODE_RANK="$SLURM_NODEID"; '
    'exec "$0" -m runners run "$1" --out "$out"\' \\\n'
    "    {python} {spec} {run}\n"
)
_TEMPLATE = """#!/bin/bash
{directives}
# Written by runners.executors.slurm: a fixed template; no text from the run's spec is in it.
cd {home} || exit 1
export PYTHONPATH={root}${{PYTHONPATH:+:"$PYTHONPATH"}}
{command}status=$?
echo "$status" >{exit_tmp} && mv {exit_tmp} {exit_code}
exit "$status"
"""


class SlurmExecutor:
    """Runs each run as one Slurm batch job (see the module docstring)."""

    name = "slurm"

    def __init__(
        self,
        partition: str | None = None,
        python: str = sys.executable,
        project_root: Path | None = None,
        extra_sbatch: tuple[str, ...] = (),
    ) -> None:
        if partition is not None and not _PARTITION.fullmatch(partition):
            raise ValueError(f"partition {partition!r}: only letters, digits and _ . , -")
        for option in extra_sbatch:
            _check_sbatch_option(option)
        self.partition = partition
        self.python = str(python)
        self.project_root = Path(project_root or Path(__file__).resolve().parents[2]).resolve()
        self.extra_sbatch = tuple(extra_sbatch)

    # -- launch ---------------------------------------------------------------------------

    def launch(self, home: Path, run_id: int, resources: Resources) -> str:
        """Write ``<home>/slurm.sh``, submit it with ``sbatch``; return the job id."""
        home = Path(home).resolve()
        if not (home / SPEC).is_file():
            raise FileNotFoundError(f"{home / SPEC} is missing")
        for stale in (EXIT_CODE, EXIT_CODE + ".tmp"):
            (home / stale).unlink(missing_ok=True)
        script = home / SCRIPT
        script.write_text(self.batch_script(home, run_id, resources))
        env = {**os.environ}
        env.update({k: v for k, v in resources.env.items() if k not in _SLURM_OWNED_ENV})
        out = _run_slurm(["sbatch", "--parsable", str(script)], env=env, cwd=home)
        if out.returncode != 0:
            raise ExecutorError(
                f"sbatch could not submit run {run_id} (exit {out.returncode}): "
                f"{_detail(out)}. Check the executor's Slurm settings (partition, extra_sbatch "
                f"such as --account) against the cluster, and the resources asked for; the "
                f"batch script is {script}."
            )
        lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        job_id = lines[-1].split(";", 1)[0] if lines else ""
        if not _JOB_ID.fullmatch(job_id):
            raise ExecutorError(
                f"sbatch --parsable printed no job id for run {run_id} (got {out.stdout!r}); "
                f"check with squeue -n {JOB_NAME_PREFIX}{run_id} whether it was submitted."
            )
        return job_id

    def batch_script(self, home: Path, run_id: int, resources: Resources) -> str:
        """The batch script for run ``run_id`` in ``home`` (fixed template; see module doc)."""
        home = Path(home).resolve()
        if not _PLAIN_PATH.fullmatch(str(home)):
            raise ExecutorError(
                f"the run's home folder {str(home)!r} has characters that cannot appear in an "
                f"#SBATCH line (only letters, digits and _ . / + : @ , = -); move the results "
                f"folder to a plain path"
            )
        directives = [
            f"--job-name={job_name(run_id)}",
            f"--output={home / LOG}",
            f"--nodes={int(resources.nodes)}",
            "--ntasks-per-node=1",
        ]
        if resources.gpus:
            directives.append(f"--gres=gpu:{len(resources.gpus)}")
        if resources.cpus is not None:
            directives.append(f"--cpus-per-task={math.ceil(resources.cpus)}")
        if resources.memory_gb is not None:
            directives.append(f"--mem={math.ceil(resources.memory_gb * 1024)}M")
        if self.partition is not None:
            directives.append(f"--partition={self.partition}")
        directives.extend(self.extra_sbatch)
        quoted = {
            "python": shlex.quote(self.python),
            "spec": shlex.quote(SPEC),
            "run": shlex.quote(RUN_DIR),
        }
        if resources.nodes > 1:
            # srun does not inherit --cpus-per-task from the allocation (Slurm >= 22.05).
            cpus = "" if resources.cpus is None else f" --cpus-per-task={math.ceil(resources.cpus)}"
            command = _MULTI_NODE.format(nodes=int(resources.nodes), cpus=cpus, **quoted)
        else:
            command = _SINGLE_NODE.format(**quoted)
        return _TEMPLATE.format(
            directives="\n".join(f"#SBATCH {d}" for d in directives),
            home=shlex.quote(str(home)),
            root=shlex.quote(str(self.project_root)),
            command=command,
            exit_tmp=shlex.quote(EXIT_CODE + ".tmp"),
            exit_code=shlex.quote(EXIT_CODE),
        )

    # -- poll -----------------------------------------------------------------------------

    def poll(self, home: Path, handle: str) -> Status:
        """State of job ``handle`` from ``exit_code``, then ``squeue``, then ``sacct``."""
        job_id = _check_handle(handle)
        code = read_exit_code(home)
        if code is not None:
            return Status("exited", code)
        state = _squeue_state(job_id)
        # The script may have written exit_code (and the job left the queue) meanwhile.
        code = read_exit_code(home)
        if code is not None:
            return Status("exited", code)
        if state in ACTIVE_STATES:
            return Status("running")
        accounted = _sacct(job_id)
        code = read_exit_code(home)
        if code is not None:
            return Status("exited", code)
        if accounted is not None:
            acct_state, acct_code = accounted
            if acct_state in ACTIVE_STATES:
                return Status("running")
            return _ended(acct_state, acct_code)
        if state is not None:  # squeue still shows a terminal state; sacct has no record
            return _ended(state, None)
        return Status(
            "lost",
            reason=f"slurm: job {job_id} is known neither to squeue nor to sacct, and it left "
            f"no exit code (purged from the controller, and no accounting?)",
        )

    # -- stop -----------------------------------------------------------------------------

    def stop(self, home: Path, handle: str, grace_s: float = 10.0) -> bool:
        """SIGTERM to every process of the job, then ``scancel`` after ``grace_s``; False if
        the job had already ended."""
        job_id = _check_handle(handle)
        if _squeue_state(job_id) not in ACTIVE_STATES:
            return False
        if not _scancel(["--signal=TERM", "--full", job_id]):
            return False
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if _squeue_state(job_id) not in ACTIVE_STATES:
                return True
            time.sleep(STOP_POLL_S)
        if _squeue_state(job_id) in ACTIVE_STATES:
            _scancel([job_id])
        return True

    # -- find -----------------------------------------------------------------------------

    def find(self, run_id: int, home: Path | None = None) -> str | None:
        """Job id of run ``run_id``'s queued or running job (by job name), else None."""
        out = _run_slurm(["squeue", "-h", "-n", job_name(run_id), "-o", "%i"])
        if out.returncode != 0:
            raise ExecutorError(f"squeue failed (exit {out.returncode}): {_detail(out)}")
        for line in out.stdout.splitlines():
            job_id = line.strip().split(";", 1)[0]
            if _JOB_ID.fullmatch(job_id):
                return job_id
        return None


def job_name(run_id: int) -> str:
    """The Slurm job name of run ``run_id`` (what ``find`` looks for)."""
    return f"{JOB_NAME_PREFIX}{int(run_id)}"


def _check_sbatch_option(option: str) -> None:
    if not isinstance(option, str) or not option.startswith("--") or len(option) < 3:
        raise ValueError(f"extra_sbatch option {option!r} must start with --")
    if any(ch.isspace() for ch in option) or not option.isprintable():
        raise ValueError(f"extra_sbatch option {option!r} must not contain whitespace")
    if option.split("=", 1)[0] in _RESERVED_OPTIONS:
        raise ValueError(f"extra_sbatch option {option!r} is set by the executor itself")


def _check_handle(handle: str) -> str:
    handle = str(handle).strip()
    if not _JOB_ID.fullmatch(handle):
        raise ValueError(f"{handle!r} is not a Slurm job id")
    return handle


def _ended(state: str, sacct_code: tuple[int, int] | None) -> Status:
    """A job that ended without writing exit_code: sacct's exit code (128 + signal when a
    signal ended it), else 1; the Slurm state, in words, as the reason."""
    code = 1
    if sacct_code is not None:
        exit_status, signal = sacct_code
        if exit_status:
            code = exit_status
        elif signal:
            code = 128 + signal
    meaning = TERMINAL_STATES.get(state, "the job ended")
    return Status("exited", code, reason=f"slurm: {state} ({meaning})")


def _squeue_state(job_id: str) -> str | None:
    """The job's state as squeue shows it, or None if slurmctld does not know the job."""
    out = _run_slurm(["squeue", "-h", "-j", job_id, "-o", "%T"])
    if out.returncode != 0:
        if _UNKNOWN_JOB in out.stderr.lower():
            return None
        raise ExecutorError(
            f"squeue failed (exit {out.returncode}): {_detail(out)}. Is slurmctld reachable "
            f"from this host? The run's state will be asked again."
        )
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return lines[0].split()[0].upper() if lines else None


def _sacct(job_id: str) -> tuple[str, tuple[int, int] | None] | None:
    """(state, (exit status, signal)) of the job's allocation from accounting; None if sacct
    has no record of it (or accounting is not available)."""
    out = _run_slurm(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"])
    if out.returncode != 0:
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if not lines:
        return None
    state_text, _, code_text = lines[-1].partition("|")  # the last allocation (requeues)
    words = state_text.split()
    if not words:
        return None
    code: tuple[int, int] | None = None
    exit_text, _, signal_text = code_text.strip().partition(":")
    if exit_text.isdigit() and (signal_text or "0").isdigit():
        code = (int(exit_text), int(signal_text or "0"))
    return words[0].rstrip("+").upper(), code


def _scancel(args: list[str]) -> bool:
    """Run scancel; False if Slurm no longer knows the job."""
    out = _run_slurm(["scancel", *args])
    if out.returncode == 0:
        return True
    if _UNKNOWN_JOB in out.stderr.lower() or "already completing" in out.stderr.lower():
        return False
    raise ExecutorError(f"scancel failed (exit {out.returncode}): {_detail(out)}")


def _run_slurm(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command (an argument vector, no shell); a missing command or a hung
    controller becomes an ExecutorError that says what to do."""
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ExecutorError(
            f"{argv[0]} was not found on PATH: run the lab's workers on a Slurm submit host "
            f"(with the Slurm client commands installed), or choose another executor"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise ExecutorError(
            f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:.0f} s: is slurmctld "
            f"reachable from this host?"
        ) from exc


def _detail(out: subprocess.CompletedProcess[str]) -> str:
    text = (out.stderr.strip() or out.stdout.strip() or "no message").replace("\n", " | ")
    return text[:2000]
