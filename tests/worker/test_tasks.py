"""launch_run through a REAL Celery worker (a subprocess on the test Redis database, eager mode off),
with a fast stand-in trainer: lifecycle, duplicate delivery, cancel, resume, takeover of a dead lease."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone
from runs import dispatch
from runs.models import Checkpoint, ClusterCapacity, MetricPoint, Run, Status
from runs.run_state import run_state

from dapo.runconfig import RunConfig
from dapo.runconfig.presets import get_preset
from tests.platform.support import make_fake_assets, redis_test_url
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(300)]

LEASE_SECONDS = 4


@pytest.fixture(scope="module")
def worker(
    django_db_setup: Any, django_db_blocker: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """A Celery worker process for this module's tests; yields the folder its runs write into."""
    from config.celery import app

    url = redis_test_url()  # a database of its own, and below a queue of this session's own
    app.conf.broker_url = url  # whatever settings.REDIS_URL was when Django was set up
    previous_queue, settings.DAPO_QUEUE = settings.DAPO_QUEUE, os.environ["DAPO_QUEUE"]
    var = tmp_path_factory.mktemp("worker-var")
    env = stack.environment(
        var,
        DAPO_RUNNER="tests.worker.fake_runner:run",
        DAPO_LEASE_SECONDS=str(LEASE_SECONDS),
        DAPO_MODEL_ROOTS=str(var),
        DAPO_DATASET_ROOTS=str(var),
        FAKE_STEP_SECONDS="0.15",
    )
    with stack.celery_worker(env, var / "celery.log"):
        yield var
    settings.DAPO_QUEUE = previous_queue
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()


@pytest.fixture
def make_run(worker: Path, alice: Any) -> Any:
    paths = make_fake_assets(worker)

    def make(steps: int = 5, every: int = 2) -> Run:
        config = get_preset("tiny_cpu").with_overrides(
            {**paths, "optim.total_steps": steps, "checkpoint.every_n_steps": every}
        )
        return Run.create_queued(owner=alice, name=f"worker-test-{steps}", config=config)  # queued on commit

    return make


def invocations(worker: Path, run: Run) -> list[dict[str, Any]]:
    path = worker / "runs" / str(run.pk) / "invocations.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def final(run: Run, timeout: float = 60) -> Run:
    return stack.wait_for(
        lambda: (r := Run.objects.get(pk=run.pk)).is_final and r, timeout, f"run {run.pk} to finish"
    )


def ended_log(worker: Path, run: Run, end: str) -> str:
    """The run's log once its end line (``end``, a pattern) is in it: that line follows the status's commit,
    so on a busy machine a test that saw the final status can read the log in between."""
    path, ended = worker / "run-logs" / f"{run.pk}.log", re.compile(end)
    stack.wait_for(lambda: ended.search(path.read_text()), 30, "the log's end line")
    return path.read_text()


def steps_of(run: Run, name: str = "critic/score/mean") -> list[int]:
    return list(
        MetricPoint.objects.filter(run=run, name=name).order_by("step").values_list("step", flat=True)
    )


def test_a_queued_run_is_trained_to_the_end_by_the_worker(worker, make_run):
    run = final(make_run(steps=5))
    assert (run.status, run.step, run.total_steps, run.attempts) == (Status.SUCCEEDED, 5, 5, 1)
    assert steps_of(run) == [1, 2, 3, 4, 5]
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4]
    assert run.started_at and run.finished_at and run.lease_owner == ""
    machine = ClusterCapacity.latest("local")  # recorded at the start, for the launch check
    assert machine is not None and machine[0].cpus == len(os.sched_getaffinity(0))


def test_a_duplicated_message_never_starts_a_second_controller(worker, make_run):
    run = make_run(steps=6)
    for _ in range(3):  # redelivered or enqueued twice: the lease lets exactly one through
        dispatch.send("launch_run", run.pk)
    run = final(run)
    assert run.status == Status.SUCCEEDED and run.attempts == 1
    assert len(invocations(worker, run)) == 1
    assert steps_of(run) == [1, 2, 3, 4, 5, 6]


