from django.contrib import admin

from lab.catalogue.models import CatalogueEntry, Workload

admin.site.register(CatalogueEntry, list_display=("name", "arena", "role", "active"))
admin.site.register(Workload, list_display=("name", "layers", "total_param_bytes", "active"))
