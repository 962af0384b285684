"""`make demo`: set up and run the whole platform on one machine; Ctrl-C stops everything it started.

    python3.11 -m scripts.devstack

Steps: install the lock into .venv (skipped when unchanged) → Redis (reused when one answers on
REDIS_URL) → a private Ray head → migrate → Daphne and the Celery worker, which start while bootstrap
(first user, demo model and dataset) runs → wait for the login page → print the URL and the credentials
→ supervise until a signal or a dead service, then stop everything in reverse order.
Each service logs to var/log/<name>.log. Environment: see README.md, "Configuration".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import FrameType

from scripts import envsetup
from scripts.stack import (
    Service,
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
# Every port Ray would otherwise take at its default (6379 clashes with Redis); each gets a free one.
RAY_PORT_FLAGS = [
    "--port",
    "--dashboard-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
]


class Shutdown(Exception):
    """A signal asked the supervisor to stop."""


class Supervisor:
    def __init__(self, bootstrap_args: list[str]) -> None:
        self.bootstrap_args = bootstrap_args
        self.started = time.monotonic()
        self.env = envsetup.project_env()
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

    def start_ray(self) -> Service | None:
        """A private Ray head on free ports, with token auth (the token lives only in our env)."""
        if self.env.get("RAY_ADDRESS"):
            say(f"[ray] using the cluster at RAY_ADDRESS={self.env['RAY_ADDRESS']}")
            return None
        ports = dict(zip(RAY_PORT_FLAGS, free_ports(len(RAY_PORT_FLAGS)), strict=True))
        # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray 2.60 otherwise turns --node-ip-address 127.0.0.1 into the
        # machine's address and its servers listen on every interface; the worker inherits it (a driver
        # without it resolves 127.0.0.1 the same way and cannot reach this head). Never on a real cluster.
        token = {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        }
        argv = [str(VENV_BIN / "ray"), "start", "--head", "--block", "--disable-usage-stats"]
        argv += ["--node-ip-address", "127.0.0.1", "--temp-dir", str(ray_temp_dir(self.var_dir))]
        argv += ["--num-cpus", self.env.get("DAPO_RAY_NUM_CPUS", "2"), "--include-dashboard=false"]
        argv += [item for flag, port in ports.items() for item in (flag, str(port))]
        ray = self.stack.start("ray", argv, {**self.env, **token}, cwd=ROOT, grace_s=20)
        self.env.update(token, RAY_ADDRESS=f"127.0.0.1:{ports['--port']}")
        return ray

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
        ray = self.start_ray()
        self.manage("migrate", "--noinput")
        # fingerprinted, gzipped copies that pages name and browsers cache for good (config/static_storage.py)
        self.manage("collectstatic", "--noinput")
        self.env.setdefault("DAPO_STATIC_HASHED", "true")
        t = self.lap("migrate", t)
        # Daphne and Celery spend seconds importing Django (and torch): they start while bootstrap runs.
        url = self.start_web()
        if ray is not None:
            wait_until(partial(Stack.log_says, ray, "Ray runtime started"), "the Ray head", 60, self.stack)
        celery = celery_argv(self.stack.stack_id, self.env.get("DAPO_QUEUE", "training"))
        worker = self.stack.start("worker", celery, self.env, cwd=ROOT, grace_s=15)
        bootstrap_output = self.manage("bootstrap", *self.bootstrap_args, echo=True)
        t = self.lap("bootstrap", t)
        wait_until(lambda: http_ok(url + LOGIN_PATH), "the login page answering", READY_TIMEOUT_S, self.stack)
        wait_until(partial(Stack.log_says, worker, " ready."), "the Celery worker", 60, self.stack)
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


def ray_temp_dir(var_dir: Path) -> Path:
    """var/ray, unless that path is too long for the Unix sockets Ray puts under it (107 bytes)."""
    preferred = var_dir / "ray"
    if len(str(preferred)) <= 50:
        return preferred
    short = Path("/tmp") / f"dapo-ray-{hashlib.sha256(str(var_dir).encode()).hexdigest()[:10]}"
    say(f"[ray] {preferred} is too long for Ray's socket paths: using {short}")
    return short


def celery_argv(stack_id: str, queue: str) -> list[str]:
    argv = [str(VENV_BIN / "celery"), "-A", "worker.app", "worker", "-Q", queue, "--concurrency", "1"]
    return argv + ["--loglevel", "INFO", "-n", f"dapo-{stack_id[:8]}@%h"]


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
