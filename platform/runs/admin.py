from django.contrib import admin

from runs.models import Checkpoint, Run


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    extra = 0
    readonly_fields = ["step", "path", "created_at"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "status", "step", "total_steps", "created_at", "lease_owner"]
    list_filter = ["status"]
    search_fields = ["name", "owner__username"]
    readonly_fields = ["lease_owner", "lease_expires", "heartbeat_at", "attempts", "latest_metrics"]
    inlines = [CheckpointInline]
