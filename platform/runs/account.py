"""Account security: the user's API token page (show, create, replace, revoke), the account e-mail page, the
rate-limited password-reset form, and the page of a throttled login.

A revoked or replaced token is deleted at once, so the next request that presents it gets 401; so is the
token of a user whose password changes. The account e-mail, where password resets go, changes only here in
the browser with the current password: with an API token alone it would be an account takeover (set it,
then ask for a reset).
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import authenticate
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.models import User
from django.contrib.auth.views import PasswordResetView
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token

from runs import throttle


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


class AccountEmailForm(forms.Form):
    email = forms.EmailField(
        label="New e-mail", max_length=254, widget=forms.EmailInput(attrs={"autocomplete": "email"})
    )
    password = forms.CharField(
        label="Current password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request = request

    def clean_password(self) -> str:
        """Checked as a login checks it, so django-axes counts a wrong one and locks out a guesser."""
        password = self.cleaned_data["password"]
        user = cast(User, self.request.user)
        found = authenticate(self.request, username=user.get_username(), password=password)
        if found is None or found.pk != user.pk:
            raise forms.ValidationError("That is not your current password.")
        return password


@require_http_methods(["GET", "POST"])
def account_email(request: HttpRequest) -> HttpResponse:
    """Change the account's e-mail with the current password (a session only: the API refuses it)."""
    user = cast(User, request.user)  # the login middleware lets no anonymous visitor (nor token) here
    form = AccountEmailForm(request, data=request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "runs/account_email.html", {"form": form}, status=400)
        user.email = form.cleaned_data["email"]
        user.save(update_fields=["email"])
        messages.info(request, f"Your account e-mail is now {user.email}: password resets go there.")
        return redirect("account-email")
    return render(request, "runs/account_email.html", {"form": form})


class ThrottledPasswordReset(PasswordResetView):
    """Django's password-reset form, at most ``DAPO_RESET_PER_ADDRESS_PER_HOUR`` requests per client
    address and ``DAPO_RESET_PER_EMAIL_PER_HOUR`` per e-mail address typed in. An address is counted whether
    an account has it or not, so a 429 tells nothing about accounts; a refused request counts nothing."""

    def form_valid(self, form: PasswordResetForm) -> HttpResponse:
        refused = throttle.take(
            (throttle.RESET_BY_ADDRESS, throttle.client_address(self.request)),
            (throttle.RESET_BY_EMAIL, form.cleaned_data["email"].strip().lower()),
        )
        if refused:
            context = {"back": reverse("login")}
            return throttle.too_many(self.request, refused, "registration/throttled.html", context)
        return super().form_valid(form)


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
