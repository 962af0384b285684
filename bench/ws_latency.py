"""Websocket latency from ``PlatformSink.on_step`` to the browser receiving the step (p50/p95/max).

    .venv/bin/python bench/ws_latency.py [--steps 100] [--interval 0.25] [--metrics 40] [--samples 128]

This process plays the worker: it calls the real sink (database write in one transaction, lease renewal,
publish to the Redis channel layer) with reports of ``--metrics`` metrics and ``--samples`` samples.
Daphne relays to a real chromium tab on the run page, which records when each step arrived
(window.__dapoReceived). Latency = arrival in the page − the moment on_step was called. Needs Redis
(BENCH_REDIS_URL, default redis://127.0.0.1:6379/12).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from page_load import CHROMIUM, CHROMIUM_ARGS, login, metric_names, setup_django, start_daphne

written: dict[int, float] = {}
"""How long each on_step call took (ms)."""


def feed(sink: Any, args: argparse.Namespace, names: list[str], sent: dict[int, float]) -> None:
    """Play the trainer: one report per interval; ``sent`` gets when each on_step was called."""
    from dapo.loop.report import StepReport
    from tests.platform.support import sample

    for step in range(1, args.steps + 1):
        samples = [sample(step, i) for i in range(args.samples)]
        report = StepReport(step=step, metrics={n: step / args.steps for n in names}, samples=samples)
        sent[step] = time.time() * 1000
        sink.on_step(report)
        written[step] = time.time() * 1000 - sent[step]
        time.sleep(args.interval)


def bench_run(name: str, run_dir: str, steps: int) -> tuple[Any, Any]:
    """User ``bench`` (password ``bench-pass-123``), a run claimed by ``bench-worker``, and the worker's own
    sink on it, started: what the worker writes and publishes each step."""
    from django.contrib.auth import get_user_model
    from runs.models import Run

    from dapo.loop.report import RunInfo
    from dapo.runconfig.presets import get_preset
    from worker.sink import PlatformSink

    user = get_user_model().objects.create_user("bench", password="bench-pass-123")
    run = Run.objects.create(owner=user, name=name, config=get_preset("tiny_cpu").to_dict())
    assert run.claim("bench-worker")
    sink = PlatformSink(run, "bench-worker")
    sink.on_start(RunInfo(run_dir=run_dir, total_steps=steps, start_step=1, config={}))
    return run, sink


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between steps")
    parser.add_argument("--metrics", type=int, default=40)
    parser.add_argument("--samples", type=int, default=128)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="dapo-bench-") as tmp:
        var = Path(tmp)
        env = setup_django(var)
        run, sink = bench_run("latency", tmp, args.steps)
        proc, port = start_daphne(env, var / "daphne.log")
        base = f"http://127.0.0.1:{port}"
        names = metric_names(args.metrics)
        sent: dict[int, float] = {}
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.add_init_script('localStorage.setItem("dapo.bench", "1")')  # timing hooks, opt-in
                login(page, base, "bench", "bench-pass-123")
                page.goto(f"{base}/runs/{run.pk}/")
                page.wait_for_function("document.getElementById('live-indicator').dataset.state === 'live'")
                # the sink runs in its own thread, as in a worker (Playwright's loop owns this one)
                feeder = threading.Thread(target=feed, args=(sink, args, names, sent))
                feeder.start()
                feeder.join()
                page.wait_for_function(f"window.__dapoReceived[{args.steps}] !== undefined", timeout=30000)
                received = page.evaluate("window.__dapoReceived")
                relay = page.evaluate("window.__dapoRelayMs")
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    latencies = [received[str(s)] - sent[s] for s in sent if str(s) in received]
    print(f"{len(latencies)}/{args.steps} received; {args.metrics} metrics, {args.samples} samples per step")
    report("on_step -> browser", latencies)
    report("on_step itself (db + lease + publish)", list(written.values()))
    report("publish -> browser (redis, daphne, page)", list(relay.values()))


def report(what: str, values: list[float]) -> None:
    values = sorted(values)
    p95 = values[max(0, int(round(0.95 * len(values))) - 1)]
    print(f"  {what}: p50 {statistics.median(values):.0f} ms   p95 {p95:.0f} ms   max {values[-1]:.0f} ms")


if __name__ == "__main__":
    main()
