"""A node that dies with a run's workers, on a real Ray cluster whose nodes declare fake GPUs: the run ends
with a NodeLost naming the node (found by the product's detection, dapo.cluster.state), and resumes from
its last checkpoint, with no step lost, once a new node can hold it.

The run is the cluster harness's runner (tests/cluster/placement_runner.py: the run's real bundles, placed
with the product's reserve(), an actor pinged in each every step) in a process of its own, so this test
process never joins a Ray (the session's local Ray may start in it later)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from dapo.cluster.backends import is_node_loss  # noqa: E402
from tests.cluster.fake_gpu_cluster import REPO, FakeGpuCluster  # noqa: E402
from worker.cluster_state import ClusterWatcher  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeGpuCluster]:
    cluster = FakeGpuCluster(tmp_path)
    try:
        cluster.start()
        cluster.add_node("gpu-a", gpus=2)
        yield cluster
    finally:
        cluster.stop()
        assert cluster.leftover_pids() == [], "processes of the test cluster survived stop()"


class Run:
    """The harness runner in its own process; ``events`` fills as it prints them."""

    def __init__(self, cluster: FakeGpuCluster, out: Path, steps: int, resume: bool = False) -> None:
        args = [sys.executable, "-m", "tests.cluster.placement_runner", "--out", str(out), "--gpus", "1"]
        args += ["--steps", str(steps)] + (["--resume"] if resume else [])
        self.log = (out.parent / f"{out.name}.{int(time.time() * 1000)}.log").open("w")
        self.proc = subprocess.Popen(
            args, env=cluster.driver_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == kind]

    def wait_until(self, what: str, predicate: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline or (self.proc.poll() is not None and not predicate()):
                self.stop()
                raise AssertionError(
                    f"{what}: not within {timeout_s} s; events {self.events[-5:]}, see {self.log.name}"
                )
            time.sleep(0.2)

    def finished(self, timeout_s: float) -> dict[str, Any]:
        self.wait_until("the run's end", lambda: bool(self.of("finish")), timeout_s)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        return self.of("finish")[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def attempts(out: Path) -> list[dict[str, Any]]:
    """Each attempt's placement, as the runner noted it (invocations.jsonl)."""
    lines = [json.loads(line) for line in (out / "invocations.jsonl").read_text().splitlines()]
    return [line for line in lines if "where" in line]


def looking_at(cluster: FakeGpuCluster, settings: Any, monkeypatch: Any) -> ClusterWatcher:
    """The reaper's watcher of the cluster (worker.cluster_state), as a worker with RAY_ADDRESS runs it."""
    settings.RAY_ADDRESS = cluster.address
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        monkeypatch.setenv(key, cluster.env[key])
    return ClusterWatcher()


def test_a_dead_node_fails_its_run_as_node_lost_and_it_resumes_on_a_new_node(
    cluster, tmp_path, settings, monkeypatch
) -> None:
    out = tmp_path / "1"  # the platform's run directory: the run's id labels its placement group
    watcher = looking_at(cluster, settings, monkeypatch)
    first = Run(cluster, out, steps=200)
    try:
        first.wait_until(
            "a checkpoint after step 4", lambda: any(c["step"] >= 4 for c in first.of("checkpoint")), 90
        )
        [placed] = attempts(out)[0]["where"]
        assert len(placed["gpus"]) == 1  # a fake GPU of gpu-a: Ray placed the bundle by GPU
        before = watcher.look()
        cluster.kill_node("gpu-a")
        finish = first.finished(timeout_s=60)
        after = watcher.look()
    finally:
        first.stop()
        watcher.close()

    node = {n["node_id"]: n for n in before["nodes"]}[placed["node_id"]]
    assert node["alive"] and node["total"]["GPU"] == 2.0 and node["available"]["GPU"] == 1.0
    [group] = [g for g in before["groups"] if g["run_id"] == 1]
    assert group["name"] == "dapo-run-1-learner" and group["state"] == "CREATED"
    assert group["bundles"] == [{"CPU": 0.1, "GPU": 1.0}] and group["node_ids"] == [placed["node_id"]]
    assert {n["node_id"]: n["alive"] for n in after["nodes"]}[placed["node_id"]] is False
    assert not [g for g in after["groups"] if g["run_id"] == 1]  # released when the run ended
    assert finish["status"] == "failed" and is_node_loss(finish["error"]), finish
    assert placed["node_id"] in finish["error"] and "learner 0" in finish["error"]
    steps = [e["step"] for e in first.of("step")]
    assert steps == list(range(1, len(steps) + 1))
    saved = max(c["step"] for c in first.of("checkpoint"))

    cluster.add_node("gpu-b", gpus=2)
    second = Run(cluster, out, steps=saved + 3, resume=True)
    try:
        finish = second.finished(timeout_s=90)
    finally:
        second.stop()
    assert finish == {"event": "finish", "status": "succeeded", "error": None}
    assert second.of("start") == [{"event": "start", "start_step": saved + 1}]
    assert [e["step"] for e in second.of("step")] == [saved + 1, saved + 2, saved + 3]
    assert attempts(out)[-1]["where"][0]["node_id"] != placed["node_id"]  # the new node holds it
