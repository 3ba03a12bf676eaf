"""The GPU ledger: which host has which GPUs, and which run holds which GPU.

- ``discover_gpus`` and ``busy_uuids`` ask the local ``nvidia-smi`` (nothing when it is absent);
- ``register_host`` upserts this machine and its GPUs (``manage.py register_host`` calls it);
- ``refresh_busy`` re-reads which GPUs run processes that are not ours (cheap, idempotent: fit
  for a periodic task on the host's own queue);
- ``claim_gpus`` / ``release_gpus`` hand GPUs to runs and take them back, in the database;
- ``capacity`` / ``check_request`` refuse, at submission, a run that no host could ever hold.

Claims are rows of ``GpuClaim``. ``claim_gpus`` works inside ``transaction.atomic()``: it locks
the GPU rows it takes with ``SELECT ... FOR UPDATE`` (``SKIP LOCKED`` where the database has it,
so concurrent claimers take different GPUs instead of queueing behind one another), re-checks
them once locked, and inserts the claims. The partial unique constraint "one unreleased claim
per GPU" backs this up in the database itself. On SQLite, whose transactions here start with
``BEGIN IMMEDIATE`` (see settings), claimers are serialised by the database lock instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from lab.hosts.models import Gpu, GpuClaim, Host
from lab.runs.models import Run
from runners.spec import SpecError

log = logging.getLogger(__name__)

NVIDIA_SMI = "nvidia-smi"
GPU_QUERY = ("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")
APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader")
NVIDIA_SMI_TIMEOUT_S = 30.0
# Attempts of claim_gpus when the GPUs it wants are locked by other claimers at that moment.
CLAIM_ATTEMPTS = 8
CLAIM_BACKOFF_S = 0.05


@dataclass(frozen=True)
class GpuInfo:
    """One line of ``nvidia-smi --query-gpu=index,uuid,name,memory.total``."""

    index: int
    uuid: str
    model: str
    memory_mb: int


class GpuQueryError(RuntimeError):
    """``nvidia-smi`` exists but failed (driver not loaded, timeout): the message says how."""


class NotEnoughGpus(Exception):
    """No single active host has ``count`` free GPUs (of ``model``) for the run right now.

    ``free`` maps each candidate host's name to its number of free matching GPUs."""

    def __init__(self, message: str, count: int, model: str | None, free: dict[str, int]):
        super().__init__(message)
        self.count = count
        self.model = model
        self.free = free


# --- nvidia-smi ----------------------------------------------------------------------------


def _nvidia_smi(*args: str) -> str | None:
    """stdout of ``nvidia-smi ARGS``; None when nvidia-smi is not on PATH or sees no GPU."""
    binary = shutil.which(NVIDIA_SMI)
    if binary is None:
        return None
    try:
        out = subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise GpuQueryError(
            f"{binary} did not answer within {NVIDIA_SMI_TIMEOUT_S:.0f} s"
        ) from None
    except OSError as err:
        raise GpuQueryError(f"cannot run {binary}: {err}") from None
    if out.returncode != 0:
        text = (out.stdout + out.stderr).strip()
        if "no devices were found" in text.lower():
            return None
        last = text.splitlines()[-1] if text else "no output"
        raise GpuQueryError(f"{binary} {' '.join(args)} exited {out.returncode}: {last}")
    return out.stdout


def _csv_lines(text: str | None) -> Iterable[list[str]]:
    for line in (text or "").splitlines():
        if line.strip() and not line.lstrip().startswith("No running"):
            yield [part.strip() for part in line.split(",")]


def _int_or_zero(text: str) -> int:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return 0


def parse_gpu_query(text: str | None) -> list[GpuInfo]:
    """GPUs from ``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,
    nounits`` output (one ``0, GPU-..., NVIDIA H100 80GB HBM3, 81559`` line per GPU)."""
    gpus = []
    for parts in _csv_lines(text):
        if len(parts) < 4:
            raise GpuQueryError(f"unexpected nvidia-smi line: {', '.join(parts)!r}")
        gpus.append(
            GpuInfo(
                index=int(parts[0]),
                uuid=parts[1],
                model=", ".join(parts[2:-1]),  # a name with a comma stays whole
                memory_mb=_int_or_zero(parts[-1]),
            )
        )
    return gpus


def parse_apps_query(text: str | None) -> set[str]:
    """UUIDs of the GPUs that run compute processes, from ``nvidia-smi
    --query-compute-apps=gpu_uuid,pid --format=csv,noheader`` output."""
    return {parts[0] for parts in _csv_lines(text) if parts and parts[0].startswith("GPU-")}