def test_cancel_stops_at_a_step_boundary_keeping_everything_then_resume_continues(worker, make_run):
    run = make_run(steps=40, every=5)
    stack.wait_for(lambda: Run.objects.get(pk=run.pk).step >= 3, 30, "three steps")
    assert Run.objects.get(pk=run.pk).request_cancel() == "cancelling"
    run = final(run)
    stopped_at = run.step
    assert run.status == Status.CANCELLED and 3 <= stopped_at < 40
    assert steps_of(run) == list(range(1, stopped_at + 1))
    assert run.last_checkpoint_step == stopped_at  # the trainer saves when it stops
    assert run.resume()
    run = final(run)
    assert run.status == Status.SUCCEEDED and steps_of(run) == list(range(1, 41))  # no gap, no duplicate
    assert [i["start_step"] for i in invocations(worker, run)] == [1, stopped_at + 1]
    assert run_state(run)["markers"] == [  # the run page's charts draw it
        {"step": stopped_at, "kind": "resume", "label": f"resumed after step {stopped_at}"}
    ]
    # the run's log tells the story: start, a line per step, checkpoints, the cancel, the resume, the end
    log = ended_log(worker, run, r"succeeded at step 40/40 \(running")
    assert "start: attempt 1, steps 1-40" in log
    step_lines = [line for line in log.splitlines() if re.search(r"^\[\d\d:\d\d:\d\d\] step \d+/40  ", line)]
    assert [int(re.search(r"step (\d+)/", line)[1]) for line in step_lines] == list(range(1, 41))
    assert "] step 1/40  reward 0.025  acc 0.013" in log
    assert "checkpoint of step 5 recorded" in log
    assert re.search(rf"cancelled at step {stopped_at}/40 \(running \d+s, wall \d+s\)", log)
    assert f"resume: attempt 2, from the checkpoint of step {stopped_at}; steps {stopped_at + 1}-40" in log
    assert re.search(r"succeeded at step 40/40 \(running \d+s, wall \d+s\)", log)


def test_a_preempted_run_goes_back_to_the_queue_and_resumes_with_no_step_lost(worker, make_run):
    """Staff pre-empt a running run: it checkpoints at its step boundary, goes back to the queue, the
    scheduler sends it again and it resumes from that checkpoint: every step once, in order."""
    run = make_run(steps=24, every=6)
    stack.wait_for(lambda: Run.objects.get(pk=run.pk).step >= 3, 30, "three steps")
    assert Run.objects.get(pk=run.pk).request_preempt("root")
    run = final(run)
    assert run.status == Status.SUCCEEDED and run.preemptions == 1 and run.attempts == 2, run.error
    assert steps_of(run) == list(range(1, 25))  # no gap, no duplicate
    first, second = invocations(worker, run)
    stopped_at = second["start_step"] - 1
    assert second["resume"] and 3 <= stopped_at < 24 and run.resumed_steps == [stopped_at + 1]
    log = (worker / "run-logs" / f"{run.pk}.log").read_text()
    assert f"pre-empted by root at step {stopped_at}; back in the queue" in log
    assert f"resume: attempt 2, from the checkpoint of step {stopped_at}; steps {stopped_at + 1}-24" in log
    assert not run.preempt_requested and run.dispatched_at is not None


def test_a_running_run_deleted_stops_and_leaves_no_file(worker, make_run):
    """Delete while the controller trains: the run is cancelled, its rows and folder go at once, the
    controller writes no further step, and what its last step left (the cancel's checkpoint) is removed
    by the worker when the task ends."""
    from runs.manage import delete_run
    from runs.run_log import log_path

    run = make_run(steps=200, every=50)
    stack.wait_for(lambda: Run.objects.get(pk=run.pk).step >= 2, 30, "two steps")
    delete_run(Run.objects.get(pk=run.pk))
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not MetricPoint.objects.filter(run_id=run.pk).exists()
    folder, log = worker / "runs" / str(run.pk), worker / "run-logs" / f"{run.pk}.log"
    stack.wait_for(lambda: "'deleted'" in (worker / "celery.log").read_text(), 30, "the task to end")
    # On a busy machine the 4 s lease can run out mid-step and a second controller take the run over;
    # each controller removes what it wrote when its task ends, so wait for the last of them.
    with contextlib.suppress(AssertionError):  # the assert below lists what is left
        stack.wait_for(lambda: not folder.exists() and not log.exists(), 30, "the run's files to go")
    assert not folder.exists() and not log.exists(), list(folder.rglob("*")) if folder.exists() else log
    assert not MetricPoint.objects.filter(run_id=run.pk).exists()
    assert log_path(run.pk).name == log.name


