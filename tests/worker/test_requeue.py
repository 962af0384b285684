"""A pre-empted run, and one whose Ray node died, go back to the queue instead of finishing (the sink's
``on_finish``, called directly as the trainer calls it); past DAPO_NODE_LOSS_REQUEUES a node loss fails."""

from __future__ import annotations

import pytest
from runs.models import Run, Status

from tests.platform.support import report
from worker import sink as sink_module
from worker.sink import PlatformSink

pytestmark = pytest.mark.django_db


@pytest.fixture
def claimed(alice_run: Run) -> Run:
    Run.objects.filter(pk=alice_run.pk).update(dispatched_at=alice_run.created_at)
    assert alice_run.claim("worker-1")
    return alice_run


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(sink_module, "say", lines.append)
    return lines


def test_staff_preemption_stops_the_trainer_at_the_next_poll(claimed):
    sink = PlatformSink(claimed, "worker-1")
    assert not sink.should_stop()
    claimed.request_preempt("root")
    sink._polled_at = 0.0  # the next poll reads the row
    assert sink.should_stop()


def test_a_preempted_run_goes_back_to_the_queue_with_its_lease_released(
    claimed, said, queued, django_capture_on_commit_callbacks
):
    sink = PlatformSink(claimed, "worker-1")
    sink.on_step(report(1))
    sink.on_step(report(2))
    claimed.request_preempt("root")
    entered = claimed.queued_at
    with django_capture_on_commit_callbacks(execute=True):
        sink.on_finish("cancelled")
    run = Run.objects.get(pk=claimed.pk)
    assert (run.status, run.lease_owner, run.running_since) == (Status.QUEUED, "", None)
    assert run.preemptions == 1 and not run.preempt_requested and run.finished_at is None
    assert run.queued_at > entered and run.run_seconds > 0
    assert said[-1] == "pre-empted by root at step 2; back in the queue"
    # it re-entered the queue (dispatched_at cleared) and the pass sent it again: nothing else waited
    assert queued == [("launch_run", run.pk)] and run.dispatched_at > run.queued_at


def test_a_cancel_wins_over_a_preemption(claimed, said):
    claimed.request_preempt("root")
    claimed.request_cancel()
    PlatformSink(claimed, "worker-1").on_finish("cancelled")
    run = Run.objects.get(pk=claimed.pk)
    assert run.status == Status.CANCELLED and run.preemptions == 0 and not run.preempt_requested


def test_a_plain_cancel_or_failure_still_finishes(claimed, said):
    PlatformSink(claimed, "worker-1").on_finish("failed", "ValueError: bad reward")
    run = Run.objects.get(pk=claimed.pk)
    assert run.status == Status.FAILED and run.node_losses == 0


def test_a_lost_node_requeues_the_run_up_to_the_limit_then_it_fails_saying_why(alice_run, said, settings):
    settings.DAPO_NODE_LOSS_REQUEUES = 2
    error = "NodeLost: node 7f3a (10.0.0.2) died while it held the learner's placement group"
    for attempt in (1, 2):
        Run.objects.filter(pk=alice_run.pk).update(dispatched_at=alice_run.created_at)
        assert Run.objects.get(pk=alice_run.pk).claim(f"worker-{attempt}")
        PlatformSink(Run.objects.get(pk=alice_run.pk), f"worker-{attempt}").on_finish("failed", error)
        run = Run.objects.get(pk=alice_run.pk)
        assert (run.status, run.node_losses, run.error) == (Status.QUEUED, attempt, "")
        assert said[-1] == f"a Ray node was lost at step 0 ({error}); back in the queue ({attempt} of 2)"
    Run.objects.filter(pk=alice_run.pk).update(dispatched_at=alice_run.created_at)
    assert Run.objects.get(pk=alice_run.pk).claim("worker-3")
    PlatformSink(Run.objects.get(pk=alice_run.pk), "worker-3").on_finish("failed", error)
    run = Run.objects.get(pk=alice_run.pk)
    assert run.status == Status.FAILED and run.node_losses == 2
    assert run.error.startswith(error) and "lost a Ray node 3 times" in run.error
    assert "DAPO_NODE_LOSS_REQUEUES=2" in run.error


def test_a_node_loss_is_recognised_by_the_engines_check() -> None:
    from dapo.cluster.backends import NodeLost

    assert sink_module.node_lost(f"{NodeLost.__name__}: node x died") and not sink_module.node_lost(
        "ValueError: x"
    )
    assert not sink_module.node_lost(None) and not sink_module.node_lost("RuntimeError: NodeLost: quoted")
