"""The database goes away for a few seconds while a run writes its steps: the writes are retried, the run
goes on under the same controller, and every step's metrics and samples end up in the database.

The outage is real for either database the tests run on:
  * PostgreSQL: the worker reaches the server through a TCP proxy of this test, which drops every
    connection and refuses new ones for the window (what a restart or a failover looks like);
  * SQLite: another process holds the write lock for the window, and the worker's busy timeout is 1 s
    (``DAPO_SQLITE_TIMEOUT_S``), so its writes fail with "database is locked" instead of waiting.
"""

from __future__ import annotations

import re
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from runs import dispatch
from runs.models import MetricPoint, Run, Sample, Status

from tests.reliability import support
from tests.reliability.support import final, wait_run
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(240)]

OUTAGE_S = 5.0


class FlakyProxy:
    """A TCP proxy to ``target``; ``outage(seconds)`` drops every connection and refuses new ones."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = stack.free_port()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._closed = False

    def start(self) -> FlakyProxy:
        self._listen()
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.1)
        self._listener = listener

    def _accept(self) -> None:
        while not self._closed:
            listener = self._listener
            try:
                client, _ = listener.accept() if listener else (None, None)
            except OSError:
                client = None
            if client is None:
                time.sleep(0.05)
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(source, sink)

    def _drop(self, *sockets: socket.socket) -> None:
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
            with self._lock:
                self._sockets.discard(s)

    def outage(self, seconds: float) -> None:
        listener, self._listener = self._listener, None
        if listener:
            listener.close()  # new connections are refused
        with self._lock:
            open_sockets = list(self._sockets)
        self._drop(*open_sockets)  # the established ones are cut
        time.sleep(seconds)
        self._listen()

    def close(self) -> None:
        self._closed = True
        listener, self._listener = self._listener, None
        if listener:
            listener.close()
        with self._lock:
            open_sockets = list(self._sockets)
        self._drop(*open_sockets)


def hold_sqlite_write_lock(path: str, seconds: float) -> None:
    """Another process's write transaction: nobody else can write to the file meanwhile (readers can)."""
    other = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        time.sleep(seconds)
        other.execute("COMMIT")
    finally:
        other.close()


@pytest.fixture(scope="module")
def outage_worker(django_db_setup: Any, django_db_blocker: Any, test_queue: str, var: Path) -> Any:
    """A worker whose database can be made unavailable: yields ``outage(seconds)``."""
    extra = {"DAPO_LEASE_SECONDS": "30"}  # longer than the outage: the same controller must carry on
    proxy = None
    with django_db_blocker.unblock():
        vendor, settings_dict = connection.vendor, connection.settings_dict
    if vendor == "postgresql":
        target = (settings_dict["HOST"] or "127.0.0.1", int(settings_dict["PORT"] or 5432))
        proxy = FlakyProxy(target).start()
        url = stack.database_url().replace(f"@{target[0]}:{target[1]}/", f"@127.0.0.1:{proxy.port}/")
        extra["DATABASE_URL"] = url
        outage: Callable[[float], None] = proxy.outage
    else:
        extra["DAPO_SQLITE_TIMEOUT_S"] = "1"
        outage = lambda seconds: hold_sqlite_write_lock(settings_dict["NAME"], seconds)  # noqa: E731
    try:
        with support.workers(support.worker_env(var, **extra), var / "logs-db") as workers:
            yield outage, workers
    finally:
        if proxy:
            proxy.close()
        with django_db_blocker.unblock():
            stack.wait_for_other_sessions_to_leave()


def test_a_database_outage_mid_run_is_retried_and_no_step_is_lost(outage_worker, alice, tiny_assets, var):
    outage, workers = outage_worker
    config = support.tiny_config(tiny_assets, steps=60, every=10)
    run = Run.objects.create(owner=alice, name="db-outage", config=config.to_dict(), total_steps=60)
    support.write_faults(var, {run.pk: {"runner": "fake"}})
    dispatch.send("launch_run", run.pk)
    wait_run(run.pk, lambda r: r.step >= 13, 90, "a few steps past a checkpoint")
    time.sleep(0.02)  # past the lease renewal that follows the step's write: the cut lands between steps
    outage(OUTAGE_S)
    run = final(run.pk, timeout=120)
    assert (run.status, run.step, run.attempts) == (Status.SUCCEEDED, 60, 1)  # retried, not recomputed
    points = MetricPoint.objects.filter(run=run, name="critic/score/mean").order_by("step")
    assert list(points.values_list("step", flat=True)) == list(range(1, 61))
    assert Sample.objects.filter(run=run).count() == 60 * 4
    wall = list(points.values_list("wall_time", flat=True))
    assert max(b - a for a, b in zip(wall, wall[1:], strict=False)) >= OUTAGE_S - 1.5  # a step waited it out
    assert re.search(r"database error while (writing step|renewing the lease)", workers.logs())
