"""The API of what a run recorded: its metrics, per-step distributions, hardware samples and samples.

GET  /api/runs/<id>/metrics/         ?names=a,b&min_step=&max_step=&max_points=
GET  /api/runs/<id>/distributions/   ?min_step=&max_points=: per-step quantiles (reward, length, advantage,
                                     entropy, ratio) at 0, 5, ..., 100 percent
GET  /api/runs/<id>/hardware/        ?max_per_worker=: CPU, memory and GPU samples of the run's processes
GET  /api/runs/<id>/samples/         ?step=&split=&acc=&kept=&truncated=&reason=&q=&page=&page_size=
"""

from __future__ import annotations

from core.openapi import extend_schema, query_bool, query_int, query_params
from django.db.models import Q, QuerySet
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.access import run_for
from runs.models import Sample
from runs.series import HARDWARE_MAX_SAMPLES, distribution_series, hardware_series, metric_series
from runs.step_values import DISTRIBUTION_LEVELS, REASON_FILTERS, filter_by_reason


class MetricsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    metrics = serializers.DictField(help_text='{name: {"steps": [...], "values": [...]}}')


class SampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = Sample
        exclude = ["run"]


class SamplePagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


@extend_schema(
    parameters=query_params(
        status=(str, "queued, running, succeeded, failed or cancelled."),
        q=(str, "Text in the run's name."),
        filter=(str, "Terms joined by 'and': optim.lr < 1e-4 and val/acc/mean@4 > 0.8 and tags has x."),
        sort=(str, "A field, '-' first for descending: -val/acc/mean@4, optim.lr, name (default -created)."),
        columns=(str, "Fields whose values each row carries in 'columns', comma-separated."),
        archived=(str, "active (default), archived or all."),
    )
)
class RunMetrics(APIView):
    serializer_class = MetricsSerializer

    @extend_schema(
        parameters=query_params(
            names=(str, "Metric names, comma-separated (default: every metric)."),
            min_step=(int, "First step (inclusive)."),
            max_step=(int, "Last step (inclusive)."),
            max_points=(int, "Thin each metric to exactly this many points, evenly spaced, ends kept."),
        )
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id)
        raw = request.query_params.get("names", "").replace("\x00", "")
        names = [n for n in raw.split(",") if n.strip()] or None
        max_points = query_int(request, "max_points", minimum=1)
        series = metric_series(
            run,
            names=[n.strip() for n in names] if names else None,
            min_step=query_int(request, "min_step"),
            max_step=query_int(request, "max_step"),
            max_points=max_points,
        )
        return Response({"run": run.pk, "metrics": series})


class DistributionsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    levels = serializers.ListField(child=serializers.IntegerField(), help_text="Percent levels.")
    distributions = serializers.DictField(help_text='{name: {"steps": [...], "quantiles": [[...], ...]}}')


class RunDistributions(APIView):
    serializer_class = DistributionsSerializer

    @extend_schema(
        parameters=query_params(
            min_step=(int, "First step (inclusive)."),
            max_points=(int, "At most this many steps per quantity, evenly spaced, the last kept."),
        )
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id)
        series = distribution_series(
            run,
            min_step=query_int(request, "min_step"),
            max_points=query_int(request, "max_points", minimum=2),
        )
        return Response({"run": run.pk, "levels": list(DISTRIBUTION_LEVELS), "distributions": series})


class HardwareSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    samples = serializers.ListField(
        child=serializers.DictField(), help_text='[{"time": unix s, "worker": "learner 0", "values": {...}}]'
    )


class RunHardware(APIView):
    serializer_class = HardwareSerializer

    @extend_schema(
        parameters=query_params(max_per_worker=(int, "Thin each worker's samples to about this many."))
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id)
        limit = query_int(request, "max_per_worker", minimum=1) or HARDWARE_MAX_SAMPLES
        return Response({"run": run.pk, "samples": hardware_series(run, limit)})


@extend_schema(
    parameters=query_params(
        step=(int, "Only this step."),
        index=(int, "Only this sample index."),
        split=(str, "train or val."),
        acc=(bool, "Correct (true) or wrong (false)."),
        kept=(bool, "Kept by dynamic sampling or filtered."),
        truncated=(bool, "Hit the length limit."),
        q=(str, "Text in the prompt, response or prediction."),
        reason=(
            str,
            "Why the step did not train on it: trained, discarded, all_correct, all_wrong, "
            "no_variance, surplus or overlong.",
        ),
    )
)
class RunSamples(generics.ListAPIView):
    serializer_class = SampleSerializer
    pagination_class = SamplePagination

    def get_queryset(self) -> QuerySet[Sample]:
        run = run_for(self.request, self.kwargs["run_id"])
        samples = Sample.objects.filter(run=run)
        if (step := query_int(self.request, "step")) is not None:
            samples = samples.filter(step=step)
        if (index := query_int(self.request, "index")) is not None:
            samples = samples.filter(sample_index=index)
        if split := self.request.query_params.get("split"):
            if split not in ("train", "val"):
                raise ValidationError({"split": "must be train or val"})
            samples = samples.filter(split=split)
        for flag in ("acc", "kept", "truncated"):
            if (value := query_bool(self.request, flag)) is not None:
                samples = samples.filter(**{flag: value})
        if reason := self.request.query_params.get("reason"):
            if reason not in REASON_FILTERS:
                raise ValidationError({"reason": f"must be one of {', '.join(REASON_FILTERS[1:])}"})
            samples = filter_by_reason(samples, reason)
        if q := self.request.query_params.get("q", "").replace("\x00", "").strip():
            samples = samples.filter(Q(response__icontains=q) | Q(prompt__icontains=q) | Q(pred__icontains=q))
        return samples.order_by("-step", "split", "sample_index")
