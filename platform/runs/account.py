"""Account security: the user's API token page (show, create, replace, revoke), the page of a throttled
login, and the Content-Security-Policy header of every response.

A revoked or replaced token is deleted at once, so the next request that presents it gets 401; so is the
token of a user whose password changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.contrib import messages
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.decorators import sync_and_async_middleware
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token


@require_http_methods(["GET", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        action = request.POST.get("action")
        if action not in ("create", "revoke"):
            return render(request, "runs/token.html", {"token": _token_of(request.user)}, status=400)
        revoked = Token.objects.filter(user=request.user).delete()[0] > 0  # the old key stops working now
        if action == "create":
            Token.objects.create(user=request.user)
            messages.info(
                request, "A new token was created." + (" The old one no longer works." if revoked else "")
            )
        elif revoked:
            messages.info(request, "Your token was revoked: requests that send it now get 401.")
        return redirect("api-token")  # POST-redirect-GET: a reload never replaces the token again
    return render(request, "runs/token.html", {"token": _token_of(request.user)})


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


def _with_csp(response: HttpResponse) -> HttpResponse:
    policy = settings.CONTENT_SECURITY_POLICY
    header = "Content-Security-Policy" + (
        "-Report-Only" if settings.CONTENT_SECURITY_POLICY_REPORT_ONLY else ""
    )
    if policy and header not in response:
        response[header] = policy
    return response


@sync_and_async_middleware
def content_security_policy(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """Adds ``settings.CONTENT_SECURITY_POLICY`` (empty: none) to responses that do not set their own, as
    Content-Security-Policy-Report-Only when ``CONTENT_SECURITY_POLICY_REPORT_ONLY``."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            response: Awaitable[HttpResponse] = get_response(request)
            return _with_csp(await response)

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponse:
        return _with_csp(get_response(request))

    return sync_middleware
