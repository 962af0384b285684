"""A user's notification settings as the page (/accounts/notifications/) and the API (/api/notifications/)
read, check and change them, with one set of checks for both (notifications.models holds the models)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models, transaction
from runs import throttle

from notifications.address import Outcome, mail_link
from notifications.delivery import email_configured
from notifications.models import Notification, NotificationSettings
from notifications.webhook_urls import webhook_problem

MAX_STALL_MINUTES = 7 * 24 * 60
SETTINGS_FIELDS = ("webhook_url", "email", "stall_minutes", "address")
STORED_FIELDS = ("webhook_url", "email", "stall_minutes", "address", "address_verified_at", "verify_nonce")
"""What a save writes (a new address resets its verification)."""
RECENT_DELIVERIES = 20
ACCOUNT_EMAIL_PAGE = "/accounts/email/"
ACCOUNT_EMAIL_REFUSED = (
    "The account's e-mail (where password resets go) changes only in the browser, with your current "
    f"password: {ACCOUNT_EMAIL_PAGE}. An API token is not enough. The notification address is 'address'."
)


def validate_settings(
    *, webhook_url: Any, email: Any, stall_minutes: Any, address: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """Every field of a user's settings checked at once: (the cleaned values, the errors by field). The
    page and the API both call this with all four (the API fills in what a PATCH leaves out from the saved
    settings); nothing may be saved unless the errors are empty. ``stall_minutes``: an int or its digits;
    ``address``: the notification address, which e-mail notifications need (not the login e-mail)."""
    errors: dict[str, str] = {}
    url = webhook_url.strip() if isinstance(webhook_url, str) else ""
    if not isinstance(webhook_url, str):
        errors["webhook_url"] = "A URL as text (empty: no webhook)."
    elif url and (problem := webhook_problem(url)):
        errors["webhook_url"] = f"This URL {problem}."
    minutes = _minutes(stall_minutes)
    if minutes is None or not 0 <= minutes <= MAX_STALL_MINUTES:
        errors["stall_minutes"] = f"A whole number of minutes from 0 (never) to {MAX_STALL_MINUTES}."
    mail = address.strip() if isinstance(address, str) else ""
    if not isinstance(address, str) or len(mail) > 254:
        errors["address"] = "Not an e-mail address."
    elif mail:
        try:
            validate_email(mail)
        except ValidationError:
            errors["address"] = "Not an e-mail address."
    if not isinstance(email, bool):
        errors["email"] = "On or off (true or false)."
    elif email and not email_configured():
        errors["email"] = "E-mail is not configured on this server (an administrator sets DJANGO_EMAIL_HOST)."
    elif email and not mail and "address" not in errors:
        errors["address"] = "E-mail notifications need an address."
    values = {"webhook_url": url, "email": email is True, "stall_minutes": minutes or 0, "address": mail}
    return values, errors


def _minutes(raw: Any) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        return int(raw.strip())
    return None


def current_settings(user: Any) -> dict[str, Any]:
    """The four fields as ``validate_settings`` takes them: the saved settings, or the defaults."""
    prefs = NotificationSettings.of(user)
    return {
        "webhook_url": prefs.webhook_url,
        "email": prefs.email,
        "stall_minutes": prefs.stall_minutes,
        "address": prefs.address,
    }


def save_settings(user: Any, values: dict[str, Any]) -> tuple[NotificationSettings, Outcome | None]:
    """Store values that ``validate_settings`` passed; a new address starts unverified and is mailed a
    verification link (the outcome, None when the address did not change or was cleared)."""
    prefs, changed = _store(user, values)
    return prefs, (mail_link(prefs) if changed and prefs.address else None)


@transaction.atomic
def _store(user: Any, values: dict[str, Any]) -> tuple[NotificationSettings, bool]:
    prefs = NotificationSettings.of(user)
    prefs.webhook_url, prefs.email, prefs.stall_minutes = (
        values["webhook_url"],
        values["email"],
        values["stall_minutes"],
    )
    changed = prefs.set_address(values["address"])
    if prefs.pk:
        prefs.save(update_fields=[*STORED_FIELDS])
    else:
        prefs.save()
    return prefs, changed


def refused_test(user: Any) -> Outcome | None:
    """Why "Send a test" sends nothing now (nothing set up; the hourly limit, a 429), or None, counting
    this test against the limit."""
    prefs = NotificationSettings.of(user)
    if not prefs.pk or not (prefs.webhook_url or prefs.email):
        return Outcome(False, "Nothing to test: save a webhook URL or turn e-mail on first.")
    refused = throttle.take((throttle.NOTIFY_TEST, str(user.pk)))
    return Outcome(False, refused.message, refused) if refused else None


def recent_deliveries(user: Any) -> models.QuerySet[Notification]:
    """The user's newest notifications (each one event on one channel), with their state and last error."""
    return Notification.objects.filter(user=user).select_related("run")[:RECENT_DELIVERIES]
