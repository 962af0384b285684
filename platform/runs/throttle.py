"""Rate limits on what makes the site send mail: notification e-mail, "Send a test", verification links, and
the anonymous password-reset form (per client address and per e-mail address).

Each limit is a count per hour, read from a setting (``DAPO_*_PER_HOUR``, see config.settings). Actions are
rows (``RateHit``) in the database, not a per-process cache, so every web process and worker shares the
count; keys are stored as an HMAC of the address or e-mail, never as written. Notification e-mail is counted
from the ``Notification`` rows themselves (``refusal``), which already record every e-mail. A refused action
is answered with 429 and ``Retry-After`` (``Refusal.message`` says when, in words).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.crypto import salted_hmac

from runs.models import RateHit

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Limit:
    scope: str
    """Stored with each action it counts."""
    what: str
    """What is counted, in words: "password reset requests from this address"."""
    setting: str
    """The setting (and environment variable) that holds the count allowed per window."""
    window: timedelta = HOUR

    @property
    def count(self) -> int:
        return int(getattr(settings, self.setting))


NOTIFY_MAIL = Limit("notify-mail", "notification e-mails", "DAPO_NOTIFY_MAIL_PER_HOUR")
NOTIFY_TEST = Limit("notify-test", "notification tests", "DAPO_NOTIFY_TEST_PER_HOUR")
NOTIFY_VERIFY = Limit("notify-verify", "verification e-mails", "DAPO_NOTIFY_VERIFY_PER_HOUR")
RESET_BY_ADDRESS = Limit(
    "reset-address", "password reset requests from this address", "DAPO_RESET_PER_ADDRESS_PER_HOUR"
)
RESET_BY_EMAIL = Limit(
    "reset-email", "password reset requests for this e-mail address", "DAPO_RESET_PER_EMAIL_PER_HOUR"
)


@dataclass(frozen=True)
class Refusal:
    """An action refused by ``limit``; the next one is allowed at ``retry_at``."""

    limit: Limit
    retry_at: datetime

    def retry_after_s(self, now: datetime | None = None) -> int:
        return max(1, math.ceil((self.retry_at - (now or timezone.now())).total_seconds()))

    @property
    def message(self) -> str:
        minutes = math.ceil(self.retry_after_s() / 60)
        return (
            f"Too many {self.limit.what} (the limit is {self.limit.count} an hour): try again in {minutes} "
            f"minute{'s' if minutes != 1 else ''}, after {self.retry_at:%H:%M} UTC."
        )


def refusal(limit: Limit, times: Sequence[datetime], now: datetime | None = None) -> Refusal | None:
    """Whether one more action is refused, given the times of the earlier ones: when ``limit.count`` of them
    lie within the window, the next is allowed once the oldest of those leaves it."""
    now = now or timezone.now()
    recent = sorted(t for t in times if t > now - limit.window)
    if len(recent) < limit.count:
        return None
    return Refusal(limit, recent[-limit.count] + limit.window)


@transaction.atomic
def take(*actions: tuple[Limit, str], now: datetime | None = None) -> Refusal | None:
    """Count one action against each ``(limit, key)``, unless one of them is used up: then nothing is
    counted and the refusal says which limit and until when. (On SQLite the transaction takes the write lock
    at once, so two requests never both take the last one; on PostgreSQL a burst may pass by a few.)"""
    now = now or timezone.now()
    keyed = [(limit, _digest(key)) for limit, key in actions]
    for limit, key in keyed:
        hits = RateHit.objects.filter(scope=limit.scope, key=key)
        hits.filter(at__lte=now - limit.window).delete()  # forgotten once out of the window
        refused = refusal(limit, list(hits.values_list("at", flat=True)), now)
        if refused:
            return refused
    RateHit.objects.bulk_create(RateHit(scope=limit.scope, key=key, at=now) for limit, key in keyed)
    return None


def too_many(request: HttpRequest, refused: Refusal, template: str, context: dict) -> HttpResponse:
    """A page that says why and when to retry: 429 with ``Retry-After``."""
    response = render(request, template, {**context, "refusal": refused}, status=429)
    response["Retry-After"] = str(refused.retry_after_s())
    return response


def client_address(request: HttpRequest) -> str:
    """The connection's address (behind a proxy, Daphne's ``--proxy-headers`` makes it the client's), as the
    login throttle (django-axes) counts it."""
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _digest(key: str) -> str:
    return salted_hmac("runs.throttle", key, algorithm="sha256").hexdigest()
