"""Load time of a run's live page for a run of 2,000 steps × 40 metrics, in headless chromium.

    .venv/bin/python bench/page_load.py [--steps 2000] [--metrics 40] [--loads 10]
    .venv/bin/python bench/page_load.py --cold 5 --collected --throttle-mbps 20   # first visits

Builds a throwaway database (SQLite under a temp dir), fills one run, starts daphne on a free port, logs
in with Playwright (Debian's chromium, or $DAPO_CHROMIUM) and loads /runs/<id>/ several times. Reports, per
load: the server's response time, DOMContentLoaded, and "charts ready" (the page's mark once the health
charts and the charts in view are drawn). ``--cold N`` adds N first visits, each in a new browser context
(the session cookie, an empty cache): the bytes on the wire for the HTML and for everything, and the
times. ``--collected`` serves static files as ``make demo`` and the image do (collectstatic: fingerprinted,
gzipped, cached for good); ``--throttle-mbps`` limits the link (40 ms latency), as a remote user's.
Also the helpers of bench/ws_latency.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("DAPO_CHROMIUM") or "/usr/bin/chromium"  # another build: its path
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
NAMESPACES = ["actor", "critic", "response_length", "timing_s", "perf", "train", "val"]


def setup_django(var: Path, redis_db: int = 12) -> dict[str, str]:
    """Environment for this process and daphne; migrates a fresh SQLite database under ``var``."""
    redis = os.environ.get("BENCH_REDIS_URL", f"redis://127.0.0.1:6379/{redis_db}")
    return django_on(f"sqlite:///{var / 'bench.sqlite3'}", var, REDIS_URL=redis)


def django_on(database_url: str, var: Path, **extra: str) -> dict[str, str]:
    """Set Django up in this process on ``database_url`` (runtime files under ``var``) and migrate it;
    returns the environment for child processes (daphne)."""
    env = {
        "DATABASE_URL": database_url,
        "DAPO_VAR_DIR": str(var),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform")]),
        **extra,
    }
    os.environ.update(env)
    sys.path[:0] = [str(REPO), str(REPO / "platform")]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return {**os.environ, **env}


def metric_names(n: int) -> list[str]:
    fixed = [
        "critic/score/mean",
        "train/acc/mean",
        "actor/entropy",
        "response_length/mean",
        "response_length/clip_ratio",
        "actor/pg_clipfrac",
        "actor/pg_clipfrac_lower",
        "train/num_prompts_kept",
        "train/num_prompts_generated",
        "train/frac_all_correct",
        "train/frac_all_wrong",
        "val/acc/mean@4",
    ]
    extra = [f"{NAMESPACES[i % len(NAMESPACES)]}/extra_{i}" for i in range(max(0, n - len(fixed)))]
    return (fixed + extra)[:n]


def make_run(steps: int, metrics: int, samples: int = 128) -> Any:
    """A user ``bench`` (password ``bench-pass-123``) and one succeeded run with ``steps`` × ``metrics``."""
    import math

    from django.contrib.auth import get_user_model
    from runs.models import MetricPoint, Run, Status

    from dapo.loop.report import StepReport
    from dapo.runconfig.presets import get_preset

    sys.path.insert(0, str(REPO))
    from tests.platform.support import sample

    user = get_user_model().objects.create_user("bench", password="bench-pass-123")
    run = Run.objects.create(
        owner=user,
        name="bench",
        config=get_preset("tiny_cpu").to_dict(),
        status=Status.SUCCEEDED,
        total_steps=steps,
    )
    names = metric_names(metrics)
    points = [
        MetricPoint(run=run, step=s, name=n, value=math.sin(s / 50 + i) + s / steps, wall_time=float(s))
        for s in range(1, steps + 1)
        for i, n in enumerate(names)
    ]
    MetricPoint.objects.bulk_create(points, batch_size=5000)
    samples_ = [sample(steps, i) for i in range(samples)]
    last = StepReport(step=steps, metrics={n: 0.5 for n in names}, samples=samples_)
    run.record_step(last)
    return run


def start_daphne(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, int]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "Listening on TCP address" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(log.read_text(errors="replace"))
        time.sleep(0.2)
    return proc, port


def login(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/runs/")


def measure(page: Any, url: str) -> dict[str, float]:
    page.goto(url)
    page.wait_for_function("window.__dapoReady !== undefined", timeout=30000)
    return page.evaluate(
        """() => { const n = performance.getEntriesByType('navigation')[0];
                   return {response_ms: n.responseEnd - n.requestStart, dcl_ms: n.domContentLoadedEventEnd,
                           ready_ms: window.__dapoReady, html_kb: n.transferSize / 1024}; }"""
    )


def cold_load(browser: Any, state: Any, url: str, mbps: float) -> dict[str, float]:
    """One first visit: a new context with only the session cookie (nothing cached), the link throttled
    to ``mbps`` when set; the figures of ``measure`` plus the bytes of every response."""
    context = browser.new_context(storage_state=state, viewport={"width": 1440, "height": 900})
    context.add_init_script('localStorage.setItem("dapo.bench", "1")')
    page = context.new_page()
    if mbps:
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        rate = mbps * 1e6 / 8
        conditions = {"offline": False, "latency": 40, "downloadThroughput": rate, "uploadThroughput": rate}
        cdp.send("Network.emulateNetworkConditions", conditions)
    result = measure(page, url)
    result["total_kb"] = page.evaluate(
        """() => performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))
                 .reduce((sum, e) => sum + e.transferSize, 0) / 1024"""
    )
    context.close()
    return result


def collect_static(env: dict[str, str], var: Path) -> dict[str, str]:
    """collectstatic into ``var``/static; the environment daphne then serves the hashed, gzipped copies in."""
    env = {**env, "DJANGO_STATIC_ROOT": str(var / "static"), "DAPO_STATIC_HASHED": "1"}
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=REPO, env=env, check=True
    )
    return env


def shoot(page: Any, base: str, run_id: int, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, url in (("run", f"/runs/{run_id}/"), ("list", "/runs/"), ("new", "/runs/new/")):
        page.goto(base + url)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(folder / f"{name}.png"), full_page=name != "run")
    page.goto(f"{base}/runs/{run_id}/")
    page.click("#samples-body tr")
    page.screenshot(path=str(folder / "sample.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--metrics", type=int, default=40)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--screenshots", type=Path, help="save screenshots of the pages into this folder")
    parser.add_argument("--cold", type=int, default=0, help="first visits to measure, each with no cache")
    parser.add_argument("--collected", action="store_true", help="serve collected static files (make demo)")
    parser.add_argument("--throttle-mbps", type=float, default=0.0, help="limit the cold loads' link")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="dapo-bench-") as tmp:
        var = Path(tmp)
        env = setup_django(var)
        run = make_run(args.steps, args.metrics)
        if args.collected:
            env = collect_static(env, var)
        proc, port = start_daphne(env, var / "daphne.log")
        base = f"http://127.0.0.1:{port}"
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.add_init_script('localStorage.setItem("dapo.bench", "1")')  # timing hooks, opt-in
                login(page, base, "bench", "bench-pass-123")
                results = [measure(page, f"{base}/runs/{run.pk}/") for _ in range(args.loads + 1)][1:]
                state = page.context.storage_state()
                url = f"{base}/runs/{run.pk}/"
                cold = [cold_load(browser, state, url, args.throttle_mbps) for _ in range(args.cold)]
                if args.screenshots:
                    shoot(page, base, run.pk, args.screenshots)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(f"run of {args.steps} steps x {args.metrics} metrics, {args.loads} loads (after one warm-up)")
    for key in ("response_ms", "dcl_ms", "ready_ms"):
        values = sorted(r[key] for r in results)
        print(f"  {key:12s} median {statistics.median(values):7.0f} ms   max {values[-1]:7.0f} ms")
    print(f"  html        {results[0]['html_kb']:.0f} KiB transferred")
    if cold:
        link = f"{args.throttle_mbps:g} Mbit/s, 40 ms" if args.throttle_mbps else "unthrottled"
        static = "collected" if args.collected else "plain"
        print(
            f"{len(cold)} cold loads ({link}; static files {static}), load average {os.getloadavg()[0]:.1f}"
        )
        for key in ("dcl_ms", "ready_ms"):
            values = sorted(r[key] for r in cold)
            print(f"  {key:12s} median {statistics.median(values):7.0f} ms   max {values[-1]:7.0f} ms")
        print(f"  html        {cold[0]['html_kb']:.0f} KiB, all {cold[0]['total_kb']:.0f} KiB transferred")


if __name__ == "__main__":
    main()
