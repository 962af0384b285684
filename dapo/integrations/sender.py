"""Send an external run's records to the platform from a thread, so a slow or lost server never stops the
training that produces them.

``Sender`` creates the run on the platform (``dapo.client``), then sends metric points and samples in
batches, in order. While the server does not answer (or answers 5xx), everything stays buffered and is
retried with backoff (1 s doubling to 60 s); the first failure is logged once as a warning, and the
recovery once as info. A record the server refuses (400: a bug, not an outage) is logged and dropped, so
one bad value never blocks the rest. Past ``max_buffer`` records the oldest are dropped, with a warning.
Re-sent batches are harmless: the platform overwrites a step's points and a sample's row (same step and
index). Standard library only.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from dapo.client import ApiError, Client, ClientError

log = logging.getLogger("dapo.integrations")

BATCH_POINTS = 200
BATCH_SAMPLES = 256
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0


class Sender:
    """One external run: ``start(name, source, config, total_steps)``, then ``metrics`` and ``samples``
    from any thread, then ``finish``. ``client_factory`` builds the ``dapo.client.Client`` (url, token)."""

    def __init__(
        self,
        client_factory: Callable[[], Client],
        *,
        max_buffer: int = 200_000,
        poll_s: float = 0.5,
        tags: tuple[str, ...] = (),
    ) -> None:
        self._client_factory = client_factory
        self._client: Client | None = None
        self.max_buffer = max_buffer
        self.poll_s = poll_s
        self.tags = tags
        self.run_id: int | None = None
        self.run_url = ""
        self._create: dict[str, Any] | None = None
        self._queue: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._dropped = 0
        self._delay = FIRST_DELAY_S
        self._next_try = 0.0
        self.sent = {"points": 0, "samples": 0}

    # ---- producer side (the training loop) --------------------------------------------------------

    def start(self, name: str, source: str, config: Mapping[str, Any], total_steps: int = 0) -> None:
        self._create = {"name": name, "source": source, "config": dict(config), "total_steps": total_steps}
        self._thread = threading.Thread(target=self._loop, name="dapo-external-sender", daemon=True)
        self._thread.start()

    def metrics(self, step: int, values: Mapping[str, Any], wall_time: float | None = None) -> None:
        self._put("points", {"step": step, "metrics": dict(values), "wall_time": wall_time or time.time()})

    def samples(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._put("samples", row)

    def finish(self, status: str = "succeeded", error: str = "", timeout_s: float = 30.0) -> bool:
        """Send what is buffered (for up to ``timeout_s``), then mark the run ``status``. True when all of
        it reached the server; otherwise the records left are lost and a warning says how many."""
        self._put("finish", {"status": status, "error": error})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.pending():
            self._wake.set()
            time.sleep(0.05)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        left = self.pending()
        if left:
            log.warning("dapo: %d records of the run never reached %s: they are lost", left, self._where())
        return not left

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def _put(self, kind: str, item: dict[str, Any]) -> None:
        with self._lock:
            self._queue.append((kind, item))
            if len(self._queue) > self.max_buffer:
                self._queue.popleft()
                self._dropped += 1
                if self._dropped == 1:
                    log.warning(
                        "dapo: more than %d records wait for the server: dropping the oldest", self.max_buffer
                    )
        self._wake.set()

    # ---- the sending thread ------------------------------------------------------------------------

    def _where(self) -> str:
        return self._client.url if self._client is not None else "the platform"

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if time.monotonic() >= self._next_try:
                try:
                    self._send_all()
                except Exception as e:  # never let the thread die: retried later
                    self._failed(e)
            if self._stop.is_set():
                return

    def _send_all(self) -> None:
        if self._client is None:
            self._client = self._client_factory()
        if self.run_id is None:
            assert self._create is not None
            run = self._client.create_external_run(**self._create, tags=self.tags)
            self.run_id = int(run["id"])
            self.run_url = f"{self._client.url}/runs/{self.run_id}/"
            log.info("dapo: this run is on the platform: %s", self.run_url)
        while True:
            with self._lock:
                if not self._queue:
                    break
                kind = self._queue[0][0]
                limit = {"points": BATCH_POINTS, "samples": BATCH_SAMPLES}.get(kind, 1)
                batch: list[dict[str, Any]] = []
                for queued_kind, item in self._queue:
                    if queued_kind != kind or len(batch) >= limit:
                        break
                    batch.append(item)
            self._send(kind, batch)
            with self._lock:
                for _ in batch:
                    self._queue.popleft()
            if kind in self.sent:
                self.sent[kind] += len(batch)
        self._recovered()

    def _send(self, kind: str, batch: list[dict[str, Any]]) -> None:
        assert self._client is not None and self.run_id is not None
        try:
            if kind == "points":
                self._client.log_metrics(self.run_id, batch)
            elif kind == "samples":
                self._client.log_samples(self.run_id, batch)
            else:
                self._client.finish_external_run(self.run_id, **batch[0])
        except ApiError as e:
            if e.status >= 500 or e.status == 429:
                raise
            # refused as written (a bad value, the run deleted or finished): retrying cannot help
            log.warning("dapo: the platform refused %d %s of run %s: %s", len(batch), kind, self.run_id, e)

    def _failed(self, error: Exception) -> None:
        if not self._failing:
            what = "cannot reach" if isinstance(error, ClientError) else "failed sending to"
            log.warning(
                "dapo: %s %s (%s); training goes on, records are buffered and retried",
                what,
                self._where(),
                error,
            )
            self._failing = True
        self._next_try = time.monotonic() + self._delay
        self._delay = min(MAX_DELAY_S, self._delay * 2)

    def _recovered(self) -> None:
        if self._failing:
            log.info("dapo: %s answers again; the buffered records were sent", self._where())
        self._failing, self._delay, self._next_try = False, FIRST_DELAY_S, 0.0
