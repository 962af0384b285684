"""Pages: the runs list, the new-run form (also clone-and-edit and fork), the live page of a run, and the
POST actions cancel and resume. Behaviour lives on the models; views pick, check and render."""

from __future__ import annotations

from typing import Any

from catalog.models import BaseModel, Dataset
from config.params import int_or_none
from django.contrib import messages
from django.contrib.auth.models import Group
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dapo.config import flatten
from runs import access, forms, sweeps
from runs.access import run_for
from runs.configuring import build_config, validate_name
from runs.events import publish, status_event
from runs.listing import ListError, listed_runs
from runs.manage import render_notes, sharing
from runs.manage_views import saved_comparisons, saved_views
from runs.model_exports import request_export, steps_on_disk
from runs.models import Checkpoint, Run, Status
from runs.records import DISTRIBUTION_LEVELS
from runs.run_filter import column_values
from runs.series import (
    DISTRIBUTION_MAX_STEPS,
    PAGE_MAX_POINTS,
    distribution_series,
    hardware_series,
    list_row,
    metric_series,
    newest_samples,
)
from runs.starts import fork_choices, fork_problem, resume_step

STATUS_NOTE = "status-note"
"""The class of a message about a run's status ("Cancelling..."): the run page removes it once the status
it speaks of has changed, so it never stays beside a status that says otherwise."""


LIST_ROWS = 100


@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    """The runs list: status, name, archive state, a filter expression, a sort and extra columns (the same
    parameters as GET /api/runs/); a parameter it cannot read is shown beside its box, with no rows."""
    params = {k: request.GET.get(k, "").replace("\x00", "") for k in LIST_PARAMS}
    error: dict[str, str] = {}
    try:
        runs, columns = listed_runs(request.user, params)
        rows = [{**list_row(run), "columns": column_values(run, columns)} for run in runs[:LIST_ROWS]]
    except ListError as e:
        error, rows, columns = {"field": e.field, "message": str(e)}, [], []
    context = {
        "rows": rows,
        "statuses": Status.values,
        "error": error,
        "views": saved_views(request.user),
        "comparisons": saved_comparisons(request.user),
        "list_data": {"rows": rows, "columns": columns, "error": error},
        **params,
    }
    return render(request, "runs/list.html", context, status=400 if error else 200)


LIST_PARAMS = ("status", "q", "filter", "sort", "columns", "archived", "view")


@require_http_methods(["GET", "POST"])
def run_new(request: HttpRequest) -> HttpResponse:
    fork = request.GET.get("fork")
    parent = run_for(request, fork) if fork else None  # ?fork=<id>: 404 unless a run of yours
    if request.method == "POST":
        return _create_from_post(request, parent)
    raw_source = request.GET.get("from")
    source = run_for(request, raw_source) if raw_source else parent
    values, preset, name = _initial(request, source)
    picks = _catalog_picks(request) if source is None else {}
    for entry in picks.values():
        values.update(entry.config_overrides())  # the model's folder, the dataset version's files
    if picks and not name:
        name = " on ".join(str(entry) for entry in picks.values())
    return render_new(request, values, {}, preset=preset, name=name, parent=parent, picks=picks)


def _catalog_picks(request: HttpRequest) -> dict[str, Any]:
    """?model=<id>&dataset=<id> (the model and dataset pages' "Start a run"): the catalog entries to
    preselect; an id that names nothing is ignored."""
    picks: dict[str, Any] = {}
    if model := BaseModel.objects.filter(pk=int_or_none(request.GET.get("model")) or 0).first():
        picks["base_model"] = model
    if dataset := Dataset.objects.filter(pk=int_or_none(request.GET.get("dataset")) or 0).first():
        picks["dataset"] = dataset
    return picks


def _initial(request: HttpRequest, source: Run | None) -> tuple[dict[str, Any], str, str]:
    if source is not None:
        return flatten(source.config), source.preset, f"{source.name} (copy)"
    preset = request.GET.get("preset", "tiny_cpu")
    data = forms.presets_data().get(preset) or forms.presets_data()["tiny_cpu"]
    return dict(data["values"]), preset if preset in forms.presets_data() else "tiny_cpu", ""


def _create_from_post(request: HttpRequest, parent: Run | None) -> HttpResponse:
    values, errors = forms.parse_post(request.POST)
    name, preset = request.POST.get("name", ""), request.POST.get("preset", "")
    base_model = BaseModel.objects.filter(pk=int_or_none(request.POST.get("base_model")) or 0).first()
    dataset = Dataset.objects.filter(pk=int_or_none(request.POST.get("dataset")) or 0).first()
    checkpoint = _checkpoint(parent, request.POST.get("checkpoint")) if parent else None
    config, config_errors = (None, {}) if errors else build_config(config=forms.unflatten(values))
    errors = {**validate_name(name), **errors, **config_errors}
    if parent is not None and checkpoint is None:
        errors["checkpoint"] = "pick a checkpoint of the parent run to start from"
    elif checkpoint is not None and (problem := fork_problem(checkpoint)):
        errors["checkpoint"] = problem
    if errors or config is None:
        messages.error(request, "The run was not queued: fix the fields marked below.")
        return render_new(request, values, errors, preset=preset, name=name, parent=parent, status=400)
    fields = {"preset": preset if preset in forms.presets_data() else "", "base_model": base_model}
    if parent is not None and checkpoint is not None:
        run = parent.fork(owner=request.user, name=name, config=config, checkpoint=checkpoint)
    else:
        run = Run.create_queued(owner=request.user, name=name, config=config, dataset=dataset, **fields)
    return redirect("runs:detail", run_id=run.pk)


