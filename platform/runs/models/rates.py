"""Actions counted against an hourly limit (runs.throttle): one row per action."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class RateHit(models.Model):
    """One action counted against a limit."""

    scope = models.CharField(max_length=40)
    key = models.CharField(max_length=64, help_text="An HMAC of the user id, client address or e-mail.")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["scope", "key", "at"], name="rate_hit_lookup")]
