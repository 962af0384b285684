"""Integers out of requests: one set of rules for the pages, the API and the websocket.

A database id is a positive bigint (``1 .. DB_ID_MAX``): a larger number in a URL or a query is a 404 or a
field error, never the database's overflow error. Steps, lengths and problem indexes are integer columns
(``INT32_MAX``). ``DbIdConverter`` is the URL converter ``<id:name>`` for ids in paths; ``to_int`` and
``int_param`` parse a value and raise ``BadInteger`` with a message that names the field and its range;
``int_or_none`` is the lenient form for pages that ignore a malformed value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.urls import register_converter

DB_ID_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


class BadInteger(ValueError):
    """A value that is not an integer in the range asked for. ``reason`` says what was wrong ("must be an
    integer between 0 and 10, got 'x'"); ``str()`` is ``"<name>: <reason>"``, the message for the user."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason
        super().__init__(f"{name}: {reason}")


def to_int(raw: Any, name: str, *, low: int = 0, high: int = DB_ID_MAX) -> int:
    """``raw`` (query text, form text or a JSON number) as an int in ``[low, high]``.

    Only ASCII digits with an optional leading ``-`` are read as text (``int()`` would also take ``"²"``,
    ``"1_000"`` and surrounding spaces); a JSON ``true`` is not an integer.
    """
    value: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str):
        text = raw.strip()
        digits = text[1:] if text.startswith("-") else text
        if digits.isascii() and digits.isdigit() and len(digits) <= 20:
            value = int(text)
    if value is None or not low <= value <= high:
        shown = raw[:40] if isinstance(raw, str) else raw
        raise BadInteger(name, f"must be an integer between {low} and {high}, got {shown!r}")
    return value


def int_param(
    params: Mapping[str, Any], name: str, *, low: int = 0, high: int = DB_ID_MAX, default: int | None = None
) -> int | None:
    """``params[name]`` (a query dict or a JSON body) read by ``to_int``; ``default`` when absent or empty."""
    raw = params.get(name)
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        return default
    return to_int(raw, name, low=low, high=high)


def int_or_none(raw: Any, *, low: int = 1, high: int = DB_ID_MAX) -> int | None:
    """``to_int`` that answers None instead of raising: for a page that ignores a malformed value."""
    try:
        return to_int(raw, "value", low=low, high=high)
    except BadInteger:
        return None


class DbIdConverter:
    """``<id:run_id>``: a positive bigint; anything else does not match, so the URL is a 404."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 0 < number <= DB_ID_MAX:
            raise ValueError(value)  # the converter's way to say "no match"
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(DbIdConverter, "id")
