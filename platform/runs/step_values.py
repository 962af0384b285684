"""The values a run's rows hold, cleaned and filtered: metrics and quantiles made JSON-safe, the reasons a
sample was not trained on, and the distinct values of a column (the rows are in runs.models.records)."""

from __future__ import annotations

import math
from typing import Any

from django.db import connection, models

from dapo.loop.distributions import LEVELS, NAMES


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float | None]:
    """Names trimmed to the column size; non-finite or non-numeric values stored as null (JSON has no NaN)."""
    out: dict[str, float | None] = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        out[str(name)[:128]] = number if math.isfinite(number) else None
    return out


def distinct_ascending(model: type[models.Model], column: str, **equal: Any) -> list[Any]:
    """The distinct values of ``column`` among the rows matching ``equal`` (column = value), ascending, by a
    loose index scan: one index probe per distinct value (an index must lead with the ``equal`` columns then
    ``column``), never a read of every matching row as a DISTINCT would. Column names come from code."""
    table = model._meta.db_table
    where = " AND ".join(f"{name} = %s" for name in equal)
    sql = (
        f"WITH RECURSIVE d(v) AS (SELECT MIN({column}) FROM {table} WHERE {where} UNION ALL "
        f"SELECT (SELECT MIN({column}) FROM {table} WHERE {where} AND {column} > d.v) FROM d "
        "WHERE d.v IS NOT NULL) SELECT v FROM d WHERE v IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*equal.values(), *equal.values()])
        return [value for (value,) in cursor.fetchall()]


DISCARD_REASONS = ("all_correct", "all_wrong", "no_variance", "surplus", "overlong")
"""Sample.discard_reason's values besides "" (trained): a group's (dapo.algo.sampling.DISCARD_REASONS), then a
sample's own (overlong filtering masked it)."""
REASON_FILTERS = ("", "trained", "discarded", *DISCARD_REASONS)
"""What a reason filter takes: any, trained (in the loss), discarded (any reason), or one reason."""


def filter_by_reason(qs: models.QuerySet[Any], reason: str) -> models.QuerySet[Any]:
    """The samples of ``qs`` with ``reason`` (one of REASON_FILTERS; "" keeps all): the inspector's and
    the API's reason filter."""
    if reason == "trained":
        return qs.filter(kept=True).exclude(discard_reason="overlong")
    if reason == "discarded":
        return qs.filter(models.Q(kept=False) | models.Q(discard_reason="overlong"))
    return qs.filter(discard_reason=reason) if reason else qs


def finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


DISTRIBUTION_LEVELS = LEVELS
"""Percent levels of a step's quantiles (dapo.loop.distributions, torch-free)."""


def clean_quantiles(distributions: dict[str, Any]) -> dict[str, list[float | None]]:
    """The known quantities, each a list of at most 101 numbers (non-finite ones as null)."""
    out: dict[str, list[float | None]] = {}
    for name in NAMES:
        values = distributions.get(name)
        if isinstance(values, list | tuple) and values:
            out[name] = list(clean_metrics({str(i): v for i, v in enumerate(values[:101])}).values())
    return out
