"""dapo.integrations.trl: a real TRL GRPOTrainer run (3 steps, a tiny model built from a config, CPU) with
the PlatformCallback, against a live server (daphne on the test database); and the sender's behaviour
when the server is away (the training never waits on it)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from dapo.client import Client
from dapo.integrations import sender as sender_module
from dapo.integrations.sender import Sender
from tests.dapo.integrations.trl_env import REPO, python_with_trl
from tests.platform.fixtures import alice, isolated_settings  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]


def token(user: Any) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=user).key


@pytest.mark.slow
def test_a_trl_grpo_run_streams_its_config_metrics_and_samples(server, alice, tmp_path):  # noqa: F811
    from runs.models import MetricPoint, Run, Sample

    python, why = python_with_trl()  # built once (minutes), then cached under var/trl-venv
    if python is None:
        pytest.skip(why)
    env = {**os.environ, "PYTHONPATH": f"{REPO}", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    job = subprocess.run(
        [python, str(Path(__file__).with_name("trl_job.py")), server, token(alice), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    assert job.returncode == 0, job.stderr[-4000:]
    result = json.loads(job.stdout.strip().splitlines()[-1])
    run = Run.objects.get(pk=result["run_id"])
    assert (run.kind, run.source, run.status, run.total_steps) == ("external", "trl", "succeeded", 3)
    assert run.config["num_generations"] == 4 and run.config["loss_type"] == "dapo"  # TRL's own config
    names = set(MetricPoint.objects.filter(run=run).values_list("name", flat=True))
    # mapped where they mean ours, TRL's own names kept where nothing of ours matches
    assert {"actor/lr", "critic/rewards/mean", "reward/exact/mean", "reward/brevity/mean"} <= names
    assert {"response_length/mean", "loss", "frac_reward_zero_std"} <= names
    assert "learning_rate" not in names
    steps = sorted(set(MetricPoint.objects.filter(run=run, name="actor/lr").values_list("step", flat=True)))
    assert steps == [1, 2, 3]
    samples = list(Sample.objects.filter(run=run).order_by("step", "sample_index"))
    assert sorted({s.step for s in samples}) == [1, 2, 3] and len(samples) == 12  # 4 completions a step
    for s in samples:
        assert set(s.reward_scores) == {"exact", "brevity"}
        assert s.reward == pytest.approx(s.reward_scores["exact"] + 0.5 * s.reward_scores["brevity"])
        assert s.prompt.startswith("Q:") and s.acc is None and s.advantage is not None
    reward = MetricPoint.objects.get(run=run, step=3, name="critic/rewards/mean").value
    assert reward == pytest.approx(sum(s.reward for s in samples if s.step == 3) / 4, abs=1e-5)


def test_a_lost_server_never_stops_the_sender_and_it_catches_up(server, alice, monkeypatch, caplog):  # noqa: F811
    from runs.models import MetricPoint, Run

    monkeypatch.setattr(sender_module, "FIRST_DELAY_S", 0.05)
    client = Client(server, token=token(alice), timeout=5)
    real_open, down = client._opener.open, {"calls": 0}

    def away(*args: Any, **kwargs: Any) -> Any:  # the first five requests find no server
        down["calls"] += 1
        if down["calls"] <= 5:
            raise urllib.error.URLError("connection refused")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(client._opener, "open", away)
    sender = Sender(lambda: client, poll_s=0.02)
    with caplog.at_level(logging.INFO, logger="dapo.integrations"):
        sender.start("away and back", "verl", {"trainer": {"total_epochs": 1}}, total_steps=2)
        for step in (1, 2):  # returns at once while the server is away
            sender.metrics(step, {"val-core/math/acc/mean@4": step / 4, "actor/pg_loss": float("nan")})
        assert sender.finish(timeout_s=30)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "training goes on" in warnings[0].getMessage()  # said once
    assert any("answers again" in r.getMessage() for r in caplog.records)
    run = Run.objects.get(pk=sender.run_id)
    assert run.status == "succeeded"
    points = dict(MetricPoint.objects.filter(run=run).values_list("name", "step").order_by("step"))
    assert points == {"val/math/acc/mean@4": 2, "actor/pg_loss": 2}  # verl's val-core/ is our val/


def test_a_training_that_dies_before_train_end_leaves_its_run_failed(server, alice, tmp_path):  # noqa: F811
    """TRL calls no callback when training raises: the callback marks the run failed as the process exits."""
    code = (
        "import sys, types\n"
        "from dapo.integrations.trl import PlatformCallback\n"
        "cb = PlatformCallback(url=sys.argv[1], token=sys.argv[2], name='dies')\n"
        "args = types.SimpleNamespace(output_dir=sys.argv[3], num_generations=4, log_completions=False,\n"
        "                             to_dict=lambda: {'learning_rate': 1e-6})\n"
        "state = types.SimpleNamespace(is_world_process_zero=True, max_steps=5, global_step=1)\n"
        "cb.on_train_begin(args, state, None)\n"
        "cb.on_log(args, state, None, logs={'loss': 1.0})\n"
        "raise RuntimeError('out of memory')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = subprocess.run(
        [sys.executable, "-c", code, server, token(alice), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert job.returncode == 1 and "out of memory" in job.stderr
    from runs.models import MetricPoint, Run

    run = Run.objects.get(name="dies")
    assert run.status == "failed" and "before TRL's train end" in run.error
    assert MetricPoint.objects.get(run=run, step=1, name="loss").value == 1.0  # what was buffered was sent
