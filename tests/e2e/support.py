"""What the browser tests share: where screenshots go, how chromium starts, a page that records script
errors, and the small demo run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.worker import stack

ARTIFACTS = stack.REPO / "test-artifacts"
VIEWPORT = {"width": 1440, "height": 1000}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# A demo run small enough for two shared CPU cores: 4 prompts × 4 samples, 12 new tokens, 2 updates a step.
SMALL_RUN = {
    "optim.total_steps": "4",
    "data.train_batch_size": "4",
    "data.gen_batch_size": "4",
    "rollout.n": "4",
    "rollout.max_response_length": "12",
    "algorithm.overlong_buffer_len": "4",
    "optim.mini_batch_size": "2",
    "optim.micro_batch_size": "8",
    "validation.every_n_steps": "0",
    "checkpoint.every_n_steps": "1",
    "execution.torch_threads": "1",
    "data.max_prompt_length": "64",
}


def submit_login(page: Any, base: str) -> None:
    """On the login page: log alice in and wait for the runs list (where a login without ?next= lands)."""
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/runs/")


def log_in(page: Any, base: str) -> None:
    """Open the login page and log alice in."""
    page.goto(f"{base}/accounts/login/")
    submit_login(page, base)


def open_page(browser: Any, *, timeout_ms: int = 20_000, **context: Any) -> tuple[Any, list[str]]:
    """A page in a new browser context (``context``: viewport, accept_downloads...) and the list its
    uncaught script errors go to: a script error would silently stop a page from updating, so every test
    asserts the list is empty at the end."""
    page = browser.new_context(**context).new_page()
    page.set_default_timeout(timeout_ms)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))  # which page, and what
    return page, errors


@contextmanager
def daphne_page(tmp_path: Path, chromium_path: str, **env_extra: str) -> Iterator[tuple[Any, list[str], str]]:
    """Daphne alone on the test database (rows are written by the test, no worker), and a page of chromium
    logged in as alice: yields (page, script errors, base URL). ``env_extra`` goes to daphne's environment."""
    from playwright.sync_api import sync_playwright

    env = stack.environment(tmp_path / "var", DJANGO_ALLOWED_HOSTS="127.0.0.1", **env_extra)
    port = stack.free_port()
    base = f"http://127.0.0.1:{port}"
    with stack.daphne(env, tmp_path / "daphne.log", port), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        page, errors = open_page(browser, viewport=VIEWPORT)
        log_in(page, base)
        yield page, errors, base
        browser.close()
