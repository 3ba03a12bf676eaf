from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse


class Experiment(models.Model):
    """A comparison: one system against baselines, on workloads, over seeds."""

    MODE_CHOICES = [("sim", "simulation"), ("real", "real")]

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="experiments"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    system = models.CharField(max_length=64)
    baselines = models.JSONField(default=list)
    workloads = models.JSONField(default=list)
    mode = models.CharField(max_length=8, choices=MODE_CHOICES, default="sim")
    seeds = models.JSONField(default=list)
    cluster = models.JSONField(default=dict)
    sweep = models.JSONField(
        default=dict,
        blank=True,
        help_text='swept cluster fields and their values, e.g. {"bandwidth_gbps": [1, 10]}',
    )
    params = models.JSONField(default=dict, help_text="parameters of the system under test")
    real = models.JSONField(
        default=dict,
        blank=True,
        help_text="mode real: how the runs train (runners.spec.RealOptions fields)",
    )
    iterations = models.PositiveIntegerField(default=20)
    batch_size = models.PositiveIntegerField(
        default=0, help_text="samples per worker and step; 0: each workload's default"
    )
    nightly = models.BooleanField(
        default=False, help_text="re-run every night with the claims suite, tracked for regressions"
    )
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("experiment-detail", args=[self.pk])

    @property
    def entries(self) -> list[str]:
        """System first, then baselines: the order of every table and plot."""
        return [self.system, *self.baselines]

    @property
    def status(self) -> str:
        from lab.runs.models import Run

        return Run.combined_state([r.state for r in self.runs.all()])
