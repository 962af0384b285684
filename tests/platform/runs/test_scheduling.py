"""The admission scheduler (runs.scheduling) as database tests: slots, pools and what they hold, the
ranking (priority, then the owner's dominant share, then queue time), backfill, per-user limits, and the
reasons a waiting run is given, with capacity records made here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from runs.models import ClusterCapacity, Kind, QuotaExceeded, Run, RunQuota, Status
from runs.scheduling import queue_entry, queue_view, schedule

from dapo.cluster.resources import Capacity, Node
from dapo.runconfig.presets import get_preset
from tests.platform.fixtures import make_user

pytestmark = pytest.mark.django_db

T0 = timezone.now() - timedelta(hours=1)


def run(owner: Any, name: str, *, gpus: float = 0, cpus: float = 1, pool: str = "ray", **fields: Any) -> Run:
    """A run waiting in the queue that asks for ``gpus`` and ``cpus`` of ``pool``; ``minute``: when it was
    queued (minutes after T0)."""
    minute = fields.pop("minute", Run.objects.count())
    request = {"pool": pool, "cpus": cpus, "gpus": gpus, "text": f"needs {gpus:g} GPUs, {cpus:g} CPUs"}
    return Run.objects.create(
        owner=owner,
        name=name,
        config={"execution": {"backend": pool}},
        request=request,
        queued_at=T0 + timedelta(minutes=minute),
        **fields,
    )


def holding(owner: Any, name: str, **kw: Any) -> Run:
    """A run that holds room: running."""
    return run(owner, name, status=Status.RUNNING, dispatched_at=T0, **kw)


def ray_gpus(n: int, cpus: int = 64) -> None:
    ClusterCapacity.record(Capacity("ray", tuple(Node(cpus, 1) for _ in range(n))), seen_by="w:1")


def reasons(user: Any) -> dict[str, str]:
    names = dict(Run.objects.values_list("pk", "name"))
    return {names[e["id"]]: e["reason"] for e in queue_view(user)}


@pytest.fixture
def carol(django_user_model: Any) -> Any:
    return make_user(django_user_model, "carol", "carol-pass-123")


def test_no_more_runs_than_slots_are_dispatched_and_the_rest_say_they_wait_for_a_slot(alice, settings):
    settings.DAPO_SCHEDULER_SLOTS = 2
    runs = [run(alice, f"r{i}", pool="local") for i in range(3)]  # no local capacity recorded: slots only
    assert schedule() == [runs[0].pk, runs[1].pk]
    assert schedule() == []  # a second pass finds nothing more to do
    assert reasons(alice) == {"r2": "waiting for a worker slot (2 of 2 busy)"}
    Run.objects.filter(pk=runs[0].pk).update(status=Status.SUCCEEDED)
    assert schedule() == [runs[2].pk]


def test_higher_priority_goes_first_whatever_its_queue_time(alice, settings):
    settings.DAPO_SCHEDULER_SLOTS = 1
    old, urgent = run(alice, "old", pool="local", minute=0), run(alice, "urgent", pool="local", minute=9)
    Run.objects.filter(pk=urgent.pk).update(priority=5)
    assert schedule() == [urgent.pk]
    entry = queue_view(alice)[0]
    assert (entry["id"], entry["position"], entry["ahead"]) == (old.pk, 1, 0)


def test_the_user_holding_less_of_the_pool_goes_first(alice, bob, settings):
    settings.DAPO_SCHEDULER_SLOTS = 10
    ray_gpus(2)
    holding(alice, "alice-running", gpus=1)
    alices, bobs = run(alice, "alice-next", gpus=1, minute=0), run(bob, "bob-next", gpus=1, minute=5)
    assert schedule() == [bobs.pk]  # alice holds half the GPUs, bob none: bob's later run goes first
    assert reasons(alice) == {"alice-next": "needs 1 GPU; 0 free"}
    assert alices.pk not in schedule()


def test_shares_are_recomputed_after_each_admission_of_a_pass(alice, bob, carol, settings):
    settings.DAPO_SCHEDULER_SLOTS = 10
    ray_gpus(3)
    a1, a2 = run(alice, "a1", gpus=1, minute=0), run(alice, "a2", gpus=1, minute=1)
    b1 = run(bob, "b1", gpus=1, minute=2)
    c1 = run(carol, "c1", gpus=1, minute=3)
    assert schedule() == [a1.pk, b1.pk, c1.pk]  # one each, though alice queued two first
    assert reasons(alice) == {"a2": "needs 1 GPU; 0 free"}
    assert a2.pk not in schedule()


def test_the_dominant_share_counts_cpus_where_those_are_what_a_user_holds(alice, bob, settings):
    settings.DAPO_SCHEDULER_SLOTS = 10
    ray_gpus(2, cpus=4)  # 8 CPUs, 2 GPUs
    holding(alice, "alice-cpu-heavy", cpus=6)  # 75 % of the CPUs, no GPU
    holding(bob, "bob-gpu", gpus=1, cpus=1)  # 50 % of the GPUs
    alices, bobs = run(alice, "a", gpus=1, cpus=1, minute=0), run(bob, "b", gpus=1, cpus=1, minute=1)
    assert schedule() == [bobs.pk]  # bob's dominant share (0.5) is below alice's (0.75)
    assert alices.pk in [e["id"] for e in queue_view(alice)]


def test_backfill_a_run_that_fits_passes_a_bigger_one_that_does_not(alice, bob, settings):
    settings.DAPO_SCHEDULER_SLOTS = 10
    ray_gpus(2)
    holding(bob, "bob-running", gpus=1)
    big = run(alice, "big", gpus=2, minute=0)
    small = run(alice, "small", gpus=1, minute=1)
    later_big = run(alice, "later-big", gpus=2, minute=2)
    assert schedule() == [small.pk]
    assert reasons(alice) == {"big": "needs 2 GPUs; 0 free", "later-big": "needs 2 GPUs; 0 free; 1 run ahead"}
    assert [e["id"] for e in queue_view(alice)] == [big.pk, later_big.pk]


def test_a_run_bigger_than_the_pool_says_so(alice, settings):
    ray_gpus(2)
    run(alice, "huge", gpus=4)
    assert schedule() == []
    assert reasons(alice) == {"huge": "needs 4 GPUs; the ray pool has 2 in all"}


def test_a_users_running_limit_holds_their_runs_and_not_the_others(alice, bob, settings):
    settings.DAPO_SCHEDULER_SLOTS = 10
    RunQuota.objects.create(user=alice, max_running=1)
    holding(alice, "alice-running", pool="local")
    mine, bobs = run(alice, "mine", pool="local", minute=0), run(bob, "bobs", pool="local", minute=1)
    assert schedule() == [bobs.pk]
    expected = "waits for your limit of 1 run at once (admin › Runs › Run quotas)"
    assert reasons(alice) == {"mine": expected}
    assert queue_view(bob)[0]["reason"] == expected.replace("your", "its owner's")
    assert queue_entry(Run.objects.get(pk=mine.pk), alice)["position"] == 1


def test_a_users_gpu_limit_and_the_site_default(alice, bob, settings):
    settings.DAPO_SCHEDULER_SLOTS = 10
    settings.DAPO_QUOTA_GPUS = 2  # the site's default
    ray_gpus(8)
    holding(alice, "alice-running", gpus=1)
    two, one = run(alice, "two", gpus=2, minute=0), run(alice, "one", gpus=1, minute=1)
    bobs = run(bob, "bobs", gpus=2, minute=2)
    # bob holds nothing, so he goes first; alice's 2-GPU run would make 3 of her cap's 2, her 1-GPU one fits
    assert schedule() == [bobs.pk, one.pk]
    assert reasons(alice) == {"two": "waits for your limit of 2 GPUs at once (admin › Runs › Run quotas)"}
    assert two.pk not in schedule()


def test_the_queued_cap_refuses_a_launch_past_it(alice, settings, paths):
    RunQuota.objects.create(user=alice, max_queued=1)
    config = get_preset("tiny_cpu").with_overrides(paths)
    Run.create_queued(owner=alice, name="first", config=config)
    with pytest.raises(QuotaExceeded) as raised:
        Run.create_queued(owner=alice, name="second", config=config)
    assert "you have 1 runs waiting in the queue and may have at most 1 waiting" in str(raised.value)
    assert raised.value.body()["quota"]["cap"] == "queued"
    Run.objects.filter(name="first").update(dispatched_at=timezone.now())  # sent: no longer waiting
    Run.create_queued(owner=alice, name="second", config=config)


def test_a_launch_records_what_the_run_asks_for_and_its_pool(alice, paths):
    config = get_preset("tiny_cpu").with_overrides(paths)
    queued = Run.create_queued(owner=alice, name="asks", config=config)
    assert queued.request["pool"] == "local" and queued.request["cpus"] == 1 and queued.request["gpus"] == 0
    assert queued.request["text"].startswith("needs 1 CPU") and queued.dispatched_at is None


def test_an_evaluation_is_not_scheduled_it_goes_to_the_short_queue_at_once(
    alice, paths, queued, settings, django_capture_on_commit_callbacks
):
    settings.DAPO_SCHEDULER_SLOTS = 1
    holding(alice, "hogs-the-slot", pool="local")
    config = get_preset("tiny_cpu").with_overrides(paths)
    with django_capture_on_commit_callbacks(execute=True):
        ev = Run.create_queued(owner=alice, name="eval", config=config, kind=Kind.EVALUATION, total_steps=0)
    assert queued == [("launch_run", ev.pk)] and ev.dispatched_at is not None
    assert queue_entry(ev, alice) is None


def test_a_finished_run_frees_its_room_for_the_next_on_commit(
    alice, queued, settings, django_capture_on_commit_callbacks
):
    settings.DAPO_SCHEDULER_SLOTS = 1
    first = holding(alice, "first", pool="local")
    Run.objects.filter(pk=first.pk).update(lease_owner="w")
    nxt = run(alice, "next", pool="local")
    with django_capture_on_commit_callbacks(execute=True):
        assert first.finish("succeeded", worker_id="w")
    assert queued == [("launch_run", nxt.pk)]


def test_the_reaper_puts_an_expired_run_back_in_the_queue_as_a_new_submission(
    alice, queued, settings, django_capture_on_commit_callbacks
):
    settings.DAPO_SCHEDULER_SLOTS = 1
    dead = holding(alice, "dead", pool="local", minute=0)
    expired = timezone.now() - timedelta(seconds=1)
    Run.objects.filter(pk=dead.pk).update(lease_owner="w", lease_expires=expired, preempt_requested=True)
    waiting = run(alice, "waited", pool="local", minute=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert Run.requeue_expired() == [dead.pk]
    dead.refresh_from_db()
    assert queued == [("launch_run", waiting.pk)]  # the room goes to the run that waited
    assert dead.status == Status.QUEUED and dead.dispatched_at is None and dead.queued_at > waiting.queued_at
    assert not dead.preempt_requested  # its room was given back when its controller died


def test_cancelling_a_run_sent_but_not_started_frees_its_slot(
    alice, queued, settings, django_capture_on_commit_callbacks
):
    settings.DAPO_SCHEDULER_SLOTS = 1
    sent = run(alice, "sent", pool="local", dispatched_at=timezone.now())
    waiting = run(alice, "waiting", pool="local")
    with django_capture_on_commit_callbacks(execute=True):
        assert sent.request_cancel() == "cancelled"
    assert queued == [("launch_run", waiting.pk)]


def test_others_runs_appear_by_number_and_owner_only(alice, bob, settings):
    settings.DAPO_SCHEDULER_SLOTS = 1
    holding(alice, "alice-running", pool="local")
    secret = run(alice, "alice-secret-name", pool="local")
    [entry] = queue_view(bob)
    assert entry["id"] == secret.pk and entry["owner"] == "alice" and "name" not in entry
    assert "needs" not in entry and entry["reason"] == "waiting for a worker slot (1 of 1 busy)"
    [own] = queue_view(alice)
    assert own["name"] == "alice-secret-name" and own["needs"].startswith("needs")
