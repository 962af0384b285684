"""Celery tasks: take a run id, reload the run from the database, and act on it.

``launch_run`` is the controller of one run: it claims the run's lease (so a redelivered or duplicated
message never starts a second controller), builds the RunConfig from the row, and calls the trainer
(``settings.DAPO_RUNNER``, default ``dapo.loop.runner:run``) with a :class:`~worker.sink.PlatformSink`. A
heartbeat thread keeps the lease while a long step runs. When a worker dies its lease expires; the reaper
of any live worker (a thread, every ``DAPO_REAPER_INTERVAL_S``) then queues the run again, and it resumes
from its last recorded checkpoint. The reaper also runs a pass of the platform's scheduler
(runs.scheduling), which decides when each queued training run is sent here.
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
from typing import Any, Self

from catalog.paths import PathError, resolve_path
from catalog.versions import changed_files, data_record
from celery import Task
from celery.signals import worker_ready, worker_shutdown
from config.celery import app
from django.conf import settings
from django.db import connection
from django.utils import timezone
from notifications.delivery import deliver_due, detect_stalls
from runs.events import status_event
from runs.manage import remove_files
from runs.models import ClusterCapacity, Kind, Run, Status
from runs.run_log import log_path
from runs.scheduling import schedule

from dapo.cluster import resources
from dapo.learner import checkpoint as ckpt
from dapo.runconfig import RunConfig
from worker.cluster_state import record_cluster_state
from worker.export import export_model  # noqa: F401  (registers the "Export model" task)
from worker.run_log import capture
from worker.sink import DB_ERRORS, PUBLISHER, PlatformSink, drop_connection, with_db_retry

log = logging.getLogger(__name__)


def run_dir(run: Run) -> Path:
    return Path(settings.DAPO_RUNS_DIR) / str(run.pk)


def resolved_config(run: Run) -> RunConfig:
    """The run's config with its paths made absolute (from the repository root), each checked again to lie
    inside its roots right before the trainer opens it: a root narrowed, or a link swapped, since the run was
    queued fails the run with the field's name instead of reading a file outside."""

    def resolve(field: str, path: str) -> str:
        try:
            return str(resolve_path(field, path))
        except PathError as e:
            raise PathError(f"{field} {e}") from None

    return RunConfig.from_dict(run.config).with_file_paths(resolve)


def record_data_files(run: Run) -> None:
    """Record what this attempt reads: each data file's SHA-256 and the catalog dataset version it is
    (catalog.versions), hashing files whose size or modification time no catalog version knows. A file
    of the version the run picked that no longer holds that version's content fails the run (ValueError):
    it would train on something other than what it names."""
    run.data_files = data_record(run.config, read_files=True, picked=run.dataset)
    with_db_retry(
        lambda: Run.objects.filter(pk=run.pk).update(data_files=run.data_files), "recording its data files"
    )
    if changed := changed_files(run.data_files):
        label = run.dataset.label if run.dataset else "the dataset"
        raise ValueError(
            f"{', '.join(changed)}: the file of {label} changed since it was imported (its SHA-256 differs); "
            "register or upload it again as a new version, or pick another version"
        )


def local_capacity() -> resources.Capacity:
    """This machine as a local run sees it: the CPUs this process may run on, and the GPUs torch sees."""
    import torch

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity outside Linux
        cpus = os.cpu_count() or 1
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return resources.Capacity("local", (resources.Node(float(cpus), float(gpus)),))


def record_capacity(capacity: resources.Capacity) -> None:
    """Keep what this worker saw (runs.models.capacity): the launch checks the next runs against it. Not
    retried: a database error is logged (resources.report_capacity) and the run goes on."""
    ClusterCapacity.record(capacity, seen_by=f"{socket.gethostname()}:{os.getpid()}")


resources.on_capacity(record_capacity)  # a Ray run reports its cluster's nodes after it connects


def load_runner() -> Callable[..., Any]:
    module, _, name = settings.DAPO_RUNNER.partition(":")
    return getattr(importlib.import_module(module), name or "run")


def start_evaluation(run: Run, config: RunConfig, sink: PlatformSink) -> Any:
    """An evaluation run: ``settings.DAPO_EVALUATOR`` (default ``dapo.eval.evaluate:run``) on the run's
    config, with the weights of its source checkpoint when it evaluates one. A retried attempt starts over."""
    module, _, name = getattr(settings, "DAPO_EVALUATOR", "dapo.eval.evaluate:run").partition(":")
    evaluator = getattr(importlib.import_module(module), name or "run")
    run_dir(run).mkdir(parents=True, exist_ok=True)
    checkpoint = run.source_checkpoint or None
    return evaluator(config, out_dir=run_dir(run), sinks=[sink], checkpoint=checkpoint)


