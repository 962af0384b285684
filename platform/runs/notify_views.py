"""The notification settings page (/accounts/notifications/): webhook, e-mail, stall minutes, a test, and
the user's recent deliveries with their errors (runs.notifications)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from runs.notifications import (
    Delivery,
    Notification,
    NotificationSettings,
    allowed_prefixes,
    email_configured,
    send_test,
    webhook_problem,
)

MAX_STALL_MINUTES = 7 * 24 * 60


@require_http_methods(["GET", "POST"])
def notification_settings(request: HttpRequest) -> HttpResponse:
    user = cast(User, request.user)  # the login middleware lets no anonymous visitor here
    prefs = NotificationSettings.of(user)
    if request.method == "POST":
        if request.POST.get("action") == "test":
            return _test(request, prefs)
        values, errors = _parse(request.POST, user)
        if errors:
            return _render(request, prefs, values, errors, status=400)
        prefs.webhook_url, prefs.email, prefs.stall_minutes = (
            values["webhook_url"],
            values["email"],
            values["stall_minutes"],
        )
        prefs.save()
        if values["address"] != user.email:
            user.email = values["address"]
            user.save(update_fields=["email"])
        messages.info(request, "Notification settings saved.")
        return redirect("notification-settings")
    values = {
        "webhook_url": prefs.webhook_url,
        "email": prefs.email,
        "stall_minutes": prefs.stall_minutes,
        "address": user.email,
    }
    return _render(request, prefs, values, {})


def _parse(post: Any, user: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The form's values and the errors by field; nothing is saved unless every field is valid."""
    errors: dict[str, str] = {}
    url = post.get("webhook_url", "").strip()
    if url and (problem := webhook_problem(url)):
        errors["webhook_url"] = f"This URL {problem}."
    raw = post.get("stall_minutes", "").strip()
    minutes = 0
    if not raw.isdigit() or not 0 <= int(raw) <= MAX_STALL_MINUTES:
        errors["stall_minutes"] = f"A whole number of minutes from 0 (never) to {MAX_STALL_MINUTES}."
    else:
        minutes = int(raw)
    address = post.get("address", "").strip()
    if address:
        try:
            validate_email(address)
        except ValidationError:
            errors["address"] = "Not an e-mail address."
    email = post.get("email") == "on"
    if email and not email_configured():
        errors["email"] = "E-mail is not configured on this server (an administrator sets DJANGO_EMAIL_HOST)."
    elif email and not address:
        errors["address"] = "E-mail notifications need an address."
    shown_minutes = raw if "stall_minutes" in errors else minutes
    values = {"webhook_url": url, "email": email, "stall_minutes": shown_minutes, "address": address}
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
        "deliveries": Notification.objects.filter(user=cast(User, request.user)).select_related("run")[:20],
    }
    return render(request, "runs/notifications.html", context, status=status)
