"""The catalog in a real browser, served by daphne: Alice registers a model folder (a broken one first, and
reads why), inspects it and starts a run from it with the form prefilled; uploads a dataset twice and
finds both versions listed; is refused deleting a version a running run reads, then deletes it; and tries
the API in the Swagger UI of /api/docs/. Screenshots go to test-artifacts/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import ARTIFACTS
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets
from tests.worker import stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

DEMO_MODEL = stack.REPO / "assets" / "demo" / "model"


@pytest.fixture
def site(alice, live) -> Any:
    """Two model folders under the stack's roots (one with no tokenizer), and a page logged in as alice."""
    if not (DEMO_MODEL / "model.safetensors").is_file():
        pytest.skip("the demo model is not built (python -m dapo.data.demo --out assets/demo)")
    models = live.tmp / "models"
    shutil.copytree(DEMO_MODEL, models / "demo")
    shutil.copytree(DEMO_MODEL, models / "no-tokenizer")
    (models / "no-tokenizer" / "tokenizer.json").unlink()
    ARTIFACTS.mkdir(exist_ok=True)
    page, errors = live.logged_in()
    return {"page": page, "errors": errors, "base": live.base, "models": models, "tmp": live.tmp}


def test_a_user_registers_inspects_and_starts_a_run_from_a_model(site):
    from playwright.sync_api import expect

    page, base, models = site["page"], site["base"], site["models"]
    page.goto(f"{base}/models/")
    page.fill("#model-name", "demo-llama")
    page.fill("#model-path", str(models / "no-tokenizer"))
    page.click("#model-register-btn")
    expect(page.locator("#field-path .error")).to_contain_text("no tokenizer: expected tokenizer.json")
    expect(page.locator("#models-table")).to_contain_text("No models yet")
    page.fill("#model-path", str(models / "demo"))
    page.click("#model-register-btn")
    page.wait_for_url(f"{base}/models/*/")
    expect(page.locator(".msg-success")).to_contain_text(
        "Registered demo-llama: LlamaForCausalLM, 1.8M parameters"
    )
    expect(page.locator("#fact-layers")).to_have_text("4")
    expect(page.locator("#fact-vocab")).to_have_text("103 / 103")
    expect(page.locator("#template-example")).to_contain_text("What is 17 + 25?")
    page.screenshot(path=str(ARTIFACTS / "model-page.png"), full_page=True)

    page.click("#model-new-run")
    page.wait_for_url(f"{base}/runs/new/?model=*")
    expect(page.locator("#f-base-model option:checked")).to_contain_text("demo-llama")
    expect(page.locator("#f-model-path")).to_have_value(str(models / "demo"))
    expect(page.locator("#f-name")).to_have_value("demo-llama")
    page.go_back()
    page.click("#model-evaluate")
    expect(page.locator("#f-base-model option:checked")).to_have_text("demo-llama")
    assert site["errors"] == []


def _jsonl(path: Path, answers: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"Compute {a}.", "answer": a}) + "\n" for a in answers))
    return path


def test_dataset_versions_are_listed_and_a_version_in_use_is_not_deleted(site, alice, queued):  # noqa: F811
    from catalog.models import Dataset
    from playwright.sync_api import expect
    from runs.models import Run, Status

    from dapo.runconfig.presets import get_preset

    page, base, tmp = site["page"], site["base"], site["tmp"]
    for answers in (["1", "2"], ["1", "2", "3"]):
        page.goto(f"{base}/datasets/")
        page.fill("#upload-name", "quiz")
        page.set_input_files("#upload-train", str(_jsonl(tmp / "quiz.jsonl", answers)))
        page.click("#upload-btn")
        page.wait_for_url(f"{base}/datasets/*/")
    expect(page.locator(".msg-success")).to_contain_text("Imported quiz as version 2: 3 train problems")
    expect(page.locator("#ds-version")).to_have_text("v2")
    expect(page.locator("#versions-table tbody tr")).to_have_count(2)
    v1 = Dataset.objects.get(version=1)
    config = get_preset("tiny_cpu").with_overrides({**make_fake_assets(tmp), "data.train_path": v1.path})
    run = Run.create_queued(owner=alice, name="reads-v1", config=config, dataset=v1)
    Run.objects.filter(pk=run.pk).update(status=Status.RUNNING)

    page.click("#versions-table a:has-text('v1')")
    expect(page.locator("#ds-version")).to_have_text("v1")
    expect(page.locator("#ds-table, table").first).to_be_visible()
    page.click("#ds-delete-link")  # a confirm step: what goes, and the version number to type
    expect(page.locator("#ds-delete-summary")).to_contain_text("its 2 problems")
    page.fill("#ds-delete-confirm", "2")
    page.click("#ds-delete-btn")
    expect(page.locator("#ds-delete-error")).to_have_text("Type the version number, 1, to confirm.")
    page.fill("#ds-delete-confirm", "1")
    page.click("#ds-delete-btn")
    expect(page.locator(".msg-error")).to_contain_text(
        f"Not deleted: quiz v1 is in use by 1 queued or running run: #{run.pk} 'reads-v1' (running)"
    )
    page.screenshot(path=str(ARTIFACTS / "dataset-versions.png"), full_page=True)
    Run.objects.filter(pk=run.pk).update(status=Status.SUCCEEDED)
    page.click("#ds-delete-link")
    page.fill("#ds-delete-confirm", "v1")
    page.click("#ds-delete-btn")
    expect(page.locator(".msg-success")).to_contain_text("Deleted quiz v1 and its 2 problems.")
    expect(page.locator("#ds-version")).to_have_text("v2")
    expect(page.locator("#versions-table tbody tr")).to_have_count(1)
    assert not Path(v1.path).exists() and Dataset.objects.count() == 1

    page.goto(f"{base}/runs/{run.pk}/")
    train = page.locator("#data-files-table tr[data-field='data.train_path'] .data-version")
    expect(train).to_contain_text("quiz v1 (deleted)")
    assert site["errors"] == []


def test_the_api_docs_page_runs_requests_in_swagger_ui(site, alice, queued):  # noqa: F811
    from playwright.sync_api import expect
    from runs.models import Run

    from dapo.runconfig.presets import get_preset

    page, base = site["page"], site["base"]
    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(site["tmp"]))
    Run.create_queued(owner=alice, name="listed-by-swagger", config=config)
    reports: list[str] = []
    page.on("console", lambda m: reports.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(f"{base}/api/docs/")
    expect(page.locator("#swagger-ui .opblock").first).to_be_hidden()  # built only when opened
    page.click("#api-explorer summary")
    listing = page.locator("#swagger-ui .opblock-get:has([data-path='/api/runs/'])").first
    expect(listing).to_be_visible(timeout=20_000)
    listing.locator(".opblock-summary").click()
    listing.locator("button.try-out__btn").click()
    listing.locator("button.execute").click()
    expect(listing.locator(".live-responses-table tbody .response-col_status").first).to_have_text("200")
    expect(listing.locator(".live-responses-table tbody .response-col_description").first).to_contain_text(
        "listed-by-swagger"
    )
    page.screenshot(path=str(ARTIFACTS / "api-docs-swagger.png"), full_page=False)
    assert reports == [] and site["errors"] == []
