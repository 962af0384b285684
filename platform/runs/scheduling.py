"""The admission scheduler: which waiting training run is sent to Celery, and when.

Ray still places a dispatched run's actors (its driver asks for its placement groups); the platform only
decides which queued run to send and when, from what each run asks for (``Run.request``:
``dapo.cluster.resources``) and what its pool holds. Without it every run went to Celery at once and
waited there, invisibly, in arrival order.

Pools: ``local`` (runs in the worker's own process; its capacity is the newest ``ClusterCapacity`` of
kind local) and ``ray`` (the newest ray record). A pool with no record yet admits by slots only. Held: the
requests of the pool's runs dispatched or running. Slots: at most ``DAPO_SCHEDULER_SLOTS`` training runs
dispatched or running at once (the Celery worker slots).

One pass (``schedule``):

1. Lock the waiting runs (``select_for_update``; SQLite's IMMEDIATE transactions serialise the whole pass),
   so passes from several processes (the web, each worker's reaper) run one after the other.
2. Rank them: priority (higher first), then the owner's dominant share of the pool (the larger of the GPU
   and CPU shares their dispatched and running runs hold, recomputed after each admission of the pass, so
   a user with nothing running goes before one who holds half the cluster), then ``queued_at``, then id.
3. Go down the ranking and dispatch the first run that fits in what its pool has free, within a slot and
   its owner's limits (``RunQuota.max_running``, ``max_gpus``); re-rank; repeat until none fits.

This is backfill: a big run that does not fit does not block smaller ones ranked below it that do. It
keeps the cluster busy; the price is that a big run can wait while small ones keep passing it. Raise its
priority (staff) to stop that: the runs below it still go only where it does not fit anyway.

Evaluations are not scheduled: they go straight to the short queue (config.queues). They take minutes,
ask for no Ray placement and hold their own worker slot, so holding them behind hours-long training runs
would only delay the numbers people wait for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from runs import dispatch
from runs.cluster_events import changed
from runs.models import ClusterCapacity, Kind, Run, Status
from runs.models.quotas import Caps, caps_for
from runs.signals import schedule_wanted

log = logging.getLogger(__name__)

POOLS = ("local", "ray")
WAITING = Q(kind=Kind.TRAINING, status=Status.QUEUED, dispatched_at__isnull=True)
"""In the platform's queue: queued, not yet sent to a worker."""
ACTIVE = Q(kind=Kind.TRAINING) & (
    Q(status=Status.RUNNING) | Q(status=Status.QUEUED, dispatched_at__isnull=False)
)
"""Holding a slot and its request: sent to a worker, or running."""
LIMITS = "admin › Runs › Run quotas"


@dataclass(frozen=True)
class Need:
    """What a run asks of its pool (``Run.request``)."""

    pool: str
    cpus: float
    gpus: float
    text: str

    @classmethod
    def of(cls, run: Run) -> Need:
        req = run.request or {}
        pool = req.get("pool") or (run.config.get("execution") or {}).get("backend") or "local"
        text = req.get("text") or "needs what its config asks for (recorded before the scheduler existed)"
        return cls(str(pool), float(req.get("cpus") or 0), float(req.get("gpus") or 0), str(text))


@dataclass
class Pool:
    name: str
    total_cpus: float | None  # None: no capacity recorded yet (admit by slots only)
    total_gpus: float | None
    held_cpus: float = 0.0
    held_gpus: float = 0.0

    @property
    def free_cpus(self) -> float | None:
        return None if self.total_cpus is None else max(0.0, self.total_cpus - self.held_cpus)

    @property
    def free_gpus(self) -> float | None:
        return None if self.total_gpus is None else max(0.0, self.total_gpus - self.held_gpus)


@dataclass
class Owner:
    caps: Caps | None
    running: int = 0
    gpus: float = 0.0
    held: dict[str, tuple[float, float]] = field(default_factory=dict)  # pool -> (cpus, gpus)
    runs_in: dict[str, int] = field(default_factory=dict)  # pool -> runs


@dataclass
class State:
    """What the pools and owners hold now; ``admit`` adds a run to it."""

    slots: int
    busy: int
    pools: dict[str, Pool]
    owners: dict[int, Owner]

    def owner(self, run: Run) -> Owner:
        if run.owner_id not in self.owners:
            self.owners[run.owner_id] = Owner(caps_for(run.owner))
        return self.owners[run.owner_id]

    def admit(self, run: Run, need: Need) -> None:
        self.busy += 1
        pool = self.pools[need.pool]
        pool.held_cpus += need.cpus
        pool.held_gpus += need.gpus
        owner = self.owner(run)
        owner.running += 1
        owner.gpus += need.gpus
        cpus, gpus = owner.held.get(need.pool, (0.0, 0.0))
        owner.held[need.pool] = (cpus + need.cpus, gpus + need.gpus)
        owner.runs_in[need.pool] = owner.runs_in.get(need.pool, 0) + 1

    def share(self, run: Run, need: Need) -> float:
        """The owner's dominant share of the run's pool: the larger of their GPU and CPU shares (with no
        capacity recorded, their share of the slots)."""
        pool, owner = self.pools[need.pool], self.owner(run)
        cpus, gpus = owner.held.get(need.pool, (0.0, 0.0))
        if pool.total_cpus is None:
            return owner.runs_in.get(need.pool, 0) / max(1, self.slots)
        shares = [cpus / pool.total_cpus if pool.total_cpus else 0.0]
        shares.append(gpus / pool.total_gpus if pool.total_gpus else 0.0)
        return max(shares)


