from django.contrib import admin

from lab.runs.models import Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "experiment",
        "system",
        "workload",
        "seed",
        "state",
        "attempt",
        "started_at",
        "finished_at",
    )
    list_filter = ("state", "system")
    readonly_fields = ("state", "pid", "pid_start_ticks")  # change state through the portal