def discover_gpus() -> list[GpuInfo]:
    """The GPUs of this machine, by ``nvidia-smi`` index; [] when nvidia-smi is absent.

    Raises ``GpuQueryError`` when nvidia-smi is there but fails."""
    return parse_gpu_query(_nvidia_smi(*GPU_QUERY))


def busy_uuids() -> set[str]:
    """UUIDs of this machine's GPUs that have compute processes (anyone's) right now."""
    return parse_apps_query(_nvidia_smi(*APPS_QUERY))


# --- hosts ---------------------------------------------------------------------------------


def default_queue(name: str) -> str:
    """The Celery queue of host ``name``: ``host.<name>``."""
    return f"host.{name}"


def this_hostname() -> str:
    """This machine's short host name (what ``register_host`` uses when given none)."""
    return socket.gethostname().split(".")[0] or "localhost"


def _memory_gb() -> float:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0.0
    return round(total / 2**30, 1)


def _active_claims() -> QuerySet[GpuClaim]:
    return GpuClaim.objects.filter(released_at__isnull=True)


def host_address() -> str:
    """Where other hosts reach this one: ``LAB_HOST_ADDRESS``, else the address of the
    interface of the default route, else this machine's name resolved (127.0.0.1 when it does
    not resolve: then only hosts on this machine reach it, and the Hosts page shows it)."""
    from django.conf import settings

    if settings.HOST_ADDRESS:
        return settings.HOST_ADDRESS
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:  # the interface of the default route (a UDP "connect" sends nothing)
            probe.connect(("192.0.2.1", 9))
            address = probe.getsockname()[0]
            if not address.startswith("127."):
                return address
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def register_host(name: str, queue: str | None = None, executor: str = "local") -> Host:
    """Create or update host ``name`` (this machine) and its GPUs, as nvidia-smi sees them now.

    GPUs found are upserted by UUID (moved to this host if they were elsewhere); this host's GPUs
    that nvidia-smi no longer lists are marked not ``present`` (they keep their history but get
    no new claims). ``busy_external`` is refreshed too, and ``last_seen`` set. Works with no GPU.
    """
    if executor not in Host.EXECUTORS:
        raise ValueError(f"executor: {executor!r} is not one of {', '.join(Host.EXECUTORS)}")
    name = name.strip()
    if not name:
        raise ValueError("name: a host needs a name")
    found = discover_gpus()
    busy = busy_uuids() if found else set()
    now = timezone.now()
    with transaction.atomic():
        host, _ = Host.objects.update_or_create(
            name=name,
            defaults={
                "queue": queue or default_queue(name),
                "executor": executor,
                "cpus": os.cpu_count() or 0,
                "memory_gb": _memory_gb(),
                "last_seen": now,
                "active": True,
                "address": host_address(),
            },
        )
        for info in found:
            Gpu.objects.update_or_create(
                uuid=info.uuid,
                defaults={
                    "host": host,
                    "index": info.index,
                    "model": info.model,
                    "memory_mb": info.memory_mb,
                    "present": True,
                    "last_checked": now,
                },
            )
        host.gpus.exclude(uuid__in=[g.uuid for g in found]).update(present=False)
        _mark_busy(host, busy, now)
    return host


def _mark_busy(host: Host, busy: set[str], now: datetime) -> int:
    """Set ``busy_external`` of ``host``'s GPUs: busy, and not held by one of our runs (a GPU
    we handed out runs our own processes). Returns the number busy with others' processes."""
    held = set(_active_claims().filter(gpu__host=host).values_list("gpu__uuid", flat=True))
    external = busy - held
    gpus = host.gpus.filter(present=True)
    gpus.filter(uuid__in=external).update(busy_external=True, last_checked=now)
    gpus.exclude(uuid__in=external).update(busy_external=False, last_checked=now)
    return gpus.filter(uuid__in=external).count()


def refresh_busy(host: Host | str) -> int:
    """Re-read which of ``host``'s GPUs run processes that are not ours; returns how many.

    Runs ``nvidia-smi`` on this machine, so call it on ``host`` itself (e.g. a periodic task
    on its queue). Also bumps the host's ``last_seen``. A failing nvidia-smi raises
    ``GpuQueryError`` and changes nothing."""
    host = _host(host)
    busy = busy_uuids()
    now = timezone.now()
    with transaction.atomic():
        Host.objects.filter(pk=host.pk).update(last_seen=now)
        return _mark_busy(host, busy, now)


