from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from runs.models import Run, Sample, Status

from tests.platform.support import report, sample

pytestmark = pytest.mark.django_db


def test_create_from_a_preset_with_overrides(api, paths, queued, django_capture_on_commit_callbacks):
    body = {"name": "api run", "preset": "tiny_cpu", "overrides": {**paths, "optim.total_steps": 5}}
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["status"], data["total_steps"], data["preset"]) == ("queued", 5, "tiny_cpu")
    assert queued == [("launch_run", data["id"])]


def test_create_from_a_full_config(api, paths, queued):
    from dapo.runconfig.presets import get_preset

    config = get_preset("grpo_clip_higher").with_overrides(paths).to_dict()
    response = api.post("/api/runs/", {"name": "full", "config": config}, format="json")
    assert response.status_code == 201
    assert Run.objects.get().config == config


T = {"name": "x", "preset": "tiny_cpu"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"name": "x", "preset": "tiny_cpu", "overrides": {"algorithm.clip_high": 0.1}},
            "algorithm.clip_high",
        ),
        ({"name": "x", "preset": "tiny_cpu", "overrides": {"optim.lr": "fast"}}, "optim.lr"),
        ({"name": "x", "preset": "tiny_cpu", "overrides": {"optim.nope": 1}}, "optim.nope"),
        ({"name": "x", "preset": "no_such_preset"}, "preset"),
        ({"name": "x"}, "preset"),
        ({"name": "x", "config": {"rollout": {"n": 0}}}, "rollout.n"),
        ({"name": "x", "config": [1, 2]}, "config"),
        ({"name": "", "preset": "tiny_cpu"}, "name"),
        ({"name": "x", "preset": "tiny_cpu", "overrides": [1]}, "overrides"),
        ({"name": "x", "preset": "tiny_cpu", "base_model": "ghost"}, "base_model"),
        ({"name": "x", "preset": "tiny_cpu", "overrides": {"model.path": "../../etc"}}, "model.path"),
        (
            {"name": "x", "preset": "tiny_cpu", "overrides": {"optim.total_steps": 10**40}},
            "optim.total_steps",
        ),
        ({"name": "bad\x00name", "preset": "tiny_cpu"}, "name"),
        (
            {"name": "x", "preset": "tiny_cpu", "overrides": {"data.reward_fn": "math\x00dapo"}},
            "data.reward_fn",
        ),
    ],
)
def test_invalid_input_is_400_with_field_errors_and_nothing_queued(api, paths, queued, body, field):
    if "overrides" in body and isinstance(body["overrides"], dict):
        body["overrides"] = {**paths, **body["overrides"]}
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert Run.objects.count() == 0 and queued == []


def test_a_body_that_is_not_an_object_is_a_clear_400(api):
    response = api.post("/api/runs/", "[1, 2]", content_type="application/json")
    assert response.status_code == 400 and "name" in response.json()["errors"]
    response = api.post("/api/runs/", "{not json", content_type="application/json")
    assert response.status_code == 400


def test_list_detail_and_cancel(api, alice_run):
    assert [r["id"] for r in api.get("/api/runs/").json()["results"]] == [alice_run.pk]
    assert api.get(f"/api/runs/{alice_run.pk}/").json()["config"]["optim"]["total_steps"] == 10
    response = api.post(f"/api/runs/{alice_run.pk}/cancel/")
    assert response.json()["outcome"] == "cancelled"
    assert Run.objects.get(pk=alice_run.pk).status == Status.CANCELLED
    assert api.get("/api/runs/?status=bogus").status_code == 400


def test_another_users_run_is_404_everywhere(bob_api, alice_run):
    for url in ("", "metrics/", "samples/"):
        assert bob_api.get(f"/api/runs/{alice_run.pk}/{url}").status_code == 404
    assert bob_api.post(f"/api/runs/{alice_run.pk}/cancel/").status_code == 404
    assert bob_api.get("/api/runs/").json()["results"] == []
    assert Run.objects.get(pk=alice_run.pk).status == Status.QUEUED


def test_no_credentials_no_access(alice_run):
    client = APIClient()
    assert client.get("/api/runs/").status_code in (401, 403)
    assert client.get(f"/api/runs/{alice_run.pk}/").status_code in (401, 403)


