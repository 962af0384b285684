"""Settings come from the environment through strict helpers; production refuses to start half-configured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from config.settings import env_bool, env_int, env_list
from django.core.exceptions import ImproperlyConfigured

from tests.platform.support import fresh_environment

REPO = Path(__file__).resolve().parents[3]


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


def _secret_key(tmp_path: Path) -> subprocess.CompletedProcess:
    code = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    env = fresh_environment(tmp_path)  # no DJANGO_SECRET_KEY, no DJANGO_DEBUG
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_without_a_secret_key_one_is_generated_once_into_the_var_dir_for_its_owner(tmp_path):
    first, second = _secret_key(tmp_path), _secret_key(tmp_path)
    assert first.returncode == 0, first.stderr
    stored = tmp_path / "secret_key"
    key = first.stdout.strip().splitlines()[-1]
    assert len(key) >= 50 and stored.read_text().strip() == key
    assert second.stdout.strip().splitlines()[-1] == key  # every later process reads the same one
    assert stored.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if "secret" in p.name] == ["secret_key"]  # no leftovers


def test_a_stored_key_too_short_to_be_safe_stops_the_start(tmp_path):
    (tmp_path / "secret_key").write_text("short\n")
    result = _secret_key(tmp_path)
    assert result.returncode != 0 and "holds no usable secret key" in result.stderr
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_the_default_database_is_sqlite_in_wal_mode_under_the_var_dir(tmp_path):
    result = _settings_in_subprocess(DAPO_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "journal_mode=WAL" in result.stdout and "IMMEDIATE" in result.stdout


# ---- security settings (issue 7) ---------------------------------------------------------------------

PRODUCTION = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "k3V9-production-like-secret-for-the-deploy-check-only-0123456789abcdef",
    "DJANGO_ALLOWED_HOSTS": "dapo.example.org",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://dapo.example.org",
    "DJANGO_SSL_REDIRECT": "true",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "true",
    "DJANGO_HSTS_INCLUDE_SUBDOMAINS": "true",
    "DJANGO_HSTS_PRELOAD": "true",
}
"""The environment of an HTTPS deployment behind a TLS proxy (README, "Security"; docs/security.md)."""


SECURITY_NAMES = [
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_PROXY_SSL_HEADER",
    "X_FRAME_OPTIONS",
    "SECURE_CONTENT_TYPE_NOSNIFF",
    "CONTENT_SECURITY_POLICY",
    "CONTENT_SECURITY_POLICY_REPORT_ONLY",
]


def _security_settings(tmp_path: Path, **env: str) -> dict:
    code = (
        "import django, json; django.setup(); from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n, None) for n in {SECURITY_NAMES!r}}}))"
    )
    argv = [sys.executable, "-c", code]
    env = fresh_environment(tmp_path, **env)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_outside_debug_cookies_are_secure_and_the_headers_are_strict(tmp_path):
    s = _security_settings(tmp_path, DJANGO_DEBUG="false", DJANGO_SECRET_KEY="x" * 60)
    assert s["SESSION_COOKIE_SECURE"] and s["CSRF_COOKIE_SECURE"]
    assert s["X_FRAME_OPTIONS"] == "DENY" and s["SECURE_CONTENT_TYPE_NOSNIFF"]
    csp = s["CONTENT_SECURITY_POLICY"]
    for directive in ("frame-ancestors 'none'", "object-src 'none'", "base-uri 'self'", "script-src 'self';"):
        assert directive in csp
    assert s["CONTENT_SECURITY_POLICY_REPORT_ONLY"] is False  # enforced
    # plain HTTP stays usable (the compose stack): no redirect, no HSTS, no trusted proxy header
    assert not s["SECURE_SSL_REDIRECT"] and s["SECURE_HSTS_SECONDS"] == 0
    assert s["SECURE_PROXY_SSL_HEADER"] is None


def test_https_switches_turn_on_redirect_hsts_and_the_proxy_header(tmp_path):
    s = _security_settings(tmp_path, **PRODUCTION)
    assert s["SECURE_SSL_REDIRECT"] and s["SECURE_HSTS_SECONDS"] == 31_536_000
    assert s["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_debug_keeps_cookies_usable_over_http(tmp_path):
    s = _security_settings(tmp_path, DJANGO_DEBUG="true")
    assert not s["SESSION_COOKIE_SECURE"] and s["SECURE_HSTS_SECONDS"] == 0
    assert s["CONTENT_SECURITY_POLICY_REPORT_ONLY"] is True  # browser-test tools evaluate strings in pages


def test_a_malformed_security_switch_stops_the_start(tmp_path):
    result = _settings_in_subprocess(DJANGO_SSL_REDIRECT="sometimes", DAPO_VAR_DIR=str(tmp_path))
    assert result.returncode != 0 and "DJANGO_SSL_REDIRECT" in result.stderr


def test_the_deploy_check_is_clean_in_the_production_environment(tmp_path):
    argv = [sys.executable, str(REPO / "manage.py"), "check", "--deploy", "--fail-level", "WARNING"]
    env = fresh_environment(tmp_path, **PRODUCTION)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_a_process_that_loses_the_race_for_the_key_file_keeps_the_winners(tmp_path):
    from config import secret_key

    winner = secret_key.stored_key(tmp_path)
    secret_key._create(tmp_path / "secret_key")  # a second process, a moment too late
    assert secret_key.stored_key(tmp_path) == winner
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret_key"]


@pytest.mark.parametrize("page", ["README.md", "docs/security.md"])
def test_the_documented_https_environment_is_the_one_the_deploy_check_runs(page):
    """The pages say a test runs exactly their HTTPS example: its variables are PRODUCTION's."""
    text = (REPO / page).read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "check --deploy" in b)
    documented = dict(re.findall(r"\b(DJANGO_[A-Z_]+)=(\S+)", block))
    assert documented.pop("DJANGO_SECRET_KEY") == "<50+" and len(PRODUCTION["DJANGO_SECRET_KEY"]) >= 50
    assert documented == {k: v for k, v in PRODUCTION.items() if k != "DJANGO_SECRET_KEY"}