def test_a_run_whose_worker_died_is_taken_over_and_resumed(worker, make_run):
    run = make_run(steps=4)
    run = final(run)
    # as if a worker had died at step 2 after its checkpoint: still "running", lease run out
    Run.objects.filter(pk=run.pk).update(
        status=Status.RUNNING,
        lease_owner="dead-worker",
        lease_expires=timezone.now() - timedelta(seconds=1),
        step=2,
        finished_at=None,
    )
    MetricPoint.objects.filter(run=run, step__gt=2).delete()
    for extra in (3, 4):  # the dead worker never wrote these checkpoints
        for p in (worker / "runs" / str(run.pk) / "checkpoints").glob(f"step_{extra:06d}"):
            (p / "trainer.json").unlink()
            p.rmdir()
    dispatch.send("launch_run", run.pk)
    run = stack.wait_for(
        lambda: (r := Run.objects.get(pk=run.pk)).status == Status.SUCCEEDED and r, 60, "the takeover"
    )
    assert run.attempts == 2 and steps_of(run) == [1, 2, 3, 4]
    assert invocations(worker, run)[-1] == {**invocations(worker, run)[-1], "resume": True, "start_step": 3}


def test_a_cancelled_queued_run_is_never_started(worker, make_run):
    queued = make_run(steps=3)
    run = Run.objects.create(owner=queued.owner, name="cancelled while queued", config=queued.config)
    run.request_cancel()  # before its message reaches the worker
    dispatch.send("launch_run", run.pk)
    probe = final(make_run(steps=1))  # the worker has processed both messages once this one is done
    assert probe.status == Status.SUCCEEDED
    assert Run.objects.get(pk=run.pk).status == Status.CANCELLED and invocations(worker, run) == []


def test_a_fork_resumes_from_a_copy_of_its_parents_checkpoint(worker, make_run):
    parent = final(make_run(steps=6, every=2))
    checkpoint = parent.fork_checkpoint(3)  # the latest at or before step 3: step 2
    config = RunConfig.from_dict(parent.config).with_overrides({"algorithm.clip_high": 0.35})
    child = final(parent.fork(owner=parent.owner, name="fork", config=config, checkpoint=checkpoint))
    assert child.status == Status.SUCCEEDED and child.fork_step == 2
    assert invocations(worker, child) == [{**invocations(worker, child)[0], "resume": True, "start_step": 3}]
    assert steps_of(child) == [3, 4, 5, 6]  # the child's own curve continues after the fork step
    assert (worker / "runs" / str(child.pk) / "checkpoints" / "step_000002" / "trainer.json").is_file()
    assert (
        worker / "runs" / str(parent.pk) / "checkpoints" / "step_000002"
    ).is_dir()  # the parent keeps its own


def test_a_failed_runs_log_holds_its_traceback(worker, make_run):
    parent = final(make_run(steps=4, every=2))
    checkpoint = parent.fork_checkpoint(2)
    shutil.rmtree(checkpoint.path)  # pruned before the fork starts
    config = RunConfig.from_dict(parent.config)
    child = final(parent.fork(owner=parent.owner, name="fork", config=config, checkpoint=checkpoint))
    assert child.status == Status.FAILED and "no longer on disk" in child.error
    log = ended_log(
        worker,
        child,
        r"failed at step \d+/4 \(running \d+s, wall [^)]+\): FileNotFoundError: .*no longer on disk",
    )
    assert f"run {child.pk}, attempt 1" in log.splitlines()[0]
    assert "Traceback (most recent call last)" in log and "checkpoint of step 2" in log
