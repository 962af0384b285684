"""An external (TRL) run in chromium: created and fed through the API by dapo.client against the live
server, its run page follows it live, marks what TRL did not record and offers no cancel, fork nor
export; the inspector lists its samples and one sample says what is not recorded; the runs list shows it
beside a run of ours."""

from __future__ import annotations

import pytest

from tests.e2e.support import log_in, off_loop
from tests.platform.fixtures import queued  # noqa: F401 (a fixture)
from tests.platform.support import make_fake_assets

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]


def test_a_trl_run_page_and_inspector_follow_it_live_and_mark_what_is_missing(
    alice,
    queued,  # noqa: F811 (a fixture: the native run is never sent to Celery)
    live,
):
    from playwright.sync_api import expect
    from rest_framework.authtoken.models import Token
    from runs.models import Run

    from dapo.client import Client
    from dapo.runconfig.presets import get_preset

    token = off_loop(lambda: Token.objects.create(user=alice).key)
    client = Client(live.base, token=token)
    run = client.create_external_run("trl grpo", source="trl", config={"learning_rate": 1e-6}, total_steps=4)
    client.log_metrics(run["id"], [{"step": 1, "metrics": {"learning_rate": 1e-6, "reward": 0.25}}])

    page, errors = live.page()
    log_in(page, live.base)
    page.goto(f"{live.base}/runs/{run['id']}/")
    expect(page.locator("#live-indicator")).to_have_text("live")
    expect(page.locator("#external-badge")).to_have_text("trained by TRL")
    expect(page.locator("#checkpoint")).to_have_text("not recorded by TRL")
    expect(page.locator("#run-log-empty")).to_contain_text("not recorded by TRL")
    for control in ("#cancel-btn", "#resume-btn", "#fork-btn", "#export-btn"):
        expect(page.locator(control)).to_have_count(0)

    # a step arrives through the API: the page shows it without a reload
    samples = [
        {
            "step": 2,
            "prompt": "Q: 2+3?",
            "completion": f"A: {k}",
            "rewards": {"exact": float(k == 5)},
            "advantage": 0.1,
        }
        for k in (4, 5, 6, 5)
    ]
    client.log_samples(run["id"], samples)
    client.log_metrics(run["id"], [{"step": 2, "metrics": {"learning_rate": 2e-6, "reward": 0.5}}])
    expect(page.locator("#samples-body tr")).to_have_count(4)
    expect(page.locator("#progress-text")).to_contain_text("2")
    first = page.locator("#samples-body tr").first
    expect(first.locator("td").nth(3)).to_have_text("–")  # correctness: TRL judged none

    # the inspector: the step's samples, and one sample's missing token data said as such
    page.goto(f"{live.base}/runs/{run['id']}/samples/?step=2")
    expect(page.locator("text=A: 5").first).to_be_visible()
    sample = client.samples(run["id"], step=2).__next__()
    page.goto(f"{live.base}/runs/{run['id']}/samples/{sample['id']}/")
    expect(page.locator("#no-token-data")).to_contain_text("not recorded by TRL")
    expect(page.locator(".verdict")).to_contain_text("not recorded by TRL")
    client.finish_external_run(run["id"])

    # the runs list: the TRL run beside a native one, each said for what it is
    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(live.tmp))
    native = off_loop(lambda: Run.create_queued(owner=alice, name="ours", config=config, preset="tiny_cpu"))
    page.goto(f"{live.base}/runs/")
    expect(page.locator(f"#runs-body tr[data-run-id='{run['id']}']")).to_contain_text("TRL run")
    expect(page.locator(f"#runs-body tr[data-run-id='{native.pk}']")).to_contain_text("tiny_cpu")
    assert errors == []
