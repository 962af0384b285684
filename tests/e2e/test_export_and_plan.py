"""The memory plan beside the new-run form, and "Export model" on a run page, in a real browser with the
live stack (daphne, a real Celery worker that trains the run and exports its checkpoint)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.support import CHROMIUM_ARGS, SMALL_RUN, VIEWPORT, log_in, open_page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def export_stack(demo, alice, settings, tmp_path, redis_url) -> str:  # noqa: F811 (alice: a fixture)
    """conftest's live stack, with a second model root in tmp_path: the worker exports into it (the demo
    model's root may be the repository's assets/, which a test must not write into)."""
    from catalog.registry import register_model

    from tests.worker import stack

    roots = [demo["root"], tmp_path / "models"]
    settings.DAPO_MODEL_ROOTS = roots
    settings.DAPO_DATASET_ROOTS = [demo["root"]]
    register_model("demo-model", str(demo["model"]))
    env = stack.environment(
        tmp_path / "var",
        DAPO_MODEL_ROOTS=":".join(map(str, roots)),
        DAPO_DATASET_ROOTS=str(demo["root"]),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
    )
    port = stack.free_port()
    with stack.celery_worker(env, tmp_path / "celery.log"), stack.daphne(env, tmp_path / "daphne.log", port):
        yield f"http://127.0.0.1:{port}"
    stack.wait_for_other_sessions_to_leave()


def test_the_plan_follows_the_form_and_an_export_joins_the_catalog(
    export_stack, demo, alice, chromium_path, tmp_path
):
    from catalog.models import BaseModel
    from playwright.sync_api import expect, sync_playwright
    from runs.models import ModelExport, Run, Status

    from dapo.presets import get_preset

    small = {k: int(v) for k, v in SMALL_RUN.items()}
    config = get_preset("tiny_cpu").with_overrides(
        {
            **small,
            "optim.total_steps": 1,
            "algorithm.dynamic_sampling": False,
            "model.path": str(demo["model"]),
            "data.train_path": str(demo["train"]),
            "data.val_path": str(demo["test"]),
        }
    )
    run = Run.create_queued(owner=alice, name="to export", config=config, preset="tiny_cpu")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in (Status.SUCCEEDED, Status.FAILED) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert run.status == Status.SUCCEEDED and run.last_checkpoint_step == 1, run.error

    base = export_stack
    with sync_playwright() as p:  # no ORM call inside: Playwright's greenlets give the ORM other contexts
        browser = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        page, errors = open_page(browser, viewport=VIEWPORT)
        log_in(page, base)

        # The plan of the form's config appears, and follows an edit.
        page.goto(f"{base}/runs/new/")
        page.select_option(
            "#f-base-model", label=page.locator("#f-base-model option", has_text="demo-model").inner_text()
        )
        expect(page.locator("#plan-summary")).to_contain_text("1.8M parameters")
        expect(page.locator("#plan-note")).to_contain_text("A CPU run is not checked")
        activations = page.locator("#plan-body tr", has_text="activations")
        micro = int(page.input_value("[name='optim.micro_batch_size']"))
        tokens = int(activations.locator("td").nth(2).inner_text().split(" tokens")[0].replace(",", ""))
        page.fill("[name='optim.micro_batch_size']", str(2 * micro))
        expect(activations.locator("td").nth(2)).to_contain_text(f"{2 * tokens:,} tokens x 4 layers")

        # Export the checkpoint from the run page; the row turns done without a reload.
        page.goto(f"{base}/runs/{run.pk}/")
        page.select_option("#export-step", "1")
        page.fill("#export-name", "e2e exported")
        page.click("#export-btn")
        page.wait_for_url(f"{base}/runs/{run.pk}/")
        page.evaluate("window.__noReload = true")
        page.wait_for_function(
            "() => document.querySelector('#exports-table tr[data-export]').dataset.status === 'done'",
            timeout=180_000,
        )
        assert page.evaluate("window.__noReload") is True
        folder = page.locator("#exports-table .export-detail code").inner_text()
        assert not errors, errors
        browser.close()

    export = ModelExport.objects.get(run=run)
    model = BaseModel.objects.get(name="e2e exported")
    assert export.base_model == model and model.path == folder and model.exists
    assert (tmp_path / "models" / "exports") in Path(folder).resolve().parents
