from django.contrib import admin

from lab.hosts.models import Gpu, GpuClaim, Host


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ("index", "uuid", "model", "memory_mb", "present", "busy_external", "last_checked")
    readonly_fields = ("uuid", "last_checked")


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("name", "queue", "executor", "cpus", "memory_gb", "last_seen", "active")
    list_filter = ("active", "executor")
    search_fields = ("name", "queue")
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("host", "index", "model", "memory_mb", "uuid", "present", "busy_external")
    list_filter = ("present", "busy_external", "host", "model")
    search_fields = ("uuid", "model", "host__name")


@admin.register(GpuClaim)
class GpuClaimAdmin(admin.ModelAdmin):
    list_display = ("gpu", "run", "claimed_at", "released_at")
    list_filter = ("released_at",)
    raw_id_fields = ("gpu", "run")
    search_fields = ("gpu__uuid", "gpu__host__name")
