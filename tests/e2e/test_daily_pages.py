"""Pages a newcomer meets in an afternoon, in a real browser: an evaluation's own page (tables, no plotly),
no 404 in any page's network (the icon), the problem timeline's step ticks, a run's notes (a table with
borders, the card not pushing the charts below the fold), and the export form saying which step it exports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.platform.runs.test_evaluation_page import make_evaluation
from tests.platform.support import sample

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]
NOTES = "Why: the lr sweep.\n\n| lr | acc |\n|---|---|\n| 1e-6 | 0.41 |\n| 3e-6 | 0.47 |\n\n" + "\n\n".join(
    f"Paragraph {i}: what changed and what we saw." for i in range(20)
)


def watched(live: Any) -> tuple[Any, list[str], list[str]]:
    """A logged-in page, its script errors, and every response of 400 or more (URL and status)."""
    page, errors = live.logged_in()
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    return page, errors, failed


def test_an_evaluation_has_its_own_page_of_tables_without_plotly(live, live_stack, alice):
    run = make_evaluation(alice, "base model")
    page, errors, failed = watched(live)
    scripts: list[str] = []
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    page.goto(f"{live.base}/runs/{run.pk}/")  # the run page leads to the results
    page.wait_for_url(f"**/runs/{run.pk}/evaluation/")
    headings = page.locator(".eval-dataset h2").all_text_contents()
    assert headings == ["Every dataset", "aime v2", "math"]
    row = page.locator(".eval-dataset[data-source='math'] tr[data-k='4'] td[data-col='pass']")
    assert row.text_content().strip() == "1.0000"  # every math problem had a correct answer in 4
    assert not [u for u in scripts if "plotly" in u]
    page.click(".eval-dataset[data-source='math'] a.eval-first-problem")
    page.wait_for_url(f"**/runs/{run.pk}/samples/step/0/group/2/?split=val")
    page.wait_for_load_state("networkidle")
    assert errors == [] and failed == [], failed


def test_the_problem_timeline_has_one_tick_per_step(live, live_stack, alice):
    from runs.models import Run, Sample

    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").to_dict()  # its train file: the problem's timeline reads it
    run = Run.objects.create(owner=alice, name="ticks", config=config, status="succeeded", total_steps=6)
    rows = [sample(step, i, group=0, problem_index=0, acc=i % 2 == 0) for step in (4, 5, 6) for i in range(2)]
    Sample.objects.bulk_create([Sample.from_record(run.pk, r) for r in rows])
    page, errors, failed = watched(live)
    page.goto(f"{live.base}/runs/{run.pk}/problems/0/")
    page.wait_for_function("() => (document.querySelector('#problem-chart').data || []).length > 0")
    ticks = page.locator("#problem-chart .xtick text").all_text_contents()
    assert ticks == sorted(set(ticks), key=int) and {"4", "5", "6"} <= set(ticks), ticks
    assert errors == [] and failed == [], failed


def test_notes_show_table_borders_and_leave_the_charts_in_view(live, live_stack, alice):
    from runs.models import Checkpoint, Run

    run = Run.objects.create(
        owner=alice, name="noted", config={}, status="succeeded", total_steps=8, notes=NOTES
    )
    for step in (4, 8):
        folder = Path(live.tmp) / f"step_{step}"
        folder.mkdir()
        (folder / "state.pt").write_bytes(b"weights")
        Checkpoint.objects.create(run=run, step=step, path=str(folder))
    page, errors, failed = watched(live)  # 1440 x 1000
    page.goto(f"{live.base}/runs/{run.pk}/")
    cell = page.locator("#run-notes td").first
    assert cell.evaluate("(el) => getComputedStyle(el).borderTopWidth") == "1px"
    notes = page.locator("#run-notes").bounding_box()
    assert notes["height"] < 260  # a scrolling strip, not 20 paragraphs
    assert page.locator(".statusbar").bounding_box()["y"] < 1000 * 0.6
    # the export form names the step it exports beside the name, and follows the choice
    assert page.text_content("#export-which").strip() == "exports step 8, the newest"
    assert page.get_attribute("#export-name", "placeholder") == "noted step 8"
    page.select_option("#export-step", "4")
    assert page.text_content("#export-which").strip() == "exports step 4"
    assert page.get_attribute("#export-name", "placeholder") == "noted step 4"
    assert errors == [] and failed == [], failed
