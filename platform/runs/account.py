"""Account security: the user's API token page (show, create, replace, revoke) and the page of a throttled
login.

A revoked or replaced token is deleted at once, so the next request that presents it gets 401; so is the
token of a user whose password changes.
"""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token


@require_http_methods(["GET", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    user = cast(User, request.user)  # the login middleware lets no anonymous visitor here
    if request.method == "POST":
        action = request.POST.get("action")
        if action not in ("create", "revoke"):
            return render(request, "runs/token.html", {"token": _token_of(user)}, status=400)
        revoked = Token.objects.filter(user=user).delete()[0] > 0  # the old key stops working now
        if action == "create":
            Token.objects.create(user=user)
            messages.info(
                request, "A new token was created." + (" The old one no longer works." if revoked else "")
            )
        elif revoked:
            messages.info(request, "Your token was revoked: requests that send it now get 401.")
        return redirect("api-token")  # POST-redirect-GET: a reload never replaces the token again
    return render(request, "runs/token.html", {"token": _token_of(user)})


def locked_out(request: HttpRequest, response: Any = None, credentials: dict | None = None) -> HttpResponse:
    """The page (429) a login gets while its account or address is locked by django-axes."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    context = {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "minutes": round(settings.AXES_COOLOFF_TIME.total_seconds() / 60),
        "username": username if isinstance(username, str) else "",
    }
    return render(request, "registration/locked.html", context, status=429)


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def revoke_tokens_on_password_change(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A new password ends the API token too, as it ends the other sessions. ``_password`` holds the raw
    password from ``set_password`` until the save that stores it (the password form, the admin, a reset,
    ``changepassword``); the silent re-hash of a login clears it first, so it revokes nothing."""
    if getattr(instance, "_password", None) is not None:
        Token.objects.filter(user=instance).delete()


def _token_of(user: Any) -> Token | None:
    return Token.objects.filter(user=user).first()
