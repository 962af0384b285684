"""A run that the cluster last seen can never hold is refused at launch (API and form), naming what is
missing against the setting that asks for it, with nothing written; what a run asks for is shown in the
plan panel and the API's answer; with no capacity recorded yet, it launches and the panel says so."""

from __future__ import annotations

import pytest
from runs.models import ClusterCapacity, Run

from dapo.cluster.resources import Capacity, Node

pytestmark = pytest.mark.django_db

TWO_ONE_GPU_NODES = Capacity("ray", (Node(8, 1), Node(8, 1)))
RAY_TWO_GPUS_AN_ACTOR = {
    "execution.backend": "ray",
    "execution.gpus_per_worker": 2,
    "execution.cpus_per_worker": 2,
}


def _form(overrides: dict[str, object]) -> dict[str, object]:
    from runs.forms import presets_data

    values = {k: v for k, v in presets_data()["tiny_cpu"]["values"].items() if v is not False}
    values = {k: ("on" if v is True else v) for k, v in values.items()}
    return {**values, **overrides, "name": "my run", "preset": "tiny_cpu"}


def test_the_api_refuses_a_run_the_cluster_can_never_hold_and_writes_nothing(api, paths, queued):
    ClusterCapacity.record(TWO_ONE_GPU_NODES, seen_by="w:1")
    body = {"name": "too big", "preset": "tiny_cpu", "overrides": {**paths, **RAY_TWO_GPUS_AN_ACTOR}}
    resp = api.post("/api/runs/", body, format="json")
    assert resp.status_code == 400, resp.content
    message = resp.json()["errors"]["execution.gpus_per_worker"]
    assert message.startswith("a bundle needs 2 GPUs on one node; the largest node has 1 (2 nodes: 2 GPUs,")
    assert "lower it or the number of workers" in message
    assert list(resp.json()["errors"]) == ["execution.gpus_per_worker"]
    assert Run.objects.count() == 0 and queued == []


def test_a_local_run_is_held_to_the_machine_a_worker_last_saw(api, paths, queued):
    ClusterCapacity.record(Capacity("local", (Node(2, 0),)))
    body = {"name": "greedy", "preset": "tiny_cpu", "overrides": {**paths, "execution.torch_threads": 4}}
    errors = api.post("/api/runs/", body, format="json").json()["errors"]
    assert errors["execution.torch_threads"].startswith("needs 4 CPUs; this machine has 2 (this machine:")
    ok = api.post("/api/runs/", {**body, "overrides": paths}, format="json")
    assert ok.status_code == 201
    resources = ok.json()["resources"]
    assert resources["text"] == "needs 1 CPU (in the worker's process)" and resources["shortfall"] == []
    assert resources["capacity"] == "this machine: 0 GPUs, 2 CPUs" and "It fits." in resources["note"]
    assert Run.objects.count() == 1


def test_with_no_capacity_recorded_a_run_launches_and_says_it_was_not_checked(api, paths, queued):
    body = {"name": "unchecked", "preset": "tiny_cpu", "overrides": {**paths, **RAY_TWO_GPUS_AN_ACTOR}}
    resp = api.post("/api/runs/", body, format="json")
    assert resp.status_code == 201, resp.content
    resources = resp.json()["resources"]
    assert resources["text"] == "needs 2 GPUs, 2 CPUs (1 Ray actor)" and resources["capacity"] is None
    assert resources["note"].startswith("No worker has recorded the Ray cluster yet")
    assert resources["bundles"] == [{"role": "learner", "CPU": 2.0, "GPU": 2.0}]


def test_the_form_refuses_it_beside_the_setting_and_accepts_what_fits(alice_client, paths, queued):
    ClusterCapacity.record(TWO_ONE_GPU_NODES)
    resp = alice_client.post("/runs/new/", _form({**paths, **RAY_TWO_GPUS_AN_ACTOR}))
    assert resp.status_code == 400
    assert "a bundle needs 2 GPUs on one node; the largest node has 1" in resp.content.decode()
    assert Run.objects.count() == 0 and queued == []
    fits = alice_client.post(
        "/runs/new/", _form({**paths, **RAY_TWO_GPUS_AN_ACTOR, "execution.gpus_per_worker": 1})
    )
    assert fits.status_code == 302 and Run.objects.count() == 1


def test_the_plan_panel_shows_the_request_and_the_shortfall(alice_client, paths):
    form = _form({**paths, **RAY_TWO_GPUS_AN_ACTOR, "execution.num_learner_workers": 2})
    unchecked = alice_client.post("/runs/new/plan/", form).json()["resources"]
    assert unchecked["text"] == "needs 4 GPUs, 4 CPUs (2 Ray actors)" and "it launches" in unchecked["note"]
    ClusterCapacity.record(TWO_ONE_GPU_NODES)
    ClusterCapacity.record(Capacity("ray", (Node(4, 1),)))  # the newest of a kind replaces the last
    checked = alice_client.post("/runs/new/plan/", form).json()["resources"]
    assert checked["capacity"] == "1 node: 1 GPU, 4 CPUs"
    assert checked["shortfall"] == ["needs 4 GPUs; the cluster has 1"]
    assert "Launch refused: needs 4 GPUs; the cluster has 1." in checked["note"]
    assert ClusterCapacity.objects.count() == 1
