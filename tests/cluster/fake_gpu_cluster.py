"""A real Ray cluster on this machine whose nodes declare GPUs that do not exist, so that placement and
scheduling by GPU are Ray's own on CPU: a head with no GPU (``ray start --head --num-gpus 0``) and worker
nodes added with ``ray start --address ... --num-gpus N``.

Every port is picked here (as tests/security/test_ray_binding.py does: two Rays of the suite never share a
default port), each node runs in its own process group, and ``kill_node`` SIGKILLs one group (its raylet,
its workers: the node dies as a machine would), ``stop`` every group this cluster started, never another
Ray. The head's GCS calls a node dead after ~2 s of failed health checks (Ray's defaults take ~15 s).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

from dapo.cluster.ray_cluster import SESSION_SUFFIX, SOCKET_PATH_LIMIT, free_port
from tests.dapo.ray_helpers import (
    NODE_PORT_FLAGS,
    RAY,
    alive_nodes,
    kill_group,
    leftover_pids,
    node_port_args,
    start_node,
    stop_groups,
    worker_port_ranges,
)

REPO = Path(__file__).resolve().parents[2]
FAST_NODE_DEATH = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


class FakeGpuCluster:
    def __init__(self, root: Path) -> None:
        temp = root / "ray"
        if len(str(temp)) + SESSION_SUFFIX > SOCKET_PATH_LIMIT:  # Ray's unix socket paths
            temp = Path(tempfile.mkdtemp(prefix="fg-", dir="/tmp")) / "ray"
        self.temp_dir, self.logs = temp, root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        from ray.util import get_node_ip_address  # Ray turns 127.0.0.1 into this; the nodes must agree

        self.ip = get_node_ip_address()
        self.port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env |= {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(16),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": str(REPO),
            **FAST_NODE_DEATH,
        }
        self.nodes: dict[str, subprocess.Popen] = {}
        """The live nodes by name (the head is "head")."""
        self.started: list[subprocess.Popen] = []
        """Every node started, killed ones too: stop() and leftover_pids() see them all."""
        self._worker_ports = worker_port_ranges()

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def driver_env(self) -> dict[str, str]:
        """The environment of a process that joins this cluster (a Celery worker, a controller)."""
        return {**self.env, "RAY_ADDRESS": self.address}

    def start(self, cpus: int = 1) -> None:
        """The head: CPUs for the drivers' helpers, no GPU; runs are placed on the GPU nodes."""
        head = ["--head", "--port", str(self.port), "--include-dashboard", "false"]
        self._start_node("head", head, cpus, 0)

    def add_node(self, name: str, gpus: int, cpus: int = 2) -> None:
        self._start_node(name, ["--address", self.address], cpus, gpus)

    def _start_node(self, name: str, args: list[str], cpus: int, gpus: int) -> None:
        launch = partial(self._launch, name, args, cpus, gpus)
        start_node(launch, lambda: self.wait_for_nodes(len(self.nodes)), self.logs / f"{name}.log")

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's whole process group, as a machine that loses power."""
        proc = self.nodes.pop(name)
        kill_group(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def _launch(self, name: str, args: list[str], cpus: int, gpus: int) -> subprocess.Popen:
        low = next(self._worker_ports)
        flags = (*NODE_PORT_FLAGS, "--dashboard-agent-grpc-port")
        flags += ("--dashboard-port",) if name == "head" else ()
        cmd = [RAY, "start", "--block", *args, "--node-ip-address", self.ip, "--temp-dir", str(self.temp_dir)]
        cmd += ["--num-cpus", str(cpus), "--num-gpus", str(gpus), "--disable-usage-stats"]
        cmd += node_port_args(flags, taken=(self.port,))
        cmd += ["--min-worker-port", str(low), "--max-worker-port", str(low + 19)]
        with (self.logs / f"{name}.log").open("wb") as log:
            self.nodes[name] = subprocess.Popen(
                cmd, env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append(self.nodes[name])
        return self.nodes[name]

    def wait_for_nodes(self, count: int, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive_nodes() != count:
            for name, proc in self.nodes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"ray start of {name} exited; see {self.logs / name}.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} Ray node(s) not up within {timeout_s} s; logs in {self.logs}")
            time.sleep(1.0)

    def alive_nodes(self) -> int:
        return alive_nodes(self.address, self.env)

    def stop(self) -> None:
        stop_groups(self.started)
        self.nodes = {}

    def leftover_pids(self) -> list[int]:
        return leftover_pids(self.started)
