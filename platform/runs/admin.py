from django.contrib import admin

from runs.models import Checkpoint, ClusterCapacity, Run, RunQuota


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


@admin.register(RunQuota)
class RunQuotaAdmin(admin.ModelAdmin):
    """Per-user caps on queued and running runs and their steps (runs.models.quotas); the site's defaults are
    DAPO_QUOTA_RUNS and DAPO_QUOTA_STEPS. A superuser with a row here is capped like anyone."""

    list_display = ["user", "max_runs", "max_steps"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]


@admin.register(ClusterCapacity)
class ClusterCapacityAdmin(admin.ModelAdmin):
    """What the training workers last saw of the machine or Ray cluster (runs.models.capacity); a row
    deleted here is recorded again at the next run's start."""

    list_display = ["kind", "__str__", "seen_by", "seen_at"]
    readonly_fields = ["kind", "nodes", "seen_at", "seen_by"]
