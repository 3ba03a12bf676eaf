from django.contrib import admin

from lab.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "prefix", "created_at", "last_used_at")
    readonly_fields = ("key_digest", "prefix")
