"""Start the real stack's processes for tests: a Celery worker and daphne, sharing the test database
(a file, see settings.DATABASES TEST NAME, or PostgreSQL's test database) and a test Redis database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from scripts.stack import free_ports
from tests.platform.support import redis_test_url

REPO = Path(__file__).resolve().parents[2]
STACK_APP_NAME = "dapo-test-stack"
"""The PostgreSQL application_name of the stack's processes: teardown waits for their sessions only."""


def database_url() -> str:
    """The URL of the database the tests use now (after pytest-django created the test database)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db.get("USER") or ""
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    return f"postgres://{auth}@{host}/{db['NAME']}" if auth else f"postgres://{host}/{db['NAME']}"


def environment(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_test_url(),  # never settings.REDIS_URL: Django may have been set up before
        "DAPO_QUEUE": os.environ["DAPO_QUEUE"],  # this session's own queue and channel prefix
        "DAPO_CHANNEL_PREFIX": os.environ["DAPO_CHANNEL_PREFIX"],
        "DAPO_VAR_DIR": str(var_dir),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform")]),
        "PYTHONUNBUFFERED": "1",
        "PGAPPNAME": STACK_APP_NAME,  # libpq tags their PostgreSQL sessions (see below)
        **extra,
    }
    return env


def free_port() -> int:
    """One port free now. For two or more: ``free_ports(n)`` (picked in turn, two can be the same)."""
    return free_ports(1)[0]


@contextmanager
def process(
    args: list[str], env: dict[str, str], log: Path, ready: str, timeout: float = 90
) -> Iterator[Any]:
    """Start a process, wait until its log shows ``ready``, stop it (SIGTERM, then SIGKILL) afterwards."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout
        while ready not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[:4]} did not start:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def both_queues(env: dict[str, str]) -> str:
    """The training and the short jobs' queue of this environment (config.queues), for one test worker."""
    from config.queues import queues

    named = queues(env)
    return f"{named.training.name},{named.short.name}"


def celery_worker(env: dict[str, str], log: Path, concurrency: int | None = None) -> Any:
    """A worker of both queues: the solo pool (one task at a time, in the worker's own process), or with
    ``concurrency`` the prefork pool with that many child processes, as `make demo` runs it."""
    pool = ["-P", "solo"] if concurrency is None else ["-P", "prefork", "--concurrency", str(concurrency)]
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "worker.app",
        "worker",
        "-Q",
        both_queues(env),
        *pool,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "info",
    ]
    return process(args, env, log, ready="ready.")


def daphne(env: dict[str, str], log: Path, port: int) -> Any:
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]
    return process(args, env, log, ready="Listening on TCP address")


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_for_other_sessions_to_leave(timeout: float = 15) -> None:
    """PostgreSQL: wait until the stopped subprocesses' sessions are gone, so the test database can be
    dropped at the end of the run (PostgreSQL notices a closed socket a moment after the process exits).

    Only the stack's sessions count (application_name STACK_APP_NAME): connections this test process
    opened in other threads or event loops stay open until the end of the run, and waiting for them
    cost the full timeout at every teardown (tests/conftest.py closes them before the drop)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        f"AND pid <> pg_backend_pid() AND application_name = '{STACK_APP_NAME}'"
    )

    def alone() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()[0] == 0

    try:
        wait_for(alone, timeout, "the subprocesses' database sessions to close")
    except AssertionError:
        pass  # teardown then warns; the tests themselves have passed or failed already
