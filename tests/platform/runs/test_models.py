from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.utils import timezone
from runs.access import visible_runs
from runs.models import Checkpoint, MetricPoint, Run, Sample, Status

from tests.platform.fixtures import make_user
from tests.platform.support import report, sample

pytestmark = pytest.mark.django_db


def test_a_new_run_is_queued_and_its_task_sent_on_commit(
    alice_run, queued, django_capture_on_commit_callbacks
):
    assert alice_run.status == Status.QUEUED
    assert alice_run.total_steps == 10
    assert queued == []  # not before the transaction commits
    with django_capture_on_commit_callbacks(execute=True):
        second = Run.create_queued(owner=alice_run.owner, name="second", config=_config(alice_run))
    # the scheduler's pass sends every waiting run that fits, in order: the first one's commit never ran
    assert queued == [("launch_run", alice_run.pk), ("launch_run", second.pk)]


def test_claim_is_exclusive(alice_run):
    assert alice_run.claim("worker-a")
    assert not Run.objects.get(pk=alice_run.pk).claim("worker-b")
    alice_run.refresh_from_db()
    assert (alice_run.status, alice_run.lease_owner, alice_run.attempts) == (Status.RUNNING, "worker-a", 1)


def test_an_expired_lease_can_be_claimed_by_another_worker(alice_run):
    alice_run.claim("worker-a")
    Run.objects.filter(pk=alice_run.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))
    assert alice_run.claim("worker-b")
    assert not alice_run.renew_lease("worker-a")
    assert alice_run.renew_lease("worker-b")
    assert alice_run.attempts == 2


def test_a_finished_or_cancelled_run_cannot_be_claimed(alice_run):
    alice_run.request_cancel()
    assert not alice_run.claim("worker-a")
    assert alice_run.status == Status.CANCELLED


def test_record_step_writes_metrics_samples_and_progress(alice_run):
    alice_run.record_step(report(3, n_samples=4, **{"actor__pg_clipfrac": 0.01}))
    alice_run.refresh_from_db()
    assert alice_run.step == 3
    assert alice_run.latest_metrics["actor/pg_clipfrac"] == 0.01
    assert MetricPoint.objects.filter(run=alice_run, step=3).count() == 3
    assert Sample.objects.filter(run=alice_run, step=3).count() == 4


def test_a_replayed_step_never_duplicates_rows_and_keeps_the_newest_values(alice_run):
    alice_run.record_step(report(1, value=0.1))
    alice_run.record_step(report(2))
    alice_run.record_step(report(1, value=0.7))  # redelivered, or recomputed after a resume
    assert MetricPoint.objects.filter(run=alice_run).count() == 4
    assert Sample.objects.filter(run=alice_run).count() == 8
    assert MetricPoint.objects.get(run=alice_run, step=1, name="critic/score/mean").value == 0.7


def test_a_step_is_written_whole_or_not_at_all(alice_run):
    bad = report(5)
    bad.samples.append(sample(5, 99, prompt=None))  # NOT NULL violation after the metrics were inserted
    with pytest.raises(IntegrityError):
        alice_run.record_step(bad)
    assert not MetricPoint.objects.filter(run=alice_run, step=5).exists()
    assert Run.objects.get(pk=alice_run.pk).step == 0


def test_non_finite_metrics_are_stored_as_null(alice_run):
    alice_run.record_step(report(1, **{"actor__grad_norm": float("nan"), "actor__lr": float("inf")}))
    values = dict(MetricPoint.objects.filter(run=alice_run, step=1).values_list("name", "value"))
    assert values["actor/grad_norm"] is None and values["actor/lr"] is None


def test_cancel_of_a_queued_run_is_immediate(alice_run):
    assert alice_run.request_cancel() == "cancelled"
    assert alice_run.status == Status.CANCELLED and alice_run.finished_at is not None


def test_cancel_of_a_running_run_waits_for_the_step_boundary(alice_run):
    alice_run.claim("w")
    assert alice_run.request_cancel() == "cancelling"
    assert alice_run.status == Status.RUNNING and alice_run.cancel_requested
    assert alice_run.cancel_requested_now()
    assert alice_run.finish("cancelled", worker_id="w")
    assert alice_run.status == Status.CANCELLED and alice_run.lease_owner == ""


def test_a_worker_that_lost_its_lease_cannot_finish_the_run(alice_run):
    alice_run.claim("w1")
    Run.objects.filter(pk=alice_run.pk).update(lease_owner="w2")
    assert not alice_run.finish("failed", "boom", worker_id="w1")
    assert alice_run.status == Status.RUNNING


def test_finish_rejects_a_status_that_is_not_final(alice_run):
    with pytest.raises(ValueError, match="final status"):
        alice_run.finish("running")


def test_resume_needs_a_checkpoint_and_queues_the_run_again(
    alice_run, queued, django_capture_on_commit_callbacks
):
    alice_run.claim("w")
    alice_run.finish("failed", "worker died", worker_id="w")
    assert not alice_run.can_resume and not alice_run.resume()
    alice_run.record_checkpoint(4, "/tmp/ckpt/step_000004")
    assert alice_run.can_resume
    with django_capture_on_commit_callbacks(execute=True):
        assert alice_run.resume()
    assert (alice_run.status, alice_run.error, alice_run.finished_at) == (Status.QUEUED, "", None)
    assert queued[-1] == ("launch_run", alice_run.pk)


def test_fork_starts_from_the_latest_checkpoint_at_or_before_the_step(alice_run, queued):
    for step in (2, 4, 6):
        alice_run.record_checkpoint(step, f"/ckpt/step_{step:06d}")
    checkpoint = alice_run.fork_checkpoint(5)
    assert checkpoint.step == 4
    config = _config(alice_run).with_overrides({"algorithm.clip_high": 0.3})
    child = alice_run.fork(owner=alice_run.owner, name="fork", config=config, checkpoint=checkpoint)
    assert (child.parent, child.fork_step, child.source_checkpoint) == (alice_run, 4, "/ckpt/step_000004")
    assert child.config["algorithm"]["clip_high"] == 0.3 and child.status == Status.QUEUED
    assert Checkpoint.objects.filter(run=alice_run).count() == 3


def test_visible_runs_shows_owners_their_runs_and_superusers_all(alice_run, bob, django_user_model):
    from django.contrib.auth.models import AnonymousUser

    root = make_user(django_user_model, "root", "x", is_superuser=True, is_staff=True)
    assert list(visible_runs(alice_run.owner)) == [alice_run]
    assert list(visible_runs(bob)) == []
    assert list(visible_runs(root)) == [alice_run]
    assert list(visible_runs(AnonymousUser())) == []


def _config(run):
    from dapo.runconfig import RunConfig

    return RunConfig.from_dict(run.config)
