"""Dataset pages: the list with the upload and register forms, and the browser of one dataset's rows.

Datasets are shared catalog entries: every logged-in user sees them all and may add one. Solve rates only
count the runs the user can see. Dataset text is only ever rendered as text (autoescaped, or set with
textContent by datasets.js).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from catalog import browse, solve
from catalog.detail import reward_coverage, row_panel, statistics
from catalog.forms import RegisterForm, UploadForm
from catalog.importer import ImportFailed, import_dataset
from catalog.models import Dataset
from catalog.removal import DeleteRefused, delete_dataset, may_delete, not_allowed
from catalog.uploads import DatasetUploadHandler, max_upload_bytes
from catalog.versions import latest
from dapo.rewards import describe_rewards

MULTIPART_SLACK = 1024 * 1024
"""Bytes a multipart body may carry beyond its two files (boundaries, headers, the other fields)."""


@require_GET
def dataset_list(request: HttpRequest) -> HttpResponse:
    return _render_list(request, UploadForm(), RegisterForm())


def _render_list(
    request: HttpRequest, upload: UploadForm, register: RegisterForm, status: int = 200, refused: str = ""
) -> HttpResponse:
    datasets = _newest_of_each(request.user)
    context = {
        "datasets": datasets,
        "upload": upload,
        "register": register,
        "refused": refused,
        "max_upload_mb": max_upload_bytes() // (1024 * 1024),
        "roots": _roots(),
    }
    return render(request, "catalog/list.html", context, status=status)


def _newest_of_each(user: Any) -> list[Dataset]:
    """The newest version of each owner's dataset name (one catalog line each), with its version count
    and the user's runs that used it, for the list."""
    lines: dict[tuple[int | None, str], list[Dataset]] = {}
    for dataset in Dataset.objects.select_related("created_by").order_by("name", "-version", "pk"):
        lines.setdefault((dataset.created_by_id, dataset.name_key), []).append(dataset)
    newest = []
    for versions in lines.values():
        dataset = versions[0]
        used = solve.runs_using(dataset, user)
        dataset.used_by = sorted({*used["train"], *used["val"]}, key=lambda r: -r.pk)  # type: ignore[attr-defined]
        dataset.version_count = len(versions)  # type: ignore[attr-defined]
        newest.append(dataset)
    return newest


@csrf_exempt  # the upload handler must be in place before anything reads the body; CSRF is checked below
@require_POST
def dataset_upload(request: HttpRequest) -> HttpResponse:
    if int(request.META.get("CONTENT_LENGTH") or 0) > 2 * max_upload_bytes() + MULTIPART_SLACK:
        limit = max_upload_bytes() >> 20
        refused = f"The upload is larger than two files of {limit} MB (DAPO_MAX_UPLOAD_MB): nothing was kept."
        return _render_list(request, UploadForm(), RegisterForm(), status=413, refused=refused)
    handler = DatasetUploadHandler(request)
    request.upload_handlers = [handler]
    try:
        return _upload(request, handler)
    finally:
        handler.cleanup()  # temporary files the import did not move into place


@csrf_protect
def _upload(request: HttpRequest, handler: DatasetUploadHandler) -> HttpResponse:
    form = UploadForm(request.POST, request.FILES, too_large=handler.too_large)
    if not form.is_valid():
        return _render_list(request, form, RegisterForm(), status=400)
    return _import(request, form, keep_files=True)


@require_POST
def dataset_register(request: HttpRequest) -> HttpResponse:
    form = RegisterForm(request.POST)
    if not form.is_valid():
        return _render_list(request, UploadForm(), form, status=400)
    return _import(request, form, keep_files=False)


