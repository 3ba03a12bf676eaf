from django.db import models


class Measurement(models.Model):
    """One summary number of a run, in long form (run, metric, value, unit)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="measurements")
    metric = models.CharField(max_length=64)
    value = models.FloatField()
    unit = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["run", "metric"]
        constraints = [
            models.UniqueConstraint(fields=["run", "metric"], name="one_value_per_metric")
        ]

    def __str__(self) -> str:
        return f"{self.metric}={self.value:g} {self.unit}"


class Artifact(models.Model):
    """A file a run produced (timeline, series), relative to the results directory."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="artifacts")
    kind = models.CharField(max_length=32)
    path = models.CharField(max_length=500)

    class Meta:
        ordering = ["run", "kind"]
        constraints = [
            models.UniqueConstraint(fields=["run", "kind"], name="one_artifact_per_kind")
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}"
