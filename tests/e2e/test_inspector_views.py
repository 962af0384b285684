"""From a curve to its samples, and a group side by side, in a real browser: a click on a point of the run
page's charts opens the inspector at that step and split (the nearest step with samples when that one has
none), the inspector's own curves mark the step and move it when clicked, and a group's completions stand
in columns with the first divergence of the chosen pair marked, sortable by reward.

Only daphne runs here: the run's metrics and samples are written straight into the test database.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.support import ARTIFACTS
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets, sample

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

GROUP = [  # sample_index, reward, response, tokens
    (0, 1.0, "Let x = 2. So 2 + 2 = 4.\nAnswer: 4", ["Let", " x", " =", " 2", ".", " So"]),
    (1, -1.0, "Let x = 3. So 3 + 2 = 5.\nAnswer: 5", ["Let", " x", " =", " 3", ".", " So"]),
    (2, 1.0, "Let x = 2. So answer: 4", None),
    (3, -1.25, "We guess.\nAnswer: 7", None),
]

# The page coordinates of point (x, its y) of trace `trace` of the plotly chart `el`.
POINT = """([el, trace, x]) => {
  const gd = el.classList.contains('js-plotly-plot') ? el : el.querySelector('.js-plotly-plot');
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, t = gd.data[trace];
  const i = t.x.indexOf(x);
  const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
  return { x: box.left + xa.d2p(x), y: box.top + ya.d2p(t.y[i]) };
}"""


def _run(alice: Any, tmp_path: Any) -> Any:
    from runs.models import Run

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(tmp_path))
    run = Run.create_queued(owner=alice, name="curves", config=config)
    n = run.config["validation"]["n_samples"]
    for step in range(1, 9):
        metrics = {
            "critic/score/mean": step / 10,
            "train/acc/mean": step / 20,
            "response_length/mean": 10.0 + step,
        }
        if step % 4 == 0:
            metrics |= {f"val/acc/mean@{n}": step / 8}
        samples, val = [], []
        if step in (2, 4, 8):
            samples = [
                sample(
                    step,
                    i,
                    group=0,
                    reward=r,
                    score=r,
                    acc=r > 0,
                    response=f"{text} (step {step})",
                    tokens=tokens,
                    token_logprobs=[-0.5] * len(tokens) if tokens else None,
                )
                for i, r, text, tokens in GROUP
            ]
        if step == 4:
            val = [sample(step, i, split="val", group=0, response=f"val {i}") for i in range(2)]
        run.record_step(StepReport(step=step, metrics=metrics, samples=samples, val_samples=val))
    return run


def _click_point(page: Any, selector: str, trace: int, x: int) -> None:
    handle = page.wait_for_selector(f"{selector} .nsewdrag")
    at = page.evaluate(POINT, [page.query_selector(selector), trace, x])
    assert handle
    page.mouse.move(at["x"], at["y"])
    page.mouse.click(at["x"], at["y"])


def test_from_a_chart_point_to_its_samples_and_a_group_side_by_side(
    alice,
    queued,  # noqa: F811
    live,
):
    run = _run(alice, live.tmp)
    page, errors = live.logged_in()
    base = live.base
    # 1. the run page: a click on the reward curve at step 5 (no samples there) opens step 4's
    page.goto(f"{base}/runs/{run.pk}/")
    _click_point(page, '.chart[data-title="Reward"]', 0, 5)
    page.wait_for_url(f"{base}/runs/{run.pk}/samples/?split=train&step=5&near=1")
    page.wait_for_function("document.body.dataset.curveStep === '4'")  # drawn, the step marked
    assert page.inner_text("#step-label") == "4"
    assert (
        page.inner_text("#snap-note") == "Step 5 has no train samples: showing step 4, the nearest that has."
    )
    assert "(step 4)" in page.inner_text("#results")

    # 2. the validation trace of the accuracy chart opens validation samples
    page.goto(f"{base}/runs/{run.pk}/")
    _click_point(page, '.chart[data-title="Accuracy"]', 1, 4)
    page.wait_for_url(f"{base}/runs/{run.pk}/samples/?split=val&step=4&near=1")
    page.wait_for_function("document.body.dataset.curveStep === '4'")
    assert page.get_attribute("#split-val", "aria-pressed") == "true"
    assert page.inner_text("#step-label") == "4" and page.is_hidden("#snap-note")

    # 3. the inspector's curves mark the step; a click on one moves it (back to train, step 8)
    page.wait_for_function("document.body.dataset.curveStep === '4'")
    assert page.locator("#inspector-curves .curve").count() == 3
    _click_point(page, '#inspector-curves .curve[data-title="Mean reward"]', 0, 8)
    page.wait_for_function("document.getElementById('step-label').textContent === '8'")
    page.wait_for_function("document.body.dataset.curveStep === '8'")
    assert page.get_attribute("#split-train", "aria-pressed") == "true"
    assert "(step 8)" in page.inner_text("#results")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "inspector-curves.png"))

    # 4. group 0 side by side: best (0) against worst (3) reward first, parting at character 0
    page.click("#group-0 a.side-by-side")
    page.wait_for_url(f"{base}/runs/{run.pk}/samples/step/8/group/0/?split=train*")
    page.wait_for_function("document.body.dataset.columns === 'ready'")
    page.click("#render-raw")
    assert page.locator(".column").evaluate_all("cs => cs.map(c => c.dataset.index)") == [
        "0",
        "1",
        "2",
        "3",
    ]
    assert page.inner_text("#divergence").startswith("A #0 and B #3 part at character 0")
    assert page.locator(".column.chosen-a").get_attribute("data-index") == "0"

    # choose B = 1: both have token data, so they part at token 3, character 7 (" 2" against " 3")
    page.click("#column-1 .pick-b")
    page.wait_for_function("document.getElementById('divergence').dataset.level === 'token'")
    assert page.inner_text("#divergence").startswith(
        "A #0 and B #1 part at token 3 (character 7 of A, 7 of B)"
    )
    assert page.text_content("#column-0 mark.diverge") == " 2"  # the differing tokens, whole
    assert page.text_content("#column-1 mark.diverge") == " 3"
    assert page.text_content("#column-1 .same") == "Let x ="
    assert page.locator("#column-2 mark, #column-3 mark").count() == 0

    # sorted by reward, low first: the columns reorder and the chosen pair stays
    page.select_option("#column-sort", "reward_asc")
    page.wait_for_url("**sort=reward_asc*")
    page.wait_for_function("document.body.dataset.columns === 'ready'")
    assert page.locator(".column").evaluate_all("cs => cs.map(c => c.dataset.index)") == [
        "3",
        "1",
        "0",
        "2",
    ]
    assert page.inner_text("#divergence").startswith("A #0 and B #1 part at token 3")
    page.screenshot(path=str(ARTIFACTS / "inspector-group-columns.png"), full_page=True)
    assert errors == []
