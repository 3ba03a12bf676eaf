"""The CUDA runner image (``docker/runner-cuda.Dockerfile``, ``make image-cuda``): PyPI's CUDA
build of torch 2.13.0 with its NVIDIA libraries, installed offline from a wheelhouse made on the
host (``docker/wheelhouse.sh --cuda``, about 2.7 GB), on the lab's Debian base.

Building it downloads those 2.7 GB, so these tests build it (``scripts/images.sh runner-cuda``,
which reuses an image of the same inputs) only with ``LAB_BUILD_CUDA_IMAGE=1``
(``LAB_BUILD_CUDA_IMAGE=1 bash .ci/run``; CI leaves it out for time); without it they test
``lab-runner:cuda`` as it is where it exists (it may be older than the sources) and skip
elsewhere. There is no GPU here:
they check the image (a CUDA 13 torch with NCCL, the non-root user, the health check) and that
runs go through the docker executor in it on the CPU, not a GPU run.

The image has the real Horovod built with NCCL against its torch (scripts/horovod-wheel.sh
--cuda) unless it was built with LAB_CUDA_HOROVOD=0: built here, it must have it; an existing
image without it skips the Horovod tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_binary, skip_or_fail

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("LAB_RUNNER_CUDA_IMAGE", "lab-runner:cuda")
BUILT_HERE = os.environ.get("LAB_BUILD_CUDA_IMAGE") == "1"
WITH_HOROVOD = os.environ.get("LAB_CUDA_HOROVOD", "1") != "0"


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def _probe(code: str) -> dict:
    """The JSON object that Python ``code`` prints last, run in the image."""
    out = _docker("run", "--rm", "--entrypoint", "python", IMAGE, "-c", code)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_in_image(spec: dict, out: Path) -> dict:
    """``python -m runners run SPEC --out OUT --executor docker`` in the image; its summary."""
    path = out.parent / f"{out.name}.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAB_RUNNER_IMAGE": IMAGE}
    done = subprocess.run(
        [sys.executable, "-m", "runners", "run", str(path), "--out", str(out),
         "--executor", "docker"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["metrics"]["iteration_time_s"] > 0
    return summary


@pytest.fixture(scope="module")
def cuda_image() -> str:
    """The CUDA runner image of the current sources; its id."""
    require_binary("docker")
    if _docker("info").returncode != 0:
        skip_or_fail("no Docker engine: start dockerd, or run .ci/run")
    if os.environ.get("LAB_BUILD_CUDA_IMAGE") == "1":
        out = subprocess.run(
            ["scripts/images.sh", "runner-cuda"], cwd=ROOT, capture_output=True, text=True,
            timeout=1800,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    elif _docker("image", "inspect", IMAGE).returncode != 0:
        pytest.skip(f"no {IMAGE}: `make image-cuda` (2.7 GB of wheels) or LAB_BUILD_CUDA_IMAGE=1")
    return _docker("image", "inspect", "-f", "{{.Id}}", IMAGE).stdout.strip()


def test_the_cuda_image_has_a_cuda_build_of_torch_with_nccl(cuda_image):
    probe = (
        "import json, os, torch, torch.distributed as dist; print(json.dumps({"
        "'torch': torch.__version__, 'cuda': torch.version.cuda,"
        "'nccl': list(torch.cuda.nccl.version()), 'cudnn': torch.backends.cudnn.version(),"
        "'uid': os.getuid(), 'nccl_pg': dist.is_nccl_available(),"
        "'gloo_pg': dist.is_gloo_available()}))"
    )
    got = _probe(probe)
    assert got["torch"].startswith("2.13.0") and got["cuda"].startswith("13."), got
    assert got["nccl"][0] == 2 and got["cudnn"] > 0 and got["nccl_pg"] and got["gloo_pg"], got
    assert got["uid"] == 1000, "runs as the non-root user lab"
    meta = _docker("image", "inspect", "-f", "{{json .Config}}", IMAGE)
    config = json.loads(meta.stdout)
    assert config["User"] == "lab" and config["Env"] and "LAB_IMAGE_KIND=cuda" in config["Env"]
    assert config["Healthcheck"]["Test"][-1] == "import runners.spec, torch"
    listed = _docker("run", "--rm", IMAGE, "list")
    assert listed.returncode == 0 and "wfbp" in listed.stdout and "tictac-tic" in listed.stdout


def test_runs_go_through_the_docker_executor_in_the_cuda_image(cuda_image, tmp_path):
    """A simulation and a 2-process real run (gloo on the CPU: no GPU here), each in a
    container of the CUDA image, with that image and its CUDA torch in the manifest."""
    specs = {
        "sim": {"system": "wfbp", "workload": "resnet50", "iterations": 3},
        "real": {
            "system": "wfbp", "mode": "real", "workload": "vgg16-debug", "iterations": 3,
            "warmup_iterations": 1, "cluster": {"workers": 2}, "real": {"network": "loopback"},
        },
    }  # fmt: skip
    for name, spec in specs.items():
        summary = _run_in_image(spec, tmp_path / name)
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["container_image"]["id"] == cuda_image
        assert manifest["container_image"]["kind"] == "cuda"
        assert any(p.startswith("nvidia-nccl-cu13==") for p in manifest["pip_freeze"])
    assert summary["run"]["mode"] == "real" and summary["network"]["kind"] == "loopback"


def _horovod_in_image() -> dict:
    """What the image's Horovod says of itself; skips (or fails, where this image was just built
    with Horovod) when the image has none."""
    probe = (
        "import json, pathlib, torch\n"
        "try:\n"
        "    import horovod\n"
        "except ModuleNotFoundError as e:\n"
        "    print(json.dumps({'missing': str(e)})); raise SystemExit\n"
        "import horovod.torch as hvd\n"  # a Horovod that does not load fails the test
        "meta = json.loads((pathlib.Path(horovod.__file__).parent / 'metadata.json').read_text())\n"
        "print(json.dumps({'version': horovod.__version__, 'built_for': meta['pytorch'],"
        " 'torch': torch.__version__, 'nccl': hvd.nccl_built(), 'cuda': hvd.cuda_built(),"
        " 'gloo': hvd.gloo_built()}))"
    )
    got = _probe(probe)
    if "missing" in got:
        message = f"{IMAGE} has no Horovod ({got['missing']})"
        if BUILT_HERE and WITH_HOROVOD:
            pytest.fail(message + ": scripts/images.sh runner-cuda should have put it in")
        pytest.skip(message + ": built with LAB_CUDA_HOROVOD=0, or before it had one")
    return got


def test_the_cuda_image_has_horovod_built_with_nccl_for_its_torch(cuda_image):
    got = _horovod_in_image()
    assert got["version"] == "0.28.1" and got["built_for"] == got["torch"], got
    # nccl_built() is NCCL's version code (2.29.7 -> 22907), 0 without NCCL
    assert got["nccl"] >= 20000 and got["cuda"] and got["gloo"], got
    check = _docker("run", "--rm", "--entrypoint", "horovodrun", IMAGE, "--check-build")
    assert check.returncode == 0, check.stderr[-2000:]
    for line in ("[X] PyTorch", "[X] Gloo", "[X] NCCL"):
        assert line in check.stdout, check.stdout


def test_the_real_horovod_trains_in_the_cuda_image_on_the_cpu(cuda_image, tmp_path):
    """A 2-rank `horovod` run (horovodrun, Gloo: no GPU here) through the docker executor in the
    CUDA image: its Horovod has NCCL, and `real.device: auto` still chooses the CPU here."""
    _horovod_in_image()
    spec = {
        "system": "horovod", "mode": "real", "workload": "vgg16-debug", "iterations": 3,
        "warmup_iterations": 1, "cluster": {"workers": 2}, "real": {"network": "loopback"},
    }  # fmt: skip
    summary = _run_in_image(spec, tmp_path / "run")
    assert summary["device"]["kind"] == "cpu", summary["device"]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["container_image"]["id"] == cuda_image
    assert "horovod==0.28.1" in manifest["pip_freeze"]
