"""Runs queued at once in front of one worker (prefork, one pool process, as `make demo` starts it): they
run one at a time in creation order, none is lost, and a cancelled queued run never starts. Each run is
the real trainer at its smallest (one step of a tiny model). The default suite queues QUEUE_RUNS (50);
bench/queue_200.py runs the same scenario with 200 and records the figures in bench/README.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import support
from tests.reliability.queue_scenario import CANCEL_EVERY, problems, run_queue
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(400)]

QUEUE_RUNS = int(os.environ.get("DAPO_TEST_QUEUE_RUNS", "50"))


def test_runs_queued_at_once_run_in_creation_order_none_lost_cancelled_ones_never_start(
    alice: Any, tiny_assets: dict[str, str], var: Path, test_queue: str, django_db_blocker: Any
) -> None:
    config = support.tiny_config(tiny_assets, steps=1)
    try:
        result = run_queue(alice, config, support.worker_env(var), var / "logs-queue", QUEUE_RUNS)
    finally:
        with django_db_blocker.unblock():
            stack.wait_for_other_sessions_to_leave()
    assert problems(result, var / "runs") == []
    assert len(result.cancelled_early) == len(range(1, QUEUE_RUNS, CANCEL_EVERY)) and result.cancelled_late
    print(f"{QUEUE_RUNS} runs in {result.seconds:.1f} s, {result.per_run_s:.2f} s per trained run")