@dataclass(frozen=True)
class Wait:
    """Why a run waits: ``code`` (limit_running, limit_gpus, never, room, slot) and its numbers."""

    code: str
    data: dict[str, Any]

    def text(self, *, yours: bool = True) -> str:
        """The reason in the product's words, for its owner (``yours``) or for anyone else."""
        d, whose = self.data, "your" if yours else "its owner's"
        if self.code == "limit_running":
            return f"waits for {whose} limit of {_count(d['limit'], 'run')} at once ({LIMITS})"
        if self.code == "limit_gpus":
            return f"waits for {whose} limit of {_count(d['limit'], 'GPU')} at once ({LIMITS})"
        if self.code == "slot":
            return f"waiting for a worker slot ({d['busy']} of {d['slots']} busy)"
        ahead = f"; {_count(d['ahead'], 'run')} ahead" if d["ahead"] else ""
        if self.code == "never":
            return (
                f"needs {_count(d['need'], d['what'])}; the {d['pool']} pool has {d['total']:g} in all{ahead}"
            )
        return f"needs {_count(d['need'], d['what'])}; {d['free']:g} free{ahead}"


@dataclass(frozen=True)
class Entry:
    """A waiting run after a pass: its place in the ranking and why it waits."""

    run: Run
    need: Need
    position: int
    ahead: int
    wait: Wait


def load_state() -> State:
    """What the dispatched and running training runs hold, per pool and per owner."""
    pools = {}
    for kind in POOLS:
        row = ClusterCapacity.objects.filter(kind=kind).first()
        capacity = row.capacity if row is not None and row.nodes else None
        pools[kind] = Pool(kind, capacity.cpus if capacity else None, capacity.gpus if capacity else None)
    active = list(Run.objects.filter(ACTIVE).select_related("owner"))
    state = State(settings.DAPO_SCHEDULER_SLOTS, 0, pools, {})
    for run in active:
        state.admit(run, _need(run))
    return state


def plan(state: State, waiting: list[Run]) -> tuple[list[Run], list[Entry]]:
    """The runs to dispatch now, in order, and the others ranked with why each waits (module docstring).
    ``state`` is updated with the admitted runs."""
    remaining, admitted = list(waiting), []
    while remaining:
        ranked = _ranked(state, remaining)
        pick = next((run for run in ranked if _why(state, run, ranked) is None), None)
        if pick is None:
            break
        state.admit(pick, _need(pick))
        admitted.append(pick)
        remaining.remove(pick)
    ranked = _ranked(state, remaining)
    entries = []
    for i, run in enumerate(ranked):
        wait = _why(state, run, ranked)
        assert wait is not None  # the loop above admitted every run that fits
        need = _need(run)
        ahead = sum(1 for r in ranked[:i] if _need(r).pool == need.pool)
        entries.append(Entry(run, need, i + 1, ahead, wait))
    return admitted, entries


def schedule() -> list[int]:
    """One admission pass (module docstring): the ids dispatched, in order. Their tasks are sent once
    the pass commits; open pages hear of the queue's new order."""
    with transaction.atomic():
        rows = Run.objects.select_for_update(of=("self",)).filter(WAITING)  # the runs, not their owners
        waiting = list(rows.select_related("owner").order_by("id"))
        if not waiting:
            transaction.on_commit(lambda: _announce([], []))
            return []
        admitted, entries = plan(load_state(), waiting)
        now, sent = timezone.now(), []
        for run in admitted:
            if Run.objects.filter(WAITING, pk=run.pk).update(dispatched_at=now):
                dispatch.on_commit("launch_run", run.pk)
                sent.append(run.pk)
        transaction.on_commit(lambda: _announce(sent, entries))
    if sent:
        log.info("scheduler: dispatched %s", ", ".join(f"run {pk}" for pk in sent))
    return sent


def _wanted(**_: Any) -> None:
    """A pass asked for by runs.dispatch.schedule_on_commit. One that fails (the database away for a moment)
    is logged: the next one (the next launch or finish, or a worker's reaper every DAPO_REAPER_INTERVAL_S)
    admits what this one would have."""
    try:
        schedule()
    except DatabaseError:
        log.warning("scheduler pass failed; the next pass catches up", exc_info=True)


schedule_wanted.connect(_wanted, dispatch_uid="runs.scheduling")


def waiting_entries() -> list[Entry]:
    """The queue as the next pass would leave it, read without locking (for pages)."""
    waiting = list(Run.objects.filter(WAITING).select_related("owner").order_by("id"))
    if not waiting:
        return []
    return plan(load_state(), waiting)[1]


