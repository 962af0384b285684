"""The JSON API for scripts (token or session auth), with the pages' permissions: a run not yours is 404.

GET  /api/runs/                      list (?status=&q=&filter=&sort=&columns=&archived=&page=;
                                     filter and sort: runs.run_filter)
POST /api/runs/                      {"name", "preset" | "config", "overrides"?, "base_model"?, "dataset"?}:
                                     the run, with "resources" (what it asks for; runs.planning); 400
                                     naming the settings when the cluster last seen can never hold it
GET  /api/runs/<id>/                 one run with its config, tags, notes and markers; a queued run's
                                     "queue": its position and why it waits (runs.scheduling)
PATCH /api/runs/<id>/                {"name"?, "tags"?, "notes"?, "archived"?, "shared_users"?,
                                     "shared_groups"?} (the owner; runs.manage)
DELETE /api/runs/<id>/               cancel if running, then remove its rows and files (the owner): 204
POST /api/runs/bulk/                 {"action": "cancel" | "archive" | "restore" | "delete", "ids": [...]}:
                                     your runs among them (runs.bulk); others refused by id
POST /api/runs/<id>/cancel/          cancel (queued: at once; running: at the next step boundary)
POST /api/runs/<id>/resume/          resume a failed or cancelled run from its last checkpoint
POST /api/runs/<id>/priority/        {"priority": -100..100} (staff): its place in the queue
POST /api/runs/<id>/preempt/         (staff) a running run checkpoints and goes back to the queue
GET  /api/cluster/                   pools, nodes, the runs holding room, the queue (runs.cluster_views)
GET  /api/runs/<id>/metrics/, distributions/, hardware/, samples/: what it recorded (runs.api_series)
POST /api/runs/<id>/export/          {"step"?: N, "name"?: "..."}: a checkpoint into the model catalog (202)
GET  /api/runs/<id>/export/          the run's exports and their state (queued, running, done, failed)
GET  /api/runs/<id>/log/             ?offset=|tail=: the run's log in chunks of whole lines (runs.log_views)
POST /api/evaluations/               {"name", "base_model" | "checkpoint", "datasets", "n"?}: an evaluation
                                     run, no training (runs.evaluations)
GET|PATCH /api/notifications/        your notification settings and last 20 deliveries (notifications.api)
GET|POST /api/views/                 your saved views of the runs list (runs.account_api)
DELETE /api/views/<id>/              one of your saved views
POST /api/sweeps/                    a run's body plus {"sweep": {...}, "dry_run"?}: a grid or random sweep
                                     queued as one run group (sweeps.views)

The catalog (models, dataset versions): catalog.api. The same reference as a page: /api/docs/
(runs.api_docs); as OpenAPI: /api/schema/. A Python client: dapo.client.
"""

from __future__ import annotations

from typing import Any

from catalog.models import BaseModel, Dataset
from catalog.versions import AmbiguousName, find_dataset
from core.openapi import extend_schema
from core.params import int_or_none
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import access, manage
from runs.access import run_for
from runs.configuring import build_config, shown, validate_name
from runs.events import publish, status_event
from runs.external import refusal
from runs.listing import ListError, listed_runs
from runs.model_exports import request_export, steps_on_disk
from runs.models import ModelExport, QuotaExceeded, Run
from runs.planning import readable_model_config, resources_data
from runs.run_filter import column_values
from runs.scheduling import queue_entry
from runs.series import list_row
from runs.starts import resume_step


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
            "running_s": run.running_s(),
            "wall_s": run.elapsed_s(),
            "eta_s": run.eta_s(),
        }
        request = self.context.get("request")
        if request is not None:  # where it waits, and why (runs.scheduling); None unless queued
            out["queue"] = queue_entry(run, request.user)
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
    """The body of POST /api/runs/ (validated by dapo.runconfig; errors come back as {field: message})."""

    name = serializers.CharField(max_length=200)
    preset = serializers.CharField(
        required=False, help_text="A preset name (dapo.runconfig.presets.PRESETS)."
    )
    config = serializers.DictField(required=False, help_text="A full RunConfig.to_dict(); wins over preset.")
    overrides = serializers.DictField(required=False, help_text='Dotted fields: {"optim.lr": 1e-5}.')
    base_model = serializers.CharField(required=False, help_text="Catalog base model, by name or id.")
    dataset = serializers.CharField(
        required=False, help_text="Catalog dataset: a version's id, or a name (its newest version)."
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
        picks, errors = catalog_picks(body, request.user)
        config, config_errors = build_config(
            preset=body.get("preset"), config=body.get("config"), overrides=body.get("overrides"), **picks
        )
        errors = {**validate_name(body.get("name")), **errors, **config_errors}
        if errors or config is None:
            return Response({"detail": "invalid run", "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
        preset = body.get("preset") if body.get("config") is None else ""
        try:
            run = Run.create_queued(
                owner=request.user, name=body["name"], config=config, preset=preset or "", **picks
            )
        except QuotaExceeded as e:
            return Response(e.body(), status=status.HTTP_409_CONFLICT)
        # what it asks for, and how that stands against the cluster last seen (runs.planning)
        body = {**RunSerializer(run).data, "resources": resources_data(config, readable_model_config(config))}
        return Response(body, status=status.HTTP_201_CREATED)


def catalog_picks(body: dict[str, Any], user: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The catalog entries a body names: a base model by name or id, a dataset version by id or by name
    (catalog.versions.find_dataset: the user's own of that name first, never another user's by surprise)."""
    picks: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for key, model in (("base_model", BaseModel), ("dataset", Dataset)):
        raw = body.get(key)
        if raw is None:
            continue
        entry: BaseModel | Dataset | None = None
        try:
            if key == "dataset" and (isinstance(raw, str) and not validate_name(raw) or _an_id(raw)):
                entry = find_dataset(raw, user)
            elif isinstance(raw, str) and not validate_name(raw):  # no NUL or surrogate reaches the database
                entry = model.objects.filter(name=raw).first()
            elif _an_id(raw):
                entry = model.objects.filter(pk=raw).first()
        except AmbiguousName as e:
            errors[key] = str(e)
            continue
        if entry is None:
            errors[key] = f"no {key.replace('_', ' ')} {shown(raw)} in the catalog"
        picks[key] = entry
    return picks, errors


def _an_id(raw: Any) -> bool:
    return int_or_none(raw) is not None and not isinstance(raw, str)


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
        changes, errors = manage.validate_changes(run, request.data, request.user)
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
        if why := refusal(run, "cancel"):
            return Response({"detail": why}, status=status.HTTP_409_CONFLICT)
        outcome = run.request_cancel()
        publish(run.pk, status_event(run))
        return Response({"outcome": outcome, **RunSerializer(run).data})


class RunResume(APIView):
    serializer_class = RunSerializer

    def post(self, request: Request, run_id: int) -> Response:
        run = run_for(request, run_id, checkpoints=True)
        if why := refusal(run, "resume"):
            return Response({"detail": why}, status=status.HTTP_409_CONFLICT)
        step, problem = resume_step(run)
        try:
            resumed = step is not None and run.resume()
        except QuotaExceeded as e:
            return Response(e.body(), status=status.HTTP_409_CONFLICT)
        if not resumed:
            detail = problem or "only a failed or cancelled run with a checkpoint can be resumed"
            return Response({"detail": detail}, status=status.HTTP_409_CONFLICT)
        publish(run.pk, status_event(run))
        return Response(RunSerializer(run).data)


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
        run = run_for(request, run_id, checkpoints=True)
        if why := refusal(run, "export"):
            return Response({"detail": why}, status=status.HTTP_409_CONFLICT)
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
