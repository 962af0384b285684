"""The queues (config.queues): training runs on one, exports and evaluations on the short jobs' queue with
a worker slot of its own, so they never wait behind a long run; the names live in one module."""

from __future__ import annotations

from datetime import timedelta

import pytest
from config.queues import queues
from django.utils import timezone
from runs import dispatch
from runs.models import Kind, Run

from dapo.runconfig import RunConfig

pytestmark = pytest.mark.django_db


def test_the_names_and_concurrencies_come_from_one_place():
    named = queues({})
    assert (named.training.name, named.short.name) == ("training", "short")
    assert (named.training.concurrency, named.short.concurrency) == (2, 1)  # two training runs at once
    assert queues({"DAPO_QUEUE": "t-1"}).short.name == "t-1-short"  # a second stack never takes ours
    assert queues({"DAPO_QUEUE": "t-1", "DAPO_SHORT_QUEUE": "q"}).short.name == "q"
    with pytest.raises(ValueError, match="must differ"):
        queues({"DAPO_QUEUE": "same", "DAPO_SHORT_QUEUE": "same"})


def test_the_worker_slots_come_from_the_environment():
    named = queues({"DAPO_TRAINING_CONCURRENCY": "4", "DAPO_SHORT_CONCURRENCY": " 3 "})
    assert (named.training.concurrency, named.short.concurrency) == (4, 3)
    assert queues({"DAPO_TRAINING_CONCURRENCY": "", "DAPO_SHORT_CONCURRENCY": "  "}).training.concurrency == 2


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5", "2x", "1e3"])
@pytest.mark.parametrize("name", ["DAPO_TRAINING_CONCURRENCY", "DAPO_SHORT_CONCURRENCY"])
def test_a_bad_slot_count_is_refused_naming_the_variable_and_the_fix(name, raw):
    with pytest.raises(ValueError, match=rf"^{name}='{raw}' is not a number of worker slots: .*at least 1"):
        queues({name: raw})


def test_exports_and_evaluations_go_to_the_short_queue_training_runs_to_their_own(settings):
    settings.DAPO_QUEUE, settings.DAPO_SHORT_QUEUE = "training-x", ""
    assert dispatch.queue_of("launch_run") == "training-x"
    assert dispatch.queue_of("launch_run", evaluation=True) == "training-x-short"
    assert dispatch.queue_of("export_model") == "training-x-short"
    settings.DAPO_QUEUE, settings.DAPO_SHORT_QUEUE = "training", "quick"
    assert dispatch.queue_of("export_model") == "quick" and dispatch.queue_of("launch_run") == "training"


def test_an_evaluation_run_and_its_requeue_are_sent_to_the_short_queue(
    alice, alice_run, monkeypatch, django_capture_on_commit_callbacks
):
    sent: list[tuple[str, int, bool]] = []
    monkeypatch.setattr(
        dispatch, "send", lambda task, pk, evaluation=False: sent.append((task, pk, evaluation))
    )
    config = RunConfig.from_dict(alice_run.config)
    with django_capture_on_commit_callbacks(execute=True):
        evaluation = Run.create_queued(owner=alice, name="eval", config=config, kind=Kind.EVALUATION)
    assert sent[-1] == ("launch_run", evaluation.pk, True)
    with django_capture_on_commit_callbacks(execute=True):
        alice_run.launch()
    assert sent[-1] == ("launch_run", alice_run.pk, False)
    evaluation.claim("w1")
    Run.objects.filter(pk=evaluation.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert Run.requeue_expired() == [evaluation.pk]
    assert sent[-1] == ("launch_run", evaluation.pk, True)
