"""Evaluation runs: a catalog model, or one of a run's checkpoints, scored on catalog datasets without
training (the worker runs ``dapo.eval.evaluate``). The run is a Run of kind "evaluation": it reports one step
0 (the validation metrics per dataset and overall, and the scored samples), so the runs list, the sample
inspector and the comparison show it like a training run, one point per metric.

Page: /runs/evaluate/ (GET the form, POST to launch). API: POST /api/evaluations/ with
``{"name", "base_model" | "checkpoint": {"run": id, "step"?: N}, "datasets": [id or name, ...],
"n"?: 4, "max_problems"?: 0, "preset"?: "tiny_cpu", "overrides"?: {...}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.models import BaseModel, Dataset
from catalog.versions import AmbiguousName, find_dataset
from core.openapi import extend_schema
from core.params import DB_ID_MAX, BadInteger, to_int
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dapo.runconfig import ConfigError, RunConfig
from dapo.runconfig.presets import PRESETS, get_preset
from runs import access
from runs.configuring import check_paths, nul_errors, shown, validate_name
from runs.model_exports import steps_on_disk
from runs.models import Checkpoint, Kind, QuotaExceeded, Run

Errors = dict[str, str]
MAX_N = 1024


def create_evaluation(user: Any, body: Mapping[str, Any]) -> tuple[Run | None, Errors]:
    """Validate a request (the API's body, or the form's fields in the same shape) and queue the
    evaluation run; the run, or None and {field: message}."""
    errors = validate_name(body.get("name"))
    source, source_errors = _source(user, body)
    datasets, data_errors = _datasets(body.get("datasets"), user)
    n, n_errors = _int(body.get("n", 4), "n", 1, MAX_N)
    limit, limit_errors = _int(body.get("max_problems", 0), "max_problems", 0, DB_ID_MAX)
    errors |= source_errors | data_errors | n_errors | limit_errors
    if errors or source is None:
        return None, errors
    config, config_errors = _config(body, source, datasets, n, limit)
    if config is None:
        return None, config_errors
    fields: dict[str, Any] = {"kind": Kind.EVALUATION, "preset": ""}
    if isinstance(source, BaseModel):
        fields["base_model"] = source
    else:
        fields |= {"parent": source.run, "fork_step": source.step, "source_checkpoint": source.path}
        fields["base_model"] = source.run.base_model
    # no training: it holds no steps of the owner's quota (runs.models.quotas), only a run
    run = Run.create_queued(owner=user, name=str(body["name"]), config=config, total_steps=0, **fields)
    return run, {}


def evaluation_overrides(paths: list[str], n: int, max_problems: int) -> dict[str, Any]:
    """The config fields an evaluation sets: the dataset files as the validation sets (each reported by
    its file stem when there are several), ``n`` samples per problem (dapo.eval.evaluate does the same)."""
    return {
        "data.train_path": paths[0],  # never read by an evaluation; the field must name a file
        "data.val_path": paths[0],
        "data.val_paths": paths[1:],
        "validation.n_samples": n,
        "validation.max_problems": max_problems,
    }


def _config(
    body: Mapping[str, Any], source: BaseModel | Checkpoint, datasets: list[Dataset], n: int, limit: int
) -> tuple[RunConfig | None, Errors]:
    try:
        if isinstance(source, Checkpoint):  # the run's own settings and base model; its weights later
            base = RunConfig.from_dict(source.run.config)
        else:
            preset = body.get("preset") or "tiny_cpu"
            if not isinstance(preset, str) or preset not in PRESETS:
                return None, {"preset": f"unknown preset {shown(preset)}; valid: {', '.join(PRESETS)}"}
            base = get_preset(preset).with_overrides({"model.path": source.path})
        overrides = body.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            return None, {"overrides": "must be an object of dotted field names to values"}
        paths = [d.val_path or d.path for d in datasets]
        config = base.with_overrides({**overrides, **evaluation_overrides(paths, n, limit)})
    except ConfigError as e:
        return None, e.errors
    errors = check_paths(config) | nul_errors(config.flat())
    return (None, errors) if errors else (config, {})


def _source(user: Any, body: Mapping[str, Any]) -> tuple[BaseModel | Checkpoint | None, Errors]:
    """The catalog model, or the checkpoint (on disk, of a run whose checkpoints the user may use), to
    evaluate. A run shared with them read-only raises ``PermissionDenied`` (403): its weights are its
    owner's; another user's private run reads as a missing one."""
    model, checkpoint = body.get("base_model"), body.get("checkpoint")
    if (model in (None, "")) == (checkpoint in (None, "")):
        return None, {"source": "give either base_model (a catalog model) or checkpoint (a run's)"}
    if checkpoint in (None, ""):
        entry = _catalog(BaseModel, model)
        return (
            (entry, {}) if entry else (None, {"base_model": f"no base model {shown(model)} in the catalog"})
        )
    if not isinstance(checkpoint, Mapping):
        return None, {"checkpoint": 'must be {"run": id, "step"?: N}'}
    run_id, _ = _int(checkpoint.get("run"), "run", 1, DB_ID_MAX)
    run = access.find_run(user, run_id) if run_id else None
    if run is None:
        return None, {"checkpoint": f"no run {shown(checkpoint.get('run'))} of yours"}
    access.checked_checkpoints(user, run)  # a reader: 403, the run is shared read-only
    steps = steps_on_disk(run)
    step, step_errors = _int(checkpoint.get("step", steps[-1] if steps else None), "step", 0, DB_ID_MAX)
    if step_errors or step not in steps:
        on_disk = ", ".join(map(str, steps)) or "none"
        return None, {
            "checkpoint": f"run {run.pk} has no checkpoint of step {shown(step)} on disk ({on_disk})"
        }
    return run.checkpoints.get(step=step), {}


def _datasets(raw: Any, user: Any) -> tuple[list[Dataset], Errors]:
    """Catalog versions by id or name (a name: catalog.versions.find_dataset, the user's own first)."""
    if not isinstance(raw, list) or not raw or len(raw) > 32:
        return [], {"datasets": "pick one to 32 catalog datasets"}
    try:
        found = [_catalog(Dataset, item, user) for item in raw]
    except AmbiguousName as e:
        return [], {"datasets": str(e)}
    missing = [shown(item) for item, d in zip(raw, found, strict=True) if d is None]
    if missing:
        return [], {"datasets": f"not in the catalog: {', '.join(missing)}"}
    files = [d.val_path or d.path for d in found if d is not None]
    if len(set(files)) < len(files):
        return [], {"datasets": "a dataset is picked twice"}
    return [d for d in found if d is not None], {}


def _catalog(model: type[BaseModel] | type[Dataset], raw: Any, user: Any = None) -> Any:
    """A catalog entry by id (or its digits, from a form) or by name; None when there is none."""
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        raw = int(raw.strip())
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= DB_ID_MAX:
        return model.objects.filter(pk=raw).first()
    if isinstance(raw, str) and not validate_name(raw):
        return find_dataset(raw, user) if model is Dataset else model.objects.filter(name=raw).first()
    return None


def _int(raw: Any, name: str, low: int, high: int) -> tuple[int, Errors]:
    """``core.params.to_int`` as (value, {}) or (0, {field: message}), the shape the form collects."""
    try:
        return to_int(raw, name, low=low, high=high), {}
    except BadInteger as e:
        return 0, {name: e.reason}


# ---- the page and the API ----------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def evaluation_new(request: HttpRequest) -> HttpResponse:
    """The form: a catalog model or a run's checkpoint, catalog datasets, samples per problem."""
    values: dict[str, Any] = {"n": "4", "max_problems": "0", "datasets": [], "preset": "tiny_cpu"}
    # ?base_model=<id>&datasets=<id> from a model's or a dataset's page: preselected, checked when posted
    values["base_model"] = request.GET.get("base_model", "")[:20]
    values["datasets"] = [d[:20] for d in request.GET.getlist("datasets")[:32]]
    errors: Errors = {}
    if request.method == "POST":
        post = request.POST
        values = {
            "name": post.get("name", ""),
            "base_model": post.get("base_model", ""),
            "datasets": post.getlist("datasets"),
            "n": post.get("n", ""),
            "max_problems": post.get("max_problems", "0"),
            "preset": post.get("preset", "tiny_cpu"),
        }
        run_step = post.get("checkpoint", "")  # "<run id>:<step>"
        if run_step:
            run_id, _, step = run_step.partition(":")
            values["checkpoint"] = {"run": run_id, "step": step}
        try:
            run, errors = create_evaluation(request.user, values)
        except QuotaExceeded as e:  # the form stays as posted
            messages.error(request, str(e))
            return render(request, "runs/evaluate.html", _context(request, values, {}), status=409)
        if run is not None:
            messages.success(request, f"Evaluation #{run.pk} queued.")
            return redirect("runs:evaluation", run_id=run.pk)
    return render(
        request, "runs/evaluate.html", _context(request, values, errors), status=400 if errors else 200
    )


def _context(request: HttpRequest, values: dict[str, Any], errors: Errors) -> dict[str, Any]:
    runs = (
        access.checkpoint_runs(request.user).filter(kind=Kind.TRAINING, checkpoints__isnull=False).distinct()
    )
    checkpoints = [
        {"value": f"{run.pk}:{step}", "label": f"#{run.pk} {run.name} · step {step}"}
        for run in runs[:50]
        for step in reversed(steps_on_disk(run))
    ]
    return {
        "values": values,
        "errors": errors,
        "models": BaseModel.objects.all(),
        "datasets": Dataset.objects.select_related("created_by"),
        "checkpoints": checkpoints,
        "presets": list(PRESETS),
    }


class EvaluationSerializer(serializers.Serializer):
    """The body of POST /api/evaluations/ (errors come back as {field: message})."""

    name = serializers.CharField(max_length=200)
    base_model = serializers.CharField(required=False, help_text="Catalog model to evaluate, by name or id.")
    checkpoint = serializers.DictField(
        required=False, help_text='A run\'s checkpoint: {"run": id, "step"?: N}.'
    )
    datasets = serializers.ListField(help_text="Catalog datasets (name or id): their validation files.")
    n = serializers.IntegerField(required=False, help_text="Samples per problem (default 4).")
    max_problems = serializers.IntegerField(required=False, help_text="First N problems of each (0: all).")
    preset = serializers.CharField(required=False, help_text="Sampling settings for a catalog model.")
    overrides = serializers.DictField(required=False, help_text='Dotted fields: {"validation.top_p": 0.7}.')


class EvaluationCreate(APIView):
    """POST /api/evaluations/: queue an evaluation run (the module docstring lists the body)."""

    serializer_class = EvaluationSerializer

    @extend_schema(request=EvaluationSerializer, responses={201: None})
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, Mapping) else {}
        try:
            run, errors = create_evaluation(request.user, body)
        except QuotaExceeded as e:
            return Response(e.body(), status=status.HTTP_409_CONFLICT)
        if run is None:
            return Response(
                {"detail": "invalid evaluation", "errors": errors}, status=status.HTTP_400_BAD_REQUEST
            )
        return Response({"id": run.pk, "kind": run.kind}, status=status.HTTP_201_CREATED)
