"""The rollout inspector in a real browser (daphne, Redis, the websocket) on a run the worker's sink writes
step by step: a recording of a real small demo run (tests/e2e/recorded.py) replayed through PlatformSink.
Alice opens the samples after the first step; the slider's range grows live to every step, the slider and
the arrow keys move the step (the rows change), filters and top-k change the rows, a sample opens in full
with its coloured tokens, its problem's timeline draws, and an export downloads. Screenshots go to
test-artifacts/inspector-*.png.
"""

from __future__ import annotations

import pytest

from tests.e2e.recorded import config_of, replay
from tests.e2e.support import ARTIFACTS
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: the run is never sent to Celery)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.django_db(transaction=True),
]

STEPS = 4  # the recording's optim.total_steps
ROW_LINKS = "#results tr.sample-row td:first-child a"


def _rows(page) -> list[str]:
    return page.locator(ROW_LINKS).evaluate_all("links => links.map(a => a.getAttribute('href'))")


def _step(page) -> str:
    return page.locator("#step-label").inner_text()


def test_a_user_inspects_the_samples_of_a_live_run(live, alice, queued):  # noqa: F811
    from playwright.sync_api import expect
    from runs.models import Run

    ARTIFACTS.mkdir(exist_ok=True)
    base = live.base
    run = Run.create_queued(
        owner=alice, name="inspector e2e", config=config_of("inspector"), preset="tiny_cpu"
    )
    run_id = run.pk
    replay(run, "inspector", steps=[1], finish=False)
    page, errors = live.logged_in()
    page.goto(f"{base}/runs/{run_id}/")

    # 1. from the run page to the inspector, before the run has recorded all its steps
    page.click("#samples-link")
    page.wait_for_url(f"{base}/runs/{run_id}/samples/")
    page.evaluate("() => { window.__noReload = true; }")
    steps_at_load = page.evaluate(
        "() => JSON.parse(document.getElementById('inspector-data').textContent).steps.length"
    )
    assert steps_at_load == 1

    # 2. the slider's range grows as the run records steps, without a reload
    replay(run, "inspector", steps=range(2, STEPS + 1), pace_s=0.2)
    page.wait_for_function(
        f"() => document.getElementById('step-slider').max === '{STEPS - 1}'", timeout=600_000
    )
    assert page.evaluate("() => window.__noReload") is True
    expect(page.locator("#step-range")).to_contain_text(f"of 1–{STEPS}")
    page.screenshot(path=str(ARTIFACTS / "inspector-1-step.png"), full_page=True)

    # 3. the arrow keys and the slider move the step: other samples in the rows
    page.locator("h1").click()  # focus out of any input: the arrows belong to the page
    for _ in range(STEPS):
        page.keyboard.press("ArrowRight")
    expect(page.locator("#step-label")).to_have_text(str(STEPS))
    page.wait_for_url(lambda url: f"step={STEPS}" in url)
    expect(page.locator(ROW_LINKS)).to_have_count(16)
    newest = _rows(page)
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(lambda url: f"step={STEPS - 1}" in url)
    page.wait_for_function(
        f"() => document.querySelector('{ROW_LINKS}').getAttribute('href') !== '{newest[0]}'"
    )
    assert _step(page) == str(STEPS - 1) and set(_rows(page)).isdisjoint(newest)
    page.locator("#step-slider").evaluate("s => { s.value = 0; s.dispatchEvent(new Event('input')); }")
    page.wait_for_url(lambda url: "step=1" in url)
    expect(page.locator("#step-label")).to_have_text("1")
    first = _rows(page)
    assert len(first) == 16 and set(first).isdisjoint(newest)
    page.click("#step-next")
    page.wait_for_url(lambda url: "step=2" in url)

    # 4. filters change the rows: samples with token data (the first 8 trained), then a top-3
    page.select_option("#f-tokens", "true")
    expect(page.locator(ROW_LINKS)).to_have_count(8)
    assert page.locator("#results td.tok").all_inner_texts() == ["●"] * 8
    expect(page.locator("#summary .matching")).to_contain_text("8 match the filter")
    page.select_option("#f-view", "list")
    page.select_option("#f-rank", "top")
    page.fill("#f-k", "3")
    page.click("#f-apply")
    expect(page.locator(ROW_LINKS)).to_have_count(3)
    assert "rank=top" in page.url and "k=3" in page.url
    page.screenshot(path=str(ARTIFACTS / "inspector-2-filtered.png"), full_page=True)

    # 5. an export of the filter downloads as CSV
    href = page.locator("#export-filter-csv").get_attribute("href")
    export = page.request.get(f"{base}{href}")
    assert export.ok and export.text().splitlines()[0].startswith("run_id,step,split,sample_index")
    assert len(export.text().strip().splitlines()) == 1 + 3

    # 6. one sample in full, its tokens coloured by log-prob, entropy and ratio
    page.locator("#results tr.sample-row").first.click()
    page.wait_for_url(f"{base}/runs/{run_id}/samples/*/")
    expect(page.locator("#response")).not_to_be_empty()
    expect(page.locator("#pred")).to_be_visible()
    page.wait_for_function("() => window.__tokenViewReady === true")
    tokens = page.locator("#tokens .tok")
    assert tokens.count() > 0
    coloured = "els => els.filter(e => e.style.background).map(e => e.style.background)"
    by_logprob = tokens.evaluate_all(coloured)
    assert len(by_logprob) == tokens.count()  # every token has a sampling log-prob
    tokens.first.hover()
    expect(page.locator("#token-info")).to_contain_text("log-prob")
    page.check("input[name=colour-by][value=entropy]")
    assert tokens.evaluate_all(coloured) != by_logprob
    page.check("input[name=colour-by][value=ratio]")
    expect(page.locator("#token-legend")).to_contain_text("1+ε_high = 1.28")
    page.screenshot(path=str(ARTIFACTS / "inspector-3-sample-tokens.png"), full_page=True)

    # 7. the problem's timeline: a chart and a table of its pass rate per step
    page.click("#problem-link")
    page.wait_for_url(lambda url: f"/runs/{run_id}/problems/" in url)
    expect(page.locator("#problem-chart .main-svg").first).to_be_attached()
    assert page.locator("#problem-steps tbody tr").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "inspector-4-problem.png"), full_page=True)
    assert not errors, errors
