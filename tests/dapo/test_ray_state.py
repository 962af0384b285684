"""Ray's state as the platform sees it (dapo.cluster.state) on the session's local Ray: nodes with their free
resources, placement groups mapped back to their run; the Ray backend's group names; and the node-loss
error the worker recognises (dapo.cluster.backends)."""

from __future__ import annotations

import os
import socket
import time
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")

from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402

from dapo.cluster import ray_backend  # noqa: E402
from dapo.cluster.backends import NodeLost, is_node_loss  # noqa: E402
from dapo.cluster.ray_backend import RayBackend  # noqa: E402
from dapo.cluster.ray_cluster import PlacementTimeout  # noqa: E402
from dapo.cluster.state import dead_nodes, group_name, parse_group_name, snapshot  # noqa: E402
from tests.dapo.ray_helpers import tiny_config  # noqa: E402

pytestmark = pytest.mark.ray


def _snapshot_once_cpus_taken(cpus: float, wait_s: float = 20.0) -> dict:
    """A snapshot taken once the node shows ``cpus`` of its CPUs taken. A group is ready once its raylet
    reserved the bundle; the free resources come from the GCS's view, which the raylet updates a moment
    later (Ray's resource syncer), so a snapshot right after ``ready()`` can still show them free."""
    deadline = time.monotonic() + wait_s
    while True:
        state = snapshot(ray)
        node = state["nodes"][0]
        if node["available"]["CPU"] <= node["total"]["CPU"] - cpus or time.monotonic() >= deadline:
            return state
        time.sleep(0.1)


def test_a_snapshot_shows_the_node_its_free_cpus_and_a_runs_group_with_its_node(ray_session) -> None:
    group = placement_group([{"CPU": 0.5}], name=group_name("42", "learner"))
    try:
        assert ray.get(group.ready(), timeout=60)
        state = _snapshot_once_cpus_taken(0.5)
    finally:
        remove_placement_group(group)

    # the GCS this process is joined to (another test of the session may have replaced the session's
    # own Ray, so not necessarily ray_session's address): it answers on that port
    host, port = state["address"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10):
        pass
    [node] = state["nodes"]
    assert node["alive"] is True and node["host"]
    assert node["total"] == {"CPU": float(os.cpu_count() or 1), "GPU": 0.0}
    assert node["available"]["CPU"] <= node["total"]["CPU"] - 0.5  # the group's half CPU is taken
    assert node["available"]["GPU"] == 0.0
    ours = [g for g in state["groups"] if g["name"] == "dapo-run-42-learner"]
    assert ours == [
        {
            "name": "dapo-run-42-learner",
            "run_id": 42,
            "role": "learner",
            "state": "CREATED",
            "bundles": [{"CPU": 0.5, "GPU": 0.0}],
            "node_ids": [node["node_id"]],
        }
    ]
    assert "dapo-run-42-learner" not in [g["name"] for g in snapshot(ray)["groups"]]  # removed: gone


def test_the_ray_backend_names_its_groups_after_its_label(ray_session) -> None:
    config = tiny_config(ray_session.assets, colocate=False, num_rollout_workers=1)
    backend = RayBackend(config, label="7")
    try:
        groups = {g["name"]: g for g in snapshot(ray)["groups"]}
    finally:
        backend.close()
    assert groups["dapo-run-7-learner"]["run_id"] == 7
    assert groups["dapo-run-7-rollout"]["role"] == "rollout"
    assert groups["dapo-run-7-learner"]["bundles"] == [{"CPU": 0.5, "GPU": 0.0}]
    assert not [g for g in snapshot(ray)["groups"] if g["name"].startswith("dapo-run-7-")]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("dapo-run-12-learner", (12, "learner")),
        ("dapo-run-12-rollout", (12, "rollout")),
        ("dapo-run-first-rollout", (None, "rollout")),  # a headless run's output folder
        ("dapo-run-my-run-3-learner", (None, "learner")),
        ("dapo-run-12-critic", (None, None)),
        ("someone-elses-group", (None, None)),
        ("", (None, None)),
    ],
)
def test_a_group_name_gives_back_its_run_and_role(name, parsed) -> None:
    assert parse_group_name(name) == parsed


