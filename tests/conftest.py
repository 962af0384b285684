"""Session fixtures every test folder may use: the Redis server and Debian's chromium.

Django fixtures live in tests/platform/conftest.py. `make test` starts a Redis server when none answers
and exports REDIS_URL, so under it `redis_url` always finds one.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def _redis_answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=2) as sock:
            if parts.password:
                sock.sendall(f"AUTH {parts.password}\r\n".encode())
                sock.recv(64)
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> str:
    """REDIS_URL (default redis://127.0.0.1:6379/0); fails, never skips, when no server answers there."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if not _redis_answers(url):
        pytest.fail(f"no Redis answers at REDIS_URL={url}: run the tests with `make test`, which starts one")
    return url


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's chromium for Playwright (`executable_path=`); skips where absent, except under CI."""
    if CHROMIUM.exists():
        return str(CHROMIUM)
    reason = f"{CHROMIUM} is missing (`make test` installs it as root: apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


# `make test-fast` deselects these (the edit-test loop): browser tests are marked in their modules; Ray and
# fault-injection tests are marked here by where they live, so a new test in those files is marked too.
RAY_MODULES = {
    "test_ray_backend.py",
    "test_ray_shards.py",
    "test_ray_two_nodes.py",
    "test_ray_binding.py",
    "test_fsdp.py",  # FSDP learners run on the Ray backend
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.name in RAY_MODULES or path.name == "test_ray_faults.py":
            item.add_marker(pytest.mark.ray)
        if "reliability" in path.parts:
            item.add_marker(pytest.mark.faults)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: object) -> object:
    """pytest-django's test database, and at the end of the run, before it is dropped, PostgreSQL
    sessions still open on it ended: connections Django opened in other threads or in Playwright's and
    Channels' event loops are never closed by their owners, and DROP DATABASE refuses while they live."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:  # type: ignore[attr-defined]
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
