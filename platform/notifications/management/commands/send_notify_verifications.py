"""``python manage.py send_notify_verifications``: mail a verification link to every unverified notification
address of a user who has e-mail notifications on (after upgrading: the migration copied each account
e-mail there unverified, and nothing is mailed to it until its owner opens the link). Safe to run again:
each run replaces the users' earlier links, within ``DAPO_NOTIFY_VERIFY_PER_HOUR``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from notifications.address import mail_link
from notifications.models import NotificationSettings


class Command(BaseCommand):
    help = "Mail a verification link to each unverified notification address with e-mail notifications on."

    def handle(self, *args: Any, **options: Any) -> None:
        waiting = NotificationSettings.objects.filter(email=True, address_verified_at__isnull=True).exclude(
            address=""
        )
        sent = 0
        for prefs in waiting.select_related("user"):
            outcome = mail_link(prefs)
            sent += outcome.ok
            if not outcome.ok:
                self.stderr.write(f"{prefs.user.get_username()}: {outcome.message}")
        self.stdout.write(self.style.SUCCESS(f"{sent} verification link{'s' if sent != 1 else ''} mailed."))
