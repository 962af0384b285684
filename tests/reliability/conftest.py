"""Fixtures of the reliability tests: the Django cast, a tiny real model, and this session's Celery queue."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.platform.support import redis_test_url, use_test_environment

use_test_environment()

from tests.platform.fixtures import *  # noqa: E402,F403
from tests.reliability.support import build_tiny_assets  # noqa: E402


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_tiny_assets(tmp_path_factory.mktemp("tiny-assets"))


@pytest.fixture(scope="module")
def test_queue(redis_url: str) -> Any:
    """Tasks this process sends go to the session's own queue on the test Redis database."""
    from config.celery import app
    from django.conf import settings

    app.conf.broker_url = redis_test_url()
    previous, settings.DAPO_QUEUE = settings.DAPO_QUEUE, os.environ["DAPO_QUEUE"]
    yield settings.DAPO_QUEUE
    settings.DAPO_QUEUE = previous


@pytest.fixture(scope="module")
def var(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DAPO_VAR_DIR of this module's workers."""
    return tmp_path_factory.mktemp("reliability-var")
