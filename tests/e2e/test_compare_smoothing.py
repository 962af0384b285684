"""The comparison's EMA in a real browser: a dense curve is smoothed (TensorBoard's debiased EMA) with its
raw points drawn under the line; a sparse one (a validation every few steps: 2 points) is never smoothed,
so the chart shows the values the run had."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_compare import ema, line_traces, set_range

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]
DENSE = [0.1 * (i % 4) + i / 20 for i in range(1, 21)]
SPARSE = {10: 0.51, 20: 0.598}


def runs_with_curves(alice: Any) -> list[int]:
    from runs.models import MetricPoint, Run, Status

    from dapo.runconfig.presets import get_preset

    ids = []
    for name, shift in (("a", 0.0), ("b", 0.05)):
        run = Run.objects.create(
            owner=alice,
            name=name,
            config=get_preset("tiny_cpu").to_dict(),
            status=Status.SUCCEEDED,
            total_steps=20,
        )
        points = [
            MetricPoint(run=run, step=s, name="train/dense", value=v + shift) for s, v in enumerate(DENSE, 1)
        ]
        points += [
            MetricPoint(run=run, step=s, name="val/acc/mean@4", value=v + shift) for s, v in SPARSE.items()
        ]
        MetricPoint.objects.bulk_create(points)
        ids.append(run.pk)
    return ids


def test_a_sparse_curve_is_not_smoothed_and_raw_points_stay_visible(live, live_stack, alice):
    ids = runs_with_curves(alice)
    page, errors = live.logged_in()
    page.goto(
        f"{live.base}/runs/compare/?ids={ids[0]},{ids[1]}&metrics=train/dense,val/acc/mean@4&smooth=0.6"
    )
    page.wait_for_function("() => window.__compareReady !== undefined")
    count = "(m) => (document.querySelector(`.chart[data-metric='${m}']`).data || []).length"
    page.wait_for_function(
        f"{count} === 4", arg="train/dense"
    )  # a smoothed line and its raw points, each run
    dense = {t["run"]: t for t in line_traces(page, "train/dense")}
    for i, shift in zip(ids, (0.0, 0.05), strict=True):
        assert dense[i]["y"] == pytest.approx(ema([v + shift for v in DENSE], 0.6))
    raw = page.evaluate(
        """() => document.querySelector(".chart[data-metric='train/dense']").data
             .filter((t) => t.meta.kind === 'raw').map((t) => [t.mode, t.y])"""
    )
    assert len(raw) == 2 and all("markers" in mode for mode, _ in raw)
    assert raw[0][1] == pytest.approx(DENSE)
    # the validation curve: 2 points, drawn as they were (0.598, not the EMA's 0.545), and nothing faint
    assert page.evaluate(count, "val/acc/mean@4") == 2
    sparse = {t["run"]: t for t in line_traces(page, "val/acc/mean@4")}
    assert sparse[ids[0]]["x"] == [10, 20] and sparse[ids[0]]["y"] == pytest.approx([0.51, 0.598])
    assert "fewer than 10 points are not smoothed" in page.text_content("#controls-help")
    set_range(page, "#smoothing", "0")
    page.wait_for_function(f"{count} === 2", arg="train/dense")
    assert errors == []
