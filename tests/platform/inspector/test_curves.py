"""The inspector's curves (inspector.curves): a click lands on the nearest step with samples; the run's key
curves beside the samples."""

from __future__ import annotations

import pytest
from inspector.curves import key_curves, nearest_step

from dapo.loop.report import StepReport
from tests.platform.inspector.conftest import embedded

pytestmark = pytest.mark.django_db

# ---- from a curve to its samples ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "expected"), [(2, 2), (1, 2), (3, 2), (5, 4), (6, 4), (7, 8), (100, 8), (0, 2)]
)  # a tie (3 between 2 and 4, 6 between 4 and 8) goes to the earlier step
def test_nearest_step_picks_the_closest_step_with_samples(step, expected):
    assert nearest_step([2, 4, 8], step) == expected


def test_nearest_step_of_no_steps_is_none():
    assert nearest_step([], 3) is None


def test_a_click_on_a_step_without_samples_lands_on_the_nearest_one(alice_client, run):
    data = alice_client.get(f"/runs/{run.pk}/samples/data/", {"step": 7, "near": 1}).json()
    assert (data["step"], data["snapped_from"]) == (8, 7)
    assert {s["step"] for g in data["groups"] for s in g["samples"]} == {8}
    data = alice_client.get(f"/runs/{run.pk}/samples/data/", {"step": 4, "near": 1}).json()
    assert (data["step"], data["snapped_from"]) == (4, None)
    data = alice_client.get(f"/runs/{run.pk}/samples/data/", {"split": "val", "step": 8, "near": 1}).json()
    assert (data["split"], data["step"], data["snapped_from"]) == ("val", 4, 8)
    page = alice_client.get(f"/runs/{run.pk}/samples/", {"step": 5, "near": 1})
    assert page.status_code == 200 and embedded(page.content.decode(), "inspector-data")["step"] == 4


def test_without_near_a_step_without_samples_stays_a_404_and_a_bad_near_is_a_400(alice_client, run):
    assert alice_client.get(f"/runs/{run.pk}/samples/data/", {"step": 7}).status_code == 404
    response = alice_client.get(f"/runs/{run.pk}/samples/data/", {"step": 7, "near": "yes"})
    assert response.status_code == 400 and "near" in response.json()["error"]


def test_the_inspector_embeds_the_runs_key_curves_train_and_validation(alice_client, run):
    curves = embedded(alice_client.get(f"/runs/{run.pk}/samples/").content.decode(), "inspector-curves-data")
    assert curves == key_curves(run)
    by_title = {c["title"]: c for c in curves}
    assert list(by_title) == ["Mean reward", "Accuracy", "Response length"]
    acc = {s["split"]: s for s in by_title["Accuracy"]["series"]}
    assert acc["train"]["steps"] == list(range(1, 9)) and acc["train"]["values"][-1] == pytest.approx(0.4)
    assert acc["val"] == {"split": "val", "metric": "val/acc/mean@4", "steps": [4, 8], "values": [0.5, 1.0]}
    assert [s["split"] for s in by_title["Response length"]["series"]] == ["train"]  # val length never logged


def test_the_validation_curve_follows_the_runs_validation_n(alice_run):
    alice_run.config = {**alice_run.config, "validation": {"n_samples": 16}}
    alice_run.save(update_fields=["config"])
    alice_run.record_step(
        StepReport(step=1, metrics={"val/acc/mean@16": 0.25, "val/acc/mean@4": 0.9}, samples=[])
    )
    acc = next(c for c in key_curves(alice_run) if c["title"] == "Accuracy")
    assert acc["metrics"]["val"] == "val/acc/mean@16" and acc["series"][0]["values"] == [0.25]
