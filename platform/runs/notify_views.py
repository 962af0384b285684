"""The notification settings page (/accounts/notifications/): webhook, e-mail, stall minutes, a test, and
the user's recent deliveries with their errors (runs.notifications)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from runs.notifications import (
    Delivery,
    NotificationSettings,
    allowed_prefixes,
    current_settings,
    email_configured,
    recent_deliveries,
    save_settings,
    send_test,
    validate_settings,
)


@require_http_methods(["GET", "POST"])
def notification_settings(request: HttpRequest) -> HttpResponse:
    user = cast(User, request.user)  # the login middleware lets no anonymous visitor here
    prefs = NotificationSettings.of(user)
    if request.method == "POST":
        if request.POST.get("action") == "test":
            return _test(request, prefs)
        values, errors = _parse(request.POST)
        if errors:
            return _render(request, prefs, values, errors, status=400)
        save_settings(user, values)
        messages.info(request, "Notification settings saved.")
        return redirect("notification-settings")
    return _render(request, prefs, current_settings(user), {})


def _parse(post: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The form's values and the errors by field (runs.notifications.validate_settings, as the API)."""
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
    if not prefs.pk or not (prefs.webhook_url or prefs.email):
        messages.error(request, "Nothing to test: save a webhook URL or turn e-mail on first.")
        return redirect("notification-settings")
    for note in send_test(request.user):
        if note.status == Delivery.SENT:
            messages.info(request, f"Test {note.channel} sent to {note.target}.")
        else:
            messages.error(request, f"Test {note.channel} to {note.target} failed: {note.last_error}")
    return redirect("notification-settings")


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
    return render(request, "runs/notifications.html", context, status=status)
