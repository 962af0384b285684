"""The inspector's discarded rollouts, reward breakdown and objective explainer in a real browser (daphne
only; the step is written into the test database): group badges name why a group was not trained, the
counts per reason say what a capped step did not store and filter the rows, the reward-part filter narrows
them, the reward cell and the sample page break the reward into its parts, and selecting a token (a click,
then the arrow keys) explains what the loss did with it. Screenshot: test-artifacts/inspector-reasons-*.png.
"""

from __future__ import annotations

import pytest

from tests.e2e.support import ARTIFACTS
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.inspector.test_discards import METRICS, configure, discard_samples
from tests.platform.support import make_fake_assets

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]
ROW_LINKS = "#results tr.sample-row td:first-child a"


def test_badges_reason_counts_part_filter_breakdown_and_explainer(alice, queued, live):  # noqa: F811
    from playwright.sync_api import expect
    from runs.models import Run, Sample

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(live.tmp))
    run = Run.create_queued(owner=alice, name="discards", config=config, preset="tiny_cpu")
    configure(run)
    run.record_step(StepReport(step=1, metrics=METRICS, samples=discard_samples()))
    first = Sample.objects.get(run=run, sample_index=0).pk
    ARTIFACTS.mkdir(exist_ok=True)
    page, errors = live.logged_in()
    base = live.base
    page.goto(f"{base}/runs/{run.pk}/samples/?step=1")
    # 1. each dropped group names its reason; an overlong-filtered sample has its own badge
    badges = page.locator("#results .group-head .rbadge")
    expect(badges).to_have_text(["dropped: all correct", "dropped: all wrong", "surplus: batch full"])
    expect(page.locator("#group-1 td .rbadge[data-reason=overlong]")).to_have_count(1)
    # 2. the counts per reason, with what the capped step did not store
    discards = page.locator("#discards")
    expect(discards.locator("[data-reason=all_wrong]")).to_contain_text("(1 more not stored)")
    expect(discards).to_contain_text("2 of 12 generated samples not stored (logging.samples_per_step = 10)")
    # 3. the reward cell breaks the reward into its weighted parts
    cell = page.locator("#group-1 tr.sample-row").nth(1).locator("td.reward-cell")
    expect(cell).to_contain_text("math_dapo -1")
    expect(cell).to_contain_text("regex 1 × 0.25")
    expect(cell).to_contain_text("overlong -0.5")
    page.screenshot(path=str(ARTIFACTS / "inspector-reasons-1-groups.png"), full_page=True)
    # 4. a count filters the rows to its reason; the reason select filters too
    discards.locator("[data-reason=surplus]").click()
    page.wait_for_url(lambda url: "reason=surplus" in url)
    expect(page.locator(ROW_LINKS)).to_have_count(2)
    page.select_option("#f-reason", "overlong")
    expect(page.locator(ROW_LINKS)).to_have_count(1)
    # 5. the reward-part filter: regex = 1 (any reason)
    page.select_option("#f-reason", "")
    expect(page.locator(ROW_LINKS)).to_have_count(10)
    page.select_option("#f-part", "reward/regex")
    page.select_option("#f-part_op", "eq")
    page.fill("#f-part_value", "1")
    page.click("#f-apply")
    expect(page.locator(ROW_LINKS)).to_have_count(5)
    assert "part=reward%2Fregex" in page.url and "part_value=1" in page.url

    # 6. the sample page: its reward in parts, then why each token moved
    page.goto(f"{base}/runs/{run.pk}/samples/{first}/")
    breakdown = page.locator("#reward-breakdown")
    expect(breakdown.locator("[data-part='reward/regex']")).to_contain_text("× 0.250")
    expect(breakdown.locator("#breakdown-total")).to_have_text("1.000")
    page.wait_for_selector("#token-explain[data-ready='1']")
    page.locator("#tokens .tok").first.click()
    expect(page.locator("#explain-rule")).to_have_text(
        "clipped at 1 + ε_high (A > 0 and the ratio above it): no gradient"
    )
    table = page.locator("#explain-table")
    expect(table).to_contain_text("1.4918")  # the ratio e^0.4
    expect(table).to_contain_text("[1 − ε_low, 1 + ε_high] = [0.800, 1.280]; dual clip c = 10")
    expect(table).to_contain_text("token-mean: 1 / 7 valid tokens of the mini-batch")
    expect(page.locator("#explain-push")).to_contain_text("No push")
    page.locator("#tokens").press("ArrowRight")
    expect(page.locator("#tokens .tok.selected")).to_have_attribute("data-i", "1")
    expect(page.locator("#explain-rule")).to_have_attribute("data-rule", "")
    expect(page.locator("#explain-push")).to_contain_text("pushed up")
    page.screenshot(path=str(ARTIFACTS / "inspector-reasons-2-explainer.png"), full_page=True)
    assert errors == []
