"""The user's API token: show it, create it, or revoke and replace it (POST)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token


@require_http_methods(["GET", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    token = Token.objects.filter(user=request.user).first()
    if request.method == "POST":
        if token is not None:
            token.delete()  # revokes the old token at once
        token = Token.objects.create(user=request.user) if request.POST.get("action") != "revoke" else None
    return render(request, "runs/token.html", {"token": token})