def _host(host: Host | str) -> Host:
    if isinstance(host, Host):
        return host
    try:
        return Host.objects.get(name=host)
    except Host.DoesNotExist:
        raise ValueError(f"host: no host named {host!r} is registered") from None


# --- claims --------------------------------------------------------------------------------


def _matching(model: str | None, host: Host | str | None) -> QuerySet[Gpu]:
    """Present GPUs of active hosts, of ``model`` (case-insensitive substring), on ``host``."""
    gpus = Gpu.objects.filter(present=True, host__active=True)
    if model:
        gpus = gpus.filter(model__icontains=model)
    if host is not None:
        gpus = gpus.filter(host__name=host.name if isinstance(host, Host) else host)
    return gpus


def _free(gpus: QuerySet[Gpu]) -> QuerySet[Gpu]:
    claimed = _active_claims().filter(gpu=OuterRef("pk"))
    return gpus.filter(busy_external=False).filter(~Exists(claimed))


def _held(run: Run, host: Host | str | None = None) -> list[Gpu]:
    claims = _active_claims().filter(run=run).select_related("gpu__host")
    if host is not None:  # a run over several hosts holds GPUs on each
        claims = claims.filter(gpu__host__name=host if isinstance(host, str) else host.name)
    return sorted((c.gpu for c in claims), key=lambda g: (g.host.name, g.index))


def _lock_opts() -> dict[str, bool]:
    return {"skip_locked": connection.features.has_select_for_update_skip_locked}


class _Short(Exception):
    """Fewer GPUs could be locked than asked: roll the savepoint (and its row locks) back."""


def _describe(count: int, model: str | None) -> str:
    what = f"{count} GPU{'s' if count != 1 else ''}"
    return f"{what} of model {model!r}" if model else what


def _shortage(
    run: Run, count: int, model: str | None, host: Host | str | None, contended: bool = False
) -> NotEnoughGpus:
    """NotEnoughGpus whose message says what was asked and what is free where."""
    totals: dict[str, int] = defaultdict(int)
    claimed: dict[str, int] = defaultdict(int)
    busy: dict[str, int] = defaultdict(int)
    free: dict[str, int] = defaultdict(int)
    active = set(_active_claims().values_list("gpu_id", flat=True))
    for gpu in _matching(model, host).select_related("host"):
        name = gpu.host.name
        totals[name] += 1
        if gpu.pk in active:
            claimed[name] += 1
        elif gpu.busy_external:
            busy[name] += 1
        else:
            free[name] += 1
    pinned = host.name if isinstance(host, Host) else host
    asked = f"run {run.pk} asks for {_describe(count, model)} on one host"
    if pinned is not None:
        asked += f" ({pinned})"
    if not totals:
        where = f"named {pinned!r} " if pinned is not None else ""
        return NotEnoughGpus(
            f"{asked}, but no active host {where}has such GPUs "
            "(register hosts with `python manage.py register_host`)",
            count,
            model,
            {},
        )
    parts = []
    for name in sorted(totals):
        detail = [f"{claimed[name]} claimed"] if claimed[name] else []
        if busy[name]:
            detail.append(f"{busy[name]} busy with other processes")
        extra = f" ({', '.join(detail)})" if detail else ""
        parts.append(f"{name} {free[name]} of {totals[name]}{extra}")
    message = f"{asked}; free now: {'; '.join(parts)}"
    if contended:
        message += "; other runs were claiming GPUs at the same moment, try again"
    return NotEnoughGpus(message, count, model, {n: free[n] for n in sorted(totals)})


