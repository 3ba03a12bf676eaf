from django.contrib import admin

from lab.experiments.models import Experiment


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "system", "mode", "owner", "created_at")
    list_filter = ("system", "mode")
    search_fields = ("name", "description")
