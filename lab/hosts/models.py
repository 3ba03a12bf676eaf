"""GPU hosts, their GPUs, and the ledger of which run holds which GPU.

A worker host registers itself and its GPUs (``manage.py register_host``); runs claim GPUs
through ``lab.hosts.ledger``, which writes ``GpuClaim`` rows inside a transaction. The partial
unique constraint on ``GpuClaim`` (one claim without ``released_at`` per GPU) is the database's
own guarantee that no GPU is ever handed to two runs at once, whatever the callers do.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class Host(models.Model):
    """A machine that runs experiments: its Celery queue, executor and resources."""

    EXECUTORS = ("local", "docker", "slurm")
    EXECUTOR_CHOICES = [(e, e) for e in EXECUTORS]

    name = models.CharField(max_length=128, unique=True)
    queue = models.CharField(max_length=200, help_text="Celery queue of this host (host.<name>)")
    executor = models.CharField(max_length=16, choices=EXECUTOR_CHOICES, default="local")
    cpus = models.PositiveIntegerField(default=0)
    memory_gb = models.FloatField(default=0.0)
    last_seen = models.DateTimeField(null=True, blank=True)
    active = models.BooleanField(default=True, help_text="inactive hosts get no new claims")
    address = models.CharField(
        max_length=255,
        blank=True,
        help_text="where the other hosts reach it (LAB_HOST_ADDRESS): a multi-host run's "
        "first node is its rendezvous",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Gpu(models.Model):
    """One GPU of a host, as ``nvidia-smi`` reported it at the host's last registration."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField(help_text="nvidia-smi index on its host")
    uuid = models.CharField(max_length=80, unique=True)
    model = models.CharField(max_length=128, help_text="e.g. NVIDIA H100 80GB HBM3")
    memory_mb = models.PositiveIntegerField(default=0)
    present = models.BooleanField(
        default=True, help_text="seen at the host's last registration (gone GPUs get no claims)"
    )
    busy_external = models.BooleanField(
        default=False, help_text="busy with a process that is not one of our runs at last check"
    )
    last_checked = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["host__name", "index", "id"]
        verbose_name = "GPU"

    def __str__(self) -> str:
        return f"{self.host.name}:{self.index} {self.model}"


class GpuClaim(models.Model):
    """A run holds a GPU from ``claimed_at`` until ``released_at`` (null: still held)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="claims")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="gpu_claims")
    claimed_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-claimed_at", "-id"]
        verbose_name = "GPU claim"
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(released_at__isnull=True),
                name="hosts_one_active_claim_per_gpu",
            )
        ]
        indexes = [models.Index(fields=["run", "released_at"])]

    def __str__(self) -> str:
        held = "held" if self.released_at is None else "released"
        return f"run {self.run_id} on GPU {self.gpu_id} ({held})"
