"""Live events of a run, published to its channel group ``run_<id>`` and relayed to browsers.

Event shapes (the JSON a websocket client receives):
    {"type": "snapshot" | "catchup", "run": {...}, "metrics": {name: {"steps": [], "values": []}},
     "samples": [...], "after_step": int | null}
    {"type": "step", "run": {...}, "step": int, "metrics": {name: value}, "samples": [...], "sent_at": float,
     "distributions": {name: [quantiles at 0, 5, ..., 100 percent]}}
    (snapshots also carry "distributions": {name: {"steps": [], "quantiles": [[...], ...]}})
    {"type": "status", "run": {...}}
    {"type": "hardware", "samples": [{"time": float, "worker": str, "values": {name: number}}, ...]}
The database is the source of truth: a failed publish (Redis restarting) is logged, never raised, and
clients catch up from the database when they reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from runs.models import Run, Sample, clean_metrics
from runs.records import clean_quantiles
from runs.series import LIVE_SAMPLES

log = logging.getLogger(__name__)


def group_name(run_id: int) -> str:
    return f"run_{run_id}"


def publish(run_id: int, event: dict[str, Any]) -> bool:
    """Send an event to the run's group from sync code (a view). False (logged) when it could not."""
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.event", "event": event})
    except Exception:  # the database already holds the data; clients catch up on reconnect
        log.warning("could not publish %s event of run %s", event.get("type"), run_id, exc_info=True)
        return False
    return True


class Publisher:
    """Publishes from a long-running sync process (the worker) through one event loop kept in a daemon
    thread. channels_redis keeps its Redis connections per event loop, so ``async_to_sync`` (a fresh loop
    per call) would reconnect to Redis at every step; this keeps the connection and the latency low."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def publish(self, run_id: int, event: dict[str, Any]) -> bool:
        layer = get_channel_layer()
        if layer is None:
            return False
        message = {"type": "run.event", "event": event}
        try:
            future = asyncio.run_coroutine_threadsafe(
                layer.group_send(group_name(run_id), message), self._ensure_loop()
            )
            future.result(self.timeout_s)
        except Exception:  # as publish(): the database has the data
            log.warning("could not publish %s event of run %s", event.get("type"), run_id, exc_info=True)
            return False
        return True

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="channel-publisher", daemon=True).start()
            return self._loop


def step_event(
    run: Run,
    step: int,
    metrics: dict[str, Any],
    samples: list[Any],
    distributions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``samples`` are SampleRecords (or Samples); the event carries the first few, texts cut."""
    rows = [s if isinstance(s, Sample) else Sample.from_record(run.pk, s) for s in samples[:LIVE_SAMPLES]]
    return {
        "type": "step",
        "run": run.state(),
        "step": step,
        "metrics": clean_metrics(metrics),
        "samples": [r.summary() for r in rows],
        "distributions": clean_quantiles(distributions or {}),
        "sent_at": time.time(),
    }


def hardware_event(rows: list[Any]) -> dict[str, Any]:
    """``rows``: runs.records.HardwareSample rows just written."""
    return {"type": "hardware", "samples": [r.summary() for r in rows]}


def status_event(run: Run) -> dict[str, Any]:
    return {"type": "status", "run": run.state()}
