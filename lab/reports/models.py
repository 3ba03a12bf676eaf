"""What the claims ledger and the nightly runs leave behind: claim checks, nights, the history
of every tracked value, regression alerts and the annotations that reset a baseline."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse


class NightlyRun(models.Model):
    """One night of the reproducibility suite: the claims' experiments and the re-runs of every
    experiment marked nightly, with the environment they ran in."""

    RUNNING, DONE, SKIPPED = "running", "done", "skipped"
    STATE_CHOICES = [(s, s) for s in (RUNNING, DONE, SKIPPED)]

    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=RUNNING)
    trigger = models.CharField(max_length=16, default="beat", help_text="beat or manual")
    mode = models.CharField(max_length=8, default="sim")
    claims = models.JSONField(default=list, help_text="claim ids this night was asked to run")
    manifest = models.JSONField(default=dict, help_text="code, packages and host at the start")
    experiments = models.ManyToManyField(
        "experiments.Experiment", blank=True, related_name="nightlies"
    )
    summary = models.JSONField(default=dict, blank=True)
    notified = models.JSONField(default=dict, blank=True, help_text="what was sent, or errors")
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"night #{self.pk} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("nightly-detail", args=[self.pk])

    @property
    def duration_s(self) -> float | None:
        if self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class ClaimCheck(models.Model):
    """One judgement of a ledger claim: pending while its experiment runs, then the verdict."""

    PENDING, DONE = "pending", "done"

    claim_id = models.CharField(max_length=64, db_index=True)
    mode = models.CharField(max_length=8, default="sim")
    state = models.CharField(
        max_length=16, choices=[(PENDING, PENDING), (DONE, DONE)], default=PENDING
    )
    experiment = models.ForeignKey(
        "experiments.Experiment",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="claim_checks",
    )
    nightly = models.ForeignKey(
        NightlyRun, null=True, blank=True, on_delete=models.CASCADE, related_name="checks"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    definition = models.JSONField(
        default=dict, help_text="the claim as the ledger had it when the check was queued"
    )
    verdict = models.CharField(max_length=16, blank=True)
    measured = models.FloatField(null=True, blank=True)
    line = models.JSONField(default=dict, blank=True, help_text="the reproduce --json line")
    per_condition = models.JSONField(
        default=dict, blank=True, help_text="baseline -> condition -> the claim's measure"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    judged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.claim_id} ({self.mode}): {self.verdict or self.state}"

    @property
    def claimed(self) -> float | None:
        return self.definition.get("claimed")

    @property
    def unit(self) -> str:
        return self.definition.get("unit", "")


class HistoryPoint(models.Model):
    """One night's value of one tracked series: a claim's measured value, or the mean over
    seeds of a metric of a nightly experiment (one system, workload and condition)."""

    nightly = models.ForeignKey(NightlyRun, on_delete=models.CASCADE, related_name="points")
    series = models.CharField(max_length=300, db_index=True)
    label = models.CharField(max_length=300)
    metric = models.CharField(max_length=64)
    value = models.FloatField()
    unit = models.CharField(max_length=32, blank=True)
    finding = models.JSONField(default=dict, blank=True, help_text="the regression detector's")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["nightly__started_at", "nightly_id"]
        constraints = [
            models.UniqueConstraint(fields=["nightly", "series"], name="one_point_per_night")
        ]

    def __str__(self) -> str:
        return f"{self.series} = {self.value:g}"


class ExpectedChange(models.Model):
    """A human note that a series (or every series, when blank) is expected to change from
    ``effective_at`` on: the first night at or after it starts a new baseline."""

    series = models.CharField(max_length=300, blank=True, db_index=True)
    effective_at = models.DateTimeField()
    note = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-effective_at"]

    def __str__(self) -> str:
        return f"{self.series or 'all series'} from {self.effective_at:%Y-%m-%d %H:%M}"


class Alert(models.Model):
    """A regression the detector found on a night (or a claim's verdict getting worse)."""

    OPEN, CLOSED = "open", "closed"

    nightly = models.ForeignKey(NightlyRun, on_delete=models.CASCADE, related_name="alerts")
    series = models.CharField(max_length=300, db_index=True)
    label = models.CharField(max_length=300)
    kind = models.CharField(max_length=16, help_text="point, step or verdict")
    message = models.TextField()
    z = models.FloatField(null=True, blank=True)
    rel_change = models.FloatField(null=True, blank=True)
    state = models.CharField(
        max_length=8, choices=[(OPEN, OPEN), (CLOSED, CLOSED)], default=OPEN, db_index=True
    )
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    closed_at = models.DateTimeField(null=True, blank=True)
    close_note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} alert on {self.label}"
