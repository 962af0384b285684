"""Helpers shared by the platform, worker and browser tests: environment, demo files, reports."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dapo.loop.report import SampleRecord, StepReport

TEST_REDIS_DB = int(os.environ.get("DAPO_TEST_REDIS_DB", "13"))
REPO = Path(__file__).resolve().parents[2]


TEST_QUEUE = f"training-test-{uuid.uuid4().hex[:12]}"
"""This test session's Celery queue and channel-layer prefix: test runs on one machine (several checkouts,
several sessions) share the Redis server, and must never take each other's messages."""


def use_test_environment() -> None:
    """Django settings for tests, a dedicated Redis database, and a queue of this session's own."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Debug mode, which a site runs without: the daphne of the browser tests serves plain HTTP (cookies
    # must not be secure-only), browser-test tools evaluate strings (the CSP only reports) and nothing is
    # collected (plain static files). pytest-django turns DEBUG itself off inside the test process.
    os.environ.setdefault("DJANGO_DEBUG", "true")
    # One key for the test process and the daphne and Celery processes it starts: a session made here
    # must read there. Not a secret: no site uses it.
    os.environ.setdefault("DJANGO_SECRET_KEY", "dapo-tests-only-key-no-site-uses-it-0123456789abcdefghij")
    os.environ["REDIS_URL"] = redis_test_url()
    # Each test process has its own queue: pytest-xdist's workers inherit the environment of the process
    # that started them, whose queue they must not share (their Celery workers would take each other's runs).
    if os.environ.get("DAPO_TEST_QUEUE_PID") != str(os.getpid()):
        os.environ["DAPO_TEST_QUEUE_PID"] = str(os.getpid())
        os.environ["DAPO_QUEUE"] = TEST_QUEUE
        os.environ["DAPO_CHANNEL_PREFIX"] = f"asgi-{TEST_QUEUE}"


def fresh_environment(var_dir: Path, **env: str) -> dict[str, str]:
    """This process's environment without any DJANGO_* variable or DATABASE_URL, plus ``env``: what the
    processes of a fresh deployment see (for settings read in a subprocess, at its import)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_") and k != "DATABASE_URL"}
    return {
        **base,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform")]),
        "DAPO_VAR_DIR": str(var_dir),
        **env,
    }


def redis_test_url() -> str:
    base = os.environ.get("DAPO_TEST_REDIS_BASE") or os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    os.environ["DAPO_TEST_REDIS_BASE"] = base  # so a second call (another conftest) starts from the same URL
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"/{TEST_REDIS_DB}", parts.query, ""))


def make_fake_assets(root: Path) -> dict[str, str]:
    """A model directory and two data files where the path checks find them (contents are not read)."""
    model = root / "models" / "tiny"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name in ("train.jsonl", "test.jsonl"):
        (data / name).write_text(json.dumps({"prompt": "Compute 1+1.", "answer": "2"}) + "\n")
    return {
        "model.path": str(model),
        "data.train_path": str(data / "train.jsonl"),
        "data.val_path": str(data / "test.jsonl"),
    }


def sample(step: int, index: int, *, split: str = "train", response: str = "Answer: 2", **kw) -> SampleRecord:
    fields = {
        "step": step,
        "split": split,
        "group": index // 2,
        "sample_index": index,
        "problem_index": index // 2,
        "prompt": "Compute 1+1.",
        "response": response,
        "ground_truth": "2",
        "pred": "2",
        "score": 1.0,
        "acc": True,
        "overlong_penalty": 0.0,
        "reward": 1.0,
        "advantage": 0.5,
        "length": 4,
        "truncated": False,
        "kept": True,
    }
    return SampleRecord(**{**fields, **kw})


def report(step: int, *, n_samples: int = 4, value: float | None = None, **metrics: float) -> StepReport:
    base = {"critic/score/mean": step / 10 if value is None else value, "actor/entropy": 1.0 - step / 100}
    return StepReport(
        step=step,
        metrics={**base, **{k.replace("__", "/"): v for k, v in metrics.items()}},
        samples=[sample(step, i) for i in range(n_samples)],
        wall_time=1_700_000_000.0 + step,
        elapsed_s=float(step),
    )
