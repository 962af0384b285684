"""The reaper's look at the shared cluster (worker.cluster_state): recorded with the capacity it implies,
skipped without RAY_ADDRESS, and an outage logged once, never raised into the reaper. The child process that
joins a real cluster is exercised in test_node_loss.py."""

from __future__ import annotations

import logging
from typing import Any

from runs.models import ClusterCapacity

from worker.cluster_state import ClusterWatcher, record_cluster_state

SNAPSHOT = {
    "address": "10.0.0.1:6379",
    "nodes": [
        {"node_id": "a", "host": "head", "alive": True, "total": {"CPU": 4.0, "GPU": 0.0}, "available": {}},
        {"node_id": "b", "host": "gpu-1", "alive": True, "total": {"CPU": 8.0, "GPU": 2.0}, "available": {}},
        {"node_id": "c", "host": "gpu-2", "alive": False, "total": {"CPU": 8.0, "GPU": 2.0}, "available": {}},
    ],
    "groups": [],
}


class Scripted(ClusterWatcher):
    """A watcher whose looks are scripted: a snapshot, or an exception to raise."""

    def __init__(self, answers: list[Any]) -> None:
        super().__init__()
        self.answers = answers

    def look(self) -> dict[str, Any]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_snapshot_is_recorded_with_the_live_nodes_capacity(settings, db) -> None:
    settings.RAY_ADDRESS = "10.0.0.1:6379"
    assert record_cluster_state(Scripted([SNAPSHOT])) == SNAPSHOT
    row = ClusterCapacity.objects.get(kind="ray")
    assert (row.capacity.gpus, row.capacity.cpus) == (2.0, 12.0)  # the dead node's GPUs do not count
    assert row.state == SNAPSHOT and row.seen_by


def test_without_ray_address_nothing_is_looked_at(settings, db) -> None:
    settings.RAY_ADDRESS = ""
    watcher = Scripted([])
    assert record_cluster_state(watcher) is None
    assert not ClusterCapacity.objects.exists() and watcher.child is None


def test_an_outage_is_logged_once_and_its_end_once(settings, db, caplog) -> None:
    settings.RAY_ADDRESS = "10.0.0.1:6379"
    down = RuntimeError("no answer from the Ray cluster within 20 s")
    watcher = Scripted([down, down, down, SNAPSHOT, SNAPSHOT])
    with caplog.at_level(logging.WARNING, logger="worker.cluster_state"):
        results = [record_cluster_state(watcher) for _ in range(5)]
    assert results == [None, None, None, SNAPSHOT, SNAPSHOT]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "cannot be seen: no answer" in lines[0] and "answers again" in lines[1]
    assert ClusterCapacity.objects.get(kind="ray").state == SNAPSHOT


def test_a_snapshot_that_cannot_be_recorded_is_logged_and_the_reaper_goes_on(settings, db, caplog) -> None:
    settings.RAY_ADDRESS = "10.0.0.1:6379"
    with caplog.at_level(logging.ERROR, logger="worker.cluster_state"):
        assert record_cluster_state(Scripted([{"address": "10.0.0.1:6379"}])) == {"address": "10.0.0.1:6379"}
    assert "recording the Ray cluster's state failed" in caplog.text
    assert not ClusterCapacity.objects.exists()
