"""A worker dies (SIGKILL) or freezes while it runs a run: the run is taken over within a bounded time,
resumes from its last recorded checkpoint, and its curves have every step exactly once; a worker that
wakes after the takeover writes nothing. Real Redis, real prefork Celery workers (as `make demo` starts
them), the real trainer on a tiny model, the test database (SQLite or PostgreSQL)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from runs import dispatch
from runs.models import Checkpoint, Run, Sample, Status

from tests.reliability import support
from tests.reliability.support import RECOVERY_BOUND_S, final, steps_of, wait_run
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def pool(django_db_setup: Any, django_db_blocker: Any, test_queue: str, var: Path) -> Any:
    with support.workers(support.worker_env(var), var / "logs", count=2) as workers:
        yield workers
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()


@pytest.fixture
def two_workers(pool: support.Workers) -> support.Workers:
    pool.ensure(2)  # a test before may have killed one
    return pool


@pytest.fixture
def launch(alice: Any, tiny_assets: dict[str, str], var: Path) -> Any:
    def launch(steps: int, every: int, **fault: Any) -> Run:
        config = support.tiny_config(tiny_assets, steps=steps, every=every)
        run = Run.objects.create(owner=alice, name="reliability", config=config.to_dict(), total_steps=steps)
        support.write_faults(var, {run.pk: fault})
        dispatch.send("launch_run", run.pk)
        return run

    return launch


def invocations(var: Path, run: Run) -> list[dict[str, Any]]:
    path = var / f"invocations-{run.pk}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_worker_killed_between_a_checkpoint_and_its_report_resumes_without_a_gap(two_workers, launch, var):
    """The trainer saves step 4's checkpoint, then reports step 4. Killed in between, the run must not
    resume after step 4 (whose metrics were never written) but from checkpoint 2."""
    run = final(launch(steps=8, every=2, kill_at_checkpoint=4).pk, timeout=180)
    first, killed, second = invocations(var, run)
    assert run.status == Status.SUCCEEDED and run.attempts == 2
    assert steps_of(run) == list(range(1, 9)) and steps_of(run, "actor/pg_loss") == list(range(1, 9))
    assert second["resume_from"].endswith("checkpoints/step_000002")
    assert killed["at_checkpoint"] == 4 and second["pid"] != killed["pid"]
    assert killed["killed"] < second["t"] < killed["killed"] + RECOVERY_BOUND_S  # never two at once
    print(f"pool process killed at checkpoint 4: resumed {second['t'] - killed['killed']:.1f} s later")
    assert list(Checkpoint.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == [
        2,
        4,
        6,
        8,
    ]


def test_a_whole_worker_killed_mid_step_is_reaped_and_resumed_by_another_within_the_bound(
    two_workers, launch, var
):
    run = launch(steps=40, every=3)
    run = wait_run(
        run.pk, lambda r: r.step >= 5 and r.last_checkpoint_step, 120, "a few steps and a checkpoint"
    )
    victim = two_workers.holding(support.owner_pid(run))
    os.killpg(victim.pid, signal.SIGKILL)  # the worker and its pool process: the machine is gone
    killed_at = time.time()
    victim.wait(timeout=10)
    checkpoint = Run.objects.get(pk=run.pk).last_checkpoint_step  # the dead write nothing more
    run = final(run.pk, timeout=240)
    first, second = invocations(var, run)
    assert run.status == Status.SUCCEEDED and run.attempts == 2
    assert steps_of(run) == list(range(1, 41))
    assert second["resume_from"].endswith(f"checkpoints/step_{checkpoint:06d}")
    assert second["t"] - killed_at < RECOVERY_BOUND_S
    print(f"worker killed at step {checkpoint}+: resumed by the other {second['t'] - killed_at:.1f} s later")
    # its message sits unacknowledged in Redis until the visibility timeout (an hour): the reaper did it
    assert f"run {run.pk}: its worker stopped renewing the lease; queued again" in two_workers.logs()


def test_a_frozen_worker_that_wakes_after_a_takeover_writes_nothing(two_workers, launch, var):
    """Step 7's report is stopped before the platform writes it, for longer than the lease: another worker
    takes over and finishes the run; then the frozen process wakes and must neither write step 7 nor
    move the last checkpoint nor change the final status."""
    run = launch(steps=30, every=5, runner="fake", freeze_at_step=7)
    frozen = stack.wait_for(
        lambda: next((i for i in _records(var, run) if "frozen" in i), None), 60, "the freeze"
    )
    run = final(run.pk, timeout=120)
    taker = invocations(var, run)[-1]
    os.kill(frozen["pid"], signal.SIGCONT)
    stopped = re.compile(rf"run {run.pk}: \S+:{frozen['pid']}:\S+ lost the lease before step 7")
    stack.wait_for(lambda: stopped.search(two_workers.logs()), 30, "the woken controller to stop")
    time.sleep(1)  # it would write its checkpoint and final status right after
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.step, run.last_checkpoint_step, run.attempts) == (Status.SUCCEEDED, 30, 30, 2)
    assert steps_of(run) == list(range(1, 31))
    writers = set(Sample.objects.filter(run=run, step__gte=7).values_list("response", flat=True))
    assert all(f"by pid {taker['pid']}" in w for w in writers), writers


def _records(var: Path, run: Run) -> list[dict[str, Any]]:
    path = var / f"invocations-{run.pk}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
