"""Start the real lab stack in subprocesses, as `make run` does: gunicorn, a Celery worker and
the beat scheduler, with their own database, result store and broker in a temporary folder.

Used by the integration tests (embedded broker, real Redis, real PostgreSQL) and the browser
test. Nothing here mocks a component.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import require_binary, wait_for

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: every socket held until all are drawn (``free_port``
    called again may hand out the port it just gave, and two services asked to publish on
    one port fail to start: "port is already allocated")."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Stack:
    root: Path
    env: dict[str, str]
    url: str = ""
    token: str = ""
    admin_password: str = ""
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    COMMANDS = {
        "worker": [
            PY,
            "-m",
            "celery",
            "-A",
            "lab",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "2",
            "--hostname",
            "test-worker-%h-{n}",
        ],
        "beat": [
            PY,
            "-m",
            "celery",
            "-A",
            "lab",
            "beat",
            "--loglevel",
            "INFO",
            "--scheduler",
            "django_celery_beat.schedulers:DatabaseScheduler",
        ],
    }

    def manage(self, *args: str) -> str:
        out = subprocess.run(
            [PY, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{out.stderr[-3000:]}")
        return out.stdout

    def start(self, name: str, env: dict[str, str] | None = None, as_name: str = "") -> None:
        """Start ``name`` (web, worker, beat); ``env`` adds to the stack's environment and
        ``as_name`` keeps a second process of the same kind apart (e.g. another host's worker)."""
        if name == "web":
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            command = [
                PY,
                "-m",
                "gunicorn",
                "lab.wsgi",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
                "--log-level",
                "warning",
            ]
        else:
            command = [part.replace("{n}", secrets.token_hex(3)) for part in self.COMMANDS[name]]
        key = as_name or name
        log = (self.root / "logs" / f"{key}.log").open("a")
        self.procs[key] = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if name == "web":
            wait_for(self._healthy, 60, 0.2, "the web server")

    def _healthy(self) -> bool:
        proc = self.procs["web"]
        if proc.poll() is not None:
            raise RuntimeError(f"web server exited:\n{self.log('web')}")
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def log(self, name: str) -> str:
        path = self.root / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def fetch(self, url: str) -> bytes:
        request = urllib.request.Request(url, headers={"Authorization": f"Token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.read()

    def wait_finished(self, experiment_id: int, timeout_s: float = 300) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            status, data = self.api("GET", f"/api/experiments/{experiment_id}/")
            assert status == 200, data
            if data["status"] in ("queued", "running"):
                return None
            return data if data["figures_current"] else None

        try:
            return wait_for(finished, timeout_s, 0.5, f"experiment {experiment_id} to finish")
        except AssertionError:
            raise AssertionError(
                "\n".join(f"--- {n} ---\n{self.log(n)}" for n in ("worker", "beat", "web"))
            ) from None


def far_nightly_cron() -> str:
    """A nightly schedule twelve hours from now in the lab's zone: never inside a session."""
    zone = zoneinfo.ZoneInfo(os.environ.get("LAB_TIME_ZONE", "UTC"))
    return f"0 {(datetime.datetime.now(zone).hour + 12) % 24} * * *"


def start_stack(root: Path, **env_overrides: str) -> Stack:
    """Migrate, create an admin and a token, start web + worker + beat; return the stack."""
    (root / "logs").mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "lab.settings.base",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(40),
        "LAB_VAR_DIR": str(root / "var"),
        "LAB_RESULTS_DIR": str(root / "results"),
        "LAB_RECONCILE_INTERVAL_S": "1",
        "LAB_ADMIN_USER": "admin",
        "LAB_ADMIN_PASSWORD": secrets.token_urlsafe(12),
        "PYTHONPATH": str(ROOT),
        # The default nightly (02:30) would queue the whole claims suite ahead of a test's own
        # experiments when a session crosses it (CI at 02:31 timed out so): the stacks' night
        # is twelve hours away unless a test sets its own.
        "LAB_NIGHTLY_CRON": far_nightly_cron(),
        **env_overrides,
    }
    for key in ("REDIS_URL", "DATABASE_URL"):  # the embedded default unless asked otherwise
        if key not in env_overrides:
            env.pop(key, None)
    stack = Stack(root=root, env=env, admin_password=env["LAB_ADMIN_PASSWORD"])
    stack.manage("migrate", "--no-input")
    stack.manage("collectstatic", "--no-input")
    stack.manage("ensure_admin")
    stack.token = stack.manage("apitoken", "alice").strip()
    try:
        for name in ("web", "worker", "beat"):
            stack.start(name)
    except BaseException:
        stack.close()
        raise
    return stack


class RedisServer:
    def __init__(self, root: Path) -> None:
        binary = require_binary("redis-server")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_for(self._ready, 20, 0.1, "redis-server")

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class PostgresServer:
    """A private PostgreSQL cluster (Debian's server binaries), on loopback, trust auth."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        initdb = require_binary("initdb", *found[-1:])
        self.bin = Path(initdb).parent
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lab-pg-"))
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres account
            self.as_user = ["runuser", "-u", "postgres", "--"]
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", "lab", "--no-sync")
        self._run(
            "pg_ctl",
            "-D",
            str(data),
            "-w",
            "-l",
            str(self.dir / "server.log"),
            "-o",
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )
        self.data = data

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    @property
    def url(self) -> str:
        return f"postgres://lab@127.0.0.1:{self.port}/postgres"

    def close(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


def run_json_script(env: dict[str, str], module: str, *args: object, timeout: float) -> Any:
    """Run ``python -m module args`` from the project root with ``env``; its stdout as JSON
    (the concurrency tests' scripts, with Django set up on the test's database)."""
    out = subprocess.run(
        [PY, "-m", module, *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def fork_at_once(target: Any, arguments: list[tuple[Any, ...]]) -> list[Any]:
    """(In a script with Django set up.) One forked process per ``arguments`` entry, each
    calling ``target(*args, barrier, results)``: every process opens its own database
    connection, waits at the barrier so that all act at the same moment, and puts one result
    on the queue. The results, in the order they came."""
    import multiprocessing

    from django.db import connections

    connections.close_all()  # children must not share this process's connection
    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(len(arguments))
    results = fork.Queue()
    procs = [fork.Process(target=target, args=(*a, barrier, results)) for a in arguments]
    for proc in procs:
        proc.start()
    outcome = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    return outcome
