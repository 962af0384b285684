"""The websocket of a run (``/ws/runs/<id>/``): checks access, sends a snapshot, relays live events.

Close codes: 4001 not logged in, 4004 no such run for this user (another user's run looks missing).
A client that reconnects passes ``?after=<last step it has>`` (or sends ``{"type": "catchup",
"after_step": N}``) and receives only what it missed. Malformed messages are ignored.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from runs.events import group_name
from runs.models import Run
from runs.series import snapshot

CLOSE_UNAUTHENTICATED = 4001
CLOSE_NOT_FOUND = 4004
MAX_MESSAGE_CHARS = 4096
CATCHUP_MIN_INTERVAL_S = 0.5


class RunConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self) -> None:
        await self.accept()  # accept first so the browser sees our close code (a refusal is only 403/1006)
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.run = await self._visible_run(user, self.scope["url_route"]["kwargs"]["run_id"])
        if self.run is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = group_name(self.run.pk)
        self.last_catchup = 0.0
        await self.channel_layer.group_add(self.group, self.channel_name)
        after = _int_or_none(parse_qs(self.scope.get("query_string", b"").decode()).get("after", [None])[0])
        await self._send_snapshot("snapshot", _step(after))

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.group is None or not text_data or len(text_data) > MAX_MESSAGE_CHARS:
            return
        try:
            message = json.loads(text_data)
        except ValueError:
            return
        if not isinstance(message, dict) or message.get("type") != "catchup":
            return
        after = message.get("after_step")
        now = time.monotonic()
        if (
            isinstance(after, int)
            and not isinstance(after, bool)
            and now - self.last_catchup >= CATCHUP_MIN_INTERVAL_S
        ):
            self.last_catchup = now
            await self._send_snapshot("catchup", _step(after))

    async def run_event(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])

    async def _send_snapshot(self, kind: str, after: int | None) -> None:
        data = await database_sync_to_async(snapshot)(self.run, after)
        await self.send_json({"type": kind, **data})

    @database_sync_to_async
    def _visible_run(self, user: Any, run_id: int | str) -> Run | None:
        pk = _int_or_none(str(run_id))
        if pk is None or not 0 < pk < 2**63:
            return None
        return Run.objects.visible_to(user).filter(pk=pk).first()


def _int_or_none(raw: str | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _step(value: int | None) -> int | None:
    """A step a client sent, clamped to what the database can compare (a huge number is not an error)."""
    return None if value is None else max(-1, min(value, 2**62))
