"""A sweep in the browser: on the new-run form Alice picks two fields and their values, sees the count
against the cap (and the refusal when it is over), confirms the listed runs, lands on the group's page, and
once the runs have logged a metric, finds the parallel-coordinates chart of their settings against it and
the table sorted by it.

Only daphne runs here (no worker): the sweep's runs stay queued, and their metrics are written straight into
the test database. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.support import ARTIFACTS, VIEWPORT, off_loop

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]


def _count_runs() -> int:
    from runs.models import Run

    return Run.objects.count()


def _log_metrics() -> dict[str, float]:
    """Each run of the group logs val/acc/mean@4 at steps 1 and 2: its last value, by run name."""
    from runs.models import Run

    from dapo.loop.report import StepReport

    last = {}
    for k, run in enumerate(Run.objects.filter(group="e2e sweep").order_by("id")):
        lr, seed = run.config["optim"]["lr"], run.config["seed"]
        value = round(0.3 + lr * 1e4 + 0.05 * seed, 4)  # 0.4, 0.45, 0.6, 0.65
        run.record_step(StepReport(step=1, metrics={"val/acc/mean@4": 0.9 - 0.1 * k}, wall_time=1.0))
        run.record_step(StepReport(step=2, metrics={"val/acc/mean@4": value}, wall_time=2.0))
        last[run.name] = value
    return last


def test_a_small_sweep_from_the_form_to_its_parallel_coordinates(alice, live):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    page, errors = live.logged_in()
    base = live.base
    page.goto(f"{base}/runs/new/")
    page.fill("#f-name", "e2e sweep")
    page.click("#sweep-panel summary")
    rows = page.locator("#sweep-rows .sweep-row")
    rows.nth(0).locator(".sweep-field").select_option("optim.lr")
    rows.nth(0).locator(".sweep-values").fill("1e-5, 3e-5")
    rows.nth(1).locator(".sweep-field").select_option("seed")
    rows.nth(1).locator(".sweep-values").fill("0, 1")
    expect(page.locator("#sweep-count")).to_have_text("4 runs (2 × 2), within the cap of 20.")
    page.set_viewport_size({"width": 390, "height": 844})  # the open panel fits a phone
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.locator("#sweep-panel").screenshot(path=str(ARTIFACTS / "sweep-0-phone.png"))
    page.set_viewport_size(VIEWPORT)
    page.click("#sweep-add")  # a third row, left empty: ignored
    expect(rows).to_have_count(3)
    page.fill("#sweep-cap", "3")
    expect(page.locator("#sweep-count")).to_contain_text(
        "more than the cap of 3, so the sweep would be refused"
    )
    page.click("#launch-sweep")
    expect(page.locator("#sweep-errors")).to_contain_text(
        "the grid has 2 × 2 = 4 runs, more than the cap of 3"
    )
    assert off_loop(_count_runs) == 0

    page.fill("#sweep-cap", "4")
    # the count follows the typing once the page's scripts run: before them, Enter would be the browser's
    # own submit (the error page's text is in the DOM before its scripts at the end of the body have run)
    expect(page.locator("#sweep-count")).to_have_text("4 runs (2 × 2), within the cap of 4.")
    page.press("#sweep-cap", "Enter")  # Enter in the panel asks for the sweep, not a single run
    confirm = page.locator("#sweep-confirm li")
    expect(confirm).to_have_count(4, timeout=30_000)  # a form post and a page render, on a busy machine
    assert confirm.all_text_contents() == [
        "e2e sweep · lr=1e-05, seed=0",
        "e2e sweep · lr=1e-05, seed=1",
        "e2e sweep · lr=3e-05, seed=0",
        "e2e sweep · lr=3e-05, seed=1",
    ]
    page.screenshot(path=str(ARTIFACTS / "sweep-1-confirm.png"), full_page=True)
    page.click("#sweep-confirm-btn")
    page.wait_for_url(re.compile(r".*/runs/compare/\?group=e2e\+sweep$"))
    expect(page.locator("#legend .cmp-legend-item")).to_have_count(4)

    last = off_loop(_log_metrics)
    page.reload()
    page.wait_for_selector("#sweep[data-ready='val/acc/mean@4']")
    chart = page.locator("#sweep-chart")
    expect(chart.locator(".parcoords")).to_have_count(1)
    titles = chart.locator(".axis-title").all_text_contents()
    assert titles == ["optim.lr", "seed", "val/acc/mean@4 (last)"], titles
    # the table: sorted by the metric, best first; a click on its header sorts the other way
    names = page.locator("#sweep-body tr td:first-child").all_text_contents()
    best_first = sorted(last, key=lambda n: -last[n])
    assert [re.sub(r"^#\d+ ", "", n) for n in names] == best_first
    assert page.locator("#sweep-body tr").first.locator("td").last.text_content() == "0.65"
    page.click("#sweep-head button:has-text('val/acc/mean@4')")
    expect(page.locator("#sweep-body tr").first.locator("td").last).to_have_text("0.4")
    # the best value instead of the last: step 1's 0.9 is the first run's highest
    page.select_option("#sweep-value", "max")
    expect(chart.locator(".axis-title").last).to_have_text("val/acc/mean@4 (highest)")
    expect(page.locator("#sweep-body tr").first.locator("td").last).to_have_text("0.9")
    page.locator("#sweep").screenshot(path=str(ARTIFACTS / "sweep-2-parcoords.png"))
    page.emulate_media(color_scheme="dark")  # the axes' text follows the theme
    fill = chart.locator(".axis-title").first.evaluate("el => getComputedStyle(el).fill")
    assert fill == "rgb(226, 232, 240)", fill
    page.locator("#sweep").screenshot(path=str(ARTIFACTS / "sweep-3-parcoords-dark.png"))
    assert errors == []
