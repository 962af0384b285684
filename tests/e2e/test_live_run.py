"""The whole product in a real browser: daphne, a real Celery worker, Redis and the real trainer.

Alice logs in, configures a demo run with a small step budget in the form, launches it, watches the
status turn to running and the reward chart grow to three points and more without a reload, opens a
sample, and cancels a second run. Screenshots go to test-artifacts/ (DAPO_DOCS_SCREENSHOT=path also
saves the live run page there, for the README).
"""

from __future__ import annotations

import os

import pytest

from tests.e2e.support import ARTIFACTS, SMALL_RUN

LIVE_RUN = {**SMALL_RUN, "optim.total_steps": str(LIVE_STEPS := 12)}
"""Long enough to be watched: 4 steps of 0.2 s ended in about a second on a quiet machine, before the run
page had connected (the status went from queued to succeeded with no 'running' to see)."""

# Every status the run page shows, recorded from its first paint: the status element's data-status as the
# page renders it and as the websocket changes it (a wait for one value can miss a short-lived one).
RECORD_STATUSES = """
window.__statuses = [];
document.addEventListener("DOMContentLoaded", () => {
  const el = document.getElementById("run-status");
  if (!el) return;
  window.__statuses.push(el.dataset.status);
  new MutationObserver(() => window.__statuses.push(el.dataset.status))
    .observe(el, {attributes: true, attributeFilter: ["data-status"]});
});
"""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.django_db(transaction=True),
]


def test_a_user_configures_launches_and_watches_a_run_live(live, live_stack, demo):
    from playwright.sync_api import expect
    from runs.models import MetricPoint, Run

    ARTIFACTS.mkdir(exist_ok=True)
    base = live_stack
    page, errors = live.page()

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
    for name, value in LIVE_RUN.items():
        page.fill(f"[name='{name}']", value)
    # 12 new tokens truncate every answer (all wrong): dynamic sampling would filter every group away
    page.uncheck("[name='algorithm.dynamic_sampling']")
    page.screenshot(path=str(ARTIFACTS / "e2e-1-new-run.png"), full_page=True)

    # 3. launch; the run page opens and goes live without any reload
    page.add_init_script(RECORD_STATUSES)
    page.click("#launch")
    page.wait_for_url(f"{base}/runs/*/")
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    page.evaluate("window.__noReload = true")
    # predicates are functions, never expressions: Playwright evals an expression at every poll, which
    # an enforced CSP forbids; a function's source is evaluated once (tests/e2e/test_reconnect.py)
    page.wait_for_function("() => window.__statuses.includes('running')", timeout=120_000)
    page.wait_for_function(
        "() => { const c = document.querySelector('.chart[data-title=\"Reward\"]');"
        " return c && c.data && c.data[0] && c.data[0].x.length >= 3; }",
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

    first = Run.objects.get(pk=run_id)
    assert first.status == "succeeded" and first.step == LIVE_STEPS and first.checkpoints.count() >= 1
    assert Run.objects.get(pk=second).status == "cancelled"
    steps = MetricPoint.objects.filter(run=first, name="critic/score/mean").values_list("step", flat=True)
    assert list(steps) == list(range(1, LIVE_STEPS + 1))
