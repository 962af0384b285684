"""Every page at a phone's size (390 x 844): nothing wider than the screen, so no page scrolls sideways.

Only daphne runs here: two runs with curves and samples, a catalog dataset and a checkpoint are written
straight into the test database. Screenshots go to test-artifacts/ (docs/ keeps a phone and a dark one).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.support import ARTIFACTS, CHROMIUM_ARGS, open_page
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets, sample
from tests.worker import stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600), pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}

# the widest element sticking out of the viewport, for the failure message
OVERFLOW_JS = """() => {
  const width = document.documentElement.clientWidth;
  let worst = null;
  for (const el of document.querySelectorAll("body *")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 1) continue;
    let clipped = false;  // inside a box that scrolls or clips sideways: that box is what counts
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll" || o === "hidden") { clipped = true; break; }
    }
    if (!clipped && (!worst || r.right > worst.right))
      worst = {right: Math.round(r.right), tag: el.tagName, id: el.id, cls: String(el.className)};
  }
  return {scrollWidth: document.documentElement.scrollWidth, width, worst};
}"""


def seed(alice: Any, tmp_path: Any) -> dict[str, Any]:
    """Two runs (curves, samples, a checkpoint on disk), a catalog dataset: every page has content."""
    from catalog.registry import register_dataset
    from runs.models import Run

    from dapo.presets import get_preset
    from dapo.report import StepReport

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(tmp_path))
    runs = [Run.create_queued(owner=alice, name=f"phone-layout-run-with-a-long-name-{i}", config=config,
                              preset="tiny_cpu") for i in range(2)]  # fmt: skip
    for run in runs:
        run.claim("w")
        for step in range(1, 6):
            metrics = {"critic/score/mean": step / 5, "train/acc/mean": step / 6,
                       "actor/entropy": 1 - step / 10, "response_length/mean": 20 + step,
                       "actor/pg_clipfrac": 0.01 * step, "val/acc/mean@4": 0.4 + step / 20}  # fmt: skip
            samples = [sample(step, i) for i in range(4)]
            run.record_step(StepReport(step=step, metrics=metrics, samples=samples))
        folder = tmp_path / "ckpt" / str(run.pk) / "step_000005"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"weights")
        run.record_checkpoint(5, str(folder), worker_id="w")
    runs[1].finish("failed", "RuntimeError: " + "a long error message " * 20, worker_id="w")
    demo = stack.REPO / "assets" / "demo" / "data"
    dataset = register_dataset("demo-arithmetic", str(demo / "train.parquet"), str(demo / "test.parquet"))
    first = runs[0].samples.order_by("pk").first()
    return {"runs": runs, "dataset": dataset, "sample": first}


def pages(data: dict[str, Any]) -> list[str]:
    a, b = (r.pk for r in data["runs"])
    return [
        "/runs/", "/runs/new/", f"/runs/new/?from={a}", f"/runs/new/?fork={a}", "/runs/evaluate/",
        f"/runs/{a}/", f"/runs/{b}/", f"/runs/{a}/samples/", f"/runs/{a}/samples/{data['sample'].pk}/",
        f"/runs/{a}/problems/{data['sample'].problem_index}/", f"/runs/compare/?ids={a},{b}",
        "/datasets/", f"/datasets/{data['dataset'].pk}/", "/accounts/token/", "/api/docs/", "/no/such/page/",
    ]  # fmt: skip


def _settle(page: Any) -> None:
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)  # charts draw after the data arrives


def test_no_page_is_wider_than_a_phone(alice, queued, tmp_path, chromium_path, settings):  # noqa: F811
    from playwright.sync_api import sync_playwright

    settings.DAPO_DATASET_ROOTS = [stack.REPO / "assets"]
    data = seed(alice, tmp_path)
    env = stack.environment(tmp_path / "var", DJANGO_ALLOWED_HOSTS="127.0.0.1",
                            DAPO_DATASET_ROOTS=str(stack.REPO / "assets"))  # fmt: skip
    port = stack.free_port()
    base = f"http://127.0.0.1:{port}"
    ARTIFACTS.mkdir(exist_ok=True)
    wide: dict[str, Any] = {}
    with stack.daphne(env, tmp_path / "daphne.log", port), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        page, errors = open_page(browser, viewport=PHONE, is_mobile=True, has_touch=True)
        page.goto(f"{base}/accounts/login/")
        _check(page, "/accounts/login/", wide)
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-pass-123")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/runs/")
        for path in pages(data):
            page.goto(base + path)
            _settle(page)
            _check(page, path, wide)
            name = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "") or "root"
            page.screenshot(path=str(ARTIFACTS / f"phone-{name}.png"))
        assert errors == []
        browser.close()
    assert wide == {}, wide


def _check(page: Any, path: str, wide: dict[str, Any]) -> None:
    result = page.evaluate(OVERFLOW_JS)
    if result["scrollWidth"] > result["width"] or result["worst"]:
        wide[path] = result


def _off_loop(fn: Any) -> Any:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()
