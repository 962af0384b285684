"""Mail the site sends on request is rate-limited (issue #25, round 3): notification e-mail per user, "Send a
test" per user, verification links per user, and the anonymous password-reset form per client address and
per e-mail address. A refusal is a 429 that says when to retry; a throttled notification is a recorded row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from config.settings import env_positive
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone
from notifications.delivery import deliver_due, queue
from notifications.models import Channel, Delivery, Event, Notification, NotificationSettings

from tests.platform.runs.test_notifications import Hook

pytestmark = pytest.mark.django_db


@pytest.fixture
def mail_on(settings: Any, mailoutbox: list) -> list:
    settings.DAPO_EMAIL_NOTIFICATIONS = True
    return mailoutbox


@pytest.fixture
def hooks(settings: Any) -> Any:
    hook = Hook()
    settings.DAPO_WEBHOOK_URLS = [hook.url.rsplit("/", 1)[0] + "/"]
    yield hook
    hook.close()


def _verified(user: Any, address: str) -> NotificationSettings:
    return NotificationSettings.objects.create(
        user=user, email=True, address=address, address_verified_at=timezone.now()
    )


# ---- notification mail and "Send a test" -------------------------------------------------------------


def test_event_mail_past_the_hourly_limit_is_recorded_as_throttled(alice, alice_run, mail_on, settings):
    settings.DAPO_NOTIFY_MAIL_PER_HOUR = 2
    _verified(alice, "alice@lab.example")
    for _ in range(3):
        queue(alice_run, alice, Event.FAILED, "DAPO run failed")
    assert deliver_due() == 2 and len(mail_on) == 2
    rows = Notification.objects.filter(user=alice, channel=Channel.EMAIL).order_by("pk")
    assert [n.status for n in rows] == [Delivery.SENT, Delivery.SENT, Delivery.THROTTLED]
    assert "DAPO_NOTIFY_MAIL_PER_HOUR" in rows[2].last_error and "after" in rows[2].last_error
    later = timezone.now() + timedelta(hours=1, seconds=1)
    assert deliver_due(later) == 0  # a throttled row is a record, never sent late
    Notification.objects.update(created_at=timezone.now() - timedelta(hours=2))  # an hour on
    queue(alice_run, alice, Event.FAILED, "DAPO run failed again")
    assert deliver_due() == 1


def test_send_a_test_is_limited_per_user_with_a_429_that_says_when(
    alice, alice_client, bob, bob_client, hooks, settings
):
    settings.DAPO_NOTIFY_TEST_PER_HOUR = 2
    NotificationSettings.objects.create(user=alice, webhook_url=hooks.url)
    NotificationSettings.objects.create(user=bob, webhook_url=hooks.url)
    for _ in range(2):
        assert alice_client.post("/accounts/notifications/", {"action": "test"}).status_code == 302
    refused = alice_client.post("/accounts/notifications/", {"action": "test"})
    assert refused.status_code == 429 and 0 < int(refused["Retry-After"]) <= 3600
    assert "Too many notification tests" in refused.content.decode()
    assert "try again in" in refused.content.decode()
    assert len(hooks.received) == 2
    assert bob_client.post("/accounts/notifications/", {"action": "test"}).status_code == 302  # his own count


def test_the_api_test_and_resend_share_the_limits_and_answer_429(
    alice, api, alice_client, hooks, mail_on, settings
):
    settings.DAPO_NOTIFY_TEST_PER_HOUR = 1
    settings.DAPO_NOTIFY_VERIFY_PER_HOUR = 2
    NotificationSettings.objects.create(user=alice, webhook_url=hooks.url)
    sent = api.post("/api/notifications/test/")
    assert sent.status_code == 200 and [(d["channel"], d["status"]) for d in sent.json()] == [
        ("webhook", "sent")
    ]
    refused = api.post("/api/notifications/test/")
    assert refused.status_code == 429 and refused.json()["retry_after"] == int(refused["Retry-After"])
    assert "try again in" in refused.json()["detail"]
    page = alice_client.post("/accounts/notifications/", {"action": "test"})
    assert page.status_code == 429  # the page shares the count
    api.patch("/api/notifications/", {"address": "alice@lab.example"}, format="json")  # mails link 1
    assert api.post("/api/notifications/verification/").status_code == 202  # link 2
    again = api.post("/api/notifications/verification/")
    assert again.status_code == 429 and "try again in" in again.json()["detail"]
    assert len(mail_on) == 2


# ---- the password-reset form -------------------------------------------------------------------------


def _reset(email: str, address: str) -> Any:
    return Client(REMOTE_ADDR=address).post("/accounts/password_reset/", {"email": email})


def test_password_reset_is_limited_per_email_address_whether_it_has_an_account_or_not(
    alice, mail_on, settings
):
    settings.DAPO_RESET_PER_EMAIL_PER_HOUR = 2
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    for email in ("alice@example.org", "nobody@example.org"):
        assert _reset(email, "10.0.0.1").status_code == 302
        assert _reset(email.upper(), "10.0.0.2").status_code == 302
        refused = _reset(email, "10.0.0.3")  # a third address: the e-mail's own count
        assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
        assert "try again in" in refused.content.decode()
    assert len(mail_on) == 2  # alice's two; nobody has no account, and the answers read the same


def test_password_reset_is_limited_per_client_address(alice, bob, mail_on, settings):
    settings.DAPO_RESET_PER_ADDRESS_PER_HOUR = 3
    for i in range(3):
        assert _reset(f"user{i}@example.org", "10.0.0.9").status_code == 302
    refused = _reset("bob@example.org", "10.0.0.9")
    assert refused.status_code == 429 and "this address" in refused.content.decode()
    assert _reset("bob@example.org", "10.0.0.10").status_code == 302  # another address


def test_a_limit_must_be_a_whole_number_from_one(monkeypatch):
    monkeypatch.setenv("DAPO_RESET_PER_EMAIL_PER_HOUR", "0")
    with pytest.raises(ImproperlyConfigured, match="DAPO_RESET_PER_EMAIL_PER_HOUR must be at least 1, got 0"):
        env_positive("DAPO_RESET_PER_EMAIL_PER_HOUR", 3)
    monkeypatch.setenv("DAPO_RESET_PER_EMAIL_PER_HOUR", "")
    assert env_positive("DAPO_RESET_PER_EMAIL_PER_HOUR", 3) == 3
