"""`make test`: install what the tests need, start the services they use, run every check, stop them.

    python3.11 -m scripts.check [--lint-only] [PYTEST_ARGS...]

1. .venv with the runtime + dev locks (skipped when unchanged);
2. Debian's chromium for the browser tests, when missing and we are root;
3. Redis: a private server on a free port (REDIS_URL exported), so that concurrent test runs on one
   machine never share queues; where no redis-server exists, the one answering on REDIS_URL;
4. ruff (lint and `ruff format --check`), mypy, the import-layering contracts (lint-imports), the GPU
   lock's resolve (scripts/gpu_lock.py: skipped when the package index does not answer, or when no
   requirements file changed since the last successful resolve), then pytest on three workers
   (``pytest_defaults``);
5. stop what step 3 started.
Exit status: pytest's when it failed, else the first failed check's, else 0.
Tests use SQLite unless DATABASE_URL is set (.ci/run sets it to the local PostgreSQL).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import FrameType

from scripts import envsetup
from scripts.stack import Stack, ensure_redis

ROOT = envsetup.ROOT
CHROMIUM = Path("/usr/bin/chromium")


def ensure_chromium(log_dir: Path) -> None:
    """Install Debian's chromium when it is missing and the machine allows it; never fatal."""
    if CHROMIUM.exists():
        print(f"[chromium] using {CHROMIUM}")
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(
            f"[chromium] {CHROMIUM} is missing and only root with apt-get can install it: browser tests skip"
        )
        return
    log_path = log_dir / "apt-chromium.log"
    print(
        f"[chromium] installing Debian's chromium with apt-get (a minute or two; log: {log_path})", flush=True
    )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log_path.open("w") as log:
        for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            if subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                print(f"[chromium] `{' '.join(argv)}` failed (see {log_path}): browser tests will not run")
                return
    print(f"[chromium] installed {CHROMIUM}")


def missing_layer_packages() -> list[str]:
    """Root packages of the import contracts that this checkout does not have (yet)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    roots = config["tool"]["importlinter"]["root_packages"]
    present = {p.parent.name for base in (ROOT, ROOT / "platform") for p in base.glob("*/__init__.py")}
    return [name for name in roots if name not in present]


def checks(pytest_args: list[str], lint_only: bool, fast: bool = False) -> list[tuple[str, list[str]]]:
    steps = [
        ("ruff", ["ruff", "check", "."]),
        ("ruff format", ["ruff", "format", "--check", "."]),
        ("mypy", ["mypy"]),
    ]
    missing = missing_layer_packages()
    if missing:
        print(f"[check] import contracts not checked: packages {', '.join(missing)} are not in this checkout")
    else:
        steps.append(("import contracts", ["lint-imports", "--no-cache"]))
    if not lint_only:
        if not fast:  # the edit-test loop (make test-fast) skips the GPU lock's resolve against the index
            steps.append(("gpu lock", ["python", "-m", "scripts.gpu_lock"]))
        steps.append(("pytest", ["pytest", *pytest_defaults(pytest_args), *pytest_args]))
    return steps


def pytest_defaults(args: list[str]) -> list[str]:
    """What `make test` adds unless ARGS says otherwise: three pytest-xdist workers (DAPO_TEST_WORKERS; 0 for
    none) that keep each group of tests on one worker (tests/conftest.py, ``xdist_group``), and the 25
    slowest tests listed at the end."""
    extra = []
    workers = os.environ.get("DAPO_TEST_WORKERS", "3")
    chose_workers = any(
        a in ("-n", "--numprocesses") or a.startswith(("--numprocesses=", "-n=")) for a in args
    )
    if not chose_workers and not any(a.startswith("-n") and a[2:].isdigit() for a in args) and workers != "0":
        extra += ["-n", workers, "--dist", "loadgroup"]
    if not any(a.startswith("--durations") for a in args):
        extra.append("--durations=25")
    return extra


def run_checks(steps: list[tuple[str, list[str]]], env: dict[str, str]) -> int:
    results = []
    for name, argv in steps:
        print(f"\n[check] ==== {name}: {' '.join(argv)}", flush=True)
        started = time.monotonic()
        code = subprocess.run(argv, env=env, cwd=ROOT).returncode
        results.append((name, code, time.monotonic() - started))
    print("\n[check] summary")
    for name, code, seconds in results:
        print(f"  {'ok  ' if code == 0 else 'FAIL'}  {name:<17} {seconds:6.1f} s   exit {code}")
    codes = {name: code for name, code, _ in results}
    if codes.get("pytest"):
        return codes["pytest"]
    return next((code for code in codes.values() if code), 0)


def interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> int:
    signal.signal(signal.SIGTERM, interrupt)
    args = sys.argv[1:]
    lint_only = "--lint-only" in args
    fast = "--fast" in args
    pytest_args = [arg for arg in args if arg not in ("--lint-only", "--fast")]
    envsetup.ensure_venv(dev=True)
    env = envsetup.project_env()
    var_dir = Path(env["DAPO_VAR_DIR"])
    stack = Stack(var_dir / "log")
    try:
        if not lint_only:
            ensure_chromium(stack.log_dir)
            python = envsetup.venv_bin("python")
            env["REDIS_URL"] = ensure_redis(stack, env, var_dir, python, private=True)
        return run_checks(checks(pytest_args, lint_only, fast), env)
    except KeyboardInterrupt:
        print("\n[check] interrupted")
        return 130
    finally:
        stack.stop_all()


if __name__ == "__main__":
    sys.exit(main())
