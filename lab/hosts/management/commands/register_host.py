"""``python manage.py register_host [--name NAME] [--queue Q] [--executor local|docker|slurm]``.

Registers this machine (default name: its host name) and the GPUs nvidia-smi lists, marks
GPUs no longer listed as removed, and prints what it found. A machine without nvidia-smi or
without GPUs registers with zero GPUs (CPU-only work).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.hosts import ledger
from lab.hosts.models import Host


class Command(BaseCommand):
    help = "Register this machine and its GPUs (from nvidia-smi) in the GPU ledger."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=None,
                            help="host name (default: this machine's host name)")  # fmt: skip
        parser.add_argument("--queue", default=None,
                            help="Celery queue of this host (default: host.<name>)")  # fmt: skip
        parser.add_argument("--executor", choices=Host.EXECUTORS, default="local")

    def handle(self, *args: Any, **opts: Any) -> None:
        name = opts["name"] or ledger.this_hostname()
        try:
            host = ledger.register_host(name, queue=opts["queue"], executor=opts["executor"])
        except ledger.GpuQueryError as err:
            raise CommandError(f"nvidia-smi failed, nothing registered: {err}") from None
        except ValueError as err:
            raise CommandError(str(err)) from None
        self.stdout.write(
            f"host {host.name}: queue {host.queue}, executor {host.executor}, "
            f"{host.cpus} CPUs, {host.memory_gb:g} GiB memory"
        )
        present = list(host.gpus.filter(present=True))
        if not present:
            self.stdout.write("no GPUs found (nvidia-smi absent or no devices): CPU-only host")
        else:
            self.stdout.write(f"{len(present)} GPU{'s' if len(present) != 1 else ''}:")
        for gpu in present:
            state = "busy (external process)" if gpu.busy_external else "ok"
            self.stdout.write(
                f"  {gpu.index:>2}  {gpu.uuid}  {gpu.model}  {gpu.memory_mb} MiB  {state}"
            )
        for gpu in host.gpus.filter(present=False):
            self.stdout.write(f"  removed: {gpu.uuid} ({gpu.model}, was index {gpu.index})")
