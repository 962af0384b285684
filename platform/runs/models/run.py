"""Runs: their lifecycle, lease and the recording of their steps (the rows are in runs.models.records).

Lifecycle of a run: queued → running → succeeded | failed | cancelled; a queued run cancelled before a
worker claims it goes straight to cancelled; a failed or cancelled run with a checkpoint can be resumed
(back to queued); a running run whose worker stopped renewing its lease is put back in the queue by the
reaper (``requeue_expired``) and resumes from its last checkpoint. State changes are conditional
UPDATEs, so two processes racing on one run (a worker claiming while the user cancels, a redelivered task)
cannot both win.

Queue: a training run waits in the platform's queue (``dispatched_at`` None) until the scheduler
(runs.scheduling) sends it to Celery; an evaluation is sent at once. A pre-empted run, or one whose Ray
node died, goes back to the queue (``back_to_queue``) and resumes from its checkpoint when dispatched again.

Time: ``elapsed_s`` is wall time from the first start; ``running_s`` adds up each attempt from its claim
to its end (``running_since``, ``run_seconds``), so queued and cancelled time stay out of it and of the ETA.

The module is longer than 400 lines because the lifecycle's conditional updates (claim, lease, steps,
finish, cancel, resume, back to the queue, running time) belong to one model and read best side by side.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import F, Q
from django.utils import timezone

from runs import dispatch
from runs.models.quotas import reserve
from runs.models.records import Checkpoint, StepRows
from runs.models.states import FINAL, Kind, LeaseLost, RunGone, Source, Status
from runs.signals import run_finished
from runs.step_values import clean_metrics

if TYPE_CHECKING:
    from dapo.loop.report import RunInfo, StepReport
    from dapo.runconfig import RunConfig


def request_record(config: RunConfig) -> dict[str, Any]:
    """``Run.request``: what ``config`` asks for (``dapo.cluster.resources``) and the pool it waits in."""
    from dapo.cluster.resources import request_for

    return {**request_for(config).to_dict(), "pool": config.execution.backend}


class RunQuerySet(models.QuerySet["Run"]):
    def free_group(self, user: Any, name: str) -> str:
        """``name``, or ``name (2)``, ``name (3)``...: a ladder or a sweep never joins an older group of the
        same name."""
        taken = set(self.filter(owner=user, group__startswith=name).values_list("group", flat=True))
        group, k = name, 1
        while group in taken:
            k += 1
            group = f"{name} ({k})"
        return group

    def active_of(self, user: Any) -> RunQuerySet:
        """The user's queued and running runs: what their quota counts (runs.models.quotas)."""
        return self.filter(owner_id=user.pk, status__in=[Status.QUEUED, Status.RUNNING])


