"""bench/ws_load.py in small: 10 websocket clients on one run through daphne and the Redis channel layer,
while the worker's sink records 5 steps: every client receives every step, once and in order."""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from typing import Any

import pytest
from django.db import connections

from tests.platform.support import redis_test_url
from tests.worker import stack

sys.path.insert(0, str(stack.REPO / "bench"))
import ws_latency  # noqa: E402
import ws_load  # noqa: E402

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
CLIENTS, STEPS = 10, 5


@pytest.fixture
def redis_layer(settings: Any, redis_url: str) -> None:
    """The Redis channel layer daphne uses (the suite's default is the in-memory one)."""
    import os

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_test_url()], "prefix": os.environ["DAPO_CHANNEL_PREFIX"]},
        }
    }


def test_every_client_receives_every_step_in_order(alice, redis_layer, tmp_path):
    from runs.models import MetricPoint, Run

    from dapo.loop.report import RunInfo
    from dapo.runconfig.presets import get_preset
    from worker.sink import PlatformSink

    run = Run.objects.create(owner=alice, name="load", config=get_preset("tiny_cpu").to_dict())
    assert run.claim("load-test-worker")
    sink = PlatformSink(run, "load-test-worker")
    sink.on_start(RunInfo(run_dir=str(tmp_path), total_steps=STEPS, start_step=1, config={}))
    args = argparse.Namespace(steps=STEPS, interval=0.2, samples=4)
    sent: dict[int, float] = {}

    def play_the_worker() -> None:
        try:
            ws_latency.feed(sink, args, ws_load.metric_names(12), sent)
        finally:
            connections.close_all()  # this thread's connection, so the test database can be dropped

    port = stack.free_port()
    env = stack.environment(tmp_path / "var", DJANGO_ALLOWED_HOSTS="127.0.0.1")
    with stack.daphne(env, tmp_path / "daphne.log", port):
        feeder = threading.Thread(target=play_the_worker)
        cookie = ws_load.session_cookie(alice)
        watchers = asyncio.run(
            ws_load.watch_while_feeding("127.0.0.1", port, run.pk, cookie, CLIENTS, feeder, STEPS)
        )
    stack.wait_for_other_sessions_to_leave()

    assert len(watchers) == CLIENTS
    assert ws_load.problems(watchers, STEPS) == []
    latencies = ws_load.publish_latencies_ms(watchers)
    assert len(latencies) == CLIENTS * STEPS and all(0 <= ms < 5000 for ms in latencies), latencies
    stored = MetricPoint.objects.filter(run=run, name="critic/score/mean").values_list("step", flat=True)
    assert sorted(stored) == list(range(1, STEPS + 1))
