"""Evaluation runs (runs.evaluations): created from the API and the page on a catalog model or a run's
checkpoint, refused with field errors, and run by the worker with the real dapo.eval.evaluate on the demo
model: one step 0 in the runs list, the sample inspector and the comparison."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from catalog.models import BaseModel, Dataset
from runs.models import Checkpoint, Kind, MetricPoint, Run, Sample, Status

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def catalog(paths, tmp_path):
    """A catalog model and two datasets: one with a validation split, one with a single file."""
    model = BaseModel.objects.create(name="tiny", path=paths["model.path"])
    second = Path(paths["data.train_path"]).with_name("aime.jsonl")
    shutil.copy(paths["data.val_path"], second)
    with_val = Dataset.objects.create(
        name="arith", path=paths["data.train_path"], val_path=paths["data.val_path"]
    )
    single = Dataset.objects.create(name="aime", path=str(second))
    return {"model": model, "datasets": [with_val, single], "files": [paths["data.val_path"], str(second)]}


def test_api_queues_an_evaluation_of_a_catalog_model_on_several_datasets(
    api, catalog, queued, django_capture_on_commit_callbacks
):
    body = {
        "name": "base on two sets",
        "base_model": "tiny",
        "datasets": ["arith", catalog["datasets"][1].pk],
        "n": 8,
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/evaluations/", body, format="json")
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.kind, run.status, run.total_steps, run.base_model) == (
        Kind.EVALUATION,
        Status.QUEUED,
        0,
        catalog["model"],
    )
    data, validation = run.config["data"], run.config["validation"]
    assert [data["val_path"], *data["val_paths"]] == catalog["files"]  # the validation split, else the file
    assert (validation["n_samples"], validation["max_problems"]) == (8, 0)
    assert queued == [("launch_run", run.pk)]
    assert api.get(f"/api/runs/{run.pk}/").json()["kind"] == "evaluation"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"base_model": None}, "source"),
        ({"checkpoint": {"run": 1}}, "source"),
        ({"base_model": "nope"}, "base_model"),
        ({"datasets": []}, "datasets"),
        ({"datasets": ["arith", "missing"]}, "datasets"),
        ({"datasets": ["arith", "arith"]}, "datasets"),
        ({"n": 0}, "n"),
        ({"n": "many"}, "n"),
        ({"preset": "nope"}, "preset"),
        ({"overrides": {"validation.top_p": 2.0}}, "validation.top_p"),
        ({"name": ""}, "name"),
    ],
)
def test_api_refuses_a_bad_evaluation_with_the_field(api, catalog, queued, change, field):
    body = {"name": "e", "base_model": "tiny", "datasets": ["arith"], **change}
    body = {k: v for k, v in body.items() if v is not None}
    response = api.post("/api/evaluations/", body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"], response.json()
    assert not Run.objects.exists() and queued == []


def _checkpoint(run: Run, step: int) -> Checkpoint:
    folder = Path(run.config["model"]["path"]).parent.parent / "ckpt" / f"step_{step:06d}"
    folder.mkdir(parents=True)
    torch.save({"model": {}}, folder / "state.pt")
    return Checkpoint.objects.create(run=run, step=step, path=str(folder))


def test_a_run_checkpoint_is_evaluated_with_the_runs_settings(api, alice_run, catalog, queued, bob_client):
    _checkpoint(alice_run, 2)
    newest = _checkpoint(alice_run, 4)
    response = api.post(
        "/api/evaluations/",
        {"name": "ckpt", "checkpoint": {"run": alice_run.pk}, "datasets": ["aime"], "n": 2},
        format="json",
    )
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.parent, run.fork_step, run.source_checkpoint) == (alice_run, 4, newest.path)
    assert (
        run.config["optim"] == alice_run.config["optim"]
        and run.config["data"]["val_path"] == catalog["files"][1]
    )
    gone = api.post(
        "/api/evaluations/",
        {"name": "x", "checkpoint": {"run": alice_run.pk, "step": 3}, "datasets": ["aime"]},
        format="json",
    )
    assert gone.status_code == 400 and "2, 4" in gone.json()["errors"]["checkpoint"]
    # bob cannot evaluate alice's checkpoint: her run looks missing
    page = bob_client.post(
        "/runs/evaluate/",
        {"name": "steal", "checkpoint": f"{alice_run.pk}:4", "datasets": [catalog["datasets"][1].pk]},
    )
    assert page.status_code == 400 and b"of yours" in page.content


def test_the_page_offers_models_checkpoints_and_datasets_and_launches(
    alice_client, alice_run, catalog, queued
):
    _checkpoint(alice_run, 3)
    page = alice_client.get("/runs/evaluate/")
    html = page.content.decode()
    assert (
        page.status_code == 200 and "tiny" in html and f'value="{alice_run.pk}:3"' in html and "aime" in html
    )
    post = {
        "name": "from the page",
        "base_model": catalog["model"].pk,
        "datasets": [d.pk for d in catalog["datasets"]],
        "n": "3",
    }
    response = alice_client.post("/runs/evaluate/", post)
    run = Run.objects.get(name="from the page")
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/evaluation/"
    assert run.kind == Kind.EVALUATION and run.config["validation"]["n_samples"] == 3
    assert 'id="new-evaluation"' in alice_client.get("/runs/").content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_the_worker_evaluates_the_demo_model_into_one_step_0(alice, alice_client, settings, tmp_path, queued):
    """The worker's task, in this process, with the real dapo.eval.evaluate: metrics and samples of step 0 in
    the database, shown by the runs list, the inspector and the comparison."""
    from worker.tasks import launch_run

    model = tmp_path / "models" / "demo"
    shutil.copytree(REPO / "assets" / "demo" / "model", model)
    data = tmp_path / "test.parquet"
    shutil.copy(REPO / "assets" / "demo" / "data" / "test.parquet", data)
    BaseModel.objects.create(name="demo", path=str(model))
    Dataset.objects.create(name="arith-test", path=str(data))
    body = {
        "name": "demo eval",
        "base_model": "demo",
        "datasets": ["arith-test"],
        "n": 2,
        "max_problems": 3,
        "overrides": {"execution.torch_threads": 1},
    }
    from runs.evaluations import create_evaluation

    run, errors = create_evaluation(alice, body)
    assert run is not None, errors
    assert launch_run(run.pk) == Status.SUCCEEDED
    run.refresh_from_db()
    assert (run.status, run.step, run.progress) == (Status.SUCCEEDED, 0, 1.0)
    points = {p.name: p.value for p in MetricPoint.objects.filter(run=run)}
    samples = list(Sample.objects.filter(run=run, split="val", step=0))
    assert len(samples) == 6 and {p.step for p in MetricPoint.objects.filter(run=run)} == {0}
    assert points["val/acc/mean@2"] == pytest.approx(sum(s.acc for s in samples) / 6)
    assert {"val/acc/pass@2", "val/acc/maj@2/mean", "val/score/best@2/mean"} <= set(points)
    assert (Path(settings.DAPO_RUNS_DIR) / str(run.pk) / "metrics.json").is_file()
    listed = alice_client.get("/api/runs/").json()["results"][0]
    assert (listed["id"], listed["kind"]) == (run.pk, "evaluation")
    assert alice_client.get(f"/runs/{run.pk}/samples/").status_code == 200
    assert alice_client.get(f"/runs/{run.pk}/evaluation/").status_code == 200
    compared = alice_client.get(f"/runs/compare/data/?ids={run.pk}&metrics=val/acc/mean@2").json()
    series = compared["metrics"]["val/acc/mean@2"][str(run.pk)]
    assert series["steps"] == [0] and series["values"] == [pytest.approx(points["val/acc/mean@2"])]


def test_further_validation_files_are_confined_to_the_dataset_roots(api, alice_run, paths, queued, tmp_path):
    """data.val_paths is checked like data.val_path: by the API before saving, by the worker again."""
    from catalog.paths import PathError

    from worker.tasks import resolved_config

    outside = tmp_path.parent / "elsewhere.jsonl"
    outside.write_text('{"prompt": "q", "answer": "1"}\n')
    body = {"name": "r", "preset": "tiny_cpu", "overrides": {**paths, "data.val_paths": [str(outside)]}}
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 400 and "data.val_paths" in response.json()["errors"]
    inside = {**paths, "data.val_paths": [paths["data.train_path"]]}
    assert api.post("/api/runs/", {**body, "overrides": inside}, format="json").status_code == 201
    alice_run.config["data"]["val_paths"] = [str(outside)]  # a root narrowed after the run was queued
    with pytest.raises(PathError, match="data.val_paths"):
        resolved_config(alice_run)


def test_the_new_run_form_takes_several_validation_files(alice_client, catalog, paths, queued):
    """data.val_paths is a comma-separated field of the new-run form (the catalog multi-select fills it);
    the page offers each catalog dataset's validation file."""
    from tests.platform.runs.test_views import _form

    page = alice_client.get("/runs/new/").content.decode()
    assert 'id="f-val-datasets"' in page and f'data-file="{catalog["files"][1]}"' in page
    form = _form(paths, **{"data.val_paths": f"{catalog['files'][1]}, {paths['data.train_path']}"})
    response = alice_client.post("/runs/new/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get()
    assert run.config["data"]["val_paths"] == [catalog["files"][1], paths["data.train_path"]]
    assert Run.objects.count() == 1
    bad = alice_client.post("/runs/new/", _form(paths, **{"data.val_paths": "/etc/passwd"}))
    assert bad.status_code == 400 and Run.objects.count() == 1


def test_the_api_reference_documents_the_evaluation_endpoint(api, alice_client):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200 and "/api/evaluations/" in schema.content.decode()
    page = alice_client.get("/api/docs/").content.decode()
    assert "/api/evaluations/" in page and "datasets" in page
