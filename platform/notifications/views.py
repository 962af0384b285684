"""The notification settings page (/accounts/notifications/): webhook, e-mail and its address (verified
first, notifications.address), stall minutes, a test, and the user's recent deliveries with their errors; and
the page a verification link opens (/accounts/notifications/verify/<token>/)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from notifications.address import BadLink, Outcome, confirm, mail_link, open_link
from notifications.delivery import email_configured, send_test
from notifications.models import Delivery, NotificationSettings
from notifications.preferences import (
    current_settings,
    recent_deliveries,
    refused_test,
    save_settings,
    validate_settings,
)
from notifications.webhook_urls import allowed_prefixes


@require_http_methods(["GET", "POST"])
def notification_settings(request: HttpRequest) -> HttpResponse:
    user = cast(User, request.user)  # the login middleware lets no anonymous visitor here
    prefs = NotificationSettings.of(user)
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "test":
            return _test(request, prefs)
        if action == "resend":
            return _after(request, prefs, mail_link(prefs))
        values, errors = _parse(request.POST)
        if errors:
            return _render(request, prefs, values, errors, status=400)
        prefs, mailed = save_settings(user, values)
        messages.info(request, "Notification settings saved.")
        if mailed:  # a new address: its verification link went out, or why not (saved all the same)
            _say(request, mailed)
        return redirect("notification-settings")
    return _render(request, prefs, current_settings(user), {})


def _parse(post: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The form's values and the errors by field (notifications.preferences.validate_settings, as the API)."""
    raw_minutes = post.get("stall_minutes", "").strip()
    values, errors = validate_settings(
        webhook_url=post.get("webhook_url", ""),
        email=post.get("email") == "on",
        stall_minutes=raw_minutes,
        address=post.get("address", ""),
    )
    if "stall_minutes" in errors:
        values["stall_minutes"] = raw_minutes  # shown again as typed
    return values, errors


def _test(request: HttpRequest, prefs: NotificationSettings) -> HttpResponse:
    refused = refused_test(request.user)
    if refused:
        return _after(request, prefs, refused)
    for note in send_test(request.user):
        if note.status == Delivery.SENT:
            messages.info(request, f"Test {note.channel} sent to {note.target}.")
        elif note.status == Delivery.PENDING:
            messages.error(request, f"Test {note.channel} to {note.target} failed: {note.last_error}")
        else:  # recorded, not sent: an unverified address, the hourly e-mail limit
            messages.error(request, f"Test {note.channel} to {note.target} {note.last_error}.")
    return redirect("notification-settings")


def _after(request: HttpRequest, prefs: NotificationSettings, outcome: Outcome) -> HttpResponse:
    """Back to the page with the outcome said; a limit's refusal is the page itself with 429."""
    _say(request, outcome)
    if outcome.refusal is None:
        return redirect("notification-settings")
    response = _render(request, prefs, current_settings(request.user), {}, status=429)
    response["Retry-After"] = str(outcome.refusal.retry_after_s())
    return response


def _say(request: HttpRequest, outcome: Outcome) -> None:
    (messages.info if outcome.ok else messages.error)(request, outcome.message)


def _render(
    request: HttpRequest,
    prefs: NotificationSettings,
    values: dict[str, Any],
    errors: dict[str, str],
    status: int = 200,
) -> HttpResponse:
    context = {
        "values": values,
        "errors": errors,
        "saved": prefs,
        "email_configured": email_configured(),
        "allowed": allowed_prefixes(),
        "deliveries": recent_deliveries(request.user),
    }
    return render(request, "notifications/settings.html", context, status=status)


@require_http_methods(["GET", "POST"])
def verify_address(request: HttpRequest, token: str) -> HttpResponse:
    """GET: which address the link verifies, and a button; POST (the button): verify it. Only the owner,
    logged in, gets past the checks (notifications.address.open_link)."""
    try:
        if request.method == "POST":
            prefs = confirm(request.user, token)
            messages.info(request, f"{prefs.address} is verified: e-mail notifications go there now.")
            return redirect("notification-settings")
        prefs = open_link(request.user, token)
    except BadLink as bad:
        return render(
            request, "notifications/verify_address.html", {"problem": bad.message}, status=bad.status
        )
    return render(request, "notifications/verify_address.html", {"address": prefs.address})
