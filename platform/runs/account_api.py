"""The API of a user's own settings: notification settings and saved views of the runs list. The checks are
the pages' own (runs.notifications.validate_settings, runs.manage.validate_view): a 400 names each bad
field and nothing changes.

GET   /api/notifications/     webhook URL, e-mail on/off, address, stall minutes, the last 20 deliveries
PATCH /api/notifications/     {"webhook_url"?, "email"?, "stall_minutes"?, "address"?}
GET   /api/views/             the caller's saved views
POST  /api/views/             {"name", "filter"?, "sort"?, "columns"?, "archived"?}: 201 (200 when it
                              replaced the caller's view of that name)
DELETE /api/views/<id>/       204; another user's view is a 404
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.shortcuts import get_object_or_404
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import manage
from runs.api import extend_schema
from runs.manage_views import view_url
from runs.models import Notification, SavedView
from runs.notifications import (
    SETTINGS_FIELDS,
    current_settings,
    email_configured,
    recent_deliveries,
    save_settings,
    validate_settings,
)


def _user(request: Request) -> User:
    """The caller (DRF's default permission lets no anonymous request reach these views)."""
    return cast(User, request.user)


def _invalid(detail: str, errors: dict[str, str]) -> Response:
    return Response({"detail": detail, "errors": errors}, status=status.HTTP_400_BAD_REQUEST)


def _object_body(request: Request, fields: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON object of the request and an error for each field the endpoint does not know."""
    body = request.data if isinstance(request.data, dict) else None
    if body is None:
        return {}, {"body": "must be a JSON object"}
    unknown = sorted(str(k)[:100] for k in body if k not in fields)
    return body, {k: f"unknown field; valid fields: {', '.join(fields)}" for k in unknown}


# ---- notification settings ----------------------------------------------------------------------------


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = [
            "id",
            "run",
            "event",
            "channel",
            "target",
            "status",
            "attempts",
            "last_error",
            "created_at",
            "sent_at",
        ]


class NotificationSettingsSerializer(serializers.Serializer):
    """The body of PATCH /api/notifications/ (any of the fields) and the settings in the answers."""

    webhook_url = serializers.CharField(
        required=False, allow_blank=True, help_text="Under a DAPO_WEBHOOK_URLS prefix; empty: no webhook."
    )
    email = serializers.BooleanField(required=False, help_text="E-mail the address (needs mail settings).")
    stall_minutes = serializers.IntegerField(
        required=False, help_text="A running run without a new step for this long stalled (0: never)."
    )
    address = serializers.CharField(required=False, allow_blank=True, help_text="The account's e-mail.")


def _settings_answer(user: Any) -> dict[str, Any]:
    return {
        **current_settings(user),
        "email_configured": email_configured(),
        "deliveries": DeliverySerializer(recent_deliveries(user), many=True).data,
    }


class NotificationSettingsView(APIView):
    """Your notification settings and your last 20 deliveries (each with its state and last error)."""

    serializer_class = NotificationSettingsSerializer

    def get(self, request: Request) -> Response:
        return Response(_settings_answer(_user(request)))

    @extend_schema(request=NotificationSettingsSerializer, responses={200: NotificationSettingsSerializer})
    def patch(self, request: Request) -> Response:
        """Change any of the fields; those left out keep their values. The checks of the settings page
        (the webhook allowlist, the minutes' range, an address for e-mail): a 400 names each bad field and
        nothing is saved."""
        body, errors = _object_body(request, SETTINGS_FIELDS)
        known = {k: v for k, v in body.items() if k in SETTINGS_FIELDS}
        values, problems = validate_settings(**{**current_settings(_user(request)), **known})
        errors = {**problems, **errors}
        if errors:
            return _invalid("invalid notification settings", errors)
        save_settings(_user(request), values)
        return Response(_settings_answer(_user(request)))


# ---- saved views of the runs list ---------------------------------------------------------------------


class SavedViewSerializer(serializers.ModelSerializer):
    class Meta:
        model = SavedView
        fields = ["id", "name", "columns", "sort", "filter", "archived", "created_at"]

    def to_representation(self, view: SavedView) -> dict[str, Any]:
        return {**super().to_representation(view), "url": view_url(view)}


class SavedViewRequestSerializer(serializers.Serializer):
    """The body of POST /api/views/."""

    name = serializers.CharField(max_length=100, help_text="Your view of this name is replaced.")
    filter = serializers.CharField(required=False, allow_blank=True, help_text="optim.lr < 1e-4 and ...")
    sort = serializers.CharField(
        required=False, allow_blank=True, help_text="A field, '-' first: descending."
    )
    columns = serializers.ListField(child=serializers.CharField(), required=False, help_text="Fields shown.")
    archived = serializers.ChoiceField(["active", "archived", "all"], required=False)


class SavedViewList(APIView):
    """Your saved views of the runs list (filter, sort and columns as GET /api/runs/ takes them)."""

    serializer_class = SavedViewSerializer

    def get(self, request: Request) -> Response:
        views = SavedView.objects.filter(owner=_user(request))[: manage.MAX_SAVED]
        return Response(SavedViewSerializer(views, many=True).data)

    @extend_schema(request=SavedViewRequestSerializer, responses={201: SavedViewSerializer})
    def post(self, request: Request) -> Response:
        """Save a view, checked as the runs list's "Save view" form checks it (a filter that does not
        parse, an unknown sort field or column: 400 naming the field, nothing saved)."""
        body, errors = _object_body(request, manage.VIEW_FIELDS)
        values, problems = manage.validate_view(_user(request), body)
        errors = {**problems, **errors}
        if errors:
            return _invalid("invalid view", errors)
        view, created = manage.save_view(_user(request), values)
        answer = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(SavedViewSerializer(view).data, status=answer)


class SavedViewDetail(APIView):
    serializer_class = SavedViewSerializer

    @extend_schema(responses={204: None})
    def delete(self, request: Request, view_id: int) -> Response:
        """Delete one of your views (another user's is a 404)."""
        get_object_or_404(SavedView, owner=_user(request), pk=view_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
