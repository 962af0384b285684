"""The platform sink stores a step's distributions and the hardware samples, publishes them, and the page,
the API and the websocket snapshot serve them back (thinned), to the run's owner only."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from runs.events import group_name
from runs.models import HardwareSample, Run, StepDistribution
from runs.series import hardware_series, snapshot

from dapo.loop.distributions import LEVELS
from dapo.loop.report import HardwareSample as Record
from dapo.loop.report import StepReport
from worker.sink import PlatformSink

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def claimed(alice_run: Run) -> Run:
    assert alice_run.claim("worker-1")
    return alice_run


@pytest.fixture
def listener(claimed: Run) -> Any:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(claimed.pk), channel)
    return lambda: async_to_sync(layer.receive)(channel)["event"]


def quantiles(shift: float) -> list[float]:
    return [shift + level / 100 for level in LEVELS]


def test_a_steps_distributions_are_stored_replayed_in_place_and_published(claimed, listener):
    sink = PlatformSink(claimed, "worker-1")
    dist = {"reward": quantiles(0.0), "ratio": [*quantiles(1.0)[:-1], float("inf")], "bogus": [1.0]}
    sink.on_step(StepReport(step=1, metrics={"m": 1.0}, distributions=dist))
    event = listener()
    assert event["distributions"]["reward"] == quantiles(0.0)
    assert event["distributions"]["ratio"][-1] is None and "bogus" not in event["distributions"]
    sink.on_step(StepReport(step=1, metrics={"m": 1.0}, distributions={"reward": quantiles(5.0)}))  # a replay
    assert StepDistribution.objects.filter(run=claimed).count() == 2
    data = snapshot(claimed)["distributions"]
    assert data["reward"] == {"steps": [1], "quantiles": [quantiles(5.0)]}


def test_hardware_samples_are_stored_and_published_from_the_monitors_thread(claimed, listener):
    sink = PlatformSink(claimed, "worker-1")
    records = [
        Record(time=100.0 + i, worker=w, values={"cpu_percent": 50.0 + i, "rss_gb": float("nan")})
        for i in range(3)
        for w in ("controller", "learner 0")
    ]
    thread = threading.Thread(target=sink.on_hardware, args=(records,))
    thread.start()
    thread.join()
    event = listener()
    assert event["type"] == "hardware" and len(event["samples"]) == 6
    assert event["samples"][0] == {"time": 100.0, "worker": "controller", "values": {"cpu_percent": 50.0}}
    assert HardwareSample.objects.filter(run=claimed).count() == 6
    claimed.finish("succeeded", worker_id="worker-1")
    sink.on_hardware(records)  # the lease is gone: nothing more is written
    assert HardwareSample.objects.filter(run=claimed).count() == 6


def test_hardware_is_thinned_per_worker_keeping_the_newest(claimed):
    HardwareSample.objects.bulk_create(
        [
            HardwareSample(run=claimed, time=float(t), worker=w, data={"cpu_percent": float(t)})
            for t in range(100)
            for w in ("controller", "learner 0")
        ]
    )
    thinned = hardware_series(claimed, max_per_worker=10)
    for worker in ("controller", "learner 0"):
        times = [s["time"] for s in thinned if s["worker"] == worker]
        assert times == [*range(0, 100, 10), 99]
    assert len(hardware_series(claimed)) == 200


def test_the_api_serves_distributions_and_hardware_to_the_owner_only(claimed, api, bob_api, alice_client):
    StepDistribution.objects.create(run=claimed, step=3, name="length", quantiles=quantiles(10.0))
    HardwareSample.objects.create(run=claimed, time=5.0, worker="controller", data={"rss_gb": 1.5})
    body = api.get(f"/api/runs/{claimed.pk}/distributions/").json()
    assert body["levels"] == list(LEVELS)
    assert body["distributions"] == {"length": {"steps": [3], "quantiles": [quantiles(10.0)]}}
    body = api.get(f"/api/runs/{claimed.pk}/hardware/").json()
    assert body["samples"] == [{"time": 5.0, "worker": "controller", "values": {"rss_gb": 1.5}}]
    assert bob_api.get(f"/api/runs/{claimed.pk}/distributions/").status_code == 404
    assert bob_api.get(f"/api/runs/{claimed.pk}/hardware/").status_code == 404
    assert api.get(f"/api/runs/{claimed.pk}/distributions/?max_points=x").status_code == 400
    page = alice_client.get(f"/runs/{claimed.pk}/")
    assert b'id="distribution-charts"' in page.content and b'id="hardware-charts"' in page.content
