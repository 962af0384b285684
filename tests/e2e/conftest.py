"""Fixtures the browser tests share: Alice, the demo model and data, and one live stack for all of them.

Starting daphne, a Celery worker and chromium costs seconds each, so the browser tests share one of each
(``shared_stack``, for the tests of this folder, which `make test` runs on one pytest-xdist worker in a row).
Each test still has a database of its own (``django_db(transaction=True)``: rows are committed, so the
stack's processes see them, and flushed after the test), its own browser context (cookies, viewport), its
own folder under the stack's model and dataset roots (``live.tmp``), and the runs it started are stopped
before its rows go. Shared constants are in tests/e2e/support.py.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.platform.support import use_test_environment

use_test_environment()

from tests.e2e.support import CHROMIUM_ARGS, VIEWPORT, log_in, open_page  # noqa: E402
from tests.platform.fixtures import alice  # noqa: E402,F401
from tests.worker import stack  # noqa: E402

UNFINISHED = ("queued", "running")


@pytest.fixture(scope="session")
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

    from dapo.data.demo import build_model, build_tokenizer, make_arithmetic_problems
    from dapo.data.problems import write_parquet

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


@dataclass
class LiveServer:
    """daphne and a Celery worker on the test database and this session's Redis queue, and chromium."""

    base: str
    var: Path
    files: Path
    roots: list[Path]
    browser: Any
    logs: dict[str, Path]
    processes: dict[str, Any]

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                tail = self.logs[name].read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the shared {name} exited ({proc.returncode}):\n{tail}")


@pytest.fixture(scope="package")
def shared_stack(
    django_db_setup: None,
    django_db_blocker: Any,
    demo: dict[str, Any],
    chromium_path: str,
    redis_url: str,
    tmp_path_factory: Any,
) -> Iterator[LiveServer]:
    """One daphne, one Celery worker and one chromium for the browser tests of this folder.

    Its model and dataset roots are the demo, assets/ and a folder of its own, last (tests put their files
    in ``live.tmp``; the worker exports models into the last root). The CSP is report-only, as under
    DEBUG: tests evaluate scripts in pages, and the render test reads what the policy reports. Playwright
    runs an event loop in this thread from here on, which Django would take for async code:
    DJANGO_ALLOW_ASYNC_UNSAFE lets the tests write rows between page actions (the tests of other folders
    run after this fixture is gone)."""
    from django.conf import settings
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("live")
    files = root / "files"
    files.mkdir()
    roots = [Path(demo["root"]), stack.REPO / "assets", files]
    env = stack.environment(
        root / "var",
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DAPO_MODEL_ROOTS=":".join(map(str, roots)),
        DAPO_DATASET_ROOTS=":".join(map(str, roots)),
        DJANGO_CSP_REPORT_ONLY="true",
        DJANGO_SECRET_KEY=settings.SECRET_KEY,  # so that sessions this process makes are valid there
    )
    port = stack.free_port()
    logs = {"worker": root / "celery.log", "daphne": root / "daphne.log"}
    with ExitStack() as up, pytest.MonkeyPatch.context() as mp:
        processes = {
            "worker": up.enter_context(stack.celery_worker(env, logs["worker"])),
            "daphne": up.enter_context(stack.daphne(env, logs["daphne"], port)),
        }
        playwright = up.enter_context(sync_playwright())
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        up.callback(browser.close)
        yield LiveServer(f"http://127.0.0.1:{port}", root / "var", files, roots, browser, logs, processes)
    with django_db_blocker.unblock():  # no test's database access lasts into a package's teardown
        stack.wait_for_other_sessions_to_leave()


@dataclass
class Live:
    """What one browser test gets of the shared stack: its URL, a folder of its own under the stack's roots
    (``tmp``), and pages in browser contexts of their own (closed after the test)."""

    server: LiveServer
    tmp: Path
    contexts: list[Any] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.server.base

    @property
    def var(self) -> Path:
        return self.server.var

    def page(self, *, timeout_ms: int = 20_000, **context: Any) -> tuple[Any, list[str]]:
        """A page in a new browser context (default viewport 1440 x 1000) and its list of script errors."""
        page, errors = open_page(
            self.server.browser, timeout_ms=timeout_ms, **{"viewport": VIEWPORT, **context}
        )
        self.contexts.append(page.context)
        return page, errors

    def logged_in(self, **context: Any) -> tuple[Any, list[str]]:
        """A page of a new context with alice logged in through the login form."""
        page, errors = self.page(**context)
        log_in(page, self.base)
        return page, errors


@pytest.fixture
def live(shared_stack: LiveServer, transactional_db: None, settings: Any, request: Any) -> Iterator[Live]:
    """The shared stack for this test. This process's settings point where the stack's do (the run logs,
    checkpoints and roots daphne and the worker read). Afterwards the runs still queued or running are
    cancelled and waited for, so that the worker is idle before this test's rows are flushed."""
    shared_stack.check_alive()
    settings.DAPO_VAR_DIR = shared_stack.var
    settings.DAPO_RUNS_DIR = shared_stack.var / "runs"
    settings.DAPO_MODEL_ROOTS = list(shared_stack.roots)
    settings.DAPO_DATASET_ROOTS = list(shared_stack.roots)
    tmp = shared_stack.files / f"{request.node.name[:60]}-{uuid.uuid4().hex[:6]}"
    tmp.mkdir()
    live = Live(shared_stack, tmp)
    yield live
    for context in live.contexts:
        context.close()
    stop_unfinished_runs(worker_pid=shared_stack.processes["worker"].pid)
    shared_stack.check_alive()


def stop_unfinished_runs(worker_pid: int, timeout_s: float = 120.0) -> None:
    """Cancel every run that is queued or running, and wait until the shared worker has let go of those it
    holds (a run a test claimed under a made-up worker id has no process to wait for)."""
    from runs.models import Run

    unfinished = Run.objects.filter(status__in=UNFINISHED)
    for run in unfinished:
        run.request_cancel()
    held = unfinished.filter(lease_owner__startswith=f"{socket.gethostname()}:{worker_pid}:")
    deadline = time.monotonic() + timeout_s
    while held.exists():
        if time.monotonic() > deadline:
            names = list(held.values_list("name", "status"))
            raise AssertionError(f"runs still held by the worker {timeout_s:.0f} s after a cancel: {names}")
        time.sleep(0.5)


@pytest.fixture
def live_stack(live: Live, demo: dict[str, Any], alice: Any) -> str:  # noqa: F811 (the fixture above)
    """The shared stack's URL with the demo model and dataset in the catalog."""
    from catalog.registry import register_dataset, register_model

    register_model("demo-model", str(demo["model"]))
    register_dataset("demo-arithmetic", str(demo["train"]), str(demo["test"]))
    return live.base
