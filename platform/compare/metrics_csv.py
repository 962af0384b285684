"""Metrics as a long CSV (run_id,run_name,step,wall_time,metric,value), streamed in keyset pages.

Written by the product's one CSV writer (runs.csv_export): a run or metric name that could start a
spreadsheet formula is quoted, values stay numbers.

GET  /runs/compare/metrics.csv?ids=...&metrics=   the compared runs' metrics (?ids= or ?group= as on compare)
GET  /runs/<id>/metrics.csv                       one run's metrics, same CSV
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_GET
from runs.access import run_for
from runs.csv_export import csv_text
from runs.models import MetricPoint, Run

from compare.views import chosen_metrics, guarded, resolve_runs

CSV_HEADER = ["run_id", "run_name", "step", "wall_time", "metric", "value"]
CSV_CHUNK = 5000


@require_GET
@guarded(html=True)
def compare_csv(request: HttpRequest) -> StreamingHttpResponse:
    runs = resolve_runs(request)
    label = "-".join(str(r.pk) for r in runs) if "ids" in request.GET else f"group-{runs[0].group}"
    return _csv_response(runs, chosen_metrics(request.GET.get("metrics", ""), [], runs), f"compare-{label}")


@require_GET
def run_metrics_csv(request: HttpRequest, run_id: int) -> StreamingHttpResponse:
    run = run_for(request, run_id)
    names = chosen_metrics(request.GET.get("metrics", ""), [], [run])
    return _csv_response([run], names, f"run-{run.pk}")


def _csv_response(runs: list[Run], names: list[str], stem: str) -> StreamingHttpResponse:
    """Streamed in chunks, each a short keyset query in (name, step) order, so a run of millions of points
    neither holds a cursor open nor sits in memory."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:120]
    response = StreamingHttpResponse(_csv_chunks(runs, names), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{safe}-metrics.csv"'
    return response


async def _csv_chunks(runs: list[Run], names: list[str]) -> AsyncIterator[str]:
    yield csv_text([CSV_HEADER])
    for run in runs:
        after: tuple[str, int] = ("", -(2**31))
        while rows := await sync_to_async(_csv_chunk)(run.pk, names, after):
            yield csv_text([run.pk, run.name, step, wall, name, value] for name, step, wall, value in rows)
            after = (rows[-1][0], rows[-1][1])


def _csv_chunk(run_id: int, names: list[str], after: tuple[str, int]) -> list[tuple]:
    table = MetricPoint._meta.db_table
    only = f" AND name IN ({', '.join(['%s'] * len(names))})" if names else ""
    sql = (
        f"SELECT name, step, wall_time, value FROM {table} WHERE run_id = %s AND (name, step) > (%s, %s)"
        f"{only} ORDER BY name, step LIMIT {CSV_CHUNK}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [run_id, *after, *names])
        return cursor.fetchall()
