"""The memory plan in the platform: a GPU run that cannot fit is refused at launch (API and form) naming
the biggest term and the setting to change; the new-run page's plan endpoint returns the estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runs.models import Run

from dapo.learner.memory_plan import estimate
from dapo.runconfig.presets import get_preset
from tests.dapo.test_memory_plan import QWEN7B

pytestmark = pytest.mark.django_db

GPU = {
    "model.dtype": "bfloat16",
    "model.device": "cuda",
    "data.max_prompt_length": 1024,
    "rollout.max_response_length": 3072,
    "rollout.max_batch_size": 16,
    "optim.micro_batch_size": 2,
}


@pytest.fixture
def qwen_paths(paths, tmp_path) -> dict[str, str]:
    """The test's data files and a Qwen2.5-7B-shaped config.json (no weights) inside the model root."""
    folder = tmp_path / "models" / "qwen7b"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(QWEN7B))
    return {**paths, "model.path": str(folder)}


def test_a_gpu_run_that_cannot_fit_is_refused_with_the_biggest_term_and_the_fix(api, qwen_paths, queued):
    body = {"name": "too big", "preset": "tiny_cpu", "overrides": {**qwen_paths, **GPU}}
    resp = api.post("/api/runs/", body, format="json")
    assert resp.status_code == 400, resp.content
    errors = resp.json()["errors"]
    config = get_preset("tiny_cpu").with_overrides({**qwen_paths, **GPU})
    message = estimate(config, QWEN7B).error()[1]
    assert errors == {"execution.learner_strategy": message}
    assert (
        "biggest: optimiser state 85.1 GiB: set execution.learner_strategy=fsdp or more learners" in message
    )
    assert Run.objects.count() == 0 and queued == []


def test_the_same_run_on_the_cpu_or_with_enough_memory_is_accepted(api, qwen_paths):
    for extra in ({"model.device": "cpu"}, {"execution.gpu_memory_gb": 400}):
        body = {"name": "fits", "preset": "tiny_cpu", "overrides": {**qwen_paths, **GPU, **extra}}
        assert api.post("/api/runs/", body, format="json").status_code == 201, extra


def test_a_model_folder_without_sizes_is_not_checked(api, paths):
    body = {
        "name": "fake model",
        "preset": "tiny_cpu",
        "overrides": {**paths, **GPU},
    }  # config.json: no sizes
    assert api.post("/api/runs/", body, format="json").status_code == 201


def _form(overrides: dict[str, str]) -> dict[str, str]:
    from runs.forms import presets_data

    values = {k: v for k, v in presets_data()["tiny_cpu"]["values"].items() if v is not False}
    values = {k: ("on" if v is True else v) for k, v in values.items()}
    return {**values, **overrides, "name": "my run", "preset": "tiny_cpu"}


def test_the_new_run_form_refuses_it_beside_the_setting_and_shows_the_plan_panel(
    alice_client, qwen_paths, queued
):
    html = alice_client.get("/runs/new/").content.decode()
    assert 'id="memory-plan"' in html and 'data-url="/runs/new/plan/"' in html and "js/run_plan.js" in html
    resp = alice_client.post("/runs/new/", _form({**qwen_paths, **GPU}))
    assert resp.status_code == 400
    assert "biggest: optimiser state 85.1 GiB" in resp.content.decode()
    assert Run.objects.count() == 0


def test_the_plan_endpoint_returns_the_estimate_for_the_forms_fields(
    alice_client, qwen_paths, paths, tmp_path
):
    resp = alice_client.post("/runs/new/plan/", _form({**qwen_paths, **GPU}))
    data = resp.json()
    config = get_preset("tiny_cpu").with_overrides({**qwen_paths, **GPU})
    assert {k: v for k, v in data.items() if k != "resources"} == {
        "plan": json.loads(json.dumps(estimate(config, QWEN7B).to_dict())),
        "reason": "",
        "checked": True,
    }
    assert data["resources"]["text"].startswith("needs 1 GPU, 1 CPU, ~")  # a local run on cuda
    assert data["plan"]["parameters"] == 7_615_616_512 and data["plan"]["fits"] is False

    demo_dir = tmp_path / "models" / "demo"  # the demo model's config.json, inside the test's model root
    demo_dir.mkdir()
    (demo_dir / "config.json").write_text(Path("assets/demo/model/config.json").read_text())
    demo = alice_client.post("/runs/new/plan/", _form({**paths, "model.path": str(demo_dir)})).json()
    assert demo["plan"]["parameters"] == 1_790_976 and demo["checked"] is False  # tiny_cpu: a CPU run


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"optim.lr": "fast"}, "fix the fields marked in the form"),
        ({"rollout.n": "0"}, "rollout.n: must be in [1, 4096]"),
        ({"model.path": "/etc"}, "model.path: must be inside one of the model roots"),
    ],
)
def test_the_plan_endpoint_says_why_there_is_no_plan(alice_client, paths, change, reason):
    data = alice_client.post("/runs/new/plan/", _form({**paths, **change})).json()
    assert data["plan"] is None and data["reason"].startswith(reason)


def test_the_plan_endpoint_needs_a_login_and_a_post(anon_client, alice_client):
    assert anon_client.post("/runs/new/plan/", {}).status_code == 302
    assert alice_client.get("/runs/new/plan/").status_code == 405


def test_no_plan_for_a_model_without_sizes(alice_client, paths):
    data = alice_client.post("/runs/new/plan/", _form(paths)).json()
    assert data["plan"] is None and "lacks hidden_size" in data["reason"]
    assert Path(paths["model.path"]).is_dir()


@pytest.fixture
def reward_model_paths(paths, tmp_path) -> dict[str, str]:
    """A classifier's config.json (a reward model: no language-model head) inside the model root."""
    folder = tmp_path / "models" / "reward"
    folder.mkdir(parents=True)
    config = {"model_type": "qwen2", "architectures": ["Qwen2ForSequenceClassification"], "num_labels": 1}
    (folder / "config.json").write_text(json.dumps(config))
    return {**paths, "model.path": str(folder)}


def test_a_model_the_engine_cannot_train_is_refused_at_launch_naming_its_family(
    api, alice_client, reward_model_paths, queued
):
    """On the CPU too: the family check does not depend on the device; API and form say the same."""
    resp = api.post(
        "/api/runs/", {"name": "rm", "preset": "tiny_cpu", "overrides": reward_model_paths}, format="json"
    )
    assert resp.status_code == 400, resp.content
    message = resp.json()["errors"]["model.path"]
    assert message.startswith("Qwen2/Qwen2.5 (Qwen2ForSequenceClassification) is not a causal language model")
    form = alice_client.post("/runs/new/", _form(reward_model_paths))
    assert form.status_code == 400 and "is not a causal language model" in form.content.decode()
    assert Run.objects.count() == 0 and queued == []
