"""`make demo`: set up and run the whole platform on one machine; Ctrl-C stops everything it started.

    python3.11 -m scripts.devstack

Steps: install the lock into .venv (skipped when unchanged) → Redis (reused when one answers on
REDIS_URL) → migrate → Daphne and two Celery workers (training runs, two at once by default; exports and
evaluations; slots from DAPO_TRAINING_CONCURRENCY / DAPO_SHORT_CONCURRENCY, see platform/config/queues.py),
which start while bootstrap (first user, demo model and dataset) runs → wait
for the login page → print the URL and the credentials → supervise until a signal or a dead service, then
stop everything in reverse order. Each service logs to var/log/<name>.log. Environment: see
docs/configuration.md.

No Ray is started here: the tour's runs never use it, and Ray's startup on a busy machine was what failed
the demo. A run on the Ray backend starts a local Ray in its worker when it needs one, on ports of its own
with its temp dir under var/ (dapo/cluster/ray_cluster.py), unless RAY_ADDRESS names a cluster.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from scripts import envsetup
from scripts.stack import (
    ServiceDied,
    Stack,
    ensure_redis,
    free_ports,
    http_ok,
    kill_pids,
    port_busy,
    say,
    stack_pids,
    tail,
    wait_until,
)

ROOT = envsetup.ROOT
VENV_BIN = envsetup.VENV / "bin"
LOGIN_PATH = "/accounts/login/"
REQUIRED_FILES = ["manage.py", "platform/config/settings.py", "platform/config/asgi.py", "worker/app.py"]
READY_TIMEOUT_S = 180


class Shutdown(Exception):
    """A signal asked the supervisor to stop."""


class Supervisor:
    def __init__(self, bootstrap_args: list[str]) -> None:
        self.bootstrap_args = bootstrap_args
        self.started = time.monotonic()
        self.env = demo_env(envsetup.project_env())
        self.var_dir = Path(self.env["DAPO_VAR_DIR"])
        self.stack = Stack(self.var_dir / "log")
        self.state_file = self.var_dir / "run" / "devstack.json"
        self.stopping = False
        self.hurry = False
        self.timings: dict[str, float] = {}

    # ---- signals and state ------------------------------------------------------------------------

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stopping:
            self.hurry = True  # a second Ctrl-C: stop waiting for graceful exits
            return
        raise Shutdown(signal.Signals(signum).name)

    def claim_state_file(self) -> None:
        """Refuse to run twice; kill what a supervisor that died without cleaning up left behind."""
        try:
            previous = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            previous = {}
        pid = previous.get("pid")
        if pid and _is_devstack(pid):
            sys.exit(f"error: the platform already runs (supervisor pid {pid}) at {previous.get('url')}")
        leftovers = stack_pids(previous["stack_id"]) if previous.get("stack_id") else []
        if leftovers:
            say(f"[devstack] killing {len(leftovers)} process(es) left by an earlier run")
            kill_pids(leftovers, signal.SIGKILL)
        self.write_state(url=None)

    def write_state(self, url: str | None) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        state = {"pid": os.getpid(), "stack_id": self.stack.stack_id, "url": url}
        self.state_file.write_text(json.dumps(state) + "\n")

    def owns_state_file(self) -> bool:
        try:
            return bool(json.loads(self.state_file.read_text()).get("pid") == os.getpid())
        except (OSError, ValueError):
            return False

    def lap(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.timings[name] = now - since
        return now

    # ---- steps --------------------------------------------------------------------------------------

    def manage(self, *args: str, echo: bool = False) -> list[str]:
        """Run one manage.py command to completion, logged to var/log/manage-<cmd>.log; its output lines.

        With `echo`, lines also reach the terminal as they come (bootstrap may build the demo for minutes).
        """
        log_path = self.stack.log_dir / f"manage-{args[0]}.log"
        argv = [str(VENV_BIN / "python"), "manage.py", *args]
        lines = []
        with (
            log_path.open("w") as log,
            subprocess.Popen(
                argv, env=self.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            ) as process,
        ):
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                lines.append(line.rstrip())
                if echo:
                    say(f"[{args[0]}] {line.rstrip()}")
        if process.returncode != 0:
            command = " ".join(args)
            raise ServiceDied(f"manage.py {command} failed; last lines of {log_path}:\n{tail(log_path)}")
        return lines

    def ray_note(self) -> None:
        if self.env.get("RAY_ADDRESS"):
            say(f"[ray] runs on the Ray backend join the cluster at RAY_ADDRESS={self.env['RAY_ADDRESS']}")
        else:
            say("[ray] not started: a run on the Ray backend starts a local Ray when it needs one")

    def start_web(self) -> str:
        """Daphne on DAPO_HOST:DAPO_PORT; returns the URL to open."""
        host, port = self.env.get("DAPO_HOST", "127.0.0.1"), self.web_port()
        daphne = [str(VENV_BIN / "daphne"), "-b", host, "-p", str(port), "config.asgi:application"]
        url = f"http://{'127.0.0.1' if host in {'0.0.0.0', '::'} else host}:{port}"
        self.env.setdefault("DAPO_SITE_URL", url)  # notifications link to run pages here (web and worker)
        self.stack.start("web", daphne, self.env, cwd=ROOT, grace_s=10)
        return url

    def web_port(self) -> int:
        port = int(self.env.get("DAPO_PORT", "8000"))
        if not port_busy(port):
            return port
        if "DAPO_PORT" in os.environ:
            sys.exit(f"error: DAPO_PORT={port} is busy; free it or choose another port")
        free = free_ports(1)[0]
        say(f"[web] port {port} is busy: using {free} (set DAPO_PORT to choose)")
        return free

    def run(self) -> None:
        t = self.started
        envsetup.ensure_venv(dev=False)
        t = self.lap("venv", t)
        check_project_files()
        self.claim_state_file()
        self.env["REDIS_URL"] = ensure_redis(self.stack, self.env, self.var_dir, VENV_BIN / "python")
        self.ray_note()
        self.manage("migrate", "--noinput")
        # fingerprinted, gzipped copies that pages name and browsers cache for good (config/static_storage.py)
        self.manage("collectstatic", "--noinput")
        self.env.setdefault("DAPO_STATIC_HASHED", "true")
        t = self.lap("migrate", t)
        # Daphne and Celery spend seconds importing Django (and torch): they start while bootstrap runs.
        url = self.start_web()
        workers = []
        for name, queue in zip(("worker", "worker-short"), queues(self.env).all(), strict=True):
            celery = celery_argv(self.stack.stack_id, queue.name, queue.concurrency, name)
            workers.append(self.stack.start(name, celery, self.env, cwd=ROOT, grace_s=15))
        bootstrap_output = self.manage("bootstrap", *self.bootstrap_args, echo=True)
        t = self.lap("bootstrap", t)
        wait_until(lambda: http_ok(url + LOGIN_PATH), "the login page answering", READY_TIMEOUT_S, self.stack)
        for worker in workers:
            wait_until(
                partial(Stack.log_says, worker, " ready."), f"the Celery {worker.name}", 120, self.stack
            )
        self.lap("services", t)
        self.write_state(url)
        self.banner(url, bootstrap_output)
        while True:
            self.stack.check_alive()
            time.sleep(1)

    def banner(self, url: str, bootstrap_output: list[str]) -> None:
        total = time.monotonic() - self.started
        steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.timings.items())
        say(f"\n  DAPO platform is up in {total:.1f} s ({steps})\n")
        say(f"  open      {url}/")
        for line in [line for line in bootstrap_output if "Log in" in line] or bootstrap_output:
            say(f"  {line}")
        say(f"  logs      {self.stack.log_dir}/<service>.log")
        names = ", ".join(s.name for s in self.stack.services)
        say(f"  services  {names}   (Ctrl-C stops them all)\n")

    def shutdown(self) -> None:
        self.stopping = True
        self.stack.stop_all(hurry=lambda: self.hurry)
        if self.owns_state_file():
            self.state_file.unlink()
        say("[devstack] stopped everything it started")


def demo_env(env: dict[str, str]) -> dict[str, str]:
    """The demo runs with production's settings (no debug mode, the CSP enforced, a secret key generated
    into var/ on first start), except that it serves plain HTTP, so its cookies cannot be secure-only.
    `DJANGO_DEBUG=true make demo` debugs; anything set in the environment wins."""
    env.setdefault("DJANGO_SECURE_COOKIES", "false")
    return env


def celery_argv(stack_id: str, queue: str, concurrency: int, name: str = "worker") -> list[str]:
    """One Celery worker of one queue (platform/config/queues.py names them and their concurrency)."""
    argv = [str(VENV_BIN / "celery"), "-A", "worker.app", "worker", "-Q", queue]
    argv += ["--concurrency", str(concurrency), "--loglevel", "INFO"]
    return argv + ["-n", f"dapo-{name}-{stack_id[:8]}@%h"]


def queues(env: dict[str, str]) -> Any:
    """platform/config/queues.py's ``queues(env)``, loaded from its file: ``platform`` is no package here
    (on sys.path it would shadow the standard library's module of that name)."""
    spec = importlib.util.spec_from_file_location("dapo_queues", ROOT / "platform" / "config" / "queues.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.queues(env)


def check_project_files() -> None:
    missing = [name for name in REQUIRED_FILES if not (ROOT / name).exists()]
    if missing:
        sys.exit(f"error: this checkout lacks {', '.join(missing)}: the platform cannot start without them")


def _is_devstack(pid: int) -> bool:
    try:
        return b"scripts.devstack" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-build-demo", action="store_true", help="do not build a missing demo model")
    args = parser.parse_args()
    supervisor = Supervisor(["--no-build"] if args.no_build_demo else [])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, supervisor.on_signal)
    code = 0
    try:
        supervisor.run()
    except Shutdown as stop:
        say(f"\n[devstack] {stop.args[0]}: stopping")
    except (ServiceDied, TimeoutError, RuntimeError) as error:
        say(f"\n[devstack] error: {error}", file=sys.stderr)
        code = 1
    finally:
        supervisor.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
