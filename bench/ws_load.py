"""Websocket load: N clients watch one run while the worker's sink records a step every second.

    .venv/bin/python bench/ws_load.py [--clients 50] [--steps 60] [--interval 1.0] [--metrics 40]
                                      [--samples 128]

The real stack: daphne with the Redis channel layer, and this process playing the worker through the real
``PlatformSink.on_step`` (``Run.record_step`` in one transaction, lease renewal, ``runs.events`` publish to
the run's group), fed by bench/ws_latency.py's ``feed``. The clients are websocket connections (autobahn, in
one event loop of this process) logged in with a session cookie. Checks that every client receives every
step exactly once and in order; reports latency from the publish (the event's ``sent_at``) to each client's
receipt, over every client x step, and from the ``on_step`` call to receipt. Needs Redis (BENCH_REDIS_URL,
default redis://127.0.0.1:6379/12).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from page_load import metric_names, setup_django, start_daphne
from ws_latency import bench_run, feed, report


@dataclass
class Watcher:
    """What one client saw: the steps of its "step" events in arrival order, with arrival times (s)."""

    steps: list[int] = field(default_factory=list)
    received_at: dict[int, float] = field(default_factory=dict)
    sent_at: dict[int, float] = field(default_factory=dict)
    snapshot: asyncio.Event = field(default_factory=asyncio.Event)
    closed: str = ""

    def on_event(self, event: dict[str, Any], now: float) -> None:
        if event.get("type") == "snapshot":
            self.snapshot.set()
        elif event.get("type") == "step":
            self.steps.append(event["step"])
            self.received_at.setdefault(event["step"], now)
            self.sent_at[event["step"]] = event["sent_at"]


class Connection:
    """A minimal RFC 6455 client on asyncio streams (this process runs Django, whose daphne app pins
    autobahn to Twisted, so autobahn's asyncio client cannot be used here)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int, path: str, headers: dict[str, str]) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        response = await reader.readuntil(b"\r\n\r\n")
        if not response.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"handshake refused: {response.splitlines()[0]!r}")
        return cls(reader, writer)

    async def messages(self) -> Any:
        """Yields each text or binary message until the server closes."""
        parts: list[bytes] = []
        while True:
            head = await self.reader.readexactly(2)
            fin, opcode, length = head[0] & 0x80, head[0] & 0x0F, head[1] & 0x7F
            if length >= 126:
                size = 2 if length == 126 else 8
                length = int.from_bytes(await self.reader.readexactly(size), "big")
            payload = await self.reader.readexactly(length)  # a server never masks its frames
            if opcode == 8:
                return
            if opcode == 9:
                self.send(10, payload)
            elif opcode in (0, 1, 2):
                parts.append(payload)
                if fin:
                    yield b"".join(parts)
                    parts = []

    def send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        size = len(payload)
        head = (
            struct.pack("!BB", 0x80 | opcode, 0x80 | size)
            if size < 126
            else struct.pack("!BBH", 0x80 | opcode, 0xFE, size)
        )
        self.writer.write(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def close(self) -> None:
        self.send(8, struct.pack("!H", 1000))
        self.writer.close()


async def _listen(conn: Connection, watcher: Watcher) -> None:
    try:
        async for message in conn.messages():
            watcher.on_event(json.loads(message), time.time())
        watcher.closed = "closed by the server"
    except (asyncio.IncompleteReadError, ConnectionError) as e:
        watcher.closed = f"connection lost: {e!r}"
    finally:
        watcher.snapshot.set()  # never leave connect() waiting on a refused client


async def connect(host: str, port: int, run_id: int, cookie: str, count: int) -> list[tuple[Watcher, Any]]:
    """``count`` logged-in clients on the run's websocket, each past its snapshot."""
    headers = {"Origin": f"http://{host}:{port}", "Cookie": cookie}
    clients = []
    for _ in range(count):
        watcher = Watcher()
        conn = await Connection.open(host, port, f"/ws/runs/{run_id}/", headers)
        clients.append((watcher, conn, asyncio.create_task(_listen(conn, watcher))))
    await asyncio.wait_for(asyncio.gather(*(w.snapshot.wait() for w, _, _ in clients)), 60)
    refused = [w.closed for w, _, _ in clients if w.closed]
    if refused:
        raise RuntimeError(f"{len(refused)} clients were refused: {refused[0]}")
    return [(w, conn) for w, conn, _ in clients]


async def wait_for_last(watchers: list[Watcher], last: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(last not in w.received_at for w in watchers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def problems(watchers: list[Watcher], steps: int) -> list[str]:
    """Clients that missed a step, saw one twice or out of order."""
    expected = list(range(1, steps + 1))
    return [f"client {i}: got {w.steps}" for i, w in enumerate(watchers) if w.steps != expected]


def publish_latencies_ms(watchers: list[Watcher]) -> list[float]:
    return [1000 * (w.received_at[s] - w.sent_at[s]) for w in watchers for s in w.received_at]


def session_cookie(user: Any) -> str:
    """A session cookie for ``user`` (saved in the database that daphne reads)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


async def watch_while_feeding(
    host: str, port: int, run_id: int, cookie: str, clients: int, feeder: threading.Thread, last_step: int
) -> list[Watcher]:
    """Connect the clients, start the feeder thread, wait until every client has the last step (or 30 s
    after the feeder is done), close the connections."""
    connected = await connect(host, port, run_id, cookie, clients)
    watchers = [w for w, _ in connected]
    feeder.start()
    while feeder.is_alive():
        await asyncio.sleep(0.1)
    await wait_for_last(watchers, last_step, timeout=30)
    for _, conn in connected:
        conn.close()
    return watchers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between steps")
    parser.add_argument("--metrics", type=int, default=40)
    parser.add_argument("--samples", type=int, default=128)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="dapo-bench-") as tmp:
        var = Path(tmp)
        env = setup_django(var)
        run, sink = bench_run("ws load", tmp, args.steps)
        proc, port = start_daphne(env, var / "daphne.log")
        sent: dict[int, float] = {}
        feeder = threading.Thread(target=feed, args=(sink, args, metric_names(args.metrics), sent))
        try:
            watchers = asyncio.run(
                watch_while_feeding(
                    "127.0.0.1", port, run.pk, session_cookie(run.owner), args.clients, feeder, args.steps
                )
            )
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    bad = problems(watchers, args.steps)
    what = f"{args.interval} s apart, {args.metrics} metrics, {args.samples} samples a step"
    good = args.clients - len(bad)
    print(f"{args.clients} clients x {args.steps} steps ({what}): {good} got every step in order")
    for line in bad[:5]:
        print("  " + line)
    report("publish -> client (redis, daphne, websocket)", publish_latencies_ms(watchers))
    report("on_step -> client", [1000 * w.received_at[s] - sent[s] for w in watchers for s in w.received_at])
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
