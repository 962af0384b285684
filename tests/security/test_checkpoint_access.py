"""A run shared read-only lends its curves, never its weights: every path that reads a run's checkpoints
(fork form GET and POST, evaluation from a checkpoint by the page and the API, export by the page and
the API, resume) needs write access (``runs.access``, ``checkpoints=True``). A reader gets a 403 that
says the run is shared read-only, a stranger a 404 (or the missing run's 400), and nothing is queued.
The reader's run page offers none of those actions; clone-and-edit of the config stays open to readers
and copies no checkpoint reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from catalog.models import Dataset
from runs.models import ModelExport, Run

from tests.platform.fixtures import make_user
from tests.platform.runs.test_views import _form

pytestmark = pytest.mark.django_db

CHECKPOINT_WORDS = b"shared with you read-only"


def _saved(tmp_path: Path, step: int) -> str:
    """A checkpoint folder as the trainer leaves it (its weights in state.pt)."""
    folder = tmp_path / "ckpt" / f"step_{step:06d}"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"weights")
    return str(folder)


@pytest.fixture
def shared_run(alice_run: Run, bob: Any, tmp_path: Path) -> Run:
    """alice's run with two checkpoints on disk, shared read-only with bob by name."""
    for step in (2, 4):
        alice_run.record_checkpoint(step, _saved(tmp_path, step))
    alice_run.shared_users.add(bob)
    return alice_run


@pytest.fixture
def carol_client(django_user_model: Any) -> Any:
    """A stranger: logged in, the run not shared with her."""
    from django.test import Client

    client = Client()
    client.force_login(make_user(django_user_model, "carol", "carol-pass-123"))
    return client


@pytest.fixture
def dataset(paths: dict[str, str]) -> Dataset:
    return Dataset.objects.create(
        name="arith", path=paths["data.train_path"], val_path=paths["data.val_path"]
    )


def _fork_post(shared_run: Run, paths: dict[str, str]) -> dict[str, str]:
    checkpoint = shared_run.checkpoints.get(step=4)
    return _form(paths, name="stolen weights", checkpoint=str(checkpoint.pk))


def test_reader_cannot_open_or_post_the_fork_form(shared_run, bob_client, carol_client, paths, queued):
    url = f"/runs/new/?fork={shared_run.pk}"
    page = bob_client.get(url)
    assert page.status_code == 403 and CHECKPOINT_WORDS in page.content
    posted = bob_client.post(url, _fork_post(shared_run, paths))
    assert posted.status_code == 403 and CHECKPOINT_WORDS in posted.content
    assert carol_client.get(url).status_code == 404
    assert carol_client.post(url, _fork_post(shared_run, paths)).status_code == 404
    assert not Run.objects.filter(name="stolen weights").exists() and queued == []


def test_the_owner_still_forks_her_run(shared_run, alice_client, paths, queued):
    response = alice_client.post(f"/runs/new/?fork={shared_run.pk}", _fork_post(shared_run, paths))
    child = Run.objects.get(name="stolen weights")
    assert response.status_code == 302 and child.parent_id == shared_run.pk and child.fork_step == 4


def test_reader_cannot_evaluate_a_shared_runs_checkpoint(shared_run, bob, bob_api, bob_client, dataset):
    body = {"name": "eval of stolen", "checkpoint": {"run": shared_run.pk, "step": 4}, "datasets": ["arith"]}
    response = bob_api.post("/api/evaluations/", body, format="json")
    assert response.status_code == 403 and "read-only" in response.json()["detail"], response.json()
    form = {"name": "eval of stolen", "checkpoint": f"{shared_run.pk}:4", "datasets": [dataset.pk]}
    page = bob_client.post("/runs/evaluate/", form)
    assert page.status_code == 403 and CHECKPOINT_WORDS in page.content
    assert not Run.objects.filter(name="eval of stolen").exists()
    offered = bob_client.get("/runs/evaluate/").content.decode()
    assert f'value="{shared_run.pk}:4"' not in offered  # the form lists checkpoints of his own runs only


def test_a_stranger_evaluating_a_checkpoint_learns_nothing(shared_run, carol_client, dataset):
    body = {"name": "x", "checkpoint": {"run": shared_run.pk, "step": 4}, "datasets": ["arith"]}
    stranger = carol_client.post("/api/evaluations/", json.dumps(body), content_type="application/json")
    body["checkpoint"]["run"] = 999_999
    missing = carol_client.post("/api/evaluations/", json.dumps(body), content_type="application/json")
    assert stranger.status_code == missing.status_code == 400
    assert stranger.json()["errors"]["checkpoint"].replace(str(shared_run.pk), "N") == missing.json()[
        "errors"
    ]["checkpoint"].replace("999999", "N")


def test_reader_cannot_export_or_resume_a_shared_run(shared_run, bob_api, bob_client):
    shared_run.request_cancel()  # resumable: cancelled, with a checkpoint
    export = bob_api.post(f"/api/runs/{shared_run.pk}/export/", {"step": 4}, format="json")
    assert export.status_code == 403 and "read-only" in export.json()["detail"]
    page = bob_client.post(f"/runs/{shared_run.pk}/export/", {"step": "4"})
    assert page.status_code == 403 and CHECKPOINT_WORDS in page.content
    resume = bob_api.post(f"/api/runs/{shared_run.pk}/resume/")
    assert resume.status_code == 403 and "read-only" in resume.json()["detail"]
    assert bob_client.post(f"/runs/{shared_run.pk}/resume/").status_code == 403
    assert not ModelExport.objects.exists() and Run.objects.get(pk=shared_run.pk).status == "cancelled"


def test_readers_run_page_offers_no_checkpoint_action(shared_run, bob_client, alice_client):
    owner = alice_client.get(f"/runs/{shared_run.pk}/").content.decode()
    assert 'id="fork-btn"' in owner and 'id="export-form"' in owner  # the owner's page has them
    page = bob_client.get(f"/runs/{shared_run.pk}/").content.decode()
    assert 'id="fork-btn"' not in page and f"?fork={shared_run.pk}" not in page
    assert 'id="export-form"' not in page and 'id="resume-form"' not in page
    assert 'href="/runs/new/?from=' in page  # clone-and-edit of the config stays


def test_reader_clones_the_config_without_any_checkpoint(shared_run, bob, bob_client, paths, queued):
    page = bob_client.get(f"/runs/new/?from={shared_run.pk}")
    html = page.content.decode()
    assert page.status_code == 200 and 'name="checkpoint"' not in html and "step_000004" not in html
    form = _form(paths, name="bob's clone", checkpoint=str(shared_run.checkpoints.get(step=4).pk))
    response = bob_client.post(f"/runs/new/?from={shared_run.pk}", form)
    clone = Run.objects.get(name="bob's clone")
    assert response.status_code == 302 and clone.owner == bob
    assert (clone.parent_id, clone.fork_step, clone.source_checkpoint, clone.last_checkpoint) == (
        None,
        None,
        "",
        "",
    )
    assert "ckpt" not in json.dumps(clone.config)
