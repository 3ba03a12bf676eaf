"""Docker executor: one run = one container of the runner image (``docker/runner.Dockerfile``).

Same dispatch-and-reconcile contract as the other executors (see ``base``): ``launch`` creates
and starts the container and returns its id at once; ``poll``, ``stop`` and ``find`` ask the
Docker engine (through the Docker SDK) and the run's home folder only, so any process may ask
after any restart.

**The container.** The run's home folder is bind-mounted at ``/work`` (the only mount); the
image's entry point runs ``python -m runners run spec.json --out run`` there. Labels carry the
run id (``lab.run-id``, how ``find`` recovers a container after a crash) and the home folder.
Nothing from a spec reaches the container's configuration: it is built from this module's
constants and the typed ``Resources`` only; the container is never privileged, gets no host
network (``network_mode: none``: a run's processes talk over the container's own loopback, so
a real run inside a container is a loopback run, and says so in its report; one node of a run
over several hosts gets the host's network or a named Docker network, ``Resources.network``,
to reach the others),
drops every
capability and cannot gain privileges. Training gets a shared-memory size (``shm_gb``; gloo and
data loaders need more than Docker's 64 MiB), unlimited locked memory and a larger stack, and the
CPU and memory limits of ``Resources``; GPUs are device requests by UUID (from the GPU ledger),
with ``CUDA_VISIBLE_DEVICES`` unset so the container numbers its GPUs from 0.

**The user.** The image runs as its non-root user ``lab`` (uid 1000); when the engine is driven
by root, the home folder is handed to that uid so the run can write into it. A worker that is
not root runs the container as its own uid instead.

**Logs and exit.** The container's output is streamed into ``process.log`` by ``poll`` (the
whole log, each time: runs print progress lines, not data); when the container has ended,
``poll`` writes ``exit_code`` from the engine's state (OOM kills and signals become the reason).
Ended containers are kept, so a crashed run's log stays readable with ``docker logs``;
``remove`` deletes one (the portal removes those of succeeded runs).

**Provenance.** The container gets ``LAB_IMAGE`` (the tag), ``LAB_IMAGE_ID`` (the image's
content digest, ``sha256:...``) and ``LAB_IMAGE_DIGEST`` (the registry digest when the image was
pulled from one, else empty): the run's manifest records them (``runners.manifest``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .base import (
    LABEL,
    LOG,
    ExecutorError,
    Resources,
    Status,
    read_exit_code,
    write_exit_code,
)

DEFAULT_IMAGE = "lab-runner:cpu"
IMAGE_USER = 1000  # the runner image's user `lab`
HOME_LABEL = "lab.home"
WORKDIR = "/work"
RUN_COMMAND = ["run", "spec.json", "--out", "run"]
STATES_RUNNING = frozenset({"created", "running", "restarting", "paused"})


def _client() -> Any:
    try:
        import docker
    except ImportError as err:  # pragma: no cover - docker is in requirements.txt
        raise ExecutorError("the Docker SDK is missing: pip install -r requirements.txt") from err
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as err:
        raise ExecutorError(
            f"the Docker engine is not reachable ({err}): start it (dockerd) or choose "
            "another executor (LAB_EXECUTOR=local)"
        ) from err
    return client


class DockerExecutor:
    """Runs each run in its own container of ``image`` (default ``lab-runner:cpu``)."""

    name = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, pids_limit: int = 4096) -> None:
        self.image = image
        self.pids_limit = pids_limit
        self._docker: Any = None

    @property
    def client(self) -> Any:
        if self._docker is None:
            self._docker = _client()
        return self._docker

    def image_info(self) -> dict[str, str]:
        """Tag, content id and registry digest of the runner image; ExecutorError if absent."""
        import docker.errors

        try:
            image = self.client.images.get(self.image)
        except docker.errors.ImageNotFound as err:
            if self.image.startswith("sha256:"):
                raise ExecutorError(
                    f"the image {self.image} (the one the run used) is no longer on this "
                    "host (scripts/images.sh keeps the newest LAB_IMAGE_KEEP builds of each "
                    "image): rebuild from that commit with `make images`, or run the spec "
                    "with --executor docker in today's image"
                ) from err
            raise ExecutorError(
                f"the runner image {self.image} is not on this host: build it with "
                "`make images` (or set LAB_RUNNER_IMAGE)"
            ) from err
        digests = image.attrs.get("RepoDigests") or []
        return {"image": self.image, "id": image.id, "digest": digests[0] if digests else ""}

    def launch(self, home: Path, run_id: int, resources: Resources) -> str:
        import docker.errors
        from docker.types import DeviceRequest, Ulimit

        home = Path(home).resolve()
        if not (home / "spec.json").is_file():
            raise FileNotFoundError(f"{home / 'spec.json'} is missing")
        info = self.image_info()
        for stale in ("exit_code", "exit_code.tmp"):
            (home / stale).unlink(missing_ok=True)
        user = self._user_for(home)
        env = {k: v for k, v in resources.env.items() if k != "CUDA_VISIBLE_DEVICES"}
        env.update(
            LAB_IMAGE=info["image"],
            LAB_IMAGE_ID=info["id"],
            LAB_IMAGE_DIGEST=info["digest"],
            LAB_RUN_ID=str(run_id),
        )
        options: dict[str, Any] = {
            "command": RUN_COMMAND,
            "detach": True,
            "name": container_name(run_id, home),
            "labels": {LABEL: str(run_id), HOME_LABEL: str(home)},
            "volumes": {str(home): {"bind": WORKDIR, "mode": "rw"}},
            "working_dir": WORKDIR,
            "user": user,
            "environment": env,
            "network_mode": resources.network or "none",
            "privileged": False,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "pids_limit": self.pids_limit,
            "shm_size": f"{int(resources.shm_gb * 1024)}m",
            "ulimits": [
                Ulimit(name="memlock", soft=_memlock(), hard=_memlock()),
                Ulimit(name="stack", soft=67108864, hard=67108864),
            ],  # fmt: skip
        }
        if options["network_mode"] == "none":
            # Without a network the container's host name resolves to nothing, and the real
            # Horovod's Gloo then dies of a segmentation fault in every rank: name the container
            # and point the name at the loopback address.
            options["hostname"] = options["name"]
            options["extra_hosts"] = {options["name"]: "127.0.0.1"}
        if resources.cpus is not None:
            options["nano_cpus"] = int(resources.cpus * 1e9)
        if resources.memory_gb is not None:
            options["mem_limit"] = f"{int(resources.memory_gb * 1024)}m"
        if resources.gpus:
            options["device_requests"] = [
                DeviceRequest(device_ids=list(resources.gpus), capabilities=[["gpu"]])
            ]
        try:
            self._remove_leftover(options["name"])
            container = self.client.containers.run(self.image, **options)
        except docker.errors.APIError as err:
            self._remove_leftover(options["name"])  # created but not started: nothing to keep
            raise ExecutorError(f"docker could not start the run's container: {err}") from err
        return str(container.id)

    def poll(self, home: Path, handle: str) -> Status:
        import docker.errors

        code = read_exit_code(home)
        try:
            container = self.client.containers.get(handle)
        except docker.errors.NotFound:
            if code is not None:
                return Status("exited", code)
            return Status("lost", reason="its container is gone and left no exit code")
        self._copy_logs(container, home)
        if container.status in STATES_RUNNING:
            return Status("running")
        state = container.attrs.get("State", {})
        code = int(state.get("ExitCode", -1))
        write_exit_code(home, code)
        return Status("exited", code, reason=_reason(state, code))

    def stop(self, home: Path, handle: str, grace_s: float = 10.0) -> bool:
        import docker.errors

        try:
            container = self.client.containers.get(handle)
            if container.status not in STATES_RUNNING:
                return False
            container.stop(timeout=max(1, int(round(grace_s))))
        except docker.errors.NotFound:
            return False
        if home is not None and Path(home).exists():
            self._copy_logs(container, Path(home))
        return True

    def find(self, run_id: int, home: Path | None = None) -> str | None:
        """The newest container of run ``run_id``; with ``home``, the one launched in that
        folder (a run over several hosts has one container per node, all with its run id;
        two of them may share a host)."""
        found = self.client.containers.list(all=True, filters={"label": f"{LABEL}={run_id}"})
        if home is not None:
            where = str(Path(home).resolve())
            found = [c for c in found if (c.labels or {}).get(HOME_LABEL, where) == where]
        if not found:
            return None
        found.sort(key=lambda c: c.attrs.get("Created", ""), reverse=True)
        return str(found[0].id)

    def remove(self, handle: str) -> bool:
        """Delete an ended container (its log is already in ``process.log``)."""
        import docker.errors

        try:
            self.client.containers.get(handle).remove(force=False)
        except (docker.errors.NotFound, docker.errors.APIError):
            return False
        return True

    def wait(self, handle: str, timeout_s: float) -> int:
        """Block until the container ends (for ``python -m runners run --executor docker``)."""
        result = self.client.containers.get(handle).wait(timeout=timeout_s)
        return int(result.get("StatusCode", -1))

    # -- helpers ---------------------------------------------------------------------------------
    def _user_for(self, home: Path) -> str:
        if os.getuid() != 0:
            return f"{os.getuid()}:{os.getgid()}"
        for path in [home, *home.rglob("*")]:
            os.chown(path, IMAGE_USER, IMAGE_USER)
        return f"{IMAGE_USER}:{IMAGE_USER}"

    def _remove_leftover(self, name: str) -> None:
        """An earlier attempt's container of the same name (ended) is removed first."""
        import docker.errors

        try:
            old = self.client.containers.get(name)
        except docker.errors.NotFound:
            return
        if old.status in STATES_RUNNING - {"created"}:
            raise ExecutorError(f"container {name} of an earlier attempt is still running")
        old.remove()

    @staticmethod
    def _copy_logs(container: Any, home: Path) -> None:
        try:
            data = container.logs(stdout=True, stderr=True)
        except Exception:  # the engine lost the log: keep what process.log has
            return
        tmp = home / (LOG + ".tmp")
        tmp.write_bytes(data)
        tmp.rename(home / LOG)


def _memlock() -> int:
    """Locked memory for training (pinned buffers): unlimited (-1) where the engine may grant
    it, else this host's own hard limit (a sandboxed engine refuses more than it has)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return -1 if hard == resource.RLIM_INFINITY else int(hard)


def container_name(run_id: int, home: Path) -> str:
    """``lab-run-<id>-<attempt folder hash>``: unique per home folder, stable for one."""
    import hashlib

    digest = hashlib.sha256(str(home).encode()).hexdigest()[:8]
    return f"lab-run-{int(run_id)}-{digest}"


def _reason(state: dict[str, Any], code: int) -> str:
    if state.get("OOMKilled"):
        return "killed: out of memory (the container's memory limit)"
    if code == 137:
        return "killed (SIGKILL: stopped by force, or killed from outside)"
    if code == 143:
        return "terminated (SIGTERM)"
    if state.get("Error"):
        return f"docker: {state['Error']}"
    return ""


def wait_for_state(executor: DockerExecutor, home: Path, handle: str, timeout_s: float) -> Status:
    """Poll until the container has ended (tests and the command line)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = executor.poll(home, handle)
        if status.state != "running" or time.monotonic() > deadline:
            return status
        time.sleep(0.5)
