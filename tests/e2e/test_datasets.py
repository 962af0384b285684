"""The dataset browser in a real browser, served by daphne.

Alice uploads a malformed JSONL and reads the error naming its row, uploads a good one, sees the statistics
charts drawn, searches the rows, and opens one to read the prompt with the demo model's chat template
beside the ground truth. Then, on the demo dataset with a run's stored samples, she sorts by solve rate
and opens a problem's per-run breakdown. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.support import ARTIFACTS
from tests.platform.support import sample
from tests.worker import stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600), pytest.mark.django_db(transaction=True)]

DEMO = stack.REPO / "assets" / "demo"


@pytest.fixture
def site(alice, live) -> Any:
    """daphne on the test database; the demo model and dataset in the catalog; a run of Alice's on the demo
    dataset whose stored samples solve problem 3 half the time and problem 4 never."""
    from catalog.models import BaseModel
    from catalog.registry import register_dataset
    from runs.models import Run, Status

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    if (
        not (DEMO / "model" / "chat_template.jinja").is_file()
        or not (DEMO / "data" / "train.parquet").is_file()
    ):
        pytest.skip("the demo is not built (python -m dapo.data.demo --out assets/demo)")
    BaseModel.objects.create(name="demo-tiny-llama", path="assets/demo/model")
    dataset = register_dataset(
        "demo-arithmetic", "assets/demo/data/train.parquet", "assets/demo/data/test.parquet"
    )
    config = get_preset("tiny_cpu").with_overrides(
        {"data.train_path": dataset.path, "data.val_path": dataset.val_path}
    )
    run = Run.objects.create(
        owner=alice, name="solver", config=config.to_dict(), dataset=dataset, status=Status.SUCCEEDED
    )
    outcomes = {3: [True, False, True, False], 4: [False] * 4}
    samples = [
        sample(1, 10 * problem + i, problem_index=problem, acc=ok, group=problem)
        for problem, oks in outcomes.items()
        for i, ok in enumerate(oks)
    ]
    run.record_step(StepReport(step=1, metrics={}, samples=samples, wall_time=0.0, elapsed_s=1.0))
    return {"base": live.base, "dataset": dataset, "run": run}


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_a_user_uploads_searches_and_reads_a_dataset(site, live, tmp_path):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    base, demo, run = site["base"], site["dataset"], site["run"]
    bad = tmp_path / "broken.jsonl"
    bad.write_bytes(
        _jsonl([{"prompt": "Compute 1+1.", "answer": "2"}]) + b'{"prompt": "Compute 2+2.", "answer": \n'
    )
    good = tmp_path / "sums.jsonl"
    rows = [{"prompt": f"What is {i} plus {i}? <b>bold</b>", "answer": str(2 * i)} for i in range(30)]
    good.write_bytes(_jsonl(rows))

    page, errors = live.page()

    # 1. log in and open the datasets from the nav bar
    page.goto(f"{base}/datasets/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("button[type=submit]")
    page.click("nav.mainnav >> text=Datasets")
    expect(page.locator("#datasets-table")).to_contain_text("demo-arithmetic")

    # 2. a malformed upload: the error names the file and the row; nothing is added
    page.fill("#upload-name", "sums")
    page.set_input_files("#upload-train", str(bad))
    page.click("#upload-btn")
    expect(page.locator("#upload-errors")).to_contain_text("train file broken.jsonl: row 2: bad JSON")
    expect(page.locator("#datasets-table tbody tr")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "datasets-1-upload-error.png"), full_page=True)

    # 3. a good upload opens the new dataset with its statistics drawn
    page.fill("#upload-name", "sums")
    page.set_input_files("#upload-train", str(good))
    page.click("#upload-btn")
    page.wait_for_url(f"{base}/datasets/*/")
    expect(page.locator(".messages")).to_contain_text("Imported sums: 30 train problems")
    for chart in ("#chart-answers", "#chart-chars", "#chart-tokens"):
        expect(page.locator(f"{chart} .main-svg").first).to_be_visible()
    expect(page.locator("#rows-table tbody tr")).to_have_count(30)
    page.screenshot(path=str(ARTIFACTS / "datasets-2-uploaded.png"), full_page=True)

    # 4. search the rows
    page.fill("#f-q", "is 7 plus")
    page.press("#f-q", "Enter")
    expect(page.locator("#rows-table tbody tr")).to_have_count(1)
    expect(page.locator("#match-count")).to_contain_text("1 of 30 problems match")
    expect(page.locator("#rows-table mark")).to_have_text("is 7 plus")

    # 5. open the row: the prompt with the demo model's chat template beside the ground truth
    page.wait_for_load_state()
    page.click("#rows-table tbody tr >> nth=0")
    expect(page.locator("#row-panel")).to_be_visible()
    assert page.inner_text("#prompt-seen") == "<s><|user|>What is 7 plus 7? <b>bold</b>\n<|assistant|>"
    assert page.locator("#prompt-seen b").count() == 0  # dataset text is never HTML
    expect(page.locator("#ground-truth")).to_have_text("14")
    expect(page.locator("#template-note")).to_contain_text("chat_template.jinja")
    page.screenshot(path=str(ARTIFACTS / "datasets-3-row.png"), full_page=True)

    # 6. the demo dataset, sorted by solve rate in Alice's run: the never-solved problem first
    page.goto(f"{base}/datasets/{demo.pk}/")
    expect(page.locator("#chart-answers .main-svg").first).to_be_visible()
    page.click("#sort-rate")
    page.wait_for_load_state()  # the rows' click handler is wired once the scripts ran
    first = page.locator("#rows-table tbody tr >> nth=0")
    expect(first).to_have_attribute("data-index", "4")
    expect(page.locator("#rows-table tbody tr >> nth=1")).to_have_attribute("data-index", "3")
    page.click("#rows-table tbody tr[data-index='3'] td.ds-prompt")
    expect(page.locator("#solve-total")).to_contain_text("50%")
    expect(page.locator("#solve-runs")).to_contain_text("2 / 4")
    link = page.locator("#solve-runs a.ds-timeline")
    assert link.get_attribute("href") == f"/runs/{run.pk}/problems/3/"
    page.wait_for_load_state()  # the row's page has its key handler (a key before it is lost)
    page.keyboard.press("ArrowRight")  # the next problem, from the keyboard
    expect(page.locator("#row-panel h2")).to_contain_text("Problem 4")
    page.screenshot(path=str(ARTIFACTS / "datasets-4-solve-rates.png"), full_page=True)
    assert not errors, errors
