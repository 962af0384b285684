"""The worker records the cluster a run sees (runs.models.ClusterCapacity): this machine for a local run,
the Ray cluster's nodes when a Ray run reports them after connecting."""

from __future__ import annotations

import os

import pytest
from runs.models import ClusterCapacity

from dapo.cluster.resources import Capacity, Node, report_capacity
from worker import tasks

pytestmark = pytest.mark.django_db


def test_a_local_run_sees_the_cpus_it_may_run_on_and_no_gpu_on_a_cpu_build():
    seen = tasks.local_capacity()
    assert seen == Capacity("local", (Node(float(len(os.sched_getaffinity(0))), 0.0),))


def test_a_capacity_a_run_reports_is_recorded_with_its_time_and_worker():
    report_capacity(Capacity("ray", (Node(8, 2), Node(4, 0))))  # what RayBackend does after connecting
    capacity, seen_at = ClusterCapacity.latest("ray")
    assert (capacity.cpus, capacity.gpus) == (12, 2) and seen_at is not None
    assert ClusterCapacity.objects.get(kind="ray").seen_by.endswith(f":{os.getpid()}")
    assert ClusterCapacity.latest("local") is None
