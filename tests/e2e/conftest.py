"""Fixtures the browser tests share: Alice, the demo model and data, and the live stack (daphne and a Celery
worker on the test database and the test Redis database). Shared constants are in tests/e2e/support.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.platform.support import use_test_environment

use_test_environment()

from tests.platform.fixtures import alice  # noqa: E402,F401
from tests.worker import stack  # noqa: E402


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo model and data: the built demo (assets/demo) when present, else a randomly initialised
    model of the demo's architecture and small arithmetic parquet files, built here in seconds."""
    built = stack.REPO / "assets" / "demo"
    if (built / "model" / "config.json").is_file() and (built / "data" / "train.parquet").is_file():
        return {
            "root": built,
            "model": built / "model",
            "train": built / "data" / "train.parquet",
            "test": built / "data" / "test.parquet",
        }
    import torch

    from dapo.data import write_parquet
    from dapo.demo import build_model, build_tokenizer, make_arithmetic_problems

    root = tmp_path_factory.mktemp("demo")
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    build_model(tokenizer, seed=0).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    write_parquet(make_arithmetic_problems(64, seed=1), root / "data" / "train.parquet")
    write_parquet(make_arithmetic_problems(8, seed=2), root / "data" / "test.parquet")
    return {
        "root": root,
        "model": root / "model",
        "train": root / "data" / "train.parquet",
        "test": root / "data" / "test.parquet",
    }


@pytest.fixture
def live_stack(demo, alice, settings, tmp_path, redis_url) -> str:  # noqa: F811 (the fixture above)
    """daphne + a Celery worker on the test database and the test Redis database; the catalog filled."""
    from catalog.registry import register_dataset, register_model

    settings.DAPO_MODEL_ROOTS = [demo["root"]]
    settings.DAPO_DATASET_ROOTS = [demo["root"]]
    register_model("demo-model", str(demo["model"]))
    register_dataset("demo-arithmetic", str(demo["train"]), str(demo["test"]))
    env = stack.environment(
        tmp_path / "var",
        DAPO_MODEL_ROOTS=str(demo["root"]),
        DAPO_DATASET_ROOTS=str(demo["root"]),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
    )
    port = stack.free_port()
    with stack.celery_worker(env, tmp_path / "celery.log"), stack.daphne(env, tmp_path / "daphne.log", port):
        yield f"http://127.0.0.1:{port}"
    stack.wait_for_other_sessions_to_leave()
