"""The API's JSON parser: DRF's, bounded in size and nesting, so no request body can cause a 500.

DRF's JSONParser reads the body from the request stream, past Django's DATA_UPLOAD_MAX_MEMORY_SIZE, and
lets the RecursionError of a body of 100,000 ``[`` escape as a server error. This one reads at most
``settings.DAPO_API_MAX_BODY_BYTES`` (413 beyond) and refuses nesting deeper than
``dapo.data.jsonsafe.MAX_DEPTH`` (400), both with a message that says what the limit is.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from dapo.data import jsonsafe


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DAPO_API_MAX_BODY_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise BodyTooLarge(f"the request body is larger than {limit} bytes (DAPO_API_MAX_BODY_BYTES)")
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - the body is not valid {encoding} text ({exc})") from None
        if not text.strip():
            raise ParseError("JSON parse error - the body is empty")
        try:
            return jsonsafe.check_depth(json.loads(text, parse_constant=json_constant))
        except RecursionError:
            raise ParseError(f"JSON parse error - {jsonsafe.TooDeep(jsonsafe.MAX_DEPTH)}") from None
        except ValueError as exc:  # JSONDecodeError and jsonsafe.TooDeep
            raise ParseError(f"JSON parse error - {exc}") from None


def json_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (DRF's STRICT_JSON)."""
    raise ValueError(f"{name} is not valid JSON")
