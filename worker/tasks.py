"""Celery tasks: take a run id, reload the run from the database, and act on it.

``launch_run`` is the controller of one run: it claims the run's lease (so a redelivered or duplicated
message never starts a second controller), builds the RunConfig from the row, and calls the trainer
(``settings.DAPO_RUNNER``, default ``dapo.runner:run``) with a :class:`~worker.sink.PlatformSink`. A
heartbeat thread keeps the lease while a long step runs; when a worker dies its lease expires and the
run is claimed again, resuming from its last checkpoint.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from catalog.paths import resolve
from celery import Task
from celery.signals import worker_ready
from config.celery import app
from django.conf import settings
from django.db import connection
from django.utils import timezone
from runs.models import Run, Status

from dapo.config import RunConfig
from worker.sink import PlatformSink

log = logging.getLogger(__name__)


def run_dir(run: Run) -> Path:
    return Path(settings.DAPO_RUNS_DIR) / str(run.pk)


def resolved_config(run: Run) -> RunConfig:
    """The run's config with its relative paths made absolute (from the repository root)."""
    config = RunConfig.from_dict(run.config)
    paths = {"model.path": config.model.path, "data.train_path": config.data.train_path}
    if config.data.val_path:
        paths["data.val_path"] = config.data.val_path
    return config.with_overrides({name: str(resolve(p)) for name, p in paths.items()})


def load_runner() -> Callable[..., Any]:
    module, _, name = settings.DAPO_RUNNER.partition(":")
    return getattr(importlib.import_module(module), name or "run")


def prepare_start(run: Run, out_dir: Path) -> bool:
    """Whether the trainer resumes: yes from the run's own last checkpoint. A fork's first attempt gets its
    parent's checkpoint copied into its own folder (same layout), so the trainer resumes from it like
    from its own. A fresh start gets an empty folder."""
    if run.last_checkpoint:
        out_dir.mkdir(parents=True, exist_ok=True)
        return True
    if out_dir.exists():  # left by a deleted run whose id was reused: never resume from someone else's files
        out_dir.rename(out_dir.with_name(f"{out_dir.name}.stale-{int(time.time())}"))
    out_dir.mkdir(parents=True)
    if not run.source_checkpoint:
        return False
    source = Path(run.source_checkpoint)
    try:
        relative = source.relative_to(run_dir(run.parent)) if run.parent else Path(source.name)
    except ValueError:
        relative = Path("checkpoints") / source.name
    target = out_dir / relative
    if not target.exists():
        copy = shutil.copytree if source.is_dir() else shutil.copy2
        target.parent.mkdir(parents=True, exist_ok=True)
        copy(source, target)
    return True


class Heartbeat:
    """Renews the lease every third of its length in a thread, so a step longer than the lease keeps it."""

    def __init__(self, run: Run, worker_id: str, sink: PlatformSink) -> None:
        self.run, self.worker_id, self.sink = run, worker_id, sink
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{run.pk}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        interval = max(1.0, settings.DAPO_LEASE_SECONDS / 3)
        try:
            while not self._done.wait(interval):
                try:
                    if not self.run.renew_lease(self.worker_id):
                        self.sink.lease_lost = True
                except Exception:  # a database hiccup: the next beat tries again
                    log.warning("run %s: heartbeat failed", self.run.pk, exc_info=True)
        finally:
            connection.close()  # this thread's own connection


@app.task(bind=True, name="worker.tasks.launch_run")
def launch_run(self: Task, run_id: int) -> str:
    """Claim and run one run to its end (or to a cancel). Returns what happened, for the worker's log."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.status not in (Status.QUEUED, Status.RUNNING):
        return "nothing to do"
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{self.request.id}"
    if not run.claim(worker_id):
        return _wait_for_lease(self, run)
    sink = PlatformSink(run, worker_id)
    with Heartbeat(run, worker_id, sink):
        try:
            resume = prepare_start(run, run_dir(run))
            result = load_runner()(resolved_config(run), out_dir=run_dir(run), sinks=[sink], resume=resume)
        except Exception as e:  # the run fails with the reason on its page; the worker goes on
            log.exception("run %s failed", run_id)
            sink.on_finish("failed", f"{type(e).__name__}: {e}")
            return "failed"
    run.refresh_from_db()
    if run.status == Status.RUNNING and run.lease_owner == worker_id:  # the trainer did not call on_finish
        sink.on_finish(result.status, result.error)
    return run.status


def _wait_for_lease(task: Task, run: Run) -> str:
    """Another controller holds the run (a duplicate or redelivered message). Retry when its lease would
    expire: if that controller died, the retry takes the run over and resumes it; if it lives, it has renewed
    the lease and the retry waits again, until the run ends and the message finds nothing to do."""
    run.refresh_from_db()
    if run.status != Status.RUNNING or run.lease_expires is None:
        return "not claimed"
    wait = max(1.0, (run.lease_expires - timezone.now()).total_seconds() + 1.0)
    raise task.retry(countdown=wait, max_retries=None)


@worker_ready.connect
def recover_orphans(**_: Any) -> None:
    """At worker start: queue again the runs whose controller died (running, lease expired)."""
    orphans = Run.objects.filter(status=Status.RUNNING, lease_expires__lt=timezone.now())
    for run_id in orphans.values_list("pk", flat=True):
        log.info("run %s: lease expired, queueing it again", run_id)
        launch_run.apply_async(args=[run_id], queue=settings.DAPO_QUEUE)
