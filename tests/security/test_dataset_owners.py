"""Taking over another user's dataset name (issue #25, item 4).

An upload named ``DEMO-ARITHMETIC`` became version 2 of the server's ``demo-arithmetic``, and a run that
named the dataset then trained on the uploader's file, its validation file silently dropped. Versions now
belong to one owner (names unique per owner, compared case-folded by the upload form, the API, the
register command and the importer); another user's upload of the name is their own dataset; a run records
the exact version it read, and a data path that disagrees with the picked version is an error.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from catalog.models import Dataset
from catalog.registry import register_dataset
from catalog.versions import data_record
from django.core.management import call_command
from runs.models import Run

from dapo.runconfig.presets import get_preset
from tests.platform.fixtures import make_user
from tests.platform.runs.test_views import _form

pytestmark = pytest.mark.django_db


def _jsonl(*answers: str) -> bytes:
    return "".join(json.dumps({"prompt": f"Compute {a}.", "answer": a}) + "\n" for a in answers).encode()


def _upload(client: Any, name: str, content: bytes) -> Any:
    f = io.BytesIO(content)
    f.name = "data.jsonl"
    return client.post("/datasets/upload/", {"name": name, "description": "", "train": f})


@pytest.fixture
def demo(tmp_path: Path) -> Dataset:
    """The server's dataset (registered by the command line, as bootstrap does), with a validation file."""
    (tmp_path / "demo").mkdir()
    train, val = tmp_path / "demo" / "train.jsonl", tmp_path / "demo" / "test.jsonl"
    train.write_bytes(_jsonl("1", "2"))
    val.write_bytes(_jsonl("3"))
    return register_dataset("demo-arithmetic", str(train), str(val))


def _run_on(api: Any, dataset: Any, paths: dict[str, str], **body: Any) -> Any:
    payload = {"name": "r", "preset": "tiny_cpu", "dataset": dataset, **body}
    payload.setdefault("overrides", {"model.path": paths["model.path"]})
    return api.post("/api/runs/", payload, format="json")


def test_another_users_upload_of_a_taken_name_is_their_own_dataset(bob, bob_client, demo):
    assert _upload(bob_client, "DEMO-ARITHMETIC", _jsonl("666")).status_code == 302
    mine = Dataset.objects.get(created_by=bob)
    assert (mine.name, mine.version) == ("DEMO-ARITHMETIC", 1)
    assert [d.pk for d in demo.versions()] == [demo.pk] and demo.is_latest()
    assert [d.pk for d in mine.versions()] == [mine.pk]


def test_a_run_naming_the_dataset_trains_on_its_owners_files_with_their_validation_file(
    alice, api, bob_client, demo, paths, queued
):
    _upload(bob_client, "DEMO-ARITHMETIC", _jsonl("666"))
    created = _run_on(api, "demo-arithmetic", paths)
    assert created.status_code == 201, created.json()
    run = Run.objects.get(pk=created.json()["id"])
    assert run.config["data"]["train_path"] == demo.path and run.config["data"]["val_path"] == demo.val_path
    assert run.dataset_id == demo.pk
    assert [e["dataset"]["id"] for e in run.data_files] == [demo.pk, demo.pk]
    assert (
        run.data_files[0]["sha256"] == demo.files["train"]["sha256"]
        and run.data_files[0]["dataset"]["owner"] is None
    )


def test_a_users_own_dataset_of_the_name_comes_first_and_several_others_are_ambiguous(
    alice, alice_client, bob_client, api, bob_api, paths, queued, django_user_model
):
    from tests.platform.fixtures import _token_client

    _upload(alice_client, "quiz", _jsonl("1"))
    _upload(bob_client, "Quiz", _jsonl("2"))
    alices, bobs = Dataset.objects.get(created_by=alice), Dataset.objects.exclude(created_by=alice).get()
    assert _run_on(api, "QUIZ", paths).json()["data_files"][0]["dataset"]["id"] == alices.pk
    assert _run_on(bob_api, "quiz", paths).json()["data_files"][0]["dataset"]["id"] == bobs.pk
    carol = _token_client(make_user(django_user_model, "carol", "carol-pass-123"))
    refused = _run_on(carol, "quiz", paths)
    assert refused.status_code == 400
    assert "several users have a dataset named 'quiz' (alice, bob)" in refused.json()["errors"]["dataset"]
    assert _run_on(carol, bobs.pk, paths).status_code == 201  # an id is that version, whoever owns it


