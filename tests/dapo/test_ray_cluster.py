"""A local Ray that does not start (a saturated machine): retried, what a try left killed, then an error
naming the fix. Ray itself is replaced here; the real start under load is tests/test_demo_under_load.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dapo.cluster import ray_cluster

ray = pytest.importorskip("ray")


def test_a_local_ray_that_times_out_is_tried_again_then_fails_with_the_fix(monkeypatch, tmp_path):
    leftovers: list[subprocess.Popen[bytes]] = []
    seen: list[dict[str, str]] = []

    def timed_out(**kwargs: object) -> None:
        from ray._private import parameter

        seen.append({k: os.environ.get(k, "") for k in ray_cluster.START_TIMEOUTS})
        assert parameter.RayParams(temp_dir=str(tmp_path)).dashboard_agent_listen_port == 0  # the OS's pick
        leftovers.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        raise Exception("The current node timed out during startup.")  # what Ray raises

    monkeypatch.setattr(ray, "init", timed_out)
    for name in ray_cluster.START_TIMEOUTS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError) as failed:
        ray_cluster.start_local(tmp_path, attempts=3)
    message = str(failed.value)
    assert "did not start in 3 attempt(s) (The current node timed out during startup.)" in message
    assert "DAPO_RAY_START_ATTEMPTS" in message and "RAY_ADDRESS" in message
    assert "docs/troubleshooting.md" in message and f"{tmp_path}/session_latest/logs" in message
    assert len(leftovers) == 3 and seen[0] == ray_cluster.START_TIMEOUTS
    deadline = time.monotonic() + 10
    while any(p.poll() is None for p in leftovers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(p.poll() is not None for p in leftovers)  # each failed try's processes were killed
    from ray._private import parameter

    assert parameter.RayParams(temp_dir=str(tmp_path)).dashboard_agent_listen_port == 52365  # restored


def test_a_second_try_that_starts_is_returned(monkeypatch, tmp_path):
    calls = []

    def flaky(**kwargs: object) -> str:
        calls.append(kwargs)
        if len(calls) == 1:
            raise Exception("The current node timed out during startup.")
        return "context"

    monkeypatch.setattr(ray, "init", flaky)
    assert ray_cluster.start_local(tmp_path, attempts=3) == "context"
    assert len(calls) == 2 and calls[1]["_temp_dir"] == str(tmp_path)


def test_the_descendants_of_a_process_are_found_through_proc():
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in ray_cluster.descendants()
    finally:
        child.kill()
        child.wait()


def test_the_raylets_registration_is_awaited_past_rays_fixed_30_s(monkeypatch):
    """Ray's Node.__init__ gives up 30 s after its first `services.get_node`; within the patient wait each
    of those calls keeps asking until the node is there, so a slow registration is not a failed start."""
    from ray._private import services

    answers = iter([RuntimeError("RPC error: Deadline Exceeded")] * 3 + ["node info"])

    def registering(gcs_address: str, node_id: str) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(services, "get_node", registering)
    with ray_cluster.patient_node_registration(30.0):
        assert services.get_node("127.0.0.1:1", "n") == "node info"
    assert services.get_node is registering  # put back afterwards

    def never(gcs_address: str, node_id: str) -> str:
        raise RuntimeError("not registered")

    monkeypatch.setattr(services, "get_node", never)
    started = time.monotonic()
    with ray_cluster.patient_node_registration(1.0), pytest.raises(RuntimeError, match="not registered"):
        services.get_node("127.0.0.1:1", "n")
    assert 1.0 <= time.monotonic() - started < 5.0


def test_a_local_rays_start_runs_inside_the_patient_wait(monkeypatch, tmp_path):
    from ray._private import services

    original = services.get_node
    patched: list[bool] = []

    def init(**kwargs: object) -> str:
        patched.append(services.get_node is not original)
        return "context"

    monkeypatch.setattr(ray, "init", init)
    assert ray_cluster.start_local(tmp_path, attempts=1) == "context"
    assert patched == [True] and services.get_node is original
