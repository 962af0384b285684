"""A run's records in verl's and TRL's formats (runs.foreign_exports): the verl zip reads back through the
verl importer to the same samples; the TRL log history is a list of {step, metric} with TRL's names."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from runs.external_import import VerlFiles, import_verl
from runs.models import Sample

from dapo.loop.report import StepReport
from tests.platform.support import sample

pytestmark = pytest.mark.django_db


def step(n: int, metrics: dict, samples: list) -> StepReport:
    return StepReport(step=n, metrics=metrics, samples=samples, wall_time=1.7e9 + n, elapsed_s=float(n))


@pytest.fixture
def recorded(alice_run):
    first = {"actor/lr": 1e-6, "critic/score/mean": 0.5, "reward/math_dapo/mean": 0.25}
    alice_run.record_step(
        step(
            1,
            first,
            [
                sample(1, i, acc=i % 2 == 1, score=2.0 * (i % 2) - 1, reward=2.0 * (i % 2) - 1)
                for i in range(4)
            ],
        )
    )
    alice_run.record_step(step(2, {"actor/lr": 2e-6, "val/acc/mean@4": 0.75}, [sample(2, 0)]))
    return alice_run


def test_the_verl_zip_is_verls_own_layout_and_reads_back(api, recorded, alice):
    response = api.get(f"/api/runs/{recorded.pk}/verl.zip")
    assert response.status_code == 200 and response["Content-Disposition"].endswith('-verl.zip"')
    z = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert sorted(z.namelist()) == ["config.json", "metrics.jsonl", "rollout/1.jsonl", "rollout/2.jsonl"]
    first = json.loads(z.read("metrics.jsonl").decode().splitlines()[0])
    assert first == {
        "step": 1,
        "data": {"actor/lr": 1e-6, "critic/score/mean": 0.5, "reward/math_dapo/mean": 0.25},
    }
    line = json.loads(z.read("rollout/1.jsonl").decode().splitlines()[0])
    assert set(line) >= {"input", "output", "gts", "score", "step", "acc", "pred", "overlong_reward"}
    files = VerlFiles(
        metrics=[("metrics.jsonl", z.read("metrics.jsonl").decode())],
        rollout=[(n, z.read(n).decode()) for n in ("rollout/1.jsonl", "rollout/2.jsonl")],
        config=json.loads(z.read("config.json")),
    )
    back = import_verl(alice, "round trip", files)
    fields = ("step", "sample_index", "prompt", "response", "ground_truth", "pred", "score", "acc", "reward")
    ours = list(Sample.objects.filter(run=recorded).order_by("step", "sample_index").values_list(*fields))
    theirs = list(Sample.objects.filter(run=back).order_by("step", "sample_index").values_list(*fields))
    assert theirs == ours and back.config == recorded.config


def test_the_trl_log_history_names_metrics_as_trl_does(api, recorded, bob_api):
    history = api.get(f"/api/runs/{recorded.pk}/trl-log-history.json").json()
    assert history == [
        {"step": 1, "learning_rate": 1e-6, "critic/score/mean": 0.5, "rewards/math_dapo/mean": 0.25},
        {"step": 2, "learning_rate": 2e-6, "val/acc/mean@4": 0.75},
    ]
    assert bob_api.get(f"/api/runs/{recorded.pk}/trl-log-history.json").status_code == 404


def test_the_run_page_links_both_downloads(alice_client, recorded):
    page = alice_client.get(f"/runs/{recorded.pk}/").content.decode()
    assert 'id="trl-history"' in page and 'id="verl-zip"' in page