def test_names_are_case_folded_by_the_form_the_api_and_the_register_command(
    alice, alice_client, api, demo, tmp_path
):
    _upload(alice_client, "Quiz", _jsonl("1"))
    assert _upload(alice_client, " QUIZ ", _jsonl("2")).status_code == 302
    assert [(d.name, d.version) for d in Dataset.objects.filter(created_by=alice)] == [
        ("Quiz", 2),
        ("Quiz", 1),
    ]
    listed = api.get("/api/datasets/?name=quiz").json()["results"]
    assert [(d["version"], d["owner"]) for d in listed] == [(2, "alice"), (1, "alice")]
    changed = tmp_path / "demo" / "train.jsonl"
    changed.write_bytes(_jsonl("1", "2", "4"))
    call_command("register_dataset", "Demo-Arithmetic", str(changed), "--val", demo.val_path)
    assert [d.version for d in demo.versions()] == [2, 1] and Dataset.objects.filter(
        created_by=None
    ).count() == 2


def test_a_data_path_that_disagrees_with_the_picked_version_is_an_error_not_a_silent_change(
    alice, alice_client, api, demo, paths, queued
):
    _upload(alice_client, "no-val", _jsonl("1"))
    no_val = Dataset.objects.get(name="no-val")
    overrides = {"model.path": paths["model.path"], "data.val_path": paths["data.val_path"]}
    refused = _run_on(api, "no-val", paths, overrides=overrides)
    assert refused.status_code == 400
    assert "no-val v1 of alice, has no validation file" in refused.json()["errors"]["data.val_path"]
    config = get_preset("tiny_cpu").with_overrides(paths).to_dict()
    refused = _run_on(api, "demo-arithmetic", paths, preset=None, config=config, overrides={})
    assert set(refused.json()["errors"]) == {"data.train_path", "data.val_path"}
    form = _form(paths, **{"data.train_path": no_val.path, "data.val_path": paths["data.val_path"]})
    page = alice_client.post("/runs/new/", {**form, "dataset": str(no_val.pk)})
    assert page.status_code == 400 and "has no validation file" in page.content.decode()
    agreed = _run_on(api, "no-val", paths, overrides={"model.path": paths["model.path"], "data.val_path": ""})
    assert agreed.status_code == 201 and Run.objects.count() == 1


def test_the_worker_refuses_a_picked_versions_file_whose_content_changed(alice, demo, paths, queued):
    from worker.tasks import record_data_files

    config = get_preset("tiny_cpu").with_overrides(
        {"model.path": paths["model.path"], **demo.config_overrides()}
    )
    run = Run.create_queued(owner=alice, name="r", config=config, dataset=demo)
    assert run.data_files[0]["dataset"]["id"] == demo.pk
    Path(demo.path).write_bytes(_jsonl("7", "8"))
    assert data_record(run.config, read_files=True, picked=demo)[0]["changed"] is True
    with pytest.raises(ValueError, match=r"data.train_path: the file of demo-arithmetic v1 changed"):
        record_data_files(run)


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_each_adder_their_own_versions_and_keeps_the_numbers():
    from catalog.models import Dataset as Migrated
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = (
        [("catalog", "0003_h19b_versions_model_details")],
        [("catalog", "0004_dataset_owner_names")],
    )
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    others = [node for node in executor.loader.graph.leaf_nodes() if node[0] != "catalog"]
    old = executor.loader.project_state([*before, *others]).apps
    users, datasets, runs = (
        old.get_model(*m) for m in (("auth", "User"), ("catalog", "Dataset"), ("runs", "Run"))
    )
    admin, mallory = users.objects.create(username="admin"), users.objects.create(username="mallory")
    # mallory's upload took version 2 of the server's name; admin wrote one name in two cases
    made = [
        datasets.objects.create(name="demo-arithmetic", version=1, created_by=None, path="a"),
        datasets.objects.create(name="DEMO-ARITHMETIC", version=2, created_by=mallory, path="b"),
        datasets.objects.create(name="demo-arithmetic", version=3, created_by=None, path="c"),
        datasets.objects.create(name="Quiz", version=1, created_by=admin, path="d"),
        datasets.objects.create(name="quiz", version=1, created_by=admin, path="e"),
    ]
    record = [{"field": "data.train_path", "dataset": {"id": made[4].pk, "name": "quiz", "version": 1}}]
    run = runs.objects.create(owner=mallory, name="r", config={}, data_files=record)
    MigrationExecutor(connection).migrate(after)
    got = {d.pk: (d.created_by_id, d.name_key, d.version) for d in Migrated.objects.all()}
    assert [got[d.pk] for d in made] == [
        (None, "demo-arithmetic", 1),
        (mallory.pk, "demo-arithmetic", 2),  # mallory's own dataset now; the server's keeps 1 and 3
        (None, "demo-arithmetic", 3),
        (admin.pk, "quiz", 1),
        (admin.pk, "quiz", 2),  # renumbered after the other spelling's version 1 ...
    ]
    assert Run.objects.get(pk=run.pk).data_files[0]["dataset"]["version"] == 2  # ... and the run's record too
