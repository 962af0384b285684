"""Export model: the API and the run page queue an export of a checkpoint on disk (owner only, clear 400s),
and the worker's task writes a folder transformers loads and registers it in the model catalog."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from catalog.models import BaseModel
from django.conf import settings
from runs.models import ExportStatus, ModelExport, Run

from dapo.runconfig.presets import get_preset

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """The demo architecture, randomly initialised, and a perturbed copy of its weights ("trained")."""
    import torch

    from dapo.data.demo import build_model, build_tokenizer

    root = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=0)
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # through the parameters: the tied embedding and head stay one tensor
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=generator))
    return root, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.fixture
def run_with_checkpoints(alice, paths, queued, tiny_model, tmp_path) -> Run:
    """Alice's run with checkpoints of steps 2 and 4 on disk (step 1's recorded, then pruned)."""
    import shutil

    import torch

    source, trained = tiny_model
    model_dir = tmp_path / "models" / "tiny-real"  # inside the test's model root
    shutil.copytree(source, model_dir)
    config = get_preset("tiny_cpu").with_overrides({**paths, "model.path": str(model_dir)})
    run = Run.create_queued(owner=alice, name="alice-demo", config=config, preset="tiny_cpu")
    run_dir = Path(settings.DAPO_RUNS_DIR) / str(run.pk)
    for step in (1, 2, 4):
        folder = run_dir / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        weights = {k: v * (1 + step / 100) for k, v in trained.items()}
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]  # tied, as a saved model has it
        torch.save({"model": weights, "optimizer": {}}, folder / "state.pt")
        meta = {"step": step, "stream": {}, "config": config.to_dict(), "saved_at": time.time()}
        (folder / "trainer.json").write_text(json.dumps(meta))
        run.record_checkpoint(step, str(folder))
    shutil.rmtree(run_dir / "checkpoints" / "step_000001")  # pruned by keep_last
    return run


def url(run: Run) -> str:
    return f"/api/runs/{run.pk}/export/"


def test_the_api_queues_an_export_that_the_worker_writes_and_registers(
    api, run_with_checkpoints, queued, django_capture_on_commit_callbacks
):
    import torch
    from transformers import AutoModelForCausalLM

    from worker.export import export_model

    run = run_with_checkpoints
    assert api.get(url(run)).json() == {"run": run.pk, "steps_on_disk": [2, 4], "exports": []}
    with django_capture_on_commit_callbacks(execute=True):
        resp = api.post(url(run), {"step": 2, "name": "alice-tuned"}, format="json")
    assert resp.status_code == 202, resp.content
    state = resp.json()
    assert (state["status"], state["step"], state["name"]) == ("queued", 2, "alice-tuned")
    assert queued == [("export_model", state["id"])]  # (the run's own launch was never committed here)

    assert export_model(state["id"]) == "done"
    export = ModelExport.objects.get(pk=state["id"])
    assert export.status == ExportStatus.DONE and export.error == ""
    model_entry = BaseModel.objects.get(name="alice-tuned")
    assert export.base_model == model_entry and model_entry.architecture == "LlamaForCausalLM"
    folder = Path(settings.DAPO_MODEL_ROOTS[0]) / "exports" / f"run{run.pk}-step2-{export.pk}"
    assert Path(model_entry.path).resolve() == folder.resolve() and export.path == model_entry.path
    loaded = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).state_dict()
    saved = torch.load(Path(run.checkpoints.get(step=2).path) / "state.pt", weights_only=True)["model"]
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())
    assert model_entry.parameter_count == sum(v.numel() for k, v in saved.items() if k != "lm_head.weight")
    assert export_model(state["id"]) == "nothing to do"  # a redelivered message

    listed = api.get(url(run)).json()["exports"]
    assert [(e["id"], e["status"], e["base_model"]) for e in listed] == [(export.pk, "done", model_entry.pk)]


def test_the_new_run_form_offers_the_exported_model(alice_client, run_with_checkpoints):
    from worker.export import export_model

    export = ModelExport.objects.create(run=run_with_checkpoints, step=4, name="from-step-4")
    assert export_model(export.pk) == "done"
    page = alice_client.get("/runs/new/").content.decode()
    model_entry = BaseModel.objects.get(name="from-step-4")
    assert f'value="{model_entry.pk}"' in page and "from-step-4" in page


def test_default_step_and_name_are_the_newest_checkpoint(api, run_with_checkpoints):
    resp = api.post(url(run_with_checkpoints), {}, format="json")
    assert resp.status_code == 202
    assert (resp.json()["step"], resp.json()["name"]) == (4, "alice-demo step 4")


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"step": 1}, "step", "no checkpoint of step 1 on disk; steps on disk: 2, 4"),
        ({"step": 3}, "step", "no checkpoint of step 3 on disk; steps on disk: 2, 4"),
        ({"step": "two"}, "step", "must be an integer step; steps on disk: 2, 4"),
        ({"step": 2.5}, "step", "must be an integer step"),
        ({"step": True}, "step", "must be an integer step"),
        ({"name": 7}, "name", "must be a string"),
        ({"name": "x\x00y"}, "name", "must not contain control characters"),
        ({"name": "n" * 201}, "name", "too long"),
        ({"stepp": 2}, "stepp", "unknown field"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_queues_nothing(
    api, run_with_checkpoints, body, field, message
):
    resp = api.post(url(run_with_checkpoints), body, format="json")
    assert resp.status_code == 400, resp.content
    assert message in resp.json()["errors"][field]
    assert not ModelExport.objects.exists()


def test_a_name_in_the_catalog_or_being_exported_is_refused(api, run_with_checkpoints):
    BaseModel.objects.create(name="taken", path="models/x")
    resp = api.post(url(run_with_checkpoints), {"name": "taken"}, format="json")
    assert resp.status_code == 400 and "already in the catalog" in resp.json()["errors"]["name"]
    assert api.post(url(run_with_checkpoints), {"name": "pending"}, format="json").status_code == 202
    assert api.post(url(run_with_checkpoints), {"name": "pending"}, format="json").status_code == 400


def test_a_run_without_checkpoints_on_disk_and_a_non_object_body(api, alice_run):
    resp = api.post(url(alice_run), {}, format="json")
    assert resp.status_code == 400
    assert resp.json()["errors"] == {"step": "the run has no checkpoint on disk to export"}
    assert api.post(url(alice_run), [1, 2], format="json").status_code == 400


def test_only_the_owner_may_export(bob_api, anon_client, run_with_checkpoints):
    assert bob_api.post(url(run_with_checkpoints), {}, format="json").status_code == 404
    assert bob_api.get(url(run_with_checkpoints)).status_code == 404
    assert anon_client.post(url(run_with_checkpoints), {}, content_type="application/json").status_code in (
        401,
        403,
    )
    assert not ModelExport.objects.exists()


def test_a_failed_export_says_why_and_leaves_no_folder(run_with_checkpoints):
    from worker.export import export_model

    run = run_with_checkpoints
    export = ModelExport.objects.create(run=run, step=2, name="broken")
    (Path(run.checkpoints.get(step=2).path) / "state.pt").write_bytes(b"not a checkpoint")
    assert export_model(export.pk) == "failed"
    export.refresh_from_db()
    assert (
        export.status == ExportStatus.FAILED and "cannot read" in export.error and "state.pt" in export.error
    )
    assert not list((Path(settings.DAPO_MODEL_ROOTS[0]) / "exports").glob("*"))
    assert not BaseModel.objects.filter(name="broken").exists()


def test_the_run_page_offers_the_steps_on_disk_and_shows_exports(
    alice_client, bob_client, run_with_checkpoints
):
    run = run_with_checkpoints
    ModelExport.objects.create(run=run, step=2, name="shown", status=ExportStatus.FAILED, error="disk full")
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert '<option value="4">step 4 (newest)</option>' in page
    assert '<option value="2">step 2</option>' in page
    assert 'value="1"' not in page.split('id="export-step"')[1].split("</select>")[0]  # pruned
    assert "disk full" in page and 'data-status="failed"' in page

    resp = alice_client.post(f"/runs/{run.pk}/export/", {"step": "3", "name": ""}, follow=True)
    assert "Not exported: step: no checkpoint of step 3 on disk" in resp.content.decode()
    resp = alice_client.post(f"/runs/{run.pk}/export/", {"step": "4", "name": "page-export"}, follow=True)
    assert "Exporting step 4 as &#x27;page-export&#x27;" in resp.content.decode()
    assert ModelExport.objects.filter(name="page-export", step=4, status="queued").exists()
    assert bob_client.post(f"/runs/{run.pk}/export/", {"step": "4"}).status_code == 404
