"""Every page at a phone's size (390 x 844): nothing wider than the screen, so no page scrolls sideways;
and every page in light and dark mode: no serious or critical axe-core violation, text contrast at least
WCAG's, the keyboard path (skip link, sample rows, tokens) working.

Only daphne runs here: two runs with curves and samples, a catalog dataset and a checkpoint are written
straight into the test database. Screenshots go to test-artifacts/ (docs/ keeps a phone and a dark one).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.support import ARTIFACTS, submit_login
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets, sample
from tests.worker import stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600), pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
# a response with what the render modes draw (render.js: markdown, math, a think block, highlighted code)
RICH = (
    "<think>Add the two: $1 + 1 = 2$.</think>\n**So** the sum is $$\\frac{4}{2} = 2$$\n\n"
    "```python\ndef add(a, b):\n    return a + b  # two\n```\nAnswer: 2"
)

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
    from catalog.registry import register_dataset, register_model
    from runs.models import Run, SavedComparison, SavedView

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(tmp_path))
    runs = [
        Run.create_queued(
            owner=alice, name=f"phone-layout-run-with-a-long-name-{i}", config=config, preset="tiny_cpu"
        )
        for i in range(2)
    ]
    for run in runs:
        run.claim("w")
        for step in range(1, 6):
            metrics = {
                "critic/score/mean": step / 5,
                "train/acc/mean": step / 6,
                "actor/entropy": 1 - step / 10,
                "response_length/mean": 20 + step,
                "actor/pg_clipfrac": 0.01 * step,
                "val/acc/mean@4": 0.4 + step / 20,
            }
            samples = [sample(step, i, response=RICH if i == 0 else "Answer: 2") for i in range(4)]
            run.record_step(StepReport(step=step, metrics=metrics, samples=samples))
        folder = tmp_path / "ckpt" / str(run.pk) / "step_000005"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"weights")
        run.record_checkpoint(5, str(folder), worker_id="w")
    runs[1].finish("failed", "RuntimeError: " + "a long error message " * 20, worker_id="w")
    demo = stack.REPO / "assets" / "demo" / "data"
    dataset = register_dataset("demo-arithmetic", str(demo / "train.parquet"), str(demo / "test.parquet"))
    model = register_model("demo-model", str(stack.REPO / "assets" / "demo" / "model"))
    first = runs[0].samples.order_by("pk").first()
    runs[0].tags, runs[0].notes = ["baseline", "phone"], "**Notes** in markdown:\n\n- a list\n- `code`"
    runs[0].save(update_fields=["tags", "notes"])
    ids = [r.pk for r in runs]
    saved = SavedComparison.objects.create(owner=alice, name="a saved comparison", run_ids=ids)
    saved.runs.set(runs)
    SavedView.objects.create(owner=alice, name="good", filter="val/acc/mean@4 > 0.5", columns=["optim.lr"])
    return {"runs": runs, "dataset": dataset, "sample": first, "comparison": saved, "model": model}


def pages(data: dict[str, Any]) -> list[str]:
    a, b = (r.pk for r in data["runs"])
    return [
        "/runs/",
        "/runs/new/",
        f"/runs/new/?from={a}",
        f"/runs/new/?fork={a}",
        "/runs/evaluate/",
        f"/runs/{a}/",
        f"/runs/{b}/",
        f"/runs/{a}/samples/",
        f"/runs/{a}/samples/{data['sample'].pk}/",
        f"/runs/{a}/problems/{data['sample'].problem_index}/",
        f"/runs/compare/?ids={a},{b}",
        f"/runs/{a}/samples/step/{data['sample'].step}/group/{data['sample'].group}/",
        "/datasets/",
        f"/datasets/{data['dataset'].pk}/",
        "/models/",
        f"/models/{data['model'].pk}/",
        "/accounts/token/",
        "/accounts/notifications/",
        "/api/docs/",
        "/cluster/",
        "/no/such/page/",
        "/runs/?columns=optim.lr,rollout.n,val/acc/mean@4&sort=-val/acc/mean@4",
        f"/runs/{a}/delete/",
        f"/runs/compare/saved/{data['comparison'].pk}/",
    ]


def _settle(page: Any) -> None:
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)  # charts draw after the data arrives


def test_no_page_is_wider_than_a_phone(alice, queued, live):  # noqa: F811
    data = seed(alice, live.tmp)
    base = live.base
    ARTIFACTS.mkdir(exist_ok=True)
    wide: dict[str, Any] = {}
    page, errors = live.page(viewport=PHONE, is_mobile=True, has_touch=True)
    page.goto(f"{base}/accounts/login/")
    _check(page, "/accounts/login/", wide)
    submit_login(page, base)
    for path in pages(data):
        page.goto(base + path)
        _settle(page)
        _check(page, path, wide)
        name = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "") or "root"
        page.screenshot(path=str(ARTIFACTS / f"phone-{name}.png"))
    assert errors == []
    assert wide == {}, wide


SCHEME_RULES = ("color-contrast", "link-in-text-block")
"""The axe rules whose outcome depends on the colour scheme: the DOM, names, roles and focus order are the
same in light and dark (the scheme changes CSS colours only), so the dark pass runs these, the light all."""


def _axe(page: Any, rules: tuple[str, ...] = ()) -> list[str]:
    """axe-core's serious and critical violations on the page (only ``rules`` when given): rule, and the
    first elements it names."""
    from axe_playwright_python.sync_playwright import Axe

    options: dict[str, Any] = {"resultTypes": ["violations"]}
    if rules:
        options["runOnly"] = {"type": "rule", "values": list(rules)}
    violations = Axe().run(page, options=options).response["violations"]
    return [
        f"{v['id']} ({v['impact']}): {', '.join(str(n['target']) for n in v['nodes'][:3])}"
        for v in violations
        if v["impact"] in ("serious", "critical")
    ]


def _check(page: Any, path: str, wide: dict[str, Any]) -> None:
    result = page.evaluate(OVERFLOW_JS)
    if result["scrollWidth"] > result["width"] or result["worst"]:
        wide[path] = result


# WCAG 2 contrast of every element that shows text of its own, against the first opaque background below
# it: 4.5:1, or 3:1 for large text (24 px, or 18.66 px bold). Disabled controls are exempt, as in WCAG.
CONTRAST_JS = """() => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lin = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  const ratio = (a, b) => {
    const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  };
  function background(el) {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || c[3] > 0.9) return c.slice(0, 3);
    }
    return rgb(getComputedStyle(document.body).backgroundColor).slice(0, 3);
  }
  const bad = [];
  for (const el of document.querySelectorAll("body *")) {
    if (el.closest("svg, .js-plotly-plot, [hidden], option") || el.disabled) continue;
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const st = getComputedStyle(el);
    if (st.visibility === "hidden" || Number(st.opacity) < 0.1) continue;
    const size = parseFloat(st.fontSize), bold = Number(st.fontWeight) >= 700;
    const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    const r = ratio(rgb(st.color).slice(0, 3), background(el));
    const what = `${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 30)}"`;
    if (r < need) bad.push(`${what} ${r.toFixed(2)}`);
  }
  return bad.slice(0, 8);
}"""


def _low_contrast(page: Any, path: str, rules: tuple[str, ...] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if bad := page.evaluate(CONTRAST_JS):
        found[path] = bad
    if serious := _axe(page, rules):
        found[f"axe {path}"] = serious
    return found


def test_text_contrast_and_axe_in_light_and_dark_mode_on_every_page(alice, queued, live):  # noqa: F811
    """One pass over every page, each opened side by side in a light and a dark browser context."""
    data = seed(alice, live.tmp)
    base = live.base
    ARTIFACTS.mkdir(exist_ok=True)
    size = {"width": 1280, "height": 900}
    schemes = {scheme: live.page(viewport=size, color_scheme=scheme) for scheme in ("light", "dark")}
    low: dict[str, dict[str, Any]] = {"light": {}, "dark": {}}
    for scheme, (page, _) in schemes.items():
        page.goto(f"{base}/accounts/login/")
        low[scheme].update({"/accounts/login/": bad} if (bad := page.evaluate(CONTRAST_JS)) else {})
        submit_login(page, base)
    for path in pages(data):
        for scheme, (page, _) in schemes.items():
            page.goto(base + path)
            _settle(page)
            low[scheme].update(_low_contrast(page, path, SCHEME_RULES if scheme == "dark" else ()))
    run = data["runs"][0].pk
    for scheme, (page, _) in schemes.items():
        page.goto(f"{base}/runs/{run}/")
        _settle(page)
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert (background == "rgb(11, 18, 32)") == (scheme == "dark"), (scheme, background)
    schemes["dark"][0].screenshot(path=str(ARTIFACTS / "dark-run-page.png"))
    assert schemes["light"][1] == [] and schemes["dark"][1] == []
    assert low == {"light": {}, "dark": {}}, low


def test_keyboard_reach_dates_and_whole_number_ticks(alice, queued, live):  # noqa: F811
    from playwright.sync_api import expect

    data = seed(alice, live.tmp)
    base = live.base
    page, errors = live.logged_in(viewport={"width": 1280, "height": 900})
    run = data["runs"][0].pk
    page.goto(f"{base}/runs/{run}/")
    _settle(page)
    # the first Tab reaches the skip link, which jumps past the navigation to the content
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    # no chart toolbar button is in the tab order; a sample row opens with Enter
    assert page.locator(".modebar-btn").count() > 0
    assert page.locator(".modebar-btn:not([tabindex='-1'])").count() == 0
    page.focus("#samples-body tr")
    page.keyboard.press("Enter")
    expect(page.locator("#sample-dialog")).to_have_attribute("open", "")
    page.keyboard.press("Escape")
    # one-line dates on the runs list; whole-number counts on the answers chart
    page.goto(f"{base}/runs/")
    created = page.locator("#runs-body tr td:last-child").first.text_content()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", created), created
    page.goto(f"{base}/datasets/{data['dataset'].pk}/")
    page.wait_for_selector("#chart-answers .xtick text")
    ticks = page.locator("#chart-answers .xtick text").all_text_contents()
    assert ticks and all(re.fullmatch(r"[\d,]+", t) for t in ticks), ticks
    # a sample's tokens are read with the arrow keys
    page.goto(f"{base}/runs/{run}/samples/{data['sample'].pk}/")
    if page.locator("#tokens").count():
        page.focus("#tokens")
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        assert page.locator(".tok.current").get_attribute("data-i") == "1"
        assert page.text_content("#token-info").strip() != ""
    assert errors == []