def _import(request: HttpRequest, form: UploadForm | RegisterForm, *, keep_files: bool) -> HttpResponse:
    data = form.cleaned_data
    try:
        dataset = import_dataset(
            data["name"],
            form.split_files(),
            description=data["description"],
            created_by=request.user,
            keep_files=keep_files,
        )
    except ImportFailed as e:
        form.add_error(None, f"Nothing was imported. {e}")
        if isinstance(form, UploadForm):
            return _render_list(request, form, RegisterForm(), status=400)
        return _render_list(request, UploadForm(), form, status=400)
    splits = ", ".join(f"{n:,} {split}" for split, n in dataset.splits.items())
    version = f" as version {dataset.version}" if dataset.version > 1 else ""
    messages.success(request, f"Imported {dataset.name}{version}: {splits} problems.")
    return redirect("catalog:detail", dataset_id=dataset.pk)


@require_GET
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    dataset = get_object_or_404(Dataset.objects.select_related("created_by"), pk=dataset_id)
    query = browse.Query.from_get(request.GET, dataset)
    runs = solve.runs_using(dataset, request.user)[query.split]
    run_ids = [r.pk for r in runs]
    page, rows = browse.page_of(dataset, query, runs)
    models = browse.models_for_templates()
    model = next((m for m in models if m.pk == query.model), models[0] if models else None)
    stats = statistics(dataset, query.split, model)
    context: dict[str, Any] = {
        "dataset": dataset,
        "query": query,
        "page": page,
        "prev_page": query.url(page=page.number - 1, row=None) if page.has_previous() else "",
        "next_page": query.url(page=page.number + 1, row=None) if page.has_next() else "",
        "sort_links": browse.sort_links(query),
        "split_tabs": browse.split_tabs(dataset, query),
        "table": browse.table(rows, query, run_ids),
        "runs": runs,
        "models": models,
        "model": model,
        "sources": stats["source_counts"],
        "solved_filters": {k: label for k, (label, _) in solve.SOLVED_FILTERS.items()},
        "stats": stats,
        "panel": row_panel(dataset, query, runs, model) if query.row is not None else None,
        "rewards": describe_rewards(),
        "reward_check": reward_coverage(dataset, query.split, query.reward) if query.reward else None,
        "versions": _versions(dataset, request.user),
        "may_delete": may_delete(dataset, request.user),
    }
    return render(request, "catalog/detail.html", context)


def _versions(dataset: Dataset, user: Any) -> list[dict[str, Any]]:
    """Every version of the dataset's name, newest first, with the runs of this user that read it."""
    out = []
    for version in dataset.versions().select_related("created_by"):
        used = solve.runs_using(version, user)
        out.append({"dataset": version, "runs": len({r.pk for r in [*used["train"], *used["val"]]})})
    return out


@require_http_methods(["GET", "POST"])
def dataset_delete(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """GET: what deleting the version removes, and a form to confirm by typing its version number (as a
    run's delete asks for the run's number). POST with that number: delete; refused while a queued or
    running run reads it, and to anyone but its creator or an administrator."""
    dataset = get_object_or_404(Dataset.objects.select_related("created_by"), pk=dataset_id)
    if not may_delete(dataset, request.user):
        messages.error(request, f"Not deleted: {not_allowed(dataset)}")
        return redirect("catalog:detail", dataset_id=dataset.pk)
    if request.method == "GET":
        return render(request, "catalog/delete.html", {"dataset": dataset})
    if request.POST.get("confirm", "").strip().lower().removeprefix("v") != str(dataset.version):
        error = f"Type the version number, {dataset.version}, to confirm."
        return render(request, "catalog/delete.html", {"dataset": dataset, "error": error}, status=400)
    try:
        message = delete_dataset(dataset, request.user)
    except DeleteRefused as e:
        messages.error(request, f"Not deleted: {e}")
        return redirect("catalog:detail", dataset_id=dataset.pk)
    messages.success(request, message)
    remaining = latest(dataset.name, dataset.created_by)
    return redirect("catalog:detail", dataset_id=remaining.pk) if remaining else redirect("catalog:datasets")


def _roots() -> list[str]:
    return [str(r) for r in settings.DAPO_DATASET_ROOTS]
