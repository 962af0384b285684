"""Pages: the runs list, the new-run form (also clone-and-edit and fork), the live page of a run, and the
POST actions cancel and resume. Behaviour lives on the models; views pick, check and render."""

from __future__ import annotations

from typing import Any

from catalog.models import BaseModel, Dataset
from core.params import int_or_none
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dapo.runconfig import flatten
from dapo.runconfig.presets import DEMO_LADDER_SETTING
from runs import access, forms
from runs.access import run_for
from runs.configuring import build_config, posted_dataset, validate_name
from runs.events import publish, status_event
from runs.external import refusal
from runs.listing import ListError, listed_runs
from runs.manage import render_notes, share_choices, sharing
from runs.manage_views import run_action, saved_comparisons, saved_views
from runs.model_exports import request_export, steps_on_disk
from runs.models import Checkpoint, Kind, QuotaExceeded, Run, Status
from runs.run_filter import column_values
from runs.run_state import run_state
from runs.scheduling import queue_entry
from runs.scheduling_api import preempt_refusal
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
from runs.step_values import DISTRIBUTION_LEVELS

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
    # ?fork=<id>: a fork trains from the parent's weights, so it needs the owner's permission (runs.access)
    parent = run_for(request, fork, checkpoints=True) if fork else None
    raw_source = request.GET.get("from")
    source = run_for(request, raw_source) if raw_source else parent
    if source is not None and (why := refusal(source, "fork" if parent else "clone")):
        return HttpResponse(why[0].upper() + why[1:] + ".", status=409, content_type="text/plain")
    if request.method == "POST":
        return _create_from_post(request, parent)
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
    dataset = posted_dataset(request.POST) if parent is None else None  # a fork keeps its parent's
    checkpoint = _checkpoint(parent, request.POST.get("checkpoint")) if parent else None
    config, config_errors = (
        (None, {}) if errors else build_config(config=forms.unflatten(values), dataset=dataset)
    )
    errors = {**validate_name(name), **errors, **config_errors}
    if parent is not None and checkpoint is None:
        errors["checkpoint"] = "pick a checkpoint of the parent run to start from"
    elif checkpoint is not None and (problem := fork_problem(checkpoint)):
        errors["checkpoint"] = problem
    if errors or config is None:
        messages.error(request, "The run was not queued: fix the fields marked below.")
        return render_new(request, values, errors, preset=preset, name=name, parent=parent, status=400)
    fields = {"preset": preset if preset in forms.presets_data() else "", "base_model": base_model}
    try:
        if parent is not None and checkpoint is not None:
            run = parent.fork(owner=request.user, name=name, config=config, checkpoint=checkpoint)
        else:
            run = Run.create_queued(owner=request.user, name=name, config=config, dataset=dataset, **fields)
    except QuotaExceeded as e:  # the form stays as posted: nothing is lost
        return over_quota(request, e, values, preset=preset, name=name, parent=parent)
    return redirect("runs:detail", run_id=run.pk)


def over_quota(
    request: HttpRequest, refusal: QuotaExceeded, values: dict[str, Any], **form: Any
) -> HttpResponse:
    """The new-run form as posted, with the quota's refusal (runs.models.quotas) and a 409: nothing was
    queued."""
    messages.error(request, str(refusal))
    return render_new(request, values, {}, status=409, **form)


def _picked(picks: dict[str, Any] | None, key: str, posted: str | None) -> int | None:
    """The id of the catalog entry the form's menu shows selected: from the link, or as posted."""
    if picks and key in picks:
        return picks[key].pk
    return int_or_none(posted)


