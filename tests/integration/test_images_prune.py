"""`scripts/images.sh` removes old kept builds (<image>-<12 hex> tags) beyond LAB_IMAGE_KEEP,
on the real Docker engine, with tiny imported images under names of the test's own: the lab's
images on the machine are never touched (every image variable points elsewhere)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_binary, skip_or_fail

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _docker(*args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(["docker", *args], input=stdin, capture_output=True, timeout=120)
    assert out.returncode == 0, f"docker {' '.join(args)}: {out.stderr.decode()[-1000:]}"
    return out.stdout.decode().strip()


@pytest.fixture
def repo() -> Iterator[str]:
    require_binary("docker")
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode != 0:
        skip_or_fail("no Docker engine: start dockerd, or run .ci/run")
    name = f"lab-prune-test-{uuid.uuid4().hex[:8]}"
    yield name
    for cid in _docker("ps", "-aq", "--filter", f"label=lab.prune-test={name}").split():
        _docker("rm", "-f", cid)
    ids = set(_docker("images", name, "--format", "{{.ID}}").split())
    for image_id in ids:
        subprocess.run(["docker", "rmi", "-f", image_id], capture_output=True, timeout=120)


def _empty_image(tag: str, n: int) -> str:
    """A new image (its own id and creation time) from an empty file system."""
    tar = subprocess.run(["tar", "cf", "-", "--files-from", "/dev/null"], capture_output=True)
    _docker("import", "--change", f"LABEL n={n}", "-", tag, stdin=tar.stdout)
    return _docker("image", "inspect", "-f", "{{.Id}}", tag)


def _prune(repo: str, keep: str, *targets: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LAB_IMAGE_KEEP": keep,
        "LAB_RUNNER_IMAGE": f"{repo}:cpu",
        "LAB_RUNNER_CUDA_IMAGE": f"{repo}:cuda",
        "LAB_PORTAL_IMAGE": f"{repo}-portal",
        "LAB_REDIS_IMAGE": f"{repo}:redis",
        "LAB_POSTGRES_IMAGE": f"{repo}:postgres",
    }
    return subprocess.run(
        ["scripts/images.sh", *(targets or ("prune",))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _tags(repo: str) -> set[str]:
    return set(_docker("images", repo, "--format", "{{.Tag}}").split())


def test_prune_keeps_the_newest_builds_the_current_one_and_those_a_container_uses(repo):
    builds = [f"cpu-{str(i) * 12}" for i in range(5)]  # oldest first
    ids = [_empty_image(f"{repo}:{tag}", i) for i, tag in enumerate(builds)]
    _docker("tag", ids[1], f"{repo}:cpu")  # the image's tag points to an old build
    _docker("create", "--label", f"lab.prune-test={repo}", f"{repo}:{builds[0]}", "/none")
    others = {"cpu-old", "cpu-aaaaaaaaaaaaa", "cuda-aaaaaaaaaaaa"}  # not kept builds of cpu
    for tag in others:
        _docker("tag", ids[2], f"{repo}:{tag}")

    out = _prune(repo, "2")

    assert out.returncode == 0, out.stdout + out.stderr
    left = _tags(repo)
    assert builds[2] not in left, out.stdout  # old, not current, no container: removed
    assert {builds[3], builds[4]} <= left  # the newest two
    assert builds[1] in left and "cpu" in left  # the one the image's tag points to
    assert builds[0] in left  # a (stopped) container uses it
    assert others <= left
    # its image has other tags: only untagged, and said so
    assert f"untagged the kept build {repo}:{builds[2]}" in out.stdout
    assert _docker("image", "inspect", "-f", "{{.Id}}", f"{repo}:cpu-old") == ids[2]
    # docker's own reason for keeping it
    assert f"kept {repo}:{builds[0]} beyond LAB_IMAGE_KEEP=2:" in out.stdout
    assert "container" in out.stdout.split(f"kept {repo}:{builds[0]}")[1].splitlines()[0]

    again = _prune(repo, "2")
    assert again.returncode == 0 and "removed" not in again.stdout, again.stdout


def test_keep_all_removes_nothing_and_bad_values_are_refused(repo):
    builds = [f"cpu-{str(i) * 12}" for i in range(3)]
    for i, tag in enumerate(builds):
        _empty_image(f"{repo}:{tag}", i)

    out = _prune(repo, "all")
    assert out.returncode == 0 and "nothing to remove" in out.stdout, out.stdout + out.stderr
    assert set(builds) <= _tags(repo)

    for bad in ("-1", "three", "2.5"):
        out = _prune(repo, bad)
        assert out.returncode == 2, (bad, out.stdout, out.stderr)
        assert "LAB_IMAGE_KEEP must be a whole number" in out.stderr and f"'{bad}'" in out.stderr
    assert set(builds) <= _tags(repo)

    out = _prune(repo, "0", "prune", "runner")
    assert out.returncode == 2 and "'prune' is a target of its own" in out.stderr, out.stderr
    out = _prune(repo, "0", "runnr")
    assert out.returncode == 2 and "unknown target 'runnr'" in out.stderr, out.stderr
    assert set(builds) <= _tags(repo)

    out = _prune(repo, "0")  # the image's own tag is missing: its current build is unknown
    assert out.returncode == 0 and "removed" not in out.stdout, out.stdout + out.stderr
    assert set(builds) <= _tags(repo)
    _docker("tag", f"{repo}:{builds[1]}", f"{repo}:cpu")
    out = _prune(repo, "0")  # 0: only the current build stays
    assert out.returncode == 0, out.stdout + out.stderr
    assert _tags(repo) == {"cpu", builds[1]}, out.stdout
    for gone in (builds[0], builds[2]):
        assert f"removed the kept build {repo}:{gone}" in out.stdout
