"""Names people write reach plotly's labels as text: another run's name on a problem's timeline (which
plotly drew as markup before: a <b> came out bold, an <a href> as a link) and on the comparison's hover.

Only daphne runs here: the runs and their samples are written straight into the test database.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets, sample

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

MARKUP_NAME = '<b>bold</b> <a href="https://evil.example/">link</a> <span style="font-size:40px">big</span>'


def _runs(alice: Any, tmp_path: Any) -> tuple[Any, Any]:
    from runs.models import Run

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(tmp_path))
    mine = Run.create_queued(owner=alice, name="plain", config=config)
    other = Run.create_queued(owner=alice, name=MARKUP_NAME, config=config)
    for run in (mine, other):
        run.record_step(
            StepReport(step=1, metrics={"critic/score/mean": 0.5}, samples=[sample(1, 0), sample(1, 1)])
        )
    return mine, other


def test_run_names_are_drawn_as_text_in_chart_labels(alice, queued, live):  # noqa: F811
    mine, other = _runs(alice, live.tmp)
    page, errors = live.logged_in()
    base = live.base
    page.goto(f"{base}/runs/{mine.pk}/problems/0/")
    page.wait_for_selector("#problem-chart .legendtext")
    legend = page.locator("#problem-chart .legendtext").all_text_contents()
    assert f"#{other.pk} {MARKUP_NAME} · train" in legend, legend
    chart = page.locator("#problem-chart")
    assert chart.locator("svg a").count() == 0  # no link drawn
    assert chart.locator("tspan[style*='bold'], tspan[style*='font-size:40px']").count() == 0

    page.goto(f"{base}/runs/compare/?ids={mine.pk},{other.pk}")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0")
    assert page.locator(".js-plotly-plot svg a").count() == 0
    assert errors == []
