"""What a worker does at start and before it trains, without a Celery process."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.utils import timezone
from runs.models import Run, Status

from worker import tasks

pytestmark = pytest.mark.django_db


def test_at_start_a_worker_requeues_runs_whose_lease_ran_out_and_starts_its_reaper(
    alice_run, queued, monkeypatch, settings, django_capture_on_commit_callbacks
):
    started: list[tuple[str, float]] = []
    # stand-ins: a real thread of either would outlive the test in this process and query the database
    for name in ("Reaper", "Notifier"):
        monkeypatch.setattr(
            tasks, name, lambda s, n=name: SimpleNamespace(start=lambda: started.append((n, s)))
        )
        monkeypatch.setattr(tasks, name.upper(), None)
    alice_run.claim("dead")
    live = Run.objects.create(owner=alice_run.owner, name="live", config=alice_run.config)
    live.claim("alive")
    Run.objects.filter(pk=alice_run.pk).update(lease_expires=timezone.now() - timedelta(seconds=5))
    queued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tasks.recover_orphans()
    assert queued == [("launch_run", alice_run.pk)]
    alice_run.refresh_from_db()
    assert (alice_run.status, alice_run.lease_owner, alice_run.lease_expires) == (Status.QUEUED, "", None)
    assert Run.objects.get(pk=live.pk).lease_owner == "alive"
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.reap() == [] and len(queued) == 1  # a second pass does not queue it twice
    assert started == [
        ("Reaper", settings.DAPO_REAPER_INTERVAL_S),
        ("Notifier", settings.DAPO_NOTIFY_INTERVAL_S),
    ]


def test_the_reaper_cancels_instead_of_requeueing_a_dead_run_whose_cancel_was_requested(
    alice_run, queued, django_capture_on_commit_callbacks
):
    alice_run.claim("dead")
    alice_run.request_cancel()
    Run.objects.filter(pk=alice_run.pk).update(lease_expires=timezone.now() - timedelta(seconds=5))
    queued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.reap() == [] and queued == []
    alice_run.refresh_from_db()
    assert alice_run.status == Status.CANCELLED and alice_run.finished_at is not None


def test_a_fresh_start_never_inherits_files_of_a_reused_run_id(alice_run, settings, tmp_path):
    out = Path(settings.DAPO_RUNS_DIR) / str(alice_run.pk)
    (out / "checkpoints" / "step_000009").mkdir(parents=True)
    assert tasks.prepare_start(alice_run, out) is None
    assert not any(out.iterdir())
    assert list(out.parent.glob(f"{alice_run.pk}.stale-*"))


def test_relative_paths_are_resolved_from_the_repository_root(alice_run, settings):
    settings.DAPO_MODEL_ROOTS = [Path(settings.BASE_DIR) / "assets"]  # the default root of the demo model
    Run.objects.filter(pk=alice_run.pk).update(
        config={**alice_run.config, "model": {**alice_run.config["model"], "path": "assets/demo/model"}}
    )
    alice_run.refresh_from_db()
    config = tasks.resolved_config(alice_run)
    assert config.model.path == str(Path(settings.BASE_DIR) / "assets" / "demo" / "model")
    assert alice_run.status == Status.QUEUED


def test_a_fork_whose_parent_checkpoint_was_pruned_fails_at_start_saying_so(alice_run, settings, tmp_path):
    config = dict(alice_run.config)
    child = Run.objects.create(
        owner=alice_run.owner,
        name="child",
        config=config,
        parent=alice_run,
        fork_step=20,
        source_checkpoint=str(tmp_path / "gone" / "checkpoints" / "step_000020"),
    )
    with pytest.raises(FileNotFoundError, match="checkpoint of step 20 .* is no longer on disk"):
        tasks.prepare_start(child, Path(settings.DAPO_RUNS_DIR) / str(child.pk))
