"""What a run needs to be reproduced: resolved spec, code version, packages, host."""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from .spec import RunSpec


def usable_cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The CPUs this process may use, which ``os.cpu_count()`` (the machine's) does not see:
    its affinity mask (``taskset``, ``docker --cpuset-cpus``, Slurm's cpuset; the machine's
    count where there is none), and no more than its cgroup v2 CPU quota allows, rounded up
    (``cpu_max``: ``docker --cpus``, as the docker executor limits a run's container)."""
    try:
        cpus = len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        with open(cpu_max) as f:
            quota, period = f.read().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 file here, or one this does not read: the mask alone
    return cpus


def cpu_ticks(stat: str = "/proc/stat") -> tuple[int, int] | None:
    """(steal, total) clock ticks of every CPU of this machine since boot, from the ``cpu``
    line of ``stat`` (the whole machine's, not only the CPUs this process may use); ``None``
    where it cannot be read (not Linux). Steal is the time a hypervisor ran something else
    while this virtual machine had work for that CPU."""
    try:
        with open(stat) as f:
            ticks = _cpu_line(f.readline())
    except OSError:
        return None
    return None if ticks is None else (ticks[7], sum(ticks))


def _cpu_line(line: str) -> list[int] | None:
    """The eight clock-tick counts of ``/proc/stat``'s ``cpu`` line (user nice system idle
    iowait irq softirq steal; guest and guest_nice are inside user and nice); ``None`` for
    another line."""
    fields = line.split()
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return [int(v) for v in fields[1:9]]


def busy_ticks(stat: str = "/proc/stat") -> tuple[int, int, int] | None:
    """(busy, total, cpus): the clock ticks every CPU of this machine spent busy (user, nice,
    system, irq, softirq: anything but idle, iowait and steal) and in all since boot, from
    the ``cpu`` line of ``stat``, and the CPUs it counts (its ``cpuN`` lines: the whole
    machine's, not only those this process may use); ``None`` where it cannot be read."""
    try:
        with open(stat) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    ticks = _cpu_line(lines[0]) if lines else None
    if ticks is None:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = ticks
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal, max(cpus, 1)


def thread_sched(schedstat: str = "/proc/thread-self/schedstat") -> tuple[int, int] | None:
    """(on CPU, waiting) in ns: the calling thread's time on a CPU and its time runnable but
    waiting for one (in a run queue) since it started, from the kernel's scheduler
    statistics (``schedstat``: the first two fields); ``None`` where they cannot be read."""
    try:
        with open(schedstat) as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def busy_cores(busy: int, total: int, cpus: int) -> float | None:
    """The machine's cores kept busy over an interval whose ``busy_ticks`` deltas are
    ``busy`` of ``total`` (``cpus`` CPUs); ``None`` for an interval with no tick."""
    return cpus * busy / total if total > 0 else None


def steal_pct(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time a hypervisor took between two ``cpu_ticks``."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return 100.0 * (after[0] - before[0]) / (after[1] - before[1])


PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("numpy", "pandas", "torch", "PyYAML", "celery", "Django")


def build(spec: RunSpec, argv: list[str]) -> dict[str, Any]:
    return {
        "spec": spec.as_dict(),
        "seeds": {"spec": spec.seed, "compute_jitter": spec.seed},
        "code": code_version(),
        "packages": package_versions(),
        "host": host_info(),
        "gpus": gpu_info(),
        "accelerator": accelerator_info(),
        "container_image": container_image(),
        "pip_freeze": pip_freeze(),
        "command": argv,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def code_version() -> dict[str, Any]:
    def git(*args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10
        )
        if out.returncode:
            raise OSError(out.stderr.strip())
        return out.stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        # Inside the runner image there is no git: the image was built from LAB_COMMIT.
        return {"commit": os.environ.get("LAB_COMMIT", "unknown"), "dirty": None}
    return {"commit": commit, "dirty": dirty}


def container_image() -> dict[str, str] | None:
    """The image this run's container was started from (set by the docker executor): tag,
    content id (``sha256:...``, what ``docker run`` of that id re-creates exactly) and the
    registry digest when the image came from one. None outside a container."""
    if not os.environ.get("LAB_IMAGE"):
        return None
    return {
        "image": os.environ["LAB_IMAGE"],
        "id": os.environ.get("LAB_IMAGE_ID", ""),
        "digest": os.environ.get("LAB_IMAGE_DIGEST", ""),
        "kind": os.environ.get("LAB_IMAGE_KIND", ""),
    }


def pip_freeze() -> list[str]:
    """Every installed distribution as ``name==version`` (what ``pip freeze`` prints, read
    from the package metadata without starting pip), sorted."""
    seen = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            seen.setdefault(name.lower(), f"{name}=={dist.version}")
    return [seen[key] for key in sorted(seen)]


def accelerator_info() -> dict[str, Any] | None:
    """CUDA, cuDNN and NCCL versions and per-GPU details, when this run imported torch and
    torch sees a GPU (real runs on a GPU host); None otherwise (no import is forced)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    info: dict[str, Any] = {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    try:
        info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except (AttributeError, RuntimeError, TypeError):
        info["nccl"] = None
    info["devices"] = [
        {
            "index": i,
            "name": torch.cuda.get_device_name(i),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
            "memory_gb": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
        }
        for i in range(torch.cuda.device_count())
    ]
    return info


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def host_info() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gb": mem_gb,
        "python_executable": sys.executable,
    }


def gpu_info() -> list[dict[str, str]]:
    if not shutil.which("nvidia-smi"):
        return []
    query = "name,uuid,memory.total,driver_version"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    keys = query.split(",")
    return [
        dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
        for line in out.stdout.splitlines()
    ]
