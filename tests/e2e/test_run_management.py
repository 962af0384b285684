"""Run management in the browser: rename, tags and notes; the list's filter, columns and a saved view; a
filter error shown beside its box; delete after typing the name; a run shared with bob, read-only.

Only daphne runs here: the runs are written straight into the test database."""

from __future__ import annotations

import pytest

from tests.e2e.support import off_loop
from tests.platform.fixtures import (
    make_user,
    queued,  # noqa: F401 (a fixture: runs are never sent to Celery)
)
from tests.platform.support import make_fake_assets, report

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]


def test_manage_filter_save_view_delete_and_share(alice, queued, live, django_user_model):  # noqa: F811
    from django.contrib.auth.models import Group
    from playwright.sync_api import expect
    from runs.models import Run

    from dapo.runconfig.presets import get_preset

    bob = make_user(django_user_model, "bob", "bob-pass-123")
    Group.objects.create(name="team").user_set.add(alice, bob)  # one shares only within one's groups
    paths = make_fake_assets(live.tmp)
    runs = {}
    for name, lr, acc in (("lr-small", 1e-5, 0.9), ("lr-big", 1e-3, 0.5)):
        config = get_preset("tiny_cpu").with_overrides({**paths, "optim.lr": lr})
        runs[name] = run = Run.create_queued(owner=alice, name=name, config=config, preset="tiny_cpu")
        run.record_step(report(1, **{"val__acc/mean@4": acc}))
    small, big = runs["lr-small"], runs["lr-big"]
    small.record_step(report(2, **{"val__acc/mean@4": 0.9}))
    small.resumed_steps = [2]  # a resume after step 1: a marker on its charts
    small.save(update_fields=["resumed_steps"])
    folder = live.var / "runs" / str(big.pk)  # daphne's DAPO_RUNS_DIR (stack.environment)
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"w" * 1000)

    page, errors = live.logged_in()
    base = live.base
    # rename, tag, write notes (markdown, raw HTML shown as text), share with bob
    page.goto(f"{base}/runs/{small.pk}/")
    page.fill("#edit-name", "lr-small baseline")
    page.fill("#edit-tags", "baseline, sweep")
    page.fill("#edit-notes", "**best so far** <b>raw</b>")
    page.click("#edit-save")
    expect(page.locator("h1")).to_contain_text("lr-small baseline")
    expect(page.locator("#run-tags .tag")).to_have_text(["baseline", "sweep"])
    expect(page.locator("#run-notes strong")).to_have_text("best so far")
    assert "<b>raw</b>" in page.text_content("#run-notes")  # as text, not as markup
    page.locator("#health-charts").scroll_into_view_if_needed()  # charts draw once on screen
    expect(page.locator("#health-charts .annotation-text", has_text="resume").first).to_be_visible()
    page.fill("#share-users", "bob")
    page.click("#share-save")
    expect(page.locator(".msg-info").first).to_contain_text("Shared read-only with bob")

    # a comparison saved under a name, with its own URL, shared with bob
    page.goto(f"{base}/runs/compare/?ids={small.pk},{big.pk}&smooth=0.2")
    page.fill("#save-name", "lr study")
    page.click("#compare-save")
    page.wait_for_url(f"{base}/runs/compare/saved/**")
    saved_url = page.url.split("?")[0]
    expect(page.locator("#saved-name")).to_have_text("lr study")
    page.fill("#compare-share-users", "bob")
    page.click("#compare-share")
    expect(page.locator(".msg-info").first).to_contain_text("Shared read-only")

    # filter by config and metric, pick columns, save the view; a filter it cannot read says why
    page.goto(f"{base}/runs/")
    page.fill("#filter-expr", "optim.lr < 1e-4 and val/acc/mean@4 > 0.8 and tags has baseline")
    page.fill("#filter-columns", "optim.lr, val/acc/mean@4")
    page.click("#filter-apply")
    expect(page.locator("#runs-body tr")).to_have_count(1)
    expect(page.locator("#runs-body tr")).to_contain_text("lr-small baseline")
    expect(page.locator("#runs-head th.col-extra")).to_have_text(["optim.lr", "val/acc/mean@4"])
    expect(page.locator("#runs-body td.col-extra").first).to_have_text("0.00001")
    page.fill("#view-name", "good small lr")
    page.click("#view-save")
    expect(page.locator("#saved-views a", has_text="good small lr")).to_be_visible()
    page.goto(f"{base}/runs/")
    expect(page.locator("#runs-body tr")).to_have_count(2)
    page.click("#saved-views a:has-text('good small lr')")
    expect(page.locator("#runs-body tr")).to_have_count(1)
    page.fill("#filter-expr", "optim.lr <")
    page.click("#filter-apply")
    expect(page.locator("#filter-error")).to_contain_text("expected a value")
    expect(page.locator("#filter-expr")).to_have_attribute("aria-invalid", "true")

    # delete: a wrong name is refused; the right one removes the run and its folder
    page.goto(f"{base}/runs/{big.pk}/")
    page.click("#delete-link")
    expect(page.locator("#delete-summary")).to_contain_text("cancelled first")
    page.fill("#delete-confirm", "not it")
    page.click("#delete-btn")
    expect(page.locator("#delete-error")).to_be_visible()
    page.fill("#delete-confirm", "lr-big")
    page.click("#delete-btn")
    page.wait_for_url(f"{base}/runs/")
    expect(page.locator(".msg-info").first).to_contain_text(f"Deleted run #{big.pk}")
    assert not folder.exists()
    assert not off_loop(lambda: Run.objects.filter(pk=big.pk).exists())
    assert not errors, errors

    # bob sees the shared run, read-only; nothing else of alice's
    bob_page, bob_errors = live.page()
    bob_page.goto(f"{base}/accounts/login/")
    bob_page.fill("#id_username", "bob")
    bob_page.fill("#id_password", "bob-pass-123")
    bob_page.click("button[type=submit]")
    bob_page.wait_for_url(f"{base}/runs/")
    expect(bob_page.locator("#runs-body tr")).to_have_count(1)
    expect(bob_page.locator("#runs-body tr")).to_contain_text("lr-small baseline")
    bob_page.goto(f"{base}/runs/{small.pk}/")
    expect(bob_page.locator("#read-only-note")).to_be_visible()
    expect(bob_page.locator("#live-indicator")).to_have_text("live")  # the websocket let him in
    assert bob_page.locator("#edit-form").count() == 0 and bob_page.locator("#cancel-form").count() == 0
    bob_page.goto(saved_url)
    expect(bob_page.locator("#saved-name")).to_have_text("lr study")
    expect(bob_page.locator("#smoothing-value")).to_have_text("0.20")  # the saved settings
    assert bob_page.locator("#compare-share-form").count() == 0
    assert not bob_errors, bob_errors
