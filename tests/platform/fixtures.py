"""The cast: alice owns runs, bob is another user, an anonymous visitor; plus demo paths and a queue spy.

Imported by the conftest of each test folder that needs them (tests/platform, tests/worker).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from tests.platform.support import make_fake_assets


@pytest.fixture(autouse=True)
def isolated_settings(settings: Any, tmp_path: Path) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.DAPO_VAR_DIR = tmp_path / "var"
    settings.DAPO_RUNS_DIR = tmp_path / "var" / "runs"
    settings.DAPO_MODEL_ROOTS = [tmp_path / "models"]
    settings.DAPO_DATASET_ROOTS = [tmp_path]  # where tests write their data files; uploads are allowed anyway


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    """Config overrides that point at a model and data files the path checks accept."""
    return make_fake_assets(tmp_path)


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """What would have been sent to Celery (task name, run id), in order."""
    from runs import dispatch

    sent: list[tuple[str, int]] = []
    monkeypatch.setattr(dispatch, "send", lambda task, run_id, **_: sent.append((task, run_id)))
    return sent


@functools.cache
def password_hash(raw: str) -> str:
    """Django's real hash of ``raw`` (the configured hasher, so a login through a live server verifies it),
    computed once per test session: PBKDF2's million iterations cost about half a second a user, and some
    700 tests make users."""
    from django.contrib.auth.hashers import make_password

    return make_password(raw)


def make_user(user_model: Any, username: str, raw_password: str, **fields: Any) -> Any:
    """A user whose password is ``raw_password``, hashed once per session (``password_hash``)."""
    user = user_model(username=username, **fields)
    user.password = password_hash(raw_password)
    user.save()
    return user


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return make_user(django_user_model, "alice", "alice-pass-123")


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return make_user(django_user_model, "bob", "bob-pass-123")


@pytest.fixture
def team(alice: Any, bob: Any) -> Any:
    """A group alice and bob are both in: each may share a run with the other (runs.access)."""
    from django.contrib.auth.models import Group

    group = Group.objects.create(name="team")
    group.user_set.add(alice, bob)
    return group


@pytest.fixture
def alice_client(client: Any, alice: Any) -> Any:
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(bob: Any) -> Any:
    from django.test import Client

    c = Client()
    c.force_login(bob)
    return c


def _token_client(user: Any) -> Any:
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def api(alice: Any) -> Any:
    """alice through the API with her token."""
    return _token_client(alice)


@pytest.fixture
def bob_api(bob: Any) -> Any:
    """bob through the API with his token."""
    return _token_client(bob)


@pytest.fixture
def anon_client() -> Any:
    from django.test import Client

    return Client()


@pytest.fixture
def alice_run(alice: Any, paths: dict[str, str], queued: list) -> Any:
    from runs.models import Run

    from dapo.runconfig.presets import get_preset

    config = get_preset("tiny_cpu").with_overrides({**paths, "optim.total_steps": 10})
    return Run.create_queued(owner=alice, name="alice-demo", config=config, preset="tiny_cpu")
