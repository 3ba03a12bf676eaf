"""What a run needs to be reproduced: resolved spec, code version, packages, host."""

from __future__ import annotations

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
        "container_image": None,
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
        return {"commit": "unknown", "dirty": None}
    return {"commit": commit, "dirty": dirty}


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
