"""The whole product in a real browser: daphne, a real Celery worker, Redis and the real trainer.

Alice logs in, configures a demo run with a small step budget in the form, launches it, watches the
status turn to running and the reward chart grow to three points and more without a reload, opens a
sample, and cancels a second run. Screenshots go to test-artifacts/ (DAPO_DOCS_SCREENSHOT=path also
saves the live run page there, for the README).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.worker import stack

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.django_db(transaction=True),
]

ARTIFACTS = stack.REPO / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
# A demo run small enough for two shared CPU cores: 4 prompts × 4 samples, 12 new tokens, 2 updates a step.
SMALL_RUN = {
    "optim.total_steps": "4", "data.train_batch_size": "4", "data.gen_batch_size": "4", "rollout.n": "4",
    "rollout.max_response_length": "12", "algorithm.overlong_buffer_len": "4", "optim.mini_batch_size": "2",
    "optim.micro_batch_size": "8", "validation.every_n_steps": "0", "checkpoint.every_n_steps": "1",
    "execution.torch_threads": "1", "data.max_prompt_length": "64",
}  # fmt: skip


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo model and data: the built demo (assets/demo) when present, else a randomly initialised
    model of the demo's architecture and small arithmetic parquet files, built here in seconds."""
    built = stack.REPO / "assets" / "demo"
    if (built / "model" / "config.json").is_file() and (built / "data" / "train.parquet").is_file():
        return {"root": built, "model": built / "model", "train": built / "data" / "train.parquet",
                "test": built / "data" / "test.parquet"}  # fmt: skip
    import torch

    from dapo.data import write_parquet
    from dapo.demo import build_model, build_tokenizer, make_arithmetic_problems

    root = tmp_path_factory.mktemp("demo")
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    build_model(tokenizer, seed=0).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    write_parquet(make_arithmetic_problems(64, seed=1), root / "data" / "train.parquet")
    write_parquet(make_arithmetic_problems(8, seed=2), root / "data" / "test.parquet")
    return {"root": root, "model": root / "model", "train": root / "data" / "train.parquet",
            "test": root / "data" / "test.parquet"}  # fmt: skip


@pytest.fixture
def live_stack(demo, alice, settings, tmp_path, redis_url) -> str:
    """daphne + a Celery worker on the test database and the test Redis database; the catalog filled."""
    from catalog.registry import register_dataset, register_model

    settings.DAPO_MODEL_ROOTS = [demo["root"]]
    register_model("demo-model", str(demo["model"]))
    register_dataset("demo-arithmetic", str(demo["train"]), str(demo["test"]))
    env = stack.environment(
        tmp_path / "var", DAPO_MODEL_ROOTS=str(demo["root"]), DJANGO_ALLOWED_HOSTS="127.0.0.1"
    )
    port = stack.free_port()
    with stack.celery_worker(env, tmp_path / "celery.log"), stack.daphne(env, tmp_path / "daphne.log", port):
        yield f"http://127.0.0.1:{port}"
    stack.wait_for_other_sessions_to_leave()


def test_a_user_configures_launches_and_watches_a_run_live(live_stack, demo, chromium_path):
    from playwright.sync_api import expect, sync_playwright
    from runs.models import MetricPoint, Run

    ARTIFACTS.mkdir(exist_ok=True)
    base = live_stack
    # No ORM call inside the Playwright block: its greenlets give the ORM other contexts (and connections).
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_default_timeout(20_000)
        errors: list[str] = []  # a script error would silently stop the page from updating
        page.on("pageerror", lambda e: errors.append(str(e)))

        # 1. log in
        page.goto(f"{base}/runs/")
        expect(page).to_have_url(f"{base}/accounts/login/?next=/runs/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-pass-123")
        page.click("button[type=submit]")
        expect(page).to_have_url(f"{base}/runs/")

        # 2. configure a demo run with a small step budget
        page.click("text=New run")
        page.fill("#f-name", "e2e demo")
        page.select_option("#f-preset", "tiny_cpu")
        page.select_option(
            "#f-base-model", label=page.locator("#f-base-model option", has_text="demo-model").inner_text()
        )
        page.select_option(
            "#f-dataset", label=page.locator("#f-dataset option", has_text="demo-arithmetic").inner_text()
        )
        assert page.input_value("[name='model.path']").endswith("model")
        for section in ("validation", "checkpoint", "execution"):  # folded by default: unfold them
            page.click(f"#section-{section} > summary")
        for name, value in SMALL_RUN.items():
            page.fill(f"[name='{name}']", value)
        # 12 new tokens truncate every answer (all wrong): dynamic sampling would filter every group away
        page.uncheck("[name='algorithm.dynamic_sampling']")
        page.screenshot(path=str(ARTIFACTS / "e2e-1-new-run.png"), full_page=True)

        # 3. launch; the run page opens and goes live without any reload
        page.click("#launch")
        page.wait_for_url(f"{base}/runs/*/")
        run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        page.evaluate("window.__noReload = true")
        page.wait_for_function(
            "document.getElementById('run-status').dataset.status === 'running'", timeout=120_000
        )
        page.wait_for_function(
            "(() => { const c = document.querySelector('.chart[data-title=\"Reward\"]');"
            " return c && c.data && c.data[0] && c.data[0].x.length >= 3; })()",
            timeout=300_000,
        )
        assert page.evaluate("window.__noReload") is True  # the chart grew in place
        assert not errors, errors
        page.screenshot(path=str(ARTIFACTS / "e2e-2-live-run.png"))
        if docs := os.environ.get("DAPO_DOCS_SCREENSHOT"):
            page.screenshot(path=docs)

        # 4. open a sample: its text, never HTML
        page.click("#samples-body tr >> nth=0")
        expect(page.locator("#sample-dialog")).to_be_visible()
        assert page.locator("#sd-prompt").inner_text().startswith("Compute")
        page.screenshot(path=str(ARTIFACTS / "e2e-3-sample.png"))
        page.click("#sample-dialog button.close")

        # 5. a second run (clone and edit), queued behind the first: cancel it
        page.goto(f"{base}/runs/new/?from={run_id}")
        page.fill("#f-name", "e2e second")
        page.fill("[name='optim.total_steps']", "50")
        page.click("#launch")
        page.wait_for_url(f"{base}/runs/*/")
        second = int(page.url.rstrip("/").rsplit("/", 1)[1])
        assert second != run_id
        page.click("#cancel-btn")
        expect(page.locator("#run-status")).to_have_text("cancelled", timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "e2e-4-cancelled.png"))

        # 6. the first run ends on its own; the list shows both
        page.goto(f"{base}/runs/{run_id}/")
        expect(page.locator("#run-status")).to_have_text("succeeded", timeout=300_000)
        page.goto(f"{base}/runs/")
        expect(page.locator("#runs-body tr")).to_have_count(2)
        page.screenshot(path=str(ARTIFACTS / "e2e-5-runs.png"))
        assert not errors, errors
        browser.close()

    first = Run.objects.get(pk=run_id)
    assert first.status == "succeeded" and first.step == 4 and first.checkpoints.count() >= 1
    assert Run.objects.get(pk=second).status == "cancelled"
    steps = MetricPoint.objects.filter(run=first, name="critic/score/mean").values_list("step", flat=True)
    assert list(steps) == [1, 2, 3, 4]
