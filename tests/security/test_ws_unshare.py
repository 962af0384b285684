"""Losing access closes the run's websocket: a reader watching a shared run stops receiving its steps the
moment the owner unshares it (by name or group, on the page or the API), leaves the group it was shared
with, or loses the shared comparison that showed it. The socket closes with 4004 (no such run, as for a
stranger: the page says "no access" and does not reconnect); the owner and other readers keep theirs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from runs import consumers
from runs.events import publish, step_event
from runs.models import Run, SavedComparison

from tests.platform.fixtures import make_user
from tests.platform.runs.test_consumers import run, ws
from tests.platform.support import report

pytestmark = pytest.mark.django_db(transaction=True)  # channels closes connections between calls


async def _watch(comm: WebsocketCommunicator) -> WebsocketCommunicator:
    assert (await comm.connect(timeout=5))[0]
    assert (await comm.receive_json_from(3))["type"] == "snapshot"
    return comm


async def _next(comm: WebsocketCommunicator) -> dict[str, Any]:
    """The next thing the consumer sent: a JSON event, or {"closed": code}."""
    out = await comm.receive_output(3)
    if out["type"] == "websocket.close":
        return {"closed": out["code"]}
    return json.loads(out["text"])


def _send_step(run: Run, step: int) -> None:
    run.record_step(report(step))
    publish(run.pk, step_event(run, step, report(step).metrics, []))


def _watch_then_lose_access(run_obj: Run, reader: Any, revoke: Callable[[], Any], owner: Any) -> None:
    """The reader and the owner watch; ``revoke`` takes the reader's access away; one more step follows.
    The reader's socket is closed with 4004 before that step, the owner's receives it."""

    path = f"/ws/runs/{run_obj.pk}/"
    reader_comm, owner_comm = ws(path, reader), ws(path, owner)  # logs in: before the event loop

    async def body() -> None:
        reader_ws, owner_ws = await _watch(reader_comm), await _watch(owner_comm)
        await sync_to_async(_send_step)(run_obj, 1)
        assert (await _next(reader_ws))["type"] == "step"  # shared: he watches live
        assert (await _next(owner_ws))["type"] == "step"
        await sync_to_async(revoke)()
        await sync_to_async(_send_step)(run_obj, 2)
        assert await _next(reader_ws) == {"closed": consumers.CLOSE_NOT_FOUND}
        assert await reader_ws.receive_nothing(0.3)  # and nothing after
        owner_event = await _next(owner_ws)
        assert owner_event["type"] == "step" and owner_event["step"] == 2
        await owner_ws.disconnect()

    run(body)


def test_unsharing_by_api_closes_the_readers_socket(alice, alice_run, bob, api, team):
    alice_run.shared_users.add(bob)
    unshare = lambda: api.patch(f"/api/runs/{alice_run.pk}/", {"shared_users": []}, format="json")  # noqa: E731
    _watch_then_lose_access(alice_run, bob, unshare, alice)


def test_unsharing_on_the_page_closes_the_readers_socket(alice, alice_client, alice_run, bob, team):
    alice_run.shared_users.add(bob)
    unshare = lambda: alice_client.post(f"/runs/{alice_run.pk}/share/", {"users": ""})  # noqa: E731
    _watch_then_lose_access(alice_run, bob, unshare, alice)


def test_leaving_the_group_closes_the_readers_socket(alice, alice_run, bob, team):
    alice_run.shared_groups.add(team)
    _watch_then_lose_access(alice_run, bob, lambda: bob.groups.remove(team), alice)


def test_unsharing_a_group_closes_its_members_sockets(alice, alice_run, bob, team):
    alice_run.shared_groups.add(team)
    _watch_then_lose_access(alice_run, bob, lambda: alice_run.shared_groups.clear(), alice)


def test_deleting_the_group_closes_its_members_sockets(alice, alice_run, bob):
    crew = Group.objects.create(name="crew")
    bob.groups.add(crew)
    alice_run.shared_groups.add(crew)
    _watch_then_lose_access(alice_run, bob, crew.delete, alice)


def test_unsharing_the_comparison_closes_the_readers_socket(alice, alice_run, bob):
    saved = SavedComparison.objects.create(owner=alice, name="study", run_ids=[alice_run.pk])
    saved.runs.set([alice_run])
    saved.shared_users.add(bob)
    _watch_then_lose_access(alice_run, bob, lambda: saved.shared_users.remove(bob), alice)


def test_deleting_the_comparison_closes_the_readers_socket(alice, alice_run, bob):
    saved = SavedComparison.objects.create(owner=alice, name="study", run_ids=[alice_run.pk])
    saved.runs.set([alice_run])
    saved.shared_users.add(bob)
    _watch_then_lose_access(alice_run, bob, saved.delete, alice)


def test_a_reader_who_keeps_access_keeps_watching(alice, alice_run, bob, django_user_model, api, team):
    carol = make_user(django_user_model, "carol", "carol-pass-123")
    carol.groups.add(team)
    alice_run.shared_users.add(bob, carol)

    carol_comm = ws(f"/ws/runs/{alice_run.pk}/", carol)

    async def body() -> None:
        carol_ws = await _watch(carol_comm)
        patch = {"shared_users": ["carol"]}  # bob loses access, carol keeps it
        await sync_to_async(api.patch)(f"/api/runs/{alice_run.pk}/", patch, format="json")
        await sync_to_async(_send_step)(alice_run, 1)
        event = await _next(carol_ws)
        assert event["type"] == "step" and event["step"] == 1
        await carol_ws.disconnect()

    run(body)


def _silently_unshare(run_obj: Run) -> None:
    """A bulk delete of the share rows: no m2m signal is sent, so no socket is told."""
    Run.shared_users.through.objects.filter(run=run_obj).delete()


def test_a_change_no_signal_sees_is_caught_before_the_next_event(alice, alice_run, bob, monkeypatch):
    # the backstop's interval, elapsed at once (raising=False: the code as found had no backstop)
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 0.0, raising=False)
    alice_run.shared_users.add(bob)
    _watch_then_lose_access(alice_run, bob, lambda: _silently_unshare(alice_run), alice)


def test_a_catchup_after_a_silent_unshare_is_refused(alice_run, bob, monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 0.0, raising=False)
    alice_run.shared_users.add(bob)
    alice_run.record_step(report(1))
    comm = ws(f"/ws/runs/{alice_run.pk}/", bob)

    async def body() -> None:
        await _watch(comm)
        await sync_to_async(_silently_unshare)(alice_run)
        await comm.send_to(text_data=json.dumps({"type": "catchup", "after_step": -1}))
        assert await _next(comm) == {"closed": consumers.CLOSE_NOT_FOUND}  # no snapshot of the curves

    run(body)


def test_the_owner_still_hears_that_the_run_was_deleted(alice, alice_run, api, monkeypatch):
    """The recheck would find no run: the "deleted" event goes out as before, and the page says so."""
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 0.0, raising=False)
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        await _watch(comm)
        assert (await sync_to_async(api.delete)(f"/api/runs/{alice_run.pk}/")).status_code == 204
        assert (await _next(comm)) == {"type": "deleted", "run": {"id": alice_run.pk}}
        await comm.disconnect()

    run(body)
