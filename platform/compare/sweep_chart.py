"""The comparison's sweep chart (parallel coordinates): the settings that differ between the compared runs,
and each run's value of a metric."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Max, Min, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET
from runs.models import MetricPoint, Run

from compare.views import CompareError, guarded, resolve_runs
from dapo.runconfig import flatten


@require_GET
@guarded(html=False)
def sweep_data(request: HttpRequest) -> HttpResponse:
    """The runs' differing config values and one metric's last, highest and lowest value per run."""
    runs = resolve_runs(request)
    metric = request.GET.get("metric", "").strip()
    if not metric or len(metric) > 128 or "\x00" in metric:
        raise CompareError(400, "Name the metric to plot: ?metric=val/acc/mean@4 (128 characters at most).")
    return JsonResponse({"metric": metric, "fields": differing(runs), "runs": metric_values(runs, metric)})


def differing(runs: list[Run]) -> list[dict[str, Any]]:
    """[{"name": dotted config key, "values": [each run's value]}] for the keys whose values differ."""
    flats = [flatten(run.config) if isinstance(run.config, dict) else {} for run in runs]
    keys = sorted(set().union(*flats)) if flats else []
    out = []
    for key in keys:
        values = [f.get(key) for f in flats]
        if len({json.dumps(v, sort_keys=True) for v in values}) > 1:
            out.append(
                {
                    "name": key,
                    "values": [v if not isinstance(v, list | dict) else json.dumps(v) for v in values],
                }
            )
    return out


def metric_values(runs: list[Run], metric: str) -> list[dict[str, Any]]:
    """Per run: its last value of ``metric`` (and at which step), its highest and its lowest (non-finite
    values are stored as null and skipped), from the covering (run, name, step, value) index."""
    stats: dict[int, dict[str, Any]] = {
        row["run_id"]: dict(row)
        for row in MetricPoint.objects.filter(run__in=runs, name=metric)
        .values("run_id")
        .annotate(last_step=Max("step"), max=Max("value"), min=Min("value"))
    }
    last: dict[int, float | None] = {}
    if stats:
        ends = Q()
        for run_id, row in stats.items():
            ends |= Q(run_id=run_id, step=row["last_step"])
        last = dict(MetricPoint.objects.filter(ends, name=metric).values_list("run_id", "value"))
    out = []
    for run in runs:
        row = stats.get(run.pk, {})
        out.append(
            {
                "id": run.pk,
                "name": run.name,
                "url": reverse("runs:detail", args=[run.pk]),
                "status": run.status,
                "step": run.step,
                "total_steps": run.total_steps,
                "last": last.get(run.pk),
                "last_step": row.get("last_step"),
                "max": row.get("max"),
                "min": row.get("min"),
            }
        )
    return out
