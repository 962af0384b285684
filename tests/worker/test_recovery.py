"""What a worker does at start and before it trains, without a Celery process."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from runs.models import Run, Status

from worker import tasks

pytestmark = pytest.mark.django_db


def test_at_start_a_worker_requeues_runs_whose_lease_ran_out(alice_run, monkeypatch):
    sent: list[list[int]] = []
    monkeypatch.setattr(tasks.launch_run, "apply_async", lambda args, queue: sent.append(args))
    alice_run.claim("dead")
    live = Run.objects.create(owner=alice_run.owner, name="live", config=alice_run.config)
    live.claim("alive")
    Run.objects.filter(pk=alice_run.pk).update(lease_expires=timezone.now() - timedelta(seconds=5))
    tasks.recover_orphans()
    assert sent == [[alice_run.pk]]


def test_a_fresh_start_never_inherits_files_of_a_reused_run_id(alice_run, settings, tmp_path):
    out = Path(settings.DAPO_RUNS_DIR) / str(alice_run.pk)
    (out / "checkpoints" / "step_000009").mkdir(parents=True)
    assert tasks.prepare_start(alice_run, out) is False
    assert not any(out.iterdir())
    assert list(out.parent.glob(f"{alice_run.pk}.stale-*"))


def test_relative_paths_are_resolved_from_the_repository_root(alice_run, settings):
    Run.objects.filter(pk=alice_run.pk).update(
        config={**alice_run.config, "model": {**alice_run.config["model"], "path": "assets/demo/model"}}
    )
    alice_run.refresh_from_db()
    config = tasks.resolved_config(alice_run)
    assert config.model.path == str(Path(settings.BASE_DIR) / "assets" / "demo" / "model")
    assert alice_run.status == Status.QUEUED
