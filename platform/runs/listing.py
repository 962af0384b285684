"""The runs a list shows (the page and ``GET /api/runs/``): the readable runs narrowed by status, name,
archive state and a filter expression, in the order asked for, with the extra columns asked for.

Status, name and archive state narrow in the database. A filter or sort on a config key or a metric is
evaluated in Python (runs.run_filter) over the remaining runs, their config and latest metrics read in one
query: JSON paths compare differently in SQLite and PostgreSQL, and a user's runs number in the thousands
at most. Past ``MAX_EVALUATED`` runs the filter asks to be narrowed first instead of answering slowly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from runs import access
from runs.models import Run, Status
from runs.run_filter import DEFAULT_SORT, FilterError, apply, parse, parse_columns, parse_sort

ARCHIVED = ("active", "archived", "all")
MAX_EVALUATED = 20_000
DB_SORTS = {"created": "created_at", "id": "id", "name": "name", "status": "status", "step": "step"}


class ListError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def listed_runs(user: Any, params: Mapping[str, Any]) -> tuple[QuerySet[Run] | list[Run], list[str]]:
    """(runs, columns) for the query ``params``; ListError(field, message) for a bad parameter."""
    runs = access.visible_runs(user).select_related("owner")
    status = params.get("status") or ""
    if status:
        if status not in Status.values:
            raise ListError("status", f"must be one of {', '.join(Status.values)}")
        runs = runs.filter(status=status)
    if q := (params.get("q") or "").replace("\x00", "").strip():
        runs = runs.filter(name__icontains=q)
    archived = params.get("archived") or "active"
    if archived not in ARCHIVED:
        raise ListError("archived", f"must be one of {', '.join(ARCHIVED)}")
    if archived != "all":
        runs = runs.filter(archived=archived == "archived")
    try:
        terms = parse(params.get("filter"))
    except FilterError as e:
        raise ListError("filter", str(e)) from None
    try:
        field, descending = parse_sort(params.get("sort"))
    except FilterError as e:
        raise ListError("sort", str(e)) from None
    try:
        columns = parse_columns(params.get("columns"))
    except FilterError as e:
        raise ListError("columns", str(e)) from None
    if not terms and field in DB_SORTS:
        order = DB_SORTS[field]
        return runs.order_by(f"-{order}" if descending else order, "-id"), columns
    if runs.count() > MAX_EVALUATED:
        raise ListError(
            "filter", f"more than {MAX_EVALUATED} runs to evaluate: narrow by status or name first"
        )
    ordered = runs.order_by("-created_at", "-id")  # ties keep the newest first
    return apply(ordered, terms, params.get("sort") or DEFAULT_SORT), columns
