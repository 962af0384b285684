"""Queue worker tasks by name after the current transaction commits.

The platform never imports ``worker`` (the worker imports the platform, not the reverse): it sends tasks
by name through the Celery app of ``config.celery``, which ``worker.app`` extends with the task code.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction


def send(task: str, run_id: int) -> None:
    from config.celery import app  # lazy: a page that never queues anything does not load Celery

    app.send_task(f"worker.tasks.{task}", args=[run_id], queue=settings.DAPO_QUEUE)


def on_commit(task: str, run_id: int) -> None:
    transaction.on_commit(lambda: send(task, run_id))  # looked up at call time (tests replace it)
