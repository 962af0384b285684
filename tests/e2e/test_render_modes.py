"""Model output drawn in every render mode of the sample page (js/render.js) never runs as HTML: hostile
responses (script tags, event handlers, javascript: links in markdown, HTML, and KaTeX, HTML inside think
blocks, HTML in code fences, remote images) leave ``window.__pwned`` unset and no dangerous element or
attribute in the page, nothing is fetched from another host, and the site's CSP reports no violation
(KaTeX's fonts come from our static files). The mode is remembered per user across pages.

Daphne runs with the CSP in report-only mode, so that the sanitiser alone stands between the text and the
page (an enforced CSP would block inline handlers and hide a sanitiser bug); the browser still raises a
``securitypolicyviolation`` event for anything the enforced policy would block.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.support import ARTIFACTS
from tests.platform.fixtures import queued  # noqa: F401 (a fixture: runs are never sent to Celery)
from tests.platform.support import make_fake_assets, sample

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

P = "window.__pwned=1"
HOSTILE = rf"""<script>{P}</script>
<img src=x onerror="{P}"> <svg onload="{P}"><circle r=5></circle></svg>
<iframe srcdoc="<script>parent.{P}</script>"></iframe> <a href="javascript:{P}">html link</a>
<details open ontoggle="{P}"><summary>x</summary></details> <style>body{{display:none}}</style>
[markdown link](javascript:{P}) [mixed case](JaVaScRiPt:{P}) [data](data:text/html,<script>{P}</script>)
<javascript:{P}> [ref link][r] ![remote image](https://evil.example/pixel.png)

[r]: javascript:{P}

Math: $\href{{javascript:{P}}}{{click}}$ and $\url{{javascript:{P}}}$ and $$\htmlData{{onclick={P}}}{{x}}$$
\(\includegraphics{{https://evil.example/x.png}}\) and $\frac{{a}}{{b}} + \sqrt{{2}}$ cost $5 and $6.

<think>Hidden plan <img src=x onerror="{P}"> <script>{P}</script> [t](javascript:{P})
$\href{{javascript:{P}}}{{t}}$</think>

```html
<script>{P}</script><img src=x onerror="{P}">
```

```python
def f(x):
    return "<img src=x onerror={P}>"
```

<think>an unfinished thought <svg/onload={P}>"""

CHECK = """(roots) => {
  const bad = [];
  for (const id of roots) {
    const root = document.getElementById(id);
    for (const node of root.querySelectorAll('*')) {
      const tag = node.tagName.toLowerCase();
      if (['script', 'iframe', 'img', 'object', 'embed', 'form', 'style', 'use', 'foreignobject', 'image',
           'link', 'meta', 'base'].includes(tag)) bad.push(`${id}: <${tag}>`);
      for (const a of node.attributes) {
        const name = a.name.toLowerCase(), value = a.value.replace(/[\\s\\u0000-\\u001f]/g, '').toLowerCase();
        if (name.startsWith('on')) bad.push(`${id}: ${tag}[${name}]`);
        if (['href', 'src', 'xlink:href', 'action', 'formaction', 'srcdoc'].includes(name)
            && !/^(https?:|mailto:)/.test(value)) bad.push(`${id}: ${tag}[${name}=${a.value}]`);
      }
    }
  }
  return bad;
}"""

MODES = [("raw", None, None)] + [
    (m, t, c) for m in ("markdown", "latex") for t in (True, False) for c in (True, False)
]


def _run(alice: Any, tmp_path: Any) -> Any:
    from runs.models import Run

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides(make_fake_assets(tmp_path))
    run = Run.create_queued(owner=alice, name="hostile", config=config)
    prompt = r"Compute $\int_0^1 x\,dx$. <b onmouseover=window.__pwned=1>bold</b>"
    run.record_step(StepReport(step=1, metrics={}, samples=[sample(1, 0, response=HOSTILE, prompt=prompt)]))
    return run


def _set(page: Any, mode: str, think: bool | None, code: bool | None) -> None:
    page.click(f"#render-{mode}")
    for name, on in (("think", think), ("code", code)):
        if on is not None and page.is_checked(f"#render-{name}") != on:
            page.click(f"#render-{name}")
    page.wait_for_function(f"document.body.dataset.renderMode === '{mode}'")


def test_hostile_output_never_runs_in_any_render_mode(alice, queued, live):  # noqa: F811
    run = _run(alice, live.tmp)
    sample_id = run.samples.get().pk
    page, errors = live.logged_in()
    base = live.base
    foreign: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(base) else foreign.append(r.url))
    page.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation',"
        " (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));"
    )
    page.goto(f"{base}/runs/{run.pk}/samples/{sample_id}/")
    page.wait_for_selector("#render-raw")

    # the last line of defence alone: the hostile text parsed as HTML, then sanitised
    page.evaluate(
        """(html) => { const box = document.createElement('div'); box.id = 'sanitised';
            box.append(window.dapoRender.sanitise(html)); document.body.append(box); }""",
        HOSTILE,
    )
    page.wait_for_timeout(300)  # an onerror or onload would have fired by now
    assert page.evaluate(CHECK, ["sanitised"]) == []
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#sanitised details summary").count() == 1  # harmless markup survives
    # Chromium reports each on* attribute it parses, even into DOMPurify's inert document where no
    # handler can run (__pwned stays unset): start counting afresh for the render modes.
    assert page.evaluate("() => window.__csp.length") == len(re.findall(r"[\s/]on[a-z]+=", HOSTILE))
    page.evaluate("() => { document.getElementById('sanitised').remove(); window.__csp = []; }")
    for mode, think, code in MODES:
        _set(page, mode, think, code)
        page.hover("#response" if mode == "raw" else "#response-rendered")
        page.hover("#prompt" if mode == "raw" else "#prompt-rendered")
        where = ["prompt", "response"] if mode == "raw" else ["prompt-rendered", "response-rendered"]
        assert page.evaluate(CHECK, where) == [], (mode, think, code)
        assert page.evaluate("() => window.__pwned") is None, (mode, think, code)
        shown = page.inner_text(f"#{where[1]}")
        assert "Hidden plan" in shown or think  # a folded think block hides its text
        if mode == "raw":
            assert page.text_content("#response") == HOSTILE  # exactly the text, tags and all
            continue
        rendered = page.locator("#response-rendered")
        assert "<script>" in rendered.text_content()  # raw HTML is shown as text
        assert rendered.locator("details.think").count() == 2
        assert rendered.locator("details.think[open]").count() == (0 if think else 2)
        assert (rendered.locator("pre code [class^='hljs-']").count() > 0) == code
        assert rendered.locator("a[href]").count() == 0  # every link here was javascript: or data:
        assert (rendered.locator(".katex").count() >= 3) == (mode == "latex")
        if mode == "latex":
            assert page.locator("#prompt-rendered .katex").count() == 1
            assert "$5 and $6" in rendered.text_content()  # money is not math
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "inspector-render-latex.png"), full_page=True)

    # KaTeX's fonts load from our static files under the site's CSP; nothing is fetched elsewhere
    page.evaluate("() => document.fonts.ready")
    families = page.evaluate(
        "() => [...document.fonts].filter((f) => f.status === 'loaded').map((f) => f.family)"
    )
    assert any("KaTeX" in f for f in families), families
    assert page.evaluate("() => window.__csp") == []
    assert foreign == []

    # the choice is remembered for this user: another sample page opens in the last mode
    _set(page, "markdown", True, False)
    page.reload()
    page.wait_for_function("document.body.dataset.renderMode === 'markdown'")
    assert page.get_attribute("#render-markdown", "aria-pressed") == "true"
    assert not page.is_checked("#render-code")
    key = page.evaluate("() => Object.keys(localStorage).filter((k) => k.startsWith('dapo.render'))")
    assert key == ["dapo.render.v1:alice"]
    page.click("#render-raw")  # raw is one click away
    assert page.is_visible("#response") and not page.is_visible("#response-rendered")
    assert errors == []
