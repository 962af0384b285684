"""Per-user quotas: how many runs a user may have queued or running at once, and how many training steps
those runs may hold together (their ``optim.total_steps``, summed). One run of 10,000,000 steps would
otherwise hold the only worker for weeks, and a script could queue thousands of runs.

Three more caps share the cluster (runs.scheduling): ``max_running`` (training runs dispatched or running
at once), ``max_gpus`` (GPUs those hold at once) and ``max_queued`` (runs waiting in the platform's queue).
The first two never refuse a launch: the scheduler holds the run in the queue and its page says it waits
for the limit. ``max_queued`` is checked at launch like the runs and steps caps. Site defaults:
``DAPO_QUOTA_RUNNING``, ``DAPO_QUOTA_GPUS``, ``DAPO_QUOTA_QUEUED``.

The site's caps come from ``DAPO_QUOTA_RUNS`` and ``DAPO_QUOTA_STEPS`` (0: no cap). An administrator
gives a user caps of their own in the admin (Runs › Run quotas); an empty field there keeps the site's
cap. Superusers have no cap unless a quota row names them.

Every launch goes through ``Run.create_queued`` (the form, the API, sweeps, ladders, forks, evaluations)
or ``Run.resume``, which call ``reserve`` inside their transaction (a sweep or a ladder reserves its whole
group at once, with ``Run.reserve_for``): past a cap it raises
``QuotaExceeded``, the transaction rolls back and nothing is queued; pages and the API answer 409 with
its message, which names the cap, the current use and who can raise it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.db.models import Count, QuerySet, Sum

WHO_RAISES = "an administrator can raise it (admin › Runs › Run quotas)"


class RunQuota(models.Model):
    """One user's caps, set by an administrator; an empty field keeps the site's default."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="run_quota")
    max_runs = models.PositiveIntegerField(
        null=True, blank=True, help_text="Queued and running runs at once. Empty: DAPO_QUOTA_RUNS; 0: no cap."
    )
    max_steps = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="optim.total_steps of the queued and running runs, summed. Empty: DAPO_QUOTA_STEPS; "
        "0: no cap.",
    )

    max_running = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Training runs dispatched or running at once; more wait in the queue. Empty: "
        "DAPO_QUOTA_RUNNING; 0: no cap.",
    )
    max_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="GPUs the dispatched and running runs hold at once; more wait in the queue. Empty: "
        "DAPO_QUOTA_GPUS; 0: no cap.",
    )
    max_queued = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Runs waiting in the queue; a launch past it is refused. Empty: DAPO_QUOTA_QUEUED; "
        "0: no cap.",
    )

    class Meta:
        verbose_name = "run quota"

    def __str__(self) -> str:
        return f"quota of {self.user}"


@dataclass(frozen=True)
class Caps:
    """A user's caps (0: none)."""

    runs: int
    steps: int
    running: int = 0
    gpus: int = 0
    queued: int = 0


@dataclass(frozen=True)
class Usage:
    """What a user's queued and running runs hold now; ``waiting``: those waiting in the platform's queue."""

    runs: int
    steps: int
    waiting: int = 0


class QuotaExceeded(Exception):
    """A launch past a cap: ``cap`` is "runs", "steps" or "queued"; nothing was queued."""

    def __init__(self, cap: str, limit: int, used: int, asked: int) -> None:
        self.cap, self.limit, self.used, self.asked = cap, limit, used, asked
        super().__init__(self._message())

    def _message(self) -> str:
        if self.cap == "runs":
            return (
                f"Not queued: you have {self.used} runs queued or running and may have at most "
                f"{self.limit} at once (this launch adds {self.asked}). Wait for one to finish or cancel "
                f"one; {WHO_RAISES}."
            )
        if self.cap == "queued":
            return (
                f"Not queued: you have {self.used} runs waiting in the queue and may have at most "
                f"{self.limit} waiting (this launch adds {self.asked}). Wait for one to start or cancel one; "
                f"{WHO_RAISES}."
            )
        return (
            f"Not queued: your queued and running runs hold {self.used:,} training steps (optim.total_steps, "
            f"summed), this launch adds {self.asked:,}, and your cap is {self.limit:,}. Lower "
            f"optim.total_steps or wait for a run to finish; {WHO_RAISES}."
        )

    def body(self) -> dict[str, Any]:
        """The API's 409 answer."""
        quota = {"cap": self.cap, "limit": self.limit, "used": self.used, "requested": self.asked}
        return {"detail": str(self), "quota": quota}


def caps_for(user: Any) -> Caps | None:
    """The user's caps; None when they have none (a superuser without a quota row)."""
    row = RunQuota.objects.filter(user_id=user.pk).first()
    if row is None and user.is_superuser:
        return None

    def cap(field: str, default: int) -> int:
        value = getattr(row, field) if row is not None else None
        return default if value is None else value

    return Caps(
        runs=cap("max_runs", settings.DAPO_QUOTA_RUNS),
        steps=cap("max_steps", settings.DAPO_QUOTA_STEPS),
        running=cap("max_running", settings.DAPO_QUOTA_RUNNING),
        gpus=cap("max_gpus", settings.DAPO_QUOTA_GPUS),
        queued=cap("max_queued", settings.DAPO_QUOTA_QUEUED),
    )


def usage(active: QuerySet[Any]) -> Usage:
    """What a user's queued and running runs (``Run.objects.active_of(user)``) hold: how many, and their
    steps (an evaluation holds none)."""
    totals = active.aggregate(runs=Count("pk"), steps=Sum("total_steps"))
    waiting = active.filter(status="queued", dispatched_at__isnull=True, kind="training").count()
    return Usage(runs=totals["runs"], steps=totals["steps"] or 0, waiting=waiting)


def check(user: Any, active: QuerySet[Any], *, runs: int, steps: int, waiting: int | None = None) -> None:
    """``QuotaExceeded`` if ``runs`` more runs holding ``steps`` steps would pass one of ``user``'s caps;
    ``active``: their queued and running runs; ``waiting``: how many of the new runs wait in the
    platform's queue (default ``runs``; an evaluation does not)."""
    caps = caps_for(user)
    if caps is None:
        return
    now = usage(active)
    if caps.runs and now.runs + runs > caps.runs:
        raise QuotaExceeded("runs", caps.runs, now.runs, runs)
    if caps.steps and now.steps + steps > caps.steps:
        raise QuotaExceeded("steps", caps.steps, now.steps, steps)
    waiting = runs if waiting is None else waiting
    if caps.queued and waiting and now.waiting + waiting > caps.queued:
        raise QuotaExceeded("queued", caps.queued, now.waiting, waiting)


def reserve(user: Any, active: QuerySet[Any], *, runs: int, steps: int, waiting: int | None = None) -> None:
    """``check`` while holding the user's row, inside the caller's transaction: two launches of one user
    at once are counted one after the other (PostgreSQL locks the row; SQLite serialises transactions)."""
    list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
    check(user, active, runs=runs, steps=steps, waiting=waiting)
