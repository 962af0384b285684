"""The runs list in the browser for daily chores: a filter with `or`, an unreadable filter that shows its
error (and no "No runs match"), bulk cancel, archive and delete of ticked runs (bob's shared run refused),
deleting a ladder run by typing its number, ?runs= on the compare page, and the ablation ladder's demo
setting and steps per rung on the new-run form.

Only daphne runs here: the runs are written straight into the test database."""

from __future__ import annotations

import pytest

from tests.e2e.support import ARTIFACTS, off_loop
from tests.platform.fixtures import (
    make_user,
    queued,  # noqa: F401 (a fixture: runs are never sent to Celery)
)
from tests.platform.support import make_fake_assets, report

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]


def test_or_filter_errors_bulk_actions_and_typed_delete(alice, queued, live, django_user_model):  # noqa: F811
    from django.contrib.auth.models import Group
    from playwright.sync_api import expect
    from runs.models import Run, Status

    from dapo.runconfig.presets import get_preset

    bob = make_user(django_user_model, "bob", "bob-pass-123")
    Group.objects.create(name="team").user_set.add(alice, bob)
    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(live.tmp))
    runs = {}
    for owner, name in (
        (alice, "one"),
        (alice, "two"),
        (alice, "three"),
        (alice, "lad · naive_grpo"),
        (bob, "bobs"),
    ):
        runs[name] = Run.create_queued(owner=owner, name=name, config=config, preset="tiny_cpu")
        runs[name].record_step(report(1, **{"critic/score/mean": 0.5}))
    runs["bobs"].shared_users.add(alice)
    Run.objects.filter(pk=runs["two"].pk).update(status=Status.RUNNING)

    page, errors = live.logged_in()
    base = live.base
    # `or` joins alternatives; an unreadable filter shows its error, not "No runs match"
    page.goto(f"{base}/runs/")
    page.fill("#filter-expr", "name = one or name = bobs")
    page.click("#filter-apply")
    expect(page.locator("#runs-body tr")).to_have_count(2)
    page.fill("#filter-expr", "name = one or")
    page.click("#filter-apply")
    expect(page.locator("#filter-error")).to_contain_text("ends after 'or'")
    expect(page.locator("#runs-empty")).to_be_hidden()

    # bulk cancel: alice's runs change, bob's shared run is refused by name
    page.goto(f"{base}/runs/?filter=name+%3D+one+or+name+%3D+two+or+name+%3D+bobs")
    expect(page.locator("#runs-body tr")).to_have_count(3)
    expect(page.locator("#bulk-cancel")).to_be_disabled()
    page.check("#select-all")
    expect(page.locator("#bulk-count")).to_contain_text("3 runs ticked")
    page.screenshot(path=str(ARTIFACTS / "runs-bulk.png"))
    page.click("#bulk-cancel")
    expect(page.locator(".msg-info").first).to_contain_text(f"Cancelled #{runs['one'].pk}")
    expect(page.locator(".msg-info").first).to_contain_text(f"Cancelling #{runs['two'].pk}")
    expect(page.locator(".msg-error").first).to_contain_text(
        f"Not cancelled: #{runs['bobs'].pk} 'bobs' is bob's, shared with you read-only: "
        "only its owner can cancel it"
    )
    expect(page.locator("#filter-expr")).to_have_value(
        "name = one or name = two or name = bobs"
    )  # the list as it was
    statuses = off_loop(lambda: dict(Run.objects.values_list("name", "status")))
    # bob's run was left alone (the shared worker's scheduler may have sent it meanwhile: not cancelled)
    assert statuses["one"] == Status.CANCELLED and statuses["bobs"] != Status.CANCELLED
    assert not off_loop(lambda: Run.objects.get(pk=runs["bobs"].pk).cancel_requested)

    # bulk archive: the archived runs leave the active list
    page.check(f"#runs-body tr[data-run-id='{runs['one'].pk}'] .select-run")
    page.click("#bulk-archive")
    expect(page.locator(".msg-info").first).to_contain_text(f"Archived #{runs['one'].pk}")
    expect(page.locator("#runs-body tr")).to_have_count(2)

    # bulk delete asks once more, lists the run and the refusal, and wants the count typed
    page.check(f"#runs-body tr[data-run-id='{runs['two'].pk}'] .select-run")
    page.check(f"#runs-body tr[data-run-id='{runs['bobs'].pk}'] .select-run")
    page.click("#bulk-delete")
    expect(page.locator("h1")).to_have_text("Delete 1 run?")
    expect(page.locator("#bulk-delete-runs li")).to_have_count(1)
    expect(page.locator("#bulk-delete-refused")).to_contain_text("is bob's, shared with you read-only")
    page.fill("#bulk-delete-confirm", "2")
    page.click("#bulk-delete-btn")
    expect(page.locator("#bulk-delete-error")).to_have_text("Type the number of runs, 1, to confirm.")
    page.fill("#bulk-delete-confirm", "1")
    page.click("#bulk-delete-btn")
    expect(page.locator(".msg-info").first).to_contain_text(f"Deleted #{runs['two'].pk}.")
    assert off_loop(lambda: set(Run.objects.values_list("name", flat=True))) == {
        "one",
        "three",
        "lad · naive_grpo",
        "bobs",
    }

    # one run's delete: its number, not a name with a "·" in it
    lad = runs["lad · naive_grpo"]
    page.goto(f"{base}/runs/{lad.pk}/delete/")
    expect(page.locator("label[for='delete-confirm']")).to_contain_text(f"Type the run's number, {lad.pk}")
    page.fill("#delete-confirm", str(lad.pk))
    page.click("#delete-btn")
    page.wait_for_url(f"{base}/runs/")
    assert not off_loop(lambda: Run.objects.filter(pk=lad.pk).exists())

    # the compare page answers ?runs= as ?ids=
    response = page.goto(f"{base}/runs/compare/?runs={runs['one'].pk},{runs['three'].pk}")
    assert response is not None and response.status == 200
    expect(page.locator("body")).to_contain_text("three")
    assert not errors, errors


def test_the_ladder_offers_the_demo_setting_and_steps_per_rung(alice, queued, live):  # noqa: F811
    from playwright.sync_api import expect
    from runs.models import Run

    page, errors = live.logged_in()
    page.goto(f"{live.base}/runs/new/")
    expect(page.locator("#ladder-demo")).to_be_checked()  # the demo preset: its setting is on
    expect(page.locator("#ladder-demo-help")).to_contain_text("16 to 28 tokens")
    page.fill("#f-name", "ablation")  # the demo's model and data, under the stack's roots
    page.fill("#ladder-steps", "2")
    page.click("#launch-ladder")
    expect(page.locator("#ladder-confirm")).to_be_visible()
    expect(page.locator("#ladder-plan")).to_contain_text("2 steps each, 12 in all")
    expect(page.locator("#ladder-plan")).to_contain_text("responses up to 27 tokens")
    expect(page.locator("#ladder-steps")).to_have_value("2")
    page.locator("#ladder-confirm").screenshot(path=str(ARTIFACTS / "ladder-confirm.png"))
    page.locator("#ladder-options").screenshot(path=str(ARTIFACTS / "ladder-options.png"))
    page.click("#ladder-cancel")
    expect(page.locator("#ladder-confirm")).to_have_count(0)
    assert off_loop(lambda: Run.objects.count()) == 0
    assert not errors, errors
