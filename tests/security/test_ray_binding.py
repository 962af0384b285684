"""The local Ray that the platform starts must listen on loopback only: anyone who reaches a Ray port can
run code on the machine (token auth is the second line, not the first).

The platform starts a local Ray in one way, tested as it is: a worker without RAY_ADDRESS
(dapo.cluster.ray_cluster.connect(): `ray.init(...)`; `make demo` starts no Ray of its own). A head started
by hand (`python -m dapo.cluster.ray_start --head --node-ip-address 127.0.0.1 ...`, `ray start` with patient
start-up timeouts, as docs/troubleshooting.md suggests) is held
to loopback with the setting below. The listening TCP/UDP sockets of every process of that Ray are read
from /proc.

Finding (Ray 2.60): Ray turns a loopback --node-ip-address into the machine's address
(ray._private.services.resolve_ip_for_localhost), so the GCS and raylet gRPC servers listen on every
interface and the runtime-env agent on the machine's IP. With RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in
the environment of the Ray processes AND of the drivers that join them, Ray keeps 127.0.0.1 and every
server listens on loopback (the last test). dapo/cluster/ray_cluster.py sets it for the local Ray it
starts; the first test holds it to that.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.stack import Service, Stack, free_ports, stack_pids

REPO = Path(__file__).resolve().parents[2]
LOOPBACK_FIX = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class ExposedRay(AssertionError):
    """A Ray server listens beyond loopback (the expected failure: a failed start is not one)."""


pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def listening_sockets(pids: list[int]) -> list[tuple[str, str, int, int]]:
    """(table, address, port, pid) of every listening TCP and bound UDP socket the processes hold."""
    inodes: dict[int, int] = {}
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes[int(target[8:-1])] = pid
    found = []
    for table, family in (
        ("tcp", socket.AF_INET),
        ("tcp6", socket.AF_INET6),
        ("udp", socket.AF_INET),
        ("udp6", socket.AF_INET6),
    ):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            inode, state = int(fields[9]), fields[3]
            if inode not in inodes or (table.startswith("tcp") and state != "0A"):  # 0A: LISTEN
                continue
            hex_address, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_address)
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # per 32-bit word, host order
            found.append((table, socket.inet_ntop(family, raw), int(hex_port, 16), inodes[inode]))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _wait(service: Service, text: str, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while not Stack.log_says(service, text):
        if service.process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{service.name} did not start:\n{service.log_path.read_text()[-3000:]}")
        time.sleep(0.5)


def _assert_loopback_only(stack: Stack) -> None:
    time.sleep(2)  # the agents bind a moment after the head says it started
    sockets = listening_sockets(stack_pids(stack.stack_id))
    assert len(sockets) >= 3, f"found no Ray servers: {sockets}"  # GCS, raylet (node and object manager)
    exposed = [s for s in sockets if not is_loopback(s[1])]
    if exposed:
        raise ExposedRay(f"Ray listens beyond loopback: {exposed}")


@dataclass
class Head:
    stack: Stack
    env: dict[str, str]


@pytest.fixture
def ray_head_env(tmp_path: Path) -> Iterator[Head]:
    """A stack to start a hand-made Ray head in (stopped with everything it spawned) and its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"PYTHONPATH": str(REPO)}
    # The head and its driver share a token of their own, as a run's local Ray does (ensure_auth_token):
    # one run saw the driver refused with "InvalidAuthToken" while other tests' Rays ran beside it.
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    head = Head(Stack(tmp_path / "log"), env)
    try:
        yield head
    finally:
        head.stack.stop_all()


def _start_head(head: Head, attempts: int = 2) -> None:
    """`ray start --head` on loopback, every port of its own, a short temp dir (Ray's socket paths).

    Tried twice, each with fresh ports: once in CI a head's GCS never answered in 200 s (its node info RPC
    ran past its deadline the whole time), which is what a port taken between our pick and Ray's bind looks
    like. What this test checks is where a started Ray listens, so a failed start is retried, and a second
    failure reports the tails of Ray's own logs."""
    failures = []
    for attempt in range(1, attempts + 1):
        ports = iter(free_ports(6))
        port = next(ports)
        temp = Path(tempfile.mkdtemp(prefix="dapo-ray-", dir="/tmp"))
        low = 20000 + (port % 500) * 20  # worker ports below the kernel's ephemeral range, spread per start
        # dapo.cluster.ray_start is `ray start` with patient start-up timeouts (docs/troubleshooting.md):
        # plain `ray start` gave up after its fixed 30 s in CI, with the suite's other workers busy beside it.
        argv = [sys.executable, "-m", "dapo.cluster.ray_start", "--head", "--block", "--disable-usage-stats"]
        argv += ["--node-ip-address", "127.0.0.1", "--port", str(port), "--temp-dir", str(temp)]
        argv += ["--num-cpus", "1", "--include-dashboard=false"]
        for flag in ("dashboard-agent-listen-port", "node-manager-port", "object-manager-port"):
            argv += [f"--{flag}", str(next(ports))]
        for flag in ("metrics-export-port", "runtime-env-agent-port"):
            argv += [f"--{flag}", str(next(ports))]
        argv += ["--min-worker-port", str(low), "--max-worker-port", str(low + 19)]
        env = head.env | {"DAPO_RAY_NODE_WAIT_S": "150"}
        service = head.stack.start(f"ray-{attempt}", argv, env, cwd=REPO, grace_s=20)
        try:
            _wait(service, "Ray runtime started", timeout=200)
        except AssertionError as e:
            failures.append(f"attempt {attempt}: {e}\n{_ray_log_tails(temp)}")
            head.stack.stop_all()
            continue
        head.env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
        return
    raise AssertionError("\n\n".join(failures))


def _ray_log_tails(temp: Path) -> str:
    logs = temp / "session_latest" / "logs"
    tails = []
    for name in ("gcs_server.out", "gcs_server.err", "raylet.out", "raylet.err"):
        path = logs / name
        if path.exists():
            tails.append(f"--- {name}\n" + path.read_text(errors="replace")[-1500:])
    return "\n".join(tails) or f"(no Ray logs under {logs})"


def test_a_workers_local_ray_listens_on_loopback_only(tmp_path, monkeypatch):
    stack = Stack(tmp_path / "log")
    env = {**os.environ, "DAPO_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": str(REPO)}
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    code = (
        "import time; from dapo.cluster.ray_cluster import connect; connect(); "
        "print('CONNECTED', flush=True); time.sleep(600)"
    )
    try:
        _wait(stack.start("driver", [sys.executable, "-c", code], env, cwd=REPO), "CONNECTED")
        _assert_loopback_only(stack)
    finally:
        stack.stop_all()


def test_the_loopback_setting_keeps_a_hand_made_head_and_its_driver_on_loopback(ray_head_env):
    ray_head_env.env.update(LOOPBACK_FIX)
    _start_head(ray_head_env)
    code = (
        "import ray, time; ray.init(); "
        "print('TASK', ray.get(ray.remote(lambda: 6 * 7).remote()), flush=True); time.sleep(600)"
    )
    driver = ray_head_env.stack.start("driver", [sys.executable, "-c", code], ray_head_env.env, cwd=REPO)
    _wait(driver, "TASK 42")  # a worker's way in: RAY_ADDRESS=127.0.0.1:<port> still works
    _assert_loopback_only(ray_head_env.stack)
