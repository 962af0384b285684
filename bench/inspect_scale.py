"""Issue 6's scale target: the inspector and the comparison on a PostgreSQL with 1M samples and 5M points.

    .venv/bin/python bench/inspect_scale.py [--repeats 7] [--reuse]

Fills (bench/scale_fill.py; ``--reuse`` keeps a database filled by an earlier run) then starts daphne on
it, logs in with Playwright (Debian's chromium) and measures, median and max of ``--repeats``:

- inspector first page: navigation to ``/runs/<id>/samples/?step=250`` until the page marks itself ready
  (groups drawn), and the server time of its data request;
- inspector filters: ``samples/data/`` for a step filtered by correctness + truncation, by a reward range
  sorted by length, a text search, and a top-20, timed as fetch() round trips from the page;
- comparison: ``/runs/compare/?ids=<5 runs>&metrics=<5 metrics>`` (5 x 5 x 2,000 steps = 50,000 points)
  until the page marks its charts drawn (``window.__compareReady``).

Targets (issue 6): inspector first page and a filter under 300 ms; the comparison under 1.5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_load import CHROMIUM, CHROMIUM_ARGS, login, start_daphne  # noqa: E402
from scale_fill import METRIC_NAMES, fill, setup  # noqa: E402

STEP = 250
FILTERS = {
    "correct, not truncated": "acc=1&truncated=0",
    "reward >= 0, sorted by length": "reward_min=0&sort=length_desc",
    "text search": "q=Answer%3A%2012",
    "top-20 by reward": "rank=top&rank_by=reward&k=20",
}
COMPARE_METRICS = METRIC_NAMES[:5]


def existing_ids() -> dict[str, list[int]]:
    from runs.models import Run

    ids = lambda prefix: list(  # noqa: E731
        Run.objects.filter(name__startswith=prefix).order_by("pk").values_list("pk", flat=True)
    )
    return {"sample_runs": ids("samples "), "compare_runs": ids("compare seed ")}


def counts() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT (SELECT count(*) FROM runs_sample), (SELECT count(*) FROM runs_metricpoint)")
        samples, points = cursor.fetchone()
    return {"samples": samples, "metric_points": points}


def timed_navigation(page: Any, url: str, ready: str) -> float:
    """ms from navigation start until ``ready`` (a JS expression) is truthy."""
    page.goto(url)
    page.wait_for_function(f"() => {ready}", timeout=60000)
    return page.evaluate("() => performance.now()")


def timed_fetch(page: Any, url: str) -> float:
    return page.evaluate(
        """async (url) => { const t = performance.now();
                            const r = await fetch(url, {headers: {Accept: 'application/json'}});
                            if (!r.ok) throw new Error(url + ' -> ' + r.status);
                            await r.json(); return performance.now() - t; }""",
        url,
    )


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values), 1), "max_ms": round(max(values), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="dapo_scale_bench")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="measure an already filled database")
    parser.add_argument("--screenshots", type=Path, help="save screenshots of the pages into this folder")
    args = parser.parse_args()
    env = setup(args.db, recreate=not args.reuse)
    ids = existing_ids() if args.reuse else fill(1_000_000, 5_000_000)
    print(json.dumps(counts()), flush=True)
    from playwright.sync_api import sync_playwright

    run_id, compare_ids = ids["sample_runs"][len(ids["sample_runs"]) // 2], ids["compare_runs"][:5]
    results: dict[str, Any] = {"database": counts()}
    with tempfile.TemporaryDirectory() as tmp:
        daphne, port = start_daphne(env, Path(tmp) / "daphne.log")
        base = f"http://127.0.0.1:{port}"
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.add_init_script('localStorage.setItem("dapo.bench", "1")')  # timing hooks, opt-in
                login(page, base, "bench", "bench-pass-123")
                inspector = f"{base}/runs/{run_id}/samples/?step={STEP}"
                compare = f"{base}/runs/compare/?ids={','.join(map(str, compare_ids))}"
                compare += f"&metrics={','.join(COMPARE_METRICS)}"
                for url, ready in (
                    (inspector, "window.__inspectorReady"),
                    (compare, "window.__compareReady"),
                ):
                    timed_navigation(page, url, ready)  # warm-up: connections, static files, plans
                first = [
                    timed_navigation(page, inspector, "window.__inspectorReady") for _ in range(args.repeats)
                ]
                results["inspector first page (until drawn)"] = summary(first)
                data = f"{base}/runs/{run_id}/samples/data/?step={STEP}"
                results["inspector data request, no filter"] = summary(
                    [timed_fetch(page, data) for _ in range(args.repeats)]
                )
                for name, query in FILTERS.items():
                    times = [timed_fetch(page, f"{data}&{query}") for _ in range(args.repeats)]
                    results[f"inspector filter: {name}"] = summary(times)
                if args.screenshots:
                    args.screenshots.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(args.screenshots / "scale-inspector.png"))
                drawn = [
                    timed_navigation(page, compare, "window.__compareReady") for _ in range(args.repeats)
                ]
                results["compare 5 runs x 5 metrics x 2,000 steps (until drawn)"] = summary(drawn)
                traces = page.evaluate(
                    "() => [...document.querySelectorAll('.js-plotly-plot')]"
                    ".reduce((n, el) => n + (el.data || []).length, 0)"
                )
                results["compare traces drawn"] = traces
                if args.screenshots:
                    page.screenshot(path=str(args.screenshots / "scale-compare.png"), full_page=True)
                browser.close()
        finally:
            daphne.terminate()
            daphne.wait(10)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
