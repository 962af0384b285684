"""The websocket of a run (``/ws/runs/<id>/``): checks access, sends a snapshot, relays live events.

Access is checked again whenever it may have been taken away (a ``run.access`` message from
runs.access_signals: the run unshared, the user out of the group, a comparison unshared...), and before
relaying an event once ACCESS_RECHECK_S passed since the last check (for changes no signal sees, such as
a bulk ``update()``). A socket that lost access is closed with 4004 and relays nothing more.

Close codes: 4001 not logged in, 4004 no such run for this user (another user's run looks missing),
4013 a message over MAX_FRAME_CHARS, 4029 a client that kept sending faster than the rate limit, 4503 the
channel layer is unavailable (Redis restarting: the page reconnects and catches up from the database).
A server may only send 1000 or 3000-4999 (daphne's autobahn refuses RFC 6455's 1009 and 1012); 40xx and
4503 mirror the HTTP statuses.
A client that reconnects passes ``?after=<last step it has>`` (or sends ``{"type": "catchup",
"after_step": N}``) and receives only what it missed. Catch-ups closer together than
CATCHUP_MIN_INTERVAL_S are merged into one, sent at the end of the interval (never dropped: a client
asks when it sees a gap, and a dropped answer would leave the gap). Anything else a client sends
(non-JSON, binary, unknown types, messages over MAX_MESSAGE_CHARS) is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from core.params import DB_ID_MAX, int_or_none
from redis.exceptions import RedisError

from runs.access import find_run, still_readable
from runs.events import group_name, user_group_name
from runs.models import Run
from runs.series import snapshot

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4001
CLOSE_NOT_FOUND = 4004
CLOSE_TOO_BIG = 4013  # as HTTP 413
CLOSE_FLOODING = 4029  # as HTTP 429
CLOSE_UNAVAILABLE = 4503  # as HTTP 503: the client should reconnect
MAX_MESSAGE_CHARS = 4096
"""Longer messages are ignored (a real client sends ~50 characters)."""
MAX_FRAME_CHARS = 65536
"""Longer messages close the connection."""
RATE_PER_S = 10.0
"""Messages a client may send per second, on average, with bursts of RATE_BURST."""
RATE_BURST = 20.0
MAX_DROPPED = 100
"""Messages over the rate limit that are ignored before the connection is closed."""
CATCHUP_MIN_INTERVAL_S = 0.5
ACCESS_RECHECK_S = 5.0
"""Relaying an event checks access again once this long passed since the last check."""


class RunConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None
    user_group: str | None = None
    access_checked_at = 0.0
    pending_after: int | None = None
    catchup_task: asyncio.Task | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Redis lost (a restart) while connecting or listening: close with 4503, not an application crash."""
        try:
            await super().__call__(scope, receive, send)
        except (RedisError, OSError) as e:
            log.warning("run websocket: the channel layer is unavailable (%r); closing with 4503", e)
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": CLOSE_UNAVAILABLE})

    async def connect(self) -> None:
        await self.accept()  # accept first so the browser sees our close code (a refusal is only 403/1006)
        self.tokens, self.refilled_at, self.dropped = RATE_BURST, time.monotonic(), 0
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.run = await database_sync_to_async(find_run)(user, self.scope["url_route"]["kwargs"]["run_id"])
        if self.run is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.last_catchup, self.access_checked_at = 0.0, time.monotonic()
        await self.channel_layer.group_add(group_name(self.run.pk), self.channel_name)
        self.group = group_name(self.run.pk)  # only now: disconnect() leaves only a group it joined
        await self.channel_layer.group_add(user_group_name(user.pk), self.channel_name)
        self.user_group = user_group_name(user.pk)
        query = parse_qs(self.scope.get("query_string", b"").decode())
        after = int_or_none(query.get("after", [None])[0], low=-DB_ID_MAX)
        await self._send_snapshot("snapshot", _step(after))

    async def disconnect(self, code: int) -> None:
        if self.catchup_task is not None:
            self.catchup_task.cancel()
        await self._leave_groups()

    async def _leave_groups(self) -> None:
        groups = [g for g in (self.group, self.user_group) if g]
        self.group = self.user_group = None  # nothing is relayed or answered from now on
        for group in groups:
            with contextlib.suppress(Exception):  # Redis away: its group entries expire by themselves
                await self.channel_layer.group_discard(group, self.channel_name)

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        await self.receive(text_data=message.get("text"), bytes_data=message.get("bytes"))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.group is None:
            return
        size = len(text_data or "") + len(bytes_data or b"")
        if size > MAX_FRAME_CHARS:
            await self.close(code=CLOSE_TOO_BIG)
            return
        if not self._within_rate():
            self.dropped += 1
            if self.dropped > MAX_DROPPED:
                log.warning(
                    "run %s: closing a websocket that floods (%s messages ignored)", self.run.pk, MAX_DROPPED
                )
                await self.close(code=CLOSE_FLOODING)
            return
        after = _catchup_step(text_data) if text_data and size <= MAX_MESSAGE_CHARS else None
        if after is not None:
            await self._request_catchup(after)

    def _within_rate(self) -> bool:
        """A token bucket: RATE_PER_S tokens a second, at most RATE_BURST; a message takes one."""
        now = time.monotonic()
        self.tokens = min(RATE_BURST, self.tokens + (now - self.refilled_at) * RATE_PER_S)
        self.refilled_at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    async def _request_catchup(self, after: int) -> None:
        """Send a catch-up now, or merge it into the one scheduled at the end of the interval."""
        self.pending_after = after if self.pending_after is None else min(after, self.pending_after)
        wait = self.last_catchup + CATCHUP_MIN_INTERVAL_S - time.monotonic()
        if wait <= 0:
            await self._flush_catchup()
        elif self.catchup_task is None or self.catchup_task.done():
            self.catchup_task = asyncio.ensure_future(self._flush_catchup(delay=wait))

    async def _flush_catchup(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        after, self.pending_after = self.pending_after, None
        self.last_catchup = time.monotonic()
        if after is not None and await self._may_send():
            await self._send_snapshot("catchup", _step(after))

    async def run_event(self, message: dict[str, Any]) -> None:
        # "deleted" goes out unchecked (the check would find no run): the page says so, and tells nothing
        deleted = message["event"].get("type") == "deleted" and self.group is not None
        if deleted or await self._may_send():
            await self.send_json(message["event"])

    async def _may_send(self) -> bool:
        """Whether to send anything more: the socket still serves this run (not closed for lost access;
        a message already queued is dropped), and access was checked in the last ACCESS_RECHECK_S (else
        it is checked again now)."""
        if self.group is None:
            return False
        return time.monotonic() - self.access_checked_at <= ACCESS_RECHECK_S or await self._allowed()

    async def run_access(self, message: dict[str, Any]) -> None:
        """Access may have changed (runs.access_signals): check it again now."""
        if self.group is not None:
            await self._allowed()

    async def _allowed(self) -> bool:
        """Whether this user may still read the run; if not, the socket leaves its groups and closes with
        4004, as for a run they never could see."""
        allowed = await database_sync_to_async(still_readable)(self.scope["user"].pk, self.run.pk)
        self.access_checked_at = time.monotonic()
        if not allowed:
            await self._leave_groups()
            await self.close(code=CLOSE_NOT_FOUND)
        return allowed

    async def _send_snapshot(self, kind: str, after: int | None) -> None:
        # a catch-up fills a gap of steps; hardware samples come whole with each (re)connection's snapshot
        try:
            data = await database_sync_to_async(snapshot)(self.run, after, hardware=kind == "snapshot")
        except Run.DoesNotExist:  # deleted by its owner (runs.manage) while this socket was open
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.send_json({"type": kind, **data})


def _catchup_step(text: str) -> int | None:
    """The step of a well-formed ``{"type": "catchup", "after_step": N}``; None for anything else."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: "[[[[…" nested past the parser's depth
        return None
    if not isinstance(message, dict) or message.get("type") != "catchup":
        return None
    after = message.get("after_step")
    return after if isinstance(after, int) and not isinstance(after, bool) else None


def _step(value: int | None) -> int | None:
    """A step a client sent, clamped to what the database can compare (a huge number is not an error)."""
    return None if value is None else max(-1, min(value, 2**62))
