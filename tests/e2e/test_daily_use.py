"""Daily use in the browser: a preset change on Clone & edit lists what it replaced and can be undone; a
"Cancelling..." note leaves once the run is cancelled; the run page follows the run's log.

Only daphne runs here: the runs are written straight into the test database, and status events are
published to the channel layer by the test itself.
"""

from __future__ import annotations

import pytest

from tests.e2e.support import off_loop
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets, sample

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]


def test_clone_preset_undo_stale_note_and_live_log(alice, queued, live, settings):  # noqa: F811
    from playwright.sync_api import expect
    from runs.events import publish, status_event, step_event
    from runs.models import Run
    from runs.run_log import log_path

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides({**make_fake_assets(live.tmp), "optim.lr": 3e-4})
    run = Run.create_queued(owner=alice, name="lr-3e-4", config=config, preset="tiny_cpu")
    sick = Run.create_queued(owner=alice, name="collapsing", config=config, preset="tiny_cpu")
    for step, entropy in ((1, 1.2), (2, 0.4), (3, 0.05)):
        metrics = {
            "actor/entropy": entropy,
            "train/num_prompts_kept": 0 if step == 3 else 8,
            "response_length/clip_ratio": 0.1 * step,
        }
        samples = [sample(step, i) for i in range(2)] if step == 3 else []  # problem 0, at step 3 only
        sick.record_step(StepReport(step=step, metrics=metrics, samples=samples))
    page, errors = live.logged_in()
    base = live.base
    # Clone & edit: the title names the run; a preset change lists what it replaced, and Undo restores
    page.goto(f"{base}/runs/new/?from={run.pk}")
    assert page.title().startswith(f"Clone run #{run.pk}")
    assert page.input_value("#f-optim-lr") == "0.0003"
    page.select_option("#f-preset", "tiny_cpu")
    expect(page.locator("#preset-notice")).to_be_visible()
    assert "optim.lr 0.0003 → " in page.text_content("#preset-notice-text")
    assert page.input_value("#f-optim-lr") != "0.0003"
    page.click("#preset-undo")
    assert page.input_value("#f-optim-lr") == "0.0003"
    expect(page.locator("#preset-notice")).to_be_hidden()

    # the health panel explains its tiles and warns of a collapse, of nothing kept, of the length limit
    page.goto(f"{base}/runs/{sick.pk}/")
    notes = page.locator("#health-warnings li")
    expect(notes).to_have_count(3)
    collapse = "Entropy collapse: actor/entropy is 0.0500, down from 1.20 at step 1."
    assert notes.nth(0).text_content().startswith(collapse)
    assert "Every prompt group was filtered" in notes.nth(1).text_content()
    assert notes.nth(2).text_content().startswith("30% of the responses hit the generation limit")
    tip = page.locator(".tile", has_text="Entropy").get_attribute("title")
    assert tip.startswith("Mean token entropy")
    # between two steps the ETA stops at the next step's estimate instead of running on to 0
    state = {"status": "running", "eta_s": 100, "total_steps": 10, "step": 5}
    assert page.evaluate("s => window.dapoHealth.eta(s, 50)", state) == {"eta": 80, "slow": True}
    assert page.evaluate("s => window.dapoHealth.eta(s, 10)", state) == {"eta": 90, "slow": False}

    # a problem drawn at one step only: a large point and the reason, not a lone dot
    page.goto(f"{base}/runs/{sick.pk}/problems/0/")
    note = page.locator("#problem-chart .annotation-text")
    why = "a train problem comes round once per pass over the data"
    expect(note).to_have_text(f"this run drew this problem at 1 step so far: {why}")

    # before its first step a chart says so, instead of empty axes from -1 to 6
    page.goto(f"{base}/runs/{run.pk}/")
    waiting = page.locator("#health-charts .annotation-text").first
    expect(waiting).to_have_text("waiting for the first step")

    # the run page follows the log, and a "Cancelling" note goes once the run is cancelled
    off_loop(lambda: run.claim("w"))
    path = log_path(run.pk)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("===== attempt 1 =====\nstep 1 done\n")
    page.goto(f"{base}/runs/{run.pk}/")
    page.click("#run-log-panel summary")
    expect(page.locator("#run-log")).to_contain_text("step 1 done")
    with path.open("a") as f:
        f.write("Traceback (most recent call last):\nValueError: <b>boom</b>\n")
    expect(page.locator("#run-log")).to_contain_text("ValueError: <b>boom</b>", timeout=10_000)
    assert page.locator("#run-log b").count() == 0  # text, never markup
    page.click("#cancel-btn")
    expect(page.locator(".messages .status-note")).to_contain_text("Cancelling")
    expect(page.locator("#live-indicator")).to_have_text("live")
    off_loop(lambda: (run.finish("cancelled", worker_id="w"), publish(run.pk, status_event(run))))
    expect(page.locator("#run-status")).to_have_text("cancelled")
    # an ended run streams nothing more: the indicator says connected, not live
    expect(page.locator("#live-indicator")).to_have_text("connected")
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "idle")
    expect(page.locator(".messages .status-note")).to_have_count(0)
    # the health panel's (empty) warning list is not one of those notes: a step that comes after the
    # status change still draws the panel (it used to find the list gone: a script error)
    off_loop(lambda: publish(run.pk, step_event(run, 1, {"actor/entropy": 0.5}, [])))
    expect(page.locator(".tile", has_text="Entropy").locator(".tile-value")).to_have_text("0.500")
    expect(page.locator("#health-warnings")).to_have_count(1)
    assert errors == []
