"""The Celery queues, named in one place: training runs on one, short jobs on another.

A training run holds its worker slot for hours; a model export or an evaluation takes minutes. On one queue
the short job waits behind the long one, so they get a queue, and worker slots, of their own:

==========  ==================================  ===================================  ========================
queue       tasks                               concurrency (worker slots)           default name
==========  ==================================  ===================================  ========================
training    ``launch_run`` of a training run    ``DAPO_TRAINING_CONCURRENCY`` or 2   ``DAPO_QUEUE`` or
                                                                                     training
short       ``export_model``, ``launch_run`` of  ``DAPO_SHORT_CONCURRENCY`` or 1     ``DAPO_SHORT_QUEUE`` or
            an evaluation run                                                        short
==========  ==================================  ===================================  ========================

A slot is a child process of Celery's prefork pool: two training slots run two runs at once, each in a
process of its own (its own run log capture, torch threads and Ray driver). Two is what the demo's 2-core
machine holds with ``tiny_cpu`` runs of one CPU each; a cluster that holds more runs at once raises it.

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
DEFAULT_TRAINING_CONCURRENCY = 2
DEFAULT_SHORT_CONCURRENCY = 1
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
    return Queues(
        training=Queue(training, concurrency(env, "DAPO_TRAINING_CONCURRENCY", DEFAULT_TRAINING_CONCURRENCY)),
        short=Queue(short, concurrency(env, "DAPO_SHORT_CONCURRENCY", DEFAULT_SHORT_CONCURRENCY)),
    )


def concurrency(env: Mapping[str, str], name: str, default: int) -> int:
    """The worker slots that ``env[name]`` asks for (unset or blank: ``default``); anything but a whole
    number of at least 1 is a ValueError naming the variable, read when settings load, so a worker with
    a bad value fails at start rather than taking no runs."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"{name}={raw!r} is not a number of worker slots: set it to a whole number of at least 1 "
            f"(runs at once on this queue), or unset it for the default {default}"
        )
    return value
