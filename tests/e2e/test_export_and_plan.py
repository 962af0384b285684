"""The memory plan beside the new-run form, and "Export model" on a run page, in a real browser with the
live stack (daphne, a real Celery worker that trains the run and exports its checkpoint)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.support import SMALL_RUN

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def export_stack(live, demo, alice) -> str:  # noqa: F811 (alice: a fixture)
    """The shared live stack with the demo model in the catalog. The worker exports into the first model
    root that is not the repository's assets/ (a test must not write there): the stack's own folder."""
    from catalog.registry import register_model

    register_model("demo-model", str(demo["model"]))
    return live.base


def test_the_plan_follows_the_form_and_an_export_joins_the_catalog(export_stack, live, demo, alice):
    from catalog.models import BaseModel
    from playwright.sync_api import expect
    from runs.models import ModelExport, Run, Status

    from dapo.runconfig.presets import get_preset

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
    page, errors = live.logged_in()

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

    export = ModelExport.objects.get(run=run)
    model = BaseModel.objects.get(name="e2e exported")
    assert export.base_model == model and model.path == folder and model.exists
    assert (live.server.files / "exports") in Path(folder).resolve().parents