def _picked(picks: dict[str, Any] | None, key: str, posted: str | None) -> int | None:
    """The id of the catalog entry the form's menu shows selected: from the link, or as posted."""
    if picks and key in picks:
        return picks[key].pk
    return int_or_none(posted)


def _checkpoint(parent: Run, raw: str | None) -> Checkpoint | None:
    return parent.checkpoints.filter(pk=int_or_none(raw) or 0).first()  # 0: no such row


def render_new(
    request: HttpRequest,
    values: dict[str, Any],
    errors: dict[str, str],
    *,
    preset: str,
    name: str,
    parent: Run | None,
    status: int = 200,
    ladder_runs: list[str] | None = None,
    picks: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
) -> HttpResponse:
    checkpoints, pruned = fork_choices(parent) if parent else ([], [])
    raw_source = request.GET.get("from")
    source = None if parent or not raw_source else run_for(request, raw_source)
    context = {
        "source": source,
        "sections": forms.sections(values, errors),
        "errors": errors,
        "general_errors": {k: v for k, v in errors.items() if k not in values},
        "presets": forms.presets_data(),
        "preset": preset,
        "name": name,
        "parent": parent,
        "checkpoints": checkpoints,
        "pruned_steps": pruned,
        "ladder_runs": ladder_runs or [],
        "sweep": sweep or sweeps.form_state(),  # the sweep panel (compare.sweep_views): as posted, or empty
        "sweep_fields": sweeps.field_menu(),
        "sweep_limits": {"max_runs": sweeps.MAX_RUNS, "max_fields": sweeps.MAX_FIELDS},
        "base_models": BaseModel.objects.all(),
        "datasets": Dataset.objects.all(),
        "picked_model": _picked(picks, "base_model", request.POST.get("base_model")),
        "picked_dataset": _picked(picks, "dataset", request.POST.get("dataset")),
    }
    return render(request, "runs/new.html", context, status=status)


@require_GET
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id)
    data = {
        "run": run.state(),
        "metrics": metric_series(run, max_points=PAGE_MAX_POINTS),
        "distributions": distribution_series(run, max_points=DISTRIBUTION_MAX_STEPS),
        "levels": list(DISTRIBUTION_LEVELS),
        "hardware": hardware_series(run),
        "samples": newest_samples(run),
    }
    context = {"run": run, "data": data, "config_json": run.config, "checkpoints": run.checkpoints.all()}
    context["hardware_interval"] = (run.config.get("logging") or {}).get("hardware_interval_s", 5.0)
    context |= {"export_steps": steps_on_disk(run), "exports": run.model_exports.all()[:20]}
    context["data_files"] = _data_files(run)
    owner = access.can_write(request.user, run)
    parent_visible = run.parent_id is not None and access.find_run(request.user, run.parent_id) is not None
    groups = Group.objects.order_by("name") if owner else []
    context |= {
        "can_write": owner,
        "notes_html": render_notes(run.notes),
        "parent_visible": parent_visible,
        "tags_text": ", ".join(run.tags or []),
        "all_groups": groups,
        **({"sharing": sharing(run)} if owner else {}),
    }
    return render(request, "runs/detail.html", context)


def _data_files(run: Run) -> list[dict[str, Any]]:
    """The run's record of what it read, each entry marked with whether its dataset version still exists."""
    entries = [e for e in run.data_files or [] if isinstance(e, dict)]
    ids = {e["dataset"]["id"] for e in entries if isinstance(e.get("dataset"), dict)}
    existing = set(Dataset.objects.filter(pk__in=ids).values_list("pk", flat=True))
    return [
        {**e, "dataset_exists": isinstance(e.get("dataset"), dict) and e["dataset"].get("id") in existing}
        for e in entries
    ]


@require_POST
def run_export(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's "Export model": queue an export of one of its checkpoints into the model catalog."""
    run = run_for(request, run_id, write=True)
    step, name = request.POST.get("step", "").strip(), request.POST.get("name", "")
    export, errors = request_export(run, request.user, step=step or None, name=name or None)
    if export is None:
        messages.error(request, "Not exported: " + "; ".join(f"{k}: {v}" for k, v in errors.items()))
    else:
        messages.info(
            request, f"Exporting step {export.step} as {export.name!r}: it joins the model catalog when done."
        )
    return redirect("runs:detail", run_id=run.pk)


@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id, write=True)
    outcome = run.request_cancel()
    publish(run.pk, status_event(run))
    messages.info(
        request,
        {"cancelling": "Cancelling: the run stops at its next step boundary."}.get(
            outcome, f"Run is {outcome}."
        ),
        extra_tags=STATUS_NOTE,
    )
    return redirect("runs:detail", run_id=run.pk)


@require_POST
def run_resume(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id, write=True)
    step, problem = resume_step(run)
    if step is not None and run.resume():
        publish(run.pk, status_event(run))
        messages.info(request, f"Resumed from the checkpoint of step {step}.", extra_tags=STATUS_NOTE)
    else:
        messages.error(request, problem or "Only a failed or cancelled run with a checkpoint can be resumed.")
    return redirect("runs:detail", run_id=run.pk)
