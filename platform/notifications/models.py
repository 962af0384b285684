"""Notification settings and the outbox of notifications (one row per event and channel)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

DEFAULT_STALL_MINUTES = 15


class Event(models.TextChoices):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STALLED = "stalled"
    TEST = "test"


class Channel(models.TextChoices):
    WEBHOOK = "webhook"
    EMAIL = "email"


class Delivery(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    THROTTLED = "throttled"
    """Not sent: the user's hourly e-mail limit was reached (``last_error`` says which, and until when)."""
    SKIPPED = "skipped"
    """Not sent: the notification address is not verified yet."""


class NotificationSettings(models.Model):
    """One user's notification settings (the page /accounts/notifications/, the API's /notifications/)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_settings"
    )
    webhook_url = models.CharField(
        max_length=1000, blank=True, help_text="Slack-compatible incoming webhook."
    )
    email = models.BooleanField(default=False, help_text="E-mail the notification address.")
    address = models.EmailField(
        max_length=254,
        blank=True,
        help_text="Where e-mail notifications go, once verified; never the account's login e-mail.",
    )
    address_verified_at = models.DateTimeField(
        null=True, blank=True, help_text="When the owner opened the link mailed to the address."
    )
    verify_nonce = models.CharField(
        max_length=32, blank=True, help_text="Names the newest verification link; cleared when it is used."
    )
    stall_minutes = models.PositiveIntegerField(
        default=DEFAULT_STALL_MINUTES,
        help_text="A running run without a new step for this long stalled (0: never).",
    )

    class Meta:
        db_table = "runs_notificationsettings"  # created when these models lived in the runs app

    @classmethod
    def of(cls, user: Any) -> NotificationSettings:
        """The user's settings; the defaults (unsaved) when they never saved any."""
        return cls.objects.filter(user=user).first() or cls(user=user)

    @property
    def address_verified(self) -> bool:
        return bool(self.address and self.address_verified_at)

    def address_status(self) -> str:
        """The address's state as the page and the API say it."""
        if not self.address:
            return ""
        return "verified" if self.address_verified else "unverified — check your mail (resend)"

    def set_address(self, address: str) -> bool:
        """Take a new address (unsaved): it starts unverified and earlier links stop working. Returns
        whether it changed."""
        if address == self.address:
            return False
        self.address, self.address_verified_at, self.verify_nonce = address, None, ""
        return True


class Notification(models.Model):
    """One event on one channel: a row of the outbox (notifications.delivery sends it)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    event = models.CharField(max_length=16, choices=Event.choices)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=1000, help_text="The URL or e-mail address.")
    text = models.TextField()
    status = models.CharField(max_length=16, choices=Delivery.choices, default=Delivery.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runs_notification"  # created when these models lived in the runs app
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notification_due")]
