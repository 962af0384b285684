"""Tell the open cluster pages that the picture changed: ``{"type": "cluster.changed"}`` to the channel
group ``cluster``. The message carries no data: each page's socket (runs.cluster_consumer) builds a fresh
picture for its own viewer (runs.cluster_views). Sent by a scheduler pass that changed the queue and by
each save of a capacity record or Ray snapshot (runs.models.capacity)."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

GROUP = "cluster"


def changed(*, now: bool = False) -> None:
    """At once, or once the current transaction commits. Logged, never raised (a page catches up when it
    reconnects)."""
    if now:
        _send()
    else:
        transaction.on_commit(_send)


def _send() -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(GROUP, {"type": "cluster.changed"})
    except Exception:
        log.warning("could not tell the cluster pages of a change", exc_info=True)
