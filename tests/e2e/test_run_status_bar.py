"""The run page in the browser: the running time apart from the wall time (queued and cancelled time only
in the latter), and "Kept" meaning the groups trained on, with the surplus shown apart.

Only daphne runs here: the run is written straight into the test database.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]


def test_running_and_wall_time_apart_and_kept_counts_the_groups_trained_on(alice, queued, live):  # noqa: F811
    from django.utils import timezone
    from playwright.sync_api import expect
    from runs.models import Run, Status

    from dapo.loop.report import RunInfo, StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(live.tmp))
    run = Run.create_queued(owner=alice, name="resumed-once", config=config, preset="tiny_cpu")
    run.claim("w1")
    run.start(RunInfo(run_dir="/tmp/x", total_steps=60, start_step=1, config={}))
    metrics = {
        "train/num_prompts_kept": 16.0,
        "train/num_prompts_generated": 18.0,
        "train/num_prompts_surplus": 2.0,
    }
    run.record_step(StepReport(step=1, metrics=metrics), worker_id="w1")
    run.finish("cancelled", worker_id="w1")
    now = timezone.now()
    # 51 min 3 s of steps over 1 h 26 min of wall time: the rest was cancelled and queued
    Run.objects.filter(pk=run.pk).update(
        started_at=now - timedelta(minutes=86),
        finished_at=now,
        run_seconds=51 * 60 + 3,
        status=Status.CANCELLED,
    )
    page, errors = live.logged_in()
    page.goto(f"{live.base}/runs/{run.pk}/")
    expect(page.locator("#running")).to_have_text("51m 3s")
    expect(page.locator("#elapsed")).to_have_text("1h 26m")
    kept = page.locator(".tile", has_text="Kept / generated")
    expect(kept).to_contain_text("16 / 18 (+2 surplus)")
    assert "trained on" in (kept.get_attribute("title") or "")
    assert not errors, errors
