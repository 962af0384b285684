"""The inspector's curves (inspector.curves): a click lands on the nearest step with samples; the run's key
curves beside the samples."""

from __future__ import annotations

import json
import re

import pytest
from inspector.curves import key_curves, nearest_step
from runs.models import Run

from dapo.report import StepReport
from tests.platform.support import sample

pytestmark = pytest.mark.django_db

# one group of four: (sample_index, reward, length, response, tokens or None)
GROUP = [
    (
        0,
        1.0,
        9,
        "Let x = 2. So 2 + 2 = 4. Answer: 4",
        ["Let", " x", " =", " 2", ".", " So", " 2", " +", " 2"],
    ),
    (1, -1.0, 12, "Let x = 3. So 3 + 2 = 5. Answer: 5", ["Let", " x", " =", " 3", ".", " So", " 3"]),
    (2, 1.0, 5, "Let x = 2. So answer: 4", None),
    (3, -1.25, 20, "We guess. Answer: 7", None),
]


def _record(run: Run, step: int, *, val: bool = False, metrics: dict | None = None) -> None:
    samples = [
        sample(
            step,
            i,
            group=0,
            problem_index=7,
            reward=r,
            score=r,
            acc=r > 0,
            length=n,
            response=text,
            advantage=r / 2,
            tokens=tokens,
            token_logprobs=[-0.5] * len(tokens) if tokens else None,
        )
        for i, r, n, text, tokens in GROUP
    ] + [sample(step, 4, group=1, problem_index=8)]
    val_samples = [sample(step, i, split="val", group=0) for i in range(2)] if val else []
    run.record_step(StepReport(step=step, metrics=metrics or {}, samples=samples, val_samples=val_samples))


@pytest.fixture
def run(alice_run: Run) -> Run:
    """Train samples at steps 2, 4 and 8, validation at 4; curves at every step 1-8."""
    for step in range(1, 9):
        metrics = {
            "critic/score/mean": step / 10,
            "train/acc/mean": step / 20,
            "response_length/mean": 10.0 + step,
        }
        if step % 4 == 0:
            metrics |= {"val/acc/mean@4": step / 8, "val/reward/mean@4": step / 9}
        if step in (2, 4, 8):
            _record(alice_run, step, val=step == 4, metrics=metrics)
        else:
            alice_run.record_step(StepReport(step=step, metrics=metrics, samples=[]))
    return alice_run


def _embedded(html: str, element_id: str):
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert match, element_id
    return json.loads(match.group(1))


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
    assert page.status_code == 200 and _embedded(page.content.decode(), "inspector-data")["step"] == 4


def test_without_near_a_step_without_samples_stays_a_404_and_a_bad_near_is_a_400(alice_client, run):
    assert alice_client.get(f"/runs/{run.pk}/samples/data/", {"step": 7}).status_code == 404
    response = alice_client.get(f"/runs/{run.pk}/samples/data/", {"step": 7, "near": "yes"})
    assert response.status_code == 400 and "near" in response.json()["error"]


def test_the_inspector_embeds_the_runs_key_curves_train_and_validation(alice_client, run):
    curves = _embedded(alice_client.get(f"/runs/{run.pk}/samples/").content.decode(), "inspector-curves-data")
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