def test_a_revoked_token_stops_working(api, alice):
    Token.objects.filter(user=alice).delete()
    assert api.get("/api/runs/").status_code == 401


def test_metrics_are_downsampled_evenly_keeping_the_last_point(api, alice_run):
    for step in range(1, 101):
        alice_run.record_step(report(step, n_samples=0))
    url = f"/api/runs/{alice_run.pk}/metrics/?names=critic/score/mean&max_points=10"
    series = api.get(url).json()["metrics"]
    assert list(series) == ["critic/score/mean"]
    steps = series["critic/score/mean"]["steps"]
    assert steps == [1, 12, 23, 34, 45, 56, 67, 78, 89, 100]  # exactly 10, evenly by step, both ends
    for asked in (3, 5, 7, 99):
        url = f"/api/runs/{alice_run.pk}/metrics/?names=actor/entropy&max_points={asked}"
        thinned = api.get(url).json()["metrics"]["actor/entropy"]["steps"]
        assert len(thinned) == asked and thinned[0] == 1 and thinned[-1] == 100
    five = api.get(f"/api/runs/{alice_run.pk}/metrics/?names=actor/entropy&max_points=5").json()["metrics"]
    assert five["actor/entropy"]["steps"] == [1, 26, 51, 76, 100]  # ranks 0, 25, 50, 75, 99: ceil(k * 99 / 4)
    one = api.get(f"/api/runs/{alice_run.pk}/metrics/?names=actor/entropy&max_points=1").json()["metrics"]
    assert one["actor/entropy"]["steps"] == [100]
    everything = api.get(f"/api/runs/{alice_run.pk}/metrics/?max_points=1000").json()["metrics"]
    assert everything["actor/entropy"]["steps"] == list(range(1, 101))
    window = api.get(f"/api/runs/{alice_run.pk}/metrics/?min_step=50&max_step=52").json()["metrics"]
    assert window["actor/entropy"]["steps"] == [50, 51, 52]
    assert api.get(f"/api/runs/{alice_run.pk}/metrics/?max_points=abc").status_code == 400
    assert api.get(f"/api/runs/{alice_run.pk}/metrics/?max_points=0").status_code == 400


def test_samples_are_filtered_and_paginated(api, alice_run):
    step = report(1, n_samples=0)
    step.samples = [sample(1, i, acc=i % 2 == 0, response=f"answer {i}") for i in range(60)]
    alice_run.record_step(step)
    alice_run.record_step(report(2, n_samples=3))
    page = api.get(f"/api/runs/{alice_run.pk}/samples/?step=1").json()
    assert page["count"] == 60 and len(page["results"]) == 50 and page["next"]
    assert api.get(f"/api/runs/{alice_run.pk}/samples/?step=1&acc=true").json()["count"] == 30
    assert api.get(f"/api/runs/{alice_run.pk}/samples/?q=answer 7").json()["count"] == 1
    assert api.get(f"/api/runs/{alice_run.pk}/samples/?split=val").json()["count"] == 0
    assert api.get(f"/api/runs/{alice_run.pk}/samples/?acc=maybe").status_code == 400
    assert api.get(f"/api/runs/{alice_run.pk}/samples/?split=test").status_code == 400


def test_the_openapi_schema_is_served(api):
    pytest.importorskip("drf_spectacular")
    response = api.get("/api/schema/")
    assert response.status_code == 200 and b"/api/runs/{run_id}/metrics/" in response.content


def test_one_sample_in_full_by_step_split_and_index(api, alice_run):
    long = "x" * 5000 + "\nAnswer: 2"
    step = report(1, n_samples=0)
    step.samples = [sample(1, i, response=long if i == 3 else "short") for i in range(5)]
    alice_run.record_step(step)
    (row,) = api.get(f"/api/runs/{alice_run.pk}/samples/?step=1&split=train&index=3").json()["results"]
    assert row["response"] == long and row["sample_index"] == 3
    assert Sample.objects.get(run=alice_run, sample_index=3).summary()["text_cut"] is True


def test_nul_characters_in_query_parameters_are_harmless(api, alice_run):
    assert api.get("/api/runs/?q=de%00mo").status_code == 200
    assert api.get(f"/api/runs/{alice_run.pk}/samples/?q=%00").status_code == 200
    assert api.get(f"/api/runs/{alice_run.pk}/metrics/?names=a%00b").status_code == 200
