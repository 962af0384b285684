"""An API token must not be enough to take over the account (issue #25, round 3).

Before: ``PATCH /api/notifications/ {"address": ...}`` wrote the account's e-mail, so whoever held the token
set it to their own mailbox and asked the anonymous password-reset form for a link. Now the notification
address is a field of its own, verified by a signed, expiring, single-use link that only the logged-in owner
can confirm; the account e-mail changes only on /accounts/email/, with the current password.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.core import signing
from notifications.delivery import deliver_due
from notifications.models import Delivery, Notification, NotificationSettings

from tests.platform.runs.test_notifications import running

pytestmark = pytest.mark.django_db

SITE = "https://dapo.example.org"
LINK = re.compile(re.escape(SITE) + r"(/accounts/notifications/verify/[^/\s]+/)")


@pytest.fixture
def mailbox(settings: Any, alice: Any, mailoutbox: list) -> list:
    """Mail is configured (Django's locmem backend); alice's login e-mail is alice@example.org."""
    settings.DAPO_EMAIL_NOTIFICATIONS = True
    settings.DAPO_SITE_URL = SITE
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    return mailoutbox


def _link(mailbox: list, to: str) -> str:
    (message,) = [m for m in mailbox if m.to == [to] and LINK.search(m.body)]
    match = LINK.search(message.body)
    assert match is not None
    return match[1]


def _reset_links(mailbox: list, to: str) -> list[str]:
    return [m.body for m in mailbox if m.to == [to] and "/accounts/reset/" in m.body]


# ---- the account e-mail ------------------------------------------------------------------------------


def test_a_token_holder_cannot_redirect_the_password_reset_to_their_mailbox(alice, api, anon_client, mailbox):
    answer = api.patch("/api/notifications/", {"address": "mallory@evil.example"}, format="json")
    assert answer.status_code == 200  # a notification address, which is all the field is now
    alice.refresh_from_db()
    assert alice.email == "alice@example.org"
    anon_client.post("/accounts/password_reset/", {"email": "mallory@evil.example"})
    assert _reset_links(mailbox, "mallory@evil.example") == []
    anon_client.post("/accounts/password_reset/", {"email": "alice@example.org"})
    assert len(_reset_links(mailbox, "alice@example.org")) == 1  # the owner's reset still works


def test_the_api_refuses_to_change_the_account_email_and_names_the_page(alice, api, mailbox):
    answer = api.patch("/api/notifications/", {"account_email": "mallory@evil.example"}, format="json")
    assert answer.status_code == 403
    assert "/accounts/email/" in answer.json()["detail"] and "password" in answer.json()["detail"]
    alice.refresh_from_db()
    assert alice.email == "alice@example.org"
    assert api.get("/api/notifications/").json()["account_email"] == "alice@example.org"


def test_the_account_email_changes_only_with_the_current_password(alice, alice_client, api):
    page = alice_client.get("/accounts/email/")
    assert page.status_code == 200 and b'name="password"' in page.content
    for password in ("wrong-password", ""):
        refused = alice_client.post("/accounts/email/", {"email": "new@example.org", "password": password})
        assert refused.status_code == 400
    bad = alice_client.post("/accounts/email/", {"email": "not-an-address", "password": "alice-pass-123"})
    assert bad.status_code == 400 and b"valid email" in bad.content
    alice.refresh_from_db()
    assert alice.email == ""
    # a token is no login: the page sends it to the login form and changes nothing
    by_token = api.post("/accounts/email/", {"email": "mallory@evil.example", "password": "alice-pass-123"})
    assert by_token.status_code == 302 and by_token["Location"].startswith("/accounts/login/")
    done = alice_client.post("/accounts/email/", {"email": "new@example.org", "password": "alice-pass-123"})
    assert done.status_code == 302
    alice.refresh_from_db()
    assert alice.email == "new@example.org"


# ---- the notification address ------------------------------------------------------------------------


def test_a_notification_address_gets_nothing_until_its_owner_opens_the_link(
    alice, alice_client, api, alice_run, mailbox
):
    answer = api.patch(
        "/api/notifications/", {"address": "alice@lab.example", "email": True}, format="json"
    ).json()
    assert answer["address_verified"] is False
    assert answer["address_status"].startswith("unverified — check your mail (resend")
    link = _link(mailbox, "alice@lab.example")
    page = alice_client.get("/accounts/notifications/").content.decode()
    assert "unverified — check your mail" in page and 'value="resend"' in page

    running(alice_run).finish("succeeded", worker_id="w1")  # an event: recorded, not mailed
    deliver_due()
    alice_client.post("/accounts/notifications/", {"action": "test"})  # a test: not mailed either
    assert [m.to for m in mailbox] == [["alice@lab.example"]]  # only the verification
    skipped = Notification.objects.filter(user=alice, channel="email")
    assert {n.status for n in skipped} == {Delivery.SKIPPED} and "unverified" in skipped[0].last_error

    confirm = alice_client.get(link)
    assert confirm.status_code == 200 and b"alice@lab.example" in confirm.content
    assert not NotificationSettings.of(alice).address_verified  # opening the page alone is no yes
    assert alice_client.post(link).status_code == 302
    assert NotificationSettings.of(alice).address_verified
    assert api.get("/api/notifications/").json()["address_status"] == "verified"
    alice_client.post("/accounts/notifications/", {"action": "test"})
    assert mailbox[-1].to == ["alice@lab.example"] and "notifications work" in mailbox[-1].body
    alice.refresh_from_db()
    assert alice.email == "alice@example.org"  # never the login e-mail


def test_a_verification_link_is_for_its_owner_only_and_works_once(
    alice, alice_client, api, bob_client, anon_client, mailbox
):
    api.patch("/api/notifications/", {"address": "alice@lab.example"}, format="json")
    link = _link(mailbox, "alice@lab.example")
    anonymous = anon_client.get(link)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert bob_client.get(link).status_code == 403 and bob_client.post(link).status_code == 403
    assert api.post(link).status_code == 302  # a token is no login session
    assert not NotificationSettings.of(alice).address_verified
    tampered = link.replace(link.split("/")[-2], link.split("/")[-2][:-3] + "abc")
    assert alice_client.post(tampered).status_code == 400
    assert alice_client.post(link).status_code == 302
    again = alice_client.post(link)
    assert again.status_code == 400 and b"already used" in again.content


def test_changing_the_address_resets_verification_and_voids_old_links(alice, alice_client, api, mailbox):
    api.patch("/api/notifications/", {"address": "alice@lab.example"}, format="json")
    alice_client.post(_link(mailbox, "alice@lab.example"))
    assert NotificationSettings.of(alice).address_verified
    old = _link(mailbox, "alice@lab.example")
    api.patch("/api/notifications/", {"address": "alice@home.example"}, format="json")
    prefs = NotificationSettings.of(alice)
    assert (prefs.address, prefs.address_verified) == ("alice@home.example", False)
    assert alice_client.post(old).status_code == 400
    assert not NotificationSettings.of(alice).address_verified
    _link(mailbox, "alice@home.example")  # a new link went to the new address


def test_a_verification_link_expires(alice, alice_client, api, mailbox, monkeypatch):
    two_days_ago = int(time.time()) - 49 * 3600
    monkeypatch.setattr(signing.TimestampSigner, "timestamp", lambda self: signing.b62_encode(two_days_ago))
    api.patch("/api/notifications/", {"address": "alice@lab.example"}, format="json")
    monkeypatch.undo()
    expired = alice_client.post(_link(mailbox, "alice@lab.example"))
    assert expired.status_code == 400 and b"expired" in expired.content
    assert not NotificationSettings.of(alice).address_verified


def test_guessing_the_password_on_the_email_page_locks_out_like_the_login(alice, alice_client, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        wrong = alice_client.post("/accounts/email/", {"email": "new@example.org", "password": "guess"})
        assert wrong.status_code == 400 and b"not your current password" in wrong.content
    locked = alice_client.post("/accounts/email/", {"email": "new@example.org", "password": "guess"})
    assert locked.status_code == 429 and b"Too many failed logins" in locked.content
    right = alice_client.post("/accounts/email/", {"email": "new@example.org", "password": "alice-pass-123"})
    assert right.status_code == 429  # locked even for the right password, as the login is
    alice.refresh_from_db()
    assert alice.email == ""
