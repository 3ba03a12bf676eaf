from django.contrib import admin

from lab.results.models import Artifact, Measurement

admin.site.register(Measurement, list_display=("run", "metric", "value", "unit"))
admin.site.register(Artifact, list_display=("run", "kind", "path"))
