"""Fault 3: Redis restarts while a browser watches a run. The page must say so ("reconnecting…"), come back
by itself and catch up from the database; the database must hold every step.

The stack: a private redis-server (killed with SIGKILL mid-run, then started again on the same port, empty:
no persistence, so the channel layer's groups are gone too), daphne on it, and this process playing the
worker through the real sink (PlatformSink.on_step: the database write, then the publish, which fails while
Redis is away). Chromium watches the run page.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from scripts.stack import free_ports
from tests.platform.support import report
from tests.worker import stack

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.django_db(transaction=True),
]
KILL_AT, INTERVAL_S, OUTAGE_S, AFTER, MAX_STEPS = 4, 0.4, 3.0, 3, 200
REWARD_STEPS = (
    "(() => { const c = document.querySelector('.chart[data-title=\"Reward\"]');"
    " return c && c.data && c.data[0] ? c.data[0].x : []; })()"
)
WATCH_INDICATOR = """() => {
  window.__liveStates = [];
  const el = document.getElementById('live-indicator');
  const note = () => window.__liveStates.push(
    {state: el.dataset.state, text: el.textContent, visible: el.checkVisibility()});
  const all = {attributes: true, childList: true, characterData: true, subtree: true};
  new MutationObserver(note).observe(el, all);
}"""


@contextmanager
def redis_server(port: int, log: Path) -> Iterator[Any]:
    """A throwaway redis-server on 127.0.0.1:port without persistence (a restart starts empty)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server on PATH to restart")
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(log.parent),
    ]
    with stack.process(argv, dict(os.environ), log, ready="Ready to accept connections", timeout=30) as proc:
        yield proc


@pytest.fixture
def watched_run(alice: Any, settings: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A running run, daphne and this process's publisher both on a private Redis that the test can kill."""
    from runs.models import Run

    from dapo.loop.report import RunInfo
    from dapo.runconfig.presets import get_preset
    from worker.sink import PlatformSink

    redis_port, web_port = free_ports(2)  # picked together: two picks in turn can be the same port
    url = f"redis://127.0.0.1:{redis_port}/0"
    prefix = os.environ["DAPO_CHANNEL_PREFIX"]
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": prefix},
        }
    }
    run = Run.objects.create(owner=alice, name="watched", config=get_preset("tiny_cpu").to_dict())
    assert run.claim("reconnect-test-worker")
    sink = PlatformSink(run, "reconnect-test-worker")
    sink.on_start(RunInfo(run_dir=str(tmp_path), total_steps=MAX_STEPS, start_step=1, config={}))
    # the CSP enforced, as in production: a page script that breaks it would fail this test
    env = stack.environment(
        tmp_path / "var", REDIS_URL=url, DJANGO_ALLOWED_HOSTS="127.0.0.1", DJANGO_CSP_REPORT_ONLY="false"
    )
    with ExitStack() as up:
        redis = {"proc": up.enter_context(redis_server(redis_port, tmp_path / "redis.log"))}
        up.enter_context(stack.daphne(env, tmp_path / "daphne.log", web_port))

        def restart() -> None:
            up.enter_context(redis_server(redis_port, tmp_path / "redis-2.log"))

        yield {
            "run": run,
            "sink": sink,
            "base": f"http://127.0.0.1:{web_port}",
            "redis": redis,
            "restart": restart,
        }
    stack.wait_for_other_sessions_to_leave()


def poll(page: Any, expression: str, timeout: float, what: str) -> Any:
    """page.wait_for_function() compiles its predicate with eval, which the enforced CSP forbids;
    page.evaluate() goes through the DevTools protocol, which the CSP does not govern."""
    return stack.wait_for(lambda: page.evaluate(expression), timeout, what, interval=0.1)


class Worker(threading.Thread):
    """Plays the worker: a step every INTERVAL_S through the sink, whatever Redis does (a failed publish
    never raises), until told to finish; then AFTER more steps, which must reach the page live."""

    def __init__(self, sink: Any) -> None:
        super().__init__()
        self.sink, self.finish, self.steps = sink, threading.Event(), 0

    def run(self) -> None:
        try:
            while not self.finish.is_set() and self.steps < MAX_STEPS:
                self.step()
            for _ in range(AFTER):
                self.step()
        finally:
            connections.close_all()  # this thread's connection, so the test database can be dropped

    def step(self) -> None:
        self.steps += 1
        self.sink.on_step(report(self.steps))
        time.sleep(INTERVAL_S)


def test_the_run_page_reconnects_and_catches_up_after_redis_restarts(watched_run, live):
    """The shared browser on a daphne of this test's own, whose Redis the test stops and restarts."""
    from playwright.sync_api import expect
    from runs.models import MetricPoint

    base, run = watched_run["base"], watched_run["run"]
    worker = Worker(watched_run["sink"])
    page, errors = live.page(timeout_ms=30_000)
    page.add_init_script('localStorage.setItem("dapo.bench", "1")')  # window.__dapoReceived
    page.on("console", lambda m: "Content Security Policy" in m.text and errors.append(m.text))
    page.goto(f"{base}/accounts/login/?next=/runs/{run.pk}/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("button[type=submit]")
    poll(page, "document.getElementById('live-indicator').dataset.state === 'live'", 30, "a live page")
    page.evaluate(WATCH_INDICATOR)
    page.evaluate("window.__noReload = true")
    worker.start()

    # 1. steps arrive live; then Redis dies: the page says so, visibly
    poll(page, f"{REWARD_STEPS}.length >= {KILL_AT}", 30, f"step {KILL_AT} on the chart")
    watched_run["redis"]["proc"].send_signal(signal.SIGKILL)
    expect(page.locator("#live-indicator")).to_have_text("reconnecting…", timeout=10_000)
    expect(page.locator("#live-indicator")).to_be_visible()
    time.sleep(OUTAGE_S)  # the worker keeps writing steps; their live events are lost

    # 2. Redis is back (empty): the page reconnects and catches up from the database
    watched_run["restart"]()
    poll(page, "document.getElementById('live-indicator').dataset.state === 'live'", 30, "reconnected")
    worker.finish.set()  # AFTER more steps, then the worker stops
    worker.join(30)
    poll(page, f"{REWARD_STEPS}.length >= {worker.steps}", 30, "every step on the chart")
    chart_steps = page.evaluate(REWARD_STEPS)
    live_steps = page.evaluate("Object.keys(window.__dapoReceived).map(Number)")
    states = page.evaluate("window.__liveStates")
    final_state = page.evaluate("document.getElementById('live-indicator').dataset.state")
    assert page.evaluate("window.__noReload") is True  # caught up in place, not by a reload

    stored = list(
        MetricPoint.objects.filter(run=run, name="critic/score/mean")
        .order_by("step")
        .values_list("step", flat=True)
    )
    assert stored == list(range(1, worker.steps + 1)), "a metric was lost in the database"
    outage_steps = int(OUTAGE_S / INTERVAL_S) - 1
    assert worker.steps >= KILL_AT + outage_steps + AFTER, "the worker wrote no steps during the outage"
    assert chart_steps == stored, "the chart does not end with every step, in order"
    assert set(stored[-AFTER:]) <= set(live_steps), "live events stopped after the reconnect"
    assert {"state": "wait", "text": "reconnecting…", "visible": True} in states, states
    assert final_state == "live" and not errors, (final_state, errors)