class Run(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRAINING, db_index=True)
    source = models.CharField(
        max_length=16,
        choices=Source.choices,
        default=Source.PLATFORM,
        blank=True,
        help_text='Who trained it: "" this platform, or "trl" / "verl" for an external run (runs.external).',
    )
    preset = models.CharField(max_length=64, blank=True)
    group = models.CharField(
        max_length=200,
        blank=True,
        db_index=True,
        help_text="Runs launched together (an ablation ladder, a seed sweep) share it; compared as one.",
    )
    config = models.JSONField(
        help_text="The full RunConfig.to_dict(); an external run's own trainer config, stored as it came."
    )
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
    last_active_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Last sign of life of this attempt: its start, a step, a phase (generation, validation).",
    )
    running_since = models.DateTimeField(null=True, blank=True, help_text="Claimed by a worker at (running).")
    run_seconds = models.FloatField(default=0.0, help_text="Seconds spent running in attempts that ended.")
    stalled_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Marked stalled (no new step for the owner's stall_minutes); a step clears it.",
    )

    # ---- the platform's queue (runs.scheduling) ----
    priority = models.IntegerField(
        default=0,
        db_index=True,
        validators=[MinValueValidator(-100), MaxValueValidator(100)],
        help_text="Higher first in the queue (-100..100); staff set it.",
    )
    request = models.JSONField(
        default=dict,
        blank=True,
        help_text='What it asks for (dapo.cluster.resources.request_for(...).to_dict()) and its "pool": '
        "local or ray; computed when queued.",
    )
    queued_at = models.DateTimeField(
        default=timezone.now, help_text="When it entered the queue this time (launch, resume, pre-emption)."
    )
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="Sent to a worker at; empty while it waits in the platform's queue."
    )
    preempt_requested = models.BooleanField(
        default=False, help_text="Staff asked it to give its room back: it checkpoints and is queued again."
    )
    preempted_by = models.CharField(max_length=150, blank=True, help_text="Who asked for the pre-emption.")
    preemptions = models.IntegerField(default=0, help_text="Times it was pre-empted back to the queue.")
    node_losses = models.IntegerField(
        default=0, help_text="Times a lost Ray node sent it back to the queue (DAPO_NODE_LOSS_REQUEUES)."
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
    def reserve_for(cls, owner: Any, *, runs: int, steps: int) -> None:
        """Hold ``owner``'s quota for ``runs`` runs of ``steps`` steps in all, inside the caller's
        transaction: ``QuotaExceeded`` past a cap (runs.models.quotas)."""
        reserve(owner, cls.objects.active_of(owner), runs=runs, steps=steps)

    @classmethod
    def create_queued(cls, *, owner: Any, name: str, config: RunConfig, **fields: Any) -> Run:
        """Save a queued run and queue its task on commit (``fields``: preset, base_model, dataset...;
        ``total_steps`` when it is not ``optim.total_steps``). Past the owner's quota: ``QuotaExceeded``
        (runs.models.quotas) and nothing is saved."""
        from catalog.versions import data_record  # catalog imports this module: imported when used

        total_steps = fields.pop("total_steps", config.optim.total_steps)
        with transaction.atomic():
            if fields.get("parent") is not None:  # a fork or an evaluation: its parent must still exist
                cls.lock(fields["parent"].pk)
            evaluation = fields.get("kind") == Kind.EVALUATION
            reserve(
                owner, cls.objects.active_of(owner), runs=1, steps=total_steps, waiting=0 if evaluation else 1
            )
            run = cls.objects.create(
                owner=owner,
                name=name.strip(),
                config=config.to_dict(),
                total_steps=total_steps,
                request=request_record(config),
                dispatched_at=timezone.now() if evaluation else None,
                data_files=data_record(config.to_dict(), read_files=False, picked=fields.get("dataset")),
                **fields,
            )
            run.launch()
        return run

    def fork(self, *, owner: Any, name: str, config: RunConfig, checkpoint: Checkpoint) -> Run:
        """A new run that starts from one of this run's checkpoints with an edited config (it keeps this
        run's dataset version while it reads that version's files)."""
        data = {"data.train_path": config.data.train_path, "data.val_path": config.data.val_path}
        same_data = self.dataset is not None and not self.dataset.disagreements(data)
        return Run.create_queued(
            owner=owner,
            name=name,
            config=config,
            preset=self.preset,
            base_model=self.base_model,
            dataset=self.dataset if same_data else None,
            parent=self,
            fork_step=checkpoint.step,
            source_checkpoint=checkpoint.path,
        )

    @classmethod
    def lock(cls, pk: int) -> None:
        """Hold the run's row until the transaction ends (PostgreSQL: a concurrent delete waits for it;
        SQLite's IMMEDIATE transactions are serialised anyway); ``RunGone`` if it was deleted meanwhile."""
        if not cls.objects.select_for_update().filter(pk=pk).values_list("pk", flat=True):
            raise RunGone(pk)

    def reload(self) -> None:
        """``refresh_from_db``, or ``RunGone`` when the row was deleted meanwhile."""
        try:
            self.refresh_from_db()
        except Run.DoesNotExist:
            raise RunGone(self.pk) from None

    def launch(self) -> None:
        """Once the current transaction commits (never for a rolled-back row): an evaluation's task is
        queued on the short queue; a training run is offered to the scheduler (runs.scheduling), which
        sends it when it fits."""
        if self.kind == Kind.EVALUATION:
            dispatch.on_commit("launch_run", self.pk, evaluation=True)
        else:
            dispatch.schedule_on_commit()

    # ---- worker side: lease, start, steps, finish --------------------------------------------------

    def claim(self, worker_id: str) -> bool:
        """Take the lease: a queued run, or a running one whose worker stopped renewing it. Atomic."""
        now = timezone.now()
        claimable = Q(status=Status.QUEUED) | Q(status=Status.RUNNING, lease_expires__lt=now)
        if Run.objects.filter(pk=self.pk, status=Status.RUNNING, lease_expires__lt=now).exists():
            self._close_running(None)  # a takeover: the dead controller ran until its last heartbeat
        won = Run.objects.filter(claimable, pk=self.pk).update(
            status=Status.RUNNING,
            lease_owner=worker_id,
            lease_expires=now + timedelta(seconds=settings.DAPO_LEASE_SECONDS),
            heartbeat_at=now,
            attempts=F("attempts") + 1,
        )
        if won:  # the attempt's running time counts from here
            Run.objects.filter(pk=self.pk, lease_owner=worker_id).update(running_since=now)
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
        for pk, kind in Run.objects.filter(expired).order_by("created_at", "id").values_list("pk", "kind"):
            evaluation = kind == Kind.EVALUATION
            # a pre-emption asked of a controller that died is done: it gave its room back
            back = {
                "dispatched_at": now if evaluation else None,
                "queued_at": now,
                "preempt_requested": False,
            }
            if Run.objects.filter(expired, pk=pk).update(status=Status.QUEUED, **released, **back):
                Run(pk=pk)._close_running(None)
                if evaluation:
                    dispatch.on_commit("launch_run", pk, evaluation=True)
                requeued.append(pk)
        if requeued:
            dispatch.schedule_on_commit()
        return requeued

    def back_to_queue(self, worker_id: str, *, node_lost: bool = False) -> bool:
        """This worker's attempt ends and the run waits in the queue again, as a new submission (the room
        it freed goes to the runs that waited): a pre-emption (``preempt_requested``) or a lost Ray node.
        Its lease is released and the attempt's running time closed; it resumes from its checkpoint when
        the scheduler sends it again. False when this worker no longer holds the lease."""
        counter = "node_losses" if node_lost else "preemptions"
        rows = Run.objects.filter(pk=self.pk, lease_owner=worker_id, status=Status.RUNNING)
        if rows.exists():
            self._close_running(timezone.now())
        won = rows.update(
            status=Status.QUEUED,
            lease_owner="",
            lease_expires=None,
            dispatched_at=None,
            queued_at=timezone.now(),
            preempt_requested=False,
            **{counter: F(counter) + 1},
        )
        self.reload()
        if won:
            dispatch.schedule_on_commit()
        return bool(won)

    def request_preempt(self, by: str) -> bool:
        """Ask a running training run to give its room back (staff: runs.scheduling_api); its worker sees
        it at the next step boundary. False when it is not running."""
        won = Run.objects.filter(pk=self.pk, status=Status.RUNNING, kind=Kind.TRAINING).update(
            preempt_requested=True, preempted_by=by[:150]
        )
        self.reload()
        return bool(won)

    def start(self, info: RunInfo) -> None:
        now = timezone.now()
        self.started_at = self.started_at or now
        self.attempt_started_at = now
        self.attempt_start_step = info.start_step
        self.total_steps = info.total_steps
        self.stalled_at = None  # a new attempt: stall detection counts from its start
        self.last_active_at = now
        fields = ["started_at", "attempt_started_at", "attempt_start_step", "total_steps", "stalled_at"]
        fields.append("last_active_at")
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
        rows = StepRows.of(self.pk, report, metrics)
        latest = {**self.latest_metrics, **metrics}  # validation metrics stay until the next validation
        with transaction.atomic():
            now = timezone.now()
            if not self._fenced(worker_id).update(
                step=report.step, latest_metrics=latest, last_step_at=now, last_active_at=now, stalled_at=None
            ):
                raise LeaseLost(f"run {self.pk}: {worker_id} lost the lease before step {report.step}")
            rows.write()
        self.step, self.latest_metrics, self.last_step_at, self.stalled_at = report.step, latest, now, None
        self.last_active_at = now

    def record_activity(self, *, worker_id: str | None = None) -> bool:
        """A sign of life between steps (a generation round, a validation starting): the stall clock
        (notifications.delivery.detect_stalls) counts from it. Fenced by the lease; False once lost."""
        now = timezone.now()
        if (
            not self._fenced(worker_id)
            .filter(status=Status.RUNNING)
            .update(last_active_at=now, stalled_at=None)
        ):
            return False
        self.last_active_at, self.stalled_at = now, None
        return True

    def _close_running(self, end: Any) -> None:
        """An attempt ended (or its worker died): add its running time to ``run_seconds``. ``end``: now, or
        None for the last heartbeat (a dead worker's last sign of life)."""
        row = Run.objects.filter(pk=self.pk).values("running_since", "heartbeat_at").first()
        if row is None or row["running_since"] is None:
            return
        end = end or row["heartbeat_at"] or row["running_since"]
        seconds = max(0.0, (end - row["running_since"]).total_seconds())
        Run.objects.filter(pk=self.pk, running_since=row["running_since"]).update(
            run_seconds=F("run_seconds") + seconds, running_since=None
        )

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
        if rows.exists():
            self._close_running(timezone.now())
        won = rows.update(
            status=status,
            error=(error or "")[:20000],
            finished_at=timezone.now(),
            lease_owner="",
            lease_expires=None,
            preempt_requested=False,
        )
        if not Run.objects.filter(pk=self.pk).exists():  # deleted meanwhile (runs.manage): stays gone
            return False
        self.refresh_from_db()
        if won:
            run_finished.send(sender=Run, run=self)  # notifications (NotificationsConfig.ready) listen
            dispatch.schedule_on_commit()  # the room it held goes to the queue
        return bool(won)

    def cancel_requested_now(self) -> bool:
        """A cheap read of the flag (one indexed row, one column), for polling at step boundaries."""
        return Run.objects.filter(pk=self.pk, cancel_requested=True).exists()

    # ---- user side: cancel, resume, fork ------------------------------------------------------------

    def request_cancel(self) -> str:
        """Cancel: a queued run at once, a running one at its next step boundary (keeping everything).
        Returns the resulting status ("cancelled", "cancelling") or the unchanged final status. An external
        run is not ours to stop: its status is returned unchanged."""
        if self.is_external:
            return self.status
        now = timezone.now()
        if Run.objects.filter(pk=self.pk, status=Status.QUEUED).update(
            status=Status.CANCELLED, finished_at=now, cancel_requested=True
        ):
            outcome = "cancelled"
            dispatch.schedule_on_commit()  # one sent to a worker but not started yet held a slot
        elif Run.objects.filter(pk=self.pk, status=Status.RUNNING).update(cancel_requested=True):
            outcome = "cancelling"
        else:
            outcome = ""
        self.reload()
        return outcome or self.status

    @property
    def is_external(self) -> bool:
        """Trained by TRL or verl elsewhere: no cancel, fork, export nor resume here (runs.external)."""
        return self.kind == Kind.EXTERNAL

    @property
    def source_label(self) -> str:
        """ "TRL", "verl", or "" for a run of this platform: the pages' "not recorded by TRL"."""
        return Source(self.source).label if self.source else ""

    @property
    def can_cancel(self) -> bool:
        if self.is_external:
            return False
        return self.status in (Status.QUEUED, Status.RUNNING) and not (
            self.status == Status.RUNNING and self.cancel_requested
        )

    @property
    def can_resume(self) -> bool:
        if self.is_external:
            return False
        has_start = bool(self.last_checkpoint or self.source_checkpoint)
        return self.status in (Status.FAILED, Status.CANCELLED) and has_start

    def resume(self) -> bool:
        """Queue a failed or cancelled run again; it continues from its last checkpoint. Past its owner's
        quota: ``QuotaExceeded`` (runs.models.quotas), and it stays as it was."""
        if not self.can_resume:
            return False
        evaluation = self.kind == Kind.EVALUATION
        with transaction.atomic():
            reserve(
                self.owner,
                Run.objects.active_of(self.owner),
                runs=1,
                steps=self.total_steps,
                waiting=0 if evaluation else 1,
            )
            won = Run.objects.filter(pk=self.pk, status__in=[Status.FAILED, Status.CANCELLED]).update(
                status=Status.QUEUED,
                cancel_requested=False,
                error="",
                finished_at=None,
                queued_at=timezone.now(),
                dispatched_at=timezone.now() if evaluation else None,
                request=self._request_now(),
            )
        self.reload()
        if won:
            self.launch()
        return bool(won)

    def _request_now(self) -> dict[str, Any]:
        """What the run asks for, from its config again (a resume); its stored one when the config no
        longer reads (a run queued by an older version)."""
        from dapo.runconfig import ConfigError, RunConfig

        try:
            return request_record(RunConfig.from_dict(self.config))
        except (ConfigError, ValueError, TypeError):
            return self.request

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
        """Wall time from the first start to the end (or now): queued and cancelled time included."""
        if not self.started_at:
            return None
        return ((self.finished_at or timezone.now()) - self.started_at).total_seconds()

    def running_s(self) -> float | None:
        """Time spent running: every attempt from its claim by a worker to its end, queued and cancelled
        time left out (None before the first start)."""
        if not self.started_at and not self.running_since and not self.run_seconds:
            return None
        live = (timezone.now() - self.running_since).total_seconds() if self.running_since else 0.0
        return self.run_seconds + max(0.0, live)

    def eta_s(self) -> float | None:
        """Remaining seconds at the pace of the running time so far: seconds running per step done (None
        before the first step of a running run, or after the end)."""
        done = self.step - (self.fork_step or 0)
        running = self.running_s()
        if self.status != Status.RUNNING or not running or done < 1 or not self.total_steps:
            return None
        return max(0.0, running / done * (self.total_steps - self.step))
