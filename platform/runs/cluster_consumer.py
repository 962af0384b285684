"""The websocket of the cluster page (``/ws/cluster/``): a snapshot on connect, a fresh one on each change.

Changes (``cluster.changed`` on the group ``cluster``: runs.cluster_views.changed) carry no data: the
picture depends on who looks (runs the viewer may not read show their number and owner only), so each
socket builds its own. Changes closer together than REFRESH_MIN_INTERVAL_S are merged into one picture,
sent at the end of the interval. Anything a client sends is ignored. Close codes as the run socket's
(runs.consumers): 4001 not logged in, 4503 the channel layer is unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from redis.exceptions import RedisError

from runs.cluster_events import GROUP
from runs.cluster_views import cluster_view
from runs.consumers import CLOSE_UNAUTHENTICATED, CLOSE_UNAVAILABLE

log = logging.getLogger(__name__)

REFRESH_MIN_INTERVAL_S = 0.5


class ClusterConsumer(AsyncJsonWebsocketConsumer):
    joined = False
    sent_at = 0.0
    pending: asyncio.Task | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except (RedisError, OSError) as e:
            log.warning("cluster websocket: the channel layer is unavailable (%r); closing with 4503", e)
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": CLOSE_UNAVAILABLE})

    async def connect(self) -> None:
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(GROUP, self.channel_name)
        self.joined = True
        await self._send_picture()

    async def disconnect(self, code: int) -> None:
        if self.pending is not None:
            self.pending.cancel()
        if self.joined:
            self.joined = False
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Nothing a client sends means anything here."""

    async def cluster_changed(self, message: dict[str, Any]) -> None:
        wait = self.sent_at + REFRESH_MIN_INTERVAL_S - time.monotonic()
        if wait <= 0:
            await self._send_picture()
        elif self.pending is None or self.pending.done():
            self.pending = asyncio.ensure_future(self._send_picture(delay=wait))

    async def _send_picture(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        if not self.joined:
            return
        self.sent_at = time.monotonic()
        data = await database_sync_to_async(cluster_view)(self.scope["user"])
        await self.send_json({"type": "cluster", **data})