def prepare_start(run: Run, out_dir: Path) -> Path | None:
    """The checkpoint the trainer resumes from; None for a fresh start (in an empty folder).

    1. The run's own last recorded checkpoint. The sink records a checkpoint only once the report of its
       step is in the database, so every step up to it is there and the resumed curve has no gap. A newer
       checkpoint on disk was saved by a controller that died before writing that step's report: it is
       deleted (the resumed run recomputes that step and saves the same checkpoint again; left in place,
       pruning by ``keep_last`` would count it as the newest and delete the one resumed from).
    2. A fork's first attempt: its parent's checkpoint, copied into its own folder (same layout).
    3. Otherwise a fresh start; a folder left by a deleted run whose id was reused is set aside, never
       resumed from.
    """
    if run.last_checkpoint:
        out_dir.mkdir(parents=True, exist_ok=True)
        return _own_checkpoint(run, out_dir)
    if out_dir.exists():
        out_dir.rename(out_dir.with_name(f"{out_dir.name}.stale-{int(time.time())}"))
    out_dir.mkdir(parents=True)
    if not run.source_checkpoint:
        return None
    source = Path(run.source_checkpoint)
    try:
        relative = source.relative_to(run_dir(run.parent)) if run.parent else Path(source.name)
    except ValueError:
        relative = Path("checkpoints") / source.name
    target = out_dir / relative
    if not target.exists() and not source.exists():
        raise FileNotFoundError(
            f"the parent run's checkpoint of step {run.fork_step} ({source}) is no longer on disk (pruned "
            "by checkpoint.keep_last or deleted): fork the parent again from a checkpoint it still has"
        )
    if not target.exists():
        copy = shutil.copytree if source.is_dir() else shutil.copy2
        target.parent.mkdir(parents=True, exist_ok=True)
        copy(source, target)
    return target


def _own_checkpoint(run: Run, out_dir: Path) -> Path | None:
    on_disk = ckpt.checkpoints(out_dir)
    steps = [ckpt.step_of(p) for p in on_disk]
    if run.last_checkpoint_step not in steps:  # deleted by hand: the newest one left is the best there is
        log.warning("run %s: %s is gone; resuming from the newest on disk", run.pk, run.last_checkpoint)
        return on_disk[-1] if on_disk else None
    recorded = steps.index(run.last_checkpoint_step)
    for newer in on_disk[recorded + 1 :]:
        log.info("run %s: deleting %s, saved before its step was recorded", run.pk, newer)
        shutil.rmtree(newer, ignore_errors=True)
    return on_disk[recorded]


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
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{self.request.id}"
    try:
        run = with_db_retry(lambda: Run.objects.filter(pk=run_id).first(), f"loading run {run_id}")
        if run is None or run.status not in (Status.QUEUED, Status.RUNNING):
            return "nothing to do"
        if not with_db_retry(lambda: run.claim(worker_id), f"claiming run {run_id}"):
            return _wait_for_lease(self, run)
    except DB_ERRORS as e:  # the database is away for longer: try again later, never drop the message
        raise self.retry(exc=e, countdown=settings.DAPO_REAPER_INTERVAL_S, max_retries=None) from e
    sink = PlatformSink(run, worker_id)
    header = f"run {run.pk}, attempt {run.attempts}, worker {worker_id}"
    with capture(log_path(run.pk), header, fresh=run.attempts <= 1), Heartbeat(run, worker_id, sink):
        try:
            config = resolved_config(run)
            if config.execution.backend == "local":  # a Ray run reports its cluster once connected
                resources.report_capacity(local_capacity())
            record_data_files(run)
            if (
                run.kind == Kind.EVALUATION
            ):  # no training: score the validation sets once (dapo.eval.evaluate)
                result = start_evaluation(run, config, sink)
            else:
                start = prepare_start(run, run_dir(run))
                result = load_runner()(
                    config,
                    out_dir=run_dir(run),
                    sinks=[sink],
                    resume=start is not None,
                    resume_from=start,
                )
        except DB_ERRORS:
            # The database stayed away past the retry window: the run stays "running" without a
            # heartbeat, so the reaper queues it again once its lease runs out, and it resumes.
            log.exception("run %s: database unavailable; the reaper will queue it again", run_id)
            return "database unavailable"
        except Exception as e:  # the run fails with the reason on its page; the worker goes on
            log.exception("run %s failed", run_id)
            sink.on_finish("failed", f"{type(e).__name__}: {e}")
            result = None
        # inside the capture: the last line (finished, or back in the queue) goes to the run's log
        holder = Run.objects.filter(pk=run.pk).values_list("status", "lease_owner").first()
        if result is not None and holder == (Status.RUNNING, worker_id):  # the trainer did not call on_finish
            sink.on_finish(result.status, result.error)
    if _deleted(run):
        return "deleted"
    run.refresh_from_db()
    if result is None and run.status != Status.QUEUED:  # queued: back in the queue (a lost Ray node)
        return "failed"
    return run.status


