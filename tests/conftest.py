"""Session fixtures every test folder may use: the Redis server and Debian's chromium.

Django fixtures live in tests/platform/conftest.py. `make test` starts a Redis server when none answers
and exports REDIS_URL, so under it `redis_url` always finds one.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("DAPO_CHROMIUM") or "/usr/bin/chromium")  # another build: its path


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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.name in RAY_MODULES or path.name == "test_ray_faults.py":
            item.add_marker(pytest.mark.ray)
        if "reliability" in path.parts:
            item.add_marker(pytest.mark.faults)
        if group := xdist_group(item):
            item.add_marker(pytest.mark.xdist_group(group))
        if group == "ray" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(RAY_SESSION_TIMEOUT_S))
    if getattr(config.option, "loadgroup", False):  # set on xdist's workers, whose collection xdist schedules
        items.sort(key=lambda item: not _leads(item))  # stable: the rest keep their order


RAY_SESSION_TIMEOUT_S = 600
"""The hang guard of the tests on the session's Ray (twice the default). Ray runs its workers at low priority
(``ps`` shows them niced), so a busy machine slows them most: with two busy processes beside the suite, the
FSDP Ray test (48-71 s quiet) ran past 300 s. A timeout that fires inside Ray's wait also leaves this
process's Ray client broken ("CoreWorker.wait returned a result with an exception set"): the next tests of
the group failed with it, so the guard must not fire on a test that is slow but moving."""


LEADING = {"tests/test_demo_under_load.py"}
"""Ungrouped work long enough to end the run if handed out last (70-120 s): under ``--dist loadgroup``
its tests come first in the collection, so xdist hands them out first of the one-test units, right after
the groups (it orders its units by size, a stable sort of the collection)."""


def _leads(item: pytest.Item) -> bool:
    return _relative(item) in LEADING


def _relative(item: pytest.Item) -> str | None:
    path = Path(str(item.fspath))
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None


class _GroupIds:
    """pytest-xdist 3.8 marks a test's group by appending ``@group`` to ``item._nodeid``, which pytest 9.2
    no longer reads (a node's id is ``item._id``, a ``NodeId``): its workers report plain ids, so
    ``--dist loadgroup`` spread every group over both workers (two live servers, two browsers, two local
    Rays, fault tests side by side). This hook, after xdist's, gives each grouped test the id xdist means:
    its controller sends the tests of one ``@group`` to one worker."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):  # set on xdist's workers under --dist loadgroup
            return
        from _pytest.nodeid import NodeId

        for item in items:
            mark = item.get_closest_marker("xdist_group")
            if mark is not None and not item.nodeid.endswith(f"@{mark.args[0]}"):
                item._id = NodeId.parse(f"{item.nodeid}@{mark.args[0]}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupIds(), "dapo-xdist-group-ids")


MODULE_GROUPS = {
    "tests/dapo/test_ablation_ladder.py": "ladder",  # its module fixture trains six rungs (~27 s)
    "tests/dapo/test_client.py": "client",  # daphne and a Celery worker (~12 s to start)
    "tests/worker/test_tasks.py": "tasks",  # a Celery worker (~8-14 s to start)
    "tests/dapo/integrations/test_trl.py": "trl",  # TRL's import and its tiny assets
}
"""Modules whose module-scoped fixture is costly: spread over the workers, each worker would pay it again."""


def xdist_group(item: pytest.Item) -> str | None:
    """Which tests `make test`'s workers (pytest-xdist, --dist loadgroup) run on one worker, in turn:
    the browser tests share one live server and browser (tests/e2e/conftest.py); the tests on the session's
    local Ray (``ray_session``) share that Ray; the other Ray tests and the fault tests (tests/reliability)
    start clusters, workers and databases of their own, and run one at a time so that two never starve each
    other (in two groups side by side, three groups started Ray at once and the FSDP Ray test took 172 s
    instead of 45-75 s, and a worker-kill test beside the Ray tests missed its reaper's log line); a module of
    MODULE_GROUPS pays its module fixture once. The groups are the longest units of work; xdist hands them
    out first. The demo under load (LEADING) starts its own Ray but is in no group: in the cluster group it
    made that group the run's last worker by ~70 s, while the other two stood idle."""
    relative = _relative(item)
    if relative in LEADING:
        return None
    if relative in MODULE_GROUPS:
        return MODULE_GROUPS[relative]
    if item.get_closest_marker("browser"):
        return "browser"
    if "ray_session" in getattr(item, "fixturenames", ()):
        return "ray"
    if item.get_closest_marker("ray") or item.get_closest_marker("faults"):
        return "clusters"
    return None


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


@dataclass(frozen=True)
class RaySession:
    """The local Ray of this test process, as ``dapo.cluster.ray_cluster.connect()`` starts one for a run with
    RAY_ADDRESS unset. ``root``: its HOME (empty, to see that nothing is written there) and DAPO_VAR_DIR
    (``root/var``) at start; ``temp_dir``: where Ray put its files; ``assets``: a folder for the tests'
    tiny model and data."""

    connection: Any
    root: Path
    temp_dir: Path

    @property
    def assets(self) -> Path:
        return self.root / "assets"


@pytest.fixture(scope="session")
def ray_session() -> Iterator[RaySession]:
    """One local Ray for every test that only needs a cluster (the Ray backend, FSDP learners, the GPU
    check's Ray step): starting one costs 10-30 s. Tests that start, stop or kill a cluster (the fault
    tests, two nodes, the loopback checks) start their own in other processes."""
    ray = pytest.importorskip("ray")
    from dapo.cluster.ray_cluster import connect, ray_temp_dir

    if ray.is_initialized():
        pytest.fail("this test process joined a Ray cluster before the session's own started")
    # Short, whatever pytest-xdist adds to tmp paths: Ray's socket paths must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="dapo-ray-", dir="/tmp"))
    (root / "home").mkdir()
    with pytest.MonkeyPatch.context() as mp:  # as a worker with RAY_ADDRESS unset starts it
        for key in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            mp.delenv(key, raising=False)
        mp.setenv("HOME", str(root / "home"))
        mp.setenv("DAPO_VAR_DIR", str(root / "var"))
        connection = connect()
        temp_dir = ray_temp_dir()
    try:
        yield RaySession(connection, root, temp_dir)
    finally:
        connection.close()
        shutil.rmtree(root, ignore_errors=True)


WORKER_THREADS = {"reaper", "notifier"}
"""The names of worker/tasks.py's background threads (``Reaper``, ``Notifier``). Started in the test process,
one outlives its test and keeps querying the database: a notifier left running by a test could mark other
tests' runs stalled and send their notifications, and at the session's end it logged "relation runs_run
does not exist" every pass, hundreds of times."""


@pytest.fixture(autouse=True)
def _no_worker_thread_left_behind() -> Iterator[None]:
    def running() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name in WORKER_THREADS and t.is_alive()}

    before = running()
    yield
    left = sorted(t.name for t in running() - before)  # the test that started one fails, not the next ones
    if left:
        pytest.fail(f"this test left the worker's {', '.join(left)} thread running in the test process")
