"""Racing requests on one run: a run deleted between the moment a request loads it and the moment it
writes (a PATCH, a share, a cancel, a resume, an export, a second DELETE) answers 404 with a message that
says it was deleted, on the API and on the page, never a 500 ("Save with update_fields did not affect any
rows", DoesNotExist, a foreign key to a missing row); and real threads firing PATCH, DELETE and cancel at
one run against the live database get 200, 204 or 404 only."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from rest_framework.authtoken.models import Token
from runs import access
from runs.models import ModelExport, Run

from dapo.runconfig.presets import get_preset

pytestmark = pytest.mark.django_db(transaction=True)  # threads use their own connections: real commits

GONE = "deleted"


@pytest.fixture
def deleted_after_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run a request loads is deleted right after (as by another tab's DELETE): the request then
    works on a run that is no longer there."""
    find = access.find_run

    def load_then_delete(user: Any, run_id: Any) -> Run | None:
        run = find(user, run_id)
        if run is not None:
            Run.objects.filter(pk=run.pk).delete()
        return run

    monkeypatch.setattr(access, "find_run", load_then_delete)


@pytest.fixture
def resumable(alice_run: Run, tmp_path: Path) -> Run:
    """alice's run, cancelled, with a checkpoint on disk: every action applies to it."""
    folder = tmp_path / "ckpt" / "step_000002"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"weights")
    alice_run.record_checkpoint(2, str(folder))
    alice_run.request_cancel()
    return alice_run


API_ACTIONS = [
    ("patch", "", {"name": "renamed"}),
    ("patch", "", {"shared_users": ["bob"], "tags": ["x"]}),
    ("delete", "", None),
    ("post", "cancel/", None),
    ("post", "resume/", None),
    ("post", "export/", {"step": 2}),
]


@pytest.mark.parametrize(("method", "suffix", "body"), API_ACTIONS)
def test_an_api_action_on_a_run_deleted_meanwhile_is_a_404(
    api, resumable, team, deleted_after_load, method, suffix, body
):
    response = getattr(api, method)(f"/api/runs/{resumable.pk}/{suffix}", body, format="json")
    assert response.status_code == 404, (response.status_code, response.content[:300])
    assert GONE in response.json()["detail"]
    assert not Run.objects.exists() and not ModelExport.objects.exists()


PAGE_ACTIONS = [
    ("edit/", {"name": "renamed", "tags": "x", "notes": ""}),
    ("archive/", {"archived": "true"}),
    ("share/", {"users": "bob"}),
    ("delete/", {"confirm": "alice-demo"}),
    ("cancel/", {}),
    ("resume/", {}),
    ("export/", {"step": "2"}),
]


@pytest.mark.parametrize(("suffix", "form"), PAGE_ACTIONS)
def test_a_page_action_on_a_run_deleted_meanwhile_is_a_404(
    alice_client, resumable, team, deleted_after_load, suffix, form
):
    response = alice_client.post(f"/runs/{resumable.pk}/{suffix}", form)
    assert response.status_code == 404 and GONE in response.content.decode()
    assert not Run.objects.exists() and not ModelExport.objects.exists()


def _token_client(user: Any) -> Client:
    """A client that answers a view's exception as the server would (a 500), instead of raising it."""
    key = Token.objects.get_or_create(user=user)[0].key
    return Client(HTTP_AUTHORIZATION=f"Token {key}", raise_request_exception=False)


def _fire(requests: list[tuple[str, str, Any]], client: Client) -> list[int]:
    """Send the requests from one thread each, released together; their status codes."""
    start, statuses = threading.Barrier(len(requests)), [0] * len(requests)

    def send(i: int, method: str, path: str, body: Any) -> None:
        try:
            start.wait()
            data = json.dumps(body) if body is not None else ""
            statuses[i] = getattr(client, method)(path, data, content_type="application/json").status_code
        finally:
            connections.close_all()  # this thread's connection, so the test database can be dropped

    threads = [threading.Thread(target=send, args=(i, *r)) for i, r in enumerate(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return statuses


def test_concurrent_patch_delete_and_cancel_never_answer_500(alice, paths, queued):
    config = get_preset("tiny_cpu").with_overrides({**paths, "optim.total_steps": 10})
    client = _token_client(alice)
    seen: set[int] = set()
    for attempt in range(8):
        run = Run.create_queued(owner=alice, name=f"race {attempt}", config=config)
        url = f"/api/runs/{run.pk}/"
        statuses = _fire(
            [
                ("patch", url, {"name": "renamed", "tags": ["a"], "notes": "n", "archived": True}),
                ("delete", url, None),
                ("post", f"{url}cancel/", None),
                ("patch", url, {"archived": False}),
                ("delete", url, None),
            ],
            client,
        )
        seen |= set(statuses)
        assert set(statuses) <= {200, 204, 404}, statuses
        assert statuses.count(204) == 1, statuses  # one DELETE wins, the other finds the run gone
        assert not Run.objects.filter(pk=run.pk).exists()
    assert 404 in seen


def test_a_run_deleted_while_its_controller_writes_a_step_is_deleted_whole(alice_run, monkeypatch):
    """A step write (the lease fence's update of the run, then its points) opens right after the delete's
    cancel and is still open when the delete comes: the delete waits for it and takes its points too. It
    used to delete the points it saw, then wait on the run's row, and fail at commit on the points the step
    had added meanwhile (a foreign key still referenced)."""
    from django.db import connection
    from django.db.models import F
    from runs.manage import delete_run
    from runs.models import MetricPoint

    if connection.vendor != "postgresql":
        pytest.skip("row locks and deferred foreign keys as on PostgreSQL")
    pk = alice_run.pk
    MetricPoint.objects.create(run_id=pk, name="critic/score/mean", step=1, value=0.5)
    written, go, errors = threading.Event(), threading.Event(), []

    def step_write() -> None:
        from django.db import transaction

        try:
            with transaction.atomic():
                Run.objects.filter(pk=pk).update(step=F("step") + 1)  # the fence: locks the run's row
                MetricPoint.objects.create(run_id=pk, name="critic/score/mean", step=2, value=0.6)
                written.set()
                go.wait(30)
        finally:
            connections.close_all()

    writer = threading.Thread(target=step_write)
    cancel = Run.request_cancel

    def cancel_then_a_step_begins(run: Run) -> str:
        outcome = cancel(run)
        writer.start()
        assert written.wait(30)
        return outcome

    monkeypatch.setattr(Run, "request_cancel", cancel_then_a_step_begins)

    def delete() -> None:
        try:
            delete_run(Run.objects.get(pk=pk))
        except Exception as e:  # noqa: BLE001 - the assertion below shows it
            errors.append(e)
        finally:
            connections.close_all()

    deleter = threading.Thread(target=delete)
    deleter.start()
    assert written.wait(30)
    deleter.join(1.0)  # the delete reaches the run's row, held by the step's transaction
    go.set()
    writer.join(30)
    deleter.join(30)
    assert errors == []
    assert not Run.objects.filter(pk=pk).exists() and not MetricPoint.objects.filter(run_id=pk).exists()
