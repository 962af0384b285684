"""Running time apart from wall time: queued and cancelled time never count as running, and the ETA runs
at the running time's pace; the run page and the API show both."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from runs.models import Run, Status
from runs.run_state import run_state

from dapo.loop.report import RunInfo, StepReport

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = timezone.now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(timezone, "now", clock)
    return clock


def steps(run: Run, first: int, last: int, worker: str) -> None:
    for step in range(first, last + 1):
        run.record_step(StepReport(step=step, metrics={"x": 1.0}), worker_id=worker)


def test_time_cancelled_and_queued_is_wall_time_not_running_time(alice_run, clock, api):
    run = alice_run
    assert run.running_s() is None and run_state(run)["running_s"] is None
    run.claim("w1")
    run.start(RunInfo(run_dir="/tmp/x", total_steps=10, start_step=1, config={}))
    clock.advance(minutes=10)
    steps(run, 1, 4, "w1")
    run.record_checkpoint(4, "/tmp/x/checkpoints/step-4", worker_id="w1")
    run.request_cancel()
    run.finish("cancelled", worker_id="w1")
    clock.advance(minutes=33)  # cancelled
    assert run.resume()
    clock.advance(minutes=30)  # queued behind something else
    run.claim("w2")
    run.start(RunInfo(run_dir="/tmp/x", total_steps=10, start_step=5, config={}))
    clock.advance(minutes=5)
    steps(run, 5, 5, "w2")
    run.refresh_from_db()
    assert run.running_s() == pytest.approx(15 * 60)
    assert run.elapsed_s() == pytest.approx(78 * 60)
    assert run.eta_s() == pytest.approx(15 * 60 / 5 * 5)  # 3 min a running step, 5 steps left
    body = api.get(f"/api/runs/{run.pk}/").json()
    assert body["running_s"] == pytest.approx(15 * 60) and body["wall_s"] == pytest.approx(78 * 60)
    assert body["eta_s"] == pytest.approx(15 * 60)
    state = run_state(run)
    assert state["running_s"] == pytest.approx(15 * 60) and state["elapsed_s"] == pytest.approx(78 * 60)
    clock.advance(minutes=1)
    steps(run, 6, 10, "w2")
    run.finish("succeeded", worker_id="w2")
    clock.advance(hours=2)  # a finished run's times stand still
    run.refresh_from_db()
    assert run.running_s() == pytest.approx(16 * 60) and run.elapsed_s() == pytest.approx(79 * 60)
    assert run.eta_s() is None


def test_a_dead_workers_attempt_runs_until_its_last_heartbeat(alice_run, clock, settings):
    run = alice_run
    run.claim("w1")
    clock.advance(minutes=2)
    assert run.renew_lease("w1")  # the last heartbeat
    clock.advance(seconds=settings.DAPO_LEASE_SECONDS + 60)  # dead: the lease runs out
    assert Run.requeue_expired() == [run.pk]
    run.refresh_from_db()
    assert run.status == Status.QUEUED and run.running_s() == pytest.approx(120)
    clock.advance(minutes=10)  # queued
    run.claim("w2")
    clock.advance(minutes=1)
    run.refresh_from_db()
    assert run.running_s() == pytest.approx(180)


def test_the_run_page_shows_running_and_wall_time_apart(alice_client, alice_run):
    html = alice_client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert 'id="running"' in html and ">Running<" in html and ">Wall<" in html
