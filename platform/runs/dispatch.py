"""Queue worker tasks by name after the current transaction commits.

The platform never imports ``worker`` (the worker imports the platform, not the reverse): it sends tasks
by name through the Celery app of ``config.celery``, which ``worker.app`` extends with the task code.
"""

from __future__ import annotations

from config.queues import queues
from django.conf import settings
from django.db import transaction

from runs.signals import schedule_wanted


def queue_of(task: str, *, evaluation: bool = False) -> str:
    """The training queue, or for an export or an evaluation the short jobs' queue (config.queues)."""
    named = queues({"DAPO_QUEUE": settings.DAPO_QUEUE, "DAPO_SHORT_QUEUE": settings.DAPO_SHORT_QUEUE})
    return named.for_task(task, evaluation=evaluation)


def send(task: str, run_id: int, *, evaluation: bool = False) -> None:
    from config.celery import app  # lazy: a page that never queues anything does not load Celery

    app.send_task(f"worker.tasks.{task}", args=[run_id], queue=queue_of(task, evaluation=evaluation))


def schedule_on_commit() -> None:
    """One pass of the scheduler (runs.scheduling) once the current transaction commits: a run was queued,
    one freed its room, or a priority changed."""
    transaction.on_commit(lambda: schedule_wanted.send(sender=None))


def on_commit(task: str, run_id: int, *, evaluation: bool = False) -> None:
    # looked up at call time (tests replace it)
    transaction.on_commit(lambda: send(task, run_id, evaluation=evaluation))
