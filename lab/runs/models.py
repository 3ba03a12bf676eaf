from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models

# The conditions an experiment may sweep; they tell apart the runs of one experiment: the
# communication arenas' cluster fields (``cluster.workers``, ``cluster.bandwidth_gbps``) and the
# cluster arena's offered load, the arrival rate of its generated trace (``trace.jobs_per_hour``).
CONDITION_KEYS = ("workers", "bandwidth_gbps", "jobs_per_hour")


def condition_of(spec: dict[str, Any] | None) -> dict[str, Any]:
    """The ``CONDITION_KEYS`` of a resolved run spec: ``workers`` and ``bandwidth_gbps`` from its
    cluster (None where it has none), and for a cluster-arena spec (one with a trace) also
    ``jobs_per_hour`` from the trace (None for a trace file). A communication-arena spec has no
    ``jobs_per_hour`` key at all, so its condition is what it always was."""
    spec = spec or {}
    cluster = spec.get("cluster") or {}
    condition = {key: cluster.get(key) for key in ("workers", "bandwidth_gbps")}
    if "trace" in spec:
        condition["jobs_per_hour"] = (spec["trace"] or {}).get("jobs_per_hour")
    return condition


def condition_text(values: Mapping[str, Any], bandwidth_unit: str = "Gbit/s") -> str:
    """'resnet50, 8 workers, 10 Gbit/s' or 'philly-200, 20 jobs/h' from whichever of workload,
    workers, bandwidth_gbps and jobs_per_hour ``values`` holds (missing, empty or NaN ones are
    left out)."""
    formats = (
        ("workload", "{}"),
        ("workers", "{:g} workers"),
        ("bandwidth_gbps", "{:g} "),
        ("jobs_per_hour", "{:g} jobs/h"),
    )
    parts = []
    for key, fmt in formats:
        value = values.get(key)
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            continue
        parts.append(fmt.format(value) + (bandwidth_unit if key == "bandwidth_gbps" else ""))
    return ", ".join(parts)


class Run(models.Model):
    """One system x workload x seed of an experiment.

    State machine: queued -> running -> succeeded | failed | cancelled (queued -> cancelled too).
    Every transition goes through ``lab.actions``.
    """

    QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = (
        "queued",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    )
    STATE_CHOICES = [(s, s) for s in (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)]
    ACTIVE = (QUEUED, RUNNING)
    TERMINAL = (SUCCEEDED, FAILED, CANCELLED)

    experiment = models.ForeignKey(
        "experiments.Experiment", on_delete=models.CASCADE, related_name="runs"
    )
    system = models.CharField(max_length=64)
    workload = models.CharField(max_length=64)
    seed = models.BigIntegerField()
    spec = models.JSONField(help_text="resolved run spec (runners contract)")
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=QUEUED, db_index=True)
    attempt = models.PositiveIntegerField(default=1)
    executor = models.CharField(max_length=32, default="local")
    host = models.CharField(max_length=128, blank=True, help_text="worker host that runs it")
    handle = models.CharField(
        max_length=128, blank=True, help_text="the executor's id: pid:ticks, container, job id"
    )
    pid = models.IntegerField(null=True, blank=True)
    pid_start_ticks = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state", "created_at"])]

    def __str__(self) -> str:
        return f"run {self.pk} {self.system}/{self.workload}/seed {self.seed}"

    @property
    def home(self) -> Path:
        """Folder of this run: spec.json, process.log, exit_code and the run directory."""
        return Path(settings.RESULTS_DIR) / "runs" / str(self.pk)

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def condition(self) -> dict[str, Any]:
        """Cluster fields an experiment can sweep, as this run has them (workers, bandwidth)."""
        return condition_of(self.spec)

    @property
    def condition_label(self) -> str:
        return condition_text(self.condition)

    @property
    def other_nodes(self) -> list[RunNode]:
        """The other hosts of a run over several hosts (this attempt's), by rank."""
        return [n for n in self.nodes.all() if n.attempt == self.attempt]

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None

    @staticmethod
    def combined_state(states: list[str]) -> str:
        """An experiment's status from its runs' states."""
        if not states:
            return Run.QUEUED
        if Run.RUNNING in states:
            return Run.RUNNING
        if Run.QUEUED in states:
            return Run.QUEUED
        if Run.FAILED in states:
            return Run.FAILED
        if all(s == Run.SUCCEEDED for s in states):
            return Run.SUCCEEDED
        return Run.CANCELLED


class RunNode(models.Model):
    """One more host of a run over several hosts (``real.nodes`` > 1): node ``rank`` (1..n-1)
    runs on ``host`` with its executor, in ``<run home>/node<rank>``. Node 0 is the run itself
    (``Run.host`` / ``Run.handle``): it hosts the rendezvous and writes the results."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="nodes")
    rank = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=1, help_text="the run's attempt it belongs to")
    rendezvous = models.CharField(max_length=255, help_text="node 0's address:port (c10d)")
    network = models.CharField(
        max_length=128, blank=True, help_text="docker: host, or the Docker network the nodes join"
    )
    host = models.CharField(max_length=128)
    executor = models.CharField(max_length=32, default="local")
    handle = models.CharField(max_length=255, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "attempt", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt", "rank"], name="one_node_per_rank")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} node {self.rank} on {self.host}"

    @property
    def home(self) -> Path:
        return self.run.home.with_name(f"{self.run.home.name}.node{self.rank}")
