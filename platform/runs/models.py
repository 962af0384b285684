"""Runs: their lifecycle, lease and the recording of their steps (the rows are in runs.records).

Lifecycle of a run: queued → running → succeeded | failed | cancelled; a queued run cancelled before a
worker claims it goes straight to cancelled; a failed or cancelled run with a checkpoint can be resumed
(back to queued); a running run whose worker stopped renewing its lease is put back in the queue by the
reaper (``requeue_expired``) and resumes from its last checkpoint. State changes are conditional
UPDATEs, so two processes racing on one run (a worker claiming while the user cancels, a redelivered task)
cannot both win.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q
from django.utils import timezone

from runs import dispatch
from runs.model_exports import ExportStatus, ModelExport
from runs.notifications import Notification, NotificationSettings, run_finished
from runs.records import (
    Checkpoint,
    HardwareSample,
    MetricPoint,
    Sample,
    StepDistribution,
    clean_metrics,
    clean_quantiles,
)
from runs.saved import SavedComparison, SavedView

if TYPE_CHECKING:
    from dapo.config import RunConfig
    from dapo.report import RunInfo, StepReport


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)


class Kind(models.TextChoices):
    TRAINING = "training"
    EVALUATION = "evaluation"
    """No training: n samples per problem of the validation sets, scored once (runs.evaluations)."""


class LeaseLost(Exception):
    """The worker writing for a run no longer holds its lease: another controller owns the run now."""


class RunQuerySet(models.QuerySet["Run"]):
    def visible_to(self, user: Any) -> RunQuerySet:
        """Runs a user may read: ``runs.access.readable`` (their own, those shared with them; a superuser
        all; an anonymous user none). Kept for callers of the old name; the rule lives in runs.access."""
        from runs import access

        return access.readable(self, user)


class Run(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRAINING, db_index=True)
    preset = models.CharField(max_length=64, blank=True)
    group = models.CharField(
        max_length=200,
        blank=True,
        db_index=True,
        help_text="Runs launched together (an ablation ladder, a seed sweep) share it; compared as one.",
    )
    config = models.JSONField(help_text="The full RunConfig.to_dict().")
    base_model = models.ForeignKey("catalog.BaseModel", null=True, blank=True, on_delete=models.SET_NULL)
    dataset = models.ForeignKey("catalog.Dataset", null=True, blank=True, on_delete=models.SET_NULL)
    data_files = models.JSONField(
        default=list,
        blank=True,
        help_text="What the run read, per data file: path, SHA-256, size and catalog dataset version "
        "(catalog.versions.data_record; recorded when queued, again when an attempt starts).",
    )

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    step = models.IntegerField(default=0, help_text="Last completed rollout step.")
    total_steps = models.IntegerField(default=0)
    latest_metrics = models.JSONField(default=dict, blank=True, help_text="The last step's metrics.")
    error = models.TextField(blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="First start.")
    finished_at = models.DateTimeField(null=True, blank=True)
    attempt_started_at = models.DateTimeField(null=True, blank=True, help_text="Start of this attempt.")
    attempt_start_step = models.IntegerField(default=0, help_text="First step of this attempt (for ETA).")
    attempts = models.IntegerField(default=0, help_text="Times a worker claimed the run.")

    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks")
    fork_step = models.IntegerField(null=True, blank=True)
    source_checkpoint = models.CharField(max_length=1024, blank=True, help_text="A fork starts from it.")
    last_checkpoint = models.CharField(max_length=1024, blank=True)
    last_checkpoint_step = models.IntegerField(null=True, blank=True)

    cancel_requested = models.BooleanField(default=False)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_step_at = models.DateTimeField(null=True, blank=True, help_text="When the newest step was recorded.")
    stalled_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Marked stalled (no new step for the owner's stall_minutes); a step clears it.",
    )

    # ---- management and sharing (runs.manage, runs.access) ----
    tags = models.JSONField(default=list, blank=True, help_text="Short labels (runs.manage.clean_tags).")
    notes = models.TextField(blank=True, help_text="Markdown, shown rendered without raw HTML.")
    archived = models.BooleanField(default=False, db_index=True, help_text="Hidden from the default list.")
    resumed_steps = models.JSONField(
        default=list, blank=True, help_text="First step of each attempt that resumed from a checkpoint."
    )
    shared_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="runs_shared_with", help_text="Read-only."
    )
    shared_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="runs_shared_with", help_text="Read-only, every member."
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="run_owner_created")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    # ---- creation and dispatch --------------------------------------------------------------------

    @classmethod
    def create_queued(cls, *, owner: Any, name: str, config: RunConfig, **fields: Any) -> Run:
        """Save a queued run and queue its task on commit (``fields``: preset, base_model, dataset...)."""
        from catalog.versions import data_record  # catalog imports this module: imported when used

        with transaction.atomic():
            run = cls.objects.create(
                owner=owner,
                name=name.strip(),
                config=config.to_dict(),
                total_steps=config.optim.total_steps,
                data_files=data_record(config.to_dict(), read_files=False),
                **fields,
            )
            run.launch()
        return run

    def fork(self, *, owner: Any, name: str, config: RunConfig, checkpoint: Checkpoint) -> Run:
        """A new run that starts from one of this run's checkpoints with an edited config."""
        return Run.create_queued(
            owner=owner,
            name=name,
            config=config,
            preset=self.preset,
            base_model=self.base_model,
            dataset=self.dataset,
            parent=self,
            fork_step=checkpoint.step,
            source_checkpoint=checkpoint.path,
        )

    def launch(self) -> None:
        """Queue the controller task once the current transaction commits (never for a rolled-back row)."""
        dispatch.on_commit("launch_run", self.pk)

    # ---- worker side: lease, start, steps, finish --------------------------------------------------

    def claim(self, worker_id: str) -> bool:
        """Take the lease: a queued run, or a running one whose worker stopped renewing it. Atomic."""
        now = timezone.now()
        claimable = Q(status=Status.QUEUED) | Q(status=Status.RUNNING, lease_expires__lt=now)
        won = Run.objects.filter(claimable, pk=self.pk).update(
            status=Status.RUNNING,
            lease_owner=worker_id,
            lease_expires=now + timedelta(seconds=settings.DAPO_LEASE_SECONDS),
            heartbeat_at=now,
            attempts=F("attempts") + 1,
        )
        self.refresh_from_db()
        return won == 1

    def renew_lease(self, worker_id: str) -> bool:
        """Extend the lease; False when another worker took it over (this one must stop)."""
        now = timezone.now()
        return bool(
            Run.objects.filter(pk=self.pk, lease_owner=worker_id, status=Status.RUNNING).update(
                lease_expires=now + timedelta(seconds=settings.DAPO_LEASE_SECONDS), heartbeat_at=now
            )
        )

    @classmethod
    def requeue_expired(cls) -> list[int]:
        """The reaper: runs still "running" whose lease ran out (their controller died, or hangs) go back
        to the queue, and their task is queued again; a run whose cancel was requested is cancelled
        instead. Returns the ids requeued. Each change is a conditional UPDATE, so reapers in several
        workers never queue one run twice, and a controller that renews its lease in time keeps its run."""
        now = timezone.now()
        expired = Q(status=Status.RUNNING, lease_expires__lt=now)
        released = {"lease_owner": "", "lease_expires": None}
        Run.objects.filter(expired, cancel_requested=True).update(
            status=Status.CANCELLED, finished_at=now, **released
        )
        requeued = []
        for pk in Run.objects.filter(expired).order_by("created_at", "id").values_list("pk", flat=True):
            if Run.objects.filter(expired, pk=pk).update(status=Status.QUEUED, **released):
                dispatch.on_commit("launch_run", pk)
                requeued.append(pk)
        return requeued

    def start(self, info: RunInfo) -> None:
        now = timezone.now()
        self.started_at = self.started_at or now
        self.attempt_started_at = now
        self.attempt_start_step = info.start_step
        self.total_steps = info.total_steps
        self.stalled_at = None  # a new attempt: stall detection counts from its start
        fields = ["started_at", "attempt_started_at", "attempt_start_step", "total_steps", "stalled_at"]
        if info.start_step > (self.fork_step or 0) + 1 and info.start_step not in self.resumed_steps:
            self.resumed_steps = [*self.resumed_steps, info.start_step]  # a marker on the run page's curves
            fields.append("resumed_steps")
        self.save(update_fields=fields)

    def record_step(self, report: StepReport, *, worker_id: str | None = None) -> None:
        """Write a step's metrics, samples and progress in one transaction. A replayed step (a redelivered
        report, or steps recomputed after a resume) overwrites its rows: it never duplicates them.

        With ``worker_id`` the write is fenced by the lease: it raises LeaseLost (and writes nothing) once
        another controller took the run over, so a worker that froze past its lease and wakes up cannot
        overwrite its successor's curves. The fence comes first: on PostgreSQL its row lock orders the
        write against a concurrent takeover."""
        metrics = clean_metrics(report.metrics)
        points = [
            MetricPoint(run_id=self.pk, step=report.step, name=n, value=v, wall_time=report.wall_time)
            for n, v in metrics.items()
        ]
        samples = [Sample.from_record(self.pk, r) for r in [*report.samples, *report.val_samples]]
        quantiles = clean_quantiles(getattr(report, "distributions", None) or {})
        distributions = [
            StepDistribution(run_id=self.pk, step=report.step, name=n, quantiles=q)
            for n, q in quantiles.items()
        ]
        latest = {**self.latest_metrics, **metrics}  # validation metrics stay until the next validation
        with transaction.atomic():
            now = timezone.now()
            if not self._fenced(worker_id).update(
                step=report.step, latest_metrics=latest, last_step_at=now, stalled_at=None
            ):
                raise LeaseLost(f"run {self.pk}: {worker_id} lost the lease before step {report.step}")
            MetricPoint.objects.bulk_create(
                points,
                update_conflicts=True,
                unique_fields=["run", "name", "step"],
                update_fields=["value", "wall_time"],
                batch_size=500,
            )
            Sample.objects.bulk_create(
                samples,
                update_conflicts=True,
                unique_fields=["run", "split", "step", "sample_index"],
                update_fields=Sample.UPDATABLE,
                batch_size=200,
            )
            StepDistribution.objects.bulk_create(
                distributions,
                update_conflicts=True,
                unique_fields=["run", "name", "step"],
                update_fields=["quantiles"],
            )
        self.step, self.latest_metrics, self.last_step_at, self.stalled_at = report.step, latest, now, None

    def record_checkpoint(self, step: int, path: str, *, worker_id: str | None = None) -> None:
        """The run's newest checkpoint (fenced by the lease like ``record_step``)."""
        with transaction.atomic():
            if not self._fenced(worker_id).update(last_checkpoint=path, last_checkpoint_step=step):
                raise LeaseLost(f"run {self.pk}: {worker_id} lost the lease before checkpoint {step}")
            Checkpoint.objects.update_or_create(run=self, step=step, defaults={"path": path})
        self.last_checkpoint, self.last_checkpoint_step = path, step

    def _fenced(self, worker_id: str | None) -> RunQuerySet:
        rows = Run.objects.filter(pk=self.pk)
        return rows.filter(lease_owner=worker_id) if worker_id is not None else rows

    def finish(self, status: str, error: str | None = None, *, worker_id: str | None = None) -> bool:
        """Final status; releases the lease. With ``worker_id``, only while that worker holds the lease (a
        controller that lost its lease must not overwrite its successor). A cancel requested while the run
        went on to succeed still reads as success: the work is complete."""
        if status not in FINAL:
            raise ValueError(f"final status must be one of {', '.join(FINAL)}, got {status!r}")
        rows = Run.objects.filter(pk=self.pk)
        if worker_id is not None:
            rows = rows.filter(lease_owner=worker_id)
        won = rows.update(
            status=status,
            error=(error or "")[:20000],
            finished_at=timezone.now(),
            lease_owner="",
            lease_expires=None,
        )
        if not Run.objects.filter(pk=self.pk).exists():  # deleted meanwhile (runs.manage): stays gone
            return False
        self.refresh_from_db()
        if won:
            run_finished(self)
        return bool(won)

    def cancel_requested_now(self) -> bool:
        """A cheap read of the flag (one indexed row, one column), for polling at step boundaries."""
        return Run.objects.filter(pk=self.pk, cancel_requested=True).exists()

    # ---- user side: cancel, resume, fork ------------------------------------------------------------

    def request_cancel(self) -> str:
        """Cancel: a queued run at once, a running one at its next step boundary (keeping everything).
        Returns the resulting status ("cancelled", "cancelling") or the unchanged final status."""
        now = timezone.now()
        if Run.objects.filter(pk=self.pk, status=Status.QUEUED).update(
            status=Status.CANCELLED, finished_at=now, cancel_requested=True
        ):
            outcome = "cancelled"
        elif Run.objects.filter(pk=self.pk, status=Status.RUNNING).update(cancel_requested=True):
            outcome = "cancelling"
        else:
            outcome = ""
        self.refresh_from_db()
        return outcome or self.status

    @property
    def can_cancel(self) -> bool:
        return self.status in (Status.QUEUED, Status.RUNNING) and not (
            self.status == Status.RUNNING and self.cancel_requested
        )

    @property
    def can_resume(self) -> bool:
        has_start = bool(self.last_checkpoint or self.source_checkpoint)
        return self.status in (Status.FAILED, Status.CANCELLED) and has_start

    def resume(self) -> bool:
        """Queue a failed or cancelled run again; it continues from its last checkpoint."""
        if not self.can_resume:
            return False
        won = Run.objects.filter(pk=self.pk, status__in=[Status.FAILED, Status.CANCELLED]).update(
            status=Status.QUEUED, cancel_requested=False, error="", finished_at=None
        )
        self.refresh_from_db()
        if won:
            self.launch()
        return bool(won)

    def fork_checkpoint(self, step: int | None = None) -> Checkpoint | None:
        """The checkpoint a fork at ``step`` starts from: the latest at or before it (None: the latest)."""
        checkpoints = self.checkpoints.order_by("-step")
        return (checkpoints.filter(step__lte=step) if step is not None else checkpoints).first()

    # ---- derived -------------------------------------------------------------------------------------

    @property
    def is_final(self) -> bool:
        return self.status in FINAL

    @property
    def progress(self) -> float:
        if self.kind == Kind.EVALUATION:  # one step 0: done or not
            return 1.0 if self.status == Status.SUCCEEDED else 0.0
        return min(1.0, self.step / self.total_steps) if self.total_steps else 0.0

    def elapsed_s(self) -> float | None:
        if not self.started_at:
            return None
        return ((self.finished_at or timezone.now()) - self.started_at).total_seconds()

    def eta_s(self) -> float | None:
        """Remaining seconds at this attempt's pace (None before two data points or after the end)."""
        done = self.step - self.attempt_start_step + 1
        if self.status != Status.RUNNING or not self.attempt_started_at or done < 1 or not self.total_steps:
            return None
        pace = (timezone.now() - self.attempt_started_at).total_seconds() / done
        return max(0.0, pace * (self.total_steps - self.step))

    def state(self) -> dict[str, Any]:
        """What pages and events show of the run (JSON-ready)."""
        return {
            "id": self.pk,
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "step": self.step,
            "total_steps": self.total_steps,
            "progress": self.progress,
            "error": self.error,
            "cancel_requested": self.cancel_requested,
            "stalled": self.status == Status.RUNNING and self.stalled_at is not None,
            "can_cancel": self.can_cancel,
            "can_resume": self.can_resume,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "elapsed_s": self.elapsed_s(),
            "eta_s": self.eta_s(),
            "last_checkpoint_step": self.last_checkpoint_step,
            "latest_metrics": self.latest_metrics,
            "tags": list(self.tags or []),
            "archived": self.archived,
            "markers": self.markers(),
        }

    def markers(self) -> list[dict[str, Any]]:
        """Where the curves change hands: the step a fork starts after, and each resume from a checkpoint."""
        out = []
        if self.parent_id is not None and self.fork_step is not None:
            out.append(
                {
                    "step": self.fork_step,
                    "kind": "fork",
                    "label": f"forked from #{self.parent_id} at step {self.fork_step}",
                }
            )
        for step in self.resumed_steps or []:
            out.append({"step": step - 1, "kind": "resume", "label": f"resumed after step {step - 1}"})
        return out


__all__ = [
    "Run",
    "Status",
    "Kind",
    "FINAL",
    "LeaseLost",
    "MetricPoint",
    "Sample",
    "Checkpoint",
    "StepDistribution",
    "HardwareSample",
    "Notification",
    "NotificationSettings",
    "clean_metrics",
    "ModelExport",
    "ExportStatus",
    "SavedView",
    "SavedComparison",
]
