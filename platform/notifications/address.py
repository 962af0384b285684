"""Verifying a notification address before anything is mailed there.

The address is the user's own field (``NotificationSettings.address``), never the account's login e-mail:
an API token may set it, and that must not be enough to receive anything. Setting it mails a link to it;
the link is signed (Django's signing, salted for this purpose), expires after ``LINK_MAX_AGE`` and names a
nonce stored with the settings, which opening it clears (single use) and which a new link or a new address
replaces. Only the owner, logged in with a session, can confirm it, on a page with a button (a POST): a
token is no session, and a link opened by an image or a mail scanner confirms nothing.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.utils import timezone
from runs import throttle

from notifications.delivery import email_configured
from notifications.models import NotificationSettings

log = logging.getLogger(__name__)

SALT = "notifications.address.verify"
LINK_MAX_AGE = timedelta(hours=48)


@dataclass(frozen=True)
class Outcome:
    """What became of a request to send something: whether it went, the sentence the page and the API show,
    and the limit that refused it, if one did (a 429)."""

    ok: bool
    message: str
    refusal: throttle.Refusal | None = None


class BadLink(Exception):
    """A verification link that confirms nothing; ``status`` is the page's HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def mail_link(prefs: NotificationSettings) -> Outcome:
    """Mail a verification link to the user's (saved) unverified address, within the hourly limit."""
    if not prefs.pk or not prefs.address or prefs.address_verified:
        return Outcome(False, "There is no unverified address to verify.")
    if not email_configured():
        return Outcome(
            False, "E-mail is not configured on this server, so the address cannot be verified yet."
        )
    refused = throttle.take((throttle.NOTIFY_VERIFY, str(prefs.user_id)))
    if refused:
        return Outcome(False, refused.message, refused)
    link = _new_link(prefs)
    body = (
        f"Someone (we hope you) asked the DAPO platform at {settings.DAPO_SITE_URL} to send notifications "
        f"of account {prefs.user.get_username()!r} to this address.\n\nTo confirm, open this link while "
        f"logged in to that account, within {_hours(LINK_MAX_AGE)} hours:\n\n{link}\n\nIf it was not you, "
        "ignore this mail: nothing is sent here until the link is opened."
    )
    try:
        send_mail("Confirm your DAPO notification address", body, None, [prefs.address], fail_silently=False)
    except Exception as e:  # the mail server's answer is the user's to read; the address stays unverified
        log.warning("verification mail to %s failed: %s", prefs.address, e)
        return Outcome(False, f"The verification mail to {prefs.address} could not be sent: {e}")
    return Outcome(
        True,
        f"A verification link was mailed to {prefs.address}: open it while logged in here, within "
        f"{_hours(LINK_MAX_AGE)} hours. Nothing is mailed there until then.",
    )


def open_link(user: Any, token: str) -> NotificationSettings:
    """The settings a link would verify, after every check; raises ``BadLink`` saying why not."""
    try:
        data = signing.loads(token, salt=SALT, max_age=LINK_MAX_AGE)
    except signing.SignatureExpired:
        raise BadLink(
            f"This verification link expired (links last {_hours(LINK_MAX_AGE)} hours): send a new one from "
            "the notifications page."
        ) from None
    except signing.BadSignature:
        raise BadLink("This verification link is not valid: copy the whole link from the mail.") from None
    if not isinstance(data, dict) or data.get("u") != user.pk:
        raise BadLink("This verification link is for another account: log in as its owner to open it.", 403)
    prefs = NotificationSettings.of(user)
    if (
        not prefs.pk
        or not prefs.verify_nonce
        or (data.get("a"), data.get("n"))
        != (
            prefs.address,
            prefs.verify_nonce,
        )
    ):
        raise BadLink(
            "This verification link was already used, or a newer link or another address replaced it."
        )
    return prefs


def confirm(user: Any, token: str) -> NotificationSettings:
    """Verify the address a link names (once: the update clears the nonce it matched)."""
    prefs = open_link(user, token)
    done = NotificationSettings.objects.filter(
        pk=prefs.pk, address=prefs.address, verify_nonce=prefs.verify_nonce
    ).update(address_verified_at=timezone.now(), verify_nonce="")
    if not done:  # another request used it first
        raise BadLink("This verification link was already used.")
    prefs.refresh_from_db()
    return prefs


def _new_link(prefs: NotificationSettings) -> str:
    """A link for the current address; it replaces every earlier one."""
    prefs.verify_nonce = secrets.token_urlsafe(16)
    prefs.save(update_fields=["verify_nonce"])
    token = signing.dumps({"u": prefs.user_id, "a": prefs.address, "n": prefs.verify_nonce}, salt=SALT)
    return f"{settings.DAPO_SITE_URL.rstrip('/')}/accounts/notifications/verify/{token}/"


def _hours(age: timedelta) -> int:
    return round(age.total_seconds() / 3600)
