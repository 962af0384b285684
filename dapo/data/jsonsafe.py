"""JSON from outside (request bodies, dataset rows, websocket messages) with a bound on nesting.

Python's json parser recurses once per level of ``[`` or ``{``: a body of 100,000 ``[`` raises
RecursionError, which no caller expects (a 500 in a web view), and a value nested 900 deep parses but
then breaks whatever walks it recursively (a serializer, ``copy.deepcopy``, a database adapter). No
dataset row or config needs more than a few levels, so :func:`loads` refuses anything nested deeper
than ``MAX_DEPTH`` with a ``ValueError`` a caller already handles as "bad JSON".
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting of lists and objects accepted; a DAPO dataset row needs 3 (prompt -> message -> text)."""


class TooDeep(ValueError):
    """The JSON value is nested deeper than the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nested deeper than {limit} levels of lists/objects")
        self.limit = limit


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a decoded value (a scalar is 0, ``[]`` is 1), counted without recursion; stops
    counting (and returns ``limit + 1``) as soon as the value is deeper than ``limit``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        if level > limit:
            return limit + 1
        deepest = max(deepest, level)
        stack.extend((child, level) for child in children)
    return deepest


def check_depth(value: Any, limit: int = MAX_DEPTH) -> Any:
    """``value`` itself, or TooDeep when it is nested deeper than ``limit``."""
    if depth(value, limit) > limit:
        raise TooDeep(limit)
    return value


def loads(text: str | bytes, limit: int = MAX_DEPTH) -> Any:
    """``json.loads`` that raises ValueError (never RecursionError) for input nested past ``limit``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(limit) from None
    return check_depth(value, limit)
