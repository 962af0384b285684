"""The API of a user's saved views of the runs list. The checks are the page's own
(runs.manage.validate_view): a 400 names each bad field and nothing changes.

GET   /api/views/             the caller's saved views
POST  /api/views/             {"name", "filter"?, "sort"?, "columns"?, "archived"?}: 201 (200 when it
                              replaced the caller's view of that name)
DELETE /api/views/<id>/       204; another user's view is a 404
"""

from __future__ import annotations

from typing import Any

from core.openapi import caller, extend_schema, invalid, object_body
from django.shortcuts import get_object_or_404
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import manage
from runs.manage_views import view_url
from runs.models import SavedView


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
        views = SavedView.objects.filter(owner=caller(request))[: manage.MAX_SAVED]
        return Response(SavedViewSerializer(views, many=True).data)

    @extend_schema(request=SavedViewRequestSerializer, responses={201: SavedViewSerializer})
    def post(self, request: Request) -> Response:
        """Save a view, checked as the runs list's "Save view" form checks it (a filter that does not
        parse, an unknown sort field or column: 400 naming the field, nothing saved)."""
        body, errors = object_body(request, manage.VIEW_FIELDS)
        values, problems = manage.validate_view(caller(request), body)
        errors = {**problems, **errors}
        if errors:
            return invalid("invalid view", errors)
        view, created = manage.save_view(caller(request), values)
        answer = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(SavedViewSerializer(view).data, status=answer)


class SavedViewDetail(APIView):
    serializer_class = SavedViewSerializer

    @extend_schema(responses={204: None})
    def delete(self, request: Request, view_id: int) -> Response:
        """Delete one of your views (another user's is a 404)."""
        get_object_or_404(SavedView, owner=caller(request), pk=view_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
