"""`make test`: install what the tests need, start the services they use, run every check, stop them.

    python3.11 -m scripts.check [--lint-only] [PYTEST_ARGS...]

1. .venv with the runtime + dev locks (skipped when unchanged);
2. Debian's chromium for the browser tests, when missing and we are root;
3. Redis: a private server on a free port (REDIS_URL exported), so that concurrent test runs on one
   machine never share queues; where no redis-server exists, the one answering on REDIS_URL;
4. ruff (lint and `ruff format --check`), mypy, the import-layering contracts (lint-imports), the GPU
   lock's resolve (scripts/gpu_lock.py: skipped when the package index does not answer, or when no
   requirements file changed since the last successful resolve), and pytest on three workers
   (``pytest_defaults``). The static checks run one after the other at low priority beside pytest, their
   output held back and printed after pytest's (``run_checks``); with --lint-only they run alone;
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
import threading
import time
import tomllib
from dataclasses import dataclass
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


STATIC_NICE = 10
"""The static checks' niceness beside pytest: they take the CPU that pytest's workers leave idle."""


@dataclass
class Result:
    name: str
    code: int
    seconds: float
    output: str | None = None  # held back while pytest ran beside it; None: already printed


def run_step(name: str, argv: list[str], env: dict[str, str], hold: bool) -> Result:
    """One check; with ``hold`` at low priority and its output kept for later, else streamed."""
    started = time.monotonic()
    if not hold:
        print(f"\n[check] ==== {name}: {' '.join(argv)}", flush=True)
        code = subprocess.run(argv, env=env, cwd=ROOT).returncode
        return Result(name, code, time.monotonic() - started)
    # nice(1), not preexec_fn: this runs on a thread while the main thread starts pytest, and preexec_fn is
    # not safe to use with threads (it runs Python code in the child between fork and exec)
    done = subprocess.run(
        ["nice", "-n", str(STATIC_NICE), *argv],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    return Result(name, done.returncode, time.monotonic() - started, done.stdout)


def run_checks(steps: list[tuple[str, list[str]]], env: dict[str, str]) -> int:
    """Every step; when pytest is among them, the others run in turn on a thread beside it (a fresh clone's
    mypy alone is ~40 s of one core), their output printed after pytest's, in their order."""
    static = [(name, argv) for name, argv in steps if name != "pytest"]
    tests = [(name, argv) for name, argv in steps if name == "pytest"]
    static_results: list[Result] = []
    if tests:
        print(f"\n[check] static checks beside pytest, output after it: {', '.join(n for n, _ in static)}")
        beside = threading.Thread(
            target=lambda: static_results.extend(run_step(n, a, env, hold=True) for n, a in static),
            daemon=True,
        )
        beside.start()
        pytest_result = run_step(*tests[0], env, hold=False)
        beside.join()
        for result in static_results:
            print(
                f"\n[check] ==== {result.name} (ran beside pytest)\n{result.output or ''}", end="", flush=True
            )
        results = [*static_results, pytest_result]
    else:
        results = [run_step(name, argv, env, hold=False) for name, argv in static]
    print("\n[check] summary")
    for r in results:
        print(f"  {'ok  ' if r.code == 0 else 'FAIL'}  {r.name:<17} {r.seconds:6.1f} s   exit {r.code}")
    codes = {r.name: r.code for r in results}
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
