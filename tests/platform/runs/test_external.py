"""External runs (runs.external): created, fed metrics and samples, finished through the API; bad input
writes nothing; cancel, resume, export, fork are refused; the pages show what was not recorded."""

from __future__ import annotations

import pytest
from runs.models import MetricPoint, Run, Sample

pytestmark = pytest.mark.django_db

TRL_CONFIG = {"learning_rate": 1e-6, "num_generations": 4, "beta": 0.0, "loss_type": "dapo"}


def create(api, **extra):
    body = {"name": "trl grpo", "source": "trl", "config": TRL_CONFIG, "total_steps": 3, **extra}
    response = api.post("/api/runs/external/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_an_external_run_takes_metrics_and_samples_and_finishes(api):
    run = create(api)
    assert (run["status"], run["kind"], run["source"], run["config"]) == (
        "running",
        "external",
        "trl",
        TRL_CONFIG,
    )
    points = [
        {"step": 1, "metrics": {"loss": 0.5, "learning_rate": 1e-6, "rewards/acc_fn/mean": 0.25, "kl": None}},
        {"step": 2, "metrics": {"loss": 0.4, "completions/mean_length": 17.5, "reward": float("nan")}},
    ]
    from dapo.client import _json_safe

    answer = api.post(
        f"/api/runs/{run['id']}/external/metrics/", {"points": _json_safe(points)}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    got = {(p.step, p.name): p.value for p in MetricPoint.objects.filter(run_id=run["id"])}
    assert got == {
        (1, "loss"): 0.5,
        (1, "actor/lr"): 1e-6,  # TRL's names mapped onto ours where they mean the same
        (1, "reward/acc_fn/mean"): 0.25,
        (1, "kl"): None,
        (2, "loss"): 0.4,
        (2, "response_length/mean"): 17.5,
        (2, "critic/rewards/mean"): None,
    }
    samples = [
        {"step": 2, "prompt": "1+1?", "completion": "2", "rewards": {"acc_fn": 1.0, "fmt": 0.5}, "acc": True,
         "advantage": 0.7, "length": 1},
        {"step": 2, "prompt": "1+1?", "completion": "3", "rewards": {"acc_fn": 0.0, "fmt": None}},
    ]  # fmt: skip
    answer = api.post(f"/api/runs/{run['id']}/external/samples/", {"samples": samples}, format="json")
    assert answer.status_code == 200, answer.json()
    rows = list(Sample.objects.filter(run_id=run["id"]).order_by("sample_index"))
    assert [(s.sample_index, s.reward, s.acc, s.advantage, s.length) for s in rows] == [
        (0, 1.5, True, 0.7, 1),
        (1, 0.0, None, None, None),  # not judged, not recorded: null, never a made-up value
    ]
    assert rows[0].reward_scores == {"acc_fn": 1.0, "fmt": 0.5}
    assert rows[0].problem_index == rows[1].problem_index  # the same prompt is the same problem
    # sent again (a client's retry): the same rows, overwritten, never doubled
    api.post(f"/api/runs/{run['id']}/external/samples/", {"samples": samples}, format="json")
    assert Sample.objects.filter(run_id=run["id"]).count() == 2
    stored = Run.objects.get(pk=run["id"])
    assert (stored.step, stored.latest_metrics["loss"]) == (2, 0.4)
    answer = api.post(f"/api/runs/{run['id']}/external/finish/", {"status": "succeeded"}, format="json")
    assert answer.json()["status"] == "succeeded"
    late = api.post(f"/api/runs/{run['id']}/external/metrics/", {"points": points[:1]}, format="json")
    assert late.status_code == 409 and "succeeded" in late.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "source": "wandb"}, "source"),
        ({"name": "", "source": "trl"}, "name"),
        ({"name": "x", "source": "trl", "config": [1]}, "config"),
        ({"name": "x", "source": "trl", "total_steps": -1}, "total_steps"),
        ({"name": "x", "source": "trl", "preset": "tiny_cpu"}, "preset"),
    ],
)
def test_a_bad_create_body_is_refused_and_saves_nothing(api, body, field):
    response = api.post("/api/runs/external/", body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"]
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("metrics", {"points": [{"step": 1, "metrics": {"a": 1}}, {"step": "2", "metrics": {}}]},
         "points[1].step"),
        ("metrics", {"points": [{"step": 1, "metrics": {"a": 1}}, {"step": 2, "metrics": {"b": "x"}}]},
         "points[1].metrics.b"),
        ("metrics", {"points": []}, "points"),
        ("samples", {"samples": [{"step": 1, "prompt": "p", "completion": "c", "reward": 1},
                                 {"step": 1, "prompt": "p", "completion": "c"}]}, "samples[1].reward"),
        ("samples", {"samples": [{"step": 1, "prompt": "p", "completion": "c", "reward": 1, "acc": "yes"}]},
         "samples[0].acc"),
        ("samples", {"samples": [{"step": 1, "prompt": "p", "completion": 3, "reward": 1}]},
         "samples[0].completion"),
        ("samples", {"samples": [{"step": 1, "prompt": "p", "completion": "c", "reward": 1, "tokens": []}]},
         "samples[0].tokens"),
        ("samples", {"samples": [{"step": 1, "prompt": "p", "completion": "c", "reward": 1, "truncated": 1}]},
         "samples[0].truncated"),
    ],
)  # fmt: skip
def test_a_bad_entry_refuses_the_whole_request(api, path, body, field):
    run = create(api)
    response = api.post(f"/api/runs/{run['id']}/external/{path}/", body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"], response.json()
    assert not MetricPoint.objects.exists() and not Sample.objects.exists()
    assert Run.objects.get().step == 0


def test_only_the_owner_writes_and_native_runs_take_no_external_records(api, bob_api, alice_run):
    run = create(api)
    body = {"points": [{"step": 1, "metrics": {"loss": 1.0}}]}
    assert bob_api.post(f"/api/runs/{run['id']}/external/metrics/", body, format="json").status_code == 404
    native = api.post(f"/api/runs/{alice_run.pk}/external/metrics/", body, format="json")
    assert native.status_code == 409 and "worker" in native.json()["detail"]
    assert not MetricPoint.objects.exists()


@pytest.mark.parametrize("action", ["cancel", "resume", "export"])
def test_cancel_resume_and_export_are_refused_with_the_reason(api, action):
    run = create(api)
    response = api.post(f"/api/runs/{run['id']}/{action}/", {}, format="json")
    assert response.status_code == 409
    assert "trained by TRL outside this platform" in response.json()["detail"]
    assert Run.objects.get().status == "running" and not Run.objects.get().cancel_requested


def test_the_pages_mark_what_trl_did_not_record(api, alice_client):
    run = create(api)
    samples = [{"step": 1, "prompt": "Q", "completion": "A", "rewards": {"acc_fn": 1.0}}]
    api.post(f"/api/runs/{run['id']}/external/samples/", {"samples": samples}, format="json")
    api.post(f"/api/runs/{run['id']}/external/metrics/", {"points": [{"step": 1, "metrics": {"loss": 1}}]},
             format="json")  # fmt: skip
    page = alice_client.get(f"/runs/{run['id']}/").content.decode()
    assert "not recorded by TRL" in page
    for control in ('id="cancel-btn"', 'id="fork-btn"', 'id="export-btn"', 'id="resume-btn"', "?from="):
        assert control not in page
    assert alice_client.get(f"/runs/new/?from={run['id']}").status_code == 409
    listing = api.get("/api/runs/").json()["results"]
    assert listing[0]["source"] == "trl"
    sample = Sample.objects.get()
    page = alice_client.get(f"/runs/{run['id']}/samples/{sample.pk}/").content.decode()
    assert "not recorded by TRL" in page
    assert alice_client.get(f"/runs/{run['id']}/samples/").status_code == 200
    group = alice_client.get(f"/runs/{run['id']}/samples/step/1/group/0/")
    assert group.status_code == 200 and "–" in group.content.decode()  # correctness: not judged
    assert alice_client.get(f"/runs/{run['id']}/problems/{sample.problem_index}/").status_code == 200
    for fmt in ("csv", "jsonl", "parquet"):  # the inspector's exports hold the nulls as nulls
        export = alice_client.get(f"/runs/{run['id']}/samples/export.{fmt}?step=1")
        assert export.status_code == 200, (fmt, export.content[:300])
        assert b"".join(export.streaming_content)


def test_the_comparison_shows_the_external_config_beside_ours(api, alice_client, alice_run):
    run = create(api)
    points = {"points": [{"step": 1, "metrics": {"grad_norm": 2}}]}
    api.post(f"/api/runs/{run['id']}/external/metrics/", points, format="json")
    page = alice_client.get(f"/runs/compare/?ids={alice_run.pk},{run['id']}")
    assert page.status_code == 200
    text = page.content.decode()
    assert "trl: learning_rate" in text and "optim.lr" in text
    query = f"ids={alice_run.pk},{run['id']}&metrics=actor/grad_norm&names=1"
    data = alice_client.get(f"/runs/compare/data/?{query}").json()
    assert "actor/grad_norm" in data["names"]  # TRL's grad_norm on the same chart as ours
