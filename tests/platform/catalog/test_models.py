"""Models in the app: registering a folder from the browser and the API (checked: config, tokenizer,
weights, parameter count, confined to the model roots), the model page, and starting a run or an
evaluation from a model or a dataset page."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from catalog.model_info import inspect_model
from catalog.models import BaseModel, Dataset
from catalog.registry import register_dataset
from runs.models import Kind, Run

from dapo.runconfig.presets import get_preset

pytestmark = pytest.mark.django_db

DEMO_MODEL = Path(__file__).resolve().parents[3] / "assets" / "demo" / "model"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the demo model inside the model root (tests/platform/fixtures.py: tmp_path/models)."""
    if not (DEMO_MODEL / "model.safetensors").is_file():
        pytest.skip("the demo model is not built (python -m dapo.data.demo --out assets/demo)")
    return Path(shutil.copytree(DEMO_MODEL, tmp_path / "models" / "demo"))


def _register(client: Any, name: str, path: str) -> Any:
    return client.post("/models/", {"name": name, "path": path, "description": "tiny"})


def _text(response: Any) -> str:
    return response.content.decode()


def test_a_model_folder_is_checked_registered_and_inspected(alice_client, alice, folder):
    response = _register(alice_client, "demo", str(folder))
    model = BaseModel.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/models/{model.pk}/"
    assert (model.architecture, model.parameter_count, model.created_by) == (
        "LlamaForCausalLM",
        1_790_976,
        alice,
    )
    assert model.path == str(folder) and model.details["num_hidden_layers"] == 4
    page = _text(alice_client.get(f"/models/{model.pk}/"))
    for fact in (
        'id="fact-layers">4<',
        'id="fact-hidden">192<',
        'id="fact-vocab">103 / 103<',
        'id="fact-dtype">float32<',
        "1790976 parameters (F32: 1790976)",
        "chat_template.jinja",
    ):
        assert fact in page, fact
    assert "What is 17 + 25?" in page and f"/runs/new/?model={model.pk}" in page
    assert f"/runs/evaluate/?base_model={model.pk}" in page
    listing = _text(alice_client.get("/models/"))
    assert "demo" in listing and "1.8M" in listing and "4 × 192" in listing and 'href="/models/"' in listing


def _truncate(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])


def _pickled(folder: Path) -> None:
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")


def _bad_header(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 10) + b"not json!!" + b"\0" * 64)


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda f: (f / "config.json").unlink(), "no config.json: not a HuggingFace model folder"),
        (lambda f: (f / "config.json").write_text("{nope"), "config.json does not parse"),
        (lambda f: (f / "tokenizer.json").unlink(), "no tokenizer: expected tokenizer.json"),
        (lambda f: (f / "model.safetensors").unlink(), "no weights: expected *.safetensors files"),
        (_pickled, "the weights are pickled torch files (pytorch_model.bin): save them as safetensors"),
        (_truncate, "model.safetensors: truncated: the tensors need 7,167,944 bytes, the file has 7,166,944"),
        (_bad_header, "model.safetensors: the safetensors header does not parse"),
        (
            lambda f: (f / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 50})),
            "the tokenizer has 103 tokens but config.json&#x27;s vocab_size is 50",
        ),
    ],
)
def test_a_folder_a_run_could_not_load_is_refused_naming_the_problem(alice_client, folder, spoil, message):
    spoil(folder)
    response = _register(alice_client, "broken", str(folder))
    assert response.status_code == 400 and message in _text(response), _text(response)[-3000:]
    assert BaseModel.objects.count() == 0


@pytest.mark.parametrize(
    "path, message",
    [
        ("/etc", "must be inside one of the model roots"),
        ("models/../../../etc", "must be inside one of the model roots"),
        ("", "name the model&#x27;s folder"),
    ],
)
def test_a_path_outside_the_model_roots_is_refused(alice_client, folder, tmp_path, path, message):
    response = _register(alice_client, "evil", path)
    assert response.status_code == 400 and message in _text(response)
    assert BaseModel.objects.count() == 0


