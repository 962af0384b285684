"""The platform sink, called directly as the trainer calls it (the in-memory channel layer receives)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import OperationalError
from runs.events import group_name
from runs.models import Checkpoint, MetricPoint, Run, Sample, Status

from dapo.report import RunInfo
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


def test_a_brief_database_outage_is_retried_not_lost(claimed, monkeypatch):
    monkeypatch.setattr(sink_module, "DB_RETRY_DELAYS_S", (0.0, 0.0))
    real = Run.record_step
    failures = iter([OperationalError("database is locked")])

    def flaky(self, rep):
        if (err := next(failures, None)) is not None:
            raise err
        return real(self, rep)

    monkeypatch.setattr(Run, "record_step", flaky)
    PlatformSink(claimed, "worker-1").on_step(report(1))
    assert MetricPoint.objects.filter(run=claimed, step=1).count() == 2


def test_a_publish_failure_does_not_fail_the_step(claimed, monkeypatch):
    class Broken:
        async def group_send(self, *a):
            raise ConnectionError("redis restarting")

    monkeypatch.setattr("runs.events.get_channel_layer", lambda: Broken())
    PlatformSink(claimed, "worker-1").on_step(report(1))
    assert Run.objects.get(pk=claimed.pk).step == 1
