"""Many runs queued at once in front of one worker (tests/reliability/test_queue.py with a few dozen,
bench/queue_200.py with two hundred): they must run one at a time in creation order, none may be lost,
and a cancelled queued run must never start, whether it was cancelled before the worker came up or
while the queue was draining."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from runs.models import MetricPoint, Run, RunQuota, Status

from dapo.runconfig import RunConfig
from tests.reliability import support
from tests.worker import stack

CANCEL_EVERY = 7
"""Runs 1, 8, 15... are cancelled before the worker starts."""


@dataclass
class QueueResult:
    runs: list[Run]
    """In creation order, as they ended."""
    cancelled_early: list[int]
    cancelled_late: int
    seconds: float
    """From the worker being ready to the last run ending."""
    left_in_queue: int
    """Messages still in the Redis queue at the end (0: every one was consumed)."""

    @property
    def started_order(self) -> list[int]:
        started = [r for r in self.runs if r.started_at is not None]
        return [r.pk for r in sorted(started, key=lambda r: (r.started_at, r.pk))]

    @property
    def per_run_s(self) -> float:
        trained = sum(1 for r in self.runs if r.status == Status.SUCCEEDED)
        return self.seconds / max(1, trained)


def run_queue(owner: Any, config: RunConfig, env: dict[str, str], logs: Path, count: int) -> QueueResult:
    """Queue ``count`` runs, cancel some, then start one worker and wait until every run has ended."""
    # one user's long queue is the point here: lift the per-user cap on runs (runs.models.quotas) for them
    RunQuota.objects.update_or_create(user=owner, defaults={"max_runs": 0})
    runs = [Run.create_queued(owner=owner, name=f"queued-{i:03d}", config=config) for i in range(count)]
    early = [run.pk for run in runs[1::CANCEL_EVERY]]
    for pk in early:
        assert Run.objects.get(pk=pk).request_cancel() == "cancelled"
    late = runs[-2].pk
    pks = [run.pk for run in runs]
    with support.workers(env, logs):
        ready = time.time()
        # while the queue drains: cancel a run that is still waiting, near its end
        support.wait_run(
            pks[count // 2], lambda r: r.status != Status.QUEUED, 60 + 5 * count, "the middle run"
        )
        assert Run.objects.get(pk=late).request_cancel() == "cancelled"
        everything = Run.objects.filter(pk__in=pks)
        stack.wait_for(
            lambda: all(r.is_final for r in everything.all()), 60 + 5 * count, "every run to end", 0.5
        )
        left = redis.Redis.from_url(env["REDIS_URL"]).llen(env["DAPO_QUEUE"])
    ended = {r.pk: r for r in Run.objects.filter(pk__in=pks)}
    last_end = max(r.finished_at.timestamp() for r in ended.values() if r.finished_at)
    return QueueResult([ended[pk] for pk in pks], early, late, last_end - ready, int(left))


def problems(result: QueueResult, runs_dir: Path) -> list[str]:
    """What went wrong, in words (empty: every invariant holds)."""
    cancelled = {*result.cancelled_early, result.cancelled_late}
    trained = [r for r in result.runs if r.pk not in cancelled]
    found = []
    if result.started_order != [r.pk for r in trained]:
        found.append(f"started out of creation order or not at all: {result.started_order}")
    for r in trained:
        points = list(
            MetricPoint.objects.filter(run=r, name="critic/score/mean").values_list("step", flat=True)
        )
        if (r.status, r.step, r.attempts, points) != (Status.SUCCEEDED, 1, 1, [1]):
            found.append(
                f"run {r.pk}: {r.status}, step {r.step}, {r.attempts} attempts, metric steps {points}"
            )
    for r in result.runs:
        if r.pk in cancelled and (r.status, r.started_at, r.attempts) != (Status.CANCELLED, None, 0):
            found.append(f"cancelled run {r.pk} started: {r.status}, {r.attempts} attempts")
        if r.pk in cancelled and (runs_dir / str(r.pk)).exists():
            found.append(f"cancelled run {r.pk} has a run folder")
    if result.left_in_queue:
        found.append(f"{result.left_in_queue} message(s) left in the queue")
    return found
