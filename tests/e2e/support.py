"""What the browser tests share: where screenshots go, how chromium starts, a page that records script
errors, and the small demo run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
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
    from playwright.sync_api import expect

    page = browser.new_context(**context).new_page()
    page.set_default_timeout(timeout_ms)
    # expect()'s own default is 5 s, which a busy machine exceeded (a dataset row's solve rate, fetched
    # after a click, at load 6): the same deadline as the page's actions; a passing check returns at once
    expect.set_options(timeout=timeout_ms)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))  # which page, and what
    return page, errors


def off_loop(fn: Any) -> Any:
    """Run a database call in a thread: Playwright's sync API keeps an event loop in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()
