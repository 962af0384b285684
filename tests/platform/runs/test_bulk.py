"""Bulk actions on the runs list and POST /api/runs/bulk/: cancel, archive, restore and delete act only on
the user's own runs; a run shared with them is refused with a message naming its owner; delete asks once
more on the page; bad input is a clear error."""

from __future__ import annotations

import pytest
from runs.models import Run, Status

from dapo.runconfig.presets import get_preset

pytestmark = pytest.mark.django_db


def _run(owner, paths, name):
    config = get_preset("tiny_cpu").with_overrides({**paths, "optim.total_steps": 5})
    return Run.create_queued(owner=owner, name=name, config=config, preset="tiny_cpu")


@pytest.fixture
def runs(alice, bob, paths, queued, team):
    """alice's three runs (queued, running, succeeded) and bob's run shared with alice."""
    queued_run, running, done = (_run(alice, paths, f"a{i}") for i in range(3))
    Run.objects.filter(pk=running.pk).update(status=Status.RUNNING)
    Run.objects.filter(pk=done.pk).update(status=Status.SUCCEEDED)
    bobs = _run(bob, paths, "bobs")
    bobs.shared_users.add(alice)
    return {"queued": queued_run, "running": running, "done": done, "bobs": bobs}


def _status(run):
    run.refresh_from_db()
    return run.status, run.cancel_requested, run.archived


def test_the_api_cancels_archives_and_deletes_only_your_own_runs(api, runs):
    ids = [r.pk for r in runs.values()]
    body = api.post("/api/runs/bulk/", {"action": "cancel", "ids": ids}, format="json").json()
    q, r, d, b = (runs[k].pk for k in ("queued", "running", "done", "bobs"))
    assert body["done"] == {str(q): "cancelled", str(r): "cancelling", str(d): "already succeeded"}
    assert body["refused"] == {
        str(b): f"#{b} 'bobs' is bob's, shared with you read-only: only its owner can cancel it"
    }
    assert _status(runs["queued"])[0] == Status.CANCELLED and _status(runs["running"])[1] is True
    assert _status(runs["bobs"]) == (Status.QUEUED, False, False)

    body = api.post("/api/runs/bulk/", {"action": "archive", "ids": ids}, format="json").json()
    assert set(body["done"]) == {str(q), str(r), str(d)} and set(body["refused"]) == {str(b)}
    assert _status(runs["done"])[2] is True and _status(runs["bobs"])[2] is False
    body = api.post("/api/runs/bulk/", {"action": "restore", "ids": [d]}, format="json").json()
    assert body["done"] == {str(d): "restored"} and _status(runs["done"])[2] is False

    missing = 10**6
    body = api.post("/api/runs/bulk/", {"action": "delete", "ids": [d, b, missing]}, format="json").json()
    assert body["done"] == {str(d): "deleted"}
    assert body["refused"][str(missing)] == f"#{missing}: no such run among yours"
    assert not Run.objects.filter(pk=d).exists() and Run.objects.filter(pk=b).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "explode", "ids": [1]}, "action"),
        ({"ids": [1]}, "action"),
        ({"action": "cancel"}, "ids"),
        ({"action": "cancel", "ids": []}, "ids"),
        ({"action": "cancel", "ids": ["x"]}, "ids"),
        ({"action": "cancel", "ids": [True]}, "ids"),
        ({"action": "cancel", "ids": [0]}, "ids"),
        ({"action": "cancel", "ids": [2**70]}, "ids"),
        ({"action": "cancel", "ids": list(range(1, 300))}, "ids"),
    ],
)
def test_the_api_names_a_bad_field(api, runs, body, field):
    response = api.post("/api/runs/bulk/", body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"]
    assert Run.objects.filter(status=Status.CANCELLED).count() == 0


def test_the_api_needs_a_login(anon_client):
    assert anon_client.post("/api/runs/bulk/", {"action": "cancel", "ids": [1]}).status_code in (401, 403)


def test_the_list_page_cancels_and_archives_and_refuses_a_shared_run(alice_client, runs):
    page = alice_client.get("/runs/").content.decode()
    assert 'id="bulk-form"' in page and 'value="cancel"' in page and 'value="delete"' in page
    ids = f"{runs['queued'].pk},{runs['bobs'].pk}"
    back = "?status=&filter=step+%3E%3D+0"
    response = alice_client.post("/runs/bulk/", {"action": "cancel", "ids": ids, "back": back}, follow=True)
    text = response.content.decode()
    assert response.redirect_chain[-1][0] == "/runs/?filter=step+%3E%3D+0"  # the list as it was
    assert f"Cancelled #{runs['queued'].pk}." in text
    assert (
        f"Not cancelled: #{runs['bobs'].pk} &#x27;bobs&#x27; is bob&#x27;s, shared with you read-only" in text
    )
    assert _status(runs["queued"])[0] == Status.CANCELLED and _status(runs["bobs"])[0] == Status.QUEUED
    again = alice_client.post("/runs/bulk/", {"action": "cancel", "ids": [runs["done"].pk]}, follow=True)
    assert f"#{runs['done'].pk} already succeeded, not cancelled." in again.content.decode()
    response = alice_client.post("/runs/bulk/", {"action": "archive", "ids": [runs["done"].pk]}, follow=True)
    assert "Archived #" in response.content.decode() and _status(runs["done"])[2] is True
    bad = alice_client.post("/runs/bulk/", {"action": "cancel", "ids": "", "back": "//evil.example/"})
    assert bad.status_code == 302 and bad["Location"].startswith("/runs/")  # never off the site


def test_bulk_delete_asks_for_the_count_then_deletes_only_your_runs(alice_client, runs):
    ids = f"{runs['done'].pk},{runs['running'].pk},{runs['bobs'].pk}"
    confirm = alice_client.post("/runs/bulk/", {"action": "delete", "ids": ids})
    text = confirm.content.decode()
    assert (
        confirm.status_code == 200 and "Delete 2 runs?" in text and "1 of them is queued or running" in text
    )
    assert f"#{runs['bobs'].pk} &#x27;bobs&#x27; is bob&#x27;s" in text and Run.objects.count() == 4
    wrong = alice_client.post("/runs/bulk/", {"action": "delete", "ids": ids, "confirm": "3"})
    assert wrong.status_code == 400 and "Type the number of runs, 2, to confirm." in wrong.content.decode()
    assert Run.objects.count() == 4
    done = alice_client.post("/runs/bulk/", {"action": "delete", "ids": ids, "confirm": "2"}, follow=True)
    assert f"Deleted #{runs['done'].pk}, #{runs['running'].pk}." in done.content.decode()
    assert set(Run.objects.values_list("name", flat=True)) == {"a0", "bobs"}  # a0 was not ticked


def test_bulk_needs_a_post(alice_client):
    assert alice_client.get("/runs/bulk/").status_code == 405
