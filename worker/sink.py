"""The platform sink: what the trainer reports goes to the database, then to the run's channel group.

Order per step: (1) the rows (metric points, samples, progress) in one transaction, retried if the
database is briefly unavailable; (2) the lease renewed; (3) a live event published. The database is
written first so a browser that reconnects after missing an event catches up from it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection
from runs.events import Publisher, status_event, step_event
from runs.models import Run

from dapo.report import RunInfo, Sink, Status, StepReport

log = logging.getLogger(__name__)
T = TypeVar("T")

DB_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)
STOP_POLL_INTERVAL_S = 0.5
PUBLISHER = Publisher()  # one event loop (and Redis connection) for the worker process


def _drop_connection() -> None:
    """Reconnect on the next query (not inside an atomic block: that would break the transaction)."""
    if not connection.in_atomic_block:
        connection.close()


def with_db_retry(fn: Callable[[], T], what: str) -> T:
    """Run ``fn``; on a database error, reconnect and retry with backoff (about 15 s in all)."""
    for delay in DB_RETRY_DELAYS_S:
        try:
            return fn()
        except OperationalError:
            log.warning("database error while %s; retrying in %.1f s", what, delay, exc_info=True)
            _drop_connection()
            time.sleep(delay)
    return fn()


class PlatformSink(Sink):
    def __init__(self, run: Run, worker_id: str) -> None:
        self.run = run
        self.worker_id = worker_id
        self.lease_lost = False
        self._stop = False
        self._polled_at = 0.0

    def on_start(self, info: RunInfo) -> None:
        with_db_retry(lambda: self.run.start(info), "recording the start")
        PUBLISHER.publish(self.run.pk, status_event(self.run))

    def on_step(self, report: StepReport) -> None:
        with_db_retry(lambda: self.run.record_step(report), f"writing step {report.step}")
        if not with_db_retry(lambda: self.run.renew_lease(self.worker_id), "renewing the lease"):
            self.lease_lost = True
        samples = report.samples or report.val_samples
        PUBLISHER.publish(self.run.pk, step_event(self.run, report.step, report.metrics, samples))

    def on_checkpoint(self, step: int, path: str) -> None:
        with_db_retry(lambda: self.run.record_checkpoint(step, path), f"recording checkpoint {step}")
        PUBLISHER.publish(self.run.pk, status_event(self.run))

    def on_finish(self, status: Status, error: str | None = None) -> None:
        if with_db_retry(lambda: self.run.finish(status, error, worker_id=self.worker_id), "finishing"):
            PUBLISHER.publish(self.run.pk, status_event(self.run))
        else:
            log.warning(
                "run %s: lease lost before finishing; leaving the status to its new owner", self.run.pk
            )

    def should_stop(self) -> bool:
        """True once the user asked to cancel, or another worker took the lease over. Polled by the
        trainer at each step boundary; reads one row at most every STOP_POLL_INTERVAL_S."""
        if self._stop or self.lease_lost:
            return True
        now = time.monotonic()
        if now - self._polled_at >= STOP_POLL_INTERVAL_S:
            self._polled_at = now
            try:
                row = (
                    Run.objects.filter(pk=self.run.pk).values_list("cancel_requested", "lease_owner").first()
                )
            except OperationalError:  # the database is away for a moment: keep training, ask again later
                _drop_connection()
                return False
            self._stop = row is None or row[0] or row[1] != self.worker_id
        return self._stop
