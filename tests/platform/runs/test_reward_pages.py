"""Rewards in the platform: reward names checked by the form and the API (never imported), the form's
list of rewards, each reward's score per sample in the inspector, and the dataset page's check of how
many ground truths a reward can judge."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from catalog.importer import SplitFile, import_dataset
from runs.models import Run, Sample

from dapo.loop.report import StepReport
from dapo.rewards import plugins
from tests.platform.support import sample

pytestmark = pytest.mark.django_db

PLUGINS = Path(__file__).resolve().parents[2] / "dapo" / "reward_plugins"
PARITY = "parity_plugin:LengthParity"


@pytest.fixture
def plugin_folder(monkeypatch):
    monkeypatch.setenv(plugins.FOLDERS_ENV, str(PLUGINS))
    sys.modules.pop("parity_plugin", None)


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"data.reward_fn": "os:system"}, "data.reward_fn", "not an allowed reward plugin"),
        ({"data.reward_fn": "bleu"}, "data.reward_fn", "unknown reward function"),
        ({"data.reward_fn": "http", "data.reward_url": "http://10.9"}, "data.reward_url", "not an allowed"),
        ({"data.reward_fn": "regex", "data.reward_pattern": "(["}, "data.reward_pattern", "regular expr"),
        (
            {"data.reward_fn": "math_dapo,boxed_exact", "data.reward_weights": "1"},
            "data.reward_weights",
            "one",
        ),
    ],
)
def test_the_api_refuses_bad_rewards_as_field_errors(
    api, paths, queued, plugin_folder, overrides, field, message
):
    body = {"name": "x", "preset": "tiny_cpu", "overrides": {**paths, **overrides}}
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 400
    assert message in response.json()["errors"][field]
    assert Run.objects.count() == 0 and queued == []
    assert "parity_plugin" not in sys.modules


def test_the_api_accepts_an_allowed_plugin_without_importing_it(api, paths, queued, plugin_folder):
    body = {
        "name": "x",
        "preset": "tiny_cpu",
        "overrides": {**paths, "data.reward_fn": f"math_dapo, {PARITY}"},
    }
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.json()
    assert Run.objects.get().config["data"]["reward_fn"] == f"math_dapo, {PARITY}"
    assert "parity_plugin" not in sys.modules  # the web process only read the file


def test_the_form_offers_every_reward_with_its_help_and_shows_errors_beside_the_field(
    alice_client, paths, queued, plugin_folder
):
    html = alice_client.get("/runs/new/").content.decode()
    assert '<datalist id="f-data-reward_fn-options">' in html
    for name in ("math_dapo", "math_verify", "multiple_choice", "json_match", "http", PARITY):
        assert f'<option value="{name}">' in html
    assert "<dd>multiple_choice: +1 if the option letter (A-E)" in html
    assert "<dd>Correct iff the response has an even number of characters" in html
    from runs.forms import presets_data

    values = {k: v for k, v in presets_data()["tiny_cpu"]["values"].items() if v is not False}
    form = {k: ("on" if v is True else v) for k, v in values.items()}
    form.update({**paths, "name": "x", "preset": "tiny_cpu", "data.reward_fn": "evil.module:run"})
    html = alice_client.post("/runs/new/", form).content.decode()
    assert 'id="f-data-reward_fn-error"' in html and "not an allowed reward plugin" in html
    assert Run.objects.count() == 0


def test_each_rewards_score_is_stored_and_shown_per_sample(alice_client, alice_run):
    alice_run.config["data"] = {**alice_run.config["data"], "reward_fn": "math_verify, regex"}
    alice_run.config["data"]["reward_weights"] = "1, 0.5"
    alice_run.save(update_fields=["config"])
    scores = {"math_verify": 1.0, "regex": -1.0}
    alice_run.record_step(StepReport(step=1, metrics={}, samples=[sample(1, 0, reward_scores=scores)]))
    s = Sample.objects.get(run=alice_run)
    assert s.reward_scores == scores
    html = alice_client.get(f"/runs/{alice_run.pk}/samples/{s.pk}/").content.decode()
    assert 'id="reward-breakdown"' in html
    # each reward's own score, its weight and the weighted part, in the config's order
    assert html.index("<code>math_verify</code>") < html.index("<code>regex</code>")
    assert '<td><code>regex</code></td><td class="num">-1.000</td><td class="muted">× 0.500</td>' in html
    assert '<td class="num">-0.500</td>' in html  # the weighted part
    data = alice_client.get(f"/runs/{alice_run.pk}/samples/data/", {"split": "train", "step": 1}).json()
    assert [row["reward_scores"] for g in data["groups"] for row in g["samples"]] == [scores]
    assert data["reward_weights"] == {"math_verify": 1.0, "regex": 0.5}


def test_a_single_rewards_sample_page_shows_its_score_as_the_one_part(alice_client, alice_run):
    alice_run.record_step(StepReport(step=1, metrics={}, samples=[sample(1, 0)]))
    s = Sample.objects.get(run=alice_run)
    assert s.reward_scores is None
    html = alice_client.get(f"/runs/{alice_run.pk}/samples/{s.pk}/").content.decode()
    reward = alice_run.config["data"]["reward_fn"]
    assert f'<td><code>{reward}</code></td><td class="num">1.000</td>' in html
    assert 'data-part="score"' not in html  # one reward: no weighted sum row


@pytest.fixture
def choices(tmp_path: Path):
    rows = [
        {"prompt": f"Question {i}?", "answer": a} for i, a in enumerate(["A", "(c)", "E", "42", "F", "b"])
    ]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return import_dataset("mc", [SplitFile("train", tmp_path / "mc.jsonl", "mc.jsonl")])


def test_the_dataset_page_counts_the_ground_truths_a_reward_can_judge(alice_client, choices, plugin_folder):
    html = alice_client.get(f"/datasets/{choices.pk}/", {"reward": "multiple_choice"}).content.decode()
    assert '<strong id="reward-judged">4 of 6</strong>' in html
    assert "<code>42</code>" in html and "<code>F</code>" in html  # the rows it cannot judge
    html = alice_client.get(f"/datasets/{choices.pk}/", {"reward": "json_match"}).content.decode()
    assert '<strong id="reward-judged">0 of 6</strong>' in html
    html = alice_client.get(f"/datasets/{choices.pk}/", {"reward": "math_verify"}).content.decode()
    assert '<strong id="reward-judged">6 of 6</strong>' in html  # letters parse as symbols, 42 as a number
    html = alice_client.get(f"/datasets/{choices.pk}/", {"reward": PARITY}).content.decode()
    assert "a plugin runs only where rewards are computed" in html and "parity_plugin" not in sys.modules
    html = alice_client.get(f"/datasets/{choices.pk}/", {"reward": "http"}).content.decode()
    assert "a reward service decides" in html
    html = alice_client.get(f"/datasets/{choices.pk}/", {"reward": "<script>"}).content.decode()
    assert "unknown reward" in html and "<code><script>" not in html
