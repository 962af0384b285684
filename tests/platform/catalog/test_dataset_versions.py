"""Dataset versions (a re-upload is the next version, the older stay readable), the record of what a run
read (version and SHA-256, on its page and in the API), and deleting a version (refused while a queued or
running run reads it, only by its creator or an administrator, files of an upload removed)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from catalog.models import Dataset, DatasetRow
from catalog.registry import register_dataset
from catalog.versions import data_record
from runs.models import Run, Status

from dapo.runconfig.presets import get_preset
from tests.platform.fixtures import make_user

pytestmark = pytest.mark.django_db


def _jsonl(*answers: str) -> bytes:
    return "".join(json.dumps({"prompt": f"Compute {a}.", "answer": a}) + "\n" for a in answers).encode()


def _upload(client: Any, content: bytes, name: str = "quiz") -> Any:
    f = io.BytesIO(content)
    f.name = "quiz.jsonl"
    return client.post("/datasets/upload/", {"name": name, "description": "", "train": f})


def _queue(owner: Any, paths: dict[str, str], dataset: Dataset | None = None, **overrides: Any) -> Run:
    config = get_preset("tiny_cpu").with_overrides({**paths, **overrides})
    return Run.create_queued(owner=owner, name="r", config=config, dataset=dataset)


def test_a_reupload_is_the_next_version_and_the_page_lists_every_version(alice_client):
    _upload(alice_client, _jsonl("1", "2"))
    _upload(alice_client, _jsonl("1", "2", "3"))
    v1, v2 = Dataset.objects.order_by("version")
    assert (v1.version, v1.row_count, v2.version, v2.row_count) == (1, 2, 2, 3)
    assert v1.content_hash and v1.content_hash != v2.content_hash
    assert v2.files["train"]["sha256"] == hashlib.sha256(Path(v2.path).read_bytes()).hexdigest()
    page = alice_client.get(f"/datasets/{v1.pk}/").content.decode()  # the old version stays readable
    assert 'id="ds-version">v1<' in page and "Compute 2." in page
    assert f'href="/datasets/{v2.pk}/">v2</a>' in page and v1.content_hash[:12] in page
    listing = alice_client.get("/datasets/").content.decode()  # the list shows the newest of each name
    assert f'href="/datasets/{v2.pk}/"' in listing and f'href="/datasets/{v1.pk}/"' not in listing
    assert "v2 · 2 versions" in listing


def test_a_run_records_the_version_and_hash_it_reads(alice, alice_client, api, paths, queued):
    _upload(alice_client, _jsonl("1"))
    _upload(alice_client, _jsonl("1", "2"))
    v1 = Dataset.objects.get(version=1)
    run = _queue(alice, paths, v1, **{"data.train_path": v1.path, "data.val_path": ""})
    train = run.data_files[0]
    assert train["field"] == "data.train_path" and train["path"] == v1.path
    assert train["sha256"] == v1.files["train"]["sha256"] and train["bytes"] == v1.files["train"]["bytes"]
    assert train["dataset"] == {"id": v1.pk, "name": "quiz", "version": 1, "split": "train", "owner": "alice"}
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<a href="/datasets/{v1.pk}/">quiz v1</a>' in page and train["sha256"][:12] in page
    assert api.get(f"/api/runs/{run.pk}/").json()["data_files"] == run.data_files


def test_a_file_changed_since_registration_is_hashed_by_the_worker_not_the_web(
    tmp_path, alice, paths, queued
):
    file = tmp_path / "data" / "train.jsonl"
    dataset = register_dataset("sums", str(file))
    run = _queue(alice, paths)
    assert run.data_files[0]["dataset"]["version"] == 1  # size and mtime match the catalog: no read
    file.write_bytes(_jsonl("7"))
    os.utime(file, ns=(0, 10**18))
    queued_now = data_record(run.config, read_files=False)[0]
    assert queued_now["sha256"] is None and queued_now["dataset"] is None  # the web does not read files
    at_start = data_record(run.config, read_files=True)[0]
    assert at_start["sha256"] == hashlib.sha256(_jsonl("7")).hexdigest() and at_start["dataset"] is None
    v2 = register_dataset("sums", str(file))
    assert v2.version == 2 and data_record(run.config, read_files=True)[0]["dataset"]["id"] == v2.pk
    assert dataset.rows.count() == 1 and Dataset.objects.get(pk=dataset.pk).files != v2.files


def test_a_missing_file_is_recorded_as_missing(alice, paths, queued, tmp_path):
    run = _queue(alice, paths)
    Path(paths["data.val_path"]).unlink()
    record = data_record(run.config, read_files=True)
    assert record[1]["field"] == "data.val_path" and record[1]["missing"] and record[1]["sha256"] is None


# ---- delete ---------------------------------------------------------------------------------------------


def test_deleting_an_upload_removes_its_rows_and_files_and_keeps_the_runs_record(
    alice, alice_client, paths, queued, settings
):
    _upload(alice_client, _jsonl("1", "2"))
    _upload(alice_client, _jsonl("3"))
    v1, v2 = Dataset.objects.order_by("version")
    run = _queue(alice, paths, v1, **{"data.train_path": v1.path, "data.val_path": ""})
    Run.objects.filter(pk=run.pk).update(status=Status.SUCCEEDED)
    folder = Path(v1.path).parent
    response = alice_client.post(f"/datasets/{v1.pk}/delete/", {"confirm": v1.version})
    assert response.status_code == 302 and response["Location"] == f"/datasets/{v2.pk}/"
    assert not Dataset.objects.filter(pk=v1.pk).exists() and not folder.exists() and Path(v2.path).exists()
    assert DatasetRow.objects.filter(dataset_id=v1.pk).count() == 0
    run.refresh_from_db()
    assert run.dataset is None and run.data_files[0]["dataset"]["version"] == 1
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "quiz v1 <span" in page and "(deleted)" in page
    kept = sorted(p.name for p in (Path(settings.DAPO_VAR_DIR) / "datasets").iterdir())
    assert kept == [Path(v2.path).parent.name, "incoming"]  # nothing of v1 left, not even a parked folder


@pytest.mark.parametrize("by", ["pick", "path", "val_paths"])
def test_a_version_a_queued_or_running_run_reads_is_not_deleted(alice, alice_client, paths, queued, by):
    _upload(alice_client, _jsonl("1"))
    dataset = Dataset.objects.get()
    if by == "pick":
        run = _queue(alice, paths, dataset)
    elif by == "path":
        run = _queue(alice, paths, **{"data.train_path": dataset.path})
    else:
        run = _queue(alice, paths, **{"data.val_paths": [dataset.path]})
    Run.objects.filter(pk=run.pk).update(data_files=[])  # the check must not rest on the record alone
    Run.objects.filter(pk=run.pk).update(status=Status.RUNNING)
    response = alice_client.post(f"/datasets/{dataset.pk}/delete/", {"confirm": dataset.version}, follow=True)
    text = response.content.decode()
    assert "Not deleted: quiz v1 is in use by 1 queued or running run" in text
    assert f"#{run.pk} &#x27;r&#x27; (running)" in text and "nothing was deleted" in text
    assert Dataset.objects.filter(pk=dataset.pk).exists() and Path(dataset.path).exists()
    Run.objects.filter(pk=run.pk).update(status=Status.CANCELLED)
    assert (
        alice_client.post(f"/datasets/{dataset.pk}/delete/", {"confirm": dataset.version}).status_code == 302
    )
    assert not Dataset.objects.exists() and not Path(dataset.path).exists()


def test_another_users_active_run_is_counted_but_not_named(alice_client, bob, paths, queued):
    _upload(alice_client, _jsonl("1"))
    dataset = Dataset.objects.get()
    run = _queue(bob, paths, **{"data.train_path": dataset.path})
    Run.objects.filter(pk=run.pk).update(name="bobs-secret")
    text = alice_client.post(
        f"/datasets/{dataset.pk}/delete/", {"confirm": dataset.version}, follow=True
    ).content.decode()
    assert "in use by 1 queued or running run: 1 run of other users" in text and "bobs-secret" not in text
    assert Dataset.objects.exists()


def test_only_the_creator_or_an_administrator_may_delete(
    alice_client, bob_client, api, bob_api, django_user_model
):
    _upload(alice_client, _jsonl("1"))
    dataset = Dataset.objects.get()
    text = bob_client.post(
        f"/datasets/{dataset.pk}/delete/", {"confirm": dataset.version}, follow=True
    ).content.decode()
    assert "was added by alice: only they or an administrator may delete it" in text
    assert 'id="ds-delete-btn"' not in bob_client.get(f"/datasets/{dataset.pk}/").content.decode()
    refused = bob_api.delete(f"/api/datasets/{dataset.pk}/")
    assert refused.status_code == 403 and "only they or an administrator" in refused.json()["detail"]
    assert Dataset.objects.exists()
    assert api.delete(f"/api/datasets/{dataset.pk}/").status_code == 204 and not Dataset.objects.exists()
    assert api.delete(f"/api/datasets/{dataset.pk}/").status_code == 404


def test_a_registered_versions_files_stay_on_the_server(tmp_path, django_user_model, paths):
    root = make_user(django_user_model, "root", "root-pass-123", is_superuser=True, is_staff=True)
    dataset = register_dataset("sums", paths["data.train_path"])
    from django.test import Client

    client = Client()
    client.force_login(root)
    response = client.post(f"/datasets/{dataset.pk}/delete/", {"confirm": dataset.version}, follow=True)
    assert "Its files were registered from the server and stay where they are." in response.content.decode()
    assert not Dataset.objects.exists() and Path(paths["data.train_path"]).exists()


def test_delete_is_confirmed_by_typing_the_version_number(alice_client, bob_client):
    _upload(alice_client, _jsonl("1", "2"))
    dataset = Dataset.objects.get()
    page = alice_client.get(f"/datasets/{dataset.pk}/")
    assert f'href="/datasets/{dataset.pk}/delete/"' in page.content.decode()  # a link, not a one-click form
    confirm = alice_client.get(f"/datasets/{dataset.pk}/delete/")
    text = confirm.content.decode()
    assert confirm.status_code == 200 and "its 2 problems" in text and 'id="ds-delete-confirm"' in text
    for wrong in ({}, {"confirm": ""}, {"confirm": "2"}, {"confirm": "quiz"}):
        refused = alice_client.post(f"/datasets/{dataset.pk}/delete/", wrong)
        assert (
            refused.status_code == 400
            and "Type the version number, 1, to confirm." in refused.content.decode()
        )
    assert Dataset.objects.exists()
    bob_page = bob_client.get(f"/datasets/{dataset.pk}/delete/", follow=True).content.decode()
    assert (
        "only they or an administrator may delete it" in bob_page and 'id="ds-delete-confirm"' not in bob_page
    )
    assert alice_client.post(f"/datasets/{dataset.pk}/delete/", {"confirm": " V1 "}).status_code == 302
    assert not Dataset.objects.exists()


def test_delete_needs_a_login_and_an_existing_id(alice_client, anon_client):
    _upload(alice_client, _jsonl("1"))
    dataset = Dataset.objects.get()
    assert (
        anon_client.post(f"/datasets/{dataset.pk}/delete/", {"confirm": dataset.version}).status_code == 302
    )
    assert alice_client.post("/datasets/999/delete/", {"confirm": "1"}).status_code == 404
    assert Dataset.objects.exists()


def test_the_api_lists_versions_and_a_run_picks_the_newest_by_name(alice_client, api, paths):
    _upload(alice_client, _jsonl("1"))
    _upload(alice_client, _jsonl("2"))
    listed = api.get("/api/datasets/?name=quiz").json()["results"]
    assert [d["version"] for d in listed] == [2, 1] and listed[0]["files"]["train"]["sha256"]
    detail = api.get(f"/api/datasets/{listed[1]['id']}/").json()
    assert detail["version"] == 1 and [v["version"] for v in detail["versions"]] == [2, 1]
    created = api.post(
        "/api/runs/",
        {
            "name": "n",
            "preset": "tiny_cpu",
            "dataset": "quiz",
            "overrides": {"model.path": paths["model.path"]},
        },
        format="json",
    )
    assert created.status_code == 201 and created.json()["data_files"][0]["dataset"]["version"] == 2
