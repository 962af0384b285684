"""Two training runs at once on one worker (``DAPO_TRAINING_CONCURRENCY``, default 2): a REAL Celery worker
with the prefork pool, as `make demo` starts it, and the REAL trainer on a tiny model for a few steps.

Each run trains in a child process of its own, so its log holds its own output only and its torch runs
on the threads it asks for (``dapo.cluster.resources.local_cpus``), whatever the other run asked for."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from config.queues import queues
from django.conf import settings
from django.db import transaction
from runs.models import Run, Status

from tests.platform.support import redis_test_url
from tests.reliability.support import build_tiny_assets, tiny_config
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(300)]
ONE_SECOND = timedelta(seconds=1)


def claim_time(log: str) -> datetime:
    """When the worker claimed the run: the first header of its log (``===== 2026-12-04 03:15:37 UTC``),
    at most a second before the true instant."""
    stamp = re.match(r"===== (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC ", log)
    assert stamp, log[:200]
    return datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


@pytest.fixture
def worker(django_db_blocker: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A prefork worker of both queues, its training slots from DAPO_TRAINING_CONCURRENCY's default."""
    from config.celery import app

    app.conf.broker_url = redis_test_url()
    previous_queue, settings.DAPO_QUEUE = settings.DAPO_QUEUE, os.environ["DAPO_QUEUE"]
    root = tmp_path_factory.mktemp("concurrency")
    var = root / "var"
    env = stack.environment(var, DAPO_MODEL_ROOTS=str(root), DAPO_DATASET_ROOTS=str(root))
    env.pop("DAPO_TRAINING_CONCURRENCY", None)
    slots = queues(env).training.concurrency
    assert slots == 2  # the default: two runs at once
    with stack.celery_worker(env, var / "celery.log", concurrency=slots):
        yield root
    settings.DAPO_QUEUE = previous_queue
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()


def test_two_runs_train_at_once_each_in_its_own_process_on_its_own_threads(worker: Path, alice: Any) -> None:
    assets = build_tiny_assets(worker)
    one_cpu = tiny_config(assets, steps=3, **{"execution.torch_threads": 0})  # the preset's one CPU
    two_threads = tiny_config(assets, steps=3, **{"execution.torch_threads": 2})
    # One scheduling pass (on commit) admits both by the worker's two slots. Launched one after the other,
    # the second waited whenever the first had started by then: its start records this machine's 2 CPUs,
    # and 1 + 2 threads do not fit in them (seen at load 5).
    with transaction.atomic():
        runs = [
            Run.create_queued(owner=alice, name=f"at-once-{i}", config=config)
            for i, config in enumerate((one_cpu, two_threads))
        ]
    done = [
        stack.wait_for(lambda r=r: (x := Run.objects.get(pk=r.pk)).is_final and x, 240, f"run {r.pk}")
        for r in runs
    ]
    assert [r.status for r in done] == [Status.SUCCEEDED, Status.SUCCEEDED], [r.error for r in done]
    logs = [(worker / "var" / "run-logs" / f"{r.pk}.log").read_text() for r in done]  # the worker's var
    # A run runs from its claim (its log's header, written at once, stamped to the second) to its end.
    claimed = [claim_time(text) for text in logs]
    assert claimed[0] + ONE_SECOND <= done[1].finished_at and claimed[1] + ONE_SECOND <= done[0].finished_at
    headers = [
        re.search(rf"run {r.pk}, attempt 1, worker [^:]+:(\d+):", t) for r, t in zip(done, logs, strict=True)
    ]
    pids = [int(h[1]) for h in headers if h]
    assert len(set(pids)) == 2 and os.getpid() not in pids  # two pool processes, neither the test's
    for text, own, other, threads in ((logs[0], *pids, 1), (logs[1], *reversed(pids), 2)):
        assert f"torch: {threads} thread(s) in process {own}" in text  # what this run asked for
        assert f"process {other}" not in text and text.count("=====") == 2  # nothing of the other run