def test_dead_nodes_are_read_from_rays_alive_flags() -> None:
    nodes = [
        {"NodeID": "a", "Alive": True, "NodeManagerHostname": "gpu-1"},
        {"NodeID": "b", "Alive": False, "NodeManagerHostname": "gpu-2"},
        {"NodeID": "c", "Alive": False, "NodeManagerAddress": "10.0.0.3"},
    ]
    fake = SimpleNamespace(nodes=lambda: nodes)
    assert dead_nodes(fake, ["a", "b", None]) == {"b": "gpu-2"}  # c died too, but held none of ours
    assert dead_nodes(fake, ["c"]) == {"c": "10.0.0.3"}
    assert dead_nodes(fake, ["a"]) == {}


def test_a_node_loss_is_recognised_from_the_runs_error_string_only() -> None:
    error = NodeLost("node ab12 on gpu-2 (with learner 0) died during update")
    assert is_node_loss(f"{type(error).__name__}: {error}")
    assert not is_node_loss("RuntimeError: NodeLost: a message that only mentions it")
    assert not is_node_loss("PlacementTimeout: Ray could not place 1 worker(s)")
    assert not is_node_loss(None) and not is_node_loss("")


class ActorGone(Exception):
    """Stands for Ray's RayActorError in a backend whose failures are scripted."""


def scripted_backend(nodes: list[dict], placed: dict[str, list[str | None]]) -> RayBackend:
    """A RayBackend without a cluster: only what ``_retry`` reads (its retries, Ray's node table, where its
    bundles were placed)."""
    backend = object.__new__(RayBackend)
    backend.config = SimpleNamespace(execution=SimpleNamespace(max_step_retries=1))  # type: ignore[assignment]
    backend._ray = SimpleNamespace(nodes=lambda: nodes)
    backend._recoverable = (ActorGone,)
    backend._placed = placed
    backend.recoveries = 0
    return backend


def lose_the_learner() -> None:
    raise ActorGone("the actor died unexpectedly")


def cannot_place() -> None:
    raise PlacementTimeout("Ray could not place 1 worker(s) of {'GPU': 1.0} (PACK) within 900 s")


def test_a_learner_lost_with_its_node_and_not_placed_again_is_a_node_loss(monkeypatch) -> None:
    monkeypatch.setattr(ray_backend, "NODE_DEATH_WAIT_S", 0.0)
    nodes = [
        {"NodeID": "n1", "Alive": True, "NodeManagerHostname": "head"},
        {"NodeID": "n2", "Alive": False, "NodeManagerHostname": "gpu-2"},
    ]
    backend = scripted_backend(nodes, {"learner": ["n2", "n1"], "rollout": ["n2"]})
    with pytest.raises(NodeLost) as lost:
        backend._retry("update", lose_the_learner, cannot_place)
    message = str(lost.value)
    assert message.startswith("node n2 on gpu-2 (with learner 0, rollout 0) died during update")
    assert "PlacementTimeout: Ray could not place" in message and "learner 1" not in message
    assert backend.recoveries == 1


def test_a_lost_actor_whose_node_lives_fails_as_itself(monkeypatch) -> None:
    monkeypatch.setattr(ray_backend, "NODE_DEATH_WAIT_S", 0.0)
    nodes = [{"NodeID": "n1", "Alive": True}, {"NodeID": "n3", "Alive": False}]  # n3 held none of ours
    backend = scripted_backend(nodes, {"learner": ["n1"]})
    with pytest.raises(PlacementTimeout):
        backend._retry("update", lose_the_learner, cannot_place)
    backend.config.execution.max_step_retries = 0
    with pytest.raises(ActorGone):
        backend._retry("generate", lose_the_learner, cannot_place)
