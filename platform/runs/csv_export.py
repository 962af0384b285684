"""The one CSV writer of every CSV the product serves (metrics of a run or a comparison, sample exports).

Cells hold text that other users wrote (run names, metric names, model output), and a spreadsheet runs a
cell that starts with = + - @ (or a tab or carriage return, which some strip first) as a formula:
``=HYPERLINK(...)`` in a shared run's name would reach every reader's spreadsheet. So, as OWASP's "CSV
injection" advice says, such a text cell gets a leading ``'``: shown as written, never evaluated. Only
text is touched: numbers stay numbers (``-1.5`` is a value, not a formula), so the export still sums.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a spreadsheet-safe cell: text that could start a formula gets a leading quote; None is
    an empty cell, booleans are ``true``/``false``, numbers are written as they are."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(rows: Iterable[Iterable[Any]]) -> str:
    """Rows as CSV lines (``\\n``-terminated), every cell through :func:`csv_cell`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([csv_cell(value) for value in row] for row in rows)
    return buffer.getvalue()
