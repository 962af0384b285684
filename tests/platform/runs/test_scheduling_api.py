"""Staff's priority and pre-emption (API, page forms, admin), where a queued run shows it waits (its API
answer, its page), and the cluster page and its JSON."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient
from runs.models import ClusterCapacity, Run, Status

from dapo.cluster.resources import Capacity, Node
from tests.platform.fixtures import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(django_user_model: Any) -> Any:
    return make_user(django_user_model, "root", "root-pass-123", is_staff=True, is_superuser=True)


@pytest.fixture
def staff_api(root: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(root)
    return client


def running(run: Run) -> Run:
    Run.objects.filter(pk=run.pk).update(status=Status.RUNNING, dispatched_at=timezone.now(), lease_owner="w")
    run.refresh_from_db()
    return run


def test_priority_wants_staff_a_whole_number_in_range_and_an_existing_run(api, staff_api, alice_run):
    url = f"/api/runs/{alice_run.pk}/priority/"
    assert APIClient().post(url, {"priority": 5}, format="json").status_code == 401
    refused = api.post(url, {"priority": 5}, format="json")  # alice owns it, but is not staff
    assert refused.status_code == 403 and refused.json()["detail"].startswith("Only staff may change")
    for bad in ({"priority": 101}, {"priority": -101}, {"priority": "5"}, {"priority": True}, {}, [1]):
        resp = staff_api.post(url, bad, format="json")
        assert resp.status_code == 400, bad
        assert "priority must be" in resp.json()["detail"]
    assert staff_api.post(url, "{not json", content_type="application/json").status_code == 400
    assert staff_api.post("/api/runs/999999/priority/", {"priority": 1}, format="json").status_code == 404
    assert Run.objects.get(pk=alice_run.pk).priority == 0  # nothing written by any of those
    ok = staff_api.post(url, {"priority": 7}, format="json")
    assert (
        ok.status_code == 200
        and ok.json()["priority"] == 7
        and Run.objects.get(pk=alice_run.pk).priority == 7
    )


def test_a_priority_change_runs_a_scheduler_pass(
    staff_api, alice_run, queued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        staff_api.post(f"/api/runs/{alice_run.pk}/priority/", {"priority": 3}, format="json")
    assert queued == [("launch_run", alice_run.pk)]


def test_preempt_wants_staff_and_a_running_training_run(api, staff_api, alice_run):
    url = f"/api/runs/{alice_run.pk}/preempt/"
    assert APIClient().post(url).status_code == 401
    refused = api.post(url)
    assert refused.status_code == 403 and refused.json()["detail"].startswith("Only staff may pre-empt")
    queued = staff_api.post(url)
    assert queued.status_code == 409 and "is queued: it holds nothing to give back" in queued.json()["detail"]
    running(alice_run)
    ok = staff_api.post(url)
    assert ok.status_code == 200 and ok.json()["outcome"] == "pre-empting"
    run = Run.objects.get(pk=alice_run.pk)
    assert run.preempt_requested and run.preempted_by == "root"
    Run.objects.filter(pk=run.pk).update(status=Status.SUCCEEDED)
    ended = staff_api.post(url)
    assert ended.status_code == 409 and "is succeeded: only a running run" in ended.json()["detail"]


def test_a_queued_runs_api_answer_and_page_say_where_it_waits(api, alice_client, alice_run, settings):
    settings.DAPO_SCHEDULER_SLOTS = 1
    other = Run.objects.create(owner=alice_run.owner, name="holds", config={}, status=Status.RUNNING)
    queue = api.get(f"/api/runs/{alice_run.pk}/").json()["queue"]
    assert queue["position"] == 1 and queue["reason"] == "waiting for a worker slot (1 of 1 busy)"
    assert queue["pool"] == "local" and queue["needs"].startswith("needs 1 CPU")
    assert api.get(f"/api/runs/{other.pk}/").json()["queue"] is None  # running: not in the queue
    html = alice_client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert 'id="run-queue"' in html and "waiting for a worker slot (1 of 1 busy)" in html  # in run-data
    assert 'id="priority-form"' not in html and 'id="preempt-form"' not in html  # alice is not staff


def test_staff_get_the_priority_form_and_the_preempt_button_on_a_running_run(client, root, alice_run):
    client.force_login(root)
    Run.objects.get(pk=alice_run.pk).shared_users.add(root)  # staff see others' runs only when shared
    running(alice_run)
    html = client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert (
        'id="priority-form"' in html
        and 'id="preempt-form" ' in html
        and 'id="preempt-form" hidden' not in html
    )
    resp = client.post(f"/runs/{alice_run.pk}/priority/", {"priority": "oops"}, follow=True)
    assert "Priority not changed: priority must be a whole number" in resp.content.decode()
    client.post(f"/runs/{alice_run.pk}/priority/", {"priority": "-4"})
    assert Run.objects.get(pk=alice_run.pk).priority == -4
    client.post(f"/runs/{alice_run.pk}/preempt/")
    assert Run.objects.get(pk=alice_run.pk).preempt_requested


def test_the_page_forms_refuse_non_staff_with_a_reason(alice_client, alice_run):
    resp = alice_client.post(f"/runs/{alice_run.pk}/preempt/")
    assert resp.status_code == 403 and b"Only staff may pre-empt a run" in resp.content
    resp = alice_client.post(f"/runs/{alice_run.pk}/priority/", {"priority": "1"})
    assert resp.status_code == 403 and Run.objects.get(pk=alice_run.pk).priority == 0


def test_the_admin_preempts_running_runs_and_says_why_not_for_the_others(client, root, alice_run, paths):
    from runs.models import Run as RunModel

    client.force_login(root)
    queued_one = RunModel.objects.create(owner=alice_run.owner, name="waits", config={})
    running(alice_run)
    resp = client.post(
        "/admin/runs/run/",
        {"action": "preempt", "_selected_action": [alice_run.pk, queued_one.pk]},
        follow=True,
    )
    html = resp.content.decode()
    assert f"Pre-empting #{alice_run.pk} at the next step boundary" in html
    assert f"Not pre-empted: run #{queued_one.pk} is queued" in html
    assert RunModel.objects.get(pk=alice_run.pk).preempt_requested


def test_the_cluster_page_and_its_json(alice_client, bob_api, alice_run, anon_client, settings):
    settings.DAPO_SCHEDULER_SLOTS = 1
    ClusterCapacity.record(Capacity("ray", (Node(8, 2),)), seen_by="w:1")
    state = {
        "address": "10.0.0.1:6379",
        "nodes": [
            {
                "node_id": "n1",
                "host": "gpu-a",
                "alive": True,
                "total": {"CPU": 8.0, "GPU": 2.0},
                "available": {"CPU": 6.0, "GPU": 1.0},
            },
            {
                "node_id": "n2",
                "host": "gpu-b",
                "alive": False,
                "total": {"CPU": 8.0, "GPU": 2.0},
                "available": {},
            },
        ],
        "groups": [
            {
                "name": "g1",
                "run_id": alice_run.pk,
                "role": "learner",
                "state": "CREATED",
                "bundles": [{"GPU": 1.0}],
                "node_ids": ["n1"],
            }
        ],
    }
    ClusterCapacity.record_state("ray", state, seen_by="w:1")
    running(alice_run)
    Run.objects.filter(pk=alice_run.pk).update(
        request={"pool": "ray", "cpus": 2, "gpus": 1, "text": "needs 1 GPU"}
    )
    waiting = Run.objects.create(
        owner=alice_run.owner, name="alice-waits", config={}, request={"pool": "ray", "cpus": 1, "gpus": 2}
    )
    page = alice_client.get("/cluster/")
    assert page.status_code == 200 and 'href="/cluster/"' in page.content.decode()
    assert anon_client.get("/cluster/").status_code == 302
    data = bob_api.get("/api/cluster/").json()
    assert data["slots"] == {"total": 1, "busy": 1}
    ray = next(p for p in data["pools"] if p["name"] == "ray")
    assert ray["free"] == {"cpus": 6.0, "gpus": 1.0} and ray["address"] == "10.0.0.1:6379"
    assert [(n["host"], n["alive"]) for n in ray["nodes"]] == [("gpu-a", True), ("gpu-b", False)]
    [holder] = data["running"]
    assert holder["id"] == alice_run.pk and holder["holds"] == {"cpus": 2.0, "gpus": 1.0}
    assert holder["groups"][0]["role"] == "learner" and "name" not in holder  # bob may not read it
    [entry] = data["queue"]
    assert entry["id"] == waiting.pk and entry["reason"] == "needs 2 GPUs; 1 free" and "name" not in entry
    assert APIClient().get("/api/cluster/").status_code == 401


def test_the_api_reference_shows_the_scheduling_endpoints(api, alice_client):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/cluster/", "/api/runs/{run_id}/priority/", "/api/runs/{run_id}/preempt/"):
        assert path in schema, path
    assert "/api/cluster/" in alice_client.get("/api/docs/").content.decode()
