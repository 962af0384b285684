"""Live events of a run, published to its channel group ``run_<id>`` and relayed to browsers.

Event shapes (the JSON a websocket client receives):
    {"type": "snapshot" | "catchup", "run": {...}, "metrics": {name: {"steps": [], "values": []}},
     "samples": [...], "after_step": int | null}
    {"type": "step", "run": {...}, "step": int, "metrics": {name: value}, "samples": [...], "sent_at": float,
     "distributions": {name: [quantiles at 0, 5, ..., 100 percent]}}
    (snapshots also carry "distributions": {name: {"steps": [], "quantiles": [[...], ...]}})
    {"type": "status", "run": {...}}
    {"type": "hardware", "samples": [{"time": float, "worker": str, "values": {name: number}}, ...]}
Not relayed: ``{"type": "run.access"}``, sent to a run's group or to a user's (``user_<id>``) when access
may have changed (runs.access_signals); each socket there asks again and closes if it lost access.
The database is the source of truth: a failed publish (Redis restarting) is logged, never raised, and
clients catch up from the database when they reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from runs.models import Run, Sample
from runs.run_state import run_state
from runs.series import LIVE_SAMPLES
from runs.step_values import clean_metrics, clean_quantiles

log = logging.getLogger(__name__)


def group_name(run_id: int) -> str:
    return f"run_{run_id}"


def user_group_name(user_id: int) -> str:
    """Every run websocket of this user joins it: a change of the user's groups reaches them all."""
    return f"user_{user_id}"


def access_changed(*, runs: Iterable[int] = (), users: Iterable[int] = ()) -> None:
    """Once the current transaction commits, make the open websockets of these runs and of these users
    check their access again (runs.consumers closes those that lost it). Logged, never raised."""
    groups = [group_name(r) for r in sorted(runs)] + [user_group_name(u) for u in sorted(users)]
    if groups:
        transaction.on_commit(lambda: _send_access(groups))


def _send_access(groups: list[str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        try:
            async_to_sync(layer.group_send)(group, {"type": "run.access"})
        except Exception:  # Redis away: sockets close with 4503 and check access when they reconnect
            log.warning("could not tell %s that access changed", group, exc_info=True)


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
        "run": run_state(run),
        "step": step,
        "metrics": clean_metrics(metrics),
        "samples": [r.summary() for r in rows],
        "distributions": clean_quantiles(distributions or {}),
        "sent_at": time.time(),
    }


def hardware_event(rows: list[Any]) -> dict[str, Any]:
    """``rows``: runs.models.HardwareSample rows just written."""
    return {"type": "hardware", "samples": [r.summary() for r in rows]}


def status_event(run: Run) -> dict[str, Any]:
    return {"type": "status", "run": run_state(run)}
