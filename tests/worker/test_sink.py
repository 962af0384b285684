"""The platform sink, called directly as the trainer calls it (the in-memory channel layer receives)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import InterfaceError, OperationalError
from runs.events import group_name
from runs.models import Checkpoint, MetricPoint, Run, Sample, Status

from dapo.loop.report import RunInfo
from tests.platform.support import report
from worker import sink as sink_module
from worker.sink import PlatformSink

pytestmark = pytest.mark.django_db


@pytest.fixture
def claimed(alice_run: Run) -> Run:
    assert alice_run.claim("worker-1")
    return alice_run


@pytest.fixture
def listener(claimed: Run) -> Any:
    """Receives what the sink publishes to the run's group."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(claimed.pk), channel)
    return lambda: async_to_sync(layer.receive)(channel)["event"]


def _info(start_step: int = 1) -> RunInfo:
    return RunInfo(run_dir="/tmp/x", total_steps=10, start_step=start_step, config={})


def test_a_step_lands_in_the_database_then_in_the_group(claimed, listener):
    sink = PlatformSink(claimed, "worker-1")
    sink.on_start(_info())
    assert listener()["run"]["status"] == "running"
    sink.on_step(report(1, n_samples=30))
    event = listener()
    assert event["type"] == "step" and event["step"] == 1 and event["metrics"]["critic/score/mean"] == 0.1
    assert len(event["samples"]) == 24  # the event carries the first few; the database has all
    assert Sample.objects.filter(run=claimed).count() == 30
    assert MetricPoint.objects.filter(run=claimed, step=1).count() == 2
    claimed.refresh_from_db()
    assert (claimed.step, claimed.total_steps) == (1, 10) and claimed.lease_expires is not None


def test_checkpoints_and_the_final_status_are_recorded_and_published(claimed, listener):
    sink = PlatformSink(claimed, "worker-1")
    for step in (1, 2):
        sink.on_step(report(step))
        assert listener()["step"] == step
    sink.on_checkpoint(2, "/runs/1/checkpoints/step_000002")
    assert listener()["run"]["last_checkpoint_step"] == 2
    sink.on_finish("succeeded")
    assert listener()["run"]["status"] == "succeeded"
    assert Checkpoint.objects.get(run=claimed).step == 2
    claimed.refresh_from_db()
    assert claimed.status == Status.SUCCEEDED and claimed.lease_owner == ""


def test_should_stop_once_a_cancel_is_requested(claimed, monkeypatch):
    monkeypatch.setattr(sink_module, "STOP_POLL_INTERVAL_S", 0.0)
    sink = PlatformSink(claimed, "worker-1")
    assert not sink.should_stop()
    Run.objects.get(pk=claimed.pk).request_cancel()
    assert sink.should_stop()


def test_should_stop_when_another_worker_took_the_lease(claimed, monkeypatch):
    monkeypatch.setattr(sink_module, "STOP_POLL_INTERVAL_S", 0.0)
    sink = PlatformSink(claimed, "worker-1")
    Run.objects.filter(pk=claimed.pk).update(lease_owner="worker-2")
    assert sink.should_stop()
    sink.on_finish("failed", "stale controller")
    assert Run.objects.get(pk=claimed.pk).status == Status.RUNNING  # the new owner's run is untouched


def test_should_stop_polls_the_database_at_most_every_interval(claimed, django_assert_max_num_queries):
    sink = PlatformSink(claimed, "worker-1")
    with django_assert_max_num_queries(1):
        for _ in range(50):
            sink.should_stop()


def test_a_checkpoint_is_recorded_only_once_its_step_is_in_the_database(claimed):
    """The trainer saves step 2's checkpoint before it reports step 2: recorded at once, a worker dying in
    between would resume after step 2 and leave it out of the curves."""
    sink = PlatformSink(claimed, "worker-1")
    sink.on_step(report(1))
    sink.on_checkpoint(2, "/runs/1/checkpoints/step_000002")
    assert Run.objects.get(pk=claimed.pk).last_checkpoint_step is None
    assert not Checkpoint.objects.filter(run=claimed).exists()
    sink.on_step(report(2))
    assert Run.objects.get(pk=claimed.pk).last_checkpoint_step == 2
    assert list(Checkpoint.objects.filter(run=claimed).values_list("step", flat=True)) == [2]


def test_a_controller_that_lost_its_lease_writes_nothing_and_stops(claimed):
    sink = PlatformSink(claimed, "worker-1")
    sink.on_step(report(1))
    Run.objects.filter(pk=claimed.pk).update(lease_owner="worker-2")  # taken over while this one froze
    sink.on_step(report(2, value=0.99))
    sink.on_checkpoint(2, "/runs/1/checkpoints/step_000002")
    assert sink.should_stop()
    assert list(MetricPoint.objects.filter(run=claimed).values_list("step", flat=True).distinct()) == [1]
    run = Run.objects.get(pk=claimed.pk)
    assert (run.step, run.last_checkpoint_step, run.lease_owner) == (1, None, "worker-2")


def test_checkpoint_files_are_allowed_only_while_the_lease_is_held(claimed, monkeypatch):
    sink = PlatformSink(claimed, "worker-1")
    assert sink.may_save_checkpoint()
    Run.objects.filter(pk=claimed.pk).update(lease_owner="worker-2")  # taken over while this one froze
    assert not sink.may_save_checkpoint()
    assert sink.lease_lost  # and the trainer stops at the step boundary


def test_a_checkpoint_goes_ahead_when_the_database_cannot_say_who_owns_the_run(claimed, monkeypatch):
    sink = PlatformSink(claimed, "worker-1")

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(Run.objects, "filter", unreachable)
    assert sink.may_save_checkpoint()


@pytest.mark.parametrize("error", [OperationalError("database is locked"), InterfaceError("closed")])
def test_a_brief_database_outage_is_retried_not_lost(claimed, monkeypatch, error):
    monkeypatch.setattr(sink_module, "DB_RETRY_FIRST_DELAY_S", 0.0)
    real = Run.record_step
    failures = iter([error, error])

    def flaky(self, rep, **kw):
        if (err := next(failures, None)) is not None:
            raise err
        return real(self, rep, **kw)

    monkeypatch.setattr(Run, "record_step", flaky)
    PlatformSink(claimed, "worker-1").on_step(report(1))
    assert MetricPoint.objects.filter(run=claimed, step=1).count() == 2


def test_a_database_outage_longer_than_the_retry_window_raises(claimed, monkeypatch, settings):
    settings.DAPO_DB_RETRY_S = 0.3
    monkeypatch.setattr(sink_module, "DB_RETRY_FIRST_DELAY_S", 0.05)
    calls: list[float] = []

    def down(self, rep, **kw):
        calls.append(time.monotonic())
        raise OperationalError("connection refused")

    monkeypatch.setattr(Run, "record_step", down)
    with pytest.raises(OperationalError):
        PlatformSink(claimed, "worker-1").on_step(report(1))
    assert 3 <= len(calls) <= 5 and calls[-1] - calls[0] <= 0.3  # 0.05, 0.1 then 0.2 would pass the window


def test_a_publish_failure_does_not_fail_the_step(claimed, monkeypatch):
    class Broken:
        async def group_send(self, *a):
            raise ConnectionError("redis restarting")

    monkeypatch.setattr("runs.events.get_channel_layer", lambda: Broken())
    PlatformSink(claimed, "worker-1").on_step(report(1))
    assert Run.objects.get(pk=claimed.pk).step == 1
