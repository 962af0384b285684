from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from runs import dispatch
from runs.events import publish, status_event
from runs.models import Checkpoint, ClusterCapacity, Run, RunQuota
from runs.scheduling_api import preempt_refusal


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    extra = 0
    readonly_fields = ["step", "path", "created_at"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    """Runs; ``priority`` is edited in the list (higher first in the queue: runs.scheduling), and the
    "Pre-empt" action sends running runs back to the queue from a checkpoint (runs.scheduling_api)."""

    list_display = [
        "id",
        "name",
        "owner",
        "status",
        "priority",
        "step",
        "total_steps",
        "created_at",
        "lease_owner",
    ]
    list_editable = ["priority"]
    list_filter = ["status"]
    search_fields = ["name", "owner__username"]
    readonly_fields = [
        "lease_owner",
        "lease_expires",
        "heartbeat_at",
        "attempts",
        "latest_metrics",
        "request",
        "queued_at",
        "dispatched_at",
        "preempt_requested",
        "preempted_by",
        "preemptions",
        "node_losses",
    ]
    inlines = [CheckpointInline]
    actions = ["preempt"]

    def save_model(self, request: HttpRequest, obj: Run, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and "priority" in form.changed_data:
            dispatch.schedule_on_commit()

    @admin.action(description="Pre-empt: checkpoint and go back to the queue")
    def preempt(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        done, refused = [], []
        for run in queryset:
            why = preempt_refusal(run)
            if why or not run.request_preempt(request.user.get_username()):
                refused.append(why or f"run #{run.pk} ended meanwhile")
                continue
            publish(run.pk, status_event(run))
            done.append(f"#{run.pk}")
        if done:
            messages.success(request, f"Pre-empting {', '.join(done)} at the next step boundary.")
        for why in refused:
            messages.warning(request, f"Not pre-empted: {why}.")


@admin.register(RunQuota)
class RunQuotaAdmin(admin.ModelAdmin):
    """Per-user caps on queued and running runs and their steps, and on what they hold of the cluster at once
    (runs.models.quotas); the site's defaults are DAPO_QUOTA_RUNS, DAPO_QUOTA_STEPS, DAPO_QUOTA_RUNNING,
    DAPO_QUOTA_GPUS and DAPO_QUOTA_QUEUED. A superuser with a row here is capped like anyone."""

    list_display = ["user", "max_runs", "max_steps", "max_running", "max_gpus", "max_queued"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]


@admin.register(ClusterCapacity)
class ClusterCapacityAdmin(admin.ModelAdmin):
    """What the training workers last saw of the machine or Ray cluster (runs.models.capacity); a row
    deleted here is recorded again at the next run's start."""

    list_display = ["kind", "__str__", "seen_by", "seen_at"]
    readonly_fields = ["kind", "nodes", "state", "seen_at", "seen_by"]
