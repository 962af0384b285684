"""The JSON API for scripts (token or session auth), with the pages' permissions: a run not yours is 404.

GET  /api/runs/                      list (?status=&q=&filter=&sort=&columns=&archived=&page=;
                                     filter and sort: runs.run_filter)
POST /api/runs/                      {"name", "preset" | "config", "overrides"?, "base_model"?, "dataset"?}
GET  /api/runs/<id>/                 one run with its config, tags, notes and markers
PATCH /api/runs/<id>/                {"name"?, "tags"?, "notes"?, "archived"?, "shared_users"?,
                                     "shared_groups"?} (the owner; runs.manage)
DELETE /api/runs/<id>/               cancel if running, then remove its rows and files (the owner): 204
POST /api/runs/<id>/cancel/          cancel (queued: at once; running: at the next step boundary)
POST /api/runs/<id>/resume/          resume a failed or cancelled run from its last checkpoint
GET  /api/runs/<id>/metrics/         ?names=a,b&min_step=&max_step=&max_points=
GET  /api/runs/<id>/distributions/   ?min_step=&max_points=: per-step quantiles (reward, length, advantage,
                                     entropy, ratio) at 0, 5, ..., 100 percent
GET  /api/runs/<id>/hardware/        ?max_per_worker=: CPU, memory and GPU samples of the run's processes
GET  /api/runs/<id>/samples/         ?step=&split=&acc=&kept=&truncated=&reason=&q=&page=&page_size=
POST /api/runs/<id>/export/          {"step"?: N, "name"?: "..."}: a checkpoint into the model catalog (202)
GET  /api/runs/<id>/export/          the run's exports and their state (queued, running, done, failed)
GET  /api/runs/<id>/log/             ?offset=|tail=: the run's log in chunks of whole lines (runs.log_views)
POST /api/evaluations/               {"name", "base_model" | "checkpoint", "datasets", "n"?}: an evaluation
                                     run, no training (runs.evaluations)
POST /api/sweeps/                    a run's body plus {"sweep": {...}, "dry_run"?}: a grid or random sweep
                                     queued as one run group (compare.sweep_views)

The catalog (models, dataset versions): catalog.api. The same reference as a page: /api/docs/
(runs.api_docs); as OpenAPI: /api/schema/. A Python client: dapo.client.
"""

from __future__ import annotations

from typing import Any

from catalog.models import BaseModel, Dataset
from config.params import DB_ID_MAX, BadInteger, int_or_none, int_param
from django.db.models import Q, QuerySet
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import access, manage
from runs.access import run_for
from runs.configuring import build_config, shown, validate_name
from runs.events import publish, status_event
from runs.listing import ListError, listed_runs
from runs.model_exports import ModelExport, request_export, steps_on_disk
from runs.models import Run, Sample
from runs.records import DISTRIBUTION_LEVELS, REASON_FILTERS, filter_by_reason
from runs.run_filter import column_values
from runs.series import HARDWARE_MAX_SAMPLES, distribution_series, hardware_series, list_row, metric_series
from runs.starts import resume_step

try:
    from drf_spectacular.utils import OpenApiParameter, extend_schema
except ImportError:  # the OpenAPI schema is optional: without drf-spectacular the API works the same
    OpenApiParameter = None  # type: ignore[misc,assignment]

    def extend_schema(**_: Any) -> Any:  # type: ignore[misc]
        return lambda view: view


def query_params(**described: tuple[type, str]) -> list[Any]:
    """Query parameters for the schema and /api/docs/: name=(type, description)."""
    if OpenApiParameter is None:
        return []
    return [
        OpenApiParameter(name, kind, OpenApiParameter.QUERY, description=text)
        for name, (kind, text) in described.items()
    ]


class RunSerializer(serializers.ModelSerializer):
    class Meta:
        model = Run
        fields = ["id"]

    def to_representation(self, run: Run) -> dict[str, Any]:
        out = {
            **list_row(run),
            "latest_metrics": run.latest_metrics,
            "config": run.config,
            "parent": run.parent_id,
            "fork_step": run.fork_step,
            "notes": run.notes,
            "data_files": run.data_files,
        }
        request = self.context.get("request")
        if request is not None and access.can_write(request.user, run):
            out |= manage.sharing(run)
        return out


class RunListSerializer(RunSerializer):
    """A row of the list: the run's state and key metrics, and the values of the ``columns`` asked for."""

    def to_representation(self, run: Run) -> dict[str, Any]:
        columns = self.context.get("columns") or []
        return {**list_row(run), "columns": column_values(run, columns)} if columns else list_row(run)


class RunPatchSerializer(serializers.Serializer):
    """The body of PATCH /api/runs/<id>/: any of these fields; nothing changes while one is invalid."""

    name = serializers.CharField(required=False, max_length=200)
    tags = serializers.ListField(child=serializers.CharField(max_length=40), required=False, max_length=20)
    notes = serializers.CharField(required=False, max_length=20000, help_text="Markdown (no raw HTML).")
    archived = serializers.BooleanField(required=False, help_text="Hidden from the default list.")
    shared_users = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Usernames who may read the run (replaces the list).",
    )
    shared_groups = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Django groups whose members may read the run.",
    )


class RunCreateSerializer(serializers.Serializer):
    """The body of POST /api/runs/ (validated by dapo.config; errors come back as {field: message})."""

    name = serializers.CharField(max_length=200)
    preset = serializers.CharField(required=False, help_text="A preset name (dapo.presets.PRESETS).")
    config = serializers.DictField(required=False, help_text="A full RunConfig.to_dict(); wins over preset.")
    overrides = serializers.DictField(required=False, help_text='Dotted fields: {"optim.lr": 1e-5}.')
    base_model = serializers.CharField(required=False, help_text="Catalog base model, by name or id.")
    dataset = serializers.CharField(
        required=False, help_text="Catalog dataset: a version's id, or a name (its newest version)."
    )


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


