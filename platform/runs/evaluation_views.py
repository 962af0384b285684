"""An evaluation run's own page (its results per dataset, runs.evaluation_results), evaluations side by
side, and the results as JSON. The run page redirects an evaluation run here; ``?view=run`` keeps it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import access
from runs.access import run_for
from runs.evaluation_results import evaluation_rows, results
from runs.models import Kind, Run, Status

MAX_COMPARED = 8
UNFINISHED = (Status.QUEUED, Status.RUNNING)


def source_of(run: Run) -> str:
    """What the evaluation scored: a catalog model, or a run's checkpoint of a step."""
    if run.parent_id is not None and run.fork_step is not None:
        return f"checkpoint of step {run.fork_step} of run #{run.parent_id}"
    if run.base_model is not None:
        return f"catalog model {run.base_model.name}"
    return f"model {(run.config.get('model') or {}).get('path') or 'unknown'}"


@require_GET
def evaluation_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id)
    samples = reverse("inspector:samples", args=[run.pk]) + "?split=val&step=0"
    group = reverse("inspector:samples-group", args=[run.pk, 0, 0]).rsplit("0/", 1)[0]
    found = results(run)
    others = (
        access.visible_runs(request.user)
        .filter(kind=Kind.EVALUATION, status=Status.SUCCEEDED)
        .exclude(pk=run.pk)
        .order_by("-pk")[:50]
    )
    context: dict[str, Any] = {
        "run": run,
        "source": source_of(run),
        "results": [r.as_dict() for r in found],
        "samples_url": samples,
        "group_url": group,
        "unfinished": run.status in UNFINISHED,
        "others": others,
        "can_write": access.can_write(request.user, run),
        "parent_visible": run.parent_id is not None
        and access.find_run(request.user, run.parent_id) is not None,
    }
    return render(request, "runs/evaluation.html", context)


@require_GET
def evaluation_compare(request: HttpRequest) -> HttpResponse:
    """?runs=<id>,<id>,...: the evaluations' numbers per dataset in columns, each with its difference to
    the first run (the model before training, say)."""
    raw = ",".join([request.GET.get("runs", ""), *request.GET.getlist("other")])  # the page's form adds one
    ids: list[int] = []
    error = ""
    for part in [p.strip() for p in raw.split(",") if p.strip()]:
        if not (part.isascii() and part.isdigit()) or len(part) > 12:
            error = f"runs: {part[:20]!r} is not a run id"
            break
        if int(part) not in ids:
            ids.append(int(part))
    if not error and not 2 <= len(ids) <= MAX_COMPARED:
        error = f"runs: give 2 to {MAX_COMPARED} run ids, comma-separated (?runs=3,5)"
    runs = [] if error else [run_for(request, i) for i in ids]
    context = {
        "runs": [{"run": r, "source": source_of(r)} for r in runs],
        "tables": evaluation_rows(runs) if runs else [],
        "error": error,
    }
    return render(request, "runs/evaluation_compare.html", context, status=400 if error else 200)


class EvaluationResultsSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()
    evaluated = serializers.CharField(help_text="A catalog model, or a run's checkpoint of a step.")
    datasets = serializers.ListField(
        child=serializers.DictField(),
        help_text='Per dataset, the overall result first: {"source", "dataset", "file", "metric_prefix", '
        '"n", '
        '"acc_mean", "acc_std", "score_mean", "score_std", "response_length_mean", "k": [{"k", "pass", '
        '"maj", "maj_std", "best", "best_std", "worst", "worst_std"}], "counts": {"problems", "samples", '
        '"correct"} | null, "groups": [first, last] | null}.',
    )


class EvaluationResults(APIView):
    """GET /api/runs/<id>/evaluation/: the results per dataset (the overall result first)."""

    serializer_class = EvaluationResultsSerializer

    def get(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id)
        return Response(
            {
                "id": run.pk,
                "kind": run.kind,
                "status": run.status,
                "evaluated": source_of(run),
                "datasets": [r.as_dict() for r in results(run)],
            }
        )