def test_a_link_out_of_the_roots_and_a_missing_folder_are_refused(alice_client, folder, tmp_path):
    outside = tmp_path / "outside"
    shutil.copytree(folder, outside)
    (tmp_path / "models" / "link").symlink_to(outside)
    assert "must be inside one of the model roots" in _text(
        _register(alice_client, "l", str(tmp_path / "models" / "link"))
    )
    assert "no model directory at" in _text(
        _register(alice_client, "m", str(tmp_path / "models" / "nothing"))
    )
    assert BaseModel.objects.count() == 0


def test_a_taken_name_is_refused_whatever_its_case(alice_client, folder):
    assert _register(alice_client, "Demo", str(folder)).status_code == 302
    response = _register(alice_client, "demo", str(folder))
    assert response.status_code == 400 and "is already in the catalog" in _text(response)
    assert BaseModel.objects.count() == 1


def test_a_missing_folder_is_said_on_the_page_with_what_was_recorded(alice_client, folder):
    _register(alice_client, "demo", str(folder))
    shutil.rmtree(folder)
    page = _text(alice_client.get(f"/models/{BaseModel.objects.get().pk}/"))
    assert 'id="model-missing"' in page and 'id="fact-layers">4<' in page


def test_the_model_page_lists_only_the_runs_the_user_can_see(
    alice_client, bob_client, alice, bob, folder, paths
):
    model = BaseModel.objects.create(name="demo", path=str(folder))
    config = get_preset("tiny_cpu").with_overrides(paths).to_dict()
    mine = Run.objects.create(owner=alice, name="alice-on-demo", config=config, base_model=model)
    by_path = Run.objects.create(
        owner=alice,
        name="alice-by-path",
        config={**config, "model": {**config["model"], "path": str(folder)}},
    )
    Run.objects.create(owner=bob, name="bobs-secret", config=config, base_model=model)
    page = _text(alice_client.get(f"/models/{model.pk}/"))
    assert "alice-on-demo" in page and "alice-by-path" in page and "bobs-secret" not in page
    assert f"/runs/{mine.pk}/" in page and f"/runs/{by_path.pk}/" in page
    assert "bobs-secret" in _text(bob_client.get(f"/models/{model.pk}/"))


def test_model_pages_need_a_login_and_an_unknown_id_is_404(anon_client, alice_client):
    assert anon_client.get("/models/")["Location"].startswith("/accounts/login/")
    assert anon_client.post("/models/", {"name": "x", "path": "/tmp"}).status_code == 302
    assert BaseModel.objects.count() == 0
    assert alice_client.get("/models/999/").status_code == 404
    assert alice_client.get(f"/models/{2**63}/").status_code == 404


# ---- starting a run or an evaluation from a model or a dataset -----------------------------------------


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "Compute 1+1.", "answer": "2"}) + "\n")
    (tmp_path / "val.jsonl").write_text(json.dumps({"prompt": "Compute 2+2.", "answer": "4"}) + "\n")
    return register_dataset("sums", str(tmp_path / "train.jsonl"), str(tmp_path / "val.jsonl"))


def test_the_new_run_form_opens_prefilled_from_a_model_and_a_dataset(alice_client, folder, dataset):
    model = BaseModel.objects.create(name="demo", path=str(folder))
    page = _text(alice_client.get(f"/runs/new/?model={model.pk}&dataset={dataset.pk}"))
    assert f'name="model.path" value="{folder}"' in page
    assert f'name="data.train_path" value="{dataset.path}"' in page
    assert f'name="data.val_path" value="{dataset.val_path}"' in page
    assert f'<option value="{model.pk}" data-path="{folder}" selected>' in page
    assert f'value="{dataset.pk}" data-train="{dataset.path}" data-val="{dataset.val_path}" selected>' in page
    assert 'value="demo on sums"' in page
    ignored = _text(alice_client.get("/runs/new/?model=987&dataset=abc"))  # nothing to preselect, no error
    assert " selected>demo" not in ignored