def _ladder_fields(request: HttpRequest, preset: str) -> dict[str, Any]:
    """The ablation ladder's own fields (compare.ladder) as posted; first shown: the demo setting on for
    the demo preset, each rung as many steps as the form's run."""
    setting = {
        "max_response_length": DEMO_LADDER_SETTING["rollout.max_response_length"],
        "buffer": DEMO_LADDER_SETTING["algorithm.overlong_buffer_len"],
        "mini_batch_size": DEMO_LADDER_SETTING["optim.mini_batch_size"],
    }
    if "ladder_steps" in request.POST:
        posted = {"demo": request.POST.get("ladder_demo") == "on", "steps": request.POST["ladder_steps"][:20]}
        return {**setting, **posted}
    return {**setting, "demo": preset == "tiny_cpu", "steps": ""}


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
    ladder_plan: dict[str, Any] | None = None,
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
        "ladder_plan": ladder_plan,
        "ladder": _ladder_fields(request, preset),
        "sweep": sweep,  # the sweep panel as posted ({% sweep_panel %}, the sweeps app), or None: empty
        "base_models": BaseModel.objects.all(),
        "datasets": Dataset.objects.select_related("created_by"),
        "picked_model": _picked(picks, "base_model", request.POST.get("base_model")),
        "picked_dataset": _picked(picks, "dataset", request.POST.get("dataset")),
    }
    return render(request, "runs/new.html", context, status=status)


@require_GET
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id)
    if run.kind == Kind.EVALUATION and request.GET.get("view") != "run":  # its results: their own page
        return redirect("runs:evaluation", run_id=run.pk)
    data = {
        "run": run_state(run) | {"queue": queue_entry(run, request.user)},
        "metrics": metric_series(run, max_points=PAGE_MAX_POINTS),
        "distributions": distribution_series(run, max_points=DISTRIBUTION_MAX_STEPS),
        "levels": list(DISTRIBUTION_LEVELS),
        "hardware": hardware_series(run),
        "samples": newest_samples(run),
    }
    owner = access.can_write(request.user, run)
    weights = access.can_use_checkpoints(request.user, run)  # a reader is offered no fork nor export
    context = {"run": run, "data": data, "config_json": run.config, "can_use_checkpoints": weights}
    context["checkpoints"] = run.checkpoints.all() if weights else []
    context["hardware_interval"] = (run.config.get("logging") or {}).get("hardware_interval_s", 5.0)
    context |= {
        "export_steps": steps_on_disk(run) if weights else [],
        "exports": run.model_exports.all()[:20],
    }
    context["data_files"] = _data_files(run)
    parent_visible = run.parent_id is not None and access.find_run(request.user, run.parent_id) is not None
    context |= {
        "is_staff": request.user.is_staff,
        "can_preempt": request.user.is_staff and not preempt_refusal(run),
        "can_write": owner,
        "notes_html": render_notes(run.notes),
        "parent_visible": parent_visible,
        "tags_text": ", ".join(run.tags or []),
        # the share form: the names this user may share with (runs.access), never every group's or user's
        **(
            {"sharing": sharing(run), **share_choices(request.user, run.shared_groups.all())} if owner else {}
        ),
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
@run_action
def run_export(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's "Export model": queue an export of one of its checkpoints into the model catalog."""
    run = run_for(request, run_id, checkpoints=True)
    if why := refusal(run, "export"):
        messages.error(request, why[0].upper() + why[1:] + ".")
        return redirect("runs:detail", run_id=run.pk)
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
@run_action
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id, write=True)
    if why := refusal(run, "cancel"):
        messages.error(request, why[0].upper() + why[1:] + ".")
        return redirect("runs:detail", run_id=run.pk)
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
@run_action
def run_resume(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id, checkpoints=True)
    if why := refusal(run, "resume"):
        messages.error(request, why[0].upper() + why[1:] + ".")
        return redirect("runs:detail", run_id=run.pk)
    step, problem = resume_step(run)
    try:
        resumed = step is not None and run.resume()
    except QuotaExceeded as e:
        resumed, problem = False, str(e)
    if resumed:
        publish(run.pk, status_event(run))
        messages.info(request, f"Resumed from the checkpoint of step {step}.", extra_tags=STATUS_NOTE)
    else:
        messages.error(request, problem or "Only a failed or cancelled run with a checkpoint can be resumed.")
    return redirect("runs:detail", run_id=run.pk)