def _deleted(run: Run) -> bool:
    """True when the run was deleted while its task ran (runs.manage.delete_run): what its last step
    wrote after the delete (a checkpoint, the log's tail) is removed here, once nothing writes any more."""
    try:
        gone = not Run.objects.filter(pk=run.pk).exists()
    except DB_ERRORS:
        return False
    if gone:
        remove_files(run.pk)
    return gone


def _wait_for_lease(task: Task, run: Run) -> str:
    """Another controller holds the run (a duplicate or redelivered message). Retry when its lease would
    expire: if that controller died, the retry takes the run over and resumes it; if it lives, it has renewed
    the lease and the retry waits again, until the run ends and the message finds nothing to do."""
    run.refresh_from_db()
    if run.status != Status.RUNNING or run.lease_expires is None:
        return "not claimed"
    wait = max(1.0, (run.lease_expires - timezone.now()).total_seconds() + 1.0)
    raise task.retry(countdown=wait, max_retries=None)


class Reaper:
    """Every ``DAPO_REAPER_INTERVAL_S``: queue again the runs whose lease ran out (``Run.requeue_expired``).

    A thread of the worker's main process, started when the worker is ready, rather than a Celery beat
    task: a task would wait in the queue behind the training runs that hold every pool slot, which is
    exactly when a dead controller's run needs requeueing. Every worker runs one; the conditional
    update lets exactly one of them requeue a given run."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__.lower(), daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            reap()
            record_cluster_state()  # RAY_ADDRESS's cluster: the scheduler's capacity, the cluster page
            schedule_pass()


def schedule_pass() -> list[int]:
    """A pass of the platform's scheduler (runs.scheduling) from the reaper: it catches up with any pass
    that failed, and with capacity recorded since. A database error is logged; the next pass tries again."""
    try:
        return schedule()
    except DB_ERRORS as e:
        log.warning("scheduler: database unavailable (%s); trying again in the next pass", e)
    except Exception:
        log.exception("scheduler: pass failed")
    finally:
        drop_connection()
    return []


def reap() -> list[int]:
    """One pass of the reaper; a database error is logged and the next pass tries again."""
    try:
        requeued = Run.requeue_expired()
    except DB_ERRORS as e:
        log.warning("reaper: database unavailable (%s); trying again in the next pass", e)
        return []
    except Exception:
        log.exception("reaper: pass failed")
        return []
    finally:
        drop_connection()  # the reaper thread's own connection: none is left open between passes
    for run_id in requeued:
        log.warning("run %s: its worker stopped renewing the lease; queued again", run_id)
    return requeued


class Notifier(Reaper):
    """Every ``DAPO_NOTIFY_INTERVAL_S``: mark stalled runs and send due notifications (``notify``). A
    thread of the worker's main process, like the reaper and for the same reason."""

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            notify()


def notify(now: Any = None) -> list[int]:
    """One pass of the notifier: runs newly marked stalled (their pages hear it at once), then every due
    notification sent. Errors are logged; the next pass tries again. Returns the runs marked stalled."""
    stalled: list[int] = []
    try:
        stalled = detect_stalls(now)
        for run_id in stalled:
            log.warning("run %s: no new step for its owner's stall_minutes; marked stalled", run_id)
            run = Run.objects.filter(pk=run_id).first()
            if run is not None:
                PUBLISHER.publish(run_id, status_event(run))
        deliver_due(now)
    except DB_ERRORS as e:
        log.warning("notifier: database unavailable (%s); trying again in the next pass", e)
    except Exception:
        log.exception("notifier: pass failed")
    finally:
        drop_connection()
    return stalled


REAPER: Reaper | None = None
NOTIFIER: Notifier | None = None


@worker_ready.connect
def recover_orphans(**_: Any) -> None:
    """At worker start: queue again the runs whose controller died, then reap every interval; and start
    the notifier."""
    global REAPER, NOTIFIER
    reap()
    schedule_pass()
    if REAPER is None:
        REAPER = Reaper(settings.DAPO_REAPER_INTERVAL_S).start()
    if NOTIFIER is None:
        NOTIFIER = Notifier(settings.DAPO_NOTIFY_INTERVAL_S).start()


@worker_shutdown.connect
def stop_reaper(**_: Any) -> None:
    global REAPER, NOTIFIER
    if REAPER is not None:
        REAPER.stop()
        REAPER = None
    if NOTIFIER is not None:
        NOTIFIER.stop()
        NOTIFIER = None
