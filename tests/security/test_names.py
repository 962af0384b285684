"""Names and tags other users read (run names and tags, sweeps, saved views and comparisons, datasets and
models) refuse invisible formatting characters: a right-to-left override makes ``report<U+202E>fdp.exe``
read as "reportexe.pdf", and a zero-width space makes a second "demo-arithmetic" that looks like the
first. Every form and API endpoint refuses them with the same field error, and stores nothing."""

from __future__ import annotations

import json
import unicodedata

import pytest
from catalog.models import BaseModel, Dataset
from runs.models import Run, SavedComparison, SavedView
from runs.names import name_problem

from tests.platform.fixtures import make_user

pytestmark = pytest.mark.django_db

INVISIBLE = [
    "\u202a",  # LEFT-TO-RIGHT EMBEDDING ... U+202E RIGHT-TO-LEFT OVERRIDE
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",  # LEFT-TO-RIGHT ISOLATE ... U+2069 POP DIRECTIONAL ISOLATE
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",  # LEFT-TO-RIGHT MARK, RIGHT-TO-LEFT MARK, ARABIC LETTER MARK
    "\u200f",
    "\u061c",
    "\u200b",  # ZERO WIDTH SPACE, WORD JOINER, the byte order mark, SOFT HYPHEN: other format characters
    "\u2060",
    "\ufeff",
    "\u00ad",
    "\U000e0041",  # TAG LATIN CAPITAL LETTER A
    "\u2028",  # LINE SEPARATOR
]
SAMPLE = ["\u202e", "\u2067", "\u200f", "\u061c", "\u200b"]
"""The characters each endpoint is tried with (the helper itself is tried with all of INVISIBLE)."""


def _spoof(char: str) -> str:
    return f"report{char}fdp.exe"


def _says_why(message: str, char: str) -> bool:
    return "invisible formatting characters" in message and f"U+{ord(char):04X}" in message


@pytest.mark.parametrize("char", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_every_invisible_format_character_is_refused_and_named(char):
    problem = name_problem(_spoof(char))
    assert problem is not None and _says_why(problem, char)
    assert unicodedata.name(char) in problem and "at character 7" in problem


@pytest.mark.parametrize("name", ["lr-sweep ü", "学習率 0.1", "تجربة أولى", "🚀 run (v2)", "a.b/c_d"])
def test_ordinary_names_in_any_script_pass(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("char", SAMPLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_run_cannot_be_created_with_such_a_name(api, paths, queued, char):
    body = {"name": _spoof(char), "preset": "tiny_cpu", "overrides": paths}
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 400 and _says_why(response.json()["errors"]["name"], char)
    assert not Run.objects.exists() and queued == []


@pytest.mark.parametrize("char", SAMPLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_run_cannot_be_renamed_or_tagged_so(api, alice_client, alice_run, char):
    for body in ({"name": _spoof(char)}, {"tags": ["baseline", f"lr{char}"]}):
        response = api.patch(f"/api/runs/{alice_run.pk}/", body, format="json")
        field = next(iter(body))
        assert response.status_code == 400 and _says_why(response.json()["errors"][field], char)
    page = alice_client.post(f"/runs/{alice_run.pk}/edit/", {"name": "ok", "tags": f"lr{char}"}, follow=True)
    assert _says_why(page.content.decode(), char)  # the form's message
    alice_run.refresh_from_db()
    assert (alice_run.name, alice_run.tags) == ("alice-demo", [])


@pytest.mark.parametrize("char", SAMPLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_sweep_cannot_have_such_a_name(api, paths, queued, char):
    body = {
        "name": _spoof(char),
        "preset": "tiny_cpu",
        "overrides": paths,
        "sweep": {"mode": "grid", "fields": {"seed": [0, 1]}},
    }
    response = api.post("/api/sweeps/", body, format="json")
    assert response.status_code == 400 and _says_why(response.json()["errors"]["name"], char)
    assert not Run.objects.exists()


def test_a_swept_text_value_never_puts_one_in_a_run_name(api, paths, queued):
    body = {
        "name": "rewards",
        "preset": "tiny_cpu",
        "overrides": paths,
        "sweep": {"mode": "grid", "fields": {"data.reward_pattern": ["a\u202eb", "c"]}},
        "dry_run": True,
    }
    names = [r["name"] for r in api.post("/api/sweeps/", body, format="json").json()["runs"]]
    assert names == ["rewards · reward_pattern='a\\u202eb'", "rewards · reward_pattern=c"]


@pytest.mark.parametrize("char", SAMPLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_saved_view_cannot_have_such_a_name(api, char):
    response = api.post("/api/views/", {"name": _spoof(char), "filter": ""}, format="json")
    assert response.status_code == 400 and _says_why(response.json()["errors"]["name"], char)
    assert not SavedView.objects.exists()


@pytest.mark.parametrize("char", SAMPLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_comparison_cannot_be_saved_under_such_a_name(alice_client, alice_run, char):
    body = {"name": _spoof(char), "ids": str(alice_run.pk)}
    page = alice_client.post("/runs/compare/save/", body, follow=True)
    assert _says_why(page.content.decode(), char) and not SavedComparison.objects.exists()


@pytest.fixture
def data_file(settings, tmp_path):
    root = tmp_path / "data-root"
    root.mkdir()
    (root / "train.jsonl").write_text(json.dumps({"prompt": "Compute 1+1.", "answer": "2"}) + "\n")
    settings.DAPO_DATASET_ROOTS = [root]
    return root / "train.jsonl"


@pytest.mark.parametrize("char", SAMPLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_dataset_cannot_be_registered_under_such_a_name(alice_client, data_file, char):
    response = alice_client.post("/datasets/register/", {"name": _spoof(char), "train_path": str(data_file)})
    assert response.status_code == 400 and _says_why(response.content.decode(), char)
    assert not Dataset.objects.exists()


@pytest.mark.parametrize("char", SAMPLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_model_cannot_be_registered_under_such_a_name(api, tmp_path, char):
    response = api.post("/api/models/", {"name": _spoof(char), "path": str(tmp_path)}, format="json")
    assert response.status_code == 400 and _says_why(response.json()["errors"]["name"], char)
    assert not BaseModel.objects.exists()


def test_the_admin_refuses_such_dataset_and_model_names(django_user_model, data_file, client):
    client.force_login(make_user(django_user_model, "root", "x", is_superuser=True, is_staff=True))
    name = _spoof("\u202e")
    form = {"name": name, "path": str(data_file), "val_path": "", "description": "", "_save": "1"}
    response = client.post("/admin/catalog/dataset/add/", form)
    assert response.status_code == 200 and _says_why(response.content.decode(), "\u202e")
    response = client.post("/admin/catalog/basemodel/add/", {"name": name, "path": "assets", "_save": "1"})
    assert response.status_code == 200 and _says_why(response.content.decode(), "\u202e")
    assert not Dataset.objects.exists() and not BaseModel.objects.exists()