def query_int(request: Request, name: str, minimum: int = -DB_ID_MAX) -> int | None:
    """An integer query parameter (``config.params`` rules) as a DRF field error when malformed."""
    try:
        return int_param(request.query_params, name, low=minimum)
    except BadInteger as e:
        raise ValidationError({name: e.reason}) from None


def query_bool(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ValidationError({name: f"must be true or false, got {raw!r}"})


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
class RunListCreate(generics.ListAPIView):
    serializer_class = RunListSerializer

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "columns": getattr(self, "columns", [])}

    def get_queryset(self) -> Any:
        params = self.request.query_params
        try:
            runs, self.columns = listed_runs(self.request.user, params)
        except ListError as e:
            raise ValidationError({e.field: str(e)}) from None
        return runs  # a list when a filter was evaluated: DRF pages both

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer})
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        picks, errors = _catalog_picks(body)
        config, config_errors = build_config(
            preset=body.get("preset"), config=body.get("config"), overrides=body.get("overrides"), **picks
        )
        errors = {**validate_name(body.get("name")), **errors, **config_errors}
        if errors or config is None:
            return Response({"detail": "invalid run", "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
        preset = body.get("preset") if body.get("config") is None else ""
        run = Run.create_queued(
            owner=request.user, name=body["name"], config=config, preset=preset or "", **picks
        )
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)


def _catalog_picks(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    picks: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for key, model in (("base_model", BaseModel), ("dataset", Dataset)):
        raw = body.get(key)
        if raw is None:
            continue
        entry = None
        if isinstance(raw, str) and not validate_name(raw):  # no NUL or surrogate reaches the database
            entry = model.objects.filter(name=raw).first()
        elif int_or_none(raw) is not None and not isinstance(raw, str):
            entry = model.objects.filter(pk=raw).first()
        if entry is None:
            errors[key] = f"no {key.replace('_', ' ')} {shown(raw)} in the catalog"
        picks[key] = entry
    return picks, errors


class RunDetail(APIView):
    serializer_class = RunSerializer

    def get(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id)
        return Response(RunSerializer(run, context={"request": request}).data)

    @extend_schema(request=RunPatchSerializer, responses={200: RunSerializer})
    def patch(self, request: Request, run_id: int) -> Response:
        """Rename, tag, annotate (markdown notes), archive or share a run you own. Every field is checked
        first (types, lengths, known users and groups): a 400 names each bad one and nothing changes."""
        run = run_for(request, run_id, write=True)
        changes, errors = manage.validate_changes(run, request.data)
        if errors:
            return Response(
                {"detail": "invalid change", "errors": errors}, status=status.HTTP_400_BAD_REQUEST
            )
        manage.apply_changes(run, changes)
        return Response(RunSerializer(run, context={"request": request}).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, run_id: int) -> Response:
        """Delete a run you own with its metrics, samples, checkpoints, export records and files; a queued
        or running run is cancelled first. Afterwards the run is a 404."""
        run = run_for(request, run_id, write=True)
        manage.delete_run(run)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunCancel(APIView):
    serializer_class = RunSerializer

    def post(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id, write=True)
        outcome = run.request_cancel()
        publish(run.pk, status_event(run))
        return Response({"outcome": outcome, **RunSerializer(run).data})


class RunResume(APIView):
    serializer_class = RunSerializer

    def post(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id, write=True)
        step, problem = resume_step(run)
        if step is None or not run.resume():
            detail = problem or "only a failed or cancelled run with a checkpoint can be resumed"
            return Response({"detail": detail}, status=status.HTTP_409_CONFLICT)
        publish(run.pk, status_event(run))
        return Response(RunSerializer(run).data)


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


class ExportRequestSerializer(serializers.Serializer):
    """The body of POST /api/runs/<id>/export/; both fields optional."""

    step = serializers.IntegerField(required=False, help_text="A checkpoint's step (default: the newest).")
    name = serializers.CharField(required=False, help_text='Catalog name (default: "<run name> step <N>").')


class ExportSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelExport
        fields = ["id"]

    def to_representation(self, export: ModelExport) -> dict[str, Any]:
        return export.state()


class RunExport(APIView):
    """Export a checkpoint of a run you own as a HuggingFace folder registered in the model catalog."""

    serializer_class = ExportSerializer

    def get(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id)
        exports = [e.state() for e in run.model_exports.all()[:100]]
        return Response({"run": run.pk, "steps_on_disk": steps_on_disk(run), "exports": exports})

    @extend_schema(request=ExportRequestSerializer, responses={202: ExportSerializer})
    def post(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id, write=True)
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            return Response({"detail": "the body must be a JSON object"}, status=status.HTTP_400_BAD_REQUEST)
        unknown = sorted(str(k)[:100] for k in body if k not in ("step", "name"))
        if unknown:
            errors = {k: "unknown field; valid fields: step, name" for k in unknown}
            return Response(
                {"detail": "invalid export", "errors": errors}, status=status.HTTP_400_BAD_REQUEST
            )
        name = body.get("name")
        if name is not None and not isinstance(name, str):
            errors = {"name": f"must be a string, got {shown(name)}"}
            return Response(
                {"detail": "invalid export", "errors": errors}, status=status.HTTP_400_BAD_REQUEST
            )
        export, errors = request_export(run, request.user, step=body.get("step"), name=name)
        if export is None:
            return Response(
                {"detail": "invalid export", "errors": errors}, status=status.HTTP_400_BAD_REQUEST
            )
        return Response(export.state(), status=status.HTTP_202_ACCEPTED)
