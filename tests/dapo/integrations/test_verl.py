"""verl's files (fixtures written by verl's own writers, tests/dapo/integrations/verl_writers.py) imported
with ``manage.py import_run``, and followed with ``python -m dapo.integrations.verl follow`` while the
files grow, against a live server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from dapo.client import Client
from dapo.integrations.verl_files import VerlFormatError, metric_points
from tests.dapo.integrations import verl_writers as verl
from tests.platform.fixtures import alice, isolated_settings  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[3]
BAD_SCORE = '{"input": "a", "output": "b", "score": "high"}\n'


def test_console_lines_and_file_records_read_alike():
    data = verl.step_metrics(3) | {"note": "text is skipped"}
    console = ["(TaskRunner pid=1) some other output", verl.concat_dict_to_str(data, step=3)]
    file_line = '{"step":3,"data":{"actor/entropy":0.6,"critic/score/mean":0.25,"note":"x"}}'
    assert metric_points("console", console)[0]["metrics"] == {
        k: float(v) for k, v in verl.step_metrics(3).items()
    }
    assert metric_points("file", [file_line]) == [
        {"step": 3, "metrics": {"actor/entropy": 0.6, "critic/score/mean": 0.25}}
    ]
    with pytest.raises(VerlFormatError, match="line 2"):
        metric_points("file", [file_line, '{"step": "3"}'])


@pytest.mark.django_db
def test_import_run_imports_a_finished_verl_run(alice, tmp_path):  # noqa: F811
    from runs.models import MetricPoint, Run, Sample

    root = verl.write_run(tmp_path / "dapo-tiny")
    call_command("import_run", str(root), owner="alice")
    run = Run.objects.get()
    assert (run.kind, run.source, run.status, run.name, run.step, run.total_steps) == (
        "external", "verl", "succeeded", "dapo-tiny", 2, 2
    )  # fmt: skip
    assert run.config == verl.CONFIG
    val = dict(
        MetricPoint.objects.filter(run=run, name="val/math_dapo/acc/mean@4").values_list("step", "value")
    )
    assert val == {0: 0.25, 2: 0.5}  # verl's val-core/ is our val/
    assert MetricPoint.objects.get(run=run, step=2, name="actor/entropy").value == pytest.approx(0.7)
    train = list(Sample.objects.filter(run=run, split="train", step=1).order_by("sample_index"))
    batch = verl.step_batch(1)
    assert len(train) == 8 and [s.group for s in train] == [0] * 4 + [1] * 4
    assert [s.acc for s in train] == batch["extras"]["acc"]
    assert [s.reward for s in train] == [
        a + b for a, b in zip(batch["scores"], batch["extras"]["overlong_reward"], strict=True)
    ]
    assert [s.overlong_penalty for s in train[:4]] == [0.0, 0.0, 0.0, -0.25]
    assert train[0].pred == batch["extras"]["pred"][0] and train[0].ground_truth == "5"
    assert train[0].length is None and train[0].advantage is None  # not in verl's dumps
    assert Sample.objects.filter(run=run, split="val").values_list("step", flat=True).distinct().count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda root: (root / "rollout" / "2.jsonl").write_text('{"input": "x"}\n'), "2.jsonl, line 1"),
        (lambda root: (root / "metrics.jsonl").write_text("{not json\n"), "metrics.jsonl, line 1"),
        (lambda root: (root / "rollout" / "1.jsonl").write_text(BAD_SCORE), "score must be a number"),
    ],
)  # fmt: skip
def test_a_malformed_file_imports_nothing_and_says_where(alice, tmp_path, damage, said):  # noqa: F811
    from runs.models import MetricPoint, Run

    root = verl.write_run(tmp_path / "run")
    damage(root)
    with pytest.raises(CommandError, match=said):
        call_command("import_run", str(root), owner="alice")
    assert not Run.objects.exists() and not MetricPoint.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_follow_streams_a_running_verl_job_as_its_files_grow(server, alice, tmp_path):  # noqa: F811
    from rest_framework.authtoken.models import Token
    from runs.models import MetricPoint, Run, Sample

    root = tmp_path / "job"
    root.mkdir()
    (root / "config.json").write_text(__import__("json").dumps(verl.CONFIG))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    token = Token.objects.create(user=alice).key
    command = [sys.executable, "-m", "dapo.integrations.verl", "follow", str(root), "--url", server,
               "--token", token, "--poll-s", "0.1", "--idle-exit-s", "8"]  # fmt: skip
    follower = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_for(check: Any, what: str) -> None:
        deadline = time.monotonic() + 20
        while not check():
            assert follower.poll() is None, follower.stdout.read() if follower.stdout else ""
            assert time.monotonic() < deadline, f"waited 20 s for {what}"
            time.sleep(0.1)

    try:
        with open(root / "metrics.jsonl", "wb", buffering=0) as fp:
            verl.write_step(root, 0, fp, validate=True)
            wait_for(lambda: Run.objects.filter(source="verl").exists(), "the run")
            run = Run.objects.get()
            wait_for(lambda: Sample.objects.filter(run=run, split="val").count() == 8, "step 0's validation")
            assert not MetricPoint.objects.filter(run=run, step=1).exists()
            fp.write(b'{"step":1,"data":{"actor/entropy":')  # a line being written is not read yet
            time.sleep(0.5)
            fp.write(b"0.8}}\n")
            wait_for(lambda: MetricPoint.objects.filter(run=run, step=1).exists(), "the finished line")
            verl.write_step(root, 1, fp, validate=False)
            wait_for(lambda: Sample.objects.filter(run=run, split="train", step=1).count() == 8, "step 1")
            run.refresh_from_db()
            assert run.status == "running" and run.step == 1
        assert follower.wait(timeout=40) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
    run.refresh_from_db()
    assert run.status == "succeeded"  # idle for --idle-exit-s: the follower marked it finished
    assert MetricPoint.objects.get(run=run, step=1, name="actor/entropy").value == pytest.approx(0.8)
    # and back out, in the formats verl and TRL read
    client = Client(server, token=token)
    history = client.trl_log_history(run.pk)
    assert history[0]["step"] == 0 and history[1]["actor/entropy"] == pytest.approx(0.8)
    with zipfile.ZipFile(client.download_verl(run.pk, tmp_path / "back.zip")) as z:
        assert {"rollout/1.jsonl", "validation/0.jsonl", "metrics.jsonl", "config.json"} <= set(z.namelist())
        assert z.read("rollout/1.jsonl").decode().count("\n") == 8
