"""The run page's distributions, hardware charts, tab title and desktop notifications, in chromium.

Only daphne runs: the run's rows are written by the test, and live events are published to the channel
layer by the test itself, as the worker would. The page's Notification is a recorder the test installs (with
permission granted), so what the page announces is checked, not what the desktop draws.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.e2e.support import log_in, off_loop
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

RECORDER = """
window.__notes = [];
window.Notification = function (title, options) { window.__notes.push([title, (options || {}).body]); };
window.Notification.permission = "granted";
window.Notification.requestPermission = () => Promise.resolve("granted");
"""


def quantiles(step: int) -> list[float]:
    return [step + level / 100 for level in range(0, 101, 5)]


def test_distributions_hardware_title_and_notifications_follow_the_run(
    alice,
    queued,  # noqa: F811
    live,
):
    from notifications.delivery import detect_stalls
    from playwright.sync_api import expect
    from runs.events import hardware_event, publish, status_event, step_event
    from runs.models import HardwareSample, Run

    from dapo.loop.report import RunInfo, StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(live.tmp))
    run = Run.create_queued(owner=alice, name="panels", config=config, preset="tiny_cpu")
    run.claim("w")
    run.start(RunInfo(run_dir="/tmp/x", total_steps=10, start_step=1, config={}))
    names = ("reward", "length", "advantage", "entropy", "ratio")
    for step in (1, 2, 3):
        dist = {name: quantiles(step) for name in names}
        run.record_step(StepReport(step=step, metrics={"critic/score/mean": 0.1 * step}, distributions=dist))
    HardwareSample.objects.bulk_create(
        [
            HardwareSample(
                run=run,
                time=1.7e9 + t,
                worker=w,
                data={
                    "cpu_percent": 10.0 * t,
                    "rss_gb": 0.5,
                    "sys_mem_used_gb": 3.0,
                    "sys_mem_total_gb": 8.0,
                },
            )
            for t in range(2)
            for w in ("controller", "learner 0")
        ]
    )

    base = live.base
    page, errors = live.page()
    page.add_init_script(RECORDER)
    log_in(page, base)
    page.goto(f"{base}/runs/{run.pk}/")
    expect(page.locator("#live-indicator")).to_have_text("live")
    assert page.title() == f"▶ running 3/10 · #{run.pk} panels"

    # one heatmap per quantity, a column per step, the median line at the recorded 50th percentile
    heatmaps = page.locator("#distribution-charts .chart")
    expect(heatmaps).to_have_count(5)
    columns = (
        "(q) => { const c = document.querySelector(`#distribution-charts .chart[data-quantity=${q}]`);"
        " return c && c.data && c.data[0].type === 'heatmap' ? c.data[0].x.length : 0; }"
    )
    for name in names:
        assert page.evaluate(columns, name) == 3
    median = page.evaluate(
        "() => document.querySelector('#distribution-charts .chart[data-quantity=ratio]').data[1].y"
    )
    assert median == pytest.approx([1.5, 2.5, 3.5])
    # a column's shares add up to 100% of the step's values
    total = page.evaluate(
        "() => { const z = document.querySelector('#distribution-charts .chart').data[0].z;"
        " return z.reduce((s, row) => s + row[0], 0); }"
    )
    assert total == pytest.approx(100.0)

    # hardware: a line per worker; no GPU charts on a machine without GPU figures
    cpu = (
        "() => document.querySelector('#hardware-charts .chart[data-quantity=cpu_percent]').data"
        ".map((t) => [t.name, t.y.length])"
    )
    page.wait_for_function(
        "() => { const c = document.querySelector('#hardware-charts .chart[data-quantity=cpu_percent]');"
        " return c && c.data && c.data.length === 2; }"
    )
    assert page.evaluate(cpu) == [["controller", 2], ["learner 0", 2]], errors
    expect(page.locator("#hardware-charts .chart")).to_have_count(3)
    expect(page.locator("#hardware-no-gpu")).to_be_visible()

    # live: a step's distributions add a column, a hardware event extends the lines
    dist = {name: quantiles(4) for name in names}
    off_loop(lambda: publish(run.pk, step_event(run, 4, {"critic/score/mean": 0.4}, [], dist)))
    page.wait_for_function(f"() => ({columns})('entropy') === 4")
    new = [HardwareSample(run=run, time=1.7e9 + 5, worker="controller", data={"cpu_percent": 99.0})]
    off_loop(lambda: publish(run.pk, hardware_event(new)))
    page.wait_for_function(f"() => ({cpu})()[0][1] === 3")

    # a stall, then a failure: the title says so and each raises one desktop notification
    def stall() -> None:
        detect_stalls(run.last_step_at + timedelta(minutes=16))
        run.refresh_from_db()
        publish(run.pk, status_event(run))

    off_loop(stall)
    expect(page.locator("#run-status")).to_have_text("stalled")
    assert page.title().startswith("⚠ stalled")

    def fail() -> None:
        run.finish("failed", "RuntimeError: boom\nValueError: the last line", worker_id="w")
        publish(run.pk, status_event(run))

    off_loop(fail)
    expect(page.locator("#run-status")).to_have_text("failed")
    assert page.title() == f"✗ failed · #{run.pk} panels"
    notes = page.evaluate("() => window.__notes")
    assert notes == [
        [f"Run #{run.pk} stalled", "panels, step 3/10"],
        [f"Run #{run.pk} failed", "panels, step 3/10: ValueError: the last line"],
    ]
    expect(page.locator("#desktop-notify")).to_have_text("Desktop notifications on")
    assert errors == []
