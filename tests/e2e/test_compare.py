"""Comparing two runs in a real browser: daphne, a Celery worker, Redis, and two runs the worker's sink wrote.

Two tiny demo runs (a different seed and learning rate), with validation, recorded from real training
(tests/e2e/recorded.py) and replayed through the worker's PlatformSink. Alice ticks both on
the runs list, compares them, and checks: each chart overlays the two runs; the EMA slider leaves the
plotted 3-point curves as they are (a sparse curve is never smoothed); the config diff shows exactly the two
differing keys; the x axis switches to wall time and generated tokens; one validation problem is shown side
by side as text; a chart downloads as PNG and the metrics as CSV. Then she launches the ablation ladder from
the new-run form and lands on its comparison. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest

from tests.e2e.recorded import config_of, replay
from tests.e2e.support import ARTIFACTS
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: the runs here are never sent to Celery)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.django_db(transaction=True),
]


def ema(values: list[float], w: float) -> list[float]:
    """TensorBoard's debiased EMA, written here independently of compare.js."""
    out, last = [], 0.0
    for n, v in enumerate(values, start=1):
        last = last * w + (1 - w) * v
        out.append(last / (1 - w**n))
    return out


def two_finished_runs(alice: Any) -> list[int]:
    """The two recorded runs, written as the worker writes them (tests/e2e/recorded.py)."""
    from runs.models import Run

    ids = []
    for name, recording in (("cmp seed0", "compare-seed0"), ("cmp seed1 lr4e-5", "compare-seed1")):
        run = Run.create_queued(owner=alice, name=name, config=config_of(recording), preset="tiny_cpu")
        replay(run, recording)
        ids.append(run.pk)
    return ids


def line_traces(page: Any, metric: str) -> list[dict]:
    return page.evaluate(
        """(m) => document.querySelector(`.chart[data-metric="${m}"]`).data
             .filter((t) => t.meta.kind === 'line').map((t) => ({run: t.meta.run, x: t.x, y: t.y}))""",
        metric,
    )


def set_range(page: Any, selector: str, value: str) -> None:
    page.eval_on_selector(
        selector, "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", value
    )


