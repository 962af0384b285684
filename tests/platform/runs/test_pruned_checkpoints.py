"""Forks and resumes start only from checkpoints still on disk: ``checkpoint.keep_last`` prunes the older
ones while their rows stay; a fork from a pruned one used to be offered, queued, and fail in the worker."""

from __future__ import annotations

import re
import shutil

import pytest
from rest_framework.test import APIClient
from runs.models import Run, Status

from dapo.runconfig.presets import get_preset

pytestmark = pytest.mark.django_db


def _saved(tmp_path, step):
    folder = tmp_path / "ckpt" / f"step_{step:06d}"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"weights")
    return str(folder)


@pytest.fixture
def pruned_parent(alice_run, tmp_path):
    """alice's run saved steps 10..60 and kept the last two (keep_last=2): 50 and 60 are on disk."""
    alice_run.claim("w")
    for step in range(10, 70, 10):
        alice_run.record_checkpoint(step, _saved(tmp_path, step), worker_id="w")
    for step in range(10, 50, 10):
        shutil.rmtree(tmp_path / "ckpt" / f"step_{step:06d}")
    alice_run.finish("succeeded", worker_id="w")
    return alice_run


def _fork_form(paths, checkpoint_pk, name="forked"):
    from runs.forms import presets_data

    values = {k: v for k, v in presets_data()["tiny_cpu"]["values"].items() if v is not False}
    values = {k: ("on" if v is True else v) for k, v in values.items()}
    return {**values, **paths, "name": name, "preset": "tiny_cpu", "checkpoint": str(checkpoint_pk)}


def test_the_fork_form_offers_only_checkpoints_on_disk_and_names_the_pruned(alice_client, pruned_parent):
    html = alice_client.get(f"/runs/new/?fork={pruned_parent.pk}").content.decode()
    menu = re.search(r'<select id="f-checkpoint".*?</select>', html, re.S).group(0)
    assert re.findall(r">step (\d+)</option>", menu) == ["60", "50"]
    assert "not offered: steps 40, 30, 20, 10." in html


def test_a_fork_from_a_checkpoint_pruned_after_the_form_was_shown_is_refused(
    alice_client, pruned_parent, paths, queued
):
    gone = pruned_parent.checkpoints.get(step=20)
    response = alice_client.post(f"/runs/new/?fork={pruned_parent.pk}", _fork_form(paths, gone.pk))
    assert response.status_code == 400
    assert "checkpoint of step 20 is no longer on disk" in response.content.decode()
    assert not Run.objects.filter(name="forked").exists() and queued == []


def _fork_of_pruned_step(pruned_parent, alice):
    config = get_preset("tiny_cpu").with_overrides({"optim.total_steps": 10})
    child = Run.objects.create(
        owner=alice,
        name="child",
        config=config.to_dict(),
        parent=pruned_parent,
        fork_step=20,
        source_checkpoint=pruned_parent.checkpoints.get(step=20).path,
        status=Status.FAILED,
    )
    return child


def test_resume_of_a_fork_whose_source_was_pruned_says_why_and_queues_nothing(
    alice_client, pruned_parent, alice, queued, django_capture_on_commit_callbacks
):
    child = _fork_of_pruned_step(pruned_parent, alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(f"/runs/{child.pk}/resume/", follow=True)
    html = response.content.decode()
    assert "Resumed from" not in html and "step 20 that this fork starts from is no longer on disk" in html
    assert Run.objects.get(pk=child.pk).status == Status.FAILED and queued == []


def test_the_api_refuses_that_resume_with_409_and_the_reason(pruned_parent, alice, queued):
    child = _fork_of_pruned_step(pruned_parent, alice)
    api = APIClient()
    api.force_authenticate(alice)
    response = api.post(f"/api/runs/{child.pk}/resume/")
    assert response.status_code == 409 and "no longer on disk" in response.json()["detail"]
    assert Run.objects.get(pk=child.pk).status == Status.FAILED


def test_resume_names_the_step_it_really_starts_from(
    alice_client, alice_run, tmp_path, queued, django_capture_on_commit_callbacks
):
    """The recorded newest checkpoint was deleted by hand: the worker resumes from the newest left."""
    alice_run.claim("w")
    alice_run.record_checkpoint(3, _saved(tmp_path, 3), worker_id="w")
    alice_run.record_checkpoint(6, _saved(tmp_path, 6), worker_id="w")
    shutil.rmtree(tmp_path / "ckpt" / "step_000006")
    alice_run.finish("failed", "boom", worker_id="w")
    with django_capture_on_commit_callbacks(execute=True):
        html = alice_client.post(f"/runs/{alice_run.pk}/resume/", follow=True).content.decode()
    assert "Resumed from the checkpoint of step 3." in html
    assert queued[-1] == ("launch_run", alice_run.pk)
