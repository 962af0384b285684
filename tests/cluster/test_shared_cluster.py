"""Three users share a 2-"GPU" Ray cluster through the platform: a REAL Celery worker (prefork, three slots)
whose runner places each run's real bundles on a real local Ray whose node declares GPUs it does not have
(tests/cluster: fake_gpu_cluster, placement_runner), with the platform's scheduler (runs.scheduling)
deciding what is sent when, from the cluster state the worker's reaper records (worker.cluster_state).

One scenario, in order:

1. Five runs of one GPU queued together: carol's, queued last, goes in the first pass by its priority (10)
   beside alice's first (queued first); bob's go before alice's second because alice already holds half the
   cluster (share); bob's second waits for his first (his limit: one run at once); never more than 2 GPUs
   held, and no run waits in Ray (the scheduler sends only what fits).
2. alice's second run is pre-empted by staff: it checkpoints, goes back to the queue, resumes from its
   checkpoint with every step reported once.
3. Its node is killed: the run goes back to the queue (a NodeLost), waits while the cluster has no GPU, and
   resumes when a new 2-GPU node joins, its steps again continuous.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from runs.models import ClusterCapacity, MetricPoint, Run, Status
from runs.models.quotas import RunQuota

from tests.cluster.fake_gpu_cluster import FakeGpuCluster
from tests.platform.fixtures import make_user
from tests.platform.support import redis_test_url
from tests.reliability.support import build_tiny_assets, tiny_config
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.timeout(420)]


@dataclass
class Shared:
    cluster: FakeGpuCluster
    root: Path

    def attempts(self, run: Run) -> list[dict[str, Any]]:
        """Each attempt of the run: where and when it was placed, and when it let go (placement_runner)."""
        path = self.root / "var" / "runs" / str(run.pk) / "invocations.jsonl"
        if not path.exists():
            return []
        found: list[dict[str, Any]] = []
        for line in map(json.loads, path.read_text().splitlines()):
            if "where" in line:
                found.append(line)
            elif "released_at" in line and found and found[-1]["pid"] == line["pid"]:
                found[-1].update(line)
        return found


@pytest.fixture
def shared(
    django_db_blocker: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shared]:
    from config.celery import app

    app.conf.broker_url = redis_test_url()
    previous_queue, settings.DAPO_QUEUE = settings.DAPO_QUEUE, os.environ["DAPO_QUEUE"]
    # three slots for two GPUs, here and in the worker: what holds runs back is the cluster, not slots
    previous_slots, settings.DAPO_SCHEDULER_SLOTS = settings.DAPO_SCHEDULER_SLOTS, 3
    root = tmp_path_factory.mktemp("shared")
    cluster = FakeGpuCluster(root)
    try:
        cluster.start()
        cluster.add_node("gpu-a", gpus=2)
        env = stack.environment(
            root / "var",
            DAPO_MODEL_ROOTS=str(root),
            DAPO_DATASET_ROOTS=str(root),
            DAPO_RUNNER="tests.cluster.placement_runner:run",
            DAPO_REAPER_INTERVAL_S="1",
            DAPO_TRAINING_CONCURRENCY="3",
            DAPO_SCHEDULER_SLOTS="3",
            **{k: v for k, v in cluster.driver_env().items() if k.startswith("RAY_")},
        )
        with stack.celery_worker(env, root / "var" / "celery.log", concurrency=3):
            yield Shared(cluster, root)
    finally:
        cluster.stop()
        settings.DAPO_QUEUE, settings.DAPO_SCHEDULER_SLOTS = previous_queue, previous_slots
        with django_db_blocker.unblock():
            stack.wait_for_other_sessions_to_leave()


def one_gpu_run(owner: Any, name: str, assets: dict[str, str], steps: int, priority: int = 0) -> Run:
    config = tiny_config(
        assets,
        steps=steps,
        every=2,
        **{
            "execution.backend": "ray",
            "execution.num_learner_workers": 1,
            "execution.gpus_per_worker": 1.0,
            "execution.cpus_per_worker": 0.1,
        },
    )
    run = Run.create_queued(owner=owner, name=name, config=config)
    if priority:
        Run.objects.filter(pk=run.pk).update(priority=priority)
    return run


def steps_of(run: Run) -> list[int]:
    return list(
        MetricPoint.objects.filter(run=run, name="critic/score/mean")
        .order_by("step")
        .values_list("step", flat=True)
    )


def final(run: Run, timeout: float) -> Run:
    return stack.wait_for(
        lambda: (r := Run.objects.get(pk=run.pk)).is_final and r, timeout, f"run {run.name}"
    )


def test_three_users_share_two_gpus_by_priority_share_and_limits_through_preemption_and_a_lost_node(
    shared: Shared, alice: Any, bob: Any, django_user_model: Any
) -> None:
    carol = make_user(django_user_model, "carol", "carol-pass-123")
    RunQuota.objects.create(user=bob, max_running=1)
    assets = build_tiny_assets(shared.root)
    stack.wait_for(
        lambda: (row := ClusterCapacity.objects.filter(kind="ray").first()) and row.capacity.gpus == 2.0,
        60,
        "the worker to record the cluster's 2 GPUs",
    )

    # 1. order, share, limits and concurrency
    with transaction.atomic():  # one scheduling pass sees all five (it runs on commit)
        a1 = one_gpu_run(alice, "a1", assets, steps=60)  # holds half the cluster while bob's two run
        a2 = one_gpu_run(alice, "a2", assets, steps=40)
        b1 = one_gpu_run(bob, "b1", assets, steps=4)
        b2 = one_gpu_run(bob, "b2", assets, steps=4)
        c1 = one_gpu_run(carol, "c1", assets, steps=2, priority=10)
    stack.wait_for(lambda: len(shared.attempts(a2)) == 1 and steps_of(a2), 180, "a2 to start")
    first = {r.name: shared.attempts(r)[0] for r in (a1, b1, b2, c1, a2)}
    order = sorted(first, key=lambda name: first[name]["placed_at"])
    # c1, queued last, goes in the first pass by its priority, beside a1 (queued first); both start at once
    assert set(order[:2]) == {"c1", "a1"} and order[2:] == ["b1", "b2", "a2"], first
    assert first["b2"]["placed_at"] >= first["b1"]["released_at"]  # bob: one run at once
    for name, attempt in first.items():  # never waited in Ray: no GPU came free while it asked for them
        freed = [
            other
            for other, o in first.items()
            if attempt["asked_at"] < o.get("released_at", math.inf) <= attempt["placed_at"]
        ]
        assert not freed, (name, attempt, freed)
        assert attempt["placed_at"] - attempt["asked_at"] < 30.0, (name, attempt)  # seconds on a busy machine

    # 2. pre-emption: back to the queue, resumed from its checkpoint
    stack.wait_for(lambda: (Run.objects.get(pk=a2.pk).last_checkpoint_step or 0) >= 4, 60, "a2's checkpoint")
    assert Run.objects.get(pk=a2.pk).request_preempt("admin")
    stack.wait_for(lambda: len(shared.attempts(a2)) == 2, 60, "a2 to resume")
    resumed = shared.attempts(a2)[1]
    assert resumed["start_step"] == shared.attempts(a2)[0]["last_step"] + 1
    assert Run.objects.get(pk=a2.pk).preemptions == 1

    # 3. a node lost: back to the queue until a new node joins
    stack.wait_for(lambda: max(steps_of(a2)) >= resumed["start_step"] + 2, 60, "a2 to step again")
    shared.cluster.kill_node("gpu-a")
    stack.wait_for(
        lambda: (r := Run.objects.get(pk=a2.pk)).status == Status.QUEUED and r.node_losses == 1,
        60,
        "a2 back in the queue after its node died",
    )
    stack.wait_for(
        lambda: ClusterCapacity.objects.get(kind="ray").capacity.gpus == 0.0, 30, "the dead node's GPUs to go"
    )
    time.sleep(3)  # three reaper and scheduler passes: nothing can hold it, so it stays in the queue
    waiting = Run.objects.get(pk=a2.pk)
    assert waiting.status == Status.QUEUED and waiting.dispatched_at is None
    shared.cluster.add_node("gpu-b", gpus=2)
    done = {r.name: final(r, 120) for r in (a1, b1, b2, c1, a2)}
    assert {n: r.status for n, r in done.items()} == dict.fromkeys(done, Status.SUCCEEDED)
    assert steps_of(a2) == list(range(1, 41))  # every step once, across three attempts
    third = shared.attempts(a2)[-1]
    assert len(shared.attempts(a2)) == 3 and third["where"][0]["node_id"] != resumed["where"][0]["node_id"]

    # never more than the cluster's 2 GPUs held at once
    spans = [
        (a["placed_at"], a["released_at"], a["gpus"])
        for r in (a1, b1, b2, c1, a2)
        for a in shared.attempts(r)
    ]
    for start, _, _ in spans:
        held = sum(g for s, e, g in spans if s <= start < e)
        assert held <= 2.0, (start, spans)
