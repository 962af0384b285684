"""The Celery queues, named in one place: training runs on one, short jobs on another.

A training run holds its worker for hours; a model export or an evaluation takes minutes. On one queue
the short job waits behind the long one, so they get a queue, and a worker slot, of their own:

==========  =====================================  ==============  ===========================
queue       tasks                                  concurrency     default name
==========  =====================================  ==============  ===========================
training    ``launch_run`` of a training run       1               ``DAPO_QUEUE`` or training
short       ``export_model``, ``launch_run`` of an  1              ``DAPO_SHORT_QUEUE`` or short
            evaluation run
==========  =====================================  ==============  ===========================

When ``DAPO_QUEUE`` is set and ``DAPO_SHORT_QUEUE`` is not, the short queue is ``<DAPO_QUEUE>-short``, so
two stacks (or a test session) sharing one Redis never take each other's short jobs.

Plain Python, no Django: settings (routing), the worker and ``scripts/devstack.py`` (which starts one
Celery worker per queue) all read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_TRAINING = "training"
DEFAULT_SHORT = "short"
SHORT_TASKS = frozenset({"export_model"})
"""Tasks that always go to the short queue; ``launch_run`` goes there for an evaluation run."""


@dataclass(frozen=True)
class Queue:
    name: str
    concurrency: int


@dataclass(frozen=True)
class Queues:
    training: Queue
    short: Queue

    def all(self) -> tuple[Queue, ...]:
        return self.training, self.short

    def for_task(self, task: str, *, evaluation: bool = False) -> str:
        """The queue a task is sent to."""
        return self.short.name if task in SHORT_TASKS or evaluation else self.training.name


def queues(env: Mapping[str, str]) -> Queues:
    """The queues named by this environment (module docstring)."""
    training = (env.get("DAPO_QUEUE") or "").strip() or DEFAULT_TRAINING
    default_short = DEFAULT_SHORT if training == DEFAULT_TRAINING else f"{training}-short"
    short = (env.get("DAPO_SHORT_QUEUE") or "").strip() or default_short
    if short == training:
        raise ValueError(f"DAPO_SHORT_QUEUE must differ from DAPO_QUEUE (both {training!r})")
    return Queues(training=Queue(training, 1), short=Queue(short, 1))
