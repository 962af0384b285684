"""The ports the suite's own Ray clusters start on (tests.dapo.ray_helpers, tests.cluster.fake_gpu_cluster):
distinct picks, and a node whose start lost a port race started once more on fresh ports, never more."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.cluster.fake_gpu_cluster import FakeGpuCluster  # noqa: E402
from tests.dapo.ray_helpers import (  # noqa: E402
    NODE_PORT_FLAGS,
    TwoNodeCluster,
    lost_a_port_race,
    node_port_args,
)

# What `ray start` printed when two of its flags got the same port (the suite's log of that start, trimmed).
RAY_REFUSED = (
    "ValueError: Ray component metrics_export is trying to use a port number 48315 that is used by other "
    "components.\nPort information: {'dashboard_agent_http': 48315, 'metrics_export': 48315}\n"
)


def test_a_nodes_ports_are_distinct_and_avoid_the_ports_taken_before() -> None:
    for _ in range(50):
        gcs = int(node_port_args(("--port",))[1])
        args = node_port_args((*NODE_PORT_FLAGS, "--dashboard-port"), taken=(gcs,))
        flags, ports = args[::2], [int(p) for p in args[1::2]]
        assert flags == [*NODE_PORT_FLAGS, "--dashboard-port"]
        assert len(set(ports)) == len(ports) and gcs not in ports
        assert all(1024 < p < 65536 and p != 6379 for p in ports)


@pytest.mark.parametrize(
    ("log", "lost"),
    [
        (RAY_REFUSED, True),
        ("OSError: [Errno 98] Address already in use", True),
        ("RuntimeError: Failed to start the GCS: timed out\n", False),
        ("", False),
    ],
)
def test_a_lost_port_race_is_told_from_other_failures(tmp_path: Path, log: str, lost: bool) -> None:
    path = tmp_path / "node.log"
    path.write_text(log)
    assert lost_a_port_race(path) is lost
    assert lost_a_port_race(tmp_path / "missing.log") is False


class Scripted(FakeGpuCluster):
    """A cluster whose nodes are stand-in processes: each launch runs the next script, and a node counts as up
    once its process said so, while it runs."""

    def __init__(self, root: Path, scripts: list[str]) -> None:
        super().__init__(root)
        self.scripts = scripts
        self.launches = 0

    def _launch(self, name: str, args: list[str], cpus: int, gpus: int) -> subprocess.Popen:
        self.nodes[name] = stand_in(self.scripts[self.launches], self.logs / f"{name}.log")
        self.launches += 1
        self.started.append(self.nodes[name])
        return self.nodes[name]

    def alive_nodes(self) -> int:
        return up(self.nodes, self.logs)


class ScriptedTwoNodes(TwoNodeCluster):
    """The two-node cluster with stand-in nodes, as ``Scripted``."""

    def __init__(self, root: Path, scripts: list[str]) -> None:
        super().__init__(root / "ray")
        self.scripts = scripts
        self.launches = 0

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        self.nodes[name] = stand_in(self.scripts[self.launches], self.temp_dir.parent / f"{name}.log")
        self.launches += 1
        self.procs.append(self.nodes[name])
        return self.nodes[name]

    def alive_nodes(self) -> int:
        return up(self.nodes, self.temp_dir.parent)


def stand_in(script: str, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def up(nodes: dict[str, subprocess.Popen], logs: Path) -> int:
    """The stand-in nodes that said they are up and still run."""
    return sum(p.poll() is None and "node up" in (logs / f"{n}.log").read_text() for n, p in nodes.items())


REFUSE = f"print({RAY_REFUSED!r}); raise SystemExit(1)"
OTHER_FAILURE = "print('RuntimeError: the GCS did not answer'); raise SystemExit(1)"
RUN = "import time; print('node up', flush=True); time.sleep(60)"


def test_a_node_that_lost_a_port_race_starts_once_more_and_keeps_the_first_log(tmp_path: Path) -> None:
    cluster = Scripted(tmp_path, [REFUSE, RUN])
    try:
        cluster.add_node("gpu-a", gpus=2)
        assert cluster.launches == 2 and cluster.alive_nodes() == 1
        assert "metrics_export" in (cluster.logs / "gpu-a-try1.log").read_text()
    finally:
        cluster.stop()
    assert cluster.leftover_pids() == []


@pytest.mark.parametrize("scripts", [[REFUSE, REFUSE], [OTHER_FAILURE, RUN]], ids=["twice", "other-failure"])
def test_a_second_port_race_or_another_failure_is_reported(tmp_path: Path, scripts: list[str]) -> None:
    cluster = Scripted(tmp_path, scripts)
    try:
        with pytest.raises(RuntimeError, match="ray start of gpu-a exited"):
            cluster.add_node("gpu-a", gpus=2)
    finally:
        cluster.stop()
    assert cluster.launches == (2 if scripts[1] == REFUSE else 1)


def test_the_two_node_clusters_head_starts_once_more_after_a_port_race(tmp_path: Path) -> None:
    """The retry waits on the node started again, not on the one that exited."""
    cluster = ScriptedTwoNodes(tmp_path, [REFUSE, RUN, RUN])
    try:
        cluster.start()
        assert cluster.launches == 3 and cluster.alive_nodes() == 2
        assert "metrics_export" in (tmp_path / "head-try1.log").read_text()
    finally:
        cluster.stop()
    assert cluster.leftover_pids() == []
