"""The catalogue of systems, baselines and workloads, loaded from runners' registry."""

from django.db import models


class CatalogueEntry(models.Model):
    ROLE_CHOICES = [("system", "system"), ("baseline", "baseline")]

    name = models.CharField(max_length=64, unique=True)
    arena = models.CharField(max_length=16)
    role = models.CharField(max_length=16, choices=ROLE_CHOICES)
    modes = models.JSONField(default=list)
    paper = models.TextField()
    summary = models.TextField()
    params = models.JSONField(default=list)
    active = models.BooleanField(default=True, help_text="false once removed from the registry")

    class Meta:
        ordering = ["arena", "role", "name"]
        verbose_name_plural = "catalogue entries"

    def __str__(self) -> str:
        return self.name


class Workload(models.Model):
    name = models.CharField(max_length=64, unique=True)
    layers = models.PositiveIntegerField()
    total_param_bytes = models.BigIntegerField()
    default_batch_size = models.PositiveIntegerField()
    activation_bytes_per_sample = models.BigIntegerField(
        default=0, help_text="what autograd saves for the backward, per sample (the profile's)"
    )
    cpu_worker_bytes = models.BigIntegerField(
        default=0,
        help_text="a real run's CPU worker at the default batch size, as the memory check "
        "counts it (the process, its copies of the weights, its step twice for the heap)",
    )
    sample_unit = models.CharField(max_length=32)
    source = models.JSONField(default=dict)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def cpu_worker_gb(self) -> float:
        """``cpu_worker_bytes`` in GB, to a tenth."""
        return round(self.cpu_worker_bytes / 1e9, 1)
