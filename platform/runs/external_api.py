"""The API of external runs (runs.external): runs trained by TRL or verl elsewhere, sent in step by step.

POST /api/runs/external/                 {"name", "source": "trl" | "verl", "config": {...}, "total_steps"?,
                                         "tags"?}: a running external run (201)
POST /api/runs/<id>/external/metrics/    {"points": [{"step", "metrics": {name: number | null},
                                         "wall_time"?}]}: names mapped onto ours (dapo.integrations.names)
POST /api/runs/<id>/external/samples/    {"samples": [{"step", "prompt", "completion",
                                         "rewards"?: {fn: number}, "reward"?, "acc"?, "split"?, "index"?...}]}
POST /api/runs/<id>/external/finish/     {"status": "succeeded" | "failed", "error"?}

Token or session auth; the owner only (another user's run is a 404, a reader's write a 403). A body with
any bad entry is a 400 naming each, and nothing of it is written; a native or finished run is a 409.
"""

from __future__ import annotations

from typing import Any

from core.openapi import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import external
from runs.access import run_for
from runs.api import RunSerializer

# a class statement cannot declare a field named "source" (a DRF Field's own attribute): built by type()
ExternalCreateSerializer = type(
    "ExternalCreateSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "The body of POST /api/runs/external/.",
        "name": serializers.CharField(max_length=200),
        "source": serializers.ChoiceField(choices=["trl", "verl"], help_text="The trainer that runs it."),
        "config": serializers.DictField(
            required=False, help_text="The trainer's own config, stored as it is."
        ),
        "total_steps": serializers.IntegerField(required=False, help_text="0 or absent: unknown."),
        "tags": serializers.ListField(child=serializers.CharField(max_length=40), required=False),
    },
)


class PointsSerializer(serializers.Serializer):
    points = serializers.ListField(
        child=serializers.DictField(),
        help_text='[{"step": 3, "metrics": {"loss": 0.1}, "wall_time"?: 1.7e9}]',
    )


class SamplesSerializer(serializers.Serializer):
    samples = serializers.ListField(
        child=serializers.DictField(),
        help_text='[{"step", "prompt", "completion", "rewards": {"fn": 1.0}, "reward"?, "acc"?, "split"?, '
        '"index"?, "ground_truth"?, "pred"?, "advantage"?, "group"?, "problem_index"?, "length"?, '
        '"truncated"?}]',
    )


class FinishSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["succeeded", "failed"])
    error = serializers.CharField(required=False)


class AppendedSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    steps = serializers.IntegerField(help_text="Steps written by this request.")
    step = serializers.IntegerField(help_text="The run's newest step.")


def _bad(errors: dict[str, str], what: str) -> Response:
    return Response({"detail": f"invalid {what}: nothing was written", "errors": errors}, status=400)


class ExternalCreate(APIView):
    serializer_class = RunSerializer

    @extend_schema(request=ExternalCreateSerializer, responses={201: RunSerializer})
    def post(self, request: Request) -> Response:
        fields, errors = external.clean_create(request.data)
        if errors:
            return _bad(errors, "external run")
        run = external.create(request.user, fields)
        return Response(RunSerializer(run, context={"request": request}).data, status=status.HTTP_201_CREATED)


class _Append(APIView):
    serializer_class = AppendedSerializer
    what = ""

    def clean(self, body: Any, run: Any) -> tuple[list[external.StepIn], dict[str, str]]:
        raise NotImplementedError

    def post(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id, write=True)
        try:
            external.writable(run)
            steps, errors = self.clean(request.data, run)
            if errors:
                return _bad(errors, self.what)
            written = external.record(run, steps)
        except external.ExternalError as e:
            return Response(e.body(), status=e.status)
        return Response({"run": run.pk, "steps": written, "step": run.step})


class ExternalMetrics(_Append):
    what = "metrics"

    @extend_schema(request=PointsSerializer, responses={200: AppendedSerializer})
    def post(self, request: Request, run_id: int) -> Response:
        """Metric points per step of an external run you own; a step sent again overwrites its values."""
        return super().post(request, run_id)

    def clean(self, body: Any, run: Any) -> tuple[list[external.StepIn], dict[str, str]]:
        return external.clean_points(body, run.source)


class ExternalSamples(_Append):
    what = "samples"

    @extend_schema(request=SamplesSerializer, responses={200: AppendedSerializer})
    def post(self, request: Request, run_id: int) -> Response:
        """Samples per step of an external run you own; one sent again (step, split, index) overwrites."""
        return super().post(request, run_id)

    def clean(self, body: Any, run: Any) -> tuple[list[external.StepIn], dict[str, str]]:
        return external.clean_samples(body)


class ExternalFinish(APIView):
    serializer_class = RunSerializer

    @extend_schema(request=FinishSerializer, responses={200: RunSerializer})
    def post(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id, write=True)
        fields, errors = external.clean_finish(request.data)
        if errors:
            return _bad(errors, "finish")
        try:
            external.finish(run, fields["status"], fields["error"])
        except external.ExternalError as e:
            return Response(e.body(), status=e.status)
        return Response(RunSerializer(run, context={"request": request}).data)