def entry_data(entry: Entry, *, yours: bool, readable: bool, state: State | None = None) -> dict[str, Any]:
    """An entry as JSON for a viewer: their own run (``yours``), one they may read, or another's (number
    and owner only)."""
    run, need = entry.run, entry.need
    out: dict[str, Any] = {
        "id": run.pk,
        "owner": run.owner.get_username(),
        "position": entry.position,
        "ahead": entry.ahead,
        "pool": need.pool,
        "priority": run.priority,
        "reason": entry.wait.text(yours=yours),
        "reason_code": entry.wait.code,
    }
    if readable:
        out |= {
            "name": run.name,
            "needs": need.text,
            "queued_at": run.queued_at.isoformat() if run.queued_at else None,
            "preemptions": run.preemptions,
        }
    return out


def queue_view(user: Any) -> list[dict[str, Any]]:
    """The waiting runs in order, each with its position, pool, what it needs, what is free, the runs
    ahead and the reason it waits; others' runs by number and owner only unless ``user`` may read them."""
    from runs.access import visible_runs  # access imports the models; kept out of the pass's imports

    entries = waiting_entries()
    readable = set(visible_runs(user).filter(pk__in=[e.run.pk for e in entries]).values_list("pk", flat=True))
    state = load_state()
    out = []
    for e in entries:
        data = entry_data(e, yours=e.run.owner_id == user.pk, readable=e.run.pk in readable)
        pool = state.pools[e.need.pool]
        data["free"] = {"cpus": pool.free_cpus, "gpus": pool.free_gpus}
        out.append(data)
    return out


def queue_entry(run: Run, user: Any) -> dict[str, Any] | None:
    """Where ``run`` stands in the queue, for ``user`` who may read it: None unless it waits there; a
    dispatched run that no worker claimed yet says so."""
    if run.kind != Kind.TRAINING or run.status != Status.QUEUED:
        return None
    if run.dispatched_at is not None:
        return {"position": 0, "reason": "sent to a worker; starting", "reason_code": "dispatched"}
    for e in waiting_entries():
        if e.run.pk == run.pk:
            return entry_data(e, yours=run.owner_id == user.pk, readable=True)
    return None


_SHOWN: dict[int, tuple[int, str]] = {}
"""What this process last told each waiting run's page (position, reason): a pass tells only changes."""


def _announce(sent: list[int], entries: list[Entry]) -> None:
    """Status events for the runs dispatched and for those whose place or reason changed; a cluster event
    when anything did. Never raises (the database holds the truth; pages catch up on reconnect)."""
    from runs.events import publish, status_event  # events imports the run pages' modules

    try:
        now = {e.run.pk: (e.position, e.wait.code + str(e.wait.data)) for e in entries}
        moved = [e for e in entries if _SHOWN.get(e.run.pk) != now[e.run.pk]]
        gone = set(_SHOWN) - set(now)
        _SHOWN.clear()
        _SHOWN.update(now)
        for e in moved:
            state = status_event(e.run)
            state["run"]["queue"] = entry_data(e, yours=True, readable=True)
            state["run"]["queue_shared"] = e.wait.text(yours=False)
            publish(e.run.pk, state)
        for pk in sent:
            run = Run.objects.filter(pk=pk).first()
            if run is not None:
                state = status_event(run)
                state["run"]["queue"] = queue_entry(run, run.owner)
                publish(pk, state)
        if moved or gone or sent:
            changed(now=True)
    except Exception:
        log.warning("scheduler: could not announce the queue", exc_info=True)


def _need(run: Run) -> Need:
    return Need.of(run)


def _ranked(state: State, runs: list[Run]) -> list[Run]:
    def key(run: Run) -> tuple[int, float, datetime, int]:
        return (-run.priority, state.share(run, _need(run)), run.queued_at, run.pk)

    return sorted(runs, key=key)


def _why(state: State, run: Run, ranked: list[Run]) -> Wait | None:
    """None when ``run`` may be dispatched now; else why it waits (its owner's limits first: they hold it
    whatever frees up; then room it can never have, then room taken, then a slot)."""
    need, owner = _need(run), state.owner(run)
    caps = owner.caps
    if caps is not None and caps.running and owner.running >= caps.running:
        return Wait("limit_running", {"limit": caps.running})
    if caps is not None and caps.gpus and need.gpus and owner.gpus + need.gpus > caps.gpus:
        return Wait("limit_gpus", {"limit": caps.gpus})
    pool = state.pools[need.pool]
    ahead = sum(1 for r in ranked[: ranked.index(run)] if _need(r).pool == need.pool)
    for what, asked, total, free in (
        ("GPU", need.gpus, pool.total_gpus, pool.free_gpus),
        ("CPU", need.cpus, pool.total_cpus, pool.free_cpus),
    ):
        if total is None or free is None or asked <= free + 1e-9:
            continue
        code = "never" if asked > total + 1e-9 else "room"
        return Wait(
            code,
            {"need": asked, "what": what, "free": free, "total": total, "pool": need.pool, "ahead": ahead},
        )
    if state.busy >= state.slots:
        return Wait("slot", {"busy": state.busy, "slots": state.slots})
    return None


def _count(value: float, unit: str) -> str:
    return f"{value:g} {unit}{'' if value == 1 else 's'}"
