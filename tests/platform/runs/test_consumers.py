"""The run websocket through the real ASGI application (session cookie auth, origin check, routing)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from runs.events import publish, step_event

from tests.platform.support import report

pytestmark = pytest.mark.django_db(transaction=True)  # channels closes connections between calls


def _headers(user: Any | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        headers.append((b"cookie", cookie.encode()))
    return headers


def ws(path: str, user: Any | None) -> WebsocketCommunicator:
    from config.asgi import application

    return WebsocketCommunicator(application, path, headers=_headers(user))


def run(body: Callable[[], Awaitable[None]]) -> None:
    """Run a test body on one event loop: the in-memory channel layer's queues belong to a loop."""
    async_to_sync(body)()


def test_the_owner_gets_a_snapshot_then_live_steps(alice, alice_run):
    alice_run.record_step(report(1))
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        assert (await comm.connect(timeout=5))[0]
        snap = await comm.receive_json_from(3)
        assert snap["type"] == "snapshot" and snap["run"]["id"] == alice_run.pk
        assert snap["metrics"]["critic/score/mean"] == {"steps": [1], "values": [0.1]}
        assert len(snap["samples"]) == 4
        step = report(2)
        await sync_to_async(alice_run.record_step)(step)
        event = step_event(alice_run, 2, step.metrics, step.samples)
        await sync_to_async(publish)(alice_run.pk, event)
        live = await comm.receive_json_from(3)
        assert live["type"] == "step" and live["step"] == 2 and live["run"]["step"] == 2
        assert live["metrics"]["critic/score/mean"] == 0.2 and live["samples"][0]["response"] == "Answer: 2"
        await comm.disconnect()

    run(body)


def test_a_reconnecting_client_gets_only_what_it_missed(alice, alice_run):
    for s in (1, 2, 3, 4):
        alice_run.record_step(report(s))
    comm = ws(f"/ws/runs/{alice_run.pk}/?after=2", alice)

    async def body() -> None:
        assert (await comm.connect(timeout=5))[0]
        snap = await comm.receive_json_from(3)
        assert snap["after_step"] == 2 and snap["metrics"]["critic/score/mean"]["steps"] == [3, 4]
        await comm.send_to(text_data=json.dumps({"type": "catchup", "after_step": 3}))
        catchup = await comm.receive_json_from(3)
        assert catchup["type"] == "catchup" and catchup["metrics"]["critic/score/mean"]["steps"] == [4]
        await comm.disconnect()

    run(body)


def test_an_absurd_after_step_is_clamped_not_a_crash(alice, alice_run):
    comm = ws(f"/ws/runs/{alice_run.pk}/?after={10**30}", alice)

    async def body() -> None:
        assert (await comm.connect(timeout=5))[0]
        snap = await comm.receive_json_from(3)
        assert snap["type"] == "snapshot" and snap["metrics"] == {}
        await comm.send_to(text_data=json.dumps({"type": "catchup", "after_step": -(10**30)}))
        assert (await comm.receive_json_from(3))["after_step"] == -1
        await comm.disconnect()

    run(body)


def _closed_with(path: str, user: Any | None) -> int:
    comm = ws(path, user)
    out: dict[str, Any] = {}

    async def body() -> None:
        await comm.connect(timeout=5)
        out.update(await comm.receive_output(3))

    run(body)
    assert out["type"] == "websocket.close"
    return out["code"]


def test_another_users_run_closes_with_4004(bob, alice_run):
    assert _closed_with(f"/ws/runs/{alice_run.pk}/", bob) == 4004


def test_a_missing_run_closes_with_4004(alice):
    assert _closed_with("/ws/runs/987654/", alice) == 4004
    assert _closed_with(f"/ws/runs/{10**30}/", alice) == 4004


def test_an_anonymous_client_is_closed_with_4001(alice_run):
    assert _closed_with(f"/ws/runs/{alice_run.pk}/", None) == 4001


def test_a_foreign_origin_is_refused(alice, alice_run):
    from config.asgi import application

    headers = [h for h in _headers(alice) if h[0] != b"origin"] + [(b"origin", b"http://evil.example")]
    comm = WebsocketCommunicator(application, f"/ws/runs/{alice_run.pk}/", headers=headers)
    connected, _ = async_to_sync(comm.connect)(timeout=5)
    assert not connected


@pytest.mark.parametrize(
    "message",
    [
        "not json",
        "[]",
        '"text"',
        '{"type": "catchup"}',
        '{"type": "catchup", "after_step": "1"}',
        '{"type": "catchup", "after_step": true}',
        '{"type": "nope"}',
        "{" * 5000,
    ],
)
def test_malformed_messages_are_ignored(alice, alice_run, message):
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        assert (await comm.connect(timeout=5))[0]
        await comm.receive_json_from(3)  # snapshot
        await comm.send_to(text_data=message)
        assert await comm.receive_nothing(0.3)
        await comm.send_to(text_data=json.dumps({"type": "catchup", "after_step": -1}))  # still alive
        assert (await comm.receive_json_from(3))["type"] == "catchup"
        await comm.disconnect()

    run(body)
