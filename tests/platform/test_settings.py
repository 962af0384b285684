"""Settings come from the environment through strict helpers; production refuses to start half-configured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from config.settings import env_bool, env_int, env_list
from django.core.exceptions import ImproperlyConfigured

REPO = Path(__file__).resolve().parents[2]


def test_env_bool_accepts_the_usual_spellings_and_refuses_the_rest(monkeypatch):
    for raw, value in [("1", True), ("TRUE", True), ("on", True), ("no", False), ("0", False), ("", True)]:
        monkeypatch.setenv("X_FLAG", raw)
        assert env_bool("X_FLAG", True) is value
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG", True)


def test_env_int_and_env_list(monkeypatch):
    monkeypatch.setenv("X_INT", "12x")
    with pytest.raises(ImproperlyConfigured, match="X_INT must be an integer"):
        env_int("X_INT", 1)
    monkeypatch.setenv("X_LIST", " a, b ,,c ")
    assert env_list("X_LIST", "") == ["a", "b", "c"]


def _settings_in_subprocess(**env: str) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS'])"
    )
    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": f"{REPO}/platform",
        **env,
    }
    full_env.pop("DATABASE_URL", None)  # the default database, whatever this test run uses
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=60
    )


def test_production_needs_a_secret_key(tmp_path):
    result = _settings_in_subprocess(DJANGO_DEBUG="false", DJANGO_SECRET_KEY="", DAPO_VAR_DIR=str(tmp_path))
    assert result.returncode != 0 and "DJANGO_SECRET_KEY is required" in result.stderr


def test_the_default_database_is_sqlite_in_wal_mode_under_the_var_dir(tmp_path):
    result = _settings_in_subprocess(DAPO_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "journal_mode=WAL" in result.stdout and "IMMEDIATE" in result.stdout
