"""The run log (``runs.run_log``) on the run page, as a download, and through the API.

GET /runs/<id>/log/?offset=N | ?tail=B   JSON chunk (the page follows it while the run is live)
GET /runs/<id>/log.txt                   the whole log as a text download
GET /api/runs/<id>/log/?offset=N | ?tail=B   the same chunks, token or session auth
"""

from __future__ import annotations

from typing import Any

from core.openapi import extend_schema, query_int, query_params
from core.params import BadInteger, int_param
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.http import require_GET
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.access import run_for
from runs.run_log import log_path, read_chunk


def _chunk(run_id: int, offset: int | None, tail: int | None, status: str) -> dict[str, Any]:
    return {"run": run_id, "status": status, **read_chunk(run_id, offset=offset, tail=tail)}


@require_GET
def run_log(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id)
    try:
        offset = int_param(request.GET, "offset")
        tail = int_param(request.GET, "tail")
    except BadInteger as e:
        return JsonResponse({"detail": str(e)}, status=400)
    return JsonResponse(_chunk(run.pk, offset, tail, run.status))


@require_GET
def run_log_download(request: HttpRequest, run_id: int) -> HttpResponseBase:
    run = run_for(request, run_id)
    path = log_path(run.pk)
    if not path.is_file():
        return HttpResponse(
            "This run has no log yet: a worker writes it once it starts the run.\n",
            content_type="text/plain; charset=utf-8",
            status=404,
        )
    response = FileResponse(path.open("rb"), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.log"'
    return response


class LogChunkSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    status = serializers.CharField(help_text="The run's status: follow the log while queued or running.")
    text = serializers.CharField(help_text="Whole lines from byte `offset`; empty when nothing new.")
    offset = serializers.IntegerField(help_text="Where `text` starts in the file, in bytes.")
    next_offset = serializers.IntegerField(help_text="Ask again from here for what follows.")
    size = serializers.IntegerField(help_text="The log's size in bytes now.")
    exists = serializers.BooleanField(help_text="False until a worker has started the run.")


class RunLog(APIView):
    """The run's log (stdout and stderr of its controller and trainer), in chunks of whole lines:
    ``?offset=N`` from byte N, ``?tail=B`` the last B bytes (from a line start); neither: from the start."""

    serializer_class = LogChunkSerializer

    @extend_schema(
        parameters=query_params(
            offset=(int, "Read from this byte (a previous answer's next_offset)."),
            tail=(int, "Read the last this-many bytes, from the start of a line."),
        )
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id)
        offset = query_int(request, "offset", minimum=0)
        tail = query_int(request, "tail", minimum=0)
        if offset is not None and tail is not None:
            raise ValidationError({"tail": "give offset or tail, not both"})
        return Response(_chunk(run.pk, offset, tail, run.status))