def test_two_real_runs_compared_side_by_side(live, live_stack, alice, queued):  # noqa: F811
    from playwright.sync_api import expect
    from runs.models import MetricPoint, Run

    ARTIFACTS.mkdir(exist_ok=True)
    base = live_stack
    ids = two_finished_runs(alice)
    # a metric that varies from step to step (every tiny answer is truncated: reward and entropy are flat)
    metric = "timing_s/step"
    raw = {
        i: list(
            MetricPoint.objects.filter(run_id=i, name=metric).order_by("step").values_list("value", flat=True)
        )
        for i in ids
    }
    page, errors = live.page(timeout_ms=30_000, accept_downloads=True)

    # 1. log in, tick both runs on the list, compare them
    page.goto(f"{base}/accounts/login/?next=/runs/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{base}/runs/")
    expect(page.locator("#compare-selected")).to_be_disabled()
    for run_id in ids:
        page.check(f"#runs-body tr[data-run-id='{run_id}'] input.select-run")
    page.screenshot(path=str(ARTIFACTS / "compare-1-selected.png"))
    page.click("#compare-selected")
    page.wait_for_url(re.compile(r".*/runs/compare/\?ids=.*"))
    page.wait_for_function("() => window.__compareReady !== undefined")  # functions: the CSP forbids eval
    shown = re.search(r"\?ids=(\d+),(\d+)&", page.url).groups()
    assert shown == (str(ids[1]), str(ids[0]))  # in the list's order: newest first

    # 2. add a metric with the picker; its chart overlays the two runs; the EMA slider changes the values
    page.fill("#metric-search", "timing step")
    expect(page.locator("#metric-options li").first).to_have_text(metric)
    page.press("#metric-search", "Enter")
    expect(page.locator("#metric-chips .cmp-chip")).to_have_count(5)
    traces = "(m) => (document.querySelector(`.chart[data-metric='${m}']`).data || []).length"
    page.wait_for_function(f"{traces} > 0", arg=metric)
    set_range(page, "#smoothing", "0")
    # redrawn without smoothing: the faint raw traces go (reading before the redraw saw EMA 0.6 values)
    page.wait_for_function(f"(m) => ({traces})(m) === 2", arg=metric)
    lines = {t["run"]: t for t in line_traces(page, metric)}
    assert sorted(lines) == sorted(ids)  # two traces, one per run
    for i in ids:
        assert lines[i]["x"] == [1, 2, 3] and lines[i]["y"] == pytest.approx(raw[i])
    set_range(page, "#smoothing", "0.9")
    page.wait_for_function("() => location.search.includes('smooth=0.9')")  # the comparison is a link
    # 3 points each: a sparse curve is never smoothed (tests/e2e/test_compare_smoothing.py: a dense one is)
    assert page.evaluate(traces, metric) == 2
    for i, line in {t["run"]: t for t in line_traces(page, metric)}.items():
        assert line["y"] == pytest.approx(raw[i])

    # 2b. grouped (both runs have no group: one group of two): a min..max band around the mean line
    page.select_option("#group-by", "group")
    # the redraw is asynchronous: wait for it before reading the traces
    page.wait_for_function(f"(m) => ({traces})(m) === 3", arg=metric)
    band = page.evaluate(
        "(m) => document.querySelector(`.chart[data-metric='${m}']`).data.map((t) => [t.meta.kind, t.y])",
        metric,
    )
    assert [kind for kind, _ in band] == ["band", "band", "line"]
    curves = [raw[i] for i in ids]  # sparse: not smoothed
    assert band[0][1] == pytest.approx([min(v) for v in zip(*curves, strict=True)])
    assert band[1][1] == pytest.approx([max(v) for v in zip(*curves, strict=True)])
    assert band[2][1] == pytest.approx([sum(v) / 2 for v in zip(*curves, strict=True)])
    page.screenshot(path=str(ARTIFACTS / "compare-2b-band.png"))
    page.select_option("#group-by", "none")
    page.wait_for_function(f"(m) => ({traces})(m) === 2", arg=metric)  # ungrouped again: a line each
    page.screenshot(path=str(ARTIFACTS / "compare-2-charts.png"), full_page=True)

    # 3. the config diff shows exactly the keys that differ
    keys = page.eval_on_selector_all("#diff-table tbody tr", "rows => rows.map(r => r.dataset.key)")
    assert keys == ["optim.lr", "seed"]

    # 4. x by wall time and by generated tokens: increasing, from 0
    line_xs = (
        "(m) => JSON.stringify(document.querySelector(`.chart[data-metric='${m}']`).data.map((t) => t.x))"
    )
    for axis in ("wall", "tokens"):
        before = page.evaluate(line_xs, metric)
        page.select_option("#x-axis", axis)
        page.wait_for_function(f"([m, b]) => ({line_xs})(m) !== b", arg=[metric, before])  # redrawn
        xs = {t["run"]: t["x"] for t in line_traces(page, metric)}
        for i in ids:
            assert all(a is not None and a < b for a, b in zip(xs[i], xs[i][1:], strict=False)), (
                axis,
                xs,
            )
        page.screenshot(path=str(ARTIFACTS / f"compare-3-x-{axis}.png"))
    page.select_option("#x-axis", "step")

    # 5. one validation problem side by side: each run's samples as text
    page.locator("#validation").scroll_into_view_if_needed()
    expect(page.locator(".val-col")).to_have_count(2)
    expect(page.locator(".val-col").first.locator(".val-sample")).to_have_count(2)
    assert page.locator("#val-step option").all_inner_texts() == ["step 0", "step 2", "step 3"]
    assert page.eval_on_selector_all(".val-sample pre.text", "els => els.every(e => e.children.length === 0)")
    page.select_option("#val-step", "2")
    page.click("#val-next")
    expect(page.locator("#val-problem")).to_have_value("1")
    expect(page.locator(".val-col").nth(1).locator(".val-sample")).to_have_count(2)
    page.locator("#validation").screenshot(path=str(ARTIFACTS / "compare-4-validation.png"))

    # 6. a chart as PNG (the modebar's camera), the metrics as CSV
    chart = page.locator(f'.chart[data-metric="{metric}"]')
    chart.hover()
    with page.expect_download() as download:
        chart.locator('.modebar-btn[data-title="Download plot as a PNG"]').click()
    name = download.value.suggested_filename
    assert name.startswith("compare-runs-") and name.endswith("-timing_s_step.png"), name
    assert open(download.value.path(), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    chosen = page.evaluate("new URLSearchParams(location.search).get('metrics').split(',')")
    defaults = ["val/acc/mean@2", "critic/score/mean", "response_length/mean", "actor/entropy"]
    assert chosen == [*defaults, metric]
    body = page.request.get(base + page.get_attribute("#csv-chosen", "href")).text()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert {(int(r["run_id"]), r["metric"]) for r in rows} == {(i, m) for i in ids for m in chosen}
    assert len(rows) == 2 * (4 * 3 + 3)  # per run: 4 training metrics x 3 steps, val at steps 0, 2, 3
    page.goto(f"{base}/runs/{ids[0]}/")
    run_chart = page.locator('.chart[data-title="Reward"]')
    run_chart.hover()
    with page.expect_download() as download:
        run_chart.locator('.modebar-btn[data-title="Download plot as a PNG"]').click()
    assert download.value.suggested_filename == f"run-{ids[0]}-Reward.png"
    assert page.request.get(f"{base}/runs/{ids[0]}/metrics.csv").text().startswith("run_id,run_name,step,")

    # 7. the ablation ladder from the new-run form, opened as a comparison of its six runs
    page.goto(f"{base}/runs/new/?from={ids[0]}")
    page.fill("#f-name", "e2e ladder")
    page.click("#launch-ladder")
    page.click("#ladder-confirm-btn")  # the form lists the six runs and asks once more
    page.wait_for_url(re.compile(r".*/runs/compare/\?group=e2e\+ladder$"))
    expect(page.locator("#legend .cmp-legend-item")).to_have_count(6)
    ladder_keys = page.eval_on_selector_all("#diff-table tbody tr", "rows => rows.map(r => r.dataset.key)")
    ladder_changes = {
        "clip_high",
        "loss_agg_mode",
        "overlong_filtering",
        "overlong_buffer",
        "dynamic_sampling",
    }
    assert set(ladder_keys) == {f"algorithm.{k}" for k in ladder_changes}
    page.screenshot(path=str(ARTIFACTS / "compare-5-ladder.png"), full_page=True)
    assert not errors, errors

    ladder = Run.objects.filter(group="e2e ladder").order_by("id")
    assert [r.name.split(" · ")[1] for r in ladder] == [
        "naive_grpo",
        "grpo_overlong_filtering",
        "grpo_clip_higher",
        "grpo_soft_overlong",
        "grpo_token_level_loss",
        "dapo_full",
    ]
    for run in ladder:  # their training is not this test's subject
        run.request_cancel()
