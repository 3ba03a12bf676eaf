"""`docker compose -f docker/compose.yml up` brings up the whole lab: PostgreSQL, Redis, the
portal, a Celery worker with the docker executor and beat, all in containers of the project's
images (made locally: `LAB_LOCAL_SERVICES=1 scripts/images.sh`, since nothing can be pulled
here); an experiment posted to its API runs in runner containers and succeeds. Debian's
docker-compose 1.29 (`.ci/run` installs it); skipped without an engine (failed under
LAB_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import require_binary, skip_or_fail, wait_for
from tests.integration.stack import far_nightly_cron, free_ports

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


STALE = re.compile(r"labtest(?:(\d+)x)?[0-9a-f]+")  # labtest<pid>x<hex>; before: labtest<hex>


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        pass
    return True


def remove_stale_stacks() -> list[str]:
    """Remove the compose stacks of earlier runs of this test whose process is gone (a run
    killed before its teardown leaves the stack running, its worker and beat taking CPU from
    every later run and measurement on the machine): their containers, networks and volumes.
    A stack's project is named after the pid of the test process that made it; the names of
    before had no pid and are always stale. Returns the projects removed."""
    import docker

    client = docker.from_env()
    label = "com.docker.compose.project"
    stale = set()
    for container in client.containers.list(all=True, filters={"label": label}):
        project = container.labels[label]
        match = STALE.fullmatch(project)
        if match and not (match.group(1) and _alive(int(match.group(1)))):
            stale.add(project)
            container.remove(force=True)
    for project in stale:
        for network in client.networks.list(filters={"label": f"{label}={project}"}):
            network.remove()
        for volume in client.volumes.list(filters={"label": f"{label}={project}"}):
            volume.remove(force=True)
    return sorted(stale)


@pytest.fixture
def lab(tmp_path):
    compose = require_binary("docker-compose")
    if subprocess.run(["docker", "info"], capture_output=True).returncode:
        skip_or_fail("no Docker engine: start dockerd, or run .ci/run")
    for project in remove_stale_stacks():
        print(f"removed the stale stack {project} of an earlier run")
    built = subprocess.run(
        ["scripts/images.sh", "runner", "portal", "services"],
        cwd=ROOT, env={**os.environ, "LAB_LOCAL_SERVICES": "1"},
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    results = Path(f"/tmp/lab-compose-{secrets.token_hex(4)}")  # same path in and out
    results.mkdir(mode=0o755)
    os.chown(results, 1000, 1000)  # the images' user
    port, redis_port, postgres_port = free_ports(3)  # three services publish on them
    password = secrets.token_urlsafe(12)
    env_file = tmp_path / "lab.env"
    env_file.write_text(
        "\n".join(
            [
                f"DJANGO_SECRET_KEY={secrets.token_urlsafe(40)}",
                f"POSTGRES_PASSWORD={secrets.token_urlsafe(16)}",
                f"LAB_DOCKER_GID={os.stat('/var/run/docker.sock').st_gid}",
                f"LAB_RESULTS_DIR={results}",
                f"LAB_WEB_PORT={port}",
                f"LAB_REDIS_PUBLISH_PORT={redis_port}",
                f"LAB_POSTGRES_PUBLISH_PORT={postgres_port}",
                "LAB_REDIS_IMAGE=lab-redis:bookworm",
                "LAB_POSTGRES_IMAGE=lab-postgres:bookworm",
                f"LAB_ENV_FILE={env_file}",
                "LAB_ADMIN_USER=admin",
                f"LAB_ADMIN_PASSWORD={password}",
                "LAB_RECONCILE_INTERVAL_S=1",
                f"LAB_NIGHTLY_CRON={far_nightly_cron()}",
                "",
            ]
        )
    )
    # compose prefers the shell's variables to the env file's: none of the test process's.
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("LAB_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))}  # fmt: skip
    project = f"labtest{os.getpid()}x{secrets.token_hex(3)}"  # remove_stale_stacks
    base = [compose, "-p", project, "--env-file", str(env_file), "-f", "docker/compose.yml"]

    def run(*args: str, timeout: float = 600) -> str:
        out = subprocess.run(
            [*base, *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=timeout
        )
        assert out.returncode == 0, f"{' '.join(args)}:\n{out.stdout[-2000:]}{out.stderr[-3000:]}"
        return out.stdout

    try:
        run("up", "-d")
        yield {"url": f"http://127.0.0.1:{port}", "run": run, "results": results}
    finally:
        logs = subprocess.run([*base, "logs", "--tail", "40"], cwd=ROOT, env=clean,
                              capture_output=True, text=True)  # fmt: skip
        print(logs.stdout[-6000:])
        subprocess.run([*base, "down", "-v", "--timeout", "20"], cwd=ROOT, env=clean,
                       capture_output=True)  # fmt: skip
        import docker  # this lab's run containers only (failed ones are kept by design)

        for container in docker.from_env().containers.list(
            all=True, filters={"label": "lab.run-id"}
        ):
            if container.labels.get("lab.home", "").startswith(str(results)):
                container.remove(force=True)
        shutil.rmtree(results, ignore_errors=True)


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Token {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


def _failed_runs(data: dict, results: Path) -> str:
    """What went wrong, for the assertion's message: each run's status and, for the runs that
    did not succeed, the end of their process output and runner log (the results folder is
    gone after the stack's teardown)."""
    lines = [f"experiment {data.get('status')}"]
    for run in data.get("runs", []):
        lines.append(
            f"run {run.get('id')} {run.get('system')}: {run.get('status')} {run.get('error')}"
        )
        if run.get("status") == "succeeded":
            continue
        home = results / "runs" / str(run.get("id"))
        for log in sorted(home.glob("*.txt")) + sorted(home.glob("*.log")) + [home / "run/log.txt"]:
            if log.is_file():
                lines.append(
                    f"--- {log.relative_to(results)}\n{log.read_text(errors='replace')[-3000:]}"
                )
    return "\n".join(lines)


def test_compose_brings_up_the_lab_and_runs_an_experiment_in_containers(lab):
    url = lab["url"]
    wait_for(lambda: _get(url + "/healthz")[0] == 200, 300, 1.0, "the web container")
    status, page = _get(url + "/accounts/login/")
    assert status == 200 and b"csrfmiddlewaretoken" in page
    token = lab["run"]("exec", "-T", "web", "/opt/lab/docker/entrypoint.sh", "manage",
                       "apitoken", "admin").strip().splitlines()[-1]  # fmt: skip
    body = json.dumps(
        {
            "name": "compose",
            "system": "bytescheduler",
            "baselines": ["wfbp"],
            "workloads": ["resnet50-debug"],
            "seeds": [0],
            "iterations": 5,
            "cluster": {"workers": 4, "bandwidth_gbps": 1.0},
        }
    ).encode()
    request = urllib.request.Request(
        url + "/api/experiments/", data=body, method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as r:
        created = json.loads(r.read())

    def finished() -> dict | None:
        _, raw = _get(f"{url}/api/experiments/{created['id']}/", token)
        data = json.loads(raw or b"{}")
        return data if data.get("status") not in (None, "queued", "running") else None

    data = wait_for(finished, 300, 1.0, "the experiment to finish")
    assert data["status"] == "succeeded", _failed_runs(data, lab["results"])
    for run in data["runs"]:
        assert (run["host"], run["executor"]) == ("main", "docker")
        manifest = json.loads(
            (lab["results"] / "runs" / str(run["id"]) / "run" / "manifest.json").read_text()
        )
        assert manifest["container_image"]["image"] == "lab-runner:cpu"


def test_stale_stacks_of_dead_runs_are_removed_and_live_ones_kept():
    """``remove_stale_stacks`` on stand-in stacks (created, never started, from an empty
    image imported here): the stack of a test process that is gone, and one named as before
    pids were in the names, go with their networks; the stack of a live process stays."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode:
        skip_or_fail("no Docker engine: start dockerd, or run .ci/run")
    import io
    import tarfile

    import docker

    client = docker.from_env()
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    client.api.import_image_from_data(empty.getvalue(), repository="lab-empty", tag="test")
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid is free now (reused within this test only by chance)
    tag = secrets.token_hex(3)
    projects = {
        "dead": f"labtest{gone.pid}x{tag}",
        "old": f"labtest{tag}",
        "live": f"labtest{os.getpid()}x{tag}",
    }
    label = "com.docker.compose.project"
    try:
        for project in projects.values():
            client.networks.create(f"{project}_default", labels={label: project})
            client.containers.create(
                "lab-empty:test", command=["none"], name=f"{project}_web_1", labels={label: project}
            )
        removed = remove_stale_stacks()
        assert projects["dead"] in removed and projects["old"] in removed
        assert projects["live"] not in removed
        left = {c.labels[label] for c in client.containers.list(all=True, filters={"label": label})}
        assert projects["live"] in left and not {projects["dead"], projects["old"]} & left
        nets = {n.name for n in client.networks.list(filters={"label": label})}
        assert f"{projects['live']}_default" in nets
        assert not {f"{projects['dead']}_default", f"{projects['old']}_default"} & nets
    finally:
        for project in projects.values():
            for container in client.containers.list(
                all=True, filters={"label": f"{label}={project}"}
            ):
                container.remove(force=True)
            for network in client.networks.list(filters={"label": f"{label}={project}"}):
                network.remove()
        client.images.remove("lab-empty:test", force=True)