def claim_gpus(
    run: Run, count: int, model: str | None = None, host: Host | str | None = None
) -> list[Gpu]:
    """Claim ``count`` free GPUs on one host for ``run`` and return them (by host, index).

    Free: present, on an active host, not busy with another process at the last check, and
    with no unreleased claim. ``model`` matches the GPU name case-insensitively as a substring
    ("A100", "H100 80GB"); ``host`` (a Host or a name) pins the host. Among hosts with enough
    free GPUs the one with the fewest is chosen (keeps whole hosts free for big runs).

    Idempotent: a run that already holds claims (on ``host``, when given: a run over several
    hosts holds GPUs on each) gets those GPUs back, nothing new is claimed.
    ``count`` 0 claims nothing. Raises ``NotEnoughGpus`` when no single host can serve it now.
    """
    if count < 0:
        raise ValueError(f"count: {count} GPUs asked; ask for 0 or more")
    if count == 0:
        return []
    with transaction.atomic():
        # Serialise the claims of one run, so two claimers of the same run cannot both claim.
        list(Run.objects.select_for_update().filter(pk=run.pk).values_list("pk", flat=True))
        held = _held(run, host)
        if held:
            return held
        for attempt in range(CLAIM_ATTEMPTS):
            if attempt:
                time.sleep(CLAIM_BACKOFF_S * attempt)
            by_host: dict[int, list[int]] = defaultdict(list)
            for gpu_id, host_id in _free(_matching(model, host)).values_list("pk", "host_id"):
                by_host[host_id].append(gpu_id)
            fitting = sorted(
                (ids for ids in by_host.values() if len(ids) >= count),
                key=lambda ids: (len(ids), min(ids)),
            )
            if not fitting:
                break
            for ids in fitting:
                try:
                    with transaction.atomic():  # a savepoint: rolling it back drops its locks
                        locked = list(
                            _free(Gpu.objects.filter(pk__in=ids))
                            .select_for_update(**_lock_opts())
                            .order_by("index", "pk")[:count]
                        )
                        # Re-check once locked: a claimer that held a lock may have committed
                        # a claim after this statement's snapshot was taken.
                        taken = set(
                            _active_claims().filter(gpu__in=locked).values_list("gpu_id", flat=True)
                        )
                        gpus = [g for g in locked if g.pk not in taken]
                        if len(gpus) < count:
                            raise _Short
                        now = timezone.now()
                        GpuClaim.objects.bulk_create(
                            GpuClaim(gpu=g, run=run, claimed_at=now) for g in gpus
                        )
                except _Short:
                    continue
                log.info("run %s claimed GPUs %s", run.pk, ", ".join(g.uuid for g in gpus))
                return _held(run, host)
        else:  # every attempt found enough free GPUs, but other claimers had them locked
            raise _shortage(run, count, model, host, contended=True)
    raise _shortage(run, count, model, host)


def release_gpus(run: Run) -> int:
    """Release every GPU ``run`` holds; returns how many were released (0: none held)."""
    return _active_claims().filter(run=run).update(released_at=timezone.now())


def held_gpus(run: Run) -> list[Gpu]:
    """The GPUs ``run`` holds now (by host, index)."""
    return _held(run)


def _largest(model: str | None) -> tuple[int, str | None]:
    """(GPUs of the largest active host, its name), counting present GPUs of ``model``."""
    counts: dict[str, int] = defaultdict(int)
    for name in _matching(model, None).values_list("host__name", flat=True):
        counts[name] += 1
    if not counts:
        return 0, None
    name = max(sorted(counts), key=lambda n: counts[n])
    return counts[name], name


def free_gpus(model: str | None, host: Host | str) -> int:
    """How many GPUs (matching ``model``) are free on ``host`` now."""
    return _free(_matching(model, host)).count()


def capacity(model: str | None = None) -> int:
    """The most GPUs (of ``model``, if given) any single active host has, claimed or not."""
    return _largest(model)[0]


def check_request(count: int, model: str | None = None, field: str = "real.gpus") -> None:
    """Refuse at submission a run that no host could ever hold.

    Raises ``runners.spec.SpecError`` (a ``ValueError`` naming ``field``), e.g.
    ``real.gpus: 4 GPUs asked, the largest host has 2 (host-a)``."""
    if count < 0:
        raise SpecError(field, f"{count} GPUs asked; ask for 0 or more")
    if count == 0:
        return
    most, name = _largest(model)
    if count <= most:
        return
    asked = f"{_describe(count, model)} asked"
    if name is None:
        having = (
            f"no active host has GPUs of model {model!r}" if model else "no active host has GPUs"
        )
        raise SpecError(
            field, f"{asked}, but {having} (register hosts with `manage.py register_host`)"
        )
    of_model = f" GPU{'s' if most != 1 else ''} of model {model!r}" if model else ""
    raise SpecError(field, f"{asked}, the largest host has {most}{of_model} ({name})")


def claims_by_gpu(gpu_ids: Iterable[int]) -> dict[int, GpuClaim]:
    """The unreleased claim of each of ``gpu_ids`` that has one (with its run)."""
    claims = _active_claims().filter(gpu_id__in=list(gpu_ids)).select_related("run")
    return {c.gpu_id: c for c in claims}


__all__ = [
    "GpuInfo",
    "GpuQueryError",
    "NotEnoughGpus",
    "busy_uuids",
    "capacity",
    "check_request",
    "claim_gpus",
    "claims_by_gpu",
    "default_queue",
    "discover_gpus",
    "held_gpus",
    "parse_apps_query",
    "parse_gpu_query",
    "refresh_busy",
    "register_host",
    "release_gpus",
    "this_hostname",
]
