"""The run websocket under hostile clients: no login, another user's run, malformed, binary, huge and
nested messages, and floods. Each is closed with a stated code or ignored; the consumer never crashes
(a crash would re-raise here from the communicator), and a well-behaved client keeps being served."""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer
from channels.testing import WebsocketCommunicator
from redis.exceptions import ConnectionError as RedisConnectionError
from runs import consumers

from tests.platform.runs.test_consumers import run, ws
from tests.platform.support import report

pytestmark = pytest.mark.django_db(transaction=True)


def catchup(after: Any) -> str:
    return json.dumps({"type": "catchup", "after_step": after})


async def _open(comm: WebsocketCommunicator) -> dict[str, Any]:
    assert (await comm.connect(timeout=5))[0]
    snapshot = await comm.receive_json_from(3)
    assert snapshot["type"] == "snapshot"
    return snapshot


async def _closed_code(comm: WebsocketCommunicator) -> int:
    """The close code the consumer sent; raises if the consumer crashed instead."""
    while True:
        out = await comm.receive_output(3)
        if out["type"] == "websocket.close":
            return out["code"]


def test_no_login_and_other_users_run_are_closed_and_later_messages_ignored(alice_run, bob):
    for user, code in ((None, consumers.CLOSE_UNAUTHENTICATED), (bob, consumers.CLOSE_NOT_FOUND)):
        comm = ws(f"/ws/runs/{alice_run.pk}/", user)

        async def body(comm: WebsocketCommunicator = comm, code: int = code) -> None:
            await comm.connect(timeout=5)
            assert await _closed_code(comm) == code
            await comm.send_to(text_data=catchup(-1))  # nothing is sent back: no group, no snapshot
            assert await comm.receive_nothing(0.3)
            await comm.disconnect()

        run(body)


@pytest.mark.parametrize(
    "frame",
    [
        {"bytes_data": b"\x00\xff" * 100},
        {"bytes_data": catchup(-1).encode()},
        {"text_data": "\x00"},
        {"text_data": "[" * 2000 + "]" * 2000},  # nested past the JSON parser's depth: RecursionError
        {"text_data": '{"type": "catchup", "after_step": 1e999}'},
        {"text_data": '{"type": "catchup", "after_step": NaN}'},
        {"text_data": '{"type": "catchup", "after_step": {"$gt": 1}}'},
        {"text_data": "\ud800"},
        {"text_data": '{"type": "run.event", "event": {"type": "status"}}'},
        {"text_data": "x" * 60_000},
    ],
)
def test_malformed_and_binary_messages_are_ignored(alice, alice_run, frame):
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        await _open(comm)
        await comm.send_to(**frame)
        assert await comm.receive_nothing(0.3)
        await comm.send_to(text_data=catchup(-1))  # still served
        assert (await comm.receive_json_from(3))["type"] == "catchup"
        await comm.disconnect()

    run(body)


def test_a_message_over_the_frame_cap_closes_the_connection(alice, alice_run):
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        await _open(comm)
        await comm.send_to(text_data=" " * (consumers.MAX_FRAME_CHARS + 1))
        assert await _closed_code(comm) == consumers.CLOSE_TOO_BIG

    run(body)


def test_a_flood_is_cut_off_without_a_crash(alice, alice_run):
    alice_run.record_step(report(1))
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        await _open(comm)
        for _ in range(int(consumers.RATE_BURST) + consumers.MAX_DROPPED + 50):
            await comm.send_to(text_data=catchup(0))
        replies = []
        while (out := await comm.receive_output(3))["type"] != "websocket.close":
            replies.append(json.loads(out["text"]))
        assert out["code"] == consumers.CLOSE_FLOODING
        # the catch-ups within the burst were merged (one now, one at the end of the interval), not 20
        assert 1 <= len(replies) <= 2 and all(r["type"] == "catchup" for r in replies)

    run(body)


def test_catchups_close_together_are_merged_never_dropped(alice, alice_run):
    for s in (1, 2, 3, 4):
        alice_run.record_step(report(s))
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        await _open(comm)
        for after in (3, 2, 1):  # a client that saw three gaps in a row
            await comm.send_to(text_data=catchup(after))
        first = await comm.receive_json_from(3)
        second = await comm.receive_json_from(3)  # the deferred one, with the earliest step asked for
        assert (first["after_step"], second["after_step"]) == (3, 1)
        assert second["metrics"]["critic/score/mean"]["steps"] == [2, 3, 4]
        assert await comm.receive_nothing(consumers.CATCHUP_MIN_INTERVAL_S + 0.2)
        await comm.disconnect()

    run(body)


def test_a_steady_client_within_the_rate_is_never_cut_off(alice, alice_run, monkeypatch):
    monkeypatch.setattr(consumers, "CATCHUP_MIN_INTERVAL_S", 0.0)
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        await _open(comm)
        for _ in range(int(consumers.RATE_BURST)):  # the whole burst at once: all answered
            await comm.send_to(text_data=catchup(-1))
            assert (await comm.receive_json_from(3))["type"] == "catchup"
        await comm.disconnect()

    run(body)


class RedisAwayLayer(InMemoryChannelLayer):
    """A channel layer whose Redis is restarting: joining a group fails as channels_redis fails then."""

    async def group_add(self, group: str, channel: str) -> None:
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def test_a_lost_channel_layer_closes_with_4503_instead_of_crashing(alice, alice_run, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.RedisAwayLayer"}}
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        await comm.connect(timeout=5)
        assert await _closed_code(comm) == consumers.CLOSE_UNAVAILABLE  # the page reconnects on it
        await comm.wait(3)  # the application ended without an exception

    run(body)
