"""The browser's import of a finished verl run (runs.external_views): files written by verl's own writers
(tests/dapo/integrations/verl_writers.py) become an external run; a malformed one imports nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from runs.models import MetricPoint, Run, Sample

from tests.dapo.integrations import verl_writers as verl

pytestmark = pytest.mark.django_db


def uploads(root: Path, folder: str) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(p.name, p.read_bytes()) for p in sorted((root / folder).glob("*.jsonl"))]


def test_an_upload_of_verl_files_becomes_an_external_run(alice_client, tmp_path):
    root = verl.write_run(tmp_path / "run")
    body = {
        "name": "verl dapo",
        "metrics": SimpleUploadedFile("tiny.jsonl", (root / "metrics.jsonl").read_bytes()),
        "rollout": uploads(root, "rollout"),
        "validation": uploads(root, "validation"),
        "config": SimpleUploadedFile("config.json", (root / "config.json").read_bytes()),
    }
    response = alice_client.post("/runs/import/", body)
    run = Run.objects.get()
    assert response.status_code == 302 and response.url == f"/runs/{run.pk}/"
    assert (run.source, run.status, run.step, run.config) == ("verl", "succeeded", 2, verl.CONFIG)
    assert Sample.objects.filter(run=run).count() == 2 * 8 + 2 * 8
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "not recorded by verl" in page and "trained by verl" in page
    assert 'id="import-verl"' in alice_client.get("/runs/").content.decode()
    one = Sample.objects.filter(run=run, split="train", step=1).first()
    for url in (
        f"/runs/{run.pk}/samples/?step=1",
        f"/runs/{run.pk}/samples/{one.pk}/",
        f"/runs/{run.pk}/samples/step/1/group/0/",
        f"/runs/{run.pk}/problems/{one.problem_index}/",
        f"/runs/compare/?ids={run.pk}",
    ):  # the inspector and the comparison read verl's config without tripping on it
        assert alice_client.get(url).status_code == 200, url
    sample_page = alice_client.get(f"/runs/{run.pk}/samples/{one.pk}/").content.decode()
    assert "not recorded by verl" in sample_page  # its tokens, length and advantage
    assert ("✓ correct" if one.acc else "✗ wrong") in sample_page  # verl's acc, as math_dapo judged it


def test_a_malformed_upload_says_which_file_and_line_and_imports_nothing(alice_client, tmp_path):
    root = verl.write_run(tmp_path / "run")
    broken = SimpleUploadedFile("2.jsonl", (root / "rollout" / "2.jsonl").read_bytes() + b'{"input": 1}\n')
    body = {
        "name": "x",
        "rollout": [*uploads(root, "rollout")[:1], broken],
        "config": SimpleUploadedFile("c.json", b"["),
    }
    response = alice_client.post("/runs/import/", body)
    assert response.status_code == 400
    text = response.content.decode()
    assert "Nothing was imported" in text and "c.json: not valid JSON" in text
    broken.seek(0)  # the first request read the files
    body |= {
        "config": SimpleUploadedFile("c.json", b"{}"),
        "rollout": [*uploads(root, "rollout")[:1], broken],
    }
    text = alice_client.post("/runs/import/", body).content.decode()
    assert "2.jsonl, line 9" in text
    assert not Run.objects.exists() and not MetricPoint.objects.exists() and not Sample.objects.exists()


def test_an_upload_without_files_or_name_is_refused(alice_client):
    assert alice_client.post("/runs/import/", {"name": "x"}).status_code == 400
    body = {"name": "", "metrics": SimpleUploadedFile("m.jsonl", b'{"step":1,"data":{"a":1}}\n')}
    assert "name:" in alice_client.post("/runs/import/", body).content.decode()
    assert not Run.objects.exists()
