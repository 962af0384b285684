"""The platform sink: what the trainer reports goes to the database, then to the run's channel group.

Order per step: (1) the rows (metric points, samples, progress) in one transaction, fenced by the lease
and retried while the database is briefly unavailable; (2) the lease renewed; (3) a live event published.
The database is written first so a browser that reconnects after missing an event catches up from it.

A pre-empted run (staff: runs.scheduling_api) and a run whose Ray node died do not finish: ``on_finish``
puts them back in the platform's queue (``Run.back_to_queue``) and they resume from their checkpoint when
the scheduler sends them again; a run that lost nodes more than ``DAPO_NODE_LOSS_REQUEUES`` times fails.

A checkpoint is recorded only once the report of its step is in the database. The trainer saves a step's
checkpoint before it reports the step, and a run resumes from its recorded checkpoint: recorded any
earlier, a worker dying between the two would leave that step out of the curves for good.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from runs.events import Publisher, hardware_event, status_event, step_event
from runs.models import HardwareSample, LeaseLost, Run

from dapo.cluster import backends
from dapo.loop.report import HardwareSample as HardwareRecord
from dapo.loop.report import RunInfo, Sink, Status, StepReport
from worker.run_log import duration, say, step_line, validation_line

log = logging.getLogger(__name__)
T = TypeVar("T")

DB_ERRORS = (OperationalError, InterfaceError)
"""What a database that is away looks like: refused or dropped connections, a lock held too long."""
DB_RETRY_FIRST_DELAY_S = 0.5
DB_RETRY_MAX_DELAY_S = 8.0
STOP_POLL_INTERVAL_S = 0.5
PUBLISHER = Publisher()  # one event loop (and Redis connection) for the worker process


def drop_connection() -> None:
    """Reconnect on the next query. A broken connection must be closed before a retry; inside an atomic
    block closing would break the caller's transaction, so there the caller's block fails instead."""
    if connection.in_atomic_block:
        return
    try:
        connection.close()
    except DB_ERRORS:  # closing a connection the server already dropped
        log.debug("closing a broken database connection failed", exc_info=True)


def with_db_retry(fn: Callable[[], T], what: str) -> T:
    """Run ``fn``; on a database error, close the connection and retry with backoff (0.5 s doubling up to
    8 s) for up to ``settings.DAPO_DB_RETRY_S``; after that the error propagates."""
    deadline = time.monotonic() + settings.DAPO_DB_RETRY_S
    delay = DB_RETRY_FIRST_DELAY_S
    while True:
        try:
            return fn()
        except DB_ERRORS as e:
            if time.monotonic() + delay > deadline:
                log.error("database still unavailable while %s; giving up: %s", what, e)
                raise
            log.warning("database error while %s (%s); retrying in %.1f s", what, e, delay)
            drop_connection()
            time.sleep(delay)
            delay = min(2 * delay, DB_RETRY_MAX_DELAY_S)


class PlatformSink(Sink):
    def __init__(self, run: Run, worker_id: str) -> None:
        self.run = run
        self.worker_id = worker_id
        self.lease_lost = False
        self._stop = False
        self._polled_at = 0.0
        # Every step up to here is in the database: the run's progress, or the step a fork starts after.
        self._written = max(run.step, run.fork_step or 0)
        self._pending: tuple[int, str] | None = None  # a checkpoint whose step is not written yet

    def on_start(self, info: RunInfo) -> None:
        with_db_retry(lambda: self.run.start(info), "recording the start")
        run, steps = self.run, f"steps {info.start_step}-{info.total_steps}"
        if run.kind == "evaluation":
            say(f"start: evaluation, attempt {run.attempts}")
        elif info.start_step > (run.fork_step or 0) + 1:
            say(f"resume: attempt {run.attempts}, from the checkpoint of step {info.start_step - 1}; {steps}")
        elif run.fork_step:
            say(f"start: a fork of run {run.parent_id} after its step {run.fork_step}; {steps}")
        else:
            say(f"start: attempt {run.attempts}, {steps}, {info.num_train_problems} training problems")
        PUBLISHER.publish(self.run.pk, status_event(self.run))

    def on_activity(self, what: str) -> None:
        """A sign of life (the stall clock restarts: notifications.delivery.detect_stalls) and a log line.
        One try: a missed sign is not worth holding the trainer. From the off-policy generation thread
        too, whose database connection is closed after each write."""
        say(what)
        if self.lease_lost:
            return
        try:
            self.run.record_activity(worker_id=self.worker_id)
        except DB_ERRORS as e:
            log.warning("run %s: sign of life not recorded: %s", self.run.pk, e)
        finally:
            if threading.current_thread() is not threading.main_thread():
                drop_connection()

    def on_step(self, report: StepReport) -> None:
        try:
            with_db_retry(
                lambda: self.run.record_step(report, worker_id=self.worker_id), f"writing step {report.step}"
            )
        except LeaseLost as e:
            return self._lose_lease(e)
        self._written = max(self._written, report.step)
        if report.step > 0 or report.samples:
            say(step_line(report.step, self.run.total_steps, report.metrics))
        if line := validation_line(report.step, report.metrics):
            say(line)
        self._record_pending_checkpoint()
        if not with_db_retry(lambda: self.run.renew_lease(self.worker_id), "renewing the lease"):
            self.lease_lost = True
        samples = report.samples or report.val_samples
        event = step_event(self.run, report.step, report.metrics, samples, report.distributions)
        PUBLISHER.publish(self.run.pk, event)

    def on_hardware(self, samples: list[HardwareRecord]) -> None:
        """From the hardware monitor's thread: the samples, written while this worker holds the lease (one
        try: a sample lost to a database hiccup is not worth holding the monitor), then published. The
        thread's database connection is closed after each write."""
        if self.lease_lost or not samples:
            return
        rows = [HardwareSample.from_record(self.run.pk, s) for s in samples]
        try:
            if not Run.objects.filter(pk=self.run.pk, lease_owner=self.worker_id).exists():
                return
            HardwareSample.objects.bulk_create(rows)
        except DB_ERRORS as e:
            log.warning("run %s: %d hardware samples not written: %s", self.run.pk, len(rows), e)
            return
        finally:
            drop_connection()
        PUBLISHER.publish(self.run.pk, hardware_event(rows))

    def on_checkpoint(self, step: int, path: str) -> None:
        self._pending = (step, path)
        self._record_pending_checkpoint()

    def _record_pending_checkpoint(self) -> None:
        if self._pending is None or self._pending[0] > self._written:
            return
        step, path = self._pending
        self._pending = None
        try:
            with_db_retry(
                lambda: self.run.record_checkpoint(step, path, worker_id=self.worker_id),
                f"recording checkpoint {step}",
            )
        except LeaseLost as e:
            return self._lose_lease(e)
        say(f"checkpoint of step {step} recorded: {path}")
        PUBLISHER.publish(self.run.pk, status_event(self.run))

    def may_save_checkpoint(self) -> bool:
        """Only while this worker holds the lease: a controller that was frozen past it and woke after a
        takeover must not write checkpoint files (the new owner's pruning and resume read that folder).
        Asks the database (a checkpoint is rare); when it cannot answer, the save goes ahead, as a step's
        progress is worth more than the small chance of a takeover during an outage."""
        if self.lease_lost:
            return False
        try:
            owner = Run.objects.filter(pk=self.run.pk).values_list("lease_owner", flat=True).first()
        except DB_ERRORS:
            drop_connection()
            return True
        if owner != self.worker_id:
            self.lease_lost = True
        return not self.lease_lost

    def _lose_lease(self, error: LeaseLost) -> None:
        """Another controller owns the run: write nothing more; the trainer stops at the step boundary."""
        log.warning("%s; this controller stops", error)
        self.lease_lost = True

    def on_finish(self, status: Status, error: str | None = None) -> None:
        if status == "cancelled" and self._preempted():
            return self._back_to_queue(node_lost=False)
        if status == "failed" and node_lost(error):
            losses = self.run.node_losses
            if losses < settings.DAPO_NODE_LOSS_REQUEUES:
                return self._back_to_queue(
                    node_lost=True, detail=(error or "").strip().splitlines()[-1][:300]
                )
            error = (
                f"{error}\nThe run lost a Ray node {losses + 1} times; it went back to the queue "
                f"{losses} times, "
                f"the most DAPO_NODE_LOSS_REQUEUES={settings.DAPO_NODE_LOSS_REQUEUES} allows. Resume it "
                "once the cluster is healthy: it continues from its last checkpoint."
            )
        if with_db_retry(lambda: self.run.finish(status, error, worker_id=self.worker_id), "finishing"):
            run = self.run
            at = f"at step {run.step}/{run.total_steps}" if run.total_steps else f"at step {run.step}"
            times = f"running {duration(run.running_s())}, wall {duration(run.elapsed_s())}"
            reason = (
                f": {(error or 'no reason given').strip().splitlines()[-1]}" if status == "failed" else ""
            )
            say(f"{status} {at} ({times}){reason}")
            PUBLISHER.publish(self.run.pk, status_event(self.run))
        else:
            log.warning(
                "run %s: lease lost before finishing; leaving the status to its new owner", self.run.pk
            )

    def _preempted(self) -> bool:
        """Staff asked this run to give its room back (and nobody asked to cancel it)."""
        row = with_db_retry(
            lambda: (
                Run.objects.filter(pk=self.run.pk).values("preempt_requested", "cancel_requested").first()
            ),
            "reading the pre-emption",
        )
        return row is not None and row["preempt_requested"] and not row["cancel_requested"]

    def _back_to_queue(self, *, node_lost: bool, detail: str = "") -> None:
        """End this attempt without finishing: the run waits in the queue again (Run.back_to_queue), and
        the scheduler runs a pass at once, so the room it freed goes to the runs that waited."""
        run = self.run
        by = Run.objects.filter(pk=run.pk).values_list("preempted_by", flat=True).first() or "staff"
        if not with_db_retry(lambda: run.back_to_queue(self.worker_id, node_lost=node_lost), "requeueing"):
            log.warning("run %s: lease lost before going back to the queue", run.pk)
            return
        if node_lost:
            limit = settings.DAPO_NODE_LOSS_REQUEUES
            say(
                f"a Ray node was lost at step {run.step} ({detail}); back in the queue "
                f"({run.node_losses} of {limit})"
            )
        else:
            say(f"pre-empted by {by} at step {run.step}; back in the queue")
        PUBLISHER.publish(run.pk, status_event(run))

    def should_stop(self) -> bool:
        """True once the user asked to cancel, staff asked to pre-empt, or another worker took the lease
        over. Polled by the trainer at each step boundary; reads one row at most every
        STOP_POLL_INTERVAL_S."""
        if self._stop or self.lease_lost:
            return True
        now = time.monotonic()
        if now - self._polled_at >= STOP_POLL_INTERVAL_S:
            self._polled_at = now
            try:
                row = (
                    Run.objects.filter(pk=self.run.pk)
                    .values_list("cancel_requested", "preempt_requested", "lease_owner")
                    .first()
                )
            except DB_ERRORS:  # the database is away for a moment: keep training, ask again later
                drop_connection()
                return False
            self._stop = row is None or row[0] or row[1] or row[2] != self.worker_id
        return self._stop


def node_lost(error: str | None) -> bool:
    """Whether a run failed because a Ray node died under it (``dapo.cluster.backends.is_node_loss``)."""
    return backends.is_node_loss(error)
