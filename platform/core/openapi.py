"""The API's helpers: ``extend_schema`` (drf-spectacular's, or a no-op without it), query parameters
described for the schema and /api/docs/ and their parsing into DRF field errors, and the JSON body of a
request checked against the fields an endpoint knows."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.params import DB_ID_MAX, BadInteger, int_param

try:
    from drf_spectacular.utils import OpenApiParameter, extend_schema
except ImportError:  # the OpenAPI schema is optional: without drf-spectacular the API works the same
    OpenApiParameter = None  # type: ignore[misc,assignment]

    def extend_schema(**_: Any) -> Any:  # type: ignore[misc]
        return lambda view: view


def query_params(**described: tuple[type, str]) -> list[Any]:
    """Query parameters for the schema and /api/docs/: name=(type, description)."""
    if OpenApiParameter is None:
        return []
    return [
        OpenApiParameter(name, kind, OpenApiParameter.QUERY, description=text)
        for name, (kind, text) in described.items()
    ]


def query_int(request: Request, name: str, minimum: int = -DB_ID_MAX) -> int | None:
    """An integer query parameter (``core.params`` rules) as a DRF field error when malformed."""
    try:
        return int_param(request.query_params, name, low=minimum)
    except BadInteger as e:
        raise ValidationError({name: e.reason}) from None


def query_bool(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ValidationError({name: f"must be true or false, got {raw!r}"})


def caller(request: Request) -> User:
    """The caller of an API view (DRF's default permission lets no anonymous request reach one)."""
    return cast(User, request.user)


def invalid(detail: str, errors: dict[str, str]) -> Response:
    return Response({"detail": detail, "errors": errors}, status=status.HTTP_400_BAD_REQUEST)


def object_body(request: Request, fields: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON object of the request and an error for each field the endpoint does not know."""
    body = request.data if isinstance(request.data, dict) else None
    if body is None:
        return {}, {"body": "must be a JSON object"}
    unknown = sorted(str(k)[:100] for k in body if k not in fields)
    return body, {k: f"unknown field; valid fields: {', '.join(fields)}" for k in unknown}
