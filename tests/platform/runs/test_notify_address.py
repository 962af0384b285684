"""The upgrade path of the notification address: the data migration copies the account e-mail, unverified,
and ``manage.py send_notify_verifications`` mails those users a link. (The attacker's side of verification
is in tests/security/test_account_takeover.py.)"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone
from notifications.delivery import queue
from notifications.models import Delivery, Event, Notification, NotificationSettings

from tests.platform.fixtures import make_user

pytestmark = pytest.mark.django_db

migration = importlib.import_module("runs.migrations.0011_notify_address_from_account_email")


@pytest.fixture
def mail_on(settings: Any, mailoutbox: list) -> list:
    settings.DAPO_EMAIL_NOTIFICATIONS = True
    return mailoutbox


def test_the_migration_starts_each_address_as_the_account_email_unverified(alice, bob, alice_run, mail_on):
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    NotificationSettings.objects.create(user=alice, email=True)  # as 0010 left an existing row
    NotificationSettings.objects.create(user=bob, stall_minutes=5)  # bob has no e-mail: nothing to copy
    # the models as they stood when 0011 ran (they have since moved to the notifications app)
    state = MigrationLoader(connection).project_state(("runs", "0011_notify_address_from_account_email"))
    migration.copy_account_email(state.apps, None)
    prefs = NotificationSettings.of(alice)
    assert (prefs.address, prefs.address_verified) == ("alice@example.org", False)
    assert NotificationSettings.of(bob).address == ""
    (note,) = queue(alice_run, alice, Event.FAILED, "DAPO run failed")
    assert note.status == Delivery.SKIPPED and not mail_on  # recorded, not mailed, until verified


def test_the_command_mails_a_link_to_each_unverified_address_with_email_on(alice, bob, mail_on, capsys):
    NotificationSettings.objects.create(user=alice, email=True, address="alice@lab.example")
    NotificationSettings.objects.create(user=bob, email=False, address="bob@lab.example")  # e-mail off
    verified = timezone.now()
    carol = make_user(type(alice), "carol", "carol-pass-123")
    NotificationSettings.objects.create(
        user=carol, email=True, address="c@lab.example", address_verified_at=verified
    )
    call_command("send_notify_verifications")
    assert [m.to for m in mail_on] == [["alice@lab.example"]]
    assert "/accounts/notifications/verify/" in mail_on[0].body
    assert "1 verification link mailed." in capsys.readouterr().out
    assert not Notification.objects.exists()
