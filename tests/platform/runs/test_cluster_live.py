"""Live queue and cluster: a scheduler pass tells a waiting run's page where it stands, and the cluster
page's socket sends a fresh picture on connect and after each change (Channels' communicator)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from runs import scheduling
from runs.models import ClusterCapacity, Run, Status

from dapo.cluster.resources import Capacity, Node
from tests.platform.runs.test_consumers import run, ws

pytestmark = pytest.mark.django_db(transaction=True)  # channels closes connections between calls


def test_a_pass_tells_a_waiting_runs_page_its_place_and_reason(alice, alice_run, settings, queued):
    settings.DAPO_SCHEDULER_SLOTS = 1
    Run.objects.filter(pk=alice_run.pk).update(dispatched_at=None)  # waits in the queue
    scheduling._SHOWN.clear()  # what this process told pages before (another test's run of this id)
    comm = ws(f"/ws/runs/{alice_run.pk}/", alice)

    async def body() -> None:
        assert (await comm.connect(timeout=5))[0]
        assert (await comm.receive_json_from(3))["type"] == "snapshot"
        await sync_to_async(Run.objects.create)(owner=alice, name="holds", config={}, status=Status.RUNNING)
        assert await sync_to_async(scheduling.schedule)() == []
        event = await comm.receive_json_from(3)
        assert event["type"] == "status" and event["run"]["status"] == "queued"
        assert event["run"]["queue"]["position"] == 1
        assert event["run"]["queue"]["reason"] == "waiting for a worker slot (1 of 1 busy)"
        assert event["run"]["queue_shared"] == "waiting for a worker slot (1 of 1 busy)"
        assert await sync_to_async(scheduling.schedule)() == []
        assert await comm.receive_nothing(0.3)  # nothing changed: nothing told
        await comm.disconnect()

    run(body)


def test_the_cluster_socket_sends_a_picture_then_a_fresh_one_after_a_change(alice, alice_run):
    comm = ws("/ws/cluster/", alice)

    async def body() -> None:
        assert (await comm.connect(timeout=5))[0]
        first = await comm.receive_json_from(3)
        ray = next(p for p in first["pools"] if p["name"] == "ray")
        assert first["type"] == "cluster" and not ray["recorded"]
        record: Any = sync_to_async(ClusterCapacity.record)
        await record(Capacity("ray", (Node(16, 4), Node(16, 4))), seen_by="w:1")
        fresh = await comm.receive_json_from(3)
        ray = next(p for p in fresh["pools"] if p["name"] == "ray")
        assert ray["recorded"] and ray["total"] == {"cpus": 32.0, "gpus": 8.0} and len(ray["nodes"]) == 2
        await comm.send_to(text_data="anything")  # ignored
        assert await comm.receive_nothing(0.6)
        await comm.disconnect()

    run(body)