def test_a_run_launched_from_the_prefilled_form_names_the_model_and_the_dataset(
    alice_client, folder, dataset, queued
):
    model = BaseModel.objects.create(name="demo", path=str(folder))
    from runs import forms

    values = dict(forms.presets_data()["tiny_cpu"]["values"])
    values |= {"model.path": str(folder), "data.train_path": dataset.path, "data.val_path": dataset.val_path}
    post = {k: v for k, v in values.items() if v is not False}
    post = {k: ("on" if v is True else v) for k, v in post.items()}
    response = alice_client.post(
        "/runs/new/",
        {**post, "name": "demo on sums", "preset": "tiny_cpu", "base_model": model.pk, "dataset": dataset.pk},
    )
    run = Run.objects.get()
    assert response.status_code == 302 and (run.base_model, run.dataset) == (model, dataset)


def test_the_evaluation_form_opens_with_the_model_and_the_dataset_selected(alice_client, folder, dataset):
    model = BaseModel.objects.create(name="demo", path=str(folder))
    page = _text(alice_client.get(f"/runs/evaluate/?base_model={model.pk}"))
    assert f'<option value="{model.pk}" selected>demo</option>' in page
    page = _text(alice_client.get(f"/runs/evaluate/?datasets={dataset.pk}"))
    assert f'<option value="{dataset.pk}" selected>sums v1' in page


def test_the_dataset_page_links_to_a_prefilled_run_and_evaluation(alice_client, dataset):
    page = _text(alice_client.get(f"/datasets/{dataset.pk}/"))
    assert f'href="/runs/new/?dataset={dataset.pk}"' in page
    assert f'href="/runs/evaluate/?datasets={dataset.pk}"' in page


def test_an_evaluation_from_a_model_page_runs_on_the_picked_dataset(alice_client, folder, dataset, queued):
    model = BaseModel.objects.create(name="demo", path=str(folder))
    response = alice_client.post(
        "/runs/evaluate/",
        {"name": "base", "base_model": str(model.pk), "datasets": [str(dataset.pk)], "n": "2"},
    )
    run = Run.objects.get()
    assert response.status_code == 302 and run.kind == Kind.EVALUATION and run.base_model == model
    assert run.config["data"]["val_path"] == dataset.val_path


# ---- the API -------------------------------------------------------------------------------------------


def test_the_api_registers_lists_and_inspects_models(api, bob_api, alice, folder, paths):
    created = api.post("/api/models/", {"name": "demo", "path": str(folder)}, format="json")
    assert created.status_code == 201 and created.json()["parameters"] == 1_790_976
    model_id = created.json()["id"]
    Run.objects.create(
        owner=alice,
        name="mine",
        config=get_preset("tiny_cpu").with_overrides(paths).to_dict(),
        base_model_id=model_id,
    )
    assert [m["name"] for m in api.get("/api/models/").json()["results"]] == ["demo"]
    detail = api.get(f"/api/models/{model_id}/").json()
    assert (
        detail["present"]
        and detail["details"]["vocab_size"] == 103
        and [r["name"] for r in detail["runs"]] == ["mine"]
    )
    assert bob_api.get(f"/api/models/{model_id}/").json()["runs"] == []


@pytest.mark.parametrize(
    "body, errors",
    [
        ({"name": "x", "path": "/etc"}, {"path"}),
        ({"name": "", "path": ""}, {"name", "path"}),
        ({"name": 5, "path": ["a"]}, {"name", "path"}),
    ],
)
def test_the_api_refuses_a_bad_model_with_field_errors(api, folder, body, errors):
    response = api.post("/api/models/", body, format="json")
    assert response.status_code == 400 and set(response.json()["errors"]) == errors
    assert BaseModel.objects.count() == 0


def test_inspect_model_reads_a_nested_text_config(tmp_path):
    folder = tmp_path / "vlm"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["X"], "text_config": {"num_hidden_layers": 7}})
    )
    details = inspect_model(folder)
    assert details["num_hidden_layers"] == 7 and details["architectures"] == ["X"]
